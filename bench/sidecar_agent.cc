// fleet-sidecar's agent (issue 5, section 5). The real binary, measured from outside:
//  (a) log ingest: a large Paddle-style log (Fleet step lines as examples/common prints them, with
//      3% other lines) appearing (renamed into place) under the name a running
//      `fleet-sidecar agent --log-file` follows, until fleet_sidecar_log_lines_total says every line
//      was read; against `grep -c` over the same file in the same run: the regex that finds a step token ('step ?[0-9]+', what the agent
//      recognises before it reads the fields) and a fixed string ('step'). Rates by wall time
//      and by CPU time (the sidecar's utime+stime from /proc; grep's from wait4), best of N rounds,
//      alternating. Target: >= 0.5x grep's rate.
//  (b) /metrics for 64 ranks' worth of series (a pod with --ranks=64, every rank having reported
//      steps with step times, loss, samples/s, epoch and 3 custom scalars): latency of N GETs over
//      one keep-alive connection, client side. Target: p99 <= 2 ms.
//  (c) footprint while the trainer logs 100 steps/s (one line per step) for D seconds: the gate
//      opened against the fake API server as in a pod (over TLS, the server verified against the
//      cluster CA, a bearer token from a file: the kube client and OpenSSL at work), the agent
//      following the log dir, the pod condition written, /metrics scraped every 5 s: CPU
//      (utime+stime over the window / wall) and RSS (VmRSS, RssAnon, RssFile, VmHWM), and where the
//      RSS is (/proc/PID/smaps by mapping). Then the same with 100 UDP push reports/s. For
//      comparison, the gate over plain http (what TLS costs) and `agent` (no API). Targets: CPU
//      <= 1% of a core, RSS <= 10 MiB.
//
// usage: sidecar_agent [lines=2000000] [rounds=3] [scrapes=2000] [seconds=20]
// FLEET_SIDECAR=PATH measures another fleet-sidecar binary (e.g. an older build, to compare).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "fake_apiserver_fixture.h"
#include "fleet/sidecar/step_parser.h"
#include "proc.h"

#ifndef FLEET_SIDECAR_BINARY
#error "FLEET_SIDECAR_BINARY must name the fleet-sidecar executable"
#endif

