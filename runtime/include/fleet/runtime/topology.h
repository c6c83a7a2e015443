// The topology model: every process of a Paddle job with its role, rank, node, endpoint and devices.
// One model serves the local launcher (fleetrun) and the operator (pods); both build it with the
// builders below and hand it to the env renderer (env_contract.h).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "fleet/base/result.h"
#include "fleet/runtime/endpoint.h"

namespace fleet {

enum class JobMode { kCollective, kParameterServer, kHeterParameterServer };
enum class Role { kTrainer, kServer, kHeterTrainer };
enum class DeviceKind { kCpu, kGpu, kXpu };

// "collective" / "ps" / "ps-heter", as in --run_mode.
std::string_view JobModeName(JobMode mode);
Result<JobMode> ParseJobMode(std::string_view text);
// "cpu" / "gpu" / "xpu", as in HETER_DEVICE_TYPE and --heter_devices.
std::string_view DeviceKindName(DeviceKind kind);
Result<DeviceKind> ParseDeviceKind(std::string_view text);
// TRAINER / PSERVER / HETER_TRAINER, the TRAINING_ROLE values.
std::string_view RoleEnvName(Role role);
// "trainer" / "server" / "heter trainer", for messages to people.
std::string_view RoleTitle(Role role);

// Gloo settings shared by every process of a job (PADDLE_WITH_GLOO and friends).
struct GlooSettings {
  int with_gloo = 0;           // 0 off, 1 trainers barrier, 2 all roles
  int rendezvous = 3;          // 1 HDFS, 2 FILE, 3 HTTP
  std::string fs_path;         // PADDLE_GLOO_FS_PATH (FILE rendezvous; Paddle always sets one)
  std::string http_endpoint;   // PADDLE_GLOO_HTTP_ENDPOINT: "<server 0 host>:<port>" (PS modes)
};

struct Process {
  Role role = Role::kTrainer;
  // Trainer: the trainer id (position in the trainer list). Server: the server index. Heter
  // trainer: position in the list of all heter trainers (stage order).
  int rank = 0;
  int stage = 1;         // 1 for trainers (stage 1 of a heter job), 2..S for heter trainers
  int node = 0;          // index into Topology::nodes
  int local_rank = 0;    // index among the processes of the same role on the same node
  Endpoint endpoint;
  DeviceKind device_kind = DeviceKind::kCpu;
  // Device ordinals as the process sees them (FLAGS_selected_gpus / FLAGS_selected_xpus).
  std::vector<int> devices;
  // When non-empty, the process's CUDA_VISIBLE_DEVICES (or XPU_VISIBLE_DEVICES): used where one
  // process owns one device (PS trainers, heter trainers). Empty: the inherited value stands.
  std::string visible_devices;
};

struct Topology {
  JobMode mode = JobMode::kCollective;
  std::vector<std::string> nodes;    // distinct hosts, in the order Paddle numbers nodes
  std::vector<Process> processes;    // collective: by rank; PS: servers, trainers, heter by rank
  GlooSettings gloo;

  std::vector<const Process*> OfRole(Role role) const;
  std::vector<Endpoint> EndpointsOf(Role role) const;
  int StageCount() const;  // 1 + number of heter stages (1 for non-heter jobs)
  std::vector<Endpoint> StageEndpoints(int stage) const;  // stage 1 = trainers
};

// Collective: every node runs one process per device group. The same groups are used on every
// node (Paddle requires the same GPU count everywhere).
struct CollectiveLayout {
  std::vector<std::string> nodes;             // --ips order
  std::vector<std::vector<int>> node_ports;   // per node, one port per local process
  std::vector<std::vector<int>> device_groups;  // per local process: device ordinals (none on CPU)
  DeviceKind device_kind = DeviceKind::kCpu;  // kGpu when device_groups name GPUs
  GlooSettings gloo;
};
Result<Topology> BuildCollectiveTopology(const CollectiveLayout& layout);

struct HeterStage {
  DeviceKind device = DeviceKind::kCpu;
  std::vector<Endpoint> endpoints;
};

// Parameter server, optionally with heter stages 2..S. Device pools are the ids visible to the
// launcher on each node; trainers (when trainer_device is kGpu) and gpu/xpu heter trainers take one
// device each, round-robin by their local index, and see it as device 0.
struct PsLayout {
  std::vector<Endpoint> servers;
  std::vector<Endpoint> trainers;
  std::vector<HeterStage> heter_stages;
  DeviceKind trainer_device = DeviceKind::kCpu;
  std::vector<std::string> gpu_pool;
  std::vector<std::string> xpu_pool;
  GlooSettings gloo;
};
Result<Topology> BuildPsTopology(const PsLayout& layout);

}  // namespace fleet
