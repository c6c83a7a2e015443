// Dense connections (runtime/ps/src/bulk.h) on the server's one port, seen from raw sockets: the
// preface, then gRPC-style frames of DenseRequest / DenseAnswer, built and read here with plain
// protobuf as an independent check of the wire format. gRPC shares the port; bad frames get an
// answer with their code and a closed connection, bad requests an answer and the connection goes
// on; broken connections and shutdown leave nothing behind. And PsClient's side of it.
#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "fleet_ps.grpc.pb.h"
#include "ps_test_util.h"
#include "wire_test_util.h"

namespace fleet::ps {
namespace {

using testing::Clock;
using testing::Cluster;
using testing::Connect;
using testing::InfoWorks;
using testing::Options;
using testing::PollUntil;
using testing::StartCluster;

// Written out here rather than taken from bulk.h: the test checks the wire, not the constant.
const std::string kPreface = "FLEET-PS-DENSE/1";
constexpr size_t kMaxMessageBytes = 4096;
constexpr size_t kFrameLimit = kMaxMessageBytes + (64u << 10);  // what the server reads at most
constexpr uint32_t kTableSize = 100;

uint32_t CodeOf(grpc::StatusCode code) { return static_cast<uint32_t>(code); }

// A frame as gRPC frames a message: a flag byte, the length as a big-endian uint32, the bytes.
std::string Header(uint32_t length, uint8_t flag = 0) {
  std::string h(5, '\0');
  h[0] = static_cast<char>(flag);
  for (int i = 0; i < 4; ++i) h[static_cast<size_t>(1 + i)] = static_cast<char>((length >> (8 * (3 - i))) & 0xff);
  return h;
}
std::string Frame(const std::string& body, uint8_t flag = 0) {
  return Header(static_cast<uint32_t>(body.size()), flag) + body;
}

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}
std::vector<float> FloatsOf(const std::string& bytes) {
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

std::string Request(wire::DenseRequest::Op op, uint32_t table, uint64_t begin, uint64_t end,
                    const std::vector<float>& values = {}, uint32_t trainer = 0) {
  wire::DenseRequest r;
  r.set_op(op);
  r.set_table_id(table);
  r.set_begin(begin);
  r.set_end(end);
  r.set_values(Floats(values));
  r.set_trainer_id(trainer);
  return r.SerializeAsString();
}
std::string Pull(uint64_t begin, uint64_t end, uint32_t table = 0) {
  return Request(wire::DenseRequest::PULL, table, begin, end);
}

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

// A raw TCP connection to a server, with a receive timeout so that a test fails instead of hanging.
class Socket {
 public:
  // `from`: the local address to connect from (another peer, as the server sees it).
  explicit Socket(const std::string& endpoint, const char* from = nullptr) {
    const auto colon = endpoint.rfind(':');
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(std::stoi(endpoint.substr(colon + 1))));
    ::inet_pton(AF_INET, endpoint.substr(0, colon).c_str(), &addr.sin_addr);
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (from != nullptr) {
      sockaddr_in local{};
      local.sin_family = AF_INET;
      ::inet_pton(AF_INET, from, &local.sin_addr);
      if (::bind(fd_, reinterpret_cast<sockaddr*>(&local), sizeof(local)) != 0) ADD_FAILURE() << "bind " << from;
    }
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ADD_FAILURE() << "cannot connect to " << endpoint << ": " << std::strerror(errno);
      ::close(fd_);
      fd_ = -1;
      return;
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    timeval tv{5, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  }
  ~Socket() { Close(); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;

  bool ok() const { return fd_ >= 0; }
  void Close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Closes with a reset (RST) instead of an orderly end.
  void Reset() {
    linger l{1, 0};
    ::setsockopt(fd_, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    Close();
  }

  bool Send(const std::string& bytes) {
    size_t sent = 0;
    while (sent < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return false;
      sent += static_cast<size_t>(n);
    }
    return true;
  }
  // A few bytes at a time, with a pause between them: the server sees the pieces one by one.
  bool SendInPieces(const std::string& bytes, size_t piece) {
    for (size_t at = 0; at < bytes.size(); at += piece) {
      if (!Send(bytes.substr(at, piece))) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return true;
  }

  bool ReadAll(char* p, size_t n) {
    while (n > 0) {
      const ssize_t r = ::recv(fd_, p, n, 0);
      if (r <= 0) return false;
      p += r;
      n -= static_cast<size_t>(r);
    }
    return true;
  }

  // One answer frame, parsed by protobuf.
  ::testing::AssertionResult Answer(wire::DenseAnswer* answer) {
    char header[5];
    if (!ReadAll(header, 5)) return ::testing::AssertionFailure() << "no answer header: " << std::strerror(errno);
    if (header[0] != 0) return ::testing::AssertionFailure() << "answer flag " << int{header[0]};
    uint32_t length = 0;
    for (int i = 1; i < 5; ++i) length = (length << 8) | static_cast<uint8_t>(header[i]);
    std::string body(length, '\0');
    if (!ReadAll(body.data(), length)) {
      return ::testing::AssertionFailure() << "an answer of " << length << " bytes cut short";
    }
    if (!answer->ParseFromString(body)) return ::testing::AssertionFailure() << "the answer does not parse";
    return ::testing::AssertionSuccess();
  }

  // The server closed the connection: an orderly end, with nothing more sent.
  ::testing::AssertionResult Closed() {
    char c;
    const ssize_t n = ::recv(fd_, &c, 1, 0);
    if (n == 0) return ::testing::AssertionSuccess();
    if (n > 0) return ::testing::AssertionFailure() << "more bytes after the answer";
    return ::testing::AssertionFailure() << "recv: " << std::strerror(errno);
  }

  // The server has closed the connection (or does within `ms`), sending nothing.
  bool ClosedWithin(int ms) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, ms) <= 0) return false;
    char c;
    const ssize_t n = ::recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno == ECONNRESET);
  }

  // The server ends the connection, in order or with a reset (whatever it sent first goes to *got).
  ::testing::AssertionResult Ends(std::string* got) {
    char buf[512];
    for (;;) {
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return ::testing::AssertionSuccess();
      if (n < 0) return ::testing::AssertionFailure() << "recv: " << std::strerror(errno);
      got->append(buf, static_cast<size_t>(n));
    }
  }

 private:
  int fd_ = -1;
};


class PsDenseConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = StartCluster(1, 2, "", [](ServerOptions& o) {
      o.max_message_bytes = kMaxMessageBytes;
      o.tables = {TableConfig::Dense(0, kTableSize, OptimizerConfig::Sgd(1.0f)),
                  TableConfig::Sparse(1, 4, OptimizerConfig::Sgd(1.0f))};
    });
    ASSERT_EQ(cluster_.endpoints.size(), 1u);
    endpoint_ = cluster_.endpoints[0];
    server_ = cluster_.servers[0].get();
    client_ = Connect(Options(cluster_.endpoints, 0, 2));
    ASSERT_TRUE(client_);
    ASSERT_OK(client_->CreateTable(TableConfig::Dense(0, kTableSize, OptimizerConfig::Sgd(1.0f))));
    init_.resize(kTableSize);
    for (size_t i = 0; i < init_.size(); ++i) init_[i] = 0.5f * static_cast<float>(i);
    ASSERT_OK(client_->InitDense(0, init_.data(), init_.size()));
  }

  std::vector<float> Init(size_t begin, size_t end) const {
    return {init_.begin() + static_cast<ptrdiff_t>(begin), init_.begin() + static_cast<ptrdiff_t>(end)};
  }

  // A good pull on `s` answers the initial values.
  void ExpectPullServed(Socket& s, size_t begin, size_t end) {
    ASSERT_TRUE(s.Send(Frame(Pull(begin, end))));
    wire::DenseAnswer answer;
    ASSERT_TRUE(s.Answer(&answer));
    EXPECT_EQ(answer.code(), 0u) << answer.error();
    EXPECT_EQ(FloatsOf(answer.values()), Init(begin, end));
  }

  // The server still serves new connections of every kind: gRPC, PsClient's, a raw dense one.
  void ExpectServing() {
    EXPECT_TRUE(InfoWorks(endpoint_, 2));
    auto fresh = Connect(Options(cluster_.endpoints, 1, 2));
    ASSERT_TRUE(fresh);
    ASSERT_OK(fresh->CreateTable(TableConfig::Dense(0, kTableSize, OptimizerConfig::Sgd(1.0f))));
    std::vector<float> out(kTableSize);
    ASSERT_OK(fresh->PullDense(0, out.data(), out.size()));
    EXPECT_EQ(out, init_);
    ASSERT_OK(client_->PullDense(0, out.data(), out.size()));  // the pooled connection too
    EXPECT_EQ(out, init_);
    Socket s(endpoint_);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(s.Send(kPreface));
    ExpectPullServed(s, 7, 9);
  }

  Cluster cluster_;
  std::string endpoint_;
  PsServer* server_ = nullptr;
  std::unique_ptr<PsClient> client_;
  std::vector<float> init_;
};

