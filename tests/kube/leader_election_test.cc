// leader_election.h: two electors on one Lease in the fake API server, with short durations
// (lease 1 s, renew deadline 0.7 s, retry 0.2 s). A sampler checks IsLeader() of both every 2 ms
// for the whole test: never two leaders at once.
#include "fleet/kube/leader_election.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <iostream>
#include <memory>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "fake_apiserver_fixture.h"

namespace fleet::kube {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using testing::FakeApiServer;

constexpr milliseconds kLease{1000};
constexpr milliseconds kRenewDeadline{700};
constexpr milliseconds kRetry{200};

bool Eventually(const std::function<bool()>& done, milliseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return done();
}

struct Candidate {
  std::string identity;
  std::unique_ptr<LeaderElector> elector;
  std::atomic<int> started{0};
  std::atomic<int> stopped{0};
};

class LeaderElectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.ok()) << fake_.error();
    ClientOptions options;
    options.max_attempts = 1;                    // the elector does its own retrying
    options.request_timeout = milliseconds(300); // well below the renew deadline
    auto client = Client::Create(fake_.Config(), options);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = *client;
    sampler_ = std::thread([this] {
      while (!stop_sampling_) {
        if (a_.elector && b_.elector && a_.elector->IsLeader() && b_.elector->IsLeader()) both_leading_++;
        std::this_thread::sleep_for(milliseconds(2));
      }
    });
  }
  void TearDown() override {
    a_.elector.reset();
    b_.elector.reset();
    stop_sampling_ = true;
    if (sampler_.joinable()) sampler_.join();
    EXPECT_EQ(both_leading_.load(), 0) << "two electors were leaders at the same time";
  }

  void Make(Candidate& c, const std::string& identity, bool release_on_cancel = true) {
    c.identity = identity;
    LeaderElectionConfig config;
    config.lease_namespace = "default";
    config.lease_name = "fleet-operator";
    config.identity = identity;
    config.lease_duration = kLease;
    config.renew_deadline = kRenewDeadline;
    config.retry_period = kRetry;
    config.release_on_cancel = release_on_cancel;
    config.on_started_leading = [&c] { c.started++; };
    config.on_stopped_leading = [&c] { c.stopped++; };
    c.elector = std::make_unique<LeaderElector>(client_, config);
  }
  // Starts both and waits for one to lead; returns the leader (the other is *follower).
  Candidate* StartBoth(Candidate** follower) {
    a_.elector->Start();
    b_.elector->Start();
    EXPECT_TRUE(Eventually([&] { return a_.elector->IsLeader() || b_.elector->IsLeader(); }, milliseconds(3000)));
    Candidate* leader = a_.elector->IsLeader() ? &a_ : &b_;
    *follower = leader == &a_ ? &b_ : &a_;
    return leader;
  }
  Json Lease() {
    auto lease = client_->Get(Resource::Leases(), "default", "fleet-operator");
    EXPECT_TRUE(lease.ok()) << lease.status().ToString();
    return lease.ok() ? *lease : Json();
  }

  FakeApiServer fake_{{"--kubelet", "manual"}};
  std::shared_ptr<Client> client_;
  Candidate a_, b_;
  std::thread sampler_;
  std::atomic<bool> stop_sampling_{false};
  std::atomic<int> both_leading_{0};
};

TEST_F(LeaderElectionTest, ExactlyOneOfTwoElectorsLeadsAndTheLeaseRecordsIt) {
  Make(a_, "candidate-a");
  Make(b_, "candidate-b");
  Candidate* follower = nullptr;
  Candidate* leader = StartBoth(&follower);
  // Several renew periods: the leader keeps the lease, the follower never gets it.
  std::this_thread::sleep_for(milliseconds(1500));
  EXPECT_TRUE(leader->elector->IsLeader());
  EXPECT_FALSE(follower->elector->IsLeader());
  EXPECT_EQ(leader->started.load(), 1);
  EXPECT_EQ(leader->stopped.load(), 0);
  EXPECT_EQ(follower->started.load(), 0);
  EXPECT_EQ(leader->elector->CurrentLeader(), leader->identity);
  EXPECT_EQ(follower->elector->CurrentLeader(), leader->identity);

  const Json spec = Lease()["spec"];
  EXPECT_EQ(spec["holderIdentity"], leader->identity);
  EXPECT_EQ(spec["leaseDurationSeconds"], 1);
  EXPECT_EQ(spec["leaseTransitions"], 0);
  const std::regex micro_time(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)");
  EXPECT_TRUE(std::regex_match(spec["renewTime"].get<std::string>(), micro_time)) << spec.dump();
  EXPECT_TRUE(std::regex_match(spec["acquireTime"].get<std::string>(), micro_time)) << spec.dump();
  EXPECT_NE(spec["renewTime"], spec["acquireTime"]) << "the leader renews";
}

