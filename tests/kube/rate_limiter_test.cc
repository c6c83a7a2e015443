// TokenBucket: a burst is free, then callers are paced at qps; concurrent reservations queue up
// instead of racing; qps 0 is unlimited.
#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "fleet/kube/rate_limiter.h"

namespace fleet::kube {
namespace {

using std::chrono::milliseconds;

double Seconds(TokenBucket::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

TEST(TokenBucketTest, ZeroQpsIsUnlimited) {
  TokenBucket bucket(0, 0);
  for (int i = 0; i < 10000; ++i) ASSERT_EQ(bucket.Reserve(), TokenBucket::Clock::duration::zero());
}

TEST(TokenBucketTest, BurstIsAvailableAtOnce) {
  TokenBucket bucket(1, 5);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(bucket.Reserve(), TokenBucket::Clock::duration::zero()) << i;
  EXPECT_GT(bucket.Reserve(), TokenBucket::Clock::duration::zero());
}

TEST(TokenBucketTest, ReservationsBeyondTheBurstQueueAtOneOverQps) {
  TokenBucket bucket(10, 1);
  EXPECT_EQ(bucket.Reserve(), TokenBucket::Clock::duration::zero());
  EXPECT_NEAR(Seconds(bucket.Reserve()), 0.1, 0.02);
  EXPECT_NEAR(Seconds(bucket.Reserve()), 0.2, 0.02);
  EXPECT_NEAR(Seconds(bucket.Reserve()), 0.3, 0.02);
}

TEST(TokenBucketTest, TokensRefillOverTimeUpToTheBurst) {
  TokenBucket bucket(100, 2);
  bucket.Reserve();
  bucket.Reserve();
  std::this_thread::sleep_for(milliseconds(100));  // would be 10 tokens, capped at 2
  EXPECT_EQ(bucket.Reserve(), TokenBucket::Clock::duration::zero());
  EXPECT_EQ(bucket.Reserve(), TokenBucket::Clock::duration::zero());
  EXPECT_GT(bucket.Reserve(), TokenBucket::Clock::duration::zero());
}

TEST(TokenBucketTest, WaitPacesCallersAtQps) {
  TokenBucket bucket(20, 1);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 11; ++i) bucket.Wait();
  const double elapsed = Seconds(std::chrono::steady_clock::now() - start);
  EXPECT_GE(elapsed, 0.49);
  EXPECT_LT(elapsed, 1.0);
}

TEST(TokenBucketTest, ConcurrentCallersShareTheRate) {
  TokenBucket bucket(200, 1);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&bucket] {
      for (int i = 0; i < 5; ++i) bucket.Wait();
    });
  }
  for (std::thread& t : threads) t.join();
  // 40 tokens at 200/s with one banked: at least 39 / 200 s.
  EXPECT_GE(Seconds(std::chrono::steady_clock::now() - start), 0.19);
}

}  // namespace
}  // namespace fleet::kube
