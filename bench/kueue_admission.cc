// Kueue admission latency (issue 26): the real fleet-operator binary (a child process, default
// flags, all namespaces) against the fake API server with its Kueue stand-in
// (tests/controlplane/fakeapi/kueue.py), bringing up the operator_scale bench's job (default 10
// servers + 990 workers), in each repetition:
//
//   - queued: the job labelled kueue.x-k8s.io/queue-name, its LocalQueue feeding a ClusterQueue
//     whose quota is 0, so Kueue holds it. Once its Workload is pending, the quota is raised; timed
//     from the moment the Workload's Admitted=True is seen (a watch) until every pod exists, and
//     until the job is Running. Also: job create -> Workload created and -> pending (the operator's
//     part before admission), and quota raised -> Admitted seen (the stand-in's part);
//   - baseline, the same job without the label, in the same run: from its creation until every
//     pod exists, and until Running.
//
// Each runs in its own namespace, one after the other (alternating which goes first), each once
// the previous one runs; the numbers are the medians over the repetitions, and the ratio queued /
// baseline (of the medians, and each run's own). Every milestone comes from a watch, as in operator_scale (polling would load the fake).
// Without Kueue's CRDs (/work/shared/kueue/crds, or $FLEET_KUEUE_CRDS) only the baseline runs.
//
// usage: kueue_admission [workers=990] [servers=10] [repetitions=5] [latency_ms=2]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fake_apiserver_fixture.h"
#include "fleet/kube/client.h"
#include "fleet/operator/controller.h"
#include "fleet/operator/kueue.h"
#include "harness.h"
#include "operator_bench_util.h"

