// fleetctl's command line: kubectl's connection flags, PaddleCloud-style submission flags
// (fleetrun's names: --server_num, --worker_num, --gpus, ...) and one subcommand.
//
//   fleetctl [--kubeconfig=PATH] [--context=NAME] [-n NS] [-o json|yaml] COMMAND [flags] [ARGS]
//
// Flags are --name=value or --name value (-n NS, -n=NS, -nNS, -o json, -f FILE); '_' and '-' are
// the same in flag names (--server_num = --server-num). The connection flags go anywhere, a
// command's flags after it; for `submit`, everything after "--" is the training command. Strict: an
// unknown flag, a missing or malformed value or a missing argument is an error naming it (exit 2).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fleet/base/result.h"

namespace fleet::cli {

enum class Command { kNone, kSubmit, kList, kStatus, kTop, kLogs, kStop, kResume, kDelete, kVersion, kHelp };
enum class Output { kText, kJson, kYaml };

struct GlobalOptions {
  std::string kubeconfig;            // "" = $KUBECONFIG, in-cluster, ~/.kube/config (as kubectl)
  std::string context;
  std::string ns;                    // "" = the context's namespace
  Output output = Output::kText;
};

// submit: a FleetJob from flags (PaddleCloud style), or from a manifest (-f).
struct SubmitOptions {
  std::string file;                  // -f: a FleetJob manifest ("-" = stdin); excludes the job flags
  std::string name;                  // "" = generated from the script's name
  std::string image;
  int server_num = 0;                // > 0: a parameter-server job
  int worker_num = 1;
  int gpus = 0;                      // GPUs per worker pod; > 1 in a collective job: one process each
  std::string cpu, memory;           // per pod, requests = limits
  std::vector<std::pair<std::string, std::string>> env;   // --env K=V, repeatable
  std::string network;               // PodIP | Service | HostNetwork
  std::string runtime;               // paddle | fleet
  std::string restart_policy;        // Never | OnFailure | ExitCode
  std::optional<int> backoff_limit;
  std::string gang;                  // Volcano | SchedulerPlugins
  std::string queue;
  std::string priority_class;
  std::string sidecar_image;
  std::vector<std::string> command;  // after "--"
  std::vector<std::string> fleetctl_flags_in_command;  // submit's own flags found after "--"
  bool wait = false;                 // until Running or finished
  bool until_done = false;           // --until=done: --wait until Succeeded, showing training progress
  int timeout_seconds = 0;           // for --wait; 0 = none
  bool dry_run = false;              // print the FleetJob, create nothing
};

struct LogsOptions {
  std::string role = "worker";
  int rank = 0;                      // the pod's index in its role
  std::string container;             // "" = the pod's first container
  bool follow = false;
  int tail = -1;                     // lines; -1 = all
};

struct TopOptions {
  int interval_seconds = 2;          // between reads of the job
  bool once = false;                 // one snapshot, then exit
};

struct CommandLine {
  Command command = Command::kNone;
  GlobalOptions global;
  SubmitOptions submit;
  LogsOptions logs;
  TopOptions top;
  bool all_namespaces = false;       // list -A
  std::string selector;              // list -l
  int events = 10;                   // status: how many recent events
  std::vector<std::string> names;    // status, top, logs, stop, resume: one; delete: one or more
  Command help_for = Command::kNone; // help / --help: for which command
};

Result<CommandLine> ParseCommandLine(const std::vector<std::string>& args);

// The usage of one command, or the overview for kNone/kHelp.
std::string Usage(Command command = Command::kNone);

}  // namespace fleet::cli
