// How a role's pods start Paddle (spec.launcher, or read from the role's command line) and which
// Paddle release they run (spec.paddleVersion, or read from Paddle's image): part of reading a
// FleetJob's spec (job_spec.h), since what a launcher can run is checked there. What the operator
// gives each launcher's pods to find their peers is the operator's (fleet/operator/launcher.h).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace fleet::api {

using Json = nlohmann::json;

enum class Launcher {
  kScript,          // the training script runs bare (or under a launcher FleetJob does not know)
  kPaddleLaunch,    // python -m paddle.distributed.launch, Paddle 2.3+
  kFleetrun,        // Paddle 2.x's fleetrun (python -m paddle.distributed.fleet.launch), or FleetJob's
  kPaddleFormers,   // paddleformers-cli, which runs paddle.distributed.launch from MASTER_ADDR & co.
};
std::string_view LauncherName(Launcher launcher);   // as spec.launcher spells it: "PaddleLaunch", ...
// What it is to a person: "python -m paddle.distributed.launch", ...
std::string_view LauncherCommand(Launcher launcher);
bool IsPaddleLaunchFamily(Launcher launcher);       // kPaddleLaunch or kPaddleFormers: a master, not lists

// The launcher a pod template's containers run, read from their command and args (also inside
// `sh -c "..."` scripts): the first container that names one decides; nullopt when none does.
std::optional<Launcher> DetectLauncher(const Json& pod_template);

// Whether a template's containers pass `flag` (as "--flag", "--flag=value") to their command.
bool PassesFlag(const Json& pod_template, std::string_view flag);

// GPUs a pod template asks for (resources.limits["nvidia.com/gpu"] of its first container).
int TemplateGpus(const Json& pod_template);

// A Paddle release, major.minor.
struct PaddleVersion {
  int major = 0;
  int minor = 0;
  bool Before(int other_major, int other_minor) const {
    return major < other_major || (major == other_major && minor < other_minor);
  }
  std::string ToString() const;
};
// "2.5", "2.5.2", "3.0.0b2" -> the release; nullopt for anything else.
std::optional<PaddleVersion> ParsePaddleVersion(std::string_view text);
// The Paddle release of Paddle's own images (`[registry/]paddlepaddle/paddle:2.5.2-gpu-...`) named
// by the template's first container; nullopt for other images.
std::optional<PaddleVersion> ImagePaddleVersion(const Json& pod_template);

}  // namespace fleet::api
