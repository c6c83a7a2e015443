#include "fleet/cli/render.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>

#include "fleet/base/time.h"

namespace fleet::cli {
namespace {

constexpr int64_t kNow = 1700000000;   // 2023-11-14T22:13:20Z

TEST(FleetctlRenderTest, ParsesTheApiServersTimes) {
  EXPECT_EQ(ParseTime("2023-11-14T22:13:20Z"), kNow);
  EXPECT_EQ(ParseTime("2023-11-14T22:13:20.123456Z"), kNow);
  EXPECT_EQ(ParseTime("2023-11-15T00:13:20+02:00"), kNow);
  EXPECT_EQ(ParseTime("2023-11-14T20:13:20-02:00"), kNow);
  EXPECT_EQ(ParseTime(""), -1);
  EXPECT_EQ(ParseTime("yesterday"), -1);
}

TEST(FleetctlRenderTest, TablesArePaddedWithoutTrailingBlanks) {
  EXPECT_EQ(FormatTable({{"NAME", "PHASE"}, {"a-long-name", "Running"}, {"b", ""}}),
            "NAME          PHASE\n"
            "a-long-name   Running\n"
            "b\n");
}

Json Job(const std::string& name, const std::string& phase) {
  return Json::parse(R"({"metadata": {"name": ")" + name + R"(", "namespace": "team-a",
                                       "creationTimestamp": "2023-11-14T22:10:00Z", "uid": "u1"},
    "spec": {"mode": "ps", "server": {"replicas": 2}, "worker": {"replicas": 4},
             "heter": [{"name": "gpu", "replicas": 1}, {"replicas": 2}]},
    "status": {"phase": ")" + phase + R"(", "mode": "ps-heter", "network": "Service", "run": 3, "restartCount": 1,
               "heterReady": 2,
               "replicaStatuses": {"server": {"replicas": 2, "active": 2, "ready": 2},
                                   "worker": {"replicas": 4, "active": 4, "ready": 3, "failed": 1},
                                   "gpu": {"replicas": 1, "ready": 1}, "heter2": {"replicas": 2, "ready": 1}},
               "conditions": [{"type": "Running", "status": "True", "reason": "AllPodsRunning",
                               "lastTransitionTime": "2023-11-14T22:12:20Z"}]}})");
}

TEST(FleetctlRenderTest, JobsTable) {
  Json collective = Json::parse(R"({"metadata": {"name": "c", "namespace": "b", "creationTimestamp": "2023-11-14T21:13:20Z"},
                                    "spec": {"worker": {"replicas": 2}}})");
  EXPECT_EQ(JobsTable(Json::array({Job("ctr", "Running"), collective}), false, kNow),
            "NAME   MODE       PHASE     SERVERS   WORKERS   HETER   RESTARTS   AGE\n"
            "ctr    ps-heter   Running   2/2       3/4       2/3     1          3m20s\n"
            "c      <none>     <none>    -         0/2       -       0          60m\n");
  EXPECT_EQ(JobsTable(Json::array({collective}), true, kNow).substr(0, 12), "NAMESPACE   ");
}

TEST(FleetctlRenderTest, RolesInPodNameOrder) {
  EXPECT_EQ(RoleNames(Job("j", "Running")), (std::vector<std::string>{"server", "worker", "gpu", "heter2"}));
  EXPECT_EQ(RoleNames(Json::parse(R"({"spec": {"worker": {}}})")), std::vector<std::string>{"worker"});
}

