#include "fleet/ps/table.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "fleet/base/hash.h"
#include "fleet/ps/optimizer.h"

namespace fleet::ps {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[8] = {'F', 'L', 'E', 'E', 'T', 'P', 'S', '\0'};
constexpr uint32_t kFormatVersion = 1;

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::string ShardFileName(uint32_t table, int index, int count) {
  return "table_" + std::to_string(table) + ".shard_" + std::to_string(index) + "_of_" + std::to_string(count);
}

// Appends to a file while hashing what it wrote (FNV-1a 64), so that a reader can tell a truncated
// or damaged checkpoint from a good one.
class CheckpointWriter {
 public:
  explicit CheckpointWriter(const fs::path& path) : path_(path), out_(path, std::ios::binary | std::ios::trunc) {}
  bool is_open() const { return out_.is_open(); }
  void Bytes(const void* data, size_t n) {
    hash_ = Fnv1a64({static_cast<const char*>(data), n}, hash_);
    out_.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  }
  template <typename T>
  void Pod(T value) { Bytes(&value, sizeof(value)); }
  void Floats(const float* data, size_t n) { Bytes(data, n * sizeof(float)); }
  Status Finish() {
    const uint64_t hash = hash_;
    out_.write(reinterpret_cast<const char*>(&hash), sizeof(hash));
    out_.flush();
    if (!out_) return Internal("cannot write " + path_.string() + ": " + std::strerror(errno));
    out_.close();
    return Status::Ok();
  }

 private:
  fs::path path_;
  std::ofstream out_;
  uint64_t hash_ = kFnv1a64Offset;
};

class CheckpointReader {
 public:
  explicit CheckpointReader(const fs::path& path) : path_(path), in_(path, std::ios::binary) {
    std::error_code ec;
    size_ = fs::file_size(path, ec);
    if (ec) size_ = 0;
  }
  bool is_open() const { return in_.is_open(); }
  // Bytes left before the trailing checksum.
  uint64_t remaining() const { return size_ >= 8 + read_ ? size_ - 8 - read_ : 0; }
  bool Bytes(void* data, size_t n) {
    if (n > remaining()) return false;
    in_.read(static_cast<char*>(data), static_cast<std::streamsize>(n));
    if (!in_) return false;
    hash_ = Fnv1a64({static_cast<const char*>(data), n}, hash_);
    read_ += n;
    return true;
  }
  template <typename T>
  bool Pod(T* value) { return Bytes(value, sizeof(T)); }
  bool Floats(float* data, size_t n) { return n <= remaining() / sizeof(float) && Bytes(data, n * sizeof(float)); }
  Status Finish() {
    uint64_t stored = 0;
    if (remaining() != 0) return Corrupt("has " + std::to_string(remaining()) + " unexpected bytes");
    in_.read(reinterpret_cast<char*>(&stored), sizeof(stored));
    if (!in_ || stored != hash_) return Corrupt("fails its checksum");
    return Status::Ok();
  }
  Status Corrupt(const std::string& what) const {
    return DataLoss("checkpoint file " + path_.string() + " " + what);
  }

