// Client against the fake kube-apiserver: CRUD and its error codes, retries (and the lack of them),
// the QPS limiter, timeouts, token rotation, malformed answers, watches and TLS. Every test runs
// against both implementations: Client::Create (cpprestsdk) and CreateLiteClient (Boost.Beast),
// which share everything above the HTTP transport and must behave alike.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <sstream>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "fake_apiserver_fixture.h"
#include "fleet/kube/client.h"
#include "fleet/kube/lite_client.h"

namespace fleet::kube {
namespace {

using testing::FakeApiServer;
using testing::TempDir;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

Json ConfigMap(const std::string& name, const std::string& value = "v") {
  return {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", {{"name", name}}}, {"data", {{"k", value}}}};
}

Json Pod(const std::string& name) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"labels", {{"app", "trainer"}}}}},
          {"spec", {{"containers", {{{"name", "main"}, {"image", "paddle:2.5"}}}}}}};
}

Resource Namespaces() { return {"", "v1", "namespaces", false}; }

// Quick retries so that the retry tests stay fast.
ClientOptions FastOptions() {
  ClientOptions options;
  options.backoff_base = milliseconds(5);
  options.backoff_cap = milliseconds(50);
  options.request_timeout = milliseconds(5000);
  return options;
}

struct Implementation {
  const char* name;
  StatusOr<std::shared_ptr<Client>> (*create)(const ClusterConfig&, const ClientOptions&);
};
const Implementation kImplementations[] = {{"Rest", &Client::Create}, {"Lite", &CreateLiteClient}};

std::string ImplementationName(const ::testing::TestParamInfo<Implementation>& info) { return info.param.name; }
void PrintTo(const Implementation& implementation, std::ostream* os) { *os << implementation.name; }

// A test of either implementation: Create() is the one under test.
class ImplementationTest : public ::testing::TestWithParam<Implementation> {
 protected:
  StatusOr<std::shared_ptr<Client>> Create(const ClusterConfig& config, const ClientOptions& options = FastOptions()) {
    return GetParam().create(config, options);
  }
};

class ClientTest : public ImplementationTest {
 protected:
  // The kubelet stand-in only acts on request, so that pods change only when a test says so.
  ClientTest() : fake_({"--kubelet", "manual"}) {}

  void SetUp() override { ASSERT_TRUE(fake_.ok()) << fake_.error(); }

  std::shared_ptr<Client> NewClient(const ClientOptions& options = FastOptions()) {
    auto client = Create(fake_.Config(), options);
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return client.ok() ? *client : nullptr;
  }

  size_t Count(const std::string& method, const std::string& path) {
    return fake_.RequestsMatching(method, path).size();
  }

  FakeApiServer fake_;
};

// ---- CRUD ----

TEST_P(ClientTest, CreateGetUpdateDeleteRoundTrip) {
  auto client = NewClient();
  auto created = client->Create(Resource::Pods(), "default", Pod("trainer-0"));
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_FALSE((*created)["metadata"]["uid"].get<std::string>().empty());
  const std::string rv = (*created)["metadata"]["resourceVersion"];

  auto got = client->Get(Resource::Pods(), "default", "trainer-0");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ((*got)["metadata"]["uid"], (*created)["metadata"]["uid"]);

  Json changed = *got;
  changed["metadata"]["labels"]["role"] = "worker";
  auto updated = client->Update(Resource::Pods(), "default", changed);
  ASSERT_TRUE(updated.ok()) << updated.status().ToString();
  EXPECT_EQ((*updated)["metadata"]["labels"]["role"], "worker");
  EXPECT_NE((*updated)["metadata"]["resourceVersion"], rv);

  EXPECT_TRUE(client->Delete(Resource::Pods(), "default", "trainer-0").ok());
  EXPECT_EQ(client->Get(Resource::Pods(), "default", "trainer-0").status().code(), Code::kNotFound);
}

TEST_P(ClientTest, EmptyNamespaceMeansTheObjectsThenTheDefaultNamespace) {
  auto client = NewClient();
  Json in_system = ConfigMap("sys");
  in_system["metadata"]["namespace"] = "kube-system";
  ASSERT_TRUE(client->Create(Resource::ConfigMaps(), "", in_system).ok());
  ASSERT_TRUE(client->Create(Resource::ConfigMaps(), "", ConfigMap("dflt")).ok());
  EXPECT_TRUE(client->Get(Resource::ConfigMaps(), "kube-system", "sys").ok());
  EXPECT_TRUE(client->Get(Resource::ConfigMaps(), "", "dflt").ok());
  auto all = client->List(Resource::ConfigMaps(), "");  // "" lists across namespaces
  ASSERT_TRUE(all.ok());
  EXPECT_GE((*all)["items"].size(), 2u);
}

TEST_P(ClientTest, ListFollowsContinueTokensAndReturnsTheListResourceVersion) {
  auto client = NewClient();
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(client->Create(Resource::ConfigMaps(), "default", ConfigMap("cm-" + std::to_string(i))).ok());
  }
  fake_.ClearRequests();
  ListOptions options;
  options.limit = 3;
  auto list = client->List(Resource::ConfigMaps(), "default", options);
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  EXPECT_EQ((*list)["items"].size(), 7u);
  EXPECT_FALSE((*list)["metadata"]["resourceVersion"].get<std::string>().empty());
  EXPECT_FALSE((*list)["metadata"].contains("continue"));
  EXPECT_EQ(Count("GET", "/api/v1/namespaces/default/configmaps"), 3u);
}

TEST_P(ClientTest, ListFiltersByLabelSelector) {
  auto client = NewClient();
  ASSERT_TRUE(client->Create(Resource::Pods(), "default", Pod("labelled")).ok());
  Json other = ConfigMap("x");
  ASSERT_TRUE(client->Create(Resource::ConfigMaps(), "default", other).ok());
  ListOptions options;
  options.label_selector = "app=trainer";
  auto list = client->List(Resource::Pods(), "default", options);
  ASSERT_TRUE(list.ok());
  ASSERT_EQ((*list)["items"].size(), 1u);
  options.label_selector = "app in (ps,heter)";
  EXPECT_EQ((*client->List(Resource::Pods(), "default", options))["items"].size(), 0u);
}

TEST_P(ClientTest, CustomGroupResourcesUseTheApisPrefix) {
  auto client = NewClient();
  Json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                {"kind", "Lease"},
                {"metadata", {{"name", "fleet-operator"}}},
                {"spec", {{"holderIdentity", "a"}, {"leaseDurationSeconds", 15}}}};
  ASSERT_TRUE(client->Create(Resource::Leases(), "default", lease).ok());
  auto got = client->Get(Resource::Leases(), "default", "fleet-operator");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ((*got)["spec"]["holderIdentity"], "a");
  EXPECT_EQ(Count("GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/fleet-operator"), 1u);
}

TEST_P(ClientTest, UpdateWithAStaleResourceVersionIsConflict) {
  auto client = NewClient();
  auto created = client->Create(Resource::ConfigMaps(), "default", ConfigMap("cfg"));
  ASSERT_TRUE(created.ok());
  Json first = *created, second = *created;
  first["data"]["k"] = "one";
  ASSERT_TRUE(client->Update(Resource::ConfigMaps(), "default", first).ok());
  second["data"]["k"] = "two";
  fake_.ClearRequests();
  auto stale = client->Update(Resource::ConfigMaps(), "default", second);
  EXPECT_EQ(stale.status().code(), Code::kConflict) << stale.status().ToString();
  EXPECT_EQ(Count("PUT", "/api/v1/namespaces/default/configmaps/cfg"), 1u);  // never retried
}

TEST_P(ClientTest, CreatingTwiceIsAlreadyExists) {
  auto client = NewClient();
  ASSERT_TRUE(client->Create(Resource::ConfigMaps(), "default", ConfigMap("dup")).ok());
  auto again = client->Create(Resource::ConfigMaps(), "default", ConfigMap("dup"));
  EXPECT_EQ(again.status().code(), Code::kAlreadyExists);
  EXPECT_EQ(again.status().reason(), "AlreadyExists");
  EXPECT_EQ(again.status().http_status(), 409);
}

