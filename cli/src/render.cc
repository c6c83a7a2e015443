#include "fleet/cli/render.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>

#include "fleet/api/job_status.h"
#include "fleet/base/escape.h"
#include "fleet/base/strings.h"
#include "fleet/base/json_read.h"
#include "fleet/base/time.h"

namespace fleet::cli {
namespace {

// A string as the API has it (for the -o json|yaml documents), or `fallback`.
std::string Raw(const Json& obj, const char* key, const std::string& fallback = "") {
  return MemberAs(obj, key, AsString).value_or(fallback);
}

// A string as people see it (Printable).
std::string Str(const Json& obj, const char* key, const std::string& fallback = "") {
  return Printable(Raw(obj, key, fallback));
}

int64_t Int(const Json& obj, const char* key) { return MemberAs(obj, key, AsInt64).value_or(0); }

// Speeds and losses as people read them: 3 significant digits ("3.1", "0.0421"), whole numbers
// from 100 on ("812", "12345"), "-" when unknown.
std::string FormatNumber(std::optional<double> value) {
  if (!value) return "-";
  char buf[32];
  std::snprintf(buf, sizeof buf, std::fabs(*value) >= 100 ? "%.0f" : "%.3g", *value);
  return buf;
}

int64_t UnixSeconds(api::Time t) { return std::chrono::floor<std::chrono::seconds>(t.time_since_epoch()).count(); }

std::string Ago(const std::string& time, int64_t now) {
  const int64_t t = ParseTime(time);
  return t < 0 ? "<unknown>" : HumanDuration(now - t);
}

// An event's most recent time: lastTimestamp, eventTime, firstTimestamp, creationTimestamp.
std::string EventTime(const Json& event) {
  for (const char* key : {"lastTimestamp", "eventTime", "firstTimestamp"}) {
    const std::string t = Raw(event, key);
    if (!t.empty()) return t;
  }
  return Raw(MemberOrNull(event, "metadata"), "creationTimestamp");
}

// Why a pod that is not running is where it is: a waiting container's reason, an unscheduled
// pod's condition, or the pod's own reason.
std::string PodWhy(const Json& pod) {
  const Json& status = MemberOrNull(pod, "status");
  for (const char* list : {"initContainerStatuses", "containerStatuses"}) {
    for (const Json& c : ArrayMember(status, list)) {
      const Json& waiting = MemberOrNull(MemberOrNull(c, "state"), "waiting");
      const std::string reason = Raw(waiting, "reason");
      if (!reason.empty() && reason != "PodInitializing") {
        const std::string message = Raw(waiting, "message");
        return Raw(c, "name") + ": " + reason + (message.empty() ? "" : ": " + message);
      }
      const Json& terminated = MemberOrNull(MemberOrNull(c, "state"), "terminated");
      if (terminated.is_object() && Int(terminated, "exitCode") != 0) {
        return Raw(c, "name") + ": exit code " + std::to_string(Int(terminated, "exitCode")) +
               (Raw(terminated, "reason").empty() ? "" : " (" + Raw(terminated, "reason") + ")");
      }
    }
  }
  for (const Json& c : MemberOrNull(status, "conditions").is_array() ? MemberOrNull(status, "conditions") : Json::array()) {
    if (Raw(c, "type") == "PodScheduled" && Raw(c, "status") == "False") {
      return Raw(c, "reason", "Unschedulable") + (Raw(c, "message").empty() ? "" : ": " + Raw(c, "message"));
    }
  }
  const std::string reason = Raw(status, "reason");
  const std::string message = Raw(status, "message");
  if (!reason.empty()) return reason + (message.empty() ? "" : ": " + message);
  return Raw(MemberOrNull(pod, "spec"), "nodeName").empty() ? "not scheduled yet" : "";
}

// A role of a job: its name and its spec (spec.server, spec.worker or a spec.heter stage).
struct RoleOfJob {
  std::string name;
  const Json* spec;
  bool heter;
};

std::vector<RoleOfJob> Roles(const Json& job) {
  const Json& spec = MemberOrNull(job, "spec");
  std::vector<RoleOfJob> roles;
  if (MemberOrNull(spec, "server").is_object()) roles.push_back({"server", &MemberOrNull(spec, "server"), false});
  roles.push_back({"worker", &MemberOrNull(spec, "worker"), false});
  const Json& heter = MemberOrNull(spec, "heter");
  for (size_t i = 0; heter.is_array() && i < heter.size(); ++i) {
    roles.push_back({Str(heter[i], "name", "heter" + std::to_string(i + 1)), &heter[i], true});
  }
  return roles;
}

// status.replicaStatuses[role]: zero counts for a role the operator has not counted.
api::ReplicaStatus CountsOf(const api::FleetJobStatus& status, const std::string& role) {
  auto it = status.replica_statuses.find(role);
  return it == status.replica_statuses.end() ? api::ReplicaStatus{} : it->second;
}

// "ready/replicas" for one role or several together, the same in every column and line: ready
// pods from status.replicaStatuses (the pods that exist), replicas from the spec (what the job
// asks for, also before the operator has seen it).
std::string ReadyOfReplicas(const api::FleetJobStatus& status, const std::vector<RoleOfJob>& roles) {
  int64_t ready = 0, replicas = 0;
  for (const RoleOfJob& role : roles) {
    ready += CountsOf(status, role.name).ready;
    replicas += Int(*role.spec, "replicas");
  }
  return std::to_string(ready) + "/" + std::to_string(replicas);
}

// The phase as people read it: "<none>" before the operator has seen the job.
std::string PhaseOrNone(const api::FleetJobStatus& status) {
  const std::string phase = PhaseText(status);
  return phase.empty() ? "<none>" : Printable(phase);
}

// A status time as the operator wrote it: metav1.Time's whole seconds, milliseconds when it has them
// (status.progress.updateTime); "" when there is none.
std::string TimeText(const std::optional<api::Time>& t) {
  if (!t) return "";
  return FormatRfc3339(*t, api::WholeSeconds(*t) == *t ? TimePrecision::kSeconds : TimePrecision::kMillis);
}

// ---- training progress ----------------------------------------------------------------------------

// A count as people read it; "-" when unknown.
std::string Count(std::optional<int64_t> n) { return n ? std::to_string(*n) : "-"; }

// How far done, in percent: status.progress.percent, else step/totalSteps.
std::optional<double> PercentDone(const api::Progress& progress) {
  if (progress.percent) return progress.percent;
  if (!progress.step || !progress.total_steps || *progress.total_steps <= 0) return std::nullopt;
  return 100.0 * static_cast<double>(*progress.step) / static_cast<double>(*progress.total_steps);
}

// "24%": whole percents, rounded down (a job 99.7% done is not 100% done).
std::string Percent(double percent) {
  return std::to_string(static_cast<int64_t>(std::floor(std::clamp(percent, 0.0, 100.0)))) + "%";
}

// How old status.progress is, when that is worth saying (it is stale): "updated 5m ago".
std::string StaleNote(const api::Progress& progress, int64_t now) {
  if (!progress.update_time) return "";
  const int64_t updated = UnixSeconds(*progress.update_time);
  if (now - updated <= kStaleProgressSeconds) return "";
  return "updated " + HumanDuration(now - updated) + " ago";
}

// A rank's steps behind the median as top shows it: "-10" behind, "+2" ahead, "0".
std::string Lag(std::optional<int64_t> lag) {
  if (!lag) return "-";
  if (*lag == 0) return "0";
  if (*lag > 0) return "-" + std::to_string(*lag);
  return "+" + std::to_string(0 - static_cast<uint64_t>(*lag));   // INT64_MIN has no int64 negation
}

// "worker-3 (job-worker-3) at step 1190, 10 steps behind the median".
std::string SlowestRank(const std::optional<api::RankProgress>& slowest) {
  if (!slowest) return "";
  std::string text = (slowest->role.empty() ? "?" : Printable(slowest->role)) + "-" + std::to_string(slowest->rank);
  if (!slowest->pod.empty()) text += " (" + Printable(slowest->pod) + ")";
  if (slowest->step) text += " at step " + Count(slowest->step);
  if (slowest->lag) text += ", " + Count(slowest->lag) + " steps behind the median";
  return text;
}

// "7/8 reporting, 1 stalled"; "" when the number of ranks is unknown (the operator writes it, and
// more than 0, whenever it writes status.progress).
std::string RanksReporting(const api::Progress& progress) {
  if (progress.ranks <= 0) return "";
  std::string text = std::to_string(progress.reporting_ranks) + "/" + std::to_string(progress.ranks) + " reporting";
  if (progress.stalled_ranks > 0) text += ", " + std::to_string(progress.stalled_ranks) + " stalled";
  return text;
}

// The one-line summary of ProgressSummary, typed.
std::string SummaryOf(const api::Progress& progress, int64_t now) {
  std::vector<std::string> parts;
  const auto percent = PercentDone(progress);
  if (percent) parts.push_back(ProgressBar(*percent) + " " + Percent(*percent));
  if (progress.step) {
    parts.push_back("step " + Count(progress.step) + (progress.total_steps ? "/" + Count(progress.total_steps) : ""));
  } else {
    parts.push_back("no step reported yet");
  }
  if (progress.steps_per_second) parts.push_back(FormatNumber(progress.steps_per_second) + " step/s");
  if (progress.eta_seconds && percent) parts.push_back("ETA " + HumanDuration(*progress.eta_seconds));
  if (progress.loss) parts.push_back("loss " + FormatNumber(progress.loss));
  const std::string stale = StaleNote(progress, now);
  if (!stale.empty()) parts.push_back("(" + stale + ")");
  return JoinStrings(parts, "  ");
}

// status's "Progress:" section.
std::string ProgressText(const std::optional<api::Progress>& progress, int64_t now) {
  if (!progress) return "Progress:   no progress reported yet\n";
  std::string out = "Progress:   " + SummaryOf(*progress, now) + "\n";
  std::string ranks = RanksReporting(*progress);
  if (progress->samples_per_second) {
    ranks += (ranks.empty() ? "" : ", ") + FormatNumber(progress->samples_per_second) + " samples/s";
  }
  if (!ranks.empty()) out += "Ranks:      " + ranks + "\n";
  const std::string slowest = SlowestRank(progress->slowest);
  if (!slowest.empty()) out += "Slowest:    " + slowest + "\n";
  if (progress->update_time) {
    const std::string updated = TimeText(progress->update_time);
    const bool stale = !StaleNote(*progress, now).empty();
    out += "Updated:    " + updated + " (" + Ago(updated, now) + " ago" + (stale ? ", stale" : "") + ")\n";
  }
  if (!progress->roles.empty()) {
    std::vector<std::vector<std::string>> rows = {{"ROLE", "RANKS", "REPORTING", "MIN STEP", "MEDIAN", "MAX STEP", "SPEED", "LOSS"}};
    for (const auto& [role, r] : progress->roles) {
      rows.push_back({Printable(role), std::to_string(r.ranks), std::to_string(r.reporting_ranks), std::to_string(r.min_step),
                      std::to_string(r.median_step), std::to_string(r.max_step), FormatNumber(r.steps_per_second),
                      FormatNumber(r.loss)});
    }
    out += FormatTable(rows);
  }
  return out;
}

// An elastic job's members against its range, how often they rendezvoused, and how long it has been
// starved below its minimum (it fails timeoutSeconds after belowMinimumSince).
std::string ElasticText(const StatusDocument::Elastic& elastic, int64_t now) {
  std::string names;
  constexpr size_t kShown = 8;
  for (size_t i = 0; i < elastic.members.size() && i < kShown; ++i) names += (i ? ", " : "") + Printable(elastic.members[i]);
  if (elastic.members.size() > kShown) names += ", ... and " + std::to_string(elastic.members.size() - kShown) + " more";
  std::string out = "\nElastic:\n";
  out += "  Workers:     " + std::to_string(elastic.members.size()) + " of " + std::to_string(elastic.min_replicas) + ".." +
         std::to_string(elastic.max_replicas) + ", " + std::to_string(elastic.rendezvous) + " rendezvous\n";
  if (!names.empty()) out += "  Members:     " + names + "\n";
  if (!elastic.etcd_endpoint.empty()) out += "  etcd:        " + Printable(elastic.etcd_endpoint) + "\n";
  if (const int64_t t = ParseTime(elastic.below_minimum_since); t >= 0) {
    const int64_t left = t + elastic.timeout_seconds - now;
    out += "  Starved:     below the minimum for " + HumanDuration(now - t) +
           (left > 0 ? "; fails in " + HumanDuration(left) + " unless workers return" : "; past its timeout") + "\n";
  }
  return out;
}

// A job queued in Kueue: where it waits and why, or who admitted it with which flavors, and what
// evicted it last.
std::string QueueText(const api::QueueStatus& queue, int64_t now) {
  std::string state;
  if (queue.state == "Admitted") {
    std::string placed;
    for (const auto& [role, count] : queue.admitted_counts) {
      std::vector<std::string> flavors;
      if (auto it = queue.flavors.find(role); it != queue.flavors.end()) {
        for (const auto& [resource, flavor] : it->second) {
          if (std::find(flavors.begin(), flavors.end(), flavor) == flavors.end()) flavors.push_back(flavor);
        }
      }
      placed += (placed.empty() ? "" : ", ") + role + " " + std::to_string(count) +
                (flavors.empty() ? "" : " on " + JoinStrings(flavors, "+"));
    }
    state = "admitted by ClusterQueue " + queue.cluster_queue + (placed.empty() ? "" : " (" + placed + ")");
  } else {
    state = (queue.state.empty() ? std::string("-") : queue.state) + " in LocalQueue " + queue.local_queue +
            (queue.message.empty() ? "" : ": " + queue.message);
  }
  std::string out = "\nQueue:\n  State:       " + Printable(state) + "\n  Workload:    " + Printable(queue.workload) + "\n";
  if (queue.evictions > 0) {
    std::string evictions = std::to_string(queue.evictions);
    if (const auto& last = queue.last_eviction) {
      evictions += ", the last " + Ago(FormatRfc3339(last->time), now) + " ago: " + last->reason +
                   (last->message.empty() ? "" : " (" + last->message + ")");
    }
    out += "  Evictions:   " + Printable(evictions) + "\n";
  }
  return out;
}

// The pods not Running or Succeeded, by name, with why.
std::vector<StatusDocument::WaitingPod> PodsNotRunning(const Json& pods) {
  std::vector<const Json*> sorted;
  for (const Json& pod : pods) sorted.push_back(&pod);
  std::sort(sorted.begin(), sorted.end(), [](const Json* a, const Json* b) {
    return StringMember(ObjectMember(*a, "metadata"), "name") < StringMember(ObjectMember(*b, "metadata"), "name");
  });
  std::vector<StatusDocument::WaitingPod> waiting;
  for (const Json* pod : sorted) {
    const std::string& phase = StringMember(ObjectMember(*pod, "status"), "phase");
    if (phase == "Running" || phase == "Succeeded") continue;
    waiting.push_back({StringMember(ObjectMember(*pod, "metadata"), "name"), phase.empty() ? "Pending" : phase, PodWhy(*pod)});
  }
  return waiting;
}

// The `max_events` most recent events, oldest first.
std::vector<StatusDocument::Event> RecentEvents(const Json& events, int max_events) {
  std::vector<const Json*> sorted;
  for (const Json& e : events) sorted.push_back(&e);
  std::stable_sort(sorted.begin(), sorted.end(),
                   [](const Json* a, const Json* b) { return ParseTime(EventTime(*a)) < ParseTime(EventTime(*b)); });
  if (max_events >= 0 && sorted.size() > static_cast<size_t>(max_events)) {
    sorted.erase(sorted.begin(), sorted.end() - max_events);
  }
  std::vector<StatusDocument::Event> recent;
  for (const Json* e : sorted) {
    recent.push_back({Raw(*e, "type"), Raw(*e, "reason"), Raw(*e, "message"), std::max<int64_t>(1, Int(*e, "count")),
                      EventTime(*e)});
  }
  return recent;
}

}  // namespace

std::string Printable(std::string_view text) { return EscapeControl(BoundText(text, kMaxPrintedText)); }

int64_t ParseTime(const std::string& text) {
  const auto t = ParseRfc3339(text);
  return t ? UnixSeconds(*t) : -1;
}

api::FleetJobStatus StatusOf(const Json& job) { return api::FleetJobStatus::FromJson(MemberOrNull(job, "status")); }

std::string PhaseText(const api::FleetJobStatus& status) {
  if (status.phase != api::JobPhase::kNone) return api::PhaseName(status.phase);
  return Raw(status.unknown_fields, "phase");   // one this fleetctl cannot read: kept, as written
}

std::string FormatTable(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (row.size() > width.size()) width.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 3, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  }
  return out;
}

