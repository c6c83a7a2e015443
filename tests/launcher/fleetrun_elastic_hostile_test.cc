// Elastic fleetrun against a hostile or broken etcd, end to end (elastic_cluster.h: a real etcd,
// fleetrun processes on 127.0.0.x; skipped without an etcd binary): registrations that name no
// node, an etcd that stops answering (SIGSTOP: it still takes connections, and answers nothing),
// and the run's gloo temp dir, which must be gone however fleetrun ends.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "elastic_cluster.h"

namespace fleet {
namespace {

using ::testing::HasSubstr;

constexpr int kTtlSeconds = 2;
constexpr double kEtcdTimeoutSeconds = 3;   // elastic.cc's kEtcdTimeout
// A gloo FILE store's leftovers: the trainer writes into PADDLE_GLOO_FS_PATH, then runs until
// `finish` exists or exits with $EXIT_WITH.
constexpr char kGlooTrainerSh[] = R"SH(#!/bin/sh
echo "rank $PADDLE_TRAINER_ID" > "$PADDLE_GLOO_FS_PATH/store.$$"
[ -n "$EXIT_WITH" ] && exit "$EXIT_WITH"
f="$FLEET_TEST_DIR/env/$PADDLE_CURRENT_ENDPOINT.$$"
env -0 > "$f.tmp" && mv "$f.tmp" "$f"
while [ ! -e "$FLEET_TEST_DIR/finish" ]; do sleep 0.05; done
)SH";

size_t Count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

class FleetrunElasticHostile : public ::testing::Test, protected ElasticCluster {
 protected:
  void SetUp() override {
    if (EtcdBinary().empty()) GTEST_SKIP() << "no etcd binary (Debian: apt-get install etcd-server; scripts/setup.sh does)";
    const char* bin = std::getenv("FLEETRUN");
    ASSERT_EQ(Start(bin && *bin ? bin : FLEETRUN_BUILT_PATH, kTtlSeconds), "");
    tmp_ = root_ / "tmp";
    fs::create_directories(tmp_);
    WriteFile(root_ / "gloo.sh", kGlooTrainerSh, 0755);
  }

  void TearDown() override {
    if (etcd_pid_ > 0) ::kill(etcd_pid_, SIGCONT);
    Stop(/*keep_files=*/HasFailure());
  }

  // Starts a node whose fleetrun makes its gloo dir in tmp_ and whose trainer leaves a file there.
  bool StartGlooNode(int node, const std::string& job, const std::string& np, const EnvMap& extra = {}) {
    EnvMap env = extra;
    env["TMPDIR"] = tmp_.string();
    return StartNode(node, job, np, env, (root_ / "gloo.sh").string());
  }

  // Waits for node's trainer to have written into its gloo dir.
  bool WaitForGlooFile() {
    return WaitUntil([&] {
      for (const auto& dir : fs::directory_iterator(tmp_)) {
        if (!fs::is_empty(dir.path())) return true;
      }
      return false;
    }, 10);
  }

  std::vector<std::string> LeftInTmp() {
    std::vector<std::string> left;
    for (const auto& entry : fs::recursive_directory_iterator(tmp_)) left.push_back(entry.path().string());
    return left;
  }

