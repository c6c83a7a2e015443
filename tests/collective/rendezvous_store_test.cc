// The rendezvous store: set/get/wait, bounded waits, and peers that send garbage.
#include <atomic>
#include <cstring>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "fleet/collective/rendezvous_store.h"
#include "test_util.h"

namespace fleet::collective {
namespace {

using namespace fleet::collective::testing;  // NOLINT: test helpers
using std::chrono::milliseconds;
using ::testing::HasSubstr;

std::vector<char> Bytes(const std::string& s) { return std::vector<char>(s.begin(), s.end()); }

class StoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto started = RendezvousStoreServer::Start(0, milliseconds(1000));
    ASSERT_TRUE(started.ok()) << started.error();
    server_ = std::move(*started);
  }

  std::unique_ptr<RendezvousStoreClient> Client(milliseconds io_timeout = milliseconds(5000)) {
    auto client = RendezvousStoreClient::Connect("127.0.0.1", server_->port(), milliseconds(5000), io_timeout);
    EXPECT_TRUE(client.ok()) << client.error();
    return client.ok() ? std::move(*client) : nullptr;
  }

  std::unique_ptr<RendezvousStoreServer> server_;
};

TEST_F(StoreTest, SetGetAndWait) {
  auto a = Client();
  auto b = Client();
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->Set("k", Bytes("value")).ok());
  auto got = b->Get("k");
  ASSERT_TRUE(got.ok()) << got.error();
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(std::string((*got)->begin(), (*got)->end()), "value");
  auto missing = b->Get("nope");
  ASSERT_TRUE(missing.ok());
  EXPECT_FALSE(missing->has_value());
  auto waited = b->Wait({"k"}, milliseconds(100));
  ASSERT_TRUE(waited.ok()) << waited.error();
  EXPECT_TRUE(waited->empty());
  // An empty value and an overwrite.
  ASSERT_TRUE(a->Set("k", {}).ok());
  got = b->Get("k");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_TRUE((*got)->empty());
}

TEST_F(StoreTest, WaitReturnsWhenAnotherClientSetsTheKeys) {
  auto waiter = Client();
  auto setter = Client();
  ASSERT_TRUE(waiter && setter);
  std::thread t([&] {
    ASSERT_TRUE(setter->Set("a", Bytes("1")).ok());
    ASSERT_TRUE(setter->Set("b", Bytes("2")).ok());
  });
  const auto start = Clock::now();
  auto missing = waiter->Wait({"a", "b"}, milliseconds(10000));
  t.join();
  ASSERT_TRUE(missing.ok()) << missing.error();
  EXPECT_TRUE(missing->empty());
  EXPECT_LT(SecondsSince(start), 5);
}

TEST_F(StoreTest, WaitTimesOutNamingTheMissingKeys) {
  auto client = Client();
  ASSERT_TRUE(client);
  ASSERT_TRUE(client->Set("present", Bytes("x")).ok());
  const auto start = Clock::now();
  auto missing = client->Wait({"present", "absent/1", "absent/2"}, milliseconds(300));
  const double took = SecondsSince(start);
  ASSERT_TRUE(missing.ok()) << missing.error();
  EXPECT_EQ(*missing, (std::vector<std::string>{"absent/1", "absent/2"}));
  EXPECT_GE(took, 0.29);
  EXPECT_LT(took, 3);
  // The connection is still in step afterwards.
  EXPECT_TRUE(client->Set("after", Bytes("y")).ok());
}

TEST_F(StoreTest, ManyClientsMeet) {
  constexpr int kClients = 64;
  std::atomic<int> ok{0};
  RunRanks(kClients, [&](int r) {
    auto client = RendezvousStoreClient::Connect("127.0.0.1", server_->port(), milliseconds(5000), milliseconds(5000));
    if (!client.ok()) return;
    std::vector<std::string> keys;
    for (int i = 0; i < kClients; ++i) keys.push_back("rank/" + std::to_string(i));
    if (!(*client)->Set(keys[static_cast<size_t>(r)], Bytes(std::to_string(r))).ok()) return;
    auto missing = (*client)->Wait(keys, milliseconds(10000));
    if (missing.ok() && missing->empty()) ok.fetch_add(1);
  });
  EXPECT_EQ(ok.load(), kClients);
}

TEST_F(StoreTest, ClientRefusesOversizedValuesAndBadKeys) {
  auto client = Client();
  ASSERT_TRUE(client);
  EXPECT_THAT(client->Set("big", std::vector<char>(kStoreMaxValueBytes + 1)).error(), HasSubstr("over the limit"));
  EXPECT_THAT(client->Set("", Bytes("x")).error(), HasSubstr("invalid key"));
  EXPECT_THAT(client->Set(std::string("a\0b", 3), Bytes("x")).error(), HasSubstr("invalid key"));
  EXPECT_TRUE(client->Set("fine", Bytes("x")).ok());  // nothing was sent for the refused ones
}

// Sends `frame` on a raw connection and returns the server's reply (until it closes).
std::string RawExchange(int port, const std::string& frame) {
  const int fd = RawConnect(port);
  if (fd < 0) return "<connect failed>";
  SetRecvTimeout(fd, 5);
  SendRaw(fd, frame.data(), frame.size());
  std::string reply = RecvRaw(fd, 1 << 20);
  ::close(fd);
  return reply;
}

std::string Header(char op, uint32_t key_len, uint32_t value_len, const char* magic = "FLKV") {
  std::string h(magic, 4);
  h.push_back(op);
  for (uint32_t v : {key_len, value_len}) {
    for (int shift = 24; shift >= 0; shift -= 8) h.push_back(static_cast<char>((v >> shift) & 0xff));
  }
  return h;
}

