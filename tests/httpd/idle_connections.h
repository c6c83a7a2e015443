// Slowloris helpers for the tests of every HTTP endpoint (httpd, the sidecar, the operator):
// connections that stay open and send nothing, or half a request line, and a probe with a hard
// deadline, as the kubelet sends it (a new connection, one request, timeoutSeconds).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

namespace fleet::testing {

inline int ConnectLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// `count` open connections to 127.0.0.1:port: every other one silent, the rest stalled after half
// a request line. Closed when it goes out of scope.
class IdleConnections {
 public:
  IdleConnections(int port, int count) {
    for (int i = 0; i < count; ++i) {
      const int fd = ConnectLoopback(port);
      if (fd < 0) continue;
      if (i % 2 == 1) (void)!::write(fd, "GET /hea", 8);
      fds_.push_back(fd);
    }
  }
  ~IdleConnections() {
    for (int fd : fds_) ::close(fd);
  }
  IdleConnections(const IdleConnections&) = delete;
  IdleConnections& operator=(const IdleConnections&) = delete;
  size_t open() const { return fds_.size(); }

 private:
  std::vector<int> fds_;
};

// GET `path` on a fresh connection; the HTTP status, or -1 when no status line came within
// `deadline` (the connection included).
inline int ProbeWithin(int port, const std::string& path, std::chrono::milliseconds deadline) {
  const auto end = std::chrono::steady_clock::now() + deadline;
  const int fd = ConnectLoopback(port);
  if (fd < 0) return -1;
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (::write(fd, request.data(), request.size()) != static_cast<ssize_t>(request.size())) {
    ::close(fd);
    return -1;
  }
  std::string reply;
  while (reply.find("\r\n") == std::string::npos) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char buf[512];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    reply.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  // "HTTP/1.1 200 OK"
  if (reply.size() < 12 || reply.compare(0, 5, "HTTP/") != 0) return -1;
  return std::atoi(reply.c_str() + 9);
}

}  // namespace fleet::testing
