// fleetctl: submit and manage FleetJobs (docs/fleetctl.md). The program is RunFleetctl (app.h).
#include <unistd.h>

#include <iostream>
#include <string>
#include <vector>

#include "fleet/cli/app.h"

int main(int argc, char** argv) {
  return fleet::cli::RunFleetctl(std::vector<std::string>(argv + 1, argv + argc), fleet::CurrentProcessEnv(), std::cin,
                                 std::cout, std::cerr, {isatty(STDOUT_FILENO) == 1, isatty(STDERR_FILENO) == 1});
}
