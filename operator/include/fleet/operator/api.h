// The FleetJob API (fleet.paddlepaddle.org/v1alpha1) as C++ values, and the checks the CRD's
// OpenAPI schema and CEL rules cannot express. crds/fleetjob.yaml is the schema users see; this
// file is what the operator decides with. ParseFleetJob never throws: a malformed object is an
// error naming the field and what to do, which the operator turns into phase Failed.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fleet/api/job_status.h"
#include "fleet/base/result.h"
#include "fleet/operator/launcher.h"
#include "fleet/runtime/topology.h"

namespace fleet::op {

using Json = nlohmann::json;

// The job's status is the API's (fleet/api/job_status.h): the operator writes it, fleetctl reads it.
using api::AllConditionTypes;
using api::AllPhases;
using api::BoundMessage;
using api::Condition;
using api::ConditionStatus;
using api::ConditionType;
using api::ConditionTypeName;
using api::ElasticStatus;
using api::FleetJobStatus;
using api::IsFinished;
using api::JobPhase;
using api::kMaxMessageBytes;
using api::ParseConditionType;
using api::ParsePhase;
using api::PhaseName;
using api::ReplicaStatus;
using api::Time;
using api::WholeSeconds;

inline constexpr const char* kGroup = "fleet.paddlepaddle.org";
inline constexpr const char* kVersion = "v1alpha1";
inline constexpr const char* kKind = "FleetJob";
inline constexpr const char* kPlural = "fleetjobs";

enum class Network { kPodIP, kService, kHostNetwork };
enum class Gloo { kNone, kWorkers, kAll };
enum class RestartPolicy { kNever, kOnFailure, kExitCode };
enum class CleanPodPolicy { kRunning, kAll, kNone };
enum class GangScheduler { kNone, kVolcano, kSchedulerPlugins };
enum class RoleKind { kServer, kWorker, kHeter };
// Who serves the parameter servers: Paddle in the user's server containers (kPaddle), or
// FleetJob's own runtime: the operator gives server pods a `fleet-ps-server` container from the
// sidecar image, and trainers use the fleet_runtime client library (kFleet).
enum class Runtime { kPaddle, kFleet };

// The server container the operator provides with runtime fleet. A server template may name a
// container so to set its resources, args (--model_dir) or mounts; the operator fills in the rest.
inline constexpr const char* kPsServerContainer = "fleet-ps-server";

// One group of identical pods: the servers, the workers, or one heter stage.
struct RoleSpec {
  RoleKind kind = RoleKind::kWorker;
  int stage = 1;                     // heter stages are 2..S, in spec order
  std::string name;                  // "server", "worker", or the heter stage's name
  int replicas = 0;
  RestartPolicy restart_policy = RestartPolicy::kNever;
  DeviceKind device = DeviceKind::kCpu;   // heter stages
  Json template_;                    // a core/v1 PodTemplateSpec (may be empty: runtime fleet servers)
  Launcher launcher = Launcher::kScript;   // how its pods start Paddle: spec.launcher or detected
  bool launcher_detected = false;          // read from the template's command line
};

struct RunPolicy {
  int backoff_limit = 3;
  std::optional<int64_t> active_deadline_seconds;
  std::optional<int64_t> ttl_seconds_after_finished;
  CleanPodPolicy clean_pod_policy = CleanPodPolicy::kRunning;
  bool suspend = false;
  int64_t pending_timeout_seconds = 600;   // a pod Pending this long gets a condition
};

struct Scheduling {
  GangScheduler gang = GangScheduler::kNone;
  std::string queue;
  std::string priority_class_name;
};

// The sidecar image of this release: the operator's --sidecar-image default.
inline constexpr const char* kDefaultSidecarImage = "fleetjob/sidecar:0.1.0";

struct SidecarSpec {
  std::string image;                 // "" = the operator's --sidecar-image
  Json resources;                    // core/v1 ResourceRequirements; defaults when empty
  int metrics_port = 9102;
  std::vector<std::string> log_files;  // trainer logs to follow (in a volume both containers mount)
  std::vector<std::string> patterns;   // extra step-log regexes with named groups
  int64_t stall_window_seconds = 600;  // trainers: no step for this long is a stall (0 = off)
};

// spec.elastic: a collective job whose workers may vary between min and max. Pods run fleetrun
// (or Paddle's launcher) with PADDLE_ELASTIC_* and rendezvous in an existing etcd; a lost worker
// pod is replaced alone and a change of worker replicas within the range makes no new run.
struct ElasticSpec {
  int min_replicas = 1;
  int max_replicas = 1;
  std::string etcd_endpoint;         // host:port of etcd's client port (PADDLE_ELASTIC_SERVER)
  int64_t timeout_seconds = 600;     // below min_replicas this long fails the job (PADDLE_ELASTIC_TIMEOUT)
};

struct FleetJobSpec {
  JobMode mode = JobMode::kCollective;
  Runtime runtime = Runtime::kPaddle;
  Network network = Network::kPodIP;
  Gloo gloo = Gloo::kNone;
  // Collective: the training processes a pod runs (given, or one per GPU when a launcher in the
  // pod starts them).
  int processes_per_pod = 1;
  int port = 6170;                   // every pod's first port, in its endpoint (PodIP/Service)
  int64_t total_steps = 0;           // the training's steps, for progress and ETA (0: unknown)
  std::vector<RoleSpec> roles;       // server (if any), worker, heter stages
  RunPolicy run_policy;
  Scheduling scheduling;
  SidecarSpec sidecar;
  std::optional<ElasticSpec> elastic;
  std::optional<Launcher> launcher;              // spec.launcher; nullopt: Auto (each role's command)
  std::optional<PaddleVersion> paddle_version;   // spec.paddleVersion, else read from Paddle's image

  const RoleSpec* Find(RoleKind kind) const;
  int TotalPods() const;
};

struct FleetJob {
  std::string name;
  std::string ns;
  std::string uid;
  int64_t generation = 0;
  FleetJobSpec spec;
};

// Reads a FleetJob object. Errors read like "spec.heter[0].device: must be cpu, gpu or xpu".
Result<FleetJob> ParseFleetJob(const Json& object);
// spec.runPolicy alone (defaults when absent): how a job ends even when the rest of its spec is
// invalid (cleanPodPolicy, ttlSecondsAfterFinished).
Result<RunPolicy> ParseRunPolicy(const Json& spec);

// A FleetJob object as one reconcile reads it, once: who it is, always; its spec when the
// operator can run it, else why not and as much of spec.runPolicy as could be read (how it ends).
struct FleetJobObject {
  std::string ns = "default";
  std::string name;
  bool deleting = false;             // metadata.deletionTimestamp is set
  std::optional<FleetJob> job;       // nullopt: the spec is invalid, for the reason in `invalid`
  std::string invalid;
  RunPolicy run_policy;
};
FleetJobObject ReadFleetJob(const Json& object);

std::string_view RoleKindName(RoleKind kind);   // "server", "worker", "heter"
std::string_view NetworkName(Network network);  // as spec.network spells it: "PodIP", ...
std::string_view RuntimeName(Runtime runtime);  // "paddle", "fleet"

// "server=2,worker=4,gpu=2": the replicas of every role, in spec order.
std::string ReplicaSignature(const FleetJobSpec& spec);
// What a run's pods are wired for: a change starts a new run. ReplicaSignature, or for an elastic
// job its range and etcd ("worker=2:4,etcd=etcd:2379"): its pods read no peer lists, so replicas
// may change within the run, but every node of a run must agree on np and etcd.
std::string RunSignature(const FleetJobSpec& spec);

}  // namespace fleet::op
