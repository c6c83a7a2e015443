#include "fleet/launcher/flags.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <cmath>
#include <cstdio>
#include <functional>

#include "fleet/base/strings.h"
#include "fleet/cmdline/cmdline.h"
#include "fleet/runtime/topology.h"

namespace fleet::launcher {
namespace {

constexpr const char* kOperands = "training_script [training_script_args...]";

// "value", as the errors of the 2.3+ launcher's inputs show it.
std::string Quoted(std::string_view text) { return "\"" + std::string(text) + "\""; }

bool IsEtcd(const std::string& master) { return master.rfind(kEtcdMasterScheme, 0) == 0; }

// --master / PADDLE_MASTER: "ip:port" or "etcd://host:port". Messages name the value, not the source.
Status CheckMaster(const std::string& text) {
  const std::string address = IsEtcd(text) ? text.substr(kEtcdMasterScheme.size()) : text;
  auto endpoint = ParseEndpoint(address);
  auto host = endpoint ? ParseHost(endpoint->host) : Result<std::string>(Error{endpoint.error()});
  if (!host) return Error{Quoted(text) + " is not ip:port or etcd://host:port (" + host.error() + ")"};
  return OkStatus();
}

Status CheckNodeRange(const std::string& text) {
  if (auto range = ParseNpRange(text); !range) return Error{Quoted(text) + " is not N or MIN:MAX (" + range.error() + ")"};
  return OkStatus();
}

Status CheckLogLevel(const std::string& text) {
  std::string upper = text;
  std::transform(upper.begin(), upper.end(), upper.begin(), [](unsigned char c) { return static_cast<char>(std::toupper(c)); });
  for (const char* level : {"DEBUG", "INFO", "WARNING", "WARN", "ERROR", "CRITICAL", "FATAL"}) {
    if (upper == level) return OkStatus();
  }
  return Error{Quoted(text) + " is not a log level (DEBUG, INFO, WARNING, ERROR, CRITICAL)"};
}

Status CheckRunMode(const std::string& text) {
  if (auto mode = ParseJobMode(text); !mode) return Error{Quoted(text) + ": " + mode.error()};
  return OkStatus();
}

// A CLI11 check from one of the checks above (CLI11 puts the flag's name in front).
CLI::Validator Checked(std::function<Status(const std::string&)> check) {
  return CLI::Validator([check](std::string& text) -> std::string {
           auto ok = check(text);
           return ok ? "" : ok.error();
         }, "");   // no description: the option's type name says it
}

// A number of seconds in [0, maximum].
CLI::Validator SecondsUpTo(double maximum) {
  return CLI::Validator(
      [maximum](std::string& text) -> std::string {
        double seconds = -1;
        auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), seconds);
        if (text.empty() || ec != std::errc() || ptr != text.data() + text.size() || !(seconds >= 0) || seconds > maximum) {
          char range[32];
          std::snprintf(range, sizeof range, "[0, %.0f]", maximum);
          return std::string("must be a number of seconds in ") + range + ", got '" + text + "'";
        }
        return "";
      },
      "SECS");
}

