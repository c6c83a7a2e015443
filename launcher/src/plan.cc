#include "fleet/launcher/plan.h"

#include <algorithm>
#include <optional>
#include <set>

#include "fleet/base/strings.h"

namespace fleet::launcher {
namespace {

constexpr int kDefaultCollectivePort = 6070;  // every node uses the same list from here
constexpr int kDefaultPsPort = 6170;          // Paddle's default for bare worker IPs

bool IsSet(const std::optional<std::string>& v) { return v && !TrimWhitespace(*v).empty(); }

const std::string* FindEnv(const HostFacts& host, const char* name) {
  auto it = host.env.find(name);
  return it == host.env.end() ? nullptr : &it->second;
}

Result<JobMode> DecideMode(const LaunchOptions& o) {
  const bool ps_flags = o.server_num || o.worker_num || IsSet(o.servers) || IsSet(o.workers);
  const bool heter_flags = IsSet(o.heter_workers) || IsSet(o.heter_worker_num) || IsSet(o.heter_devices);
  JobMode mode = heter_flags ? JobMode::kHeterParameterServer
                             : ps_flags ? JobMode::kParameterServer : JobMode::kCollective;
  if (o.run_mode) {
    auto chosen = ParseJobMode(*o.run_mode);
    if (!chosen) return Error{"--run_mode: " + chosen.error()};
    if (*chosen == JobMode::kCollective && (ps_flags || heter_flags)) {
      return Error{"--run_mode=collective cannot be combined with parameter-server flags "
                   "(--server_num --worker_num --servers --workers --heter_*)"};
    }
    if (*chosen == JobMode::kParameterServer && heter_flags) {
      return Error{"--heter_workers/--heter_worker_num/--heter_devices need --run_mode=ps-heter"};
    }
    mode = *chosen;
  }
  if (mode != JobMode::kCollective) {
    if (o.nproc_per_node) return Error{"--nproc_per_node is a collective flag; a PS job uses --worker_num"};
    if (o.ips != "127.0.0.1") return Error{"--ips is a collective flag; a PS job lists nodes in --servers/--workers"};
  }
  return mode;
}

// This node's index in `nodes`: the only node, else --host, else POD_IP, else a local address.
Result<int> FindThisNode(const std::vector<std::string>& nodes, const LaunchOptions& o,
                         const HostFacts& host, const std::string& list_flags) {
  if (nodes.size() == 1) return 0;
  std::vector<std::string> candidates;
  std::string how;
  if (o.host) {
    candidates = {*o.host};
    how = "--host=" + *o.host;
  } else if (const std::string* pod_ip = FindEnv(host, "POD_IP")) {
    candidates = {*pod_ip};
    how = "POD_IP=" + *pod_ip;
  } else {
    candidates = host.local_addresses;
    how = "addresses " + JoinStrings(host.local_addresses, ",");
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (std::find(candidates.begin(), candidates.end(), nodes[i]) != candidates.end()) {
      return static_cast<int>(i);
    }
  }
  return Error{"this node (" + how + ") is not in " + list_flags + " (" + JoinStrings(nodes, ",") +
               "); pass --host with this node's address from that list"};
}

struct Gpus {
  std::vector<std::string> physical;  // ids as CUDA_VISIBLE_DEVICES names them
  std::vector<int> positions;         // their positions in the visible list (what Paddle selects)
  std::optional<std::string> ignored;  // why --gpus was ignored: the job runs on CPU
};

// --gpus names physical devices; Paddle's processes select by position in CUDA_VISIBLE_DEVICES.
Result<Gpus> ResolveGpus(const LaunchOptions& o, const HostFacts& host) {
  std::vector<std::string> visible;
  const std::string* cvd = FindEnv(host, "CUDA_VISIBLE_DEVICES");
  if (cvd) {
    for (const std::string& id : SplitString(*cvd, ',')) {
      if (!TrimWhitespace(id).empty()) visible.emplace_back(TrimWhitespace(id));
    }
  } else {
    for (int i = 0; i < host.gpu_count; ++i) visible.push_back(std::to_string(i));
  }
  Gpus gpus;
  if (!IsSet(o.gpus)) {
    gpus.physical = visible;
  } else if (visible.empty()) {
    // Paddle's launcher picks its device mode from the machine (get_device_mode): with no GPU it
    // runs on CPU, whatever --gpus says.
    gpus.ignored = "no GPU is visible here (" +
                   std::string(cvd ? "CUDA_VISIBLE_DEVICES is empty" : "none found") + "): --gpus=" + *o.gpus +
                   " is ignored and the job runs on CPU, as Paddle's launcher does";
  } else {
    for (const std::string& raw : SplitString(*o.gpus, ',')) {
      const std::string id(TrimWhitespace(raw));
      if (id.empty()) return Error{"--gpus '" + *o.gpus + "' has an empty entry"};
      if (std::find(gpus.physical.begin(), gpus.physical.end(), id) != gpus.physical.end()) {
        return Error{"--gpus lists GPU " + id + " twice"};
      }
      if (std::find(visible.begin(), visible.end(), id) == visible.end()) {
        if (cvd) return Error{"--gpus: GPU " + id + " is not in CUDA_VISIBLE_DEVICES=" + *cvd};
        return Error{"--gpus: GPU " + id + " is not present (this machine shows " +
                     std::to_string(host.gpu_count) + " GPUs and CUDA_VISIBLE_DEVICES is unset)"};
      }
      gpus.physical.push_back(id);
    }
  }
  for (const std::string& id : gpus.physical) {
    gpus.positions.push_back(static_cast<int>(std::find(visible.begin(), visible.end(), id) - visible.begin()));
  }
  return gpus;
}

Result<GlooSettings> GlooFromEnv(const HostFacts& host) {
  GlooSettings gloo;
  if (const std::string* with = FindEnv(host, "PADDLE_WITH_GLOO")) {  // passed through, as Paddle does
    auto value = ParseNonNegativeInt(TrimWhitespace(*with), "PADDLE_WITH_GLOO");
    if (!value || *value > 2) return Error{"PADDLE_WITH_GLOO must be 0, 1 or 2, got '" + *with + "'"};
    gloo.with_gloo = *value;
  }
  gloo.rendezvous = 3;
  gloo.fs_path = host.gloo_dir;
  return gloo;
}

Result<int> StartPort(const LaunchOptions& o, const HostFacts& host) {
  if (o.start_port) return *o.start_port;
  if (const std::string* flag = FindEnv(host, "FLAGS_START_PORT")) {
    return ParsePort(TrimWhitespace(*flag), "FLAGS_START_PORT");
  }
  return kDefaultCollectivePort;
}

Result<std::vector<int>> PortRange(int start, int count, const std::string& what) {
  if (start + count - 1 > 65535) {
    return Error{what + " " + std::to_string(start) + " leaves no room for " + std::to_string(count) +
                 " ports below 65536"};
  }
  std::vector<int> ports;
  for (int i = 0; i < count; ++i) ports.push_back(start + i);
  return ports;
}

struct Placement {
  Topology topology;
  int node_rank = 0;
};

int TrainersPerNode(const LaunchOptions& o, const Gpus& gpus) {
  return o.nproc_per_node.value_or(gpus.positions.empty() ? 1 : static_cast<int>(gpus.positions.size()));
}

Result<Placement> PlanCollective(const LaunchOptions& o, const HostFacts& host, const NodeRendezvous* rendezvous,
                                 std::vector<std::string>& notes) {
  FLEET_ASSIGN_OR_RETURN(auto gpus, ResolveGpus(o, host));
  if (gpus.ignored) notes.push_back(*gpus.ignored);
  CollectiveLayout layout;
  const int gpu_count = static_cast<int>(gpus.positions.size());
  layout.device_kind = gpu_count > 0 ? DeviceKind::kGpu : DeviceKind::kCpu;
  const int procs = TrainersPerNode(o, gpus);
  if (gpu_count > 0) {
    if (gpu_count % procs != 0) {
      return Error{"--nproc_per_node=" + std::to_string(procs) + " does not divide the " +
                   std::to_string(gpu_count) + " GPUs (" + JoinStrings(gpus.physical, ",") + ")"};
    }
    const int per_proc = gpu_count / procs;
    for (int p = 0; p < procs; ++p) {
      layout.device_groups.emplace_back(gpus.positions.begin() + p * per_proc,
                                        gpus.positions.begin() + (p + 1) * per_proc);
    }
  } else {
    layout.device_groups.assign(static_cast<size_t>(procs), {});
  }
  FLEET_ASSIGN_OR_RETURN(layout.gloo, GlooFromEnv(host));

  Placement placement;
  if (rendezvous) {
    layout.nodes = rendezvous->hosts;
    layout.node_ports = rendezvous->ports;
    placement.node_rank = rendezvous->node_rank;
  } else if (auto cluster = DetectClusterEnv(host.env)) {
    if (!*cluster) return Error{"managed-cluster env: " + cluster->error()};
    const ClusterEnv& c = cluster->value();
    if (procs > c.ports_per_node) {
      return Error{"this node runs " + std::to_string(procs) + " processes but TRAINER_PORTS_NUM is " +
                   std::to_string(c.ports_per_node)};
    }
    if (o.ips != "127.0.0.1") notes.push_back("running in a managed cluster: --ips is ignored, PADDLE_TRAINERS is used");
    layout.nodes = c.nodes;
    for (const auto& chunk : c.node_endpoints) {
      std::vector<int> ports;
      for (int i = 0; i < procs; ++i) ports.push_back(chunk[static_cast<size_t>(i)].port);
      layout.node_ports.push_back(ports);
    }
    placement.node_rank = c.node_rank;
  } else {
    for (const std::string& raw : SplitString(o.ips, ',')) {
      auto node = ParseHost(TrimWhitespace(raw));
      if (!node) return Error{"--ips: " + node.error()};
      if (std::find(layout.nodes.begin(), layout.nodes.end(), *node) != layout.nodes.end()) {
        return Error{"--ips lists node " + *node + " twice"};
      }
      layout.nodes.push_back(*node);
    }
    FLEET_ASSIGN_OR_RETURN(placement.node_rank, FindThisNode(layout.nodes, o, host, "--ips"));
    const bool fixed = o.start_port || FindEnv(host, "FLAGS_START_PORT") || layout.nodes.size() > 1;
    for (size_t n = 0; n < layout.nodes.size(); ++n) {
      std::vector<int> ports;
      if (fixed) {
        FLEET_ASSIGN_OR_RETURN(auto start, StartPort(o, host));
        FLEET_ASSIGN_OR_RETURN(ports, PortRange(start, procs, "start port"));
      } else {
        FLEET_ASSIGN_OR_RETURN(ports, host.free_ports(procs));
      }
      layout.node_ports.push_back(std::move(ports));
    }
  }
  FLEET_ASSIGN_OR_RETURN(auto topology, BuildCollectiveTopology(layout));
  placement.topology = std::move(topology);
  return placement;
}

// `count` endpoints on this machine whose ports are chosen later (port 0).
std::vector<Endpoint> Unassigned(int count) {
  return std::vector<Endpoint>(static_cast<size_t>(count), Endpoint{"127.0.0.1", 0});
}

Result<std::vector<int>> StageCounts(const std::string& text) {
  std::vector<int> counts;
  for (const std::string& item : SplitString(text, ';')) {
    auto n = ParseNonNegativeInt(TrimWhitespace(item), "--heter_worker_num");
    if (!n) return Error{n.error() + " (one count per stage, stages separated by ';')"};
    if (*n < 1) return Error{"--heter_worker_num: every stage needs at least one heter worker"};
    counts.push_back(*n);
  }
  return counts;
}

Status PlanHeterStages(const LaunchOptions& o, PsLayout& layout) {
  if (!IsSet(o.heter_devices)) return Error{"--run_mode=ps-heter needs --heter_devices (e.g. gpu or gpu;cpu)"};
  std::vector<DeviceKind> devices;
  for (const std::string& item : SplitString(*o.heter_devices, ';')) {
    auto kind = ParseDeviceKind(TrimWhitespace(item));
    if (!kind) return Error{"--heter_devices: " + kind.error()};
    devices.push_back(*kind);
  }
  std::vector<int> counts;
  if (IsSet(o.heter_worker_num)) {
    FLEET_ASSIGN_OR_RETURN(counts, StageCounts(*o.heter_worker_num));
  }
  if (IsSet(o.heter_workers)) {
    for (const std::string& stage : SplitString(*o.heter_workers, ';')) {
      auto endpoints = ParseEndpointListPortsOptional(stage);
      if (!endpoints) return Error{"--heter_workers: " + endpoints.error()};
      if (endpoints->empty()) return Error{"--heter_workers has an empty stage"};
      layout.heter_stages.push_back(HeterStage{DeviceKind::kCpu, *endpoints});
    }
    if (!counts.empty() && counts.size() != layout.heter_stages.size()) {
      return Error{"--heter_worker_num gives " + std::to_string(counts.size()) + " stages but --heter_workers " +
                   std::to_string(layout.heter_stages.size())};
    }
    for (size_t s = 0; s < counts.size(); ++s) {
      if (counts[s] != static_cast<int>(layout.heter_stages[s].endpoints.size())) {
        return Error{"heter stage " + std::to_string(s + 2) + ": --heter_worker_num says " +
                     std::to_string(counts[s]) + " but --heter_workers lists " +
                     std::to_string(layout.heter_stages[s].endpoints.size())};
      }
    }
  } else if (!counts.empty()) {
    for (int count : counts) layout.heter_stages.push_back(HeterStage{DeviceKind::kCpu, Unassigned(count)});
  } else {
    return Error{"--run_mode=ps-heter needs --heter_workers or --heter_worker_num"};
  }
  if (devices.size() != layout.heter_stages.size()) {
    return Error{"--heter_devices gives " + std::to_string(devices.size()) + " devices for " +
                 std::to_string(layout.heter_stages.size()) + " heter stages (one per stage, ';'-separated)"};
  }
  for (size_t s = 0; s < devices.size(); ++s) layout.heter_stages[s].device = devices[s];
  return OkStatus();
}

// Chooses every port still 0 (--server_num/--worker_num/--heter_worker_num processes and bare heter
// IPs) and the gloo HTTP port. On one machine: free ports, all from ONE request so that no two can
// coincide. On several nodes every node must compute the same ports without talking to the others:
// Paddle's fixed 6170 + the process's position in the job (servers, trainers, heter trainers), and
// the HTTP port after them, skipping ports taken on server 0's host.
Result<int> AssignPorts(PsLayout& layout, const LaunchOptions& o, const HostFacts& host) {
  std::vector<Endpoint*> all;
  for (Endpoint& e : layout.servers) all.push_back(&e);
  for (Endpoint& e : layout.trainers) all.push_back(&e);
  for (HeterStage& stage : layout.heter_stages) {
    for (Endpoint& e : stage.endpoints) all.push_back(&e);
  }
  std::set<std::string> hosts;
  for (const Endpoint* e : all) hosts.insert(e->host);
  const bool local = hosts.size() == 1;
  const std::string& http_host = layout.servers.front().host;
  auto taken_on_http_host = [&](int port) {
    return std::any_of(all.begin(), all.end(), [&](const Endpoint* e) { return e->host == http_host && e->port == port; });
  };

  const int missing = static_cast<int>(std::count_if(all.begin(), all.end(), [](const Endpoint* e) { return e->port == 0; }));
  const int wanted = missing + (o.http_port ? 0 : 1);
  std::vector<int> free;
  if (local && wanted > 0) {
    FLEET_ASSIGN_OR_RETURN(free, host.free_ports(wanted));
  }
  size_t next_free = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all[i]->port != 0) continue;
    all[i]->port = local ? free[next_free++] : kDefaultPsPort + static_cast<int>(i);
    if (all[i]->port > 65535) return Error{"default ports run past 65535; give ports explicitly"};
  }
  int http_port = 0;
  if (o.http_port) {
    http_port = *o.http_port;
    if (taken_on_http_host(http_port)) {
      return Error{"--http_port=" + std::to_string(http_port) + " is also a process endpoint on " + http_host};
    }
  } else if (local) {
    http_port = free[next_free];
  } else {
    http_port = kDefaultPsPort + static_cast<int>(all.size());
    while (taken_on_http_host(http_port)) ++http_port;
    if (http_port > 65535) return Error{"no default port left for the gloo HTTP store; pass --http_port"};
  }
  return http_port;
}

