// The ConfigMap rules of the startup gate, without an API server.
#include "fleet/sidecar/verdict.h"

#include <gtest/gtest.h>

namespace fleet::sidecar {
namespace {

using Json = nlohmann::json;

Json ConfigMap(const std::string& run, const Json& data) {
  Json cm = {{"apiVersion", "v1"},
             {"kind", "ConfigMap"},
             {"metadata", {{"name", "j-endpoints"}, {"namespace", "default"}, {"annotations", {{kRunAnnotation, run}}}}}};
  if (!data.is_null()) cm["data"] = data;
  return cm;
}

GateTarget Target(const std::string& role, int run = 3, const std::string& mode = "") {
  return GateTarget{"default", "j-endpoints", role, run, mode};
}

TEST(SidecarVerdictTest, AbsentAndOtherRuns) {
  EXPECT_EQ(EvaluateConfigMap(nullptr, Target("worker")).state, ConfigMapState::kAbsent);
  const Json null;
  EXPECT_EQ(EvaluateConfigMap(&null, Target("worker")).state, ConfigMapState::kAbsent);

  Json older = ConfigMap("2", Json::object());
  auto v = EvaluateConfigMap(&older, Target("worker"));
  EXPECT_EQ(v.state, ConfigMapState::kOtherRun);
  EXPECT_EQ(v.detail, "it holds run 2");
  Json newer = ConfigMap("4", Json::object());
  v = EvaluateConfigMap(&newer, Target("server"));
  EXPECT_EQ(v.state, ConfigMapState::kOtherRun);
  EXPECT_NE(v.detail.find("it holds run 4, newer"), std::string::npos) << v.detail;

  Json unannotated = ConfigMap("3", Json::object());
  unannotated["metadata"].erase("annotations");
  v = EvaluateConfigMap(&unannotated, Target("worker"));
  EXPECT_EQ(v.state, ConfigMapState::kOtherRun);
  EXPECT_NE(v.detail.find("no fleet.paddlepaddle.org/run annotation"), std::string::npos);
  for (const Json& bad_run : {Json("three"), Json("-3"), Json(""), Json(3), Json::array()}) {
    Json cm = ConfigMap("3", Json::object());
    cm["metadata"]["annotations"][kRunAnnotation] = bad_run;
    EXPECT_EQ(EvaluateConfigMap(&cm, Target("worker")).state, ConfigMapState::kOtherRun) << bad_run;
  }
  Json no_metadata = {{"kind", "ConfigMap"}};
  EXPECT_EQ(EvaluateConfigMap(&no_metadata, Target("worker")).state, ConfigMapState::kOtherRun);
}

TEST(SidecarVerdictTest, CollectiveWorkersAndServersNeedOnlyTheRun) {
  Json collective = ConfigMap("3", {{"PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:6170,10.0.0.2:6170"}});
  auto v = EvaluateConfigMap(&collective, Target("worker"));
  EXPECT_EQ(v.state, ConfigMapState::kReady);
  EXPECT_TRUE(v.servers.empty());
  // A one-pod job shares nothing: the API returns the ConfigMap without data.
  Json empty = ConfigMap("3", Json());
  EXPECT_EQ(EvaluateConfigMap(&empty, Target("worker")).state, ConfigMapState::kReady);

  Json ps = ConfigMap("3", {{"PADDLE_PSERVERS_IP_PORT_LIST", "10.0.0.1:6170,10.0.0.2:6170"},
                            {"PADDLE_TRAINER_ENDPOINTS", "10.0.0.3:6170"}});
  v = EvaluateConfigMap(&ps, Target("server"));
  EXPECT_EQ(v.state, ConfigMapState::kReady);
  EXPECT_TRUE(v.servers.empty());
  v = EvaluateConfigMap(&ps, Target("worker", 3, "collective"));
  EXPECT_TRUE(v.servers.empty());
}

TEST(SidecarVerdictTest, TrainersWaitForTheServersOfTheirKey) {
  Json ps = ConfigMap("3", {{"PADDLE_PSERVERS_IP_PORT_LIST", "10.0.0.1:6170,s-1.j.default.svc.cluster.local:6170"}});
  auto v = EvaluateConfigMap(&ps, Target("worker"));
  ASSERT_EQ(v.state, ConfigMapState::kReady) << v.detail;
  EXPECT_EQ(v.server_key, "PADDLE_PSERVERS_IP_PORT_LIST");
  ASSERT_EQ(v.servers.size(), 2u);
  EXPECT_EQ(v.servers[0].ToString(), "10.0.0.1:6170");
  EXPECT_EQ(v.servers[1].ToString(), "s-1.j.default.svc.cluster.local:6170");
  EXPECT_EQ(EvaluateConfigMap(&ps, Target("heter1")).servers.size(), 2u);

  // Role-suffixed keys: this role's wins; another role's is none of its business.
  Json suffixed = ConfigMap("3", {{"PADDLE_PSERVERS_IP_PORT_LIST", "10.0.0.1:6170"},
                                  {"PADDLE_PSERVERS_IP_PORT_LIST.heter1", "10.0.0.9:6170"},
                                  {"PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST.worker", "not an endpoint list"}});
  v = EvaluateConfigMap(&suffixed, Target("heter1"));
  ASSERT_EQ(v.state, ConfigMapState::kReady) << v.detail;
  EXPECT_EQ(v.server_key, "PADDLE_PSERVERS_IP_PORT_LIST.heter1");
  ASSERT_EQ(v.servers.size(), 1u);
  EXPECT_EQ(v.servers[0].ToString(), "10.0.0.9:6170");
  v = EvaluateConfigMap(&suffixed, Target("worker"));
  EXPECT_EQ(v.state, ConfigMapState::kMalformed);  // its own (suffixed) list is garbage
  EXPECT_NE(v.detail.find("PADDLE_NEXT_HETER_TRAINER_IP_PORT_LIST.worker"), std::string::npos) << v.detail;

  Json only_other_role = ConfigMap("3", {{"PADDLE_PSERVERS_IP_PORT_LIST.heter1", "10.0.0.9:6170"}});
  v = EvaluateConfigMap(&only_other_role, Target("worker"));
  EXPECT_EQ(v.state, ConfigMapState::kReady);
  EXPECT_TRUE(v.servers.empty());
}

TEST(SidecarVerdictTest, ModePsRequiresTheServerList) {
  Json none = ConfigMap("3", {{"PADDLE_TRAINER_ENDPOINTS", "10.0.0.3:6170"}});
  EXPECT_EQ(EvaluateConfigMap(&none, Target("worker")).state, ConfigMapState::kReady);
  auto v = EvaluateConfigMap(&none, Target("worker", 3, "ps"));
  EXPECT_EQ(v.state, ConfigMapState::kMalformed);
  EXPECT_NE(v.detail.find("PADDLE_PSERVERS_IP_PORT_LIST"), std::string::npos);
  EXPECT_EQ(EvaluateConfigMap(&none, Target("server", 3, "ps")).state, ConfigMapState::kReady);
}

TEST(SidecarVerdictTest, MalformedConfigMapsAreRefusedNeverThrow) {
  const std::vector<std::pair<Json, std::string>> cases = {
      {ConfigMap("3", "a string"), "data is not a map"},
      {ConfigMap("3", Json::array({1, 2})), "data is not a map"},
      {ConfigMap("3", {{"PADDLE_PSERVERS_IP_PORT_LIST", 42}}), "not a string"},
      {ConfigMap("3", {{"PADDLE_PSERVERS_IP_PORT_LIST", "garbage::"}}), "PADDLE_PSERVERS_IP_PORT_LIST"},
      {ConfigMap("3", {{"PADDLE_PSERVERS_IP_PORT_LIST", "10.0.0.1"}}), "has no port"},
      {ConfigMap("3", {{"PADDLE_PSERVERS_IP_PORT_LIST", "10.0.0.1:6170,10.0.0.1:6170"}}), "twice"},
      {ConfigMap("3", {{"PADDLE_PSERVERS_IP_PORT_LIST", ""}}), "empty"},
      {ConfigMap("3", {{"PADDLE_TRAINER_ENDPOINTS", "a:1,,b:2"}}), "PADDLE_TRAINER_ENDPOINTS"},
      {ConfigMap("3", {{"PADDLE_GLOO_HTTP_ENDPOINT", "nohost"}}), "PADDLE_GLOO_HTTP_ENDPOINT"},
      {ConfigMap("3", {{"DISTRIBUTED_TRAINER_ENDPOINTS", std::string("a:1\x01")}}), "DISTRIBUTED_TRAINER_ENDPOINTS"},
      {Json("not an object"), "not a JSON object"},
  };
  for (const auto& [cm, fragment] : cases) {
    ConfigMapVerdict v;
    ASSERT_NO_THROW(v = EvaluateConfigMap(&cm, Target("worker"))) << cm;
    EXPECT_EQ(v.state, ConfigMapState::kMalformed) << cm;
    EXPECT_NE(v.detail.find(fragment), std::string::npos) << cm << " -> " << v.detail;
    EXPECT_EQ(v.detail.find('\x01'), std::string::npos);  // control characters are not echoed
  }
  // Keys that are not endpoint lists are not judged.
  Json other = ConfigMap("3", {{"PADDLE_TRAINERS_NUM", "whatever"}, {"README", ""}});
  EXPECT_EQ(EvaluateConfigMap(&other, Target("worker")).state, ConfigMapState::kReady);
}

// In-place restart: the run a trainer may pass into is the run annotation unless an equal barrier
// holds it; an unreadable barrier holds it too.
TEST(SidecarVerdictTest, TheOpenRunIsTheRunAnnotationUnlessTheBarrierHoldsIt) {
  auto read = [](const Json& annotations) {
    const Json cm = {{"metadata", {{"name", "j-endpoints"}, {"annotations", annotations}}}};
    return ReadRunAnnotations(&cm);
  };
  const std::string barrier = api::kBarrierAnnotation;
  EXPECT_EQ(read({{kRunAnnotation, "4"}}), (RunAnnotations{4, std::nullopt}));
  EXPECT_EQ(read({{kRunAnnotation, "4"}}).OpenRun(), 4);
  EXPECT_EQ(read({{kRunAnnotation, "4"}, {barrier, "4"}}), (RunAnnotations{4, 4}));
  EXPECT_EQ(read({{kRunAnnotation, "4"}, {barrier, "4"}}).OpenRun(), std::nullopt);
  EXPECT_EQ(read({{kRunAnnotation, "5"}, {barrier, "4"}}).OpenRun(), 5);   // a barrier of another run holds nothing
  EXPECT_EQ(read({{kRunAnnotation, "4"}, {barrier, "soon"}}), (RunAnnotations{4, 4}));
  EXPECT_EQ(read({{kRunAnnotation, "4"}, {barrier, 4}}).OpenRun(), std::nullopt);
  EXPECT_EQ(read({{kRunAnnotation, "-4"}}), (RunAnnotations{}));
  EXPECT_EQ(read({{kRunAnnotation, 4}}).OpenRun(), std::nullopt);
  EXPECT_EQ(read(Json::object()), (RunAnnotations{}));
  EXPECT_EQ(read("not a map"), (RunAnnotations{}));
  EXPECT_EQ(ReadRunAnnotations(nullptr), (RunAnnotations{}));
  const Json odd = Json::array();
  EXPECT_EQ(ReadRunAnnotations(&odd), (RunAnnotations{}));
}

}  // namespace
}  // namespace fleet::sidecar
