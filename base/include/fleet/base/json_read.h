// How every component reads JSON members, one way for all of them: a member of another type (or an
// integer outside the target's range) reads as unset, never as a wrapped or converted value.
// As values (MemberAs), or by reference where copying would cost (the *Member functions: objects
// of 10,000 pods are read at every reconcile).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace fleet {

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

// The same, within T's range.
template <typename T>
std::optional<T> AsInt(const nlohmann::json& v) {
  const auto n = AsInt64(v);
  if (!n || *n < std::numeric_limits<T>::min() || *n > std::numeric_limits<T>::max()) return std::nullopt;
  return static_cast<T>(*n);
}

// Any JSON number: an API server may write 3.0 back as 3.
inline std::optional<double> AsNumber(const nlohmann::json& v) {
  return v.is_number() ? std::optional<double>(v.get<double>()) : std::nullopt;
}

inline std::optional<std::string> AsString(const nlohmann::json& v) {
  return v.is_string() ? std::optional<std::string>(v.get<std::string>()) : std::nullopt;
}

inline std::optional<bool> AsBool(const nlohmann::json& v) {
  return v.is_boolean() ? std::optional<bool>(v.get<bool>()) : std::nullopt;
}

// `object`'s member `name`; null when `object` is not an object or has no such member.
inline const nlohmann::json* Member(const nlohmann::json& object, const char* name) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(name);
  return it == object.end() ? nullptr : &*it;
}

// That member read by `as` (one of the above); unset when there is none.
template <typename As>
auto MemberAs(const nlohmann::json& object, const char* name, As as) -> decltype(as(object)) {
  const nlohmann::json* member = Member(object, name);
  return member ? as(*member) : std::nullopt;
}

// `object`'s member `name`, or a null value.
inline const nlohmann::json& MemberOrNull(const nlohmann::json& object, const char* name) {
  static const nlohmann::json kNull;
  const nlohmann::json* member = Member(object, name);
  return member ? *member : kNull;
}

// `object`'s member `name` when it is an object (an array, a string), else an empty one.
inline const nlohmann::json& ObjectMember(const nlohmann::json& object, const char* name) {
  static const nlohmann::json kEmpty = nlohmann::json::object();
  const nlohmann::json* member = Member(object, name);
  return member && member->is_object() ? *member : kEmpty;
}
inline const nlohmann::json& ArrayMember(const nlohmann::json& object, const char* name) {
  static const nlohmann::json kEmpty = nlohmann::json::array();
  const nlohmann::json* member = Member(object, name);
  return member && member->is_array() ? *member : kEmpty;
}
inline const std::string& StringMember(const nlohmann::json& object, const char* name) {
  static const std::string kEmpty;
  const nlohmann::json* member = Member(object, name);
  return member && member->is_string() ? member->get_ref<const std::string&>() : kEmpty;
}

}  // namespace fleet
