// Informer ingest: 10,000 running pods (~3 KB of JSON each, with status) in the fake API server.
//  (a) initial list (pages of 500) + apply into the cache, end to end;
//  (b) watch-event ingest of N MODIFIED events (merge patches from 16 threads, plain HTTP):
//      trickle - the informer watching while the patches happen: end-to-end events/s is the rate
//                the Python fake accepts patches; the informer thread's CPU per event (HTTP read +
//                JSON parse + apply, one event per chunk) gives what one core would sustain;
//      burst   - the watch held down (fake: failNext on WATCH + dropWatches) while the patches
//                happen, then let back: the informer resumes from its resourceVersion and takes
//                all N events in one stream, as fast as the fake writes them;
//      replay  - the same events recorded from a watch, fed to Informer::Apply on one thread:
//                parse + apply, and apply alone (the cache path: pack, old object for on_update,
//                index update, handler);
//  RSS (VmRSS) of this process with the pods cached. The fake runs in a child process.
// Targets (issue 3): >= 20,000 events/s on one core; RSS <= 80 MiB with 10,000 pods cached.
//
// usage: kube_informer_ingest [pods=10000] [events=10000]
#include <time.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "fake_apiserver_fixture.h"
#include "fleet/kube/client.h"
#include "fleet/kube/informer.h"

namespace {

using fleet::kube::Client;
using fleet::kube::Informer;
using fleet::kube::Json;
using fleet::kube::Resource;
using fleet::kube::WatchEvent;
using fleet::kube::WatchEventType;
using Clock = std::chrono::steady_clock;

long StatusKib(const char* field) {
  std::ifstream status("/proc/self/status");
  std::string line;
  const std::string prefix = std::string(field) + ":";
  while (std::getline(status, line)) {
    if (line.rfind(prefix, 0) == 0) return std::strtol(line.c_str() + prefix.size(), nullptr, 10);
  }
  return -1;
}

double ThreadCpuSeconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

double Mib(long kib) { return static_cast<double>(kib) / 1024.0; }

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// A FleetJob worker pod as the operator renders it (the fake's kubelet adds status when it runs).
Json WorkerPodTemplate() {
  return Json::parse(R"({
    "metadata": {
      "labels": {"app.kubernetes.io/name": "fleetjob", "fleet.paddlepaddle.org/job-name": "trainer",
                 "fleet.paddlepaddle.org/replica-type": "worker"},
      "annotations": {"fleet.paddlepaddle.org/spec-hash": "5d41402abc4b2a76b9719d911017c592"},
      "ownerReferences": [{"apiVersion": "fleet.paddlepaddle.org/v1alpha1", "kind": "FleetJob", "name": "trainer",
                           "uid": "3f1c2a4e-8f7b-4c1d-9a2e-6b5d4c3b2a19", "controller": true,
                           "blockOwnerDeletion": true}]},
    "spec": {
      "restartPolicy": "Never",
      "containers": [{
        "name": "paddle",
        "image": "registry.example.com/paddle/paddle:2.6.1-gpu-cuda12.0",
        "command": ["python", "-m", "paddle.distributed.launch"],
        "args": ["--nnodes", "4", "train.py", "--epochs", "10"],
        "env": [{"name": "PADDLE_TRAINER_ID", "value": "0"}, {"name": "PADDLE_TRAINERS_NUM", "value": "4"},
                {"name": "PADDLE_TRAINER_ENDPOINTS", "value": "trainer-worker-0.trainer:6170,trainer-worker-1.trainer:6170"},
                {"name": "PADDLE_CURRENT_ENDPOINT", "value": "trainer-worker-0.trainer:6170"},
                {"name": "PADDLE_JOB_ID", "value": "default-trainer"},
                {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": "master", "containerPort": 6170, "protocol": "TCP"}],
        "resources": {"limits": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"},
                      "requests": {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "1"}},
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}]}],
      "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]}})");
}

const char* Verdict(bool ok) { return ok ? "meets target" : "MISSES target"; }

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);   // progress shows as it happens when piped
  const int pods = argc > 1 ? std::atoi(argv[1]) : 10000;
  const int events = argc > 2 ? std::atoi(argv[2]) : 10000;
  const long rss_start_kib = StatusKib("VmRSS");