std::vector<std::string> RoleNames(const Json& job) {
  std::vector<std::string> names;
  for (const RoleOfJob& role : Roles(job)) names.push_back(role.name);
  return names;
}

std::string JobsTable(const Json& jobs, bool with_namespace, int64_t now) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header = {"NAME", "MODE", "PHASE", "SERVERS", "WORKERS", "HETER", "RESTARTS", "AGE"};
  if (with_namespace) header.insert(header.begin(), "NAMESPACE");
  rows.push_back(header);
  for (const Json& job : jobs) {
    const Json& meta = MemberOrNull(job, "metadata");
    const api::FleetJobStatus status = StatusOf(job);
    const Json& spec = MemberOrNull(job, "spec");
    // SERVERS, WORKERS, and every heter stage in one column (as kubectl's Heter column).
    std::vector<RoleOfJob> servers, workers, heter;
    for (const RoleOfJob& role : Roles(job)) (role.heter ? heter : role.name == "server" ? servers : workers).push_back(role);
    auto counts = [&](const std::vector<RoleOfJob>& roles) -> std::string {
      return roles.empty() ? "-" : ReadyOfReplicas(status, roles);
    };
    std::vector<std::string> row = {Str(meta, "name"),
                                    status.mode.empty() ? Str(spec, "mode") : Printable(status.mode),
                                    PhaseOrNone(status),
                                    counts(servers),
                                    counts(workers),
                                    counts(heter),
                                    std::to_string(status.restart_count),
                                    Ago(Str(meta, "creationTimestamp"), now)};
    if (row[1].empty()) row[1] = "<none>";
    if (with_namespace) row.insert(row.begin(), Str(meta, "namespace"));
    rows.push_back(row);
  }
  return FormatTable(rows);
}

