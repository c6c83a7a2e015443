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
//
// A sidecar's answer is untrusted: the job's author chooses the sidecar image (spec.sidecar.image).
// What a pod reports is kept only for the ranks it runs (Pod::first_rank, Pod::ranks), at most
// kMaxRanksPerPod of them, and a job keeps at most its ranks (expected_ranks): a pod that reports
// more costs the operator its answer's bytes while it is read, not memory that grows with what it
// claims (docs/security.md, "The progress path"). Each answer is parsed as it arrives, so at most
// `concurrency` answers are held at once, whatever the number of pods. The pods of each job are
// asked in turn with the other jobs' (round robin), each job is summarized as soon as its own pods
// have answered, and a pod that did not answer last time is asked after those that did: one job's
// hung pods delay neither another job's progress nor the next collection (a collection ends after
// max(interval, timeout); the pods it did not reach are asked first the next time).
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "fleet/base/log.h"
#include "fleet/operator/progress.h"

namespace fleet::op {

// One job's trainer pods whose sidecars to ask, as the controller's caches see them now.
struct ProgressJob {
  struct Pod {
    std::string name;
    std::string role;
    std::string ip;
    int port = 0;        // the sidecar's HTTP port (spec.sidecar.metricsPort)
    // The ranks the pod runs, as its sidecar is started (--rank, --ranks): the only ones its
    // answer may report. first_rank < 0: not known, and only its role's ranks bound it.
    int first_rank = -1;
    int ranks = 1;
  };
  std::string key;       // namespace/name
  int run = 0;           // status.run: a summary is for one run's pods
  std::map<std::string, int> expected_ranks;
  int64_t total_steps = 0;
  std::vector<Pod> pods;
};

// The most ranks one pod may report: spec.processesPerPod's maximum.
inline constexpr int kMaxRanksPerPod = 64;

struct ProgressCollectorOptions {
  std::chrono::milliseconds interval{10000};
  int concurrency = 32;                        // GET /status in flight
  std::chrono::milliseconds timeout{2000};     // per request: connect, send, receive
  size_t max_body = 256 * 1024;                // a sidecar's answer (64 ranks take ~15 KiB)
  Logger log = Logger();                       // one line when a job's pods report ranks not theirs
};

class ProgressCollector {
 public:
  struct Stats {
    uint64_t requests = 0;
    uint64_t failures = 0;      // refused, timed out, too large, not a sidecar's /status
    uint64_t dropped_ranks = 0; // rank reports not kept: not the pod's ranks, or past a bound
  };
  using Targets = std::function<std::vector<ProgressJob>()>;
  using Changed = std::function<void(const std::string& key)>;
  // After each collection: its own counts, and the seconds it took (metrics).
  using Collected = std::function<void(const Stats& collection, double seconds)>;

  ProgressCollector(ProgressCollectorOptions options, Targets targets, Changed changed, Collected collected = nullptr);
  ~ProgressCollector();
  ProgressCollector(const ProgressCollector&) = delete;
  ProgressCollector& operator=(const ProgressCollector&) = delete;

  void Start();   // collects at once, then every interval
  void Stop();

  // One collection of every target, now (the loop's body).
  void CollectOnce();
  // The job's latest summary for `run` (nullopt: none yet, or only for another run).
  std::optional<Progress> Latest(const std::string& key, int run) const;

  Stats stats() const;   // every collection's so far

 private:
  struct JobState {
    int run = 0;
    std::vector<RankReport> ranks;
    std::chrono::steady_clock::time_point at;
    std::optional<Progress> summary;
    // How each pod fared last time, which orders the next collection's requests: pods not asked
    // (the collection ran out of time) first, then those that answered, then those that did not.
    enum class Asked { kNot, kAnswered, kSilent };
    std::map<std::string, Asked> pods;
    bool dropping = false;               // its pods report ranks not theirs (logged when it starts)
  };
  struct PendingJob;
  void Loop();
  std::vector<std::pair<size_t, size_t>> FetchOrder(const std::vector<ProgressJob>& jobs) const;
  // A job whose pods have all been asked (or not, for lack of time): its summary is kept, and
  // `changed_` told when it differs from the last one.
  void Finish(const ProgressJob& job, PendingJob& pending);

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

// GET http://ip:port/status of each pod in order, at most `options.concurrency` at a time, each
// answer handed to `on_body(index, body)` (nullopt where the request failed) as it arrives, on the
// calling thread. A request not started by `deadline` is not made (on_body is not called for it),
// and none runs past it.
void FetchSidecarStatuses(const std::vector<ProgressJob::Pod>& pods, const ProgressCollectorOptions& options,
                          std::chrono::steady_clock::time_point deadline,
                          const std::function<void(size_t index, std::optional<std::string> body)>& on_body);
// The same, without a deadline: the bodies in order. Exposed for tests.
std::vector<std::optional<std::string>> FetchSidecarStatuses(const std::vector<ProgressJob::Pod>& pods,
                                                             const ProgressCollectorOptions& options);

}  // namespace fleet::op
