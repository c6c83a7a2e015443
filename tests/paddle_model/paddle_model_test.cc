// The launcher models reproduce what docs/paddle-launchers.md (shared) found in Paddle's source.
#include "paddle_model/paddle_model.h"

#include <functional>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace fleet::paddle_model {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Ip(int i) { return "10.0.0." + std::to_string(i + 1); }

std::string Joined(int n, const std::string& port) {
  std::string list;
  for (int j = 0; j < n; ++j) list += (j ? "," : "") + Ip(j) + (port.empty() ? "" : ":" + port);
  return list;
}

// A pod at Ip(i), reachable by the name "job-worker-<i>", with one GPU.
Node Pod(int i, Env env, std::vector<std::string> args = {"train.py"}) {
  Node node;
  node.env = std::move(env);
  node.args = std::move(args);
  node.hostname_ip = Ip(i);
  node.names = {"job-worker-" + std::to_string(i)};
  node.visible_gpus = 1;
  return node;
}

// The env the operator renders today for pod i of an n-pod collective job, one process per pod.
Env OperatorToday(int i, int n) {
  return {{"POD_IP", Ip(i)},
          {"PADDLE_TRAINERS", Joined(n, "")},
          {"PADDLE_TRAINER_ENDPOINTS", Joined(n, "6170")},
          {"PADDLE_CURRENT_ENDPOINT", Ip(i) + ":6170"},
          {"PADDLE_TRAINER_ID", std::to_string(i)},
          {"PADDLE_TRAINERS_NUM", std::to_string(n)},
          {"PADDLE_PORT", "6170"},
          {"TRAINER_PORTS_NUM", "1"}};
}

std::vector<Node> Job(int n, const std::function<Env(int)>& env, std::vector<std::string> args = {"train.py"}) {
  std::vector<Node> nodes;
  for (int i = 0; i < n; ++i) nodes.push_back(Pod(i, env(i), args));
  return nodes;
}

std::vector<Node> OperatorTodayJob(int n) {
  return Job(n, [n](int i) { return OperatorToday(i, n); });
}

// Kubeflow's PaddleJob: rank 0 names its own POD_IP, the others a Service that reaches pod 0.
std::vector<Node> KubeflowJob(int n) {
  auto nodes = Job(n, [n](int i) {
    return Env{{"POD_IP", Ip(i)}, {"PADDLE_MASTER", (i == 0 ? Ip(0) : "job-master") + std::string(":36543")},
               {"PADDLE_NNODES", std::to_string(n)}, {"PADDLE_JOB_ID", "job"}};
  });
  nodes[0].names.push_back("job-master");
  return nodes;
}

TEST(NewLauncherJobTest, OperatorsEnvTodayGivesRandomRanksBeyondZeroOn25) {
  const JobOutcome job = SimulateNewLauncherJob(Version::k2_5, OperatorTodayJob(3));
  EXPECT_TRUE(job.Trains()) << job.why;
  EXPECT_THAT(job.node_rank, ElementsAre(0, -1, -1));
  EXPECT_FALSE(job.deterministic);
}

TEST(NewLauncherJobTest, OperatorsEnvTodayGivesTheRightRanksOn26) {
  for (Version version : {Version::k2_6, Version::k3_0}) {
    const JobOutcome job = SimulateNewLauncherJob(version, OperatorTodayJob(3));
    ASSERT_TRUE(job.Trains()) << job.why;
    EXPECT_THAT(job.node_rank, ElementsAre(0, 1, 2));
    EXPECT_TRUE(job.deterministic);
    ASSERT_EQ(job.process_env.size(), 3u);
    EXPECT_EQ(job.process_env[2].at("PADDLE_TRAINER_ID"), "2");
    EXPECT_EQ(job.process_env[2].at("PADDLE_CURRENT_ENDPOINT"), Ip(2) + ":" + std::to_string(kFreePortBase + 1));
    EXPECT_EQ(job.process_env[2].at("PADDLE_MASTER"), Ip(0) + ":" + std::to_string(kFreePortBase));
    EXPECT_EQ(job.process_env[2].at("PADDLE_TRAINERS_NUM"), "3");
    EXPECT_EQ(job.process_env[2].at("FLAGS_selected_gpus"), "0");
  }
}

