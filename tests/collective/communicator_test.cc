// fleet::collective::Communicator on the Gloo backend: every operation x element type x 1/2/4 ranks
// (one thread per rank, each with its own Paddle env), env errors, rendezvous timeouts, peers that
// die or hang, and garbage sent to the rendezvous store while the ranks meet.
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <mutex>
#include <set>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fleet/base/strings.h"
#include "fleet/collective/communicator.h"
#include "test_util.h"

namespace fleet::collective {
namespace {

using namespace fleet::collective::testing;  // NOLINT: test helpers
using std::chrono::milliseconds;
using ::testing::AnyOf;
using ::testing::HasSubstr;

CommunicatorOptions Options(milliseconds rendezvous = milliseconds(15000), milliseconds operation = milliseconds(15000)) {
  CommunicatorOptions options;
  options.rendezvous_timeout = rendezvous;
  options.operation_timeout = operation;
  return options;
}

// Typed storage behind a DataType, read and written as doubles (all test values are small
// integers or quarters, exact in every type).
class Tensor {
 public:
  Tensor(DataType type, size_t count) : type_(type), bytes_(count * DataTypeSize(type)) {}
  void* data() { return bytes_.data(); }
  size_t count() const { return bytes_.size() / DataTypeSize(type_); }

  void Set(size_t i, double v) {
    switch (type_) {
      case DataType::kFloat32: reinterpret_cast<float*>(bytes_.data())[i] = static_cast<float>(v); break;
      case DataType::kFloat64: reinterpret_cast<double*>(bytes_.data())[i] = v; break;
      case DataType::kInt64: reinterpret_cast<int64_t*>(bytes_.data())[i] = static_cast<int64_t>(v); break;
      case DataType::kFloat16: reinterpret_cast<Float16*>(bytes_.data())[i] = ToFloat16(static_cast<float>(v)); break;
      case DataType::kBFloat16: reinterpret_cast<BFloat16*>(bytes_.data())[i] = ToBFloat16(static_cast<float>(v)); break;
    }
  }
  double Get(size_t i) const {
    switch (type_) {
      case DataType::kFloat32: return reinterpret_cast<const float*>(bytes_.data())[i];
      case DataType::kFloat64: return reinterpret_cast<const double*>(bytes_.data())[i];
      case DataType::kInt64: return static_cast<double>(reinterpret_cast<const int64_t*>(bytes_.data())[i]);
      case DataType::kFloat16: return ToFloat(reinterpret_cast<const Float16*>(bytes_.data())[i]);
      case DataType::kBFloat16: return ToFloat(reinterpret_cast<const BFloat16*>(bytes_.data())[i]);
    }
    return 0;
  }

 private:
  DataType type_;
  std::vector<char> bytes_;
};

// Rank r's value at index i: -3..3 times (r + 1), so ranks differ in sign and size.
double Value(int rank, size_t i) { return static_cast<double>(static_cast<int>(i % 7) - 3) * (rank + 1); }

double Expected(ReduceOp op, DataType type, int size, size_t i) {
  double sum = 0, max = -1e9, min = 1e9;
  for (int r = 0; r < size; ++r) {
    sum += Value(r, i);
    max = std::max(max, Value(r, i));
    min = std::min(min, Value(r, i));
  }
  switch (op) {
    case ReduceOp::kSum: return sum;
    case ReduceOp::kMax: return max;
    case ReduceOp::kMin: return min;
    case ReduceOp::kAvg:
      if (type == DataType::kInt64) return static_cast<double>(static_cast<int64_t>(sum) / size);  // toward zero
      return sum / size;
  }
  return 0;
}

// Collects the first mismatch per check instead of flooding the log from every rank.
class Mismatches {
 public:
  void Check(bool ok, const std::string& what) {
    if (ok) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (seen_.insert(what.substr(0, what.find(" at "))).second) list_.push_back(what);
  }
  std::string Describe() const { return JoinStrings(list_, "\n"); }
  bool empty() const { return list_.empty(); }

