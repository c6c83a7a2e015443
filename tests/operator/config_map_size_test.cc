// The endpoints ConfigMap of a job the operator accepts fits the API server's limit: the size is
// estimated when the job is wired (refused there, with a message, when too large), and the
// estimate never falls short of what is later published.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "builders.h"
#include "fleet/operator/wiring.h"

namespace fleet::op::testing {
namespace {

using ::testing::HasSubstr;

// What the ConfigMap's data holds once every pod has its host: keys and values.
size_t PublishedBytes(const JobWiring& wiring, const FleetJob& job) {
  std::vector<std::string> hosts;
  for (const PodSlot& slot : wiring.slots()) hosts.push_back(ServiceHost(job, slot.name, "cluster.local"));
  size_t bytes = 0;
  for (const auto& [key, value] : wiring.EndpointsData(hosts)) bytes += key.size() + value.size();
  return bytes;
}

Result<FleetJob> HeterJob(int heter) {
  return ParseFleetJob(JobBuilder("ranking-model-train")
                           .Ps(1, 100)
                           .Network("Service")
                           .Heter(JobBuilder::HeterStage("gpu", heter, "densestage01"))
                           .Obj());
}

// A ps-heter job in Service mode whose heter stage's name is longer than the first role's: its
// pods' DNS names are the longest hosts in the lists. The largest such job the operator accepts
// must still fit when published.
TEST(ConfigMapSizeTest, TheLargestAcceptedJobsListsFit) {
  int accepted = 1;      // a job this size is wired
  int refused = 10000;   // one this size is refused (the most replicas a role may have)
  ASSERT_TRUE(JobWiring::Build(*HeterJob(accepted), 0).ok());
  auto too_large = JobWiring::Build(*HeterJob(refused), 0);
  ASSERT_FALSE(too_large.ok());
  EXPECT_THAT(too_large.error(), HasSubstr("over the 1 MiB limit of a ConfigMap"));
  while (refused - accepted > 1) {
    const int middle = accepted + (refused - accepted) / 2;
    (JobWiring::Build(*HeterJob(middle), 0).ok() ? accepted : refused) = middle;
  }
  SCOPED_TRACE(accepted);
  auto job = HeterJob(accepted);
  ASSERT_TRUE(job.ok()) << job.error();
  auto wiring = JobWiring::Build(*job, 0);
  ASSERT_TRUE(wiring.ok());
  EXPECT_LE(PublishedBytes(*wiring, *job), 1000u * 1000u);
}

}  // namespace
}  // namespace fleet::op::testing
