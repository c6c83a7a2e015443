// The startup gate end to end: the real fleet-sidecar binary against the fake API server, observed
// through its HTTP endpoints, its exit status and the requests it made.
#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "fake_apiserver_fixture.h"
#include "sidecar_process.h"

namespace fleet::sidecar::testing {
namespace {

using kube::testing::FakeApiServer;
using kube::testing::HttpConnection;
using kube::testing::TempDir;
using Json = nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr const char* kConfigMap = "j-endpoints";
constexpr const char* kConfigMapsPath = "/api/v1/namespaces/default/configmaps";

class SidecarGateTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.ok()) << fake_.error();
    kubeconfig_ = dir_.Write("kubeconfig", "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
                                           "clusters: [{name: fake, cluster: {server: '" + fake_.url() + "'}}]\n"
                                           "contexts: [{name: fake, context: {cluster: fake, user: sidecar}}]\n"
                                           "users: [{name: sidecar, user: {token: sidecar-token}}]\n");
  }

  // The args the pod builder emits for pod j-<role>-0 of run `run`, plus the test's own.
  std::vector<std::string> Args(const std::string& role, int run, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> args = {"gate", "--namespace=default", "--job=j", "--pod=j-" + role + "-0",
                                     "--role=" + role, "--run=" + std::to_string(run),
                                     std::string("--config-map=") + kConfigMap, "--metrics-port=9090",
                                     "--kubeconfig=" + kubeconfig_, "--listen=127.0.0.1:0"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }

  std::unique_ptr<SidecarProcess> Start(const std::string& role, int run, const std::vector<std::string>& extra = {}) {
    auto sidecar = std::make_unique<SidecarProcess>(Args(role, run, extra), dir_.path());
    EXPECT_TRUE(sidecar->started());
    EXPECT_GT(sidecar->WaitForPort(), 0) << sidecar->Stderr();
    return sidecar;
  }

  // Requests to the fake's Kubernetes API (not its control API).
  std::optional<HttpConnection::Response> Api(const std::string& method, const std::string& path, const Json& body,
                                              const std::string& content_type = "application/json") {
    HttpConnection http(fake_.url());
    return http.Send(method, path, body.dump(), {{"Content-Type", content_type}});
  }

  static Json ConfigMap(const std::string& run, const Json& data) {
    Json cm = {{"apiVersion", "v1"},
               {"kind", "ConfigMap"},
               {"metadata", {{"name", kConfigMap}, {"annotations", {{"fleet.paddlepaddle.org/run", run}}}}}};
    if (!data.is_null()) cm["data"] = data;
    return cm;
  }

  void CreateConfigMap(const std::string& run, const Json& data) {
    auto r = Api("POST", kConfigMapsPath, ConfigMap(run, data));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 201) << r->body;
  }

  // A JSON merge patch of the ConfigMap; the HTTP status (0 on a transport failure).
  int PatchConfigMap(const Json& patch) {
    auto r = Api("PATCH", std::string(kConfigMapsPath) + "/" + kConfigMap, patch, "application/merge-patch+json");
    return r ? r->status : 0;
  }

  int OpenWatches() {
    Json state = fake_.Control("state", Json::object(), "GET");
    return state.is_object() ? state.value("watches", 0) : 0;
  }

  // Waits until /startup answers `status` with a body containing `fragment`.
  ::testing::AssertionResult StartupSays(SidecarProcess& sidecar, int status, const std::string& fragment,
                                         milliseconds timeout = seconds(10)) {
    std::string last = "(no answer)";
    const bool ok = Eventually(
        [&] {
          auto r = sidecar.Get("/startup");
          if (!r) return false;
          last = std::to_string(r->status) + " " + r->body;
          return r->status == status && r->body.find(fragment) != std::string::npos;
        },
        timeout);
    if (ok) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << "/startup never answered " << status << " with '" << fragment
                                         << "'; last: " << last << "\nsidecar log:\n" << sidecar.Stderr();
  }

  int Status(SidecarProcess& sidecar, const std::string& path) {
    auto r = sidecar.Get(path);
    return r ? r->status : 0;
  }

  double Metric(SidecarProcess& sidecar, const std::string& name) {
    auto r = sidecar.Get("/metrics");
    return r && r->status == 200 ? MetricValue(r->body, name) : std::nan("");
  }

  FakeApiServer fake_;
  TempDir dir_;
  std::string kubeconfig_;
};

