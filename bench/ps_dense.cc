// Parameter server, dense push + pull (issue 6, section 4): T trainers each push a gradient of the
// whole table and pull the table back, over and over, against S fleet-ps-server processes (async
// mode, SGD applied on arrival): PushDense then PullDense ("PS"), and PushPullDense, both in one
// round trip ("fused"). The baseline moves the same bytes the same way over plain TCP in the same
// run: S echo-server processes; each trainer sends its slice to every server (server keeps it),
// waits for the acks, asks for the slices back and reads them, all servers at once (poll).
// Rounds alternate TCP, PS and fused; the medians are compared. Target: PS >= 0.5 x TCP.
//
// usage: ps_dense [--trainers 4] [--servers 2] [--seconds 2] [--rounds 3] [--ps-only | --tcp-only]
//                 [--server PATH (the fleet-ps-server to run; default: the one built with it)]
//                 [KiB per table... = 64 1024 4096 16384]
#include <fcntl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "fleet/ps/client.h"
#include "ps_bench_util.h"

#ifndef FLEET_PS_SERVER_PATH
#define FLEET_PS_SERVER_PATH "fleet-ps-server"
#endif

namespace {

using namespace fleet::ps;
using namespace fleet::ps::bench;

// ------------------------------------------------------------------------------ TCP baseline
// Frame: 1 byte op ('P' push: 8-byte length then that many bytes, answered by 1 byte; 'G' get:
// 8-byte length, answered by that many bytes of what was pushed last).
bool ReadAll(int fd, void* data, size_t n) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = ::read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool WriteAll(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

[[noreturn]] void EchoServer(int listener) {
  for (;;) {
    const int fd = ::accept(listener, nullptr, nullptr);
    if (fd < 0) continue;
    std::thread([fd] {
      std::vector<char> buffer;
      for (;;) {
        char op;
        uint64_t n;
        if (!ReadAll(fd, &op, 1) || !ReadAll(fd, &n, 8)) break;
        if (buffer.size() < n) buffer.resize(n);
        if (op == 'P') {
          if (!ReadAll(fd, buffer.data(), n) || !WriteAll(fd, "k", 1)) break;
        } else if (!WriteAll(fd, buffer.data(), n)) {
          break;
        }
      }
      ::close(fd);
    }).detach();
  }
}

std::vector<pid_t> StartEchoServers(int count, std::vector<int>* ports) {
  std::vector<pid_t> pids;
  for (int i = 0; i < count; ++i) {
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    ::listen(listener, 64);
    socklen_t len = sizeof(addr);
    ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len);
    ports->push_back(ntohs(addr.sin_port));
    const pid_t pid = ::fork();
    if (pid == 0) EchoServer(listener);
    ::close(listener);
    pids.push_back(pid);
  }
  return pids;
}

int ConnectTcp(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) return -1;
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

// Sends out[i] on fds[i] and reads in_sizes[i] bytes into in[i], all sockets at once.
bool Exchange(const std::vector<int>& fds, const std::vector<std::pair<const char*, size_t>>& out,
              const std::vector<std::pair<char*, size_t>>& in) {
  std::vector<size_t> sent(fds.size(), 0), got(fds.size(), 0);
  for (;;) {
    std::vector<pollfd> polls;
    for (size_t i = 0; i < fds.size(); ++i) {
      short events = 0;
      if (sent[i] < out[i].second) events |= POLLOUT;
      if (got[i] < in[i].second) events |= POLLIN;
      if (events) polls.push_back({fds[i], events, 0});
    }
    if (polls.empty()) return true;
    if (::poll(polls.data(), polls.size(), 10000) <= 0) return false;
    for (const pollfd& p : polls) {
      const size_t i = static_cast<size_t>(std::find(fds.begin(), fds.end(), p.fd) - fds.begin());
      if (p.revents & POLLOUT) {
        const ssize_t w = ::send(p.fd, out[i].first + sent[i], out[i].second - sent[i], MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w > 0) sent[i] += static_cast<size_t>(w);
      }
      if (p.revents & (POLLIN | POLLHUP | POLLERR)) {
        const ssize_t r = ::recv(p.fd, in[i].first + got[i], in[i].second - got[i], MSG_DONTWAIT);
        if (r == 0) return false;
        if (r > 0) got[i] += static_cast<size_t>(r);
      }
    }
  }
}

struct Run {
  double seconds = 0;
  long steps = 0;
  double cpu = 0;  // CPU seconds of the trainers' process and the servers, during the run
};

double SelfCpuSeconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

double CpuOf(const std::vector<pid_t>& servers) {
  double cpu = SelfCpuSeconds();
  for (pid_t p : servers) cpu += CpuSeconds(p);
  return cpu;
}

// T trainers for `seconds` after two warm-up steps each; `servers` are counted in the CPU time.
template <typename Trainer>
Run Measure(int trainers, double seconds, const std::vector<pid_t>& servers, const Trainer& make_step) {
  std::atomic<long> steps{0};
  std::atomic<bool> stop{false};
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < trainers; ++t) {
    threads.emplace_back([&, t] {
      auto step = make_step(t);
      step();
      step();
      ready++;
      while (!go) std::this_thread::yield();
      long mine = 0;
      while (!stop) {
        if (!step()) {
          std::fprintf(stderr, "a step failed\n");
          std::exit(1);
        }
        ++mine;
      }
      steps += mine;
    });
  }
  while (ready < trainers) std::this_thread::yield();
  const double cpu_before = CpuOf(servers);
  const auto start = Clock::now();
  go = true;
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));  // the measured interval
  stop = true;
  for (auto& th : threads) th.join();
  Run r;
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  r.cpu = CpuOf(servers) - cpu_before;
  r.steps = steps;
  return r;
}

