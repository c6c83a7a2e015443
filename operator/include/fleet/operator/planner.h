// PlanReconcile: the operator's decisions as a pure function
//   (FleetJob, its status, observed children, now, settings) -> actions + status + events + requeue.
// No I/O, no clock, no logging: the controller around it reads the cache, calls this, and carries
// the actions out. Level-based: the same inputs always give the same plan, and carrying out a plan
// twice is harmless (creates of deterministic names answer AlreadyExists; deletes NotFound).
#pragma once

#include <chrono>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fleet/api/in_place.h"
#include "fleet/operator/api.h"
#include "fleet/operator/kueue.h"
#include "fleet/operator/names.h"
#include "fleet/operator/progress.h"
#include "fleet/operator/settings.h"

namespace fleet::op {

class JobWiring;

// kPodGroup: the gang's PodGroup (Volcano's, scheduler-plugins' or, with gang Kubernetes,
// scheduling.k8s.io's); kGangWorkload: gang Kubernetes' scheduling.k8s.io Workload;
// kKueueWorkload: Kueue's kueue.x-k8s.io Workload (the unit Kueue admits).
enum class ObjectKind { kPod, kConfigMap, kService, kPodGroup, kServiceAccount, kRole, kRoleBinding, kFleetJob,
                        kGangWorkload, kKueueWorkload };
// kUpdateStatus: a Kueue Workload's status, as a kueue::StatusEdit the controller applies to the
// latest Workload it reads (retrying on conflict). kPatch: a JSON merge patch (`object`), e.g. a
// pod's run label in an in-place restart (the pod cache holds no spec to update the pod with).
enum class Verb { kCreate, kUpdate, kDelete, kUpdateStatus, kPatch };

// What a plan's pod creates are rendered from (BuildPod), shared by them all: the job, its wiring
// and the run. A plan names the pods it creates by slot instead of carrying them (a 10,000-pod
// job's pods would be hundreds of MiB of JSON, all built before the first create): whoever
// carries the plan out renders each pod just before sending it.
struct PodRecipe {
  std::shared_ptr<const FleetJob> job;
  std::shared_ptr<const JobWiring> wiring;   // built for *job
  int run = 0;
  OperatorSettings settings;
  // A job queued in Kueue: its admission, added to every pod (kueue::ApplyAdmission); else null.
  std::shared_ptr<const kueue::Admission> admission;
  // The job's last checkpoint before stop (status.checkpoint): its step, for FLEET_CHECKPOINT_STEP.
  std::optional<int64_t> resume_step;
};

struct Action {
  Action() = default;
  Action(Verb verb_, ObjectKind kind_, std::string name_, Json object_, std::string reason_,
         std::shared_ptr<const PodRecipe> recipe_ = nullptr, int ordinal_ = 0)
      : verb(verb_), kind(kind_), name(std::move(name_)), object(std::move(object_)), reason(std::move(reason_)),
        recipe(std::move(recipe_)), ordinal(ordinal_) {}

  Verb verb = Verb::kCreate;
  ObjectKind kind = ObjectKind::kPod;
  std::string name;
  Json object;          // for create/update, except a pod create's (see Object())
  std::string reason;   // why (for logs and tests)
  // A pod create: the recipe and the pod's slot ordinal; `object` stays null.
  std::shared_ptr<const PodRecipe> recipe;
  int ordinal = 0;

