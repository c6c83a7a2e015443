// Failures and restarts: restart policies per role, eviction, backoffLimit, the next run's pods
// waiting for the old names, Service mode's single-pod replacement, and a replaced pod's new address.
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

std::string RunOf(const Json& pod) { return pod["metadata"]["labels"][kRunLabel].get<std::string>(); }

// ---- restart policies, table-driven ----

struct PolicyCase {
  std::string name;
  std::string policy;                             // the worker role's restartPolicy
  std::function<void(PodBuilder&)> failure;       // what happens to wd-worker-2
  std::string phase;                              // Failed or Restarting
  std::string message;                            // part of the Failed condition / restart message
};

std::ostream& operator<<(std::ostream& out, const PolicyCase& c) { return out << c.name; }

class RestartPolicyTest : public ::testing::TestWithParam<PolicyCase> {};

const PolicyCase kPolicyCases[] = {
    {"NeverExit1", "Never", [](PodBuilder& p) { p.Failed(1); }, "Failed", "wd-worker-2 failed with exit code 1"},
    {"NeverExit137", "Never", [](PodBuilder& p) { p.Failed(137); }, "Failed", "wd-worker-2 failed with exit code 137"},
    {"NeverEvicted", "Never", [](PodBuilder& p) { p.Evicted(); }, "Failed", "wd-worker-2 was evicted"},
    {"OnFailureExit1", "OnFailure", [](PodBuilder& p) { p.Failed(1); }, "Restarting", "wd-worker-2 failed"},
    {"OnFailureEvicted", "OnFailure", [](PodBuilder& p) { p.Evicted(); }, "Restarting", "wd-worker-2 was evicted"},
    {"ExitCode137", "ExitCode", [](PodBuilder& p) { p.Failed(137); }, "Restarting", "wd-worker-2 failed"},
    {"ExitCode128", "ExitCode", [](PodBuilder& p) { p.Failed(128); }, "Restarting", "wd-worker-2 failed"},
    {"ExitCode1", "ExitCode", [](PodBuilder& p) { p.Failed(1); }, "Failed", "wd-worker-2 failed with exit code 1"},
    {"ExitCode127", "ExitCode", [](PodBuilder& p) { p.Failed(127); }, "Failed", "exit code 127"},
    {"ExitCodeEvicted", "ExitCode", [](PodBuilder& p) { p.Evicted(); }, "Restarting", "wd-worker-2 was evicted"},
};

TEST_P(RestartPolicyTest, DecidesBetweenFailingAndRestarting) {
  const PolicyCase& c = GetParam();
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).RestartPolicy("worker", c.policy).Obj());
  world.Edit("wd-worker-2", c.failure);
  world.Advance(50);
  const ReconcilePlan& plan = world.Step();

  EXPECT_EQ(plan.status.ToJson()["phase"], c.phase) << Describe(plan);
  EXPECT_THAT(ActionNames(plan, Verb::kCreate, ObjectKind::kPod), IsEmpty());
  if (c.phase == "Failed") {
    const Json failed = Condition(plan.status.ToJson(), "Failed");
    EXPECT_EQ(failed.value("status", ""), "True");
    EXPECT_EQ(failed.value("reason", ""), "PodFailed");
    EXPECT_THAT(failed.value("message", ""), HasSubstr(c.message));
    EXPECT_EQ(plan.status.ToJson()["restartCount"], 0);
    EXPECT_EQ(plan.status.ToJson()["completionTime"], FormatRfc3339(At(50)));
    // cleanPodPolicy Running: the pods still running go, the failed one stays for its logs.
    EXPECT_EQ(ActionNames(plan, Verb::kDelete, ObjectKind::kPod),
              (std::vector<std::string>{"wd-server-0", "wd-worker-0", "wd-worker-1", "wd-worker-3"}));
  } else {
    EXPECT_EQ(plan.status.ToJson()["restartCount"], 1);
    const Json restarting = Condition(plan.status.ToJson(), "Restarting");
    EXPECT_EQ(restarting.value("status", ""), "True");
    EXPECT_THAT(restarting.value("message", ""), HasSubstr(c.message));
    // PodIP mode: a new pod means new addresses for every peer, so the whole job goes.
    EXPECT_EQ(ActionNames(plan, Verb::kDelete, ObjectKind::kPod), kAllPods);
  }
}

