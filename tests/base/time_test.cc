// time.h: RFC 3339 formatting and parsing, round trips and malformed input.
#include "fleet/base/time.h"

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace fleet {
namespace {

using std::chrono::microseconds;
using std::chrono::milliseconds;
using std::chrono::seconds;
using Clock = std::chrono::system_clock;

// 2026-11-21T04:31:23Z
const Clock::time_point kT(seconds(1795235483));

TEST(FormatRfc3339, WritesUtcAtTheAskedPrecisionTruncating) {
  EXPECT_EQ(FormatRfc3339(kT), "2026-11-21T04:31:23Z");
  const Clock::time_point t = kT + microseconds(123456);
  EXPECT_EQ(FormatRfc3339(t), "2026-11-21T04:31:23Z");
  EXPECT_EQ(FormatRfc3339(t, TimePrecision::kMillis), "2026-11-21T04:31:23.123Z");
  EXPECT_EQ(FormatRfc3339(t, TimePrecision::kMicros), "2026-11-21T04:31:23.123456Z");
  EXPECT_EQ(FormatRfc3339(kT, TimePrecision::kMillis), "2026-11-21T04:31:23.000Z");
  EXPECT_EQ(FormatRfc3339(Clock::time_point{}), "1970-01-01T00:00:00Z");
  // Before the epoch, truncation still goes towards the past.
  EXPECT_EQ(FormatRfc3339(Clock::time_point{} - milliseconds(1), TimePrecision::kMillis), "1969-12-31T23:59:59.999Z");
}

TEST(ParseRfc3339, RoundTripsEveryPrecision) {
  const Clock::time_point t = kT + microseconds(123456);
  EXPECT_EQ(ParseRfc3339(FormatRfc3339(t)), kT);
  EXPECT_EQ(ParseRfc3339(FormatRfc3339(t, TimePrecision::kMillis)), kT + milliseconds(123));
  EXPECT_EQ(ParseRfc3339(FormatRfc3339(t, TimePrecision::kMicros)), t);
  for (const auto& text : {"2024-02-29T23:59:59Z", "2000-01-01T00:00:00Z", "1969-07-20T20:17:40Z"}) {
    SCOPED_TRACE(text);
    auto parsed = ParseRfc3339(text);
    ASSERT_TRUE(parsed);
    EXPECT_EQ(FormatRfc3339(*parsed), text);
  }
}

TEST(ParseRfc3339, AppliesOffsetsAndAcceptsLowerCaseSeparators) {
  EXPECT_EQ(ParseRfc3339("2026-11-21T06:31:23+02:00"), kT);
  EXPECT_EQ(ParseRfc3339("2026-11-21T02:01:23-02:30"), kT);
  EXPECT_EQ(ParseRfc3339("2026-11-21T04:31:23+00:00"), kT);
  EXPECT_EQ(ParseRfc3339("2026-11-21t04:31:23z"), kT);
  EXPECT_EQ(ParseRfc3339("2026-11-21T04:31:23.5+01:00"), kT - std::chrono::hours(1) + milliseconds(500));
}

TEST(ParseRfc3339, RefusesMalformedInput) {
  for (const std::string bad :
       {"", "yesterday", "2026-11-21", "2026-11-21T04:31:23", "2026-11-21 04:31:23Z", "2026-11-21T04:31Z",
        "26-11-21T04:31:23Z", "2026-1-21T04:31:23Z", "2026-11-21T04:31:23ZZ", "2026-11-21T04:31:23Z ",
        " 2026-11-21T04:31:23Z", "2026-11-21T04:31:23.Z", "2026-11-21T04:31:23+02", "2026-11-21T04:31:23+0200",
        "2026-13-01T00:00:00Z", "2026-00-01T00:00:00Z", "2026-02-29T00:00:00Z", "2026-04-31T00:00:00Z",
        "2026-11-21T24:00:00Z", "2026-11-21T04:60:00Z", "2026-11-21T04:31:60Z", "2026-11-21T04:31:23+24:00",
        "+026-11-21T04:31:23Z", "2026-11-21T04:31:-3Z"}) {
    SCOPED_TRACE("'" + bad + "'");
    EXPECT_FALSE(ParseRfc3339(bad));
  }
}

// kubectl's ages, boundary by boundary: fleetctl's AGE column and ETAs, and status.progress.etaText.
TEST(HumanDuration, ReadsAsKubectlWritesAges) {
  const std::vector<std::pair<int64_t, std::string>> cases = {
      {-5, "0s"},  {0, "0s"},      {59, "59s"},  {119, "119s"}, {120, "2m"},    {200, "3m20s"},
      {600, "10m"}, {10799, "179m"}, {10800, "3h"}, {18000 + 720, "5h12m"}, {28800, "8h"}, {47 * 3600, "47h"},
      {2 * 86400 + 3 * 3600, "2d3h"}, {8 * 86400, "8d"}, {400 * 86400, "400d"}, {800 * 86400, "2y"},
  };
  for (const auto& [s, text] : cases) EXPECT_EQ(HumanDuration(s), text) << s;
}

}  // namespace
}  // namespace fleet