// The same request as Create, and its errors, without the created object.
TEST_P(ClientTest, CreateDiscardingReplyCreatesAndFailsAsCreateDoes) {
  auto client = NewClient();
  ASSERT_TRUE(client->CreateDiscardingReply(Resource::Pods(), "default", Pod("quiet-0")).ok());
  auto got = client->Get(Resource::Pods(), "default", "quiet-0");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_FALSE((*got)["metadata"]["uid"].get<std::string>().empty());
  EXPECT_EQ(client->CreateDiscardingReply(Resource::Pods(), "default", Pod("quiet-0")).code(), Code::kAlreadyExists);
  Json bad = Pod("quiet-bad");
  bad["spec"]["containers"] = Json::array();
  const ApiStatus invalid = client->CreateDiscardingReply(Resource::Pods(), "default", bad);
  ASSERT_EQ(invalid.code(), Code::kInvalid) << invalid.ToString();
  ASSERT_FALSE(invalid.causes().empty());
  EXPECT_EQ(invalid.causes()[0].field, "spec.containers");
  EXPECT_EQ(Count("POST", "/api/v1/namespaces/default/pods"), 3u);
}

TEST_P(ClientTest, MissingObjectIsNotFoundWithTheServersMessage) {
  auto client = NewClient();
  auto missing = client->Get(Resource::Pods(), "default", "ghost");
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find("ghost"), std::string::npos) << missing.status().message();
  EXPECT_EQ(client->Delete(Resource::Pods(), "default", "ghost").code(), Code::kNotFound);
  EXPECT_EQ(Count("GET", "/api/v1/namespaces/default/pods/ghost"), 1u);
}

TEST_P(ClientTest, InvalidObjectIsInvalidWithFieldCauses) {
  auto client = NewClient();
  Json pod = Pod("bad");
  pod["spec"]["containers"] = Json::array();
  auto invalid = client->Create(Resource::Pods(), "default", pod);
  ASSERT_EQ(invalid.status().code(), Code::kInvalid) << invalid.status().ToString();
  ASSERT_FALSE(invalid.status().causes().empty());
  EXPECT_EQ(invalid.status().causes()[0].field, "spec.containers");
  EXPECT_EQ(invalid.status().causes()[0].type, "FieldValueRequired");
  EXPECT_EQ(Count("POST", "/api/v1/namespaces/default/pods"), 1u);
}

TEST_P(ClientTest, MergePatchChangesOnlyTheGivenFields) {
  auto client = NewClient();
  Json cm = ConfigMap("patched");
  cm["data"]["keep"] = "me";
  ASSERT_TRUE(client->Create(Resource::ConfigMaps(), "default", cm).ok());
  const Json patch = {{"data", {{"k", "new"}, {"keep", nullptr}}}, {"metadata", {{"labels", {{"a", "b"}}}}}};
  auto patched = client->MergePatch(Resource::ConfigMaps(), "default", "patched", patch);
  ASSERT_TRUE(patched.ok()) << patched.status().ToString();
  EXPECT_EQ((*patched)["data"]["k"], "new");
  EXPECT_FALSE((*patched)["data"].contains("keep"));  // null deletes, per RFC 7386
  EXPECT_EQ((*patched)["metadata"]["labels"]["a"], "b");
}

TEST_P(ClientTest, StatusWritesGoThroughTheStatusSubresource) {
  auto client = NewClient();
  auto pod = client->Create(Resource::Pods(), "default", Pod("status-pod"));
  ASSERT_TRUE(pod.ok());
  Json with_status = *pod;
  with_status["status"]["phase"] = "Running";
  with_status["metadata"]["labels"]["ignored"] = "yes";  // the status subresource ignores metadata changes
  auto updated = client->UpdateStatus(Resource::Pods(), "default", with_status);
  ASSERT_TRUE(updated.ok()) << updated.status().ToString();
  EXPECT_EQ((*updated)["status"]["phase"], "Running");
  EXPECT_FALSE((*updated)["metadata"]["labels"].contains("ignored"));
  EXPECT_EQ(Count("PUT", "/api/v1/namespaces/default/pods/status-pod/status"), 1u);

  auto patched = client->MergePatch(Resource::Pods(), "default", "status-pod",
                                    {{"status", {{"phase", "Failed"}}}}, "status");
  ASSERT_TRUE(patched.ok()) << patched.status().ToString();
  EXPECT_EQ((*patched)["status"]["phase"], "Failed");

  Json spec_change = *patched;
  spec_change["status"]["phase"] = "Succeeded";  // the main resource ignores status
  auto main = client->Update(Resource::Pods(), "default", spec_change);
  ASSERT_TRUE(main.ok()) << main.status().ToString();
  EXPECT_EQ((*main)["status"]["phase"], "Failed");
}

TEST_P(ClientTest, DeletePropagationPolicyDecidesTheFateOfDependents) {
  auto client = NewClient();
  auto make_pair = [&](const std::string& owner) {
    auto parent = client->Create(Resource::ConfigMaps(), "default", ConfigMap(owner));
    ASSERT_TRUE(parent.ok());
    Json child = ConfigMap(owner + "-child");
    child["metadata"]["ownerReferences"] = {{{"apiVersion", "v1"},
                                             {"kind", "ConfigMap"},
                                             {"name", owner},
                                             {"uid", (*parent)["metadata"]["uid"]}}};
    ASSERT_TRUE(client->Create(Resource::ConfigMaps(), "default", child).ok());
  };
  make_pair("orphaning");
  make_pair("cascading");
  DeleteOptions orphan;
  orphan.propagation_policy = "Orphan";
  ASSERT_TRUE(client->Delete(Resource::ConfigMaps(), "default", "orphaning", orphan).ok());
  DeleteOptions background;
  background.propagation_policy = "Background";
  ASSERT_TRUE(client->Delete(Resource::ConfigMaps(), "default", "cascading", background).ok());

  EXPECT_TRUE(client->Get(Resource::ConfigMaps(), "default", "orphaning-child").ok());
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (client->Get(Resource::ConfigMaps(), "default", "cascading-child").ok() && Clock::now() < deadline) {
    std::this_thread::sleep_for(milliseconds(20));
  }
  EXPECT_EQ(client->Get(Resource::ConfigMaps(), "default", "cascading-child").status().code(), Code::kNotFound);
}

TEST_P(ClientTest, DeletePreconditionOnAnotherUidIsConflict) {
  auto client = NewClient();
  ASSERT_TRUE(client->Create(Resource::ConfigMaps(), "default", ConfigMap("guarded")).ok());
  DeleteOptions options;
  options.precondition_uid = "not-the-uid";
  EXPECT_EQ(client->Delete(Resource::ConfigMaps(), "default", "guarded", options).code(), Code::kConflict);
  EXPECT_TRUE(client->Get(Resource::ConfigMaps(), "default", "guarded").ok());
}

TEST_P(ClientTest, GetLogReturnsThePodsLogAndItsTail) {
  auto client = NewClient();
  ASSERT_TRUE(client->Create(Resource::Pods(), "default", Pod("logger")).ok());
  fake_.Control("namespaces/default/pods/logger", {{"action", "run"}});
  fake_.Control("namespaces/default/pods/logger/log", {{"text", "epoch 1\nepoch 2\n"}});
  auto log = client->GetLog("default", "logger");
  ASSERT_TRUE(log.ok()) << log.status().ToString();
  EXPECT_EQ(*log, "epoch 1\nepoch 2\n");
  auto tail = client->GetLog("default", "logger", "main", 1);
  ASSERT_TRUE(tail.ok()) << tail.status().ToString();
  EXPECT_EQ(*tail, "epoch 2\n");
  EXPECT_EQ(client->GetLog("default", "logger", "sidecar").status().code(), Code::kBadRequest);
}

