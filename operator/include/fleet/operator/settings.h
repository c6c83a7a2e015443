// OperatorSettings: the operator-wide choices (its flags) that shape every job's children. What
// differs per job and per reconcile (its block of host ports) is observed, not set: Observed.
#pragma once

#include <chrono>
#include <string>

#include "fleet/operator/api.h"
#include "fleet/operator/workload_api.h"

namespace fleet::op {

struct OperatorSettings {
  bool native_sidecar = true;          // Kubernetes >= 1.29: the sidecar is an init container
                                       // with restartPolicy Always and a startup probe
  std::string cluster_domain = "cluster.local";
  std::string sidecar_service_account_token_audience;   // "" = the API server's default
  std::string sidecar_image = kDefaultSidecarImage;      // unless the job sets spec.sidecar.image
  // status.progress is written at most this often per job (0: progress is not collected).
  std::chrono::milliseconds progress_interval{10000};
  // The cluster's scheduling.k8s.io Workload API (spec.scheduling.gang Kubernetes), discovered
  // when the operator starts: a cluster that turns the API on needs the operator restarted.
  WorkloadApi workload_api;
};

}  // namespace fleet::op
