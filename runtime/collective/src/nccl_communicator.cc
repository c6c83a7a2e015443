// The NCCL backend (built when FLEET_HAVE_NCCL): one GPU per process (the first of
// FLAGS_selected_gpus), the unique id sent by rank 0 as Paddle's c_gen_nccl_id does, NCCL's
// non-blocking mode so that bootstrap and every operation are bounded by a deadline (on expiry
// the communicator is aborted and reports the error instead of hanging).
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends.h"
#include "fleet/collective/nccl_id.h"
#include "socket.h"

namespace fleet::collective {
namespace {

using net::Clock;
using std::chrono::milliseconds;

std::string CudaError(cudaError_t err) { return std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err); }

ncclDataType_t NcclType(DataType type) {
  switch (type) {
    case DataType::kFloat32: return ncclFloat32;
    case DataType::kFloat64: return ncclFloat64;
    case DataType::kInt64: return ncclInt64;
    case DataType::kFloat16: return ncclFloat16;
    case DataType::kBFloat16: return ncclBfloat16;
  }
  return ncclFloat32;
}

ncclRedOp_t NcclOp(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return ncclSum;
    case ReduceOp::kMax: return ncclMax;
    case ReduceOp::kMin: return ncclMin;
    case ReduceOp::kAvg: return ncclAvg;
  }
  return ncclSum;
}

