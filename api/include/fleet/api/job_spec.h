// A FleetJob's spec (fleet.paddlepaddle.org/v1alpha1) as C++ values, read with the checks the CRD's
// OpenAPI schema and CEL rules cannot express. crds/fleetjob.yaml is the schema users see; this is
// what the operator decides with, and what fleetctl writes. Reading never throws: a malformed
// object is an error naming the field and what to do, which the operator turns into phase Failed.
//
// Reading resolves what the spec leaves to the pods: each role's launcher (spec.launcher, or read
// from the role's command line: launcher.h), the Paddle release (spec.paddleVersion, or read from
// Paddle's image), processesPerPod (one per GPU when a launcher starts the processes) and the mode
// (from the roles present). ToJson writes the spec so read, every field explicit: what it writes
// reads back as the same spec, and a spec written in full reads and writes back as it was.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "fleet/api/launcher.h"
#include "fleet/base/result.h"
#include "fleet/runtime/topology.h"

namespace re2 {
class RE2;
}  // namespace re2

namespace fleet::api {

using Json = nlohmann::json;

enum class Network { kPodIP, kService, kHostNetwork };
enum class Gloo { kNone, kWorkers, kAll };
enum class RestartPolicy { kNever, kOnFailure, kExitCode };
enum class CleanPodPolicy { kRunning, kAll, kNone };
// kKubernetes: Kubernetes' own gang scheduling (the scheduling.k8s.io Workload API, 1.35+).
enum class GangScheduler { kNone, kVolcano, kSchedulerPlugins, kKubernetes };
enum class RoleKind { kServer, kWorker, kHeter };
// Who serves the parameter servers: Paddle in the user's server containers (kPaddle), or
// FleetJob's own runtime: the operator gives server pods a `fleet-ps-server` container from the
// sidecar image, and trainers use the fleet_runtime client library (kFleet).
enum class Runtime { kPaddle, kFleet };
// What a failure rule (or spec.sidecar.stallAction) does with the failure that caused a job's
// failures: fail the job, restart it as its kind of restart does (counted against backoffLimit),
// replace only the failed pods in the same run (counted), or restart as RestartJob uncounted.
enum class FailureAction { kFailJob, kRestartJob, kRestartPod, kIgnore };
// spec.sidecar.stallAction: what a rank the sidecar reports stalled does besides the job's
// Stalled condition (kNone: nothing more).
enum class StallAction { kNone, kRestartJob, kFailJob };
// spec.runPolicy.restartStrategy: how a whole-job restart restarts the trainers. kRecreate: every
// pod is deleted and made again (new pods, new addresses, lists wired afresh). kInPlace: where
// every pod still runs at its address, the kubelet restarts the trainer containers inside them,
// held at the sidecar's gate until all are back (docs/design/fast-failures.md §5); else as kRecreate.
enum class RestartStrategy { kRecreate, kInPlace };

// How the spec spells each of its enums (and the runtime's JobMode and DeviceKind, and Launcher),
// as the CRD lists them: the one table that reading, writing, fleetctl and the tests use.
template <typename E>
using NameTable = std::vector<std::pair<std::string_view, E>>;
template <typename E>
const NameTable<E>& Names();
template <> const NameTable<JobMode>& Names<JobMode>();
template <> const NameTable<Runtime>& Names<Runtime>();
template <> const NameTable<Launcher>& Names<Launcher>();   // without "Auto": spec.launcher unset
template <> const NameTable<Network>& Names<Network>();
template <> const NameTable<Gloo>& Names<Gloo>();
template <> const NameTable<RoleKind>& Names<RoleKind>();
template <> const NameTable<RestartPolicy>& Names<RestartPolicy>();
template <> const NameTable<DeviceKind>& Names<DeviceKind>();
template <> const NameTable<CleanPodPolicy>& Names<CleanPodPolicy>();
template <> const NameTable<GangScheduler>& Names<GangScheduler>();
template <> const NameTable<FailureAction>& Names<FailureAction>();
template <> const NameTable<StallAction>& Names<StallAction>();
template <> const NameTable<RestartStrategy>& Names<RestartStrategy>();
// The name of `value` in Names<E>().
template <typename E>
std::string_view NameOf(E value) {
  for (const auto& [name, v] : Names<E>()) {
    if (v == value) return name;
  }
  return Names<E>().front().first;   // unreachable: every table names every value
}
// The names of Names<E>() but those of `except`, as help texts list them: "A, B or C".
template <typename E>
std::string NameList(std::initializer_list<E> except = {}) {
  std::vector<std::string_view> names;
  for (const auto& [name, value] : Names<E>()) {
    if (std::find(except.begin(), except.end(), value) == except.end()) names.push_back(name);
  }
  std::string list;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i > 0) list += i + 1 == names.size() ? " or " : ", ";
    list += names[i];
  }
  return list;
}

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

// The reason a failure has when a pod's sidecar reports its rank stalled (it is still running).
inline constexpr const char* kStalledReason = "Stalled";

