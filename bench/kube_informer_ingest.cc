// Informer ingest: 10,000 running pods (~3 KB of JSON each, with status) in the fake API server.
//  (a) initial list (pages of 500) + apply into the cache, end to end, and the process RSS with the
//      pods cached (VmRSS) and at its peak during the list (VmHWM);
//  (b) watch-event ingest of N MODIFIED events (merge patches from 16 threads, plain HTTP):
//      trickle - the informer watching while the patches happen: end-to-end events/s is the rate
//                the Python fake accepts patches; the informer thread's CPU per event (HTTP read +
//                decode + apply + handler, one event per chunk) gives what one core would sustain;
//      burst   - the watch held down (fake: failNext on WATCH + dropWatches) while the patches
//                happen, then let back: the informer resumes from its resourceVersion and takes
//                all N events in one stream, as fast as the fake writes them;
//  (c) replay: the same events recorded from the watch (the lines as the server sent them), fed
//      to the informer on one thread pinned to one CPU, in alternating rounds:
//        new - Informer::ApplyLine: the line parsed straight into the cache's packed form;
//        old - nlohmann::json::parse + Informer::Apply: the DOM path the informer used before (the
//              baseline; ratio = new events/s / old events/s);
//      each with the benchmark's update handler (which makes the informer materialize the old and
//      the new object for it) and with no handlers (decode + cache only);
//  (d) list memory, same run, each path in a child process forked right after the fixture (a
//      fresh heap, before this process used cpprestsdk): the RSS before, the peak during (VmHWM,
//      reset through /proc/self/clear_refs) and the RSS with the pods cached, for an informer's
//      paged list (new) and for the previous path, Client::List's whole answer parsed and then
//      packed into an ObjectCache (old).
// The fake runs in a child process. Targets (issue 3): >= 20,000 events/s on one core; RSS <= 80
// MiB with 10,000 pods cached.
//
// usage: kube_informer_ingest [pods=10000] [events=10000] [rounds=3]
#include <sched.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "fake_apiserver_fixture.h"
#include "fleet/base/heap.h"
#include "fleet/kube/client.h"
#include "fleet/kube/informer.h"
#include "proc.h"

namespace {

using fleet::kube::Client;
using fleet::kube::Informer;
using fleet::kube::Json;
using fleet::kube::Resource;
using fleet::kube::WatchEvent;
using fleet::kube::WatchEventType;
using Clock = std::chrono::steady_clock;

// A line of this process's /proc/self/status, in KiB.
long StatusKib(const char* field) { return fleet::bench::ProcStatusKib(::getpid(), field); }

double ThreadCpuSeconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

double Mib(long kib) { return static_cast<double>(kib) / 1024.0; }

// Resets VmHWM to the current RSS (Linux >= 4.0); false where /proc does not allow it.
bool ResetPeakRss() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";
  clear_refs.flush();
  return static_cast<bool>(clear_refs);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 == 1 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// A list's memory: RSS before it (with the client), peak during it, and with the objects cached.
struct ListMemory {
  long before_kib = -1, peak_kib = -1, after_kib = -1;
  double seconds = 0;
  size_t objects = 0;
};

ListMemory MeasureList(const std::function<size_t()>& list_and_cache) {
  ListMemory m;
  m.before_kib = StatusKib("VmRSS");
  const bool reset = ResetPeakRss();
  const Clock::time_point start = Clock::now();
  m.objects = list_and_cache();
  m.seconds = Seconds(Clock::now() - start);
  m.after_kib = StatusKib("VmRSS");
  if (reset) m.peak_kib = StatusKib("VmHWM");
  return m;
}

// Runs `f` in a forked child (a fresh heap, no threads yet) and returns what it measured. The
// child leaves with _exit: the fixture's destructor (which kills the fake) is the parent's.
ListMemory InChild(const std::function<ListMemory()>& f) {
  int fds[2];
  ListMemory m;
  if (::pipe(fds) != 0) return m;
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    const ListMemory result = f();
    const ssize_t written = ::write(fds[1], &result, sizeof result);
    ::_exit(written == static_cast<ssize_t>(sizeof result) ? 0 : 1);
  }
  ::close(fds[1]);
  if (pid > 0 && ::read(fds[0], &m, sizeof m) != static_cast<ssize_t>(sizeof m)) m = ListMemory();
  ::close(fds[0]);
  if (pid > 0) ::waitpid(pid, nullptr, 0);
  return m;
}

