// Servers and clients over gRPC, in one process: sharding and chunking, each mode against a
// reference computation, save/load through the servers, barriers, shutdown, connection rules.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <future>
#include <mutex>
#include <vector>

#include "fleet/ps/optimizer.h"
#include "fleet/ps/table.h"
#include "../common/test_process.h"
#include "ps_test_util.h"

namespace fleet::ps {
namespace {

using testing::Clock;
using testing::Cluster;
using testing::Connect;
using testing::OnThreads;
using testing::Options;
using testing::StartCluster;
using testing::TempDir;

using fleet::test::FreePort;

TEST(PsRpcTest, DenseTablesAreShardedAcrossTheServers) {
  Cluster c = StartCluster(2, 1);
  auto client = Connect(Options(c.endpoints, 0, 1));
  ASSERT_OK(client->CreateTable(TableConfig::Dense(0, 10, OptimizerConfig::Sgd(1.0f))));
  std::vector<float> init(10), g(10, 1.0f), out(10);
  for (int i = 0; i < 10; ++i) init[static_cast<size_t>(i)] = static_cast<float>(i);
  ASSERT_OK(client->InitDense(0, init.data(), init.size()));
  ASSERT_OK(client->PushDense(0, g.data(), g.size()));
  ASSERT_OK(client->PullDense(0, out.data(), out.size()));
  for (int i = 0; i < 10; ++i) EXPECT_EQ(out[static_cast<size_t>(i)], static_cast<float>(i - 1));
  for (int s = 0; s < 2; ++s) {
    DenseShard* shard = c.servers[static_cast<size_t>(s)]->core().FindTable(0)->AsDense();
    EXPECT_EQ(shard->range().begin, s == 0 ? 0u : 5u);
    EXPECT_EQ(shard->range().size(), 5u);
    float first;
    ASSERT_OK(shard->Pull(shard->range().begin, 1, &first));
    EXPECT_EQ(first, s == 0 ? -1.0f : 4.0f);
  }
  EXPECT_EQ(client->PullDense(0, out.data(), 9).code(), Code::kInvalidArgument);
  EXPECT_EQ(client->PullDense(5, out.data(), 10).code(), Code::kNotFound);
  EXPECT_EQ(client->PushPullDense(5, g.data(), out.data(), 10).code(), Code::kNotFound);
  // A refused request leaves the client's streams working.
  ASSERT_OK(client->PushPullDense(0, g.data(), out.data(), out.size()));
  for (int i = 0; i < 10; ++i) EXPECT_EQ(out[static_cast<size_t>(i)], static_cast<float>(i - 2));
}

TEST(PsRpcTest, SparseRowsLiveOnTheServerOfTheirKey) {
  Cluster c = StartCluster(3, 1);
  auto client = Connect(Options(c.endpoints, 0, 1));
  const TableConfig t = TableConfig::Sparse(4, 2, OptimizerConfig::Sgd(1.0f), Mode::kAsync, 0.5f, 11);
  ASSERT_OK(client->CreateTable(t));
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 10; ++k) keys.push_back(k * 1000003);
  std::vector<float> rows(20);
  ASSERT_OK(client->PullSparse(4, keys.data(), keys.size(), rows.data()));
  for (size_t i = 0; i < keys.size(); ++i) {
    float expected[2];
    SparseShard::InitialRow(t, keys[i], expected);
    EXPECT_EQ(rows[2 * i], expected[0]);
    EXPECT_EQ(rows[2 * i + 1], expected[1]);
  }
  size_t total = 0;
  for (int s = 0; s < 3; ++s) {
    SparseShard* shard = c.servers[static_cast<size_t>(s)]->core().FindTable(4)->AsSparse();
    size_t expected = 0;
    for (uint64_t k : keys) expected += SparseShardOf(k, 3) == s;
    EXPECT_EQ(shard->RowCount(), expected) << "server " << s;
    total += shard->RowCount();
  }
  EXPECT_EQ(total, 10u);
}

TEST(PsRpcTest, ASparseTableFullOnOneServerRefusesNewRowsThereAndServesTheRest) {
  Cluster c = StartCluster(2, 1);
  auto client = Connect(Options(c.endpoints, 0, 1));
  ASSERT_OK(client->CreateTable(TableConfig::Sparse(3, 2, OptimizerConfig::Sgd(1.0f), Mode::kAsync, 0, 0, 2)));
  std::vector<float> rows(8), g(8, 1.0f);
  const uint64_t odd[2] = {1, 3};  // server 1, which is then full
  ASSERT_OK(client->PullSparse(3, odd, 2, rows.data()));
  const uint64_t mixed[4] = {0, 2, 3, 5};  // two new rows on server 0 (fits), one on server 1 (does not)
  for (Status s : {client->PullSparse(3, mixed, 4, rows.data()), client->PushSparse(3, mixed, 4, g.data())}) {
    EXPECT_EQ(s.code(), Code::kResourceExhausted) << s.ToString();
    EXPECT_NE(s.message().find("pserver " + c.endpoints[1] + " (server 1): sparse table 3 is full on server 1 of 2"),
              std::string::npos) << s.message();
    EXPECT_NE(s.message().find("limit is 2 rows per server (the table's declared max_rows)"), std::string::npos)
        << s.message();
  }
  EXPECT_EQ(c.servers[1]->core().FindTable(3)->AsSparse()->RowCount(), 2u);
  // Existing rows train on; server 0 still has room.
  ASSERT_OK(client->PushSparse(3, odd, 2, g.data()));
  ASSERT_OK(client->PullSparse(3, odd, 2, rows.data()));
  EXPECT_EQ(rows[0], -1.0f);
  const uint64_t even[2] = {0, 2};
  ASSERT_OK(client->PullSparse(3, even, 2, rows.data()));
}

TEST(PsRpcTest, SmallChunksGiveTheSameResultsAndDuplicateKeysAreSummed) {
  Cluster c = StartCluster(3, 1);
  auto o = Options(c.endpoints, 0, 1);
  o.chunk_bytes = 16;  // 4 floats, or 0-1 sparse rows of dim 3 plus their key
  auto client = Connect(o);
  ASSERT_OK(client->CreateTable(TableConfig::Dense(0, 103, OptimizerConfig::Sgd(0.5f))));
  ASSERT_OK(client->CreateTable(TableConfig::Sparse(1, 3, OptimizerConfig::Sgd(1.0f))));
  std::vector<float> init(103), out(103);
  for (size_t i = 0; i < init.size(); ++i) init[i] = static_cast<float>(i) * 0.25f;
  ASSERT_OK(client->InitDense(0, init.data(), init.size()));
  ASSERT_OK(client->PushDense(0, init.data(), init.size()));
  ASSERT_OK(client->PullDense(0, out.data(), out.size()));
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], init[i] * 0.5f) << i;
  // About 9 chunks per server, more than the streams a call keeps open per server.
  ASSERT_OK(client->PushPullDense(0, init.data(), out.data(), out.size()));
  for (size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i], 0.0f) << i;
  const std::vector<uint64_t> keys = {5, 9, 5, 12, 9, 5, 100};
  std::vector<float> g(keys.size() * 3);
  for (size_t i = 0; i < g.size(); ++i) g[i] = 1.0f;
  ASSERT_OK(client->PushSparse(1, keys.data(), keys.size(), g.data()));
  std::vector<float> rows(keys.size() * 3);
  ASSERT_OK(client->PullSparse(1, keys.data(), keys.size(), rows.data()));
  const float expected[] = {-3, -2, -3, -1, -2, -3, -1};  // occurrences of each key
  for (size_t i = 0; i < keys.size(); ++i) {
    for (int j = 0; j < 3; ++j) EXPECT_EQ(rows[i * 3 + static_cast<size_t>(j)], expected[i]) << "key " << keys[i];
  }
}