TEST(NewLauncherNodeTest, TrainerEndpointsOverrideMasterAndNodeCount) {
  Env env = OperatorToday(1, 3);
  env["PADDLE_MASTER"] = "10.9.9.9:1234";
  env["PADDLE_NNODES"] = "5";
  const NewLauncherNode node = ModelNewLauncher(Version::k2_5, Pod(1, env));
  EXPECT_EQ(node.master, Ip(0) + ":6170");
  EXPECT_EQ(node.nnodes, "3");
  env["PADDLE_TRAINER_ENDPOINTS"] = "10.0.0.1,10.0.0.2";  // no port: 6768
  EXPECT_EQ(ModelNewLauncher(Version::k2_5, Pod(1, env)).master, "10.0.0.1:6768");
}

TEST(NewLauncherNodeTest, LaunchWithArgsClearsTheMasterOn30Only) {
  Env env = OperatorToday(1, 3);
  env["PADDLE_LAUNCH_WITH_ARGS"] = "1";
  EXPECT_FALSE(ModelNewLauncher(Version::k3_0, Pod(1, env)).master.has_value());
  EXPECT_TRUE(ModelNewLauncher(Version::k2_6, Pod(1, env)).master.has_value());
  env["PADDLE_LAUNCH_WITH_ARGS"] = "yes";
  EXPECT_THAT(ModelNewLauncher(Version::k3_0, Pod(1, env)).crash.value_or(""), HasSubstr("PADDLE_LAUNCH_WITH_ARGS"));
}

TEST(NewLauncherJobTest, GlobalProcessRankInTrainerIdCrashes26WithTwoProcessesPerPod) {
  auto nodes = Job(3, [](int i) {
    Env env = OperatorToday(i, 3);
    env["PADDLE_TRAINER_ID"] = std::to_string(2 * i);
    return env;
  }, {"--nproc_per_node", "2", "train.py"});
  for (auto& node : nodes) node.visible_gpus = 2;
  EXPECT_THAT(SimulateNewLauncherJob(Version::k2_6, nodes).crash.value_or(""), HasSubstr("IndexError"));
  EXPECT_TRUE(SimulateNewLauncherJob(Version::k2_5, nodes).Trains());  // 2.5 ignores PADDLE_TRAINER_ID
}

TEST(NewLauncherJobTest, PaddleRankWinsOverTrainerIdOn26) {
  auto nodes = Job(2, [](int i) {
    Env env = OperatorToday(i, 2);
    env["PADDLE_RANK"] = std::to_string(1 - i);
    return env;
  });
  const JobOutcome job = SimulateNewLauncherJob(Version::k2_6, nodes);
  ASSERT_TRUE(job.Trains()) << job.why;
  EXPECT_THAT(job.node_rank, ElementsAre(1, 0));
}

TEST(NewLauncherJobTest, KubeflowsEnvGivesRandomRanks) {
  for (Version version : {Version::k2_5, Version::k2_6, Version::k3_0}) {
    const JobOutcome job = SimulateNewLauncherJob(version, KubeflowJob(3));
    EXPECT_TRUE(job.Trains()) << job.why;
    EXPECT_THAT(job.node_rank, ElementsAre(0, -1, -1));
  }
}

TEST(NewLauncherJobTest, WithTwoNodesTheRankOfTheOneNotServingIsForced) {
  const JobOutcome job = SimulateNewLauncherJob(Version::k2_5, KubeflowJob(2));
  EXPECT_THAT(job.node_rank, ElementsAre(0, 1));
  EXPECT_TRUE(job.deterministic);
}

TEST(NewLauncherJobTest, SortIpOrdersNodesByAddressFrom26) {
  auto nodes = KubeflowJob(3);
  nodes[0].env["POD_IP"] = nodes[0].hostname_ip = "10.0.0.30";  // the master's node sorts last
  nodes[0].env["PADDLE_MASTER"] = "10.0.0.30:36543";
  for (auto& node : nodes) node.env["PADDLE_SORT_IP"] = "1";
  const JobOutcome job = SimulateNewLauncherJob(Version::k2_6, nodes);
  ASSERT_TRUE(job.Trains()) << job.why;
  EXPECT_THAT(job.node_rank, ElementsAre(2, 0, 1));
  EXPECT_TRUE(job.deterministic);
  EXPECT_THAT(SimulateNewLauncherJob(Version::k2_5, nodes).node_rank, ElementsAre(0, -1, -1));
}

