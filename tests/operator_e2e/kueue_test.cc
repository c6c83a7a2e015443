// End to end: FleetJobs queued in Kueue (docs/kueue.md), the real fleet-operator against the fake
// API server's Kueue stand-in (tests/controlplane/fakeapi/kueue.py), which admits, queues and
// preempts as Kueue does, checks every Workload write against Kueue's own CRD schemas, and never
// frees a preempted job's quota itself: the operator must release it, or the preemptor never runs.
//
// The cluster: a ResourceFlavor "a100" (node label gpu.example.com/model=a100, a toleration of the
// GPU taint), a ClusterQueue with 4 GPUs that lets higher priorities preempt lower ones, and a
// LocalQueue "gpu" in the test's namespace. Only two of the fake's nodes carry the flavor's label,
// so a pod without the flavor's node selector could also land elsewhere; one with it cannot.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "builders.h"
#include "harness.h"

namespace fleet::op::e2e {
namespace {

using testing::JobBuilder;

constexpr const char* kQueueLabel = "kueue.x-k8s.io/queue-name";
constexpr const char* kPriorityLabel = "kueue.x-k8s.io/priority-class";
constexpr const char* kModelLabel = "gpu.example.com/model";

class KueueE2eTest : public OperatorE2eTest {
 protected:
  void SetUp() override {
    OperatorE2eTest::SetUp();
    if (!EnableKueue()) GTEST_SKIP() << "Kueue's CRDs not found (set FLEET_KUEUE_CRDS)";
    for (const char* node : {"node-0", "node-1"}) {
      const auto answer = api().Request("POST", std::string("/fake/v1/nodes/") + node, {{"labels", {{kModelLabel, "a100"}}}});
      ASSERT_EQ(answer.status, 200) << answer.raw;
    }
    CreateResourceFlavor("a100", {{kModelLabel, "a100"}},
                         Json::array({{{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}}));
    CreateClusterQueue("gpu-pool", {"cpu", "memory", "nvidia.com/gpu"},
                       {{"a100", {{"cpu", "64"}, {"memory", "256Gi"}, {"nvidia.com/gpu", "4"}}}},
                       /*preempt_lower_priority=*/true);
    CreateLocalQueue("gpu", "gpu-pool");
    CreateWorkloadPriorityClass("research", 100);
    CreateWorkloadPriorityClass("production", 1000);
    ASSERT_TRUE(WaitReady(StartOperator()));
  }

  // A collective job of `workers` pods with `gpus` GPUs each, in LocalQueue gpu.
  Json QueuedJob(const std::string& name, int workers, int gpus, const std::string& priority = "") {
    JobBuilder job(name);
    job.Collective(workers, gpus).Label(kQueueLabel, "gpu");
    if (!priority.empty()) job.Label(kPriorityLabel, priority);
    return job.Obj();
  }

  // Every pod of `job` succeeds: the job is done.
  void SucceedPods(const std::string& job) {
    for (const Json& pod : LivePods(job)) PodAction(NameOf(pod), {{"action", "succeed"}});
  }

  // Nothing of the job exists but the job and its Workload.
  void ExpectNothingCreatedFor(const std::string& job) {
    EXPECT_TRUE(Pods(job).empty());
    EXPECT_FALSE(EndpointsConfigMap(job).has_value());
    for (const char* plural : {"services", "serviceaccounts", "configmaps"}) {
      for (const Json& object : api().List(CorePath(ns(), plural), "fleet.paddlepaddle.org/job-name=" + job)) {
        ADD_FAILURE() << plural << " " << NameOf(object) << " exists before the job is admitted";
      }
    }
  }
};

bool Queued(const Json& job) {
  const Json queue = job.value("status", Json::object()).value("queue", Json::object());
  return queue.value("state", "") == "Queued";
}

TEST_F(KueueE2eTest, ASecondJobOverTheQuotaWaitsWithNothingCreatedAndStartsWhenTheFirstEnds) {
  ASSERT_FALSE(CreateJob(QueuedJob("first", 2, 2)).is_null());
  WaitForRunningPods("first", 2, 0);
  ASSERT_FALSE(CreateJob(QueuedJob("second", 2, 2)).is_null());

  // Queued at once; Kueue's reason follows when its scheduler has tried the job.
  const Json second = WaitForJob("second", "queued for want of GPUs", [](const Json& job) {
    return Queued(job) && job["status"]["queue"].value("message", "").find("nvidia.com/gpu") != std::string::npos;
  });
  ASSERT_FALSE(second.is_null());
  EXPECT_EQ(second["status"].value("phase", ""), "Pending");
  EXPECT_NE(second["status"].value("message", "").find("queued in LocalQueue gpu"), std::string::npos)
      << second["status"].dump();
  ExpectNothingCreatedFor("second");
  EXPECT_FALSE(IsConditionTrue(*JobWorkload("second"), "QuotaReserved"));

  // The first ends: its Workload is Finished (Kueue frees its quota) and loses Kueue's finalizer.
  SucceedPods("first");
  ASSERT_FALSE(WaitForPhase("first", "Succeeded").is_null());
  Eventually("the first job's Workload finished and released", [&](std::string& state) {
    const std::vector<Json> workloads = Workloads("first");
    if (workloads.size() != 1) return false;
    state = workloads[0].dump();
    return IsConditionTrue(workloads[0], "Finished") &&
           workloads[0]["metadata"].value("finalizers", Json::array()).empty();
  });

  std::vector<Json> pods = WaitForRunningPods("second", 2, 0);
  ASSERT_EQ(pods.size(), 2u);
  const Json admitted = JobStatus("second");
  EXPECT_EQ(admitted["queue"].value("state", ""), "Admitted") << admitted.dump();
  EXPECT_EQ(admitted["queue"].value("clusterQueue", ""), "gpu-pool");
  SucceedPods("second");
  EXPECT_FALSE(WaitForPhase("second", "Succeeded").is_null());
}

TEST_F(KueueE2eTest, AdmittedPodsCarryTheFlavorsNodeSelectorTolerationAndKueueLabels) {
  ASSERT_FALSE(CreateJob(QueuedJob("flavored", 2, 1)).is_null());
  const std::vector<Json> pods = WaitForRunningPods("flavored", 2, 0);
  ASSERT_EQ(pods.size(), 2u);
  const Json workload = *JobWorkload("flavored");
  std::set<std::string> nodes;
  for (const Json& pod : pods) {
    SCOPED_TRACE(NameOf(pod));
    EXPECT_EQ(pod["spec"].value("nodeSelector", Json::object()).value(kModelLabel, ""), "a100") << pod["spec"].dump();
    bool tolerated = false;
    for (const Json& t : pod["spec"].value("tolerations", Json::array())) {
      tolerated |= t.value("key", "") == "nvidia.com/gpu" && t.value("effect", "") == "NoSchedule";
    }
    EXPECT_TRUE(tolerated) << pod["spec"].value("tolerations", Json::array()).dump();
    EXPECT_EQ(LabelOf(pod, "kueue.x-k8s.io/podset"), "worker");
    EXPECT_EQ(pod["metadata"].value("annotations", Json::object()).value("kueue.x-k8s.io/workload", ""), NameOf(workload));
    nodes.insert(pod["spec"].value("nodeName", ""));
  }
  // The fake's scheduler honoured the selector: only node-0 and node-1 have the flavor's label.
  for (const std::string& node : nodes) EXPECT_TRUE(node == "node-0" || node == "node-1") << node;

  // The Workload: one pod set per role, the pod as built (sidecar included), owned by the job.
  const Json& pod_sets = workload["spec"]["podSets"];
  ASSERT_EQ(pod_sets.size(), 1u) << pod_sets.dump();
  EXPECT_EQ(pod_sets[0].value("name", ""), "worker");
  EXPECT_EQ(pod_sets[0].value("count", 0), 2);
  std::set<std::string> containers;
  for (const Json& c : pod_sets[0]["template"]["spec"]["containers"]) containers.insert(c.value("name", ""));
  for (const Json& c : pod_sets[0]["template"]["spec"].value("initContainers", Json::array())) containers.insert(c.value("name", ""));
  EXPECT_TRUE(containers.count("fleet-sidecar")) << pod_sets[0]["template"]["spec"].dump();
  EXPECT_EQ(workload["metadata"]["ownerReferences"][0].value("kind", ""), "FleetJob");
  EXPECT_EQ(workload["spec"].value("queueName", ""), "gpu");

  // PodsReady follows the pods (Kueue's waitForPodsReady reads it).
  for (const Json& pod : pods) PodAction(NameOf(pod), {{"action", "ready"}});
  WaitForWorkload("flavored", "PodsReady", [](const Json& w) { return IsConditionTrue(w, "PodsReady"); });
}

TEST_F(KueueE2eTest, AHigherPriorityJobPreemptsALowerOneWhichRunsAgainAndSucceeds) {
  ASSERT_FALSE(CreateJob(QueuedJob("research", 2, 2, "research")).is_null());
  const std::vector<Json> before = WaitForRunningPods("research", 2, 0);
  ASSERT_EQ(before.size(), 2u);

  ASSERT_FALSE(CreateJob(QueuedJob("urgent", 1, 2, "production")).is_null());
  // The victim's pods go, its run is counted, and the quota it released lets the preemptor run.
  ASSERT_EQ(WaitForRunningPods("urgent", 1, 0).size(), 1u);
  const Json victim = WaitForJob("research", "preempted and queued again", [](const Json& job) {
    const Json& status = job.value("status", Json::object());
    return status.value("run", 0) == 1 && status.value("queue", Json::object()).value("evictions", 0) == 1;
  });
  ASSERT_FALSE(victim.is_null());
  EXPECT_EQ(victim["status"].value("phase", ""), "Pending") << victim["status"].dump();
  EXPECT_EQ(victim["status"]["queue"]["lastEviction"].value("reason", ""), "Preempted");
  EXPECT_TRUE(LivePods("research").empty());
  const Json released = *JobWorkload("research");
  EXPECT_FALSE(IsConditionTrue(released, "QuotaReserved")) << released["status"].dump();
  EXPECT_TRUE(IsConditionTrue(released, "Requeued")) << released["status"].dump();
  EXPECT_FALSE(released["status"].contains("admission"));

  bool said = false;
  for (const Json& event : api().List(CorePath(ns(), "events"))) {
    if (event["involvedObject"].value("name", "") == "research" && event.value("reason", "") == "Preempted") {
      said = true;
      EXPECT_NE(event.value("message", "").find("urgent"), std::string::npos) << event.value("message", "");
    }
  }
  EXPECT_TRUE(said) << "no Preempted event on the victim";

  // The preemptor ends; the victim is admitted again, runs a new run and succeeds.
  SucceedPods("urgent");
  ASSERT_FALSE(WaitForPhase("urgent", "Succeeded").is_null());
  const std::vector<Json> after = WaitForRunningPods("research", 2, 1);
  ASSERT_EQ(after.size(), 2u);
  for (const Json& pod : after) {
    for (const Json& old : before) EXPECT_NE(UidOf(pod), UidOf(old));
  }
  SucceedPods("research");
  const Json done = WaitForPhase("research", "Succeeded");
  ASSERT_FALSE(done.is_null());
  EXPECT_EQ(done["status"]["queue"].value("evictions", 0), 1);
}

TEST_F(KueueE2eTest, AJobWithoutTheQueueLabelRunsAsBeforeWithNoWorkload) {
  ASSERT_FALSE(CreateJob(JobBuilder("plain").Collective(2, 1).Obj()).is_null());
  const std::vector<Json> pods = WaitForRunningPods("plain", 2, 0);
  ASSERT_EQ(pods.size(), 2u);
  EXPECT_TRUE(Workloads("plain").empty());
  for (const Json& pod : pods) {
    EXPECT_EQ(LabelOf(pod, "kueue.x-k8s.io/podset"), "");
    EXPECT_FALSE(pod["spec"].value("nodeSelector", Json::object()).contains(kModelLabel));
  }
  EXPECT_FALSE(JobStatus("plain").contains("queue"));
}

TEST_F(KueueE2eTest, AnElasticJobRunsTheWorkersKueueAdmitted) {
  // 4 GPUs, one a worker: room for 3 workers beside a 1-GPU job; the elastic job asks for 4, min 2.
  ASSERT_FALSE(CreateJob(QueuedJob("holder", 1, 1)).is_null());
  ASSERT_EQ(WaitForRunningPods("holder", 1, 0).size(), 1u);
  Json elastic = JobBuilder("elastic").Collective(4, 1).Elastic(2, 4).Label(kQueueLabel, "gpu").Obj();
  ASSERT_FALSE(CreateJob(elastic).is_null());
  const Json job = WaitForJob("elastic", "admitted", [](const Json& j) {
    return j.value("status", Json::object()).value("queue", Json::object()).value("state", "") == "Admitted";
  });
  ASSERT_FALSE(job.is_null());
  EXPECT_EQ(job["status"]["queue"]["admittedCounts"].value("worker", 0), 3) << job["status"]["queue"].dump();
  const Json workload = *JobWorkload("elastic");
  EXPECT_EQ(workload["spec"]["podSets"][0].value("minCount", 0), 2) << workload["spec"].dump();
  Eventually("3 worker pods", [&](std::string& state) {
    state = std::to_string(LivePods("elastic").size());
    return LivePods("elastic").size() == 3;
  });
}

// Topology-aware scheduling (docs/operator.md, Kueue: Topology): a flavor over a Topology of racks and
// hosts, four workers asking for one rack, two fitting a node (7 CPUs each, 16 a node). The
// operator makes them gated; Kueue's ungater (the stand-in's) places rank r in the r-th slot of
// the rack's nodes, so that NCCL's ring neighbours share a node.
TEST_F(KueueE2eTest, TopologyAwareWorkersAreUngatedOntoTheirRacksNodesInRankOrder) {
  constexpr const char* kRackLabel = "example.com/rack";
  for (int i = 0; i < 4; ++i) {
    const std::string node = "node-" + std::to_string(i);
    const auto answer = api().Request("POST", "/fake/v1/nodes/" + node, {{"labels", {{kRackLabel, i < 2 ? "r1" : "r2"}}}});
    ASSERT_EQ(answer.status, 200) << answer.raw;
  }
  const Json topology = {{"metadata", {{"name", "racks"}}},
                         {"spec", {{"levels", {{{"nodeLabel", kRackLabel}}, {{"nodeLabel", "kubernetes.io/hostname"}}}}}}};
  const Json flavor = {{"metadata", {{"name", "tas"}}}, {"spec", {{"topologyName", "racks"}}}};
  for (const auto& [plural, object] : {std::pair{"topologies", topology}, std::pair{"resourceflavors", flavor}}) {
    const auto answer = api().Create(KueuePath("", plural), object);
    ASSERT_EQ(answer.status, 201) << answer.raw;
  }
  CreateClusterQueue("tas-pool", {"cpu", "memory"}, {{"tas", {{"cpu", "64"}, {"memory", "256Gi"}}}});
  CreateLocalQueue("tas", "tas-pool");

  JobBuilder job("ranked");
  job.Collective(4)
      .Label(kQueueLabel, "tas")
      .Set("/spec/worker/template/metadata/annotations", {{"kueue.x-k8s.io/podset-required-topology", kRackLabel}})
      .Set("/spec/worker/template/spec/containers/0/resources", {{"requests", {{"cpu", "7"}}}});
  ASSERT_FALSE(CreateJob(job.Obj()).is_null());
  const Json workload = WaitForWorkload("ranked", "admitted", [](const Json& w) { return IsConditionTrue(w, "Admitted"); });
  ASSERT_FALSE(workload.is_null());
  EXPECT_EQ(workload["spec"]["podSets"][0]["topologyRequest"],
            (Json{{"required", kRackLabel}, {"podIndexLabel", "fleet.paddlepaddle.org/index"}}));

  const std::vector<Json> pods = WaitForRunningPods("ranked", 4, 0);
  ASSERT_EQ(pods.size(), 4u);
  for (const Json& pod : pods) {
    const int rank = std::stoi(pod["metadata"]["labels"].value("fleet.paddlepaddle.org/index", "-1"));
    const std::string node = rank < 2 ? "node-0" : "node-1";   // rack r1's nodes, two ranks each, in order
    EXPECT_EQ(pod["spec"].value("nodeName", ""), node) << NameOf(pod);
    EXPECT_EQ(pod["spec"]["nodeSelector"].value("kubernetes.io/hostname", ""), node) << "set by Kueue's ungater";
    EXPECT_FALSE(pod["spec"].contains("schedulingGates")) << pod["spec"].dump();
  }
  EXPECT_FALSE(WaitForPhase("ranked", "Running").is_null());
}

}  // namespace
}  // namespace fleet::op::e2e
