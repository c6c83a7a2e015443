// End to end: gang scheduling through a Volcano PodGroup, an operator killed in the middle of
// creating a large job, two replicas with leader election, probes beside idle connections, and a
// shutdown before the caches ever synced.
#include <signal.h>
#include <sys/wait.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "builders.h"
#include "harness.h"
#include "../common/test_process.h"
#include "../httpd/idle_connections.h"

namespace fleet::op::e2e {
namespace {

using testing::JobBuilder;

std::string PodPhase(const Json& pod) { return pod.value("status", Json::object()).value("phase", ""); }

class RobustnessE2eTest : public OperatorE2eTest {
 protected:
  // Requests in the fake's log with this method and exactly this path.
  std::vector<Json> Logged(const std::string& method, const std::string& path) {
    std::vector<Json> out;
    for (const Json& r : fake().Requests()) {
      if (r.value("method", "") == method && r.value("path", "") == path) out.push_back(r);
    }
    return out;
  }

  // Starts a replica with leader election (Lease fleet-e2e) and waits until it holds the lease.
  OperatorProcess& StartLeader() {
    OperatorProcess& op = StartOperator({"--leader-elect", "--leader-election-namespace=default",
                                         "--leader-election-id=fleet-e2e"});
    EXPECT_TRUE(Eventually("the replica to lead", [&](std::string& state) {
      auto lease = api().Get(LeasePath(ns(), "fleet-e2e"));
      const std::string holder = lease ? lease->value("spec", Json::object()).value("holderIdentity", "") : "";
      const std::string id = op.LogValue("campaigning for leadership", "identity").value_or("");
      state = "holder '" + holder + "', identity '" + id + "'";
      return !id.empty() && holder == id;
    }));
    return op;
  }