TEST(NewLauncherJobTest, MasterNamedByAHostNoNodeSeesAsItsOwnHangs) {
  // Every pod names the master by a Service: the pod behind it does not see the name as its own.
  auto nodes = KubeflowJob(3);
  nodes[0].env["PADDLE_MASTER"] = "job-master:36543";
  const JobOutcome job = SimulateNewLauncherJob(Version::k2_6, nodes);
  EXPECT_TRUE(job.hangs);
  EXPECT_THAT(job.why, HasSubstr("master not ready"));
  EXPECT_FALSE(ModelNewLauncher(Version::k2_6, nodes[0]).serves_master);
}

TEST(NewLauncherNodeTest, HostIsRewrittenOnlyWhenItHasADot) {
  Env env = {{"POD_IP", "worker-0"}, {"PADDLE_MASTER", "10.0.0.1:8090"}, {"PADDLE_NNODES", "2"}};
  EXPECT_EQ(ModelNewLauncher(Version::k2_5, Pod(0, env)).own_ip, Ip(0));
  Node node = Pod(0, env);
  node.hostname_ip = "";  // gethostbyname fails: 127.0.0.1
  EXPECT_EQ(ModelNewLauncher(Version::k2_5, node).own_ip, "127.0.0.1");
  env["POD_IP"] = "10.1.2.3";
  EXPECT_EQ(ModelNewLauncher(Version::k2_5, Pod(0, env)).own_ip, "10.1.2.3");
}

std::vector<Node> EtcdJob(int n, const std::string& master, const std::string& nnodes) {
  return Job(n, [&](int i) {
    return Env{{"POD_IP", Ip(i)}, {"PADDLE_MASTER", master}, {"PADDLE_NNODES", nnodes}, {"PADDLE_JOB_ID", "job"}};
  });
}

TEST(NewLauncherJobTest, EtcdHostStartingWithEtcdLettersBreaks) {
  const NewLauncherNode node = ModelNewLauncher(Version::k3_0, EtcdJob(1, "etcd://etcd-0:2379", "2")[0]);
  EXPECT_TRUE(node.etcd);
  EXPECT_EQ(node.etcd_host, "-0");
  EXPECT_EQ(node.etcd_port, "2379");
  for (Version version : {Version::k2_3, Version::k2_5, Version::k2_6, Version::k3_0}) {
    EXPECT_FALSE(SimulateNewLauncherJob(version, EtcdJob(2, "etcd://etcd-0:2379", "2")).Trains());
  }
}

TEST(NewLauncherJobTest, EtcdByIpGivesEveryNodeARandomRank) {
  const JobOutcome job = SimulateNewLauncherJob(Version::k2_6, EtcdJob(3, "etcd://10.0.9.9:2379", "3"));
  EXPECT_TRUE(job.Trains()) << job.why;
  EXPECT_THAT(job.node_rank, ElementsAre(-1, -1, -1));
}

TEST(NewLauncherJobTest, ElasticStartsWithAnyCountBetweenMinAndMax) {
  EXPECT_TRUE(SimulateNewLauncherJob(Version::k2_6, EtcdJob(3, "etcd://10.0.9.9:2379", "2:4")).Trains());
  EXPECT_EQ(ModelNewLauncher(Version::k2_6, EtcdJob(1, "etcd://10.0.9.9:2379", "2:4")[0]).replicas, 4);
  EXPECT_TRUE(SimulateNewLauncherJob(Version::k2_6, EtcdJob(3, "etcd://10.0.9.9:2379", "4:6")).hangs);
}

