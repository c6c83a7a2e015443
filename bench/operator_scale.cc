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
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "fake_apiserver_fixture.h"
#include "operator_bench_util.h"
#include "harness.h"
#include "fleet/kube/client.h"
#include "fleet/kube/rate_limiter.h"
#include "fleet/operator/controller.h"
#include "fleet/operator/flags.h"
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
using fleet::bench::ReadProcStatus;
using fleet::bench::WriteKubeconfig;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

int Arg(int argc, char** argv, int i, int fallback) { return argc > i ? std::atoi(argv[i]) : fallback; }

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
        const std::string ip = e.object.value("status", Json::object()).value("podIP", "");
        if (!ip.empty()) ips_[name] = ip;
        if (ips_.size() >= want_) {
          done_at_ = Clock::now();
          done_ = true;
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
  bool WaitedUntil(Clock::time_point deadline, Clock::time_point* at) {
    while (!done_ && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    *at = done_at_;
    return done_;
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
  std::atomic<bool> done_{false};
  Clock::time_point done_at_;
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
bool ListsPublished(Client& client, const std::string& ns, const std::string& job, size_t pods) {
  auto cm = client.Get(Resource::ConfigMaps(), ns, fleet::op::EndpointsConfigMapName(job));
  if (!cm.ok()) return false;
  const std::string hosts = (*cm)["metadata"].value("annotations", Json::object()).value("fleet.paddlepaddle.org/hosts-digest", "");
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

// The number of pods in `ns` running with an address (a list of one item: the count comes back
// as remainingItemCount, without serializing every pod).
size_t PodsRunning(Client& client, const std::string& ns) {
  auto list = client.List(Resource::Pods(), ns, {"", "status.phase=Running", 1, ""});
  if (!list.ok()) return 0;
  return (*list)["items"].size() + (*list)["metadata"].value("remainingItemCount", size_t{0});
}

void WaitUntilRunning(Client& client, const std::string& ns, size_t pods) {
  for (int i = 0; i < 3000 && PodsRunning(client, ns) < pods; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
}

// fleet_operator_pods_created_total, read in-process.
double PodsCreated(prometheus::Registry& registry) {
  for (const auto& family : registry.Collect()) {
    if (family.name == "fleet_operator_pods_created_total" && !family.metric.empty()) return family.metric[0].counter.value;
  }
  return 0;
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
  const std::vector<Json> pods = PodsFor(job, "parallel");
  double by_hand = 0;
  double parallel = 0;
  {
    AddressWatch addresses(client, "parallel", total);
    const auto t0 = Clock::now();
    parallel = CreateParallel(*client, pods, "parallel", concurrency);
    Clock::time_point all_addressed;
    if (!addresses.WaitedUntil(t0 + std::chrono::minutes(5), &all_addressed)) {
      std::fprintf(stderr, "the baseline's pods did not all get addresses within 5 minutes\n");
      std::exit(1);
    }
    std::string list;
    for (const std::string& ip : addresses.Hosts(pods)) list += (list.empty() ? "" : ",") + ip + ":6170";
    (void)client->Create(Resource::ConfigMaps(), "parallel",
                         {{"metadata", {{"name", "lists"}}}, {"data", {{"PADDLE_TRAINER_ENDPOINTS", list}}}});
    by_hand = Seconds(Clock::now() - t0);
  }
  std::printf("  plain parallel client (%d in flight): %zu pods created in %.2f s (%.0f pods/s); "
              "created, all addressed and the lists written in %.2f s\n",
              concurrency, total, parallel, static_cast<double>(total) / parallel, by_hand);
  WaitUntilRunning(*client, "parallel", total);

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

  const auto t0 = Clock::now();
  if (!client->Create(fleet::op::FleetJobResource(), "operator", job).ok()) std::exit(1);
  double all_created = 0;
  while (!ListsPublished(*client, "operator", "big", total)) {
    if (all_created == 0 && PodsCreated(*registry) >= static_cast<double>(total)) all_created = Seconds(Clock::now() - t0);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (Clock::now() - t0 > std::chrono::minutes(5)) {
      std::fprintf(stderr, "the operator did not publish the lists within 5 minutes\n");
      std::exit(1);
    }
  }
  const double published = Seconds(Clock::now() - t0);
  if (all_created == 0) all_created = published;
  std::printf("  fleet-operator (default flags: qps %.0f, burst %d, %d pod writes in flight): all pods created after %.2f s, "
              "lists published after %.2f s\n", flags.qps, flags.burst, flags.controller.create_concurrency, all_created, published);
  std::printf("  ratio operator / plain parallel client doing the whole job: %.2f (target <= 1.5); "
              "against its creates alone: %.2f\n", published / by_hand, published / parallel);
  WaitUntilRunning(*client, "operator", total);

  // Steady state: the job runs; a reconcile finds nothing to do.
  for (int i = 0; i < 200; ++i) {
    auto got = client->Get(fleet::op::FleetJobResource(), "operator", "big");
    if (got.ok() && (*got)["status"].value("phase", "") == "Running") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
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
  const double serial = CreateSerial(*client, PodsFor(job, "serial"), static_cast<size_t>(serial_pods), "serial", 20);
  const double serial_rate = serial_pods / serial;
  std::printf("  serial 20-QPS client: %d pods in %.2f s (%.1f pods/s) -> %.1f s to create the %zu pods; ratio to the operator %.1f\n",
              serial_pods, serial, serial_rate, static_cast<double>(total) / serial_rate, total,
              static_cast<double>(total) / serial_rate / published);

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
              jobs, pods_per_job, total, ReadProcStatus(pid, "VmRSS").c_str(), ReadProcStatus(pid, "VmHWM").c_str());
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
