// Table configs: validation, descriptions, sharding, the strategy -> mode mapping.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "fleet/ps/config.h"
#include "fleet/ps/fleet.h"

namespace fleet::ps {
namespace {

TEST(PsConfigTest, DenseShardsSplitLikeNumpyArraySplit) {
  // numpy.array_split(range(10), 3) -> [0..4), [4..7), [7..10)
  EXPECT_EQ(DenseShardRange(10, 3, 0).begin, 0u);
  EXPECT_EQ(DenseShardRange(10, 3, 0).end, 4u);
  EXPECT_EQ(DenseShardRange(10, 3, 1).begin, 4u);
  EXPECT_EQ(DenseShardRange(10, 3, 1).end, 7u);
  EXPECT_EQ(DenseShardRange(10, 3, 2).begin, 7u);
  EXPECT_EQ(DenseShardRange(10, 3, 2).end, 10u);
  // Fewer values than servers: the last shards are empty.
  EXPECT_EQ(DenseShardRange(2, 3, 2).size(), 0u);
}

TEST(PsConfigTest, DenseShardsCoverTheTableExactlyOnce) {
  for (uint64_t size : {1u, 2u, 7u, 64u, 1000u, 4099u}) {
    for (int servers = 1; servers <= 9; ++servers) {
      uint64_t next = 0;
      for (int i = 0; i < servers; ++i) {
        const ShardRange r = DenseShardRange(size, servers, i);
        EXPECT_EQ(r.begin, next) << size << " over " << servers;
        EXPECT_LE(r.size(), size / servers + 1);
        next = r.end;
      }
      EXPECT_EQ(next, size);
    }
  }
}

TEST(PsConfigTest, SparseKeysGoToKeyModuloServers) {
  EXPECT_EQ(SparseShardOf(0, 2), 0);
  EXPECT_EQ(SparseShardOf(7, 2), 1);
  EXPECT_EQ(SparseShardOf(7, 3), 1);
  EXPECT_EQ(SparseShardOf(~uint64_t{0}, 3), static_cast<int>(~uint64_t{0} % 3));
}

TEST(PsConfigTest, StrategyPicksTheMode) {
  EXPECT_EQ((Strategy{false, 0}).mode(), Mode::kSync);
  EXPECT_EQ((Strategy{false, 10}).mode(), Mode::kSync);
  EXPECT_EQ((Strategy{true, 0}).mode(), Mode::kAsync);
  EXPECT_EQ((Strategy{true, 100}).mode(), Mode::kGeo);
}

TEST(PsConfigTest, ValidConfigsPass) {
  EXPECT_TRUE(ValidateTableConfig(TableConfig::Dense(0, 10, OptimizerConfig::Adam(0.001f))).ok());
  EXPECT_TRUE(ValidateTableConfig(TableConfig::Sparse(1, 8, OptimizerConfig::Adagrad(0.1f), Mode::kSync, 0.1f)).ok());
  TableConfig geo = TableConfig::Dense(2, 10, OptimizerConfig::Sgd(0.1f), Mode::kGeo);
  geo.k_steps = 100;
  EXPECT_TRUE(ValidateTableConfig(geo).ok());
}

TEST(PsConfigTest, BadConfigsAreRefusedWithWhatIsWrong) {
  struct Case {
    TableConfig config;
    const char* message;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  TableConfig geo_adam = TableConfig::Dense(1, 10, OptimizerConfig::Adam(0.1f), Mode::kGeo);
  geo_adam.k_steps = 10;
  TableConfig geo_no_k = TableConfig::Dense(1, 10, OptimizerConfig::Sgd(0.1f), Mode::kGeo);
  TableConfig async_k = TableConfig::Dense(1, 10, OptimizerConfig::Sgd(0.1f), Mode::kAsync);
  async_k.k_steps = 5;
  TableConfig bad_kind = TableConfig::Dense(1, 10, OptimizerConfig::Sgd(0.1f));
  bad_kind.kind = static_cast<TableKind>(7);
  TableConfig bad_mode = TableConfig::Dense(1, 10, OptimizerConfig::Sgd(0.1f));
  bad_mode.mode = static_cast<Mode>(0);
  TableConfig bad_opt = TableConfig::Dense(1, 10, OptimizerConfig::Sgd(0.1f));
  bad_opt.optimizer.kind = static_cast<OptimizerKind>(9);
  TableConfig dense_dim = TableConfig::Dense(1, 10, OptimizerConfig::Sgd(0.1f));
  dense_dim.dim = 3;
  TableConfig dense_rows = TableConfig::Dense(1, 10, OptimizerConfig::Sgd(0.1f));
  dense_rows.max_rows = 5;
  const Case cases[] = {
      {TableConfig::Dense(1, 0, OptimizerConfig::Sgd(0.1f)), "size > 0"},
      {TableConfig::Sparse(1, 0, OptimizerConfig::Sgd(0.1f)), "dim"},
      {TableConfig::Sparse(1, 8, OptimizerConfig::Sgd(0.1f), Mode::kAsync, -1.0f), "init_range"},
      {TableConfig::Dense(1, 10, OptimizerConfig::Sgd(-1.0f)), "learning_rate"},
      {TableConfig::Dense(1, 10, OptimizerConfig::Sgd(nan)), "learning_rate"},
      {TableConfig::Dense(1, 10, OptimizerConfig::Adam(0.1f, 1.0f)), "beta1"},
      {TableConfig::Dense(1, 10, OptimizerConfig::Adagrad(0.1f, 0.0f)), "epsilon"},
      {geo_adam, "only the SGD optimizer"},
      {geo_no_k, "k_steps > 0"},
      {async_k, "only for geo"},
      {bad_kind, "unknown kind"},
      {bad_mode, "unknown mode"},
      {bad_opt, "unknown optimizer"},
      {dense_dim, "no dim"},
      {dense_rows, "no max_rows"},
  };
  for (const Case& c : cases) {
    Status s = ValidateTableConfig(c.config);
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << c.message;
    EXPECT_NE(s.message().find(c.message), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("table 1"), std::string::npos) << s.message();
  }
}

TEST(PsConfigTest, LoadableChecksShapeAndOptimizerOnly) {
  TableConfig saved = TableConfig::Dense(3, 100, OptimizerConfig::Adam(0.01f), Mode::kSync);
  TableConfig declared = TableConfig::Dense(3, 100, OptimizerConfig::Adam(0.5f), Mode::kAsync);
  EXPECT_TRUE(CheckLoadable(saved, declared).ok());
  declared.size = 101;
  EXPECT_EQ(CheckLoadable(saved, declared).code(), Code::kFailedPrecondition);
  declared.size = 100;
  declared.optimizer.kind = OptimizerKind::kSgd;
  EXPECT_NE(CheckLoadable(saved, declared).message().find("adam state"), std::string::npos);
  // A sparse table's row limit is a setting, not state: a checkpoint loads under another one.
  const TableConfig sparse = TableConfig::Sparse(4, 8, OptimizerConfig::Sgd(0.1f));
  const TableConfig limited = TableConfig::Sparse(4, 8, OptimizerConfig::Sgd(0.1f), Mode::kAsync, 0, 0, 10);
  EXPECT_TRUE(CheckLoadable(sparse, limited).ok());
}

TEST(PsConfigTest, ARowLimitIsPartOfASparseTablesDeclaration) {
  const TableConfig limited = TableConfig::Sparse(4, 8, OptimizerConfig::Sgd(0.1f), Mode::kAsync, 0.1f, 7, 1000);
  EXPECT_EQ(limited.max_rows, 1000u);
  EXPECT_TRUE(ValidateTableConfig(limited).ok());
  EXPECT_EQ(DescribeTable(limited), "sparse table 4 (dim 8, sgd lr=0.1, async, max_rows 1000)");
  // Trainers declaring one table with different limits disagree.
  TableConfig other = limited;
  other.max_rows = 2000;
  EXPECT_FALSE(SameTableConfig(limited, other));
  EXPECT_TRUE(SameTableConfig(limited, limited));
}

TEST(PsConfigTest, NamesParseBack) {
  for (Mode m : {Mode::kSync, Mode::kAsync, Mode::kGeo}) {
    Mode parsed;
    ASSERT_TRUE(ParseMode(ModeName(m), &parsed).ok());
    EXPECT_EQ(parsed, m);
  }
  for (OptimizerKind k : {OptimizerKind::kSgd, OptimizerKind::kAdam, OptimizerKind::kAdagrad}) {
    OptimizerKind parsed;
    ASSERT_TRUE(ParseOptimizer(OptimizerName(k), &parsed).ok());
    EXPECT_EQ(parsed, k);
  }
  Mode m;
  EXPECT_EQ(ParseMode("semi", &m).code(), Code::kInvalidArgument);
  OptimizerKind k;
  EXPECT_EQ(ParseOptimizer("rmsprop", &k).code(), Code::kInvalidArgument);
  EXPECT_EQ(DescribeTable(TableConfig::Sparse(4, 8, OptimizerConfig::Adagrad(0.5f), Mode::kSync)),
            "sparse table 4 (dim 8, adagrad lr=0.5, sync)");
}

}  // namespace
}  // namespace fleet::ps
