#include "fleet/sidecar/options.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include "fleet/base/dns.h"
#include "fleet/base/strings.h"
#include "fleet/runtime/endpoint.h"
#include "fleet/sidecar/step_parser.h"
#include "fleet/sidecar/user_regex.h"

namespace fleet::sidecar {
namespace {

// A Prometheus label value and a log field: printable, no spaces.
bool IsPlainToken(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte > 0x20 && byte < 0x7f;
  });
}

// The listen address: HOST:PORT, [IPV6]:PORT or :PORT with a port 0-65535 (0 = any free port).
Result<std::string> ParseListen(std::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return Error{"--listen: expected HOST:PORT, got " + Quote(text)};
  std::string_view host = text.substr(0, colon);
  std::string_view port = text.substr(colon + 1);
  int value = 0;
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || port[0] < '0' || port[0] > '9' || ec != std::errc() || ptr != port.data() + port.size() ||
      value > 65535) {
    return Error{"--listen: expected HOST:PORT with a port 0-65535, got " + Quote(text)};
  }
  const bool bracketed = host.size() > 2 && host.front() == '[' && host.back() == ']';
  if (!bracketed && host.find(':') != std::string_view::npos) {
    return Error{"--listen: put an IPv6 address in brackets ([addr]:PORT), got " + Quote(text)};
  }
  if (std::any_of(host.begin(), host.end(), [](char c) { return static_cast<unsigned char>(c) <= 0x20; })) {
    return Error{"--listen: the host contains whitespace or control characters: " + Quote(text)};
  }
  return std::string(text);
}

// The flags. Value flags take --name=value or --name value; boolean flags take no value (or =true /
// =false). Gate flags are refused by `agent`.
const std::set<std::string>& GateValueFlags() {
  static const std::set<std::string> flags = {
      "run", "config-map", "mode", "server-connect-timeout", "server-retry-max", "api-timeout", "api-retry-max",
      "watch-timeout"};
  return flags;
}

const std::set<std::string>& CommonValueFlags() {
  static const std::set<std::string> flags = {
      "namespace", "job", "pod", "role", "metrics-port", "kubeconfig", "listen",
      "rank", "ranks", "log-dir", "log-file", "pattern", "max-line-bytes", "log-poll-interval", "stall-window",
      "report-http", "report-udp", "report-socket", "main-process", "main-process-match", "peer-check-interval",
      "condition-min-interval"};
  return flags;
}

const std::set<std::string>& RepeatableFlags() {
  static const std::set<std::string> flags = {"log-file", "pattern"};
  return flags;
}

constexpr size_t kMaxRepeats = 16;

struct RawFlags {
  std::map<std::string, std::string> values;
  std::map<std::string, std::vector<std::string>> repeated;
  std::map<std::string, bool> booleans;
};

Result<RawFlags> ReadFlags(const std::vector<std::string>& args, size_t first, bool gate) {
  RawFlags raw;
  for (size_t i = first; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) return Error{"unexpected argument " + Quote(arg)};
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    if (name == "exit-when-ready" || name == "pod-condition") {
      if (name == "exit-when-ready" && !gate) return Error{"--exit-when-ready is a flag of 'gate'"};
      if (raw.booleans.count(name)) return Error{"--" + name + " is given twice"};
      if (eq == std::string::npos) {
        raw.booleans[name] = true;
      } else {
        const std::string value = arg.substr(eq + 1);
        if (value != "true" && value != "false") {
          return Error{"--" + name + " takes no value (or true/false), got " + Quote(value)};
        }
        raw.booleans[name] = value == "true";
      }
      continue;
    }
    const bool known = CommonValueFlags().count(name) || GateValueFlags().count(name);
    if (!known) return Error{"unknown flag --" + name + " (see fleet-sidecar --help)"};
    if (!gate && GateValueFlags().count(name)) return Error{"--" + name + " is a flag of 'gate', not of 'agent'"};
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
      value = args[++i];
    } else {
      return Error{"--" + name + " needs a value (--" + name + "=VALUE)"};
    }
    if (RepeatableFlags().count(name)) {
      auto& list = raw.repeated[name];
      if (list.size() == kMaxRepeats) return Error{"--" + name + " is given more than " + std::to_string(kMaxRepeats) + " times"};
      list.push_back(value);
      continue;
    }
    if (!raw.values.emplace(name, value).second) return Error{"--" + name + " is given twice"};
  }
  return raw;
}

