// Geo exchanges that fail part way: two servers, one trainer, and server 1 down when the trainer's
// k-th push sends its delta, so that server 0 applies its part of the delta and server 1 does not.
// Server 1 then comes back on the same port from a checkpoint taken before training (it never got
// the delta, so it lost nothing), and the trainer goes on.
//
// What is asserted (runtime/ps/src/worker.cc, GeoSendDense / GeoSendSparse / Flush):
//  - the exchange fails naming server 1 (PsClient annotates failures with the server);
//  - the trainer keeps training on its own copy after a failure;
//  - nothing is lost: the delta that did not reach server 1 reaches it with the next exchange or
//    Flush;
//  - a delta is added once per server: server 0, which applied its part, does not get it again;
//  - Flush sends every table's pending deltas and then drops the local copies; StopWorker and Save
//    flush first; a Flush that fails keeps the copies, and StopWorker then tells no server.
// SGD with lr 0.5 and gradients that are small integers times 2 keep every value exact.
#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "fleet/ps/table.h"
#include "ps_test_util.h"

namespace fleet::ps {
namespace {

using testing::Clock;
using testing::Cluster;
using testing::Connect;
using testing::Options;
using testing::StartCluster;
using testing::TempDir;

constexpr uint32_t kDense = 0;
constexpr uint32_t kSparse = 1;
constexpr float kLr = 0.5f;

TableConfig GeoDense() {
  TableConfig t = TableConfig::Dense(kDense, 4, OptimizerConfig::Sgd(kLr), Mode::kGeo);
  t.k_steps = 2;
  return t;
}

TableConfig GeoSparse() {
  TableConfig t = TableConfig::Sparse(kSparse, 2, OptimizerConfig::Sgd(kLr), Mode::kGeo);  // new rows: 0
  t.k_steps = 2;
  return t;
}

// Two servers (dense: server 0 holds [0, 2), server 1 [2, 4); sparse: even keys on server 0, odd
// on server 1), one geo trainer, and a checkpoint of the tables as initialized.
struct GeoJob {
  TempDir checkpoint;
  TableConfig table;
  Cluster c;
  std::unique_ptr<Worker> worker;
  int port1 = 0;

  explicit GeoJob(const TableConfig& t) : table(t) {
    c = StartCluster(2, 1, "", [&](ServerOptions& o) { o.save_root = checkpoint.path(); });
    if (c.servers.size() != 2) return;
    port1 = c.servers[1]->port();
    worker = std::make_unique<Worker>(Connect(Options(c.endpoints, 0, 1)));
  }

  // Server 1 goes away; its port refuses connections.
  void StopServer1() { c.servers[1].reset(); }

  // Server 1 comes back on its port, from the checkpoint, with the table declared.
  Status RestartServer1() {
    ServerOptions o;
    o.bind_address = "127.0.0.1:" + std::to_string(port1);
    o.server_index = 1;
    o.server_count = 2;
    o.trainers = 1;
    o.model_dir = checkpoint.path();
    o.tables = {table};
    return PsServer::Start(o, &c.servers[1]);
  }

  // What server s holds of the dense table (its range).
  std::vector<float> DenseValues(size_t s) {
    DenseShard* shard = c.servers[s]->core().FindTable(kDense)->AsDense();
    std::vector<float> out(shard->range().size());
    EXPECT_TRUE(shard->Pull(shard->range().begin, out.size(), out.data()).ok());
    return out;
  }

