// The Gate's state, messages, log lines and routes in-process, fed through its Apply seam (its
// threads are not started: the API client is never used).
#include "fleet/sidecar/gate.h"

#include <gtest/gtest.h>
#include <prometheus/registry.h>

#include <mutex>

#include "fake_apiserver_fixture.h"

namespace fleet::sidecar {
namespace {

using Json = nlohmann::json;
using kube::testing::HttpConnection;

Json ConfigMap(const std::string& run, const Json& data) {
  return {{"metadata", {{"name", "j-endpoints"}, {"annotations", {{kRunAnnotation, run}}}}}, {"data", data}};
}

class GateTest : public ::testing::Test {
 protected:
  std::unique_ptr<Gate> MakeGate(const std::string& role) {
    kube::ClusterConfig cluster;
    cluster.server = "http://127.0.0.1:1";  // never called: the gate is not started
    auto client = kube::Client::Create(cluster);
    EXPECT_TRUE(client.ok());
    GateConfig config;
    config.target = GateTarget{"default", "j-endpoints", role, 3, ""};
    config.job = "j";
    config.pod = "j-" + role + "-0";
    Logger log("fleet-sidecar[default/" + config.pod + "]", [this](const std::string& line) {
      std::lock_guard<std::mutex> lock(mu_);
      lines_.push_back(line);
    });
    return std::make_unique<Gate>(*client, config, log);
  }

  std::vector<std::string> Lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }

