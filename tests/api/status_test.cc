// FleetJobStatus: the controller's memory of a job, typed. Every field is read and written through
// a C++ member (a misspelt member does not compile, where a misspelt JSON key read a default), and
// is spelt on the wire as the CRD says.
#include "fleet/api/job_status.h"

#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "crd_schema.h"
#include "fleet/base/time.h"

namespace fleet::api::testing {
namespace {

Time At(int64_t seconds) { return Time(std::chrono::seconds(1700000000 + seconds)); }

FleetJobStatus EveryFieldSet() {
  FleetJobStatus s;
  s.phase = JobPhase::kRestarting;
  s.message = "pod wd-worker-1 failed";
  s.conditions.push_back({ConditionType::kRestarting, ConditionStatus::kTrue, "Restarting", "pod wd-worker-1 failed", At(5)});
  s.conditions.push_back({ConditionType::kRunning, ConditionStatus::kFalse, "Restarting", "", At(5)});
  s.conditions.push_back({ConditionType::kStalled, ConditionStatus::kUnknown, "NoReport", "", At(1)});
  s.observed_generation = 3;
  s.mode = "ps";
  s.network = "HostNetwork";
  s.runtime = "fleet";
  s.run = 7;
  s.restart_count = 2;
  s.ignored_failures = 4;
  s.host_port_base = 20040;
  s.start_time = At(1);
  s.completion_time = At(9);
  s.replica_statuses["server"] = {1, 1, 1, 0, 0};
  s.replica_statuses["worker"] = {4, 2, 1, 1, 1};
  s.heter_ready = 5;
  s.run_replicas = "server=1,worker=4";
  s.replaced_pods = {"uid-a", "uid-b"};
  s.elastic = ElasticStatus{{"wd-worker-0", "wd-worker-2"}, 3, At(4)};
  QueueStatus& q = s.queue.emplace();
  q.workload = "fleetjob-wd-1a2b3";
  q.local_queue = "team-a";
  q.cluster_queue = "gpu-cq";
  q.state = "Admitted";
  q.message = "Quota reserved in ClusterQueue gpu-cq";
  q.flavors["worker"] = {{"cpu", "default"}, {"nvidia.com/gpu", "a100"}};
  q.admitted_counts["worker"] = 4;
  q.evictions = 1;
  q.last_eviction = QueueStatus::Eviction{"Preempted", "Preempted to accommodate a workload", At(6)};
  s.checkpoint = CheckpointStatus{1200, "wd-worker-0", At(8)};
  return s;
}

// status.progress as an operator writes it, every member set.
const Json& EveryProgressMember() {
  static const Json progress = {
      {"updateTime", "2026-11-28T10:00:00.250Z"}, {"step", 500}, {"totalSteps", 1000}, {"percent", 50.0},
      {"etaSeconds", 250}, {"stepsPerSecond", 2.0}, {"samplesPerSecond", 512.5}, {"loss", 0.125},
      {"ranks", 4}, {"reportingRanks", 3}, {"stalledRanks", 1},
      {"roles", {{"worker", {{"ranks", 4}, {"reportingRanks", 3}, {"minStep", 400}, {"medianStep", 500},
                             {"maxStep", 510}, {"stepsPerSecond", 2.0}, {"loss", 0.125}}}}},
      {"slowest", {{"role", "worker"}, {"rank", 2}, {"pod", "wd-worker-1"}, {"step", 400}, {"lag", 100}}},
      {"rankDetails", {{{"role", "worker"}, {"rank", 2}, {"pod", "wd-worker-1"}, {"step", 400}, {"lag", 100},
                        {"idleSeconds", 700}, {"stalled", true}, {"stepsPerSecond", 0.5}, {"loss", 0.25}},
                       {{"role", "worker"}, {"rank", 0}, {"pod", "wd-worker-0"}, {"step", 500}, {"lag", 0},
                        {"idleSeconds", 0}, {"stalled", false}}}},
      {"stepText", "500/1000 (50%)"}, {"speedText", "2 step/s"}, {"etaText", "4m10s"}, {"slowestText", "worker-2 (-100)"}};
  return progress;
}

// The schema of status in crds/fleetjob.yaml.
Json StatusSchema() { return CrdSchema("status"); }

TEST(FleetJobStatusTest, EveryFieldIsWrittenUnderTheCrdsNames) {
  const std::string t1 = FormatRfc3339(At(1)), t5 = FormatRfc3339(At(5)), t9 = FormatRfc3339(At(9));
  const Json expected = {
      {"phase", "Restarting"},
      {"message", "pod wd-worker-1 failed"},
      {"conditions",
       {{{"type", "Restarting"}, {"status", "True"}, {"reason", "Restarting"}, {"message", "pod wd-worker-1 failed"},
         {"lastTransitionTime", t5}},
        {{"type", "Running"}, {"status", "False"}, {"reason", "Restarting"}, {"message", ""}, {"lastTransitionTime", t5}},
        {{"type", "Stalled"}, {"status", "Unknown"}, {"reason", "NoReport"}, {"message", ""}, {"lastTransitionTime", t1}}}},
      {"observedGeneration", 3},
      {"mode", "ps"},
      {"network", "HostNetwork"},
      {"runtime", "fleet"},
      {"run", 7},
      {"restartCount", 2},
      {"ignoredFailures", 4},
      {"hostPortBase", 20040},
      {"startTime", t1},
      {"completionTime", t9},
      {"replicaStatuses",
       {{"server", {{"replicas", 1}, {"active", 1}, {"ready", 1}, {"succeeded", 0}, {"failed", 0}}},
        {"worker", {{"replicas", 4}, {"active", 2}, {"ready", 1}, {"succeeded", 1}, {"failed", 1}}}}},
      {"heterReady", 5},
      {"runReplicas", "server=1,worker=4"},
      {"replacedPods", {"uid-a", "uid-b"}},
      {"elastic", {{"members", {"wd-worker-0", "wd-worker-2"}}, {"rendezvous", 3}, {"belowMinimumSince", FormatRfc3339(At(4))}}},
      {"queue", {{"workload", "fleetjob-wd-1a2b3"}, {"localQueue", "team-a"}, {"clusterQueue", "gpu-cq"},
                 {"state", "Admitted"}, {"message", "Quota reserved in ClusterQueue gpu-cq"},
                 {"flavors", {{"worker", {{"cpu", "default"}, {"nvidia.com/gpu", "a100"}}}}},
                 {"admittedCounts", {{"worker", 4}}}, {"evictions", 1},
                 {"lastEviction", {{"reason", "Preempted"}, {"message", "Preempted to accommodate a workload"},
                                   {"time", FormatRfc3339(At(6))}}}}},
      {"checkpoint", {{"step", 1200}, {"pod", "wd-worker-0"}, {"time", FormatRfc3339(At(8))}}}};
  EXPECT_EQ(EveryFieldSet().ToJson(), expected);
}

// Every key the status writes is declared in the CRD's schema: the reference (docs/reference.md,
// generated from it) documents it, and a reader can trust its type.
TEST(FleetJobStatusTest, EveryKeyWrittenIsInTheCrdsSchema) {
  const Json schema = StatusSchema();
  ASSERT_TRUE(schema.is_object()) << "no status schema in crds/fleetjob.yaml (FLEET_SOURCE_DIR)";
  std::vector<std::string> undeclared;
  FleetJobStatus status = EveryFieldSet();
  status.progress = Progress::FromJson(EveryProgressMember());
  Undeclared(status.ToJson(), schema, "status", undeclared);
  EXPECT_THAT(undeclared, ::testing::IsEmpty());
}

TEST(ProgressTest, ReadsBackAsWritten) {
  const Progress p = Progress::FromJson(EveryProgressMember());
  EXPECT_EQ(p.ToJson(), EveryProgressMember());
  EXPECT_EQ(p.step, 500);
  EXPECT_EQ(p.total_steps, 1000);
  ASSERT_TRUE(p.update_time.has_value());
  EXPECT_EQ(FormatRfc3339(*p.update_time, TimePrecision::kMillis), "2026-11-28T10:00:00.250Z");
  EXPECT_EQ(p.roles.at("worker").median_step, 500);
  ASSERT_TRUE(p.slowest.has_value());
  EXPECT_EQ(p.slowest->pod, "wd-worker-1");
  EXPECT_FALSE(p.slowest->idle_seconds.has_value()) << "slowest has no idle time";
  ASSERT_EQ(p.rank_details.size(), 2u);
  EXPECT_EQ(p.rank_details[0].stalled, true);
  EXPECT_FALSE(p.rank_details[1].loss.has_value());
  // And inside the job's status.
  FleetJobStatus status;
  status.progress = p;
  EXPECT_EQ(FleetJobStatus::FromJson(status.ToJson()).progress, p);
}

TEST(ProgressTest, NumbersAnApiServerWroteBackAsIntegersReadAsNumbers) {
  Json written = EveryProgressMember();
  written["stepsPerSecond"] = 2;   // Go's encoding/json writes 2.0 as 2
  const Progress p = Progress::FromJson(written);
  EXPECT_EQ(p.steps_per_second, 2.0);
  EXPECT_EQ(p.ToJson(), EveryProgressMember()) << "the same value, whatever its JSON type";
}

TEST(ProgressTest, WrongTypesReadAsUnsetAndUnknownKeysAreKept) {
  Json newer = EveryProgressMember();
  newer["step"] = "many";
  newer["roles"] = {{"worker", 7}};
  newer["rankDetails"] = {1, "x"};
  newer["tokensPerSecond"] = 1e6;   // a newer operator's
  const Progress p = Progress::FromJson(newer);
  EXPECT_FALSE(p.step.has_value()) << "unknown, not step 0";
  EXPECT_TRUE(p.roles.empty());
  EXPECT_TRUE(p.rank_details.empty());
  const Json back = p.ToJson();
  EXPECT_EQ(back["tokensPerSecond"], 1e6);
  EXPECT_EQ(back["step"], "many") << "kept as it was, as any member this version cannot read";
  for (const Json& odd : {Json(nullptr), Json(3), Json::array()}) {
    EXPECT_FALSE(Progress::FromJson(odd).step.has_value()) << odd.dump();
    EXPECT_FALSE(Progress::FromJson(odd).ToJson().contains("step")) << odd.dump();
  }
}

// A rank without a step or a lag (the CRD requires neither): unknown, not step 0 and on time.
TEST(ProgressTest, AbsentStepsReadAsUnknown) {
  Json written = EveryProgressMember();
  written.erase("step");
  written["rankDetails"][0].erase("step");
  written["rankDetails"][0].erase("lag");
  const Progress p = Progress::FromJson(written);
  EXPECT_FALSE(p.step.has_value());
  EXPECT_FALSE(p.rank_details[0].step.has_value());
  EXPECT_FALSE(p.rank_details[0].lag.has_value());
  EXPECT_EQ(p.ToJson(), written) << "and written back without them";
}

// Integers as the API server accepts them (60.0 is an integer to it), and none past int64: a
// hostile or broken server's 10000000000000000000 is not read as a negative number.
TEST(ProgressTest, IntegersAreReadWholeAndNeverWrapped) {
  Json written = EveryProgressMember();
  written["rankDetails"][0]["idleSeconds"] = 60.0;
  written["step"] = Json::parse("10000000000000000000");
  written["totalSteps"] = 1e19;
  written["etaSeconds"] = 0.5;
  written["ranks"] = Json::parse("18446744073709551615");
  const Progress p = Progress::FromJson(written);
  EXPECT_EQ(p.rank_details[0].idle_seconds, 60);
  EXPECT_FALSE(p.step.has_value());
  EXPECT_FALSE(p.total_steps.has_value());
  EXPECT_FALSE(p.eta_seconds.has_value()) << "not a whole number";
  EXPECT_EQ(p.ranks, 0) << "not -1";
  EXPECT_EQ(Progress::FromJson(Json{{"step", INT64_MAX}}).step, INT64_MAX);
  EXPECT_EQ(Progress::FromJson(Json{{"step", INT64_MIN}}).step, INT64_MIN);
  const FleetJobStatus s = FleetJobStatus::FromJson(Json::parse(R"({"run": 18446744073709551615, "restartCount": 2.0})"));
  EXPECT_EQ(s.run, 0) << "not -1";
  EXPECT_EQ(s.restart_count, 2);
}

// The check itself finds a key the schema lacks.
TEST(FleetJobStatusTest, TheSchemaCheckFindsAnUndeclaredKey) {
  Json status = EveryFieldSet().ToJson();
  status["elastic"]["membrs"] = Json::array();
  status["replicaStatus"] = Json::object();
  std::vector<std::string> undeclared;
  Undeclared(status, StatusSchema(), "status", undeclared);
  EXPECT_THAT(undeclared, ::testing::IsSupersetOf({"status.elastic.membrs", "status.replicaStatus"}));
}

TEST(FleetJobStatusTest, EveryFieldSurvivesARoundTrip) {
  const FleetJobStatus back = FleetJobStatus::FromJson(EveryFieldSet().ToJson());
  EXPECT_EQ(back.phase, JobPhase::kRestarting);
  EXPECT_EQ(back.message, "pod wd-worker-1 failed");
  ASSERT_EQ(back.conditions.size(), 3u);
  EXPECT_EQ(back.conditions[0].type, ConditionType::kRestarting);
  EXPECT_EQ(back.conditions[0].status, ConditionStatus::kTrue);
  EXPECT_EQ(back.conditions[0].reason, "Restarting");
  EXPECT_EQ(back.conditions[0].message, "pod wd-worker-1 failed");
  EXPECT_EQ(back.conditions[0].last_transition_time, At(5));
  EXPECT_EQ(back.conditions[1].status, ConditionStatus::kFalse);
  EXPECT_EQ(back.conditions[2].status, ConditionStatus::kUnknown);
  EXPECT_EQ(back.observed_generation, 3);
  EXPECT_EQ(back.mode, "ps");
  EXPECT_EQ(back.network, "HostNetwork");
  EXPECT_EQ(back.runtime, "fleet");
  EXPECT_EQ(back.run, 7);
  EXPECT_EQ(back.restart_count, 2);
  EXPECT_EQ(back.host_port_base, 20040);
  EXPECT_EQ(back.start_time, At(1));
  EXPECT_EQ(back.completion_time, At(9));
  ASSERT_EQ(back.replica_statuses.size(), 2u);
  const ReplicaStatus& workers = back.replica_statuses.at("worker");
  EXPECT_EQ(workers.replicas, 4);
  EXPECT_EQ(workers.active, 2);
  EXPECT_EQ(workers.ready, 1);
  EXPECT_EQ(workers.succeeded, 1);
  EXPECT_EQ(workers.failed, 1);
  EXPECT_EQ(back.heter_ready, 5);
  EXPECT_EQ(back.run_replicas, "server=1,worker=4");
  EXPECT_EQ(back.replaced_pods, (std::set<std::string>{"uid-a", "uid-b"}));
  ASSERT_TRUE(back.elastic.has_value());
  EXPECT_EQ(back.elastic->members, (std::vector<std::string>{"wd-worker-0", "wd-worker-2"}));
  EXPECT_EQ(back.elastic->rendezvous, 3);
  EXPECT_EQ(back.elastic->below_minimum_since, At(4));
  ASSERT_TRUE(back.queue.has_value());
  EXPECT_EQ(back.queue->workload, "fleetjob-wd-1a2b3");
  EXPECT_EQ(back.queue->local_queue, "team-a");
  EXPECT_EQ(back.queue->cluster_queue, "gpu-cq");
  EXPECT_EQ(back.queue->state, "Admitted");
  EXPECT_EQ(back.queue->flavors.at("worker").at("nvidia.com/gpu"), "a100");
  EXPECT_EQ(back.queue->admitted_counts.at("worker"), 4);
  EXPECT_EQ(back.queue->evictions, 1);
  ASSERT_TRUE(back.queue->last_eviction.has_value());
  EXPECT_EQ(back.queue->last_eviction->reason, "Preempted");
  EXPECT_EQ(back.queue->last_eviction->time, At(6));
  EXPECT_TRUE(back.unknown_fields.empty()) << back.unknown_fields.dump();
  EXPECT_EQ(back, EveryFieldSet());
}

// A job never planned: nothing but the counters, which start at zero.
TEST(FleetJobStatusTest, AnEmptyStatusReadsAsANewJob) {
  for (const Json& empty : {Json(nullptr), Json::object()}) {
    const FleetJobStatus s = FleetJobStatus::FromJson(empty);
    EXPECT_EQ(s.phase, JobPhase::kNone);
    EXPECT_EQ(s.run, 0);
    EXPECT_FALSE(s.start_time.has_value());
    EXPECT_EQ(s.ToJson(), Json({{"run", 0}, {"restartCount", 0}}));
  }
}

// A newer operator's keys and condition types are kept across a rollback to this one.
TEST(FleetJobStatusTest, WhatANewerOperatorWroteSurvivesARoundTrip) {
  const Json future_condition = {{"type", "Checkpointed"}, {"status", "True"}, {"lastTransitionTime", FormatRfc3339(At(2))},
                                 {"observedGeneration", 4}};
  Json written = EveryFieldSet().ToJson();
  written["snapshot"] = {{"step", 1200}, {"path", "/ckpt/1200"}};
  written["conditions"].push_back(future_condition);
  FleetJobStatus s = FleetJobStatus::FromJson(written);
  EXPECT_EQ(s.conditions.size(), 3u);
  s.SetCondition(ConditionType::kStalled, ConditionStatus::kFalse, "Progressing", "", At(10));
  const Json back = s.ToJson();
  EXPECT_EQ(back["snapshot"], written["snapshot"]);
  EXPECT_EQ(back["conditions"].size(), 4u);
  EXPECT_EQ(back["conditions"][3], future_condition);
}

// A member of the wrong type reads as unset (nothing throws) and is written back as it was,
// unless the operator sets the field.
TEST(FleetJobStatusTest, AnUnreadableMemberIsKeptAsItWas) {
  const Json written = {{"hostPortBase", "20000"}, {"phase", "Paused"}, {"run", "three"}, {"conditions", "none"}};
  FleetJobStatus s;
  ASSERT_NO_THROW(s = FleetJobStatus::FromJson(written));
  EXPECT_FALSE(s.host_port_base.has_value());
  EXPECT_EQ(s.phase, JobPhase::kNone);
  EXPECT_EQ(s.run, 0);
  EXPECT_TRUE(s.conditions.empty());
  Json back = s.ToJson();
  EXPECT_EQ(back["hostPortBase"], "20000");
  EXPECT_EQ(back["phase"], "Paused");
  EXPECT_EQ(back["conditions"], "none");
  EXPECT_EQ(back["run"], 0);
  s.phase = JobPhase::kPending;
  EXPECT_EQ(s.ToJson()["phase"], "Pending");
}

// As Kubernetes' meta.SetStatusCondition: the transition time moves only with the status.
TEST(SetConditionTest, KeepsLastTransitionTimeWhenTheStatusDoesNotChange) {
  FleetJobStatus s;
  s.SetCondition(ConditionType::kStalled, ConditionStatus::kTrue, "TrainingStalled", "1 pod", At(10));
  s.SetCondition(ConditionType::kStalled, ConditionStatus::kTrue, "TrainingStalled", "2 pods", At(20));
  ASSERT_EQ(s.conditions.size(), 1u);
  EXPECT_EQ(s.conditions[0].last_transition_time, At(10));
  EXPECT_EQ(s.conditions[0].message, "2 pods");
}

TEST(SetConditionTest, UpdatesLastTransitionTimeWhenTheStatusChanges) {
  FleetJobStatus s;
  s.SetCondition(ConditionType::kStalled, ConditionStatus::kTrue, "TrainingStalled", "1 pod", At(10));
  s.SetCondition(ConditionType::kStalled, ConditionStatus::kFalse, "Progressing", "", At(20));
  ASSERT_EQ(s.conditions.size(), 1u);
  EXPECT_EQ(s.conditions[0].status, ConditionStatus::kFalse);
  EXPECT_EQ(s.conditions[0].reason, "Progressing");
  EXPECT_EQ(s.conditions[0].last_transition_time, At(20));
  EXPECT_FALSE(s.IsTrue(ConditionType::kStalled));
}

TEST(SetConditionTest, ANewConditionStartsNowInWholeSeconds) {
  FleetJobStatus s;
  s.SetCondition(ConditionType::kGangPending, ConditionStatus::kTrue, "PodGroupNotAdmitted", "", At(3) + std::chrono::milliseconds(700));
  ASSERT_NE(s.Find(ConditionType::kGangPending), nullptr);
  EXPECT_EQ(s.Find(ConditionType::kGangPending)->last_transition_time, At(3));
  EXPECT_EQ(s.Find(ConditionType::kRunning), nullptr);
}

// For failures found while carrying a plan out: the first completion time is kept.
TEST(MarkFailedTest, FailsTheJobAndKeepsItsCompletionTime) {
  FleetJobStatus s;
  s.phase = JobPhase::kRunning;
  s.completion_time = At(5);
  s.MarkFailed("PodRejected", "the API server refused pod wd-worker-0", At(9));
  EXPECT_EQ(s.phase, JobPhase::kFailed);
  EXPECT_EQ(s.message, "the API server refused pod wd-worker-0");
  EXPECT_TRUE(s.IsTrue(ConditionType::kFailed));
  ASSERT_NE(s.Find(ConditionType::kRunning), nullptr);
  EXPECT_EQ(s.Find(ConditionType::kRunning)->status, ConditionStatus::kFalse);
  EXPECT_EQ(s.completion_time, At(5));
}

// Every value of a name table reads back as itself, and no two values share a name.
template <typename E, typename NameOf, typename Parse>
void ExpectNamesReadBack(const std::vector<E>& values, size_t expected, NameOf name_of, Parse parse) {
  EXPECT_EQ(values.size(), expected) << "a value without a name";
  std::set<std::string> names;
  for (E value : values) {
    EXPECT_EQ(parse(name_of(value)), value) << name_of(value);
    names.insert(name_of(value));
  }
  EXPECT_EQ(names.size(), values.size()) << "two values share a name";
}

TEST(NameTableTest, EveryPhaseNameReadsBackAsItsPhase) {
  ExpectNamesReadBack(AllPhases(), 8, PhaseName, ParsePhase);
  EXPECT_EQ(PhaseName(JobPhase::kNone), "");
  EXPECT_EQ(PhaseName(JobPhase::kSucceeded), "Succeeded");
  EXPECT_EQ(ParsePhase("Paused"), std::nullopt);
}

TEST(NameTableTest, EveryConditionTypeNameReadsBackAsItsType) {
  ExpectNamesReadBack(AllConditionTypes(), 11, ConditionTypeName, ParseConditionType);
  EXPECT_EQ(ConditionTypeName(ConditionType::kWaitingForHostPorts), "WaitingForHostPorts");
  EXPECT_EQ(ConditionTypeName(ConditionType::kAdmitted), "Admitted");
  EXPECT_EQ(ParseConditionType("Checkpointed"), std::nullopt);
}

}  // namespace
}  // namespace fleet::api::testing
