// examples/ps_mlp/train.py — the seeds' Fleet quick start (MLP) in parameter-server mode — through
// fleetrun with 2 servers and 2 trainers, in sync, async and geo mode. Each must converge (final
// loss below kLossThreshold on the merged model, the same on both trainers), log Paddle's step
// lines, and end cleanly (servers exit once both trainers stopped). Also: a saved model resumes, a
// trainer whose server is killed exits 1 with the server named, a missing module is a clear error.
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "../common/test_process.h"

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using ::testing::HasSubstr;

// Cross-entropy of a 2-class problem starts at ln 2 = 0.69; the merged models reach 0.05-0.15 in
// 200 steps of batch 32 (sync 0.072, async 0.058, geo 0.104 here). 0.25 is well clear of both.
constexpr double kLossThreshold = 0.25;

using fleet::test::FinalLoss;
using fleet::test::FreePort;
using fleet::test::Outcome;
using fleet::test::ReadFile;
using fleet::test::Spawn;
using fleet::test::StepLines;
using fleet::test::WaitChild;

class PsMlpExample : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* fleetrun = std::getenv("FLEETRUN");
    const char* source = std::getenv("FLEET_SOURCE_DIR");
    ASSERT_TRUE(fleetrun && source) << "run through ctest (FLEETRUN and FLEET_SOURCE_DIR are set there)";
    fleetrun_ = fleetrun;
    script_ = std::string(source) + "/examples/ps_mlp/train.py";
    char dir[] = "/tmp/fleet-ps-example-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    root_ = dir;
  }
  void TearDown() override { fs::remove_all(root_); }

  std::vector<std::pair<std::string, std::string>> PythonEnv() const {
    const std::string python_dir = fs::path(FLEET_PYTHON_INTERPRETER).parent_path().string();
    const char* path = std::getenv("PATH");
    return {{"PYTHONPATH", FLEET_PYTHON_MODULE_DIR},
            // fleetrun runs `python3` from PATH: the interpreter the module was built for first.
            {"PATH", python_dir + ":" + (path ? path : "/usr/bin:/bin")},
            // A dead peer fails the job in seconds instead of the default minutes.
            {"FLEET_PS_SYNC_TIMEOUT", "30"},
            {"FLEET_PS_CONNECT_TIMEOUT", "30"},
            {"FLEET_PS_RPC_TIMEOUT", "30"}};
  }

  // fleetrun --server_num=2 --worker_num=2 train.py <args>, killed after `timeout` s.
  Outcome Fleetrun(const std::vector<std::string>& args, double timeout) {
    std::vector<std::string> argv = {fleetrun_, "--server_num=2", "--worker_num=2", script_};
    argv.insert(argv.end(), args.begin(), args.end());
    Outcome o;
    const pid_t pid = Spawn(argv, PythonEnv(), root_, root_ / "fleetrun.out");
    o.code = WaitChild(pid, timeout, &o.seconds);
    o.out = ReadFile(root_ / "fleetrun.out");
    return o;
  }

  void ExpectConverges(const std::vector<std::string>& args) {
    const Outcome o = Fleetrun(args, 55);
    const std::string worker1 = ReadFile(root_ / "log" / "workerlog.1");
    ASSERT_EQ(o.code, 0) << o.out << "\n--- workerlog.1:\n" << worker1 << "\n--- serverlog.0:\n"
                         << ReadFile(root_ / "log" / "serverlog.0");
    const auto steps = StepLines(o.out, 0);
    std::vector<int> numbers;
    for (const auto& [step, loss] : steps) numbers.push_back(step);
    std::vector<int> expected;
    for (int s = 1; s <= 191; s += 10) expected.push_back(s);
    expected.push_back(200);
    EXPECT_EQ(numbers, expected) << o.out;
    ASSERT_FALSE(steps.empty());
    EXPECT_GT(steps.front().second, 0.6) << "training starts at chance (ln 2)";
    const double loss0 = FinalLoss(o.out, 0);
    EXPECT_GE(loss0, 0) << "no final train_loss from worker 0:\n" << o.out;
    EXPECT_LT(loss0, kLossThreshold) << o.out;
    EXPECT_EQ(FinalLoss(worker1, 1), loss0) << "both trainers evaluate the same merged model:\n" << worker1;
    EXPECT_EQ(StepLines(worker1, 1).size(), expected.size()) << worker1;
    for (int s = 0; s < 2; ++s) {
      const std::string log = ReadFile(root_ / "log" / ("serverlog." + std::to_string(s)));
      EXPECT_THAT(log, HasSubstr("pserver_index: " + std::to_string(s) + ", listening on 127.0.0.1:")) << log;
      EXPECT_THAT(log, HasSubstr("all 2 trainers stopped, exit")) << log;
    }
  }

  std::string fleetrun_;
  std::string script_;
  fs::path root_;
};

