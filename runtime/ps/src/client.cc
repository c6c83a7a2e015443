#include <grpc/support/time.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "bulk.h"
#include "codec.h"
#include "fleet/ps/client.h"
#include "wire.h"

namespace fleet::ps {
namespace {

using Clock = std::chrono::steady_clock;
using Stub = wire::ParameterServer::Stub;

template <typename Req, typename Resp>
struct Call {
  int server = 0;
  grpc::ClientContext ctx;
  Req req;
  Resp resp;
};

// A gRPC deadline `after` from now on the monotonic clock, as the steady_clock deadlines it comes
// from: a step of the wall clock moves neither.
gpr_timespec MonotonicDeadline(Clock::duration after) {
  return gpr_time_add(gpr_now(GPR_CLOCK_MONOTONIC),
                      gpr_time_from_nanos(std::chrono::duration_cast<std::chrono::nanoseconds>(after).count(), GPR_TIMESPAN));
}

// The raw (codec.h) method.
const std::string kPullSparse = "/fleet.ps.wire.ParameterServer/PullSparse";

std::string Bytes(const void* data, size_t n) { return std::string(static_cast<const char*>(data), n); }

// Duplicate keys summed, grouped by server.
struct KeyGroups {
  std::vector<std::vector<uint64_t>> keys;  // per server: distinct keys
  std::vector<std::vector<float>> values;   // per server: summed rows (push only)
};

}  // namespace

struct PsClient::Impl {
  ClientOptions options;
  std::vector<std::unique_ptr<Stub>> stubs;
  std::vector<std::unique_ptr<grpc::GenericStub>> generic;  // the same channels, for the raw methods
  mutable std::mutex tables_mutex;
  std::map<uint32_t, TableConfig> tables;
  std::mutex barrier_mutex;
  uint64_t barrier_generation = 0;
  // Dense connections not in use (bulk.h); one set per thread calling at the same time. Last: they
  // go first.
  std::mutex dense_mutex;
  // Set by StopWorker (under dense_mutex): connections that come back from a call are closed, not kept.
  bool dense_stopped = false;
  std::vector<std::unique_ptr<bulk::Connections>> idle_dense;

  int servers() const { return static_cast<int>(stubs.size()); }
  Status CheckInfo(size_t s, const wire::InfoResponse& resp) const;
  Status WaitForServers() const;

  // A server's failure, named: "pserver 127.0.0.1:6001 (server 1): <what it said>".
  Status Annotate(int server, const grpc::Status& s) const { return Answer(server, FromGrpc(s)); }
  Status Answer(int server, const Status& s) const {
    if (s.ok()) return s;
    return Status(s.code(), "pserver " + options.servers[static_cast<size_t>(server)] + " (server " +
                                std::to_string(server) + "): " + s.message());
  }

