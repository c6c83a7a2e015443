#include "fleet/api/job_spec.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <set>

#include <re2/re2.h>

#include "fleet/api/log_pattern.h"
#include "fleet/api/names.h"
#include "fleet/api/user_regex.h"
#include "fleet/base/json_read.h"
#include "fleet/base/dns.h"
#include "fleet/base/strings.h"
#include "fleet/runtime/endpoint.h"

namespace fleet::api {
namespace {

// Reads optional typed fields of a JSON object, remembering the first error with its field path.
class FieldReader {
 public:
  FieldReader(const Json& object, std::string path) : object_(object), path_(std::move(path)) {}

  bool Has(const char* key) const { return object_.is_object() && object_.contains(key) && !object_[key].is_null(); }
  const Json& Get(const char* key) const { return object_[key]; }
  std::string Path(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

  void Int(const char* key, int64_t min, int64_t max, int64_t& out) {
    if (!Has(key)) return;
    const Json& v = object_[key];
    if (!v.is_number_integer()) return Fail(Path(key) + ": must be an integer");
    const int64_t n = v.get<int64_t>();
    if (n < min || n > max) {
      return Fail(Path(key) + ": must be between " + std::to_string(min) + " and " + std::to_string(max) +
                  ", got " + std::to_string(n));
    }
    out = n;
  }
  void Int(const char* key, int64_t min, int64_t max, int& out) {
    int64_t wide = out;
    Int(key, min, max, wide);
    out = static_cast<int>(wide);
  }
  void Bool(const char* key, bool& out) {
    if (!Has(key)) return;
    if (!object_[key].is_boolean()) return Fail(Path(key) + ": must be true or false");
    out = object_[key].get<bool>();
  }
  void String(const char* key, std::string& out) {
    if (!Has(key)) return;
    if (!object_[key].is_string()) return Fail(Path(key) + ": must be a string");
    out = object_[key].get<std::string>();
  }
  // A list of at most `max` non-empty strings.
  void Strings(const char* key, size_t max, std::vector<std::string>& out) {
    if (!Has(key)) return;
    const Json& v = object_[key];
    if (!v.is_array()) return Fail(Path(key) + ": must be a list of strings");
    if (v.size() > max) return Fail(Path(key) + ": at most " + std::to_string(max) + " entries, got " + std::to_string(v.size()));
    for (const Json& e : v) {
      if (!e.is_string() || e.get<std::string>().empty()) return Fail(Path(key) + ": entries must be non-empty strings");
      out.push_back(e.get<std::string>());
    }
  }
  template <typename E>
  void Enum(const char* key, const NameTable<E>& values, E& out) {
    if (!Has(key)) return;
    std::string names;
    for (const auto& [name, value] : values) {
      if (object_[key].is_string() && object_[key].get<std::string>() == name) {
        out = value;
        return;
      }
      names += (names.empty() ? "" : ", ") + std::string(name);
    }
    Fail(Path(key) + ": must be one of " + names + ", got " + object_[key].dump());
  }
  void Fail(const std::string& message) {
    if (error_.empty()) error_ = message;
  }
  const std::string& error() const { return error_; }

 private:
  const Json& object_;
  std::string path_;
  std::string error_;
};

// spec.launcher: "Auto" (each role's command decides) or a launcher.
const NameTable<std::optional<Launcher>>& LauncherChoices() {
  static const NameTable<std::optional<Launcher>> choices = [] {
    NameTable<std::optional<Launcher>> out = {{"Auto", std::nullopt}};
    for (const auto& [name, launcher] : Names<Launcher>()) out.emplace_back(name, launcher);
    return out;
  }();
  return choices;
}

// A role's replicas, restart policy and pod template; `min_replicas` is 0 for optional roles.
// `hosted_server`: the servers of runtime fleet, whose server container the operator provides, so
// the template is optional and may hold no container (or a fleet-ps-server one without an image).
Result<RoleSpec> ParseRole(const Json& json, const std::string& path, RoleKind kind, int min_replicas,
                           Network network, bool hosted_server = false) {
  RoleSpec role;
  role.kind = kind;
  if (!json.is_object()) return Error{path + ": must be an object with replicas and template"};
  FieldReader r(json, path);
  if (!r.Has("replicas")) return Error{path + ".replicas: is required"};
  r.Int("replicas", min_replicas, 10000, role.replicas);
  r.Enum("restartPolicy", Names<RestartPolicy>(), role.restart_policy);
  if (!r.error().empty()) return Error{r.error()};
  if (hosted_server && !r.Has("template")) {
    role.template_ = Json::object();
    return role;
  }
  if (!r.Has("template") || !r.Get("template").is_object()) {
    return Error{path + ".template: is required (a pod template with at least one container)"};
  }
  role.template_ = r.Get("template");
  const Json& spec = role.template_.value("spec", Json::object());
  const Json containers = spec.is_object() ? spec.value("containers", Json::array()) : Json::array();
  if (!containers.is_array() || (containers.empty() && !hosted_server)) {
    return Error{path + ".template.spec.containers: needs at least one container"};
  }
  std::set<std::string> names;
  for (size_t i = 0; i < containers.size(); ++i) {
    const Json& c = containers[i];
    const std::string where = path + ".template.spec.containers[" + std::to_string(i) + "]";
    if (!c.is_object() || !c.contains("name") || !c["name"].is_string() || c["name"].get<std::string>().empty()) {
      return Error{where + ".name: is required"};
    }
    const std::string name = c["name"].get<std::string>();
    if (!names.insert(name).second) return Error{where + ".name: is used twice"};
    if (!hosted_server && name == kPsServerContainer) {
      return Error{where + ".name: " + kPsServerContainer + " is the container the operator provides with spec.runtime fleet; " +
                   (kind == RoleKind::kServer ? "set spec.runtime to fleet or rename the container"
                                              : "only server pods have it; rename the container")};
    }
    const bool provided = hosted_server && name == kPsServerContainer;   // the operator fills in the image
    if (!provided && (!c.contains("image") || !c["image"].is_string() || c["image"].get<std::string>().empty())) {
      return Error{where + ".image: is required"};
    }
  }
  if (spec.is_object() && spec.contains("restartPolicy") && spec["restartPolicy"] != "Never") {
    return Error{path + ".template.spec.restartPolicy: must be Never or unset; use " + path +
                 ".restartPolicy to choose how the operator restarts pods"};
  }
  // A pod on the node's network listens on the node's IP, at ports other jobs' pods on the node
  // may hold: only spec.network HostNetwork allocates each job its own host ports.
  if (network != Network::kHostNetwork && spec.is_object() && spec.contains("hostNetwork") &&
      spec["hostNetwork"] != false) {
    return Error{path + ".template.spec.hostNetwork: must be false or unset; set spec.network: HostNetwork "
                 "to run pods on the node's network (the operator then gives the job its own block of host ports)"};
  }
  return role;
}

// spec.elastic, for a collective job whose workers are parsed. Paddle's elastic launcher (and
// fleetrun's) is collective only, and every node of a job must use the same first port, which
// HostNetwork's per-pod ports are not.
Result<ElasticSpec> ParseElastic(const Json& json, const FleetJobSpec& spec) {
  if (!json.is_object()) return Error{"spec.elastic: must be an object with minReplicas, maxReplicas and etcdEndpoint"};
  ElasticSpec e;
  FieldReader r(json, "spec.elastic");
  for (const char* required : {"minReplicas", "maxReplicas", "etcdEndpoint"}) {
    if (!r.Has(required)) return Error{r.Path(required) + ": is required"};
  }
  r.Int("minReplicas", 1, 10000, e.min_replicas);
  r.Int("maxReplicas", 1, 10000, e.max_replicas);
  r.String("etcdEndpoint", e.etcd_endpoint);
  r.Int("timeoutSeconds", 1, 7 * 24 * 3600, e.timeout_seconds);
  if (!r.error().empty()) return Error{r.error()};
  if (auto endpoint = ParseEndpoint(e.etcd_endpoint); !endpoint) {
    return Error{"spec.elastic.etcdEndpoint: must be etcd's client address as host:port (e.g. etcd.infra.svc:2379): " +
                 endpoint.error()};
  }
  if (spec.mode != JobMode::kCollective) {
    return Error{"spec.elastic: elastic jobs are collective, as Paddle's elastic launcher is; remove spec.server and "
                 "spec.heter, or remove spec.elastic"};
  }
  if (spec.network == Network::kHostNetwork) {
    return Error{"spec.elastic: HostNetwork gives every pod its own ports, and the nodes of an elastic job must share "
                 "one (spec.port); use network PodIP or Service"};
  }
  if (e.min_replicas > e.max_replicas) {
    return Error{"spec.elastic.minReplicas: " + std::to_string(e.min_replicas) + " is above maxReplicas " +
                 std::to_string(e.max_replicas)};
  }
  const int workers = spec.Find(RoleKind::kWorker)->replicas;
  if (workers < e.min_replicas || workers > e.max_replicas) {
    return Error{"spec.worker.replicas: " + std::to_string(workers) + " is outside spec.elastic's range " +
                 std::to_string(e.min_replicas) + ".." + std::to_string(e.max_replicas) +
                 "; scale within the range, or change the range (which restarts every pod)"};
  }
  return e;
}

std::string RolePath(const RoleSpec& role) {
  if (role.kind == RoleKind::kHeter) return "spec.heter[" + std::to_string(role.stage - 2) + "]";
  return "spec." + std::string(RoleKindName(role.kind));
}

// spec.launcher and spec.paddleVersion: each role's launcher (given, or read from its command).
Status ReadLaunchers(const Json& spec_json, FleetJobSpec& s) {
  FieldReader r(spec_json, "spec");
  std::optional<Launcher> given;
  r.Enum("launcher", LauncherChoices(), given);
  std::string version;
  r.String("paddleVersion", version);
  if (!r.error().empty()) return Error{r.error()};
  s.launcher = given;
  if (!version.empty()) {
    s.paddle_version = ParsePaddleVersion(version);
    if (!s.paddle_version) {
      return Error{"spec.paddleVersion: must be a Paddle release as major.minor (e.g. 2.6 or 3.0.0), got " + Quote(version)};
    }
  } else {
    s.paddle_version = ImagePaddleVersion(s.Find(RoleKind::kWorker)->template_);
  }
  for (RoleSpec& role : s.roles) {
    if (s.runtime == Runtime::kFleet && role.kind == RoleKind::kServer) continue;   // fleet-ps-server
    if (given) {
      role.launcher = *given;
    } else if (auto detected = DetectLauncher(role.template_)) {
      role.launcher = *detected;
      role.launcher_detected = true;
    }
    // Before 2.3, paddle.distributed.launch was the legacy launcher under another name.
    if (role.launcher == Launcher::kPaddleLaunch && s.paddle_version && s.paddle_version->Before(2, 3)) {
      role.launcher = Launcher::kFleetrun;
    }
  }
  return OkStatus();
}

// The field a role's launcher came from, for messages.
std::string LauncherField(const FleetJobSpec& s, const RoleSpec& role) {
  return s.launcher ? "spec.launcher" : RolePath(role) + ".template.spec.containers";
}

// The launcher in a role's pods can run the job: what they start and what the env can tell them.
Status CheckLauncher(const FleetJobSpec& s, const RoleSpec& role) {
  const std::string field = LauncherField(s, role);
  const std::string who = std::string(LauncherCommand(role.launcher));
  if (role.launcher == Launcher::kPaddleFormers && s.mode != JobMode::kCollective) {
    return Error{field + ": " + who + " runs collective training only; use mode collective, or run the PS script bare"};
  }
  if (role.launcher == Launcher::kPaddleFormers && TemplateGpus(role.template_) == 0) {
    return Error{field + ": " + who + " passes the pod's GPUs to Paddle's launcher as --gpus, and with none "
                 "(no nvidia.com/gpu limit in " + RolePath(role) + ".template) that flag swallows --master; give the "
                 "pods GPUs, or run python -m paddle.distributed.launch"};
  }
  if (role.launcher == Launcher::kPaddleLaunch && s.mode == JobMode::kHeterParameterServer) {
    return Error{field + ": " + who + " takes no heter stages from the env; run the heter job's script bare or under fleetrun"};
  }
  if (role.launcher == Launcher::kPaddleLaunch && s.mode == JobMode::kParameterServer && s.network != Network::kService) {
    return Error{"spec.network: " + who + " in PS mode (" + field + ") picks a pod's servers and trainers from the lists "
                 "by string prefix of its address, so the pod at 10.0.0.2 would also start 10.0.0.21's; use network "
                 "Service, whose stable names are no prefix of one another"};
  }
  if (IsPaddleLaunchFamily(role.launcher) && !s.elastic && s.paddle_version && !s.paddle_version->Before(2, 3) &&
      s.paddle_version->Before(2, 4) && !PassesFlag(role.template_, "rank")) {
    return Error{field + ": Paddle 2.3's launcher fails on PADDLE_RANK in the env, and without a rank the nodes after "
                 "the master's take random ranks; pass --rank=$(FLEET_NODE_RANK) to it (the operator sets "
                 "FLEET_NODE_RANK), use Paddle 2.4 or later, or correct spec.paddleVersion"};
  }
  if (s.mode != JobMode::kCollective || role.launcher == Launcher::kScript) return OkStatus();
  const int gpus = TemplateGpus(role.template_);
  if (gpus > 0 && s.processes_per_pod > gpus) {
    return Error{"spec.processesPerPod: " + std::to_string(s.processes_per_pod) + " processes, but " + RolePath(role) +
                 ".template asks for " + std::to_string(gpus) + " GPUs (nvidia.com/gpu) and " + who +
                 " gives each process its own"};
  }
  if (role.launcher == Launcher::kFleetrun && gpus > 0 && s.processes_per_pod != gpus &&
      !PassesFlag(role.template_, "gpus") && !PassesFlag(role.template_, "devices")) {
    return Error{"spec.processesPerPod: " + std::to_string(s.processes_per_pod) + ", but fleetrun starts one process per "
                 "visible GPU (" + std::to_string(gpus) + ": " + RolePath(role) + ".template's nvidia.com/gpu) unless "
                 "given --gpus; pass --gpus, or leave processesPerPod unset"};
  }
  return OkStatus();
}

// Launchers start the processes, one per GPU unless told otherwise: processesPerPod follows, so
// that ports, lists and the sidecar's ranks count what will run.
Status ResolveLaunchers(const Json& spec_json, FleetJobSpec& s) {
  FLEET_RETURN_IF_ERROR(ReadLaunchers(spec_json, s));
  const RoleSpec& worker = *s.Find(RoleKind::kWorker);
  const bool processes_given = FieldReader(spec_json, "spec").Has("processesPerPod");   // null reads as unset, as everywhere
  if (s.mode == JobMode::kCollective && !processes_given && worker.launcher != Launcher::kScript) {
    s.processes_per_pod = std::max(1, std::min(64, TemplateGpus(worker.template_)));
  }
  for (const RoleSpec& role : s.roles) FLEET_RETURN_IF_ERROR(CheckLauncher(s, role));
  return OkStatus();
}

// The runtime's and the launcher's own names, where they are spelt (topology.cc, launcher.cc).
template <typename E>
NameTable<E> NamedBy(std::string_view (*name_of)(E), std::initializer_list<E> values) {
  NameTable<E> table;
  for (E value : values) table.emplace_back(name_of(value), value);
  return table;
}

}  // namespace

template <>
const NameTable<JobMode>& Names<JobMode>() {
  static const auto names =
      NamedBy(JobModeName, {JobMode::kCollective, JobMode::kParameterServer, JobMode::kHeterParameterServer});
  return names;
}
template <>
const NameTable<DeviceKind>& Names<DeviceKind>() {
  static const auto names = NamedBy(DeviceKindName, {DeviceKind::kCpu, DeviceKind::kGpu, DeviceKind::kXpu});
  return names;
}
template <>
const NameTable<Launcher>& Names<Launcher>() {
  static const auto names = NamedBy(LauncherName, {Launcher::kScript, Launcher::kPaddleLaunch, Launcher::kFleetrun,
                                                   Launcher::kPaddleFormers});
  return names;
}
template <>
const NameTable<Runtime>& Names<Runtime>() {
  static const NameTable<Runtime> names = {{"paddle", Runtime::kPaddle}, {"fleet", Runtime::kFleet}};
  return names;
}
template <>
const NameTable<Network>& Names<Network>() {
  static const NameTable<Network> names = {
      {"PodIP", Network::kPodIP}, {"Service", Network::kService}, {"HostNetwork", Network::kHostNetwork}};
  return names;
}
template <>
const NameTable<Gloo>& Names<Gloo>() {
  static const NameTable<Gloo> names = {{"None", Gloo::kNone}, {"Workers", Gloo::kWorkers}, {"All", Gloo::kAll}};
  return names;
}
template <>
const NameTable<RoleKind>& Names<RoleKind>() {
  static const NameTable<RoleKind> names = {
      {"server", RoleKind::kServer}, {"worker", RoleKind::kWorker}, {"heter", RoleKind::kHeter}};
  return names;
}
template <>
const NameTable<RestartPolicy>& Names<RestartPolicy>() {
  static const NameTable<RestartPolicy> names = {
      {"Never", RestartPolicy::kNever}, {"OnFailure", RestartPolicy::kOnFailure}, {"ExitCode", RestartPolicy::kExitCode}};
  return names;
}
template <>
const NameTable<CleanPodPolicy>& Names<CleanPodPolicy>() {
  static const NameTable<CleanPodPolicy> names = {
      {"Running", CleanPodPolicy::kRunning}, {"All", CleanPodPolicy::kAll}, {"None", CleanPodPolicy::kNone}};
  return names;
}
template <>
const NameTable<FailureAction>& Names<FailureAction>() {
  static const NameTable<FailureAction> names = {{"FailJob", FailureAction::kFailJob},
                                                 {"RestartJob", FailureAction::kRestartJob},
                                                 {"RestartPod", FailureAction::kRestartPod},
                                                 {"Ignore", FailureAction::kIgnore}};
  return names;
}
template <>
const NameTable<StallAction>& Names<StallAction>() {
  static const NameTable<StallAction> names = {
      {"None", StallAction::kNone}, {"RestartJob", StallAction::kRestartJob}, {"FailJob", StallAction::kFailJob}};
  return names;
}
template <>
const NameTable<RestartStrategy>& Names<RestartStrategy>() {
  static const NameTable<RestartStrategy> names = {{"Recreate", RestartStrategy::kRecreate},
                                                   {"InPlace", RestartStrategy::kInPlace}};
  return names;
}
template <>
const NameTable<GangScheduler>& Names<GangScheduler>() {
  static const NameTable<GangScheduler> names = {{"None", GangScheduler::kNone}, {"Volcano", GangScheduler::kVolcano},
                                                 {"SchedulerPlugins", GangScheduler::kSchedulerPlugins},
                                                 {"Kubernetes", GangScheduler::kKubernetes}};
  return names;
}

std::string_view RoleKindName(RoleKind kind) { return NameOf(kind); }
std::string_view NetworkName(Network network) { return NameOf(network); }
std::string_view RuntimeName(Runtime runtime) { return NameOf(runtime); }

const RoleSpec* FleetJobSpec::Find(RoleKind kind) const {
  for (const RoleSpec& r : roles) {
    if (r.kind == kind) return &r;
  }
  return nullptr;
}

int FleetJobSpec::TotalPods() const {
  int total = 0;
  for (const RoleSpec& r : roles) total += r.replicas;
  return total;
}

std::string FailureRule::Describe() const {
  const std::string path = "spec.runPolicy.failureRules[" + std::to_string(index) + "]";
  return name.empty() ? path : "rule \"" + name + "\" (" + path + ")";   // names have no quotes (ParseFailureRule)
}

std::optional<std::string> FailureRule::MatchingLine(std::string_view log) const {
  if (!log_regex) return std::nullopt;
  while (!log.empty()) {
    const size_t end = std::min(log.find('\n'), log.size());
    const std::string_view line = log.substr(0, end);
    if (re2::RE2::PartialMatch(line, *log_regex)) return std::string(line);
    log.remove_prefix(std::min(end + 1, log.size()));
  }
  return std::nullopt;
}

namespace {

// onExitCodes: {operator: In | NotIn, values: [...]}.
Status ParseExitCodes(const Json& json, const std::string& path, FailureRule& rule) {
  if (!json.is_object()) return Error{path + ": must be an object with operator and values"};
  FieldReader r(json, path);
  std::string op = "In";
  r.String("operator", op);
  if (!r.error().empty()) return Error{r.error()};
  if (op != "In" && op != "NotIn") return Error{path + ".operator: must be one of In, NotIn, got " + Quote(op)};
  rule.exit_codes_in = op == "In";
  const Json* values = r.Has("values") ? &r.Get("values") : nullptr;
  if (!values || !values->is_array() || values->empty() || values->size() > 255) {
    return Error{path + ".values: must be a list of 1 to 255 exit codes"};
  }
  for (const Json& v : *values) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > 255) {
      return Error{path + ".values: exit codes are integers 0..255, got " + v.dump()};
    }
    const int code = v.get<int>();
    if (code == 0 && *rule.exit_codes_in) {
      return Error{path + ".values: 0 is no failure (a container that exited 0 succeeded); remove it"};
    }
    rule.exit_codes.push_back(code);
  }
  return OkStatus();
}

// One of spec.runPolicy.failureRules: at least one criterion, and a pattern RE2 compiles.
Result<FailureRule> ParseFailureRule(const Json& json, int index) {
  FailureRule rule;
  rule.index = index;
  const std::string path = "spec.runPolicy.failureRules[" + std::to_string(index) + "]";
  if (!json.is_object()) return Error{path + ": must be an object with an action and criteria"};
  FieldReader r(json, path);
  r.String("name", rule.name);
  const bool name_ok = std::all_of(rule.name.begin(), rule.name.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
  });
  if (!name_ok || rule.name.size() > 63) {
    return Error{r.Path("name") + ": at most 63 letters, digits, '-', '_' and '.', got " + Quote(rule.name)};
  }
  if (!r.Has("action")) return Error{path + ".action: is required (" + NameList<FailureAction>() + ")"};
  r.Enum("action", Names<FailureAction>(), rule.action);
  r.Strings("roles", 16, rule.roles);
  r.Strings("onReasons", 16, rule.reasons);
  r.String("onLogPattern", rule.log_pattern);
  if (!r.error().empty()) return Error{r.error()};
  if (r.Has("onExitCodes")) FLEET_RETURN_IF_ERROR(ParseExitCodes(r.Get("onExitCodes"), r.Path("onExitCodes"), rule));
  if (!rule.log_pattern.empty()) {
    auto regex = CompileUserRegex(rule.log_pattern);
    if (!regex) return Error{r.Path("onLogPattern") + ": not a valid regular expression: " + regex.error()};
    rule.log_regex = *regex;
  }
  if (!rule.exit_codes_in && rule.reasons.empty() && rule.log_pattern.empty()) {
    return Error{path + ": needs at least one of onExitCodes, onReasons, onLogPattern (a rule matching every "
                 "failure is a role's restartPolicy)"};
  }
  return rule;
}

