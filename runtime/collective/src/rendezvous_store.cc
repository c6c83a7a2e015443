#include "fleet/collective/rendezvous_store.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <list>
#include <unordered_map>

#include "socket.h"

namespace fleet::collective {
namespace {

using net::Clock;

constexpr char kMagic[4] = {'F', 'L', 'K', 'V'};
constexpr size_t kRequestHeader = 4 + 1 + 4 + 4;
constexpr size_t kResponseHeader = 1 + 4;
constexpr size_t kMaxConnections = 4096;

enum Op : uint8_t { kSet = 1, kGet = 2, kWait = 3 };
enum StatusCode : uint8_t { kOk = 0, kNotFound = 1, kTimeout = 2, kError = 3 };

void PutU32(std::string& out, uint32_t v) {
  const char bytes[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8),
                         static_cast<char>(v)};
  out.append(bytes, 4);
}

uint32_t GetU32(const char* p) {
  const auto* u = reinterpret_cast<const unsigned char*>(p);
  return (uint32_t{u[0]} << 24) | (uint32_t{u[1]} << 16) | (uint32_t{u[2]} << 8) | uint32_t{u[3]};
}

std::vector<std::string> SplitKeys(const std::string& joined) {
  std::vector<std::string> keys;
  size_t start = 0;
  while (start <= joined.size()) {
    const size_t end = std::min(joined.find('\0', start), joined.size());
    keys.push_back(joined.substr(start, end - start));
    start = end + 1;
  }
  return keys;
}

std::string JoinKeys(const std::vector<std::string>& keys) {
  std::string joined;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (i) joined.push_back('\0');
    joined += keys[i];
  }
  return joined;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Server

struct RendezvousStoreServer::Impl {
  struct Connection {
    net::Fd fd;
    std::string in;
    std::string out;
    bool close_after_flush = false;
    bool waiting = false;
    std::vector<std::string> wait_keys;
    Clock::time_point wait_deadline;
  };

  net::Fd listener;
  net::Fd wake;  // eventfd: Stop() wakes the loop
  std::list<Connection> connections;
  std::unordered_map<std::string, std::vector<char>> data;
  size_t stored_bytes = 0;
  std::atomic<bool> stopping{false};
  std::atomic<size_t>* malformed = nullptr;

  static void Respond(Connection& c, uint8_t status, const char* payload, size_t size) {
    c.out.push_back(static_cast<char>(status));
    PutU32(c.out, static_cast<uint32_t>(size));
    c.out.append(payload, size);
  }
  static void Respond(Connection& c, uint8_t status, const std::string& payload = "") {
    Respond(c, status, payload.data(), payload.size());
  }

  void Refuse(Connection& c, const std::string& why) {
    malformed->fetch_add(1);
    Respond(c, kError, "malformed request: " + why);
    c.close_after_flush = true;
    c.in.clear();
  }

  std::vector<std::string> Missing(const std::vector<std::string>& keys) const {
    std::vector<std::string> missing;
    for (const std::string& k : keys) {
      if (!data.count(k)) missing.push_back(k);
    }
    return missing;
  }

  // Completes a WAIT whose keys are all set, or whose deadline passed.
  void CheckWait(Connection& c, Clock::time_point now) {
    if (!c.waiting) return;
    std::vector<std::string> missing = Missing(c.wait_keys);
    if (missing.empty()) {
      Respond(c, kOk);
    } else if (now >= c.wait_deadline) {
      Respond(c, kTimeout, JoinKeys(missing));
    } else {
      return;
    }
    c.waiting = false;
    c.wait_keys.clear();
  }