  // The object to create or update: `object`, or the pod rendered from its recipe.
  Json Object() const;
};

struct PlannedEvent {
  std::string type;     // Normal | Warning
  std::string reason;
  std::string message;
};

// Pod phases (core/v1 status.phase; absent reads as Pending), not the job's (JobPhase).
enum class PodPhase { kPending, kRunning, kSucceeded, kFailed, kOther };

// A pod as the planner reads it: exactly the fields its decisions depend on, read once when the
// pod is observed (the controller keeps one per pod of every job, built by its pod informer's
// handler), so that a plan over 10,000 pods does no JSON lookups and a cached pod costs ~200
// bytes instead of its JSON.
struct ObservedPod {
  static constexpr size_t kMaxTerminationMessage = 4096;
  std::string name;
  std::string uid;
  std::string run;                        // the run label ("" when absent)
  std::optional<Time> created;            // metadata.creationTimestamp
  bool terminating = false;               // metadata.deletionTimestamp is set
  PodPhase phase = PodPhase::kPending;
  bool evicted = false;                   // status.reason Evicted
  std::string pod_ip;
  std::string host_ip;
  bool ready = false;                     // its first Ready condition is True
  // The exit code of its failing main container (the training process: the first terminated with
  // a non-zero code, else the first terminated), and when it ended (its finishedAt, by the node's
  // clock).
  std::optional<int> exit_code;
  std::optional<Time> finished;
  // What failure rules read (spec.runPolicy.failureRules): that container's state.terminated
  // reason (OOMKilled, Error, ...) and message (its log's tail under FallbackToLogsOnError: the last
  // kMaxTerminationMessage bytes), the pod's status.reason (Evicted, DeadlineExceeded, ...) and its
  // DisruptionTarget condition's reason (PreemptionByScheduler, ...). Empty when absent.
  std::string termination_reason;
  std::string termination_message;
  std::string pod_reason;
  std::string disruption_reason;
  // Why the scheduler cannot place it: "<reason>: <message>" of its PodScheduled False condition.
  std::optional<std::string> unschedulable;
  // Held back from the scheduler by a scheduling gate (PodScheduled False, SchedulingGated), e.g.
  // Kueue's topology gate until its ungater places the pod: not the scheduler's failure to place it.
  bool gated = false;
  // Its sidecar reports no training progress: the message of its Stalled progress condition.
  std::optional<std::string> stalled;
  // The step its trainer saved before the pod stopped, and when: its Checkpoint condition (True,
  // reason Saved) and that condition's lastTransitionTime.
  struct Checkpoint {
    int64_t step = 0;
    Time time;
  };
  std::optional<Checkpoint> checkpoint;
  // InPlace jobs: its sidecar's report of the trainer (the Trainer condition; api/in_place.h).
  // exit_code, finished and the termination fields above then come from the failing container's
  // latest end: its state.terminated, else its lastState.terminated (the kubelet restarted it).
  std::optional<api::TrainerReport> trainer;
  std::optional<Time> trainer_since;      // the Trainer condition's lastTransitionTime (the sidecar's clock)
  std::optional<Time> running_since;      // that failing container's state.running.startedAt, when it runs again

  // Whether the kubelet reports the end its sidecar says the trainer's instance came to: an end is
  // shown (exit_code), and it is not an earlier instance's.
  bool ReportsTrainerEnd() const;

  static ObservedPod Read(const Json& pod);
  // `pod` cut down to what Read and the controller's pod informer read (its key, indexes and job
  // label; the fields above): the pod informer's transform, so that its cache holds no spec.
  // Read(Trim(pod)) is Read(pod).
  static Json Trim(const Json& pod);
};

// A job's pods as observed: shared, immutable snapshots, so that a plan reads a 10,000-pod job
// without copying it. Iterates as `const ObservedPod&`.
class PodList {
 public:
  using Item = std::shared_ptr<const ObservedPod>;
  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = ObservedPod;
    using difference_type = std::ptrdiff_t;
    using pointer = const ObservedPod*;
    using reference = const ObservedPod&;
    explicit const_iterator(std::vector<Item>::const_iterator it) : it_(it) {}
    const ObservedPod& operator*() const { return **it_; }
    const ObservedPod* operator->() const { return it_->get(); }
    const_iterator& operator++() { ++it_; return *this; }
    bool operator==(const const_iterator& o) const { return it_ == o.it_; }
    bool operator!=(const const_iterator& o) const { return it_ != o.it_; }
   private:
    std::vector<Item>::const_iterator it_;
  };

