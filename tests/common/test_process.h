// Small helpers shared by tests that run child processes (fleetrun, fleet-ps-server) and read
// their output: starting and waiting for a child, the outcome of a run, reading a whole file, a
// free loopback port, and the example jobs' Paddle step lines.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <regex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "fleet/launcher/host.h"

namespace fleet::test {

// How a child process ended: exit code (128 + signal if killed), its output and how long it ran.
struct Outcome {
  int code = -1;
  std::string out;
  double seconds = 0;
};

// The whole content of `path` ("" if it cannot be read).
inline std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// `n` distinct TCP ports that were free a moment ago: fleetrun's own FindFreePorts (link
// fleet::launcher). An empty list, and a test failure, when there are none.
inline std::vector<int> FreePorts(int n) {
  auto ports = fleet::launcher::FindFreePorts(n);
  if (!ports.ok()) {
    ADD_FAILURE() << ports.error();
    return {};
  }
  return *ports;
}

inline int FreePort() {
  const std::vector<int> ports = FreePorts(1);
  return ports.empty() ? 0 : ports[0];
}

// Starts argv in `dir` with `env` added and stdout+stderr in `out`; returns the pid.
inline pid_t Spawn(const std::vector<std::string>& argv, const std::vector<std::pair<std::string, std::string>>& env,
            const std::filesystem::path& dir, const std::filesystem::path& out) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::chdir(dir.c_str()) != 0) ::_exit(126);
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
    std::vector<std::string> args = argv;
    std::vector<char*> raw;
    for (std::string& a : args) raw.push_back(a.data());
    raw.push_back(nullptr);
    ::execvp(raw[0], raw.data());
    ::_exit(127);
  }
  return pid;
}

// Polls the child until it exits; SIGTERM after `timeout` s, SIGKILL 15 s later.
inline int WaitChild(pid_t pid, double timeout, double* seconds) {
  const auto start = std::chrono::steady_clock::now();
  int status = 0;
  bool killed = false;
  while (::waitpid(pid, &status, WNOHANG) != pid) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!killed && elapsed > timeout) {
      ::kill(pid, SIGTERM);
      killed = true;
    }
    if (elapsed > timeout + 15) ::kill(pid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling the child, not waiting on time
  }
  if (seconds) *seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

inline double FinalLoss(const std::string& output, int worker) {  // "final train_loss: x", -1 if absent
  const std::regex pattern("worker_index: " + std::to_string(worker) + ", final train_loss: ([0-9.eE+-]+)");
  std::smatch match;
  if (!std::regex_search(output, match, pattern)) return -1;
  return std::stod(match[1].str());
}

// (step, loss) of a worker's Paddle step lines ("worker_index: W, stepN, train_loss: L, ...").
inline std::vector<std::pair<int, double>> StepLines(const std::string& output, int worker) {
  const std::regex line("worker_index: " + std::to_string(worker) +
                        R"(, step(\d+), train_loss: ([0-9.]+), total time cost = [0-9.]+, step per second: [0-9.]+, speed: [0-9.]+\n)");
  std::vector<std::pair<int, double>> out;
  for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it) {
    out.emplace_back(std::stoi((*it)[1].str()), std::stod((*it)[2].str()));
  }
  return out;
}

}  // namespace fleet::test
