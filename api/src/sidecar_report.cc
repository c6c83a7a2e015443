#include "fleet/api/sidecar_report.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "fleet/api/names.h"
#include "fleet/base/escape.h"
#include "fleet/base/json_read.h"

namespace fleet::api {
namespace {

using Json = SidecarReport::Json;

namespace key {
constexpr const char* kReady = "ready";
constexpr const char* kNotReady = "notReady";
constexpr const char* kGateOpen = "gateOpen";
constexpr const char* kMainProcess = "mainProcess";
constexpr const char* kRanks = "ranks";
constexpr const char* kStalled = "stalled";
constexpr const char* kPeers = "peers";
constexpr const char* kCondition = "condition";
constexpr const char* kConditionError = "conditionError";
constexpr const char* kCheckpoint = "checkpoint";
constexpr const char* kResult = "result";
constexpr const char* kTrainer = "trainer";
constexpr const char* kState = "state";
constexpr const char* kRun = "run";
constexpr const char* kInstance = "instance";

constexpr const char* kRank = "rank";
constexpr const char* kStep = "step";
constexpr const char* kSteps = "steps";
constexpr const char* kIdleSeconds = "idleSeconds";
constexpr const char* kEpoch = "epoch";
constexpr const char* kTotalSteps = "totalSteps";
constexpr const char* kLoss = "loss";
constexpr const char* kSamplesPerSecond = "samplesPerSecond";
constexpr const char* kStepSeconds = "stepSeconds";

constexpr const char* kRunning = "running";
constexpr const char* kPid = "pid";
constexpr const char* kCommand = "command";

constexpr const char* kTotal = "total";
constexpr const char* kUnreachable = "unreachable";

constexpr const char* kType = "type";
constexpr const char* kStatus = "status";
constexpr const char* kReason = "reason";
constexpr const char* kMessage = "message";
}  // namespace key

constexpr const char* kTrue = "True";
constexpr const char* kFalse = "False";

// ---- reading values: nullopt for another type, or a number out of its range (json_read.h) ----

// A finite number in [low, high].
auto NumberIn(double low, double high) {
  return [low, high](const Json& v) -> std::optional<double> {
    const auto n = AsNumber(v);
    return n && std::isfinite(*n) && *n >= low && *n <= high ? n : std::nullopt;
  };
}

// A whole number in [low, high] (a whole JSON float such as 60.0 too), compared as an integer.
auto WholeIn(int64_t low, int64_t high) {
  return [low, high](const Json& v) -> std::optional<int64_t> {
    const auto n = AsInt64(v);
    return n && *n >= low && *n <= high ? n : std::nullopt;
  };
}

std::optional<double> AsFinite(const Json& v) {
  return NumberIn(-std::numeric_limits<double>::max(), std::numeric_limits<double>::max())(v);
}

constexpr auto kMaxCount = static_cast<int64_t>(kMaxReportSteps);
const auto AsCount = WholeIn(0, kMaxCount);

std::optional<int> AsRank(const Json& v) {
  const auto n = WholeIn(0, kMaxReportRank)(v);
  return n ? std::optional<int>(static_cast<int>(*n)) : std::nullopt;
}

std::optional<std::string> AsText(const Json& v) {
  const auto s = AsString(v);
  return s ? std::optional<std::string>(BoundText(*s, kMaxReportTextBytes)) : std::nullopt;
}

// `object`'s member `name` when it is an object; null otherwise.
const Json* ObjectMember(const Json& object, const char* name) {
  const Json* member = Member(object, name);
  return member && member->is_object() ? member : nullptr;
}

// The entries of `object`'s array `name` that `as` reads (none when it is not an array).
template <typename As>
auto ArrayOf(const Json& object, const char* name, As as) {
  std::vector<typename decltype(as(object))::value_type> out;
  const Json* array = Member(object, name);
  if (!array || !array->is_array()) return out;
  for (const Json& v : *array) {
    if (auto value = as(v)) out.push_back(std::move(*value));
  }
  return out;
}

Result<SidecarReport::Rank> ReadRank(const Json& v, size_t index) {
  const std::string where = std::string(key::kRanks) + "[" + std::to_string(index) + "]";
  if (!v.is_object()) return Error{where + ": not an object"};
  SidecarReport::Rank r;
  const auto rank = MemberAs(v, key::kRank, AsRank);
  if (!rank) return Error{where + "." + key::kRank + ": not a whole number from 0 to " + std::to_string(kMaxReportRank)};
  r.rank = *rank;
  const auto step = MemberAs(v, key::kStep, AsCount);
  const auto steps = MemberAs(v, key::kSteps, NumberIn(0, kMaxReportSteps));
  // A sidecar older than "steps" reported only its step number.
  if (!steps && !step) return Error{where + "." + key::kSteps + ": not a number from 0 to 2^53"};
  r.step = step.value_or(0);
  r.steps = steps ? *steps : static_cast<double>(*step);
  r.idle_seconds = MemberAs(v, key::kIdleSeconds, NumberIn(0, kMaxReportSeconds)).value_or(0);
  r.epoch = MemberAs(v, key::kEpoch, AsCount);
  r.total_steps = MemberAs(v, key::kTotalSteps, WholeIn(1, kMaxCount));
  r.loss = MemberAs(v, key::kLoss, AsFinite);
  r.samples_per_second = MemberAs(v, key::kSamplesPerSecond, NumberIn(0, kMaxReportSamplesPerSecond));
  r.step_seconds = MemberAs(v, key::kStepSeconds, NumberIn(1 / kMaxReportStepsPerSecond, kMaxReportSeconds));
  return r;
}

std::optional<SidecarReport::Condition> ReadCondition(const Json& v) {
  const auto type = MemberAs(v, key::kType, AsString);
  const auto status = MemberAs(v, key::kStatus, AsString);
  if (type != kProgressConditionType || (status != kTrue && status != kFalse)) return std::nullopt;
  return SidecarReport::Condition{status == kTrue, MemberAs(v, key::kReason, AsText).value_or(""),
                                  MemberAs(v, key::kMessage, AsText).value_or("")};
}

std::optional<SidecarReport::Checkpoint> ReadCheckpoint(const Json& v) {
  const auto result = MemberAs(v, key::kResult, AsText);
  if (!result) return std::nullopt;
  return SidecarReport::Checkpoint{*result, MemberAs(v, key::kStep, AsCount),
                                   MemberAs(v, key::kMessage, AsText).value_or("")};
}

// A trainer whose state is not one of the condition's reasons, or whose run is not a whole number
// in 0..INT_MAX, is left out.
std::optional<SidecarReport::Trainer> ReadTrainer(const Json& v) {
  const auto state = MemberAs(v, key::kState, AsString);
  const auto run = MemberAs(v, key::kRun, WholeIn(0, std::numeric_limits<int>::max()));
  if (!state || !run) return std::nullopt;
  const auto report = TrainerReport::FromCondition(*state, "run " + std::to_string(*run));
  if (!report) return std::nullopt;
  return SidecarReport::Trainer{*report, MemberAs(v, key::kInstance, AsText).value_or(""),
                                MemberAs(v, key::kMessage, AsText).value_or(""),
                                MemberAs(v, key::kConditionError, AsText).value_or("")};
}

Json RankJson(const SidecarReport::Rank& r) {
  Json out = {{key::kRank, r.rank}, {key::kStep, r.step}, {key::kSteps, r.steps}, {key::kIdleSeconds, r.idle_seconds}};
  if (r.epoch) out[key::kEpoch] = *r.epoch;
  if (r.total_steps) out[key::kTotalSteps] = *r.total_steps;
  // JSON has no NaN or infinity (they would be written as null): such a number is left out.
  const auto finite = [&out](const char* name, const std::optional<double>& v) {
    if (v && std::isfinite(*v)) out[name] = *v;
  };
  finite(key::kLoss, r.loss);
  finite(key::kSamplesPerSecond, r.samples_per_second);
  finite(key::kStepSeconds, r.step_seconds);
  return out;
}

}  // namespace

Result<SidecarReport> SidecarReport::FromJson(const Json& json) {
  if (!json.is_object()) return Error{"not a JSON object"};
  const Json* ranks = Member(json, key::kRanks);
  if (!ranks || !ranks->is_array()) return Error{std::string(key::kRanks) + ": not an array"};
  SidecarReport report;
  report.ranks.reserve(ranks->size());
  for (size_t i = 0; i < ranks->size(); ++i) {
    FLEET_ASSIGN_OR_RETURN(Rank rank, ReadRank((*ranks)[i], i));
    report.ranks.push_back(rank);
  }
  report.stalled = ArrayOf(json, key::kStalled, AsRank);
  report.ready = MemberAs(json, key::kReady, AsBool).value_or(false);
  report.not_ready = MemberAs(json, key::kNotReady, AsText).value_or("");
  report.gate_open = MemberAs(json, key::kGateOpen, AsBool).value_or(false);
  if (const Json* main = ObjectMember(json, key::kMainProcess)) {
    report.main_process = MainProcess{MemberAs(*main, key::kRunning, AsBool).value_or(false),
                                      MemberAs(*main, key::kPid, AsInt<int>).value_or(0),
                                      MemberAs(*main, key::kCommand, AsText).value_or("")};
  }
  if (const Json* peers = ObjectMember(json, key::kPeers)) {
    report.peers.total = std::max(0, MemberAs(*peers, key::kTotal, AsInt<int>).value_or(0));
    report.peers.unreachable = ArrayOf(*peers, key::kUnreachable, AsText);
  }
  if (const Json* condition = ObjectMember(json, key::kCondition)) report.condition = ReadCondition(*condition);
  report.condition_error = MemberAs(json, key::kConditionError, AsText).value_or("");
  if (const Json* checkpoint = ObjectMember(json, key::kCheckpoint)) report.checkpoint = ReadCheckpoint(*checkpoint);
  if (const Json* trainer = ObjectMember(json, key::kTrainer)) report.trainer = ReadTrainer(*trainer);
  return report;
}

Json SidecarReport::ToJson() const {
  Json out = {{key::kReady, ready}, {key::kGateOpen, gate_open}};
  if (!not_ready.empty()) out[key::kNotReady] = not_ready;
  if (main_process) {
    out[key::kMainProcess] = {
        {key::kRunning, main_process->running}, {key::kPid, main_process->pid}, {key::kCommand, main_process->command}};
  }
  Json rank_list = Json::array();
  for (const Rank& r : ranks) rank_list.push_back(RankJson(r));
  out[key::kRanks] = std::move(rank_list);
  out[key::kStalled] = stalled;
  out[key::kPeers] = {{key::kTotal, peers.total}, {key::kUnreachable, peers.unreachable}};
  if (condition) {
    out[key::kCondition] = {{key::kType, kProgressConditionType},
                            {key::kStatus, condition->status ? kTrue : kFalse},
                            {key::kReason, condition->reason},
                            {key::kMessage, condition->message}};
  }
  if (!condition_error.empty()) out[key::kConditionError] = condition_error;
  if (checkpoint) {
    out[key::kCheckpoint] = {{key::kResult, checkpoint->result}, {key::kMessage, checkpoint->message}};
    if (checkpoint->step) out[key::kCheckpoint][key::kStep] = *checkpoint->step;
  }
  if (trainer) {
    Json& t = out[key::kTrainer] = {{key::kState, trainer->report.Reason()},
                                    {key::kRun, trainer->report.run},
                                    {key::kInstance, trainer->instance},
                                    {key::kMessage, trainer->message}};
    if (!trainer->condition_error.empty()) t[key::kConditionError] = trainer->condition_error;
  }
  return out;
}

}  // namespace fleet::api