// The flags Paddle 2.3+'s `python -m paddle.distributed.launch` adds (its env wins: ApplyLauncherEnv).
void AddLauncherFlags(CLI::App& app, LaunchOptions& o) {
  const std::string launch = "Paddle 2.3+ launcher (env PADDLE_MASTER, PADDLE_NNODES, PADDLE_RANK, ... wins over these)";
  app.add_option("--master", o.master,
                  "ip:port: the node whose address that is serves the nodes' rendezvous there; etcd://host:port: "
                  "elastic training in etcd")
      ->type_name("ADDR")->check(Checked(CheckMaster))->group(launch);
  app.add_option("--nnodes", o.nnodes, "nodes of the job: N, or MIN:MAX with an etcd master")
      ->type_name("N|MIN:MAX")->check(Checked(CheckNodeRange))->group(launch);
  app.add_option("--rank", o.rank, "this node's rank (-1: the master's node first, then by address)")
      ->type_name("R")->transform(cmdline::IntegerIn(-1, INT_MAX))->group(launch);
  app.add_option("--rendezvous_timeout", o.rendezvous_timeout_seconds,
                  "HTTP master: give up (exit 2) when the job's nodes have not all registered within SECS")
      ->check(SecondsUpTo(86400))->capture_default_str()->group(launch);
  app.add_option("--max_restart", o.max_restart, "accepted for Paddle's command lines; see docs/fleetrun.md")
      ->type_name("N")->transform(cmdline::IntegerIn(0, INT_MAX))->group(launch);
  app.add_option("--elastic_timeout", o.elastic_timeout,
                  "etcd master: end the job (exit 124) after SECS below its minimum node count")
      ->check(SecondsUpTo(86400))->group(launch);
}

// Paddle's launcher flags, bound to `o`. Paddle's elastic flags that fleetrun does not support are
// refused rather than ignored.
std::unique_ptr<CLI::App> FleetrunApp(LaunchOptions& o) {
  auto app = cmdline::NewApp("fleetrun",
                             "Starts the processes of a PaddlePaddle distributed job on this node with Paddle's env "
                             "contract.\nA .py script runs as `python3 -u script args...`; anything else is executed "
                             "directly.",
                             kOperands);
  app->prefix_command();
  const CLI::Validator count = cmdline::IntegerIn(1, INT_MAX);
  const CLI::Validator port = cmdline::IntegerIn(1, 65535);

  const std::string collective = "collective (default)";
  app->add_option("--gpus,--selected_gpus,--devices", o.gpus,
                  "GPUs to use, physical ids (default: CUDA_VISIBLE_DEVICES, else all)")
      ->type_name("IDS")->group(collective);
  app->add_option("--ips", o.ips, "node addresses in rank order")->type_name("IPS")->capture_default_str()->group(collective);
  app->add_option("--nproc_per_node", o.nproc_per_node, "processes per node; GPUs are split into N groups (CPU: N processes)")
      ->type_name("N")->transform(count)->group(collective);
  app->add_option("--start_port", o.start_port,
                  "first port on every node (default FLAGS_START_PORT, else 6070; a single node without either uses "
                  "free ports)")
      ->type_name("PORT")->transform(port)->group(collective);

  const std::string ps = "parameter server (--run_mode=ps, or implied by these flags)";
  app->add_option("--server_num", o.server_num, "parameter servers: simulate a job on this machine with free ports")
      ->type_name("N")->transform(count)->group(ps);
  app->add_option("--worker_num,--trainer_num", o.worker_num, "trainers: simulate a job on this machine with free ports")
      ->type_name("N")->transform(count)->group(ps);
  app->add_option("--servers", o.servers, "parameter servers' ip:port list")->type_name("EPS")->group(ps);
  app->add_option("--workers,--trainers", o.workers, "trainers' ip:port list (ports may be omitted)")->type_name("EPS")->group(ps);
  app->add_option("--http_port", o.http_port, "port of the gloo HTTP store on server 0")
      ->type_name("PORT")->transform(port)->group(ps);

  const std::string heter = "heter parameter server (--run_mode=ps-heter)";
  app->add_option("--heter_workers", o.heter_workers, "heter workers, one list per stage, stages separated by ';'")
      ->type_name("EPS;EPS")->group(heter);
  app->add_option("--heter_worker_num", o.heter_worker_num, "heter workers per stage on this machine")
      ->type_name("N;N")->group(heter);
  app->add_option("--heter_devices", o.heter_devices, "device of each stage: cpu, gpu or xpu")->type_name("D;D")->group(heter);

  const std::string common = "common";
  app->add_option("--host", o.host, "this node's address (default POD_IP, else this machine's addresses)")
      ->type_name("ADDR")->group(common);
  app->add_option("--run_mode", o.run_mode, "collective, ps or ps-heter (default: derived from the flags)")
      ->type_name("MODE")->group(common);   // checked by the plan, which knows the other flags
  app->add_option("--log_dir", o.log_dir, "where workerlog.N, serverlog.N, heterlog.N and endpoints.log go")
      ->type_name("DIR")->check(cmdline::NonEmpty())->capture_default_str()->group(common);
  app->add_option("--grace_period", o.grace_period_seconds, "SIGTERM-to-SIGKILL delay when stopping processes")
      ->check(SecondsUpTo(3600))->capture_default_str()->group(common);
  app->add_option("--server_timeout", o.server_timeout_seconds,
                  "PS: stop the job (exit 124) when a parameter server does not accept connections within SECS of "
                  "the start (0: wait forever)")
      ->check(SecondsUpTo(86400))->capture_default_str()->group(common);
  app->add_option("--log_level", o.log_level, "accepted for Paddle's command lines (fleetrun's own messages do not change)")
      ->type_name("LEVEL")->check(Checked(CheckLogLevel))->group(common);
  app->add_flag("--version", o.version, "version and build features")->group(common);

  AddLauncherFlags(*app, o);

  const std::string elastic = std::string("elastic (all three, or ") + kElasticServerEnv + "/JOB_ID/NP; collective only)";
  app->add_option("--elastic_server", o.elastic_server, "etcd's host:port, where the nodes rendezvous")
      ->type_name("HOST:PORT")->group(elastic);
  app->add_option("--job_id", o.job_id, "the job's name in etcd (keys under /paddle/ID) or at the HTTP master")
      ->type_name("ID")->group(elastic);
  app->add_option("--np", o.np, "nodes: N (fault tolerance: exactly N) or MIN:MAX (elastic)")
      ->type_name("N|MIN:MAX")->group(elastic);
  for (const std::string unsupported : {"--scale", "--force", "--elastic_pre_hook", "--elastic_level"}) {
    app->add_option_function<std::string>(unsupported, [unsupported](const std::string&) {
         throw CLI::ValidationError(unsupported, "is not supported by fleetrun (docs/fleetrun.md, elastic training)");
       })->group("");   // not in the help
  }
  return app;
}

}  // namespace