TEST_F(StoreTest, MalformedFramesGetAnErrorAndTheServerKeepsServing) {
  struct Case {
    std::string name;
    std::string frame;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"http", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", "bad magic"},
      {"unknown op", Header(9, 1, 0) + "k", "unknown op 9"},
      {"huge key", Header(2, 0x7fffffff, 0), "key length 2147483647"},
      {"empty key", Header(2, 0, 0), "key length 0"},
      {"huge value", Header(1, 1, 0xffffffff) + "k", "value length 4294967295"},
      {"get with value", Header(2, 1, 3) + "kabc", "value length 3 invalid"},
      {"wait without timeout", Header(3, 1, 0) + "k", "value length 0 invalid"},
      {"nul in set key", Header(1, 3, 0) + std::string("a\0b", 3), "key contains NUL"},
      {"empty key in wait", Header(3, 3, 4) + std::string("a\0\0", 3) + std::string(4, '\0'), "empty key in WAIT"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string reply = RawExchange(server_->port(), c.frame);
    ASSERT_GE(reply.size(), 5u) << "no reply";
    EXPECT_EQ(reply[0], 3) << "status ERROR";
    EXPECT_THAT(reply.substr(5), HasSubstr("malformed request"));
    EXPECT_THAT(reply.substr(5), HasSubstr(c.message));
  }
  EXPECT_EQ(server_->malformed_frames(), cases.size());
  auto client = Client();
  ASSERT_TRUE(client);
  EXPECT_TRUE(client->Set("still", Bytes("serving")).ok());
}

TEST_F(StoreTest, TruncatedFramesAndSilentPeersDoNotBlockOthers) {
  // Half a header, half a value, and a connection that says nothing: all left hanging.
  const int half_header = RawConnect(server_->port());
  const int half_value = RawConnect(server_->port());
  const int silent = RawConnect(server_->port());
  ASSERT_GE(half_header, 0);
  ASSERT_GE(half_value, 0);
  ASSERT_GE(silent, 0);
  SendRaw(half_header, "FLKV\x01\x00", 6);
  const std::string partial = Header(1, 1, 1000) + "k" + std::string(10, 'x');
  SendRaw(half_value, partial.data(), partial.size());
  auto client = Client(milliseconds(2000));
  ASSERT_TRUE(client);
  EXPECT_TRUE(client->Set("k", Bytes("v")).ok());
  auto got = client->Get("k");
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((**got)[0], 'v');  // the half-sent SET of "k" never landed
  ::close(half_header);
  ::close(half_value);
  ::close(silent);
  EXPECT_TRUE(client->Set("k2", Bytes("v")).ok());
}

TEST_F(StoreTest, PipelinedRequestsAreAnsweredInOrder) {
  const int fd = RawConnect(server_->port());
  ASSERT_GE(fd, 0);
  SetRecvTimeout(fd, 5);
  std::string frames = Header(1, 1, 2) + "a" + "xy";  // SET a=xy
  frames += Header(2, 1, 0) + "a";                     // GET a
  frames += Header(2, 1, 0) + "b";                     // GET b (missing)
  ASSERT_TRUE(SendRaw(fd, frames.data(), frames.size()));
  const std::string reply = RecvRaw(fd, 5 + 7 + 5);
  ::close(fd);
  ASSERT_EQ(reply.size(), 17u);
  EXPECT_EQ(reply[0], 0);                    // SET ok
  EXPECT_EQ(reply.substr(5, 1), std::string(1, '\0'));  // GET ok
  EXPECT_EQ(reply.substr(10, 2), "xy");
  EXPECT_EQ(reply[12], 1);                   // GET b: not found
}

TEST(StoreClientTest, ConnectGivesUpAtTheDeadline) {
  const int port = FreePort();
  const auto start = Clock::now();
  auto client = RendezvousStoreClient::Connect("127.0.0.1", port, milliseconds(400), milliseconds(1000));
  ASSERT_FALSE(client.ok());
  EXPECT_THAT(client.error(), HasSubstr("cannot connect to 127.0.0.1:" + std::to_string(port)));
  EXPECT_THAT(client.error(), HasSubstr("Connection refused"));
  EXPECT_LT(SecondsSince(start), 3);
}

TEST(StoreClientTest, StopFailsPendingWaitsPromptly) {
  auto started = RendezvousStoreServer::Start(0, milliseconds(1000));
  ASSERT_TRUE(started.ok()) << started.error();
  auto server = std::move(*started);
  auto client = RendezvousStoreClient::Connect("127.0.0.1", server->port(), milliseconds(2000), milliseconds(2000));
  ASSERT_TRUE(client.ok()) << client.error();
  Result<std::vector<std::string>> result = Error{"not run"};
  std::thread waiter([&] { result = (*client)->Wait({"never"}, milliseconds(20000)); });
  // Whether the WAIT is parked on the server yet or still on its way, stopping must fail it at once
  // rather than after its 20 s.
  server->Stop();
  const auto start = Clock::now();
  waiter.join();
  EXPECT_LT(SecondsSince(start), 5);
  ASSERT_FALSE(result.ok());
  EXPECT_THAT(result.error(), HasSubstr("rendezvous store at 127.0.0.1:"));
}

TEST(StoreServerTest, PortInUseIsAnErrorAfterTheBindTimeout) {
  auto first = RendezvousStoreServer::Start(0, milliseconds(1000));
  ASSERT_TRUE(first.ok()) << first.error();
  const auto start = Clock::now();
  auto second = RendezvousStoreServer::Start((*first)->port(), milliseconds(300));
  ASSERT_FALSE(second.ok());
  EXPECT_THAT(second.error(), HasSubstr("Address already in use"));
  EXPECT_LT(SecondsSince(start), 3);
}

}  // namespace
}  // namespace fleet::collective
