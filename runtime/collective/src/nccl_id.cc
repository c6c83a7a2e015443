#include "fleet/collective/nccl_id.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <thread>

#include "fleet/base/strings.h"
#include "fleet/runtime/endpoint.h"
#include "socket.h"

namespace fleet::collective {
namespace {

using net::Clock;

constexpr size_t kHeadBytes = 8;
constexpr size_t kMaxIds = 1024;      // Paddle's nccl_comm_num is a handful
constexpr size_t kMaxPending = 16;    // connections that have not sent a full head yet
constexpr size_t kMaxReported = 8;    // rejected connections named in a timeout message

using Head = std::array<char, kHeadBytes>;

// Paddle's CommHead {int version = 1; int ring_id;}, as the bytes of the struct (host order).
Head MakeHead(int ring_id) {
  const int32_t fields[2] = {1, static_cast<int32_t>(ring_id)};
  Head head{};
  std::memcpy(head.data(), fields, kHeadBytes);
  return head;
}

std::string DescribeHead(const Head& head) {
  int32_t fields[2];
  std::memcpy(fields, head.data(), kHeadBytes);
  return "{version " + std::to_string(fields[0]) + ", ring_id " + std::to_string(fields[1]) + "}";
}

struct Pending {
  net::Fd fd;
  std::string peer;
  Head head{};
  size_t got = 0;
};

// Connections that were not rank 0, counted; the first kMaxReported are named in a timeout's message.
struct Rejections {
  std::vector<std::string> named;
  size_t total = 0;

