// String helpers used across components: splitting and joining lists, trimming, quoting a value
// in a message, strict integer parsing, base64.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fleet/base/result.h"

namespace fleet {

// "a,,b" -> {"a", "", "b"}; "" -> {""}: empty entries are kept for the caller to judge.
std::vector<std::string> SplitString(std::string_view text, char separator);
// Without leading and trailing spaces, tabs, CRs and LFs.
std::string_view TrimWhitespace(std::string_view text);
std::string JoinStrings(const std::vector<std::string>& parts, std::string_view separator);
// 'text', as messages show a value the user gave.
std::string Quote(std::string_view text);
// Parses a non-negative decimal integer; no sign, no whitespace, no overflow. `what` names the
// value in the error.
Result<int> ParseNonNegativeInt(std::string_view text, std::string_view what);
// A positive decimal number of seconds (fractions allowed: "0.5"), at most 1e7 (115 days: more is a
// typo, and it keeps any conversion to milliseconds in range); nullopt for anything else, including
// signs, whitespace, "inf" and "nan". Callers word the error: they know which flag or variable it was.
std::optional<double> ParsePositiveSeconds(std::string_view text);
// Standard base64 (RFC 4648, with padding), as kubeconfig's *-data fields and etcd's JSON API use it.
std::string EncodeBase64(std::string_view bytes);
// Whitespace ignored, padding optional; nullopt for anything else that is not base64.
std::optional<std::string> DecodeBase64(std::string_view text);

}  // namespace fleet
