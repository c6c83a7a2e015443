// The new launcher across a job: each node's rendezvous at its master, the ranks it hands out and
// the env of every process (controllers/collective.py, controllers/master.py).
#include <algorithm>
#include <set>

#include "common.h"

namespace fleet::paddle_model {
namespace {

using detail::AtLeast;
using detail::Join;

std::string Port(const NewLauncherNode& node) {
  if (!node.master) return std::to_string(kFreePortBase);  // lazy_init: a free port of its own
  return detail::Split(*node.master, ':').back();
}

// The node a host names: by its own address, the address it resolves to, or a DNS name.
std::optional<std::size_t> NodeNamed(const std::string& host, const std::vector<Node>& nodes,
                                     const std::vector<NewLauncherNode>& models) {
  for (std::size_t j = 0; j < nodes.size(); ++j) {
    const auto& names = nodes[j].names;
    if (host == models[j].own_ip || host == nodes[j].hostname_ip ||
        std::find(names.begin(), names.end(), host) != names.end()) {
      return j;
    }
  }
  return std::nullopt;
}

// Which rendezvous a node joins: "http://ip:port/job" of the node serving it, "etcd://host:port/job",
// or nullopt with the reason it waits forever (HTTPMaster.sync_peers: "master not ready").
std::optional<std::string> Rendezvous(std::size_t i, const std::vector<Node>& nodes,
                                      const std::vector<NewLauncherNode>& models, std::string& why) {
  const NewLauncherNode& node = models[i];
  if (node.etcd) {
    // The host after the literal "etcd://" is the one meant; strip() may have eaten into it.
    const std::string meant = detail::HostOf(node.master->substr(std::string("etcd://").size()));
    if (node.etcd_host != meant) {
      why = "node " + std::to_string(i) + " connects to etcd host '" + node.etcd_host + "', not '" + meant + "'";
      return std::nullopt;
    }
    return "etcd://" + node.etcd_host + ":" + node.etcd_port + "/" + node.job_id;
  }
  if (node.serves_master) return "http://" + node.own_ip + ":" + Port(node) + "/" + node.job_id;
  const std::string host = detail::HostOf(*node.master);
  const auto server = NodeNamed(host, nodes, models);
  if (!server || !models[*server].serves_master || Port(models[*server]) != Port(node)) {
    why = "node " + std::to_string(i) + ": master " + *node.master + " is served by no node (master not ready)";
    return std::nullopt;
  }
  return "http://" + models[*server].own_ip + ":" + Port(node) + "/" + node.job_id;
}

// What 2.6+ adds as each process starts: controller.py add_container sets PADDLE_LOG_DIR (the log
// dir made absolute); utils/process_context.py writes the whole env to backup_env.<rank>.json,
// names it in PADDLE_BACKUP_ENV_PATH, and leaves PADDLE_TRAINER_ENDPOINTS and TRAINER_IP_PORT_LIST
// out of the env when they reach PADDLE_ENV_LIMIT_LEN (48000) characters.
void StartProcess(Version version, const NewLauncherNode& node, Env& env) {
  if (!AtLeast(version, Version::k2_6)) return;
  const std::string& dir = node.log_dir;
  const std::string base = node.workdir.empty() || node.workdir.back() == '/' ? node.workdir : node.workdir + "/";
  env["PADDLE_LOG_DIR"] = !dir.empty() && dir[0] == '/' ? dir : base + dir;
  env["PADDLE_BACKUP_ENV_PATH"] = env["PADDLE_LOG_DIR"] + "/backup_env." + env["PADDLE_TRAINER_ID"] + ".json";
  const auto limit = detail::PyInt(detail::Lookup(node.base_env, "PADDLE_ENV_LIMIT_LEN").value_or("48000")).value_or(48000);
  for (const char* name : {"PADDLE_TRAINER_ENDPOINTS", "TRAINER_IP_PORT_LIST"}) {
    const auto it = env.find(name);
    if (it != env.end() && static_cast<long long>(it->second.size()) >= limit) env.erase(it);
  }
}

// ipaddress.IPv4Address as an integer (master.py _cmp_by_ip, 2.6+).
std::optional<unsigned long long> IPv4(const std::string& address) {
  const auto octets = detail::Split(address, '.');
  if (octets.size() != 4) return std::nullopt;
  unsigned long long value = 0;
  for (const auto& octet : octets) {
    const auto number = detail::PyInt(octet);
    if (!number || *number < 0 || *number > 255 || octet.empty() || octet.size() > 3) return std::nullopt;
    value = value * 256 + static_cast<unsigned long long>(*number);
  }
  return value;
}

struct Group {
  std::vector<std::size_t> members;  // node indexes, in the job's order
};

// master.py sync_peers: the peer list in rank order, or the reason the group fails.
// Every rank set: slot = rank (a gap or a rank past the end raises). None set: keys sorted by pod
// name, the HTTP master's own key being 'aaaaaa' (first); with etcd all follow the random names.
// 2.6+ sort_ip: by the candidate's IPv4 address.
std::optional<std::string> Order(const Group& group, const std::vector<NewLauncherNode>& models,
                                 std::vector<std::size_t>& order, std::vector<bool>& fixed) {
  const std::size_t size = group.members.size();
  std::size_t ranked = 0;
  for (std::size_t m : group.members) ranked += models[m].rank >= 0 ? 1 : 0;
  order.assign(size, SIZE_MAX);
  fixed.assign(size, true);
  if (models[group.members[0]].sort_ip) {
    std::vector<std::pair<unsigned long long, std::size_t>> by_ip;
    for (std::size_t m : group.members) {
      const auto ip = IPv4(models[m].own_ip);
      if (!ip) return "AddressValueError: " + models[m].own_ip + " is not an IPv4 address (sort_ip)";
      by_ip.emplace_back(*ip, m);
    }
    std::sort(by_ip.begin(), by_ip.end());
    for (std::size_t k = 0; k < size; ++k) order[k] = by_ip[k].second;
    return std::nullopt;
  }
  if (ranked == size) {
    for (std::size_t m : group.members) {
      const auto rank = static_cast<std::size_t>(models[m].rank);
      if (rank >= size) return "IndexError: node rank " + std::to_string(rank) + " in a job of " + std::to_string(size) + " nodes";
      if (order[rank] != SIZE_MAX) return "TypeError: two nodes have rank " + std::to_string(rank) + " (a peer slot stays None)";
      order[rank] = m;
    }
    return std::nullopt;
  }
  if (ranked > 0) return "some nodes have a rank and some do not: they build different peer lists";
  order.clear();
  for (std::size_t m : group.members) {
    if (models[m].serves_master && !models[m].etcd) order.insert(order.begin(), m);
    else order.push_back(m);
  }
  const std::size_t first_random = (!models[order[0]].etcd && models[order[0]].serves_master) ? 1 : 0;
  for (std::size_t k = first_random; k < size; ++k) fixed[k] = size - first_random <= 1;
  return std::nullopt;
}

// Where a node's processes sit in the job, as collective.py's two pod builders work it out.
struct Placement {
  std::optional<std::string> master;      // PADDLE_MASTER
  std::size_t global_size = 0;
  std::size_t nnodes = 0;
  std::size_t first_rank = 0;             // the node's rank offset
  std::string job_endpoints;              // PADDLE_TRAINER_ENDPOINTS
  std::vector<std::string> own_endpoints; // PADDLE_CURRENT_ENDPOINT per local process
};

// The env of each of a node's processes: the node's env with collective.py's keys on top.
void AddProcesses(Version version, const NewLauncherNode& node, const Placement& at, std::vector<Env>& out) {
  for (int i = 0; i < node.nproc; ++i) {
    const auto local = static_cast<std::size_t>(i);
    Env env = node.base_env;
    env["POD_NAME"] = "<random>";
    if (at.master) env["PADDLE_MASTER"] = *at.master;
    env["PADDLE_GLOBAL_SIZE"] = env["PADDLE_TRAINERS_NUM"] = std::to_string(at.global_size);
    env["PADDLE_LOCAL_SIZE"] = std::to_string(node.nproc);
    env["PADDLE_GLOBAL_RANK"] = env["PADDLE_TRAINER_ID"] = std::to_string(at.first_rank + local);
    env["PADDLE_LOCAL_RANK"] = env["PADDLE_RANK_IN_NODE"] = std::to_string(i);
    env["PADDLE_NNODES"] = std::to_string(at.nnodes);
    env["PADDLE_TRAINER_ENDPOINTS"] = at.job_endpoints;
    env["PADDLE_CURRENT_ENDPOINT"] = local < at.own_endpoints.size() ? at.own_endpoints[local] : "";
    if (node.selected_devices.empty()) env["PADDLE_DISTRI_BACKEND"] = "gloo";
    else env["FLAGS_selected_gpus"] = node.selected_devices[local];
    StartProcess(version, node, env);
    out.push_back(std::move(env));
  }
}

// collective.py _build_pod_with_master: after sync_peers, in rank order. The master is rank 0's
// candidate; each node lists its own processes' endpoints (free ports).
void ProcessEnvs(Version version, const std::vector<std::size_t>& order, const std::vector<NewLauncherNode>& models,
                 std::vector<std::vector<Env>>& per_node) {
  std::vector<std::vector<std::string>> endpoints;
  std::vector<std::string> node_lists;
  Placement at;
  for (std::size_t m : order) {
    endpoints.emplace_back();
    for (int i = 0; i < models[m].nproc; ++i) endpoints.back().push_back(models[m].own_ip + ":" + std::to_string(kFreePortBase + 1 + i));
    node_lists.push_back(Join(endpoints.back(), ","));
    at.global_size += static_cast<std::size_t>(models[m].nproc);
  }
  at.master = models[order[0]].own_ip + ":" + std::to_string(kFreePortBase);
  at.nnodes = order.size();
  at.job_endpoints = Join(node_lists, ",");
  for (std::size_t k = 0; k < order.size(); ++k) {
    at.own_endpoints = endpoints[k];
    AddProcesses(version, models[order[k]], at, per_node[order[k]]);
    at.first_rank += static_cast<std::size_t>(models[order[k]].nproc);
  }
}

// collective.py _build_pod_with_args (2.5+): no rendezvous; the node's rank is its own address's
// index in --ips, or 0 when absent. 3.0 also sets PADDLE_MASTER to the first endpoint.
void ArgsJob(Version version, const std::vector<NewLauncherNode>& models, JobOutcome& job,
             std::vector<std::vector<Env>>& per_node) {
  std::set<int> seen;
  for (std::size_t n = 0; n < models.size(); ++n) {
    const NewLauncherNode& node = models[n];
    std::vector<std::string> endpoints;
    for (const auto& ip : node.ips) {
      for (int p = 0; p < node.nproc; ++p) endpoints.push_back(ip + ":" + std::to_string(node.start_port + p));
    }
    const auto found = std::find(node.ips.begin(), node.ips.end(), node.own_ip);
    const int index = found == node.ips.end() ? 0 : static_cast<int>(found - node.ips.begin());
    job.node_rank.push_back(index);
    if (!seen.insert(index).second) job.why = "two nodes take node rank " + std::to_string(index) + " (own address not in --ips)";
    if (node.ips.size() < 2) job.trains_alone = true;
    Placement at;
    if (AtLeast(version, Version::k3_0)) at.master = endpoints[0];
    at.global_size = endpoints.size();
    at.nnodes = node.ips.size();
    at.first_rank = static_cast<std::size_t>(index * node.nproc);
    at.job_endpoints = Join(endpoints, ",");
    const auto first = endpoints.begin() + static_cast<long>(std::min(at.first_rank, endpoints.size()));
    at.own_endpoints.assign(first, endpoints.end());
    AddProcesses(version, node, at, per_node[n]);
  }
  if (!job.why.empty()) job.hangs = true;
  job.deterministic = !job.hangs;
}

void Fail(JobOutcome& job, bool hang, const std::string& why) {
  if (hang) job.hangs = true;
  else job.crash = why;
  if (job.why.empty()) job.why = why;
}

// Parameter-server jobs from endpoint lists: every listed endpoint must be run by exactly one node.
// The master-based PS rendezvous is not modelled (reported as a crash of the model).
void PsJob(const std::vector<NewLauncherNode>& models, JobOutcome& job) {
  std::map<std::string, int> runs;
  for (const auto& model : models) {
    if (model.ps_servers.empty() && model.ps_trainers.empty()) {
      Fail(job, false, "the model does not model a parameter-server job without --servers and --trainers");
      return;
    }
    for (const auto* list : {&model.ps_servers, &model.ps_trainers}) {
      for (const auto& endpoint : *list) ++runs[endpoint];
    }
  }
  for (const auto& [endpoint, count] : runs) {
    if (count > 1) Fail(job, true, std::to_string(count) + " nodes run " + endpoint + " (endpoints picked by string prefix)");
  }
  job.deterministic = !job.hangs;
}

// Join nodes into rendezvous groups and check each is complete and agrees on its size.
std::map<std::string, Group> Groups(const std::vector<Node>& nodes, const std::vector<NewLauncherNode>& models, JobOutcome& job) {
  std::map<std::string, Group> groups;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (models[i].replicas < 2) {  // sync_peers returns at once: a one-node job
      job.trains_alone = true;
      if (job.why.empty()) job.why = "node " + std::to_string(i) + " counts " + models[i].nnodes + " node(s) and trains alone";
      continue;
    }
    std::string why;
    const auto key = Rendezvous(i, nodes, models, why);
    if (!key) Fail(job, true, why);
    else groups[*key].members.push_back(i);
  }
  for (auto& [key, group] : groups) {
    for (std::size_t m : group.members) {
      const NewLauncherNode& node = models[m];
      const auto count = static_cast<int>(group.members.size());
      // etcd wait_peer_ready: between MIN and MAX nodes start the job; HTTP waits for exactly N.
      const bool enough = node.etcd ? count >= node.replicas_min && count <= node.replicas : count == node.replicas;
      if (!enough) {
        Fail(job, true, "node " + std::to_string(m) + " waits for " + node.nnodes + " nodes at " + key + ", " +
                             std::to_string(count) + " come");
      }
    }
  }
  return groups;
}

}  // namespace

