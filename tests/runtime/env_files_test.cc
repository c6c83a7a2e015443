// The contract of lists that travel as files (env_files.h), as programs that read their env in C++
// read it: what is read, the wait for the run's files, malformed input. fleetrun's end-to-end tests
// run it in the binary; the wait's timeout is checked here, where it can be short.
#include "fleet/runtime/env_files.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fleet {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class EnvFilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "fleet-env-files-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    Write("fleet-run", "3");
    Write("list", "10.0.0.1:6170,10.0.0.2:6170");
  }
  void TearDown() override { fs::remove_all(dir_); }

  void Write(const std::string& file, const std::string& content) { std::ofstream(dir_ / file) << content; }
  EnvMap Env(const std::string& entries) const {
    return {{"FLEET_ENV_FILES", entries}, {"FLEET_ENV_FILES_DIR", dir_.string()}, {"FLEET_ENV_FILES_RUN", "3"},
            {"PATH", "/bin"}};
  }

  fs::path dir_;
  EnvFilesWait short_wait_{0.3, 0.01, 30, nullptr};
};

TEST_F(EnvFilesTest, ReadsTheVariablesOfTheRun) {
  auto read = ReadEnvFiles(Env("PADDLE_TRAINER_ENDPOINTS=list,ALSO=list"), short_wait_);
  ASSERT_TRUE(read.ok()) << read.error();
  const std::string list = "10.0.0.1:6170,10.0.0.2:6170";
  EXPECT_EQ(*read, (EnvMap{{"ALSO", list}, {"PADDLE_TRAINER_ENDPOINTS", list}}));
}

TEST_F(EnvFilesTest, WithoutFleetEnvFilesNothingIsRead) {
  auto read = ReadEnvFiles({{"PATH", "/bin"}, {"FLEET_ENV_FILES", ""}}, short_wait_);
  ASSERT_TRUE(read.ok()) << read.error();
  EXPECT_TRUE(read->empty());
}

// An older run's files, or a file not there yet: waited for, then a timeout naming what was awaited.
TEST_F(EnvFilesTest, GivesUpWaitingForTheRunsFilesNamingThem) {
  std::vector<std::string> reports;
  EnvFilesWait wait = short_wait_;
  wait.report = [&](const std::string& line) { reports.push_back(line); };
  Write("fleet-run", "2");
  auto read = ReadEnvFiles(Env("PADDLE_TRAINER_ENDPOINTS=list"), wait);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.error(), ::testing::StartsWith("gave up after "));
  EXPECT_THAT(read.error(),
              ::testing::EndsWith(" s waiting for PADDLE_TRAINER_ENDPOINTS of run 3 in " + dir_.string()));
  ASSERT_EQ(reports.size(), 1u) << "one report per report_every_seconds";
  EXPECT_THAT(reports[0], HasSubstr("waiting for PADDLE_TRAINER_ENDPOINTS of run 3"));
  Write("fleet-run", "3");
  EXPECT_FALSE(ReadEnvFiles(Env("PADDLE_TRAINER_ENDPOINTS=missing"), short_wait_).ok());
}

TEST_F(EnvFilesTest, MalformedInputIsAnErrorNamingIt) {
  for (const std::string entry : {"A", "A=", "=list", ""}) {
    auto read = ReadEnvFiles(Env("B=list," + entry), short_wait_);
    ASSERT_FALSE(read.ok()) << entry;
    EXPECT_EQ(read.error(), "FLEET_ENV_FILES: entry '" + entry + "' is not VAR=FILE");
  }
  Write("bad", "10.0.0.1:6170,\xff");
  auto read = ReadEnvFiles(Env("LIST=bad"), short_wait_);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error(), "LIST: file " + (dir_ / "bad").string() + " is not UTF-8 text");
  for (const std::string name : {"FLEET_ENV_FILES_DIR", "FLEET_ENV_FILES_RUN"}) {
    EnvMap env = Env("LIST=list");
    env.erase(name);
    read = ReadEnvFiles(env, short_wait_);
    ASSERT_FALSE(read.ok()) << name;
    EXPECT_EQ(read.error(), "FLEET_ENV_FILES is set but " + name + " is not");
  }
}

TEST_F(EnvFilesTest, WhatIsPassedOnLeavesTheValuesToBeLoadedAgain) {
  EnvMap env = Env("LIST=list");
  env["LIST"] = "loaded";
  EnvMap passed = WithoutEnvFileValues(env);
  EXPECT_EQ(passed.count("LIST"), 0u);
  env.erase("LIST");
  EXPECT_EQ(passed, env) << "FLEET_ENV_FILES and the rest stay";
}

}  // namespace
}  // namespace fleet