INSTANTIATE_TEST_SUITE_P(Worker, RestartPolicyTest, ::testing::ValuesIn(kPolicyCases),
                         [](const ::testing::TestParamInfo<PolicyCase>& p) { return p.param.name; });

TEST(RestartTest, EachRoleHasItsOwnPolicy) {
  // Workers restart on failure, the server does not: a failed server fails the job.
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).RestartPolicy("worker", "OnFailure").Obj());
  world.Edit("wd-server-0", [](PodBuilder& p) { p.Failed(1); });
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(plan.status.ToJson()["phase"], "Failed");
  EXPECT_THAT(Condition(plan.status.ToJson(), "Failed").value("message", ""), HasSubstr("wd-server-0"));
  EXPECT_THAT(Condition(plan.status.ToJson(), "Failed").value("message", ""), HasSubstr("server restartPolicy"));
}

// ---- the earliest failure is the cause ----

// A killed trainer's peers see their connections reset and exit 1 a moment later. Under ExitCode
// the kill (137) is worth a retry and the peers' exit 1 is not: the job restarts, whichever pod
// the plan reads first (worker-0's exit 1 comes first in slot order).
TEST(FailureCauseTest, APeersLaterFailureDoesNotOverruleTheCause) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).RestartPolicy("worker", "ExitCode").Obj());
  world.Advance(50);
  world.Edit("wd-worker-2", [](PodBuilder& p) { p.Failed(137).FinishedAt(At(40)); });
  world.Edit("wd-worker-0", [](PodBuilder& p) { p.Failed(1).FinishedAt(At(41)); });
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(plan.status.ToJson()["phase"], "Restarting") << Describe(plan);
  EXPECT_THAT(Condition(plan.status.ToJson(), "Restarting").value("message", ""),
              HasSubstr("pod wd-worker-2 failed with exit code 137"));
  EXPECT_EQ(plan.status.ToJson()["restartCount"], 1);
}

TEST(FailureCauseTest, AtATieTheRetryableFailureIsTheCause) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).RestartPolicy("worker", "ExitCode").Obj());
  world.Advance(50);
  world.Edit("wd-worker-0", [](PodBuilder& p) { p.Failed(1).FinishedAt(At(40)); });
  world.Edit("wd-worker-3", [](PodBuilder& p) { p.Failed(137).FinishedAt(At(40)); });
  EXPECT_EQ(world.Step().status.ToJson()["phase"], "Restarting");
}

TEST(FailureCauseTest, AnEarlierRetryableFailureStillDecides) {
  // The peer's exit 1 is seen first; the kill that caused it is reported a moment later.
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).RestartPolicy("worker", "ExitCode").Obj());
  world.Advance(41);
  world.Edit("wd-worker-0", [](PodBuilder& p) { p.Failed(1).FinishedAt(At(41)); });
  const ReconcilePlan& waiting = world.Step();
  EXPECT_EQ(waiting.status.ToJson()["phase"], "Running") << Describe(waiting);
  EXPECT_THAT(ActionNames(waiting, Verb::kDelete, ObjectKind::kPod), IsEmpty());
  ASSERT_TRUE(waiting.requeue_after.has_value());
  EXPECT_LE(*waiting.requeue_after, std::chrono::seconds(5));

  world.Advance(2);
  world.Edit("wd-worker-2", [](PodBuilder& p) { p.Failed(137).FinishedAt(At(40)); });
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(plan.status.ToJson()["phase"], "Restarting") << Describe(plan);
  EXPECT_THAT(Condition(plan.status.ToJson(), "Restarting").value("message", ""), HasSubstr("wd-worker-2"));
}

