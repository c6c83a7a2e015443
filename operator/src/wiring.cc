#include "fleet/operator/wiring.h"

#include <algorithm>
#include <set>

#include "fleet/base/strings.h"

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

int TemplateGpus(const Json& pod_template) {
  const Json* containers = nullptr;
  if (pod_template.contains("spec") && pod_template["spec"].contains("containers")) {
    containers = &pod_template["spec"]["containers"];
  }
  if (!containers || !containers->is_array() || containers->empty()) return 0;
  const Json& limits = (*containers)[0].value("resources", Json::object()).value("limits", Json::object());
  if (!limits.contains("nvidia.com/gpu")) return 0;
  const Json& v = limits["nvidia.com/gpu"];
  if (v.is_number_integer()) return std::max(0, v.get<int>());
  if (v.is_string()) {
    auto n = ParseNonNegativeInt(v.get<std::string>(), "nvidia.com/gpu");
    return n ? *n : 0;
  }
  return 0;
}

EnvMap ElasticEnv(const FleetJob& job, int run) {
  const ElasticSpec& elastic = *job.spec.elastic;
  return {{"PADDLE_ELASTIC_SERVER", elastic.etcd_endpoint},
          {"PADDLE_ELASTIC_JOB_ID", job.name + "-" + std::to_string(run) + "-" + job.uid},
          {"PADDLE_ELASTIC_NP", std::to_string(elastic.min_replicas) + ":" + std::to_string(elastic.max_replicas)},
          {"PADDLE_ELASTIC_TIMEOUT", std::to_string(elastic.timeout_seconds)},
          {"FLAGS_START_PORT", std::to_string(job.spec.port)}};
}

Result<JobWiring> JobWiring::Build(const FleetJob& job, int host_port_base, const std::string& cluster_domain) {
  JobWiring w;
  w.job_ = &job;
  w.host_port_base_ = host_port_base;
  w.cluster_domain_ = cluster_domain;
  w.slots_ = PodSlots(job);
  const FleetJobSpec& spec = job.spec;
  auto endpoint = [&](const PodSlot& slot) { return Endpoint{Symbol(slot.ordinal), op::PodPort(job, slot, host_port_base)}; };

  if (spec.elastic) {
    // Pods run fleetrun, which finds its peers in etcd: nothing to render, nothing shared.
  } else if (spec.mode == JobMode::kCollective && spec.processes_per_pod > 1) {
    // Pods run fleetrun, which reads the cluster env; there is no per-process topology here.
  } else if (spec.mode == JobMode::kCollective) {
    CollectiveLayout layout;
    for (const PodSlot& slot : w.slots_) {
      layout.nodes.push_back(Symbol(slot.ordinal));
      layout.node_ports.push_back({op::PodPort(job, slot, host_port_base)});
    }
    const int gpus = TemplateGpus(spec.roles.front().template_);
    layout.device_kind = gpus > 0 ? DeviceKind::kGpu : DeviceKind::kCpu;
    std::vector<int> devices;
    for (int g = 0; g < gpus; ++g) devices.push_back(g);
    layout.device_groups = {devices};
    layout.gloo.with_gloo = GlooLevel(spec.gloo);
    FLEET_ASSIGN_OR_RETURN(auto topology, BuildCollectiveTopology(layout));
    w.topology_ = std::make_shared<Topology>(std::move(topology));
  } else {
    PsLayout layout;
    for (const PodSlot& slot : w.slots_) {
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
    if (TemplateGpus(spec.Find(RoleKind::kWorker)->template_) > 0) layout.trainer_device = DeviceKind::kGpu;
    layout.gloo.with_gloo = GlooLevel(spec.gloo);
    layout.gloo.http_endpoint = Endpoint{layout.servers.front().host, GlooHttpPort(job, host_port_base)}.ToString();
    FLEET_ASSIGN_OR_RETURN(auto topology, BuildPsTopology(layout));
    w.topology_ = std::make_shared<Topology>(std::move(topology));
  }
  if (w.topology_) {
    w.renderer_ = std::make_shared<EnvRenderer>(*w.topology_);
    w.process_of_slot_.assign(w.slots_.size(), -1);
    for (size_t p = 0; p < w.topology_->processes.size(); ++p) {
      const HostTemplate t = ParseTemplate(w.topology_->processes[p].endpoint.host);
      w.process_of_slot_[static_cast<size_t>(t.holes.front())] = static_cast<int>(p);
    }
  }

  // The shared variables: those naming another pod, in the first or the last pod of a role (the
  // first server names only itself in PADDLE_GLOO_HTTP_ENDPOINT, the others name it). A key per
  // variable, qualified by the role where roles see different values (heter previous/next lists).
  std::map<std::string, std::map<std::string, std::string>> by_var;  // var -> role -> value
  for (const RoleSpec& role : spec.roles) {
    std::vector<int> samples;
    for (const PodSlot& slot : w.slots_) {
      if (slot.role != &role) continue;
      if (samples.size() < 2) samples.push_back(slot.ordinal);
      else samples.back() = slot.ordinal;
    }
    std::set<std::string> varies;   // long hole-free values the samples disagree on: each pod's own
    for (int ordinal : samples) {
      for (const auto& [var, value] : w.SymbolicEnv(ordinal)) {
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
      w.key_of_[{role, var}] = key;
      w.templates_.emplace(key, ParseTemplate(value));
    }
  }

  // Each key's size, with hosts at their longest for the network mode; then what travels as files.
  const size_t host_bytes = spec.network == Network::kService
                                ? ServiceHost(job, PodName(job, spec.roles.front(), 99999), cluster_domain).size()
                                : std::string("255.255.255.255").size();
  std::map<std::string, size_t> key_bytes;
  size_t total = 0;
  for (const auto& [key, t] : w.templates_) {
    size_t bytes = t.holes.size() * host_bytes;
    for (const std::string& l : t.literals) bytes += l.size();
    key_bytes[key] = bytes;
    total += bytes;
  }
  if (total > kMaxConfigMapBytes) {
    return Error{"spec: the endpoint lists would take about " + std::to_string(total / 1024) +
                 " KiB, over the 1 MiB limit of a ConfigMap; use fewer pods"};
  }
  FLEET_RETURN_IF_ERROR(w.ChooseFiles(key_bytes));
  return w;
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
  if (job_->spec.elastic) return {};   // BuildPod adds ElasticEnv
  if (!topology_) {  // collective pods running fleetrun: the cluster inputs
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
    cluster.pod_ip = Symbol(ordinal);
    return RenderClusterEnv(cluster);
  }
  const Process& process = topology_->processes.at(static_cast<size_t>(process_of_slot_.at(static_cast<size_t>(ordinal))));
  return renderer_->Render(process);
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
