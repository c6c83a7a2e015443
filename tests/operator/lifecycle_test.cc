// A job's life after its pods exist: steady state, success and cleanup, TTL, activeDeadlineSeconds,
// suspend/resume, deletion, and the events of each transition.
//
// The stories use PS jobs with one server; the wiring of several servers is covered in
// env_contract_test.cc.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "builders.h"
#include "fleet/base/time.h"
#include "fleet/operator/planner.h"
#include "world.h"

namespace fleet::op::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::vector<std::pair<std::string, std::string>> TypesAndReasons(const std::vector<PlannedEvent>& events) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const PlannedEvent& e : events) out.emplace_back(e.type, e.reason);
  return out;
}

// ---- steady state ----

TEST(SteadyStateTest, RunningJobNeedsNothing) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Obj());
  world.Advance(30);
  const ReconcilePlan& plan = world.Step();

  EXPECT_TRUE(plan.actions.empty()) << Describe(plan);
  EXPECT_TRUE(plan.events.empty());
  EXPECT_FALSE(plan.requeue_after.has_value());
  EXPECT_EQ(plan.status.ToJson()["phase"], "Running");
  const Json running = Condition(plan.status.ToJson(), "Running");
  EXPECT_EQ(running.value("status", ""), "True");
  EXPECT_EQ(running.value("reason", ""), "AllPodsRunning");
  EXPECT_EQ(plan.status.ToJson()["restartCount"], 0);
  EXPECT_EQ(plan.status.ToJson()["replicaStatuses"],
            Json({{"server", {{"replicas", 1}, {"active", 1}, {"ready", 1}, {"succeeded", 0}, {"failed", 0}}},
                  {"worker", {{"replicas", 4}, {"active", 4}, {"ready", 4}, {"succeeded", 0}, {"failed", 0}}}}));
}

TEST(SteadyStateTest, ReadyCountsOnlyReadyPods) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Obj());
  world.Edit("wd-worker-3", [](PodBuilder& p) { p.Ready(false); });
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(plan.status.ToJson()["replicaStatuses"]["worker"]["active"], 4);
  EXPECT_EQ(plan.status.ToJson()["replicaStatuses"]["worker"]["ready"], 3);
}

TEST(SteadyStateTest, SamePlanForTheSameInputs) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Obj());
  const ReconcilePlan a = PlanFor(world.job, world.observed, At(30), world.settings);
  const ReconcilePlan b = PlanFor(world.job, world.observed, At(30), world.settings);
  EXPECT_EQ(Describe(a), Describe(b));
}

TEST(SteadyStateTest, SamePlanForTheSameInputsWhileCreating) {
  const Json job = JobBuilder("wd").Collective(4, 8).ActiveDeadlineSeconds(600).Obj();
  const ReconcilePlan a = PlanFor(job, Observed{}, T0(), OperatorSettings{});
  const ReconcilePlan b = PlanFor(job, Observed{}, T0(), OperatorSettings{});
  EXPECT_EQ(Describe(a), Describe(b));
  EXPECT_EQ(a.actions.size(), 4u + 3u) << "four pods, the sidecar's account, role and binding";
}

TEST(SteadyStateTest, ConditionTimesStayPutWhileNothingChanges) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Obj());
  const Json before = Condition(world.Status(), "Running");
  world.Advance(3600);
  world.Step();
  EXPECT_EQ(Condition(world.Status(), "Running"), before);
}

// ---- success ----

TEST(SuccessTest, AllWorkersSucceededFinishesTheJobAndStopsTheServers) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Obj());
  for (int i = 0; i < 4; ++i) world.Edit("wd-worker-" + std::to_string(i), [](PodBuilder& p) { p.Succeeded(); });
  world.Advance(100);
  const ReconcilePlan& plan = world.Step();

  EXPECT_EQ(plan.status.ToJson()["phase"], "Succeeded");
  EXPECT_EQ(plan.status.ToJson()["completionTime"], FormatRfc3339(At(100)));
  EXPECT_EQ(Condition(plan.status.ToJson(), "Succeeded").value("status", ""), "True");
  EXPECT_EQ(Condition(plan.status.ToJson(), "Running").value("status", ""), "False");
  EXPECT_EQ(ActionNames(plan, Verb::kDelete, ObjectKind::kPod), std::vector<std::string>{"wd-server-0"});
  EXPECT_EQ(plan.actions.size(), 1u) << Describe(plan);
  EXPECT_EQ(plan.status.ToJson()["replicaStatuses"]["worker"]["succeeded"], 4);
  EXPECT_EQ(TypesAndReasons(plan.events), (std::vector<std::pair<std::string, std::string>>{{"Normal", "Succeeded"}}));
}