TEST(NewLauncherJobTest, MaxRestartFromEnvCrashesEtcdUpTo25) {
  auto nodes = EtcdJob(2, "etcd://10.0.9.9:2379", "2");
  for (auto& node : nodes) node.env["PADDLE_MAX_RESTART"] = "3";
  EXPECT_TRUE(SimulateNewLauncherJob(Version::k2_5, nodes).crash.has_value());
  EXPECT_TRUE(SimulateNewLauncherJob(Version::k2_6, nodes).Trains());
}

TEST(NewLauncherJobTest, ElasticTimeoutFromEnvCrashesEtcdOn23Only) {
  auto nodes = EtcdJob(2, "etcd://10.0.9.9:2379", "2");
  for (auto& node : nodes) node.env["PADDLE_ELASTIC_TIMEOUT"] = "60";
  EXPECT_THAT(SimulateNewLauncherJob(Version::k2_3, nodes).crash.value_or(""), HasSubstr("PADDLE_ELASTIC_TIMEOUT"));
  EXPECT_TRUE(SimulateNewLauncherJob(Version::k2_5, nodes).Trains());
}

TEST(NewLauncherJobTest, PaddleRankCrashes23AndFixesRanksOn25) {
  auto nodes = KubeflowJob(3);
  for (int i = 0; i < 3; ++i) nodes[static_cast<std::size_t>(i)].env["PADDLE_RANK"] = std::to_string(i);
  EXPECT_THAT(SimulateNewLauncherJob(Version::k2_3, nodes).crash.value_or(""), HasSubstr("TypeError"));
  const JobOutcome job = SimulateNewLauncherJob(Version::k2_5, nodes);
  EXPECT_TRUE(job.Trains()) << job.why;
  EXPECT_THAT(job.node_rank, ElementsAre(0, 1, 2));
}

TEST(NewLauncherJobTest, DuplicateOrMixedRanksFail) {
  auto nodes = KubeflowJob(3);
  nodes[0].env["PADDLE_RANK"] = "0";
  nodes[1].env["PADDLE_RANK"] = "0";
  EXPECT_FALSE(SimulateNewLauncherJob(Version::k2_6, nodes).Trains());  // node 2 has none
  nodes[2].env["PADDLE_RANK"] = "1";
  EXPECT_THAT(SimulateNewLauncherJob(Version::k2_6, nodes).crash.value_or(""), HasSubstr("two nodes have rank 0"));
}

TEST(NewLauncherNodeTest, LegacyFallbackOn23) {
  Env env = {{"PADDLE_MASTER", "10.0.0.1:8090"}, {"PADDLE_NNODES", "2"}};
  EXPECT_FALSE(ModelNewLauncher(Version::k2_3, Pod(0, env)).legacy_fallback);
  for (const char* name : {"DISTRIBUTED_TRAINER_ENDPOINTS", "PADDLE_ELASTIC_JOB_ID", "FLAGS_START_PORT"}) {
    Env with = env;
    with[name] = "10.0.0.1:6170,10.0.0.2:6170";
    EXPECT_TRUE(ModelNewLauncher(Version::k2_3, Pod(0, with)).legacy_fallback) << name;
    EXPECT_FALSE(ModelNewLauncher(Version::k2_5, Pod(0, with)).legacy_fallback) << name;
  }
  // 2.3 has no --gpus alias: an unknown flag, so the legacy launcher, even with a master.
  EXPECT_TRUE(ModelNewLauncher(Version::k2_3, Pod(0, env, {"--gpus", "0", "train.py"})).legacy_fallback);
  EXPECT_FALSE(ModelNewLauncher(Version::k2_5, Pod(0, env, {"--gpus", "0", "train.py"})).legacy_fallback);
}

TEST(NewLauncherNodeTest, DistributedTrainerEndpointsSetMasterAndNodesFrom24) {
  Env env = {{"DISTRIBUTED_TRAINER_ENDPOINTS", "10.0.0.1:6170,10.0.0.1:6171,10.0.0.2:6170,10.0.0.2:6171"}};
  const NewLauncherNode node = ModelNewLauncher(Version::k2_4, Pod(1, env));
  EXPECT_EQ(node.master, "10.0.0.1:6170");
  EXPECT_EQ(node.nnodes, "2");
}