 private:
  std::mutex mutex_;
  std::set<std::string> seen_;
  std::vector<std::string> list_;
};

struct WorldCase {
  int size;
  DataType type;
};

std::string CaseName(const ::testing::TestParamInfo<WorldCase>& info) {
  return std::string(DataTypeName(info.param.type)) + "_x" + std::to_string(info.param.size);
}

class EveryOperation : public ::testing::TestWithParam<WorldCase> {};

TEST_P(EveryOperation, GivesTheSameResultOnEveryRank) {
  const int size = GetParam().size;
  const DataType type = GetParam().type;
  const std::vector<std::string> endpoints = LoopbackEndpoints(size);
  // 1: the trivial case; 1000: several gloo chunks for 4 ranks; 300001: odd, over gloo's 1 MiB
  // segment for 4-byte and 8-byte types.
  const std::vector<size_t> counts = {1, 1000, 300001};
  Mismatches bad;
  RunRanks(size, [&](int rank) {
    const std::string who = "rank " + std::to_string(rank) + ": ";
    auto comm = CreateCommunicator(CollectiveEnv(endpoints, rank), Options());
    bad.Check(comm.ok(), who + "create: " + comm.error());
    if (!comm.ok()) return;
    Communicator& c = **comm;
    bad.Check(c.rank() == rank && c.size() == size && c.backend() == Backend::kGloo && c.device() == -1, who + "identity");
    for (size_t count : counts) {
      const std::string at = " (count " + std::to_string(count) + ")";
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg}) {
        Tensor t(type, count);
        for (size_t i = 0; i < count; ++i) t.Set(i, Value(rank, i));
        Status s = c.AllReduce(t.data(), count, type, op);
        bad.Check(s.ok(), who + std::string(ReduceOpName(op)) + at + ": " + s.error());
        for (size_t i = 0; i < count && s.ok(); ++i) {
          const double want = Expected(op, type, size, i);
          if (t.Get(i) != want) {
            bad.Check(false, who + std::string(ReduceOpName(op)) + at + " at " + std::to_string(i) + ": got " +
                                 std::to_string(t.Get(i)) + ", want " + std::to_string(want));
            break;
          }
        }
      }
      const int root = size - 1;
      Tensor b(type, count);
      for (size_t i = 0; i < count; ++i) b.Set(i, Value(rank, i));
      Status s = c.Broadcast(b.data(), count, type, root);
      bad.Check(s.ok(), who + "broadcast" + at + ": " + s.error());
      for (size_t i = 0; i < count && s.ok(); ++i) {
        if (b.Get(i) != Value(root, i)) {
          bad.Check(false, who + "broadcast" + at + " at " + std::to_string(i));
          break;
        }
      }
      Tensor in(type, count);
      for (size_t i = 0; i < count; ++i) in.Set(i, Value(rank, i));
      Tensor out(type, count * static_cast<size_t>(size));
      s = c.AllGather(in.data(), out.data(), count, type);
      bad.Check(s.ok(), who + "all_gather" + at + ": " + s.error());
      for (size_t k = 0; k < out.count() && s.ok(); ++k) {
        if (out.Get(k) != Value(static_cast<int>(k / count), k % count)) {
          bad.Check(false, who + "all_gather" + at + " at " + std::to_string(k));
          break;
        }
      }
      // In place: the input already sits at this rank's slot of the output.
      Tensor inplace(type, count * static_cast<size_t>(size));
      for (size_t i = 0; i < count; ++i) inplace.Set(static_cast<size_t>(rank) * count + i, Value(rank, i));
      const char* slot = static_cast<const char*>(inplace.data()) + static_cast<size_t>(rank) * count * DataTypeSize(type);
      s = c.AllGather(slot, inplace.data(), count, type);
      bad.Check(s.ok(), who + "in-place all_gather" + at + ": " + s.error());
      for (size_t k = 0; k < inplace.count() && s.ok(); ++k) {
        if (inplace.Get(k) != Value(static_cast<int>(k / count), k % count)) {
          bad.Check(false, who + "in-place all_gather" + at + " at " + std::to_string(k));
          break;
        }
      }
    }
    Status s = c.Barrier();
    bad.Check(s.ok(), who + "barrier: " + s.error());
    // Zero elements are a no-op that needs no peer.
    s = c.AllReduce(nullptr, 0, type, ReduceOp::kSum);
    bad.Check(s.ok(), who + "empty all_reduce: " + s.error());
  });
  EXPECT_TRUE(bad.empty()) << bad.Describe();
}