void PrintList(const char* what, const ListMemory& m) {
  if (m.objects == 0) {
    std::printf("    %s: failed\n", what);
    return;
  }
  std::printf("    %s: %zu pods in %.0f ms; RSS %.1f MiB before, peak %.1f MiB (+%.1f), %.1f MiB with them "
              "cached  [target <= 80 MiB: %s]\n",
              what, m.objects, m.seconds * 1e3, Mib(m.before_kib), Mib(m.peak_kib), Mib(m.peak_kib - m.before_kib),
              Mib(m.after_kib), m.after_kib <= 80 * 1024 ? "meets target" : "MISSES target");
}


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


// The fake with `pods` running pods, then a quiet kubelet.
void SeedRunningPods(fleet::kube::testing::FakeApiServer& fake, int pods) {
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
}

fleet::kube::ClientOptions BenchClientOptions() {
  fleet::kube::ClientOptions client_options;
  client_options.request_timeout = std::chrono::seconds(120);
  return client_options;
}

fleet::kube::InformerOptions BenchInformerOptions() {
  fleet::kube::InformerOptions options;
  options.ns = "default";
  options.list_page_size = 500;
  options.backoff_cap = std::chrono::milliseconds(1000);   // (b) burst: reconnect soon after the fake lets it
  return options;
}

// (d) new: an informer's paged list, each page packed as it arrives.
ListMemory ListThroughInformer(const fleet::kube::testing::FakeApiServer& fake,
                               const fleet::kube::InformerOptions& options) {
  auto client = Client::Create(fake.Config(), BenchClientOptions()).value();
  Informer fresh(client, Resource::Pods(), options);
  int64_t added = 0;
  fleet::kube::EventHandlers count_adds;
  count_adds.on_add = [&](const Json&) { added++; };
  fresh.AddHandlers(count_adds);
  return MeasureList([&] {
    fresh.Start();
    if (!fresh.WaitForSync(std::chrono::seconds(300))) std::abort();
    return fresh.cache().Size();
  });
}

// (d) old: Client::List's whole answer parsed, then packed into an ObjectCache.
ListMemory ListWhole(const fleet::kube::testing::FakeApiServer& fake, const fleet::kube::InformerOptions& options) {
  auto client = Client::Create(fake.Config(), BenchClientOptions()).value();
  fleet::kube::ObjectCache cache;
  int64_t added = 0;
  return MeasureList([&] {
    // What Informer::ListAndReplace did before: every page parsed and kept until the list is
    // complete, then each item packed into the cache and handed to the add handler; then the
    // freed heap trimmed.
    {
      fleet::kube::ListOptions list_options;
      list_options.limit = options.list_page_size;
      auto list = client->List(Resource::Pods(), "default", list_options);
      if (!list.ok()) std::abort();
      for (const Json& item : (*list)["items"]) {
        cache.Put(item);
        added++;
      }
    }
    fleet::ReturnFreedHeap();
    return cache.Size();
  });
}

// One measured stretch of update deliveries. The handler (the informer's thread) fills it and
// publishes it with `done`.
struct Phase {
  int64_t target = 0;
  std::atomic<int64_t> count{0};
  double cpu_first = 0, cpu_last = 0;
  Clock::time_point first{}, last{};
  std::atomic<bool> done{false};
};

// The benchmark's handlers: adds counted, updates timed into the current phase.
fleet::kube::EventHandlers PhaseHandlers(std::atomic<int64_t>& adds, std::atomic<Phase*>& phase) {
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
  return handlers;
}

// The process's RSS (KiB) at each step, for the summary.
struct RssSteps {
  long start = 0, with_client = 0, synced = 0, synced_peak = 0, trickle = 0, ingested = 0, trimmed = 0;
};

