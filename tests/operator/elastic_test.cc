// Elastic FleetJobs (spec.elastic): validation, the pods' elastic env as fleetrun reads it, a lost
// or failed worker replaced alone while the job runs, scaling within the range without a new run,
// the membership in status.elastic, and the failure below the minimum.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "builders.h"
#include "fleet/base/time.h"
#include "fleet/launcher/elastic.h"
#include "fleet/runtime/elastic_contract.h"
#include "fleet/operator/planner.h"
#include "world.h"

namespace fleet::op::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Three workers, elastic between 2 and 4, brought up to Running.
World ElasticWorld(int64_t timeout_seconds = 600, const std::string& restart_policy = "Never") {
  return RunningWorld(JobBuilder("wd").Collective(3).Elastic(2, 4, timeout_seconds).RestartPolicy("worker", restart_policy).Obj());
}

std::string RunOf(const Json& pod) { return pod["metadata"]["labels"][kRunLabel].get<std::string>(); }

Json Elastic(const World& world) { return world.Status().value("elastic", Json::object()); }

int EventsWithReason(const World& world, const std::string& reason) {
  int n = 0;
  for (const PlannedEvent& e : world.events) n += e.reason == reason;
  return n;
}

// ---- the spec ----

struct InvalidCase {
  std::string name;
  Json job;
  std::string message;
};

std::ostream& operator<<(std::ostream& out, const InvalidCase& c) { return out << c.name; }

class ElasticInvalidSpecTest : public ::testing::TestWithParam<InvalidCase> {};

const InvalidCase kInvalidCases[] = {
    {"ParameterServer", JobBuilder("wd").Ps(1, 2).Elastic(1, 2).Obj(), "spec.elastic: elastic jobs are collective"},
    {"HostNetwork", JobBuilder("wd").Collective(2).Network("HostNetwork").Elastic(1, 2).Obj(), "use network PodIP or Service"},
    {"MinAboveMax", JobBuilder("wd").Collective(2).Elastic(3, 2).Obj(), "spec.elastic.minReplicas: 3 is above maxReplicas 2"},
    {"ReplicasAboveMax", JobBuilder("wd").Collective(5).Elastic(2, 4).Obj(),
     "spec.worker.replicas: 5 is outside spec.elastic's range 2..4"},
    {"ReplicasBelowMin", JobBuilder("wd").Collective(1).Elastic(2, 4).Obj(), "outside spec.elastic's range 2..4"},
    {"NoEtcd", JobBuilder("wd").Collective(2).Elastic(1, 2).Erase("/spec/elastic/etcdEndpoint").Obj(),
     "spec.elastic.etcdEndpoint: is required"},
    {"EtcdWithoutPort", JobBuilder("wd").Collective(2).Elastic(1, 2).Set("/spec/elastic/etcdEndpoint", "etcd").Obj(),
     "spec.elastic.etcdEndpoint: must be etcd's client address as host:port"},
    {"NoMax", JobBuilder("wd").Collective(2).Elastic(1, 2).Erase("/spec/elastic/maxReplicas").Obj(),
     "spec.elastic.maxReplicas: is required"},
    {"ZeroTimeout", JobBuilder("wd").Collective(2).Elastic(1, 2, 0).Obj(), "spec.elastic.timeoutSeconds: must be between 1"},
};

