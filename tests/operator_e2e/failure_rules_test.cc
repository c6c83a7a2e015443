// End to end: failure rules (spec.runPolicy.failureRules) with the real fleet-operator and the test
// control plane's kubelet, which reports a failed container's log tail as its termination message
// under the FallbackToLogsOnError policy the operator sets for rules with onLogPattern.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "builders.h"
#include "harness.h"

namespace fleet::op::e2e {
namespace {

using ::testing::HasSubstr;
using testing::JobBuilder;

using FailureRulesE2eTest = OperatorE2eTest;

// OnFailure would restart the job; the rule reads the trainer's last log lines and fails it.
TEST_F(FailureRulesE2eTest, ALogLineFailsTheJob) {
  StartOperator();
  const Json rules = Json::parse(R"([{"name": "bad-dataset", "action": "FailJob", "onLogPattern": "corrupt record \\d+"}])");
  ASSERT_FALSE(CreateJob(JobBuilder("lg").Collective(2).RestartPolicy("worker", "OnFailure")
                             .Set("/spec/runPolicy/failureRules", rules).Obj()).is_null());
  const std::vector<Json> pods = WaitForRunningPods("lg", 2, 0);
  ASSERT_EQ(pods.size(), 2u);
  EXPECT_EQ(pods[0]["spec"]["containers"][0].value("terminationMessagePolicy", ""), "FallbackToLogsOnError");
  ASSERT_FALSE(WaitForPhase("lg", "Running").is_null());

  PodAction("lg-worker-1", {{"action", "fail"}, {"exitCode", 1},
                            {"log", "step 41 loss 0.25\nTraceback (most recent call last):\nValueError: corrupt record 7"}});
  const Json failed = WaitForPhase("lg", "Failed");
  ASSERT_FALSE(failed.is_null());
  const Json condition = ConditionOf(failed["status"], "Failed");
  EXPECT_EQ(condition.value("reason", ""), "FailureRule");
  EXPECT_THAT(condition.value("message", ""),
              HasSubstr("rule \"bad-dataset\" (spec.runPolicy.failureRules[0]): pod lg-worker-1 failed with exit code 1, "
                        "log line 'ValueError: corrupt record 7' matched"));
  EXPECT_EQ(failed["status"].value("restartCount", -1), 0);
}

// Evictions restart the job without using up backoffLimit 0; a failure no rule matches then fails
// it per restartPolicy Never.
TEST_F(FailureRulesE2eTest, IgnoredFailuresRestartWithoutCounting) {
  StartOperator();
  const Json rules = Json::parse(R"([{"name": "spot", "action": "Ignore", "onReasons": ["Evicted"]}])");
  ASSERT_FALSE(CreateJob(JobBuilder("ig").Collective(2).BackoffLimit(0)
                             .Set("/spec/runPolicy/failureRules", rules).Obj()).is_null());
  ASSERT_EQ(WaitForRunningPods("ig", 2, 0).size(), 2u);
  for (int run = 1; run <= 2; ++run) {
    SCOPED_TRACE("eviction " + std::to_string(run));
    PodAction("ig-worker-0", {{"action", "evict"}});
    ASSERT_EQ(WaitForRunningPods("ig", 2, run).size(), 2u);
    const Json job = WaitForJob("ig", "to run again", [&](const Json& j) {
      const Json& st = j.value("status", Json::object());
      return st.value("phase", "") == "Running" && st.value("run", 0) == run;
    });
    ASSERT_FALSE(job.is_null());
    EXPECT_EQ(job["status"].value("restartCount", -1), 0);
    EXPECT_EQ(job["status"].value("ignoredFailures", -1), run);
  }
  PodAction("ig-worker-1", {{"action", "fail"}, {"exitCode", 1}});
  const Json failed = WaitForPhase("ig", "Failed");
  ASSERT_FALSE(failed.is_null());
  EXPECT_EQ(ConditionOf(failed["status"], "Failed").value("reason", ""), "PodFailed");
}

}  // namespace
}  // namespace fleet::op::e2e
