// SidecarReport: fleet-sidecar's GET /status answer, written by the sidecar and read by the
// operator through one type. The keys are pinned as the sidecar serves them (docs/sidecar.md), and
// the reader is checked against hostile answers (docs/security.md, "The progress path").
#include "fleet/api/sidecar_report.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "fleet/api/names.h"

namespace fleet::api::testing {
namespace {

using Json = SidecarReport::Json;
using ::testing::HasSubstr;

// An answer as a sidecar writes it, every member set (each to a value other than its default).
const Json& FullAnswer() {
  static const Json answer = Json::parse(R"json({
    "ready": false,
    "notReady": "rank 3 stalled: no step for 10m5s (stall window 10m)",
    "gateOpen": true,
    "mainProcess": {"running": true, "pid": 42, "command": "python train.py --epochs 3"},
    "ranks": [
      {"rank": 2, "step": 1200, "steps": 5200.0, "idleSeconds": 1.5, "epoch": 3, "totalSteps": 10000,
       "loss": 0.25, "samplesPerSecond": 512.5, "stepSeconds": 0.125},
      {"rank": 3, "step": 7, "steps": 80.0, "idleSeconds": 605.0}
    ],
    "stalled": [3],
    "peers": {"total": 2, "unreachable": ["10.0.0.7:6170 (connection refused)"]},
    "condition": {"type": "fleet.paddlepaddle.org/TrainingProgress", "status": "False", "reason": "Stalled",
                  "message": "rank 3 (pod j-worker-1) has reported no step for 10m5s"},
    "conditionError": "pods \"j-worker-1\" is forbidden",
    "checkpoint": {"result": "Saved", "step": 1200, "message": "step 1200 saved by the trainer in 3s"},
    "trainer": {"state": "AtGate", "run": 5, "instance": "4242:98765",
                "message": "run 5: instance 4242:98765 waits at the gate", "conditionError": "pods is forbidden"}
  })json");
  return answer;
}

SidecarReport Read(const Json& answer) {
  auto report = SidecarReport::FromJson(answer);
  EXPECT_TRUE(report.ok()) << report.error() << "\n" << answer.dump();
  return report.ok() ? *report : SidecarReport{};
}

// A rank's answer as the reader keeps it: {"ranks": [rank]} read, and written again.
Json RankAsRead(const Json& rank) { return Read({{"ranks", Json::array({rank})}}).ToJson()["ranks"][0]; }

TEST(SidecarReportTest, ReadsAndWritesAnAnswerAsTheSidecarServesIt) {
  const SidecarReport report = Read(FullAnswer());
  EXPECT_EQ(report.ToJson(), FullAnswer());

  ASSERT_EQ(report.ranks.size(), 2u);
  const SidecarReport::Rank& r = report.ranks[0];
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.step, 1200);
  EXPECT_EQ(r.steps, 5200);
  EXPECT_EQ(r.idle_seconds, 1.5);
  EXPECT_EQ(r.epoch, 3);
  EXPECT_EQ(r.total_steps, 10000);
  EXPECT_EQ(r.loss, 0.25);
  EXPECT_EQ(r.samples_per_second, 512.5);
  EXPECT_EQ(r.step_seconds, 0.125);
  EXPECT_FALSE(report.ranks[1].loss.has_value());
  EXPECT_EQ(report.stalled, std::vector<int>{3});
  ASSERT_TRUE(report.main_process.has_value());
  EXPECT_EQ(report.main_process->pid, 42);
  ASSERT_TRUE(report.condition.has_value());
  EXPECT_FALSE(report.condition->status);
  EXPECT_EQ(report.peers.total, 2);
  ASSERT_TRUE(report.trainer.has_value());
  EXPECT_EQ(report.trainer->report.state, TrainerState::kAtGate);
  EXPECT_EQ(report.trainer->report.run, 5);
  EXPECT_EQ(report.trainer->instance, "4242:98765");
}

TEST(SidecarReportTest, WritesWhatItIsGivenAndReadsItBack) {
  SidecarReport report;
  report.ready = true;
  report.gate_open = true;
  report.ranks.push_back({0, 10, 10, 0.25, std::nullopt, 1000, 1.5, std::nullopt, 0.5});
  report.peers.total = 1;
  report.condition = SidecarReport::Condition{true, "Progressing", "rank 0 at step 10"};
  const Json written = report.ToJson();
  EXPECT_EQ(written, Json::parse(R"json({"ready": true, "gateOpen": true,
      "ranks": [{"rank": 0, "step": 10, "steps": 10.0, "idleSeconds": 0.25, "totalSteps": 1000, "loss": 1.5,
                 "stepSeconds": 0.5}],
      "stalled": [], "peers": {"total": 1, "unreachable": []},
      "condition": {"type": "fleet.paddlepaddle.org/TrainingProgress", "status": "True", "reason": "Progressing",
                    "message": "rank 0 at step 10"}})json"))
      << written.dump();
  EXPECT_EQ(Read(written).ToJson(), written);
}

