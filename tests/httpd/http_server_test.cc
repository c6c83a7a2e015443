// HttpServer through real sockets: routing, methods, body limits, health checks, /metrics.
#include "fleet/httpd/http_server.h"

#include <gtest/gtest.h>
#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>

#include "fake_apiserver_fixture.h"
#include "idle_connections.h"
#include "thread_stack.h"

namespace fleet::httpd {
namespace {

using kube::testing::HttpConnection;

std::unique_ptr<HttpServer> MustStart(std::vector<Route> routes, HttpServerOptions options = {}) {
  auto server = HttpServer::Start("127.0.0.1:0", std::move(routes), options);
  EXPECT_TRUE(server.ok()) << server.error();
  return server.ok() ? std::move(server.value()) : nullptr;
}

std::string Url(const HttpServer& server) { return "http://127.0.0.1:" + std::to_string(server.port()); }

TEST(HttpServerTest, ServesRoutesOnAnEphemeralPort) {
  auto server = MustStart({{"/hello", {}, [](const Request& r) { return Response::Text(200, "hi " + r.query); }}});
  ASSERT_TRUE(server);
  EXPECT_GT(server->port(), 0);
  HttpConnection http(Url(*server));
  auto r = http.Send("GET", "/hello?x=1");
  ASSERT_TRUE(r) << http.error();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "hi x=1");
  // Keep-alive: the same connection serves a second request.
  r = http.Send("GET", "/hello");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->body, "hi ");
}

TEST(HttpServerTest, UnknownPathsAre404AndPrefixesDoNotMatch) {
  auto server = MustStart({HealthRoute("/healthz", [] { return std::string(); })});
  ASSERT_TRUE(server);
  HttpConnection http(Url(*server));
  EXPECT_EQ(http.Send("GET", "/nope")->status, 404);
  EXPECT_EQ(http.Send("GET", "/healthzz")->status, 404);
  EXPECT_EQ(http.Send("GET", "/healthz")->status, 200);
}

TEST(HttpServerTest, OtherMethodsAre405) {
  auto server = MustStart({HealthRoute("/healthz", [] { return std::string(); }),
                           {"/post", {"POST"}, [](const Request& r) { return Response::Text(200, r.body); }}});
  ASSERT_TRUE(server);
  HttpConnection http(Url(*server));
  EXPECT_EQ(http.Send("POST", "/healthz", "x")->status, 405);
  EXPECT_EQ(http.Send("DELETE", "/healthz")->status, 405);
  EXPECT_EQ(http.Send("GET", "/post")->status, 405);
  auto r = http.Send("POST", "/post", "payload");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "payload");
}

TEST(HttpServerTest, BodiesOverTheLimitAre413AndNeverReachTheHandler) {
  std::atomic<int> calls{0};
  HttpServerOptions options;
  options.max_body_bytes = 16;
  auto server = MustStart({{"/post", {"POST"}, [&](const Request&) { ++calls; return Response::Text(200, ""); }}}, options);
  ASSERT_TRUE(server);
  HttpConnection http(Url(*server));
  auto r = http.Send("POST", "/post", std::string(17, 'x'));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(calls.load(), 0);
  HttpConnection again(Url(*server));
  EXPECT_EQ(again.Send("POST", "/post", std::string(16, 'x'))->status, 200);
  EXPECT_EQ(calls.load(), 1);
}

TEST(HttpServerTest, HealthRouteReportsTheProblem) {
  std::string problem = "informers not synced";
  auto server = MustStart({HealthRoute("/readyz", [&] { return problem; })});
  ASSERT_TRUE(server);
  HttpConnection http(Url(*server));
  auto r = http.Send("GET", "/readyz");
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->body, "informers not synced\n");
  problem.clear();
  EXPECT_EQ(http.Send("GET", "/readyz")->status, 200);
}

TEST(HttpServerTest, HandlerExceptionsAre500NotACrash) {
  auto server = MustStart({{"/boom", {}, [](const Request&) -> Response { throw std::runtime_error("bad"); }}});
  ASSERT_TRUE(server);
  HttpConnection http(Url(*server));
  auto r = http.Send("GET", "/boom");
  EXPECT_EQ(r->status, 500);
  EXPECT_NE(r->body.find("bad"), std::string::npos);
}

