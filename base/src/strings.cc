#include "fleet/base/strings.h"

#include <algorithm>
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

std::optional<double> ParsePositiveSeconds(std::string_view text) {
  double value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || text[0] == '-' || ec != std::errc() || ptr != end || !(value > 0) || value > 1e7) {
    return std::nullopt;
  }
  return value;
}

std::string EncodeBase64(std::string_view bytes) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t n = std::min<size_t>(3, bytes.size() - i);
    unsigned int group = 0;
    for (size_t k = 0; k < 3; ++k) {
      group = (group << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
    }
    for (size_t k = 0; k < 4; ++k) {
      out.push_back(k <= n ? kAlphabet[(group >> (18 - 6 * k)) & 0x3Fu] : '=');
    }
  }
  return out;
}

std::optional<std::string> DecodeBase64(std::string_view in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  std::string out;
  unsigned int bits = 0;
  int nbits = 0;
  size_t symbols = 0;
  bool padding = false;
  for (char c : in) {
    if (c == ' ' || c == '\n' || c == '\r' || c == '\t') continue;
    if (c == '=') {
      padding = true;
      continue;
    }
    const int v = value(c);
    if (v < 0 || padding) return std::nullopt;  // bad character, or data after padding
    bits = (bits << 6) | static_cast<unsigned int>(v);
    nbits += 6;
    ++symbols;
    if (nbits >= 8) {
      nbits -= 8;
      out.push_back(static_cast<char>((bits >> nbits) & 0xFFu));
    }
  }
  if (symbols % 4 == 1) return std::nullopt;  // a lone trailing symbol cannot encode a byte
  return out;
}

}  // namespace fleet