Status ParseFailureRules(const FieldReader& rp, RunPolicy& p) {
  if (!rp.Has("failureRules")) return OkStatus();
  const Json& rules = rp.Get("failureRules");
  if (!rules.is_array() || rules.size() > 32) return Error{rp.Path("failureRules") + ": must be a list of at most 32 rules"};
  for (size_t i = 0; i < rules.size(); ++i) {
    FLEET_ASSIGN_OR_RETURN(auto rule, ParseFailureRule(rules[i], static_cast<int>(i)));
    p.failure_rules.push_back(std::move(rule));
  }
  return OkStatus();
}

// A rule's roles are the job's.
Status CheckFailureRuleRoles(const FleetJobSpec& s) {
  for (const FailureRule& rule : s.run_policy.failure_rules) {
    for (size_t i = 0; i < rule.roles.size(); ++i) {
      const bool known = std::any_of(s.roles.begin(), s.roles.end(), [&](const RoleSpec& r) { return r.name == rule.roles[i]; });
      if (known) continue;
      std::vector<std::string> names;
      for (const RoleSpec& r : s.roles) names.push_back(r.name);
      return Error{"spec.runPolicy.failureRules[" + std::to_string(rule.index) + "].roles[" + std::to_string(i) +
                   "]: the job has no role " + Quote(rule.roles[i]) + " (its roles: " + JoinStrings(names, ", ") + ")"};
    }
  }
  return OkStatus();
}

}  // namespace

