// Specs the operator cannot run: ParseFleetJob names the field, and the planner turns the job
// Failed (condition Failed, reason InvalidSpec, the same message) without creating anything.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "builders.h"
#include "fleet/base/time.h"
#include "fleet/operator/api.h"
#include "fleet/operator/planner.h"
#include "world.h"

namespace fleet::op::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

struct InvalidSpecCase {
  std::string name;
  std::function<void(JobBuilder&)> edit;   // applied to a valid PS job (2 servers, 4 workers)
  std::string field;                       // the error starts with this field path
};

std::ostream& operator<<(std::ostream& out, const InvalidSpecCase& c) { return out << c.name; }

class InvalidSpecTest : public ::testing::TestWithParam<InvalidSpecCase> {
 protected:
  Json Job() const {
    JobBuilder job("wd");
    job.Ps(2, 4);
    GetParam().edit(job);
    return job.Obj();
  }
};

const InvalidSpecCase kInvalidSpecs[] = {
    {"MissingName", [](JobBuilder& j) { j.Erase("/metadata/name"); }, "metadata.name"},
    {"UpperCaseName", [](JobBuilder& j) { j.Set("/metadata/name", "WideDeep"); }, "metadata.name"},
    {"NameLongerThan40", [](JobBuilder& j) { j.Set("/metadata/name", std::string(41, 'a')); }, "metadata.name"},
    {"NameEndingInDash", [](JobBuilder& j) { j.Set("/metadata/name", "wd-"); }, "metadata.name"},
    {"MissingWorker", [](JobBuilder& j) { j.Erase("/spec/worker"); }, "spec.worker"},
    {"ZeroWorkers", [](JobBuilder& j) { j.Workers(0); }, "spec.worker.replicas"},
    {"WorkerWithoutReplicas", [](JobBuilder& j) { j.Erase("/spec/worker/replicas"); }, "spec.worker.replicas"},
    {"NegativeServerReplicas", [](JobBuilder& j) { j.Servers(-1); }, "spec.server.replicas"},
    {"WorkerWithoutTemplate", [](JobBuilder& j) { j.Erase("/spec/worker/template"); }, "spec.worker.template"},
    {"NoContainers",
     [](JobBuilder& j) { j.Set("/spec/worker/template/spec/containers", Json::array()); },
     "spec.worker.template.spec.containers"},
    {"ContainerWithoutImage",
     [](JobBuilder& j) { j.Erase("/spec/worker/template/spec/containers/0/image"); },
     "spec.worker.template.spec.containers[0].image"},
    {"ContainerWithEmptyImage",
     [](JobBuilder& j) { j.Set("/spec/server/template/spec/containers/0/image", ""); },
     "spec.server.template.spec.containers[0].image"},
    {"ContainerWithoutName",
     [](JobBuilder& j) { j.Erase("/spec/worker/template/spec/containers/0/name"); },
     "spec.worker.template.spec.containers[0].name"},
    {"DuplicateContainerNames",
     [](JobBuilder& j) {
       j.Set("/spec/worker/template/spec/containers/1", {{"name", "main"}, {"image", "busybox"}});
     },
     "spec.worker.template.spec.containers[1].name"},
    {"RestartPolicyInTemplate",
     [](JobBuilder& j) { j.Set("/spec/worker/template/spec/restartPolicy", "OnFailure"); },
     "spec.worker.template.spec.restartPolicy"},
    {"HostNetworkInTemplate",
     [](JobBuilder& j) { j.Set("/spec/worker/template/spec/hostNetwork", true); },
     "spec.worker.template.spec.hostNetwork"},
    {"HostNetworkInTemplateOfAServiceJob",
     [](JobBuilder& j) { j.Network("Service").Set("/spec/server/template/spec/hostNetwork", true); },
     "spec.server.template.spec.hostNetwork"},
    {"UnknownRestartPolicy", [](JobBuilder& j) { j.RestartPolicy("worker", "Always"); }, "spec.worker.restartPolicy"},
    {"ServerWithoutTemplate", [](JobBuilder& j) { j.Erase("/spec/server/template"); }, "spec.server.template"},
    {"UnknownRuntime", [](JobBuilder& j) { j.Set("/spec/runtime", "tensorflow"); }, "spec.runtime"},
    {"RuntimeFleetWithoutServers", [](JobBuilder& j) { j.Servers(0).Set("/spec/runtime", "fleet"); }, "spec.runtime"},
    {"RuntimeFleetWithHeter", [](JobBuilder& j) { j.Set("/spec/runtime", "fleet").Heter({"gpu", 2}); }, "spec.heter"},
    {"RuntimeFleetWithGloo", [](JobBuilder& j) { j.Set("/spec/runtime", "fleet").Gloo("All"); }, "spec.gloo"},
    {"PsServerContainerWithRuntimePaddle",
     [](JobBuilder& j) { j.Set("/spec/server/template/spec/containers/0/name", "fleet-ps-server"); },
     "spec.server.template.spec.containers[0].name"},
    {"PsServerContainerInAWorker",
     [](JobBuilder& j) {
       j.Set("/spec/runtime", "fleet").Set("/spec/worker/template/spec/containers/0/name", "fleet-ps-server");
     },
     "spec.worker.template.spec.containers[0].name"},
    {"RuntimeFleetServerContainerWithoutName",
     [](JobBuilder& j) { j.Set("/spec/runtime", "fleet").Erase("/spec/server/template/spec/containers/0/name"); },
     "spec.server.template.spec.containers[0].name"},
    {"HeterWithoutServer", [](JobBuilder& j) { j.Servers(0).Heter({"gpu", 2}); }, "spec.server"},
    {"HeterDeviceUnknown", [](JobBuilder& j) { j.Heter({"tpu", 2}); }, "spec.heter[0].device"},
    {"DuplicateHeterNames",
     [](JobBuilder& j) { j.Heter({"gpu", 2, "stage"}).Heter({"cpu", 2, "stage"}); },
     "spec.heter[1].name"},
    {"HeterNamedWorker", [](JobBuilder& j) { j.Heter({"gpu", 2, "worker"}); }, "spec.heter[0].name"},
    {"HeterNameTooLong", [](JobBuilder& j) { j.Heter({"gpu", 2, "averylongstagename"}); }, "spec.heter[0].name"},
    {"HeterWithoutReplicas", [](JobBuilder& j) { j.Heter({"gpu", 2}).Erase("/spec/heter/0/replicas"); },
     "spec.heter[0].replicas"},
    {"HeterNotAList", [](JobBuilder& j) { j.Set("/spec/heter", {{"device", "gpu"}}); }, "spec.heter"},
    {"CollectiveModeWithServers", [](JobBuilder& j) { j.Mode("collective"); }, "spec.mode"},
    {"PsModeWithoutServers", [](JobBuilder& j) { j.Servers(0).Mode("ps"); }, "spec.server"},
    {"PsModeWithHeter", [](JobBuilder& j) { j.Heter({"gpu", 2}).Mode("ps"); }, "spec.mode"},
    {"PsHeterModeWithoutHeter", [](JobBuilder& j) { j.Mode("ps-heter"); }, "spec.heter"},
    {"UnknownMode", [](JobBuilder& j) { j.Mode("allreduce"); }, "spec.mode"},
    {"UnknownNetwork", [](JobBuilder& j) { j.Network("Overlay"); }, "spec.network"},
    {"UnknownGloo", [](JobBuilder& j) { j.Gloo("Yes"); }, "spec.gloo"},
    {"ProcessesPerPodInPsMode", [](JobBuilder& j) { j.ProcessesPerPod(2); }, "spec.processesPerPod"},
    {"ZeroProcessesPerPod", [](JobBuilder& j) { j.ProcessesPerPod(0); }, "spec.processesPerPod"},
    {"PrivilegedPort", [](JobBuilder& j) { j.Port(80); }, "spec.port"},
    {"PortAbove65535", [](JobBuilder& j) { j.Port(70000); }, "spec.port"},
    {"PortsRunPast65535",
     [](JobBuilder& j) { j.Servers(0).ProcessesPerPod(8).Port(65530); },
     "spec.port"},
    {"QueueWithoutVolcano", [](JobBuilder& j) { j.Gang("SchedulerPlugins", "research"); }, "spec.scheduling.queue"},
    {"UnknownGangScheduler", [](JobBuilder& j) { j.Gang("Kueue"); }, "spec.scheduling.gang"},
    {"MetricsPortOverlapsPaddlePort", [](JobBuilder& j) { j.Port(9102).SidecarMetricsPort(9102); },
     "spec.sidecar.metricsPort"},
    {"MetricsPortOutOfRange", [](JobBuilder& j) { j.SidecarMetricsPort(65536); }, "spec.sidecar.metricsPort"},
    {"NegativeBackoffLimit", [](JobBuilder& j) { j.BackoffLimit(-1); }, "spec.runPolicy.backoffLimit"},
    {"BackoffLimitNotAnInteger", [](JobBuilder& j) { j.Set("/spec/runPolicy/backoffLimit", "3"); },
     "spec.runPolicy.backoffLimit"},
    {"ZeroActiveDeadline", [](JobBuilder& j) { j.ActiveDeadlineSeconds(0); }, "spec.runPolicy.activeDeadlineSeconds"},
    {"NegativeTtl", [](JobBuilder& j) { j.TtlSecondsAfterFinished(-5); }, "spec.runPolicy.ttlSecondsAfterFinished"},
    {"UnknownCleanPodPolicy", [](JobBuilder& j) { j.CleanPodPolicy("Finished"); }, "spec.runPolicy.cleanPodPolicy"},
    {"SuspendNotABoolean", [](JobBuilder& j) { j.Set("/spec/runPolicy/suspend", "yes"); }, "spec.runPolicy.suspend"},
    {"ZeroPendingTimeout", [](JobBuilder& j) { j.PendingTimeoutSeconds(0); }, "spec.runPolicy.pendingTimeoutSeconds"},
};

