#include "fleet/launcher/supervisor.h"

#include <dirent.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "fleet/runtime/env_files.h"

namespace fleet::launcher {
namespace {

using Clock = std::chrono::steady_clock;

// 0, or the errno of the write that failed. A closed terminal must not stop the job (the log
// file still has it all), nor a full log disk (the terminal still shows it): callers only report.
int WriteAll(int fd, const char* data, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return errno;
    if (n == 0) return EIO;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return 0;
}

// Which of `endpoints` accept a TCP connection within `wait_ms`: non-blocking connects, all at
// once, so that an address nobody answers costs `wait_ms` and not the kernel's connect timeout.
std::vector<bool> AcceptingConnections(const std::vector<Endpoint>& endpoints, int wait_ms) {
  std::vector<bool> accepting(endpoints.size(), false);
  std::vector<pollfd> fds;
  std::vector<size_t> which;
  for (size_t i = 0; i < endpoints.size(); ++i) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    if (::getaddrinfo(endpoints[i].host.c_str(), std::to_string(endpoints[i].port).c_str(), &hints, &found) != 0) continue;
    const int fd = ::socket(found->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    const int r = fd < 0 ? -1 : ::connect(fd, found->ai_addr, found->ai_addrlen);
    const int error = errno;
    ::freeaddrinfo(found);
    if (fd >= 0 && r != 0 && error == EINPROGRESS) {
      fds.push_back({fd, POLLOUT, 0});
      which.push_back(i);
      continue;
    }
    accepting[i] = fd >= 0 && r == 0;
    if (fd >= 0) ::close(fd);
  }
  const auto deadline = Clock::now() + std::chrono::milliseconds(wait_ms);
  size_t open = fds.size();
  while (open > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0 || ::poll(fds.data(), fds.size(), static_cast<int>(left)) < 0) break;
    for (size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].fd < 0 || fds[k].revents == 0) continue;
      int error = 0;
      socklen_t len = sizeof error;
      accepting[which[k]] = ::getsockopt(fds[k].fd, SOL_SOCKET, SO_ERROR, &error, &len) == 0 && error == 0;
      ::close(fds[k].fd);
      fds[k].fd = -1;   // poll ignores negative descriptors
      --open;
    }
  }
  for (const pollfd& p : fds) {
    if (p.fd >= 0) ::close(p.fd);
  }
  return accepting;
}

