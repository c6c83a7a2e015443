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
#include <unordered_set>

#include "fleet/base/heap.h"
#include "socket.h"

namespace fleet::collective {
namespace {

using net::Clock;

constexpr char kMagic[4] = {'F', 'L', 'K', 'V'};
constexpr size_t kRequestHeader = 4 + 1 + 4 + 4;
constexpr size_t kResponseHeader = 1 + 4;

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
    bool served = false;  // a whole request came: a rank, not a peer that connects and says nothing
    // A pending WAIT: its keys as listed, how many distinct ones are still unset, its deadline.
    bool waiting = false;
    std::vector<std::string> wait_keys;
    size_t wait_missing = 0;
    Clock::time_point wait_deadline;
  };

  RendezvousStoreLimits limits;
  net::Fd listener;
  net::Fd wake;  // eventfd: Stop() wakes the loop
  std::list<Connection> connections;  // a list: waiters below point into it
  std::unordered_map<std::string, std::vector<char>> data;
  size_t stored_bytes = 0;
  // Unset key -> the connections waiting for it; `waiting_keys` counts the entries. A SET wakes its
  // key's waiters only, so waits cost nothing to requests about other keys.
  std::unordered_map<std::string, std::unordered_set<Connection*>> waiters;
  size_t waiting_keys = 0;
  std::atomic<bool> stopping{false};
  RendezvousStoreServer* owner = nullptr;

  static void Respond(Connection& c, uint8_t status, const char* payload, size_t size) {
    c.out.push_back(static_cast<char>(status));
    PutU32(c.out, static_cast<uint32_t>(size));
    c.out.append(payload, size);
  }
  static void Respond(Connection& c, uint8_t status, const std::string& payload = "") {
    Respond(c, status, payload.data(), payload.size());
  }

  // A buffer that held a large frame does not keep its memory for the life of the connection.
  static void Trim(std::string& buffer) {
    if (buffer.empty() && buffer.capacity() > (4 << 10)) std::string().swap(buffer);
    if (buffer.size() < (64 << 10) && buffer.capacity() > (1 << 20)) buffer.shrink_to_fit();
  }

  void Refuse(Connection& c, const std::string& why) {
    owner->malformed_frames_.fetch_add(1);
    Respond(c, kError, "malformed request: " + why);
    c.close_after_flush = true;
    c.in.clear();
  }

  // Waits on many distinct keys take a few hundred bytes each; once they are all gone the memory goes
  // back to the system, not only to malloc's free lists (it stayed with the process before).
  size_t waiting_peak = 0;
  void Count() {
    owner->waiting_keys_.store(waiting_keys);
    waiting_peak = std::max(waiting_peak, waiting_keys);
    if (waiting_keys == 0 && waiting_peak >= (64 << 10)) {
      waiters = {};
      ReturnFreedHeap();
      waiting_peak = 0;
    }
  }

  // Starts a WAIT (answered at once when every key is set already), or refuses it past a limit.
  void StartWait(Connection& c, std::vector<std::string> keys, std::chrono::milliseconds timeout) {
    if (keys.size() > limits.max_wait_keys) {
      return Respond(c, kError, "WAIT on " + std::to_string(keys.size()) + " keys: at most " +
                                    std::to_string(limits.max_wait_keys) + " per request");
    }
    if (waiting_keys + keys.size() > limits.max_waiting_keys) {
      return Respond(c, kError, "store busy: " + std::to_string(waiting_keys) + " keys are waited on, at most " +
                                    std::to_string(limits.max_waiting_keys) + " in all");
    }
    c.wait_keys = std::move(keys);
    c.wait_missing = 0;
    for (const std::string& k : c.wait_keys) {
      if (!data.count(k) && waiters[k].insert(&c).second) ++c.wait_missing;  // a key listed twice counts once
    }
    waiting_keys += c.wait_missing;
    Count();
    if (c.wait_missing == 0) {
      c.wait_keys = {};
      return Respond(c, kOk);
    }
    c.waiting = true;
    c.wait_deadline = Clock::now() + timeout;
  }

  // Ends c's WAIT (timed out, or its peer is gone): it leaves the index of every key still unset.
  void EndWait(Connection& c) {
    for (const std::string& k : c.wait_keys) {
      auto it = waiters.find(k);
      if (it == waiters.end() || it->second.erase(&c) == 0) continue;
      --waiting_keys;
      if (it->second.empty()) waiters.erase(it);
    }
    Count();
    c.waiting = false;
    c.wait_keys = {};  // frees the list
    c.wait_missing = 0;
  }