TEST(FailureCauseTest, AFailureNothingExplainsFailsTheJobOnceItSettled) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).RestartPolicy("worker", "ExitCode").Obj());
  world.Advance(41);
  world.Edit("wd-worker-1", [](PodBuilder& p) { p.Failed(1).FinishedAt(At(41)); });
  ASSERT_EQ(world.Step().status.ToJson()["phase"], "Running");
  world.Advance(5);
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(plan.status.ToJson()["phase"], "Failed") << Describe(plan);
  EXPECT_THAT(Condition(plan.status.ToJson(), "Failed").value("message", ""),
              HasSubstr("pod wd-worker-1 failed with exit code 1 and the worker restartPolicy does not restart it"));
}

// ---- the next run ----

TEST(RestartTest, NextRunWaitsUntilTheOldPodsAreGone) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).RestartPolicy("worker", "OnFailure").Obj());
  world.Edit("wd-worker-2", [](PodBuilder& p) { p.Failed(1); });
  world.Step();
  ASSERT_EQ(world.Status()["restartCount"], 1);
  ASSERT_EQ(world.LivePodNames(), std::vector<std::string>{}) << "every pod is terminating";

  // Terminating pods still hold their names: nothing can be created yet.
  const ReconcilePlan& blocked = world.Step();
  EXPECT_TRUE(blocked.actions.empty()) << Describe(blocked);
  EXPECT_EQ(blocked.status.ToJson()["phase"], "Restarting");

  // The workers are gone, the server is still shutting down: only the free names are taken.
  for (int i = 0; i < 4; ++i) world.Remove("wd-worker-" + std::to_string(i));
  const ReconcilePlan& partial = world.Step();
  EXPECT_EQ(ActionNames(partial, Verb::kCreate, ObjectKind::kPod),
            (std::vector<std::string>{"wd-worker-0", "wd-worker-1", "wd-worker-2", "wd-worker-3"}));
  EXPECT_EQ(partial.actions.size(), 4u) << Describe(partial);
  for (const Action& a : partial.actions) EXPECT_EQ(RunOf(a.Object()), "1") << a.name;
  EXPECT_EQ(partial.status.ToJson()["phase"], "Restarting");

  world.Reap();
  const ReconcilePlan& rest = world.Step();
  EXPECT_EQ(ActionNames(rest, Verb::kCreate, ObjectKind::kPod), std::vector<std::string>{"wd-server-0"});
  EXPECT_EQ(RunOf(rest.actions.at(0).Object()), "1");

  world.Settle();
  EXPECT_EQ(world.Status()["phase"], "Running");
  EXPECT_EQ(world.Status()["restartCount"], 1);
  EXPECT_EQ(Condition(world.Status(), "Restarting").value("status", ""), "False");
  ASSERT_TRUE(world.observed.endpoints.has_value());
  EXPECT_EQ((*world.observed.endpoints)["metadata"]["annotations"][kRunAnnotation], "1");
  for (const Json& pod : world.pods) EXPECT_EQ(RunOf(pod), "1");
  EXPECT_EQ(world.already_exists, 0) << "the planner asked for a name that was still taken";
}

TEST(RestartTest, OldRunFailureSeenAgainIsNotCountedTwice) {
  // The restart's deletes have not reached the cache yet: the next reconcile sees the same failed
  // pod of run 0 and must not restart (or count) again.
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).RestartPolicy("worker", "OnFailure").Obj());
  world.Edit("wd-worker-2", [](PodBuilder& p) { p.Failed(1); });
  world.Reconcile();
  ASSERT_EQ(world.Status()["restartCount"], 1);
  const ReconcilePlan& again = world.Reconcile();

  EXPECT_EQ(again.status.ToJson()["restartCount"], 1);
  EXPECT_EQ(again.status.ToJson()["phase"], "Restarting");
  EXPECT_EQ(ActionNames(again, Verb::kDelete, ObjectKind::kPod), kAllPods);
  EXPECT_THAT(ActionNames(again, Verb::kCreate, ObjectKind::kPod), IsEmpty());
  for (const PlannedEvent& e : again.events) EXPECT_NE(e.reason, "Restarting");
}

