// topology.h: the builders' model of a job (ranks, nodes, local indexes, device pools) and the
// layouts they refuse.
#include "fleet/runtime/topology.h"

#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "contract_fixtures.h"

namespace fleet {
namespace {

using testing::CollectiveTwoNodesNproc2Layout;
using testing::Eps;
using testing::HeterTwoStagesLayout;
using testing::MakePsLayout;
using testing::MustBuild;
using testing::PsTwoServersThreeTrainersLayout;

TEST(CollectiveTopology, RanksGoNodeByNodeThenLocalIndex) {
  Topology t = MustBuild(BuildCollectiveTopology(CollectiveTwoNodesNproc2Layout()));
  ASSERT_EQ(t.processes.size(), 4u);
  const std::vector<std::string> endpoints = {"10.0.0.1:6070", "10.0.0.1:6071", "10.0.0.2:6070",
                                              "10.0.0.2:6071"};
  for (size_t r = 0; r < 4; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const Process& p = t.processes[r];
    EXPECT_EQ(p.rank, static_cast<int>(r));
    EXPECT_EQ(p.node, static_cast<int>(r / 2));
    EXPECT_EQ(p.local_rank, static_cast<int>(r % 2));
    EXPECT_EQ(p.endpoint.ToString(), endpoints[r]);
    EXPECT_EQ(p.devices, (r % 2 == 0 ? std::vector<int>{0, 1} : std::vector<int>{2, 3}));
  }
  EXPECT_EQ(t.mode, JobMode::kCollective);
  EXPECT_EQ(t.StageCount(), 1);
}

TEST(PsTopology, NodesAreNumberedByFirstAppearanceAndLocalIndexIsPerRoleAndNode) {
  Topology t = MustBuild(BuildPsTopology(PsTwoServersThreeTrainersLayout()));
  EXPECT_EQ(t.mode, JobMode::kParameterServer);
  EXPECT_EQ(t.nodes, (std::vector<std::string>{"10.0.0.1", "10.0.0.2"}));
  ASSERT_EQ(t.processes.size(), 5u);
  struct Want { Role role; int rank; int node; int local; };
  const std::vector<Want> want = {{Role::kServer, 0, 0, 0}, {Role::kServer, 1, 1, 0},
                                  {Role::kTrainer, 0, 0, 0}, {Role::kTrainer, 1, 1, 0},
                                  {Role::kTrainer, 2, 0, 1}};
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("process " + std::to_string(i));
    EXPECT_EQ(t.processes[i].role, want[i].role);
    EXPECT_EQ(t.processes[i].rank, want[i].rank);
    EXPECT_EQ(t.processes[i].node, want[i].node);
    EXPECT_EQ(t.processes[i].local_rank, want[i].local);
  }
}

TEST(PsTopology, HeterStagesAreNumberedFromTwoAndHeterRankIsPositionAcrossStages) {
  Topology t = MustBuild(BuildPsTopology(HeterTwoStagesLayout()));
  EXPECT_EQ(t.mode, JobMode::kHeterParameterServer);
  EXPECT_EQ(t.StageCount(), 3);
  EXPECT_EQ(JoinEndpoints(t.StageEndpoints(1)), "10.0.0.1:6100,10.0.0.2:6100");
  EXPECT_EQ(JoinEndpoints(t.StageEndpoints(2)), "10.0.0.3:6200,10.0.0.3:6201");
  EXPECT_EQ(JoinEndpoints(t.StageEndpoints(3)), "10.0.0.4:6300");
  std::vector<const Process*> heter = t.OfRole(Role::kHeterTrainer);
  ASSERT_EQ(heter.size(), 3u);
  EXPECT_EQ(heter[2]->rank, 2);
  EXPECT_EQ(heter[2]->stage, 3);
}

TEST(PsTopology, PooledDevicesGoRoundRobinByLocalIndexPerNode) {
  PsLayout layout = MakePsLayout({"10.0.0.1:6000"}, {"10.0.0.1:6100"});
  layout.heter_stages = {{DeviceKind::kGpu,
                          Eps({"10.0.0.3:1", "10.0.0.3:2", "10.0.0.3:3", "10.0.0.4:1"})},
                         {DeviceKind::kXpu, Eps({"10.0.0.5:1", "10.0.0.5:2"})}};
  layout.gpu_pool = {"5", "6"};
  layout.xpu_pool = {"1"};
  Topology t = MustBuild(BuildPsTopology(layout));
  std::vector<std::string> visible;
  for (const Process* p : t.OfRole(Role::kHeterTrainer)) {
    visible.push_back(p->visible_devices);
    EXPECT_EQ(p->devices, std::vector<int>{0});
  }
  EXPECT_EQ(visible, (std::vector<std::string>{"5", "6", "5", "5", "1", "1"}));
}

TEST(PsTopology, GpuTrainersTakeOneDeviceEachFromThePool) {
  PsLayout layout = PsTwoServersThreeTrainersLayout();
  layout.trainer_device = DeviceKind::kGpu;
  layout.gpu_pool = {"0", "1"};
  Topology t = MustBuild(BuildPsTopology(layout));
  std::vector<std::string> visible;
  for (const Process* p : t.OfRole(Role::kTrainer)) visible.push_back(p->visible_devices);
  // trainers 0 and 2 share node 10.0.0.1 (local 0 and 1); trainer 1 is alone on 10.0.0.2.
  EXPECT_EQ(visible, (std::vector<std::string>{"0", "0", "1"}));
}

struct BuildErrorCase {
  std::string name;
  std::function<Result<Topology>()> build;
  std::string error;
};

class BuilderErrorTest : public ::testing::TestWithParam<BuildErrorCase> {};

TEST_P(BuilderErrorTest, RefusesTheLayoutWithAMessage) {
  auto built = GetParam().build();
  ASSERT_FALSE(built.ok()) << "built a topology with " << built->processes.size() << " processes";
  EXPECT_EQ(built.error(), GetParam().error);
}

Result<Topology> Ps(const std::function<void(PsLayout&)>& edit) {
  PsLayout layout = PsTwoServersThreeTrainersLayout();
  edit(layout);
  return BuildPsTopology(layout);
}
Result<Topology> Collective(const std::function<void(CollectiveLayout&)>& edit) {
  CollectiveLayout layout = CollectiveTwoNodesNproc2Layout();
  edit(layout);
  return BuildCollectiveTopology(layout);
}

INSTANTIATE_TEST_SUITE_P(
    Builders, BuilderErrorTest,
    ::testing::Values(
        BuildErrorCase{"PsNoServers", [] { return Ps([](PsLayout& l) { l.servers.clear(); }); },
                       "a parameter-server job needs at least one server"},
        BuildErrorCase{"PsNoTrainers", [] { return Ps([](PsLayout& l) { l.trainers.clear(); }); },
                       "a parameter-server job needs at least one trainer"},
        BuildErrorCase{"PsEmptyHeterStage",
                       [] {
                         return Ps([](PsLayout& l) {
                           l.heter_stages = {{DeviceKind::kGpu, Eps({"10.0.0.3:6200"})},
                                             {DeviceKind::kCpu, {}}};
                         });
                       },
                       "heter stage 3 has no heter workers"},
        BuildErrorCase{"PsEndpointSharedByServerAndTrainer",
                       [] { return Ps([](PsLayout& l) { l.trainers[1] = l.servers[0]; }); },
                       "endpoint '10.0.0.1:6000' is used by two processes"},
        BuildErrorCase{"PsEndpointSharedByTrainerAndHeterWorker",
                       [] {
                         return Ps([](PsLayout& l) {
                           l.heter_stages = {{DeviceKind::kCpu, Eps({"10.0.0.1:6101"})}};
                         });
                       },
                       "endpoint '10.0.0.1:6101' is used by two processes"},
        BuildErrorCase{"PsPortZero", [] { return Ps([](PsLayout& l) { l.trainers[0].port = 0; }); },
                       "endpoint '10.0.0.1:0' has no valid port"},
        BuildErrorCase{"PsMissingGlooHttpEndpoint",
                       [] { return Ps([](PsLayout& l) { l.gloo.http_endpoint.clear(); }); },
                       "PS jobs need the gloo HTTP endpoint (server 0's host and the --http_port)"},
        BuildErrorCase{"PsWithGlooThree", [] { return Ps([](PsLayout& l) { l.gloo.with_gloo = 3; }); },
                       "PADDLE_WITH_GLOO must be 0, 1 or 2, got 3"},
        BuildErrorCase{"PsRendezvousZero", [] { return Ps([](PsLayout& l) { l.gloo.rendezvous = 0; }); },
                       "PADDLE_GLOO_RENDEZVOUS must be 1 (HDFS), 2 (FILE) or 3 (HTTP), got 0"},
        BuildErrorCase{"CollectiveNoNodes",
                       [] { return Collective([](CollectiveLayout& l) { l.nodes.clear(); l.node_ports.clear(); }); },
                       "a collective job needs at least one node"},
        BuildErrorCase{"CollectiveNoProcesses",
                       [] { return Collective([](CollectiveLayout& l) { l.device_groups.clear(); }); },
                       "a collective job needs at least one process per node"},
        BuildErrorCase{"CollectivePortListsForFewerNodes",
                       [] { return Collective([](CollectiveLayout& l) { l.node_ports.pop_back(); }); },
                       "collective layout has ports for 1 nodes but 2 nodes"},
        BuildErrorCase{"CollectivePortCountDiffersFromProcessCount",
                       [] { return Collective([](CollectiveLayout& l) { l.node_ports[1] = {6070}; }); },
                       "node '10.0.0.2' has 1 ports for 2 processes"},
        BuildErrorCase{"CollectiveDuplicateNode",
                       [] { return Collective([](CollectiveLayout& l) { l.nodes[1] = "10.0.0.1"; }); },
                       "node '10.0.0.1' is listed twice"},
        BuildErrorCase{"CollectiveNodeWithPort",
                       [] { return Collective([](CollectiveLayout& l) { l.nodes[1] = "10.0.0.2:22"; }); },
                       "host '10.0.0.2:22' contains a character Paddle cannot parse in an endpoint "
                       "(':' ',' ';', space or a control character)"},
        BuildErrorCase{"CollectiveDuplicatePortOnNode",
                       [] { return Collective([](CollectiveLayout& l) { l.node_ports[0] = {6070, 6070}; }); },
                       "endpoint '10.0.0.1:6070' is used by two processes"},
        BuildErrorCase{"CollectivePort65536",
                       [] { return Collective([](CollectiveLayout& l) { l.node_ports[1][1] = 65536; }); },
                       "endpoint '10.0.0.2:65536' has no valid port"}),
    [](const auto& case_info) { return case_info.param.name; });

TEST(PsTopology, FileOrHdfsRendezvousNeedsNoHttpEndpoint) {
  auto built = Ps([](PsLayout& l) {
    l.gloo.http_endpoint.clear();
    l.gloo.rendezvous = 2;
    l.gloo.fs_path = "/tmp/gloo";
  });
  EXPECT_TRUE(built.ok()) << built.error();
}

TEST(NamesOfModesDevicesAndRoles, RoundTripAndRefuseUnknownValues) {
  for (JobMode mode : {JobMode::kCollective, JobMode::kParameterServer, JobMode::kHeterParameterServer}) {
    EXPECT_EQ(*ParseJobMode(JobModeName(mode)), mode);
  }
  for (DeviceKind kind : {DeviceKind::kCpu, DeviceKind::kGpu, DeviceKind::kXpu}) {
    EXPECT_EQ(*ParseDeviceKind(DeviceKindName(kind)), kind);
  }
  EXPECT_EQ(JobModeName(JobMode::kHeterParameterServer), "ps-heter");
  EXPECT_EQ(ParseJobMode("heter").error(), "run mode must be collective, ps or ps-heter, got 'heter'");
  EXPECT_EQ(ParseDeviceKind("npu").error(), "device type must be cpu, gpu or xpu, got 'npu'");
  EXPECT_EQ(RoleEnvName(Role::kTrainer), "TRAINER");
  EXPECT_EQ(RoleEnvName(Role::kServer), "PSERVER");
  EXPECT_EQ(RoleEnvName(Role::kHeterTrainer), "HETER_TRAINER");
}

}  // namespace
}  // namespace fleet
