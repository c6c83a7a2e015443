#include "bulk.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/server_posix.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

namespace fleet::ps::bulk {
namespace {

using Clock = std::chrono::steady_clock;

// A connection that has not said which protocol it speaks within this long is closed.
constexpr auto kClassifyTimeout = std::chrono::seconds(10);
// Connections still to say which they are; past this, the oldest is closed for each new one.
constexpr size_t kMaxPending = 1024;
// A connection that has said part of what it is is looked at again after this long, doubling up to
// kMaxRecheck (a trainer says it all at once; a silent peer costs a look now and then, not a spin).
constexpr auto kFirstRecheck = std::chrono::milliseconds(20);
constexpr auto kMaxRecheck = std::chrono::milliseconds(320);
// A trainer gives up connecting to a server after this long (or the call's deadline, if sooner).
constexpr auto kConnectTimeout = std::chrono::seconds(20);
// A dense connection on which nothing moves for this long is closed.
constexpr auto kDenseIdleTimeout = std::chrono::minutes(15);

std::string ErrnoText() { return std::strerror(errno); }

Status SplitHostPort(const std::string& address, std::string* host, std::string* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == address.size()) {
    return InvalidArgument("'" + address + "' is not host:port");
  }
  *host = address.substr(0, colon);
  *port = address.substr(colon + 1);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  if (port->find_first_not_of("0123456789") != std::string::npos || port->size() > 5 || std::stoi(*port) > 65535) {
    return InvalidArgument("'" + address + "' has no port number");
  }
  return Status::Ok();
}

struct Addresses {
  addrinfo* list = nullptr;
  Addresses() = default;
  Addresses(const Addresses&) = delete;
  Addresses& operator=(const Addresses&) = delete;
  ~Addresses() {
    if (list) ::freeaddrinfo(list);
  }
};

Status Resolve(const std::string& address, Addresses* out) {
  std::string host, port;
  if (Status s = SplitHostPort(address, &host, &port); !s.ok()) return s;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &out->list); rc != 0) {
    return Unavailable("cannot resolve " + host + ": " + ::gai_strerror(rc));
  }
  return Status::Ok();
}

// The same address, whatever the port.
bool SameHost(const addrinfo& a, const addrinfo& b) {
  if (a.ai_family != b.ai_family) return false;
  if (a.ai_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in*>(a.ai_addr)->sin_addr.s_addr ==
           reinterpret_cast<const sockaddr_in*>(b.ai_addr)->sin_addr.s_addr;
  }
  const auto* x = reinterpret_cast<const sockaddr_in6*>(a.ai_addr);
  const auto* y = reinterpret_cast<const sockaddr_in6*>(b.ai_addr);
  return std::memcmp(&x->sin6_addr, &y->sin6_addr, sizeof(x->sin6_addr)) == 0 && x->sin6_scope_id == y->sin6_scope_id;
}

void SetNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void PutFrameHeader(char* at, size_t length) {
  at[0] = 0;
  for (int i = 0; i < 4; ++i) at[1 + i] = static_cast<char>((length >> (8 * (3 - i))) & 0xff);
}

size_t FrameLength(const char* at) {
  size_t n = 0;
  for (int i = 0; i < 4; ++i) n = (n << 8) | static_cast<uint8_t>(at[1 + i]);
  return n;
}

// Drops the first `sent` bytes of iov[*first..]; true when nothing is left.
bool Advance(std::vector<iovec>& iov, size_t* first, size_t sent) {
  while (*first < iov.size() && sent >= iov[*first].iov_len) sent -= iov[(*first)++].iov_len;
  if (*first < iov.size()) {
    iov[*first].iov_base = static_cast<char*>(iov[*first].iov_base) + sent;
    iov[*first].iov_len -= sent;
  }
  return *first == iov.size();
}

// One sendmsg of what is left (at most IOV_MAX pieces); the bytes sent, or -1 (errno).
ssize_t SendSome(int fd, std::vector<iovec>& iov, size_t first) {
  msghdr msg{};
  msg.msg_iov = iov.data() + first;
  msg.msg_iovlen = std::min<size_t>(iov.size() - first, IOV_MAX);
  ssize_t n;
  do {
    n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
  } while (n < 0 && errno == EINTR);
  return n;
}

// The frame header, then the message's slices (which the caller keeps).
std::vector<iovec> FrameOf(const std::vector<grpc::Slice>& slices, char* header) {
  size_t length = 0;
  for (const grpc::Slice& s : slices) length += s.size();
  PutFrameHeader(header, length);
  std::vector<iovec> iov{{header, kFrameHeaderBytes}};
  for (const grpc::Slice& s : slices) {
    if (s.size() > 0) iov.push_back({const_cast<uint8_t*>(s.begin()), s.size()});
  }
  return iov;
}