TEST_F(PsDenseConnectionTest, ADenseConnectionAndGrpcShareThePort) {
  Socket s(endpoint_);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s.Send(kPreface + Frame(Pull(3, 10))));
  wire::DenseAnswer answer;
  ASSERT_TRUE(s.Answer(&answer));
  EXPECT_EQ(answer.code(), 0u) << answer.error();
  EXPECT_TRUE(answer.error().empty());
  EXPECT_EQ(FloatsOf(answer.values()), Init(3, 10));
  // The connection is counted while it is open, and gRPC answers on the same port meanwhile.
  EXPECT_EQ(server_->open_dense_streams(), 1u);
  EXPECT_TRUE(InfoWorks(endpoint_, 2));
  // The same connection goes on: a push and pull of [0, 2), then a push alone (an empty answer).
  ASSERT_TRUE(s.Send(Frame(Request(wire::DenseRequest::PUSH_PULL, 0, 0, 0, {1.0f, 2.0f}, 1))));
  ASSERT_TRUE(s.Answer(&answer));
  EXPECT_EQ(answer.code(), 0u) << answer.error();
  EXPECT_EQ(FloatsOf(answer.values()), (std::vector<float>{-1.0f, -1.5f}));
  ASSERT_TRUE(s.Send(Frame(Request(wire::DenseRequest::PUSH, 0, 99, 0, {0.5f}, 0))));
  ASSERT_TRUE(s.Answer(&answer));
  EXPECT_EQ(answer.code(), 0u) << answer.error();
  EXPECT_TRUE(answer.values().empty());
  std::vector<float> out(kTableSize);
  ASSERT_OK(client_->PullDense(0, out.data(), out.size()));
  EXPECT_EQ(out[0], -1.0f);
  EXPECT_EQ(out[1], -1.5f);
  EXPECT_EQ(out[99], init_[99] - 0.5f);
  s.Close();
  EXPECT_TRUE(PollUntil([&] { return server_->open_dense_streams() == 1; }, std::chrono::seconds(2)))
      << server_->open_dense_streams();  // the client's pooled connection is the one left
}