TEST_P(InvalidSpecTest, ParseNamesTheField) {
  auto parsed = ParseFleetJob(Job());
  ASSERT_FALSE(parsed.ok()) << "accepted an invalid spec";
  EXPECT_THAT(parsed.error(), StartsWith(GetParam().field + ":"));
}

TEST_P(InvalidSpecTest, PlannerFailsTheJobAndCreatesNothing) {
  const ReconcilePlan plan = PlanFor(Job(), Observed{}, T0(), OperatorSettings{});

  EXPECT_TRUE(plan.actions.empty()) << Describe(plan);
  EXPECT_EQ(plan.status.ToJson().value("phase", ""), "Failed");
  const Json failed = Condition(plan.status.ToJson(), "Failed");
  ASSERT_FALSE(failed.is_null()) << plan.status.ToJson().dump();
  EXPECT_EQ(failed["status"], "True");
  EXPECT_EQ(failed["reason"], "InvalidSpec");
  EXPECT_THAT(failed["message"].get<std::string>(), StartsWith(GetParam().field + ":"));
  EXPECT_FALSE(plan.requeue_after.has_value());
  ASSERT_EQ(plan.events.size(), 1u);
  EXPECT_EQ(plan.events[0].type, "Warning");
  EXPECT_THAT(plan.events[0].message, HasSubstr(GetParam().field));
}