TEST(NewLauncherNodeTest, ProcessCountFromNprocDevicesOrVisibleGpus) {
  Node node = Pod(0, {});
  node.visible_gpus = 4;
  EXPECT_EQ(ModelNewLauncher(Version::k2_6, node).nproc, 4);
  node.env["CUDA_VISIBLE_DEVICES"] = "2,3";
  EXPECT_EQ(ModelNewLauncher(Version::k2_6, node).nproc, 2);
  node.args = {"--devices", "3", "train.py"};
  const NewLauncherNode one = ModelNewLauncher(Version::k2_6, node);
  EXPECT_EQ(one.nproc, 1);
  EXPECT_THAT(one.selected_devices, ElementsAre("1"));  // a position in CUDA_VISIBLE_DEVICES
  node.env["PADDLE_NPROC_PER_NODE"] = "2";
  EXPECT_EQ(ModelNewLauncher(Version::k2_6, node).nproc, 2);
  node.env["PADDLE_NPROC_PER_NODE"] = "two";
  EXPECT_TRUE(ModelNewLauncher(Version::k2_6, node).crash.has_value());
}

TEST(NewLauncherJobTest, CpuPodsUseGloo) {
  auto nodes = OperatorTodayJob(2);
  for (auto& node : nodes) node.visible_gpus = 0;
  const JobOutcome job = SimulateNewLauncherJob(Version::k2_6, nodes);
  ASSERT_EQ(job.process_env.size(), 2u);
  EXPECT_EQ(job.process_env[0].at("PADDLE_DISTRI_BACKEND"), "gloo");
  EXPECT_EQ(job.process_env[0].count("FLAGS_selected_gpus"), 0u);
}

std::vector<Node> IpsJob(int n) {
  return Job(n, [n](int i) { return Env{{"POD_IP", Ip(i)}, {"PADDLE_IPS", Joined(n, "")}, {"PADDLE_START_PORT", "6170"}}; });
}

TEST(NewLauncherJobTest, StartPortAndIpsBuildThePodWithoutAMaster) {
  const JobOutcome job = SimulateNewLauncherJob(Version::k3_0, IpsJob(3));
  ASSERT_TRUE(job.Trains()) << job.why;
  EXPECT_THAT(job.node_rank, ElementsAre(0, 1, 2));
  EXPECT_EQ(job.process_env[1].at("PADDLE_CURRENT_ENDPOINT"), Ip(1) + ":6170");
  EXPECT_EQ(job.process_env[1].at("PADDLE_MASTER"), Ip(0) + ":6170");
  EXPECT_EQ(SimulateNewLauncherJob(Version::k2_6, IpsJob(3)).process_env[1].count("PADDLE_MASTER"), 0u);
}

TEST(NewLauncherJobTest, ANodeMissingFromIpsTakesRankZero) {
  auto nodes = IpsJob(3);
  nodes[2].env["POD_IP"] = "10.0.0.77";
  const JobOutcome job = SimulateNewLauncherJob(Version::k3_0, nodes);
  EXPECT_FALSE(job.Trains());
  EXPECT_THAT(job.node_rank, ElementsAre(0, 1, 0));
}

TEST(NewLauncherJobTest, PsEndpointsArePickedByStringPrefix) {
  std::vector<Node> nodes;
  for (int i : {1, 20}) {  // 10.0.0.2 and 10.0.0.21
    nodes.push_back(Pod(i, {{"POD_IP", Ip(i)},
                            {"PADDLE_SERVERS_ENDPOINTS", "10.0.0.2:6000,10.0.0.21:6000"},
                            {"PADDLE_TRAINERS_ENDPOINTS", "10.0.0.2:6001,10.0.0.21:6001"}}));
  }
  EXPECT_EQ(ModelNewLauncher(Version::k2_6, nodes[0]).ps_servers.size(), 2u);
  EXPECT_TRUE(SimulateNewLauncherJob(Version::k2_6, nodes).hangs);
}

TEST(NewLauncherNodeTest, ServerNumZeroFromEnvSelectsPsModeUpTo25) {
  const Node node = Pod(0, {{"PADDLE_SERVER_NUM", "0"}});
  EXPECT_TRUE(ModelNewLauncher(Version::k2_5, node).ps_mode);  // "0" is a true string
  EXPECT_FALSE(ModelNewLauncher(Version::k2_6, node).ps_mode);
}

