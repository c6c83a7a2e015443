// The regular expressions a user gives FleetJob (spec.sidecar.patterns; fleet-sidecar's --pattern
// and --main-process-match) run on RE2. std::regex backtracks (a pattern such as (a*)*b takes time
// exponential in the text) and recurses once per character (a long log line overflows the stack);
// RE2 matches in time linear in the text and in bounded memory, whatever the pattern.
//
// The syntax is RE2's: Perl's, without backreferences or lookaround. Bytes are characters
// (Latin-1), as they were for std::regex on char: a pattern's UTF-8 text matches the same bytes in
// a line, and a line's invalid UTF-8 is matched like any other byte.
#pragma once

#include <memory>
#include <string_view>

#include "fleet/base/result.h"

namespace re2 {
class RE2;
}  // namespace re2

namespace fleet::api {

// The compiled expression, or RE2's reason it is not one (e.g. "missing ]: [").
Result<std::shared_ptr<const re2::RE2>> CompileUserRegex(std::string_view source);

}  // namespace fleet::api