TEST(PsRpcTest, AsyncPushesFromManyTrainersAllApply) {
  const int kTrainers = 4, kSteps = 40;
  Cluster c = StartCluster(2, kTrainers);
  OnThreads(kTrainers, [&](int t) {
    auto client = Connect(Options(c.endpoints, t, kTrainers));
    ASSERT_OK(client->CreateTable(TableConfig::Dense(0, 1000, OptimizerConfig::Sgd(1.0f))));
    ASSERT_OK(client->CreateTable(TableConfig::Sparse(1, 4, OptimizerConfig::Sgd(1.0f))));
    std::vector<float> g(1000, 1.0f), w(1000), sg(8, 1.0f), rows(8);
    const uint64_t keys[2] = {7, static_cast<uint64_t>(100 + t)};
    for (int s = 0; s < kSteps; ++s) {
      if (s % 2 == 0) {
        ASSERT_OK(client->PullDense(0, w.data(), w.size()));
        ASSERT_OK(client->PushDense(0, g.data(), g.size()));
      } else {
        // The answer comes once this push is applied: it holds this trainer's s + 1 steps at least.
        ASSERT_OK(client->PushPullDense(0, g.data(), w.data(), w.size()));
        for (float v : w) ASSERT_LE(v, -static_cast<float>(s + 1));
      }
      ASSERT_OK(client->PullSparse(1, keys, 2, rows.data()));
      ASSERT_OK(client->PushSparse(1, keys, 2, sg.data()));
    }
    ASSERT_OK(client->Barrier());
    ASSERT_OK(client->PullDense(0, w.data(), w.size()));
    for (float v : w) ASSERT_EQ(v, -static_cast<float>(kTrainers * kSteps));
    ASSERT_OK(client->PullSparse(1, keys, 2, rows.data()));
    EXPECT_EQ(rows[0], -static_cast<float>(kTrainers * kSteps));
    EXPECT_EQ(rows[4], -static_cast<float>(kSteps));
  });
}

