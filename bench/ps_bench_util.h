// Shared by the parameter-server benchmarks: free ports, fleet-ps-server processes, a process's
// CPU time, medians.
#pragma once

#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "fleet/launcher/host.h"
#include "fleet/ps/client.h"

extern char** environ;

namespace fleet::ps::bench {

using Clock = std::chrono::steady_clock;


// Starts `count` fleet-ps-server processes of one job; returns their pids, fills endpoints.
inline std::vector<pid_t> StartPsServers(const std::string& binary, int count, int trainers,
                                         std::vector<std::string>* endpoints) {
  auto ports = fleet::launcher::FindFreePorts(count);
  if (!ports.ok()) {
    std::fprintf(stderr, "%s\n", ports.error().c_str());
    return {};
  }
  std::string list;
  for (int port : *ports) {
    endpoints->push_back("127.0.0.1:" + std::to_string(port));
    list += (list.empty() ? "" : ",") + endpoints->back();
  }
  std::vector<pid_t> pids;
  for (int i = 0; i < count; ++i) {
    std::vector<std::string> env = {"TRAINING_ROLE=PSERVER", "PADDLE_PSERVERS_IP_PORT_LIST=" + list,
                                    "PADDLE_TRAINERS_NUM=" + std::to_string(trainers), "POD_IP=127.0.0.1",
                                    "PADDLE_PORT=" + (*endpoints)[static_cast<size_t>(i)].substr(10)};
    for (char** e = environ; *e; ++e) {
      // glibc's and gRPC's knobs pass through (MALLOC_*, GRPC_POLL_STRATEGY, ...).
      const std::string var = *e;
      if (var.rfind("MALLOC_", 0) == 0 || var.rfind("GRPC_", 0) == 0) env.push_back(var);
    }
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string bin = binary;
    char* argv[] = {bin.data(), nullptr};
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", 0, 0);  // its log lines
    pid_t pid = -1;
    ::posix_spawn(&pid, bin.c_str(), &actions, nullptr, argv, envp.data());
    posix_spawn_file_actions_destroy(&actions);
    pids.push_back(pid);
  }
  return pids;
}

inline void StopProcesses(const std::vector<pid_t>& pids) {
  for (pid_t p : pids) ::kill(p, SIGTERM);
  for (pid_t p : pids) ::waitpid(p, nullptr, 0);
}

// User + system CPU seconds a process has used so far (/proc/<pid>/stat).
inline double CpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), {});
  const auto close = all.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream rest(all.substr(close + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// Connects one client per trainer (0..trainers-1) to `endpoints`; prints the error and returns
// false if one cannot connect.
inline bool ConnectTrainers(const std::vector<std::string>& endpoints, int trainers,
                            std::vector<std::unique_ptr<PsClient>>* clients) {
  for (int t = 0; t < trainers; ++t) {
    ClientOptions o;
    o.servers = endpoints;
    o.trainer_id = t;
    o.trainers = trainers;
    o.connect_timeout = std::chrono::seconds(30);
    o.retry_interval = std::chrono::milliseconds(100);
    std::unique_ptr<PsClient> c;
    if (Status s = PsClient::Connect(o, &c); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return false;
    }
    clients->push_back(std::move(c));
  }
  return true;
}

inline double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

}  // namespace fleet::ps::bench