// Regression (fixed): planner.cc Run sets phase Starting ("waiting for all pods to run") whenever some current pod
// is not Running, and a Succeeded worker is not Running. A PS job whose first workers finish while
// the others still train flips Running -> Starting (Normal event "Starting") until the last worker
// is done. Expected: the job stays Running with no event.
TEST(SuccessTest, JobStaysRunningWhileTheFirstWorkersFinish) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Obj());
  world.Edit("wd-worker-0", [](PodBuilder& p) { p.Succeeded(); });
  const ReconcilePlan& plan = world.Step();

  EXPECT_TRUE(plan.actions.empty()) << Describe(plan);
  EXPECT_EQ(plan.status.ToJson()["phase"], "Running");
  EXPECT_THAT(plan.events, IsEmpty()) << Describe(plan);
  EXPECT_EQ(plan.status.ToJson()["replicaStatuses"]["worker"]["succeeded"], 1);
  EXPECT_EQ(plan.status.ToJson()["replicaStatuses"]["worker"]["active"], 3);
}

TEST(SuccessTest, CleanPodPolicyAllDeletesEveryPod) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).CleanPodPolicy("All").Obj());
  for (int i = 0; i < 4; ++i) world.Edit("wd-worker-" + std::to_string(i), [](PodBuilder& p) { p.Succeeded(); });
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(plan.status.ToJson()["phase"], "Succeeded");
  EXPECT_EQ(ActionNames(plan, Verb::kDelete, ObjectKind::kPod), kAllPods);
  EXPECT_EQ(plan.actions.size(), 5u);
}

TEST(SuccessTest, CleanPodPolicyNoneKeepsEveryPod) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).CleanPodPolicy("None").Obj());
  for (int i = 0; i < 4; ++i) world.Edit("wd-worker-" + std::to_string(i), [](PodBuilder& p) { p.Succeeded(); });
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(plan.status.ToJson()["phase"], "Succeeded");
  EXPECT_TRUE(plan.actions.empty()) << Describe(plan);
}

TEST(SuccessTest, FinishedJobStaysFinished) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Obj());
  for (int i = 0; i < 4; ++i) world.Edit("wd-worker-" + std::to_string(i), [](PodBuilder& p) { p.Succeeded(); });
  world.Advance(100);
  world.Step();
  world.Reap();
  world.Advance(100);
  const ReconcilePlan& plan = world.Step();

  EXPECT_TRUE(plan.actions.empty()) << Describe(plan);
  EXPECT_TRUE(plan.events.empty());
  EXPECT_EQ(plan.status.ToJson()["phase"], "Succeeded");
  EXPECT_EQ(plan.status.ToJson()["completionTime"], FormatRfc3339(At(100))) << "completionTime is not moved";
}

TEST(SuccessTest, TtlRequeuesUntilExpiryThenDeletesTheJob) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).TtlSecondsAfterFinished(100).Obj());
  for (int i = 0; i < 4; ++i) world.Edit("wd-worker-" + std::to_string(i), [](PodBuilder& p) { p.Succeeded(); });
  world.Step();
  ASSERT_EQ(world.Status()["phase"], "Succeeded");
  ASSERT_TRUE(world.plan.requeue_after.has_value());
  EXPECT_GE(world.plan.requeue_after->count(), 100);
  EXPECT_LE(world.plan.requeue_after->count(), 101);

  world.Reap();
  world.Advance(40);
  const ReconcilePlan& before = world.Step();
  EXPECT_TRUE(before.actions.empty()) << Describe(before);
  ASSERT_TRUE(before.requeue_after.has_value());
  EXPECT_GE(before.requeue_after->count(), 60);
  EXPECT_LE(before.requeue_after->count(), 61);
  EXPECT_FALSE(world.job_deleted);

  world.Advance(60);
  const ReconcilePlan& after = world.Step();
  EXPECT_NE(FindAction(after, Verb::kDelete, ObjectKind::kFleetJob, "wd"), nullptr) << Describe(after);
  EXPECT_TRUE(world.job_deleted);
}

TEST(SuccessTest, TtlAppliesToFailedJobsToo) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).TtlSecondsAfterFinished(0).Obj());
  world.Edit("wd-worker-1", [](PodBuilder& p) { p.Failed(1); });
  world.Step();
  EXPECT_EQ(world.Status()["phase"], "Failed");
  world.Step();
  EXPECT_TRUE(world.job_deleted) << Describe(world.plan);
}

