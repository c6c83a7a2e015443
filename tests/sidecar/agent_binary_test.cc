// The agent end to end: the real fleet-sidecar binary, after its gate opened against the fake API
// server (or as `fleet-sidecar agent`), fed by log files, the push API and the Python helper;
// observed through /metrics, /readyz, /status and the pod condition it writes.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <fstream>
#include <future>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "fake_apiserver_fixture.h"
#include "fleet/sidecar/process_watch.h"
#include "sidecar_process.h"
#include "../httpd/idle_connections.h"

namespace fleet::sidecar::testing {
namespace {

using kube::testing::FakeApiServer;
using kube::testing::HttpConnection;
using kube::testing::TempDir;
using Json = nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr const char* kCondition = "fleet.paddlepaddle.org/TrainingProgress";

std::string StepLine(int rank, int step, double loss) {
  char line[256];
  std::snprintf(line, sizeof line,
                "worker_index: %d, step %d, train_loss: %.6f, total time cost = %.6f, step per second: %.6f, "
                "speed: %.6f\n",
                rank, step, loss, step * 0.01, 100.0, 3200.0);
  return line;
}

void Append(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::app | std::ios::binary);
  out << text;
}

// The number after `prefix` in the sidecar's log (e.g. "(report port "), -1 when absent.
int LoggedNumber(SidecarProcess& sidecar, const std::string& prefix) {
  int found = -1;
  Eventually([&] {
    const std::string err = sidecar.Stderr();
    const size_t at = err.find(prefix);
    if (at == std::string::npos) return !sidecar.Running();
    found = std::atoi(err.c_str() + at + prefix.size());
    return true;
  });
  return found;
}

// The value of the sample of `name` whose labels include `labels` (e.g. rank="3"); NaN when absent.
double Sample(const std::string& page, const std::string& name, const std::string& labels) {
  std::istringstream lines(page);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(name + "{", 0) != 0 || line.find(labels) == std::string::npos) continue;
    return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return std::nan("");
}

// A report to the push API's HTTP endpoint on `port`.
std::optional<HttpConnection::Response> Post(int port, const std::string& body,
                                             const std::string& type = "application/json") {
  HttpConnection http("http://127.0.0.1:" + std::to_string(port));
  return http.Send("POST", "/v1/report", body, {{"Content-Type", type}});
}

class AgentTest : public ::testing::Test {
 protected:
  std::unique_ptr<SidecarProcess> Start(const std::vector<std::string>& args) {
    auto sidecar = std::make_unique<SidecarProcess>(args, dir_.path());
    EXPECT_TRUE(sidecar->started());
    EXPECT_GT(sidecar->WaitForPort(), 0) << sidecar->Stderr();
    return sidecar;
  }
  std::string Metrics(SidecarProcess& sidecar) {
    auto r = sidecar.Get("/metrics");
    return r && r->status == 200 ? r->body : "";
  }
  ::testing::AssertionResult MetricBecomes(SidecarProcess& sidecar, const std::string& name, const std::string& labels,
                                           double value, milliseconds timeout = seconds(10)) {
    double last = std::nan("");
    if (Eventually([&] { return (last = Sample(Metrics(sidecar), name, labels)) == value; }, timeout)) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << name << "{" << labels << "} is " << last << ", not " << value << "\n"
                                         << sidecar.Stderr();
  }
  ::testing::AssertionResult Says(SidecarProcess& sidecar, const std::string& path, int status,
                                  const std::string& fragment, milliseconds timeout = seconds(10)) {
    std::string last;
    if (Eventually(
            [&] {
              auto r = sidecar.Get(path);
              last = r ? std::to_string(r->status) + " " + r->body : "(no answer)";
              return r && r->status == status && r->body.find(fragment) != std::string::npos;
            },
            timeout)) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << path << " never answered " << status << " with '" << fragment
                                         << "'; last: " << last << "\n" << sidecar.Stderr();
  }
  TempDir dir_;
};

class GatedAgentTest : public AgentTest {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.ok()) << fake_.error();
    kubeconfig_ = dir_.Write("kubeconfig", "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
                                           "clusters: [{name: fake, cluster: {server: '" + fake_.url() + "'}}]\n"
                                           "contexts: [{name: fake, context: {cluster: fake, user: sidecar}}]\n"
                                           "users: [{name: sidecar, user: {token: sidecar-token}}]\n");
  }
  void Create(const std::string& path, const Json& object) {
    HttpConnection http(fake_.url());
    auto r = http.Send("POST", path, object.dump(), {{"Content-Type", "application/json"}});
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 201) << r->body;
  }
  void CreatePod(const std::string& name) {
    Create("/api/v1/namespaces/default/pods",
           {{"apiVersion", "v1"},
            {"kind", "Pod"},
            {"metadata", {{"name", name}}},
            {"spec", {{"containers", Json::array({{{"name", "main"}, {"image", "trainer"}}})}}}});
  }
  void CreateConfigMap(int run, const Json& data) {
    Create("/api/v1/namespaces/default/configmaps",
           {{"apiVersion", "v1"},
            {"kind", "ConfigMap"},
            {"metadata", {{"name", "j-endpoints"}, {"annotations", {{"fleet.paddlepaddle.org/run", std::to_string(run)}}}}},
            {"data", data}});
  }
  // The pod's TrainingProgress condition, or another `type` ({} when absent).
  Json Condition(const std::string& pod, const std::string& type = kCondition) {
    HttpConnection http(fake_.url());
    auto r = http.Send("GET", "/api/v1/namespaces/default/pods/" + pod);
    if (!r || r->status != 200) return Json::object();
    const Json object = Json::parse(r->body);
    for (const Json& c : object["status"].value("conditions", Json::array())) {
      if (c.value("type", "") == type) return c;
    }
    return Json::object();
  }
  ::testing::AssertionResult ConditionBecomes(const std::string& pod, const std::string& status,
                                              const std::string& reason, const std::string& fragment,
                                              SidecarProcess& sidecar) {
    Json last;
    if (Eventually([&] {
          last = Condition(pod);
          return last.value("status", "") == status && last.value("reason", "") == reason &&
                 last.value("message", "").find(fragment) != std::string::npos;
        })) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "the condition is " << last.dump() << ", not " << status << "/" << reason
                                         << " with '" << fragment << "'\n" << sidecar.Stderr();
  }
  std::vector<std::string> GateArgs(const std::string& role, const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"gate", "--namespace=default", "--job=j", "--pod=j-" + role + "-0",
                                     "--role=" + role, "--run=3", "--config-map=j-endpoints", "--metrics-port=9090",
                                     "--kubeconfig=" + kubeconfig_, "--listen=127.0.0.1:0"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  FakeApiServer fake_;
  std::string kubeconfig_;
};

