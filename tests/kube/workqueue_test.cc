// workqueue.h: dedup, one worker per key, per-key backoff + overall bucket, add-after, shutdown.
#include "fleet/kube/workqueue.h"

#include <array>
#include <mutex>
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace fleet::kube {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

WorkQueueOptions Unthrottled(milliseconds base = milliseconds(5), milliseconds cap = milliseconds(1000)) {
  WorkQueueOptions options;
  options.base_delay = base;
  options.max_delay = cap;
  options.overall_qps = 0;   // the overall bucket off: only per-key backoff
  return options;
}

milliseconds MsSince(Clock::time_point start) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - start);
}

TEST(WorkQueueTest, KeyAddedSeveralTimesIsQueuedOnce) {
  WorkQueue queue(Unthrottled());
  queue.Add("ns/a");
  queue.Add("ns/b");
  queue.Add("ns/a");
  queue.Add("ns/a");
  EXPECT_EQ(queue.Len(), 2u);
  EXPECT_EQ(queue.Get(), "ns/a");
  EXPECT_EQ(queue.Get(), "ns/b");
  EXPECT_EQ(queue.Len(), 0u);
}

TEST(WorkQueueTest, KeyReAddedWhileProcessingIsQueuedAgainOnlyAfterDone) {
  WorkQueue queue(Unthrottled());
  queue.Add("ns/a");
  ASSERT_EQ(queue.Get(), "ns/a");
  queue.Add("ns/a");
  queue.Add("ns/a");
  EXPECT_EQ(queue.Len(), 0u) << "a key being processed must not be handed to a second worker";
  queue.Done("ns/a");
  EXPECT_EQ(queue.Len(), 1u);
  EXPECT_EQ(queue.Get(), "ns/a");
  queue.Done("ns/a");
  EXPECT_EQ(queue.Len(), 0u);
}

TEST(WorkQueueTest, EightWorkersNeverProcessOneKeyConcurrently) {
  constexpr int kKeys = 16;
  WorkQueue queue(Unthrottled());
  std::array<std::atomic<int>, kKeys> in_flight{};
  std::atomic<int> overlaps{0};
  std::atomic<int64_t> processed{0};
  std::atomic<bool> stop_hammering{false};

  std::thread workers([&] {
    RunWorkers(queue, 8, [&](const std::string& key) {
      const int k = std::stoi(key.substr(2));
      if (in_flight[k].fetch_add(1) != 0) overlaps++;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
      in_flight[k].fetch_sub(1);
      processed++;
      // Some keys fail (rate-limited requeue) or ask to come back: other paths back into the queue.
      if (k % 5 == 0) return ProcessResult{false, milliseconds(0)};
      if (k % 7 == 0) return ProcessResult{true, milliseconds(1)};
      return ProcessResult{};
    });
  });
  std::vector<std::thread> hammers;
  for (int h = 0; h < 4; ++h) {
    hammers.emplace_back([&, h] {
      for (int i = 0; !stop_hammering; ++i) {
        queue.Add("k/" + std::to_string((i + h) % kKeys));
        if (i % 64 == 0) std::this_thread::yield();
      }
    });
  }
  std::this_thread::sleep_for(milliseconds(600));
  stop_hammering = true;
  for (std::thread& t : hammers) t.join();
  queue.ShutDown();
  workers.join();

  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_GT(processed.load(), 200) << "the workers should have made progress";
}

TEST(WorkQueueTest, RateLimitedBackoffDoublesPerFailureAndForgetResetsIt) {
  WorkQueue queue(Unthrottled(milliseconds(20)));
  const std::vector<int> expected_ms = {20, 40, 80, 160};
  for (size_t i = 0; i < expected_ms.size(); ++i) {
    const Clock::time_point start = Clock::now();
    queue.AddRateLimited("ns/a");
    EXPECT_EQ(queue.NumRequeues("ns/a"), static_cast<int>(i + 1));
    ASSERT_EQ(queue.Get(), "ns/a");
    const milliseconds waited = MsSince(start);
    EXPECT_GE(waited.count(), expected_ms[i]) << "attempt " << i;
    EXPECT_LT(waited.count(), expected_ms[i] + 150) << "attempt " << i;
    queue.Done("ns/a");
  }
  queue.Forget("ns/a");
  EXPECT_EQ(queue.NumRequeues("ns/a"), 0);
  const Clock::time_point start = Clock::now();
  queue.AddRateLimited("ns/a");
  ASSERT_EQ(queue.Get(), "ns/a");
  EXPECT_LT(MsSince(start).count(), 20 + 150) << "after Forget the backoff starts again at base";
}

