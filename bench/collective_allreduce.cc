// All-reduce bus bandwidth, N ranks (default 4) as processes on loopback, float32 sum in place,
// 1 KiB .. 256 MiB, in one run:
//   fleet: fleet::collective::Communicator::AllReduce, Gloo backend, set up from the Paddle env
//   gloo:  raw gloo::allreduce + gloo::sum<float> on a context of its own (gloo's FileStore
//          rendezvous), the same algorithm without our layer
//   gloo': the same raw path on a second context: gloo' / gloo is the noise floor of the
//          comparison (an A/A test), since both should be equal
//   MPI:   OpenMPI's MPI_Allreduce (collective_allreduce_mpi under mpirun), with its default
//          transports (shared memory between processes of one host) and TCP only
//          (--mca btl self,tcp, the wire Gloo uses)
// busbw = bytes * 2 (n - 1) / n / time per all-reduce (nccl-tests' convention).
// Method: each size gets 2 warm-up all-reduces per path, then S samples per path (S sized from a
// probe so that a path takes ~1.5 s, 10 .. 400, decided on rank 0): fleet, gloo and gloo' take
// turns one all-reduce at a time (rotating which goes first), each all-reduce timed on rank 0 in
// wall time and in the process's CPU time (all threads). Times are medians; the overhead is the
// median over the sample triples of fleet / gloo (the noise floor the median of gloo' / gloo), in
// wall and in CPU time. Taking turns one operation at a time makes the load other
// processes put on the machine hit every path alike. Target (issue 6): fleet <= 5% over gloo.
// With a GPU, also the NCCL bootstrap latency and a one-GPU all-reduce.
//
// usage: collective_allreduce [--ranks=4] [--min-kib=1] [--max-mib=256] [--no-mpi]
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <arpa/inet.h>
#include <gloo/allreduce.h>
#include <gloo/barrier.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "fleet/collective/communicator.h"
#include "fleet/launcher/host.h"

namespace {

using Clock = std::chrono::steady_clock;
using fleet::collective::Communicator;
using fleet::collective::ReduceOp;

constexpr double kSecondsPerPath = 1.5;

// Samples per path from one all-reduce's duration (the MPI program does the same).
int Samples(double seconds_per_allreduce) {
  return static_cast<int>(std::clamp(kSecondsPerPath / std::max(seconds_per_allreduce, 1e-9), 10.0, 400.0));
}

double Seconds(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// CPU time of this process, all threads (gloo's device thread does the receiving).
double ProcessCpuSeconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "collective_allreduce: %s\n", message.c_str());
  std::exit(1);
}

std::vector<int> FreePorts(int n) {
  auto ports = fleet::launcher::FindFreePorts(n);
  if (!ports.ok()) Die(ports.error());
  return *ports;
}

// ---------------------------------------------------------------------------------------------
// Worker: one rank, both Gloo paths.

// One rank's all-reduce paths on one buffer: the fleet communicator, and raw gloo, as its own
// examples set it up, on two contexts (`context` against fleet, `context2` for the noise floor).
class Paths {
 public:
  Paths(Communicator& fleet_comm, const char* store_dir, size_t largest_bytes)
      : fleet_comm_(fleet_comm), file_store_(store_dir), buffer_(largest_bytes / sizeof(float), 0.0f) {
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    context_ = Connect("raw", attr, device_);
    context2_ = Connect("raw2", attr, device2_);
  }

  std::vector<float>& buffer() { return buffer_; }
  void Fleet(size_t count) {
    if (!fleet_comm_.AllReduce(buffer_.data(), count, ReduceOp::kSum).ok()) Die("fleet all-reduce failed");
  }
  void Raw(size_t count) { RawOn(context_, count); }
  void RawFloor(size_t count) { RawOn(context2_, count); }
  void RawBarrier() {
    gloo::BarrierOptions opts(context_);
    gloo::barrier(opts);
  }

 private:
  std::shared_ptr<gloo::rendezvous::Context> Connect(const std::string& prefix, const gloo::transport::tcp::attr& attr,
                                                     std::shared_ptr<gloo::transport::Device>& device) {
    gloo::rendezvous::PrefixStore store(prefix, file_store_);
    device = gloo::transport::tcp::CreateDevice(attr);
    auto context = std::make_shared<gloo::rendezvous::Context>(fleet_comm_.rank(), fleet_comm_.size());
    context->setTimeout(std::chrono::seconds(600));
    context->connectFullMesh(store, device);
    return context;
  }
  void RawOn(const std::shared_ptr<gloo::rendezvous::Context>& on, size_t count) {
    gloo::AllreduceOptions opts(on);
    opts.setOutput(buffer_.data(), count);
    opts.setReduceFunction(static_cast<void (*)(void*, const void*, const void*, size_t)>(&gloo::sum<float>));
    gloo::allreduce(opts);
  }

