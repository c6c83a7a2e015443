// The TrainingProgress pod condition: the patch (pure), and the writer against the fake API server:
// it keeps the kubelet's conditions, writes state changes only, retries conflicts and failures.
#include "fleet/sidecar/condition.h"

#include <gtest/gtest.h>

#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>

#include "fake_apiserver_fixture.h"
#include "sidecar_process.h"

namespace fleet::sidecar {
namespace {

using Json = nlohmann::json;
using kube::testing::FakeApiServer;
using kube::testing::HttpConnection;
using testing::Eventually;
using std::chrono::milliseconds;

Json PodWithConditions(const Json& conditions) {
  return {{"metadata", {{"name", "p"}, {"resourceVersion", "42"}}}, {"status", {{"conditions", conditions}}}};
}

TEST(ConditionPatchTest, AddsOrReplacesOnlyItsOwnCondition) {
  const Json ready = {{"type", "Ready"}, {"status", "True"}, {"lastTransitionTime", "2026-01-01T00:00:00Z"}};
  PodCondition c{false, "Stalled", "rank 3 (pod p) has reported no step for 10m0s"};
  auto patch = ConditionPatch(PodWithConditions(Json::array({ready})), c, "2026-01-02T00:00:00Z");
  ASSERT_TRUE(patch);
  EXPECT_EQ((*patch)["metadata"]["resourceVersion"], "42");   // conditional on what was read
  const Json& conditions = (*patch)["status"]["conditions"];
  ASSERT_EQ(conditions.size(), 2u);
  EXPECT_EQ(conditions[0], ready);                               // the kubelet's, untouched
  EXPECT_EQ(conditions[1], (Json{{"type", "fleet.paddlepaddle.org/TrainingProgress"},
                                 {"status", "False"},
                                 {"reason", "Stalled"},
                                 {"message", "rank 3 (pod p) has reported no step for 10m0s"},
                                 {"lastTransitionTime", "2026-01-02T00:00:00Z"},
                                 {"lastProbeTime", nullptr}}));

  // Already there: nothing to write. Same status, other reason: the transition time stays.
  const Json ours = conditions[1];
  EXPECT_FALSE(ConditionPatch(PodWithConditions(Json::array({ready, ours})), c, "2026-01-03T00:00:00Z"));
  PodCondition other{false, "Stalled", "ranks 3, 4 (pod p) have reported no step for up to 11m0s"};
  patch = ConditionPatch(PodWithConditions(Json::array({ours, ready})), other, "2026-01-03T00:00:00Z");
  ASSERT_TRUE(patch);
  EXPECT_EQ((*patch)["status"]["conditions"][0]["lastTransitionTime"], "2026-01-02T00:00:00Z");
  EXPECT_EQ((*patch)["status"]["conditions"][1], ready);
  PodCondition back{true, "Progressing", "rank 3 (pod p) reports training steps"};
  patch = ConditionPatch(PodWithConditions(Json::array({ours})), back, "2026-01-04T00:00:00Z");
  ASSERT_TRUE(patch);
  EXPECT_EQ((*patch)["status"]["conditions"][0]["lastTransitionTime"], "2026-01-04T00:00:00Z");
  // A pod without status.
  patch = ConditionPatch(Json{{"metadata", {{"name", "p"}}}}, back, "2026-01-04T00:00:00Z");
  ASSERT_TRUE(patch);
  EXPECT_EQ((*patch)["status"]["conditions"].size(), 1u);
  EXPECT_FALSE(patch->contains("metadata"));
}

class ConditionWriterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.ok()) << fake_.error();
    HttpConnection http(fake_.url());
    const Json pod = {{"apiVersion", "v1"},
                      {"kind", "Pod"},
                      {"metadata", {{"name", "j-worker-0"}, {"namespace", "default"}}},
                      {"spec", {{"containers", Json::array({{{"name", "main"}, {"image", "busybox"}}})}}}};
    auto created = http.Send("POST", "/api/v1/namespaces/default/pods", pod.dump(), {{"Content-Type", "application/json"}});
    ASSERT_TRUE(created);
    ASSERT_EQ(created->status, 201) << created->body;
    // The kubelet stand-in runs it: it has the kubelet's conditions.
    ASSERT_TRUE(Eventually([&] { return Conditions().size() >= 2; })) << GetPod().dump();
    kube::ClientOptions options;
    options.max_attempts = 1;
    client_ = kube::Client::Create(fake_.Config(), options).value();
  }

  Json GetPod() {
    HttpConnection http(fake_.url());
    auto r = http.Send("GET", "/api/v1/namespaces/default/pods/j-worker-0");
    return r && r->status == 200 ? Json::parse(r->body) : Json();
  }
  std::vector<Json> Conditions() {
    const Json pod = GetPod();
    if (!pod.is_object() || !pod.contains("status")) return {};
    return pod["status"].value("conditions", std::vector<Json>());
  }
  Json Ours() {
    for (const Json& c : Conditions()) {
      if (c.value("type", "") == kProgressConditionType) return c;
    }
    return Json::object();
  }
  std::unique_ptr<ConditionWriter> Writer(milliseconds min_interval = milliseconds(50)) {
    ConditionWriterConfig config;
    config.ns = "default";
    config.pod = "j-worker-0";
    config.job = "j";
    config.role = "worker";
    config.min_interval = min_interval;
    config.retry_base = milliseconds(50);
    config.retry_max = milliseconds(200);
    return std::make_unique<ConditionWriter>(client_, config, Logger("test", [this](const std::string& line) {
                                               std::lock_guard<std::mutex> lock(log_mu_);
                                               log_ += line;
                                             }),
                                             registry_);
  }
  double Writes(const std::string& result) {
    const std::string page = prometheus::TextSerializer().Serialize(registry_->Collect());
    const std::string prefix = "fleet_sidecar_condition_writes_total{";
    for (size_t at = page.find(prefix); at != std::string::npos; at = page.find(prefix, at + 1)) {
      const std::string line = page.substr(at, page.find('\n', at) - at);
      if (line.find("result=\"" + result + "\"") != std::string::npos) return std::stod(line.substr(line.rfind(' ') + 1));
    }
    return -1;
  }

  FakeApiServer fake_;
  std::shared_ptr<kube::Client> client_;
  std::shared_ptr<prometheus::Registry> registry_ = std::make_shared<prometheus::Registry>();
  std::mutex log_mu_;
  std::string log_;
};