TEST_P(ClientTest, FollowLogStreamsWhatTheContainerWritesUntilThePodEnds) {
  auto client = NewClient();
  ASSERT_TRUE(client->Create(Resource::Pods(), "default", Pod("follower")).ok());
  CancelToken cancel;
  // Not started yet: the API server's reason, at once.
  EXPECT_EQ(client->FollowLog("default", "follower", "main", -1, 0, [](std::string_view) { return true; }, cancel).code(),
            Code::kBadRequest);
  fake_.Control("namespaces/default/pods/follower", {{"action", "run"}});
  fake_.Control("namespaces/default/pods/follower/log", {{"text", "epoch 1\nepoch 2\n"}});
  std::mutex mu;
  std::string seen;
  ApiStatus followed;
  std::thread follower([&] {
    followed = client->FollowLog("default", "follower", "main", 1, 0, [&](std::string_view text) {
      std::lock_guard lock(mu);
      seen += text;
      return true;
    }, cancel);
  });
  auto saw = [&](const std::string& want) {
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    while (Clock::now() < deadline) {
      {
        std::lock_guard lock(mu);
        if (seen == want) return true;
      }
      std::this_thread::sleep_for(milliseconds(10));
    }
    std::lock_guard lock(mu);
    return seen == want;
  };
  EXPECT_TRUE(saw("epoch 2\n")) << seen;  // the tail, then what comes
  fake_.Control("namespaces/default/pods/follower/log", {{"text", "epoch 3\n"}});
  EXPECT_TRUE(saw("epoch 2\nepoch 3\n")) << seen;
  fake_.Control("namespaces/default/pods/follower", {{"action", "succeed"}});
  follower.join();
  EXPECT_TRUE(followed.ok()) << followed.ToString();
  // A handler that has seen enough ends the stream early, with OK.
  int calls = 0;
  EXPECT_TRUE(client->FollowLog("default", "follower", "main", -1, 0, [&](std::string_view) { return ++calls < 1; }, cancel).ok());
  EXPECT_EQ(calls, 1);
}

TEST_P(ClientTest, BadArgumentsFailLocally) {
  auto client = NewClient();
  EXPECT_EQ(client->Get(Resource::Pods(), "default", "").status().code(), Code::kBadRequest);
  EXPECT_EQ(client->Update(Resource::Pods(), "default", Json::object()).status().code(), Code::kBadRequest);
  EXPECT_EQ(client->Delete(Resource::Pods(), "default", "").code(), Code::kBadRequest);
  EXPECT_TRUE(fake_.Requests().empty());
  // Invalid UTF-8 is replaced on the way out instead of throwing out of the client.
  EXPECT_TRUE(client->Create(Resource::ConfigMaps(), "default", ConfigMap("utf8", "bad \xff byte")).ok());
}

TEST_P(ClientTest, ManyThreadsShareOneClient) {
  auto client = NewClient();
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < 16; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 8; ++i) {
        const std::string name = "c-" + std::to_string(t) + "-" + std::to_string(i);
        if (!client->Create(Resource::ConfigMaps(), "default", ConfigMap(name)).ok()) ++failures;
        if (!client->Get(Resource::ConfigMaps(), "default", name).ok()) ++failures;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ((*client->List(Resource::ConfigMaps(), "default"))["items"].size(), 128u);
}

// ---- retries ----

TEST_P(ClientTest, RetriesServiceUnavailableUntilItSucceeds) {
  auto client = NewClient();
  ASSERT_TRUE(client->Create(Resource::ConfigMaps(), "default", ConfigMap("flaky")).ok());
  fake_.ClearRequests();
  fake_.Control("faults", {{"failNext", 2}, {"code", 503}, {"match", "GET /api/v1/namespaces/default/configmaps/"}});
  auto got = client->Get(Resource::ConfigMaps(), "default", "flaky");
  EXPECT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(Count("GET", "/api/v1/namespaces/default/configmaps/flaky"), 3u);
}

TEST_P(ClientTest, GivesUpAfterMaxAttempts) {
  ClientOptions options = FastOptions();
  options.max_attempts = 3;
  auto client = NewClient(options);
  fake_.Control("faults", {{"failNext", 10}, {"code", 500}, {"match", "GET /api/v1/namespaces/default/configmaps/x"}});
  auto got = client->Get(Resource::ConfigMaps(), "default", "x");
  EXPECT_EQ(got.status().code(), Code::kUnavailable);
  EXPECT_EQ(got.status().http_status(), 500);
  EXPECT_EQ(Count("GET", "/api/v1/namespaces/default/configmaps/x"), 3u);
}

TEST_P(ClientTest, TooManyRequestsWaitsForRetryAfter) {
  auto client = NewClient();
  ASSERT_TRUE(client->Create(Resource::ConfigMaps(), "default", ConfigMap("busy")).ok());
  fake_.ClearRequests();
  fake_.Control("faults", {{"failNext", 1}, {"code", 429}, {"retryAfter", 1}, {"match", "GET /api/v1/"}});
  const auto start = Clock::now();
  auto got = client->Get(Resource::ConfigMaps(), "default", "busy");
  const double elapsed = SecondsSince(start);
  EXPECT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_GE(elapsed, 1.0);
  EXPECT_LT(elapsed, 3.0);
  EXPECT_EQ(Count("GET", "/api/v1/namespaces/default/configmaps/busy"), 2u);
}

TEST_P(ClientTest, ALongRetryAfterIsLeftToTheCaller) {
  auto client = NewClient();
  fake_.Control("faults", {{"failNext", 1}, {"code", 429}, {"retryAfter", 120}, {"match", "GET /api/v1/"}});
  const auto start = Clock::now();
  auto got = client->Get(Namespaces(), "", "default");
  EXPECT_LT(SecondsSince(start), 1.0);
  EXPECT_EQ(got.status().code(), Code::kTooManyRequests);
  ASSERT_TRUE(got.status().retry_after());
  EXPECT_EQ(*got.status().retry_after(), std::chrono::seconds(120));
  EXPECT_EQ(Count("GET", "/api/v1/namespaces/default"), 1u);
}

TEST_P(ClientTest, ClientErrorsAreNeverRetried) {
  auto client = NewClient();
  fake_.Control("faults", {{"failNext", 1}, {"code", 400}, {"match", "GET /api/v1/namespaces/default/configmaps/a"}});
  EXPECT_EQ(client->Get(Resource::ConfigMaps(), "default", "a").status().code(), Code::kBadRequest);
  fake_.Control("faults", {{"failNext", 1}, {"code", 403}, {"match", "GET /api/v1/namespaces/default/configmaps/b"}});
  EXPECT_EQ(client->Get(Resource::ConfigMaps(), "default", "b").status().code(), Code::kForbidden);
  EXPECT_EQ(client->Get(Resource::ConfigMaps(), "default", "c").status().code(), Code::kNotFound);
  Json bad = Pod("d");
  bad["spec"]["containers"][0].erase("image");
  EXPECT_EQ(client->Create(Resource::Pods(), "default", bad).status().code(), Code::kInvalid);

  EXPECT_EQ(Count("GET", "/api/v1/namespaces/default/configmaps/a"), 1u);
  EXPECT_EQ(Count("GET", "/api/v1/namespaces/default/configmaps/b"), 1u);
  EXPECT_EQ(Count("GET", "/api/v1/namespaces/default/configmaps/c"), 1u);
  EXPECT_EQ(Count("POST", "/api/v1/namespaces/default/pods"), 1u);
}

TEST_P(ClientTest, CreateByGenerateNameIsRepeatedOnlyAfterTooManyRequests) {
  auto client = NewClient();
  Json generated = ConfigMap("");
  generated["metadata"] = {{"generateName", "gen-"}};
  fake_.Control("faults", {{"failNext", 1}, {"code", 503}, {"match", "POST /api/v1/namespaces/default/configmaps"}});
  EXPECT_EQ(client->Create(Resource::ConfigMaps(), "default", generated).status().code(), Code::kUnavailable);
  EXPECT_EQ(Count("POST", "/api/v1/namespaces/default/configmaps"), 1u);

  fake_.ClearRequests();
  fake_.Control("faults", {{"failNext", 1}, {"code", 429}, {"retryAfter", 0}, {"match", "POST /api/v1/"}});
  auto created = client->Create(Resource::ConfigMaps(), "default", generated);
  ASSERT_TRUE(created.ok()) << created.status().ToString();
  EXPECT_EQ((*created)["metadata"]["name"].get<std::string>().rfind("gen-", 0), 0u);
  EXPECT_EQ(Count("POST", "/api/v1/namespaces/default/configmaps"), 2u);
}

