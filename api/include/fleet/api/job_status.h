// FleetJobStatus: the controller's memory of a job, kept in the FleetJob's .status (the operator
// keeps nothing in memory between reconciles). Typed, so that a misspelt field does not compile
// where a misspelt JSON key silently read a default (`run` 0: a new run of every pod). The
// status keys, phase names and condition types are spelt once, in job_status.cc.
//
// FromJson never throws: a field of the wrong type reads as unset. What this operator does not
// know survives a FromJson/ToJson round trip: keys it does not know (or cannot read), and
// conditions of types it does not know — written by a newer operator, they are kept for it across
// a rollback. Unknown keys inside a known condition are dropped: this operator owns its conditions
// and writes each one whole.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fleet/api/progress.h"
#include "fleet/base/time.h"

namespace fleet::api {

using Json = nlohmann::json;
using Time = std::chrono::system_clock::time_point;

// Status times have whole seconds, as metav1.Time: the setters below truncate to them.
Time WholeSeconds(Time t);

// status.phase. kNone: the job was never planned (no phase written yet).
enum class JobPhase { kNone, kPending, kStarting, kRunning, kRestarting, kSucceeded, kFailed, kSuspended };
const std::vector<JobPhase>& AllPhases();                      // in the order above
const std::string& PhaseName(JobPhase phase);                   // "" for kNone
std::optional<JobPhase> ParsePhase(const std::string& name);
bool IsFinished(JobPhase phase);                                // Succeeded or Failed

// The job's conditions (status.conditions[].type).
enum class ConditionType {
  kRunning,              // every pod runs with its endpoint lists
  kRestarting,           // a failure restarted the job (or a pod of it)
  kSucceeded,
  kFailed,
  kSuspended,            // spec.runPolicy.suspend
  kGangPending,          // the gang scheduler has not admitted the PodGroup
  kWaitingForHostPorts,  // HostNetwork: no block of host ports is free
  kStalled,              // sidecars report no training progress
  kUnschedulable,        // a pod is Pending past pendingTimeoutSeconds
  kEnvFromFiles,         // lists too long for the env travel as files, for the env loader
  kAdmitted,             // Kueue admitted the job's Workload (a job labelled kueue.x-k8s.io/queue-name)
};
const std::vector<ConditionType>& AllConditionTypes();
const std::string& ConditionTypeName(ConditionType type);
std::optional<ConditionType> ParseConditionType(const std::string& name);

enum class ConditionStatus { kTrue, kFalse, kUnknown };

// The most a status message or condition message keeps: they quote what comes from outside (a
// sidecar's Stalled message, a spec's pattern), which must not grow the FleetJob without bound.
inline constexpr size_t kMaxMessageBytes = 2048;
// `text` cut to kMaxMessageBytes at a UTF-8 boundary.
std::string BoundMessage(std::string_view text);

struct Condition {
  ConditionType type = ConditionType::kRunning;
  ConditionStatus status = ConditionStatus::kUnknown;
  std::string reason;
  std::string message;
  Time last_transition_time;
};

// status.replicaStatuses[<role>]: this run's pods of a role.
struct ReplicaStatus {
  int replicas = 0;
  int active = 0;      // neither succeeded nor failed
  int ready = 0;       // running and Ready
  int succeeded = 0;
  int failed = 0;
};

// status.elastic: an elastic job's workers as the operator sees them.
struct ElasticStatus {
  std::vector<std::string> members;          // this run's worker pods that run, in slot order
  int rendezvous = 0;                        // times the workers formed the job: the first, then every change
  std::optional<Time> below_minimum_since;   // fewer than minReplicas members since then
};

// status.queue: a job queued in Kueue (labelled kueue.x-k8s.io/queue-name), as its Workload says.
struct QueueStatus {
  // What ended the job's last admission: the Workload's Evicted condition, when the operator saw it.
  struct Eviction {
    std::string reason;                      // Preempted, PodsReadyTimeout, Deactivated, ...
    std::string message;
    Time time;
  };
  std::string workload;                      // the Workload's name
  std::string local_queue;
  std::string cluster_queue;                 // of the current admission ("" while queued)
  std::string state;                         // Queued | Admitted | Evicted | Finished
  std::string message;                       // Kueue's, bounded (BoundMessage)
  // The current admission: per role, the ResourceFlavor of each resource; and its pod counts.
  std::map<std::string, std::map<std::string, std::string>> flavors;
  std::map<std::string, int> admitted_counts;
  int evictions = 0;
  std::optional<Eviction> last_eviction;