Result<RunPolicy> ParseRunPolicy(const Json& spec) {
  RunPolicy p;
  if (!spec.is_object() || !spec.contains("runPolicy")) return p;
  FieldReader rp(spec["runPolicy"], "spec.runPolicy");
  rp.Int("backoffLimit", 0, 1000, p.backoff_limit);
  if (rp.Has("activeDeadlineSeconds")) {
    int64_t v = 0;
    rp.Int("activeDeadlineSeconds", 1, int64_t{1} << 40, v);
    p.active_deadline_seconds = v;
  }
  if (rp.Has("ttlSecondsAfterFinished")) {
    int64_t v = 0;
    rp.Int("ttlSecondsAfterFinished", 0, int64_t{1} << 40, v);
    p.ttl_seconds_after_finished = v;
  }
  rp.Enum("cleanPodPolicy", Names<CleanPodPolicy>(), p.clean_pod_policy);
  rp.Bool("suspend", p.suspend);
  rp.Int("pendingTimeoutSeconds", 1, int64_t{1} << 40, p.pending_timeout_seconds);
  rp.Enum("restartStrategy", Names<RestartStrategy>(), p.restart_strategy);
  if (!rp.error().empty()) return Error{rp.error()};
  FLEET_RETURN_IF_ERROR(ParseFailureRules(rp, p));
  return p;
}

