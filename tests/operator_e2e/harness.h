// Harness for the end-to-end tests of the real `fleet-operator` binary against the fake control
// plane (tests/controlplane/fake_apiserver.py, through the FakeApiServer fixture of tests/kube).
//
//   class MyTest : public OperatorE2eTest {};
//   TEST_F(MyTest, Something) {
//     StartOperator();                                          // the binary, as a child process
//     CreateJob(JobBuilder("ps").Ps(2, 4).Obj());                // through the fake's API
//     ASSERT_TRUE(WaitForPhase("ps", "Running"));
//     PodAction("ps-worker-0", {{"action", "fail"}, {"exitCode", 1}});
//   }
//
// Every test gets its own fake API server (with the FleetJob CRD from crds/fleetjob.yaml created
// through its API) and a kubeconfig pointing at it; operators log to files that are printed when
// the test fails. Waits poll with a deadline (Eventually), never sleep a fixed time. The test
// talks to the API with its own minimal HTTP client, never through the library under test.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fake_apiserver_fixture.h"
#include "fleet/base/result.h"
#include "fleet/runtime/env_contract.h"
#include "world.h"

namespace fleet::op::e2e {

using Json = nlohmann::json;
using kube::testing::FakeApiServer;
using kube::testing::HttpConnection;
using kube::testing::TempDir;
using Millis = std::chrono::milliseconds;
using Seconds = std::chrono::seconds;

// The repository root ($FLEET_SOURCE_DIR, else the source dir this was built from).
std::string SourceDir();
// The fleet-operator binary this test was built with ($FLEET_OPERATOR_BINARY overrides it).
std::string OperatorBinary();

// YAML (yaml-cpp) to JSON, with Kubernetes' reading of plain scalars (true/false, null, integers,
// floats; quoted scalars stay strings). Every document of a file.
std::vector<Json> LoadYamlDocuments(const std::string& path);

// Runs a shell command, capturing stdout and stderr together; returns the exit status (-1 if it
// could not run).
int RunCommand(const std::string& command, std::string* output);

// ---- the operator as a child process ----

class OperatorProcess {
 public:
  // Starts `binary args...` with stdout and stderr appended to `log_path`. The child dies with
  // the test process (PR_SET_PDEATHSIG).
  OperatorProcess(std::string name, const std::string& binary, const std::vector<std::string>& args,
                  std::string log_path);
  ~OperatorProcess();   // SIGKILL if still running
  OperatorProcess(const OperatorProcess&) = delete;
  OperatorProcess& operator=(const OperatorProcess&) = delete;

  const std::string& name() const { return name_; }
  pid_t pid() const { return pid_; }
  bool Running();                                   // not exited (reaps it if it has)
  void Signal(int sig);
  // Waits for the process to exit; its wait status, or nullopt on timeout.
  std::optional<int> WaitExit(Millis timeout);
  std::optional<int> exit_status() const { return exit_status_; }
  std::string Log() const;
  const std::string& log_path() const { return log_path_; }
  // The port of a "serving <what> ... port=N" log line, once logged.
  std::optional<int> ServingPort(const std::string& what) const;
  // The first value of `key=` on a log line containing `marker` (e.g. the election identity).
  std::optional<std::string> LogValue(const std::string& marker, const std::string& key) const;
  // Whether the process was expected to die (Signal was sent): Eventually only fails early for
  // operators that exit unexpectedly.
  bool expected_exit() const { return expected_exit_; }
  void ExpectExit() { expected_exit_ = true; }

 private:
  std::string name_;
  std::string log_path_;
  pid_t pid_ = -1;
  std::optional<int> exit_status_;
  bool expected_exit_ = false;
};

// ---- the Kubernetes API, spoken directly ----

class ApiClient {
 public:
  struct Reply {
    int status = 0;        // 0: transport failure
    Json body;             // null when the body is not JSON
    std::string raw;
  };
  explicit ApiClient(const std::string& url) : http_(url) {}

