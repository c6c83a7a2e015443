// Failure rules (spec.runPolicy.failureRules) and the sidecar's stallAction: each criterion (exit
// codes, reasons, log lines), each action, rule order, the roles filter, the fallback to the role's
// restartPolicy, Ignore's uncounted restarts, stalls as failures, and the specs refused.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <tuple>
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
using ::testing::Not;

// A one-server, four-worker PS job (PodIP) with these failure rules.
Json JobWithRules(const Json& rules, const std::string& worker_policy = "Never") {
  return JobBuilder("wd").Ps(1, 4).RestartPolicy("worker", worker_policy).Set("/spec/runPolicy/failureRules", rules).Obj();
}

Json WithBackoffLimit(Json job, int limit) {
  job["spec"]["runPolicy"]["backoffLimit"] = limit;
  return job;
}

// Its main container terminated as the kubelet reports it: exit code, reason, message (the log's
// tail under FallbackToLogsOnError), finishedAt.
void Terminate(PodBuilder& p, int code, const std::string& reason, const std::string& message = "") {
  p.Failed(code).FinishedAt(At(40));
  Json pod = p.Obj();
  Json& terminated = pod["status"]["containerStatuses"][0]["state"]["terminated"];
  terminated["reason"] = reason;
  if (!message.empty()) terminated["message"] = message;
  p = PodBuilder(pod);
}

// The pod's DisruptionTarget condition, as the scheduler or the eviction API set it.
void Disrupted(PodBuilder& p, const std::string& reason) {
  Json pod = p.Obj();
  pod["status"]["conditions"].push_back({{"type", "DisruptionTarget"}, {"status", "True"}, {"reason", reason}});
  p = PodBuilder(pod);
}

std::string Phase(const ReconcilePlan& plan) { return plan.status.ToJson()["phase"]; }
std::string Message(const ReconcilePlan& plan, const std::string& condition) {
  return Condition(plan.status.ToJson(), condition).value("message", "");
}
std::vector<std::string> EventReasons(const ReconcilePlan& plan) {
  std::vector<std::string> reasons;
  for (const PlannedEvent& e : plan.events) reasons.push_back(e.reason);
  return reasons;
}

// ---- criteria ----

TEST(FailureRuleTest, ALogLineFailsTheJobNamingTheRuleAndTheLine) {
  World world = RunningWorld(JobWithRules(
      Json::parse(R"([{"name": "bad-dataset", "action": "FailJob", "onLogPattern": "corrupt record|bad shard"}])"),
      "OnFailure"));
  world.Advance(50);
  world.Edit("wd-worker-1", [](PodBuilder& p) { Terminate(p, 1, "Error", "step 10\nValueError: corrupt record 7\n"); });
  const ReconcilePlan& plan = world.Step();
  ASSERT_EQ(Phase(plan), "Failed") << Describe(plan);
  EXPECT_EQ(Condition(plan.status.ToJson(), "Failed").value("reason", ""), "FailureRule");
  EXPECT_EQ(Message(plan, "Failed"),
            "rule \"bad-dataset\" (spec.runPolicy.failureRules[0]): pod wd-worker-1 failed with exit code 1, "
            "log line 'ValueError: corrupt record 7' matched");
  EXPECT_EQ(plan.status.ToJson()["restartCount"], 0);
}

TEST(FailureRuleTest, ALogWithoutTheLineFallsBackToTheRestartPolicy) {
  World world = RunningWorld(JobWithRules(
      Json::parse(R"([{"action": "FailJob", "onLogPattern": "corrupt record"}])"), "OnFailure"));
  world.Advance(50);
  world.Edit("wd-worker-1", [](PodBuilder& p) { Terminate(p, 1, "Error", "NCCL timeout\n"); });
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(Phase(plan), "Restarting") << Describe(plan);
  EXPECT_THAT(Message(plan, "Restarting"), HasSubstr("pod wd-worker-1 failed with exit code 1"));
  EXPECT_THAT(Message(plan, "Restarting"), Not(HasSubstr("failureRules")));
  EXPECT_EQ(plan.status.ToJson()["restartCount"], 1);
}

