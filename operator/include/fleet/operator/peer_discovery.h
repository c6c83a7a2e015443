// How a job's pods find their peers, decided once per job.
//
// Paddle's processes read their peers once, at start. Where those peers come from decides most of
// what the operator does with the job's pods, and it used to be asked step by step (spec.network
// here, spec.elastic there). PeerDiscovery is that answer, and the planner asks it instead:
//
//   source          what the pods find peers by   a failed pod costs               the job succeeded when
//   PodAddresses    lists of pod IPs              a new run: every pod goes        every worker succeeded
//   NodeAddresses   lists of node IPs + ports     a new run: every pod goes        every worker succeeded
//   StableNames     lists of DNS names            that pod, replaced (a restart)   every worker succeeded
//   Rendezvous      etcd, no lists                that pod, within the run         a worker succeeded and
//                                                                                  none runs any more
//
// What each *role's* pods are given in their env (lists, a master, etcd) depends on the launcher
// they run as well: that is Discovery (launcher.h), per role, inside this job-wide policy.
#pragma once

#include <optional>
#include <string_view>

#include "fleet/operator/api.h"

namespace fleet::op {

enum class PeerSource { kPodAddresses, kNodeAddresses, kStableNames, kRendezvous };

// What one failed (retryable) pod costs the job.
enum class FailedPodCost {
  kNewRun,              // every pod is made again: a new pod means a new address in every peer's lists
  kReplacePod,          // that pod alone, under its old name; the job is Restarting until it runs
  kReplacePodInRun,     // that pod alone; the others re-rendezvous and the job goes on Running
};

class PeerDiscovery {
 public:
  static PeerDiscovery Of(const FleetJobSpec& spec);

  PeerSource source() const { return source_; }
  std::string_view Name() const;   // "pod IP lists", ...

  // The pods' addresses go into published lists (else the endpoints ConfigMap only opens gates).
  bool PublishesLists() const { return source_ != PeerSource::kRendezvous; }
  // The lists' hosts are names fixed by the slots: known before the pods exist, never replaced.
  bool HostsKnownFromStart() const { return source_ == PeerSource::kStableNames; }
  // Which of a pod's addresses is its host in the lists: its node's on the node's network.
  bool UsesNodeAddress() const { return source_ == PeerSource::kNodeAddresses; }
  // A pod that vanished can only come back at another address (a pod IP; a node IP may return).
  bool VanishedPodMovesAway() const { return source_ == PeerSource::kPodAddresses; }

  FailedPodCost CostOfFailedPod() const;
  // The exit code with which a pod says no retry can help: its elastic launcher gave up waiting
  // for the minimum of nodes (fleetrun's kElasticTimeoutStatus, runtime/elastic_contract.h).
  std::optional<int> GaveUpExitCode() const;
  bool Succeeded(int workers_succeeded, int workers_running, int worker_replicas) const;
  // The members are the workers that run now (status.elastic), and they vary within the run: a
  // job that is finishing makes no new pods, and the job's phase follows the count of members.
  bool TracksMembers() const { return source_ == PeerSource::kRendezvous; }

 private:
  explicit PeerDiscovery(PeerSource source) : source_(source) {}
  PeerSource source_;
};

}  // namespace fleet::op
