// The parameter-server half of Paddle's Fleet API, set up from the process env alone — what the
// Python binding (fleet_runtime.ps) and the fleet-ps-server binary call:
//
//   Fleet::Init(env, strategy)       roles as PaddleCloudRoleMaker reads them (env_contract.h):
//                                    TRAINING_ROLE, PADDLE_PSERVERS_IP_PORT_LIST, PADDLE_TRAINERS_NUM,
//                                    PADDLE_TRAINER_ID, POD_IP, PADDLE_PORT
//   AddDenseTable / AddSparseTable   the model's tables, declared the same way in every role
//   InitServer(model_dir), RunServer the server listens on POD_IP:PADDLE_PORT until every trainer
//                                    called StopWorker
//   InitWorker                       waits for the servers, creates the tables, trainer 0 writes the
//                                    dense tables' initial values (unless the servers loaded a
//                                    checkpoint), then all trainers pass a barrier
//   worker()                         pull / push
//   StopWorker                       geo deltas flushed, servers told
//
// Without PADDLE_PSERVERS_IP_PORT_LIST (Paddle's non-distributed fallback) the process is the only
// trainer and InitWorker starts a server inside it on 127.0.0.1.
//
// Knobs (env, seconds): FLEET_PS_CONNECT_TIMEOUT (600) how long a trainer waits for the servers;
// FLEET_PS_RPC_TIMEOUT (120) deadline of a pull or async push; FLEET_PS_SYNC_TIMEOUT (600) how long
// a sync step or barrier waits for the slowest trainer; FLEET_PS_RETRY_INTERVAL (3) between
// readiness checks. FLEET_PS_BIND_HOST: the address the server binds instead of POD_IP (e.g.
// 0.0.0.0 where POD_IP is not an address of the host). FLEET_PS_SPARSE_MAX_ROWS (rows): the
// servers' row limit per shard for sparse tables declared without max_rows (default: from memory).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "fleet/ps/client.h"
#include "fleet/ps/config.h"
#include "fleet/ps/server.h"
#include "fleet/ps/status.h"
#include "fleet/runtime/env_contract.h"

namespace fleet::ps {

// DistributedStrategy: a_sync False -> sync; True -> async; True with k_steps > 0 -> geo. Paddle's
// default is a_sync = True.
struct Strategy {
  bool a_sync = true;
  uint32_t k_steps = 0;
  Mode mode() const { return !a_sync ? Mode::kSync : k_steps > 0 ? Mode::kGeo : Mode::kAsync; }
};

class Fleet {
 public:
  static Status Init(const EnvMap& env, const Strategy& strategy, std::unique_ptr<Fleet>* out);
  ~Fleet();
  Fleet(const Fleet&) = delete;
  Fleet& operator=(const Fleet&) = delete;

  bool is_server() const { return server_role_; }
  bool is_worker() const { return !server_role_; }
  int worker_index() const { return trainer_id_; }
  int worker_num() const { return trainers_; }
  int server_index() const { return server_index_; }
  int server_num() const { return static_cast<int>(servers_.size()); }
  const std::vector<std::string>& server_endpoints() const { return servers_; }
  Mode mode() const { return strategy_.mode(); }
  const Strategy& strategy() const { return strategy_; }

  // Declarations, before InitServer / InitWorker. The strategy supplies mode and k_steps.
  Status AddDenseTable(uint32_t id, std::vector<float> initial, const OptimizerConfig& optimizer);
  // max_rows: the most rows one server holds of the table (0: the servers' default).
  Status AddSparseTable(uint32_t id, uint32_t dim, const OptimizerConfig& optimizer, float init_range,
                        uint64_t seed, uint64_t max_rows = 0);
  const std::vector<TableConfig>& tables() const { return tables_; }

  Status InitServer(const std::string& model_dir);
  // Serves until every trainer stopped. `interrupted`, when given, is polled about every 200 ms;
  // when it returns true the server shuts down and RunServer returns CANCELLED.
  Status RunServer(const std::function<bool()>& interrupted = nullptr);
  PsServer* server() { return server_.get(); }

  Status InitWorker();
  Worker* worker() { return worker_.get(); }
  Status Barrier();
  Status StopWorker();

 private:
  Fleet() = default;
  Status NeedWorker() const;

  EnvMap env_;
  Strategy strategy_;
  bool server_role_ = false;
  bool local_ = false;  // non-distributed: one trainer with an in-process server
  int trainer_id_ = 0;
  int trainers_ = 1;
  int server_index_ = -1;
  std::vector<std::string> servers_;
  std::string bind_address_;
  std::vector<TableConfig> tables_;
  std::vector<std::vector<float>> initial_;  // per dense table in tables_ order (empty for sparse)
  std::unique_ptr<PsServer> server_;
  std::unique_ptr<Worker> worker_;
};

}  // namespace fleet::ps