TEST_F(ConditionWriterTest, WritesStateChangesAndKeepsTheKubeletsConditions) {
  const size_t kubelet_conditions = Conditions().size();
  auto writer = Writer();
  writer->Start();
  writer->Desire({true, "AwaitingFirstStep", "no training step reported yet by rank 0 (pod j-worker-0)"});
  ASSERT_TRUE(Eventually([&] { return Ours().value("reason", "") == "AwaitingFirstStep"; })) << GetPod().dump();
  EXPECT_EQ(Ours().value("status", ""), "True");
  EXPECT_EQ(Conditions().size(), kubelet_conditions + 1);

  // A new message alone is not written; a new state is.
  writer->Desire({true, "AwaitingFirstStep", "another message"});
  writer->Desire({false, "Stalled", "rank 0 (pod j-worker-0) has reported no step for 5s"});
  ASSERT_TRUE(Eventually([&] { return Ours().value("reason", "") == "Stalled"; })) << GetPod().dump();
  EXPECT_EQ(Ours().value("status", ""), "False");
  EXPECT_EQ(Ours().value("message", ""), "rank 0 (pod j-worker-0) has reported no step for 5s");
  EXPECT_EQ(Conditions().size(), kubelet_conditions + 1);
  EXPECT_TRUE(Eventually([&] { return Writes("ok") == 2; })) << Writes("ok");  // counted after the answer
  EXPECT_TRUE(writer->Stop(std::chrono::seconds(5)));
  const std::string requests = fake_.Requests().dump();
  EXPECT_NE(requests.find("/api/v1/namespaces/default/pods/j-worker-0/status"), std::string::npos);
  std::lock_guard<std::mutex> lock(log_mu_);
  EXPECT_NE(log_.find("pod condition TrainingProgress=False (Stalled)"), std::string::npos) << log_;
}

TEST_F(ConditionWriterTest, AtMostOneWritePerIntervalTheLatestStateWins) {
  auto writer = Writer(milliseconds(1500));
  writer->Start();
  writer->Desire({true, "AwaitingFirstStep", "m"});
  ASSERT_TRUE(Eventually([&] { return Ours().value("reason", "") == "AwaitingFirstStep"; }));
  const auto written = std::chrono::steady_clock::now();
  writer->Desire({true, "Progressing", "m"});
  writer->Desire({false, "Stalled", "m"});
  writer->Desire({true, "Progressing", "m2"});   // flapping within the interval: one write, the last
  ASSERT_TRUE(Eventually([&] { return Ours().value("reason", "") == "Progressing"; }));
  EXPECT_GE(std::chrono::steady_clock::now() - written, milliseconds(1400));
  EXPECT_TRUE(Eventually([&] { return Writes("ok") == 2; })) << Writes("ok");  // counted after the answer
}

TEST_F(ConditionWriterTest, ConflictsAndFailuresAreRetried) {
  const std::string status_path = "/api/v1/namespaces/default/pods/j-worker-0/status";
  fake_.Control("faults", {{"failNext", 2}, {"code", 409}, {"match", "PATCH " + status_path}});
  auto writer = Writer();
  writer->Start();
  writer->Desire({true, "Progressing", "rank 0 (pod j-worker-0) reports training steps"});
  ASSERT_TRUE(Eventually([&] { return Ours().value("reason", "") == "Progressing"; })) << GetPod().dump();
  EXPECT_EQ(Writes("error"), 0);   // conflicts: read again and patch again, within one write

  fake_.Control("faults", {{"failNext", 3}, {"code", 500}, {"match", "PATCH " + status_path}});
  writer->Desire({false, "Stalled", "s"});
  ASSERT_TRUE(Eventually([&] { return Ours().value("reason", "") == "Stalled"; }, std::chrono::seconds(10)));
  // The server holds the patch a moment before the writer hears the answer and clears its error.
  EXPECT_TRUE(Eventually([&] { return writer->last_error().empty(); })) << writer->last_error();
  EXPECT_EQ(Writes("error"), 3);
  std::lock_guard<std::mutex> lock(log_mu_);
  EXPECT_NE(log_.find("cannot patch the status of pod default/j-worker-0"), std::string::npos) << log_;
}

}  // namespace
}  // namespace fleet::sidecar
