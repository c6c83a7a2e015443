#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <unordered_map>
#include <utility>

#include "fleet/ps/server.h"

namespace fleet::ps {
namespace {

using Clock = std::chrono::steady_clock;
using Completions = std::vector<std::pair<Done, Status>>;

void Run(Completions& completions) {
  for (auto& [done, status] : completions) done(status);
  completions.clear();
}

std::string TableName(uint32_t table) { return "table " + std::to_string(table); }

// One sync step of one range of a dense table: a gradient per trainer.
struct DenseRound {
  uint64_t n = 0;
  std::vector<std::string> gradients;  // by trainer id; empty = not pushed yet
  int pushed = 0;
  std::vector<Done> waiters;
  Clock::time_point started;
};

// One sync step of a sparse table: each trainer's chunks.
struct SparseRound {
  struct Part {
    uint32_t expected = 0;  // chunk_count of its first chunk; 0 = nothing yet
    std::vector<std::pair<std::string, std::string>> chunks;  // keys, values
  };
  std::vector<Part> parts;  // by trainer id
  int complete = 0;         // trainers with all their chunks in
  std::vector<Done> waiters;
  Clock::time_point started;
  bool active() const { return !waiters.empty(); }
};

struct SyncState {
  std::map<uint64_t, DenseRound> dense;  // by range begin
  SparseRound sparse;
  Status broken;                         // why this table's sync training cannot go on
};

}  // namespace

struct ServerCore::State {
  ServerOptions options;
  mutable std::shared_mutex tables_mutex;
  std::map<uint32_t, std::shared_ptr<Table>> tables;
  std::set<uint32_t> claimed;  // declared by the script or created by a trainer

  std::mutex sync_mutex;  // everything below
  std::condition_variable stopped_cv;
  std::map<uint32_t, SyncState> sync;
  struct {
    uint64_t generation = 0;
    std::set<uint32_t> arrived;
    std::vector<Done> waiters;
    Clock::time_point started;
  } barrier;
  std::set<uint32_t> stopped;
  Status aborted;

  Status CheckTrainer(uint32_t trainer) const {
    if (trainer >= static_cast<uint32_t>(options.trainers)) {
      return InvalidArgument("trainer_id " + std::to_string(trainer) + " is not below the trainer count " +
                             std::to_string(options.trainers));
    }
    return Status::Ok();
  }

  // A sync step or barrier cannot complete once a trainer stopped.
  Status StoppedTrainers() const {
    if (stopped.empty()) return Status::Ok();
    return FailedPrecondition("trainer " + std::to_string(*stopped.begin()) +
                              " has stopped; a sync step or barrier can no longer complete");
  }

  // Fails every waiting round of `sync` and marks the table broken with `status`.
  void BreakTable(SyncState& table_sync, const Status& status, Completions* out) {
    for (auto& [begin, round] : table_sync.dense) {
      for (Done& d : round.waiters) out->emplace_back(std::move(d), status);
    }
    table_sync.dense.clear();
    for (Done& d : table_sync.sparse.waiters) out->emplace_back(std::move(d), status);
    table_sync.sparse = SparseRound();
    if (table_sync.broken.ok()) table_sync.broken = Status(Code::kAborted, status.message());
  }

  void FailBarrier(const Status& status, Completions* out) {
    for (Done& d : barrier.waiters) out->emplace_back(std::move(d), status);
    barrier.waiters.clear();
    barrier.arrived.clear();
  }

  std::shared_ptr<Table> Find(uint32_t id) const {
    std::shared_lock lock(tables_mutex);
    auto it = tables.find(id);
    return it == tables.end() ? nullptr : it->second;
  }

  Status FindKind(uint32_t id, TableKind kind, std::shared_ptr<Table>* table) const {
    *table = Find(id);
    if (!*table) return NotFound(TableName(id) + " does not exist on server " + std::to_string(options.server_index));
    if ((*table)->config().kind != kind) {
      return InvalidArgument(TableName(id) + " is " + ((*table)->config().kind == TableKind::kDense ? "dense" : "sparse"));
    }
    return Status::Ok();
  }