// Regression (fixed): planner.cc Restart sets phase Restarting and condition Restarting True but leaves the
// Running condition True from before the failure, so `kubectl wait --for=condition=Running` and
// dashboards report a running job while every pod is being deleted. Fail, suspend and success set
// Running False; a restart should too.
TEST(RestartTest, RestartingJobIsNotReportedRunning) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).RestartPolicy("worker", "OnFailure").Obj());
  world.Edit("wd-worker-2", [](PodBuilder& p) { p.Failed(1); });
  const ReconcilePlan& plan = world.Step();
  ASSERT_EQ(plan.status.ToJson()["phase"], "Restarting");
  EXPECT_EQ(Condition(plan.status.ToJson(), "Running").value("status", ""), "False");
}

// ---- backoffLimit ----

TEST(BackoffLimitTest, FailsOnceTheLimitIsReached) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).RestartPolicy("worker", "OnFailure").BackoffLimit(1).Obj());
  world.Edit("wd-worker-2", [](PodBuilder& p) { p.Failed(1); });
  world.Step();
  ASSERT_EQ(world.Status()["phase"], "Restarting");
  world.Settle();
  ASSERT_EQ(world.Status()["phase"], "Running");
  ASSERT_EQ(world.Status()["restartCount"], 1);

  world.Edit("wd-worker-0", [](PodBuilder& p) { p.Failed(1); });
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(plan.status.ToJson()["phase"], "Failed");
  const Json failed = Condition(plan.status.ToJson(), "Failed");
  EXPECT_EQ(failed.value("reason", ""), "BackoffLimitExceeded");
  EXPECT_THAT(failed.value("message", ""), HasSubstr("wd-worker-0"));
  EXPECT_THAT(failed.value("message", ""), HasSubstr("backoffLimit 1"));
  EXPECT_EQ(plan.status.ToJson()["restartCount"], 1);
  EXPECT_EQ(ActionNames(plan, Verb::kDelete, ObjectKind::kPod),
            (std::vector<std::string>{"wd-server-0", "wd-worker-1", "wd-worker-2", "wd-worker-3"}));
}

TEST(BackoffLimitTest, ZeroMeansNoRestartAtAll) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).RestartPolicy("worker", "ExitCode").BackoffLimit(0).Obj());
  world.Edit("wd-worker-1", [](PodBuilder& p) { p.Failed(137); });
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(plan.status.ToJson()["phase"], "Failed");
  EXPECT_EQ(Condition(plan.status.ToJson(), "Failed").value("reason", ""), "BackoffLimitExceeded");
  EXPECT_EQ(plan.status.ToJson()["restartCount"], 0);
}

// ---- Service mode: one pod replaced, the rest keep running ----

TEST(ServiceModeRestartTest, OnlyTheFailedPodIsDeleted) {
  World world =
      RunningWorld(JobBuilder("wd").Ps(1, 4).Network("Service").RestartPolicy("worker", "OnFailure").Obj());
  world.Edit("wd-worker-1", [](PodBuilder& p) { p.Failed(1); });
  const ReconcilePlan& plan = world.Step();

  EXPECT_EQ(ActionNames(plan, Verb::kDelete, ObjectKind::kPod), std::vector<std::string>{"wd-worker-1"});
  EXPECT_EQ(plan.actions.size(), 1u) << Describe(plan);
  EXPECT_EQ(plan.status.ToJson()["restartCount"], 1);
  EXPECT_EQ(plan.status.ToJson()["phase"], "Restarting");
}

// Regression (fixed): planner.cc uses status.restartCount as the run label of the pods it keeps ("pods of an older
// run ... are removed"), and the Service-mode branch of HandleFailures increments restartCount.
// The reconcile after a Service-mode replacement therefore sees every other pod as "from run 0, the
// job restarted" and deletes them all: Service mode restarts the whole job, one reconcile late.
// Expected: only wd-worker-1 is recreated; the other four pods keep running untouched.
TEST(ServiceModeRestartTest, TheOtherPodsKeepRunning) {
  World world =
      RunningWorld(JobBuilder("wd").Ps(1, 4).Network("Service").RestartPolicy("worker", "OnFailure").Obj());
  std::map<std::string, std::string> uids;
  for (const Json& pod : world.pods) uids[pod["metadata"]["name"]] = pod["metadata"]["uid"];
  world.Edit("wd-worker-1", [](PodBuilder& p) { p.Failed(1); });
  world.Step();
  world.Reap();

  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(ActionNames(plan, Verb::kCreate, ObjectKind::kPod), std::vector<std::string>{"wd-worker-1"});
  EXPECT_THAT(ActionNames(plan, Verb::kDelete, ObjectKind::kPod), IsEmpty()) << Describe(plan);

  world.Settle();
  EXPECT_EQ(world.Status()["phase"], "Running");
  for (const std::string name : {"wd-server-0", "wd-worker-0", "wd-worker-2", "wd-worker-3"}) {
    ASSERT_TRUE(world.HasPod(name)) << name;
    EXPECT_EQ(world.Pod(name)["metadata"]["uid"], uids[name]) << name << " was replaced";
  }
}

