// The sidecar's report: what fleet-sidecar answers to GET /status (docs/sidecar.md, "HTTP"), typed
// for the sidecar that writes it and the operator's progress collector that reads it. The keys are
// spelt once, in sidecar_report.cc.
//
// The reader takes the answer as untrusted (the job's author chooses the sidecar image:
// docs/security.md, "The progress path"). FromJson never throws, and keeps every number within the
// range below: a rank without its number or its count of steps is an error naming it; any other
// member out of its range, of the wrong type, or not finite is left out (a rank's `step` reads as
// 0); text is cut to kMaxReportTextBytes; keys it does not know are dropped. What a pod may report
// (only the ranks it runs) is the operator's policy, not the report's. ToJson(FromJson(x)) == x
// for what a sidecar writes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fleet/api/in_place.h"
#include "fleet/base/result.h"

namespace fleet::api {

// The ranges a report's numbers are read in, so that no sum, difference or conversion of them can
// overflow. Steps (counts, step numbers, totals, epochs): 2^53, the integers a JSON number (a
// double) holds exactly; the sidecar counts no further.
inline constexpr double kMaxReportSteps = 9007199254740992.0;
// A rank's number.
inline constexpr int kMaxReportRank = 10'000'000;
// Steps per second: a step takes at least a microsecond.
inline constexpr double kMaxReportStepsPerSecond = 1e6;
// Samples per second, per rank.
inline constexpr double kMaxReportSamplesPerSecond = 1e12;
// Durations (idle, a step): a century.
inline constexpr double kMaxReportSeconds = 100.0 * 365 * 24 * 3600;
// Any text (the command line, why not ready, an unreachable peer, the condition): the API server's
// bound on a condition's message. The sidecar writes its command line cut to 200 bytes.
inline constexpr size_t kMaxReportTextBytes = 32 * 1024;

struct SidecarReport {
  using Json = nlohmann::json;

  // One rank that has reported steps.
  struct Rank {
    int rank = 0;
    int64_t step = 0;                          // the last step number reported
    double steps = 0;                          // steps counted since the trainer started (across epochs)
    double idle_seconds = 0;                   // since its last step
    std::optional<int64_t> epoch;
    std::optional<int64_t> total_steps;        // "step 10/1000" in a log, total_steps in a report
    std::optional<double> loss;                // the latest
    std::optional<double> samples_per_second;  // the latest
    std::optional<double> step_seconds;        // the latest step's duration
  };
  struct MainProcess {
    bool running = false;
    int pid = 0;
    std::string command;                       // any bytes: ToJson's caller dumps with replacement
  };
  struct Peers {
    int total = 0;                             // the servers the gate waited for
    std::vector<std::string> unreachable;      // those that failed the latest check, with why
  };
  // The pod condition the sidecar last wrote (api::kProgressConditionType).
  struct Condition {
    bool status = true;
    std::string reason;
    std::string message;
  };

  // The last checkpoint the sidecar asked the trainer for (spec.checkpoint.beforeStop), once answered.
  struct Checkpoint {
    std::string result;                        // Saved, TimedOut or Invalid (checkpoint.h)
    std::optional<int64_t> step;               // Saved: the step the trainer wrote
    std::string message;
  };

  // In-place restart (fleet-sidecar --in-place; in_place.h): the pod's trainer as the sidecar's
  // Trainer condition says it, about which instance ("<pid>:<starttime>"), and that condition's
  // last failed write ("" when none).
  struct Trainer {
    TrainerReport report;
    std::string instance;
    std::string message;                       // the condition's message
    std::string condition_error;
  };

  bool ready = false;
  std::string not_ready;                       // why not ready ("" when ready)
  bool gate_open = false;
  std::optional<MainProcess> main_process;     // when it can be observed
  std::vector<Rank> ranks;
  std::vector<int> stalled;                    // the ranks judged stalled
  Peers peers;
  std::optional<Condition> condition;
  std::string condition_error;                 // the condition's last failed write ("" when none)
  std::optional<Checkpoint> checkpoint;
  std::optional<Trainer> trainer;              // with --in-place, once a trainer asked the gate

  static Result<SidecarReport> FromJson(const Json& report);
  Json ToJson() const;
};

}  // namespace fleet::api