  // Makes every renewal of the lease fail; `op` must exit 1 for it within the renew deadline.
  void ExpectExitOnLostLease(OperatorProcess& op) {
    fake().Control("faults", {{"failNext", 100000}, {"code", 403}, {"match", "PUT " + LeasePath(ns(), "fleet-e2e")}});
    op.ExpectExit();
    const auto status = op.WaitExit(Seconds(20));
    ASSERT_TRUE(status.has_value()) << "still running 20 s after its lease renewals started failing; log is "
                                    << op.Log().size() << " bytes";
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 1) << "wait status " << *status;
    EXPECT_NE(op.Log().find("lost the leader lease"), std::string::npos);
  }
};

// Volcano gang scheduling: the PodGroup (minMember = every pod) comes first and no pod exists
// until Volcano admits it (phase Inqueue); then the pods are created and, once the gang
// scheduler has placed them, the job runs.
TEST_F(RobustnessE2eTest, VolcanoPodGroupHoldsPodsUntilAdmitted) {
  StartOperator();
  ASSERT_FALSE(CreateJob(JobBuilder("gang").Ps(1, 3).Gang("Volcano", "research").Obj()).is_null());

  std::optional<Json> pg;
  ASSERT_TRUE(Eventually("the PodGroup", [&](std::string&) {
    pg = api().Get(PodGroupPath(ns(), "gang"));
    return pg.has_value();
  }));
  EXPECT_EQ((*pg)["spec"].value("minMember", 0), 4);
  EXPECT_EQ((*pg)["spec"].value("queue", ""), "research");
  const Json refs = (*pg)["metadata"].value("ownerReferences", Json::array());
  ASSERT_EQ(refs.size(), 1u);
  EXPECT_EQ(refs[0].value("kind", ""), "FleetJob");

  const Json pending = WaitForJob("gang", "to report GangPending", [](const Json& j) {
    return ConditionOf(j.value("status", Json::object()), "GangPending").value("status", "") == "True";
  });
  ASSERT_FALSE(pending.is_null());
  EXPECT_EQ(pending["status"].value("phase", ""), "Pending");
  EXPECT_EQ(ConditionOf(pending["status"], "GangPending").value("reason", ""), "PodGroupNotAdmitted");
  EXPECT_TRUE(Pods("gang").empty());

  // Volcano looks at the group and leaves it Pending; the job is reconciled again (its
  // annotations change) and still makes no pod.
  ASSERT_EQ(api().MergePatch(PodGroupPath(ns(), "gang") + "/status", {{"status", {{"phase", "Pending"}}}}).status, 200);
  PatchJob("gang", {{"metadata", {{"annotations", {{"e2e/poke", "1"}}}}}});
  ASSERT_FALSE(WaitForJob("gang", "to see the PodGroup Pending", [](const Json& j) {
    return ConditionOf(j.value("status", Json::object()), "GangPending").value("message", "").find("it is Pending") !=
           std::string::npos;
  }).is_null());
  EXPECT_TRUE(Pods("gang").empty());
  EXPECT_TRUE(Logged("POST", CorePath(ns(), "pods")).empty()) << "a pod was created before the gang was admitted";

  // Admitted: no poke this time — the operator must notice by itself.
  ASSERT_EQ(api().MergePatch(PodGroupPath(ns(), "gang") + "/status", {{"status", {{"phase", "Inqueue"}}}}).status, 200);
  std::vector<Json> pods;
  ASSERT_TRUE(Eventually("the 4 pods after admission", [&](std::string& state) {
    pods = Pods("gang");
    state = std::to_string(pods.size()) + " pods";
    return pods.size() == 4;
  }, Seconds(20)));
  for (const Json& pod : pods) {
    SCOPED_TRACE(NameOf(pod));
    EXPECT_EQ(pod["spec"].value("schedulerName", ""), "volcano");
    EXPECT_EQ(pod["metadata"].value("annotations", Json::object()).value("scheduling.k8s.io/group-name", ""), "gang");
    EXPECT_EQ(PodPhase(pod), "Pending") << "only the gang scheduler places these pods";
  }
  // Volcano places the gang.
  for (const Json& pod : pods) PodAction(NameOf(pod), {{"action", "run"}});
  const Json running = WaitForPhase("gang", "Running");
  ASSERT_FALSE(running.is_null());
  EXPECT_EQ(ConditionOf(running["status"], "GangPending").value("status", ""), "False");
}

// The operator is SIGKILLed while it creates a 200-pod job (20 ms per API request); a new one
// finishes the job: exactly 200 pods, each created once (one 201 per pod and no deletes).
TEST_F(RobustnessE2eTest, OperatorKilledMidCreationLeavesNoDuplicates) {
  constexpr int kPods = 200;
  // Bounds that only stop a hung test: 2 s in all on an idle machine, but 40 s under the
  // sanitizers' slow unwinder (scripts/sanitize.sh), and more on a loaded CI machine.
  constexpr auto kPatience = Seconds(90);
  fake().Control("faults", {{"latencyMs", 20}});
  // A narrow create window so that creation takes a while and can be cut short.
  OperatorProcess& first = StartOperator({"--create-concurrency=4"});
  ASSERT_FALSE(CreateJob(JobBuilder("big").Collective(kPods).Obj()).is_null());

  size_t at_kill = 0;
  ASSERT_TRUE(Eventually("the first operator to create some of the pods", [&](std::string& state) {
    at_kill = Pods("big").size();
    state = std::to_string(at_kill) + " pods";
    return at_kill >= 20;
  }, kPatience, Millis(5)));
  first.Signal(SIGKILL);
  ASSERT_TRUE(first.WaitExit(Seconds(5)).has_value());
  const size_t after_kill = Pods("big").size();
  EXPECT_LT(after_kill, static_cast<size_t>(kPods)) << "the first operator finished before it was killed";

  StartOperator();
  ASSERT_TRUE(Eventually("exactly " + std::to_string(kPods) + " pods", [&](std::string& state) {
    state = std::to_string(Pods("big").size()) + " pods";
    return Pods("big").size() == static_cast<size_t>(kPods);
  }, kPatience));
  ASSERT_FALSE(WaitForPhase("big", "Running", kPatience).is_null());

  const std::vector<Json> pods = Pods("big");
  ASSERT_EQ(pods.size(), static_cast<size_t>(kPods));
  std::set<std::string> names, uids;
  for (const Json& pod : pods) {
    names.insert(NameOf(pod));
    uids.insert(UidOf(pod));
    EXPECT_EQ(LabelOf(pod, "fleet.paddlepaddle.org/run"), "0") << NameOf(pod);
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(kPods));
  for (int i = 0; i < kPods; ++i) EXPECT_TRUE(names.count("big-worker-" + std::to_string(i))) << i;

  // The request log: every pod was created exactly once. POSTs to the collection carry the name
  // in the body, so: as many 201s as pods, anything else only AlreadyExists, and no pod deleted.
  int created = 0;
  std::map<int, int> other;
  for (const Json& r : Logged("POST", CorePath(ns(), "pods"))) {
    if (r.value("code", 0) == 201) ++created;
    else ++other[r.value("code", 0)];
  }
  EXPECT_EQ(created, kPods);
  // A create the first operator was sending when it was killed arrives cut short, and the API
  // server refuses its body (400): at most one per create in flight (--create-concurrency=4).
  EXPECT_LE(other[400], 4) << "more pod creations refused than the killed operator had in flight";
  other.erase(400);
  for (const auto& [code, n] : other) EXPECT_EQ(code, 409) << n << " pod creations answered " << code;
  std::vector<Json> deletes;
  for (const Json& r : fake().Requests()) {
    if (r.value("method", "") == "DELETE" && r.value("path", "").rfind(CorePath(ns(), "pods"), 0) == 0) deletes.push_back(r);
  }
  EXPECT_TRUE(deletes.empty()) << deletes.size() << " pod deletions, first " << deletes.front().dump();
  std::cerr << "killed the first operator with " << at_kill << "-" << after_kill << " of " << kPods << " pods created\n";
}

// One operator, ten jobs submitted one after the other: each pod is POSTed exactly once.
//
// Regression (fixed): a reconcile planned from a pod cache read before the watch event of a pod
// the previous reconcile created, and POSTed it again (409). Expectations now remember when the
// cache showed a write (an observation epoch), and a plan from an older read skips it.
TEST_F(RobustnessE2eTest, EachPodIsPostedOnce) {
  ASSERT_TRUE(WaitReady(StartOperator()));
  constexpr int kJobs = 10;
  for (int i = 0; i < kJobs; ++i) {   // one after the other, as users submit them
    ASSERT_FALSE(CreateJob(JobBuilder("j" + std::to_string(i)).Ps(2, 4).Obj()).is_null());
    ASSERT_FALSE(WaitForPhase("j" + std::to_string(i), "Running").is_null());
  }
  std::map<int, int> by_code;
  for (const Json& r : Logged("POST", CorePath(ns(), "pods"))) ++by_code[r.value("code", 0)];
  EXPECT_EQ(by_code[201], kJobs * 6);
  EXPECT_EQ(by_code[409], 0) << "pods POSTed again after they were created (AlreadyExists), of "
                             << kJobs * 6 << " pods";
  std::map<int, int> cm_codes;
  for (const Json& r : Logged("POST", CorePath(ns(), "configmaps"))) ++cm_codes[r.value("code", 0)];
  EXPECT_EQ(cm_codes[409], 0) << "endpoint ConfigMaps POSTed again after they were created";
}

// Two replicas with --leader-elect: only the leader reconciles; SIGTERM hands the lease over
// (released at once) and the other replica takes over and reconciles a job created afterwards.
TEST_F(RobustnessE2eTest, LeaderElectionHandsOverOnSigterm) {
  const std::vector<std::string> flags = {"--leader-elect", "--leader-election-namespace=default",
                                          "--leader-election-id=fleet-e2e"};
  auto holder = [&]() -> std::string {
    auto lease = api().Get(LeasePath(ns(), "fleet-e2e"));
    return lease ? lease->value("spec", Json::object()).value("holderIdentity", "") : "";
  };
  auto identity = [&](OperatorProcess& op) { return op.LogValue("campaigning for leadership", "identity").value_or(""); };

  OperatorProcess& first = StartOperator(flags);
  std::string first_id;
  ASSERT_TRUE(Eventually("the first replica to lead", [&](std::string& state) {
    first_id = identity(first);
    state = "identity '" + first_id + "', holder '" + holder() + "'";
    return !first_id.empty() && holder() == first_id;
  }));
  OperatorProcess& second = StartOperator(flags);
  std::string second_id;
  ASSERT_TRUE(Eventually("the second replica to stand by, ready", [&](std::string& state) {
    second_id = identity(second);
    const auto port = second.ServingPort("health probes");
    if (second_id.empty() || !port) return false;
    HttpConnection probe("http://127.0.0.1:" + std::to_string(*port));
    auto readyz = probe.Send("GET", "/readyz");
    state = "readyz " + (readyz ? std::to_string(readyz->status) : probe.error());
    return readyz && readyz->status == 200;
  }));
  ASSERT_NE(first_id, second_id);
  EXPECT_EQ(holder(), first_id);

  ASSERT_FALSE(CreateJob(JobBuilder("le1").Ps(1, 2).Obj()).is_null());
  ASSERT_FALSE(WaitForPhase("le1", "Running").is_null());
  // Exactly one replica made the pods: three creations, and only the leader's log mentions the
  // job (both replicas send the same user agent, so the request log cannot tell them apart).
  // Redundant creates answered AlreadyExists are left to EachPodIsPostedOnce.
  int created = 0;
  for (const Json& r : Logged("POST", CorePath(ns(), "pods"))) created += r.value("code", 0) == 201;
  EXPECT_EQ(created, 3);
  EXPECT_NE(first.Log().find("fleetjob=default/le1"), std::string::npos);
  EXPECT_EQ(second.Log().find("fleetjob=default/le1"), std::string::npos) << "the standby reconciled the job";
  EXPECT_EQ(holder(), first_id);

  // SIGTERM: a graceful exit 0 that releases the lease; the standby takes over.
  first.Signal(SIGTERM);
  const auto status = first.WaitExit(Seconds(15));
  ASSERT_TRUE(status.has_value()) << "the leader did not exit within 15 s of SIGTERM";
  EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "wait status " << *status;
  ASSERT_TRUE(Eventually("the second replica to take the lease", [&](std::string& state) {
    state = "holder '" + holder() + "'";
    return holder() == second_id;
  }, Seconds(20)));
  // The lease is written before the replica logs that it leads: wait for the line, not assume it.
  EXPECT_TRUE(Eventually("the second replica to log that it leads", [&](std::string& state) {
    state = "not logged yet";
    return second.Log().find("became the leader") != std::string::npos;
  }, Seconds(5)));

  ASSERT_FALSE(CreateJob(JobBuilder("le2").Collective(2).Obj()).is_null());
  ASSERT_FALSE(WaitForPhase("le2", "Running").is_null());
  EXPECT_NE(second.Log().find("fleetjob=default/le2"), std::string::npos);
  // The first job is still fine under the new leader.
  EXPECT_EQ(JobStatus("le1").value("phase", ""), "Running");
  EXPECT_EQ(Pods("le1").size(), 3u);
}

// A leader that can no longer renew its lease (the API refuses its updates, as when another
// replica took over during a partition) stops and exits 1 within the renew deadline, rather than
// go on acting beside a new leader.
TEST_F(RobustnessE2eTest, LeaderThatCannotRenewExits) {
  OperatorProcess& op = StartLeader();
  ASSERT_FALSE(HasFailure());
  ExpectExitOnLostLease(op);
}

// Issue 14 (slowloris): 20 connections that send nothing, or stall in the request line, made every
// /healthz probe time out for 40 s (two CivetWeb workers, a 10 s request timeout), and the kubelet
// would have restarted the operator. Its probes are answered beside them now.
TEST_F(RobustnessE2eTest, ProbesAreAnsweredBesideIdleConnections) {
  OperatorProcess& op = StartOperator();
  ASSERT_TRUE(WaitReady(op));
  const int port = op.ServingPort("health probes").value_or(0);
  fleet::testing::IdleConnections idle(port, 20);
  ASSERT_EQ(idle.open(), 20u);
  for (const char* path : {"/healthz", "/readyz", "/healthz"}) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(fleet::testing::ProbeWithin(port, path, std::chrono::seconds(1)), 200) << path;
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(500)) << path;
  }
}

