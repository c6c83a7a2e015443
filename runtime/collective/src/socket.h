// Small blocking-with-deadline TCP helpers for the rendezvous store and the NCCL id exchange:
// every call takes an absolute deadline and returns an error instead of waiting past it.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "fleet/base/fd.h"
#include "fleet/base/result.h"

namespace fleet::collective::net {

using Clock = std::chrono::steady_clock;

using fleet::Fd;

// Milliseconds left until `deadline` (0 when past), capped to what poll(2) takes.
int MillisLeft(Clock::time_point deadline);

// "1.5 s" / "200 ms", for messages.
std::string FormatDuration(std::chrono::milliseconds duration);

// Listens on host:port, on the IPv4 address `host` resolves to, and only there: an endpoint that
// says 127.0.0.1 is not reachable from other machines. (Paddle's c_gen_nccl_id and TCPStore bind
// every address; we do not, so the port is exposed no wider than the endpoint the job was given.)
// A port still in use is retried until `deadline`.
Result<Fd> Listen(const std::string& host, int port, Clock::time_point deadline);

// The port a listening socket is bound to.
Result<int> LocalPort(int fd);

// Resolves `host` (IPv4) and connects once; the connect itself is bounded by `deadline`.
Result<Fd> Connect(const std::string& host, int port, Clock::time_point deadline);

// Connects, retrying refused/unreachable connects with backoff (50 ms doubling to 1 s) until
// `deadline`. The error names the endpoint and the last failure.
Result<Fd> ConnectWithRetry(const std::string& host, int port, Clock::time_point deadline);

// Accepts one connection; an error when `deadline` passes first.
Result<Fd> Accept(int listen_fd, Clock::time_point deadline);

// Sends all bytes or fails (peer gone, deadline passed).
Status SendAll(int fd, const void* data, size_t size, Clock::time_point deadline);

// Reads exactly `size` bytes. Returns the number read: less than `size` only when the peer closed
// the connection first. An error on a socket error or when `deadline` passes.
Result<size_t> RecvAll(int fd, void* data, size_t size, Clock::time_point deadline);

// "host:port" of the peer of a connected socket ("?" when unknown).
std::string PeerName(int fd);

void SetNonBlocking(int fd);
void SetNoDelay(int fd);

}  // namespace fleet::collective::net