// (a) the initial list + apply, timed; false when the informer does not sync.
bool ListAndApply(Informer& informer, int pods, RssSteps& rss) {
  const Clock::time_point list_start = Clock::now();
  informer.Start();
  if (!informer.WaitForSync(std::chrono::seconds(300))) {
    std::fprintf(stderr, "informer did not sync\n");
    return false;
  }
  const double list_s = Seconds(Clock::now() - list_start);
  rss.synced = StatusKib("VmRSS");
  rss.synced_peak = StatusKib("VmHWM");
  std::printf("(a) list + apply: %zu pods in %.0f ms = %.0f pods/s (HTTP + decode into the packed form + index)\n",
              informer.cache().Size(), list_s * 1e3, static_cast<double>(informer.cache().Size()) / list_s);
  std::printf("    packed cache: %.1f MiB of objects (%.0f bytes per pod)\n",
              static_cast<double>(informer.cache().PackedBytes()) / 1048576.0,
              static_cast<double>(informer.cache().PackedBytes()) / static_cast<double>(pods));
  return true;
}

// The patches go through the fixture's plain socket client, not fleet::kube::Client: the
// writers' own allocations (16 threads parsing 20,000 responses) would otherwise blur the RSS
// of the informer being measured.
void PatchAll(const fleet::kube::testing::FakeApiServer& fake, int pods, int events, const std::string& annotation) {
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
}