  Communicator& fleet_comm_;
  gloo::rendezvous::FileStore file_store_;
  std::vector<float> buffer_;
  std::shared_ptr<gloo::transport::Device> device_, device2_;
  std::shared_ptr<gloo::rendezvous::Context> context_, context2_;
};

// Per path (fleet, gloo, gloo') the sampled times, and per sample triple the ratios to gloo.
struct Sampled {
  std::vector<double> times[3], ratios, floor_ratios, cpu_ratios, cpu_floor_ratios;
};

// `samples` turns of the three paths, one all-reduce of `count` floats at a time.
Sampled Sample(Paths& paths, size_t count, int64_t samples) {
  Sampled s;
  for (int64_t k = 0; k < samples; ++k) {
    double took[3] = {0, 0, 0};
    double cpu[3] = {0, 0, 0};
    for (int turn = 0; turn < 3; ++turn) {
      const int path = static_cast<int>((k + turn) % 3);
      const double cpu_start = ProcessCpuSeconds();
      const auto start = Clock::now();
      if (path == 0) paths.Fleet(count);
      if (path == 1) paths.Raw(count);
      if (path == 2) paths.RawFloor(count);
      took[path] = Seconds(start);
      cpu[path] = ProcessCpuSeconds() - cpu_start;
    }
    for (int path = 0; path < 3; ++path) s.times[path].push_back(took[path]);
    s.ratios.push_back(took[0] / took[1]);
    s.floor_ratios.push_back(took[2] / took[1]);
    s.cpu_ratios.push_back(cpu[0] / std::max(cpu[1], 1e-9));
    s.cpu_floor_ratios.push_back(cpu[2] / std::max(cpu[1], 1e-9));
  }
  return s;
}

// Correctness of both paths: rank r contributes r + 1.
void CheckSums(Paths& paths, size_t count, int rank, int size) {
  std::vector<float>& buffer = paths.buffer();
  const float want = static_cast<float>(size * (size + 1) / 2);
  for (int path = 0; path < 2; ++path) {
    std::fill(buffer.begin(), buffer.begin() + static_cast<long>(count), static_cast<float>(rank + 1));
    path == 0 ? paths.Fleet(count) : paths.Raw(count);
    if (buffer[0] != want || buffer[count - 1] != want) Die(std::string(path == 0 ? "fleet" : "gloo") + " all-reduce gave a wrong sum");
  }
  std::fill(buffer.begin(), buffer.end(), 0.0f);
}

// One rank: every size timed on the three paths, the sums checked; rank 0 prints the results.
int Worker(const std::vector<size_t>& sizes) {
  const char* store_dir = std::getenv("FLEET_BENCH_STORE_DIR");
  if (!store_dir) Die("worker without FLEET_BENCH_STORE_DIR");
  fleet::collective::CommunicatorOptions options;
  options.rendezvous_timeout = std::chrono::seconds(60);
  options.operation_timeout = std::chrono::seconds(600);
  auto created = fleet::collective::CreateCommunicator(fleet::CurrentProcessEnv(), options);
  if (!created.ok()) Die(created.error());
  Communicator& fleet_comm = **created;
  const int rank = fleet_comm.rank();
  const int size = fleet_comm.size();

  size_t largest = 4;
  for (size_t s : sizes) largest = std::max(largest, s);
  Paths paths(fleet_comm, store_dir, largest);

  for (size_t bytes : sizes) {
    const size_t count = bytes / sizeof(float);
    for (int i = 0; i < 2; ++i) {
      paths.Fleet(count);
      paths.Raw(count);
    }
    // Probe on rank 0, shared with the others.
    if (!fleet_comm.Barrier().ok()) Die("barrier failed");
    const auto start = Clock::now();
    for (int i = 0; i < 3; ++i) paths.Fleet(count);
    int64_t samples = Samples(Seconds(start) / 3);
    if (!fleet_comm.Broadcast(&samples, 1, 0).ok()) Die("broadcast failed");
    const Sampled s = Sample(paths, count, samples);
    CheckSums(paths, count, rank, size);
    if (rank == 0) {
      std::printf("RESULT %zu %lld %.9f %.9f %.6f %.6f %.6f %.6f\n", bytes, static_cast<long long>(samples),
                  Median(s.times[0]), Median(s.times[1]), Median(s.ratios), Median(s.floor_ratios),
                  Median(s.cpu_ratios), Median(s.cpu_floor_ratios));
    }
    std::fflush(stdout);
  }
  paths.RawBarrier();
  if (!fleet_comm.Barrier().ok()) Die("final barrier failed");
  return 0;
}

