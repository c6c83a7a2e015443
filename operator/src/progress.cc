#include "fleet/operator/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <utility>

#include "fleet/base/time.h"

namespace fleet::op {
namespace {

// The lower median: of two ranks, the slower one's (a job is as far as its slower half).
double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  const size_t mid = (values.size() - 1) / 2;
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(mid), values.end());
  return values[mid];
}

// Two significant decimals at most: a status that changes with every digit of noise would be
// written at every interval for nothing.
double Rounded(double v) { return std::round(v * 100) / 100; }

// A loss to 4 significant digits: what a person reads, and no write for noise in the 10th digit.
// Through its decimal text: scaling by a power of ten overflows for a denormal (1e-310 became NaN,
// which is never equal to itself, and made a status write at every interval).
double Significant(double v) {
  if (!std::isfinite(v)) return 0;
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", v);
  return std::strtod(text, nullptr);
}

std::string Compact(double v) {
  char text[32];
  std::snprintf(text, sizeof text, v >= 100 ? "%.0f" : v >= 10 ? "%.1f" : "%.2f", v);
  return text;
}

// A rank's steps per second: from its count across two collections when it has one (whatever its
// log's cadence), else from its latest step's duration.
std::optional<double> Speed(const RankReport& r, const std::map<std::pair<std::string, int>, const RankReport*>& before,
                            double seconds) {
  auto it = before.find({r.role, r.rank});
  if (it != before.end() && seconds > 0 && r.steps >= it->second->steps) {
    return std::min(kMaxStepsPerSecond, (r.steps - it->second->steps) / seconds);
  }
  if (r.step_seconds) return 1 / *r.step_seconds;   // SidecarReport::FromJson kept it >= 1 / kMaxStepsPerSecond
  return std::nullopt;
}

struct RankRow {
  const RankReport* report;
  std::optional<double> speed;
  double lag = 0;
};

}  // namespace

Result<std::vector<RankReport>> ParseSidecarStatus(std::string_view body, const std::string& role,
                                                   const std::string& pod) {
  FLEET_ASSIGN_OR_RETURN(const api::SidecarReport report,
                         api::SidecarReport::FromJson(Json::parse(body, nullptr, /*allow_exceptions=*/false)));
  const std::set<int> stalled(report.stalled.begin(), report.stalled.end());
  std::vector<RankReport> out;
  out.reserve(report.ranks.size());
  for (const api::SidecarReport::Rank& rank : report.ranks) {
    RankReport r;
    r.role = role;
    r.pod = pod;
    r.rank = rank.rank;
    r.steps = std::floor(rank.steps);
    // "step 5001/10000": the logged number counts against the total (a run resumed from a
    // checkpoint starts there), where the sidecar's count starts at the first step it saw.
    if (rank.total_steps && rank.step > 0) r.steps = static_cast<double>(rank.step);
    r.idle_seconds = rank.idle_seconds;
    r.stalled = stalled.count(rank.rank) > 0;
    r.total_steps = rank.total_steps;
    r.loss = rank.loss;
    r.samples_per_second = rank.samples_per_second;
    r.step_seconds = rank.step_seconds;
    out.push_back(std::move(r));
  }
  return out;
}

