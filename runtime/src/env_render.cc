#include <algorithm>
#include <set>

#include "fleet/base/strings.h"
#include "fleet/runtime/env_contract.h"

namespace fleet {
namespace {

std::string JoinInts(const std::vector<int>& values, char separator) {
  std::string out;
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) out += separator;
    out += std::to_string(values[i]);
  }
  return out;
}

std::string_view CollectiveBackend(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kGpu: return "nccl";
    case DeviceKind::kXpu: return "bkcl";
    case DeviceKind::kCpu: return "gloo";
  }
  return "gloo";
}

void SetGloo(const GlooSettings& gloo, EnvMap& env) {
  env["PADDLE_WITH_GLOO"] = std::to_string(gloo.with_gloo);
  env["PADDLE_GLOO_RENDEZVOUS"] = std::to_string(gloo.rendezvous);
  if (!gloo.fs_path.empty()) env["PADDLE_GLOO_FS_PATH"] = gloo.fs_path;
}

// FLAGS_selected_gpus / FLAGS_selected_xpus (and CUDA/XPU_VISIBLE_DEVICES when the process owns
// one device) for a process that uses an accelerator; nothing for CPU processes.
void SetDevices(const Process& p, EnvMap& env) {
  if (p.device_kind == DeviceKind::kCpu || p.devices.empty()) return;
  const std::string ids = JoinInts(p.devices, ',');
  if (p.device_kind == DeviceKind::kGpu) {
    env["FLAGS_selected_gpus"] = ids;
    if (!p.visible_devices.empty()) env["CUDA_VISIBLE_DEVICES"] = p.visible_devices;
  } else {
    env["FLAGS_selected_xpus"] = ids;
    if (!p.visible_devices.empty()) env["XPU_VISIBLE_DEVICES"] = p.visible_devices;
  }
  env["FLAGS_selected_accelerators"] = ids;
}

// The stable order of the "Distributed Envs" table: what users look for first comes first.
const std::vector<std::string>& CanonicalOrder() {
  static const std::vector<std::string> order = {
      "TRAINING_ROLE", "PADDLE_ROLE", "PADDLE_TRAINER_ID", "PADDLE_CURRENT_ENDPOINT",
      "PADDLE_TRAINERS_NUM", "PADDLE_TRAINER_ENDPOINTS", "PADDLE_PSERVERS_IP_PORT_LIST",
      "POD_IP", "PADDLE_PORT", "PADDLE_RANK_IN_NODE", "PADDLE_GLOBAL_SIZE", "PADDLE_GLOBAL_RANK",
      "PADDLE_LOCAL_SIZE", "PADDLE_LOCAL_RANK", "PADDLE_NNODES", "FLAGS_selected_gpus",
      "FLAGS_selected_xpus", "FLAGS_selected_accelerators", "CUDA_VISIBLE_DEVICES",
      "XPU_VISIBLE_DEVICES", "PADDLE_LOCAL_DEVICE_IDS", "PADDLE_WORLD_DEVICE_IDS",
      "PADDLE_DISTRI_BACKEND", "STAGE_ID", "STAGE_NUM", "PADDLE_STAGE_TRAINERS_NUM",
      "HETER_DEVICE_TYPE", "PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST",
      "PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST", "PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST",
      "PADDLE_HETER_TRAINER_IP_PORT_LIST", "PADDLE_WITH_GLOO", "PADDLE_GLOO_RENDEZVOUS",
      "PADDLE_GLOO_HTTP_ENDPOINT", "PADDLE_GLOO_FS_PATH", "PADDLE_TRAINING_ROLE",
      "PADDLE_CURRENT_IP", "PADDLE_PSERVER_IPS", "PADDLE_PSERVER_PORT", "PADDLE_PSERVER_ENDPOINTS",
  };
  return order;
}

}  // namespace

EnvRenderer::EnvRenderer(const Topology& topology) : topology_(topology) {
  const std::vector<Endpoint> trainers = topology.EndpointsOf(Role::kTrainer);
  const std::vector<Endpoint> servers = topology.EndpointsOf(Role::kServer);
  trainer_count_ = static_cast<int>(trainers.size());
  trainer_list_ = JoinEndpoints(trainers);
  server_list_ = JoinEndpoints(servers);
  std::vector<std::string> server_hosts;
  std::set<int> server_ports;
  for (const Endpoint& server : servers) {
    server_hosts.push_back(server.host);
    server_ports.insert(server.port);
  }
  server_hosts_ = JoinStrings(server_hosts, ",");
  // The legacy PADDLE_PSERVER_PORT is one port for all servers: only meaningful when they share it.
  if (server_ports.size() == 1) shared_server_port_ = std::to_string(*server_ports.begin());
  heter_list_ = JoinEndpoints(topology.EndpointsOf(Role::kHeterTrainer));
  std::vector<int> stage_counts;
  for (int s = 1; s <= topology.StageCount(); ++s) {
    std::vector<Endpoint> stage = topology.StageEndpoints(s);
    stage_lists_.push_back(JoinEndpoints(stage));
    stage_counts.push_back(static_cast<int>(stage.size()));
  }
  // A Python list literal (Paddle eval()s it), spaced as Paddle's launcher prints it.
  std::string spaced;
  for (size_t i = 0; i < stage_counts.size(); ++i) {
    spaced += (i ? ", " : "") + std::to_string(stage_counts[i]);
  }
  stage_trainer_counts_ = "[" + spaced + "]";
  if (topology.mode == JobMode::kCollective) {
    std::vector<std::string> per_process;
    for (const Process* p : topology.OfRole(Role::kTrainer)) {
      per_process.push_back(JoinInts(p->devices, ':'));
    }
    world_device_ids_ = JoinStrings(per_process, ",");
  }
}

