// PlainHttpClient: requests to an HTTP service that is not the Kubernetes API (fleetrun talks to
// etcd's JSON gateway with it), over the cpprestsdk transport of Client::Create: connections
// reused, one deadline per request (options.request_timeout), bodies capped at
// options.max_response_bytes while they download. None of the API semantics: no retries, no
// tokens, and every HTTP status is a reply for the caller to judge. Thread-safe. (fleet::kube only.)
#pragma once

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
  virtual ~PlainHttpClient() = default;
  // `server`: "http://host:port". kConfig when it is not an http:// URL.
  static StatusOr<std::unique_ptr<PlainHttpClient>> Create(const std::string& server, const ClientOptions& options);
  // POSTs a JSON body to `path`. kUnavailable when no whole answer came in time (connection
  // refused, timeout), kMalformed when the answer exceeds max_response_bytes.
  virtual StatusOr<PlainHttpReply> PostJson(const std::string& path, const std::string& json_body) = 0;
};

}  // namespace fleet::kube