Result<LaunchOptions> ParseFlags(const std::vector<std::string>& args) {
  LaunchOptions options;
  auto app = FleetrunApp(options);
  auto help = cmdline::Parse(*app, args);
  if (!help) return Error{help.error()};
  options.help = *help != nullptr;
  for (const CLI::Option* option : app->get_options()) {
    if (option->count() > 0 && !option->get_lnames().empty()) options.flags_given.push_back("--" + option->get_lnames().front());
  }
  if (options.help || options.version) return options;
  std::vector<std::string> script = app->remaining();
  if (!script.empty() && script.front() == "--") script.erase(script.begin());
  if (script.empty()) return Error{std::string("no training script given (usage: fleetrun [flags] ") + kOperands + ")"};
  options.training_script = script.front();
  options.training_script_args.assign(script.begin() + 1, script.end());
  return options;
}

std::vector<std::pair<std::string, std::string>> LaunchOptions::Describe() const {
  auto text = [](const std::optional<std::string>& v) { return v ? *v : std::string("None"); };
  auto number = [](const std::optional<int>& v) { return v ? std::to_string(*v) : std::string("None"); };
  std::string script_args = "[";
  for (size_t i = 0; i < training_script_args.size(); ++i) {
    script_args += (i ? ", '" : "'") + training_script_args[i] + "'";
  }
  script_args += "]";
  return {
      {"elastic_server", text(elastic_server)},
      {"elastic_timeout", elastic_timeout ? std::to_string(*elastic_timeout) : "None"},
      {"gpus", text(gpus)},
      {"grace_period", std::to_string(grace_period_seconds)},
      {"heter_devices", text(heter_devices)},
      {"heter_worker_num", text(heter_worker_num)},
      {"heter_workers", text(heter_workers)},
      {"host", text(host)},
      {"http_port", number(http_port)},
      {"ips", ips},
      {"job_id", text(job_id)},
      {"log_dir", log_dir},
      {"log_level", log_level.value_or("INFO")},
      {"master", text(master)},
      {"max_restart", number(max_restart)},
      {"nnodes", text(nnodes)},
      {"np", text(np)},
      {"rank", number(rank)},
      {"rendezvous_timeout", std::to_string(rendezvous_timeout_seconds)},
      {"nproc_per_node", number(nproc_per_node)},
      {"run_mode", text(run_mode)},
      {"server_num", number(server_num)},
      {"server_timeout", std::to_string(server_timeout_seconds)},
      {"servers", text(servers)},
      {"start_port", number(start_port)},
      {"training_script", training_script},
      {"training_script_args", script_args},
      {"worker_num", number(worker_num)},
      {"workers", text(workers)},
  };
}

