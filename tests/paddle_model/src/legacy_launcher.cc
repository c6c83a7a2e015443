// The legacy launcher: Paddle 2.x fleetrun = python -m paddle.distributed.fleet.launch (still shipped
// in 3.0). Paddle paths are under python/paddle/distributed/fleet/; read at v2.0.0, v2.2.2, 2.5.
#include <set>

#include "common.h"

namespace fleet::paddle_model {
namespace {

using detail::AtLeast;
using detail::Join;
using detail::Lookup;
using detail::PyInt;
using detail::Split;

struct LegacyArgs {
  std::map<std::string, std::string> values;  // flag -> value
  std::string argv_line;                      // the options as one string (which_distributed_mode)
};

// launch.py _parse_args, reduced to what decides the outcome: options before the script.
LegacyArgs ParseLegacyArgs(const std::vector<std::string>& argv) {
  LegacyArgs args;
  for (std::size_t i = 0; i < argv.size() && argv[i].rfind("-", 0) == 0; ++i) {
    args.argv_line += argv[i] + " ";
    const std::size_t eq = argv[i].find('=');
    if (eq != std::string::npos) {
      args.values[argv[i].substr(0, eq)] = argv[i].substr(eq + 1);
    } else if (i + 1 < argv.size()) {
      args.values[argv[i]] = argv[i + 1];
      args.argv_line += argv[++i] + " ";
    }
  }
  return args;
}

// launch.py which_distributed_mode: --run_mode (2.2+), else PS flags seen in argv, else --ips,
// else the build: 2.0 runs a CPU build as PS; 2.2+ only with --servers. TRAINING_ROLE is never read.
bool PsMode(Version version, const LegacyArgs& args, bool gpu_build) {
  const auto it = args.values.find("--run_mode");
  if (AtLeast(version, Version::k2_2) && it != args.values.end()) return it->second != "collective";
  for (const char* flag : {"--worker_num", "--server_num", "--heter_worker_num", "--servers", "--workers",
                           "--heter_workers", "--heter_devices", "--http_port"}) {
    if (args.argv_line.find(flag) != std::string::npos) return true;
  }
  if (args.argv_line.find("--ips") != std::string::npos) return false;
  if (gpu_build) return false;
  return !AtLeast(version, Version::k2_2) || args.values.count("--servers") > 0;
}

// launch_utils.py get_device_proc_info: GPUs from --gpus, else the visible ones, grouped by
// --nproc_per_node; a CPU build runs nproc_per_node processes (1 by default).
std::optional<std::string> DevicesPerProc(const Node& node, const LegacyArgs& args, bool gpu_build,
                                          std::vector<std::string>& per_proc) {
  const auto nproc_flag = args.values.find("--nproc_per_node");
  std::optional<long long> nproc;
  if (nproc_flag != args.values.end()) {
    nproc = PyInt(nproc_flag->second);
    if (!nproc || *nproc <= 0) return "ValueError: --nproc_per_node " + nproc_flag->second;
  }
  if (!gpu_build) {
    for (long long i = 0; i < nproc.value_or(1); ++i) per_proc.push_back("");
    return std::nullopt;
  }
  std::vector<std::string> gpus;
  const auto flag = args.values.find("--gpus");
  if (flag != args.values.end()) gpus = Split(flag->second, ',');
  else for (int i = 0; i < node.visible_gpus; ++i) gpus.push_back(std::to_string(i));
  const auto count = static_cast<long long>(gpus.size());
  const long long groups = nproc.value_or(count);
  if (groups == 0 || count % groups != 0) return "AssertionError: gpus' number mod nproc_per_node must be 0";
  const auto width = static_cast<std::size_t>(count / groups);
  for (std::size_t i = 0; i < gpus.size(); i += width) {
    per_proc.push_back(Join(std::vector<std::string>(gpus.begin() + static_cast<long>(i), gpus.begin() + static_cast<long>(i + width)), ","));
  }
  return std::nullopt;
}

// Every node the same nproc ports from `start`.
std::vector<std::vector<std::string>> SamePorts(const std::vector<std::string>& ips, long long start, std::size_t nproc) {
  std::vector<std::vector<std::string>> endpoints;
  for (const auto& ip : ips) {
    endpoints.emplace_back();
    for (std::size_t p = 0; p < nproc; ++p) endpoints.back().push_back(ip + ":" + std::to_string(start + static_cast<long long>(p)));
  }
  return endpoints;
}

// cloud_utils.py get_cloud_cluster: the node list, this node's rank and every node's endpoints.
std::optional<std::string> CloudCluster(const Env& env, std::size_t nproc, std::vector<std::string>& ips,
                                        std::vector<std::vector<std::string>>& endpoints, LegacyNode& out) {
  ips = Split(*Lookup(env, "PADDLE_TRAINERS"), ',');
  const auto rank = PyInt(*Lookup(env, "PADDLE_TRAINER_ID"));
  const auto ports_num = PyInt(*Lookup(env, "TRAINER_PORTS_NUM"));
  if (!rank || !ports_num) return "ValueError: PADDLE_TRAINER_ID or TRAINER_PORTS_NUM is not a number";
  out.node_rank = static_cast<int>(*rank);
  if (const auto listed = Lookup(env, "DISTRIBUTED_TRAINER_ENDPOINTS")) {
    // Cut by position into TRAINER_PORTS_NUM chunks; hosts are never compared.
    const auto all = Split(*listed, ',');
    const auto chunk = static_cast<std::size_t>(*ports_num);
    if (ips.size() * chunk != all.size()) return "AssertionError: DISTRIBUTED_TRAINER_ENDPOINTS has " + std::to_string(all.size()) + " entries, not nodes * TRAINER_PORTS_NUM";
    for (std::size_t n = 0; n < ips.size(); ++n) endpoints.emplace_back(all.begin() + static_cast<long>(n * chunk), all.begin() + static_cast<long>((n + 1) * chunk));
    return std::nullopt;
  }
  // Ports from FLAGS_START_PORT (kept a string: launch.py launch_collective) or 6170; PADDLE_PORT
  // only with several nodes and TRAINER_PORTS_NUM >= the process count.
  const auto flags_port = Lookup(env, "FLAGS_START_PORT");
  std::optional<long long> start = flags_port ? std::nullopt : std::optional<long long>(6170);
  if (ips.size() > 1) {
    const auto paddle_port = PyInt(Lookup(env, "PADDLE_PORT").value_or(""));
    if (paddle_port && *ports_num >= static_cast<long long>(nproc) && (flags_port || *paddle_port != 6170)) start = paddle_port;
  }
  if (!start) return "TypeError: FLAGS_START_PORT without a usable PADDLE_PORT: range() of a str";
  endpoints = SamePorts(ips, *start, nproc);
  return std::nullopt;
}

// launch.py get_cluster_from_args: --ips (default 127.0.0.1); with several, --host or the
// hostname's address must be among them. Ports: FLAGS_START_PORT or 6070 (free ports alone).
std::optional<std::string> ArgsCluster(const Node& node, const LegacyArgs& args, std::size_t nproc, std::vector<std::string>& ips,
                                       std::vector<std::vector<std::string>>& endpoints, LegacyNode& out) {
  const auto flag = args.values.find("--ips");
  ips = Split(flag == args.values.end() ? "127.0.0.1" : flag->second, ',');
  std::string own = ips[0];
  if (ips.size() > 1) {
    const auto host = args.values.find("--host");
    own = host != args.values.end() ? host->second : node.hostname_ip;
  }
  std::size_t index = 0;
  while (index < ips.size() && ips[index] != own) ++index;
  if (index == ips.size()) return "AssertionError: Can't find your local ip " + own + " in node_ips";
  out.node_rank = static_cast<int>(index);
  const long long start = PyInt(Lookup(node.env, "FLAGS_START_PORT").value_or("6070")).value_or(6070);
  endpoints = SamePorts(ips, start, nproc);
  return std::nullopt;
}

// launch.py launch_collective's global env, then launch_utils.py start_local_trainers per process.
// 2.2 added PADDLE_RANK_IN_NODE, the device id lists, FLAGS_selected_accelerators and
// PADDLE_DISTRI_BACKEND (args.backend: nccl on a GPU build, gloo otherwise). The world's device
// ids assume every node has this node's devices.
void StartTrainers(Version version, const Node& node, bool gpu_build, const std::vector<std::string>& per_proc,
                   const std::vector<std::vector<std::string>>& endpoints, LegacyNode& out) {
  const auto nproc = static_cast<long>(per_proc.size());
  std::vector<std::string> all;
  std::vector<std::string> world;
  for (const auto& chunk : endpoints) {
    all.insert(all.end(), chunk.begin(), chunk.begin() + nproc);
    for (const auto& devices : per_proc) world.push_back(Join(Split(devices, ','), ":"));
  }
  const auto& mine = endpoints[static_cast<std::size_t>(out.node_rank)];
  out.node_endpoints.assign(mine.begin(), mine.begin() + nproc);
  for (std::size_t i = 0; i < per_proc.size(); ++i) {
    Env env = node.env;
    env.erase("http_proxy");
    env.erase("https_proxy");
    env["PADDLE_WITH_GLOO"] = Lookup(node.env, "PADDLE_WITH_GLOO").value_or("0");
    env["PADDLE_GLOO_RENDEZVOUS"] = "3";
    env["PADDLE_GLOO_FS_PATH"] = "<tmpdir>";
    env["PADDLE_TRAINER_ID"] = std::to_string(static_cast<std::size_t>(out.node_rank) * per_proc.size() + i);
    env["PADDLE_CURRENT_ENDPOINT"] = out.node_endpoints[i];
    env["PADDLE_TRAINERS_NUM"] = std::to_string(all.size());
    env["PADDLE_TRAINER_ENDPOINTS"] = Join(all, ",");
    if (!per_proc[i].empty()) env["FLAGS_selected_gpus"] = per_proc[i];
    if (AtLeast(version, Version::k2_2)) {
      env["PADDLE_DISTRI_BACKEND"] = gpu_build ? "nccl" : "gloo";
      env["PADDLE_RANK_IN_NODE"] = std::to_string(i);
      env["PADDLE_LOCAL_DEVICE_IDS"] = per_proc[i];
      env["PADDLE_WORLD_DEVICE_IDS"] = Join(world, ",");
      if (!per_proc[i].empty()) env["FLAGS_selected_accelerators"] = per_proc[i];
    }
    out.process_env.push_back(std::move(env));
  }
}

}  // namespace

// launch.py launch -> launch_collective (or launch_ps); cloud_utils.py use_paddlecloud and
// get_trainers_num; launch_utils.py get_cluster and start_local_trainers.
LegacyNode ModelLegacyLauncher(Version version, const Node& node, bool gpu_build) {
  LegacyNode out;
  const LegacyArgs args = ParseLegacyArgs(node.args);
  out.ps_mode = PsMode(version, args, gpu_build);
  // elastic/__init__.py enable_elastic (2.2+): a server, a job id and a node count, from args or
  // PADDLE_ELASTIC_SERVER / PADDLE_ELASTIC_JOB_ID / PADDLE_ELASTIC_NP, run launch_elastic.
  const auto given = [&](const char* flag, const char* env) { return args.values.count(flag) > 0 || node.env.count(env) > 0; };
  if (AtLeast(version, Version::k2_2) && !out.ps_mode && given("--elastic_server", "PADDLE_ELASTIC_SERVER") &&
      given("--job_id", "PADDLE_ELASTIC_JOB_ID") && given("--np", "PADDLE_ELASTIC_NP")) {
    out.crash = "the legacy launcher's elastic mode (launch_elastic) is not modelled";
    return out;
  }
  bool paddlecloud = true;
  for (const char* name : {"PADDLE_TRAINERS", "POD_IP", "PADDLE_TRAINER_ID", "TRAINER_PORTS_NUM"}) {
    paddlecloud = paddlecloud && node.env.count(name) > 0;
  }
  const auto trainers_num = PyInt(Lookup(node.env, "PADDLE_TRAINERS_NUM").value_or("1"));
  if (!out.ps_mode && !trainers_num) {
    out.crash = "ValueError: PADDLE_TRAINERS_NUM is not a number";
    return out;
  }
  if (out.ps_mode) {
    // launch_ps: on PaddleCloud direct_start runs the script once with the pod's env unchanged;
    // otherwise ParameterServerLauncher (not modelled).
    out.cloud_mode = paddlecloud;
    if (paddlecloud) out.process_env.push_back(node.env);
    else out.crash = "parameter-server mode off PaddleCloud is not modelled";
    return out;
  }
  out.cloud_mode = paddlecloud && *trainers_num != 1;
  std::vector<std::string> per_proc;
  if (auto crash = DevicesPerProc(node, args, gpu_build, per_proc)) {
    out.crash = crash;
    return out;
  }
  out.nproc = static_cast<int>(per_proc.size());
  std::vector<std::string> ips;
  std::vector<std::vector<std::string>> endpoints;
  out.crash = out.cloud_mode ? CloudCluster(node.env, per_proc.size(), ips, endpoints, out)
                             : ArgsCluster(node, args, per_proc.size(), ips, endpoints, out);
  if (out.crash) return out;
  out.nnodes = static_cast<int>(ips.size());
  // get_cluster: POD_IP must be listed literally (list.index raises), then the pod taken is
  // pods[PADDLE_TRAINER_ID] -- never checked against POD_IP.
  const std::string own = out.cloud_mode ? *Lookup(node.env, "POD_IP") : ips[static_cast<std::size_t>(out.node_rank)];
  std::size_t index = 0;
  while (index < ips.size() && ips[index] != own) ++index;
  if (index == ips.size()) {
    out.crash = "ValueError: POD_IP " + own + " is not in PADDLE_TRAINERS";
    return out;
  }
  out.pod_ip_index = static_cast<int>(index);
  for (const auto& chunk : endpoints) {
    if (chunk.size() < per_proc.size()) {
      out.crash = "AssertionError: current trainer_endpoints size should be greater equal than accelerators size";
      return out;
    }
  }
  if (out.node_rank < 0 || static_cast<std::size_t>(out.node_rank) >= ips.size()) {
    out.crash = "IndexError: PADDLE_TRAINER_ID " + std::to_string(out.node_rank) + " with " + std::to_string(ips.size()) + " nodes";
    return out;
  }
  StartTrainers(version, node, gpu_build, per_proc, endpoints, out);
  return out;
}

JobOutcome SimulateLegacyJob(Version version, const std::vector<Node>& nodes, bool gpu_build) {
  JobOutcome job;
  job.deterministic = true;
  std::set<int> ranks;
  std::optional<std::string> endpoints;
  for (std::size_t n = 0; n < nodes.size(); ++n) {
    LegacyNode node = ModelLegacyLauncher(version, nodes[n], gpu_build);
    const std::string who = "node " + std::to_string(n) + ": ";
    if (node.crash) {
      job.crash = who + *node.crash;
      job.why = *job.crash;
      return job;
    }
    job.node_rank.push_back(node.node_rank);
    if (node.nnodes < 2 && nodes.size() > 1) {
      job.trains_alone = true;
      if (job.why.empty()) job.why = who + "runs its own one-node job on " + Join(node.node_endpoints, ",");
    }
    const auto fail = [&](const std::string& why) {
      job.hangs = true;
      if (job.why.empty()) job.why = who + why;
    };
    if (!ranks.insert(node.node_rank).second && node.nnodes > 1) fail("node rank " + std::to_string(node.node_rank) + " is taken twice");
    if (node.node_rank != node.pod_ip_index) fail("PADDLE_TRAINER_ID " + std::to_string(node.node_rank) + " is not POD_IP's index: it takes another node's endpoints");
    for (const auto& ep : node.node_endpoints) {
      if (node.cloud_mode && detail::HostOf(ep) != *Lookup(nodes[n].env, "POD_IP")) fail("its endpoint " + ep + " is another node's");
    }
    if (!node.process_env.empty()) {
      const std::string mine = node.process_env[0].count("PADDLE_TRAINER_ENDPOINTS") ? node.process_env[0].at("PADDLE_TRAINER_ENDPOINTS") : "";
      if (endpoints && *endpoints != mine) fail("its PADDLE_TRAINER_ENDPOINTS differ from node 0's");
      endpoints = mine;
    }
    for (auto& env : node.process_env) job.process_env.push_back(std::move(env));
  }
  job.deterministic = !job.hangs && !job.trains_alone;
  return job;
}

// PaddleFormers paddleformers/cli/cli.py main (PaddlePaddle/PaddleFormers 12fd5765), GPU pods:
// NNODES (1), MASTER_ADDR (127.0.0.1), MASTER_PORT (8080); it deletes the cluster env below, sets a
// few flags, and runs `python -m paddle.distributed.launch --log_dir $PADDLEFORMERS_DIST_LOG
// --gpus <CUDA_VISIBLE_DEVICES or every GPU> --master ADDR:PORT --nnodes N <its launcher.py> <CLI
// args>` through shlex.split, so an empty GPU list drops out and --gpus takes "--master" as its value.
Node PaddleFormersCli(const Node& node) {
  Node launched = node;
  for (const char* name : {"PADDLE_TRAINERS_NUM", "PADDLE_TRAINER_ID", "PADDLE_WORKERS_IP_PORT_LIST",
                           "PADDLE_TRAINERS", "PADDLE_NUM_GRADIENT_SERVERS", "PADDLE_ELASTIC_JOB_ID",
                           "PADDLE_TRAINER_ENDPOINTS", "DISTRIBUTED_TRAINER_ENDPOINTS", "FLAGS_START_PORT",
                           "PADDLE_ELASTIC_TIMEOUT"}) {
    launched.env.erase(name);
  }
  launched.env["FLAGS_set_to_1d"] = "False";
  launched.env["NVIDIA_TF32_OVERRIDE"] = "0";
  launched.env["FLAGS_dataloader_use_file_descriptor"] = "False";
  std::vector<std::string> every_gpu;
  for (int i = 0; i < node.visible_gpus; ++i) every_gpu.push_back(std::to_string(i));
  const std::string cards = Lookup(node.env, "CUDA_VISIBLE_DEVICES").value_or(Join(every_gpu, ","));
  launched.args = {"--log_dir", Lookup(node.env, "PADDLEFORMERS_DIST_LOG").value_or("paddleformers_dist_log"), "--gpus"};
  if (!cards.empty()) launched.args.push_back(cards);
  for (const std::string& arg : {std::string("--master"),
                                 Lookup(node.env, "MASTER_ADDR").value_or("127.0.0.1") + ":" + Lookup(node.env, "MASTER_PORT").value_or("8080"),
                                 std::string("--nnodes"), Lookup(node.env, "NNODES").value_or("1"),
                                 std::string("paddleformers/cli/launcher.py")}) {
    launched.args.push_back(arg);
  }
  launched.args.insert(launched.args.end(), node.args.begin(), node.args.end());
  return launched;
}

}  // namespace fleet::paddle_model
