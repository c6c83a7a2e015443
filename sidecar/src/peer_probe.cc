#include "fleet/sidecar/peer_probe.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <set>
#include <system_error>
#include <thread>

namespace fleet::sidecar {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kSlice{50};     // how often blocked waits look at the cancel token
constexpr size_t kMaxAddresses = 4;    // per name: enough for dual stack, bounded for odd DNS answers

struct Address {
  sockaddr_storage storage{};
  socklen_t length = 0;
  bool operator==(const Address& o) const {
    return length == o.length && std::memcmp(&storage, &o.storage, length) == 0;
  }
};

std::string ErrnoText(int error) {
  std::string text = std::system_category().message(error);
  if (!text.empty()) text[0] = static_cast<char>(std::tolower(static_cast<unsigned char>(text[0])));
  return text;
}

// getaddrinfo into at most kMaxAddresses IPv4/IPv6 addresses; "" or why not.
std::string Resolve(const std::string& host, int flags, std::vector<Address>* out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = flags;
  addrinfo* result = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &result);
  if (rc != 0) {
    const int saved = errno;
    return "cannot resolve " + host + ": " + (rc == EAI_SYSTEM ? ErrnoText(saved) : std::string(::gai_strerror(rc)));
  }
  for (const addrinfo* p = result; p && out->size() < kMaxAddresses; p = p->ai_next) {
    if ((p->ai_family != AF_INET && p->ai_family != AF_INET6) || p->ai_addrlen > sizeof(sockaddr_storage)) continue;
    Address a;
    std::memcpy(&a.storage, p->ai_addr, p->ai_addrlen);
    a.length = p->ai_addrlen;
    if (std::find(out->begin(), out->end(), a) == out->end()) out->push_back(a);
  }
  ::freeaddrinfo(result);
  return out->empty() ? "cannot resolve " + host + ": no IPv4 or IPv6 address" : "";
}

void SetPort(Address* a, int port) {
  if (a->storage.ss_family == AF_INET) {
    reinterpret_cast<sockaddr_in*>(&a->storage)->sin_port = htons(static_cast<uint16_t>(port));
  } else {
    reinterpret_cast<sockaddr_in6*>(&a->storage)->sin6_port = htons(static_cast<uint16_t>(port));
  }
}

}  // namespace

struct PeerProber::Shared {
  std::mutex mu;
  std::condition_variable cv;         // a lookup finished
};

struct PeerProber::Lookup {           // guarded by Shared::mu
  bool done = false;
  std::vector<Address> addresses;
  std::string error;
};

PeerProber::PeerProber(milliseconds connect_timeout, milliseconds resolve_timeout)
    : connect_timeout_(connect_timeout), resolve_timeout_(resolve_timeout), shared_(std::make_shared<Shared>()) {}

PeerProber::~PeerProber() = default;  // running lookups hold what they write to

