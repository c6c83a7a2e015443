#include "fleet/runtime/endpoint.h"

#include <charconv>
#include <set>

#include "fleet/base/strings.h"

namespace fleet {
namespace {

Result<std::vector<Endpoint>> ParseList(std::string_view text, bool port_optional) {
  std::vector<Endpoint> endpoints;
  if (TrimWhitespace(text).empty()) return endpoints;
  std::set<std::pair<std::string, int>> seen;
  int with_port = 0;
  for (const std::string& raw : SplitString(text, ',')) {
    std::string_view entry = TrimWhitespace(raw);
    if (entry.empty()) return Error{"endpoint list " + Quote(text) + " has an empty entry"};
    Endpoint endpoint;
    if (port_optional && entry.find(':') == std::string_view::npos) {
      FLEET_ASSIGN_OR_RETURN(endpoint.host, ParseHost(entry));
    } else {
      FLEET_ASSIGN_OR_RETURN(endpoint, ParseEndpoint(entry));
      ++with_port;
    }
    endpoints.push_back(endpoint);
  }
  if (with_port != 0 && with_port != static_cast<int>(endpoints.size())) {
    return Error{"endpoint list " + Quote(text) +
                 " mixes entries with and without ports; give a port for every entry or for none"};
  }
  for (const Endpoint& e : endpoints) {
    if (e.port == 0) continue;  // bare hosts repeat legitimately (several workers on one node)
    if (!seen.emplace(e.host, e.port).second) {
      return Error{"endpoint " + Quote(e.ToString()) + " appears twice in " + Quote(text)};
    }
  }
  return endpoints;
}

}  // namespace

std::string Endpoint::ToString() const { return host + ":" + std::to_string(port); }

Result<int> ParsePort(std::string_view text, std::string_view what) {
  long value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    return Error{std::string(what) + " has a port that is not a number: " + Quote(text)};
  }
  if (value < 1 || value > 65535) {
    return Error{std::string(what) + " has port " + std::string(text) + ", out of range 1-65535"};
  }
  return static_cast<int>(value);
}

Result<std::string> ParseHost(std::string_view text) {
  if (text.empty()) return Error{"empty host name"};
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == ':' || c == ',' || c == ';' || c == ' ' || byte < 0x20 || byte == 0x7f) {
      return Error{"host " + Quote(text) +
                   " contains a character Paddle cannot parse in an endpoint (':' ',' ';', space or a control character)"};
    }
  }
  return std::string(text);
}

Result<Endpoint> ParseEndpoint(std::string_view text) {
  std::string_view entry = TrimWhitespace(text);
  size_t colon = entry.find(':');
  if (colon == std::string_view::npos) {
    return Error{"endpoint " + Quote(entry) + " has no port (expected host:port)"};
  }
  if (entry.find(':', colon + 1) != std::string_view::npos) {
    return Error{"endpoint " + Quote(entry) +
                 " has more than one ':' (IPv6 literals cannot be used: Paddle splits on ':')"};
  }
  auto host = ParseHost(entry.substr(0, colon));
  if (!host) return Error{"endpoint " + Quote(entry) + ": " + host.error()};
  FLEET_ASSIGN_OR_RETURN(auto port, ParsePort(entry.substr(colon + 1), "endpoint " + Quote(entry)));
  return Endpoint{*host, port};
}

Result<std::vector<Endpoint>> ParseEndpointList(std::string_view text) {
  return ParseList(text, /*port_optional=*/false);
}

Result<std::vector<Endpoint>> ParseEndpointListPortsOptional(std::string_view text) {
  return ParseList(text, /*port_optional=*/true);
}

std::string JoinEndpoints(const std::vector<Endpoint>& endpoints) {
  std::string out;
  for (size_t i = 0; i < endpoints.size(); ++i) {
    if (i) out += ',';
    out += endpoints[i].ToString();
  }
  return out;
}

}  // namespace fleet
