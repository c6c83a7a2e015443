// End to end: spec.managedBy. A FleetJob that names another controller (MultiKueue's, which runs it
// on a worker cluster and mirrors its status back) is not this operator's: it writes nothing for it,
// not even a status or an event, whatever its spec; a job that names this operator runs as usual.
#include <gtest/gtest.h>

#include <optional>
#include <string>

#include "builders.h"
#include "harness.h"

namespace fleet::op::e2e {
namespace {

using testing::JobBuilder;

constexpr const char* kMultiKueue = "kueue.x-k8s.io/multikueue";

class ManagedByE2eTest : public OperatorE2eTest {};

TEST_F(ManagedByE2eTest, AJobManagedElsewhereIsLeftAloneAndOneManagedHereRuns) {
  ASSERT_TRUE(WaitReady(StartOperator()));
  fake().ClearRequests();
  ASSERT_FALSE(CreateJob(JobBuilder("elsewhere").Collective(2).Set("/spec/managedBy", kMultiKueue).Obj()).is_null());
  // Invalid as well: were it read, it would be Failed.
  ASSERT_FALSE(CreateJob(JobBuilder("elsewhere-invalid").Collective(2).Port(80).Set("/spec/managedBy", kMultiKueue).Obj())
                   .is_null());
  ASSERT_FALSE(CreateJob(JobBuilder("here").Collective(1).Set("/spec/managedBy", kFleetJobController).Obj()).is_null());
  // The jobs are reconciled in turn: once the job managed here runs, the others were seen too.
  ASSERT_FALSE(WaitForPhase("here", "Running").is_null());

  for (const char* name : {"elsewhere", "elsewhere-invalid"}) {
    SCOPED_TRACE(name);
    const std::optional<Json> job = GetJob(name);
    ASSERT_TRUE(job.has_value());
    EXPECT_FALSE(job->value("status", Json::object()).contains("phase")) << job->dump();
    EXPECT_TRUE(LivePods(name).empty());
  }
  // Nothing was made or said for them: no child, no event; and no request named them but reads.
  for (const char* plural : {"pods", "configmaps", "services", "serviceaccounts", "events"}) {
    for (const Json& object : api().List(CorePath(ns(), plural))) {
      const std::string about = LabelOf(object, "fleet.paddlepaddle.org/job-name") + " " + NameOf(object) + " " +
                                object.value("involvedObject", Json::object()).value("name", "");
      EXPECT_EQ(about.find("elsewhere"), std::string::npos) << plural << ": " << about;
    }
  }
  for (const Json& r : fake().Requests()) {
    if (r.value("method", "") == "GET") continue;
    EXPECT_EQ(r.value("path", "").find("/elsewhere"), std::string::npos) << r.value("method", "") << " " << r.value("path", "");
  }
}

}  // namespace
}  // namespace fleet::op::e2e