std::string DescribeStatus(int status) {
  if (WIFSIGNALED(status)) {
    const char* name = ::sigabbrev_np(WTERMSIG(status));
    return "was killed by signal " + std::to_string(WTERMSIG(status)) + (name ? std::string(" (SIG") + name + ")" : "");
  }
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

// The shell convention, which the operator's ExitCode restart policy reads: 128+signal.
int ExitCodeOf(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

struct Child {
  const LocalProcess* spec = nullptr;
  pid_t pid = -1;
  bool running = false;
  int status = 0;
};

class Supervisor {
 public:
  Supervisor(const LaunchPlan& plan, const EnvMap& base_env, const SupervisorOptions& options)
      : plan_(plan), base_env_(WithoutEnvFileValues(base_env)), options_(options) {}

  int Run();

 private:
  bool StartAll();
  bool Start(const LocalProcess& spec, Child& child);
  void Reap();
  void OnExit(Child& child, int status);
  void BeginStop(int exit_code, bool immediate);
  void SignalGroups(int sig);
  void CopyEcho(bool drain);
  bool AnyRunning() const;
  void KillAdoptedOrphans();
  void Tick();
  void WatchServers();
  void CheckLogSpace();
  void LogsLost(const std::string& why);
  void Say(const std::string& message) {
    const std::string line = "fleetrun: " + message + "\n";
    WriteAll(options_.messages_fd, line.data(), line.size());
  }
  std::string LogPath(const LocalProcess& spec) const { return plan_.log_dir + "/" + spec.log_file; }

  const LaunchPlan& plan_;
  const EnvMap base_env_;
  const SupervisorOptions options_;
  std::vector<Child> children_;
  int signal_fd_ = -1;
  int echo_fd_ = -1;       // read end of local worker 0's output pipe
  int echo_log_fd_ = -1;   // worker 0's log file, written by us
  bool stopping_ = false;
  int exit_code_ = 0;
  Clock::time_point kill_deadline_ = Clock::time_point::max();
  // PS jobs: the servers that have not accepted a connection yet, and until when they may take.
  std::vector<Endpoint> waiting_for_servers_;
  Clock::time_point servers_deadline_ = Clock::time_point::max();
  std::string echo_log_path_;
  std::string lost_logs_;   // why logs are incomplete, once noticed
};

// What a child execs, prepared before fork(): after it, only async-signal-safe calls. Filled in
// place (argv and envp point into the strings).
struct ExecImage {
  std::vector<std::string> env_strings;
  std::vector<std::string> argv_strings;
  std::vector<char*> envp;
  std::vector<char*> argv;
  std::string exec_failed;
};

void PrepareExec(const EnvMap& base_env, const LocalProcess& spec, ExecImage& image) {
  EnvMap env = base_env;
  env.erase("http_proxy");  // Paddle's launcher drops these: trainers talk to peers directly
  env.erase("https_proxy");
  for (const auto& [name, value] : spec.env) env[name] = value;
  image.env_strings.reserve(env.size());
  for (const auto& [name, value] : env) image.env_strings.push_back(name + "=" + value);
  for (std::string& s : image.env_strings) image.envp.push_back(s.data());
  image.envp.push_back(nullptr);
  image.argv_strings = spec.argv;
  for (std::string& s : image.argv_strings) image.argv.push_back(s.data());
  image.argv.push_back(nullptr);
  image.exec_failed = "fleetrun: cannot execute " + spec.argv.front() + ": ";
}

// In the child, after fork(): its own process group, dying with fleetrun, default signals, stdin
// from /dev/null and stdout/stderr to `out_fd`; then the program, or a line saying why not.
[[noreturn]] void ExecChild(ExecImage& image, int null_fd, int out_fd, pid_t parent) {
  ::setpgid(0, 0);
  // Die with fleetrun even if it is SIGKILLed; the check closes the race with an early death.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);
  sigset_t empty;
  sigemptyset(&empty);
  ::sigprocmask(SIG_SETMASK, &empty, nullptr);
  ::signal(SIGPIPE, SIG_DFL);  // ignored dispositions survive exec; the child gets defaults
  if (null_fd >= 0) ::dup2(null_fd, 0);
  ::dup2(out_fd, 1);
  ::dup2(out_fd, 2);
  ::execvpe(image.argv[0], image.argv.data(), image.envp.data());
  // strerrordesc_np reads a constant table (no locale, no lock): safe after fork() in a process
  // with other threads (elastic fleetrun's etcd I/O). The line goes to the log.
  const char* reason = ::strerrordesc_np(errno);
  if (!reason) reason = "unknown error";
  (void)!::write(2, image.exec_failed.data(), image.exec_failed.size());
  (void)!::write(2, reason, std::strlen(reason));
  (void)!::write(2, "\n", 1);
  ::_exit(127);
}

bool Supervisor::Start(const LocalProcess& spec, Child& child) {
  ExecImage image;
  PrepareExec(base_env_, spec, image);
  const std::string log_path = LogPath(spec);
  int log_fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) {
    Say("cannot open " + log_path + ": " + std::strerror(errno));
    return false;
  }
  int out_fd = log_fd;
  int pipe_fds[2] = {-1, -1};
  if (spec.echo_to_terminal) {
    if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
      Say(std::string("cannot create a pipe: ") + std::strerror(errno));
      ::close(log_fd);
      return false;
    }
    out_fd = pipe_fds[1];
  }
  int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) ExecChild(image, null_fd, out_fd, parent);
  if (null_fd >= 0) ::close(null_fd);
  if (pid < 0) {
    Say(std::string("fork failed: ") + std::strerror(errno));
    ::close(log_fd);
    if (spec.echo_to_terminal) {
      ::close(pipe_fds[0]);
      ::close(pipe_fds[1]);
    }
    return false;
  }
  ::setpgid(pid, pid);  // also from the parent, so signalling the group never races the child
  child.spec = &spec;
  child.pid = pid;
  child.running = true;
  if (spec.echo_to_terminal) {
    ::close(pipe_fds[1]);
    echo_fd_ = pipe_fds[0];
    echo_log_fd_ = log_fd;
    echo_log_path_ = log_path;
    ::fcntl(echo_fd_, F_SETFL, ::fcntl(echo_fd_, F_GETFL) | O_NONBLOCK);
  } else {
    ::close(log_fd);
  }
  return true;
}

