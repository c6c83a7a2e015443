#include "fleet/ps/config.h"

#include <cmath>
#include <sstream>

namespace fleet::ps {
namespace {

bool Finite(float x) { return std::isfinite(x); }

}  // namespace

std::string_view ModeName(Mode mode) {
  switch (mode) {
    case Mode::kSync: return "sync";
    case Mode::kAsync: return "async";
    case Mode::kGeo: return "geo";
  }
  return "async";
}

Status ParseMode(std::string_view text, Mode* mode) {
  if (text == "sync") *mode = Mode::kSync;
  else if (text == "async") *mode = Mode::kAsync;
  else if (text == "geo") *mode = Mode::kGeo;
  else return InvalidArgument("mode must be sync, async or geo, got '" + std::string(text) + "'");
  return Status::Ok();
}

std::string_view OptimizerName(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd: return "sgd";
    case OptimizerKind::kAdam: return "adam";
    case OptimizerKind::kAdagrad: return "adagrad";
  }
  return "sgd";
}

Status ParseOptimizer(std::string_view text, OptimizerKind* kind) {
  if (text == "sgd") *kind = OptimizerKind::kSgd;
  else if (text == "adam") *kind = OptimizerKind::kAdam;
  else if (text == "adagrad") *kind = OptimizerKind::kAdagrad;
  else return InvalidArgument("optimizer must be sgd, adam or adagrad, got '" + std::string(text) + "'");
  return Status::Ok();
}

OptimizerConfig OptimizerConfig::Sgd(float lr) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kSgd;
  c.learning_rate = lr;
  return c;
}

OptimizerConfig OptimizerConfig::Adam(float lr, float beta1, float beta2, float epsilon) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdam;
  c.learning_rate = lr;
  c.beta1 = beta1;
  c.beta2 = beta2;
  c.epsilon = epsilon;
  return c;
}

OptimizerConfig OptimizerConfig::Adagrad(float lr, float epsilon, float initial_accumulator) {
  OptimizerConfig c;
  c.kind = OptimizerKind::kAdagrad;
  c.learning_rate = lr;
  c.epsilon = epsilon;
  c.initial_accumulator = initial_accumulator;
  return c;
}

TableConfig TableConfig::Dense(uint32_t id, uint64_t size, OptimizerConfig optimizer, Mode mode) {
  TableConfig c;
  c.table_id = id;
  c.kind = TableKind::kDense;
  c.size = size;
  c.optimizer = optimizer;
  c.mode = mode;
  return c;
}

TableConfig TableConfig::Sparse(uint32_t id, uint32_t dim, OptimizerConfig optimizer, Mode mode,
                                float init_range, uint64_t seed, uint64_t max_rows) {
  TableConfig c;
  c.table_id = id;
  c.kind = TableKind::kSparse;
  c.dim = dim;
  c.optimizer = optimizer;
  c.mode = mode;
  c.init_range = init_range;
  c.seed = seed;
  c.max_rows = max_rows;
  return c;
}

int OptimizerStateSlots(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::kSgd: return 0;
    case OptimizerKind::kAdagrad: return 1;
    case OptimizerKind::kAdam: return 4;
  }
  return 0;
}