  // A sparse shard's row limit: its declaration's, else the server's default, else from memory.
  void SetRowLimit(Table& table) const {
    SparseShard* sparse = table.AsSparse();
    if (!sparse) return;
    const TableConfig& c = table.config();
    if (c.max_rows != 0) {
      sparse->SetMaxRows(c.max_rows, SparseShard::LimitSource::kDeclared);
    } else if (options.sparse_max_rows != 0) {
      sparse->SetMaxRows(options.sparse_max_rows, SparseShard::LimitSource::kServerDefault);
    } else {
      sparse->SetMaxRows(SparseShard::DefaultMaxRows(c), SparseShard::LimitSource::kMemory);
    }
  }

  // Adds a trainer's chunk to its sync sparse table's step, which then holds `done`. The chunk that
  // completes the step moves the step to *full and sets *complete. A refusal leaves `done` to the caller.
  Status JoinSparseStep(uint32_t id, uint32_t trainer, uint32_t chunk_count, const std::string& keys,
                        const std::string& values, Done& done, SparseRound* full, bool* complete) {
    std::lock_guard lock(sync_mutex);
    SyncState& table_sync = sync[id];
    Status refuse = !aborted.ok() ? aborted : !table_sync.broken.ok() ? table_sync.broken : StoppedTrainers();
    if (!refuse.ok()) return refuse;
    SparseRound& round = table_sync.sparse;
    if (!round.active()) {
      round = SparseRound();
      round.parts.resize(static_cast<size_t>(options.trainers));
      round.started = Clock::now();
    }
    SparseRound::Part& part = round.parts[trainer];
    if (part.expected == 0) part.expected = chunk_count;
    if (part.expected != chunk_count) {
      return InvalidArgument("trainer " + std::to_string(trainer) + " announced " + std::to_string(part.expected) +
                             " chunks for this step of " + TableName(id) + ", then " + std::to_string(chunk_count));
    }
    if (part.chunks.size() == part.expected) {
      return FailedPrecondition("trainer " + std::to_string(trainer) + " pushed " + TableName(id) +
                                " twice in one sync step");
    }
    part.chunks.emplace_back(keys, values);
    round.waiters.push_back(std::move(done));
    if (part.chunks.size() == part.expected) ++round.complete;
    if (round.complete < options.trainers) return Status::Ok();
    *full = std::move(round);
    round = SparseRound();
    *complete = true;
    return Status::Ok();
  }

