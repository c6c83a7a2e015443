// PlainHttpClient: requests to an HTTP service that is not the Kubernetes API (fleetrun talks to
// etcd's JSON gateway with it), over the Boost.Beast transport of CreateLiteClient: connections
// reused, every request bounded in time (options.request_timeout, or the caller's earlier
// deadline: connecting, sending and the whole answer), in its response head (64 KiB, Beast's
// header limit), in what it buffers unparsed (a head and one read: a chunk header without end
// fails there) and in its body (options.max_response_bytes, checked as it arrives). So a server
// that answers slowly, never, or without end costs the caller a deadline and a few hundred KiB,
// never more. None of the API semantics: no retries, no tokens, and every HTTP status is a reply
// for the caller to judge. Thread-safe. (fleet::kube_lite only.)
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "fleet/kube/client.h"

namespace fleet::kube {

struct PlainHttpReply {
  int status = 0;
  std::string body;
};

class PlainHttpClient {
 public:
  using Deadline = std::chrono::steady_clock::time_point;

  virtual ~PlainHttpClient() = default;
  // `server`: "http://host:port". kConfig when it is not an http:// URL.
  static StatusOr<std::unique_ptr<PlainHttpClient>> Create(const std::string& server, const ClientOptions& options);
  // POSTs a JSON body to `path`, done by `deadline` and within options.request_timeout, whichever
  // comes first. kUnavailable when no whole answer came by then (connection refused, timeout, a
  // head over the limit), kMalformed when the body exceeds max_response_bytes.
  virtual StatusOr<PlainHttpReply> PostJson(const std::string& path, const std::string& json_body,
                                            Deadline deadline = Deadline::max()) = 0;
};

}  // namespace fleet::kube