  // Handles the complete requests in c.in, one at a time: none while a WAIT is pending or a
  // response is still being sent (the protocol is strictly request/response, so a client that
  // pipelines requests without reading the answers cannot make us buffer without bound).
  void Process(Connection& c) {
    while (!c.waiting && !c.close_after_flush && c.out.empty() && c.in.size() >= kRequestHeader) {
      if (std::memcmp(c.in.data(), kMagic, 4) != 0) return Refuse(c, "bad magic (not a fleet rendezvous client)");
      const uint8_t op = static_cast<uint8_t>(c.in[4]);
      const uint32_t key_len = GetU32(c.in.data() + 5);
      const uint32_t value_len = GetU32(c.in.data() + 9);
      if (op != kSet && op != kGet && op != kWait) return Refuse(c, "unknown op " + std::to_string(op));
      const size_t key_limit = op == kWait ? kStoreMaxWaitKeysBytes : kStoreMaxKeyBytes;
      if (key_len == 0 || key_len > key_limit) {
        return Refuse(c, "key length " + std::to_string(key_len) + " outside 1.." + std::to_string(key_limit));
      }
      const size_t value_limit = op == kSet ? kStoreMaxValueBytes : op == kWait ? 4 : 0;
      if (value_len > value_limit || (op == kWait && value_len != 4)) {
        return Refuse(c, "value length " + std::to_string(value_len) + " invalid for op " + std::to_string(op));
      }
      const size_t frame = kRequestHeader + key_len + value_len;
      if (c.in.size() < frame) return;  // the rest is on its way
      std::string key = c.in.substr(kRequestHeader, key_len);
      const char* value = c.in.data() + kRequestHeader + key_len;
      if (op == kSet) {
        if (key.find('\0') != std::string::npos) return Refuse(c, "key contains NUL");
        auto it = data.find(key);
        const size_t old_size = it == data.end() ? 0 : it->second.size();
        if (stored_bytes - old_size + value_len > kStoreMaxTotalBytes) {
          Respond(c, kError, "store full: " + std::to_string(kStoreMaxTotalBytes) + " bytes stored");
        } else {
          stored_bytes = stored_bytes - old_size + value_len;
          data[key] = std::vector<char>(value, value + value_len);
          Respond(c, kOk);
        }
      } else if (op == kGet) {
        auto it = data.find(key);
        if (it == data.end()) {
          Respond(c, kNotFound);
        } else {
          Respond(c, kOk, it->second.data(), it->second.size());
        }
      } else {
        c.waiting = true;
        c.wait_keys = SplitKeys(key);
        c.wait_deadline = Clock::now() + std::chrono::milliseconds(GetU32(value));
        for (const std::string& k : c.wait_keys) {
          if (k.empty()) {
            c.waiting = false;
            return Refuse(c, "empty key in WAIT");
          }
        }
      }
      c.in.erase(0, frame);
      CheckWait(c, Clock::now());
      if (op == kSet) {
        for (Connection& other : connections) CheckWait(other, Clock::now());
      }
    }
  }

  void Loop() {
    std::vector<pollfd> fds;
    std::vector<Connection*> order;
    char buffer[64 << 10];
    while (!stopping.load()) {
      fds.clear();
      order.clear();
      fds.push_back(pollfd{wake.get(), POLLIN, 0});
      fds.push_back(pollfd{listener.get(), POLLIN, 0});
      Clock::time_point next = Clock::now() + std::chrono::hours(1);
      for (Connection& c : connections) {
        short events = 0;
        if (!c.waiting && !c.close_after_flush && c.out.empty()) events |= POLLIN;
        if (!c.out.empty()) events |= POLLOUT;
        if (c.waiting) next = std::min(next, c.wait_deadline);
        fds.push_back(pollfd{c.fd.get(), events, 0});
        order.push_back(&c);
      }
      const int n = ::poll(fds.data(), fds.size(), net::MillisLeft(next));
      if (n < 0 && errno != EINTR) return;
      const Clock::time_point now = Clock::now();
      if (fds[0].revents & POLLIN) return;  // Stop()
      for (size_t i = 0; i < order.size(); ++i) {
        Connection& c = *order[i];
        const short revents = fds[i + 2].revents;
        if (revents & (POLLIN | POLLHUP | POLLERR)) {
          if (c.waiting || c.close_after_flush) {
            if (revents & (POLLHUP | POLLERR)) c.fd.Reset();  // gone while waiting
          } else {
            const ssize_t got = ::recv(c.fd.get(), buffer, sizeof buffer, 0);
            if (got > 0) {
              c.in.append(buffer, static_cast<size_t>(got));
              Process(c);
            } else if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
              c.fd.Reset();
            }
          }
        }
        if (c.fd.valid()) CheckWait(c, now);
        if (c.fd.valid() && !c.out.empty()) {
          const ssize_t sent = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
          if (sent > 0) {
            c.out.erase(0, static_cast<size_t>(sent));
            if (c.out.empty()) Process(c);  // requests that arrived behind this response
          } else if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            c.fd.Reset();
          }
        }
        if (c.fd.valid() && c.close_after_flush && c.out.empty()) c.fd.Reset();
      }
      connections.remove_if([](const Connection& c) { return !c.fd.valid(); });
      if (fds[1].revents & POLLIN) {
        while (true) {
          net::Fd fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
          if (!fd.valid()) break;
          if (connections.size() >= kMaxConnections) continue;  // closed right away
          net::SetNoDelay(fd.get());
          connections.emplace_back();
          connections.back().fd = std::move(fd);
        }
      }
    }
  }
};