TEST_F(GatedAgentTest, AfterTheGateItFollowsTheLogsDetectsStallsAndSaysSoOnThePod) {
  CreatePod("j-worker-0");
  CreateConfigMap(3, {{"PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:6170,10.0.0.2:6170"}});
  fake_.ClearRequests();
  const std::string log_dir = dir_.path() + "/log";
  auto sidecar = Start(GateArgs("worker", {"--rank=4", "--ranks=2", "--log-dir=" + log_dir, "--stall-window=1s",
                                           "--condition-min-interval=100ms", "--main-process=off"}));
  EXPECT_TRUE(Says(*sidecar, "/startup", 200, "gate open"));
  EXPECT_TRUE(Says(*sidecar, "/readyz", 200, "ok"));
  EXPECT_TRUE(ConditionBecomes("j-worker-0", "True", "AwaitingFirstStep",
                               "no training step reported yet by ranks 4-5 (pod j-worker-0)", *sidecar));

  // fleetrun's per-process logs: workerlog.1 is the pod's second rank (5).
  dir_.Write("log/workerlog.1", "");
  for (int step = 1; step <= 31; step += 10) Append(log_dir + "/workerlog.1", StepLine(5, step, 1.0 / step));
  Append(log_dir + "/workerlog.1", "some other line\nstep 40, loss: oops\n");
  EXPECT_TRUE(MetricBecomes(*sidecar, "fleet_training_steps_total", "rank=\"5\"", 31));
  EXPECT_TRUE(MetricBecomes(*sidecar, "fleet_training_step", "rank=\"5\"", 31));
  EXPECT_TRUE(MetricBecomes(*sidecar, "fleet_sidecar_parse_errors_total", "source=\"log\"", 1));
  const std::string page = Metrics(*sidecar);
  EXPECT_NEAR(Sample(page, "fleet_training_loss", "rank=\"5\""), 1.0 / 31, 1e-6);
  EXPECT_EQ(Sample(page, "fleet_training_samples_per_second", "rank=\"5\""), 3200);
  EXPECT_EQ(Sample(page, "fleet_training_step_duration_seconds_count", "rank=\"5\""), 30);  // from total time cost
  EXPECT_EQ(Sample(page, "fleet_sidecar_gate_open", "pod=\"j-worker-0\""), 1);
  EXPECT_TRUE(std::isnan(Sample(page, "fleet_training_steps_total", "rank=\"4\"")));     // rank 4 has not reported
  EXPECT_TRUE(ConditionBecomes("j-worker-0", "True", "Progressing", "ranks 4-5 (pod j-worker-0) report training steps",
                               *sidecar));
  if (auto check = PromtoolCheckMetrics(page)) {
    EXPECT_EQ(check->status, 0) << check->output;
    EXPECT_EQ(check->output, "");
  }

  // No step for longer than the window: stalled, not ready, and the pod says which rank and how long.
  EXPECT_TRUE(Says(*sidecar, "/readyz", 503, "rank 5 stalled: no step for"));
  EXPECT_TRUE(ConditionBecomes("j-worker-0", "False", "Stalled", "rank 5 (pod j-worker-0) has reported no step for",
                               *sidecar));
  EXPECT_NE(Condition("j-worker-0").value("message", "").find("(last step 31; stall window 1s)"), std::string::npos);
  auto status = sidecar->Get("/status");
  ASSERT_TRUE(status);
  const Json state = Json::parse(status->body);
  EXPECT_EQ(state["stalled"], Json::array({5}));
  EXPECT_FALSE(state["ready"].get<bool>());
  // What the operator's progress collector reads of each rank.
  ASSERT_EQ(state["ranks"].size(), 1u) << state.dump();
  const Json& rank = state["ranks"][0];
  EXPECT_EQ(rank["rank"], 5);
  EXPECT_EQ(rank["step"], 31);
  EXPECT_EQ(rank["steps"], 31);
  EXPECT_NEAR(rank["loss"].get<double>(), 1.0 / 31, 1e-6);
  EXPECT_EQ(rank["samplesPerSecond"], 3200);
  EXPECT_TRUE(rank.contains("stepSeconds")) << rank.dump();
  EXPECT_GE(rank["idleSeconds"].get<double>(), 1);

  // Steps again: progressing, ready.
  Append(log_dir + "/workerlog.1", StepLine(5, 41, 0.01));
  EXPECT_TRUE(Says(*sidecar, "/readyz", 200, "ok"));
  EXPECT_TRUE(ConditionBecomes("j-worker-0", "True", "Progressing", "report training steps", *sidecar));
  EXPECT_NE(sidecar->Stderr().find("training progresses again"), std::string::npos);

  // The API access beyond the gate: reads and status patches of its own pod, nothing else.
  for (const Json& r : fake_.Requests()) {
    const std::string path = r.value("path", "");
    if (path.find("/configmaps") != std::string::npos) continue;
    const std::string method = r.value("method", "");
    EXPECT_TRUE((method == "GET" && path == "/api/v1/namespaces/default/pods/j-worker-0") ||
                (method == "PATCH" && path == "/api/v1/namespaces/default/pods/j-worker-0/status"))
        << r.dump();
  }
  ASSERT_TRUE(sidecar->Signal(SIGTERM));
  EXPECT_EQ(sidecar->WaitExit(seconds(5)), 0) << sidecar->Stderr();
}