namespace {

// The parts of ParseFleetJob, in the order it calls them. Each reads or checks one part of the
// object and answers the first error, naming the field.

Status ParseMetadata(const Json& object, FleetJob& job) {
  if (!object.is_object() || !object.contains("metadata") || !object["metadata"].is_object()) {
    return Error{"metadata: is required"};
  }
  FieldReader md(object["metadata"], "metadata");
  job.ns = "default";
  md.String("name", job.name);
  md.String("namespace", job.ns);
  md.String("uid", job.uid);
  md.Int("generation", 0, INT64_MAX, job.generation);
  if (!md.error().empty()) return Error{md.error()};
  for (const auto& [key, value] : ObjectMember(object["metadata"], "labels").items()) {
    if (value.is_string()) job.labels[key] = value.get<std::string>();
  }
  for (const auto& [key, value] : ObjectMember(object["metadata"], "annotations").items()) {
    if (value.is_string()) job.annotations[key] = value.get<std::string>();
  }
  // Pod names are <job>-<role>-<index> and Service names <job>-<role>-<index> too: a DNS label.
  if (!IsDnsLabel(job.name, 40)) {
    return Error{"metadata.name: must be a DNS label (lower-case letters, digits, '-') of at most 40 characters, "
                 "so that pod and service names derived from it stay valid"};
  }
  return OkStatus();
}

// The job-wide fields; the mode only when given (it is derived from the roles otherwise).
Status ParseJobFields(FieldReader& r, FleetJobSpec& s, std::optional<JobMode>& mode) {
  if (r.Has("mode")) {
    JobMode m = JobMode::kCollective;
    r.Enum("mode", Names<JobMode>(), m);
    mode = m;
  }
  r.Enum("network", Names<Network>(), s.network);
  r.Enum("gloo", Names<Gloo>(), s.gloo);
  r.Int("processesPerPod", 1, 64, s.processes_per_pod);
  r.Int("port", 1024, 65535, s.port);
  r.Int("totalSteps", 0, int64_t{1} << 50, s.total_steps);
  r.Enum("runtime", Names<Runtime>(), s.runtime);
  r.String("managedBy", s.managed_by);
  if (!r.error().empty()) return Error{r.error()};
  return OkStatus();
}

// spec.heter: the stages, each a role with a unique short name and a device.
Status ParseHeterStages(const Json& heter, FleetJobSpec& s) {
  if (!heter.is_array()) return Error{"spec.heter: must be a list of heter stages"};
  std::set<std::string> names;
  for (size_t i = 0; i < heter.size(); ++i) {
    const std::string path = "spec.heter[" + std::to_string(i) + "]";
    FLEET_ASSIGN_OR_RETURN(auto stage, ParseRole(heter[i], path, RoleKind::kHeter, 1, s.network));
    stage.stage = static_cast<int>(i) + 2;
    stage.name = "heter" + std::to_string(i + 1);
    FieldReader hr(heter[i], path);
    hr.String("name", stage.name);
    if (!hr.error().empty()) return Error{hr.error()};
    if (!IsDnsLabel(stage.name, 12) || stage.name == "server" || stage.name == "worker") {
      return Error{path + ".name: must be a short DNS label (at most 12 characters), not server or worker"};
    }
    if (!names.insert(stage.name).second) return Error{path + ".name: '" + stage.name + "' is used twice"};
    hr.Enum("device", Names<DeviceKind>(), stage.device);
    if (!hr.error().empty()) return Error{hr.error()};
    s.roles.push_back(stage);
  }
  return OkStatus();
}

// The roles in the order their ranks follow: servers, workers, heter stages.
Status ParseRoles(const FieldReader& r, FleetJobSpec& s) {
  if (r.Has("server")) {
    FLEET_ASSIGN_OR_RETURN(auto server, ParseRole(r.Get("server"), "spec.server", RoleKind::kServer, 0, s.network,
                                                  s.runtime == Runtime::kFleet));
    server.name = "server";
    if (server.replicas > 0) s.roles.push_back(server);
  }
  if (!r.Has("worker")) return Error{"spec.worker: is required"};
  FLEET_ASSIGN_OR_RETURN(auto worker, ParseRole(r.Get("worker"), "spec.worker", RoleKind::kWorker, 1, s.network));
  worker.name = "worker";
  s.roles.push_back(worker);
  return r.Has("heter") ? ParseHeterStages(r.Get("heter"), s) : OkStatus();
}

// The mode: given, or derived from the roles present; and what the mode and runtime allow.
Status ResolveMode(std::optional<JobMode> mode, FleetJobSpec& s) {
  const bool has_server = s.Find(RoleKind::kServer) != nullptr;
  const bool has_heter = s.Find(RoleKind::kHeter) != nullptr;
  s.mode = mode.value_or(has_heter ? JobMode::kHeterParameterServer
                                   : has_server ? JobMode::kParameterServer : JobMode::kCollective);
  if (s.mode == JobMode::kCollective && (has_server || has_heter)) {
    return Error{"spec.mode: collective jobs have workers only; remove spec.server/spec.heter or set mode ps"};
  }
  if (s.runtime == Runtime::kFleet && s.mode == JobMode::kCollective) {
    return Error{"spec.runtime: fleet serves parameter servers, and a collective job has none; use runtime paddle "
                 "(trainers can still use fleet_runtime's collectives, which read the same env)"};
  }
  if (s.runtime == Runtime::kFleet && has_heter) {
    return Error{"spec.heter: the fleet runtime has no heter trainers (TRAINING_ROLE=HETER_TRAINER); use runtime paddle "
                 "for heter jobs"};
  }
  if (s.runtime == Runtime::kFleet && s.gloo != Gloo::kNone) {
    return Error{"spec.gloo: with runtime fleet nobody serves Gloo's HTTP store (Paddle's servers do); the fleet "
                 "runtime's trainers meet at barriers through the parameter servers: remove spec.gloo"};
  }
  if (s.mode != JobMode::kCollective && !has_server) {
    return Error{"spec.server: a " + std::string(JobModeName(s.mode)) + " job needs at least one server"};
  }
  if (s.mode == JobMode::kParameterServer && has_heter) {
    return Error{"spec.mode: heter stages need mode ps-heter (or leave mode unset)"};
  }
  if (s.mode == JobMode::kHeterParameterServer && !has_heter) {
    return Error{"spec.heter: a ps-heter job needs at least one heter stage"};
  }
  if (s.processes_per_pod > 1 && s.mode != JobMode::kCollective) {
    return Error{"spec.processesPerPod: only collective pods run several processes (fleetrun inside the pod)"};
  }
  return OkStatus();
}

Status ParseNetworkTopology(const Json& scheduling, Scheduling& s) {
  if (!scheduling.contains("networkTopology") || scheduling["networkTopology"].is_null()) return OkStatus();
  if (s.gang != GangScheduler::kVolcano) {
    return Error{"spec.scheduling.networkTopology: network topologies are Volcano's (its HyperNodes); set "
                 "spec.scheduling.gang to Volcano, or with Kueue use its podset-*-topology annotations"};
  }
  if (!scheduling["networkTopology"].is_object()) return Error{"spec.scheduling.networkTopology: must be an object"};
  FieldReader nt(scheduling["networkTopology"], "spec.scheduling.networkTopology");
  NetworkTopology topology;
  nt.String("mode", topology.mode);
  int tier = 0;
  nt.Int("highestTierAllowed", 0, 1000, tier);
  if (!nt.error().empty()) return Error{nt.error()};
  if (topology.mode != "hard" && topology.mode != "soft") {
    return Error{"spec.scheduling.networkTopology.mode: must be hard or soft, got \"" + topology.mode + "\""};
  }
  if (nt.Has("highestTierAllowed")) topology.highest_tier_allowed = tier;
  s.network_topology = topology;
  return OkStatus();
}

Status ParseScheduling(const Json& spec, FleetJobSpec& s) {
  if (!spec.contains("scheduling")) return OkStatus();
  FieldReader sc(spec["scheduling"], "spec.scheduling");
  sc.Enum("gang", Names<GangScheduler>(), s.scheduling.gang);
  sc.String("queue", s.scheduling.queue);
  sc.String("priorityClassName", s.scheduling.priority_class_name);
  if (!sc.error().empty()) return Error{sc.error()};
  if (!s.scheduling.queue.empty() && s.scheduling.gang != GangScheduler::kVolcano) {
    return Error{"spec.scheduling.queue: queues are Volcano's; set spec.scheduling.gang to Volcano"};
  }
  return ParseNetworkTopology(spec["scheduling"], s.scheduling);
}

Status ParseSidecar(const Json& spec, FleetJobSpec& s) {
  if (!spec.contains("sidecar")) return OkStatus();
  FieldReader sd(spec["sidecar"], "spec.sidecar");
  sd.String("image", s.sidecar.image);
  sd.Int("metricsPort", 1024, 65535, s.sidecar.metrics_port);
  if (sd.Has("resources")) s.sidecar.resources = sd.Get("resources");
  sd.Strings("logFiles", 16, s.sidecar.log_files);
  sd.Strings("patterns", 16, s.sidecar.patterns);
  sd.Int("stallWindowSeconds", 0, 7 * 24 * 3600, s.sidecar.stall_window_seconds);
  sd.Enum("stallAction", Names<StallAction>(), s.sidecar.stall_action);
  // Checked with the grammar the sidecar compiles them with, so that a pattern it would refuse
  // fails the job with a message instead of crash-looping every pod's sidecar.
  for (const std::string& pattern : s.sidecar.patterns) {
    if (auto compiled = CompileLogPattern(pattern); !compiled) sd.Fail("spec.sidecar.patterns: " + compiled.error());
  }
  for (const std::string& file : s.sidecar.log_files) {
    if (file.front() != '/') sd.Fail("spec.sidecar.logFiles: \"" + file + "\" must be an absolute path (in a volume the trainer and the sidecar both mount)");
  }
  if (!sd.error().empty()) return Error{sd.error()};
  return OkStatus();
}

Status ParseCheckpoint(const Json& spec, FleetJobSpec& s) {
  if (!spec.contains("checkpoint") || spec["checkpoint"].is_null()) return OkStatus();
  if (!spec["checkpoint"].is_object()) return Error{"spec.checkpoint: must be an object with beforeStop and timeoutSeconds"};
  FieldReader cp(spec["checkpoint"], "spec.checkpoint");
  cp.Bool("beforeStop", s.checkpoint.before_stop);
  cp.Int("timeoutSeconds", 1, 3600, s.checkpoint.timeout_seconds);
  if (!cp.error().empty()) return Error{cp.error()};
  return OkStatus();
}

// A pod listens on spec.port .. port+processesPerPod-1 (Paddle), port+processesPerPod (server 0's
// gloo HTTP store) and the sidecar's metrics port (HostNetwork allocates all of them instead).
Status CheckPorts(const FleetJobSpec& s) {
  if (s.port + s.processes_per_pod - 1 > 65535) return Error{"spec.port: port + processesPerPod runs past 65535"};
  if (s.network != Network::kHostNetwork && s.sidecar.metrics_port >= s.port &&
      s.sidecar.metrics_port <= s.port + s.processes_per_pod) {
    return Error{"spec.sidecar.metricsPort: " + std::to_string(s.sidecar.metrics_port) + " overlaps the pod's ports " +
                 std::to_string(s.port) + ".." + std::to_string(s.port + s.processes_per_pod) +
                 " (spec.port, processesPerPod, and the gloo HTTP store after them); move spec.port or the metrics port"};
  }
  return OkStatus();
}

}  // namespace

