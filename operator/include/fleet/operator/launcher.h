// How a pod starts Paddle, and so how its processes find their peers.
//
// Paddle's processes learn their role, rank and peers only from the env, but who reads the env
// differs: a training script run bare reads the per-process lists (PaddleCloudRoleMaker); Paddle
// 2.x's fleetrun reads PaddleCloud's node-level env and writes the lists for the processes it
// starts; Paddle 2.3+'s `paddle.distributed.launch` needs only a master, a node count and a rank,
// and builds the lists itself in a rendezvous; PaddleFormers' CLI runs that launcher from torch-style
// MASTER_ADDR/MASTER_PORT/NNODES. Giving one of them another's env derails it (random ranks, pods
// that train alone, hangs: docs/launchers.md). So the launcher is decided once per role — from
// spec.launcher, or read from the role's command line — and the role's Discovery follows from it:
// the one place that says what a pod is given to find its peers.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fleet/api/launcher.h"
#include "fleet/runtime/topology.h"

namespace fleet::api {
struct FleetJobSpec;
struct RoleSpec;
}  // namespace fleet::api

namespace fleet::op {

using Json = nlohmann::json;
using api::FleetJobSpec;
using api::RoleSpec;

// The launcher and the Paddle release are the spec's (fleet/api/launcher.h): read with it.
using api::DetectLauncher;
using api::ImagePaddleVersion;
using api::IsPaddleLaunchFamily;
using api::Launcher;
using api::LauncherCommand;
using api::LauncherName;
using api::PaddleVersion;
using api::ParsePaddleVersion;
using api::PassesFlag;
using api::TemplateGpus;

// What a role's pods are given to find their peers.
enum class Discovery {
  kProcessEnv,     // every process's own contract env, lists included: the script runs bare
  kClusterEnv,     // PaddleCloud's node-level env (PADDLE_TRAINERS, TRAINER_PORTS_NUM, ...): a
                   // legacy launcher in the pod starts processesPerPod processes and writes their lists
  kLaunchMaster,   // Paddle 2.3+'s launcher: pod 0 serves the master, every pod its node rank
  kPsLaunchLists,  // Paddle 2.3+'s launcher in PS mode: the server and trainer lists as its flags' env
  kEtcdLegacy,     // elastic, fleetrun or Paddle 2.x's elastic launcher: PADDLE_ELASTIC_* in etcd
  kEtcdLaunch,     // elastic, Paddle 2.3+'s launcher: an etcd master and --nnodes MIN:MAX
};
Discovery DiscoveryOf(const FleetJobSpec& spec, const RoleSpec& role);
std::string_view DiscoveryName(Discovery discovery);

// status.launcher: each role's launcher, "worker=PaddleLaunch" or "server=Script,worker=Fleetrun".
std::string LauncherSummary(const FleetJobSpec& spec);
// What each role runs, where that was read, and what its pods are given to find their peers.
std::string LauncherMessage(const FleetJobSpec& spec);
// What may not work as the user expects with these launchers, each naming the field.
std::vector<std::string> LauncherCaveats(const FleetJobSpec& spec);

// Where pods running Paddle's launcher write its logs (PADDLE_LOG_DIR, an emptyDir the sidecar
// mounts too): the sidecar follows <dir>/workerlog.<local rank> for the job's progress.
inline constexpr const char* kLauncherLogDir = "/var/log/fleet/paddle";

// Paddle's etcd master takes its host with str.strip("etcd://"), which strips those *characters*
// from both ends, so a host beginning with e, t, c or d loses letters ("etcd-0" -> "-0"; the end
// is the port's digits). Host names
// are case-insensitive: such a host is given with its first letter upper-cased, which Paddle
// keeps and DNS resolves the same. "etcd.infra.svc:2379" -> "etcd://Etcd.infra.svc:2379".
std::string PaddleEtcdMaster(const std::string& host_port);

}  // namespace fleet::op