  // ---- fixture: the fake with `pods` running pods, then a quiet kubelet ----
  fleet::kube::testing::FakeApiServer fake(
      {"--kubelet", "auto", "--watch-cache-size", std::to_string(2 * events + 1000)});
  if (!fake.ok()) {
    std::fprintf(stderr, "fake API server did not start: %s\n", fake.error().c_str());
    return 1;
  }
  const Clock::time_point seed_start = Clock::now();
  fake.Control("seed", {{"path", "/api/v1/namespaces/default/pods"},
                        {"count", pods},
                        {"namePrefix", "trainer-worker-"},
                        {"template", WorkerPodTemplate()}});
  // The kubelet stand-in runs every pod (bind, IPs, Running status); wait until it is done.
  std::string last_rv;
  for (int stable = 0; stable < 5;) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    const std::string rv = fake.Control("state", Json::object(), "GET").value("resourceVersion", "");
    stable = rv == last_rv ? stable + 1 : 0;
    last_rv = rv;
  }
  fake.Control("config", {{"kubelet", "manual"}});
  std::printf("fixture: %d running pods seeded in %.1f s (resourceVersion %s)\n", pods,
              Seconds(Clock::now() - seed_start), last_rv.c_str());

  fleet::kube::ClientOptions client_options;
  client_options.request_timeout = std::chrono::seconds(120);
  auto created = Client::Create(fake.Config(), client_options);
  if (!created.ok()) {
    std::fprintf(stderr, "client: %s\n", created.status().ToString().c_str());
    return 1;
  }
  std::shared_ptr<Client> client = *created;
  const long rss_before_kib = StatusKib("VmRSS");

  // ---- (a) initial list + apply ----
  fleet::kube::InformerOptions options;
  options.ns = "default";
  options.list_page_size = 500;
  options.backoff_cap = std::chrono::milliseconds(1000);   // (b) burst: reconnect soon after the fake lets it
  Informer informer(client, Resource::Pods(), options);
  std::atomic<int64_t> adds{0};
  // One measured stretch of update deliveries. The handler (the informer's thread) fills it and
  // publishes it with `done`.
  struct Phase {
    int64_t target = 0;
    std::atomic<int64_t> count{0};
    double cpu_first = 0, cpu_last = 0;
    Clock::time_point first{}, last{};
    std::atomic<bool> done{false};
  };
  std::atomic<Phase*> phase{nullptr};
  fleet::kube::EventHandlers handlers;
  handlers.on_add = [&](const Json&) { adds++; };
  handlers.on_update = [&](const Json& old_object, const Json& new_object) {
    // What a controller's filter does: compare versions, then it would enqueue the key.
    if (old_object["metadata"]["resourceVersion"] == new_object["metadata"]["resourceVersion"]) return;
    Phase* p = phase.load();
    if (p == nullptr || p->done) return;
    const int64_t n = ++p->count;
    if (n == 1) {
      p->cpu_first = ThreadCpuSeconds();
      p->first = Clock::now();
    }
    if (n == p->target) {
      p->cpu_last = ThreadCpuSeconds();
      p->last = Clock::now();
      p->done = true;
    }
  };
  informer.AddHandlers(handlers);
  const Clock::time_point list_start = Clock::now();
  informer.Start();
  if (!informer.WaitForSync(std::chrono::seconds(300))) {
    std::fprintf(stderr, "informer did not sync\n");
    return 1;
  }
  const double list_s = Seconds(Clock::now() - list_start);
  const long rss_synced_kib = StatusKib("VmRSS");
  const long hwm_synced_kib = StatusKib("VmHWM");
  std::printf("(a) list + apply: %zu pods in %.0f ms = %.0f pods/s (HTTP + JSON parse + pack + index)\n",
              informer.cache().Size(), list_s * 1e3, static_cast<double>(informer.cache().Size()) / list_s);
  std::printf("    packed cache: %.1f MiB of objects (%.0f bytes per pod)\n",
              static_cast<double>(informer.cache().PackedBytes()) / 1048576.0,
              static_cast<double>(informer.cache().PackedBytes()) / static_cast<double>(pods));

  // The patches go through the fixture's plain socket client, not fleet::kube::Client: the
  // writers' own allocations (16 threads parsing 20,000 responses) would otherwise blur the RSS
  // of the informer being measured.
  auto patch_all = [&](const std::string& annotation) {
    std::vector<std::thread> writers;
    constexpr int kWriters = 16;
    for (int w = 0; w < kWriters; ++w) {
      writers.emplace_back([&, w] {
        fleet::kube::testing::HttpConnection http(fake.url());
        for (int i = w; i < events; i += kWriters) {
          const std::string path = "/api/v1/namespaces/default/pods/trainer-worker-" + std::to_string(i % pods);
          const std::string body = R"({"metadata":{"annotations":{")" + annotation + R"(":")" + std::to_string(i) + R"("}}})";
          auto response = http.Send("PATCH", path, body, {{"Content-Type", "application/merge-patch+json"}});
          if (!response || response->status != 200) {
            std::fprintf(stderr, "patch %s: %s\n", path.c_str(),
                         response ? std::to_string(response->status).c_str() : http.error().c_str());
          }
        }
      });
    }
    for (std::thread& t : writers) t.join();
  };
  auto wait_for = [&](Phase& p) {
    const Clock::time_point deadline = Clock::now() + std::chrono::seconds(180);
    while (!p.done && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!p.done) std::fprintf(stderr, "only %lld of %d updates arrived\n", static_cast<long long>(p.count.load()), events);
    return p.done.load();
  };
  auto report = [&](const char* what, const Phase& p, const char* note) {
    const double wall = Seconds(p.last - p.first);
    const double cpu = p.cpu_last - p.cpu_first;
    const double per_core = static_cast<double>(p.target - 1) / cpu;
    std::printf("(b) %s: %d MODIFIED events applied in %.0f ms = %.0f events/s end to end%s\n", what, events,
                wall * 1e3, static_cast<double>(p.target - 1) / wall, note);
    std::printf("    informer thread CPU %.1f us/event (HTTP read + parse + apply) = %.0f events/s on one core"
                "  [target >= 20000: %s]\n", cpu * 1e6 / static_cast<double>(p.target - 1), per_core,
                Verdict(per_core >= 20000));
  };

  // ---- (b) trickle: MODIFIED events as the patches happen ----
  const std::string rv_before_patches = informer.LastResourceVersion();
  Phase trickle;
  trickle.target = events;
  phase = &trickle;
  const Clock::time_point trickle_start = Clock::now();
  patch_all("bench/trickle");
  const double patch_s = Seconds(Clock::now() - trickle_start);
  if (!wait_for(trickle)) return 1;
  char note[128];
  std::snprintf(note, sizeof note, " (the fake took %.0f ms to accept the patches)", patch_s * 1e3);
  report("trickle", trickle, note);
  const long rss_trickle_kib = StatusKib("VmRSS");

  // ---- (b) burst: the same number of events, delivered at once on reconnection ----
  const std::string pods_watch = "WATCH /api/v1/namespaces/default/pods";
  fake.Control("faults", {{"failNext", 1000000}, {"code", 503}, {"match", pods_watch}});
  fake.Control("faults", {{"dropWatches", true}});
  Phase burst;
  burst.target = events;
  phase = &burst;
  patch_all("bench/burst");
  fake.Control("faults", {{"reset", true}});
  if (!wait_for(burst)) return 1;
  report("burst", burst, informer.lists() == 1 ? " (resumed watch, no relist)" : " (RELISTED: not a watch burst)");
  phase = nullptr;
  const long rss_ingested_kib = StatusKib("VmRSS");
