// What CreateCommunicator hands the backends: this rank's place in the job, already validated by
// fleet::ParseProcessEnv.
#pragma once

#include <memory>
#include <vector>

#include "fleet/collective/communicator.h"
#include "fleet/runtime/endpoint.h"

namespace fleet::collective {

struct RankSetup {
  int rank = 0;
  std::vector<Endpoint> endpoints;  // PADDLE_TRAINER_ENDPOINTS; endpoints[rank] is this process
  std::vector<int> devices;         // FLAGS_selected_gpus
  bool non_distributed = false;     // no PADDLE_TRAINER_ENDPOINTS: one local rank
  int size() const { return static_cast<int>(endpoints.size()); }
};

Result<std::unique_ptr<Communicator>> CreateGlooCommunicator(const RankSetup& setup, const CommunicatorOptions& options);

#if FLEET_HAVE_NCCL
Result<std::unique_ptr<Communicator>> CreateNcclCommunicator(const RankSetup& setup, const CommunicatorOptions& options);
#endif

}  // namespace fleet::collective