// ---------------------------------------------------------------------------------------------
// Parent: start the ranks, then MPI, then print the table.

// The 1-minute load average: other work on the machine shows in the numbers.
std::string LoadAverage() {
  FILE* f = std::fopen("/proc/loadavg", "r");
  char text[64] = "?";
  if (f) {
    if (std::fscanf(f, "%63s", text) != 1) std::strcpy(text, "?");
    std::fclose(f);
  }
  return text;
}

struct Row {
  int samples = 0;
  double fleet = 0, gloo = 0, mpi = 0, mpi_tcp = 0;  // median seconds per all-reduce
  double ratio = 0;                                  // median of fleet / gloo over the samples
  double floor = 0;                                  // median of gloo' / gloo: the noise floor
  double cpu_ratio = 0, cpu_floor = 0;               // the same for rank 0's CPU time per all-reduce
};

std::string JoinSizes(const std::vector<size_t>& sizes) {
  std::string s;
  for (size_t b : sizes) s += (s.empty() ? "" : " ") + std::to_string(b);
  return s;
}

void RunGlooRanks(int ranks, const std::vector<size_t>& sizes, std::map<size_t, Row>& rows) {
  char dir[] = "/tmp/fleet-bench-gloo-XXXXXX";
  if (!::mkdtemp(dir)) Die("mkdtemp failed");
  std::vector<std::string> endpoints;
  for (int port : FreePorts(ranks)) endpoints.push_back("127.0.0.1:" + std::to_string(port));
  std::string list;
  for (const std::string& e : endpoints) list += (list.empty() ? "" : ",") + e;
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) Die("pipe failed");
  std::vector<pid_t> pids;
  for (int r = 0; r < ranks; ++r) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      if (r == 0) ::dup2(pipe_fds[1], 1);
      ::close(pipe_fds[0]);
      ::close(pipe_fds[1]);
      ::setenv("PADDLE_TRAINER_ID", std::to_string(r).c_str(), 1);
      ::setenv("PADDLE_TRAINERS_NUM", std::to_string(ranks).c_str(), 1);
      ::setenv("PADDLE_TRAINER_ENDPOINTS", list.c_str(), 1);
      ::setenv("PADDLE_CURRENT_ENDPOINT", endpoints[static_cast<size_t>(r)].c_str(), 1);
      ::setenv("PADDLE_DISTRI_BACKEND", "gloo", 1);
      ::setenv("FLEET_BENCH_STORE_DIR", dir, 1);
      std::vector<std::string> args = {"collective_allreduce", "--worker"};
      for (size_t b : sizes) args.push_back(std::to_string(b));
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv("/proc/self/exe", argv.data());
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  ::close(pipe_fds[1]);
  FILE* in = ::fdopen(pipe_fds[0], "r");
  char line[256];
  while (std::fgets(line, sizeof line, in)) {
    size_t bytes = 0;
    int samples = 0;
    double fleet = 0, gloo = 0, ratio = 0, floor = 0, cpu_ratio = 0, cpu_floor = 0;
    if (std::sscanf(line, "RESULT %zu %d %lf %lf %lf %lf %lf %lf", &bytes, &samples, &fleet, &gloo, &ratio, &floor,
                    &cpu_ratio, &cpu_floor) == 8) {
      rows[bytes].floor = floor;
      rows[bytes].cpu_ratio = cpu_ratio;
      rows[bytes].cpu_floor = cpu_floor;
      rows[bytes].samples = samples;
      rows[bytes].fleet = fleet;
      rows[bytes].gloo = gloo;
      rows[bytes].ratio = ratio;
      std::fprintf(stderr, "  %10zu bytes: fleet %.6f s, gloo %.6f s per all-reduce, fleet/gloo %.3f, gloo'/gloo %.3f; CPU %.3f, %.3f\n",
                   bytes, fleet, gloo, ratio, floor, cpu_ratio, cpu_floor);
    }
  }
  std::fclose(in);
  bool failed = false;
  for (pid_t pid : pids) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    failed |= !WIFEXITED(status) || WEXITSTATUS(status) != 0;
  }
  std::filesystem::remove_all(dir);
  if (failed) Die("a Gloo rank failed");
}