#if defined(__GLIBC__)
  // How much of that is heap already freed (mostly the 16 writer threads' malloc arenas and the
  // parse garbage of 20,000 events) that glibc has not handed back yet.
  malloc_trim(0);
#endif
  const long rss_trimmed_kib = StatusKib("VmRSS");

  // ---- (b) replay: record the same events, then feed them to Apply on this thread ----
  informer.Stop();
  std::vector<std::string> lines;
  lines.reserve(static_cast<size_t>(events));
  fleet::kube::WatchOptions watch_options;
  watch_options.resource_version = rv_before_patches;
  watch_options.allow_bookmarks = false;
  watch_options.timeout_seconds = 60;
  fleet::kube::CancelToken never;
  fleet::kube::ApiStatus watched = client->Watch(
      Resource::Pods(), "default", watch_options,
      [&](const WatchEvent& e) {
        if (e.type == WatchEventType::kModified) {
          lines.push_back(Json{{"type", "MODIFIED"}, {"object", e.object}}.dump());
        }
        return static_cast<int>(lines.size()) < events;
      },
      never);
  if (!watched.ok() || static_cast<int>(lines.size()) < events) {
    std::fprintf(stderr, "recording the stream: %s (%zu events)\n", watched.ToString().c_str(), lines.size());
    return 1;
  }
  size_t bytes = 0;
  for (const std::string& line : lines) bytes += line.size();

  std::vector<WatchEvent> parsed(lines.size());
  double parse_apply_s = 0;
  {
    const double cpu0 = ThreadCpuSeconds();
    for (size_t i = 0; i < lines.size(); ++i) {
      Json line = Json::parse(lines[i]);
      parsed[i].type = WatchEventType::kModified;
      parsed[i].object = std::move(line["object"]);
      informer.Apply(parsed[i]);
    }
    parse_apply_s = ThreadCpuSeconds() - cpu0;
  }
  double apply_s = 0;
  {
    const double cpu0 = ThreadCpuSeconds();
    for (const WatchEvent& e : parsed) informer.Apply(e);
    apply_s = ThreadCpuSeconds() - cpu0;
  }
  const double n = static_cast<double>(lines.size());
  std::printf("(b) replay of the recorded stream (%zu events, %.0f bytes each), one thread:\n", lines.size(),
              static_cast<double>(bytes) / n);
  std::printf("    parse + apply: %.1f us/event = %.0f events/s  [target >= 20000: %s]\n", parse_apply_s * 1e6 / n,
              n / parse_apply_s, Verdict(n / parse_apply_s >= 20000));
  std::printf("    apply alone:   %.1f us/event = %.0f events/s  [target >= 20000: %s]\n", apply_s * 1e6 / n,
              n / apply_s, Verdict(n / apply_s >= 20000));

  std::printf("RSS (VmRSS): %.1f MiB at start, %.1f MiB with the client; with %zu pods cached: %.1f MiB after the "
              "list  [target <= 80 MiB: %s]\n",
              Mib(rss_start_kib), Mib(rss_before_kib), informer.cache().Size(), Mib(rss_synced_kib),
              Verdict(rss_synced_kib <= 80 * 1024));
  std::printf("    peak during the list %.1f MiB (Client::List returns the whole list parsed); %.1f MiB after the "
              "trickle, %.1f MiB after the burst, %.1f MiB once freed heap is trimmed  [target <= 80 MiB: %s]\n",
              Mib(hwm_synced_kib), Mib(rss_trickle_kib), Mib(rss_ingested_kib), Mib(rss_trimmed_kib),
              Verdict(rss_ingested_kib <= 80 * 1024));
  return 0;
}