 private:
  fs::path path_;
  std::ifstream in_;
  uint64_t size_ = 0;
  uint64_t read_ = 0;
  uint64_t hash_ = kFnv1a64Offset;
};

void WriteConfig(CheckpointWriter& w, const TableConfig& c) {
  w.Pod<uint32_t>(c.table_id);
  w.Pod<uint32_t>(static_cast<uint32_t>(c.kind));
  w.Pod<uint64_t>(c.size);
  w.Pod<uint32_t>(c.dim);
  w.Pod<uint32_t>(static_cast<uint32_t>(c.optimizer.kind));
  w.Pod<float>(c.optimizer.learning_rate);
  w.Pod<float>(c.optimizer.beta1);
  w.Pod<float>(c.optimizer.beta2);
  w.Pod<float>(c.optimizer.epsilon);
  w.Pod<float>(c.optimizer.initial_accumulator);
  w.Pod<uint32_t>(static_cast<uint32_t>(c.mode));
  w.Pod<uint32_t>(c.k_steps);
  w.Pod<float>(c.init_range);
  w.Pod<uint64_t>(c.seed);
}

bool ReadConfig(CheckpointReader& r, TableConfig* c) {
  uint32_t kind = 0, optimizer = 0, mode = 0;
  bool ok = r.Pod(&c->table_id) && r.Pod(&kind) && r.Pod(&c->size) && r.Pod(&c->dim) && r.Pod(&optimizer) &&
            r.Pod(&c->optimizer.learning_rate) && r.Pod(&c->optimizer.beta1) && r.Pod(&c->optimizer.beta2) &&
            r.Pod(&c->optimizer.epsilon) && r.Pod(&c->optimizer.initial_accumulator) && r.Pod(&mode) &&
            r.Pod(&c->k_steps) && r.Pod(&c->init_range) && r.Pod(&c->seed);
  c->kind = static_cast<TableKind>(kind);
  c->optimizer.kind = static_cast<OptimizerKind>(optimizer);
  c->mode = static_cast<Mode>(mode);
  return ok;
}

Status Commit(const fs::path& tmp, const fs::path& final_path) {
  std::error_code ec;
  fs::rename(tmp, final_path, ec);
  if (ec) return Internal("cannot rename " + tmp.string() + " to " + final_path.string() + ": " + ec.message());
  return Status::Ok();
}

// The header every shard file starts with.
void WriteHeader(CheckpointWriter& w, const TableConfig& config, int index, int count) {
  w.Bytes(kMagic, sizeof(kMagic));
  w.Pod<uint32_t>(kFormatVersion);
  WriteConfig(w, config);
  w.Pod<uint32_t>(static_cast<uint32_t>(index));
  w.Pod<uint32_t>(static_cast<uint32_t>(count));
}

struct ShardFile {
  fs::path path;
  TableConfig config;
  int index = 0;
  int count = 0;
};

Status ReadHeader(CheckpointReader& r, ShardFile* file) {
  char magic[sizeof(kMagic)] = {};
  uint32_t version = 0, index = 0, count = 0;
  if (!r.Bytes(magic, sizeof(magic)) || std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    return r.Corrupt("is not a FleetJob parameter-server checkpoint");
  }
  if (!r.Pod(&version) || version != kFormatVersion) {
    return r.Corrupt("has format version " + std::to_string(version) + ", expected " + std::to_string(kFormatVersion));
  }
  if (!ReadConfig(r, &file->config) || !r.Pod(&index) || !r.Pod(&count)) return r.Corrupt("is truncated");
  if (Status s = ValidateTableConfig(file->config); !s.ok()) return r.Corrupt("has a bad config: " + s.message());
  if (count == 0 || count > 65536 || index >= count) return r.Corrupt("has a bad shard number");
  file->index = static_cast<int>(index);
  file->count = static_cast<int>(count);
  return Status::Ok();
}

}  // namespace

void Table::Reconfigure(const TableConfig& config) {
  std::unique_lock lock(mutex_);
  config_ = config;
}

// ----------------------------------------------------------------------------------------- dense

DenseShard::DenseShard(TableConfig config, ShardRange range)
    : Table(std::move(config)), range_(range), slots_(OptimizerStateSlots(config_.optimizer.kind)) {
  values_.assign(range_.size(), 0.0f);
  state_.assign(range_.size() * static_cast<size_t>(slots_), 0.0f);
  InitOptimizerState(config_.optimizer, state_.data(), range_.size(), range_.size());
}

Status DenseShard::CheckRange(uint64_t begin, uint64_t n) const {
  if (begin < range_.begin || begin > range_.end || n > range_.end - begin) {
    return OutOfRange("range [" + std::to_string(begin) + ", " + std::to_string(begin + n) + ") of table " +
                      std::to_string(config_.table_id) + " is not inside this server's shard [" +
                      std::to_string(range_.begin) + ", " + std::to_string(range_.end) + ")");
  }
  return Status::Ok();
}

