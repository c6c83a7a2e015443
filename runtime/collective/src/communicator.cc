// CreateCommunicator: the Paddle env (read by fleet::ParseProcessEnv, never re-parsed here) ->
// this rank's place in the job -> the backend.
#include "fleet/collective/communicator.h"

#include <string>

#include "backends.h"

namespace fleet::collective {
namespace {

Result<Backend> ChooseBackend(const EnvMap& env, const ParsedRole& role, BackendChoice choice) {
  if (choice == BackendChoice::kGloo) return Backend::kGloo;
  if (choice == BackendChoice::kNccl) return Backend::kNccl;
  auto it = env.find("PADDLE_DISTRI_BACKEND");
  const std::string requested = it == env.end() ? "auto" : it->second;
  if (requested == "gloo") return Backend::kGloo;
  if (requested == "nccl") return Backend::kNccl;
  if (requested == "auto") return role.selected_devices.empty() ? Backend::kGloo : Backend::kNccl;
  return Error{"PADDLE_DISTRI_BACKEND is '" + requested + "': fleet collectives run on gloo (CPU) or nccl (GPU)"};
}

}  // namespace

Result<BackendChoice> ParseBackendChoice(std::string_view text) {
  if (text == "auto") return BackendChoice::kAuto;
  if (text == "gloo") return BackendChoice::kGloo;
  if (text == "nccl") return BackendChoice::kNccl;
  return Error{"unknown backend '" + std::string(text) + "' (expected auto, gloo or nccl)"};
}

Result<std::unique_ptr<Communicator>> CreateCommunicator(const EnvMap& env, const CommunicatorOptions& options) {
  auto role = ParseProcessEnv(env, RoleMakerKind::kCollective);
  if (!role) return Error{"invalid Paddle collective env: " + role.error()};
  FLEET_ASSIGN_OR_RETURN(auto backend, ChooseBackend(env, *role, options.backend));

  RankSetup setup;
  setup.rank = role->id;
  setup.devices = role->selected_devices;
  setup.non_distributed = role->non_distributed;
  for (const std::string& text : role->trainer_endpoints) {
    auto endpoint = ParseEndpoint(text);  // already validated by ParseProcessEnv
    if (!endpoint) return Error{"PADDLE_TRAINER_ENDPOINTS: " + endpoint.error()};
    setup.endpoints.push_back(*endpoint);
  }
  if (setup.rank < 0 || setup.rank >= setup.size()) {
    return Error{"PADDLE_TRAINER_ID " + std::to_string(setup.rank) + " is not below the trainer count " +
                 std::to_string(setup.size())};
  }

  if (backend == Backend::kGloo) return CreateGlooCommunicator(setup, options);
#if FLEET_HAVE_NCCL
  return CreateNcclCommunicator(setup, options);
#else
  return Error{"the nccl backend was asked for (PADDLE_DISTRI_BACKEND / FLAGS_selected_gpus / the backend option) but "
               "this build has no NCCL: configure with -DFLEET_WITH_NCCL=ON where CUDA and NCCL are installed"};
#endif
}

#if !FLEET_HAVE_NCCL
Result<int> CudaDeviceCount() {
  return Error{"this build has no CUDA (FLEET_HAVE_NCCL is off: FLEET_WITH_NCCL=OFF, or CUDA/NCCL were not found)"};
}
#endif

}  // namespace fleet::collective
