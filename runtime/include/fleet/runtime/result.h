// Result<T>: a value or a human-readable error. Errors in the contract library are user-facing
// (they end up as one-line messages from fleetrun or as a FleetJob condition), so an error is just
// its message; callers that need to branch on a kind use a dedicated enum next to the API.
#pragma once

#include <optional>
#include <variant>
#include <string>
#include <utility>

namespace fleet {

struct Error {
  std::string message;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design, like absl::StatusOr
  Result(Error error) : error_(std::move(error.message)) {}  // NOLINT

  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }

  const T& value() const& { return *value_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const T& operator*() const& { return *value_; }
  T& operator*() & { return *value_; }
  const T* operator->() const { return &*value_; }
  T* operator->() { return &*value_; }

  const std::string& error() const { return error_; }

 private:
  std::optional<T> value_;
  std::string error_;
};

// Result<void> equivalent: empty on success.
using Status = Result<std::monostate>;
inline Status OkStatus() { return Status(std::monostate{}); }

}  // namespace fleet