// What trainer t pushes at step s for value i: distinct, not round numbers.
float Grad(int t, int s, size_t i) { return std::sin(static_cast<float>(t * 31 + s * 7) + static_cast<float>(i)); }

TEST(PsRpcTest, SyncTrainingEqualsTheAveragedGradientsAppliedStepByStep) {
  const int kTrainers = 3, kSteps = 5;
  const size_t kSize = 7;
  const TableConfig dense = TableConfig::Dense(0, kSize, OptimizerConfig::Adam(0.05f), Mode::kSync);
  const TableConfig sparse = TableConfig::Sparse(1, 2, OptimizerConfig::Adagrad(0.3f), Mode::kSync, 0.1f, 5);
  Cluster c = StartCluster(2, kTrainers);
  std::vector<float> init(kSize);
  for (size_t i = 0; i < kSize; ++i) init[i] = 0.1f * static_cast<float>(i);

  // The reference: one table updated with the average of the three gradients, summed in trainer order.
  std::vector<float> ref = init, state(kSize * 4);
  InitOptimizerState(dense.optimizer, state.data(), kSize, kSize);
  for (int s = 0; s < kSteps; ++s) {
    std::vector<float> avg(kSize);
    for (size_t i = 0; i < kSize; ++i) {
      float sum = Grad(0, s, i);
      for (int t = 1; t < kTrainers; ++t) sum += Grad(t, s, i);
      avg[i] = sum * (1.0f / kTrainers);
    }
    ApplyGradient(dense.optimizer, ref.data(), state.data(), kSize, avg.data(), kSize);
  }

  std::vector<std::vector<float>> seen(kTrainers);
  OnThreads(kTrainers, [&](int t) {
    auto o = Options(c.endpoints, t, kTrainers);
    o.chunk_bytes = 8;  // two values per message: every step is several sync rounds per server
    auto client = Connect(o);
    ASSERT_OK(client->CreateTable(dense));
    ASSERT_OK(client->CreateTable(sparse));
    if (t == 0) ASSERT_OK(client->InitDense(0, init.data(), kSize));
    ASSERT_OK(client->Barrier());
    std::vector<float> g(kSize), w(kSize), after(kSize);
    for (int s = 0; s < kSteps; ++s) {
      ASSERT_OK(client->PullDense(0, w.data(), kSize));
      if (s > 0) {
        EXPECT_EQ(w, after);  // the fused answer was the step's result
      }
      for (size_t i = 0; i < kSize; ++i) g[i] = Grad(t, s, i);
      if (s % 2 == 0) {
        ASSERT_OK(client->PushDense(0, g.data(), kSize));
        ASSERT_OK(client->PullDense(0, after.data(), kSize));
      } else {
        ASSERT_OK(client->PushPullDense(0, g.data(), after.data(), kSize));
      }
      // Sparse: trainer t touches keys t and 10; every server hears from every trainer.
      const uint64_t keys[2] = {static_cast<uint64_t>(t), 10};
      const float sg[4] = {1.0f, 1.0f, 2.0f, 2.0f};
      ASSERT_OK(client->PushSparse(1, keys, 2, sg));
    }
    seen[static_cast<size_t>(t)].resize(kSize);
    ASSERT_OK(client->PullDense(0, seen[static_cast<size_t>(t)].data(), kSize));
    const uint64_t keys[4] = {0, 1, 2, 10};
    std::vector<float> rows(8);
    ASSERT_OK(client->PullSparse(1, keys, 4, rows.data()));
    // Keys 0..2: each step avg g = 1/3 -> Adagrad with acc = s/9; key 10: avg g = 2 every step.
    float k0 = 0, acc0 = 0, k10 = 0, acc10 = 0;
    float init0[2], init10[2];
    SparseShard::InitialRow(sparse, 0, init0);
    SparseShard::InitialRow(sparse, 10, init10);
    k0 = init0[0];
    k10 = init10[0];
    for (int s = 0; s < kSteps; ++s) {
      const float g0 = 1.0f * (1.0f / 3.0f), g10 = (2.0f + 2.0f + 2.0f) * (1.0f / 3.0f);
      acc0 += g0 * g0;
      k0 -= 0.3f * g0 / (std::sqrt(acc0) + 1e-6f);
      acc10 += g10 * g10;
      k10 -= 0.3f * g10 / (std::sqrt(acc10) + 1e-6f);
    }
    EXPECT_NEAR(rows[0], k0, 1e-6);
    EXPECT_NEAR(rows[6], k10, 1e-6);
  });
  for (int t = 0; t < kTrainers; ++t) {
    for (size_t i = 0; i < kSize; ++i) EXPECT_EQ(seen[static_cast<size_t>(t)][i], ref[i]) << "trainer " << t << " value " << i;
  }
}