// Blocking I/O, for the server's connection threads. false: the peer closed, or an error.
bool ReadAll(int fd, char* p, size_t n) {
  while (n > 0) {
    const ssize_t r = ::recv(fd, p, n, 0);
    if (r > 0) {
      p += r;
      n -= static_cast<size_t>(r);
    } else if (r == 0 || errno != EINTR) {
      return false;
    }
  }
  return true;
}

bool WriteAll(int fd, std::vector<iovec> iov) {
  size_t first = 0;
  while (first < iov.size()) {
    const ssize_t n = SendSome(fd, iov, first);
    if (n < 0) return false;
    Advance(iov, &first, static_cast<size_t>(n));
  }
  return true;
}

bool WriteMessage(int fd, const grpc::ByteBuffer& message) {
  std::vector<grpc::Slice> slices;
  if (!message.Dump(&slices).ok()) return false;
  char header[kFrameHeaderBytes];
  return WriteAll(fd, FrameOf(slices, header));
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The server's side.

namespace {

// What a new connection is, from its first bytes.
enum class Kind { kUndecided, kDense, kGrpc, kNone };

constexpr char kHttp2Preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
constexpr size_t kHttp2PrefaceBytes = sizeof(kHttp2Preface) - 1;

// Peeks without blocking: the bytes stay for whoever serves the connection. Garbage is kNone
// (closed here: gRPC would wait on it with no deadline).
Kind Classify(int fd) {
  char head[kHttp2PrefaceBytes];
  ssize_t n;
  do {
    n = ::recv(fd, head, sizeof(head), MSG_PEEK | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return Kind::kUndecided;
  if (n <= 0) return Kind::kNone;
  const auto got = static_cast<size_t>(n);
  if (std::memcmp(head, kPreface, std::min(got, kPrefaceBytes)) == 0) {
    // Dense once its first request has begun: a peer that sends the preface and then nothing costs
    // a descriptor here until kClassifyTimeout, never a thread (a trainer sends both in one write).
    return got > kPrefaceBytes ? Kind::kDense : Kind::kUndecided;
  }
  if (std::memcmp(head, kHttp2Preface, std::min(got, kHttp2PrefaceBytes)) == 0) {
    return got >= kHttp2PrefaceBytes ? Kind::kGrpc : Kind::kUndecided;
  }
  return Kind::kNone;
}

int64_t NowNs() { return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count(); }

// The remote address of a connection, without the port: what the per-peer limit counts.
std::string PeerHost(int fd) {
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  char text[INET6_ADDRSTRLEN] = "?";
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    if (a.ss_family == AF_INET) ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&a)->sin_addr, text, sizeof(text));
    if (a.ss_family == AF_INET6) ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&a)->sin6_addr, text, sizeof(text));
  }
  return text;
}

// Keepalive finds trainers whose host died without closing (about 2 minutes); the timeouts end
// peers that stay connected but stop sending or reading. A trainer whose idle connection was
// closed opens a new one on its next call.
void SetDenseTimeouts(int fd) {
  int on = 1, idle = 60, interval = 10, count = 6;
  ::setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &on, sizeof(on));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &interval, sizeof(interval));
  ::setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &count, sizeof(count));
  timeval limit{std::chrono::duration_cast<std::chrono::seconds>(kDenseIdleTimeout).count(), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &limit, sizeof(limit));
}

// After an answer that ends the connection: the peer may still be sending the request, and closing
// a socket with unread bytes resets the connection, which can destroy the answer before the peer
// reads it. So: no more writes, read what comes (up to `limit` bytes, for a second at most), then
// close.
void LingerAfterError(int fd, size_t limit) {
  ::shutdown(fd, SHUT_WR);
  timeval second{1, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &second, sizeof(second));
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(1);
  char sink[64 << 10];
  for (size_t total = 0; total <= limit && Clock::now() < give_up;) {
    const ssize_t n = ::recv(fd, sink, sizeof(sink), 0);
    if (n <= 0) break;
    total += static_cast<size_t>(n);
  }
}

}  // namespace

struct Acceptor::Impl {
  std::vector<Fd> listeners;  // one per address the bind address resolves to, all on one port
  Fd wake;                    // an eventfd: wakes the accept loop to stop, or to join finished threads
  ServerCore* core = nullptr;
  grpc::Server* grpc_server = nullptr;
  size_t frame_limit = 0;
  std::thread accept_thread;

  // What a dense connection's thread is doing, for choosing one to close when the server is full.
  enum State : int { kIdle, kBusy, kEvicted };
  struct Dense {
    int fd = -1;  // -1 once closed (guarded by mutex)
    std::string peer;  // the remote address, without the port
    std::thread thread;
    bool finished = false;
    // Set by the connection's thread, one store or exchange per request (nothing on the hot path
    // waits for them); read by MakeRoom.
    std::atomic<int> state{kIdle};       // kIdle: waiting for a request (or for the rest of its header)
    std::atomic<bool> answered{false};   // a request of it was served: a trainer's connection
    std::atomic<int64_t> idle_since{0};  // NowNs() when it last became idle
  };
  size_t max_dense = 0;
  size_t max_dense_per_peer = 0;
  int64_t reclaim_idle_ns = 0;
  mutable std::mutex mutex;
  std::list<Dense> dense;  // the dense connections' threads, reaped as new ones come
  bool stopping = false;
  std::atomic<size_t> dense_open{0};