// Waits for a non-blocking communicator to leave ncclInProgress.
Status WaitForComm(ncclComm_t comm, Clock::time_point deadline, const std::string& what) {
  while (true) {
    ncclResult_t state = ncclSuccess;
    const ncclResult_t rc = ncclCommGetAsyncError(comm, &state);
    if (rc != ncclSuccess) return Error{what + ": " + ncclGetErrorString(rc)};
    if (state == ncclSuccess) return OkStatus();
    if (state != ncclInProgress) {
      return Error{what + ": " + ncclGetErrorString(state) + " (" + ncclGetLastError(comm) + ")"};
    }
    if (Clock::now() >= deadline) return Error{what + ": timed out"};
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(int rank, int size, int device, ncclComm_t comm, cudaStream_t stream, milliseconds timeout,
                   bool host_buffers)
      : Communicator(rank, size, Backend::kNccl),
        device_(device),
        comm_(comm),
        stream_(stream),
        timeout_(timeout),
        host_buffers_(host_buffers) {}

  ~NcclCommunicator() override {
    cudaSetDevice(device_);
    if (comm_ != nullptr) {
      // A healthy communicator finishes its work and is destroyed; a stuck one is aborted.
      const ncclResult_t rc = ncclCommFinalize(comm_);
      const bool finalized =
          (rc == ncclSuccess || rc == ncclInProgress) && WaitForComm(comm_, Clock::now() + timeout_, "finalize").ok();
      if (finalized) {
        ncclCommDestroy(comm_);
      } else {
        ncclCommAbort(comm_);
      }
    }
    if (scratch_ != nullptr) cudaFree(scratch_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  int device() const override { return device_; }

  Status AllReduce(void* data, size_t count, DataType type, ReduceOp op) override {
    const size_t bytes = count * DataTypeSize(type);
    return Run("all_reduce", data, bytes, data, bytes, [&](void* in, void* out) {
      return ncclAllReduce(in, out, count, NcclType(type), NcclOp(op), comm_, stream_);
    });
  }

  Status Broadcast(void* data, size_t count, DataType type, int root) override {
    if (root < 0 || root >= size()) {
      return Error{"broadcast: root " + std::to_string(root) + " is not a rank of this " + std::to_string(size()) +
                   "-rank communicator"};
    }
    const size_t bytes = count * DataTypeSize(type);
    return Run("broadcast", data, bytes, data, bytes, [&](void* in, void* out) {
      return ncclBroadcast(in, out, count, NcclType(type), root, comm_, stream_);
    });
  }

  Status AllGather(const void* input, void* output, size_t count, DataType type) override {
    const size_t bytes = count * DataTypeSize(type);
    return Run("all_gather", const_cast<void*>(input), bytes, output, bytes * static_cast<size_t>(size()),
               [&](void* in, void* out) { return ncclAllGather(in, out, count, NcclType(type), comm_, stream_); });
  }

  Status Barrier() override {
    // An all-reduce of one element, as Paddle's and PyTorch's NCCL barriers do.
    std::lock_guard<std::mutex> lock(mutex_);
    if (!broken_.empty()) return Error{"barrier: the communicator is unusable after an earlier failure: " + broken_};
    cudaSetDevice(device_);
    if (auto s = EnsureScratch(sizeof(float)); !s) return s;
    const Clock::time_point deadline = Clock::now() + timeout_;
    const ncclResult_t rc = ncclAllReduce(scratch_, scratch_, 1, ncclFloat32, ncclSum, comm_, stream_);
    return Finish("barrier", rc, deadline);
  }

 private:
  Status EnsureScratch(size_t bytes) {
    if (bytes <= scratch_bytes_) return OkStatus();
    if (scratch_ != nullptr) cudaFree(scratch_);
    scratch_ = nullptr;
    scratch_bytes_ = 0;
    if (cudaError_t err = cudaMalloc(&scratch_, bytes); err != cudaSuccess) {
      return Error{"cannot allocate " + std::to_string(bytes) + " bytes on GPU " + std::to_string(device_) + ": " + CudaError(err)};
    }
    scratch_bytes_ = bytes;
    return OkStatus();
  }

  // Waits for the enqueued operation: the call itself (non-blocking NCCL may return
  // ncclInProgress), then the stream, both bounded by the deadline.
  Status Finish(const char* what, ncclResult_t rc, Clock::time_point deadline) {
    std::string error;
    if (rc != ncclSuccess && rc != ncclInProgress) {
      error = std::string(ncclGetErrorString(rc)) + " (" + ncclGetLastError(comm_) + ")";
    } else if (auto s = WaitForComm(comm_, deadline, what); !s) {
      error = s.error();
    } else {
      while (true) {
        const cudaError_t q = cudaStreamQuery(stream_);
        if (q == cudaSuccess) return OkStatus();
        if (q != cudaErrorNotReady) {
          error = CudaError(q);
          break;
        }
        ncclResult_t state = ncclSuccess;
        ncclCommGetAsyncError(comm_, &state);
        if (state != ncclSuccess && state != ncclInProgress) {
          error = ncclGetErrorString(state);
          break;
        }
        if (Clock::now() >= deadline) {
          error = "timed out after " + net::FormatDuration(timeout_);
          break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
    broken_ = std::string("nccl ") + what + " failed on rank " + std::to_string(rank()) + ": " + error;
    ncclCommAbort(comm_);  // unblocks the other work of this communicator; it cannot be reused
    comm_ = nullptr;
    return Error{broken_};
  }

  template <typename Launch>
  Status Run(const char* what, void* in, size_t in_bytes, void* out, size_t out_bytes, Launch&& launch) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!broken_.empty()) return Error{std::string(what) + ": the communicator is unusable after an earlier failure: " + broken_};
    if (in_bytes == 0) return OkStatus();
    if (in == nullptr || out == nullptr) return Error{std::string(what) + ": the buffer is null"};
    cudaSetDevice(device_);
    const Clock::time_point deadline = Clock::now() + timeout_;
    if (!host_buffers_) return Finish(what, launch(in, out), deadline);
    // Host buffers: stage through one device buffer (input at its start, output in place over it;
    // NCCL allows in-place all-gather with the input at this rank's offset, so copy it there).
    if (auto s = EnsureScratch(out_bytes); !s) return s;
    char* device_out = static_cast<char*>(scratch_);
    char* device_in = in == out ? device_out : device_out + static_cast<size_t>(rank()) * in_bytes;
    if (cudaError_t err = cudaMemcpyAsync(device_in, in, in_bytes, cudaMemcpyHostToDevice, stream_); err != cudaSuccess) {
      return Error{std::string(what) + ": copying to GPU failed: " + CudaError(err)};
    }
    if (auto s = Finish(what, launch(device_in, device_out), deadline); !s) return s;
    cudaError_t err = cudaMemcpyAsync(out, device_out, out_bytes, cudaMemcpyDeviceToHost, stream_);
    if (err == cudaSuccess) err = cudaStreamSynchronize(stream_);
    if (err != cudaSuccess) return Error{std::string(what) + ": copying from GPU failed: " + CudaError(err)};
    return OkStatus();
  }

  int device_;
  ncclComm_t comm_;
  cudaStream_t stream_;
  milliseconds timeout_;
  bool host_buffers_;
  void* scratch_ = nullptr;
  size_t scratch_bytes_ = 0;
  std::mutex mutex_;
  std::string broken_;
};

}  // namespace

Result<int> CudaDeviceCount() {
  int count = 0;
  if (cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) return Error{"no usable CUDA device: " + CudaError(err)};
  if (count == 0) return Error{"no CUDA device"};
  return count;
}

Result<std::unique_ptr<Communicator>> CreateNcclCommunicator(const RankSetup& setup, const CommunicatorOptions& options) {
  const int rank = setup.rank;
  const int size = setup.size();
  if (setup.devices.empty()) return Error{"nccl backend: FLAGS_selected_gpus names no GPU for this process"};
  const int device = setup.devices[0];
  auto count = CudaDeviceCount();
  if (!count) return Error{"nccl backend: " + count.error()};
  if (device >= *count) {
    return Error{"nccl backend: FLAGS_selected_gpus names GPU " + std::to_string(device) + " but this process sees " +
                 std::to_string(*count) + " (CUDA_VISIBLE_DEVICES)"};
  }
  const Clock::time_point deadline = Clock::now() + options.rendezvous_timeout;
  if (cudaError_t err = cudaSetDevice(device); err != cudaSuccess) {
    return Error{"nccl backend: cannot use GPU " + std::to_string(device) + ": " + CudaError(err)};
  }

  UniqueId id{};
  if (rank == 0) {
    ncclUniqueId nccl_id;
    if (ncclResult_t rc = ncclGetUniqueId(&nccl_id); rc != ncclSuccess) {
      return Error{std::string("nccl backend: ncclGetUniqueId failed: ") + ncclGetErrorString(rc)};
    }
    std::memcpy(id.data(), nccl_id.internal, kUniqueIdBytes);
    std::vector<std::string> others;
    for (size_t r = 1; r < setup.endpoints.size(); ++r) others.push_back(setup.endpoints[r].ToString());
    if (!others.empty()) {
      FLEET_RETURN_IF_ERROR(SendUniqueIds(others, {id}, IdExchangeOptions{0, options.rendezvous_timeout}));
    }
  } else {
    FLEET_ASSIGN_OR_RETURN(auto ids, ReceiveUniqueIds(setup.endpoints[static_cast<size_t>(rank)].ToString(), 1,
                                                      IdExchangeOptions{0, options.rendezvous_timeout}));
    id = ids[0];
  }

  ncclUniqueId nccl_id;
  std::memcpy(nccl_id.internal, id.data(), kUniqueIdBytes);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclResult_t rc = ncclCommInitRankConfig(&comm, size, nccl_id, rank, &config);
  if (rc != ncclSuccess && rc != ncclInProgress) {
    if (comm != nullptr) ncclCommAbort(comm);
    return Error{std::string("nccl backend: ncclCommInitRank failed on rank ") + std::to_string(rank) + ": " + ncclGetErrorString(rc)};
  }
  if (auto s = WaitForComm(comm, deadline, "ncclCommInitRank on rank " + std::to_string(rank)); !s) {
    ncclCommAbort(comm);
    return Error{"nccl backend: " + s.error()};
  }
  cudaStream_t stream = nullptr;
  if (cudaError_t err = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking); err != cudaSuccess) {
    ncclCommAbort(comm);
    return Error{"nccl backend: cudaStreamCreate failed: " + CudaError(err)};
  }
  return std::unique_ptr<Communicator>(
      new NcclCommunicator(rank, size, device, comm, stream, options.operation_timeout, options.host_buffers));
}

}  // namespace fleet::collective
