// Shards: dense ranges with global offsets, sparse rows created on first pull with values that
// depend only on (seed, table, key), updates per mode, ownership checks, the sparse row limit,
// concurrent use.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <thread>
#include <vector>

#include "fleet/ps/table.h"
#include "ps_test_util.h"

namespace fleet::ps {
namespace {

TEST(PsTableTest, DenseShardUsesGlobalOffsets) {
  // Server 1 of 3 owns [4, 7) of a 10-value table.
  auto table = MakeShard(TableConfig::Dense(0, 10, OptimizerConfig::Sgd(1.0f)), 1, 3);
  DenseShard* d = table->AsDense();
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->range().begin, 4u);
  EXPECT_EQ(d->range().end, 7u);
  const float init[3] = {1, 2, 3};
  ASSERT_TRUE(d->Assign(4, init, 3).ok());
  const float grad[2] = {0.5f, 0.25f};
  ASSERT_TRUE(d->Update(5, grad, 2).ok());
  float out[3];
  ASSERT_TRUE(d->Pull(4, 3, out).ok());
  EXPECT_FLOAT_EQ(out[0], 1.0f);
  EXPECT_FLOAT_EQ(out[1], 1.5f);
  EXPECT_FLOAT_EQ(out[2], 2.75f);
  EXPECT_EQ(d->Pull(3, 1, out).code(), Code::kOutOfRange);
  EXPECT_EQ(d->Pull(6, 2, out).code(), Code::kOutOfRange);
  EXPECT_EQ(d->Update(7, grad, 1).code(), Code::kOutOfRange);
  EXPECT_NE(d->Pull(0, 1, out).message().find("[4, 7)"), std::string::npos);
}

// SGD keeps no optimizer state (an empty vector, whose data() is null), and a shard may hold no
// values at all (a table smaller than the server count): offsets into either, and copies of zero
// values from null, must not happen (UBSan: "applying non-zero offset to null pointer"). Run under
// -fsanitize=undefined to see it; here it checks the values.
TEST(PsTableTest, DenseShardsWithoutStateOrValuesTakeEveryCallIncludingEmptyOnes) {
  for (const OptimizerConfig& o : {OptimizerConfig::Sgd(1.0f), OptimizerConfig::Adagrad(1.0f), OptimizerConfig::Adam(1.0f)}) {
    SCOPED_TRACE(static_cast<int>(o.kind));
    auto table = MakeShard(TableConfig::Dense(0, 10, o), 1, 3);  // [4, 7)
    DenseShard* d = table->AsDense();
    const float init[2] = {1, 2};
    ASSERT_TRUE(d->Assign(5, init, 2).ok());  // an offset into the shard
    ASSERT_TRUE(d->Assign(7, nullptr, 0).ok());
    ASSERT_TRUE(d->Update(6, nullptr, 0).ok());
    ASSERT_TRUE(d->Update(6, init, 1).ok());
    ASSERT_TRUE(d->UpdateBytes(5, {}, 0).ok());
    ASSERT_TRUE(d->Pull(5, 0, nullptr).ok());
    ASSERT_TRUE(d->PullBytes(7, 0, nullptr).ok());
    float out[3];
    ASSERT_TRUE(d->Pull(4, 3, out).ok());
    EXPECT_EQ(out[0], 0.0f);
    EXPECT_EQ(out[1], 1.0f);
    EXPECT_LT(out[2], 2.0f);  // one step down, whatever the optimizer
  }
  // Server 4 of 5 owns nothing of a 3-value table: empty values and state.
  auto empty = MakeShard(TableConfig::Dense(0, 3, OptimizerConfig::Sgd(1.0f)), 4, 5);
  DenseShard* d = empty->AsDense();
  ASSERT_EQ(d->range().size(), 0u);
  const uint64_t at = d->range().begin;
  EXPECT_TRUE(d->Assign(at, nullptr, 0).ok());
  EXPECT_TRUE(d->Update(at, nullptr, 0).ok());
  EXPECT_TRUE(d->UpdateBytes(at, {}, 0).ok());
  EXPECT_TRUE(d->Pull(at, 0, nullptr).ok());
  EXPECT_TRUE(d->PullBytes(at, 0, nullptr).ok());
  d->LoadOverlap(0, nullptr, nullptr, 0);
}

TEST(PsTableTest, DenseGeoTableAddsDeltas) {
  TableConfig c = TableConfig::Dense(0, 2, OptimizerConfig::Sgd(0.1f), Mode::kGeo);
  c.k_steps = 5;
  auto table = MakeShard(c, 0, 1);
  const float delta[2] = {0.5f, -2.0f};
  ASSERT_TRUE(table->AsDense()->Update(0, delta, 2).ok());
  ASSERT_TRUE(table->AsDense()->Update(0, delta, 2).ok());
  float out[2];
  ASSERT_TRUE(table->AsDense()->Pull(0, 2, out).ok());
  EXPECT_FLOAT_EQ(out[0], 1.0f);
  EXPECT_FLOAT_EQ(out[1], -4.0f);
}

TEST(PsTableTest, AssignResetsOptimizerState) {
  auto table = MakeShard(TableConfig::Dense(0, 1, OptimizerConfig::Adagrad(1.0f)), 0, 1);
  const float g = 1.0f, v = 0.0f;
  ASSERT_TRUE(table->AsDense()->Update(0, &g, 1).ok());
  ASSERT_TRUE(table->AsDense()->Assign(0, &v, 1).ok());
  ASSERT_TRUE(table->AsDense()->Update(0, &g, 1).ok());
  float out;
  ASSERT_TRUE(table->AsDense()->Pull(0, 1, &out).ok());
  EXPECT_NEAR(out, -1.0, 1e-5);  // a first Adagrad step again: -lr * g / sqrt(g^2)
}

TEST(PsTableTest, SparseRowsAreCreatedOnFirstPullDeterministically) {
  const TableConfig c = TableConfig::Sparse(5, 4, OptimizerConfig::Sgd(0.1f), Mode::kAsync, 0.5f, 42);
  auto a = MakeShard(c, 1, 2);
  auto b = MakeShard(c, 1, 2);
  EXPECT_EQ(a->AsSparse()->RowCount(), 0u);
  const uint64_t keys_a[3] = {1, 3, 5};
  const uint64_t keys_b[3] = {5, 3, 1};
  float ra[12], rb[12];
  ASSERT_TRUE(a->AsSparse()->Pull(keys_a, 3, ra).ok());
  ASSERT_TRUE(b->AsSparse()->Pull(keys_b, 3, rb).ok());
  EXPECT_EQ(a->AsSparse()->RowCount(), 3u);
  for (int k = 0; k < 3; ++k) {
    for (int j = 0; j < 4; ++j) EXPECT_EQ(ra[k * 4 + j], rb[(2 - k) * 4 + j]) << "key " << keys_a[k];
  }
  bool differs = false;
  for (float v : ra) {
    EXPECT_LE(std::fabs(v), 0.5f);
    differs |= v != ra[0];
  }
  EXPECT_TRUE(differs);
  float expected[4];
  SparseShard::InitialRow(c, 3, expected);
  for (int j = 0; j < 4; ++j) EXPECT_EQ(ra[4 + j], expected[j]);
  // A second pull returns the same row and creates nothing.
  float again[4];
  ASSERT_TRUE(a->AsSparse()->Pull(keys_a + 1, 1, again).ok());
  for (int j = 0; j < 4; ++j) EXPECT_EQ(again[j], expected[j]);
  EXPECT_EQ(a->AsSparse()->RowCount(), 3u);
  // Another seed or table id gives other rows.
  TableConfig other = c;
  other.seed = 43;
  float o[4];
  SparseShard::InitialRow(other, 3, o);
  EXPECT_NE(o[0], expected[0]);
}

TEST(PsTableTest, SparseRowsStartAtZeroWithoutAnInitRange) {
  auto t = MakeShard(TableConfig::Sparse(0, 3, OptimizerConfig::Sgd(0.1f)), 0, 1);
  const uint64_t key = 99;
  float row[3] = {1, 1, 1};
  ASSERT_TRUE(t->AsSparse()->Pull(&key, 1, row).ok());
  for (float v : row) EXPECT_EQ(v, 0.0f);
}

TEST(PsTableTest, SparseUpdateRunsTheOptimizerPerRow) {
  auto t = MakeShard(TableConfig::Sparse(0, 2, OptimizerConfig::Adagrad(0.1f, 1e-6f)), 0, 1);
  const uint64_t keys[2] = {10, 20};
  const float g[4] = {2.0f, 0.0f, -1.0f, 1.0f};
  ASSERT_TRUE(t->AsSparse()->Update(keys, g, 2).ok());  // rows created (zeros), then one step
  ASSERT_TRUE(t->AsSparse()->Update(keys, g, 1).ok());  // key 10 again: acc 8
  float out[4];
  ASSERT_TRUE(t->AsSparse()->Pull(keys, 2, out).ok());
  // key 10, value 0: -0.1 * 2 / 2 - 0.1 * 2 / sqrt(8) = -0.1707106
  EXPECT_NEAR(out[0], -0.1707106, 1e-6);
  EXPECT_FLOAT_EQ(out[1], 0.0f);
  EXPECT_NEAR(out[2], 0.1, 1e-6);
  EXPECT_NEAR(out[3], -0.1, 1e-6);
}

TEST(PsTableTest, SparseShardRefusesKeysOfOtherServers) {
  auto t = MakeShard(TableConfig::Sparse(2, 2, OptimizerConfig::Sgd(0.1f)), 0, 2);
  const uint64_t keys[2] = {4, 7};
  float out[4];
  Status s = t->AsSparse()->Pull(keys, 2, out);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("key 7 of table 2 belongs to server 1"), std::string::npos) << s.message();
  EXPECT_EQ(t->AsSparse()->RowCount(), 0u);  // nothing created by a refused request
}

