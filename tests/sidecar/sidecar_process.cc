#include "sidecar_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>
#include <thread>

#ifndef FLEET_SOURCE_DIR_DEFAULT
#error "FLEET_SOURCE_DIR_DEFAULT must name the source tree"
#endif
#ifndef FLEET_SIDECAR_BINARY
#error "FLEET_SIDECAR_BINARY must name the fleet-sidecar executable"
#endif

namespace fleet::sidecar::testing {
using kube::testing::ReadFile;

bool Eventually(const std::function<bool()>& condition, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (condition()) return true;
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// ---- TcpPort ----

TcpPort::TcpPort() {
  fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  if (fd_ < 0 || ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
    return;
  }
  port_ = ntohs(addr.sin_port);
}

TcpPort::~TcpPort() {
  if (fd_ >= 0) ::close(fd_);
}

bool TcpPort::Listen() { return fd_ >= 0 && ::listen(fd_, 64) == 0; }

// ---- SidecarProcess ----

SidecarProcess::SidecarProcess(const std::vector<std::string>& args, const std::string& dir,
                               const std::vector<std::string>& wrapper) {
  static int counter = 0;
  const std::string tag = std::to_string(::getpid()) + "-" + std::to_string(++counter);
  stdout_path_ = dir + "/sidecar-" + tag + ".out";
  stderr_path_ = dir + "/sidecar-" + tag + ".err";
  std::vector<std::string> argv_strings = wrapper;
  argv_strings.push_back(FLEET_SIDECAR_BINARY);
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) {  // child: async-signal-safe calls only
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    const int out = ::open(stdout_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int err = ::open(stderr_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (in < 0 || out < 0 || err < 0) ::_exit(127);
    ::dup2(in, STDIN_FILENO);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(err, STDERR_FILENO);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
}

SidecarProcess::~SidecarProcess() {
  if (pid_ > 0 && !exit_status_) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
}

std::optional<int> SidecarProcess::WaitExit(std::chrono::milliseconds timeout) {
  if (exit_status_ || pid_ <= 0) return exit_status_;
  Eventually(
      [&] {
        int status = 0;
        const pid_t r = ::waitpid(pid_, &status, WNOHANG);
        if (r != pid_) return false;
        exit_status_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return true;
      },
      timeout);
  return exit_status_;
}

bool SidecarProcess::Running() { return pid_ > 0 && !WaitExit(std::chrono::milliseconds(0)); }

bool SidecarProcess::Signal(int signal) { return pid_ > 0 && !exit_status_ && ::kill(pid_, signal) == 0; }

std::string SidecarProcess::Stdout() const { return ReadFile(stdout_path_); }
std::string SidecarProcess::Stderr() const { return ReadFile(stderr_path_); }

int SidecarProcess::WaitForPort(std::chrono::milliseconds timeout) {
  if (port_ > 0) return port_;
  static const std::regex port_re(R"(\(port ([0-9]+)\))");
  Eventually(
      [&] {
        std::smatch m;
        const std::string err = Stderr();
        if (std::regex_search(err, m, port_re)) {
          port_ = std::stoi(m[1].str());
          return true;
        }
        return !Running();
      },
      timeout);
  return port_;
}

std::optional<kube::testing::HttpConnection::Response> SidecarProcess::Get(const std::string& path) {
  if (WaitForPort() <= 0) return std::nullopt;
  kube::testing::HttpConnection http("http://127.0.0.1:" + std::to_string(port_));
  return http.Send("GET", path);
}

double MetricValue(const std::string& page, const std::string& name) {
  std::istringstream lines(page);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind(name + "{", 0) != 0) continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    return std::stod(line.substr(space + 1));
  }
  return std::numeric_limits<double>::quiet_NaN();
}

std::optional<CommandResult> RunCommand(const std::vector<std::string>& argv, const std::string& input,
                                        std::chrono::milliseconds timeout) {
  char in_path[] = "/tmp/fleet-cmd-in-XXXXXX";
  char out_path[] = "/tmp/fleet-cmd-out-XXXXXX";
  const int in_fd = ::mkstemp(in_path);
  const int out_fd = ::mkstemp(out_path);
  if (in_fd < 0 || out_fd < 0) return std::nullopt;
  for (size_t done = 0; done < input.size();) {
    const ssize_t n = ::write(in_fd, input.data() + done, input.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::lseek(in_fd, 0, SEEK_SET);
  std::vector<std::string> copy = argv;
  std::vector<char*> args;
  for (std::string& a : copy) args.push_back(a.data());
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(in_fd, STDIN_FILENO);
    ::dup2(out_fd, STDOUT_FILENO);
    ::dup2(out_fd, STDERR_FILENO);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  ::close(in_fd);
  ::close(out_fd);
  ::unlink(in_path);
  CommandResult result;
  if (pid > 0) {
    const bool ended = Eventually(
        [&] {
          int status = 0;
          if (::waitpid(pid, &status, WNOHANG) != pid) return false;
          result.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
          return true;
        },
        timeout);
    if (!ended) {
      ::kill(pid, SIGKILL);
      int status = 0;
      ::waitpid(pid, &status, 0);
      result.status = -1;
    }
  }
  result.output = ReadFile(out_path);
  ::unlink(out_path);
  if (pid < 0) return std::nullopt;
  return result;
}

std::string FindTool(const std::string& name) {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH")) {
    std::stringstream s(path);
    std::string dir;
    while (std::getline(s, dir, ':')) dirs.push_back(dir);
  }
  dirs.push_back("/usr/bin");
  for (const std::string& dir : dirs) {
    const std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

std::string SourceDir() {
  const char* dir = std::getenv("FLEET_SOURCE_DIR");
  return dir && *dir ? dir : FLEET_SOURCE_DIR_DEFAULT;
}

std::optional<CommandResult> PromtoolCheckMetrics(const std::string& page) {
  const std::string promtool = FindTool("promtool");
  if (promtool.empty()) return std::nullopt;
  return RunCommand({promtool, "check", "metrics"}, page);
}

}  // namespace fleet::sidecar::testing