StatusDocument StatusDocument::Of(const Json& job, const Json& pods, const Json& events, int max_events) {
  const Json& meta = MemberOrNull(job, "metadata");
  const api::FleetJobStatus status = StatusOf(job);
  const Json& spec = MemberOrNull(job, "spec");
  StatusDocument d;
  d.name = Raw(meta, "name");
  d.ns = Raw(meta, "namespace");
  d.phase = PhaseText(status);
  d.mode = status.mode.empty() ? Raw(spec, "mode") : status.mode;
  d.network = status.network.empty() ? Raw(spec, "network", "PodIP") : status.network;
  d.run = status.run;
  d.restart_count = status.restart_count;
  d.ignored_failures = status.ignored_failures;
  d.message = status.message;
  d.created = Raw(meta, "creationTimestamp");
  d.start_time = TimeText(status.start_time);
  d.completion_time = TimeText(status.completion_time);
  for (const std::string& role : RoleNames(job)) d.roles.push_back({role, CountsOf(status, role)});
  const Json& written = MemberOrNull(job, "status");
  if (status.progress) d.progress = MemberOrNull(written, "progress");
  d.conditions = ArrayMember(written, "conditions");
  if (const Json& elastic = MemberOrNull(spec, "elastic"); elastic.is_object()) {
    const api::ElasticStatus observed = status.elastic.value_or(api::ElasticStatus{});
    d.elastic = Elastic{Int(elastic, "minReplicas"), Int(elastic, "maxReplicas"), Int(elastic, "timeoutSeconds"),
                        Raw(elastic, "etcdEndpoint"), observed.members, observed.rendezvous,
                        TimeText(observed.below_minimum_since)};
  }
  d.queue = status.queue;
  d.checkpoint = status.checkpoint;
  d.pods_not_running = PodsNotRunning(pods);
  d.events = RecentEvents(events, max_events);
  return d;
}