Status Duration(RawFlags& raw, const char* flag, std::chrono::milliseconds* out) {
  if (!raw.values.count(flag)) return OkStatus();
  auto d = ParseDuration(raw.values[flag], "--" + std::string(flag));
  if (!d) return Error{d.error()};
  *out = *d;
  return OkStatus();
}

Result<int> BoundedInt(const std::string& text, const std::string& flag, int lo, int hi) {
  auto n = ParseNonNegativeInt(text, flag);
  if (!n) return Error{n.error()};
  if (*n < lo || *n > hi) {
    return Error{flag + ": " + Quote(text) + " is out of range (" + std::to_string(lo) + "-" + std::to_string(hi) + ")"};
  }
  return *n;
}

// The identity and serving flags both subcommands share.
Status ParseIdentity(RawFlags& raw, const EnvMap& env, bool gate, GateOptions* o) {
  const std::vector<const char*> required =
      gate ? std::vector<const char*>{"namespace", "job", "pod", "role", "run", "config-map", "metrics-port"}
           : std::vector<const char*>{"job", "role", "metrics-port"};
  for (const char* flag : required) {
    if (!raw.values.count(flag)) return Error{"missing required flag --" + std::string(flag)};
  }
  auto& values = raw.values;
  o->ns = values.count("namespace") ? values["namespace"] : "default";
  if (!IsDnsLabel(o->ns)) {
    return Error{"--namespace: " + Quote(o->ns) + " is not a namespace name (a DNS label: a-z, 0-9, '-')"};
  }
  o->job = values["job"];
  if (!IsDnsSubdomain(o->job)) return Error{"--job: " + Quote(o->job) + " is not an object name"};
  if (values.count("pod")) {
    o->pod = values["pod"];
  } else {  // agent only
    auto pod = env.find("POD_NAME");
    auto host = env.find("HOSTNAME");
    o->pod = pod != env.end() && !pod->second.empty() ? pod->second
             : host != env.end() && !host->second.empty() ? host->second
                                                           : "local";
  }
  // Object names are DNS subdomains; the check also keeps ',' and '=' out of the field selector.
  if (!IsDnsSubdomain(o->pod)) return Error{"--pod: " + Quote(o->pod) + " is not a pod name"};
  o->role = values["role"];
  if (!IsPlainToken(o->role)) return Error{"--role: " + Quote(o->role) + " is not a role name"};
  auto port = ParsePort(values["metrics-port"], "--metrics-port");
  if (!port) return Error{port.error()};
  o->metrics_port = *port;
  if (values.count("kubeconfig")) {
    o->kubeconfig = values["kubeconfig"];
    if (o->kubeconfig.empty()) return Error{"--kubeconfig: the path is empty"};
  }
  if (values.count("listen")) {
    auto listen = ParseListen(values["listen"]);
    if (!listen) return Error{listen.error()};
    o->listen = *listen;
  } else {
    o->listen = DefaultListenAddress(env, o->metrics_port);
  }
  return OkStatus();
}

Status ParseGateFlags(RawFlags& raw, GateOptions* o) {
  auto& values = raw.values;
  o->exit_when_ready = raw.booleans.count("exit-when-ready") && raw.booleans["exit-when-ready"];
  o->config_map = values["config-map"];
  if (!IsDnsSubdomain(o->config_map)) {
    return Error{"--config-map: " + Quote(o->config_map) + " is not a ConfigMap name"};
  }
  auto run = ParseNonNegativeInt(values["run"], "--run");
  if (!run) return Error{run.error()};
  o->run = *run;
  if (values.count("mode")) {
    o->mode = values["mode"];
    if (o->mode != "collective" && o->mode != "ps" && o->mode != "ps-heter") {
      return Error{"--mode: expected collective, ps or ps-heter, got " + Quote(o->mode)};
    }
  }
  for (auto [flag, out] : {std::pair<const char*, std::chrono::milliseconds*>{"server-connect-timeout", &o->server_connect_timeout},
                           {"server-retry-max", &o->server_retry_max},
                           {"api-timeout", &o->api_timeout},
                           {"api-retry-max", &o->api_retry_max}}) {
    if (auto s = Duration(raw, flag, out); !s) return Error{s.error()};
  }
  std::chrono::milliseconds watch = o->watch_timeout;
  if (auto s = Duration(raw, "watch-timeout", &watch); !s) return Error{s.error()};
  if (watch < std::chrono::seconds(1)) return Error{"--watch-timeout: must be at least 1s"};
  o->watch_timeout = std::chrono::duration_cast<std::chrono::seconds>(watch);
  return OkStatus();
}