// Every key the answer has: each member of an object, at every depth (the first of an array's).
void CollectKeys(const Json& v, const Json::json_pointer& at, std::vector<Json::json_pointer>& out) {
  if (v.is_array() && !v.empty()) CollectKeys(v[0], at / 0, out);
  if (!v.is_object()) return;
  for (const auto& [name, member] : v.items()) {
    out.push_back(at / name);
    CollectKeys(member, at / name, out);
  }
}

// The keys ToJson writes are exactly the keys FromJson reads: the round trip above, with every
// member set to other than its default, shows that every member is read from the key it is
// written under; and here no key ToJson writes is left unread (without it, the report read differs).
TEST(SidecarReportTest, TheKeysItWritesAreTheKeysItReads) {
  Json answer = FullAnswer();
  answer["ready"] = true;   // its default is false (a sidecar writes notReady only when false)
  ASSERT_EQ(Read(answer).ToJson(), answer);
  std::vector<Json::json_pointer> keys;
  CollectKeys(answer, Json::json_pointer(), keys);
  EXPECT_EQ(keys.size(), 11u + 3 + 9 + 2 + 4 + 3 + 5);
  for (const Json::json_pointer& key : keys) {
    Json without = answer;
    without[key.parent_pointer()].erase(key.back());
    const auto read = SidecarReport::FromJson(without);
    EXPECT_TRUE(!read.ok() || read->ToJson() != answer) << key.to_string() << " is not read";
  }
}

TEST(SidecarReportTest, AnAnswerWithoutItsRanksOrARankWithoutItsNumbersIsAnErrorNamingIt) {
  const struct {
    Json answer;
    std::string error;
  } cases[] = {
      {Json(), "not a JSON object"},
      {Json::array(), "not a JSON object"},
      {Json::object(), "ranks: not an array"},
      {{{"ranks", 3}}, "ranks: not an array"},
      {{{"ranks", {3}}}, "ranks[0]: not an object"},
      {{{"ranks", {{{"rank", 0}, {"steps", 1}}, {{"steps", 1}}}}}, "ranks[1].rank: not a whole number from 0 to 10000000"},
      {{{"ranks", {{{"rank", "0"}, {"steps", 1}}}}}, "ranks[0].rank"},
      {{{"ranks", {{{"rank", -1}, {"steps", 1}}}}}, "ranks[0].rank"},
      {{{"ranks", {{{"rank", 1.5}, {"steps", 1}}}}}, "ranks[0].rank"},
      {{{"ranks", {{{"rank", 1e300}, {"steps", 1}}}}}, "ranks[0].rank"},
      {{{"ranks", {{{"rank", 0}}}}}, "ranks[0].steps: not a number from 0 to 2^53"},
      {{{"ranks", {{{"rank", 0}, {"steps", -5}}}}}, "ranks[0].steps"},
      {{{"ranks", {{{"rank", 0}, {"steps", 1e19}}}}}, "ranks[0].steps"},
      {{{"ranks", {{{"rank", 0}, {"steps", std::nan("")}}}}}, "ranks[0].steps"},
      {{{"ranks", {{{"rank", 0}, {"steps", "3"}}}}}, "ranks[0].steps"},
  };
  for (const auto& c : cases) {
    const auto read = SidecarReport::FromJson(c.answer);
    ASSERT_FALSE(read.ok()) << c.answer.dump();
    EXPECT_THAT(read.error(), HasSubstr(c.error)) << c.answer.dump();
  }
  // A sidecar older than "steps" reported only its step number.
  EXPECT_EQ(RankAsRead({{"rank", 0}, {"step", 5}})["steps"], 5);
  EXPECT_EQ(Read({{"ranks", Json::array()}}).ranks.size(), 0u);
}

// Each number of a rank past its range, of another type or not finite is left out (the idle time
// and the logged step read as 0), so that nothing the operator sums, subtracts or converts can
// overflow; the rank itself stands.
TEST(SidecarReportTest, ARanksNumbersOutOfRangeOrOfAnotherTypeAreLeftOut) {
  const double nan = std::nan("");
  const double inf = std::numeric_limits<double>::infinity();
  const struct {
    const char* key;
    std::vector<Json> bad;
  } cases[] = {
      {"step", {-1, int64_t{9007199254740993}, 9007199254740994.0, int64_t{9223372036854775807}, uint64_t{18446744073709551615u}, 2.5, "7"}},
      {"idleSeconds", {-4, 1e300, inf, nan, "1"}},
      {"epoch", {-1, int64_t{9007199254740993}, 1e300, 0.5, true}},
      {"totalSteps", {0, -1, int64_t{9007199254740993}, 1e300, 10.5, "1000"}},
      {"loss", {nan, inf, -inf, "low", Json::array()}},
      {"samplesPerSecond", {-7, 1e300, nan}},
      {"stepSeconds", {-2, 0, 1e-320, 1e300, inf}},
  };
  for (const auto& c : cases) {
    for (const Json& bad : c.bad) {
      const Json rank = RankAsRead({{"rank", 1}, {"steps", 3}, {c.key, bad}});
      const Json expected = {{"rank", 1}, {"step", 0}, {"steps", 3.0}, {"idleSeconds", 0.0}};
      EXPECT_EQ(rank, expected) << c.key << " = " << bad.dump();
    }
  }
  // At the ends of their ranges they are kept.
  const Json edges = {{"rank", 10000000}, {"step", 9007199254740992}, {"steps", 9007199254740992.0},
                      {"idleSeconds", kMaxReportSeconds}, {"totalSteps", 1}, {"epoch", 0},
                      {"samplesPerSecond", 0.0}, {"stepSeconds", 1e-6}, {"loss", -1e300}};
  EXPECT_EQ(RankAsRead(edges), edges);
}

