// Paddle's elastic contract: what a node's launcher reads to rendezvous with the other nodes in etcd,
// and what it exits with. One definition for both sides of it: fleetrun reads these
// (launcher/elastic.h), the operator writes them into pods and reads the exit codes back
// (operator/wiring.h, planner). Paddle's own elastic launcher (python/paddle/distributed/fleet/
// elastic/manager.py, Paddle 2.2 .. 3.0) and Paddle 2.3+'s launcher with an etcd master
// (launch/controllers/master.py) read the same names. docs/env-contract.md has the whole contract.
#pragma once

#include <string>
#include <string_view>

#include "fleet/base/result.h"

namespace fleet {

// The legacy elastic launcher's env (manager.py ElasticManager): etcd's host:port, the job's id in
// etcd, and its node count ("N" or "MIN:MAX", NpRange below). Server, job id and np together make a
// launch elastic, given by flag or env.
inline constexpr const char* kElasticServerEnv = "PADDLE_ELASTIC_SERVER";
inline constexpr const char* kElasticJobIdEnv = "PADDLE_ELASTIC_JOB_ID";
inline constexpr const char* kElasticNpEnv = "PADDLE_ELASTIC_NP";
// Without PADDLE_ELASTIC_SERVER, Paddle finds etcd through a Kubernetes service named
// paddle-elastic-etcd: the env the kubelet gives every pod for it.
inline constexpr const char* kElasticEtcdServiceHostEnv = "PADDLE_ELASTIC_ETCD_SERVICE_HOST";
inline constexpr const char* kElasticEtcdServicePortEnv = "PADDLE_ELASTIC_ETCD_SERVICE_PORT";
// Seconds below np.min before the job ends; the 2.3+ launcher reads it too (--elastic_timeout,
// context/args_envs.py). manager.py's ELASTIC_TIMEOUT is its default.
inline constexpr const char* kElasticTimeoutEnv = "PADDLE_ELASTIC_TIMEOUT";
inline constexpr double kElasticDefaultTimeoutSeconds = 120;
// Seconds a node's registration lives without a keepalive (manager.py's ELASTIC_TTL is the default).
inline constexpr const char* kElasticTtlEnv = "PADDLE_ELASTIC_TTL";
inline constexpr int kElasticDefaultTtlSeconds = 60;
// The elastic launcher's first trainer port without FLAGS_START_PORT (manager.py).
inline constexpr int kElasticDefaultStartPort = 6170;

// Paddle 2.3+'s launcher runs elastic when its master (--master, PADDLE_MASTER) is etcd://host:port
// (launch/controllers/master.py ETCD_PROTOCAL).
inline constexpr std::string_view kEtcdMasterScheme = "etcd://";

// Exit codes. manager.py's ELASTIC_EXIT_CODE: a fault-tolerant node whose trainer failed exits 101
// ("restart this node"). manager.py's ELASTIC_AUTO_PARALLEL_EXIT_CODE: a trainer exiting 102 asks
// its launcher to relaunch the local trainers after a new rendezvous.
inline constexpr int kElasticExitCode = 101;
inline constexpr int kElasticRelaunchCode = 102;
// Below np.min for longer than PADDLE_ELASTIC_TIMEOUT: not Paddle's code but fleetrun's (timeout(1)'s
// status), which tells the operator that no retry will help.
inline constexpr int kElasticTimeoutStatus = 124;

// The job's node count: --np / PADDLE_ELASTIC_NP, and the 2.3+ launcher's --nnodes / PADDLE_NNODES.
// "N": exactly N nodes (fault tolerance); "MIN:MAX": elastic between MIN and MAX.
struct NpRange {
  int min = 0;
  int max = 0;
  bool fixed() const { return min == max; }
  bool operator==(const NpRange& other) const { return min == other.min && max == other.max; }
};

// Strict: whole numbers, 1 <= MIN <= MAX, nothing else (surrounding whitespace aside). The error says
// why, without naming the flag or variable (the caller does).
Result<NpRange> ParseNpRange(std::string_view text);
// "MIN:MAX", also for a fixed range: PADDLE_ELASTIC_NP as the operator writes it.
std::string FormatNpRange(const NpRange& np);
// "N" for a fixed range, else "MIN:MAX": as a user writes it, and as --nnodes takes it.
std::string FormatNpShort(const NpRange& np);

// The job id names the job's keys in etcd (/paddle/<job_id>/...): non-empty, and no '/', which
// would put it inside another job's keys. The error names the value, not the flag or variable.
Status CheckElasticJobId(std::string_view job_id);

}  // namespace fleet