Status ParseAgentFlags(RawFlags& raw, bool gate, AgentOptions* a) {
  auto& values = raw.values;
  if (values.count("rank")) {
    auto rank = BoundedInt(values["rank"], "--rank", 0, 1000000);
    if (!rank) return Error{rank.error()};
    a->rank = *rank;
  }
  if (values.count("ranks")) {
    auto ranks = BoundedInt(values["ranks"], "--ranks", 1, 4096);
    if (!ranks) return Error{ranks.error()};
    a->ranks = *ranks;
  }
  if (values.count("log-dir")) {
    a->log_dir = values["log-dir"];
    if (a->log_dir.empty()) return Error{"--log-dir: the path is empty"};
    while (a->log_dir.size() > 1 && a->log_dir.back() == '/') a->log_dir.pop_back();
  }
  for (const std::string& file : raw.repeated["log-file"]) {
    if (file.empty()) return Error{"--log-file: the path is empty"};
    if (std::find(a->log_files.begin(), a->log_files.end(), file) != a->log_files.end()) {
      return Error{"--log-file: " + Quote(file) + " is given twice"};
    }
    a->log_files.push_back(file);
  }
  for (const std::string& pattern : raw.repeated["pattern"]) {
    auto compiled = StepPattern::Compile(pattern);
    if (!compiled) return Error{compiled.error()};
    a->patterns.push_back(pattern);
  }
  if (values.count("max-line-bytes")) {
    auto bytes = BoundedInt(values["max-line-bytes"], "--max-line-bytes", 256, 1 << 20);
    if (!bytes) return Error{bytes.error()};
    a->max_line_bytes = static_cast<size_t>(*bytes);
  }
  if (auto s = Duration(raw, "log-poll-interval", &a->log_poll_interval); !s) return Error{s.error()};
  if (a->log_poll_interval < std::chrono::milliseconds(10) || a->log_poll_interval > std::chrono::seconds(10)) {
    return Error{"--log-poll-interval: must be 10ms to 10s"};
  }
  if (values.count("stall-window")) {
    // Off: "off" or a zero duration however written (the operator writes "0s" for servers).
    static const std::regex kZero("0+(ms|s|m|h)?");
    const std::string& text = values["stall-window"];
    if (text == "off" || std::regex_match(text, kZero)) {
      a->stall_window = std::chrono::milliseconds(0);
    } else {
      if (auto s = Duration(raw, "stall-window", &a->stall_window); !s) return Error{s.error()};
      if (a->stall_window < std::chrono::seconds(1)) return Error{"--stall-window: must be at least 1s (or 0: off)"};
    }
  }
  for (auto [flag, out] : {std::pair<const char*, std::string*>{"report-http", &a->report_http},
                           {"report-udp", &a->report_udp}}) {
    if (!values.count(flag) || values[flag] == "off") continue;
    auto address = ParseLoopbackAddress(values[flag], "--" + std::string(flag));
    if (!address) return Error{address.error()};
    *out = *address;
  }
  if (values.count("report-socket")) {
    a->report_socket = values["report-socket"];
    if (a->report_socket.empty() || a->report_socket.front() != '/' || a->report_socket.size() > 107) {
      return Error{"--report-socket: expected an absolute path of at most 107 bytes, got " + Quote(a->report_socket)};
    }
  }
  if (values.count("main-process")) {
    a->main_process = values["main-process"];
    if (a->main_process != "auto" && a->main_process != "on" && a->main_process != "off") {
      return Error{"--main-process: expected auto, on or off, got " + Quote(a->main_process)};
    }
  }
  if (values.count("main-process-match")) {
    a->main_process_match = values["main-process-match"];
    if (auto compiled = CompileUserRegex(a->main_process_match); !compiled) {
      return Error{"--main-process-match: not a valid regular expression: " + compiled.error()};
    }
  }
  if (auto s = Duration(raw, "peer-check-interval", &a->peer_check_interval); !s) return Error{s.error()};
  if (a->peer_check_interval < std::chrono::milliseconds(100)) return Error{"--peer-check-interval: must be at least 100ms"};
  a->pod_condition = raw.booleans.count("pod-condition") ? raw.booleans["pod-condition"] : gate;
  if (auto s = Duration(raw, "condition-min-interval", &a->condition_min_interval); !s) return Error{s.error()};
  return OkStatus();
}