Status ValidateTableConfig(const TableConfig& c) {
  const std::string what = "table " + std::to_string(c.table_id) + ": ";
  if (c.kind != TableKind::kDense && c.kind != TableKind::kSparse) return InvalidArgument(what + "unknown kind");
  if (c.kind == TableKind::kDense) {
    if (c.size == 0) return InvalidArgument(what + "a dense table needs size > 0");
    if (c.size > (uint64_t{1} << 36)) return InvalidArgument(what + "a dense table of more than 2^36 values");
    if (c.dim != 0) return InvalidArgument(what + "a dense table has no dim");
    if (c.max_rows != 0) return InvalidArgument(what + "a dense table has no max_rows");
  } else {
    if (c.dim == 0 || c.dim > 65536) return InvalidArgument(what + "a sparse table needs 0 < dim <= 65536");
    if (c.size != 0) return InvalidArgument(what + "a sparse table has no size");
    if (!Finite(c.init_range) || c.init_range < 0) return InvalidArgument(what + "init_range must be >= 0");
  }
  const OptimizerConfig& o = c.optimizer;
  if (o.kind != OptimizerKind::kSgd && o.kind != OptimizerKind::kAdam && o.kind != OptimizerKind::kAdagrad) {
    return InvalidArgument(what + "unknown optimizer");
  }
  if (!Finite(o.learning_rate) || o.learning_rate < 0) return InvalidArgument(what + "learning_rate must be >= 0");
  if (o.kind == OptimizerKind::kAdam) {
    if (!(o.beta1 >= 0 && o.beta1 < 1) || !(o.beta2 >= 0 && o.beta2 < 1)) {
      return InvalidArgument(what + "Adam needs 0 <= beta1, beta2 < 1");
    }
  }
  if (o.kind != OptimizerKind::kSgd && !(Finite(o.epsilon) && o.epsilon > 0)) {
    return InvalidArgument(what + "epsilon must be > 0");
  }
  if (!Finite(o.initial_accumulator) || o.initial_accumulator < 0) {
    return InvalidArgument(what + "initial_accumulator must be >= 0");
  }
  if (c.mode != Mode::kSync && c.mode != Mode::kAsync && c.mode != Mode::kGeo) {
    return InvalidArgument(what + "unknown mode");
  }
  if (c.mode == Mode::kGeo) {
    if (c.k_steps == 0) return InvalidArgument(what + "geo mode needs k_steps > 0");
    if (o.kind != OptimizerKind::kSgd) {
      return InvalidArgument(what + "geo mode supports only the SGD optimizer (as Paddle's geo mode)");
    }
  } else if (c.k_steps != 0) {
    return InvalidArgument(what + "k_steps is only for geo mode");
  }
  return Status::Ok();
}

std::string DescribeTable(const TableConfig& c) {
  std::ostringstream out;
  if (c.kind == TableKind::kDense) {
    out << "dense table " << c.table_id << " (size " << c.size;
  } else {
    out << "sparse table " << c.table_id << " (dim " << c.dim;
  }
  out << ", " << OptimizerName(c.optimizer.kind) << " lr=" << c.optimizer.learning_rate << ", "
      << ModeName(c.mode);
  if (c.mode == Mode::kGeo) out << " k_steps=" << c.k_steps;
  if (c.max_rows != 0) out << ", max_rows " << c.max_rows;
  out << ")";
  return out.str();
}

bool SameTableConfig(const TableConfig& a, const TableConfig& b) {
  const OptimizerConfig& x = a.optimizer;
  const OptimizerConfig& y = b.optimizer;
  return a.table_id == b.table_id && a.kind == b.kind && a.size == b.size && a.dim == b.dim &&
         a.mode == b.mode && a.k_steps == b.k_steps && a.init_range == b.init_range && a.seed == b.seed &&
         a.max_rows == b.max_rows && x.kind == y.kind && x.learning_rate == y.learning_rate && x.beta1 == y.beta1 &&
         x.beta2 == y.beta2 &&
         x.epsilon == y.epsilon && x.initial_accumulator == y.initial_accumulator;
}

Status CheckLoadable(const TableConfig& saved, const TableConfig& declared) {
  if (saved.kind != declared.kind || saved.size != declared.size || saved.dim != declared.dim) {
    return FailedPrecondition("the checkpoint holds " + DescribeTable(saved) + " but the job declares " +
                              DescribeTable(declared));
  }
  if (saved.optimizer.kind != declared.optimizer.kind) {
    return FailedPrecondition("the checkpoint of table " + std::to_string(saved.table_id) + " has " +
                              std::string(OptimizerName(saved.optimizer.kind)) + " state but the job declares " +
                              std::string(OptimizerName(declared.optimizer.kind)));
  }
  return Status::Ok();
}

ShardRange DenseShardRange(uint64_t size, int servers, int index) {
  const uint64_t n = static_cast<uint64_t>(servers);
  const uint64_t i = static_cast<uint64_t>(index);
  const uint64_t q = size / n;
  const uint64_t r = size % n;
  ShardRange range;
  range.begin = i * q + (i < r ? i : r);
  range.end = range.begin + q + (i < r ? 1 : 0);
  return range;
}

}  // namespace fleet::ps