// ---- activeDeadlineSeconds ----

TEST(DeadlineTest, RequeuesForTheRemainingTime) {
  const ReconcilePlan plan =
      PlanFor(JobBuilder("wd").Ps(1, 4).ActiveDeadlineSeconds(3600).Obj(), Observed{}, T0(), OperatorSettings{});
  ASSERT_TRUE(plan.requeue_after.has_value());
  EXPECT_GE(plan.requeue_after->count(), 3600);
  EXPECT_LE(plan.requeue_after->count(), 3601);

  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).ActiveDeadlineSeconds(3600).Obj());
  world.Advance(1800);
  const ReconcilePlan& later = world.Step();
  EXPECT_TRUE(later.actions.empty());
  ASSERT_TRUE(later.requeue_after.has_value());
  EXPECT_GE(later.requeue_after->count(), 1800);
  EXPECT_LE(later.requeue_after->count(), 1801);
}

TEST(DeadlineTest, PastTheDeadlineTheJobFailsAndRunningPodsGo) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).ActiveDeadlineSeconds(3600).Obj());
  world.Edit("wd-worker-0", [](PodBuilder& p) { p.Succeeded(); });
  world.Advance(3600);
  const ReconcilePlan& plan = world.Step();

  EXPECT_EQ(plan.status.ToJson()["phase"], "Failed");
  const Json failed = Condition(plan.status.ToJson(), "Failed");
  EXPECT_EQ(failed.value("reason", ""), "DeadlineExceeded");
  EXPECT_THAT(failed.value("message", ""), HasSubstr("activeDeadlineSeconds=3600"));
  EXPECT_EQ(plan.status.ToJson()["completionTime"], FormatRfc3339(At(3600)));
  EXPECT_EQ(ActionNames(plan, Verb::kDelete, ObjectKind::kPod),
            (std::vector<std::string>{"wd-server-0", "wd-worker-1", "wd-worker-2", "wd-worker-3"}));
  EXPECT_EQ(plan.actions.size(), 4u);
  EXPECT_EQ(TypesAndReasons(plan.events), (std::vector<std::pair<std::string, std::string>>{{"Warning", "Failed"}}));
}

// status.startTime has whole seconds (metav1.Time): a job created at .5 s must not be failed by
// activeDeadlineSeconds 3 at 3.0 s, 2.5 s after it started (issue 14).
TEST(DeadlineTest, TheDeadlineIsNeverShorterThanItsSeconds) {
  World world(JobBuilder("wd").Ps(1, 4).ActiveDeadlineSeconds(3).Obj());
  const Time started = T0() + std::chrono::milliseconds(500);
  world.now = started;
  world.Step();
  world.StartPods();
  world.now = started + std::chrono::milliseconds(2999);
  world.Step();
  EXPECT_NE(world.Status().value("phase", ""), "Failed") << "failed 2.999 s after the start";
  ASSERT_TRUE(world.plan.requeue_after.has_value());

  world.now = started + std::chrono::seconds(4);   // at most a second late
  world.Step();
  EXPECT_EQ(world.Status().value("phase", ""), "Failed");
  EXPECT_EQ(Condition(world.Status(), "Failed").value("reason", ""), "DeadlineExceeded");
}

// ---- suspend / resume ----

TEST(SuspendTest, SuspendRemovesEveryPodAndKeepsTheJob) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Obj());
  world.Advance(60);
  world.EditSpec("/spec/runPolicy/suspend", true);
  const ReconcilePlan& plan = world.Step();

  EXPECT_EQ(ActionNames(plan, Verb::kDelete, ObjectKind::kPod), kAllPods);
  EXPECT_EQ(plan.actions.size(), 5u) << Describe(plan);
  EXPECT_EQ(plan.status.ToJson()["phase"], "Suspended");
  EXPECT_EQ(Condition(plan.status.ToJson(), "Suspended").value("status", ""), "True");
  EXPECT_EQ(Condition(plan.status.ToJson(), "Running").value("status", ""), "False");
  EXPECT_FALSE(plan.status.ToJson().contains("startTime"));
  EXPECT_FALSE(world.job_deleted);

  world.Reap();
  const ReconcilePlan& quiet = world.Step();
  EXPECT_TRUE(quiet.actions.empty()) << Describe(quiet);
  EXPECT_TRUE(quiet.events.empty());
  EXPECT_EQ(quiet.status.ToJson()["phase"], "Suspended");
}

