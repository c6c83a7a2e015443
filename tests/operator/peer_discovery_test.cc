// PeerDiscovery: each job's answer to "how do its pods find their peers", read from its spec, and
// what follows from it (the planner's tests show the behaviour; this is the table itself).
#include <gtest/gtest.h>

#include <string>

#include "builders.h"
#include "fleet/operator/peer_discovery.h"

namespace fleet::op::testing {
namespace {

PeerDiscovery Of(const JobBuilder& job) {
  auto parsed = ParseFleetJob(job.Obj());
  EXPECT_TRUE(parsed.ok()) << parsed.error();
  return PeerDiscovery::Of(parsed.ok() ? parsed.value().spec : FleetJobSpec{});
}

TEST(PeerDiscoveryTest, TheNetworkDecidesTheListsAndElasticJobsRendezvousOnAnyNetwork) {
  EXPECT_EQ(Of(JobBuilder().Collective(2)).source(), PeerSource::kPodAddresses);
  EXPECT_EQ(Of(JobBuilder().Ps(1, 2).Network("HostNetwork")).source(), PeerSource::kNodeAddresses);
  EXPECT_EQ(Of(JobBuilder().Ps(1, 2).Network("Service")).source(), PeerSource::kStableNames);
  EXPECT_EQ(Of(JobBuilder().Collective(3).Elastic(2, 4)).source(), PeerSource::kRendezvous);
  EXPECT_EQ(Of(JobBuilder().Collective(3).Network("Service").Elastic(2, 4)).source(), PeerSource::kRendezvous);
}

TEST(PeerDiscoveryTest, WhatAFailedPodCosts) {
  EXPECT_EQ(Of(JobBuilder().Collective(2)).CostOfFailedPod(), FailedPodCost::kNewRun);
  EXPECT_EQ(Of(JobBuilder().Collective(2).Network("HostNetwork")).CostOfFailedPod(), FailedPodCost::kNewRun);
  EXPECT_EQ(Of(JobBuilder().Collective(2).Network("Service")).CostOfFailedPod(), FailedPodCost::kReplacePod);
  EXPECT_EQ(Of(JobBuilder().Collective(3).Elastic(2, 4)).CostOfFailedPod(), FailedPodCost::kReplacePodInRun);
  // Only a rendezvous has an exit code that says no retry helps (its launcher gave up waiting).
  EXPECT_EQ(Of(JobBuilder().Collective(3).Elastic(2, 4)).GaveUpExitCode(), 124);
  EXPECT_FALSE(Of(JobBuilder().Collective(2).Network("Service")).GaveUpExitCode());
}

TEST(PeerDiscoveryTest, ListsNeedEveryWorkerARendezvousOneThatSucceededAndNoneRunning) {
  const PeerDiscovery lists = Of(JobBuilder().Collective(3));
  EXPECT_TRUE(lists.Succeeded(3, 0, 3));
  EXPECT_FALSE(lists.Succeeded(2, 0, 3));
  const PeerDiscovery rendezvous = Of(JobBuilder().Collective(3).Elastic(2, 4));
  EXPECT_TRUE(rendezvous.Succeeded(1, 0, 3));
  EXPECT_FALSE(rendezvous.Succeeded(2, 1, 3));
  EXPECT_FALSE(rendezvous.Succeeded(0, 0, 3));
}

TEST(PeerDiscoveryTest, WhichHostsTheListsHold) {
  const PeerDiscovery pods = Of(JobBuilder().Collective(2));
  EXPECT_TRUE(pods.PublishesLists());
  EXPECT_FALSE(pods.UsesNodeAddress());
  EXPECT_TRUE(pods.VanishedPodMovesAway());
  const PeerDiscovery nodes = Of(JobBuilder().Collective(2).Network("HostNetwork"));
  EXPECT_TRUE(nodes.UsesNodeAddress());
  EXPECT_FALSE(nodes.VanishedPodMovesAway());   // it may come back on the same node
  const PeerDiscovery names = Of(JobBuilder().Collective(2).Network("Service"));
  EXPECT_TRUE(names.HostsKnownFromStart());
  EXPECT_FALSE(names.TracksMembers());
  const PeerDiscovery etcd = Of(JobBuilder().Collective(3).Elastic(2, 4));
  EXPECT_FALSE(etcd.PublishesLists());
  EXPECT_TRUE(etcd.TracksMembers());
}

}  // namespace
}  // namespace fleet::op::testing
