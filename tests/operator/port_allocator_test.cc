// HostPortAllocator: HostNetwork jobs get disjoint blocks of host ports, keep them, and give them back.
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "fleet/operator/port_allocator.h"

namespace fleet::op {
namespace {

bool Overlap(int a, int a_size, int b, int b_size) { return a < b + b_size && b < a + a_size; }

TEST(HostPortAllocatorTest, JobsGetDisjointBlocksFromTheStartOfTheRange) {
  HostPortAllocator ports(31000, 31999);
  auto a = ports.Allocate("ns/a", 10);
  auto b = ports.Allocate("ns/b", 5);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(*a, 31000);
  EXPECT_EQ(*b, 31010);
}

TEST(HostPortAllocatorTest, AJobKeepsItsBlockAcrossReconciles) {
  HostPortAllocator ports(31000, 31999);
  ASSERT_EQ(*ports.Allocate("ns/a", 10), 31000);
  ASSERT_EQ(*ports.Allocate("ns/b", 10), 31010);
  EXPECT_EQ(*ports.Allocate("ns/a", 10), 31000);
  EXPECT_EQ(ports.Holders(), 2u);
}

TEST(HostPortAllocatorTest, TheBlockRecordedInStatusIsHonouredAfterAnOperatorRestart) {
  HostPortAllocator ports(31000, 31999);
  EXPECT_EQ(*ports.Allocate("ns/b", 10, 31500), 31500);
  EXPECT_EQ(*ports.Allocate("ns/a", 10), 31000);  // the lowest block is still free
}

TEST(HostPortAllocatorTest, ARecordedBlockTakenByAnotherJobIsReplaced) {
  HostPortAllocator ports(31000, 31999);
  ASSERT_EQ(*ports.Allocate("ns/a", 10), 31000);
  EXPECT_EQ(*ports.Allocate("ns/b", 10, 31005), 31010);
}

TEST(HostPortAllocatorTest, ReleasedBlocksAreReusedAndGapsFilledLowestFirst) {
  HostPortAllocator ports(31000, 31999);
  ASSERT_EQ(*ports.Allocate("ns/a", 10), 31000);
  ASSERT_EQ(*ports.Allocate("ns/b", 10), 31010);
  ASSERT_EQ(*ports.Allocate("ns/c", 10), 31020);
  ports.Release("ns/b");
  EXPECT_EQ(*ports.Allocate("ns/d", 4), 31010);
  EXPECT_EQ(*ports.Allocate("ns/e", 8), 31030);  // 6 ports left in the gap are too few
}

// The controller requeues the jobs a release names: they may fit now.
TEST(HostPortAllocatorTest, ReleasingABlockNamesTheJobsThatWaitedForOne) {
  HostPortAllocator ports(31000, 31009);
  ASSERT_TRUE(ports.Allocate("ns/a", 8).ok());
  ASSERT_FALSE(ports.Allocate("ns/b", 3).ok());
  ASSERT_FALSE(ports.Allocate("ns/c", 5).ok());
  ASSERT_FALSE(ports.Allocate("ns/gone", 5).ok());
  EXPECT_TRUE(ports.Release("ns/gone").empty()) << "a waiting job frees nothing";
  EXPECT_EQ(ports.Release("ns/a"), (std::vector<std::string>{"ns/b", "ns/c"}));
  ASSERT_TRUE(ports.Allocate("ns/b", 3).ok());
  EXPECT_TRUE(ports.Release("ns/b").empty()) << "each waiting job is named once";
}

TEST(HostPortAllocatorTest, AnExhaustedRangeIsAClearError) {
  HostPortAllocator ports(31000, 31009);
  ASSERT_TRUE(ports.Allocate("ns/a", 8).ok());
  auto b = ports.Allocate("ns/b", 3);
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().find("no block of 3 free host ports"), std::string::npos) << b.error();
  EXPECT_FALSE(ports.Allocate("ns/c", 0).ok());
}

TEST(HostPortAllocatorTest, ConcurrentAllocationsNeverOverlap) {
  HostPortAllocator ports(30000, 39999);
  std::vector<std::pair<int, int>> got(64);
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int j = t; j < 64; j += 8) {
        const int size = 1 + j % 7;
        got[static_cast<size_t>(j)] = {*ports.Allocate("ns/job" + std::to_string(j), size), size};
      }
    });
  }
  for (auto& th : threads) th.join();
  for (size_t i = 0; i < got.size(); ++i) {
    for (size_t j = i + 1; j < got.size(); ++j) {
      EXPECT_FALSE(Overlap(got[i].first, got[i].second, got[j].first, got[j].second)) << i << " and " << j;
    }
  }
}

}  // namespace
}  // namespace fleet::op
