// End to end, training progress: the real fleet-operator and real fleet-sidecar agents, one per
// pod on the pod's own loopback address (the fake gives pods 127.x addresses), as the pods' native
// sidecars would run. Two ranks log "step N/600, loss: x" to the files their sidecars follow; the
// third pushes its steps through the push API and falls behind. The job's status.progress must
// show the step, the total, the speed and an ETA that agrees with them, and name the straggler;
// `kubectl get fj` must show the columns; and the status writes must stay within the bound (one
// per job per --progress-interval).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "../common/test_process.h"
#include "builders.h"
#include "fleet/api/names.h"
#include "harness.h"

namespace fleet::op::e2e {
namespace {

using testing::JobBuilder;
using Clock = std::chrono::steady_clock;

constexpr int kTotal = 600;

bool Accepts(const std::string& ip, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, ip.c_str(), &addr.sin_addr);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

class ProgressE2eTest : public OperatorE2eTest {
 protected:
  void TearDown() override {
    for (pid_t pid : sidecars_) {
      ::kill(pid, SIGTERM);
      fleet::test::WaitChild(pid, 10, nullptr);
    }
    OperatorE2eTest::TearDown();
  }

  // A sidecar agent for `pod`, serving on the pod's address as its native sidecar does.
  void StartSidecar(const Json& pod, int rank, int metrics_port, const std::string& log_file, int report_port) {
    const std::string name = NameOf(pod);
    const std::string ip = pod["status"]["podIP"];
    sidecars_.push_back(fleet::test::Spawn(
        {FLEET_SIDECAR_BINARY, "agent", "--job=train", "--role=worker", "--pod=" + name, "--rank=" + std::to_string(rank),
         "--metrics-port=" + std::to_string(metrics_port), "--listen=" + ip + ":" + std::to_string(metrics_port),
         "--log-file=" + log_file, "--log-poll-interval=100ms",
         "--report-http=127.0.0.1:" + std::to_string(report_port)},
        {}, dir().path(), dir().path() + "/" + name + ".sidecar.log"));
  }

  // A sidecar for each rank's pod, following logs[rank] (created empty here), until it serves.
  void StartSidecars(const std::vector<Json>& pods, int metrics_port, const std::vector<int>& report_ports,
                     std::vector<std::string>& logs) {
    for (int rank = 0; rank < 3; ++rank) {
      logs.push_back(dir().path() + "/worker-" + std::to_string(rank) + ".log");
      std::ofstream(logs.back()).flush();
      const Json* pod = nullptr;
      for (const Json& p : pods) {
        if (NameOf(p) == "train-worker-" + std::to_string(rank)) pod = &p;
      }
      ASSERT_NE(pod, nullptr) << rank;
      StartSidecar(*pod, rank, metrics_port, logs.back(), report_ports[rank]);
      const std::string ip = (*pod)["status"]["podIP"];
      ASSERT_TRUE(Eventually("the sidecar of rank " + std::to_string(rank) + " serves", [&](std::string&) {
        return Accepts(ip, metrics_port) && Accepts("127.0.0.1", report_ports[rank]);
      }));
    }
  }

  // status.progress of the three ranks: the totals, the straggler, a loss, and an ETA that is what
  // is left at the speed shown.
  static void ExpectProgress(const Json& p) {
    EXPECT_EQ(p["totalSteps"], kTotal) << p.dump(2);
    EXPECT_EQ(p["ranks"], 3);
    EXPECT_EQ(p["reportingRanks"], 3);
    EXPECT_EQ(p["slowest"]["rank"], 2) << "the rank that pushes half the steps";
    EXPECT_EQ(p["slowest"]["pod"], "train-worker-2");
    EXPECT_EQ(p["rankDetails"][0]["rank"], 2);
    EXPECT_NEAR(p["loss"].get<double>(), 1.0 / p["step"].get<double>(), 0.02) << "rank 0's latest loss";
    const double speed = p["stepsPerSecond"];
    EXPECT_GT(speed, 2) << "about 20 steps/s on an idle machine";
    const double expected_eta = (kTotal - p["step"].get<double>()) / speed;
    EXPECT_NEAR(p["etaSeconds"].get<double>(), expected_eta, 1.0) << p.dump(2);
    EXPECT_THAT(p["stepText"].get<std::string>(), ::testing::HasSubstr("/600 ("));
    EXPECT_FALSE(p.value("updateTime", "").empty());
  }

