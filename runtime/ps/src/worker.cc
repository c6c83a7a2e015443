#include <algorithm>
#include <cstring>

#include "fleet/ps/client.h"

namespace fleet::ps {

Worker::Worker(std::unique_ptr<PsClient> client) : client_(std::move(client)) {}
Worker::~Worker() = default;

const TableConfig* Worker::GeoTable(uint32_t table) const {
  const TableConfig* config = client_->FindTable(table);
  return config && config->mode == Mode::kGeo ? config : nullptr;
}

Status Worker::CreateTable(const TableConfig& config) { return client_->CreateTable(config); }

Status Worker::InitDense(uint32_t table, const float* values, size_t n) {
  return client_->InitDense(table, values, n);
}

Status Worker::PullDense(uint32_t table, float* out, size_t n) {
  const TableConfig* geo = GeoTable(table);
  if (!geo) return client_->PullDense(table, out, n);
  std::lock_guard lock(mutex_);
  auto [it, fresh] = geo_dense_.try_emplace(table);
  GeoDense& g = it->second;
  if (fresh) {
    std::vector<float> values(geo->size);
    if (Status s = client_->PullDense(table, values.data(), values.size()); !s.ok()) {
      geo_dense_.erase(it);
      return s;
    }
    g.local = values;
    g.base = std::move(values);
  }
  if (n != g.local.size()) {
    return InvalidArgument("table " + std::to_string(table) + " has " + std::to_string(g.local.size()) +
                           " values, got " + std::to_string(n));
  }
  std::memcpy(out, g.local.data(), n * sizeof(float));
  return Status::Ok();
}

Status Worker::PushDense(uint32_t table, const float* gradient, size_t n) {
  const TableConfig* geo = GeoTable(table);
  if (!geo) return client_->PushDense(table, gradient, n);
  std::lock_guard lock(mutex_);
  auto it = geo_dense_.find(table);
  if (it == geo_dense_.end()) {
    return FailedPrecondition("geo mode: pull table " + std::to_string(table) + " before pushing to it");
  }
  GeoDense& g = it->second;
  if (n != g.local.size()) {
    return InvalidArgument("table " + std::to_string(table) + " has " + std::to_string(g.local.size()) +
                           " values, got " + std::to_string(n));
  }
  const float lr = geo->optimizer.learning_rate;
  for (size_t i = 0; i < n; ++i) g.local[i] -= lr * gradient[i];
  if (++g.steps < geo->k_steps) return Status::Ok();
  return GeoSendDense(table, g);
}

Status Worker::PushPullDense(uint32_t table, const float* gradient, float* out, size_t n) {
  if (!GeoTable(table)) return client_->PushPullDense(table, gradient, out, n);
  if (Status s = PushDense(table, gradient, n); !s.ok()) return s;
  return PullDense(table, out, n);
}

// Sends (local - base) / trainers, then takes the servers' merged values as the new local and base,
// range by range: a range a server applied and answered is exchanged; one it did not (a server
// down, a failure part way) keeps its local and base, so the next exchange (k steps on, or Flush)
// sends its delta again, and only its: nothing is lost, and nothing is applied twice.
Status Worker::GeoSendDense(uint32_t table, GeoDense& g) {
  g.steps = 0;
  const float scale = 1.0f / static_cast<float>(client_->trainers());
  g.delta.resize(g.base.size());
  for (size_t i = 0; i < g.base.size(); ++i) g.delta[i] = (g.local[i] - g.base[i]) * scale;
  std::vector<ShardRange> answered;
  const Status s = client_->PushPullDense(table, g.delta.data(), g.delta.data(), g.delta.size(), &answered);
  for (const ShardRange& r : answered) {
    std::copy(g.delta.begin() + static_cast<std::ptrdiff_t>(r.begin), g.delta.begin() + static_cast<std::ptrdiff_t>(r.end),
              g.base.begin() + static_cast<std::ptrdiff_t>(r.begin));
    std::copy(g.delta.begin() + static_cast<std::ptrdiff_t>(r.begin), g.delta.begin() + static_cast<std::ptrdiff_t>(r.end),
              g.local.begin() + static_cast<std::ptrdiff_t>(r.begin));
  }
  g.unsent = !s.ok();
  return s;
}

Status Worker::GeoFetchRows(uint32_t table, const TableConfig& config, GeoSparse& g, const uint64_t* keys,
                            size_t n) {
  std::vector<uint64_t> missing;
  for (size_t i = 0; i < n; ++i) {
    if (!g.local.count(keys[i])) missing.push_back(keys[i]);
  }
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
  if (missing.empty()) return Status::Ok();
  std::vector<float> rows(missing.size() * config.dim);
  if (Status s = client_->PullSparse(table, missing.data(), missing.size(), rows.data()); !s.ok()) return s;
  for (size_t i = 0; i < missing.size(); ++i) {
    std::vector<float> row(rows.begin() + static_cast<std::ptrdiff_t>(i * config.dim),
                           rows.begin() + static_cast<std::ptrdiff_t>((i + 1) * config.dim));
    g.base[missing[i]] = row;
    g.local[missing[i]] = std::move(row);
  }
  return Status::Ok();
}

Status Worker::PullSparse(uint32_t table, const uint64_t* keys, size_t n, float* out) {
  const TableConfig* geo = GeoTable(table);
  if (!geo) return client_->PullSparse(table, keys, n, out);
  std::lock_guard lock(mutex_);
  GeoSparse& g = geo_sparse_[table];
  if (Status s = GeoFetchRows(table, *geo, g, keys, n); !s.ok()) return s;
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(out + i * geo->dim, g.local[keys[i]].data(), geo->dim * sizeof(float));
  }
  return Status::Ok();
}