TEST(SidecarReportTest, ItsOtherMembersOfAnotherTypeAreLeftOutAndItsTextIsBounded) {
  const Json odd = Json::parse(R"json({"ranks": [], "ready": "yes", "notReady": 3, "gateOpen": 1,
      "mainProcess": {"running": "no", "pid": 1e300, "command": ["python"]}, "stalled": ["x", 0.5, -1, 1e300, 4],
      "peers": {"total": -3, "unreachable": [7, "10.0.0.1:6170 (refused)"]},
      "conditionError": {"why": 1}})json");
  EXPECT_EQ(Read(odd).ToJson(), Json::parse(R"json({"ready": false, "gateOpen": false,
      "mainProcess": {"running": false, "pid": 0, "command": ""}, "ranks": [], "stalled": [4],
      "peers": {"total": 0, "unreachable": ["10.0.0.1:6170 (refused)"]}})json"));

  // The condition is the sidecar's own: of another type or status it is no condition.
  for (const Json& condition : {Json{{"type", "Ready"}, {"status", "True"}},
                                Json{{"type", kProgressConditionType}, {"status", "Unknown"}},
                                Json{{"type", kProgressConditionType}}, Json("True")}) {
    EXPECT_FALSE(Read({{"ranks", Json::array()}, {"condition", condition}}).condition.has_value()) << condition.dump();
  }

  // Text past kMaxReportTextBytes is cut (at a character boundary, ending "..."), wherever it is.
  const std::string huge(200 * 1024, 'x');
  const SidecarReport report = Read({{"ranks", Json::array()},
                                     {"notReady", huge},
                                     {"mainProcess", {{"command", huge}}},
                                     {"peers", {{"unreachable", {huge}}}},
                                     {"condition", {{"type", kProgressConditionType}, {"status", "False"}, {"reason", huge}, {"message", huge}}},
                                     {"conditionError", huge}});
  ASSERT_TRUE(report.main_process && report.condition && report.peers.unreachable.size() == 1);
  for (const std::string* text : {&report.not_ready, &report.main_process->command, &report.peers.unreachable[0],
                                  &report.condition->reason, &report.condition->message, &report.condition_error}) {
    EXPECT_EQ(text->size(), kMaxReportTextBytes);
    EXPECT_EQ(text->substr(text->size() - 3), "...");
  }
}

// The trainer is one of the Trainer condition's states in a run 0..INT_MAX, or it is left out; its
// text is bounded as the rest.
TEST(SidecarReportTest, ATrainerOfAnUnknownStateOrRunIsLeftOut) {
  for (const Json& trainer : {Json{{"state", "Crashed"}, {"run", 1}}, Json{{"state", "Running"}, {"run", -1}},
                              Json{{"state", "Running"}, {"run", 2147483648.0}}, Json{{"state", "Running"}, {"run", "1"}},
                              Json{{"state", "Running"}, {"run", 1.5}}, Json{{"run", 1}}, Json{{"state", "Exited"}},
                              Json("Running")}) {
    EXPECT_FALSE(Read({{"ranks", Json::array()}, {"trainer", trainer}}).trainer.has_value()) << trainer.dump();
  }
  const SidecarReport report =
      Read({{"ranks", Json::array()},
            {"trainer", {{"state", "Exited"}, {"run", 2147483647}, {"message", std::string(200 * 1024, 'x')}}}});
  ASSERT_TRUE(report.trainer.has_value());
  EXPECT_EQ(report.trainer->report.state, TrainerState::kExited);
  EXPECT_EQ(report.trainer->report.run, 2147483647);
  EXPECT_EQ(report.trainer->instance, "");
  EXPECT_EQ(report.trainer->message.size(), kMaxReportTextBytes);
  EXPECT_EQ(report.ToJson()["trainer"],
            (Json{{"state", "Exited"}, {"run", 2147483647}, {"instance", ""}, {"message", report.trainer->message}}));
}

// JSON has no NaN or infinity: nlohmann writes them as null, which the reader would refuse.
TEST(SidecarReportTest, ANumberThatIsNotFiniteIsNotWritten) {
  SidecarReport report;
  report.ranks.push_back({0, 1, 1, 0, std::nullopt, std::nullopt, std::nan(""),
                          std::numeric_limits<double>::infinity(), std::numeric_limits<double>::infinity()});
  const Json rank = report.ToJson()["ranks"][0];
  EXPECT_EQ(rank, Json::parse(R"json({"rank": 0, "step": 1, "steps": 1.0, "idleSeconds": 0.0})json")) << rank.dump();
}

}  // namespace
}  // namespace fleet::api::testing