// ---- limits ----

TEST_P(ClientTest, QpsLimiterPacesRequests) {
  ClientOptions options = FastOptions();
  options.qps = 20;
  options.burst = 1;
  auto client = NewClient(options);
  const auto start = Clock::now();
  for (int i = 0; i < 11; ++i) ASSERT_TRUE(client->Get(Namespaces(), "", "default").ok());
  EXPECT_GE(SecondsSince(start), 0.5);
}

TEST_P(ClientTest, SlowAnswersTimeOut) {
  ClientOptions options = FastOptions();
  options.request_timeout = milliseconds(300);
  options.max_attempts = 1;
  auto client = NewClient(options);
  fake_.Control("faults", {{"latencyMs", 2000}});
  const auto start = Clock::now();
  auto got = client->Get(Namespaces(), "", "default");
  EXPECT_EQ(got.status().code(), Code::kUnavailable) << got.status().ToString();
  EXPECT_LT(SecondsSince(start), 1.5);
  fake_.Control("faults", {{"reset", true}});
  EXPECT_TRUE(client->Get(Namespaces(), "", "default").ok());
}

// ---- connections ----

TEST_P(ClientTest, AServerUrlWithAPathPrefixesEveryRequest) {
  // How an API proxy is addressed (kubectl proxy --api-prefix, Rancher's cluster URLs).
  ClusterConfig config = fake_.Config();
  config.server += "/proxy/c1";
  auto client = Create(config);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  fake_.ClearRequests();
  // The fake is no proxy, and answers 404: the path it was asked for is what counts.
  EXPECT_EQ((*client)->Get(Namespaces(), "", "default").status().code(), Code::kNotFound);
  EXPECT_EQ(Count("GET", "/proxy/c1/api/v1/namespaces/default"), 1u);
}

// An HTTP server that answers every request with a Namespace and then closes the connection,
// although its answer keeps it alive: what a server's idle timeout does between two requests.
class ClosingServer {
 public:
  ClosingServer() {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(listen_fd_, 8) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return;
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~ClosingServer() {
    ::shutdown(listen_fd_, SHUT_RDWR);  // ends the accept()
    if (thread_.joinable()) thread_.join();
    ::close(listen_fd_);
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  int requests() const { return requests_; }

 private:
  void Serve() {
    for (int fd; (fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC)) >= 0; ::close(fd)) {
      std::string request;
      char buf[4096];
      ssize_t n = 0;
      while (request.find("\r\n\r\n") == std::string::npos && (n = ::read(fd, buf, sizeof buf)) > 0) {
        request.append(buf, static_cast<size_t>(n));
      }
      if (request.find("\r\n\r\n") == std::string::npos) continue;
      ++requests_;
      const std::string body = R"({"kind":"Namespace","metadata":{"name":"default"}})";
      const std::string answer = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
                                 std::to_string(body.size()) + "\r\n\r\n" + body;
      if (::write(fd, answer.data(), answer.size()) < 0) continue;
    }
  }

  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<int> requests_{0};
  std::thread thread_;
};

TEST_P(ClientTest, AKeptAliveConnectionTheServerClosedIsReplacedUnnoticed) {
  ClosingServer server;
  ClusterConfig config;
  config.server = server.url();
  ClientOptions once = FastOptions();
  once.max_attempts = 1;  // so that no retry of the client's hides a failure
  auto client = Create(config, once);
  ASSERT_TRUE(client.ok());
  for (int i = 0; i < 3; ++i) {
    auto got = (*client)->Get(Namespaces(), "", "default");
    EXPECT_TRUE(got.ok()) << "request " << i << ": " << got.status().ToString();
    std::this_thread::sleep_for(milliseconds(50));  // the server's close arrives
  }
  EXPECT_EQ(server.requests(), 3);
}

// ---- malformed answers ----

TEST_P(ClientTest, TruncatedJsonIsMalformedNotACrash) {
  auto client = NewClient();
  fake_.Control("faults", {{"truncateNext", 1}, {"match", "GET /api/v1/namespaces/default"}});
  auto got = client->Get(Namespaces(), "", "default");
  EXPECT_EQ(got.status().code(), Code::kMalformed) << got.status().ToString();
  EXPECT_TRUE(client->Get(Namespaces(), "", "default").ok());  // the connection pool is not poisoned
}

TEST_P(ClientTest, BodyCutOffMidConnectionIsRetriedAsAConnectionFailure) {
  auto client = NewClient();
  fake_.Control("faults", {{"truncateNext", 1}, {"abort", true}, {"match", "GET /api/v1/namespaces/default"}});
  auto got = client->Get(Namespaces(), "", "default");
  EXPECT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(Count("GET", "/api/v1/namespaces/default"), 2u);

  ClientOptions once = FastOptions();
  once.max_attempts = 1;
  auto single = NewClient(once);
  fake_.Control("faults", {{"truncateNext", 1}, {"abort", true}, {"match", "GET /api/v1/namespaces/default"}});
  EXPECT_EQ(single->Get(Namespaces(), "", "default").status().code(), Code::kUnavailable);
}

TEST_P(ClientTest, GarbageBodyIsMalformed) {
  auto client = NewClient();
  fake_.Control("faults", {{"garbageNext", 1}, {"match", "GET /api/v1/namespaces"}});
  auto got = client->Get(Namespaces(), "", "default");
  EXPECT_EQ(got.status().code(), Code::kMalformed) << got.status().ToString();
  EXPECT_EQ(Count("GET", "/api/v1/namespaces/default"), 1u);
}

TEST_P(ClientTest, BodyOverTheSizeLimitIsMalformedWithoutReadingIt) {
  ClientOptions options = FastOptions();
  options.max_response_bytes = 256 * 1024;
  auto client = NewClient(options);
  fake_.Control("faults", {{"hugeNext", 1}, {"bytes", 64 * 1024 * 1024}, {"match", "GET /api/v1/namespaces"}});
  const auto start = Clock::now();
  auto got = client->Get(Namespaces(), "", "default");
  EXPECT_EQ(got.status().code(), Code::kMalformed) << got.status().ToString();
  EXPECT_NE(got.status().message().find("exceeds the limit"), std::string::npos);
  EXPECT_LT(SecondsSince(start), 2.0);
  EXPECT_TRUE(client->Get(Namespaces(), "", "default").ok());
}

TEST_P(ClientTest, BodyUnderTheSizeLimitIsAccepted) {
  auto client = NewClient();
  fake_.Control("faults", {{"hugeNext", 1}, {"bytes", 3 * 1024 * 1024}, {"match", "GET /api/v1/namespaces"}});
  auto got = client->Get(Namespaces(), "", "default");
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_GT((*got)["padding"].get<std::string>().size(), 3u * 1024 * 1024 - 200);
}

TEST_P(ClientTest, WrongContentTypeIsMalformed) {
  auto client = NewClient();
  fake_.Control("faults", {{"wrongContentTypeNext", 1}, {"match", "GET /api/v1/namespaces"}});
  auto got = client->Get(Namespaces(), "", "default");
  EXPECT_EQ(got.status().code(), Code::kMalformed);
  EXPECT_NE(got.status().message().find("text/html"), std::string::npos) << got.status().message();
}

// ---- authentication ----

using ClientAuthTest = ImplementationTest;

TEST_P(ClientAuthTest, BearerTokenIsSentAndAWrongOneIsUnauthorizedAtOnce) {
  FakeApiServer fake({"--token", "right"});
  ASSERT_TRUE(fake.ok()) << fake.error();
  auto good = Create(fake.Config("right"));
  ASSERT_TRUE(good.ok());
  EXPECT_TRUE((*good)->Get(Namespaces(), "", "default").ok());
  auto bad = Create(fake.Config("wrong"));
  ASSERT_TRUE(bad.ok());
  fake.ClearRequests();
  EXPECT_EQ((*bad)->Get(Namespaces(), "", "default").status().code(), Code::kUnauthorized);
  EXPECT_EQ(fake.RequestsMatching("GET", "/api/v1/namespaces/default").size(), 1u);
}

TEST_P(ClientAuthTest, RotatedTokenFileIsReReadAfterUnauthorized) {
  TempDir dir;
  const std::string token_file = dir.Write("token", "old-token\n");
  FakeApiServer fake({"--token", "old-token"});
  ASSERT_TRUE(fake.ok()) << fake.error();
  ClusterConfig config = fake.Config();
  config.token_file = token_file;
  auto client = Create(config);
  ASSERT_TRUE(client.ok());
  ASSERT_TRUE((*client)->Get(Namespaces(), "", "default").ok());

  // The kubelet rotates the token; the server stops accepting the old one.
  dir.Write("token", "new-token\n");
  fake.Control("tokens", {{"tokens", {"new-token"}}});
  fake.ClearRequests();
  auto got = (*client)->Get(Namespaces(), "", "default");
  EXPECT_TRUE(got.ok()) << got.status().ToString();
  auto requests = fake.RequestsMatching("GET", "/api/v1/namespaces/default");
  ASSERT_EQ(requests.size(), 2u);
  EXPECT_EQ(requests[0]["code"], 401);
  EXPECT_EQ(requests[1]["code"], 200);
}

// ---- watch ----

struct Recorded {
  std::mutex mu;
  std::vector<WatchEvent> events;
  bool Has(WatchEventType type) {
    std::lock_guard<std::mutex> lock(mu);
    for (const WatchEvent& e : events) {
      if (e.type == type) return true;
    }
    return false;
  }
};

bool WaitFor(const std::function<bool()>& condition, milliseconds timeout = milliseconds(5000)) {
  const auto deadline = Clock::now() + timeout;
  while (!condition()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(10));
  }
  return true;
}

