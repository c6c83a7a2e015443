// Checkpoints: a saved job loads back bit for bit (values and optimizer state), into another server
// count too; damaged, truncated or incomplete directories are refused with the file named.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "fleet/ps/table.h"
#include "ps_test_util.h"

namespace fleet::ps {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

const TableConfig kDense = TableConfig::Dense(0, 11, OptimizerConfig::Adam(0.01f), Mode::kSync);
const TableConfig kSparse = TableConfig::Sparse(1, 3, OptimizerConfig::Adagrad(0.1f), Mode::kSync, 0.2f, 9);

// The shards of both tables on `count` servers, trained a little.
std::vector<std::vector<std::unique_ptr<Table>>> TrainedJob(int count) {
  std::vector<std::vector<std::unique_ptr<Table>>> job(static_cast<size_t>(count));
  std::vector<float> init(11), g(11);
  for (int i = 0; i < 11; ++i) {
    init[static_cast<size_t>(i)] = 0.1f * static_cast<float>(i);
    g[static_cast<size_t>(i)] = 0.05f * static_cast<float>(i - 5);
  }
  for (int s = 0; s < count; ++s) {
    auto dense = MakeShard(kDense, s, count);
    DenseShard* d = dense->AsDense();
    EXPECT_TRUE(d->Assign(d->range().begin, init.data() + d->range().begin, d->range().size()).ok());
    for (int step = 0; step < 3; ++step) EXPECT_TRUE(d->Update(d->range().begin, g.data() + d->range().begin, d->range().size()).ok());
    auto sparse = MakeShard(kSparse, s, count);
    for (uint64_t key = 0; key < 40; ++key) {
      if (SparseShardOf(key, count) != s) continue;
      const float row_g[3] = {0.3f, -0.2f, static_cast<float>(key % 3)};
      EXPECT_TRUE(sparse->AsSparse()->Update(&key, row_g, 1).ok());
    }
    job[static_cast<size_t>(s)].push_back(std::move(dense));
    job[static_cast<size_t>(s)].push_back(std::move(sparse));
  }
  return job;
}

void Save(const std::vector<std::vector<std::unique_ptr<Table>>>& job, const std::string& dir) {
  for (size_t s = 0; s < job.size(); ++s) {
    for (const auto& t : job[s]) {
      Status st = t->Save(dir, static_cast<int>(s), static_cast<int>(job.size()));
      ASSERT_TRUE(st.ok()) << st.ToString();
    }
  }
}

// The whole dense table and rows 0..39 as the job (any server count) holds them.
std::vector<float> Snapshot(std::vector<std::vector<std::unique_ptr<Table>>>& job) {
  std::vector<float> out(11);
  const int count = static_cast<int>(job.size());
  for (auto& shard : job) {
    for (auto& t : shard) {
      if (DenseShard* d = t->AsDense()) {
        EXPECT_TRUE(d->Pull(d->range().begin, d->range().size(), out.data() + d->range().begin).ok());
      }
    }
  }
  for (uint64_t key = 0; key < 40; ++key) {
    for (auto& t : job[static_cast<size_t>(SparseShardOf(key, count))]) {
      if (SparseShard* sp = t->AsSparse()) {
        float row[3];
        EXPECT_TRUE(sp->Pull(&key, 1, row).ok());
        out.insert(out.end(), row, row + 3);
      }
    }
  }
  return out;
}

// Continues training: the same updates on a job and on its reloaded twin give the same values only
// if the optimizer state came back too.
void StepAll(std::vector<std::vector<std::unique_ptr<Table>>>& job) {
  std::vector<float> g(11, 0.5f);
  const int count = static_cast<int>(job.size());
  for (auto& shard : job) {
    for (auto& t : shard) {
      if (DenseShard* d = t->AsDense()) {
        EXPECT_TRUE(d->Update(d->range().begin, g.data(), d->range().size()).ok());
      }
    }
  }
  for (uint64_t key = 0; key < 40; ++key) {
    for (auto& t : job[static_cast<size_t>(SparseShardOf(key, count))]) {
      if (SparseShard* sp = t->AsSparse()) {
        const float row_g[3] = {1.0f, 1.0f, 1.0f};
        EXPECT_TRUE(sp->Update(&key, row_g, 1).ok());
      }
    }
  }
}

std::vector<std::vector<std::unique_ptr<Table>>> Load(const std::string& dir, int count) {
  std::vector<std::vector<std::unique_ptr<Table>>> job(static_cast<size_t>(count));
  for (int s = 0; s < count; ++s) {
    Status st = LoadShards(dir, s, count, &job[static_cast<size_t>(s)]);
    EXPECT_TRUE(st.ok()) << st.ToString();
    for (auto& t : job[static_cast<size_t>(s)]) EXPECT_TRUE(t->loaded());
  }
  return job;
}

TEST(PsCheckpointTest, SaveThenLoadRestoresValuesAndOptimizerState) {
  TempDir dir;
  auto job = TrainedJob(2);
  Save(job, dir.path());
  EXPECT_TRUE(fs::exists(fs::path(dir.path()) / "table_0.shard_0_of_2"));
  EXPECT_TRUE(fs::exists(fs::path(dir.path()) / "table_1.shard_1_of_2"));
  auto loaded = Load(dir.path(), 2);
  ASSERT_EQ(loaded[0].size(), 2u);
  EXPECT_TRUE(SameTableConfig(loaded[0][0]->config(), kDense));
  EXPECT_EQ(Snapshot(loaded), Snapshot(job));
  StepAll(job);
  StepAll(loaded);
  EXPECT_EQ(Snapshot(loaded), Snapshot(job));
}

TEST(PsCheckpointTest, AJobSavedByThreeServersLoadsIntoTwoAndIntoOne) {
  TempDir dir;
  auto job = TrainedJob(3);
  Save(job, dir.path());
  const std::vector<float> before = Snapshot(job);
  for (int count : {2, 1, 4}) {
    auto loaded = Load(dir.path(), count);
    EXPECT_EQ(Snapshot(loaded), before) << count << " servers";
    size_t rows = 0;
    for (auto& shard : loaded) {
      for (auto& t : shard) {
        if (t->AsSparse()) rows += t->AsSparse()->RowCount();
      }
    }
    EXPECT_EQ(rows, 40u);  // Snapshot pulled only the saved keys: nothing new was created
    StepAll(job);
    StepAll(loaded);
    EXPECT_EQ(Snapshot(loaded), Snapshot(job));
    job = Load(dir.path(), 3);
  }
}

TEST(PsCheckpointTest, SavingTwiceGivesTheSameFiles) {
  TempDir a, b;
  auto job = TrainedJob(2);
  Save(job, a.path());
  Save(job, b.path());
  for (const auto& entry : fs::directory_iterator(a.path())) {
    std::ifstream x(entry.path(), std::ios::binary), y(fs::path(b.path()) / entry.path().filename(), std::ios::binary);
    std::string xs((std::istreambuf_iterator<char>(x)), {}), ys((std::istreambuf_iterator<char>(y)), {});
    EXPECT_EQ(xs, ys) << entry.path();
  }
}

TEST(PsCheckpointTest, ADamagedFileIsRefusedByName) {
  TempDir dir;
  Save(TrainedJob(2), dir.path());
  const fs::path victim = fs::path(dir.path()) / "table_1.shard_0_of_2";
  {
    // A bit in the middle of the rows: only the checksum can tell.
    const auto middle = static_cast<std::streamoff>(fs::file_size(victim) / 2);
    std::fstream f(victim, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(middle);
    char c;
    f.read(&c, 1);
    f.seekp(middle);
    c = static_cast<char>(c ^ 0x40);
    f.write(&c, 1);
  }
  std::vector<std::unique_ptr<Table>> tables;
  Status s = LoadShards(dir.path(), 0, 2, &tables);
  EXPECT_EQ(s.code(), Code::kDataLoss);
  EXPECT_NE(s.message().find("table_1.shard_0_of_2 fails its checksum"), std::string::npos) << s.message();
}

TEST(PsCheckpointTest, ATruncatedFileIsRefused) {
  TempDir dir;
  Save(TrainedJob(2), dir.path());
  const fs::path victim = fs::path(dir.path()) / "table_0.shard_1_of_2";
  for (uintmax_t keep : {fs::file_size(victim) - 1, uintmax_t{60}, uintmax_t{5}, uintmax_t{0}}) {
    fs::resize_file(victim, keep);
    std::vector<std::unique_ptr<Table>> tables;
    Status s = LoadShards(dir.path(), 0, 2, &tables);
    EXPECT_EQ(s.code(), Code::kDataLoss) << keep;
    EXPECT_NE(s.message().find("table_0.shard_1_of_2"), std::string::npos) << s.message();
  }
}

TEST(PsCheckpointTest, AMissingShardIsRefused) {
  TempDir dir;
  Save(TrainedJob(3), dir.path());
  fs::remove(fs::path(dir.path()) / "table_1.shard_2_of_3");
  std::vector<std::unique_ptr<Table>> tables;
  Status s = LoadShards(dir.path(), 0, 2, &tables);
  EXPECT_EQ(s.code(), Code::kDataLoss);
  EXPECT_NE(s.message().find("lacks table_1.shard_2_of_3"), std::string::npos) << s.message();
}

TEST(PsCheckpointTest, ShardsOfDifferentJobsAreRefused) {
  TempDir dir;
  Save(TrainedJob(2), dir.path());
  // Shard 1 replaced by one from a job whose table 0 has other hyperparameters.
  TableConfig other = kDense;
  other.optimizer.learning_rate = 0.5f;
  ASSERT_TRUE(MakeShard(other, 1, 2)->Save(dir.path(), 1, 2).ok());
  std::vector<std::unique_ptr<Table>> tables;
  Status s = LoadShards(dir.path(), 0, 2, &tables);
  EXPECT_EQ(s.code(), Code::kDataLoss);
  EXPECT_NE(s.message().find("disagree on table 0"), std::string::npos) << s.message();
}

TEST(PsCheckpointTest, OtherFilesAreIgnoredAndAMissingDirectoryIsNotFound) {
  TempDir dir;
  std::ofstream(fs::path(dir.path()) / "README") << "not a shard";
  std::ofstream(fs::path(dir.path()) / "table_x.shard_0_of_1") << "not a shard either";
  std::vector<std::unique_ptr<Table>> tables;
  EXPECT_TRUE(LoadShards(dir.path(), 0, 1, &tables).ok());
  EXPECT_TRUE(tables.empty());
  EXPECT_EQ(LoadShards(dir.path() + "/nope", 0, 1, &tables).code(), Code::kNotFound);
  // A file named like a shard that is not one.
  std::ofstream(fs::path(dir.path()) / "table_3.shard_0_of_1") << "garbage garbage garbage";
  Status s = LoadShards(dir.path(), 0, 1, &tables);
  EXPECT_EQ(s.code(), Code::kDataLoss);
  EXPECT_NE(s.message().find("not a FleetJob parameter-server checkpoint"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace fleet::ps
