// Elastic fleetrun end to end: a real etcd (Debian's etcd-server) started on loopback on free ports
// with its data in a temp dir, and several fleetrun processes, one per node, each with --host on
// its own 127.0.0.x (elastic_cluster.h). Their trainer (elastic.sh) dumps its env once per
// generation and then runs until the test touches `finish`. Every dump of every generation is read
// back with the contract parser. One test runs examples/elastic/train.py instead, which checkpoints
// and resumes. Skipped, with the reason, when no etcd binary is installed.
//
// Bound: after a node is lost, the others run trainers with the new env within its lease's TTL
// (PADDLE_ELASTIC_TTL=2 here) plus kRestartSlack; after a node joins, within kRestartSlack.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <iomanip>
#include <regex>

#include "../common/test_process.h"
#include "elastic_cluster.h"

namespace fleet {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using test::FinalLoss;

constexpr int kTtlSeconds = 2;
constexpr double kRestartSlack = 3.0;   // poll (0.25 s) + stop (SIGTERM) + start, with room for a loaded machine

class FleetrunElastic : public ::testing::Test, protected ElasticCluster {
 protected:
  void SetUp() override {
    if (EtcdBinary().empty()) GTEST_SKIP() << "no etcd binary (Debian: apt-get install etcd-server; scripts/setup.sh does)";
    const char* bin = std::getenv("FLEETRUN");
    const std::string error = Start(bin && *bin ? bin : FLEETRUN_BUILT_PATH, kTtlSeconds);
    ASSERT_EQ(error, "");
  }

  void TearDown() override { Stop(/*keep_files=*/HasFailure()); }

  // Every env dump so far, each checked with the contract parser.
  std::map<std::string, ParsedRole> CheckedDumps() {
    std::vector<std::string> errors;
    auto dumps = Dumps(&errors);
    for (const std::string& error : errors) ADD_FAILURE() << error;
    return dumps;
  }

  // Every trainer of every generation had a consistent env: its own endpoint at its rank.
  void ExpectEveryDumpConsistent() {
    const auto dumps = CheckedDumps();
    EXPECT_FALSE(dumps.empty());
    for (const auto& [name, role] : dumps) {
      SCOPED_TRACE(name);
      ASSERT_GE(role.id, 0);
      ASSERT_LT(static_cast<size_t>(role.id), role.trainer_endpoints.size());
      EXPECT_EQ(role.trainer_endpoints[static_cast<size_t>(role.id)], role.current_endpoint);
      EXPECT_EQ(role.trainers_num, static_cast<int>(role.trainer_endpoints.size()));
      EXPECT_EQ(name.rfind(role.current_endpoint + ".", 0), 0u) << "the dump is the trainer's own";
    }
  }

  // Every node exits 0 within `seconds`, and the job leaves nothing in etcd.
  void ExpectCleanEnd(const std::string& job, double seconds) {
    while (!nodes_.empty()) {
      const int node = nodes_.begin()->first;
      EXPECT_EQ(WaitForNode(node, seconds), 0) << "node " << node << ":\n" << Output(node);
    }
    auto left = etcd_->GetPrefix("/paddle/" + job);
    ASSERT_TRUE(left.ok()) << left.error();
    for (const auto& kv : *left) ADD_FAILURE() << "left in etcd: " << kv.key << " = " << kv.value;
  }

