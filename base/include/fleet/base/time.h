// Timestamps as Kubernetes and log pipelines write them: RFC 3339, e.g. 2024-05-01T12:00:00Z.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <string_view>

namespace fleet {

enum class TimePrecision {
  kSeconds,  // 2024-05-01T12:00:00Z: metav1.Time (conditions, events, creationTimestamp)
  kMillis,   // 2024-05-01T12:00:00.123Z: log records
  kMicros,   // 2024-05-01T12:00:00.123456Z: metav1.MicroTime (Lease renewTime)
};

// `t` in UTC with a 'Z', truncated (towards the past) to `precision`.
std::string FormatRfc3339(std::chrono::system_clock::time_point t,
                          TimePrecision precision = TimePrecision::kSeconds);

// The whole of `text` as an RFC 3339 date-time: YYYY-MM-DDTHH:MM:SS, optional fraction (kept to
// the clock's resolution), then 'Z' or an offset (+HH:MM / -HH:MM). nullopt for anything else,
// including out-of-range fields (month 13, 24:00) and trailing characters.
std::optional<std::chrono::system_clock::time_point> ParseRfc3339(std::string_view text);

}  // namespace fleet
