// End to end: an in-place restart (spec.runPolicy.restartStrategy: InPlace) with the real
// fleet-operator and the test control plane's kubelet, which restarts a failed container in its pod
// and plays each pod's sidecar (tests/controlplane/fakeapi/trainers.py: the gate, the liveness kill
// of a superseded trainer, the Trainer condition).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

#include "builders.h"
#include "fleet/api/in_place.h"
#include "harness.h"

namespace fleet::op::e2e {
namespace {

using testing::JobBuilder;

using InPlaceE2eTest = OperatorE2eTest;

// The run each pod's trainer runs in (its Trainer condition Running), by pod name.
std::map<std::string, int> TrainerRuns(const std::vector<Json>& pods) {
  std::map<std::string, int> runs;
  for (const Json& pod : pods) {
    const Json c = ConditionOf(pod.value("status", Json::object()), api::kTrainerConditionType);
    const auto report = api::TrainerReport::FromCondition(c.value("reason", ""), c.value("message", ""));
    if (report && report->state == api::TrainerState::kRunning) runs[pod["metadata"].value("name", "")] = report->run;
  }
  return runs;
}

std::map<std::string, std::string> Uids(const std::vector<Json>& pods) {
  std::map<std::string, std::string> uids;
  for (const Json& pod : pods) uids[pod["metadata"].value("name", "")] = pod["metadata"].value("uid", "");
  return uids;
}

TEST_F(InPlaceE2eTest, AKilledTrainerRestartsInItsPodAndTheOthersFollow) {
  StartOperator({"--sidecar-mode=native"});
  ASSERT_FALSE(CreateJob(JobBuilder("ip").Ps(1, 3).RestartPolicy("worker", "OnFailure").RestartPolicy("server", "OnFailure")
                             .Set("/spec/runPolicy/restartStrategy", "InPlace").Obj()).is_null());
  ASSERT_EQ(WaitForRunningPods("ip", 4, 0).size(), 4u);
  const Json running = WaitForPhase("ip", "Running");
  ASSERT_FALSE(running.is_null());
  const int run = running["status"].value("run", -1);
  const auto before = Uids(Pods("ip"));

  PodAction("ip-worker-1", {{"action", "end"}, {"exitCode", 137}});
  // Done: running in the new run, and the pods relabelled into it (status.inPlaceRestart gone).
  const Json restarted = WaitForJob("ip", "to run again in place", [&](const Json& j) {
    const Json& st = j.value("status", Json::object());
    return st.value("phase", "") == "Running" && st.value("run", 0) == run + 1 && !st.contains("inPlaceRestart");
  });
  ASSERT_FALSE(restarted.is_null());
  EXPECT_EQ(restarted["status"].value("restartCount", -1), 1);
  EXPECT_EQ(restarted["status"].value("inPlaceRestarts", -1), 1);
  const std::map<std::string, int> all_in_new_run = {{"ip-server-0", run + 1}, {"ip-worker-0", run + 1},
                                                     {"ip-worker-1", run + 1}, {"ip-worker-2", run + 1}};
  // The sidecars report their trainers Running after the gates open, each in its own time.
  std::vector<Json> pods;
  EXPECT_TRUE(Eventually("every trainer running in the new run", [&](std::string& state) {
    pods = Pods("ip");
    state = Json(TrainerRuns(pods)).dump();
    return TrainerRuns(pods) == all_in_new_run;
  }));
  EXPECT_EQ(Uids(pods), before) << "no pod was deleted or made";
  for (const Json& pod : pods) {
    EXPECT_EQ(pod["metadata"]["labels"].value(kRunLabel, ""), std::to_string(run + 1));
    EXPECT_EQ(pod["status"]["containerStatuses"][0].value("restartCount", -1), 1) << pod["metadata"]["name"];
  }
  const std::optional<Json> cm = EndpointsConfigMap("ip");
  ASSERT_TRUE(cm);
  EXPECT_EQ((*cm)["metadata"]["annotations"].value(kRunAnnotation, ""), std::to_string(run + 1));
  EXPECT_FALSE((*cm)["metadata"]["annotations"].contains(api::kBarrierAnnotation));
}

}  // namespace
}  // namespace fleet::op::e2e