bool WaitFor(const Phase& p, int events) {
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(180);
  while (!p.done && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  if (!p.done) std::fprintf(stderr, "only %lld of %d updates arrived\n", static_cast<long long>(p.count.load()), events);
  return p.done.load();
}

void ReportIngest(const char* what, const Phase& p, int events, const char* note) {
  const double wall = Seconds(p.last - p.first);
  const double cpu = p.cpu_last - p.cpu_first;
  const double per_core = static_cast<double>(p.target - 1) / cpu;
  std::printf("(b) %s: %d MODIFIED events applied in %.0f ms = %.0f events/s end to end%s\n", what, events,
              wall * 1e3, static_cast<double>(p.target - 1) / wall, note);
  std::printf("    informer thread CPU %.1f us/event (HTTP read + decode + apply + handler) = %.0f events/s on one core"
              "  [target >= 20000: %s]\n", cpu * 1e6 / static_cast<double>(p.target - 1), per_core,
              Verdict(per_core >= 20000));
}

// (b) trickle: MODIFIED events as the patches happen.
bool IngestTrickle(const fleet::kube::testing::FakeApiServer& fake, int pods, int events,
                   std::atomic<Phase*>& phase) {
  Phase trickle;
  trickle.target = events;
  phase = &trickle;
  const Clock::time_point trickle_start = Clock::now();
  PatchAll(fake, pods, events, "bench/trickle");
  const double patch_s = Seconds(Clock::now() - trickle_start);
  const bool done = WaitFor(trickle, events);
  phase = nullptr;   // `trickle` ends here; the handler ignores what comes after it is done
  if (!done) return false;
  char note[128];
  std::snprintf(note, sizeof note, " (the fake took %.0f ms to accept the patches)", patch_s * 1e3);
  ReportIngest("trickle", trickle, events, note);
  return true;
}

// (b) burst: the same number of events, delivered at once on reconnection.
bool IngestBurst(fleet::kube::testing::FakeApiServer& fake, const Informer& informer, int pods, int events,
                 std::atomic<Phase*>& phase) {
  const std::string pods_watch = "WATCH /api/v1/namespaces/default/pods";
  fake.Control("faults", {{"failNext", 1000000}, {"code", 503}, {"match", pods_watch}});
  fake.Control("faults", {{"dropWatches", true}});
  Phase burst;
  burst.target = events;
  phase = &burst;
  PatchAll(fake, pods, events, "bench/burst");
  fake.Control("faults", {{"reset", true}});
  const bool done = WaitFor(burst, events);
  phase = nullptr;
  if (done) {
    ReportIngest("burst", burst, events,
                 informer.lists() == 1 ? " (resumed watch, no relist)" : " (RELISTED: not a watch burst)");
  }
  return done;
}

// (c) the MODIFIED events since `resource_version`, as the server sent them; false when fewer came.
bool RecordStream(Client& client, const std::string& resource_version, int events, std::vector<std::string>& lines) {
  lines.reserve(static_cast<size_t>(events));
  fleet::kube::WatchOptions watch_options;
  watch_options.resource_version = resource_version;
  watch_options.allow_bookmarks = false;
  watch_options.timeout_seconds = 60;
  fleet::kube::CancelToken never;
  fleet::kube::ApiStatus watched = client.WatchLines(
      Resource::Pods(), "default", watch_options,
      [&](std::string_view line) {
        if (Json::parse(line).value("type", "") == "MODIFIED") lines.emplace_back(line);
        return static_cast<int>(lines.size()) < events;
      },
      never);
  if (!watched.ok() || static_cast<int>(lines.size()) < events) {
    std::fprintf(stderr, "recording the stream: %s (%zu events)\n", watched.ToString().c_str(), lines.size());
    return false;
  }
  return true;
}

// This thread's CPU time to apply every line with Informer::ApplyLine.
double NewPass(Informer& target, const std::vector<std::string>& lines) {
  const double cpu0 = ThreadCpuSeconds();
  for (const std::string& line : lines) {
    if (!target.ApplyLine(line).ok()) std::abort();
  }
  return ThreadCpuSeconds() - cpu0;
}

// The same through the DOM path: nlohmann::json::parse + Informer::Apply.
double OldPass(Informer& target, const std::vector<std::string>& lines) {
  const double cpu0 = ThreadCpuSeconds();
  for (const std::string& line : lines) {
    Json parsed = Json::parse(line);   // what Client::Watch did for every event
    WatchEvent event;
    event.type = WatchEventType::kModified;
    event.object = std::move(parsed["object"]);
    target.Apply(event);
  }
  return ThreadCpuSeconds() - cpu0;
}

// (c) alternating rounds of old and new passes over `lines`, into `with_handler` and `bare`.
void Replay(Informer& with_handler, Informer& bare, const std::vector<std::string>& lines, int rounds, bool pinned,
            int cpu) {
  size_t bytes = 0;
  for (const std::string& line : lines) bytes += line.size();
  struct Variant {
    const char* name;
    Informer* target;
    std::vector<double> old_s, new_s;
  };
  Variant variants[] = {{"update handler (old + new objects materialized for it)", &with_handler, {}, {}},
                        {"no handlers (decode + cache only)", &bare, {}, {}}};
  for (int r = 0; r < rounds; ++r) {
    for (Variant& v : variants) {
      if (r % 2 == 0) {
        v.old_s.push_back(OldPass(*v.target, lines));
        v.new_s.push_back(NewPass(*v.target, lines));
      } else {
        v.new_s.push_back(NewPass(*v.target, lines));
        v.old_s.push_back(OldPass(*v.target, lines));
      }
    }
  }
  const double n = static_cast<double>(lines.size());
  std::printf("(c) replay of the recorded stream (%zu MODIFIED events, %.0f bytes each), one thread%s, "
              "median of %d alternating rounds:\n",
              lines.size(), static_cast<double>(bytes) / n,
              pinned ? (" pinned to CPU " + std::to_string(cpu)).c_str() : " (NOT pinned)", rounds);
  for (const Variant& v : variants) {
    const double old_s = Median(v.old_s), new_s = Median(v.new_s);
    std::printf("    %s:\n", v.name);
    std::printf("      old (nlohmann DOM parse + Apply): %5.1f us/event = %6.0f events/s\n", old_s * 1e6 / n, n / old_s);
    std::printf("      new (ApplyLine, packed directly):  %5.1f us/event = %6.0f events/s  ratio %.2f"
                "  [target >= 20000: %s]\n",
                new_s * 1e6 / n, n / new_s, old_s / new_s, Verdict(n / new_s >= 20000));
  }
}

void PrintRss(const RssSteps& rss, size_t cached) {
  std::printf("RSS (VmRSS): %.1f MiB at start, %.1f MiB with the client; with %zu pods cached: %.1f MiB after the "
              "list  [target <= 80 MiB: %s]\n",
              Mib(rss.start), Mib(rss.with_client), cached, Mib(rss.synced), Verdict(rss.synced <= 80 * 1024));
  std::printf("    peak during the list %.1f MiB; %.1f MiB after the trickle, %.1f MiB after the burst, %.1f MiB once "
              "freed heap is trimmed  [target <= 80 MiB: %s]\n",
              Mib(rss.synced_peak), Mib(rss.trickle), Mib(rss.ingested), Mib(rss.trimmed),
              Verdict(rss.ingested <= 80 * 1024));
}

// Pins this thread to `cpu` (one core: the informer and the writers are done); false where not allowed.
bool PinTo(int cpu) {
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpu, &one);
  return ::sched_setaffinity(0, sizeof one, &one) == 0;
}