TEST(WorkQueueTest, BackoffIsCappedAtMaxDelay) {
  WorkQueue queue(Unthrottled(milliseconds(10), milliseconds(30)));
  for (int i = 0; i < 30; ++i) queue.AddRateLimited("ns/a");   // 10 * 2^29 without the cap
  const Clock::time_point start = Clock::now();
  queue.AddRateLimited("ns/a");
  ASSERT_EQ(queue.Get(), "ns/a");
  EXPECT_LT(MsSince(start).count(), 30 + 150);
  EXPECT_EQ(queue.NumRequeues("ns/a"), 31);
}

TEST(WorkQueueTest, OverallBucketSpacesRetriesOfDifferentKeys) {
  WorkQueueOptions options = Unthrottled(milliseconds(1));
  options.overall_qps = 20;    // one token per 50 ms
  options.overall_burst = 1;
  WorkQueue queue(options);
  const Clock::time_point start = Clock::now();
  queue.AddRateLimited("ns/a");
  queue.AddRateLimited("ns/b");
  queue.AddRateLimited("ns/c");
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(queue.Get().has_value());
  }
  EXPECT_GE(MsSince(start).count(), 90) << "three retries at 20 qps with burst 1 take >= 100 ms";
}

TEST(WorkQueueTest, AddAfterMakesTheKeyAvailableOnlyAfterTheDelay) {
  WorkQueue queue(Unthrottled());
  const Clock::time_point start = Clock::now();
  queue.AddAfter("ns/a", milliseconds(120));
  EXPECT_EQ(queue.Len(), 0u);
  std::this_thread::sleep_for(milliseconds(60));
  // Only meaningful while the delay has not passed: a loaded machine may oversleep.
  if (MsSince(start).count() < 110) {
    EXPECT_EQ(queue.Len(), 0u);
  }
  ASSERT_EQ(queue.Get(), "ns/a");
  const milliseconds waited = MsSince(start);
  EXPECT_GE(waited.count(), 120);
  EXPECT_LT(waited.count(), 120 + 1000) << "Get wakes when the delay is over, not at some later poll";
}

TEST(WorkQueueTest, AddAfterTwiceKeepsTheEarlierTime) {
  WorkQueue queue(Unthrottled());
  const Clock::time_point start = Clock::now();
  queue.AddAfter("ns/a", milliseconds(5000));
  queue.AddAfter("ns/a", milliseconds(50));
  queue.AddAfter("ns/a", milliseconds(3000));
  ASSERT_EQ(queue.Get(), "ns/a");
  EXPECT_LT(MsSince(start).count(), 1000);
  queue.Done("ns/a");
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(queue.Len(), 0u) << "the later AddAfters were folded into the earlier one";
}

TEST(WorkQueueTest, ShutDownDrainsQueuedKeysThenGetReturnsNullopt) {
  WorkQueue queue(Unthrottled());
  queue.Add("ns/a");
  queue.Add("ns/b");
  queue.AddAfter("ns/later", milliseconds(50));
  queue.ShutDown();
  EXPECT_TRUE(queue.ShuttingDown());
  queue.Add("ns/c");   // refused: the queue no longer accepts keys
  EXPECT_EQ(queue.Get(), "ns/a");
  EXPECT_EQ(queue.Get(), "ns/b");
  EXPECT_EQ(queue.Get(), std::nullopt);
}

TEST(WorkQueueTest, ShutDownNowMakesGetReturnNulloptAtOnce) {
  WorkQueue queue(Unthrottled());
  queue.Add("ns/a");
  queue.Add("ns/b");
  queue.ShutDownNow();
  EXPECT_EQ(queue.Get(), std::nullopt);
}

TEST(WorkQueueTest, ShutDownWakesABlockedGet) {
  WorkQueue queue(Unthrottled());
  std::atomic<bool> returned{false};
  std::thread getter([&] {
    EXPECT_EQ(queue.Get(), std::nullopt);
    returned = true;
  });
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_FALSE(returned.load());
  queue.ShutDown();
  getter.join();
  EXPECT_TRUE(returned.load());
}

