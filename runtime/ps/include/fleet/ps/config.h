// Table configurations and how tables are split across servers.
//
// A table is either dense (a flat float32 vector of `size` values, e.g. the weights of an MLP) or
// sparse (embedding rows of `dim` floats addressed by uint64 keys, created on first pull). Every
// table lives on every server of PADDLE_PSERVERS_IP_PORT_LIST as one shard:
//   dense: server i of n owns the contiguous range DenseShardRange(size, n, i) (numpy.array_split);
//   sparse: a key belongs to server key % n (as Paddle's tables shard by key).
// The optimizer runs on the server (sync, async); in geo mode trainers run SGD locally and the
// server adds the deltas they push.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fleet/ps/status.h"

namespace fleet::ps {

// DistributedStrategy's parameter-server modes: a_sync = False -> kSync; a_sync = True -> kAsync;
// a_sync = True with a_sync_configs = {"k_steps": k > 0} -> kGeo.
enum class Mode { kSync = 1, kAsync = 2, kGeo = 3 };
enum class OptimizerKind { kSgd = 1, kAdam = 2, kAdagrad = 3 };
enum class TableKind { kDense = 0, kSparse = 1 };

std::string_view ModeName(Mode mode);                 // "sync" / "async" / "geo"
Status ParseMode(std::string_view text, Mode* mode);
std::string_view OptimizerName(OptimizerKind kind);   // "sgd" / "adam" / "adagrad"
Status ParseOptimizer(std::string_view text, OptimizerKind* kind);

// Paddle's defaults: Adam beta1 0.9, beta2 0.999, epsilon 1e-8; Adagrad epsilon 1e-6, initial
// accumulator 0.
struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::kSgd;
  float learning_rate = 0.01f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float initial_accumulator = 0.0f;

  static OptimizerConfig Sgd(float lr);
  static OptimizerConfig Adam(float lr, float beta1 = 0.9f, float beta2 = 0.999f, float epsilon = 1e-8f);
  static OptimizerConfig Adagrad(float lr, float epsilon = 1e-6f, float initial_accumulator = 0.0f);
};

struct TableConfig {
  uint32_t table_id = 0;
  TableKind kind = TableKind::kDense;
  uint64_t size = 0;        // dense: values in the whole table
  uint32_t dim = 0;         // sparse: floats per row
  OptimizerConfig optimizer;
  Mode mode = Mode::kAsync;
  uint32_t k_steps = 0;     // geo only: local steps between pushes (> 0)
  float init_range = 0.0f;  // sparse: new rows uniform in [-init_range, init_range]
  uint64_t seed = 0;        // sparse: a new row's values depend on (seed, table_id, key) only
  // sparse: the most rows one server's shard of the table holds; 0 takes the server's default
  // (ServerOptions::sparse_max_rows, else SparseShard::DefaultMaxRows). A pull or push that would
  // create rows past it fails with RESOURCE_EXHAUSTED. A limit, not model state: checkpoints do
  // not keep it, and the job's declaration may change it.
  uint64_t max_rows = 0;

  static TableConfig Dense(uint32_t id, uint64_t size, OptimizerConfig optimizer, Mode mode = Mode::kAsync);
  static TableConfig Sparse(uint32_t id, uint32_t dim, OptimizerConfig optimizer, Mode mode = Mode::kAsync,
                            float init_range = 0.0f, uint64_t seed = 0, uint64_t max_rows = 0);
};

// Checks ranges (sizes, learning rate, betas, epsilon finite and sensible; geo needs SGD and k_steps).
Status ValidateTableConfig(const TableConfig& config);
// "dense table 3 (size 8452, adam lr=0.001, sync)" — for messages.
std::string DescribeTable(const TableConfig& config);
// True when two configs are equal field by field.
bool SameTableConfig(const TableConfig& a, const TableConfig& b);
// A checkpoint can be loaded into a table declared with `declared` when the shape and the
// optimizer's kind (hence its state) match; the rest (mode, learning rate, max_rows, ...) may change.
Status CheckLoadable(const TableConfig& saved, const TableConfig& declared);

// Floats of optimizer state kept per value: SGD 0, Adagrad 1 (squared-gradient sum), Adam 4
// (first and second moments, beta1^t, beta2^t).
int OptimizerStateSlots(OptimizerKind kind);

struct ShardRange {
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t size() const { return end - begin; }
};
// numpy.array_split: the first size % servers shards get one extra value.
ShardRange DenseShardRange(uint64_t size, int servers, int index);
inline int SparseShardOf(uint64_t key, int servers) {
  return static_cast<int>(key % static_cast<uint64_t>(servers));
}

}  // namespace fleet::ps