  Reply Request(const std::string& method, const std::string& path, const Json& body = nullptr,
                const std::string& content_type = "application/json");
  // The object, or nullopt when it does not exist (other answers are test failures).
  std::optional<Json> Get(const std::string& path);
  // The items of a list (label selector optional).
  std::vector<Json> List(const std::string& path, const std::string& label_selector = "");
  Reply Create(const std::string& path, const Json& object) { return Request("POST", path, object); }
  Reply MergePatch(const std::string& path, const Json& patch) {
    return Request("PATCH", path, patch, "application/merge-patch+json");
  }
  Reply Delete(const std::string& path) { return Request("DELETE", path); }

 private:
  HttpConnection http_;
};

// API paths.
std::string JobsPath(const std::string& ns);
std::string JobPath(const std::string& ns, const std::string& name);
std::string CorePath(const std::string& ns, const std::string& plural, const std::string& name = "");
std::string PodGroupPath(const std::string& ns, const std::string& name);   // Volcano's
std::string LeasePath(const std::string& ns, const std::string& name);

// ---- pods, as the kubelet would run them ----

// A container's env as the kubelet resolves it: the planner tests' ResolveEnv (world.h).
using fleet::op::testing::ResolveEnv;

std::string NameOf(const Json& object);
std::string UidOf(const Json& object);
std::string LabelOf(const Json& object, const std::string& key);
// The condition of `type` in a status, or an empty object.
Json ConditionOf(const Json& status, const std::string& type);
// Whether `object`'s status has condition `type` with status "True".
bool IsConditionTrue(const Json& object, const std::string& type);
// Kueue's API paths (kueue.x-k8s.io/v1beta2); `ns` "" for the cluster-scoped kinds.
std::string KueuePath(const std::string& ns, const std::string& plural, const std::string& name = "");

// ---- the fixture ----

class OperatorE2eTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // Extra arguments for the fake API server (before SetUp runs: set it in the constructor).
  std::vector<std::string> fake_args_;

  FakeApiServer& fake() { return *fake_; }
  ApiClient& api() { return *api_; }
  const std::string& kubeconfig() const { return kubeconfig_; }
  const std::string& ns() const { return ns_; }
  const TempDir& dir() const { return dir_; }

  // Starts a fleet-operator (kubeconfig, ephemeral metrics and probe ports, --namespace, debug
  // logs) with `extra` flags; the reference lives as long as the test.
  OperatorProcess& StartOperator(const std::vector<std::string>& extra = {});

  // Waits until the operator's /readyz answers 200 (its caches have synced).
  bool WaitReady(OperatorProcess& op, Millis timeout = Seconds(15));

  // Polls `check` (every `poll`) until it returns true or `timeout` passes. `check` may describe
  // what it saw in `state`, quoted in the failure. Fails early if an operator exits unexpectedly.
  bool Eventually(const std::string& what, const std::function<bool(std::string& state)>& check,
                  Millis timeout = Seconds(20), Millis poll = Millis(25));

  // FleetJobs. CreateJob drops what the server assigns (uid, generation, status), sets the
  // namespace and returns the created object (null after a test failure).
  Json CreateJob(Json job);
  std::optional<Json> GetJob(const std::string& name);
  Json JobStatus(const std::string& name);
  // Waits for status.phase == phase; returns the job (null after a test failure).
  Json WaitForPhase(const std::string& name, const std::string& phase, Millis timeout = Seconds(20));
  // Waits until `pred(job)` holds.
  Json WaitForJob(const std::string& name, const std::string& what, const std::function<bool(const Json&)>& pred,
                  Millis timeout = Seconds(20));
  Json PatchJob(const std::string& name, const Json& patch);

