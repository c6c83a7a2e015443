// Helpers for the collective tests: free loopback ports, Paddle collective envs, running one
// function per rank on threads, deadlines.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "../common/test_process.h"
#include "fleet/runtime/env_contract.h"

namespace fleet::collective::testing {

using Clock = std::chrono::steady_clock;

inline double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

using fleet::test::FreePort;
using fleet::test::FreePorts;

inline std::vector<std::string> LoopbackEndpoints(int n) {
  std::vector<std::string> endpoints;
  for (int port : FreePorts(n)) endpoints.push_back("127.0.0.1:" + std::to_string(port));
  return endpoints;
}

// The env fleetrun renders for rank `rank` of a CPU collective job (PADDLE_DISTRI_BACKEND=gloo).
inline EnvMap CollectiveEnv(const std::vector<std::string>& endpoints, int rank, const std::string& backend = "gloo") {
  std::string list;
  for (size_t i = 0; i < endpoints.size(); ++i) list += (i ? "," : "") + endpoints[i];
  return EnvMap{{"PADDLE_TRAINER_ID", std::to_string(rank)},
                {"PADDLE_TRAINERS_NUM", std::to_string(endpoints.size())},
                {"PADDLE_TRAINER_ENDPOINTS", list},
                {"PADDLE_CURRENT_ENDPOINT", endpoints[static_cast<size_t>(rank)]},
                {"PADDLE_DISTRI_BACKEND", backend}};
}

// Runs body(rank) for every rank on its own thread and joins them.
inline void RunRanks(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) threads.emplace_back(body, r);
  for (std::thread& t : threads) t.join();
}

// A raw loopback client socket, for the malformed-peer tests. -1 when the connect fails.
inline int RawConnect(int port, const char* ip = "127.0.0.1") {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  ::inet_pton(AF_INET, ip, &addr.sin_addr);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// Connects, retrying until `seconds` pass (the listener may not be up yet). -1 on timeout.
inline int RawConnectWithin(int port, double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  auto backoff = std::chrono::milliseconds(5);
  while (true) {
    const int fd = RawConnect(port);
    if (fd >= 0 || Clock::now() >= deadline) return fd;
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(100));
  }
}

inline void SetRecvTimeout(int fd, double seconds) {
  timeval tv{};
  tv.tv_sec = static_cast<time_t>(seconds);
  tv.tv_usec = static_cast<suseconds_t>((seconds - static_cast<double>(tv.tv_sec)) * 1e6);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

inline bool SendRaw(int fd, const void* data, size_t size) {
  return ::send(fd, data, size, MSG_NOSIGNAL) == static_cast<ssize_t>(size);
}

// Reads until `size` bytes or EOF/timeout; returns what was read.
inline std::string RecvRaw(int fd, size_t size) {
  std::string out;
  char buffer[4096];
  while (out.size() < size) {
    const ssize_t n = ::recv(fd, buffer, std::min(sizeof buffer, size - out.size()), 0);
    if (n <= 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  return out;
}

}  // namespace fleet::collective::testing
