#include "fleet/operator/task_pool.h"

#include <algorithm>

namespace fleet::op {

// Lives on its caller's stack for the length of RunEach: a thread touches it only under mu_, and
// the caller returns only once every task has finished.
struct TaskPool::Batch {
  Batch(const std::function<void(size_t)>& batch_task, size_t batch_size) : task(&batch_task), size(batch_size) {}
  const std::function<void(size_t)>* task;
  size_t size;
  size_t started = 0;
  size_t finished = 0;
  std::condition_variable done;   // finished == size
};

TaskPool::TaskPool(int threads) {
  const int count = std::max(1, threads);
  threads_.reserve(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) threads_.emplace_back([this] { Serve(); });
}

TaskPool::~TaskPool() { Stop(); }

bool TaskPool::RunEach(size_t n, const std::function<void(size_t)>& task) {
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) return false;
  if (n == 0) return true;
  Batch batch(task, n);
  turns_.push_back(&batch);
  work_.notify_all();
  batch.done.wait(lock, [&] { return batch.finished == batch.size; });
  return true;
}

void TaskPool::Serve() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_.wait(lock, [&] { return !turns_.empty() || stopping_; });
    if (turns_.empty()) return;   // stopping, and every batch handed over has been started
    Batch* batch = turns_.front();
    turns_.pop_front();
    const size_t index = batch->started++;
    if (batch->started < batch->size) turns_.push_back(batch);   // its next task waits its turn
    lock.unlock();
    (*batch->task)(index);
    lock.lock();
    // Notified under the lock: once it may see `finished == size`, the caller destroys the batch.
    if (++batch->finished == batch->size) batch->done.notify_one();
  }
}

size_t TaskPool::Queued() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t queued = 0;
  for (const Batch* batch : turns_) queued += batch->size - batch->started;
  return queued;
}

void TaskPool::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  work_.notify_all();
  for (std::thread& thread : threads_) thread.join();
}

}  // namespace fleet::op