// ---- a replaced pod's new address ----

// In PodIP mode a pod that vanished under published lists can only come back with a new IP, which
// its peers do not know: the job restarts at once (counted), rather than after recreating it.
TEST(ReplacedPodTest, PodVanishedUnderPublishedListsRestartsTheWholeJob) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Obj());
  world.Remove("wd-worker-2");   // e.g. kubectl delete pod --force
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(plan.status.ToJson()["restartCount"], 1);
  EXPECT_EQ(plan.status.ToJson()["phase"], "Restarting");
  EXPECT_THAT(Condition(plan.status.ToJson(), "Restarting").value("message", ""), HasSubstr("wd-worker-2 disappeared"));
  EXPECT_EQ(ActionNames(plan, Verb::kDelete, ObjectKind::kPod),
            (std::vector<std::string>{"wd-server-0", "wd-worker-0", "wd-worker-1", "wd-worker-3"}));
  EXPECT_THAT(ActionNames(plan, Verb::kCreate, ObjectKind::kPod), IsEmpty());

  world.Settle();
  EXPECT_EQ(world.Status()["phase"], "Running");
  EXPECT_EQ(world.Status()["restartCount"], 1);
}

TEST(ReplacedPodTest, HostNetworkPodBackOnTheSameNodeKeepsTheJob) {
  World world(JobBuilder("wd").Ps(1, 4).Network("HostNetwork").Obj(), {}, HostPortsAt(31000));
  world.nodes = {"192.168.0.7"};
  world.Settle();
  ASSERT_EQ(world.Status()["phase"], "Running");

  world.Remove("wd-worker-2");
  world.Step();
  world.StartPods();   // same node, same host: the lists still hold
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(plan.status.ToJson()["restartCount"], 0);
  EXPECT_THAT(ActionNames(plan, Verb::kDelete, ObjectKind::kPod), IsEmpty()) << Describe(plan);
}

}  // namespace
}  // namespace fleet::op::testing

namespace fleet::op::testing {
namespace {

// Service mode replaces a failed pod in the same run; a plan made before the cache shows the pod
// going (it still looks Failed) must not count its restart again.
TEST(RestartTest, ServiceModeFailureSeenAgainIsNotCountedTwice) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Network("Service").RestartPolicy("worker", "OnFailure").Obj());
  world.Edit("wd-worker-1", [](PodBuilder& p) { p.Failed(1); });
  world.Reconcile();   // counts the restart and deletes the pod...
  EXPECT_EQ(world.Status().value("restartCount", 0), 1);
  world.Reconcile();   // ...but the delete has not happened yet: the pod is still there, Failed
  world.Reconcile();
  EXPECT_EQ(world.Status().value("restartCount", 0), 1) << Describe(world.plan);
  EXPECT_EQ(ActionNames(world.plan, Verb::kDelete, ObjectKind::kPod), std::vector<std::string>{"wd-worker-1"})
      << "the delete is repeated (it is idempotent) until the pod goes";
  world.Apply();
  world.Settle();
  EXPECT_EQ(world.Status().value("restartCount", 0), 1);
  EXPECT_EQ(world.Status().value("phase", ""), "Running");
  EXPECT_FALSE(world.Status().contains("replacedPods")) << "forgotten once the pod is gone";
}

}  // namespace
}  // namespace fleet::op::testing