TEST_F(PsDenseConnectionTest, ThePrefaceAndFramesMayArriveInPiecesOrTogether) {
  Socket s(endpoint_);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s.SendInPieces(kPreface + Frame(Pull(20, 30)), 3));
  wire::DenseAnswer answer;
  ASSERT_TRUE(s.Answer(&answer));
  EXPECT_EQ(answer.code(), 0u) << answer.error();
  EXPECT_EQ(FloatsOf(answer.values()), Init(20, 30));
  // A frame split inside its header, and one byte at a time.
  ASSERT_TRUE(s.SendInPieces(Frame(Pull(0, 4)), 1));
  ASSERT_TRUE(s.Answer(&answer));
  EXPECT_EQ(FloatsOf(answer.values()), Init(0, 4));
  // Three requests in one write: three answers, in order.
  ASSERT_TRUE(s.Send(Frame(Pull(1, 2)) + Frame(Pull(50, 55)) + Frame(Pull(98, 100))));
  for (auto [begin, end] : {std::pair{1, 2}, std::pair{50, 55}, std::pair{98, 100}}) {
    ASSERT_TRUE(s.Answer(&answer));
    EXPECT_EQ(answer.code(), 0u) << answer.error();
    EXPECT_EQ(FloatsOf(answer.values()), Init(static_cast<size_t>(begin), static_cast<size_t>(end))) << begin;
  }
  // A preface that pauses after its first byte.
  Socket slow(endpoint_);
  ASSERT_TRUE(slow.ok());
  ASSERT_TRUE(slow.Send(kPreface.substr(0, 1)));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(slow.Send(kPreface.substr(1)));
  ExpectPullServed(slow, 40, 41);
}

TEST_F(PsDenseConnectionTest, ARequestWithBadFieldsGetsItsCodeAndTheConnectionGoesOn) {
  using grpc::StatusCode;
  using Op = wire::DenseRequest;
  // Fields a protobuf client cannot set: a table id and a trainer id past uint32.
  std::string big_table, big_trainer;
  PutVarint(&big_table, (1 << 3) | 0);
  PutVarint(&big_table, uint64_t{1} << 32);
  PutVarint(&big_table, (5 << 3) | 0);
  PutVarint(&big_table, Op::PULL);
  PutVarint(&big_table, (6 << 3) | 0);
  PutVarint(&big_table, 1);
  PutVarint(&big_trainer, (4 << 3) | 0);
  PutVarint(&big_trainer, uint64_t{1} << 32);
  PutVarint(&big_trainer, (5 << 3) | 0);
  PutVarint(&big_trainer, Op::PUSH);
  struct Case {
    std::string request;
    StatusCode code;
    const char* what;
  };
  const Case cases[] = {
      {Pull(0, 4, 9), StatusCode::NOT_FOUND, "no table 9"},
      {big_table, StatusCode::NOT_FOUND, "table 2^32"},
      {Pull(0, 4, 1), StatusCode::INVALID_ARGUMENT, "a pull of a sparse table"},
      {Pull(90, 110), StatusCode::OUT_OF_RANGE, "a pull past the end"},
      {Pull(~uint64_t{0} - 1, ~uint64_t{0}), StatusCode::OUT_OF_RANGE, "a pull at 2^64-2"},
      {Pull(10, 5), StatusCode::INVALID_ARGUMENT, "end before begin"},
      {Pull(0, 2000), StatusCode::RESOURCE_EXHAUSTED, "an answer over the 4 KiB limit"},
      {Request(Op::PUSH, 0, 98, 0, {1, 1, 1}), StatusCode::OUT_OF_RANGE, "a push past the end"},
      {Request(Op::PUSH, 0, 0, 0, {1}, 2), StatusCode::INVALID_ARGUMENT, "trainer 2 of 2"},
      {big_trainer, StatusCode::INVALID_ARGUMENT, "trainer 2^32"},
      {Request(static_cast<Op::Op>(9), 0, 0, 1), StatusCode::INVALID_ARGUMENT, "op 9"},
      {Request(Op::OP_UNSPECIFIED, 0, 0, 1), StatusCode::INVALID_ARGUMENT, "no op"},
      {"", StatusCode::INVALID_ARGUMENT, "an empty request (no op)"},
  };
  Socket s(endpoint_);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s.Send(kPreface));
  for (const Case& c : cases) {
    ASSERT_TRUE(s.Send(Frame(c.request))) << c.what;
    wire::DenseAnswer answer;
    ASSERT_TRUE(s.Answer(&answer)) << c.what;
    EXPECT_EQ(answer.code(), CodeOf(c.code)) << c.what << ": " << answer.error();
    EXPECT_FALSE(answer.error().empty()) << c.what;
    EXPECT_TRUE(answer.values().empty()) << c.what;
  }
  // A push of 3 bytes (not whole floats), written by hand.
  wire::DenseRequest odd;
  odd.set_op(Op::PUSH);
  odd.set_values("abc");
  ASSERT_TRUE(s.Send(Frame(odd.SerializeAsString())));
  wire::DenseAnswer answer;
  ASSERT_TRUE(s.Answer(&answer));
  EXPECT_EQ(answer.code(), CodeOf(StatusCode::INVALID_ARGUMENT)) << answer.error();
  // Nothing was applied, and the same connection serves a good request.
  ExpectPullServed(s, 0, kTableSize);
  EXPECT_EQ(server_->open_dense_streams(), 1u);
}