Status DenseShard::Pull(uint64_t begin, uint64_t n, float* out) const {
  if (Status s = CheckRange(begin, n); !s.ok() || n == 0) return s;
  std::shared_lock lock(mutex_);
  std::memcpy(out, values_.data() + (begin - range_.begin), n * sizeof(float));
  return Status::Ok();
}

Status DenseShard::Assign(uint64_t begin, const float* values, uint64_t n) {
  if (Status s = CheckRange(begin, n); !s.ok() || n == 0) return s;
  std::unique_lock lock(mutex_);
  const size_t offset = begin - range_.begin;
  std::memcpy(values_.data() + offset, values, n * sizeof(float));
  InitOptimizerState(config_.optimizer, StateAt(offset), range_.size(), n);
  return Status::Ok();
}

Status DenseShard::Update(uint64_t begin, const float* gradient, uint64_t n) {
  if (Status s = CheckRange(begin, n); !s.ok() || n == 0) return s;
  std::unique_lock lock(mutex_);
  const size_t offset = begin - range_.begin;
  if (config_.mode == Mode::kGeo) {
    AddDelta(values_.data() + offset, gradient, n);
  } else {
    ApplyGradient(config_.optimizer, values_.data() + offset, StateAt(offset), range_.size(), gradient, n);
  }
  return Status::Ok();
}

Status DenseShard::UpdateBytes(uint64_t begin, const ByteRuns& runs, uint64_t n) {
  if (Status s = CheckRange(begin, n); !s.ok()) return s;
  size_t bytes = 0;
  for (const auto& run : runs) bytes += run.second;
  if (bytes != n * sizeof(float)) return InvalidArgument("the values are not " + std::to_string(n) + " float32");
  if (n == 0) return Status::Ok();
  // Block by block through a small aligned buffer (the copy stays in L1), whatever the pieces.
  constexpr uint64_t kBlock = 2048;
  float block[kBlock];
  std::unique_lock lock(mutex_);
  const size_t offset = begin - range_.begin;
  size_t run = 0, in_run = 0;
  for (uint64_t done = 0; done < n; done += kBlock) {
    const uint64_t m = std::min(kBlock, n - done);
    char* to = reinterpret_cast<char*>(block);
    for (size_t want = m * sizeof(float); want > 0;) {
      const size_t take = std::min(want, runs[run].second - in_run);
      std::memcpy(to, runs[run].first + in_run, take);
      to += take;
      want -= take;
      in_run += take;
      if (in_run == runs[run].second) {
        ++run;
        in_run = 0;
      }
    }
    if (config_.mode == Mode::kGeo) {
      AddDelta(values_.data() + offset + done, block, m);
    } else {
      ApplyGradient(config_.optimizer, values_.data() + offset + done, StateAt(offset + done), range_.size(),
                    block, m);
    }
  }
  return Status::Ok();
}

Status DenseShard::PullBytes(uint64_t begin, uint64_t n, char* out) const {
  if (Status s = CheckRange(begin, n); !s.ok() || n == 0) return s;
  std::shared_lock lock(mutex_);
  std::memcpy(out, values_.data() + (begin - range_.begin), n * sizeof(float));
  return Status::Ok();
}

Status DenseShard::Save(const std::string& dir, int server_index, int server_count) const {
  const fs::path final_path = fs::path(dir) / ShardFileName(config_.table_id, server_index, server_count);
  const fs::path tmp = final_path.string() + ".tmp";
  CheckpointWriter w(tmp);
  if (!w.is_open()) return Internal("cannot create " + tmp.string() + ": " + std::strerror(errno));
  {
    std::shared_lock lock(mutex_);
    WriteHeader(w, config_, server_index, server_count);
    w.Pod<uint64_t>(range_.begin);
    w.Pod<uint64_t>(range_.end);
    w.Floats(values_.data(), values_.size());
    w.Floats(state_.data(), state_.size());
  }
  if (Status s = w.Finish(); !s.ok()) return s;
  return Commit(tmp, final_path);
}

