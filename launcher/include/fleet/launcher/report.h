// What fleetrun prints before it starts anything, in the shape Paddle's launcher prints it.
#pragma once

#include <string>

#include "fleet/launcher/flags.h"
#include "fleet/launcher/plan.h"

namespace fleet::launcher {

// "-----------  Configuration Arguments -----------" and one "name: value" line per flag.
std::string FormatConfiguration(const LaunchOptions& options);

// The "Distributed Envs" table of one process's contract variables. Long values are cut to their
// tail so that a 1,000-endpoint list stays one line.
std::string FormatEnvTable(const EnvMap& env);

// The banner for a whole plan: for the first local process of each role, a heading and its table.
std::string FormatPlan(const LaunchPlan& plan);

}  // namespace fleet::launcher
