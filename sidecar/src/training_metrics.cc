#include "fleet/sidecar/training_metrics.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>

namespace fleet::sidecar {
namespace {

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

constexpr size_t kBuckets = 16;

void AppendDouble(double v, std::string* out) {
  if (std::isnan(v)) {
    *out += "NaN";
  } else if (std::isinf(v)) {
    *out += v > 0 ? "+Inf" : "-Inf";
  } else {
    char buffer[32];
    auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, v);
    out->append(buffer, static_cast<size_t>(end - buffer));
  }
}

// A label value, escaped as the text format wants.
std::string Escaped(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

struct Family {
  const char* name;
  const char* type;
  const char* help;
};

constexpr Family kSteps{"fleet_training_steps_total", "counter",
                        "Training steps completed, from the step logs and pushed reports."};
constexpr Family kStep{"fleet_training_step", "gauge", "The last step number the rank reported."};
constexpr Family kEpoch{"fleet_training_epoch", "gauge", "The last epoch (pass) the rank reported."};
constexpr Family kDuration{"fleet_training_step_duration_seconds", "histogram", "Seconds one training step took."};
constexpr Family kSamplesPerSecond{"fleet_training_samples_per_second", "gauge",
                                   "Samples per second the rank processes."};
constexpr Family kLoss{"fleet_training_loss", "gauge",
                       "The last training loss the rank reported (NaN when it diverged)."};
constexpr Family kScalar{"fleet_training_scalar", "gauge",
                         "The last value of a custom scalar the rank reported (label name)."};
constexpr Family kLastStep{"fleet_training_last_step_timestamp_seconds", "gauge",
                           "Unix time at which the sidecar saw the rank's last step."};
constexpr Family kMainUp{"fleet_training_main_process_up", "gauge",
                         "1 while the pod's main (training) process runs, else 0; absent when it cannot be observed."};
constexpr Family kRestarts{"fleet_training_restarts_total", "counter",
                           "Times the trainer was seen starting over: a new main process, or step numbers going back."};
constexpr Family kPeers{"fleet_training_peers", "gauge", "Peers (parameter servers) this pod's trainers depend on."};
constexpr Family kPeersReady{"fleet_training_peers_ready", "gauge",
                             "Peers that accepted a connection in the latest check."};
constexpr Family kPeerWait{"fleet_training_peer_wait_seconds_total", "counter",
                           "Seconds this pod spent waiting for its peers: at startup and whenever one was unreachable."};

void Header(const Family& f, std::string* out) {
  *out += "# HELP ";
  *out += f.name;
  *out += ' ';
  *out += f.help;
  *out += "\n# TYPE ";
  *out += f.name;
  *out += ' ';
  *out += f.type;
  *out += '\n';
}

// name[suffix]{labels[,extra]} value
void Line(const char* name, const char* suffix, const std::string& labels, const std::string& extra, double value,
          std::string* out) {
  *out += name;
  *out += suffix;
  *out += '{';
  *out += labels;
  *out += extra;
  *out += "} ";
  AppendDouble(value, out);
  *out += '\n';
}

}  // namespace

const std::vector<double>& StepDurationBuckets() {
  static const std::vector<double> buckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                              0.5,   1,      2.5,   5,    10,    30,   60,  120};
  return buckets;
}

struct TrainingMetrics::Rank {
  int rank = 0;
  std::string labels;                  // job="..",namespace="..",pod="..",role="..",rank="N"
  bool seen_step = false;
  bool has_step_number = false;
  bool fresh = false;                  // next step number starts over (after a counted restart)
  int64_t last_step = 0;
  bool has_epoch = false;
  int64_t last_epoch = 0;
  bool has_total_time = false;
  double last_total_time = 0;
  int64_t total_steps = 0;             // 0: not reported
  double step_seconds = -1;            // the latest step's duration (-1: none yet)
  bool has_wall = false;
  uint64_t last_call = 0;
  Clock::time_point last_wall;          // when its previous record was applied (timed input)
  Clock::time_point last_progress;      // when its last step was seen