struct Options {
  int trainers = 4, servers = 2, rounds = 3;
  bool run_tcp = true, run_ps = true;  // --ps-only / --tcp-only: for profiling one side
  double seconds = 2;
  std::string server_binary = FLEET_PS_SERVER_PATH;  // --server: compare builds in one session
  std::vector<size_t> sizes_kib;
};

Options ParseArgs(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--trainers" && i + 1 < argc) o.trainers = std::atoi(argv[++i]);
    else if (a == "--servers" && i + 1 < argc) o.servers = std::atoi(argv[++i]);
    else if (a == "--seconds" && i + 1 < argc) o.seconds = std::atof(argv[++i]);
    else if (a == "--rounds" && i + 1 < argc) o.rounds = std::atoi(argv[++i]);
    else if (a == "--server" && i + 1 < argc) o.server_binary = argv[++i];
    else if (a == "--ps-only") o.run_tcp = false;
    else if (a == "--tcp-only") o.run_ps = false;
    else o.sizes_kib.push_back(static_cast<size_t>(std::atol(a.c_str())));
  }
  if (o.sizes_kib.empty()) o.sizes_kib = {64, 1024, 4096, 16384};
  return o;
}

// One TCP baseline step of a trainer: its slice of `n` floats to every echo server, the acks, then
// the slices back.
auto TcpStep(std::vector<int> fds, size_t n, int servers) {
  auto data = std::make_shared<std::vector<float>>(n, 1.0f);
  auto back = std::make_shared<std::vector<float>>(n);
  return [fds, data, back, n, servers] {
    std::vector<std::vector<char>> push(fds.size()), get(fds.size());
    std::vector<std::pair<const char*, size_t>> out(fds.size()), none_out(fds.size(), {nullptr, 0});
    std::vector<std::pair<char*, size_t>> in(fds.size());
    std::vector<char> acks(fds.size());
    for (size_t s = 0; s < fds.size(); ++s) {
      const ShardRange r = DenseShardRange(n, servers, static_cast<int>(s));
      const uint64_t len = r.size() * sizeof(float);
      push[s].resize(9 + len);
      push[s][0] = 'P';
      std::memcpy(push[s].data() + 1, &len, 8);
      std::memcpy(push[s].data() + 9, data->data() + r.begin, len);
      out[s] = {push[s].data(), push[s].size()};
      in[s] = {&acks[s], 1};
    }
    if (!Exchange(fds, out, in)) return false;
    for (size_t s = 0; s < fds.size(); ++s) {
      const ShardRange r = DenseShardRange(n, servers, static_cast<int>(s));
      const uint64_t len = r.size() * sizeof(float);
      get[s].resize(9);
      get[s][0] = 'G';
      std::memcpy(get[s].data() + 1, &len, 8);
      out[s] = {get[s].data(), 9};
      in[s] = {reinterpret_cast<char*>(back->data() + r.begin), len};
    }
    return Exchange(fds, out, in);
  };
}

// One PS step of a trainer: PushDense then PullDense, or PushPullDense when `fused`.
auto PsStep(PsClient* c, size_t n, uint32_t table_id, bool fused) {
  auto g = std::make_shared<std::vector<float>>(n, 1.0f);
  auto w = std::make_shared<std::vector<float>>(n);
  return [c, g, w, n, table_id, fused] {
    if (fused) return c->PushPullDense(table_id, g->data(), w->data(), n).ok();
    return c->PushDense(table_id, g->data(), n).ok() && c->PullDense(table_id, w->data(), n).ok();
  };
}

// The processes and connections of a run: echo servers with a socket per trainer and server, PS
// servers with a client per trainer.
struct Fleet {
  std::vector<pid_t> echo, ps;
  std::vector<std::unique_ptr<PsClient>> clients;
  std::vector<std::vector<int>> tcp;   // [trainer][server]
};