Result<FleetJobSpec> FleetJobSpec::FromJson(const Json& spec) {
  if (!spec.is_object()) return Error{"spec: is required"};
  FleetJobSpec s;
  FieldReader r(spec, "spec");
  std::optional<JobMode> mode;
  FLEET_RETURN_IF_ERROR(ParseJobFields(r, s, mode));
  FLEET_RETURN_IF_ERROR(ParseRoles(r, s));
  FLEET_RETURN_IF_ERROR(ResolveMode(mode, s));
  if (s.port + s.processes_per_pod - 1 > 65535) return Error{"spec.port: port + processesPerPod runs past 65535"};
  FLEET_ASSIGN_OR_RETURN(s.run_policy, ParseRunPolicy(spec));
  FLEET_RETURN_IF_ERROR(CheckFailureRuleRoles(s));
  FLEET_RETURN_IF_ERROR(ParseScheduling(spec, s));
  FLEET_RETURN_IF_ERROR(ParseSidecar(spec, s));
  FLEET_RETURN_IF_ERROR(ParseCheckpoint(spec, s));
  if (r.Has("elastic")) {
    FLEET_ASSIGN_OR_RETURN(s.elastic, ParseElastic(r.Get("elastic"), s));
  }
  FLEET_RETURN_IF_ERROR(ResolveLaunchers(spec, s));
  // After the launchers: they may derive processesPerPod from the pods' GPUs.
  FLEET_RETURN_IF_ERROR(CheckPorts(s));
  return s;
}