void DenseShard::LoadOverlap(uint64_t saved_begin, const float* values, const float* state, uint64_t count) {
  const uint64_t lo = std::max(saved_begin, range_.begin);
  const uint64_t hi = std::min(saved_begin + count, range_.end);
  if (lo >= hi) return;
  std::unique_lock lock(mutex_);
  const uint64_t n = hi - lo;
  std::memcpy(values_.data() + (lo - range_.begin), values + (lo - saved_begin), n * sizeof(float));
  for (int s = 0; s < slots_; ++s) {
    std::memcpy(state_.data() + static_cast<size_t>(s) * range_.size() + (lo - range_.begin),
                state + static_cast<size_t>(s) * count + (lo - saved_begin), n * sizeof(float));
  }
}

// ---------------------------------------------------------------------------------------- sparse

SparseShard::SparseShard(TableConfig config, int server_index, int server_count)
    : Table(std::move(config)),
      server_index_(server_index),
      server_count_(server_count),
      slots_(OptimizerStateSlots(config_.optimizer.kind)),
      row_floats_(static_cast<size_t>(config_.dim) * static_cast<size_t>(1 + slots_)),
      buckets_(new Bucket[kBuckets]),
      max_rows_(config_.max_rows != 0 ? config_.max_rows : DefaultMaxRows(config_)),
      limit_source_(config_.max_rows != 0 ? LimitSource::kDeclared : LimitSource::kMemory) {}

uint64_t SparseShard::RowBytes(const TableConfig& config) {
  // An unordered_map node (next pointer, key, row number, allocator header) and its bucket slot.
  constexpr uint64_t kIndexBytes = 48;
  return uint64_t{config.dim} * static_cast<uint64_t>(1 + OptimizerStateSlots(config.optimizer.kind)) *
             sizeof(float) + kIndexBytes;
}

namespace {

// Bytes this process may use: the machine's memory, or its cgroup's limit (v2, then v1) where lower.
uint64_t MemoryBytes() {
  uint64_t bytes = static_cast<uint64_t>(::sysconf(_SC_PHYS_PAGES)) * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE));
  for (const char* path : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(path);
    uint64_t limit = 0;
    if (in >> limit && limit > 0) bytes = std::min(bytes, limit);  // "max" (no limit) does not parse
  }
  return bytes;
}

}  // namespace

uint64_t SparseShard::DefaultMaxRows(const TableConfig& config) {
  static const uint64_t memory = MemoryBytes();
  return std::max<uint64_t>(1, memory / 2 / RowBytes(config));
}

uint64_t SparseShard::max_rows() const {
  std::lock_guard lock(grow_mutex_);
  return max_rows_;
}

void SparseShard::SetMaxRows(uint64_t rows, LimitSource source) {
  std::lock_guard lock(grow_mutex_);
  max_rows_ = rows;
  limit_source_ = source;
}

SparseShard::Bucket& SparseShard::BucketOf(uint64_t key) const {
  // Keys of one server share key % count; mix them before picking a bucket.
  return buckets_[SplitMix64(key) % kBuckets];
}

void SparseShard::InitialRow(const TableConfig& config, uint64_t key, float* out) {
  if (config.init_range == 0.0f) {
    std::fill(out, out + config.dim, 0.0f);
    return;
  }
  const uint64_t row_seed = SplitMix64(config.seed ^ SplitMix64(key ^ (uint64_t{config.table_id} << 40)));
  for (uint32_t j = 0; j < config.dim; ++j) {
    const uint64_t bits = SplitMix64(row_seed + j);
    const float unit = static_cast<float>(bits >> 40) / static_cast<float>(uint64_t{1} << 24);  // [0, 1)
    out[j] = (2.0f * unit - 1.0f) * config.init_range;
  }
}

float* SparseShard::Find(Bucket& bucket, uint64_t key) {
  auto it = bucket.index.find(key);
  return it == bucket.index.end() ? nullptr : bucket.rows.data() + it->second * row_floats_;
}