namespace {

using fleet::kube::testing::FakeApiServer;
using fleet::kube::testing::HttpConnection;
using fleet::kube::testing::TempDir;
using fleet::kube::testing::TestPki;
using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string SidecarBinary() {
  const char* other = std::getenv("FLEET_SIDECAR");
  return other && *other ? other : FLEET_SIDECAR_BINARY;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A child process, its stdout+stderr in a file.
struct Child {
  pid_t pid = -1;
  std::string out;
  Child(std::vector<std::string> argv, const std::string& out_path) : out(out_path) {
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    pid = ::fork();
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      const int fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::execv(args[0], args.data());
      ::_exit(127);
    }
  }
  ~Child() {
    if (pid > 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
  }
  // The number after `prefix` in its output; -1 if it does not appear within 10 s.
  int Logged(const std::string& prefix) const {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < deadline) {
      const std::string text = ReadText(out);
      const size_t at = text.find(prefix);
      if (at != std::string::npos) return std::atoi(text.c_str() + at + prefix.size());
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return -1;
  }
  double CpuSeconds() const { return fleet::bench::ProcessCpuSeconds(pid); }
  std::string Status(const std::string& key) const { return fleet::bench::ProcStatus(pid, key); }
  // The `top` mappings holding the most RSS ("libcrypto.so.3 1460 kB, ..."), from smaps: files by
  // name, anonymous memory as [anon]; only those whose names contain one of `only`, when given.
  std::string RssByMapping(size_t top, const std::vector<std::string>& only = {}) const {
    std::istringstream lines(ReadText("/proc/" + std::to_string(pid) + "/smaps"));
    std::map<std::string, long> kb;  // NOLINT(runtime/int)
    std::string line, mapping;
    while (std::getline(lines, line)) {
      std::istringstream fields(line);
      std::string first, perms, offset, dev, inode, path;
      fields >> first;
      if (first == "Rss:") {
        long value = 0;  // NOLINT(runtime/int)
        fields >> value;
        kb[mapping] += value;
      } else if (first.find('-') != std::string::npos && first.back() != ':') {
        fields >> perms >> offset >> dev >> inode >> path;
        mapping = path.empty() ? "[anon]" : path.substr(path.rfind('/') + 1);
      }
    }
    std::vector<std::pair<long, std::string>> sorted;  // NOLINT(runtime/int)
    for (const auto& [name, value] : kb) {
      auto named = [&name = name](const std::string& part) { return name.find(part) != std::string::npos; };
      const bool wanted = only.empty() || std::any_of(only.begin(), only.end(), named);
      if (wanted) sorted.emplace_back(value, name);
    }
    std::sort(sorted.rbegin(), sorted.rend());
    std::string text;
    for (size_t i = 0; i < std::min(top, sorted.size()); ++i) {
      text += (i ? ", " : "") + sorted[i].second + " " + std::to_string(sorted[i].first) + " kB";
    }
    return text;
  }
};

double Sample(const std::string& page, const std::string& name) {
  std::istringstream lines(page);
  std::string line;
  double sum = 0;
  bool found = false;
  while (std::getline(lines, line)) {
    if (line.rfind(name + "{", 0) != 0 && line.rfind(name + " ", 0) != 0) continue;
    sum += std::stod(line.substr(line.rfind(' ') + 1));
    found = true;
  }
  return found ? sum : std::nan("");
}

std::string StepLine(int step, double t, std::mt19937_64& rng) {
  std::uniform_real_distribution<double> u(0, 1);
  char line[256];
  std::snprintf(line, sizeof line,
                "worker_index: 0, step %d, train_loss: %.6f, total time cost = %.6f, step per second: %.6f, "
                "speed: %.6f\n",
                step, 10 * u(rng) / step + 1e-4, t, step / t, 3200 + 100 * u(rng));
  return line;
}

// grep -c PATTERN FILE: {wall s, cpu s, count}.
struct GrepRun {
  double wall = 0, cpu = 0;
  long count = 0;
};
GrepRun Grep(const std::vector<std::string>& args, const std::string& file) {
  char out_path[] = "/tmp/sidecar-bench-grep-XXXXXX";
  const int out = ::mkstemp(out_path);
  std::vector<std::string> argv = {"/usr/bin/grep"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.push_back(file);
  std::vector<char*> c;
  for (std::string& a : argv) c.push_back(a.data());
  c.push_back(nullptr);
  const auto start = Clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out, STDOUT_FILENO);
    ::execv(c[0], c.data());
    ::_exit(127);
  }
  int status = 0;
  rusage usage{};
  ::wait4(pid, &status, 0, &usage);
  GrepRun r;
  r.wall = Seconds(Clock::now() - start);
  r.cpu = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
          static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
  ::close(out);
  r.count = std::atol(ReadText(out_path).c_str());
  ::unlink(out_path);
  return r;
}

struct IngestRun {
  double wall = 0, cpu = 0, steps = 0;
  std::string hwm;
};
// The sidecar starts following a name that does not exist yet; once it serves, the prepared file is
// renamed to that name (atomically), and the clock runs from there until every line is counted:
// the ingest, not the process start. The file is renamed back for the next round.
IngestRun Ingest(const std::string& file, long lines, const TempDir& dir) {
  static int round = 0;
  ++round;
  const std::string followed = dir.path() + "/followed-" + std::to_string(round) + ".log";
  Child sidecar({SidecarBinary(), "agent", "--job=bench", "--role=worker", "--metrics-port=9",
                 "--listen=127.0.0.1:0", "--log-file=" + followed, "--main-process=off", "--log-poll-interval=10ms"},
                dir.path() + "/ingest-" + std::to_string(round) + ".out");
  const int port = sidecar.Logged("(port ");
  IngestRun r;
  if (port <= 0) return r;
  HttpConnection http("http://127.0.0.1:" + std::to_string(port));
  while (!http.Send("GET", "/readyz")) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const double cpu0 = sidecar.CpuSeconds();
  const auto start = Clock::now();
  if (std::rename(file.c_str(), followed.c_str()) != 0) std::perror("rename");
  const auto deadline = start + std::chrono::seconds(120);
  while (Clock::now() < deadline) {
    auto page = http.Send("GET", "/metrics");
    if (page && Sample(page->body, "fleet_sidecar_log_lines_total") >= static_cast<double>(lines)) {
      r.wall = Seconds(Clock::now() - start);
      r.cpu = sidecar.CpuSeconds() - cpu0;
      r.steps = Sample(page->body, "fleet_training_steps_total");
      r.hwm = sidecar.Status("VmHWM");
      std::rename(followed.c_str(), file.c_str());
      return r;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::fprintf(stderr, "the sidecar did not read the %ld lines within 120 s: %s\n", lines, ReadText(sidecar.out).c_str());
  std::exit(1);
}

double ThreadCpu() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

// The parsers alone, in this process, on the same lines: ParseStepLine (every field read the
// general way) against LineParser (template replay), single-thread CPU time, best of the rounds.
void BenchParsers(const std::string& file, int rounds) {
  const std::string text = ReadText(file);
  std::vector<std::string_view> lines;
  for (size_t p = 0; p < text.size();) {
    size_t e = text.find('\n', p);
    if (e == std::string::npos) e = text.size();
    lines.emplace_back(text.data() + p, e - p);
    p = e + 1;
  }
  double general = 1e9, templated = 1e9;
  size_t steps = 0;
  fleet::sidecar::StepRecord record;
  for (int round = 0; round < rounds; ++round) {
    double start = ThreadCpu();
    for (std::string_view line : lines) steps += fleet::sidecar::ParseStepLine(line, &record) == fleet::sidecar::ParseOutcome::kStep;
    general = std::min(general, ThreadCpu() - start);
    fleet::sidecar::LineParser parser;
    start = ThreadCpu();
    for (std::string_view line : lines) steps += parser.Parse(line, &record) == fleet::sidecar::ParseOutcome::kStep;
    templated = std::min(templated, ThreadCpu() - start);
  }
  const double n = static_cast<double>(lines.size());
  std::printf("  the parsers alone (in-process, CPU): general %.0f ns/line, template replay %.0f ns/line (%zu steps)\n",
              general * 1e9 / n, templated * 1e9 / n, steps / (2 * static_cast<size_t>(rounds)));
}

void BenchIngest(long lines, int rounds) {
  TempDir dir;
  const std::string file = dir.path() + "/workerlog.0";
  std::mt19937_64 rng(1);
  long step_lines = 0;
  {
    std::string buffer;
    std::FILE* out = std::fopen(file.c_str(), "w");
    double t = 0;
    for (long i = 1; i <= lines; ++i) {
      t += 0.01;
      if (i % 33 == 0) {
        buffer += "INFO 2026-11-21 04:40:00,123 reader.py:88] read images from 0, length: 15425, total: 61700\n";
      } else {
        buffer += StepLine(static_cast<int>(++step_lines), t, rng);
      }
      if (buffer.size() > (1 << 20)) {
        std::fwrite(buffer.data(), 1, buffer.size(), out);
        buffer.clear();
      }
    }
    std::fwrite(buffer.data(), 1, buffer.size(), out);
    std::fclose(out);
  }
  const double mb = static_cast<double>(std::ifstream(file, std::ios::ate | std::ios::binary).tellg()) / 1e6;
  std::printf("(a) log ingest: %ld lines (%ld step lines), %.0f MB, appearing under the followed name\n", lines,
              step_lines, mb);
  GrepRun best_regex{1e9, 1e9, 0}, best_fixed{1e9, 1e9, 0};
  IngestRun best_sidecar{1e9, 1e9, 0, ""};
  Grep({"-cE", "step ?[0-9]+"}, file);  // the page cache warm for everybody
  for (int round = 0; round < rounds; ++round) {
    const GrepRun regex = Grep({"-cE", "step ?[0-9]+"}, file);
    const GrepRun fixed = Grep({"-c", "step"}, file);
    const IngestRun sidecar = Ingest(file, lines, dir);
    if (regex.count != step_lines || fixed.count != step_lines) {
      std::fprintf(stderr, "grep counted %ld / %ld, not %ld\n", regex.count, fixed.count, step_lines);
    }
    if (sidecar.steps != static_cast<double>(step_lines)) {
      std::fprintf(stderr, "the sidecar counted %.0f steps, not %ld\n", sidecar.steps, step_lines);
    }
    best_regex.wall = std::min(best_regex.wall, regex.wall);
    best_regex.cpu = std::min(best_regex.cpu, regex.cpu);
    best_fixed.wall = std::min(best_fixed.wall, fixed.wall);
    best_fixed.cpu = std::min(best_fixed.cpu, fixed.cpu);
    best_sidecar.wall = std::min(best_sidecar.wall, sidecar.wall);
    best_sidecar.cpu = std::min(best_sidecar.cpu, sidecar.cpu);
    best_sidecar.hwm = sidecar.hwm;
  }
  const double n = static_cast<double>(lines) / 1e6;
  auto row = [&](const char* what, double wall, double cpu) {
    std::printf("  %-38s %6.2f M lines/s wall (%.3f s), %6.2f M lines/s CPU (%.3f s)\n", what, n / wall, wall,
                n / cpu, cpu);
  };
  row("fleet-sidecar agent (parse + metrics)", best_sidecar.wall, best_sidecar.cpu);
  std::printf("  %-38s (its peak RSS while reading: VmHWM %s)\n", "", best_sidecar.hwm.c_str());
  row("grep -cE 'step ?[0-9]+'", best_regex.wall, best_regex.cpu);
  row("grep -c step", best_fixed.wall, best_fixed.cpu);
  std::printf("  ratio sidecar / grep -cE: %.2f wall, %.2f CPU (target >= 0.5); sidecar / grep -c step: %.2f wall, "
              "%.2f CPU\n",
              best_regex.wall / best_sidecar.wall, best_regex.cpu / best_sidecar.cpu, best_fixed.wall / best_sidecar.wall,
              best_fixed.cpu / best_sidecar.cpu);
  BenchParsers(file, rounds);
}

void BenchScrape(int scrapes) {
  TempDir dir;
  Child sidecar({SidecarBinary(), "agent", "--job=bench", "--role=worker", "--pod=bench-worker-0",
                 "--metrics-port=9", "--listen=127.0.0.1:0", "--ranks=64", "--report-http=127.0.0.1:0",
                 "--main-process=off"},
                dir.path() + "/scrape.out");
  const int port = sidecar.Logged("(port ");
  const int report_port = sidecar.Logged("(report port ");
  if (port <= 0 || report_port <= 0) {
    std::fprintf(stderr, "the sidecar did not start: %s\n", ReadText(sidecar.out).c_str());
    return;
  }
  HttpConnection reports("http://127.0.0.1:" + std::to_string(report_port));
  for (int step = 1; step <= 3; ++step) {
    Json batch = Json::array();
    for (int rank = 0; rank < 64; ++rank) {
      batch.push_back({{"rank", rank}, {"step", step * 10}, {"epoch", 1}, {"loss", 1.0 / (step + rank)},
                       {"step_time", 0.01 * (1 + rank % 7)}, {"samples_per_second", 3200 + rank},
                       {"scalars", {{"acc1", 0.5}, {"acc5", 0.9}, {"lr", 0.1}}}});
    }
    auto r = reports.Send("POST", "/v1/report", batch.dump(), {{"Content-Type", "application/json"}});
    if (!r || r->status != 200) std::fprintf(stderr, "report failed\n");
  }
  HttpConnection http("http://127.0.0.1:" + std::to_string(port));
  std::vector<double> ms;
  size_t bytes = 0, series = 0;
  double cpu0 = 0;
  for (int i = 0; i < scrapes + 50; ++i) {
    if (i == 50) cpu0 = sidecar.CpuSeconds();
    const auto start = Clock::now();
    auto page = http.Send("GET", "/metrics");
    const double elapsed = Seconds(Clock::now() - start) * 1e3;
    if (!page || page->status != 200) {
      std::fprintf(stderr, "scrape failed\n");
      return;
    }
    if (i < 50) continue;  // warm-up
    ms.push_back(elapsed);
    bytes = page->body.size();
    if (series == 0) {
      std::istringstream lines(page->body);
      std::string line;
      while (std::getline(lines, line)) series += !line.empty() && line[0] != '#';
    }
  }
  const double cpu_ms = (sidecar.CpuSeconds() - cpu0) * 1e3 / scrapes;
  std::sort(ms.begin(), ms.end());
  auto pct = [&](double p) { return ms[std::min(ms.size() - 1, static_cast<size_t>(p * static_cast<double>(ms.size())))]; };
  std::printf("(b) /metrics of a pod with 64 ranks reporting: %zu series, %zu bytes; %d scrapes over one connection: "
              "p50 %.3f ms, p99 %.3f ms, max %.3f ms (target p99 <= 2 ms); the sidecar's CPU per scrape %.3f ms\n",
              series, bytes, scrapes, pct(0.5), pct(0.99), ms.back(), cpu_ms);
}

void Footprint(const char* what, Child& sidecar, int port, int seconds, const std::function<void(int)>& tick) {
  HttpConnection http("http://127.0.0.1:" + std::to_string(port));
  // Warm up: 2 s of load first.
  const auto warm = Clock::now() + std::chrono::seconds(2);
  int n = 0;
  auto next = Clock::now();
  while (Clock::now() < warm) {
    tick(++n);
    next += std::chrono::milliseconds(10);
    std::this_thread::sleep_until(next);
  }
  const double cpu0 = sidecar.CpuSeconds();
  const auto start = Clock::now();
  const auto end = start + std::chrono::seconds(seconds);
  auto next_scrape = start;
  while (Clock::now() < end) {
    tick(++n);
    if (Clock::now() >= next_scrape) {
      http.Send("GET", "/metrics");
      next_scrape += std::chrono::seconds(5);
    }
    next += std::chrono::milliseconds(10);
    std::this_thread::sleep_until(next);
  }
  const double wall = Seconds(Clock::now() - start);
  const double cpu = sidecar.CpuSeconds() - cpu0;
  auto page = http.Send("GET", "/metrics");
  std::printf("  %s: CPU %.2f%% of a core (%.2f s in %.1f s; target <= 1%%); VmRSS %s (RssAnon %s, RssFile %s), VmHWM %s "
              "(target <= 10 MiB); steps counted %.0f\n",
              what, 100 * cpu / wall, cpu, wall, sidecar.Status("VmRSS").c_str(), sidecar.Status("RssAnon").c_str(),
              sidecar.Status("RssFile").c_str(), sidecar.Status("VmHWM").c_str(),
              page ? Sample(page->body, "fleet_training_steps_total") : -1.0);
}

// Footprint while a trainer appends 100 step lines/s to <log_dir>/workerlog.0, which the sidecar
// follows (--log-dir).
void FootprintLogging(const char* what, Child& sidecar, int port, const std::string& log_dir, int seconds,
                      uint64_t seed) {
  std::FILE* log = std::fopen((log_dir + "/workerlog.0").c_str(), "a");
  std::mt19937_64 rng(seed);
  Footprint(what, sidecar, port, seconds, [&](int step) {
    const std::string line = StepLine(step, step * 0.01, rng);
    std::fwrite(line.data(), 1, line.size(), log);
    std::fflush(log);
  });
  std::fclose(log);
}

// A fake API server with what the gate of job "bench" reads and the pod it writes the condition
// on, and a kubeconfig for it: as in a pod when `pki` is given (https, the server verified against
// the cluster CA, a bearer token read from a file: what the in-cluster config is), else plain http.
struct BenchApi {
  BenchApi(const TempDir& dir, const std::string& name, const TestPki* pki)
      : fake(pki ? Args(*pki) : std::vector<std::string>{"--token", "bench-token"}) {
    if (!fake.ok()) return;
    const std::string token_file = dir.Write(name + ".token", "bench-token\n");
    const std::string ca = pki ? ", certificate-authority: '" + pki->Path("ca.crt") + "'" : "";
    kubeconfig = dir.Write(name + ".kubeconfig",
                           "apiVersion: v1\nkind: Config\ncurrent-context: fake\n"
                           "clusters: [{name: fake, cluster: {server: '" + fake.url() + "'" + ca + "}}]\n"
                           "contexts: [{name: fake, context: {cluster: fake, user: s}}]\n"
                           "users: [{name: s, user: {tokenFile: '" + token_file + "'}}]\n");
    HttpConnection api(fake.url());
    const std::vector<std::pair<std::string, std::string>> headers = {{"Content-Type", "application/json"},
                                                                      {"Authorization", "Bearer bench-token"}};
    api.Send("POST", "/api/v1/namespaces/default/configmaps",
             Json{{"apiVersion", "v1"}, {"kind", "ConfigMap"},
                  {"metadata", {{"name", "bench-endpoints"}, {"annotations", {{"fleet.paddlepaddle.org/run", "1"}}}}},
                  {"data", {{"PADDLE_TRAINER_ENDPOINTS", "10.0.0.1:6170"}}}}.dump(),
             headers);
    api.Send("POST", "/api/v1/namespaces/default/pods",
             Json{{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", {{"name", "bench-worker-0"}}},
                  {"spec", {{"containers", Json::array({{{"name", "main"}, {"image", "trainer"}}})}}}}.dump(),
             headers);
  }
  static std::vector<std::string> Args(const TestPki& pki) {
    std::vector<std::string> args = pki.ServerArgs();
    args.insert(args.end(), {"--token", "bench-token"});
    return args;
  }

  FakeApiServer fake;
  std::string kubeconfig;
};

// `fleet-sidecar gate` against `api`, following <dir>/<name>.log; `phases` once its gate is open.
void WithOpenGate(const TempDir& dir, const std::string& name, const BenchApi& api,
                  const std::function<void(Child& sidecar, int port, int udp_port, const std::string& log_dir)>& phases) {
  const std::string log_dir = dir.path() + "/" + name + ".log";
  dir.Write(name + ".log/workerlog.0", "");
  Child sidecar({SidecarBinary(), "gate", "--namespace=default", "--job=bench", "--pod=bench-worker-0",
                 "--role=worker", "--run=1", "--config-map=bench-endpoints", "--metrics-port=9",
                 "--listen=127.0.0.1:0", "--kubeconfig=" + api.kubeconfig, "--log-dir=" + log_dir,
                 "--report-udp=127.0.0.1:0"},
                dir.path() + "/" + name + ".out");
  const int port = sidecar.Logged("(port ");
  const int udp_port = sidecar.Logged("udp port ");
  if (port <= 0 || udp_port <= 0 || sidecar.Logged("gate open") < 0) {
    std::fprintf(stderr, "the sidecar did not open its gate: %s\n", ReadText(sidecar.out).c_str());
    return;
  }
  phases(sidecar, port, udp_port, log_dir);
}

void BenchFootprint(int seconds) {
  TestPki pki;
  if (!pki.ok()) {
    std::fprintf(stderr, "%s\n", pki.error().c_str());
    return;
  }
  TempDir dir;
  BenchApi https(dir, "https", &pki);
  BenchApi http(dir, "http", nullptr);
  if (!https.fake.ok() || !http.fake.ok()) {
    std::fprintf(stderr, "%s%s\n", https.fake.error().c_str(), http.fake.error().c_str());
    return;
  }
  std::printf("(c) footprint, %d s at 100 steps/s after a 2 s warm-up; the gate open against the fake API server as "
              "in a pod (https, the CA verified, a token file):\n",
              seconds);
  WithOpenGate(dir, "https", https, [&](Child& sidecar, int port, int udp_port, const std::string& log_dir) {
    FootprintLogging("trainer logging 100 step lines/s", sidecar, port, log_dir, seconds, 2);
    const int udp = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<uint16_t>(udp_port));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    Footprint("trainer pushing 100 UDP reports/s    ", sidecar, port, seconds, [&](int step) {
      const std::string report = "step=" + std::to_string(100000 + step) + " loss=0.25 samples=32 acc=0.5";
      ::sendto(udp, report.data(), report.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
    });
    ::close(udp);
    std::printf("    RSS by mapping: %s\n", sidecar.RssByMapping(8).c_str());
    // The TLS library's own pages (mbedTLS; OpenSSL in builds before it, measured with FLEET_SIDECAR).
    std::printf("    of which the TLS library: %s\n",
                sidecar.RssByMapping(8, {"libmbed", "libssl", "libcrypto"}).c_str());
  });
  // For comparison: what TLS costs (the same over plain http), and `fleet-sidecar agent` (no API).
  WithOpenGate(dir, "http", http, [&](Child& sidecar, int port, int, const std::string& log_dir) {
    FootprintLogging("over plain http, 100 step lines/s     ", sidecar, port, log_dir, seconds, 3);
  });
  const std::string agent_log_dir = dir.path() + "/agent.log";
  dir.Write("agent.log/workerlog.0", "");
  Child agent({SidecarBinary(), "agent", "--job=bench", "--role=worker", "--metrics-port=9", "--listen=127.0.0.1:0",
               "--log-dir=" + agent_log_dir, "--main-process=off"},
              dir.path() + "/agent.out");
  FootprintLogging("`agent` (no API), 100 step lines/s   ", agent, agent.Logged("(port "), agent_log_dir, seconds, 4);
}

}  // namespace

double LoadAverage() {
  double load = 0;
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = 0;
    std::fclose(f);
  }
  return load;
}

int main(int argc, char** argv) {
  const long lines = argc > 1 ? std::atol(argv[1]) : 2000000;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 3;
  const int scrapes = argc > 3 ? std::atoi(argv[3]) : 2000;
  const int seconds = argc > 4 ? std::atoi(argv[4]) : 20;
  ::signal(SIGPIPE, SIG_IGN);
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::printf("%ld CPUs, load average %.2f at the start\n", ::sysconf(_SC_NPROCESSORS_ONLN), LoadAverage());
  BenchIngest(lines, rounds);
  BenchScrape(scrapes);
  BenchFootprint(seconds);
  std::printf("load average %.2f at the end\n", LoadAverage());
  return 0;
}
