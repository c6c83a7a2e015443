#include "fleet/ps/fleet.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>

#include "fleet/base/strings.h"

namespace fleet::ps {
namespace {

using Clock = std::chrono::steady_clock;

void Log(const std::string& line) { std::cerr << line << std::endl; }

// A knob in seconds from the env; `fallback` when unset.
Status Seconds(const EnvMap& env, const std::string& name, double fallback, std::chrono::milliseconds* out) {
  double value = fallback;
  auto it = env.find(name);
  if (it != env.end() && !it->second.empty()) {
    const std::optional<double> seconds = ParsePositiveSeconds(it->second);
    if (!seconds) return InvalidArgument(name + " must be a positive number of seconds, got '" + it->second + "'");
    value = *seconds;
  }
  *out = std::chrono::milliseconds(static_cast<int64_t>(value * 1000.0));
  return Status::Ok();
}

// A row count from the env; 0 when unset.
Status Rows(const EnvMap& env, const std::string& name, uint64_t* out) {
  *out = 0;
  auto it = env.find(name);
  if (it == env.end() || it->second.empty()) return Status::Ok();
  // Plain decimal digits only: strtoull alone would take " -1" (space, sign) as 2^64-1.
  const bool digits = std::all_of(it->second.begin(), it->second.end(), [](char c) { return c >= '0' && c <= '9'; });
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = digits ? std::strtoull(it->second.c_str(), &end, 10) : 0;
  if (!digits || *end != '\0' || errno != 0 || value == 0) {
    return InvalidArgument(name + " must be a positive number of rows, got '" + it->second + "'");
  }
  *out = value;
  return Status::Ok();
}

std::string Get(const EnvMap& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? std::string() : it->second;
}

}  // namespace

Fleet::~Fleet() {
  if (server_) server_->Shutdown();
}

Status Fleet::Init(const EnvMap& env, const Strategy& strategy, std::unique_ptr<Fleet>* out) {
  auto role = ParseProcessEnv(env, RoleMakerKind::kParameterServer);
  if (!role.ok()) return InvalidArgument(role.error());
  std::unique_ptr<Fleet> f(new Fleet());
  f->env_ = env;
  f->strategy_ = strategy;
  if (role->non_distributed) {
    f->local_ = true;
  } else {
    if (role->role == Role::kHeterTrainer) {
      return InvalidArgument("TRAINING_ROLE=HETER_TRAINER: heter trainers are not supported by the FleetJob parameter server");
    }
    f->server_role_ = role->role == Role::kServer;
    f->trainers_ = role->trainers_num;
    f->servers_ = role->server_endpoints;
    if (f->server_role_) {
      f->server_index_ = role->id;
      const std::string bind_host = Get(env, "FLEET_PS_BIND_HOST");
      if (bind_host.empty()) {
        f->bind_address_ = role->current_endpoint;  // POD_IP:PADDLE_PORT
      } else {
        f->bind_address_ = bind_host + ":" + Get(env, "PADDLE_PORT");
      }
    } else {
      f->trainer_id_ = role->id;
    }
  }
  *out = std::move(f);
  return Status::Ok();
}

Status Fleet::AddDenseTable(uint32_t id, std::vector<float> initial, const OptimizerConfig& optimizer) {
  TableConfig config = TableConfig::Dense(id, initial.size(), optimizer, strategy_.mode());
  if (config.mode == Mode::kGeo) config.k_steps = strategy_.k_steps;
  if (Status s = ValidateTableConfig(config); !s.ok()) return s;
  for (const TableConfig& t : tables_) {
    if (t.table_id == id) return InvalidArgument("table " + std::to_string(id) + " is declared twice");
  }
  tables_.push_back(config);
  initial_.push_back(std::move(initial));
  return Status::Ok();
}

Status Fleet::AddSparseTable(uint32_t id, uint32_t dim, const OptimizerConfig& optimizer, float init_range,
                             uint64_t seed, uint64_t max_rows) {
  TableConfig config = TableConfig::Sparse(id, dim, optimizer, strategy_.mode(), init_range, seed, max_rows);
  if (config.mode == Mode::kGeo) config.k_steps = strategy_.k_steps;
  if (Status s = ValidateTableConfig(config); !s.ok()) return s;
  for (const TableConfig& t : tables_) {
    if (t.table_id == id) return InvalidArgument("table " + std::to_string(id) + " is declared twice");
  }
  tables_.push_back(config);
  initial_.emplace_back();
  return Status::Ok();
}

Status Fleet::InitServer(const std::string& model_dir) {
  if (!server_role_) return FailedPrecondition("init_server: this process is not a server (TRAINING_ROLE)");
  if (server_) return FailedPrecondition("init_server was already called");
  ServerOptions options;
  options.bind_address = bind_address_;
  options.server_index = server_index_;
  options.server_count = server_num();
  options.trainers = trainers_;
  options.model_dir = model_dir;
  options.save_root = Get(env_, "FLEET_PS_SAVE_ROOT");
  options.tables = tables_;
  if (Status s = Seconds(env_, "FLEET_PS_SYNC_TIMEOUT", 600, &options.sync_timeout); !s.ok()) return s;
  if (Status s = Rows(env_, "FLEET_PS_SPARSE_MAX_ROWS", &options.sparse_max_rows); !s.ok()) return s;
  if (Status s = PsServer::Start(options, &server_); !s.ok()) return s;
  Log("pserver_index: " + std::to_string(server_index_) + ", listening on " + bind_address_ + ", trainers: " +
      std::to_string(trainers_) + ", tables: " + std::to_string(tables_.size()) +
      (model_dir.empty() ? "" : ", loaded from " + model_dir));
  return Status::Ok();
}

Status Fleet::RunServer(const std::function<bool()>& interrupted) {
  if (!server_) return FailedPrecondition("run_server: call init_server first");
  for (;;) {
    if (server_->Wait(Clock::now() + std::chrono::milliseconds(200))) break;
    if (interrupted && interrupted()) {
      server_->Shutdown();
      return Status(Code::kCancelled, "run_server interrupted");
    }
  }
  Log("pserver_index: " + std::to_string(server_index_) + ", all " + std::to_string(trainers_) +
      " trainers stopped, exit");
  return Status::Ok();
}

Status Fleet::NeedWorker() const {
  if (server_role_) return FailedPrecondition("this process is a server (TRAINING_ROLE=PSERVER), not a worker");
  if (!worker_) return FailedPrecondition("call init_worker first");
  return Status::Ok();
}

Status Fleet::InitWorker() {
  if (server_role_) return FailedPrecondition("init_worker: this process is a server (TRAINING_ROLE=PSERVER)");
  if (worker_) return FailedPrecondition("init_worker was already called");
  ClientOptions options;
  if (local_) {
    ServerOptions so;
    so.bind_address = "127.0.0.1:0";
    so.save_root = Get(env_, "FLEET_PS_SAVE_ROOT");
    so.tables = tables_;
    if (Status s = Rows(env_, "FLEET_PS_SPARSE_MAX_ROWS", &so.sparse_max_rows); !s.ok()) return s;
    if (Status s = PsServer::Start(so, &server_); !s.ok()) return s;
    servers_ = {"127.0.0.1:" + std::to_string(server_->port())};
  }
  options.servers = servers_;
  options.trainer_id = trainer_id_;
  options.trainers = trainers_;
  options.log = Log;
  if (Status s = Seconds(env_, "FLEET_PS_CONNECT_TIMEOUT", 600, &options.connect_timeout); !s.ok()) return s;
  if (Status s = Seconds(env_, "FLEET_PS_RPC_TIMEOUT", 120, &options.rpc_timeout); !s.ok()) return s;
  if (Status s = Seconds(env_, "FLEET_PS_SYNC_TIMEOUT", 600, &options.sync_timeout); !s.ok()) return s;
  if (Status s = Seconds(env_, "FLEET_PS_RETRY_INTERVAL", 3, &options.retry_interval); !s.ok()) return s;
  std::unique_ptr<PsClient> client;
  if (Status s = PsClient::Connect(options, &client); !s.ok()) return s;
  auto worker = std::make_unique<Worker>(std::move(client));
  for (size_t i = 0; i < tables_.size(); ++i) {
    if (Status s = worker->CreateTable(tables_[i]); !s.ok()) return s;
  }
  if (trainer_id_ == 0) {
    for (size_t i = 0; i < tables_.size(); ++i) {
      if (tables_[i].kind != TableKind::kDense || initial_[i].empty()) continue;
      if (Status s = worker->InitDense(tables_[i].table_id, initial_[i].data(), initial_[i].size()); !s.ok()) return s;
    }
  }
  // Nobody pulls before trainer 0 has written the initial values.
  if (Status s = worker->Barrier(); !s.ok()) return s;
  worker_ = std::move(worker);
  return Status::Ok();
}

Status Fleet::Barrier() {
  if (Status s = NeedWorker(); !s.ok()) return s;
  return worker_->Barrier();
}

Status Fleet::StopWorker() {
  if (Status s = NeedWorker(); !s.ok()) return s;
  if (Status s = worker_->StopWorker(); !s.ok()) return s;
  if (local_ && server_) server_->Wait();
  return Status::Ok();
}

}  // namespace fleet::ps