TEST(SuspendTest, JobCreatedSuspendedCreatesNothing) {
  const ReconcilePlan plan =
      PlanFor(JobBuilder("wd").Ps(1, 4).Suspend(true).Obj(), Observed{}, T0(), OperatorSettings{});
  EXPECT_TRUE(plan.actions.empty());
  EXPECT_EQ(plan.status.ToJson()["phase"], "Suspended");
  EXPECT_EQ(Condition(plan.status.ToJson(), "Suspended").value("status", ""), "True");
}

TEST(SuspendTest, ResumeRecreatesThePods) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Obj());
  world.EditSpec("/spec/runPolicy/suspend", true);
  world.Step();
  world.Reap();
  world.Step();
  world.Advance(600);
  world.EditSpec("/spec/runPolicy/suspend", false);
  const ReconcilePlan& plan = world.Step();

  EXPECT_EQ(ActionNames(plan, Verb::kCreate, ObjectKind::kPod), kAllPods);
  const Json suspended = Condition(plan.status.ToJson(), "Suspended");
  EXPECT_EQ(suspended.value("status", ""), "False");
  EXPECT_EQ(suspended.value("reason", ""), "Resumed");
  EXPECT_EQ(suspended.value("lastTransitionTime", ""), FormatRfc3339(At(600)));
  EXPECT_EQ(plan.status.ToJson()["startTime"], FormatRfc3339(At(600))) << "activeDeadlineSeconds counts from the resume";
  EXPECT_EQ(plan.status.ToJson()["phase"], "Pending");
  bool resumed_event = false;
  for (const PlannedEvent& e : plan.events) resumed_event = resumed_event || e.reason == "Resumed";
  EXPECT_TRUE(resumed_event);
}

// Regression (fixed): planner.cc Run keeps the endpoints ConfigMap of run N across a suspend. On resume the pods
// are recreated with the same run label and get new IPs; the published lists then name run N with
// other hosts, which the planner reads as "a pod was replaced and got a new address" and restarts
// the whole job (restartCount 1, phase Restarting, every pod deleted again), counted against
// backoffLimit (with backoffLimit 0 a resume fails the job). Expected: the resumed pods are wired
// with republished lists and the job runs with restartCount 0.
TEST(SuspendTest, ResumeIsNotCountedAsARestart) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Obj());
  world.EditSpec("/spec/runPolicy/suspend", true);
  world.Step();
  world.Reap();
  world.EditSpec("/spec/runPolicy/suspend", false);
  world.Settle();

  EXPECT_EQ(world.Status()["restartCount"], 0);
  EXPECT_EQ(world.Status()["phase"], "Running");
  for (const PlannedEvent& e : world.events) EXPECT_NE(e.reason, "Restarting") << e.message;
}

// ---- deletion ----

TEST(DeletionTest, JobBeingDeletedGetsNoActions) {
  World running = RunningWorld(JobBuilder("wd").Ps(1, 4).Obj());
  Json job = running.job;
  job["metadata"]["deletionTimestamp"] = FormatRfc3339(At(10));
  for (int i = 0; i < 4; ++i) running.Edit("wd-worker-" + std::to_string(i), [](PodBuilder& p) { p.Failed(1); });

  const ReconcilePlan plan = PlanFor(job, running.observed, At(20), running.settings);
  EXPECT_TRUE(plan.actions.empty()) << Describe(plan);
  EXPECT_TRUE(plan.events.empty());
  EXPECT_EQ(plan.status.ToJson(), job["status"]);
}

TEST(DeletionTest, NewJobBeingDeletedCreatesNothing) {
  const ReconcilePlan plan =
      PlanFor(JobBuilder("wd").Ps(1, 4).Deleting(T0()).Obj(), Observed{}, T0(), OperatorSettings{});
  EXPECT_TRUE(plan.actions.empty());
  EXPECT_TRUE(plan.events.empty());
}

// ---- events ----

TEST(EventsTest, HappyPathEmitsOneEventPerTransition) {
  World world(JobBuilder("wd").Ps(1, 4).Obj());
  world.Step();
  EXPECT_EQ(TypesAndReasons(world.plan.events),
            (std::vector<std::pair<std::string, std::string>>{{"Normal", "Pending"}}));
  world.StartPods();
  world.Step();
  EXPECT_EQ(TypesAndReasons(world.plan.events),
            (std::vector<std::pair<std::string, std::string>>{{"Normal", "EndpointsPublished"}, {"Normal", "Starting"}}));
  world.Step();
  EXPECT_EQ(TypesAndReasons(world.plan.events),
            (std::vector<std::pair<std::string, std::string>>{{"Normal", "Running"}}));
  world.Step();
  EXPECT_THAT(world.plan.events, IsEmpty());
}