TEST(FleetctlRenderTest, StatusDocumentAndText) {
  const Json pods = Json::parse(R"([
    {"metadata": {"name": "j-worker-1"}, "status": {"phase": "Running"}},
    {"metadata": {"name": "j-worker-0"}, "spec": {},
     "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
                "reason": "Unschedulable", "message": "0/3 nodes are available"}]}},
    {"metadata": {"name": "j-server-0"}, "spec": {"nodeName": "n1"},
     "status": {"phase": "Pending", "initContainerStatuses": [{"name": "fleet-sidecar",
                "state": {"waiting": {"reason": "ImagePullBackOff", "message": "no such image"}}}]}},
    {"metadata": {"name": "j-server-1"}, "spec": {"nodeName": "n1"},
     "status": {"phase": "Failed", "containerStatuses": [{"name": "paddle",
                "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]}}])");
  const Json events = Json::parse(R"([
    {"type": "Normal", "reason": "Second", "message": "m2", "lastTimestamp": "2023-11-14T22:12:00Z", "count": 2},
    {"type": "Warning", "reason": "Third", "message": "m3", "lastTimestamp": "2023-11-14T22:13:00Z"},
    {"type": "Normal", "reason": "First", "message": "m1", "firstTimestamp": "2023-11-14T22:11:00Z"}])");
  const StatusDocument status = StatusDocument::Of(Job("j", "Running"), pods, events, 2);
  const Json doc = status.ToJson();
  EXPECT_EQ(StatusDocument::FromJson(doc).ToJson(), doc);   // the document reads back as written
  EXPECT_EQ(doc["phase"], "Running");
  EXPECT_EQ(doc["mode"], "ps-heter");
  EXPECT_EQ(doc["run"], 3);
  ASSERT_EQ(doc["roles"].size(), 4u);
  EXPECT_EQ(doc["roles"][1], Json::parse(R"({"role": "worker", "replicas": 4, "active": 4, "ready": 3,
                                              "succeeded": 0, "failed": 1})"));
  EXPECT_EQ(doc["podsNotRunning"], Json::parse(R"json([
    {"pod": "j-server-0", "phase": "Pending", "why": "fleet-sidecar: ImagePullBackOff: no such image"},
    {"pod": "j-server-1", "phase": "Failed", "why": "paddle: exit code 137 (OOMKilled)"},
    {"pod": "j-worker-0", "phase": "Pending", "why": "Unschedulable: 0/3 nodes are available"}])json"));
  // The two most recent events, oldest first.
  ASSERT_EQ(doc["events"].size(), 2u);
  EXPECT_EQ(doc["events"][0]["reason"], "Second");
  EXPECT_EQ(doc["events"][0]["count"], 2);
  EXPECT_EQ(doc["events"][1]["reason"], "Third");
  EXPECT_EQ(doc["events"][1]["count"], 1);

  const std::string text = StatusText(status, kNow);
  EXPECT_NE(text.find("Phase:      Running\n"), std::string::npos) << text;
  EXPECT_NE(text.find("Created:    2023-11-14T22:10:00Z (3m20s ago)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("ROLE     REPLICAS   ACTIVE   READY   SUCCEEDED   FAILED\n"
                      "server   2          2        2       0           0\n"
                      "worker   4          4        3       0           1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("Running   True     AllPodsRunning   60s"), std::string::npos) << text;
  EXPECT_NE(text.find("j-worker-0   Pending   Unschedulable: 0/3 nodes are available"), std::string::npos) << text;
  EXPECT_NE(text.find("Warning   Third    20s   1       m3"), std::string::npos) << text;
}

// An elastic job: its members against its range, the rendezvous, and, while starved below its
// minimum, how long until it fails.
TEST(FleetctlRenderTest, StatusOfAnElasticJob) {
  Json job = Json::parse(R"({"metadata": {"name": "e"}, "spec": {"mode": "collective", "worker": {"replicas": 3},
    "elastic": {"minReplicas": 2, "maxReplicas": 4, "etcdEndpoint": "etcd.infra.svc:2379", "timeoutSeconds": 600}},
    "status": {"phase": "Running", "elastic": {"members": ["e-worker-0", "e-worker-2", "e-worker-3"], "rendezvous": 3}}})");
  Json doc = StatusDocument::Of(job, Json::array(), Json::array(), 10).ToJson();
  EXPECT_EQ(StatusDocument::FromJson(doc).ToJson(), doc);
  EXPECT_EQ(doc["elastic"]["rendezvous"], 3);
  EXPECT_EQ(doc["elastic"]["members"].size(), 3u);
  std::string text = StatusText(StatusDocument::FromJson(doc), kNow);
  EXPECT_NE(text.find("Elastic:\n"
                      "  Workers:     3 of 2..4, 3 rendezvous\n"
                      "  Members:     e-worker-0, e-worker-2, e-worker-3\n"
                      "  etcd:        etcd.infra.svc:2379\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("Starved:"), std::string::npos) << text;

  job["status"]["elastic"] = Json::parse(R"({"members": ["e-worker-0"], "rendezvous": 4,
                                             "belowMinimumSince": "2023-11-14T22:12:20Z"})");
  text = StatusText(StatusDocument::Of(job, Json::array(), Json::array(), 10), kNow);
  EXPECT_NE(text.find("  Workers:     1 of 2..4, 4 rendezvous\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  Starved:     below the minimum for 60s; fails in 9m unless workers return\n"), std::string::npos)
      << text;

  job["status"]["elastic"]["belowMinimumSince"] = "2023-11-14T22:00:00Z";
  text = StatusText(StatusDocument::Of(job, Json::array(), Json::array(), 10), kNow);
  EXPECT_NE(text.find("below the minimum for 13m; past its timeout"), std::string::npos) << text;

  // A job that is not elastic has no such section; a malformed status (members and a count the CRD
  // forbids) does not break it: what cannot be read is left out.
  EXPECT_EQ(StatusText(StatusDocument::Of(Job("j", "Running"), Json::array(), Json::array(), 10), kNow).find("Elastic:"),
            std::string::npos);
  job["status"]["elastic"] = Json::parse(R"({"members": [7, "e-worker-1"], "rendezvous": "x"})");
  text = StatusText(StatusDocument::Of(job, Json::array(), Json::array(), 10), kNow);
  EXPECT_NE(text.find("  Workers:     1 of 2..4, 0 rendezvous\n  Members:     e-worker-1\n"), std::string::npos) << text;
}

// Issue 27's counts: failures a rule ignored beside the restarts, and the checkpoint saved before
// the last stop (where the next run resumes).
TEST(FleetctlRenderTest, StatusShowsIgnoredFailuresAndTheCheckpointBeforeStop) {
  Json job = Json::parse(R"({"metadata": {"name": "c"}, "spec": {"mode": "collective", "worker": {"replicas": 2}},
    "status": {"phase": "Running", "restartCount": 1, "ignoredFailures": 2,
      "checkpoint": {"step": 1200, "pod": "c-worker-0", "time": "2023-11-14T22:12:20Z"}}})");
  Json doc = StatusDocument::Of(job, Json::array(), Json::array(), 10).ToJson();
  EXPECT_EQ(StatusDocument::FromJson(doc).ToJson(), doc);
  EXPECT_EQ(doc["ignoredFailures"], 2);
  EXPECT_EQ(doc["checkpoint"]["step"], 1200);
  const std::string text = StatusText(StatusDocument::FromJson(doc), kNow);
  EXPECT_NE(text.find("Restarts:   1 (and 2 ignored by failure rules)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("Checkpoint: step 1200 saved before c-worker-0 stopped, 60s ago\n"), std::string::npos) << text;

  // Neither: no such line, and the document has neither key.
  doc = StatusDocument::Of(Job("j", "Running"), Json::array(), Json::array(), 10).ToJson();
  EXPECT_FALSE(doc.contains("ignoredFailures"));
  EXPECT_FALSE(doc.contains("checkpoint"));
  EXPECT_EQ(StatusText(StatusDocument::FromJson(doc), kNow).find("Checkpoint:"), std::string::npos);
}

// A job queued in Kueue: where it waits and why; once admitted, by which ClusterQueue with which
// flavors; and what evicted it last.
TEST(FleetctlRenderTest, StatusOfAJobQueuedInKueue) {
  Json job = Json::parse(R"({"metadata": {"name": "q"}, "spec": {"mode": "collective", "worker": {"replicas": 3}},
    "status": {"phase": "Pending", "queue": {"workload": "fleetjob-q-1a2b3", "localQueue": "gpu", "state": "Queued",
      "message": "couldn't assign flavors to pod set worker: insufficient unused quota for nvidia.com/gpu in flavor a100, 2 more needed",
      "evictions": 0}}})");
  Json doc = StatusDocument::Of(job, Json::array(), Json::array(), 10).ToJson();
  EXPECT_EQ(StatusDocument::FromJson(doc).ToJson(), doc);
  std::string text = StatusText(StatusDocument::FromJson(doc), kNow);
  EXPECT_NE(text.find("Queue:\n"
                      "  State:       Queued in LocalQueue gpu: couldn't assign flavors to pod set worker: insufficient "
                      "unused quota for nvidia.com/gpu in flavor a100, 2 more needed\n"
                      "  Workload:    fleetjob-q-1a2b3\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("Evictions:"), std::string::npos) << text;

  job["status"]["queue"] = Json::parse(R"({"workload": "fleetjob-q-1a2b3", "localQueue": "gpu", "state": "Admitted",
    "clusterQueue": "gpu-pool", "flavors": {"worker": {"cpu": "default", "nvidia.com/gpu": "a100"}},
    "admittedCounts": {"worker": 3}, "evictions": 1,
    "lastEviction": {"reason": "Preempted", "message": "preempted by FleetJob team-b/urgent", "time": "2023-11-14T22:12:20Z"}})");
  doc = StatusDocument::Of(job, Json::array(), Json::array(), 10).ToJson();
  EXPECT_EQ(StatusDocument::FromJson(doc).ToJson(), doc);
  text = StatusText(StatusDocument::FromJson(doc), kNow);
  EXPECT_NE(text.find("  State:       admitted by ClusterQueue gpu-pool (worker 3 on default+a100)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  Evictions:   1, the last 60s ago: Preempted (preempted by FleetJob team-b/urgent)\n"), std::string::npos)
      << text;

  // Control characters in Kueue's text are shown escaped, not sent to the terminal.
  job["status"]["queue"]["state"] = "Queued";
  job["status"]["queue"]["message"] = "quota\u001b[2J";
  text = StatusText(StatusDocument::Of(job, Json::array(), Json::array(), 10), kNow);
  EXPECT_EQ(text.find('\x1b'), std::string::npos) << text;
  EXPECT_EQ(StatusText(StatusDocument::Of(Job("j", "Running"), Json::array(), Json::array(), 10), kNow).find("Queue:"),
            std::string::npos);
}

TEST(FleetctlRenderTest, StatusOfAJobTheOperatorHasNotSeen) {
  const StatusDocument status = StatusDocument::Of(Json::parse(R"({"metadata": {"name": "new"}, "spec": {"worker": {"replicas": 1}}})"),
                                  Json::array(), Json::array(), 10);
  const Json doc = status.ToJson();
  const std::string text = StatusText(status, kNow);
  EXPECT_NE(text.find("Phase:      <none> (the operator has not seen the job yet)"), std::string::npos) << text;
  EXPECT_NE(text.find("Events:\n  <none>\n"), std::string::npos) << text;
}

// A phase this fleetctl cannot read (a newer operator's) is printed as written, not as <none>.
TEST(FleetctlRenderTest, APhaseFromANewerOperatorIsPrintedAsWritten) {
  const Json job = Job("j", "Draining");
  EXPECT_NE(JobsTable(Json::array({job}), false, kNow).find("ps-heter   Draining   2/2"), std::string::npos);
  EXPECT_EQ(ProgressLine(job).substr(0, 10), "Draining  ");
  const StatusDocument status = StatusDocument::Of(job, Json::array(), Json::array(), 10);
  const Json doc = status.ToJson();
  EXPECT_EQ(doc["phase"], "Draining");
  EXPECT_NE(StatusText(status, kNow).find("Phase:      Draining\n"), std::string::npos);
  EXPECT_EQ(TopText(job, kNow), "j  Draining  no progress reported yet\n");
}

TEST(FleetctlRenderTest, ProgressLine) {
  EXPECT_EQ(ProgressLine(Job("j", "Starting")),
            "Starting  server 2/2 ready  worker 3/4 ready  gpu 1/1 ready  heter2 1/2 ready  restarts 1");
  EXPECT_EQ(ProgressLine(Json::parse(R"({"spec": {"server": {"replicas": 1}, "worker": {"replicas": 2}}})")),
            "<none>  server 0/1 ready  worker 0/2 ready");
  EXPECT_EQ(ProgressLine(Json::parse(R"({"spec": {"worker": {"replicas": 2}},
                                         "status": {"phase": "Failed", "message": "spec.port: bad"}})")),
            "Failed  worker 0/2 ready  (spec.port: bad)");
}

// A job the operator has not counted yet: every column and line says 0 of what the spec asks for.
TEST(FleetctlRenderTest, ReadyCountsAgreeBetweenListAndProgress) {
  const Json job = Json::parse(R"({"metadata": {"name": "h", "creationTimestamp": "2023-11-14T22:13:00Z"},
    "spec": {"server": {"replicas": 1}, "worker": {"replicas": 2},
             "heter": [{"name": "gpu", "replicas": 1}, {"replicas": 2}]}})");
  EXPECT_EQ(JobsTable(Json::array({job}), false, kNow),
            "NAME   MODE     PHASE    SERVERS   WORKERS   HETER   RESTARTS   AGE\n"
            "h      <none>   <none>   0/1       0/2       0/3     0          20s\n");
  EXPECT_EQ(ProgressLine(job), "<none>  server 0/1 ready  worker 0/2 ready  gpu 0/1 ready  heter2 0/2 ready");
}

// ---- training progress ------------------------------------------------------------------------------

// status.progress as the operator writes it, collected `age` seconds before kNow.
Json Progress(int64_t age = 2) {
  Json p = Json::parse(R"({
    "step": 1200, "totalSteps": 5000, "percent": 24.0, "etaSeconds": 1260, "stepsPerSecond": 3.1,
    "samplesPerSecond": 812.5, "loss": 0.42, "ranks": 8, "reportingRanks": 8, "stalledRanks": 1,
    "roles": {"worker": {"ranks": 8, "reportingRanks": 8, "minStep": 1190, "medianStep": 1200, "maxStep": 1210,
                         "stepsPerSecond": 3.1, "loss": 0.42}},
    "slowest": {"role": "worker", "rank": 3, "pod": "j-worker-3", "step": 1190, "lag": 10},
    "rankDetails": [
      {"role": "worker", "rank": 5, "pod": "j-worker-5", "step": 1210, "stepsPerSecond": 3.2, "loss": 0.4,
       "lag": -10, "idleSeconds": 0, "stalled": false},
      {"role": "worker", "rank": 1, "pod": "j-worker-1", "step": 1190, "stepsPerSecond": 3.0, "loss": 0.5,
       "lag": 10, "idleSeconds": 1, "stalled": false},
      {"role": "worker", "rank": 3, "pod": "j-worker-3", "step": 1190, "stepsPerSecond": 0, "loss": 0.51,
       "lag": 10, "idleSeconds": 95, "stalled": true},
      {"role": "worker", "rank": 0, "pod": "j-worker-0", "step": 1200, "stepsPerSecond": 3.1, "loss": 0.42,
       "lag": 0, "idleSeconds": 1, "stalled": false}]})");
  p["updateTime"] = FormatRfc3339(std::chrono::system_clock::time_point(std::chrono::seconds(kNow - age)));
  return p;
}

Json WithProgress(Json job, const Json& progress) {
  job["status"]["progress"] = progress;
  return job;
}

TEST(FleetctlRenderTest, ProgressBarFillsWholeCellsOnly) {
  EXPECT_EQ(ProgressBar(0), "[....................]");
  EXPECT_EQ(ProgressBar(24), "[####................]");
  EXPECT_EQ(ProgressBar(99.9), "[###################.]");
  EXPECT_EQ(ProgressBar(100), "[####################]");
  EXPECT_EQ(ProgressBar(130, 4), "[####]");
  EXPECT_EQ(ProgressBar(-5, 4), "[....]");
}

TEST(FleetctlRenderTest, ProgressSummaryWithAKnownTotal) {
  EXPECT_EQ(ProgressSummary(Progress(), kNow),
            "[####................] 24%  step 1200/5000  3.1 step/s  ETA 21m  loss 0.42");
  Json p = Progress();
  p.erase("percent");   // from step/totalSteps; 99.98% is not done yet
  p["step"] = 4999;
  p["etaSeconds"] = 1;
  p["stepsPerSecond"] = 1234.5;
  p["loss"] = 0.000123;
  EXPECT_EQ(ProgressSummary(p, kNow), "[###################.] 99%  step 4999/5000  1234 step/s  ETA 1s  loss 0.000123");
  p["etaSeconds"] = 3 * 3600 + 1;
  EXPECT_NE(ProgressSummary(p, kNow).find("  ETA 3h  "), std::string::npos) << ProgressSummary(p, kNow);
}

TEST(FleetctlRenderTest, ProgressSummaryWithoutATotalOrFields) {
  Json p = Progress();
  for (const char* key : {"totalSteps", "percent", "etaSeconds"}) p.erase(key);
  EXPECT_EQ(ProgressSummary(p, kNow), "step 1200  3.1 step/s  loss 0.42");
  EXPECT_EQ(ProgressSummary(Json::parse(R"({"updateTime": "2023-11-14T22:13:19Z"})"), kNow), "no step reported yet");
  EXPECT_EQ(ProgressSummary(Json(), kNow), "");
  EXPECT_EQ(ProgressSummary(Json::parse(R"({"step": 7, "loss": "n/a"})"), kNow), "step 7");
}

TEST(FleetctlRenderTest, StaleProgressSaysHowOld) {
  const std::string fresh = "[####................] 24%  step 1200/5000  3.1 step/s  ETA 21m  loss 0.42";
  EXPECT_EQ(ProgressSummary(Progress(kStaleProgressSeconds), kNow), fresh);
  EXPECT_EQ(ProgressSummary(Progress(kStaleProgressSeconds + 1), kNow), fresh + "  (updated 31s ago)");
  EXPECT_EQ(ProgressSummary(Progress(300), kNow), fresh + "  (updated 5m ago)");
  const std::string text = StatusText(StatusDocument::Of(WithProgress(Job("j", "Running"), Progress(300)),
                                                     Json::array(), Json::array(), 10), kNow);
  EXPECT_NE(text.find("Updated:    2023-11-14T22:08:20Z (5m ago, stale)\n"), std::string::npos) << text;
}

TEST(FleetctlRenderTest, StatusShowsTheProgress) {
  const StatusDocument status = StatusDocument::Of(WithProgress(Job("j", "Running"), Progress()), Json::array(), Json::array(), 10);
  const Json doc = status.ToJson();
  EXPECT_EQ(doc["progress"], Progress());
  const std::string text = StatusText(status, kNow);
  EXPECT_NE(text.find("\nProgress:   [####................] 24%  step 1200/5000  3.1 step/s  ETA 21m  loss 0.42\n"
                      "Ranks:      8/8 reporting, 1 stalled, 812 samples/s\n"
                      "Slowest:    worker-3 (j-worker-3) at step 1190, 10 steps behind the median\n"
                      "Updated:    2023-11-14T22:13:18Z (2s ago)\n"
                      "ROLE     RANKS   REPORTING   MIN STEP   MEDIAN   MAX STEP   SPEED   LOSS\n"
                      "worker   8       8           1190       1200     1210       3.1     0.42\n"
                      "\nPods:\n"),
            std::string::npos)
      << text;

  const StatusDocument none = StatusDocument::Of(Job("j", "Running"), Json::array(), Json::array(), 10);
  EXPECT_TRUE(none.ToJson()["progress"].is_null());
  EXPECT_NE(StatusText(none, kNow).find("\nProgress:   no progress reported yet\n"), std::string::npos);
  // Only the step known: no bar, no ranks, no slowest.
  const std::string bare = StatusText(StatusDocument::Of(WithProgress(Job("j", "Running"), Json::parse(R"({"step": 3})")), Json::array(), Json::array(), 10),
      kNow);
  EXPECT_NE(bare.find("\nProgress:   step 3\n\nPods:"), std::string::npos) << bare;
}

// updateTime as the operator writes it, in milliseconds: shown as written.
TEST(FleetctlRenderTest, StatusShowsTheUpdateTimeAsWritten) {
  Json progress = Progress();
  progress["updateTime"] = "2023-11-14T22:13:18.250Z";
  const std::string text =
      StatusText(StatusDocument::Of(WithProgress(Job("j", "Running"), progress), Json::array(), Json::array(), 10), kNow);
  EXPECT_NE(text.find("Updated:    2023-11-14T22:13:18.250Z (2s ago)\n"), std::string::npos) << text;
}

TEST(FleetctlRenderTest, TopPutsTheStragglerOnTop) {
  EXPECT_EQ(TopText(WithProgress(Job("j", "Running"), Progress()), kNow),
            "j  Running  [####................] 24%  step 1200/5000  3.1 step/s  ETA 21m  loss 0.42  "
            "8/8 reporting, 1 stalled\n"
            "\n"
            "ROLE     RANK   POD          STEP   SPEED   LOSS   LAG   IDLE\n"
            "worker   3      j-worker-3   1190   0       0.51   -10   95s    stalled\n"
            "worker   1      j-worker-1   1190   3       0.5    -10   1s\n"
            "worker   0      j-worker-0   1200   3.1     0.42   0     1s\n"
            "worker   5      j-worker-5   1210   3.2     0.4    +10   0s\n"
            "(the 4 slowest of 8 ranks)\n");
}

TEST(FleetctlRenderTest, TopWithMissingFields) {
  EXPECT_EQ(TopText(Job("j", "Starting"), kNow), "j  Starting  no progress reported yet\n");
  const Json progress = Json::parse(R"({"step": 10, "ranks": 2, "reportingRanks": 1,
    "rankDetails": [{"role": "worker", "rank": 0, "pod": "j-worker-0", "step": 10},
                    {"role": "worker", "rank": 1, "pod": "j-worker-1"}]})");
  EXPECT_EQ(TopText(WithProgress(Job("j", "Running"), progress), kNow),
            "j  Running  step 10  1/2 reporting\n"
            "\n"
            "ROLE     RANK   POD          STEP   SPEED   LOSS   LAG   IDLE\n"
            "worker   1      j-worker-1   -      -       -      -     -\n"
            "worker   0      j-worker-0   10     -       -      -     -\n");
  EXPECT_EQ(TopText(WithProgress(Job("j", "Running"), Json::parse(R"({"ranks": 2})")), kNow),
            "j  Running  no step reported yet  0/2 reporting\n\nno rank has reported yet\n");
}

