// examples/collective_gloo/train.py through fleetrun: 4 CPU processes that all-reduce their gradients
// through the fleet_runtime Python module (Gloo). The job must converge — final loss below
// kLossThreshold on every rank, with identical weights — and log in Paddle's step format.
#include <fcntl.h>
#include <signal.h>
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

#include "../common/test_process.h"

namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// The example's synthetic regression starts near 15-20 and reaches the noise floor (~1e-4) in 50
// steps; 0.01 is two orders of magnitude above the floor and three below the start.
constexpr double kLossThreshold = 0.01;

using fleet::test::FinalLoss;
using fleet::test::Outcome;
using fleet::test::ReadFile;
using fleet::test::Spawn;
using fleet::test::StepLines;
using fleet::test::WaitChild;

class CollectiveExample : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* fleetrun = std::getenv("FLEETRUN");
    const char* source = std::getenv("FLEET_SOURCE_DIR");
    ASSERT_TRUE(fleetrun && source) << "run through ctest (FLEETRUN and FLEET_SOURCE_DIR are set there)";
    fleetrun_ = fleetrun;
    script_ = std::string(source) + "/examples/collective_gloo/train.py";
    char dir[] = "/tmp/fleet-collective-example-XXXXXX";
    ASSERT_NE(::mkdtemp(dir), nullptr);
    root_ = dir;
  }
  void TearDown() override { fs::remove_all(root_); }

  // Runs fleetrun in root_ with `env` added, killing it (and so its job) after `timeout` seconds.
  Outcome Run(const std::vector<std::string>& args, const std::vector<std::pair<std::string, std::string>>& env,
              double timeout) {
    std::vector<std::string> argv = {fleetrun_};
    argv.insert(argv.end(), args.begin(), args.end());
    Outcome o;
    o.code = WaitChild(Spawn(argv, env, root_, root_ / "fleetrun.out"), timeout, &o.seconds);  // SIGTERM stops fleetrun's whole job
    o.out = ReadFile(root_ / "fleetrun.out");
    return o;
  }

  std::vector<std::pair<std::string, std::string>> PythonEnv() const {
    const std::string python_dir = fs::path(FLEET_PYTHON_INTERPRETER).parent_path().string();
    const char* path = std::getenv("PATH");
    return {{"PYTHONPATH", FLEET_PYTHON_MODULE_DIR},
            // fleetrun runs `python3` from PATH: the interpreter the module was built for first.
            {"PATH", python_dir + ":" + (path ? path : "/usr/bin:/bin")},
            {"FLEET_EXAMPLE_TIMEOUT_SECONDS", "20"},
            {"FLEET_EXAMPLE_RENDEZVOUS_SECONDS", "20"}};
  }

  std::string fleetrun_;
  std::string script_;
  fs::path root_;
};


TEST_F(CollectiveExample, FourProcessesConvergeThroughFleetrun) {
  const Outcome o = Run({"--nproc_per_node=4", script_}, PythonEnv(), 25);
  ASSERT_EQ(o.code, 0) << o.out << "\n--- workerlog.1:\n" << ReadFile(root_ / "log" / "workerlog.1");
  EXPECT_LT(o.seconds, 25);

  // Paddle's step lines (the sidecar's parser reads them): steps 1, 11, 21, 31, 41 and 50.
  std::vector<int> steps;
  std::vector<double> losses;
  for (const auto& [step, loss] : StepLines(o.out, 0)) {
    steps.push_back(step);
    losses.push_back(loss);
  }
  EXPECT_EQ(steps, (std::vector<int>{1, 11, 21, 31, 41, 50})) << o.out;
  ASSERT_FALSE(losses.empty()) << o.out;
  EXPECT_GT(losses.front(), 1.0) << "training starts far from the solution";
  EXPECT_LT(losses.back(), kLossThreshold);

  const double loss0 = FinalLoss(o.out, 0);
  EXPECT_GE(loss0, 0) << "no final train_loss from worker 0:\n" << o.out;
  EXPECT_LT(loss0, kLossThreshold);
  EXPECT_THAT(o.out, HasSubstr("rank 0/4, backend gloo"));
  EXPECT_THAT(o.out, HasSubstr("parameters identical on all 4 ranks"));
  for (int r = 1; r < 4; ++r) {
    const std::string log = ReadFile(root_ / "log" / ("workerlog." + std::to_string(r)));
    EXPECT_THAT(log, HasSubstr("parameters identical on all 4 ranks")) << log;
    EXPECT_EQ(FinalLoss(log, r), loss0) << "same weights, same evaluation:\n" << log;
  }
}

TEST_F(CollectiveExample, OneProcessRunsWithoutPeers) {
  auto env = PythonEnv();
  env.push_back({"FLEET_EXAMPLE_STEPS", "100"});
  const Outcome o = Run({"--nproc_per_node=1", script_}, env, 20);
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr("rank 0/1, backend gloo"));
  const double loss = FinalLoss(o.out, 0);
  EXPECT_GE(loss, 0) << o.out;
  EXPECT_LT(loss, kLossThreshold);
}

TEST_F(CollectiveExample, MissingModuleIsAClearError) {
  auto env = PythonEnv();
  env[0].second = root_.string();  // PYTHONPATH without the module
  env.push_back({"FLEET_RUNTIME_PYTHONPATH", (root_ / "nowhere").string()});
  const Outcome o = Run({"--nproc_per_node=2", script_}, env, 20);
  EXPECT_NE(o.code, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr("exited with code 2"));
  // Whichever rank fails first says why (fleetrun stops the other, maybe before it prints).
  const std::string said = o.out + ReadFile(root_ / "log" / "workerlog.1");
  EXPECT_THAT(said, HasSubstr("cannot import fleet_runtime"));
  EXPECT_THAT(said, HasSubstr("cmake --build build --target fleet_runtime_python"));
}

}  // namespace
