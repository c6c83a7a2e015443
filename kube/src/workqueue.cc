#include "fleet/kube/workqueue.h"

#include <algorithm>
#include <cmath>
#include <exception>

namespace fleet::kube {

WorkQueue::WorkQueue(WorkQueueOptions options, WorkQueueMetrics metrics)
    : options_(options),
      metrics_(std::move(metrics)),
      overall_(options.overall_qps, options.overall_burst),
      delay_thread_([this] { DelayLoop(); }) {}

WorkQueue::~WorkQueue() {
  ShutDownNow();
  delay_thread_.join();
}

void WorkQueue::Add(const std::string& key) {
  size_t depth = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_) return;
    AddLocked(key);
    depth = queue_.size();
  }
  if (metrics_.on_depth) metrics_.on_depth(depth);
}

// Marks the key dirty; it joins the queue now unless a worker holds it, in which case Done()
// queues it (so no two workers ever hold one key).
void WorkQueue::AddLocked(const std::string& key) {
  if (!dirty_.insert(key).second) return;
  added_at_.emplace(key, Clock::now());
  if (processing_.count(key) != 0) return;
  queue_.push_back(key);
  cv_.notify_one();
}

void WorkQueue::AddAfter(const std::string& key, Clock::duration delay) {
  if (delay <= Clock::duration::zero()) {
    Add(key);
    return;
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (shutting_down_) return;
  const Clock::time_point ready = Clock::now() + delay;
  auto waiting = delayed_at_.find(key);
  if (waiting != delayed_at_.end()) {
    if (waiting->second <= ready) return;
    auto range = delayed_.equal_range(waiting->second);
    for (auto it = range.first; it != range.second; ++it) {
      if (it->second == key) {
        delayed_.erase(it);
        break;
      }
    }
  }
  delayed_.emplace(ready, key);
  delayed_at_[key] = ready;
  delayed_cv_.notify_one();
}

void WorkQueue::AddRateLimited(const std::string& key) {
  Clock::duration delay;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shutting_down_) return;
    const int failures = failures_[key]++;
    // base * 2^failures without overflowing: past 2^40 the cap has long been reached.
    const double factor = std::ldexp(1.0, std::min(failures, 40));
    const double ms = std::min(static_cast<double>(options_.base_delay.count()) * factor,
                               static_cast<double>(options_.max_delay.count()));
    delay = std::chrono::milliseconds(static_cast<int64_t>(ms));
  }
  delay = std::max(delay, overall_.Reserve());
  if (metrics_.on_retry) metrics_.on_retry();
  AddAfter(key, delay);
}

void WorkQueue::Forget(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  failures_.erase(key);
}

int WorkQueue::NumRequeues(const std::string& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

std::optional<std::string> WorkQueue::Get() {
  std::string key;
  Clock::duration waited{};
  size_t depth = 0;
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return !queue_.empty() || shutting_down_; });
    if (queue_.empty() || (shutting_down_ && !drain_)) return std::nullopt;
    key = std::move(queue_.front());
    queue_.pop_front();
    dirty_.erase(key);
    processing_.insert(key);
    auto added = added_at_.find(key);
    if (added != added_at_.end()) {
      waited = Clock::now() - added->second;
      added_at_.erase(added);
    }
    depth = queue_.size();
  }
  if (metrics_.on_latency) metrics_.on_latency(waited);
  if (metrics_.on_depth) metrics_.on_depth(depth);
  return key;
}

void WorkQueue::Done(const std::string& key) {
  std::lock_guard<std::mutex> lock(mu_);
  processing_.erase(key);
  if (dirty_.count(key) != 0 && !(shutting_down_ && !drain_)) {
    queue_.push_back(key);
    cv_.notify_one();
  }
}

size_t WorkQueue::Len() const {
  std::lock_guard<std::mutex> lock(mu_);
  return queue_.size();
}

void WorkQueue::ShutDown() {
  std::lock_guard<std::mutex> lock(mu_);
  shutting_down_ = true;
  // Delayed adds are dropped: nobody will be there to process them.
  delayed_.clear();
  delayed_at_.clear();
  cv_.notify_all();
  delayed_cv_.notify_all();
}

void WorkQueue::ShutDownNow() {
  std::lock_guard<std::mutex> lock(mu_);
  shutting_down_ = true;
  drain_ = false;
  queue_.clear();
  delayed_.clear();
  delayed_at_.clear();
  cv_.notify_all();
  delayed_cv_.notify_all();
}

bool WorkQueue::ShuttingDown() const {
  std::lock_guard<std::mutex> lock(mu_);
  return shutting_down_;
}

void WorkQueue::ProcessThrew(const std::string& key, const std::string& what) {
  ++process_exceptions_;
  if (metrics_.on_exception) metrics_.on_exception(key, what);
}

uint64_t WorkQueue::ProcessExceptions() const { return process_exceptions_.load(); }

void WorkQueue::DelayLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!shutting_down_) {
    if (delayed_.empty()) {
      delayed_cv_.wait(lock);
      continue;
    }
    const Clock::time_point next = delayed_.begin()->first;
    if (Clock::now() < next) {
      delayed_cv_.wait_until(lock, next);
      continue;
    }
    while (!delayed_.empty() && delayed_.begin()->first <= Clock::now()) {
      const std::string key = delayed_.begin()->second;
      delayed_.erase(delayed_.begin());
      delayed_at_.erase(key);
      AddLocked(key);
    }
    const size_t depth = queue_.size();
    if (metrics_.on_depth) {
      lock.unlock();
      metrics_.on_depth(depth);
      lock.lock();
    }
  }
}

namespace {

// The exception being handled, as text.
std::string CurrentExceptionMessage() {
  try {
    throw;
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception not derived from std::exception";
  }
}

}  // namespace

void RunWorkers(WorkQueue& queue, int workers,
                const std::function<ProcessResult(const std::string& key)>& process) {
  auto worker = [&queue, &process] {
    while (std::optional<std::string> key = queue.Get()) {
      ProcessResult result;
      try {
        result = process(*key);
      } catch (...) {
        queue.ProcessThrew(*key, CurrentExceptionMessage());
        result.ok = false;
      }
      if (!result.ok) {
        queue.AddRateLimited(*key);
      } else {
        queue.Forget(*key);
        if (result.requeue_after.count() > 0) queue.AddAfter(*key, result.requeue_after);
      }
      queue.Done(*key);
    }
  };
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(std::max(workers, 1)));
  for (int i = 0; i < std::max(workers, 1); ++i) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
}

}  // namespace fleet::kube
