// Endpoints as Paddle writes them: "host:port", lists comma-joined. Paddle splits on ':' and ',',
// so a host may not contain either (no IPv6 literals) and a list may not contain spaces that Paddle
// would keep as part of a host. Parsing is strict so that a bad list is refused before any process
// or pod exists, with a message that names the offending entry.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "fleet/base/result.h"

namespace fleet {

struct Endpoint {
  std::string host;
  int port = 0;

  std::string ToString() const;
  friend bool operator==(const Endpoint& a, const Endpoint& b) {
    return a.port == b.port && a.host == b.host;
  }
  friend bool operator!=(const Endpoint& a, const Endpoint& b) { return !(a == b); }
};

// Parses a decimal TCP port in [1, 65535]; `what` names the value in the error.
Result<int> ParsePort(std::string_view text, std::string_view what);

// "host:port" -> Endpoint. Errors name the entry: "endpoint '10.0.0.1' has no port", ...
Result<Endpoint> ParseEndpoint(std::string_view text);

// "a:1,b:2" -> endpoints; an empty string is an empty list. Whitespace around entries is trimmed.
// Duplicates are refused: two processes cannot listen on one endpoint.
Result<std::vector<Endpoint>> ParseEndpointList(std::string_view text);

// Parses a list whose entries are "host" or "host:port", all of one form. Entries without a port
// come back with port 0 for the caller to assign (Paddle's launcher allows bare worker IPs).
Result<std::vector<Endpoint>> ParseEndpointListPortsOptional(std::string_view text);

std::string JoinEndpoints(const std::vector<Endpoint>& endpoints);

// Validates a host as Paddle can use it (non-empty, no ':' or ',' or whitespace).
Result<std::string> ParseHost(std::string_view text);

}  // namespace fleet