class WatchTest : public ClientTest {
 protected:
  std::string ListResourceVersion(Client& client) {
    auto list = client.List(Resource::ConfigMaps(), "default");
    EXPECT_TRUE(list.ok());
    return list.ok() ? (*list)["metadata"]["resourceVersion"].get<std::string>() : "";
  }
  bool WaitForOpenWatch() {
    return WaitFor([this] { return fake_.Control("state", Json::object(), "GET").value("watches", 0) > 0; });
  }
};

TEST_P(WatchTest, ReceivesAddedModifiedDeletedAndBookmarks) {
  auto client = NewClient();
  fake_.Control("config", {{"bookmarkIntervalMs", 100}});
  WatchOptions options;
  options.resource_version = ListResourceVersion(*client);
  options.timeout_seconds = 10;
  Recorded recorded;
  CancelToken cancel;
  ApiStatus result;
  std::thread watcher([&] {
    result = client->Watch(Resource::ConfigMaps(), "default", options, [&](const WatchEvent& event) {
      std::lock_guard<std::mutex> lock(recorded.mu);
      recorded.events.push_back(event);
      bool deleted = false, bookmark_after = false;
      for (const WatchEvent& e : recorded.events) {
        if (e.type == WatchEventType::kDeleted) deleted = true;
        if (deleted && e.type == WatchEventType::kBookmark) bookmark_after = true;
      }
      return !bookmark_after;  // stop once a bookmark followed the delete
    }, cancel);
  });
  ASSERT_TRUE(WaitForOpenWatch());
  auto created = client->Create(Resource::ConfigMaps(), "default", ConfigMap("watched"));
  ASSERT_TRUE(created.ok());
  Json changed = *created;
  changed["data"]["k"] = "changed";
  ASSERT_TRUE(client->Update(Resource::ConfigMaps(), "default", changed).ok());
  ASSERT_TRUE(client->Delete(Resource::ConfigMaps(), "default", "watched").ok());
  watcher.join();
  EXPECT_TRUE(result.ok()) << result.ToString();

  std::vector<WatchEventType> object_events;
  for (const WatchEvent& e : recorded.events) {
    if (e.type == WatchEventType::kBookmark) {
      EXPECT_FALSE(e.object["metadata"]["resourceVersion"].get<std::string>().empty());
      continue;
    }
    EXPECT_EQ(e.object["metadata"]["name"], "watched");
    object_events.push_back(e.type);
  }
  EXPECT_EQ(object_events, (std::vector<WatchEventType>{WatchEventType::kAdded, WatchEventType::kModified,
                                                        WatchEventType::kDeleted}));
  EXPECT_TRUE(recorded.Has(WatchEventType::kBookmark));
}

TEST_P(WatchTest, ResumesFromAResourceVersionWithoutReplayingOlderEvents) {
  auto client = NewClient();
  ASSERT_TRUE(client->Create(Resource::ConfigMaps(), "default", ConfigMap("before")).ok());
  const std::string rv = ListResourceVersion(*client);
  ASSERT_TRUE(client->Create(Resource::ConfigMaps(), "default", ConfigMap("after")).ok());
  WatchOptions options;
  options.resource_version = rv;
  options.timeout_seconds = 5;
  options.allow_bookmarks = false;
  std::vector<std::string> names;
  CancelToken cancel;
  ApiStatus result = client->Watch(Resource::ConfigMaps(), "default", options, [&](const WatchEvent& e) {
    names.push_back(e.object["metadata"]["name"]);
    return false;
  }, cancel);
  EXPECT_TRUE(result.ok()) << result.ToString();
  EXPECT_EQ(names, std::vector<std::string>{"after"});
}

TEST_P(WatchTest, EndsCleanlyWhenTheServerTimeoutExpires) {
  auto client = NewClient();
  WatchOptions options;
  options.resource_version = ListResourceVersion(*client);
  options.timeout_seconds = 1;
  options.allow_bookmarks = false;
  CancelToken cancel;
  const auto start = Clock::now();
  ApiStatus result = client->Watch(Resource::ConfigMaps(), "default", options, [](const WatchEvent&) { return true; },
                                   cancel);
  EXPECT_TRUE(result.ok()) << result.ToString();
  EXPECT_GE(SecondsSince(start), 0.9);
  EXPECT_LT(SecondsSince(start), 5.0);
}

TEST_P(WatchTest, ExpiredResourceVersionIsGone) {
  auto client = NewClient();
  ASSERT_TRUE(client->Create(Resource::ConfigMaps(), "default", ConfigMap("one")).ok());
  const std::string old_rv = ListResourceVersion(*client);
  ASSERT_TRUE(client->Create(Resource::ConfigMaps(), "default", ConfigMap("two")).ok());
  fake_.Control("faults", {{"compact", true}});
  WatchOptions options;
  options.resource_version = old_rv;
  CancelToken cancel;
  int events = 0;
  ApiStatus result = client->Watch(Resource::ConfigMaps(), "default", options, [&](const WatchEvent&) {
    ++events;
    return true;
  }, cancel);
  EXPECT_EQ(result.code(), Code::kGone) << result.ToString();
  EXPECT_EQ(result.reason(), "Expired");
  EXPECT_EQ(events, 0);
}

TEST_P(WatchTest, ServerExpiringAnOpenWatchIsGone) {
  auto client = NewClient();
  WatchOptions options;
  options.resource_version = ListResourceVersion(*client);
  CancelToken cancel;
  ApiStatus result;
  std::thread watcher([&] {
    result = client->Watch(Resource::ConfigMaps(), "default", options, [](const WatchEvent&) { return true; }, cancel);
  });
  ASSERT_TRUE(WaitForOpenWatch());
  fake_.Control("faults", {{"expireWatches", true}});
  watcher.join();
  EXPECT_EQ(result.code(), Code::kGone) << result.ToString();
}

TEST_P(WatchTest, CancelFromAnotherThreadReturnsPromptly) {
  auto client = NewClient();
  WatchOptions options;
  options.resource_version = ListResourceVersion(*client);
  options.timeout_seconds = 60;
  CancelToken cancel;
  ApiStatus result;
  Clock::time_point returned;
  std::thread watcher([&] {
    result = client->Watch(Resource::ConfigMaps(), "default", options, [](const WatchEvent&) { return true; }, cancel);
    returned = Clock::now();
  });
  ASSERT_TRUE(WaitForOpenWatch());
  const auto cancelled_at = Clock::now();
  cancel.Cancel();
  watcher.join();
  EXPECT_EQ(result.code(), Code::kCancelled) << result.ToString();
  EXPECT_LT(std::chrono::duration<double>(returned - cancelled_at).count(), 0.5);
}