// A handler's deep work (an API request) gets a full stack, not the worker's 100 KiB, and what it
// throws comes back to the handler.
TEST(HttpServerTest, RunOnOwnThreadGivesWorkAFullStackAndItsExceptions) {
  std::atomic<size_t> worker_stack{0}, own_stack{0};
  auto server = MustStart({{"/deep", {}, [&](const Request&) {
                              worker_stack = testing::ThreadStackSize();
                              RunOnOwnThread([&] { own_stack = testing::ThreadStackSize(); });
                              RunOnOwnThread([] { throw std::runtime_error("deep failure"); });
                              return Response::Text(200, "unreachable");
                            }}});
  ASSERT_TRUE(server);
  HttpConnection http(Url(*server));
  auto r = http.Send("GET", "/deep");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 500);
  EXPECT_NE(r->body.find("deep failure"), std::string::npos) << r->body;
  EXPECT_LT(worker_stack.load(), size_t{1} << 20) << "CivetWeb's workers no longer have small stacks";
  EXPECT_GE(own_stack.load(), size_t{1} << 20);
}

TEST(HttpServerTest, MetricsRouteServesTheRegistry) {
  auto registry = std::make_shared<prometheus::Registry>();
  auto& family = prometheus::BuildCounter().Name("fleet_test_total").Help("A test counter").Register(*registry);
  family.Add({{"kind", "a"}}).Increment(3);
  auto server = MustStart({MetricsRoute(registry)});
  ASSERT_TRUE(server);
  HttpConnection http(Url(*server));
  auto r = http.Send("GET", "/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->content_type.find("version=0.0.4"), std::string::npos);
  EXPECT_NE(r->body.find("fleet_test_total{kind=\"a\"} 3"), std::string::npos) << r->body;
}

// Issue 14 (slowloris): connections that send nothing, or stall inside the request line, each held
// one of CivetWeb's few workers for the whole request timeout, so a handful of them made every
// probe time out. With the default options a probe is answered at once beside 12 of them.
TEST(HttpServerTest, ProbesAreAnsweredBesideIdleConnections) {
  auto server = MustStart({HealthRoute("/healthz", [] { return std::string(); })});
  ASSERT_TRUE(server);
  fleet::testing::IdleConnections idle(server->port(), 12);
  ASSERT_EQ(idle.open(), 12u);
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(fleet::testing::ProbeWithin(server->port(), "/healthz", std::chrono::seconds(1)), 200) << "probe " << i;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500));
  }
}

// Slow or silent clients are dropped after the request timeout: the workers they held serve
// again, even when there were more of them than workers.
TEST(HttpServerTest, SilentClientsAreDroppedAfterTheRequestTimeout) {
  HttpServerOptions options;
  options.threads = 2;
  options.request_timeout_ms = 300;
  auto server = MustStart({HealthRoute("/healthz", [] { return std::string(); })}, options);
  ASSERT_TRUE(server);
  fleet::testing::IdleConnections idle(server->port(), 6);
  EXPECT_EQ(fleet::testing::ProbeWithin(server->port(), "/healthz", std::chrono::seconds(3)), 200);
}

TEST(HttpServerTest, BadAddressesAreClearErrors) {
  for (const char* bad : {"127.0.0.1:x", "127.0.0.1:70000", "", "host:"}) {
    auto server = HttpServer::Start(bad, {});
    EXPECT_FALSE(server.ok()) << bad;
    if (!server.ok()) {
      EXPECT_NE(server.error().find("listen address"), std::string::npos) << server.error();
    }
  }
}

TEST(HttpServerTest, APortInUseIsAClearError) {
  auto first = MustStart({});
  ASSERT_TRUE(first);
  auto second = HttpServer::Start("127.0.0.1:" + std::to_string(first->port()), {});
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.error().find("cannot listen on 127.0.0.1:"), std::string::npos) << second.error();
}

}  // namespace
}  // namespace fleet::httpd