Result<std::unique_ptr<RendezvousStoreServer>> RendezvousStoreServer::Start(int port,
                                                                            std::chrono::milliseconds bind_timeout) {
  auto impl = std::make_unique<Impl>();
  auto listener = net::Listen(port, Clock::now() + bind_timeout);
  if (!listener) return Error{"rendezvous store: " + listener.error()};
  auto bound = net::LocalPort(listener->get());
  if (!bound) return Error{"rendezvous store: " + bound.error()};
  impl->listener = std::move(*listener);
  impl->wake = net::Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!impl->wake.valid()) return Error{std::string("rendezvous store: eventfd failed: ") + std::strerror(errno)};
  return std::unique_ptr<RendezvousStoreServer>(new RendezvousStoreServer(std::move(impl), *bound));
}

RendezvousStoreServer::RendezvousStoreServer(std::unique_ptr<Impl> impl, int port)
    : impl_(std::move(impl)), port_(port) {
  impl_->malformed = &malformed_frames_;
  thread_ = std::thread([this] { impl_->Loop(); });
}

void RendezvousStoreServer::Stop() {
  if (!thread_.joinable()) return;
  impl_->stopping.store(true);
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(impl_->wake.get(), &one, sizeof one);
  thread_.join();
  impl_->connections.clear();
  impl_->listener.Reset();
}

RendezvousStoreServer::~RendezvousStoreServer() { Stop(); }

// ---------------------------------------------------------------------------------------------
// Client

Result<std::unique_ptr<RendezvousStoreClient>> RendezvousStoreClient::Connect(const std::string& host, int port,
                                                                              std::chrono::milliseconds connect_timeout,
                                                                              std::chrono::milliseconds io_timeout) {
  auto fd = net::ConnectWithRetry(host, port, Clock::now() + connect_timeout);
  if (!fd) return Error{fd.error()};
  return std::unique_ptr<RendezvousStoreClient>(
      new RendezvousStoreClient(fd->Release(), host + ":" + std::to_string(port), io_timeout));
}

RendezvousStoreClient::RendezvousStoreClient(int fd, std::string endpoint, std::chrono::milliseconds io_timeout)
    : fd_(fd), endpoint_(std::move(endpoint)), io_timeout_(io_timeout) {}

RendezvousStoreClient::~RendezvousStoreClient() {
  if (fd_ >= 0) ::close(fd_);
}