// Issue 14: with the API server unreachable the caches never sync. SIGTERM (or, with leader
// election, the same path as a lost lease) must still end the operator at once, and the waiting
// must not flood the log: it used to spin on WaitForSync after Stop() at ~28 MB/s and never exit.
TEST_F(RobustnessE2eTest, StopsPromptlyWhenItsCachesCannotSync) {
  const int port = fleet::test::FreePort();   // nothing listens there: connections are refused
  const std::string unreachable = dir().Write(
      "unreachable-kubeconfig",
      "apiVersion: v1\nkind: Config\nclusters:\n- name: gone\n  cluster:\n    server: http://127.0.0.1:" +
          std::to_string(port) +
          "\nusers:\n- name: test\n  user:\n    token: e2e-token\n"
          "contexts:\n- name: gone\n  context:\n    cluster: gone\n    user: test\n"
          "current-context: gone\n");
  for (const bool elect : {false, true}) {
    SCOPED_TRACE(elect ? "with --leader-elect" : "without leader election");
    std::vector<std::string> args = {"--kubeconfig=" + unreachable, "--metrics-bind-address=127.0.0.1:0",
                                     "--health-probe-bind-address=127.0.0.1:0"};
    if (elect) args.insert(args.end(), {"--leader-elect", "--leader-election-namespace=default"});
    const std::string name = std::string("unsynced-") + (elect ? "elect" : "plain");
    operators_.push_back(
        std::make_unique<OperatorProcess>(name, OperatorBinary(), args, dir().path() + "/" + name + ".log"));
    OperatorProcess& op = *operators_.back();
    ASSERT_TRUE(Eventually("the probe server to start", [&](std::string&) {
      return op.ServingPort("health probes").has_value();
    }, Seconds(10)));
    std::this_thread::sleep_for(std::chrono::seconds(2));   // informers failing, workers waiting to sync
    op.ExpectExit();
    op.Signal(SIGTERM);
    // A List in flight ends its retries first (about 1.5 s of backoff at most), not more.
    const auto status = op.WaitExit(Seconds(5));
    ASSERT_TRUE(status.has_value()) << "still running 5 s after SIGTERM; log is " << op.Log().size() << " bytes";
    EXPECT_TRUE(WIFEXITED(*status) && WEXITSTATUS(*status) == 0) << "wait status " << *status;
    EXPECT_LT(op.Log().size(), 16u * 1024) << "the log grew to " << op.Log().size() << " bytes";
  }
}

// The other way in: a leader that loses its lease before its caches synced (the FleetJob list keeps
// failing) must exit 1 as any leader that loses it, not spin in WaitForSync.
TEST_F(RobustnessE2eTest, LeaderThatLosesItsLeaseBeforeItsCachesSyncExits) {
  fake().Control("faults", {{"failNext", 100000}, {"code", 403}, {"match", "GET /apis/fleet.paddlepaddle.org/"}});
  OperatorProcess& op = StartLeader();
  ASSERT_FALSE(HasFailure());
  EXPECT_EQ(op.Log().find("caches synced"), std::string::npos);
  ExpectExitOnLostLease(op);
  EXPECT_LT(op.Log().size(), 64u * 1024) << "the log grew to " << op.Log().size() << " bytes";
}

}  // namespace
}  // namespace fleet::op::e2e
