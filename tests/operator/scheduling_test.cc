// Placement: pods stuck Pending past the timeout, gang scheduling through a PodGroup (Volcano and
// scheduler-plugins) or Kubernetes' own Workload API, and scaling the workers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "builders.h"
#include "fleet/operator/planner.h"
#include "fleet/operator/pod_builder.h"
#include "fleet/operator/workload_api.h"
#include "fleet/runtime/env_contract.h"
#include "world.h"

namespace fleet::op::testing {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

constexpr char kNoGpu[] = "0/4 nodes are available: 4 Insufficient nvidia.com/gpu.";

// ---- pods stuck Pending ----

TEST(PendingTimeoutTest, BeforeTheTimeoutTheJobRequeuesForTheRest) {
  World world(JobBuilder("wd").Collective(2, 8).PendingTimeoutSeconds(300).Obj());
  world.Step();
  world.Edit("wd-worker-0", [](PodBuilder& p) { p.Ip("10.3.0.1").Phase("Running"); });
  world.Edit("wd-worker-1", [](PodBuilder& p) { p.Unschedulable(kNoGpu); });
  world.Advance(100);
  const ReconcilePlan& plan = world.Step();

  EXPECT_TRUE(plan.actions.empty()) << Describe(plan);
  EXPECT_TRUE(Condition(plan.status.ToJson(), "Unschedulable").is_null());
  ASSERT_TRUE(plan.requeue_after.has_value());
  EXPECT_GE(plan.requeue_after->count(), 200);
  EXPECT_LE(plan.requeue_after->count(), 201);
}

TEST(PendingTimeoutTest, PastTheTimeoutAConditionQuotesTheScheduler) {
  World world(JobBuilder("wd").Collective(2, 8).PendingTimeoutSeconds(300).Obj());
  world.Step();
  world.Edit("wd-worker-0", [](PodBuilder& p) { p.Ip("10.3.0.1").Phase("Running"); });
  world.Edit("wd-worker-1", [](PodBuilder& p) { p.Unschedulable(kNoGpu); });
  world.Advance(301);
  const ReconcilePlan& plan = world.Step();

  const Json unschedulable = Condition(plan.status.ToJson(), "Unschedulable");
  ASSERT_FALSE(unschedulable.is_null()) << plan.status.ToJson().dump();
  EXPECT_EQ(unschedulable["status"], "True");
  EXPECT_THAT(unschedulable["message"].get<std::string>(), HasSubstr("wd-worker-1"));
  EXPECT_THAT(unschedulable["message"].get<std::string>(), HasSubstr(kNoGpu));
  EXPECT_THAT(unschedulable["message"].get<std::string>(), HasSubstr("Unschedulable"));
  EXPECT_EQ(plan.status.ToJson()["phase"], "Pending");
  ASSERT_EQ(plan.events.size(), 1u) << Describe(plan);
  EXPECT_EQ(plan.events[0].type, "Warning");
  EXPECT_EQ(plan.events[0].reason, "Unschedulable");

  // Still stuck: the condition stays, no second event.
  world.Advance(60);
  const ReconcilePlan& again = world.Step();
  EXPECT_EQ(Condition(again.status.ToJson(), "Unschedulable").value("status", ""), "True");
  EXPECT_THAT(again.events, IsEmpty());

  // Scheduled at last: the condition clears.
  world.Edit("wd-worker-1", [](PodBuilder& p) { p.Ip("10.3.0.2").Phase("Running"); });
  const ReconcilePlan& placed = world.Step();
  EXPECT_EQ(Condition(placed.status.ToJson(), "Unschedulable").value("status", ""), "False");
}

// ---- gang scheduling ----

TEST(GangTest, VolcanoPodGroupComesFirstAndHoldsThePods) {
  World world(JobBuilder("wd").Ps(1, 4).Gang("Volcano", "research").PriorityClass("high").Obj());
  const ReconcilePlan& first = world.Step();

  ASSERT_EQ(first.actions.size(), 1u) << Describe(first);
  const Action& pg = first.actions[0];
  EXPECT_EQ(pg.verb, Verb::kCreate);
  EXPECT_EQ(pg.kind, ObjectKind::kPodGroup);
  EXPECT_EQ(pg.name, "wd");
  EXPECT_EQ(pg.object["apiVersion"], "scheduling.volcano.sh/v1beta1");
  EXPECT_EQ(pg.object["kind"], "PodGroup");
  EXPECT_EQ(pg.object["spec"]["minMember"], 5);
  EXPECT_EQ(pg.object["spec"]["queue"], "research");
  EXPECT_EQ(pg.object["spec"]["priorityClassName"], "high");
  EXPECT_EQ(pg.object["metadata"]["ownerReferences"][0]["uid"], kUid);
  EXPECT_EQ(first.status.ToJson()["phase"], "Pending");

  // Volcano has not admitted it: still no pods, and a condition that names the PodGroup.
  (*world.observed.pod_group)["status"] = {{"phase", "Pending"}};
  const ReconcilePlan& held = world.Step();
  EXPECT_TRUE(held.actions.empty()) << Describe(held);
  const Json gang = Condition(held.status.ToJson(), "GangPending");
  EXPECT_EQ(gang.value("status", ""), "True");
  EXPECT_THAT(gang.value("message", ""), HasSubstr("PodGroup wd"));
  EXPECT_THAT(gang.value("message", ""), HasSubstr("minMember 5"));
  EXPECT_THAT(gang.value("message", ""), HasSubstr("queue research"));
  EXPECT_EQ(held.status.ToJson()["phase"], "Pending");
  EXPECT_TRUE(held.requeue_after.has_value());
  EXPECT_TRUE(world.pods.empty());

  // Admitted: the pods come, each pointing at the gang.
  (*world.observed.pod_group)["status"] = {{"phase", "Inqueue"}};
  const ReconcilePlan& admitted = world.Step();
  EXPECT_EQ(ActionNames(admitted, Verb::kCreate, ObjectKind::kPod),
            (std::vector<std::string>{"wd-server-0", "wd-worker-0", "wd-worker-1", "wd-worker-2", "wd-worker-3"}));
  for (const Action& a : admitted.actions) {
    if (a.kind != ObjectKind::kPod) continue;
    EXPECT_EQ(a.Object()["spec"]["schedulerName"], "volcano") << a.name;
    EXPECT_EQ(a.Object()["metadata"]["annotations"]["scheduling.k8s.io/group-name"], "wd") << a.name;
    EXPECT_EQ(a.Object()["spec"]["priorityClassName"], "high") << a.name;
  }
  EXPECT_EQ(Condition(admitted.status.ToJson(), "GangPending").value("status", ""), "False");
  EXPECT_EQ(ActionNames(admitted, Verb::kCreate, ObjectKind::kPodGroup), std::vector<std::string>{});
}

TEST(GangTest, VolcanoPodGroupNeverAdmittedKeepsTheJobPending) {
  World world(JobBuilder("wd").Collective(4, 8).Gang("Volcano").Obj());
  world.Step();
  for (int i = 0; i < 5; ++i) {
    world.Advance(600);
    const ReconcilePlan& plan = world.Step();
    EXPECT_TRUE(plan.actions.empty()) << Describe(plan);
  }
  EXPECT_TRUE(world.pods.empty());
  EXPECT_EQ(world.Status()["phase"], "Pending");
  EXPECT_EQ(Condition(world.Status(), "GangPending").value("status", ""), "True");
  int gang_events = 0;
  for (const PlannedEvent& e : world.events) gang_events += e.reason == "GangPending";
  EXPECT_EQ(gang_events, 1);
}

TEST(GangTest, VolcanoWaitSaysTheMinimumThePodGroupHolds) {
  World world(JobBuilder("wd").Collective(3).Elastic(2, 4).Gang("Volcano").Obj());
  world.Step();
  ASSERT_TRUE(world.observed.pod_group.has_value());
  EXPECT_EQ((*world.observed.pod_group)["spec"]["minMember"], 2);
  world.Step();
  EXPECT_THAT(Condition(world.Status(), "GangPending").value("message", ""), HasSubstr("(minMember 2)"));
}

TEST(GangTest, SchedulerPluginsPodGroupThenLabelledPods) {
  World world(JobBuilder("wd").Ps(1, 4).Gang("SchedulerPlugins").Obj());
  const ReconcilePlan& first = world.Step();
  ASSERT_EQ(first.actions.size(), 1u) << Describe(first);
  EXPECT_EQ(first.actions[0].kind, ObjectKind::kPodGroup);
  EXPECT_EQ(first.actions[0].object["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
  EXPECT_EQ(first.actions[0].object["spec"]["minMember"], 5);
  EXPECT_FALSE(first.actions[0].object["spec"].contains("queue"));

  const ReconcilePlan& second = world.Step();
  EXPECT_EQ(ActionNames(second, Verb::kCreate, ObjectKind::kPod).size(), 5u) << Describe(second);
  for (const Action& a : second.actions) {
    if (a.kind != ObjectKind::kPod) continue;
    EXPECT_EQ(a.Object()["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"], "wd") << a.name;
    EXPECT_NE(a.Object()["spec"].value("schedulerName", ""), "volcano") << a.name;
  }
}

// ---- Kubernetes' own gang scheduling (scheduling.k8s.io) ----

// Settings of an operator that found `served` (version -> resources) in the cluster's discovery.
OperatorSettings Serving(const std::map<std::string, std::set<std::string>>& served) {
  OperatorSettings settings;
  settings.workload_api = ChooseWorkloadApi(served);
  return settings;
}
const std::map<std::string, std::set<std::string>> kV1alpha2 = {{"v1", {"priorityclasses"}},
                                                                {"v1alpha2", {"podgroups", "workloads"}}};

TEST(WorkloadApiTest, PrefersAVersionServingWorkloadsAndPodGroups) {
  EXPECT_EQ(ChooseWorkloadApi(kV1alpha2).version, "v1alpha2");
  EXPECT_TRUE(ChooseWorkloadApi(kV1alpha2).pod_groups);
  const WorkloadApi newest = ChooseWorkloadApi({{"v1alpha2", {"podgroups", "workloads"}},
                                                {"v1alpha3", {"podgroups", "workloads"}},
                                                {"v1beta1", {"podgroups", "workloads"}}});
  EXPECT_EQ(newest.version, "v1beta1");
  // A version without PodGroups is passed over for one with them, even an older one.
  EXPECT_EQ(ChooseWorkloadApi({{"v1alpha1", {"workloads"}}, {"v1alpha2", {"podgroups", "workloads"}},
                               {"v1alpha3", {"workloads"}}}).version,
            "v1alpha2");
  const WorkloadApi old = ChooseWorkloadApi({{"v1", {"priorityclasses"}}, {"v1alpha1", {"workloads"}}});
  EXPECT_EQ(old.version, "v1alpha1");
  EXPECT_FALSE(old.pod_groups);
  const WorkloadApi none = ChooseWorkloadApi({{"v1", {"priorityclasses"}}});
  EXPECT_FALSE(none.usable());
  EXPECT_EQ(none.served, "scheduling.k8s.io/v1 (priorityclasses)");
  EXPECT_FALSE(ChooseWorkloadApi({}).usable());
}

TEST(KubernetesGangTest, V1alpha2WorkloadAndTheRunsPodGroupThenPodsNamingIt) {
  World world(JobBuilder("wd").Ps(1, 4).Gang("Kubernetes").PriorityClass("high").Obj(), Serving(kV1alpha2));
  const ReconcilePlan& first = world.Step();

  const Action* workload = FindAction(first, Verb::kCreate, ObjectKind::kGangWorkload, "wd");
  ASSERT_NE(workload, nullptr) << Describe(first);
  EXPECT_EQ(workload->object["apiVersion"], "scheduling.k8s.io/v1alpha2");
  EXPECT_EQ(workload->object["kind"], "Workload");
  EXPECT_EQ(workload->object["metadata"]["ownerReferences"][0]["uid"], kUid);
  EXPECT_EQ(workload->object["spec"]["controllerRef"],
            (Json{{"apiGroup", "fleet.paddlepaddle.org"}, {"kind", "FleetJob"}, {"name", "wd"}}));
  EXPECT_EQ(workload->object["spec"]["podGroupTemplates"],
            Json::parse(R"([{"name": "job", "schedulingPolicy": {"gang": {"minCount": 5}}}])"));

  const Action* pod_group = FindAction(first, Verb::kCreate, ObjectKind::kPodGroup, "wd-r0");
  ASSERT_NE(pod_group, nullptr) << Describe(first);
  EXPECT_EQ(pod_group->object["apiVersion"], "scheduling.k8s.io/v1alpha2");
  EXPECT_EQ(pod_group->object["kind"], "PodGroup");
  EXPECT_EQ(pod_group->object["spec"], Json::parse(R"({
      "podGroupTemplateRef": {"workload": {"workloadName": "wd", "podGroupTemplateName": "job"}},
      "schedulingPolicy": {"gang": {"minCount": 5}}})"));

  // No admission to wait for: kube-scheduler holds the pods until the gang can be placed.
  EXPECT_EQ(ActionNames(first, Verb::kCreate, ObjectKind::kPod).size(), 5u) << Describe(first);
  for (const Action& a : first.actions) {
    if (a.kind != ObjectKind::kPod) continue;
    const Json pod = a.Object();
    EXPECT_EQ(pod["spec"]["schedulingGroup"], (Json{{"podGroupName", "wd-r0"}})) << a.name;
    EXPECT_FALSE(pod["spec"].contains("workloadRef")) << a.name;
    EXPECT_FALSE(pod["spec"].contains("schedulerName")) << a.name;
    EXPECT_EQ(pod["spec"]["priorityClassName"], "high") << a.name;
  }
  EXPECT_TRUE(Condition(first.status.ToJson(), "GangPending").is_null());

  world.Settle();
  EXPECT_EQ(world.Status()["phase"], "Running");
  EXPECT_EQ(world.already_exists, 0);
}

TEST(KubernetesGangTest, ANewRunGetsItsOwnPodGroupAndTheMinimumFollowsTheReplicas) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 2).Gang("Kubernetes").Obj(), Serving(kV1alpha2));
  EXPECT_EQ(world.observed.gang_pod_groups, std::vector<std::string>{"wd-r0"});
  EXPECT_EQ(GangWorkloadMinCount(*world.observed.gang_workload), 3);