  // A new connection that has not yet said which protocol it speaks.
  struct Pending {
    int fd;
    Clock::time_point deadline;
    Clock::time_point recheck;  // a preface that came in part: look again then, not at every wake-up
    Clock::duration backoff = kFirstRecheck;
  };
  void AcceptLoop();
  void SortPending(std::vector<Pending>& pending, const std::vector<short>& woke, Clock::time_point polled_at);
  void AcceptAll(int listener, std::vector<Pending>& pending);
  void Wake() {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake.get(), &one, sizeof(one));
  }
  void JoinFinished();  // with mutex held
  Status MakeRoom(const std::string& peer);  // with mutex held
  void StartDense(int fd);
  void ServeDenseConnection(Dense& c);
};

Status Acceptor::Listen(const std::string& address, std::unique_ptr<Acceptor>* out) {
  std::string host, port;
  if (Status s = SplitHostPort(address, &host, &port); !s.ok()) return s;
  Addresses addresses, ipv4;
  Status resolved = Resolve(address, &addresses);
  addrinfo* list = addresses.list;
  // "[::]" on a host without IPv6 serves IPv4's wildcard instead (as gRPC's listener does).
  if (resolved.ok() && host == "::" && list && list->ai_family == AF_INET6) {
    Fd probe(::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!probe.valid() && errno == EAFNOSUPPORT) {
      resolved = Resolve("0.0.0.0:" + port, &ipv4);
      list = ipv4.list;
    }
  }
  if (!resolved.ok()) return resolved;
  auto impl = std::make_unique<Impl>();
  int bound_port = std::stoi(port);
  std::string why;
  for (addrinfo* a = list; a; a = a->ai_next) {
    bool seen = false;  // /etc/hosts may name an address twice
    for (addrinfo* b = list; b != a; b = b->ai_next) seen = seen || SameHost(*a, *b);
    if (seen) continue;
    // Every address on one port: port 0 takes the one the first bind picked.
    if (a->ai_family == AF_INET) reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_port = htons(static_cast<uint16_t>(bound_port));
    if (a->ai_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_port = htons(static_cast<uint16_t>(bound_port));
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    int one = 1, zero = 0;
    if (fd.valid()) {
      // SO_REUSEADDR (restart while old connections linger in TIME_WAIT), but not SO_REUSEPORT: a
      // second server on the same port must fail, not share it.
      ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
      // "[::]" serves IPv4 too.
      if (a->ai_family == AF_INET6) ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    }
    if (!fd.valid() || ::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), SOMAXCONN) != 0) {
      // An address this host cannot serve (IPv6 off for "localhost"'s ::1) is skipped, as gRPC's
      // listener did; a port in use is not.
      why = ErrnoText();
      if (errno == EADDRNOTAVAIL || errno == EAFNOSUPPORT) continue;
      return Unavailable("cannot listen on " + address + ": " + why);
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len);
    bound_port = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                   : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    impl->listeners.push_back(std::move(fd));
  }
  if (impl->listeners.empty()) return Unavailable("cannot listen on " + address + ": " + why);
  impl->wake = Fd(::eventfd(0, EFD_CLOEXEC));
  if (!impl->wake.valid()) return Internal("eventfd: " + ErrnoText());
  std::unique_ptr<Acceptor> acceptor(new Acceptor());
  acceptor->port_ = bound_port;
  acceptor->impl_ = std::move(impl);
  *out = std::move(acceptor);
  return Status::Ok();
}

void Acceptor::Start(ServerCore* core, grpc::Server* grpc_server, const ServerOptions& options) {
  impl_->core = core;
  impl_->grpc_server = grpc_server;
  impl_->frame_limit = FrameLimit(options.max_message_bytes);
  impl_->max_dense = options.max_dense_connections;
  impl_->max_dense_per_peer = options.max_dense_connections_per_peer;
  impl_->reclaim_idle_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(options.dense_reclaim_idle).count();
  impl_->accept_thread = std::thread([impl = impl_.get()] { impl->AcceptLoop(); });
}

size_t Acceptor::open_connections() const { return impl_ ? impl_->dense_open.load() : 0; }