INSTANTIATE_TEST_SUITE_P(Gloo, EveryOperation,
                         ::testing::ValuesIn([] {
                           std::vector<WorldCase> cases;
                           for (int size : {1, 2, 4}) {
                             for (DataType type : {DataType::kFloat32, DataType::kFloat64, DataType::kInt64,
                                                   DataType::kFloat16, DataType::kBFloat16}) {
                               cases.push_back({size, type});
                             }
                           }
                           return cases;
                         }()),
                         CaseName);

TEST(CommunicatorTest, TypedCallsAndRepeatedUse) {
  const std::vector<std::string> endpoints = LoopbackEndpoints(2);
  Mismatches bad;
  RunRanks(2, [&](int rank) {
    auto comm = CreateCommunicator(CollectiveEnv(endpoints, rank), Options());
    bad.Check(comm.ok(), "create: " + comm.error());
    if (!comm.ok()) return;
    for (int step = 0; step < 200; ++step) {  // many small operations back to back
      std::vector<float> grad = {static_cast<float>(rank + step), 1.0f};
      Status s = (*comm)->AllReduce(grad.data(), grad.size(), ReduceOp::kAvg);
      bad.Check(s.ok() && grad[0] == static_cast<float>(step) + 0.5f && grad[1] == 1.0f, "step " + std::to_string(step));
    }
    std::vector<int64_t> ids = {rank * 10};
    bad.Check((*comm)->Broadcast(ids.data(), 1, 1).ok() && ids[0] == 10, "typed broadcast");
    std::vector<double> all(2);
    const double mine = rank + 0.5;
    bad.Check((*comm)->AllGather(&mine, all.data(), 1).ok() && all == std::vector<double>{0.5, 1.5}, "typed all_gather");
  });
  EXPECT_TRUE(bad.empty()) << bad.Describe();
}

TEST(CommunicatorTest, BroadcastFromAMissingRootIsAnError) {
  auto comm = CreateCommunicator(EnvMap{{"PADDLE_DISTRI_BACKEND", "gloo"}}, Options());
  ASSERT_TRUE(comm.ok()) << comm.error();
  float x = 1;
  EXPECT_EQ((*comm)->Broadcast(&x, 1, DataType::kFloat32, 1).error(), "broadcast: root 1 is not a rank of this 1-rank communicator");
  EXPECT_EQ((*comm)->AllReduce(nullptr, 1, DataType::kFloat32, ReduceOp::kSum).error(), "all_reduce: the buffer is null");
  EXPECT_TRUE((*comm)->AllReduce(&x, 1, DataType::kFloat32, ReduceOp::kSum).ok()) << "still usable after argument errors";
}

// ---- The env ----

TEST(CommunicatorEnvTest, NoEndpointsIsOneLocalRankAsInPaddle) {
  auto comm = CreateCommunicator(EnvMap{{"PADDLE_DISTRI_BACKEND", "gloo"}}, Options());
  ASSERT_TRUE(comm.ok()) << comm.error();
  EXPECT_EQ((*comm)->rank(), 0);
  EXPECT_EQ((*comm)->size(), 1);
  EXPECT_EQ((*comm)->backend(), Backend::kGloo);
}

