// PeerProber: "does every server accept a TCP connection yet?" One round tries one connection to
// each endpoint, all at once (non-blocking connects under one poll), and closes them at once.
//
// Hosts are resolved first: IP literals directly, names (Service mode publishes DNS names) with
// getaddrinfo on a detached thread per name, because getaddrinfo cannot be cancelled or given a
// deadline. A lookup that outlasts its round is not repeated: the next round waits for the same one,
// so a hanging resolver costs one thread per name, not one per round.
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "fleet/kube/client.h"
#include "fleet/runtime/endpoint.h"

namespace fleet::sidecar {

struct ProbeOutcome {
  bool reached = false;
  std::string error;                 // why not: "connection refused", "no answer within 1000 ms", ...
};

class PeerProber {
 public:
  // `connect_timeout` bounds the connection attempts of a round, `resolve_timeout` its name lookups.
  PeerProber(std::chrono::milliseconds connect_timeout, std::chrono::milliseconds resolve_timeout);
  ~PeerProber();
  PeerProber(const PeerProber&) = delete;
  PeerProber& operator=(const PeerProber&) = delete;

  // One outcome per endpoint, in order. Returns within about resolve_timeout + connect_timeout, and
  // within ~50 ms of `cancel` firing (the outcomes are then unreached, "cancelled").
  std::vector<ProbeOutcome> ProbeAll(const std::vector<Endpoint>& endpoints, const kube::CancelToken& cancel);

 private:
  struct Shared;
  struct Lookup;
  struct Hosts;
  Hosts ResolveHosts(const std::vector<Endpoint>& endpoints, const kube::CancelToken& cancel);
  void StartLookups(const std::set<std::string>& names, Hosts* hosts);
  void AwaitLookups(const std::set<std::string>& names, const kube::CancelToken& cancel, Hosts* hosts);

  std::chrono::milliseconds connect_timeout_;
  std::chrono::milliseconds resolve_timeout_;
  std::shared_ptr<Shared> shared_;
  std::map<std::string, std::shared_ptr<Lookup>> lookups_;   // name lookups still running
};

}  // namespace fleet::sidecar
