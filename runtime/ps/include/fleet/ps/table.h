// One server's shard of a table, and the checkpoint files shards are saved to.
//
// Shards are thread-safe. A dense shard is one array behind a reader/writer lock (pulls share it,
// updates are exclusive). A sparse shard spreads its rows over buckets, each with its own lock, so
// pulls and pushes of different keys proceed in parallel; a row is created the first time it is
// pulled or pushed, with values that depend only on (seed, table id, key): the same on any server
// and in any order. A sparse shard holds at most max_rows() rows: a pull or push that would create
// rows past it is refused whole (RESOURCE_EXHAUSTED), and the rows it has keep working.
//
// Checkpoints: every server writes one file per table into the model directory,
//   table_<id>.shard_<index>_of_<count>
// holding the table's config, the shard's values and optimizer state, and a checksum. A server
// loads a directory by reading every shard file of every table and keeping what it owns under the
// current server count, so a model saved by 4 servers loads into 2.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "fleet/ps/config.h"
#include "fleet/ps/status.h"

namespace fleet::ps {

class DenseShard;
class SparseShard;

// Bytes lying in pieces (a message's payload across the slices it arrived in).
using ByteRuns = std::vector<std::pair<const char*, size_t>>;

class Table {
 public:
  virtual ~Table() = default;
  const TableConfig& config() const { return config_; }
  // Replaces mode and hyperparameters (not the shape or optimizer kind) — a loaded table adopting
  // the configuration its trainers declare.
  void Reconfigure(const TableConfig& config);
  // True when its values came from a checkpoint: trainers' initial values do not overwrite them.
  bool loaded() const { return loaded_; }
  void set_loaded(bool loaded) { loaded_ = loaded; }

  virtual DenseShard* AsDense() { return nullptr; }
  virtual SparseShard* AsSparse() { return nullptr; }
  // Writes this shard's checkpoint file into `dir` (to a temporary name, then renamed).
  virtual Status Save(const std::string& dir, int server_index, int server_count) const = 0;

 protected:
  explicit Table(TableConfig config) : config_(std::move(config)) {}
  mutable std::shared_mutex mutex_;
  TableConfig config_;
  bool loaded_ = false;
};

class DenseShard final : public Table {
 public:
  DenseShard(TableConfig config, ShardRange range);
  DenseShard* AsDense() override { return this; }
  ShardRange range() const { return range_; }

  // Global offsets; [begin, begin + n) must lie inside the shard.
  Status CheckRange(uint64_t begin, uint64_t n) const;
  Status Pull(uint64_t begin, uint64_t n, float* out) const;
  // Sets values and resets the optimizer state of the range.
  Status Assign(uint64_t begin, const float* values, uint64_t n);
  // Sync and async: one optimizer step. Geo: adds the delta.
  Status Update(uint64_t begin, const float* gradient_or_delta, uint64_t n);
  // The same from wire bytes (little-endian float32, any alignment) lying in pieces, as received:
  // n values in `runs`, applied without copying them whole first.
  Status UpdateBytes(uint64_t begin, const ByteRuns& runs, uint64_t n);
  // n values as wire bytes into out (any alignment).
  Status PullBytes(uint64_t begin, uint64_t n, char* out) const;

  Status Save(const std::string& dir, int server_index, int server_count) const override;
  // Copies the part of a saved shard ([saved_begin, saved_begin + count)) that overlaps this one.
  void LoadOverlap(uint64_t saved_begin, const float* values, const float* state, uint64_t count);

 private:
  // The optimizer state of the value at `offset`; null when there is none (SGD keeps no state, and
  // an empty vector's data() may be null: no offset may be applied to it).
  float* StateAt(size_t offset) { return state_.empty() ? nullptr : state_.data() + offset; }

  // Every method returns before touching values_ or state_ for n == 0: a shard may hold no values
  // (a table smaller than the server count), and its callers may pass null with a count of 0.
  ShardRange range_;
  int slots_ = 0;
  std::vector<float> values_;
  std::vector<float> state_;  // slots_ arrays of range_.size()
};

class SparseShard final : public Table {
 public:
  static constexpr int kBuckets = 64;
  // Where the row limit came from, for the message that refuses a request.
  enum class LimitSource { kDeclared, kServerDefault, kMemory };

