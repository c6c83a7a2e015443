// Elastic fleetrun on loopback, for the elastic tests (fleetrun_elastic_test.cc) and the recovery
// benchmark (bench/elastic_recovery.cc): a real etcd (Debian's etcd-server) on free ports with its
// data in a temp dir, and fleetrun processes, one per node, each with --host on its own 127.0.0.x.
// The default trainer (elastic.sh) dumps its env into env/ once per generation and then runs until
// `finish` exists; the dumps tell which generation runs where.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <set>

#include "e2e_util.h"
#include "fleet/base/strings.h"
#include "fleet/launcher/etcd.h"
#include "fleet/runtime/env_contract.h"

namespace fleet {

constexpr char kEnvDumpTrainerSh[] = R"SH(#!/bin/sh
f="$FLEET_TEST_DIR/env/$PADDLE_CURRENT_ENDPOINT.$$"
env -0 > "$f.tmp" && mv "$f.tmp" "$f"
while [ ! -e "$FLEET_TEST_DIR/finish" ]; do sleep 0.05; done
)SH";

// fork/exec with its own env, cwd and output files; -1 on failure.
inline pid_t SpawnWithEnv(const std::vector<std::string>& args, const EnvMap& env, const fs::path& cwd,
                          const fs::path& output) {
  std::vector<std::string> arg_strings = args, env_strings;
  for (const auto& [name, value] : env) env_strings.push_back(name + "=" + value);
  std::vector<char*> argv, envp;
  for (std::string& s : arg_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  const std::string dir = cwd.string(), out = output.string();
  const pid_t pid = ::fork();
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    const int in_fd = ::open("/dev/null", O_RDONLY);
    const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (::chdir(dir.c_str()) != 0 || in_fd < 0 || out_fd < 0) ::_exit(126);
    ::dup2(in_fd, 0);
    ::dup2(out_fd, 1);
    ::dup2(out_fd, 2);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

// Exit status (128+signal for a signal) within `seconds`, else -1 (and the process is killed).
inline int WaitForExit(pid_t pid, double seconds) {
  const auto start = Clock::now();
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (SecondsSince(start) > seconds) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

inline std::string Host(int node) { return "127.0.0." + std::to_string(node); }

class ElasticCluster {
 public:
  static constexpr int kPort = 6170;

  // The etcd binary, "" when none is installed.
  static std::string EtcdBinary() {
    std::string found;
    for (const char* candidate : {"/usr/bin/etcd", "/usr/local/bin/etcd"}) {
      if (::access(candidate, X_OK) == 0) found = candidate;
    }
    return found;
  }

  ElasticCluster(const ElasticCluster&) = delete;
  ElasticCluster& operator=(const ElasticCluster&) = delete;
  ElasticCluster() = default;
  ~ElasticCluster() { Stop(/*keep_files=*/false); }

  // Makes the temp dir and starts etcd (`fleetrun` is the binary the nodes run); "" or what failed.
  std::string Start(const std::string& fleetrun, int ttl_seconds) {
    fleetrun_ = fleetrun;
    ttl_seconds_ = ttl_seconds;
    std::string pattern = (fs::temp_directory_path() / "fleetrun-elastic-XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) return std::string("mkdtemp: ") + std::strerror(errno);
    root_ = pattern;
    fs::create_directories(root_ / "env");
    std::ofstream(root_ / "elastic.sh") << kEnvDumpTrainerSh;
    fs::permissions(root_ / "elastic.sh", fs::perms::owner_all);

    const int client_port = FreeLoopbackPort(), peer_port = FreeLoopbackPort();
    server_ = "127.0.0.1:" + std::to_string(client_port);
    const std::string client_url = "http://" + server_, peer_url = "http://127.0.0.1:" + std::to_string(peer_port);
    etcd_pid_ = SpawnWithEnv({EtcdBinary(), "--name=test", "--data-dir=" + (root_ / "etcd-data").string(),
                              "--listen-client-urls=" + client_url, "--advertise-client-urls=" + client_url,
                              "--listen-peer-urls=" + peer_url, "--initial-advertise-peer-urls=" + peer_url,
                              "--initial-cluster=test=" + peer_url},
                             {{"PATH", "/usr/bin:/bin"}}, root_, root_ / "etcd.log");
    if (etcd_pid_ <= 0) return "cannot start etcd";
    auto client = launcher::EtcdClient::Create(server_, std::chrono::milliseconds(1000));
    if (!client.ok()) return client.error();
    etcd_ = std::move(*client);
    if (!WaitUntil([&] { return etcd_->GetPrefix("/").ok(); }, 10)) return "etcd did not answer:\n" + ReadFile(root_ / "etcd.log");
    return "";
  }

  // Kills every node and etcd; removes the temp dir unless `keep_files` (then says where it is).
  void Stop(bool keep_files) {
    for (auto& [node, pid] : nodes_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    nodes_.clear();
    if (etcd_pid_ > 0) {
      ::kill(etcd_pid_, SIGKILL);
      ::waitpid(etcd_pid_, nullptr, 0);
      etcd_pid_ = -1;
    }
    if (root_.empty()) return;
    if (keep_files) {
      for (const auto& entry : fs::directory_iterator(root_)) {
        if (entry.path().filename().string().rfind("node", 0) == 0) {
          std::cerr << "--- " << entry.path().filename().string() << "/out:\n" << ReadFile(entry.path() / "out");
        }
      }
      std::cerr << "kept " << root_ << " for inspection\n";
    } else {
      std::error_code ignored;
      fs::remove_all(root_, ignored);
    }
    root_.clear();
  }

  size_t Registered(const std::string& job) {
    auto kvs = etcd_->GetPrefix("/paddle/" + job + "/nodes/");
    return kvs.ok() ? kvs->size() : 0;
  }

  // The env every node's fleetrun starts with (`extra` on top).
  EnvMap NodeEnv(const EnvMap& extra) const {
    EnvMap env = {{"PATH", "/usr/local/bin:/usr/bin:/bin"}, {"FLEET_TEST_DIR", root_.string()},
                  {"CUDA_VISIBLE_DEVICES", ""}, {"PADDLE_ELASTIC_TTL", std::to_string(ttl_seconds_)}};
    for (const auto& [name, value] : extra) env[name] = value;
    return env;
  }

  // Starts `fleetrun args...` as node 127.0.0.<node> (in root/node<node>); false if it could not.
  bool StartFleetrun(int node, const std::vector<std::string>& args, const EnvMap& extra = {}) {
    const fs::path dir = root_ / ("node" + std::to_string(node));
    fs::create_directories(dir);
    std::vector<std::string> argv = {fleetrun_};
    argv.insert(argv.end(), args.begin(), args.end());
    const pid_t pid = SpawnWithEnv(argv, NodeEnv(extra), dir, dir / "out");
    if (pid <= 0) return false;
    nodes_[node] = pid;
    return true;
  }

  // Starts elastic fleetrun for node 127.0.0.<node> running `script` (default: the env dump) and
  // waits until it has registered, so that nodes take their ranks in the order they are started.
  bool StartNode(int node, const std::string& job, const std::string& np, const EnvMap& extra = {},
                 const std::string& script = "") {
    const size_t before = Registered(job);
    if (!StartFleetrun(node, {"--elastic_server=" + server_, "--job_id=" + job, "--np=" + np, "--host=" + Host(node),
                              "--start_port=" + std::to_string(kPort), "--grace_period=1",
                              script.empty() ? (root_ / "elastic.sh").string() : script},
                       extra)) {
      return false;
    }
    if (WaitUntil([&] { return Registered(job) > before; }, 5)) return true;
    std::cerr << "node " << node << " did not register:\n" << Output(node);
    return false;
  }

  std::string Output(int node) { return ReadFile(root_ / ("node" + std::to_string(node)) / "out"); }

  // Every env dump so far, by file name, read with the contract parser; `errors` gets those it refused.
  std::map<std::string, ParsedRole> Dumps(std::vector<std::string>* errors = nullptr) {
    std::map<std::string, ParsedRole> dumps;
    for (const auto& entry : fs::directory_iterator(root_ / "env")) {
      const std::string name = entry.path().filename().string();
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) continue;
      auto parsed = ParseProcessEnv(ReadEnvDump(entry.path()), RoleMakerKind::kCollective);
      if (parsed.ok()) {
        dumps.emplace(name, *parsed);
      } else if (errors) {
        errors->push_back(name + ": " + parsed.error());
      }
    }
    return dumps;
  }

  std::set<std::string> DumpNames() {
    std::set<std::string> names;
    for (const auto& [name, role] : Dumps()) names.insert(name);
    return names;
  }

  // Waits until every node of `ranked` (in rank order) has a trainer, started after `seen`, whose
  // env is that of this membership; returns the seconds it took, or -1.
  double WaitForGeneration(const std::vector<int>& ranked, const std::set<std::string>& seen, double seconds) {
    std::vector<std::string> endpoints;
    for (int node : ranked) endpoints.push_back(Host(node) + ":" + std::to_string(kPort));
    const auto start = Clock::now();
    const bool done = WaitUntil([&] {
      std::set<std::string> running;
      for (const auto& [name, role] : Dumps()) {
        if (!seen.count(name) && role.trainer_endpoints == endpoints) running.insert(role.current_endpoint);
      }
      return running.size() == endpoints.size();
    }, seconds);
    return done ? SecondsSince(start) : -1;
  }

  // The node's fleetrun's exit status within `seconds` (see WaitForExit); it is forgotten.
  int WaitForNode(int node, double seconds) {
    const int status = WaitForExit(nodes_.at(node), seconds);
    nodes_.erase(node);
    return status;
  }

  const fs::path& Root() const { return root_; }

  void KillNode(int node, int sig) {
    ::kill(nodes_.at(node), sig);
    ::waitpid(nodes_.at(node), nullptr, 0);
    nodes_.erase(node);
  }

 protected:
  std::string fleetrun_;
  int ttl_seconds_ = 0;
  fs::path root_;
  std::string server_;
  pid_t etcd_pid_ = -1;
  std::unique_ptr<launcher::EtcdClient> etcd_;
  std::map<int, pid_t> nodes_;
};

}  // namespace fleet
