// fleet-operator's command line. Strict: an unknown flag or a malformed value is an error naming
// the flag, before anything connects or listens. Flags are --name=value or --name value; of a
// repeated flag the last counts (the chart's extraArgs override its defaults).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "fleet/operator/controller.h"
#include <nlohmann/json.hpp>

#include "fleet/base/log.h"
#include "fleet/base/result.h"

namespace fleet::op {

struct OperatorFlags {
  std::string kubeconfig;                    // "" = $KUBECONFIG, in-cluster, ~/.kube/config
  std::string context;
  ControllerOptions controller;              // --namespace, --workers, --create-concurrency, ...
  double qps = 500;                          // client-side API rate limit (0 = none)
  int burst = 1000;
  bool sidecar_mode_auto = true;             // --sidecar-mode=auto: native on Kubernetes >= 1.29
  bool leader_elect = false;
  std::string leader_election_id = "fleet-operator";
  std::string leader_election_namespace;     // default: --namespace, else the pod's namespace
  std::string metrics_bind_address = ":8080";
  std::string health_probe_bind_address = ":8081";
  LogLevel log_level = LogLevel::kInfo;
  LogFormat log_format = LogFormat::kText;
  bool help = false;
};

Result<OperatorFlags> ParseOperatorFlags(const std::vector<std::string>& args);

// Whether the API server's /version answer ({"major":"1","minor":"29+",...}) is a Kubernetes with
// native sidecars (1.29 or later: init containers with restartPolicy Always, on by default).
bool SupportsNativeSidecars(const nlohmann::json& version);
std::string OperatorUsage();

}  // namespace fleet::op
