// End to end: specs the operator must refuse. The fake API server runs no CRD schema validation
// (as a cluster whose CRD was applied without it, or an older schema), so every check here is the
// operator's own: each job ends Failed with an InvalidSpec condition naming the field, and nothing
// is created for any of them.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "builders.h"
#include "harness.h"

namespace fleet::op::e2e {
namespace {

using testing::JobBuilder;

struct InvalidCase {
  std::string name;     // the FleetJob's name
  Json job;
  std::string field;    // the condition's message must name it
};

std::vector<InvalidCase> Cases() {
  using H = JobBuilder::HeterStage;
  auto ps = [](const std::string& name) { return JobBuilder(name).Ps(1, 2); };
  auto col = [](const std::string& name) { return JobBuilder(name).Collective(2); };
  const std::string long_name = "a-job-name-that-is-too-long-for-its-pod-names-x";   // 47 characters
  return {
      {"heter-without-servers", col("heter-without-servers").Heter(H("gpu", 1)).Obj(), "spec.server"},
      {"ps-without-servers", col("ps-without-servers").Mode("ps").Obj(), "spec.server"},
      {"ps-heter-without-servers", col("ps-heter-without-servers").Mode("ps-heter").Heter(H("gpu", 1)).Obj(), "spec.server"},
      {"zero-workers", ps("zero-workers").Workers(0).Obj(), "spec.worker.replicas"},
      {"negative-servers", ps("negative-servers").Servers(-1).Obj(), "spec.server.replicas"},
      {"replicas-as-string", ps("replicas-as-string").Set("/spec/worker/replicas", "4").Obj(), "spec.worker.replicas"},
      {"too-many-workers", ps("too-many-workers").Workers(20000).Obj(), "spec.worker.replicas"},
      {"missing-worker", ps("missing-worker").Erase("/spec/worker").Obj(), "spec.worker"},
      {"worker-not-an-object", ps("worker-not-an-object").Set("/spec/worker", 3).Obj(), "spec.worker"},
      {"missing-template", ps("missing-template").Erase("/spec/worker/template").Obj(), "spec.worker.template"},
      {"no-containers", ps("no-containers").Set("/spec/worker/template/spec/containers", Json::array()).Obj(),
       "spec.worker.template.spec.containers"},
      {"container-without-image", ps("container-without-image").Erase("/spec/server/template/spec/containers/0/image").Obj(),
       "spec.server.template.spec.containers[0].image"},
      {"container-without-name", ps("container-without-name").Erase("/spec/worker/template/spec/containers/0/name").Obj(),
       "spec.worker.template.spec.containers[0].name"},
      {"duplicate-container", ps("duplicate-container")
                                  .Set("/spec/worker/template/spec/containers/1", {{"name", "main"}, {"image", "busybox"}})
                                  .Obj(),
       "spec.worker.template.spec.containers[1].name"},
      {"template-restart-policy", ps("template-restart-policy").Set("/spec/worker/template/spec/restartPolicy", "OnFailure").Obj(),
       "spec.worker.template.spec.restartPolicy"},
      {"bad-device", ps("bad-device").Heter(H("tpu", 1, "acc")).Obj(), "spec.heter[0].device"},
      {"heter-named-server", ps("heter-named-server").Heter(H("gpu", 1, "server")).Obj(), "spec.heter[0].name"},
      {"heter-name-uppercase", ps("heter-name-uppercase").Heter(H("gpu", 1, "GPU")).Obj(), "spec.heter[0].name"},
      {"duplicate-heter-stage", ps("duplicate-heter-stage").Heter(H("gpu", 1, "st")).Heter(H("cpu", 1, "st")).Obj(),
       "spec.heter[1].name"},
      {"heter-zero-replicas", ps("heter-zero-replicas").Heter(H("gpu", 0, "g")).Obj(), "spec.heter[0].replicas"},
      {"heter-not-a-list", ps("heter-not-a-list").Set("/spec/heter", {{"name", "gpu"}}).Obj(), "spec.heter"},
      {"ps-with-heter", ps("ps-with-heter").Heter(H("gpu", 1)).Mode("ps").Obj(), "spec.mode"},
      {"ps-heter-without-heter", ps("ps-heter-without-heter").Mode("ps-heter").Obj(), "spec.heter"},
      {"collective-with-servers", ps("collective-with-servers").Mode("collective").Obj(), "spec.mode"},
      {"unknown-mode", col("unknown-mode").Mode("allreduce").Obj(), "spec.mode"},
      {"unknown-network", col("unknown-network").Network("Overlay").Obj(), "spec.network"},
      {"gloo-invalid", ps("gloo-invalid").Gloo("Sometimes").Obj(), "spec.gloo"},
      {"processes-per-pod-with-ps", ps("processes-per-pod-with-ps").ProcessesPerPod(2).Obj(), "spec.processesPerPod"},
      {"zero-processes-per-pod", col("zero-processes-per-pod").ProcessesPerPod(0).Obj(), "spec.processesPerPod"},
      {"privileged-port", col("privileged-port").Port(80).Obj(), "spec.port"},
      {"ports-past-65535", col("ports-past-65535").Port(65535).ProcessesPerPod(2).Obj(), "spec.port"},
      {"overlapping-ports", col("overlapping-ports").Port(9102).Obj(), "spec.sidecar.metricsPort"},
      {"overlapping-process-ports", col("overlapping-process-ports").Port(9100).ProcessesPerPod(3).Obj(),
       "spec.sidecar.metricsPort"},
      {"sidecar-port-privileged", col("sidecar-port-privileged").SidecarMetricsPort(80).Obj(), "spec.sidecar.metricsPort"},
      {"negative-backoff-limit", col("negative-backoff-limit").BackoffLimit(-1).Obj(), "spec.runPolicy.backoffLimit"},
      {"huge-backoff-limit", col("huge-backoff-limit").BackoffLimit(5000).Obj(), "spec.runPolicy.backoffLimit"},
      {"bad-restart-policy", col("bad-restart-policy").RestartPolicy("worker", "Always").Obj(), "spec.worker.restartPolicy"},
      {"zero-active-deadline", col("zero-active-deadline").ActiveDeadlineSeconds(0).Obj(), "spec.runPolicy.activeDeadlineSeconds"},
      {"negative-ttl", col("negative-ttl").TtlSecondsAfterFinished(-5).Obj(), "spec.runPolicy.ttlSecondsAfterFinished"},
      {"bad-clean-pod-policy", col("bad-clean-pod-policy").CleanPodPolicy("Sometimes").Obj(), "spec.runPolicy.cleanPodPolicy"},
      {"suspend-not-a-bool", col("suspend-not-a-bool").Set("/spec/runPolicy/suspend", "yes").Obj(), "spec.runPolicy.suspend"},
      {"zero-pending-timeout", col("zero-pending-timeout").PendingTimeoutSeconds(0).Obj(),
       "spec.runPolicy.pendingTimeoutSeconds"},
      {"unknown-gang-scheduler", col("unknown-gang-scheduler").Gang("Kueue").Obj(), "spec.scheduling.gang"},
      {"queue-without-volcano", col("queue-without-volcano").Gang("SchedulerPlugins", "research").Obj(),
       "spec.scheduling.queue"},
      {long_name, col(long_name).Obj(), "metadata.name"},
      // 7,000 pods of fleetrun: DISTRIBUTED_TRAINER_ENDPOINTS would be ~290 KiB, too long for the
      // env, and fleetrun reads no files (found by the wiring, after the spec itself parsed).
      {"endpoint-list-too-large", JobBuilder("endpoint-list-too-large").Collective(7000).ProcessesPerPod(2).Obj(),
       "endpoint list DISTRIBUTED_TRAINER_ENDPOINTS"},
  };
}

class InvalidSpecE2eTest : public OperatorE2eTest {};

TEST_F(InvalidSpecE2eTest, EveryInvalidSpecFailsNamingTheFieldAndCreatesNothing) {
  const std::vector<InvalidCase> cases = Cases();
  ASSERT_GE(cases.size(), 20u);
  ASSERT_TRUE(WaitReady(StartOperator()));
  fake().ClearRequests();
  for (const InvalidCase& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_FALSE(CreateJob(c.job).is_null());
  }

  for (const InvalidCase& c : cases) {
    SCOPED_TRACE(c.name);
    const Json failed = WaitForPhase(c.name, "Failed", Seconds(15));
    if (failed.is_null()) continue;
    const Json condition = ConditionOf(failed["status"], "Failed");
    EXPECT_EQ(condition.value("status", ""), "True");
    EXPECT_EQ(condition.value("reason", ""), "InvalidSpec");
    EXPECT_THAT(condition.value("message", ""), ::testing::HasSubstr(c.field));
    EXPECT_THAT(failed["status"].value("message", ""), ::testing::HasSubstr(c.field));
  }

  // A valid job reconciled after all of them proves the operator has been through them, then:
  // nothing but events and the jobs' statuses was written for the invalid ones.
  ASSERT_FALSE(CreateJob(JobBuilder("valid").Collective(1).Obj()).is_null());
  ASSERT_FALSE(WaitForPhase("valid", "Running").is_null());
  std::set<std::string> names;
  for (const InvalidCase& c : cases) names.insert(c.name);
  const std::vector<std::string> kinds = {CorePath(ns(), "pods"), CorePath(ns(), "configmaps"), CorePath(ns(), "services"),
                                          CorePath(ns(), "serviceaccounts"),
                                          "/apis/rbac.authorization.k8s.io/v1/namespaces/" + ns() + "/roles",
                                          "/apis/rbac.authorization.k8s.io/v1/namespaces/" + ns() + "/rolebindings",
                                          PodGroupPath(ns(), ""),
                                          "/apis/scheduling.x-k8s.io/v1alpha1/namespaces/" + ns() + "/podgroups"};
  for (const std::string& path : kinds) {
    for (const Json& object : api().List(path)) {
      const std::string owner = LabelOf(object, "fleet.paddlepaddle.org/job-name");
      EXPECT_FALSE(names.count(owner)) << path << "/" << NameOf(object) << " was created for invalid job " << owner;
      for (const Json& ref : object["metadata"].value("ownerReferences", Json::array())) {
        EXPECT_FALSE(names.count(ref.value("name", ""))) << path << "/" << NameOf(object) << " is owned by an invalid job";
      }
    }
  }
  // The request log agrees: the only children written belong to the valid job (its pod name and
  // those of its ConfigMap, ServiceAccount, Role, RoleBinding), and only POSTs made them.
  for (const Json& r : fake().Requests()) {
    const std::string method = r.value("method", "");
    const std::string path = r.value("path", "");
    if (method == "GET" || path.find("/events") != std::string::npos || path.find("/fleetjobs") != std::string::npos ||
        path.find("/leases") != std::string::npos) {
      continue;
    }
    EXPECT_EQ(method, "POST") << method << " " << path;
  }
  int child_posts = 0;
  for (const Json& r : fake().Requests()) {
    const std::string path = r.value("path", "");
    if (r.value("method", "") == "POST" && path.find("/events") == std::string::npos &&
        path.find("/fleetjobs") == std::string::npos && r.value("code", 0) == 201) {
      ++child_posts;
    }
  }
  // The valid job's pod, endpoints ConfigMap, and the sidecar's ServiceAccount, Role, RoleBinding.
  EXPECT_EQ(child_posts, 5) << "children were created for invalid jobs";
}

// An edit that makes a running job invalid ends it like any failure: its running pods go
// (cleanPodPolicy Running), and its TTL deletes it (issue 14).
TEST_F(InvalidSpecE2eTest, AnEditThatMakesARunningJobInvalidEndsIt) {
  StartOperator();
  ASSERT_FALSE(CreateJob(JobBuilder("edited").Ps(1, 2).TtlSecondsAfterFinished(2).Obj()).is_null());
  WaitForRunningPods("edited", 3, 0);
  PatchJob("edited", {{"spec", {{"worker", {{"template", {{"spec", {{"containers", Json::array({{{"name", "main"}}})}}}}}}}}}});
  const Json failed = WaitForPhase("edited", "Failed", Seconds(5));
  ASSERT_FALSE(failed.is_null());
  EXPECT_NE(failed.dump().find("spec.worker.template.spec.containers[0].image"), std::string::npos) << failed.dump();
  EXPECT_TRUE(Eventually("the running pods to go", [&](std::string& state) {
    state = std::to_string(LivePods("edited").size()) + " live pods";
    return LivePods("edited").empty();
  }, Seconds(5)));
  EXPECT_TRUE(Eventually("the FleetJob to be deleted after its TTL", [&](std::string&) {
    return !GetJob("edited").has_value();
  }, Seconds(10)));
}

}  // namespace
}  // namespace fleet::op::e2e
