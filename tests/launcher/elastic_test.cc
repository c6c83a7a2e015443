// elastic.h, the pure parts: --np, the settings from flags and env, the choice of the job's nodes
// from etcd's registrations, and the plan of one generation.
#include "fleet/launcher/elastic.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fleet/runtime/env_contract.h"

namespace fleet::launcher {
namespace {

using ::testing::HasSubstr;

Result<std::optional<ElasticSettings>> Settings(const std::vector<std::string>& args, const EnvMap& env = {}) {
  auto options = ParseFlags(args);
  if (!options) return Error{"ParseFlags: " + options.error()};
  return ElasticSettingsFrom(*options, env);
}

const std::vector<std::string> kElasticFlags = {"--elastic_server=127.0.0.1:2379", "--job_id=j", "--np=2:4",
                                                "--host=10.0.0.2"};

std::vector<std::string> With(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  args.push_back("train.py");
  return args;
}

TEST(FleetrunElasticNp, FixedAndRangeForms) {
  auto fixed = ParseNp("3");
  ASSERT_TRUE(fixed.ok()) << fixed.error();
  EXPECT_EQ(fixed->min, 3);
  EXPECT_EQ(fixed->max, 3);
  EXPECT_TRUE(fixed->fixed());
  auto range = ParseNp("2:4");
  ASSERT_TRUE(range.ok()) << range.error();
  EXPECT_EQ(range->min, 2);
  EXPECT_EQ(range->max, 4);
  EXPECT_FALSE(range->fixed());
  // Paddle turns 0 into 1 and a MAX below MIN into MIN silently; both are mistakes worth a message.
  for (const std::string bad : {"", "0", "0:2", "3:2", "2:", ":4", "1:2:3", "-1", "two", "2.5"}) {
    auto parsed = ParseNp(bad);
    EXPECT_FALSE(parsed.ok()) << "'" << bad << "' accepted";
    if (!parsed.ok()) {
      EXPECT_THAT(parsed.error(), HasSubstr("--np/PADDLE_ELASTIC_NP '" + bad + "'"));
    }
  }
}

TEST(FleetrunElasticSettings, FromFlagsWithPaddlesDefaults) {
  auto s = Settings(With(kElasticFlags, {}));
  ASSERT_TRUE(s.ok()) << s.error();
  ASSERT_TRUE(s->has_value());
  const ElasticSettings& e = **s;
  EXPECT_EQ(e.server, "127.0.0.1:2379");
  EXPECT_EQ(e.job_id, "j");
  EXPECT_EQ(e.np.min, 2);
  EXPECT_EQ(e.np.max, 4);
  EXPECT_EQ(e.self, (Endpoint{"10.0.0.2", 6170})) << "Paddle's elastic launcher starts at 6170";
  EXPECT_EQ(e.timeout_seconds, 120);
  EXPECT_EQ(e.ttl_seconds, 60);
}

TEST(FleetrunElasticSettings, FromPaddlesEnv) {
  auto s = Settings({"train.py"}, {{"PADDLE_ELASTIC_SERVER", "etcd:2379"}, {"PADDLE_ELASTIC_JOB_ID", "job"},
                                   {"PADDLE_ELASTIC_NP", "3"}, {"POD_IP", "10.0.0.9"}, {"FLAGS_START_PORT", "7000"},
                                   {"PADDLE_ELASTIC_TIMEOUT", "2.5"}, {"PADDLE_ELASTIC_TTL", "3"}});
  ASSERT_TRUE(s.ok()) << s.error();
  ASSERT_TRUE(s->has_value());
  EXPECT_EQ((*s)->server, "etcd:2379");
  EXPECT_TRUE((*s)->np.fixed());
  EXPECT_EQ((*s)->self, (Endpoint{"10.0.0.9", 7000}));
  EXPECT_EQ((*s)->timeout_seconds, 2.5);
  EXPECT_EQ((*s)->ttl_seconds, 3);
}

TEST(FleetrunElasticSettings, KubernetesServiceEnvFindsEtcd) {
  auto s = Settings({"--job_id=j", "--np=2", "--host=10.0.0.2", "train.py"},
                    {{"PADDLE_ELASTIC_ETCD_SERVICE_HOST", "10.96.0.7"}, {"PADDLE_ELASTIC_ETCD_SERVICE_PORT", "2379"}});
  ASSERT_TRUE(s.ok()) << s.error();
  ASSERT_TRUE(s->has_value());
  EXPECT_EQ((*s)->server, "10.96.0.7:2379");
}

TEST(FleetrunElasticSettings, NotElasticWithoutAllThreeAsInPaddle) {
  auto none = Settings({"train.py"});
  ASSERT_TRUE(none.ok()) << none.error();
  EXPECT_FALSE(none->has_value());
  // Two of the three env variables: Paddle runs a plain job, and so do we.
  auto partial_env = Settings({"train.py"}, {{"PADDLE_ELASTIC_SERVER", "etcd:2379"}, {"PADDLE_ELASTIC_JOB_ID", "j"}});
  ASSERT_TRUE(partial_env.ok()) << partial_env.error();
  EXPECT_FALSE(partial_env->has_value());
}

TEST(FleetrunElasticSettings, MistakesAreOneLineErrors) {
  struct Case {
    std::vector<std::string> args;
    EnvMap env;
    std::string message_part;
  };
  const std::vector<Case> cases = {
      {{"--np=2", "train.py"}, {}, "needs --elastic_server, --job_id and --np"},
      {With(kElasticFlags, {"--server_num=1"}), {}, "collective jobs only"},
      {With(kElasticFlags, {"--ips=10.0.0.2,10.0.0.3"}), {}, "--ips cannot be combined"},
      {{"--elastic_server=127.0.0.1:2379", "--job_id=j", "--np=2", "train.py"}, {}, "pass --host or set POD_IP"},
      {{"--elastic_server=127.0.0.1", "--job_id=j", "--np=2", "--host=10.0.0.2", "train.py"}, {}, "--elastic_server"},
      {{"--elastic_server=127.0.0.1:2379", "--job_id=a/b", "--np=2", "--host=10.0.0.2", "train.py"}, {}, "'/'"},
      {With(kElasticFlags, {}), {{"PADDLE_ELASTIC_TIMEOUT", "soon"}}, "PADDLE_ELASTIC_TIMEOUT"},
      {With(kElasticFlags, {}), {{"PADDLE_ELASTIC_TTL", "1"}}, "PADDLE_ELASTIC_TTL"},
  };
  for (const Case& c : cases) {
    auto s = Settings(c.args, c.env);
    ASSERT_FALSE(s.ok()) << c.message_part;
    EXPECT_THAT(s.error(), HasSubstr(c.message_part));
    EXPECT_EQ(s.error().find('\n'), std::string::npos);
  }
}

TEST(FleetrunElasticMembers, FirstMaxRegistrationsInCreationOrderOneNodePerHost) {
  const std::vector<Registration> registered = {
      {"/paddle/j/nodes/zzz1", "10.0.0.3:6170", 7},
      {"/paddle/j/nodes/aaa1", "10.0.0.4:6170", 9},
      {"/paddle/j/nodes/mmm1", "10.0.0.2:6170", 5},
      {"/paddle/j/nodes/bbb1", "10.0.0.3:6170", 10},   // the same host again: one node
      {"/paddle/j/nodes/ccc1", "10.0.0.5", 11},        // Paddle 2.1: a bare host
  };
  const Members all = ChooseMembers(registered, 4, 6170);
  EXPECT_TRUE(all.malformed.empty());
  EXPECT_EQ(all.nodes,
            (std::vector<Endpoint>{{"10.0.0.2", 6170}, {"10.0.0.3", 6170}, {"10.0.0.4", 6170}, {"10.0.0.5", 6170}}));
  EXPECT_EQ(ChooseMembers(registered, 2, 6170).nodes, (std::vector<Endpoint>{{"10.0.0.2", 6170}, {"10.0.0.3", 6170}}));
}

TEST(FleetrunElasticMembers, ARegistrationIsOneHostAndPortOrOneBareHost) {
  auto endpoint = ParseRegistration("10.0.0.2:6170", 1);
  ASSERT_TRUE(endpoint.ok()) << endpoint.error();
  EXPECT_EQ(*endpoint, (Endpoint{"10.0.0.2", 6170}));
  auto bare = ParseRegistration("node-7.example", 6170);   // Paddle 2.1
  ASSERT_TRUE(bare.ok()) << bare.error();
  EXPECT_EQ(*bare, (Endpoint{"node-7.example", 6170}));
  const std::vector<std::string> malformed = {"10.0.0.8,10.0.0.9", "10.0.0.8:6170,10.0.0.9:6170", "", ":6170",
                                              "10.0.0.2:", "10.0.0.2:0", "10.0.0.2:65536", "10.0.0.2:port",
                                              "10.0.0.2:6170:1", "a b:6170", "a;b", std::string("a\nb", 3),
                                              "10.0.0.2 "};
  for (const std::string& bad : malformed) {
    EXPECT_FALSE(ParseRegistration(bad, 6170).ok()) << "'" << bad << "' accepted";
  }
}

// One malformed key must neither add nodes (a comma-joined value became two) nor take a place
// nor make the choice fail for the healthy nodes.
TEST(FleetrunElasticMembers, MalformedRegistrationsAreIgnoredAndNamed) {
  const std::vector<Registration> registered = {
      {"/paddle/j/nodes/evil", "10.0.0.8,10.0.0.9", 1},
      {"/paddle/j/nodes/port", "10.0.0.7:99999", 2},
      {"/paddle/j/nodes/good1", "10.0.0.2:6170", 3},
      {"/paddle/j/nodes/good2", "10.0.0.3:6170", 4},
  };
  const Members members = ChooseMembers(registered, 2, 6170);
  EXPECT_EQ(members.nodes, (std::vector<Endpoint>{{"10.0.0.2", 6170}, {"10.0.0.3", 6170}}));
  ASSERT_EQ(members.malformed.size(), 2u);
  EXPECT_THAT(members.malformed.at("/paddle/j/nodes/evil"), HasSubstr("\"10.0.0.8,10.0.0.9\""));
  EXPECT_THAT(members.malformed.at("/paddle/j/nodes/port"), HasSubstr("10.0.0.7:99999"));
}

TEST(FleetrunElasticMembers, AMalformedValueIsShownEscapedAndShort) {
  const Members members = ChooseMembers({{"k", "\x1b[31m" + std::string(100000, 'x'), 1}}, 2, 6170);
  ASSERT_EQ(members.malformed.count("k"), 1u);
  const std::string& why = members.malformed.at("k");
  EXPECT_LT(why.size(), 300u);
  EXPECT_EQ(why.find('\x1b'), std::string::npos) << "a terminal escape reached the message";
  EXPECT_THAT(why, HasSubstr("\\u001b[31m"));
}

HostFacts Facts(const std::string& pod_ip = "") {
  HostFacts facts;
  if (!pod_ip.empty()) facts.env["POD_IP"] = pod_ip;
  facts.env["CUDA_VISIBLE_DEVICES"] = "";
  facts.resolve_program = [](const std::string& script) -> Result<std::string> { return script; };
  facts.free_ports = [](int) -> Result<std::vector<int>> { return Error{"no free ports in this test"}; };
  facts.gloo_dir = "/tmp/gloo";
  return facts;
}

TEST(FleetrunElasticGeneration, EnvIsAFreshLaunchOfTheMembersInRankOrder) {
  auto options = ParseFlags(With(kElasticFlags, {"--nproc_per_node=2"}));
  ASSERT_TRUE(options.ok()) << options.error();
  const std::vector<Endpoint> members = {{"10.0.0.3", 6170}, {"10.0.0.2", 6170}, {"10.0.0.4", 6170}};
  auto plan = PlanGeneration(*options, Facts(), members);
  ASSERT_TRUE(plan.ok()) << plan.error();
  EXPECT_EQ(plan->node_rank, 1);
  ASSERT_EQ(plan->processes.size(), 2u);
  // The same as `fleetrun --ips=10.0.0.3,10.0.0.2,10.0.0.4 --start_port=6170 --host=10.0.0.2`.
  auto fresh_options = ParseFlags({"--ips=10.0.0.3,10.0.0.2,10.0.0.4", "--start_port=6170", "--host=10.0.0.2",
                                   "--nproc_per_node=2", "train.py"});
  ASSERT_TRUE(fresh_options.ok());
  auto fresh = PlanLaunch(*fresh_options, Facts());
  ASSERT_TRUE(fresh.ok()) << fresh.error();
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(plan->processes[i].env, fresh->processes[i].env);
    auto parsed = ParseProcessEnv(plan->processes[i].env, RoleMakerKind::kCollective);
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    EXPECT_EQ(parsed->id, static_cast<int>(2 + i));
    EXPECT_EQ(parsed->trainers_num, 6);
    EXPECT_EQ(parsed->current_endpoint, "10.0.0.2:" + std::to_string(6170 + i));
  }
}

TEST(FleetrunElasticGeneration, ClusterEnvAndPodIpDoNotOverrideEtcd) {
  auto options = ParseFlags({"--elastic_server=127.0.0.1:2379", "--job_id=j", "--np=1:2", "train.py"});
  ASSERT_TRUE(options.ok());
  auto plan = PlanGeneration(*options, Facts("10.0.0.4"), {{"10.0.0.3", 7000}, {"10.0.0.4", 7000}});
  ASSERT_TRUE(plan.ok()) << plan.error();
  EXPECT_EQ(plan->node_rank, 1) << "this node is found by POD_IP";
  EXPECT_EQ(plan->processes.at(0).env.at("PADDLE_CURRENT_ENDPOINT"), "10.0.0.4:7000");
}

TEST(FleetrunElasticGeneration, MembersMustShareTheirPort) {
  auto options = ParseFlags(With(kElasticFlags, {}));
  ASSERT_TRUE(options.ok());
  auto plan = PlanGeneration(*options, Facts(), {{"10.0.0.2", 6170}, {"10.0.0.3", 7000}});
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.error(), HasSubstr("different first ports"));
}

}  // namespace
}  // namespace fleet::launcher
