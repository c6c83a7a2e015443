#include "fleet/operator/launcher.h"

#include <cctype>

#include "fleet/base/strings.h"
#include "fleet/operator/api.h"
#include "fleet/runtime/elastic_contract.h"

namespace fleet::op {

Discovery DiscoveryOf(const FleetJobSpec& spec, const RoleSpec& role) {
  const bool launch = IsPaddleLaunchFamily(role.launcher);
  if (spec.elastic) return launch ? Discovery::kEtcdLaunch : Discovery::kEtcdLegacy;
  if (spec.mode != JobMode::kCollective) return launch ? Discovery::kPsLaunchLists : Discovery::kProcessEnv;
  if (launch) return Discovery::kLaunchMaster;
  // A bare script with several processes per pod: something in the pod starts them, and only a
  // launcher can; the node-level env is what every launcher of Paddle 2.x reads.
  if (role.launcher == Launcher::kFleetrun || spec.processes_per_pod > 1) return Discovery::kClusterEnv;
  return Discovery::kProcessEnv;
}

std::string_view DiscoveryName(Discovery discovery) {
  switch (discovery) {
    case Discovery::kProcessEnv: return "per-process lists";
    case Discovery::kClusterEnv: return "PaddleCloud node lists";
    case Discovery::kLaunchMaster: return "a master on pod 0";
    case Discovery::kPsLaunchLists: return "server and trainer lists";
    case Discovery::kEtcdLegacy: return "etcd rendezvous (PADDLE_ELASTIC_*)";
    case Discovery::kEtcdLaunch: return "etcd master";
  }
  return "per-process lists";
}

std::string LauncherSummary(const FleetJobSpec& spec) {
  std::vector<std::string> roles;
  for (const RoleSpec& role : spec.roles) roles.push_back(role.name + "=" + std::string(LauncherName(role.launcher)));
  return JoinStrings(roles, ",");
}

std::string LauncherMessage(const FleetJobSpec& spec) {
  std::vector<std::string> roles;
  for (const RoleSpec& role : spec.roles) {
    const char* source = role.launcher_detected ? "read from its command" : spec.launcher ? "spec.launcher" : "no launcher in its command";
    roles.push_back(role.name + " pods run " + std::string(LauncherCommand(role.launcher)) + " (" + source + "), given " +
                    std::string(DiscoveryName(DiscoveryOf(spec, role))));
  }
  std::string message = JoinStrings(roles, "; ");
  if (spec.paddle_version) message += "; Paddle " + spec.paddle_version->ToString();
  return message;
}

std::vector<std::string> LauncherCaveats(const FleetJobSpec& spec) {
  std::vector<std::string> caveats;
  for (const RoleSpec& role : spec.roles) {
    const std::string where = role.name + " (" + std::string(LauncherCommand(role.launcher)) + ")";
    if (role.launcher == Launcher::kFleetrun && spec.mode != JobMode::kCollective &&
        !PassesFlag(role.template_, "run_mode") && !PassesFlag(role.template_, "server_num") &&
        !PassesFlag(role.template_, "servers")) {
      caveats.push_back(where + ": Paddle's fleetrun takes PS mode from --run_mode ps, --server_num or --servers, "
                        "never from TRAINING_ROLE; without one, a GPU build of Paddle runs these pods as collective");
    }
    if (role.launcher == Launcher::kFleetrun && spec.mode == JobMode::kCollective && spec.paddle_version &&
        spec.paddle_version->Before(2, 2) && TemplateGpus(role.template_) == 0 && !PassesFlag(role.template_, "ips")) {
      caveats.push_back(where + ": Paddle " + spec.paddle_version->ToString() + "'s fleetrun runs a CPU build as a "
                        "parameter-server job unless given --ips; these CPU pods would each train alone");
    }
    if (!IsPaddleLaunchFamily(role.launcher)) continue;
    if (spec.elastic) {
      caveats.push_back(where + ": in an elastic job Paddle's launcher ranks nodes by its own random pod names, and "
                        "restarts its processes at most PADDLE_MAX_RESTART times (3 unless set) as members change");
    } else if (!spec.paddle_version && role.launcher == Launcher::kPaddleLaunch) {
      caveats.push_back(where + ": the Paddle version is unknown (set spec.paddleVersion, or use a paddlepaddle/paddle "
                        "image): the env is Paddle 2.4+'s; Paddle 2.3's launcher fails on its PADDLE_RANK");
    }
  }
  return caveats;
}

std::string PaddleEtcdMaster(const std::string& host_port) {
  std::string host = host_port;
  if (!host.empty() && std::string_view("etcd").find(host.front()) != std::string_view::npos) {
    host.front() = static_cast<char>(std::toupper(static_cast<unsigned char>(host.front())));
  }
  return std::string(kEtcdMasterScheme) + host;
}

}  // namespace fleet::op