Json StatusDocument::ToJson() const {
  Json doc = {{"name", name}, {"namespace", ns}, {"phase", phase}, {"mode", mode}, {"network", network},
              {"run", run}, {"restartCount", restart_count}, {"message", message}, {"created", created},
              {"startTime", start_time}, {"completionTime", completion_time}, {"roles", Json::array()},
              {"progress", progress}, {"conditions", conditions}, {"podsNotRunning", Json::array()},
              {"events", Json::array()}};
  for (const Role& r : roles) {
    doc["roles"].push_back({{"role", r.role}, {"replicas", r.counts.replicas}, {"active", r.counts.active},
                            {"ready", r.counts.ready}, {"succeeded", r.counts.succeeded}, {"failed", r.counts.failed}});
  }
  if (elastic) {
    doc["elastic"] = {{"minReplicas", elastic->min_replicas}, {"maxReplicas", elastic->max_replicas},
                      {"timeoutSeconds", elastic->timeout_seconds}, {"etcdEndpoint", elastic->etcd_endpoint},
                      {"members", elastic->members}, {"rendezvous", elastic->rendezvous},
                      {"belowMinimumSince", elastic->below_minimum_since}};
  }
  if (queue) doc["queue"] = queue->ToJson();
  if (ignored_failures) doc["ignoredFailures"] = ignored_failures;
  if (checkpoint) doc["checkpoint"] = checkpoint->ToJson();
  for (const WaitingPod& p : pods_not_running) doc["podsNotRunning"].push_back({{"pod", p.pod}, {"phase", p.phase}, {"why", p.why}});
  for (const Event& e : events) {
    doc["events"].push_back({{"type", e.type}, {"reason", e.reason}, {"message", e.message}, {"count", e.count},
                             {"lastTimestamp", e.last_timestamp}});
  }
  return doc;
}