void Acceptor::Shutdown() {
  if (!impl_ || !impl_->accept_thread.joinable()) return;
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->Wake();
  impl_->accept_thread.join();
  impl_->listeners.clear();  // new connections are refused from here on
  // Wakes the dense connections' threads waiting for a request; one still answering (a sync push
  // that shutdown failed) gets a moment to write its answer, then its socket closes too. Each
  // thread closes its socket itself.
  auto shut = [&](int how) {
    std::lock_guard lock(impl_->mutex);
    size_t open = 0;
    for (Impl::Dense& c : impl_->dense) {
      if (c.fd >= 0) ::shutdown(c.fd, how);
      open += c.fd >= 0;
    }
    return open;
  };
  shut(SHUT_RD);
  const Clock::time_point grace = Clock::now() + std::chrono::milliseconds(250);
  while (shut(SHUT_RD) > 0 && Clock::now() < grace) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  shut(SHUT_RDWR);
  for (Impl::Dense& c : impl_->dense) c.thread.join();
  impl_->dense.clear();
}

Acceptor::~Acceptor() { Shutdown(); }

// Accepts, and sorts new connections by their first bytes in this one thread (a peer that says
// nothing costs a descriptor for kClassifyTimeout, not a thread): gRPC's go to gRPC, dense ones
// get a thread each.
void Acceptor::Impl::AcceptLoop() {
  std::vector<Pending> pending;
  std::vector<pollfd> fds;
  std::vector<size_t> polled;  // the pending connections in fds, in order
  for (;;) {
    fds.clear();
    polled.clear();
    fds.push_back({wake.get(), POLLIN, 0});
    for (const Fd& l : listeners) fds.push_back({l.get(), POLLIN, 0});
    const size_t first_pending = fds.size();
    Clock::time_point next = Clock::time_point::max();
    const Clock::time_point now = Clock::now();
    for (size_t i = 0; i < pending.size(); ++i) {
      const Pending& p = pending[i];
      if (p.recheck <= now) {
        fds.push_back({p.fd, POLLIN | POLLRDHUP, 0});
        polled.push_back(i);
      }
      next = std::min({next, p.deadline, p.recheck <= now ? Clock::time_point::max() : p.recheck});
    }
    const auto wait = next == Clock::time_point::max()
                          ? -1
                          : std::clamp<int64_t>(std::chrono::duration_cast<std::chrono::milliseconds>(next - now).count() + 1, 0, INT32_MAX);
    if (::poll(fds.data(), fds.size(), static_cast<int>(wait)) < 0 && errno != EINTR) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      continue;
    }
    if (fds[0].revents != 0) {
      uint64_t count;
      [[maybe_unused]] ssize_t n = ::read(wake.get(), &count, sizeof(count));
      std::lock_guard lock(mutex);
      if (stopping) break;
      JoinFinished();  // a dense connection ended: its thread's stack goes now, not with the next one
    }
    std::vector<short> woke(pending.size(), 0);
    for (size_t k = 0; k < polled.size(); ++k) woke[polled[k]] = fds[first_pending + k].revents;
    SortPending(pending, woke, now);
    for (size_t l = 1; l < first_pending; ++l) {
      if (fds[l].revents != 0) AcceptAll(fds[l].fd, pending);
    }
  }
  for (const Pending& p : pending) ::close(p.fd);
}

// Classifies the pending connections that woke (woke[i]: their poll events) or whose recheck came
// since `polled_at`, and hands on those that said what they are. The rest stay, in order.
void Acceptor::Impl::SortPending(std::vector<Pending>& pending, const std::vector<short>& woke,
                                 Clock::time_point polled_at) {
  const Clock::time_point now = Clock::now();
  size_t kept = 0;
  for (size_t i = 0; i < pending.size(); ++i) {
    Pending p = pending[i];
    const bool look = woke[i] != 0 || (p.recheck > polled_at && p.recheck <= now);
    Kind kind = look ? Classify(p.fd) : Kind::kUndecided;
    // Part of a preface, and then the peer closed (or time is up): it will never say more.
    if (kind == Kind::kUndecided && (now >= p.deadline || (woke[i] & (POLLRDHUP | POLLHUP | POLLERR)))) kind = Kind::kNone;
    if (kind == Kind::kUndecided) {
      if (look) {
        p.recheck = now + p.backoff;
        p.backoff = std::min<Clock::duration>(p.backoff * 2, kMaxRecheck);
      }
      pending[kept++] = p;
    } else if (kind == Kind::kGrpc && ::fcntl(p.fd, F_SETFL, ::fcntl(p.fd, F_GETFL) | O_NONBLOCK) == 0) {
      // gRPC reads it without blocking. Shutdown joins this thread before gRPC shuts down.
      grpc::AddInsecureChannelFromFd(grpc_server, p.fd);
    } else if (kind == Kind::kDense) {
      StartDense(p.fd);
    } else {
      ::close(p.fd);
    }
  }
  pending.resize(kept);
}

