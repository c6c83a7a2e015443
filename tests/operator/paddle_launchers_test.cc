// Every pod the operator makes, run through our models of Paddle's own launchers (tests/paddle_model,
// written from Paddle's source of each generation): for each launcher, Paddle version and network
// mode, the job trains — one master, every node agreeing on it and on the node count, node ranks
// equal to the pod indexes, nobody alone — and every process gets its global rank.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "builders.h"
#include "fleet/operator/launcher.h"
#include "paddle_model/paddle_model.h"
#include "world.h"

namespace fleet::op::testing {
namespace {

namespace pm = fleet::paddle_model;

struct Case {
  std::string name;
  pm::Version version;
  std::string paddle_version;        // spec.paddleVersion
  std::vector<std::string> command;  // the worker container's command
  std::string network = "PodIP";
  int gpus = 0;
  int pods = 3;
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

// The launcher's own arguments: what follows the launcher's word in the command.
std::vector<std::string> LauncherArgs(const std::vector<std::string>& command, const EnvMap& env) {
  std::vector<std::string> args;
  bool after = false;
  for (const std::string& word : command) {
    if (after) args.push_back(ExpandVars(word, env));
    after = after || word == "paddle.distributed.launch" || word == "paddle.distributed.fleet.launch" ||
            word == "fleetrun" || word == "paddleformers-cli";
  }
  return args;
}

// The job's pods, once published, as Paddle sees them.
std::vector<pm::Node> Nodes(const Case& c, const Json& job) {
  World world(job, {}, c.network == "HostNetwork" ? HostPortsAt(31000) : HostPortBlock{});
  world.nodes = {"192.168.0.1", "192.168.0.2", "192.168.0.3"};   // one pod per node, as the anti-affinity says
  world.Step();
  world.StartPods();
  world.Step();
  std::vector<pm::Node> nodes;
  for (int i = 0; i < c.pods; ++i) {
    const Json& pod = world.Pod("wd-worker-" + std::to_string(i));
    auto env = ResolveEnv(pod, world.observed.endpoints);
    EXPECT_TRUE(env.ok()) << (env.ok() ? "" : env.error());
    if (!env.ok()) return {};
    pm::Node node;
    node.env = *env;
    node.args = LauncherArgs(c.command, *env);
    // The pod's hostname resolves to its own address (the node's on the host network).
    node.hostname_ip = pod["status"][c.network == "HostNetwork" ? "hostIP" : "podIP"];
    if (c.network == "Service") node.names.push_back(env->at("POD_IP"));
    node.visible_gpus = c.gpus;
    nodes.push_back(std::move(node));
  }
  return nodes;
}

Json JobFor(const Case& c) {
  Json t = PodTemplate(c.gpus);
  t["spec"]["containers"][0]["command"] = c.command;
  JobBuilder b("wd");
  b.Collective(c.pods).Network(c.network).Set("/spec/worker/template", t);
  if (!c.paddle_version.empty()) b.Set("/spec/paddleVersion", c.paddle_version);
  return b.Obj();
}

void ExpectTrainsWithIndexRanks(const Case& c, const pm::JobOutcome& outcome) {
  ASSERT_TRUE(outcome.Trains()) << outcome.why;
  EXPECT_TRUE(outcome.deterministic);
  ASSERT_EQ(outcome.node_rank.size(), static_cast<size_t>(c.pods));
  for (int i = 0; i < c.pods; ++i) EXPECT_EQ(outcome.node_rank[static_cast<size_t>(i)], i) << "pod " << i;
  const int per_pod = std::max(1, c.gpus);
  ASSERT_EQ(outcome.process_env.size(), static_cast<size_t>(c.pods * per_pod));
  for (size_t p = 0; p < outcome.process_env.size(); ++p) {
    const pm::Env& env = outcome.process_env[p];
    EXPECT_EQ(env.at("PADDLE_TRAINER_ID"), std::to_string(p)) << "process " << p;
    EXPECT_EQ(env.at("PADDLE_TRAINERS_NUM"), std::to_string(c.pods * per_pod)) << "process " << p;
  }
}

class NewLauncherTest : public ::testing::TestWithParam<Case> {};

TEST_P(NewLauncherTest, TrainsWithThePodIndexesAsNodeRanks) {
  const Case& c = GetParam();
  auto job = ParseFleetJob(JobFor(c));
  ASSERT_TRUE(job.ok()) << job.error();
  std::vector<pm::Node> nodes = Nodes(c, JobFor(c));
  ASSERT_EQ(nodes.size(), static_cast<size_t>(c.pods));
  if (job->spec.Find(RoleKind::kWorker)->launcher == Launcher::kPaddleFormers) {
    for (pm::Node& node : nodes) node = pm::PaddleFormersCli(node);
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const pm::NewLauncherNode model = pm::ModelNewLauncher(c.version, nodes[i]);
    EXPECT_FALSE(model.legacy_fallback) << "pod " << i;
    EXPECT_EQ(model.serves_master, i == 0) << "pod " << i;
  }
  ExpectTrainsWithIndexRanks(c, pm::SimulateNewLauncherJob(c.version, nodes));
}

const std::vector<std::string> kLaunch = {"python", "-m", "paddle.distributed.launch", "train.py"};
const std::vector<std::string> kLaunch23 = {"python", "-m", "paddle.distributed.launch", "--rank", "$(FLEET_NODE_RANK)",
                                            "train.py"};
const std::vector<std::string> kFormers = {"paddleformers-cli", "train", "sft.yaml"};

std::vector<Case> NewLauncherCases() {
  std::vector<Case> cases;
  const std::vector<std::pair<pm::Version, std::string>> versions = {
      {pm::Version::k2_3, "2.3"}, {pm::Version::k2_4, "2.4"}, {pm::Version::k2_5, "2.5"},
      {pm::Version::k2_6, "2.6"}, {pm::Version::k3_0, "3.0"}};
  for (const auto& [version, name] : versions) {
    for (const std::string network : {"PodIP", "Service", "HostNetwork"}) {
      for (int gpus : {0, 2}) {
        std::string id = "paddle_launch_" + name + "_" + network + "_gpus" + std::to_string(gpus);
        for (char& ch : id) ch = ch == '.' ? '_' : ch;
        cases.push_back({id, version, name, name == "2.3" ? kLaunch23 : kLaunch, network, gpus});
      }
    }
  }
  for (const std::string network : {"PodIP", "Service"}) {
    cases.push_back({"paddleformers_3_0_" + network + "_gpus2", pm::Version::k3_0, "3.0", kFormers, network, 2});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Versions, NewLauncherTest, ::testing::ValuesIn(NewLauncherCases()),
                         [](const auto& param_info) { return param_info.param.name; });

class LegacyLauncherTest : public ::testing::TestWithParam<Case> {};

TEST_P(LegacyLauncherTest, TrainsInPaddleCloudModeWithThePodIndexesAsNodeRanks) {
  const Case& c = GetParam();
  auto job = ParseFleetJob(JobFor(c));
  ASSERT_TRUE(job.ok()) << job.error();
  EXPECT_EQ(job->spec.Find(RoleKind::kWorker)->launcher, Launcher::kFleetrun);
  std::vector<pm::Node> nodes = Nodes(c, JobFor(c));
  ASSERT_EQ(nodes.size(), static_cast<size_t>(c.pods));
  for (size_t i = 0; i < nodes.size(); ++i) {
    EXPECT_TRUE(pm::ModelLegacyLauncher(c.version, nodes[i], c.gpus > 0).cloud_mode) << "pod " << i;
  }
  ExpectTrainsWithIndexRanks(c, pm::SimulateLegacyJob(c.version, nodes, c.gpus > 0));
}

std::vector<Case> LegacyCases() {
  std::vector<Case> cases;
  const std::vector<std::pair<pm::Version, std::string>> versions = {
      {pm::Version::k2_0, "2.0"}, {pm::Version::k2_2, "2.2"}, {pm::Version::k2_5, "2.5"},
      {pm::Version::k2_6, "2.6"}, {pm::Version::k3_0, "3.0"}};
  for (const auto& [version, name] : versions) {
    for (const std::string network : {"PodIP", "Service", "HostNetwork"}) {
      for (int gpus : {0, 2}) {
        // Paddle 2.0's fleetrun runs a CPU build as PS (a LauncherCaveat says so).
        if (version == pm::Version::k2_0 && gpus == 0) continue;
        std::string id = "fleetrun_" + name + "_" + network + "_gpus" + std::to_string(gpus);
        for (char& ch : id) ch = ch == '.' ? '_' : ch;
        cases.push_back({id, version, name, {"fleetrun", "train.py"}, network, gpus});
      }
    }
    if (version == pm::Version::k2_0 || version == pm::Version::k2_2) {
      // Before 2.3, paddle.distributed.launch is the legacy launcher.
      std::string id = "paddle_launch_is_legacy_" + name;
      for (char& ch : id) ch = ch == '.' ? '_' : ch;
      cases.push_back({id, version, name, kLaunch, "PodIP", 2});
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Versions, LegacyLauncherTest, ::testing::ValuesIn(LegacyCases()),
                         [](const auto& param_info) { return param_info.param.name; });

// Elastic jobs under Paddle's launcher: every node reaches the same etcd master, host intact, with
// the range, and no node falls back to the legacy launcher.
TEST(ElasticNewLauncherTest, EveryVersionReachesTheEtcdMasterWithTheRange) {
  for (const auto& [version, name] : std::vector<std::pair<pm::Version, std::string>>{
           {pm::Version::k2_3, "2.3"}, {pm::Version::k2_5, "2.5"}, {pm::Version::k2_6, "2.6"}, {pm::Version::k3_0, "3.0"}}) {
    SCOPED_TRACE(name);
    Case c{"elastic", version, name, kLaunch, "PodIP", 0, 3};
    Json job = JobFor(c);
    job["spec"]["elastic"] = {{"minReplicas", 2}, {"maxReplicas", 4}, {"etcdEndpoint", "etcd-0.etcd.infra:2379"}};
    std::vector<pm::Node> nodes = Nodes(c, job);
    ASSERT_EQ(nodes.size(), 3u);
    for (const pm::Node& node : nodes) {
      const pm::NewLauncherNode model = pm::ModelNewLauncher(version, node);
      EXPECT_FALSE(model.crash.has_value()) << *model.crash;
      EXPECT_FALSE(model.legacy_fallback);
      EXPECT_TRUE(model.etcd);
      EXPECT_EQ(model.etcd_host, "Etcd-0.etcd.infra") << "Paddle's strip of etcd:// must leave the host whole";
      EXPECT_EQ(model.etcd_port, "2379");
      EXPECT_EQ(model.nnodes, "2:4");
      EXPECT_EQ(model.job_id, "wd-0-" + std::string(kUid));
    }
    const pm::JobOutcome outcome = pm::SimulateNewLauncherJob(version, nodes);
    EXPECT_TRUE(outcome.Trains()) << outcome.why;
  }
}

}  // namespace
}  // namespace fleet::op::testing
