// Text from outside (a job's spec, a sidecar's report, a trainer's log) made safe to print: escaped
// for one line of a terminal or a log, and bounded.
#pragma once

#include <string>
#include <string_view>

namespace fleet {

// Every control character - C0 (newline, ESC, BEL...), DEL, C1 (U+0080..U+009F) - and every byte
// that is not part of valid UTF-8 written as an escape ("\n", "\r", "\t", "\x1b", "\u009b"), so
// that it can neither start a line nor drive the terminal. Printable UTF-8 passes unchanged, and so
// does a backslash: the result is for people, and escaping it again changes nothing.
std::string EscapeControl(std::string_view text);

// Whether `text` is valid UTF-8 throughout (no stray, truncated or overlong sequence, surrogate,
// or code point past U+10FFFF), as Python's strict "utf-8" decoder accepts it.
bool IsUtf8(std::string_view text);

// `text` cut to at most `max_bytes` bytes at a UTF-8 character boundary, "..." ending what was cut
// (within the bound): how much of an outside string a status or a line keeps.
std::string BoundText(std::string_view text, size_t max_bytes);

}  // namespace fleet