TEST(PsTableTest, ASparseShardCreatesNoRowsPastItsLimitAndKeepsServingTheOnesItHas) {
  // Server 1 of 2, at most 3 rows; keys are odd.
  auto t = MakeShard(TableConfig::Sparse(6, 2, OptimizerConfig::Sgd(1.0f), Mode::kAsync, 0.5f, 1, 3), 1, 2);
  SparseShard* shard = t->AsSparse();
  EXPECT_EQ(shard->max_rows(), 3u);
  const uint64_t first[2] = {1, 3};
  float rows[8];
  ASSERT_TRUE(shard->Pull(first, 2, rows).ok());
  const float before[2] = {rows[0], rows[1]};

  // Two new rows would make 4: the pull fails whole, naming the table, the server and the limit.
  const uint64_t two_new[3] = {1, 5, 7};
  Status s = shard->Pull(two_new, 3, rows);
  EXPECT_EQ(s.code(), Code::kResourceExhausted);
  for (const char* part : {"sparse table 6 is full on server 1 of 2", "holds 2 rows", "limit is 3 rows per server",
                           "pull would create 2 more", "max_rows"}) {
    EXPECT_NE(s.message().find(part), std::string::npos) << part << " in: " << s.message();
  }
  EXPECT_EQ(shard->RowCount(), 2u);
  // The same for a push: nothing applied, not even to the rows that exist.
  const float g[6] = {1, 1, 1, 1, 1, 1};
  EXPECT_EQ(shard->Update(two_new, g, 3).code(), Code::kResourceExhausted);
  ASSERT_TRUE(shard->Pull(first, 1, rows).ok());
  EXPECT_EQ(rows[0], before[0]);
  EXPECT_EQ(rows[1], before[1]);

  // Existing rows keep working, and a request that fits (a key twice counts once) goes through.
  ASSERT_TRUE(shard->Update(first, g, 2).ok());
  ASSERT_TRUE(shard->Pull(first, 1, rows).ok());
  EXPECT_EQ(rows[0], before[0] - 1.0f);
  const uint64_t one_new_twice[3] = {5, 3, 5};
  ASSERT_TRUE(shard->Pull(one_new_twice, 3, rows).ok());
  EXPECT_EQ(shard->RowCount(), 3u);
  const uint64_t another = 9;
  EXPECT_EQ(shard->Update(&another, g, 1).code(), Code::kResourceExhausted);
  EXPECT_EQ(shard->RowCount(), 3u);

  // A higher limit lets it grow again.
  shard->SetMaxRows(4, SparseShard::LimitSource::kServerDefault);
  ASSERT_TRUE(shard->Update(&another, g, 1).ok());
  EXPECT_EQ(shard->RowCount(), 4u);
  s = shard->Pull(two_new, 3, rows);
  EXPECT_NE(s.message().find("--sparse_max_rows"), std::string::npos) << s.message();
}