Result<Placement> PlanPs(const LaunchOptions& o, const HostFacts& host, JobMode mode,
                         std::vector<std::string>& notes) {
  PsLayout layout;
  // Servers: an ip:port list, or N local servers.
  if (IsSet(o.servers)) {
    auto servers = ParseEndpointList(*o.servers);
    if (!servers) return Error{"--servers: " + servers.error()};
    if (o.server_num && *o.server_num != static_cast<int>(servers->size())) {
      return Error{"--server_num=" + std::to_string(*o.server_num) + " but --servers lists " +
                   std::to_string(servers->size()) + " servers"};
    }
    layout.servers = *servers;
  } else if (o.server_num) {
    layout.servers = Unassigned(*o.server_num);
  } else {
    return Error{"a parameter-server job needs --server_num or --servers"};
  }
  // Trainers: the same, but a list may give bare IPs.
  if (IsSet(o.workers)) {
    auto workers = ParseEndpointListPortsOptional(*o.workers);
    if (!workers) return Error{"--workers: " + workers.error()};
    if (o.worker_num && *o.worker_num != static_cast<int>(workers->size())) {
      return Error{"--worker_num=" + std::to_string(*o.worker_num) + " but --workers lists " +
                   std::to_string(workers->size()) + " workers"};
    }
    layout.trainers = *workers;
    // Paddle gives bare worker IPs fixed ports after the servers', even on one machine.
    for (size_t i = 0; i < layout.trainers.size(); ++i) {
      if (layout.trainers[i].port != 0) continue;
      layout.trainers[i].port = kDefaultPsPort + static_cast<int>(layout.servers.size() + i);
      if (layout.trainers[i].port > 65535) return Error{"--workers: default ports run past 65535"};
    }
  } else if (o.worker_num) {
    layout.trainers = Unassigned(*o.worker_num);
  } else {
    return Error{"a parameter-server job needs --worker_num or --workers"};
  }
  if (mode == JobMode::kHeterParameterServer) {
    FLEET_RETURN_IF_ERROR(PlanHeterStages(o, layout));
  }
  FLEET_ASSIGN_OR_RETURN(auto http_port, AssignPorts(layout, o, host));

  // Devices: trainers use GPUs only when --gpus is given; gpu/xpu heter stages always do.
  FLEET_ASSIGN_OR_RETURN(auto gpus, ResolveGpus(o, host));
  layout.gpu_pool = gpus.physical;
  if (gpus.ignored) notes.push_back(*gpus.ignored);
  else if (IsSet(o.gpus)) layout.trainer_device = DeviceKind::kGpu;
  if (const std::string* xpus = FindEnv(host, "XPU_VISIBLE_DEVICES")) {
    for (const std::string& id : SplitString(*xpus, ',')) {
      if (!TrimWhitespace(id).empty()) layout.xpu_pool.emplace_back(TrimWhitespace(id));
    }
  }
  FLEET_ASSIGN_OR_RETURN(layout.gloo, GlooFromEnv(host));
  layout.gloo.http_endpoint = Endpoint{layout.servers.front().host, http_port}.ToString();

  FLEET_ASSIGN_OR_RETURN(auto topology, BuildPsTopology(layout));
  Placement placement;
  placement.topology = std::move(topology);
  if (placement.topology.nodes.size() > 1) {
    FLEET_ASSIGN_OR_RETURN(placement.node_rank,
                           FindThisNode(placement.topology.nodes, o, host, "--servers/--workers/--heter_workers"));
  }
  return placement;
}

