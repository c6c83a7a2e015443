#include "fleet/cli/render.h"

#include <gtest/gtest.h>

namespace fleet::cli {
namespace {

constexpr int64_t kNow = 1700000000;   // 2023-11-14T22:13:20Z

TEST(FleetctlRenderTest, AgesAsKubectlWritesThem) {
  const std::vector<std::pair<int64_t, std::string>> cases = {
      {-5, "0s"},  {0, "0s"},      {59, "59s"},  {119, "119s"}, {120, "2m"},    {200, "3m20s"},
      {600, "10m"}, {10799, "179m"}, {10800, "3h"}, {18000 + 720, "5h12m"}, {28800, "8h"}, {47 * 3600, "47h"},
      {2 * 86400 + 3 * 3600, "2d3h"}, {8 * 86400, "8d"}, {400 * 86400, "400d"}, {800 * 86400, "2y"},
  };
  for (const auto& [seconds, text] : cases) EXPECT_EQ(FormatAge(seconds), text) << seconds;
}

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
                                   "gpu": {"replicas": 1, "ready": 1}},
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
  const Json doc = StatusDocument(Job("j", "Running"), pods, events, 2);
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

  const std::string text = StatusText(doc, kNow);
  EXPECT_NE(text.find("Phase:      Running\n"), std::string::npos) << text;
  EXPECT_NE(text.find("Created:    2023-11-14T22:10:00Z (3m20s ago)\n"), std::string::npos) << text;
  EXPECT_NE(text.find("ROLE     REPLICAS   ACTIVE   READY   SUCCEEDED   FAILED\n"
                      "server   2          2        2       0           0\n"
                      "worker   4          4        3       0           1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("Running   True     AllPodsRunning   60s"), std::string::npos) << text;
  EXPECT_NE(text.find("j-worker-0   Pending   Unschedulable: 0/3 nodes are available"), std::string::npos) << text;
  EXPECT_NE(text.find("Warning   Third    20s   1       m3"), std::string::npos) << text;
}

TEST(FleetctlRenderTest, StatusOfAJobTheOperatorHasNotSeen) {
  const Json doc = StatusDocument(Json::parse(R"({"metadata": {"name": "new"}, "spec": {"worker": {"replicas": 1}}})"),
                                  Json::array(), Json::array(), 10);
  const std::string text = StatusText(doc, kNow);
  EXPECT_NE(text.find("Phase:      <none> (the operator has not seen the job yet)"), std::string::npos) << text;
  EXPECT_NE(text.find("Events:\n  <none>\n"), std::string::npos) << text;
}

TEST(FleetctlRenderTest, ProgressLine) {
  EXPECT_EQ(ProgressLine(Job("j", "Starting")),
            "Starting  server 2/2 ready  worker 3/4 ready  gpu 1/1 ready  heter2 0/0 ready  restarts 1");
  EXPECT_EQ(ProgressLine(Json::parse(R"({"spec": {"server": {"replicas": 1}, "worker": {"replicas": 2}}})")),
            "<none>  server 0/1 ready  worker 0/2 ready");
  EXPECT_EQ(ProgressLine(Json::parse(R"({"spec": {"worker": {"replicas": 2}},
                                         "status": {"phase": "Failed", "message": "spec.port: bad"}})")),
            "Failed  worker 0/2 ready  (spec.port: bad)");
}

}  // namespace
}  // namespace fleet::cli