TEST_F(PsDenseConnectionTest, AFrameWithANonzeroFirstByteGetsAnErrorAndTheConnectionCloses) {
  for (const uint8_t flag : {uint8_t{1}, uint8_t{0x80}}) {
    Socket s(endpoint_);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(s.Send(kPreface));
    ExpectPullServed(s, 0, 1);  // served until then
    ASSERT_TRUE(s.Send(Header(0, flag)));
    wire::DenseAnswer answer;
    ASSERT_TRUE(s.Answer(&answer)) << int{flag};
    EXPECT_EQ(answer.code(), CodeOf(grpc::StatusCode::INVALID_ARGUMENT)) << answer.error();
    EXPECT_NE(answer.error().find("zero byte"), std::string::npos) << answer.error();
    EXPECT_TRUE(s.Closed()) << int{flag};
  }
  ExpectServing();
}

TEST_F(PsDenseConnectionTest, AFrameOverTheLimitGetsAnErrorAndTheConnectionCloses) {
  Socket s(endpoint_);
  ASSERT_TRUE(s.ok());
  ASSERT_TRUE(s.Send(kPreface));
  // A frame of exactly the limit is read: its request is answered (past the table's end) and the
  // connection goes on.
  wire::DenseRequest push;
  push.set_op(wire::DenseRequest::PUSH);
  push.set_begin(1);
  push.set_values(std::string(kFrameLimit - 8, '\0'));
  const std::string at_limit = push.SerializeAsString();
  ASSERT_EQ(at_limit.size(), kFrameLimit);
  ASSERT_TRUE(s.Send(Frame(at_limit)));
  wire::DenseAnswer answer;
  ASSERT_TRUE(s.Answer(&answer));
  EXPECT_EQ(answer.code(), CodeOf(grpc::StatusCode::OUT_OF_RANGE)) << answer.error();
  ExpectPullServed(s, 0, 2);
  // One byte more is refused from its header alone, and the connection closes.
  ASSERT_TRUE(s.Send(Header(static_cast<uint32_t>(kFrameLimit + 1))));
  ASSERT_TRUE(s.Answer(&answer));
  EXPECT_EQ(answer.code(), CodeOf(grpc::StatusCode::RESOURCE_EXHAUSTED)) << answer.error();
  EXPECT_NE(answer.error().find(std::to_string(kFrameLimit + 1) + " bytes"), std::string::npos) << answer.error();
  EXPECT_TRUE(s.Closed());
  // 4 GiB: refused the same way, nothing allocated for it.
  Socket huge(endpoint_);
  ASSERT_TRUE(huge.ok());
  ASSERT_TRUE(huge.Send(kPreface + Header(0xffffffffu)));
  ASSERT_TRUE(huge.Answer(&answer));
  EXPECT_EQ(answer.code(), CodeOf(grpc::StatusCode::RESOURCE_EXHAUSTED)) << answer.error();
  EXPECT_TRUE(huge.Closed());
  ExpectServing();
}

TEST_F(PsDenseConnectionTest, AnUndecodableRequestGetsAnErrorAndTheConnectionCloses) {
  const std::string bodies[] = {
      std::string("\x08\x80", 2),                  // a varint cut short
      std::string("\x0a\xff\xff\xff\x0f\x00", 6),  // a field longer than the message
      std::string("\x2f\x00", 2),                  // wire type 7
      std::string("\x1a\x08\x00\x00\x00\x00", 6),  // the values field cut short
  };
  for (const std::string& body : bodies) {
    wire::DenseRequest check;
    ASSERT_FALSE(check.ParseFromString(body)) << "protobuf decodes it too";
    Socket s(endpoint_);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(s.Send(kPreface + Frame(Pull(5, 6)) + Frame(body)));
    wire::DenseAnswer answer;
    ASSERT_TRUE(s.Answer(&answer));
    EXPECT_EQ(FloatsOf(answer.values()), Init(5, 6));
    ASSERT_TRUE(s.Answer(&answer));
    EXPECT_EQ(answer.code(), CodeOf(grpc::StatusCode::INVALID_ARGUMENT)) << answer.error();
    EXPECT_NE(answer.error().find("malformed"), std::string::npos) << answer.error();
    EXPECT_TRUE(s.Closed());
  }
  EXPECT_TRUE(PollUntil([&] { return server_->open_dense_streams() == 0; }, std::chrono::seconds(2)))
      << server_->open_dense_streams();
  ExpectServing();
}