bool Supervisor::StartAll() {
  children_.resize(plan_.processes.size());
  for (size_t i = 0; i < plan_.processes.size(); ++i) {
    if (!Start(plan_.processes[i], children_[i])) return false;
  }
  return true;
}

bool Supervisor::AnyRunning() const {
  for (const Child& c : children_) {
    if (c.running) return true;
  }
  return false;
}

void Supervisor::SignalGroups(int sig) {
  for (const Child& c : children_) {
    // The group may outlive its leader (grandchildren); ESRCH just means it is gone.
    if (c.pid > 0) ::kill(-c.pid, sig);
  }
}

void Supervisor::BeginStop(int exit_code, bool immediate) {
  if (!stopping_) {
    stopping_ = true;
    exit_code_ = exit_code;
    SignalGroups(SIGTERM);
    kill_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                        std::chrono::duration<double>(options_.grace_period_seconds));
  }
  if (immediate) kill_deadline_ = Clock::now();
}

void Supervisor::OnExit(Child& child, int status) {
  child.running = false;
  child.status = status;
  const LocalProcess& spec = *child.spec;
  if (stopping_) return;  // we are stopping everything; statuses from our signals don't count
  const std::string who = std::string(RoleTitle(spec.process.role)) + " rank " + std::to_string(spec.process.rank);
  if (ExitCodeOf(status) != 0) {
    // In an elastic job a trainer's collective fails at once when a peer node leaves, usually
    // before the next tick would have seen the change: then it is the change, not this node.
    if (options_.stop_for_change && options_.stop_for_change()) {
      Say(who + " " + DescribeStatus(status) + " as the job's nodes changed; its log is " + LogPath(spec) + ".");
      BeginStop(kStoppedForChange, false);
      return;
    }
    // An elastic node decides after the stop whether the failure ends it (on_process_failure's
    // owner says ABORT then), so only a node that gives up here says it.
    Say(std::string(options_.on_process_failure ? "" : "ABORT: ") + who + " " + DescribeStatus(status) +
        "; its log is " + LogPath(spec) + ". Stopping all local processes.");
    if (options_.on_process_failure) options_.on_process_failure();
    BeginStop(ExitCodeOf(status), false);
    return;
  }
  bool trainers_left = false;
  bool had_trainers = false;
  for (const Child& c : children_) {
    if (!c.spec || c.spec->process.role != Role::kTrainer) continue;  // never started
    had_trainers = true;
    trainers_left = trainers_left || c.running;
  }
  if (had_trainers && !trainers_left && AnyRunning()) {
    Say("all local trainers finished; stopping local servers and heter trainers.");
    BeginStop(0, false);
  }
}

void Supervisor::Reap() {
  while (true) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    for (Child& c : children_) {
      if (c.pid == pid && c.running) OnExit(c, status);
    }
    // Anything else is an orphan we adopted as subreaper: reaping it is all there is to do.
  }
}