JobOutcome SimulateNewLauncherJob(Version version, const std::vector<Node>& nodes) {
  JobOutcome job;
  std::vector<NewLauncherNode> models;
  for (const Node& node : nodes) models.push_back(ModelNewLauncher(version, node));
  std::size_t legacy = 0;
  for (std::size_t i = 0; i < models.size(); ++i) {
    if (models[i].crash) {
      Fail(job, false, "node " + std::to_string(i) + ": " + *models[i].crash);
      return job;
    }
    legacy += models[i].legacy_fallback ? 1 : 0;
  }
  if (legacy == nodes.size() && !nodes.empty()) {
    bool gpu = false;
    for (const Node& node : nodes) gpu = gpu || node.visible_gpus > 0;
    return SimulateLegacyJob(version, nodes, gpu);
  }
  if (legacy > 0) {
    Fail(job, true, "some nodes fall back to the legacy launcher, others do not");
    return job;
  }
  if (std::any_of(models.begin(), models.end(), [](const NewLauncherNode& m) { return m.ps_mode; })) {
    PsJob(models, job);
    return job;
  }
  std::vector<std::vector<Env>> per_node(nodes.size());
  if (std::all_of(models.begin(), models.end(), [](const NewLauncherNode& m) { return m.with_args; })) {
    ArgsJob(version, models, job, per_node);
  } else {
    job.node_rank.assign(nodes.size(), 0);
    job.deterministic = true;
    const auto groups = Groups(nodes, models, job);
    if (groups.size() > 1) Fail(job, true, "the nodes form " + std::to_string(groups.size()) + " separate rendezvous");
    for (const auto& [key, group] : groups) {
      std::vector<std::size_t> order;
      std::vector<bool> fixed;
      if (auto error = Order(group, models, order, fixed)) {
        Fail(job, false, *error);
        continue;
      }
      for (std::size_t k = 0; k < order.size(); ++k) {
        job.node_rank[order[k]] = fixed[k] ? static_cast<int>(k) : -1;
        job.deterministic = job.deterministic && fixed[k];
      }
      ProcessEnvs(version, order, models, per_node);
    }
    for (std::size_t i = 0; i < nodes.size(); ++i) {  // one-node jobs: rank 0, their own env
      if (models[i].replicas < 2) ProcessEnvs(version, {i}, models, per_node);
    }
  }
  for (auto& envs : per_node) {
    for (auto& env : envs) job.process_env.push_back(std::move(env));
  }
  return job;
}

}  // namespace fleet::paddle_model