  // status.queue; nullopt when it is not an object (members of the wrong type read as unset).
  static std::optional<QueueStatus> FromJson(const Json& queue);
  Json ToJson() const;
};

// status.checkpoint: the newest checkpoint a trainer saved before its pod stopped
// (spec.checkpoint.beforeStop), as its pod's Checkpoint condition reported it. The pods of the
// runs after it are told its step (FLEET_CHECKPOINT_STEP).
struct CheckpointStatus {
  int64_t step = 0;
  std::string pod;
  Time time;                                 // the condition's lastTransitionTime

  // status.checkpoint; nullopt when it is not an object with a step.
  static std::optional<CheckpointStatus> FromJson(const Json& checkpoint);
  Json ToJson() const;
};

// status.inPlaceRestart: while a run restarted in place holds its trainers at the gate (the
// endpoints ConfigMap's barrier) and then until its pods are relabelled into it: which run, since
// when, and whether its gates are open; gone once done, or when the restart fell back to
// recreating the pods.
struct InPlaceRestartStatus {
  int run = 0;
  Time start_time;
  bool gates_open = false;

  // nullopt when it is not an object with a run.
  static std::optional<InPlaceRestartStatus> FromJson(const Json& in_place);
  Json ToJson() const;
};

struct FleetJobStatus {
  JobPhase phase = JobPhase::kNone;
  std::string message;                          // written with the phase
  std::vector<Condition> conditions;
  std::optional<int64_t> observed_generation;   // the spec generation last planned
  // What the job was started as ("" until then): these cannot change under a running job.
  std::string mode;                             // JobModeName
  std::string network;                          // PodIP | Service | HostNetwork
  std::string runtime;                          // paddle | fleet
  std::string launcher;                         // how pods start Paddle, per role: "worker=PaddleLaunch"
  // The pods' generation: a new run after a whole-job restart, a resume or a change of replicas.
  int run = 0;
  int restart_count = 0;                        // failure restarts, counted against backoffLimit
  int ignored_failures = 0;                     // failures a failure rule's Ignore restarted uncounted
  int in_place_restarts = 0;                    // restarts done in place (of restart_count and ignored_failures)
  std::optional<InPlaceRestartStatus> in_place_restart;
  std::optional<int> host_port_base;            // HostNetwork: the job's block of host ports
  std::optional<Time> start_time;               // activeDeadlineSeconds counts from here
  std::optional<Time> completion_time;
  std::map<std::string, ReplicaStatus> replica_statuses;   // by role name
  std::optional<int> heter_ready;               // ready pods of all heter stages (a printer column)
  std::string run_replicas;                     // ReplicaSignature the current run was wired for
  // Service mode: uids of failed pods whose restart was counted, until they are gone.
  std::set<std::string> replaced_pods;
  // Training progress as the sidecars report it (progress.h), with its updateTime.
  std::optional<Progress> progress;
  std::optional<ElasticStatus> elastic;         // spec.elastic jobs
  std::optional<QueueStatus> queue;             // jobs queued in Kueue
  std::optional<CheckpointStatus> checkpoint;   // spec.checkpoint.beforeStop jobs

  // Kept for round trips (see the top of this file).
  Json unknown_fields = Json::object();
  std::vector<Json> unknown_conditions;

  const Condition* Find(ConditionType type) const;
  bool IsTrue(ConditionType type) const;
  // Sets a condition as Kubernetes' meta.SetStatusCondition does: lastTransitionTime becomes `now`
  // only when the condition is new or its status changes; reason and message are always replaced.
  void SetCondition(ConditionType type, ConditionStatus status, const std::string& reason,
                    const std::string& text, Time now);
  // Marks the job Failed for `reason` (Failed and Running conditions, phase, message, and the
  // completion time unless it has one): for failures found while carrying a plan out.
  void MarkFailed(const std::string& reason, const std::string& text, Time now);

  static FleetJobStatus FromJson(const Json& status);
  Json ToJson() const;
};

// Two statuses are equal when they would write the same .status (so no field can be forgotten).
bool operator==(const FleetJobStatus& a, const FleetJobStatus& b);
inline bool operator!=(const FleetJobStatus& a, const FleetJobStatus& b) { return !(a == b); }

}  // namespace fleet::api