TEST_P(WatchTest, CancelWhileWaitingForTheServerReturnsPromptly) {
  auto client = NewClient();
  fake_.Control("faults", {{"latencyMs", 3000}});
  CancelToken cancel;
  ApiStatus result;
  std::thread watcher([&] {
    result = client->Watch(Resource::ConfigMaps(), "default", {}, [](const WatchEvent&) { return true; }, cancel);
  });
  std::this_thread::sleep_for(milliseconds(200));
  const auto cancelled_at = Clock::now();
  cancel.Cancel();
  watcher.join();
  EXPECT_EQ(result.code(), Code::kCancelled) << result.ToString();
  EXPECT_LT(SecondsSince(cancelled_at), 0.5);
}

TEST_P(WatchTest, DroppedConnectionIsUnavailable) {
  auto client = NewClient();
  WatchOptions options;
  options.resource_version = ListResourceVersion(*client);
  CancelToken cancel;
  ApiStatus result;
  std::thread watcher([&] {
    result = client->Watch(Resource::ConfigMaps(), "default", options, [](const WatchEvent&) { return true; }, cancel);
  });
  ASSERT_TRUE(WaitForOpenWatch());
  fake_.Control("faults", {{"dropWatches", true}});
  watcher.join();
  EXPECT_EQ(result.code(), Code::kUnavailable) << result.ToString();
}

TEST_P(WatchTest, GarbageHugeAndMistypedStreamsAreMalformed) {
  ClientOptions small = FastOptions();
  small.max_response_bytes = 64 * 1024;
  auto client = NewClient(small);
  CancelToken cancel;
  auto watch = [&] {
    return client->Watch(Resource::ConfigMaps(), "default", {}, [](const WatchEvent&) { return true; }, cancel);
  };
  const std::string match = "WATCH /api/v1/namespaces/default/configmaps";
  fake_.Control("faults", {{"garbageNext", 1}, {"match", match}});
  EXPECT_EQ(watch().code(), Code::kMalformed);
  fake_.Control("faults", {{"hugeNext", 1}, {"bytes", 1024 * 1024}, {"match", match}});
  ApiStatus huge = watch();
  EXPECT_EQ(huge.code(), Code::kMalformed) << huge.ToString();
  fake_.Control("faults", {{"wrongContentTypeNext", 1}, {"match", match}});
  EXPECT_EQ(watch().code(), Code::kMalformed);
}

TEST_P(WatchTest, RefusedWatchReturnsTheServersStatus) {
  auto client = NewClient();
  fake_.Control("faults", {{"failNext", 1}, {"code", 429}, {"match", "WATCH /api/v1/"}});
  CancelToken cancel;
  ApiStatus result =
      client->Watch(Resource::ConfigMaps(), "default", {}, [](const WatchEvent&) { return true; }, cancel);
  EXPECT_EQ(result.code(), Code::kTooManyRequests);
  ASSERT_TRUE(result.retry_after());
  EXPECT_EQ(*result.retry_after(), std::chrono::seconds(1));
}

// ---- ListPages and WatchLines: the JSON text as the server sent it ----

TEST_P(ClientTest, ListPagesHandsOverOnePageAtATimeFollowingContinueTokens) {
  auto client = NewClient();
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(client->Create(Resource::ConfigMaps(), "default", ConfigMap("cm-" + std::to_string(i))).ok());
  }
  auto whole = client->List(Resource::ConfigMaps(), "default");
  ASSERT_TRUE(whole.ok());
  fake_.ClearRequests();
  ListOptions options;
  options.limit = 3;
  std::vector<Json> pages;
  ApiStatus listed = client->ListPages(Resource::ConfigMaps(), "default", options, [&](std::string_view page) {
    pages.push_back(Json::parse(page));
    return true;
  });
  ASSERT_TRUE(listed.ok()) << listed.ToString();
  ASSERT_EQ(pages.size(), 3u);
  std::vector<std::string> names, expected;
  for (size_t i = 0; i < pages.size(); ++i) {
    EXPECT_EQ(pages[i]["kind"], "ConfigMapList");
    EXPECT_LE(pages[i]["items"].size(), 3u);
    EXPECT_EQ(pages[i]["metadata"].contains("continue"), i < 2) << "page " << i;
    EXPECT_EQ(pages[i]["metadata"]["resourceVersion"], (*whole)["metadata"]["resourceVersion"]);
    for (const Json& item : pages[i]["items"]) names.push_back(item["metadata"]["name"]);
  }
  for (const Json& item : (*whole)["items"]) expected.push_back(item["metadata"]["name"]);
  EXPECT_EQ(names, expected);
  const std::vector<Json> requests = fake_.RequestsMatching("GET", "/api/v1/namespaces/default/configmaps");
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0].value("query", "").find("continue="), std::string::npos);
  EXPECT_NE(requests[1].value("query", "").find("continue="), std::string::npos);

  // The caller can stop after any page: no further request.
  fake_.ClearRequests();
  int seen = 0;
  EXPECT_TRUE(client->ListPages(Resource::ConfigMaps(), "default", options, [&](std::string_view) {
    ++seen;
    return false;
  }).ok());
  EXPECT_EQ(seen, 1);
  EXPECT_EQ(Count("GET", "/api/v1/namespaces/default/configmaps"), 1u);
}

TEST_P(ClientTest, ListPagesReportsExpiredTokensAndMalformedPages) {
  auto client = NewClient();
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(client->Create(Resource::ConfigMaps(), "default", ConfigMap("cm-" + std::to_string(i))).ok());
  }
  ListOptions options;
  options.limit = 2;
  ApiStatus expired = client->ListPages(Resource::ConfigMaps(), "default", options, [&](std::string_view) {
    fake_.Control("faults", {{"compact", true}});   // the continue token in hand is now too old
    return true;
  });
  EXPECT_EQ(expired.code(), Code::kGone) << expired.ToString();

  const std::string match = "GET /api/v1/namespaces/default/configmaps";
  auto list = [&] {
    return client->ListPages(Resource::ConfigMaps(), "default", {}, [](std::string_view) { return true; });
  };
  fake_.Control("faults", {{"garbageNext", 1}, {"match", match}});
  EXPECT_EQ(list().code(), Code::kMalformed);
  fake_.Control("faults", {{"truncateNext", 1}, {"match", match}});
  EXPECT_EQ(list().code(), Code::kMalformed);
  fake_.Control("faults", {{"wrongContentTypeNext", 1}, {"match", match}});
  EXPECT_EQ(list().code(), Code::kMalformed);
  fake_.Control("faults", {{"failNext", 1}, {"code", 503}, {"match", match}});
  EXPECT_TRUE(list().ok()) << "retried like List";
}

TEST_P(WatchTest, WatchLinesHandsOverTheLinesAsSentErrorEventsIncluded) {
  auto client = NewClient();
  WatchOptions options;
  options.resource_version = ListResourceVersion(*client);
  options.timeout_seconds = 10;
  options.allow_bookmarks = false;
  std::mutex mu;
  std::vector<std::string> lines;
  CancelToken cancel;
  ApiStatus result;
  std::thread watcher([&] {
    result = client->WatchLines(Resource::ConfigMaps(), "default", options, [&](std::string_view line) {
      std::lock_guard<std::mutex> lock(mu);
      lines.emplace_back(line);
      return lines.size() < 3;
    }, cancel);
  });
  ASSERT_TRUE(WaitForOpenWatch());
  auto created = client->Create(Resource::ConfigMaps(), "default", ConfigMap("lined", "ż \"q\""));
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(client->MergePatch(Resource::ConfigMaps(), "default", "lined", {{"data", {{"k", "2"}}}}).ok());
  ASSERT_TRUE(client->Delete(Resource::ConfigMaps(), "default", "lined").ok());
  watcher.join();
  EXPECT_TRUE(result.ok()) << result.ToString();
  ASSERT_EQ(lines.size(), 3u);
  const char* types[] = {"ADDED", "MODIFIED", "DELETED"};
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(lines[i].find('\n'), std::string::npos);
    const Json event = Json::parse(lines[i]);
    EXPECT_EQ(event["type"], types[i]);
    EXPECT_EQ(event["object"]["metadata"]["name"], "lined");
  }
  EXPECT_EQ(Json::parse(lines[0])["object"]["data"]["k"], "ż \"q\"");

  // An expired resourceVersion: the ERROR event is a line like the others.
  ASSERT_TRUE(client->Create(Resource::ConfigMaps(), "default", ConfigMap("two")).ok());
  fake_.Control("faults", {{"compact", true}});
  lines.clear();
  result = client->WatchLines(Resource::ConfigMaps(), "default", options, [&](std::string_view line) {
    lines.emplace_back(line);
    return true;
  }, cancel);
  EXPECT_TRUE(result.ok()) << result.ToString();
  ASSERT_EQ(lines.size(), 1u);
  const Json error = Json::parse(lines[0]);
  EXPECT_EQ(error["type"], "ERROR");
  EXPECT_EQ(error["object"]["code"], 410);
}