float* SparseShard::Create(Bucket& bucket, uint64_t key) {
  const size_t number = bucket.rows.size() / row_floats_;
  bucket.index.emplace(key, number);
  bucket.rows.resize(bucket.rows.size() + row_floats_);
  float* row = bucket.rows.data() + number * row_floats_;
  InitialRow(config_, key, row);
  InitOptimizerState(config_.optimizer, row + config_.dim, config_.dim, config_.dim);
  return row;
}

Status SparseShard::CreateRows(const uint64_t* keys, const std::vector<size_t>& at, const char* what) {
  std::lock_guard grow(grow_mutex_);
  // Nobody else creates rows now: the keys still absent are exactly the rows this request adds
  // (others may have created some of them since the caller looked).
  std::vector<uint64_t> absent;
  for (size_t i : at) {
    Bucket& bucket = BucketOf(keys[i]);
    std::lock_guard lock(bucket.mutex);
    if (!Find(bucket, keys[i])) absent.push_back(keys[i]);
  }
  std::sort(absent.begin(), absent.end());
  absent.erase(std::unique(absent.begin(), absent.end()), absent.end());
  if (absent.size() > max_rows_ - std::min(rows_, max_rows_)) {
    std::string source;
    switch (limit_source_) {
      case LimitSource::kDeclared:
        source = "the table's declared max_rows";
        break;
      case LimitSource::kServerDefault:
        source = "the servers' default, --sparse_max_rows / FLEET_PS_SPARSE_MAX_ROWS";
        break;
      case LimitSource::kMemory:
        source = "half this server's memory over " + std::to_string(RowBytes(config_)) + " bytes a row";
        break;
    }
    return ResourceExhausted(
        "sparse table " + std::to_string(config_.table_id) + " is full on server " + std::to_string(server_index_) +
        " of " + std::to_string(server_count_) + ": it holds " + std::to_string(rows_) + " rows, its limit is " +
        std::to_string(max_rows_) + " rows per server (" + source + "), and this " + what + " would create " +
        std::to_string(absent.size()) + " more; nothing of this request was applied on this server. Raise max_rows in the table's declaration, or "
        "the servers' default (fleet-ps-server --sparse_max_rows N, FLEET_PS_SPARSE_MAX_ROWS), or add servers");
  }
  for (uint64_t key : absent) {
    Bucket& bucket = BucketOf(key);
    std::lock_guard lock(bucket.mutex);
    Create(bucket, key);
  }
  rows_ += absent.size();
  return Status::Ok();
}

Status SparseShard::CheckKeys(const uint64_t* keys, size_t n) const {
  for (size_t i = 0; i < n; ++i) {
    if (SparseShardOf(keys[i], server_count_) != server_index_) {
      return InvalidArgument("key " + std::to_string(keys[i]) + " of table " + std::to_string(config_.table_id) +
                             " belongs to server " + std::to_string(SparseShardOf(keys[i], server_count_)) +
                             ", not to server " + std::to_string(server_index_));
    }
  }
  return Status::Ok();
}

Status SparseShard::Pull(const uint64_t* keys, size_t n, float* out) {
  return PullBytes(keys, n, reinterpret_cast<char*>(out));
}

Status SparseShard::PullBytes(const uint64_t* keys, size_t n, char* out) {
  if (Status s = CheckKeys(keys, n); !s.ok()) return s;
  const size_t row_bytes = config_.dim * sizeof(float);
  auto copy = [&](size_t i) {
    Bucket& bucket = BucketOf(keys[i]);
    std::lock_guard lock(bucket.mutex);
    const float* row = Find(bucket, keys[i]);
    if (row) std::memcpy(out + i * row_bytes, row, row_bytes);
    return row != nullptr;
  };
  std::vector<size_t> missing;
  for (size_t i = 0; i < n; ++i) {
    if (!copy(i)) missing.push_back(i);
  }
  if (missing.empty()) return Status::Ok();
  // Rows exist once created (no eviction), so the second copy finds every one.
  if (Status s = CreateRows(keys, missing, "pull"); !s.ok()) return s;
  for (size_t i : missing) copy(i);
  return Status::Ok();
}