// Not a terminal: a line when the phase or ready counts change, and for progress alone at most
// every kPlainProgressSeconds.
TEST(FleetctlRenderTest, WaitProgressOnPlainOutput) {
  WaitProgress wait("j", false);
  const Json starting = Job("j", "Starting");
  EXPECT_EQ(wait.Update(starting, kNow), "j: " + ProgressLine(starting) + "\n");
  EXPECT_EQ(wait.Update(starting, kNow + 1), "");
  Json running = WithProgress(Job("j", "Running"), Progress(0));
  const std::string line = "j: " + ProgressLine(running) + "  " + ProgressSummary(running["status"]["progress"], kNow);
  EXPECT_EQ(wait.Update(running, kNow + 1), line + "\n");   // a new phase: at once
  running["status"]["progress"]["step"] = 1210;
  EXPECT_EQ(wait.Update(running, kNow + 1 + WaitProgress::kPlainProgressSeconds - 1), "");
  running["status"]["progress"]["step"] = 1220;
  const std::string later = wait.Update(running, kNow + 1 + WaitProgress::kPlainProgressSeconds);
  EXPECT_NE(later.find("step 1220/5000"), std::string::npos) << later;
  EXPECT_EQ(later.back(), '\n');
  EXPECT_EQ(wait.Finish(), "");
}

