#include "fleet/api/progress.h"

#include <limits>
#include <utility>

#include "fleet/base/time.h"
#include "fleet/base/json_read.h"

namespace fleet::api {
namespace {

namespace key {
constexpr const char* kUpdateTime = "updateTime";
constexpr const char* kStep = "step";
constexpr const char* kTotalSteps = "totalSteps";
constexpr const char* kPercent = "percent";
constexpr const char* kEtaSeconds = "etaSeconds";
constexpr const char* kStepsPerSecond = "stepsPerSecond";
constexpr const char* kSamplesPerSecond = "samplesPerSecond";
constexpr const char* kLoss = "loss";
constexpr const char* kRanks = "ranks";
constexpr const char* kReportingRanks = "reportingRanks";
constexpr const char* kStalledRanks = "stalledRanks";
constexpr const char* kRoles = "roles";
constexpr const char* kSlowest = "slowest";
constexpr const char* kRankDetails = "rankDetails";
constexpr const char* kStepText = "stepText";
constexpr const char* kSpeedText = "speedText";
constexpr const char* kEtaText = "etaText";
constexpr const char* kSlowestText = "slowestText";

constexpr const char* kMinStep = "minStep";
constexpr const char* kMedianStep = "medianStep";
constexpr const char* kMaxStep = "maxStep";

constexpr const char* kRole = "role";
constexpr const char* kRank = "rank";
constexpr const char* kPod = "pod";
constexpr const char* kLag = "lag";
constexpr const char* kIdleSeconds = "idleSeconds";
constexpr const char* kStalled = "stalled";
}  // namespace key

// ---- reading members: unset when absent or of another type (json_read.h) ----

std::optional<int64_t> Int(const Json& object, const char* name) { return MemberAs(object, name, AsInt<int64_t>); }
std::optional<int> SmallInt(const Json& object, const char* name) { return MemberAs(object, name, AsInt<int>); }
std::optional<double> Number(const Json& object, const char* name) { return MemberAs(object, name, AsNumber); }
std::optional<std::string> String(const Json& object, const char* name) { return MemberAs(object, name, AsString); }
std::optional<bool> Bool(const Json& object, const char* name) { return MemberAs(object, name, AsBool); }

RoleProgress ReadRole(const Json& v) {
  RoleProgress r;
  r.ranks = SmallInt(v, key::kRanks).value_or(0);
  r.reporting_ranks = SmallInt(v, key::kReportingRanks).value_or(0);
  r.min_step = Int(v, key::kMinStep).value_or(0);
  r.median_step = Int(v, key::kMedianStep).value_or(0);
  r.max_step = Int(v, key::kMaxStep).value_or(0);
  r.steps_per_second = Number(v, key::kStepsPerSecond);
  r.loss = Number(v, key::kLoss);
  return r;
}

Json WriteRole(const RoleProgress& r) {
  Json out = {{key::kRanks, r.ranks}, {key::kReportingRanks, r.reporting_ranks}, {key::kMinStep, r.min_step},
              {key::kMedianStep, r.median_step}, {key::kMaxStep, r.max_step}};
  if (r.steps_per_second) out[key::kStepsPerSecond] = *r.steps_per_second;
  if (r.loss) out[key::kLoss] = *r.loss;
  return out;
}

RankProgress ReadRank(const Json& v) {
  RankProgress r;
  r.role = String(v, key::kRole).value_or("");
  r.rank = SmallInt(v, key::kRank).value_or(0);
  r.pod = String(v, key::kPod).value_or("");
  r.step = Int(v, key::kStep);
  r.lag = Int(v, key::kLag);
  r.idle_seconds = Int(v, key::kIdleSeconds);
  r.stalled = Bool(v, key::kStalled);
  r.steps_per_second = Number(v, key::kStepsPerSecond);
  r.loss = Number(v, key::kLoss);
  return r;
}

Json WriteRank(const RankProgress& r) {
  Json out = {{key::kRole, r.role}, {key::kRank, r.rank}, {key::kPod, r.pod}};
  if (r.step) out[key::kStep] = *r.step;
  if (r.lag) out[key::kLag] = *r.lag;
  if (r.idle_seconds) out[key::kIdleSeconds] = *r.idle_seconds;
  if (r.stalled) out[key::kStalled] = *r.stalled;
  if (r.steps_per_second) out[key::kStepsPerSecond] = *r.steps_per_second;
  if (r.loss) out[key::kLoss] = *r.loss;
  return out;
}

// Sets `out` (a T or an optional T) from `value` when it was read, and marks the member read.
template <typename T, typename V>
void Take(Json& unread, const char* name, T& out, const std::optional<V>& value) {
  if (!value) return;
  out = *value;
  unread.erase(name);
}

}  // namespace

Progress Progress::FromJson(const Json& json) {
  Progress p;
  if (!json.is_object()) return p;
  Json& unread = p.unknown_fields = json;
  const auto update_time = String(json, key::kUpdateTime);
  Take(unread, key::kUpdateTime, p.update_time, update_time ? ParseRfc3339(*update_time) : std::nullopt);
  Take(unread, key::kStep, p.step, Int(json, key::kStep));
  Take(unread, key::kTotalSteps, p.total_steps, Int(json, key::kTotalSteps));
  Take(unread, key::kPercent, p.percent, Number(json, key::kPercent));
  Take(unread, key::kEtaSeconds, p.eta_seconds, Int(json, key::kEtaSeconds));
  Take(unread, key::kStepsPerSecond, p.steps_per_second, Number(json, key::kStepsPerSecond));
  Take(unread, key::kSamplesPerSecond, p.samples_per_second, Number(json, key::kSamplesPerSecond));
  Take(unread, key::kLoss, p.loss, Number(json, key::kLoss));
  Take(unread, key::kRanks, p.ranks, SmallInt(json, key::kRanks));
  Take(unread, key::kReportingRanks, p.reporting_ranks, SmallInt(json, key::kReportingRanks));
  Take(unread, key::kStalledRanks, p.stalled_ranks, SmallInt(json, key::kStalledRanks));
  Take(unread, key::kStepText, p.step_text, String(json, key::kStepText));
  Take(unread, key::kSpeedText, p.speed_text, String(json, key::kSpeedText));
  Take(unread, key::kEtaText, p.eta_text, String(json, key::kEtaText));
  Take(unread, key::kSlowestText, p.slowest_text, String(json, key::kSlowestText));
  if (const Json* roles = Member(json, key::kRoles); roles && roles->is_object()) {
    for (const auto& [role, v] : roles->items()) {
      if (v.is_object()) p.roles[role] = ReadRole(v);
    }
    unread.erase(key::kRoles);
  }
  if (const Json* slowest = Member(json, key::kSlowest); slowest && slowest->is_object()) {
    p.slowest = ReadRank(*slowest);
    unread.erase(key::kSlowest);
  }
  if (const Json* details = Member(json, key::kRankDetails); details && details->is_array()) {
    for (const Json& v : *details) {
      if (v.is_object()) p.rank_details.push_back(ReadRank(v));
    }
    unread.erase(key::kRankDetails);
  }
  return p;
}

Json Progress::ToJson() const {
  Json out = unknown_fields.is_object() ? unknown_fields : Json::object();
  // Milliseconds (metav1.MicroTime-like): whole seconds would let writes come up to 1 s early.
  if (update_time) out[key::kUpdateTime] = FormatRfc3339(*update_time, TimePrecision::kMillis);
  if (step) out[key::kStep] = *step;
  if (total_steps) out[key::kTotalSteps] = *total_steps;
  if (percent) out[key::kPercent] = *percent;
  if (eta_seconds) out[key::kEtaSeconds] = *eta_seconds;
  if (steps_per_second) out[key::kStepsPerSecond] = *steps_per_second;
  if (samples_per_second) out[key::kSamplesPerSecond] = *samples_per_second;
  if (loss) out[key::kLoss] = *loss;
  out[key::kRanks] = ranks;
  out[key::kReportingRanks] = reporting_ranks;
  out[key::kStalledRanks] = stalled_ranks;
  Json role_map = Json::object();
  for (const auto& [role, r] : roles) role_map[role] = WriteRole(r);
  out[key::kRoles] = std::move(role_map);
  if (slowest) out[key::kSlowest] = WriteRank(*slowest);
  Json details = Json::array();
  for (const RankProgress& r : rank_details) details.push_back(WriteRank(r));
  out[key::kRankDetails] = std::move(details);
  out[key::kStepText] = step_text;
  if (speed_text) out[key::kSpeedText] = *speed_text;
  if (eta_text) out[key::kEtaText] = *eta_text;
  out[key::kSlowestText] = slowest_text;
  return out;
}

bool operator==(const Progress& a, const Progress& b) { return a.ToJson() == b.ToJson(); }

}  // namespace fleet::api
