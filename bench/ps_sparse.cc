// Parameter server, sparse pull throughput (issue 6, section 4): keys per second per server thread.
//   table: one SparseShard in this process, pulled by 1 and by 2 threads (no RPC): keys per CPU
//          second of the pulling threads, the table's own cost per key;
//   rpc:   one fleet-ps-server process, T trainer threads each pulling batches of B random keys
//          (rows already created) through PsClient; keys/s overall and keys per CPU second of the
//          server process (/proc/<pid>/stat), i.e. what one fully busy server thread serves.
// usage: ps_sparse [--trainers 4] [--batch 1000] [--rows 1000000] [--seconds 2] [dims... = 8 64]
#include <time.h>

#include <atomic>
#include <mutex>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>

#include "fleet/ps/client.h"
#include "fleet/ps/table.h"
#include "ps_bench_util.h"

#ifndef FLEET_PS_SERVER_PATH
#define FLEET_PS_SERVER_PATH "fleet-ps-server"
#endif

namespace {

using namespace fleet::ps;
using namespace fleet::ps::bench;

std::vector<uint64_t> RandomKeys(std::mt19937_64& rng, size_t n, uint64_t rows) {
  std::vector<uint64_t> keys(n);
  for (auto& k : keys) k = rng() % rows;
  return keys;
}

double ThreadCpuSeconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) / 1e9;
}

// Keys per CPU second of `threads` threads pulling batches from one shard for `seconds` (CPU time,
// not wall time: other load on the machine does not count).
double TableKeysPerCpuSecond(SparseShard& shard, int threads, size_t batch, uint64_t rows, double seconds) {
  std::atomic<bool> stop{false};
  std::atomic<long> keys{0};
  std::mutex cpu_mutex;
  double cpu = 0;
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t) + 1);
      std::vector<std::vector<uint64_t>> batches;
      for (int b = 0; b < 64; ++b) batches.push_back(RandomKeys(rng, batch, rows));
      std::vector<float> out(batch * shard.config().dim);
      long mine = 0;
      const double cpu_start = ThreadCpuSeconds();
      for (size_t b = 0; !stop; ++b) {
        const auto& k = batches[b % batches.size()];
        if (!shard.Pull(k.data(), k.size(), out.data()).ok()) std::abort();
        mine += static_cast<long>(k.size());
      }
      const double used = ThreadCpuSeconds() - cpu_start;
      keys += mine;
      std::lock_guard lock(cpu_mutex);
      cpu += used;
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));  // the measured interval
  stop = true;
  for (auto& w : workers) w.join();
  return static_cast<double>(keys) / cpu;
}

struct Options {
  int trainers = 4;
  size_t batch = 1000;
  uint64_t rows = 1000000;
  double seconds = 2;
  std::vector<uint32_t> dims;
};

Options ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--trainers" && i + 1 < argc) o.trainers = std::atoi(argv[++i]);
    else if (a == "--batch" && i + 1 < argc) o.batch = static_cast<size_t>(std::atol(argv[++i]));
    else if (a == "--rows" && i + 1 < argc) o.rows = static_cast<uint64_t>(std::atoll(argv[++i]));
    else if (a == "--seconds" && i + 1 < argc) o.seconds = std::atof(argv[++i]);
    else o.dims.push_back(static_cast<uint32_t>(std::atoi(a.c_str())));
  }
  if (o.dims.empty()) o.dims = {8, 64};
  return o;
}

// Creates the table's rows on the server (one pull of every key); false after printing why not.
bool CreateRows(const std::vector<std::unique_ptr<PsClient>>& clients, const TableConfig& config, uint64_t rows) {
  for (auto& c : clients) {
    if (Status s = c->CreateTable(config); !s.ok()) {
      std::fprintf(stderr, "%s\n", s.ToString().c_str());
      return false;
    }
  }
  std::vector<uint64_t> all(rows);
  for (uint64_t k = 0; k < rows; ++k) all[k] = k;
  std::vector<float> out(rows * config.dim);
  if (Status s = clients[0]->PullSparse(config.table_id, all.data(), all.size(), out.data()); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.ToString().c_str());
    return false;
  }
  return true;
}