  // Runs `count` calls, at most `window` at once (default: 4 per server), and returns the first failure (the calls already
  // started are waited for; the rest are not started). build(i, &req) fills call i's request and
  // returns its server; start(server, ctx, req, cq) prepares the call on a completion queue;
  // consume(i, resp) takes a successful answer. The calling thread drives the queue itself, so a
  // call's completion costs no thread hand-off.
  template <typename Req, typename Resp, typename Start, typename Build, typename Consume>
  Status Run(size_t count, std::chrono::milliseconds timeout, Start start, Build build, Consume consume,
             size_t window = 0) {
    if (count == 0) return Status::Ok();
    if (window == 0) window = 4 * stubs.size();
    struct Pending {
      Call<Req, Resp> call;
      grpc::Status status;
      std::unique_ptr<grpc::ClientAsyncResponseReader<Resp>> reader;
    };
    grpc::CompletionQueue cq;
    std::vector<std::unique_ptr<Pending>> calls(count);
    size_t next = 0, in_flight = 0;
    Status first_error;
    auto launch = [&] {
      const size_t i = next++;
      calls[i] = std::make_unique<Pending>();
      Pending& p = *calls[i];
      p.call.server = build(i, &p.call.req);
      p.call.ctx.set_deadline(MonotonicDeadline(timeout));
      p.reader = start(static_cast<size_t>(p.call.server), &p.call.ctx, &p.call.req, &cq);
      p.reader->StartCall();
      p.reader->Finish(&p.call.resp, &p.status, reinterpret_cast<void*>(i));
      ++in_flight;
    };
    while (next < count && in_flight < window) launch();
    while (in_flight > 0) {
      void* tag = nullptr;
      bool ok = false;
      if (!cq.Next(&tag, &ok)) break;  // not reached: the queue is shut down below
      --in_flight;
      const size_t i = reinterpret_cast<size_t>(tag);
      Pending& p = *calls[i];
      Status result = p.status.ok() ? consume(i, p.call.resp) : Annotate(p.call.server, p.status);
      if (!result.ok() && first_error.ok()) first_error = result;
      calls[i].reset();  // frees the payloads now rather than when the batch ends
      while (next < count && in_flight < window && first_error.ok()) launch();
    }
    cq.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (cq.Next(&tag, &ok)) {
    }
    return first_error;
  }

  Status Table(uint32_t id, TableKind kind, TableConfig* config) const {
    std::lock_guard lock(tables_mutex);
    auto it = tables.find(id);
    if (it == tables.end()) return NotFound("table " + std::to_string(id) + " was not created by this trainer");
    if (it->second.kind != kind) {
      return InvalidArgument("table " + std::to_string(id) + " is " + (kind == TableKind::kDense ? "sparse" : "dense"));
    }
    *config = it->second;
    return Status::Ok();
  }

  struct DenseChunk {
    int server;
    uint64_t begin;
    uint64_t n;
  };
  std::vector<DenseChunk> DenseChunks(const TableConfig& config) const {
    const uint64_t per_chunk = std::max<uint64_t>(1, options.chunk_bytes / sizeof(float));
    std::vector<std::vector<DenseChunk>> per_server(stubs.size());
    for (int s = 0; s < servers(); ++s) {
      const ShardRange r = DenseShardRange(config.size, servers(), s);
      for (uint64_t b = r.begin; b < r.end; b += per_chunk) {
        per_server[static_cast<size_t>(s)].push_back({s, b, std::min(per_chunk, r.end - b)});
      }
    }
    // Interleaved across servers, so that the window keeps every server busy.
    std::vector<DenseChunk> chunks;
    for (size_t c = 0;; ++c) {
      bool any = false;
      for (auto& list : per_server) {
        if (c < list.size()) {
          chunks.push_back(list[c]);
          any = true;
        }
      }
      if (!any) break;
    }
    return chunks;
  }

  Status DenseTable(uint32_t id, size_t n, TableConfig* config) const {
    if (Status s = Table(id, TableKind::kDense, config); !s.ok()) return s;
    if (n != config->size) {
      return InvalidArgument("table " + std::to_string(id) + " has " + std::to_string(config->size) +
                             " values, got " + std::to_string(n));
    }
    return Status::Ok();
  }

  Status InitDense(uint32_t id, const float* values, size_t n) {
    TableConfig config;
    if (Status s = DenseTable(id, n, &config); !s.ok()) return s;
    const std::vector<DenseChunk> chunks = DenseChunks(config);
    return Run<wire::PushDenseRequest, wire::PushResponse>(
        chunks.size(), options.rpc_timeout,
        [this](size_t server, grpc::ClientContext* ctx, const wire::PushDenseRequest* req, grpc::CompletionQueue* cq) {
          return stubs[server]->PrepareAsyncInitDense(ctx, *req, cq);
        },
        [&](size_t i, wire::PushDenseRequest* req) {
          const DenseChunk& c = chunks[i];
          req->set_table_id(id);
          req->set_begin(c.begin);
          req->set_trainer_id(static_cast<uint32_t>(options.trainer_id));
          req->set_values(Bytes(values + c.begin, c.n * sizeof(float)));
          return c.server;
        },
        [](size_t, wire::PushResponse&) { return Status::Ok(); });
  }

