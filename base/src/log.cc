#include "fleet/base/log.h"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>

#include <nlohmann/json.hpp>

#include "fleet/base/escape.h"
#include "fleet/base/time.h"

namespace fleet {
namespace {

std::atomic<LogLevel> g_min_level{LogLevel::kInfo};
std::atomic<LogFormat> g_format{LogFormat::kText};

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "debug";
    case LogLevel::kInfo: return "info";
    case LogLevel::kWarning: return "warning";
    case LogLevel::kError: return "error";
  }
  return "info";
}

void WriteToStderr(const std::string& line) {
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace

void ConfigureLog(LogLevel min_level, LogFormat format) {
  g_min_level = min_level;
  g_format = format;
}

bool ParseLogLevel(const std::string& text, LogLevel* level) {
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarning, LogLevel::kError}) {
    if (text == LevelName(l)) {
      *level = l;
      return true;
    }
  }
  return false;
}

bool ParseLogFormat(const std::string& text, LogFormat* format) {
  if (text == "text") *format = LogFormat::kText;
  else if (text == "json") *format = LogFormat::kJson;
  else return false;
  return true;
}

Logger::Logger(std::string source, Sink sink) : source_(std::move(source)), sink_(std::move(sink)) {}

void Logger::Log(LogLevel level, const std::string& message, const LogFields& fields) const {
  if (level < g_min_level.load()) return;
  const std::string ts = FormatRfc3339(std::chrono::system_clock::now(), TimePrecision::kMillis);
  std::string line;
  if (g_format.load() == LogFormat::kJson) {
    nlohmann::json record = {{"ts", ts}, {"level", LevelName(level)}};
    if (!source_.empty()) record["logger"] = source_;
    record["msg"] = message;
    for (const auto& [k, v] : fields) record[k] = v;
    // Replace invalid UTF-8 (from the API, from a trainer's log) rather than throw.
    line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } else {
    // One record, one line: a newline or a terminal escape in a value from outside (a pattern in a
    // spec, a sidecar's message) must not forge a record or drive the terminal of whoever reads it.
    line = ts + " " + LevelName(level) + " " + (source_.empty() ? "" : EscapeControl(source_) + ": ") +
           EscapeControl(message);
    for (const auto& [k, v] : fields) line += " " + EscapeControl(k) + "=" + EscapeControl(v);
  }
  line += "\n";
  if (sink_) {
    sink_(line);
  } else {
    WriteToStderr(line);
  }
}

void Log(LogLevel level, const std::string& message, const LogFields& fields) {
  Logger().Log(level, message, fields);
}

}  // namespace fleet