void UnpinAll() {
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &all);
  (void)::sched_setaffinity(0, sizeof all, &all);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);   // progress shows as it happens when piped
  const int pods = argc > 1 ? std::atoi(argv[1]) : 10000;
  const int events = argc > 2 ? std::atoi(argv[2]) : 10000;
  const int rounds = std::max(1, argc > 3 ? std::atoi(argv[3]) : 3);
  RssSteps rss;
  rss.start = StatusKib("VmRSS");

  fleet::kube::testing::FakeApiServer fake(
      {"--kubelet", "auto", "--watch-cache-size", std::to_string(2 * events + 1000)});
  if (!fake.ok()) {
    std::fprintf(stderr, "fake API server did not start: %s\n", fake.error().c_str());
    return 1;
  }
  SeedRunningPods(fake, pods);
  const fleet::kube::InformerOptions options = BenchInformerOptions();

  // (d) list memory: each path in a child forked before this process used cpprestsdk (its
  // numbers are printed at the end).
  const ListMemory list_new = InChild([&] { return ListThroughInformer(fake, options); });
  const ListMemory list_old = InChild([&] { return ListWhole(fake, options); });

  auto created = Client::Create(fake.Config(), BenchClientOptions());
  if (!created.ok()) {
    std::fprintf(stderr, "client: %s\n", created.status().ToString().c_str());
    return 1;
  }
  std::shared_ptr<Client> client = *created;
  rss.with_client = StatusKib("VmRSS");

  std::atomic<int64_t> adds{0};
  std::atomic<Phase*> phase{nullptr};
  Informer informer(client, Resource::Pods(), options);
  informer.AddHandlers(PhaseHandlers(adds, phase));
  if (!ListAndApply(informer, pods, rss)) return 1;

  const std::string rv_before_patches = informer.LastResourceVersion();
  if (!IngestTrickle(fake, pods, events, phase)) return 1;
  rss.trickle = StatusKib("VmRSS");
  if (!IngestBurst(fake, informer, pods, events, phase)) return 1;
  rss.ingested = StatusKib("VmRSS");
  // How much of that is heap already freed (mostly the 16 writer threads' malloc arenas and the
  // parse garbage of 20,000 events) that glibc has not handed back yet.
  fleet::ReturnFreedHeap();
  rss.trimmed = StatusKib("VmRSS");

  // (c) replay: record the same events as the server sent them, then feed them on one thread.
  informer.Stop();
  std::vector<std::string> lines;
  if (!RecordStream(*client, rv_before_patches, events, lines)) return 1;
  const int cpu = ::sched_getcpu();
  const bool pinned = PinTo(cpu);
  // A second informer without handlers (never started): what decoding + caching cost alone.
  Informer bare(client, Resource::Pods(), options);
  for (const std::string& line : lines) {
    if (fleet::kube::ApiStatus s = bare.ApplyLine(line); !s.ok()) {
      std::fprintf(stderr, "ApplyLine: %s\n", s.ToString().c_str());
      return 1;
    }
  }
  Replay(informer, bare, lines, rounds, pinned, cpu);
  PrintRss(rss, informer.cache().Size());

  UnpinAll();
  std::printf("(d) the same list in fresh processes, same run (VmHWM reset before each list):\n");
  PrintList("new (pages packed as they arrive)      ", list_new);
  PrintList("old (Client::List parsed whole, packed)", list_old);
  return 0;
}
