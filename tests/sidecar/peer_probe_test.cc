// PeerProber against real sockets: listening, refusing, names, cancellation.
#include "fleet/sidecar/peer_probe.h"

#include <gtest/gtest.h>

#include "sidecar_process.h"

namespace fleet::sidecar {
namespace {

using std::chrono::milliseconds;
using testing::TcpPort;

TEST(PeerProberTest, ReachedRefusedAndResolved) {
  TcpPort up, down;
  ASSERT_TRUE(up.Listen());
  ASSERT_GT(down.port(), 0);
  PeerProber prober(milliseconds(1000), milliseconds(2000));
  kube::CancelToken cancel;
  const std::vector<Endpoint> endpoints = {{"127.0.0.1", up.port()},
                                           {"127.0.0.1", down.port()},
                                           {"localhost", up.port()},  // a name, maybe also ::1: any address will do
                                           {"no-such-host.invalid", up.port()}};
  auto outcomes = prober.ProbeAll(endpoints, cancel);
  ASSERT_EQ(outcomes.size(), endpoints.size());
  EXPECT_TRUE(outcomes[0].reached) << outcomes[0].error;
  EXPECT_TRUE(outcomes[0].error.empty());
  EXPECT_FALSE(outcomes[1].reached);
  EXPECT_EQ(outcomes[1].error, "connection refused");
  EXPECT_TRUE(outcomes[2].reached) << outcomes[2].error;
  EXPECT_FALSE(outcomes[3].reached);
  EXPECT_NE(outcomes[3].error.find("no-such-host.invalid"), std::string::npos) << outcomes[3].error;

  // The same prober again: the refusing port now listens.
  ASSERT_TRUE(down.Listen());
  outcomes = prober.ProbeAll({{"127.0.0.1", down.port()}, {"localhost", down.port()}}, cancel);
  EXPECT_TRUE(outcomes[0].reached) << outcomes[0].error;
  EXPECT_TRUE(outcomes[1].reached) << outcomes[1].error;
}

TEST(PeerProberTest, CancelledRoundsEndAtOnce) {
  TcpPort up;
  ASSERT_TRUE(up.Listen());
  PeerProber prober(milliseconds(1000), milliseconds(2000));
  kube::CancelToken cancel;
  cancel.Cancel();
  auto outcomes = prober.ProbeAll({{"127.0.0.1", up.port()}}, cancel);
  ASSERT_EQ(outcomes.size(), 1u);
  EXPECT_FALSE(outcomes[0].reached);
  EXPECT_EQ(outcomes[0].error, "cancelled");
  EXPECT_TRUE(prober.ProbeAll({}, kube::CancelToken()).empty());
}

}  // namespace
}  // namespace fleet::sidecar