// Accepts every connection waiting on `listener`; each is pending until it says what it is.
void Acceptor::Impl::AcceptAll(int listener, std::vector<Pending>& pending) {
  for (;;) {
    const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors or memory: the connection waits in the backlog; try again shortly
      // instead of spinning. Others (EAGAIN: none left; a client that gave up) need nothing.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      return;
    }
    if (pending.size() >= kMaxPending) {  // the oldest goes: peers that say nothing cannot lock others out
      ::close(pending.front().fd);
      pending.erase(pending.begin());
    }
    SetNoDelay(fd);
    pending.push_back({fd, Clock::now() + kClassifyTimeout, Clock::time_point::min(), kFirstRecheck});
  }
}

void Acceptor::Impl::JoinFinished() {
  for (auto it = dense.begin(); it != dense.end();) {
    if (!it->finished) {
      ++it;
      continue;
    }
    it->thread.join();
    it = dense.erase(it);
  }
}

// Room for one more dense connection from `peer`. When the peer has max_dense_per_peer of them,
// or the server max_dense, an idle one makes way (the peer's own, or anyone's): first one that never
// had a request answered (a peer that sent the preface and part of a header, then nothing), the
// oldest; else the one idle longest, if idle for reclaim_idle (its trainer reconnects on its next
// call). A connection in a request, and a trainer's recently used ones, are never taken.
Status Acceptor::Impl::MakeRoom(const std::string& peer) {
  size_t open = 0, of_peer = 0;
  for (const Dense& d : dense) {
    if (d.finished || d.state.load() == kEvicted) continue;
    ++open;
    of_peer += d.peer == peer ? 1 : 0;
  }
  const bool peer_full = of_peer >= max_dense_per_peer;
  if (!peer_full && open < max_dense) return Status::Ok();
  const int64_t reclaimable = NowNs() - reclaim_idle_ns;  // idle since before this
  for (;;) {
    Dense* victim = nullptr;
    for (Dense& d : dense) {
      if (d.finished || d.fd < 0 || d.state.load() != kIdle || (peer_full && d.peer != peer)) continue;
      const bool answered = d.answered.load();
      if (answered && d.idle_since.load() > reclaimable) continue;
      if (!victim || (victim->answered.load() && !answered) ||
          (victim->answered.load() == answered && d.idle_since.load() < victim->idle_since.load())) {
        victim = &d;
      }
    }
    if (!victim) break;
    int idle = kIdle;
    if (!victim->state.compare_exchange_strong(idle, kEvicted)) continue;  // a request just began on it
    ::shutdown(victim->fd, SHUT_RDWR);  // its thread wakes, and closes it
    return Status::Ok();
  }
  if (peer_full) {
    return ResourceExhausted("the parameter server serves " + std::to_string(of_peer) + " dense connections from " +
                             peer + ", the most one address may have, all in use");
  }
  return ResourceExhausted("the parameter server serves " + std::to_string(open) + " dense connections already, all in use");
}

// A thread for a dense connection, if MakeRoom finds room: else (or when no thread can be made)
// the trainer is told why, and the connection is closed.
void Acceptor::Impl::StartDense(int fd) {
  const std::string peer = PeerHost(fd);
  std::lock_guard lock(mutex);
  JoinFinished();
  Status refused = MakeRoom(peer);
  if (refused.ok()) {
    bool added = false;
    try {
      Dense& conn = dense.emplace_back();
      added = true;
      conn.fd = fd;
      conn.peer = peer;
      conn.idle_since.store(NowNs());
      conn.thread = std::thread([this, c = &conn] {
        char preface[kPrefaceBytes];
        SetDenseTimeouts(c->fd);
        if (ReadAll(c->fd, preface, kPrefaceBytes)) {
          dense_open.fetch_add(1);
          ServeDenseConnection(*c);
          dense_open.fetch_sub(1);
        }
        std::lock_guard done(mutex);
        ::close(c->fd);
        c->fd = -1;
        c->finished = true;
        Wake();
      });
      return;
    } catch (const std::exception& e) {  // no thread (a pids limit) or no memory
      if (added) dense.pop_back();
      refused = ResourceExhausted(std::string("the parameter server cannot serve another dense connection: ") + e.what());
    }
  }
  // The answer is small: it goes into the new socket's empty buffer without waiting.
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  WriteMessage(fd, codec::FailedAnswer(refused));
  ::shutdown(fd, SHUT_WR);
  ::close(fd);
}

