#include "fleet/launcher/master.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "fleet/base/json_read.h"
#include "fleet/base/strings.h"
#include "fleet/httpd/http_server.h"
#include "fleet/kube/plain_http.h"
#include "fleet/launcher/supervisor.h"

namespace fleet::launcher {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr double kPollSeconds = 0.25;
constexpr std::chrono::milliseconds kRequestTimeout{2000};
constexpr size_t kMaxAnswerBytes = 16u << 20;   // a 10,000-node job's registrations fit many times
constexpr int kMaxNodes = 100000;
constexpr size_t kMaxPortsPerNode = 4096;
constexpr size_t kMaxJobIdBytes = 256;

void Say(const std::string& message) { std::cerr << "fleetrun: " << message << std::endl; }

// Nodes without a rank: IPv4 addresses in numeric order, names after them in text order.
bool AddressBefore(const std::string& a, const std::string& b) {
  in_addr x{}, y{};
  const bool ax = ::inet_pton(AF_INET, a.c_str(), &x) == 1, by = ::inet_pton(AF_INET, b.c_str(), &y) == 1;
  if (ax && by) return ntohl(x.s_addr) < ntohl(y.s_addr);
  if (ax != by) return ax;
  return a < b;
}

Json ToJson(const PeerNode& node) {
  return {{"host", node.host}, {"rank", node.rank}, {"ports", node.ports}, {"master_port", node.master_port},
          {"serves_master", node.serves_master}};
}

Result<int> IntField(const Json& object, const char* name, int lo, int hi) {
  const std::optional<int> value = MemberAs(object, name, AsInt<int>);
  if (!value || *value < lo || *value > hi) {
    return Error{std::string(name) + " must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi)};
  }
  return *value;
}

Result<PeerNode> PeerFromJson(const Json& json) {
  if (!json.is_object()) return Error{"node is not an object"};
  PeerNode node;
  auto host = json.find("host");
  if (host == json.end() || !host->is_string()) return Error{"node.host must be a string"};
  FLEET_ASSIGN_OR_RETURN(node.host, ParseHost(host->get<std::string>()));
  FLEET_ASSIGN_OR_RETURN(node.rank, IntField(json, "rank", -1, kMaxNodes - 1));
  FLEET_ASSIGN_OR_RETURN(node.master_port, IntField(json, "master_port", 1, 65535));
  auto ports = json.find("ports");
  if (ports == json.end() || !ports->is_array() || ports->empty() || ports->size() > kMaxPortsPerNode) {
    return Error{"node.ports must be a list of 1 to " + std::to_string(kMaxPortsPerNode) + " ports"};
  }
  for (const Json& port : *ports) {
    if (!port.is_number_integer() || port < 1 || port > 65535) return Error{"node.ports holds a value that is no port"};
    node.ports.push_back(port.get<int>());
  }
  auto serves = json.find("serves_master");
  node.serves_master = serves != json.end() && serves->is_boolean() && serves->get<bool>();
  return node;
}

// This node's address as the others reach it: --host / POD_IP, else the local address of the route
// toward the master (a connected UDP socket sends nothing).
Result<std::string> OwnAddress(const LaunchOptions& options, const std::string& master_host) {
  if (options.host) return ParseHost(*options.host);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(master_host.c_str(), "9", &hints, &found) != 0 || !found) {
    return Error{"cannot resolve the master's host " + Quote(master_host) + " to find this node's address; pass --host"};
  }
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in local{};
  socklen_t length = sizeof local;
  const bool ok = fd >= 0 && ::connect(fd, found->ai_addr, found->ai_addrlen) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
  ::freeaddrinfo(found);
  if (fd >= 0) ::close(fd);
  char text[INET_ADDRSTRLEN] = {};
  if (!ok || !::inet_ntop(AF_INET, &local.sin_addr, text, sizeof text)) {
    return Error{"cannot find this node's address toward the master " + master_host + "; pass --host"};
  }
  return std::string(text);
}

// Paddle's election: the master's host is this node's own address (--host / POD_IP, else any local
// address), by name or by what the name resolves to.
bool ServesMaster(const std::string& master_host, const LaunchOptions& options, const HostFacts& host) {
  const std::vector<std::string> own = options.host ? std::vector<std::string>{*options.host} : host.local_addresses;
  auto is_own = [&](const std::string& address) { return std::find(own.begin(), own.end(), address) != own.end(); };
  if (is_own(master_host)) return true;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(master_host.c_str(), nullptr, &hints, &found) != 0) return false;
  bool mine = false;
  for (addrinfo* a = found; a && !mine; a = a->ai_next) {
    char text[INET_ADDRSTRLEN] = {};
    const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
    mine = ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) && is_own(text);
  }
  ::freeaddrinfo(found);
  return mine;
}

