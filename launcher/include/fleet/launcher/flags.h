// fleetrun's command line: Paddle's launcher flags (fleetrun / paddle.distributed.launch), then the
// training script and its arguments. Parsing is strict: an unknown flag, a malformed value or one
// of Paddle's flags fleetrun does not support is an error before anything starts.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "fleet/base/result.h"

namespace fleet::launcher {

struct LaunchOptions {
  // Collective.
  std::optional<std::string> gpus;     // physical GPU ids, default: CUDA_VISIBLE_DEVICES
  std::string ips = "127.0.0.1";       // node addresses, in rank order
  std::optional<int> nproc_per_node;
  std::optional<int> start_port;       // else FLAGS_START_PORT, else 6070 / free ports
  // Parameter server.
  std::optional<int> server_num;
  std::optional<int> worker_num;
  std::optional<std::string> servers;
  std::optional<std::string> workers;
  std::optional<std::string> heter_workers;     // stages separated by ';'
  std::optional<std::string> heter_worker_num;  // per stage, separated by ';'
  std::optional<std::string> heter_devices;     // per stage: cpu, gpu or xpu, separated by ';'
  std::optional<int> http_port;
  // Both.
  std::optional<std::string> host;     // this node's address; default POD_IP, else local addresses
  std::optional<std::string> run_mode; // collective, ps, ps-heter; derived when omitted
  std::string log_dir = "log";
  // Elastic (elastic.h): etcd host:port, the job's id in it, and "N" or "MIN:MAX" nodes.
  std::optional<std::string> elastic_server;
  std::optional<std::string> job_id;
  std::optional<std::string> np;
  double grace_period_seconds = 5.0;   // SIGTERM -> SIGKILL delay when stopping processes
  // PS jobs: how long the parameter servers have to accept connections before the job is stopped
  // (0: wait as long as it takes, as Paddle's launcher does).
  double server_timeout_seconds = 300.0;

  std::string training_script;
  std::vector<std::string> training_script_args;
  bool help = false;
  bool version = false;

  // Flags as given, for the "Configuration Arguments" table.
  std::vector<std::pair<std::string, std::string>> Describe() const;
};

Result<LaunchOptions> ParseFlags(const std::vector<std::string>& args);

std::string UsageText();

}  // namespace fleet::launcher