StatusDocument StatusDocument::FromJson(const Json& doc) {
  StatusDocument d;
  d.name = Raw(doc, "name");
  d.ns = Raw(doc, "namespace");
  d.phase = Raw(doc, "phase");
  d.mode = Raw(doc, "mode");
  d.network = Raw(doc, "network");
  d.run = Int(doc, "run");
  d.restart_count = Int(doc, "restartCount");
  d.message = Raw(doc, "message");
  d.created = Raw(doc, "created");
  d.start_time = Raw(doc, "startTime");
  d.completion_time = Raw(doc, "completionTime");
  for (const Json& r : ArrayMember(doc, "roles")) {
    const auto count = [&](const char* key) { return MemberAs(r, key, AsInt<int>).value_or(0); };
    d.roles.push_back({Raw(r, "role"), {count("replicas"), count("active"), count("ready"), count("succeeded"), count("failed")}});
  }
  d.progress = MemberOrNull(doc, "progress");
  d.conditions = ArrayMember(doc, "conditions");
  if (const Json& e = MemberOrNull(doc, "elastic"); e.is_object()) {
    Elastic elastic{Int(e, "minReplicas"), Int(e, "maxReplicas"), Int(e, "timeoutSeconds"), Raw(e, "etcdEndpoint"),
                    {}, Int(e, "rendezvous"), Raw(e, "belowMinimumSince")};
    for (const Json& m : ArrayMember(e, "members")) {
      if (m.is_string()) elastic.members.push_back(m.get<std::string>());
    }
    d.elastic = std::move(elastic);
  }
  d.queue = api::QueueStatus::FromJson(MemberOrNull(doc, "queue"));
  d.ignored_failures = Int(doc, "ignoredFailures");
  d.checkpoint = api::CheckpointStatus::FromJson(MemberOrNull(doc, "checkpoint"));
  for (const Json& p : ArrayMember(doc, "podsNotRunning")) d.pods_not_running.push_back({Raw(p, "pod"), Raw(p, "phase"), Raw(p, "why")});
  for (const Json& e : ArrayMember(doc, "events")) {
    d.events.push_back({Raw(e, "type"), Raw(e, "reason"), Raw(e, "message"), Int(e, "count"), Raw(e, "lastTimestamp")});
  }
  return d;
}