TEST(PsRpcTest, SyncSparsePushesOfManyChunksPerServerComplete) {
  // One key per message: each server gets far more chunks than the client keeps in flight by default.
  const int kTrainers = 2;
  Cluster c = StartCluster(2, kTrainers);
  OnThreads(kTrainers, [&](int t) {
    auto o = Options(c.endpoints, t, kTrainers);
    o.chunk_bytes = 12;
    auto client = Connect(o);
    ASSERT_OK(client->CreateTable(TableConfig::Sparse(0, 1, OptimizerConfig::Sgd(1.0f), Mode::kSync)));
    std::vector<uint64_t> keys(60);
    std::vector<float> g(60, 1.0f);
    for (size_t i = 0; i < keys.size(); ++i) keys[i] = i + static_cast<uint64_t>(t) * 30;  // 30 keys shared
    ASSERT_OK(client->PushSparse(0, keys.data(), keys.size(), g.data()));
    std::vector<float> rows(90);
    std::vector<uint64_t> all(90);
    for (size_t i = 0; i < all.size(); ++i) all[i] = i;
    ASSERT_OK(client->PullSparse(0, all.data(), all.size(), rows.data()));
    for (size_t i = 0; i < all.size(); ++i) {
      EXPECT_EQ(rows[i], i >= 30 && i < 60 ? -1.0f : -0.5f) << "key " << i;  // averaged over 2 trainers
    }
  });
}

