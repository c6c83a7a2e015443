// What the planner keeps of text from outside in the job's status (the status type's own tests are
// tests/api/job_status_test.cc).
#include "fleet/operator/api.h"

#include <gtest/gtest.h>

#include "world.h"

namespace fleet::op::testing {
namespace {

// A sidecar's Stalled message is the job author's text (they choose the sidecar image): what the
// job's status keeps of it is bounded (issue 25: 900 KiB reached the status and fleetctl).
TEST(FleetJobStatusTest, MessagesFromOutsideAreBounded) {
  World world(JobBuilder("wd").Collective(2).Obj());
  world.Step();
  world.StartPods();
  world.Settle();
  const std::string huge(900 * 1024, 'x');
  world.Edit("wd-worker-1", [&](PodBuilder& p) { p.Progress(false, "no step for 700 s " + huge); });
  world.Step();
  const Json stalled = Condition(world.Status(), "Stalled");
  ASSERT_FALSE(stalled.is_null());
  EXPECT_EQ(stalled["status"], "True");
  EXPECT_LE(stalled["message"].get<std::string>().size(), kMaxMessageBytes);
  EXPECT_NE(stalled["message"].get<std::string>().find("no step for 700 s"), std::string::npos);

  FleetJobStatus status;
  status.MarkFailed("Test", huge, T0());
  EXPECT_LE(status.message.size(), kMaxMessageBytes);
  for (const auto& c : status.conditions) EXPECT_LE(c.message.size(), kMaxMessageBytes);
}

}  // namespace
}  // namespace fleet::op::testing