TEST(CommunicatorEnvTest, BadEnvsFailWithTheContractsMessages) {
  const std::vector<std::string> endpoints = {"127.0.0.1:6170", "127.0.0.1:6171"};
  struct Case {
    std::string name;
    std::function<void(EnvMap&)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"no trainer id", [](EnvMap& e) { e.erase("PADDLE_TRAINER_ID"); },
       "invalid Paddle collective env: paddle.distributed initialize error, environment variable PADDLE_TRAINER_ID is "
       "needed, but not set."},
      {"current endpoint not listed", [](EnvMap& e) { e["PADDLE_CURRENT_ENDPOINT"] = "127.0.0.1:9"; },
       "PADDLE_CURRENT_ENDPOINT '127.0.0.1:9' is not in PADDLE_TRAINER_ENDPOINTS"},
      {"id is not the endpoint's position", [](EnvMap& e) { e["PADDLE_TRAINER_ID"] = "0"; },
       "PADDLE_TRAINER_ID is 0 but PADDLE_CURRENT_ENDPOINT '127.0.0.1:6171' is entry 1"},
      {"count disagrees", [](EnvMap& e) { e["PADDLE_TRAINERS_NUM"] = "3"; },
       "PADDLE_TRAINERS_NUM is 3 but PADDLE_TRAINER_ENDPOINTS lists 2 trainers"},
      {"endpoint without port", [](EnvMap& e) { e["PADDLE_TRAINER_ENDPOINTS"] = "127.0.0.1:6170,127.0.0.1"; },
       "endpoint '127.0.0.1' has no port"},
      {"nccl default without devices", [](EnvMap& e) { e.erase("PADDLE_DISTRI_BACKEND"); },
       "environment variable FLAGS_selected_gpus is needed, but not set."},
      {"xpu backend", [](EnvMap& e) { e["PADDLE_DISTRI_BACKEND"] = "bkcl"; e["FLAGS_selected_xpus"] = "0"; },
       "PADDLE_DISTRI_BACKEND is 'bkcl': fleet collectives run on gloo (CPU) or nccl (GPU)"},
      {"unknown backend", [](EnvMap& e) { e["PADDLE_DISTRI_BACKEND"] = "mpi"; },
       "PADDLE_DISTRI_BACKEND must be one of nccl, gloo, bkcl, auto, heter, xccl; got 'mpi'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EnvMap env = CollectiveEnv(endpoints, 1);
    c.edit(env);
    const auto start = Clock::now();
    auto comm = CreateCommunicator(env, Options());
    ASSERT_FALSE(comm.ok());
    EXPECT_THAT(comm.error(), HasSubstr(c.message));
    EXPECT_LT(SecondsSince(start), 1) << "env errors come before any networking";
  }
}

TEST(CommunicatorEnvTest, NcclWithoutAGpuIsAClearError) {
  if (CudaDeviceCount().ok()) GTEST_SKIP() << "this machine has a GPU; gpu_test.cc covers NCCL";
  EnvMap env = CollectiveEnv({"127.0.0.1:6170"}, 0, "nccl");
  env["FLAGS_selected_gpus"] = "0";
  auto comm = CreateCommunicator(env, Options(milliseconds(1000)));
  ASSERT_FALSE(comm.ok());
#if FLEET_HAVE_NCCL
  EXPECT_THAT(comm.error(), HasSubstr("nccl backend: no usable CUDA device: "));
#else
  EXPECT_THAT(comm.error(), HasSubstr("this build has no NCCL"));
#endif
  // The backend option overrides the env: gloo runs the same env on CPU.
  CommunicatorOptions gloo = Options();
  gloo.backend = BackendChoice::kGloo;
  auto cpu = CreateCommunicator(env, gloo);
  ASSERT_TRUE(cpu.ok()) << cpu.error();
  EXPECT_EQ((*cpu)->backend(), Backend::kGloo);
}

// ---- Rendezvous ----

