// Timestamps as Kubernetes and log pipelines write them: RFC 3339, e.g. 2024-05-01T12:00:00Z.
#pragma once

#include <chrono>
#include <cstdint>
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

// A duration as kubectl writes ages (apimachinery's duration.HumanDuration): 45s, 119s, 3m20s, 17m,
// 5h12m, 2d3h, 400d, 2y; negative reads as 0s. One formatter, so that fleetctl's ages and ETAs and
// the ETA the operator writes into status.progress read the same.
std::string HumanDuration(int64_t seconds);

}  // namespace fleet