TEST_P(WatchTest, WatchLinesLeavesCheckingToTheCallerButNotTheSizeLimit) {
  ClientOptions small = FastOptions();
  small.max_response_bytes = 64 * 1024;
  auto client = NewClient(small);
  CancelToken cancel;
  std::vector<std::string> lines;
  auto watch = [&] {
    lines.clear();
    return client->WatchLines(Resource::ConfigMaps(), "default", {}, [&](std::string_view line) {
      lines.emplace_back(line);
      return true;
    }, cancel);
  };
  const std::string match = "WATCH /api/v1/namespaces/default/configmaps";
  fake_.Control("faults", {{"garbageNext", 1}, {"match", match}});
  // (The fake writes one line of garbage and then drops the connection.)
  ApiStatus garbage = watch();
  EXPECT_EQ(garbage.code(), Code::kUnavailable) << garbage.ToString();
  ASSERT_EQ(lines.size(), 1u) << "not JSON, but handed over: the caller decodes";
  EXPECT_NE(lines[0].find("garbage"), std::string::npos);
  fake_.Control("faults", {{"hugeNext", 1}, {"bytes", 1024 * 1024}, {"match", match}});
  EXPECT_EQ(watch().code(), Code::kMalformed);
  fake_.Control("faults", {{"wrongContentTypeNext", 1}, {"match", match}});
  EXPECT_EQ(watch().code(), Code::kMalformed);
}

TEST_P(WatchTest, TheDefaultListPagesAndWatchLinesGoThroughListAndWatch) {
  auto inner = NewClient();
  // A Client with only the required methods gets ListPages and WatchLines from the base class.
  testing::RequiredMethodsClient client(inner);
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(client.Create(Resource::ConfigMaps(), "default", ConfigMap("cm-" + std::to_string(i))).ok());
  }
  ListOptions paged;
  paged.limit = 2;
  std::vector<Json> pages;
  ASSERT_TRUE(client.ListPages(Resource::ConfigMaps(), "default", paged, [&](std::string_view page) {
    pages.push_back(Json::parse(page));
    return true;
  }).ok());
  ASSERT_EQ(pages.size(), 1u) << "List()'s answer, whole";
  EXPECT_EQ(pages[0]["items"].size(), 3u);
  EXPECT_EQ(pages[0], *inner->List(Resource::ConfigMaps(), "default"));

  WatchOptions options;
  options.resource_version = ListResourceVersion(*inner);
  options.allow_bookmarks = false;
  options.timeout_seconds = 10;
  std::vector<std::string> lines;
  CancelToken cancel;
  ApiStatus result;
  std::thread watcher([&] {
    result = client.WatchLines(Resource::ConfigMaps(), "default", options, [&](std::string_view line) {
      lines.emplace_back(line);
      return lines.size() < 2;
    }, cancel);
  });
  ASSERT_TRUE(WaitForOpenWatch());
  auto created = inner->Create(Resource::ConfigMaps(), "default", ConfigMap("new", "\u2713"));
  ASSERT_TRUE(created.ok());
  ASSERT_TRUE(inner->Delete(Resource::ConfigMaps(), "default", "new").ok());
  watcher.join();
  EXPECT_TRUE(result.ok()) << result.ToString();
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(Json::parse(lines[0]), (Json{{"type", "ADDED"}, {"object", *created}}));
  EXPECT_EQ(Json::parse(lines[1])["type"], "DELETED");

  // An ERROR event ends it with its status, as Watch does.
  fake_.Control("faults", {{"compact", true}});
  ASSERT_TRUE(inner->Create(Resource::ConfigMaps(), "default", ConfigMap("later")).ok());
  fake_.Control("faults", {{"compact", true}});
  lines.clear();
  result = client.WatchLines(Resource::ConfigMaps(), "default", options, [&](std::string_view line) {
    lines.emplace_back(line);
    return true;
  }, cancel);
  EXPECT_EQ(result.code(), Code::kGone) << result.ToString();
  EXPECT_TRUE(lines.empty());
}

// ---- TLS ----

class TlsTest : public ImplementationTest {
 protected:
  void SetUp() override {
    if (!pki_.ok() && pki_.error() == "openssl CLI not found") GTEST_SKIP() << pki_.error();
    ASSERT_TRUE(pki_.ok()) << pki_.error();
    std::vector<std::string> args = pki_.ServerArgs();
    args.insert(args.end(), {"--token", "secret"});
    fake_.emplace(args);
    ASSERT_TRUE(fake_->ok()) << fake_->error();
  }

  std::string Read(const std::string& name) { return testing::ReadFile(pki_.Path(name)); }

  ClusterConfig Verified(const std::string& token = "secret") {
    ClusterConfig config = fake_->Config(token);
    config.insecure_skip_tls_verify = false;
    config.ca_file = pki_.Path("ca.crt");
    return config;
  }

  ApiStatus Probe(const ClusterConfig& config) {
    ClientOptions options = FastOptions();
    options.max_attempts = 1;
    auto client = Create(config, options);
    if (!client.ok()) return client.status();
    auto got = (*client)->Get(Namespaces(), "", "default");
    return got.ok() ? ApiStatus() : got.status();
  }

  // Serves https with a certificate the CA issues for `san` (CN=`name`) and probes it, verified by
  // the CA, addressed as `host`: that status; *insecure_ok says whether insecure then connects.
  ApiStatus ProbeCertificate(const std::string& name, const std::string& san, const std::string& host,
                             bool* insecure_ok) {
    // A setup failure fails the test, and the status matches no expectation.
    auto broken = [](const std::string& why) {
      ADD_FAILURE() << why;
      return ApiStatus(Code::kMalformed, "test setup: " + why);
    };
    if (!pki_.IssueServerCertificate(name, san)) return broken(pki_.error());
    std::vector<std::string> args = pki_.ServerArgs(name);
    args.insert(args.end(), {"--token", "secret"});
    FakeApiServer server(args);
    if (!server.ok()) return broken(server.error());
    ClusterConfig config = server.Config("secret");
    const std::string listening = "127.0.0.1";  // the fake's url()
    const size_t at = config.server.find(listening);
    if (at == std::string::npos) return broken("unexpected fake URL " + config.server);
    config.server.replace(at, listening.size(), host);
    config.insecure_skip_tls_verify = false;
    config.ca_file = pki_.Path("ca.crt");
    const ApiStatus verified = Probe(config);
    config.insecure_skip_tls_verify = true;
    *insecure_ok = Probe(config).ok();
    return verified;
  }

  testing::TestPki pki_;
  std::optional<FakeApiServer> fake_;
};

TEST_P(TlsTest, ServerIsVerifiedWithTheClusterCa) {
  ASSERT_EQ(fake_->url().rfind("https://", 0), 0u);
  EXPECT_TRUE(Probe(Verified()).ok()) << Probe(Verified()).ToString();
  ClusterConfig from_data = Verified();
  from_data.ca_file.clear();
  from_data.ca_data = Read("ca.crt");
  EXPECT_TRUE(Probe(from_data).ok());
}

