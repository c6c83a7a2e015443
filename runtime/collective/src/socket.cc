#include "socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <thread>

namespace fleet::collective::net {
namespace {

std::string Errno(int err) { return std::strerror(err); }

// Waits until `fd` is ready for `events` or the deadline passes. false on timeout.
Result<bool> WaitFor(int fd, short events, Clock::time_point deadline) {
  while (true) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, MillisLeft(deadline));
    if (n > 0) return true;
    if (n == 0) {
      if (Clock::now() >= deadline) return false;
      continue;
    }
    if (errno != EINTR) return Error{"poll failed: " + Errno(errno)};
  }
}

Result<sockaddr_in> Resolve(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || found == nullptr) {
    return Error{"cannot resolve host '" + host + "': " + ::gai_strerror(rc)};
  }
  sockaddr_in addr{};
  std::memcpy(&addr, found->ai_addr, sizeof addr);
  ::freeaddrinfo(found);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

}  // namespace

int MillisLeft(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0) return 0;
  return static_cast<int>(std::min<long long>(left + 1, INT_MAX));  // +1: never wake just before it
}

std::string FormatDuration(std::chrono::milliseconds duration) {
  const long long ms = duration.count();
  if (ms < 1000) return std::to_string(ms) + " ms";
  char text[32];
  std::snprintf(text, sizeof text, "%g s", static_cast<double>(ms) / 1000.0);
  return text;
}

void SetNonBlocking(int fd) {
  const int flags = ::fcntl(fd, F_GETFL, 0);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags | O_NONBLOCK);
}

void SetNoDelay(int fd) {
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

Result<Fd> Listen(const std::string& host, int port, Clock::time_point deadline) {
  const std::string where = host + ":" + std::to_string(port);
  auto addr = Resolve(host, port);
  if (!addr) return Error{"cannot listen on " + where + ": " + addr.error()};
  auto backoff = std::chrono::milliseconds(50);
  while (true) {
    Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return Error{"socket() failed: " + Errno(errno)};
    int one = 1;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&*addr), sizeof(sockaddr_in)) == 0) {
      if (::listen(fd.get(), 128) != 0) return Error{"listen on " + where + " failed: " + Errno(errno)};
      SetNonBlocking(fd.get());
      return fd;
    }
    const int err = errno;
    if (err == EADDRNOTAVAIL) {
      return Error{"cannot listen on " + where + ": " + Errno(err) + " (the endpoint must name an address of this machine)"};
    }
    if (err != EADDRINUSE || Clock::now() + backoff >= deadline) {
      return Error{"cannot listen on " + where + ": " + Errno(err)};
    }
    std::this_thread::sleep_for(backoff);  // the previous owner of the port may still be exiting
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

Result<int> LocalPort(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return Error{"getsockname failed: " + Errno(errno)};
  }
  return static_cast<int>(ntohs(addr.sin_port));
}

Result<Fd> Connect(const std::string& host, int port, Clock::time_point deadline) {
  FLEET_ASSIGN_OR_RETURN(auto addr, Resolve(host, port));
  Fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Error{"socket() failed: " + Errno(errno)};
  SetNonBlocking(fd.get());
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof(sockaddr_in)) != 0) {
    if (errno != EINPROGRESS) return Error{Errno(errno)};
    FLEET_ASSIGN_OR_RETURN(const bool ready, WaitFor(fd.get(), POLLOUT, deadline));
    if (!ready) return Error{"connect timed out"};
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return Error{Errno(err)};
  }
  SetNoDelay(fd.get());
  return fd;
}

Result<Fd> ConnectWithRetry(const std::string& host, int port, Clock::time_point deadline) {
  auto backoff = std::chrono::milliseconds(50);
  std::string last;
  while (true) {
    auto fd = Connect(host, port, deadline);
    if (fd) return fd;
    last = fd.error();
    if (Clock::now() + backoff >= deadline) break;
    std::this_thread::sleep_for(backoff);  // the peer is not listening yet
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
  return Error{"cannot connect to " + host + ":" + std::to_string(port) + " (last error: " + last + ")"};
}

Result<Fd> Accept(int listen_fd, Clock::time_point deadline) {
  while (true) {
    FLEET_ASSIGN_OR_RETURN(const bool ready, WaitFor(listen_fd, POLLIN, deadline));
    if (!ready) return Error{"timed out waiting for a connection"};
    Fd fd(::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    if (fd.valid()) {
      SetNoDelay(fd.get());
      return fd;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNABORTED) {
      return Error{"accept failed: " + Errno(errno)};
    }
  }
}

Status SendAll(int fd, const void* data, size_t size, Clock::time_point deadline) {
  const char* p = static_cast<const char*>(data);
  size_t sent = 0;
  while (sent < size) {
    const ssize_t n = ::send(fd, p + sent, size - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      return Error{"send failed: " + Errno(errno)};
    }
    FLEET_ASSIGN_OR_RETURN(const bool ready, WaitFor(fd, POLLOUT, deadline));
    if (!ready) return Error{"send timed out"};
  }
  return OkStatus();
}

Result<size_t> RecvAll(int fd, void* data, size_t size, Clock::time_point deadline) {
  char* p = static_cast<char*>(data);
  size_t got = 0;
  while (got < size) {
    const ssize_t n = ::recv(fd, p + got, size - got, 0);
    if (n > 0) {
      got += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return got;  // peer closed
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      if (errno == ECONNRESET) return got;
      return Error{"recv failed: " + Errno(errno)};
    }
    FLEET_ASSIGN_OR_RETURN(const bool ready, WaitFor(fd, POLLIN, deadline));
    if (!ready) return Error{"timed out after " + std::to_string(got) + " of " + std::to_string(size) + " bytes"};
  }
  return got;
}

std::string PeerName(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof addr;
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "?";
  char text[INET_ADDRSTRLEN] = {0};
  ::inet_ntop(AF_INET, &addr.sin_addr, text, sizeof text);
  return std::string(text) + ":" + std::to_string(ntohs(addr.sin_port));
}

}  // namespace fleet::collective::net