  // Row `key` as its server holds it.
  std::vector<float> SparseRow(uint64_t key) {
    SparseShard* shard = c.servers[static_cast<size_t>(SparseShardOf(key, 2))]->core().FindTable(kSparse)->AsSparse();
    std::vector<float> row(table.dim);
    EXPECT_TRUE(shard->Pull(&key, 1, row.data()).ok());
    return row;
  }
};

// Dense: init {1, 2, 3, 4}; two steps of g1 (lr * g1 = {1, 2, 3, 4}) make the first exchange's delta
// d1 = {-2, -4, -6, -8}; two steps of g2 (lr * g2 = 1) make d2 = {-2, -2, -2, -2}.
const std::vector<float> kInit = {1, 2, 3, 4};
const std::vector<float> kG1 = {2, 4, 6, 8};
const std::vector<float> kG2 = {2, 2, 2, 2};
const std::vector<float> kAfterD1 = {-1, -2, -3, -4};      // init + d1
const std::vector<float> kAfterD1D2 = {-3, -4, -5, -6};    // init + d1 + d2

// Sets up the dense job and runs the first exchange with server 1 down: it fails naming server 1.
void FailTheFirstDenseExchange(GeoJob& job) {
  ASSERT_EQ(job.c.servers.size(), 2u);
  Worker& w = *job.worker;
  ASSERT_OK(w.CreateTable(job.table));
  ASSERT_OK(w.InitDense(kDense, kInit.data(), kInit.size()));
  ASSERT_OK(w.client().Save(job.checkpoint.path()));
  std::vector<float> values(4);
  ASSERT_OK(w.PullDense(kDense, values.data(), 4));
  ASSERT_EQ(values, kInit);
  ASSERT_OK(w.PushDense(kDense, kG1.data(), 4));  // step 1 of 2: local only
  job.StopServer1();
  const Status s = w.PushDense(kDense, kG1.data(), 4);  // step 2: the exchange
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("pserver " + job.c.endpoints[1] + " (server 1)"), std::string::npos) << s.ToString();
  // Server 0 added its part of the delta, once.
  EXPECT_EQ(job.DenseValues(0), std::vector<float>({kAfterD1[0], kAfterD1[1]}));
}

TEST(PsGeoFailureTest, AFailedDenseExchangeNamesTheServerAndTheTrainerKeepsItsCopy) {
  GeoJob job(GeoDense());
  ASSERT_NO_FATAL_FAILURE(FailTheFirstDenseExchange(job));
  Worker& w = *job.worker;
  // local is kept (not replaced by half-merged values): the trainer sees its own two steps.
  std::vector<float> values(4);
  ASSERT_OK(w.PullDense(kDense, values.data(), 4));
  EXPECT_EQ(values, kAfterD1);
  // It trains on: one more local step.
  ASSERT_OK(w.PushPullDense(kDense, kG2.data(), values.data(), 4));
  EXPECT_EQ(values, std::vector<float>({-2, -3, -4, -5}));
  // A Flush while server 1 is still down fails naming it and keeps the copy.
  const Status flush = w.Flush();
  ASSERT_FALSE(flush.ok());
  EXPECT_NE(flush.message().find("pserver " + job.c.endpoints[1] + " (server 1)"), std::string::npos)
      << flush.ToString();
  ASSERT_OK(w.PullDense(kDense, values.data(), 4));
  EXPECT_EQ(values, std::vector<float>({-2, -3, -4, -5}));
}

TEST(PsGeoFailureTest, TheNextDenseExchangeDeliversTheMissedDeltaOnceToEachServer) {
  GeoJob job(GeoDense());
  ASSERT_NO_FATAL_FAILURE(FailTheFirstDenseExchange(job));
  ASSERT_OK(job.RestartServer1());
  Worker& w = *job.worker;
  std::vector<float> values(4);
  ASSERT_OK(w.PushDense(kDense, kG2.data(), 4));
  ASSERT_OK(w.PushPullDense(kDense, kG2.data(), values.data(), 4));  // the exchange: d1 + d2 pending
  // Server 1 gets d1, which it missed, and d2: nothing is lost.
  EXPECT_EQ(job.DenseValues(1), std::vector<float>({kAfterD1D2[2], kAfterD1D2[3]}));
  // Server 0 already had d1: it must get d2 only, not d1 a second time.
  EXPECT_EQ(job.DenseValues(0), std::vector<float>({kAfterD1D2[0], kAfterD1D2[1]}))
      << "server 0 applied the first exchange's delta twice";
  // The trainer's new local and base are the servers' merged values.
  std::vector<float> held = job.DenseValues(0), held1 = job.DenseValues(1);
  held.insert(held.end(), held1.begin(), held1.end());
  EXPECT_EQ(values, held);
  EXPECT_EQ(values, kAfterD1D2);
  // Nothing is pending: StopWorker ends both servers.
  ASSERT_OK(w.StopWorker());
  for (auto& s : job.c.servers) EXPECT_TRUE(s->Wait(Clock::now() + std::chrono::seconds(5)));
}

TEST(PsGeoFailureTest, AFlushAfterAFailedDenseExchangeSendsTheDeltaServer1Missed) {
  GeoJob job(GeoDense());
  ASSERT_NO_FATAL_FAILURE(FailTheFirstDenseExchange(job));
  ASSERT_OK(job.RestartServer1());
  Worker& w = *job.worker;
  // local - base = d1 is pending (local and base were kept), though the step counter was reset.
  ASSERT_OK(w.Flush());
  EXPECT_EQ(job.DenseValues(1), std::vector<float>({kAfterD1[2], kAfterD1[3]}))
      << "the delta server 1 missed was dropped by Flush";
  EXPECT_EQ(job.DenseValues(0), std::vector<float>({kAfterD1[0], kAfterD1[1]}));
  // After a flush, pulls fetch the servers' values.
  std::vector<float> values(4);
  ASSERT_OK(w.PullDense(kDense, values.data(), 4));
  EXPECT_EQ(values, kAfterD1);
}

TEST(PsGeoFailureTest, StopWorkerAfterAFailedDenseExchangeKeepsTheServersWhileADeltaIsPending) {
  GeoJob job(GeoDense());
  ASSERT_NO_FATAL_FAILURE(FailTheFirstDenseExchange(job));
  Worker& w = *job.worker;
  // StopWorker flushes first; the flush cannot reach server 1, so StopWorker fails before it tells
  // any server that this trainer is done, and the copy is kept.
  const Status s = w.StopWorker();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("pserver " + job.c.endpoints[1] + " (server 1)"), std::string::npos) << s.ToString();
  EXPECT_FALSE(job.c.servers[0]->Wait(Clock::now() + std::chrono::milliseconds(200)))
      << "server 0 was told the trainer stopped while its delta for server 1 was still pending";
  std::vector<float> values(4);
  const Status pull = w.PullDense(kDense, values.data(), 4);
  EXPECT_TRUE(pull.ok()) << "the trainer's copy was dropped: " << pull.ToString();
  if (pull.ok()) {
    EXPECT_EQ(values, kAfterD1);
  }
}