TEST_P(ElasticInvalidSpecTest, FailsWithAMessageNamingTheField) {
  const auto parsed = ParseFleetJob(GetParam().job);
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.error(), HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(Elastic, ElasticInvalidSpecTest, ::testing::ValuesIn(kInvalidCases),
                         [](const ::testing::TestParamInfo<InvalidCase>& param) { return param.param.name; });

TEST(ElasticSpecTest, ReadsTheRangeEtcdAndTimeout) {
  const auto parsed = ParseFleetJob(JobBuilder("wd").Collective(3).Elastic(2, 4, 90).Obj());
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  ASSERT_TRUE(parsed->spec.elastic.has_value());
  EXPECT_EQ(parsed->spec.elastic->min_replicas, 2);
  EXPECT_EQ(parsed->spec.elastic->max_replicas, 4);
  EXPECT_EQ(parsed->spec.elastic->etcd_endpoint, kEtcdEndpoint);
  EXPECT_EQ(parsed->spec.elastic->timeout_seconds, 90);
  EXPECT_EQ(RunSignature(parsed->spec), std::string("worker=2:4,etcd=") + kEtcdEndpoint);
}

// ---- the pods ----

// Every pod's env, as the kubelet resolves it, is an elastic launch for fleetrun's own parser:
// the job's etcd, a job id of this run, np = min:max, the pod's own address and the job's port.
TEST(ElasticPodTest, EnvParsesAsFleetrunsElasticEnv) {
  World world = ElasticWorld(90);
  for (const std::string& name : world.LivePodNames()) {
    SCOPED_TRACE(name);
    const auto env = ResolveEnv(world.Pod(name), world.observed.endpoints);
    ASSERT_TRUE(env.ok()) << env.error();
    const auto settings = launcher::ElasticSettingsFrom(launcher::LaunchOptions{}, *env);
    ASSERT_TRUE(settings.ok()) << settings.error();
    ASSERT_TRUE(settings->has_value());
    const launcher::ElasticSettings& elastic = **settings;
    EXPECT_EQ(elastic.server, kEtcdEndpoint);
    EXPECT_EQ(elastic.job_id, std::string("wd-0-") + kUid);
    EXPECT_EQ(elastic.np.min, 2);
    EXPECT_EQ(elastic.np.max, 4);
    EXPECT_EQ(elastic.self.host, world.Pod(name)["status"]["podIP"].get<std::string>());
    EXPECT_EQ(elastic.self.port, 6170);
    EXPECT_EQ(elastic.timeout_seconds, 90);
    // The peers come from etcd, not from the operator's lists.
    EXPECT_EQ(env->count("PADDLE_TRAINER_ENDPOINTS"), 0u);
    EXPECT_EQ(env->count("PADDLE_TRAINERS"), 0u);
  }
}

TEST(ElasticPodTest, TheGangsMinimumIsTheElasticMinimum) {
  World world(JobBuilder("wd").Collective(3).Elastic(2, 4).Gang("SchedulerPlugins").Obj());
  const ReconcilePlan& plan = world.Reconcile();
  const Action* pod_group = FindAction(plan, Verb::kCreate, ObjectKind::kPodGroup, PodGroupName("wd"));
  ASSERT_NE(pod_group, nullptr) << Describe(plan);
  EXPECT_EQ(pod_group->object["spec"]["minMember"], 2);
}

// ---- membership and losses ----

TEST(ElasticMembershipTest, TheRunningWorkersAreTheMembers) {
  World world = ElasticWorld();
  EXPECT_EQ(Elastic(world)["members"], Json({"wd-worker-0", "wd-worker-1", "wd-worker-2"}));
  EXPECT_EQ(Elastic(world)["rendezvous"], 1);
  EXPECT_EQ(world.Status()["phase"], "Running");
  EXPECT_THAT(world.Status().value("message", ""), HasSubstr("3 of 3 workers running (elastic 2..4)"));
}

TEST(ElasticMembershipTest, ALostWorkerPodIsReplacedWithoutANewRun) {
  World world = ElasticWorld();
  world.Remove("wd-worker-1");   // its node is gone
  const ReconcilePlan& plan = world.Step();

  EXPECT_EQ(ActionNames(plan, Verb::kCreate, ObjectKind::kPod), std::vector<std::string>{"wd-worker-1"}) << Describe(plan);
  EXPECT_THAT(ActionNames(plan, Verb::kDelete, ObjectKind::kPod), IsEmpty());
  EXPECT_EQ(world.Status()["run"], 0);
  EXPECT_EQ(world.Status()["restartCount"], 0);
  EXPECT_EQ(world.Status()["phase"], "Running");   // 2 workers: the minimum
  EXPECT_EQ(Elastic(world)["members"], Json({"wd-worker-0", "wd-worker-2"}));
  EXPECT_EQ(Elastic(world)["rendezvous"], 2);
  EXPECT_EQ(RunOf(world.Pod("wd-worker-1")), "0");

  world.Settle();
  EXPECT_EQ(Elastic(world)["members"], Json({"wd-worker-0", "wd-worker-1", "wd-worker-2"}));
  EXPECT_EQ(Elastic(world)["rendezvous"], 3);
  EXPECT_EQ(world.Status()["run"], 0);
  EXPECT_EQ(EventsWithReason(world, "MembershipChanged"), 3);   // formed, lost one, got it back
  EXPECT_EQ(EventsWithReason(world, "Restarting"), 0);
}

TEST(ElasticMembershipTest, AnEvictedWorkerIsReplacedAloneAndCounted) {
  World world = ElasticWorld(600, "ExitCode");
  world.Edit("wd-worker-2", [](PodBuilder& p) { p.Evicted(); });
  const ReconcilePlan& plan = world.Step();

  EXPECT_EQ(ActionNames(plan, Verb::kDelete, ObjectKind::kPod), std::vector<std::string>{"wd-worker-2"}) << Describe(plan);
  EXPECT_EQ(world.Status()["restartCount"], 1);
  EXPECT_EQ(world.Status()["run"], 0);
  EXPECT_EQ(world.Status()["phase"], "Running");
  EXPECT_EQ(EventsWithReason(world, "ReplacingPod"), 1);

  world.Settle();
  EXPECT_EQ(world.Status()["restartCount"], 1);   // counted once, while the failed pod went
  EXPECT_EQ(Elastic(world)["members"], Json({"wd-worker-0", "wd-worker-1", "wd-worker-2"}));
  for (const std::string& name : world.LivePodNames()) EXPECT_EQ(RunOf(world.Pod(name)), "0") << name;
}

TEST(ElasticMembershipTest, AFailedWorkerUnderRestartPolicyNeverFailsTheJob) {
  World world = ElasticWorld();
  world.Edit("wd-worker-2", [](PodBuilder& p) { p.Failed(1); });
  world.Step();
  EXPECT_EQ(world.Status()["phase"], "Failed");
  EXPECT_EQ(Condition(world.Status(), "Failed").value("reason", ""), "PodFailed");
}

// ---- scaling ----

TEST(ElasticScalingTest, AReplicasEditWithinTheRangeScalesWithoutANewRun) {
  World world = ElasticWorld();
  world.EditSpec("/spec/worker/replicas", 4);
  const ReconcilePlan& out = world.Step();
  EXPECT_EQ(ActionNames(out, Verb::kCreate, ObjectKind::kPod), std::vector<std::string>{"wd-worker-3"}) << Describe(out);
  EXPECT_THAT(ActionNames(out, Verb::kDelete, ObjectKind::kPod), IsEmpty());
  EXPECT_EQ(EventsWithReason(world, "Scaling"), 1);
  EXPECT_EQ(EventsWithReason(world, "Rewiring"), 0);
  world.Settle();
  EXPECT_EQ(world.Status()["run"], 0);
  EXPECT_EQ(Elastic(world)["members"].size(), 4u);

  world.EditSpec("/spec/worker/replicas", 2);
  const ReconcilePlan& in = world.Step();
  EXPECT_EQ(ActionNames(in, Verb::kDelete, ObjectKind::kPod), (std::vector<std::string>{"wd-worker-2", "wd-worker-3"}));
  EXPECT_THAT(ActionNames(in, Verb::kCreate, ObjectKind::kPod), IsEmpty());
  world.Settle();
  EXPECT_EQ(world.Status()["run"], 0);
  EXPECT_EQ(world.Status()["phase"], "Running");
  EXPECT_EQ(Elastic(world)["members"], Json({"wd-worker-0", "wd-worker-1"}));
  EXPECT_EQ(world.LivePodNames(), (std::vector<std::string>{"wd-worker-0", "wd-worker-1"}));
}

TEST(ElasticScalingTest, ANewRangeStartsANewRun) {
  World world = ElasticWorld();
  world.EditSpec("/spec/elastic/maxReplicas", 5);
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(world.Status()["run"], 1);
  EXPECT_EQ(ActionNames(plan, Verb::kDelete, ObjectKind::kPod),
            (std::vector<std::string>{"wd-worker-0", "wd-worker-1", "wd-worker-2"}));
  EXPECT_EQ(EventsWithReason(world, "Rewiring"), 1);
  world.Settle();
  const auto env = ResolveEnv(world.Pod("wd-worker-0"), world.observed.endpoints);
  ASSERT_TRUE(env.ok()) << env.error();
  EXPECT_EQ(env->at("PADDLE_ELASTIC_NP"), "2:5");
  EXPECT_EQ(env->at("PADDLE_ELASTIC_JOB_ID"), std::string("wd-1-") + kUid);
}

// ---- below the minimum ----

TEST(ElasticMinimumTest, BelowTheMinimumPastTheTimeoutFails) {
  World world = ElasticWorld(60);
  world.Remove("wd-worker-1");
  world.Remove("wd-worker-2");   // their replacements stay Pending: no room in the cluster
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(world.Status()["phase"], "Starting") << Describe(plan);
  EXPECT_THAT(world.Status().value("message", ""), HasSubstr("1 of 3 workers running"));
  EXPECT_EQ(Condition(world.Status(), "Running").value("reason", ""), "BelowMinimum");
  EXPECT_EQ(Elastic(world)["belowMinimumSince"], FormatRfc3339(At(0)));
  ASSERT_TRUE(plan.requeue_after.has_value());
  EXPECT_EQ(*plan.requeue_after, std::chrono::seconds(61));

  world.Advance(59);
  world.Step();
  EXPECT_EQ(world.Status()["phase"], "Starting");
  world.Advance(1);
  const ReconcilePlan& failed = world.Step();
  EXPECT_EQ(world.Status()["phase"], "Failed");
  const Json condition = Condition(world.Status(), "Failed");
  EXPECT_EQ(condition.value("reason", ""), "ElasticBelowMinimum");
  EXPECT_THAT(condition.value("message", ""), HasSubstr("fewer than spec.elastic.minReplicas 2, for 60 s"));
  EXPECT_EQ(ActionNames(failed, Verb::kDelete, ObjectKind::kPod),
            (std::vector<std::string>{"wd-worker-0", "wd-worker-1", "wd-worker-2"}));
}

TEST(ElasticMinimumTest, BackAtTheMinimumInTimeTheJobRunsOn) {
  World world = ElasticWorld(60);
  world.Remove("wd-worker-1");
  world.Remove("wd-worker-2");
  world.Step();
  world.Advance(30);
  world.Settle();   // the replacements run
  EXPECT_EQ(world.Status()["phase"], "Running");
  EXPECT_FALSE(Elastic(world).contains("belowMinimumSince"));
  world.Advance(60);
  world.Step();
  EXPECT_EQ(world.Status()["phase"], "Running");
}

TEST(ElasticMinimumTest, ALauncherThatGaveUpFailsTheJobWithTheReason) {
  World world = ElasticWorld(600, "OnFailure");
  world.Edit("wd-worker-0", [](PodBuilder& p) { p.Failed(kElasticTimeoutStatus); });
  world.Step();
  EXPECT_EQ(world.Status()["phase"], "Failed");
  EXPECT_EQ(Condition(world.Status(), "Failed").value("reason", ""), "ElasticBelowMinimum");
  EXPECT_EQ(world.Status()["restartCount"], 0);
}

// ---- the end ----

TEST(ElasticEndTest, SucceedsOnceTheWorkersHaveFinished) {
  World world = ElasticWorld();
  world.Remove("wd-worker-2");
  world.Edit("wd-worker-0", [](PodBuilder& p) { p.Succeeded(); });
  const ReconcilePlan& finishing = world.Step();
  // wd-worker-1 still trains; no new worker joins a job that is ending.
  EXPECT_THAT(ActionNames(finishing, Verb::kCreate, ObjectKind::kPod), IsEmpty()) << Describe(finishing);
  EXPECT_EQ(world.Status()["phase"], "Running") << world.Status().dump();
  EXPECT_FALSE(Elastic(world).contains("belowMinimumSince"));   // finishing is not starving

  world.Edit("wd-worker-1", [](PodBuilder& p) { p.Succeeded(); });
  world.Step();
  EXPECT_EQ(world.Status()["phase"], "Succeeded");
  EXPECT_THAT(world.Status().value("message", ""), HasSubstr("all 2 workers finished successfully"));
  // No worker runs any more: no members; the rendezvous count stays as the job's history.
  EXPECT_EQ(Elastic(world)["members"], Json::array());
  EXPECT_EQ(Elastic(world)["rendezvous"], 1);
}

// A failed job's workers are gone (cleanPodPolicy Running deletes those still running): its
// status lists no members, neither in the reconcile that failed it nor in later ones.
TEST(ElasticEndTest, AFailedJobHasNoMembers) {
  World world = ElasticWorld(60);
  world.Remove("wd-worker-1");
  world.Remove("wd-worker-2");   // their replacements stay Pending
  world.Step();
  world.Advance(60);
  world.Step();
  ASSERT_EQ(world.Status()["phase"], "Failed");
  EXPECT_EQ(Elastic(world)["members"], Json::array());
  EXPECT_FALSE(Elastic(world).contains("belowMinimumSince"));
  EXPECT_EQ(Elastic(world)["rendezvous"], 1);

  world.Settle();
  EXPECT_EQ(Elastic(world)["members"], Json::array());
}

}  // namespace
}  // namespace fleet::op::testing
