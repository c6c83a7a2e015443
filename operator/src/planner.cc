#include "fleet/operator/planner.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <set>
#include <string_view>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "fleet/api/checkpoint.h"
#include "fleet/base/hash.h"
#include "fleet/base/json_read.h"
#include "fleet/base/strings.h"
#include "fleet/base/time.h"
#include "fleet/operator/peer_discovery.h"
#include "fleet/operator/pod_builder.h"
#include "fleet/operator/progress.h"
#include "fleet/operator/wiring.h"

namespace fleet::op {
namespace {

using std::chrono::seconds;

// How long after a pod's failure that would fail the job the verdict waits for an earlier failure,
// not yet reported, to be the cause (HandleFailures).
constexpr seconds kFailureSettle{5};
// How long an in-place restart waits for every trainer to come back to the gate before it
// recreates the pods instead (a trainer that ignores SIGTERM is killed 5 s after it; one that is
// not Python never comes).
constexpr seconds kInPlaceTimeout{60};

using api::FailureAction;
using api::FailureRule;
using api::kStalledReason;
using api::StallAction;

// ---- reading pods: members by reference (fleet/base/json_read.h), not copies of sub-objects for
// every pod at every reconcile ----

const std::string kNone;

const std::string& Label(const Json& obj, const char* key) {
  return StringMember(ObjectMember(ObjectMember(obj, "metadata"), "labels"), key);
}
const std::string& Name(const Json& obj) { return StringMember(ObjectMember(obj, "metadata"), "name"); }
const std::string& Annotation(const Json& obj, const char* key) {
  return StringMember(ObjectMember(ObjectMember(obj, "metadata"), "annotations"), key);
}
bool Finished(const ObservedPod& pod) { return pod.phase == PodPhase::kSucceeded || pod.phase == PodPhase::kFailed; }

PodPhase ReadPodPhase(const std::string& phase) {
  if (phase == "Pending") return PodPhase::kPending;
  if (phase == "Running") return PodPhase::kRunning;
  if (phase == "Succeeded") return PodPhase::kSucceeded;
  if (phase == "Failed") return PodPhase::kFailed;
  return PodPhase::kOther;
}

// How the members changed: "wd-worker-2 joined, wd-worker-0 left" (the first 5 names, then a count).
std::string MembershipChange(const std::vector<std::string>& before, const std::vector<std::string>& after) {
  const std::set<std::string> was(before.begin(), before.end()), is(after.begin(), after.end());
  std::vector<std::string> changes;
  for (const std::string& name : after) {
    if (!was.count(name)) changes.push_back(name + " joined");
  }
  for (const std::string& name : before) {
    if (!is.count(name)) changes.push_back(name + " left");
  }
  const size_t shown = std::min<size_t>(changes.size(), 5);
  std::string text = JoinStrings(std::vector<std::string>(changes.begin(), changes.begin() + static_cast<long>(shown)), ", ");
  if (changes.size() > shown) text += " and " + std::to_string(changes.size() - shown) + " more";
  return text;
}

// This run's live pods, by slot ordinal (a plan visits every slot several times: one hash
// lookup per pod when the plan starts, array indexing after), and what else holds the slots.
class RunPods {
 public:
  explicit RunPods(size_t slots) : by_ordinal_(slots, nullptr), occupied_(slots, false) {}
  const ObservedPod* Find(const PodSlot& slot) const { return by_ordinal_[Index(slot.ordinal)]; }
  void Set(int ordinal, const ObservedPod* pod) {
    count_ += by_ordinal_[Index(ordinal)] == nullptr;
    by_ordinal_[Index(ordinal)] = pod;
  }
  size_t size() const { return count_; }
  // Whether some pod, live or terminating, of any run, holds the slot's name.
  bool Occupied(const PodSlot& slot) const { return occupied_[Index(slot.ordinal)]; }
  void Occupy(int ordinal) { occupied_[Index(ordinal)] = true; }
  bool AllOccupied() const { return std::find(occupied_.begin(), occupied_.end(), false) == occupied_.end(); }
  bool stale = false;   // some pod is of an older run

 private:
  static size_t Index(int ordinal) { return static_cast<size_t>(ordinal); }
  std::vector<const ObservedPod*> by_ordinal_;
  std::vector<bool> occupied_;
  size_t count_ = 0;
};

// The slots' hosts for the endpoint lists, and the lists already published.
struct Hosts {
  std::vector<std::string> by_ordinal;
  bool all_known = true;
  // PodIP and HostNetwork: the published hosts are read back slot by slot, to tell a pod that came
  // back at another address. Service names are fixed by the slots and never compared one by one.
  bool compared_by_slot = true;
  const Json* published = nullptr;     // the endpoints ConfigMap
  bool published_this_run = false;
  std::string replaced;                // a pod that vanished or moved under this run's lists
  // The hosts annotation: the hosts themselves where they are compared by slot (IPs: ~14 bytes a
  // pod, 140 KB at 10,000 pods), else a fixed-size hash — 10,000 Service names would be ~400 KB,
  // over the API's 256 KiB limit on an object's annotations.
  std::string Digest() const {
    const std::string hosts = JoinStrings(by_ordinal, ",");
    if (compared_by_slot) return hosts;
    char text[64];
    std::snprintf(text, sizeof text, "%zu hosts, fnv1a64 %016llx", by_ordinal.size(),
                  static_cast<unsigned long long>(Fnv1a64(hosts)));
    return text;
  }
  bool UpToDate() const { return published_this_run && Annotation(*published, kHostsAnnotation) == Digest(); }
};

// An elastic job that Kueue admitted with fewer workers than its replicas (partial admission,
// down to minCount) runs the workers admitted: the job as its plan sees it. nullopt: the job as it is.
std::optional<FleetJob> WithinAdmission(const FleetJob& job, const Observed& observed) {
  if (!job.spec.elastic || kueue::QueueName(job).empty() || !observed.kueue.workload) return std::nullopt;
  const RoleSpec* workers = job.spec.Find(RoleKind::kWorker);
  const std::optional<int> admitted = kueue::AdmittedCount(*observed.kueue.workload, workers->name);
  if (!admitted || *admitted >= workers->replicas) return std::nullopt;
  FleetJob within = job;
  for (RoleSpec& role : within.spec.roles) {
    if (role.kind == RoleKind::kWorker) role.replicas = *admitted;
  }
  return within;
}

class Planner {
 public:
  Planner(const FleetJobObject& object, const FleetJobStatus& status, const Observed& observed, Time now,
          const OperatorSettings& settings)
      : object_(object), observed_(observed), now_(now), settings_(settings),
        peers_(PeerDiscovery::Of(object.job ? object.job->spec : FleetJobSpec{})) {
    plan_.status = status;
    if (object_.job) {
      admitted_job_ = WithinAdmission(*object_.job, observed_);
      slots_ = PodSlots(job());
    }
    if (object_.job && observed_.wired && observed_.wired->For(job(), observed_.host_ports.base, settings_.cluster_domain)) {
      wired_ = observed_.wired;
    }
    slot_of_.reserve(slots_.size());
    for (const PodSlot& slot : slots_) slot_of_.emplace(slot.name, &slot);
  }

  ReconcilePlan Run();

 private:
  void Steps();
  // The steps of a plan, in order. Those returning bool return whether they finished the plan.
  void FailInvalidSpec();
  bool ImmutableFieldChanged();
  void RecordLauncher();
  void RecordHostPorts();
  bool FinishedAlready();
  bool WaitForHostPorts();
  bool Suspend();
  bool DeadlineExceeded();
  bool WaitForGang();
  bool EnsureKubernetesGang();
  void CreateService();
  void EnsureSidecarIdentity();
  void RewireOnNewReplicas();
  RunPods ClassifyPods();
  bool AllWorkersSucceeded(const RunPods& pods);
  // A failure of this run (a failed pod, or a running one whose sidecar reports it stalled) and
  // its verdict: what to do (action), how messages name it and why (text: the pod, what a rule
  // matched, the rule), and when the job fails, its Failed condition's reason and message.
  struct Failure {
    const PodSlot* slot;
    const ObservedPod* pod;
    bool stalled;
    FailureAction action;
    std::string text;
    std::string reason;
    std::string fail_message;
  };
  std::optional<Failure> Judge(const PodSlot& slot, const ObservedPod& pod, bool stalled) const;
  bool CollectFailures(const RunPods& pods, const std::set<std::string>& being_replaced, std::vector<Failure>& failures);
  bool HandleFailures(const RunPods& pods);
  bool RestartAfter(const Failure& cause, const std::vector<const PodSlot*>& failed, const RunPods& pods);
  // In-place restarts (runPolicy.restartStrategy InPlace; docs/design/fast-failures.md §5).
  std::string InPlaceBlocker(const RunPods& pods) const;
  void RestartInPlace(const std::string& why, bool counted);
  void Relabel(const ObservedPod& pod);
  bool HoldInPlaceBarrier(const RunPods& pods);
  void ReplaceFailedPodsAlone(const std::vector<const PodSlot*>& failed, const RunPods& pods);
  bool TrackElasticMembers(const RunPods& pods);
  Hosts CollectHosts(const RunPods& pods) const;
  bool RestartForReplacedPod(const Hosts& hosts);
  bool NeedsWiring(const RunPods& pods, const Hosts& hosts) const;
  void EnsureEnvLoader();
  void CreateEnvLoader();
  void CreateMissingPods(const RunPods& pods);
  void PublishEndpoints(const Hosts& hosts);
  void Summarize(const RunPods& pods, const Hosts& hosts);
  void SummarizeElastic();
  void CheckPending(const RunPods& pods);
  void CheckProgress(const RunPods& pods);
  void PublishProgress();
  void CountPods();
  // Kueue (kueue.h): a job labelled kueue.x-k8s.io/queue-name runs only while its Workload is admitted.
  bool QueueAdmission(bool suspended);
  void QueueForWorkerCluster();
  bool CreateWorkload(bool suspended);
  bool WaitForPrebuiltWorkload();
  bool AdoptPrebuiltWorkload();
  bool ResizeWorkload(const kueue::WorkloadState& state, bool suspended);
  bool HoldForQueue(const std::string& reason, const std::string& message);
  bool WaitForAdmission(const kueue::WorkloadState& state);
  bool StopEvicted(const kueue::WorkloadState& state, bool suspended);
  bool StartAdmitted(const kueue::WorkloadState& state);
  void SyncPodsReady(const kueue::WorkloadState& state, bool new_admission);
  void FinishWorkload();
  void ReleaseWorkload(const std::string& why);
  Json DesiredWorkload(bool suspended);
  void UpdateWorkload(Json workload, const std::string& why) {
    plan_.actions.push_back({Verb::kUpdate, ObjectKind::kKueueWorkload, Name(workload), std::move(workload), why});
  }
  void EditWorkloadStatus(const Json& edit, const std::string& why);
  const Json* Workload() const { return observed_.kueue.workload ? &*observed_.kueue.workload : nullptr; }
  QueueStatus& Queue() { return status().queue ? *status().queue : status().queue.emplace(); }
  bool NoLivePods() const {
    return std::all_of(observed_.pods.begin(), observed_.pods.end(), [](const ObservedPod& pod) { return pod.terminating; });
  }

