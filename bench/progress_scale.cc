// Training progress at scale (issue 16): what a job of many ranks costs the API server, and how
// stale its status.progress is.
//
// The fake API server (loopback pod network: every pod has its own 127.x address) and the real
// fleet-operator binary with --progress-interval; one collective FleetJob of `pods` pods running
// `ranks_per_pod` processes each. Each pod's sidecar is played by a stand-in serving GET /status
// on the pod's address, as fleet-sidecar does, reporting its ranks' steps advancing at 10 steps/s
// (one rank in the job at 8/s: the straggler). For `seconds` seconds it counts:
//   - the job's status writes (PUT .../status, from the fake's request log) per second, against
//     the bound (1 per --progress-interval) and against the naive design of every rank writing
//     its own progress once per interval;
//   - every other API request the operator makes in that window (none expected);
//   - latency: from the median rank reaching a step to the FleetJob showing it (polled every
//     50 ms; the sidecar's own log poll, 500 ms by default, comes on top);
//   - the operator's CPU (utime+stime) per second of the window, and its collection time
//     (fleet_operator_progress_collection_seconds).
//
// usage: progress_scale [pods=1000] [ranks_per_pod=1] [interval_s=5] [seconds=30]
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "fake_apiserver_fixture.h"
#include "fleet/kube/client.h"
#include "fleet/operator/controller.h"
#include "harness.h"
#include "operator_bench_util.h"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using fleet::bench::ProcessCpuSeconds;
using fleet::kube::Client;
using fleet::kube::Json;
using fleet::kube::Resource;
using fleet::kube::testing::FakeApiServer;
using fleet::kube::testing::TempDir;
using Clock = std::chrono::steady_clock;

int Arg(int argc, char** argv, int i, int fallback) { return argc > i ? std::atoi(argv[i]) : fallback; }
double Since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

constexpr double kStepsPerSecond = 10;
constexpr int kStragglerRank = 7;

// Every pod's sidecar, on one io_context thread: accept, read the request, answer, close.
class StandInSidecars {
 public:
  StandInSidecars(const std::vector<std::string>& ips, int port, int ranks_per_pod)
      : ranks_per_pod_(ranks_per_pod), start_(Clock::now()) {
    for (size_t i = 0; i < ips.size(); ++i) {
      auto acceptor = std::make_unique<asio::ip::tcp::acceptor>(io_);
      const asio::ip::tcp::endpoint endpoint(asio::ip::make_address(ips[i]), static_cast<uint16_t>(port));
      acceptor->open(endpoint.protocol());
      acceptor->set_option(asio::socket_base::reuse_address(true));
      acceptor->bind(endpoint);
      acceptor->listen();
      Accept(*acceptor, static_cast<int>(i) * ranks_per_pod);
      acceptors_.push_back(std::move(acceptor));
    }
    thread_ = std::thread([this] { io_.run(); });
  }
  ~StandInSidecars() {
    io_.stop();
    thread_.join();
  }
  Clock::time_point start() const { return start_; }
  uint64_t answered() const { return answered_; }

 private:
  struct Exchange {
    explicit Exchange(asio::io_context& io) : socket(io) {}
    asio::ip::tcp::socket socket;
    beast::flat_buffer buffer;
    http::request<http::empty_body> request;
    http::response<http::string_body> response;
  };

  void Accept(asio::ip::tcp::acceptor& acceptor, int first_rank) {
    auto x = std::make_shared<Exchange>(io_);
    acceptor.async_accept(x->socket, [this, &acceptor, first_rank, x](beast::error_code ec) {
      if (ec) return;
      Accept(acceptor, first_rank);
      http::async_read(x->socket, x->buffer, x->request, [this, first_rank, x](beast::error_code read_error, size_t) {
        if (read_error) return;
        x->response = {http::status::ok, 11};
        x->response.set(http::field::content_type, "application/json");
        x->response.body() = Status(first_rank);
        x->response.prepare_payload();
        http::async_write(x->socket, x->response, [this, x](beast::error_code, size_t) {
          ++answered_;
          beast::error_code ignored;
          x->socket.shutdown(asio::ip::tcp::socket::shutdown_both, ignored);
        });
      });
    });
  }

