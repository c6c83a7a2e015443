// ParseProcessEnv: every rendered env reads back as the process it was rendered for, and every
// way a hand-written env can be wrong fails with the message Paddle (or the cross-version check) gives.
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "contract_fixtures.h"
#include "fleet/runtime/env_contract.h"

namespace fleet {
namespace {

using namespace fleet::testing;  // NOLINT: test fixtures

// ---- Round trip: render every process, parse it back ----

struct TopologyCase {
  std::string name;
  std::function<Result<Topology>()> build;
  size_t processes;
};

class RoundTripTest : public ::testing::TestWithParam<TopologyCase> {};

std::vector<std::string> Strings(const std::vector<Endpoint>& endpoints) {
  std::vector<std::string> out;
  for (const Endpoint& e : endpoints) out.push_back(e.ToString());
  return out;
}

TEST_P(RoundTripTest, EveryRenderedProcessParsesBackAsItself) {
  const Topology t = MustBuild(GetParam().build());
  const bool heter = t.mode == JobMode::kHeterParameterServer;
  const int trainers = static_cast<int>(t.OfRole(Role::kTrainer).size());
  std::vector<int> stage_sizes;
  for (int s = 1; s <= t.StageCount(); ++s) stage_sizes.push_back(static_cast<int>(t.StageEndpoints(s).size()));
  const std::vector<RenderedProcess> all = RenderAll(t);
  ASSERT_EQ(all.size(), GetParam().processes);
  for (const RenderedProcess& rp : all) {
    const Process& p = rp.process;
    SCOPED_TRACE(std::string(RoleEnvName(p.role)) + " " + p.endpoint.ToString());
    auto parsed = ParseProcessEnv(rp.env, KindOf(t));
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    EXPECT_FALSE(parsed->non_distributed);
    EXPECT_EQ(parsed->role, p.role);
    // Paddle's current_id: heter workers count after all trainers.
    EXPECT_EQ(parsed->id, p.role == Role::kHeterTrainer ? p.rank + trainers : p.rank);
    EXPECT_EQ(parsed->trainers_num, trainers);
    EXPECT_EQ(parsed->current_endpoint, p.endpoint.ToString());
    EXPECT_EQ(parsed->trainer_endpoints, Strings(t.EndpointsOf(Role::kTrainer)));
    EXPECT_EQ(parsed->server_endpoints, Strings(t.EndpointsOf(Role::kServer)));
    EXPECT_EQ(parsed->heter_endpoints, heter ? Strings(t.EndpointsOf(Role::kHeterTrainer)) : std::vector<std::string>{});
    if (heter && p.role != Role::kServer) {
      EXPECT_EQ(parsed->stage_id, p.stage);
      EXPECT_EQ(parsed->stage_num, t.StageCount());
      EXPECT_EQ(parsed->stage_trainers, stage_sizes);
      EXPECT_EQ(parsed->previous_stage_endpoints,
                p.stage > 1 ? Strings(t.StageEndpoints(p.stage - 1)) : std::vector<std::string>{});
      EXPECT_EQ(parsed->next_stage_endpoints, Strings(t.StageEndpoints(p.stage + 1)));
    } else {
      EXPECT_EQ(parsed->stage_id, 0);
      EXPECT_EQ(parsed->stage_num, 0);
    }
    if (p.role == Role::kHeterTrainer) {
      EXPECT_EQ(parsed->heter_device_type, DeviceKindName(p.device_kind));
    }
    const bool reads_devices = (t.mode == JobMode::kCollective || p.role == Role::kHeterTrainer) &&
                               p.device_kind != DeviceKind::kCpu;
    EXPECT_EQ(parsed->selected_devices, reads_devices ? p.devices : std::vector<int>{});
    if (t.mode == JobMode::kCollective) {
      EXPECT_EQ(parsed->nodes_num, static_cast<int>(t.nodes.size()));
    }
  }
}

CollectiveLayout LargeCollectiveLayout() {  // 125 nodes x 8 GPUs, one process per GPU
  CollectiveLayout layout;
  for (int n = 0; n < 125; ++n) {
    layout.nodes.push_back("10.3." + std::to_string(n / 100) + "." + std::to_string(n % 100 + 1));
    layout.node_ports.push_back({6070, 6071, 6072, 6073, 6074, 6075, 6076, 6077});
  }
  layout.device_groups = {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}};
  layout.device_kind = DeviceKind::kGpu;
  return layout;
}

INSTANTIATE_TEST_SUITE_P(
    Topologies, RoundTripTest,
    ::testing::Values(
        TopologyCase{"CollectiveSingleNodeCpu", [] { return BuildCollectiveTopology(CollectiveCpuLayout()); }, 2},
        TopologyCase{"CollectiveCpuWithFileGloo",
                     [] {
                       CollectiveLayout l = CollectiveCpuLayout();
                       l.gloo = GlooSettings{2, 2, "/tmp/gloo", ""};
                       return BuildCollectiveTopology(l);
                     },
                     2},
        TopologyCase{"CollectiveOneNodeFourGpus",
                     [] { return BuildCollectiveTopology(CollectiveOneNodeFourGpusLayout()); }, 4},
        TopologyCase{"CollectiveTwoNodesNproc2",
                     [] { return BuildCollectiveTopology(CollectiveTwoNodesNproc2Layout()); }, 4},
        TopologyCase{"CollectiveXpuUsesBkcl",
                     [] {
                       CollectiveLayout l = CollectiveOneNodeFourGpusLayout();
                       l.device_kind = DeviceKind::kXpu;
                       return BuildCollectiveTopology(l);
                     },
                     4},
        TopologyCase{"CollectiveRemappedPositions",
                     [] { return BuildCollectiveTopology(CollectiveRemappedLayout()); }, 4},
        TopologyCase{"Collective125NodesX8Gpus", [] { return BuildCollectiveTopology(LargeCollectiveLayout()); },
                     1000},
        TopologyCase{"PsTwoServersThreeTrainers",
                     [] { return BuildPsTopology(PsTwoServersThreeTrainersLayout()); }, 5},
        TopologyCase{"PsServersOnDistinctPorts",
                     [] {
                       return BuildPsTopology(MakePsLayout({"10.0.0.1:6000", "10.0.0.1:6001"},
                                                           {"10.0.0.2:6100", "10.0.0.2:6101"}));
                     },
                     4},
        TopologyCase{"PsGpuTrainersWithHttpGloo",
                     [] {
                       PsLayout l = PsTwoServersThreeTrainersLayout();
                       l.trainer_device = DeviceKind::kGpu;
                       l.gpu_pool = {"0", "1"};
                       l.gloo.with_gloo = 2;
                       return BuildPsTopology(l);
                     },
                     5},
        TopologyCase{"HeterGpuThenCpuStage", [] { return BuildPsTopology(HeterTwoStagesLayout()); }, 6},
        TopologyCase{"HeterXpuStage",
                     [] {
                       PsLayout l = MakePsLayout({"10.0.0.1:6000"}, {"10.0.0.1:6100", "10.0.0.1:6101"});
                       l.heter_stages = {{DeviceKind::kXpu, Eps({"10.0.0.5:6200"})}};
                       l.xpu_pool = {"3"};
                       return BuildPsTopology(l);
                     },
                     4},
        TopologyCase{"Ps10ServersX990Trainers", [] { return BuildPsTopology(LargePsLayout(10, 990)); }, 1000}),
    [](const auto& case_info) { return case_info.param.name; });

// ---- Parser errors: mutate one valid rendered env ----

enum class Base { kPsTrainer, kPsServer, kHeterTrainer, kHeterWorker, kHeterLast, kCollectiveGpu, kCollectiveCpu };

EnvMap BaseEnv(Base base) {
  switch (base) {
    case Base::kPsTrainer:  // trainer 0 = 10.0.0.1:6100
      return EnvOf(MustBuild(BuildPsTopology(PsTwoServersThreeTrainersLayout())), Role::kTrainer, 0);
    case Base::kPsServer:  // server 1 = 10.0.0.2:6000
      return EnvOf(MustBuild(BuildPsTopology(PsTwoServersThreeTrainersLayout())), Role::kServer, 1);
    case Base::kHeterTrainer:  // trainer 0 = 10.0.0.1:6100
      return EnvOf(MustBuild(BuildPsTopology(HeterTwoStagesLayout())), Role::kTrainer, 0);
    case Base::kHeterWorker:  // stage 2 gpu worker 10.0.0.3:6200
      return EnvOf(MustBuild(BuildPsTopology(HeterTwoStagesLayout())), Role::kHeterTrainer, 0);
    case Base::kHeterLast:  // stage 3 cpu worker 10.0.0.4:6300
      return EnvOf(MustBuild(BuildPsTopology(HeterTwoStagesLayout())), Role::kHeterTrainer, 2);
    case Base::kCollectiveGpu:  // rank 0 = 10.0.0.1:6070 of 2 nodes x 2 processes, gpus 0,1
      return EnvOf(MustBuild(BuildCollectiveTopology(CollectiveTwoNodesNproc2Layout())), Role::kTrainer, 0);
    case Base::kCollectiveCpu:  // rank 0 = 10.0.0.1:6070, gloo backend
      return EnvOf(MustBuild(BuildCollectiveTopology(CollectiveCpuLayout())), Role::kTrainer, 0);
  }
  return {};
}

bool IsCollective(Base base) { return base == Base::kCollectiveGpu || base == Base::kCollectiveCpu; }

struct ParseErrorCase {
  std::string name;
  Base base;
  std::vector<std::pair<std::string, std::optional<std::string>>> edits;  // nullopt: unset
  std::string error;
};

class ParseErrorTest : public ::testing::TestWithParam<ParseErrorCase> {};

TEST_P(ParseErrorTest, FailsWithTheExactMessage) {
  const ParseErrorCase& c = GetParam();
  EnvMap env = BaseEnv(c.base);
  const RoleMakerKind kind = IsCollective(c.base) ? RoleMakerKind::kCollective : RoleMakerKind::kParameterServer;
  ASSERT_TRUE(ParseProcessEnv(env, kind).ok()) << "the unmutated env must parse";
  for (const auto& [name, value] : c.edits) {
    ASSERT_TRUE(env.count(name) || value) << "test edits a variable that is not rendered: " << name;
    if (value) env[name] = *value; else env.erase(name);
  }
  auto parsed = ParseProcessEnv(env, kind);
  ASSERT_FALSE(parsed.ok()) << "parsed as id " << parsed->id;
  EXPECT_EQ(parsed.error(), c.error);
}

std::string CanNotFind(const std::string& name) { return "Can not find " + name + ", please check your environment."; }
std::string InitError(const std::string& name) {
  return "paddle.distributed initialize error, environment variable " + name + " is needed, but not set.";
}
std::string BadRole(const std::string& role) {
  return "TRAINING_ROLE must be PSERVER or TRAINER or HETER_TRAINER, but get " + role +
         ", please check your environment.";
}
const std::string kLegacyHeter =
    "PADDLE_HETER_TRAINER_IP_PORT_LIST must equal PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST (Paddle 2.0/2.1 read "
    "heter workers from it)";
constexpr std::nullopt_t kUnset = std::nullopt;

INSTANTIATE_TEST_SUITE_P(
    Paddle, ParseErrorTest,
    ::testing::Values(
        // Paddle's "Can not find" for each required variable.
        ParseErrorCase{"MissingTrainersNum", Base::kPsTrainer, {{"PADDLE_TRAINERS_NUM", kUnset}}, CanNotFind("PADDLE_TRAINERS_NUM")},
        ParseErrorCase{"MissingTrainingRole", Base::kPsServer, {{"TRAINING_ROLE", kUnset}}, CanNotFind("TRAINING_ROLE")},
        ParseErrorCase{"MissingTrainerId", Base::kPsTrainer, {{"PADDLE_TRAINER_ID", kUnset}}, CanNotFind("PADDLE_TRAINER_ID")},
        ParseErrorCase{"MissingPortOnTrainer", Base::kPsTrainer, {{"PADDLE_PORT", kUnset}}, CanNotFind("PADDLE_PORT")},
        ParseErrorCase{"MissingPortOnServer", Base::kPsServer, {{"PADDLE_PORT", kUnset}}, CanNotFind("PADDLE_PORT")},
        ParseErrorCase{"MissingPodIpOnServer", Base::kPsServer, {{"POD_IP", kUnset}}, CanNotFind("POD_IP")},
        ParseErrorCase{"MissingPodIpOnHeterWorker", Base::kHeterWorker, {{"POD_IP", kUnset}}, CanNotFind("POD_IP")},
        ParseErrorCase{"MissingStageIdOnHeterWorker", Base::kHeterWorker, {{"STAGE_ID", kUnset}}, CanNotFind("STAGE_ID")},
        ParseErrorCase{"MissingStageNumOnHeterTrainerStageOne", Base::kHeterTrainer, {{"STAGE_NUM", kUnset}}, CanNotFind("STAGE_NUM")},
        ParseErrorCase{"MissingStageTrainersNum", Base::kHeterWorker, {{"PADDLE_STAGE_TRAINERS_NUM", kUnset}},
                       CanNotFind("PADDLE_STAGE_TRAINERS_NUM")},
        ParseErrorCase{"MissingHeterDeviceType", Base::kHeterWorker, {{"HETER_DEVICE_TYPE", kUnset}}, CanNotFind("HETER_DEVICE_TYPE")},
        // Roles and lists Paddle rejects.
        ParseErrorCase{"BareHeterRole", Base::kHeterWorker, {{"TRAINING_ROLE", "HETER"}}, BadRole("HETER")},
        ParseErrorCase{"LowercaseRole", Base::kPsTrainer, {{"TRAINING_ROLE", "trainer"}}, BadRole("trainer")},
        ParseErrorCase{"ServerPortNotInServerList", Base::kPsServer, {{"PADDLE_PORT", "6009"}}, "'10.0.0.2:6009' is not in list"},
        ParseErrorCase{"ServerDnsNameWhereListHasIp", Base::kPsServer, {{"POD_IP", "ps-1.svc"}}, "'ps-1.svc:6000' is not in list"},
        ParseErrorCase{"HeterWorkerNotInAllList", Base::kHeterWorker, {{"PADDLE_PORT", "6209"}}, "'10.0.0.3:6209' is not in list"},
        ParseErrorCase{"HeterWorkerWithEmptyPreviousList", Base::kHeterWorker,
                       {{"PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST", ""}}, "training_role should be trainer or pserver"},
        ParseErrorCase{"HeterWorkerWithoutPreviousList", Base::kHeterLast,
                       {{"PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST", kUnset}}, "training_role should be trainer or pserver"},
        ParseErrorCase{"TrainerWithEmptyNextListInHeterMode", Base::kHeterTrainer,
                       {{"PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST", ""}}, "training_role should be heter trainer or pserver"},
        ParseErrorCase{"HeterDeviceTypeNpu", Base::kHeterWorker, {{"HETER_DEVICE_TYPE", "npu"}},
                       "HETER_DEVICE_TYPE should be cpu,gpu or xpu"},
        ParseErrorCase{"ServerListWithSpaceAfterComma", Base::kPsServer,
                       {{"PADDLE_PSERVERS_IP_PORT_LIST", "10.0.0.1:6000, 10.0.0.2:6000"}},
                       "PADDLE_PSERVERS_IP_PORT_LIST entry ' 10.0.0.2:6000' has surrounding whitespace"},
        ParseErrorCase{"EmptyServerList", Base::kPsTrainer, {{"PADDLE_PSERVERS_IP_PORT_LIST", ""}},
                       "PADDLE_PSERVERS_IP_PORT_LIST is empty"},
        ParseErrorCase{"ServerListedTwice", Base::kPsServer,
                       {{"PADDLE_PSERVERS_IP_PORT_LIST", "10.0.0.2:6000,10.0.0.2:6000"}},
                       "PADDLE_PSERVERS_IP_PORT_LIST lists an endpoint twice"},
        // Gloo.
        ParseErrorCase{"GlooRendezvousFiveOnPsTrainer", Base::kPsTrainer,
                       {{"PADDLE_WITH_GLOO", "1"}, {"PADDLE_GLOO_RENDEZVOUS", "5"}}, "gloo initialized error, please check arguments"},
        ParseErrorCase{"GlooRendezvousFiveOnCollective", Base::kCollectiveCpu,
                       {{"PADDLE_WITH_GLOO", "2"}, {"PADDLE_GLOO_RENDEZVOUS", "5"}}, "gloo initialized error, please check arguments"},
        ParseErrorCase{"GlooFileRendezvousWithoutPath", Base::kPsServer,
                       {{"PADDLE_WITH_GLOO", "2"}, {"PADDLE_GLOO_RENDEZVOUS", "2"}},
                       "PADDLE_GLOO_FS_PATH must be set for gloo rendezvous type 2"},
        ParseErrorCase{"GlooHttpRendezvousWithoutEndpoint", Base::kPsTrainer,
                       {{"PADDLE_WITH_GLOO", "1"}, {"PADDLE_GLOO_HTTP_ENDPOINT", kUnset}}, CanNotFind("PADDLE_GLOO_HTTP_ENDPOINT")},
        // Dygraph init_parallel_env.
        ParseErrorCase{"CollectiveMissingSelectedGpus", Base::kCollectiveGpu, {{"FLAGS_selected_gpus", kUnset}},
                       InitError("FLAGS_selected_gpus")},
        ParseErrorCase{"CollectiveMissingTrainerId", Base::kCollectiveGpu, {{"PADDLE_TRAINER_ID", kUnset}},
                       InitError("PADDLE_TRAINER_ID")},
        ParseErrorCase{"CollectiveMissingCurrentEndpoint", Base::kCollectiveCpu, {{"PADDLE_CURRENT_ENDPOINT", kUnset}},
                       InitError("PADDLE_CURRENT_ENDPOINT")},
        ParseErrorCase{"CollectiveMissingTrainersNum", Base::kCollectiveGpu, {{"PADDLE_TRAINERS_NUM", kUnset}},
                       InitError("PADDLE_TRAINERS_NUM")},
        ParseErrorCase{"CollectiveEmptySelectedGpus", Base::kCollectiveGpu, {{"FLAGS_selected_gpus", ""}},
                       "FLAGS_selected_gpus is empty for a nccl job"},
        ParseErrorCase{"CollectiveCurrentEndpointNotListed", Base::kCollectiveGpu, {{"PADDLE_CURRENT_ENDPOINT", "10.0.0.9:6070"}},
                       "PADDLE_CURRENT_ENDPOINT '10.0.0.9:6070' is not in PADDLE_TRAINER_ENDPOINTS"},
        ParseErrorCase{"CollectivePsRole", Base::kCollectiveGpu, {{"PADDLE_TRAINING_ROLE", "PSERVER"}},
                       "PADDLE_TRAINING_ROLE must be TRAINER for a collective job, got 'PSERVER'"},
        ParseErrorCase{"CollectiveUnknownBackend", Base::kCollectiveCpu, {{"PADDLE_DISTRI_BACKEND", "mpi"}},
                       "PADDLE_DISTRI_BACKEND must be one of nccl, gloo, bkcl, auto, heter, xccl; got 'mpi'"},
        // Cross-version consistency.
        ParseErrorCase{"PsTrainerIdPicksAnotherTrainersEndpoint", Base::kPsTrainer, {{"PADDLE_TRAINER_ID", "1"}},
                       "PADDLE_TRAINER_ENDPOINTS[1] is '10.0.0.2:6100' but this trainer is POD_IP:PADDLE_PORT '10.0.0.1:6100'"},
        ParseErrorCase{"PsTrainersNumDiffersFromTrainerList", Base::kPsTrainer, {{"PADDLE_TRAINERS_NUM", "4"}},
                       "PADDLE_TRAINER_ENDPOINTS lists 3 trainers but PADDLE_TRAINERS_NUM is 4"},
        ParseErrorCase{"PsTrainerIdNotBelowTrainersNum", Base::kPsTrainer, {{"PADDLE_TRAINER_ID", "3"}},
                       "PADDLE_TRAINER_ID 3 is not below PADDLE_TRAINERS_NUM 3"},
        ParseErrorCase{"CollectiveIdIsNotPositionOfCurrentEndpoint", Base::kCollectiveGpu, {{"PADDLE_TRAINER_ID", "1"}},
                       "PADDLE_TRAINER_ID is 1 but PADDLE_CURRENT_ENDPOINT '10.0.0.1:6070' is entry 0 of PADDLE_TRAINER_ENDPOINTS"},
        ParseErrorCase{"CollectiveTrainersNumMismatch", Base::kCollectiveGpu, {{"PADDLE_TRAINERS_NUM", "5"}},
                       "PADDLE_TRAINERS_NUM is 5 but PADDLE_TRAINER_ENDPOINTS lists 4 trainers"},
        ParseErrorCase{"CollectiveGlobalRankMismatch", Base::kCollectiveGpu, {{"PADDLE_GLOBAL_RANK", "3"}},
                       "PADDLE_GLOBAL_RANK is 3 but should be 0"},
        ParseErrorCase{"CollectiveGlobalSizeMismatch", Base::kCollectiveGpu, {{"PADDLE_GLOBAL_SIZE", "8"}},
                       "PADDLE_GLOBAL_SIZE is 8 but should be 4"},
        ParseErrorCase{"CollectiveLocalRankMismatch", Base::kCollectiveGpu, {{"PADDLE_LOCAL_RANK", "1"}},
                       "PADDLE_LOCAL_RANK is 1 but should be 0"},
        ParseErrorCase{"CollectiveRankInNodeNotBelowLocalSize", Base::kCollectiveGpu,
                       {{"PADDLE_RANK_IN_NODE", "2"}, {"PADDLE_LOCAL_RANK", "2"}}, "PADDLE_RANK_IN_NODE 2 is not below PADDLE_LOCAL_SIZE 2"},
        ParseErrorCase{"CollectiveLocalDeviceIdsDifferFromSelectedGpus", Base::kCollectiveGpu, {{"PADDLE_LOCAL_DEVICE_IDS", "0"}},
                       "PADDLE_LOCAL_DEVICE_IDS '0' differs from FLAGS_selected_gpus '0,1'"},
        ParseErrorCase{"CollectiveWorldDeviceIdsMissAProcess", Base::kCollectiveGpu, {{"PADDLE_WORLD_DEVICE_IDS", "0:1,2:3"}},
                       "PADDLE_WORLD_DEVICE_IDS must have one entry per trainer (4), got '0:1,2:3'"},
        ParseErrorCase{"HeterLegacyListMissingOnWorker", Base::kHeterWorker, {{"PADDLE_HETER_TRAINER_IP_PORT_LIST", kUnset}}, kLegacyHeter},
        ParseErrorCase{"HeterLegacyListDiffersOnTrainer", Base::kHeterTrainer,
                       {{"PADDLE_HETER_TRAINER_IP_PORT_LIST", "10.0.0.3:6200"}}, kLegacyHeter},
        // Stage consistency.
        ParseErrorCase{"StageTrainersFirstEntryIsNotTrainerCount", Base::kHeterWorker, {{"PADDLE_STAGE_TRAINERS_NUM", "[3, 2, 1]"}},
                       "PADDLE_STAGE_TRAINERS_NUM[0] must be the trainer count 2"},
        ParseErrorCase{"StageTrainersNotAListLiteral", Base::kHeterTrainer, {{"PADDLE_STAGE_TRAINERS_NUM", "2,2,1"}},
                       "PADDLE_STAGE_TRAINERS_NUM must be a Python list of integers such as [2, 2], got '2,2,1'"},
        ParseErrorCase{"StageTrainersLengthIsNotStageNum", Base::kHeterWorker, {{"PADDLE_STAGE_TRAINERS_NUM", "[2, 2]"}},
                       "PADDLE_STAGE_TRAINERS_NUM has 2 stages but STAGE_NUM is 3"},
        ParseErrorCase{"StageIdAboveStageNum", Base::kHeterLast, {{"STAGE_ID", "4"}}, "STAGE_ID 4 is outside 1..3"},
        ParseErrorCase{"LastStageWithNextList", Base::kHeterLast, {{"PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST", "10.0.0.1:6100"}},
                       "the last stage must have an empty PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST"},
        ParseErrorCase{"MiddleStageWithEmptyNextList", Base::kHeterWorker, {{"PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST", ""}},
                       "PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST is empty before the last stage"},
        ParseErrorCase{"TrainerClaimsStageTwo", Base::kHeterTrainer, {{"STAGE_ID", "2"}}, "a TRAINER is stage 1, but STAGE_ID is 2"},
        ParseErrorCase{"HeterWorkerClaimsStageOne", Base::kHeterWorker, {{"STAGE_ID", "1"}},
                       "a HETER_TRAINER is stage 2 or later, but STAGE_ID is 1"}),
    [](const auto& case_info) { return case_info.param.name; });

// ---- Non-distributed fallbacks ----

TEST(ParseProcessEnv, PsEnvWithoutServerListIsNonDistributed) {
  EnvMap env = BaseEnv(Base::kPsTrainer);
  env.erase("PADDLE_PSERVERS_IP_PORT_LIST");
  for (const EnvMap& e : {env, EnvMap{}}) {
    auto parsed = ParseProcessEnv(e, RoleMakerKind::kParameterServer);
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    EXPECT_TRUE(parsed->non_distributed);
    EXPECT_EQ(parsed->role, Role::kTrainer);
    EXPECT_EQ(parsed->id, 0);
    EXPECT_EQ(parsed->trainers_num, 1);
  }
}

TEST(ParseProcessEnv, CollectiveEnvWithoutTrainerEndpointsIsOneLocalProcess) {
  EnvMap env = BaseEnv(Base::kCollectiveGpu);
  env.erase("PADDLE_TRAINER_ENDPOINTS");
  for (const EnvMap& e : {env, EnvMap{}}) {
    auto parsed = ParseProcessEnv(e, RoleMakerKind::kCollective);
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    EXPECT_TRUE(parsed->non_distributed);
    EXPECT_EQ(parsed->id, 0);
    EXPECT_EQ(parsed->trainers_num, 1);
    EXPECT_EQ(parsed->trainer_endpoints, std::vector<std::string>{"127.0.0.1:6170"});
    EXPECT_EQ(parsed->current_endpoint, "127.0.0.1:6170");
  }
}

// ---- What parsing accepts beyond the rendered form ----

TEST(ParseProcessEnv, CollectiveCpuNeedsNoGpuFlag) {
  EnvMap env = BaseEnv(Base::kCollectiveCpu);
  ASSERT_EQ(env.count("FLAGS_selected_gpus"), 0u);
  auto parsed = ParseProcessEnv(env, RoleMakerKind::kCollective);
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  EXPECT_TRUE(parsed->selected_devices.empty());
}

TEST(ParseProcessEnv, PreTwoTwoCollectiveEnvWithoutBackendNeedsGpuFlag) {
  EnvMap env = BaseEnv(Base::kCollectiveGpu);
  env.erase("PADDLE_DISTRI_BACKEND");  // Paddle < 2.2 launchers do not set it: nccl is implied
  auto parsed = ParseProcessEnv(env, RoleMakerKind::kCollective);
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  EXPECT_EQ(parsed->selected_devices, (std::vector<int>{0, 1}));
  env.erase("FLAGS_selected_gpus");
  EXPECT_EQ(ParseProcessEnv(env, RoleMakerKind::kCollective).error(), InitError("FLAGS_selected_gpus"));
}

TEST(ParseProcessEnv, HeterGpuWorkerWithoutSelectedGpusDefaultsToDeviceZero) {
  EnvMap env = BaseEnv(Base::kHeterWorker);
  env.erase("FLAGS_selected_gpus");
  auto parsed = ParseProcessEnv(env, RoleMakerKind::kParameterServer);
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  EXPECT_EQ(parsed->selected_devices, std::vector<int>{0});
}

}  // namespace
}  // namespace fleet