  // ---- what the steps share ----
  // The job; an elastic job that Kueue admitted with fewer workers than its replicas: with the
  // workers admitted (its pods, lists and counts are those of the admission).
  const FleetJob& job() const { return admitted_job_ ? *admitted_job_ : *object_.job; }
  FleetJobStatus& status() { return plan_.status; }
  bool HostPortsRefused() const {
    return job().spec.network == Network::kHostNetwork && !observed_.host_ports.refused.empty();
  }
  // A new run: new pods with new lists (after a whole-job restart, a resume or a change of
  // replicas). Only failure restarts count against backoffLimit. An elastic job's time below its
  // minimum counts again from the new run's start.
  void NewRun() {
    ++status().run;
    status().in_place_restart.reset();
    if (status().elastic) status().elastic->below_minimum_since.reset();
  }
  // This run's worker pods in a pod phase.
  int WorkersIn(const RunPods& pods, PodPhase phase) const {
    int count = 0;
    for (const PodSlot& slot : slots_) {
      const ObservedPod* pod = pods.Find(slot);
      count += slot.role->kind == RoleKind::kWorker && pod && pod->phase == phase;
    }
    return count;
  }
  void Event(const std::string& type, const std::string& reason, const std::string& message) {
    plan_.events.push_back({type, reason, message});
  }
  void RequeueAfter(seconds after) {
    after = std::max(after, seconds(1));
    if (!plan_.requeue_after || after < *plan_.requeue_after) plan_.requeue_after = after;
  }
  void SetPhase(JobPhase phase, const std::string& message) {
    if (status().phase != phase) {
      const bool bad = phase == JobPhase::kFailed || phase == JobPhase::kRestarting;
      const std::string& name = PhaseName(phase);
      Event(bad ? "Warning" : "Normal", name, message.empty() ? "FleetJob is " + name : message);
    }
    status().phase = phase;
    status().message = BoundMessage(message);
  }
  void SetCondition(ConditionType type, bool value, const std::string& reason, const std::string& message) {
    status().SetCondition(type, value ? ConditionStatus::kTrue : ConditionStatus::kFalse, reason, message, now_);
  }
  // A condition that says something is wrong or waited for: True, with an event (reason: the
  // condition's type) when it turns True.
  void Raise(ConditionType type, const char* event_type, const std::string& reason, const std::string& message) {
    if (!status().IsTrue(type)) Event(event_type, ConditionTypeName(type), message);
    SetCondition(type, true, reason, message);
  }
  // Such a condition, once raised, turns False when the matter is resolved.
  void Resolve(ConditionType type, const std::string& reason) {
    if (status().Find(type)) SetCondition(type, false, reason, "");
  }
  void Fail(const std::string& reason, const std::string& message);
  void ResolveWithoutPods(const std::string& reason);
  // Fails the job when it has used up backoffLimit; `what` says what happened.
  bool OutOfRestarts(const std::string& what);
  void Restart(const std::string& why, bool whole_job, bool counted = true);
  std::string CountRestart(bool counted);
  void CleanUp();
  void FinishedJob();
  void RecordCheckpoint();
  void Delete(ObjectKind kind, const std::string& name, const std::string& why) {
    if (!deleted_.insert({kind, name}).second) return;  // one delete per object and plan
    plan_.actions.push_back({Verb::kDelete, kind, name, nullptr, why});
  }
  void Create(ObjectKind kind, Json object, const std::string& why) {
    std::string name = Name(object);
    plan_.actions.push_back({Verb::kCreate, kind, name, std::move(object), why});
  }
  void DeletePods(const std::function<bool(const ObservedPod&)>& which, const std::string& why) {
    for (const ObservedPod& pod : observed_.pods) {
      if (!pod.terminating && which(pod)) Delete(ObjectKind::kPod, pod.name, why);
    }
  }
  // The job's wiring: an earlier plan's while it is still the job's (Observed::wired), else
  // rendered on first use (milliseconds for a big job: not on every plan); nullptr after failing
  // the job when it cannot be wired. It is built for a copy of the job that the plan's pod creates
  // share (PodRecipe): they outlive the plan's inputs.
  const JobWiring* Wiring() {
    if (!wired_) {
      auto wired_job = std::make_shared<const FleetJob>(job());
      auto built = JobWiring::Build(*wired_job, observed_.host_ports.base, settings_.cluster_domain);
      if (!built) {
        Fail("InvalidSpec", built.error());
        FinishedJob();
        return nullptr;
      }
      wired_ = std::make_shared<const WiredJob>(WiredJob{std::move(wired_job), std::make_shared<const JobWiring>(std::move(*built)),
                                                         observed_.host_ports.base, settings_.cluster_domain});
    }
    return wired_->wiring.get();
  }
  const JobWiring* wiring() const { return wired_ ? wired_->wiring.get() : nullptr; }