TEST(PsRpcTest, GeoTrainersStepLocallyAndMergeTheirDeltasEveryKSteps) {
  const int kTrainers = 2;
  TableConfig dense = TableConfig::Dense(0, 3, OptimizerConfig::Sgd(0.1f), Mode::kGeo);
  dense.k_steps = 2;
  TableConfig sparse = TableConfig::Sparse(1, 1, OptimizerConfig::Sgd(0.1f), Mode::kGeo);
  sparse.k_steps = 2;
  Cluster c = StartCluster(2, kTrainers);
  auto observer = Connect(Options(c.endpoints, 0, kTrainers));  // raw view of the servers
  ASSERT_OK(observer->CreateTable(dense));
  ASSERT_OK(observer->CreateTable(sparse));
  const std::vector<float> init = {1, 1, 1};
  ASSERT_OK(observer->InitDense(0, init.data(), 3));

  std::vector<std::unique_ptr<Worker>> workers;
  for (int t = 0; t < kTrainers; ++t) {
    workers.push_back(std::make_unique<Worker>(Connect(Options(c.endpoints, t, kTrainers))));
    ASSERT_OK(workers.back()->CreateTable(dense));
    ASSERT_OK(workers.back()->CreateTable(sparse));
  }
  const float g[2][3] = {{1, 2, 3}, {3, 2, 1}};
  std::vector<float> w(3), server(3);
  // Trainer 0, step 1: a local step only.
  ASSERT_OK(workers[0]->PullDense(0, w.data(), 3));
  ASSERT_OK(workers[0]->PushDense(0, g[0], 3));
  ASSERT_OK(workers[0]->PullDense(0, w.data(), 3));
  EXPECT_FLOAT_EQ(w[0], 0.9f);
  ASSERT_OK(observer->PullDense(0, server.data(), 3));
  EXPECT_EQ(server, init);
  // Step 2: k_steps reached, (local - base) / trainers goes to the servers.
  ASSERT_OK(workers[0]->PushDense(0, g[0], 3));
  ASSERT_OK(observer->PullDense(0, server.data(), 3));
  EXPECT_NEAR(server[0], 1 - 0.1 * 2 * 1 / 2, 1e-6);
  EXPECT_NEAR(server[2], 1 - 0.1 * 2 * 3 / 2, 1e-6);
  // Trainer 1 starts from what the servers hold (trainer 0's delta merged), takes two steps, and
  // its delta merges in too.
  ASSERT_OK(workers[1]->PullDense(0, w.data(), 3));
  EXPECT_EQ(w, server);
  ASSERT_OK(workers[1]->PushDense(0, g[1], 3));
  ASSERT_OK(workers[1]->PushPullDense(0, g[1], w.data(), 3));  // the exchange: back come the merged values
  ASSERT_OK(observer->PullDense(0, server.data(), 3));
  EXPECT_EQ(w, server);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(server[i], 1 - 0.1 * (g[0][i] + g[1][i]), 1e-6) << i;
  }
  // Sparse: a row pushed twice by trainer 1 reaches the servers halved; a flush sends a partial period.
  const uint64_t key = 42;
  float row = 0;
  const float sg = 1.0f;
  ASSERT_OK(workers[1]->PullSparse(1, &key, 1, &row));
  ASSERT_OK(workers[1]->PushSparse(1, &key, 1, &sg));
  ASSERT_OK(workers[1]->PullSparse(1, &key, 1, &row));
  EXPECT_FLOAT_EQ(row, -0.1f);
  ASSERT_OK(observer->PullSparse(1, &key, 1, &row));
  EXPECT_EQ(row, 0.0f);
  ASSERT_OK(workers[1]->Flush());
  ASSERT_OK(observer->PullSparse(1, &key, 1, &row));
  EXPECT_FLOAT_EQ(row, -0.05f);
  ASSERT_OK(workers[1]->PullSparse(1, &key, 1, &row));  // after a flush, pulls fetch the merged row
  EXPECT_FLOAT_EQ(row, -0.05f);
  EXPECT_EQ(workers[0]->PushDense(7, g[0], 3).code(), Code::kNotFound);
}

