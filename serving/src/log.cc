#include "fleet/serving/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

#include <nlohmann/json.hpp>

namespace fleet::serving {
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

}  // namespace

std::string LogTimestamp() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t secs = std::chrono::system_clock::to_time_t(now);
  const auto millis = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[40];
  const size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(buf + n, sizeof buf - n, ".%03dZ", static_cast<int>(millis));
  return buf;
}

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

void Log(LogLevel level, const std::string& message, const std::vector<std::pair<std::string, std::string>>& fields) {
  if (level < g_min_level.load()) return;
  std::string line;
  if (g_format.load() == LogFormat::kJson) {
    nlohmann::json record = {{"ts", LogTimestamp()}, {"level", LevelName(level)}, {"msg", message}};
    for (const auto& [k, v] : fields) record[k] = v;
    // Replace invalid UTF-8 from the API rather than throw.
    line = record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  } else {
    line = LogTimestamp() + " " + LevelName(level) + " " + message;
    for (const auto& [k, v] : fields) line += " " + k + "=" + v;
  }
  line += "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);   // one write per line: lines never interleave
}

}  // namespace fleet::serving