std::string StatusText(const StatusDocument& d, int64_t now) {
  std::string out;
  auto line = [&](const std::string& key, const std::string& value) {
    if (!value.empty()) out += key + std::string(key.size() < 12 ? 12 - key.size() : 1, ' ') + Printable(value) + "\n";
  };
  line("Name:", d.name);
  line("Namespace:", d.ns);
  line("Phase:", d.phase.empty() ? "<none> (the operator has not seen the job yet)" : d.phase);
  line("Message:", d.message);
  line("Mode:", d.mode);
  line("Network:", d.network);
  line("Run:", std::to_string(d.run));
  line("Restarts:", std::to_string(d.restart_count) +
                        (d.ignored_failures ? " (and " + std::to_string(d.ignored_failures) + " ignored by failure rules)" : ""));
  if (d.checkpoint) {
    line("Checkpoint:", "step " + std::to_string(d.checkpoint->step) + " saved before " + d.checkpoint->pod +
                            " stopped, " + Ago(FormatRfc3339(d.checkpoint->time), now) + " ago");
  }
  line("Created:", d.created.empty() ? "" : d.created + " (" + Ago(d.created, now) + " ago)");
  line("Started:", d.start_time);
  line("Completed:", d.completion_time);

  out += ProgressText(d.progress.is_object() ? std::optional(api::Progress::FromJson(d.progress)) : std::nullopt, now);
  if (d.elastic) out += ElasticText(*d.elastic, now);
  if (d.queue) out += QueueText(*d.queue, now);

  std::vector<std::vector<std::string>> roles = {{"ROLE", "REPLICAS", "ACTIVE", "READY", "SUCCEEDED", "FAILED"}};
  for (const StatusDocument::Role& r : d.roles) {
    roles.push_back({Printable(r.role), std::to_string(r.counts.replicas), std::to_string(r.counts.active),
                     std::to_string(r.counts.ready), std::to_string(r.counts.succeeded), std::to_string(r.counts.failed)});
  }
  out += "\nPods:\n" + FormatTable(roles);

  if (!d.conditions.empty()) {
    std::vector<std::vector<std::string>> rows = {{"TYPE", "STATUS", "REASON", "AGE", "MESSAGE"}};
    for (const Json& c : d.conditions) {
      rows.push_back({Str(c, "type"), Str(c, "status"), Str(c, "reason", "-"),
                      Str(c, "lastTransitionTime").empty() ? "-" : Ago(Str(c, "lastTransitionTime"), now),
                      Str(c, "message")});
    }
    out += "\nConditions:\n" + FormatTable(rows);
  }
  if (!d.pods_not_running.empty()) {
    std::vector<std::vector<std::string>> rows = {{"POD", "PHASE", "WHY"}};
    const size_t shown = std::min<size_t>(d.pods_not_running.size(), 10);
    for (size_t i = 0; i < shown; ++i) {
      const StatusDocument::WaitingPod& p = d.pods_not_running[i];
      rows.push_back({Printable(p.pod), Printable(p.phase), Printable(p.why)});
    }
    out += "\nNot running:\n" + FormatTable(rows);
    if (d.pods_not_running.size() > shown) out += "... and " + std::to_string(d.pods_not_running.size() - shown) + " more\n";
  }
  out += "\nEvents:\n";
  if (d.events.empty()) {
    out += "  <none>\n";
  } else {
    std::vector<std::vector<std::string>> rows = {{"TYPE", "REASON", "AGE", "COUNT", "MESSAGE"}};
    for (const StatusDocument::Event& e : d.events) {
      rows.push_back({Printable(e.type), Printable(e.reason), Ago(e.last_timestamp, now), std::to_string(e.count),
                      Printable(e.message)});
    }
    out += FormatTable(rows);
  }
  return out;
}