std::vector<ProbeOutcome> PeerProber::ProbeAll(const std::vector<Endpoint>& endpoints,
                                               const kube::CancelToken& cancel) {
  std::vector<ProbeOutcome> out(endpoints.size());
  auto cancelled = [&] {
    for (ProbeOutcome& o : out) o = {false, "cancelled"};
    return out;
  };

  // 1. Addresses: literals at once, names on lookup threads (at most one running per name).
  std::map<std::string, std::vector<Address>> addresses;
  std::map<std::string, std::string> failures;
  std::set<std::string> names;
  for (const Endpoint& e : endpoints) {
    if (addresses.count(e.host) || failures.count(e.host) || names.count(e.host)) continue;
    std::vector<Address> literal;
    if (Resolve(e.host, AI_NUMERICHOST, &literal).empty()) {
      addresses[e.host] = std::move(literal);
    } else {
      names.insert(e.host);
    }
  }
  for (const std::string& name : names) {
    if (lookups_.count(name)) continue;  // still running from an earlier round
    auto lookup = std::make_shared<Lookup>();
    try {
      std::thread([shared = shared_, lookup, name] {
        std::vector<Address> found;
        std::string error = Resolve(name, 0, &found);
        std::lock_guard<std::mutex> lock(shared->mu);
        lookup->addresses = std::move(found);
        lookup->error = std::move(error);
        lookup->done = true;
        shared->cv.notify_all();
      }).detach();
      lookups_[name] = lookup;
    } catch (const std::system_error& e) {
      failures[name] = "cannot start a name lookup for " + name + ": " + e.what();
    }
  }
  if (!lookups_.empty()) {
    const auto deadline = Clock::now() + resolve_timeout_;
    std::unique_lock<std::mutex> lock(shared_->mu);
    auto all_done = [&] {
      return std::all_of(names.begin(), names.end(), [&](const std::string& n) {
        auto it = lookups_.find(n);
        return it == lookups_.end() || it->second->done;
      });
    };
    while (!all_done() && !cancel.cancelled() && Clock::now() < deadline) {
      shared_->cv.wait_until(lock, std::min(deadline, Clock::now() + kSlice));
    }
    for (const std::string& name : names) {
      auto it = lookups_.find(name);
      if (it == lookups_.end()) continue;
      if (!it->second->done) {
        failures[name] = "the name lookup of " + name + " is still running after " +
                         std::to_string(resolve_timeout_.count()) + " ms";
        continue;
      }
      if (it->second->error.empty()) {
        addresses[name] = std::move(it->second->addresses);
      } else {
        failures[name] = it->second->error;
      }
      lookups_.erase(it);
    }
    for (auto it = lookups_.begin(); it != lookups_.end();) {  // finished lookups of names no longer asked for
      it = it->second->done && !names.count(it->first) ? lookups_.erase(it) : std::next(it);
    }
  }
  if (cancel.cancelled()) return cancelled();

  // 2. Connections: every address of every endpoint at once; an endpoint is reached when any
  // of its addresses accepts.
  std::vector<pollfd> polls;
  std::vector<size_t> owner;           // polls[i] belongs to endpoint owner[i]
  for (size_t i = 0; i < endpoints.size(); ++i) {
    const Endpoint& e = endpoints[i];
    auto found = addresses.find(e.host);
    if (found == addresses.end()) {
      out[i].error = failures.count(e.host) ? failures[e.host] : "cannot resolve " + e.host;
      continue;
    }
    for (Address a : found->second) {
      SetPort(&a, e.port);
      const int fd = ::socket(a.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fd < 0) {
        if (out[i].error.empty()) out[i].error = "socket: " + ErrnoText(errno);
        continue;
      }
      if (::connect(fd, reinterpret_cast<const sockaddr*>(&a.storage), a.length) == 0) {
        out[i].reached = true;
        ::close(fd);
      } else if (errno == EINPROGRESS) {
        polls.push_back({fd, POLLOUT, 0});
        owner.push_back(i);
      } else {
        if (out[i].error.empty()) out[i].error = ErrnoText(errno);
        ::close(fd);
      }
    }
  }
  const auto deadline = Clock::now() + connect_timeout_;
  size_t open = polls.size();
  while (open > 0 && !cancel.cancelled()) {
    const auto now = Clock::now();
    if (now >= deadline) break;
    const auto wait = std::min(kSlice, std::chrono::duration_cast<milliseconds>(deadline - now) + milliseconds(1));
    const int n = ::poll(polls.data(), polls.size(), static_cast<int>(wait.count()));
    if (n < 0 && errno != EINTR) break;
    for (size_t p = 0; p < polls.size() && n > 0; ++p) {
      if (polls[p].fd < 0 || polls[p].revents == 0) continue;
      int error = 0;
      socklen_t length = sizeof error;
      if (::getsockopt(polls[p].fd, SOL_SOCKET, SO_ERROR, &error, &length) != 0) error = errno;
      ProbeOutcome& o = out[owner[p]];
      if (error == 0) {
        o.reached = true;
      } else if (o.error.empty()) {
        o.error = ErrnoText(error);
      }
      ::close(polls[p].fd);
      polls[p].fd = -1;
      --open;
    }
  }
  for (size_t p = 0; p < polls.size(); ++p) {
    if (polls[p].fd < 0) continue;
    ::close(polls[p].fd);
    ProbeOutcome& o = out[owner[p]];
    if (o.error.empty()) o.error = "no answer within " + std::to_string(connect_timeout_.count()) + " ms";
  }
  if (cancel.cancelled()) return cancelled();
  for (ProbeOutcome& o : out) {
    if (o.reached) o.error.clear();
  }
  return out;
}

}  // namespace fleet::sidecar
