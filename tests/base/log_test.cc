// log.h: the line format of text and JSON records, levels, sources and sinks.
#include "fleet/base/log.h"

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "fleet/base/time.h"

namespace fleet {
namespace {

class LogTest : public ::testing::Test {
 protected:
  void TearDown() override { ConfigureLog(LogLevel::kInfo, LogFormat::kText); }

  Logger Capture(std::string source = "") {
    return Logger(std::move(source), [this](const std::string& line) { lines_.push_back(line); });
  }

  std::vector<std::string> lines_;
};

// "<ts> ": an RFC 3339 UTC time with milliseconds, then a space.
void ExpectTimestampPrefix(const std::string& line) {
  ASSERT_GT(line.size(), 25u) << line;
  EXPECT_EQ(line[4], '-') << line;
  EXPECT_EQ(line[10], 'T') << line;
  EXPECT_EQ(line[19], '.') << line;
  EXPECT_EQ(line[23], 'Z') << line;
  EXPECT_EQ(line[24], ' ') << line;
  EXPECT_TRUE(ParseRfc3339(line.substr(0, 24))) << line;
}

TEST_F(LogTest, TextLineIsTimestampLevelMessageAndFields) {
  Capture().Log(LogLevel::kWarning, "published the endpoint lists", {{"fleetjob", "ns/wd"}, {"run", "2"}});
  ASSERT_EQ(lines_.size(), 1u);
  ExpectTimestampPrefix(lines_[0]);
  EXPECT_EQ(lines_[0].substr(25), "warning published the endpoint lists fleetjob=ns/wd run=2\n");
}

TEST_F(LogTest, ANewlineOrEscapeInALoggedValueCannotForgeARecordOrReachTheTerminal) {
  Capture("src\n").Log(LogLevel::kInfo, "stalled: x\n2026-11-21T04:40:00.123Z error forged",
                        {{"message", "a\rb\x1b[2Jc\x07"}, {"k\ney", "v"}});
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(lines_[0].substr(25),
            "info src\\n: stalled: x\\n2026-11-21T04:40:00.123Z error forged message=a\\rb\\x1b[2Jc\\x07 k\\ney=v\n");
}

TEST_F(LogTest, SourceStartsTheMessageAndCallIsAnInfoRecord) {
  Capture("fleet-sidecar[default/j-worker-0]")("gate open");
  ASSERT_EQ(lines_.size(), 1u);
  ExpectTimestampPrefix(lines_[0]);
  EXPECT_EQ(lines_[0].substr(25), "info fleet-sidecar[default/j-worker-0]: gate open\n");
}

TEST_F(LogTest, JsonRecordHasTimestampLevelSourceMessageAndFields) {
  ConfigureLog(LogLevel::kInfo, LogFormat::kJson);
  Capture("fleet-sidecar[ns/p]").Log(LogLevel::kError, "cannot \"patch\"", {{"fleetjob", "ns/wd"}});
  ASSERT_EQ(lines_.size(), 1u);
  ASSERT_EQ(lines_[0].back(), '\n');
  const auto record = nlohmann::json::parse(lines_[0]);
  EXPECT_TRUE(ParseRfc3339(record["ts"].get<std::string>()));
  EXPECT_EQ(record["level"], "error");
  EXPECT_EQ(record["logger"], "fleet-sidecar[ns/p]");
  EXPECT_EQ(record["msg"], "cannot \"patch\"");
  EXPECT_EQ(record["fleetjob"], "ns/wd");
}

TEST_F(LogTest, JsonReplacesInvalidUtf8InsteadOfThrowing) {
  ConfigureLog(LogLevel::kInfo, LogFormat::kJson);
  Capture().Log(LogLevel::kInfo, "bad \xff byte");
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(lines_[0])["msg"], "bad \xef\xbf\xbd byte");
}

TEST_F(LogTest, RecordsBelowTheConfiguredLevelAreDropped) {
  Logger log = Capture();
  log.Log(LogLevel::kDebug, "hidden at info");
  ConfigureLog(LogLevel::kWarning, LogFormat::kText);
  log("hidden at warning");
  log.Log(LogLevel::kWarning, "shown");
  ConfigureLog(LogLevel::kDebug, LogFormat::kText);
  log.Log(LogLevel::kDebug, "shown at debug");
  ASSERT_EQ(lines_.size(), 2u);
  EXPECT_NE(lines_[0].find(" warning shown\n"), std::string::npos) << lines_[0];
  EXPECT_NE(lines_[1].find(" debug shown at debug\n"), std::string::npos) << lines_[1];
}

TEST(ParseLogFlags, AcceptTheDocumentedNamesOnly) {
  LogLevel level = LogLevel::kInfo;
  EXPECT_TRUE(ParseLogLevel("debug", &level));
  EXPECT_EQ(level, LogLevel::kDebug);
  EXPECT_TRUE(ParseLogLevel("error", &level));
  EXPECT_EQ(level, LogLevel::kError);
  EXPECT_FALSE(ParseLogLevel("INFO", &level));
  EXPECT_FALSE(ParseLogLevel("warn", &level));
  LogFormat format = LogFormat::kText;
  EXPECT_TRUE(ParseLogFormat("json", &format));
  EXPECT_EQ(format, LogFormat::kJson);
  EXPECT_FALSE(ParseLogFormat("xml", &format));
}

}  // namespace
}  // namespace fleet
