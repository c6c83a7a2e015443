// TrainerAttempts (--in-place) in-process on a fake /proc: the gate's binding and floor, the
// liveness rule and the trainer's state as the Trainer condition says it (api/in_place.h). The
// condition's writes and the routes on the real listeners are agent_binary_test.cc's.
#include "fleet/sidecar/trainer_attempts.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <future>
#include <string>

#include "fake_apiserver_fixture.h"
#include "sidecar_process.h"

namespace fleet::sidecar {
namespace {

using api::TrainerState;
using kube::testing::TempDir;
using Json = nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

// A /proc with the container start processes a test creates and ends.
class FakeProc {
 public:
  // A container's first process: parent pid 0, state `state`.
  void Start(int pid, uint64_t start_time, char state = 'S') {
    dir_.Write("proc/" + std::to_string(pid) + "/stat",
               std::to_string(pid) + " (python3) " + state + " 0 1 1 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 " +
                   std::to_string(start_time) + " 1000 100 18446744073709551615");
  }
  void End(int pid) { std::filesystem::remove_all(root() + "/" + std::to_string(pid)); }
  std::string root() const { return dir_.path() + "/proc"; }

 private:
  TempDir dir_;
};

struct Answer {
  int status = 0;
  Json body;        // JSON answers; a text answer as a string
};

class TrainerAttemptsTest : public ::testing::Test {
 protected:
  TrainerAttempts& Attempts(milliseconds gate_poll = milliseconds(50)) {
    TrainerAttemptsConfig config;
    config.ns = "default";
    config.pod = "j-worker-0";
    config.proc = proc_.root();
    config.gate_poll = gate_poll;
    attempts_ = std::make_unique<TrainerAttempts>(config, Logger("test"), nullptr);
    return *attempts_;
  }
  Answer Ask(const std::string& query) {
    const httpd::Response r = attempts_->Gate(query);
    Json body = Json::parse(r.body, nullptr, false);
    return {r.status, body.is_discarded() ? Json(r.body) : body};
  }
  // Asks in the background (the hook's long poll), once the test has set up what it waits for.
  std::future<Answer> AskLater(const std::string& query) {
    return std::async(std::launch::async, [this, query] { return Ask(query); });
  }
  // "<Reason> <run>: <message>", or "none".
  std::string State() {
    const auto report = attempts_->Report();
    if (!report) return "none";
    return std::string(report->report.Reason()) + " " + std::to_string(report->report.run) + ": " + report->message;
  }
  void ConfigMap(std::optional<int> run, std::optional<int> barrier = std::nullopt) {
    attempts_->SetRunAnnotations(RunAnnotations{run, barrier});
  }