// Request, apply, answer, until the trainer closes the connection. The thread waits for a sync
// push's step (the core answers it from the thread that completes the step).
void Acceptor::Impl::ServeDenseConnection(Dense& c) {
  const int fd = c.fd;  // stays open until this thread returns
  for (;;) {
    char header[kFrameHeaderBytes];
    if (!ReadAll(fd, header, kFrameHeaderBytes)) return;
    // Taken for a newer connection while it waited: the request is not applied, nor answered.
    int idle = kIdle;
    if (!c.state.compare_exchange_strong(idle, kBusy)) return;
    const size_t length = FrameLength(header);
    Status refused;
    if (header[0] != 0) {
      refused = InvalidArgument("a dense frame must start with a zero byte (no compression)");
    } else if (length > frame_limit) {
      refused = ResourceExhausted("a dense request of " + std::to_string(length) + " bytes is over the server's limit of " +
                                  std::to_string(frame_limit));
    }
    std::unique_ptr<char[]> body;
    if (refused.ok()) {
      body.reset(new (std::nothrow) char[length]);
      if (!body) refused = ResourceExhausted("the parameter server has no memory for a request of " + std::to_string(length) + " bytes");
    }
    codec::Dense m;
    if (refused.ok()) {
      if (!ReadAll(fd, body.get(), length)) return;
      grpc::Slice slice(body.get(), length, grpc::Slice::STATIC_SLICE);
      codec::Reader reader(grpc::ByteBuffer(&slice, 1));
      refused = codec::ParseDense(reader, &m);
    }
    if (!refused.ok()) {
      WriteMessage(fd, codec::FailedAnswer(refused));
      LingerAfterError(fd, frame_limit);
      return;
    }
    // A pull's answer: frame header, field header and values in one buffer, filled by the core.
    std::unique_ptr<char[]> answer;
    size_t answer_bytes = 0;
    // No memory: nullptr, and the core fails the request (this may run on the thread that completes
    // a sync step for every trainer: it must not throw).
    auto out = [&](size_t bytes) -> char* {
      answer_bytes = kFrameHeaderBytes + codec::kBytesField1Header + bytes;
      answer.reset(new (std::nothrow) char[answer_bytes]);
      if (!answer) return nullptr;
      PutFrameHeader(answer.get(), answer_bytes - kFrameHeaderBytes);
      codec::PutBytesField1Header(answer.get() + kFrameHeaderBytes, bytes);
      return answer.get() + kFrameHeaderBytes + codec::kBytesField1Header;
    };
    std::mutex done_mutex;
    std::condition_variable done_cv;
    std::optional<Status> result;
    ServeDense(*core, m, out, [&](Status s) {
      std::lock_guard lock(done_mutex);
      result = std::move(s);
      done_cv.notify_one();
    });
    {
      std::unique_lock lock(done_mutex);
      done_cv.wait(lock, [&] { return result.has_value(); });
    }
    bool written;
    if (!result->ok()) {
      written = WriteMessage(fd, codec::FailedAnswer(*result));
    } else if (answer) {
      written = WriteAll(fd, {{answer.get(), answer_bytes}});
    } else {
      char empty[kFrameHeaderBytes];  // a push's answer: an empty DenseAnswer
      PutFrameHeader(empty, 0);
      written = WriteAll(fd, {{empty, kFrameHeaderBytes}});
    }
    if (!written) return;
    if (result->ok()) c.answered.store(true, std::memory_order_relaxed);
    c.idle_since.store(NowNs(), std::memory_order_relaxed);
    c.state.store(kIdle);
  }
}

// ---------------------------------------------------------------------------------------------
// The trainer's side.

struct Connections::Conn {
  Fd socket;
  bool fresh = true;  // nothing sent yet: the preface goes first
  // The request in flight.
  size_t index = 0;
  std::vector<grpc::Slice> slices;  // the request's bytes, referenced until sent
  char header[kPrefaceBytes + kFrameHeaderBytes];
  std::vector<iovec> out;
  size_t out_first = 0;
  // The answer: frame header and message, read into one buffer.
  std::unique_ptr<char[]> in;
  size_t in_capacity = 0, in_got = 0;
  Clock::time_point deadline;
  bool busy = false;
  int send_error = 0;  // the send failed (errno); the answer may still have come
  Clock::time_point last_used = Clock::now();  // its last answer

  bool sent() const { return out_first == out.size(); }
  // Whole answer read?
  bool answered() const {
    return in_got >= kFrameHeaderBytes && in_got == kFrameHeaderBytes + FrameLength(in.get());
  }
};

Connections::Connections(const std::vector<std::string>& servers, size_t max_message_bytes)
    : servers_(servers), frame_limit_(FrameLimit(max_message_bytes)), conns_(servers.size() * kPerServer) {}

Connections::~Connections() = default;

namespace {

// Connects to one of the endpoint's addresses, waiting until `deadline` at most.
Status ConnectTo(const std::string& endpoint, Clock::time_point deadline, Fd* out) {
  Addresses addresses;
  if (Status s = Resolve(endpoint, &addresses); !s.ok()) return s;
  std::string why = "no address";
  for (addrinfo* a = addresses.list; a; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      why = ErrnoText();
      continue;
    }
    if (::connect(fd.get(), a->ai_addr, a->ai_addrlen) != 0) {
      if (errno != EINPROGRESS) {
        why = ErrnoText();
        continue;
      }
      pollfd p{fd.get(), POLLOUT, 0};
      int ready;
      do {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
        ready = ::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left, 0, INT32_MAX)));
      } while (ready < 0 && errno == EINTR);
      if (ready != 1) {
        why = "no connection within the deadline";
        continue;
      }
      int error = 0;
      socklen_t len = sizeof(error);
      ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &error, &len);
      if (error != 0) {
        why = std::strerror(error);
        continue;
      }
    }
    SetNoDelay(fd.get());
    *out = std::move(fd);
    return Status::Ok();
  }
  return Unavailable("cannot connect: " + why);
}

}  // namespace

