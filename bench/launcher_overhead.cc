// Launcher overhead: time from starting the launcher until all N local processes are running,
// fleetrun against a plain shell loop starting the same program, interleaved in one run.
// Target (issue 2): fleetrun <= 1.5 x shell + 20 ms, and fleetrun's own RSS <= 8 MiB.
//
// usage: launcher_overhead [repetitions=15] [N...=16 64]
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "proc.h"

namespace {

long long NowNs() {
  timespec t{};
  ::clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<long long>(t.tv_sec) * 1000000000LL + t.tv_nsec;
}

std::vector<long long> ReadMarks(const std::string& dir) {
  std::vector<long long> marks;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return marks;
  while (dirent* e = ::readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream in(dir + "/" + e->d_name);
    long long ns = 0;
    if (in >> ns) marks.push_back(ns);
  }
  ::closedir(d);
  return marks;
}

struct Sample {
  double ms = 0;
  long rss_kib = 0;
};

// Runs argv with BENCH_MARK_DIR set, waits until n marks exist, then releases the children.
Sample RunOnce(const std::vector<std::string>& args, int n, const std::string& dir) {
  std::string cmd = "rm -rf '" + dir + "' && mkdir -p '" + dir + "'";
  if (std::system(cmd.c_str()) != 0) std::exit(1);
  ::setenv("BENCH_MARK_DIR", dir.c_str(), 1);
  std::vector<char*> argv;
  std::vector<std::string> copy = args;
  for (std::string& a : copy) argv.push_back(a.data());
  argv.push_back(nullptr);

  const long long start = NowNs();
  pid_t pid = ::fork();
  if (pid == 0) {
    int null_fd = ::open("/dev/null", O_WRONLY);
    ::dup2(null_fd, 1);
    ::dup2(null_fd, 2);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  std::vector<long long> marks;
  const long long give_up = start + 30LL * 1000000000LL;
  while (static_cast<int>((marks = ReadMarks(dir)).size()) < n) {
    if (NowNs() > give_up) {
      std::fprintf(stderr, "timed out waiting for %d processes of %s\n", n, args[0].c_str());
      ::kill(pid, SIGKILL);
      std::exit(1);
    }
    ::usleep(500);
  }
  Sample sample;
  sample.ms = static_cast<double>(*std::max_element(marks.begin(), marks.end()) - start) / 1e6;
  sample.rss_kib = fleet::bench::ProcStatusKib(pid, "VmHWM");   // its peak while it holds all children
  std::ofstream(dir + "/release") << "go\n";
  int status = 0;
  ::waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::fprintf(stderr, "%s failed (status %d)\n", args[0].c_str(), status);
    std::exit(1);
  }
  return sample;
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5)];
}

}  // namespace

int main(int argc, char** argv) {
  int repetitions = argc > 1 ? std::atoi(argv[1]) : 15;
  std::vector<int> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(std::atoi(argv[i]));
  if (sizes.empty()) sizes = {16, 64};
  char tmpl[] = "/tmp/fleet-bench-XXXXXX";
  const std::string root = ::mkdtemp(tmpl);

  std::printf("launcher overhead: time until all N processes run (median / p90 of %d runs, ms)\n", repetitions);
  std::printf("%5s %18s %18s %12s %14s %10s %16s\n", "N", "shell loop", "fleetrun", "ratio", "target ms", "verdict",
              "fleetrun RSS KiB");
  bool all_ok = true;
  for (int n : sizes) {
    const std::string marker = BENCH_MARKER_PATH;
    const std::string shell_loop = "i=0; while [ $i -lt " + std::to_string(n) + " ]; do '" + marker +
                                   "' & i=$((i+1)); done; wait";
    std::vector<double> shell_ms, fleet_ms;
    long rss = 0;
    for (int r = 0; r < repetitions; ++r) {  // interleaved, so drift hits both alike
      shell_ms.push_back(RunOnce({"/bin/sh", "-c", shell_loop}, n, root + "/marks").ms);
      Sample s = RunOnce({FLEETRUN_PATH, "--nproc_per_node=" + std::to_string(n), "--log_dir=" + root + "/log",
                          marker},
                         n, root + "/marks");
      fleet_ms.push_back(s.ms);
      rss = std::max(rss, s.rss_kib);
    }
    const double shell_median = Percentile(shell_ms, 0.5);
    const double fleet_median = Percentile(fleet_ms, 0.5);
    const double target = 1.5 * shell_median + 20.0;
    const bool ok = fleet_median <= target && rss <= 8 * 1024;
    all_ok = all_ok && ok;
    std::printf("%5d %8.2f / %7.2f %8.2f / %7.2f %12.2f %14.2f %10s %16ld\n", n, shell_median,
                Percentile(shell_ms, 0.9), fleet_median, Percentile(fleet_ms, 0.9), fleet_median / shell_median,
                target, ok ? "ok" : "MISSED", rss);
  }
  std::string cleanup = "rm -rf '" + root + "'";
  (void)!std::system(cleanup.c_str());
  return all_ok ? 0 : 1;
}
