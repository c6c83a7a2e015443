// Elastic recovery, fleetrun on loopback (issue 18): a real etcd and 3 elastic fleetrun processes
// (--np 2:4, one per node on 127.0.0.2-4, the env-dump trainer of the elastic tests), measured in
// the same run, `repetitions` times:
//   (a) a node's fleetrun is SIGKILLed -> every surviving trainer runs with the new env;
//   (a') the same node stopped with SIGTERM (it deregisters at once: fleetrun's own restart cost);
//   (b) a node joins (its fleetrun is started) -> every trainer of the 3 runs with the new env;
//   (c) baseline, a whole-job restart: from the SIGKILL of a node, every other fleetrun is
//       killed and a fresh non-elastic `fleetrun --ips=<the survivors>` started on each
//       survivor -> every trainer runs. The restart is started at once: a scheduler that
//       notices the loss and restarts a job only adds to it.
// A generation is seen as the trainers' env dumps with the new PADDLE_TRAINER_ENDPOINTS, all of
// them. Paddle's own launcher is compared by its constants (docs/benchmarks.md).
//
// usage: elastic_recovery [repetitions=3] [PADDLE_ELASTIC_TTL seconds=2]
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "elastic_cluster.h"

namespace fleet {
namespace {

constexpr double kGiveUpSeconds = 30;
constexpr int kPaddleElasticTimeout = 120;   // Paddle's ELASTIC_TIMEOUT (fleet/elastic/manager.py)
constexpr int kPaddleElasticTtl = 60;        // Paddle's ELASTIC_TTL
constexpr int kPaddlePollSeconds = 2;        // Paddle's watch() and wait() sleep between etcd reads

struct Times {
  std::vector<double> killed, stopped, joined, whole_job;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? -1 : v[v.size() / 2];
}

void Check(bool ok, const std::string& what, ElasticCluster& cluster) {
  if (ok) return;
  std::fprintf(stderr, "elastic_recovery: %s\n", what.c_str());
  cluster.Stop(/*keep_files=*/true);
  std::exit(1);
}

// Lets the env-dump trainers of `nodes` end, and waits for their fleetruns.
void Finish(ElasticCluster& cluster, const std::vector<int>& nodes) {
  WriteFile(cluster.Root() / "finish", "", 0644);
  for (int node : nodes) {
    Check(cluster.WaitForNode(node, 10) == 0, "node " + std::to_string(node) + " did not end cleanly", cluster);
  }
  fs::remove(cluster.Root() / "finish");
}

void StartThree(ElasticCluster& cluster, const std::string& name) {
  for (int node : {2, 3, 4}) Check(cluster.StartNode(node, name, "2:4"), "node did not start", cluster);
  Check(cluster.WaitForGeneration({2, 3, 4}, {}, kGiveUpSeconds) >= 0, "the three nodes never ran", cluster);
}

// (a) SIGKILL, then (b) a join.
void KillThenJoin(ElasticCluster& cluster, const std::string& job, Times& t) {
  StartThree(cluster, job);
  auto seen = cluster.DumpNames();
  auto start = Clock::now();
  cluster.KillNode(3, SIGKILL);
  Check(cluster.WaitForGeneration({2, 4}, seen, kGiveUpSeconds) >= 0, "no generation {2, 4} after the kill", cluster);
  t.killed.push_back(SecondsSince(start));
  seen = cluster.DumpNames();
  start = Clock::now();
  Check(cluster.StartNode(5, job, "2:4"), "node 5 did not start", cluster);
  Check(cluster.WaitForGeneration({2, 4, 5}, seen, kGiveUpSeconds) >= 0, "no generation {2, 4, 5}", cluster);
  t.joined.push_back(SecondsSince(start));
  Finish(cluster, {2, 4, 5});
}

// (a') SIGTERM: the node deregisters as it goes.
void Terminate(ElasticCluster& cluster, const std::string& job, Times& t) {
  StartThree(cluster, job);
  const auto seen = cluster.DumpNames();
  const auto start = Clock::now();
  cluster.KillNode(3, SIGTERM);
  Check(cluster.WaitForGeneration({2, 4}, seen, kGiveUpSeconds) >= 0, "no generation {2, 4} after SIGTERM", cluster);
  t.stopped.push_back(SecondsSince(start));
  Finish(cluster, {2, 4});
}

// (c) the whole job restarted as a fresh non-elastic job of the survivors.
void RestartWholeJob(ElasticCluster& cluster, const std::string& job, Times& t) {
  const std::string survivors = Host(2) + "," + Host(4);
  StartThree(cluster, job);
  const auto seen = cluster.DumpNames();
  const auto start = Clock::now();
  for (int node : {3, 2, 4}) cluster.KillNode(node, SIGKILL);
  for (int node : {2, 4}) {
    Check(cluster.StartFleetrun(node, {"--ips=" + survivors, "--host=" + Host(node),
                                       "--start_port=" + std::to_string(ElasticCluster::kPort),
                                       (cluster.Root() / "elastic.sh").string()}),
          "fleetrun --ips did not start", cluster);
  }
  Check(cluster.WaitForGeneration({2, 4}, seen, kGiveUpSeconds) >= 0, "the restarted job never ran", cluster);
  t.whole_job.push_back(SecondsSince(start));
  Finish(cluster, {2, 4});
}

void PrintMedians(const Times& t, int repetitions, int ttl) {
  const double killed = Median(t.killed), stopped = Median(t.stopped), joined = Median(t.joined),
               whole = Median(t.whole_job);
  std::printf("\nmedians of %d runs, PADDLE_ELASTIC_TTL=%d s, loopback:\n", repetitions, ttl);
  std::printf("  (a)  node SIGKILLed -> survivors running with the new env   %7.3f s  (TTL + %.3f s)\n", killed, killed - ttl);
  std::printf("  (a') node SIGTERMed -> survivors running with the new env   %7.3f s\n", stopped);
  std::printf("  (b)  node joined    -> all running with the new env         %7.3f s\n", joined);
  std::printf("  (c)  whole-job restart of the survivors (fresh fleetrun)     %7.3f s\n", whole);
  std::printf("  ratios: (a)/(c) %.1f x, (a')/(c) %.1f x, (b)/(c) %.1f x\n", killed / whole, stopped / whole, joined / whole);
  // fleetrun's restart after the lease: what (a) took beyond the TTL.
  const double restart = killed - ttl;
  std::printf("\nwith the default TTL (%d s, Paddle's ELASTIC_TTL), (a) would take up to %.1f s: the lease, then %.3f s\n",
              kPaddleElasticTtl, kPaddleElasticTtl + restart, restart);
  const int paddle = kPaddleElasticTtl + kPaddleElasticTimeout + 2 * kPaddlePollSeconds;
  std::printf("Paddle's elastic launcher, np 2:4, 3 -> 2 nodes: the lease (ELASTIC_TTL), then ELASTIC_TIMEOUT (%d s)\n"
              "  waiting for MAX nodes, reading etcd every %d s: up to %d s, %.1f x fleetrun's (a) at the same TTL\n",
              kPaddleElasticTimeout, kPaddlePollSeconds, paddle, paddle / (kPaddleElasticTtl + restart));
}

}  // namespace
}  // namespace fleet

