// What the benchmarks read of a process in /proc: its CPU time so far and its status lines
// (VmRSS, VmHWM: the resident set now and at its peak).
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

namespace fleet::bench {

// User + system CPU seconds of `pid` so far: /proc/PID/stat fields 14 and 15, counted from the
// command's closing parenthesis (a command may hold spaces); 0 when it cannot be read.
inline double ProcessCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || close + 2 > stat.size()) return 0;
  std::istringstream fields(stat.substr(close + 2));   // from field 3 (state) on
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i >= 14) ticks += std::strtod(field.c_str(), nullptr);
  }
  return ticks / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// A /proc/PID/status line's value as written ("123456 kB" for VmHWM); "?" when there is none.
inline std::string ProcStatus(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) {
      std::string value = line.substr(field.size() + 1);
      value.erase(0, value.find_first_not_of(" \t"));
      return value;
    }
  }
  return "?";
}

// The same in KiB; -1 when there is none.
inline long ProcStatusKib(pid_t pid, const std::string& field) {
  const std::string value = ProcStatus(pid, field);
  return value == "?" ? -1 : std::strtol(value.c_str(), nullptr, 10);
}

}  // namespace fleet::bench
