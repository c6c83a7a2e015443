// WorkQueue: keys ("namespace/name") to reconcile, with client-go's guarantees:
//  - a key queued several times is processed once (dedup);
//  - a key is never processed by two workers at once: re-added while processing, it is queued
//    again when Done() is called;
//  - AddRateLimited: per-key exponential backoff (base * 2^failures, capped), combined with an
//    overall token bucket; Forget() resets a key's failures;
//  - AddAfter: delayed adds (requeue-after); a key waiting twice keeps the earlier time;
//  - ShutDown: Get() returns nullopt once the queue is drained (or at once with ShutDownNow).
// Metrics hooks report depth, queue latency, retries and the exceptions RunWorkers contained.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "fleet/kube/rate_limiter.h"

namespace fleet::kube {

struct WorkQueueOptions {
  std::chrono::milliseconds base_delay{5};
  std::chrono::milliseconds max_delay{1000 * 1000};
  double overall_qps = 10;           // client-go's default bucket: 10 qps, burst 100
  int overall_burst = 100;
};

struct WorkQueueMetrics {
  std::function<void(size_t depth)> on_depth;
  std::function<void(std::chrono::steady_clock::duration waited)> on_latency;
  std::function<void()> on_retry;
  // RunWorkers' `process` threw for `key`; `what` is the exception's message. (The kube library
  // logs nothing itself: this hook is where the binary logs it.)
  std::function<void(const std::string& key, const std::string& what)> on_exception;
};

class WorkQueue {
 public:
  using Clock = std::chrono::steady_clock;
  explicit WorkQueue(WorkQueueOptions options = {}, WorkQueueMetrics metrics = {});
  ~WorkQueue();

  void Add(const std::string& key);
  void AddAfter(const std::string& key, Clock::duration delay);
  void AddRateLimited(const std::string& key);
  void Forget(const std::string& key);
  int NumRequeues(const std::string& key) const;
  // Blocks for the next key; nullopt after shutdown.
  std::optional<std::string> Get();
  void Done(const std::string& key);
  size_t Len() const;
  void ShutDown();         // stop accepting; Get() drains what is queued, then returns nullopt
  void ShutDownNow();      // Get() returns nullopt at once
  bool ShuttingDown() const;
  // RunWorkers: processing `key` threw. Counted (ProcessExceptions) and reported to on_exception;
  // the caller still requeues the key.
  void ProcessThrew(const std::string& key, const std::string& what);
  uint64_t ProcessExceptions() const;

 private:
  void DelayLoop();
  void AddLocked(const std::string& key);

  WorkQueueOptions options_;
  WorkQueueMetrics metrics_;
  TokenBucket overall_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::set<std::string> dirty_;        // queued (or to be re-queued after processing)
  std::set<std::string> processing_;
  std::map<std::string, Clock::time_point> added_at_;
  std::map<std::string, int> failures_;
  std::multimap<Clock::time_point, std::string> delayed_;
  std::map<std::string, Clock::time_point> delayed_at_;   // key -> its entry in delayed_
  std::condition_variable delayed_cv_;
  bool shutting_down_ = false;
  bool drain_ = true;
  std::atomic<uint64_t> process_exceptions_{0};
  std::thread delay_thread_;
};

// Runs `workers` threads that take keys and call `process`; a returned error requeues the key
// rate-limited, success Forget()s it. A RequeueAfter > 0 also AddAfter()s it. Returns when the
// queue shuts down and all workers have finished. An exception from `process` is contained (one bad
// key must not take a worker down): reported with WorkQueue::ProcessThrew, then treated as an error.
struct ProcessResult {
  bool ok = true;
  std::chrono::milliseconds requeue_after{0};
};
void RunWorkers(WorkQueue& queue, int workers,
                const std::function<ProcessResult(const std::string& key)>& process);

}  // namespace fleet::kube