  // The exported values (a gauge is exported once it has a value).
  double steps = 0;
  bool has_duration = false;
  std::array<uint64_t, kBuckets + 1> buckets{};   // per bucket, not cumulative; the last is +Inf
  uint64_t duration_count = 0;
  double duration_sum = 0;
  bool has_loss = false, has_sps = false, has_last_step = false;
  double loss = 0, sps = 0, last_step_time = 0;
  std::vector<std::pair<std::string, double>> scalars;   // name (as reported) -> value
  std::vector<std::string> scalar_labels;                 // ,name="..." per scalar

  // Updating from one record (ApplyLocked), given the steps it completes (`delta`):
  // The seconds one of those steps took (-1: unknown); remembers the record's times for the next.
  double TimeSteps(const StepRecord& rec, int64_t delta, bool timed, uint64_t call, Clock::time_point now);
  // Counts `delta` > 0 steps, into the duration histogram too when `per_step` is known.
  void CountSteps(int64_t delta, double per_step, Clock::time_point now);
  // Total steps, loss and samples per second.
  void TakeGauges(const StepRecord& rec, int64_t delta, double per_step);
  // The custom scalars; returns how many were dropped (over kMaxScalarsPerRank).
  size_t TakeScalars(const StepRecord& rec);
};

TrainingMetrics::TrainingMetrics(PodIdentity identity) : identity_(std::move(identity)) {
  ranks_.resize(static_cast<size_t>(std::clamp(identity_.ranks, 1, kMaxRanks)));
  pod_labels_ = "job=\"" + Escaped(identity_.job) + "\",namespace=\"" + Escaped(identity_.ns) + "\",pod=\"" +
                Escaped(identity_.pod) + "\",role=\"" + Escaped(identity_.role) + "\",rank=\"" +
                std::to_string(identity_.first_rank) + "\"";
}

TrainingMetrics::~TrainingMetrics() = default;

TrainingMetrics::Rank* TrainingMetrics::RankLocked(int rank) {
  const int64_t index = static_cast<int64_t>(rank) - identity_.first_rank;
  if (index < 0 || index >= static_cast<int64_t>(ranks_.size())) return nullptr;
  auto& slot = ranks_[static_cast<size_t>(index)];
  if (!slot) {
    slot = std::make_unique<Rank>();
    slot->rank = rank;
    slot->labels = "job=\"" + Escaped(identity_.job) + "\",namespace=\"" + Escaped(identity_.ns) + "\",pod=\"" +
                   Escaped(identity_.pod) + "\",role=\"" + Escaped(identity_.role) + "\",rank=\"" +
                   std::to_string(rank) + "\"";
  }
  return slot.get();
}

ApplyStats TrainingMetrics::Apply(const Input* inputs, size_t count, bool timed, Clock::time_point now) {
  ApplyStats stats;
  std::lock_guard<std::mutex> lock(mu_);
  const uint64_t call = ++calls_;
  const double wall = count ? WallSeconds() : 0;
  Rank* last = nullptr;
  for (size_t i = 0; i < count; ++i) {
    Rank* r = last && last->rank == inputs[i].rank ? last : RankLocked(inputs[i].rank);
    if (!r) {
      ++stats.dropped_rank;
      continue;
    }
    last = r;
    const double before = r->steps;
    ApplyLocked(*r, *inputs[i].record, timed, call, now, &stats);
    if (r->steps != before) {
      r->has_last_step = true;
      r->last_step_time = wall;
    }
  }
  return stats;
}

void TrainingMetrics::ApplyLocked(Rank& r, const StepRecord& rec, bool timed, uint64_t call, Clock::time_point now,
                                  ApplyStats* stats) {
  ++stats->applied;
  const int64_t delta = StepsCompletedLocked(r, rec);
  const double per_step = r.TimeSteps(rec, delta, timed, call, now);
  if (delta > 0) r.CountSteps(delta, per_step, now);
  r.TakeGauges(rec, delta, per_step);
  stats->dropped_scalars += r.TakeScalars(rec) + rec.scalars_dropped;
}

