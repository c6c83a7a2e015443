// Helpers shared by the launcher models: Python's str/int semantics the launchers rely on.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "paddle_model/paddle_model.h"

namespace fleet::paddle_model::detail {

inline bool AtLeast(Version version, Version first) {
  return static_cast<int>(version) >= static_cast<int>(first);
}

// str.split(sep): an empty string gives one empty field.
std::vector<std::string> Split(std::string_view text, char sep);
std::string Join(const std::vector<std::string>& parts, std::string_view sep);

// int(text): surrounding whitespace, an optional sign, decimal digits; nullopt where Python raises.
std::optional<long long> PyInt(std::string_view text);

// str.strip(chars): drops any of those characters (not that prefix) from both ends.
std::string PyStrip(std::string_view text, std::string_view chars);

// distutils strtobool: y/yes/t/true/on/1 and n/no/f/false/off/0, any case; nullopt where it raises.
std::optional<bool> PyStrToBool(std::string_view text);

std::optional<std::string> Lookup(const Env& env, const std::string& name);

// The host part of "host:port" (all of it without a colon).
std::string HostOf(std::string_view endpoint);

}  // namespace fleet::paddle_model::detail