TEST_F(PsDenseConnectionTest, ConnectionsThatEndMidFrameOrMidPrefaceAreDropped) {
  const size_t base = server_->open_dense_streams();
  ASSERT_EQ(base, 0u);
  {
    // Inside a frame's body, and inside a frame's header.
    Socket body(endpoint_), header(endpoint_), reset(endpoint_);
    ASSERT_TRUE(body.ok() && header.ok() && reset.ok());
    ASSERT_TRUE(body.Send(kPreface + Header(100) + std::string(10, '\x08')));
    ASSERT_TRUE(header.Send(kPreface + Header(100).substr(0, 3)));
    ASSERT_TRUE(reset.Send(kPreface + Frame(Pull(0, 1)) + Header(40) + "\x08"));
    wire::DenseAnswer answer;
    ASSERT_TRUE(reset.Answer(&answer));
    ASSERT_TRUE(PollUntil([&] { return server_->open_dense_streams() == base + 3; }, std::chrono::seconds(2)))
        << server_->open_dense_streams();
    reset.Reset();
  }
  EXPECT_TRUE(PollUntil([&] { return server_->open_dense_streams() == base; }, std::chrono::seconds(2)))
      << server_->open_dense_streams();
  {
    // Part of the preface: not a dense connection yet, so not counted; then it ends.
    Socket part(endpoint_), other(endpoint_);
    ASSERT_TRUE(part.ok() && other.ok());
    ASSERT_TRUE(part.Send(kPreface.substr(0, 7)));
    ASSERT_TRUE(other.Send(kPreface.substr(0, 15)));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(server_->open_dense_streams(), base);
    other.Reset();
  }
  // A preface that turns into something else is neither dense nor gRPC's: it is closed (with a reset,
  // as its bytes are left unread).
  Socket wrong(endpoint_);
  ASSERT_TRUE(wrong.ok());
  ASSERT_TRUE(wrong.Send("FLEET-PS-DENSE/2" + Frame(Pull(0, 1))));
  std::string got;
  EXPECT_TRUE(wrong.Ends(&got));
  EXPECT_NE(got.substr(0, 6), Header(9) + "\x0a") << "a dense answer";
  EXPECT_EQ(server_->open_dense_streams(), base);
  ExpectServing();
  EXPECT_TRUE(PollUntil([&] { return server_->open_dense_streams() == 1; }, std::chrono::seconds(2)))
      << server_->open_dense_streams();  // client_'s pooled connection
}

TEST(PsDenseConnectionShutdownTest, ShutdownWithADenseConnectionOpenAndASyncPushWaitingReturnsPromptly) {
  Cluster c = StartCluster(1, 2, "", [](ServerOptions& o) {
    o.sync_timeout = std::chrono::seconds(30);
    o.tables = {TableConfig::Dense(0, 4, OptimizerConfig::Sgd(1.0f), Mode::kSync)};
  });
  ASSERT_EQ(c.servers.size(), 1u);
  auto client = Connect(Options(c.endpoints, 0, 2));
  ASSERT_TRUE(client);
  ASSERT_OK(client->CreateTable(TableConfig::Dense(0, 4, OptimizerConfig::Sgd(1.0f), Mode::kSync)));
  Socket idle(c.endpoints[0]);
  ASSERT_TRUE(idle.ok());
  ASSERT_TRUE(idle.Send(kPreface + Frame(Pull(0, 4))));
  wire::DenseAnswer answer;
  ASSERT_TRUE(idle.Answer(&answer));
  EXPECT_EQ(answer.code(), 0u) << answer.error();
  // Trainer 0's push waits for trainer 1, who never comes.
  std::future<Status> push = std::async(std::launch::async, [&] {
    const std::vector<float> g(4, 1.0f);
    return client->PushDense(0, g.data(), g.size());
  });
  ASSERT_TRUE(PollUntil([&] { return c.servers[0]->open_dense_streams() == 2; }, std::chrono::seconds(2)));
  ASSERT_EQ(push.wait_for(std::chrono::milliseconds(100)), std::future_status::timeout) << push.get().ToString();
  const auto start = Clock::now();
  c.servers[0]->Shutdown();
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));  // the step would wait 30 s
  ASSERT_EQ(push.wait_for(std::chrono::seconds(1)), std::future_status::ready);
  const Status s = push.get();
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("pserver " + c.endpoints[0] + " (server 0)"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("shutting down"), std::string::npos) << s.message();  // the answer, not a closed socket
  EXPECT_TRUE(idle.Closed());
  EXPECT_EQ(c.servers[0]->open_dense_streams(), 0u);
}