TEST_F(PsMlpExample, SyncModeConvergesThroughFleetrun) { ExpectConverges({"--mode", "sync"}); }

TEST_F(PsMlpExample, AsyncModeConvergesThroughFleetrun) { ExpectConverges({"--mode", "async"}); }

TEST_F(PsMlpExample, GeoModeConvergesThroughFleetrun) { ExpectConverges({"--mode", "geo", "--k_steps", "10"}); }

TEST_F(PsMlpExample, ASavedModelIsWhereTheNextJobStarts) {
  const std::string model = (root_ / "model").string();
  Outcome first = Fleetrun({"--mode", "async", "--steps", "100", "--log_every", "50", "--save_dir", model}, 55);
  ASSERT_EQ(first.code, 0) << first.out;
  EXPECT_THAT(first.out, HasSubstr("worker_index: 0, saved the model to " + model));
  EXPECT_TRUE(fs::exists(fs::path(model) / "table_0.shard_0_of_2"));
  EXPECT_TRUE(fs::exists(fs::path(model) / "table_1.shard_1_of_2"));
  const double trained = FinalLoss(first.out, 0);
  fs::remove_all(root_ / "log");
  // One more step from the checkpoint: its loss is the trained model's, not chance.
  Outcome resumed = Fleetrun({"--mode", "async", "--steps", "1", "--model_dir", model}, 55);
  ASSERT_EQ(resumed.code, 0) << resumed.out;
  const auto steps = StepLines(resumed.out, 0);
  ASSERT_EQ(steps.size(), 1u) << resumed.out;
  EXPECT_LT(steps[0].second, 0.45) << "fresh training starts at 0.69";
  EXPECT_THAT(ReadFile(root_ / "log" / "serverlog.0"), HasSubstr("loaded from " + model));
  EXPECT_LT(FinalLoss(resumed.out, 0), trained + 0.1);
}

TEST_F(PsMlpExample, ATrainerWhoseServerIsKilledExitsWithTheServerNamed) {
  const std::string port = std::to_string(FreePort());
  auto env = PythonEnv();
  env.insert(env.end(), {{"PADDLE_PSERVERS_IP_PORT_LIST", "127.0.0.1:" + port},
                         {"PADDLE_TRAINERS_NUM", "1"},
                         {"POD_IP", "127.0.0.1"}});
  auto server_env = env;
  server_env.insert(server_env.end(), {{"TRAINING_ROLE", "PSERVER"}, {"PADDLE_PORT", port}});
  auto trainer_env = env;
  trainer_env.insert(trainer_env.end(), {{"TRAINING_ROLE", "TRAINER"}, {"PADDLE_TRAINER_ID", "0"}, {"PADDLE_PORT", "1"}});
  const std::string python = FLEET_PYTHON_INTERPRETER;
  const pid_t server = Spawn({python, "-u", script_, "--mode", "async"}, server_env, root_, root_ / "server.out");
  const pid_t trainer = Spawn({python, "-u", script_, "--mode", "async", "--steps", "1000000", "--log_every", "10"},
                              trainer_env, root_, root_ / "trainer.out");
  const auto deadline = Clock::now() + std::chrono::seconds(40);
  while (ReadFile(root_ / "trainer.out").find("step11,") == std::string::npos && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling the log
  }
  ASSERT_THAT(ReadFile(root_ / "trainer.out"), HasSubstr("step11,"));
  ::kill(server, SIGKILL);
  EXPECT_EQ(WaitChild(server, 10, nullptr), 128 + SIGKILL);
  double seconds = 0;
  EXPECT_EQ(WaitChild(trainer, 20, &seconds), 1);
  EXPECT_LT(seconds, 20);
  const std::string out = ReadFile(root_ / "trainer.out");
  EXPECT_THAT(out, HasSubstr("fleet_runtime.ps failed: UNAVAILABLE: pserver 127.0.0.1:" + port + " (server 0)")) << out;
}

TEST_F(PsMlpExample, MissingModuleIsAClearError) {
  const pid_t pid = Spawn({FLEET_PYTHON_INTERPRETER, script_},
                          {{"PYTHONPATH", root_.string()}, {"FLEET_RUNTIME_PYTHONPATH", (root_ / "nowhere").string()}},
                          root_, root_ / "out");
  EXPECT_EQ(WaitChild(pid, 20, nullptr), 2);
  const std::string out = ReadFile(root_ / "out");
  EXPECT_THAT(out, HasSubstr("cannot import fleet_runtime"));
  EXPECT_THAT(out, HasSubstr("cmake --build build --target fleet_runtime_python"));
}

}  // namespace