// A terminal: one line rewritten in place, a new line for a new phase.
TEST(FleetctlRenderTest, WaitProgressOnATerminal) {
  WaitProgress wait("j", true);
  const Json starting = Job("j", "Starting");
  EXPECT_EQ(wait.Update(starting, kNow), "j: " + ProgressLine(starting));
  Json running = WithProgress(Job("j", "Running"), Progress(0));
  const std::string first = wait.Update(running, kNow);
  EXPECT_EQ(first.substr(0, 4), "\nj: ");
  running["status"]["progress"]["step"] = 1210;
  const std::string second = wait.Update(running, kNow);
  EXPECT_EQ(second.substr(0, 4), "\rj: ");
  EXPECT_EQ(second.substr(second.size() - 3), "\x1b[K");
  EXPECT_NE(second.find("step 1210/5000"), std::string::npos);
  EXPECT_EQ(wait.Update(running, kNow), "");
  EXPECT_EQ(wait.Finish(), "\n");
  EXPECT_EQ(wait.Finish(), "");
}

// ---- text and numbers from outside: a job's spec, a sidecar's report ----

TEST(FleetctlRenderTest, PrintableEscapesControlCharactersAndBoundsTheText) {
  EXPECT_EQ(Printable("plain d\xc3\xa9j\xc3\xa0 vu"), "plain d\xc3\xa9j\xc3\xa0 vu");
  EXPECT_EQ(Printable("a\x1b]0;owned\x07\nb"), "a\\x1b]0;owned\\x07\\nb");
  const std::string big = Printable(std::string(900 * 1024, 'x'));
  EXPECT_EQ(big.size(), kMaxPrintedText);
  EXPECT_EQ(big.substr(big.size() - 3), "...");
}