TEST(PsDenseConnectionClientTest, AServerThatIsGoneIsNamedAndTheNextCallAfterItsRestartReachesIt) {
  const TableConfig t = TableConfig::Dense(0, 10, OptimizerConfig::Sgd(1.0f));
  Cluster c = StartCluster(2, 1, "", [&](ServerOptions& o) { o.tables = {t}; });
  ASSERT_EQ(c.servers.size(), 2u);
  auto client = Connect(Options(c.endpoints, 0, 1));
  ASSERT_TRUE(client);
  ASSERT_OK(client->CreateTable(t));
  std::vector<float> w(10), g(10, 1.0f);
  ASSERT_OK(client->PushPullDense(0, g.data(), w.data(), w.size()));
  const int port = c.servers[1]->port();
  c.servers[1].reset();
  for (int i = 0; i < 2; ++i) {  // a broken connection, then a refused one
    Status s = client->PullDense(0, w.data(), w.size());
    EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
    EXPECT_NE(s.message().find("pserver " + c.endpoints[1] + " (server 1)"), std::string::npos) << s.message();
  }
  ServerOptions o;
  o.bind_address = "127.0.0.1:" + std::to_string(port);
  o.server_index = 1;
  o.server_count = 2;
  o.tables = {t};
  std::unique_ptr<PsServer> again;
  ASSERT_OK(PsServer::Start(o, &again));
  // No retry: the failed connection was dropped, and the next call opens a new one.
  ASSERT_OK(client->PullDense(0, w.data(), w.size()));
  for (size_t i = 0; i < 10; ++i) EXPECT_EQ(w[i], i < 5 ? -1.0f : 0.0f) << i;
  EXPECT_EQ(again->open_dense_streams(), 1u);
}

TEST(PsDenseConnectionClientTest, KeptConnectionsToAServerThatRestartedAreDroppedBeforeTheNextCall) {
  const TableConfig t = TableConfig::Dense(0, 64, OptimizerConfig::Sgd(1.0f));
  Cluster c = StartCluster(1, 1, "", [&](ServerOptions& o) { o.tables = {t}; });
  ASSERT_EQ(c.servers.size(), 1u);
  auto o = Options(c.endpoints, 0, 1);
  o.chunk_bytes = 16;  // 16 chunks: every one of the client's 4 connections to the server is used
  auto client = Connect(o);
  ASSERT_TRUE(client);
  ASSERT_OK(client->CreateTable(t));
  std::vector<float> w(64), g(64, 1.0f);
  ASSERT_OK(client->PushPullDense(0, g.data(), w.data(), w.size()));
  ASSERT_EQ(c.servers[0]->open_dense_streams(), 4u);
  const int port = c.servers[0]->port();
  c.servers[0].reset();  // closes the 4 kept connections while they are idle
  ServerOptions again_options;
  again_options.bind_address = "127.0.0.1:" + std::to_string(port);
  again_options.tables = {t};
  std::unique_ptr<PsServer> again;
  ASSERT_OK(PsServer::Start(again_options, &again));
  // A pause between calls, as a restart takes: the next call sees the closed connections before it
  // sends on them, and succeeds on new ones.
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  ASSERT_OK(client->PushPullDense(0, g.data(), w.data(), w.size()));
  for (float v : w) ASSERT_EQ(v, -1.0f);  // the new server's table, pushed once
  EXPECT_EQ(again->open_dense_streams(), 4u);
}

TEST(PsDenseConnectionClientTest, DenseCallsUseAtMostFourConnectionsPerServerAndKeepThemForTheNextCall) {
  Cluster c = StartCluster(2, 1);
  ASSERT_EQ(c.servers.size(), 2u);
  auto o = Options(c.endpoints, 0, 1);
  o.chunk_bytes = 16;  // 4 values a chunk: 13 chunks per server
  auto client = Connect(o);
  ASSERT_TRUE(client);
  ASSERT_OK(client->CreateTable(TableConfig::Dense(0, 103, OptimizerConfig::Sgd(1.0f))));
  std::vector<float> g(103, 1.0f), w(103);
  for (int round = 0; round < 3; ++round) {
    ASSERT_OK(client->PushPullDense(0, g.data(), w.data(), w.size()));
    for (float v : w) ASSERT_EQ(v, -static_cast<float>(round + 1));
    for (auto& s : c.servers) EXPECT_EQ(s->open_dense_streams(), 4u) << "round " << round;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // still open between calls
  for (auto& s : c.servers) EXPECT_EQ(s->open_dense_streams(), 4u);
  ASSERT_OK(client->StopWorker());  // closes the pooled connections
  for (auto& s : c.servers) {
    EXPECT_TRUE(PollUntil([&] { return s->open_dense_streams() == 0; }, std::chrono::seconds(2)))
        << s->open_dense_streams();
  }
}

// A server whose limit is below the client's (fleet-ps-server --max_message_bytes, say): a chunk the
// client sends whole is over it. The server answers RESOURCE_EXHAUSTED and closes the connection.
class PsDenseConnectionLimitTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cluster_ = StartCluster(1, 1, "", [](ServerOptions& o) { o.max_message_bytes = kMaxMessageBytes; });
    ASSERT_EQ(cluster_.servers.size(), 1u);
    client_ = Connect(Options(cluster_.endpoints, 0, 1));  // 4 MiB chunks, a 64 MiB limit
    ASSERT_TRUE(client_);
    ASSERT_OK(client_->CreateTable(TableConfig::Dense(1, 8, OptimizerConfig::Sgd(1.0f))));
  }

  // Pushes `n` values to a table of that size: one chunk of n * 4 bytes.
  Status PushOneChunk(uint32_t table, size_t n) {
    if (Status s = client_->CreateTable(TableConfig::Dense(table, n, OptimizerConfig::Sgd(1.0f))); !s.ok()) return s;
    const std::vector<float> g(n, 1.0f);
    return client_->PushDense(table, g.data(), g.size());
  }

  Cluster cluster_;
  std::unique_ptr<PsClient> client_;
};

