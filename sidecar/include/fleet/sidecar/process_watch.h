// MainProcessWatcher: is the pod's main (training) process alive? It needs the pod's process
// namespace shared with the sidecar (shareProcessNamespace: true): then PID 1 is the pod's pause
// process and the other containers' processes are visible in /proc.
//
// The main process is the oldest process (by start time) that is not PID 1, not this process, not
// another fleet-sidecar and not a zombie, and whose command line matches `match` when one is given
// (e.g. "python|fleetrun": other sidecars, such as a service mesh's proxy, also share the namespace).
// Once found, only that PID is checked (same start time, not a zombie); when it is gone, /proc is
// scanned again: a new one is a restart.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace re2 {
class RE2;
}  // namespace re2

namespace fleet::sidecar {

enum class MainProcessMode { kAuto, kOn, kOff };

// What /proc/<pid>/stat says of a process (`proc`: the procfs mount, a fake tree in tests).
struct ProcStat {
  char state = '?';           // 'R', 'S', ... 'Z' (a zombie: it has ended)
  pid_t ppid = 0;             // 0 for a process whose parent is outside its PID namespace
  uint64_t start_time = 0;    // in clock ticks since boot: with the pid, names one process
  bool Ended() const { return state == 'Z' || state == 'X' || state == 'x'; }
};
// nullopt when the file is missing or not as the kernel writes it.
std::optional<ProcStat> ReadProcStat(const std::string& proc, pid_t pid);

struct MainProcessObservation {
  bool running = false;
  pid_t pid = 0;
  // Its command line: args joined by spaces, cut to kCommandBytes (and "...") where a UTF-8
  // character starts; any bytes otherwise (JSON writers replace what is not UTF-8).
  std::string command;
  bool restarted = false;     // a new main process, after an earlier one was seen
};

class MainProcessWatcher {
 public:
  static constexpr size_t kCommandBytes = 200;

  // `proc` is the procfs mount (a fake tree in tests). `match`: "" = any process; else a regular
  // expression (user_regex.h) that must be valid (the flag parser checks it; throws
  // std::invalid_argument otherwise).
  MainProcessWatcher(std::string proc, const std::string& match, pid_t self);

  // kAuto: on when PID 1 is the pod's pause process (its namespace is shared), else off.
  static bool Enabled(MainProcessMode mode, const std::string& proc = "/proc");

  MainProcessObservation Check();

 private:
  struct Candidate {
    pid_t pid = 0;
    uint64_t start_time = 0;
    std::string command;
  };
  std::optional<Candidate> Read(pid_t pid) const;
  std::optional<Candidate> Scan() const;

  std::string proc_;
  std::shared_ptr<const re2::RE2> match_;   // null: any process
  pid_t self_;
  std::optional<Candidate> current_;
  bool seen_ = false;
};

}  // namespace fleet::sidecar
