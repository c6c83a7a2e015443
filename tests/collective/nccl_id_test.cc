// The c_gen_nccl_id exchange: ids reach every rank, the wire format is Paddle's (checked against
// hand-written Paddle-side peers), and bad peers get an error or are ignored, never a crash or hang.
// None of this needs a GPU; with FLEET_HAVE_NCCL a real ncclGetUniqueId id crosses the wire too.
#include <atomic>
#include <cstring>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#if FLEET_HAVE_NCCL
#include <nccl.h>
#endif

#include "fleet/collective/nccl_id.h"
#include "test_util.h"

namespace fleet::collective {
namespace {

using namespace fleet::collective::testing;  // NOLINT: test helpers
using std::chrono::milliseconds;
using ::testing::HasSubstr;

UniqueId PatternId(char seed) {
  UniqueId id;
  for (size_t i = 0; i < id.size(); ++i) id[i] = static_cast<char>(seed + static_cast<char>(i));
  return id;
}

// Paddle's CommHead as bytes.
std::string PaddleHead(int32_t version, int32_t ring_id) {
  std::string head(8, '\0');
  std::memcpy(head.data(), &version, 4);
  std::memcpy(head.data() + 4, &ring_id, 4);
  return head;
}

IdExchangeOptions Within(milliseconds timeout, int ring_id = 0) { return IdExchangeOptions{ring_id, timeout}; }

// A TCP socket listening on 127.0.0.1 on a free port, with `backlog`: *fd and *port.
void ListenOnLoopback(int backlog, int* fd, int* port) {
  *fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(*fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ::getsockname(*fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ASSERT_EQ(::listen(*fd, backlog), 0);
  *port = ntohs(addr.sin_port);
}

TEST(NcclIdTest, Rank0SendsTheIdsToEveryRank) {
  const std::vector<std::string> endpoints = LoopbackEndpoints(4);
  const std::vector<UniqueId> ids = {PatternId('a'), PatternId('z')};
  std::vector<Result<std::vector<UniqueId>>> received(endpoints.size(), Error{"not run"});
  Status sent = Error{"not run"};
  RunRanks(static_cast<int>(endpoints.size()), [&](int r) {
    if (r == 0) {
      sent = SendUniqueIds({endpoints.begin() + 1, endpoints.end()}, ids, Within(milliseconds(10000)));
    } else {
      received[static_cast<size_t>(r)] = ReceiveUniqueIds(endpoints[static_cast<size_t>(r)], ids.size(), Within(milliseconds(10000)));
    }
  });
  ASSERT_TRUE(sent.ok()) << sent.error();
  for (size_t r = 1; r < endpoints.size(); ++r) {
    ASSERT_TRUE(received[r].ok()) << received[r].error();
    EXPECT_EQ(*received[r], ids);
  }
}

TEST(NcclIdTest, ReceiverSpeaksPaddlesWireFormat) {
  // A hand-written Paddle rank 0 (gen_comm_id_helper.cc's ConnectAddr + SendCommID).
  const int port = FreePort();
  const UniqueId id = PatternId('p');
  Result<std::vector<UniqueId>> received = Error{"not run"};
  std::thread receiver([&] { received = ReceiveUniqueIds("127.0.0.1:" + std::to_string(port), 1, Within(milliseconds(10000))); });
  const int fd = RawConnectWithin(port, 10);
  ASSERT_GE(fd, 0);
  SetRecvTimeout(fd, 10);
  const std::string head = PaddleHead(1, 0);
  ASSERT_TRUE(SendRaw(fd, head.data(), head.size()));
  EXPECT_EQ(RecvRaw(fd, 8), head) << "the receiver echoes the head";
  ASSERT_TRUE(SendRaw(fd, id.data(), id.size()));
  receiver.join();
  ::close(fd);
  ASSERT_TRUE(received.ok()) << received.error();
  EXPECT_EQ((*received)[0], id);
}

TEST(NcclIdTest, SenderSpeaksPaddlesWireFormat) {
  // A hand-written Paddle rank 1 (CreateListenSocket + SocketAccept + RecvCommID), ring 3.
  int listen_fd = -1, port = 0;
  ASSERT_NO_FATAL_FAILURE(ListenOnLoopback(4, &listen_fd, &port));
  const UniqueId id = PatternId('q');
  Status sent = Error{"not run"};
  std::thread sender([&] { sent = SendUniqueIds({"127.0.0.1:" + std::to_string(port)}, {id}, Within(milliseconds(10000), 3)); });
  const int fd = ::accept(listen_fd, nullptr, nullptr);
  ASSERT_GE(fd, 0);
  SetRecvTimeout(fd, 10);
  const std::string head = RecvRaw(fd, 8);
  EXPECT_EQ(head, PaddleHead(1, 3));
  SendRaw(fd, head.data(), head.size());
  const std::string bytes = RecvRaw(fd, kUniqueIdBytes);
  sender.join();
  ::close(fd);
  ::close(listen_fd);
  ASSERT_TRUE(sent.ok()) << sent.error();
  EXPECT_EQ(bytes, std::string(id.begin(), id.end()));
}

TEST(NcclIdTest, GarbageOnTheSocketIsIgnoredUntilRank0Comes) {
  const int port = FreePort();
  const std::string endpoint = "127.0.0.1:" + std::to_string(port);
  Result<std::vector<UniqueId>> received = Error{"not run"};
  std::thread receiver([&] { received = ReceiveUniqueIds(endpoint, 1, Within(milliseconds(10000))); });
  // A peer sends garbage: the receiver closes that connection and keeps listening.
  const int garbage = RawConnectWithin(port, 10);
  ASSERT_GE(garbage, 0);
  SetRecvTimeout(garbage, 10);
  ASSERT_TRUE(SendRaw(garbage, "GET / HTTP/1.1\r\n\r\n", 18));
  EXPECT_EQ(RecvRaw(garbage, 1), "") << "closed without an answer";
  ::close(garbage);
  // So does one for another ring, and one that connects and closes.
  const int other_ring = RawConnect(port);
  const std::string ring7 = PaddleHead(1, 7);
  SendRaw(other_ring, ring7.data(), ring7.size());
  const int closes_at_once = RawConnect(port);
  if (closes_at_once >= 0) ::close(closes_at_once);
  const UniqueId id = PatternId('g');
  Status sent = SendUniqueIds({endpoint}, {id}, Within(milliseconds(10000)));
  receiver.join();
  ::close(other_ring);
  ASSERT_TRUE(sent.ok()) << sent.error();
  ASSERT_TRUE(received.ok()) << received.error();
  EXPECT_EQ((*received)[0], id);
}

TEST(NcclIdTest, OnlyGarbageTimesOutNamingWhatWasIgnored) {
  const int port = FreePort();
  const std::string endpoint = "127.0.0.1:" + std::to_string(port);
  const auto start = Clock::now();
  Result<std::vector<UniqueId>> received = Error{"not run"};
  std::thread receiver([&] { received = ReceiveUniqueIds(endpoint, 1, Within(milliseconds(1500))); });
  const int fd = RawConnectWithin(port, 5);
  ASSERT_GE(fd, 0);
  const std::string ring7 = PaddleHead(1, 7);
  SendRaw(fd, ring7.data(), ring7.size());
  receiver.join();
  ::close(fd);
  ASSERT_FALSE(received.ok());
  EXPECT_THAT(received.error(), HasSubstr("timed out after 1.5 s waiting for rank 0 to send the NCCL unique id to " + endpoint));
  EXPECT_THAT(received.error(), HasSubstr("ignored 1 other connection(s): 127.0.0.1:"));
  EXPECT_THAT(received.error(), HasSubstr("sent head {version 1, ring_id 7}, not Paddle's c_gen_nccl_id head {version 1, ring_id 0}"));
  EXPECT_LT(SecondsSince(start), 5);
}

// Issue 14: listeners bound every address, whatever the endpoint said (Paddle's c_gen_nccl_id does).
TEST(NcclIdTest, TheReceiverListensOnlyOnItsEndpointsAddress) {
  const int port = FreePort();
  const std::string endpoint = "127.0.0.1:" + std::to_string(port);
  Result<std::vector<UniqueId>> received = Error{"not run"};
  std::thread receiver([&] { received = ReceiveUniqueIds(endpoint, 1, Within(milliseconds(10000))); });
  const int fd = RawConnectWithin(port, 10);  // it listens
  ASSERT_GE(fd, 0);
  ::close(fd);
  const int other = RawConnect(port, "127.0.0.2");  // another address of this machine
  EXPECT_LT(other, 0) << "reached through 127.0.0.2";
  if (other >= 0) ::close(other);
  const UniqueId id = PatternId('b');
  ASSERT_TRUE(SendUniqueIds({endpoint}, {id}, Within(milliseconds(10000))).ok());
  receiver.join();
  ASSERT_TRUE(received.ok()) << received.error();
  EXPECT_EQ((*received)[0], id);
}

TEST(NcclIdTest, Rank0ClosingMidIdIsAnError) {
  const int port = FreePort();
  Result<std::vector<UniqueId>> received = Error{"not run"};
  std::thread receiver([&] { received = ReceiveUniqueIds("127.0.0.1:" + std::to_string(port), 1, Within(milliseconds(10000))); });
  const int fd = RawConnectWithin(port, 10);
  ASSERT_GE(fd, 0);
  SetRecvTimeout(fd, 10);
  const std::string head = PaddleHead(1, 0);
  SendRaw(fd, head.data(), head.size());
  EXPECT_EQ(RecvRaw(fd, 8), head);
  SendRaw(fd, std::string(50, 'x').data(), 50);
  ::close(fd);
  receiver.join();
  ASSERT_FALSE(received.ok());
  EXPECT_THAT(received.error(), HasSubstr("closed the connection after 50 of 128 id bytes"));
}

TEST(NcclIdTest, SilentConnectionsDoNotBlockRank0) {
  const int port = FreePort();
  const std::string endpoint = "127.0.0.1:" + std::to_string(port);
  Result<std::vector<UniqueId>> received = Error{"not run"};
  std::thread receiver([&] { received = ReceiveUniqueIds(endpoint, 1, Within(milliseconds(10000))); });
  std::vector<int> silent;
  const int first = RawConnectWithin(port, 10);
  ASSERT_GE(first, 0);
  silent.push_back(first);
  for (int i = 0; i < 40; ++i) silent.push_back(RawConnect(port));  // more than the receiver keeps
  const UniqueId id = PatternId('s');
  const auto start = Clock::now();
  Status sent = SendUniqueIds({endpoint}, {id}, Within(milliseconds(10000)));
  receiver.join();
  for (int fd : silent) ::close(fd);
  ASSERT_TRUE(sent.ok()) << sent.error();
  ASSERT_TRUE(received.ok()) << received.error();
  EXPECT_EQ((*received)[0], id);
  EXPECT_LT(SecondsSince(start), 5);
}

TEST(NcclIdTest, SenderGivesUpWhenNobodyListens) {
  const std::string endpoint = "127.0.0.1:" + std::to_string(FreePort());
  const auto start = Clock::now();
  Status sent = SendUniqueIds({endpoint}, {PatternId('n')}, Within(milliseconds(500)));
  ASSERT_FALSE(sent.ok());
  EXPECT_THAT(sent.error(), HasSubstr("rank 0 could not reach " + endpoint + " within 500 ms"));
  EXPECT_THAT(sent.error(), HasSubstr("Connection refused"));
  EXPECT_LT(SecondsSince(start), 3);
}

TEST(NcclIdTest, SenderRefusesAPeerThatDoesNotEchoTheHead) {
  // Something else owns the port: it answers with its own bytes.
  int listen_fd = -1, port = 0;
  ASSERT_NO_FATAL_FAILURE(ListenOnLoopback(64, &listen_fd, &port));
  const std::string endpoint = "127.0.0.1:" + std::to_string(port);
  std::atomic<bool> done{false};
  std::thread impostor([&] {
    SetRecvTimeout(listen_fd, 0.1);
    while (!done.load()) {
      const int fd = ::accept(listen_fd, nullptr, nullptr);
      if (fd < 0) continue;
      SendRaw(fd, "HTTP/1.1 400 Bad\r\n", 18);
      ::close(fd);
    }
  });
  const auto start = Clock::now();
  Status sent = SendUniqueIds({endpoint}, {PatternId('i')}, Within(milliseconds(800)));
  done.store(true);
  impostor.join();
  ::close(listen_fd);
  ASSERT_FALSE(sent.ok());
  EXPECT_THAT(sent.error(), HasSubstr(endpoint + " did not accept rank 0's head within 800 ms"));
  EXPECT_THAT(sent.error(), HasSubstr("the peer answered {version"));
  EXPECT_LT(SecondsSince(start), 3);
}

TEST(NcclIdTest, BadArgumentsAreErrors) {
  EXPECT_THAT(ReceiveUniqueIds("127.0.0.1", 1, Within(milliseconds(100))).error(), HasSubstr("has no port"));
  EXPECT_THAT(ReceiveUniqueIds("127.0.0.1:1", 0, Within(milliseconds(100))).error(), HasSubstr("between 1 and"));
  EXPECT_THAT(SendUniqueIds({"nohost"}, {PatternId('x')}, Within(milliseconds(100))).error(), HasSubstr("has no port"));
  EXPECT_THAT(SendUniqueIds({"127.0.0.1:1"}, {}, Within(milliseconds(100))).error(), HasSubstr("between 1 and"));
}

#if FLEET_HAVE_NCCL
TEST(NcclIdTest, ARealNcclUniqueIdCrossesTheWireWithoutAGpu) {
  ncclUniqueId nccl_id;
  ASSERT_EQ(ncclGetUniqueId(&nccl_id), ncclSuccess) << "ncclGetUniqueId needs no GPU";
  UniqueId id;
  std::memcpy(id.data(), nccl_id.internal, kUniqueIdBytes);
  const std::vector<std::string> endpoints = LoopbackEndpoints(3);
  std::vector<Result<std::vector<UniqueId>>> received(3, Error{"not run"});
  Status sent = Error{"not run"};
  RunRanks(3, [&](int r) {
    if (r == 0) {
      sent = SendUniqueIds({endpoints[1], endpoints[2]}, {id}, Within(milliseconds(10000)));
    } else {
      received[static_cast<size_t>(r)] = ReceiveUniqueIds(endpoints[static_cast<size_t>(r)], 1, Within(milliseconds(10000)));
    }
  });
  ASSERT_TRUE(sent.ok()) << sent.error();
  for (size_t r = 1; r < 3; ++r) {
    ASSERT_TRUE(received[r].ok()) << received[r].error();
    EXPECT_EQ(std::memcmp((*received[r])[0].data(), nccl_id.internal, kUniqueIdBytes), 0);
  }
}
#endif

}  // namespace
}  // namespace fleet::collective