Status CheckAddress(const std::string& address) {
  std::string host, port;
  return SplitHostPort(address, &host, &port);
}

// Kept connections the server closed while they were idle (it closes idle ones after
// kDenseIdleTimeout, and a restarted server's old ones are gone): readable or hung up with no
// request in flight. Dropped here, before a request goes out on them: those unused for a second or
// more, in one poll (a training loop's back-to-back calls skip it).
void Connections::DropClosed() {
  const Clock::time_point now = Clock::now();
  std::vector<pollfd>& fds = fds_;
  std::vector<size_t>& slots = slots_;
  fds.clear();
  slots.clear();
  for (size_t slot = 0; slot < conns_.size(); ++slot) {
    if (!conns_[slot] || now - conns_[slot]->last_used < std::chrono::seconds(1)) continue;
    fds.push_back({conns_[slot]->socket.get(), POLLIN | POLLRDHUP, 0});
    slots.push_back(slot);
  }
  if (fds.empty() || ::poll(fds.data(), fds.size(), 0) <= 0) return;
  for (size_t k = 0; k < fds.size(); ++k) {
    if (fds[k].revents != 0) conns_[slots[k]].reset();
  }
}

// One Run: what the caller asked for, and the first failure.
struct Connections::Call {
  const Request& request;
  std::chrono::milliseconds timeout;
  Status first_error;
};

Status Connections::Run(size_t count, std::chrono::milliseconds timeout, const Request& request) {
  // Each server's requests in order; the buffers are kept from call to call (a step allocates nothing).
  queue_.resize(servers_.size());
  for (auto& q : queue_) q.clear();
  taken_.assign(servers_.size(), 0);
  for (size_t i = 0; i < count; ++i) queue_[static_cast<size_t>(request.server_of(i))].push_back(i);
  Call call{request, timeout, Status()};
  DropClosed();
  for (size_t slot = 0; slot < conns_.size(); ++slot) Launch(call, slot);
  Drive(call);
  // Idle connections keep no large buffer.
  for (auto& c : conns_) {
    if (c && c->in_capacity > (64u << 10)) {
      c->in.reset();
      c->in_capacity = 0;
    }
  }
  return call.first_error;
}

void Connections::Fail(Call& call, size_t slot, const Status& why) {
  if (call.first_error.ok()) call.first_error = call.request.annotate(static_cast<int>(slot / kPerServer), why);
  conns_[slot].reset();  // closed: the server sees the end
}

// Starts the slot's server's next request on the slot (connecting first if it has no connection),
// unless none is left or a request failed.
void Connections::Launch(Call& call, size_t slot) {
  const size_t server = slot / kPerServer;
  if (taken_[server] == queue_[server].size() || !call.first_error.ok()) return;
  const Clock::time_point deadline = Clock::now() + call.timeout;
  std::unique_ptr<Conn>& c = conns_[slot];
  if (!c) {
    Fd socket;
    // A server whose packets vanish would otherwise hold every other connection for the kernel's
    // SYN retries, or the whole (sync) deadline.
    const Clock::time_point connected_by = std::min(deadline, Clock::now() + kConnectTimeout);
    if (Status s = ConnectTo(servers_[server], connected_by, &socket); !s.ok()) return Fail(call, slot, s);
    c = std::make_unique<Conn>();
    c->socket = std::move(socket);
  }
  c->index = queue_[server][taken_[server]++];
  c->slices.clear();
  if (!call.request.build(c->index).Dump(&c->slices).ok()) return Fail(call, slot, Internal("cannot read a built request"));
  char* frame_header = c->header;
  if (c->fresh) {
    std::memcpy(c->header, kPreface, kPrefaceBytes);
    frame_header += kPrefaceBytes;
  }
  c->out = FrameOf(c->slices, frame_header);
  if (c->fresh) c->out.front() = {c->header, kPrefaceBytes + kFrameHeaderBytes};
  c->fresh = false;
  c->out_first = 0;
  c->send_error = 0;
  const size_t expect = kFrameHeaderBytes + std::min(call.request.answer_bytes(c->index), frame_limit_);
  if (c->in_capacity < expect || c->in_capacity > 2 * expect + 4096) {
    c->in_capacity = std::max<size_t>(expect, 256);
    c->in.reset(new char[c->in_capacity]);
  }
  c->in_got = 0;
  c->deadline = deadline;
  c->busy = true;
}

