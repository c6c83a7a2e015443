#include "fleet/cli/render.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "fleet/base/time.h"

namespace fleet::cli {
namespace {

const Json& Field(const Json& obj, const char* key) {
  static const Json kNull;
  if (!obj.is_object()) return kNull;
  auto it = obj.find(key);
  return it == obj.end() ? kNull : *it;
}

std::string Str(const Json& obj, const char* key, const std::string& fallback = "") {
  const Json& v = Field(obj, key);
  return v.is_string() ? v.get<std::string>() : fallback;
}

int64_t Int(const Json& obj, const char* key) {
  const Json& v = Field(obj, key);
  return v.is_number_integer() ? v.get<int64_t>() : 0;
}

std::string Printf(const char* format, int64_t a, int64_t b = 0) {
  char buf[32];
  std::snprintf(buf, sizeof buf, format, static_cast<long long>(a), static_cast<long long>(b));
  return buf;
}

std::string Ago(const std::string& time, int64_t now) {
  const int64_t t = ParseTime(time);
  return t < 0 ? "<unknown>" : FormatAge(now - t);
}

// An event's most recent time: lastTimestamp, eventTime, firstTimestamp, creationTimestamp.
std::string EventTime(const Json& event) {
  for (const char* key : {"lastTimestamp", "eventTime", "firstTimestamp"}) {
    const std::string t = Str(event, key);
    if (!t.empty()) return t;
  }
  return Str(Field(event, "metadata"), "creationTimestamp");
}

// Why a pod that is not running is where it is: a waiting container's reason, an unscheduled
// pod's condition, or the pod's own reason.
std::string PodWhy(const Json& pod) {
  const Json& status = Field(pod, "status");
  for (const char* list : {"initContainerStatuses", "containerStatuses"}) {
    for (const Json& c : Field(status, list).is_array() ? Field(status, list) : Json::array()) {
      const Json& waiting = Field(Field(c, "state"), "waiting");
      const std::string reason = Str(waiting, "reason");
      if (!reason.empty() && reason != "PodInitializing") {
        const std::string message = Str(waiting, "message");
        return Str(c, "name") + ": " + reason + (message.empty() ? "" : ": " + message);
      }
      const Json& terminated = Field(Field(c, "state"), "terminated");
      if (terminated.is_object() && Int(terminated, "exitCode") != 0) {
        return Str(c, "name") + ": exit code " + std::to_string(Int(terminated, "exitCode")) +
               (Str(terminated, "reason").empty() ? "" : " (" + Str(terminated, "reason") + ")");
      }
    }
  }
  for (const Json& c : Field(status, "conditions").is_array() ? Field(status, "conditions") : Json::array()) {
    if (Str(c, "type") == "PodScheduled" && Str(c, "status") == "False") {
      return Str(c, "reason", "Unschedulable") + (Str(c, "message").empty() ? "" : ": " + Str(c, "message"));
    }
  }
  const std::string reason = Str(status, "reason");
  const std::string message = Str(status, "message");
  if (!reason.empty()) return reason + (message.empty() ? "" : ": " + message);
  return Str(Field(pod, "spec"), "nodeName").empty() ? "not scheduled yet" : "";
}

}  // namespace

std::string FormatAge(int64_t s) {
  if (s < 0) s = 0;
  if (s < 120) return Printf("%llds", s);
  const int64_t m = s / 60;
  if (m < 10) return s % 60 ? Printf("%lldm%llds", m, s % 60) : Printf("%lldm", m);
  if (m < 180) return Printf("%lldm", m);
  const int64_t h = m / 60;
  if (h < 8) return m % 60 ? Printf("%lldh%lldm", h, m % 60) : Printf("%lldh", h);
  if (h < 48) return Printf("%lldh", h);
  const int64_t d = h / 24;
  if (d < 8) return h % 24 ? Printf("%lldd%lldh", d, h % 24) : Printf("%lldd", d);
  if (d < 730) return Printf("%lldd", d);
  return Printf("%lldy", d / 365);
}

int64_t ParseTime(const std::string& text) {
  const auto t = ParseRfc3339(text);
  return t ? std::chrono::floor<std::chrono::seconds>(t->time_since_epoch()).count() : -1;
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
  const Json& spec = Field(job, "spec");
  std::vector<std::string> roles;
  if (Field(spec, "server").is_object()) roles.push_back("server");
  roles.push_back("worker");
  const Json& heter = Field(spec, "heter");
  for (size_t i = 0; heter.is_array() && i < heter.size(); ++i) {
    roles.push_back(Str(heter[i], "name", "heter" + std::to_string(i + 1)));
  }
  return roles;
}

std::string JobsTable(const Json& jobs, bool with_namespace, int64_t now) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> header = {"NAME", "MODE", "PHASE", "SERVERS", "WORKERS", "HETER", "RESTARTS", "AGE"};
  if (with_namespace) header.insert(header.begin(), "NAMESPACE");
  rows.push_back(header);
  for (const Json& job : jobs) {
    const Json& meta = Field(job, "metadata");
    const Json& status = Field(job, "status");
    const Json& spec = Field(job, "spec");
    auto counts = [&](const char* role) -> std::string {
      if (!Field(spec, role).is_object()) return "-";
      const Json& rs = Field(Field(status, "replicaStatuses"), role);
      return std::to_string(Int(rs, "ready")) + "/" + std::to_string(Int(Field(spec, role), "replicas"));
    };
    // Every heter stage in one column, as kubectl's Heter column (status.heterReady).
    auto heter = [&]() -> std::string {
      const Json& stages = Field(spec, "heter");
      if (!stages.is_array() || stages.empty()) return "-";
      int64_t replicas = 0;
      for (const Json& stage : stages) replicas += Int(stage, "replicas");
      return std::to_string(Int(status, "heterReady")) + "/" + std::to_string(replicas);
    };
    std::vector<std::string> row = {Str(meta, "name"),
                                    Str(status, "mode", Str(spec, "mode", "")),
                                    Str(status, "phase", "<none>"),
                                    counts("server"),
                                    counts("worker"),
                                    heter(),
                                    std::to_string(Int(status, "restartCount")),
                                    Ago(Str(meta, "creationTimestamp"), now)};
    if (row[1].empty()) row[1] = "<none>";
    if (with_namespace) row.insert(row.begin(), Str(meta, "namespace"));
    rows.push_back(row);
  }
  return FormatTable(rows);
}

