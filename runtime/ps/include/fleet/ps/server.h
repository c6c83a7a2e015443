// The parameter server: a table registry with the sync/async/geo update rules (ServerCore, no RPC
// in it), and PsServer, which serves a core on one address: dense connections and gRPC.
//
// Update rules per table mode:
//   async  a push is applied (optimizer step) when it arrives;
//   geo    a push is a delta that is added when it arrives;
//   sync   a push joins the current step of its table: when every trainer has pushed that step
//          (for a dense table: that range; for a sparse table: all of its chunks) the gradients
//          are summed in trainer order, divided by the trainer count, applied, and every pusher is
//          answered. A step that waits longer than sync_timeout, or that a stopped trainer can
//          never complete, fails every waiting push and the table's later pushes (the job is
//          broken; trainers get an error instead of hanging).
// A server ends (Wait returns) when every trainer has called StopWorker, or on Shutdown().
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fleet/ps/config.h"
#include "fleet/ps/status.h"
#include "fleet/ps/table.h"

namespace fleet::ps {

// 64 MiB: the largest request or response a server accepts or produces.
inline constexpr size_t kDefaultMaxMessageBytes = 64u << 20;
// The most max_message_bytes may be (frames and gRPC messages carry 31-bit lengths).
inline constexpr size_t kMaxMessageBytesLimit = 1u << 30;

struct ServerOptions {
  std::string bind_address;  // "host:port": POD_IP:PADDLE_PORT; port 0 picks a free port (tests)
  int server_index = 0;
  int server_count = 1;
  int trainers = 1;
  std::string model_dir;     // when set, its tables are loaded before serving
  // Where Save may write (any peer can ask for a save): directories under this one only. Empty: the
  // model_dir, else the working directory at start. FLEET_PS_SAVE_ROOT, fleet-ps-server --save_root.
  std::string save_root;
  std::vector<TableConfig> tables;  // declared by the script (may also come from trainers)
  size_t max_message_bytes = kDefaultMaxMessageBytes;
  std::chrono::milliseconds sync_timeout{std::chrono::minutes(10)};
  // The row limit of a sparse table's shard when its declaration sets no max_rows; 0: derived from
  // this machine's memory (SparseShard::DefaultMaxRows). fleet-ps-server --sparse_max_rows,
  // FLEET_PS_SPARSE_MAX_ROWS.
  uint64_t sparse_max_rows = 0;
  // Dense connections (docs/runtime.md, Transport): served at once (a thread each), and from one
  // remote address. Past a limit a new connection takes the place of an idle one that never had a
  // request answered, else of one idle for dense_reclaim_idle or more; none such: RESOURCE_EXHAUSTED.
  size_t max_dense_connections = 4096;
  size_t max_dense_connections_per_peer = 1024;
  std::chrono::milliseconds dense_reclaim_idle{std::chrono::seconds(30)};
};

using Done = std::function<void(Status)>;

class ServerCore {
 public:
  explicit ServerCore(const ServerOptions& options);
  ~ServerCore();
  ServerCore(const ServerCore&) = delete;
  ServerCore& operator=(const ServerCore&) = delete;

  // Declared or loaded tables before serving.
  Status Declare(const TableConfig& config);
  Status LoadModelDir(const std::string& dir);

  // The RPCs. Byte strings are little-endian float32 values / uint64 keys. Calls that may wait
  // for other trainers (sync pushes, Barrier) answer through `done`, possibly from another
  // thread; the others answer through their return value.
  // Answers are written where `out(bytes)` says, once the request is known to be good (the gRPC
  // layer hands out a slice of the answer message; nullptr: no memory, the request fails with
  // RESOURCE_EXHAUSTED); the std::string forms are for tests.
  using Allocate = std::function<char*(size_t bytes)>;
  Status CreateTable(const TableConfig& config, bool* created, bool* loaded);
  Status PullDense(uint32_t table, uint64_t begin, uint64_t end, const Allocate& out);
  Status PullDense(uint32_t table, uint64_t begin, uint64_t end, std::string* values);
  Status InitDense(uint32_t table, uint64_t begin, const std::string& values, bool* applied);
  void PushDense(uint32_t table, uint64_t begin, uint32_t trainer, const ByteRuns& values, Done done);
  void PushDense(uint32_t table, uint64_t begin, uint32_t trainer, const std::string& values, Done done);
  Status PullSparse(uint32_t table, const std::vector<uint64_t>& keys, const Allocate& out);
  Status PullSparse(uint32_t table, const std::string& keys, std::string* values);
  void PushSparse(uint32_t table, uint32_t trainer, uint32_t chunk_count, const std::string& keys,
                  const std::string& values, Done done);
  void Barrier(uint32_t trainer, uint64_t generation, Done done);
  // `dir` is relative to the save root or an absolute path inside it; ".." and paths outside the
  // root are PERMISSION_DENIED.
  Status Save(const std::string& dir, uint32_t* tables);
  // The directory a save to `dir` writes, or why it may not.
  Status SaveDirectory(const std::string& dir, std::string* path) const;
  // all_stopped: this was the last trainer.
  Status StopWorker(uint32_t trainer, bool* all_stopped);

  // Fails every waiting call (shutdown) and refuses later ones that would wait.
  void AbortWaiters(const Status& status);
  // Fails sync steps and barriers that have waited longer than sync_timeout; returns the time
  // of the next deadline (time_point::max() when nothing waits).
  std::chrono::steady_clock::time_point ExpireWaiters(std::chrono::steady_clock::time_point now);

  // Waits until every trainer stopped or `deadline`; true when they all stopped.
  bool WaitAllStopped(std::chrono::steady_clock::time_point deadline);
  const ServerOptions& options() const;
  std::shared_ptr<Table> FindTable(uint32_t id) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

class PsServer {
 public:
  // Builds the core (loading model_dir), binds bind_address and starts serving.
  static Status Start(const ServerOptions& options, std::unique_ptr<PsServer>* server);
  ~PsServer();
  PsServer(const PsServer&) = delete;
  PsServer& operator=(const PsServer&) = delete;

  int port() const { return port_; }
  ServerCore& core() { return *core_; }
  // Blocks until every trainer stopped (then shuts down) or Shutdown(); false if `deadline` came first.
  bool Wait(std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max());
  void Shutdown();
  // Dense connections and gRPC DenseStreams open to this server now (each counts until the server
  // is done with it).
  size_t open_dense_streams() const;

 private:
  PsServer() = default;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::unique_ptr<ServerCore> core_;
  int port_ = 0;
};

}  // namespace fleet::ps
