// ProgressCollector: how training progress gets from the sidecars to status.progress without
// flooding the API server.
//
// Every `interval` it reads GET /status from the sidecar of every running trainer pod of every
// running job — directly, pod to pod, over HTTP: no API request — with at most `concurrency`
// requests in flight, each bounded in time and size. It keeps each job's latest summary
// (SummarizeProgress) and tells the controller which jobs' summaries changed. It writes nothing:
// the planner copies the summary into status.progress at most once per interval per job, so
// progress costs at most one status write per job per interval, whatever the number of ranks
// (docs/operator.md, "Training progress"). The sidecars themselves write their pod condition only
// when its state changes, never for progress.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fleet/operator/progress.h"

namespace fleet::op {

// One job's trainer pods whose sidecars to ask, as the controller's caches see them now.
struct ProgressJob {
  struct Pod {
    std::string name;
    std::string role;
    std::string ip;
    int port = 0;        // the sidecar's HTTP port (spec.sidecar.metricsPort)
  };
  std::string key;       // namespace/name
  int run = 0;           // status.run: a summary is for one run's pods
  std::map<std::string, int> expected_ranks;
  int64_t total_steps = 0;
  std::vector<Pod> pods;
};

struct ProgressCollectorOptions {
  std::chrono::milliseconds interval{10000};
  int concurrency = 32;                        // GET /status in flight
  std::chrono::milliseconds timeout{2000};     // per request: connect, send, receive
  size_t max_body = 256 * 1024;                // a sidecar's answer (64 ranks take ~15 KiB)
};

class ProgressCollector {
 public:
  using Targets = std::function<std::vector<ProgressJob>()>;
  using Changed = std::function<void(const std::string& key)>;
  // After each collection: requests made, how many failed, seconds it took (metrics).
  using Collected = std::function<void(size_t requests, size_t failures, double seconds)>;

  ProgressCollector(ProgressCollectorOptions options, Targets targets, Changed changed, Collected collected = nullptr);
  ~ProgressCollector();
  ProgressCollector(const ProgressCollector&) = delete;
  ProgressCollector& operator=(const ProgressCollector&) = delete;

  void Start();   // collects at once, then every interval
  void Stop();

  // One collection of every target, now (the loop's body).
  void CollectOnce();
  // The job's latest summary for `run` (nullopt: none yet, or only for another run).
  std::optional<Json> Latest(const std::string& key, int run) const;

  struct Stats {
    uint64_t requests = 0;
    uint64_t failures = 0;      // refused, timed out, too large, not a sidecar's /status
  };
  Stats stats() const;

 private:
  struct JobState {
    int run = 0;
    std::vector<RankReport> ranks;
    std::chrono::steady_clock::time_point at;
    Json summary;
  };
  void Loop();

  const ProgressCollectorOptions options_;
  const Targets targets_;
  const Changed changed_;
  const Collected collected_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::map<std::string, JobState> jobs_;
  Stats stats_;
  std::thread thread_;
};

// GET http://ip:port/status of each pod, at most `options.concurrency` at a time; the bodies in
// order ("" where a request failed). Exposed for tests.
std::vector<std::optional<std::string>> FetchSidecarStatuses(const std::vector<ProgressJob::Pod>& pods,
                                                             const ProgressCollectorOptions& options);

}  // namespace fleet::op