Result<CommandLine> ParseFlags(const std::vector<std::string>& args, const EnvMap& env, bool gate) {
  auto raw = ReadFlags(args, 1, gate);
  if (!raw) return Error{raw.error()};
  CommandLine cl;
  cl.command = gate ? Command::kGate : Command::kAgent;
  if (auto s = ParseIdentity(*raw, env, gate, &cl.gate); !s) return Error{s.error()};
  if (gate) {
    if (auto s = ParseGateFlags(*raw, &cl.gate); !s) return Error{s.error()};
  }
  if (auto s = ParseAgentFlags(*raw, gate, &cl.agent); !s) return Error{s.error()};
  return cl;
}

}  // namespace

Result<std::chrono::milliseconds> ParseDuration(std::string_view text, std::string_view what) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  const std::string_view unit = text.substr(digits);
  int64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + digits, value);
  int64_t scale = 0;
  if (unit == "ms") scale = 1;
  else if (unit == "s") scale = 1000;
  else if (unit == "m") scale = 60 * 1000;
  if (digits == 0 || ec != std::errc() || ptr != text.data() + digits || scale == 0) {
    return Error{std::string(what) + ": expected a duration such as 500ms, 2s or 5m, got " + Quote(text)};
  }
  constexpr int64_t kDay = 24 * 3600 * 1000;
  if (value > kDay / scale || value * scale < 1) {
    return Error{std::string(what) + ": " + Quote(text) + " is out of range (1ms to 24h)"};
  }
  return std::chrono::milliseconds(value * scale);
}

std::string DefaultListenAddress(const EnvMap& env, int port) {
  auto it = env.find("POD_IP");
  std::string host = it == env.end() ? "" : std::string(TrimWhitespace(it->second));
  if (host.empty()) host = "127.0.0.1";
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return host + ":" + std::to_string(port);
}

Result<std::string> ParseLoopbackAddress(std::string_view text, std::string_view what) {
  const std::string flag(what);
  auto listen = ParseListen(text);
  if (!listen) return Error{flag + listen.error().substr(std::string("--listen").size())};
  std::string host(text.substr(0, text.rfind(':')));
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  bool loopback = host == "localhost" || host == "::1";
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) loopback = (ntohl(v4.s_addr) >> 24) == 127;
  if (!loopback) {
    return Error{flag + ": the push API listens on loopback only (127.0.0.1, [::1], localhost), got " + Quote(text)};
  }
  return std::string(text);
}

Result<CommandLine> ParseCommandLine(const std::vector<std::string>& args, const EnvMap& env) {
  CommandLine cl;
  auto is_help = [](const std::string& a) { return a == "--help" || a == "-h" || a == "help"; };
  if (args.empty()) return Error{"no subcommand given; expected 'gate' or 'agent' (see fleet-sidecar --help)"};
  if (is_help(args[0])) return cl;
  if (args[0] != "gate" && args[0] != "agent") {
    return Error{"unknown subcommand " + Quote(args[0]) + "; expected 'gate' or 'agent' (see fleet-sidecar --help)"};
  }
  if (std::any_of(args.begin() + 1, args.end(), [&](const std::string& a) { return a == "--help" || a == "-h"; })) {
    return cl;
  }
  return ParseFlags(args, env, args[0] == "gate");
}