std::string LogPrefix(Role role) {
  switch (role) {
    case Role::kTrainer: return "workerlog.";
    case Role::kServer: return "serverlog.";
    case Role::kHeterTrainer: return "heterlog.";
  }
  return "workerlog.";
}

std::string EndpointsSection(const std::string& name, const std::vector<Endpoint>& endpoints) {
  std::string out = name + ": \n";
  for (const Endpoint& e : endpoints) out += e.ToString() + "\n";
  return out;
}

}  // namespace

std::vector<std::string> ScriptCommand(const std::string& program, const LaunchOptions& options) {
  std::vector<std::string> argv;
  const std::string& script = options.training_script;
  if (script.size() > 3 && script.compare(script.size() - 3, 3, ".py") == 0) {
    argv = {"python3", "-u", program};
  } else {
    argv = {program};
  }
  argv.insert(argv.end(), options.training_script_args.begin(), options.training_script_args.end());
  return argv;
}

Result<int> LocalTrainerCount(const LaunchOptions& options, const HostFacts& host) {
  FLEET_ASSIGN_OR_RETURN(auto gpus, ResolveGpus(options, host));
  return TrainersPerNode(options, gpus);
}

const std::vector<std::string>& ClusterInputNames() {
  static const std::vector<std::string> names = {"PADDLE_TRAINERS", "PADDLE_TRAINER_ID", "TRAINER_PORTS_NUM",
                                                 "PADDLE_TRAINERS_NUM", "PADDLE_TRAINER_ENDPOINTS",
                                                 "DISTRIBUTED_TRAINER_ENDPOINTS", "PADDLE_PORT"};
  return names;
}