// Keys pulled over RPC by every trainer for `seconds`, the wall time and the server's CPU time.
struct RpcRun {
  long keys = 0;
  double elapsed = 0, server_cpu = 0;
};

RpcRun PullOverRpc(const Options& o, const std::vector<std::unique_ptr<PsClient>>& clients, pid_t server,
                   uint32_t table_id, uint32_t dim) {
  std::atomic<bool> stop{false};
  std::atomic<long> keys{0};
  std::vector<std::thread> workers;
  const double cpu_before = CpuSeconds(server);
  const auto start = Clock::now();
  for (int t = 0; t < o.trainers; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937_64 rng(static_cast<uint64_t>(t) + 100);
      std::vector<std::vector<uint64_t>> batches;
      for (int b = 0; b < 64; ++b) batches.push_back(RandomKeys(rng, o.batch, o.rows));
      std::vector<float> out(o.batch * dim);
      long mine = 0;
      for (size_t b = 0; !stop; ++b) {
        const auto& k = batches[b % batches.size()];
        if (!clients[static_cast<size_t>(t)]->PullSparse(table_id, k.data(), k.size(), out.data()).ok()) std::abort();
        mine += static_cast<long>(k.size());
      }
      keys += mine;
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(o.seconds));  // the measured interval
  stop = true;
  for (auto& w : workers) w.join();
  RpcRun run;
  run.elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  run.server_cpu = CpuSeconds(server) - cpu_before;
  run.keys = keys;
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = ParseArgs(argc, argv);
  std::vector<std::string> endpoints;
  const std::vector<pid_t> servers = StartPsServers(FLEET_PS_SERVER_PATH, 1, o.trainers, &endpoints);
  std::vector<std::unique_ptr<PsClient>> clients;
  if (!ConnectTrainers(endpoints, o.trainers, &clients)) return 1;

  std::printf("sparse pull: %llu rows, batches of %zu random keys; %u CPUs\n", static_cast<unsigned long long>(o.rows),
              o.batch, std::thread::hardware_concurrency());
  std::printf("keys per CPU second: what one fully busy thread does (CPU time, so other load does not count)\n");
  std::printf("%5s %18s %18s %14s %16s %22s\n", "dim", "table, 1 thread", "table, 2 threads", "rpc keys/s",
              "server CPU s/s", "rpc keys/s per thread");
  uint32_t table_id = 0;
  for (uint32_t dim : o.dims) {
    ++table_id;
    // In process.
    SparseShard shard(TableConfig::Sparse(table_id, dim, OptimizerConfig::Sgd(0.1f), Mode::kAsync, 0.01f), 0, 1);
    {
      std::vector<uint64_t> all(o.rows);
      for (uint64_t k = 0; k < o.rows; ++k) all[k] = k;
      std::vector<float> out(o.rows * dim);
      if (!shard.Pull(all.data(), all.size(), out.data()).ok()) return 1;
    }
    const double one = TableKeysPerCpuSecond(shard, 1, o.batch, o.rows, o.seconds);
    const double two = TableKeysPerCpuSecond(shard, 2, o.batch, o.rows, o.seconds);

    // Over RPC: create the rows first, then measure.
    const TableConfig config = TableConfig::Sparse(table_id, dim, OptimizerConfig::Sgd(0.1f), Mode::kAsync, 0.01f);
    if (!CreateRows(clients, config, o.rows)) return 1;
    const RpcRun run = PullOverRpc(o, clients, servers[0], table_id, dim);
    const double rate = static_cast<double>(run.keys) / run.elapsed;
    std::printf("%5u %18.0f %18.0f %14.0f %16.2f %22.0f\n", dim, one, two, rate, run.server_cpu / run.elapsed,
                static_cast<double>(run.keys) / run.server_cpu);
    std::fflush(stdout);
  }
  clients.clear();
  StopProcesses(servers);
  return 0;
}
