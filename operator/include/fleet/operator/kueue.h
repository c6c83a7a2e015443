// Kueue admission (docs/design/kueue.md): a FleetJob labelled kueue.x-k8s.io/queue-name plays
// Kueue's jobframework role itself. The operator creates one kueue.x-k8s.io/v1beta2 Workload per
// job (a pod set per role), makes nothing else until Kueue admits it, builds the pods with the
// admitted flavors' node labels and tolerations, stops the job and releases the quota when Kueue
// evicts it, and finishes the Workload with the job.
//
// Here: the Workload as built and as read, and the pure edits of it. The planner decides when
// (planner.cc, QueueAdmission); the controller reads what this needs from the cluster
// (KueueObserved) and carries the edits out.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "fleet/operator/api.h"
#include "fleet/operator/settings.h"

namespace fleet::op {

class JobWiring;

namespace kueue {

inline constexpr const char* kGroup = "kueue.x-k8s.io";
inline constexpr const char* kVersion = "v1beta2";
inline constexpr const char* kApiVersion = "kueue.x-k8s.io/v1beta2";
// On the FleetJob: the LocalQueue (in its namespace) that admits it, and its WorkloadPriorityClass.
inline constexpr const char* kQueueLabel = "kueue.x-k8s.io/queue-name";
inline constexpr const char* kPriorityClassLabel = "kueue.x-k8s.io/priority-class";
// On the FleetJob, copied to its Workload as Kueue's jobframework copies them: the most seconds
// the job may run admitted (spec.maximumExecutionTimeSeconds: Kueue then evicts and deactivates
// it), and the parameters of a ProvisioningRequest admission check (annotations by prefix).
inline constexpr const char* kMaxExecTimeLabel = "kueue.x-k8s.io/max-exec-time-seconds";
inline constexpr const char* kProvReqAnnotationPrefix = "provreq.kueue.x-k8s.io/";
// On the Workload: its job's uid (Kueue's preemption messages name the preemptor by it), the
// finalizer that keeps it while its quota is in use, and the hash of its pod sets as built.
inline constexpr const char* kJobUidLabel = "kueue.x-k8s.io/job-uid";
inline constexpr const char* kResourceInUseFinalizer = "kueue.x-k8s.io/resource-in-use";
inline constexpr const char* kPodSetsHashAnnotation = "fleet.paddlepaddle.org/podsets-hash";
// Set while spec.runPolicy.suspend keeps the Workload inactive: the operator reactivates only the
// Workloads it deactivated (Kueue deactivates some itself, e.g. past its requeuing limit).
inline constexpr const char* kSuspendedAnnotation = "fleet.paddlepaddle.org/suspended";
// On admitted pods: their pod set, and their Workload.
inline constexpr const char* kPodSetLabel = "kueue.x-k8s.io/podset";
inline constexpr const char* kWorkloadAnnotation = "kueue.x-k8s.io/workload";
inline constexpr const char* kLocalQueueLabel = "kueue.x-k8s.io/local-queue-name";
inline constexpr const char* kClusterQueueLabel = "kueue.x-k8s.io/cluster-queue-name";
// Topology-aware scheduling (design 4): a role's pod template asks with these annotations, its pod
// set's topologyRequest carries them with the rank label, and pods of a pod set whose admission has
// a topologyAssignment are made with the gate that Kueue's ungater lifts onto their rank's domain.
inline constexpr const char* kRequiredTopologyAnnotation = "kueue.x-k8s.io/podset-required-topology";
inline constexpr const char* kPreferredTopologyAnnotation = "kueue.x-k8s.io/podset-preferred-topology";
inline constexpr const char* kUnconstrainedTopologyAnnotation = "kueue.x-k8s.io/podset-unconstrained-topology";
inline constexpr const char* kSliceRequiredTopologyAnnotation = "kueue.x-k8s.io/podset-slice-required-topology";
inline constexpr const char* kSliceSizeAnnotation = "kueue.x-k8s.io/podset-slice-size";
inline constexpr const char* kPodSetGroupNameAnnotation = "kueue.x-k8s.io/podset-group-name";
inline constexpr const char* kTopologyGate = "kueue.x-k8s.io/topology";

// MultiKueue (docs/design/kueue.md 3). On the manager cluster a job names MultiKueue in
// spec.managedBy; MultiKueue copies it to a worker cluster with the name of the Workload it made
// there for the copy, in this label (or, when the name is long, an annotation of the same key).
inline constexpr const char* kMultiKueueController = "kueue.x-k8s.io/multikueue";
inline constexpr const char* kPrebuiltWorkloadLabel = "kueue.x-k8s.io/prebuilt-workload-name";
// The reason of the Finished condition of a prebuilt Workload that does not match its job.
inline constexpr const char* kOutOfSync = "OutOfSync";

// The LocalQueue the job's label names; "" when it is not queued in Kueue.
std::string QueueName(const FleetJob& job);
// The job's kMaxExecTimeLabel: nullopt without it; an error naming the label unless it is a whole
// number of seconds in 1..2^31-1 (Kueue's webhook refuses such a job).
Result<std::optional<int32_t>> MaxExecutionTimeSeconds(const FleetJob& job);
// A queued job that MultiKueue dispatches to a worker cluster (spec.managedBy): here, on the
// manager, the operator makes its Workload and nothing else.
bool DispatchedByMultiKueue(const FleetJob& job);
// The Workload MultiKueue made for this copy of a job (on a worker), or "": the operator makes one.
std::string PrebuiltWorkloadName(const FleetJob& job);
// The job's Workload: the prebuilt one, else WorkloadName(job.name, job.uid).
std::string JobWorkloadName(const FleetJob& job);

// Kueue's name for a job's Workload (jobframework GetWorkloadNameForOwnerWithGVK):
// fleetjob-<job>-<the first 5 hex digits of sha1("FleetJob\nfleet.paddlepaddle.org\n<job>\n<uid>")>.
std::string WorkloadName(const std::string& job, const std::string& uid);

// The priority class a job's Workload refers to (Kueue's ExtractPriority): the label
// kueue.x-k8s.io/priority-class (a WorkloadPriorityClass), else spec.scheduling.priorityClassName,
// else the first role template's priorityClassName (a scheduling.k8s.io PriorityClass).
struct PriorityClassRef {
  std::string group;   // kueue.x-k8s.io | scheduling.k8s.io
  std::string kind;    // WorkloadPriorityClass | PriorityClass
  std::string name;
  std::string Key() const { return kind + "/" + name; }
};
std::optional<PriorityClassRef> PriorityClassOf(const FleetJob& job);

// What the controller reads from the cluster for a job's plan.
struct KueueObserved {
  bool served = true;                  // the cluster serves kueue.x-k8s.io/v1beta2 (discovered)
  std::optional<Json> workload;        // the job's Workload (WorkloadName), from the informer
  std::map<std::string, Json> flavors; // the ResourceFlavors the Workload's admission names, by name
  // The value of PriorityClassOf(job); nullopt: it names none, or the class is not found.
  std::optional<int32_t> priority;
  // The FleetJob ("namespace/name") whose uid Kueue's preemption message names as the preemptor.
  std::string preemptor;
};

// ---- building the Workload ----

// The pod sets: one per role in spec order, named by the role, count = replicas (the workers of
// an elastic job whose minimum is lower: minCount), template = the role's pod as BuildPod makes it
// (sidecar included), less what differs per pod (name, index, env) and what is the pod's own.
// A role whose template carries Kueue's topology annotations gets topologyRequest (Kueue's
// jobframework NewPodSetTopologyRequest), its podIndexLabel the pods' rank label kIndexLabel.
Json WorkloadPodSets(const FleetJob& job, const JobWiring& wiring, const OperatorSettings& settings);
// The topologyRequest that a pod template's annotations ask for, or nullopt when they ask none.
std::optional<Json> TopologyRequest(const Json& pod_template);
std::string PodSetsHash(const Json& pod_sets);
// The Workload of `job` queued in QueueName(job), with `pod_sets`; priority: the value of
// PriorityClassOf(job) (nullopt when it names none); inactive while the job is suspended.
Json BuildWorkload(const FleetJob& job, Json pod_sets, std::optional<int32_t> priority, bool suspended);
// `workload` with desired's pod sets (compared by their hash), queue and priority (a Workload that
// holds no quota: its pod sets are immutable while it does); nullopt when nothing changes.
std::optional<Json> UpdatedWorkloadSpec(const Json& workload, const Json& desired);
// Whether the Workload's pod sets are other roles, or other counts, than the job's replicas.
bool PodCountsChanged(const Json& workload, const FleetJob& job);
// A prebuilt Workload made the job's (Kueue's EnsurePrebuiltWorkloadOwnership): the job its
// controller owner, its job-uid and job-name labels, Kueue's finalizer; nullopt when it is already.
std::optional<Json> AdoptedWorkload(const Json& workload, const FleetJob& job);
// `workload` made inactive for a suspended job, or active again for a resumed one that the
// operator deactivated (kSuspendedAnnotation); nullopt when it is as it should be.
std::optional<Json> ActiveForSuspend(const Json& workload, bool suspended);
// Inactive, and not by the operator: Kueue (or kueuectl stop) deactivated it.
bool DeactivatedElsewhere(const Json& workload);

// ---- reading it ----

struct WorkloadState {
  bool quota_reserved = false;
  bool admitted = false;
  bool evicted = false;
  bool finished = false;
  bool deleting = false;              // metadata.deletionTimestamp
  bool has_finalizer = false;         // kResourceInUseFinalizer
  std::string pending;                // QuotaReserved False: Kueue's why ("" when it said nothing)
  std::string evicted_reason;         // Evicted True: why
  std::string evicted_message;
  std::string preempted_message;      // Preempted True: the message naming the preemptor
  std::string finished_message;
  std::string cluster_queue;          // status.admission.clusterQueue
  int64_t generation = 0;
};
WorkloadState ReadWorkloadState(const Json& workload);
// A condition of the Workload (status.conditions[type]), or null.
const Json* WorkloadCondition(const Json& workload, const std::string& type);
// The JobUID in Kueue's preemption message ("... (UID: <wl>, JobUID: <uid>) ..."), or "".
std::string PreemptorJobUid(const std::string& message);
// The flavor names the Workload's admission uses (for the controller to read).
std::vector<std::string> AdmittedFlavors(const Json& workload);
// The count admitted for `pod_set` while the Workload is admitted and not evicted, else nullopt.
std::optional<int> AdmittedCount(const Json& workload, const std::string& pod_set);

// What an admission adds to the pods of one pod set (design 2.4): the flavors' nodeLabels and
// the admission checks' podSetUpdates (nodeSelector), their tolerations, labels and annotations.
struct PodSetAdmission {
  std::string name;
  int count = 0;
  std::map<std::string, std::string> flavors;     // resource -> ResourceFlavor
  std::map<std::string, std::string> node_selector;
  std::map<std::string, std::string> node_selector_source;   // key -> "ResourceFlavor a100", ...
  Json tolerations = Json::array();
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  bool topology_gated = false;   // the assignment has a topologyAssignment: pods carry kTopologyGate
};
struct Admission {
  std::string workload;
  std::string cluster_queue;
  std::map<std::string, PodSetAdmission> pod_sets;   // by name
  std::vector<std::string> missing_flavors;          // named, but not in KueueObserved::flavors
  std::string conflict;                              // two sources want one node label differently
};
Admission ReadAdmission(const Json& workload, const std::map<std::string, Json>& flavors);
// Adds the admission of the pod's pod set to `pod` (with a topologyAssignment: the scheduling gate
// kTopologyGate, and no topology node labels: Kueue's ungater adds its domain's); an error when the pod's own nodeSelector
// wants another value of a node label the admission sets (Kueue: a permanent failure).
Status ApplyAdmission(const Admission& admission, const std::string& pod_set, Json& pod);

// ---- editing it ----

// A metav1.Condition for a Workload (observedGeneration: the Workload's generation).
Json WorkloadConditionJson(const std::string& type, bool status, const std::string& reason, const std::string& message,
                           Time now, int64_t generation);
// A status write, as the plan's action carries it: conditions to set (by type, as
// meta.SetStatusCondition: lastTransitionTime kept when the status does not change), whether
// status.admission goes, and the conditions (type -> "True"/"False") the Workload must still have
// for it to apply: a plan from a cache behind Kueue must not undo what Kueue wrote since.
Json StatusEdit(std::vector<Json> conditions, bool remove_admission, const std::map<std::string, std::string>& required = {});
// `workload` with the edit applied, or as it is when it no longer has the required conditions (the
// controller applies it to the latest Workload it reads).
Json ApplyStatusEdit(Json workload, const Json& edit);
// The quota release after an eviction, once no pod runs (design 2.5 step 2): Requeued,
// QuotaReserved False/PendingEvaluation, Admitted False/NoReservation, status.admission removed;
// only while the Workload is still evicted with its quota.
Json QuotaReleaseEdit(const WorkloadState& state, Time now);
// `workload` without kResourceInUseFinalizer.
Json WithoutFinalizer(Json workload);

}  // namespace kueue
}  // namespace fleet::op