  // Children, by the operator's job-name label.
  std::vector<Json> Pods(const std::string& job);
  std::vector<Json> LivePods(const std::string& job);   // without deletionTimestamp
  std::optional<Json> Pod(const std::string& name);
  std::optional<Json> EndpointsConfigMap(const std::string& job);
  // Drives a pod through the fake kubelet: {"action": "run" | "succeed" | "fail" | "evict" | ...}.
  Json PodAction(const std::string& pod, const Json& action);

  // The live pods of `job`, all Running in run `run` with IPs, `count` of them.
  std::vector<Json> WaitForRunningPods(const std::string& job, size_t count, int run, Millis timeout = Seconds(20));

  // Prints every operator's log (on failure, or when asked).
  void DumpLogs();

  // ---- Kueue: the fake's stand-in (tests/controlplane/fakeapi/kueue.py, docs/design/kueue.md 7) ----
  //
  //   if (!EnableKueue()) GTEST_SKIP() << "Kueue's CRDs not found (set FLEET_KUEUE_CRDS)";
  //   CreateResourceFlavor("a100", {{"gpu", "a100"}});
  //   CreateClusterQueue("cq", {"cpu", "nvidia.com/gpu"}, {{"a100", {{"cpu", "64"}, {"nvidia.com/gpu", "8"}}}});
  //   CreateLocalQueue("q", "cq");
  //   Json wl = WaitForWorkload("job", "admitted", [](const Json& w) { return IsConditionTrue(w, "Admitted"); });

  // Kueue's CRDs (third-party, read in place): $FLEET_KUEUE_CRDS, else <source dir>/../shared/kueue/crds,
  // else /work/shared/kueue/crds; "" when none has the Workload CRD.
  static std::string KueueCrdsDir();
  // Installs Kueue's CRDs in the fake, validates kueue.x-k8s.io objects against their schemas and
  // starts its admission loop; false (nothing done) when the CRDs are not found.
  bool EnableKueue();
  // Waits until the stand-in has acted on every change so far.
  void SettleKueue();
  // Cluster-scoped Kueue objects; each records a test failure unless created.
  void CreateResourceFlavor(const std::string& name, const Json& node_labels = Json::object(),
                            const Json& tolerations = Json::array(), const Json& node_taints = Json::array());
  struct FlavorQuotas {
    std::string flavor;
    std::vector<std::pair<std::string, std::string>> nominal;   // resource -> nominalQuota ("8", "64Gi")
  };
  // One resourceGroup over `covered`, its flavors in order; withinClusterQueue LowerPriority
  // preemption when `preempt_lower_priority`.
  void CreateClusterQueue(const std::string& name, const std::vector<std::string>& covered,
                          const std::vector<FlavorQuotas>& flavors, bool preempt_lower_priority = false);
  void CreateWorkloadPriorityClass(const std::string& name, int value);
  // A LocalQueue in ns() feeding `cluster_queue`.
  void CreateLocalQueue(const std::string& name, const std::string& cluster_queue);
  // The Workloads of FleetJob `job` (label fleet.paddlepaddle.org/job-name), and the one that is
  // neither Finished nor being deleted, if any.
  std::vector<Json> Workloads(const std::string& job);
  std::optional<Json> JobWorkload(const std::string& job);
  // Waits (after SettleKueue) until JobWorkload(job) exists and `pred` holds; returns it (null
  // after a test failure).
  Json WaitForWorkload(const std::string& job, const std::string& what, const std::function<bool(const Json&)>& pred,
                       Millis timeout = Seconds(20));
  // Kueue's eviction of an admitted workload with `reason` (e.g. PodsReadyTimeout); the answer.
  Json EvictWorkload(const std::string& workload, const std::string& reason, const std::string& message = "");

  std::vector<std::unique_ptr<OperatorProcess>> operators_;

 private:
  std::unique_ptr<FakeApiServer> fake_;
  std::unique_ptr<ApiClient> api_;
  TempDir dir_;
  std::string kubeconfig_;
  std::string ns_ = "default";
};

}  // namespace fleet::op::e2e