namespace {

Json RoleToJson(const RoleSpec& role) {
  Json out = {{"replicas", role.replicas}, {"restartPolicy", NameOf(role.restart_policy)}};
  if (!role.template_.empty()) out["template"] = role.template_;   // empty: runtime fleet's servers
  if (role.kind == RoleKind::kHeter) {
    out["name"] = role.name;
    out["device"] = NameOf(role.device);
  }
  return out;
}

Json FailureRuleToJson(const FailureRule& rule) {
  Json out = {{"action", NameOf(rule.action)}};
  if (!rule.name.empty()) out["name"] = rule.name;
  if (!rule.roles.empty()) out["roles"] = rule.roles;
  if (rule.exit_codes_in) out["onExitCodes"] = {{"operator", *rule.exit_codes_in ? "In" : "NotIn"}, {"values", rule.exit_codes}};
  if (!rule.reasons.empty()) out["onReasons"] = rule.reasons;
  if (!rule.log_pattern.empty()) out["onLogPattern"] = rule.log_pattern;
  return out;
}

Json RunPolicyToJson(const RunPolicy& p) {
  Json out = {{"backoffLimit", p.backoff_limit}, {"cleanPodPolicy", NameOf(p.clean_pod_policy)},
              {"suspend", p.suspend}, {"pendingTimeoutSeconds", p.pending_timeout_seconds},
              {"restartStrategy", NameOf(p.restart_strategy)}};
  if (p.active_deadline_seconds) out["activeDeadlineSeconds"] = *p.active_deadline_seconds;
  if (p.ttl_seconds_after_finished) out["ttlSecondsAfterFinished"] = *p.ttl_seconds_after_finished;
  for (const FailureRule& rule : p.failure_rules) out["failureRules"].push_back(FailureRuleToJson(rule));
  return out;
}

Json NetworkTopologyToJson(const NetworkTopology& nt) {
  Json out = {{"mode", nt.mode}};
  if (nt.highest_tier_allowed) out["highestTierAllowed"] = *nt.highest_tier_allowed;
  return out;
}

Json SchedulingToJson(const Scheduling& sc) {
  Json out = {{"gang", NameOf(sc.gang)}};
  if (!sc.queue.empty()) out["queue"] = sc.queue;
  if (!sc.priority_class_name.empty()) out["priorityClassName"] = sc.priority_class_name;
  if (sc.network_topology) out["networkTopology"] = NetworkTopologyToJson(*sc.network_topology);
  return out;
}

Json SidecarToJson(const SidecarSpec& sd) {
  Json out = {{"metricsPort", sd.metrics_port}, {"logFiles", sd.log_files}, {"patterns", sd.patterns},
              {"stallWindowSeconds", sd.stall_window_seconds}, {"stallAction", NameOf(sd.stall_action)}};
  if (!sd.image.empty()) out["image"] = sd.image;   // unset: the operator's --sidecar-image
  if (!sd.resources.is_null()) out["resources"] = sd.resources;
  return out;
}

}  // namespace

