// The real HostFacts of this machine: environment, addresses, GPUs, free ports, script lookup.
#pragma once

#include "fleet/launcher/plan.h"

namespace fleet::launcher {

// Fills everything but gloo_dir (created only once the plan is known to be valid).
HostFacts ReadHostFacts();

// Binds `count` distinct ephemeral TCP ports (holding them until all are chosen) and releases them.
Result<std::vector<int>> FindFreePorts(int count);

// A fresh directory for PADDLE_GLOO_FS_PATH, this run's own: $TMPDIR/fleetrun-gloo-XXXXXX (in /tmp
// without TMPDIR).
Result<std::string> MakeGlooDir(const EnvMap& env);
// Removes the run's gloo dir with whatever its trainers left in it; warns on stderr when it cannot.
void RemoveGlooDir(const std::string& dir);

// A .py script must be a readable file; anything else an executable file, or a command on PATH.
Result<std::string> ResolveProgram(const std::string& script, const std::string& path_env);

}  // namespace fleet::launcher
