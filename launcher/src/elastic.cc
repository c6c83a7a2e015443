#include "fleet/launcher/elastic.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <random>
#include <set>

#include "fleet/base/strings.h"
#include "fleet/launcher/etcd.h"
#include "fleet/launcher/report.h"
#include "fleet/launcher/supervisor.h"

namespace fleet::launcher {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kPollSeconds = 0.25;           // how often etcd is read (Paddle: every 2 s)
constexpr std::chrono::milliseconds kEtcdTimeout{3000};

std::optional<std::string> NonEmpty(const std::string* text) {
  if (!text || TrimWhitespace(*text).empty()) return std::nullopt;
  return std::string(TrimWhitespace(*text));
}

const std::string* FindEnv(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

Result<double> PositiveSeconds(const EnvMap& env, const char* name, double fallback) {
  const std::string* text = FindEnv(env, name);
  if (!text) return fallback;
  const std::optional<double> value = ParsePositiveSeconds(*text);
  if (!value) return Error{std::string(name) + " must be a positive number of seconds, got " + Quote(*text)};
  return *value;
}

std::string Hosts(const std::vector<Endpoint>& members) {
  std::vector<std::string> hosts;
  for (const Endpoint& e : members) hosts.push_back(e.host);
  return JoinStrings(hosts, ",");
}

// What one read of etcd says about the job.
struct Observation {
  std::vector<Endpoint> members;   // in rank order
  size_t registered = 0;
  bool self_registered = false;
  bool completed = false;          // a node's trainers all succeeded: no more rendezvous
};

class ElasticNode {
 public:
  ElasticNode(const LaunchOptions& options, HostFacts host, const ElasticSettings& settings)
      : options_(options), host_(std::move(host)), settings_(settings),
        job_key_("/paddle/" + settings.job_id), nodes_prefix_(job_key_ + "/nodes/") {
    // The node list comes from etcd; trainers must not inherit the platform's stale copies.
    for (const std::string& name : ClusterInputNames()) host_.env.erase(name);
  }

  int Run();

 private:
  Status Register();
  void Refresh();
  Result<Observation> Observe();
  bool IsMember(const std::vector<Endpoint>& members) const {
    return std::any_of(members.begin(), members.end(), [&](const Endpoint& e) { return e.host == settings_.self.host; });
  }
  // 0 with *members set when this node is to run; else fleetrun's exit status.
  int WaitForMembers(std::vector<Endpoint>* members);
  // Supervise's status; *trainer_failed says whether a local trainer's failure ended it.
  int RunGeneration(const std::vector<Endpoint>& members, bool* trainer_failed);
  int AfterTrainerFailure(const std::vector<Endpoint>& members, int status);
  // The job's published endpoints (node 0 writes them as it starts a generation); "" when unknown.
  std::string PublishedEndpoints();
  void Leave(bool completed);
  void Say(const std::string& message) { std::cerr << "fleetrun: " << message << std::endl; }
  // Says an etcd failure once, until etcd answers again.
  void EtcdTrouble(const std::string& error) {
    if (!etcd_trouble_) Say("WARNING: " + error + "; retrying");
    etcd_trouble_ = true;
  }

  const LaunchOptions& options_;
  HostFacts host_;
  const ElasticSettings& settings_;
  const std::string job_key_;
  const std::string nodes_prefix_;
  std::unique_ptr<EtcdClient> etcd_;
  std::string node_key_;
  int64_t lease_ = 0;
  Clock::time_point next_keepalive_;
  bool etcd_trouble_ = false;
  int generation_ = 0;
  std::string published_at_start_;   // PublishedEndpoints() once this node's generation started
  int interrupted_by_ = 0;   // the signal that ended registration
  std::set<std::string> warned_malformed_;   // registrations ignored, each said once
  bool left_ = false;   // Leave ran
};

// Registers this node under a fresh lease. A live registration of the same host is either the
// lease of a predecessor that died on this host (it expires within the TTL) or another fleetrun
// claiming this address: wait out one TTL before calling it a duplicate.
Status ElasticNode::Register() {
  const auto give_up = Clock::now() + std::chrono::seconds(settings_.ttl_seconds + 1);
  bool said = false;
  while (true) {
    FLEET_ASSIGN_OR_RETURN(auto kvs, etcd_->GetPrefix(nodes_prefix_));
    std::string holder;
    for (const EtcdKeyValue& kv : kvs) {
      auto node = ParseRegistration(kv.value, settings_.self.port);
      if (kv.key != node_key_ && node && node->host == settings_.self.host) holder = kv.key;
    }
    if (holder.empty()) break;
    if (Clock::now() >= give_up) {
      return Error{"duplicate host: " + settings_.self.host + " is already registered in job " + Quote(settings_.job_id) +
                   " (" + holder + ") and kept alive by another launcher; give each node its own --host"};
    }
    if (!said) Say("host " + settings_.self.host + " is still registered (" + holder + "); waiting up to " +
                   std::to_string(settings_.ttl_seconds + 1) + " s for that lease to expire");
    said = true;
    if (auto sig = WaitForSupervisedSignal(kPollSeconds)) {
      interrupted_by_ = *sig;
      return Error{std::string("received SIG") + ::sigabbrev_np(*sig) + " while registering"};
    }
  }
  FLEET_ASSIGN_OR_RETURN(lease_, etcd_->GrantLease(settings_.ttl_seconds));
  // Paddle's node key: six random letters and the time.
  std::mt19937 random(std::random_device{}());
  std::string tag;
  for (int i = 0; i < 6; ++i) tag.push_back(static_cast<char>('a' + random() % 26));
  char now[32];
  std::snprintf(now, sizeof now, "%.6f",
                std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count());
  node_key_ = nodes_prefix_ + tag + now;
  FLEET_RETURN_IF_ERROR(etcd_->Put(node_key_, settings_.self.ToString(), lease_));
  next_keepalive_ = Clock::now() + std::chrono::milliseconds(settings_.ttl_seconds * 1000 / 3);
  return OkStatus();
}

// Keeps the lease alive every TTL/3; a lease that expired anyway (etcd was unreachable for a TTL)
// is replaced: this node registers again, as a new node.
void ElasticNode::Refresh() {
  if (Clock::now() < next_keepalive_) return;
  auto alive = etcd_->KeepAlive(lease_);
  if (!alive) return EtcdTrouble(alive.error());
  etcd_trouble_ = false;
  next_keepalive_ = Clock::now() + std::chrono::milliseconds(settings_.ttl_seconds * 1000 / 3);
  if (*alive) return;
  Say("this node's etcd lease expired; registering again");
  if (auto registered = Register(); !registered) EtcdTrouble(registered.error());
}

Result<Observation> ElasticNode::Observe() {
  const auto deadline = Clock::now() + kEtcdTimeout;   // one read of the job, however many calls
  FLEET_ASSIGN_OR_RETURN(auto kvs, etcd_->GetPrefix(nodes_prefix_, deadline));
  Observation seen;
  std::vector<Registration> registered;
  for (const EtcdKeyValue& kv : kvs) {
    registered.push_back({kv.key, kv.value, kv.create_revision});
    seen.self_registered = seen.self_registered || kv.key == node_key_;
  }
  seen.registered = registered.size();
  Members chosen = ChooseMembers(std::move(registered), settings_.np.max, settings_.self.port);
  for (const auto& [key, why] : chosen.malformed) {
    if (warned_malformed_.insert(key).second) Say("WARNING: ignoring the registration " + ShowEtcdBytes(key) + ": " + why);
  }
  seen.members = std::move(chosen.nodes);
  // Read after the nodes: a node that finished sets the flag before it deregisters.
  FLEET_ASSIGN_OR_RETURN(auto flag, etcd_->Get(job_key_, deadline));
  seen.completed = flag && *flag == "1";
  etcd_trouble_ = false;
  return seen;
}

int ElasticNode::WaitForMembers(std::vector<Endpoint>* members) {
  auto short_since = Clock::now();
  std::string said;
  while (true) {
    if (auto sig = WaitForSupervisedSignal(0)) {
      Say(std::string("received SIG") + ::sigabbrev_np(*sig) + " while waiting for nodes; leaving the job.");
      Leave(false);
      return 128 + *sig;
    }
    Refresh();
    auto seen = Observe();
    std::string state;
    if (!seen) {
      EtcdTrouble(seen.error());
    } else {
      if (!seen->self_registered && lease_ != 0) {
        if (auto put = etcd_->Put(node_key_, settings_.self.ToString(), lease_); !put) EtcdTrouble(put.error());
      }
      if (seen->completed) {
        Say("job " + Quote(settings_.job_id) + " completed on other nodes; leaving it.");
        Leave(false);
        return 0;
      }
      const bool enough = static_cast<int>(seen->members.size()) >= settings_.np.min;
      if (enough && IsMember(seen->members)) {
        *members = seen->members;
        return 0;
      }
      if (enough) {
        short_since = Clock::now();   // a standby waits for a place without limit
        state = "standby: the job has its " + std::to_string(seen->members.size()) + " nodes (np=" +
                FormatNpShort(settings_.np) + "); waiting for a place";
      } else {
        state = "waiting for nodes: " + std::to_string(seen->registered) + " registered (" + Hosts(seen->members) +
                "), np=" + FormatNpShort(settings_.np);
      }
    }
    if (!state.empty() && state != said) Say(state);
    if (!state.empty()) said = state;
    const double waited = std::chrono::duration<double>(Clock::now() - short_since).count();
    if (waited > settings_.timeout_seconds) {
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", settings_.timeout_seconds);
      Say("ABORT: job " + Quote(settings_.job_id) + " had fewer than " + std::to_string(settings_.np.min) +
          " nodes (np=" + FormatNpShort(settings_.np) + ") in etcd " + settings_.server + " for " + seconds +
          " s (" + kElasticTimeoutEnv + "); last seen: " + (seen ? std::to_string(seen->registered) + " registered" : seen.error()));
      Leave(false);
      return kElasticTimeoutStatus;
    }
    if (auto sig = WaitForSupervisedSignal(kPollSeconds)) {
      Say(std::string("received SIG") + ::sigabbrev_np(*sig) + " while waiting for nodes; leaving the job.");
      Leave(false);
      return 128 + *sig;
    }
  }
}

int ElasticNode::RunGeneration(const std::vector<Endpoint>& members, bool* trainer_failed) {
  auto plan = PlanGeneration(options_, host_, members);
  if (!plan) {
    Say("error: " + plan.error());
    Leave(false);
    return 2;
  }
  ++generation_;
  const std::vector<Endpoint> trainers = plan->topology.EndpointsOf(Role::kTrainer);
  Say("elastic: starting generation " + std::to_string(generation_) + " with " + std::to_string(members.size()) +
      " nodes (" + Hosts(members) + "); this node is node " + std::to_string(plan->node_rank));
  std::cout << FormatPlan(*plan) << std::flush;
  std::ofstream(plan->log_dir + "/endpoints.log") << plan->endpoints_log;
  if (plan->node_rank == 0) {
    // Paddle's launchers read DISTRIBUTED_TRAINER_ENDPOINTS|PADDLE_TRAINERS from here.
    std::vector<std::string> endpoints;
    for (const Endpoint& e : trainers) endpoints.push_back(e.ToString());
    if (auto put = etcd_->Put(job_key_ + "/endpoints", JoinStrings(endpoints, ",") + "|" + Hosts(members)); !put) {
      EtcdTrouble(put.error());
    }
  }
  published_at_start_ = PublishedEndpoints();

  SupervisorOptions supervisor;
  supervisor.grace_period_seconds = options_.grace_period_seconds;
  supervisor.tick_seconds = kPollSeconds;
  supervisor.stop_for_change = [&] {
    Refresh();
    auto seen = Observe();
    if (!seen) {
      EtcdTrouble(seen.error());   // the trainers keep training while etcd is away
      return false;
    }
    if (!seen->self_registered) {
      if (auto put = etcd_->Put(node_key_, settings_.self.ToString(), lease_); !put) EtcdTrouble(put.error());
    }
    if (seen->completed || seen->members == members) return false;   // finishing nodes leave: no rendezvous
    Say("elastic: the job's nodes changed from " + Hosts(members) + " to " + Hosts(seen->members) +
        "; stopping the local trainers for a new rendezvous.");
    return true;
  };
  supervisor.on_process_failure = [&] { *trainer_failed = true; };
  // A node that is told to stop deregisters before its trainers go: once their connections drop,
  // the peers' trainers fail at once, and their nodes then find this one gone at once (the
  // failure's stop_for_change above) rather than a lease's TTL later (AfterTrainerFailure).
  supervisor.leaving = [&] { Leave(false); };
  return Supervise(*plan, host_.env, supervisor);
}

std::string ElasticNode::PublishedEndpoints() {
  auto value = etcd_->Get(job_key_ + "/endpoints");
  if (!value) EtcdTrouble(value.error());
  return value && *value ? **value : "";
}

// A local trainer failed with `status`. When another node is lost, the collectives of this node's
// trainers fail at once (their peer's sockets close), up to a TTL before the lost node's lease
// expires and the nodes change. And the nodes see a change at different moments: a node that saw
// it first starts its trainers while node 0's trainers still serve the old generation's
// rendezvous, which refuses them (another endpoint list); node 0 then starts the new generation
// and publishes its endpoints. So wait up to one TTL (and a second for etcd to expire the lease)
// for the nodes to change or node 0 to start a generation after this node's: then this node
// rendezvouses again (kStoppedForChange); else the failure is the trainer's own, and its status is
// fleetrun's.
int ElasticNode::AfterTrainerFailure(const std::vector<Endpoint>& members, int status) {
  const int wait_seconds = settings_.ttl_seconds + 1;
  Say("elastic: waiting up to " + std::to_string(wait_seconds) +
      " s (" + kElasticTtlEnv + " + 1) for the job's nodes to change: a lost node makes the other nodes' trainers fail "
      "before its lease expires.");
  const auto give_up = Clock::now() + std::chrono::seconds(wait_seconds);
  while (Clock::now() < give_up) {
    if (auto sig = WaitForSupervisedSignal(kPollSeconds)) {
      Say(std::string("received SIG") + ::sigabbrev_np(*sig) + " while waiting for nodes; leaving the job.");
      return 128 + *sig;
    }
    Refresh();
    auto seen = Observe();
    if (!seen) {
      EtcdTrouble(seen.error());
      continue;
    }
    if (seen->completed) break;
    if (seen->members != members) {
      Say("elastic: the job's nodes changed from " + Hosts(members) + " to " + Hosts(seen->members) +
          ": the trainer failed with its lost peer; rendezvous again.");
      return kStoppedForChange;
    }
    if (const std::string published = PublishedEndpoints(); !published.empty() && published != published_at_start_) {
      Say("elastic: node 0 started a generation after this node's (" + published +
          "): the trainer failed meeting the older one; rendezvous again.");
      return kStoppedForChange;
    }
  }
  Say("ABORT: the job's nodes did not change in " + std::to_string(wait_seconds) +
      " s: the trainer's failure is its own.");
  return status;
}

// Deregisters (once; again is a no-op); the last node to leave removes the job's keys. All of it
// within one etcd timeout: fleetrun is on its way out, and an etcd that does not answer must not
// hold it there once per call (a lease that is not revoked expires within its TTL anyway).
void ElasticNode::Leave(bool completed) {
  if (left_) return;
  left_ = true;
  const auto deadline = Clock::now() + kEtcdTimeout;
  auto warn = [&](const Status& s) {
    if (!s) Say("WARNING: could not clean up etcd: " + s.error());
  };
  if (completed) warn(etcd_->Put(job_key_, "1", /*lease=*/0, deadline));
  if (lease_ != 0) warn(etcd_->RevokeLease(lease_, deadline));
  if (!node_key_.empty()) warn(etcd_->Delete(node_key_, deadline));
  lease_ = 0;
  node_key_.clear();
  auto left = etcd_->GetPrefix(nodes_prefix_, deadline);
  if (left && left->empty()) {
    warn(etcd_->DeletePrefix(job_key_ + "/", deadline));
    warn(etcd_->Delete(job_key_, deadline));
  }
}

int ElasticNode::Run() {
  auto client = EtcdClient::Create(settings_.server, kEtcdTimeout);
  if (!client) {
    Say("error: " + client.error());
    return 2;
  }
  etcd_ = std::move(*client);
  if (auto reachable = etcd_->GetPrefix(nodes_prefix_); !reachable) {
    Say("error: cannot reach etcd at " + settings_.server + " (--elastic_server/" + kElasticServerEnv + "): " +
        reachable.error());
    return 2;
  }
  if (auto registered = Register(); !registered) {
    Say("error: " + registered.error());
    return interrupted_by_ ? 128 + interrupted_by_ : 2;
  }
  if (auto running = etcd_->Put(job_key_, "0"); !running) EtcdTrouble(running.error());
  Say("elastic: registered " + settings_.self.ToString() + " in job " + Quote(settings_.job_id) + " at " +
      settings_.server + " (np=" + FormatNpShort(settings_.np) + ", TTL " + std::to_string(settings_.ttl_seconds) + " s)");
  while (true) {
    std::vector<Endpoint> members;
    if (const int status = WaitForMembers(&members); status != 0 || members.empty()) return status;
    bool trainer_failed = false;
    int status = RunGeneration(members, &trainer_failed);
    if (trainer_failed && status != kElasticRelaunchCode) status = AfterTrainerFailure(members, status);
    if (status == kStoppedForChange) continue;
    if (status == kElasticRelaunchCode) {
      Say("elastic: a trainer exited with " + std::to_string(kElasticRelaunchCode) + " (relaunch); rendezvous again.");
      continue;
    }
    Leave(status == 0);
    return status;
  }
}

}  // namespace

Result<NpRange> ParseNp(std::string_view text) {
  auto np = ParseNpRange(text);
  if (!np) return Error{std::string("--np/") + kElasticNpEnv + " " + Quote(text) + ": " + np.error()};
  return np;
}

Result<std::optional<ElasticSettings>> ElasticSettingsFrom(const LaunchOptions& o, const EnvMap& env) {
  std::optional<std::string> server = o.elastic_server ? NonEmpty(&*o.elastic_server) : NonEmpty(FindEnv(env, kElasticServerEnv));
  // Paddle also finds etcd through a Kubernetes service named paddle-elastic-etcd.
  const std::string* service_host = FindEnv(env, kElasticEtcdServiceHostEnv);
  const std::string* service_port = FindEnv(env, kElasticEtcdServicePortEnv);
  if (!server && service_host && service_port) server = *service_host + ":" + *service_port;
  const auto job = o.job_id ? NonEmpty(&*o.job_id) : NonEmpty(FindEnv(env, kElasticJobIdEnv));
  const auto np_text = o.np ? NonEmpty(&*o.np) : NonEmpty(FindEnv(env, kElasticNpEnv));
  if (!server || !job || !np_text) {
    // Paddle's rule for the env: all three, or not elastic. A flag given alone is a mistake, but for
    // --job_id: the 2.3+ launcher's job id (PADDLE_JOB_ID) also names jobs that are not elastic.
    if (o.elastic_server || o.np) {
      return Error{std::string("elastic training needs --elastic_server, --job_id and --np (or ") + kElasticServerEnv +
                   ", " + kElasticJobIdEnv + " and " + kElasticNpEnv + "), each non-empty"};
    }
    return std::optional<ElasticSettings>();
  }
  ElasticSettings s;
  s.server = *server;
  if (auto endpoint = ParseEndpoint(s.server); !endpoint) return Error{"--elastic_server: " + endpoint.error()};
  s.job_id = *job;
  if (auto id = CheckElasticJobId(s.job_id); !id) return Error{"--job_id " + id.error()};
  FLEET_ASSIGN_OR_RETURN(s.np, ParseNp(*np_text));

  const bool ps = o.server_num || o.worker_num || o.servers || o.workers || o.heter_workers || o.heter_worker_num ||
                  (o.run_mode && *o.run_mode != "collective");
  if (ps) return Error{"elastic training is for collective jobs only, as in Paddle; drop the parameter-server flags"};
  if (o.ips != "127.0.0.1") return Error{"--ips cannot be combined with elastic training: the nodes come from etcd"};
  const auto self = o.host ? NonEmpty(&*o.host) : NonEmpty(FindEnv(env, "POD_IP"));
  if (!self) return Error{"elastic training needs this node's address: pass --host or set POD_IP"};
  auto host = ParseHost(*self);
  if (!host) return Error{"--host: " + host.error()};
  s.self.host = *host;
  s.self.port = kElasticDefaultStartPort;
  if (o.start_port) {
    s.self.port = *o.start_port;
  } else if (const std::string* flag = FindEnv(env, "FLAGS_START_PORT")) {
    FLEET_ASSIGN_OR_RETURN(s.self.port, ParsePort(TrimWhitespace(*flag), "FLAGS_START_PORT"));
  }
  if (o.elastic_timeout) {
    s.timeout_seconds = *o.elastic_timeout;
  } else {
    FLEET_ASSIGN_OR_RETURN(s.timeout_seconds, PositiveSeconds(env, kElasticTimeoutEnv, kElasticDefaultTimeoutSeconds));
  }
  FLEET_ASSIGN_OR_RETURN(double ttl, PositiveSeconds(env, kElasticTtlEnv, kElasticDefaultTtlSeconds));
  if (ttl != std::floor(ttl) || ttl < 2) {
    return Error{std::string(kElasticTtlEnv) + " must be a whole number of seconds, at least 2"};
  }
  s.ttl_seconds = static_cast<int>(ttl);
  return std::optional<ElasticSettings>(std::move(s));
}

Result<Endpoint> ParseRegistration(std::string_view value, int default_port) {
  if (value.find(':') != std::string_view::npos) return ParseEndpoint(value);
  auto host = ParseHost(value);
  if (!host) return Error{host.error()};
  return Endpoint{*host, default_port};
}

Members ChooseMembers(std::vector<Registration> registered, int max, int default_port) {
  std::stable_sort(registered.begin(), registered.end(), [](const Registration& a, const Registration& b) {
    return a.create_revision < b.create_revision;
  });
  Members members;
  for (const Registration& r : registered) {
    if (static_cast<int>(members.nodes.size()) >= max) break;
    auto node = ParseRegistration(r.value, default_port);
    if (!node) {
      members.malformed[r.key] = "its value " + ShowEtcdBytes(r.value) + " is not one node's host:port";
      continue;
    }
    // A host registered twice is one node (a restarted launcher whose old lease has not expired).
    const bool known = std::any_of(members.nodes.begin(), members.nodes.end(),
                                   [&](const Endpoint& e) { return e.host == node->host; });
    if (!known) members.nodes.push_back(*node);
  }
  return members;
}

Result<LaunchPlan> PlanGeneration(const LaunchOptions& options, const HostFacts& host,
                                  const std::vector<Endpoint>& members) {
  if (members.empty()) return Error{"no nodes to plan for"};
  for (const Endpoint& e : members) {
    if (e.port != members.front().port) {
      return Error{"the job's nodes registered different first ports (" + members.front().ToString() + ", " +
                   e.ToString() + "): give every node the same --start_port / FLAGS_START_PORT"};
    }
  }
  LaunchOptions generation = options;
  generation.ips = Hosts(members);
  generation.start_port = members.front().port;
  generation.elastic_server.reset();
  generation.job_id.reset();
  generation.np.reset();
  return PlanLaunch(generation, host);
}

int RunElastic(const LaunchOptions& options, const HostFacts& host, const ElasticSettings& settings) {
  // Before the etcd client starts its I/O threads: they inherit the mask, so that these signals
  // reach only sigtimedwait and Supervise's signalfd, never a default action in another thread.
  sigset_t previous;
  ::pthread_sigmask(SIG_BLOCK, &SupervisedSignals(), &previous);
  const int status = ElasticNode(options, host, settings).Run();
  ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  return status;
}

}  // namespace fleet::launcher