  const FleetJobObject& object_;
  const Observed& observed_;
  const Time now_;
  const OperatorSettings& settings_;
  const PeerDiscovery peers_;   // how the job's pods find their peers: asked wherever that differs
  ReconcilePlan plan_;
  std::vector<PodSlot> slots_;
  std::unordered_map<std::string_view, const PodSlot*> slot_of_;   // by pod name (into slots_)
  std::set<std::pair<ObjectKind, std::string>> deleted_;
  std::shared_ptr<const WiredJob> wired_;
  std::optional<FleetJob> admitted_job_;
  std::shared_ptr<const kueue::Admission> admission_;   // Kueue's, for the pods this plan creates
  std::string barrier_message_;   // the phase's message while an in-place restart's barrier holds
};

ReconcilePlan Planner::Run() {
  if (object_.deleting) {  // garbage collection removes the children
    ReleaseWorkload("the FleetJob is being deleted");
    return plan_;
  }
  if (object_.job && kueue::DispatchedByMultiKueue(*object_.job)) {
    QueueForWorkerCluster();
    // Only the Workload, whatever path the plan took (a job that cannot be wired fails, and
    // a failed job's clean-up and TTL are the worker cluster's).
    auto& actions = plan_.actions;
    actions.erase(std::remove_if(actions.begin(), actions.end(),
                                 [](const Action& a) { return a.kind != ObjectKind::kKueueWorkload; }),
                  actions.end());
  } else {
    RecordCheckpoint();
    Steps();
    // Whatever path the plan took (running, suspended, failed, finished), the counts are those of
    // the pods that exist once it is carried out.
    if (object_.job) CountPods();
  }
  plan_.wired = wired_;
  return std::move(plan_);
}

void Planner::Steps() {
  if (!object_.job) return FailInvalidSpec();
  const bool new_generation = status().observed_generation != job().generation;
  status().observed_generation = job().generation;
  if (ImmutableFieldChanged()) return;
  RecordLauncher();
  RecordHostPorts();
  if (FinishedAlready() || WaitForHostPorts()) return;
  // A spec that cannot be wired (e.g. lists over the kernel's limit) is refused once per
  // generation; otherwise the wiring is rendered only when a plan needs it.
  if (new_generation && !HostPortsRefused() && !Wiring()) return;
  const bool suspended = Suspend();
  if (QueueAdmission(suspended) || suspended || DeadlineExceeded() || WaitForGang()) return;
  CreateService();
  EnsureSidecarIdentity();
  RewireOnNewReplicas();
  const RunPods pods = ClassifyPods();
  if (AllWorkersSucceeded(pods) || HandleFailures(pods) || TrackElasticMembers(pods) || HoldInPlaceBarrier(pods)) return;
  const Hosts hosts = CollectHosts(pods);
  if (RestartForReplacedPod(hosts)) return;
  if (NeedsWiring(pods, hosts) && !Wiring()) return;   // the job failed: it cannot be wired
  EnsureEnvLoader();
  CreateMissingPods(pods);
  PublishEndpoints(hosts);
  Summarize(pods, hosts);
}

// status.checkpoint: the newest checkpoint a pod's sidecar reported (its Checkpoint condition),
// with an event when its step is new. Read from every pod, terminating ones included: a pod is deleted
// right after its preStop hook, and the informer sees its status update before the delete.
void Planner::RecordCheckpoint() {
  const auto key = [](int64_t step, Time time, const std::string& pod) { return std::make_tuple(time, step, pod); };
  std::optional<CheckpointStatus>& recorded = status().checkpoint;
  for (const ObservedPod& pod : observed_.pods) {
    if (!pod.checkpoint) continue;
    const Time time = WholeSeconds(pod.checkpoint->time);
    if (recorded && key(pod.checkpoint->step, time, pod.name) <= key(recorded->step, recorded->time, recorded->pod)) continue;
    // Every rank of a data-parallel job may answer with the same step: one event per step.
    if (!recorded || recorded->step != pod.checkpoint->step) {
      Event("Normal", "CheckpointSaved", "pod " + pod.name + " saved a checkpoint at step " +
                                             std::to_string(pod.checkpoint->step) + " before it stopped");
    }
    recorded = CheckpointStatus{pod.checkpoint->step, pod.name, time};
  }
}

// ---- ending a job ----

void Planner::Fail(const std::string& reason, const std::string& message) {
  SetPhase(JobPhase::kFailed, message);
  status().MarkFailed(reason, message, now_);
  SetCondition(ConditionType::kRestarting, false, reason, message);
  ResolveWithoutPods("JobFailed");
}

// A finished or suspended job is no longer stalled, unschedulable or waiting for anything:
// conditions that said so turn False (nothing else would ever clear them). Nor has an elastic one
// members: none of its workers trains for it any more (the rendezvous count stays, as history).
void Planner::ResolveWithoutPods(const std::string& reason) {
  for (ConditionType type : {ConditionType::kStalled, ConditionType::kUnschedulable, ConditionType::kGangPending,
                             ConditionType::kWaitingForHostPorts}) {
    if (status().IsTrue(type)) SetCondition(type, false, reason, "");
  }
  if (status().elastic) {
    status().elastic->members.clear();
    status().elastic->below_minimum_since.reset();
  }
}

// What is left of a finished job, per cleanPodPolicy: Running deletes pods still running
// (servers, heter trainers), All deletes every pod, None keeps them.
void Planner::CleanUp() {
  switch (object_.run_policy.clean_pod_policy) {
    case CleanPodPolicy::kNone: return;
    case CleanPodPolicy::kAll: DeletePods([](const ObservedPod&) { return true; }, "cleanPodPolicy All"); return;
    case CleanPodPolicy::kRunning:
      DeletePods([](const ObservedPod& pod) { return !Finished(pod); }, "cleanPodPolicy Running");
      return;
  }
}

void Planner::FinishedJob() {
  FinishWorkload();
  CleanUp();
  const auto ttl = object_.run_policy.ttl_seconds_after_finished;
  if (!ttl) return;
  const Time expiry = status().completion_time.value_or(now_) + seconds(*ttl);
  if (now_ >= expiry) {
    plan_.actions.push_back({Verb::kDelete, ObjectKind::kFleetJob, object_.name, nullptr, "ttlSecondsAfterFinished"});
  } else {
    RequeueAfter(std::chrono::duration_cast<seconds>(expiry - now_) + seconds(1));
  }
}

// Nothing is created for a spec the operator cannot run; the message says what to fix. An edit
// can make a running job's spec invalid: it ends like any failed job, its pods cleaned up and its
// TTL counted per runPolicy (the defaults when runPolicy is what is invalid). A job that already
// finished keeps its outcome.
void Planner::FailInvalidSpec() {
  if (!IsFinished(status().phase)) Fail("InvalidSpec", object_.invalid);
  FinishedJob();
}

bool Planner::FinishedAlready() {
  if (!IsFinished(status().phase)) return false;
  ResolveWithoutPods(status().phase == JobPhase::kSucceeded ? "JobSucceeded" : "JobFailed");
  FinishedJob();
  return true;
}

// ---- before any pod ----

// The mode, network and runtime shape every pod and list of the job: they cannot change under it.
// The CRD's transition rules refuse such edits at apply time; this catches them where those rules
// do not run (CRD validation off, or an edit of the stored object by other means).
bool Planner::ImmutableFieldChanged() {
  const FleetJobSpec& spec = job().spec;
  const std::tuple<const char*, std::string*, std::string> fields[] = {
      {"spec.mode", &status().mode, std::string(JobModeName(spec.mode))},
      {"spec.network", &status().network, std::string(NetworkName(spec.network))},
      {"spec.runtime", &status().runtime, std::string(RuntimeName(spec.runtime))}};
  for (const auto& [field, recorded, value] : fields) {
    if (!recorded->empty() && *recorded != value && status().phase != JobPhase::kFailed) {
      Fail("ImmutableFieldChanged", std::string(field) + " changed from " + *recorded + " to " + value +
                                        " after the job started; it cannot change: delete the FleetJob and create it again");
      CleanUp();
      return true;
    }
  }
  for (const auto& [field, recorded, value] : fields) *recorded = value;
  return false;
}

// How the pods start Paddle (status.launcher), said in an event when it is decided or changes,
// with a warning for each thing about it that may not work as the user expects.
void Planner::RecordLauncher() {
  const FleetJobSpec& spec = job().spec;
  const std::string launcher = LauncherSummary(spec);
  if (status().launcher == launcher) return;
  status().launcher = launcher;
  // A bare script is what FleetJob always ran: only a launcher is worth an event.
  const bool launched = std::any_of(spec.roles.begin(), spec.roles.end(),
                                    [](const RoleSpec& role) { return role.launcher != Launcher::kScript; });
  if (launched) Event("Normal", "Launcher", LauncherMessage(spec));
  for (const std::string& caveat : LauncherCaveats(spec)) Event("Warning", "LauncherCaveat", caveat);
}

// The HostNetwork port block, recorded so that it survives operator restarts.
void Planner::RecordHostPorts() {
  if (job().spec.network == Network::kHostNetwork && !HostPortsRefused()) {
    status().host_port_base = observed_.host_ports.base;
  }
}

// HostNetwork: Pending while other jobs hold the ports, Failed when the job can never fit.
bool Planner::WaitForHostPorts() {
  const HostPortBlock& ports = observed_.host_ports;
  if (HostPortsRefused() && !job().spec.run_policy.suspend) {
    if (ports.never) {
      Fail("HostPortRangeTooSmall", ports.refused);
      FinishedJob();
      return true;
    }
    Raise(ConditionType::kWaitingForHostPorts, "Warning", "NoFreeHostPorts", ports.refused);
    SetPhase(JobPhase::kPending, ports.refused);
    RequeueAfter(seconds(30));
    return true;
  }
  Resolve(ConditionType::kWaitingForHostPorts, "HostPortsAllocated");
  return false;
}

bool Planner::Suspend() {
  if (!job().spec.run_policy.suspend) {
    if (status().IsTrue(ConditionType::kSuspended)) {
      SetCondition(ConditionType::kSuspended, false, "Resumed", "spec.runPolicy.suspend is false");
      Event("Normal", "Resumed", "the job is resumed");
    }
    return false;
  }
  DeletePods([](const ObservedPod&) { return true; }, "suspended");
  if (!status().IsTrue(ConditionType::kSuspended)) {
    SetCondition(ConditionType::kSuspended, true, "Suspended", "spec.runPolicy.suspend is true");
    NewRun();  // pods made after the resume are wired afresh
  }
  SetCondition(ConditionType::kRunning, false, "Suspended", "");
  ResolveWithoutPods("Suspended");
  status().start_time.reset();  // activeDeadlineSeconds counts from the resume
  SetPhase(JobPhase::kSuspended, "the job is suspended; its pods are removed until spec.runPolicy.suspend is false");
  return true;
}

bool Planner::DeadlineExceeded() {
  // Rounded up to the second: status times are whole seconds (metav1.Time), and a start rounded
  // down would fire activeDeadlineSeconds up to a second early. Up, the deadline measures at least
  // the full duration, from a time that survives operator restarts (nothing kept in memory).
  if (!status().start_time) status().start_time = Time(std::chrono::ceil<seconds>(now_.time_since_epoch()));
  const auto limit = job().spec.run_policy.active_deadline_seconds;
  if (!limit) return false;
  const Time deadline = *status().start_time + seconds(*limit);
  if (now_ < deadline) {
    RequeueAfter(std::chrono::duration_cast<seconds>(deadline - now_) + seconds(1));
    return false;
  }
  Fail("DeadlineExceeded", "the job ran longer than activeDeadlineSeconds=" + std::to_string(*limit));
  DeletePods([](const ObservedPod& pod) { return !Finished(pod); }, "activeDeadlineSeconds");
  return true;
}

// Gang scheduling: the PodGroup comes first; Volcano must admit it before any pod exists, so
// that a partial gang never holds GPUs.
bool Planner::WaitForGang() {
  const FleetJobSpec& spec = job().spec;
  if (spec.scheduling.gang == GangScheduler::kNone) return false;
  if (spec.scheduling.gang == GangScheduler::kKubernetes) return EnsureKubernetesGang();
  if (!observed_.pod_group) {
    Create(ObjectKind::kPodGroup, BuildPodGroup(job()), "gang scheduling");
    SetPhase(JobPhase::kPending, "waiting for the PodGroup to be admitted");
    return true;
  }
  const std::string& pg_phase = StringMember(ObjectMember(*observed_.pod_group, "status"), "phase");
  if (spec.scheduling.gang == GangScheduler::kVolcano && pg_phase != "Inqueue" && pg_phase != "Running") {
    const std::string message = "waiting for Volcano to admit PodGroup " + PodGroupName(job().name) + " (minMember " +
                                std::to_string(GangMinimum(spec)) + (spec.scheduling.queue.empty() ? "" : ", queue " + spec.scheduling.queue) +
                                ")" + (pg_phase.empty() ? "" : "; it is " + pg_phase);
    Raise(ConditionType::kGangPending, "Normal", "PodGroupNotAdmitted", message);
    SetPhase(JobPhase::kPending, message);
    RequeueAfter(seconds(3));   // PodGroups are read, not watched: poll for the admission
    return true;
  }
  Resolve(ConditionType::kGangPending, "PodGroupAdmitted");
  return false;
}

// Kubernetes' own gang scheduling: the job's Workload, and from v1alpha2 on the run's PodGroup
// (the pods name it: BuildPod). Nothing waits for an admission: kube-scheduler itself holds the
// run's pods until gang.minCount of them exist and fit, and places them together or not at all.
// A Workload's groups are immutable: one whose minimum is no longer the job's is replaced (the
// next plan creates it). The PodGroups of earlier runs go.
bool Planner::EnsureKubernetesGang() {
  const WorkloadApi& api = settings_.workload_api;
  if (!api.usable()) {
    Fail("GangSchedulingUnavailable",
         "spec.scheduling.gang Kubernetes needs the scheduling.k8s.io Workload API (Kubernetes 1.35+ with the "
         "GenericWorkload and GangScheduling feature gates, and the API version turned on with --runtime-config); "
         "this cluster serves " + api.served + " (as discovered when the operator started: restart it after turning the API on)");
    FinishedJob();
    return true;
  }
  const std::string workload = GangWorkloadName(job().name);
  if (!observed_.gang_workload) {
    Create(ObjectKind::kGangWorkload, BuildGangWorkload(job(), api), "gang scheduling");
  } else if (GangWorkloadMinCount(*observed_.gang_workload) != GangMinimum(job().spec)) {
    Delete(ObjectKind::kGangWorkload, workload, "the gang's minimum changed, and a Workload's groups are immutable");
  }
  if (!api.pod_groups) return false;
  const std::string pod_group = GangPodGroupName(job().name, status().run);
  bool exists = false;
  for (const std::string& name : observed_.gang_pod_groups) {
    if (name == pod_group) exists = true;
    else Delete(ObjectKind::kPodGroup, name, "the gang of an earlier run");
  }
  if (!exists) Create(ObjectKind::kPodGroup, BuildGangPodGroup(job(), status().run, api), "gang scheduling of run " + std::to_string(status().run));
  return false;
}

// ---- Kueue admission (kueue.h; docs/design/kueue.md 6.2) ----

constexpr const char* kAdmissionConflict = "AdmissionConflict";

// A job labelled kueue.x-k8s.io/queue-name: its Workload first, and nothing else (no Service,
// ConfigMap, PodGroup or pod) until Kueue admits it. Returns whether the plan ends here (queued,
// evicted, being resized). A suspended job's Workload is inactive; Suspend() holds the job.
bool Planner::QueueAdmission(bool suspended) {
  if (!object_.job || kueue::QueueName(job()).empty()) return false;
  const std::string queue = kueue::QueueName(job());
  if (!observed_.kueue.served) {
    Fail("KueueUnavailable", std::string("metadata.labels[\"") + kueue::kQueueLabel + "\"] queues the job in LocalQueue " +
                                 queue + ", but this cluster does not serve kueue.x-k8s.io/v1beta2 Workloads: install "
                                 "Kueue (then restart the operator), or remove the label to run the job without it");
    FinishedJob();
    return true;
  }
  if (const auto max_seconds = kueue::MaxExecutionTimeSeconds(job()); !max_seconds.ok()) {
    Fail("InvalidSpec", max_seconds.error());
    FinishedJob();
    return true;
  }
  QueueStatus& q = Queue();
  q.workload = kueue::JobWorkloadName(job());
  q.local_queue = queue;
  if (!Wiring()) return true;   // the job failed: it cannot be wired
  const bool prebuilt = !kueue::PrebuiltWorkloadName(job()).empty();
  if (!Workload()) return prebuilt ? WaitForPrebuiltWorkload() : CreateWorkload(suspended);
  const kueue::WorkloadState state = kueue::ReadWorkloadState(*Workload());
  if (state.deleting) {
    // Someone deletes the Workload: the job stops, and queues again with a new one once it is gone.
    if (state.has_finalizer && NoLivePods()) UpdateWorkload(kueue::WithoutFinalizer(*Workload()), "the Workload is being deleted");
    return HoldForQueue("WorkloadDeleted", "Workload " + q.workload + " is being deleted; the job queues again once it is gone");
  }
  if (state.finished) {
    Fail("WorkloadFinished", "Kueue finished Workload " + q.workload + " before the job ended: " + state.finished_message);
    FinishedJob();
    return true;
  }
  if (prebuilt && AdoptPrebuiltWorkload()) return true;
  if (state.evicted && state.quota_reserved) return StopEvicted(state, suspended);
  if (ResizeWorkload(state, suspended)) return true;
  if (!suspended && kueue::DeactivatedElsewhere(*Workload())) {
    return HoldForQueue("Deactivated", "Workload " + q.workload + " is deactivated (" +
                                           (state.evicted_message.empty() ? "spec.active is false" : state.evicted_message) +
                                           "); the job queues again once its spec.active is true");
  }
  if (suspended) {
    if (status().Find(ConditionType::kAdmitted)) SetCondition(ConditionType::kAdmitted, false, "Suspended", "spec.runPolicy.suspend is true");
    q.state = state.quota_reserved ? "Admitted" : "Queued";
    return false;
  }
  return state.admitted ? StartAdmitted(state) : WaitForAdmission(state);
}

// The Workload as the job's spec makes it now (its pod sets rendered from the job's pods).
Json Planner::DesiredWorkload(bool suspended) {
  return kueue::BuildWorkload(*object_.job, kueue::WorkloadPodSets(*object_.job, *Wiring(), settings_),
                              observed_.kueue.priority, suspended);
}

// MultiKueue's manager cluster (docs/design/kueue.md 3): the job runs on a worker cluster, in the
// copy MultiKueue makes there once the Workload is admitted here, and MultiKueue's adapter mirrors
// the copy's status onto this job. The operator plays only the queue's part: the Workload, as for
// any queued job (Kueue admits it, MultiKueue dispatches it), kept by its finalizer until
// MultiKueue copies the worker's Finished onto it. Nothing else is this operator's: no pod,
// Service or ConfigMap (they would run the job twice), and no status or event (the controller
// writes neither for such a job: the adapter's status would be overwritten).
void Planner::QueueForWorkerCluster() {
  if (!observed_.kueue.served || !Wiring()) return;
  if (!Workload()) {
    if (kueue::PriorityClassOf(job()) && !observed_.kueue.priority) return RequeueAfter(seconds(30));
    return Create(ObjectKind::kKueueWorkload, DesiredWorkload(false), "dispatched by MultiKueue from LocalQueue " + kueue::QueueName(job()));
  }
  const kueue::WorkloadState state = kueue::ReadWorkloadState(*Workload());
  if (state.finished || state.deleting) return ReleaseWorkload("MultiKueue finished the job on its worker cluster");
  if (state.quota_reserved || (kueue::PriorityClassOf(job()) && !observed_.kueue.priority)) return;
  if (auto updated = kueue::UpdatedWorkloadSpec(*Workload(), DesiredWorkload(false))) {
    UpdateWorkload(std::move(*updated), "the job's spec changed");
  }
}

// MultiKueue's worker cluster: MultiKueue makes the Workload before the job's copy, which names it;
// a copy seen first waits for it (the Workload informer does not tie it to the job before it is
// adopted: the plan looks again).
bool Planner::WaitForPrebuiltWorkload() {
  RequeueAfter(seconds(5));
  return HoldForQueue("WaitingForWorkload", std::string("waiting for Workload ") + Queue().workload + " (named by " +
                                                kueue::kPrebuiltWorkloadLabel + ") to be created by MultiKueue");
}

// The prebuilt Workload becomes the job's (its owner, its labels, Kueue's finalizer), from then on
// used as any queued job's. One whose pod sets do not match the job cannot admit it: Kueue's
// ensurePrebuiltWorkloadInSync finishes it OutOfSync (FinishWorkload), and the job fails.
bool Planner::AdoptPrebuiltWorkload() {
  if (kueue::PodCountsChanged(*Workload(), *object_.job)) {
    Fail(kueue::kOutOfSync, "the pod sets of Workload " + Queue().workload + " (made by MultiKueue) do not match the "
                            "job's roles and replicas: MultiKueue's copy of the job and its Workload are out of sync");
    FinishedJob();
    return true;
  }
  if (auto adopted = kueue::AdoptedWorkload(*Workload(), job())) {
    UpdateWorkload(std::move(*adopted), "the Workload MultiKueue made for this job");
  }
  return false;
}

bool Planner::CreateWorkload(bool suspended) {
  // Kueue trusts spec.priority: the Workload waits for the value of the class the job names.
  if (const auto ref = kueue::PriorityClassOf(job()); ref && !observed_.kueue.priority) {
    RequeueAfter(seconds(30));
    return HoldForQueue("PriorityClassNotFound", ref->kind + " " + ref->name + " (the job's priority) is not found; "
                                                 "the job queues in Kueue once it exists");
  }
  Create(ObjectKind::kKueueWorkload, DesiredWorkload(suspended), "queued in LocalQueue " + Queue().local_queue);
  if (suspended) return false;
  return WaitForAdmission(kueue::WorkloadState{});
}

// A spec change: Kueue's pod sets are immutable while they hold quota. A Workload without quota
// takes the job's spec in place (its pod sets as the pods would be made now). An admitted job
// whose pod counts changed is admitted again: its pods go, then its Workload, and a new one queues.
// Other changes of an admitted job (a template, a new operator's pods) wait for its next
// admission, as its pods wait for its next run; an admitted elastic job keeps its admission (it
// runs the workers admitted). Returns whether the plan ends.
bool Planner::ResizeWorkload(const kueue::WorkloadState& state, bool suspended) {
  if (state.quota_reserved && !object_.job->spec.elastic && kueue::PodCountsChanged(*Workload(), *object_.job)) {
    if (NoLivePods()) {
      if (state.has_finalizer) UpdateWorkload(kueue::WithoutFinalizer(*Workload()), "its pod counts changed");
      Delete(ObjectKind::kKueueWorkload, Name(*Workload()), "its pod counts changed: Kueue admits the job again");
    }
    return HoldForQueue("Resized", "the job's replicas changed while admitted: Kueue admits it again with the new counts");
  }
  // Kueue evicts an inactive Workload: spec.runPolicy.suspend first, the rest in the next plan.
  if (auto toggled = kueue::ActiveForSuspend(*Workload(), suspended)) {
    UpdateWorkload(std::move(*toggled), suspended ? "suspended" : "resumed");
    return false;
  }
  // A prebuilt Workload's spec is MultiKueue's copy of the manager's: never rewritten here.
  if (state.quota_reserved || !kueue::PrebuiltWorkloadName(job()).empty()) return false;
  if (kueue::PriorityClassOf(job()) && !observed_.kueue.priority) return false;
  if (auto updated = kueue::UpdatedWorkloadSpec(*Workload(), DesiredWorkload(suspended))) {
    UpdateWorkload(std::move(*updated), "the job's spec changed");
  }
  return false;
}

// No quota: no pods (an admitted run's are its last: the next admission starts a new run), and
// the deadline counts from the admission.
bool Planner::HoldForQueue(const std::string& reason, const std::string& message) {
  if (status().IsTrue(ConditionType::kAdmitted)) NewRun();
  SetCondition(ConditionType::kAdmitted, false, reason, message);
  DeletePods([](const ObservedPod&) { return true; }, message);
  if (status().Find(ConditionType::kRunning)) SetCondition(ConditionType::kRunning, false, reason, "");
  ResolveWithoutPods(reason);
  status().start_time.reset();
  SetPhase(JobPhase::kPending, message);
  return true;
}

bool Planner::WaitForAdmission(const kueue::WorkloadState& state) {
  QueueStatus& q = Queue();
  const std::string why = state.pending.empty() ? "waiting for Kueue to admit Workload " + q.workload : state.pending;
  const std::string message = "queued in LocalQueue " + q.local_queue + ": " + why;
  const Condition* admitted = status().Find(ConditionType::kAdmitted);
  if (!admitted || admitted->reason != "Queued") Event("Normal", "Queued", message);
  q.state = "Queued";
  q.message = BoundMessage(why);
  q.cluster_queue.clear();
  q.flavors.clear();
  q.admitted_counts.clear();
  return HoldForQueue("Queued", message);
}

// Kueue evicted the admitted job (preemption, a stopped queue, a PodsReady timeout, deactivation):
// its pods go (a new run when it is admitted again), and once none is left but terminating ones
// the quota is released, which Kueue waits for (design 2.5).
bool Planner::StopEvicted(const kueue::WorkloadState& state, bool suspended) {
  QueueStatus& q = Queue();
  const std::string& reason = state.evicted_reason;
  if (!suspended) {
    std::string message = "evicted by Kueue (" + reason + "): " + state.evicted_message;
    if (reason == "Preempted") {
      const std::string& preemptor = observed_.kueue.preemptor;
      const std::string& kueue_says = state.preempted_message.empty() ? state.evicted_message : state.preempted_message;
      message = preemptor.empty() ? "preempted by Kueue: " + kueue_says
                                  : "preempted by FleetJob " + preemptor + " in ClusterQueue " + state.cluster_queue + " (" + kueue_says + ")";
    }
    if (status().IsTrue(ConditionType::kAdmitted)) {   // this eviction, seen for the first time
      ++q.evictions;
      q.last_eviction = QueueStatus::Eviction{reason, BoundMessage(state.evicted_message), WholeSeconds(now_)};
      Event("Warning", reason == "Preempted" ? "Preempted" : "Evicted", message);
    }
    HoldForQueue(reason == "Preempted" ? "Preempted" : "Evicted", message);
  }
  q.state = "Evicted";
  q.message = BoundMessage(state.evicted_message);
  q.flavors.clear();
  q.admitted_counts.clear();
  if (NoLivePods()) EditWorkloadStatus(kueue::QuotaReleaseEdit(state, now_), "evicted, and no pod is left: the quota goes back");
  return true;
}

// Admitted: the pods may come, each with the admission (flavors' node labels and tolerations).
// Returns false: the plan goes on as for any job.
bool Planner::StartAdmitted(const kueue::WorkloadState& state) {
  auto admission = std::make_shared<kueue::Admission>(kueue::ReadAdmission(*Workload(), observed_.kueue.flavors));
  QueueStatus& q = Queue();
  if (!admission->missing_flavors.empty()) {
    RequeueAfter(seconds(10));
    const std::string message = "admitted by ClusterQueue " + admission->cluster_queue + ", but ResourceFlavor " +
                                JoinStrings(admission->missing_flavors, ", ") + " cannot be read yet";
    if (status().IsTrue(ConditionType::kAdmitted)) return true;   // its pods run: none is made meanwhile
    return HoldForQueue("FlavorsUnread", message);
  }
  std::string conflict = admission->conflict;
  for (const RoleSpec& role : job().spec.roles) {
    Json probe = {{"spec", {{"nodeSelector", ObjectMember(ObjectMember(role.template_, "spec"), "nodeSelector")}}}};
    if (auto applied = kueue::ApplyAdmission(*admission, role.name, probe); conflict.empty() && !applied) conflict = applied.error();
  }
  if (!conflict.empty()) {
    Fail(kAdmissionConflict, "Kueue's admission of Workload " + q.workload + " cannot apply: " + conflict);
    FinishedJob();
    return true;
  }
  std::vector<std::string> placed;
  q.flavors.clear();
  q.admitted_counts.clear();
  for (const auto& [name, set] : admission->pod_sets) {
    q.flavors[name] = set.flavors;
    q.admitted_counts[name] = set.count;
    std::vector<std::string> flavors;
    for (const auto& [resource, flavor] : set.flavors) flavors.push_back(resource + "=" + flavor);
    placed.push_back(name + ": " + (flavors.empty() ? "no flavor" : JoinStrings(flavors, ", ")));
  }
  const RoleSpec& workers = *object_.job->spec.Find(RoleKind::kWorker);
  const int admitted_workers = q.admitted_counts.count(workers.name) ? q.admitted_counts[workers.name] : workers.replicas;
  q.state = "Admitted";
  q.cluster_queue = admission->cluster_queue;
  q.message = admitted_workers < workers.replicas
                  ? "admitted " + std::to_string(admitted_workers) + " of " + std::to_string(workers.replicas) +
                        " workers; the others wait for the next admission"
                  : "";
  const std::string summary = "admitted by ClusterQueue " + admission->cluster_queue + " (" + JoinStrings(placed, "; ") + ")";
  const bool new_admission = !status().IsTrue(ConditionType::kAdmitted);
  if (new_admission) Event("Normal", "Admitted", summary);
  SetCondition(ConditionType::kAdmitted, true, "Admitted", summary);
  admission_ = std::move(admission);
  SyncPodsReady(state, new_admission);
  return false;
}

// The Workload's PodsReady, always (a cluster with waitForPodsReady evicts a job without it):
// False WaitForStart until every pod of the run is Ready (or done), True Started, then False
// WaitForRecovery when one is not, True Recovered when all are again (Kueue's jobframework);
// each admission from WaitForStart.
void Planner::SyncPodsReady(const kueue::WorkloadState& state, bool new_admission) {
  const std::string run = std::to_string(status().run);
  size_t ready = 0;
  for (const ObservedPod& pod : observed_.pods) {
    ready += !pod.terminating && pod.run == run && slot_of_.count(pod.name) &&
             ((pod.phase == PodPhase::kRunning && pod.ready) || pod.phase == PodPhase::kSucceeded);
  }
  const bool all = ready == slots_.size();
  // A new admission's pods start afresh: what PodsReady said of the last one does not count.
  const Json* current = new_admission ? nullptr : kueue::WorkloadCondition(*Workload(), "PodsReady");
  const bool was_true = current && StringMember(*current, "status") == "True";
  const std::string was_reason = current ? StringMember(*current, "reason") : "";
  std::string reason = all ? (was_reason == "WaitForRecovery" ? "Recovered" : "Started")
                           : (was_true || was_reason == "WaitForRecovery" ? "WaitForRecovery" : "WaitForStart");
  if (current && was_true == all && (all || was_reason == reason)) return;
  const std::string message = all ? "All pods reached readiness and the workload is running"
                              : reason == "WaitForStart" ? "Not all pods are ready or succeeded"
                                                         : "At least one pod is not ready, waiting for recovery";
  EditWorkloadStatus(kueue::StatusEdit({kueue::WorkloadConditionJson("PodsReady", all, reason, message, now_, state.generation)},
                                       false, {{"Admitted", "True"}}),
                     "PodsReady " + reason);
}

// The job ended: its Workload is Finished (Kueue frees the quota), then loses its finalizer.
void Planner::FinishWorkload() {
  if (!Workload()) return;
  const kueue::WorkloadState state = kueue::ReadWorkloadState(*Workload());
  if (status().queue) status().queue->state = "Finished";
  if (state.finished) return ReleaseWorkload("the job finished and its Workload is Finished");
  const Condition* failed = status().Find(ConditionType::kFailed);
  const std::string reason = status().phase == JobPhase::kSucceeded ? "Succeeded"
                             : failed && failed->reason == kAdmissionConflict ? "FailedToStart"
                             : failed && failed->reason == kueue::kOutOfSync  ? kueue::kOutOfSync
                                                                              : "Failed";
  const std::string message = status().message.empty() ? "the FleetJob " + reason : status().message;
  EditWorkloadStatus(kueue::StatusEdit({kueue::WorkloadConditionJson("Finished", true, reason, message, now_, state.generation)}, false),
                     "the job finished");
}

// Kueue rescues only Workloads without owners: the operator removes its finalizer itself.
void Planner::ReleaseWorkload(const std::string& why) {
  if (Workload() && kueue::ReadWorkloadState(*Workload()).has_finalizer) UpdateWorkload(kueue::WithoutFinalizer(*Workload()), why);
}

void Planner::EditWorkloadStatus(const Json& edit, const std::string& why) {
  plan_.actions.push_back({Verb::kUpdateStatus, ObjectKind::kKueueWorkload, Name(*Workload()), edit, why});
}

void Planner::CreateService() {
  if (job().spec.network == Network::kService && !observed_.service) {
    Create(ObjectKind::kService, BuildService(job()), "stable DNS names for the pods");
  }
}

void Planner::EnsureSidecarIdentity() {
  if (!NeedsSidecarAccount(job())) return;
  if (!observed_.service_account) Create(ObjectKind::kServiceAccount, BuildSidecarServiceAccount(job()), "sidecar identity");
  if (!observed_.role) {
    Create(ObjectKind::kRole, BuildSidecarRole(job()), "sidecar may read the endpoints and its own pod");
  } else if (Annotation(*observed_.role, kReplicasAnnotation) != ReplicaSignature(job().spec)) {
    // The job's pods changed (replicas): the sidecars may touch exactly the new ones. (The
    // annotation says which pods the Role names, without comparing thousands of names.)
    Json role = BuildSidecarRole(job());
    role["metadata"]["resourceVersion"] = StringMember(ObjectMember(*observed_.role, "metadata"), "resourceVersion");
    plan_.actions.push_back({Verb::kUpdate, ObjectKind::kRole, Name(role), std::move(role), "the job's pods changed"});
  }
  if (!observed_.role_binding) Create(ObjectKind::kRoleBinding, BuildSidecarRoleBinding(job()), "sidecar identity");
}

// A change of replicas rewires the job: Paddle's processes read their peers once, at start, so
// every pod of the next run gets the new lists. Not a failure: backoffLimit is not charged. An
// elastic job's pods read no lists: its replicas change within the run (pods are created or
// deleted, the workers re-rendezvous), and only a new range or etcd makes a new run.
void Planner::RewireOnNewReplicas() {
  const std::string signature = RunSignature(job().spec);
  const std::string& wired_for = status().run_replicas;
  if (!wired_for.empty() && wired_for != signature) {
    NewRun();
    Event("Normal", "Rewiring", "replicas changed (" + wired_for + " -> " + signature +
                                    "); restarting every pod with the new endpoint lists");
  } else if (const auto counted = status().replica_statuses.find("worker");
             peers_.TracksMembers() && counted != status().replica_statuses.end() && counted->second.replicas > 0 &&
             counted->second.replicas != job().spec.Find(RoleKind::kWorker)->replicas) {
    Event("Normal", "Scaling", "worker replicas " + std::to_string(counted->second.replicas) + " -> " +
                                   std::to_string(job().spec.Find(RoleKind::kWorker)->replicas) +
                                   " within the elastic range: creating or deleting worker pods in run " +
                                   std::to_string(status().run) + "; the running workers re-rendezvous");
  }
  status().run_replicas = signature;
}

// ---- the pods ----

// This run's pods by slot; everything else (older runs, scaled-away slots) goes.
// A run restarted in place keeps the pods of the run before.
RunPods Planner::ClassifyPods() {
  const std::string run = std::to_string(status().run);
  const auto& in_place = status().in_place_restart;
  const std::string kept_run = in_place && in_place->run == status().run ? std::to_string(status().run - 1) : "";
  RunPods pods(slots_.size());
  for (const ObservedPod& pod : observed_.pods) {
    const std::string& name = pod.name;
    auto slot = slot_of_.find(name);
    if (slot != slot_of_.end()) pods.Occupy(slot->second->ordinal);
    const bool old_run = pod.run != run;
    const bool kept = old_run && !kept_run.empty() && pod.run == kept_run && !pod.terminating;
    pods.stale = pods.stale || (old_run && !kept);
    if (pod.terminating) continue;
    if (slot == slot_of_.end()) {
      Delete(ObjectKind::kPod, name, "no longer part of the job");
    } else if (kept) {
      pods.Set(slot->second->ordinal, &pod);   // relabelled once the gates open (HoldInPlaceBarrier)
    } else if (old_run) {
      Delete(ObjectKind::kPod, name, "from run " + pod.run + "; this is run " + run);
    } else {
      pods.Set(slot->second->ordinal, &pod);
    }
  }
  return pods;
}

// Success: as the peers say (every worker of this run succeeded; under a rendezvous, some worker
// succeeded and none runs any more).
bool Planner::AllWorkersSucceeded(const RunPods& pods) {
  const int workers_done = WorkersIn(pods, PodPhase::kSucceeded);
  if (!peers_.Succeeded(workers_done, WorkersIn(pods, PodPhase::kRunning), job().spec.Find(RoleKind::kWorker)->replicas)) {
    return false;
  }
  SetCondition(ConditionType::kSucceeded, true, "WorkersSucceeded", "all workers finished successfully");
  SetCondition(ConditionType::kRunning, false, "WorkersSucceeded", "");
  ResolveWithoutPods("JobSucceeded");
  SetPhase(JobPhase::kSucceeded, "all " + std::to_string(workers_done) + " workers finished successfully");
  status().completion_time = WholeSeconds(now_);
  FinishedJob();
  return true;
}

bool Planner::OutOfRestarts(const std::string& what) {
  const int limit = job().spec.run_policy.backoff_limit;
  if (status().restart_count < limit) return false;
  Fail("BackoffLimitExceeded", what + " and the job has already been restarted " + std::to_string(status().restart_count) +
                                   " times (backoffLimit " + std::to_string(limit) + ")");
  CleanUp();
  return true;
}

// Counts a restart: against backoffLimit, or (a failure a rule ignores) in status.ignoredFailures.
// Returns how messages say so.
std::string Planner::CountRestart(bool counted) {
  if (!counted) {
    return "(ignored failure " + std::to_string(++status().ignored_failures) + ", not counted against backoffLimit)";
  }
  return "(restart " + std::to_string(++status().restart_count) + " of at most " +
         std::to_string(job().spec.run_policy.backoff_limit) + ")";
}

// A restart of the whole job: every pod of this run goes, the next run is wired afresh (new
// addresses mean new lists). Service-mode jobs replace only failed pods (DNS names are stable).
void Planner::Restart(const std::string& why, bool whole_job, bool counted) {
  const std::string count = CountRestart(counted);
  if (whole_job) {
    NewRun();
    DeletePods([](const ObservedPod&) { return true; }, "whole-job restart");
  }
  const std::string message = why + " " + count;
  SetCondition(ConditionType::kRestarting, true, "Restarting", message);
  SetCondition(ConditionType::kRunning, false, "Restarting", message);
  SetPhase(JobPhase::kRestarting, message);
}

// What failure rules and messages say a failure was: "pod wd-worker-2 failed with exit code 1".
std::string DescribeFailure(const std::string& pod_name, const ObservedPod& pod, bool stalled) {
  if (stalled) return "pod " + pod_name + " reports no training progress (" + pod.stalled.value_or("") + ")";
  if (pod.evicted) return "pod " + pod_name + " was evicted";
  std::string what = "pod " + pod_name + (pod.exit_code ? " failed with exit code " + std::to_string(*pod.exit_code) : " failed");
  const std::string& reason = !pod.termination_reason.empty() ? pod.termination_reason : pod.pod_reason;
  if (!reason.empty() && reason != "Error" && reason != "Completed") what += " (" + reason + ")";   // those say nothing more
  return what;
}

// What `rule` matched in a failure of a pod of `role` ("log line \"...\""; "" when only the exit
// code or a reason the description names did), or nullopt when it does not match.
// Reasons `described` (DescribeFailure's) already names are not repeated.
std::optional<std::string> MatchRule(const FailureRule& rule, const std::string& role, const ObservedPod& pod,
                                     bool stalled, const std::string& described) {
  if (!rule.roles.empty() && std::find(rule.roles.begin(), rule.roles.end(), role) == rule.roles.end()) return std::nullopt;
  std::vector<std::string> matched;
  if (rule.exit_codes_in) {
    const bool failed = !stalled && pod.exit_code && *pod.exit_code != 0;
    const bool listed = failed && std::count(rule.exit_codes.begin(), rule.exit_codes.end(), *pod.exit_code) > 0;
    if (!failed || listed != *rule.exit_codes_in) return std::nullopt;
  }
  if (!rule.reasons.empty()) {
    const std::string reasons[] = {pod.termination_reason, pod.pod_reason, pod.disruption_reason,
                                   stalled ? kStalledReason : ""};
    const auto it = std::find_if(std::begin(reasons), std::end(reasons), [&](const std::string& reason) {
      return !reason.empty() && std::count(rule.reasons.begin(), rule.reasons.end(), reason) > 0;
    });
    if (it == std::end(reasons)) return std::nullopt;
    if (!stalled && described.find("(" + *it + ")") == std::string::npos) matched.push_back("reason " + *it);
  }
  if (rule.log_regex) {
    if (stalled) return std::nullopt;
    const std::optional<std::string> line = rule.MatchingLine(pod.termination_message);
    if (!line) return std::nullopt;
    matched.push_back("log line " + Quote(line->size() > 200 ? line->substr(0, 200) + "..." : *line) + " matched");
  }
  return JoinStrings(matched, ", ");
}

// A failure's verdict: the first failure rule that matches it; else, for a stall, the sidecar's
// stallAction (None: no failure at all), for a failed pod its role's restartPolicy.
std::optional<Planner::Failure> Planner::Judge(const PodSlot& slot, const ObservedPod& pod, bool stalled) const {
  Failure f{&slot, &pod, stalled, FailureAction::kFailJob, DescribeFailure(slot.name, pod, stalled), "PodFailed", ""};
  for (const FailureRule& rule : job().spec.run_policy.failure_rules) {
    const std::optional<std::string> matched = MatchRule(rule, slot.role->name, pod, stalled, f.text);
    if (!matched) continue;
    f.action = rule.action;
    f.text = rule.Describe() + ": " + f.text + (matched->empty() ? "" : ", " + *matched);
    f.reason = "FailureRule";
    f.fail_message = f.text;
    return f;
  }
  if (stalled) {
    const StallAction action = job().spec.sidecar.stall_action;
    if (action == StallAction::kNone) return std::nullopt;
    f.action = action == StallAction::kFailJob ? FailureAction::kFailJob : FailureAction::kRestartJob;
    f.text += ", and spec.sidecar.stallAction is " + std::string(NameOf(action));
    f.reason = kStalledReason;
    f.fail_message = f.text;
    return f;
  }
  bool retryable = false;
  switch (slot.role->restart_policy) {
    case RestartPolicy::kNever: retryable = false; break;
    case RestartPolicy::kOnFailure: retryable = true; break;
    // Codes >= 128 are deaths by signal (OOM kill, preemption): worth another try.
    case RestartPolicy::kExitCode: retryable = pod.evicted || (pod.exit_code && *pod.exit_code >= 128); break;
  }
  f.action = retryable ? FailureAction::kRestartJob : FailureAction::kFailJob;
  f.fail_message = f.text + " and the " + slot.role->name + " restartPolicy does not restart it";
  return f;
}

// This run's failures: its failed pods, and its running pods reported stalled, each judged.
// Returns true when the plan ends here (an elastic launcher gave up: the job failed).
bool Planner::CollectFailures(const RunPods& pods, const std::set<std::string>& being_replaced,
                              std::vector<Failure>& failures) {
  for (const PodSlot& slot : slots_) {
    const ObservedPod* found = pods.Find(slot);
    if (!found) continue;
    const ObservedPod& pod = *found;
    const bool stalled = pod.phase == PodPhase::kRunning && pod.stalled;
    // Restarted in place by the kubelet, a trainer's end leaves its pod running: its sidecar says
    // the instance of this run ended, its container's last end says how (0: it finished).
    const bool trainer_ended = pod.phase == PodPhase::kRunning && pod.trainer && pod.trainer->EndedIn(status().run) &&
                               pod.run == std::to_string(status().run);
    if (trainer_ended && !pod.ReportsTrainerEnd()) {
      RequeueAfter(seconds(1));   // the kubelet has not reported the end yet
      continue;
    }
    if (pod.phase != PodPhase::kFailed && !stalled && !(trainer_ended && pod.exit_code != 0)) continue;
    if (being_replaced.count(pod.uid)) {
      Delete(ObjectKind::kPod, slot.name, "replacing the failed pod");
      continue;
    }
    const std::optional<int>& code = pod.exit_code;
    if (!stalled && code && code == peers_.GaveUpExitCode()) {
      // Its launcher gave up waiting for the minimum; so will every other member: no retry helps.
      Fail("ElasticBelowMinimum", "pod " + slot.name + " exited with code " + std::to_string(*code) +
                                      ": its launcher had fewer than " +
                                      std::to_string(job().spec.elastic->min_replicas) +
                                      " workers (spec.elastic.minReplicas) for spec.elastic.timeoutSeconds");
      CleanUp();
      return true;
    }
    if (auto failure = Judge(slot, pod, stalled)) failures.push_back(std::move(*failure));
  }
  return false;
}

// Returns true when the plan is complete (the job failed or is restarting).
bool Planner::HandleFailures(const RunPods& pods) {
  // Service mode and elastic jobs replace a failed pod alone, in the same run: until it is gone,
  // plans may still see it Failed. Its uid is recorded when its restart is counted, so it is
  // counted once.
  std::set<std::string> still_there;
  for (const ObservedPod& pod : observed_.pods) {
    if (status().replaced_pods.count(pod.uid)) still_there.insert(pod.uid);
  }
  status().replaced_pods = still_there;

  std::vector<Failure> failures;
  if (CollectFailures(pods, still_there, failures)) return true;
  if (failures.empty()) return !still_there.empty() && status().phase == JobPhase::kRestarting;
  // The earliest failure is the cause, and decides for all: a rank's peers often fail only because
  // it did (a killed trainer's peers see their connections reset and exit 1). At a tie (the times
  // have whole seconds) one worth a retry: a death by signal is the likelier cause. A stall (its
  // pod still runs) comes after every failed pod.
  std::stable_sort(failures.begin(), failures.end(), [](const Failure& a, const Failure& b) {
    const Time never = Time::max();
    const auto key = [&](const Failure& f) {
      return std::pair(f.stalled ? never : f.pod->finished.value_or(never), f.action == FailureAction::kFailJob);
    };
    return key(a) < key(b);
  });
  const Failure& cause = failures.front();
  if (cause.action == FailureAction::kFailJob) {
    // Each pod reports its own end: an earlier failure elsewhere may not be seen yet. Failing a
    // doomed job a few seconds later costs nothing; failing a job whose cause was worth a retry does.
    if (!cause.stalled && cause.pod->finished && now_ < *cause.pod->finished + kFailureSettle) {
      RequeueAfter(std::chrono::ceil<seconds>(*cause.pod->finished + kFailureSettle - now_));
      return true;
    }
    Fail(cause.reason, cause.fail_message);
    CleanUp();
    return true;
  }
  std::vector<const PodSlot*> failed;
  for (const Failure& failure : failures) failed.push_back(failure.slot);
  return RestartAfter(cause, failed, pods);
}

// A cause worth a retry: the job restarts as its kind of restart does (RestartPod: the failed pods
// alone, in the same run), counted against backoffLimit unless a rule ignores the failure.
// Returns true when the plan is complete.
bool Planner::RestartAfter(const Failure& cause, const std::vector<const PodSlot*>& failed, const RunPods& pods) {
  const bool counted = cause.action != FailureAction::kIgnore;
  if (counted && OutOfRestarts(cause.text)) return true;
  if (!counted) Event("Warning", "FailureIgnored", cause.text + "; restarting without counting it against backoffLimit");
  FailedPodCost cost = peers_.CostOfFailedPod();
  if (cause.action == FailureAction::kRestartPod && cost == FailedPodCost::kNewRun) cost = FailedPodCost::kReplacePod;
  switch (cost) {
    case FailedPodCost::kReplacePodInRun:
      ReplaceFailedPodsAlone(failed, pods);
      Event("Warning", "ReplacingPod", cause.text + "; replacing it alone, the other workers re-rendezvous without it " +
                                           CountRestart(counted));
      return false;   // the job goes on
    case FailedPodCost::kReplacePod:
      ReplaceFailedPodsAlone(failed, pods);
      Restart(cause.text + "; replacing it (its DNS name is kept, the other pods keep running)", false, counted);
      return true;
    case FailedPodCost::kNewRun: break;
  }
  if (RestartsInPlace(job(), settings_)) {
    const std::string blocker = InPlaceBlocker(pods);
    if (blocker.empty()) {
      RestartInPlace(cause.text, counted);
      return true;
    }
    Event("Normal", "RecreatingPods", "cannot restart in place: " + blocker);
  }
  Restart(cause.text + "; restarting the whole job, since a new pod means new addresses for every peer", true, counted);
  return true;
}

// ---- in-place restarts ----

// Why the job's pods cannot keep their addresses through a restart: a pod gone, being deleted,
// not running (failed as a pod: evicted, its node lost) or without its address. "" when they can.
std::string Planner::InPlaceBlocker(const RunPods& pods) const {
  for (const PodSlot& slot : slots_) {
    const ObservedPod* pod = pods.Find(slot);
    if (!pod) return "pod " + slot.name + " is gone";
    if (pod->terminating) return "pod " + slot.name + " is being deleted";
    if (pod->phase != PodPhase::kRunning) return "pod " + slot.name + " is " + (pod->evicted ? "evicted" : "not running");
    if (pod->pod_ip.empty()) return "pod " + slot.name + " has no address";
  }
  return "";
}

// A whole-job restart that keeps the pods: run R+1 is the same pods, behind the endpoints
// ConfigMap's barrier until every trainer is back at its gate (HoldInPlaceBarrier); the lists are
// unchanged. The pods are relabelled into the run once its gates open: the API writes of 1,000
// relabels would otherwise come before the gates (a trainer learns its run at the gate).
void Planner::RestartInPlace(const std::string& why, bool counted) {
  const std::string count = CountRestart(counted);
  NewRun();
  status().in_place_restart = InPlaceRestartStatus{status().run, WholeSeconds(now_), false};
  ++status().in_place_restarts;
  const std::string message = why + "; restarting the trainers in place, in their pods (run " +
                              std::to_string(status().run) + ") " + count;
  Event("Warning", "RestartingInPlace", message);
  SetCondition(ConditionType::kRestarting, true, "RestartingInPlace", message);
  SetCondition(ConditionType::kRunning, false, "RestartingInPlace", message);
  SetPhase(JobPhase::kRestarting, message);
  RequeueAfter(kInPlaceTimeout);
}

void Planner::Relabel(const ObservedPod& pod) {
  const std::string run = std::to_string(status().run);
  plan_.actions.push_back({Verb::kPatch, ObjectKind::kPod, pod.name, {{"metadata", {{"labels", {{kRunLabel, run}}}}}},
                           "restarted in place into run " + run});
}

// While the barrier holds: once every pod's trainer waits at its gate for this run, the barrier
// goes (PublishEndpoints writes the ConfigMap without it) and the gates open together; then the
// pods are relabelled into the run, and the restart is done. A pod gone, failed or moved meanwhile,
// or a trainer not back within kInPlaceTimeout: the pods are recreated (the same restart, not
// counted again). Returns true when the plan is complete.
bool Planner::HoldInPlaceBarrier(const RunPods& pods) {
  auto& in_place = status().in_place_restart;
  if (!in_place) return false;
  const int run = status().run;
  if (in_place->gates_open) {
    bool relabelled = true;
    for (const PodSlot& slot : slots_) {
      const ObservedPod* pod = pods.Find(slot);
      if (!pod || pod->run == std::to_string(run)) continue;
      Relabel(*pod);
      relabelled = false;
    }
    if (relabelled) in_place.reset();
    return false;
  }
  std::string blocker = InPlaceBlocker(pods);
  int waiting = 0;
  std::string late;   // the first pod whose trainer is not at the gate yet
  for (const PodSlot& slot : slots_) {
    const ObservedPod* pod = pods.Find(slot);
    if (pod && pod->trainer && pod->trainer->WaitsFor(run)) {
      ++waiting;
    } else if (late.empty()) {
      late = "pod " + slot.name + (pod && pod->trainer ? " (its trainer: " + std::string(pod->trainer->Reason()) + " in run " +
                                                             std::to_string(pod->trainer->run) + ")"
                                                       : "");
    }
  }
  const int total = static_cast<int>(slots_.size());
  const Time deadline = in_place->start_time + kInPlaceTimeout;
  if (blocker.empty() && waiting < total && now_ >= deadline) {
    blocker = std::to_string(total - waiting) + " of " + std::to_string(total) + " trainers did not come back to the gate within " +
              std::to_string(kInPlaceTimeout.count()) + "s, first " + late;
  }
  if (!blocker.empty()) {
    const std::string message = "the in-place restart into run " + std::to_string(run) + " cannot finish: " + blocker +
                                "; recreating the pods instead";
    Event("Warning", "InPlaceRestartFellBack", message);
    NewRun();
    DeletePods([](const ObservedPod&) { return true; }, "the in-place restart fell back to recreating the pods");
    SetCondition(ConditionType::kRestarting, true, "Restarting", message);
    SetPhase(JobPhase::kRestarting, message);
    return true;
  }
  if (waiting < total) {
    barrier_message_ = "restarting in place: " + std::to_string(waiting) + " of " + std::to_string(total) +
                       " trainers wait at the gate for run " + std::to_string(run);
    RequeueAfter(std::chrono::ceil<seconds>(deadline - now_));
    return false;
  }
  Event("Normal", "RestartedInPlace", "all " + std::to_string(total) + " trainers wait at the gate: run " + std::to_string(run) +
                                          " starts, " + std::to_string(std::chrono::duration_cast<seconds>(now_ - in_place->start_time).count()) +
                                          "s after the restart");
  in_place->gates_open = true;
  for (const PodSlot& slot : slots_) Relabel(*pods.Find(slot));
  return false;
}

void Planner::ReplaceFailedPodsAlone(const std::vector<const PodSlot*>& failed, const RunPods& pods) {
  for (const PodSlot* slot : failed) {
    Delete(ObjectKind::kPod, slot->name, "restart failed pod");
    status().replaced_pods.insert(pods.Find(*slot)->uid);
  }
}

// Elastic jobs: the workers that run are the job's members (each registers in etcd, and every
// change makes them all re-rendezvous): status.elastic follows them, with an event per change.
// A job below its minimum for longer than spec.elastic.timeoutSeconds fails.
bool Planner::TrackElasticMembers(const RunPods& pods) {
  if (!peers_.TracksMembers()) return false;
  const ElasticSpec& elastic = *job().spec.elastic;
  ElasticStatus& tracked = status().elastic ? *status().elastic : status().elastic.emplace();
  std::vector<std::string> members;
  for (const PodSlot& slot : slots_) {
    const ObservedPod* pod = pods.Find(slot);
    if (slot.role->kind == RoleKind::kWorker && pod && pod->phase == PodPhase::kRunning) members.push_back(slot.name);
  }
  const int count = static_cast<int>(members.size());
  const bool enough = count >= elastic.min_replicas;
  // Once a worker succeeded the job is ending: the others finish their own trainers, as fleetrun's
  // do once a node marked the job completed in etcd, and neither rendezvous nor wait.
  const bool finishing = WorkersIn(pods, PodPhase::kSucceeded) > 0;
  if (members != tracked.members) {
    if (enough && !finishing) ++tracked.rendezvous;
    Event("Normal", "MembershipChanged",
          MembershipChange(tracked.members, members) + ": " + std::to_string(count) + " worker(s) running (elastic " +
              std::to_string(elastic.min_replicas) + ".." + std::to_string(elastic.max_replicas) + ")" +
              (finishing ? "; the job is finishing"
               : enough  ? "; rendezvous " + std::to_string(tracked.rendezvous)
                         : "; below the minimum, the workers wait"));
    tracked.members = std::move(members);
  }
  if (enough || finishing) {
    tracked.below_minimum_since.reset();
    return false;
  }
  // Rounded up, as the deadline's start: the job waits at least the full timeout.
  if (!tracked.below_minimum_since) tracked.below_minimum_since = Time(std::chrono::ceil<seconds>(now_.time_since_epoch()));
  const Time deadline = *tracked.below_minimum_since + seconds(elastic.timeout_seconds);
  if (now_ < deadline) {
    RequeueAfter(std::chrono::duration_cast<seconds>(deadline - now_) + seconds(1));
    return false;
  }
  Fail("ElasticBelowMinimum", std::to_string(count) + " worker(s) ran, fewer than spec.elastic.minReplicas " +
                                  std::to_string(elastic.min_replicas) + ", for " +
                                  std::to_string(elastic.timeout_seconds) + " s (spec.elastic.timeoutSeconds)");
  CleanUp();
  return true;
}

// ---- the endpoint lists ----

// Addresses: once every pod of the run has one, the lists can be published (Service mode: the DNS
// names, known from the start). Under lists already published for this run, a pod that vanished
// or came back with another address was replaced: its peers hold its old address.
Hosts Planner::CollectHosts(const RunPods& pods) const {
  Hosts hosts;
  hosts.published = observed_.endpoints ? &*observed_.endpoints : nullptr;
  const std::string run = std::to_string(plan_.status.run);
  hosts.published_this_run = hosts.published && Annotation(*hosts.published, kRunAnnotation) == run;
  // Without lists (a rendezvous) the ConfigMap only opens the gates of the run, at once.
  if (!peers_.PublishesLists()) return hosts;
  hosts.by_ordinal.resize(slots_.size());
  hosts.compared_by_slot = !peers_.HostsKnownFromStart();
  const std::vector<std::string> published_hosts = hosts.published_this_run && hosts.compared_by_slot
      ? SplitString(Annotation(*hosts.published, kHostsAnnotation), ',') : std::vector<std::string>{};
  for (const PodSlot& slot : slots_) {
    const ObservedPod* pod = pods.Find(slot);
    std::string& host = hosts.by_ordinal[static_cast<size_t>(slot.ordinal)];
    host = SlotHost(job(), slot, !pod ? kNone : peers_.UsesNodeAddress() ? pod->host_ip : pod->pod_ip,
                    settings_.cluster_domain);
    if (peers_.HostsKnownFromStart()) continue;   // DNS names: never unknown, never replaced
    hosts.all_known = hosts.all_known && !host.empty();
    if (published_hosts.size() != slots_.size() || !hosts.replaced.empty()) continue;
    const std::string& before = published_hosts[static_cast<size_t>(slot.ordinal)];
    // A pod IP: a vanished pod can only come back with a new one. A node IP: it may come back on
    // the same node with the same address, so wait and compare.
    if (!pod && !pods.Occupied(slot) && peers_.VanishedPodMovesAway()) {
      hosts.replaced = "pod " + slot.name + " disappeared";
    } else if (!host.empty() && host != before) {
      hosts.replaced = "pod " + slot.name + " came back at " + host + " (was " + before + ")";
    }
  }
  return hosts;
}

bool Planner::RestartForReplacedPod(const Hosts& hosts) {
  if (hosts.replaced.empty()) return false;
  if (!OutOfRestarts(hosts.replaced)) {
    Restart(hosts.replaced + "; restarting the whole job so that every peer gets its new address", true);
  }
  return true;
}

bool Planner::NeedsWiring(const RunPods& pods, const Hosts& hosts) const {
  return !pods.AllOccupied() || (hosts.all_known && !hosts.UpToDate());
}

// Lists too long for the env travel as files (JobWiring::EnvFiles): the pods mount the env
// loader from its ConfigMap, made with the other children before them, and the condition says
// which variables a user's image must load (docs/env-contract.md). Decided when the wiring is.
void Planner::EnsureEnvLoader() {
  if (!wiring()) return;
  if (wiring()->file_variables().empty()) {
    Resolve(ConditionType::kEnvFromFiles, "ListsInEnv");
    // Its module also holds the gate of trainers restarted in place.
    if (RestartsInPlace(job(), settings_)) CreateEnvLoader();
    return;
  }
  std::string lists;
  for (const auto& [var, bytes] : wiring()->file_variables()) {
    lists += (lists.empty() ? "" : ", ") + var + " (about " + std::to_string(bytes / 1024) + " KiB)";
  }
  const std::string message = lists + " travel as files of " + EndpointsConfigMapName(job().name) +
                              ", which the env loader mounted on PYTHONPATH puts into the Python processes' os.environ";
  if (!status().IsTrue(ConditionType::kEnvFromFiles)) Event("Normal", "EnvFromFiles", message);
  SetCondition(ConditionType::kEnvFromFiles, true, "ListsTooLongForEnv", message);
  CreateEnvLoader();
}

void Planner::CreateEnvLoader() {
  const Json loader = BuildEnvLoaderConfigMap(job());
  if (!observed_.env_loader) {
    Create(ObjectKind::kConfigMap, loader, "the env loader of lists that travel as files");
  } else if (observed_.env_loader->value("data", Json::object()) != loader["data"]) {
    Json update = loader;
    update["metadata"]["resourceVersion"] = StringMember(ObjectMember(*observed_.env_loader, "metadata"), "resourceVersion");
    plan_.actions.push_back({Verb::kUpdate, ObjectKind::kConfigMap, Name(update), std::move(update), "another operator version"});
  }
}

// Missing pods: create them (a name still held by a terminating pod waits for it to go, so
// two live pods never share a (role, index)).
void Planner::CreateMissingPods(const RunPods& pods) {
  // A rendezvous whose workers begin to finish is ending: a new worker would wait for peers that
  // are done.
  if (peers_.TracksMembers() && WorkersIn(pods, PodPhase::kSucceeded) > 0) return;
  std::shared_ptr<const PodRecipe> recipe;
  for (const PodSlot& slot : slots_) {
    if (pods.Occupied(slot)) continue;
    if (!recipe) {
      const std::optional<int64_t> resume_step =
          status().checkpoint ? std::optional<int64_t>(status().checkpoint->step) : std::nullopt;
      recipe = std::make_shared<const PodRecipe>(
          PodRecipe{wired_->job, wired_->wiring, status().run, settings_, admission_, resume_step});
    }
    plan_.actions.push_back({Verb::kCreate, ObjectKind::kPod, slot.name, nullptr, "missing", recipe, slot.ordinal});
  }
}

// A run restarted in place is published behind a barrier (its sidecars hold their gates; the
// lists are the same), lifted once its trainers are all back at their gates.
void Planner::PublishEndpoints(const Hosts& hosts) {
  const std::string run = std::to_string(status().run);
  const auto& in_place = status().in_place_restart;
  const std::string barrier = in_place && !in_place->gates_open ? run : "";
  if (!hosts.all_known || (hosts.UpToDate() && Annotation(*hosts.published, api::kBarrierAnnotation) == barrier)) return;
  const std::string name = EndpointsConfigMapName(job().name);
  Json annotations = {{kRunAnnotation, run}, {kHostsAnnotation, hosts.Digest()}};
  if (!barrier.empty()) annotations[api::kBarrierAnnotation] = barrier;
  Json cm = {{"apiVersion", "v1"}, {"kind", "ConfigMap"},
             {"metadata", {{"name", name}, {"namespace", job().ns},
                           {"labels", {{kJobLabel, job().name}}},
                           {"annotations", std::move(annotations)},
                           {"ownerReferences", Json::array({OwnerReference(job())})}}},
             {"data", wiring()->EndpointsData(hosts.by_ordinal)}};
  if (!wiring()->file_variables().empty()) cm["data"][kEnvFilesRunKey] = run;   // for the env loader
  if (hosts.published) {
    cm["metadata"]["resourceVersion"] = StringMember(ObjectMember(*hosts.published, "metadata"), "resourceVersion");
    plan_.actions.push_back({Verb::kUpdate, ObjectKind::kConfigMap, name, cm, "run " + run});
  } else {
    Create(ObjectKind::kConfigMap, cm, "every pod has an address");
  }
  if (!barrier.empty()) return;   // the gates stay closed: RestartingInPlace said it
  Event("Normal", "EndpointsPublished",
        peers_.PublishesLists()
            ? "published the endpoint lists of " + std::to_string(slots_.size()) + " pods for run " + run
            : "opened the pods' gates for run " + run + " (elastic: the workers find each other in etcd)");
}

// ---- the job's phase ----

void Planner::Summarize(const RunPods& pods, const Hosts& hosts) {
  CheckPending(pods);
  CheckProgress(pods);
  PublishProgress();
  if (!barrier_message_.empty()) return SetPhase(JobPhase::kRestarting, barrier_message_);
  if (pods.stale) return SetPhase(JobPhase::kRestarting, status().message);
  if (peers_.TracksMembers()) return SummarizeElastic();
  bool all_running = pods.size() == slots_.size();
  for (const PodSlot& slot : slots_) {
    // Workers that already finished do not make the job any less Running.
    const ObservedPod* pod = pods.Find(slot);
    if (pod) all_running = all_running && (pod->phase == PodPhase::kRunning || pod->phase == PodPhase::kSucceeded);
  }
  if (!pods.AllOccupied() || pods.size() < slots_.size() || !hosts.all_known) {
    SetPhase(JobPhase::kPending, "creating pods and waiting for their addresses");
  } else if (!hosts.UpToDate() || !all_running) {
    SetPhase(JobPhase::kStarting, hosts.UpToDate() ? "waiting for all pods to run" : "publishing the endpoint lists");
  } else {
    if (status().IsTrue(ConditionType::kRestarting)) SetCondition(ConditionType::kRestarting, false, "Running", "");
    SetCondition(ConditionType::kRunning, true, "AllPodsRunning", "all pods are running with their endpoint lists");
    SetPhase(JobPhase::kRunning, "");
  }
}

// Elastic: Running while at least the minimum of workers run (the others may be pending or being
// replaced), else waiting for them with the time left.
void Planner::SummarizeElastic() {
  const ElasticSpec& elastic = *job().spec.elastic;
  const ElasticStatus& tracked = *status().elastic;
  const std::string running = std::to_string(tracked.members.size()) + " of " +
                              std::to_string(job().spec.Find(RoleKind::kWorker)->replicas) + " workers running (elastic " +
                              std::to_string(elastic.min_replicas) + ".." + std::to_string(elastic.max_replicas) + ")";
  if (!tracked.below_minimum_since) {
    if (status().IsTrue(ConditionType::kRestarting)) SetCondition(ConditionType::kRestarting, false, "Running", "");
    SetCondition(ConditionType::kRunning, true, "ElasticMinimumRunning", running);
    return SetPhase(JobPhase::kRunning, running);
  }
  const std::string waiting = running + "; waiting for " + std::to_string(elastic.min_replicas) +
                              " until " + FormatRfc3339(*tracked.below_minimum_since + seconds(elastic.timeout_seconds)) +
                              " (spec.elastic.timeoutSeconds), then the job fails";
  if (status().Find(ConditionType::kRunning)) SetCondition(ConditionType::kRunning, false, "BelowMinimum", waiting);
  SetPhase(JobPhase::kStarting, waiting);
}

// The sidecars' training-progress conditions: ranks reported stalled make the job's Stalled
// condition (its message names them), and a Warning event when it turns on.
void Planner::CheckProgress(const RunPods& pods) {
  std::vector<std::string> stalled;
  std::string first_message;
  for (const PodSlot& slot : slots_) {
    const ObservedPod* pod = pods.Find(slot);
    if (!pod || pod->phase != PodPhase::kRunning || !pod->stalled) continue;
    stalled.push_back(slot.name);
    if (first_message.empty()) first_message = *pod->stalled;
  }
  if (stalled.empty()) return Resolve(ConditionType::kStalled, "Progressing");
  std::string message = std::to_string(stalled.size()) + " pod(s) report no training progress: " + JoinStrings(stalled, ", ");
  if (!first_message.empty()) message += " (" + first_message + ")";
  Raise(ConditionType::kStalled, "Warning", "TrainingStalled", message);
}

// status.progress: the collector's latest summary of this run, written when it differs from the
// one written, and at most once per progress interval whatever makes the job reconcile: the bound
// on the status writes progress causes (one per job per interval, for any number of ranks).
void Planner::PublishProgress() {
  if (!observed_.progress) return;
  std::optional<Progress>& written = status().progress;
  std::optional<Time> updated;
  if (written) {
    Progress same = *written;
    updated = std::exchange(same.update_time, std::nullopt);
    if (same == *observed_.progress) return;
  }
  const Time due = updated ? *updated + settings_.progress_interval : now_;
  if (now_ < due) {
    RequeueAfter(std::chrono::ceil<seconds>(due - now_));
    return;
  }
  written = *observed_.progress;
  written->update_time = now_;
}

// status.replicaStatuses: per role, this run's pods that exist and that this plan does not
// delete (a suspended, failed or finished job shows what is left of it, not what it had).
void Planner::CountPods() {
  const std::string run = std::to_string(status().run);
  std::map<const RoleSpec*, ReplicaStatus> counts;
  for (const ObservedPod& pod : observed_.pods) {
    const auto slot = slot_of_.find(pod.name);
    if (slot == slot_of_.end() || pod.terminating || pod.run != run ||
        deleted_.count({ObjectKind::kPod, pod.name})) {
      continue;
    }
    ReplicaStatus& c = counts[slot->second->role];
    if (pod.phase == PodPhase::kSucceeded) ++c.succeeded;
    else if (pod.phase == PodPhase::kFailed) ++c.failed;
    else ++c.active;
    if (pod.phase == PodPhase::kRunning && pod.ready) ++c.ready;
  }
  std::map<std::string, ReplicaStatus> replicas;
  int heter_ready = 0;  // one printer column for all heter stages
  for (const RoleSpec& role : job().spec.roles) {
    ReplicaStatus& c = replicas[role.name] = counts[&role];
    c.replicas = role.replicas;
    if (role.kind == RoleKind::kHeter) heter_ready += c.ready;
  }
  status().replica_statuses = std::move(replicas);
  status().heter_ready = heter_ready;
}

// Pods the scheduler cannot place: after pendingTimeoutSeconds, a condition quoting its reason
// (not a gated pod: no scheduler has tried to place it yet).
void Planner::CheckPending(const RunPods& pods) {
  const seconds timeout(job().spec.run_policy.pending_timeout_seconds);
  std::string stuck;
  for (const PodSlot& slot : slots_) {   // in slot order: the same pod is quoted every time
    const ObservedPod* pod = pods.Find(slot);
    if (!pod || pod->phase != PodPhase::kPending || !pod->pod_ip.empty() || pod->gated) continue;
    const std::optional<Time>& created = pod->created;
    if (!created) continue;
    if (now_ - *created < timeout) {
      RequeueAfter(std::chrono::duration_cast<seconds>(timeout - (now_ - *created)) + seconds(1));
      continue;
    }
    const std::string why = pod->unschedulable.value_or("no reason given by the scheduler");
    stuck = "pod " + slot.name + " has been Pending for more than " + std::to_string(timeout.count()) + "s (" + why + ")";
    break;
  }
  if (stuck.empty()) return Resolve(ConditionType::kUnschedulable, "PodsScheduled");
  Raise(ConditionType::kUnschedulable, "Warning", "PodPending", stuck);
}

// The latest end of a pod's failing main container: the state.terminated (else, restarted in
// place, the lastState.terminated) of the first that exited non-zero, else of the first that
// ended; null when none has.
const Json* FailingContainer(const Json& status, const Json** container) {
  const Json* first = nullptr;
  for (const Json& c : ArrayMember(status, "containerStatuses")) {
    const Json* terminated = &ObjectMember(ObjectMember(c, "state"), "terminated");
    if (terminated->empty()) terminated = &ObjectMember(ObjectMember(c, "lastState"), "terminated");
    if (terminated->empty()) continue;
    if (MemberAs(*terminated, "exitCode", AsInt<int>).value_or(0) != 0) {
      *container = &c;
      return terminated;
    }
    if (!first) {
      first = terminated;
      *container = &c;
    }
  }
  return first;
}

// A termination message's tail, where a log's last lines are: at most kMaxTerminationMessage bytes.
std::string MessageTail(const std::string& message) {
  const size_t keep = ObservedPod::kMaxTerminationMessage;
  return message.size() <= keep ? message : message.substr(message.size() - keep);
}

// A container status's terminated messages cut to what Read keeps (the cache holds no more).
void BoundTerminationMessage(Json& container) {
  for (const char* which : {"state", "lastState"}) {
    auto state = container.find(which);
    if (state == container.end() || !state->is_object()) continue;
    auto terminated = state->find("terminated");
    if (terminated == state->end() || !terminated->is_object()) continue;
    auto message = terminated->find("message");
    if (message != terminated->end() && message->is_string()) *message = MessageTail(message->get<std::string>());
  }
}

}  // namespace

ObservedPod ObservedPod::Read(const Json& pod) {
  ObservedPod out;
  const Json& meta = ObjectMember(pod, "metadata");
  out.name = StringMember(meta, "name");
  out.uid = StringMember(meta, "uid");
  out.run = Label(pod, kRunLabel);
  out.created = ParseRfc3339(StringMember(meta, "creationTimestamp"));
  out.terminating = meta.contains("deletionTimestamp");
  const Json& status = ObjectMember(pod, "status");
  out.phase = ReadPodPhase(MemberAs(status, "phase", AsString).value_or("Pending"));
  out.pod_reason = StringMember(status, "reason");
  out.evicted = out.pod_reason == "Evicted";
  out.pod_ip = StringMember(status, "podIP");
  out.host_ip = StringMember(status, "hostIP");
  bool ready_seen = false;
  for (const Json& c : ArrayMember(status, "conditions")) {
    const std::string& type = StringMember(c, "type");
    const std::string& value = StringMember(c, "status");
    if (type == "Ready" && !ready_seen) {
      ready_seen = true;
      out.ready = value == "True";
    } else if (type == "PodScheduled" && value == "False" && StringMember(c, "reason") == "SchedulingGated") {
      out.gated = true;
    } else if (type == "PodScheduled" && value == "False") {
      out.unschedulable = StringMember(c, "reason") + ": " + StringMember(c, "message");
    } else if (type == kProgressConditionType && value == "False" && StringMember(c, "reason") == "Stalled" && !out.stalled) {
      out.stalled = StringMember(c, "message");
    } else if (type == "DisruptionTarget" && value == "True") {
      out.disruption_reason = StringMember(c, "reason");
    } else if (type == kCheckpointConditionType && value == "True" && StringMember(c, "reason") == api::kCheckpointSaved) {
      const auto step = api::CheckpointStepOf(StringMember(c, "message"));
      const auto time = ParseRfc3339(StringMember(c, "lastTransitionTime"));
      if (step && time) out.checkpoint = ObservedPod::Checkpoint{*step, *time};
    } else if (type == api::kTrainerConditionType) {
      out.trainer = api::TrainerReport::FromCondition(StringMember(c, "reason"), StringMember(c, "message"));
      out.trainer_since = ParseRfc3339(StringMember(c, "lastTransitionTime"));
    }
  }
  const Json* container = nullptr;
  const Json* failing = FailingContainer(status, &container);
  if (failing) {
    out.running_since = ParseRfc3339(StringMember(ObjectMember(ObjectMember(*container, "state"), "running"), "startedAt"));
    out.exit_code = MemberAs(*failing, "exitCode", AsInt<int>).value_or(0);
    out.finished = ParseRfc3339(StringMember(*failing, "finishedAt"));
    out.termination_reason = StringMember(*failing, "reason");
    out.termination_message = MessageTail(StringMember(*failing, "message"));
  }
  return out;
}

bool ObservedPod::ReportsTrainerEnd() const {
  if (!exit_code) return false;
  // Restarted in place, the container runs again since before its sidecar saw the trainer end (by
  // the node's clock, both; whole seconds): the kubelet has not reported that end yet, and the end
  // shown is an earlier instance's.
  return !(running_since && trainer_since && *running_since + seconds(1) < *trainer_since);
}

Json ObservedPod::Trim(const Json& pod) {
  // Kept by name rather than dropped by name: whatever else a pod grows (managedFields, a
  // webhook's annotations) stays out of the cache too.
  const auto keep = [](const Json& from, std::initializer_list<const char*> keys) {
    Json out = Json::object();
    if (!from.is_object()) return out;
    for (const char* key : keys) {
      auto it = from.find(key);
      if (it != from.end()) out[key] = *it;
    }
    return out;
  };
  Json out = keep(pod, {"apiVersion", "kind"});
  out["metadata"] = keep(ObjectMember(pod, "metadata"), {"name", "namespace", "uid", "resourceVersion", "labels",
                                                "ownerReferences", "creationTimestamp", "deletionTimestamp"});
  const Json& status = ObjectMember(pod, "status");
  Json trimmed_status = keep(status, {"phase", "reason", "podIP", "hostIP", "conditions"});
  Json containers = Json::array();
  for (const Json& c : ArrayMember(status, "containerStatuses")) {
    Json kept = keep(c, {"name", "state", "lastState"});
    BoundTerminationMessage(kept);
    containers.push_back(std::move(kept));
  }
  if (!containers.empty()) trimmed_status["containerStatuses"] = std::move(containers);
  if (pod.contains("status")) out["status"] = std::move(trimmed_status);
  return out;
}

bool WiredJob::For(const FleetJob& other, int port_base, const std::string& domain) const {
  // Replicas too: an elastic job admitted with fewer workers is wired for those (Planner::job()).
  return job && job->uid == other.uid && job->ns == other.ns && job->name == other.name &&
         job->generation == other.generation && host_port_base == port_base && cluster_domain == domain &&
         ReplicaSignature(job->spec) == ReplicaSignature(other.spec);
}

Json Action::Object() const {
  if (!recipe) return object;
  const PodSlot& slot = recipe->wiring->slots().at(static_cast<size_t>(ordinal));
  Json pod = BuildPod(*recipe->job, slot, *recipe->wiring, recipe->run, recipe->settings, recipe->resume_step);
  // A conflict fails the job before any pod is made (StartAdmitted): none is left here.
  if (recipe->admission) (void)kueue::ApplyAdmission(*recipe->admission, slot.role->name, pod);
  return pod;
}

ReconcilePlan PlanReconcile(const FleetJobObject& job, const FleetJobStatus& status, const Observed& observed,
                            Time now, const OperatorSettings& settings) {
  return Planner(job, status, observed, now, settings).Run();
}

}  // namespace fleet::op