TEST_F(PsDenseConnectionLimitTest, ARequestOverTheServersLimitGetsTheServersAnswer) {
  // 4 MB: more than the sockets hold, so the server answers while the client is still sending.
  const Status s = PushOneChunk(0, 1000000);
  EXPECT_EQ(s.code(), Code::kResourceExhausted) << s.ToString();
  EXPECT_NE(s.message().find("pserver " + cluster_.endpoints[0] + " (server 0): a dense request of"), std::string::npos)
      << s.message();
}

TEST_F(PsDenseConnectionLimitTest, AConnectionTheServerClosedAfterItsAnswerIsNotUsedAgain) {
  // Just over the limit (72 KiB): sent whole before the server answers.
  const Status s = PushOneChunk(0, kFrameLimit / sizeof(float) + 1024);
  EXPECT_EQ(s.code(), Code::kResourceExhausted) << s.ToString();
  // The next call (one chunk, on the same server) gets a working connection.
  std::vector<float> w(8, 1.0f);
  const Status next = client_->PullDense(1, w.data(), w.size());
  EXPECT_TRUE(next.ok()) << "the call after the refused one: " << next.ToString();
  ASSERT_OK(client_->PullDense(1, w.data(), w.size()));
  EXPECT_EQ(w, std::vector<float>(8, 0.0f));
}

// Issue 14: 4,200 dense connections that sent the preface and then nothing took 4,096 threads, and
// trainers got RESOURCE_EXHAUSTED for up to 15 minutes. Here with small limits (ServerOptions).
class PsDenseConnectionCrowdTest : public ::testing::Test {
 protected:
  void Start(size_t total, size_t per_peer, std::chrono::milliseconds reclaim = std::chrono::seconds(30)) {
    cluster_ = StartCluster(1, 1, "", [&](ServerOptions& o) {
      o.max_dense_connections = total;
      o.max_dense_connections_per_peer = per_peer;
      o.dense_reclaim_idle = reclaim;
      o.tables = {kTable};
    });
    ASSERT_EQ(cluster_.servers.size(), 1u);
    endpoint_ = cluster_.endpoints[0];
    server_ = cluster_.servers[0].get();
    trainer_ = Connect(Options(cluster_.endpoints, 0, 1));
    ASSERT_TRUE(trainer_);
    ASSERT_OK(trainer_->CreateTable(kTable));
  }

  Status TrainerPull() {
    std::vector<float> out(kTableSize);
    return trainer_->PullDense(0, out.data(), out.size());
  }

  // `n` connections from `from` that send the preface and part of a frame header, then nothing: a
  // thread each, waiting for the rest.
  std::vector<std::unique_ptr<Socket>> Stuck(size_t n, const char* from = nullptr) {
    std::vector<std::unique_ptr<Socket>> stuck;
    for (size_t i = 0; i < n; ++i) {
      stuck.push_back(std::make_unique<Socket>(endpoint_, from));
      EXPECT_TRUE(stuck.back()->Send(kPreface + Header(100).substr(0, 2)));
    }
    return stuck;
  }

  // A connection from `from` with one pull answered, kept open and idle.
  std::unique_ptr<Socket> Answered(const char* from = nullptr) {
    auto s = std::make_unique<Socket>(endpoint_, from);
    EXPECT_TRUE(s->Send(kPreface + Frame(Pull(0, 2))));
    wire::DenseAnswer answer;
    EXPECT_TRUE(s->Answer(&answer));
    EXPECT_EQ(answer.code(), 0u) << answer.error();
    return s;
  }

  bool OpenBecomes(size_t n) {
    return PollUntil([&] { return server_->open_dense_streams() == n; }, std::chrono::seconds(3));
  }

  static size_t ClosedCount(const std::vector<std::unique_ptr<Socket>>& sockets) {
    size_t closed = 0;
    for (const auto& s : sockets) closed += s->ClosedWithin(0) ? 1 : 0;
    return closed;
  }

  const TableConfig kTable = TableConfig::Dense(0, kTableSize, OptimizerConfig::Sgd(1.0f));
  Cluster cluster_;
  std::string endpoint_;
  PsServer* server_ = nullptr;
  std::unique_ptr<PsClient> trainer_;
};

