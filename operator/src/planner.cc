#include "fleet/operator/planner.h"

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <string_view>
#include <unordered_map>

#include "fleet/base/strings.h"
#include "fleet/base/time.h"
#include "fleet/operator/pod_builder.h"
#include "fleet/operator/wiring.h"

namespace fleet::op {
namespace {

using std::chrono::seconds;

// ---- reading pods ----

// Members by reference (Json::value would copy whole sub-objects, for every pod on every
// reconcile): the member when it has the right type, else an empty one.
const Json& Obj(const Json& parent, const char* key) {
  static const Json empty = Json::object();
  if (!parent.is_object()) return empty;
  auto it = parent.find(key);
  return it != parent.end() && it->is_object() ? *it : empty;
}
const Json& Arr(const Json& parent, const char* key) {
  static const Json empty = Json::array();
  if (!parent.is_object()) return empty;
  auto it = parent.find(key);
  return it != parent.end() && it->is_array() ? *it : empty;
}
// A string member by reference, or `fallback` (which must outlive the call's use).
const std::string& Str(const Json& parent, const char* key, const std::string& fallback) {
  if (!parent.is_object()) return fallback;
  auto it = parent.find(key);
  return it != parent.end() && it->is_string() ? it->get_ref<const std::string&>() : fallback;
}
const std::string kNone;
const std::string kPending = "Pending";

const std::string& Label(const Json& obj, const char* key) { return Str(Obj(Obj(obj, "metadata"), "labels"), key, kNone); }
const std::string& Name(const Json& obj) { return Str(Obj(obj, "metadata"), "name", kNone); }
bool Terminating(const Json& obj) { return Obj(obj, "metadata").contains("deletionTimestamp"); }
const std::string& Phase(const Json& pod) { return Str(Obj(pod, "status"), "phase", kPending); }
bool Finished(const Json& pod) {
  const std::string& phase = Phase(pod);
  return phase == "Succeeded" || phase == "Failed";
}

bool PodReady(const Json& pod) {
  for (const Json& c : Arr(Obj(pod, "status"), "conditions")) {
    if (Str(c, "type", kNone) == "Ready") return Str(c, "status", kNone) == "True";
  }
  return false;
}

// The exit code of the pod's first terminated main container (the training process).
std::optional<int> ExitCode(const Json& pod) {
  for (const Json& cs : Arr(Obj(pod, "status"), "containerStatuses")) {
    const Json& state = Obj(cs, "state");
    if (state.contains("terminated")) return state["terminated"].value("exitCode", 0);
  }
  return std::nullopt;
}

bool Evicted(const Json& pod) { return Str(Obj(pod, "status"), "reason", kNone) == "Evicted"; }

// The pod's host for the endpoint lists, once known.
const std::string& PodHost(const Json& pod, Network network) {
  return Str(Obj(pod, "status"), network == Network::kHostNetwork ? "hostIP" : "podIP", kNone);
}

// ---- status ----

Json FindCondition(const Json& status, const std::string& type) {
  for (const Json& c : Arr(status, "conditions")) {
    if (c.value("type", "") == type) return c;
  }
  return nullptr;
}

// Sets a condition, keeping lastTransitionTime when its status does not change.
void SetCondition(Json& status, const std::string& type, bool value, const std::string& reason,
                  const std::string& message, Time now) {
  Json conditions = Arr(status, "conditions");
  const std::string v = value ? "True" : "False";
  for (Json& c : conditions) {
    if (c.value("type", "") != type) continue;
    if (c.value("status", "") != v) c["lastTransitionTime"] = FormatRfc3339(now);
    c["status"] = v;
    c["reason"] = reason;
    c["message"] = message;
    status["conditions"] = conditions;
    return;
  }
  conditions.push_back({{"type", type}, {"status", v}, {"reason", reason}, {"message", message},
                        {"lastTransitionTime", FormatRfc3339(now)}});
  status["conditions"] = conditions;
}

bool ConditionTrue(const Json& status, const std::string& type) {
  Json c = FindCondition(status, type);
  return !c.is_null() && c.value("status", "") == "True";
}

// This run's live pods, by slot ordinal (a plan visits every slot several times: one hash
// lookup per pod when the plan starts, array indexing after).
class RunPods {
 public:
  explicit RunPods(size_t slots) : by_ordinal_(slots, nullptr) {}
  const Json* Find(const PodSlot& slot) const { return by_ordinal_[static_cast<size_t>(slot.ordinal)]; }
  void Set(int ordinal, const Json* pod) {
    count_ += by_ordinal_[static_cast<size_t>(ordinal)] == nullptr;
    by_ordinal_[static_cast<size_t>(ordinal)] = pod;
  }
  size_t size() const { return count_; }