  // Lets the env-dump trainers finish: every node exits 0, and the job leaves nothing in etcd.
  void FinishAndExpectCleanEtcd(const std::string& job) {
    WriteFile(root_ / "finish", "", 0644);
    ExpectCleanEnd(job, 10);
  }
};

TEST_F(FleetrunElastic, ScalesInWhenANodeDiesAndOutWhenOneJoins) {
  for (int node : {2, 3, 4}) ASSERT_TRUE(StartNode(node, "scale", "2:4"));
  EXPECT_GE(WaitForGeneration({2, 3, 4}, {}, 10), 0) << "the three nodes never ran together";

  // A node's fleetrun is SIGKILLed (its trainers die with it): only its lease can tell the others.
  std::set<std::string> seen = DumpNames();
  KillNode(3, SIGKILL);
  const double lost = WaitForGeneration({2, 4}, seen, kTtlSeconds + kRestartSlack);
  EXPECT_GE(lost, 0) << "the survivors did not restart as {2, 4} within TTL + " << kRestartSlack << " s";
  std::cerr << "[ measured ] node lost -> trainers running with the new env: " << lost << " s (TTL " << kTtlSeconds
            << " s)\n";

  seen = DumpNames();
  ASSERT_TRUE(StartNode(5, "scale", "2:4"));
  const double joined = WaitForGeneration({2, 4, 5}, seen, kRestartSlack);
  EXPECT_GE(joined, 0) << "the job did not scale out to {2, 4, 5}";
  std::cerr << "[ measured ] node joined -> trainers running with the new env: " << joined << " s\n";

  ExpectEveryDumpConsistent();
  FinishAndExpectCleanEtcd("scale");
}

// Paddle 2.3+'s command line for the same mode: --master etcd://host:port with --nnodes MIN:MAX,
// by flags on one node and by the env a FleetJob pod gets on the other.
TEST_F(FleetrunElastic, PaddlesNewLauncherCommandLineRunsTheElasticMode) {
  auto start = [&](int node, const std::vector<std::string>& flags, const EnvMap& env) {
    const size_t before = Registered("newcli");
    std::vector<std::string> args = flags;
    for (const std::string& common : {"--start_port=" + std::to_string(kPort), std::string("--grace_period=1"),
                                      (root_ / "elastic.sh").string()}) {
      args.push_back(common);
    }
    ASSERT_TRUE(StartFleetrun(node, args, env));
    ASSERT_TRUE(WaitUntil([&] { return Registered("newcli") > before; }, 5)) << Output(node);
  };
  start(2, {"--master=etcd://" + server_, "--nnodes=2:3", "--job_id=newcli", "--host=" + Host(2)}, {});
  start(3, {}, {{"PADDLE_MASTER", "etcd://" + server_}, {"PADDLE_NNODES", "2:3"}, {"PADDLE_JOB_ID", "newcli"},
                {"POD_IP", Host(3)}});
  EXPECT_GE(WaitForGeneration({2, 3}, {}, 10), 0) << "the two nodes never ran together:\n" << Output(2) << Output(3);
  ExpectEveryDumpConsistent();
  FinishAndExpectCleanEtcd("newcli");
}

// The env dump, but it fails as soon as a trainer of its generation is gone, as a collective fails
// when a peer's connection drops: each trainer leaves its pid under the generation's endpoints.
constexpr char kCollectiveTrainerSh[] = R"SH(#!/bin/sh
f="$FLEET_TEST_DIR/env/$PADDLE_CURRENT_ENDPOINT.$$"
env -0 > "$f.tmp" && mv "$f.tmp" "$f"
peers="$FLEET_TEST_DIR/peers/$PADDLE_TRAINER_ENDPOINTS"
mkdir -p "$peers" && echo $$ > "$peers.$$" && mv "$peers.$$" "$peers/$PADDLE_CURRENT_ENDPOINT"
while [ ! -e "$FLEET_TEST_DIR/finish" ]; do
  for p in "$peers"/*; do
    kill -0 "$(cat "$p")" 2>/dev/null || [ -e "$FLEET_TEST_DIR/finish" ] || { echo "peer ${p##*/} is gone"; exit 1; }
  done
  sleep 0.05
done
)SH";