TEST(PsTableTest, ConcurrentRequestsCreateExactlyTheLimitsRows) {
  auto t = MakeShard(TableConfig::Sparse(0, 4, OptimizerConfig::Sgd(1.0f), Mode::kAsync, 0, 0, 100), 0, 1);
  std::atomic<int> created{0}, refused{0};
  // 4 threads race for 100 rows, each pulling 60 keys of its own and 20 that all of them share.
  testing::OnThreads(4, [&](int thread) {
    std::vector<float> row(4);
    for (uint64_t i = 0; i < 80; ++i) {
      const uint64_t key = i < 20 ? i : 1000 * static_cast<uint64_t>(thread + 1) + i;
      Status s = t->AsSparse()->Pull(&key, 1, row.data());
      if (s.ok()) {
        created++;
      } else {
        ASSERT_EQ(s.code(), Code::kResourceExhausted) << s.ToString();
        refused++;
      }
    }
  });
  // The rows really held, not only the counter the limit checks: a row created without being
  // counted, or counted twice, fails one of these.
  EXPECT_EQ(t->AsSparse()->CountStoredRows(), 100u);
  EXPECT_EQ(t->AsSparse()->RowCount(), 100u);
  EXPECT_EQ(created + refused, 320);
  EXPECT_GE(created, 100);
}

