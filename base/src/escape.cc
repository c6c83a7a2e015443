#include "fleet/base/escape.h"

#include <cstdio>

namespace fleet {
namespace {

// How many bytes the UTF-8 sequence at text[i] takes; 0 when it is not a valid one (a stray
// continuation byte, a truncated or overlong sequence, a surrogate, past U+10FFFF).
size_t Utf8Length(std::string_view text, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(text[k]); };
  const unsigned char lead = byte(i);
  if (lead < 0x80) return 1;
  size_t n = 0;
  unsigned int min = 0, cp = 0;
  if ((lead & 0xE0) == 0xC0) n = 2, min = 0x80, cp = lead & 0x1Fu;
  else if ((lead & 0xF0) == 0xE0) n = 3, min = 0x800, cp = lead & 0x0Fu;
  else if ((lead & 0xF8) == 0xF0) n = 4, min = 0x10000, cp = lead & 0x07u;
  else return 0;
  if (i + n > text.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3Fu);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return n;
}

}  // namespace

bool IsUtf8(std::string_view text) {
  for (size_t i = 0, n = 0; i < text.size(); i += n) {
    n = Utf8Length(text, i);
    if (n == 0) return false;
  }
  return true;
}

std::string EscapeControl(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  char escape[8];
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    const size_t n = Utf8Length(text, i);
    if (n == 0) {   // not UTF-8: a lone byte such as 0x9b would be a C1 CSI to an 8-bit terminal
      std::snprintf(escape, sizeof escape, "\\x%02x", static_cast<unsigned int>(c));
      out += escape;
      ++i;
    } else if (n == 2 && c == 0xC2 && static_cast<unsigned char>(text[i + 1]) < 0xA0) {   // C1
      std::snprintf(escape, sizeof escape, "\\u%04x", static_cast<unsigned int>(text[i + 1] & 0xFF));
      out += escape;
      i += 2;
    } else if (c == '\n' || c == '\r' || c == '\t') {
      out += c == '\n' ? "\\n" : c == '\r' ? "\\r" : "\\t";
      ++i;
    } else if (c < 0x20 || c == 0x7F) {
      std::snprintf(escape, sizeof escape, "\\x%02x", static_cast<unsigned int>(c));
      out += escape;
      ++i;
    } else {
      out.append(text.substr(i, n));
      i += n;
    }
  }
  return out;
}

std::string BoundText(std::string_view text, size_t max_bytes) {
  if (text.size() <= max_bytes) return std::string(text);
  static constexpr std::string_view kCut = "...";
  if (max_bytes < kCut.size()) return std::string(kCut.substr(0, max_bytes));
  size_t end = max_bytes - kCut.size();
  // Back to the start of the character that `end` falls in (continuation bytes are 10xxxxxx).
  while (end > 0 && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) --end;
  return std::string(text.substr(0, end)) + std::string(kCut);
}

}  // namespace fleet
