// End to end: `kubectl apply -f` of every example in examples/k8s/ runs, and the operator's
// /metrics, /healthz and /readyz endpoints.
#include <dirent.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "builders.h"
#include "fleet/launcher/elastic.h"
#include "harness.h"

namespace fleet::op::e2e {
namespace {

using testing::JobBuilder;

// examples/k8s/*.yaml, by file stem.
std::vector<std::string> ExampleStems() {
  std::vector<std::string> stems;
  const std::string dir = SourceDir() + "/examples/k8s";
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* entry = ::readdir(d)) {
      const std::string name = entry->d_name;
      if (name.size() > 5 && name.compare(name.size() - 5, 5, ".yaml") == 0) stems.push_back(name.substr(0, name.size() - 5));
    }
    ::closedir(d);
  }
  std::sort(stems.begin(), stems.end());
  return stems;
}

// A pod's env follows the contract: a process env for Paddle's role maker, the cluster env for
// pods running fleetrun with several processes, or fleetrun's elastic env.
void ExpectContractEnv(const Json& pod, const FleetJob& job, const std::optional<Json>& cm) {
  auto env = ResolveEnv(pod, cm);
  ASSERT_TRUE(env.ok()) << env.error();
  const Discovery discovery = DiscoveryOf(job.spec, *job.spec.Find(RoleKind::kWorker));
  if (discovery == Discovery::kLaunchMaster || discovery == Discovery::kEtcdLaunch) {
    // Paddle's own launcher: a master and a node count, never lists (docs/launchers.md; the
    // planner tests run these pods through models of Paddle's launchers).
    EXPECT_EQ(env->count("PADDLE_MASTER"), 1u);
    EXPECT_EQ(env->count("PADDLE_NNODES"), 1u);
    EXPECT_EQ(env->count("PADDLE_TRAINER_ENDPOINTS"), 0u);
    if (discovery == Discovery::kLaunchMaster) {
      EXPECT_EQ(env->at("PADDLE_RANK"), LabelOf(pod, kIndexLabel));
    } else {
      EXPECT_EQ(env->at("PADDLE_MASTER").rfind("etcd://", 0), 0u);
    }
  } else if (job.spec.elastic) {
    auto elastic = launcher::ElasticSettingsFrom(launcher::LaunchOptions{}, *env);
    ASSERT_TRUE(elastic.ok()) << elastic.error();
    EXPECT_TRUE(elastic->has_value());
  } else if (discovery == Discovery::kClusterEnv) {
    auto cluster = DetectClusterEnv(*env);
    ASSERT_TRUE(cluster.has_value());
    EXPECT_TRUE(cluster->ok()) << cluster->error();
    if (cluster->ok()) {
      EXPECT_EQ(cluster->value().ports_per_node, job.spec.processes_per_pod);
    }
  } else {
    const RoleMakerKind kind = job.spec.mode == JobMode::kCollective ? RoleMakerKind::kCollective
                                                                     : RoleMakerKind::kParameterServer;
    auto role = ParseProcessEnv(*env, kind);
    EXPECT_TRUE(role.ok()) << role.error();
  }
}

class ExamplesE2eTest : public OperatorE2eTest, public ::testing::WithParamInterface<std::string> {
 protected:
  // Waits for FleetJob `name` to run, playing the cluster's part where the example asks for more
  // than the default scheduler: a gang scheduler admits the PodGroup and places the pods.
  bool ReachesRunning(const std::string& name) {
    bool poked = false;
    return Eventually("FleetJob " + name + " to reach phase Running", [&](std::string& state) {
      if (auto pg = api().Get(PodGroupPath(ns(), name))) {
        const std::string phase = pg->value("status", Json::object()).value("phase", "");
        if (phase != "Inqueue" && phase != "Running") {
          api().MergePatch(PodGroupPath(ns(), name) + "/status", {{"status", {{"phase", "Inqueue"}}}});
        }
        if (!poked) {   // the operator reads PodGroups when it reconciles: have it reconcile now
          PatchJob(name, {{"metadata", {{"annotations", {{"e2e/admitted", "true"}}}}}});
          poked = true;
        }
      }
      for (const Json& pod : Pods(name)) {
        const Json& spec = pod["spec"];
        if (pod["status"].value("phase", "") == "Pending" && !spec.contains("nodeName") &&
            spec.value("schedulerName", "default-scheduler") != "default-scheduler") {
          PodAction(NameOf(pod), {{"action", "run"}});
        }
      }
      const Json status = JobStatus(name);
      state = "status " + status.dump();
      return status.value("phase", "") == "Running";
    }, Seconds(25));
  }
};

TEST(ExamplesListTest, ThereAreExamples) { EXPECT_GE(ExampleStems().size(), 3u) << SourceDir() + "/examples/k8s"; }

