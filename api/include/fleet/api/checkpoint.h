// A checkpoint before the pod stops (spec.checkpoint.beforeStop): what fleet-sidecar and the
// operator agree on beyond the condition's type (names.h). The sidecar writes the step a trainer
// saved into its pod's Checkpoint condition's message; the operator reads it back from there into
// status.checkpoint. One spelling, so that the two cannot drift apart.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fleet::api {

// The condition's reasons: the trainer saved a step; the timeout passed first; its done file did
// not hold a step.
inline constexpr const char* kCheckpointSaved = "Saved";
inline constexpr const char* kCheckpointTimedOut = "TimedOut";
inline constexpr const char* kCheckpointInvalid = "Invalid";

// The largest step a trainer may report: 2^53, the integers a JSON number holds exactly.
inline constexpr int64_t kMaxCheckpointStep = int64_t{1} << 53;

// "step 1200 saved by the trainer" + `detail` (e.g. " in 3s").
std::string CheckpointMessage(int64_t step, std::string_view detail);
// The step of a Saved condition's message; nullopt when it does not begin "step N" with N in
// 0..kMaxCheckpointStep.
std::optional<int64_t> CheckpointStepOf(std::string_view message);
// A trainer's done file: one integer in 0..kMaxCheckpointStep, with white space around it; nullopt
// for anything else (empty, a sign, a fraction, too large, other text).
std::optional<int64_t> ParseCheckpointStep(std::string_view text);

}  // namespace fleet::api