  world.EditSpec("/spec/worker/replicas", 4);
  world.Settle();
  EXPECT_EQ(world.Status()["phase"], "Running");
  EXPECT_EQ(world.Status()["run"], 1);
  EXPECT_EQ(world.observed.gang_pod_groups, std::vector<std::string>{"wd-r1"});   // run 0's is gone
  ASSERT_TRUE(world.observed.gang_workload.has_value());
  EXPECT_EQ(GangWorkloadMinCount(*world.observed.gang_workload), 5);   // replaced: its groups are immutable
  for (const Json& pod : world.pods) {
    EXPECT_EQ(pod["spec"]["schedulingGroup"]["podGroupName"], "wd-r1") << pod["metadata"]["name"];
  }
}

TEST(KubernetesGangTest, V1alpha1WorkloadAndPodsNamingItsGroupPerRun) {
  World world(JobBuilder("wd").Collective(3).Elastic(2, 4).Gang("Kubernetes").Obj(),
              Serving({{"v1", {"priorityclasses"}}, {"v1alpha1", {"workloads"}}}));
  const ReconcilePlan& first = world.Step();

  const Action* workload = FindAction(first, Verb::kCreate, ObjectKind::kGangWorkload, "wd");
  ASSERT_NE(workload, nullptr) << Describe(first);
  EXPECT_EQ(workload->object["apiVersion"], "scheduling.k8s.io/v1alpha1");
  EXPECT_EQ(workload->object["spec"]["podGroups"],   // an elastic job's gang: its minimum
            Json::parse(R"([{"name": "job", "policy": {"gang": {"minCount": 2}}}])"));
  EXPECT_FALSE(workload->object["spec"].contains("podGroupTemplates"));
  EXPECT_THAT(ActionNames(first, Verb::kCreate, ObjectKind::kPodGroup), IsEmpty());   // none in v1alpha1
  ASSERT_EQ(ActionNames(first, Verb::kCreate, ObjectKind::kPod).size(), 3u) << Describe(first);
  for (const Action& a : first.actions) {
    if (a.kind != ObjectKind::kPod) continue;
    EXPECT_EQ(a.Object()["spec"]["workloadRef"],
              (Json{{"name", "wd"}, {"podGroup", "job"}, {"podGroupReplicaKey", "r0"}})) << a.name;
    EXPECT_FALSE(a.Object()["spec"].contains("schedulingGroup")) << a.name;
  }
}