int64_t TrainingMetrics::StepsCompletedLocked(Rank& r, const StepRecord& rec) {
  int64_t delta = rec.Has(StepRecord::kSteps) || !rec.Has(StepRecord::kStep) ? rec.steps : 1;
  if (rec.Has(StepRecord::kStep)) {
    const bool new_epoch = rec.Has(StepRecord::kEpoch) && r.has_epoch && rec.epoch > r.last_epoch;
    const bool older_epoch = rec.Has(StepRecord::kEpoch) && r.has_epoch && rec.epoch < r.last_epoch;
    if (!r.has_step_number || r.fresh) {
      delta = rec.Has(StepRecord::kSteps) ? rec.steps : 1;
    } else if (new_epoch) {
      delta = std::max<int64_t>(rec.step, 1);
    } else if (!older_epoch && rec.step >= r.last_step) {
      delta = rec.step - r.last_step;
    } else {
      // Numbers going back: the trainer started over.
      restarts_ += 1;
      delta = 1;
      r.has_total_time = false;
    }
    r.has_step_number = true;
    r.fresh = false;
    r.last_step = rec.step;
  }
  if (rec.Has(StepRecord::kEpoch)) {
    r.has_epoch = true;
    r.last_epoch = rec.epoch;
  }
  return delta;
}

double TrainingMetrics::Rank::TimeSteps(const StepRecord& rec, int64_t delta, bool timed, uint64_t call,
                                        Clock::time_point now) {
  double per_step = -1;
  if (rec.Has(StepRecord::kStepTime)) {
    per_step = rec.step_time;
  } else if (rec.Has(StepRecord::kTotalTime)) {
    if (has_total_time && rec.total_time > last_total_time && delta > 0) {
      per_step = (rec.total_time - last_total_time) / static_cast<double>(delta);
    }
  } else if (timed && has_wall && last_call != call && delta > 0) {
    per_step = std::chrono::duration<double>(now - last_wall).count() / static_cast<double>(delta);
  }
  if (rec.Has(StepRecord::kTotalTime)) {
    has_total_time = true;
    last_total_time = rec.total_time;
  }
  if (timed) {
    has_wall = true;
    last_wall = now;
    last_call = call;
  } else {
    has_wall = false;
  }
  return per_step;
}

void TrainingMetrics::Rank::CountSteps(int64_t delta, double per_step, Clock::time_point now) {
  // Bounded as every count (kMaxStepCount), so that the operator, which refuses a larger one,
  // still reads the pod's answer.
  steps = std::min(steps + static_cast<double>(delta), static_cast<double>(kMaxStepCount));
  seen_step = true;
  last_progress = now;
  if (per_step < 0 || !std::isfinite(per_step)) return;
  step_seconds = per_step;
  const auto& bounds = StepDurationBuckets();
  const size_t bucket = static_cast<size_t>(std::lower_bound(bounds.begin(), bounds.end(), per_step) - bounds.begin());
  buckets[bucket] += static_cast<uint64_t>(delta);
  duration_count += static_cast<uint64_t>(delta);
  duration_sum += per_step * static_cast<double>(delta);
  has_duration = true;
}

void TrainingMetrics::Rank::TakeGauges(const StepRecord& rec, int64_t delta, double per_step) {
  if (rec.Has(StepRecord::kTotalSteps)) total_steps = rec.total_steps;
  if (rec.Has(StepRecord::kLoss)) {
    has_loss = true;
    loss = rec.loss;
  }
  if (rec.Has(StepRecord::kSamplesPerSecond)) {
    has_sps = true;
    sps = rec.samples_per_second;
  } else if (rec.Has(StepRecord::kSamples) && per_step > 0 && delta > 0) {
    has_sps = true;
    sps = rec.samples / (per_step * static_cast<double>(delta));
  }
}

size_t TrainingMetrics::Rank::TakeScalars(const StepRecord& rec) {
  size_t dropped = 0;
  for (size_t i = 0; i < rec.scalar_count; ++i) {
    const StepRecord::Scalar& s = rec.scalars[i];
    auto it = std::find_if(scalars.begin(), scalars.end(), [&](const auto& p) { return p.first == s.name; });
    if (it != scalars.end()) {
      it->second = s.value;
    } else if (scalars.size() >= kMaxScalarsPerRank) {
      ++dropped;
    } else {
      scalars.emplace_back(std::string(s.name), s.value);
      scalar_labels.push_back(",name=\"" + Escaped(std::string(s.name)) + "\"");
    }
  }
  return dropped;
}

void TrainingMetrics::CountRestart() {
  std::lock_guard<std::mutex> lock(mu_);
  restarts_ += 1;
  for (auto& r : ranks_) {
    if (!r) continue;
    r->fresh = true;
    r->has_total_time = false;
    r->has_wall = false;
  }
}