  // `kubectl get fj` shows the progress columns (-o wide: the loss and the straggler), and
  // `kubectl describe` the progress under Status, in its words.
  void ExpectKubectlShowsProgress() {
    const std::string kubectl = "kubectl --kubeconfig=" + kubeconfig() + " -n " + ns();
    std::string out;
    ASSERT_EQ(RunCommand(kubectl + " get fj train", &out), 0) << out;
    EXPECT_THAT(out, ::testing::ContainsRegex("STEP +SPEED +ETA"));
    EXPECT_THAT(out, ::testing::ContainsRegex("[0-9]+/600 \\([0-9]+%\\) +[0-9.]+ step/s +[0-9]+m?[0-9]+s"));
    ASSERT_EQ(RunCommand(kubectl + " get fj train -o wide", &out), 0) << out;
    EXPECT_THAT(out, ::testing::ContainsRegex("LOSS +SLOWEST"));
    EXPECT_THAT(out, ::testing::HasSubstr("worker-2 (-"));
    ASSERT_EQ(RunCommand(kubectl + " describe fj train", &out), 0) << out;
    EXPECT_THAT(out, ::testing::HasSubstr("Progress:"));
    EXPECT_THAT(out, ::testing::ContainsRegex("Slowest Text: +worker-2 \\(-"));
    EXPECT_THAT(out, ::testing::ContainsRegex("Eta Text: +[0-9]"));
  }

  // Latency: a step logged (and pushed) is in the status within an interval and a collection.
  void LogAJumpAndWaitForIt(const std::vector<std::string>& logs, int report_port, int jump) {
    const auto logged_at = Clock::now();
    for (int rank = 0; rank < 2; ++rank) {
      std::ofstream(logs[rank], std::ios::app) << "step " << jump << "/" << kTotal << ", loss: 0.01\n";
    }
    ApiClient("http://127.0.0.1:" + std::to_string(report_port))
        .Request("POST", "/v1/report", Json{{"step", jump}, {"loss", 0.01}});
    WaitForJob("train", "the jump to step " + std::to_string(jump), [&](const Json& job) {
      return job.value("status", Json::object()).value("progress", Json::object()).value("step", 0) >= jump;
    }, Seconds(15));
    const double latency = std::chrono::duration<double>(Clock::now() - logged_at).count();
    std::printf("[ progress ] step logged -> status.progress: %.2f s (interval 1 s)\n", latency);
  }

  // The bound: at most one status write per job per interval (plus the lifecycle's own).
  void ExpectStatusWritesWithinTheBound(std::chrono::system_clock::time_point measured_from) {
    const double window = std::chrono::duration<double>(std::chrono::system_clock::now() - measured_from).count();
    const double since = std::chrono::duration<double>(measured_from.time_since_epoch()).count();
    int writes = 0;
    for (const Json& r : fake().RequestsMatching("PUT", std::string("/apis/") + api::kGroup + "/" + api::kVersion + "/namespaces/" + ns() + "/fleetjobs/train/status")) {
      if (r.value("time", 0.0) >= since) ++writes;
    }
    std::printf("[ progress ] %d status writes in %.1f s\n", writes, window);
    EXPECT_LE(writes, window / 1.0 + 2) << "more than one status write per interval";
    EXPECT_GE(writes, 2) << "progress was written as it changed";
  }

  std::vector<pid_t> sidecars_;
};

// The trainers, on a thread until Stop: ranks 0 and 1 log two steps every 100 ms, rank 2 pushes one.
class Trainers {
 public:
  Trainers(const std::vector<std::string>& logs, int report_port)
      : thread_([this, logs, report_port] { Train(logs, report_port); }) {}
  ~Trainers() { Stop(); }
  // Stops the trainers; the last step they reached.
  int Stop() {
    training_ = false;
    if (thread_.joinable()) thread_.join();
    return logged_;
  }

 private:
  void Train(const std::vector<std::string>& logs, int report_port) {
    ApiClient push("http://127.0.0.1:" + std::to_string(report_port));
    for (int step = 2; training_ && step < kTotal; step += 2) {
      for (int rank = 0; rank < 2; ++rank) {
        std::ofstream(logs[rank], std::ios::app) << "step " << step << "/" << kTotal << ", loss: " << 1.0 / step << "\n";
      }
      push.Request("POST", "/v1/report", Json{{"step", step / 2}, {"total_steps", kTotal}, {"loss", 2.0 / step}});
      logged_ = step;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));   // the trainers' pace
    }
  }

  std::atomic<bool> training_{true};
  std::atomic<int> logged_{0};
  std::thread thread_;
};

