#include "fleet/api/job_status.h"

#include <limits>
#include <utility>

#include "fleet/base/escape.h"
#include "fleet/base/json_read.h"

namespace fleet::api {
namespace {

template <typename E>
using NameTable = std::vector<std::pair<E, std::string>>;

const NameTable<JobPhase>& PhaseNames() {
  static const NameTable<JobPhase> names = {
      {JobPhase::kNone, ""},           {JobPhase::kPending, "Pending"},       {JobPhase::kStarting, "Starting"},
      {JobPhase::kRunning, "Running"}, {JobPhase::kRestarting, "Restarting"}, {JobPhase::kSucceeded, "Succeeded"},
      {JobPhase::kFailed, "Failed"},   {JobPhase::kSuspended, "Suspended"}};
  return names;
}

const NameTable<ConditionType>& ConditionTypeNames() {
  static const NameTable<ConditionType> names = {
      {ConditionType::kRunning, "Running"},
      {ConditionType::kRestarting, "Restarting"},
      {ConditionType::kSucceeded, "Succeeded"},
      {ConditionType::kFailed, "Failed"},
      {ConditionType::kSuspended, "Suspended"},
      {ConditionType::kGangPending, "GangPending"},
      {ConditionType::kWaitingForHostPorts, "WaitingForHostPorts"},
      {ConditionType::kStalled, "Stalled"},
      {ConditionType::kUnschedulable, "Unschedulable"},
      {ConditionType::kEnvFromFiles, "EnvFromFiles"},
      {ConditionType::kAdmitted, "Admitted"}};
  return names;
}

const NameTable<ConditionStatus>& ConditionStatusNames() {
  static const NameTable<ConditionStatus> names = {
      {ConditionStatus::kTrue, "True"}, {ConditionStatus::kFalse, "False"}, {ConditionStatus::kUnknown, "Unknown"}};
  return names;
}

template <typename E>
std::vector<E> ValuesOf(const NameTable<E>& table) {
  std::vector<E> values;
  for (const auto& [v, name] : table) values.push_back(v);
  return values;
}

template <typename E>
const std::string& NameIn(const NameTable<E>& table, E value) {
  for (const auto& [v, name] : table) {
    if (v == value) return name;
  }
  return table.front().second;   // unreachable: every table names every value
}

template <typename E>
std::optional<E> ValueIn(const NameTable<E>& table, const std::string& name) {
  for (const auto& [v, n] : table) {
    if (n == name) return v;
  }
  return std::nullopt;
}

// The keys of .status and of a condition.
namespace key {
constexpr const char* kPhase = "phase";
constexpr const char* kMessage = "message";
constexpr const char* kConditions = "conditions";
constexpr const char* kObservedGeneration = "observedGeneration";
constexpr const char* kMode = "mode";
constexpr const char* kNetwork = "network";
constexpr const char* kRuntime = "runtime";
constexpr const char* kLauncher = "launcher";
constexpr const char* kRun = "run";
constexpr const char* kRestartCount = "restartCount";
constexpr const char* kIgnoredFailures = "ignoredFailures";
constexpr const char* kHostPortBase = "hostPortBase";
constexpr const char* kStartTime = "startTime";
constexpr const char* kCompletionTime = "completionTime";
constexpr const char* kReplicaStatuses = "replicaStatuses";
constexpr const char* kHeterReady = "heterReady";
constexpr const char* kRunReplicas = "runReplicas";
constexpr const char* kReplacedPods = "replacedPods";
constexpr const char* kProgress = "progress";
constexpr const char* kElastic = "elastic";
constexpr const char* kMembers = "members";
constexpr const char* kRendezvous = "rendezvous";
constexpr const char* kBelowMinimumSince = "belowMinimumSince";
constexpr const char* kQueue = "queue";
constexpr const char* kWorkload = "workload";
constexpr const char* kLocalQueue = "localQueue";
constexpr const char* kClusterQueue = "clusterQueue";
constexpr const char* kState = "state";
constexpr const char* kFlavors = "flavors";
constexpr const char* kAdmittedCounts = "admittedCounts";
constexpr const char* kEvictions = "evictions";
constexpr const char* kLastEviction = "lastEviction";
constexpr const char* kTime = "time";
constexpr const char* kCheckpoint = "checkpoint";
constexpr const char* kInPlaceRestarts = "inPlaceRestarts";
constexpr const char* kInPlaceRestart = "inPlaceRestart";
constexpr const char* kGatesOpen = "gatesOpen";
constexpr const char* kStep = "step";
constexpr const char* kPod = "pod";

constexpr const char* kType = "type";
constexpr const char* kStatus = "status";
constexpr const char* kReason = "reason";
constexpr const char* kLastTransitionTime = "lastTransitionTime";

constexpr const char* kReplicas = "replicas";
constexpr const char* kActive = "active";
constexpr const char* kReady = "ready";
constexpr const char* kSucceeded = "succeeded";
constexpr const char* kFailed = "failed";
}  // namespace key

// ---- reading values: nullopt when the value has another type ----

std::optional<Progress> AsProgress(const Json& v) {
  return v.is_object() ? std::optional<Progress>(Progress::FromJson(v)) : std::nullopt;
}

std::optional<Time> AsTime(const Json& v) {
  auto text = AsString(v);
  return text ? ParseRfc3339(*text) : std::nullopt;
}
std::optional<JobPhase> AsPhase(const Json& v) {
  auto text = AsString(v);
  return text ? ParsePhase(*text) : std::nullopt;
}
std::string StringOr(const Json& object, const char* name) { return MemberAs(object, name, AsString).value_or(""); }
int IntOr(const Json& object, const char* name) { return MemberAs(object, name, AsInt<int>).value_or(0); }

// A condition of a known type; nullopt for any other (kept as it is).
std::optional<Condition> AsCondition(const Json& v) {
  if (!v.is_object()) return std::nullopt;
  const auto type = ParseConditionType(StringOr(v, key::kType));
  if (!type) return std::nullopt;
  Condition c;
  c.type = *type;
  c.status = ValueIn(ConditionStatusNames(), StringOr(v, key::kStatus)).value_or(ConditionStatus::kUnknown);
  c.reason = StringOr(v, key::kReason);
  c.message = StringOr(v, key::kMessage);
  c.last_transition_time = ParseRfc3339(StringOr(v, key::kLastTransitionTime)).value_or(Time{});
  return c;
}

std::optional<std::map<std::string, ReplicaStatus>> AsReplicaStatuses(const Json& v) {
  if (!v.is_object()) return std::nullopt;
  std::map<std::string, ReplicaStatus> out;
  for (const auto& [role, counts] : v.items()) {
    if (!counts.is_object()) return std::nullopt;
    out[role] = {IntOr(counts, key::kReplicas), IntOr(counts, key::kActive), IntOr(counts, key::kReady),
                 IntOr(counts, key::kSucceeded), IntOr(counts, key::kFailed)};
  }
  return out;
}

std::optional<std::set<std::string>> AsStringSet(const Json& v) {
  if (!v.is_array()) return std::nullopt;
  std::set<std::string> out;
  for (const Json& e : v) {
    if (e.is_string()) out.insert(e.get<std::string>());
  }
  return out;
}

std::optional<ElasticStatus> AsElasticStatus(const Json& v) {
  if (!v.is_object()) return std::nullopt;
  ElasticStatus e;
  if (auto members = v.find(key::kMembers); members != v.end() && members->is_array()) {
    for (const Json& m : *members) {
      if (m.is_string()) e.members.push_back(m.get<std::string>());
    }
  }
  e.rendezvous = IntOr(v, key::kRendezvous);
  if (auto since = v.find(key::kBelowMinimumSince); since != v.end()) e.below_minimum_since = AsTime(*since);
  return e;
}

// A JSON object of strings (other values skipped).
std::map<std::string, std::string> StringMap(const Json& v) {
  std::map<std::string, std::string> out;
  if (!v.is_object()) return out;
  for (const auto& [k, e] : v.items()) {
    if (e.is_string()) out[k] = e.get<std::string>();
  }
  return out;
}

}  // namespace

std::optional<QueueStatus> QueueStatus::FromJson(const Json& v) {
  if (!v.is_object()) return std::nullopt;
  QueueStatus q;
  q.workload = StringOr(v, key::kWorkload);
  q.local_queue = StringOr(v, key::kLocalQueue);
  q.cluster_queue = StringOr(v, key::kClusterQueue);
  q.state = StringOr(v, key::kState);
  q.message = StringOr(v, key::kMessage);
  if (auto flavors = v.find(key::kFlavors); flavors != v.end() && flavors->is_object()) {
    for (const auto& [role, resources] : flavors->items()) q.flavors[role] = StringMap(resources);
  }
  if (auto counts = v.find(key::kAdmittedCounts); counts != v.end() && counts->is_object()) {
    for (const auto& [role, count] : counts->items()) {
      if (auto n = AsInt<int>(count)) q.admitted_counts[role] = *n;
    }
  }
  q.evictions = IntOr(v, key::kEvictions);
  if (auto last = v.find(key::kLastEviction); last != v.end() && last->is_object()) {
    q.last_eviction = QueueStatus::Eviction{StringOr(*last, key::kReason), StringOr(*last, key::kMessage),
                                            ParseRfc3339(StringOr(*last, key::kTime)).value_or(Time{})};
  }
  return q;
}

Json QueueStatus::ToJson() const {
  const QueueStatus& q = *this;
  Json out = {{key::kWorkload, q.workload}, {key::kLocalQueue, q.local_queue}, {key::kState, q.state},
              {key::kEvictions, q.evictions}};
  if (!q.cluster_queue.empty()) out[key::kClusterQueue] = q.cluster_queue;
  if (!q.message.empty()) out[key::kMessage] = q.message;
  if (!q.flavors.empty()) out[key::kFlavors] = q.flavors;
  if (!q.admitted_counts.empty()) out[key::kAdmittedCounts] = q.admitted_counts;
  if (q.last_eviction) {
    out[key::kLastEviction] = {{key::kReason, q.last_eviction->reason}, {key::kMessage, q.last_eviction->message},
                               {key::kTime, FormatRfc3339(q.last_eviction->time)}};
  }
  return out;
}

std::optional<CheckpointStatus> CheckpointStatus::FromJson(const Json& v) {
  if (!v.is_object()) return std::nullopt;
  const auto step = MemberAs(v, key::kStep, AsInt<int64_t>);
  if (!step) return std::nullopt;
  return CheckpointStatus{*step, StringOr(v, key::kPod), ParseRfc3339(StringOr(v, key::kTime)).value_or(Time{})};
}

Json CheckpointStatus::ToJson() const {
  return {{key::kStep, step}, {key::kPod, pod}, {key::kTime, FormatRfc3339(time)}};
}

std::optional<InPlaceRestartStatus> InPlaceRestartStatus::FromJson(const Json& v) {
  if (!v.is_object()) return std::nullopt;
  const auto run = MemberAs(v, key::kRun, AsInt<int>);
  if (!run) return std::nullopt;
  return InPlaceRestartStatus{*run, ParseRfc3339(StringOr(v, key::kStartTime)).value_or(Time{}),
                              MemberAs(v, key::kGatesOpen, AsBool).value_or(false)};
}

Json InPlaceRestartStatus::ToJson() const {
  return {{key::kRun, run}, {key::kStartTime, FormatRfc3339(start_time)}, {key::kGatesOpen, gates_open}};
}

namespace {

// Reads status members into typed fields; each member read is erased from `unread`, so that what
// remains is what this operator does not know (or cannot read), to be written back as it was.
class StatusReader {
 public:
  StatusReader(const Json& status, Json& unread) : status_(status), unread_(unread) {}