Status Worker::PushSparse(uint32_t table, const uint64_t* keys, size_t n, const float* gradient) {
  const TableConfig* geo = GeoTable(table);
  if (!geo) return client_->PushSparse(table, keys, n, gradient);
  std::lock_guard lock(mutex_);
  GeoSparse& g = geo_sparse_[table];
  if (Status s = GeoFetchRows(table, *geo, g, keys, n); !s.ok()) return s;
  const float lr = geo->optimizer.learning_rate;
  for (size_t i = 0; i < n; ++i) {
    std::vector<float>& row = g.local[keys[i]];
    for (uint32_t j = 0; j < geo->dim; ++j) row[j] -= lr * gradient[i * geo->dim + j];
    g.touched.insert(keys[i]);
  }
  if (++g.steps < geo->k_steps) return Status::Ok();
  return GeoSendSparse(table, *geo, g);
}

// Sends the deltas of the rows this trainer changed, then forgets the cached rows the servers
// applied: the next pulls fetch the merged values. Rows a server did not apply (down, a failure
// part way) stay cached and touched, so the next exchange (or Flush) sends them again, and only them.
Status Worker::GeoSendSparse(uint32_t table, const TableConfig& config, GeoSparse& g) {
  const float scale = 1.0f / static_cast<float>(client_->trainers());
  std::vector<uint64_t> keys(g.touched.begin(), g.touched.end());
  std::vector<float> delta(keys.size() * config.dim);
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::vector<float>& local = g.local[keys[i]];
    const std::vector<float>& base = g.base[keys[i]];
    for (uint32_t j = 0; j < config.dim; ++j) delta[i * config.dim + j] = (local[j] - base[j]) * scale;
  }
  g.steps = 0;
  std::vector<uint64_t> applied;
  const Status s = keys.empty() ? Status::Ok() : client_->PushSparse(table, keys.data(), keys.size(), delta.data(), &applied);
  if (s.ok()) {
    g.local.clear();
    g.base.clear();
    g.touched.clear();
    return s;
  }
  for (uint64_t key : applied) {
    g.local.erase(key);
    g.base.erase(key);
    g.touched.erase(key);
  }
  return s;
}

Status Worker::Flush() {
  std::lock_guard lock(mutex_);
  return FlushLocked();
}

Status Worker::FlushLocked() {
  for (auto& [table, g] : geo_dense_) {
    const TableConfig* geo = GeoTable(table);
    if (geo && (g.steps > 0 || g.unsent)) {
      if (Status s = GeoSendDense(table, g); !s.ok()) return s;
    }
  }
  for (auto& [table, g] : geo_sparse_) {
    const TableConfig* geo = GeoTable(table);
    if (geo && !g.touched.empty()) {
      if (Status s = GeoSendSparse(table, *geo, g); !s.ok()) return s;
    }
  }
  // The next pulls fetch what the servers hold now (with the other trainers' deltas).
  geo_dense_.clear();
  geo_sparse_.clear();
  return Status::Ok();
}

Status Worker::Barrier() { return client_->Barrier(); }

Status Worker::Save(const std::string& dir) {
  if (Status s = Flush(); !s.ok()) return s;
  return client_->Save(dir);
}

// Under the lock from the flush to the servers' answer: a push from another thread cannot leave a
// delta pending after the servers were told this trainer is done.
Status Worker::StopWorker() {
  std::lock_guard lock(mutex_);
  if (stopped_) return Status::Ok();
  if (Status s = FlushLocked(); !s.ok()) return s;
  if (Status s = client_->StopWorker(); !s.ok()) return s;
  stopped_ = true;
  return Status::Ok();
}

}  // namespace fleet::ps
