#include "fleet/launcher/flags.h"

#include <charconv>
#include <climits>
#include <cstdio>

#include "fleet/cmdline/cmdline.h"

namespace fleet::launcher {
namespace {

constexpr const char* kOperands = "training_script [training_script_args...]";

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
  app->add_option("--gpus,--selected_gpus", o.gpus, "GPUs to use, physical ids (default: CUDA_VISIBLE_DEVICES, else all)")
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
  app->add_option("--worker_num", o.worker_num, "trainers: simulate a job on this machine with free ports")
      ->type_name("N")->transform(count)->group(ps);
  app->add_option("--servers", o.servers, "parameter servers' ip:port list")->type_name("EPS")->group(ps);
  app->add_option("--workers", o.workers, "trainers' ip:port list (ports may be omitted)")->type_name("EPS")->group(ps);
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
      ->type_name("MODE")->group(common);
  app->add_option("--log_dir", o.log_dir, "where workerlog.N, serverlog.N, heterlog.N and endpoints.log go")
      ->type_name("DIR")->check(cmdline::NonEmpty())->capture_default_str()->group(common);
  app->add_option("--grace_period", o.grace_period_seconds, "SIGTERM-to-SIGKILL delay when stopping processes")
      ->check(SecondsUpTo(3600))->capture_default_str()->group(common);
  app->add_option("--server_timeout", o.server_timeout_seconds,
                  "PS: stop the job (exit 124) when a parameter server does not accept connections within SECS of "
                  "the start (0: wait forever)")
      ->check(SecondsUpTo(86400))->capture_default_str()->group(common);
  app->add_flag("--version", o.version, "version and build features")->group(common);

  const std::string elastic = "elastic (all three, or PADDLE_ELASTIC_SERVER/JOB_ID/NP; collective only)";
  app->add_option("--elastic_server", o.elastic_server, "etcd's host:port, where the nodes rendezvous")
      ->type_name("HOST:PORT")->group(elastic);
  app->add_option("--job_id", o.job_id, "the job's name in etcd (keys under /paddle/ID)")->type_name("ID")->group(elastic);
  app->add_option("--np", o.np, "nodes: N (fault tolerance: exactly N) or MIN:MAX (elastic)")
      ->type_name("N|MIN:MAX")->group(elastic);
  for (const std::string unsupported : {"--scale", "--force", "--elastic_pre_hook", "--elastic_level", "--max_restart"}) {
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
      {"np", text(np)},
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

std::string UsageText() {
  LaunchOptions defaults;
  return cmdline::Help(*FleetrunApp(defaults));
}

}  // namespace fleet::launcher
