// The rendezvous key-value store that Gloo's connectFullMesh runs over (gloo ships file, hash,
// prefix and Redis stores but no TCP one). Rank 0 serves it on its own endpoint, as Paddle's
// TCPStore does on the master endpoint; every rank (rank 0 included) is a client.
//
// Wire format (big-endian lengths), one request then one response at a time per connection:
//   request:  "FLKV" | u8 op | u32 key length | u32 value length | key | value
//   response: u8 status | u32 payload length | payload
//   ops:      1 SET key=value; 2 GET key; 3 WAIT keys ('\0'-separated) with value = u32 timeout ms
//   statuses: 0 OK (GET: the value), 1 NOT_FOUND, 2 TIMEOUT (payload: the missing keys,
//             '\0'-separated), 3 ERROR (payload: a message)
// Frames are bounded (keys 4 KiB, a WAIT's key list 1 MiB, values 16 MiB, 256 MiB stored in all),
// and so are connections (RendezvousStoreLimits).
// A malformed frame gets an ERROR response and the connection is closed; the server keeps serving
// everyone else. The server is one poll(2) thread, so a thousand ranks cost one thread.
// Waits are bounded too (RendezvousStoreLimits: keys per WAIT, keys waited on by all connections
// together; one WAIT per connection, as requests are answered one at a time): past a limit the WAIT
// gets an ERROR saying which, and the connection goes on. Waiters are indexed by key, so a SET
// costs the waiters of its own key only, and a connection whose peer closes while it waits is freed
// at once.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fleet/base/result.h"

namespace fleet::collective {

inline constexpr size_t kStoreMaxKeyBytes = 4 << 10;
inline constexpr size_t kStoreMaxWaitKeysBytes = 1 << 20;
inline constexpr size_t kStoreMaxValueBytes = 16 << 20;
inline constexpr size_t kStoreMaxTotalBytes = 256 << 20;
// The client sends a longer key list as several WAITs of at most this many keys, one after the
// other: 4096 ranks joining at once then wait on 128 Ki keys in all, well inside the server's limit.
inline constexpr size_t kStoreWaitBatchKeys = 32;

struct RendezvousStoreLimits {
  size_t max_wait_keys = 1024;           // keys in one WAIT
  // Keys waited on by all connections together: ~70 bytes each where many wait on the same keys (the
  // ranks' join), ~310 where all differ, so 256 Ki cost at most ~80 MB.
  size_t max_waiting_keys = size_t{256} << 10;
  // Connections at once. When full, a new one takes the place of the oldest that has not sent a
  // whole request yet (a rank sends its first at once), else it is closed.
  size_t max_connections = 4096;
};

class RendezvousStoreServer {
 public:
  // Listens on host:port, on the address `host` resolves to only (port 0: any free port). A port
  // still held by an exiting process is retried for up to `bind_timeout`.
  static Result<std::unique_ptr<RendezvousStoreServer>> Start(const std::string& host, int port,
                                                              std::chrono::milliseconds bind_timeout,
                                                              RendezvousStoreLimits limits = {});
  ~RendezvousStoreServer();
  RendezvousStoreServer(const RendezvousStoreServer&) = delete;
  RendezvousStoreServer& operator=(const RendezvousStoreServer&) = delete;

  int port() const { return port_; }
  // Stops serving and closes every connection (also done by the destructor).
  void Stop();

  // Frames refused as malformed since the start (for tests and logs).
  size_t malformed_frames() const { return malformed_frames_.load(); }
  // Connections open now, and keys their pending WAITs wait on (for tests and logs).
  size_t connections() const { return connections_.load(); }
  size_t waiting_keys() const { return waiting_keys_.load(); }

 private:
  struct Impl;
  RendezvousStoreServer(std::unique_ptr<Impl> impl, int port);

  std::unique_ptr<Impl> impl_;
  int port_ = 0;
  std::atomic<size_t> malformed_frames_{0};
  std::atomic<size_t> connections_{0};
  std::atomic<size_t> waiting_keys_{0};
  std::thread thread_;
};

class RendezvousStoreClient {
 public:
  // Connects to host:port, retrying until `connect_timeout` passes (the server may not be up yet).
  // `io_timeout` bounds each request's round trip (a WAIT: its own timeout plus io_timeout).
  static Result<std::unique_ptr<RendezvousStoreClient>> Connect(const std::string& host, int port,
                                                                std::chrono::milliseconds connect_timeout,
                                                                std::chrono::milliseconds io_timeout);
  ~RendezvousStoreClient();
  RendezvousStoreClient(const RendezvousStoreClient&) = delete;
  RendezvousStoreClient& operator=(const RendezvousStoreClient&) = delete;

  Status Set(const std::string& key, const std::vector<char>& value);
  // nullopt when the key is not set (GET does not wait; use Wait first).
  Result<std::optional<std::vector<char>>> Get(const std::string& key);
  // Waits until every key is set or `timeout` passes; returns the keys still missing (empty: all set).
  // Sent as WAITs of at most kStoreWaitBatchKeys keys each, within the one timeout.
  Result<std::vector<std::string>> Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);

  // "host:port" of the server, for messages.
  const std::string& endpoint() const { return endpoint_; }

 private:
  RendezvousStoreClient(int fd, std::string endpoint, std::chrono::milliseconds io_timeout);
  struct Response {
    uint8_t status = 0;
    std::vector<char> payload;
  };
  Result<Response> RoundTrip(uint8_t op, const std::string& key, const std::vector<char>& value,
                             std::chrono::milliseconds extra_wait);

  int fd_ = -1;
  std::string endpoint_;
  std::chrono::milliseconds io_timeout_;
};

}  // namespace fleet::collective
