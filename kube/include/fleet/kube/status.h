// ApiStatus: the outcome of a call to the Kubernetes API, mapped from HTTP status codes and the
// API's own Status bodies to a small set of codes with retry guidance (like absl::Status):
//   kNotFound, kAlreadyExists, kConflict, kInvalid, kGone, kBadRequest, kUnauthorized, kForbidden:
//     the request is wrong for the current state; retrying it unchanged will not help.
//   kTooManyRequests (429, honour retry_after), kUnavailable (5xx, connection errors, timeouts):
//     transient; the client retries these itself with jittered backoff before returning them.
//   kMalformed: the server's answer could not be understood (truncated, not JSON, too large, wrong
//     content type). kCancelled: the caller's cancellation token fired.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fleet/base/result.h"

namespace fleet::kube {

enum class Code {
  kOk,
  kNotFound,
  kAlreadyExists,
  kConflict,
  kInvalid,
  kGone,
  kBadRequest,
  kUnauthorized,
  kForbidden,
  kTooManyRequests,
  kUnavailable,
  kMalformed,
  kCancelled,
  kConfig,  // no usable cluster configuration
};

const char* CodeName(Code code);

struct StatusCause {
  std::string type;     // e.g. FieldValueRequired
  std::string field;    // e.g. spec.containers
  std::string message;
};

class [[nodiscard]] ApiStatus {
 public:
  ApiStatus() = default;  // OK
  ApiStatus(Code code, std::string message, int http_status = 0)
      : code_(code), message_(std::move(message)), http_status_(http_status) {}

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  int http_status() const { return http_status_; }
  const std::string& reason() const { return reason_; }   // the API's reason, e.g. "Expired"
  const std::vector<StatusCause>& causes() const { return causes_; }
  std::optional<std::chrono::seconds> retry_after() const { return retry_after_; }
  // Transient: worth retrying the same request later (429 and 5xx/connection/timeouts).
  bool IsRetryable() const { return code_ == Code::kTooManyRequests || code_ == Code::kUnavailable; }
  std::string ToString() const;

  ApiStatus& WithReason(std::string reason) { reason_ = std::move(reason); return *this; }
  ApiStatus& WithCauses(std::vector<StatusCause> causes) { causes_ = std::move(causes); return *this; }
  ApiStatus& WithRetryAfter(std::chrono::seconds after) { retry_after_ = after; return *this; }

 private:
  Code code_ = Code::kOk;
  std::string message_;
  int http_status_ = 0;
  std::string reason_;
  std::vector<StatusCause> causes_;
  std::optional<std::chrono::seconds> retry_after_;
};

// Maps an HTTP status and the response body (an API Status object when the server sent one) to an
// ApiStatus. Bodies that are not a Status keep the HTTP mapping and a trimmed excerpt as message.
ApiStatus StatusFromResponse(int http_status, const std::string& body,
                             std::optional<std::chrono::seconds> retry_after = std::nullopt);

template <typename T>
class [[nodiscard]] StatusOr : public ValueOr<T> {
 public:
  StatusOr(T value) : ValueOr<T>(std::move(value)) {}            // NOLINT: implicit by design
  StatusOr(ApiStatus status) : status_(std::move(status)) {}     // NOLINT
  const ApiStatus& status() const { return status_; }

 private:
  ApiStatus status_;
};

}  // namespace fleet::kube