  FakeProc proc_;
  std::unique_ptr<TrainerAttempts> attempts_;
};

TEST(TrainerInstanceTest, IsThePidAndStartTimeOfTheContainersFirstProcess) {
  auto instance = TrainerInstance::Parse("42:987654321");
  ASSERT_TRUE(instance.ok()) << instance.error();
  EXPECT_EQ(instance->pid, 42);
  EXPECT_EQ(instance->start_time, 987654321u);
  EXPECT_EQ(instance->ToString(), "42:987654321");
  EXPECT_EQ(TrainerInstance::Parse("42%3A7")->ToString(), "42:7");   // as a client may encode it
  for (const char* bad : {"", "42", "42:", ":7", "0:7", "-1:7", "42:-7", "42:7:1", "4 2:7", "x:7", "42:0x7",
                          "99999999999:7", "42:99999999999999999999"}) {
    auto parsed = TrainerInstance::Parse(bad);
    ASSERT_FALSE(parsed.ok()) << bad;
    EXPECT_EQ(parsed.error().rfind("instance: expected <pid>:<starttime>", 0), 0u) << parsed.error();
  }
}

TEST_F(TrainerAttemptsTest, AMalformedQueryIsRefusedNamingTheParameter) {
  Attempts();
  ConfigMap(3);
  for (const auto& [query, parameter] : std::vector<std::pair<std::string, std::string>>{
           {"", "run:"}, {"instance=42:7", "run:"}, {"run=-1&instance=42:7", "run:"}, {"run=x&instance=42:7", "run:"},
           {"run=3", "instance: missing"}, {"run=3&instance=42", "instance: expected"},
           {"run=3&instance=42:7x", "instance: expected"}}) {
    const Answer answer = Ask(query);
    EXPECT_EQ(answer.status, 400) << query;
    EXPECT_EQ(answer.body.get<std::string>().rfind(parameter, 0), 0u) << query << ": " << answer.body;
  }
  EXPECT_EQ(State(), "none");   // nothing waited
}

TEST_F(TrainerAttemptsTest, TheFirstInstancePassesIntoTheOpenRunAndIsRunning) {
  Attempts();
  proc_.Start(100, 5000);
  EXPECT_EQ(State(), "none");
  ConfigMap(3);
  const Answer answer = Ask("instance=100:5000&run=3");
  EXPECT_EQ(answer.status, 200);
  EXPECT_EQ(answer.body, (Json{{"run", 3}}));
  EXPECT_EQ(State(), "Running 3: run 3: instance 100:5000 passed the gate");
  ASSERT_TRUE(attempts_->Report());
  EXPECT_EQ(attempts_->Report()->instance, "100:5000");

  // Another Python program of the same container start: the bound run at once, whatever it asks
  // and wherever the ConfigMap has moved.
  ConfigMap(4, 4);
  EXPECT_EQ(Ask("run=4&instance=100:5000").body, (Json{{"run", 3}}));
  EXPECT_EQ(State(), "Running 3: run 3: instance 100:5000 passed the gate");
}

TEST_F(TrainerAttemptsTest, AnInstanceWaitsForARunOpenAndAtLeastTheOneItWasStartedFor) {
  Attempts();
  proc_.Start(100, 5000);
  // No ConfigMap yet, then the barrier: 202 after the poll, saying why and for which run.
  Answer answer = Ask("run=3&instance=100:5000");
  EXPECT_EQ(answer.status, 202);
  EXPECT_EQ(answer.body["run"], 3);
  EXPECT_EQ(answer.body["waiting"], "waiting for run 3 or later: the endpoints ConfigMap holds no run");
  EXPECT_EQ(State(), "AtGate 3: run 3: instance 100:5000 waits at the gate for this run or a later one");
  ConfigMap(3, 3);
  answer = Ask("run=3&instance=100:5000");
  EXPECT_EQ(answer.status, 202);
  EXPECT_EQ(answer.body["waiting"], "waiting for run 3 or later: the operator holds run 3 at its barrier");
  ConfigMap(2);
  EXPECT_EQ(Ask("run=3&instance=100:5000").body["waiting"],
            "waiting for run 3 or later: the endpoints ConfigMap holds run 2");
  // A run past the one it asks for is open: it passes into that one.
  ConfigMap(5, 4);
  EXPECT_EQ(Ask("run=3&instance=100:5000").body, (Json{{"run", 5}}));
  EXPECT_EQ(State(), "Running 5: run 5: instance 100:5000 passed the gate");
}

// The kubelet restarted the trainer before the operator reacted: the new instance must not rejoin
// the run its predecessor was in (a run that lost a rank); it waits for the next one and says so.
TEST_F(TrainerAttemptsTest, ARestartedInstanceWaitsForARunPastItsPredecessors) {
  Attempts(seconds(10));
  proc_.Start(100, 5000);
  ConfigMap(3);
  ASSERT_EQ(Ask("run=3&instance=100:5000").status, 200);
  proc_.End(100);
  EXPECT_EQ(State(), "Exited 3: run 3: instance 100:5000 has ended");

  proc_.Start(101, 6000);
  std::future<Answer> waits = AskLater("run=3&instance=101:6000");
  ASSERT_TRUE(testing::Eventually([&] { return attempts_->waiting_requests() == 1; }));
  EXPECT_EQ(State(), "AtGate 4: run 4: instance 101:6000 waits at the gate for this run or a later one");
  // The operator's restart: run 4 behind its barrier, then lifted; the request passes as it is lifted.
  ConfigMap(4, 4);
  EXPECT_EQ(attempts_->waiting_requests(), 1);
  ConfigMap(4);
  const Answer answer = waits.get();
  EXPECT_EQ(answer.status, 200);
  EXPECT_EQ(answer.body, (Json{{"run", 4}}));
  EXPECT_EQ(State(), "Running 4: run 4: instance 101:6000 passed the gate");
}

// Between two of its requests (202, then the hook asks again) an instance still waits; once it is
// seen dead without a request, the pod's trainer is its predecessor's ending again.
TEST_F(TrainerAttemptsTest, AnInstanceWaitsUntilItPassesOrEnds) {
  Attempts();
  proc_.Start(100, 5000);
  ConfigMap(3);
  ASSERT_EQ(Ask("run=3&instance=100:5000").status, 200);
  proc_.End(100);
  proc_.Start(101, 6000);
  ASSERT_EQ(Ask("run=3&instance=101:6000").status, 202);
  EXPECT_EQ(State(), "AtGate 4: run 4: instance 101:6000 waits at the gate for this run or a later one");
  proc_.Start(101, 6000, 'Z');   // a zombie has ended
  EXPECT_EQ(State(), "Exited 3: run 3: instance 100:5000 has ended");
}

// A process exec'd into the container (kubectl exec python ...) is an instance of its own beside
// the live bound one: it waits, but the trainer still runs in its run.
TEST_F(TrainerAttemptsTest, ASecondInstanceBesideALiveBoundOneDoesNotEndItsRun) {
  Attempts();
  proc_.Start(100, 5000);
  proc_.Start(300, 9000);
  ConfigMap(3);
  ASSERT_EQ(Ask("run=3&instance=100:5000").status, 200);
  const Answer answer = Ask("run=3&instance=300:9000");
  EXPECT_EQ(answer.status, 202);
  EXPECT_EQ(answer.body["run"], 4);
  EXPECT_EQ(State(), "Running 3: run 3: instance 100:5000 passed the gate");
}

TEST_F(TrainerAttemptsTest, LivenessFailsOnlyALiveInstanceOfARunOlderThanTheConfigMaps) {
  Attempts();
  EXPECT_EQ(attempts_->Live().status, 200);   // nothing bound
  proc_.Start(100, 5000);
  ConfigMap(3);
  ASSERT_EQ(Ask("run=3&instance=100:5000").status, 200);
  EXPECT_EQ(attempts_->Live().status, 200);
  ConfigMap(4, 4);   // barrier or not
  httpd::Response live = attempts_->Live();
  EXPECT_EQ(live.status, 503);
  EXPECT_EQ(live.body,
            "trainer instance 100:5000 runs in run 3, older than the endpoints ConfigMap's run 4: it is to be restarted\n");
  ConfigMap(4);
  EXPECT_EQ(attempts_->Live().status, 503);
  // Its pid now names another process (another start time): the instance has ended.
  proc_.Start(100, 5001);
  EXPECT_EQ(attempts_->Live().status, 200);
  proc_.Start(100, 5000);
  EXPECT_EQ(attempts_->Live().status, 503);
  proc_.End(100);
  EXPECT_EQ(attempts_->Live().status, 200);
  // Its successor, bound to the ConfigMap's run, lives.
  proc_.Start(101, 6000);
  ASSERT_EQ(Ask("run=4&instance=101:6000").status, 200);
  EXPECT_EQ(attempts_->Live().status, 200);
}

TEST_F(TrainerAttemptsTest, AtMostFourRequestsWaitAndStopAnswersThem) {
  Attempts(seconds(10));
  ConfigMap(3, 3);
  std::vector<std::future<Answer>> waiting;
  for (int i = 0; i < 4; ++i) waiting.push_back(AskLater("run=3&instance=100:5000"));
  ASSERT_TRUE(testing::Eventually([&] { return attempts_->waiting_requests() == 4; }));
  const Answer refused = Ask("run=3&instance=100:5000");
  EXPECT_EQ(refused.status, 429);
  EXPECT_EQ(refused.body, "4 requests wait at the gate already\n");
  attempts_->Start();
  EXPECT_TRUE(attempts_->Stop(seconds(5)));
  for (auto& w : waiting) EXPECT_EQ(w.get().status, 503);
}

}  // namespace
}  // namespace fleet::sidecar