  // A dense push (values), pull (out), or both, of the whole table, chunk by chunk over the calling
  // thread's dense connections. Values go out from the caller's buffer and answers are copied into
  // out (both outlive the connections' use of them: Run waits).
  Status DenseOp(uint32_t id, uint32_t op, const float* values, float* out, size_t n,
                 std::vector<ShardRange>* answered = nullptr) {
    TableConfig config;
    if (Status s = DenseTable(id, n, &config); !s.ok()) return s;
    const std::vector<DenseChunk> chunks = DenseChunks(config);
    // A push waits for the other trainers in sync mode.
    const auto timeout = op != wire::DenseRequest::PULL && config.mode == Mode::kSync ? options.sync_timeout
                                                                                      : options.rpc_timeout;
    std::unique_ptr<bulk::Connections> connections;
    {
      std::lock_guard lock(dense_mutex);
      if (!idle_dense.empty()) {
        connections = std::move(idle_dense.back());
        idle_dense.pop_back();
      }
    }
    if (!connections) connections = std::make_unique<bulk::Connections>(options.servers, options.max_message_bytes);
    const uint32_t trainer = static_cast<uint32_t>(options.trainer_id);
    const bool pushes = op != wire::DenseRequest::PULL;
    bulk::Connections::Request request;
    request.server_of = [&](size_t i) { return chunks[i].server; };
    request.build = [&](size_t i) {
      const DenseChunk& c = chunks[i];
      return codec::DenseRequest(op, id, c.begin, pushes ? 0 : c.begin + c.n, trainer,
                                 pushes ? values + c.begin : nullptr, pushes ? c.n : 0);
    };
    request.answer_bytes = [&](size_t i) { return out ? codec::kBytesField1Header + chunks[i].n * sizeof(float) : 0; };
    if (answered) answered->clear();
    request.consume = [&](size_t i, const grpc::ByteBuffer& answer) {
      const DenseChunk& c = chunks[i];
      Status s = codec::ReadAnswer(answer, reinterpret_cast<char*>(out ? out + c.begin : nullptr),
                                   out ? c.n * sizeof(float) : 0);
      if (s.ok() && answered) answered->push_back({c.begin, c.begin + c.n});
      return Answer(c.server, s);
    };
    request.annotate = [this](int server, const Status& s) { return Answer(server, s); };
    Status status = connections->Run(chunks.size(), timeout, request);
    {
      std::lock_guard lock(dense_mutex);
      if (!dense_stopped) idle_dense.push_back(std::move(connections));
    }
    // After StopWorker (this call ran alongside it, or came after it) the connections are not
    // kept: they are closed here, outside the lock.
    connections.reset();
    return status;
  }

  KeyGroups Group(const uint64_t* keys, size_t n, const float* values, uint32_t dim,
                  std::vector<std::pair<int, uint32_t>>* where) const {
    KeyGroups g;
    g.keys.resize(stubs.size());
    if (values) g.values.resize(stubs.size());
    std::vector<std::unordered_map<uint64_t, uint32_t>> seen(stubs.size());
    if (where) where->resize(n);
    for (size_t i = 0; i < n; ++i) {
      const int s = SparseShardOf(keys[i], servers());
      auto& index = seen[static_cast<size_t>(s)];
      auto& list = g.keys[static_cast<size_t>(s)];
      auto [it, inserted] = index.try_emplace(keys[i], static_cast<uint32_t>(list.size()));
      if (inserted) {
        list.push_back(keys[i]);
        if (values) g.values[static_cast<size_t>(s)].insert(g.values[static_cast<size_t>(s)].end(), values + i * dim,
                                                            values + (i + 1) * dim);
      } else if (values) {
        float* row = g.values[static_cast<size_t>(s)].data() + size_t{it->second} * dim;
        for (uint32_t j = 0; j < dim; ++j) row[j] += values[i * dim + j];
      }
      if (where) (*where)[i] = {s, it->second};
    }
    return g;
  }