TEST(NewLauncherNodeTest, PsCountsFromEnvCrashUpTo25) {
  const Node node = Pod(0, {{"PADDLE_SERVER_NUM", "1"}, {"PADDLE_TRAINER_NUM", "1"}});
  EXPECT_TRUE(ModelNewLauncher(Version::k2_5, node).crash.has_value());
  const NewLauncherNode ps = ModelNewLauncher(Version::k2_6, node);
  EXPECT_FALSE(ps.crash.has_value());
  EXPECT_TRUE(ps.ps_mode);
}

// PaddleFormers: paddleformers-cli train on the operator's env of today.
std::vector<Node> PaddleFormersJob(int n, const Env& extra) {
  auto nodes = OperatorTodayJob(n);
  for (auto& node : nodes) {
    for (const auto& [name, value] : extra) node.env[name] = value;
    node = PaddleFormersCli(node);
  }
  return nodes;
}

TEST(PaddleFormersTest, NoMasterAddrTrainsEveryPodAloneOnLocalhost) {
  const auto nodes = PaddleFormersJob(3, {});
  EXPECT_THAT(nodes[1].args, ElementsAre("--log_dir", "paddleformers_dist_log", "--gpus", "0", "--master", "127.0.0.1:8080",
                                         "--nnodes", "1", "paddleformers/cli/launcher.py", "train.py"));
  EXPECT_EQ(nodes[1].env.count("PADDLE_TRAINER_ENDPOINTS"), 0u);
  const JobOutcome job = SimulateNewLauncherJob(Version::k2_6, nodes);
  EXPECT_TRUE(job.trains_alone);
  EXPECT_THAT(job.node_rank, ElementsAre(0, 0, 0));
  // With NNODES but no MASTER_ADDR each pod serves its own 127.0.0.1 master and waits.
  EXPECT_TRUE(SimulateNewLauncherJob(Version::k2_6, PaddleFormersJob(3, {{"NNODES", "3"}})).hangs);
}

TEST(PaddleFormersTest, RanksAreRandomUnlessPaddleRankIsSet) {
  const Env master = {{"MASTER_ADDR", Ip(0)}, {"NNODES", "3"}};
  const JobOutcome job = SimulateNewLauncherJob(Version::k2_6, PaddleFormersJob(3, master));
  EXPECT_TRUE(job.Trains()) << job.why;
  EXPECT_THAT(job.node_rank, ElementsAre(0, -1, -1));  // PADDLE_TRAINER_ID was deleted
  auto ranked = OperatorTodayJob(3);
  for (int i = 0; i < 3; ++i) {
    Node& node = ranked[static_cast<std::size_t>(i)];
    node.env.insert(master.begin(), master.end());
    node.env["PADDLE_RANK"] = std::to_string(i);
    node = PaddleFormersCli(node);
  }
  EXPECT_THAT(SimulateNewLauncherJob(Version::k2_6, ranked).node_rank, ElementsAre(0, 1, 2));
}

TEST(PaddleFormersTest, CpuPodsCrashAndPaddle23FallsBackToLegacy) {
  const Env master = {{"MASTER_ADDR", Ip(0)}, {"NNODES", "2"}};
  auto cpu = PaddleFormersJob(2, master);
  for (auto& node : cpu) node = PaddleFormersCli([&] { Node bare = node; bare.visible_gpus = 0; bare.args = {"train"}; return bare; }());
  EXPECT_THAT(SimulateNewLauncherJob(Version::k2_6, cpu).crash.value_or(""), HasSubstr("--gpus"));
  // 2.3 has no --gpus flag: unknown, so the legacy launcher, which finds no PaddleCloud env left.
  const JobOutcome legacy = SimulateNewLauncherJob(Version::k2_3, PaddleFormersJob(2, master));
  EXPECT_TRUE(legacy.trains_alone);
}