TEST(KubernetesGangTest, RefusedWhereTheClusterDoesNotServeTheApi) {
  World world(JobBuilder("wd").Ps(1, 2).Gang("Kubernetes").Obj(), Serving({{"v1", {"priorityclasses"}}}));
  const ReconcilePlan& plan = world.Step();

  EXPECT_TRUE(plan.actions.empty()) << Describe(plan);
  EXPECT_EQ(world.Status()["phase"], "Failed");
  const Json failed = Condition(world.Status(), "Failed");
  EXPECT_EQ(failed.value("reason", ""), "GangSchedulingUnavailable");
  EXPECT_THAT(failed.value("message", ""), HasSubstr("spec.scheduling.gang Kubernetes"));
  EXPECT_THAT(failed.value("message", ""), HasSubstr("this cluster serves scheduling.k8s.io/v1 (priorityclasses)"));
  EXPECT_TRUE(world.pods.empty());
}

// ---- scaling workers ----

// The pods' env as Paddle reads it after a rescale: each worker knows `workers` trainers.
void ExpectWiredFor(const World& world, int workers) {
  ASSERT_TRUE(world.observed.endpoints.has_value());
  for (const Json& pod : world.pods) {
    SCOPED_TRACE(pod["metadata"]["name"].get<std::string>());
    auto env = ResolveEnv(pod, world.observed.endpoints);
    ASSERT_TRUE(env.ok()) << env.error();
    auto role = ParseProcessEnv(*env, RoleMakerKind::kParameterServer);
    ASSERT_TRUE(role.ok()) << role.error();
    EXPECT_EQ(role->trainers_num, workers);
    EXPECT_EQ(role->trainer_endpoints.size(), static_cast<size_t>(workers));
  }
}

