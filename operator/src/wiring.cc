#include "fleet/operator/wiring.h"

#include <algorithm>
#include <set>

#include "fleet/base/strings.h"
#include "fleet/runtime/elastic_contract.h"

namespace fleet::op {
namespace {

// What may travel as environment variables. Linux refuses an exec whose single "NAME=value"
// exceeds MAX_ARG_STRLEN (128 KiB), or whose env and arguments together exceed ARG_MAX (a quarter
// of the stack limit: 2 MiB with the usual 8 MiB). A list past kMaxEnvList, and a role's largest
// lists while its lists together pass kMaxEnvLists (most of ARG_MAX stays the user's), travel as
// files of the mounted ConfigMap instead, for the env loader to put into Python's os.environ.
constexpr size_t kMaxEnvList = 96 * 1024;
constexpr size_t kMaxEnvLists = 384 * 1024;
// A value the whole job shares and longer than this (PADDLE_WORLD_DEVICE_IDS: an entry per
// process) is published once in the ConfigMap rather than copied into every pod: inline, each of
// 10,000 pods would carry 10 KiB of it, which the API server stores and every watcher receives
// with each of the pod's updates. A reference to a key costs ~100 bytes.
constexpr size_t kMaxInlineValue = 512;
// A ConfigMap (like any object) is limited to about 1 MiB by etcd.
constexpr size_t kMaxConfigMapBytes = 1000 * 1000;

std::string Symbol(int ordinal) { return "@" + std::to_string(ordinal) + "@"; }

// Splits a value into literals and "@<ordinal>@" holes.
HostTemplate ParseTemplate(const std::string& value) {
  HostTemplate t;
  std::string literal;
  size_t i = 0;
  while (i < value.size()) {
    if (value[i] == '@') {
      size_t end = value.find('@', i + 1);
      if (end != std::string::npos && end > i + 1 &&
          std::all_of(value.begin() + static_cast<long>(i) + 1, value.begin() + static_cast<long>(end),
                      [](char c) { return c >= '0' && c <= '9'; })) {
        t.literals.push_back(literal);
        literal.clear();
        t.holes.push_back(std::stoi(value.substr(i + 1, end - i - 1)));
        i = end + 1;
        continue;
      }
    }
    literal += value[i++];
  }
  t.literals.push_back(literal);
  return t;
}

bool NamesOthers(const HostTemplate& t, int self) {
  return std::any_of(t.holes.begin(), t.holes.end(), [self](int h) { return h != self; });
}

// The member of a pod's status that holds its address: on the node's network, the node's.
const char* PodAddressField(Network network) { return network == Network::kHostNetwork ? "hostIP" : "podIP"; }

int GlooLevel(Gloo gloo) {
  switch (gloo) {
    case Gloo::kNone: return 0;
    case Gloo::kWorkers: return 1;
    case Gloo::kAll: return 2;
  }
  return 0;
}

// The parameter-server job's layout: its pods' endpoints by role, with symbolic hosts.
PsLayout PsLayoutOf(const FleetJob& job, const std::vector<PodSlot>& slots, int host_port_base) {
  auto endpoint = [&](const PodSlot& slot) { return Endpoint{Symbol(slot.ordinal), PodPort(job, slot, host_port_base)}; };
  PsLayout layout;
  for (const PodSlot& slot : slots) {
    switch (slot.role->kind) {
      case RoleKind::kServer: layout.servers.push_back(endpoint(slot)); break;
      case RoleKind::kWorker: layout.trainers.push_back(endpoint(slot)); break;
      case RoleKind::kHeter:
        if (layout.heter_stages.size() < static_cast<size_t>(slot.role->stage - 1)) {
          layout.heter_stages.push_back(HeterStage{slot.role->device, {}});
        }
        layout.heter_stages.back().endpoints.push_back(endpoint(slot));
        break;
    }
  }
  // A pod owns its devices: a GPU trainer sees its GPU as device 0, nothing to remap.
  if (TemplateGpus(job.spec.Find(RoleKind::kWorker)->template_) > 0) layout.trainer_device = DeviceKind::kGpu;
  layout.gloo.with_gloo = GlooLevel(job.spec.gloo);
  layout.gloo.http_endpoint = Endpoint{layout.servers.front().host, GlooHttpPort(job, host_port_base)}.ToString();
  return layout;
}

// The node count an elastic pod's launcher is given: the worker replicas the spec allows.
NpRange ReplicaRange(const ElasticSpec& elastic) { return {elastic.min_replicas, elastic.max_replicas}; }

}  // namespace

std::string HostTemplate::Fill(const std::vector<std::string>& hosts) const {
  std::string out = literals.front();
  for (size_t i = 0; i < holes.size(); ++i) {
    out += hosts.at(static_cast<size_t>(holes[i]));
    out += literals[i + 1];
  }
  return out;
}

std::string PodName(const FleetJob& job, const RoleSpec& role, int index) {
  return job.name + "-" + role.name + "-" + std::to_string(index);
}

std::vector<PodSlot> PodSlots(const FleetJob& job) {
  std::vector<PodSlot> slots;
  for (const RoleSpec& role : job.spec.roles) {
    for (int i = 0; i < role.replicas; ++i) {
      slots.push_back(PodSlot{&role, i, static_cast<int>(slots.size()), PodName(job, role, i)});
    }
  }
  return slots;
}

SlotRanks RanksOf(const FleetJob& job, const PodSlot& slot) {
  if (job.spec.mode != JobMode::kCollective) return {slot.index, 1};
  return {slot.index * job.spec.processes_per_pod, job.spec.processes_per_pod};
}

int PodPort(const FleetJob& job, const PodSlot& slot, int host_port_base) {
  if (job.spec.network != Network::kHostNetwork) return job.spec.port;
  return host_port_base + slot.ordinal * (job.spec.processes_per_pod + 1);
}

int SidecarPort(const FleetJob& job, const PodSlot& slot, int host_port_base) {
  if (job.spec.network != Network::kHostNetwork) return job.spec.sidecar.metrics_port;
  return PodPort(job, slot, host_port_base) + job.spec.processes_per_pod;
}

int GlooHttpPort(const FleetJob& job, int host_port_base) {
  if (job.spec.network != Network::kHostNetwork) return job.spec.port + job.spec.processes_per_pod;
  return host_port_base + job.spec.TotalPods() * (job.spec.processes_per_pod + 1);
}

int HostPortRangeSize(const FleetJob& job) { return job.spec.TotalPods() * (job.spec.processes_per_pod + 1) + 1; }

std::string ServiceHost(const FleetJob& job, const std::string& pod, const std::string& cluster_domain) {
  return pod + "." + job.name + "." + job.ns + ".svc." + cluster_domain;
}

std::string SlotHost(const FleetJob& job, const PodSlot& slot, const std::string& pod_address,
                     const std::string& cluster_domain) {
  if (job.spec.network == Network::kService) return ServiceHost(job, slot.name, cluster_domain);
  return pod_address;
}

EnvMap RunEnv(const FleetJob& job, const RoleSpec& role, int run) {
  const std::string job_id = job.name + "-" + std::to_string(run) + "-" + job.uid;
  switch (DiscoveryOf(job.spec, role)) {
    case Discovery::kEtcdLegacy: {
      const ElasticSpec& elastic = *job.spec.elastic;
      return {{kElasticServerEnv, elastic.etcd_endpoint},
              {kElasticJobIdEnv, job_id},
              {kElasticNpEnv, FormatNpRange(ReplicaRange(elastic))},
              {kElasticTimeoutEnv, std::to_string(elastic.timeout_seconds)},
              {"FLAGS_START_PORT", std::to_string(job.spec.port)}};
    }
    case Discovery::kEtcdLaunch:
    case Discovery::kLaunchMaster:
    case Discovery::kPsLaunchLists:
      return {{"PADDLE_JOB_ID", job_id}};
    case Discovery::kProcessEnv:
    case Discovery::kClusterEnv:
      break;
  }
  return {};
}

Result<JobWiring> JobWiring::Build(const FleetJob& job, int host_port_base, const std::string& cluster_domain) {
  JobWiring w;
  w.job_ = &job;
  w.host_port_base_ = host_port_base;
  w.cluster_domain_ = cluster_domain;
  w.slots_ = PodSlots(job);
  FLEET_RETURN_IF_ERROR(w.BuildTopology());
  w.ShareLists();
  FLEET_ASSIGN_OR_RETURN(const auto key_bytes, w.ListSizes());
  FLEET_RETURN_IF_ERROR(w.ChooseFiles(key_bytes));
  return w;
}

// Only pods given every process's lists need the job's topology; launchers that find their peers
// themselves (a master, etcd, PaddleCloud's node lists) are given less (SymbolicEnv).
Status JobWiring::BuildTopology() {
  const FleetJobSpec& spec = job_->spec;
  if (spec.mode != JobMode::kCollective) {
    FLEET_ASSIGN_OR_RETURN(auto topology, BuildPsTopology(PsLayoutOf(*job_, slots_, host_port_base_)));
    topology_ = std::make_shared<Topology>(std::move(topology));
  } else if (DiscoveryOf(spec, *spec.Find(RoleKind::kWorker)) == Discovery::kProcessEnv) {
    CollectiveLayout layout;
    for (const PodSlot& slot : slots_) {
      layout.nodes.push_back(Symbol(slot.ordinal));
      layout.node_ports.push_back({op::PodPort(*job_, slot, host_port_base_)});
    }
    const int gpus = TemplateGpus(spec.roles.front().template_);
    layout.device_kind = gpus > 0 ? DeviceKind::kGpu : DeviceKind::kCpu;
    std::vector<int> devices;
    for (int g = 0; g < gpus; ++g) devices.push_back(g);
    layout.device_groups = {devices};
    layout.gloo.with_gloo = GlooLevel(spec.gloo);
    FLEET_ASSIGN_OR_RETURN(auto topology, BuildCollectiveTopology(layout));
    topology_ = std::make_shared<Topology>(std::move(topology));
  }
  if (!topology_) return OkStatus();
  renderer_ = std::make_shared<EnvRenderer>(*topology_);
  process_of_slot_.assign(slots_.size(), -1);
  for (size_t p = 0; p < topology_->processes.size(); ++p) {
    const HostTemplate t = ParseTemplate(topology_->processes[p].endpoint.host);
    process_of_slot_[static_cast<size_t>(t.holes.front())] = static_cast<int>(p);
  }
  return OkStatus();
}

// The shared variables: those naming another pod, in the first or the last pod of a role (the
// first server names only itself in PADDLE_GLOO_HTTP_ENDPOINT, the others name it). A key per
// variable, qualified by the role where roles see different values (heter previous/next lists).
void JobWiring::ShareLists() {
  std::map<std::string, std::map<std::string, std::string>> by_var;  // var -> role -> value
  for (const RoleSpec& role : job_->spec.roles) {
    std::vector<int> samples;
    for (const PodSlot& slot : slots_) {
      if (slot.role != &role) continue;
      if (samples.size() < 2) samples.push_back(slot.ordinal);
      else samples.back() = slot.ordinal;
    }
    std::set<std::string> varies;   // long hole-free values the samples disagree on: each pod's own
    for (int ordinal : samples) {
      for (const auto& [var, value] : SymbolicEnv(ordinal)) {
        const HostTemplate t = ParseTemplate(value);
        if (NamesOthers(t, ordinal)) {
          by_var[var][role.name] = value;
        } else if (t.holes.empty() && value.size() > kMaxInlineValue) {
          // The same in the role's first and last pod: job-wide (see kMaxInlineValue).
          auto [it, added] = by_var[var].emplace(role.name, value);
          if (!added && it->second != value) varies.insert(var);
        }
      }
    }
    for (const std::string& var : varies) {
      by_var[var].erase(role.name);
      if (by_var[var].empty()) by_var.erase(var);
    }
  }
  for (const auto& [var, per_role] : by_var) {
    // A named copy of what the lambda reads: C++17 lambdas cannot capture structured bindings.
    const std::string& first = per_role.begin()->second;
    const bool same = std::all_of(per_role.begin(), per_role.end(),
                                  [&first](const auto& rv) { return rv.second == first; });
    for (const auto& [role, value] : per_role) {
      const std::string key = same ? var : var + "." + role;
      key_of_[{role, var}] = key;
      templates_.emplace(key, ParseTemplate(value));
    }
  }
}

// Each key's size, with every pod's host at its longest (Service mode: its DNS name, known now;
// else a dotted IPv4 address at its longest); an error past a ConfigMap's 1 MiB.
Result<std::map<std::string, size_t>> JobWiring::ListSizes() const {
  std::vector<size_t> host_bytes;
  for (const PodSlot& slot : slots_) {
    host_bytes.push_back(job_->spec.network == Network::kService ? ServiceHost(*job_, slot.name, cluster_domain_).size()
                                                                 : std::string("255.255.255.255").size());
  }
  std::map<std::string, size_t> key_bytes;
  size_t total = 0;
  for (const auto& [key, t] : templates_) {
    size_t bytes = 0;
    for (int hole : t.holes) bytes += host_bytes[static_cast<size_t>(hole)];
    for (const std::string& l : t.literals) bytes += l.size();
    key_bytes[key] = bytes;
    total += key.size() + bytes;
  }
  if (total > kMaxConfigMapBytes) {
    return Error{"spec: the endpoint lists would take about " + std::to_string(total / 1024) +
                 " KiB, over the 1 MiB limit of a ConfigMap; use fewer pods"};
  }
  return key_bytes;
}

// Per role, largest first: a list over kMaxEnvList, or while the role's lists pass kMaxEnvLists,
// travels as a file. Only Python processes read files (through the env loader): pods whose entry
// point is fleetrun or fleet-ps-server cannot have any.
Status JobWiring::ChooseFiles(const std::map<std::string, size_t>& key_bytes) {
  for (const RoleSpec& role : job_->spec.roles) {
    std::vector<std::pair<size_t, std::string>> lists;   // (bytes, variable)
    size_t total = 0;
    for (const auto& [role_var, key] : key_of_) {
      if (role_var.first != role.name) continue;
      lists.emplace_back(key_bytes.at(key), role_var.second);
      total += lists.back().first;
    }
    std::sort(lists.rbegin(), lists.rend());
    for (const auto& [bytes, var] : lists) {
      if (bytes <= kMaxEnvList && total <= kMaxEnvLists) break;
      total -= bytes;
      files_.insert({role.name, var});
      size_t& largest = file_variables_[var];
      largest = std::max(largest, bytes);
      const char* reader = !topology_ ? "pods running fleetrun (spec.processesPerPod > 1) read it from the env"
                           : job_->spec.runtime == Runtime::kFleet && role.kind == RoleKind::kServer
                               ? "fleet-ps-server (spec.runtime fleet) reads it from the env"
                               : nullptr;
      if (reader) {
        return Error{"spec: the endpoint list " + var + " would be about " + std::to_string(bytes / 1024) +
                     " KiB, too long to travel as an environment variable (Linux: 128 KiB for one, about 2 MiB for "
                     "all), and " + reader +
                     "; use fewer pods"};
      }
    }
  }
  return OkStatus();
}

EnvMap JobWiring::SymbolicEnv(int ordinal) const {
  const PodSlot& slot = slots_.at(static_cast<size_t>(ordinal));
  switch (DiscoveryOf(job_->spec, *slot.role)) {
    case Discovery::kEtcdLegacy: return {};   // all of it changes per run: RunEnv
    case Discovery::kEtcdLaunch:
    case Discovery::kLaunchMaster: return LaunchEnv(slot);
    case Discovery::kClusterEnv: return ClusterEnvOf(slot);
    case Discovery::kPsLaunchLists: return PsLaunchEnv(slot);
    case Discovery::kProcessEnv: break;
  }
  return ProcessEnv(slot);
}

EnvMap JobWiring::ProcessEnv(const PodSlot& slot) const {
  const size_t process = static_cast<size_t>(process_of_slot_.at(static_cast<size_t>(slot.ordinal)));
  return renderer_->Render(topology_->processes.at(process));
}

// A legacy launcher in the pod: PaddleCloud's node-level inputs, one port per process it starts.
EnvMap JobWiring::ClusterEnvOf(const PodSlot& slot) const {
  ClusterEnv cluster;
  cluster.ports_per_node = job_->spec.processes_per_pod;
  for (const PodSlot& s : slots_) {
    cluster.nodes.push_back(Symbol(s.ordinal));
    std::vector<Endpoint> chunk;
    for (int i = 0; i < cluster.ports_per_node; ++i) {
      chunk.push_back(Endpoint{Symbol(s.ordinal), op::PodPort(*job_, s, host_port_base_) + i});
    }
    cluster.node_endpoints.push_back(std::move(chunk));
  }
  cluster.node_rank = slot.index;
  cluster.pod_ip = Symbol(slot.ordinal);
  return RenderClusterEnv(cluster);
}

// Paddle 2.3+'s launcher (and PaddleFormers' CLI over it) builds the lists itself, in a rendezvous
// at its master: it is given the master, the node count and its node rank, never lists, which
// would override the master (docs/launchers.md). Env beats the launcher's flags in Paddle, so what
// is set here holds whatever the command line says.
EnvMap JobWiring::LaunchEnv(const PodSlot& slot) const {
  const FleetJobSpec& spec = job_->spec;
  std::string master_host;
  std::string master_port;
  std::string nnodes;
  EnvMap env;
  if (spec.elastic) {
    // Paddle's etcd master: every node registers there; the node count is a range.
    const std::string master = PaddleEtcdMaster(spec.elastic->etcd_endpoint);
    const size_t colon = master.rfind(':');
    master_host = master.substr(0, colon);
    master_port = master.substr(colon + 1);
    const ElasticSpec& e = *spec.elastic;
    nnodes = FormatNpShort(ReplicaRange(e));
    // Paddle 2.3 keeps this env value a string and fails comparing it: its pods pass
    // --elastic_timeout themselves.
    if (!spec.paddle_version || !spec.paddle_version->Before(2, 4)) {
      env[kElasticTimeoutEnv] = std::to_string(e.timeout_seconds);
    }
  } else {
    // The master is pod 0's, at its own address: the launcher starts the master only on the pod
    // whose address (POD_IP) is the master's host, so pod 0 is given $(POD_IP) and sees itself.
    const PodSlot& first = slots_.front();
    master_host = Symbol(first.ordinal);
    master_port = std::to_string(op::PodPort(*job_, first, host_port_base_));
    nnodes = std::to_string(slot.role->replicas);
    // Node ranks are the pods' indexes, on every version: without one they follow random names.
    // Paddle 2.3 fails on PADDLE_RANK in the env: its pods pass --rank=$(FLEET_NODE_RANK).
    env["FLEET_NODE_RANK"] = std::to_string(slot.index);
    if (!spec.paddle_version || !spec.paddle_version->Before(2, 4)) env["PADDLE_RANK"] = std::to_string(slot.index);
  }
  env["PADDLE_MASTER"] = master_host + ":" + master_port;
  env["PADDLE_NNODES"] = nnodes;
  env["PADDLE_NPROC_PER_NODE"] = std::to_string(spec.processes_per_pod);
  env["PADDLE_LOG_DIR"] = kLauncherLogDir;
  if (slot.role->launcher == Launcher::kPaddleFormers) {
    // paddleformers-cli runs `paddle.distributed.launch --master $MASTER_ADDR:$MASTER_PORT --nnodes $NNODES`.
    env["MASTER_ADDR"] = master_host;
    env["MASTER_PORT"] = master_port;
    env["NNODES"] = nnodes;
  }
  return env;
}

// Paddle 2.3+'s launcher in PS mode: a pod runs the servers and trainers of the lists whose host
// is its own (POD_IP), ranked by their place in the lists.
EnvMap JobWiring::PsLaunchEnv(const PodSlot& slot) const {
  EnvMap process = ProcessEnv(slot);
  EnvMap env = {{"PADDLE_RUN_MODE", "ps"},
                {"PADDLE_SERVERS_ENDPOINTS", process["PADDLE_PSERVERS_IP_PORT_LIST"]},
                {"PADDLE_TRAINERS_ENDPOINTS", process["PADDLE_TRAINER_ENDPOINTS"]},
                {"PADDLE_GLOO_PORT", std::to_string(GlooHttpPort(*job_, host_port_base_))},
                {"PADDLE_LOG_DIR", kLauncherLogDir}};
  if (job_->spec.gloo != Gloo::kNone) env["PADDLE_WITH_GLOO"] = std::to_string(GlooLevel(job_->spec.gloo));
  return env;
}

Json JobWiring::PodEnv(const PodSlot& slot, const std::string& config_map) const {
  Json env = Json::array();
  // POD_IP comes first: later values refer to it as $(POD_IP). It is the pod's own host.
  if (job_->spec.network == Network::kService) {
    env.push_back({{"name", "POD_IP"}, {"value", ServiceHost(*job_, slot.name, cluster_domain_)}});
  } else {
    const std::string field = std::string("status.") + PodAddressField(job_->spec.network);
    env.push_back({{"name", "POD_IP"}, {"valueFrom", {{"fieldRef", {{"fieldPath", field}}}}}});
  }
  // The job-wide values (the lists: O(pods) long) are only looked up, never parsed: a pod costs
  // the same in a job of 10 pods as in one of 10,000.
  for (const auto& [var, value] : SymbolicEnv(slot.ordinal)) {
    if (var == "POD_IP") continue;
    if (files_.count({slot.role->name, var})) continue;   // EnvFiles names it
    auto shared = key_of_.find({slot.role->name, var});
    if (shared != key_of_.end()) {
      env.push_back({{"name", var},
                     {"valueFrom", {{"configMapKeyRef", {{"name", config_map}, {"key", shared->second}}}}}});
      continue;
    }
    // The pod's own value names no other pod (Build shares every variable that does): its holes
    // are this pod, whose host the kubelet puts in POD_IP.
    const HostTemplate t = ParseTemplate(value);
    std::string own = t.literals.front();
    for (size_t i = 1; i < t.literals.size(); ++i) own += "$(POD_IP)" + t.literals[i];
    env.push_back({{"name", var}, {"value", std::move(own)}});
  }
  return env;
}

std::string JobWiring::EnvFiles(const PodSlot& slot) const {
  std::vector<std::string> entries;
  for (const auto& [role, var] : files_) {
    if (role == slot.role->name) entries.push_back(var + "=" + key_of_.at({role, var}));
  }
  return JoinStrings(entries, ",");
}

int JobWiring::PodPort(const PodSlot& slot) const { return op::PodPort(*job_, slot, host_port_base_); }
int JobWiring::SidecarPort(const PodSlot& slot) const { return op::SidecarPort(*job_, slot, host_port_base_); }

std::map<std::string, std::string> JobWiring::EndpointsData(const std::vector<std::string>& hosts) const {
  std::map<std::string, std::string> data;
  for (const auto& [key, t] : templates_) data[key] = t.Fill(hosts);
  return data;
}

}  // namespace fleet::op