  Status CheckSize(uint64_t bytes, const char* what) const {
    if (bytes > options.max_message_bytes) {
      return ResourceExhausted(std::string(what) + " of " + std::to_string(bytes) + " bytes is over the " +
                               std::to_string(options.max_message_bytes) + "-byte message limit");
    }
    return Status::Ok();
  }
};

ServerCore::ServerCore(const ServerOptions& options) : state_(std::make_unique<State>()) {
  state_->options = options;
  // Fixed now: a later chdir of the process does not move it.
  std::string& root = state_->options.save_root;
  if (root.empty()) root = options.model_dir;
  std::error_code ec;
  root = std::filesystem::absolute(root.empty() ? std::filesystem::current_path(ec) : std::filesystem::path(root), ec).string();
}

ServerCore::~ServerCore() { AbortWaiters(Unavailable("the server is shutting down")); }

const ServerOptions& ServerCore::options() const { return state_->options; }

std::shared_ptr<Table> ServerCore::FindTable(uint32_t id) const { return state_->Find(id); }

Status ServerCore::LoadModelDir(const std::string& dir) {
  std::vector<std::unique_ptr<Table>> loaded;
  if (Status s = LoadShards(dir, state_->options.server_index, state_->options.server_count, &loaded); !s.ok()) {
    return s;
  }
  std::unique_lock lock(state_->tables_mutex);
  for (auto& table : loaded) {
    state_->SetRowLimit(*table);
    const uint32_t id = table->config().table_id;
    state_->tables[id] = std::move(table);
  }
  return Status::Ok();
}

Status ServerCore::Declare(const TableConfig& config) {
  bool created = false, loaded = false;
  return CreateTable(config, &created, &loaded);
}

Status ServerCore::CreateTable(const TableConfig& config, bool* created, bool* loaded) {
  if (Status s = ValidateTableConfig(config); !s.ok()) return s;
  State& st = *state_;
  std::unique_lock lock(st.tables_mutex);
  auto it = st.tables.find(config.table_id);
  *created = false;
  if (it == st.tables.end()) {
    std::unique_ptr<Table> table = MakeShard(config, st.options.server_index, st.options.server_count);
    st.SetRowLimit(*table);
    st.tables[config.table_id] = std::move(table);
    st.claimed.insert(config.table_id);
    *created = true;
    *loaded = false;
    return Status::Ok();
  }
  Table& table = *it->second;
  *loaded = table.loaded();
  if (st.claimed.count(config.table_id)) {
    if (!SameTableConfig(table.config(), config)) {
      return FailedPrecondition(DescribeTable(table.config()) + " exists; it cannot be created again as " +
                                DescribeTable(config));
    }
    return Status::Ok();
  }
  // Loaded from a checkpoint and not declared yet: the job's declaration decides its mode and
  // hyperparameters, the checkpoint its shape and optimizer.
  if (Status s = CheckLoadable(table.config(), config); !s.ok()) return s;
  table.Reconfigure(config);
  st.SetRowLimit(table);
  st.claimed.insert(config.table_id);
  return Status::Ok();
}

Status ServerCore::PullDense(uint32_t id, uint64_t begin, uint64_t end, const Allocate& out) {
  std::shared_ptr<Table> table;
  if (Status s = state_->FindKind(id, TableKind::kDense, &table); !s.ok()) return s;
  if (end < begin) return InvalidArgument("range end " + std::to_string(end) + " is before its begin");
  const uint64_t n = end - begin;
  if (n > state_->options.max_message_bytes / sizeof(float)) {
    return ResourceExhausted("a dense pull of " + std::to_string(n) + " values is over the " +
                             std::to_string(state_->options.max_message_bytes) + "-byte message limit");
  }
  DenseShard* shard = table->AsDense();
  if (Status s = shard->CheckRange(begin, n); !s.ok()) return s;
  char* answer = out(n * sizeof(float));
  if (answer == nullptr) return ResourceExhausted("no memory for a dense answer of " + std::to_string(n) + " values");
  return shard->PullBytes(begin, n, answer);
}

Status ServerCore::PullDense(uint32_t id, uint64_t begin, uint64_t end, std::string* values) {
  return PullDense(id, begin, end, [values](size_t bytes) {
    values->resize(bytes);
    return values->data();
  });
}

namespace {

Status DecodeFloats(const std::string& bytes, std::vector<float>* out, const char* what) {
  if (bytes.size() % sizeof(float) != 0) {
    return InvalidArgument(std::string(what) + " of " + std::to_string(bytes.size()) +
                           " bytes is not a whole number of float32 values");
  }
  out->resize(bytes.size() / sizeof(float));
  if (!bytes.empty()) std::memcpy(out->data(), bytes.data(), bytes.size());  // an empty vector's data() may be null
  return Status::Ok();
}

}  // namespace

Status ServerCore::InitDense(uint32_t id, uint64_t begin, const std::string& values, bool* applied) {
  std::shared_ptr<Table> table;
  if (Status s = state_->FindKind(id, TableKind::kDense, &table); !s.ok()) return s;
  std::vector<float> v;
  if (Status s = DecodeFloats(values, &v, "the initial values"); !s.ok()) return s;
  *applied = false;
  if (table->loaded()) return table->AsDense()->CheckRange(begin, v.size());
  if (Status s = table->AsDense()->Assign(begin, v.data(), v.size()); !s.ok()) return s;
  *applied = true;
  return Status::Ok();
}

void ServerCore::PushDense(uint32_t id, uint64_t begin, uint32_t trainer, const std::string& values, Done done) {
  PushDense(id, begin, trainer, ByteRuns{{values.data(), values.size()}}, std::move(done));
}

void ServerCore::PushDense(uint32_t id, uint64_t begin, uint32_t trainer, const ByteRuns& values, Done done) {
  State& st = *state_;
  std::shared_ptr<Table> table;
  if (Status s = st.FindKind(id, TableKind::kDense, &table); !s.ok()) return done(s);
  if (Status s = st.CheckTrainer(trainer); !s.ok()) return done(s);
  size_t bytes = 0;
  for (const auto& run : values) bytes += run.second;
  if (bytes % sizeof(float) != 0) {
    return done(InvalidArgument("a dense push of " + std::to_string(bytes) +
                                " bytes is not a whole number of float32 values"));
  }
  const uint64_t n = bytes / sizeof(float);
  DenseShard* shard = table->AsDense();
  if (Status s = shard->CheckRange(begin, n); !s.ok()) return done(s);
  if (table->config().mode != Mode::kSync) return done(shard->UpdateBytes(begin, values, n));

  DenseRound full;
  {
    std::lock_guard lock(st.sync_mutex);
    SyncState& sync = st.sync[id];
    Status refuse = !st.aborted.ok() ? st.aborted : !sync.broken.ok() ? sync.broken : st.StoppedTrainers();
    if (!refuse.ok()) return done(refuse);
    DenseRound& round = sync.dense[begin];
    if (round.gradients.empty()) {
      round.gradients.resize(static_cast<size_t>(st.options.trainers));
      round.n = n;
      round.started = Clock::now();
    }
    if (round.n != n) {
      return done(InvalidArgument("trainer " + std::to_string(trainer) + " pushed " + std::to_string(n) +
                                  " values at offset " + std::to_string(begin) + " of " + TableName(id) +
                                  " but this step's other pushes there have " + std::to_string(round.n)));
    }
    if (!round.gradients[trainer].empty() || n == 0) {
      if (n == 0) return done(InvalidArgument("an empty dense push"));
      return done(FailedPrecondition("trainer " + std::to_string(trainer) + " pushed offset " +
                                     std::to_string(begin) + " of " + TableName(id) + " twice in one sync step"));
    }
    std::string& mine = round.gradients[trainer];
    mine.reserve(bytes);
    for (const auto& run : values) mine.append(run.first, run.second);
    round.waiters.push_back(std::move(done));
    if (++round.pushed < st.options.trainers) return;
    full = std::move(round);
    sync.dense.erase(begin);
  }
  // The last pusher applies the step, outside the lock: the step's pushers wait for this answer,
  // so the same range cannot start its next step meanwhile.
  // Sum in trainer order (the result never depends on arrival order), then average.
  std::vector<float> sum(n), g(n);
  std::memcpy(sum.data(), full.gradients[0].data(), n * sizeof(float));
  for (size_t t = 1; t < full.gradients.size(); ++t) {
    std::memcpy(g.data(), full.gradients[t].data(), n * sizeof(float));
    for (uint64_t i = 0; i < n; ++i) sum[i] += g[i];
  }
  const float scale = 1.0f / static_cast<float>(st.options.trainers);
  for (float& x : sum) x *= scale;
  const Status applied = shard->Update(begin, sum.data(), n);
  for (Done& d : full.waiters) d(applied);
}

Status ServerCore::PullSparse(uint32_t id, const std::vector<uint64_t>& keys, const Allocate& out) {
  std::shared_ptr<Table> table;
  if (Status s = state_->FindKind(id, TableKind::kSparse, &table); !s.ok()) return s;
  const uint64_t dim = table->config().dim;
  if (Status s = state_->CheckSize(uint64_t{keys.size()} * dim * sizeof(float), "a sparse pull's answer"); !s.ok()) {
    return s;
  }
  SparseShard* shard = table->AsSparse();
  if (Status s = shard->CheckKeys(keys.data(), keys.size()); !s.ok()) return s;
  char* answer = out(keys.size() * dim * sizeof(float));
  if (answer == nullptr) return ResourceExhausted("no memory for a sparse answer of " + std::to_string(keys.size()) + " rows");
  return shard->PullBytes(keys.data(), keys.size(), answer);
}

Status ServerCore::PullSparse(uint32_t id, const std::string& keys, std::string* values) {
  if (keys.size() % sizeof(uint64_t) != 0) {
    return InvalidArgument("sparse keys of " + std::to_string(keys.size()) + " bytes are not whole uint64 values");
  }
  std::vector<uint64_t> k(keys.size() / sizeof(uint64_t));
  if (!keys.empty()) std::memcpy(k.data(), keys.data(), keys.size());
  return PullSparse(id, k, [values](size_t bytes) {
    values->resize(bytes);
    return values->data();
  });
}

namespace {

// A completed sync step of a sparse table: per key, the sum over trainers in trainer order (the
// result never depends on arrival order), divided by the trainer count, applied to the shard.
Status ApplySparseStep(const SparseRound& step, uint64_t dim, int trainers, SparseShard* shard) {
  std::unordered_map<uint64_t, size_t> slot;
  std::vector<uint64_t> order;
  std::vector<float> sums;
  std::vector<float> g(dim);
  for (const SparseRound::Part& p : step.parts) {
    for (const auto& [kb, vb] : p.chunks) {
      const size_t m = kb.size() / sizeof(uint64_t);
      for (size_t i = 0; i < m; ++i) {
        uint64_t key;
        std::memcpy(&key, kb.data() + i * sizeof(uint64_t), sizeof(key));
        std::memcpy(g.data(), vb.data() + i * dim * sizeof(float), dim * sizeof(float));
        auto [it, inserted] = slot.try_emplace(key, order.size());
        if (inserted) {
          order.push_back(key);
          sums.insert(sums.end(), g.begin(), g.end());
        } else {
          float* sum = sums.data() + it->second * dim;
          for (uint64_t j = 0; j < dim; ++j) sum[j] += g[j];
        }
      }
    }
  }
  const float scale = 1.0f / static_cast<float>(trainers);
  for (float& x : sums) x *= scale;
  return shard->Update(order.data(), sums.data(), order.size());
}

}  // namespace

void ServerCore::PushSparse(uint32_t id, uint32_t trainer, uint32_t chunk_count, const std::string& keys,
                            const std::string& values, Done done) {
  State& st = *state_;
  std::shared_ptr<Table> table;
  if (Status s = st.FindKind(id, TableKind::kSparse, &table); !s.ok()) return done(s);
  if (Status s = st.CheckTrainer(trainer); !s.ok()) return done(s);
  const uint64_t dim = table->config().dim;
  if (keys.size() % sizeof(uint64_t) != 0) {
    return done(InvalidArgument("sparse keys of " + std::to_string(keys.size()) + " bytes are not whole uint64 values"));
  }
  const size_t n = keys.size() / sizeof(uint64_t);
  if (values.size() != n * dim * sizeof(float)) {
    return done(InvalidArgument("a sparse push of " + std::to_string(n) + " keys of dim " + std::to_string(dim) +
                                " needs " + std::to_string(n * dim * sizeof(float)) + " bytes of values, got " +
                                std::to_string(values.size())));
  }
  // (An empty push has no keys: an empty vector's data() may be null, which memcpy must not get.)
  std::vector<uint64_t> k(n);
  if (n > 0) std::memcpy(k.data(), keys.data(), keys.size());
  SparseShard* shard = table->AsSparse();
  if (Status s = shard->CheckKeys(k.data(), n); !s.ok()) return done(s);
  if (table->config().mode != Mode::kSync) {
    std::vector<float> v(n * dim);
    if (n > 0) std::memcpy(v.data(), values.data(), values.size());
    return done(shard->Update(k.data(), v.data(), n));
  }

  if (chunk_count == 0 || chunk_count > (1u << 20)) {
    return done(InvalidArgument("a sync sparse push needs 0 < chunk_count <= 2^20, got " + std::to_string(chunk_count)));
  }
  SparseRound full;
  bool complete = false;
  if (Status s = st.JoinSparseStep(id, trainer, chunk_count, keys, values, done, &full, &complete); !s.ok()) {
    return done(s);
  }
  if (!complete) return;  // `done` waits in the step
  // The last chunk's pusher applies the step, outside the lock.
  const Status applied = ApplySparseStep(full, dim, st.options.trainers, shard);
  for (Done& d : full.waiters) d(applied);
}

void ServerCore::Barrier(uint32_t trainer, uint64_t generation, Done done) {
  State& st = *state_;
  if (Status s = st.CheckTrainer(trainer); !s.ok()) return done(s);
  Completions completions;
  {
    std::lock_guard lock(st.sync_mutex);
    Status refuse = !st.aborted.ok() ? st.aborted : st.StoppedTrainers();
    if (!refuse.ok()) return done(refuse);
    if (generation != st.barrier.generation) {
      return done(FailedPrecondition("trainer " + std::to_string(trainer) + " enters barrier " +
                                     std::to_string(generation) + " but the others are at barrier " +
                                     std::to_string(st.barrier.generation)));
    }
    if (!st.barrier.arrived.insert(trainer).second) {
      return done(FailedPrecondition("trainer " + std::to_string(trainer) + " entered barrier " +
                                     std::to_string(generation) + " twice"));
    }
    if (st.barrier.waiters.empty()) st.barrier.started = Clock::now();
    st.barrier.waiters.push_back(std::move(done));
    if (st.barrier.arrived.size() < static_cast<size_t>(st.options.trainers)) return;
    ++st.barrier.generation;
    st.barrier.arrived.clear();
    for (Done& d : st.barrier.waiters) completions.emplace_back(std::move(d), Status::Ok());
    st.barrier.waiters.clear();
  }
  Run(completions);
}

Status ServerCore::SaveDirectory(const std::string& dir, std::string* path) const {
  namespace fs = std::filesystem;
  const std::string& root = state_->options.save_root;
  const std::string outside = "save directory '" + dir + "' is outside this server's save root " + root +
                              " (saves go under it: set FLEET_PS_SAVE_ROOT or fleet-ps-server --save_root to allow another)";
  for (const fs::path& part : fs::path(dir)) {
    if (part == "..") return PermissionDenied(outside + "; '..' is not allowed");
  }
  // Symbolic links already there are followed (weakly_canonical) before comparing, so a link inside
  // the root does not lead out of it.
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(root, ec);
  if (ec) return Internal("cannot resolve the save root " + root + ": " + ec.message());
  const fs::path target = fs::weakly_canonical(fs::path(root) / dir, ec);  // an absolute dir replaces root
  if (ec) return Internal("cannot resolve the save directory " + dir + ": " + ec.message());
  const fs::path inside = target.lexically_relative(base);
  if (inside.empty() || *inside.begin() == "..") return PermissionDenied(outside);
  *path = target.string();
  return Status::Ok();
}

Status ServerCore::Save(const std::string& dir_name, uint32_t* count) {
  std::string dir;
  if (Status s = SaveDirectory(dir_name, &dir); !s.ok()) return s;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Internal("cannot create the model directory " + dir + ": " + ec.message());
  std::vector<std::shared_ptr<Table>> tables;
  {
    std::shared_lock lock(state_->tables_mutex);
    for (const auto& [id, t] : state_->tables) tables.push_back(t);
  }
  for (const auto& t : tables) {
    if (Status s = t->Save(dir, state_->options.server_index, state_->options.server_count); !s.ok()) return s;
  }
  *count = static_cast<uint32_t>(tables.size());
  return Status::Ok();
}

Status ServerCore::StopWorker(uint32_t trainer, bool* all_stopped) {
  State& st = *state_;
  if (Status s = st.CheckTrainer(trainer); !s.ok()) return s;
  Completions completions;
  {
    std::lock_guard lock(st.sync_mutex);
    st.stopped.insert(trainer);
    // Steps and barriers that wait for this trainer can never complete now.
    const Status why = st.StoppedTrainers();
    for (auto& [id, sync] : st.sync) {
      bool waits_for_stopped = false;
      for (const auto& [begin, round] : sync.dense) {
        if (round.gradients[trainer].empty()) waits_for_stopped = true;
      }
      if (sync.sparse.active()) {
        const SparseRound::Part& p = sync.sparse.parts[trainer];
        if (p.expected == 0 || p.chunks.size() < p.expected) waits_for_stopped = true;
      }
      if (waits_for_stopped) st.BreakTable(sync, why, &completions);
    }
    if (!st.barrier.waiters.empty() && !st.barrier.arrived.count(trainer)) st.FailBarrier(why, &completions);
    *all_stopped = st.stopped.size() == static_cast<size_t>(st.options.trainers);
  }
  st.stopped_cv.notify_all();
  Run(completions);
  return Status::Ok();
}

void ServerCore::AbortWaiters(const Status& status) {
  Completions completions;
  {
    std::lock_guard lock(state_->sync_mutex);
    state_->aborted = status;
    for (auto& [id, sync] : state_->sync) state_->BreakTable(sync, status, &completions);
    state_->FailBarrier(status, &completions);
  }
  state_->stopped_cv.notify_all();
  Run(completions);
}

Clock::time_point ServerCore::ExpireWaiters(Clock::time_point now) {
  State& st = *state_;
  const auto timeout = st.options.sync_timeout;
  Completions completions;
  Clock::time_point next = Clock::time_point::max();
  {
    std::lock_guard lock(st.sync_mutex);
    for (auto& [id, sync] : st.sync) {
      Clock::time_point oldest = Clock::time_point::max();
      std::set<int> missing;
      for (const auto& [begin, round] : sync.dense) {
        oldest = std::min(oldest, round.started);
        for (size_t t = 0; t < round.gradients.size(); ++t) {
          if (round.gradients[t].empty()) missing.insert(static_cast<int>(t));
        }
      }
      if (sync.sparse.active()) {
        oldest = std::min(oldest, sync.sparse.started);
        for (size_t t = 0; t < sync.sparse.parts.size(); ++t) {
          const SparseRound::Part& p = sync.sparse.parts[t];
          if (p.expected == 0 || p.chunks.size() < p.expected) missing.insert(static_cast<int>(t));
        }
      }
      if (oldest == Clock::time_point::max()) continue;
      if (now - oldest >= timeout) {
        std::string who;
        for (int t : missing) who += (who.empty() ? "" : ", ") + std::to_string(t);
        st.BreakTable(sync,
                      Aborted("a sync step of " + TableName(id) + " waited " +
                              std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout).count()) +
                              " s for trainer(s) " + who + "; sync training cannot go on"),
                      &completions);
      } else {
        next = std::min(next, oldest + timeout);
      }
    }
    if (!st.barrier.waiters.empty()) {
      if (now - st.barrier.started >= timeout) {
        st.FailBarrier(Aborted("barrier " + std::to_string(st.barrier.generation) + " waited " +
                               std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout).count()) +
                               " s for the other trainers"),
                       &completions);
      } else {
        next = std::min(next, st.barrier.started + timeout);
      }
    }
  }
  Run(completions);
  return next;
}

bool ServerCore::WaitAllStopped(Clock::time_point deadline) {
  std::unique_lock lock(state_->sync_mutex);
  auto all = [&] {
    return state_->stopped.size() == static_cast<size_t>(state_->options.trainers) || !state_->aborted.ok();
  };
  if (deadline == Clock::time_point::max()) {
    state_->stopped_cv.wait(lock, all);
    return true;
  }
  return state_->stopped_cv.wait_until(lock, deadline, all);
}

}  // namespace fleet::ps
