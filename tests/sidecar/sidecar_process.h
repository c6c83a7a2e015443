// Test support for running the real fleet-sidecar binary: a child process with its stdout and
// stderr in files, plain TCP listeners to stand in for parameter servers, and polling with
// deadlines instead of sleeps.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "fake_apiserver_fixture.h"

namespace fleet::sidecar::testing {

// Polls `condition` every 20 ms until it holds (true) or `timeout` passes (false).
bool Eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout = std::chrono::seconds(10));

// A TCP socket bound to 127.0.0.1 on a free port. Until Listen(), connections to the port are
// refused (the port stays reserved); after it, they are accepted by the kernel (never accept()ed).
class TcpPort {
 public:
  TcpPort();
  ~TcpPort();
  TcpPort(const TcpPort&) = delete;
  TcpPort& operator=(const TcpPort&) = delete;
  int port() const { return port_; }
  bool Listen();

 private:
  int fd_ = -1;
  int port_ = 0;
};

class SidecarProcess {
 public:
  // Starts the binary with `args` (argv[1..]); stdout and stderr go to files under `dir`. `wrapper`:
  // a command that execs the binary in its own process (e.g. setpriv and its flags), run first.
  SidecarProcess(const std::vector<std::string>& args, const std::string& dir,
                 const std::vector<std::string>& wrapper = {});
  ~SidecarProcess();  // SIGKILL if still running
  SidecarProcess(const SidecarProcess&) = delete;
  SidecarProcess& operator=(const SidecarProcess&) = delete;

  bool started() const { return pid_ > 0; }
  pid_t pid() const { return pid_; }
  // The exit status (128 + N for death by signal N), or nullopt if still running after `timeout`.
  std::optional<int> WaitExit(std::chrono::milliseconds timeout);
  bool Running();
  bool Signal(int signal);
  std::string Stdout() const;
  std::string Stderr() const;
  // The HTTP port, from the "(port N)" the sidecar logs when started with --listen=HOST:0; -1 when
  // it does not appear within `timeout` (or the process exits).
  int WaitForPort(std::chrono::milliseconds timeout = std::chrono::seconds(10));
  // GET `path` on the HTTP port (WaitForPort first); nullopt on a transport failure.
  std::optional<kube::testing::HttpConnection::Response> Get(const std::string& path);

 private:
  pid_t pid_ = -1;
  std::optional<int> exit_status_;
  std::string stdout_path_;
  std::string stderr_path_;
  int port_ = -1;
};

// The value of the metric sample whose line starts with `name{` in a Prometheus text page; NaN
// when absent.
double MetricValue(const std::string& page, const std::string& name);

struct CommandResult {
  int status = -1;          // exit status (128 + N for signal N); -1 when it ran past the timeout
  std::string output;       // stdout and stderr
};
// Runs `argv` (no shell) with `input` on its stdin; nullopt when it cannot be started.
std::optional<CommandResult> RunCommand(const std::vector<std::string>& argv, const std::string& input = "",
                                        std::chrono::milliseconds timeout = std::chrono::seconds(20));
// A tool from PATH (or /usr/bin): its path, "" when absent.
std::string FindTool(const std::string& name);
// The source tree: $FLEET_SOURCE_DIR (ctest sets it), else the one this was built from.
std::string SourceDir();
// `promtool check metrics` over a page; nullopt when promtool is not installed.
std::optional<CommandResult> PromtoolCheckMetrics(const std::string& page);

}  // namespace fleet::sidecar::testing