void Supervisor::CopyEcho(bool drain) {
  if (echo_fd_ < 0) return;
  char buffer[65536];
  while (true) {
    ssize_t n = ::read(echo_fd_, buffer, sizeof buffer);
    if (n > 0) {
      if (const int error = WriteAll(echo_log_fd_, buffer, static_cast<size_t>(n))) {
        LogsLost("cannot write " + echo_log_path_ + ": " + std::strerror(error));
      }
      WriteAll(options_.terminal_fd, buffer, static_cast<size_t>(n));
      if (!drain) return;  // one chunk per wake-up keeps signals responsive
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN && !drain) return;
    // EOF, or nothing more to drain after the job ended (a grandchild may still hold the pipe).
    ::close(echo_fd_);
    ::close(echo_log_fd_);
    echo_fd_ = echo_log_fd_ = -1;
    return;
  }
}

void Supervisor::KillAdoptedOrphans() {
  // As subreaper we inherit our children's orphaned descendants (e.g. a process that left its
  // group with setsid()). Whatever still has us as parent is ours to end.
  const pid_t self = ::getpid();
  DIR* proc = ::opendir("/proc");
  if (!proc) return;
  std::vector<pid_t> orphans;
  while (dirent* entry = ::readdir(proc)) {
    char* end = nullptr;
    long pid = std::strtol(entry->d_name, &end, 10);
    if (*end != '\0' || pid <= 0) continue;
    std::string path = std::string("/proc/") + entry->d_name + "/stat";
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    char stat[512];
    ssize_t n = ::read(fd, stat, sizeof stat - 1);
    ::close(fd);
    if (n <= 0) continue;
    stat[n] = '\0';
    const char* after_comm = std::strrchr(stat, ')');  // comm may contain spaces and parentheses
    int ppid = 0;
    char state = 0;
    if (after_comm && std::sscanf(after_comm + 1, " %c %d", &state, &ppid) == 2 && ppid == self) {
      orphans.push_back(static_cast<pid_t>(pid));
    }
  }
  ::closedir(proc);
  for (pid_t pid : orphans) ::kill(pid, SIGKILL);
  for (pid_t pid : orphans) ::waitpid(pid, nullptr, 0);
}

// Every tick: is the log disk full, have the parameter servers started listening, has the elastic
// membership changed.
void Supervisor::Tick() {
  CheckLogSpace();
  if (!stopping_ && !waiting_for_servers_.empty()) WatchServers();
  if (!stopping_ && options_.stop_for_change && options_.stop_for_change()) BeginStop(kStoppedForChange, false);
}

// Trainers wait for their servers without limit (Paddle's wait_server_ready), so a server that
// never listens would hold the job until its trainers' own connect timeouts, if they have any.
void Supervisor::WatchServers() {
  const std::vector<bool> accepting = AcceptingConnections(waiting_for_servers_, 200);
  std::vector<Endpoint> still;
  for (size_t i = 0; i < waiting_for_servers_.size(); ++i) {
    if (!accepting[i]) still.push_back(waiting_for_servers_[i]);
  }
  waiting_for_servers_ = std::move(still);
  if (waiting_for_servers_.empty() || Clock::now() < servers_deadline_) return;
  std::string which;
  for (const Endpoint& server : waiting_for_servers_) {
    which += (which.empty() ? "" : ", ") + server.ToString();
    for (const LocalProcess& spec : plan_.processes) {
      if (spec.process.role == Role::kServer && spec.process.endpoint == server) which += " (log " + LogPath(spec) + ")";
    }
  }
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%g", options_.server_timeout_seconds);
  Say(std::string("ABORT: parameter server") + (waiting_for_servers_.size() > 1 ? "s " : " ") + which +
      " did not accept connections within " + seconds +
      " s (--server_timeout). Stopping all local processes.");
  BeginStop(kServerTimeoutStatus, false);
}

void Supervisor::CheckLogSpace() {
  struct statvfs fs {};
  if (lost_logs_.empty() && ::statvfs(plan_.log_dir.c_str(), &fs) == 0 && fs.f_bavail == 0) {
    LogsLost("the file system holding " + plan_.log_dir + " is full");
  }
}