// Every renderer prints text from the cluster through Printable: ESC, BEL and newlines in a job's
// message, a condition's (a pattern echoed by InvalidSpec, a sidecar's Stalled message), a pod's
// reason, an event's, a rank's pod and role reach the terminal escaped, and a 900 KiB message is
// printed as 1 KiB (it made 1.8 MB of output).
TEST(FleetctlRenderTest, NoRendererPrintsControlCharactersOrUnboundedText) {
  const std::string evil = "x\x1b[2J\x07\r\nforged line\x9b";
  Json job = Job("j", "Running");
  job["status"]["message"] = evil;
  job["status"]["conditions"].push_back({{"type", "Stalled"}, {"status", "True"}, {"reason", evil},
                                         {"message", std::string(900 * 1024, 'm') + evil}});
  job["status"]["progress"] = Json::parse(R"({"step": 1, "ranks": 1, "reportingRanks": 1, "rankDetails": [
      {"role": "worker", "rank": 0, "step": 1}], "roles": {}, "slowest": {"rank": 0, "step": 1}})");
  job["status"]["progress"]["rankDetails"][0]["pod"] = evil;
  job["status"]["progress"]["slowest"]["role"] = evil;
  job["status"]["progress"]["roles"][evil] = {{"ranks", 1}};
  job["metadata"]["name"] = evil;
  const Json pods = Json::array({{{"metadata", {{"name", evil}}},
                                  {"status", {{"phase", "Pending"}, {"reason", evil}, {"message", evil}}}}});
  const Json events = Json::array({{{"type", "Warning"}, {"reason", evil}, {"message", evil},
                                    {"lastTimestamp", "2023-11-14T22:13:00Z"}}});
  const StatusDocument status = StatusDocument::Of(job, pods, events, 10);
  const Json doc = status.ToJson();
  EXPECT_EQ(doc["message"], evil) << "-o json|yaml keep the text as the API has it";
  for (const std::string& out : {StatusText(status, kNow), TopText(job, kNow), JobsTable(Json::array({job}), true, kNow),
                                 ProgressLine(job), ProgressSummary(job["status"]["progress"], kNow)}) {
    for (char c : out) {
      const auto byte = static_cast<unsigned char>(c);
      EXPECT_TRUE(c == '\n' || (byte >= 0x20 && byte != 0x7f && byte < 0x80)) << "byte " << int{byte} << " in\n" << out;
    }
    EXPECT_EQ(out.find("\nforged line"), std::string::npos) << out;
    EXPECT_LT(out.size(), 16u * 1024) << "one 900 KiB message printed whole";
  }
}

