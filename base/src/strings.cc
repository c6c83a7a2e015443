#include "fleet/base/strings.h"

#include <charconv>

namespace fleet {

std::vector<std::string> SplitString(std::string_view text, char separator) {
  std::vector<std::string> parts;
  size_t start = 0;
  while (true) {
    size_t pos = text.find(separator, start);
    parts.emplace_back(text.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) break;
    start = pos + 1;
  }
  return parts;
}

std::string_view TrimWhitespace(std::string_view text) {
  const char* ws = " \t\r\n";
  size_t begin = text.find_first_not_of(ws);
  if (begin == std::string_view::npos) return {};
  size_t end = text.find_last_not_of(ws);
  return text.substr(begin, end - begin + 1);
}

std::string JoinStrings(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += separator;
    out += parts[i];
  }
  return out;
}

std::string Quote(std::string_view text) { return "'" + std::string(text) + "'"; }

Result<int> ParseNonNegativeInt(std::string_view text, std::string_view what) {
  int value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  // from_chars accepts a leading '-' ("-0" would pass): digits only.
  if (text.empty() || text[0] < '0' || text[0] > '9' || ec != std::errc() || ptr != end) {
    return Error{std::string(what) + " must be a non-negative integer, got " + Quote(text)};
  }
  return value;
}

}  // namespace fleet