TEST(CommunicatorRendezvousTest, Rank0AloneNamesTheRanksThatNeverJoined) {
  const std::vector<std::string> endpoints = LoopbackEndpoints(3);
  const auto start = Clock::now();
  auto comm = CreateCommunicator(CollectiveEnv(endpoints, 0), Options(milliseconds(1000)));
  const double took = SecondsSince(start);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.error(), "gloo rendezvous timed out after 1 s: rank(s) 1, 2 of 3 never joined the rendezvous store of rank 0 at " +
                              endpoints[0]);
  EXPECT_GE(took, 0.9);
  EXPECT_LT(took, 4);
}

TEST(CommunicatorRendezvousTest, ARankWithoutRank0NamesTheStoreItCouldNotReach) {
  const std::vector<std::string> endpoints = LoopbackEndpoints(2);
  const auto start = Clock::now();
  auto comm = CreateCommunicator(CollectiveEnv(endpoints, 1), Options(milliseconds(800)));
  ASSERT_FALSE(comm.ok());
  EXPECT_THAT(comm.error(), HasSubstr("gloo rendezvous: rank 1 could not reach the rendezvous store of rank 0 at " +
                                      endpoints[0] + " within 800 ms: cannot connect to " + endpoints[0]));
  EXPECT_LT(SecondsSince(start), 4);
}

TEST(CommunicatorRendezvousTest, RanksStartedWithDifferentJobsAreRefused) {
  std::vector<std::string> endpoints = LoopbackEndpoints(3);
  std::vector<std::string> other = endpoints;
  other[2] = "127.0.0.1:" + std::to_string(FreePort());
  std::vector<Result<std::unique_ptr<Communicator>>> results;
  for (int r = 0; r < 3; ++r) results.emplace_back(Error{"not run"});
  RunRanks(3, [&](int r) {
    results[static_cast<size_t>(r)] = CreateCommunicator(CollectiveEnv(r == 1 ? other : endpoints, r), Options(milliseconds(2000)));
  });
  ASSERT_FALSE(results[1].ok());
  EXPECT_THAT(results[1].error(), HasSubstr("rank 1 was started with PADDLE_TRAINER_ENDPOINTS '" + JoinStrings(other, ",") +
                                            "' but rank 0 with '" + JoinStrings(endpoints, ",") + "'"));
  // The others wait for rank 1 to connect and give up at the deadline.
  EXPECT_FALSE(results[0].ok());
  EXPECT_FALSE(results[2].ok());
}

TEST(CommunicatorRendezvousTest, GarbageSentToTheStoreDoesNotStopTheJob) {
  const std::vector<std::string> endpoints = LoopbackEndpoints(2);
  const int store_port = std::stoi(endpoints[0].substr(endpoints[0].find(':') + 1));
  Result<std::unique_ptr<Communicator>> rank0 = Error{"not run"};
  std::thread t0([&] { rank0 = CreateCommunicator(CollectiveEnv(endpoints, 0), Options()); });
  // A port scanner, an HTTP probe and an oversized frame hit rank 0's store before rank 1 arrives.
  const int probe = RawConnectWithin(store_port, 10);
  ASSERT_GE(probe, 0);
  ::close(probe);
  for (const std::string& garbage : {std::string("GET /health HTTP/1.1\r\n\r\n"), std::string("FLKV\x01\xff\xff\xff\xff\0\0\0\0", 13)}) {
    const int fd = RawConnect(store_port);
    ASSERT_GE(fd, 0);
    SetRecvTimeout(fd, 5);
    SendRaw(fd, garbage.data(), garbage.size());
    EXPECT_THAT(RecvRaw(fd, 1 << 16), HasSubstr("malformed request"));
    ::close(fd);
  }
  auto rank1 = CreateCommunicator(CollectiveEnv(endpoints, 1), Options());
  t0.join();
  ASSERT_TRUE(rank0.ok()) << rank0.error();
  ASSERT_TRUE(rank1.ok()) << rank1.error();
  int64_t v0 = 1, v1 = 2;
  std::thread a([&] { EXPECT_TRUE((*rank0)->AllReduce(&v0, 1, ReduceOp::kSum).ok()); });
  EXPECT_TRUE((*rank1)->AllReduce(&v1, 1, ReduceOp::kSum).ok());
  a.join();
  EXPECT_EQ(v0, 3);
  EXPECT_EQ(v1, 3);
}

