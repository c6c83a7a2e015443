#include "fleet/sidecar/options.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <charconv>
#include <climits>
#include <regex>
#include <tuple>

#include "fleet/base/dns.h"
#include "fleet/base/strings.h"
#include "fleet/cmdline/cmdline.h"
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

// The listen address: HOST:PORT, [IPV6]:PORT or :PORT with a port 0-65535 (0 = any free port). The
// error names no flag.
Result<std::string> ParseListen(std::string_view text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return Error{"expected HOST:PORT, got " + Quote(text)};
  std::string_view host = text.substr(0, colon);
  std::string_view port = text.substr(colon + 1);
  int value = 0;
  auto [ptr, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || port[0] < '0' || port[0] > '9' || ec != std::errc() || ptr != port.data() + port.size() ||
      value > 65535) {
    return Error{"expected HOST:PORT with a port 0-65535, got " + Quote(text)};
  }
  const bool bracketed = host.size() > 2 && host.front() == '[' && host.back() == ']';
  if (!bracketed && host.find(':') != std::string_view::npos) {
    return Error{"put an IPv6 address in brackets ([addr]:PORT), got " + Quote(text)};
  }
  if (std::any_of(host.begin(), host.end(), [](char c) { return static_cast<unsigned char>(c) <= 0x20; })) {
    return Error{"the host contains whitespace or control characters: " + Quote(text)};
  }
  return std::string(text);
}

constexpr size_t kMaxRepeats = 16;

// A validator: `valid(value)`, else "'VALUE' is not a(n) WHAT".
CLI::Validator Is(bool (*valid)(std::string_view), const std::string& what) {
  return CLI::Validator(
      [valid, what](std::string& text) { return valid(text) ? std::string() : Quote(text) + " is not " + what; }, "");
}