Result<RendezvousStoreClient::Response> RendezvousStoreClient::RoundTrip(uint8_t op, const std::string& key,
                                                                         const std::vector<char>& value,
                                                                         std::chrono::milliseconds extra_wait) {
  if (fd_ < 0) return Error{"the connection to the rendezvous store at " + endpoint_ + " was lost earlier"};
  const Clock::time_point deadline = Clock::now() + io_timeout_ + extra_wait;
  std::string frame(kMagic, 4);
  frame.push_back(static_cast<char>(op));
  PutU32(frame, static_cast<uint32_t>(key.size()));
  PutU32(frame, static_cast<uint32_t>(value.size()));
  frame += key;
  frame.append(value.data(), value.size());
  auto fail = [&](const std::string& why) -> Error {
    ::close(fd_);  // the stream is out of step now: no further requests on it
    fd_ = -1;
    return Error{"rendezvous store at " + endpoint_ + ": " + why};
  };
  if (auto s = net::SendAll(fd_, frame.data(), frame.size(), deadline); !s) return fail(s.error());
  char header[kResponseHeader];
  auto got = net::RecvAll(fd_, header, sizeof header, deadline);
  if (!got) return fail(got.error());
  if (*got < sizeof header) return fail("the server closed the connection");
  Response response;
  response.status = static_cast<uint8_t>(header[0]);
  const uint32_t size = GetU32(header + 1);
  if (response.status > kError || size > kStoreMaxValueBytes + kStoreMaxWaitKeysBytes) {
    return fail("malformed response (status " + std::to_string(response.status) + ", " + std::to_string(size) + " bytes)");
  }
  response.payload.resize(size);
  got = net::RecvAll(fd_, response.payload.data(), size, deadline);
  if (!got) return fail(got.error());
  if (*got < size) return fail("the server closed the connection");
  if (response.status == kError) {
    return Error{"rendezvous store at " + endpoint_ + ": " + std::string(response.payload.begin(), response.payload.end())};
  }
  return response;
}

Status RendezvousStoreClient::Set(const std::string& key, const std::vector<char>& value) {
  if (key.empty() || key.size() > kStoreMaxKeyBytes || key.find('\0') != std::string::npos) {
    return Error{"rendezvous store: invalid key '" + key + "'"};
  }
  if (value.size() > kStoreMaxValueBytes) {
    return Error{"rendezvous store: value of " + std::to_string(value.size()) + " bytes over the limit of " +
                 std::to_string(kStoreMaxValueBytes)};
  }
  auto r = RoundTrip(kSet, key, value, std::chrono::milliseconds(0));
  if (!r) return Error{r.error()};
  return OkStatus();
}

Result<std::optional<std::vector<char>>> RendezvousStoreClient::Get(const std::string& key) {
  if (key.empty() || key.size() > kStoreMaxKeyBytes) return Error{"rendezvous store: invalid key '" + key + "'"};
  auto r = RoundTrip(kGet, key, {}, std::chrono::milliseconds(0));
  if (!r) return Error{r.error()};
  if (r->status == kNotFound) return std::optional<std::vector<char>>();
  return std::optional<std::vector<char>>(std::move(r->payload));
}

Result<std::vector<std::string>> RendezvousStoreClient::Wait(const std::vector<std::string>& keys,
                                                            std::chrono::milliseconds timeout) {
  if (keys.empty()) return std::vector<std::string>{};
  for (const std::string& k : keys) {
    if (k.empty() || k.size() > kStoreMaxKeyBytes || k.find('\0') != std::string::npos) {
      return Error{"rendezvous store: invalid key '" + k + "'"};
    }
  }
  const std::string joined = JoinKeys(keys);
  if (joined.size() > kStoreMaxWaitKeysBytes) return Error{"rendezvous store: too many keys in one wait"};
  const auto ms = static_cast<uint32_t>(std::clamp<long long>(timeout.count(), 0, 0x7fffffff));
  std::string encoded;
  PutU32(encoded, ms);
  auto r = RoundTrip(kWait, joined, std::vector<char>(encoded.begin(), encoded.end()), timeout);
  if (!r) return Error{r.error()};
  if (r->status == kOk) return std::vector<std::string>{};
  if (r->status != kTimeout) return Error{"rendezvous store at " + endpoint_ + ": unexpected WAIT response"};
  return SplitKeys(std::string(r->payload.begin(), r->payload.end()));
}

}  // namespace fleet::collective
