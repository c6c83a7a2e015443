// fleet::collective — all-reduce, broadcast, all-gather and barrier among the trainers of a
// collective job, set up from the Paddle launcher env alone (docs/runtime.md):
//   PADDLE_TRAINER_ID, PADDLE_TRAINERS_NUM, PADDLE_TRAINER_ENDPOINTS, PADDLE_CURRENT_ENDPOINT,
//   PADDLE_DISTRI_BACKEND and FLAGS_selected_gpus, read by fleet::ParseProcessEnv exactly as
//   Paddle's collective role maker reads them.
//
// Backends:
//   gloo: CPU, host memory. Gloo's TCP transport; the ranks meet through a rendezvous store that
//         rank 0 serves on its own endpoint (rendezvous_store.h).
//   nccl: GPU, device memory (host memory with CommunicatorOptions::host_buffers). Rank 0 makes
//         the NCCL unique id and sends it to every other rank's endpoint as Paddle's c_gen_nccl_id
//         does (nccl_id.h). Only in builds with FLEET_HAVE_NCCL.
//
// Every rank must issue the same collectives in the same order (as with NCCL, Gloo and MPI). Calls
// on one communicator are serialized. After a failed operation (a peer died, a timeout) the
// communicator is broken: later calls fail at once with the first error.
#pragma once

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>

#include "fleet/base/result.h"
#include "fleet/collective/types.h"
#include "fleet/runtime/env_contract.h"

namespace fleet::collective {

enum class BackendChoice {
  kAuto,  // PADDLE_DISTRI_BACKEND if set (gloo / nccl), else nccl when FLAGS_selected_gpus names a GPU, else gloo
  kGloo,
  kNccl,
};
Result<BackendChoice> ParseBackendChoice(std::string_view text);  // "auto", "gloo", "nccl"

struct CommunicatorOptions {
  BackendChoice backend = BackendChoice::kAuto;
  // How long ranks wait for each other to join (the rendezvous store, the NCCL id exchange, NCCL's
  // own bootstrap). Paddle waits 900 s.
  std::chrono::milliseconds rendezvous_timeout = std::chrono::seconds(900);
  // How long one collective may take before it fails (a dead or hung peer). PyTorch's default.
  std::chrono::milliseconds operation_timeout = std::chrono::minutes(30);
  // NCCL only: buffers passed to the operations are in host memory; they are staged through a
  // device buffer. (Gloo always takes host memory.)
  bool host_buffers = false;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  Backend backend() const { return backend_; }
  // The device the communicator runs on: -1 for gloo, the CUDA ordinal for nccl.
  virtual int device() const { return -1; }

  // In place: every rank ends with the element-wise reduction of all ranks' `data`. kAvg is the
  // sum divided by size() (for int64, C++ integer division, rounding toward zero).
  virtual Status AllReduce(void* data, size_t count, DataType type, ReduceOp op) = 0;
  // In place: every rank ends with `root`'s `data`.
  virtual Status Broadcast(void* data, size_t count, DataType type, int root) = 0;
  // `output` holds size() * count elements: rank r's `input` lands at output + r * count. The input
  // may be that very slot of the output (in place), but must not overlap it anywhere else.
  virtual Status AllGather(const void* input, void* output, size_t count, DataType type) = 0;
  // Returns once every rank has entered the barrier.
  virtual Status Barrier() = 0;

  template <typename T>
  Status AllReduce(T* data, size_t count, ReduceOp op) {
    return AllReduce(static_cast<void*>(data), count, DataTypeOf<T>::value, op);
  }
  template <typename T>
  Status Broadcast(T* data, size_t count, int root) {
    return Broadcast(static_cast<void*>(data), count, DataTypeOf<T>::value, root);
  }
  template <typename T>
  Status AllGather(const T* input, T* output, size_t count) {
    return AllGather(static_cast<const void*>(input), static_cast<void*>(output), count, DataTypeOf<T>::value);
  }

 protected:
  Communicator(int rank, int size, Backend backend) : rank_(rank), size_(size), backend_(backend) {}

 private:
  int rank_;
  int size_;
  Backend backend_;
};

// Creates this process's communicator from a Paddle collective env. Blocks until every rank has
// joined (or options.rendezvous_timeout passes). Without PADDLE_TRAINER_ENDPOINTS the process is a
// single, non-distributed rank, as in Paddle.
Result<std::unique_ptr<Communicator>> CreateCommunicator(const EnvMap& env, const CommunicatorOptions& options = {});

// Number of CUDA devices this process sees; an error when there is no usable device or driver,
// or the build has no CUDA (FLEET_HAVE_NCCL off). GPU tests skip on an error.
Result<int> CudaDeviceCount();

}  // namespace fleet::collective