INSTANTIATE_TEST_SUITE_P(FleetJob, InvalidSpecTest, ::testing::ValuesIn(kInvalidSpecs),
                         [](const ::testing::TestParamInfo<InvalidSpecCase>& p) { return p.param.name; });

TEST(InvalidSpecTest, ValidBaseJobIsAccepted) {
  // The table's cases each break one thing of this job; it must be valid as it is.
  auto parsed = ParseFleetJob(JobBuilder("wd").Ps(2, 4).Obj());
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  EXPECT_EQ(parsed->spec.mode, JobMode::kParameterServer);
  EXPECT_EQ(parsed->spec.TotalPods(), 6);
}

TEST(InvalidSpecTest, AFailedInvalidJobStaysFailedWithoutNewEvents) {
  const Json job = JobBuilder("wd").Ps(2, 4).Workers(0).Obj();
  const ReconcilePlan first = PlanFor(job, Observed{}, T0(), OperatorSettings{});
  Json again = job;
  again["status"] = first.status.ToJson();
  const ReconcilePlan second = PlanFor(again, Observed{}, At(60), OperatorSettings{});

  EXPECT_TRUE(second.actions.empty());
  EXPECT_TRUE(second.events.empty());
  EXPECT_EQ(second.status, first.status);
}

// hostNetwork in a template would put the pods on the node's IP at spec.port, where pods of other
// jobs on the node listen too: the message says which setting allocates host ports instead.
TEST(InvalidSpecTest, HostNetworkInATemplatePointsToSpecNetwork) {
  auto parsed = ParseFleetJob(JobBuilder("wd").Ps(1, 2).Set("/spec/worker/template/spec/hostNetwork", true).Obj());
  ASSERT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.error(), HasSubstr("spec.network: HostNetwork"));

  EXPECT_TRUE(ParseFleetJob(JobBuilder("wd").Ps(1, 2).Set("/spec/worker/template/spec/hostNetwork", false).Obj()).ok());
  EXPECT_TRUE(ParseFleetJob(JobBuilder("wd").Ps(1, 2).Network("HostNetwork")
                                .Set("/spec/worker/template/spec/hostNetwork", true).Obj()).ok())
      << "with spec.network HostNetwork the template only says what the operator sets anyway";
}

