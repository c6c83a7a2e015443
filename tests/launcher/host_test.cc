// The real host facts: script resolution on temp files, free ports, this machine's addresses.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "fleet/launcher/host.h"

namespace fleet::launcher {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;

namespace fs = std::filesystem;

class FleetrunHost : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "fleetrun-host-test-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
    char cwd[4096];
    ASSERT_NE(::getcwd(cwd, sizeof cwd), nullptr);
    getcwd_ = cwd;
    ASSERT_EQ(::chdir(dir_.c_str()), 0);
    fs::create_directory(dir_ / "bin");
    Write("bin/python3", "#!/bin/sh\n", 0755);
    Write("bin/mytool", "#!/bin/sh\n", 0755);
    Write("train.py", "print(1)\n", 0644);  // a .py needs no exec bit
    Write("run.sh", "#!/bin/sh\n", 0755);
    Write("noexec.sh", "#!/bin/sh\n", 0644);
    fs::create_directory(dir_ / "adir.py");
    path_ = (dir_ / "bin").string();
  }
  void TearDown() override {
    if (!getcwd_.empty()) (void)::chdir(getcwd_.c_str());
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  void Write(const std::string& name, const std::string& content, mode_t mode) {
    std::ofstream(dir_ / name) << content;
    ASSERT_EQ(::chmod((dir_ / name).c_str(), mode), 0);
  }

  fs::path dir_;
  std::string getcwd_;
  std::string path_;
};

TEST_F(FleetrunHost, PythonScriptMustBeAReadableFileAndPython3OnPath) {
  auto ok = ResolveProgram("train.py", path_);
  ASSERT_TRUE(ok.ok()) << ok.error();
  EXPECT_EQ(*ok, "train.py");

  auto missing = ResolveProgram("missing.py", path_);
  ASSERT_FALSE(missing.ok());
  EXPECT_THAT(missing.error(), HasSubstr("'missing.py' does not exist"));

  auto directory = ResolveProgram("adir.py", path_);
  ASSERT_FALSE(directory.ok());
  EXPECT_THAT(directory.error(), HasSubstr("adir.py"));

  auto no_python = ResolveProgram("train.py", (dir_ / "nothing-here").string());
  ASSERT_FALSE(no_python.ok());
  EXPECT_THAT(no_python.error(), HasSubstr("python3 is not on PATH"));
}

TEST_F(FleetrunHost, OtherProgramsMustBeExecutable) {
  auto with_slash = ResolveProgram("./run.sh", path_);
  ASSERT_TRUE(with_slash.ok()) << with_slash.error();
  EXPECT_EQ(*with_slash, "./run.sh");

  auto absolute = ResolveProgram((dir_ / "run.sh").string(), path_);
  ASSERT_TRUE(absolute.ok()) << absolute.error();
  EXPECT_EQ(*absolute, (dir_ / "run.sh").string());

  auto in_cwd = ResolveProgram("run.sh", path_);  // not on PATH, but here: exec'd as ./run.sh
  ASSERT_TRUE(in_cwd.ok()) << in_cwd.error();
  EXPECT_EQ(*in_cwd, "./run.sh");

  auto on_path = ResolveProgram("mytool", path_);  // exec'd through PATH, as given
  ASSERT_TRUE(on_path.ok()) << on_path.error();
  EXPECT_EQ(*on_path, "mytool");

  auto not_executable = ResolveProgram("./noexec.sh", path_);
  ASSERT_FALSE(not_executable.ok());
  EXPECT_THAT(not_executable.error(), HasSubstr("'./noexec.sh' does not exist or is not executable"));

  auto nowhere = ResolveProgram("no-such-tool", path_);
  ASSERT_FALSE(nowhere.ok());
  EXPECT_THAT(nowhere.error(), HasSubstr("'no-such-tool' is not a file here and not a command on PATH"));
}

TEST(FleetrunHostPorts, FindFreePortsReturnsDistinctBindablePorts) {
  auto ports = FindFreePorts(8);
  ASSERT_TRUE(ports.ok()) << ports.error();
  ASSERT_EQ(ports->size(), 8u);
  std::set<int> distinct(ports->begin(), ports->end());
  EXPECT_EQ(distinct.size(), 8u);
  for (int port : *ports) {
    EXPECT_GE(port, 1);
    EXPECT_LE(port, 65535);
  }
  auto none = FindFreePorts(0);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(FleetrunHostPorts, ReadHostFactsSeesThisProcess) {
  ::setenv("FLEETRUN_HOST_TEST_MARKER", "42", 1);
  HostFacts facts = ReadHostFacts();
  ::unsetenv("FLEETRUN_HOST_TEST_MARKER");
  EXPECT_EQ(facts.env["FLEETRUN_HOST_TEST_MARKER"], "42");
  EXPECT_THAT(facts.local_addresses, Contains("127.0.0.1"));
  EXPECT_THAT(facts.local_addresses, Contains("localhost"));
  EXPECT_GE(facts.gpu_count, 0);
  ASSERT_TRUE(facts.free_ports);
  ASSERT_TRUE(facts.resolve_program);
  auto two = facts.free_ports(2);
  ASSERT_TRUE(two.ok()) << two.error();
  EXPECT_EQ(two->size(), 2u);
  EXPECT_TRUE(facts.gloo_dir.empty()) << "created only once the plan is valid";
}

}  // namespace
}  // namespace fleet::launcher