// A node stopped as Kubernetes stops a pod (SIGTERM) deregisters before its trainers go, so the
// peers' trainers, which fail at once, are restarted at once for the change, neither after a
// lease's TTL nor as a failure; a joining node makes them fail too, and they restart the same way.
TEST_F(FleetrunElastic, TrainersFailingAsAPeerLeavesOrJoinsAreRestartedNotFailed) {
  WriteFile(root_ / "collective.sh", kCollectiveTrainerSh, 0755);
  const std::string script = (root_ / "collective.sh").string();
  for (int node : {2, 3, 4}) ASSERT_TRUE(StartNode(node, "peers", "2:4", {}, script));
  EXPECT_GE(WaitForGeneration({2, 3, 4}, {}, 10), 0) << "the three nodes never ran together";

  std::set<std::string> seen = DumpNames();
  KillNode(3, SIGTERM);
  EXPECT_GE(WaitForGeneration({2, 4}, seen, kRestartSlack), 0) << "the survivors did not restart as {2, 4}";
  seen = DumpNames();
  ASSERT_TRUE(StartNode(5, "peers", "2:4", {}, script));
  EXPECT_GE(WaitForGeneration({2, 4, 5}, seen, kRestartSlack), 0) << "the job did not scale out to {2, 4, 5}";
  for (int node : {2, 4}) {
    EXPECT_EQ(::waitpid(nodes_.at(node), nullptr, WNOHANG), 0) << "node " << node << " exited:\n" << Output(node);
    EXPECT_THAT(Output(node), Not(HasSubstr("waiting up to"))) << "the change was seen at once, not after a TTL";
  }
  ExpectEveryDumpConsistent();
  FinishAndExpectCleanEtcd("peers");
}

#ifdef FLEET_PYTHON_MODULE_DIR
// The env of examples/elastic/train.py: the fleet_runtime module, and the interpreter it was built
// for first on PATH (fleetrun runs `python3`). 100 steps of 0.05 s, a checkpoint every 5: a node
// is killed once step 20's checkpoint is there, with 80 steps (4 s or more) left to be resumed.
EnvMap ExampleEnv(const fs::path& checkpoints) {
  EnvMap env = {{"PYTHONPATH", FLEET_PYTHON_MODULE_DIR},
                {"PATH", fs::path(FLEET_PYTHON_INTERPRETER).parent_path().string() + ":/usr/local/bin:/usr/bin:/bin"},
                {"FLEET_EXAMPLE_STEPS", "100"}, {"FLEET_EXAMPLE_STEP_SECONDS", "0.05"},
                {"FLEET_EXAMPLE_CHECKPOINT_EVERY", "5"}, {"FLEET_EXAMPLE_TIMEOUT_SECONDS", "10"},
                {"FLEET_EXAMPLE_RENDEZVOUS_SECONDS", "20"}};
  if (!checkpoints.empty()) env["FLEET_EXAMPLE_CHECKPOINT_DIR"] = checkpoints.string();
  return env;
}

std::string ExampleScript() {
  const char* source = std::getenv("FLEET_SOURCE_DIR");
  return std::string(source && *source ? source : FLEET_BUILT_SOURCE_DIR) + "/examples/elastic/train.py";
}

int ResumedFrom(const std::string& output, int rank) {  // "rank R: resumed from step S", -1 if absent
  std::smatch match;
  const std::regex pattern("rank " + std::to_string(rank) + ": resumed from step ([0-9]+)");
  return std::regex_search(output, match, pattern) ? std::stoi(match[1].str()) : -1;
}

// The example's final loss matches an uninterrupted run's to rounding (examples/elastic/train.py:
// the same global batches whatever the number of ranks); 1e-6 leaves a wide margin over ~1e-12.
constexpr double kSameLossRelative = 1e-6;