TEST(PsRpcTest, AModelSavedThroughTheServersLoadsIntoANewJob) {
  TempDir dir;
  const TableConfig dense = TableConfig::Dense(0, 9, OptimizerConfig::Adagrad(0.1f), Mode::kAsync);
  const TableConfig sparse = TableConfig::Sparse(1, 2, OptimizerConfig::Sgd(0.5f), Mode::kAsync, 0.3f, 1);
  std::vector<float> trained(9);
  const uint64_t keys[3] = {1, 2, 3};
  std::vector<float> rows(6);
  {
    Cluster c = StartCluster(2, 1, "", [&](ServerOptions& o) { o.save_root = dir.path(); });
    auto client = Connect(Options(c.endpoints, 0, 1));
    ASSERT_OK(client->CreateTable(dense));
    ASSERT_OK(client->CreateTable(sparse));
    std::vector<float> g(9, 0.5f), sg(6, 1.0f);
    ASSERT_OK(client->PushDense(0, g.data(), 9));
    ASSERT_OK(client->PushSparse(1, keys, 3, sg.data()));
    ASSERT_OK(client->PullDense(0, trained.data(), 9));
    ASSERT_OK(client->PullSparse(1, keys, 3, rows.data()));
    ASSERT_OK(client->Save(dir.path()));
    EXPECT_EQ(client->Save("").code(), Code::kInvalidArgument);
    // Outside the servers' save root: refused, and the caller is told why (issue 14).
    const Status outside = client->Save(dir.path() + "/../fleet-ps-escaped");
    EXPECT_EQ(outside.code(), Code::kPermissionDenied) << outside.ToString();
    EXPECT_NE(outside.message().find("is outside this server's save root"), std::string::npos) << outside.message();
    EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(dir.path()).parent_path() / "fleet-ps-escaped"));
  }
  Cluster c = StartCluster(3, 1, dir.path());  // another server count
  auto client = Connect(Options(c.endpoints, 0, 1));
  ASSERT_OK(client->CreateTable(dense));
  ASSERT_OK(client->CreateTable(sparse));
  std::vector<float> zeros(9, 0.0f), out(9), out_rows(6);
  ASSERT_OK(client->InitDense(0, zeros.data(), 9));  // ignored: the table came from the checkpoint
  ASSERT_OK(client->PullDense(0, out.data(), 9));
  EXPECT_EQ(out, trained);
  ASSERT_OK(client->PullSparse(1, keys, 3, out_rows.data()));
  EXPECT_EQ(out_rows, rows);
  // The Adagrad state came back too: the next step is the second step, not a first one.
  std::vector<float> g(9, 0.5f);
  ASSERT_OK(client->PushDense(0, g.data(), 9));
  ASSERT_OK(client->PullDense(0, out.data(), 9));
  EXPECT_NEAR(out[0], trained[0] - 0.1 * 0.5 / std::sqrt(0.5), 1e-6);
  // A different shape is refused.
  EXPECT_EQ(client->CreateTable(TableConfig::Dense(0, 10, OptimizerConfig::Adagrad(0.1f))).code(),
            Code::kFailedPrecondition);
}

TEST(PsRpcTest, BarriersAndStopWorkerEndTheServers) {
  const int kTrainers = 3;
  Cluster c = StartCluster(2, kTrainers);
  std::atomic<int> passed{0};
  OnThreads(kTrainers, [&](int t) {
    auto client = Connect(Options(c.endpoints, t, kTrainers));
    for (int round = 0; round < 3; ++round) {
      ASSERT_OK(client->Barrier());
      passed++;
    }
    ASSERT_OK(client->StopWorker());
    ASSERT_OK(client->StopWorker());  // idempotent
  });
  EXPECT_EQ(passed.load(), 9);
  for (auto& s : c.servers) EXPECT_TRUE(s->Wait(Clock::now() + std::chrono::seconds(10)));
}

TEST(PsRpcTest, AServerNotStoppedByEveryTrainerKeepsServing) {
  Cluster c = StartCluster(1, 2);
  auto client = Connect(Options(c.endpoints, 0, 2));
  ASSERT_OK(client->StopWorker());
  EXPECT_FALSE(c.servers[0]->Wait(Clock::now() + std::chrono::milliseconds(50)));
  auto other = Connect(Options(c.endpoints, 1, 2));
  ASSERT_OK(other->StopWorker());
  EXPECT_TRUE(c.servers[0]->Wait(Clock::now() + std::chrono::seconds(10)));
}