  std::mutex mu_;
  std::vector<std::string> lines_;
};

TEST_F(GateTest, MessagesAndOneLogLinePerStateChange) {
  auto gate = MakeGate("worker");
  int opened = 0;
  gate->OnOpen([&] { ++opened; });
  EXPECT_FALSE(gate->open());
  EXPECT_EQ(gate->Message(), "waiting for the endpoints ConfigMap default/j-endpoints of run 3: reading it from the API server");

  gate->Apply(nullptr);
  gate->Apply(nullptr);  // no change: no line
  EXPECT_EQ(gate->Message(), "waiting for the endpoints ConfigMap default/j-endpoints of run 3 (it does not exist yet)");
  Json older = ConfigMap("2", Json::object());
  gate->Apply(&older);
  EXPECT_EQ(gate->Message(), "waiting for the endpoints ConfigMap default/j-endpoints of run 3 (it holds run 2)");

  std::string servers;
  for (int i = 0; i < 7; ++i) servers += (i ? "," : "") + std::string("10.0.0.") + std::to_string(i + 1) + ":6170";
  Json ps = ConfigMap("3", {{"PADDLE_PSERVERS_IP_PORT_LIST", servers}});
  gate->Apply(&ps);
  EXPECT_FALSE(gate->open());
  const std::string message = gate->Message();
  EXPECT_EQ(message.rfind("waiting for 7 of 7 servers: 10.0.0.1:6170 (not tried yet), ", 0), 0u) << message;
  EXPECT_NE(message.find(", and 2 more to accept connections (from PADDLE_PSERVERS_IP_PORT_LIST)"), std::string::npos)
      << message;
  EXPECT_EQ(gate->HealthProblem(), "");

  Json collective = ConfigMap("3", {{"PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:6170,10.0.0.2:6170"}});
  gate->Apply(&collective);
  EXPECT_TRUE(gate->open());
  EXPECT_EQ(gate->Message(), "gate open: the endpoint lists of run 3 are published");
  gate->Apply(nullptr);  // latched: a deleted ConfigMap does not close it again
  EXPECT_TRUE(gate->open());
  EXPECT_EQ(opened, 1);

  const std::vector<std::string> lines = Lines();
  // absent, other run, open (servers not yet tried are not worth a line).
  ASSERT_EQ(lines.size(), 3u) << ::testing::PrintToString(lines);
  EXPECT_NE(lines[0].find(" fleet-sidecar[default/j-worker-0]: waiting for the endpoints ConfigMap default/j-endpoints "
                          "of run 3 (it does not exist yet)\n"),
            std::string::npos)
      << lines[0];
  EXPECT_EQ(lines[0][4], '-');   // 2025-...
  EXPECT_EQ(lines[0][10], 'T');
  EXPECT_NE(lines[1].find("(it holds run 2)"), std::string::npos);
  EXPECT_NE(lines[2].find("gate open"), std::string::npos);
}

// --in-place: the ConfigMap's run and barrier reach the agent whenever they change, also once the
// gate is open (an in-place restart moves the ConfigMap to the next run under the open gate).
TEST_F(GateTest, ItTellsTheRunAnnotationsOnEveryChangeAlsoOnceOpen) {
  auto gate = MakeGate("worker");
  std::vector<RunAnnotations> told;
  gate->OnRunAnnotations([&](const RunAnnotations& a) { told.push_back(a); });
  gate->Apply(nullptr);
  Json published = ConfigMap("3", {{"PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:6170"}});
  gate->Apply(&published);
  gate->Apply(&published);   // no change: not told again
  EXPECT_TRUE(gate->open());
  Json restarted = published;
  restarted["metadata"]["annotations"][kRunAnnotation] = "4";
  restarted["metadata"]["annotations"][api::kBarrierAnnotation] = "4";
  gate->Apply(&restarted);
  restarted["metadata"]["annotations"].erase(api::kBarrierAnnotation);
  gate->Apply(&restarted);
  EXPECT_EQ(gate->Message(), "gate open: the endpoint lists of run 3 are published");
  const std::vector<RunAnnotations> expected = {{std::nullopt, std::nullopt}, {3, std::nullopt}, {4, 4}, {4, std::nullopt}};
  EXPECT_EQ(told, expected);
}

TEST_F(GateTest, MalformedSaysWhy) {
  auto gate = MakeGate("worker");
  Json bad = ConfigMap("3", {{"PADDLE_PSERVERS_IP_PORT_LIST", "10.0.0.1"}});
  gate->Apply(&bad);
  EXPECT_FALSE(gate->open());
  EXPECT_EQ(gate->Message(),
            "waiting for the endpoints ConfigMap default/j-endpoints of run 3 to be fixed: it is malformed: data key "
            "PADDLE_PSERVERS_IP_PORT_LIST: endpoint '10.0.0.1' has no port (expected host:port)");
}

TEST_F(GateTest, RoutesServeTheState) {
  auto gate = MakeGate("server");
  auto server = httpd::HttpServer::Start("127.0.0.1:0", gate->Routes());
  ASSERT_TRUE(server.ok()) << server.error();
  HttpConnection http("http://127.0.0.1:" + std::to_string((*server)->port()));

  auto r = http.Send("GET", "/startup");
  ASSERT_TRUE(r) << http.error();
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->body, gate->Message() + "\n");
  EXPECT_EQ(http.Send("GET", "/readyz")->status, 503);
  EXPECT_EQ(http.Send("GET", "/healthz")->status, 200);
  r = http.Send("GET", "/metrics");
  ASSERT_TRUE(r);
  EXPECT_NE(r->body.find("fleet_sidecar_gate_open{job=\"j\",namespace=\"default\",pod=\"j-server-0\",role=\"server\"} 0"),
            std::string::npos)
      << r->body;
  for (const char* name : {"fleet_sidecar_gate_wait_seconds", "fleet_sidecar_peer_wait_seconds",
                           "fleet_sidecar_watch_restarts_total", "fleet_sidecar_api_errors_total",
                           "fleet_sidecar_servers", "fleet_sidecar_servers_reached",
                           "fleet_sidecar_server_probe_failures_total"}) {
    EXPECT_NE(r->body.find(std::string("# TYPE ") + name + " "), std::string::npos) << name;
  }

  Json published = ConfigMap("3", {{"PADDLE_PSERVERS_IP_PORT_LIST", "10.0.0.1:6170"}});  // a server waits for no one
  gate->Apply(&published);
  r = http.Send("GET", "/startup");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "gate open: the endpoint lists of run 3 are published\n");
  EXPECT_EQ(http.Send("GET", "/readyz")->status, 200);
  r = http.Send("GET", "/metrics");
  ASSERT_TRUE(r);
  EXPECT_NE(r->body.find("role=\"server\"} 1"), std::string::npos);
}

}  // namespace
}  // namespace fleet::sidecar