  // `key` was just set for the first time: its waiters have one key less to wait for.
  void Notify(const std::string& key) {
    auto it = waiters.find(key);
    if (it == waiters.end()) return;
    for (Connection* w : it->second) {
      --waiting_keys;
      if (--w->wait_missing > 0) continue;
      w->waiting = false;  // every other key of its WAIT was set before (and left the index then)
      w->wait_keys = {};
      Respond(*w, kOk);
    }
    waiters.erase(it);
    Count();
  }

  void TimeOutWait(Connection& c) {
    std::vector<std::string> missing;
    for (const std::string& k : c.wait_keys) {
      if (!data.count(k)) missing.push_back(k);
    }
    Respond(c, kTimeout, JoinKeys(missing));
    EndWait(c);
  }

  // Room for a new connection: when full, the oldest that has not sent a whole request goes (peers
  // that connect and say nothing cannot lock the ranks out). false: none such, the new one goes.
  bool MakeRoom() {
    if (connections.size() < limits.max_connections) return true;
    for (auto it = connections.begin(); it != connections.end(); ++it) {
      if (!it->served && !it->waiting) {  // oldest first: new ones are appended
        connections.erase(it);
        return true;
      }
    }
    return false;
  }

  // Closes c (it is removed from the list after this round); a pending WAIT ends with it.
  void Drop(Connection& c) {
    if (c.waiting) EndWait(c);
    c.fd.Reset();
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
        const bool is_new = it == data.end();
        const size_t old_size = is_new ? 0 : it->second.size();
        if (stored_bytes - old_size + value_len > kStoreMaxTotalBytes) {
          Respond(c, kError, "store full: " + std::to_string(kStoreMaxTotalBytes) + " bytes stored");
        } else {
          stored_bytes = stored_bytes - old_size + value_len;
          data[key] = std::vector<char>(value, value + value_len);
          Respond(c, kOk);
          if (is_new) Notify(key);
        }
      } else if (op == kGet) {
        auto it = data.find(key);
        if (it == data.end()) {
          Respond(c, kNotFound);
        } else {
          Respond(c, kOk, it->second.data(), it->second.size());
        }
      } else {
        std::vector<std::string> keys = SplitKeys(key);
        for (const std::string& k : keys) {
          if (k.empty()) return Refuse(c, "empty key in WAIT");
        }
        StartWait(c, std::move(keys), std::chrono::milliseconds(GetU32(value)));
      }
      c.in.erase(0, frame);
      c.served = true;
    }
    Trim(c.in);
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
        // A waiting connection reads nothing (requests are answered one at a time) but still
        // watches for its peer's end (POLLRDHUP): it must not sit out the WAIT's deadline, up to
        // 49 days, once nobody is there to read the answer.
        if (c.waiting) events |= POLLRDHUP;
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
        if (!c.fd.valid()) continue;
        const short revents = fds[i + 2].revents;
        if (c.waiting) {
          if (revents & (POLLRDHUP | POLLHUP | POLLERR)) Drop(c);  // gone while waiting
        } else if (revents & (POLLIN | POLLHUP | POLLERR)) {
          if (c.close_after_flush) {
            if (revents & (POLLHUP | POLLERR)) Drop(c);
          } else {
            const ssize_t got = ::recv(c.fd.get(), buffer, sizeof buffer, 0);
            if (got > 0) {
              c.in.append(buffer, static_cast<size_t>(got));
              Process(c);
            } else if (got == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
              Drop(c);
            }
          }
        }
        if (c.fd.valid() && c.waiting && now >= c.wait_deadline) TimeOutWait(c);
        if (c.fd.valid() && !c.out.empty()) {
          const ssize_t sent = ::send(c.fd.get(), c.out.data(), c.out.size(), MSG_NOSIGNAL);
          if (sent > 0) {
            c.out.erase(0, static_cast<size_t>(sent));
            if (c.out.empty()) {
              Trim(c.out);
              Process(c);  // requests that arrived behind this response
            }
          } else if (sent < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            Drop(c);
          }
        }
        if (c.fd.valid() && c.close_after_flush && c.out.empty()) Drop(c);
      }
      connections.remove_if([](const Connection& c) { return !c.fd.valid(); });
      if (fds[1].revents & POLLIN) {
        while (true) {
          net::Fd fd(::accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
          if (!fd.valid()) break;
          if (!MakeRoom()) continue;  // closed right away
          net::SetNoDelay(fd.get());
          connections.emplace_back();
          connections.back().fd = std::move(fd);
        }
      }
      owner->connections_.store(connections.size());
    }
  }
};

