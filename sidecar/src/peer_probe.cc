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

// Non-blocking connects in flight: polls[i] is an attempt for endpoint owner[i].
struct Attempts {
  std::vector<pollfd> polls;
  std::vector<size_t> owner;
};

// Connects to each of `addresses` at `port` for endpoint `index`: one that connects at once
// reaches it, one in progress joins `attempts`; `outcome` keeps the first error.
void StartConnects(const std::vector<Address>& addresses, int port, size_t index, ProbeOutcome* outcome,
                   Attempts* attempts) {
  for (Address a : addresses) {
    SetPort(&a, port);
    const int fd = ::socket(a.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      if (outcome->error.empty()) outcome->error = "socket: " + ErrnoText(errno);
      continue;
    }
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&a.storage), a.length) == 0) {
      outcome->reached = true;
      ::close(fd);
    } else if (errno == EINPROGRESS) {
      attempts->polls.push_back({fd, POLLOUT, 0});
      attempts->owner.push_back(index);
    } else {
      if (outcome->error.empty()) outcome->error = ErrnoText(errno);
      ::close(fd);
    }
  }
}

// Polls the attempts until each has answered, `timeout` has passed or `cancel` fires, and closes
// them all; an attempt that did not answer says so in its endpoint's outcome.
void AwaitConnects(Attempts* attempts, milliseconds timeout, const kube::CancelToken& cancel,
                   std::vector<ProbeOutcome>* out) {
  std::vector<pollfd>& polls = attempts->polls;
  const auto deadline = Clock::now() + timeout;
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
      ProbeOutcome& o = (*out)[attempts->owner[p]];
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
    ProbeOutcome& o = (*out)[attempts->owner[p]];
    if (o.error.empty()) o.error = "no answer within " + std::to_string(timeout.count()) + " ms";
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

// What one round knows of its hosts: each one's addresses, or why it has none.
struct PeerProber::Hosts {
  std::map<std::string, std::vector<Address>> addresses;
  std::map<std::string, std::string> failures;
};

std::vector<ProbeOutcome> PeerProber::ProbeAll(const std::vector<Endpoint>& endpoints,
                                               const kube::CancelToken& cancel) {
  std::vector<ProbeOutcome> out(endpoints.size());
  auto cancelled = [&] {
    for (ProbeOutcome& o : out) o = {false, "cancelled"};
    return out;
  };

  // 1. Addresses.
  const Hosts hosts = ResolveHosts(endpoints, cancel);
  if (cancel.cancelled()) return cancelled();

  // 2. Connections: every address of every endpoint at once; an endpoint is reached when any
  // of its addresses accepts.
  Attempts attempts;
  for (size_t i = 0; i < endpoints.size(); ++i) {
    const Endpoint& e = endpoints[i];
    auto found = hosts.addresses.find(e.host);
    if (found == hosts.addresses.end()) {
      auto failure = hosts.failures.find(e.host);
      out[i].error = failure != hosts.failures.end() ? failure->second : "cannot resolve " + e.host;
      continue;
    }
    StartConnects(found->second, e.port, i, &out[i], &attempts);
  }
  AwaitConnects(&attempts, connect_timeout_, cancel, &out);
  if (cancel.cancelled()) return cancelled();
  for (ProbeOutcome& o : out) {
    if (o.reached) o.error.clear();
  }
  return out;
}

// IP literals at once, names on lookup threads (at most one running per name).
PeerProber::Hosts PeerProber::ResolveHosts(const std::vector<Endpoint>& endpoints, const kube::CancelToken& cancel) {
  Hosts hosts;
  std::set<std::string> names;
  for (const Endpoint& e : endpoints) {
    if (hosts.addresses.count(e.host) || names.count(e.host)) continue;
    std::vector<Address> literal;
    if (Resolve(e.host, AI_NUMERICHOST, &literal).empty()) {
      hosts.addresses[e.host] = std::move(literal);
    } else {
      names.insert(e.host);
    }
  }
  StartLookups(names, &hosts);
  if (!lookups_.empty()) AwaitLookups(names, cancel, &hosts);
  return hosts;
}

// A detached thread per name that has no lookup running yet (from an earlier round).
void PeerProber::StartLookups(const std::set<std::string>& names, Hosts* hosts) {
  for (const std::string& name : names) {
    if (lookups_.count(name)) continue;
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
      hosts->failures[name] = "cannot start a name lookup for " + name + ": " + e.what();
    }
  }
}

// Waits (up to resolve_timeout_, or until `cancel`) for the lookups of `names` and takes their
// answers. A lookup still running stays in lookups_ for the next round to wait for.
void PeerProber::AwaitLookups(const std::set<std::string>& names, const kube::CancelToken& cancel, Hosts* hosts) {
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
      hosts->failures[name] = "the name lookup of " + name + " is still running after " +
                              std::to_string(resolve_timeout_.count()) + " ms";
      continue;
    }
    if (it->second->error.empty()) {
      hosts->addresses[name] = std::move(it->second->addresses);
    } else {
      hosts->failures[name] = it->second->error;
    }
    lookups_.erase(it);
  }
  for (auto it = lookups_.begin(); it != lookups_.end();) {  // finished lookups of names no longer asked for
    it = it->second->done && !names.count(it->first) ? lookups_.erase(it) : std::next(it);
  }
}

}  // namespace fleet::sidecar