TEST(NewLauncherJobTest, From26EachProcessGetsItsLogDirAndLongEndpointListsLeaveTheEnv) {
  auto nodes = OperatorTodayJob(2);
  for (auto& node : nodes) {
    node.workdir = "/work";
    node.env["PADDLE_ENV_LIMIT_LEN"] = "20";  // the two endpoints, 33 characters, reach it
  }
  const JobOutcome job = SimulateNewLauncherJob(Version::k2_6, nodes);
  ASSERT_EQ(job.process_env.size(), 2u);
  EXPECT_EQ(job.process_env[1].at("PADDLE_LOG_DIR"), "/work/log");
  EXPECT_EQ(job.process_env[1].at("PADDLE_BACKUP_ENV_PATH"), "/work/log/backup_env.1.json");
  EXPECT_EQ(job.process_env[1].count("PADDLE_TRAINER_ENDPOINTS"), 0u);
  const JobOutcome old = SimulateNewLauncherJob(Version::k2_5, nodes);
  EXPECT_EQ(old.process_env[1].count("PADDLE_LOG_DIR"), 0u);
  EXPECT_EQ(old.process_env[1].count("PADDLE_TRAINER_ENDPOINTS"), 1u);
}

TEST(LegacyLauncherTest, PaddleCloudEnvTrainsWithNodeRanksFromTrainerId) {
  const JobOutcome job = SimulateLegacyJob(Version::k2_2, OperatorTodayJob(3), true);
  ASSERT_TRUE(job.Trains()) << job.why;
  EXPECT_THAT(job.node_rank, ElementsAre(0, 1, 2));
  EXPECT_EQ(job.process_env[2].at("PADDLE_TRAINER_ID"), "2");
  EXPECT_EQ(job.process_env[2].at("PADDLE_CURRENT_ENDPOINT"), Ip(2) + ":6170");
  EXPECT_EQ(job.process_env[2].at("PADDLE_TRAINER_ENDPOINTS"), Joined(3, "6170"));
}

TEST(LegacyLauncherTest, Paddle22AddsRankInNodeAndDeviceIds) {
  auto nodes = OperatorTodayJob(2);
  for (auto& node : nodes) node.visible_gpus = 2;
  for (auto& node : nodes) node.env["TRAINER_PORTS_NUM"] = "2";
  const JobOutcome job = SimulateLegacyJob(Version::k2_2, nodes, true);
  ASSERT_TRUE(job.Trains()) << job.why;
  ASSERT_EQ(job.process_env.size(), 4u);
  EXPECT_EQ(job.process_env[3].at("PADDLE_TRAINER_ID"), "3");
  EXPECT_EQ(job.process_env[3].at("PADDLE_RANK_IN_NODE"), "1");
  EXPECT_EQ(job.process_env[3].at("FLAGS_selected_gpus"), "1");
  EXPECT_EQ(job.process_env[3].at("PADDLE_WORLD_DEVICE_IDS"), "0,1,0,1");
  EXPECT_EQ(job.process_env[3].at("PADDLE_CURRENT_ENDPOINT"), Ip(1) + ":6171");
  EXPECT_EQ(SimulateLegacyJob(Version::k2_0, nodes, true).process_env[3].count("PADDLE_RANK_IN_NODE"), 0u);
}

TEST(LegacyLauncherTest, TrainersNumUnsetTrainsEveryPodAlone) {
  auto nodes = OperatorTodayJob(3);
  for (auto& node : nodes) node.env.erase("PADDLE_TRAINERS_NUM");
  const JobOutcome job = SimulateLegacyJob(Version::k2_5, nodes, true);
  EXPECT_TRUE(job.trains_alone);
  EXPECT_FALSE(ModelLegacyLauncher(Version::k2_5, nodes[1], true).cloud_mode);
  EXPECT_EQ(job.process_env[1].at("PADDLE_CURRENT_ENDPOINT"), "127.0.0.1:6070");
  EXPECT_EQ(job.process_env[1].at("PADDLE_TRAINER_ID"), "0");
}

TEST(LegacyLauncherTest, DnsNamesInTrainersCrash) {
  auto nodes = OperatorTodayJob(2);
  for (auto& node : nodes) node.env["PADDLE_TRAINERS"] = "job-worker-0,job-worker-1";
  EXPECT_THAT(SimulateLegacyJob(Version::k2_2, nodes, true).crash.value_or(""), HasSubstr("ValueError"));
}