  // What fleet-sidecar's GET /status says of these ranks now.
  std::string Status(int first_rank) const {
    const double t = Since(start_);
    Json ranks = Json::array();
    for (int r = first_rank; r < first_rank + ranks_per_pod_; ++r) {
      const double rate = r == kStragglerRank ? kStepsPerSecond * 0.8 : kStepsPerSecond;
      const auto steps = static_cast<int64_t>(t * rate);
      ranks.push_back({{"rank", r}, {"step", steps}, {"steps", steps}, {"idleSeconds", 0.05}, {"totalSteps", 100000},
                       {"loss", 1.0 / (1.0 + static_cast<double>(steps))}, {"stepSeconds", 1 / rate}});
    }
    return Json{{"ready", true}, {"ranks", ranks}, {"stalled", Json::array()}}.dump();
  }

  asio::io_context io_;
  const int ranks_per_pod_;
  const Clock::time_point start_;
  std::vector<std::unique_ptr<asio::ip::tcp::acceptor>> acceptors_;
  std::atomic<uint64_t> answered_{0};
  std::thread thread_;
};

std::string MetricLine(int port, const std::string& name) {
  std::string out;
  fleet::op::e2e::RunCommand("curl -s http://127.0.0.1:" + std::to_string(port) + "/metrics", &out);
  std::istringstream lines(out);
  std::string line, found;
  while (std::getline(lines, line)) {
    if (line.rfind(name, 0) == 0) found += "    " + line + "\n";
  }
  return found;
}