bool RunMpi(int ranks, const std::vector<size_t>& sizes, bool tcp_only, std::map<size_t, Row>& rows) {
#ifdef FLEET_BENCH_MPI_PROGRAM
  std::string command = std::string(FLEET_BENCH_MPIRUN) + (::geteuid() == 0 ? " --allow-run-as-root" : "") +
                        " --oversubscribe" + (tcp_only ? " --mca btl self,tcp" : "") + " -np " + std::to_string(ranks) +
                        " " + FLEET_BENCH_MPI_PROGRAM + " " + JoinSizes(sizes);
  std::fprintf(stderr, "MPI: %s\n", command.c_str());
  FILE* in = ::popen(command.c_str(), "r");
  if (!in) return false;
  char line[256];
  int found = 0;
  while (std::fgets(line, sizeof line, in)) {
    size_t bytes = 0;
    int samples = 0;
    double seconds = 0;
    if (std::sscanf(line, "RESULT %zu %d %lf", &bytes, &samples, &seconds) == 3) {
      (tcp_only ? rows[bytes].mpi_tcp : rows[bytes].mpi) = seconds;
      ++found;
    }
  }
  return ::pclose(in) == 0 && found == static_cast<int>(sizes.size());
#else
  (void)ranks, (void)sizes, (void)tcp_only, (void)rows;
  return false;
#endif
}