std::string ProgressLine(const Json& job) {
  const api::FleetJobStatus status = StatusOf(job);
  std::string line = PhaseOrNone(status);
  for (const RoleOfJob& role : Roles(job)) line += "  " + role.name + " " + ReadyOfReplicas(status, {role}) + " ready";
  if (status.restart_count > 0) line += "  restarts " + std::to_string(status.restart_count);
  if (!status.message.empty()) line += "  (" + Printable(status.message) + ")";
  return line;
}

std::string ProgressBar(double percent, int width) {
  const int done = static_cast<int>(std::floor(std::clamp(percent, 0.0, 100.0) * width / 100.0));
  return "[" + std::string(done, '#') + std::string(width - done, '.') + "]";
}

std::string ProgressSummary(const Json& progress, int64_t now) {
  return progress.is_object() ? SummaryOf(api::Progress::FromJson(progress), now) : "";
}

std::string WaitProgress::Update(const Json& job, int64_t now) {
  const std::string state = ProgressLine(job);
  const std::optional<api::Progress> training = StatusOf(job).progress;
  const std::string progress = training ? SummaryOf(*training, now) : "";
  const std::string line = name_ + ": " + state + (progress.empty() ? "" : "  " + progress);
  if (line == line_) return "";
  const bool new_state = state != state_ || line_.empty();
  if (!terminal_ && !new_state && now - written_at_ < kPlainProgressSeconds) return "";
  std::string out;
  if (terminal_) {
    out = new_state ? (open_ ? "\n" : "") + line : "\r" + line + "\x1b[K";
    open_ = true;
  } else {
    out = line + "\n";
  }
  state_ = state;
  line_ = line;
  written_at_ = now;
  return out;
}

