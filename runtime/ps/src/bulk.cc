#include "bulk.h"

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
#include <deque>
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
// Connections served at once (each dense one is a thread); more are closed as they come.
constexpr size_t kMaxConnections = 4096;

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

struct Acceptor::Impl {
  Fd listener;
  Fd wake;  // an eventfd: Shutdown wakes the accept loop with it
  ServerCore* core = nullptr;
  grpc::Server* grpc_server = nullptr;
  size_t frame_limit = 0;
  std::thread accept_thread;

  struct Conn {
    int fd = -1;  // -1 once closed or handed to gRPC (guarded by mutex)
    std::thread thread;
    bool finished = false;
  };
  mutable std::mutex mutex;
  std::list<Conn> conns;
  bool stopping = false;
  std::atomic<size_t> dense_open{0};

  void AcceptLoop();
  void Handle(Conn* conn);
  bool IsDense(int fd);
  void ServeDenseConnection(int fd);
  void Release(Conn* conn, bool close_it);
};

Status Acceptor::Listen(const std::string& address, std::unique_ptr<Acceptor>* out) {
  Addresses addresses;
  if (Status s = Resolve(address, &addresses); !s.ok()) return s;
  std::string why = "no address";
  for (addrinfo* a = addresses.list; a; a = a->ai_next) {
    Fd fd(::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol));
    if (!fd.valid()) {
      why = ErrnoText();
      continue;
    }
    int one = 1, zero = 0;
    // SO_REUSEADDR (restart while old connections linger in TIME_WAIT), but not SO_REUSEPORT: a
    // second server on the same port must fail, not share it.
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    // "[::]" serves IPv4 too, as gRPC's listener did.
    if (a->ai_family == AF_INET6) ::setsockopt(fd.get(), IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    if (::bind(fd.get(), a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd.get(), SOMAXCONN) != 0) {
      why = ErrnoText();
      continue;
    }
    sockaddr_storage bound{};
    socklen_t len = sizeof(bound);
    ::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&bound), &len);
    std::unique_ptr<Acceptor> acceptor(new Acceptor());
    acceptor->port_ = ntohs(bound.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port
                                                        : reinterpret_cast<sockaddr_in*>(&bound)->sin_port);
    acceptor->impl_ = std::make_unique<Impl>();
    acceptor->impl_->listener = std::move(fd);
    acceptor->impl_->wake = Fd(::eventfd(0, EFD_CLOEXEC));
    if (!acceptor->impl_->wake.valid()) return Internal("eventfd: " + ErrnoText());
    *out = std::move(acceptor);
    return Status::Ok();
  }
  return Unavailable("cannot listen on " + address + ": " + why);
}

void Acceptor::Start(ServerCore* core, grpc::Server* grpc_server, size_t max_message_bytes) {
  impl_->core = core;
  impl_->grpc_server = grpc_server;
  impl_->frame_limit = FrameLimit(max_message_bytes);
  impl_->accept_thread = std::thread([impl = impl_.get()] { impl->AcceptLoop(); });
}

size_t Acceptor::open_connections() const { return impl_ ? impl_->dense_open.load() : 0; }

void Acceptor::Shutdown() {
  if (!impl_ || !impl_->accept_thread.joinable()) return;
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(impl_->wake.get(), &one, sizeof(one));
  impl_->accept_thread.join();
  {
    // Wakes every connection thread's read; each closes its socket itself.
    std::lock_guard lock(impl_->mutex);
    for (Impl::Conn& c : impl_->conns) {
      if (c.fd >= 0) ::shutdown(c.fd, SHUT_RDWR);
    }
  }
  for (Impl::Conn& c : impl_->conns) c.thread.join();
  impl_->conns.clear();
}

Acceptor::~Acceptor() { Shutdown(); }

void Acceptor::Impl::AcceptLoop() {
  for (;;) {
    pollfd fds[2] = {{listener.get(), POLLIN, 0}, {wake.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) continue;  // EINTR
    if (fds[1].revents != 0) return;
    const int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      // Out of descriptors (EMFILE, ENFILE) or memory: the connection waits in the backlog; try
      // again shortly instead of spinning. Others (a client that gave up) need nothing.
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      continue;
    }
    std::lock_guard lock(mutex);
    for (auto it = conns.begin(); it != conns.end();) {
      if (!it->finished) {
        ++it;
        continue;
      }
      it->thread.join();
      it = conns.erase(it);
    }
    if (conns.size() >= kMaxConnections) {
      ::close(fd);
      continue;
    }
    Conn& conn = conns.emplace_back();
    conn.fd = fd;
    conn.thread = std::thread([this, c = &conn] { Handle(c); });
  }
}

