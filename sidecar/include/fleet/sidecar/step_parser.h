// What a training step line or a pushed step report says, as one StepRecord. Parsing allocates
// nothing: names are views into the parsed text (or into a pattern's group names), valid while that
// text is.
//
// Sources:
//   ParseStepLine    the built-in Paddle step formats, found anywhere in a log line:
//                      worker_index: 0, step11, train_loss: 7.02, total time cost = 0.28, step per second: 3.4, speed: 3.4
//                      step12 cost=0.53                     (and "step 12", "step: 12", "Step 12")
//                      [Epoch 0, batch 5] loss: 39.06348, acc1: 0.03125, acc5: 0.09375
//                      TRAIN ---> pass: 0 loss: 0.69
//                      [...] [    INFO] - loss: 2.12, learning_rate: 3e-05, global_step: 120, ...,
//                        interval_samples_per_second: 31.04, interval_steps_per_second: 0.97, ...
//                                                       (PaddleNLP / PaddleFormers: a global_step field)
//                      [...] [    INFO] -   Total optimization steps = 1,000   (their total: a record of 0 steps)
//                    Fields are "key: value" / "key = value" / "key=value", separated by commas or
//                    spaces; numbers may be wrapped as a one-element array ("loss: [0.69]") or carry a
//                    unit ("0.5s", "64 images/sec").
//   StepPattern      a user's regular expression (RE2) with named groups, (?P<name>...) or
//                    (?<name>...): each match is one step report (the grammar: fleet/api/log_pattern.h).
//   ParseTextReport  the push API's one-line text protocol: "step=12 loss=0.53 samples=32 acc=0.91".
//   ParseJsonReport  the push API's JSON: {"step": 12, "loss": 0.53, "scalars": {"acc": 0.91}}.
//
// Field names (all sources): step (also batch, iter, iteration, global_step), steps (an increment),
// epoch (also pass), loss (also train_loss, cost, avg_cost, avg_loss), step_time (seconds one step
// took; also batch_time, batch_cost; interval_steps_per_second gives its inverse), samples (samples
// in the reported steps), samples_per_second (also speed, ips, interval_samples_per_second), rank;
// any other numeric field is a custom scalar. In logs, "total time cost"
// (seconds since training started) gives step times, and "worker_index" and "step per second" (an
// average since the start) are read past.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "fleet/api/log_pattern.h"
#include "fleet/base/result.h"

namespace fleet::sidecar {

// Every count (a step number, a total, an epoch, an increment) is a whole number up to 2^53, the
// integers a double (and a JSON number) holds exactly, as the operator bounds them: a larger one
// makes its record malformed, and a rank's count stops there.
inline constexpr int64_t kMaxStepCount = int64_t{1} << 53;

struct StepRecord {
  enum Field : uint32_t {
    kStep = 1u << 0,
    kSteps = 1u << 1,
    kEpoch = 1u << 2,
    kLoss = 1u << 3,
    kStepTime = 1u << 4,
    kSamples = 1u << 5,
    kSamplesPerSecond = 1u << 6,
    kTotalTime = 1u << 7,
    kRank = 1u << 8,
    kTotalSteps = 1u << 9,
  };
  static constexpr size_t kMaxScalars = 16;
  struct Scalar {
    std::string_view name;
    double value = 0;
  };

  uint32_t fields = 0;
  int64_t step = 0;          // the step number (absolute)
  int64_t steps = 1;         // steps this record covers when it has no step number (kSteps: given)
  int64_t epoch = 0;
  int64_t rank = 0;
  double loss = 0;
  double step_time = 0;      // seconds per step
  double samples = 0;
  double samples_per_second = 0;
  double total_time = 0;     // seconds since training started (Paddle's "total time cost")
  int64_t total_steps = 0;   // the run's total, from "step 10/1000" or total_steps
  std::array<Scalar, kMaxScalars> scalars{};
  size_t scalar_count = 0;
  size_t scalars_dropped = 0;   // over kMaxScalars in this one record

  bool Has(Field f) const { return (fields & f) != 0; }
  void Clear();                     // (the scalars array is left as it is: scalar_count says)
  void AddScalar(std::string_view name, double value);
};

enum class ParseOutcome {
  kNone,       // not a step line (most log lines): nothing to count
  kStep,       // `record` holds the step
  kMalformed,  // it is a step line (or report) but a field cannot be read, a count is past
               // kMaxStepCount, or its step is past its own total ("step 2000/1000"): counted, skipped
};

// The built-in formats. `record` is cleared first.
ParseOutcome ParseStepLine(std::string_view line, StepRecord* record);

// ParseStepLine, faster for a stream of lines printed from one format string (as a trainer prints
// its step lines): after a line is parsed the general way, the text between its numbers is kept as
// a template, and the next line is matched against it with plain compares and number parses. Any
// difference (another format, a number it cannot replay) falls back to ParseStepLine, which learns
// the new shape. The outcome and record are the same as ParseStepLine's either way. One per stream.
class LineParser {
 public:
  LineParser();
  ~LineParser();
  LineParser(LineParser&&) noexcept;
  LineParser& operator=(LineParser&&) noexcept;
  ParseOutcome Parse(std::string_view line, StepRecord* record);

 private:
  struct Slot;
  bool Replay(std::string_view line, StepRecord* record) const;
  bool valid_ = false;
  std::string text_;          // the literals, concatenated
  std::vector<Slot> slots_;
  std::string tail_;          // the literal after the last number
};

// A user's pattern, e.g. R"(iter (?P<step>\d+) .*loss=(?P<loss>[0-9.e+-]+))". Group names are the
// field names above (others are custom scalars); every named group that takes part in a match must
// capture a number.
class StepPattern {
 public:
  static Result<StepPattern> Compile(std::string_view source);
  ParseOutcome Match(std::string_view line, StepRecord* record) const;
  const std::string& source() const { return source_; }

 private:
  struct Compiled;
  std::string source_;
  std::shared_ptr<const Compiled> compiled_;
};

// One line of the text protocol ("key=value" tokens separated by spaces or tabs). `error` says why
// on kMalformed; an empty line is kNone.
ParseOutcome ParseTextReport(std::string_view line, StepRecord* record, std::string* error);

// A JSON report: one object or an array of them (at most `max_records`). Names point into `body`.
Result<std::vector<StepRecord>> ParseJsonReport(const nlohmann::json& body, size_t max_records = 1024);

// A custom scalar's name is usable as a label value: 1-64 characters of [A-Za-z0-9_.:/-].
using api::IsScalarName;

}  // namespace fleet::sidecar