TEST(WorkQueueTest, WorkersRetryFailuresAndExceptionsThenForgetOnSuccess) {
  WorkQueue queue(Unthrottled(milliseconds(1)));
  std::atomic<int> attempts{0};
  std::atomic<int> requeues_seen_at_success{-1};
  std::thread workers([&] {
    RunWorkers(queue, 2, [&](const std::string& key) -> ProcessResult {
      const int attempt = ++attempts;
      if (attempt == 1) throw std::runtime_error("boom");
      if (attempt == 2) return ProcessResult{false, milliseconds(0)};
      requeues_seen_at_success = queue.NumRequeues(key);
      return ProcessResult{};
    });
  });
  queue.Add("ns/a");
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(5);
  while (attempts < 3 && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(2));
  std::this_thread::sleep_for(milliseconds(20));
  queue.ShutDown();
  workers.join();
  EXPECT_EQ(attempts.load(), 3);
  EXPECT_EQ(requeues_seen_at_success.load(), 2);
  EXPECT_EQ(queue.NumRequeues("ns/a"), 0) << "success Forget()s the key";
}

TEST(WorkQueueTest, WorkersReportAndCountExceptionsWithTheirKeysThenRetryWithBackoff) {
  std::mutex mu;
  std::vector<std::pair<std::string, std::string>> reported;
  std::atomic<int> retries{0};
  WorkQueueMetrics metrics;
  metrics.on_exception = [&](const std::string& key, const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    reported.emplace_back(key, what);
  };
  metrics.on_retry = [&] { retries++; };
  WorkQueue queue(Unthrottled(milliseconds(1)), metrics);
  std::atomic<int> attempts_a{0};
  std::atomic<int> attempts_b{0};
  std::atomic<int> successes{0};
  std::thread workers([&] {
    RunWorkers(queue, 1, [&](const std::string& key) -> ProcessResult {
      if (key == "ns/a" && ++attempts_a == 1) throw std::runtime_error("boom");
      if (key == "ns/b" && ++attempts_b == 1) throw 42;
      successes++;
      return ProcessResult{};
    });
  });
  queue.Add("ns/a");
  queue.Add("ns/b");
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(5);
  while (successes < 2 && Clock::now() < deadline) std::this_thread::sleep_for(milliseconds(2));
  queue.ShutDown();
  workers.join();
  EXPECT_EQ(successes.load(), 2) << "a key that threw is processed again";
  EXPECT_EQ(queue.ProcessExceptions(), 2u);
  const std::vector<std::pair<std::string, std::string>> expected = {
      {"ns/a", "boom"}, {"ns/b", "an exception not derived from std::exception"}};
  EXPECT_EQ(reported, expected);
  EXPECT_EQ(retries.load(), 2) << "requeued rate-limited, as for an error result";
}

TEST(WorkQueueTest, RequeueAfterResultBringsTheKeyBackLater) {
  WorkQueue queue(Unthrottled());
  std::vector<Clock::time_point> calls;
  std::mutex mu;
  std::thread workers([&] {
    RunWorkers(queue, 1, [&](const std::string&) {
      std::lock_guard<std::mutex> lock(mu);
      calls.push_back(Clock::now());
      return ProcessResult{true, calls.size() < 2 ? milliseconds(80) : milliseconds(0)};
    });
  });
  queue.Add("ns/a");
  const Clock::time_point deadline = Clock::now() + std::chrono::seconds(5);
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (calls.size() >= 2 || Clock::now() > deadline) break;
    }
    std::this_thread::sleep_for(milliseconds(2));
  }
  queue.ShutDown();
  workers.join();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_GE(calls[1] - calls[0], milliseconds(80));
}

TEST(WorkQueueTest, MetricsHooksReportDepthLatencyAndRetries) {
  std::atomic<size_t> max_depth{0};
  std::atomic<int> latencies{0};
  std::atomic<int> retries{0};
  WorkQueueMetrics metrics;
  metrics.on_depth = [&](size_t depth) {
    if (depth > max_depth) max_depth = depth;
  };
  metrics.on_latency = [&](Clock::duration waited) {
    EXPECT_GE(waited.count(), 0);
    latencies++;
  };
  metrics.on_retry = [&] { retries++; };
  WorkQueue queue(Unthrottled(milliseconds(1)), metrics);
  queue.Add("ns/a");
  queue.Add("ns/b");
  queue.Add("ns/c");
  EXPECT_EQ(max_depth.load(), 3u);
  ASSERT_TRUE(queue.Get().has_value());
  queue.AddRateLimited("ns/a");
  EXPECT_EQ(latencies.load(), 1);
  EXPECT_EQ(retries.load(), 1);
}

}  // namespace
}  // namespace fleet::kube