TEST(EventsTest, FailureIsAWarning) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Obj());
  world.Edit("wd-worker-3", [](PodBuilder& p) { p.Failed(2); });
  world.Step();
  ASSERT_EQ(world.plan.events.size(), 1u) << Describe(world.plan);
  EXPECT_EQ(world.plan.events[0].type, "Warning");
  EXPECT_EQ(world.plan.events[0].reason, "Failed");
  EXPECT_THAT(world.plan.events[0].message, HasSubstr("wd-worker-3"));
}

// Regression (fixed): planner.cc Restart emits two events for one restart: SetPhase("Restarting") adds a Normal
// event with reason Restarting, then Restart adds a Warning event with reason Restarting. Expected:
// one Warning event per restart (kubectl describe shows the same restart twice, once as Normal).
TEST(EventsTest, RestartIsOneWarning) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).RestartPolicy("worker", "OnFailure").Obj());
  world.Edit("wd-worker-3", [](PodBuilder& p) { p.Failed(2); });
  world.Step();
  EXPECT_EQ(TypesAndReasons(world.plan.events),
            (std::vector<std::pair<std::string, std::string>>{{"Warning", "Restarting"}}))
      << Describe(world.plan);
}

}  // namespace
}  // namespace fleet::op::testing

namespace fleet::op::testing {
namespace {

// The planner reads pods only through ObservedPod: for every kind of pod state it decides on,
// the view says what the whole pod says.
TEST(ObservedPodTest, ReadsEveryPodStateThePlannerDecidesOn) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Obj());
  const auto view = [&](const std::string& pod) { return ObservedPod::Read(world.Pod(pod)); };
  const ObservedPod running = view("wd-worker-0");
  EXPECT_EQ(running.name, "wd-worker-0");
  EXPECT_EQ(running.uid, world.Pod("wd-worker-0")["metadata"]["uid"].get<std::string>());
  EXPECT_EQ(running.run, "0");
  EXPECT_EQ(running.created, T0());
  EXPECT_EQ(running.phase, PodPhase::kRunning);
  EXPECT_TRUE(running.ready);
  EXPECT_FALSE(running.terminating || running.evicted || running.exit_code || running.unschedulable || running.stalled);
  EXPECT_EQ(running.pod_ip, world.Pod("wd-worker-0")["status"]["podIP"].get<std::string>());
  EXPECT_EQ(running.host_ip, world.Pod("wd-worker-0")["status"]["hostIP"].get<std::string>());

  world.Edit("wd-worker-1", [](PodBuilder& p) { p.Failed(137); });
  EXPECT_EQ(view("wd-worker-1").phase, PodPhase::kFailed);
  EXPECT_EQ(view("wd-worker-1").exit_code, 137);
  world.Edit("wd-worker-2", [](PodBuilder& p) { p.Evicted(); });
  EXPECT_TRUE(view("wd-worker-2").evicted);
  EXPECT_EQ(view("wd-worker-2").exit_code, std::nullopt);
  world.Edit("wd-worker-3", [](PodBuilder& p) { p.Succeeded(); });
  EXPECT_EQ(view("wd-worker-3").phase, PodPhase::kSucceeded);
  EXPECT_EQ(view("wd-worker-3").exit_code, 0);
  world.Edit("wd-server-0", [](PodBuilder& p) { p.Ready(false); });
  EXPECT_FALSE(view("wd-server-0").ready);
  world.Edit("wd-server-0", [](PodBuilder& p) { p.Terminating(T0()); });
  EXPECT_TRUE(view("wd-server-0").terminating);
  world.Edit("wd-worker-0", [](PodBuilder& p) { p.Progress(false, "rank 0: no step for 10m"); });
  EXPECT_EQ(view("wd-worker-0").stalled, "rank 0: no step for 10m");
  world.Edit("wd-worker-0", [](PodBuilder& p) { p.Progress(true); });
  EXPECT_EQ(view("wd-worker-0").stalled, std::nullopt);
  world.Edit("wd-worker-0", [](PodBuilder& p) { p.Phase("Pending").Ip("").Unschedulable("0/3 nodes"); });
  EXPECT_EQ(view("wd-worker-0").phase, PodPhase::kPending);
  EXPECT_EQ(view("wd-worker-0").unschedulable, "Unschedulable: 0/3 nodes");
  world.Edit("wd-worker-0", [](PodBuilder& p) { p.Phase("Unknown"); });
  EXPECT_EQ(view("wd-worker-0").phase, PodPhase::kOther);
  EXPECT_EQ(ObservedPod::Read(Json::object()).phase, PodPhase::kPending) << "no status yet: Pending";
}