Result<std::unique_ptr<RendezvousStoreServer>> RendezvousStoreServer::Start(const std::string& host, int port,
                                                                            std::chrono::milliseconds bind_timeout,
                                                                            RendezvousStoreLimits limits) {
  auto impl = std::make_unique<Impl>();
  impl->limits = limits;
  auto listener = net::Listen(host, port, Clock::now() + bind_timeout);
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
  impl_->owner = this;
  thread_ = std::thread([this] { impl_->Loop(); });
}

void RendezvousStoreServer::Stop() {
  if (!thread_.joinable()) return;
  impl_->stopping.store(true);
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(impl_->wake.get(), &one, sizeof one);
  thread_.join();
  impl_->waiters.clear();
  impl_->connections.clear();
  impl_->listener.Reset();
  connections_.store(0);
  waiting_keys_.store(0);
}

RendezvousStoreServer::~RendezvousStoreServer() { Stop(); }

// ---------------------------------------------------------------------------------------------
// Client

Result<std::unique_ptr<RendezvousStoreClient>> RendezvousStoreClient::Connect(const std::string& host, int port,
                                                                              std::chrono::milliseconds connect_timeout,
                                                                              std::chrono::milliseconds io_timeout) {
  FLEET_ASSIGN_OR_RETURN(auto fd, net::ConnectWithRetry(host, port, Clock::now() + connect_timeout));
  return std::unique_ptr<RendezvousStoreClient>(
      new RendezvousStoreClient(fd.Release(), host + ":" + std::to_string(port), io_timeout));
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
  FLEET_RETURN_IF_ERROR(RoundTrip(kSet, key, value, std::chrono::milliseconds(0)));
  return OkStatus();
}

Result<std::optional<std::vector<char>>> RendezvousStoreClient::Get(const std::string& key) {
  if (key.empty() || key.size() > kStoreMaxKeyBytes) return Error{"rendezvous store: invalid key '" + key + "'"};
  FLEET_ASSIGN_OR_RETURN(auto r, RoundTrip(kGet, key, {}, std::chrono::milliseconds(0)));
  if (r.status == kNotFound) return std::optional<std::vector<char>>();
  return std::optional<std::vector<char>>(std::move(r.payload));
}

Result<std::vector<std::string>> RendezvousStoreClient::Wait(const std::vector<std::string>& keys,
                                                            std::chrono::milliseconds timeout) {
  if (keys.empty()) return std::vector<std::string>{};
  for (const std::string& k : keys) {
    if (k.empty() || k.size() > kStoreMaxKeyBytes || k.find('\0') != std::string::npos) {
      return Error{"rendezvous store: invalid key '" + k + "'"};
    }
  }
  // Batches within the server's limits, one after the other, all within `timeout`: once one times
  // out, the rest are asked with no wait, so that every missing key is named.
  const Clock::time_point deadline = Clock::now() + timeout;
  std::vector<std::string> missing;
  for (size_t first = 0; first < keys.size();) {
    std::vector<std::string> batch;
    size_t bytes = 0;
    for (; first < keys.size() && batch.size() < kStoreWaitBatchKeys; ++first) {
      const size_t more = keys[first].size() + (batch.empty() ? 0 : 1);
      if (!batch.empty() && bytes + more > kStoreMaxWaitKeysBytes) break;
      bytes += more;
      batch.push_back(keys[first]);
    }
    const auto left = missing.empty() ? std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now())
                                      : std::chrono::milliseconds(0);
    const auto ms = static_cast<uint32_t>(std::clamp<long long>(left.count(), 0, 0x7fffffff));
    std::string encoded;
    PutU32(encoded, ms);
    FLEET_ASSIGN_OR_RETURN(auto r, RoundTrip(kWait, JoinKeys(batch), std::vector<char>(encoded.begin(), encoded.end()),
                                             std::chrono::milliseconds(ms)));
    if (r.status == kTimeout) {
      for (std::string& k : SplitKeys(std::string(r.payload.begin(), r.payload.end()))) missing.push_back(std::move(k));
    } else if (r.status != kOk) {
      return Error{"rendezvous store at " + endpoint_ + ": unexpected WAIT response"};
    }
  }
  return missing;
}

}  // namespace fleet::collective
