// End to end: MultiKueue (docs/kueue.md "MultiKueue", docs/design/kueue.md 3), the real
// fleet-operator against the fake API server's Kueue stand-in, playing each of MultiKueue's two
// clusters in turn. The test plays MultiKueue itself: on the manager it writes the job's status
// (as the adapter mirrors the worker's) and marks the Workload Finished; on a worker it makes the
// Workload first and then the job's copy that names it.
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "builders.h"
#include "harness.h"

namespace fleet::op::e2e {
namespace {

using testing::JobBuilder;

constexpr const char* kQueueLabel = "kueue.x-k8s.io/queue-name";
constexpr const char* kPrebuiltLabel = "kueue.x-k8s.io/prebuilt-workload-name";
constexpr const char* kMultiKueue = "kueue.x-k8s.io/multikueue";

class MultiKueueE2eTest : public OperatorE2eTest {
 protected:
  void SetUp() override {
    OperatorE2eTest::SetUp();
    if (!EnableKueue()) GTEST_SKIP() << "Kueue's CRDs not found (set FLEET_KUEUE_CRDS)";
    CreateResourceFlavor("default");
    CreateClusterQueue("pool", {"cpu", "memory"}, {{"default", {{"cpu", "64"}, {"memory", "256Gi"}}}});
    CreateLocalQueue("team", "pool");
    ASSERT_TRUE(WaitReady(StartOperator()));
  }

  // Nothing of `job` in the cluster but the job and its Workload: no pod, Service, ConfigMap,
  // ServiceAccount, and no event about it.
  void ExpectOnlyTheWorkload(const std::string& job) {
    EXPECT_TRUE(Pods(job).empty());
    for (const char* plural : {"services", "serviceaccounts", "configmaps"}) {
      for (const Json& object : api().List(CorePath(ns(), plural), "fleet.paddlepaddle.org/job-name=" + job)) {
        ADD_FAILURE() << plural << " " << NameOf(object) << " exists";
      }
    }
    for (const Json& event : api().List(CorePath(ns(), "events"))) {
      EXPECT_NE(event.value("involvedObject", Json::object()).value("name", ""), job) << event.dump();
    }
  }
};

TEST_F(MultiKueueE2eTest, OnTheManagerADispatchedJobGetsItsWorkloadAndNothingElse) {
  ASSERT_FALSE(CreateJob(JobBuilder("dispatched").Collective(2).Label(kQueueLabel, "team").Set("/spec/managedBy", kMultiKueue).Obj())
                   .is_null());
  const Json admitted = WaitForWorkload("dispatched", "admitted", [](const Json& wl) { return IsConditionTrue(wl, "Admitted"); });
  ASSERT_FALSE(admitted.is_null());
  EXPECT_EQ(admitted["spec"].value("queueName", ""), "team");
  EXPECT_EQ(admitted["metadata"].value("finalizers", Json::array()), Json::array({"kueue.x-k8s.io/resource-in-use"}));

  // MultiKueue's adapter mirrors the worker's status, through the status subresource.
  const Json mirrored = {{"phase", "Running"}, {"message", "running on worker-1"}, {"run", 1}};
  ASSERT_EQ(api().MergePatch(JobPath(ns(), "dispatched") + "/status", {{"status", mirrored}}).status, 200);
  const std::string written = JobStatus("dispatched").dump();
  fake().ClearRequests();

  // MultiKueue copies the worker's Finished onto the Workload: the operator (which plans again on
  // the Workload's change) removes Kueue's finalizer.
  Json conditions = admitted["status"]["conditions"];
  conditions.push_back({{"type", "Finished"}, {"status", "True"}, {"reason", "Succeeded"}, {"message", "done on worker-1"},
                        {"lastTransitionTime", "2026-11-28T10:00:00Z"}});
  ASSERT_EQ(api().MergePatch(KueuePath(ns(), "workloads", NameOf(admitted)) + "/status", {{"status", {{"conditions", conditions}}}}).status,
            200);
  Eventually("the finished Workload released", [&](std::string& state) {
    const std::vector<Json> workloads = Workloads("dispatched");
    if (workloads.size() != 1) return false;
    state = workloads[0]["metadata"].dump();
    return workloads[0]["metadata"].value("finalizers", Json::array()).empty();
  });

  EXPECT_EQ(JobStatus("dispatched").dump(), written) << "the status is the adapter's";
  ExpectOnlyTheWorkload("dispatched");
  for (const Json& r : fake().Requests()) {
    if (r.value("method", "") == "GET") continue;
    EXPECT_EQ(r.value("path", "").find("/fleetjobs/dispatched"), std::string::npos) << r.value("method", "") << " " << r.value("path", "");
  }
}

// What MultiKueue makes on the worker before the job's copy: the manager's Workload (its labels
// too), with the origin's label.
Json PrebuiltWorkload(const std::string& name, const std::string& job, int workers) {
  const Json container = {{"name", "paddle"}, {"image", "paddle"}, {"resources", {{"requests", {{"cpu", "1"}}}}}};
  return {{"apiVersion", "kueue.x-k8s.io/v1beta2"},
          {"kind", "Workload"},
          {"metadata", {{"name", name},
                        {"labels", {{"fleet.paddlepaddle.org/job-name", job},
                                    {"kueue.x-k8s.io/job-uid", "uid-of-the-managers-job"},
                                    {"kueue.x-k8s.io/multikueue-origin", "manager"}}}}},
          {"spec", {{"queueName", "team"},
                    {"podSets", Json::array({{{"name", "worker"}, {"count", workers},
                                              {"template", {{"spec", {{"containers", Json::array({container})}}}}}}})}}}};
}

TEST_F(MultiKueueE2eTest, OnAWorkerTheCopyAdoptsThePrebuiltWorkloadAndRuns) {
  const std::string prebuilt = "fleetjob-copied-1a2b3";
  ASSERT_EQ(api().Create(KueuePath(ns(), "workloads"), PrebuiltWorkload(prebuilt, "copied", 2)).status, 201);
  const Json job = CreateJob(JobBuilder("copied").Collective(2).Label(kQueueLabel, "team").Label(kPrebuiltLabel, prebuilt).Obj());
  ASSERT_FALSE(job.is_null());
  const std::string uid = UidOf(*GetJob("copied"));

  const Json adopted = WaitForWorkload("copied", "adopted", [&](const Json& wl) {
    const Json owners = wl["metadata"].value("ownerReferences", Json::array());
    return !owners.empty() && owners[0].value("uid", "") == uid && owners[0].value("controller", false) &&
           LabelOf(wl, "kueue.x-k8s.io/job-uid") == uid;
  });
  ASSERT_FALSE(adopted.is_null());
  EXPECT_EQ(NameOf(adopted), prebuilt);

  const std::vector<Json> pods = WaitForRunningPods("copied", 2, 0);
  ASSERT_EQ(pods.size(), 2u);
  for (const Json& pod : pods) {
    EXPECT_EQ(pod["metadata"]["annotations"].value("kueue.x-k8s.io/workload", ""), prebuilt) << NameOf(pod);
  }
  EXPECT_EQ(Workloads("copied").size(), 1u) << "the operator made no Workload of its own";
  EXPECT_EQ(JobStatus("copied")["queue"].value("workload", ""), prebuilt);
}

}  // namespace
}  // namespace fleet::op::e2e