// Plans the world's job from its pods whole and cut down by ObservedPod::Trim (the pod informer's
// transform, all the controller's cache keeps): the plans must be the same.
void ExpectTheSamePlanFromTrimmedPods(const World& world, const std::string& when) {
  Observed whole = world.observed, trimmed = world.observed;
  whole.pods = PodList();
  trimmed.pods = PodList();
  for (const Json& pod : world.pods) {
    whole.pods.push_back(pod);
    const Json cut = ObservedPod::Trim(pod);
    EXPECT_FALSE(cut.contains("spec")) << when;
    EXPECT_LT(cut.dump().size(), pod.dump().size() / 2) << when << ": the spec is most of a pod";
    trimmed.pods.push_back(cut);
  }
  EXPECT_EQ(Describe(PlanFor(world.job, trimmed, world.now, world.settings)),
            Describe(PlanFor(world.job, whole, world.now, world.settings)))
      << when;
}

TEST(ObservedPodTest, TrimmedPodsPlanAsWholePodsDo) {
  for (const Json& spec : {JobBuilder("wd").Ps(1, 4).Obj(), JobBuilder("wd").Collective(4).Obj()}) {
    World world(spec);
    ExpectTheSamePlanFromTrimmedPods(world, "no pods");
    world.Step();
    ExpectTheSamePlanFromTrimmedPods(world, "pods pending");
    world.Settle();
    ExpectTheSamePlanFromTrimmedPods(world, "running");
    const std::string first = world.LivePodNames().front(), last = world.LivePodNames().back();
    const std::vector<std::pair<std::string, std::function<void(PodBuilder&)>>> changes = {
        {"not ready", [](PodBuilder& p) { p.Ready(false); }},
        {"stalled", [](PodBuilder& p) { p.Progress(false, "rank 0: no step for 10m"); }},
        {"unschedulable", [](PodBuilder& p) { p.Phase("Pending").Ip("").Unschedulable("0/3 nodes"); }},
        {"unknown", [](PodBuilder& p) { p.Phase("Unknown"); }},
        {"evicted", [](PodBuilder& p) { p.Evicted(); }},
        {"terminating", [](PodBuilder& p) { p.Terminating(T0()); }},
        {"succeeded", [](PodBuilder& p) { p.Succeeded(); }},
        {"failed", [](PodBuilder& p) { p.Failed(137); }},
    };
    for (const auto& [when, change] : changes) {
      World changed = world;
      changed.Edit(first, change);
      changed.Edit(last, change);
      ExpectTheSamePlanFromTrimmedPods(changed, when);
      changed.Advance(3600);
      ExpectTheSamePlanFromTrimmedPods(changed, when + ", an hour later");
    }
  }
}

// A plan hands its wiring to the next (the controller keeps it per job): reused while the job's
// generation and port block stay, rebuilt for a new spec, whose pods get the new lists.
TEST(WiredJobTest, PlansReuseTheWiringUntilTheSpecChanges) {
  World world(JobBuilder("wd").Ps(1, 4).Obj());
  world.Step();   // the pods' creates: the job is wired
  ASSERT_NE(world.plan.wired, nullptr);
  const std::shared_ptr<const WiredJob> wired = world.plan.wired;
  world.Settle();   // the pods run, the lists are published (wired again before)
  EXPECT_EQ(world.Status().value("phase", ""), "Running");
  EXPECT_EQ(world.plan.wired, wired) << "the same generation reuses the wiring";

  world.EditSpec("/spec/worker/replicas", 5);
  world.Settle();
  ASSERT_NE(world.plan.wired, nullptr);
  EXPECT_NE(world.plan.wired, wired) << "a new generation is wired afresh";
  EXPECT_EQ(world.plan.wired->job->generation, world.job["metadata"]["generation"].get<int64_t>());
  EXPECT_EQ(world.LivePodNames().size(), 6u);
  EXPECT_TRUE(world.HasPod("wd-worker-4"));

  EXPECT_TRUE(world.plan.wired->For(*world.plan.wired->job, world.plan.wired->host_port_base, "cluster.local"));
  EXPECT_FALSE(world.plan.wired->For(*world.plan.wired->job, 21000, "cluster.local")) << "another port block";
  EXPECT_FALSE(world.plan.wired->For(*world.plan.wired->job, world.plan.wired->host_port_base, "example.org"));
}

}  // namespace
}  // namespace fleet::op::testing