// The ports of this node's trainers (--start_port / FLAGS_START_PORT on, else free ones) and a free
// one for PADDLE_MASTER.
Status OfferPorts(const LaunchOptions& options, const HostFacts& host, PeerNode& self) {
  FLEET_ASSIGN_OR_RETURN(const int trainers, LocalTrainerCount(options, host));
  std::optional<int> start = options.start_port;
  if (auto flag = host.env.find("FLAGS_START_PORT"); !start && flag != host.env.end()) {
    FLEET_ASSIGN_OR_RETURN(start, ParsePort(TrimWhitespace(flag->second), "FLAGS_START_PORT"));
  }
  FLEET_ASSIGN_OR_RETURN(auto free, host.free_ports(start ? 1 : trainers + 1));
  self.master_port = free.back();
  if (!start) {
    self.ports.assign(free.begin(), free.end() - 1);
    return OkStatus();
  }
  if (*start + trainers - 1 > 65535) return Error{"start port " + std::to_string(*start) + " leaves no room for " +
                                                  std::to_string(trainers) + " trainers"};
  for (int i = 0; i < trainers; ++i) self.ports.push_back(*start + i);
  return OkStatus();
}

}  // namespace

Result<std::vector<PeerNode>> RankPeers(std::vector<PeerNode> nodes, int nnodes) {
  std::vector<const PeerNode*> by_rank(static_cast<size_t>(nnodes), nullptr);
  std::vector<PeerNode*> unranked;
  for (PeerNode& node : nodes) {
    if (node.ports.size() != nodes.front().ports.size()) {
      return Error{"node " + node.host + " runs " + std::to_string(node.ports.size()) + " trainers but node " +
                   nodes.front().host + " runs " + std::to_string(nodes.front().ports.size()) +
                   ": give every node the same --nproc_per_node / devices"};
    }
    if (node.rank < 0) {
      unranked.push_back(&node);
      continue;
    }
    if (node.rank >= nnodes) {
      return Error{"node " + node.host + " has rank " + std::to_string(node.rank) + " but the job has --nnodes " +
                   std::to_string(nnodes) + " (ranks 0 to " + std::to_string(nnodes - 1) + ")"};
    }
    const PeerNode*& holder = by_rank[static_cast<size_t>(node.rank)];
    if (holder) {
      return Error{"nodes " + holder->host + " and " + node.host + " both have rank " + std::to_string(node.rank) +
                   " (--rank / PADDLE_RANK)"};
    }
    holder = &node;
  }
  std::stable_sort(unranked.begin(), unranked.end(), [](const PeerNode* a, const PeerNode* b) {
    if (a->serves_master != b->serves_master) return a->serves_master;
    return AddressBefore(a->host, b->host);
  });
  auto next = unranked.begin();
  for (size_t rank = 0; rank < by_rank.size() && next != unranked.end(); ++rank) {
    if (by_rank[rank]) continue;
    (*next)->rank = static_cast<int>(rank);
    by_rank[rank] = *next++;
  }
  std::sort(nodes.begin(), nodes.end(), [](const PeerNode& a, const PeerNode& b) { return a.rank < b.rank; });
  return nodes;
}