namespace {

using fleet::kube::Client;
using fleet::kube::Json;
using fleet::kube::Resource;
using fleet::kube::testing::FakeApiServer;
using fleet::kube::testing::TempDir;
using Clock = std::chrono::steady_clock;
using fleet::bench::CreateOrExit;
using fleet::bench::LetWatchesStart;
using fleet::bench::Mark;
using fleet::bench::Marks;
using fleet::bench::Median;
using fleet::bench::Seconds;
using fleet::bench::Arg;

Resource KueueResource(const std::string& plural, bool namespaced) {
  return {fleet::op::kueue::kGroup, fleet::op::kueue::kVersion, plural, namespaced};
}

// The e2e fixture's lookup of Kueue's CRDs ($FLEET_KUEUE_CRDS, else the shared copy), made public
// for a program that is not a test.
struct KueueCrds : fleet::op::e2e::OperatorE2eTest {
  using OperatorE2eTest::KueueCrdsDir;
};

// Holds once `count` distinct pods have been seen.
Mark AllPods(size_t count) {
  auto seen = std::make_shared<std::set<std::string>>();
  return [seen, count](const Json& pod) {
    seen->insert(pod["metadata"].value("name", ""));
    return seen->size() >= count;
  };
}

bool IsRunning(const Json& job) { return job.value("status", Json::object()).value("phase", "") == "Running"; }

// Whether `object` has condition `type` with status `status`.
bool HasCondition(const Json& object, const std::string& type, const std::string& status) {
  return fleet::op::e2e::ConditionOf(object.value("status", Json::object()), type).value("status", "") == status;
}

// A ClusterQueue over cpu and memory with one flavor, "default", at `cpu` / `memory`.
Json ClusterQueueSpec(const std::string& cpu, const std::string& memory) {
  const Json resources = Json::array({{{"name", "cpu"}, {"nominalQuota", cpu}}, {{"name", "memory"}, {"nominalQuota", memory}}});
  return {{"resourceGroups", Json::array({{{"coveredResources", {"cpu", "memory"}},
                                           {"flavors", Json::array({{{"name", "default"}, {"resources", resources}}})}}})}};
}

struct Baseline {
  double pods = 0, running = 0;   // seconds from the job's creation
};

Baseline RunBaseline(const std::shared_ptr<Client>& client, const std::string& ns, int servers, int workers) {
  const Json job = fleet::bench::FleetJobObject(ns, "big", servers, workers);
  Marks pods(client, Resource::Pods(), ns, {AllPods(static_cast<size_t>(servers + workers))});
  Marks phase(client, fleet::op::FleetJobResource(), ns, {IsRunning});
  LetWatchesStart();
  const auto t0 = Clock::now();
  CreateOrExit(*client, fleet::op::FleetJobResource(), ns, job);
  return {Seconds(pods.At(0, t0, "the baseline's pods") - t0), Seconds(phase.At(0, t0, "the baseline Running") - t0)};
}

struct Queued {
  double workload = 0, pending = 0;   // from the job's creation
  double admitted = 0;                // from the quota's raise to Admitted=True seen
  double pods = 0, running = 0;       // from Admitted=True seen
};

// The job in LocalQueue "q" of `ns`, which feeds ClusterQueue `cq` (quota 0 until the Workload is
// pending, then enough for the job).
Queued RunQueued(const std::shared_ptr<Client>& client, const std::string& ns, const std::string& cq, int servers,
                 int workers) {
  Json job = fleet::bench::FleetJobObject(ns, "big", servers, workers);
  job["metadata"]["labels"] = {{fleet::op::kueue::kQueueLabel, "q"}};
  Marks pods(client, Resource::Pods(), ns, {AllPods(static_cast<size_t>(servers + workers))});
  Marks phase(client, fleet::op::FleetJobResource(), ns, {IsRunning});
  Marks workload(client, KueueResource("workloads", true), ns,
                 {[](const Json&) { return true; },
                  [](const Json& wl) { return HasCondition(wl, "QuotaReserved", "False"); },
                  [](const Json& wl) { return HasCondition(wl, "Admitted", "True"); }});
  LetWatchesStart();
  const auto t0 = Clock::now();
  CreateOrExit(*client, fleet::op::FleetJobResource(), ns, job);
  Queued q;
  q.workload = Seconds(workload.At(0, t0, "the Workload") - t0);
  q.pending = Seconds(workload.At(1, t0, "the Workload pending") - t0);
  const auto raised = Clock::now();
  auto patched = client->MergePatch(KueueResource("clusterqueues", false), "", cq, {{"spec", ClusterQueueSpec("100k", "100Ti")}});
  if (!patched.ok()) {
    std::fprintf(stderr, "cannot raise the quota of %s: %s\n", cq.c_str(), patched.status().ToString().c_str());
    std::exit(1);
  }
  const auto admitted = workload.At(2, raised, "Admitted");
  q.admitted = Seconds(admitted - raised);
  q.pods = Seconds(pods.At(0, admitted, "the queued job's pods") - admitted);
  q.running = Seconds(phase.At(0, admitted, "the queued job Running") - admitted);
  return q;
}

// The Kueue objects of repetition `ns`: a ClusterQueue at quota 0 and LocalQueue "q" feeding it.
void CreateQueues(Client& client, const std::string& ns, const std::string& cq) {
  CreateOrExit(client, KueueResource("clusterqueues", false), "", {{"metadata", {{"name", cq}}}, {"spec", ClusterQueueSpec("0", "0")}});
  CreateOrExit(client, KueueResource("localqueues", true), ns, {{"metadata", {{"name", "q"}}}, {"spec", {{"clusterQueue", cq}}}});
}

// The fake with Kueue on (when its CRDs are found): whether it is.
bool EnableKueue(FakeApiServer& fake, Client& client) {
  const std::string crds = KueueCrds::KueueCrdsDir();
  if (crds.empty()) {
    std::printf("Kueue's CRDs not found (set FLEET_KUEUE_CRDS, or see /work/shared/kueue/crds): the queued part is skipped\n");
    return false;
  }
  const Json config = fake.Control("config", {{"kueue", {{"crds", crds}}}});
  if (!config.is_object() || !config.value("kueue", false)) {
    std::fprintf(stderr, "the fake did not enable Kueue: %s\n", config.dump().c_str());
    std::exit(1);
  }
  CreateOrExit(client, KueueResource("resourceflavors", false), "", {{"metadata", {{"name", "default"}}}, {"spec", Json::object()}});
  return true;
}

struct Runs {
  std::vector<Queued> queued;
  std::vector<Baseline> baseline;
};

void Report(const Runs& runs, size_t total) {
  const auto median = [](const auto& items, auto field) {
    std::vector<double> values;
    for (const auto& item : items) values.push_back(item.*field);
    return Median(values);
  };
  const double base_pods = median(runs.baseline, &Baseline::pods), base_running = median(runs.baseline, &Baseline::running);
  std::printf("median of %zu: baseline (create ->) all %zu pods %.2f s, Running %.2f s\n", runs.baseline.size(), total,
              base_pods, base_running);
  if (runs.queued.empty()) return;
  const double pods = median(runs.queued, &Queued::pods), running = median(runs.queued, &Queued::running);
  // Each run's own ratio too: its two jobs ran next to each other, on a fake filled alike.
  std::vector<double> pods_ratios, running_ratios;
  for (size_t i = 0; i < runs.queued.size(); ++i) {
    pods_ratios.push_back(runs.queued[i].pods / runs.baseline[i].pods);
    running_ratios.push_back(runs.queued[i].running / runs.baseline[i].running);
  }
  std::printf("median of %zu: queued (Admitted seen ->) all %zu pods %.2f s, Running %.2f s; ratio queued / baseline "
              "%.2f to the pods, %.2f to Running (the median of each run's ratios: %.2f, %.2f)\n",
              runs.queued.size(), total, pods, running, pods / base_pods, running / base_running, Median(pods_ratios),
              Median(running_ratios));
  std::printf("median: job create -> Workload created %.3f s, -> Workload pending %.3f s; quota raised -> Admitted seen %.3f s\n",
              median(runs.queued, &Queued::workload), median(runs.queued, &Queued::pending),
              median(runs.queued, &Queued::admitted));
}

void Run(int servers, int workers, int repetitions, int latency_ms) {
  FakeApiServer fake({"--nodes", "100"});
  if (!fake.ok()) {
    std::fprintf(stderr, "%s\n", fake.error().c_str());
    std::exit(1);
  }
  auto client = Client::Create(fake.Config()).value();
  fleet::bench::CreateCrd(*client);
  const bool kueue = EnableKueue(fake, *client);   // before the operator starts: it discovers Kueue's API then
  if (latency_ms > 0) fake.Control("faults", {{"latencyMs", latency_ms}});
  TempDir dir;
  auto op = fleet::bench::StartOperator(fake, dir, {});
  const size_t total = static_cast<size_t>(servers + workers);
  std::printf("a %d-server, %d-worker job (%zu pods), the real fleet-operator; fake API server latency %d ms per request\n",
              servers, workers, total, latency_ms);
  Runs runs;
  for (int r = 0; r < repetitions; ++r) {
    const std::string base_ns = "baseline" + std::to_string(r), queued_ns = "queued" + std::to_string(r);
    const std::string cq = "cq" + std::to_string(r);
    for (const std::string& ns : {base_ns, queued_ns}) {
      CreateOrExit(*client, {"", "v1", "namespaces", false}, "", {{"metadata", {{"name", ns}}}});
    }
    if (kueue) CreateQueues(*client, queued_ns, cq);
    // Alternating the order: the fake slows as it fills, so neither side always runs later.
    const bool queued_first = kueue && r % 2 == 1;
    if (queued_first) runs.queued.push_back(RunQueued(client, queued_ns, cq, servers, workers));
    runs.baseline.push_back(RunBaseline(client, base_ns, servers, workers));
    if (kueue && !queued_first) runs.queued.push_back(RunQueued(client, queued_ns, cq, servers, workers));
    const Baseline& b = runs.baseline.back();
    std::printf("  run %d: baseline (create ->) all pods %.2f s, Running %.2f s", r, b.pods, b.running);
    if (kueue) {
      const Queued& q = runs.queued.back();
      std::printf("; queued%s: create -> Workload %.3f s, -> pending %.3f s; quota raised -> Admitted seen %.3f s; "
                  "Admitted -> all pods %.2f s (%.2f x), Running %.2f s (%.2f x)",
                  queued_first ? " (first)" : "", q.workload, q.pending, q.admitted, q.pods, q.pods / b.pods, q.running,
                  q.running / b.running);
    }
    std::printf("\n");
    std::fflush(stdout);
  }
  Report(runs, total);
}

}  // namespace

int main(int argc, char** argv) {
  const int workers = Arg(argc, argv, 1, 990);
  const int servers = Arg(argc, argv, 2, 10);
  const int repetitions = std::max(1, Arg(argc, argv, 3, 5));
  const int latency_ms = Arg(argc, argv, 4, 2);
  Run(servers, workers, repetitions, latency_ms);
  return 0;
}