Json StatusDocument(const Json& job, const Json& pods, const Json& events, int max_events) {
  const Json& meta = Field(job, "metadata");
  const Json& status = Field(job, "status");
  const Json& spec = Field(job, "spec");
  Json doc = {{"name", Str(meta, "name")}, {"namespace", Str(meta, "namespace")},
              {"phase", Str(status, "phase")}, {"mode", Str(status, "mode", Str(spec, "mode"))},
              {"network", Str(status, "network", Str(spec, "network", "PodIP"))}, {"run", Int(status, "run")},
              {"restartCount", Int(status, "restartCount")}, {"message", Str(status, "message")},
              {"created", Str(meta, "creationTimestamp")}, {"startTime", Str(status, "startTime")},
              {"completionTime", Str(status, "completionTime")}};
  Json roles = Json::array();
  for (const std::string& role : RoleNames(job)) {
    const Json& rs = Field(Field(status, "replicaStatuses"), role.c_str());
    Json entry = {{"role", role}};
    for (const char* k : {"replicas", "active", "ready", "succeeded", "failed"}) entry[k] = Int(rs, k);
    roles.push_back(entry);
  }
  doc["roles"] = roles;
  doc["conditions"] = Field(status, "conditions").is_array() ? Field(status, "conditions") : Json::array();

  Json waiting = Json::array();
  std::vector<Json> sorted_pods(pods.begin(), pods.end());
  std::sort(sorted_pods.begin(), sorted_pods.end(), [](const Json& a, const Json& b) {
    return Str(Field(a, "metadata"), "name") < Str(Field(b, "metadata"), "name");
  });
  for (const Json& pod : sorted_pods) {
    const std::string phase = Str(Field(pod, "status"), "phase");
    if (phase == "Running" || phase == "Succeeded") continue;
    waiting.push_back({{"pod", Str(Field(pod, "metadata"), "name")}, {"phase", phase.empty() ? "Pending" : phase},
                       {"why", PodWhy(pod)}});
  }
  doc["podsNotRunning"] = waiting;

  std::vector<Json> evs(events.begin(), events.end());
  std::stable_sort(evs.begin(), evs.end(), [](const Json& a, const Json& b) {
    return ParseTime(EventTime(a)) < ParseTime(EventTime(b));
  });
  if (max_events >= 0 && evs.size() > static_cast<size_t>(max_events)) {
    evs.erase(evs.begin(), evs.end() - max_events);
  }
  Json recent = Json::array();
  for (const Json& e : evs) {
    recent.push_back({{"type", Str(e, "type")}, {"reason", Str(e, "reason")}, {"message", Str(e, "message")},
                      {"count", std::max<int64_t>(1, Int(e, "count"))}, {"lastTimestamp", EventTime(e)}});
  }
  doc["events"] = recent;
  return doc;
}

