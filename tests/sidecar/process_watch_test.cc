// MainProcessWatcher: on a fake /proc (which process is the main one, restarts) and on the real one
// (a child process found by its command line, then gone).
#include "fleet/sidecar/process_watch.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "fake_apiserver_fixture.h"
#include "sidecar_process.h"

namespace fleet::sidecar {
namespace {

using kube::testing::TempDir;

class FakeProc {
 public:
  explicit FakeProc(const TempDir& dir) : dir_(dir) {}
  // A process: its cmdline (args separated by '\0'), state and start time.
  void Add(int pid, const std::string& args, char state = 'S', uint64_t start = 100, const std::string& comm = "x") {
    std::string cmdline = args;
    for (char& c : cmdline) {
      if (c == ' ') c = '\0';
    }
    dir_.Write("proc/" + std::to_string(pid) + "/cmdline", cmdline + std::string(1, '\0'));
    std::string stat = std::to_string(pid) + " (" + comm + ") " + state + " 1 1 1 0 -1 4194560 100 0 0 0 0 0 0 0 20 0 1 0 " +
                       std::to_string(start) + " 1000 100 18446744073709551615";
    dir_.Write("proc/" + std::to_string(pid) + "/stat", stat);
  }
  void Remove(int pid) { std::filesystem::remove_all(root() + "/" + std::to_string(pid)); }
  std::string root() const { return dir_.path() + "/proc"; }

 private:
  const TempDir& dir_;
};

TEST(MainProcessWatcherTest, AutoNeedsTheSharedNamespacesPauseProcess) {
  TempDir dir;
  FakeProc proc(dir);
  proc.Add(1, "/pause");
  EXPECT_TRUE(MainProcessWatcher::Enabled(MainProcessMode::kAuto, proc.root()));
  proc.Add(1, "/usr/bin/fleet-sidecar gate --namespace=a");   // the sidecar is PID 1: not shared
  EXPECT_FALSE(MainProcessWatcher::Enabled(MainProcessMode::kAuto, proc.root()));
  EXPECT_TRUE(MainProcessWatcher::Enabled(MainProcessMode::kOn, proc.root()));
  EXPECT_FALSE(MainProcessWatcher::Enabled(MainProcessMode::kOff, proc.root()));
}

TEST(MainProcessWatcherTest, TheOldestOtherProcessIsTheMainOneAndANewOneIsARestart) {
  TempDir dir;
  FakeProc proc(dir);
  proc.Add(1, "/pause");
  proc.Add(7, "/usr/bin/fleet-sidecar gate", 'S', 50);       // the sidecar itself (another instance)
  proc.Add(8, "/usr/bin/envoy -c x", 'S', 60, "envoy");      // another sidecar of the pod
  proc.Add(20, "python3 -u train.py --epochs 3", 'S', 90, "python3");
  proc.Add(21, "python3 -u train.py worker", 'S', 95);
  proc.Add(30, "", 'S', 10);                                 // a kernel thread: no command line
  proc.Add(31, "defunct", 'Z', 5);                           // a zombie
  {
    MainProcessWatcher any(proc.root(), "", /*self=*/99);
    const auto o = any.Check();
    EXPECT_TRUE(o.running);
    EXPECT_EQ(o.pid, 8);   // without a match, the oldest other process: the mesh proxy
  }
  MainProcessWatcher watcher(proc.root(), "train\\.py", 99);
  auto o = watcher.Check();
  ASSERT_TRUE(o.running);
  EXPECT_EQ(o.pid, 20);
  EXPECT_EQ(o.command, "python3 -u train.py --epochs 3");
  EXPECT_FALSE(o.restarted);
  EXPECT_TRUE(watcher.Check().running);

  proc.Remove(20);
  proc.Remove(21);
  o = watcher.Check();
  EXPECT_FALSE(o.running);
  proc.Add(40, "python3 -u train.py --epochs 3", 'S', 500);   // started again
  o = watcher.Check();
  EXPECT_TRUE(o.running);
  EXPECT_EQ(o.pid, 40);
  EXPECT_TRUE(o.restarted);
  proc.Add(40, "python3 -u train.py --epochs 3", 'Z', 500);   // exited, not yet reaped
  EXPECT_FALSE(watcher.Check().running);
  proc.Add(40, "python3 -u train.py --epochs 3", 'S', 900);   // PID reused: a new process
  o = watcher.Check();
  EXPECT_TRUE(o.running);
  EXPECT_TRUE(o.restarted);
}

TEST(MainProcessWatcherTest, FindsARealProcessByItsCommandLine) {
  const std::string marker = "fleet-watch-test-" + std::to_string(::getpid());
  const pid_t shell = ::fork();
  if (shell == 0) {
    ::setpgid(0, 0);  // the shell and its sleep: one group, killed together (no orphan holding ctest's pipes)
    const int null = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    ::dup2(null, STDOUT_FILENO);
    ::dup2(null, STDERR_FILENO);
    // The shell's command line carries the marker (as its $0); its child "sleep 30" does not.
    ::execl("/bin/sh", "sh", "-c", "sleep 30; : keep", marker.c_str(), nullptr);
    ::_exit(127);
  }
  ASSERT_GT(shell, 0);
  ::setpgid(shell, shell);
  MainProcessWatcher watcher("/proc", marker, ::getpid());
  EXPECT_TRUE(testing::Eventually([&] { return watcher.Check().pid == shell; }));
  ::kill(-shell, SIGKILL);
  ::waitpid(shell, nullptr, 0);
  EXPECT_TRUE(testing::Eventually([&] { return !watcher.Check().running; }));
}

}  // namespace
}  // namespace fleet::sidecar