namespace {

// One variable of Paddle's env_args_mapping: `apply` checks the value and sets the option.
struct EnvOverride {
  const char* env;
  const char* flag;
  std::function<Status(LaunchOptions&, const std::string&)> apply;
};

Result<int> IntegerFrom(const std::string& text, int minimum) {
  auto value = text == "-1" ? Result<int>(-1) : ParseNonNegativeInt(text, "value");
  if (!value || *value < minimum) return Error{Quoted(text) + " is not a whole number of at least " + std::to_string(minimum)};
  return value;
}

template <typename T>
std::function<Status(LaunchOptions&, const std::string&)> Text(std::optional<T> LaunchOptions::*field,
                                                               Status (*check)(const std::string&) = nullptr) {
  return [field, check](LaunchOptions& o, const std::string& text) -> Status {
    if (check) FLEET_RETURN_IF_ERROR(check(text));
    o.*field = text;
    return OkStatus();
  };
}

std::function<Status(LaunchOptions&, const std::string&)> Integer(std::optional<int> LaunchOptions::*field, int minimum) {
  return [field, minimum](LaunchOptions& o, const std::string& text) -> Status {
    FLEET_ASSIGN_OR_RETURN(o.*field, IntegerFrom(text, minimum));
    return OkStatus();
  };
}

Status CheckHost(const std::string& text) {
  if (auto host = ParseHost(text); !host) return Error{Quoted(text) + ": " + host.error()};
  return OkStatus();
}

const std::vector<EnvOverride>& EnvOverrides() {
  static const std::vector<EnvOverride> overrides = {
      {"POD_IP", "--host", Text(&LaunchOptions::host, CheckHost)},
      {"PADDLE_MASTER", "--master", Text(&LaunchOptions::master, CheckMaster)},
      {"PADDLE_NNODES", "--nnodes", Text(&LaunchOptions::nnodes, CheckNodeRange)},
      {"PADDLE_RANK", "--rank", Integer(&LaunchOptions::rank, -1)},
      {"PADDLE_JOB_ID", "--job_id", Text(&LaunchOptions::job_id)},
      {"PADDLE_NPROC_PER_NODE", "--nproc_per_node", Integer(&LaunchOptions::nproc_per_node, 1)},
      {"PADDLE_DEVICES", "--devices", Text(&LaunchOptions::gpus)},
      {"PADDLE_RUN_MODE", "--run_mode", Text(&LaunchOptions::run_mode, CheckRunMode)},
      {"PADDLE_LOG_DIR", "--log_dir",
       [](LaunchOptions& o, const std::string& text) -> Status {
         o.log_dir = text;
         return OkStatus();
       }},
      {"PADDLE_LOG_LEVEL", "--log_level", Text(&LaunchOptions::log_level, CheckLogLevel)},
      {"PADDLE_MAX_RESTART", "--max_restart", Integer(&LaunchOptions::max_restart, 0)},
      {kElasticTimeoutEnv, "--elastic_timeout",
       [](LaunchOptions& o, const std::string& text) -> Status {
         const std::optional<double> seconds = ParsePositiveSeconds(text);
         if (!seconds) return Error{Quoted(text) + " is not a positive number of seconds"};
         o.elastic_timeout = *seconds;
         return OkStatus();
       }},
  };
  return overrides;
}

// --master etcd://host:port: Paddle's elastic collective mode, which fleetrun runs as its etcd
// elastic mode. The prefix is removed as a prefix (Paddle's strip("etcd://") removes characters,
// and breaks hosts such as etcd-0).
Status MapEtcdMaster(LaunchOptions& o, std::vector<std::string>& notes) {
  if (o.elastic_server || o.np) {
    return Error{"--master " + *o.master + " names etcd itself: drop --elastic_server/--np (or PADDLE_ELASTIC_*)"};
  }
  o.elastic_server = o.master->substr(kEtcdMasterScheme.size());
  o.np = o.nnodes.value_or("1");
  if (!o.job_id) {
    o.job_id = "default";
    notes.push_back("--master " + *o.master + " without --job_id/PADDLE_JOB_ID: the job is \"default\" in etcd; "
                    "two jobs with that id share their nodes");
  }
  o.master.reset();
  o.nnodes.reset();
  return OkStatus();
}

}  // namespace