TEST(PsTableTest, TheDefaultRowLimitComesFromMemoryAndTheRowSize) {
  const TableConfig narrow = TableConfig::Sparse(0, 8, OptimizerConfig::Sgd(0.1f));
  const TableConfig wide = TableConfig::Sparse(0, 64, OptimizerConfig::Adam(0.1f));
  EXPECT_EQ(SparseShard::RowBytes(narrow), 8u * 4 + 48);
  EXPECT_EQ(SparseShard::RowBytes(wide), 64u * 5 * 4 + 48);
  const uint64_t memory =
      static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  for (const TableConfig& c : {narrow, wide}) {
    const uint64_t rows = SparseShard::DefaultMaxRows(c);
    EXPECT_GT(rows, 0u);
    EXPECT_LE(rows * SparseShard::RowBytes(c), memory / 2);
    EXPECT_EQ(MakeShard(c, 0, 1)->AsSparse()->max_rows(), rows);  // what a table declaring none gets
  }
  EXPECT_GT(SparseShard::DefaultMaxRows(narrow), SparseShard::DefaultMaxRows(wide));
}

TEST(PsTableTest, ConcurrentUpdatesAreAllApplied) {
  auto dense = MakeShard(TableConfig::Dense(0, 1000, OptimizerConfig::Sgd(1.0f)), 0, 1);
  auto sparse = MakeShard(TableConfig::Sparse(1, 4, OptimizerConfig::Sgd(1.0f)), 0, 1);
  const int kThreads = 4, kSteps = 200;
  testing::OnThreads(kThreads, [&](int t) {
    std::vector<float> g(1000, 1.0f);
    std::vector<uint64_t> keys;
    for (uint64_t k = 0; k < 50; ++k) keys.push_back(k * 7 + static_cast<uint64_t>(t % 2));
    std::vector<float> sg(keys.size() * 4, 1.0f), rows(keys.size() * 4);
    for (int s = 0; s < kSteps; ++s) {
      ASSERT_TRUE(dense->AsDense()->Update(0, g.data(), g.size()).ok());
      ASSERT_TRUE(sparse->AsSparse()->Update(keys.data(), sg.data(), keys.size()).ok());
      ASSERT_TRUE(sparse->AsSparse()->Pull(keys.data(), keys.size(), rows.data()).ok());
    }
  });
  std::vector<float> out(1000);
  ASSERT_TRUE(dense->AsDense()->Pull(0, 1000, out.data()).ok());
  for (float v : out) ASSERT_EQ(v, -static_cast<float>(kThreads * kSteps));
  EXPECT_EQ(sparse->AsSparse()->RowCount(), 100u);
  const uint64_t key = 7;
  float row[4];
  ASSERT_TRUE(sparse->AsSparse()->Pull(&key, 1, row).ok());
  EXPECT_EQ(row[0], -static_cast<float>(kThreads / 2 * kSteps));
}

}  // namespace
}  // namespace fleet::ps
