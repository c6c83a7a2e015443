// Supervise: starts a plan's local processes and owns them until the job ends.
//  - each process runs in its own process group, stdin from /dev/null, output to its log file;
//    local worker 0's output is also copied to the terminal;
//  - a process that exits non-zero (or dies by a signal) stops the job: every local process group
//    gets SIGTERM, then SIGKILL after the grace period, and fleetrun exits with that status
//    (128+signal for a signal), naming the failed process and its log;
//  - PS jobs end when the local trainers have all succeeded: servers and heter trainers are then
//    stopped and the trainers' status (0) is returned;
//  - SIGINT/SIGTERM/SIGHUP to fleetrun stop every process the same way (a second signal skips the
//    grace period) and fleetrun exits 128+signal;
//  - fleetrun is a child subreaper and children get PR_SET_PDEATHSIG: nothing it started outlives it;
//  - PS jobs: a parameter server that does not accept connections within server_timeout_seconds
//    stops the job (status kServerTimeoutStatus), naming the server and its log;
//  - logs that cannot be written (a full disk under the log dir) are reported once when noticed
//    and again as fleetrun exits; the exit status stays the job's;
//  - elastic jobs: when stop_for_change says so, every process is stopped the same way and
//    Supervise returns kStoppedForChange; also when a process fails and stop_for_change, asked
//    then, says the nodes changed (a trainer whose peer left fails before the next tick);
//    leaving runs once when a signal starts the stop, before the processes are signalled.
#pragma once

#include <signal.h>

#include <functional>
#include <optional>

#include "fleet/launcher/plan.h"

namespace fleet::launcher {

// fleetrun's status when parameter servers never accepted connections: timeout(1)'s, below 128
// so that the operator's ExitCode restart policy does not take it for a signal.
constexpr int kServerTimeoutStatus = 124;
// Supervise's answer when stop_for_change stopped the processes: no exit status can be negative.
constexpr int kStoppedForChange = -1;

struct SupervisorOptions {
  double grace_period_seconds = 5.0;
  double server_timeout_seconds = 0;   // 0: no limit
  int terminal_fd = 1;   // where local worker 0's output is copied
  int messages_fd = 2;   // fleetrun's own messages
  double tick_seconds = 1.0;   // how often the periodic checks run
  // Asked every tick while nothing is stopping, and when a process fails; true stops the job for a
  // new rendezvous.
  std::function<bool()> stop_for_change;
  // Called when a local process failed (the job then stops as above), not for a signal to fleetrun:
  // elastic jobs look whether the loss of another node caused it. With it set, the failure's
  // message is not an ABORT: the caller says ABORT if the failure ends the node.
  std::function<void()> on_process_failure;
  // Called once when SIGINT/SIGTERM/SIGHUP/SIGQUIT starts the stop, before any process is signalled.
  std::function<void()> leaving;
};

// The signals Supervise handles: SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT. Supervise blocks them
// while it runs; a caller with other threads blocks them before starting any.
const sigset_t& SupervisedSignals();

// Waits up to `seconds` for one of SupervisedSignals() but SIGCHLD (the caller blocked them in every
// thread); nullopt when none came. Rendezvous loops wait with it, so that a signal ends them.
std::optional<int> WaitForSupervisedSignal(double seconds);

// Returns fleetrun's exit status. `base_env` is the environment every child inherits before its
// contract variables are applied, less the variables FLEET_ENV_FILES names (env_files.h: an exec
// could not carry them; a Python child's env loader reads them again).
int Supervise(const LaunchPlan& plan, const EnvMap& base_env, const SupervisorOptions& options);

}  // namespace fleet::launcher
