// In-place restarts (spec.runPolicy.restartStrategy: InPlace; docs/design/fast-failures.md §5):
// the pods restart their trainer containers themselves (the kubelet, pod restartPolicy OnFailure),
// the sidecar's liveness route kills the trainers of a superseded run, and the operator relabels
// the pods into the next run behind the endpoints ConfigMap's barrier, lifted once every trainer is
// back at its gate; a pod gone, failed or moved, or a trainer that never comes back: the pods are
// recreated.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "builders.h"
#include "fleet/api/in_place.h"
#include "fleet/base/time.h"
#include "fleet/operator/planner.h"
#include "world.h"

namespace fleet::op::testing {
namespace {

using api::TrainerState;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

JobBuilder InPlaceBuilder(const std::string& policy = "OnFailure") {
  JobBuilder job("wd");
  job.Ps(1, 4).RestartPolicy("worker", policy).RestartPolicy("server", policy).Set("/spec/runPolicy/restartStrategy", "InPlace");
  return job;
}

Json InPlaceJob(const std::string& policy = "OnFailure") { return InPlaceBuilder(policy).Obj(); }

std::optional<std::string> EnvOf(const Json& container, const std::string& name) {
  for (const Json& e : container.value("env", Json::array())) {
    if (e.value("name", "") == name) return e.value("value", "");
  }
  return std::nullopt;
}

int EventsNamed(const World& world, const std::string& reason) {
  int n = 0;
  for (const PlannedEvent& e : world.events) n += e.reason == reason;
  return n;
}

std::string RunLabel(const World& world, const std::string& pod) {
  return world.Pod(pod)["metadata"]["labels"].value(kRunLabel, "");
}

// Every pod's trainer (the sidecar's report) in `state` for `run`.
void AllTrainers(World& world, TrainerState state, int run) {
  for (const std::string& name : world.LivePodNames()) world.Edit(name, [&](PodBuilder& p) { p.Trainer(state, run); });
}

// A running in-place job whose trainers run in its first run; wd-worker-2's trainer then dies with
// `code` and the kubelet restarts it (its new instance waits at the gate for the next run).
World FailedTrainer(int code, const std::string& policy = "OnFailure") {
  World world = RunningWorld(InPlaceJob(policy));
  const int run = world.Status()["run"].get<int>();
  AllTrainers(world, TrainerState::kRunning, run);
  world.Step();
  world.Edit("wd-worker-2", [&](PodBuilder& p) { p.RestartedAfter(code).Trainer(TrainerState::kAtGate, run + 1); });
  return world;
}

TEST(InPlacePodTest, PodsRestartTheirTrainersThemselvesBehindTheSidecarsGate) {
  World world = RunningWorld(InPlaceJob());
  const Json& pod = world.Pod("wd-worker-0");
  EXPECT_EQ(pod["spec"]["restartPolicy"], "OnFailure");
  const Json& main = pod["spec"]["containers"][0];
  const Json& probe = main["livenessProbe"];
  EXPECT_EQ(probe["httpGet"]["path"], "/trainer-live");
  EXPECT_EQ(probe["httpGet"]["port"], 9102);
  EXPECT_EQ(probe["periodSeconds"], 1);
  EXPECT_EQ(probe["timeoutSeconds"], 5) << "a busy node's slow answer must not kill a trainer";
  EXPECT_EQ(EnvOf(main, "FLEET_GATE_URL"), "http://127.0.0.1:9102/gate");
  // The hook that holds the gate is the env loader's module, on PYTHONPATH from its ConfigMap.
  EXPECT_EQ(EnvOf(main, "PYTHONPATH"), kEnvLoaderMountPath);
  ASSERT_TRUE(world.observed.env_loader) << "the env loader's ConfigMap is made for in-place jobs too";
  const Json& sidecar = pod["spec"]["initContainers"][0];
  EXPECT_THAT(sidecar["args"].dump(), HasSubstr("\"--in-place\""));
}

TEST(InPlacePodTest, AContainersOwnLivenessProbeIsKept) {
  World world = RunningWorld(
      InPlaceBuilder()
          .Set("/spec/worker/template/spec/containers/0/livenessProbe", {{"exec", {{"command", {"true"}}}}})
          .Obj());
  EXPECT_EQ(world.Pod("wd-worker-0")["spec"]["containers"][0]["livenessProbe"], Json({{"exec", {{"command", {"true"}}}}}));
}

TEST(InPlacePodTest, WithoutANativeSidecarPodsAreRecreatedAsBefore) {
  OperatorSettings settings;
  settings.native_sidecar = false;   // the sidecar exits once the gate opens: nobody to hold the next one
  World world = RunningWorld(InPlaceJob(), settings);
  const Json& pod = world.Pod("wd-worker-0");
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
  EXPECT_FALSE(pod["spec"]["containers"][0].contains("livenessProbe"));
  EXPECT_EQ(EnvOf(pod["spec"]["containers"][0], "FLEET_GATE_URL"), std::nullopt);
}

TEST(InPlaceSpecTest, ReadsChecksAndWritesBack) {
  auto job = api::ParseFleetJob(InPlaceJob());
  ASSERT_TRUE(job) << job.error();
  EXPECT_EQ(job->spec.run_policy.restart_strategy, api::RestartStrategy::kInPlace);
  EXPECT_EQ(job->spec.ToJson()["runPolicy"]["restartStrategy"], "InPlace");
  auto bad = api::ParseFleetJob(InPlaceBuilder().Set("/spec/runPolicy/restartStrategy", "Sometimes").Obj());
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error(), HasSubstr("spec.runPolicy.restartStrategy"));
}

TEST(InPlaceRestartTest, AFailedTrainerRestartsTheJobInsideItsPods) {
  World world = FailedTrainer(137);
  const std::vector<std::string> pods = world.LivePodNames();
  const int run = world.Status()["run"].get<int>();
  const ReconcilePlan& plan = world.Step();

  EXPECT_THAT(ActionNames(plan, Verb::kDelete, ObjectKind::kPod), IsEmpty()) << Describe(plan);
  EXPECT_THAT(ActionNames(plan, Verb::kCreate, ObjectKind::kPod), IsEmpty());
  EXPECT_THAT(ActionNames(plan, Verb::kPatch, ObjectKind::kPod), IsEmpty()) << "relabelled once the gates open";
  const Json status = plan.status.ToJson();
  EXPECT_EQ(status["run"], run + 1);
  EXPECT_EQ(status["restartCount"], 1);
  EXPECT_EQ(status["inPlaceRestarts"], 1);
  EXPECT_EQ(status["inPlaceRestart"]["run"], run + 1);
  EXPECT_EQ(status["phase"], "Restarting");
  EXPECT_THAT(status["message"].get<std::string>(), HasSubstr("pod wd-worker-2 failed with exit code 137"));
  EXPECT_EQ(status["inPlaceRestart"]["gatesOpen"], false);
  EXPECT_EQ(EventsNamed(world, "RestartingInPlace"), 1);

  // The next run's lists are the same lists, behind the barrier: no gate opens yet.
  const Json lists_before = world.observed.endpoints->at("data");
  world.Step();
  const Json& cm = *world.observed.endpoints;
  EXPECT_EQ(cm["metadata"]["annotations"][kRunAnnotation], std::to_string(run + 1));
  EXPECT_EQ(cm["metadata"]["annotations"][api::kBarrierAnnotation], std::to_string(run + 1));
  EXPECT_EQ(cm["data"], lists_before);
  EXPECT_THAT(world.Status()["message"].get<std::string>(), HasSubstr("1 of 5 trainers wait at the gate"));

  // Every trainer back at its gate: the barrier goes, and the gates open together.
  AllTrainers(world, TrainerState::kAtGate, run + 1);
  const ReconcilePlan& lift = world.Step();
  EXPECT_FALSE(world.observed.endpoints->at("metadata")["annotations"].contains(api::kBarrierAnnotation));
  EXPECT_EQ(EventsNamed(world, "RestartedInPlace"), 1);
  // Then the pods take the run's label, and the restart is done.
  EXPECT_THAT(ActionNames(lift, Verb::kPatch, ObjectKind::kPod), ElementsAreArray(pods)) << Describe(lift);
  EXPECT_EQ(world.Status()["inPlaceRestart"]["gatesOpen"], true);
  for (const std::string& name : pods) EXPECT_EQ(RunLabel(world, name), std::to_string(run + 1));
  world.Step();
  EXPECT_FALSE(world.Status().contains("inPlaceRestart"));
  AllTrainers(world, TrainerState::kRunning, run + 1);
  world.Settle();
  EXPECT_EQ(world.Status()["phase"], "Running") << Describe(world.plan);
  EXPECT_EQ(world.LivePodNames(), pods);
  EXPECT_EQ(world.Status()["restartCount"], 1) << "the killed trainers' ends are not failures of the new run";
}

TEST(InPlaceRestartTest, ATrainerThatFinishedIsNoFailure) {
  World world = FailedTrainer(0);
  world.Edit("wd-worker-2", [&](PodBuilder& p) { p.Trainer(TrainerState::kExited, world.Status()["run"].get<int>()); });
  const ReconcilePlan& plan = world.Step();
  EXPECT_FALSE(plan.status.ToJson().contains("inPlaceRestarts")) << Describe(plan);
  EXPECT_EQ(plan.status.ToJson()["restartCount"], 0);
}

TEST(InPlaceRestartTest, TheRolesRestartPolicyStillDecides) {
  World world = FailedTrainer(1, "Never");
  world.Advance(10);   // past the settling of a verdict that fails the job
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(plan.status.ToJson()["phase"], "Failed") << Describe(plan);
  EXPECT_THAT(plan.status.ToJson()["message"].get<std::string>(), HasSubstr("wd-worker-2 failed with exit code 1"));
}

TEST(InPlaceRestartTest, AnEvictedPodMeansNewPods) {
  World world = FailedTrainer(137);
  world.Edit("wd-worker-3", [](PodBuilder& p) { p.Evicted(); });
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(ActionNames(plan, Verb::kDelete, ObjectKind::kPod).size(), 5u) << Describe(plan);
  EXPECT_EQ(plan.status.ToJson()["restartCount"], 1);
  EXPECT_FALSE(plan.status.ToJson().contains("inPlaceRestarts"));
}

TEST(InPlaceRestartTest, ATrainerThatNeverComesBackMeansNewPodsUncounted) {
  World world = FailedTrainer(137);
  const int run = world.Status()["run"].get<int>();
  world.Step();
  world.Step();
  for (const char* name : {"wd-server-0", "wd-worker-0", "wd-worker-1", "wd-worker-2"}) {
    world.Edit(name, [&](PodBuilder& p) { p.Trainer(TrainerState::kAtGate, run + 1); });
  }
  world.Step();
  EXPECT_TRUE(world.Status().contains("inPlaceRestart")) << "wd-worker-3's trainer is not back yet";
  world.Advance(61);
  const ReconcilePlan& plan = world.Step();
  EXPECT_EQ(ActionNames(plan, Verb::kDelete, ObjectKind::kPod).size(), 5u) << Describe(plan);
  const Json status = plan.status.ToJson();
  EXPECT_EQ(status["run"], run + 2);
  EXPECT_EQ(status["restartCount"], 1) << "the same restart, done another way";
  EXPECT_THAT(status["message"].get<std::string>(), HasSubstr("1 of 5 trainers did not come back to the gate within 60s, first pod wd-worker-3"));
  EXPECT_EQ(EventsNamed(world, "InPlaceRestartFellBack"), 1);
  world.Settle();
  EXPECT_EQ(world.Status()["phase"], "Running");
}

TEST(InPlaceRestartTest, AnEndReportedBeforeTheKubeletSaysHowWaitsForIt) {
  World world = RunningWorld(InPlaceJob());
  const int run = world.Status()["run"].get<int>();
  world.Edit("wd-worker-1", [&](PodBuilder& p) { p.Trainer(TrainerState::kExited, run); });
  ReconcilePlan plan = world.Step();
  EXPECT_THAT(ActionNames(plan, Verb::kPatch, ObjectKind::kPod), IsEmpty()) << Describe(plan);
  EXPECT_EQ(plan.requeue_after, std::chrono::seconds(1));
  EXPECT_FALSE(plan.status.ToJson().contains("inPlaceRestarts"));
  world.Edit("wd-worker-1", [&](PodBuilder& p) { p.RestartedAfter(139); });
  plan = world.Step();
  EXPECT_EQ(plan.status.ToJson()["inPlaceRestarts"], 1) << Describe(plan);
  EXPECT_THAT(plan.status.ToJson()["message"].get<std::string>(), HasSubstr("wd-worker-1 failed with exit code 139"));
}

// The sidecar saw the trainer of the new run end (it finished: exit 0) before the kubelet said so:
// the container still shows it running, with the end of the instance killed in the restart before.
// That end is not this one's: the verdict waits for the kubelet's.
TEST(InPlaceRestartTest, AnEarlierInstancesEndIsNotTheEndOfThisOne) {
  World world = RunningWorld(InPlaceJob());
  const int run = world.Status()["run"].get<int>();
  world.Edit("wd-worker-1", [&](PodBuilder& p) {
    p.RestartedAfter(137).Trainer(TrainerState::kExited, run, T0() + std::chrono::seconds(30));
  });
  world.Advance(30);
  ReconcilePlan plan = world.Step();
  EXPECT_EQ(plan.status.ToJson()["restartCount"], 0) << Describe(plan);
  EXPECT_EQ(plan.requeue_after, std::chrono::seconds(1));
  world.Edit("wd-worker-1", [](PodBuilder& p) { p.ExitCode(0); });
  plan = world.Step();
  EXPECT_EQ(plan.status.ToJson()["restartCount"], 0) << Describe(plan);
  EXPECT_FALSE(plan.status.ToJson().contains("inPlaceRestarts"));
}

}  // namespace
}  // namespace fleet::op::testing
