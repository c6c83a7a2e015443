#include "fleet/sidecar/options.h"

#include <algorithm>
#include <charconv>
#include <map>
#include <optional>
#include <set>

#include "fleet/runtime/endpoint.h"

namespace fleet::sidecar {
namespace {

std::string Quote(std::string_view text) { return "'" + std::string(text) + "'"; }

bool IsDnsLabel(std::string_view s) {
  if (s.empty() || s.size() > 63) return false;
  for (char c : s) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-')) return false;
  }
  return s.front() != '-' && s.back() != '-';
}

// An object name (RFC 1123 subdomain): dot-separated DNS labels, at most 253 characters. Pod and
// ConfigMap names are such names; the check also keeps ',' and '=' out of the field selector.
bool IsDnsSubdomain(std::string_view s) {
  if (s.empty() || s.size() > 253) return false;
  for (const std::string& label : SplitString(s, '.')) {
    if (!IsDnsLabel(label)) return false;
  }
  return true;
}

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

// The flags of `gate`. Value flags take --name=value or --name value; --exit-when-ready takes no
// value (or =true / =false).
const std::set<std::string>& ValueFlags() {
  static const std::set<std::string> flags = {
      "namespace", "job", "pod", "role", "run", "config-map", "metrics-port", "kubeconfig", "listen", "mode",
      "server-connect-timeout", "server-retry-max", "api-timeout", "api-retry-max", "watch-timeout"};
  return flags;
}

Result<GateOptions> ParseGate(const std::vector<std::string>& args, size_t first, const EnvMap& env) {
  std::map<std::string, std::string> values;
  std::optional<bool> exit_when_ready;
  for (size_t i = first; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) return Error{"unexpected argument " + Quote(arg)};
    const size_t eq = arg.find('=');
    const std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    if (name == "exit-when-ready") {
      if (exit_when_ready) return Error{"--exit-when-ready is given twice"};
      if (eq == std::string::npos) {
        exit_when_ready = true;
      } else {
        const std::string value = arg.substr(eq + 1);
        if (value != "true" && value != "false") {
          return Error{"--exit-when-ready takes no value (or true/false), got " + Quote(value)};
        }
        exit_when_ready = value == "true";
      }
      continue;
    }
    if (!ValueFlags().count(name)) return Error{"unknown flag --" + name + " (see fleet-sidecar --help)"};
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else if (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) {
      value = args[++i];
    } else {
      return Error{"--" + name + " needs a value (--" + name + "=VALUE)"};
    }
    if (!values.emplace(name, value).second) return Error{"--" + name + " is given twice"};
  }

