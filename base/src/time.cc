#include "fleet/base/time.h"

#include <cstdint>
#include <cstdio>
#include <ctime>

namespace fleet {
namespace {

using Clock = std::chrono::system_clock;

// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's days_from_civil): no
// timegm, whose tm normalization would quietly accept February 30th.
int64_t DaysFromCivil(int64_t year, int month, int day) {
  year -= month <= 2;
  const int64_t era = (year >= 0 ? year : year - 399) / 400;
  const int64_t year_of_era = year - era * 400;
  const int64_t day_of_year = (153 * (month + (month > 2 ? -3 : 9)) + 2) / 5 + day - 1;
  const int64_t day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
  return era * 146097 + day_of_era - 719468;
}

int DaysInMonth(int year, int month) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;
  return month == 2 && leap ? 29 : kDays[month - 1];
}

// Reads exactly `width` digits at text[*at...] into *value.
bool Digits(std::string_view text, size_t* at, size_t width, int* value) {
  if (*at + width > text.size()) return false;
  int v = 0;
  for (size_t i = 0; i < width; ++i) {
    const char c = text[*at + i];
    if (c < '0' || c > '9') return false;
    v = v * 10 + (c - '0');
  }
  *at += width;
  *value = v;
  return true;
}

bool Expect(std::string_view text, size_t* at, char a, char b = '\0') {
  if (*at >= text.size() || (text[*at] != a && (b == '\0' || text[*at] != b))) return false;
  ++*at;
  return true;
}

std::string Printf(const char* format, int64_t a, int64_t b = 0) {
  char text[48];
  std::snprintf(text, sizeof text, format, static_cast<long long>(a), static_cast<long long>(b));
  return text;
}

}  // namespace

std::string HumanDuration(int64_t s) {
  if (s < 0) s = 0;
  if (s < 120) return Printf("%llds", s);
  const int64_t m = s / 60;
  if (m < 10) return s % 60 ? Printf("%lldm%llds", m, s % 60) : Printf("%lldm", m);
  if (m < 180) return Printf("%lldm", m);
  const int64_t h = m / 60;
  if (h < 8) return m % 60 ? Printf("%lldh%lldm", h, m % 60) : Printf("%lldh", h);
  if (h < 48) return Printf("%lldh", h);
  const int64_t d = h / 24;
  if (d < 8) return h % 24 ? Printf("%lldd%lldh", d, h % 24) : Printf("%lldd", d);
  if (d < 730) return Printf("%lldd", d);
  return Printf("%lldy", d / 365);
}

std::string FormatRfc3339(Clock::time_point t, TimePrecision precision) {
  const auto seconds = std::chrono::floor<std::chrono::seconds>(t.time_since_epoch());
  const auto micros = std::chrono::floor<std::chrono::microseconds>(t.time_since_epoch() - seconds).count();
  const std::time_t secs = static_cast<std::time_t>(seconds.count());
  std::tm tm{};
  ::gmtime_r(&secs, &tm);
  char buf[48];
  size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  switch (precision) {
    case TimePrecision::kSeconds: break;
    case TimePrecision::kMillis:
      n += static_cast<size_t>(std::snprintf(buf + n, sizeof buf - n, ".%03lld", static_cast<long long>(micros / 1000)));
      break;
    case TimePrecision::kMicros:
      n += static_cast<size_t>(std::snprintf(buf + n, sizeof buf - n, ".%06lld", static_cast<long long>(micros)));
      break;
  }
  return std::string(buf, n) + "Z";
}

std::optional<Clock::time_point> ParseRfc3339(std::string_view text) {
  size_t at = 0;
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (!Digits(text, &at, 4, &year) || !Expect(text, &at, '-') || !Digits(text, &at, 2, &month) ||
      !Expect(text, &at, '-') || !Digits(text, &at, 2, &day) || !Expect(text, &at, 'T', 't') ||
      !Digits(text, &at, 2, &hour) || !Expect(text, &at, ':') || !Digits(text, &at, 2, &minute) ||
      !Expect(text, &at, ':') || !Digits(text, &at, 2, &second)) {
    return std::nullopt;
  }
  if (month < 1 || month > 12 || day < 1 || day > DaysInMonth(year, month) || hour > 23 || minute > 59 ||
      second > 59) {
    return std::nullopt;
  }
  // The fraction, to the clock's resolution; digits past it are read and dropped.
  Clock::duration fraction{0};
  if (at < text.size() && text[at] == '.') {
    ++at;
    const size_t first = at;
    auto scale = std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(1)).count();
    while (at < text.size() && text[at] >= '0' && text[at] <= '9') {
      scale /= 10;
      fraction += Clock::duration(scale * (text[at] - '0'));
      ++at;
    }
    if (at == first) return std::nullopt;
  }
  int64_t offset_seconds = 0;
  if (at < text.size() && (text[at] == '+' || text[at] == '-')) {
    const int sign = text[at] == '+' ? 1 : -1;
    ++at;
    int offset_hours = 0, offset_minutes = 0;
    if (!Digits(text, &at, 2, &offset_hours) || !Expect(text, &at, ':') || !Digits(text, &at, 2, &offset_minutes) ||
        offset_hours > 23 || offset_minutes > 59) {
      return std::nullopt;
    }
    offset_seconds = sign * (offset_hours * 3600 + offset_minutes * 60);
  } else if (!Expect(text, &at, 'Z', 'z')) {
    return std::nullopt;
  }
  if (at != text.size()) return std::nullopt;
  const int64_t local = DaysFromCivil(year, month, day) * 86400 + hour * 3600 + minute * 60 + second;
  return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(local - offset_seconds))) +
         fraction;
}

}  // namespace fleet