Status SparseShard::Update(const uint64_t* keys, const float* values, size_t n) {
  if (Status s = CheckKeys(keys, n); !s.ok()) return s;
  // Missing rows first, so that a push refused at the limit changes no row at all.
  std::vector<size_t> missing;
  for (size_t i = 0; i < n; ++i) {
    Bucket& bucket = BucketOf(keys[i]);
    std::lock_guard lock(bucket.mutex);
    if (!Find(bucket, keys[i])) missing.push_back(i);
  }
  if (!missing.empty()) {
    if (Status s = CreateRows(keys, missing, "push"); !s.ok()) return s;
  }
  const size_t dim = config_.dim;
  const bool geo = config_.mode == Mode::kGeo;
  for (size_t i = 0; i < n; ++i) {
    Bucket& bucket = BucketOf(keys[i]);
    std::lock_guard lock(bucket.mutex);
    float* row = Find(bucket, keys[i]);
    if (geo) {
      AddDelta(row, values + i * dim, dim);
    } else {
      ApplyGradient(config_.optimizer, row, row + dim, dim, values + i * dim, dim);
    }
  }
  return Status::Ok();
}

size_t SparseShard::RowCount() const {
  std::lock_guard lock(grow_mutex_);
  return rows_;
}

size_t SparseShard::CountStoredRows() const {
  size_t rows = 0;
  for (int b = 0; b < kBuckets; ++b) {
    std::lock_guard lock(buckets_[b].mutex);
    rows += buckets_[b].index.size();
  }
  return rows;
}

void SparseShard::LoadRow(uint64_t key, const float* row) {
  std::lock_guard grow(grow_mutex_);
  Bucket& bucket = BucketOf(key);
  std::lock_guard lock(bucket.mutex);
  float* to = Find(bucket, key);
  if (!to) {
    to = Create(bucket, key);
    ++rows_;
  }
  std::memcpy(to, row, row_floats_ * sizeof(float));
}

Status SparseShard::Save(const std::string& dir, int server_index, int server_count) const {
  const fs::path final_path = fs::path(dir) / ShardFileName(config_.table_id, server_index, server_count);
  const fs::path tmp = final_path.string() + ".tmp";
  CheckpointWriter w(tmp);
  if (!w.is_open()) return Internal("cannot create " + tmp.string() + ": " + std::strerror(errno));
  // Rows are written bucket by bucket, each under its lock; the count goes first, so lock them all
  // (saving is rare and the job's trainers are expected to be between steps).
  std::vector<std::unique_lock<std::mutex>> locks;
  uint64_t rows = 0;
  for (int b = 0; b < kBuckets; ++b) {
    locks.emplace_back(buckets_[b].mutex);
    rows += buckets_[b].index.size();
  }
  WriteHeader(w, config_, server_index, server_count);
  w.Pod<uint64_t>(rows);
  for (int b = 0; b < kBuckets; ++b) {
    // Sorted by key: the same table always gives the same file.
    std::vector<std::pair<uint64_t, size_t>> order(buckets_[b].index.begin(), buckets_[b].index.end());
    std::sort(order.begin(), order.end());
    for (const auto& [key, row] : order) {
      w.Pod<uint64_t>(key);
      w.Floats(buckets_[b].rows.data() + row * row_floats_, row_floats_);
    }
  }
  locks.clear();
  if (Status s = w.Finish(); !s.ok()) return s;
  return Commit(tmp, final_path);
}

std::unique_ptr<Table> MakeShard(const TableConfig& config, int index, int count) {
  if (config.kind == TableKind::kDense) {
    return std::make_unique<DenseShard>(config, DenseShardRange(config.size, count, index));
  }
  return std::make_unique<SparseShard>(config, index, count);
}

// ------------------------------------------------------------------------------------ loading