TEST(FailureRuleTest, ExitCodesInAndNotIn) {
  const Json rules = Json::parse(R"([{"action": "RestartJob", "onExitCodes": {"operator": "In", "values": [3, 4]}},
                                      {"action": "FailJob", "onExitCodes": {"operator": "NotIn", "values": [3, 4, 137]}}])");
  for (const auto& [code, phase, rule] : std::vector<std::tuple<int, std::string, std::string>>{
           {3, "Restarting", "failureRules[0]"}, {2, "Failed", "failureRules[1]"}, {137, "Restarting", ""}}) {
    World world = RunningWorld(JobWithRules(rules, "OnFailure"));
    world.Advance(50);
    world.Edit("wd-worker-2", [&, c = code](PodBuilder& p) { Terminate(p, c, "Error"); });
    const ReconcilePlan& plan = world.Step();
    EXPECT_EQ(Phase(plan), phase) << code << Describe(plan);
    const std::string message = Message(plan, phase == "Failed" ? "Failed" : "Restarting");
    if (rule.empty()) {
      EXPECT_THAT(message, Not(HasSubstr("failureRules"))) << code;   // neither matched: OnFailure
    } else {
      EXPECT_THAT(message, HasSubstr(rule)) << code;
    }
  }
}

TEST(FailureRuleTest, ReasonsOfTheContainerThePodAndItsDisruption) {
  const Json rules = Json::parse(R"([{"name": "retry-preemption", "action": "RestartJob",
                                       "onReasons": ["OOMKilled", "DeadlineExceeded", "PreemptionByScheduler"]}])");
  const std::vector<std::function<void(PodBuilder&)>> failures = {
      [](PodBuilder& p) { Terminate(p, 137, "OOMKilled"); },
      [](PodBuilder& p) {
        p.Phase("Failed");
        Json pod = p.Obj();
        pod["status"]["reason"] = "DeadlineExceeded";
        p = PodBuilder(pod);
      },
      [](PodBuilder& p) {
        Terminate(p, 143, "Error");
        Disrupted(p, "PreemptionByScheduler");
      },
  };
  for (size_t i = 0; i < failures.size(); ++i) {
    World world = RunningWorld(JobWithRules(rules));   // restartPolicy Never: only the rule restarts
    world.Advance(50);
    world.Edit("wd-worker-2", failures[i]);
    const ReconcilePlan& plan = world.Step();
    EXPECT_EQ(Phase(plan), "Restarting") << i << Describe(plan);
    EXPECT_THAT(Message(plan, "Restarting"), HasSubstr("rule \"retry-preemption\"")) << i;
  }
  // Another reason: no match, and Never fails the job.
  World world = RunningWorld(JobWithRules(rules));
  world.Advance(50);
  world.Edit("wd-worker-2", [](PodBuilder& p) { Terminate(p, 1, "Error"); });
  world.Advance(10);
  EXPECT_EQ(Phase(world.Step()), "Failed");
}

TEST(FailureRuleTest, CriteriaOfOneRuleAreAllRequired) {
  const Json rules = Json::parse(R"([{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [1]},
                                       "onLogPattern": "CUDA out of memory"}])");
  World world = RunningWorld(JobWithRules(rules, "OnFailure"));
  world.Advance(50);
  world.Edit("wd-worker-2", [](PodBuilder& p) { Terminate(p, 2, "Error", "CUDA out of memory\n"); });
  EXPECT_EQ(Phase(world.Step()), "Restarting");   // the log matched, the code did not
}

// ---- order and roles ----

TEST(FailureRuleTest, TheFirstMatchingRuleDecides) {
  const Json rules = Json::parse(R"([{"name": "first", "action": "RestartJob", "onExitCodes": {"operator": "In", "values": [1]}},
                                      {"name": "second", "action": "FailJob", "onLogPattern": "."}])");
  World world = RunningWorld(JobWithRules(rules));
  world.Advance(50);
  world.Edit("wd-worker-2", [](PodBuilder& p) { Terminate(p, 1, "Error", "boom\n"); });
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(Phase(plan), "Restarting") << Describe(plan);
  EXPECT_THAT(Message(plan, "Restarting"), HasSubstr("rule \"first\" (spec.runPolicy.failureRules[0])"));
}

