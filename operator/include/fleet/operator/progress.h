// Training progress: what each pod's sidecar reports about its ranks (GET /status), summarized
// into the FleetJob's status.progress. Pure functions; the ProgressCollector does the I/O.
//
// status.progress (docs/operator.md, "Training progress"):
//   step, totalSteps, percent, etaSeconds, stepsPerSecond, samplesPerSecond, loss,
//   ranks, reportingRanks, stalledRanks,
//   roles.<role>: ranks, reportingRanks, minStep, medianStep, maxStep, stepsPerSecond, loss
//   slowest: role, rank, pod, step, lag
//   rankDetails: the 20 slowest ranks, the slowest first
//   stepText, speedText, etaText, slowestText: the same, written for kubectl's columns
// The job's step is the median rank's count of steps trained (workers; the heter stages are in
// `roles`), so that one slow or one fast rank does not move it; a rank's lag is how many steps it
// is behind the median of its role.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fleet/api/progress.h"
#include "fleet/api/sidecar_report.h"
#include "fleet/base/result.h"

namespace fleet::op {

using Json = nlohmann::json;
using api::Progress;
using api::RankProgress;
using api::RoleProgress;

// One training rank as its pod's sidecar reported it.
struct RankReport {
  std::string role;
  std::string pod;
  int rank = 0;
  double steps = 0;                           // steps trained: the logged step number when the rank
                                              // gives a total, else the sidecar's count since it started
  double idle_seconds = 0;                    // since its last step
  bool stalled = false;                       // the sidecar judges it stalled
  std::optional<int64_t> total_steps;         // as its log said ("step 10/1000")
  std::optional<double> loss;
  std::optional<double> samples_per_second;
  std::optional<double> step_seconds;         // its latest step's duration
};

// The ranges a report's numbers are kept in: the report's own (api/sidecar_report.h), which its
// reader enforces. A sidecar's answer is untrusted (the job's author chooses its image), and so is
// the trainer's log it reads.
inline constexpr double kMaxProgressSteps = api::kMaxReportSteps;
inline constexpr double kMaxStepsPerSecond = api::kMaxReportStepsPerSecond;
inline constexpr double kMaxSamplesPerSecond = api::kMaxReportSamplesPerSecond;
inline constexpr double kMaxProgressSeconds = api::kMaxReportSeconds;

// A sidecar's GET /status body (api::SidecarReport): the ranks it reports, for pod `pod` of role
// `role`. An error says what is malformed; nothing in the body can make it throw. A number out of
// its range is left out (a logged step too: the rank's own count of steps stands for its step); a
// rank without its number or count is an error.
Result<std::vector<RankReport>> ParseSidecarStatus(std::string_view body, const std::string& role,
                                                   const std::string& pod);

// How many rows status.progress.rankDetails keeps (the slowest first).
inline constexpr size_t kProgressRankDetails = 20;

struct ProgressInput {
  std::vector<RankReport> ranks;                 // this collection
  const std::vector<RankReport>* previous = nullptr;   // the one before (for speeds), if any
  double seconds_since_previous = 0;
  std::map<std::string, int> expected_ranks;     // per training role
  int64_t total_steps = 0;                       // spec.totalSteps (0: not given)
};

// status.progress without its updateTime; none when no rank has reported a step.
std::optional<Progress> SummarizeProgress(const ProgressInput& in);

}  // namespace fleet::op
