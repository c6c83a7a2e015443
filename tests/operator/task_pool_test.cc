// TaskPool: the controller's pod writes, all jobs together, are at most the pool's threads in
// flight; batches take turns; Stop() finishes what was handed over and refuses the rest.
#include <algorithm>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "fleet/operator/task_pool.h"

namespace fleet::op {
namespace {

// Tasks that hold until the test opens the gate, counting how many run at once.
class Gate {
 public:
  // The task: records `name`, then waits for Open().
  std::function<void(size_t)> Task(const std::string& name) {
    return [this, name](size_t i) {
      std::unique_lock<std::mutex> lock(mu_);
      started_.push_back(name + std::to_string(i));
      max_in_flight_ = std::max(max_in_flight_, ++in_flight_);
      changed_.notify_all();
      changed_.wait(lock, [&] { return open_; });
      --in_flight_;
    };
  }
  void WaitInFlight(int at_least) {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [&] { return in_flight_ >= at_least; });
  }
  void Open() {
    std::lock_guard<std::mutex> lock(mu_);
    open_ = true;
    changed_.notify_all();
  }
  int in_flight() {
    std::lock_guard<std::mutex> lock(mu_);
    return in_flight_;
  }
  int max_in_flight() {
    std::lock_guard<std::mutex> lock(mu_);
    return max_in_flight_;
  }
  std::vector<std::string> started() {
    std::lock_guard<std::mutex> lock(mu_);
    return started_;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  int in_flight_ = 0;
  int max_in_flight_ = 0;
  bool open_ = false;
  std::vector<std::string> started_;
};

// The pool's own count of what waits: polled, since the pool tells no one when a batch arrives.
void WaitQueued(const TaskPool& pool, size_t n) {
  while (pool.Queued() != n) std::this_thread::yield();
}
// Until `tasks` have been handed over: each is running (held at the gate) or queued.
void WaitHandedOver(const TaskPool& pool, Gate& gate, size_t tasks) {
  while (static_cast<size_t>(gate.in_flight()) + pool.Queued() != tasks) std::this_thread::yield();
}

TEST(TaskPoolTest, AtMostItsThreadsRunAtOnceWhateverTheNumberOfCallers) {
  TaskPool pool(3);
  Gate gate;
  const auto a = gate.Task("a"), b = gate.Task("b");
  bool a_ran = false, b_ran = false;
  std::thread caller_a([&] { a_ran = pool.RunEach(5, a); });
  std::thread caller_b([&] { b_ran = pool.RunEach(5, b); });
  WaitHandedOver(pool, gate, 10);
  gate.WaitInFlight(3);
  EXPECT_EQ(gate.in_flight(), 3);
  EXPECT_EQ(pool.Queued(), 7u);
  gate.Open();
  caller_a.join();
  caller_b.join();
  EXPECT_TRUE(a_ran && b_ran);
  EXPECT_EQ(gate.started().size(), 10u);
  EXPECT_EQ(gate.max_in_flight(), 3);
  EXPECT_EQ(pool.Queued(), 0u);
}

TEST(TaskPoolTest, BatchesTakeTurns) {
  TaskPool pool(1);
  Gate gate;
  const auto a = gate.Task("a"), b = gate.Task("b");
  std::thread caller_a([&] { EXPECT_TRUE(pool.RunEach(3, a)); });
  gate.WaitInFlight(1);   // a0 runs, a1 and a2 wait
  std::thread caller_b([&] { EXPECT_TRUE(pool.RunEach(2, b)); });
  WaitQueued(pool, 4);
  gate.Open();
  caller_a.join();
  caller_b.join();
  // a's turn came again before b arrived; from then on the two alternate.
  EXPECT_EQ(gate.started(), (std::vector<std::string>{"a0", "a1", "b0", "a2", "b1"}));
}

TEST(TaskPoolTest, StopFinishesTheBatchesHandedOverAndRefusesLaterOnes) {
  TaskPool pool(1);
  Gate gate;
  const auto a = gate.Task("a");
  bool a_ran = false;
  std::thread caller([&] { a_ran = pool.RunEach(3, a); });
  gate.WaitInFlight(1);
  WaitQueued(pool, 2);
  std::thread stopper([&] { pool.Stop(); });
  const auto nothing = [](size_t) {};
  while (pool.RunEach(0, nothing)) std::this_thread::yield();   // refused: Stop() has begun
  gate.Open();
  caller.join();
  stopper.join();
  EXPECT_TRUE(a_ran);
  EXPECT_EQ(gate.started(), (std::vector<std::string>{"a0", "a1", "a2"}));

  int ran = 0;
  EXPECT_FALSE(pool.RunEach(2, [&](size_t) { ++ran; }));
  EXPECT_EQ(ran, 0);
}

TEST(TaskPoolTest, AnEmptyBatchReturnsAtOnce) {
  TaskPool pool(2);
  EXPECT_TRUE(pool.RunEach(0, [](size_t) { FAIL() << "no task to run"; }));
}

}  // namespace
}  // namespace fleet::op
