// PlanLaunch: the pure part of fleetrun. From the flags and the facts of this host it computes the
// job topology, which of its processes run here, their env, argv and log files. No I/O: the host
// facts (addresses, GPUs, free ports, files) come in through HostFacts, so every rule is testable.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "fleet/launcher/flags.h"
#include "fleet/runtime/env_contract.h"
#include "fleet/runtime/topology.h"

namespace fleet::launcher {

struct HostFacts {
  EnvMap env;                                   // fleetrun's own environment
  std::vector<std::string> local_addresses;     // this machine's addresses and names
  int gpu_count = 0;                            // GPUs present when CUDA_VISIBLE_DEVICES is unset
  std::function<Result<std::vector<int>>(int count)> free_ports;  // distinct free TCP ports
  // How the training script runs: resolves it to argv[0] and checks it exists.
  std::function<Result<std::string>(const std::string& script)> resolve_program;
  std::string gloo_dir;                         // a fresh directory for PADDLE_GLOO_FS_PATH
};

struct LocalProcess {
  Process process;                 // its place in the topology
  EnvMap env;                      // the contract variables, set over fleetrun's own environment
  std::vector<std::string> argv;
  std::string log_file;            // e.g. workerlog.0, relative to the log dir
  bool echo_to_terminal = false;   // local worker 0's output is shown on the terminal
};

struct LaunchPlan {
  Topology topology;
  int node_rank = 0;
  std::vector<LocalProcess> processes;   // in start order: servers, trainers, heter trainers
  std::string log_dir;
  std::string endpoints_log;             // content of endpoints.log
  std::vector<std::string> notes;        // things worth telling the user (e.g. flags ignored)
  // Paddle's PS path on a managed cluster: the platform already set the role env; run the script
  // once with the environment unchanged.
  bool direct_start = false;
};

// The job's nodes as an HTTP master's rendezvous agreed on them (master.h): hosts and trainer ports
// in node-rank order, this node's rank, and PADDLE_MASTER (node 0's spare port, for the trainers'
// own TCP store).
struct NodeRendezvous {
  std::vector<std::string> hosts;
  std::vector<std::vector<int>> ports;
  int node_rank = 0;
  Endpoint collective_master;
};

// With `rendezvous`, a collective job over those nodes (the flags' and the env's node lists are
// not read) whose processes also get PADDLE_MASTER.
Result<LaunchPlan> PlanLaunch(const LaunchOptions& options, const HostFacts& host,
                              const NodeRendezvous* rendezvous = nullptr);

// How many trainers a collective job runs on this node: --nproc_per_node, else one per GPU (one
// on CPU).
Result<int> LocalTrainerCount(const LaunchOptions& options, const HostFacts& host);

// The variables with which a platform describes a PaddleCloud-style cluster (cluster_env.h). A
// launcher that finds the nodes itself (elastic, HTTP master) removes them from its trainers' env.
const std::vector<std::string>& ClusterInputNames();

// The command that runs a training script: `python3 -u script args` for .py, else the program.
std::vector<std::string> ScriptCommand(const std::string& program, const LaunchOptions& options);

}  // namespace fleet::launcher