// Gives up the thread's claim on the connection: closes it (or not, when gRPC has it now).
void Acceptor::Impl::Release(Conn* conn, bool close_it) {
  std::lock_guard lock(mutex);
  if (close_it) ::close(conn->fd);
  conn->fd = -1;
  conn->finished = true;
}

void Acceptor::Impl::Handle(Conn* conn) {
  const int fd = conn->fd;
  SetNoDelay(fd);
  if (!IsDense(fd)) {
    // gRPC's (or garbage, which gRPC refuses and closes). gRPC reads it without blocking.
    std::lock_guard lock(mutex);
    conn->finished = true;
    if (stopping || ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK) != 0) {
      ::close(fd);
    } else {
      // Safe outside a gRPC call: Shutdown joins this thread before the gRPC server shuts down.
      grpc::AddInsecureChannelFromFd(grpc_server, fd);
    }
    conn->fd = -1;
    return;
  }
  char preface[kPrefaceBytes];
  if (ReadAll(fd, preface, kPrefaceBytes)) {
    dense_open.fetch_add(1);
    ServeDenseConnection(fd);
    dense_open.fetch_sub(1);
  }
  Release(conn, true);
}

// A gRPC client sends its own preface at once, so the first bytes decide; a dense client's preface
// may arrive in pieces. The bytes stay in the socket for whoever serves it.
bool Acceptor::Impl::IsDense(int fd) {
  timeval limit{std::chrono::duration_cast<std::chrono::seconds>(kClassifyTimeout).count(), 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof(limit));
  char head[kPrefaceBytes];
  ssize_t n;
  do {
    n = ::recv(fd, head, sizeof(head), MSG_PEEK);
  } while (n < 0 && errno == EINTR);
  bool dense = n > 0 && std::memcmp(head, kPreface, static_cast<size_t>(n)) == 0;
  if (dense && static_cast<size_t>(n) < kPrefaceBytes) {
    n = ::recv(fd, head, sizeof(head), MSG_PEEK | MSG_WAITALL);
    dense = n == static_cast<ssize_t>(kPrefaceBytes) && std::memcmp(head, kPreface, kPrefaceBytes) == 0;
  }
  timeval none{0, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &none, sizeof(none));
  return dense;
}

