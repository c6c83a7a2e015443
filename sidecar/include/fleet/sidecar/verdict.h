// What the endpoints ConfigMap means for one pod's startup gate: a pure function of the object, so
// every rule is unit-tested without an API server.
//
// The ConfigMap (published by the operator's planner) carries annotation
// fleet.paddlepaddle.org/run=<run> and one data key per shared variable: the variable's name, or
// "<VAR>.<role>" where roles see different values (operator/src/wiring.cc). A pod may start once
// the ConfigMap of *its* run exists; an older run's lists name pods that are gone.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fleet/api/in_place.h"
#include "fleet/api/names.h"
#include "fleet/runtime/endpoint.h"

namespace fleet::sidecar {

using api::kRunAnnotation;
inline constexpr const char* kServerListVar = "PADDLE_PSERVERS_IP_PORT_LIST";
inline constexpr const char* kServerRole = "server";

struct GateTarget {
  std::string ns;
  std::string config_map;
  std::string role;
  int run = 0;
  std::string mode;                  // "", "collective", "ps", "ps-heter" (see GateOptions::mode)
};

enum class ConfigMapState {
  kAbsent,      // no such ConfigMap (yet)
  kOtherRun,    // it exists but was published for another run (or carries no run)
  kMalformed,   // it is for this run but cannot be used (detail says why)
  kReady,       // it is for this run; `servers` are the peers still to be reached (may be empty)
};

const char* ConfigMapStateName(ConfigMapState state);

struct ConfigMapVerdict {
  ConfigMapState state = ConfigMapState::kAbsent;
  std::string detail;                // kOtherRun / kMalformed: a clause saying why ("it holds run 2")
  std::string server_key;            // kReady: the data key the server list came from, "" if none
  std::vector<Endpoint> servers;     // kReady: the servers this pod waits for

  friend bool operator==(const ConfigMapVerdict& a, const ConfigMapVerdict& b) {
    return a.state == b.state && a.detail == b.detail && a.server_key == b.server_key && a.servers == b.servers;
  }
  friend bool operator!=(const ConfigMapVerdict& a, const ConfigMapVerdict& b) { return !(a == b); }
};

// `config_map` is the object as the API returns it, or nullptr when it does not exist. Never
// throws, whatever the object holds. Endpoint-list keys this pod's role receives
// (*_ENDPOINTS, *_IP_PORT_LIST, PADDLE_GLOO_HTTP_ENDPOINT; plain or suffixed with ".<role>") must
// parse as Paddle parses them; keys suffixed for other roles are not this pod's concern.
ConfigMapVerdict EvaluateConfigMap(const nlohmann::json* config_map, const GateTarget& target);

// In-place restart (--in-place, api/in_place.h): what the ConfigMap says about the runs, whatever
// this pod's run. `run`: its run annotation; `barrier`: its barrier annotation
// (api::kBarrierAnnotation), while the operator holds the gates of that run closed. Each nullopt
// when absent or not a run number, except that a barrier that is there but unreadable holds the run
// as an equal one would (a trainer must not pass on the operator's typo).
struct RunAnnotations {
  std::optional<int> run;
  std::optional<int> barrier;

  // The run a trainer may pass the gate into now: `run`, unless the barrier holds it.
  std::optional<int> OpenRun() const { return run && barrier != run ? run : std::nullopt; }
  friend bool operator==(const RunAnnotations& a, const RunAnnotations& b) {
    return a.run == b.run && a.barrier == b.barrier;
  }
  friend bool operator!=(const RunAnnotations& a, const RunAnnotations& b) { return !(a == b); }
};

// Never throws; nullptr (no ConfigMap) reads as neither annotation.
RunAnnotations ReadRunAnnotations(const nlohmann::json* config_map);

}  // namespace fleet::sidecar
