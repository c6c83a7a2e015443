// Result<T>: a value or a human-readable error; Status: success or an error. Errors in FleetJob are
// user-facing (they end up as one-line messages from fleetrun, fleetctl or a flag parser, or as a
// FleetJob condition), so an error is just its message; callers that need to branch on a kind use
// a dedicated enum next to the API (kube::ApiStatus, ps::Status).
//
// Passing an error up unchanged reads as one line, in the shape of absl's status macros:
//   FLEET_RETURN_IF_ERROR(ValidateJob(job));
//   FLEET_ASSIGN_OR_RETURN(Endpoint endpoint, ParseEndpoint(text));
// Where the caller adds context ("--foo: " + r.error()) it writes the `if` out.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace fleet {

struct Error {
  std::string message;
};

// What every "a value or an error" type shares: the value and its accessors. The error part is
// the derived type's own (a message here, kube::ApiStatus in kube::StatusOr).
template <typename T>
class ValueOr {
 public:
  bool ok() const { return value_.has_value(); }
  explicit operator bool() const { return ok(); }

  const T& value() const& { return *value_; }
  T& value() & { return *value_; }
  T&& value() && { return std::move(*value_); }
  const T& operator*() const& { return *value_; }
  T& operator*() & { return *value_; }
  const T* operator->() const { return &*value_; }
  T* operator->() { return &*value_; }

 protected:
  ValueOr() = default;
  explicit ValueOr(T value) : value_(std::move(value)) {}

 private:
  std::optional<T> value_;
};

template <typename T>
class [[nodiscard]] Result : public ValueOr<T> {
 public:
  Result(T value) : ValueOr<T>(std::move(value)) {}  // NOLINT: implicit by design, like absl::StatusOr
  Result(Error error) : error_(std::move(error.message)) {}  // NOLINT

  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

// Result<void> equivalent: empty on success.
using Status = Result<std::monostate>;
inline Status OkStatus() { return Status(std::monostate{}); }

}  // namespace fleet

// Evaluates `expr` (any Result or Status); on an error, returns that error from the enclosing
// function, which returns some Result or Status.
#define FLEET_RETURN_IF_ERROR(expr)                                                 \
  do {                                                                              \
    if (auto fleet_result_ = (expr); !fleet_result_.ok()) {                         \
      return ::fleet::Error{fleet_result_.error()};                                 \
    }                                                                               \
  } while (false)

// Evaluates `expr` (a Result<T>); on success moves its value into `lhs`, which may declare a
// variable (`auto port`), else returns the error from the enclosing function. Expands to several
// statements: not for the body of an unbraced `if`.
#define FLEET_ASSIGN_OR_RETURN(lhs, expr) \
  FLEET_ASSIGN_OR_RETURN_IMPL_(FLEET_RESULT_CONCAT_(fleet_result_, __LINE__), lhs, expr)

#define FLEET_RESULT_CONCAT_INNER_(a, b) a##b
#define FLEET_RESULT_CONCAT_(a, b) FLEET_RESULT_CONCAT_INNER_(a, b)
#define FLEET_ASSIGN_OR_RETURN_IMPL_(result, lhs, expr)        \
  auto result = (expr);                                        \
  if (!result.ok()) return ::fleet::Error{result.error()};    \
  lhs = std::move(result).value()