  template <typename T, typename Parse>
  void Read(const char* name, T& out, Parse parse) {
    auto it = status_.find(name);
    if (it == status_.end()) return;
    auto value = parse(*it);
    if (!value) return;
    out = std::move(*value);
    unread_.erase(name);
  }

 private:
  const Json& status_;
  Json& unread_;
};

}  // namespace

Time WholeSeconds(Time t) { return std::chrono::floor<std::chrono::seconds>(t); }

const std::vector<JobPhase>& AllPhases() {
  static const std::vector<JobPhase> phases = ValuesOf(PhaseNames());
  return phases;
}
const std::string& PhaseName(JobPhase phase) { return NameIn(PhaseNames(), phase); }
std::optional<JobPhase> ParsePhase(const std::string& name) { return ValueIn(PhaseNames(), name); }
bool IsFinished(JobPhase phase) { return phase == JobPhase::kSucceeded || phase == JobPhase::kFailed; }

const std::vector<ConditionType>& AllConditionTypes() {
  static const std::vector<ConditionType> types = ValuesOf(ConditionTypeNames());
  return types;
}
const std::string& ConditionTypeName(ConditionType type) { return NameIn(ConditionTypeNames(), type); }
std::optional<ConditionType> ParseConditionType(const std::string& name) {
  return ValueIn(ConditionTypeNames(), name);
}

const Condition* FleetJobStatus::Find(ConditionType type) const {
  for (const Condition& c : conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

bool FleetJobStatus::IsTrue(ConditionType type) const {
  const Condition* c = Find(type);
  return c && c->status == ConditionStatus::kTrue;
}

std::string BoundMessage(std::string_view text) { return BoundText(text, kMaxMessageBytes); }

void FleetJobStatus::SetCondition(ConditionType type, ConditionStatus status, const std::string& reason,
                                  const std::string& text, Time now) {
  for (Condition& c : conditions) {
    if (c.type != type) continue;
    if (c.status != status) c.last_transition_time = WholeSeconds(now);
    c.status = status;
    c.reason = reason;
    c.message = BoundMessage(text);
    return;
  }
  conditions.push_back({type, status, reason, BoundMessage(text), WholeSeconds(now)});
}

void FleetJobStatus::MarkFailed(const std::string& reason, const std::string& text, Time now) {
  SetCondition(ConditionType::kFailed, ConditionStatus::kTrue, reason, text, now);
  SetCondition(ConditionType::kRunning, ConditionStatus::kFalse, reason, text, now);
  phase = JobPhase::kFailed;
  message = BoundMessage(text);
  if (!completion_time) completion_time = WholeSeconds(now);
}

FleetJobStatus FleetJobStatus::FromJson(const Json& json) {
  FleetJobStatus s;
  if (!json.is_object()) return s;
  s.unknown_fields = json;
  StatusReader r(json, s.unknown_fields);
  r.Read(key::kPhase, s.phase, AsPhase);
  r.Read(key::kMessage, s.message, AsString);
  r.Read(key::kObservedGeneration, s.observed_generation, AsInt<int64_t>);
  r.Read(key::kMode, s.mode, AsString);
  r.Read(key::kNetwork, s.network, AsString);
  r.Read(key::kRuntime, s.runtime, AsString);
  r.Read(key::kLauncher, s.launcher, AsString);
  r.Read(key::kRun, s.run, AsInt<int>);
  r.Read(key::kRestartCount, s.restart_count, AsInt<int>);
  r.Read(key::kIgnoredFailures, s.ignored_failures, AsInt<int>);
  r.Read(key::kInPlaceRestarts, s.in_place_restarts, AsInt<int>);
  r.Read(key::kInPlaceRestart, s.in_place_restart, InPlaceRestartStatus::FromJson);
  r.Read(key::kHostPortBase, s.host_port_base, AsInt<int>);
  r.Read(key::kStartTime, s.start_time, AsTime);
  r.Read(key::kCompletionTime, s.completion_time, AsTime);
  r.Read(key::kReplicaStatuses, s.replica_statuses, AsReplicaStatuses);
  r.Read(key::kHeterReady, s.heter_ready, AsInt<int>);
  r.Read(key::kRunReplicas, s.run_replicas, AsString);
  r.Read(key::kReplacedPods, s.replaced_pods, AsStringSet);
  r.Read(key::kProgress, s.progress, AsProgress);
  r.Read(key::kElastic, s.elastic, AsElasticStatus);
  r.Read(key::kQueue, s.queue, QueueStatus::FromJson);
  r.Read(key::kCheckpoint, s.checkpoint, CheckpointStatus::FromJson);
  const auto conditions = json.find(key::kConditions);
  if (conditions != json.end() && conditions->is_array()) {
    for (const Json& c : *conditions) {
      if (auto known = AsCondition(c)) s.conditions.push_back(std::move(*known));
      else s.unknown_conditions.push_back(c);
    }
    s.unknown_fields.erase(key::kConditions);
  }
  return s;
}

Json FleetJobStatus::ToJson() const {
  Json out = unknown_fields.is_object() ? unknown_fields : Json::object();
  if (phase != JobPhase::kNone) out[key::kPhase] = PhaseName(phase);
  if (phase != JobPhase::kNone || !message.empty()) out[key::kMessage] = message;
  if (!conditions.empty() || !unknown_conditions.empty()) {
    Json list = Json::array();
    for (const Condition& c : conditions) {
      list.push_back({{key::kType, ConditionTypeName(c.type)},
                      {key::kStatus, NameIn(ConditionStatusNames(), c.status)},
                      {key::kReason, c.reason},
                      {key::kMessage, c.message},
                      {key::kLastTransitionTime, FormatRfc3339(c.last_transition_time)}});
    }
    for (const Json& c : unknown_conditions) list.push_back(c);
    out[key::kConditions] = std::move(list);
  }
  if (observed_generation) out[key::kObservedGeneration] = *observed_generation;
  if (!mode.empty()) out[key::kMode] = mode;
  if (!network.empty()) out[key::kNetwork] = network;
  if (!runtime.empty()) out[key::kRuntime] = runtime;
  if (!launcher.empty()) out[key::kLauncher] = launcher;
  out[key::kRun] = run;
  out[key::kRestartCount] = restart_count;
  if (ignored_failures > 0) out[key::kIgnoredFailures] = ignored_failures;
  if (in_place_restarts > 0) out[key::kInPlaceRestarts] = in_place_restarts;
  if (in_place_restart) out[key::kInPlaceRestart] = in_place_restart->ToJson();
  if (host_port_base) out[key::kHostPortBase] = *host_port_base;
  if (start_time) out[key::kStartTime] = FormatRfc3339(*start_time);
  if (completion_time) out[key::kCompletionTime] = FormatRfc3339(*completion_time);
  if (!replica_statuses.empty()) {
    Json replicas = Json::object();
    for (const auto& [role, r] : replica_statuses) {
      replicas[role] = {{key::kReplicas, r.replicas}, {key::kActive, r.active}, {key::kReady, r.ready},
                        {key::kSucceeded, r.succeeded}, {key::kFailed, r.failed}};
    }
    out[key::kReplicaStatuses] = std::move(replicas);
  }
  if (heter_ready) out[key::kHeterReady] = *heter_ready;
  if (!run_replicas.empty()) out[key::kRunReplicas] = run_replicas;
  if (!replaced_pods.empty()) out[key::kReplacedPods] = replaced_pods;
  if (progress) out[key::kProgress] = progress->ToJson();
  if (elastic) {
    Json e = {{key::kMembers, elastic->members}, {key::kRendezvous, elastic->rendezvous}};
    if (elastic->below_minimum_since) e[key::kBelowMinimumSince] = FormatRfc3339(*elastic->below_minimum_since);
    out[key::kElastic] = std::move(e);
  }
  if (queue) out[key::kQueue] = queue->ToJson();
  if (checkpoint) out[key::kCheckpoint] = checkpoint->ToJson();
  return out;
}

bool operator==(const FleetJobStatus& a, const FleetJobStatus& b) { return a.ToJson() == b.ToJson(); }

}  // namespace fleet::api