namespace fleet::op::testing {
namespace {

TEST(ImmutableFieldsTest, ChangingTheNetworkOfARunningJobFailsItWithWhatToDo) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Obj());
  EXPECT_EQ(world.Status().value("network", ""), "PodIP");
  world.EditSpec("/spec/network", "Service");
  world.Step();
  EXPECT_EQ(world.Status().value("phase", ""), "Failed");
  EXPECT_THAT(world.Status().value("message", ""), ::testing::HasSubstr("spec.network changed from PodIP to Service"));
  EXPECT_THAT(world.Status().value("message", ""), ::testing::HasSubstr("delete the FleetJob and create it again"));
  EXPECT_EQ(world.LivePodNames(), std::vector<std::string>{}) << "running pods go (cleanPodPolicy Running)";
}

TEST(ImmutableFieldsTest, ChangingTheRuntimeFailsTheJob) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 2).Obj());
  world.EditSpec("/spec/runtime", "fleet");
  world.Step();
  EXPECT_EQ(world.Status().value("phase", ""), "Failed");
  EXPECT_THAT(world.Status().value("message", ""), ::testing::HasSubstr("spec.runtime changed from paddle to fleet"));
}

TEST(ImmutableFieldsTest, ChangingTheModeFailsTheJob) {
  World world = RunningWorld(JobBuilder("wd").Collective(2).Obj());
  world.EditSpec("/spec/mode", "ps");
  world.EditSpec("/spec/server", JobBuilder("x").Ps(1, 1).Obj()["spec"]["server"]);
  world.Step();
  EXPECT_EQ(world.Status().value("phase", ""), "Failed");
  EXPECT_THAT(world.Status().value("message", ""), ::testing::HasSubstr("spec.mode changed from collective to ps"));
}

}  // namespace
}  // namespace fleet::op::testing

namespace fleet::op::testing {
namespace {

TEST(ProgressTest, StalledRanksMakeAStalledConditionNamingThem) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Obj());
  world.Edit("wd-worker-1", [](PodBuilder& p) { p.Progress(false, "rank 1 (pod wd-worker-1) has reported no step for 10m5s"); });
  world.Edit("wd-worker-3", [](PodBuilder& p) { p.Progress(false, "rank 3 stalled"); });
  world.Edit("wd-worker-0", [](PodBuilder& p) { p.Progress(true); });
  world.Step();
  const Json stalled = Condition(world.Status(), "Stalled");
  ASSERT_FALSE(stalled.is_null()) << world.Status().dump();
  EXPECT_EQ(stalled["status"], "True");
  EXPECT_EQ(stalled["reason"], "TrainingStalled");
  EXPECT_THAT(stalled["message"].get<std::string>(), ::testing::HasSubstr("wd-worker-1, wd-worker-3"));
  EXPECT_THAT(stalled["message"].get<std::string>(), ::testing::HasSubstr("no step for 10m5s"));
  EXPECT_EQ(world.Status().value("phase", ""), "Running") << "a stall is reported, not acted on";
  int warnings = 0;
  for (const PlannedEvent& e : world.events) warnings += e.reason == "Stalled" && e.type == "Warning";
  EXPECT_EQ(warnings, 1);

  // Progress again: the condition turns False; no second event on the way.
  world.Edit("wd-worker-1", [](PodBuilder& p) { p.Progress(true); });
  world.Edit("wd-worker-3", [](PodBuilder& p) { p.Progress(true); });
  world.Step();
  EXPECT_EQ(Condition(world.Status(), "Stalled")["status"], "False");
}

// ---- the status tells the truth: counts of the pods that exist, conditions that still hold ----

Json Counts(const ReconcilePlan& plan, const std::string& role) {
  return plan.status.ToJson()["replicaStatuses"][role];
}

// Regression (fixed): a suspended job showed its old counts (2/2 ready) with no pod left.
TEST(TruthfulStatusTest, ASuspendedJobCountsNoPods) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Obj());
  world.EditSpec("/spec/runPolicy/suspend", true);
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(Counts(plan, "worker"), Json({{"replicas", 4}, {"active", 0}, {"ready", 0}, {"succeeded", 0}, {"failed", 0}}));
  EXPECT_EQ(Counts(plan, "server"), Json({{"replicas", 1}, {"active", 0}, {"ready", 0}, {"succeeded", 0}, {"failed", 0}}));
  world.Reap();
  EXPECT_EQ(Counts(world.Step(), "worker")["active"], 0);
}