namespace {

// The role the platform already planned this process as, when it did: fleetrun then runs the
// script once with the platform's env, and the note says why.
struct PlannedByPlatform {
  Role role;
  std::string note;
};

std::optional<PlannedByPlatform> PlannedByThePlatform(const HostFacts& host, JobMode mode, bool rendezvous) {
  if (rendezvous) return std::nullopt;
  // Paddle's PS path on a managed cluster: the platform set the role env already.
  const bool cluster_inputs = FindEnv(host, "PADDLE_TRAINERS") && FindEnv(host, "POD_IP") &&
                              FindEnv(host, "PADDLE_TRAINER_ID") && FindEnv(host, "TRAINER_PORTS_NUM");
  if (mode == JobMode::kParameterServer && cluster_inputs && FindEnv(host, "TRAINING_ROLE")) {
    const std::string* role = FindEnv(host, "TRAINING_ROLE");
    return PlannedByPlatform{*role == "PSERVER" ? Role::kServer
                             : *role == "HETER_TRAINER" ? Role::kHeterTrainer : Role::kTrainer,
                             "managed parameter-server cluster: running the script once with the platform's env"};
  }
  // A collective trainer's own env from the platform (a FleetJob pod with processesPerPod 1 runs
  // its command with rank R of N's env), without the cluster inputs a node's fleetrun plans from:
  // planned as a one-node job on 127.0.0.1, every pod would train alone, as rank 0 of 1. The
  // platform planned this process already: it runs once with that env.
  const std::string* trainers = FindEnv(host, "PADDLE_TRAINERS_NUM");
  if (mode == JobMode::kCollective && !cluster_inputs && trainers && *trainers != "1" &&
      FindEnv(host, "PADDLE_TRAINER_ID") && FindEnv(host, "PADDLE_TRAINER_ENDPOINTS") &&
      FindEnv(host, "PADDLE_CURRENT_ENDPOINT")) {
    return PlannedByPlatform{Role::kTrainer, "managed collective cluster: the platform set this trainer's env (rank " +
                                                 *FindEnv(host, "PADDLE_TRAINER_ID") + " of " + *trainers +
                                                 "): running the script once with it"};
  }
  return std::nullopt;
}

// Runs the script once, as the platform planned it (fleetrun plans nothing).
LaunchPlan DirectStart(LaunchPlan plan, JobMode mode, const HostFacts& host, std::vector<std::string> command,
                       PlannedByPlatform planned) {
  plan.direct_start = true;
  plan.topology.mode = mode;
  LocalProcess only;
  only.argv = std::move(command);
  only.process.role = planned.role;
  if (const std::string* id = FindEnv(host, "PADDLE_TRAINER_ID")) {
    if (auto rank = ParseNonNegativeInt(*id, "PADDLE_TRAINER_ID")) only.process.rank = *rank;
  }
  only.log_file = LogPrefix(only.process.role) + "0";
  only.echo_to_terminal = true;
  plan.processes.push_back(std::move(only));
  plan.notes.push_back(std::move(planned.note));
  return plan;
}

// This node's processes of the planned topology, each with its rendered env.
void PlanLocalProcesses(const std::vector<std::string>& command, const NodeRendezvous* rendezvous, LaunchPlan& plan) {
  const EnvRenderer renderer(plan.topology);
  for (Role role : {Role::kServer, Role::kTrainer, Role::kHeterTrainer}) {
    for (const Process* p : plan.topology.OfRole(role)) {
      if (p->node != plan.node_rank) continue;
      LocalProcess local;
      local.process = *p;
      local.env = renderer.Render(*p);
      if (rendezvous) local.env["PADDLE_MASTER"] = rendezvous->collective_master.ToString();
      local.argv = command;
      local.log_file = LogPrefix(role) + std::to_string(p->local_rank);
      local.echo_to_terminal = role == Role::kTrainer && p->local_rank == 0;
      plan.processes.push_back(std::move(local));
    }
  }
}

std::string EndpointsLog(const Topology& topology, JobMode mode) {
  std::string log = EndpointsSection("PADDLE_TRAINER_ENDPOINTS", topology.EndpointsOf(Role::kTrainer));
  if (mode != JobMode::kCollective) {
    log += EndpointsSection("PADDLE_PSERVERS_IP_PORT_LIST", topology.EndpointsOf(Role::kServer));
  }
  if (mode == JobMode::kHeterParameterServer) {
    log += EndpointsSection("PADDLE_ALL_HETER_TRAINER_IP_PORT_LIST", topology.EndpointsOf(Role::kHeterTrainer));
  }
  return log;
}

}  // namespace