// "1500ms", "2s" or "5m" for the help's defaults.
std::string DurationText(std::chrono::milliseconds duration) {
  const auto ms = duration.count();
  if (ms % 60000 == 0) return std::to_string(ms / 60000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

// A duration flag (ParseDuration).
CLI::Option* AddDuration(CLI::App& app, const std::string& name, std::chrono::milliseconds& value,
                         const std::string& description) {
  return app
      .add_option_function<std::string>(
          name,
          [&value, name](const std::string& text) {
            auto duration = ParseDuration(text, name);
            if (!duration) throw CLI::ValidationError(duration.error());
            value = *duration;
          },
          description)
      ->type_name("D")
      ->default_str(DurationText(value));
}

// What the flags fill in; the checks that read several of them come after the parse.
struct Flags {
  CommandLine cl;
  std::chrono::milliseconds watch_timeout{0};
  std::vector<const CLI::Option*> gate_only;   // refused by `agent`
};

// A flag that only `gate` takes: `agent` refuses it (CheckFlags).
CLI::Option* GateOnly(Flags& flags, CLI::Option* option) {
  flags.gate_only.push_back(option);
  return option;
}

// Who this pod is; CheckFlags says which of them each command requires.
void AddIdentityFlags(CLI::App& app, Flags& flags) {
  GateOptions& o = flags.cl.gate;
  const std::string identity = "Required flags (gate; agent: --job, --role and --metrics-port)";
  o.ns = "default";
  app.add_option("--namespace", o.ns, "the job's namespace")
      ->type_name("NS")->check(Is([](std::string_view s) { return IsDnsLabel(s); }, "a namespace name (a DNS label: a-z, 0-9, '-')"))->group(identity);
  app.add_option("--job", o.job, "the FleetJob's name")->type_name("NAME")->check(Is(IsDnsSubdomain, "an object name"))->group(identity);
  app.add_option("--pod", o.pod, "this pod's name")->type_name("POD")->check(Is(IsDnsSubdomain, "a pod name"))->group(identity);
  app.add_option("--role", o.role, "this pod's role: server, worker or a heter stage's name")
      ->type_name("ROLE")->check(Is(IsPlainToken, "a role name"))->group(identity);
  GateOnly(flags, app.add_option("--run", o.run, "the job run this pod belongs to")
                      ->type_name("N")->transform(cmdline::IntegerIn(0, INT_MAX))->group(identity));
  GateOnly(flags, app.add_option("--config-map", o.config_map, "the job's endpoints ConfigMap")
                      ->type_name("NAME")->check(Is(IsDnsSubdomain, "a ConfigMap name"))->group(identity));
  app.add_option("--metrics-port", o.metrics_port, "the port of the HTTP endpoints")
      ->type_name("PORT")->transform(cmdline::IntegerIn(1, 65535))->group(identity);
}

// The agent's group comes in two parts, the step logs' flags first; both show under one heading.
constexpr const char* kAgentGroup = "Agent flags";

// Where the agent reads the trainer's steps from (its logs) and when a rank counts as stalled.
void AddStepLogFlags(CLI::App& app, AgentOptions& a) {
  app.add_option("--rank", a.rank, "the rank of the pod's first process")
      ->type_name("N")->transform(cmdline::IntegerIn(0, 1000000))->capture_default_str()->group(kAgentGroup);
  app.add_option("--ranks", a.ranks, "processes in the pod: workerlog.K is rank N+K")
      ->type_name("N")->transform(cmdline::IntegerIn(1, 4096))->capture_default_str()->group(kAgentGroup);
  app.add_option("--log-dir", a.log_dir, "follow workerlog.K, serverlog.K and heterlog.K in DIR (fleetrun --log_dir)")
      ->type_name("DIR")->check(cmdline::NonEmpty())->group(kAgentGroup);
  app.add_option("--log-file", a.log_files,
                 "follow this file (repeatable; it may appear later): rank N; .../workerlog.K is N+K if --ranks > 1")
      ->type_name("PATH")->check(cmdline::NonEmpty())->allow_extra_args(false)->group(kAgentGroup);
  app.add_option_function<std::vector<std::string>>(
         "--pattern",
         [&a](const std::vector<std::string>& patterns) {
           for (const std::string& pattern : patterns) {
             if (auto compiled = StepPattern::Compile(pattern); !compiled) throw CLI::ValidationError(compiled.error());
           }
           a.patterns = patterns;
         },
         "an extra step pattern with named groups, e.g. 'it (?P<step>\\d+) l=(?P<loss>\\S+)' (repeatable; names: "
         "step, epoch, loss, step_time, samples, samples_per_second, others are custom scalars)")
      ->type_name("REGEX")->allow_extra_args(false)->group(kAgentGroup);
  app.add_option("--max-line-bytes", a.max_line_bytes, "longer log lines are skipped and counted")
      ->type_name("N")->transform(cmdline::IntegerIn(256, 1 << 20))->capture_default_str()->group(kAgentGroup);
  AddDuration(app, "--log-poll-interval", a.log_poll_interval, "how often the logs are read")->group(kAgentGroup);
  app.add_option_function<std::string>(
         "--stall-window",
         [&a](const std::string& text) {
           // Off: "off" or a zero duration however written (the operator writes "0s" for servers).
           static const std::regex kZero("0+(ms|s|m|h)?");
           if (text == "off" || std::regex_match(text, kZero)) {
             a.stall_window = std::chrono::milliseconds(0);
             return;
           }
           auto window = ParseDuration(text, "--stall-window");
           if (!window) throw CLI::ValidationError(window.error());
           if (*window < std::chrono::seconds(1)) throw CLI::ValidationError("--stall-window: must be at least 1s (or 0: off)");
           a.stall_window = *window;
         },
         "a rank with no step for this long is stalled (0: off)")
      ->type_name("D")->default_str(DurationText(a.stall_window))->group(kAgentGroup);
}

// The agent's other inputs (pushed reports, the main process, the peers) and its pod condition.
void AddAgentInputFlags(CLI::App& app, AgentOptions& a) {
  for (auto [name, out, protocol] :
       {std::tuple<const char*, std::string*, const char*>{"--report-http", &a.report_http,
                                                            "take JSON (or text) step reports on POST /v1/report"},
        {"--report-udp", &a.report_udp, "take text protocol reports (\"step=12 loss=0.5 acc=0.9\")"}}) {
    app.add_option_function<std::string>(
           name,
           [field = out, flag = std::string(name)](const std::string& text) {
             if (text == "off") return;
             auto address = ParseLoopbackAddress(text, flag);
             if (!address) throw CLI::ValidationError(address.error());
             *field = *address;
           },
           std::string(protocol) + " (loopback only; off: none)")
        ->type_name("HOST:PORT")->group(kAgentGroup);
  }
  app.add_option("--report-socket", a.report_socket, "take text protocol reports on a Unix datagram socket")
      ->type_name("PATH")
      ->check(CLI::Validator(
          [](std::string& path) {
            return !path.empty() && path.front() == '/' && path.size() <= 107
                       ? std::string()
                       : "expected an absolute path of at most 107 bytes, got " + Quote(path);
          },
          ""))
      ->group(kAgentGroup);
  app.add_option("--main-process", a.main_process,
                 "auto (observe it when PID 1 is the pod's pause process: shareProcessNamespace), on or off")
      ->check(cmdline::OneOf({"auto", "on", "off"}))->capture_default_str()->group(kAgentGroup);
  app.add_option("--main-process-match", a.main_process_match, "the main process's command line (default: any other process)")
      ->type_name("REGEX")
      ->check(CLI::Validator(
          [](std::string& pattern) {
            auto compiled = CompileUserRegex(pattern);
            return compiled ? std::string() : "not a valid regular expression: " + compiled.error();
          },
          ""))
      ->group(kAgentGroup);
  AddDuration(app, "--peer-check-interval", a.peer_check_interval, "how often a parameter-server trainer checks its servers")
      ->group(kAgentGroup);
  cmdline::AddSwitch(app, "--pod-condition", a.pod_condition,
                     "write the TrainingProgress pod condition (default: on for gate, off for agent)")
      ->group(kAgentGroup);
  AddDuration(app, "--condition-min-interval", a.condition_min_interval,
              "at most one condition write per D (only state changes are written)")
      ->group(kAgentGroup);
}

// Checkpoint before stop: where the trainer is asked and how long it is waited for.
void AddCheckpointFlags(CLI::App& app, AgentOptions& a) {
  app.add_option("--checkpoint-dir", a.checkpoint_dir,
                 "serve GET /checkpoint: write DIR/request, wait for the trainer's DIR/done (its step)")
      ->type_name("DIR")
      ->check(CLI::Validator(
          [](std::string& path) {
            return !path.empty() && path.front() == '/' ? std::string() : "expected an absolute path, got " + Quote(path);
          },
          ""))
      ->group(kAgentGroup);
  AddDuration(app, "--checkpoint-timeout", a.checkpoint_timeout, "how long GET /checkpoint waits for DIR/done")
      ->group(kAgentGroup);
}

// How the sidecar serves HTTP and talks to the API server; the gate's timeouts.
void AddOtherFlags(CLI::App& app, Flags& flags) {
  GateOptions& o = flags.cl.gate;
  const std::string other = "Other flags";
  GateOnly(flags, cmdline::AddSwitch(app, "--exit-when-ready", o.exit_when_ready,
                                     "(gate) exit 0 as soon as the gate opens (a plain init container: no agent)")
                      ->group(other));
  GateOnly(flags, cmdline::AddSwitch(app, "--in-place", o.in_place,
                                     "(gate) the job restarts in place: serve the trainers' gate (GET /gate on "
                                     "--report-http) and liveness (GET /trainer-live), write the Trainer condition")
                      ->group(other));
  app.add_option("--kubeconfig", o.kubeconfig, "a kubeconfig file (default: $KUBECONFIG, else in-cluster, else ~/.kube/config)")
      ->type_name("PATH")->check(cmdline::NonEmpty())->group(other);
  app.add_option("--listen", o.listen, "where to serve HTTP (default: $POD_IP:<metrics-port>, 127.0.0.1 without POD_IP)")
      ->type_name("HOST:PORT")
      ->check(CLI::Validator(
          [](std::string& text) {
            auto listen = ParseListen(text);
            return listen ? std::string() : listen.error();
          },
          ""))
      ->group(other);
  GateOnly(flags, app.add_option("--mode", o.mode, "(gate) with ps or ps-heter, a trainer requires the server list")
                      ->check(cmdline::OneOf({"collective", "ps", "ps-heter"}))->group(other));
  GateOnly(flags, AddDuration(app, "--server-connect-timeout", o.server_connect_timeout,
                              "(gate) one TCP connection attempt to a server")->group(other));
  GateOnly(flags, AddDuration(app, "--server-retry-max", o.server_retry_max,
                              "(gate) the longest pause between rounds of server probes")->group(other));
  GateOnly(flags, AddDuration(app, "--api-timeout", o.api_timeout, "(gate) one API request")->group(other));
  GateOnly(flags, AddDuration(app, "--api-retry-max", o.api_retry_max,
                              "(gate) the longest pause before retrying a failed list or watch")->group(other));
  flags.watch_timeout = o.watch_timeout;
  GateOnly(flags, AddDuration(app, "--watch-timeout", flags.watch_timeout,
                              "(gate) the server ends each watch after this long; it is then resumed")->group(other));
}

// The command line: the commands, then one function per group of flags, in the order --help
// shows them.
std::unique_ptr<CLI::App> SidecarApp(Flags& flags) {
  auto app = cmdline::NewApp("fleet-sidecar", R"(The FleetJob pod sidecar:
  fleet-sidecar gate --namespace=NS --job=NAME --pod=POD --role=ROLE --run=N
                     --config-map=NAME --metrics-port=PORT [--exit-when-ready] [flags]
  fleet-sidecar agent --job=NAME --role=ROLE --metrics-port=PORT [flags]

gate: holds the pod's main containers until the job's endpoints ConfigMap
(--config-map in --namespace) carries annotation fleet.paddlepaddle.org/run=N, i.e. the endpoint
lists of this pod's run are published. Trainers of parameter-server jobs (any role but "server",
when the ConfigMap has PADDLE_PSERVERS_IP_PORT_LIST or PADDLE_PSERVERS_IP_PORT_LIST.<role>) also
wait until every server in that list accepts a TCP connection. Then (unless --exit-when-ready) it
keeps running as the pod's agent: metrics from the trainer's step logs and pushed reports,
readiness, stall detection, and the pod condition fleet.paddlepaddle.org/TrainingProgress.
agent: the agent alone, without the gate or the API (a job outside Kubernetes); --namespace
defaults to "default" there, --pod to $POD_NAME, $HOSTNAME or "local".

HTTP (on --listen):
  /startup  503 with what it waits for, 200 once the gate is open (a native sidecar's startup probe)
  /readyz   200 once the gate is open, every peer is reachable, the main process runs (when it can
            be observed) and no rank is stalled; else 503 saying why
  /healthz  200 while the process works
  /metrics  Prometheus metrics (fleet_training_*, fleet_sidecar_*)
  /status   the agent's state as JSON
  /checkpoint  (with --checkpoint-dir) ask the trainer for a checkpoint and wait for it: the
            trainer container's preStop hook
  /trainer-live  (with --in-place) 503 while a trainer bound to an older run than the endpoints
            ConfigMap's runs (the main containers' liveness probe), else 200
On --report-http: POST /v1/report (step reports) and, with --in-place, GET /gate?run=N&instance=P:S
(the trainers' gate, asked by the env hook: 200 with the run to join, 202 to ask again).)");
  app->footer(R"(Durations: 500ms, 2s, 5m.

Exit status: 0 after SIGTERM/SIGINT or, with --exit-when-ready, once the gate is open; 1 when the
cluster config cannot be loaded or an address cannot be served; 2 for bad flags.)");
  app->add_subcommand("gate", "hold the pod until its run's endpoint lists are published, then be its agent");
  app->add_subcommand("agent", "the agent alone");
  cmdline::AddHelpCommand(*app);
  AddIdentityFlags(*app, flags);
  AddStepLogFlags(*app, flags.cl.agent);
  AddAgentInputFlags(*app, flags.cl.agent);
  AddCheckpointFlags(*app, flags.cl.agent);
  AddOtherFlags(*app, flags);
  return app;
}

// The checks that span flags or depend on the command.
Status CheckFlags(const CLI::App& app, Flags& flags, const EnvMap& env, bool gate) {
  for (const CLI::Option* option : app.get_options()) {
    if (option->count() > 1 && option->get_expected_max() <= 1) {
      return Error{option->get_name() + " is given twice"};
    }
  }
  if (!gate) {
    for (const CLI::Option* option : flags.gate_only) {
      if (option->count() > 0) return Error{option->get_name() + " is a flag of 'gate', not of 'agent'"};
    }
  }
  const std::vector<const char*> required =
      gate ? std::vector<const char*>{"--namespace", "--job", "--pod", "--role", "--run", "--config-map", "--metrics-port"}
           : std::vector<const char*>{"--job", "--role", "--metrics-port"};
  for (const char* flag : required) {
    if (app.get_option(flag)->count() == 0) return Error{"missing required flag " + std::string(flag)};
  }
  GateOptions& o = flags.cl.gate;
  AgentOptions& a = flags.cl.agent;
  if (app.get_option("--pod")->count() == 0) {   // agent only
    auto pod = env.find("POD_NAME");
    auto host = env.find("HOSTNAME");
    o.pod = pod != env.end() && !pod->second.empty() ? pod->second
            : host != env.end() && !host->second.empty() ? host->second
                                                          : "local";
    if (!IsDnsSubdomain(o.pod)) return Error{"--pod: " + Quote(o.pod) + " is not a pod name"};
  }
  if (o.listen.empty()) o.listen = DefaultListenAddress(env, o.metrics_port);
  if (flags.watch_timeout < std::chrono::seconds(1)) return Error{"--watch-timeout: must be at least 1s"};
  o.watch_timeout = std::chrono::duration_cast<std::chrono::seconds>(flags.watch_timeout);

  while (a.log_dir.size() > 1 && a.log_dir.back() == '/') a.log_dir.pop_back();
  for (const char* repeatable : {"--log-file", "--pattern"}) {
    if (app.get_option(repeatable)->count() > kMaxRepeats) {
      return Error{std::string(repeatable) + " is given more than " + std::to_string(kMaxRepeats) + " times"};
    }
  }
  for (auto file = a.log_files.begin(); file != a.log_files.end(); ++file) {
    if (std::find(a.log_files.begin(), file, *file) != file) return Error{"--log-file: " + Quote(*file) + " is given twice"};
  }
  if (a.log_poll_interval < std::chrono::milliseconds(10) || a.log_poll_interval > std::chrono::seconds(10)) {
    return Error{"--log-poll-interval: must be 10ms to 10s"};
  }
  if (a.peer_check_interval < std::chrono::milliseconds(100)) return Error{"--peer-check-interval: must be at least 100ms"};
  if (app.get_option("--pod-condition")->count() == 0) a.pod_condition = gate;
  if (o.in_place && o.exit_when_ready) return Error{"--in-place: the trainers' gate needs the agent, not --exit-when-ready"};
  if (o.in_place && a.report_http.empty()) {
    return Error{"--in-place: needs --report-http (the trainers ask the gate there, on loopback)"};
  }
  return OkStatus();
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
  if (!listen) return Error{flag + ": " + listen.error()};
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
  Flags flags;
  auto app = SidecarApp(flags);
  auto help = cmdline::Parse(*app, args);
  if (!help) return Error{help.error()};
  if (*help != nullptr) return CommandLine{};
  const bool gate = app->got_subcommand("gate");
  flags.cl.command = gate ? Command::kGate : Command::kAgent;
  if (Status status = CheckFlags(*app, flags, env, gate); !status) return Error{status.error()};
  return flags.cl;
}

std::string Usage() {
  Flags defaults;
  return cmdline::Help(*SidecarApp(defaults));
}

}  // namespace fleet::sidecar