RendezvousStore::Answer RendezvousStore::Register(const std::string& body) {
  const Json request = Json::parse(body, nullptr, /*allow_exceptions=*/false);
  auto bad = [](const std::string& why) { return Answer{400, "malformed registration: " + why}; };
  if (!request.is_object()) return bad("not a JSON object");
  auto job_field = request.find("job");
  if (job_field == request.end() || !job_field->is_string() || job_field->get<std::string>().empty() ||
      job_field->get<std::string>().size() > kMaxJobIdBytes) {
    return bad("job must be a non-empty string of at most " + std::to_string(kMaxJobIdBytes) + " bytes");
  }
  const std::string job_id = job_field->get<std::string>();
  auto nnodes = IntField(request, "nnodes", 1, kMaxNodes);
  if (!nnodes) return bad(nnodes.error());
  auto node = PeerFromJson(request.value("node", Json()));
  if (!node) return bad(node.error());

  std::lock_guard<std::mutex> lock(mutex_);
  auto [it, created] = jobs_.try_emplace(job_id);
  Job& job = it->second;
  if (created) job.nnodes = *nnodes;
  if (job.nnodes != *nnodes) {
    return Answer{409, "job " + Quote(job_id) + " has " + std::to_string(job.nnodes) + " nodes at the master but " +
                                          node->host + " says --nnodes " + std::to_string(*nnodes)};
  }
  auto same = std::find_if(job.nodes.begin(), job.nodes.end(), [&](const PeerNode& n) { return n.host == node->host; });
  if (same != job.nodes.end()) {
    *same = *node;   // a node that registers again (every poll, or after a restart)
  } else if (static_cast<int>(job.nodes.size()) >= job.nnodes) {
    std::vector<std::string> hosts;
    for (const PeerNode& n : job.nodes) hosts.push_back(n.host);
    return Answer{409, "job " + Quote(job_id) + " already has its " + std::to_string(job.nnodes) +
                                          " nodes (" + JoinStrings(hosts, ",") + "); " + node->host + " is not one of them"};
  } else if (registrations_ >= max_registrations_) {
    return Answer{503, "the master holds " + std::to_string(registrations_) + " registrations, its limit"};
  } else {
    job.nodes.push_back(*node);
    ++registrations_;
  }
  if (static_cast<int>(job.nodes.size()) == job.nnodes) job.seen.insert(node->host);
  Json answer = {{"nodes", Json::array()}, {"seen", job.seen.size()}};
  for (const PeerNode& n : job.nodes) answer["nodes"].push_back(ToJson(n));
  return Answer{200, answer.dump()};
}

Result<std::unique_ptr<HttpRendezvous>> HttpRendezvous::Start(const LaunchOptions& options, const HostFacts& host) {
  std::unique_ptr<HttpRendezvous> node(new HttpRendezvous());
  node->master_ = *options.master;
  FLEET_ASSIGN_OR_RETURN(const Endpoint master, ParseEndpoint(node->master_));
  node->job_id_ = options.job_id.value_or("default");
  node->nnodes_ = options.nnodes ? ParseNpRange(*options.nnodes)->min : 1;
  node->timeout_seconds_ = options.rendezvous_timeout_seconds;
  if (options.rank && *options.rank >= node->nnodes_) {
    return Error{"--rank/PADDLE_RANK " + std::to_string(*options.rank) + " is not below --nnodes/PADDLE_NNODES " +
                 std::to_string(node->nnodes_)};
  }
  node->self_.rank = options.rank.value_or(-1);
  FLEET_RETURN_IF_ERROR(OfferPorts(options, host, node->self_));
  // What this node gets wrong alone (script, devices, mode) fails before it registers, not once the
  // other nodes have started their trainers.
  const NodeRendezvous alone{{"127.0.0.1"}, {node->self_.ports}, 0, Endpoint{"127.0.0.1", node->self_.master_port}};
  if (auto plan = PlanLaunch(options, host, &alone); !plan) return Error{plan.error()};
  node->self_.serves_master = ServesMaster(master.host, options, host);
  if (node->nnodes_ == 1) {
    node->self_.host = options.host.value_or("127.0.0.1");
    return node;
  }
  FLEET_ASSIGN_OR_RETURN(node->self_.host, OwnAddress(options, master.host));
  if (!node->self_.serves_master) return node;
  node->store_ = std::make_unique<RendezvousStore>();
  httpd::Route route{kRendezvousPath, {"POST"}, [store = node->store_.get()](const httpd::Request& request) {
                       RendezvousStore::Answer answer = store->Register(request.body);
                       return answer.status == 200 ? httpd::Response{200, "application/json", std::move(answer.body)}
                                                   : httpd::Response::Text(answer.status, std::move(answer.body));
                     }};
  httpd::HttpServerOptions limits;
  limits.threads = 8;
  auto server = httpd::HttpServer::Start(":" + std::to_string(master.port), {route}, limits);
  if (!server) return Error{"this node (" + node->self_.host + ") is the master's, but " + server.error()};
  node->server_ = std::move(*server);
  Say("serving the rendezvous of job " + Quote(node->job_id_) + " at " + node->master_ + " (this node's address)");
  return node;
}