  void Add(const Pending& p, const std::string& why) {
    ++total;
    if (named.size() < kMaxReported) named.push_back(p.peer + " " + why);
  }
  std::string Describe() const {
    if (total == 0) return "";
    std::string text = "; ignored " + std::to_string(total) + " other connection(s): " + JoinStrings(named, "; ");
    if (total > named.size()) text += "; ...";
    return text;
  }
};

// Reads what has come of a pending connection's head. kRankZero: the whole head, and it is
// Paddle's (the ids follow); kRejected: it closed early or sent another head (counted in rejections).
enum class HeadRead { kIncomplete, kRejected, kRankZero };
HeadRead ReadHead(Pending& p, const Head& expected, Rejections& rejections) {
  const ssize_t got = ::recv(p.fd.get(), p.head.data() + p.got, kHeadBytes - p.got, 0);
  if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return HeadRead::kIncomplete;
  if (got <= 0) {
    rejections.Add(p, "closed the connection after " + std::to_string(p.got) + " of " + std::to_string(kHeadBytes) + " head bytes");
    return HeadRead::kRejected;
  }
  p.got += static_cast<size_t>(got);
  if (p.got < kHeadBytes) return HeadRead::kIncomplete;
  if (p.head != expected) {
    rejections.Add(p, "sent head " + DescribeHead(p.head) + ", not Paddle's c_gen_nccl_id head " + DescribeHead(expected));
    return HeadRead::kRejected;
  }
  return HeadRead::kRankZero;
}

// Rank 0's connection: echoes the head, then reads the ids.
Result<std::vector<UniqueId>> ReadIds(const Pending& rank_zero, const Head& head, size_t count,
                                      Clock::time_point deadline) {
  if (auto s = net::SendAll(rank_zero.fd.get(), head.data(), kHeadBytes, deadline); !s) {
    return Error{"NCCL id exchange: echoing the head to rank 0 (" + rank_zero.peer + ") failed: " + s.error()};
  }
  std::vector<UniqueId> ids(count);
  for (size_t k = 0; k < count; ++k) {
    auto read = net::RecvAll(rank_zero.fd.get(), ids[k].data(), kUniqueIdBytes, deadline);
    if (!read) {
      return Error{"NCCL id exchange: reading id " + std::to_string(k) + " from rank 0 (" + rank_zero.peer +
                   ") failed: " + read.error()};
    }
    if (*read < kUniqueIdBytes) {
      return Error{"NCCL id exchange: rank 0 (" + rank_zero.peer + ") closed the connection after " +
                   std::to_string(k * kUniqueIdBytes + *read) + " of " + std::to_string(count * kUniqueIdBytes) +
                   " id bytes"};
    }
  }
  return ids;
}

// Accepts every connection waiting on the listener; each is pending until it has sent a head.
void AcceptAll(int listener, std::vector<Pending>& pending, Rejections& rejections) {
  while (true) {
    Pending p;
    p.fd = net::Fd(::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (!p.fd.valid()) return;  // EAGAIN: no more for now
    p.peer = net::PeerName(p.fd.get());
    if (pending.size() >= kMaxPending) {  // a flood of silent connections: drop the oldest
      rejections.Add(pending.front(), "stayed silent");
      pending.erase(pending.begin());
    }
    pending.push_back(std::move(p));
  }
}

}  // namespace

Status SendUniqueIds(const std::vector<std::string>& endpoints, const std::vector<UniqueId>& ids,
                     const IdExchangeOptions& options) {
  if (ids.empty() || ids.size() > kMaxIds) {
    return Error{"SendUniqueIds: between 1 and " + std::to_string(kMaxIds) + " ids, got " + std::to_string(ids.size())};
  }
  const Clock::time_point deadline = Clock::now() + options.timeout;
  const Head head = MakeHead(options.ring_id);
  std::vector<net::Fd> connections;
  for (const std::string& text : endpoints) {
    auto endpoint = ParseEndpoint(text);
    if (!endpoint) return Error{"NCCL id exchange: " + endpoint.error()};
    std::string problem;
    while (true) {
      auto fd = net::ConnectWithRetry(endpoint->host, endpoint->port, deadline);
      if (!fd) {
        return Error{"NCCL id exchange: rank 0 could not reach " + text + " within " +
                     net::FormatDuration(options.timeout) + ": " + fd.error() + (problem.empty() ? "" : "; earlier: " + problem)};
      }
      Head echo{};
      Status sent = net::SendAll(fd->get(), head.data(), kHeadBytes, deadline);
      Result<size_t> got = sent ? net::RecvAll(fd->get(), echo.data(), kHeadBytes, deadline) : Result<size_t>(Error{sent.error()});
      if (got && *got == kHeadBytes && echo == head) {
        connections.push_back(std::move(*fd));
        break;
      }
      // Not the rank we expect (another process holds the port, or a different ring): retry, as
      // Paddle does, until the deadline.
      problem = !got ? got.error()
                     : *got < kHeadBytes ? "the peer closed the connection instead of echoing the head"
                                         : "the peer answered " + DescribeHead(echo) + " instead of " + DescribeHead(head);
      if (Clock::now() + std::chrono::milliseconds(80) >= deadline) {
        return Error{"NCCL id exchange: " + text + " did not accept rank 0's head within " +
                     net::FormatDuration(options.timeout) + ": " + problem};
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(80));
    }
  }
  for (size_t i = 0; i < connections.size(); ++i) {
    for (const UniqueId& id : ids) {
      if (auto s = net::SendAll(connections[i].get(), id.data(), id.size(), deadline); !s) {
        return Error{"NCCL id exchange: sending the id to " + endpoints[i] + " failed: " + s.error()};
      }
    }
  }
  return OkStatus();
}

Result<std::vector<UniqueId>> ReceiveUniqueIds(const std::string& endpoint_text, size_t count,
                                               const IdExchangeOptions& options) {
  if (count == 0 || count > kMaxIds) {
    return Error{"ReceiveUniqueIds: between 1 and " + std::to_string(kMaxIds) + " ids, got " + std::to_string(count)};
  }
  auto endpoint = ParseEndpoint(endpoint_text);
  if (!endpoint) return Error{"NCCL id exchange: " + endpoint.error()};
  const Clock::time_point deadline = Clock::now() + options.timeout;
  auto listener = net::Listen(endpoint->host, endpoint->port, deadline);
  if (!listener) return Error{"NCCL id exchange on " + endpoint_text + ": " + listener.error()};
  const Head expected = MakeHead(options.ring_id);

  std::vector<Pending> pending;
  Rejections rejections;
  while (true) {
    std::vector<pollfd> fds;
    fds.push_back(pollfd{listener->get(), POLLIN, 0});
    for (const Pending& p : pending) fds.push_back(pollfd{p.fd.get(), POLLIN, 0});
    const int n = ::poll(fds.data(), fds.size(), net::MillisLeft(deadline));
    if (n < 0 && errno != EINTR) {
      return Error{"NCCL id exchange on " + endpoint_text + ": poll failed: " + std::strerror(errno)};
    }
    if (Clock::now() >= deadline) {
      return Error{"NCCL id exchange: timed out after " + net::FormatDuration(options.timeout) + " waiting for rank 0 to send " +
                   "the NCCL unique id to " + endpoint_text + rejections.Describe()};
    }
    if (n <= 0) continue;

    // Existing connections first (their indexes in fds are 1..), then new ones.
    std::vector<Pending> still;
    for (size_t i = 0; i < pending.size(); ++i) {
      Pending& p = pending[i];
      if (!(fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR))) {
        still.push_back(std::move(p));
        continue;
      }
      switch (ReadHead(p, expected, rejections)) {
        case HeadRead::kIncomplete:
          still.push_back(std::move(p));
          break;
        case HeadRead::kRejected:
          break;
        case HeadRead::kRankZero:
          return ReadIds(p, expected, count, deadline);
      }
    }
    pending = std::move(still);
    if (fds[0].revents & POLLIN) AcceptAll(listener->get(), pending, rejections);
  }
}

}  // namespace fleet::collective
