// Internal to fleet::kube: what makes a Client a Kubernetes client — request paths and queries,
// bearer tokens, rate limiting, retries, status mapping, response checks, watch streams — written
// once over an HttpTransport that only moves bytes. Client::Create puts it over cpprestsdk
// (rest_client.cc), CreateLiteClient over Boost.Beast (lite_client.cc): the two behave alike
// because everything above the transport is this code.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "fleet/kube/client.h"

namespace fleet::kube::internal {

using Clock = std::chrono::steady_clock;

// How often a blocked wait looks at a CancelToken (the "within ~20 ms" of Client::Watch).
constexpr std::chrono::milliseconds kCancelPoll{20};
// The most a body read hands over at once.
constexpr size_t kReadChunk = 64 * 1024;

// How a request may be repeated after a transient failure (see client.h, "Retries").
enum class Repeat { kAlways, kOnlyRejected };

struct HttpRequest {
  HttpRequest(std::string m, std::string t, std::optional<std::string> b = std::nullopt)
      : method(std::move(m)), target(std::move(t)), body(std::move(b)) {}
  std::string method;               // "GET", "POST", ...
  std::string target;               // the path below the server URL, with the query
  std::optional<std::string> body;
  std::string content_type = "application/json";
  Repeat repeat = Repeat::kAlways;  // for the retry loop; transports ignore it
};

// "GET /api/v1/..." for messages.
std::string Describe(const HttpRequest& request);

// The parts of a response head a client looks at.
struct HttpHead {
  int status = 0;
  std::string content_type;
  std::optional<uint64_t> content_length;
  std::optional<std::chrono::seconds> retry_after;
};

// A finished exchange (any status code).
struct HttpReply {
  HttpHead head;
  std::string body;
};

// A response whose head has arrived and whose body is read as it comes (a watch, an error answer
// to one). Destroying it before the end of the body abandons the exchange and closes its
// connection, which also stops a server that is still sending.
class HttpStream {
 public:
  virtual ~HttpStream() = default;
  const HttpHead& head() const { return head_; }
  // Appends up to `max_bytes` (> 0) of the body to *out: what has arrived, else blocks for more.
  // Sets *eof at the end of the body. kUnavailable when the connection failed, `deadline` passed
  // or nothing arrived for the stream's idle timeout; kCancelled when `cancel` fired.
  virtual ApiStatus Read(std::string* out, size_t max_bytes, Clock::time_point deadline, const CancelToken* cancel,
                         bool* eof) = 0;

 protected:
  HttpHead head_;
};

// Moves requests and responses; knows nothing of the Kubernetes API. Thread-safe.
class HttpTransport {
 public:
  virtual ~HttpTransport() = default;
  // One attempt: the status line, headers and the whole body within the client's
  // request_timeout, the body capped at max_response_bytes (a larger one is TooLarge). Every
  // status code is a reply; failures to get one are kUnavailable.
  virtual StatusOr<HttpReply> RoundTrip(const HttpRequest& request, const std::string& token) = 0;
  // Sends `request` and waits for the response head until `deadline` (kUnavailable) or `cancel`
  // (kCancelled). Reading the body then fails after `idle` without data.
  virtual StatusOr<std::unique_ptr<HttpStream>> Open(const HttpRequest& request, const std::string& token,
                                                     Clock::time_point deadline, const CancelToken* cancel,
                                                     std::chrono::milliseconds idle) = 0;
};

// The value of a Retry-After header in seconds; nullopt for the HTTP-date form or nonsense (our
// own backoff applies then).
std::optional<std::chrono::seconds> ParseRetryAfter(std::string_view value);

// kMalformed: "<what>: the response exceeds the limit of <limit> bytes".
ApiStatus TooLarge(const std::string& what, size_t limit, int http_status = 0);

// The whole body of `stream`, at most `limit` bytes (checked against Content-Length before
// reading, then while reading): TooLarge beyond it, read errors prefixed with `what`.
StatusOr<std::string> ReadAll(HttpStream& stream, const std::string& what, size_t limit, Clock::time_point deadline,
                              const CancelToken* cancel);

// The checks every factory makes before building a transport: a server, and sane options.
ApiStatus CheckClientSetup(const ClusterConfig& config, const ClientOptions& options);

// The Client over `transport`.
std::shared_ptr<Client> NewApiClient(ClusterConfig config, ClientOptions options,
                                     std::unique_ptr<HttpTransport> transport);

}  // namespace fleet::kube::internal