  for (const char* required : {"namespace", "job", "pod", "role", "run", "config-map", "metrics-port"}) {
    if (!values.count(required)) return Error{"missing required flag --" + std::string(required)};
  }
  GateOptions o;
  o.exit_when_ready = exit_when_ready.value_or(false);
  o.ns = values["namespace"];
  if (!IsDnsLabel(o.ns)) {
    return Error{"--namespace: " + Quote(o.ns) + " is not a namespace name (a DNS label: a-z, 0-9, '-')"};
  }
  o.job = values["job"];
  if (!IsDnsSubdomain(o.job)) return Error{"--job: " + Quote(o.job) + " is not an object name"};
  o.pod = values["pod"];
  if (!IsDnsSubdomain(o.pod)) return Error{"--pod: " + Quote(o.pod) + " is not a pod name"};
  o.role = values["role"];
  if (!IsPlainToken(o.role)) return Error{"--role: " + Quote(o.role) + " is not a role name"};
  o.config_map = values["config-map"];
  if (!IsDnsSubdomain(o.config_map)) {
    return Error{"--config-map: " + Quote(o.config_map) + " is not a ConfigMap name"};
  }
  auto run = ParseNonNegativeInt(values["run"], "--run");
  if (!run) return Error{run.error()};
  o.run = *run;
  auto port = ParsePort(values["metrics-port"], "--metrics-port");
  if (!port) return Error{port.error()};
  o.metrics_port = *port;
  if (values.count("kubeconfig")) {
    o.kubeconfig = values["kubeconfig"];
    if (o.kubeconfig.empty()) return Error{"--kubeconfig: the path is empty"};
  }
  if (values.count("listen")) {
    auto listen = ParseListen(values["listen"]);
    if (!listen) return Error{listen.error()};
    o.listen = *listen;
  } else {
    o.listen = DefaultListenAddress(env, o.metrics_port);
  }
  if (values.count("mode")) {
    o.mode = values["mode"];
    if (o.mode != "collective" && o.mode != "ps" && o.mode != "ps-heter") {
      return Error{"--mode: expected collective, ps or ps-heter, got " + Quote(o.mode)};
    }
  }
  auto duration = [&](const char* flag, std::chrono::milliseconds& out) -> Status {
    if (!values.count(flag)) return OkStatus();
    auto d = ParseDuration(values[flag], "--" + std::string(flag));
    if (!d) return Error{d.error()};
    out = *d;
    return OkStatus();
  };
  for (auto [flag, out] : {std::pair<const char*, std::chrono::milliseconds*>{"server-connect-timeout", &o.server_connect_timeout},
                           {"server-retry-max", &o.server_retry_max},
                           {"api-timeout", &o.api_timeout},
                           {"api-retry-max", &o.api_retry_max}}) {
    if (auto s = duration(flag, *out); !s) return Error{s.error()};
  }
  std::chrono::milliseconds watch = o.watch_timeout;
  if (auto s = duration("watch-timeout", watch); !s) return Error{s.error()};
  if (watch < std::chrono::seconds(1)) return Error{"--watch-timeout: must be at least 1s"};
  o.watch_timeout = std::chrono::duration_cast<std::chrono::seconds>(watch);
  return o;
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

Result<CommandLine> ParseCommandLine(const std::vector<std::string>& args, const EnvMap& env) {
  CommandLine cl;
  auto is_help = [](const std::string& a) { return a == "--help" || a == "-h" || a == "help"; };
  if (args.empty()) return Error{"no subcommand given; expected 'gate' (see fleet-sidecar --help)"};
  if (is_help(args[0])) return cl;
  if (args[0] != "gate") {
    return Error{"unknown subcommand " + Quote(args[0]) + "; expected 'gate' (see fleet-sidecar --help)"};
  }
  if (std::any_of(args.begin() + 1, args.end(), [&](const std::string& a) { return a == "--help" || a == "-h"; })) {
    return cl;
  }
  auto gate = ParseGate(args, 1, env);
  if (!gate) return Error{gate.error()};
  cl.command = Command::kGate;
  cl.gate = std::move(*gate);
  return cl;
}

std::string Usage() {
  return R"(fleet-sidecar: the FleetJob pod sidecar

Usage:
  fleet-sidecar gate --namespace=NS --job=NAME --pod=POD --role=ROLE --run=N
                     --config-map=NAME --metrics-port=PORT [--exit-when-ready] [flags]
  fleet-sidecar --help

gate: holds the pod's main containers until the job's endpoints ConfigMap (--config-map in
--namespace) carries annotation fleet.paddlepaddle.org/run=N, i.e. the endpoint lists of this pod's
run are published. Trainers of parameter-server jobs (any role but "server", when the ConfigMap has
PADDLE_PSERVERS_IP_PORT_LIST or PADDLE_PSERVERS_IP_PORT_LIST.<role>) also wait until every server
in that list accepts a TCP connection. The only API access is get/list/watch of that ConfigMap.

HTTP (on --listen):
  /startup  503 with what it waits for, 200 once the gate is open (a native sidecar's startup probe)
  /readyz   200 once the gate is open, else 503
  /healthz  200 while the process works
  /metrics  Prometheus metrics (fleet_sidecar_*)

Required flags:
  --namespace=NS          the job's namespace
  --job=NAME              the FleetJob's name
  --pod=POD               this pod's name
  --role=ROLE             this pod's role: server, worker or a heter stage's name
  --run=N                 the job run this pod belongs to
  --config-map=NAME       the job's endpoints ConfigMap
  --metrics-port=PORT     the port of the HTTP endpoints

Optional flags:
  --exit-when-ready       exit 0 as soon as the gate opens (a plain init container)
  --kubeconfig=PATH       a kubeconfig file (default: $KUBECONFIG, else in-cluster, else ~/.kube/config)
  --listen=HOST:PORT      where to serve HTTP (default: $POD_IP:<metrics-port>, 127.0.0.1 without POD_IP)
  --mode=MODE             collective, ps or ps-heter; with ps/ps-heter a trainer requires the server list
  --server-connect-timeout=D  one TCP connection attempt to a server (default 1s)
  --server-retry-max=D    the longest pause between rounds of server probes (default 2s)
  --api-timeout=D         one API request (default 10s)
  --api-retry-max=D       the longest pause before retrying a failed list or watch (default 10s)
  --watch-timeout=D       the server ends each watch after this long; it is then resumed (default 5m)
Durations: 500ms, 2s, 5m.

Exit status: 0 after SIGTERM/SIGINT or, with --exit-when-ready, once the gate is open; 1 when the
cluster config cannot be loaded or the address cannot be served; 2 for bad flags.
)";
}

}  // namespace fleet::sidecar
