// EtcdClient (etcd.h) against servers that are not etcd: one that sends response headers without
// end, one that sends a body without end, and a black hole (a listener whose backlog is full, so
// that connecting hangs, and one that takes connections but never answers). Each call must fail
// with a clear error by its deadline, and the client's memory must stay small: the process's peak
// resident size (VmHWM) may grow by kMemorySlack at most, against the 4 MiB body limit and 64 KiB
// head limit. Also the gateway's answers parsed on their own (the fuzz target's functions).
#include "fleet/launcher/etcd.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <fstream>
#include <string>
#include <thread>

namespace fleet::launcher {
namespace {

using ::testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr std::chrono::milliseconds kTimeout{3000};   // elastic fleetrun's own
constexpr long kMemorySlack = 64 << 10;               // KiB
constexpr size_t kSendCap = size_t{512} << 20;        // what a fake sends at most, should a client take it all

double SecondsSince(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// The process's peak resident set size, in KiB (VmHWM in /proc/self/status).
long PeakResidentKiB() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

// A listening socket on 127.0.0.1, on a free port.
class Listener {
 public:
  explicit Listener(int backlog) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 || ::listen(fd_, backlog) != 0 ||
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen on 127.0.0.1";
    }
    port_ = ntohs(addr.sin_port);
  }
  ~Listener() { ::close(fd_); }
  int fd() const { return fd_; }
  std::string server() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Answers every connection with `head_start`, then `forever` (unless empty) again and again until
// the client goes (or kSendCap is sent).
class EndlessServer {
 public:
  EndlessServer(std::string head_start, std::string forever)
      : head_start_(std::move(head_start)), forever_(std::move(forever)), thread_([this] { Serve(); }) {}
  ~EndlessServer() {
    stop_ = true;
    ::shutdown(listener_.fd(), SHUT_RDWR);
    thread_.join();
  }
  std::string server() const { return listener_.server(); }
  size_t sent() const { return sent_; }

 private:
  void Serve() {
    while (!stop_) {
      const int fd = ::accept(listener_.fd(), nullptr, nullptr);
      if (fd < 0) return;
      char request[4096];
      (void)::recv(fd, request, sizeof request, 0);
      bool open = SendAll(fd, head_start_);
      while (open && !forever_.empty() && !stop_ && sent_ < kSendCap) open = SendAll(fd, forever_);
      ::close(fd);
    }
  }
  bool SendAll(int fd, const std::string& bytes) {
    for (size_t done = 0; done < bytes.size();) {
      const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += static_cast<size_t>(n);
      sent_ += static_cast<size_t>(n);
    }
    return true;
  }

