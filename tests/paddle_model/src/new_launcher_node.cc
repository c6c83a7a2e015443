// The new launcher on one node: python -m paddle.distributed.launch, 2.3 and later.
// Paddle paths are under python/paddle/distributed/launch/.
#include <set>

#include "common.h"

namespace fleet::paddle_model {
namespace {

using detail::AtLeast;
using detail::Lookup;
using detail::PyInt;
using detail::Split;

std::optional<std::string> Crash(std::string message) { return message; }

// The launcher's flags as parsed by context/args_envs.py parse_args (argparse parse_known_args).
// Values are the strings given; `kept_as_string` names the attributes the env set without the
// flag's type conversion (context/__init__.py set_env_in_args before 2.6).
struct Args {
  std::map<std::string, std::string> values;
  std::set<std::string> kept_as_string;
  std::vector<std::string> unknown;
  std::string script;

  bool Has(const std::string& attr) const { return values.count(attr) > 0; }
  std::string Get(const std::string& attr, const std::string& fallback = "") const {
    const auto it = values.find(attr);
    return it == values.end() ? fallback : it->second;
  }
  // Python truthiness of the attribute: a string kept from the env is true when not empty, a
  // converted int when not 0.
  bool Truthy(const std::string& attr) const {
    if (!Has(attr)) return false;
    if (kept_as_string.count(attr)) return !Get(attr).empty();
    const auto number = PyInt(Get(attr));
    return number ? *number != 0 : !Get(attr).empty();
  }
};

// parse_args's flags per version: flag -> attribute. 2.3 has --devices only (no --gpus alias).
std::map<std::string, std::string> KnownFlags(Version version) {
  std::map<std::string, std::string> flags;
  for (const char* attr : {"master", "legacy", "rank", "log_level", "nnodes", "nproc_per_node",
                           "log_dir", "run_mode", "job_id", "devices", "host", "servers", "trainers",
                           "trainer_num", "server_num", "gloo_port", "with_gloo", "max_restart",
                           "elastic_level", "elastic_timeout"}) {
    flags[std::string("--") + attr] = attr;
  }
  if (AtLeast(version, Version::k2_5)) {
    for (const char* alias : {"--gpus", "--npus", "--xpus"}) flags[alias] = "devices";
    for (const char* attr : {"log_overwrite", "ips", "start_port", "auto_parallel_config"}) {
      flags[std::string("--") + attr] = attr;
    }
  }
  if (AtLeast(version, Version::k2_6)) {
    for (const char* attr : {"sort_ip", "enable_gpu_log", "auto_tuner_json"}) {
      flags[std::string("--") + attr] = attr;
    }
  }
  if (AtLeast(version, Version::k3_0)) flags["--auto_cluster_config"] = "auto_cluster_config";
  return flags;
}

// argparse: options before the script; the first positional is the script, the rest its args.
// An unknown "--x" goes to the unknown list (its value, if separate, becomes the script). Not
// modelled: argparse's unique-prefix abbreviations (--nproc for --nproc_per_node).
std::optional<std::string> ParseArgs(Version version, const std::vector<std::string>& argv, Args& args) {
  const auto flags = KnownFlags(version);
  for (std::size_t i = 0; i < argv.size(); ++i) {
    const std::string& token = argv[i];
    if (token.rfind("-", 0) != 0 || token == "-") {
      args.script = token;
      return std::nullopt;
    }
    const std::size_t eq = token.find('=');
    const auto flag = flags.find(token.substr(0, eq));
    if (flag == flags.end()) {
      args.unknown.push_back(token);
      continue;
    }
    if (eq != std::string::npos) {
      args.values[flag->second] = token.substr(eq + 1);
    } else if (i + 1 < argv.size() && argv[i + 1].rfind("--", 0) != 0) {
      args.values[flag->second] = argv[++i];
    } else {
      return Crash("argument " + token + ": expected one argument");
    }
  }
  return Crash("the following arguments are required: training_script");
}

// context/args_envs.py env_args_mapping: env name -> (attribute, converted to int from 2.6).
struct EnvFlag { const char* env; const char* attr; bool is_int; Version since; };
constexpr EnvFlag kEnvFlags[] = {
    {"POD_IP", "host", false, Version::k2_3},
    {"PADDLE_MASTER", "master", false, Version::k2_3},
    {"PADDLE_DEVICES", "devices", false, Version::k2_3},
    {"PADDLE_NNODES", "nnodes", false, Version::k2_3},
    {"PADDLE_RUN_MODE", "run_mode", false, Version::k2_3},
    {"PADDLE_LOG_LEVEL", "log_level", false, Version::k2_3},
    {"PADDLE_NPROC_PER_NODE", "nproc_per_node", true, Version::k2_3},
    {"PADDLE_JOB_ID", "job_id", false, Version::k2_3},
    {"PADDLE_RANK", "rank", true, Version::k2_3},
    {"PADDLE_LOG_DIR", "log_dir", false, Version::k2_3},
    {"PADDLE_MAX_RESTART", "max_restart", true, Version::k2_3},
    {"PADDLE_ELASTIC_LEVEL", "elastic_level", true, Version::k2_3},
    {"PADDLE_ELASTIC_TIMEOUT", "elastic_timeout", true, Version::k2_3},
    {"PADDLE_SERVER_NUM", "server_num", true, Version::k2_3},
    {"PADDLE_TRAINER_NUM", "trainer_num", true, Version::k2_3},
    {"PADDLE_SERVERS_ENDPOINTS", "servers", false, Version::k2_3},
    {"PADDLE_TRAINERS_ENDPOINTS", "trainers", false, Version::k2_3},
    {"PADDLE_GLOO_PORT", "gloo_port", true, Version::k2_3},
    {"PADDLE_WITH_GLOO", "with_gloo", false, Version::k2_3},
    {"PADDLE_LOG_OVERWRITE", "log_overwrite", false, Version::k2_5},
    {"PADDLE_START_PORT", "start_port", true, Version::k2_5},
    {"PADDLE_IPS", "ips", false, Version::k2_5},
    {"PADDLE_AUTO_PARALLEL_CONFIG", "auto_parallel_config", false, Version::k2_5},
    {"PADDLE_SORT_IP", "sort_ip", false, Version::k2_6},
    {"PADDLE_AUTO_CLUSTER", "auto_cluster_config", false, Version::k3_0},
};

// context/__init__.py set_env_in_args: every mapped env name present overrides its flag. Up to
// 2.5 the value is set as the env's string; from 2.6 it goes through the flag's type (int() raises
// on a non-number). 2.6 args_envs.py parse_args first sets rank from PADDLE_TRAINER_ID (>= 0), so
// only PADDLE_RANK wins over it.
std::optional<std::string> ApplyEnv(Version version, const Env& env, Args& args) {
  if (AtLeast(version, Version::k2_6)) {
    if (const auto id = Lookup(env, "PADDLE_TRAINER_ID")) {
      const auto rank = PyInt(*id);
      if (!rank) return Crash("ValueError: invalid literal for int() in PADDLE_TRAINER_ID=" + *id);
      if (*rank >= 0) args.values["rank"] = std::to_string(*rank);
    }
  }
  for (const EnvFlag& flag : kEnvFlags) {
    if (!AtLeast(version, flag.since)) continue;
    const auto value = Lookup(env, flag.env);
    if (!value) continue;
    args.values[flag.attr] = *value;
    if (!AtLeast(version, Version::k2_6)) {
      args.kept_as_string.insert(flag.attr);
    } else if (flag.is_int) {
      const auto number = PyInt(*value);
      if (!number) return Crash(std::string("ValueError: invalid literal for int() in ") + flag.env + "=" + *value);
      args.values[flag.attr] = std::to_string(*number);
    }
  }
  return std::nullopt;
}

// plugins/__init__.py collective_compatible. PADDLE_TRAINER_ENDPOINTS (all versions):
// master = its first entry (":6768" added without a port), nnodes = its distinct hosts.
// DISTRIBUTED_TRAINER_ENDPOINTS does the same from 2.4 (commented out in 2.3, where it selects the
// legacy launcher instead). 3.0: PADDLE_LAUNCH_WITH_ARGS != 0 clears the master instead.
std::optional<std::string> CollectiveCompatible(Version version, const Env& env, Args& args) {
  bool with_args = false;
  if (AtLeast(version, Version::k3_0)) {
    const auto flag = PyInt(Lookup(env, "PADDLE_LAUNCH_WITH_ARGS").value_or("0"));
    if (!flag) return Crash("ValueError: invalid literal for int() in PADDLE_LAUNCH_WITH_ARGS");
    with_args = *flag != 0;
  }
  std::vector<const char*> names = {"PADDLE_TRAINER_ENDPOINTS"};
  if (AtLeast(version, Version::k2_4)) names.push_back("DISTRIBUTED_TRAINER_ENDPOINTS");
  for (const char* name : names) {
    const auto value = Lookup(env, name);
    if (!value) continue;
    const auto endpoints = Split(*value, ',');
    std::set<std::string> hosts;
    for (const auto& endpoint : endpoints) hosts.insert(detail::HostOf(endpoint));
    std::string master = endpoints[0];
    if (std::string(name) == "PADDLE_TRAINER_ENDPOINTS" && master.find(':') == std::string::npos) master += ":6768";
    if (with_args) {
      args.values.erase("master");
    } else {
      args.values["master"] = master;
      args.kept_as_string.erase("master");
    }
    args.values["nnodes"] = std::to_string(hosts.size());
    args.kept_as_string.erase("nnodes");
  }
  return std::nullopt;
}

// context/__init__.py is_legacy_mode. 2.3: --legacy, any unknown flag, or env
// DISTRIBUTED_TRAINER_ENDPOINTS / PADDLE_ELASTIC_JOB_ID / FLAGS_START_PORT. 2.5+: --legacy, else a
// master keeps the new launcher, else unknown flags select the legacy one. (The docs' 2.3
// PADDLE_DISTRI_BACKEND is not in v2.3.0's list: not modelled.)
bool IsLegacyMode(Version version, const Env& env, const Args& args) {
  if (detail::PyStrToBool(args.Get("legacy", "0")).value_or(false)) return true;
  if (!AtLeast(version, Version::k2_4)) {
    if (!args.unknown.empty()) return true;
    for (const char* name : {"DISTRIBUTED_TRAINER_ENDPOINTS", "PADDLE_ELASTIC_JOB_ID", "FLAGS_START_PORT"}) {
      if (env.count(name)) return true;
    }
    return false;
  }
  if (args.Truthy("master")) return false;
  return !args.unknown.empty();
}

// context/device.py Device.parse_device: CUDA_VISIBLE_DEVICES (2.3 also NVIDIA_VISIBLE_DEVICES)
// names the labels unless "all"; otherwise the devices the build detects.
std::vector<std::string> DeviceLabels(Version version, const Node& node) {
  auto visible = Lookup(node.env, "CUDA_VISIBLE_DEVICES");
  if (!visible && !AtLeast(version, Version::k2_4)) visible = Lookup(node.env, "NVIDIA_VISIBLE_DEVICES");
  if (visible && *visible != "all") return Split(*visible, ',');
  std::vector<std::string> labels;
  for (int i = 0; i < node.visible_gpus; ++i) labels.push_back(std::to_string(i));
  return labels;
}

// controllers/controller.py pod_replicas: nproc_per_node, else the --devices count, else the
// device count (at least 1). context/device.py get_selected_devices: --devices as indexes into the
// labels, else every label; collective.py gives one per process, or all to a single process.
std::optional<std::string> Processes(Version version, const Node& node, const Args& args, NewLauncherNode& out) {
  const auto labels = DeviceLabels(version, node);
  if (args.Truthy("nproc_per_node")) {
    const auto n = PyInt(args.Get("nproc_per_node"));
    if (!n) return Crash("ValueError: invalid literal for int() in nproc_per_node");
    out.nproc = static_cast<int>(*n);
  } else if (args.Truthy("devices")) {
    out.nproc = static_cast<int>(Split(args.Get("devices"), ',').size());
  } else {
    out.nproc = labels.empty() ? 1 : static_cast<int>(labels.size());
  }
  std::vector<std::string> selected;
  if (!args.Truthy("devices")) {
    for (std::size_t i = 0; i < labels.size(); ++i) selected.push_back(std::to_string(i));
  } else {
    for (const auto& device : Split(args.Get("devices"), ',')) {
      const std::string label = detail::PyStrip(device, " ");
      std::size_t index = 0;
      while (index < labels.size() && labels[index] != label) ++index;
      if (index == labels.size()) return Crash("ValueError: device " + label + " is not in the visible devices");
      selected.push_back(std::to_string(index));
    }
  }
  out.selected_devices.clear();
  if (selected.empty()) return std::nullopt;  // no devices: PADDLE_DISTRI_BACKEND=gloo
  if (out.nproc == 1) {
    out.selected_devices.push_back(detail::Join(selected, ","));
    return std::nullopt;
  }
  if (static_cast<std::size_t>(out.nproc) > selected.size()) {
    return Crash("IndexError: " + std::to_string(out.nproc) + " processes for " + std::to_string(selected.size()) + " devices");
  }
  out.selected_devices.assign(selected.begin(), selected.begin() + out.nproc);
  return std::nullopt;
}

// job/job.py Job.set_replicas: "MIN:MAX" is elastic and starts at MAX; otherwise int(nnodes).
std::optional<std::string> Replicas(const std::string& nnodes, NewLauncherNode& out) {
  out.nnodes = nnodes.empty() ? "1" : nnodes;
  const auto parts = Split(out.nnodes, ':');
  const auto low = PyInt(parts.front());
  const auto high = PyInt(parts.size() > 1 ? parts[1] : parts.front());
  if (!low || !high) return Crash("ValueError: invalid literal for int() in nnodes=" + out.nnodes);
  out.replicas_min = static_cast<int>(*low);
  out.replicas = static_cast<int>(*high);
  return std::nullopt;
}

// controllers/master.py: the etcd master (ETCDMaster.__init__, built for every node by
// Master.factory) takes its endpoint with strip("etcd://") -- in every version read (2.3, 2.5,
// 2.6, 3.0-dev; the docs' "2.x lstrip" was not found) -- a set of characters, not a prefix -- then
// splits host and port on ':'.
std::optional<std::string> EtcdMaster(const std::string& master, NewLauncherNode& out) {
  out.etcd = true;
  const auto parts = Split(detail::PyStrip(master, "etcd:/"), ':');
  if (parts.size() != 2) return Crash("ValueError: etcd endpoint " + master + " is not host:port after strip");
  out.etcd_host = parts[0];
  out.etcd_port = parts[1];
  return std::nullopt;
}

// controllers/ps.py build_pod. With --servers and --trainers (PADDLE_SERVERS_ENDPOINTS,
// PADDLE_TRAINERS_ENDPOINTS) a node runs the endpoints that start with its address (a string
// prefix: 10.0.0.2 also takes 10.0.0.21's), or with 127.0.0.1 when that is among the servers.
// Otherwise _build_pod_with_master takes server_num/trainer_num free ports: up to 2.5 a count set
// from the env is still a string there, and range() raises.
std::optional<std::string> PsPod(Version version, const Args& args, NewLauncherNode& out) {
  const std::string servers = args.Get("servers");
  const std::string trainers = args.Get("trainers");
  if (!servers.empty() && !trainers.empty()) {
    const std::string host = servers.find("127.0.0.1") != std::string::npos ? "127.0.0.1" : out.own_ip;
    for (const auto& endpoint : Split(servers, ',')) {
      if (endpoint.rfind(host, 0) == 0) out.ps_servers.push_back(endpoint);
    }
    for (const auto& endpoint : Split(trainers, ',')) {
      if (endpoint.rfind(host, 0) == 0) out.ps_trainers.push_back(endpoint);
    }
    out.nproc = static_cast<int>(out.ps_servers.size() + out.ps_trainers.size());
    return std::nullopt;
  }
  for (const char* attr : {"server_num", "trainer_num"}) {
    if (!AtLeast(version, Version::k2_6) && args.kept_as_string.count(attr)) {
      return Crash(std::string("TypeError: ") + attr + " from the env is a str (range() of a str)");
    }
  }
  return std::nullopt;
}

// The controller's view after the plugins (controllers/__init__.py init, collective.py build_pod).
std::optional<std::string> Controller(Version version, const Node& node, const Args& args, NewLauncherNode& out) {
  if (auto crash = Replicas(args.Get("nnodes", "1"), out)) return crash;
  out.job_id = args.Get("job_id", "default");
  out.log_dir = args.Get("log_dir", "log");
  if (auto crash = Processes(version, node, args, out)) return crash;
  const std::string rank = args.Get("rank", "-1");
  const auto rank_number = PyInt(rank);
  if (!rank_number) return Crash("ValueError: invalid literal for int() in rank=" + rank);
  // 2.3 collective.py build_pod keeps args.rank as it is; master.py sync_peers then compares it
  // with 0: a string from PADDLE_RANK raises TypeError once the job has two nodes or more.
  if (!AtLeast(version, Version::k2_4) && args.kept_as_string.count("rank") && out.replicas >= 2) {
    return Crash("TypeError: '<' not supported between instances of 'str' and 'int' (PADDLE_RANK=" + rank + ")");
  }
  out.rank = static_cast<int>(*rank_number);
  const auto sort_ip = detail::PyStrToBool(args.Get("sort_ip", "0"));
  if (!sort_ip) return Crash("ValueError: invalid truth value for sort_ip: " + args.Get("sort_ip"));
  out.sort_ip = AtLeast(version, Version::k2_6) && *sort_ip;
  if (args.Has("master")) out.master = args.Get("master");
  // controllers/ps.py PSController.enable: run_mode ps, server_num, servers, trainer_num or trainers.
  out.ps_mode = args.Get("run_mode") == "ps" || args.Truthy("server_num") || !args.Get("servers").empty() ||
                args.Truthy("trainer_num") || !args.Get("trainers").empty();
  if (out.master && out.master->rfind("etcd://", 0) == 0) {
    out.ps_mode = false;  // CollectiveElasticController is tried first
    if (auto crash = EtcdMaster(*out.master, out)) return crash;
    // 2.3-2.5 CollectiveElasticController.run compares pod.restart <= args.max_restart.
    if (!AtLeast(version, Version::k2_6) && args.kept_as_string.count("max_restart")) {
      return Crash("TypeError: '<=' not supported between instances of 'int' and 'str' (PADDLE_MAX_RESTART)");
    }
    // 2.3 passes args.elastic_timeout on unconverted; master.py wait_peer_ready compares it with 1.
    if (!AtLeast(version, Version::k2_4) && args.kept_as_string.count("elastic_timeout")) {
      return Crash("TypeError: '>' not supported between instances of 'str' and 'int' (PADDLE_ELASTIC_TIMEOUT)");
    }
    return std::nullopt;
  }
  if (out.ps_mode) return PsPod(version, args, out);
  // collective.py build_pod (2.5+): no master, a start port and --ips build the pod from args.
  if (AtLeast(version, Version::k2_5) && !out.master && args.Truthy("start_port") && args.Truthy("ips")) {
    const auto port = PyInt(args.Get("start_port"));
    if (!port) return Crash("ValueError: invalid literal for int() in start_port");
    out.with_args = true;
    out.start_port = static_cast<int>(*port);
    out.ips = Split(args.Get("ips"), ',');
    return std::nullopt;
  }
  // master.py HTTPMaster.lazy_init (only reached with two nodes or more): the node serves the KV
  // master when the master's host is 127.0.0.1 or its own address; with no master, it serves one.
  if (!out.master) {
    out.serves_master = true;
  } else if (out.replicas >= 2) {
    const auto parts = Split(*out.master, ':');
    if (parts.size() != 2) return Crash("ValueError: master " + *out.master + " is not ip:port");
    if (!PyInt(parts[1])) return Crash("ValueError: master port " + parts[1] + " is not a number");
    out.serves_master = parts[0] == "127.0.0.1" || parts[0] == out.own_ip;
  }
  return std::nullopt;
}

}  // namespace

std::string_view VersionName(Version version) {
  switch (version) {
    case Version::k2_0: return "2.0";
    case Version::k2_2: return "2.2";
    case Version::k2_3: return "2.3";
    case Version::k2_4: return "2.4";
    case Version::k2_5: return "2.5";
    case Version::k2_6: return "2.6";
    case Version::k3_0: return "3.0";
  }
  return "?";
}

// main.py launch: Context() (parse_args, set_env_in_args, the plugins), then is_legacy_mode, then
// the controller. 2.4 is modelled as 2.5 except where the docs say 2.4 changed (no 2.4 source read).
NewLauncherNode ModelNewLauncher(Version version, const Node& node) {
  NewLauncherNode out;
  if (!AtLeast(version, Version::k2_3)) {
    out.crash = "the new launcher needs Paddle 2.3 or later (" + std::string(VersionName(version)) + " has only the legacy one)";
    return out;
  }
  Args args;
  if (!AtLeast(version, Version::k2_5)) args.values["run_mode"] = "collective";
  out.crash = ParseArgs(version, node.args, args);
  if (!out.crash) out.crash = ApplyEnv(version, node.env, args);
  if (!out.crash) out.crash = CollectiveCompatible(version, node.env, args);
  if (out.crash) return out;
  // context/node.py get_host_ip, then plugins rewrite_host_ip: --host/POD_IP only with a '.'.
  out.own_ip = node.hostname_ip.empty() ? "127.0.0.1" : node.hostname_ip;
  const std::string host = args.Get("host");
  if (host.find('.') != std::string::npos) out.own_ip = host;
  // plugins process_args (2.5+): 127.0.0.1 among several --ips raises.
  const auto ips = Split(args.Get("ips"), ',');
  if (AtLeast(version, Version::k2_5) && ips.size() > 1) {
    for (const auto& ip : ips) {
      if (ip == "127.0.0.1") {
        out.crash = "ValueError: 127.0.0.1 in ips is not allowed in multi-nodes.";
        return out;
      }
    }
  }
  if (IsLegacyMode(version, node.env, args)) {
    out.legacy_fallback = true;
    return out;
  }
  // args_envs.py fetch_envs drops the proxies; controller.py adds POD_NAME (a random name).
  out.base_env = node.env;
  out.base_env.erase("http_proxy");
  out.base_env.erase("https_proxy");
  out.workdir = node.workdir;
  out.crash = Controller(version, node, args, out);
  return out;
}

}  // namespace fleet::paddle_model