// Steps and lags at int64's ends print whole (INT64_MIN's lag has no int64 negation), and an
// integer past int64, which the CRD forbids and a broken server may send, reads as unknown: not as
// a wrapped negative number (a status step of 1e19 was printed as one).
TEST(FleetctlRenderTest, NumbersAtAndPastTheEndsOfAnInt64) {
  const Json progress = Json::parse(R"({"step": 9223372036854775807, "totalSteps": 9223372036854775807,
      "percent": 50, "etaSeconds": 9223372036854775807, "stepsPerSecond": 1e300, "ranks": 1, "reportingRanks": 1,
      "slowest": {"role": "worker", "rank": 1, "step": -9223372036854775808, "lag": 9223372036854775807},
      "rankDetails": [{"role": "worker", "rank": 0, "step": 10000000000000000000, "lag": -9223372036854775808}]})");
  const std::string summary = ProgressSummary(progress, kNow);
  EXPECT_NE(summary.find("step 9223372036854775807/9223372036854775807"), std::string::npos) << summary;
  const std::string top = TopText(WithProgress(Job("j", "Running"), progress), kNow);
  EXPECT_NE(top.find("\nworker   0      -     -      -       -      +9223372036854775808   -\n"), std::string::npos) << top;
  const std::string status = StatusText(StatusDocument::Of(WithProgress(Job("j", "Running"), progress), Json::array(),
                                                       Json::array(), 10), kNow);
  EXPECT_NE(status.find("at step -9223372036854775808, 9223372036854775807 steps behind"), std::string::npos) << status;
}

// top shows the kTopRows slowest ranks whatever the status holds (50,000 rows were printed).
TEST(FleetctlRenderTest, TopShowsAtMostItsRows) {
  Json progress = Json::parse(R"({"step": 5, "ranks": 4, "reportingRanks": 4, "rankDetails": []})");
  for (int r = 0; r < 50000; ++r) {
    progress["rankDetails"].push_back({{"role", "worker"}, {"rank", r}, {"pod", "pod"}, {"step", 100000 - r}});
  }
  const std::string top = TopText(WithProgress(Job("j", "Running"), progress), kNow);
  EXPECT_EQ(std::count(top.begin(), top.end(), '\n'), static_cast<std::ptrdiff_t>(3 + kTopRows + 1)) << top;
  EXPECT_NE(top.find("\nworker   49999   pod   50001"), std::string::npos) << "the slowest first:\n" << top;
  EXPECT_NE(top.find("(the 20 slowest of 50000 ranks)\n"), std::string::npos) << top;
}

}  // namespace
}  // namespace fleet::cli