TEST_F(LeaderElectionTest, KilledLeaderIsReplacedOnlyAfterTheLeaseDuration) {
  Make(a_, "candidate-a", /*release_on_cancel=*/false);
  Make(b_, "candidate-b", /*release_on_cancel=*/false);
  Candidate* follower = nullptr;
  Candidate* leader = StartBoth(&follower);
  std::this_thread::sleep_for(milliseconds(500));   // the follower has been watching the renewals

  const Clock::time_point killed = Clock::now();
  leader->elector->Stop();   // no release: to the others this is a crashed process
  EXPECT_FALSE(leader->elector->IsLeader());
  ASSERT_TRUE(Eventually([&] { return follower->elector->IsLeader(); }, milliseconds(5000)));
  const auto takeover = std::chrono::duration_cast<milliseconds>(Clock::now() - killed);
  // Not before the lease could have expired (its last renewal was at most one retry period
  // before the kill), and within lease duration + retry periods of slack.
  EXPECT_GE(takeover, kLease - kRetry - milliseconds(50)) << takeover.count() << " ms";
  EXPECT_LE(takeover, kLease + 2 * kRetry + milliseconds(500)) << takeover.count() << " ms";
  const Json spec = Lease()["spec"];
  EXPECT_EQ(spec["holderIdentity"], follower->identity);
  EXPECT_EQ(spec["leaseTransitions"], 1);
  EXPECT_EQ(leader->stopped.load(), 1);
  std::cout << "takeover after a killed leader: " << takeover.count() << " ms\n";
}

TEST_F(LeaderElectionTest, ReleasedLeaseIsTakenOverWithoutWaitingForExpiry) {
  Make(a_, "candidate-a", /*release_on_cancel=*/true);
  Make(b_, "candidate-b", /*release_on_cancel=*/true);
  Candidate* follower = nullptr;
  Candidate* leader = StartBoth(&follower);
  std::this_thread::sleep_for(milliseconds(300));

  const Clock::time_point stopped = Clock::now();
  leader->elector->Stop();
  ASSERT_TRUE(Eventually([&] { return follower->elector->IsLeader(); }, milliseconds(5000)));
  const auto takeover = std::chrono::duration_cast<milliseconds>(Clock::now() - stopped);
  EXPECT_LT(takeover, kLease / 2) << takeover.count() << " ms: a released lease needs no expiry";
  EXPECT_EQ(leader->stopped.load(), 1);
  EXPECT_EQ(Lease()["spec"]["holderIdentity"], follower->identity);
  std::cout << "takeover after a release: " << takeover.count() << " ms\n";
}

TEST_F(LeaderElectionTest, ReleaseOnStopEmptiesTheHolder) {
  Make(a_, "candidate-a");
  a_.elector->Start();
  ASSERT_TRUE(Eventually([&] { return a_.elector->IsLeader(); }, milliseconds(3000)));
  a_.elector->Stop();
  EXPECT_FALSE(a_.elector->IsLeader());
  EXPECT_EQ(a_.stopped.load(), 1);
  EXPECT_EQ(Lease()["spec"]["holderIdentity"], "");
}

TEST_F(LeaderElectionTest, LeaderThatCannotRenewStepsDownWithinTheRenewDeadline) {
  Make(a_, "candidate-a");
  Make(b_, "candidate-b");
  Candidate* follower = nullptr;
  Candidate* leader = StartBoth(&follower);
  std::this_thread::sleep_for(milliseconds(300));

  // Every Lease request fails for a while: nobody can renew or acquire.
  fake_.Control("faults", {{"failNext", 100000}, {"code", 503}, {"match", "/apis/coordination.k8s.io/"}});
  const Clock::time_point broken = Clock::now();
  ASSERT_TRUE(Eventually([&] { return !leader->elector->IsLeader(); }, milliseconds(3000)));
  const auto stepped_down = std::chrono::duration_cast<milliseconds>(Clock::now() - broken);
  EXPECT_LE(stepped_down, kRenewDeadline + milliseconds(100)) << stepped_down.count() << " ms";
  ASSERT_TRUE(Eventually([&] { return leader->stopped.load() == 1; }, milliseconds(1000)))
      << "on_stopped_leading: losing the lease stops the work";
  std::this_thread::sleep_for(milliseconds(1200));   // longer than the lease: still nobody leads
  EXPECT_FALSE(a_.elector->IsLeader());
  EXPECT_FALSE(b_.elector->IsLeader());

  // The API comes back: someone leads again (never both, as the sampler checks).
  fake_.Control("faults", {{"reset", true}});
  EXPECT_TRUE(Eventually([&] { return a_.elector->IsLeader() || b_.elector->IsLeader(); }, milliseconds(3000)));
  std::cout << "stepped down " << stepped_down.count() << " ms after renewals started failing\n";
}

TEST(LeaderElectionConfigTest, UnsafeDurationsAreRejected) {
  LeaderElectionConfig config;
  config.lease_namespace = "default";
  config.lease_name = "lease";
  config.identity = "me";
  config.lease_duration = milliseconds(1000);
  config.renew_deadline = milliseconds(1000);   // not below the lease duration: two leaders possible
  config.retry_period = milliseconds(200);
  EXPECT_THROW(LeaderElector(nullptr, config), std::invalid_argument);
  config.renew_deadline = milliseconds(700);
  config.retry_period = milliseconds(600);      // 1.2 x 600 > 700
  EXPECT_THROW(LeaderElector(nullptr, config), std::invalid_argument);
  config.retry_period = milliseconds(200);
  config.identity = "";
  EXPECT_THROW(LeaderElector(nullptr, config), std::invalid_argument);
  config.identity = "me";
  EXPECT_NO_THROW(LeaderElector(nullptr, config));
}

}  // namespace
}  // namespace fleet::kube