// The trainer's preStop hook: GET /checkpoint asks through the request file, waits for the
// trainer's done file, answers with its step, and records it on the pod and in /status; a
// malformed answer is recorded as Invalid (the condition False), and the sidecar keeps serving.
TEST_F(GatedAgentTest, ACheckpointRequestWaitsForTheTrainerAndRecordsItsStepOnThePod) {
  CreatePod("j-worker-0");
  CreateConfigMap(3, {{"PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:6170"}});
  const std::string dir = dir_.path() + "/run/checkpoint";
  ASSERT_EQ(::mkdir((dir_.path() + "/run").c_str(), 0755), 0);
  auto sidecar = Start(GateArgs("worker", {"--main-process=off", "--checkpoint-dir=" + dir, "--checkpoint-timeout=3s"}));
  EXPECT_TRUE(Says(*sidecar, "/startup", 200, "gate open"));
  EXPECT_NE(sidecar->Stderr().find("/metrics, /status and /checkpoint on 127.0.0.1:0"), std::string::npos);
  auto trainer = [&](const std::string& done) {
    return std::thread([dir, done] {
      if (!Eventually([&] { return ::access((dir + "/request").c_str(), F_OK) == 0; })) return;
      { std::ofstream(dir + "/done.tmp") << done; }
      std::rename((dir + "/done.tmp").c_str(), (dir + "/done").c_str());
    });
  };

  std::thread saves = trainer("1200\n");
  auto answer = sidecar->Get("/checkpoint?reason=preStop");
  saves.join();
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 200) << answer->body;
  const Json outcome = Json::parse(answer->body);
  EXPECT_EQ(outcome["result"], "Saved");
  EXPECT_EQ(outcome["step"], 1200);
  // Written before the answer: the pod is deleted right after its hook returns.
  const Json condition = Condition("j-worker-0", "fleet.paddlepaddle.org/Checkpoint");
  EXPECT_EQ(condition.value("status", ""), "True") << condition.dump();
  EXPECT_EQ(condition.value("reason", ""), "Saved");
  EXPECT_EQ(condition.value("message", "").rfind("step 1200 saved by the trainer", 0), 0u) << condition.dump();
  EXPECT_TRUE(Says(*sidecar, "/status", 200, "\"step\": 1200"));
  EXPECT_NE(sidecar->Stderr().find("checkpoint Saved: step 1200"), std::string::npos);

  // Within the timeout after an answer a request gets that answer again; past it, the trainer is asked anew.
  answer = sidecar->Get("/checkpoint");
  ASSERT_TRUE(answer);
  EXPECT_EQ(Json::parse(answer->body)["step"], 1200);
  std::this_thread::sleep_for(seconds(4));
  std::thread garbles = trainer("twelve hundred");
  answer = sidecar->Get("/checkpoint");
  garbles.join();
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, 200);
  EXPECT_EQ(Json::parse(answer->body)["result"], "Invalid");
  const Json invalid = Condition("j-worker-0", "fleet.paddlepaddle.org/Checkpoint");
  EXPECT_EQ(invalid.value("status", ""), "False") << invalid.dump();
  EXPECT_EQ(invalid.value("reason", ""), "Invalid");
  EXPECT_NE(invalid.value("message", "").find("'twelve hundred', not a step"), std::string::npos) << invalid.dump();
  EXPECT_TRUE(Says(*sidecar, "/healthz", 200, "ok"));
  ASSERT_TRUE(sidecar->Signal(SIGTERM));
  EXPECT_EQ(sidecar->WaitExit(seconds(5)), 0) << sidecar->Stderr();
}

// A trainer stand-in for --in-place: a process of its own, named as the env hook names the
// container's first process ("<pid>:<starttime>"), ended as a container start ends.
class TrainerStandIn {
 public:
  TrainerStandIn() {
    pid_ = ::fork();
    if (pid_ == 0) {
      ::execl("/bin/sleep", "sleep", "600", nullptr);
      ::_exit(127);
    }
    const auto stat = pid_ > 0 ? ReadProcStat("/proc", pid_) : std::nullopt;
    if (stat) name_ = std::to_string(pid_) + ":" + std::to_string(stat->start_time);
  }
  ~TrainerStandIn() { End(); }
  TrainerStandIn(const TrainerStandIn&) = delete;
  TrainerStandIn& operator=(const TrainerStandIn&) = delete;
  const std::string& name() const { return name_; }
  void End() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
  std::string name_;
};

class InPlaceTest : public GatedAgentTest {
 protected:
  int PatchConfigMap(const Json& annotations) {
    HttpConnection http(fake_.url());
    auto r = http.Send("PATCH", "/api/v1/namespaces/default/configmaps/j-endpoints",
                       Json{{"metadata", {{"annotations", annotations}}}}.dump(),
                       {{"Content-Type", "application/merge-patch+json"}});
    return r ? r->status : 0;
  }
  // The hook's long poll: GET /gate until an answer other than 202 (at most a minute).
  static std::optional<HttpConnection::Response> PassGate(int report_port, const std::string& query) {
    HttpConnection http("http://127.0.0.1:" + std::to_string(report_port));
    for (int i = 0; i < 6; ++i) {
      auto r = http.Send("GET", std::string("/gate?") + query);
      if (!r || r->status != 202) return r;
    }
    return std::nullopt;
  }
  ::testing::AssertionResult TrainerBecomes(const std::string& status, const std::string& reason,
                                            const std::string& message, SidecarProcess& sidecar) {
    Json last;
    if (Eventually([&] {
          last = Condition("j-worker-0", "fleet.paddlepaddle.org/Trainer");
          return last.value("status", "") == status && last.value("reason", "") == reason &&
                 last.value("message", "") == message;
        })) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure() << "the Trainer condition is " << last.dump() << ", not " << status << "/"
                                         << reason << " '" << message << "'\n" << sidecar.Stderr();
  }
};