// Regression (fixed): a failed job showed its workers active after its pods were deleted.
TEST(TruthfulStatusTest, AFailedJobCountsOnlyThePodsItKeeps) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).RestartPolicy("worker", "ExitCode").BackoffLimit(0).Obj());
  world.Edit("wd-worker-1", [](PodBuilder& p) { p.Failed(137); });
  const ReconcilePlan& plan = world.Step();
  ASSERT_EQ(plan.status.ToJson()["phase"], "Failed");
  // cleanPodPolicy Running: the failed worker stays for its logs, the running pods go.
  EXPECT_EQ(Counts(plan, "worker"), Json({{"replicas", 4}, {"active", 0}, {"ready", 0}, {"succeeded", 0}, {"failed", 1}}));
  EXPECT_EQ(Counts(plan, "server")["ready"], 0);
  world.Reap();
  EXPECT_EQ(Counts(world.Step(), "worker")["failed"], 1);
}

// Regression (fixed): a succeeded job showed its deleted servers as ready.
TEST(TruthfulStatusTest, ASucceededJobDoesNotCountItsDeletedServers) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Obj());
  for (int i = 0; i < 4; ++i) world.Edit("wd-worker-" + std::to_string(i), [](PodBuilder& p) { p.Succeeded(); });
  const ReconcilePlan& plan = world.Step();
  ASSERT_EQ(plan.status.ToJson()["phase"], "Succeeded");
  EXPECT_EQ(Counts(plan, "server"), Json({{"replicas", 1}, {"active", 0}, {"ready", 0}, {"succeeded", 0}, {"failed", 0}}));
  EXPECT_EQ(Counts(plan, "worker")["succeeded"], 4);
}

// Regression (fixed): Stalled stayed True after the job succeeded; so did Unschedulable.
TEST(TruthfulStatusTest, ConditionsAboutThePodsTurnFalseWhenTheJobEnds) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Obj());
  world.Edit("wd-worker-1", [](PodBuilder& p) { p.Progress(false, "rank 1 stalled"); });
  world.Step();
  ASSERT_EQ(Condition(world.Status(), "Stalled")["status"], "True");
  world.Advance(100);
  for (int i = 0; i < 4; ++i) world.Edit("wd-worker-" + std::to_string(i), [](PodBuilder& p) { p.Succeeded(); });
  const ReconcilePlan& plan = world.Step();
  ASSERT_EQ(plan.status.ToJson()["phase"], "Succeeded");
  const Json stalled = Condition(plan.status.ToJson(), "Stalled");
  EXPECT_EQ(stalled["status"], "False");
  EXPECT_EQ(stalled["reason"], "JobSucceeded");
  EXPECT_EQ(stalled["lastTransitionTime"], FormatRfc3339(At(100)));
}

// A job that ended under an older operator with Stalled still True is put right on its next plan.
TEST(TruthfulStatusTest, AFinishedJobsStaleConditionIsPutRight) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).RestartPolicy("worker", "ExitCode").BackoffLimit(0).Obj());
  world.Edit("wd-worker-1", [](PodBuilder& p) { p.Failed(137); });
  world.Step();
  ASSERT_EQ(world.Status()["phase"], "Failed");
  FleetJobStatus old = FleetJobStatus::FromJson(world.Status());
  old.SetCondition(ConditionType::kStalled, ConditionStatus::kTrue, "TrainingStalled", "rank 1", At(0));
  world.job["status"] = old.ToJson();
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(Condition(plan.status.ToJson(), "Stalled")["reason"], "JobFailed");
  EXPECT_EQ(Condition(plan.status.ToJson(), "Stalled")["status"], "False");
}

TEST(ScalingTest, TheSidecarRoleFollowsThePods) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 2).Obj());
  world.EditSpec("/spec/worker/replicas", 3);
  world.Settle();
  ASSERT_TRUE(world.observed.role.has_value());
  const Json names = (*world.observed.role)["rules"][1]["resourceNames"];
  EXPECT_EQ(names, Json::array({"wd-server-0", "wd-worker-0", "wd-worker-1", "wd-worker-2"}));
}

}  // namespace
}  // namespace fleet::op::testing