  fs::path tmp_;
};

// A comma-joined value once became two nodes (np=2:3 ran four trainers), and a value that is no
// endpoint made every node wait for etcd to make sense until PADDLE_ELASTIC_TIMEOUT.
TEST_F(FleetrunElasticHostile, MalformedRegistrationsAreIgnoredWithOneWarningEach) {
  ASSERT_TRUE(etcd_->Put("/paddle/bad/nodes/comma", "10.0.0.8,10.0.0.9").ok());
  ASSERT_TRUE(etcd_->Put("/paddle/bad/nodes/port", "127.0.0.9:99999").ok());
  for (int node : {2, 3}) ASSERT_TRUE(StartNode(node, "bad", "2:3"));
  EXPECT_GE(WaitForGeneration({2, 3}, {}, 10), 0) << "nodes 2 and 3 never ran as the job's two nodes:\n" << Output(2);
  std::this_thread::sleep_for(std::chrono::seconds(1));   // several more reads of the registrations
  for (int node : {2, 3}) {
    const std::string out = Output(node);
    EXPECT_EQ(Count(out, "WARNING: ignoring the registration \"/paddle/bad/nodes/comma\": its value "
                         "\"10.0.0.8,10.0.0.9\" is not one node's host:port"), 1u) << out;
    EXPECT_EQ(Count(out, "WARNING: ignoring the registration \"/paddle/bad/nodes/port\""), 1u) << out;
  }
  for (const auto& [name, role] : Dumps()) EXPECT_EQ(role.trainers_num, 2) << name;
  ASSERT_TRUE(etcd_->DeletePrefix("/paddle/bad/nodes/port").ok());
  ASSERT_TRUE(etcd_->DeletePrefix("/paddle/bad/nodes/comma").ok());
  WriteFile(root_ / "finish", "", 0644);
  for (int node : {2, 3}) EXPECT_EQ(WaitForNode(node, 10), 0) << Output(node);
}

// etcd stops answering while the job runs; the trainers then finish. Leaving the job (flag it
// completed, revoke the lease, deregister, look for other nodes: four calls) once took a timeout
// each; now all of them share one, after at most one timeout of the read in progress.
TEST_F(FleetrunElasticHostile, ABlackHoledEtcdDelaysTheExitByAtMostTwoTimeouts) {
  ASSERT_TRUE(StartNode(2, "hole", "1"));
  ASSERT_GE(WaitForGeneration({2}, {}, 10), 0) << Output(2);
  ASSERT_EQ(::kill(etcd_pid_, SIGSTOP), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const auto start = Clock::now();
  WriteFile(root_ / "finish", "", 0644);
  EXPECT_EQ(WaitForNode(2, 30), 0) << Output(2);
  const double seconds = SecondsSince(start);
  std::cerr << "[ measured ] trainers done -> fleetrun exited, etcd black-holed: " << seconds << " s (etcd timeout "
            << kEtcdTimeoutSeconds << " s)\n";
  EXPECT_LT(seconds, 2 * (2 * kEtcdTimeoutSeconds)) << Output(2);
  EXPECT_THAT(Output(2), HasSubstr("could not clean up etcd"));
}

TEST_F(FleetrunElasticHostile, TheGlooDirIsRemovedWhenTheJobSucceeds) {
  ASSERT_TRUE(StartGlooNode(2, "gloo-ok", "1"));
  ASSERT_TRUE(WaitForGlooFile());
  WriteFile(root_ / "finish", "", 0644);
  EXPECT_EQ(WaitForNode(2, 10), 0) << Output(2);
  EXPECT_THAT(LeftInTmp(), ::testing::IsEmpty());
}

TEST_F(FleetrunElasticHostile, TheGlooDirIsRemovedWhenATrainerFails) {
  ASSERT_TRUE(StartGlooNode(2, "gloo-fail", "1", {{"EXIT_WITH", "3"}}));
  EXPECT_EQ(WaitForNode(2, kTtlSeconds + 10), 3) << Output(2);
  EXPECT_THAT(LeftInTmp(), ::testing::IsEmpty());
}

TEST_F(FleetrunElasticHostile, TheGlooDirIsRemovedOnSigterm) {
  ASSERT_TRUE(StartGlooNode(2, "gloo-term", "1"));
  ASSERT_TRUE(WaitForGlooFile());
  ::kill(nodes_.at(2), SIGTERM);
  EXPECT_EQ(WaitForNode(2, 15), 128 + SIGTERM) << Output(2);
  EXPECT_THAT(LeftInTmp(), ::testing::IsEmpty());
}

// A second SIGTERM while fleetrun leaves the job (here: a node waiting for a second one, on an
// etcd that stopped answering) is pending when fleetrun is done, and ends it as soon as the
// signals are unblocked: the gloo dir must be gone by then.
TEST_F(FleetrunElasticHostile, TheGlooDirIsRemovedOnARepeatedSigterm) {
  ASSERT_TRUE(StartGlooNode(2, "gloo-twice", "2"));
  ASSERT_FALSE(fs::is_empty(tmp_)) << "no gloo dir in " << tmp_;
  ASSERT_EQ(::kill(etcd_pid_, SIGSTOP), 0);
  ::kill(nodes_.at(2), SIGTERM);
  ASSERT_TRUE(WaitUntil([&] { return Output(2).find("received SIGTERM") != std::string::npos; }, 10)) << Output(2);
  ::kill(nodes_.at(2), SIGTERM);   // while it leaves the job, waiting for etcd
  EXPECT_EQ(WaitForNode(2, 30), 128 + SIGTERM) << Output(2);
  EXPECT_THAT(LeftInTmp(), ::testing::IsEmpty());
}

}  // namespace
}  // namespace fleet