Json FleetJobSpec::ToJson() const {
  Json out = {{"mode", NameOf(mode)},
              {"runtime", NameOf(runtime)},
              {"launcher", launcher ? NameOf(*launcher) : "Auto"},
              {"network", NameOf(network)},
              {"gloo", NameOf(gloo)},
              {"processesPerPod", processes_per_pod},
              {"port", port},
              {"totalSteps", total_steps},
              {"runPolicy", RunPolicyToJson(run_policy)},
              {"scheduling", SchedulingToJson(scheduling)},
              {"sidecar", SidecarToJson(sidecar)},
              {"checkpoint", {{"beforeStop", checkpoint.before_stop}, {"timeoutSeconds", checkpoint.timeout_seconds}}}};
  if (paddle_version) out["paddleVersion"] = paddle_version->ToString();
  if (!managed_by.empty()) out["managedBy"] = managed_by;
  for (const RoleSpec& role : roles) {
    if (role.kind == RoleKind::kHeter) {
      out["heter"].push_back(RoleToJson(role));
    } else {
      out[std::string(NameOf(role.kind))] = RoleToJson(role);
    }
  }
  if (elastic) {
    out["elastic"] = {{"minReplicas", elastic->min_replicas}, {"maxReplicas", elastic->max_replicas},
                      {"etcdEndpoint", elastic->etcd_endpoint}, {"timeoutSeconds", elastic->timeout_seconds}};
  }
  return out;
}