TEST(FailureRuleTest, ARuleForOtherRolesDoesNotMatch) {
  const Json rules = Json::parse(R"([{"action": "FailJob", "roles": ["server"], "onExitCodes": {"operator": "In", "values": [1]}}])");
  World world = RunningWorld(JobWithRules(rules, "OnFailure"));
  world.Advance(50);
  world.Edit("wd-worker-2", [](PodBuilder& p) { Terminate(p, 1, "Error"); });
  EXPECT_EQ(Phase(world.Step()), "Restarting");

  World server = RunningWorld(JobWithRules(rules, "OnFailure"));
  server.Advance(50);
  server.Edit("wd-server-0", [](PodBuilder& p) { Terminate(p, 1, "Error"); });
  EXPECT_THAT(Message(server.Step(), "Failed"), HasSubstr("failureRules[0]: pod wd-server-0"));
}

// ---- actions ----

TEST(FailureRuleTest, RestartJobRestartsWhereTheRestartPolicySaysNeverAndCounts) {
  World world = RunningWorld(
      WithBackoffLimit(JobWithRules(Json::parse(R"([{"action": "RestartJob", "onReasons": ["OOMKilled"]}])")), 1));
  world.Advance(50);
  world.Edit("wd-worker-2", [](PodBuilder& p) { Terminate(p, 137, "OOMKilled"); });
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(Phase(plan), "Restarting");
  EXPECT_EQ(plan.status.ToJson()["restartCount"], 1);
  EXPECT_EQ(ActionNames(plan, Verb::kDelete, ObjectKind::kPod), kAllPods);   // PodIP: a new run
  EXPECT_THAT(Message(plan, "Restarting"), HasSubstr("(OOMKilled)"));

  world.Settle();
  world.StartPods();
  world.Settle();
  world.Advance(100);
  world.Edit("wd-worker-0", [](PodBuilder& p) { Terminate(p, 137, "OOMKilled"); p.FinishedAt(At(140)); });
  const ReconcilePlan& out = world.Step();
  EXPECT_EQ(Phase(out), "Failed") << Describe(out);
  EXPECT_EQ(Condition(out.status.ToJson(), "Failed").value("reason", ""), "BackoffLimitExceeded");
}

TEST(FailureRuleTest, RestartPodReplacesOnlyTheFailedPodInTheSameRun) {
  World world = RunningWorld(JobWithRules(Json::parse(R"([{"action": "RestartPod", "onExitCodes": {"operator": "In", "values": [75]}}])")));
  world.Advance(50);
  world.Edit("wd-worker-3", [](PodBuilder& p) { Terminate(p, 75, "Error"); });
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(Phase(plan), "Restarting") << Describe(plan);
  EXPECT_EQ(ActionNames(plan, Verb::kDelete, ObjectKind::kPod), std::vector<std::string>{"wd-worker-3"});
  EXPECT_EQ(plan.status.ToJson()["run"], 0);
  EXPECT_EQ(plan.status.ToJson()["restartCount"], 1);
}

TEST(FailureRuleTest, IgnoreRestartsWithoutCounting) {
  World world = RunningWorld(WithBackoffLimit(
      JobWithRules(Json::parse(R"([{"name": "spot", "action": "Ignore", "onReasons": ["PreemptionByScheduler"]}])")), 0));
  for (int round = 1; round <= 2; ++round) {
    world.Advance(100);
    world.Edit("wd-worker-1", [&](PodBuilder& p) {
      Terminate(p, 143, "Error");
      p.FinishedAt(world.now - std::chrono::seconds(10));
      Disrupted(p, "PreemptionByScheduler");
    });
    const ReconcilePlan& plan = world.Step();
    ASSERT_EQ(Phase(plan), "Restarting") << round << Describe(plan);
    EXPECT_EQ(plan.status.ToJson()["restartCount"], 0);
    EXPECT_EQ(plan.status.ToJson()["ignoredFailures"], round);
    EXPECT_THAT(Message(plan, "Restarting"), HasSubstr("rule \"spot\""));
    EXPECT_THAT(Message(plan, "Restarting"), HasSubstr("not counted against backoffLimit"));
    EXPECT_THAT(EventReasons(plan), ::testing::Contains("FailureIgnored"));
    world.Settle();
    world.StartPods();
    world.Settle();
  }
}