TEST(ScalingTest, ScaleDownDeletesTheRemovedWorkers) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Obj());
  world.EditSpec("/spec/worker/replicas", 2);
  const ReconcilePlan& plan = world.Step();

  const std::vector<std::string> deleted = ActionNames(plan, Verb::kDelete, ObjectKind::kPod);
  EXPECT_THAT(deleted, Contains("wd-worker-2"));
  EXPECT_THAT(deleted, Contains("wd-worker-3"));
  EXPECT_THAT(ActionNames(plan, Verb::kCreate, ObjectKind::kPod), IsEmpty());

  world.Settle();
  EXPECT_EQ(world.Status()["phase"], "Running");
  EXPECT_EQ(world.LivePodNames(), (std::vector<std::string>{"wd-server-0", "wd-worker-0", "wd-worker-1"}));
  EXPECT_EQ(world.Status()["replicaStatuses"]["worker"]["replicas"], 2);
  ExpectWiredFor(world, 2);
}

// Regression (fixed): planner.cc Run, on a scale-down, first deletes the scaled-away pods ("no longer part of the
// job") and then, because the hosts digest changed, restarts the whole job with
// DeletePods(all non-terminating), which lists the same two pods again: one plan deletes
// wd-worker-2 and wd-worker-3 twice each. Expected: every object is named at most once per plan.
TEST(ScalingTest, ScaleDownPlanNamesEachPodOnce) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Obj());
  world.EditSpec("/spec/worker/replicas", 2);
  const ReconcilePlan& plan = world.Step();
  std::set<std::string> seen;
  for (const Action& a : plan.actions) EXPECT_TRUE(seen.insert(a.name).second) << a.name << " twice:\n" << Describe(plan);
}