TEST_P(ExamplesE2eTest, KubectlApplyReachesRunning) {
  const std::string file = SourceDir() + "/examples/k8s/" + GetParam() + ".yaml";
  std::vector<Json> jobs;
  for (const Json& doc : LoadYamlDocuments(file)) {
    if (doc.value("kind", "") == "FleetJob") jobs.push_back(doc);
  }
  ASSERT_FALSE(jobs.empty()) << file << " holds no FleetJob";
  ASSERT_TRUE(WaitReady(StartOperator()));

  std::string out;
  const int rc = RunCommand("kubectl --kubeconfig=" + kubeconfig() + " apply -f " + file, &out);
  ASSERT_EQ(rc, 0) << "kubectl apply -f " << file << ":\n" << out;

  for (const Json& doc : jobs) {
    const std::string name = doc["metadata"].value("name", "");
    SCOPED_TRACE(name);
    ASSERT_TRUE(ReachesRunning(name));

    // Every pod got the contract's env.
    auto parsed_job = ParseFleetJob([&] {
      Json j = doc;
      j["metadata"]["namespace"] = ns();
      return j;
    }());
    ASSERT_TRUE(parsed_job.ok()) << parsed_job.error();
    const auto cm = EndpointsConfigMap(name);
    ASSERT_TRUE(cm.has_value());
    const auto pods = Pods(name);
    EXPECT_EQ(pods.size(), static_cast<size_t>(parsed_job->spec.TotalPods()));
    for (const Json& pod : pods) {
      SCOPED_TRACE(NameOf(pod));
      ASSERT_NO_FATAL_FAILURE(ExpectContractEnv(pod, *parsed_job, cm));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Examples, ExamplesE2eTest, ::testing::ValuesIn(ExampleStems()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string name = param.param;
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

// ---- metrics and probes ----

// The value of the sample `series` (name with its labels, as exposed), or nullopt.
std::optional<double> Sample(const std::string& exposition, const std::string& series) {
  std::istringstream lines(exposition);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(series + " ", 0) == 0) return std::atof(line.c_str() + series.size() + 1);
  }
  return std::nullopt;
}

class MetricsE2eTest : public OperatorE2eTest {};

TEST_F(MetricsE2eTest, MetricsPassPromtoolAndCountTheWork) {
  OperatorProcess& op = StartOperator();
  ASSERT_TRUE(WaitReady(op));
  const auto probe_port = op.ServingPort("health probes");
  const auto metrics_port = op.ServingPort("metrics");
  ASSERT_TRUE(probe_port && metrics_port);

  HttpConnection probes("http://127.0.0.1:" + std::to_string(*probe_port));
  for (const char* path : {"/healthz", "/readyz"}) {
    auto reply = probes.Send("GET", path);
    ASSERT_TRUE(reply.has_value()) << path << ": " << probes.error();
    EXPECT_EQ(reply->status, 200) << path << ": " << reply->body;
  }

  ASSERT_FALSE(CreateJob(JobBuilder("m").Ps(1, 2).Obj()).is_null());
  ASSERT_FALSE(WaitForPhase("m", "Running").is_null());

  HttpConnection metrics("http://127.0.0.1:" + std::to_string(*metrics_port));
  std::string text;
  ASSERT_TRUE(Eventually("the metrics to show the job Running", [&](std::string& state) {
    auto reply = metrics.Send("GET", "/metrics");
    if (!reply || reply->status != 200) {
      state = reply ? std::to_string(reply->status) : metrics.error();
      return false;
    }
    text = reply->body;
    state = text.substr(0, 2000);
    return Sample(text, "fleet_operator_jobs{phase=\"Running\"}").value_or(0) == 1;
  }, Seconds(10)));

  const std::string file = dir().Write("metrics.txt", text);
  std::string out;
  const int rc = RunCommand("promtool check metrics < " + file, &out);
  EXPECT_EQ(rc, 0) << "promtool check metrics:\n" << out;

  EXPECT_GE(Sample(text, "fleet_operator_pods_created_total").value_or(0), 3);
  EXPECT_GT(Sample(text, "fleet_operator_reconciles_total{result=\"success\"}").value_or(0), 0);
  EXPECT_EQ(Sample(text, "fleet_operator_leader").value_or(-1), 1);
  EXPECT_GT(Sample(text, "fleet_operator_reconcile_duration_seconds_count").value_or(0), 0);
  EXPECT_TRUE(Sample(text, "fleet_operator_workqueue_depth").has_value()) << text;
  EXPECT_NE(text.find("fleet_operator_api_requests_total{"), std::string::npos);
  EXPECT_NE(text.find("fleet_operator_job_restarts_total"), std::string::npos);
  EXPECT_NE(text.find("fleet_operator_pods_deleted_total"), std::string::npos);
  EXPECT_NE(text.find("fleet_operator_workqueue_queue_duration_seconds"), std::string::npos);
}

}  // namespace
}  // namespace fleet::op::e2e
