// Paddle's launcher <-> process env contract (docs/env-contract.md), both directions:
//   RenderProcessEnv: topology + process -> the variables Paddle 2.0 .. 2.6 role makers read (the union).
//   ParseProcessEnv: a process env -> its role, read as PaddleCloudRoleMaker reads it, failing with
//     Paddle's own messages, plus the cross-version checks (2.0/2.1 endpoint-by-id, dygraph's
//     init_parallel_env, 2.3+ names, gloo) that make an env acceptable to every version.
//   DetectClusterEnv / RenderClusterEnv: the PaddleCloud-style node-level env a launcher reads inside
//     a managed pod (PADDLE_TRAINERS, POD_IP, PADDLE_TRAINER_ID, TRAINER_PORTS_NUM, ...).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fleet/base/result.h"
#include "fleet/runtime/endpoint.h"
#include "fleet/runtime/topology.h"

namespace fleet {

using EnvMap = std::map<std::string, std::string>;

// Renders the env of every process of a topology. The job-wide lists are joined once, so rendering
// a whole large job stays linear in its size.
class EnvRenderer {
 public:
  explicit EnvRenderer(const Topology& topology);
  EnvMap Render(const Process& process) const;

 private:
  EnvMap RenderCollective(const Process& process) const;
  EnvMap RenderPs(const Process& process) const;

  const Topology& topology_;
  int trainer_count_ = 0;
  std::string trainer_list_;
  std::string server_hosts_;
  std::string shared_server_port_;
  std::string server_list_;
  std::string heter_list_;
  std::vector<std::string> stage_lists_;  // index s-1: endpoints of stage s
  std::string stage_trainer_counts_;      // Python list literal: "[2, 2]"
  std::string world_device_ids_;
};

// Convenience for one process.
EnvMap RenderProcessEnv(const Topology& topology, const Process& process);

// The variables Paddle prints in its "Distributed Envs" table, in a stable order: the contract's
// own names for that role (inherited variables are not part of the table).
std::vector<std::string> ContractVariableOrder(const EnvMap& rendered);

enum class RoleMakerKind {
  kCollective,       // fleet.init(is_collective=True) / dygraph init_parallel_env
  kParameterServer,  // fleet.init() with PaddleCloudRoleMaker(is_collective=False)
};

struct ParsedRole {
  Role role = Role::kTrainer;
  bool non_distributed = false;  // Paddle falls back to a single local process
  int id = 0;                    // Paddle's current_id (heter: position in ALL list + trainer count)
  int trainers_num = 1;
  std::vector<std::string> server_endpoints;
  std::vector<std::string> trainer_endpoints;
  std::vector<std::string> heter_endpoints;           // all stages
  std::vector<std::string> previous_stage_endpoints;
  std::vector<std::string> next_stage_endpoints;
  std::string current_endpoint;
  int stage_id = 0;
  int stage_num = 0;
  std::vector<int> stage_trainers;
  std::string heter_device_type;
  std::vector<int> selected_devices;  // FLAGS_selected_gpus (or xpus for xpu heter trainers)
  int nodes_num = 1;
};

Result<ParsedRole> ParseProcessEnv(const EnvMap& env, RoleMakerKind kind);

// Node-level cluster inputs (contract section 4).
struct ClusterEnv {
  std::vector<std::string> nodes;   // PADDLE_TRAINERS
  std::string pod_ip;               // POD_IP (must be nodes[node_rank])
  int node_rank = 0;                // PADDLE_TRAINER_ID
  int ports_per_node = 0;           // TRAINER_PORTS_NUM
  std::vector<std::vector<Endpoint>> node_endpoints;  // per node, ports_per_node endpoints
};

// nullopt when the env does not describe a managed cluster (Paddle's use_paddlecloud() and
// PADDLE_TRAINERS_NUM != 1); an error when it does but is inconsistent.
std::optional<Result<ClusterEnv>> DetectClusterEnv(const EnvMap& env);
// The variables an operator sets on a pod so that a launcher inside it finds ClusterEnv.
EnvMap RenderClusterEnv(const ClusterEnv& cluster);

// Reads the current process environment into an EnvMap.
EnvMap CurrentProcessEnv();

}  // namespace fleet