// A rule decides for the cause alone: a peer's later failure that no rule matches changes nothing.
TEST(FailureRuleTest, TheEarliestFailureIsJudgedByTheRules) {
  World world = RunningWorld(JobWithRules(
      Json::parse(R"([{"action": "RestartJob", "onLogPattern": "NCCL error"}])")));
  world.Advance(50);
  world.Edit("wd-worker-2", [](PodBuilder& p) { Terminate(p, 1, "Error", "NCCL error: unhandled system error\n"); });
  world.Edit("wd-worker-0", [](PodBuilder& p) { Terminate(p, 1, "Error", "connection reset\n"); p.FinishedAt(At(42)); });
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(Phase(plan), "Restarting") << Describe(plan);
  EXPECT_THAT(Message(plan, "Restarting"), HasSubstr("pod wd-worker-2"));
}

// ---- stalls ----

TEST(StallActionTest, NoneOnlyRaisesTheCondition) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Obj());
  world.Edit("wd-worker-1", [](PodBuilder& p) { p.Progress(false, "rank 1: no step for 600 s"); });
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(Phase(plan), "Running");
  EXPECT_EQ(Condition(plan.status.ToJson(), "Stalled").value("status", ""), "True");
  EXPECT_THAT(ActionNames(plan, Verb::kDelete, ObjectKind::kPod), IsEmpty());
}

TEST(StallActionTest, RestartJobRestartsCountedQuotingTheSidecar) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Set("/spec/sidecar/stallAction", "RestartJob").Obj());
  world.Edit("wd-worker-1", [](PodBuilder& p) { p.Progress(false, "rank 1: no step for 600 s"); });
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(Phase(plan), "Restarting") << Describe(plan);
  EXPECT_EQ(plan.status.ToJson()["restartCount"], 1);
  EXPECT_EQ(ActionNames(plan, Verb::kDelete, ObjectKind::kPod), kAllPods);
  EXPECT_THAT(Message(plan, "Restarting"),
              HasSubstr("pod wd-worker-1 reports no training progress (rank 1: no step for 600 s), and "
                        "spec.sidecar.stallAction is RestartJob"));
}

TEST(StallActionTest, FailJobFailsWithReasonStalled) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Set("/spec/sidecar/stallAction", "FailJob").Obj());
  world.Edit("wd-worker-3", [](PodBuilder& p) { p.Progress(false, "rank 3: no step for 600 s"); });
  const ReconcilePlan& plan = world.Step();
  ASSERT_EQ(Phase(plan), "Failed") << Describe(plan);
  EXPECT_EQ(Condition(plan.status.ToJson(), "Failed").value("reason", ""), "Stalled");
  EXPECT_THAT(Message(plan, "Failed"), HasSubstr("pod wd-worker-3 reports no training progress"));
}

TEST(StallActionTest, ARuleOnReasonStalledOverridesIt) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Set("/spec/sidecar/stallAction", "FailJob")
                                 .Set("/spec/runPolicy/failureRules", Json::parse(R"([{"name": "hang", "action": "Ignore", "onReasons": ["Stalled"]}])"))
                                 .Obj());
  world.Edit("wd-worker-3", [](PodBuilder& p) { p.Progress(false, "rank 3: no step for 600 s"); });
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(Phase(plan), "Restarting") << Describe(plan);
  EXPECT_EQ(plan.status.ToJson()["ignoredFailures"], 1);
  EXPECT_THAT(Message(plan, "Restarting"), HasSubstr("rule \"hang\""));
}

// ---- pods and specs ----

TEST(FailureRuleSpecTest, LogPatternsMakeTheMainContainersFallBackToLogs) {
  World world(JobWithRules(Json::parse(R"([{"action": "FailJob", "roles": ["worker"], "onLogPattern": "x"}])")));
  world.Reconcile();
  world.Apply();
  const Json worker = world.Pod("wd-worker-0")["spec"]["containers"][0];
  EXPECT_EQ(worker.value("terminationMessagePolicy", ""), "FallbackToLogsOnError");
  EXPECT_FALSE(world.Pod("wd-server-0")["spec"]["containers"][0].contains("terminationMessagePolicy"));
}

