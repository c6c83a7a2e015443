// fleet-operator's command line: defaults, every flag, and a clear error for every bad value.
#include "fleet/operator/flags.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fleet/operator/planner.h"

namespace fleet::op {
namespace {

using ::testing::HasSubstr;

TEST(OperatorFlagsTest, DefaultsAreUsableAsTheyAre) {
  auto f = ParseOperatorFlags({});
  ASSERT_TRUE(f.ok()) << f.error();
  EXPECT_EQ(f->controller.ns, "");
  EXPECT_EQ(f->controller.workers, 4);
  EXPECT_TRUE(f->controller.settings.native_sidecar);
  EXPECT_FALSE(f->leader_elect);
  EXPECT_EQ(f->metrics_bind_address, ":8080");
  EXPECT_EQ(f->health_probe_bind_address, ":8081");
  EXPECT_GT(f->qps, 0);
  EXPECT_FALSE(f->help);
}

TEST(OperatorFlagsTest, EveryFlagIsRead) {
  auto f = ParseOperatorFlags({"--kubeconfig=/k", "--context", "ctx", "--namespace=team", "--workers=8",
                               "--create-concurrency=16", "--kube-api-qps=50", "--kube-api-burst=100",
                               "--sidecar-mode=init", "--sidecar-token-audience=fleet", "--cluster-domain=corp.local",
                               "--sidecar-image=registry.local/sidecar:2",
                               "--host-port-range=30000-30999", "--resync-period=60", "--leader-elect",
                               "--leader-election-id=fj", "--metrics-bind-address=127.0.0.1:9090",
                               "--health-probe-bind-address=0", "--log-level=debug", "--log-format=json"});
  ASSERT_TRUE(f.ok()) << f.error();
  EXPECT_EQ(f->kubeconfig, "/k");
  EXPECT_EQ(f->context, "ctx");
  EXPECT_EQ(f->controller.ns, "team");
  EXPECT_EQ(f->controller.workers, 8);
  EXPECT_EQ(f->controller.create_concurrency, 16);
  EXPECT_EQ(f->qps, 50);
  EXPECT_EQ(f->burst, 100);
  EXPECT_FALSE(f->controller.settings.native_sidecar);
  EXPECT_EQ(f->controller.settings.sidecar_service_account_token_audience, "fleet");
  EXPECT_EQ(f->controller.settings.cluster_domain, "corp.local");
  EXPECT_EQ(f->controller.settings.sidecar_image, "registry.local/sidecar:2");
  EXPECT_EQ(f->controller.host_port_first, 30000);
  EXPECT_EQ(f->controller.host_port_last, 30999);
  EXPECT_EQ(f->controller.resync, std::chrono::seconds(60));
  EXPECT_TRUE(f->leader_elect);
  EXPECT_EQ(f->leader_election_id, "fj");
  EXPECT_EQ(f->leader_election_namespace, "team") << "the Lease lives in the watched namespace by default";
  EXPECT_EQ(f->metrics_bind_address, "127.0.0.1:9090");
  EXPECT_EQ(f->health_probe_bind_address, "0");
  EXPECT_EQ(f->log_level, LogLevel::kDebug);
  EXPECT_EQ(f->log_format, LogFormat::kJson);
}

TEST(OperatorFlagsTest, AnEmptyValueIsEmptyAndTheLastOfARepeatedFlagCounts) {
  // "--namespace=" does not take the next flag for its value; the chart's extraArgs come last and win.
  auto f = ParseOperatorFlags({"--namespace=", "--workers=8", "--workers=010"});
  ASSERT_TRUE(f.ok()) << f.error();
  EXPECT_EQ(f->controller.ns, "");
  EXPECT_EQ(f->controller.workers, 10);
}

TEST(OperatorFlagsTest, LeaderElectTakesAnExplicitValue) {
  EXPECT_FALSE(ParseOperatorFlags({"--leader-elect=false"})->leader_elect);
  EXPECT_TRUE(ParseOperatorFlags({"--leader-elect=true"})->leader_elect);
}

TEST(OperatorFlagsTest, HelpIsNotAnError) {
  auto f = ParseOperatorFlags({"--help"});
  ASSERT_TRUE(f.ok());
  EXPECT_TRUE(f->help);
  EXPECT_THAT(OperatorUsage(), HasSubstr("--leader-elect"));
}

struct BadFlag {
  std::vector<std::string> args;
  std::string message;
};

class OperatorBadFlagTest : public ::testing::TestWithParam<BadFlag> {};

TEST_P(OperatorBadFlagTest, IsRefusedWithAMessageNamingIt) {
  auto f = ParseOperatorFlags(GetParam().args);
  ASSERT_FALSE(f.ok());
  EXPECT_THAT(f.error(), HasSubstr(GetParam().message));
}

INSTANTIATE_TEST_SUITE_P(
    Flags, OperatorBadFlagTest,
    ::testing::Values(BadFlag{{"--bogus=1"}, "unknown flag --bogus"},
                      BadFlag{{"positional"}, "unexpected argument \"positional\""},
                      BadFlag{{"--workers=0"}, "--workers: expected an integer from 1 to 256, got '0'"},
                      BadFlag{{"--workers=many"}, "--workers: expected an integer from 1 to 256, got 'many'"},
                      BadFlag{{"--workers"}, "--workers needs a value"},
                      BadFlag{{"--create-concurrency=-1"}, "--create-concurrency: expected an integer from 1 to 1024, got '-1'"},
                      BadFlag{{"--kube-api-qps=1.5"}, "--kube-api-qps: expected an integer from 0 to 100000, got '1.5'"},
                      BadFlag{{"--sidecar-mode=sometimes"}, "expected auto, native or init"},
                      BadFlag{{"--cluster-domain="}, "--cluster-domain: must not be empty"},
                      BadFlag{{"--sidecar-image="}, "--sidecar-image: must not be empty"},
                      BadFlag{{"--host-port-range=3000"}, "expected FIRST-LAST"},
                      BadFlag{{"--host-port-range=3000-2000"}, "FIRST <= LAST"},
                      BadFlag{{"--host-port-range=0-70000"}, "--host-port-range"},
                      BadFlag{{"--leader-elect=maybe"}, "expected true, false, 1 or 0"},
                      BadFlag{{"--leader-election-id="}, "must not be empty"},
                      BadFlag{{"--log-level=loud"}, "expected debug, info, warning or error"},
                      BadFlag{{"--log-format=xml"}, "expected text or json"}));

}  // namespace
}  // namespace fleet::op

