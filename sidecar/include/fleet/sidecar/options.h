// fleet-sidecar's command line. The operator's pod builder (operator/src/pod_builder.cc,
// SidecarContainer) emits
//   fleet-sidecar gate --namespace=NS --job=NAME --pod=POD --role=ROLE --run=N
//                      --config-map=NAME --metrics-port=PORT [--exit-when-ready]
// and people running it by hand add --kubeconfig, --listen and the tuning flags. Parsing is strict
// and does nothing else: every error is one line naming the flag, for an exit status of 2.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <vector>

#include "fleet/runtime/env_contract.h"
#include "fleet/runtime/result.h"

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
};

enum class Command { kHelp, kGate };

struct CommandLine {
  Command command = Command::kHelp;
  GateOptions gate;
};

// `args` are argv[1..]. `env` supplies POD_IP for the default --listen.
Result<CommandLine> ParseCommandLine(const std::vector<std::string>& args, const EnvMap& env);

// The --help text.
std::string Usage();

// "$POD_IP:PORT" ("[addr]:PORT" for an IPv6 POD_IP), or "127.0.0.1:PORT" when POD_IP is unset.
std::string DefaultListenAddress(const EnvMap& env, int port);

// "1500ms", "2s", "5m" -> milliseconds (at least 1 ms, at most a day); `what` names the flag.
Result<std::chrono::milliseconds> ParseDuration(std::string_view text, std::string_view what);

}  // namespace fleet::sidecar
