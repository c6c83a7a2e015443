// The parameter server's status: a canonical code (the same numbering as gRPC's, so that an RPC
// status maps over unchanged) and a message for people. OK is cheap.
//   InvalidArgument / OutOfRange / NotFound: the request is wrong; don't retry it.
//   FailedPrecondition: the server's state refuses it (a stopped trainer, a broken sync step).
//   ResourceExhausted: over a size limit.
//   PermissionDenied: outside what the server lets a peer do (a save outside its save root).
//   Unavailable / DeadlineExceeded: a server is gone or did not answer in time.
#pragma once

#include <string>
#include <utility>

namespace fleet::ps {

enum class Code {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
};

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "INVALID_ARGUMENT: table 3 has no row ..." ("OK" when ok).
  std::string ToString() const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

const char* CodeName(Code code);

inline Status InvalidArgument(std::string m) { return Status(Code::kInvalidArgument, std::move(m)); }
inline Status NotFound(std::string m) { return Status(Code::kNotFound, std::move(m)); }
inline Status FailedPrecondition(std::string m) { return Status(Code::kFailedPrecondition, std::move(m)); }
inline Status OutOfRange(std::string m) { return Status(Code::kOutOfRange, std::move(m)); }
inline Status PermissionDenied(std::string m) { return Status(Code::kPermissionDenied, std::move(m)); }
inline Status ResourceExhausted(std::string m) { return Status(Code::kResourceExhausted, std::move(m)); }
inline Status Unavailable(std::string m) { return Status(Code::kUnavailable, std::move(m)); }
inline Status Aborted(std::string m) { return Status(Code::kAborted, std::move(m)); }
inline Status Internal(std::string m) { return Status(Code::kInternal, std::move(m)); }
inline Status DataLoss(std::string m) { return Status(Code::kDataLoss, std::move(m)); }

}  // namespace fleet::ps