TEST(PsRpcTest, StopWorkerClosesTheStreamsOfACallStillRunning) {
  Cluster c = StartCluster(1, 2);
  auto client = Connect(Options(c.endpoints, 0, 2));
  auto other = Connect(Options(c.endpoints, 1, 2));
  ASSERT_OK(client->CreateTable(TableConfig::Dense(0, 4, OptimizerConfig::Sgd(1.0f), Mode::kSync)));
  // A sync push waits for trainer 1 on another thread, holding its streams, while StopWorker runs.
  std::future<Status> push = std::async(std::launch::async, [&] {
    const std::vector<float> g(4, 1.0f);
    return client->PushDense(0, g.data(), g.size());
  });
  // Its stream is open once the push is on its way (the stream's headers go with it).
  ASSERT_TRUE(testing::PollUntil([&] { return c.servers[0]->open_dense_streams() == 1; }, std::chrono::seconds(10)));
  ASSERT_OK(client->StopWorker());
  // Trainer 1 stops too: the step can never complete, and trainer 0's push comes back, failed.
  ASSERT_OK(other->StopWorker());
  EXPECT_FALSE(push.get().ok());
  // Its streams were closed on the way back, not pooled: the server has none left open.
  EXPECT_TRUE(testing::PollUntil([&] { return c.servers[0]->open_dense_streams() == 0; }, std::chrono::seconds(5)))
      << c.servers[0]->open_dense_streams() << " streams still open";
  // A call after StopWorker leaves none open either.
  const std::vector<float> g(4, 1.0f);
  EXPECT_FALSE(client->PushDense(0, g.data(), g.size()).ok());
  EXPECT_TRUE(testing::PollUntil([&] { return c.servers[0]->open_dense_streams() == 0; }, std::chrono::seconds(5)))
      << c.servers[0]->open_dense_streams() << " streams still open";
}

TEST(PsRpcTest, ConnectChecksThatServersAreWhereTheListSays) {
  Cluster c = StartCluster(2, 2);
  std::unique_ptr<PsClient> client;
  Status s = PsClient::Connect(Options({c.endpoints[1], c.endpoints[0]}, 0, 2), &client);
  EXPECT_EQ(s.code(), Code::kFailedPrecondition);
  EXPECT_NE(s.message().find("says it is server 1 of 2, but it is entry 0"), std::string::npos) << s.message();
  s = PsClient::Connect(Options(c.endpoints, 0, 3), &client);
  EXPECT_EQ(s.code(), Code::kFailedPrecondition);
  EXPECT_NE(s.message().find("expects 2 trainers"), std::string::npos) << s.message();
  s = PsClient::Connect(Options(c.endpoints, 2, 2), &client);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
}

TEST(PsRpcTest, ConnectGivesUpOnAServerThatNeverComes) {
  auto o = Options({"127.0.0.1:" + std::to_string(FreePort())}, 0, 1);
  o.connect_timeout = std::chrono::milliseconds(800);
  std::vector<std::string> lines;
  o.log = [&](const std::string& line) { lines.push_back(line); };
  std::unique_ptr<PsClient> client;
  const auto start = Clock::now();
  Status s = PsClient::Connect(o, &client);
  EXPECT_EQ(s.code(), Code::kUnavailable);
  EXPECT_NE(s.message().find("not reachable"), std::string::npos) << s.message();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], "server not ready, wait 0.2 sec to retry...");
  EXPECT_EQ(lines[1], "not ready endpoints:['" + o.servers[0] + "']");
}

TEST(PsRpcTest, ConnectWaitsForAServerThatStartsLate) {
  const int port = FreePort();
  auto o = Options({"127.0.0.1:" + std::to_string(port)}, 0, 1);
  std::atomic<int> waits{0};
  o.log = [&](const std::string& line) {
    if (line.rfind("server not ready", 0) == 0) waits++;
  };
  auto connected = std::async(std::launch::async, [&] {
    std::unique_ptr<PsClient> client;
    return PsClient::Connect(o, &client);
  });
  ASSERT_TRUE(testing::PollUntil([&] { return waits.load() > 0; }, std::chrono::seconds(10)));
  ServerOptions so;
  so.bind_address = "127.0.0.1:" + std::to_string(port);
  std::unique_ptr<PsServer> server;
  ASSERT_OK(PsServer::Start(so, &server));
  ASSERT_EQ(connected.wait_for(std::chrono::seconds(15)), std::future_status::ready);
  ASSERT_OK(connected.get());
}

TEST(PsRpcTest, ASyncStepWhoseTrainerNeverComesFailsInsteadOfHanging) {
  Cluster c = StartCluster(1, 2, "", [](ServerOptions& o) { o.sync_timeout = std::chrono::milliseconds(300); });
  auto client = Connect(Options(c.endpoints, 0, 2));
  ASSERT_OK(client->CreateTable(TableConfig::Dense(0, 4, OptimizerConfig::Sgd(0.1f), Mode::kSync)));
  std::vector<float> g(4, 1.0f);
  const auto start = Clock::now();
  Status s = client->PushDense(0, g.data(), 4);
  EXPECT_EQ(s.code(), Code::kAborted);
  EXPECT_NE(s.message().find("for trainer(s) 1; sync training cannot go on"), std::string::npos) << s.message();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(5));
  EXPECT_EQ(client->PushDense(0, g.data(), 4).code(), Code::kAborted);
}