TEST_F(SidecarGateTest, StaysClosedWithoutTheConfigMapAndOnlyWatchesIt) {
  auto sidecar = Start("worker", 3);
  ASSERT_TRUE(Eventually([&] { return OpenWatches() >= 1; })) << sidecar->Stderr();
  EXPECT_TRUE(StartupSays(*sidecar, 503, "waiting for the endpoints ConfigMap default/j-endpoints of run 3 "
                                         "(it does not exist yet)"));
  EXPECT_EQ(Status(*sidecar, "/readyz"), 503);
  EXPECT_EQ(Status(*sidecar, "/healthz"), 200);
  auto metrics = sidecar->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("fleet_sidecar_gate_open{job=\"j\",namespace=\"default\",pod=\"j-worker-0\","
                               "role=\"worker\"} 0"),
            std::string::npos)
      << metrics->body;
  EXPECT_GT(MetricValue(metrics->body, "fleet_sidecar_gate_wait_seconds"), 0.0);
  EXPECT_TRUE(sidecar->Running());

  // Least privilege: lists and watches of that one ConfigMap, nothing else. (The fake logs a
  // watch when it ends: end one, and let the sidecar list and watch again.)
  fake_.Control("faults", {{"dropWatches", true}});
  ASSERT_TRUE(Eventually([&] { return OpenWatches() >= 1; })) << sidecar->Stderr();
  const Json requests = fake_.Requests();
  ASSERT_GE(requests.size(), 3u) << requests.dump();
  EXPECT_TRUE(requests[1].value("watch", false)) << requests.dump();
  for (const Json& r : requests) {
    EXPECT_EQ(r.value("method", ""), "GET") << r.dump();
    EXPECT_EQ(r.value("path", ""), kConfigMapsPath) << r.dump();
    const std::string query = r.value("query", "");
    EXPECT_NE(query.find("fieldSelector=metadata.name"), std::string::npos) << r.dump();
    EXPECT_NE(query.find(kConfigMap), std::string::npos) << r.dump();
  }
}

TEST_F(SidecarGateTest, AnOlderRunsConfigMapKeepsItClosedUntilUpdatedToThisRun) {
  CreateConfigMap("2", {{"PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:6170,10.0.0.2:6170"}});
  auto sidecar = Start("worker", 3);
  ASSERT_TRUE(Eventually([&] { return OpenWatches() >= 1; })) << sidecar->Stderr();
  EXPECT_TRUE(StartupSays(*sidecar, 503, "of run 3 (it holds run 2)"));
  EXPECT_EQ(Status(*sidecar, "/readyz"), 503);
  EXPECT_EQ(Metric(*sidecar, "fleet_sidecar_gate_open"), 0.0);

  ASSERT_EQ(PatchConfigMap({{"metadata", {{"annotations", {{"fleet.paddlepaddle.org/run", "3"}}}}}}), 200);
  EXPECT_TRUE(StartupSays(*sidecar, 200, "gate open"));
  EXPECT_EQ(Status(*sidecar, "/readyz"), 200);
  EXPECT_EQ(Status(*sidecar, "/healthz"), 200);
  EXPECT_EQ(Metric(*sidecar, "fleet_sidecar_gate_open"), 1.0);
  // The open gate gives its watch back: nothing depends on the API any more.
  EXPECT_TRUE(Eventually([&] { return OpenWatches() == 0; })) << sidecar->Stderr();
  EXPECT_TRUE(sidecar->Running());  // a native sidecar keeps serving its probes and metrics
  const std::string log = sidecar->Stderr();
  EXPECT_NE(log.find("(it holds run 2)"), std::string::npos) << log;
  EXPECT_NE(log.find("gate open"), std::string::npos) << log;
}

