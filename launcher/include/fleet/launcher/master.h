// The HTTP master of Paddle 2.3+'s launcher (`--master ip:port`, PADDLE_MASTER), fleetrun's way:
//  - the node whose own address (--host / POD_IP, else this machine's) is the master's host serves a
//    small rendezvous store on the master's port (fleet::httpd: bounded bodies, a fixed number of
//    connection workers, a request timeout);
//  - every node, the serving one included, POSTs its registration {host, rank, ports of its
//    trainers, a spare port for PADDLE_MASTER} under the job id (--job_id / PADDLE_JOB_ID) to
//    /fleetrun/v1/rendezvous, again every 250 ms, until the job has --nnodes nodes. A node that
//    starts before the master retries; after --rendezvous_timeout it gives up with the reason;
//  - node ranks: the given ones, the others fill the free ranks, the master's node first and then by
//    address (RankPeers); two nodes with one rank, or a rank >= nnodes, are errors naming them;
//  - the serving node leaves the rendezvous once every node has been answered with the whole list,
//    so that its exit never strands a node that is still polling; a later run with a new job id
//    never sees the older job's registrations.
#pragma once

#include <memory>
#include <mutex>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "fleet/launcher/flags.h"
#include "fleet/launcher/plan.h"

namespace fleet::httpd {
class HttpServer;
}

namespace fleet::launcher {

inline constexpr char kRendezvousPath[] = "/fleetrun/v1/rendezvous";

// One node's registration.
struct PeerNode {
  std::string host;
  int rank = -1;                 // -1: none given
  std::vector<int> ports;        // its trainers' ports, by local rank
  int master_port = 0;           // PADDLE_MASTER's port should this node be node 0
  bool serves_master = false;

  friend bool operator==(const PeerNode& a, const PeerNode& b) {
    return a.host == b.host && a.rank == b.rank && a.ports == b.ports && a.master_port == b.master_port &&
           a.serves_master == b.serves_master;
  }
};

// The job's `nnodes` registrations in rank order (PeerNode::rank set on every one). Errors: a rank
// claimed twice or >= nnodes (naming the nodes), nodes with different trainer counts.
Result<std::vector<PeerNode>> RankPeers(std::vector<PeerNode> nodes, int nnodes);

// The store the master's node serves. Thread-safe. Jobs are separate: a job id's registrations
// are never shown to another job id. A node registering again (same host) replaces its entry.
class RendezvousStore {
 public:
  explicit RendezvousStore(size_t max_registrations = 65536) : max_registrations_(max_registrations) {}

  // A POST body {"job": ID, "nnodes": N, "node": {"host", "rank", "ports", "master_port",
  // "serves_master"}} -> 200 {"nodes": [...registrations of that job...], "seen": K}, K being how
  // many of them have been answered with all N; 400 for a malformed body, 409 for one that does
  // not fit the job (another node count, a full job), 503 when the store is full.
  struct Answer {
    int status = 200;
    std::string body;   // JSON for 200, else one line saying why
  };
  Answer Register(const std::string& body);

 private:
  struct Job {
    int nnodes = 0;
    std::vector<PeerNode> nodes;   // in registration order
    std::set<std::string> seen;    // hosts answered with all nnodes nodes
  };
  std::mutex mutex_;
  std::map<std::string, Job> jobs_;
  size_t registrations_ = 0;
  const size_t max_registrations_;
};

// A node's part in the rendezvous: serves the store when this node is the master's, then registers.
class HttpRendezvous {
 public:
  // `master`: "host:port". Starts serving when this node's address is the master's host. Errors: a
  // malformed master, a port that cannot be served, no local process to run.
  static Result<std::unique_ptr<HttpRendezvous>> Start(const LaunchOptions& options, const HostFacts& host);
  ~HttpRendezvous();

  // Registers and waits for the job's nodes; messages go to stderr. Errors end the launch (exit 2),
  // or, after a signal, exit 128 + interrupted_by().
  Result<NodeRendezvous> Run();
  int interrupted_by() const { return interrupted_by_; }
  bool serving() const { return server_ != nullptr; }

 private:
  HttpRendezvous() = default;

  std::string master_;
  std::string job_id_;
  int nnodes_ = 1;
  double timeout_seconds_ = 600;
  PeerNode self_;
  std::unique_ptr<RendezvousStore> store_;
  std::unique_ptr<httpd::HttpServer> server_;
  int interrupted_by_ = 0;
};

}  // namespace fleet::launcher