// The pods' addresses by pod index once the job is Running; empty when it did not run within 300 s.
std::vector<std::string> WaitForRunningPodIps(Client& client, Clock::time_point t0) {
  std::vector<std::string> ips;
  while (Since(t0) < 300) {
    auto got = client.Get(fleet::op::FleetJobResource(), "default", "big");
    if (got.ok() && got->value("status", Json::object()).value("phase", "") == "Running") {
      auto list = client.List(Resource::Pods(), "default");
      std::vector<std::pair<int, std::string>> by_index;
      for (const Json& pod : (*list)["items"]) {
        const std::string name = pod["metadata"]["name"];
        by_index.emplace_back(std::stoi(name.substr(name.rfind('-') + 1)), pod["status"]["podIP"].get<std::string>());
      }
      std::sort(by_index.begin(), by_index.end());
      for (auto& [index, ip] : by_index) ips.push_back(ip);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return ips;
}

// Seconds from the sidecars' start to the job's first status.progress (at most 120).
double WaitForFirstProgress(Client& client, const StandInSidecars& sidecars) {
  while (Since(sidecars.start()) < 120) {
    auto got = client.Get(fleet::op::FleetJobResource(), "default", "big");
    if (got.ok() && got->value("status", Json::object()).contains("progress")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Since(sidecars.start());
}

// What the FleetJob showed during the window, polled every 50 ms.
struct Window {
  double seconds = 0, operator_cpu = 0;
  std::vector<double> latencies;   // per update: the mean wait of the steps it shows first (sorted)
  double worst = 0;
  Json last;                       // the last status.progress
};

Window WatchProgress(Client& client, const StandInSidecars& sidecars, pid_t pid, int seconds) {
  Window w;
  const double cpu0 = ProcessCpuSeconds(pid);
  const auto w0 = Clock::now();
  std::string last_update;
  while (Since(w0) < seconds) {
    auto got = client.Get(fleet::op::FleetJobResource(), "default", "big");
    if (got.ok()) {
      const Json p = got->value("status", Json::object()).value("progress", Json::object());
      if (p.value("updateTime", "") != last_update) {
        last_update = p.value("updateTime", "");
        // The median rank reached step s at start + s / rate: the steps this update shows for the
        // first time waited from then until now; the first of them the longest.
        const double now = Since(sidecars.start());
        const int64_t step = p.value("step", 0);
        if (!w.last.is_null()) {
          const int64_t first_new = w.last.value("step", 0) + 1;
          w.latencies.push_back(now - static_cast<double>(first_new + step) / 2 / kStepsPerSecond);
          w.worst = std::max(w.worst, now - static_cast<double>(first_new) / kStepsPerSecond);
        }
        w.last = p;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  w.seconds = Since(w0);
  w.operator_cpu = ProcessCpuSeconds(pid) - cpu0;
  std::sort(w.latencies.begin(), w.latencies.end());
  return w;
}

// The window's API requests: the job's status writes, and every other one the operator made.
struct Requests {
  int writes = 0, other = 0;
};

Requests CountRequests(FakeApiServer& fake) {
  const std::string status_path = "/apis/fleet.paddlepaddle.org/v1alpha1/namespaces/default/fleetjobs/big/status";
  Requests n;
  for (const Json& r : fake.Requests()) {
    const std::string path = r.value("path", "");
    const bool mine = r.value("method", "") == "GET" && path.find("/fleetjobs/big") != std::string::npos;   // the poll above
    if (r.value("method", "") == "PUT" && path == status_path) ++n.writes;
    else if (!mine && !r.value("watch", false) && path != "/api/v1/namespaces/default/pods") ++n.other;
  }
  return n;
}

void Report(const Window& w, const Requests& n, int ranks, int interval, uint64_t answered, int metrics_port) {
  const double rate = n.writes / w.seconds;
  std::printf("  status writes: %d in %.1f s = %.3f/s (bound 1 per %d s = %.3f/s); naive per-rank writes at the same interval: %.0f/s (%.0fx)\n",
              n.writes, w.seconds, rate, interval, 1.0 / interval, static_cast<double>(ranks) / interval,
              rate > 0 ? static_cast<double>(ranks) / interval / rate : 0.0);
  std::printf("  other operator API requests in the window: %d\n", n.other);
  if (!w.latencies.empty()) {
    std::printf("  step reached -> visible in the FleetJob: median %.2f s, worst %.2f s (%zu updates, polled every 50 ms)\n",
                w.latencies[w.latencies.size() / 2], w.worst, w.latencies.size());
  }
  std::printf("  operator CPU: %.3f s in %.1f s = %.1f%% of a core; GET /status answered: %llu\n", w.operator_cpu,
              w.seconds, 100 * w.operator_cpu / w.seconds, static_cast<unsigned long long>(answered));
  std::printf("  slowest: %s, status.progress %zu bytes\n", w.last.value("slowestText", "").c_str(), w.last.dump().size());
  std::printf("%s", MetricLine(metrics_port, "fleet_operator_progress_collection_seconds_sum").c_str());
  std::printf("%s", MetricLine(metrics_port, "fleet_operator_progress_collection_seconds_count").c_str());
  std::printf("%s", MetricLine(metrics_port, "fleet_operator_progress_requests_total").c_str());
}

}  // namespace

int main(int argc, char** argv) {
  const int pods = Arg(argc, argv, 1, 1000);
  const int ranks_per_pod = Arg(argc, argv, 2, 1);
  const int interval = Arg(argc, argv, 3, 5);
  const int seconds = Arg(argc, argv, 4, 30);

  FakeApiServer fake({"--nodes", "100"});
  if (!fake.ok()) {
    std::fprintf(stderr, "%s\n", fake.error().c_str());
    return 1;
  }
  fake.Control("config", {{"podNetwork", "loopback"}});
  auto client = Client::Create(fake.Config()).value();
  fleet::bench::CreateCrd(*client);
  const int sidecar_port = 19102;
  Json job = fleet::bench::FleetJobObject("default", "big", 0, pods);
  job["spec"]["processesPerPod"] = ranks_per_pod;
  job["spec"]["sidecar"] = {{"metricsPort", sidecar_port}};

  TempDir dir;
  const std::string kubeconfig = fleet::bench::WriteKubeconfig(dir, fake.url());
  const std::string log = dir.path() + "/operator.log";
  const int metrics_port = 19180;
  const pid_t pid = fleet::bench::SpawnOperator(
      log, {"--kubeconfig=" + kubeconfig, "--metrics-bind-address=127.0.0.1:" + std::to_string(metrics_port),
            "--health-probe-bind-address=0", "--progress-interval=" + std::to_string(interval)});
  (void)client->Create(fleet::op::FleetJobResource(), "default", job);

  // Running: every pod has an address.
  const auto t0 = Clock::now();
  const std::vector<std::string> ips = WaitForRunningPodIps(*client, t0);
  if (ips.size() != static_cast<size_t>(pods)) {
    std::fprintf(stderr, "the job did not run within 300 s (see %s)\n", log.c_str());
    ::kill(pid, SIGKILL);
    return 1;
  }
  std::printf("progress_scale: %d pods x %d ranks = %d ranks, --progress-interval=%ds, %ds window; running after %.1f s\n",
              pods, ranks_per_pod, pods * ranks_per_pod, interval, seconds, Since(t0));

  StandInSidecars sidecars(ips, sidecar_port, ranks_per_pod);
  // The first summary, then the window.
  const double first_seen = WaitForFirstProgress(*client, sidecars);
  fake.ClearRequests();
  const Window window = WatchProgress(*client, sidecars, pid, seconds);
  const Requests requests = CountRequests(fake);
  std::printf("  first status.progress %.1f s after the sidecars started answering\n", first_seen);
  Report(window, requests, pods * ranks_per_pod, interval, sidecars.answered(), metrics_port);
  fleet::bench::StopOperator(pid);
  return 0;
}
