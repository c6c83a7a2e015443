#include "fleet/runtime/topology.h"

#include <algorithm>
#include <map>
#include <set>

namespace fleet {
namespace {

int NodeIndex(std::vector<std::string>& nodes, const std::string& host) {
  auto it = std::find(nodes.begin(), nodes.end(), host);
  if (it != nodes.end()) return static_cast<int>(it - nodes.begin());
  nodes.push_back(host);
  return static_cast<int>(nodes.size()) - 1;
}

Status CheckGloo(const GlooSettings& gloo) {
  if (gloo.with_gloo < 0 || gloo.with_gloo > 2) {
    return Error{"PADDLE_WITH_GLOO must be 0, 1 or 2, got " + std::to_string(gloo.with_gloo)};
  }
  if (gloo.rendezvous < 1 || gloo.rendezvous > 3) {
    return Error{"PADDLE_GLOO_RENDEZVOUS must be 1 (HDFS), 2 (FILE) or 3 (HTTP), got " +
                 std::to_string(gloo.rendezvous)};
  }
  return OkStatus();
}

// Every endpoint of a job is a listening socket: two processes cannot share one.
Status CheckUniqueEndpoints(const std::vector<Process>& processes) {
  std::set<std::pair<std::string, int>> seen;
  for (const Process& p : processes) {
    if (p.endpoint.port < 1 || p.endpoint.port > 65535) {
      return Error{"endpoint '" + p.endpoint.ToString() + "' has no valid port"};
    }
    if (!seen.emplace(p.endpoint.host, p.endpoint.port).second) {
      return Error{"endpoint '" + p.endpoint.ToString() + "' is used by two processes"};
    }
  }
  return OkStatus();
}

// Assigns one device of `pool` to a process that owns a single device; it sees it as device 0.
void AssignPooledDevice(Process& p, DeviceKind kind, const std::vector<std::string>& pool,
                        int slot) {
  p.device_kind = kind;
  p.devices = {0};
  if (!pool.empty()) p.visible_devices = pool[static_cast<size_t>(slot) % pool.size()];
}

}  // namespace

std::string_view JobModeName(JobMode mode) {
  switch (mode) {
    case JobMode::kCollective: return "collective";
    case JobMode::kParameterServer: return "ps";
    case JobMode::kHeterParameterServer: return "ps-heter";
  }
  return "collective";
}

Result<JobMode> ParseJobMode(std::string_view text) {
  if (text == "collective") return JobMode::kCollective;
  if (text == "ps") return JobMode::kParameterServer;
  if (text == "ps-heter") return JobMode::kHeterParameterServer;
  return Error{"run mode must be collective, ps or ps-heter, got '" + std::string(text) + "'"};
}

std::string_view DeviceKindName(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::kCpu: return "cpu";
    case DeviceKind::kGpu: return "gpu";
    case DeviceKind::kXpu: return "xpu";
  }
  return "cpu";
}

Result<DeviceKind> ParseDeviceKind(std::string_view text) {
  if (text == "cpu") return DeviceKind::kCpu;
  if (text == "gpu") return DeviceKind::kGpu;
  if (text == "xpu") return DeviceKind::kXpu;
  return Error{"device type must be cpu, gpu or xpu, got '" + std::string(text) + "'"};
}

std::string_view RoleEnvName(Role role) {
  switch (role) {
    case Role::kTrainer: return "TRAINER";
    case Role::kServer: return "PSERVER";
    case Role::kHeterTrainer: return "HETER_TRAINER";
  }
  return "TRAINER";
}

std::string_view RoleTitle(Role role) {
  switch (role) {
    case Role::kTrainer: return "trainer";
    case Role::kServer: return "server";
    case Role::kHeterTrainer: return "heter trainer";
  }
  return "trainer";
}

std::vector<const Process*> Topology::OfRole(Role role) const {
  std::vector<const Process*> out;
  for (const Process& p : processes) {
    if (p.role == role) out.push_back(&p);
  }
  std::stable_sort(out.begin(), out.end(),
                   [](const Process* a, const Process* b) { return a->rank < b->rank; });
  return out;
}

std::vector<Endpoint> Topology::EndpointsOf(Role role) const {
  std::vector<Endpoint> out;
  for (const Process* p : OfRole(role)) out.push_back(p->endpoint);
  return out;
}

int Topology::StageCount() const {
  int stages = 1;
  for (const Process& p : processes) {
    if (p.role == Role::kHeterTrainer) stages = std::max(stages, p.stage);
  }
  return stages;
}

std::vector<Endpoint> Topology::StageEndpoints(int stage) const {
  if (stage == 1) return EndpointsOf(Role::kTrainer);
  std::vector<Endpoint> out;
  for (const Process* p : OfRole(Role::kHeterTrainer)) {
    if (p->stage == stage) out.push_back(p->endpoint);
  }
  return out;
}

