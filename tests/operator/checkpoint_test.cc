// Checkpoint before stop (spec.checkpoint): the pods of a job with beforeStop share a volume with
// their sidecar, ask it from a preStop hook within a grace period that covers the wait, and are
// told where to look; the operator records the step a pod's sidecar reports in status.checkpoint
// (from a terminating pod too: suspend deletes them) and tells the next run's pods.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "builders.h"
#include "fleet/api/checkpoint.h"
#include "fleet/base/time.h"
#include "fleet/operator/planner.h"
#include "world.h"

namespace fleet::op::testing {
namespace {

using ::testing::Contains;
using ::testing::Not;

Json CheckpointSpec(int64_t timeout_seconds = 30) {
  return {{"beforeStop", true}, {"timeoutSeconds", timeout_seconds}};
}

// The value of env `name` in the pod's first container; nullopt when unset.
std::optional<std::string> EnvOf(const Json& pod, const std::string& name) {
  for (const Json& e : pod["spec"]["containers"][0].value("env", Json::array())) {
    if (e.value("name", "") == name) return e.value("value", "");
  }
  return std::nullopt;
}

bool HasVolume(const Json& pod, const std::string& name) {
  for (const Json& v : pod["spec"].value("volumes", Json::array())) {
    if (v.value("name", "") == name) return true;
  }
  return false;
}

Json MountAt(const Json& container, const std::string& path) {
  for (const Json& m : container.value("volumeMounts", Json::array())) {
    if (m.value("mountPath", "") == path) return m;
  }
  return Json();
}

// The pod with the Checkpoint condition its sidecar writes.
Json WithCheckpoint(Json pod, bool saved, const std::string& reason, const std::string& message, Time when) {
  pod["status"]["conditions"].push_back({{"type", "fleet.paddlepaddle.org/Checkpoint"},
                                         {"status", saved ? "True" : "False"},
                                         {"reason", reason},
                                         {"message", message},
                                         {"lastTransitionTime", FormatRfc3339(when)}});
  return pod;
}

void ReportCheckpoint(World& world, const std::string& pod, int64_t step, Time when) {
  world.Edit(pod, [&](PodBuilder& p) {
    p = PodBuilder(WithCheckpoint(p.Obj(), true, "Saved", api::CheckpointMessage(step, " in 2s"), when));
  });
}

int EventsNamed(const World& world, const std::string& reason) {
  int n = 0;
  for (const PlannedEvent& e : world.events) n += e.reason == reason;
  return n;
}

TEST(CheckpointSpecTest, ReadsChecksAndWritesBack) {
  auto job = api::ParseFleetJob(JobBuilder("wd").Collective(2).Set("/spec/checkpoint", CheckpointSpec(120)).Obj());
  ASSERT_TRUE(job) << job.error();
  EXPECT_TRUE(job->spec.checkpoint.before_stop);
  EXPECT_EQ(job->spec.checkpoint.timeout_seconds, 120);
  EXPECT_EQ(job->spec.ToJson()["checkpoint"], CheckpointSpec(120));
  auto defaults = api::ParseFleetJob(JobBuilder("wd").Collective(2).Obj());
  ASSERT_TRUE(defaults);
  EXPECT_FALSE(defaults->spec.checkpoint.before_stop);
  EXPECT_EQ(defaults->spec.checkpoint.timeout_seconds, 30);

  auto zero = api::ParseFleetJob(JobBuilder("wd").Collective(2).Set("/spec/checkpoint", CheckpointSpec(0)).Obj());
  ASSERT_FALSE(zero);
  EXPECT_EQ(zero.error(), "spec.checkpoint.timeoutSeconds: must be between 1 and 3600, got 0");
  auto text = api::ParseFleetJob(JobBuilder("wd").Collective(2).Set("/spec/checkpoint/beforeStop", "yes").Obj());
  ASSERT_FALSE(text);
  EXPECT_EQ(text.error(), "spec.checkpoint.beforeStop: must be true or false");
}

TEST(CheckpointPodTest, BeforeStopGivesTheVolumeTheHookTheGraceAndTheEnv) {
  World world(JobBuilder("wd").Collective(2).SidecarMetricsPort(9200).Set("/spec/checkpoint", CheckpointSpec(60)).Obj());
  world.Step();
  const Json& pod = world.Pod("wd-worker-0");
  EXPECT_TRUE(HasVolume(pod, "fleet-run"));
  EXPECT_EQ(pod["spec"]["terminationGracePeriodSeconds"], 70);   // the timeout, then 10 s for SIGTERM
  const Json& main = pod["spec"]["containers"][0];
  EXPECT_EQ(main["lifecycle"]["preStop"],
            (Json{{"httpGet", {{"path", "/checkpoint?reason=preStop"}, {"port", 9200}}}}));
  EXPECT_EQ(MountAt(main, "/run/fleet").value("name", ""), "fleet-run");
  EXPECT_EQ(EnvOf(pod, "FLEET_CHECKPOINT_DIR"), "/run/fleet/checkpoint");
  EXPECT_EQ(EnvOf(pod, "FLEET_CHECKPOINT_STEP"), std::nullopt);   // nothing to resume from yet
  const Json& sidecar = pod["spec"]["initContainers"][0];
  EXPECT_THAT(sidecar["args"], Contains("--checkpoint-dir=/run/fleet/checkpoint"));
  EXPECT_THAT(sidecar["args"], Contains("--checkpoint-timeout=60s"));
  EXPECT_EQ(MountAt(sidecar, "/run/fleet").value("name", ""), "fleet-run");
}

TEST(CheckpointPodTest, WithoutBeforeStopNothingIsAdded) {
  World world(JobBuilder("wd").Collective(2).Obj());
  world.Step();
  const Json& pod = world.Pod("wd-worker-0");
  EXPECT_FALSE(HasVolume(pod, "fleet-run"));
  EXPECT_FALSE(pod["spec"].contains("terminationGracePeriodSeconds"));
  EXPECT_FALSE(pod["spec"]["containers"][0].contains("lifecycle"));
  EXPECT_EQ(EnvOf(pod, "FLEET_CHECKPOINT_DIR"), std::nullopt);
  EXPECT_THAT(pod["spec"]["initContainers"][0]["args"], Not(Contains("--checkpoint-dir=/run/fleet/checkpoint")));
}

TEST(CheckpointPodTest, TheTemplatesLongerGraceAndOwnHookAreKept) {
  const Json own_hook = {{"exec", {{"command", Json::array({"/bin/save.sh"})}}}};
  World world(JobBuilder("wd")
                  .Collective(2)
                  .Set("/spec/checkpoint", CheckpointSpec(30))
                  .Set("/spec/worker/template/spec/terminationGracePeriodSeconds", 300)
                  .Set("/spec/worker/template/spec/containers/0/lifecycle", {{"preStop", own_hook}})
                  .Obj());
  world.Step();
  const Json& pod = world.Pod("wd-worker-0");
  EXPECT_EQ(pod["spec"]["terminationGracePeriodSeconds"], 300);
  EXPECT_EQ(pod["spec"]["containers"][0]["lifecycle"]["preStop"], own_hook);
}

TEST(CheckpointPodTest, WithoutANativeSidecarNobodyWouldAnswerTheHook) {
  OperatorSettings settings;
  settings.native_sidecar = false;   // the sidecar exits once the gate opens
  World world(JobBuilder("wd").Collective(2).Set("/spec/checkpoint", CheckpointSpec()).Obj(), settings);
  world.Step();
  const Json& pod = world.Pod("wd-worker-0");
  EXPECT_FALSE(pod["spec"]["containers"][0].contains("lifecycle"));
  EXPECT_FALSE(HasVolume(pod, "fleet-run"));
}

TEST(CheckpointStatusTest, TheNewestSavedCheckpointIsRecordedOnceWithAnEvent) {
  World world = RunningWorld(JobBuilder("wd").Collective(2).Set("/spec/checkpoint", CheckpointSpec()).Obj());
  ReportCheckpoint(world, "wd-worker-1", 1200, At(30));
  world.Advance(31);
  world.Step();
  EXPECT_EQ(world.Status()["checkpoint"],
            (Json{{"step", 1200}, {"pod", "wd-worker-1"}, {"time", FormatRfc3339(At(30))}}));
  EXPECT_EQ(EventsNamed(world, "CheckpointSaved"), 1);
  EXPECT_THAT(world.plan.events.back().message, ::testing::HasSubstr("wd-worker-1"));
  EXPECT_THAT(world.plan.events.back().message, ::testing::HasSubstr("1200"));

  // Seen again: nothing new. An older checkpoint, a timed-out one and a message without a step
  // do not replace it.
  world.Edit("wd-worker-0", [](PodBuilder& p) {
    Json pod = WithCheckpoint(p.Obj(), true, "Saved", api::CheckpointMessage(1100, ""), At(20));
    pod = WithCheckpoint(pod, false, "TimedOut", "the trainer wrote no /run/fleet/checkpoint/done within 30s", At(40));
    p = PodBuilder(pod);
  });
  world.Step();
  world.Step();
  EXPECT_EQ(world.Status()["checkpoint"]["step"], 1200);
  EXPECT_EQ(EventsNamed(world, "CheckpointSaved"), 1);

  ReportCheckpoint(world, "wd-worker-0", 1300, At(50));
  world.Step();
  EXPECT_EQ(world.Status()["checkpoint"]["step"], 1300);
  EXPECT_EQ(world.Status()["checkpoint"]["pod"], "wd-worker-0");
  EXPECT_EQ(EventsNamed(world, "CheckpointSaved"), 2);
}

TEST(CheckpointStatusTest, EveryRankAnsweringWithTheSameStepIsOneEvent) {
  World world = RunningWorld(JobBuilder("wd").Collective(2).Set("/spec/checkpoint", CheckpointSpec()).Obj());
  ReportCheckpoint(world, "wd-worker-0", 700, At(30));
  world.Step();
  ReportCheckpoint(world, "wd-worker-1", 700, At(31));
  world.Step();
  EXPECT_EQ(world.Status()["checkpoint"],
            (Json{{"step", 700}, {"pod", "wd-worker-1"}, {"time", FormatRfc3339(At(31))}}));
  EXPECT_EQ(EventsNamed(world, "CheckpointSaved"), 1);
}

TEST(CheckpointStatusTest, AMalformedMessageIsNoCheckpoint) {
  World world = RunningWorld(JobBuilder("wd").Collective(2).Obj());
  world.Edit("wd-worker-0", [](PodBuilder& p) {
    p = PodBuilder(WithCheckpoint(p.Obj(), true, "Saved", "step twelve saved", At(10)));
  });
  world.Step();
  EXPECT_FALSE(world.Status().contains("checkpoint"));
}

// Suspend (the Kueue eviction path too) deletes the pods: the kubelet runs their preStop hooks,
// the sidecar's condition lands on the terminating pod, and the resumed run starts from its step.
TEST(CheckpointStatusTest, ASuspendedJobsCheckpointIsWhereTheResumedRunStarts) {
  World world = RunningWorld(JobBuilder("wd").Collective(2).Set("/spec/checkpoint", CheckpointSpec()).Obj());
  EXPECT_EQ(EnvOf(world.Pod("wd-worker-0"), "FLEET_CHECKPOINT_STEP"), std::nullopt);
  world.Advance(60);
  world.EditSpec("/spec/runPolicy/suspend", true);
  world.Step();
  ASSERT_TRUE(world.Pod("wd-worker-0").at("metadata").contains("deletionTimestamp"));
  ReportCheckpoint(world, "wd-worker-0", 4200, At(62));
  world.Step();
  EXPECT_EQ(world.Status()["phase"], "Suspended");
  EXPECT_EQ(world.Status()["checkpoint"]["step"], 4200);
  world.Reap();
  world.Step();
  EXPECT_EQ(world.Status()["checkpoint"]["step"], 4200);   // kept once the pods are gone

  world.EditSpec("/spec/runPolicy/suspend", false);
  world.Step();
  ASSERT_TRUE(world.HasPod("wd-worker-1"));
  EXPECT_EQ(EnvOf(world.Pod("wd-worker-0"), "FLEET_CHECKPOINT_STEP"), "4200");
  EXPECT_EQ(EnvOf(world.Pod("wd-worker-1"), "FLEET_CHECKPOINT_STEP"), "4200");
}

}  // namespace
}  // namespace fleet::op::testing
