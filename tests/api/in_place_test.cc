// The Trainer condition of InPlace jobs, as the sidecar writes it and the operator reads it back.
#include "fleet/api/in_place.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace fleet::api {
namespace {

TEST(TrainerReportTest, RoundTripsThroughTheCondition) {
  for (const TrainerState state : {TrainerState::kRunning, TrainerState::kAtGate, TrainerState::kExited}) {
    const TrainerReport report{state, 7};
    const auto read = TrainerReport::FromCondition(report.Reason(), report.Message("the trainer (pid 42) passed the gate"));
    ASSERT_TRUE(read);
    EXPECT_EQ(read->state, state);
    EXPECT_EQ(read->run, 7);
  }
  EXPECT_EQ(TrainerReport({TrainerState::kExited, 3}).Message("ended"), "run 3: ended");
}

TEST(TrainerReportTest, AnythingElseIsNoReport) {
  for (const auto& [reason, message] : std::vector<std::pair<std::string, std::string>>{
           {"Stalled", "run 1: x"}, {"Running", "run"}, {"Running", "run x"}, {"Running", "run -1"},
           {"Running", "run +1"}, {"Running", "run 1x"}, {"Running", "run 99999999999: too large"},
           {"Running", " run 1"}, {"", ""}}) {
    EXPECT_FALSE(TrainerReport::FromCondition(reason, message)) << reason << " / " << message;
  }
  EXPECT_TRUE(TrainerReport::FromCondition("AtGate", "run 0"));
}

TEST(TrainerReportTest, TellsAnEndedInstanceFromOneThatWaits) {
  const TrainerReport exited{TrainerState::kExited, 4}, waits_for_5{TrainerState::kAtGate, 5},
      running{TrainerState::kRunning, 4};
  EXPECT_TRUE(exited.EndedIn(4));
  EXPECT_FALSE(exited.EndedIn(5));       // an instance of the run before: superseded, not a failure
  EXPECT_TRUE(waits_for_5.EndedIn(4));   // its predecessor ended in 4
  EXPECT_FALSE(waits_for_5.EndedIn(5));
  EXPECT_FALSE(running.EndedIn(4));
  EXPECT_TRUE(waits_for_5.WaitsFor(5));
  EXPECT_TRUE(waits_for_5.WaitsFor(6));
  EXPECT_FALSE(waits_for_5.WaitsFor(4));
  EXPECT_FALSE(running.WaitsFor(4));
}

}  // namespace
}  // namespace fleet::api
