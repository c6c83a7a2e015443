#include "fleet/operator/peer_discovery.h"

#include "fleet/runtime/elastic_contract.h"

namespace fleet::op {

PeerDiscovery PeerDiscovery::Of(const FleetJobSpec& spec) {
  if (spec.elastic) return PeerDiscovery(PeerSource::kRendezvous);
  switch (spec.network) {
    case Network::kService: return PeerDiscovery(PeerSource::kStableNames);
    case Network::kHostNetwork: return PeerDiscovery(PeerSource::kNodeAddresses);
    case Network::kPodIP: break;
  }
  return PeerDiscovery(PeerSource::kPodAddresses);
}

std::string_view PeerDiscovery::Name() const {
  switch (source_) {
    case PeerSource::kPodAddresses: return "pod IP lists";
    case PeerSource::kNodeAddresses: return "node IP lists";
    case PeerSource::kStableNames: return "DNS name lists";
    case PeerSource::kRendezvous: return "etcd rendezvous";
  }
  return "";
}

FailedPodCost PeerDiscovery::CostOfFailedPod() const {
  switch (source_) {
    case PeerSource::kPodAddresses:
    case PeerSource::kNodeAddresses: return FailedPodCost::kNewRun;
    case PeerSource::kStableNames: return FailedPodCost::kReplacePod;
    case PeerSource::kRendezvous: return FailedPodCost::kReplacePodInRun;
  }
  return FailedPodCost::kNewRun;
}

std::optional<int> PeerDiscovery::GaveUpExitCode() const {
  if (source_ == PeerSource::kRendezvous) return kElasticTimeoutStatus;
  return std::nullopt;
}

bool PeerDiscovery::Succeeded(int workers_succeeded, int workers_running, int worker_replicas) const {
  // Rendezvous: the members finish together; a worker still Pending would wait for peers that are done.
  if (source_ == PeerSource::kRendezvous) return workers_succeeded > 0 && workers_running == 0;
  return workers_succeeded == worker_replicas;
}

}  // namespace fleet::op
