// Shards: dense ranges with global offsets, sparse rows created on first pull with values that
// depend only on (seed, table, key), updates per mode, ownership checks, concurrent use.
#include <gtest/gtest.h>

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