Result<LaunchPlan> PlanLaunch(const LaunchOptions& options, const HostFacts& host, const NodeRendezvous* rendezvous) {
  FLEET_ASSIGN_OR_RETURN(auto mode, DecideMode(options));
  if (rendezvous && mode != JobMode::kCollective) {
    return Error{"--master ip:port runs collective jobs; a parameter-server job lists its nodes in --servers/--trainers"};
  }
  FLEET_ASSIGN_OR_RETURN(auto program, host.resolve_program(options.training_script));

  LaunchPlan plan;
  plan.log_dir = options.log_dir;
  std::vector<std::string> command = ScriptCommand(program, options);
  if (auto planned = PlannedByThePlatform(host, mode, rendezvous != nullptr)) {
    return DirectStart(std::move(plan), mode, host, std::move(command), std::move(*planned));
  }
  FLEET_ASSIGN_OR_RETURN(auto placement, mode == JobMode::kCollective ? PlanCollective(options, host, rendezvous, plan.notes)
                                                                       : PlanPs(options, host, mode, plan.notes));
  plan.topology = std::move(placement.topology);
  plan.node_rank = placement.node_rank;
  PlanLocalProcesses(command, rendezvous, plan);
  if (plan.processes.empty()) {
    return Error{"no process of this job is placed on this node"};
  }
  plan.endpoints_log = EndpointsLog(plan.topology, mode);
  return plan;
}

}  // namespace fleet::launcher