// Request, apply, answer, until the trainer closes the connection. The thread waits for a sync
// push's step (the core answers it from the thread that completes the step).
void Acceptor::Impl::ServeDenseConnection(int fd) {
  for (;;) {
    char header[kFrameHeaderBytes];
    if (!ReadAll(fd, header, kFrameHeaderBytes)) return;
    const size_t length = FrameLength(header);
    if (header[0] != 0) {
      WriteMessage(fd, codec::FailedAnswer(InvalidArgument("a dense frame must start with a zero byte (no compression)")));
      return;
    }
    if (length > frame_limit) {
      WriteMessage(fd, codec::FailedAnswer(ResourceExhausted("a dense request of " + std::to_string(length) +
                                                             " bytes is over the server's limit of " +
                                                             std::to_string(frame_limit))));
      return;
    }
    std::unique_ptr<char[]> body(new char[length]);
    if (!ReadAll(fd, body.get(), length)) return;
    grpc::Slice slice(body.get(), length, grpc::Slice::STATIC_SLICE);
    codec::Reader reader(grpc::ByteBuffer(&slice, 1));
    codec::Dense m;
    if (Status s = codec::ParseDense(reader, &m); !s.ok()) {
      WriteMessage(fd, codec::FailedAnswer(s));
      return;
    }
    // A pull's answer: frame header, field header and values in one buffer, filled by the core.
    std::unique_ptr<char[]> answer;
    size_t answer_bytes = 0;
    auto out = [&](size_t bytes) {
      answer_bytes = kFrameHeaderBytes + codec::kBytesField1Header + bytes;
      answer.reset(new char[answer_bytes]);
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
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (::poll(&p, 1, static_cast<int>(std::clamp<int64_t>(left, 0, INT32_MAX))) != 1) {
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

Status Connections::Run(size_t count, std::chrono::milliseconds timeout, const Request& request) {
  std::vector<std::deque<size_t>> queue(servers_.size());
  for (size_t i = 0; i < count; ++i) queue[static_cast<size_t>(request.server_of(i))].push_back(i);
  Status first_error;
  auto fail = [&](size_t slot, const Status& why) {
    if (first_error.ok()) first_error = request.annotate(static_cast<int>(slot / kPerServer), why);
    conns_[slot].reset();  // closed: the server sees the end
  };
  auto launch = [&](size_t slot) {
    const size_t server = slot / kPerServer;
    if (queue[server].empty() || !first_error.ok()) return;
    const Clock::time_point deadline = Clock::now() + timeout;
    std::unique_ptr<Conn>& c = conns_[slot];
    if (!c) {
      Fd socket;
      if (Status s = ConnectTo(servers_[server], deadline, &socket); !s.ok()) return fail(slot, s);
      c = std::make_unique<Conn>();
      c->socket = std::move(socket);
    }
    c->index = queue[server].front();
    queue[server].pop_front();
    c->slices.clear();
    if (!request.build(c->index).Dump(&c->slices).ok()) return fail(slot, Internal("cannot read a built request"));
    char* frame_header = c->header;
    if (c->fresh) {
      std::memcpy(c->header, kPreface, kPrefaceBytes);
      frame_header += kPrefaceBytes;
    }
    c->out = FrameOf(c->slices, frame_header);
    if (c->fresh) c->out.front() = {c->header, kPrefaceBytes + kFrameHeaderBytes};
    c->fresh = false;
    c->out_first = 0;
    const size_t expect = kFrameHeaderBytes + std::min(request.answer_bytes(c->index), frame_limit_);
    if (c->in_capacity < expect || c->in_capacity > 2 * expect + 4096) {
      c->in_capacity = std::max<size_t>(expect, 256);
      c->in.reset(new char[c->in_capacity]);
    }
    c->in_got = 0;
    c->deadline = deadline;
    c->busy = true;
  };
  for (size_t slot = 0; slot < conns_.size(); ++slot) launch(slot);

  std::vector<pollfd> fds;
  std::vector<size_t> slots;
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
      for (size_t slot : slots) fail(slot, Internal("poll: " + ErrnoText()));
      break;
    }
    const Clock::time_point now = Clock::now();
    for (size_t k = 0; k < fds.size(); ++k) {
      const size_t slot = slots[k];
      Conn& c = *conns_[slot];
      if (fds[k].revents == 0) {
        if (now >= c.deadline) {
          fail(slot, Status(Code::kDeadlineExceeded, "no answer within " + std::to_string(timeout.count()) + " ms"));
        }
        continue;
      }
      if (!c.sent()) {
        const ssize_t n = SendSome(c.socket.get(), c.out, c.out_first);
        if (n < 0 && errno != EAGAIN) {
          fail(slot, Unavailable("the dense connection broke: " + ErrnoText()));
        } else if (n > 0) {
          Advance(c.out, &c.out_first, static_cast<size_t>(n));
        }
        continue;
      }
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
      if (n == 0) {
        fail(slot, Unavailable("the server closed the dense connection"));
        continue;
      }
      if (n < 0) {
        if (errno != EAGAIN) fail(slot, Unavailable("the dense connection broke: " + ErrnoText()));
        continue;
      }
      c.in_got += static_cast<size_t>(n);
      if (c.in_got < kFrameHeaderBytes) continue;
      const size_t length = FrameLength(c.in.get());
      if (c.in[0] != 0 || length > frame_limit_) {
        fail(slot, Internal("the server sent a malformed frame (" + std::to_string(length) + " bytes)"));
        continue;
      }
      if (c.in_got > kFrameHeaderBytes + length) {
        fail(slot, Internal("the server sent more than one answer"));
        continue;
      }
      if (!c.answered()) continue;
      grpc::Slice slice(c.in.get() + kFrameHeaderBytes, length, grpc::Slice::STATIC_SLICE);
      const Status result = request.consume(c.index, grpc::ByteBuffer(&slice, 1));
      c.busy = false;
      c.slices.clear();
      if (!result.ok() && first_error.ok()) first_error = result;
      launch(slot);
    }
  }
  // Idle connections keep no large buffer.
  for (auto& c : conns_) {
    if (c && c->in_capacity > (64u << 10)) {
      c->in.reset();
      c->in_capacity = 0;
    }
  }
  return first_error;
}

}  // namespace fleet::ps::bulk
