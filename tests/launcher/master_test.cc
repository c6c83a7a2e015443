// The HTTP master's parts without the network: node ranks (RankPeers), the store the master's node
// serves (RendezvousStore), and the plan over the nodes a rendezvous agreed on.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fleet/launcher/master.h"
#include "fleet/launcher/plan.h"

namespace fleet::launcher {
namespace {

using Json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

PeerNode Peer(const std::string& host, int rank, bool serves = false, std::vector<int> ports = {7000, 7001}) {
  return PeerNode{host, rank, std::move(ports), 9000, serves};
}

std::vector<std::string> Hosts(const std::vector<PeerNode>& nodes) {
  std::vector<std::string> hosts;
  for (const PeerNode& n : nodes) hosts.push_back(n.host + "=" + std::to_string(n.rank));
  return hosts;
}

TEST(FleetrunMasterRanks, GivenRanksWinOverStartOrderAndTheMaster) {
  auto ranked = RankPeers({Peer("10.0.0.1", 1, true), Peer("10.0.0.2", 0)}, 2);
  ASSERT_TRUE(ranked.ok()) << ranked.error();
  EXPECT_THAT(Hosts(*ranked), ElementsAre("10.0.0.2=0", "10.0.0.1=1"));
}

TEST(FleetrunMasterRanks, WithoutRanksTheMastersNodeIsFirstThenAddressesInNumericOrder) {
  auto ranked = RankPeers({Peer("10.0.0.10", -1), Peer("10.0.0.9", -1), Peer("10.0.0.50", -1, true), Peer("node-b", -1)}, 4);
  ASSERT_TRUE(ranked.ok()) << ranked.error();
  EXPECT_THAT(Hosts(*ranked), ElementsAre("10.0.0.50=0", "10.0.0.9=1", "10.0.0.10=2", "node-b=3"));
}

TEST(FleetrunMasterRanks, NodesWithoutRanksFillTheFreeRanks) {
  auto ranked = RankPeers({Peer("10.0.0.3", -1), Peer("10.0.0.1", 0), Peer("10.0.0.2", -1)}, 3);
  ASSERT_TRUE(ranked.ok()) << ranked.error();
  EXPECT_THAT(Hosts(*ranked), ElementsAre("10.0.0.1=0", "10.0.0.2=1", "10.0.0.3=2"));
}

TEST(FleetrunMasterRanks, ARankClaimedTwiceNamesBothNodes) {
  auto ranked = RankPeers({Peer("10.0.0.1", 0, true), Peer("10.0.0.2", 0)}, 2);
  ASSERT_FALSE(ranked.ok());
  EXPECT_THAT(ranked.error(), HasSubstr("nodes 10.0.0.1 and 10.0.0.2 both have rank 0"));
}

TEST(FleetrunMasterRanks, ARankOutsideTheJobNamesTheNodeAndTheNodeCount) {
  auto ranked = RankPeers({Peer("10.0.0.1", 0), Peer("10.0.0.2", 2)}, 2);
  ASSERT_FALSE(ranked.ok());
  EXPECT_THAT(ranked.error(), HasSubstr("node 10.0.0.2 has rank 2 but the job has --nnodes 2"));
}

TEST(FleetrunMasterRanks, NodesMustRunAsManyTrainersEach) {
  auto ranked = RankPeers({Peer("10.0.0.1", -1), Peer("10.0.0.2", -1, false, {7000})}, 2);
  ASSERT_FALSE(ranked.ok());
  EXPECT_THAT(ranked.error(), HasSubstr("node 10.0.0.2 runs 1 trainers but node 10.0.0.1 runs 2"));
}

std::string Registration(const std::string& job, int nnodes, const PeerNode& node) {
  return Json{{"job", job},
              {"nnodes", nnodes},
              {"node",
               {{"host", node.host}, {"rank", node.rank}, {"ports", node.ports}, {"master_port", node.master_port},
                {"serves_master", node.serves_master}}}}
      .dump();
}

std::vector<std::string> RegisteredHosts(const RendezvousStore::Answer& answer) {
  std::vector<std::string> hosts;
  const Json parsed = Json::parse(answer.body);
  for (const Json& node : parsed.at("nodes")) hosts.push_back(node.at("host"));
  return hosts;
}

TEST(FleetrunMasterStore, AnswersEveryRegistrationOfTheJobAndCountsWhoSawThemAll) {
  RendezvousStore store;
  auto first = store.Register(Registration("j", 2, Peer("10.0.0.1", -1, true)));
  ASSERT_EQ(first.status, 200) << first.body;
  EXPECT_THAT(RegisteredHosts(first), ElementsAre("10.0.0.1"));
  EXPECT_EQ(Json::parse(first.body)["seen"], 0);
  auto second = store.Register(Registration("j", 2, Peer("10.0.0.2", -1)));
  EXPECT_THAT(RegisteredHosts(second), ElementsAre("10.0.0.1", "10.0.0.2"));
  EXPECT_EQ(Json::parse(second.body)["seen"], 1);
  auto again = store.Register(Registration("j", 2, Peer("10.0.0.1", -1, true)));
  EXPECT_THAT(RegisteredHosts(again), ElementsAre("10.0.0.1", "10.0.0.2")) << "a node registering again is one node";
  EXPECT_EQ(Json::parse(again.body)["seen"], 2);
}

TEST(FleetrunMasterStore, ANewJobIdNeverSeesTheOlderJobsNodes) {
  RendezvousStore store;
  ASSERT_EQ(store.Register(Registration("run-1", 2, Peer("10.0.0.1", 0))).status, 200);
  ASSERT_EQ(store.Register(Registration("run-1", 2, Peer("10.0.0.2", 1))).status, 200);
  auto restarted = store.Register(Registration("run-2", 2, Peer("10.0.0.2", 1)));
  ASSERT_EQ(restarted.status, 200) << restarted.body;
  EXPECT_THAT(RegisteredHosts(restarted), ElementsAre("10.0.0.2"));
}

TEST(FleetrunMasterStore, RegistrationsThatDoNotFitTheJobAreRefusedSayingWhy) {
  RendezvousStore store;
  ASSERT_EQ(store.Register(Registration("j", 1, Peer("10.0.0.1", -1))).status, 200);
  auto full = store.Register(Registration("j", 1, Peer("10.0.0.2", -1)));
  EXPECT_EQ(full.status, 409);
  EXPECT_THAT(full.body, HasSubstr("job 'j' already has its 1 nodes (10.0.0.1); 10.0.0.2 is not one of them"));
  auto count = store.Register(Registration("j", 3, Peer("10.0.0.3", -1)));
  EXPECT_EQ(count.status, 409);
  EXPECT_THAT(count.body, HasSubstr("has 1 nodes at the master but 10.0.0.3 says --nnodes 3"));
}

TEST(FleetrunMasterStore, MalformedRegistrationsAre400AndNeverStored) {
  RendezvousStore store;
  const Json good = Json::parse(Registration("j", 2, Peer("10.0.0.1", -1)));
  auto with = [&](const std::string& pointer, const Json& value) {
    Json body = good;
    body[Json::json_pointer(pointer)] = value;
    return body.dump();
  };
  for (const std::string& body :
       {std::string("not json"), std::string("[1]"), with("/job", ""), with("/job", 7), with("/nnodes", 0),
        with("/nnodes", "2"), with("/node/host", "a,b"), with("/node/host", nullptr), with("/node/ports", Json::array()),
        with("/node/ports", Json::array({70000})), with("/node/rank", -2), with("/node/master_port", 0),
        with("/job", std::string(300, 'x'))}) {
    auto answer = store.Register(body);
    EXPECT_EQ(answer.status, 400) << body;
    EXPECT_THAT(answer.body, HasSubstr("malformed registration: "));
  }
  EXPECT_THAT(RegisteredHosts(store.Register(good.dump())), ElementsAre("10.0.0.1"));
}

TEST(FleetrunMasterStore, AFullStoreRefusesNewNodes) {
  RendezvousStore store(/*max_registrations=*/1);
  ASSERT_EQ(store.Register(Registration("a", 2, Peer("10.0.0.1", -1))).status, 200);
  EXPECT_EQ(store.Register(Registration("b", 2, Peer("10.0.0.1", -1))).status, 503);
  EXPECT_EQ(store.Register(Registration("a", 2, Peer("10.0.0.1", -1))).status, 200) << "registering again takes no room";
}

HostFacts FakeHost(EnvMap env) {
  HostFacts facts;
  facts.env = std::move(env);
  facts.local_addresses = {"127.0.0.1"};
  facts.free_ports = [](int count) -> Result<std::vector<int>> { return std::vector<int>(static_cast<size_t>(count), 1); };
  facts.resolve_program = [](const std::string& script) -> Result<std::string> { return script; };
  facts.gloo_dir = "/tmp/gloo";
  return facts;
}

TEST(FleetrunMasterPlan, TheRendezvousNodesAreTheJobAndTrainersGetPaddleMaster) {
  auto options = ParseFlags({"--nproc_per_node=2", "train.py"});
  ASSERT_TRUE(options.ok()) << options.error();
  NodeRendezvous nodes;
  nodes.hosts = {"10.0.0.2", "10.0.0.1"};
  nodes.ports = {{7000, 7001}, {8000, 8001}};
  nodes.node_rank = 1;
  nodes.collective_master = Endpoint{"10.0.0.2", 9000};
  // A platform's cluster env is not this job's: the rendezvous' nodes are.
  const HostFacts host = FakeHost({{"CUDA_VISIBLE_DEVICES", ""}, {"PADDLE_TRAINERS", "10.9.0.1,10.9.0.2"},
                                   {"POD_IP", "10.9.0.2"}, {"PADDLE_TRAINER_ID", "1"}, {"TRAINER_PORTS_NUM", "2"},
                                   {"PADDLE_TRAINERS_NUM", "2"}});
  auto plan = PlanLaunch(*options, host, &nodes);
  ASSERT_TRUE(plan.ok()) << plan.error();
  EXPECT_FALSE(plan->direct_start);
  ASSERT_EQ(plan->processes.size(), 2u);
  const EnvMap& env = plan->processes[1].env;
  EXPECT_EQ(env.at("PADDLE_MASTER"), "10.0.0.2:9000");
  EXPECT_EQ(env.at("PADDLE_TRAINER_ID"), "3");
  EXPECT_EQ(env.at("PADDLE_GLOBAL_RANK"), "3");
  EXPECT_EQ(env.at("PADDLE_LOCAL_RANK"), "1");
  EXPECT_EQ(env.at("PADDLE_RANK_IN_NODE"), "1");
  EXPECT_EQ(env.at("PADDLE_GLOBAL_SIZE"), "4");
  EXPECT_EQ(env.at("PADDLE_LOCAL_SIZE"), "2");
  EXPECT_EQ(env.at("PADDLE_NNODES"), "2");
  EXPECT_EQ(env.at("PADDLE_CURRENT_ENDPOINT"), "10.0.0.1:8001");
  EXPECT_EQ(env.at("PADDLE_TRAINER_ENDPOINTS"), "10.0.0.2:7000,10.0.0.2:7001,10.0.0.1:8000,10.0.0.1:8001");
  EXPECT_EQ(env.at("PADDLE_DISTRI_BACKEND"), "gloo");
  EXPECT_EQ(plan->processes[1].log_file, "workerlog.1");
}

TEST(FleetrunMasterPlan, ParameterServerJobsDoNotTakeAnHttpMaster) {
  auto options = ParseFlags({"--server_num=1", "--trainer_num=1", "train.py"});
  ASSERT_TRUE(options.ok()) << options.error();
  NodeRendezvous nodes;
  nodes.hosts = {"10.0.0.1"};
  nodes.ports = {{7000}};
  auto plan = PlanLaunch(*options, FakeHost({}), &nodes);
  ASSERT_FALSE(plan.ok());
  EXPECT_THAT(plan.error(), HasSubstr("--master ip:port runs collective jobs"));
}

}  // namespace
}  // namespace fleet::launcher