void TrainingMetrics::SetMainProcessUp(std::optional<bool> up) {
  std::lock_guard<std::mutex> lock(mu_);
  main_up_ = up;
}

void TrainingMetrics::SetPeers(size_t total, size_t ready) {
  std::lock_guard<std::mutex> lock(mu_);
  peers_ = static_cast<double>(total);
  peers_ready_ = static_cast<double>(ready);
}

void TrainingMetrics::AddPeerWait(double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  if (seconds > 0) peer_wait_ += seconds;
}

std::vector<RankProgress> TrainingMetrics::Progress(Clock::time_point now) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<RankProgress> out;
  for (const auto& r : ranks_) {
    if (!r || !r->seen_step) continue;
    RankProgress p;
    p.rank = r->rank;
    p.step = r->last_step;
    p.idle_seconds = std::chrono::duration<double>(now - r->last_progress).count();
    p.steps = r->steps;
    if (r->has_epoch) p.epoch = r->last_epoch;
    if (r->total_steps > 0) p.total_steps = r->total_steps;
    if (r->has_loss) p.loss = r->loss;
    if (r->has_sps) p.samples_per_second = r->sps;
    if (r->step_seconds >= 0) p.step_seconds = r->step_seconds;
    out.push_back(p);
  }
  return out;
}

void TrainingMetrics::AppendExposition(std::string* out) const {
  static const std::vector<std::string> le = [] {
    std::vector<std::string> labels;
    for (double bound : StepDurationBuckets()) {
      std::string text = ",le=\"";
      AppendDouble(bound, &text);
      labels.push_back(text + "\"");
    }
    labels.push_back(",le=\"+Inf\"");
    return labels;
  }();
  std::lock_guard<std::mutex> lock(mu_);
  // One family of per-rank series: `has` says whether a rank has it, `value` what it is.
  auto family = [&](const Family& f, auto has, auto value) {
    bool first = true;
    for (const auto& r : ranks_) {
      if (!r || !has(*r)) continue;
      if (first) Header(f, out);
      first = false;
      Line(f.name, "", r->labels, "", value(*r), out);
    }
  };
  family(kSteps, [](const Rank&) { return true; }, [](const Rank& r) { return r.steps; });
  family(kStep, [](const Rank& r) { return r.has_step_number; },
         [](const Rank& r) { return static_cast<double>(r.last_step); });
  family(kEpoch, [](const Rank& r) { return r.has_epoch; }, [](const Rank& r) { return static_cast<double>(r.last_epoch); });
  family(kSamplesPerSecond, [](const Rank& r) { return r.has_sps; }, [](const Rank& r) { return r.sps; });
  family(kLoss, [](const Rank& r) { return r.has_loss; }, [](const Rank& r) { return r.loss; });
  family(kLastStep, [](const Rank& r) { return r.has_last_step; }, [](const Rank& r) { return r.last_step_time; });
  bool first = true;
  for (const auto& r : ranks_) {
    if (!r || !r->has_duration) continue;
    if (first) Header(kDuration, out);
    first = false;
    uint64_t cumulative = 0;
    for (size_t b = 0; b <= kBuckets; ++b) {
      cumulative += r->buckets[b];
      Line(kDuration.name, "_bucket", r->labels, le[b], static_cast<double>(cumulative), out);
    }
    Line(kDuration.name, "_sum", r->labels, "", r->duration_sum, out);
    Line(kDuration.name, "_count", r->labels, "", static_cast<double>(r->duration_count), out);
  }
  first = true;
  for (const auto& r : ranks_) {
    if (!r) continue;
    for (size_t i = 0; i < r->scalars.size(); ++i) {
      if (first) Header(kScalar, out);
      first = false;
      Line(kScalar.name, "", r->labels, r->scalar_labels[i], r->scalars[i].second, out);
    }
  }
  if (main_up_) {
    Header(kMainUp, out);
    Line(kMainUp.name, "", pod_labels_, "", *main_up_ ? 1 : 0, out);
  }
  for (const auto& [f, value] : {std::pair<const Family*, double>{&kRestarts, restarts_},
                                 {&kPeers, peers_},
                                 {&kPeersReady, peers_ready_},
                                 {&kPeerWait, peer_wait_}}) {
    Header(*f, out);
    Line(f->name, "", pod_labels_, "", value, out);
  }
}

}  // namespace fleet::sidecar
