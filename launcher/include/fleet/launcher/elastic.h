// Elastic fleetrun (--elastic_server --job_id --np, or PADDLE_ELASTIC_SERVER/JOB_ID/NP): nodes
// rendezvous in etcd, in the key layout of Paddle's own elastic launcher
// (python/paddle/distributed/fleet/elastic/manager.py, Paddle 2.2-2.6), so both can share a job:
//
//   /paddle/<job_id>                  "0" while running, "1" once a node's trainers all succeeded
//   /paddle/<job_id>/nodes/<tag><t>   one per node: "host:port" (its first trainer endpoint),
//                                     under a lease of PADDLE_ELASTIC_TTL s kept alive every TTL/3
//   /paddle/<job_id>/endpoints        "<all trainer endpoints>|<node hosts>" of the current job
//
// The job's nodes are the first np.max registrations in etcd's creation order (every node computes
// the same list from the same state); it runs while at least np.min are registered. On every
// change of that list each node stops its trainers and starts them again with the env a fresh
// `fleetrun --ips=<nodes in that order>` would give them. docs/fleetrun.md has the whole behaviour.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fleet/launcher/flags.h"
#include "fleet/launcher/plan.h"
#include "fleet/runtime/elastic_contract.h"

namespace fleet::launcher {

// The env names, exit codes and np format are Paddle's elastic contract (fleet/runtime/elastic_contract.h):
// a trainer exiting kElasticRelaunchCode gets a new rendezvous, below np.min for the timeout fleetrun
// exits kElasticTimeoutStatus, and a failed trainer's own status is kept (not Paddle's kElasticExitCode,
// docs/fleetrun.md).

// --np / PADDLE_ELASTIC_NP: ParseNpRange, its errors naming the flag and the variable.
Result<NpRange> ParseNp(std::string_view text);

struct ElasticSettings {
  std::string server;            // etcd, host:port
  std::string job_id;
  NpRange np;
  Endpoint self;                 // this node's host and first trainer port
  double timeout_seconds = kElasticDefaultTimeoutSeconds;  // below np.min this long ends the job
  int ttl_seconds = kElasticDefaultTtlSeconds;             // a silent node is gone after this long
};

// The elastic settings of a launch; nullopt when it is not elastic (as Paddle: server, job id and
// np must all be given, by flag or env). Errors for a malformed value, or elastic with PS flags.
Result<std::optional<ElasticSettings>> ElasticSettingsFrom(const LaunchOptions& options, const EnvMap& env);

// One registered node, as read from /paddle/<job>/nodes/.
struct Registration {
  std::string key;
  std::string value;             // "host:port" (Paddle 2.2+), or a bare host (Paddle 2.1)
  int64_t create_revision = 0;
};

// The node a registration's value names: one "host:port" (Paddle 2.2+) or one bare host (Paddle
// 2.1; it gets `default_port`), the host one Paddle can use (ParseHost), the port 1-65535,
// nothing else. Anyone who may write to etcd writes these values: errors say why a value is none.
Result<Endpoint> ParseRegistration(std::string_view value, int default_port);

// The nodes of the job, and the registrations that name none.
struct Members {
  std::vector<Endpoint> nodes;          // in rank order
  std::map<std::string, std::string> malformed;   // each registration ignored: its key -> why
};

// The first `max` nodes by creation (a host registered twice is one node). A malformed
// registration (ParseRegistration) is another node's bug or a hostile write: it is ignored, never
// split into several nodes, never fatal for the healthy nodes.
Members ChooseMembers(std::vector<Registration> registered, int max, int default_port);

// The plan of one generation: `options` launched with --ips set to the members in rank order and
// --start_port to their port. Errors when the members do not share one port.
Result<LaunchPlan> PlanGeneration(const LaunchOptions& options, const HostFacts& host,
                                  const std::vector<Endpoint>& members);

// Runs the job; returns fleetrun's exit status. Messages go to stderr, banners to stdout. The
// caller owns host.gloo_dir (fleetrun removes it however the run ended: fleetrun_main.cc).
int RunElastic(const LaunchOptions& options, const HostFacts& host, const ElasticSettings& settings);

}  // namespace fleet::launcher