TEST_F(SidecarGateTest, OpensWhenTheConfigMapAppears) {
  auto sidecar = Start("worker", 0);
  ASSERT_TRUE(Eventually([&] { return OpenWatches() >= 1; })) << sidecar->Stderr();
  EXPECT_TRUE(StartupSays(*sidecar, 503, "does not exist yet"));
  CreateConfigMap("0", Json());  // a one-pod job: nothing to share, no data
  EXPECT_TRUE(StartupSays(*sidecar, 200, "gate open: the endpoint lists of run 0 are published"));
  EXPECT_EQ(Status(*sidecar, "/readyz"), 200);
}

TEST_F(SidecarGateTest, ExitWhenReadyExitsZeroOnceOpen) {
  {
    auto sidecar = Start("worker", 1, {"--exit-when-ready"});
    ASSERT_TRUE(Eventually([&] { return OpenWatches() >= 1; })) << sidecar->Stderr();
    EXPECT_TRUE(sidecar->Running());
    CreateConfigMap("1", {{"PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:6170,10.0.0.2:6170"}});
    EXPECT_EQ(sidecar->WaitExit(seconds(5)), 0) << sidecar->Stderr();
    EXPECT_NE(sidecar->Stderr().find("--exit-when-ready"), std::string::npos);
  }
  // Already published when it starts: it exits at once.
  auto sidecar = std::make_unique<SidecarProcess>(Args("server", 1, {"--exit-when-ready"}), dir_.path());
  EXPECT_EQ(sidecar->WaitExit(seconds(5)), 0) << sidecar->Stderr();
}

TEST_F(SidecarGateTest, ParameterServerTrainerWaitsUntilEveryServerAccepts) {
  TcpPort up, down;
  ASSERT_GT(up.port(), 0);
  ASSERT_GT(down.port(), 0);
  ASSERT_TRUE(up.Listen());
  const std::string up_endpoint = "127.0.0.1:" + std::to_string(up.port());
  const std::string down_endpoint = "localhost:" + std::to_string(down.port());   // a name: resolved
  CreateConfigMap("3", {{"PADDLE_PSERVERS_IP_PORT_LIST", up_endpoint + "," + down_endpoint},
                        {"PADDLE_TRAINER_ENDPOINTS", "10.0.0.3:6170"}});
  auto trainer = Start("worker", 3, {"--server-connect-timeout=500ms", "--server-retry-max=200ms"});
  auto server = Start("server", 3);

  EXPECT_TRUE(StartupSays(*server, 200, "gate open"));  // servers wait for no one
  EXPECT_TRUE(StartupSays(*trainer, 503, "waiting for server " + down_endpoint));
  EXPECT_EQ(Status(*trainer, "/readyz"), 503);
  EXPECT_EQ(Metric(*trainer, "fleet_sidecar_servers"), 2.0);
  EXPECT_EQ(Metric(*trainer, "fleet_sidecar_servers_reached"), 1.0);
  EXPECT_GE(Metric(*trainer, "fleet_sidecar_server_probe_failures_total"), 1.0);

  ASSERT_TRUE(down.Listen());
  EXPECT_TRUE(StartupSays(*trainer, 200, "all 2 servers accept connections"));
  EXPECT_EQ(Metric(*trainer, "fleet_sidecar_servers_reached"), 2.0);
  EXPECT_GT(Metric(*trainer, "fleet_sidecar_peer_wait_seconds"), 0.0);
  EXPECT_NE(trainer->Stderr().find("server " + down_endpoint + " accepts connections"), std::string::npos);
}

TEST_F(SidecarGateTest, TrainersUseTheServerListKeyedForTheirRole) {
  TcpPort up, down;
  ASSERT_TRUE(up.Listen());
  const std::string up_endpoint = "127.0.0.1:" + std::to_string(up.port());
  const std::string down_endpoint = "127.0.0.1:" + std::to_string(down.port());
  CreateConfigMap("5", {{"PADDLE_PSERVERS_IP_PORT_LIST", up_endpoint},
                        {"PADDLE_PSERVERS_IP_PORT_LIST.heter1", down_endpoint}});
  auto worker = Start("worker", 5, {"--server-retry-max=200ms"});
  auto heter = Start("heter1", 5, {"--server-retry-max=200ms"});
  EXPECT_TRUE(StartupSays(*worker, 200, "and the server accepts connections"));
  EXPECT_TRUE(StartupSays(*heter, 503, "waiting for server " + down_endpoint));
  EXPECT_TRUE(StartupSays(*heter, 503, "PADDLE_PSERVERS_IP_PORT_LIST.heter1"));
  ASSERT_TRUE(down.Listen());
  EXPECT_TRUE(StartupSays(*heter, 200, "gate open"));
}