namespace fleet::op {
namespace {

TEST(OperatorFlagsTest, SidecarModeAutoIsTheDefault) {
  EXPECT_TRUE(ParseOperatorFlags({})->sidecar_mode_auto);
  auto native = ParseOperatorFlags({"--sidecar-mode=native"});
  EXPECT_FALSE(native->sidecar_mode_auto);
  EXPECT_TRUE(native->controller.settings.native_sidecar);
}

TEST(OperatorFlagsTest, NativeSidecarsFromKubernetes129On) {
  EXPECT_TRUE(SupportsNativeSidecars({{"major", "1"}, {"minor", "29"}}));
  EXPECT_TRUE(SupportsNativeSidecars({{"major", "1"}, {"minor", "32"}, {"gitVersion", "v1.32.0"}}));
  EXPECT_TRUE(SupportsNativeSidecars({{"major", "1"}, {"minor", "30+"}}));   // managed clusters
  EXPECT_TRUE(SupportsNativeSidecars({{"major", "2"}, {"minor", "0"}}));
  EXPECT_FALSE(SupportsNativeSidecars({{"major", "1"}, {"minor", "28"}}));
  EXPECT_FALSE(SupportsNativeSidecars({{"major", "1"}, {"minor", "20"}}));
  EXPECT_FALSE(SupportsNativeSidecars(Json::object()));
  EXPECT_FALSE(SupportsNativeSidecars({{"major", "one"}, {"minor", "x"}}));
  EXPECT_FALSE(SupportsNativeSidecars(nullptr));
}

}  // namespace
}  // namespace fleet::op