namespace {

// A role's figures from its rows; sets each row's lag behind the role's median.
RoleProgress SummarizeRole(std::vector<RankRow>& rows, int expected_ranks) {
  std::vector<double> steps, speeds;
  for (const RankRow& row : rows) {
    steps.push_back(row.report->steps);
    if (row.speed) speeds.push_back(*row.speed);
  }
  const double median = Median(steps);
  for (RankRow& row : rows) row.lag = std::max(0.0, median - row.report->steps);
  RoleProgress summary;
  summary.ranks = expected_ranks;
  summary.reporting_ranks = static_cast<int>(rows.size());
  summary.min_step = static_cast<int64_t>(*std::min_element(steps.begin(), steps.end()));
  summary.median_step = static_cast<int64_t>(median);
  summary.max_step = static_cast<int64_t>(*std::max_element(steps.begin(), steps.end()));
  if (!speeds.empty()) summary.steps_per_second = Rounded(Median(speeds));
  // The loss of the lowest rank that reports one: rank 0's, as Paddle's examples print it.
  const RankRow* lowest = nullptr;
  for (const RankRow& row : rows) {
    if (row.report->loss && (!lowest || row.report->rank < lowest->report->rank)) lowest = &row;
  }
  if (lowest) summary.loss = Significant(*lowest->report->loss);
  return summary;
}

// The job's step, total, percent and ETA, from its main role's median and speed.
void SetSteps(int64_t step, int64_t total, std::optional<double> speed, Progress& progress) {
  progress.step = step;
  progress.steps_per_second = speed;
  std::string step_text = std::to_string(step);
  if (total > 0) {
    const double percent = std::min(100.0, 100.0 * static_cast<double>(step) / static_cast<double>(total));
    progress.total_steps = total;
    progress.percent = std::round(percent * 10) / 10;
    step_text += "/" + std::to_string(total) + " (" + std::to_string(static_cast<int>(percent)) + "%)";
    if (speed && *speed > 0) {
      const double eta = std::min(kMaxProgressSeconds, static_cast<double>(std::max<int64_t>(0, total - step)) / *speed);
      // Rounded up, as fleetctl rounds the time left.
      const auto eta_seconds = static_cast<int64_t>(std::ceil(eta));
      progress.eta_seconds = eta_seconds;
      progress.eta_text = HumanDuration(eta_seconds);
    }
  }
  progress.step_text = step_text;
  if (speed) progress.speed_text = Compact(*speed) + " step/s";
}

// The counts over every rank: expected, reporting, stalled, and their samples per second.
void SetCounts(const std::vector<RankRow>& all, Progress& progress) {
  double samples = 0;
  bool has_samples = false;
  for (const RankRow& row : all) {
    if (row.report->samples_per_second) {
      samples += *row.report->samples_per_second;
      has_samples = true;
    }
  }
  if (has_samples) progress.samples_per_second = Rounded(samples);
  for (const auto& [role, summary] : progress.roles) progress.ranks += summary.ranks;
  for (const RankRow& row : all) progress.stalled_ranks += row.report->stalled ? 1 : 0;
  progress.reporting_ranks = static_cast<int>(all.size());
}

RankProgress RankOf(const RankRow& row) {
  RankProgress r;
  r.role = row.report->role;
  r.rank = row.report->rank;
  r.pod = row.report->pod;
  r.step = static_cast<int64_t>(row.report->steps);
  r.lag = static_cast<int64_t>(row.lag);
  return r;
}

// The slowest rank, and the first kProgressRankDetails ranks slowest first: the most steps behind
// its role's median, then the longest idle.
void SetSlowest(std::vector<RankRow> all, Progress& progress) {
  std::stable_sort(all.begin(), all.end(), [](const RankRow& a, const RankRow& b) {
    if (a.lag != b.lag) return a.lag > b.lag;
    if (a.report->idle_seconds != b.report->idle_seconds) return a.report->idle_seconds > b.report->idle_seconds;
    return std::make_pair(a.report->role, a.report->rank) < std::make_pair(b.report->role, b.report->rank);
  });
  const RankRow& slowest = all.front();
  progress.slowest = RankOf(slowest);
  const int64_t lag = progress.slowest->lag.value_or(0);
  progress.slowest_text = slowest.report->role + "-" + std::to_string(slowest.report->rank) +
                          (lag > 0 ? " (-" + std::to_string(lag) + ")" : "");
  for (size_t i = 0; i < all.size() && i < kProgressRankDetails; ++i) {
    const RankRow& row = all[i];
    RankProgress d = RankOf(row);
    // Whole seconds: idle time grows between steps, and must not make a write by itself.
    d.idle_seconds = static_cast<int64_t>(row.report->idle_seconds);
    d.stalled = row.report->stalled;
    if (row.speed) d.steps_per_second = Rounded(*row.speed);
    if (row.report->loss) d.loss = Significant(*row.report->loss);
    progress.rank_details.push_back(std::move(d));
  }
}

}  // namespace

std::optional<Progress> SummarizeProgress(const ProgressInput& in) {
  if (in.ranks.empty()) return std::nullopt;
  std::map<std::pair<std::string, int>, const RankReport*> before;
  if (in.previous) {
    for (const RankReport& r : *in.previous) before[{r.role, r.rank}] = &r;
  }
  // Per role: its rows, and the median its lags are measured from.
  std::map<std::string, std::vector<RankRow>> roles;
  for (const RankReport& r : in.ranks) roles[r.role].push_back({&r, Speed(r, before, in.seconds_since_previous), 0});
  Progress progress;
  std::vector<RankRow> all;
  for (auto& [role, rows] : roles) {
    auto expected = in.expected_ranks.find(role);
    progress.roles[role] =
        SummarizeRole(rows, expected != in.expected_ranks.end() ? expected->second : static_cast<int>(rows.size()));
    all.insert(all.end(), rows.begin(), rows.end());
  }
  // The job's figures are its workers' (a heter-only report still shows something).
  const std::string main = progress.roles.count("worker") ? "worker" : progress.roles.begin()->first;
  const RoleProgress& m = progress.roles[main];
  int64_t total = in.total_steps;
  if (total <= 0) {
    for (const RankRow& row : roles[main]) total = std::max(total, row.report->total_steps.value_or(0));
  }
  SetSteps(m.median_step, total, m.steps_per_second, progress);
  progress.loss = m.loss;
  SetCounts(all, progress);
  SetSlowest(std::move(all), progress);
  return progress;
}

}  // namespace fleet::op
