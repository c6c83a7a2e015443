// Wiring: how the Paddle env of the contract library reaches processes in pods.
//
// The job's topology is rendered once with a symbolic host per pod ("@<ordinal>@"). For each pod,
// a variable whose value names only the pod itself goes straight into the pod spec (its own host
// becomes $(POD_IP), expanded by the kubelet); a variable that names other pods (the endpoint
// lists) becomes a key of the job's endpoints ConfigMap, which the pod references by env and also
// mounts as files. A list too long for the env (the kernel's 128 KiB for one variable, and a
// budget for all) is not in the pod's env at all: it travels only as its file, which the env
// loader (runtime/python/sitecustomize.py) puts into the Python process's os.environ. Once every
// pod's host is known (its IP, its stable DNS name, or its node's IP) the ConfigMap's values are the
// same templates with the hosts filled in. One renderer, so pods get exactly the env fleetrun gives.
#pragma once

#include <map>
#include <memory>
#include <set>
#include <utility>
#include <string>
#include <vector>

#include "fleet/operator/api.h"
#include "fleet/runtime/env_contract.h"

namespace fleet::op {

// One pod of the job: its role, its index within the role, its ordinal among all pods.
struct PodSlot {
  const RoleSpec* role = nullptr;
  int index = 0;
  int ordinal = 0;
  std::string name;          // <job>-<role>-<index>
};

std::vector<PodSlot> PodSlots(const FleetJob& job);
std::string PodName(const FleetJob& job, const RoleSpec& role, int index);

// The training ranks a pod runs: collective pods run processesPerPod consecutive ranks (from
// index x processesPerPod), the pods of other jobs one each (their index in the role). The sidecar is
// told them (--rank, --ranks), and the operator keeps only these from its reports.
struct SlotRanks {
  int first = 0;
  int count = 1;
};
SlotRanks RanksOf(const FleetJob& job, const PodSlot& slot);

// The port of a pod's first process: spec.port, or in HostNetwork mode the pod's own port from the
// job's allocated range (host_port_base + ordinal * (processesPerPod + 1)).
int PodPort(const FleetJob& job, const PodSlot& slot, int host_port_base);
// The sidecar's metrics/probe port: spec.sidecar.metricsPort, or in HostNetwork mode the port after
// the pod's Paddle ports (on the host network every port is the node's: each pod needs its own).
int SidecarPort(const FleetJob& job, const PodSlot& slot, int host_port_base);
// The gloo HTTP store's port on server 0.
int GlooHttpPort(const FleetJob& job, int host_port_base);
// HostNetwork: how many consecutive host ports the job needs (per pod its Paddle ports and the
// sidecar's, then the gloo HTTP store's).
int HostPortRangeSize(const FleetJob& job);
// The stable DNS name of a pod in Service mode (the job's headless Service is named after the job).
std::string ServiceHost(const FleetJob& job, const std::string& pod, const std::string& cluster_domain);
// The host that stands for a slot in the endpoint lists: in Service mode its stable DNS name, known
// from the start; else its pod's address (status.podIP, or hostIP in HostNetwork mode; "" while it
// has no pod or the pod has none).
std::string SlotHost(const FleetJob& job, const PodSlot& slot, const std::string& pod_address,
                     const std::string& cluster_domain);

// The env that changes with every run, by the role's Discovery: an elastic fleetrun pod's
// PADDLE_ELASTIC_SERVER, _JOB_ID, _NP (min:max), _TIMEOUT (fleet/runtime/elastic_contract.h) and
// FLAGS_START_PORT, as PaddleCloud tells Paddle's launcher; a Paddle 2.3+ launcher's PADDLE_JOB_ID. The job id is new for every run
// (<job>-<run>-<uid>): a run never sees an older run's registrations, and ending in the
// fixed-length uid it is no prefix of another job's id (Paddle's cleanup deletes /paddle/<id> as a
// prefix).
EnvMap RunEnv(const FleetJob& job, const RoleSpec& role, int run);

// A ConfigMap value with holes for pod hosts.
struct HostTemplate {
  std::vector<std::string> literals;   // literals.size() == holes.size() + 1
  std::vector<int> holes;              // pod ordinals
  std::string Fill(const std::vector<std::string>& hosts) const;
};

class JobWiring {
 public:
  // Fails when the job cannot be wired (e.g. endpoint lists over a ConfigMap's limit, or too long
  // for the env in pods whose entry point reads no files).
  // `cluster_domain` names Service-mode hosts: <pod>.<job>.<namespace>.svc.<cluster_domain>.
  static Result<JobWiring> Build(const FleetJob& job, int host_port_base,
                                 const std::string& cluster_domain = "cluster.local");

  // The pod's env entries (core/v1 EnvVar objects): POD_IP first, then the contract variables
  // inline or as configMapKeyRef into `config_map`.
  Json PodEnv(const PodSlot& slot, const std::string& config_map) const;
  // The variables of the slot's role that travel as files, as the env loader reads them
  // (FLEET_ENV_FILES): "VAR=KEY,..." with KEY a file of the mounted ConfigMap; "" when none.
  std::string EnvFiles(const PodSlot& slot) const;
  // Every variable that travels as a file for some role, with its largest estimated size in bytes.
  const std::map<std::string, size_t>& file_variables() const { return file_variables_; }
  // The ConfigMap data for the given pod hosts (indexed by ordinal).
  std::map<std::string, std::string> EndpointsData(const std::vector<std::string>& hosts) const;
  // The pod's first Paddle port and its sidecar's port, from the job's block of host ports in
  // HostNetwork mode (PodPort, SidecarPort).
  int PodPort(const PodSlot& slot) const;
  int SidecarPort(const PodSlot& slot) const;
  const std::map<std::string, HostTemplate>& templates() const { return templates_; }
  const std::vector<PodSlot>& slots() const { return slots_; }   // PodSlots(job), by ordinal

 private:
  // A pod's env with "@<ordinal>@" for pod hosts, by its role's Discovery.
  EnvMap SymbolicEnv(int ordinal) const;
  EnvMap ProcessEnv(const PodSlot& slot) const;
  EnvMap ClusterEnvOf(const PodSlot& slot) const;
  EnvMap LaunchEnv(const PodSlot& slot) const;
  EnvMap PsLaunchEnv(const PodSlot& slot) const;
  std::string SharedKey(int ordinal, const std::string& var) const;
  // Build's steps: the topology of pods given every process's lists; the ConfigMap keys of the
  // variables that name other pods; each key's size at its longest; what travels as files.
  Status BuildTopology();
  void ShareLists();
  Result<std::map<std::string, size_t>> ListSizes() const;
  Status ChooseFiles(const std::map<std::string, size_t>& key_bytes);

  const FleetJob* job_ = nullptr;
  int host_port_base_ = 0;
  std::string cluster_domain_;
  std::vector<PodSlot> slots_;
  std::shared_ptr<const Topology> topology_;           // symbolic hosts
  std::shared_ptr<const EnvRenderer> renderer_;
  std::vector<int> process_of_slot_;                   // ordinal -> index in topology processes
  std::map<std::string, HostTemplate> templates_;      // ConfigMap key -> template
  std::map<std::pair<std::string, std::string>, std::string> key_of_;  // (role name, var) -> key
  std::set<std::pair<std::string, std::string>> files_;               // (role name, var) as files
  std::map<std::string, size_t> file_variables_;                      // var -> largest bytes
};

}  // namespace fleet::op