Result<Topology> BuildCollectiveTopology(const CollectiveLayout& layout) {
  if (layout.nodes.empty()) return Error{"a collective job needs at least one node"};
  if (layout.device_groups.empty()) return Error{"a collective job needs at least one process per node"};
  if (layout.node_ports.size() != layout.nodes.size()) {
    return Error{"collective layout has ports for " + std::to_string(layout.node_ports.size()) +
                 " nodes but " + std::to_string(layout.nodes.size()) + " nodes"};
  }
  FLEET_RETURN_IF_ERROR(CheckGloo(layout.gloo));
  if (layout.device_kind != DeviceKind::kCpu) {
    for (const auto& group : layout.device_groups) {
      if (group.empty()) return Error{"a GPU/XPU collective job needs at least one device per process"};
    }
  }
  std::set<std::string> distinct;
  for (const std::string& node : layout.nodes) {
    FLEET_RETURN_IF_ERROR(ParseHost(node));
    if (!distinct.insert(node).second) return Error{"node '" + node + "' is listed twice"};
  }

  Topology topology;
  topology.mode = JobMode::kCollective;
  topology.nodes = layout.nodes;
  topology.gloo = layout.gloo;
  const size_t per_node = layout.device_groups.size();
  for (size_t n = 0; n < layout.nodes.size(); ++n) {
    if (layout.node_ports[n].size() != per_node) {
      return Error{"node '" + layout.nodes[n] + "' has " +
                   std::to_string(layout.node_ports[n].size()) + " ports for " +
                   std::to_string(per_node) + " processes"};
    }
    for (size_t i = 0; i < per_node; ++i) {
      Process p;
      p.role = Role::kTrainer;
      p.rank = static_cast<int>(n * per_node + i);
      p.node = static_cast<int>(n);
      p.local_rank = static_cast<int>(i);
      p.endpoint = Endpoint{layout.nodes[n], layout.node_ports[n][i]};
      p.device_kind = layout.device_kind;
      p.devices = layout.device_groups[i];
      topology.processes.push_back(std::move(p));
    }
  }
  FLEET_RETURN_IF_ERROR(CheckUniqueEndpoints(topology.processes));
  return topology;
}

Result<Topology> BuildPsTopology(const PsLayout& layout) {
  if (layout.servers.empty()) return Error{"a parameter-server job needs at least one server"};
  if (layout.trainers.empty()) return Error{"a parameter-server job needs at least one trainer"};
  FLEET_RETURN_IF_ERROR(CheckGloo(layout.gloo));
  for (size_t s = 0; s < layout.heter_stages.size(); ++s) {
    if (layout.heter_stages[s].endpoints.empty()) {
      return Error{"heter stage " + std::to_string(s + 2) + " has no heter workers"};
    }
  }

  Topology topology;
  topology.mode = layout.heter_stages.empty() ? JobMode::kParameterServer
                                              : JobMode::kHeterParameterServer;
  topology.gloo = layout.gloo;
  // Paddle numbers nodes by first appearance: servers, then trainers, then heter trainers.
  std::map<std::pair<int, Role>, int> next_local;  // (node, role) -> next local index
  for (const auto* list : {&layout.servers, &layout.trainers}) {
    for (const Endpoint& e : *list) {
      FLEET_RETURN_IF_ERROR(ParseHost(e.host));
    }
  }
  for (const HeterStage& stage : layout.heter_stages) {
    for (const Endpoint& e : stage.endpoints) {
      FLEET_RETURN_IF_ERROR(ParseHost(e.host));
    }
  }
  auto add = [&](Role role, int rank, int stage, const Endpoint& endpoint) -> Process& {
    Process p;
    p.role = role;
    p.rank = rank;
    p.stage = stage;
    p.endpoint = endpoint;
    p.node = NodeIndex(topology.nodes, endpoint.host);
    p.local_rank = next_local[{p.node, role}]++;
    topology.processes.push_back(std::move(p));
    return topology.processes.back();
  };
  for (size_t i = 0; i < layout.servers.size(); ++i) {
    add(Role::kServer, static_cast<int>(i), 0, layout.servers[i]);
  }
  for (size_t i = 0; i < layout.trainers.size(); ++i) {
    Process& p = add(Role::kTrainer, static_cast<int>(i), 1, layout.trainers[i]);
    if (layout.trainer_device == DeviceKind::kGpu) {
      AssignPooledDevice(p, DeviceKind::kGpu, layout.gpu_pool, p.local_rank);
    }
  }
  int heter_rank = 0;
  for (size_t s = 0; s < layout.heter_stages.size(); ++s) {
    const HeterStage& stage = layout.heter_stages[s];
    for (const Endpoint& endpoint : stage.endpoints) {
      Process& p = add(Role::kHeterTrainer, heter_rank++, static_cast<int>(s) + 2, endpoint);
      if (stage.device == DeviceKind::kGpu) {
        AssignPooledDevice(p, DeviceKind::kGpu, layout.gpu_pool, p.local_rank);
      } else if (stage.device == DeviceKind::kXpu) {
        AssignPooledDevice(p, DeviceKind::kXpu, layout.xpu_pool, p.local_rank);
      }
    }
  }
  FLEET_RETURN_IF_ERROR(CheckUniqueEndpoints(topology.processes));
  if (topology.gloo.http_endpoint.empty() && topology.gloo.rendezvous == 3) {
    return Error{"PS jobs need the gloo HTTP endpoint (server 0's host and the --http_port)"};
  }
  for (const Process& p : topology.processes) {  // server 0 binds both
    if (p.endpoint.ToString() == topology.gloo.http_endpoint) {
      return Error{"the gloo HTTP endpoint " + topology.gloo.http_endpoint + " is also a process endpoint"};
    }
  }
  return topology;
}

}  // namespace fleet