// examples/elastic/train.py on 3 nodes with --np 2:4. A node is SIGKILLed mid-run: the survivors'
// trainers fail with their lost peer at once, fleetrun sees the nodes change when its lease expires
// and starts them again as 2 ranks; they resume from the newest checkpoint and end with the final
// loss of an uninterrupted run of the same job.
TEST_F(FleetrunElastic, ExampleResumesFromItsCheckpointWhenANodeIsLost) {
  // The uninterrupted run: 3 ranks on one fleetrun, no checkpoints, no pauses.
  EnvMap uninterrupted = ExampleEnv({});
  uninterrupted["FLEET_EXAMPLE_STEP_SECONDS"] = "0";
  ASSERT_TRUE(StartFleetrun(1, {"--nproc_per_node=3", ExampleScript()}, uninterrupted));
  ASSERT_EQ(WaitForNode(1, 20), 0) << Output(1);
  const double expected = FinalLoss(Output(1), 0);
  ASSERT_GT(expected, 0) << Output(1);

  const fs::path checkpoints = root_ / "checkpoints";
  for (int node : {2, 3, 4}) ASSERT_TRUE(StartNode(node, "resume", "2:4", ExampleEnv(checkpoints), ExampleScript()));
  ASSERT_TRUE(WaitUntil([&] { return fs::exists(checkpoints / "ckpt-00000020.json"); }, 20)) << Output(2);
  KillNode(3, SIGKILL);
  ExpectCleanEnd("resume", 30);

  for (const auto& [node, rank] : std::map<int, int>{{2, 0}, {4, 1}}) {
    SCOPED_TRACE("node " + std::to_string(node));
    const std::string out = Output(node);
    EXPECT_THAT(out, HasSubstr("rendezvous again")) << out;
    EXPECT_THAT(out, HasSubstr("rank " + std::to_string(rank) + "/2, backend gloo")) << out;
    const int resumed = ResumedFrom(out, rank);
    EXPECT_GE(resumed, 20) << out;
    EXPECT_EQ(resumed % 5, 0) << "a checkpoint's step";
    const double loss = FinalLoss(out, rank);
    EXPECT_NEAR(loss, expected, expected * kSameLossRelative) << out;
    std::cerr << std::setprecision(12) << "[ measured ] node " << node << ": resumed from step " << resumed
              << ", final loss " << loss
              << " (uninterrupted: " << expected << ")\n";
  }
}
#endif

TEST_F(FleetrunElastic, FixedNpWaitsForAReplacementAndResumes) {
  for (int node : {2, 3, 4}) ASSERT_TRUE(StartNode(node, "fixed", "3"));
  EXPECT_GE(WaitForGeneration({2, 3, 4}, {}, 10), 0);

  std::set<std::string> seen = DumpNames();
  KillNode(4, SIGKILL);
  // With two of three nodes, nothing runs: the survivors stop their trainers and wait.
  EXPECT_TRUE(WaitUntil([&] {
    return Output(2).find("waiting for nodes") != std::string::npos &&
           Output(3).find("waiting for nodes") != std::string::npos;
  }, kTtlSeconds + kRestartSlack)) << Output(2);
  EXPECT_EQ(DumpNames(), seen) << "no generation may start below np";

  ASSERT_TRUE(StartNode(5, "fixed", "3"));
  EXPECT_GE(WaitForGeneration({2, 3, 5}, seen, kRestartSlack), 0) << "the job did not resume with the replacement";
  ExpectEveryDumpConsistent();
  FinishAndExpectCleanEtcd("fixed");
}

TEST_F(FleetrunElastic, BelowTheMinimumForTheTimeoutFailsAndCleansUp) {
  ASSERT_TRUE(StartNode(2, "starved", "2:3", {{"PADDLE_ELASTIC_TIMEOUT", "1"}}));
  const int status = WaitForNode(2, 5);
  EXPECT_EQ(status, 124) << Output(2);
  EXPECT_THAT(Output(2), HasSubstr("had fewer than 2 nodes (np=2:3)"));
  EXPECT_THAT(Output(2), HasSubstr("PADDLE_ELASTIC_TIMEOUT"));
  EXPECT_TRUE(DumpNames().empty());
  auto left = etcd_->GetPrefix("/paddle/starved");
  ASSERT_TRUE(left.ok()) << left.error();
  EXPECT_TRUE(left->empty());
}

// A trainer's own failure (the job's nodes do not change) still ends its node with the trainer's
// status, one TTL later: fleetrun first waits to see whether a lost node caused it.
TEST_F(FleetrunElastic, ATrainersOwnFailureEndsItsNodeWithItsStatus) {
  WriteFile(root_ / "fail.sh", "#!/bin/sh\nexit 3\n", 0755);
  ASSERT_TRUE(StartNode(2, "fails", "1:2", {}, (root_ / "fail.sh").string()));
  EXPECT_EQ(WaitForNode(2, kTtlSeconds + 5), 3) << Output(2);
  EXPECT_THAT(Output(2), HasSubstr("ABORT: the job's nodes did not change in"));
  EXPECT_THAT(Output(2), HasSubstr("the trainer's failure is its own"));
  auto left = etcd_->GetPrefix("/paddle/fails");
  ASSERT_TRUE(left.ok()) << left.error();
  EXPECT_TRUE(left->empty());
}