  PodList() = default;
  // Whole pods (tests): each read as the controller reads it (ObservedPod::Read).
  PodList(std::initializer_list<Json> pods) {
    for (const Json& pod : pods) push_back(pod);
  }
  void push_back(const Json& pod) { items_.push_back(std::make_shared<const ObservedPod>(ObservedPod::Read(pod))); }
  void push_back(Item pod) { items_.push_back(std::move(pod)); }
  void reserve(size_t n) { items_.reserve(n); }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  const_iterator begin() const { return const_iterator(items_.begin()); }
  const_iterator end() const { return const_iterator(items_.end()); }

 private:
  std::vector<Item> items_;
};

// The job's wiring as a plan built it, for the plans after it: rendering the wiring of a
// 10,000-pod job takes milliseconds, and it changes only with the job's spec (its generation) and
// HostNetwork port block.
struct WiredJob {
  std::shared_ptr<const FleetJob> job;       // the job it was built for (PodRecipe::job)
  std::shared_ptr<const JobWiring> wiring;
  int host_port_base = 0;
  std::string cluster_domain;
  // Whether it is the wiring of `job` (same object, same generation) with these ports and domain.
  bool For(const FleetJob& other, int port_base, const std::string& domain) const;
};

// HostNetwork: what the operator's allocator (HostPortAllocator) answered for the job's block of
// host ports. It differs per job and may change between reconciles: an observation, not a setting.
struct HostPortBlock {
  int base = 0;              // the block's first port, when granted
  std::string refused;       // why there is no block ("" = granted)
  bool never = false;        // refused for good: the job needs more ports than the whole range
};

struct Observed {
  PodList pods;                        // pods labelled with the job's name
  std::optional<Json> endpoints;       // the job's endpoints ConfigMap
  std::optional<Json> env_loader;      // the env loader's ConfigMap (lists too long for the env)
  std::optional<Json> service;         // Service mode: the job's headless Service
  std::optional<Json> pod_group;       // gang scheduling: the job's PodGroup
  // Gang Kubernetes (where the cluster serves the API): the job's scheduling.k8s.io Workload, and
  // the names of its PodGroups (v1alpha2 on: one per run) that are not being deleted.
  std::optional<Json> gang_workload;
  std::vector<std::string> gang_pod_groups;
  // The sidecar's identity: a per-job ServiceAccount allowed to read the job's endpoints
  // ConfigMap and nothing else (for pods whose template names no serviceAccountName).
  std::optional<Json> service_account;
  std::optional<Json> role;
  std::optional<Json> role_binding;
  HostPortBlock host_ports;            // HostNetwork jobs (recorded in status.hostPortBase)
  // The latest summary of this run's training progress (ProgressCollector), without updateTime.
  std::optional<Progress> progress;
  // The wiring of an earlier plan of this job (ReconcilePlan::wired), reused when it is still
  // the job's; null: built when a plan needs it.
  std::shared_ptr<const WiredJob> wired;
  kueue::KueueObserved kueue;          // jobs labelled kueue.x-k8s.io/queue-name: their Workload, ...
};

struct ReconcilePlan {
  std::vector<Action> actions;
  FleetJobStatus status;               // the FleetJob's .status as it should be
  std::vector<PlannedEvent> events;
  std::optional<std::chrono::seconds> requeue_after;
  // The wiring this plan used (built or reused), for the next plan's Observed::wired; null when
  // it needed none.
  std::shared_ptr<const WiredJob> wired;
};

// `job` and `status` are the FleetJob object, read once (ReadFleetJob, FleetJobStatus::FromJson).
ReconcilePlan PlanReconcile(const FleetJobObject& job, const FleetJobStatus& status, const Observed& observed,
                            Time now, const OperatorSettings& settings);

}  // namespace fleet::op
