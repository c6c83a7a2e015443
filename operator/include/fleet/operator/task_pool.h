// TaskPool: a fixed set of threads shared by callers that each hand it a batch of tasks and wait
// for them. The controller's pod writes go through one: however many jobs are reconciled at once,
// at most `threads` writes are in flight.
//
// Batches take turns: each free thread takes the next task of the batch after the one it served
// last, so a 10,000-pod job's creates do not hold back a small job's behind them.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace fleet::op {

class TaskPool {
 public:
  explicit TaskPool(int threads);   // starts max(1, threads) threads
  ~TaskPool();                      // Stop()
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  // Runs task(0) .. task(n - 1) on the pool's threads, and returns once all have returned: true.
  // After Stop() it runs none of them and returns false at once. `task` must not throw (it runs
  // on a pool thread).
  bool RunEach(size_t n, const std::function<void(size_t)>& task);
  // Batches already handed over still run to the end (their callers are waiting for them); later
  // RunEach calls are refused. Then the threads end. Idempotent.
  void Stop();
  // Tasks handed over and not yet started, all callers together.
  size_t Queued() const;

 private:
  struct Batch;
  void Serve();

  mutable std::mutex mu_;
  std::condition_variable work_;      // a batch was handed over, or Stop()
  std::deque<Batch*> turns_;          // batches with tasks not yet started, in turn order
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace fleet::op