TEST_P(TlsTest, ServerIsRejectedWithoutTheCaUnlessInsecure) {
  ClusterConfig no_ca = Verified();
  no_ca.ca_file.clear();
  EXPECT_EQ(Probe(no_ca).code(), Code::kUnavailable);
  ClusterConfig wrong_ca = Verified();
  wrong_ca.ca_file = pki_.Path("other-ca.crt");
  EXPECT_EQ(Probe(wrong_ca).code(), Code::kUnavailable);
  ClusterConfig insecure = no_ca;
  insecure.insecure_skip_tls_verify = true;
  EXPECT_TRUE(Probe(insecure).ok());
}

TEST_P(TlsTest, ServerWhoseCertificateNamesAnotherHostIsRejectedUnlessInsecure) {
  // Signed by the cluster CA, but for another name: a CA-signed certificate is not enough.
  ASSERT_TRUE(pki_.IssueServerCertificate("elsewhere", "DNS:elsewhere.example")) << pki_.error();
  std::vector<std::string> args = pki_.ServerArgs("elsewhere");
  args.insert(args.end(), {"--token", "secret"});
  FakeApiServer elsewhere(args);
  ASSERT_TRUE(elsewhere.ok()) << elsewhere.error();
  ClusterConfig config = elsewhere.Config("secret");
  config.insecure_skip_tls_verify = false;
  config.ca_file = pki_.Path("ca.crt");
  const ApiStatus rejected = Probe(config);
  EXPECT_EQ(rejected.code(), Code::kUnavailable) << rejected.ToString();
  config.insecure_skip_tls_verify = true;
  EXPECT_TRUE(Probe(config).ok()) << Probe(config).ToString();
}

TEST_P(TlsTest, ServerAddressedByIpIsMatchedAgainstTheCertificatesIpAddresses) {
  // What an in-cluster config (KUBERNETES_SERVICE_HOST) and kind's kubeconfig address: an IP.
  bool insecure_ok = false;
  ApiStatus only_ip = ProbeCertificate("only-ip", "IP:127.0.0.1", "127.0.0.1", &insecure_ok);
  EXPECT_TRUE(only_ip.ok()) << only_ip.ToString();
  ApiStatus other_ip =
      ProbeCertificate("other-ip", "IP:127.0.0.2,IP:::1,DNS:localhost", "127.0.0.1", &insecure_ok);
  EXPECT_EQ(other_ip.code(), Code::kUnavailable) << other_ip.ToString();
  EXPECT_TRUE(insecure_ok);
  // The address as a DNS name is no IP address SAN.
  ApiStatus as_name = ProbeCertificate("ip-as-name", "DNS:127.0.0.1", "127.0.0.1", &insecure_ok);
  EXPECT_EQ(as_name.code(), Code::kUnavailable) << as_name.ToString();
  // Nor is the CN, for the lite client (as OpenSSL's X509_check_ip, which it used before mbedTLS;
  // mbedTLS by itself would match the CN as a name). cpprestsdk's client verifies with Boost's
  // rfc2818_verification, which does fall back to the CN for an address; that client is left as is.
  ApiStatus as_cn = ProbeCertificate("127.0.0.1", "", "127.0.0.1", &insecure_ok);
  if (std::string_view(GetParam().name) == "Lite") {
    EXPECT_EQ(as_cn.code(), Code::kUnavailable) << as_cn.ToString();
  }
  EXPECT_TRUE(insecure_ok);
}

TEST_P(TlsTest, ServerAddressedByNameIsMatchedAgainstTheCertificatesDnsNames) {
  bool insecure_ok = false;
  ApiStatus named = ProbeCertificate("named", "DNS:localhost", "localhost", &insecure_ok);
  EXPECT_TRUE(named.ok()) << named.ToString();
  ApiStatus wildcard = ProbeCertificate("wildcard", "DNS:*.localhost", "localhost", &insecure_ok);
  EXPECT_EQ(wildcard.code(), Code::kUnavailable) << wildcard.ToString();  // a wildcard needs a label
  ApiStatus by_ip_only = ProbeCertificate("by-ip-only", "IP:127.0.0.1", "localhost", &insecure_ok);
  EXPECT_EQ(by_ip_only.code(), Code::kUnavailable) << by_ip_only.ToString();
  EXPECT_TRUE(insecure_ok);
}

TEST_P(TlsTest, ClientCertificateAuthenticatesWithoutAToken) {
  ClusterConfig anonymous = Verified("");
  EXPECT_EQ(Probe(anonymous).code(), Code::kUnauthorized);
  ClusterConfig with_cert = anonymous;
  with_cert.client_cert_file = pki_.Path("client.crt");
  with_cert.client_key_file = pki_.Path("client.key");
  EXPECT_TRUE(Probe(with_cert).ok()) << Probe(with_cert).ToString();
  ClusterConfig with_data = anonymous;
  with_data.client_cert_data = Read("client.crt");
  with_data.client_key_data = Read("client.key");
  EXPECT_TRUE(Probe(with_data).ok());
}

TEST_P(TlsTest, UnreadableOrInvalidTlsMaterialIsAConfigError) {
  ClusterConfig missing = Verified();
  missing.ca_file = pki_.Path("absent.crt");
  EXPECT_EQ(Probe(missing).code(), Code::kConfig);
  ClusterConfig garbage = Verified();
  garbage.ca_file.clear();
  garbage.ca_data = "-----BEGIN CERTIFICATE-----\nnot a certificate\n-----END CERTIFICATE-----\n";
  EXPECT_EQ(Probe(garbage).code(), Code::kConfig);
  ClusterConfig half = Verified();
  half.client_cert_file = pki_.Path("client.crt");
  EXPECT_EQ(Probe(half).code(), Code::kConfig);
}

// ---- cancellation ----

TEST(CancelTokenTest, SleepForEndsEarlyOnCancel) {
  CancelToken token;
  const auto start = Clock::now();
  EXPECT_FALSE(token.SleepFor(milliseconds(30)));
  EXPECT_GE(SecondsSince(start), 0.029);
  std::thread canceller([&token] {
    std::this_thread::sleep_for(milliseconds(50));
    token.Cancel();
  });
  EXPECT_TRUE(token.SleepFor(milliseconds(10000)));
  EXPECT_LT(SecondsSince(start), 2.0);
  canceller.join();
  EXPECT_TRUE(token.cancelled());
  EXPECT_TRUE(token.SleepFor(milliseconds(10000)));  // at once, once cancelled
}

// ---- construction ----

using ClientCreateTest = ImplementationTest;

TEST_P(ClientCreateTest, RejectsUnusableConfigAndOptions) {
  EXPECT_EQ(Create(ClusterConfig{}).status().code(), Code::kConfig);
  ClusterConfig ftp;
  ftp.server = "ftp://example";
  EXPECT_EQ(Create(ftp).status().code(), Code::kConfig);
  ClusterConfig ok;
  ok.server = "http://127.0.0.1:1";
  ClientOptions bad;
  bad.max_attempts = 0;
  EXPECT_EQ(Create(ok, bad).status().code(), Code::kConfig);
}

TEST_P(ClientCreateTest, UnreachableServerIsUnavailable) {
  ClusterConfig config;
  config.server = "http://127.0.0.1:1";
  ClientOptions options = FastOptions();
  options.max_attempts = 2;
  auto client = Create(config, options);
  ASSERT_TRUE(client.ok());
  EXPECT_EQ((*client)->Get(Namespaces(), "", "default").status().code(), Code::kUnavailable);
}

INSTANTIATE_TEST_SUITE_P(Clients, ClientTest, ::testing::ValuesIn(kImplementations), ImplementationName);
INSTANTIATE_TEST_SUITE_P(Clients, WatchTest, ::testing::ValuesIn(kImplementations), ImplementationName);
INSTANTIATE_TEST_SUITE_P(Clients, ClientAuthTest, ::testing::ValuesIn(kImplementations), ImplementationName);
INSTANTIATE_TEST_SUITE_P(Clients, TlsTest, ::testing::ValuesIn(kImplementations), ImplementationName);
INSTANTIATE_TEST_SUITE_P(Clients, ClientCreateTest, ::testing::ValuesIn(kImplementations), ImplementationName);

}  // namespace
}  // namespace fleet::kube
