// Operator scale benchmarks (issue 4 §6), against the fake API server with a per-request latency.
//
//  1. Bring-up of one big job (default 10 servers + 990 workers): time from creating the FleetJob
//     until every pod exists and the endpoint lists are published, with the controller running
//     in this process as fleet-operator runs it (its default flags). Baselines in the same run:
//       - a plain parallel client creating the same pods (the pods BuildPod makes for that job),
//         `concurrency` requests in flight, no rate limit: the time to create them, and the time
//         to do the whole job by hand — create them, watch until every pod has an address, write
//         the lists into a ConfigMap (the floor for any operator; the fake's kubelet stand-in
//         runs the pods in both cases);
//       - a serial client at 20 requests/s (the pace of operators on client-go's defaults).
//     Both the plain client and the operator are also timed to Running: every pod running (and
//     the lists written; for the operator, the job's status phase Running).
//     Then the same bring-up by the real fleet-operator binary, a child process: its times, its
//     CPU per pod over the bring-up (creates, informer ingest, status writes: /proc/<pid>/stat)
//     and its peak RSS (VmHWM). FLEET_OPERATOR_BINARIES=old:new runs each binary in turn (its own
//     namespace, the same baseline): builds compared in one run.
//     Each runs in its own namespace of the same fake, one after the other, each starting once
//     the fake has finished running the previous one's pods.
//  2. Steady-state reconcile of that job once it runs: Reconcile() called directly, p50/p99.
//  3. Memory: the real fleet-operator binary with `jobs` x `pods_per_job` pods cached (seeded in
//     the fake, run by its kubelet stand-in): VmRSS and VmHWM once its caches have synced and
//     every job has been reconciled.
//
// usage: operator_scale [workers=990] [servers=10] [latency_ms=2] [concurrency=64]
//                       [serial_pods=200] [jobs=20] [pods_per_job=500]
//   workers=0 skips the bring-up; jobs=0 the memory measurement.
//   The serial baseline creates serial_pods pods and reports its rate and the time it would need
//   for the whole job (it is linear: 20 pods/s), so the run stays short.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <prometheus/registry.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fake_apiserver_fixture.h"
#include "operator_bench_util.h"
#include "harness.h"
#include "fleet/kube/client.h"
#include "fleet/kube/informer.h"
#include "fleet/kube/rate_limiter.h"
#include "fleet/operator/controller.h"
#include "fleet/operator/flags.h"
#include "fleet/operator/planner.h"
#include "fleet/operator/pod_builder.h"
#include "fleet/operator/wiring.h"

