// Create throughput (issue 3): N pod creates with C threads through fleet::kube::Client against the
// fake API server, and the same creates through a plain client in the same run. Target: kube
// client pods/s >= 0.8 x plain pods/s.
//
// Plain client: a minimal keep-alive HTTP/1.1 client over POSIX sockets, one connection per thread
// (HttpConnection from the test fixture), sending the same JSON body and headers. It has no rate
// limiter, retries, token handling, JSON parsing of the answer or timeouts.
// The two alternate in rounds (ABBA order), so drift in the fake affects both alike. The fake's
// and this process's CPU time are reported per phase: a Python fake that burns ~one core in both
// phases is the bottleneck for both.
//
// usage: kube_create_throughput [creates=1000] [threads=32] [rounds=4] [latency_ms=0]
//   latency_ms > 0 makes the fake delay every request (then concurrency, not the fake's CPU, limits).
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "fake_apiserver_fixture.h"
#include "fleet/kube/client.h"
#include "proc.h"

namespace {

using fleet::kube::Client;
using fleet::kube::Json;
using fleet::kube::Resource;
using fleet::kube::testing::FakeApiServer;
using fleet::kube::testing::HttpConnection;
using Clock = std::chrono::steady_clock;

Json PodNamed(const std::string& name) {
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata", {{"name", name}, {"labels", {{"fleet.paddlepaddle.org/job", "bench"}}}}},
          {"spec",
           {{"restartPolicy", "Never"},
            {"containers", {{{"name", "trainer"}, {"image", "paddlepaddle/paddle:2.5.0"},
                             {"command", {"python", "-m", "paddle.distributed.launch", "train.py"}},
                             {"env", {{{"name", "PADDLE_TRAINERS_NUM"}, {"value", "32"}}}}}}}}}};
}

struct Phase {
  double seconds = 0;
  double fake_cpu = 0;
  double self_cpu = 0;
  int done = 0;
  int failures = 0;
};

// Runs `create(thread, index)` for indexes [0, count) on `threads` threads; adds to *phase.
void RunPhase(int count, int threads, pid_t fake_pid, const std::function<bool(int, int)>& create, Phase* phase) {
  std::atomic<int> next{0};
  std::atomic<int> failures{0};
  const double fake_before = fleet::bench::ProcessCpuSeconds(fake_pid);
  const double self_before = fleet::bench::ProcessCpuSeconds(getpid());
  const auto start = Clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      for (int i; (i = next.fetch_add(1)) < count;) {
        if (!create(t, i)) ++failures;
      }
    });
  }
  for (std::thread& t : pool) t.join();
  phase->seconds += std::chrono::duration<double>(Clock::now() - start).count();
  phase->fake_cpu += fleet::bench::ProcessCpuSeconds(fake_pid) - fake_before;
  phase->self_cpu += fleet::bench::ProcessCpuSeconds(getpid()) - self_before;
  phase->done += count;
  phase->failures += failures.load();
}

}  // namespace

int main(int argc, char** argv) {
  const int creates = argc > 1 ? std::atoi(argv[1]) : 1000;
  const int threads = argc > 2 ? std::atoi(argv[2]) : 32;
  const int rounds = argc > 3 ? std::atoi(argv[3]) : 4;
  const int latency_ms = argc > 4 ? std::atoi(argv[4]) : 0;
  if (creates <= 0 || threads <= 0 || rounds <= 0 || creates % rounds != 0) {
    std::fprintf(stderr, "usage: %s [creates=1000] [threads=32] [rounds=4, dividing creates] [latency_ms=0]\n",
                 argv[0]);
    return 2;
  }

  FakeApiServer fake({"--kubelet", "manual"});  // no kubelet work in the fake beside the creates
  if (!fake.ok()) {
    std::fprintf(stderr, "fake API server: %s\n", fake.error().c_str());
    return 1;
  }
  if (latency_ms > 0) fake.Control("faults", {{"latencyMs", latency_ms}});

  fleet::kube::ClientOptions options;  // defaults: no client-side QPS limit, 5 attempts
  auto created = Client::Create(fake.Config(), options);
  if (!created.ok()) {
    std::fprintf(stderr, "client: %s\n", created.status().ToString().c_str());
    return 1;
  }
  std::shared_ptr<Client> client = *created;
  std::vector<std::unique_ptr<HttpConnection>> plain;
  for (int t = 0; t < threads; ++t) plain.push_back(std::make_unique<HttpConnection>(fake.url()));

  const std::string collection = "/api/v1/namespaces/default/pods";
  auto kube_create = [&](const std::string& prefix) {
    return [&, prefix](int, int i) {
      return client->Create(Resource::Pods(), "default", PodNamed(prefix + std::to_string(i))).ok();
    };
  };
  auto plain_create = [&](const std::string& prefix) {
    return [&, prefix](int t, int i) {
      const std::string body = PodNamed(prefix + std::to_string(i)).dump();
      auto response = plain[static_cast<size_t>(t)]->Send("POST", collection, body, {{"User-Agent", "plain"}});
      return response && response->status == 201;
    };
  };

  // Warm-up: connections, the fake's code paths, the allocator.
  Phase warmup;
  RunPhase(threads * 2, threads, fake.pid(), kube_create("warm-kube-"), &warmup);
  RunPhase(threads * 2, threads, fake.pid(), plain_create("warm-plain-"), &warmup);

  Phase kube, baseline;
  const int per_round = creates / rounds;
  for (int r = 0; r < rounds; ++r) {
    const std::string round = "r" + std::to_string(r) + "-";
    if (r % 2 == 0) {
      RunPhase(per_round, threads, fake.pid(), kube_create("kube-" + round), &kube);
      RunPhase(per_round, threads, fake.pid(), plain_create("plain-" + round), &baseline);
    } else {
      RunPhase(per_round, threads, fake.pid(), plain_create("plain-" + round), &baseline);
      RunPhase(per_round, threads, fake.pid(), kube_create("kube-" + round), &kube);
    }
  }

  const double kube_rate = kube.done / kube.seconds;
  const double plain_rate = baseline.done / baseline.seconds;
  const double ratio = kube_rate / plain_rate;
  std::printf("create throughput: %d pod creates per client, %d threads, %d interleaved rounds, fake latency %d ms\n",
              creates, threads, rounds, latency_ms);
  std::printf("%-34s %10s %10s %16s %16s %9s\n", "client", "pods/s", "seconds", "fake CPU/wall", "own CPU ms/pod",
              "failures");
  auto row = [](const char* name, const Phase& p) {
    std::printf("%-34s %10.1f %10.3f %16.2f %16.3f %9d\n", name, p.done / p.seconds, p.seconds, p.fake_cpu / p.seconds,
                1000.0 * p.self_cpu / p.done, p.failures);
  };
  row("fleet::kube::Client (cpprestsdk)", kube);
  row("plain keep-alive sockets", baseline);
  std::printf("ratio kube/plain: %.3f (target >= 0.8): %s\n", ratio, ratio >= 0.8 ? "met" : "MISSED");
  if (kube.fake_cpu / kube.seconds > 0.85 && baseline.fake_cpu / baseline.seconds > 0.85) {
    std::printf("note: the fake API server (Python, one GIL) used ~one core in both phases: it is the bottleneck\n");
  }
  return (kube.failures == 0 && baseline.failures == 0 && ratio >= 0.8) ? 0 : 1;
}
