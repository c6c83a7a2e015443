// One server's shard of a table, and the checkpoint files shards are saved to.
//
// Shards are thread-safe. A dense shard is one array behind a reader/writer lock (pulls share it,
// updates are exclusive). A sparse shard spreads its rows over buckets, each with its own lock, so
// pulls and pushes of different keys proceed in parallel; a row is created the first time it is
// pulled or pushed, with values that depend only on (seed, table id, key): the same on any server
// and in any order.
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
  ShardRange range_;
  int slots_ = 0;
  std::vector<float> values_;
  std::vector<float> state_;  // slots_ arrays of range_.size()
};

class SparseShard final : public Table {
 public:
  static constexpr int kBuckets = 64;
  SparseShard(TableConfig config, int server_index, int server_count);
  SparseShard* AsSparse() override { return this; }

  // Every key must belong to this server (key % count == index).
  Status CheckKeys(const uint64_t* keys, size_t n) const;
  // out: n x dim. Missing rows are created.
  Status Pull(const uint64_t* keys, size_t n, float* out);
  // The same as wire bytes (any alignment).
  Status PullBytes(const uint64_t* keys, size_t n, char* out);
  // Sync and async: one optimizer step per row. Geo: adds the deltas. values: n x dim.
  Status Update(const uint64_t* keys, const float* values, size_t n);
  size_t RowCount() const;
  // The initial values of a row (what a first pull returns).
  static void InitialRow(const TableConfig& config, uint64_t key, float* out);

  Status Save(const std::string& dir, int server_index, int server_count) const override;
  // Inserts or replaces a row with its values and state (1 + slots arrays of dim floats).
  void LoadRow(uint64_t key, const float* row);

 private:
  struct Bucket {
    std::mutex mutex;
    std::unordered_map<uint64_t, size_t> index;  // key -> row number in rows
    std::vector<float> rows;                      // row_floats_ per row: values, then state
  };
  Bucket& BucketOf(uint64_t key) const;
  float* FindOrCreate(Bucket& bucket, uint64_t key);  // caller holds bucket.mutex

  int server_index_;
  int server_count_;
  int slots_;
  size_t row_floats_;
  std::unique_ptr<Bucket[]> buckets_;
};

// Creates an empty shard of `config` for server `index` of `count`.
std::unique_ptr<Table> MakeShard(const TableConfig& config, int index, int count);

// Reads every checkpoint file in `dir` and returns the shards server `index` of `count` owns,
// marked loaded. Errors name the file: a truncated or corrupted file, shards of one table that
// disagree on its config, or a missing shard.
Status LoadShards(const std::string& dir, int index, int count, std::vector<std::unique_ptr<Table>>* tables);

}  // namespace fleet::ps