Result<std::vector<std::string>> ApplyLauncherEnv(LaunchOptions& options, const EnvMap& env) {
  std::vector<std::string> notes;
  bool nnodes_from_env = false;
  for (const EnvOverride& o : EnvOverrides()) {
    auto it = env.find(o.env);
    if (it == env.end()) continue;
    const std::string value(TrimWhitespace(it->second));
    if (value.empty()) continue;   // Paddle: an empty value is no value
    if (auto applied = o.apply(options, value); !applied) return Error{std::string(o.env) + ": " + applied.error()};
    const bool flag_given = std::find(options.flags_given.begin(), options.flags_given.end(), o.flag) != options.flags_given.end();
    notes.push_back(std::string("env ") + o.env + "=" + value + (flag_given ? " overrides " : " sets ") + o.flag +
                    (flag_given ? " (the env wins, as in Paddle's launcher)" : ""));
    nnodes_from_env = nnodes_from_env || std::string(o.env) == "PADDLE_NNODES";
  }
  if (options.rank && *options.rank < 0) options.rank.reset();   // -1: Paddle's "no rank"
  if (options.master && IsEtcd(*options.master)) {
    FLEET_RETURN_IF_ERROR(MapEtcdMaster(options, notes));
    return notes;
  }
  if (options.nnodes) {
    const NpRange nodes = *ParseNpRange(*options.nnodes);   // checked as it came in
    const std::string source = nnodes_from_env ? "PADDLE_NNODES" : "--nnodes";
    if (!nodes.fixed()) return Error{source + ": " + Quoted(*options.nnodes) + ": MIN:MAX (elastic) needs --master etcd://host:port"};
    if (!options.master && nodes.min > 1) {
      // A trainer's own env (FleetJob's one process per pod) carries PADDLE_NNODES: only a flag is a mistake.
      if (!nnodes_from_env) return Error{"--nnodes " + *options.nnodes + " needs --master ip:port (or PADDLE_MASTER)"};
      notes.push_back("PADDLE_NNODES=" + *options.nnodes + " is ignored without PADDLE_MASTER/--master");
      options.nnodes.reset();
    }
  }
  if (options.master && options.ips != "127.0.0.1") {
    return Error{"--master and --ips cannot be combined: the nodes find each other at the master"};
  }
  return notes;
}

std::optional<std::string> HttpMaster(const LaunchOptions& options) {
  if (options.master && !IsEtcd(*options.master)) return options.master;
  return std::nullopt;
}

std::string UsageText() {
  LaunchOptions defaults;
  return cmdline::Help(*FleetrunApp(defaults));
}

}  // namespace fleet::launcher
