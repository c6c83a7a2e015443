// Executable models of Paddle's own launchers, version by version: how each reads a pod's env and
// its command line, and what the whole job then does. A held-out judge for the operator's tests.
//
// Written from reading Paddle's Python (no code copied); each rule in paddle_model.cc names the
// Paddle file and function it models. Sources read: tianhaodongbd/Paddle 6c56cf90 (release/2.5),
// a5a124e0 (2.6 branch point), 646f6c64 (3.0-dev); umiswing/Paddle 590b4dbc (v2.3.0);
// YanhuiDua/Paddle fd9d6fda (v2.0.0), b031c389 (v2.2.2). No 2.4 source was read: k2_4 is modelled
// as 2.5 (see the .cc).
//
// What the model does not know it makes explicit: free ports Paddle picks at random are numbered
// from kFreePortBase; the order of nodes whose rank comes from random pod names is shown as the
// nodes' order in the job, with their node_rank -1 and JobOutcome::deterministic false.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fleet::paddle_model {

enum class Version { k2_0, k2_2, k2_3, k2_4, k2_5, k2_6, k3_0 };
std::string_view VersionName(Version version);

using Env = std::map<std::string, std::string>;

// Stand-in for the random free ports the new launcher takes from PORT_RANGE (35100:64000): a node's
// rendezvous candidate port is kFreePortBase, its processes' ports kFreePortBase + 1 + i.
inline constexpr int kFreePortBase = 35100;

// One pod as Paddle sees it.
struct Node {
  Env env;                          // the container's env, resolved as the kubelet does
  std::vector<std::string> args;    // the launcher's own arguments: {"--nproc_per_node", "2", "train.py"}
  std::string hostname_ip;          // what gethostbyname(getfqdn()) gives in the pod ("" = fails: 127.0.0.1)
  std::vector<std::string> names;   // DNS names that reach this pod (hostname, a Service's name)
  int visible_gpus = 0;             // GPUs the pod sees (0: CPU only)
  std::string workdir = "/";        // the container's working directory (relative log dirs)
};

// The new launcher (python -m paddle.distributed.launch, 2.3+) on one node.
struct NewLauncherNode {
  std::optional<std::string> crash;  // the launcher exits with this error
  bool legacy_fallback = false;      // Context.is_legacy_mode(): runs paddle.distributed.fleet.launch
  std::string own_ip;                // ctx.node.ip after rewrite_host_ip
  std::optional<std::string> master; // after env-over-args and collective_compatible; nullopt: none
  bool etcd = false;
  std::string etcd_host, etcd_port;  // after Paddle's strip("etcd://")
  bool serves_master = false;        // HTTP master: its host is 127.0.0.1 or own_ip (or no master)
  std::string nnodes = "1";          // "N" or "MIN:MAX" as it ends up
  int replicas = 1;                  // Job replicas: N, or MAX when elastic
  int replicas_min = 1;
  int rank = -1;                     // -1: decided at the rendezvous
  std::string job_id = "default";
  std::string log_dir = "log";
  int nproc = 1;                     // processes it starts (pod_replicas)
  bool ps_mode = false;              // PSController chosen
  std::vector<std::string> ps_servers, ps_trainers;  // PS from lists: the endpoints this node runs
  bool with_args = false;            // CollectiveController._build_pod_with_args (--ips, no master)
  bool sort_ip = false;              // 2.6+: PADDLE_SORT_IP / --sort_ip orders peers by IP
  std::vector<std::string> ips;      // with_args: the node list
  int start_port = 6070;             // with_args: the first port
  std::vector<std::string> selected_devices;  // FLAGS_selected_gpus per process ("" = gloo)
  Env base_env;                      // the env every process inherits (proxies dropped)
  std::string workdir = "/";
};
NewLauncherNode ModelNewLauncher(Version version, const Node& node);

// A whole job: every node's outcome, then the rendezvous as Paddle does it.
struct JobOutcome {
  std::optional<std::string> crash;  // some node's launcher exits with this error
  bool hangs = false;                // some node never starts training
  std::string why;                   // what went wrong (crash, hang, alone, swapped endpoints)
  std::vector<int> node_rank;        // per node; -1 where it comes from a random pod name
  bool deterministic = false;        // every node's rank fixed by its env and args
  std::vector<Env> process_env;      // per process, node by node: Paddle's per-process env
  bool trains_alone = false;         // some node runs as a one-node job
  bool Trains() const { return !crash && !hangs && !trains_alone; }
};
// Nodes that all fall back to the legacy launcher (2.3) are simulated by SimulateLegacyJob, as a
// GPU build when any node has a GPU.
JobOutcome SimulateNewLauncherJob(Version version, const std::vector<Node>& nodes);

// The legacy launcher (Paddle 2.x fleetrun = python -m paddle.distributed.fleet.launch) on a node.
struct LegacyNode {
  std::optional<std::string> crash;
  bool cloud_mode = false;  // PaddleCloud: PADDLE_TRAINERS, POD_IP, PADDLE_TRAINER_ID, TRAINER_PORTS_NUM set, PADDLE_TRAINERS_NUM != 1
  bool ps_mode = false;     // which_distributed_mode chose parameter-server
  int node_rank = 0;        // index of the pod it takes in the cluster
  int pod_ip_index = 0;     // index of POD_IP (or the host) in the node list
  int nnodes = 1;
  int nproc = 1;
  std::vector<std::string> node_endpoints;  // this node's process endpoints
  std::vector<Env> process_env;
};
LegacyNode ModelLegacyLauncher(Version version, const Node& node, bool gpu_build);
JobOutcome SimulateLegacyJob(Version version, const std::vector<Node>& nodes, bool gpu_build);

// PaddleFormers' CLI (paddleformers-cli train): its env edits and the new-launcher command line it
// builds. The result is the node the new launcher then sees.
Node PaddleFormersCli(const Node& node);

}  // namespace fleet::paddle_model
