// TrainingMetrics: the fleet_training_* metrics of one pod, fed by StepRecords (from its logs and
// its push API), and the per-rank state behind them and behind stall detection.
//
// Per rank (labels job, namespace, role, rank, pod; created when the rank first reports):
//   fleet_training_steps_total                   counter: steps completed
//   fleet_training_step                          gauge: the last step number reported
//   fleet_training_epoch                         gauge: the last epoch (pass) reported
//   fleet_training_step_duration_seconds         histogram: seconds per step
//   fleet_training_samples_per_second            gauge
//   fleet_training_loss                          gauge (NaN when the loss diverged)
//   fleet_training_scalar{name}                  gauge: custom scalars (acc1, lr, ...)
//   fleet_training_last_step_timestamp_seconds   gauge: Unix time of the last step seen
// Per pod (rank = the pod's first rank):
//   fleet_training_main_process_up               gauge (only while the main process can be observed)
//   fleet_training_restarts_total                counter: the trainer seen starting over
//   fleet_training_peers, fleet_training_peers_ready   gauges: the servers a trainer depends on
//   fleet_training_peer_wait_seconds_total       counter: seconds spent waiting for them
//
// Counting steps: a record with a step number counts the steps since the rank's previous one (its
// first counts 1; a new epoch counts its batch number; a lower number in the same epoch means the
// trainer started over: 1, and a restart); a record without one counts `steps` (default 1). The
// count stops at kMaxStepCount.
// Step duration: the record's step_time; else the difference of Paddle's "total time cost" between
// two lines over the steps between them; else, for live input, the wall-clock time between two
// records over the steps between them.
//
// The values are plain numbers under one lock, written out by AppendExposition with each rank's
// label set formatted once: a pod with 64 ranks has ~1,800 series, and going through
// prometheus-cpp's objects (a label vector copied per series on every scrape) cost most of a scrape.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "fleet/sidecar/step_parser.h"

namespace fleet::sidecar {

struct PodIdentity {
  std::string ns;
  std::string job;
  std::string pod;
  std::string role;
  int first_rank = 0;      // the rank of the pod's first process
  int ranks = 1;           // processes in the pod: ranks first_rank .. first_rank + ranks - 1
};

struct ApplyStats {
  size_t applied = 0;
  size_t dropped_rank = 0;      // a rank outside the pod's
  size_t dropped_scalars = 0;   // scalars over the per-rank limit (or the per-record one)
};

// A rank that has reported steps, as stall detection sees it.
struct RankProgress {
  int rank = 0;
  int64_t step = 0;             // the last step number reported
  double idle_seconds = 0;      // since its last step
  double steps = 0;             // steps counted since the trainer started (across epochs)
  std::optional<int64_t> epoch;
  std::optional<int64_t> total_steps;         // "step 10/1000", total_steps
  std::optional<double> loss;                 // the latest
  std::optional<double> samples_per_second;   // the latest
  std::optional<double> step_seconds;         // the latest step's duration
};

class TrainingMetrics {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kMaxScalarsPerRank = 32;
  static constexpr int kMaxRanks = 4096;

  struct Input {
    int rank;                   // absolute
    const StepRecord* record;
  };

  explicit TrainingMetrics(PodIdentity identity);
  ~TrainingMetrics();
  TrainingMetrics(const TrainingMetrics&) = delete;
  TrainingMetrics& operator=(const TrainingMetrics&) = delete;

  // Applies records under one lock. `timed`: the records were written just now, so the wall-clock
  // time since a rank's previous record (from an earlier call) is a step time; false for a backlog.
  ApplyStats Apply(const Input* inputs, size_t count, bool timed, Clock::time_point now = Clock::now());

  // The trainer started over (a new main process): counted, and every rank's next step number is
  // taken as a new start rather than as another restart.
  void CountRestart();
  // nullopt: the main process cannot be observed (no gauge).
  void SetMainProcessUp(std::optional<bool> up);
  void SetPeers(size_t total, size_t ready);
  void AddPeerWait(double seconds);

  // Ranks that have reported steps, with how long ago their last step was.
  std::vector<RankProgress> Progress(Clock::time_point now = Clock::now()) const;
  const PodIdentity& identity() const { return identity_; }

  // Appends the fleet_training_* families in the Prometheus text format (0.0.4).
  void AppendExposition(std::string* out) const;

 private:
  struct Rank;
  Rank* RankLocked(int rank);
  void ApplyLocked(Rank& r, const StepRecord& record, bool timed, uint64_t call, Clock::time_point now,
                   ApplyStats* stats);
  // The steps `record` completes for `r` (a step number going back counts a restart).
  int64_t StepsCompletedLocked(Rank& r, const StepRecord& record);

  const PodIdentity identity_;
  std::string pod_labels_;                     // the pod-level series' labels, formatted
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Rank>> ranks_;   // index: rank - first_rank
  uint64_t calls_ = 0;
  std::optional<bool> main_up_;
  double restarts_ = 0;
  double peers_ = 0;
  double peers_ready_ = 0;
  double peer_wait_ = 0;
};

// Step-duration histogram buckets (seconds).
const std::vector<double>& StepDurationBuckets();

}  // namespace fleet::sidecar