namespace {

using fleet::kube::Client;
using fleet::kube::Json;
using fleet::kube::Resource;
using fleet::kube::testing::FakeApiServer;
using fleet::kube::testing::TempDir;
using Clock = std::chrono::steady_clock;
using fleet::bench::CreateCrd;
using fleet::bench::FleetJobObject;
using fleet::bench::ProcessCpuSeconds;
using fleet::bench::ProcStatus;
using fleet::bench::WriteKubeconfig;
using fleet::bench::Arg;
using fleet::bench::Seconds;

// The pods the operator makes for `job` (so every client sends the same bodies).
std::vector<Json> PodsFor(const Json& job_object, const std::string& ns) {
  Json object = job_object;
  object["metadata"]["namespace"] = ns;
  object["metadata"]["uid"] = "00000000-0000-0000-0000-000000000000";
  auto job = fleet::op::ParseFleetJob(object);
  auto wiring = fleet::op::JobWiring::Build(*job, 0);
  std::vector<Json> pods;
  for (const auto& slot : fleet::op::PodSlots(*job)) {
    Json pod = fleet::op::BuildPod(*job, slot, *wiring, 0, fleet::op::OperatorSettings{});
    pod["metadata"].erase("ownerReferences");   // the owner does not exist in these namespaces
    pods.push_back(std::move(pod));
  }
  return pods;
}

// Counts the pods of `ns` that have an address, from a watch (ADDED/MODIFIED), until `want`.
class AddressWatch {
 public:
  AddressWatch(std::shared_ptr<Client> client, std::string ns, size_t want)
      : client_(std::move(client)), ns_(std::move(ns)), want_(want) {
    thread_ = std::thread([this] {
      fleet::kube::WatchOptions options;
      options.timeout_seconds = 600;
      (void)client_->Watch(Resource::Pods(), ns_, options, [this](const fleet::kube::WatchEvent& e) {
        const std::string name = e.object["metadata"].value("name", "");
        const Json& status = e.object.value("status", Json::object());
        const std::string ip = status.value("podIP", "");
        if (!ip.empty()) ips_[name] = ip;
        if (status.value("phase", "") == "Running") running_.insert(name);
        if (ips_.size() >= want_ && addressed_at_ == Clock::time_point{}) {
          addressed_at_ = Clock::now();
          addressed_ = true;
        }
        if (running_.size() >= want_) {
          running_at_ = Clock::now();
          running_done_ = true;
          return false;
        }
        return true;
      }, cancel_);
    });
  }
  ~AddressWatch() {
    cancel_.Cancel();
    thread_.join();
  }
  // Until every pod has an address (`running`: runs).
  bool WaitedUntil(Clock::time_point deadline, Clock::time_point* at, bool running = false) {
    const std::atomic<bool>& done = running ? running_done_ : addressed_;
    while (!done && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    *at = running ? running_at_ : addressed_at_;
    return done;
  }
  std::vector<std::string> Hosts(const std::vector<Json>& pods) const {
    std::vector<std::string> hosts;
    for (const Json& pod : pods) hosts.push_back(ips_.at(pod["metadata"]["name"].get<std::string>()));
    return hosts;
  }

 private:
  std::shared_ptr<Client> client_;
  std::string ns_;
  size_t want_;
  std::map<std::string, std::string> ips_;
  std::set<std::string> running_;
  std::atomic<bool> addressed_{false}, running_done_{false};
  Clock::time_point addressed_at_, running_at_;
  fleet::kube::CancelToken cancel_;
  std::thread thread_;
};

double CreateParallel(Client& client, const std::vector<Json>& pods, const std::string& ns, int concurrency) {
  std::atomic<size_t> next{0};
  std::atomic<int> failed{0};
  const auto t0 = Clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < concurrency; ++t) {
    threads.emplace_back([&] {
      for (size_t i = next++; i < pods.size(); i = next++) {
        if (!client.Create(Resource::Pods(), ns, pods[i]).ok()) ++failed;
      }
    });
  }
  for (auto& t : threads) t.join();
  if (failed) std::fprintf(stderr, "parallel client: %d creates failed\n", failed.load());
  return Seconds(Clock::now() - t0);
}

double CreateSerial(Client& client, const std::vector<Json>& pods, size_t count, const std::string& ns, double qps) {
  fleet::kube::TokenBucket bucket(qps, 1);
  const auto t0 = Clock::now();
  for (size_t i = 0; i < count && i < pods.size(); ++i) {
    bucket.Wait();
    if (!client.Create(Resource::Pods(), ns, pods[i]).ok()) std::fprintf(stderr, "serial client: create failed\n");
  }
  return Seconds(Clock::now() - t0);
}

// True once the job's endpoints ConfigMap carries a host for every pod.
bool ListsPublished(const Json& cm, size_t pods) {
  const std::string hosts = cm["metadata"].value("annotations", Json::object()).value(fleet::op::kHostsAnnotation, "");
  size_t n = hosts.empty() ? 0 : 1;
  bool empty_entry = hosts.empty() || hosts.front() == ',' || hosts.back() == ',';
  for (size_t i = 0; i + 1 < hosts.size(); ++i) {
    if (hosts[i] == ',') {
      ++n;
      empty_entry = empty_entry || hosts[i + 1] == ',';
    }
  }
  return n == pods && !empty_entry;
}

// The first moment an object, watched by name, satisfied `reached`. The operator's milestones are
// watched, as the plain client's are (its one watch): polling them every few ms would load the
// fake, and slow the operator's bring-up, with requests the plain client does not make.
class Milestone {
 public:
  Milestone(std::shared_ptr<Client> client, Resource resource, std::string ns, std::string name,
            std::function<bool(const Json&)> reached)
      : client_(std::move(client)) {
    thread_ = std::thread([this, resource, ns, name, reached] {
      fleet::kube::WatchOptions options;
      options.field_selector = "metadata.name=" + name;
      options.timeout_seconds = 600;
      while (!done_ && !cancel_.cancelled()) {   // a watch the server ended starts again ("": from now)
        (void)client_->Watch(resource, ns, options, [&](const fleet::kube::WatchEvent& e) {
          if (e.type == fleet::kube::WatchEventType::kDeleted || !reached(e.object)) return true;
          at_ = Clock::now();
          done_ = true;
          return false;
        }, cancel_);
      }
    });
  }
  ~Milestone() {
    cancel_.Cancel();
    thread_.join();
  }
  // Seconds from t0 to the milestone; exits when it is not reached within 5 minutes.
  double SecondsAfter(Clock::time_point t0, const char* what) {
    while (!done_) {
      if (Clock::now() - t0 > std::chrono::minutes(5)) {
        std::fprintf(stderr, "%s: not within 5 minutes\n", what);
        std::exit(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return Seconds(at_ - t0);
  }

 private:
  std::shared_ptr<Client> client_;
  std::atomic<bool> done_{false};
  Clock::time_point at_;
  fleet::kube::CancelToken cancel_;
  std::thread thread_;
};

// The name of the job's first pod (its first slot's): the operator creates pods in slot order.
std::string FirstPodName(const Json& job) { return fleet::op::PodSlots(fleet::op::ParseFleetJob(job).value()).front().name; }

// The milestones of one job's bring-up by an operator: its first pod, its lists, Running.
struct BringUpWatch {
  BringUpWatch(const std::shared_ptr<Client>& client, const std::string& ns, const Json& job, size_t pods)
      : first_pod(client, Resource::Pods(), ns, FirstPodName(job), [](const Json&) { return true; }),
        published(client, Resource::ConfigMaps(), ns, fleet::op::EndpointsConfigMapName("big"),
                  [pods](const Json& cm) { return ListsPublished(cm, pods); }),
        running(client, fleet::op::FleetJobResource(), ns, "big", [](const Json& object) {
          return object.value("status", Json::object()).value("phase", "") == "Running";
        }) {}
  Milestone first_pod, published, running;
};

// The in-process controller's reconciles so far: their count by result and their total seconds.
std::string Reconciles(prometheus::Registry& registry) {
  std::string out;
  for (const auto& family : registry.Collect()) {
    if (family.name == "fleet_operator_reconciles_total") {
      for (const auto& m : family.metric) {
        out += (out.empty() ? "" : ", ") + m.label.at(0).value + " " + std::to_string(static_cast<int>(m.counter.value));
      }
    } else if (family.name == "fleet_operator_reconcile_duration_seconds" && !family.metric.empty()) {
      out += "; " + std::to_string(family.metric[0].histogram.sample_sum).substr(0, 5) + " s in all";
    }
  }
  return out;
}

// fleet_operator_pods_created_total, read in-process.
double PodsCreated(prometheus::Registry& registry) {
  for (const auto& family : registry.Collect()) {
    if (family.name == "fleet_operator_pods_created_total" && !family.metric.empty()) return family.metric[0].counter.value;
  }
  return 0;
}

// The plain parallel client doing the whole job by hand in `ns`: every pod created
// (`concurrency` in flight), watched until each has an address, the lists written into a
// ConfigMap, then watched until every pod runs. Seconds from the first create.
struct ByHand {
  double created = 0, lists = 0, running = 0;
};
ByHand PlainClientBringUp(const std::shared_ptr<Client>& client, const std::vector<Json>& pods, const std::string& ns,
                          int concurrency) {
  ByHand t;
  AddressWatch addresses(client, ns, pods.size());
  const auto t0 = Clock::now();
  t.created = CreateParallel(*client, pods, ns, concurrency);
  Clock::time_point all_addressed;
  if (!addresses.WaitedUntil(t0 + std::chrono::minutes(5), &all_addressed)) {
    std::fprintf(stderr, "the baseline's pods did not all get addresses within 5 minutes\n");
    std::exit(1);
  }
  std::string list;
  for (const std::string& ip : addresses.Hosts(pods)) list += (list.empty() ? "" : ",") + ip + ":6170";
  (void)client->Create(Resource::ConfigMaps(), ns, {{"metadata", {{"name", "lists"}}}, {"data", {{"PADDLE_TRAINER_ENDPOINTS", list}}}});
  t.lists = Seconds(Clock::now() - t0);
  Clock::time_point all_running;
  if (!addresses.WaitedUntil(t0 + std::chrono::minutes(5), &all_running, true)) {
    std::fprintf(stderr, "the baseline's pods did not all run within 5 minutes\n");
    std::exit(1);
  }
  t.running = std::max(t.lists, Seconds(all_running - t0));
  std::printf("  plain parallel client (%d in flight) in %s: %zu pods created in %.2f s (%.0f pods/s); "
              "created, all addressed and the lists written in %.2f s; all running with the lists in %.2f s\n",
              concurrency, ns.c_str(), pods.size(), t.created, static_cast<double>(pods.size()) / t.created, t.lists,
              t.running);
  return t;
}

// The bring-up of the same job by the real fleet-operator binary (a child process, default flags,
// watching its own namespace `ns`): its times, and its CPU and peak memory over the bring-up.
double BringUpWithBinary(FakeApiServer& fake, const std::shared_ptr<Client>& client, int servers, int workers,
                       double by_hand_running, const std::string& binary, const std::string& ns) {
  const size_t total = static_cast<size_t>(servers + workers);
  (void)client->Create({"", "v1", "namespaces", false}, "", {{"metadata", {{"name", ns}}}});
  TempDir dir;
  fleet::op::e2e::OperatorProcess op("fleet-operator", binary,
                                     {"--kubeconfig=" + WriteKubeconfig(dir, fake.url()), "--namespace=" + ns,
                                      "--metrics-bind-address=0", "--health-probe-bind-address=0"},
                                     dir.path() + "/operator.log");
  for (int i = 0; op.Log().find("caches synced") == std::string::npos; ++i) {
    if (i > 3000 || !op.Running()) {
      std::fprintf(stderr, "fleet-operator did not sync its caches:\n%s\n", op.Log().c_str());
      std::exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const Json job = FleetJobObject(ns, "big", servers, workers);
  BringUpWatch watch(client, ns, job, total);
  const double cpu0 = ProcessCpuSeconds(op.pid());
  const auto t0 = Clock::now();
  if (!client->Create(fleet::op::FleetJobResource(), ns, job).ok()) std::exit(1);
  const double first_pod = watch.first_pod.SecondsAfter(t0, "the first pod");
  const double published = watch.published.SecondsAfter(t0, "the lists");
  const double running = watch.running.SecondsAfter(t0, "Running");
  const double cpu = ProcessCpuSeconds(op.pid()) - cpu0;
  std::printf("  fleet-operator binary %s (default flags): first pod after %.3f s, lists published after %.2f s, job Running after %.2f s "
              "(%.2f x the plain client, target <= 1.2 / 1.5 at 10,000); CPU %.2f s = %.2f ms per pod (target <= 1 ms); "
              "VmHWM %s (target <= 128 MiB)\n",
              binary.c_str(), first_pod, published, running, running / by_hand_running, cpu,
              cpu * 1000 / static_cast<double>(total), ProcStatus(op.pid(), "VmHWM").c_str());
  return running;
}

// What the operator's pod cache holds per pod, packed: the namespace's pods whole, and as the
// controller's pod informer keeps them (KeepWhatTheOperatorReadsOfPods).
void PodCacheBytes(const std::shared_ptr<Client>& client, const std::string& ns) {
  const auto bytes_per_pod = [&](bool trimmed) {
    fleet::kube::InformerOptions options;
    options.ns = ns;
    if (trimmed) fleet::op::KeepWhatTheOperatorReadsOfPods(options);
    fleet::kube::Informer informer(client, Resource::Pods(), options);
    informer.Start();
    informer.WaitForSync(std::chrono::seconds(60));
    return static_cast<double>(informer.cache().PackedBytes()) / static_cast<double>(std::max<size_t>(1, informer.cache().Size()));
  };
  std::printf("  the pod cache per running pod (packed): %.0f bytes whole, %.0f bytes as the operator keeps it\n",
              bytes_per_pod(false), bytes_per_pod(true));
}

size_t StatusWrites(FakeApiServer& fake) {
  size_t status_writes = 0;
  for (const Json& r : fake.Requests()) {
    const std::string path = r.value("path", "");
    status_writes += r.value("method", "") == "PUT" && path.size() > 7 && path.compare(path.size() - 7, 7, "/status") == 0;
  }
  return status_writes;
}

// The in-process operator's bring-up of `job`, timed to each milestone.
struct Milestones {
  double first_pod = 0, all_created = 0, published = 0, running = 0;
};

Milestones InProcessBringUp(FakeApiServer& fake, const std::shared_ptr<Client>& client,
                            prometheus::Registry& registry, const Json& job, size_t total) {
  BringUpWatch watch(client, "operator", job, total);
  fake.ClearRequests();
  const auto t0 = Clock::now();
  if (!client->Create(fleet::op::FleetJobResource(), "operator", job).ok()) std::exit(1);
  // Read in-process: the metric costs the fake nothing.
  while (PodsCreated(registry) < static_cast<double>(total) && Clock::now() - t0 < std::chrono::minutes(5)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  Milestones m;
  m.all_created = Seconds(Clock::now() - t0);
  m.first_pod = watch.first_pod.SecondsAfter(t0, "the first pod");
  m.published = watch.published.SecondsAfter(t0, "the lists");
  m.running = watch.running.SecondsAfter(t0, "Running");
  return m;
}

// Steady state: the job runs; a reconcile finds nothing to do.
void SteadyStateReconciles(FakeApiServer& fake, fleet::op::Controller& controller, size_t total) {
  std::this_thread::sleep_for(std::chrono::seconds(1));   // let the last status write reach the cache
  std::vector<double> took;
  fake.ClearRequests();
  for (int i = 0; i < 1000; ++i) {
    const auto r0 = Clock::now();
    controller.Reconcile("operator/big");
    took.push_back(Seconds(Clock::now() - r0) * 1000);
  }
  std::sort(took.begin(), took.end());
  {
    // A steady-state reconcile must not write anything (no status churn, no repeated creates).
    size_t writes = 0;
    for (const Json& r : fake.Requests()) writes += r.value("method", "") != "GET";
    std::printf("  API writes during the steady-state reconciles: %zu\n", writes);
  }
  std::printf("steady-state reconcile of the %zu-pod job (1000 calls): p50 %.2f ms, p99 %.2f ms, max %.2f ms (target p99 <= 5 ms)\n",
              total, took[took.size() / 2], took[took.size() * 99 / 100], took.back());
}

// FLEET_OPERATOR_BINARIES="a:b": each binary in turn, against the same baseline (to compare builds
// in one run); else FLEET_OPERATOR_BINARY or this build's.
std::vector<std::string> ComparedBinaries() {
  const char* binaries = std::getenv("FLEET_OPERATOR_BINARIES");
  std::vector<std::string> compared;
  std::istringstream paths(binaries ? binaries : "");
  for (std::string path; std::getline(paths, path, ':');) {
    if (!path.empty()) compared.push_back(path);
  }
  if (compared.empty()) compared.push_back(fleet::op::e2e::OperatorBinary());
  return compared;
}

// The fake slows as it fills (each phase's pods stay): a binary run late meets a slower fake
// than the first plain client did. So the plain client runs again after each binary, and each
// binary is also compared with the mean of the plain runs just before and after it.
void CompareBinaries(FakeApiServer& fake, const std::shared_ptr<Client>& client, int servers, int workers,
                     const Json& job, int concurrency, double by_hand_running) {
  const std::vector<std::string> compared = ComparedBinaries();
  double plain_before = by_hand_running;
  for (size_t i = 0; i < compared.size(); ++i) {
    const double binary_running = BringUpWithBinary(fake, client, servers, workers, by_hand_running, compared[i],
                                             "binary" + std::to_string(i));
    const std::string ns = "parallel-after" + std::to_string(i);
    (void)client->Create({"", "v1", "namespaces", false}, "", {{"metadata", {{"name", ns}}}});
    const double plain_after = PlainClientBringUp(client, PodsFor(job, ns), ns, concurrency).running;
    std::printf("  fleet-operator binary %s: %.2f x the plain client's runs just before and after it (%.2f s, %.2f s)\n",
                compared[i].c_str(), binary_running / ((plain_before + plain_after) / 2), plain_before, plain_after);
    plain_before = plain_after;
  }
}

void BringUp(int servers, int workers, int latency_ms, int concurrency, int serial_pods) {
  FakeApiServer fake({"--nodes", "100"});
  if (!fake.ok()) {
    std::fprintf(stderr, "%s\n", fake.error().c_str());
    std::exit(1);
  }
  auto client = Client::Create(fake.Config()).value();
  CreateCrd(*client);
  for (const char* ns : {"parallel", "serial", "operator"}) {
    (void)client->Create({"", "v1", "namespaces", false}, "", {{"metadata", {{"name", ns}}}});
  }
  if (latency_ms > 0) fake.Control("faults", {{"latencyMs", latency_ms}});
  const Json job = FleetJobObject("operator", "big", servers, workers);
  const size_t total = static_cast<size_t>(servers + workers);

  std::printf("bring-up of a %d-server, %d-worker job; fake API server latency %d ms per request\n", servers, workers, latency_ms);
  const ByHand plain = PlainClientBringUp(client, PodsFor(job, "parallel"), "parallel", concurrency);
  const double parallel = plain.created, by_hand = plain.lists, by_hand_running = plain.running;

  // The operator as fleet-operator runs it: its default flags.
  auto flags = fleet::op::ParseOperatorFlags({}).value();
  flags.controller.ns = "operator";
  fleet::kube::ClientOptions options;
  options.qps = flags.qps;
  options.burst = flags.burst;
  auto operator_client = Client::Create(fake.Config(), options).value();
  auto registry = std::make_shared<prometheus::Registry>();
  fleet::op::Controller controller(operator_client, flags.controller, registry);
  controller.StartInformers();
  controller.WaitForSync(std::chrono::seconds(30));
  std::thread workers_thread([&] { controller.Run(); });

  const Milestones m = InProcessBringUp(fake, client, *registry, job, total);
  std::printf("  fleet-operator in this process (default flags: qps %.0f, burst %d, %d pod writes in flight): first pod after %.3f s, "
              "all pods created after %.2f s, lists published after %.2f s, job Running after %.2f s\n",
              flags.qps, flags.burst, flags.controller.create_concurrency, m.first_pod, m.all_created, m.published,
              m.running);
  std::printf("  its reconciles until Running: %s; job status writes: %zu\n", Reconciles(*registry).c_str(),
              StatusWrites(fake));
  std::printf("  ratio operator / plain parallel client doing the whole job: %.2f to the lists (target <= 1.5), %.2f to Running "
              "(target <= 1.2); against its creates alone: %.2f\n", m.published / by_hand, m.running / by_hand_running,
              m.published / parallel);

  PodCacheBytes(client, "operator");
  SteadyStateReconciles(fake, controller, total);
  CompareBinaries(fake, client, servers, workers, job, concurrency, by_hand_running);
  const double serial = CreateSerial(*client, PodsFor(job, "serial"), static_cast<size_t>(serial_pods), "serial", 20);
  const double serial_rate = serial_pods / serial;
  std::printf("  serial 20-QPS client: %d pods in %.2f s (%.1f pods/s) -> %.1f s to create the %zu pods; ratio to the operator %.1f\n",
              serial_pods, serial, serial_rate, static_cast<double>(total) / serial_rate, total,
              static_cast<double>(total) / serial_rate / m.published);

  controller.Stop();
  workers_thread.join();
}

void Memory(int jobs, int pods_per_job) {
  FakeApiServer fake({"--nodes", "100"});
  auto client = Client::Create(fake.Config()).value();
  CreateCrd(*client);
  for (int j = 0; j < jobs; ++j) {
    const std::string name = "job" + std::to_string(j);
    const Json job = FleetJobObject("default", name, 0, pods_per_job);
    auto created = client->Create(fleet::op::FleetJobResource(), "default", job);
    // The job's pods, as the operator would have made them, already there (seeded in bulk).
    Json pod = PodsFor(job, "default")[0];
    pod["metadata"]["ownerReferences"] = Json::array({{{"apiVersion", "fleet.paddlepaddle.org/v1alpha1"}, {"kind", "FleetJob"},
                                                       {"name", name}, {"uid", (*created)["metadata"]["uid"]}, {"controller", true}}});
    pod["metadata"].erase("name");
    fake.Control("seed", {{"path", "/api/v1/namespaces/default/pods"}, {"count", pods_per_job}, {"template", pod},
                          {"namePrefix", name + "-worker-"}});
  }
  // Let the kubelet stand-in run them all (addresses, Running), as in a live cluster.
  const size_t total = static_cast<size_t>(jobs * pods_per_job);
  for (int i = 0; i < 600; ++i) {
    auto list = client->List(Resource::Pods(), "default", {"", "status.phase=Running", 0, ""});
    if (list.ok() && (*list)["items"].size() == total) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }

  TempDir dir;
  const std::string kubeconfig = WriteKubeconfig(dir, fake.url());
  const std::string log = dir.path() + "/operator.log";
  const pid_t pid = fleet::bench::SpawnOperator(
      log, {"--kubeconfig=" + kubeconfig, "--metrics-bind-address=0", "--health-probe-bind-address=0"});
  // Cached and reconciled: every job has a status with its pods counted.
  const auto t0 = Clock::now();
  for (;;) {
    auto list = client->List(fleet::op::FleetJobResource(), "default");
    int done = 0;
    if (list.ok()) {
      for (const Json& j : (*list)["items"]) {
        const Json& status = j.value("status", Json::object());
        if (status.value("phase", "") == "Running" || status.value("phase", "") == "Starting") ++done;
      }
    }
    if (done == jobs) break;
    if (Clock::now() - t0 > std::chrono::minutes(5)) {
      std::fprintf(stderr, "jobs were not reconciled within 5 minutes (see %s)\n", log.c_str());
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  std::this_thread::sleep_for(std::chrono::seconds(2));
  std::printf("memory: fleet-operator with %d jobs x %d pods cached (%zu pods): VmRSS %s, VmHWM (peak) %s (target <= 128 MiB)\n",
              jobs, pods_per_job, total, ProcStatus(pid, "VmRSS").c_str(), ProcStatus(pid, "VmHWM").c_str());
  fleet::bench::StopOperator(pid);
}

}  // namespace

int main(int argc, char** argv) {
  const int workers = Arg(argc, argv, 1, 990);
  const int servers = Arg(argc, argv, 2, 10);
  const int latency_ms = Arg(argc, argv, 3, 2);
  const int concurrency = Arg(argc, argv, 4, 64);
  const int serial_pods = Arg(argc, argv, 5, 200);
  const int jobs = Arg(argc, argv, 6, 20);
  const int pods_per_job = Arg(argc, argv, 7, 500);
  if (workers > 0) BringUp(servers, workers, latency_ms, concurrency, serial_pods);
  if (jobs > 0) Memory(jobs, pods_per_job);
  return 0;
}