// Paddle's processes read their trainer count and peer lists once, at start (a sync server waits
// for exactly PADDLE_TRAINERS_NUM trainers), so scaling starts a new run: every pod is replaced
// and wired for the new size. It is not a failure: restartCount stays 0.
TEST(ScalingTest, ScaleUpRewiresEveryPodForTheNewSize) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 2).Obj());
  world.EditSpec("/spec/worker/replicas", 4);
  const ReconcilePlan& plan = world.Step();

  EXPECT_EQ(ActionNames(plan, Verb::kDelete, ObjectKind::kPod),
            (std::vector<std::string>{"wd-server-0", "wd-worker-0", "wd-worker-1"}));
  EXPECT_EQ(ActionNames(plan, Verb::kCreate, ObjectKind::kPod),
            (std::vector<std::string>{"wd-worker-2", "wd-worker-3"}));
  EXPECT_EQ(plan.status.ToJson()["observedGeneration"], 2);
  EXPECT_EQ(plan.status.ToJson()["restartCount"], 0);
  EXPECT_EQ(plan.status.ToJson()["run"], 1);

  world.Settle();
  EXPECT_EQ(world.Status()["phase"], "Running");
  EXPECT_EQ(world.LivePodNames().size(), 5u);
  ExpectWiredFor(world, 4);
  const std::string workers = (*world.observed.endpoints)["data"]["PADDLE_TRAINER_ENDPOINTS"];
  EXPECT_EQ(std::count(workers.begin(), workers.end(), ','), 3) << workers;
}