std::optional<std::string> ManagedElsewhere(const Json& object) {
  const Json* by = Member(ObjectMember(object, "spec"), "managedBy");
  if (!by || by->is_null()) return std::nullopt;
  if (!by->is_string()) return by->dump();   // the CRD admits only strings: not ours to read
  const std::string& name = by->get_ref<const std::string&>();
  if (name.empty() || name == kFleetJobController) return std::nullopt;
  return name;
}

Result<FleetJob> ParseFleetJob(const Json& object) {
  FleetJob job;
  FLEET_RETURN_IF_ERROR(ParseMetadata(object, job));
  FLEET_ASSIGN_OR_RETURN(job.spec, FleetJobSpec::FromJson(object.value("spec", Json())));
  return job;
}

FleetJobObject ReadFleetJob(const Json& object) {
  FleetJobObject read;
  const Json& meta = object.is_object() ? object.value("metadata", Json::object()) : Json::object();
  if (meta.is_object()) {
    FieldReader md(meta, "metadata");
    md.String("name", read.name);
    md.String("namespace", read.ns);
    read.deleting = meta.contains("deletionTimestamp");
  }
  auto parsed = ParseFleetJob(object);
  if (parsed) {
    read.run_policy = parsed->spec.run_policy;
    read.job = std::move(*parsed);
    return read;
  }
  read.invalid = parsed.error();
  auto policy = ParseRunPolicy(object.is_object() ? object.value("spec", Json::object()) : Json::object());
  if (policy) read.run_policy = *policy;
  return read;
}

}  // namespace fleet::api
