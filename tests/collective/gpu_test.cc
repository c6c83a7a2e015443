// The NCCL backend on real GPUs. Every case skips (with the reason) where CUDA reports no usable
// device, as on the CPU-only build machine; on a GPU machine they run: one GPU is enough for the
// single-rank cases, the multi-rank case needs two or more.
#include <cstring>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#if FLEET_HAVE_NCCL
#include <cuda_runtime.h>
#endif

#include "fleet/collective/communicator.h"
#include "test_util.h"

namespace fleet::collective {
namespace {

using namespace fleet::collective::testing;  // NOLINT: test helpers
using std::chrono::milliseconds;

int GpusOrSkip() {
  auto count = CudaDeviceCount();
  return count.ok() ? *count : 0;
}

#define SKIP_WITHOUT_GPUS(n)                                                                        \
  do {                                                                                              \
    auto count = CudaDeviceCount();                                                                 \
    if (!count.ok()) GTEST_SKIP() << count.error();                                                 \
    if (*count < (n)) GTEST_SKIP() << "needs " << (n) << " GPUs, this machine has " << *count;      \
  } while (false)

EnvMap GpuEnv(const std::vector<std::string>& endpoints, int rank, int gpu) {
  EnvMap env = CollectiveEnv(endpoints, rank, "nccl");
  env["FLAGS_selected_gpus"] = std::to_string(gpu);
  return env;
}

CommunicatorOptions HostBuffers() {
  CommunicatorOptions options;
  options.rendezvous_timeout = milliseconds(60000);
  options.operation_timeout = milliseconds(60000);
  options.host_buffers = true;
  return options;
}

TEST(GpuTest, SingleGpuAllReduceSanity) {
  SKIP_WITHOUT_GPUS(1);
  auto comm = CreateCommunicator(GpuEnv(LoopbackEndpoints(1), 0, 0), HostBuffers());
  ASSERT_TRUE(comm.ok()) << comm.error();
  EXPECT_EQ((*comm)->backend(), Backend::kNccl);
  EXPECT_EQ((*comm)->device(), 0);
  std::vector<float> f(1 << 20, 1.5f);
  ASSERT_TRUE((*comm)->AllReduce(f.data(), f.size(), ReduceOp::kSum).ok());
  EXPECT_EQ(f.front(), 1.5f);
  EXPECT_EQ(f.back(), 1.5f);
  std::vector<int64_t> i(1000, -7);
  ASSERT_TRUE((*comm)->AllReduce(i.data(), i.size(), ReduceOp::kAvg).ok());
  EXPECT_EQ(i[999], -7);
  std::vector<BFloat16> b(64, ToBFloat16(2.0f));
  ASSERT_TRUE((*comm)->AllReduce(b.data(), b.size(), ReduceOp::kMax).ok());
  EXPECT_EQ(ToFloat(b[63]), 2.0f);
  std::vector<Float16> h(64, ToFloat16(-3.0f));
  ASSERT_TRUE((*comm)->AllReduce(h.data(), h.size(), ReduceOp::kMin).ok());
  EXPECT_EQ(ToFloat(h[0]), -3.0f);
  std::vector<double> in = {4.25}, out(1);
  ASSERT_TRUE((*comm)->AllGather(in.data(), out.data(), 1).ok());
  EXPECT_EQ(out[0], 4.25);
  ASSERT_TRUE((*comm)->Broadcast(in.data(), 1, 0).ok());
  ASSERT_TRUE((*comm)->Barrier().ok());
}

#if FLEET_HAVE_NCCL
TEST(GpuTest, DeviceBuffersWithoutStaging) {
  SKIP_WITHOUT_GPUS(1);
  CommunicatorOptions options = HostBuffers();
  options.host_buffers = false;
  auto comm = CreateCommunicator(GpuEnv(LoopbackEndpoints(1), 0, 0), options);
  ASSERT_TRUE(comm.ok()) << comm.error();
  const size_t n = 1 << 16;
  std::vector<float> host(n, 2.0f);
  float* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, n * sizeof(float)), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(device, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
  ASSERT_TRUE((*comm)->AllReduce(device, n, ReduceOp::kAvg).ok());
  std::fill(host.begin(), host.end(), 0.0f);
  ASSERT_EQ(cudaMemcpy(host.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
  cudaFree(device);
  EXPECT_EQ(host[0], 2.0f);
  EXPECT_EQ(host[n - 1], 2.0f);
}
#endif

TEST(GpuTest, EveryGpuOneRank) {
  SKIP_WITHOUT_GPUS(2);
  const int size = std::min(GpusOrSkip(), 4);
  const std::vector<std::string> endpoints = LoopbackEndpoints(size);
  std::vector<std::string> errors(static_cast<size_t>(size));
  RunRanks(size, [&](int rank) {
    auto comm = CreateCommunicator(GpuEnv(endpoints, rank, rank), HostBuffers());
    if (!comm.ok()) {
      errors[static_cast<size_t>(rank)] = comm.error();
      return;
    }
    std::vector<float> v(1 << 20, static_cast<float>(rank + 1));
    Status s = (*comm)->AllReduce(v.data(), v.size(), ReduceOp::kSum);
    const float want = static_cast<float>(size * (size + 1) / 2);
    if (!s.ok()) errors[static_cast<size_t>(rank)] = s.error();
    else if (v.front() != want || v.back() != want) errors[static_cast<size_t>(rank)] = "wrong sum";
    std::vector<int64_t> all(static_cast<size_t>(size));
    const int64_t mine = rank;
    s = (*comm)->AllGather(&mine, all.data(), 1);
    for (int r = 0; r < size && s.ok(); ++r) {
      if (all[static_cast<size_t>(r)] != r) errors[static_cast<size_t>(rank)] = "wrong all_gather";
    }
  });
  for (int r = 0; r < size; ++r) EXPECT_EQ(errors[static_cast<size_t>(r)], "") << "rank " << r;
}

}  // namespace
}  // namespace fleet::collective