TEST(PsRpcTest, ATrainerThatGivesUpGetsADeadlineAndTheServerStillShutsDown) {
  Cluster c = StartCluster(1, 2);
  auto o = Options(c.endpoints, 0, 2);
  o.sync_timeout = std::chrono::milliseconds(200);
  auto client = Connect(o);
  ASSERT_OK(client->CreateTable(TableConfig::Sparse(0, 4, OptimizerConfig::Sgd(0.1f), Mode::kSync)));
  ASSERT_OK(client->CreateTable(TableConfig::Dense(1, 4, OptimizerConfig::Sgd(0.1f), Mode::kSync)));
  const uint64_t key = 1;
  const float g[4] = {1, 1, 1, 1};
  float w[4];
  EXPECT_EQ(client->PushSparse(0, &key, 1, g).code(), Code::kDeadlineExceeded);
  EXPECT_EQ(client->Barrier().code(), Code::kDeadlineExceeded);
  Status dense = client->PushPullDense(1, g, w, 4);
  EXPECT_EQ(dense.code(), Code::kDeadlineExceeded) << dense.ToString();
  EXPECT_NE(dense.message().find("pserver " + c.endpoints[0] + " (server 0)"), std::string::npos) << dense.message();
  // The stream that gave up is replaced: a pull needs no other trainer.
  ASSERT_OK(client->PullDense(1, w, 4));
  c.servers[0]->Shutdown();  // answers the steps still waiting on the server, then stops
}

TEST(PsRpcTest, OneClientServesManyThreadsAtOnce) {
  const int kThreads = 4, kSteps = 30;
  Cluster c = StartCluster(2, 1);
  auto client = Connect(Options(c.endpoints, 0, 1));
  ASSERT_OK(client->CreateTable(TableConfig::Dense(0, 999, OptimizerConfig::Sgd(1.0f))));
  OnThreads(kThreads, [&](int) {
    std::vector<float> g(999, 1.0f), w(999);
    for (int s = 0; s < kSteps; ++s) {
      ASSERT_OK(client->PushPullDense(0, g.data(), w.data(), w.size()));
      ASSERT_OK(client->PullDense(0, w.data(), w.size()));
    }
  });
  std::vector<float> w(999);
  ASSERT_OK(client->PullDense(0, w.data(), w.size()));
  for (float v : w) ASSERT_EQ(v, -static_cast<float>(kThreads * kSteps));
}

TEST(PsRpcTest, AClientWhoseServerRestartsReachesTheNewOne) {
  const TableConfig t = TableConfig::Dense(0, 8, OptimizerConfig::Sgd(1.0f));
  Cluster c = StartCluster(1, 1, "", [&](ServerOptions& o) { o.tables = {t}; });
  auto client = Connect(Options(c.endpoints, 0, 1));
  ASSERT_OK(client->CreateTable(t));
  std::vector<float> w(8), g(8, 1.0f);
  ASSERT_OK(client->PushPullDense(0, g.data(), w.data(), 8));
  const int port = c.servers[0]->port();
  c.servers[0].reset();  // gone: the client's open streams break
  EXPECT_EQ(client->PullDense(0, w.data(), 8).code(), Code::kUnavailable);
  ServerOptions o;
  o.bind_address = "127.0.0.1:" + std::to_string(port);
  o.tables = {t};
  std::unique_ptr<PsServer> again;
  ASSERT_OK(PsServer::Start(o, &again));
  // Fresh streams to the new server, once the channel has reconnected (backoff up to 1 s).
  Status s;
  ASSERT_TRUE(testing::PollUntil([&] { return (s = client->PushPullDense(0, g.data(), w.data(), 8)).ok(); },
                                 std::chrono::seconds(10))) << s.ToString();
  for (float v : w) EXPECT_EQ(v, -1.0f);
}

}  // namespace
}  // namespace fleet::ps