// Regression (fixed): planner.cc treats any change of the hosts under published lists of the current run as "a pod
// was replaced and got a new address" and restarts through the backoffLimit check. Scaling is not a
// failure, but with backoffLimit 0 a scale-up fails the job (BackoffLimitExceeded, "a pod was
// replaced...") and every scale consumes one of the job's restarts. Expected: the rescaled job is
// rewired and runs; backoffLimit is for failures.
TEST(ScalingTest, ScalingIsNotCountedAgainstBackoffLimit) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 2).BackoffLimit(0).Obj());
  world.EditSpec("/spec/worker/replicas", 4);
  world.Settle();

  EXPECT_EQ(world.Status()["phase"], "Running") << Condition(world.Status(), "Failed").dump();
  EXPECT_TRUE(Condition(world.Status(), "Failed").is_null());
}

}  // namespace
}  // namespace fleet::op::testing

namespace fleet::op::testing {
namespace {

TEST(HostPortsTest, AJobWaitingForHostPortsIsPendingAndSaysWhy) {
  HostPortBlock refused;
  refused.refused = "no block of 13 free host ports is left in 20000-20020";
  World world(JobBuilder("wd").Ps(2, 4).Network("HostNetwork").Obj(), {}, refused);
  world.Step();
  EXPECT_EQ(world.Status().value("phase", ""), "Pending");
  EXPECT_THAT(world.Status().value("message", ""), ::testing::HasSubstr("no block of 13 free host ports"));
  EXPECT_TRUE(world.pods.empty());
  EXPECT_FALSE(world.Status().contains("hostPortBase"));
  ASSERT_TRUE(world.plan.requeue_after.has_value());
  // Ports free up: the job starts, and the condition says so.
  world.observed.host_ports = HostPortsAt(20000);
  world.Settle();
  EXPECT_EQ(world.Status().value("phase", ""), "Running");
  EXPECT_EQ(world.Status().value("hostPortBase", 0), 20000);
  bool cleared = false;
  for (const Json& c : world.Status()["conditions"]) {
    if (c["type"] == "WaitingForHostPorts") cleared = c["status"] == "False";
  }
  EXPECT_TRUE(cleared);
}

TEST(HostPortsTest, AJobThatCanNeverFitFails) {
  HostPortBlock never;
  never.refused = "the job needs 13 host ports";
  never.never = true;
  World world(JobBuilder("wd").Ps(2, 4).Network("HostNetwork").Obj(), {}, never);
  world.Step();
  EXPECT_EQ(world.Status().value("phase", ""), "Failed");
  EXPECT_THAT(world.Status().value("message", ""), ::testing::HasSubstr("needs 13 host ports"));
  EXPECT_TRUE(world.pods.empty());
}

// ---- Volcano's network topology ----

TEST(GangTest, VolcanoPodGroupCarriesTheNetworkTopology) {
  World world(JobBuilder("wd")
                  .Collective(4, 8)
                  .Gang("Volcano", "research")
                  .Set("/spec/scheduling/networkTopology", {{"mode", "hard"}, {"highestTierAllowed", 1}})
                  .Obj());
  const Action* pg = FindAction(world.Step(), Verb::kCreate, ObjectKind::kPodGroup, "wd");
  ASSERT_NE(pg, nullptr);
  EXPECT_EQ(pg->object["spec"]["networkTopology"], (Json{{"mode", "hard"}, {"highestTierAllowed", 1}}));
  World plain(JobBuilder("wd").Collective(4, 8).Gang("Volcano", "research").Obj());
  pg = FindAction(plain.Step(), Verb::kCreate, ObjectKind::kPodGroup, "wd");
  ASSERT_NE(pg, nullptr);
  EXPECT_FALSE(pg->object["spec"].contains("networkTopology"));
}

TEST(GangTest, ANetworkTopologyWithoutVolcanoFailsTheJobNamingTheField) {
  World world(JobBuilder("wd")
                  .Collective(4, 8)
                  .Gang("SchedulerPlugins")
                  .Set("/spec/scheduling/networkTopology", {{"mode", "soft"}})
                  .Obj());
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(plan.status.phase, JobPhase::kFailed);
  EXPECT_THAT(plan.status.message, HasSubstr("spec.scheduling.networkTopology"));
  EXPECT_TRUE(world.pods.empty());
}

}  // namespace
}  // namespace fleet::op::testing