Status LoadShards(const std::string& dir, int index, int count, std::vector<std::unique_ptr<Table>>* tables) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return NotFound("model directory " + dir + " does not exist");
  static const std::regex kName(R"(table_(\d+)\.shard_(\d+)_of_(\d+))");
  std::map<uint32_t, std::vector<ShardFile>> by_table;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (!std::regex_match(name, m, kName)) continue;
    ShardFile file;
    file.path = entry.path();
    CheckpointReader r(file.path);
    if (!r.is_open()) return Internal("cannot open " + file.path.string());
    if (Status s = ReadHeader(r, &file); !s.ok()) return s;
    if (std::to_string(file.config.table_id) != m[1].str() || std::to_string(file.index) != m[2].str() ||
        std::to_string(file.count) != m[3].str()) {
      return r.Corrupt("does not hold what its name says");
    }
    by_table[file.config.table_id].push_back(file);
  }
  if (ec) return Internal("cannot list " + dir + ": " + ec.message());

  for (auto& [id, files] : by_table) {
    const ShardFile& first = files.front();
    std::vector<bool> seen(static_cast<size_t>(first.count), false);
    for (const ShardFile& f : files) {
      if (f.count != first.count || !SameTableConfig(f.config, first.config)) {
        return DataLoss("checkpoint files " + first.path.string() + " and " + f.path.string() +
                        " disagree on table " + std::to_string(id));
      }
      seen[static_cast<size_t>(f.index)] = true;
    }
    for (size_t i = 0; i < seen.size(); ++i) {
      if (!seen[i]) {
        return DataLoss("model directory " + dir + " lacks " + ShardFileName(id, static_cast<int>(i), first.count));
      }
    }
    std::unique_ptr<Table> table = MakeShard(first.config, index, count);
    const int slots = OptimizerStateSlots(first.config.optimizer.kind);
    for (const ShardFile& f : files) {
      CheckpointReader r(f.path);
      ShardFile header;
      if (Status s = ReadHeader(r, &header); !s.ok()) return s;
      if (DenseShard* dense = table->AsDense()) {
        uint64_t begin = 0, end = 0;
        if (!r.Pod(&begin) || !r.Pod(&end) || begin > end || end > f.config.size) return r.Corrupt("has a bad range");
        const uint64_t n = end - begin;
        if (n * sizeof(float) * static_cast<uint64_t>(1 + slots) != r.remaining()) return r.Corrupt("is truncated");
        std::vector<float> values(n), state(n * static_cast<uint64_t>(slots));
        if (!r.Floats(values.data(), values.size()) || !r.Floats(state.data(), state.size())) {
          return r.Corrupt("is truncated");
        }
        if (Status s = r.Finish(); !s.ok()) return s;
        dense->LoadOverlap(begin, values.data(), state.data(), n);
      } else {
        SparseShard* sparse = table->AsSparse();
        uint64_t rows = 0;
        const size_t row_floats = static_cast<size_t>(f.config.dim) * static_cast<size_t>(1 + slots);
        if (!r.Pod(&rows) || rows > r.remaining() / (8 + row_floats * sizeof(float))) return r.Corrupt("is truncated");
        // First into a staging list, so that a file that fails its checksum adds nothing.
        std::vector<uint64_t> keys;
        std::vector<float> data;
        std::vector<float> row(row_floats);
        for (uint64_t i = 0; i < rows; ++i) {
          uint64_t key = 0;
          if (!r.Pod(&key) || !r.Floats(row.data(), row_floats)) return r.Corrupt("is truncated");
          if (SparseShardOf(key, count) != index) continue;
          keys.push_back(key);
          data.insert(data.end(), row.begin(), row.end());
        }
        if (Status s = r.Finish(); !s.ok()) return s;
        for (size_t i = 0; i < keys.size(); ++i) sparse->LoadRow(keys[i], data.data() + i * row_floats);
      }
    }
    table->set_loaded(true);
    tables->push_back(std::move(table));
  }
  return Status::Ok();
}

}  // namespace fleet::ps