TEST_F(SidecarGateTest, BadFlagsExitTwoBeforeDoingAnything) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "no command given"},
      {{"serve"}, "unknown command \"serve\""},
      {{"gate", "--namespace=default", "--job=j", "--pod=p", "--role=worker", "--config-map=c", "--metrics-port=1",
        "--listen=127.0.0.1:0", "--kubeconfig=" + kubeconfig_},
       "--run"},
      {Args("worker", 3, {"--run=4"}), "--run"},
      {Args("worker", 3, {"--metrics-port=x"}), "--metrics-port"},
      {Args("worker", 3, {"--frobnicate"}), "--frobnicate"},
      {Args("worker", 3, {"--server-connect-timeout=soon"}), "--server-connect-timeout"},
  };
  for (const auto& [args, fragment] : cases) {
    SidecarProcess sidecar(args, dir_.path());
    EXPECT_EQ(sidecar.WaitExit(seconds(5)), 2) << fragment;
    const std::string err = sidecar.Stderr();
    EXPECT_NE(err.find(fragment), std::string::npos) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;   // one line
    EXPECT_EQ(err.find("serving"), std::string::npos) << err;        // never listened
  }
  EXPECT_EQ(fake_.Requests().size(), 0u);  // and never called the API

  SidecarProcess help({"--help"}, dir_.path());
  EXPECT_EQ(help.WaitExit(seconds(5)), 0);
  EXPECT_NE(help.Stdout().find("fleet-sidecar gate --namespace=NS"), std::string::npos);
}

TEST_F(SidecarGateTest, SigtermAndSigintStopItPromptlyWithStatusZero) {
  TcpPort down;  // a trainer busy probing a server that refuses
  CreateConfigMap("3", {{"PADDLE_PSERVERS_IP_PORT_LIST", "127.0.0.1:" + std::to_string(down.port())}});
  auto trainer = Start("worker", 3);
  auto waiting = Start("server", 4);  // busy watching for its run
  EXPECT_TRUE(StartupSays(*trainer, 503, "waiting for server"));
  EXPECT_TRUE(StartupSays(*waiting, 503, "(it holds run 3)"));
  ASSERT_TRUE(Eventually([&] { return OpenWatches() >= 2; }));

  for (auto [sidecar, signal] : {std::pair<SidecarProcess*, int>{trainer.get(), SIGTERM}, {waiting.get(), SIGINT}}) {
    const auto sent = std::chrono::steady_clock::now();
    ASSERT_TRUE(sidecar->Signal(signal));
    EXPECT_EQ(sidecar->WaitExit(seconds(3)), 0) << sidecar->Stderr();
    EXPECT_LT(std::chrono::steady_clock::now() - sent, seconds(3));
    EXPECT_NE(sidecar->Stderr().find(signal == SIGTERM ? "received SIGTERM" : "received SIGINT"), std::string::npos);
  }
}