TEST(LegacyLauncherTest, GlobalProcessRankInTrainerIdBreaksTheJob) {
  auto nodes = OperatorTodayJob(3);
  for (int i = 0; i < 3; ++i) {
    nodes[static_cast<std::size_t>(i)].env["PADDLE_TRAINER_ID"] = std::to_string(2 * i);
    nodes[static_cast<std::size_t>(i)].env["TRAINER_PORTS_NUM"] = "2";
    nodes[static_cast<std::size_t>(i)].visible_gpus = 2;
  }
  const JobOutcome job = SimulateLegacyJob(Version::k2_2, nodes, true);
  EXPECT_FALSE(job.Trains());
  EXPECT_TRUE(ModelLegacyLauncher(Version::k2_2, nodes[2], true).crash.has_value());  // pods[4] of 3
}

TEST(LegacyLauncherTest, DistributedEndpointsInAnotherOrderSwapNodes) {
  auto nodes = OperatorTodayJob(2);
  for (auto& node : nodes) node.env["DISTRIBUTED_TRAINER_ENDPOINTS"] = Ip(1) + ":6170," + Ip(0) + ":6170";
  const JobOutcome job = SimulateLegacyJob(Version::k2_2, nodes, true);
  EXPECT_TRUE(job.hangs);
  EXPECT_THAT(job.why, HasSubstr("another node's"));
}

TEST(LegacyLauncherTest, PaddlePortIsIgnoredWhenTrainerPortsNumIsBelowTheProcessCount) {
  auto nodes = OperatorTodayJob(2);
  for (auto& node : nodes) {
    node.visible_gpus = 2;
    node.env["PADDLE_PORT"] = "7000";
  }
  EXPECT_EQ(ModelLegacyLauncher(Version::k2_2, nodes[1], true).node_endpoints, (std::vector<std::string>{Ip(1) + ":6170", Ip(1) + ":6171"}));
  nodes[1].env["TRAINER_PORTS_NUM"] = "2";
  EXPECT_EQ(ModelLegacyLauncher(Version::k2_2, nodes[1], true).node_endpoints, (std::vector<std::string>{Ip(1) + ":7000", Ip(1) + ":7001"}));
}

TEST(LegacyLauncherTest, FlagsStartPortWithoutPaddlePortCrashes) {
  auto nodes = OperatorTodayJob(2);
  for (auto& node : nodes) {
    node.env["FLAGS_START_PORT"] = "7000";
    node.env.erase("PADDLE_PORT");
  }
  EXPECT_THAT(SimulateLegacyJob(Version::k2_2, nodes, true).crash.value_or(""), HasSubstr("FLAGS_START_PORT"));
}

TEST(LegacyLauncherTest, PsModeComesFromArgsOrTheBuildNeverFromTrainingRole) {
  Node node = Pod(0, {{"TRAINING_ROLE", "PSERVER"}});
  EXPECT_FALSE(ModelLegacyLauncher(Version::k2_2, node, false).ps_mode);
  EXPECT_TRUE(ModelLegacyLauncher(Version::k2_0, node, false).ps_mode);
  EXPECT_FALSE(ModelLegacyLauncher(Version::k2_0, node, true).ps_mode);
  node.args = {"--server_num", "1", "--worker_num", "1", "train.py"};
  EXPECT_TRUE(ModelLegacyLauncher(Version::k2_2, node, true).ps_mode);
}

TEST(NewLauncherJobTest, FallbackToLegacyIsSimulatedAsTheLegacyLauncher) {
  auto nodes = OperatorTodayJob(2);
  for (auto& node : nodes) node.env["DISTRIBUTED_TRAINER_ENDPOINTS"] = Joined(2, "6170");
  const JobOutcome job = SimulateNewLauncherJob(Version::k2_3, nodes);
  EXPECT_TRUE(job.Trains()) << job.why;
  EXPECT_EQ(job.process_env[1].at("PADDLE_CURRENT_ENDPOINT"), Ip(1) + ":6170");
}

}  // namespace
}  // namespace fleet::paddle_model