bool StartFleet(const Options& o, Fleet& f) {
  // Every server process first: none of them inherits gRPC state.
  std::vector<int> tcp_ports;
  f.echo = StartEchoServers(o.servers, &tcp_ports);
  std::vector<std::string> endpoints;
  f.ps = StartPsServers(o.server_binary, o.servers, o.trainers, &endpoints);
  if (!ConnectTrainers(endpoints, o.trainers, &f.clients)) return false;
  f.tcp.resize(static_cast<size_t>(o.trainers));
  for (auto& fds : f.tcp) {
    for (int port : tcp_ports) fds.push_back(ConnectTcp(port));
  }
  return true;
}

void StopFleet(Fleet& f) {
  for (auto& fds : f.tcp) {
    for (int fd : fds) ::close(fd);
  }
  f.clients.clear();
  StopProcesses(f.ps);
  StopProcesses(f.echo);
}

void PrintHeader(const Options& o) {
  std::printf("dense push+pull: %d trainers, %d servers, %.1f s per run, %d rounds (median); loopback, %u CPUs\n",
              o.trainers, o.servers, o.seconds, o.rounds, std::thread::hardware_concurrency());
  std::printf("MB/s: payload bytes pushed and pulled per second, all trainers; CPU s/GB: CPU seconds of trainers and\n"
              "servers together per GB moved (what the rate would follow on an idle machine with cores to spare).\n"
              "PS: PushDense then PullDense; fused: PushPullDense (one round trip)\n");
  std::printf("%8s %9s %9s %7s %9s %7s %8s %8s %7s %8s %7s\n", "table", "TCP MB/s", "PS MB/s", "PS/TCP", "fused",
              "f/TCP", "TCP s/GB", "PS s/GB", "TCP/PS", "fused", "TCP/f");
}

// Per variant (0 TCP, 1 PS, 2 fused): rates (MB/s) and CPU costs (s/GB) of every round.
struct Samples {
  double bytes_per_step = 0;
  std::vector<double> rates[3], cpu[3];
  void Record(int variant, const Run& r) {
    const double gb = static_cast<double>(r.steps) * bytes_per_step / 1e9;
    rates[variant].push_back(gb > 0 ? gb * 1e3 / r.seconds : 0);
    cpu[variant].push_back(gb > 0 ? r.cpu / gb : 0);
  }
};

// Rounds alternating TCP, PS and fused on a table of `n` floats.
Samples MeasureTable(const Options& o, const Fleet& f, size_t n, uint32_t table_id) {
  Samples samples;
  samples.bytes_per_step = 2.0 * static_cast<double>(n * sizeof(float));
  for (int round = 0; round < o.rounds; ++round) {
    if (o.run_tcp) {
      samples.Record(0, Measure(o.trainers, o.seconds, f.echo, [&](int trainer) {
        return TcpStep(f.tcp[static_cast<size_t>(trainer)], n, o.servers);
      }));
    }
    for (const bool fused : {false, true}) {
      if (!o.run_ps) break;
      samples.Record(fused ? 2 : 1, Measure(o.trainers, o.seconds, f.ps, [&](int trainer) {
        return PsStep(f.clients[static_cast<size_t>(trainer)].get(), n, table_id, fused);
      }));
    }
  }
  return samples;
}

void PrintRow(size_t kib, const Samples& s) {
  const double tcp_mbs = Median(s.rates[0]), ps_mbs = Median(s.rates[1]), fused_mbs = Median(s.rates[2]);
  const double tcp_c = Median(s.cpu[0]), ps_c = Median(s.cpu[1]), fused_c = Median(s.cpu[2]);
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0; };
  char label[32];
  std::snprintf(label, sizeof(label), kib >= 1024 ? "%zu MiB" : "%zu KiB", kib >= 1024 ? kib / 1024 : kib);
  std::printf("%8s %9.1f %9.1f %7.2f %9.1f %7.2f %8.3f %8.3f %7.2f %8.3f %7.2f\n", label, tcp_mbs, ps_mbs,
              ratio(ps_mbs, tcp_mbs), fused_mbs, ratio(fused_mbs, tcp_mbs), tcp_c, ps_c, ratio(tcp_c, ps_c), fused_c,
              ratio(tcp_c, fused_c));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = ParseArgs(argc, argv);
  Fleet f;
  if (!StartFleet(o, f)) return 1;
  PrintHeader(o);
  uint32_t table_id = 0;
  for (size_t kib : o.sizes_kib) {
    const size_t n = kib * 1024 / sizeof(float);
    ++table_id;
    for (auto& c : f.clients) {
      if (Status s = c->CreateTable(TableConfig::Dense(table_id, n, OptimizerConfig::Sgd(0.0f))); !s.ok()) {
        std::fprintf(stderr, "%s\n", s.ToString().c_str());
        return 1;
      }
    }
    PrintRow(kib, MeasureTable(o, f, n, table_id));
  }
  StopFleet(f);
  return 0;
}
