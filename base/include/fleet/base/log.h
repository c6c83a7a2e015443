// Log records of the binaries: one line per record on stderr, as text
//   2026-11-21T04:40:00.123Z info published the endpoint lists fleetjob=ns/wd
//   2026-11-21T04:40:00.123Z info fleet-sidecar[ns/wd-worker-0]: gate open
// or as JSON ({"ts":...,"level":...,"logger":...,"msg":...,"fleetjob":...}) for log pipelines.
// Each line is written with one write(2), so threads never interleave within a line.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace fleet {

enum class LogLevel { kDebug, kInfo, kWarning, kError };
enum class LogFormat { kText, kJson };
// key=value pairs after the message (text) or members of the record (JSON).
using LogFields = std::vector<std::pair<std::string, std::string>>;

// Process-wide: the least level written and the format (the operator's --log-level and
// --log-format). Defaults: info, text.
void ConfigureLog(LogLevel min_level, LogFormat format);
bool ParseLogLevel(const std::string& text, LogLevel* level);
bool ParseLogFormat(const std::string& text, LogFormat* format);

// A log with a source and a destination, handed to the components that log, so that their tests
// can read what they logged.
class Logger {
 public:
  using Sink = std::function<void(const std::string& line)>;   // gets the line with its newline
  // `source` (e.g. "fleet-sidecar[ns/pod]") starts every message; without a sink, lines go to
  // stderr.
  explicit Logger(std::string source = "", Sink sink = nullptr);

  void Log(LogLevel level, const std::string& message, const LogFields& fields = {}) const;
  // An info record, the common case: log("gate open").
  void operator()(const std::string& message) const { Log(LogLevel::kInfo, message); }

 private:
  std::string source_;
  Sink sink_;
};

// A record on the process's default log: stderr, no source.
void Log(LogLevel level, const std::string& message, const LogFields& fields = {});

}  // namespace fleet
