// The operator and the sidecar agree on the sidecar's command line: every sidecar container the
// operator writes, for every role, job mode and sidecar mode, is accepted by fleet-sidecar's own
// parser with the env the kubelet gives it. Each side's unit tests check only their own half; the
// real containers found the gap (servers got --stall-window=0s, which the sidecar refused, so no
// server pod ever started).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "builders.h"
#include "fleet/operator/planner.h"
#include "fleet/sidecar/options.h"
#include "world.h"

namespace fleet::op::testing {
namespace {

void ExpectEverySidecarParses(const Json& job, const OperatorSettings& settings) {
  SCOPED_TRACE(job["metadata"]["name"].get<std::string>());
  Observed observed;
  observed.host_ports = HostPortsAt(31000);   // the job's port block, for HostNetwork
  const ReconcilePlan plan = PlanFor(job, observed, T0(), settings);
  int pods = 0;
  for (const Action& a : plan.actions) {
    if (a.verb != Verb::kCreate || a.kind != ObjectKind::kPod) continue;
    ++pods;
    const Json pod = a.Object();
    const Json& sidecar = pod["spec"]["initContainers"][0];
    ASSERT_EQ(sidecar["name"], "fleet-sidecar");
    std::vector<std::string> args = sidecar["args"].get<std::vector<std::string>>();
    // The env the kubelet resolves for the container's fieldRefs.
    auto cl = fleet::sidecar::ParseCommandLine(args, {{"POD_NAME", a.name}, {"POD_IP", "10.1.2.3"}});
    EXPECT_TRUE(cl.ok()) << a.name << ": " << cl.error();
  }
  EXPECT_GT(pods, 0) << plan.status.ToJson().dump();
}

TEST(SidecarContractTest, EverySidecarTheOperatorWritesIsAcceptedByTheSidecar) {
  for (bool native : {true, false}) {
    OperatorSettings settings;
    settings.native_sidecar = native;
    SCOPED_TRACE(native ? "native sidecar" : "init-container sidecar");
    ExpectEverySidecarParses(JobBuilder("ps").Ps(2, 2).Obj(), settings);
    ExpectEverySidecarParses(JobBuilder("fleet").Ps(2, 2).Set("/spec/runtime", "fleet").Obj(), settings);
    ExpectEverySidecarParses(JobBuilder("heter").Ps(1, 2).Heter({"gpu", 2}).Obj(), settings);
    ExpectEverySidecarParses(JobBuilder("coll").Collective(2, 4).ProcessesPerPod(4).Obj(), settings);
    ExpectEverySidecarParses(JobBuilder("hostnet").Ps(1, 1).Network("HostNetwork").Obj(), settings);
  }
}

}  // namespace
}  // namespace fleet::op::testing
