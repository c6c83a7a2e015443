// Structured logs of the binaries: one line per record on stderr, as text
//   2026-11-21T04:40:00.123Z info  published the endpoint lists fleetjob=ns/wd
// or as JSON ({"ts":...,"level":...,"msg":...,"fleetjob":...}) for log pipelines.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace fleet::serving {

enum class LogLevel { kDebug, kInfo, kWarning, kError };
enum class LogFormat { kText, kJson };

void ConfigureLog(LogLevel min_level, LogFormat format);
bool ParseLogLevel(const std::string& text, LogLevel* level);
bool ParseLogFormat(const std::string& text, LogFormat* format);
// The current UTC time as RFC 3339 with milliseconds: 2026-11-21T04:40:00.123Z.
std::string LogTimestamp();

void Log(LogLevel level, const std::string& message,
         const std::vector<std::pair<std::string, std::string>>& fields = {});

}  // namespace fleet::serving