// NCCL bootstrap (unique id, ncclCommInitRank) and a one-GPU all-reduce, where there is a GPU.
void GpuSection() {
  auto gpus = fleet::collective::CudaDeviceCount();
  if (!gpus.ok()) {
    std::printf("\nNCCL: skipped (%s)\n", gpus.error().c_str());
    return;
  }
  std::printf("\nNCCL on %d GPU(s)\n", *gpus);
  fleet::collective::CommunicatorOptions options;
  options.host_buffers = true;
  options.rendezvous_timeout = std::chrono::seconds(120);
  for (int ranks : {1, std::min(*gpus, 8)}) {
    std::vector<double> samples;
    for (int trial = 0; trial < 5; ++trial) {
      std::string list;
      const std::vector<int> ports = FreePorts(ranks);
      for (int p : ports) list += (list.empty() ? "" : ",") + std::string("127.0.0.1:") + std::to_string(p);
      std::vector<double> took(static_cast<size_t>(ranks));
      std::vector<std::thread> threads;
      for (int r = 0; r < ranks; ++r) {
        threads.emplace_back([&, r] {
          fleet::EnvMap env = {{"PADDLE_TRAINER_ID", std::to_string(r)},
                               {"PADDLE_TRAINERS_NUM", std::to_string(ranks)},
                               {"PADDLE_TRAINER_ENDPOINTS", list},
                               {"PADDLE_CURRENT_ENDPOINT", "127.0.0.1:" + std::to_string(ports[static_cast<size_t>(r)])},
                               {"PADDLE_DISTRI_BACKEND", "nccl"},
                               {"FLAGS_selected_gpus", std::to_string(r)}};
          const auto start = Clock::now();
          auto comm = fleet::collective::CreateCommunicator(env, options);
          took[static_cast<size_t>(r)] = Seconds(start);
          if (!comm.ok()) Die("NCCL bootstrap: " + comm.error());
          if (r == 0 && trial == 0) {
            std::vector<float> v(16 << 20, 1.0f);
            const auto t = Clock::now();
            auto s = (*comm)->AllReduce(v.data(), v.size(), ReduceOp::kSum);
            if (!s.ok() || v[0] != static_cast<float>(ranks)) Die("NCCL all-reduce sanity failed: " + s.error());
            if (ranks == 1) std::printf("  single-GPU all-reduce of 64 MiB (host buffers, staged): correct, %.3f ms\n", Seconds(t) * 1e3);
          } else if (trial == 0) {
            std::vector<float> v(16 << 20, 1.0f);
            if (!(*comm)->AllReduce(v.data(), v.size(), ReduceOp::kSum).ok()) Die("NCCL all-reduce failed");
          }
        });
      }
      for (std::thread& t : threads) t.join();
      samples.push_back(*std::max_element(took.begin(), took.end()));
    }
    std::printf("  bootstrap of %d rank(s) (id exchange + ncclCommInitRank): median %.1f ms of 5\n", ranks, Median(samples) * 1e3);
    if (*gpus == 1) break;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "--worker") {
    std::vector<size_t> sizes;
    for (int i = 2; i < argc; ++i) sizes.push_back(std::strtoull(argv[i], nullptr, 10));
    return Worker(sizes);
  }
  int ranks = 4;
  size_t min_bytes = 1 << 10;
  size_t max_bytes = size_t{256} << 20;
  bool mpi = true;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--ranks=", 0) == 0) ranks = std::atoi(a.c_str() + 8);
    else if (a.rfind("--min-kib=", 0) == 0) min_bytes = std::strtoull(a.c_str() + 10, nullptr, 10) << 10;
    else if (a.rfind("--max-mib=", 0) == 0) max_bytes = std::strtoull(a.c_str() + 10, nullptr, 10) << 20;
    else if (a == "--no-mpi") mpi = false;
    else Die("usage: collective_allreduce [--ranks=4] [--min-kib=1] [--max-mib=256] [--no-mpi]");
  }
  if (ranks < 2 || min_bytes < 4 || max_bytes < min_bytes) Die("need --ranks >= 2 and sizes of at least 4 bytes");
  std::vector<size_t> sizes;
  for (size_t b = min_bytes; b <= max_bytes; b *= 4) sizes.push_back(b);

  const std::string load_before = LoadAverage();
  std::fprintf(stderr, "Gloo: %d ranks on loopback\n", ranks);
  std::map<size_t, Row> rows;
  RunGlooRanks(ranks, sizes, rows);
  const bool have_mpi = mpi && RunMpi(ranks, sizes, false, rows);
  const bool have_mpi_tcp = have_mpi && RunMpi(ranks, sizes, true, rows);

  const double factor = 2.0 * (ranks - 1) / ranks;
  auto busbw = [&](size_t bytes, double seconds) { return seconds > 0 ? static_cast<double>(bytes) * factor / seconds / 1e9 : 0.0; };
  auto label = [](size_t bytes) {
    return bytes >= (1 << 20) ? std::to_string(bytes >> 20) + " MiB" : std::to_string(bytes >> 10) + " KiB";
  };
  std::printf("all-reduce, float32 sum, %d ranks on loopback, nproc %u; bus bandwidth in GB/s (busbw = bytes * 2(n-1)/n / time)\n",
              ranks, std::thread::hardware_concurrency());
  std::printf("%8s %7s | %9s %9s %8s %8s | %8s %8s | %9s %7s | %9s %7s\n", "size", "samples", "fleet", "gloo", "overhead",
              "A/A", "cpu ovh", "cpu A/A", "MPI", "fleet/MPI",
              "MPI tcp", "fleet/tcp");
  double worst = -1e9;
  double fleet_total = 0, gloo_total = 0;
  for (size_t bytes : sizes) {
    const Row& r = rows[bytes];
    const double overhead = (r.ratio - 1.0) * 100.0;
    worst = std::max(worst, overhead);
    fleet_total += r.fleet;
    gloo_total += r.gloo;
    std::printf("%8s %7d | %9.3f %9.3f %7.1f%% %7.1f%% | %7.1f%% %7.1f%% | ", label(bytes).c_str(), r.samples,
                busbw(bytes, r.fleet), busbw(bytes, r.gloo), overhead, (r.floor - 1.0) * 100.0, (r.cpu_ratio - 1.0) * 100.0,
                (r.cpu_floor - 1.0) * 100.0);
    if (have_mpi) std::printf("%9.3f %8.2fx | ", busbw(bytes, r.mpi), r.mpi / r.fleet);
    else std::printf("%9s %9s | ", "-", "-");
    if (have_mpi_tcp) std::printf("%9.3f %8.2fx\n", busbw(bytes, r.mpi_tcp), r.mpi_tcp / r.fleet);
    else std::printf("%9s %9s\n", "-", "-");
  }
  std::printf("fleet over gloo: worst size %+.1f%%, all sizes' median times summed %+.1f%% (target <= 5%%); "
              "A/A (gloo' over gloo) shows the noise of the measurement\n",
              worst, (fleet_total / gloo_total - 1.0) * 100.0);
  std::printf("load average before / after: %s / %s\n", load_before.c_str(), LoadAverage().c_str());
  if (!have_mpi) std::printf("MPI baseline: not run (%s)\n", mpi ? "mpirun or the MPI program failed" : "--no-mpi");
  GpuSection();
  return 0;
}
