// fleetctl as a function: arguments, environment and streams in, exit status out. The commands
// talk to the cluster through fleet::kube::Client; the output comes from render.h and yaml_json.h.
//
// Errors are one line on `err`, "fleetctl: ...", naming what is wrong: no cluster configured, the
// cluster unreachable, the FleetJob CRD not installed, a job not found, what the API server refused.
// Exit status: 0 success, 1 an error (or --wait saw the job fail), 2 a usage error.
#pragma once

#include <iosfwd>
#include <string>
#include <vector>

#include "fleet/runtime/env_contract.h"

namespace fleet::cli {

// Which of `out` and `err` are terminals: `submit --wait` and `top` then redraw their progress in
// place rather than print a line (or a table) per change.
struct Terminals {
  bool out = false;
  bool err = false;
};

int RunFleetctl(const std::vector<std::string>& args, const EnvMap& env, std::istream& in, std::ostream& out,
                std::ostream& err, Terminals terminals = {});

}  // namespace fleet::cli