// spec.runPolicy.failureRules[i]: which failures it matches (its criteria, ANDed) and what then.
struct FailureRule {
  int index = 0;                      // its place in the list
  std::string name;                   // optional
  FailureAction action = FailureAction::kFailJob;
  std::vector<std::string> roles;     // empty: every role
  // onExitCodes: the failing main container's exit code In (or NotIn) the values. A container that
  // exited 0 did not fail: In may not list 0, and NotIn never matches it (as Kubernetes Jobs'
  // podFailurePolicy); a pod without an exit code (evicted before it ran) matches neither.
  std::optional<bool> exit_codes_in;  // nullopt: no onExitCodes
  std::vector<int> exit_codes;
  // onReasons: the container's state.terminated.reason, the pod's status.reason, its
  // DisruptionTarget condition's reason, or kStalledReason.
  std::vector<std::string> reasons;
  std::string log_pattern;            // onLogPattern ("": none)
  std::shared_ptr<const re2::RE2> log_regex;   // compiled once, when the spec is read

  // How messages name it: `rule "bad-dataset" (spec.runPolicy.failureRules[0])`.
  std::string Describe() const;
  // The first line of `log` (a terminated container's message) that onLogPattern matches; nullopt
  // when none does or the rule has no pattern.
  std::optional<std::string> MatchingLine(std::string_view log) const;
};

struct RunPolicy {
  int backoff_limit = 3;
  std::optional<int64_t> active_deadline_seconds;
  std::optional<int64_t> ttl_seconds_after_finished;
  CleanPodPolicy clean_pod_policy = CleanPodPolicy::kRunning;
  bool suspend = false;
  int64_t pending_timeout_seconds = 600;   // a pod Pending this long gets a condition
  std::vector<FailureRule> failure_rules;  // in order: the first that matches a failure decides
  RestartStrategy restart_strategy = RestartStrategy::kRecreate;
};

// spec.scheduling.networkTopology: Volcano's network-topology-aware scheduling (Volcano 1.11+),
// passed to the PodGroup's spec.networkTopology: the job's pods stay within HyperNodes of tier
// highestTierAllowed or lower; hard: or wait, soft: as far as the scheduler can.
struct NetworkTopology {
  std::string mode = "hard";                  // hard | soft
  std::optional<int> highest_tier_allowed;    // unset: Volcano's default
};

struct Scheduling {
  GangScheduler gang = GangScheduler::kNone;
  std::string queue;
  std::string priority_class_name;
  std::optional<NetworkTopology> network_topology;
};

struct SidecarSpec {
  std::string image;                 // "" = the operator's --sidecar-image
  Json resources;                    // core/v1 ResourceRequirements; defaults when empty
  int metrics_port = 9102;
  std::vector<std::string> log_files;  // trainer logs to follow (in a volume both containers mount)
  std::vector<std::string> patterns;   // extra step-log regexes with named groups (log_pattern.h)
  int64_t stall_window_seconds = 600;  // trainers: no step for this long is a stall (0 = off)
  StallAction stall_action = StallAction::kNone;   // a stall's default action (failure rules may override)
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

// spec.checkpoint: before a pod stops (its deletion: suspend, preemption, eviction, scale-in, a
// node drain), the trainer's preStop hook asks the sidecar, which asks the trainer to checkpoint
// and waits for it up to timeoutSeconds (docs/operator.md, "Checkpoint before stop").
struct CheckpointSpec {
  bool before_stop = false;
  int64_t timeout_seconds = 30;
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
  CheckpointSpec checkpoint;
  std::optional<Launcher> launcher;              // spec.launcher; nullopt: Auto (each role's command)
  std::optional<PaddleVersion> paddle_version;   // spec.paddleVersion, else read from Paddle's image
  std::string managed_by;                        // spec.managedBy; "": this operator (kFleetJobController)

  const RoleSpec* Find(RoleKind kind) const;
  int TotalPods() const;

  // Reads and checks a FleetJob's .spec. Errors read like "spec.heter[0].device: must be one of
  // cpu, gpu, xpu, got \"tpu\"".
  static Result<FleetJobSpec> FromJson(const Json& spec);
  // The .spec it was read from, every field explicit (see the top of this file).
  Json ToJson() const;
};

struct FleetJob {
  std::string name;
  std::string ns;
  std::string uid;
  int64_t generation = 0;
  // metadata.labels (string values): a job labelled kueue.x-k8s.io/queue-name is queued in Kueue.
  std::map<std::string, std::string> labels;
  // metadata.annotations (string values): MultiKueue may name a job's prebuilt Workload in one.
  std::map<std::string, std::string> annotations;
  FleetJobSpec spec;
};

// Reads a FleetJob object: its metadata (the name must fit the names of its pods) and its spec.
Result<FleetJob> ParseFleetJob(const Json& object);
// spec.runPolicy alone (`spec` is the whole spec; defaults when absent): how a job ends even when
// the rest of its spec is invalid (cleanPodPolicy, ttlSecondsAfterFinished).
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

// The controller a FleetJob object names in spec.managedBy, if it is not this operator: read before
// (and whatever) the rest of the spec, since a job managed elsewhere is not this operator's to
// check. nullopt: this operator's (unset, or kFleetJobController).
std::optional<std::string> ManagedElsewhere(const Json& object);

std::string_view RoleKindName(RoleKind kind);   // "server", "worker", "heter"
std::string_view NetworkName(Network network);  // as spec.network spells it: "PodIP", ...
std::string_view RuntimeName(Runtime runtime);  // "paddle", "fleet"

}  // namespace fleet::api