// Processes write their logs themselves and cannot tell us; say it once, here, when first seen.
void Supervisor::LogsLost(const std::string& why) {
  if (!lost_logs_.empty()) return;
  lost_logs_ = why;
  Say("WARNING: " + why + "; local processes' output is being lost from their logs in " + plan_.log_dir + ".");
}

int Supervisor::Run() {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  ::signal(SIGPIPE, SIG_IGN);
  sigset_t previous;
  ::sigprocmask(SIG_BLOCK, &SupervisedSignals(), &previous);
  signal_fd_ = ::signalfd(-1, &SupervisedSignals(), SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd_ < 0) {
    Say(std::string("signalfd failed: ") + std::strerror(errno));
    return 1;
  }
  if (!plan_.direct_start && options_.server_timeout_seconds > 0) {
    waiting_for_servers_ = plan_.topology.EndpointsOf(Role::kServer);
    servers_deadline_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                           std::chrono::duration<double>(options_.server_timeout_seconds));
  }
  if (!StartAll()) BeginStop(1, false);
  Reap();  // a child that failed to exec may already be gone

  const auto tick = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(options_.tick_seconds));
  auto next_tick = Clock::now() + tick;
  while (AnyRunning()) {
    if (Clock::now() >= next_tick) {
      Tick();
      next_tick = Clock::now() + tick;
    }
    Clock::time_point wake = next_tick;
    if (stopping_) {
      if (kill_deadline_ <= Clock::now()) {
        SignalGroups(SIGKILL);
        kill_deadline_ = Clock::time_point::max();
      }
      wake = std::min(wake, kill_deadline_);
    }
    const int timeout_ms = static_cast<int>(
        std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::milliseconds>(wake - Clock::now()).count() + 1));
    pollfd fds[2] = {{signal_fd_, POLLIN, 0}, {echo_fd_, POLLIN, 0}};
    int ready = ::poll(fds, echo_fd_ >= 0 ? 2 : 1, timeout_ms);
    if (ready < 0 && errno != EINTR) break;
    if (echo_fd_ >= 0 && (fds[1].revents & (POLLIN | POLLHUP))) CopyEcho(false);
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      while (::read(signal_fd_, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        const int sig = static_cast<int>(info.ssi_signo);
        if (sig == SIGCHLD) continue;  // reaped below
        if (!stopping_) {
          Say(std::string("received SIG") + ::sigabbrev_np(sig) + "; stopping all local processes.");
          if (options_.leaving) options_.leaving();
        }
        BeginStop(128 + sig, /*immediate=*/stopping_);
      }
      Reap();
    }
  }
  CopyEcho(true);
  SignalGroups(SIGKILL);  // leftovers of finished groups: nothing outlives the job
  KillAdoptedOrphans();
  // The exit summary: a job that succeeded still did, but nobody should trust its logs blindly.
  CheckLogSpace();
  if (!lost_logs_.empty()) Say("WARNING: the logs in " + plan_.log_dir + " are incomplete: " + lost_logs_ + ".");
  ::close(signal_fd_);
  ::sigprocmask(SIG_SETMASK, &previous, nullptr);
  return exit_code_;
}

}  // namespace

const sigset_t& SupervisedSignals() {
  static const sigset_t set = [] {
    sigset_t s;
    sigemptyset(&s);
    for (int sig : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&s, sig);
    return s;
  }();
  return set;
}

std::optional<int> WaitForSupervisedSignal(double seconds) {
  const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  while (true) {
    const auto left = std::max<int64_t>(0, std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - Clock::now()).count());
    timespec wait{static_cast<time_t>(left / 1000000000), static_cast<long>(left % 1000000000)};
    const int sig = ::sigtimedwait(&SupervisedSignals(), nullptr, &wait);
    if (sig > 0 && sig != SIGCHLD) return sig;
    if (sig < 0 && errno == EAGAIN) return std::nullopt;
  }
}

int Supervise(const LaunchPlan& plan, const EnvMap& base_env, const SupervisorOptions& options) {
  return Supervisor(plan, base_env, options).Run();
}

}  // namespace fleet::launcher