// The pod cache keeps a termination message's tail (where the log's last lines are), bounded.
TEST(FailureRuleSpecTest, ATerminationMessageIsKeptToItsLast4KiB) {
  PodBuilder builder = PodFor(JobBuilder("wd").Ps(1, 4).Obj(), "worker", 0);
  Terminate(builder, 1, "Error", std::string(10000, 'x') + "\nCUDA out of memory\n");
  const Json pod = builder.Obj();
  const ObservedPod read = ObservedPod::Read(pod);
  EXPECT_EQ(read.termination_message.size(), ObservedPod::kMaxTerminationMessage);
  EXPECT_THAT(read.termination_message, ::testing::EndsWith("x\nCUDA out of memory\n"));
  const Json trimmed = ObservedPod::Trim(pod);
  EXPECT_EQ(trimmed["status"]["containerStatuses"][0]["state"]["terminated"]["message"], read.termination_message);
  EXPECT_EQ(ObservedPod::Read(trimmed).termination_message, read.termination_message);
}

// Of several main containers, the one that failed is read, whichever order they ended in.
TEST(FailureRuleSpecTest, TheFailingContainerIsTheOneThatExitedNonZero) {
  Json pod = PodFor(JobBuilder("wd").Ps(1, 4).Obj(), "worker", 0).Failed(0).Obj();
  pod["status"]["containerStatuses"].push_back(
      {{"name", "second"}, {"state", {{"terminated", {{"exitCode", 3}, {"reason", "OOMKilled"}, {"message", "oom"}}}}}});
  const ObservedPod read = ObservedPod::Read(pod);
  EXPECT_EQ(read.exit_code, 3);
  EXPECT_EQ(read.termination_reason, "OOMKilled");
  EXPECT_EQ(read.termination_message, "oom");
}

TEST(FailureRuleSpecTest, InvalidRulesAreRefusedNamingTheField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"([{"action": "FailJob", "onLogPattern": "(unclosed"}])", "spec.runPolicy.failureRules[0].onLogPattern"},
      {R"([{"action": "FailJob"}])", "needs at least one of onExitCodes, onReasons, onLogPattern"},
      {R"([{"action": "Retry", "onReasons": ["x"]}])", "spec.runPolicy.failureRules[0].action"},
      {R"([{"action": "FailJob", "onReasons": ["x"]}, {"action": "FailJob", "onExitCodes": {"operator": "In", "values": []}}])",
       "spec.runPolicy.failureRules[1].onExitCodes.values"},
      {R"([{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [0]}}])", "0 is no failure"},
      {R"([{"action": "FailJob", "onExitCodes": {"operator": "In", "values": [256]}}])", "0..255"},
      {R"([{"action": "FailJob", "onExitCodes": {"operator": "Is", "values": [1]}}])", "onExitCodes.operator"},
      {R"([{"action": "FailJob", "roles": ["trainer"], "onReasons": ["x"]}])", "failureRules[0].roles[0]: the job has no role 'trainer'"},
      {R"([{"name": "has \"quotes\"", "action": "FailJob", "onReasons": ["x"]}])", "spec.runPolicy.failureRules[0].name"},
  };
  for (const auto& [rules, error] : cases) {
    auto parsed = ParseFleetJob(JobWithRules(Json::parse(rules)));
    ASSERT_FALSE(parsed) << rules;
    EXPECT_THAT(parsed.error(), HasSubstr(error)) << rules;
  }
  auto stall = ParseFleetJob(JobBuilder("wd").Ps(1, 4).Set("/spec/sidecar/stallAction", "Restart").Obj());
  ASSERT_FALSE(stall);
  EXPECT_THAT(stall.error(), HasSubstr("spec.sidecar.stallAction"));
}

TEST(FailureRuleSpecTest, RulesWriteBackAsRead) {
  const Json rules = Json::parse(R"([{"name": "a", "action": "Ignore", "roles": ["worker"],
                                       "onExitCodes": {"operator": "NotIn", "values": [1, 2]},
                                       "onReasons": ["Evicted"], "onLogPattern": "x|y"}])");
  auto parsed = ParseFleetJob(JobWithRules(rules));
  ASSERT_TRUE(parsed) << parsed.error();
  EXPECT_EQ(parsed->spec.ToJson()["runPolicy"]["failureRules"], rules);
  auto again = FleetJobSpec::FromJson(parsed->spec.ToJson());
  ASSERT_TRUE(again) << again.error();
  EXPECT_EQ(again->ToJson(), parsed->spec.ToJson());
}

}  // namespace
}  // namespace fleet::op::testing