int main(int argc, char** argv) {
  using namespace fleet;
  const int repetitions = argc > 1 ? std::atoi(argv[1]) : 3;
  const int ttl = argc > 2 ? std::atoi(argv[2]) : 2;
  if (repetitions < 1 || ttl < 2) {
    std::fprintf(stderr, "usage: elastic_recovery [repetitions=3] [PADDLE_ELASTIC_TTL seconds>=2, default 2]\n");
    return 2;
  }
  if (ElasticCluster::EtcdBinary().empty()) {
    std::fprintf(stderr, "elastic_recovery: no etcd binary (Debian: apt-get install etcd-server)\n");
    return 2;
  }
  ElasticCluster cluster;
  const std::string error = cluster.Start(FLEETRUN_PATH, ttl);
  if (!error.empty()) {
    std::fprintf(stderr, "elastic_recovery: %s\n", error.c_str());
    return 1;
  }
  Times t;
  for (int rep = 0; rep < repetitions; ++rep) {
    const std::string job = "bench" + std::to_string(rep);
    KillThenJoin(cluster, job + "a", t);
    Terminate(cluster, job + "b", t);
    RestartWholeJob(cluster, job + "c", t);
    std::printf("run %d: (a) SIGKILL -> running %.3f s, (a') SIGTERM -> running %.3f s, (b) join -> running %.3f s, "
                "(c) whole-job restart -> running %.3f s\n",
                rep + 1, t.killed.back(), t.stopped.back(), t.joined.back(), t.whole_job.back());
    std::fflush(stdout);
  }
  PrintMedians(t, repetitions, ttl);
  return 0;
}
