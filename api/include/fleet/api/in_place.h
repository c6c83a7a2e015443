// In-place restart (spec.runPolicy.restartStrategy: InPlace; docs/design/fast-failures.md §5): what
// fleet-sidecar, the Python gate hook and the operator agree on. One spelling, so that they cannot
// drift apart.
//
// A trainer *instance* is one start of a pod's main container (the kubelet restarts it in place).
// It is bound to a run when it passes the gate inside the trainer (the hook's GET kGatePath on the
// sidecar's loopback listener); the sidecar reports its pod's trainer as the condition
// kTrainerConditionType:
//   Running  "run N: ..."  an instance bound to run N runs
//   Exited   "run N: ..."  the instance bound to run N ended (the container's termination says how)
//   AtGate   "run N: ..."  an instance waits at the gate for a run >= N (its predecessor, if any,
//                          was bound to N - 1 or older)
// The operator reads it to tell a failure of the job's current run R (Exited R, or AtGate for a run
// past R) from the end of an instance it superseded, and lifts its barrier (kBarrierAnnotation on
// the endpoints ConfigMap) once every pod's trainer waits at the gate for the new run.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace fleet::api {

// The condition fleet-sidecar sets on its own pod in InPlace jobs.
inline constexpr const char* kTrainerConditionType = "fleet.paddlepaddle.org/Trainer";
// On the endpoints ConfigMap, while the operator holds the gates of a restarted run closed: the run.
inline constexpr const char* kBarrierAnnotation = "fleet.paddlepaddle.org/barrier";
// The main containers' env in InPlace jobs: the sidecar's gate (loopback), and the run an
// instance's first Python process passed it for (its child processes inherit it and do not wait).
inline constexpr const char* kGateUrlEnv = "FLEET_GATE_URL";
inline constexpr const char* kGatePassedEnv = "FLEET_GATE_PASSED";
// The sidecar's routes: the gate (loopback listener) and the main containers' liveness probe (pod
// IP listener): 503 for an instance bound to an older run than the endpoints ConfigMap's.
inline constexpr const char* kGatePath = "/gate";
inline constexpr const char* kTrainerLivePath = "/trainer-live";

enum class TrainerState { kRunning, kAtGate, kExited };

struct TrainerReport {
  TrainerState state = TrainerState::kAtGate;
  int run = 0;

  // The condition's reason, and its message: "run N: " + detail.
  const char* Reason() const;
  std::string Message(std::string_view detail) const;
  // Whether the instance bound to `run` has ended in this pod: Exited in `run`, or at the gate for
  // a later run.
  bool EndedIn(int run) const;
  // Whether it waits at the gate and may pass into `run`.
  bool WaitsFor(int run) const;
  // A condition as the sidecar writes it; nullopt for another reason or a message that does not
  // begin "run N" (N in 0..INT_MAX).
  static std::optional<TrainerReport> FromCondition(std::string_view reason, std::string_view message);
};

}  // namespace fleet::api