TEST_F(SidecarGateTest, MalformedConfigMapsKeepItWaitingWithoutCrashing) {
  CreateConfigMap("3", {{"PADDLE_PSERVERS_IP_PORT_LIST", "garbage::,,"}});
  auto sidecar = Start("worker", 3, {"--server-retry-max=200ms"});
  EXPECT_TRUE(StartupSays(*sidecar, 503, "to be fixed: it is malformed: data key PADDLE_PSERVERS_IP_PORT_LIST"));

  // More garbage, as far as the fake lets it be stored (a real API server refuses non-string data).
  const std::vector<std::pair<Json, std::string>> garbage = {
      {{{"data", {{"PADDLE_PSERVERS_IP_PORT_LIST", "10.0.0.1"}}}}, "has no port"},
      {{{"data", {{"PADDLE_PSERVERS_IP_PORT_LIST", nullptr}, {"PADDLE_TRAINER_ENDPOINTS", "a:1,a:1"}}}}, "twice"},
      {{{"data", {{"PADDLE_TRAINER_ENDPOINTS", 42}}}}, "is not a string"},
      {{{"data", "not a map"}}, "data is not a map"},
      {{{"data", nullptr}, {"metadata", {{"annotations", {{"fleet.paddlepaddle.org/run", "three"}}}}}},
       "is not a run number"},
  };
  int stored = 0;
  for (const auto& [patch, fragment] : garbage) {
    if (PatchConfigMap(patch) != 200) continue;  // refused by the fake: nothing to see
    ++stored;
    EXPECT_TRUE(StartupSays(*sidecar, 503, fragment));
    EXPECT_TRUE(sidecar->Running());
    EXPECT_EQ(Status(*sidecar, "/healthz"), 200);
  }

  EXPECT_GE(stored, 3);  // at least the string garbage and the run annotation

  TcpPort server;
  ASSERT_TRUE(server.Listen());
  ASSERT_EQ(PatchConfigMap({{"data", {{"PADDLE_PSERVERS_IP_PORT_LIST", "127.0.0.1:" + std::to_string(server.port())},
                                      {"PADDLE_TRAINER_ENDPOINTS", "10.0.0.3:6170"}}},
                            {"metadata", {{"annotations", {{"fleet.paddlepaddle.org/run", "3"}}}}}}),
            200);
  EXPECT_TRUE(StartupSays(*sidecar, 200, "gate open"));
  EXPECT_NE(sidecar->Stderr().find("malformed"), std::string::npos);
}

TEST_F(SidecarGateTest, TheWatchSurvivesDroppedAndExpiredWatches) {
  auto sidecar = Start("worker", 3, {"--api-retry-max=300ms"});
  ASSERT_TRUE(Eventually([&] { return OpenWatches() >= 1; })) << sidecar->Stderr();
  EXPECT_TRUE(StartupSays(*sidecar, 503, "does not exist yet"));

  // Dropped connections: the fake forgets its watchers at once, so a watch seen afterwards is new.
  for (int i = 0; i < 2; ++i) {
    fake_.Control("faults", {{"dropWatches", true}});
    ASSERT_TRUE(Eventually([&] { return OpenWatches() >= 1; })) << sidecar->Stderr();
  }
  EXPECT_GE(Metric(*sidecar, "fleet_sidecar_watch_restarts_total"), 2.0);
  // An expired resourceVersion (410): it lists again.
  fake_.Control("faults", {{"expireWatches", true}});
  ASSERT_TRUE(Eventually([&] { return OpenWatches() >= 1; })) << sidecar->Stderr();

  CreateConfigMap("3", {{"PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:6170,10.0.0.2:6170"}});
  EXPECT_TRUE(StartupSays(*sidecar, 200, "gate open"));
  EXPECT_GE(Metric(*sidecar, "fleet_sidecar_watch_restarts_total"), 3.0);
  EXPECT_TRUE(sidecar->Running());
}

TEST_F(SidecarGateTest, ApiErrorsAreReportedCountedAndRetried) {
  fake_.Control("faults", {{"failNext", 3}, {"code", 503}, {"match", std::string("GET ") + kConfigMapsPath}});
  auto sidecar = Start("worker", 3, {"--api-retry-max=300ms"});
  EXPECT_TRUE(StartupSays(*sidecar, 503, "does not exist yet"));  // after the failures, with backoff
  EXPECT_GE(Metric(*sidecar, "fleet_sidecar_api_errors_total"), 3.0);
  EXPECT_NE(sidecar->Stderr().find("cannot read it from the API server"), std::string::npos) << sidecar->Stderr();

  // Failing watches while it has a view: it keeps it, says so, and recovers.
  fake_.Control("faults", {{"failNext", 2}, {"code", 500}, {"match", std::string("WATCH ") + kConfigMapsPath}});
  fake_.Control("faults", {{"dropWatches", true}});
  ASSERT_TRUE(Eventually([&] { return OpenWatches() >= 1; }, seconds(15))) << sidecar->Stderr();
  CreateConfigMap("3", Json());
  EXPECT_TRUE(StartupSays(*sidecar, 200, "gate open"));
  EXPECT_GE(Metric(*sidecar, "fleet_sidecar_api_errors_total"), 5.0);
}

}  // namespace
}  // namespace fleet::sidecar::testing
