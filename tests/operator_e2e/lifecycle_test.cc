// End to end: the job lifecycle driven by the real fleet-operator — failures, restarts and
// backoffLimit, eviction, success and clean-up, suspend/resume, TTL, pods the API server refuses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "builders.h"
#include "harness.h"

namespace fleet::op::e2e {
namespace {

using testing::JobBuilder;

constexpr const char* kRunLabel = "fleet.paddlepaddle.org/run";

std::map<std::string, std::string> Uids(const std::vector<Json>& pods) {
  std::map<std::string, std::string> out;
  for (const Json& pod : pods) out[NameOf(pod)] = UidOf(pod);
  return out;
}

std::string PodPhase(const Json& pod) { return pod.value("status", Json::object()).value("phase", ""); }

class LifecycleE2eTest : public OperatorE2eTest {
 protected:
  // Every Warning/Normal event the operator recorded for `job`, as "reason: message".
  std::vector<std::string> Events(const std::string& job) {
    std::vector<std::string> out;
    for (const Json& e : api().List(CorePath(ns(), "events"))) {
      if (e.value("involvedObject", Json::object()).value("name", "") != job) continue;
      out.push_back(e.value("reason", "") + ": " + e.value("message", ""));
    }
    return out;
  }
};

// restartPolicy OnFailure, backoffLimit 2: two failures restart the whole job (new run label, new
// pods); the third fails it with BackoffLimitExceeded.
TEST_F(LifecycleE2eTest, FailuresRestartTheJobUntilBackoffLimit) {
  StartOperator();
  ASSERT_FALSE(CreateJob(JobBuilder("bo").Collective(2).RestartPolicy("worker", "OnFailure").BackoffLimit(2).Obj()).is_null());
  std::vector<Json> pods = WaitForRunningPods("bo", 2, 0);
  ASSERT_FALSE(WaitForPhase("bo", "Running").is_null());
  std::set<std::string> seen_uids;
  for (const Json& pod : pods) seen_uids.insert(UidOf(pod));

  for (int restart = 1; restart <= 2; ++restart) {
    SCOPED_TRACE("failure " + std::to_string(restart));
    PodAction("bo-worker-0", {{"action", "fail"}, {"exitCode", 1}});
    pods = WaitForRunningPods("bo", 2, restart);
    ASSERT_EQ(pods.size(), 2u);
    for (const Json& pod : pods) {
      EXPECT_EQ(LabelOf(pod, kRunLabel), std::to_string(restart));
      EXPECT_TRUE(seen_uids.insert(UidOf(pod)).second) << NameOf(pod) << " is an old pod";
    }
    const Json job = WaitForJob("bo", "to run again after restart " + std::to_string(restart), [&](const Json& j) {
      const Json& st = j.value("status", Json::object());
      return st.value("phase", "") == "Running" && st.value("restartCount", 0) == restart;
    });
    ASSERT_FALSE(job.is_null());
    EXPECT_EQ(job["status"].value("run", -1), restart);
  }

  PodAction("bo-worker-1", {{"action", "fail"}, {"exitCode", 1}});
  const Json failed = WaitForPhase("bo", "Failed");
  ASSERT_FALSE(failed.is_null());
  const Json condition = ConditionOf(failed["status"], "Failed");
  EXPECT_EQ(condition.value("status", ""), "True");
  EXPECT_EQ(condition.value("reason", ""), "BackoffLimitExceeded");
  EXPECT_THAT(condition.value("message", ""), ::testing::HasSubstr("backoffLimit 2"));
  EXPECT_EQ(failed["status"].value("restartCount", -1), 2);
  EXPECT_TRUE(failed["status"].contains("completionTime"));
  // cleanPodPolicy Running: the pod still running goes.
  EXPECT_TRUE(Eventually("the running pod to be removed", [&](std::string& state) {
    for (const Json& pod : LivePods("bo")) {
      state += NameOf(pod) + "=" + PodPhase(pod) + " ";
      if (PodPhase(pod) == "Running") return false;
    }
    return true;
  }));
  EXPECT_TRUE(failed.value("status", Json::object()).value("restartCount", 0) == 2);
}

// The restart count and the backoff budget live in the job's status: an operator that is killed
// and replaced, and a suspend and resume in between, neither reset them nor spend them. Every pod
// carries its run as a label and in its env (FLEET_RUN), so each attempt's logs are told apart.
TEST_F(LifecycleE2eTest, CountsSurviveAnOperatorRestartAndASuspend) {
  OperatorProcess& first = StartOperator();
  ASSERT_FALSE(CreateJob(JobBuilder("cs").Collective(2).RestartPolicy("worker", "OnFailure").BackoffLimit(2).Obj()).is_null());
  WaitForRunningPods("cs", 2, 0);
  PodAction("cs-worker-0", {{"action", "fail"}, {"exitCode", 1}});
  WaitForRunningPods("cs", 2, 1);
  ASSERT_FALSE(WaitForJob("cs", "to run again after one restart", [](const Json& j) {
    const Json& st = j.value("status", Json::object());
    return st.value("phase", "") == "Running" && st.value("restartCount", 0) == 1;
  }).is_null());

  first.Signal(SIGKILL);
  ASSERT_TRUE(first.WaitExit(Seconds(10)).has_value());
  StartOperator();
  ASSERT_FALSE(PatchJob("cs", {{"spec", {{"runPolicy", {{"suspend", true}}}}}}).is_null());
  ASSERT_FALSE(WaitForPhase("cs", "Suspended").is_null());
  ASSERT_FALSE(PatchJob("cs", {{"spec", {{"runPolicy", {{"suspend", false}}}}}}).is_null());
  const std::vector<Json> resumed = WaitForRunningPods("cs", 2, 2);
  ASSERT_EQ(resumed.size(), 2u);
  for (const Json& pod : resumed) {
    const Json& env = pod["spec"]["containers"][0]["env"];
    const auto run_env = std::find_if(env.begin(), env.end(), [](const Json& e) { return e.value("name", "") == "FLEET_RUN"; });
    ASSERT_NE(run_env, env.end()) << NameOf(pod);
    EXPECT_EQ((*run_env)["valueFrom"]["fieldRef"]["fieldPath"], "metadata.labels['fleet.paddlepaddle.org/run']");
  }
  const Json running = WaitForJob("cs", "to run after the resume", [](const Json& j) {
    return j.value("status", Json::object()).value("phase", "") == "Running";
  });
  ASSERT_FALSE(running.is_null());
  EXPECT_EQ(running["status"].value("restartCount", -1), 1) << "neither the new operator nor the resume reset it";

  // One restart of the budget (backoffLimit 2) is left, and only one.
  PodAction("cs-worker-1", {{"action", "fail"}, {"exitCode", 1}});
  WaitForRunningPods("cs", 2, 3);
  PodAction("cs-worker-1", {{"action", "fail"}, {"exitCode", 1}});
  const Json failed = WaitForPhase("cs", "Failed");
  ASSERT_FALSE(failed.is_null());
  EXPECT_EQ(ConditionOf(failed["status"], "Failed").value("reason", ""), "BackoffLimitExceeded");
  EXPECT_EQ(failed["status"].value("restartCount", -1), 2);
}

// Service mode replaces a failed pod alone; that is one restart, however the API answers.
//
// Regression (fixed): a Service-mode restart replaces the failed pod in the same run, and
// reconciles that still saw it Failed counted its restart again (restartCount 2-3 for one failure).
// The planner now records the replaced pod's uid (status.replacedPods).
TEST_F(LifecycleE2eTest, ServiceModeRestartIsCountedOnce) {
  StartOperator();
  ASSERT_FALSE(CreateJob(
                   JobBuilder("svc").Collective(3).Network("Service").RestartPolicy("worker", "OnFailure").BackoffLimit(5).Obj())
                   .is_null());
  const auto before = Uids(WaitForRunningPods("svc", 3, 0));
  ASSERT_FALSE(WaitForPhase("svc", "Running").is_null());

  // One refused DELETE (403: not retried by the client) leaves the failed pod in place for the
  // next reconcile.
  fake().Control("faults", {{"failNext", 1}, {"code", 403}, {"match", "DELETE " + CorePath(ns(), "pods", "svc-worker-2")}});
  PodAction("svc-worker-2", {{"action", "fail"}, {"exitCode", 1}});
  const Json job = WaitForJob("svc", "to replace svc-worker-2 and run again", [&](const Json& j) {
    const Json& st = j.value("status", Json::object());
    if (st.value("restartCount", 0) < 1 || st.value("phase", "") != "Running") return false;
    auto pod = Pod("svc-worker-2");
    return pod && UidOf(*pod) != before.at("svc-worker-2") && PodPhase(*pod) == "Running";
  });
  ASSERT_FALSE(job.is_null());
  EXPECT_EQ(job["status"].value("restartCount", -1), 1) << "one pod failure counted as several restarts";
  const auto after = Uids(Pods("svc"));
  EXPECT_EQ(after.at("svc-worker-0"), before.at("svc-worker-0"));
  EXPECT_EQ(after.at("svc-worker-1"), before.at("svc-worker-1"));
}

// An evicted pod under restartPolicy ExitCode is retryable: the whole job restarts.
TEST_F(LifecycleE2eTest, EvictionRestartsTheJobUnderExitCodePolicy) {
  StartOperator();
  ASSERT_FALSE(CreateJob(JobBuilder("ev").Ps(1, 2).RestartPolicy("server", "ExitCode").RestartPolicy("worker", "ExitCode").Obj())
                   .is_null());
  const auto before = Uids(WaitForRunningPods("ev", 3, 0));
  ASSERT_FALSE(WaitForPhase("ev", "Running").is_null());

  PodAction("ev-worker-1", {{"action", "evict"}, {"message", "The node was low on resource: memory."}});
  const auto after = Uids(WaitForRunningPods("ev", 3, 1));
  for (const auto& [name, uid] : after) EXPECT_NE(uid, before.count(name) ? before.at(name) : "") << name;
  const Json job = WaitForJob("ev", "to run again", [](const Json& j) {
    const Json& st = j.value("status", Json::object());
    return st.value("phase", "") == "Running" && st.value("restartCount", 0) == 1;
  });
  ASSERT_FALSE(job.is_null());
  EXPECT_TRUE(Eventually("a Restarting event naming the eviction", [&](std::string& state) {
    for (const std::string& e : Events("ev")) {
      state += e + " | ";
      if (e.rfind("Restarting:", 0) == 0 && e.find("ev-worker-1 was evicted") != std::string::npos) return true;
    }
    return false;
  }, Seconds(5)));
}

// Under ExitCode an application error (exit code < 128) is not retried: the job fails (once no
// earlier failure elsewhere explains it: a few seconds).
TEST_F(LifecycleE2eTest, ExitCodePolicyDoesNotRetryAnApplicationError) {
  StartOperator();
  ASSERT_FALSE(CreateJob(JobBuilder("ec").Collective(2).RestartPolicy("worker", "ExitCode").Obj()).is_null());
  WaitForRunningPods("ec", 2, 0);
  PodAction("ec-worker-1", {{"action", "fail"}, {"exitCode", 2}});
  const Json failed = WaitForPhase("ec", "Failed");
  ASSERT_FALSE(failed.is_null());
  const Json condition = ConditionOf(failed["status"], "Failed");
  EXPECT_EQ(condition.value("reason", ""), "PodFailed");
  EXPECT_THAT(condition.value("message", ""), ::testing::HasSubstr("ec-worker-1 failed with exit code 2"));
  EXPECT_EQ(failed["status"].value("restartCount", -1), 0);

  // ... and a signal death (137) under the same policy is retried.
  ASSERT_FALSE(CreateJob(JobBuilder("ec2").Collective(2).RestartPolicy("worker", "ExitCode").Obj()).is_null());
  WaitForRunningPods("ec2", 2, 0);
  PodAction("ec2-worker-0", {{"action", "fail"}, {"exitCode", 137}});
  WaitForRunningPods("ec2", 2, 1);
  EXPECT_FALSE(WaitForJob("ec2", "to restart once", [](const Json& j) {
    return j.value("status", Json::object()).value("restartCount", 0) == 1;
  }).is_null());
}

// All workers succeed: the job succeeds and the servers, still running, are removed
// (cleanPodPolicy Running); the finished workers stay.
TEST_F(LifecycleE2eTest, WorkersSucceedThenServersAreRemoved) {
  StartOperator();
  ASSERT_FALSE(CreateJob(JobBuilder("ok").Ps(2, 2).CleanPodPolicy("Running").Obj()).is_null());
  WaitForRunningPods("ok", 4, 0);
  ASSERT_FALSE(WaitForPhase("ok", "Running").is_null());

  PodAction("ok-worker-0", {{"action", "succeed"}});
  // One worker done: still Running.
  ASSERT_FALSE(WaitForJob("ok", "to count one succeeded worker", [](const Json& j) {
    return j.value("status", Json::object()).value("replicaStatuses", Json::object()).value("worker", Json::object())
               .value("succeeded", 0) == 1;
  }).is_null());
  EXPECT_EQ(JobStatus("ok").value("phase", ""), "Running");

  PodAction("ok-worker-1", {{"action", "succeed"}});
  const Json done = WaitForPhase("ok", "Succeeded");
  ASSERT_FALSE(done.is_null());
  EXPECT_EQ(ConditionOf(done["status"], "Succeeded").value("reason", ""), "WorkersSucceeded");
  EXPECT_TRUE(done["status"].contains("completionTime"));
  ASSERT_TRUE(Eventually("the servers to be removed", [&](std::string& state) {
    const auto pods = Pods("ok");
    for (const Json& pod : pods) state += NameOf(pod) + "=" + PodPhase(pod) + " ";
    return pods.size() == 2;
  }));
  for (const Json& pod : Pods("ok")) {
    EXPECT_EQ(LabelOf(pod, "fleet.paddlepaddle.org/role"), "worker");
    EXPECT_EQ(PodPhase(pod), "Succeeded");
  }
  EXPECT_EQ(JobStatus("ok").value("phase", ""), "Succeeded");
}

// Suspend removes the pods and keeps the job; resume recreates them in a new run.
TEST_F(LifecycleE2eTest, SuspendRemovesPodsAndResumeRecreatesThem) {
  StartOperator();
  ASSERT_FALSE(CreateJob(JobBuilder("sus").Ps(1, 2).Obj()).is_null());
  const auto before = Uids(WaitForRunningPods("sus", 3, 0));
  ASSERT_FALSE(WaitForPhase("sus", "Running").is_null());

  PatchJob("sus", {{"spec", {{"runPolicy", {{"suspend", true}}}}}});
  const Json suspended = WaitForPhase("sus", "Suspended");
  ASSERT_FALSE(suspended.is_null());
  EXPECT_EQ(ConditionOf(suspended["status"], "Suspended").value("status", ""), "True");
  ASSERT_TRUE(Eventually("every pod to be removed", [&](std::string& state) {
    const auto pods = Pods("sus");
    state = std::to_string(pods.size()) + " pods";
    return pods.empty();
  }));
  ASSERT_TRUE(GetJob("sus").has_value());
  EXPECT_EQ(JobStatus("sus").value("phase", ""), "Suspended");

  PatchJob("sus", {{"spec", {{"runPolicy", {{"suspend", false}}}}}});
  const int run = JobStatus("sus").value("run", 0);
  EXPECT_GE(run, 1);
  const auto after = Uids(WaitForRunningPods("sus", 3, run));
  ASSERT_EQ(after.size(), 3u);
  for (const auto& [name, uid] : after) EXPECT_NE(uid, before.at(name)) << name;
  const Json resumed = WaitForPhase("sus", "Running");
  ASSERT_FALSE(resumed.is_null());
  EXPECT_EQ(ConditionOf(resumed["status"], "Suspended").value("status", ""), "False");
  EXPECT_EQ(resumed["status"].value("restartCount", -1), 0) << "a suspend is not a failure";
}

// ttlSecondsAfterFinished: 1 -> the finished FleetJob is deleted (and its children with it).
TEST_F(LifecycleE2eTest, TtlDeletesTheFinishedJob) {
  StartOperator();
  ASSERT_FALSE(CreateJob(JobBuilder("ttl").Collective(2).TtlSecondsAfterFinished(1).Obj()).is_null());
  WaitForRunningPods("ttl", 2, 0);
  PodAction("ttl-worker-0", {{"action", "succeed"}});
  PodAction("ttl-worker-1", {{"action", "succeed"}});
  ASSERT_TRUE(Eventually("the FleetJob to be deleted after its TTL", [&](std::string& state) {
    auto job = GetJob("ttl");
    if (job) state = "phase " + job->value("status", Json::object()).value("phase", "");
    return !job.has_value();
  }, Seconds(15)));
  EXPECT_TRUE(Eventually("its children to be garbage-collected", [&](std::string& state) {
    const size_t pods = Pods("ttl").size();
    const bool cm = EndpointsConfigMap("ttl").has_value();
    state = std::to_string(pods) + " pods, configmap " + (cm ? "present" : "gone");
    return pods == 0 && !cm;
  }));
}

// A pod template the API server refuses (a container name that is not a DNS label: 422 Invalid)
// fails the job with PodRejected instead of retrying forever.
TEST_F(LifecycleE2eTest, PodTheApiServerRefusesFailsTheJob) {
  StartOperator();
  ASSERT_FALSE(CreateJob(JobBuilder("rej").Ps(1, 2).Set("/spec/worker/template/spec/containers/0/name", "Main_Container").Obj())
                   .is_null());
  const Json failed = WaitForPhase("rej", "Failed");
  ASSERT_FALSE(failed.is_null());
  const Json condition = ConditionOf(failed["status"], "Failed");
  EXPECT_EQ(condition.value("status", ""), "True");
  EXPECT_EQ(condition.value("reason", ""), "PodRejected");
  EXPECT_THAT(condition.value("message", ""), ::testing::HasSubstr("rej-worker-"));
  EXPECT_THAT(condition.value("message", ""), ::testing::HasSubstr("containers[0].name"));
  // No worker exists; the server pod made before the failure does not stay running.
  EXPECT_TRUE(Eventually("no pod left running", [&](std::string& state) {
    for (const Json& pod : LivePods("rej")) {
      state += NameOf(pod) + "=" + PodPhase(pod) + " ";
      if (PodPhase(pod) == "Running" || PodPhase(pod) == "Pending") return false;
    }
    return true;
  }));
  for (const Json& pod : Pods("rej")) EXPECT_NE(LabelOf(pod, "fleet.paddlepaddle.org/role"), "worker");
}

// activeDeadlineSeconds: a job running longer fails with DeadlineExceeded and its pods go.
TEST_F(LifecycleE2eTest, ActiveDeadlineFailsTheJob) {
  StartOperator();
  ASSERT_FALSE(CreateJob(JobBuilder("dl").Collective(2).ActiveDeadlineSeconds(1).Obj()).is_null());
  WaitForRunningPods("dl", 2, 0);
  const Json failed = WaitForPhase("dl", "Failed", Seconds(10));
  ASSERT_FALSE(failed.is_null());
  EXPECT_EQ(ConditionOf(failed["status"], "Failed").value("reason", ""), "DeadlineExceeded");
  EXPECT_TRUE(Eventually("the pods to be removed", [&](std::string& state) {
    const auto pods = LivePods("dl");
    state = std::to_string(pods.size()) + " live pods";
    return pods.empty();
  }));
}

// A pod the scheduler cannot place: past pendingTimeoutSeconds the job carries a condition quoting
// the scheduler's reason; once the pod is placed the condition clears.
class ManualKubeletLifecycleE2eTest : public LifecycleE2eTest {
 protected:
  ManualKubeletLifecycleE2eTest() { fake_args_ = {"--kubelet", "manual"}; }
};

TEST_F(ManualKubeletLifecycleE2eTest, PendingPodGetsAConditionQuotingTheScheduler) {
  StartOperator();
  // 3 s, not 1: creationTimestamp has whole seconds, so a pod created late in a second already
  // looks up to 1 s old, and worker 0 must be running before its own timeout passes.
  ASSERT_FALSE(CreateJob(JobBuilder("pend").Collective(2).PendingTimeoutSeconds(3).Obj()).is_null());
  ASSERT_TRUE(Eventually("2 pods", [&](std::string&) { return Pods("pend").size() == 2; }));
  PodAction("pend-worker-0", {{"action", "run"}});
  PodAction("pend-worker-1", {{"action", "unschedulable"}, {"message", "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}});
  const Json stuck = WaitForJob("pend", "to report the unschedulable pod", [](const Json& j) {
    return ConditionOf(j.value("status", Json::object()), "Unschedulable").value("status", "") == "True";
  }, Seconds(10));
  ASSERT_FALSE(stuck.is_null());
  const std::string message = ConditionOf(stuck["status"], "Unschedulable").value("message", "");
  EXPECT_THAT(message, ::testing::HasSubstr("pend-worker-1"));
  EXPECT_THAT(message, ::testing::HasSubstr("Insufficient nvidia.com/gpu"));

  PodAction("pend-worker-1", {{"action", "run"}});
  const Json running = WaitForPhase("pend", "Running");
  ASSERT_FALSE(running.is_null());
  EXPECT_EQ(ConditionOf(running["status"], "Unschedulable").value("status", ""), "False");
}

// Scaling the workers rewires the job: a new run with the new lists, not counted as a restart.
TEST_F(LifecycleE2eTest, ScalingWorkersRewiresTheJob) {
  StartOperator();
  ASSERT_FALSE(CreateJob(JobBuilder("sc").Ps(1, 2).Obj()).is_null());
  WaitForRunningPods("sc", 3, 0);
  ASSERT_FALSE(WaitForPhase("sc", "Running").is_null());

  PatchJob("sc", {{"spec", {{"worker", {{"replicas", 3}}}}}});
  const auto pods = WaitForRunningPods("sc", 4, 1);
  ASSERT_EQ(pods.size(), 4u);
  const Json job = WaitForJob("sc", "to run with 3 workers", [](const Json& j) {
    const Json& st = j.value("status", Json::object());
    return st.value("phase", "") == "Running" && st.value("observedGeneration", 0) == 2;
  });
  ASSERT_FALSE(job.is_null());
  EXPECT_EQ(job["status"].value("restartCount", -1), 0);
  EXPECT_EQ(job["status"]["replicaStatuses"]["worker"].value("replicas", 0), 3);
  const auto cm = EndpointsConfigMap("sc");
  ASSERT_TRUE(cm.has_value());
  EXPECT_EQ((*cm)["metadata"]["annotations"].value("fleet.paddlepaddle.org/run", ""), "1");
  for (const Json& pod : pods) {
    SCOPED_TRACE(NameOf(pod));
    auto env = ResolveEnv(pod, cm);
    ASSERT_TRUE(env.ok()) << env.error();
    auto parsed = ParseProcessEnv(*env, RoleMakerKind::kParameterServer);
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    EXPECT_EQ(parsed->trainers_num, 3);
    EXPECT_EQ(parsed->current_endpoint, pod["status"].value("podIP", "") + ":6170");
  }
}

// PodIP mode: a pod deleted from under a running job comes back with a new address, so the whole
// job restarts (counted against backoffLimit) and every pod gets the new lists.
TEST_F(LifecycleE2eTest, DeletedPodRestartsTheWholeJobInPodIpMode) {
  StartOperator();
  ASSERT_FALSE(CreateJob(JobBuilder("del").Collective(3).Obj()).is_null());
  const auto before = Uids(WaitForRunningPods("del", 3, 0));
  ASSERT_FALSE(WaitForPhase("del", "Running").is_null());

  ASSERT_EQ(api().Delete(CorePath(ns(), "pods", "del-worker-1")).status, 200);
  const auto after = Uids(WaitForRunningPods("del", 3, 1));
  for (const auto& [name, uid] : after) EXPECT_NE(uid, before.at(name)) << name;
  const Json job = WaitForJob("del", "to run again", [](const Json& j) {
    const Json& st = j.value("status", Json::object());
    return st.value("phase", "") == "Running" && st.value("run", 0) == 1;
  });
  ASSERT_FALSE(job.is_null());
  EXPECT_EQ(job["status"].value("restartCount", -1), 1);
  const auto cm = EndpointsConfigMap("del");
  ASSERT_TRUE(cm.has_value());
  EXPECT_EQ((*cm)["metadata"]["annotations"].value("fleet.paddlepaddle.org/run", ""), "1");
}

}  // namespace
}  // namespace fleet::op::e2e
