// ServerCore without RPC: the sync step (answers held until every trainer pushed, the average
// applied in trainer order), what breaks a step (a stopped trainer, a timeout, shutdown), barriers,
// table creation rules and request checks.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fleet/ps/server.h"
#include "ps_test_util.h"

namespace fleet::ps {
namespace {

using testing::Clock;
using testing::TempDir;

std::string F(std::vector<float> v) { return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4); }
std::string K(std::vector<uint64_t> k) { return std::string(reinterpret_cast<const char*>(k.data()), k.size() * 8); }
std::vector<float> Floats(const std::string& s) {
  std::vector<float> v(s.size() / 4);
  if (!s.empty()) std::memcpy(v.data(), s.data(), s.size());
  return v;
}

// Collects the answer of a call that may wait. A core declared before its answers is destroyed
// after them and aborts the waits still open: the callback then finds the answer gone instead of
// writing into a dead stack frame (ASan: stack-use-after-scope).
struct Answer {
  std::optional<Status> status;
  std::shared_ptr<Answer*> self = std::make_shared<Answer*>(this);
  Answer() = default;
  Answer(const Answer&) = delete;
  Answer& operator=(const Answer&) = delete;
  ~Answer() { *self = nullptr; }
  Done done() {
    return [self = self](Status s) {
      if (*self) (*self)->status = s;
    };
  }
};

ServerOptions Opts(int trainers, int index = 0, int count = 1) {
  ServerOptions o;
  o.server_index = index;
  o.server_count = count;
  o.trainers = trainers;
  return o;
}

std::vector<float> PullAll(ServerCore& core, uint32_t table, uint64_t begin, uint64_t end) {
  std::string out;
  Status s = core.PullDense(table, begin, end, &out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  return Floats(out);
}

TEST(PsServerCoreTest, SyncDenseStepWaitsForEveryTrainerThenAppliesTheAverage) {
  ServerCore core(Opts(3));
  ASSERT_TRUE(core.Declare(TableConfig::Dense(0, 2, OptimizerConfig::Sgd(1.0f), Mode::kSync)).ok());
  Answer a0, a1, a2;
  core.PushDense(0, 0, 2, F({3, 0}), a2.done());
  core.PushDense(0, 0, 0, F({1, 1}), a0.done());
  EXPECT_FALSE(a0.status || a2.status);
  EXPECT_EQ(PullAll(core, 0, 0, 2), (std::vector<float>{0, 0}));  // nothing applied yet
  core.PushDense(0, 0, 1, F({2, 2}), a1.done());
  ASSERT_TRUE(a0.status && a1.status && a2.status);
  EXPECT_TRUE(a0.status->ok() && a1.status->ok() && a2.status->ok());
  EXPECT_EQ(PullAll(core, 0, 0, 2), (std::vector<float>{-2, -1}));  // - (1+2+3)/3, - (1+2+0)/3
  // The next step starts fresh.
  Answer b0;
  core.PushDense(0, 0, 0, F({3, 3}), b0.done());
  EXPECT_FALSE(b0.status);
}

TEST(PsServerCoreTest, SyncStepsAreKeptPerRange) {
  ServerCore core(Opts(2));
  ASSERT_TRUE(core.Declare(TableConfig::Dense(0, 4, OptimizerConfig::Sgd(1.0f), Mode::kSync)).ok());
  Answer a, b, c, d;
  core.PushDense(0, 0, 0, F({2, 2}), a.done());
  core.PushDense(0, 2, 1, F({4, 4}), b.done());  // another range: another step
  EXPECT_FALSE(a.status || b.status);
  core.PushDense(0, 2, 0, F({0, 0}), c.done());
  ASSERT_TRUE(b.status && c.status);
  EXPECT_EQ(PullAll(core, 0, 0, 4), (std::vector<float>{0, 0, -2, -2}));
  core.PushDense(0, 0, 1, F({2, 2, 2}), d.done());  // wrong length for this range's step
  ASSERT_TRUE(d.status);
  EXPECT_EQ(d.status->code(), Code::kInvalidArgument);
}

TEST(PsServerCoreTest, SyncSparseStepAveragesOverAllTrainers) {
  ServerCore core(Opts(2));
  ASSERT_TRUE(core.Declare(TableConfig::Sparse(1, 2, OptimizerConfig::Sgd(1.0f), Mode::kSync)).ok());
  Answer a, b, c;
  // Trainer 0 sends its step in two chunks, trainer 1 in one.
  core.PushSparse(1, 0, 2, K({5}), F({2, 2}), a.done());
  core.PushSparse(1, 1, 1, K({5, 6}), F({4, 4, 6, 6}), b.done());
  EXPECT_FALSE(a.status || b.status);
  core.PushSparse(1, 0, 2, K({7}), F({8, 8}), c.done());
  ASSERT_TRUE(a.status && b.status && c.status);
  EXPECT_TRUE(a.status->ok());
  std::string out;
  ASSERT_TRUE(core.PullSparse(1, K({5, 6, 7}), &out).ok());
  EXPECT_EQ(Floats(out), (std::vector<float>{-3, -3, -3, -3, -4, -4}));  // (2+4)/2, 6/2, 8/2
}

TEST(PsServerCoreTest, PushingTwiceInOneSyncStepIsRefused) {
  ServerCore core(Opts(2));
  ASSERT_TRUE(core.Declare(TableConfig::Dense(0, 1, OptimizerConfig::Sgd(1.0f), Mode::kSync)).ok());
  ASSERT_TRUE(core.Declare(TableConfig::Sparse(1, 1, OptimizerConfig::Sgd(1.0f), Mode::kSync)).ok());
  Answer a, b, c, d, e;
  core.PushDense(0, 0, 0, F({1}), a.done());
  core.PushDense(0, 0, 0, F({1}), b.done());
  ASSERT_TRUE(b.status);
  EXPECT_EQ(b.status->code(), Code::kFailedPrecondition);
  EXPECT_NE(b.status->message().find("twice in one sync step"), std::string::npos);
  core.PushSparse(1, 0, 1, K({1}), F({1}), c.done());
  core.PushSparse(1, 0, 1, K({1}), F({1}), d.done());
  ASSERT_TRUE(d.status);
  EXPECT_EQ(d.status->code(), Code::kFailedPrecondition);
  core.PushSparse(1, 0, 3, K({1}), F({1}), e.done());  // a different chunk count for the same step
  ASSERT_TRUE(e.status);
  EXPECT_EQ(e.status->code(), Code::kInvalidArgument);
  EXPECT_FALSE(a.status || c.status);
}

TEST(PsServerCoreTest, AStoppedTrainerFailsTheStepsThatWaitForIt) {
  ServerCore core(Opts(2));
  ASSERT_TRUE(core.Declare(TableConfig::Dense(0, 1, OptimizerConfig::Sgd(1.0f), Mode::kSync)).ok());
  Answer waiting, later;
  core.PushDense(0, 0, 0, F({1}), waiting.done());
  bool all = true;
  ASSERT_TRUE(core.StopWorker(1, &all).ok());
  EXPECT_FALSE(all);
  ASSERT_TRUE(waiting.status);
  EXPECT_EQ(waiting.status->code(), Code::kFailedPrecondition);
  EXPECT_NE(waiting.status->message().find("trainer 1 has stopped"), std::string::npos) << waiting.status->message();
  core.PushDense(0, 0, 0, F({1}), later.done());
  ASSERT_TRUE(later.status);
  EXPECT_FALSE(later.status->ok());
  ASSERT_TRUE(core.StopWorker(0, &all).ok());
  EXPECT_TRUE(all);
  EXPECT_TRUE(core.WaitAllStopped(Clock::now()));
}

TEST(PsServerCoreTest, ASyncStepThatWaitsTooLongFailsAndBreaksTheTable) {
  ServerOptions o = Opts(2);
  o.sync_timeout = std::chrono::seconds(5);
  ServerCore core(o);
  ASSERT_TRUE(core.Declare(TableConfig::Dense(0, 1, OptimizerConfig::Sgd(1.0f), Mode::kSync)).ok());
  Answer waiting, later;
  const auto start = Clock::now();
  core.PushDense(0, 0, 0, F({1}), waiting.done());
  const auto next = core.ExpireWaiters(start + std::chrono::seconds(1));
  EXPECT_FALSE(waiting.status);
  EXPECT_GE(next, start + std::chrono::seconds(5));
  EXPECT_LE(next, Clock::now() + std::chrono::seconds(5));
  core.ExpireWaiters(Clock::now() + std::chrono::seconds(6));
  ASSERT_TRUE(waiting.status);
  EXPECT_EQ(waiting.status->code(), Code::kAborted);
  EXPECT_NE(waiting.status->message().find("waited 5 s for trainer(s) 1"), std::string::npos) << waiting.status->message();
  core.PushDense(0, 0, 1, F({1}), later.done());
  ASSERT_TRUE(later.status);
  EXPECT_EQ(later.status->code(), Code::kAborted);
  EXPECT_EQ(core.ExpireWaiters(Clock::now()), Clock::time_point::max());
}

TEST(PsServerCoreTest, AbortFailsEveryWaiter) {
  ServerCore core(Opts(2));
  ASSERT_TRUE(core.Declare(TableConfig::Sparse(1, 1, OptimizerConfig::Sgd(1.0f), Mode::kSync)).ok());
  Answer push, barrier, after;
  core.PushSparse(1, 0, 1, K({1}), F({1}), push.done());
  core.Barrier(1, 0, barrier.done());
  core.AbortWaiters(Unavailable("shutting down"));
  ASSERT_TRUE(push.status && barrier.status);
  EXPECT_EQ(push.status->code(), Code::kUnavailable);
  EXPECT_EQ(barrier.status->code(), Code::kUnavailable);
  core.Barrier(0, 0, after.done());
  ASSERT_TRUE(after.status);
  EXPECT_EQ(after.status->code(), Code::kUnavailable);
}

TEST(PsServerCoreTest, BarrierReleasesEveryoneAtOnceAndCountsGenerations) {
  ServerCore core(Opts(3));
  Answer a, b, c, wrong, twice;
  core.Barrier(0, 0, a.done());
  core.Barrier(2, 0, b.done());
  core.Barrier(2, 0, twice.done());
  ASSERT_TRUE(twice.status);
  EXPECT_EQ(twice.status->code(), Code::kFailedPrecondition);
  EXPECT_FALSE(a.status || b.status);
  core.Barrier(1, 0, c.done());
  ASSERT_TRUE(a.status && b.status && c.status);
  EXPECT_TRUE(a.status->ok() && c.status->ok());
  core.Barrier(0, 0, wrong.done());  // generation 0 is over
  ASSERT_TRUE(wrong.status);
  EXPECT_NE(wrong.status->message().find("the others are at barrier 1"), std::string::npos);
}

TEST(PsServerCoreTest, AsyncAndGeoPushesApplyOnArrival) {
  ServerCore core(Opts(2));
  ASSERT_TRUE(core.Declare(TableConfig::Dense(0, 2, OptimizerConfig::Sgd(0.5f), Mode::kAsync)).ok());
  TableConfig geo = TableConfig::Dense(1, 2, OptimizerConfig::Sgd(0.5f), Mode::kGeo);
  geo.k_steps = 3;
  ASSERT_TRUE(core.Declare(geo).ok());
  Answer a, b;
  core.PushDense(0, 0, 1, F({2, 4}), a.done());
  core.PushDense(1, 0, 1, F({2, 4}), b.done());
  ASSERT_TRUE(a.status && a.status->ok() && b.status && b.status->ok());
  EXPECT_EQ(PullAll(core, 0, 0, 2), (std::vector<float>{-1, -2}));  // lr * g
  EXPECT_EQ(PullAll(core, 1, 0, 2), (std::vector<float>{2, 4}));    // + delta
}

TEST(PsServerCoreTest, AnEmptySparsePushIsAnsweredAndChangesNothing) {
  // (No keys: nothing may be copied from or into an empty buffer; UBSan checks that memcpy is not
  // handed an empty vector's null data().)
  ServerCore core(Opts(1));
  ASSERT_TRUE(core.Declare(TableConfig::Sparse(0, 2, OptimizerConfig::Sgd(1.0f), Mode::kAsync)).ok());
  Answer a;
  core.PushSparse(0, 0, 1, std::string(), std::string(), a.done());
  ASSERT_TRUE(a.status);
  EXPECT_TRUE(a.status->ok()) << a.status->ToString();
  EXPECT_EQ(core.FindTable(0)->AsSparse()->CountStoredRows(), 0u);
}

TEST(PsServerCoreTest, CreatingATableAgainIsFineOnlyWithTheSameConfig) {
  ServerCore core(Opts(1));
  bool created = false, loaded = true;
  const TableConfig t = TableConfig::Dense(3, 10, OptimizerConfig::Adam(0.01f), Mode::kAsync);
  ASSERT_TRUE(core.CreateTable(t, &created, &loaded).ok());
  EXPECT_TRUE(created);
  EXPECT_FALSE(loaded);
  ASSERT_TRUE(core.CreateTable(t, &created, &loaded).ok());
  EXPECT_FALSE(created);
  TableConfig other = t;
  other.optimizer.learning_rate = 0.02f;
  Status s = core.CreateTable(other, &created, &loaded);
  EXPECT_EQ(s.code(), Code::kFailedPrecondition);
  EXPECT_NE(s.message().find("dense table 3 (size 10, adam lr=0.01, async) exists"), std::string::npos) << s.message();
  TableConfig bad = t;
  bad.size = 0;
  EXPECT_EQ(core.CreateTable(bad, &created, &loaded).code(), Code::kInvalidArgument);
}

TEST(PsServerCoreTest, ALoadedTableTakesTheDeclaredHyperparametersAndKeepsItsValues) {
  TempDir dir;
  {
    ServerOptions o = Opts(1);
    o.save_root = dir.path();
    ServerCore core(o);
    ASSERT_TRUE(core.Declare(TableConfig::Dense(0, 3, OptimizerConfig::Sgd(1.0f), Mode::kSync)).ok());
    bool applied = false;
    ASSERT_TRUE(core.InitDense(0, 0, F({1, 2, 3}), &applied).ok());
    EXPECT_TRUE(applied);
    uint32_t n = 0;
    ASSERT_TRUE(core.Save(dir.path(), &n).ok());
    EXPECT_EQ(n, 1u);
  }
  ServerCore core(Opts(1));
  ASSERT_TRUE(core.LoadModelDir(dir.path()).ok());
  // Declared again with another learning rate and mode: accepted, and it is what applies.
  ASSERT_TRUE(core.Declare(TableConfig::Dense(0, 3, OptimizerConfig::Sgd(0.5f), Mode::kAsync)).ok());
  bool applied = true;
  ASSERT_TRUE(core.InitDense(0, 0, F({9, 9, 9}), &applied).ok());
  EXPECT_FALSE(applied);  // trainers' initial values do not overwrite a checkpoint
  Answer a;
  core.PushDense(0, 0, 0, F({2, 2, 2}), a.done());
  ASSERT_TRUE(a.status && a.status->ok());
  EXPECT_EQ(PullAll(core, 0, 0, 3), (std::vector<float>{0, 1, 2}));
  // Another shape is refused.
  ServerCore other(Opts(1));
  ASSERT_TRUE(other.LoadModelDir(dir.path()).ok());
  bool created = false, loaded = false;
  Status s = other.CreateTable(TableConfig::Dense(0, 4, OptimizerConfig::Sgd(0.5f)), &created, &loaded);
  EXPECT_EQ(s.code(), Code::kFailedPrecondition);
  EXPECT_NE(s.message().find("the checkpoint holds dense table 0 (size 3"), std::string::npos) << s.message();
}

// The shard's limit, through the table the core serves.
uint64_t MaxRows(ServerCore& core, uint32_t table) { return core.FindTable(table)->AsSparse()->max_rows(); }

TEST(PsServerCoreTest, ASparseTablesRowLimitIsItsDeclarationsElseTheServersDefault) {
  ServerOptions o = Opts(1);
  o.sparse_max_rows = 2;
  ServerCore core(o);
  ASSERT_TRUE(core.Declare(TableConfig::Sparse(0, 2, OptimizerConfig::Sgd(1.0f))).ok());
  ASSERT_TRUE(core.Declare(TableConfig::Sparse(1, 2, OptimizerConfig::Sgd(1.0f), Mode::kAsync, 0, 0, 3)).ok());
  EXPECT_EQ(MaxRows(core, 0), 2u);
  EXPECT_EQ(MaxRows(core, 1), 3u);
  std::string out;
  ASSERT_TRUE(core.PullSparse(0, K({1, 2}), &out).ok());
  Status s = core.PullSparse(0, K({3}), &out);
  EXPECT_EQ(s.code(), Code::kResourceExhausted);
  EXPECT_NE(s.message().find("the servers' default, --sparse_max_rows"), std::string::npos) << s.message();
  ASSERT_TRUE(core.PullSparse(1, K({1, 2, 3}), &out).ok());
  // Without a server default, a table declaring none gets the memory-derived limit.
  ServerCore plain(Opts(1));
  const TableConfig t = TableConfig::Sparse(0, 2, OptimizerConfig::Sgd(1.0f));
  ASSERT_TRUE(plain.Declare(t).ok());
  EXPECT_EQ(MaxRows(plain, 0), SparseShard::DefaultMaxRows(t));
}

TEST(PsServerCoreTest, ASyncSparseStepPastTheRowLimitFailsEveryPusherAndAppliesNothing) {
  ServerCore core(Opts(2));
  ASSERT_TRUE(core.Declare(TableConfig::Sparse(0, 1, OptimizerConfig::Sgd(1.0f), Mode::kSync, 0, 0, 2)).ok());
  std::string out;
  ASSERT_TRUE(core.PullSparse(0, K({1}), &out).ok());
  Answer a0, a1;
  core.PushSparse(0, 0, 1, K({1, 2}), F({1, 1}), a0.done());
  core.PushSparse(0, 1, 1, K({1, 3}), F({1, 1}), a1.done());  // together 3 rows
  ASSERT_TRUE(a0.status && a1.status);
  EXPECT_EQ(a0.status->code(), Code::kResourceExhausted) << a0.status->ToString();
  EXPECT_EQ(a1.status->code(), Code::kResourceExhausted);
  EXPECT_NE(a0.status->message().find("this push would create 2 more"), std::string::npos) << a0.status->message();
  ASSERT_TRUE(core.PullSparse(0, K({1}), &out).ok());
  EXPECT_EQ(Floats(out), (std::vector<float>{0}));  // row 1 untouched
  EXPECT_EQ(core.FindTable(0)->AsSparse()->RowCount(), 1u);
}

TEST(PsServerCoreTest, ALoadedSparseTableTakesTheDeclaredRowLimitAndKeepsItsRows) {
  TempDir dir;
  {
    ServerOptions o = Opts(1);
    o.save_root = dir.path();
    ServerCore core(o);
    ASSERT_TRUE(core.Declare(TableConfig::Sparse(0, 2, OptimizerConfig::Sgd(1.0f))).ok());
    std::string out;
    ASSERT_TRUE(core.PullSparse(0, K({1, 2, 3}), &out).ok());
    uint32_t n = 0;
    ASSERT_TRUE(core.Save(dir.path(), &n).ok());
  }
  ServerCore core(Opts(1));
  ASSERT_TRUE(core.LoadModelDir(dir.path()).ok());
  // Declared with a limit below what the checkpoint holds: its rows stay and serve, none are added.
  ASSERT_TRUE(core.Declare(TableConfig::Sparse(0, 2, OptimizerConfig::Sgd(1.0f), Mode::kAsync, 0, 0, 2)).ok());
  EXPECT_EQ(MaxRows(core, 0), 2u);
  std::string out;
  EXPECT_TRUE(core.PullSparse(0, K({1, 2, 3}), &out).ok());
  EXPECT_EQ(core.PullSparse(0, K({4}), &out).code(), Code::kResourceExhausted);
}

// A remote InitDense of an SGD table (no optimizer state) at an offset, and with no values at all,
// reaches DenseShard::Assign with null pointers and zero counts (found by UBSan, issue 14).
TEST(PsServerCoreTest, InitDenseOfAnSgdTableAtAnOffsetAndWithNoValues) {
  ServerCore core(Opts(1, 1, 2));  // server 1 of 2 owns [3, 6) of 6 values
  ASSERT_TRUE(core.Declare(TableConfig::Dense(0, 6, OptimizerConfig::Sgd(1.0f))).ok());
  bool applied = false;
  ASSERT_TRUE(core.InitDense(0, 4, F({7, 8}), &applied).ok());
  EXPECT_TRUE(applied);
  ASSERT_TRUE(core.InitDense(0, 3, "", &applied).ok());
  ASSERT_TRUE(core.InitDense(0, 6, "", &applied).ok());
  EXPECT_EQ(PullAll(core, 0, 3, 6), (std::vector<float>{0, 7, 8}));
  EXPECT_TRUE(PullAll(core, 0, 6, 6).empty());
}

TEST(PsServerCoreTest, RequestsAreCheckedBeforeAnythingHappens) {
  ServerOptions o = Opts(2, 0, 2);
  o.max_message_bytes = 1024;
  ServerCore core(o);
  ASSERT_TRUE(core.Declare(TableConfig::Dense(0, 1000, OptimizerConfig::Sgd(1.0f))).ok());
  ASSERT_TRUE(core.Declare(TableConfig::Sparse(1, 4, OptimizerConfig::Sgd(1.0f))).ok());
  std::string out;
  EXPECT_EQ(core.PullDense(9, 0, 1, &out).code(), Code::kNotFound);
  EXPECT_EQ(core.PullDense(1, 0, 1, &out).code(), Code::kInvalidArgument);           // a sparse table
  EXPECT_EQ(core.PullDense(0, 0, 300, &out).code(), Code::kResourceExhausted);       // 1200 bytes > 1024
  EXPECT_EQ(core.PullDense(0, 0, ~uint64_t{0}, &out).code(), Code::kResourceExhausted);
  EXPECT_EQ(core.PullDense(0, 5, 4, &out).code(), Code::kInvalidArgument);           // end before begin
  EXPECT_EQ(core.PullDense(0, 490, 510, &out).code(), Code::kOutOfRange);            // server 0 owns [0, 500)
  EXPECT_EQ(core.PullSparse(1, std::string(7, 'x'), &out).code(), Code::kInvalidArgument);
  EXPECT_EQ(core.PullSparse(1, K(std::vector<uint64_t>(100, 2)), &out).code(), Code::kResourceExhausted);
  EXPECT_EQ(core.PullSparse(1, K({3}), &out).code(), Code::kInvalidArgument);         // key of server 1
  std::vector<Answer> answers(6);
  core.PushDense(0, 0, 0, std::string(5, 'x'), answers[0].done());
  core.PushDense(0, 0, 7, F({1}), answers[1].done());                                   // trainer 7 of 2
  core.PushSparse(1, 0, 1, K({2}), F({1, 2}), answers[2].done());                       // dim 4 needs 4 values
  core.PushSparse(1, 0, 1, std::string(9, 'k'), F({}), answers[3].done());
  core.PushSparse(0, 0, 1, K({2}), F({1, 2, 3, 4}), answers[4].done());                 // a dense table
  core.PushDense(0, 600, 0, F({1}), answers[5].done());                                 // server 1's range
  const Code expected[] = {Code::kInvalidArgument, Code::kInvalidArgument, Code::kInvalidArgument,
                           Code::kInvalidArgument, Code::kInvalidArgument, Code::kOutOfRange};
  for (size_t i = 0; i < answers.size(); ++i) {
    ASSERT_TRUE(answers[i].status) << i;
    EXPECT_EQ(answers[i].status->code(), expected[i]) << i << ": " << answers[i].status->ToString();
  }
  bool all = false;
  EXPECT_EQ(core.StopWorker(2, &all).code(), Code::kInvalidArgument);
  uint32_t n = 0;
  EXPECT_EQ(core.Save("/proc/forbidden/dir", &n).code(), Code::kPermissionDenied);  // outside the save root
}

// Issue 14: any peer could Save(dirname) anywhere the server can write. Saves go under the save root
// (ServerOptions::save_root, else model_dir, else the working directory at start).
TEST(PsServerCoreTest, SavesStayInsideTheSaveRoot) {
  TempDir dir;
  const std::string root = dir.path() + "/root";
  std::filesystem::create_directories(root);
  std::filesystem::create_directory_symlink("/", root + "/out");  // a link that leads out
  ServerOptions o = Opts(1);
  o.save_root = root;
  ServerCore core(o);
  ASSERT_TRUE(core.Declare(TableConfig::Dense(0, 3, OptimizerConfig::Sgd(1.0f))).ok());
  uint32_t n = 0;
  ASSERT_TRUE(core.Save("epoch1", &n).ok());  // relative: under the root
  EXPECT_TRUE(std::filesystem::exists(root + "/epoch1/table_0.shard_0_of_1"));
  ASSERT_TRUE(core.Save(root + "/a/b", &n).ok());  // absolute, inside
  EXPECT_TRUE(std::filesystem::exists(root + "/a/b/table_0.shard_0_of_1"));
  ASSERT_TRUE(core.Save(root, &n).ok());  // the root itself
  for (const std::string& bad : {dir.path() + "/elsewhere", std::string("/tmp/fleet-ps-outside"), std::string("../up"),
                                 std::string("a/../../up"), std::string("a/.."), root + "/../root2", std::string("out/tmp/x")}) {
    const Status s = core.Save(bad, &n);
    EXPECT_EQ(s.code(), Code::kPermissionDenied) << bad << ": " << s.ToString();
    EXPECT_NE(s.message().find("outside this server's save root " + root), std::string::npos) << s.message();
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/elsewhere"));
  EXPECT_FALSE(std::filesystem::exists("/tmp/fleet-ps-outside"));
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/root2"));
  // Without a save root the model directory is the root; without either, the working directory.
  ServerOptions m = Opts(1);
  m.model_dir = root;
  EXPECT_EQ(ServerCore(m).options().save_root, root);
  EXPECT_EQ(ServerCore(Opts(1)).options().save_root, std::filesystem::current_path().string());
  std::string where;
  ASSERT_TRUE(ServerCore(m).SaveDirectory("x", &where).ok());
  EXPECT_EQ(where, std::filesystem::weakly_canonical(root + "/x").string());
}

}  // namespace
}  // namespace fleet::ps
