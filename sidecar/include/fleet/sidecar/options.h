// fleet-sidecar's command line. The operator's pod builder (operator/src/pod_builder.cc,
// SidecarContainer) emits
//   fleet-sidecar gate --namespace=NS --job=NAME --pod=POD --role=ROLE --run=N
//                      --config-map=NAME --metrics-port=PORT [--exit-when-ready]
// plus the agent's flags (AgentOptions: rank, log sources, push API, stall window); people running
// it by hand add --kubeconfig, --listen and the tuning flags. `fleet-sidecar agent` is the agent
// without the gate (a job outside Kubernetes, e.g. fleetrun on one machine). Parsing is strict and
// does nothing else: every error is one line naming the flag, for an exit status of 2.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "fleet/base/result.h"
#include "fleet/runtime/env_contract.h"

namespace fleet::sidecar {

struct GateOptions {
  std::string ns;                    // --namespace
  std::string job;                   // --job
  std::string pod;                   // --pod
  std::string role;                  // --role: "server", "worker" or a heter stage's name
  int run = 0;                       // --run: the job run this pod belongs to
  std::string config_map;            // --config-map: the job's endpoints ConfigMap
  int metrics_port = 0;              // --metrics-port
  bool exit_when_ready = false;      // --exit-when-ready: a plain init container
  std::string kubeconfig;            // --kubeconfig ("" = LoadDefaultConfig's search)
  std::string listen;                // --listen, else $POD_IP:<metrics-port> (127.0.0.1 without POD_IP)
  // --mode: "" (infer from the ConfigMap), "collective", "ps" or "ps-heter". With ps/ps-heter a
  // trainer whose ConfigMap lacks the server list is told so instead of starting without it.
  std::string mode;
  std::chrono::milliseconds server_connect_timeout{1000};   // --server-connect-timeout
  std::chrono::milliseconds server_retry_max{2000};         // --server-retry-max: probe backoff cap
  std::chrono::milliseconds api_timeout{10000};             // --api-timeout: one API request
  std::chrono::milliseconds api_retry_max{10000};           // --api-retry-max: API backoff cap
  std::chrono::seconds watch_timeout{300};                  // --watch-timeout: server-side watch end
  // --in-place: the job restarts in place (api/in_place.h): the gate keeps watching the ConfigMap,
  // and the agent serves the trainers' gate (GET /gate on --report-http, which it requires) and
  // their liveness probe (GET /trainer-live), and writes the pod's Trainer condition.
  bool in_place = false;
};

// What the sidecar does once the gate is open (or at once, for `agent`): metrics from the trainer's
// logs and pushed reports, readiness, stall detection and the pod's TrainingProgress condition.
struct AgentOptions {
  int rank = 0;                      // --rank: the rank of the pod's first process
  int ranks = 1;                     // --ranks: processes in the pod (fleetrun's workerlog.N is rank + N)
  std::string log_dir;               // --log-dir: follow workerlog.N, serverlog.N, heterlog.N in it
  std::vector<std::string> log_files;   // --log-file (repeatable, at most 16): rank --rank
  std::vector<std::string> patterns;    // --pattern (repeatable, at most 16): regexes with named groups
  size_t max_line_bytes = 8192;      // --max-line-bytes: longer log lines are skipped
  std::chrono::milliseconds log_poll_interval{250};     // --log-poll-interval
  std::chrono::milliseconds stall_window{600000};       // --stall-window (0 = off)
  std::string report_http;           // --report-http=127.0.0.1:PORT: POST /v1/report ("" = off)
  std::string report_udp;            // --report-udp=127.0.0.1:PORT: the text protocol ("" = off)
  std::string report_socket;         // --report-socket=PATH: the text protocol on a Unix datagram socket
  std::string main_process = "auto"; // --main-process: auto, on or off
  std::string main_process_match;    // --main-process-match: a regex on the main process's command line
  std::chrono::milliseconds peer_check_interval{10000};  // --peer-check-interval
  bool pod_condition = true;         // --pod-condition: write the TrainingProgress condition
  std::chrono::milliseconds condition_min_interval{5000};  // --condition-min-interval: between two writes
  // Checkpoint before stop (checkpoint.h): GET /checkpoint asks the trainer through files here.
  std::string checkpoint_dir;        // --checkpoint-dir ("" = no /checkpoint)
  std::chrono::milliseconds checkpoint_timeout{30000};   // --checkpoint-timeout: how long to wait
};

enum class Command { kHelp, kGate, kAgent };

struct CommandLine {
  Command command = Command::kHelp;
  GateOptions gate;                  // kAgent: the identity flags, listen and kubeconfig only
  AgentOptions agent;
};

// `args` are argv[1..]. `env` supplies POD_IP for the default --listen.
Result<CommandLine> ParseCommandLine(const std::vector<std::string>& args, const EnvMap& env);

// The --help text.
std::string Usage();

// "$POD_IP:PORT" ("[addr]:PORT" for an IPv6 POD_IP), or "127.0.0.1:PORT" when POD_IP is unset.
std::string DefaultListenAddress(const EnvMap& env, int port);

// "HOST:PORT" whose host is a loopback address (127.0.0.0/8, [::1] or localhost); `what` names the flag.
Result<std::string> ParseLoopbackAddress(std::string_view text, std::string_view what);

// "1500ms", "2s", "5m" -> milliseconds (at least 1 ms, at most a day); `what` names the flag.
Result<std::chrono::milliseconds> ParseDuration(std::string_view text, std::string_view what);

}  // namespace fleet::sidecar
