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
//  - fleetrun is a child subreaper and children get PR_SET_PDEATHSIG: nothing it started outlives it.
#pragma once

#include "fleet/launcher/plan.h"

namespace fleet::launcher {

struct SupervisorOptions {
  double grace_period_seconds = 5.0;
  int terminal_fd = 1;   // where local worker 0's output is copied
  int messages_fd = 2;   // fleetrun's own messages
};

// Returns fleetrun's exit status. `base_env` is the environment every child inherits before its
// contract variables are applied.
int Supervise(const LaunchPlan& plan, const EnvMap& base_env, const SupervisorOptions& options);

}  // namespace fleet::launcher
