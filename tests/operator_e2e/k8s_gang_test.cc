// End to end: spec.scheduling.gang Kubernetes, the real operator against a fake API server that
// serves the scheduling.k8s.io Workload API (--workload-api v1alpha2, as a Kubernetes 1.36 cluster
// with the GenericWorkload gate and runtime-config) or does not (the default, as a cluster without).
#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "builders.h"
#include "harness.h"

namespace fleet::op::e2e {
namespace {

using testing::JobBuilder;

std::string SchedulingPath(const std::string& ns, const std::string& plural, const std::string& name = "") {
  return "/apis/scheduling.k8s.io/v1alpha2/namespaces/" + ns + "/" + plural + (name.empty() ? "" : "/" + name);
}

int64_t MinCount(const Json& policy) { return policy.value("gang", Json::object()).value("minCount", int64_t{0}); }

class K8sGangE2eTest : public OperatorE2eTest {};

class K8sGangServedE2eTest : public OperatorE2eTest {
 protected:
  K8sGangServedE2eTest() { fake_args_ = {"--workload-api", "v1alpha2"}; }

  std::vector<std::string> PodGroupNames(const std::string& job) {
    std::vector<std::string> names;
    for (const Json& pg : api().List(SchedulingPath(ns(), "podgroups"), "fleet.paddlepaddle.org/job-name=" + job)) {
      names.push_back(NameOf(pg));
    }
    return names;
  }
  // The live pods of `job` once there are `count` of them, all of run `run`.
  std::vector<Json> RunPods(const std::string& job, size_t count, int run) {
    std::vector<Json> pods;
    EXPECT_TRUE(Eventually("the " + std::to_string(count) + " pods of run " + std::to_string(run), [&](std::string& state) {
      pods = LivePods(job);
      state = std::to_string(pods.size()) + " live pods";
      for (const Json& pod : pods) {
        if (LabelOf(pod, "fleet.paddlepaddle.org/run") != std::to_string(run)) return false;
      }
      return pods.size() == count;
    }));
    return pods;
  }
};

TEST_F(K8sGangServedE2eTest, TheWorkloadAndEachRunsPodGroupComeWithPodsNamingIt) {
  StartOperator();
  ASSERT_FALSE(CreateJob(JobBuilder("gang").Ps(1, 2).Gang("Kubernetes").Obj()).is_null());

  // The Workload: one template of the whole job, controlled by the FleetJob.
  std::optional<Json> workload;
  ASSERT_TRUE(Eventually("the Workload", [&](std::string&) {
    workload = api().Get(SchedulingPath(ns(), "workloads", "gang"));
    return workload.has_value();
  }));
  EXPECT_EQ((*workload)["spec"]["controllerRef"],
            (Json{{"apiGroup", "fleet.paddlepaddle.org"}, {"kind", "FleetJob"}, {"name", "gang"}}));
  ASSERT_EQ((*workload)["spec"]["podGroupTemplates"].size(), 1u);
  EXPECT_EQ((*workload)["spec"]["podGroupTemplates"][0]["name"], "job");
  EXPECT_EQ(MinCount((*workload)["spec"]["podGroupTemplates"][0]["schedulingPolicy"]), 3);
  EXPECT_EQ((*workload)["metadata"]["ownerReferences"][0].value("kind", ""), "FleetJob");

  // Run 0's PodGroup, and pods that name it; nothing waits for an admission.
  std::optional<Json> pod_group;
  ASSERT_TRUE(Eventually("run 0's PodGroup", [&](std::string&) {
    pod_group = api().Get(SchedulingPath(ns(), "podgroups", "gang-r0"));
    return pod_group.has_value();
  }));
  EXPECT_EQ((*pod_group)["spec"]["podGroupTemplateRef"]["workload"],
            (Json{{"workloadName", "gang"}, {"podGroupTemplateName", "job"}}));
  EXPECT_EQ(MinCount((*pod_group)["spec"]["schedulingPolicy"]), 3);
  for (const Json& pod : RunPods("gang", 3, 0)) {
    EXPECT_EQ(pod["spec"].value("schedulingGroup", Json::object()).value("podGroupName", ""), "gang-r0") << NameOf(pod);
  }
  ASSERT_FALSE(WaitForPhase("gang", "Running").is_null());

  // More workers: a new run, with a PodGroup of its own; run 0's goes, the Workload follows.
  PatchJob("gang", {{"spec", {{"worker", {{"replicas", 3}}}}}});
  for (const Json& pod : RunPods("gang", 4, 1)) {
    EXPECT_EQ(pod["spec"].value("schedulingGroup", Json::object()).value("podGroupName", ""), "gang-r1") << NameOf(pod);
  }
  ASSERT_TRUE(Eventually("run 1's PodGroup alone", [&](std::string& state) {
    const std::vector<std::string> names = PodGroupNames("gang");
    state = std::to_string(names.size()) + " PodGroups";
    return names == std::vector<std::string>{"gang-r1"};
  }));
  EXPECT_EQ(MinCount((*api().Get(SchedulingPath(ns(), "podgroups", "gang-r1")))["spec"]["schedulingPolicy"]), 4);
  ASSERT_TRUE(Eventually("the Workload of 4", [&](std::string&) {
    workload = api().Get(SchedulingPath(ns(), "workloads", "gang"));
    return workload && MinCount((*workload)["spec"]["podGroupTemplates"][0]["schedulingPolicy"]) == 4;
  }));
  ASSERT_FALSE(WaitForPhase("gang", "Running").is_null());
}

class K8sGangV1alpha1E2eTest : public OperatorE2eTest {
 protected:
  K8sGangV1alpha1E2eTest() { fake_args_ = {"--workload-api", "v1alpha1"}; }
};

// Kubernetes 1.35: no PodGroup objects; the pods name the Workload and its group, per run.
TEST_F(K8sGangV1alpha1E2eTest, TheWorkloadAndPodsNamingIt) {
  StartOperator();
  ASSERT_FALSE(CreateJob(JobBuilder("gang").Collective(2).Gang("Kubernetes").Obj()).is_null());
  ASSERT_FALSE(WaitForPhase("gang", "Running").is_null());
  const std::optional<Json> workload = api().Get("/apis/scheduling.k8s.io/v1alpha1/namespaces/" + ns() + "/workloads/gang");
  ASSERT_TRUE(workload.has_value());
  ASSERT_EQ((*workload)["spec"]["podGroups"].size(), 1u);
  EXPECT_EQ((*workload)["spec"]["podGroups"][0]["name"], "job");
  EXPECT_EQ(MinCount((*workload)["spec"]["podGroups"][0]["policy"]), 2);
  const std::vector<Json> pods = LivePods("gang");
  ASSERT_EQ(pods.size(), 2u);
  for (const Json& pod : pods) {
    EXPECT_EQ(pod["spec"].value("workloadRef", Json::object()),
              (Json{{"name", "gang"}, {"podGroup", "job"}, {"podGroupReplicaKey", "r0"}})) << NameOf(pod);
  }
}

TEST_F(K8sGangE2eTest, RefusedWhereTheClusterDoesNotServeTheApi) {
  StartOperator();
  ASSERT_FALSE(CreateJob(JobBuilder("gang").Ps(1, 2).Gang("Kubernetes").Obj()).is_null());
  const Json failed = WaitForPhase("gang", "Failed");
  ASSERT_FALSE(failed.is_null());
  const Json condition = ConditionOf(failed["status"], "Failed");
  EXPECT_EQ(condition.value("reason", ""), "GangSchedulingUnavailable");
  const std::string message = condition.value("message", "");
  EXPECT_NE(message.find("spec.scheduling.gang Kubernetes"), std::string::npos) << message;
  EXPECT_NE(message.find("this cluster serves scheduling.k8s.io/v1 (priorityclasses)"), std::string::npos) << message;
  EXPECT_TRUE(Pods("gang").empty());
  for (const Json& r : fake().Requests()) {
    EXPECT_EQ(r.value("path", "").find("/apis/scheduling.k8s.io/v1alpha"), std::string::npos) << r.dump();
  }
}

}  // namespace
}  // namespace fleet::op::e2e