TEST(CommunicatorRendezvousTest, Rank0sPortTakenIsAnError) {
  const std::vector<std::string> endpoints = LoopbackEndpoints(2);
  const int port = std::stoi(endpoints[0].substr(endpoints[0].find(':') + 1));
  const int squatter = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(::bind(squatter, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(squatter, 1), 0);
  auto comm = CreateCommunicator(CollectiveEnv(endpoints, 0), Options(milliseconds(500)));
  ::close(squatter);
  ASSERT_FALSE(comm.ok());
  EXPECT_THAT(comm.error(), HasSubstr("rank 0 cannot serve the rendezvous store on " + endpoints[0]));
  EXPECT_THAT(comm.error(), HasSubstr("Address already in use"));
}

// ---- Failures during training ----

TEST(CommunicatorFailureTest, ADeadPeerBreaksTheCommunicatorWithAnError) {
  const std::vector<std::string> endpoints = LoopbackEndpoints(2);
  std::promise<void> rank1_gone;
  Status first = Error{"not run"};
  Status second = Error{"not run"};
  double took = 0;
  RunRanks(2, [&](int rank) {
    auto comm = CreateCommunicator(CollectiveEnv(endpoints, rank), Options(milliseconds(10000), milliseconds(10000)));
    ASSERT_TRUE(comm.ok()) << comm.error();
    ASSERT_TRUE((*comm)->Barrier().ok());
    if (rank == 1) {
      comm->reset();  // rank 1 exits
      rank1_gone.set_value();
      return;
    }
    rank1_gone.get_future().wait();
    std::vector<float> grad(1000, 1.0f);
    const auto start = Clock::now();
    first = (*comm)->AllReduce(grad.data(), grad.size(), ReduceOp::kSum);
    took = SecondsSince(start);
    second = (*comm)->Barrier();
  });
  ASSERT_FALSE(first.ok());
  EXPECT_THAT(first.error(), HasSubstr("gloo all_reduce failed on rank 0: "));
  EXPECT_LT(took, 5) << "a closed connection is noticed at once, not at the operation timeout";
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.error(), HasSubstr("barrier: the communicator is unusable after an earlier failure: gloo all_reduce failed"));
}

TEST(CommunicatorFailureTest, AHungPeerTimesOut) {
  const std::vector<std::string> endpoints = LoopbackEndpoints(2);
  std::promise<void> rank0_done;
  Status result = Error{"not run"};
  double took = 0;
  RunRanks(2, [&](int rank) {
    auto comm = CreateCommunicator(CollectiveEnv(endpoints, rank), Options(milliseconds(10000), milliseconds(700)));
    ASSERT_TRUE(comm.ok()) << comm.error();
    if (rank == 1) {  // alive, connected, but never joins the all-reduce
      rank0_done.get_future().wait();
      return;
    }
    std::vector<double> grad(10, 1.0);
    const auto start = Clock::now();
    result = (*comm)->AllReduce(grad.data(), grad.size(), ReduceOp::kSum);
    took = SecondsSince(start);
    rank0_done.set_value();
  });
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.error(), HasSubstr("gloo all_reduce failed on rank 0: "));
  EXPECT_THAT(result.error(), AnyOf(HasSubstr("imed out"), HasSubstr("imeout")));
  EXPECT_GE(took, 0.6);
  EXPECT_LT(took, 5);
}

}  // namespace
}  // namespace fleet::collective
