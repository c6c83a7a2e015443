// EnvRenderer / RenderProcessEnv: the exact variables every process of every job mode gets.
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "contract_fixtures.h"
#include "fleet/base/strings.h"
#include "fleet/runtime/env_contract.h"

namespace fleet {
namespace {

using namespace fleet::testing;  // NOLINT: test fixtures

constexpr const char* kUnset = "<unset>";
using Expected = std::vector<std::pair<std::string, std::string>>;

// Checks each listed variable's exact value ("<unset>": must be absent).
void ExpectVars(const EnvMap& env, const Expected& expected) {
  for (const auto& [name, value] : expected) EXPECT_EQ(Get(env, name), value) << "variable " << name;
}

// ---- Collective ----

TEST(CollectiveEnv, SingleNodeCpuUsesGlooBackendAndNoGpuFlags) {
  Topology t = MustBuild(BuildCollectiveTopology(CollectiveCpuLayout()));
  ExpectVars(RenderProcessEnv(t, t.processes[1]),
             {{"PADDLE_TRAINER_ID", "1"},
              {"PADDLE_CURRENT_ENDPOINT", "10.0.0.1:6071"},
              {"PADDLE_TRAINERS_NUM", "2"},
              {"PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:6070,10.0.0.1:6071"},
              {"PADDLE_RANK_IN_NODE", "1"},
              {"PADDLE_DISTRI_BACKEND", "gloo"},
              {"PADDLE_LOCAL_DEVICE_IDS", ""},
              {"PADDLE_WORLD_DEVICE_IDS", ","},
              {"FLAGS_selected_gpus", kUnset},
              {"FLAGS_selected_accelerators", kUnset},
              {"CUDA_VISIBLE_DEVICES", kUnset},
              {"PADDLE_WITH_GLOO", "0"},
              {"PADDLE_GLOO_RENDEZVOUS", "3"},
              {"PADDLE_GLOO_FS_PATH", kUnset},
              {"TRAINING_ROLE", kUnset}});
}

TEST(CollectiveEnv, OneGpuPerProcessSelectsItsOwnGpu) {
  Topology t = MustBuild(BuildCollectiveTopology(CollectiveOneNodeFourGpusLayout()));
  for (const RenderedProcess& rp : RenderAll(t)) {
    const std::string r = std::to_string(rp.process.rank);
    SCOPED_TRACE("rank " + r);
    ExpectVars(rp.env, {{"PADDLE_TRAINER_ID", r},
                        {"PADDLE_CURRENT_ENDPOINT", "10.0.0.1:" + std::to_string(6070 + rp.process.rank)},
                        {"PADDLE_TRAINERS_NUM", "4"},
                        {"PADDLE_TRAINER_ENDPOINTS",
                         "10.0.0.1:6070,10.0.0.1:6071,10.0.0.1:6072,10.0.0.1:6073"},
                        {"PADDLE_DISTRI_BACKEND", "nccl"},
                        {"FLAGS_selected_gpus", r},
                        {"FLAGS_selected_accelerators", r},
                        {"PADDLE_LOCAL_DEVICE_IDS", r},
                        {"PADDLE_WORLD_DEVICE_IDS", "0,1,2,3"},
                        {"PADDLE_RANK_IN_NODE", r},
                        {"CUDA_VISIBLE_DEVICES", kUnset}});
  }
}

TEST(CollectiveEnv, NprocPerNodeGivesEachProcessItsDeviceGroupAndRanksGoNodeByNode) {
  Topology t = MustBuild(BuildCollectiveTopology(CollectiveTwoNodesNproc2Layout()));
  const std::vector<std::string> endpoints = {"10.0.0.1:6070", "10.0.0.1:6071", "10.0.0.2:6070",
                                              "10.0.0.2:6071"};
  const std::vector<RenderedProcess> all = RenderAll(t);
  ASSERT_EQ(all.size(), 4u);
  for (size_t r = 0; r < all.size(); ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const std::string gpus = r % 2 == 0 ? "0,1" : "2,3";
    const std::string local = std::to_string(r % 2);
    ExpectVars(all[r].env, {{"PADDLE_TRAINER_ID", std::to_string(r)},
                            {"PADDLE_CURRENT_ENDPOINT", endpoints[r]},
                            {"PADDLE_TRAINER_ENDPOINTS", JoinStrings(endpoints, ",")},
                            {"PADDLE_TRAINERS_NUM", "4"},
                            {"FLAGS_selected_gpus", gpus},
                            {"PADDLE_LOCAL_DEVICE_IDS", gpus},
                            {"PADDLE_WORLD_DEVICE_IDS", "0:1,2:3,0:1,2:3"},
                            {"PADDLE_RANK_IN_NODE", local},
                            // 2.3+ names
                            {"PADDLE_GLOBAL_SIZE", "4"},
                            {"PADDLE_LOCAL_SIZE", "2"},
                            {"PADDLE_GLOBAL_RANK", std::to_string(r)},
                            {"PADDLE_LOCAL_RANK", local},
                            {"PADDLE_NNODES", "2"}});
  }
}

TEST(CollectiveEnv, SelectedGpusArePositionsInVisibleDevicesNotPhysicalIds) {
  Topology t = MustBuild(BuildCollectiveTopology(CollectiveRemappedLayout()));
  const std::vector<RenderedProcess> all = RenderAll(t);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(Get(all[0].env, "FLAGS_selected_gpus"), "1");
  EXPECT_EQ(Get(all[1].env, "FLAGS_selected_gpus"), "3");
  EXPECT_EQ(Get(all[3].env, "FLAGS_selected_gpus"), "3");
  EXPECT_EQ(Get(all[3].env, "PADDLE_WORLD_DEVICE_IDS"), "1,3,1,3");
  EXPECT_EQ(Get(all[3].env, "CUDA_VISIBLE_DEVICES"), kUnset);  // the inherited value stands
}

TEST(CollectiveEnv, GlooSettingsAreRenderedForEveryProcess) {
  CollectiveLayout layout = CollectiveCpuLayout();
  layout.gloo = GlooSettings{1, 2, "/tmp/gloo-job", ""};
  Topology t = MustBuild(BuildCollectiveTopology(layout));
  for (const RenderedProcess& rp : RenderAll(t)) {
    ExpectVars(rp.env, {{"PADDLE_WITH_GLOO", "1"},
                        {"PADDLE_GLOO_RENDEZVOUS", "2"},
                        {"PADDLE_GLOO_FS_PATH", "/tmp/gloo-job"}});
  }
}

TEST(CollectiveEnv, RendererAndOneShotRenderAgree) {
  Topology t = MustBuild(BuildCollectiveTopology(CollectiveTwoNodesNproc2Layout()));
  EnvRenderer renderer(t);
  for (const Process& p : t.processes) EXPECT_EQ(renderer.Render(p), RenderProcessEnv(t, p));
}

// ---- Parameter server ----

TEST(PsEnv, EveryProcessSeesTheJobWideListsAndGlooEndpoint) {
  Topology t = MustBuild(BuildPsTopology(PsTwoServersThreeTrainersLayout()));
  for (const RenderedProcess& rp : RenderAll(t)) {
    SCOPED_TRACE(rp.process.endpoint.ToString());
    ExpectVars(rp.env, {{"PADDLE_PSERVERS_IP_PORT_LIST", "10.0.0.1:6000,10.0.0.2:6000"},
                        {"PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:6100,10.0.0.2:6100,10.0.0.1:6101"},
                        {"PADDLE_TRAINERS_NUM", "3"},
                        {"PADDLE_GLOO_HTTP_ENDPOINT", "10.0.0.1:6500"},
                        {"PADDLE_WITH_GLOO", "0"},
                        {"PADDLE_GLOO_RENDEZVOUS", "3"},
                        {"PADDLE_HETER_TRAINER_IP_PORT_LIST", ""},
                        {"PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST", kUnset},
                        {"STAGE_ID", kUnset},
                        {"PADDLE_NNODES", "2"}});
  }
}

TEST(PsEnv, TrainerIdIsPositionOfItsOwnEndpointInTrainerList) {
  Topology t = MustBuild(BuildPsTopology(PsTwoServersThreeTrainersLayout()));
  const std::vector<std::string> trainers = {"10.0.0.1:6100", "10.0.0.2:6100", "10.0.0.1:6101"};
  for (int id = 0; id < 3; ++id) {
    SCOPED_TRACE("trainer " + std::to_string(id));
    const EnvMap env = EnvOf(t, Role::kTrainer, id);
    const Endpoint own = Ep(trainers[static_cast<size_t>(id)]);
    ExpectVars(env, {{"TRAINING_ROLE", "TRAINER"},
                     {"PADDLE_TRAINER_ID", std::to_string(id)},
                     {"POD_IP", own.host},
                     {"PADDLE_PORT", std::to_string(own.port)},
                     {"FLAGS_selected_gpus", kUnset},
                     {"CUDA_VISIBLE_DEVICES", kUnset}});
    auto listed = SplitString(Get(env, "PADDLE_TRAINER_ENDPOINTS"), ',');
    EXPECT_EQ(listed.at(static_cast<size_t>(id)), Get(env, "POD_IP") + ":" + Get(env, "PADDLE_PORT"));
  }
}

TEST(PsEnv, ServerIndexIsPositionOfPodIpAndPortInServerList) {
  Topology t = MustBuild(BuildPsTopology(PsTwoServersThreeTrainersLayout()));
  for (int index = 0; index < 2; ++index) {
    SCOPED_TRACE("server " + std::to_string(index));
    const EnvMap env = EnvOf(t, Role::kServer, index);
    ExpectVars(env, {{"TRAINING_ROLE", "PSERVER"},
                     {"POD_IP", index == 0 ? "10.0.0.1" : "10.0.0.2"},
                     {"PADDLE_PORT", "6000"},
                     {"PADDLE_TRAINER_ID", kUnset}});
    auto listed = SplitString(Get(env, "PADDLE_PSERVERS_IP_PORT_LIST"), ',');
    EXPECT_EQ(listed.at(static_cast<size_t>(index)), Get(env, "POD_IP") + ":" + Get(env, "PADDLE_PORT"));
  }
}

TEST(PsEnv, LegacyTranspilerNamesAreSetOnServersAndTrainers) {
  Topology t = MustBuild(BuildPsTopology(PsTwoServersThreeTrainersLayout()));
  ExpectVars(EnvOf(t, Role::kTrainer, 1), {{"PADDLE_TRAINING_ROLE", "TRAINER"},
                                           {"PADDLE_PSERVER_IPS", "10.0.0.1,10.0.0.2"},
                                           {"PADDLE_PSERVER_PORT", "6000"},
                                           {"PADDLE_PSERVER_ENDPOINTS", "10.0.0.1:6000,10.0.0.2:6000"},
                                           {"PADDLE_CURRENT_IP", "10.0.0.2"}});
  ExpectVars(EnvOf(t, Role::kServer, 0), {{"PADDLE_TRAINING_ROLE", "PSERVER"},
                                          {"PADDLE_PSERVER_IPS", "10.0.0.1,10.0.0.2"},
                                          {"PADDLE_PSERVER_PORT", "6000"},
                                          {"PADDLE_CURRENT_IP", "10.0.0.1"}});
}

TEST(PsEnv, LegacyServerPortIsOnlySetWhenAllServersShareOnePort) {
  Topology t = MustBuild(BuildPsTopology(
      MakePsLayout({"10.0.0.1:6000", "10.0.0.1:6001"}, {"10.0.0.2:6100"})));
  for (const RenderedProcess& rp : RenderAll(t)) {
    ExpectVars(rp.env, {{"PADDLE_PSERVER_PORT", kUnset}, {"PADDLE_PSERVER_IPS", "10.0.0.1,10.0.0.1"}});
  }
}

TEST(PsEnv, GpuTrainersGetTheirPooledDeviceAsDeviceZero) {
  PsLayout layout = PsTwoServersThreeTrainersLayout();
  layout.trainer_device = DeviceKind::kGpu;
  layout.gpu_pool = {"4", "5"};
  Topology t = MustBuild(BuildPsTopology(layout));
  const std::vector<std::string> visible = {"4", "4", "5"};  // local index 0, 0, 1
  for (int id = 0; id < 3; ++id) {
    SCOPED_TRACE("trainer " + std::to_string(id));
    ExpectVars(EnvOf(t, Role::kTrainer, id),
               {{"CUDA_VISIBLE_DEVICES", visible[static_cast<size_t>(id)]}, {"FLAGS_selected_gpus", "0"}});
  }
  ExpectVars(EnvOf(t, Role::kServer, 0), {{"CUDA_VISIBLE_DEVICES", kUnset}, {"FLAGS_selected_gpus", kUnset}});
}

// PADDLE_TRAINERS means the trainer count to transpiler scripts but the node list to a launcher's
// cluster detection: rendering it would make a child launcher misread the job.
TEST(PsEnv, PaddleTrainersIsNeverRendered) {
  std::vector<Topology> topologies = {
      MustBuild(BuildPsTopology(PsTwoServersThreeTrainersLayout())),
      MustBuild(BuildPsTopology(HeterTwoStagesLayout())),
      MustBuild(BuildCollectiveTopology(CollectiveTwoNodesNproc2Layout())),
      MustBuild(BuildCollectiveTopology(CollectiveCpuLayout()))};
  int rendered = 0;
  for (const Topology& t : topologies) {
    for (const RenderedProcess& rp : RenderAll(t)) {
      EXPECT_EQ(rp.env.count("PADDLE_TRAINERS"), 0u) << rp.process.endpoint.ToString();
      ++rendered;
    }
  }
  EXPECT_EQ(rendered, 5 + 6 + 4 + 2);
}

// ---- PS with heter stages ----

constexpr const char* kAllHeter = "10.0.0.3:6200,10.0.0.3:6201,10.0.0.4:6300";

TEST(HeterEnv, AllHeterListIsInStageOrderOnEveryRoleAndEqualsTheLegacyList) {
  Topology t = MustBuild(BuildPsTopology(HeterTwoStagesLayout()));
  for (const RenderedProcess& rp : RenderAll(t)) {
    SCOPED_TRACE(rp.process.endpoint.ToString());
    ExpectVars(rp.env, {{"PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST", kAllHeter},
                        {"PADDLE_HETER_TRAINER_IP_PORT_LIST", kAllHeter},
                        {"PADDLE_TRAINERS_NUM", "2"},
                        {"PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:6100,10.0.0.2:6100"}});
  }
}

TEST(HeterEnv, TrainersAreStageOneWithNoPreviousAndStageTwoAsNext) {
  Topology t = MustBuild(BuildPsTopology(HeterTwoStagesLayout()));
  ExpectVars(EnvOf(t, Role::kTrainer, 1), {{"TRAINING_ROLE", "TRAINER"},
                                           {"PADDLE_TRAINER_ID", "1"},
                                           {"POD_IP", "10.0.0.2"},
                                           {"PADDLE_PORT", "6100"},
                                           {"STAGE_ID", "1"},
                                           {"STAGE_NUM", "3"},
                                           {"PADDLE_STAGE_TRAINERS_NUM", "[2, 2, 1]"},
                                           {"HETER_DEVICE_TYPE", "cpu"},
                                           {"PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST", ""},
                                           {"PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST",
                                            "10.0.0.3:6200,10.0.0.3:6201"}});
}

TEST(HeterEnv, MiddleStageGpuWorkerSeesBothNeighboursAndItsPooledGpu) {
  Topology t = MustBuild(BuildPsTopology(HeterTwoStagesLayout()));
  ExpectVars(EnvOf(t, Role::kHeterTrainer, 1), {{"TRAINING_ROLE", "HETER_TRAINER"},
                                                {"PADDLE_TRAINER_ID", kUnset},
                                                {"POD_IP", "10.0.0.3"},
                                                {"PADDLE_PORT", "6201"},
                                                {"STAGE_ID", "2"},
                                                {"STAGE_NUM", "3"},
                                                {"PADDLE_STAGE_TRAINERS_NUM", "[2, 2, 1]"},
                                                {"HETER_DEVICE_TYPE", "gpu"},
                                                {"PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST",
                                                 "10.0.0.1:6100,10.0.0.2:6100"},
                                                {"PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST", "10.0.0.4:6300"},
                                                {"CUDA_VISIBLE_DEVICES", "3"},
                                                {"FLAGS_selected_gpus", "0"}});
  EXPECT_EQ(Get(EnvOf(t, Role::kHeterTrainer, 0), "CUDA_VISIBLE_DEVICES"), "2");
}

TEST(HeterEnv, LastStageCpuWorkerHasEmptyNextListAndNoGpuFlags) {
  Topology t = MustBuild(BuildPsTopology(HeterTwoStagesLayout()));
  ExpectVars(EnvOf(t, Role::kHeterTrainer, 2), {{"TRAINING_ROLE", "HETER_TRAINER"},
                                                {"PADDLE_TRAINER_ID", kUnset},
                                                {"STAGE_ID", "3"},
                                                {"HETER_DEVICE_TYPE", "cpu"},
                                                {"PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST",
                                                 "10.0.0.3:6200,10.0.0.3:6201"},
                                                {"PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST", ""},
                                                {"CUDA_VISIBLE_DEVICES", kUnset},
                                                {"FLAGS_selected_gpus", kUnset}});
}

TEST(HeterEnv, ServersGetNoStageVariables) {
  Topology t = MustBuild(BuildPsTopology(HeterTwoStagesLayout()));
  ExpectVars(EnvOf(t, Role::kServer, 0), {{"TRAINING_ROLE", "PSERVER"},
                                          {"STAGE_ID", kUnset},
                                          {"STAGE_NUM", kUnset},
                                          {"PADDLE_STAGE_TRAINERS_NUM", kUnset},
                                          {"HETER_DEVICE_TYPE", kUnset},
                                          {"PADDLE_PREVIOUS_HETER_TRAINER_IP_PORT_LIST", kUnset},
                                          {"PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST", kUnset}});
}

TEST(HeterEnv, RoleIsNeverTheBareHeterValuePaddleRejects) {
  Topology t = MustBuild(BuildPsTopology(HeterTwoStagesLayout()));
  for (const RenderedProcess& rp : RenderAll(t)) {
    EXPECT_EQ(Get(rp.env, "TRAINING_ROLE"), RoleEnvName(rp.process.role));
    EXPECT_NE(Get(rp.env, "TRAINING_ROLE"), "HETER");
  }
}

// Contract section 3: HETER_DEVICE_TYPE of a stage-1 TRAINER is `cpu` (Paddle's launcher sets
// stage_device_map[1] = "cpu"), whatever devices the trainers use.
// Paddle's launcher treats stage 1 as the CPU stage whatever the trainers compute on.
TEST(HeterEnv, TrainersReportCpuDeviceTypeEvenWhenTheyUseGpus) {
  PsLayout layout = HeterTwoStagesLayout();
  layout.trainer_device = DeviceKind::kGpu;
  Topology t = MustBuild(BuildPsTopology(layout));
  ExpectVars(EnvOf(t, Role::kTrainer, 0), {{"HETER_DEVICE_TYPE", "cpu"}, {"FLAGS_selected_gpus", "0"}});
}

TEST(HeterEnv, XpuWorkersGetXpuFlagsFromTheXpuPool) {
  PsLayout layout = MakePsLayout({"10.0.0.1:6000"}, {"10.0.0.1:6100"});
  layout.heter_stages = {{DeviceKind::kXpu, Eps({"10.0.0.5:6200", "10.0.0.5:6201"})}};
  layout.xpu_pool = {"6", "7"};
  Topology t = MustBuild(BuildPsTopology(layout));
  ExpectVars(EnvOf(t, Role::kHeterTrainer, 1), {{"HETER_DEVICE_TYPE", "xpu"},
                                                {"XPU_VISIBLE_DEVICES", "7"},
                                                {"FLAGS_selected_xpus", "0"},
                                                {"FLAGS_selected_gpus", kUnset},
                                                {"PADDLE_STAGE_TRAINERS_NUM", "[1, 2]"},
                                                {"PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST", ""}});
}

// ---- The "Distributed Envs" table order ----

TEST(ContractVariableOrder, PutsRoleAndIdFirstAndUnknownVariablesLastAlphabetically) {
  const EnvMap env = {{"ZZ_EXTRA", "1"}, {"PADDLE_PORT", "1"}, {"AA_EXTRA", "1"},
                      {"PADDLE_TRAINER_ID", "0"}, {"TRAINING_ROLE", "TRAINER"}};
  EXPECT_EQ(ContractVariableOrder(env),
            (std::vector<std::string>{"TRAINING_ROLE", "PADDLE_TRAINER_ID", "PADDLE_PORT", "AA_EXTRA",
                                      "ZZ_EXTRA"}));
  Topology t = MustBuild(BuildPsTopology(HeterTwoStagesLayout()));
  for (const RenderedProcess& rp : RenderAll(t)) {
    EXPECT_EQ(ContractVariableOrder(rp.env).size(), rp.env.size());
  }
}

}  // namespace
}  // namespace fleet