// Polls the busy connections, sending their requests and reading their answers, until none is busy.
void Connections::Drive(Call& call) {
  std::vector<pollfd>& fds = fds_;
  std::vector<size_t>& slots = slots_;
  for (;;) {
    fds.clear();
    slots.clear();
    Clock::time_point next = Clock::time_point::max();
    for (size_t slot = 0; slot < conns_.size(); ++slot) {
      const Conn* c = conns_[slot].get();
      if (!c || !c->busy) continue;
      // The answer is read once the request is sent (the server answers only whole requests).
      fds.push_back({c->socket.get(), static_cast<short>(c->sent() ? POLLIN : POLLOUT), 0});
      slots.push_back(slot);
      next = std::min(next, c->deadline);
    }
    if (fds.empty()) break;
    const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(next - Clock::now()).count() + 1;
    if (::poll(fds.data(), fds.size(), static_cast<int>(std::clamp<int64_t>(wait, 0, INT32_MAX))) < 0 && errno != EINTR) {
      for (size_t slot : slots) Fail(call, slot, Internal("poll: " + ErrnoText()));
      break;
    }
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      if (!conns_[slots[k]]->sent()) {
        Send(call, slots[k]);
      } else {
        Receive(call, slots[k]);
      }
    }
    // Late answers fail even while bytes still trickle in.
    const Clock::time_point now = Clock::now();
    for (size_t slot : slots) {
      if (conns_[slot] && conns_[slot]->busy && now >= conns_[slot]->deadline) {
        Fail(call, slot, Status(Code::kDeadlineExceeded, "no answer within " + std::to_string(call.timeout.count()) + " ms"));
      }
    }
  }
}

// Sends more of the slot's request.
void Connections::Send(Call& call, size_t slot) {
  Conn& c = *conns_[slot];
  const ssize_t n = SendSome(c.socket.get(), c.out, c.out_first);
  if (n > 0) {
    Advance(c.out, &c.out_first, static_cast<size_t>(n));
  } else if (errno == EPIPE || errno == ECONNRESET) {
    // The server may have answered and closed (a request it refuses without reading): read
    // that answer rather than report the broken send.
    c.send_error = errno;
    c.out_first = c.out.size();
  } else if (errno != EAGAIN) {
    Fail(call, slot, Unavailable("the dense connection broke: " + ErrnoText()));
  }
}

// Reads more of the slot's answer; a whole answer is consumed (Finish).
void Connections::Receive(Call& call, size_t slot) {
  Conn& c = *conns_[slot];
  auto broke = [&](const std::string& what) {
    Fail(call, slot,
         Unavailable(c.send_error != 0 ? "the dense connection broke: " + std::string(std::strerror(c.send_error)) : what));
  };
  // Read what is there; grow the buffer once the header says the answer is longer than hinted.
  if (c.in_got >= kFrameHeaderBytes) {
    const size_t whole = kFrameHeaderBytes + FrameLength(c.in.get());
    if (whole > c.in_capacity) {
      std::unique_ptr<char[]> bigger(new char[whole]);
      std::memcpy(bigger.get(), c.in.get(), c.in_got);
      c.in = std::move(bigger);
      c.in_capacity = whole;
    }
  }
  const size_t want = c.in_got < kFrameHeaderBytes ? c.in_capacity - c.in_got
                                                   : kFrameHeaderBytes + FrameLength(c.in.get()) - c.in_got;
  ssize_t n;
  do {
    n = ::recv(c.socket.get(), c.in.get() + c.in_got, want, 0);
  } while (n < 0 && errno == EINTR);
  if (n == 0) return broke("the server closed the dense connection");
  if (n < 0) {
    if (errno != EAGAIN) broke("the dense connection broke: " + ErrnoText());
    return;
  }
  c.in_got += static_cast<size_t>(n);
  if (c.in_got < kFrameHeaderBytes) return;
  const size_t length = FrameLength(c.in.get());
  if (c.in[0] != 0 || length > frame_limit_) {
    return Fail(call, slot, Internal("the server sent a malformed frame (" + std::to_string(length) + " bytes)"));
  }
  if (c.in_got > kFrameHeaderBytes + length) return Fail(call, slot, Internal("the server sent more than one answer"));
  if (c.answered()) Finish(call, slot);
}

// Hands the slot's whole answer to the caller, then starts the slot's next request.
void Connections::Finish(Call& call, size_t slot) {
  Conn& c = *conns_[slot];
  grpc::Slice slice(c.in.get() + kFrameHeaderBytes, FrameLength(c.in.get()), grpc::Slice::STATIC_SLICE);
  const Status result = call.request.consume(c.index, grpc::ByteBuffer(&slice, 1));
  c.busy = false;
  c.slices.clear();
  c.last_used = Clock::now();
  if (!result.ok() && call.first_error.ok()) call.first_error = result;
  // The server may close a connection after a failed answer; a new one costs little.
  if (!result.ok() || c.send_error != 0) conns_[slot].reset();
  Launch(call, slot);
}

}  // namespace fleet::ps::bulk