HttpRendezvous::~HttpRendezvous() = default;

Result<NodeRendezvous> HttpRendezvous::Run() {
  std::vector<PeerNode> peers = {self_};
  if (nnodes_ > 1) {
    kube::ClientOptions client_options;
    client_options.request_timeout = kRequestTimeout;
    client_options.max_response_bytes = kMaxAnswerBytes;
    client_options.max_attempts = 1;
    client_options.user_agent = "fleetrun";
    auto client = kube::PlainHttpClient::Create("http://" + master_, client_options);
    if (!client.ok()) return Error{"--master " + master_ + ": " + client.status().message()};
    const std::string request = Json{{"job", job_id_}, {"nnodes", nnodes_}, {"node", ToJson(self_)}}.dump();
    const auto give_up = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_seconds_));
    std::string last;   // what the master said (or why it did not) the last time
    std::string said;
    while (true) {
      auto reply = (*client)->PostJson(kRendezvousPath, request);
      if (!reply.ok()) {
        last = "the master " + master_ + " does not answer (" + reply.status().message() + ")";
        if (said.empty()) Say("waiting for the master " + master_ + " (the node whose address that is serves it)");
        said = last;
      } else if (reply->status != 200) {
        return Error{"the master " + master_ + " refused this node: " + reply->body.substr(0, 400)};
      } else {
        const Json answer = Json::parse(reply->body, nullptr, false);
        std::vector<PeerNode> nodes;
        for (const Json& entry : answer.is_object() ? answer.value("nodes", Json::array()) : Json::array()) {
          if (auto node = PeerFromJson(entry)) nodes.push_back(std::move(*node));
        }
        const auto seen_field = answer.is_object() ? answer.find("seen") : answer.end();
        const int seen = seen_field != answer.end() && seen_field->is_number_integer() ? seen_field->get<int>() : 0;
        const bool all = static_cast<int>(nodes.size()) == nnodes_;
        if (all && (!server_ || seen == nnodes_)) {
          peers = std::move(nodes);
          break;
        }
        std::vector<std::string> hosts;
        for (const PeerNode& n : nodes) hosts.push_back(n.host);
        last = std::to_string(nodes.size()) + " of " + std::to_string(nnodes_) + " nodes registered (" +
               JoinStrings(hosts, ",") + ")";
        if (last != said) Say("job " + Quote(job_id_) + ": " + last);
        said = last;
      }
      if (Clock::now() >= give_up) {
        char seconds[32];
        std::snprintf(seconds, sizeof seconds, "%g", timeout_seconds_);
        return Error{"the job's " + std::to_string(nnodes_) + " nodes did not all register at the master " + master_ +
                     " within " + seconds + " s (--rendezvous_timeout): " + last};
      }
      if (auto sig = WaitForSupervisedSignal(kPollSeconds)) {
        interrupted_by_ = *sig;
        return Error{std::string("received SIG") + ::sigabbrev_np(*sig) + " while waiting for the job's nodes"};
      }
    }
  }
  FLEET_ASSIGN_OR_RETURN(auto ranked, RankPeers(std::move(peers), nnodes_));
  NodeRendezvous result;
  result.node_rank = -1;
  for (const PeerNode& node : ranked) {
    result.hosts.push_back(node.host);
    result.ports.push_back(node.ports);
    if (node.host == self_.host) result.node_rank = node.rank;
  }
  if (result.node_rank < 0) return Error{"the master " + master_ + " answered a job without this node (" + self_.host + ")"};
  result.collective_master = Endpoint{ranked.front().host, ranked.front().master_port};
  return result;
}

}  // namespace fleet::launcher
