#include <algorithm>

#include "fleet/base/strings.h"
#include "fleet/runtime/env_contract.h"

extern char** environ;

namespace fleet {
namespace {

const std::string* Find(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

constexpr int kDefaultClusterStartPort = 6170;

}  // namespace

std::optional<Result<ClusterEnv>> DetectClusterEnv(const EnvMap& env) {
  const std::string* nodes = Find(env, "PADDLE_TRAINERS");
  const std::string* pod_ip = Find(env, "POD_IP");
  const std::string* node_rank = Find(env, "PADDLE_TRAINER_ID");
  const std::string* ports_num = Find(env, "TRAINER_PORTS_NUM");
  if (!nodes || !pod_ip || !node_rank || !ports_num) return std::nullopt;
  // Paddle only takes the cluster path when PADDLE_TRAINERS_NUM (default 1) is not 1.
  const std::string* trainers_num = Find(env, "PADDLE_TRAINERS_NUM");
  if (!trainers_num || TrimWhitespace(*trainers_num) == "1") return std::nullopt;

  using R = Result<ClusterEnv>;
  ClusterEnv cluster;
  for (const std::string& node : SplitString(*nodes, ',')) {
    auto host = ParseHost(TrimWhitespace(node));
    if (!host) return R(Error{"PADDLE_TRAINERS: " + host.error()});
    if (std::find(cluster.nodes.begin(), cluster.nodes.end(), *host) != cluster.nodes.end()) {
      return R(Error{"PADDLE_TRAINERS lists node '" + *host + "' twice"});
    }
    cluster.nodes.push_back(*host);
  }
  auto rank = ParseNonNegativeInt(*node_rank, "PADDLE_TRAINER_ID");
  if (!rank) return R(Error{rank.error()});
  auto ports = ParseNonNegativeInt(*ports_num, "TRAINER_PORTS_NUM");
  if (!ports) return R(Error{ports.error()});
  if (*ports < 1) return R(Error{"TRAINER_PORTS_NUM must be at least 1"});
  cluster.node_rank = *rank;
  cluster.ports_per_node = *ports;
  cluster.pod_ip = *pod_ip;
  if (cluster.node_rank >= static_cast<int>(cluster.nodes.size())) {
    return R(Error{"PADDLE_TRAINER_ID " + *node_rank + " is not below the " +
                   std::to_string(cluster.nodes.size()) + " nodes of PADDLE_TRAINERS"});
  }
  if (cluster.nodes[static_cast<size_t>(cluster.node_rank)] != cluster.pod_ip) {
    return R(Error{"POD_IP '" + cluster.pod_ip + "' is not node " + *node_rank +
                   " of PADDLE_TRAINERS ('" + cluster.nodes[static_cast<size_t>(cluster.node_rank)] + "')"});
  }

  const std::string* endpoints = Find(env, "DISTRIBUTED_TRAINER_ENDPOINTS");
  if (endpoints && !endpoints->empty()) {
    auto list = ParseEndpointList(*endpoints);
    if (!list) return R(Error{"DISTRIBUTED_TRAINER_ENDPOINTS: " + list.error()});
    const size_t expected = cluster.nodes.size() * static_cast<size_t>(cluster.ports_per_node);
    if (list->size() != expected) {
      return R(Error{"DISTRIBUTED_TRAINER_ENDPOINTS has " + std::to_string(list->size()) +
                     " endpoints, expected PADDLE_TRAINERS x TRAINER_PORTS_NUM = " + std::to_string(expected)});
    }
    for (size_t n = 0; n < cluster.nodes.size(); ++n) {
      auto first = list->begin() + static_cast<long>(n * static_cast<size_t>(cluster.ports_per_node));
      std::vector<Endpoint> chunk(first, first + cluster.ports_per_node);
      for (const Endpoint& e : chunk) {
        if (e.host != cluster.nodes[n]) {
          return R(Error{"DISTRIBUTED_TRAINER_ENDPOINTS entry '" + e.ToString() + "' is not on node '" +
                         cluster.nodes[n] + "' (entries go node by node, TRAINER_PORTS_NUM per node)"});
        }
      }
      cluster.node_endpoints.push_back(std::move(chunk));
    }
  } else {
    int start = kDefaultClusterStartPort;
    if (const std::string* port = Find(env, "PADDLE_PORT")) {
      auto parsed = ParsePort(*port, "PADDLE_PORT");
      if (!parsed) return R(Error{parsed.error()});
      start = *parsed;
    }
    if (cluster.ports_per_node > 65536 - start) {
      return R(Error{"PADDLE_PORT " + std::to_string(start) + " + TRAINER_PORTS_NUM runs past port 65535"});
    }
    for (const std::string& node : cluster.nodes) {
      std::vector<Endpoint> chunk;
      for (int i = 0; i < cluster.ports_per_node; ++i) chunk.push_back(Endpoint{node, start + i});
      cluster.node_endpoints.push_back(std::move(chunk));
    }
  }
  return R(std::move(cluster));
}

EnvMap RenderClusterEnv(const ClusterEnv& cluster) {
  EnvMap env;
  std::vector<Endpoint> all;
  for (const auto& chunk : cluster.node_endpoints) all.insert(all.end(), chunk.begin(), chunk.end());
  env["PADDLE_TRAINERS"] = JoinStrings(cluster.nodes, ",");
  env["POD_IP"] = cluster.pod_ip;
  env["PADDLE_TRAINER_ID"] = std::to_string(cluster.node_rank);
  env["TRAINER_PORTS_NUM"] = std::to_string(cluster.ports_per_node);
  env["PADDLE_TRAINERS_NUM"] = std::to_string(cluster.nodes.size());
  env["DISTRIBUTED_TRAINER_ENDPOINTS"] = JoinEndpoints(all);
  if (!all.empty()) {
    env["PADDLE_PORT"] = std::to_string(
        cluster.node_endpoints[static_cast<size_t>(cluster.node_rank)].front().port);
  }
  return env;
}

EnvMap CurrentProcessEnv() {
  EnvMap env;
  for (char** entry = environ; entry && *entry; ++entry) {
    std::string_view kv(*entry);
    size_t eq = kv.find('=');
    if (eq == std::string_view::npos) continue;
    env.emplace(std::string(kv.substr(0, eq)), std::string(kv.substr(eq + 1)));
  }
  return env;
}

}  // namespace fleet