// An edit can make a running job's spec invalid (issue 14): the job ends like any failed job, so
// cleanPodPolicy (default Running) removes its running pods, and completionTime is set once.
TEST(InvalidSpecTest, AnEditThatMakesARunningJobInvalidEndsItsRunningPods) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Obj());
  world.Edit("wd-worker-0", [](PodBuilder& p) { p.Succeeded(); });
  world.Advance(10);
  world.EditSpec("/spec/worker/template/spec/containers/0/image", "");
  world.Step();

  EXPECT_EQ(world.Status().value("phase", ""), "Failed");
  EXPECT_EQ(Condition(world.Status(), "Failed").value("reason", ""), "InvalidSpec");
  EXPECT_THAT(world.Status().value("message", ""), StartsWith("spec.worker.template.spec.containers[0].image:"));
  EXPECT_EQ(world.Status().value("completionTime", ""), FormatRfc3339(At(10)));
  EXPECT_EQ(world.LivePodNames(), std::vector<std::string>{"wd-worker-0"})
      << "cleanPodPolicy Running: the running pods go, the finished one stays";

  world.Reap();
  world.Advance(60);
  const ReconcilePlan& later = world.Step();
  EXPECT_TRUE(later.actions.empty()) << Describe(later);
  EXPECT_TRUE(later.events.empty());
  EXPECT_EQ(world.Status().value("completionTime", ""), FormatRfc3339(At(10))) << "set once";
}

TEST(InvalidSpecTest, AnInvalidJobsCleanPodPolicyApplies) {
  World all = RunningWorld(JobBuilder("wd").Ps(1, 4).CleanPodPolicy("All").Obj());
  all.Edit("wd-worker-0", [](PodBuilder& p) { p.Succeeded(); });
  all.EditSpec("/spec/worker/template/spec/containers/0/image", "");
  all.Step();
  EXPECT_EQ(all.LivePodNames(), std::vector<std::string>{});

  World none = RunningWorld(JobBuilder("wd").Ps(1, 4).CleanPodPolicy("None").Obj());
  none.EditSpec("/spec/worker/template/spec/containers/0/image", "");
  none.Step();
  EXPECT_EQ(none.Status().value("phase", ""), "Failed");
  EXPECT_EQ(none.LivePodNames(), kAllPods);
}

// When runPolicy itself is what the edit broke, its defaults apply (cleanPodPolicy Running).
TEST(InvalidSpecTest, AnInvalidRunPolicyEndsTheJobWithTheDefaults) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).CleanPodPolicy("None").Obj());
  world.EditSpec("/spec/runPolicy/cleanPodPolicy", "Finished");
  world.Step();
  EXPECT_EQ(Condition(world.Status(), "Failed").value("reason", ""), "InvalidSpec");
  EXPECT_EQ(world.LivePodNames(), std::vector<std::string>{});
}

TEST(InvalidSpecTest, TtlDeletesAJobMadeInvalid) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).TtlSecondsAfterFinished(100).Obj());
  world.EditSpec("/spec/worker/template/spec/containers/0/image", "");
  world.Step();
  ASSERT_EQ(world.Status().value("phase", ""), "Failed");
  ASSERT_TRUE(world.plan.requeue_after.has_value()) << "requeued for the TTL";
  EXPECT_GE(world.plan.requeue_after->count(), 100);
  EXPECT_LE(world.plan.requeue_after->count(), 101);
  EXPECT_FALSE(world.job_deleted);

  world.Reap();
  world.Advance(100);
  world.Step();
  EXPECT_TRUE(world.job_deleted) << Describe(world.plan);
}

TEST(InvalidSpecTest, TtlDeletesAJobInvalidFromTheStart) {
  World world(JobBuilder("wd").Ps(2, 4).Workers(0).TtlSecondsAfterFinished(0).Obj());
  world.Step();
  EXPECT_EQ(world.Status().value("phase", ""), "Failed");
  EXPECT_TRUE(world.job_deleted) << Describe(world.plan);
}

// A finished job keeps its outcome when its spec is edited afterwards.
TEST(InvalidSpecTest, AnEditAfterSuccessKeepsTheJobSucceeded) {
  World world = RunningWorld(JobBuilder("wd").Ps(1, 4).Obj());
  for (int i = 0; i < 4; ++i) world.Edit("wd-worker-" + std::to_string(i), [](PodBuilder& p) { p.Succeeded(); });
  world.Step();
  ASSERT_EQ(world.Status().value("phase", ""), "Succeeded");
  world.EditSpec("/spec/worker/template/spec/containers/0/image", "");
  world.Step();
  EXPECT_EQ(world.Status().value("phase", ""), "Succeeded");
}