  // The row limit is config.max_rows, or DefaultMaxRows(config) when that is 0.
  SparseShard(TableConfig config, int server_index, int server_count);
  SparseShard* AsSparse() override { return this; }

  // Every key must belong to this server (key % count == index).
  Status CheckKeys(const uint64_t* keys, size_t n) const;
  // out: n x dim. Missing rows are created, all of them or (past the row limit) none.
  Status Pull(const uint64_t* keys, size_t n, float* out);
  // The same as wire bytes (any alignment).
  Status PullBytes(const uint64_t* keys, size_t n, char* out);
  // Sync and async: one optimizer step per row. Geo: adds the deltas. values: n x dim. Missing rows
  // are created first; past the row limit nothing at all is applied.
  Status Update(const uint64_t* keys, const float* values, size_t n);
  // The rows counted as created (what the row limit is checked against).
  size_t RowCount() const;
  // The rows the buckets hold, counted one by one (bucket by bucket, each under its lock): equal to
  // RowCount() once no request is running. For checks; RowCount() is the cheap one.
  size_t CountStoredRows() const;
  // The initial values of a row (what a first pull returns).
  static void InitialRow(const TableConfig& config, uint64_t key, float* out);

  uint64_t max_rows() const;
  // A new limit (a declaration or server default replacing the one the shard was made with). A
  // shard already over it keeps its rows and creates no more.
  void SetMaxRows(uint64_t rows, LimitSource source);
  // Memory one row takes: values and optimizer state, key and index entry.
  static uint64_t RowBytes(const TableConfig& config);
  // The limit of a table that declares none on a server without a default: half of this machine's
  // memory (its cgroup's limit where lower) in rows of RowBytes(config), so that no one table's
  // shard can grow until the server is killed for memory.
  static uint64_t DefaultMaxRows(const TableConfig& config);

  Status Save(const std::string& dir, int server_index, int server_count) const override;
  // Inserts or replaces a row with its values and state (1 + slots arrays of dim floats). Rows
  // loaded from a checkpoint are never refused; they count towards the limit.
  void LoadRow(uint64_t key, const float* row);

 private:
  struct Bucket {
    std::mutex mutex;
    std::unordered_map<uint64_t, size_t> index;  // key -> row number in rows
    std::vector<float> rows;                      // row_floats_ per row: values, then state
  };
  Bucket& BucketOf(uint64_t key) const;
  // Caller holds bucket.mutex. Find: the row or nullptr; Create: a new row for an absent key.
  float* Find(Bucket& bucket, uint64_t key);
  float* Create(Bucket& bucket, uint64_t key);
  // Creates the rows of keys[i], i in `at`, that do not exist: all of them, or none (an error) when
  // that would take the shard past its limit. `what` names the request for the message.
  Status CreateRows(const uint64_t* keys, const std::vector<size_t>& at, const char* what);

  int server_index_;
  int server_count_;
  int slots_;
  size_t row_floats_;
  std::unique_ptr<Bucket[]> buckets_;
  // Every row is created under grow_mutex_, so "would these rows pass the limit" is exact even
  // with concurrent requests; lookups of existing rows never take it.
  mutable std::mutex grow_mutex_;
  uint64_t rows_ = 0;
  uint64_t max_rows_ = 0;
  LimitSource limit_source_ = LimitSource::kDeclared;
};

// Creates an empty shard of `config` for server `index` of `count`.
std::unique_ptr<Table> MakeShard(const TableConfig& config, int index, int count);

// Reads every checkpoint file in `dir` and returns the shards server `index` of `count` owns,
// marked loaded. Errors name the file: a truncated or corrupted file, shards of one table that
// disagree on its config, or a missing shard.
Status LoadShards(const std::string& dir, int index, int count, std::vector<std::unique_ptr<Table>>* tables);

}  // namespace fleet::ps
