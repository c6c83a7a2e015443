// Kueue admission (docs/design/kueue.md 6): a job labelled kueue.x-k8s.io/queue-name gets a
// Workload and nothing else until Kueue admits it; its pods carry the admission; an eviction stops
// it and gives the quota back once no pod runs; the end of the job finishes the Workload. The
// tests play Kueue by writing the Workload's status as Kueue's scheduler does.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "builders.h"
#include "fleet/operator/kueue.h"
#include "fleet/operator/planner.h"
#include "world.h"

namespace fleet::op::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Kueue's name for the Workload of job "wd" with uid kUid: fleetjob-wd- and the first five hex
// digits of sha1("FleetJob\nfleet.paddlepaddle.org\nwd\nuid-1234") (computed with Python's hashlib).
constexpr char kWorkload[] = "fleetjob-wd-b7da1";
constexpr char kGpuNodeLabel[] = "cloud.example.com/gpu";

JobBuilder QueuedJob() { return JobBuilder("wd").Collective(2, 8).Label(kueue::kQueueLabel, "team-a"); }

Json Flavor(const std::string& name, const std::string& gpu) {
  return {{"apiVersion", "kueue.x-k8s.io/v1beta2"}, {"kind", "ResourceFlavor"}, {"metadata", {{"name", name}}},
          {"spec", {{"nodeLabels", {{kGpuNodeLabel, gpu}}},
                    {"tolerations", Json::array({{{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}})}}}};
}

Json Cond(const std::string& type, bool status, const std::string& reason, const std::string& message = "") {
  return {{"type", type}, {"status", status ? "True" : "False"}, {"reason", reason}, {"message", message},
          {"lastTransitionTime", "2026-11-28T10:00:00Z"}};
}

// Kueue's status writes, as its scheduler and eviction make them.
void SetConditions(World& world, const std::vector<Json>& conditions) {
  ASSERT_TRUE(world.observed.kueue.workload.has_value()) << "no Workload";
  world.observed.kueue.workload = kueue::ApplyStatusEdit(*world.observed.kueue.workload, kueue::StatusEdit(conditions, false));
}

// Admits every pod set (all of it, or `counts` of it) with flavor a100 for GPUs in ClusterQueue gpu-cq.
void Admit(World& world, const std::map<std::string, int>& counts = {}) {
  ASSERT_TRUE(world.observed.kueue.workload.has_value()) << "no Workload";
  Json& workload = *world.observed.kueue.workload;
  Json assignments = Json::array();
  for (const Json& set : workload["spec"]["podSets"]) {
    const std::string name = set["name"];
    Json a = {{"name", name}, {"flavors", {{"cpu", "default"}, {"nvidia.com/gpu", "a100"}}}};
    if (counts.count(name)) a["count"] = counts.at(name);
    assignments.push_back(a);
  }
  workload["status"]["admission"] = {{"clusterQueue", "gpu-cq"}, {"podSetAssignments", assignments}};
  world.observed.kueue.flavors = {{"a100", Flavor("a100", "a100")}, {"default", {{"metadata", {{"name", "default"}}}}}};
  SetConditions(world, {Cond("QuotaReserved", true, "QuotaReserved", "Quota reserved in ClusterQueue gpu-cq"),
                        Cond("Admitted", true, "Admitted", "The workload is admitted"),
                        Cond("Evicted", false, "QuotaReserved", "Previously: Preempted")});
}

const Json& Workload(const World& world) { return *world.observed.kueue.workload; }
Json WorkloadCond(const World& world, const std::string& type) {
  const Json* c = kueue::WorkloadCondition(Workload(world), type);
  return c ? *c : Json();
}
int Count(const ReconcilePlan& plan, Verb verb, ObjectKind kind) {
  return static_cast<int>(ActionNames(plan, verb, kind).size());
}
bool HasEvent(const std::vector<PlannedEvent>& events, const std::string& reason) {
  for (const PlannedEvent& e : events) {
    if (e.reason == reason) return true;
  }
  return false;
}
std::string EventMessage(const std::vector<PlannedEvent>& events, const std::string& reason) {
  for (const PlannedEvent& e : events) {
    if (e.reason == reason) return e.message;
  }
  return "";
}

// A queued job admitted and brought up to Running.
World AdmittedWorld(JobBuilder job = QueuedJob()) {
  World world(job.Obj());
  world.Step();
  Admit(world);
  world.Settle();
  return world;
}

// ---- queued ----

TEST(KueueTest, AQueuedJobCreatesItsWorkloadAndNothingElse) {
  World world(JobBuilder("wd").Ps(1, 2).Label(kueue::kQueueLabel, "team-a").Obj());
  const ReconcilePlan& first = world.Step();

  ASSERT_EQ(first.actions.size(), 1u) << Describe(first);
  const Action& create = first.actions[0];
  EXPECT_EQ(create.verb, Verb::kCreate);
  EXPECT_EQ(create.kind, ObjectKind::kKueueWorkload);
  EXPECT_EQ(create.name, kWorkload);
  const Json& wl = create.object;
  EXPECT_EQ(wl["apiVersion"], "kueue.x-k8s.io/v1beta2");
  EXPECT_EQ(wl["kind"], "Workload");
  EXPECT_EQ(wl["metadata"]["namespace"], kNamespace);
  const Json& owner = wl["metadata"]["ownerReferences"][0];
  EXPECT_EQ(owner["kind"], "FleetJob");
  EXPECT_EQ(owner["uid"], kUid);
  EXPECT_EQ(owner["controller"], true);
  EXPECT_EQ(owner["blockOwnerDeletion"], true);
  EXPECT_EQ(wl["metadata"]["labels"]["kueue.x-k8s.io/job-uid"], kUid);
  EXPECT_EQ(wl["metadata"]["labels"][kJobLabel], "wd");
  EXPECT_EQ(wl["metadata"]["finalizers"], Json::array({"kueue.x-k8s.io/resource-in-use"}));
  EXPECT_FALSE(wl["metadata"]["annotations"].value(kueue::kPodSetsHashAnnotation, "").empty());
  EXPECT_EQ(wl["spec"]["queueName"], "team-a");
  EXPECT_FALSE(wl["spec"].contains("priorityClassRef")) << "the job names no priority class";

  // One pod set per role, in spec order, each the role's pod as it will be made: the sidecar and
  // its resources included, nothing of one pod's own (env, index, run).
  const Json& sets = wl["spec"]["podSets"];
  ASSERT_EQ(sets.size(), 2u) << sets.dump(2);
  EXPECT_EQ(sets[0]["name"], "server");
  EXPECT_EQ(sets[0]["count"], 1);
  EXPECT_EQ(sets[1]["name"], "worker");
  EXPECT_EQ(sets[1]["count"], 2);
  EXPECT_FALSE(sets[1].contains("minCount"));
  const Json& worker = sets[1]["template"];
  EXPECT_EQ(worker["metadata"]["labels"][kRoleLabel], "worker");
  EXPECT_FALSE(worker["metadata"]["labels"].contains(kIndexLabel));
  EXPECT_FALSE(worker["metadata"]["labels"].contains(kRunLabel));
  EXPECT_FALSE(worker.contains("metadata") && worker["metadata"].contains("name"));
  ASSERT_EQ(worker["spec"]["initContainers"][0]["name"], "fleet-sidecar");
  EXPECT_EQ(worker["spec"]["initContainers"][0]["resources"]["requests"]["cpu"], "10m");
  for (const Json& c : worker["spec"]["containers"]) EXPECT_FALSE(c.contains("env")) << c.dump();

  const Json status = first.status.ToJson();
  EXPECT_EQ(status["phase"], "Pending");
  EXPECT_EQ(Condition(status, "Admitted").value("status", ""), "False");
  EXPECT_EQ(Condition(status, "Admitted").value("reason", ""), "Queued");
  EXPECT_EQ(status["queue"]["state"], "Queued");
  EXPECT_EQ(status["queue"]["workload"], kWorkload);
  EXPECT_EQ(status["queue"]["localQueue"], "team-a");
  EXPECT_TRUE(HasEvent(first.events, "Queued")) << Describe(first);

  // Kueue says why it waits: the job says so, with no second Queued event and still nothing made.
  SetConditions(world, {Cond("QuotaReserved", false, "Pending",
                             "couldn't assign flavors to pod set worker: insufficient unused quota for nvidia.com/gpu in flavor a100, 8 more needed")});
  const ReconcilePlan& waiting = world.Step();
  EXPECT_THAT(waiting.actions, IsEmpty()) << Describe(waiting);
  EXPECT_FALSE(HasEvent(waiting.events, "Queued"));
  EXPECT_EQ(waiting.status.message,
            "queued in LocalQueue team-a: couldn't assign flavors to pod set worker: insufficient unused quota for "
            "nvidia.com/gpu in flavor a100, 8 more needed");
  EXPECT_TRUE(world.pods.empty());
  EXPECT_FALSE(world.observed.endpoints || world.observed.service_account || world.observed.role);
}

// Kueue's jobframework copies these from the job: the maximum execution time (Kueue evicts and
// deactivates the Workload past it) and a ProvisioningRequest's parameters.
TEST(KueueTest, TheWorkloadCarriesTheMaximumExecutionTimeAndProvisioningParameters) {
  World world(QueuedJob()
                  .Label(kueue::kMaxExecTimeLabel, "3600")
                  .Annotation("provreq.kueue.x-k8s.io/ValidUntilSeconds", "600")
                  .Annotation("team.example.com/owner", "ml")
                  .Obj());
  const ReconcilePlan& plan = world.Step();
  const Action* create = FindAction(plan, Verb::kCreate, ObjectKind::kKueueWorkload, kWorkload);
  ASSERT_NE(create, nullptr) << Describe(plan);
  EXPECT_EQ(create->object["spec"]["maximumExecutionTimeSeconds"], 3600);
  const Json& annotations = create->object["metadata"]["annotations"];
  EXPECT_EQ(annotations.value("provreq.kueue.x-k8s.io/ValidUntilSeconds", ""), "600");
  EXPECT_FALSE(annotations.contains("team.example.com/owner")) << "only the ProvisioningRequest's are copied";
}

TEST(KueueTest, AMaximumExecutionTimeThatIsNotWholePositiveSecondsIsRefused) {
  for (const char* bad : {"0", "-5", "1.5", "soon", "99999999999"}) {
    World world(QueuedJob().Label(kueue::kMaxExecTimeLabel, bad).Obj());
    const ReconcilePlan& plan = world.Step();
    EXPECT_EQ(plan.status.ToJson()["phase"], "Failed") << bad;
    EXPECT_EQ(Condition(plan.status.ToJson(), "Failed").value("reason", ""), "InvalidSpec") << bad;
    EXPECT_THAT(plan.status.message, HasSubstr("metadata.labels[\"kueue.x-k8s.io/max-exec-time-seconds\"]")) << bad;
    EXPECT_EQ(FindAction(plan, Verb::kCreate, ObjectKind::kKueueWorkload, kWorkload), nullptr) << bad;
  }
}

TEST(KueueTest, AJobWithoutTheLabelHasNoWorkloadAndUnmarkedPods) {
  World world(JobBuilder("wd").Collective(2, 8).Obj());
  world.observed.kueue.served = false;   // as on a cluster without Kueue: it makes no difference
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(Count(plan, Verb::kCreate, ObjectKind::kKueueWorkload), 0);
  EXPECT_EQ(ActionNames(plan, Verb::kCreate, ObjectKind::kPod), (std::vector<std::string>{"wd-worker-0", "wd-worker-1"}));
  for (const Json& pod : world.pods) {
    EXPECT_FALSE(pod["metadata"]["labels"].contains(kueue::kPodSetLabel));
    EXPECT_FALSE(pod["spec"].contains("nodeSelector"));
  }
  EXPECT_FALSE(plan.status.queue.has_value());
  EXPECT_EQ(plan.status.Find(ConditionType::kAdmitted), nullptr);
}

TEST(KueueTest, WithoutKueueInTheClusterAQueuedJobFailsNamingTheLabel) {
  World world(QueuedJob().Obj());
  world.observed.kueue.served = false;
  const ReconcilePlan& plan = world.Step();
  EXPECT_THAT(plan.actions, IsEmpty()) << Describe(plan);
  EXPECT_EQ(plan.status.phase, JobPhase::kFailed);
  EXPECT_THAT(plan.status.message, HasSubstr("kueue.x-k8s.io/queue-name"));
  EXPECT_THAT(plan.status.message, HasSubstr("does not serve kueue.x-k8s.io/v1beta2"));
}

TEST(KueueTest, TheWorkloadCarriesTheJobsPriority) {
  // The label names a WorkloadPriorityClass: its value, as the controller read it.
  World labelled(QueuedJob().Label(kueue::kPriorityClassLabel, "urgent").PriorityClass("high").Obj());
  labelled.observed.kueue.priority = 1000;
  const Action* create = FindAction(labelled.Step(), Verb::kCreate, ObjectKind::kKueueWorkload, kWorkload);
  ASSERT_NE(create, nullptr);
  EXPECT_EQ(create->object["spec"]["priorityClassRef"],
            (Json{{"group", "kueue.x-k8s.io"}, {"kind", "WorkloadPriorityClass"}, {"name", "urgent"}}));
  EXPECT_EQ(create->object["spec"]["priority"], 1000);

  // Else spec.scheduling.priorityClassName: a scheduling.k8s.io PriorityClass.
  World classed(QueuedJob().PriorityClass("high").Obj());
  classed.observed.kueue.priority = 500;
  create = FindAction(classed.Step(), Verb::kCreate, ObjectKind::kKueueWorkload, kWorkload);
  ASSERT_NE(create, nullptr);
  EXPECT_EQ(create->object["spec"]["priorityClassRef"],
            (Json{{"group", "scheduling.k8s.io"}, {"kind", "PriorityClass"}, {"name", "high"}}));
  EXPECT_EQ(create->object["spec"]["priority"], 500);

  // A class that is not found: no Workload with a wrong priority, a message saying which.
  World missing(QueuedJob().PriorityClass("high").Obj());
  const ReconcilePlan& held = missing.Step();
  EXPECT_THAT(held.actions, IsEmpty()) << Describe(held);
  EXPECT_THAT(held.status.message, HasSubstr("PriorityClass high"));
  EXPECT_EQ(held.status.phase, JobPhase::kPending);
}

TEST(KueueTest, AnElasticJobsWorkersMayBeAdmittedDownToTheirMinimum) {
  World world(QueuedJob().Elastic(2, 4).Workers(4).Obj());
  const Action* create = FindAction(world.Step(), Verb::kCreate, ObjectKind::kKueueWorkload, kWorkload);
  ASSERT_NE(create, nullptr);
  const Json& worker = create->object["spec"]["podSets"][0];
  EXPECT_EQ(worker["count"], 4);
  EXPECT_EQ(worker["minCount"], 2);

  // Kueue admits 3 of the 4: the job runs 3 workers, and says so.
  Admit(world, {{"worker", 3}});
  const ReconcilePlan& admitted = world.Step();
  EXPECT_EQ(ActionNames(admitted, Verb::kCreate, ObjectKind::kPod),
            (std::vector<std::string>{"wd-worker-0", "wd-worker-1", "wd-worker-2"}));
  ASSERT_TRUE(admitted.status.queue.has_value());
  EXPECT_EQ(admitted.status.queue->admitted_counts.at("worker"), 3);
  EXPECT_EQ(admitted.status.queue->message, "admitted 3 of 4 workers; the others wait for the next admission");
  world.Settle();
  EXPECT_EQ(world.LivePodNames(), (std::vector<std::string>{"wd-worker-0", "wd-worker-1", "wd-worker-2"}));
}

// ---- admitted ----

TEST(KueueTest, AnAdmittedJobsPodsCarryTheFlavorsNodeLabelsAndTolerations) {
  World world(QueuedJob().Obj());
  world.Step();
  Admit(world);
  const ReconcilePlan& plan = world.Step();

  EXPECT_EQ(ActionNames(plan, Verb::kCreate, ObjectKind::kPod), (std::vector<std::string>{"wd-worker-0", "wd-worker-1"}));
  for (const Action& a : plan.actions) {
    if (a.kind != ObjectKind::kPod) continue;
    const Json pod = a.Object();
    EXPECT_EQ(pod["spec"]["nodeSelector"][kGpuNodeLabel], "a100") << a.name;
    EXPECT_THAT(pod["spec"]["tolerations"],
                ::testing::Contains(Json{{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}));
    EXPECT_EQ(pod["metadata"]["labels"][kueue::kPodSetLabel], "worker") << a.name;
    EXPECT_EQ(pod["metadata"]["annotations"][kueue::kWorkloadAnnotation], kWorkload) << a.name;
    EXPECT_EQ(pod["metadata"]["labels"]["kueue.x-k8s.io/local-queue-name"], "team-a") << a.name;
    EXPECT_EQ(pod["metadata"]["labels"]["kueue.x-k8s.io/cluster-queue-name"], "gpu-cq") << a.name;
  }
  const Json status = plan.status.ToJson();
  EXPECT_EQ(Condition(status, "Admitted").value("status", ""), "True");
  EXPECT_EQ(status["queue"]["state"], "Admitted");
  EXPECT_EQ(status["queue"]["clusterQueue"], "gpu-cq");
  EXPECT_EQ(status["queue"]["flavors"]["worker"]["nvidia.com/gpu"], "a100");
  EXPECT_EQ(status["queue"]["admittedCounts"]["worker"], 2);
  EXPECT_EQ(EventMessage(plan.events, "Admitted"), "admitted by ClusterQueue gpu-cq (worker: cpu=default, nvidia.com/gpu=a100)")
      << Describe(plan);
}

TEST(KueueTest, ATemplateNodeSelectorTheFlavorContradictsFailsTheJob) {
  World world(QueuedJob().Set("/spec/worker/template/spec/nodeSelector", {{kGpuNodeLabel, "h100"}}).Obj());
  world.Step();
  Admit(world);
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(Count(plan, Verb::kCreate, ObjectKind::kPod), 0) << Describe(plan);
  EXPECT_EQ(plan.status.phase, JobPhase::kFailed);
  EXPECT_THAT(plan.status.message, HasSubstr(std::string(kGpuNodeLabel) + "=h100"));
  EXPECT_THAT(plan.status.message, HasSubstr("ResourceFlavor a100 sets " + std::string(kGpuNodeLabel) + "=a100"));
  EXPECT_EQ(WorkloadCond(world, "Finished").value("reason", ""), "FailedToStart");
  world.Step();
  EXPECT_TRUE(Workload(world)["metadata"]["finalizers"].empty()) << Workload(world).dump();
}

TEST(KueueTest, PodsReadyFollowsThePods) {
  World world(QueuedJob().Obj());
  world.Step();
  Admit(world);
  world.Step();
  EXPECT_EQ(WorkloadCond(world, "PodsReady").value("reason", ""), "WaitForStart");
  EXPECT_EQ(WorkloadCond(world, "PodsReady").value("status", ""), "False");
  EXPECT_EQ(WorkloadCond(world, "PodsReady").value("observedGeneration", 0), 1);
  world.Settle();
  EXPECT_EQ(WorkloadCond(world, "PodsReady").value("status", ""), "True");
  EXPECT_EQ(WorkloadCond(world, "PodsReady").value("reason", ""), "Started");

  world.Edit("wd-worker-1", [](PodBuilder& p) { p.Ready(false); });
  world.Step();
  EXPECT_EQ(WorkloadCond(world, "PodsReady").value("status", ""), "False");
  EXPECT_EQ(WorkloadCond(world, "PodsReady").value("reason", ""), "WaitForRecovery");
  const int writes = world.workload_status_writes;
  world.Step();
  EXPECT_EQ(world.workload_status_writes, writes) << "no write while nothing changes";

  world.Edit("wd-worker-1", [](PodBuilder& p) { p.Ready(true); });
  world.Step();
  EXPECT_EQ(WorkloadCond(world, "PodsReady").value("status", ""), "True");
  EXPECT_EQ(WorkloadCond(world, "PodsReady").value("reason", ""), "Recovered");
}

// ---- evicted ----

TEST(KueueTest, AnEvictionStopsTheRunAndReleasesTheQuotaOnceNoPodRuns) {
  World world = AdmittedWorld();
  ASSERT_EQ(world.Status().value("phase", ""), "Running") << Describe(world.plan);
  const int run = world.Status().value("run", -1);
  const std::string preemption =
      "Preempted to accommodate a workload (UID: wl-big, JobUID: uid-big) due to prioritization in the ClusterQueue";
  SetConditions(world, {Cond("Evicted", true, "Preempted", preemption), Cond("Preempted", true, "InClusterQueue", preemption)});
  world.observed.kueue.preemptor = "ns/big";

  const ReconcilePlan& stop = world.Step();
  EXPECT_EQ(ActionNames(stop, Verb::kDelete, ObjectKind::kPod), (std::vector<std::string>{"wd-worker-0", "wd-worker-1"}));
  EXPECT_EQ(Count(stop, Verb::kUpdateStatus, ObjectKind::kKueueWorkload), 0) << "pods still run: the quota stays";
  EXPECT_EQ(stop.status.run, run + 1);
  EXPECT_EQ(stop.status.phase, JobPhase::kPending);
  ASSERT_TRUE(stop.status.queue.has_value());
  EXPECT_EQ(stop.status.queue->state, "Evicted");
  EXPECT_EQ(stop.status.queue->evictions, 1);
  ASSERT_TRUE(stop.status.queue->last_eviction.has_value());
  EXPECT_EQ(stop.status.queue->last_eviction->reason, "Preempted");
  EXPECT_THAT(EventMessage(stop.events, "Preempted"), HasSubstr("preempted by FleetJob ns/big in ClusterQueue gpu-cq"))
      << Describe(stop);

  // The pods terminate: now the quota goes back, in one write.
  const ReconcilePlan& release = world.Step();
  ASSERT_EQ(Count(release, Verb::kUpdateStatus, ObjectKind::kKueueWorkload), 1) << Describe(release);
  EXPECT_FALSE(HasEvent(release.events, "Preempted")) << "one event per eviction";
  EXPECT_EQ(release.status.queue->evictions, 1);
  EXPECT_EQ(WorkloadCond(world, "QuotaReserved").value("status", ""), "False");
  EXPECT_EQ(WorkloadCond(world, "QuotaReserved").value("reason", ""), "PendingEvaluation");
  EXPECT_EQ(WorkloadCond(world, "Requeued").value("status", ""), "True");
  EXPECT_EQ(WorkloadCond(world, "Requeued").value("reason", ""), "Preempted");
  EXPECT_EQ(WorkloadCond(world, "Admitted").value("status", ""), "False");
  EXPECT_EQ(WorkloadCond(world, "Admitted").value("reason", ""), "NoReservation");
  EXPECT_FALSE(Workload(world)["status"].contains("admission"));

  // Queued again; admitted again: a new run's pods, with the admission.
  world.Reap();
  const ReconcilePlan& queued = world.Step();
  EXPECT_THAT(queued.actions, IsEmpty()) << Describe(queued);
  EXPECT_EQ(queued.status.queue->state, "Queued");
  Admit(world);
  const ReconcilePlan& again = world.Step();
  EXPECT_EQ(ActionNames(again, Verb::kCreate, ObjectKind::kPod), (std::vector<std::string>{"wd-worker-0", "wd-worker-1"}));
  EXPECT_EQ(world.Pod("wd-worker-0")["metadata"]["labels"][kRunLabel], std::to_string(run + 1));
  EXPECT_EQ(world.Pod("wd-worker-0")["spec"]["nodeSelector"][kGpuNodeLabel], "a100");
  EXPECT_EQ(WorkloadCond(world, "PodsReady").value("reason", ""), "WaitForStart") << "a new admission starts afresh";
}

TEST(KueueTest, AnOperatorRestartedAfterTheStopReleasesTheQuota) {
  // Evicted, quota still reserved, no pod left (the write was lost): the first plan writes it.
  World world(QueuedJob().Obj());
  world.Step();
  Admit(world);
  SetConditions(world, {Cond("Evicted", true, "PodsReadyTimeout", "Exceeded the PodsReady timeout")});
  const ReconcilePlan& plan = world.Step();
  ASSERT_EQ(Count(plan, Verb::kUpdateStatus, ObjectKind::kKueueWorkload), 1) << Describe(plan);
  EXPECT_EQ(WorkloadCond(world, "Requeued").value("status", ""), "False") << "only preemption and node failures requeue at once";
  EXPECT_EQ(WorkloadCond(world, "QuotaReserved").value("status", ""), "False");
}

// ---- finished, deleted, suspended, resized ----

TEST(KueueTest, TheEndOfTheJobFinishesTheWorkloadThenReleasesIt) {
  World world = AdmittedWorld();
  for (const std::string pod : {"wd-worker-0", "wd-worker-1"}) world.Edit(pod, [](PodBuilder& p) { p.Succeeded(); });
  const ReconcilePlan& done = world.Step();
  EXPECT_EQ(done.status.phase, JobPhase::kSucceeded);
  EXPECT_EQ(WorkloadCond(world, "Finished").value("status", ""), "True");
  EXPECT_EQ(WorkloadCond(world, "Finished").value("reason", ""), "Succeeded");
  EXPECT_EQ(WorkloadCond(world, "Finished").value("message", ""), done.status.message);
  EXPECT_EQ(Workload(world)["metadata"]["finalizers"], Json::array({kueue::kResourceInUseFinalizer}))
      << "the finalizer goes once Finished is written";
  const ReconcilePlan& released = world.Step();
  EXPECT_EQ(Count(released, Verb::kUpdate, ObjectKind::kKueueWorkload), 1) << Describe(released);
  EXPECT_TRUE(Workload(world)["metadata"]["finalizers"].empty());
  EXPECT_EQ(released.status.queue->state, "Finished");
  EXPECT_THAT(world.Step().actions, IsEmpty());
}

TEST(KueueTest, ADeletedJobsWorkloadLosesItsFinalizer) {
  World world = AdmittedWorld();
  world.job["metadata"]["deletionTimestamp"] = FormatRfc3339(world.now);
  const ReconcilePlan& plan = world.Step();
  ASSERT_NE(FindAction(plan, Verb::kUpdate, ObjectKind::kKueueWorkload, kWorkload), nullptr) << Describe(plan);
  EXPECT_TRUE(Workload(world)["metadata"]["finalizers"].empty());
}

TEST(KueueTest, SuspendingAQueuedJobDeactivatesItsWorkload) {
  World world(QueuedJob().Obj());
  world.Step();
  EXPECT_EQ(Workload(world)["spec"]["active"], true);
  world.EditSpec("/spec/runPolicy/suspend", true);
  const ReconcilePlan& suspended = world.Step();
  EXPECT_EQ(Workload(world)["spec"]["active"], false) << Describe(suspended);
  EXPECT_EQ(suspended.status.phase, JobPhase::kSuspended);
  world.EditSpec("/spec/runPolicy/suspend", false);
  world.Step();
  EXPECT_EQ(Workload(world)["spec"]["active"], true);
  EXPECT_EQ(world.Status().value("phase", ""), "Pending");

  // Kueue deactivated it (its requeuing limit): the operator does not fight it; the job waits.
  (*world.observed.kueue.workload)["spec"]["active"] = false;
  SetConditions(world, {Cond("Evicted", true, "Deactivated", "The workload is deactivated due to exceeding the requeuing limit")});
  const ReconcilePlan& deactivated = world.Step();
  EXPECT_EQ(Count(deactivated, Verb::kUpdate, ObjectKind::kKueueWorkload), 0) << Describe(deactivated);
  EXPECT_EQ(Workload(world)["spec"]["active"], false);
  EXPECT_THAT(deactivated.status.message, HasSubstr("exceeding the requeuing limit"));
  EXPECT_EQ(deactivated.status.phase, JobPhase::kPending);
}

TEST(KueueTest, AResizeUpdatesAQueuedWorkloadAndReadmitsAnAdmittedOne) {
  // Without quota: the pod sets change in place.
  World queued(QueuedJob().Obj());
  queued.Step();
  queued.EditSpec("/spec/worker/replicas", 3);
  const ReconcilePlan& updated = queued.Step();
  EXPECT_EQ(Count(updated, Verb::kUpdate, ObjectKind::kKueueWorkload), 1) << Describe(updated);
  EXPECT_EQ(Workload(queued)["spec"]["podSets"][0]["count"], 3);

  // Admitted, a new image: the admission stands (as the pods, until their next run).
  World world = AdmittedWorld();
  world.EditSpec("/spec/worker/template/spec/containers/0/image", "paddlepaddle/paddle:3.0.0");
  const ReconcilePlan& same = world.Step();
  EXPECT_EQ(Count(same, Verb::kDelete, ObjectKind::kPod), 0) << Describe(same);
  EXPECT_EQ(Count(same, Verb::kUpdate, ObjectKind::kKueueWorkload), 0) << Describe(same);
  EXPECT_EQ(Count(same, Verb::kDelete, ObjectKind::kKueueWorkload), 0) << Describe(same);

  // Admitted, new replicas: the pods go, then the Workload (its pod sets are immutable); a new one queues.
  world.EditSpec("/spec/worker/replicas", 3);
  const ReconcilePlan& stop = world.Step();
  EXPECT_EQ(Count(stop, Verb::kDelete, ObjectKind::kPod), 2) << Describe(stop);
  EXPECT_EQ(Count(stop, Verb::kDelete, ObjectKind::kKueueWorkload), 0);
  const ReconcilePlan& replace = world.Step();
  EXPECT_EQ(Count(replace, Verb::kDelete, ObjectKind::kKueueWorkload), 1) << Describe(replace);
  EXPECT_FALSE(world.observed.kueue.workload.has_value());
  const Action* create = FindAction(world.Step(), Verb::kCreate, ObjectKind::kKueueWorkload, kWorkload);
  ASSERT_NE(create, nullptr) << Describe(world.plan);
  EXPECT_EQ(create->object["spec"]["podSets"][0]["count"], 3);
}

TEST(KueueTest, HeterStagesArePodSetsOfTheirOwn) {
  World world(JobBuilder("wd").Ps(1, 2).Heter({"gpu", 3}).Label(kueue::kQueueLabel, "team-a").Obj());
  const Action* create = FindAction(world.Step(), Verb::kCreate, ObjectKind::kKueueWorkload, kWorkload);
  ASSERT_NE(create, nullptr) << Describe(world.plan);
  std::vector<std::string> names;
  for (const Json& set : create->object["spec"]["podSets"]) names.push_back(set["name"]);
  EXPECT_THAT(names, ElementsAre("server", "worker", "gpu"));
  EXPECT_EQ(create->object["spec"]["podSets"][2]["count"], 3);
}

TEST(KueueTest, AJobWhoseSpecTurnsInvalidFinishesItsWorkload) {
  World world = AdmittedWorld();
  world.EditSpec("/spec/worker/replicas", -1);
  const ReconcilePlan& failed = world.Step();
  EXPECT_EQ(failed.status.phase, JobPhase::kFailed) << Describe(failed);
  EXPECT_EQ(WorkloadCond(world, "Finished").value("reason", ""), "Failed");
  EXPECT_EQ(WorkloadCond(world, "Finished").value("message", ""), failed.status.message);
}

// ---- the Workload, read and edited ----

TEST(KueueWorkloadTest, TheNameIsKueuesAndThePreemptorIsReadFromItsMessage) {
  EXPECT_EQ(kueue::WorkloadName("wd", kUid), kWorkload);
  EXPECT_EQ(kueue::PreemptorJobUid("Preempted to accommodate a workload (UID: a-1, JobUID: b-2) due to prioritization"), "b-2");
  EXPECT_EQ(kueue::PreemptorJobUid("Preempted for another reason"), "");
}

TEST(KueueWorkloadTest, AStatusEditKeepsTheTransitionTimeOfAnUnchangedStatus) {
  Json workload = {{"status", {{"conditions", Json::array({Cond("PodsReady", false, "WaitForStart")})}}}};
  const Json same = kueue::ApplyStatusEdit(
      workload, kueue::StatusEdit({kueue::WorkloadConditionJson("PodsReady", false, "WaitForRecovery", "m", At(100), 2)}, false));
  EXPECT_EQ(same["status"]["conditions"][0]["lastTransitionTime"], "2026-11-28T10:00:00Z");
  EXPECT_EQ(same["status"]["conditions"][0]["reason"], "WaitForRecovery");
  EXPECT_EQ(same["status"]["conditions"][0]["observedGeneration"], 2);
  const Json changed = kueue::ApplyStatusEdit(
      workload, kueue::StatusEdit({kueue::WorkloadConditionJson("PodsReady", true, "Started", "m", At(100), 2)}, false));
  EXPECT_EQ(changed["status"]["conditions"][0]["lastTransitionTime"], FormatRfc3339(At(100)));
}

// A plan from a cache that is behind: Kueue has admitted the Workload again since. The release
// must not take that admission away.
TEST(KueueWorkloadTest, TheQuotaReleaseAppliesOnlyToAWorkloadStillEvicted) {
  const Json evicted = {{"metadata", {{"generation", 1}}},
                        {"status", {{"admission", {{"clusterQueue", "gpu-cq"}}},
                                    {"conditions", Json::array({Cond("QuotaReserved", true, "QuotaReserved"),
                                                                Cond("Evicted", true, "Preempted", "by big")})}}}};
  const Json release = kueue::QuotaReleaseEdit(kueue::ReadWorkloadState(evicted), At(10));
  const Json released = kueue::ApplyStatusEdit(evicted, release);
  EXPECT_FALSE(released["status"].contains("admission"));
  EXPECT_EQ(kueue::WorkloadCondition(released, "QuotaReserved")->value("status", ""), "False");

  Json readmitted = evicted;
  readmitted["status"]["conditions"] = Json::array({Cond("QuotaReserved", true, "QuotaReserved"),
                                                    Cond("Evicted", false, "QuotaReserved", "Previously: Preempted")});
  EXPECT_EQ(kueue::ApplyStatusEdit(readmitted, release), readmitted);
}


// ---- topology-aware scheduling (design 4) ----

constexpr char kBlockLabel[] = "cloud.example.com/block";

// Kueue's TAS assignment of every pod of `pod_set` to one block (added to Admit's admission).
void AssignTopology(World& world, const std::string& pod_set) {
  for (Json& a : (*world.observed.kueue.workload)["status"]["admission"]["podSetAssignments"]) {
    if (a["name"] != pod_set) continue;
    a["topologyAssignment"] = {{"levels", {kBlockLabel}},
                               {"slices", {{{"domainCount", 1}, {"valuesPerLevel", {{{"universal", "b1"}}}},
                                            {"podCounts", {{"universal", 2}}}}}}};
  }
}

TEST(KueueTest, ATemplatesTopologyAnnotationsAskTheirPodSetsTopologyByRank) {
  World world(QueuedJob()
                  .Set("/spec/worker/template/metadata/annotations",
                       {{kueue::kRequiredTopologyAnnotation, kBlockLabel},
                        {kueue::kSliceRequiredTopologyAnnotation, "kubernetes.io/hostname"},
                        {kueue::kSliceSizeAnnotation, "2"}})
                  .Obj());
  const Action* create = FindAction(world.Step(), Verb::kCreate, ObjectKind::kKueueWorkload, kWorkload);
  ASSERT_NE(create, nullptr);
  EXPECT_EQ(create->object["spec"]["podSets"][0]["topologyRequest"],
            (Json{{"required", kBlockLabel}, {"podIndexLabel", kIndexLabel},
                  {"podSetSliceRequiredTopology", "kubernetes.io/hostname"}, {"podSetSliceSize", 2}}));

  // Preferred and unconstrained as Kueue reads them; no annotation: no request.
  EXPECT_EQ(kueue::TopologyRequest({{"metadata", {{"annotations", {{kueue::kPreferredTopologyAnnotation, kBlockLabel}}}}}}),
            (Json{{"preferred", kBlockLabel}, {"podIndexLabel", kIndexLabel}}));
  EXPECT_EQ(kueue::TopologyRequest({{"metadata", {{"annotations", {{kueue::kUnconstrainedTopologyAnnotation, "true"}}}}}}),
            (Json{{"unconstrained", true}, {"podIndexLabel", kIndexLabel}}));
  EXPECT_EQ(kueue::TopologyRequest({{"metadata", {{"annotations", {{"team", "search"}}}}}}), std::nullopt);
  World plain(QueuedJob().Obj());
  create = FindAction(plain.Step(), Verb::kCreate, ObjectKind::kKueueWorkload, kWorkload);
  ASSERT_NE(create, nullptr);
  EXPECT_FALSE(create->object["spec"]["podSets"][0].contains("topologyRequest"));
}

TEST(KueueTest, ATopologyAssignmentGatesThePodsForKueueToPlaceByRank) {
  World world(QueuedJob().Set("/spec/worker/template/metadata/annotations", {{kueue::kRequiredTopologyAnnotation, kBlockLabel}}).Obj());
  world.Step();
  Admit(world);
  AssignTopology(world, "worker");
  world.Step();
  ASSERT_EQ(world.pods.size(), 2u);
  for (int rank = 0; rank < 2; ++rank) {
    const Json& pod = world.Pod("wd-worker-" + std::to_string(rank));
    EXPECT_EQ(pod["spec"]["schedulingGates"], (Json::array({{{"name", kueue::kTopologyGate}}}))) << pod.dump();
    EXPECT_EQ(pod["metadata"]["labels"][kIndexLabel], std::to_string(rank)) << "the rank Kueue's ungater reads";
    EXPECT_EQ(pod["metadata"]["annotations"][kueue::kRequiredTopologyAnnotation], kBlockLabel);
    EXPECT_EQ(pod["metadata"]["annotations"][kueue::kWorkloadAnnotation], kWorkload);
    EXPECT_EQ(pod["metadata"]["labels"][kueue::kPodSetLabel], "worker");
    // The flavor's node label, and no topology one: Kueue's ungater adds the block's.
    EXPECT_EQ(pod["spec"]["nodeSelector"], (Json{{kGpuNodeLabel, "a100"}}));
  }

  // Gated pods wait for Kueue, not for the scheduler: past the pending timeout they are no problem.
  for (Json& pod : world.pods) {
    pod["status"]["conditions"] = {{{"type", "PodScheduled"}, {"status", "False"}, {"reason", "SchedulingGated"},
                                    {"message", "Scheduling is blocked due to non-empty scheduling gates"}}};
  }
  world.Advance(3600);
  const ReconcilePlan& waiting = world.Step();
  const Json unschedulable = Condition(waiting.status.ToJson(), "Unschedulable");
  EXPECT_TRUE(unschedulable.is_null() || unschedulable["status"] == "False") << unschedulable.dump();
}

TEST(KueueTest, ImplicitTopologyMarksThePodsUnconstrainedAndNoAssignmentGatesNothing) {
  // The flavor names a Topology and the job asked none: Kueue assigns one anyway.
  World implicit(QueuedJob().Obj());
  implicit.Step();
  Admit(implicit);
  AssignTopology(implicit, "worker");
  implicit.Step();
  ASSERT_FALSE(implicit.pods.empty());
  for (const Json& pod : implicit.pods) {
    EXPECT_EQ(pod["spec"]["schedulingGates"], (Json::array({{{"name", kueue::kTopologyGate}}})));
    EXPECT_EQ(pod["metadata"]["annotations"][kueue::kUnconstrainedTopologyAnnotation], "true");
  }
  // No topologyAssignment: no gate, no annotation.
  World plain = AdmittedWorld();
  ASSERT_FALSE(plain.pods.empty());
  for (const Json& pod : plain.pods) {
    EXPECT_FALSE(pod["spec"].contains("schedulingGates")) << pod.dump();
    EXPECT_FALSE(pod["metadata"]["annotations"].contains(kueue::kUnconstrainedTopologyAnnotation));
  }
}

// ---- MultiKueue (docs/design/kueue.md 3) ----

// On the manager cluster: the job names MultiKueue in spec.managedBy, and MultiKueue's adapter has
// written the status of the job's copy on a worker.
Json DispatchedJob() {
  Json job = QueuedJob().Obj();
  job["spec"]["managedBy"] = kueue::kMultiKueueController;
  job["status"] = {{"phase", "Running"}, {"message", "running on worker-1"}, {"run", 3}};
  return job;
}

TEST(MultiKueueTest, OnTheManagerADispatchedJobGetsItsWorkloadAndNothingElse) {
  World world(DispatchedJob());
  const FleetJobStatus mirrored = FleetJobStatus::FromJson(world.Status());
  const ReconcilePlan& queued = world.Step();
  ASSERT_EQ(queued.actions.size(), 1u) << Describe(queued);
  EXPECT_EQ(queued.actions[0].verb, Verb::kCreate);
  EXPECT_EQ(queued.actions[0].name, kWorkload) << "the same Workload as a job queued here";
  EXPECT_EQ(Workload(world)["spec"]["queueName"], "team-a");
  EXPECT_EQ(queued.status, mirrored) << "the status is MultiKueue's adapter's";
  EXPECT_THAT(world.events, IsEmpty());

  Admit(world);   // MultiKueue dispatches it: the job runs on a worker, not here
  EXPECT_THAT(world.Step().actions, IsEmpty()) << Describe(world.plan);
  EXPECT_THAT(world.PodNames(), IsEmpty());
  EXPECT_EQ(world.plan.status, mirrored);

  // MultiKueue copies the worker's Finished onto the Workload: its finalizer goes, nothing else.
  SetConditions(world, {Cond("Finished", true, "Succeeded", "the FleetJob Succeeded")});
  const ReconcilePlan& released = world.Step();
  ASSERT_EQ(released.actions.size(), 1u) << Describe(released);
  EXPECT_EQ(released.actions[0].verb, Verb::kUpdate);
  EXPECT_TRUE(Workload(world)["metadata"]["finalizers"].empty());
  EXPECT_EQ(released.status, mirrored);
  EXPECT_THAT(world.Step().actions, IsEmpty());
  EXPECT_THAT(world.events, IsEmpty());
}

TEST(MultiKueueTest, OnTheManagerAJobThatCannotBeWiredPlansNothingOfItsEnd) {
  // Lists too long for fleetrun's env: a job queued here would fail, and its TTL delete it.
  Json job = JobBuilder("big").Collective(7000).ProcessesPerPod(2).Label(kueue::kQueueLabel, "team-a").Obj();
  job["spec"]["managedBy"] = kueue::kMultiKueueController;
  job["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = 0;
  const ReconcilePlan plan = PlanFor(job, Observed{}, T0());
  EXPECT_THAT(plan.actions, IsEmpty()) << "its end is the worker's: " << Describe(plan);
}

// On a worker cluster: MultiKueue's copy of the job names the Workload MultiKueue made for it,
// which carries the manager's labels.
constexpr char kPrebuilt[] = "fleetjob-wd-4f2a9";
Json PrebuiltWorkload(int workers) {
  return {{"apiVersion", kueue::kApiVersion}, {"kind", "Workload"},
          {"metadata", {{"name", kPrebuilt}, {"namespace", kNamespace}, {"resourceVersion", "7"}, {"generation", 1},
                        {"labels", {{kueue::kJobUidLabel, "uid-on-the-manager"}, {kJobLabel, "wd"},
                                    {"kueue.x-k8s.io/multikueue-origin", "manager"}}}}},
          {"spec", {{"queueName", "team-a"}, {"podSets", Json::array({{{"name", "worker"}, {"count", workers}, {"template", Json::object()}}})}}}};
}
JobBuilder CopiedJob() { return QueuedJob().Label(kueue::kPrebuiltWorkloadLabel, kPrebuilt); }

TEST(MultiKueueTest, OnAWorkerThePrebuiltWorkloadIsAdoptedAndAdmitsTheJob) {
  World world(CopiedJob().Obj());
  world.observed.kueue.workload = PrebuiltWorkload(2);
  const ReconcilePlan& adopted = world.Step();
  EXPECT_EQ(Count(adopted, Verb::kCreate, ObjectKind::kKueueWorkload), 0) << Describe(adopted);
  ASSERT_EQ(Count(adopted, Verb::kUpdate, ObjectKind::kKueueWorkload), 1) << Describe(adopted);
  const Json& meta = Workload(world)["metadata"];
  EXPECT_EQ(meta["name"], kPrebuilt);
  EXPECT_EQ(meta["labels"][kueue::kJobUidLabel], kUid);
  EXPECT_EQ(meta["ownerReferences"][0]["uid"], kUid);
  EXPECT_EQ(meta["ownerReferences"][0]["controller"], true);
  EXPECT_EQ(meta["finalizers"], Json::array({kueue::kResourceInUseFinalizer}));
  EXPECT_EQ(Workload(world)["spec"], PrebuiltWorkload(2)["spec"]) << "its spec is MultiKueue's copy";
  EXPECT_EQ(adopted.status.phase, JobPhase::kPending);
  EXPECT_EQ(adopted.status.queue->workload, kPrebuilt);
  EXPECT_THAT(world.PodNames(), IsEmpty());

  Admit(world);
  world.Settle();
  EXPECT_EQ(world.plan.status.phase, JobPhase::kRunning);
  EXPECT_EQ(world.Pod("wd-worker-0")["metadata"]["annotations"][kueue::kWorkloadAnnotation], kPrebuilt);
  EXPECT_EQ(WorkloadCond(world, "PodsReady").value("status", ""), "True");
}

TEST(MultiKueueTest, OnAWorkerACopySeenBeforeItsWorkloadWaitsForIt) {
  World world(CopiedJob().Obj());
  const ReconcilePlan& waiting = world.Step();
  EXPECT_THAT(waiting.actions, IsEmpty()) << "the Workload is MultiKueue's to make: " << Describe(waiting);
  EXPECT_EQ(waiting.status.phase, JobPhase::kPending);
  const Json admitted = Condition(waiting.status.ToJson(), "Admitted");
  EXPECT_EQ(admitted.value("reason", ""), "WaitingForWorkload");
  EXPECT_THAT(admitted.value("message", ""), HasSubstr(kPrebuilt));
  EXPECT_TRUE(waiting.requeue_after.has_value()) << "nothing ties the Workload to the job before it is adopted";

  world.observed.kueue.workload = PrebuiltWorkload(2);
  EXPECT_EQ(Count(world.Step(), Verb::kUpdate, ObjectKind::kKueueWorkload), 1) << Describe(world.plan);
}

TEST(MultiKueueTest, OnAWorkerAPrebuiltWorkloadOutOfSyncIsFinishedAndTheJobFails) {
  World world(CopiedJob().Obj());
  world.observed.kueue.workload = PrebuiltWorkload(3);
  (*world.observed.kueue.workload)["metadata"]["finalizers"] = Json::array({kueue::kResourceInUseFinalizer});
  const ReconcilePlan& failed = world.Step();
  EXPECT_EQ(failed.status.phase, JobPhase::kFailed);
  const Json condition = Condition(failed.status.ToJson(), "Failed");
  EXPECT_EQ(condition.value("reason", ""), kueue::kOutOfSync);
  EXPECT_THAT(condition.value("message", ""), HasSubstr(kPrebuilt));
  EXPECT_EQ(WorkloadCond(world, "Finished").value("reason", ""), kueue::kOutOfSync);
  EXPECT_THAT(world.PodNames(), IsEmpty());
  world.Step();
  EXPECT_TRUE(Workload(world)["metadata"]["finalizers"].empty()) << "released once Finished";
}

}  // namespace
}  // namespace fleet::op::testing