TEST_F(PsDenseConnectionCrowdTest, ConnectionsThatSayOnlyThePrefaceTakeNoThreadAndLockNoTrainerOut) {
  Start(16, 1024);
  std::vector<std::unique_ptr<Socket>> silent;
  for (int i = 0; i < 40; ++i) {
    silent.push_back(std::make_unique<Socket>(endpoint_));
    ASSERT_TRUE(silent.back()->Send(kPreface));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_EQ(server_->open_dense_streams(), 0u) << "a thread each";
  ASSERT_OK(TrainerPull());
  // A preface whose request follows later is served once it does.
  ASSERT_TRUE(silent[0]->Send(Frame(Pull(0, 3))));
  wire::DenseAnswer answer;
  ASSERT_TRUE(silent[0]->Answer(&answer));
  EXPECT_EQ(answer.code(), 0u) << answer.error();
}

TEST_F(PsDenseConnectionCrowdTest, ConnectionsStuckInAHeaderMakeWayForTrainersButTrainersDoNotForThem) {
  Start(8, 1024);
  auto stuck = Stuck(8);
  ASSERT_TRUE(OpenBecomes(8)) << server_->open_dense_streams();
  ASSERT_OK(TrainerPull());  // takes the place of the oldest stuck one
  EXPECT_TRUE(stuck[0]->ClosedWithin(2000));
  EXPECT_EQ(ClosedCount(stuck), 1u);
  ASSERT_TRUE(OpenBecomes(8)) << server_->open_dense_streams();
  // More of them take each other's places, never the trainer's: its kept connection still works
  // (used again at once, it is not checked first: had it been closed, the call would fail).
  auto more = Stuck(10);
  EXPECT_TRUE(PollUntil([&] { return ClosedCount(stuck) + ClosedCount(more) == 11; }, std::chrono::seconds(3)))
      << ClosedCount(stuck) + ClosedCount(more);
  EXPECT_TRUE(OpenBecomes(8)) << server_->open_dense_streams();
  ASSERT_OK(TrainerPull());
  EXPECT_EQ(ClosedCount(stuck) + ClosedCount(more), 11u);
}

TEST_F(PsDenseConnectionCrowdTest, OneAddressHoldsAtMostItsShareAndIsToldSo) {
  Start(16, 4);
  auto stuck = Stuck(6, "127.0.0.2");
  ASSERT_TRUE(PollUntil([&] { return ClosedCount(stuck) == 2; }, std::chrono::seconds(3))) << ClosedCount(stuck);
  EXPECT_TRUE(stuck[0]->ClosedWithin(0) && stuck[1]->ClosedWithin(0)) << "the oldest go";
  // Connections with answered requests push the stuck ones out, then keep their places.
  std::vector<std::unique_ptr<Socket>> answered;
  for (int i = 0; i < 4; ++i) answered.push_back(Answered("127.0.0.2"));
  EXPECT_TRUE(PollUntil([&] { return ClosedCount(stuck) == 6; }, std::chrono::seconds(3))) << ClosedCount(stuck);
  ASSERT_TRUE(OpenBecomes(4)) << server_->open_dense_streams();
  Socket fifth(endpoint_, "127.0.0.2");
  ASSERT_TRUE(fifth.Send(kPreface + Frame(Pull(0, 2))));
  wire::DenseAnswer answer;
  ASSERT_TRUE(fifth.Answer(&answer));
  EXPECT_EQ(answer.code(), CodeOf(grpc::StatusCode::RESOURCE_EXHAUSTED)) << answer.error();
  EXPECT_NE(answer.error().find("4 dense connections from 127.0.0.2, the most one address may have"), std::string::npos)
      << answer.error();
  for (const auto& s : answered) EXPECT_FALSE(s->ClosedWithin(0));
  ASSERT_OK(TrainerPull());  // another address is not limited by it
}

TEST_F(PsDenseConnectionCrowdTest, ATrainersConnectionIdleLongerThanTheReclaimTimeMakesWay) {
  Start(3, 1024, std::chrono::milliseconds(300));
  ASSERT_OK(TrainerPull());
  auto a = Answered();
  auto b = Answered();
  // All three in recent use: a fourth is refused.
  Socket refused(endpoint_);
  ASSERT_TRUE(refused.Send(kPreface + Frame(Pull(0, 2))));
  wire::DenseAnswer answer;
  ASSERT_TRUE(refused.Answer(&answer));
  EXPECT_EQ(answer.code(), CodeOf(grpc::StatusCode::RESOURCE_EXHAUSTED)) << answer.error();
  EXPECT_NE(answer.error().find("3 dense connections already, all in use"), std::string::npos) << answer.error();
  // Later the one idle longest (the trainer's) makes way; its next call opens a new connection.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  auto c = Answered();
  EXPECT_FALSE(a->ClosedWithin(0));
  EXPECT_FALSE(b->ClosedWithin(0));
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));  // the trainer checks kept connections unused for 1 s
  ASSERT_OK(TrainerPull());
}

}  // namespace
}  // namespace fleet::ps
