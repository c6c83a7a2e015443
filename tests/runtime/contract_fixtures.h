// Shared builders for the runtime tests: the reference topologies of the contract (collective,
// PS, PS-heter), a render-everything helper, and small EnvMap accessors.
#pragma once

#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "fleet/runtime/env_contract.h"
#include "fleet/runtime/topology.h"

namespace fleet::testing {

// "host:port" -> Endpoint; the test aborts on a malformed literal (a bug in the test itself).
inline Endpoint Ep(const std::string& text) {
  auto parsed = ParseEndpoint(text);
  EXPECT_TRUE(parsed.ok()) << parsed.error();
  return parsed.ok() ? *parsed : Endpoint{};
}

inline std::vector<Endpoint> Eps(const std::vector<std::string>& texts) {
  std::vector<Endpoint> out;
  for (const std::string& text : texts) out.push_back(Ep(text));
  return out;
}

inline Topology MustBuild(const Result<Topology>& built) {
  EXPECT_TRUE(built.ok()) << built.error();
  return built.ok() ? *built : Topology{};
}

// The value of a variable, or "<unset>" so that absence shows in a failure message.
inline std::string Get(const EnvMap& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? "<unset>" : it->second;
}

inline RoleMakerKind KindOf(const Topology& topology) {
  return topology.mode == JobMode::kCollective ? RoleMakerKind::kCollective
                                               : RoleMakerKind::kParameterServer;
}

struct RenderedProcess {
  Process process;
  EnvMap env;
};

// Every process of a topology with its env, rendered by one EnvRenderer (as the launcher does).
inline std::vector<RenderedProcess> RenderAll(const Topology& topology) {
  EnvRenderer renderer(topology);
  std::vector<RenderedProcess> out;
  for (const Process& p : topology.processes) out.push_back({p, renderer.Render(p)});
  return out;
}

// The env of the process with `role` and `rank` (a test failure when there is none).
inline EnvMap EnvOf(const Topology& topology, Role role, int rank) {
  for (const Process& p : topology.processes) {
    if (p.role == role && p.rank == rank) return RenderProcessEnv(topology, p);
  }
  ADD_FAILURE() << "no process " << RoleEnvName(role) << " rank " << rank;
  return {};
}

// ---- Collective reference topologies ----

inline CollectiveLayout CollectiveCpuLayout() {  // one node, 2 CPU processes
  CollectiveLayout layout;
  layout.nodes = {"10.0.0.1"};
  layout.node_ports = {{6070, 6071}};
  layout.device_groups = {{}, {}};
  layout.device_kind = DeviceKind::kCpu;
  return layout;
}

inline CollectiveLayout CollectiveOneNodeFourGpusLayout() {
  CollectiveLayout layout;
  layout.nodes = {"10.0.0.1"};
  layout.node_ports = {{6070, 6071, 6072, 6073}};
  layout.device_groups = {{0}, {1}, {2}, {3}};
  layout.device_kind = DeviceKind::kGpu;
  return layout;
}

// 2 nodes x 4 GPUs, --nproc_per_node=2: groups {0,1} and {2,3} on each node.
inline CollectiveLayout CollectiveTwoNodesNproc2Layout() {
  CollectiveLayout layout;
  layout.nodes = {"10.0.0.1", "10.0.0.2"};
  layout.node_ports = {{6070, 6071}, {6070, 6071}};
  layout.device_groups = {{0, 1}, {2, 3}};
  layout.device_kind = DeviceKind::kGpu;
  return layout;
}

// --gpus=1,3 with CUDA_VISIBLE_DEVICES unset: the processes use positions 1 and 3.
inline CollectiveLayout CollectiveRemappedLayout() {
  CollectiveLayout layout;
  layout.nodes = {"10.0.0.1", "10.0.0.2"};
  layout.node_ports = {{6070, 6071}, {6070, 6071}};
  layout.device_groups = {{1}, {3}};
  layout.device_kind = DeviceKind::kGpu;
  return layout;
}

// ---- Parameter-server reference topologies ----

// A PS layout with the given servers and trainers and server 0's host as the gloo HTTP store.
inline PsLayout MakePsLayout(const std::vector<std::string>& servers,
                             const std::vector<std::string>& trainers) {
  PsLayout layout;
  layout.servers = Eps(servers);
  layout.trainers = Eps(trainers);
  layout.gloo.http_endpoint = layout.servers.empty() ? "10.0.0.1:6500"
                                                     : layout.servers[0].host + ":6500";
  return layout;
}

// 2 servers + 3 trainers across 2 hosts; servers share port 6000.
inline PsLayout PsTwoServersThreeTrainersLayout() {
  return MakePsLayout({"10.0.0.1:6000", "10.0.0.2:6000"},
                      {"10.0.0.1:6100", "10.0.0.2:6100", "10.0.0.1:6101"});
}

// 1 server, 2 trainers, stage 2 = 2 gpu heter workers, stage 3 = 1 cpu heter worker.
inline PsLayout HeterTwoStagesLayout() {
  PsLayout layout = MakePsLayout({"10.0.0.1:6000"}, {"10.0.0.1:6100", "10.0.0.2:6100"});
  layout.heter_stages = {{DeviceKind::kGpu, Eps({"10.0.0.3:6200", "10.0.0.3:6201"})},
                         {DeviceKind::kCpu, Eps({"10.0.0.4:6300"})}};
  layout.gpu_pool = {"2", "3"};
  return layout;
}

// A generated large job: `servers` servers and `trainers` trainers over 50 trainer hosts.
inline PsLayout LargePsLayout(int servers, int trainers) {
  std::vector<std::string> s, t;
  for (int i = 0; i < servers; ++i) s.push_back("10.1.0." + std::to_string(i + 1) + ":7000");
  for (int i = 0; i < trainers; ++i) {
    t.push_back("10.2.0." + std::to_string(i % 50 + 1) + ":" + std::to_string(8000 + i / 50));
  }
  return MakePsLayout(s, t);
}

}  // namespace fleet::testing
