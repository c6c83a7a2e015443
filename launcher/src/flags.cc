#include "fleet/launcher/flags.h"

#include <charconv>
#include <cstdio>
#include <functional>
#include <map>
#include <set>

#include "fleet/base/strings.h"
#include "fleet/runtime/endpoint.h"

namespace fleet::launcher {
namespace {

using Setter = std::function<Status(LaunchOptions&, const std::string&)>;

Setter Text(std::optional<std::string> LaunchOptions::*field) {
  return [field](LaunchOptions& o, const std::string& v) -> Status {
    o.*field = v;
    return OkStatus();
  };
}

Setter Count(std::optional<int> LaunchOptions::*field, const std::string& flag, int minimum) {
  return [=](LaunchOptions& o, const std::string& v) -> Status {
    auto n = ParseNonNegativeInt(v, "--" + flag);
    if (!n) return Error{n.error()};
    if (*n < minimum) return Error{"--" + flag + " must be at least " + std::to_string(minimum) + ", got " + v};
    o.*field = *n;
    return OkStatus();
  };
}

Setter Port(std::optional<int> LaunchOptions::*field, const std::string& flag) {
  return [=](LaunchOptions& o, const std::string& v) -> Status {
    auto port = ParsePort(v, "--" + flag);
    if (!port) return Error{port.error()};
    o.*field = *port;
    return OkStatus();
  };
}

Setter Seconds(double LaunchOptions::*field, const std::string& flag, double maximum) {
  return [=](LaunchOptions& o, const std::string& v) -> Status {
    double seconds = -1;
    auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), seconds);
    if (v.empty() || ec != std::errc() || ptr != v.data() + v.size() || !(seconds >= 0) || seconds > maximum) {
      char range[32];
      std::snprintf(range, sizeof range, "[0, %.0f]", maximum);
      return Error{"--" + flag + " must be a number of seconds in " + range + ", got '" + v + "'"};
    }
    o.*field = seconds;
    return OkStatus();
  };
}

const std::map<std::string, Setter>& Flags() {
  static const std::map<std::string, Setter> flags = {
      {"gpus", Text(&LaunchOptions::gpus)},
      {"selected_gpus", Text(&LaunchOptions::gpus)},  // Paddle's older spelling
      {"ips", [](LaunchOptions& o, const std::string& v) -> Status { o.ips = v; return OkStatus(); }},
      {"host", Text(&LaunchOptions::host)},
      {"nproc_per_node", Count(&LaunchOptions::nproc_per_node, "nproc_per_node", 1)},
      {"start_port", Port(&LaunchOptions::start_port, "start_port")},
      {"server_num", Count(&LaunchOptions::server_num, "server_num", 1)},
      {"worker_num", Count(&LaunchOptions::worker_num, "worker_num", 1)},
      {"servers", Text(&LaunchOptions::servers)},
      {"workers", Text(&LaunchOptions::workers)},
      {"heter_workers", Text(&LaunchOptions::heter_workers)},
      {"heter_worker_num", Text(&LaunchOptions::heter_worker_num)},
      {"heter_devices", Text(&LaunchOptions::heter_devices)},
      {"http_port", Port(&LaunchOptions::http_port, "http_port")},
      {"run_mode", Text(&LaunchOptions::run_mode)},
      {"log_dir", [](LaunchOptions& o, const std::string& v) -> Status {
         if (v.empty()) return Error{"--log_dir must not be empty"};
         o.log_dir = v;
         return OkStatus();
       }},
      {"grace_period", Seconds(&LaunchOptions::grace_period_seconds, "grace_period", 3600)},
      {"server_timeout", Seconds(&LaunchOptions::server_timeout_seconds, "server_timeout", 86400)},
  };
  return flags;
}

// Elastic training is its own issue; until it lands its flags are refused rather than ignored.
const std::set<std::string>& ElasticFlags() {
  static const std::set<std::string> flags = {"elastic_server", "job_id", "np", "scale", "force",
                                              "elastic_pre_hook", "elastic_level", "max_restart"};
  return flags;
}

}  // namespace

Result<LaunchOptions> ParseFlags(const std::vector<std::string>& args) {
  LaunchOptions options;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg == "-h" || arg == "--help") {
      options.help = true;
      return options;
    }
    if (arg == "--version") {
      options.version = true;
      return options;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the training script
    if (arg.rfind("--", 0) != 0) return Error{"unknown flag '" + arg + "' (flags are --name=value)"};
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (ElasticFlags().count(name)) {
      return Error{"--" + name + ": elastic training is not supported by this fleetrun yet"};
    }
    auto flag = Flags().find(name);
    if (flag == Flags().end()) return Error{"unknown flag '--" + name + "' (see fleetrun --help)"};
    if (!value) {
      if (i + 1 >= args.size()) return Error{"flag '--" + name + "' needs a value"};
      value = args[++i];
    }
    if (auto s = flag->second(options, *value); !s) return Error{s.error()};
  }
  if (i >= args.size()) return Error{"no training script given (usage: fleetrun [flags] training_script [args...])"};
  options.training_script = args[i];
  options.training_script_args.assign(args.begin() + static_cast<long>(i) + 1, args.end());
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
      {"gpus", text(gpus)},
      {"grace_period", std::to_string(grace_period_seconds)},
      {"heter_devices", text(heter_devices)},
      {"heter_worker_num", text(heter_worker_num)},
      {"heter_workers", text(heter_workers)},
      {"host", text(host)},
      {"http_port", number(http_port)},
      {"ips", ips},
      {"log_dir", log_dir},
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
  return R"(usage: fleetrun [flags] training_script [training_script_args...]

Starts the processes of a PaddlePaddle distributed job on this node with Paddle's env contract.
A .py script runs as `python3 -u script args...`; anything else is executed directly.

collective (default):
  --gpus IDS            GPUs to use, physical ids (default: CUDA_VISIBLE_DEVICES, else all)
  --ips IPS             node addresses in rank order (default 127.0.0.1)
  --nproc_per_node N    processes per node; GPUs are split into N groups (CPU: N processes)
  --start_port PORT     first port on every node (default FLAGS_START_PORT, else 6070;
                        a single node without either uses free ports)
parameter server (--run_mode=ps, or implied by these flags):
  --server_num N / --worker_num N     simulate a job on this machine with free ports
  --servers EPS / --workers EPS       ip:port lists (workers may omit ports)
  --http_port PORT                    port of the gloo HTTP store on server 0
heter parameter server (--run_mode=ps-heter):
  --heter_workers EPS;EPS   heter workers, one list per stage, stages separated by ';'
  --heter_worker_num N;N    heter workers per stage on this machine
  --heter_devices D;D       device of each stage: cpu, gpu or xpu
common:
  --host ADDR           this node's address (default POD_IP, else this machine's addresses)
  --run_mode MODE       collective, ps or ps-heter
  --log_dir DIR         where workerlog.N, serverlog.N, heterlog.N and endpoints.log go (default log)
  --grace_period SECS   SIGTERM-to-SIGKILL delay when stopping processes (default 5)
  --server_timeout SECS PS: stop the job (exit 124) when a parameter server does not accept
                        connections within SECS of the start (default 300; 0: wait forever)
  -h, --help            this text
  --version             version and build features
)";
}

}  // namespace fleet::launcher