  struct SparseChunk {
    int server;
    size_t first;  // index into the server's distinct keys
    size_t n;
    uint32_t of;   // chunks this server gets
  };
  std::vector<SparseChunk> SparseChunks(const KeyGroups& g, uint32_t dim, bool every_server) const {
    const size_t per_chunk = std::max<size_t>(1, options.chunk_bytes / (size_t{dim} * sizeof(float) + sizeof(uint64_t)));
    std::vector<SparseChunk> chunks;
    for (int s = 0; s < servers(); ++s) {
      const size_t total = g.keys[static_cast<size_t>(s)].size();
      if (total == 0 && !every_server) continue;
      const uint32_t of = static_cast<uint32_t>(std::max<size_t>(1, (total + per_chunk - 1) / per_chunk));
      for (uint32_t c = 0; c < of; ++c) {
        const size_t first = size_t{c} * per_chunk;
        chunks.push_back({s, first, std::min(per_chunk, total - first), of});
      }
    }
    return chunks;
  }
};

PsClient::PsClient() : impl_(std::make_unique<Impl>()) {}
PsClient::~PsClient() = default;

int PsClient::trainer_id() const { return impl_->options.trainer_id; }
int PsClient::trainers() const { return impl_->options.trainers; }
int PsClient::server_count() const { return impl_->servers(); }

namespace {

Status CheckClientOptions(const ClientOptions& options) {
  if (options.servers.empty()) return InvalidArgument("no parameter servers to connect to");
  if (options.trainers < 1 || options.trainer_id < 0 || options.trainer_id >= options.trainers) {
    return InvalidArgument("trainer id " + std::to_string(options.trainer_id) + " of " +
                           std::to_string(options.trainers) + " trainers");
  }
  if (options.chunk_bytes == 0 || options.chunk_bytes + (64u << 10) > options.max_message_bytes ||
      options.max_message_bytes > kMaxMessageBytesLimit) {
    return InvalidArgument("chunk_bytes must be positive and leave 64 KiB under max_message_bytes, which is at most " +
                           std::to_string(kMaxMessageBytesLimit));
  }
  for (const std::string& endpoint : options.servers) {
    if (Status s = bulk::CheckAddress(endpoint); !s.ok()) return InvalidArgument("pserver endpoint " + s.message());
  }
  return Status::Ok();
}

std::shared_ptr<grpc::Channel> OpenChannel(const std::string& endpoint, size_t max_message_bytes) {
  const int limit = static_cast<int>(std::min<size_t>(max_message_bytes + (64u << 10), INT32_MAX));
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(limit);
  args.SetMaxSendMessageSize(limit);
  // One connection per server even when a process has several clients (tests, benchmarks).
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  SetTransferArgs(args, max_message_bytes);
  // Reconnect quickly: a server that is still starting, or restarting, is found within 0.1-1 s.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(endpoint, grpc::InsecureChannelCredentials(), args);
}

void LogNotReady(const ClientOptions& options, const std::vector<std::string>& not_ready) {
  std::string list;
  for (const std::string& e : not_ready) list += (list.empty() ? "'" : ", '") + e + "'";
  std::ostringstream wait;
  wait << std::chrono::duration<double>(options.retry_interval).count();
  options.log("server not ready, wait " + wait.str() + " sec to retry...");
  options.log("not ready endpoints:[" + list + "]");
}

}  // namespace

// Whether server s's answer to Info fits this trainer's view of the job.
Status PsClient::Impl::CheckInfo(size_t s, const wire::InfoResponse& resp) const {
  if (resp.server_index() != s || resp.server_count() != options.servers.size()) {
    return FailedPrecondition("pserver " + options.servers[s] + " says it is server " +
                              std::to_string(resp.server_index()) + " of " + std::to_string(resp.server_count()) +
                              ", but it is entry " + std::to_string(s) + " of " +
                              std::to_string(options.servers.size()) + " in this trainer's server list");
  }
  if (resp.trainers() != static_cast<uint32_t>(options.trainers)) {
    return FailedPrecondition("pserver " + options.servers[s] + " expects " + std::to_string(resp.trainers()) +
                              " trainers, this trainer says " + std::to_string(options.trainers));
  }
  return Status::Ok();
}

// Paddle's trainers wait for every server before training; so do we, with a deadline. A round
// asks every server not known ready yet, each call waiting (wait_for_ready) until the round's end
// for its channel to connect, so a server is seen as soon as it listens.
Status PsClient::Impl::WaitForServers() const {
  const Clock::time_point give_up = Clock::now() + options.connect_timeout;
  std::vector<bool> ready(options.servers.size(), false);
  for (;;) {
    const auto round_end = std::chrono::system_clock::now() +
                           std::min<Clock::duration>(options.retry_interval, std::max<Clock::duration>(give_up - Clock::now(), std::chrono::milliseconds(100)));
    std::vector<std::string> not_ready;
    for (size_t s = 0; s < options.servers.size(); ++s) {
      if (ready[s]) continue;
      grpc::ClientContext ctx;
      ctx.set_wait_for_ready(true);
      ctx.set_deadline(std::max(round_end, std::chrono::system_clock::now() + std::chrono::milliseconds(100)));
      wire::InfoRequest req;
      wire::InfoResponse resp;
      grpc::Status st = stubs[s]->Info(&ctx, req, &resp);
      if (!st.ok()) {
        not_ready.push_back(options.servers[s]);
        continue;
      }
      if (Status mismatch = CheckInfo(s, resp); !mismatch.ok()) return mismatch;
      ready[s] = true;
    }
    if (not_ready.empty()) return Status::Ok();
    if (Clock::now() >= give_up) {
      return Unavailable("parameter servers not reachable after " +
                         std::to_string(std::chrono::duration_cast<std::chrono::seconds>(options.connect_timeout).count()) +
                         " s: " + not_ready.front() +
                         (not_ready.size() > 1 ? " and " + std::to_string(not_ready.size() - 1) + " more" : ""));
    }
    if (options.log) LogNotReady(options, not_ready);
  }
}

Status PsClient::Connect(const ClientOptions& options, std::unique_ptr<PsClient>* out) {
  if (Status s = CheckClientOptions(options); !s.ok()) return s;
  TuneProcessOnce();
  std::unique_ptr<PsClient> client(new PsClient());
  Impl& impl = *client->impl_;
  impl.options = options;
  for (const std::string& endpoint : options.servers) {
    auto channel = OpenChannel(endpoint, options.max_message_bytes);
    impl.stubs.push_back(wire::ParameterServer::NewStub(channel));
    impl.generic.push_back(std::make_unique<grpc::GenericStub>(channel));
  }
  if (Status s = impl.WaitForServers(); !s.ok()) return s;
  *out = std::move(client);
  return Status::Ok();
}

Status PsClient::CreateTable(const TableConfig& config) {
  if (Status s = ValidateTableConfig(config); !s.ok()) return s;
  Status s = impl_->Run<wire::CreateTableRequest, wire::CreateTableResponse>(
      impl_->stubs.size(), impl_->options.rpc_timeout,
      [impl = impl_.get()](size_t server, grpc::ClientContext* ctx, const wire::CreateTableRequest* req, grpc::CompletionQueue* cq) { return impl->stubs[server]->PrepareAsyncCreateTable(ctx, *req, cq); },
      [&](size_t i, wire::CreateTableRequest* req) {
        ToWire(config, req->mutable_config());
        return static_cast<int>(i);
      },
      [](size_t, wire::CreateTableResponse&) { return Status::Ok(); });
  if (!s.ok()) return s;
  std::lock_guard lock(impl_->tables_mutex);
  impl_->tables[config.table_id] = config;
  return Status::Ok();
}

const TableConfig* PsClient::FindTable(uint32_t table) const {
  std::lock_guard lock(impl_->tables_mutex);
  auto it = impl_->tables.find(table);
  return it == impl_->tables.end() ? nullptr : &it->second;
}

Status PsClient::InitDense(uint32_t table, const float* values, size_t n) {
  return impl_->InitDense(table, values, n);
}

Status PsClient::PushDense(uint32_t table, const float* values, size_t n) {
  return impl_->DenseOp(table, wire::DenseRequest::PUSH, values, nullptr, n);
}

Status PsClient::PullDense(uint32_t table, float* out, size_t n) {
  return impl_->DenseOp(table, wire::DenseRequest::PULL, nullptr, out, n);
}

Status PsClient::PushPullDense(uint32_t table, const float* values, float* out, size_t n,
                               std::vector<ShardRange>* answered) {
  return impl_->DenseOp(table, wire::DenseRequest::PUSH_PULL, values, out, n, answered);
}

Status PsClient::PullSparse(uint32_t id, const uint64_t* keys, size_t n, float* out) {
  TableConfig config;
  if (Status s = impl_->Table(id, TableKind::kSparse, &config); !s.ok()) return s;
  const uint32_t dim = config.dim;
  std::vector<std::pair<int, uint32_t>> where;
  const KeyGroups groups = impl_->Group(keys, n, nullptr, dim, &where);
  const auto chunks = impl_->SparseChunks(groups, dim, false);
  std::vector<std::vector<float>> rows(groups.keys.size());
  for (size_t s = 0; s < rows.size(); ++s) rows[s].resize(groups.keys[s].size() * dim);
  Status status = impl_->Run<grpc::ByteBuffer, grpc::ByteBuffer>(
      chunks.size(), impl_->options.rpc_timeout,
      [impl = impl_.get()](size_t server, grpc::ClientContext* ctx, const grpc::ByteBuffer* req, grpc::CompletionQueue* cq) {
        return impl->generic[server]->PrepareUnaryCall(ctx, kPullSparse, *req, cq);
      },
      [&](size_t i, grpc::ByteBuffer* req) {
        const auto& c = chunks[i];
        *req = codec::PullSparseRequest(id, groups.keys[static_cast<size_t>(c.server)].data() + c.first, c.n);
        return c.server;
      },
      [&](size_t i, grpc::ByteBuffer& resp) {
        const auto& c = chunks[i];
        return impl_->Answer(c.server, codec::ReadAnswer(
                                           resp, reinterpret_cast<char*>(rows[static_cast<size_t>(c.server)].data() + c.first * dim),
                                           c.n * dim * sizeof(float)));
      });
  if (!status.ok()) return status;
  for (size_t i = 0; i < n; ++i) {
    const auto [s, pos] = where[i];
    std::memcpy(out + i * dim, rows[static_cast<size_t>(s)].data() + size_t{pos} * dim, dim * sizeof(float));
  }
  return Status::Ok();
}

Status PsClient::PushSparse(uint32_t id, const uint64_t* keys, size_t n, const float* values,
                            std::vector<uint64_t>* applied) {
  TableConfig config;
  if (Status s = impl_->Table(id, TableKind::kSparse, &config); !s.ok()) return s;
  const uint32_t dim = config.dim;
  const bool sync = config.mode == Mode::kSync;
  const KeyGroups groups = impl_->Group(keys, n, values, dim, nullptr);
  if (applied) applied->clear();
  // Sync: every server hears from every trainer each step, with nothing to add if need be.
  const auto chunks = impl_->SparseChunks(groups, dim, sync);
  return impl_->Run<wire::PushSparseRequest, wire::PushResponse>(
      chunks.size(), sync ? impl_->options.sync_timeout : impl_->options.rpc_timeout,
      [impl = impl_.get()](size_t server, grpc::ClientContext* ctx, const wire::PushSparseRequest* req, grpc::CompletionQueue* cq) { return impl->stubs[server]->PrepareAsyncPushSparse(ctx, *req, cq); },
      [&](size_t i, wire::PushSparseRequest* req) {
        const auto& c = chunks[i];
        const size_t s = static_cast<size_t>(c.server);
        req->set_table_id(id);
        req->set_trainer_id(static_cast<uint32_t>(impl_->options.trainer_id));
        req->set_chunk_count(c.of);
        req->set_keys(Bytes(groups.keys[s].data() + c.first, c.n * sizeof(uint64_t)));
        req->set_values(Bytes(groups.values[s].data() + c.first * dim, c.n * dim * sizeof(float)));
        return c.server;
      },
      [&](size_t i, wire::PushResponse&) {
        if (applied) {
          const auto& c = chunks[i];
          const auto& server_keys = groups.keys[static_cast<size_t>(c.server)];
          applied->insert(applied->end(), server_keys.begin() + static_cast<std::ptrdiff_t>(c.first),
                          server_keys.begin() + static_cast<std::ptrdiff_t>(c.first + c.n));
        }
        return Status::Ok();
      },
      // Sync: a server answers none of a trainer's chunks before it has all of them.
      sync ? chunks.size() : 0);
}

Status PsClient::Barrier() {
  std::lock_guard lock(impl_->barrier_mutex);
  Status s = impl_->Run<wire::BarrierRequest, wire::BarrierResponse>(
      1, impl_->options.sync_timeout,
      [impl = impl_.get()](size_t server, grpc::ClientContext* ctx, const wire::BarrierRequest* req, grpc::CompletionQueue* cq) { return impl->stubs[server]->PrepareAsyncBarrier(ctx, *req, cq); },
      [&](size_t, wire::BarrierRequest* req) {
        req->set_trainer_id(static_cast<uint32_t>(impl_->options.trainer_id));
        req->set_generation(impl_->barrier_generation);
        return 0;
      },
      [](size_t, wire::BarrierResponse&) { return Status::Ok(); });
  if (s.ok()) ++impl_->barrier_generation;
  return s;
}

Status PsClient::Save(const std::string& dir) {
  return impl_->Run<wire::SaveRequest, wire::SaveResponse>(
      impl_->stubs.size(), impl_->options.sync_timeout,
      [impl = impl_.get()](size_t server, grpc::ClientContext* ctx, const wire::SaveRequest* req, grpc::CompletionQueue* cq) { return impl->stubs[server]->PrepareAsyncSave(ctx, *req, cq); },
      [&](size_t i, wire::SaveRequest* req) {
        req->set_dirname(dir);
        return static_cast<int>(i);
      },
      [](size_t, wire::SaveResponse&) { return Status::Ok(); });
}

Status PsClient::StopWorker() {
  std::vector<std::unique_ptr<bulk::Connections>> idle;
  {
    // Dense connections close first, so that a server whose trainers all stopped has none open to
    // wait for; those of calls still running on other threads close when they come back.
    std::lock_guard lock(impl_->dense_mutex);
    impl_->dense_stopped = true;
    idle.swap(impl_->idle_dense);
  }
  idle.clear();
  return impl_->Run<wire::StopWorkerRequest, wire::StopWorkerResponse>(
      impl_->stubs.size(), impl_->options.rpc_timeout,
      [impl = impl_.get()](size_t server, grpc::ClientContext* ctx, const wire::StopWorkerRequest* req, grpc::CompletionQueue* cq) { return impl->stubs[server]->PrepareAsyncStopWorker(ctx, *req, cq); },
      [&](size_t i, wire::StopWorkerRequest* req) {
        req->set_trainer_id(static_cast<uint32_t>(impl_->options.trainer_id));
        return static_cast<int>(i);
      },
      [](size_t, wire::StopWorkerResponse&) { return Status::Ok(); });
}

}  // namespace fleet::ps
