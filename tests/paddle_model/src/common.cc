#include "common.h"

#include <cctype>

namespace fleet::paddle_model::detail {

std::vector<std::string> Split(std::string_view text, char sep) {
  std::vector<std::string> parts;
  std::size_t start = 0;
  while (true) {
    const std::size_t end = text.find(sep, start);
    parts.emplace_back(text.substr(start, end - start));
    if (end == std::string_view::npos) return parts;
    start = end + 1;
  }
}

std::string Join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string joined;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) joined += sep;
    joined += parts[i];
  }
  return joined;
}

std::optional<long long> PyInt(std::string_view text) {
  const std::string stripped = PyStrip(text, " \t\n\r\f\v");
  std::size_t i = 0;
  bool negative = false;
  if (i < stripped.size() && (stripped[i] == '+' || stripped[i] == '-')) negative = stripped[i++] == '-';
  if (i == stripped.size() || stripped.size() - i > 18) return std::nullopt;
  long long value = 0;
  for (; i < stripped.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(stripped[i]))) return std::nullopt;
    value = value * 10 + (stripped[i] - '0');
  }
  return negative ? -value : value;
}

std::string PyStrip(std::string_view text, std::string_view chars) {
  const std::size_t first = text.find_first_not_of(chars);
  if (first == std::string_view::npos) return "";
  const std::size_t last = text.find_last_not_of(chars);
  return std::string(text.substr(first, last - first + 1));
}

std::optional<bool> PyStrToBool(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* yes : {"y", "yes", "t", "true", "on", "1"}) {
    if (lower == yes) return true;
  }
  for (const char* no : {"n", "no", "f", "false", "off", "0"}) {
    if (lower == no) return false;
  }
  return std::nullopt;
}

std::optional<std::string> Lookup(const Env& env, const std::string& name) {
  const auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

std::string HostOf(std::string_view endpoint) {
  return std::string(endpoint.substr(0, endpoint.find(':')));
}

}  // namespace fleet::paddle_model::detail