EnvMap EnvRenderer::Render(const Process& process) const {
  return topology_.mode == JobMode::kCollective ? RenderCollective(process) : RenderPs(process);
}

EnvMap EnvRenderer::RenderCollective(const Process& p) const {
  EnvMap env;
  const int world = static_cast<int>(topology_.processes.size());
  const int local_size = world / static_cast<int>(topology_.nodes.size());
  env["PADDLE_TRAINER_ID"] = std::to_string(p.rank);
  env["PADDLE_CURRENT_ENDPOINT"] = p.endpoint.ToString();
  env["PADDLE_TRAINERS_NUM"] = std::to_string(world);
  env["PADDLE_TRAINER_ENDPOINTS"] = trainer_list_;
  env["PADDLE_RANK_IN_NODE"] = std::to_string(p.local_rank);
  env["PADDLE_LOCAL_DEVICE_IDS"] = JoinInts(p.devices, ',');
  env["PADDLE_WORLD_DEVICE_IDS"] = world_device_ids_;
  env["PADDLE_DISTRI_BACKEND"] = std::string(CollectiveBackend(p.device_kind));
  // 2.3+ launcher names.
  env["PADDLE_GLOBAL_SIZE"] = std::to_string(world);
  env["PADDLE_LOCAL_SIZE"] = std::to_string(local_size);
  env["PADDLE_GLOBAL_RANK"] = std::to_string(p.rank);
  env["PADDLE_LOCAL_RANK"] = std::to_string(p.local_rank);
  env["PADDLE_NNODES"] = std::to_string(topology_.nodes.size());
  SetDevices(p, env);
  SetGloo(topology_.gloo, env);
  return env;
}

EnvMap EnvRenderer::RenderPs(const Process& p) const {
  EnvMap env;
  env["TRAINING_ROLE"] = std::string(RoleEnvName(p.role));
  env["PADDLE_ROLE"] = env["TRAINING_ROLE"];  // 2.3+ launcher name
  env["PADDLE_PSERVERS_IP_PORT_LIST"] = server_list_;
  env["PADDLE_TRAINER_ENDPOINTS"] = trainer_list_;
  env["PADDLE_TRAINERS_NUM"] = std::to_string(trainer_count_);
  env["PADDLE_PORT"] = std::to_string(p.endpoint.port);
  env["POD_IP"] = p.endpoint.host;
  env["PADDLE_NNODES"] = std::to_string(topology_.nodes.size());
  SetGloo(topology_.gloo, env);
  env["PADDLE_GLOO_HTTP_ENDPOINT"] = topology_.gloo.http_endpoint;
  // Paddle 2.0/2.1 switch heter mode on with this list; 2.2+ read the ALL/PREVIOUS/NEXT lists.
  env["PADDLE_HETER_TRAINER_IP_PORT_LIST"] = heter_list_;

  if (p.role != Role::kHeterTrainer) {
    // Fluid-transpiler names, still read by old scripts. PADDLE_TRAINERS is left out on purpose:
    // it means the trainer count there but the node list to a launcher (cluster detection).
    env["PADDLE_TRAINING_ROLE"] = env["TRAINING_ROLE"];
    env["PADDLE_CURRENT_IP"] = p.endpoint.host;
    env["PADDLE_PSERVER_ENDPOINTS"] = server_list_;
    env["PADDLE_PSERVER_IPS"] = server_hosts_;
    if (!shared_server_port_.empty()) env["PADDLE_PSERVER_PORT"] = shared_server_port_;
  }
  if (p.role == Role::kTrainer) env["PADDLE_TRAINER_ID"] = std::to_string(p.rank);

  if (topology_.mode == JobMode::kHeterParameterServer) {
    env["PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST"] = heter_list_;
    if (p.role != Role::kServer) {
      const int stage_num = static_cast<int>(stage_lists_.size());
      const size_t s = static_cast<size_t>(p.stage);  // 1-based
      env["STAGE_ID"] = std::to_string(p.stage);
      env["STAGE_NUM"] = std::to_string(stage_num);
      env["PADDLE_STAGE_TRAINERS_NUM"] = stage_trainer_counts_;
      // Stage 1 is the CPU stage in Paddle's launcher, even when trainers compute on GPUs.
      env["HETER_DEVICE_TYPE"] =
          p.role == Role::kTrainer ? "cpu" : std::string(DeviceKindName(p.device_kind));
      env["PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST"] = s >= 2 ? stage_lists_[s - 2] : "";
      env["PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST"] =
          p.stage < stage_num ? stage_lists_[s] : "";
    }
  }
  SetDevices(p, env);
  return env;
}

EnvMap RenderProcessEnv(const Topology& topology, const Process& process) {
  return EnvRenderer(topology).Render(process);
}

std::vector<std::string> ContractVariableOrder(const EnvMap& rendered) {
  std::vector<std::string> keys;
  for (const std::string& name : CanonicalOrder()) {
    if (rendered.count(name)) keys.push_back(name);
  }
  for (const auto& [name, value] : rendered) {
    if (std::find(keys.begin(), keys.end(), name) == keys.end()) keys.push_back(name);
  }
  return keys;
}

}  // namespace fleet