std::string StatusText(const Json& d, int64_t now) {
  std::string out;
  auto line = [&](const std::string& key, const std::string& value) {
    if (!value.empty()) out += key + std::string(key.size() < 12 ? 12 - key.size() : 1, ' ') + value + "\n";
  };
  line("Name:", Str(d, "name"));
  line("Namespace:", Str(d, "namespace"));
  line("Phase:", Str(d, "phase", "").empty() ? "<none> (the operator has not seen the job yet)" : Str(d, "phase"));
  line("Message:", Str(d, "message"));
  line("Mode:", Str(d, "mode"));
  line("Network:", Str(d, "network"));
  line("Run:", std::to_string(Int(d, "run")));
  line("Restarts:", std::to_string(Int(d, "restartCount")));
  line("Created:", Str(d, "created").empty() ? "" : Str(d, "created") + " (" + Ago(Str(d, "created"), now) + " ago)");
  line("Started:", Str(d, "startTime"));
  line("Completed:", Str(d, "completionTime"));

  std::vector<std::vector<std::string>> roles = {{"ROLE", "REPLICAS", "ACTIVE", "READY", "SUCCEEDED", "FAILED"}};
  for (const Json& r : Field(d, "roles")) {
    roles.push_back({Str(r, "role"), std::to_string(Int(r, "replicas")), std::to_string(Int(r, "active")),
                     std::to_string(Int(r, "ready")), std::to_string(Int(r, "succeeded")),
                     std::to_string(Int(r, "failed"))});
  }
  out += "\nPods:\n" + FormatTable(roles);

  const Json& conditions = Field(d, "conditions");
  if (conditions.is_array() && !conditions.empty()) {
    std::vector<std::vector<std::string>> rows = {{"TYPE", "STATUS", "REASON", "AGE", "MESSAGE"}};
    for (const Json& c : conditions) {
      rows.push_back({Str(c, "type"), Str(c, "status"), Str(c, "reason", "-"),
                      Str(c, "lastTransitionTime").empty() ? "-" : Ago(Str(c, "lastTransitionTime"), now),
                      Str(c, "message")});
    }
    out += "\nConditions:\n" + FormatTable(rows);
  }
  const Json& waiting = Field(d, "podsNotRunning");
  if (waiting.is_array() && !waiting.empty()) {
    std::vector<std::vector<std::string>> rows = {{"POD", "PHASE", "WHY"}};
    const size_t shown = std::min<size_t>(waiting.size(), 10);
    for (size_t i = 0; i < shown; ++i) {
      rows.push_back({Str(waiting[i], "pod"), Str(waiting[i], "phase"), Str(waiting[i], "why")});
    }
    out += "\nNot running:\n" + FormatTable(rows);
    if (waiting.size() > shown) out += "... and " + std::to_string(waiting.size() - shown) + " more\n";
  }
  const Json& events = Field(d, "events");
  out += "\nEvents:\n";
  if (!events.is_array() || events.empty()) {
    out += "  <none>\n";
  } else {
    std::vector<std::vector<std::string>> rows = {{"TYPE", "REASON", "AGE", "COUNT", "MESSAGE"}};
    for (const Json& e : events) {
      rows.push_back({Str(e, "type"), Str(e, "reason"), Ago(Str(e, "lastTimestamp"), now),
                      std::to_string(Int(e, "count")), Str(e, "message")});
    }
    out += FormatTable(rows);
  }
  return out;
}

std::string ProgressLine(const Json& job) {
  const Json& status = Field(job, "status");
  const Json& spec = Field(job, "spec");
  std::string line = Str(status, "phase", "<none>");
  for (const std::string& role : RoleNames(job)) {
    const Json& rs = Field(Field(status, "replicaStatuses"), role.c_str());
    int64_t replicas = Int(rs, "replicas");
    if (replicas == 0) {
      const Json& r = role == "server" || role == "worker" ? Field(spec, role.c_str()) : Json();
      replicas = Int(r, "replicas");
    }
    line += "  " + role + " " + std::to_string(Int(rs, "ready")) + "/" + std::to_string(replicas) + " ready";
  }
  if (Int(status, "restartCount") > 0) line += "  restarts " + std::to_string(Int(status, "restartCount"));
  const std::string message = Str(status, "message");
  if (!message.empty()) line += "  (" + message + ")";
  return line;
}

}  // namespace fleet::cli
