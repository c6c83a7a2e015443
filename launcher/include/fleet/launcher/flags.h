// fleetrun's command line: Paddle's launcher flags (the legacy fleetrun and the 2.3+
// `python -m paddle.distributed.launch`), then the training script and its arguments. Parsing is
// strict: an unknown flag, a malformed value or one of Paddle's flags fleetrun does not support is
// an error before anything starts. ApplyLauncherEnv then lets the env the 2.3+ launcher reads
// (PADDLE_MASTER, PADDLE_NNODES, ...) override the flags, as Paddle does.
#pragma once

#include <optional>
#include <string_view>
#include <string>
#include <vector>

#include "fleet/base/result.h"
#include "fleet/runtime/elastic_contract.h"
#include "fleet/runtime/env_contract.h"

namespace fleet::launcher {

struct LaunchOptions {
  // Collective.
  std::optional<std::string> gpus;     // physical GPU ids (--gpus, --devices), default: CUDA_VISIBLE_DEVICES
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
  // Elastic (elastic.h): etcd host:port, the job's id in it, and "N" or "MIN:MAX" nodes (NpRange).
  std::optional<std::string> elastic_server;
  std::optional<std::string> job_id;
  std::optional<std::string> np;
  std::optional<double> elastic_timeout;   // else PADDLE_ELASTIC_TIMEOUT's own default
  // Paddle 2.3+ launcher (master.h): "ip:port" (an HTTP rendezvous served by the node whose address
  // that is) or "etcd://host:port" (elastic, mapped onto elastic_server/np above); the node count
  // "N" or "MIN:MAX"; this node's rank among the nodes.
  std::optional<std::string> master;
  std::optional<std::string> nnodes;
  std::optional<int> rank;
  std::optional<int> max_restart;      // accepted for Paddle's command lines; see docs/fleetrun.md
  std::optional<std::string> log_level;
  double rendezvous_timeout_seconds = 600.0;   // HTTP master: how long to wait for every node
  double grace_period_seconds = 5.0;   // SIGTERM -> SIGKILL delay when stopping processes
  // PS jobs: how long the parameter servers have to accept connections before the job is stopped
  // (0: wait as long as it takes, as Paddle's launcher does).
  double server_timeout_seconds = 300.0;

  std::string training_script;
  std::vector<std::string> training_script_args;
  bool help = false;
  bool version = false;
  std::vector<std::string> flags_given;   // "--rank", ...: for saying which flag an env value overrides

  // Flags as given, for the "Configuration Arguments" table.
  std::vector<std::pair<std::string, std::string>> Describe() const;
};

Result<LaunchOptions> ParseFlags(const std::vector<std::string>& args);

// Paddle 2.3+'s env over the flags (env_args_mapping in context/args_envs.py): POD_IP -> --host,
// PADDLE_MASTER, PADDLE_NNODES, PADDLE_RANK, PADDLE_JOB_ID, PADDLE_NPROC_PER_NODE, PADDLE_DEVICES,
// PADDLE_RUN_MODE, PADDLE_LOG_DIR, PADDLE_LOG_LEVEL, PADDLE_MAX_RESTART, PADDLE_ELASTIC_TIMEOUT; an
// empty value counts as unset. Then an etcd:// master becomes the elastic settings (--elastic_server
// host:port, --np from --nnodes, --job_id, default "default"). Returns one line per thing worth
// logging (each env value that was applied); errors name the flag or variable and the value.
Result<std::vector<std::string>> ApplyLauncherEnv(LaunchOptions& options, const EnvMap& env);

// The HTTP master of a launch ("ip:port"), when it has one.
std::optional<std::string> HttpMaster(const LaunchOptions& options);

std::string UsageText();

}  // namespace fleet::launcher
