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

// A ps-heter job in Service mode whose heter stage's name is longer than the first role's: its
// pods' DNS names are the longest hosts in the lists.
TEST(ConfigMapSizeTest, AnAcceptedJobsListsFitWhateverItsRolesAreNamed) {
  int refused = 0;
  for (int heter = 5000; heter <= 9000; heter += 250) {
    SCOPED_TRACE(heter);
    auto job = ParseFleetJob(JobBuilder("ranking-model-train")
                                 .Ps(1, 100)
                                 .Network("Service")
                                 .Heter(JobBuilder::HeterStage("gpu", heter, "densestage01"))
                                 .Obj());
    ASSERT_TRUE(job.ok()) << job.error();
    auto wiring = JobWiring::Build(*job, 0);
    if (!wiring.ok()) {
      EXPECT_THAT(wiring.error(), HasSubstr("over the 1 MiB limit of a ConfigMap"));
      ++refused;
      continue;
    }
    EXPECT_LE(PublishedBytes(*wiring, *job), 1000u * 1000u);
  }
  EXPECT_GT(refused, 0) << "the sweep never reached the limit: it tests nothing";
}

}  // namespace
}  // namespace fleet::op::testing