// Endpoint lists past a ConfigMap's 1 MiB: the job is refused before any pod exists. (Lists past
// Linux's 128 KiB for one variable travel as files: env_files_test.cc.)
TEST(InvalidSpecTest, ServiceModeEndpointListsOverTheConfigMapLimitFailTheJob) {
  const Json job = JobBuilder(std::string(40, 'j'))
                       .Namespace(std::string(63, 'n'))
                       .Collective(10000)
                       .Network("Service")
                       .Obj();
  const ReconcilePlan plan = PlanFor(job, Observed{}, T0(), OperatorSettings{});

  EXPECT_TRUE(plan.actions.empty()) << plan.actions.size() << " actions";
  EXPECT_EQ(plan.status.ToJson().value("phase", ""), "Failed");
  const Json failed = Condition(plan.status.ToJson(), "Failed");
  ASSERT_FALSE(failed.is_null());
  EXPECT_EQ(failed["reason"], "InvalidSpec");
  EXPECT_THAT(failed["message"].get<std::string>(), HasSubstr("1 MiB limit of a ConfigMap"));
}

TEST(InvalidSpecTest, ServiceModeJobJustUnderTheLimitIsCreated) {
  // The same names with 200 workers (about 36 KiB of endpoints) are fine: the limit is not a guess.
  const Json job = JobBuilder(std::string(40, 'j'))
                       .Namespace(std::string(63, 'n'))
                       .Collective(200)
                       .Network("Service")
                       .Obj();
  const ReconcilePlan plan = PlanFor(job, Observed{}, T0(), OperatorSettings{});

  EXPECT_EQ(plan.status.ToJson().value("phase", ""), "Pending");
  EXPECT_EQ(ActionNames(plan, Verb::kCreate, ObjectKind::kPod).size(), 200u);
}

// Regression (fixed): api.cc ParseFleetJob reads metadata.name and spec.heter[i].name with nlohmann's
// value(key, default), which throws type_error.302 when the field exists with another type. The
// header promises "ParseFleetJob never throws: a malformed object is an error naming the field";
// the planner (and the controller's reconcile) get an exception instead of phase Failed.
TEST(InvalidSpecTest, NonStringHeterNameIsAnErrorNotAnException) {
  const Json job = JobBuilder("wd").Ps(2, 4).Heter({"gpu", 2}).Set("/spec/heter/0/name", 7).Obj();
  Result<FleetJob> parsed = Error{"not parsed"};
  EXPECT_NO_THROW(parsed = ParseFleetJob(job));
  EXPECT_FALSE(parsed.ok());
  EXPECT_THAT(parsed.error(), StartsWith("spec.heter[0].name"));
}

// Regression (fixed): api.cc ParseFleetJob only checks spec.sidecar.metricsPort against the Paddle ports when
// spec.sidecar is given. With the default metrics port 9102, spec.port 9100 and processesPerPod 4
// (Paddle ports 9100..9103) the job is accepted and the sidecar and the trainers bind one port.
TEST(InvalidSpecTest, DefaultMetricsPortOverlappingPaddlePortsIsRefused) {
  const Json job = JobBuilder("wd").Collective(2).ProcessesPerPod(4).Port(9100).Obj();
  auto parsed = ParseFleetJob(job);
  ASSERT_FALSE(parsed.ok()) << "Paddle ports 9100..9103 overlap the sidecar's default metrics port 9102";
  EXPECT_THAT(parsed.error(), HasSubstr("metricsPort"));
}

// Regression (fixed): api.cc ParseFleetJob does not check the gloo HTTP store's port (spec.port + processesPerPod,
// wiring.cc GlooHttpPort) against the sidecar's metrics port. PS job, gloo All, spec.port 9101:
// server 0's HTTP store (PADDLE_GLOO_HTTP_ENDPOINT ...:9102) and its sidecar (9102) collide; the
// issue lists "overlapping ports" among the specs to refuse.
TEST(InvalidSpecTest, GlooHttpPortOverlappingMetricsPortIsRefused) {
  const Json job = JobBuilder("wd").Ps(1, 2).Gloo("All").Port(9101).Obj();
  auto parsed = ParseFleetJob(job);
  EXPECT_FALSE(parsed.ok()) << "the gloo HTTP port 9102 is the sidecar's metrics port";
}

}  // namespace
}  // namespace fleet::op::testing