 private:
  std::vector<const Json*> by_ordinal_;
  size_t count_ = 0;
};

class Planner {
 public:
  Planner(const Json& object, const Observed& observed, Time now, const OperatorSettings& settings)
      : object_(object), observed_(observed), now_(now), settings_(settings) {
    plan_.status = Obj(object, "status");
    if (!plan_.status.is_object()) plan_.status = Json::object();
  }

  ReconcilePlan Run();

 private:
  Json& status() { return plan_.status; }
  std::string PhaseNow() const { return plan_.status.value("phase", ""); }
  int Restarts() const { return plan_.status.value("restartCount", 0); }
  // The pods' generation: a new run (new pods, new lists) after a whole-job restart, a resume or
  // a change of replicas. Only failure restarts count against backoffLimit.
  int CurrentRun() const { return plan_.status.value("run", 0); }
  void NewRun() { status()["run"] = CurrentRun() + 1; }
  void Event(const std::string& type, const std::string& reason, const std::string& message) {
    plan_.events.push_back({type, reason, message});
  }
  void RequeueAfter(seconds after) {
    after = std::max(after, seconds(1));
    if (!plan_.requeue_after || after < *plan_.requeue_after) plan_.requeue_after = after;
  }
  void SetPhase(const std::string& phase, const std::string& message) {
    if (PhaseNow() != phase) {
      const bool bad = phase == "Failed" || phase == "Restarting";
      Event(bad ? "Warning" : "Normal", phase, message.empty() ? "FleetJob is " + phase : message);
    }
    status()["phase"] = phase;
    status()["message"] = message;
  }
  void Fail(const std::string& reason, const std::string& message);
  void Delete(ObjectKind kind, const std::string& name, const std::string& why) {
    if (!deleted_.insert({kind, name}).second) return;  // one delete per object and plan
    plan_.actions.push_back({Verb::kDelete, kind, name, nullptr, why});
  }
  void Create(ObjectKind kind, Json object, const std::string& why) {
    std::string name = Name(object);
    plan_.actions.push_back({Verb::kCreate, kind, name, std::move(object), why});
  }
  void DeletePods(const std::function<bool(const Json&)>& which, const std::string& why) {
    for (const Json& pod : observed_.pods) {
      if (!Terminating(pod) && which(pod)) Delete(ObjectKind::kPod, Name(pod), why);
    }
  }
  void CleanUp();
  void FinishedJob();
  bool HandleFailures(const RunPods& current);
  void Restart(const std::string& why, bool whole_job);
  void CountRoles(const RunPods& current);
  void CheckProgress(const RunPods& current);
  void CheckPending(const RunPods& current);
  // The job's wiring, rendered on first use (milliseconds for a big job: not on every plan);
  // nullptr after failing the job when it cannot be wired.
  const JobWiring* Wiring() {
    if (!wiring_) {
      auto built = JobWiring::Build(*job_, settings_.host_port_base, settings_.cluster_domain);
      if (!built) {
        Fail("InvalidSpec", built.error());
        FinishedJob();
        return nullptr;
      }
      wiring_.emplace(std::move(*built));
    }
    return &*wiring_;
  }