std::string Usage() {
  return R"(fleet-sidecar: the FleetJob pod sidecar

Usage:
  fleet-sidecar gate --namespace=NS --job=NAME --pod=POD --role=ROLE --run=N
                     --config-map=NAME --metrics-port=PORT [--exit-when-ready] [flags]
  fleet-sidecar agent --job=NAME --role=ROLE --metrics-port=PORT [flags]
  fleet-sidecar --help

gate: holds the pod's main containers until the job's endpoints ConfigMap (--config-map in
--namespace) carries annotation fleet.paddlepaddle.org/run=N, i.e. the endpoint lists of this pod's
run are published. Trainers of parameter-server jobs (any role but "server", when the ConfigMap has
PADDLE_PSERVERS_IP_PORT_LIST or PADDLE_PSERVERS_IP_PORT_LIST.<role>) also wait until every server
in that list accepts a TCP connection. Then (unless --exit-when-ready) it keeps running as the pod's
agent: metrics from the trainer's step logs and pushed reports, readiness, stall detection, and the
pod condition fleet.paddlepaddle.org/TrainingProgress.
agent: the agent alone, without the gate or the API (a job outside Kubernetes).

HTTP (on --listen):
  /startup  503 with what it waits for, 200 once the gate is open (a native sidecar's startup probe)
  /readyz   200 once the gate is open, every peer is reachable, the main process runs (when it can
            be observed) and no rank is stalled; else 503 saying why
  /healthz  200 while the process works
  /metrics  Prometheus metrics (fleet_training_*, fleet_sidecar_*)
  /status   the agent's state as JSON

Required flags (gate):
  --namespace=NS          the job's namespace
  --job=NAME              the FleetJob's name
  --pod=POD               this pod's name
  --role=ROLE             this pod's role: server, worker or a heter stage's name
  --run=N                 the job run this pod belongs to
  --config-map=NAME       the job's endpoints ConfigMap
  --metrics-port=PORT     the port of the HTTP endpoints
(agent: --job, --role and --metrics-port; --namespace defaults to "default", --pod to $POD_NAME,
$HOSTNAME or "local".)

Agent flags:
  --rank=N                the rank of the pod's first process (default 0)
  --ranks=N               processes in the pod (default 1): workerlog.K is rank N+K
  --log-dir=DIR           follow workerlog.K, serverlog.K and heterlog.K in DIR (fleetrun --log_dir)
  --log-file=PATH         follow this file as rank --rank (repeatable)
  --pattern=REGEX         an extra step pattern with named groups, e.g. 'it (?P<step>\d+) l=(?P<loss>\S+)'
                          (repeatable; names: step, epoch, loss, step_time, samples, samples_per_second,
                          others are custom scalars)
  --max-line-bytes=N      longer log lines are skipped and counted (default 8192)
  --log-poll-interval=D   how often the logs are read (default 250ms)
  --stall-window=D        a rank with no step for this long is stalled (default 10m; 0: off)
  --report-http=HOST:PORT take JSON (or text) step reports on POST /v1/report (loopback only)
  --report-udp=HOST:PORT  take text protocol reports ("step=12 loss=0.5 acc=0.9") (loopback only)
  --report-socket=PATH    take text protocol reports on a Unix datagram socket
  --main-process=MODE     auto (observe it when PID 1 is the pod's pause process: shareProcessNamespace),
                          on or off (default auto)
  --main-process-match=REGEX  the main process's command line (default: any other process)
  --peer-check-interval=D how often a parameter-server trainer checks its servers (default 10s)
  --pod-condition[=false] write the TrainingProgress pod condition (default: on for gate, off for agent)
  --condition-min-interval=D  at most one condition write per D (default 5s; only state changes are written)

Other flags:
  --exit-when-ready       (gate) exit 0 as soon as the gate opens (a plain init container: no agent)
  --kubeconfig=PATH       a kubeconfig file (default: $KUBECONFIG, else in-cluster, else ~/.kube/config)
  --listen=HOST:PORT      where to serve HTTP (default: $POD_IP:<metrics-port>, 127.0.0.1 without POD_IP)
  --mode=MODE             (gate) collective, ps or ps-heter; with ps/ps-heter a trainer requires the server list
  --server-connect-timeout=D  (gate) one TCP connection attempt to a server (default 1s)
  --server-retry-max=D    (gate) the longest pause between rounds of server probes (default 2s)
  --api-timeout=D         (gate) one API request (default 10s)
  --api-retry-max=D       (gate) the longest pause before retrying a failed list or watch (default 10s)
  --watch-timeout=D       (gate) the server ends each watch after this long; it is then resumed (default 5m)
Durations: 500ms, 2s, 5m.

Exit status: 0 after SIGTERM/SIGINT or, with --exit-when-ready, once the gate is open; 1 when the
cluster config cannot be loaded or an address cannot be served; 2 for bad flags.
)";
}

}  // namespace fleet::sidecar
