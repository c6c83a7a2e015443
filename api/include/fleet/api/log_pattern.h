// The grammar of a user's step-log pattern (spec.sidecar.patterns; fleet-sidecar's --pattern): a
// regular expression (user_regex.h) whose named groups, (?P<name>...) or (?<name>...), name step
// fields. The operator checks a spec's patterns with it, so that a pattern the sidecar would refuse
// fails the job with a message instead of crash-looping every pod's sidecar; the sidecar's step
// parser (fleet/sidecar/step_parser.h) compiles its patterns with it and matches log lines.
//
// Field names, ignoring case (docs/sidecar.md): step (also batch, iter, iteration, global_step),
// steps (an increment), epoch (also pass), loss (also train_loss, cost, avg_cost, avg_loss),
// step_time (also batch_time, batch_cost), interval_steps_per_second (step_time's inverse),
// samples, samples_per_second (also speed, ips, interval_samples_per_second), total_steps, rank;
// "total time cost" (seconds since the start) is a log's field only. Any other name of 1-64
// characters of [A-Za-z0-9_.:/-] is a custom scalar.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "fleet/api/user_regex.h"
#include "fleet/base/result.h"

namespace fleet::api {

// What a field's name (a log line's key, a pattern's group, a pushed report's key) stands for.
enum class StepField {
  kStep, kSteps, kEpoch, kLoss, kStepTime, kStepsPerSecond, kSamples, kSamplesPerSecond, kTotalTime, kTotalSteps, kRank,
  kIgnored,   // a key Paddle's logs print that is no step field ("worker_index", "step per second")
  kScalar     // any other name: a custom scalar
};
StepField ClassifyStepField(std::string_view name);
// Whether `name` is `lower_name` (a field name in lower case), ignoring case as field names are.
bool IsFieldName(std::string_view name, std::string_view lower_name);
// A custom scalar's name is usable as a label value: 1-64 characters of [A-Za-z0-9_.:/-].
bool IsScalarName(std::string_view name);

// A user's pattern, compiled: RE2's expression, and its named groups with the fields they fill.
struct LogPattern {
  struct Group {
    int index = 0;               // RE2's submatch index
    std::string name;
    StepField field = StepField::kScalar;
  };
  std::shared_ptr<const re2::RE2> regex;
  std::vector<Group> groups;     // in the pattern's order
  int submatches = 0;            // 1 + the highest index of a named group: what a match asks RE2 for
};
// Errors name the pattern and what is wrong with it: "'iter (?P<x>': not a valid regular
// expression: missing ): ...", "'...': the group name 'worker_index' cannot be used".
Result<LogPattern> CompileLogPattern(std::string_view source);

}  // namespace fleet::api