TEST(PsGeoFailureTest, AFailedSparseExchangeLosesNoDelta) {
  GeoJob job(GeoSparse());
  ASSERT_EQ(job.c.servers.size(), 2u);
  Worker& w = *job.worker;
  ASSERT_OK(w.CreateTable(job.table));
  ASSERT_OK(w.client().Save(job.checkpoint.path()));
  const uint64_t keys[2] = {2, 3};  // server 0, server 1
  const float g[4] = {2, 4, 6, 8};  // lr * g = {1, 2}, {3, 4} per step
  std::vector<float> rows(4);
  ASSERT_OK(w.PullSparse(kSparse, keys, 2, rows.data()));
  EXPECT_EQ(rows, std::vector<float>(4, 0.0f));
  ASSERT_OK(w.PushSparse(kSparse, keys, 2, g));  // step 1 of 2: local only
  job.StopServer1();
  const Status s = w.PushSparse(kSparse, keys, 2, g);  // step 2: the exchange
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("pserver " + job.c.endpoints[1] + " (server 1)"), std::string::npos) << s.ToString();
  // Server 0 added key 2's delta, once.
  EXPECT_EQ(job.SparseRow(2), std::vector<float>({-2, -4}));

  ASSERT_OK(job.RestartServer1());
  // Once the client reaches the new server 1, the trainer sees key 3 with its own two steps in it
  // (kept locally, or delivered): they were not lost.
  std::vector<float> row(2);
  Status pull;
  ASSERT_TRUE(testing::PollUntil([&] { return (pull = w.PullSparse(kSparse, &keys[1], 1, row.data())).ok(); },
                                 std::chrono::seconds(5)))
      << pull.ToString();
  EXPECT_EQ(row, std::vector<float>({-6, -8})) << "key 3's delta was dropped by the failed exchange";
  // The flush reaches server 1 once the client's channel has reconnected (it backs off after the
  // refused connections); a flush that fails keeps key 3 pending, so trying again is safe.
  Status flush;
  ASSERT_TRUE(testing::PollUntil([&] { return (flush = w.Flush()).ok(); }, std::chrono::seconds(5))) << flush.ToString();
  EXPECT_EQ(job.SparseRow(3), std::vector<float>({-6, -8})) << "server 1 never got key 3's delta";
  EXPECT_EQ(job.SparseRow(2), std::vector<float>({-2, -4}));  // and key 2's was not sent again
}

}  // namespace
}  // namespace fleet::ps