// The sidecar's half of an in-place restart (api/in_place.h) against the fake API server: the
// trainer passes the gate into the open run; the operator moves the ConfigMap to the next run
// behind a barrier, and the liveness probe fails the old instance while it lives; its successor
// waits at the gate (the condition says so, for the operator to lift the barrier) and passes into
// the new run.
TEST_F(InPlaceTest, TheTrainerPassesTheGateAndARestartMovesItToTheNextRun) {
  CreatePod("j-worker-0");
  CreateConfigMap(3, {{"PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:6170"}});
  auto sidecar = Start(GateArgs("worker", {"--in-place", "--report-http=127.0.0.1:0", "--main-process=off"}));
  EXPECT_TRUE(Says(*sidecar, "/startup", 200, "gate open"));
  const int report_port = LoggedNumber(*sidecar, "(report port ");
  ASSERT_GT(report_port, 0) << sidecar->Stderr();
  EXPECT_NE(sidecar->Stderr().find("/v1/report and the trainers' gate on /gate"), std::string::npos);

  TrainerStandIn first;
  ASSERT_NE(first.name(), "");
  auto passed = PassGate(report_port, "run=3&instance=" + first.name());
  ASSERT_TRUE(passed);
  EXPECT_EQ(passed->status, 200) << passed->body;
  EXPECT_EQ(Json::parse(passed->body), (Json{{"run", 3}}));
  EXPECT_TRUE(TrainerBecomes("True", "Running", "run 3: instance " + first.name() + " passed the gate", *sidecar));
  EXPECT_TRUE(Says(*sidecar, "/trainer-live", 200, "ok"));
  EXPECT_TRUE(Says(*sidecar, "/status", 200, "\"state\": \"Running\""));

  // The operator restarts the job in place: run 4, behind its barrier.
  ASSERT_EQ(PatchConfigMap({{"fleet.paddlepaddle.org/run", "4"}, {"fleet.paddlepaddle.org/barrier", "4"}}), 200);
  EXPECT_TRUE(Says(*sidecar, "/trainer-live", 503, "runs in run 3, older than the endpoints ConfigMap's run 4"));
  first.End();   // the kubelet kills it
  EXPECT_TRUE(Says(*sidecar, "/trainer-live", 200, "ok"));
  EXPECT_TRUE(TrainerBecomes("False", "Exited", "run 3: instance " + first.name() + " has ended", *sidecar));

  TrainerStandIn second;   // and starts the container again
  auto waits = std::async(std::launch::async, [&] { return PassGate(report_port, "run=4&instance=" + second.name()); });
  EXPECT_TRUE(TrainerBecomes("False", "AtGate",
                             "run 4: instance " + second.name() + " waits at the gate for this run or a later one",
                             *sidecar));
  // Every pod waits for run 4: the operator lifts the barrier.
  ASSERT_EQ(PatchConfigMap({{"fleet.paddlepaddle.org/barrier", nullptr}}), 200);
  passed = waits.get();
  ASSERT_TRUE(passed);
  EXPECT_EQ(passed->status, 200) << passed->body;
  EXPECT_EQ(Json::parse(passed->body), (Json{{"run", 4}}));
  EXPECT_TRUE(TrainerBecomes("True", "Running", "run 4: instance " + second.name() + " passed the gate", *sidecar));
  EXPECT_TRUE(Says(*sidecar, "/trainer-live", 200, "ok"));
  const Json trainer = Json::parse(sidecar->Get("/status")->body)["trainer"];
  EXPECT_EQ(trainer["run"], 4);
  EXPECT_EQ(trainer["instance"], second.name());
  EXPECT_NE(sidecar->Stderr().find("trainer instance " + second.name() + " passed the gate into run 4"),
            std::string::npos);
  ASSERT_TRUE(sidecar->Signal(SIGTERM));
  EXPECT_EQ(sidecar->WaitExit(seconds(5)), 0) << sidecar->Stderr();
}

// The gate's long polls hold a worker of the report server each: with the most that may wait
// (4), step reports are still taken at once, and one more request is refused at once.
TEST_F(InPlaceTest, FourWaitingTrainersDoNotHoldTheReports) {
  CreatePod("j-worker-0");
  CreateConfigMap(3, {{"PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:6170"}});
  auto sidecar = Start(GateArgs("worker", {"--in-place", "--report-http=127.0.0.1:0", "--main-process=off"}));
  const int report_port = LoggedNumber(*sidecar, "(report port ");
  ASSERT_GT(report_port, 0) << sidecar->Stderr();
  // Each waits for a later run than the ConfigMap's (10 + i), and is seen waiting before the next asks.
  std::vector<std::future<std::optional<HttpConnection::Response>>> waiting;
  for (int i = 1; i <= 4; ++i) {
    waiting.push_back(std::async(std::launch::async, [report_port, i] {
      HttpConnection http("http://127.0.0.1:" + std::to_string(report_port));
      return http.Send("GET", "/gate?run=" + std::to_string(10 + i) + "&instance=" + std::to_string(i) + ":1");
    }));
    EXPECT_TRUE(Says(*sidecar, "/status", 200, "\"message\": \"run " + std::to_string(10 + i) + ": instance " +
                                                   std::to_string(i) + ":1 waits at the gate"));
  }
  auto report = Post(report_port, "step=5 loss=0.5\n", "text/plain");
  ASSERT_TRUE(report);
  EXPECT_EQ(report->status, 200) << report->body;
  HttpConnection fifth("http://127.0.0.1:" + std::to_string(report_port));
  auto refused = fifth.Send("GET", "/gate?run=20&instance=5:1");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 429) << refused->body;
  for (auto& w : waiting) {
    EXPECT_EQ(w.wait_for(seconds(0)), std::future_status::timeout);   // all still waiting meanwhile
  }
  for (auto& w : waiting) {
    auto answer = w.get();   // 202 after the poll: still not open
    ASSERT_TRUE(answer);
    EXPECT_EQ(answer->status, 202) << answer->body;
  }
}

// Without --in-place nothing of it is served.
TEST_F(GatedAgentTest, WithoutInPlaceThereIsNoTrainerGate) {
  CreatePod("j-worker-0");
  CreateConfigMap(3, {{"PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:6170"}});
  auto sidecar = Start(GateArgs("worker", {"--report-http=127.0.0.1:0", "--main-process=off"}));
  EXPECT_TRUE(Says(*sidecar, "/startup", 200, "gate open"));
  const int report_port = LoggedNumber(*sidecar, "(report port ");
  ASSERT_GT(report_port, 0) << sidecar->Stderr();
  HttpConnection http("http://127.0.0.1:" + std::to_string(report_port));
  auto gate = http.Send("GET", "/gate?run=3&instance=1:1");
  ASSERT_TRUE(gate);
  EXPECT_EQ(gate->status, 404);
  EXPECT_TRUE(Says(*sidecar, "/trainer-live", 404, "no such path"));
  EXPECT_EQ(Json::parse(sidecar->Get("/status")->body).count("trainer"), 0u);
  ASSERT_TRUE(sidecar->Signal(SIGTERM));
  EXPECT_EQ(sidecar->WaitExit(seconds(5)), 0) << sidecar->Stderr();
}