  Listener listener_{16};
  const std::string head_start_, forever_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> sent_{0};
  std::thread thread_;
};

struct Outcome {
  Status status;
  double seconds = 0;
  long peak_growth_kib = 0;
};

// One GetPrefix to `server`, its time and how much it raised the process's peak memory.
Outcome RangeOn(const std::string& server, EtcdClient::Deadline deadline = EtcdClient::Deadline::max()) {
  auto client = EtcdClient::Create(server, kTimeout);
  if (!client.ok()) return {Error{client.error()}};
  const long before = PeakResidentKiB();
  const auto start = Clock::now();
  auto kvs = (*client)->GetPrefix("/paddle/j/nodes/", deadline);
  Outcome outcome{kvs.ok() ? OkStatus() : Status(Error{kvs.error()}), SecondsSince(start), 0};
  outcome.peak_growth_kib = PeakResidentKiB() - before;
  return outcome;
}

TEST(FleetrunEtcdHostile, EndlessHeaderLinesFailByTheDeadlineInLittleMemory) {
  EndlessServer server("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n",
                       "X-Junk: " + std::string(1000, 'j') + "\r\n");
  const Outcome o = RangeOn(server.server());
  ASSERT_FALSE(o.status.ok());
  EXPECT_THAT(o.status.error(), HasSubstr("etcd " + server.server() + "/v3/kv/range"));
  EXPECT_THAT(o.status.error(), HasSubstr("header limit"));
  EXPECT_LT(o.seconds, 2.0 * kTimeout.count() / 1000);
  EXPECT_LT(o.peak_growth_kib, kMemorySlack) << "the client took " << server.sent() << " bytes";
  std::cerr << "[ measured ] endless headers: " << o.seconds << " s, " << server.sent() << " bytes sent, peak +"
            << o.peak_growth_kib << " KiB: " << o.status.error() << "\n";
}

TEST(FleetrunEtcdHostile, OneEndlessHeaderLineFailsByTheDeadlineInLittleMemory) {
  EndlessServer server("HTTP/1.1 200 OK\r\nX-Junk: ", std::string(4096, 'j'));
  const Outcome o = RangeOn(server.server());
  ASSERT_FALSE(o.status.ok());
  EXPECT_THAT(o.status.error(), HasSubstr("header limit"));
  EXPECT_LT(o.seconds, 2.0 * kTimeout.count() / 1000);
  EXPECT_LT(o.peak_growth_kib, kMemorySlack) << "the client took " << server.sent() << " bytes";
}

TEST(FleetrunEtcdHostile, EndlessBodyStopsAtTheBodyLimit) {
  const std::string chunk(4096, 'b');
  EndlessServer server("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
                       "1000\r\n" + chunk + "\r\n");
  const Outcome o = RangeOn(server.server());
  ASSERT_FALSE(o.status.ok());
  EXPECT_THAT(o.status.error(), HasSubstr("exceeds the limit"));
  EXPECT_LT(o.seconds, 2.0 * kTimeout.count() / 1000);
  EXPECT_LT(o.peak_growth_kib, kMemorySlack) << "the client took " << server.sent() << " bytes";
}

TEST(FleetrunEtcdHostile, AnEndlessChunkHeaderFailsByTheDeadlineInLittleMemory) {
  EndlessServer server("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1;ext=", std::string(4096, 'e'));
  const Outcome o = RangeOn(server.server());
  ASSERT_FALSE(o.status.ok());
  EXPECT_LT(o.seconds, 2.0 * kTimeout.count() / 1000);
  EXPECT_LT(o.peak_growth_kib, kMemorySlack) << "the client took " << server.sent() << " bytes";
  std::cerr << "[ measured ] endless chunk header: " << o.seconds << " s, " << server.sent() << " bytes sent, peak +"
            << o.peak_growth_kib << " KiB: " << o.status.error() << "\n";
}

// A listener that never accepts, its backlog full: a connection attempt gets no answer at all.
TEST(FleetrunEtcdHostile, ABlackHoleCostsTheCallersDeadlineConnectingIncluded) {
  Listener black_hole(0);
  const int filler = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(std::stoi(black_hole.server().substr(10))));
  (void)::connect(filler, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));   // its handshake fills the backlog

  const Outcome by_timeout = RangeOn(black_hole.server());
  ASSERT_FALSE(by_timeout.status.ok());
  EXPECT_THAT(by_timeout.status.error(), HasSubstr("timed out"));
  EXPECT_LT(by_timeout.seconds, 2.0 * kTimeout.count() / 1000);

  const auto deadline = Clock::now() + std::chrono::milliseconds(500);
  const Outcome by_deadline = RangeOn(black_hole.server(), deadline);
  ASSERT_FALSE(by_deadline.status.ok());
  EXPECT_LT(by_deadline.seconds, 1.0) << "the caller's deadline (0.5 s) did not end the call";
  std::cerr << "[ measured ] black hole: " << by_timeout.seconds << " s by the client's timeout ("
            << kTimeout.count() << " ms), " << by_deadline.seconds << " s by a deadline 0.5 s away\n";
  ::close(filler);
}