TEST_F(ProgressE2eTest, SidecarsProgressReachesTheStatusAndKubectlWithinTheWriteBound) {
  fake().Control("config", {{"podNetwork", "loopback"}});
  const int metrics_port = fleet::test::FreePort();
  const std::vector<int> report_ports = fleet::test::FreePorts(3);
  ASSERT_TRUE(WaitReady(StartOperator({"--progress-interval=1"})));
  CreateJob(JobBuilder("train").Collective(3).SidecarMetricsPort(metrics_port).Obj());
  const std::vector<Json> pods = WaitForRunningPods("train", 3, 0);
  ASSERT_EQ(pods.size(), 3u);
  WaitForPhase("train", "Running");
  std::vector<std::string> logs;
  ASSERT_NO_FATAL_FAILURE(StartSidecars(pods, metrics_port, report_ports, logs));

  Trainers trainers(logs, report_ports[2]);
  const auto measured_from = std::chrono::system_clock::now();
  const Json running = WaitForJob("train", "progress with a speed and a straggler", [](const Json& job) {
    const Json p = job.value("status", Json::object()).value("progress", Json::object());
    return p.contains("stepsPerSecond") && p.contains("etaSeconds") && p.value("slowest", Json::object()).value("lag", 0) > 10;
  }, Seconds(30));
  ASSERT_FALSE(running.is_null());
  ExpectProgress(running["status"]["progress"]);
  ASSERT_NO_FATAL_FAILURE(ExpectKubectlShowsProgress());

  const int jump = trainers.Stop() + 40;
  LogAJumpAndWaitForIt(logs, report_ports[2], jump);
  ExpectStatusWritesWithinTheBound(measured_from);
}

// A trainer's line that overflows an int64 step, through the real sidecar: status.progress keeps
// a step within range (it was -9223372036854775808, with a percent of -9.2e17). The sidecar then
// reports steps = 9.2e18 as its own count too: the operator takes the next line's step (3).
TEST_F(ProgressE2eTest, AStepPastAnInt64DoesNotReachTheStatusAsANegativeStep) {
  fake().Control("config", {{"podNetwork", "loopback"}});
  const int metrics_port = fleet::test::FreePort();
  const int report_port = fleet::test::FreePort();
  ASSERT_TRUE(WaitReady(StartOperator({"--progress-interval=1"})));
  CreateJob(JobBuilder("train").Collective(1).SidecarMetricsPort(metrics_port).Obj());
  const std::vector<Json> pods = WaitForRunningPods("train", 1, 0);
  ASSERT_EQ(pods.size(), 1u);
  WaitForPhase("train", "Running");
  const std::string log = dir().path() + "/worker-0.log";
  std::ofstream(log).flush();
  StartSidecar(pods[0], 0, metrics_port, log, report_port);
  const std::string ip = pods[0]["status"]["podIP"];
  ASSERT_TRUE(Eventually("the sidecar serves", [&](std::string&) { return Accepts(ip, metrics_port); }));
  auto progress_with_loss = [&](double loss) {
    return WaitForJob("train", "progress with the trainer's loss of " + std::to_string(loss), [loss](const Json& j) {
      return j.value("status", Json::object()).value("progress", Json::object()).value("loss", 0.0) == loss;
    }, Seconds(30));
  };
  std::ofstream(log, std::ios::app) << "step 1/1000, loss: 0.5\n";
  ASSERT_FALSE(progress_with_loss(0.5).is_null());
  std::ofstream(log, std::ios::app) << "step 9223372036854775807/1000, loss: 0.25\n";
  std::this_thread::sleep_for(std::chrono::seconds(3));   // three collections (and writes) of that step
  const Json overflowed = WaitForJob("train", "the job", [](const Json&) { return true; }, Seconds(5));
  const Json kept = overflowed["status"]["progress"];
  EXPECT_EQ(kept["step"], 1) << "the answer with the overflowing step is refused:\n" << kept.dump(2);
  EXPECT_EQ(kept["percent"], 0.1) << kept.dump(2);

  std::ofstream(log, std::ios::app) << "step 3/1000, loss: 0.125\n";

  const Json job = progress_with_loss(0.125);
  ASSERT_FALSE(job.is_null());
  const Json p = job["status"]["progress"];
  EXPECT_EQ(p["step"], 3) << p.dump(2);
  EXPECT_EQ(p["totalSteps"], 1000) << p.dump(2);
  EXPECT_EQ(p["percent"], 0.3) << p.dump(2);
  EXPECT_EQ(p["stepText"], "3/1000 (0%)") << p.dump(2);
}

}  // namespace
}  // namespace fleet::op::e2e