  const Json& object_;
  const Observed& observed_;
  const Time now_;
  const OperatorSettings& settings_;
  ReconcilePlan plan_;
  std::optional<FleetJob> job_;
  RunPolicy policy_;   // job_'s, or what could be read of it when the spec is invalid
  std::vector<PodSlot> slots_;
  std::set<std::pair<ObjectKind, std::string>> deleted_;
  std::optional<JobWiring> wiring_;
};

void Planner::Fail(const std::string& reason, const std::string& message) {
  SetCondition(status(), "Failed", true, reason, message, now_);
  SetCondition(status(), "Running", false, reason, message, now_);
  SetCondition(status(), "Restarting", false, reason, message, now_);
  SetPhase("Failed", message);
  if (!status().contains("completionTime")) status()["completionTime"] = FormatRfc3339(now_);
}

// What is left of a finished job, per cleanPodPolicy: Running deletes pods still running
// (servers, heter trainers), All deletes every pod, None keeps them.
void Planner::CleanUp() {
  switch (policy_.clean_pod_policy) {
    case CleanPodPolicy::kNone: return;
    case CleanPodPolicy::kAll: DeletePods([](const Json&) { return true; }, "cleanPodPolicy All"); return;
    case CleanPodPolicy::kRunning:
      DeletePods([](const Json& pod) { return !Finished(pod); }, "cleanPodPolicy Running");
      return;
  }
}

void Planner::FinishedJob() {
  CleanUp();
  const auto ttl = policy_.ttl_seconds_after_finished;
  if (!ttl) return;
  const auto finished = ParseRfc3339(status().value("completionTime", ""));
  const Time expiry = finished.value_or(now_) + seconds(*ttl);
  if (now_ >= expiry) {
    plan_.actions.push_back({Verb::kDelete, ObjectKind::kFleetJob, Name(object_), nullptr, "ttlSecondsAfterFinished"});
  } else {
    RequeueAfter(std::chrono::duration_cast<seconds>(expiry - now_) + seconds(1));
  }
}

// A restart of the whole job: every pod of this run goes, the next run is wired afresh (new
// addresses mean new lists). Service-mode jobs replace only failed pods (DNS names are stable).
void Planner::Restart(const std::string& why, bool whole_job) {
  const int restarts = Restarts() + 1;
  status()["restartCount"] = restarts;
  if (whole_job) {
    NewRun();
    DeletePods([](const Json&) { return true; }, "whole-job restart");
  }
  const std::string message = why + " (restart " + std::to_string(restarts) + " of at most " +
                              std::to_string(job_->spec.run_policy.backoff_limit) + ")";
  SetCondition(status(), "Restarting", true, "Restarting", message, now_);
  SetCondition(status(), "Running", false, "Restarting", message, now_);
  SetPhase("Restarting", message);
}

// Returns true when the plan is complete (the job failed or is restarting).
bool Planner::HandleFailures(const RunPods& current) {
  // Service mode replaces a failed pod alone, in the same run: until it is gone, plans may still
  // see it Failed. Its uid is recorded when its restart is counted, so it is counted once.
  std::set<std::string> replaced;
  for (const Json& uid : Arr(status(), "replacedPods")) {
    if (uid.is_string()) replaced.insert(uid.get<std::string>());
  }
  std::set<std::string> still_there;
  for (const Json& pod : observed_.pods) {
    const std::string& uid = Str(Obj(pod, "metadata"), "uid", kNone);
    if (replaced.count(uid)) still_there.insert(uid);
  }
  if (still_there.empty()) status().erase("replacedPods");
  else status()["replacedPods"] = still_there;

  std::vector<const PodSlot*> retry;
  for (const PodSlot& slot : slots_) {
    const Json* found = current.Find(slot);
    if (!found || Phase(*found) != "Failed") continue;
    const Json& pod = *found;
    if (still_there.count(Str(Obj(pod, "metadata"), "uid", kNone))) {
      Delete(ObjectKind::kPod, slot.name, "replacing the failed pod");
      continue;
    }
    const auto code = ExitCode(pod);
    const bool evicted = Evicted(pod);
    const std::string what = "pod " + slot.name + (evicted ? " was evicted" :
                             code ? " failed with exit code " + std::to_string(*code) : " failed");
    bool retryable = false;
    switch (slot.role->restart_policy) {
      case RestartPolicy::kNever: retryable = false; break;
      case RestartPolicy::kOnFailure: retryable = true; break;
      // Codes >= 128 are deaths by signal (OOM kill, preemption): worth another try.
      case RestartPolicy::kExitCode: retryable = evicted || (code && *code >= 128); break;
    }
    if (!retryable) {
      Fail("PodFailed", what + " and the " + slot.role->name + " restartPolicy does not restart it");
      CleanUp();
      return true;
    }
    retry.push_back(&slot);
  }
  if (retry.empty()) return !still_there.empty() && PhaseNow() == "Restarting";
  const std::string first = "pod " + retry.front()->name + (Evicted(*current.Find(*retry.front())) ? " was evicted" : " failed");
  if (Restarts() >= job_->spec.run_policy.backoff_limit) {
    Fail("BackoffLimitExceeded", first + " and the job has already been restarted " + std::to_string(Restarts()) +
                                     " times (backoffLimit " + std::to_string(job_->spec.run_policy.backoff_limit) + ")");
    CleanUp();
    return true;
  }
  if (job_->spec.network == Network::kService) {
    for (const PodSlot* slot : retry) {
      Delete(ObjectKind::kPod, slot->name, "restart failed pod");
      still_there.insert(Str(Obj(*current.Find(*slot), "metadata"), "uid", kNone));
    }
    status()["replacedPods"] = still_there;
    Restart(first + "; replacing it (its DNS name is kept, the other pods keep running)", false);
  } else {
    Restart(first + "; restarting the whole job, since a new pod means new addresses for every peer", true);
  }
  return true;
}

// The sidecars' training-progress conditions: ranks reported stalled make the job's Stalled
// condition (its message names them), and a Warning event when it turns on.
void Planner::CheckProgress(const RunPods& current) {
  std::vector<std::string> stalled;
  std::string first_message;
  for (const PodSlot& slot : slots_) {
    const Json* pod = current.Find(slot);
    if (!pod || Phase(*pod) != "Running") continue;
    for (const Json& c : Arr(Obj(*pod, "status"), "conditions")) {
      if (Str(c, "type", kNone) != kProgressConditionType || Str(c, "status", kNone) != "False") continue;
      if (Str(c, "reason", kNone) != "Stalled") continue;
      stalled.push_back(slot.name);
      if (first_message.empty()) first_message = Str(c, "message", kNone);
    }
  }
  if (!stalled.empty()) {
    std::string message = std::to_string(stalled.size()) + " pod(s) report no training progress: " + JoinStrings(stalled, ", ");
    if (!first_message.empty()) message += " (" + first_message + ")";
    if (!ConditionTrue(status(), "Stalled")) Event("Warning", "Stalled", message);
    SetCondition(status(), "Stalled", true, "TrainingStalled", message, now_);
  } else if (!FindCondition(status(), "Stalled").is_null()) {
    SetCondition(status(), "Stalled", false, "Progressing", "", now_);
  }
}

void Planner::CountRoles(const RunPods& current) {
  Json replicas = Json::object();
  for (const RoleSpec& role : job_->spec.roles) {
    int active = 0, ready = 0, succeeded = 0, failed = 0;
    for (const PodSlot& slot : slots_) {
      if (slot.role != &role) continue;
      const Json* pod = current.Find(slot);
      if (!pod) continue;
      const std::string& phase = Phase(*pod);
      if (phase == "Succeeded") ++succeeded;
      else if (phase == "Failed") ++failed;
      else ++active;
      if (phase == "Running" && PodReady(*pod)) ++ready;
    }
    replicas[role.name] = {{"replicas", role.replicas}, {"active", active}, {"ready", ready},
                           {"succeeded", succeeded}, {"failed", failed}};
  }
  status()["replicaStatuses"] = replicas;
  int heter_ready = 0;  // one printer column for all heter stages
  for (const RoleSpec& role : job_->spec.roles) {
    if (role.kind == RoleKind::kHeter) heter_ready += replicas[role.name]["ready"].get<int>();
  }
  status()["heterReady"] = heter_ready;
}

// Pods the scheduler cannot place: after pendingTimeoutSeconds, a condition quoting its reason.
void Planner::CheckPending(const RunPods& current) {
  const seconds timeout(job_->spec.run_policy.pending_timeout_seconds);
  std::string stuck;
  for (const PodSlot& slot : slots_) {   // in slot order: the same pod is quoted every time
    const Json* pod = current.Find(slot);
    if (!pod) continue;
    const std::string& name = slot.name;
    if (Phase(*pod) != "Pending" || !PodHost(*pod, Network::kPodIP).empty()) continue;
    const auto created = ParseRfc3339(Obj(*pod, "metadata").value("creationTimestamp", ""));
    if (!created) continue;
    if (now_ - *created < timeout) {
      RequeueAfter(std::chrono::duration_cast<seconds>(timeout - (now_ - *created)) + seconds(1));
      continue;
    }
    std::string why = "no reason given by the scheduler";
    for (const Json& c : Arr(Obj(*pod, "status"), "conditions")) {
      if (c.value("type", "") == "PodScheduled" && c.value("status", "") == "False") {
        why = c.value("reason", "") + ": " + c.value("message", "");
      }
    }
    stuck = "pod " + name + " has been Pending for more than " + std::to_string(timeout.count()) + "s (" + why + ")";
    break;
  }
  if (!stuck.empty()) {
    if (!ConditionTrue(status(), "Unschedulable")) Event("Warning", "Unschedulable", stuck);
    SetCondition(status(), "Unschedulable", true, "PodPending", stuck, now_);
  } else if (!FindCondition(status(), "Unschedulable").is_null()) {
    SetCondition(status(), "Unschedulable", false, "PodsScheduled", "", now_);
  }
}

ReconcilePlan Planner::Run() {
  const Json& meta = Obj(object_, "metadata");
  if (meta.contains("deletionTimestamp")) return plan_;  // garbage collection removes the children

  auto parsed = ParseFleetJob(object_);
  if (!parsed) {
    // Nothing is created for a spec the operator cannot run; the message says what to fix. An
    // edit can make a running job's spec invalid: it ends like any failed job, its pods cleaned
    // up and its TTL counted per runPolicy (the defaults when runPolicy is what is invalid). A
    // job that already finished keeps its outcome.
    auto policy = ParseRunPolicy(Obj(object_, "spec"));
    if (policy) policy_ = *policy;
    if (PhaseNow() != "Failed" && PhaseNow() != "Succeeded") Fail("InvalidSpec", parsed.error());
    FinishedJob();
    return plan_;
  }
  job_ = std::move(*parsed);
  policy_ = job_->spec.run_policy;
  const FleetJobSpec& spec = job_->spec;
  const bool new_generation = !status().contains("observedGeneration") ||
                              status()["observedGeneration"] != job_->generation;
  status()["observedGeneration"] = job_->generation;
  // The mode, network and runtime shape every pod and list of the job: they cannot change under it. The
  // CRD's transition rules refuse such edits at apply time; this catches them where those rules
  // do not run (CRD validation off, or an edit of the stored object by other means).
  const std::string mode(JobModeName(spec.mode));
  const char* network = spec.network == Network::kPodIP ? "PodIP" : spec.network == Network::kService ? "Service" : "HostNetwork";
  const char* runtime = spec.runtime == Runtime::kFleet ? "fleet" : "paddle";
  for (const auto& [field, now_value] :
       {std::pair<std::string, std::string>{"mode", mode}, {"network", network}, {"runtime", runtime}}) {
    const std::string was = status().value(field, "");
    if (!was.empty() && was != now_value && PhaseNow() != "Failed") {
      Fail("ImmutableFieldChanged", "spec." + field + " changed from " + was + " to " + now_value +
                                        " after the job started; it cannot change: delete the FleetJob and create it again");
      CleanUp();
      return plan_;
    }
  }
  status()["mode"] = mode;
  status()["network"] = network;
  status()["runtime"] = runtime;
  if (!status().contains("restartCount")) status()["restartCount"] = 0;
  if (!status().contains("run")) status()["run"] = 0;
  // The HostNetwork port block, recorded so that it survives operator restarts.
  const bool waiting_for_ports = spec.network == Network::kHostNetwork && !settings_.host_ports_unavailable.empty();
  if (spec.network == Network::kHostNetwork && !waiting_for_ports) status()["hostPortBase"] = settings_.host_port_base;
  slots_ = PodSlots(*job_);

  if (PhaseNow() == "Succeeded" || PhaseNow() == "Failed") {
    FinishedJob();
    return plan_;
  }
  if (waiting_for_ports && !spec.run_policy.suspend) {
    if (settings_.host_ports_never) {
      Fail("HostPortRangeTooSmall", settings_.host_ports_unavailable);
      FinishedJob();
      return plan_;
    }
    if (!ConditionTrue(status(), "WaitingForHostPorts")) Event("Warning", "WaitingForHostPorts", settings_.host_ports_unavailable);
    SetCondition(status(), "WaitingForHostPorts", true, "NoFreeHostPorts", settings_.host_ports_unavailable, now_);
    SetPhase("Pending", settings_.host_ports_unavailable);
    RequeueAfter(seconds(30));
    return plan_;
  }
  if (!FindCondition(status(), "WaitingForHostPorts").is_null()) {
    SetCondition(status(), "WaitingForHostPorts", false, "HostPortsAllocated", "", now_);
  }
  // A spec that cannot be wired (e.g. lists over the kernel's limit) is refused once per
  // generation; otherwise the wiring is rendered only when a plan needs it.
  if (new_generation && !waiting_for_ports && !Wiring()) return plan_;

  if (spec.run_policy.suspend) {
    DeletePods([](const Json&) { return true; }, "suspended");
    if (!ConditionTrue(status(), "Suspended")) {
      SetCondition(status(), "Suspended", true, "Suspended", "spec.runPolicy.suspend is true", now_);
      NewRun();  // pods made after the resume are wired afresh
    }
    SetCondition(status(), "Running", false, "Suspended", "", now_);
    status().erase("startTime");  // activeDeadlineSeconds counts from the resume
    SetPhase("Suspended", "the job is suspended; its pods are removed until spec.runPolicy.suspend is false");
    return plan_;
  }
  if (ConditionTrue(status(), "Suspended")) {
    SetCondition(status(), "Suspended", false, "Resumed", "spec.runPolicy.suspend is false", now_);
    Event("Normal", "Resumed", "the job is resumed");
  }
  // Rounded up to the second: status times are whole seconds (metav1.Time), and a start rounded
  // down would fire activeDeadlineSeconds up to a second early. Up, the deadline measures at least
  // the full duration, from a time that survives operator restarts (nothing kept in memory).
  if (!status().contains("startTime")) {
    status()["startTime"] = FormatRfc3339(Time(std::chrono::ceil<seconds>(now_.time_since_epoch())));
  }
  if (spec.run_policy.active_deadline_seconds) {
    const Time deadline = ParseRfc3339(status()["startTime"].get<std::string>()).value_or(now_) +
                          seconds(*spec.run_policy.active_deadline_seconds);
    if (now_ >= deadline) {
      Fail("DeadlineExceeded", "the job ran longer than activeDeadlineSeconds=" +
                                   std::to_string(*spec.run_policy.active_deadline_seconds));
      DeletePods([](const Json& pod) { return !Finished(pod); }, "activeDeadlineSeconds");
      return plan_;
    }
    RequeueAfter(std::chrono::duration_cast<seconds>(deadline - now_) + seconds(1));
  }

  // Gang scheduling: the PodGroup comes first; Volcano must admit it before any pod exists, so
  // that a partial gang never holds GPUs.
  if (spec.scheduling.gang != GangScheduler::kNone) {
    if (!observed_.pod_group) {
      Create(ObjectKind::kPodGroup, BuildPodGroup(*job_), "gang scheduling");
      SetPhase("Pending", "waiting for the PodGroup to be admitted");
      return plan_;
    }
    const std::string pg_phase = Obj(*observed_.pod_group, "status").value("phase", "");
    if (spec.scheduling.gang == GangScheduler::kVolcano && pg_phase != "Inqueue" && pg_phase != "Running") {
      const std::string message = "waiting for Volcano to admit PodGroup " + PodGroupName(*job_) + " (minMember " +
                                  std::to_string(spec.TotalPods()) + (spec.scheduling.queue.empty() ? "" : ", queue " + spec.scheduling.queue) +
                                  ")" + (pg_phase.empty() ? "" : "; it is " + pg_phase);
      if (!ConditionTrue(status(), "GangPending")) Event("Normal", "GangPending", message);
      SetCondition(status(), "GangPending", true, "PodGroupNotAdmitted", message, now_);
      SetPhase("Pending", message);
      RequeueAfter(seconds(3));   // PodGroups are read, not watched: poll for the admission
      return plan_;
    }
    if (!FindCondition(status(), "GangPending").is_null()) {
      SetCondition(status(), "GangPending", false, "PodGroupAdmitted", "", now_);
    }
  }
  if (spec.network == Network::kService && !observed_.service) {
    Create(ObjectKind::kService, BuildService(*job_), "stable DNS names for the pods");
  }
  if (NeedsSidecarAccount(*job_)) {
    if (!observed_.service_account) Create(ObjectKind::kServiceAccount, BuildSidecarServiceAccount(*job_), "sidecar identity");
    if (!observed_.role) {
      Create(ObjectKind::kRole, BuildSidecarRole(*job_), "sidecar may read the endpoints and its own pod");
    } else if (Str(Obj(Obj(*observed_.role, "metadata"), "annotations"), kReplicasAnnotation, kNone) !=
               ReplicaSignature(spec)) {
      // The job's pods changed (replicas): the sidecars may touch exactly the new ones. (The
      // annotation says which pods the Role names, without comparing thousands of names.)
      Json role = BuildSidecarRole(*job_);
      role["metadata"]["resourceVersion"] = Str(Obj(*observed_.role, "metadata"), "resourceVersion", kNone);
      plan_.actions.push_back({Verb::kUpdate, ObjectKind::kRole, Name(role), std::move(role), "the job's pods changed"});
    }
    if (!observed_.role_binding) Create(ObjectKind::kRoleBinding, BuildSidecarRoleBinding(*job_), "sidecar identity");
  }

  // A change of replicas rewires the job: Paddle's processes read their peers once, at start, so
  // every pod of the next run gets the new lists. Not a failure: backoffLimit is not charged.
  const std::string signature = ReplicaSignature(spec);
  const std::string wired_for = status().value("runReplicas", "");
  if (!wired_for.empty() && wired_for != signature) {
    NewRun();
    Event("Normal", "Rewiring", "replicas changed (" + wired_for + " -> " + signature +
                                    "); restarting every pod with the new endpoint lists");
  }
  status()["runReplicas"] = signature;

  // This run's pods by name; everything else (older runs, scaled-away slots) goes.
  const std::string run = std::to_string(CurrentRun());
  std::unordered_map<std::string_view, int> ordinal_of;   // slot name -> ordinal
  ordinal_of.reserve(slots_.size());
  for (const PodSlot& slot : slots_) ordinal_of.emplace(slot.name, slot.ordinal);
  RunPods current(slots_.size());
  std::vector<bool> occupied(slots_.size());  // slots whose name some pod holds, live or terminating
  bool stale = false;
  for (const Json& pod : observed_.pods) {
    const std::string& name = Name(pod);
    auto slot = ordinal_of.find(name);
    if (slot != ordinal_of.end()) occupied[static_cast<size_t>(slot->second)] = true;
    const bool old_run = Label(pod, kRunLabel) != run;
    stale = stale || old_run;
    if (Terminating(pod)) continue;
    if (slot == ordinal_of.end()) {
      Delete(ObjectKind::kPod, name, "no longer part of the job");
    } else if (old_run) {
      Delete(ObjectKind::kPod, name, "from run " + Label(pod, kRunLabel) + "; this is run " + run);
    } else {
      current.Set(slot->second, &pod);
    }
  }

  // Success: every worker of this run succeeded.
  const RoleSpec* workers = spec.Find(RoleKind::kWorker);
  int workers_done = 0;
  for (const PodSlot& slot : slots_) {
    const Json* pod = current.Find(slot);
    if (slot.role == workers && pod && Phase(*pod) == "Succeeded") ++workers_done;
  }
  CountRoles(current);
  if (workers_done == workers->replicas) {
    SetCondition(status(), "Succeeded", true, "WorkersSucceeded", "all workers finished successfully", now_);
    SetCondition(status(), "Running", false, "WorkersSucceeded", "", now_);
    SetPhase("Succeeded", "all " + std::to_string(workers->replicas) + " workers finished successfully");
    status()["completionTime"] = FormatRfc3339(now_);
    FinishedJob();
    return plan_;
  }
  if (HandleFailures(current)) return plan_;

  // Addresses: once every pod of the run has one, publish the lists (Service mode: the DNS names,
  // known from the start). Under lists already published for this run, a pod that vanished or came
  // back with another address was replaced: its peers hold its old address, so the job restarts.
  const Json* published = observed_.endpoints ? &*observed_.endpoints : nullptr;
  const Json annotations = published ? Obj(Obj(*published, "metadata"), "annotations")
                                     : Json::object();
  const bool published_this_run = published && annotations.value(kRunAnnotation, "") == run;
  const std::vector<std::string> published_hosts =
      published_this_run ? SplitString(annotations.value(kHostsAnnotation, ""), ',') : std::vector<std::string>{};
  std::vector<std::string> hosts(slots_.size());
  bool all_known = true;
  std::string replaced;
  for (const PodSlot& slot : slots_) {
    std::string& host = hosts[static_cast<size_t>(slot.ordinal)];
    if (spec.network == Network::kService) {
      host = ServiceHost(*job_, slot.name, settings_.cluster_domain);
      continue;
    }
    const Json* pod = current.Find(slot);
    host = pod ? PodHost(*pod, spec.network) : kNone;
    all_known = all_known && !host.empty();
    if (published_hosts.size() == slots_.size() && replaced.empty()) {
      const std::string& before = published_hosts[static_cast<size_t>(slot.ordinal)];
      // PodIP: a vanished pod can only come back with a new IP. HostNetwork: it may come back on
      // the same node with the same address, so wait and compare.
      if (!pod && !occupied[static_cast<size_t>(slot.ordinal)] && spec.network == Network::kPodIP) {
        replaced = "pod " + slot.name + " disappeared";
      }
      else if (!host.empty() && host != before) replaced = "pod " + slot.name + " came back at " + host + " (was " + before + ")";
    }
  }
  if (!replaced.empty()) {
    if (Restarts() >= spec.run_policy.backoff_limit) {
      Fail("BackoffLimitExceeded", replaced + " and the job has already been restarted " + std::to_string(Restarts()) +
                                       " times (backoffLimit " + std::to_string(spec.run_policy.backoff_limit) + ")");
      CleanUp();
    } else {
      Restart(replaced + "; restarting the whole job so that every peer gets its new address", true);
    }
    return plan_;
  }

  // Missing pods: create them (a name still held by a terminating pod waits for it to go, so
  // two live pods never share a (role, index)).
  int created = 0;
  for (const PodSlot& slot : slots_) {
    if (occupied[static_cast<size_t>(slot.ordinal)]) continue;
    if (!Wiring()) return plan_;
    Create(ObjectKind::kPod, BuildPod(*job_, slot, *Wiring(), CurrentRun(), settings_), "missing");
    ++created;
  }
  const std::string hosts_annotation = JoinStrings(hosts, ",");
  const bool up_to_date = published_this_run && annotations.value(kHostsAnnotation, "") == hosts_annotation;
  if (all_known && !up_to_date) {
    if (!Wiring()) return plan_;
    Json cm = {{"apiVersion", "v1"}, {"kind", "ConfigMap"},
               {"metadata", {{"name", EndpointsConfigMapName(job_->name)}, {"namespace", job_->ns},
                             {"labels", {{kJobLabel, job_->name}}},
                             {"annotations", {{kRunAnnotation, run}, {kHostsAnnotation, hosts_annotation}}},
                             {"ownerReferences", Json::array({OwnerReference(*job_)})}}},
               {"data", Wiring()->EndpointsData(hosts)}};
    if (published) {
      cm["metadata"]["resourceVersion"] = Obj(*published, "metadata").value("resourceVersion", "");
      plan_.actions.push_back({Verb::kUpdate, ObjectKind::kConfigMap, EndpointsConfigMapName(job_->name), cm, "run " + run});
    } else {
      Create(ObjectKind::kConfigMap, cm, "every pod has an address");
    }
    Event("Normal", "EndpointsPublished", "published the endpoint lists of " + std::to_string(slots_.size()) +
                                              " pods for run " + run);
  }

  CheckPending(current);
  CheckProgress(current);
  bool all_running = current.size() == slots_.size();
  for (const PodSlot& slot : slots_) {
    // Workers that already finished do not make the job any less Running.
    const Json* pod = current.Find(slot);
    if (pod) all_running = all_running && (Phase(*pod) == "Running" || Phase(*pod) == "Succeeded");
  }
  if (stale) {
    SetPhase("Restarting", status().value("message", ""));
  } else if (created > 0 || current.size() < slots_.size() || !all_known) {
    SetPhase("Pending", "creating pods and waiting for their addresses");
  } else if (!up_to_date || !all_running) {
    SetPhase("Starting", up_to_date ? "waiting for all pods to run" : "publishing the endpoint lists");
  } else {
    if (ConditionTrue(status(), "Restarting")) SetCondition(status(), "Restarting", false, "Running", "", now_);
    SetCondition(status(), "Running", true, "AllPodsRunning", "all pods are running with their endpoint lists", now_);
    SetPhase("Running", "");
  }
  return plan_;
}

}  // namespace

Json PodForPlanning(const Json& pod) {
  // Only what the planner reads: the controller keeps one of these per pod of every job in
  // memory, so every member left out counts (a whole running pod is ~20 KB of JSON).
  const Json& meta = Obj(pod, "metadata");
  Json out_meta = Json::object();
  for (const char* key : {"name", "uid", "creationTimestamp", "deletionTimestamp"}) {
    if (meta.contains(key)) out_meta[key] = meta[key];
  }
  const std::string& run = Label(pod, kRunLabel);
  if (!run.empty()) out_meta["labels"] = {{kRunLabel, run}};
  const Json& status = Obj(pod, "status");
  Json out_status = Json::object();
  for (const char* key : {"phase", "reason", "podIP", "hostIP"}) {
    if (status.contains(key)) out_status[key] = status[key];
  }
  Json conditions = Json::array();
  for (const Json& c : Arr(status, "conditions")) {
    const std::string& type = Str(c, "type", kNone);
    if (type != "Ready" && type != "PodScheduled" && type != kProgressConditionType) continue;
    Json kept = {{"type", type}, {"status", Str(c, "status", kNone)}};
    if (type != "Ready") {   // the others are quoted in the job's conditions
      kept["reason"] = Str(c, "reason", kNone);
      kept["message"] = Str(c, "message", kNone);
    }
    conditions.push_back(std::move(kept));
  }
  if (!conditions.empty()) out_status["conditions"] = std::move(conditions);
  // The first terminated main container's exit code (ExitCode() reads nothing else).
  for (const Json& c : Arr(status, "containerStatuses")) {
    const Json& state = Obj(c, "state");
    if (!state.contains("terminated")) continue;
    out_status["containerStatuses"] =
        Json::array({{{"state", {{"terminated", {{"exitCode", state["terminated"].value("exitCode", 0)}}}}}}});
    break;
  }
  return {{"metadata", std::move(out_meta)}, {"status", std::move(out_status)}};
}

Json FailedStatus(Json status, const std::string& reason, const std::string& message, Time now) {
  if (!status.is_object()) status = Json::object();
  SetCondition(status, "Failed", true, reason, message, now);
  SetCondition(status, "Running", false, reason, message, now);
  status["phase"] = "Failed";
  status["message"] = message;
  if (!status.contains("completionTime")) status["completionTime"] = FormatRfc3339(now);
  return status;
}

ReconcilePlan PlanReconcile(const Json& job_object, const Observed& observed, Time now,
                            const OperatorSettings& settings) {
  return Planner(job_object, observed, now, settings).Run();
}

}  // namespace fleet::op