// A listener that takes connections and never answers (etcd stopped): each call of a series under
// one deadline ends by that deadline, not one timeout later each.
TEST(FleetrunEtcdHostile, CallsUnderOneDeadlineEndTogether) {
  Listener silent(16);
  auto client = EtcdClient::Create(silent.server(), kTimeout);
  ASSERT_TRUE(client.ok()) << client.error();
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::milliseconds(500);
  EXPECT_FALSE((*client)->RevokeLease(7, deadline).ok());
  EXPECT_FALSE((*client)->Delete("/paddle/j/nodes/x", deadline).ok());
  EXPECT_FALSE((*client)->GetPrefix("/paddle/j/nodes/", deadline).ok());
  EXPECT_LT(SecondsSince(start), 1.0) << "three calls under a deadline 0.5 s away";
}

// The gateway's error message reaches fleetrun's log: escaped and short, whatever it was.
TEST(FleetrunEtcdHostile, AnErrorAnswerIsShownEscapedAndShort) {
  const std::string body = R"({"code":5,"message":")" + std::string("\\u001b[2J") + std::string(1 << 20, 'm') + "\"}";
  EndlessServer server("HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\nContent-Length: " +
                           std::to_string(body.size()) + "\r\n\r\n" + body,
                       "");
  const Outcome o = RangeOn(server.server());
  ASSERT_FALSE(o.status.ok());
  EXPECT_THAT(o.status.error(), HasSubstr("HTTP 404: \"\\u001b[2Jmmm"));
  EXPECT_EQ(o.status.error().find('\x1b'), std::string::npos);
  EXPECT_LT(o.status.error().size(), 300u);
}

TEST(FleetrunEtcdAnswers, RangeAnswers) {
  auto kvs = ParseRangeAnswer(R"({"header":{},"kvs":[{"key":"L2E=","value":"MTAuMC4wLjI6NjE3MA==",)"
                              R"("create_revision":"12","lease":"7587"}],"count":"1"})");
  ASSERT_TRUE(kvs.ok()) << kvs.error();
  ASSERT_EQ(kvs->size(), 1u);
  EXPECT_EQ(kvs->front().key, "/a");
  EXPECT_EQ(kvs->front().value, "10.0.0.2:6170");
  EXPECT_EQ(kvs->front().create_revision, 12);
  EXPECT_EQ(kvs->front().lease, 7587);
  auto none = ParseRangeAnswer(R"({"header":{}})");
  ASSERT_TRUE(none.ok()) << none.error();
  EXPECT_TRUE(none->empty());
  for (const std::string bad : {"", "[]", "{", R"({"kvs":{}})", R"({"kvs":[1]})", R"({"kvs":[{"key":3}]})",
                                R"({"kvs":[{"key":"not base64!"}]})"}) {
    EXPECT_FALSE(ParseRangeAnswer(bad).ok()) << bad;
  }
  // Not an int64: 0, as absent.
  auto odd = ParseRangeAnswer(R"({"kvs":[{"key":"L2E=","create_revision":"12abc","lease":"99999999999999999999"}]})");
  ASSERT_TRUE(odd.ok()) << odd.error();
  EXPECT_EQ(odd->front().create_revision, 0);
  EXPECT_EQ(odd->front().lease, 0);
}

TEST(FleetrunEtcdAnswers, LeaseAnswers) {
  auto id = ParseLeaseGrantAnswer(R"({"ID":"7587862072116034053","TTL":"60"})");
  ASSERT_TRUE(id.ok()) << id.error();
  EXPECT_EQ(*id, 7587862072116034053);
  for (const std::string bad : {"", "{}", R"({"ID":"0"})", R"({"ID":"12 "})", R"({"ID":[]})"}) {
    EXPECT_FALSE(ParseLeaseGrantAnswer(bad).ok()) << bad;
  }
  auto alive = ParseKeepAliveAnswer(R"({"result":{"ID":"1","TTL":"60"}})");
  ASSERT_TRUE(alive.ok()) << alive.error();
  EXPECT_TRUE(*alive);
  auto expired = ParseKeepAliveAnswer(R"({"result":{"ID":"1"}})");
  ASSERT_TRUE(expired.ok()) << expired.error();
  EXPECT_FALSE(*expired);
  EXPECT_FALSE(ParseKeepAliveAnswer("null").ok());
}

}  // namespace
}  // namespace fleet::launcher
