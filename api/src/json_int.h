// Integer members of the API's JSON, read one way by every type here.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

namespace fleet::api {

// `v` as an int64: a JSON integer, or a whole float such as 60.0 (the API server takes it for an
// integer, and a client may write one). nullopt for anything else, and for a number past int64
// (10000000000000000000 is not read as a negative number).
inline std::optional<int64_t> AsInt64(const nlohmann::json& v) {
  if (v.is_number_unsigned()) {
    const auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
    return static_cast<int64_t>(u);
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (!v.is_number_float()) return std::nullopt;
  const double d = v.get<double>();
  constexpr double kPastInt64 = 9223372036854775808.0;   // 2^63
  if (std::trunc(d) != d || d < -kPastInt64 || d >= kPastInt64) return std::nullopt;
  return static_cast<int64_t>(d);
}

}  // namespace fleet::api