TEST_F(GatedAgentTest, ATrainerIsNotReadyWhileAServerIsUnreachable) {
  // A parameter server on a port this test can take away and give back.
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length), 0);
  ASSERT_EQ(::listen(fd, 64), 0);
  const int port = ntohs(addr.sin_port);
  CreatePod("j-worker-0");
  CreateConfigMap(3, {{"PADDLE_PSERVERS_IP_PORT_LIST", "127.0.0.1:" + std::to_string(port)}});
  auto sidecar = Start(GateArgs("worker", {"--peer-check-interval=200ms", "--server-connect-timeout=300ms",
                                           "--main-process=off", "--pod-condition=false"}));
  EXPECT_TRUE(Says(*sidecar, "/startup", 200, "the server accepts connections"));
  EXPECT_TRUE(MetricBecomes(*sidecar, "fleet_training_peers_ready", "rank=\"0\"", 1));
  EXPECT_EQ(Sample(Metrics(*sidecar), "fleet_training_peers", "rank=\"0\""), 1);
  EXPECT_TRUE(Says(*sidecar, "/readyz", 200, "ok"));

  ::close(fd);  // the server goes away
  EXPECT_TRUE(Says(*sidecar, "/readyz", 503, "peers unreachable: 127.0.0.1:" + std::to_string(port)));
  EXPECT_TRUE(MetricBecomes(*sidecar, "fleet_training_peers_ready", "rank=\"0\"", 0));
  EXPECT_TRUE(Eventually([&] {
    return Sample(Metrics(*sidecar), "fleet_training_peer_wait_seconds_total", "rank=\"0\"") > 0.1;
  })) << Metrics(*sidecar);

  const int again = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const int one = 1;
  ::setsockopt(again, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  ASSERT_EQ(::bind(again, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0) << std::strerror(errno);
  ASSERT_EQ(::listen(again, 64), 0);
  EXPECT_TRUE(Says(*sidecar, "/readyz", 200, "ok"));
  EXPECT_NE(sidecar->Stderr().find("every peer accepts connections again"), std::string::npos);
  ::close(again);
  EXPECT_TRUE(Condition("j-worker-0").empty());  // --pod-condition=false
}

// HTTP: JSON objects and arrays, and text lines (ranks 8 and 9).
void PostAcceptedReports(int http_port) {
  auto r = Post(http_port, R"({"step": 1, "loss": 0.5, "samples": 32, "scalars": {"acc": 0.25}})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Json::parse(r->body)["accepted"], 1);
  r = Post(http_port, R"([{"rank": 9, "step": 5, "step_time": 0.02}, {"rank": 9, "step": 6, "step_time": 0.03}])");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  r = Post(http_port, "step=2 loss=0.25\nstep=3 loss=0.125\n", "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

// Refused: malformed, a rank of another pod, too large, not POST.
void PostRefusedReports(int http_port) {
  auto r = Post(http_port, R"({"step": "one"})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("step is not a number"), std::string::npos) << r->body;
  r = Post(http_port, "{not json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  r = Post(http_port, R"({"rank": 12, "step": 1})");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 422);
  EXPECT_NE(r->body.find("ranks 8-11"), std::string::npos) << r->body;
  r = Post(http_port, "step=1 " + std::string(70 * 1024, 'x'), "text/plain");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  HttpConnection get("http://127.0.0.1:" + std::to_string(http_port));
  auto wrong = get.Send("GET", "/v1/report");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 405);
}

// UDP and the Unix socket: the text protocol, one or more lines per datagram (ranks 10 and 11).
void SendDatagrams(int udp_port, const std::string& socket_path) {
  const int udp = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(static_cast<uint16_t>(udp_port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (const std::string& datagram : {std::string("rank=10 step=1 loss=2"), std::string("rank=10 step=2\nrank=10 step=3"),
                                      std::string("rank=10 step=x"), std::string(5000, 'y')}) {
    ::sendto(udp, datagram.data(), datagram.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
  }
  ::close(udp);
  const int unix_socket = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un un{};
  un.sun_family = AF_UNIX;
  std::strncpy(un.sun_path, socket_path.c_str(), sizeof un.sun_path - 1);
  const std::string datagram = "rank=11 step=7 loss=0.5 top1=0.75";
  ASSERT_EQ(::sendto(unix_socket, datagram.data(), datagram.size(), 0, reinterpret_cast<sockaddr*>(&un), sizeof un),
            static_cast<ssize_t>(datagram.size()))
      << std::strerror(errno);
  ::close(unix_socket);
}

// What the reports above count on /metrics: per transport, parse errors and drops.
void ExpectPushCounters(const std::string& page) {
  EXPECT_EQ(Sample(page, "fleet_sidecar_reports_total", "source=\"http\""), 5);
  EXPECT_EQ(Sample(page, "fleet_sidecar_reports_total", "source=\"udp\""), 3);
  EXPECT_EQ(Sample(page, "fleet_sidecar_reports_total", "source=\"unix\""), 1);
  EXPECT_EQ(Sample(page, "fleet_sidecar_parse_errors_total", "source=\"http\""), 2);
  EXPECT_EQ(Sample(page, "fleet_sidecar_parse_errors_total", "source=\"udp\""), 1);
  EXPECT_EQ(Sample(page, "fleet_sidecar_dropped_reports_total", "reason=\"rank\",source=\"http\""), 1);
  EXPECT_EQ(Sample(page, "fleet_sidecar_dropped_reports_total", "reason=\"too_long\",source=\"udp\""), 1);
  EXPECT_EQ(Sample(page, "fleet_training_step_duration_seconds_count", "rank=\"9\""), 2);
  EXPECT_EQ(Sample(page, "fleet_training_scalar", "rank=\"8\",name=\"acc\""), 0.25);
  if (auto check = PromtoolCheckMetrics(page)) {
    EXPECT_EQ(check->status, 0) << check->output;
  }
}

// The Python helper, as a training script uses it: 20 timed steps, then a last report until taken,
// to FLEET_METRICS_ENDPOINT as rank `rank` (a script in `dir`).
void RunPythonHelper(const TempDir& dir, const std::string& endpoint, const std::string& rank) {
  const std::string sdk = SourceDir() + "/sdk/python";
  const std::string script =
      "import sys; sys.path.insert(0, '" + sdk + "'); import fleet_metrics\n"
      "for step in range(1, 21):\n"
      "    with fleet_metrics.timed_step(step=step, samples=64) as s:\n"
      "        s.loss = 1.0 / step\n"
      "        s.scalars['lr'] = 0.1\n"
      "r = fleet_metrics.default_reporter()\n"
      "# Datagrams may be dropped on a busy machine (counted in r.errors): the last one again until taken.\n"
      "import time\n"
      "deadline = time.time() + 5\n"
      "while not r.report(step=20, loss=0.05, lr=0.1) and time.time() < deadline:\n"
      "    time.sleep(0.05)\n"
      "print('sent', r.sent, 'errors', r.errors, r.last_error)\n"
      "sys.exit(0 if r.sent >= 1 and r.sent + r.errors >= 21 else 1)\n";
  const std::string env_file = dir.Write("run-" + rank + ".sh",
                                         "FLEET_METRICS_ENDPOINT='" + endpoint + "' PADDLE_TRAINER_ID=" + rank +
                                             " exec /usr/bin/python3 -c \"$1\"\n");
  auto run = RunCommand({"/bin/sh", env_file, script});
  ASSERT_TRUE(run);
  EXPECT_EQ(run->status, 0) << endpoint << ": " << run->output;
}

TEST_F(AgentTest, PushApiOverHttpUdpAndAUnixSocket) {
  const std::string socket_path = dir_.path() + "/metrics.sock";
  auto sidecar = Start({"agent", "--job=j", "--role=worker", "--pod=j-worker-2", "--metrics-port=9", "--listen=127.0.0.1:0",
                        "--rank=8", "--ranks=4", "--report-http=127.0.0.1:0", "--report-udp=127.0.0.1:0",
                        "--report-socket=" + socket_path, "--main-process=off"});
  const int http_port = LoggedNumber(*sidecar, "(report port ");
  const int udp_port = LoggedNumber(*sidecar, "udp port ");
  ASSERT_GT(http_port, 0);
  ASSERT_GT(udp_port, 0);
  EXPECT_TRUE(Says(*sidecar, "/startup", 200, "no startup gate"));
  EXPECT_TRUE(Says(*sidecar, "/readyz", 200, "ok"));

  ASSERT_NO_FATAL_FAILURE(PostAcceptedReports(http_port));
  EXPECT_TRUE(MetricBecomes(*sidecar, "fleet_training_steps_total", "rank=\"8\"", 3));
  EXPECT_TRUE(MetricBecomes(*sidecar, "fleet_training_steps_total", "rank=\"9\"", 2));
  ASSERT_NO_FATAL_FAILURE(PostRefusedReports(http_port));
  ASSERT_NO_FATAL_FAILURE(SendDatagrams(udp_port, socket_path));
  EXPECT_TRUE(MetricBecomes(*sidecar, "fleet_training_steps_total", "rank=\"10\"", 3));
  EXPECT_TRUE(MetricBecomes(*sidecar, "fleet_training_scalar", "rank=\"11\",name=\"top1\"", 0.75));
  ExpectPushCounters(Metrics(*sidecar));

  // The Python helper over each transport.
  if (::access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3";
  const std::vector<std::pair<std::string, std::string>> transports = {
      {"udp://127.0.0.1:" + std::to_string(udp_port), "8"},
      {"unix://" + socket_path, "9"},
      {"http://127.0.0.1:" + std::to_string(http_port), "10"}};
  for (const auto& [endpoint, rank] : transports) ASSERT_NO_FATAL_FAILURE(RunPythonHelper(dir_, endpoint, rank));
  EXPECT_TRUE(MetricBecomes(*sidecar, "fleet_training_step", "rank=\"8\"", 20));
  EXPECT_TRUE(MetricBecomes(*sidecar, "fleet_training_step", "rank=\"9\"", 20));
  EXPECT_TRUE(MetricBecomes(*sidecar, "fleet_training_step", "rank=\"10\"", 20));
  EXPECT_TRUE(MetricBecomes(*sidecar, "fleet_training_loss", "rank=\"10\"", 0.05));
  EXPECT_TRUE(MetricBecomes(*sidecar, "fleet_training_scalar", "rank=\"9\",name=\"lr\"", 0.1));
}

// Issue 14 (slowloris): two connections that sent nothing held both workers of the probe port for
// ~9 s (the kubelet's startup and readiness probes failed), and one held the report port for 5 s.
TEST_F(AgentTest, ProbesAndReportsAreAnsweredBesideIdleConnections) {
  auto sidecar = Start({"agent", "--job=j", "--role=worker", "--pod=j-worker-0", "--metrics-port=9",
                        "--listen=127.0.0.1:0", "--report-http=127.0.0.1:0", "--main-process=off"});
  const int port = sidecar->WaitForPort();
  const int report_port = LoggedNumber(*sidecar, "(report port ");
  ASSERT_GT(port, 0);
  ASSERT_GT(report_port, 0);
  fleet::testing::IdleConnections idle(port, 12);
  fleet::testing::IdleConnections idle_reports(report_port, 2);
  ASSERT_EQ(idle.open() + idle_reports.open(), 14u);
  auto answered_at_once = [](int at, const std::string& path, int status) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(fleet::testing::ProbeWithin(at, path, std::chrono::seconds(1)), status) << path;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500)) << path;
  };
  for (const char* path : {"/startup", "/readyz", "/healthz", "/metrics"}) answered_at_once(port, path, 200);
  answered_at_once(report_port, "/v1/report", 405);   // a worker answered: only POST is taken there
}

TEST_F(AgentTest, ReadinessFollowsTheMainProcess) {
  const std::string marker = "fleet-agent-main-" + std::to_string(::getpid());
  auto start_main = [&] {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::setpgid(0, 0);  // the shell and its sleep: one group, killed together
      const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
      ::dup2(null, STDOUT_FILENO);
      ::dup2(null, STDERR_FILENO);
      ::execl("/bin/sh", "sh", "-c", "sleep 60; : keep", marker.c_str(), nullptr);
      ::_exit(127);
    }
    if (pid > 0) ::setpgid(pid, pid);
    return pid;
  };
  auto sidecar = Start({"agent", "--job=j", "--role=worker", "--metrics-port=9", "--listen=127.0.0.1:0",
                        "--main-process=on", "--main-process-match=" + marker});
  EXPECT_TRUE(Says(*sidecar, "/readyz", 503, "the main process is not running"));
  EXPECT_TRUE(MetricBecomes(*sidecar, "fleet_training_main_process_up", "rank=\"0\"", 0));
  pid_t main = start_main();
  EXPECT_TRUE(Says(*sidecar, "/readyz", 200, "ok"));
  EXPECT_TRUE(MetricBecomes(*sidecar, "fleet_training_main_process_up", "rank=\"0\"", 1));
  EXPECT_NE(sidecar->Stderr().find("the main process runs: pid " + std::to_string(main)), std::string::npos);
  ::kill(-main, SIGKILL);
  ::waitpid(main, nullptr, 0);
  EXPECT_TRUE(Says(*sidecar, "/readyz", 503, "the main process is not running"));
  main = start_main();   // started again (a container restart)
  EXPECT_TRUE(Says(*sidecar, "/readyz", 200, "ok"));
  EXPECT_TRUE(MetricBecomes(*sidecar, "fleet_training_restarts_total", "rank=\"0\"", 1));
  EXPECT_NE(sidecar->Stderr().find("a new main process runs"), std::string::npos);
  ::kill(-main, SIGKILL);
  ::waitpid(main, nullptr, 0);
}

TEST_F(AgentTest, BadAgentFlagsExitTwoWithOneLine) {
  const std::vector<std::string> base = {"agent", "--job=j", "--role=worker", "--metrics-port=9", "--listen=127.0.0.1:0"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"agent", "--role=worker", "--metrics-port=9"}, "missing required flag --job"},
      {{"--run=3"}, "--run is a flag of 'gate'"},
      {{"--exit-when-ready"}, "--exit-when-ready is a flag of 'gate'"},
      {{"--report-http=0.0.0.0:9"}, "loopback only"},
      {{"--report-udp=10.0.0.1:9"}, "loopback only"},
      {{"--report-socket=relative.sock"}, "absolute path"},
      {{"--pattern=loss=(\\d+)"}, "no named group"},
      {{"--stall-window=500ms"}, "at least 1s"},
      {{"--ranks=0"}, "--ranks"},
      {{"--main-process=sometimes"}, "--main-process"},
      {{"--main-process-match=("}, "--main-process-match"},
      {{"--log-file=a", "--log-file=a"}, "given twice"},
      {{"--max-line-bytes=10"}, "--max-line-bytes"},
  };
  for (const auto& [extra, fragment] : cases) {
    std::vector<std::string> args = extra.front() == "agent" ? extra : base;
    if (extra.front() != "agent") args.insert(args.end(), extra.begin(), extra.end());
    SidecarProcess sidecar(args, dir_.path());
    EXPECT_EQ(sidecar.WaitExit(seconds(5)), 2) << fragment;
    const std::string err = sidecar.Stderr();
    EXPECT_NE(err.find(fragment), std::string::npos) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
  // A push API address that is taken: exit 1, saying which.
  auto first = Start({"agent", "--job=j", "--role=worker", "--metrics-port=9", "--listen=127.0.0.1:0",
                      "--report-udp=127.0.0.1:0", "--main-process=off"});
  const int udp_port = LoggedNumber(*first, "udp port ");
  SidecarProcess second({"agent", "--job=j", "--role=worker", "--metrics-port=9", "--listen=127.0.0.1:0",
                         "--report-udp=127.0.0.1:" + std::to_string(udp_port), "--main-process=off"},
                        dir_.path());
  EXPECT_EQ(second.WaitExit(seconds(5)), 1);
  EXPECT_NE(second.Stderr().find("--report-udp: cannot bind udp 127.0.0.1:" + std::to_string(udp_port)),
            std::string::npos)
      << second.Stderr();
}

// ---- paddle.distributed.launch's logs and the PaddleNLP Trainer's line ----

// GET /status as JSON; discarded when it is not 200 or not JSON.
Json StatusJson(SidecarProcess& sidecar) {
  auto r = sidecar.Get("/status");
  if (!r || r->status != 200) return Json(Json::value_t::discarded);
  return Json::parse(r->body, nullptr, /*allow_exceptions=*/false);
}

// The /status entry of `rank` ({} when it has none).
Json RankStatus(SidecarProcess& sidecar, int rank) {
  const Json status = StatusJson(sidecar);
  if (!status.is_object()) return Json::object();
  for (const Json& r : status.value("ranks", Json::array())) {
    if (r.value("rank", -1) == rank) return r;
  }
  return Json::object();
}

std::string PaddleNlpLine(int step, double loss, double steps_per_second) {
  char line[512];
  std::snprintf(line, sizeof line,
                "[2024-05-01 10:00:00,123] [    INFO] - loss: %.8f, learning_rate: 3e-05, global_step: %d, "
                "current_memory_allocated: 12.3, interval_runtime: 4.1234, interval_samples_per_second: 31.0422, "
                "interval_steps_per_second: %.4f, ppl: 8.3, progress_or_epoch: 0.0625\n",
                loss, step, steps_per_second);
  return line;
}

// As the operator starts it for a pod running `python -m paddle.distributed.launch`: one --log-file
// per local process, named before the launcher creates them; file i is rank --rank + i.
TEST_F(AgentTest, FollowsTheLaunchersLogsAndReadsThePaddleNlpLineWithoutAPattern) {
  const std::string log = dir_.path() + "/log";
  auto sidecar = Start({"agent", "--job=j", "--role=worker", "--metrics-port=9", "--listen=127.0.0.1:0",
                        "--main-process=off", "--rank=8", "--ranks=2", "--log-file=" + log + "/workerlog.0",
                        "--log-file=" + log + "/workerlog.1"});
  ASSERT_TRUE(Eventually([&] { return StatusJson(*sidecar).is_object(); })) << sidecar->Stderr();
  EXPECT_EQ(StatusJson(*sidecar)["ranks"], Json::array());
  dir_.Write("log/workerlog.0", "LAUNCH INFO 2024-05-01 10:00:00,000 Run Pod: ...\n");
  dir_.Write("log/workerlog.1", "[2024-05-01 09:59:00,001] [    INFO] - ***** Running training *****\n"
                                "[2024-05-01 09:59:00,002] [    INFO] -   Total optimization steps = 1,000\n" +
                                    PaddleNlpLine(120, 2.5, 0.5));
  Json rank;
  ASSERT_TRUE(Eventually([&] { return (rank = RankStatus(*sidecar, 9)).value("step", 0) == 120; }))
      << StatusJson(*sidecar).dump() << sidecar->Stderr();
  EXPECT_DOUBLE_EQ(rank.value("loss", 0.0), 2.5);
  EXPECT_DOUBLE_EQ(rank.value("samplesPerSecond", 0.0), 31.0422);
  EXPECT_DOUBLE_EQ(rank.value("stepSeconds", 0.0), 2.0);   // 0.5 steps per second
  EXPECT_EQ(rank.value("totalSteps", 0), 1000);
  EXPECT_TRUE(RankStatus(*sidecar, 8).empty()) << "workerlog.0 has no step line";

  // The launcher restarts its processes with --log_overwrite: workerlog.1 starts over.
  std::ofstream(log + "/workerlog.1", std::ios::binary | std::ios::trunc) << PaddleNlpLine(10, 3.0, 1.0);
  ASSERT_TRUE(Eventually([&] { return (rank = RankStatus(*sidecar, 9)).value("step", 0) == 10; }))
      << StatusJson(*sidecar).dump() << sidecar->Stderr();
  EXPECT_DOUBLE_EQ(rank.value("stepSeconds", 0.0), 1.0);
  EXPECT_EQ(MetricValue(Metrics(*sidecar), "fleet_training_restarts_total"), 1) << "the step went back";
  Append(log + "/workerlog.0", PaddleNlpLine(11, 3.0, 1.0));
  EXPECT_TRUE(Eventually([&] { return RankStatus(*sidecar, 8).value("step", 0) == 11; }))
      << StatusJson(*sidecar).dump();
}

// ---- hostile input (issue 25) ----

// A trainer's "step 9223372036854775807/1000" became the pod's own step and count (9.2e18) in
// /status and its metrics (the operator bounded it, the sidecar did not): a step past its own
// total, or past 2^53, is a malformed line, and the pod's count goes on from the steps before it.
TEST_F(AgentTest, AStepPastItsTotalOrTheBoundIsNotThePodsProgress) {
  const std::string log = dir_.path() + "/train.log";
  auto sidecar = Start({"agent", "--job=j", "--role=worker", "--metrics-port=9", "--listen=127.0.0.1:0",
                        "--main-process=off", "--rank=0", "--log-file=" + log});
  ASSERT_TRUE(Eventually([&] { return StatusJson(*sidecar).is_object(); })) << sidecar->Stderr();
  dir_.Write("train.log", "step 5/1000, loss: 0.5\nstep 9223372036854775807/1000, loss: 0.5\n"
                          "step 2000/1000, loss: 0.5\nstep 9007199254740993, loss: 0.5\nstep 6/1000, loss: 0.4\n");
  Json rank;
  ASSERT_TRUE(Eventually([&] { return (rank = RankStatus(*sidecar, 0)).value("step", 0.0) == 6; }))
      << StatusJson(*sidecar).dump() << sidecar->Stderr();
  EXPECT_EQ(rank.value("steps", 0.0), 2) << rank.dump();
  EXPECT_EQ(rank.value("totalSteps", 0.0), 1000);
  EXPECT_TRUE(MetricBecomes(*sidecar, "fleet_sidecar_parse_errors_total", "source=\"log\"", 3));
  const std::string page = Metrics(*sidecar);
  EXPECT_EQ(Sample(page, "fleet_training_steps_total", "rank=\"0\""), 2);
  EXPECT_EQ(Sample(page, "fleet_training_step", "rank=\"0\""), 6);
  EXPECT_EQ(MetricValue(page, "fleet_training_restarts_total"), 0) << "no step went back";
}

// A trainer's command line is any bytes: one that is not UTF-8, and one whose 200-byte cut falls
// inside a character (a Chinese path), still give a /status answer, with the bytes replaced and
// the character left out whole.
TEST_F(AgentTest, StatusAnswersForAMainProcessWhoseCommandLineIsNotUtf8) {
  const std::string marker = "fleet-agent-utf8-" + std::to_string(::getpid());
  const std::string han = "\xe8\xae\xad";   // one character, three bytes
  const std::string script = "sleep 60; : keep";
  std::string arg = "\xff";                 // never UTF-8
  std::string before = "sh -c " + script + " " + marker + " " + arg;   // as /status shows argv
  while ((MainProcessWatcher::kCommandBytes - before.size()) % 3 != 1) {
    arg += "a";
    before += "a";
  }
  for (int i = 0; i < 100; ++i) arg += han;
  const pid_t main = ::fork();
  if (main == 0) {
    ::setpgid(0, 0);
    const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    ::dup2(null, STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
    ::execl("/bin/sh", "sh", "-c", script.c_str(), marker.c_str(), arg.c_str(), nullptr);
    ::_exit(127);
  }
  ASSERT_GT(main, 0);
  ::setpgid(main, main);
  std::string expected = before;
  expected.replace(expected.find('\xff'), 1, "\xef\xbf\xbd");   // U+FFFD
  for (size_t i = 0; i < (MainProcessWatcher::kCommandBytes - before.size()) / 3; ++i) expected += han;
  expected += "...";

  auto sidecar = Start({"agent", "--job=j", "--role=worker", "--metrics-port=9", "--listen=127.0.0.1:0",
                        "--main-process=on", "--main-process-match=" + marker});
  std::string last;
  EXPECT_TRUE(Eventually([&] {
    auto r = sidecar->Get("/status");
    last = r ? std::to_string(r->status) + " " + r->body : "(no answer)";
    const Json status = StatusJson(*sidecar);
    return status.is_object() && status["mainProcess"].value("command", "") == expected;
  })) << last;
  ::kill(-main, SIGKILL);
  ::waitpid(main, nullptr, 0);
}

// The operator shares the pod's process namespace: a trainer running as the sidecar's UID must not
// reach the sidecar's files (its token) through /proc/<pid>/root, nor its environment.
TEST_F(AgentTest, ProcessesOfItsUidCannotOpenItsRootOrEnvironment) {
  const std::string setpriv = FindTool("setpriv");
  if (setpriv.empty()) GTEST_SKIP() << "setpriv (util-linux) is not installed";
  if (::geteuid() != 0) GTEST_SKIP() << "running the sidecar and a reader as UID 65532 needs root";
  const std::vector<std::string> as_65532 = {setpriv, "--reuid=65532", "--regid=65532", "--clear-groups"};
  auto as_reader = [&](const std::string& script) {
    std::vector<std::string> argv = as_65532;
    argv.insert(argv.end(), {"/bin/sh", "-c", script});
    return RunCommand(argv);
  };
  // The control: a process of that UID opens another's /proc/<pid>/root and environ (a dumpable one).
  auto control = as_reader("sleep 30 & ls /proc/$!/root/ >/dev/null && cat /proc/$!/environ >/dev/null && "
                           "echo readable; kill $!");
  ASSERT_TRUE(control);
  ASSERT_EQ(control->output, "readable\n") << "the reader should see a dumpable process of its UID";

  SidecarProcess sidecar({"agent", "--job=j", "--role=worker", "--metrics-port=9", "--listen=127.0.0.1:0",
                          "--main-process=off"},
                         dir_.path(), as_65532);
  ASSERT_GT(sidecar.WaitForPort(), 0) << sidecar.Stderr();
  const std::string proc = "/proc/" + std::to_string(sidecar.pid());
  const std::string status = kube::testing::ReadFile(proc + "/status");
  EXPECT_NE(status.find("\nUid:\t65532\t65532\t65532\t65532\n"), std::string::npos) << status;
  for (const std::string& open : {"ls " + proc + "/root/", "cat " + proc + "/environ"}) {
    auto read = as_reader(open + " 2>&1 >/dev/null");
    ASSERT_TRUE(read);
    EXPECT_NE(read->status, 0) << open;
    EXPECT_NE(read->output.find("Permission denied"), std::string::npos) << open << ": " << read->output;
  }
  EXPECT_TRUE(sidecar.Running()) << sidecar.Stderr();
}

}  // namespace
}  // namespace fleet::sidecar::testing
