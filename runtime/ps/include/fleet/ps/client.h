// The trainer side.
//
// PsClient speaks the protocol: each call addresses every server that holds part of the data,
// concurrently, splitting transfers into chunks of at most chunk_bytes (dense: ranges; sparse:
// runs of keys) so that no message passes the servers' limit. Dense pushes and pulls travel on
// long-lived dense connections (plain TCP on the server's port, docs/runtime.md "Transport"), one
// set per calling thread, kept until StopWorker; the rest goes over gRPC. A push means what the
// table's mode says on the server (sync: waits for the other trainers' step; async: an optimizer
// step; geo: a delta added).
//
// Worker is what a training script uses (Paddle's communicator): pull, compute, push, whatever the
// mode. In sync and async mode it forwards to PsClient. In geo mode it keeps a local copy of each
// table, applies SGD locally on push, and every k_steps pushes of a table sends the difference
// since the last exchange, divided by the trainer count (as Paddle's GeoCommunicator does), then
// pulls the merged values back.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "fleet/ps/config.h"
#include "fleet/ps/status.h"

namespace fleet::ps {

struct ClientOptions {
  std::vector<std::string> servers;  // PADDLE_PSERVERS_IP_PORT_LIST, in order
  int trainer_id = 0;
  int trainers = 1;
  // How long Connect waits for every server to answer (Paddle waits forever; we give up).
  std::chrono::milliseconds connect_timeout{std::chrono::minutes(10)};
  std::chrono::milliseconds retry_interval{std::chrono::seconds(3)};
  // Deadline of calls that do not wait for other trainers.
  std::chrono::milliseconds rpc_timeout{std::chrono::minutes(2)};
  // Deadline of sync pushes and barriers (they wait for the slowest trainer).
  std::chrono::milliseconds sync_timeout{std::chrono::minutes(10)};
  size_t chunk_bytes = 4u << 20;
  size_t max_message_bytes = 64u << 20;
  // Progress lines while waiting for servers ("server not ready, wait 3 sec to retry...").
  std::function<void(const std::string&)> log;
};

class PsClient {
 public:
  // Waits (up to connect_timeout) until every server answers, and checks that each one is the
  // server its position in the list says and agrees on the trainer count.
  static Status Connect(const ClientOptions& options, std::unique_ptr<PsClient>* client);
  ~PsClient();
  PsClient(const PsClient&) = delete;
  PsClient& operator=(const PsClient&) = delete;

  int trainer_id() const;
  int trainers() const;
  int server_count() const;

  // Creates the table on every server (idempotent: a server that has it with the same config, or
  // loaded it from a checkpoint with the same shape, agrees; a different config is an error).
  Status CreateTable(const TableConfig& config);
  // The config this client created the table with; nullptr when it did not.
  const TableConfig* FindTable(uint32_t table) const;

  // Dense, whole table: n must be the table's size.
  Status InitDense(uint32_t table, const float* values, size_t n);  // ignored for loaded tables
  Status PullDense(uint32_t table, float* out, size_t n);
  Status PushDense(uint32_t table, const float* values, size_t n);
  // PushDense, then PullDense once the push is applied, in one round trip per chunk instead of two:
  // out gets what a PullDense right after the PushDense would (async: the values after this push and
  // whatever arrived before it; sync: the step's result; geo: after the delta was added). values and
  // out may be the same buffer. With `answered`, the ranges whose push was applied and whose values
  // are in out: all on success; after a failure, those that made it (a push to several servers is
  // not all-or-nothing: geo mode re-sends only the rest).
  Status PushPullDense(uint32_t table, const float* values, float* out, size_t n,
                       std::vector<ShardRange>* answered = nullptr);
  // Sparse: out / values are n x dim. Duplicate keys in a push are summed before sending. With
  // `applied`, the keys whose push was applied (as `answered` above).
  Status PullSparse(uint32_t table, const uint64_t* keys, size_t n, float* out);
  Status PushSparse(uint32_t table, const uint64_t* keys, size_t n, const float* values,
                    std::vector<uint64_t>* applied = nullptr);

  // Waits until every trainer called Barrier the same number of times (served by server 0).
  Status Barrier();
  // Every server writes its shards into dir (a path on the servers' filesystem).
  Status Save(const std::string& dir);
  // Tells every server this trainer is done; servers exit when all trainers are.
  Status StopWorker();

 private:
  PsClient();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class Worker {
 public:
  explicit Worker(std::unique_ptr<PsClient> client);
  ~Worker();
  Worker(const Worker&) = delete;
  Worker& operator=(const Worker&) = delete;

  PsClient& client() { return *client_; }
  Status CreateTable(const TableConfig& config);
  Status InitDense(uint32_t table, const float* values, size_t n);
  Status PullDense(uint32_t table, float* out, size_t n);
  Status PushDense(uint32_t table, const float* gradient, size_t n);
  // PushDense then PullDense: one round trip in sync and async mode; geo steps locally as PushDense.
  Status PushPullDense(uint32_t table, const float* gradient, float* out, size_t n);
  Status PullSparse(uint32_t table, const uint64_t* keys, size_t n, float* out);
  Status PushSparse(uint32_t table, const uint64_t* keys, size_t n, const float* gradient);
  // Geo: sends every table's pending deltas now and drops the local copies, so that the next pulls
  // return the servers' merged values (StopWorker and Save flush first). Nothing to do otherwise.
  Status Flush();
  Status Barrier();
  Status Save(const std::string& dir);
  Status StopWorker();

 private:
  struct GeoDense {
    std::vector<float> local;  // what this trainer trains on
    std::vector<float> base;   // the values of the last exchange with the servers
    std::vector<float> delta;  // the exchange's buffer: the delta out, the merged values back
    uint32_t steps = 0;        // local steps since the last exchange
    bool unsent = false;       // the last exchange failed (in part): local - base is still to send
  };
  struct GeoSparse {
    std::unordered_map<uint64_t, std::vector<float>> local;  // rows pulled since the last exchange
    std::unordered_map<uint64_t, std::vector<float>> base;
    std::set<uint64_t> touched;
    uint32_t steps = 0;
  };
  Status FlushLocked();
  Status GeoSendDense(uint32_t table, GeoDense& geo);
  Status GeoSendSparse(uint32_t table, const TableConfig& config, GeoSparse& geo);
  Status GeoFetchRows(uint32_t table, const TableConfig& config, GeoSparse& geo,
                      const uint64_t* keys, size_t n);
  const TableConfig* GeoTable(uint32_t table) const;

  std::unique_ptr<PsClient> client_;
  std::mutex mutex_;
  std::map<uint32_t, GeoDense> geo_dense_;
  std::map<uint32_t, GeoSparse> geo_sparse_;
  bool stopped_ = false;
};

}  // namespace fleet::ps
