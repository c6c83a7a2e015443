// DetectClusterEnv / RenderClusterEnv: the PaddleCloud-style node-level env a launcher reads
// inside a managed pod (contract section 4).
#include <cstdlib>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "contract_fixtures.h"
#include "fleet/runtime/env_contract.h"

namespace fleet {
namespace {

using testing::Eps;

// Node 1 of two, two processes per node.
EnvMap TwoNodeClusterEnv() {
  return {{"PADDLE_TRAINERS", "10.0.0.1,10.0.0.2"},
          {"POD_IP", "10.0.0.2"},
          {"PADDLE_TRAINER_ID", "1"},
          {"TRAINER_PORTS_NUM", "2"},
          {"PADDLE_TRAINERS_NUM", "2"}};
}

ClusterEnv MustDetect(const EnvMap& env) {
  auto detected = DetectClusterEnv(env);
  EXPECT_TRUE(detected.has_value()) << "cluster not detected";
  if (!detected) return {};
  EXPECT_TRUE(detected->ok()) << detected->error();
  return detected->ok() ? **detected : ClusterEnv{};
}

TEST(ClusterEnv, NotDetectedUnlessAllFourInputsAreSetAndTrainersNumIsNotOne) {
  struct Case { const char* name; const char* var; const char* value; };  // value nullptr: unset
  for (const Case& c : {Case{"no PADDLE_TRAINERS", "PADDLE_TRAINERS", nullptr},
                        Case{"no POD_IP", "POD_IP", nullptr},
                        Case{"no PADDLE_TRAINER_ID", "PADDLE_TRAINER_ID", nullptr},
                        Case{"no TRAINER_PORTS_NUM", "TRAINER_PORTS_NUM", nullptr},
                        Case{"no PADDLE_TRAINERS_NUM", "PADDLE_TRAINERS_NUM", nullptr},
                        Case{"PADDLE_TRAINERS_NUM 1", "PADDLE_TRAINERS_NUM", "1"},
                        Case{"PADDLE_TRAINERS_NUM ' 1 '", "PADDLE_TRAINERS_NUM", " 1 "}}) {
    SCOPED_TRACE(c.name);
    EnvMap env = TwoNodeClusterEnv();
    if (c.value) env[c.var] = c.value; else env.erase(c.var);
    auto detected = DetectClusterEnv(env);
    EXPECT_FALSE(detected.has_value()) << (detected->ok() ? "detected" : detected->error());
  }
  EXPECT_FALSE(DetectClusterEnv({}).has_value());
}

TEST(ClusterEnv, DefaultPortsStartAt6170OnEveryNode) {
  ClusterEnv cluster = MustDetect(TwoNodeClusterEnv());
  EXPECT_EQ(cluster.nodes, (std::vector<std::string>{"10.0.0.1", "10.0.0.2"}));
  EXPECT_EQ(cluster.pod_ip, "10.0.0.2");
  EXPECT_EQ(cluster.node_rank, 1);
  EXPECT_EQ(cluster.ports_per_node, 2);
  ASSERT_EQ(cluster.node_endpoints.size(), 2u);
  EXPECT_EQ(cluster.node_endpoints[0], Eps({"10.0.0.1:6170", "10.0.0.1:6171"}));
  EXPECT_EQ(cluster.node_endpoints[1], Eps({"10.0.0.2:6170", "10.0.0.2:6171"}));
}

TEST(ClusterEnv, PaddlePortMovesTheDefaultStartPort) {
  EnvMap env = TwoNodeClusterEnv();
  env["PADDLE_PORT"] = "7000";
  ClusterEnv cluster = MustDetect(env);
  ASSERT_EQ(cluster.node_endpoints.size(), 2u);
  EXPECT_EQ(cluster.node_endpoints[1], Eps({"10.0.0.2:7000", "10.0.0.2:7001"}));
}

TEST(ClusterEnv, PortsMayRunUpTo65535ButNotPast) {
  EnvMap env = TwoNodeClusterEnv();
  env["TRAINER_PORTS_NUM"] = "59366";  // 6170 .. 65535
  ClusterEnv cluster = MustDetect(env);
  ASSERT_EQ(cluster.node_endpoints.size(), 2u);
  EXPECT_EQ(cluster.node_endpoints[0].back().port, 65535);
  env["TRAINER_PORTS_NUM"] = "59367";
  auto detected = DetectClusterEnv(env);
  ASSERT_TRUE(detected.has_value());
  EXPECT_EQ(detected->error(), "PADDLE_PORT 6170 + TRAINER_PORTS_NUM runs past port 65535");
}

TEST(ClusterEnv, DistributedTrainerEndpointsAreCutIntoPerNodeChunks) {
  EnvMap env = TwoNodeClusterEnv();
  env["DISTRIBUTED_TRAINER_ENDPOINTS"] = "10.0.0.1:6000,10.0.0.1:6001,10.0.0.2:7000,10.0.0.2:7005";
  env["PADDLE_PORT"] = "9000";  // ignored when the endpoints are given
  ClusterEnv cluster = MustDetect(env);
  ASSERT_EQ(cluster.node_endpoints.size(), 2u);
  EXPECT_EQ(cluster.node_endpoints[0], Eps({"10.0.0.1:6000", "10.0.0.1:6001"}));
  EXPECT_EQ(cluster.node_endpoints[1], Eps({"10.0.0.2:7000", "10.0.0.2:7005"}));
}

TEST(ClusterEnv, EmptyDistributedTrainerEndpointsFallsBackToDefaultPorts) {
  EnvMap env = TwoNodeClusterEnv();
  env["DISTRIBUTED_TRAINER_ENDPOINTS"] = "";
  EXPECT_EQ(MustDetect(env).node_endpoints[0], Eps({"10.0.0.1:6170", "10.0.0.1:6171"}));
}

TEST(ClusterEnv, InconsistentInputsAreErrors) {
  struct Case { const char* name; std::vector<std::pair<std::string, std::string>> set; std::string error; };
  const std::vector<Case> cases = {
      {"pod ip is another node", {{"POD_IP", "10.0.0.1"}},
       "POD_IP '10.0.0.1' is not node 1 of PADDLE_TRAINERS ('10.0.0.2')"},
      {"rank out of range", {{"PADDLE_TRAINER_ID", "2"}}, "PADDLE_TRAINER_ID 2 is not below the 2 nodes of PADDLE_TRAINERS"},
      {"rank not a number", {{"PADDLE_TRAINER_ID", "one"}}, "PADDLE_TRAINER_ID must be a non-negative integer, got 'one'"},
      {"zero ports per node", {{"TRAINER_PORTS_NUM", "0"}}, "TRAINER_PORTS_NUM must be at least 1"},
      {"ports per node not a number", {{"TRAINER_PORTS_NUM", "-2"}}, "TRAINER_PORTS_NUM must be a non-negative integer, got '-2'"},
      {"empty node entry", {{"PADDLE_TRAINERS", "10.0.0.1,,10.0.0.2"}}, "PADDLE_TRAINERS: empty host name"},
      {"bad start port", {{"PADDLE_PORT", "0"}}, "PADDLE_PORT has port 0, out of range 1-65535"},
      {"too few endpoints", {{"DISTRIBUTED_TRAINER_ENDPOINTS", "10.0.0.1:6000,10.0.0.1:6001,10.0.0.2:6000"}},
       "DISTRIBUTED_TRAINER_ENDPOINTS has 3 endpoints, expected PADDLE_TRAINERS x TRAINER_PORTS_NUM = 4"},
      {"too many endpoints",
       {{"DISTRIBUTED_TRAINER_ENDPOINTS", "10.0.0.1:1,10.0.0.1:2,10.0.0.2:1,10.0.0.2:2,10.0.0.2:3"}},
       "DISTRIBUTED_TRAINER_ENDPOINTS has 5 endpoints, expected PADDLE_TRAINERS x TRAINER_PORTS_NUM = 4"},
      {"entry on the wrong node", {{"DISTRIBUTED_TRAINER_ENDPOINTS", "10.0.0.1:6000,10.0.0.2:6001,10.0.0.2:6000,10.0.0.1:6001"}},
       "DISTRIBUTED_TRAINER_ENDPOINTS entry '10.0.0.2:6001' is not on node '10.0.0.1' (entries go node by node, "
       "TRAINER_PORTS_NUM per node)"},
      {"endpoint without port", {{"DISTRIBUTED_TRAINER_ENDPOINTS", "10.0.0.1:6000,10.0.0.1,10.0.0.2:1,10.0.0.2:2"}},
       "DISTRIBUTED_TRAINER_ENDPOINTS: endpoint '10.0.0.1' has no port (expected host:port)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    EnvMap env = TwoNodeClusterEnv();
    for (const auto& [name, value] : c.set) env[name] = value;
    auto detected = DetectClusterEnv(env);
    ASSERT_TRUE(detected.has_value());
    ASSERT_FALSE(detected->ok());
    EXPECT_EQ(detected->error(), c.error);
  }
}

// Two nodes listed with one address would run their processes on the same endpoints.
// Two nodes with one address would be given the same ports.
TEST(ClusterEnv, NodeListedTwiceIsAnError) {
  EnvMap env = TwoNodeClusterEnv();
  env["PADDLE_TRAINERS"] = "10.0.0.2,10.0.0.2";
  auto detected = DetectClusterEnv(env);
  ASSERT_TRUE(detected.has_value());
  ASSERT_FALSE(detected->ok()) << "accepted; node 0 and node 1 both get 10.0.0.2:6170";
  EXPECT_NE(detected->error().find("10.0.0.2"), std::string::npos) << detected->error();
}

TEST(ClusterEnv, RenderedClusterEnvIsDetectedAsTheSameCluster) {
  ClusterEnv custom;
  custom.nodes = {"10.0.0.1", "10.0.0.2", "10.0.0.3"};
  custom.pod_ip = "10.0.0.3";
  custom.node_rank = 2;
  custom.ports_per_node = 2;
  custom.node_endpoints = {Eps({"10.0.0.1:6000", "10.0.0.1:6001"}), Eps({"10.0.0.2:7000", "10.0.0.2:7001"}),
                           Eps({"10.0.0.3:8000", "10.0.0.3:8002"})};
  ClusterEnv defaults = MustDetect(TwoNodeClusterEnv());
  for (const ClusterEnv& cluster : {custom, defaults}) {
    SCOPED_TRACE(cluster.pod_ip);
    const EnvMap env = RenderClusterEnv(cluster);
    ClusterEnv back = MustDetect(env);
    EXPECT_EQ(back.nodes, cluster.nodes);
    EXPECT_EQ(back.pod_ip, cluster.pod_ip);
    EXPECT_EQ(back.node_rank, cluster.node_rank);
    EXPECT_EQ(back.ports_per_node, cluster.ports_per_node);
    EXPECT_EQ(back.node_endpoints, cluster.node_endpoints);
  }
  const EnvMap env = RenderClusterEnv(custom);
  EXPECT_EQ(testing::Get(env, "PADDLE_TRAINERS"), "10.0.0.1,10.0.0.2,10.0.0.3");
  EXPECT_EQ(testing::Get(env, "POD_IP"), "10.0.0.3");
  EXPECT_EQ(testing::Get(env, "PADDLE_TRAINER_ID"), "2");
  EXPECT_EQ(testing::Get(env, "TRAINER_PORTS_NUM"), "2");
  EXPECT_EQ(testing::Get(env, "PADDLE_TRAINERS_NUM"), "3");
  EXPECT_EQ(testing::Get(env, "PADDLE_PORT"), "8000");
  EXPECT_EQ(testing::Get(env, "DISTRIBUTED_TRAINER_ENDPOINTS"),
            "10.0.0.1:6000,10.0.0.1:6001,10.0.0.2:7000,10.0.0.2:7001,10.0.0.3:8000,10.0.0.3:8002");
}

TEST(ClusterEnv, SingleNodeClusterRendersAnEnvPaddleRunsLocally) {
  ClusterEnv single;
  single.nodes = {"10.0.0.1"};
  single.pod_ip = "10.0.0.1";
  single.ports_per_node = 1;
  single.node_endpoints = {Eps({"10.0.0.1:6170"})};
  EXPECT_FALSE(DetectClusterEnv(RenderClusterEnv(single)).has_value());  // PADDLE_TRAINERS_NUM is 1
}

TEST(CurrentProcessEnv, ReadsTheProcessEnvironment) {
  ASSERT_EQ(setenv("FLEET_RUNTIME_TEST_VAR", "a=b,c", 1), 0);
  EXPECT_EQ(testing::Get(CurrentProcessEnv(), "FLEET_RUNTIME_TEST_VAR"), "a=b,c");
  ASSERT_EQ(unsetenv("FLEET_RUNTIME_TEST_VAR"), 0);
  EXPECT_EQ(CurrentProcessEnv().count("FLEET_RUNTIME_TEST_VAR"), 0u);
}

}  // namespace
}  // namespace fleet