std::string WaitProgress::Finish() {
  if (!open_) return "";
  open_ = false;
  return "\n";
}

std::string TopText(const Json& job, int64_t now) {
  const api::FleetJobStatus status = StatusOf(job);
  std::string out = Str(MemberOrNull(job, "metadata"), "name") + "  " + PhaseOrNone(status);
  if (!status.progress) return out + "  no progress reported yet\n";
  const api::Progress& progress = *status.progress;
  out += "  " + SummaryOf(progress, now);
  const std::string reporting = RanksReporting(progress);
  out += (reporting.empty() ? "" : "  " + reporting) + "\n\n";

  std::vector<api::RankProgress> ranks = progress.rank_details;
  // The straggler first: the lowest step (none at all is lowest), then the longest idle.
  std::stable_sort(ranks.begin(), ranks.end(), [](const api::RankProgress& a, const api::RankProgress& b) {
    if (a.step != b.step) return a.step < b.step;
    return a.idle_seconds.value_or(0) > b.idle_seconds.value_or(0);
  });
  const size_t total = ranks.size();
  if (ranks.size() > kTopRows) ranks.resize(kTopRows);
  std::vector<std::vector<std::string>> rows = {{"ROLE", "RANK", "POD", "STEP", "SPEED", "LOSS", "LAG", "IDLE", ""}};
  for (const api::RankProgress& r : ranks) {
    rows.push_back({r.role.empty() ? "-" : Printable(r.role), std::to_string(r.rank), r.pod.empty() ? "-" : Printable(r.pod),
                    Count(r.step), FormatNumber(r.steps_per_second), FormatNumber(r.loss), Lag(r.lag),
                    r.idle_seconds ? std::to_string(*r.idle_seconds) + "s" : "-", r.stalled.value_or(false) ? "stalled" : ""});
  }
  if (ranks.empty()) return out + "no rank has reported yet\n";
  out += FormatTable(rows);
  const size_t of = std::max(static_cast<size_t>(std::max(progress.ranks, 0)), total);
  if (of > ranks.size()) out += "(the " + std::to_string(ranks.size()) + " slowest of " + std::to_string(of) + " ranks)\n";
  return out;
}

}  // namespace fleet::cli