// The nodes see a change at different moments: a node that saw it first starts its trainer while
// node 0's trainers still serve the old generation's rendezvous, which refuses it (another
// endpoint list), so its trainer fails. Once node 0 starts the new generation (it publishes the
// job's endpoints; here the test publishes them), the node rendezvouses again: no failure.
TEST_F(FleetrunElastic, ATrainerRefusedByNode0sOlderGenerationRendezvousesAgain) {
  const fs::path marker = root_ / "failed-once";
  WriteFile(root_ / "fails-once.sh", "#!/bin/sh\n[ -e " + marker.string() + " ] && exit 0\ntouch " + marker.string() +
                                         "\nexit 1\n", 0755);
  ASSERT_TRUE(StartNode(2, "late", "1:2", {}, (root_ / "fails-once.sh").string()));
  ASSERT_TRUE(WaitUntil([&] { return Output(2).find("waiting up to") != std::string::npos; }, 10)) << Output(2);
  ASSERT_TRUE(etcd_->Put("/paddle/late/endpoints", Host(3) + ":" + std::to_string(kPort) + "," + Host(2) + ":" +
                                                       std::to_string(kPort) + "|" + Host(3) + "," + Host(2)).ok());
  EXPECT_EQ(WaitForNode(2, kTtlSeconds + 5), 0) << Output(2);
  EXPECT_THAT(Output(2), HasSubstr("node 0 started a generation after this node's"));
  EXPECT_THAT(Output(2), Not(HasSubstr("ABORT"))) << "a node that rendezvouses again did not give up";
  auto left = etcd_->GetPrefix("/paddle/late");
  ASSERT_TRUE(left.ok()) << left.error();
  EXPECT_TRUE(left->empty());
}

TEST_F(FleetrunElastic, DuplicateHostIsRefusedAfterOneTtl) {
  ASSERT_TRUE(StartNode(2, "dup", "1:2"));
  const fs::path dir = root_ / "node-dup";
  fs::create_directories(dir);
  const pid_t second = SpawnWithEnv({fleetrun_, "--elastic_server=" + server_, "--job_id=dup", "--np=1:2", "--host=127.0.0.2",
                              (root_ / "elastic.sh").string()},
                             {{"PATH", "/usr/bin:/bin"}, {"PADDLE_ELASTIC_TTL", std::to_string(kTtlSeconds)}}, dir,
                             dir / "out");
  EXPECT_EQ(WaitForExit(second, kTtlSeconds + 5), 2) << ReadFile(dir / "out");
  EXPECT_THAT(ReadFile(dir / "out"), HasSubstr("duplicate host: 127.0.0.2 is already registered in job 'dup'"));
  FinishAndExpectCleanEtcd("dup");
}

TEST_F(FleetrunElastic, UnreachableEtcdIsAClearError) {
  const int closed_port = FreeLoopbackPort();
  const fs::path dir = root_ / "node-unreachable";
  fs::create_directories(dir);
  const auto start = Clock::now();
  const pid_t pid = SpawnWithEnv({fleetrun_, "--elastic_server=127.0.0.1:" + std::to_string(closed_port), "--job_id=j",
                           "--np=2", "--host=127.0.0.2", (root_ / "elastic.sh").string()},
                          {{"PATH", "/usr/bin:/bin"}}, dir, dir / "out");
  EXPECT_EQ(WaitForExit(pid, 10), 2) << ReadFile(dir / "out");
  EXPECT_LT(SecondsSince(start), 5);
  EXPECT_THAT(ReadFile(dir / "out"),
              HasSubstr("fleetrun: error: cannot reach etcd at 127.0.0.1:" + std::to_string(closed_port)));
}

}  // namespace
}  // namespace fleet
