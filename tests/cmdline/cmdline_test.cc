// fleet::cmdline: how the four command lines read flags, word mistakes and print help.
#include "fleet/cmdline/cmdline.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace fleet::cmdline {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A small tool with a command, the shapes the four binaries use.
struct Tool {
  std::string name;
  int count = 3;
  bool wait = false;
  std::string mode = "auto";
  std::unique_ptr<CLI::App> app = NewApp("tool", "Does things.");
  CLI::App* run = nullptr;

  Tool() {
    app->add_option("-n,--name", name, "a name");
    run = app->add_subcommand("run", "run it");
    run->add_option("--count", count, "how many")->type_name("N")->transform(IntegerIn(1, 100))->capture_default_str();
    AddSwitch(*run, "--wait", wait, "wait for it");
    run->add_option("--mode", mode, "how")->check(OneOf({"auto", "on", "off"}));
    AddHelpCommand(*app);
  }
};

TEST(CmdlineTest, ValuesInEitherFormAndEmptyOnesStayEmpty) {
  Tool t;
  ASSERT_TRUE(Parse(*t.app, {"run", "--count", "7", "--name=", "--mode=on"}).ok());
  EXPECT_EQ(t.count, 7);
  EXPECT_EQ(t.name, "") << "--name= is an empty value, not --name taking the next argument";
  EXPECT_EQ(t.mode, "on");
  Tool short_form;
  ASSERT_TRUE(Parse(*short_form.app, {"-n=x", "run"}).ok());
  EXPECT_EQ(short_form.name, "x");
}

TEST(CmdlineTest, TheLastOfARepeatedFlagCountsAndIntegersAreDecimal) {
  Tool t;
  ASSERT_TRUE(Parse(*t.app, {"run", "--count=2", "--count=010"}).ok());
  EXPECT_EQ(t.count, 10);
}

TEST(CmdlineTest, Switches) {
  for (const auto& [arg, expected] : std::vector<std::pair<std::string, bool>>{
           {"--wait", true}, {"--wait=true", true}, {"--wait=1", true}, {"--wait=false", false}, {"--wait=0", false}}) {
    Tool t;
    ASSERT_TRUE(Parse(*t.app, {"run", arg}).ok()) << arg;
    EXPECT_EQ(t.wait, expected) << arg;
  }
}

TEST(CmdlineTest, MistakesAreOneLineNamingTheFlagOrArgument) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "no command given (see tool --help)"},
      {{"walk"}, "unknown command \"walk\" (see tool --help)"},
      {{"run", "--bogus=1"}, "unknown flag --bogus for run (see tool run --help)"},
      {{"--bogus", "run"}, "unknown flag --bogus for run (see tool run --help)"},
      {{"run", "extra"}, "unexpected argument \"extra\""},
      {{"run", "--count"}, "--count needs a value"},
      {{"run", "--count=0"}, "--count: expected an integer from 1 to 100, got '0'"},
      {{"run", "--count=0x10"}, "--count: expected an integer from 1 to 100, got '0x10'"},
      {{"run", "--mode=sometimes"}, "--mode: expected auto, on or off, got 'sometimes'"},
      {{"run", "--wait=yes"}, "--wait: expected true, false, 1 or 0, got 'yes'"},
      {{"help", "walk"}, "unknown command \"walk\" (see tool --help)"},
  };
  for (const auto& [args, message] : cases) {
    Tool t;
    auto parsed = Parse(*t.app, args);
    ASSERT_FALSE(parsed.ok()) << message;
    EXPECT_EQ(parsed.error(), message);
  }
}

TEST(CmdlineTest, HelpNamesTheCommandItWasAskedFor) {
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{{"--help"}, {"help"}}) {
    Tool t;
    auto help = Parse(*t.app, args);
    ASSERT_TRUE(help.ok()) << help.error();
    EXPECT_EQ(*help, t.app.get()) << args[0];
  }
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{{"run", "--help"}, {"-h", "run"}, {"help", "run"}}) {
    Tool t;
    auto help = Parse(*t.app, args);
    ASSERT_TRUE(help.ok()) << help.error();
    EXPECT_EQ(*help, t.run) << args[0];
  }
  Tool t;
  EXPECT_EQ(*Parse(*t.app, {"run"}), nullptr);
}

TEST(CmdlineTest, HelpIsGeneratedFromTheDeclarations) {
  Tool t;
  const std::string overview = Help(*t.app);
  EXPECT_THAT(overview, StartsWith("usage: tool [flags] COMMAND [flags]\n\nDoes things.\n"));
  EXPECT_THAT(overview, HasSubstr("  -n, --name TEXT"));
  EXPECT_THAT(overview, HasSubstr("\n  run "));
  const std::string run = Help(*t.run);
  EXPECT_THAT(run, StartsWith("usage: tool run [flags]\n"));
  EXPECT_THAT(run, HasSubstr("--count N"));
  EXPECT_THAT(run, HasSubstr("how many (default 3)"));
  EXPECT_THAT(run, HasSubstr("--mode auto|on|off"));
}

TEST(CmdlineTest, APrefixCommandKeepsItsArgumentsAsGiven) {
  std::string log_dir;
  auto app = NewApp("launch", "Launches.", "script [args...]");
  app->prefix_command();
  app->add_option("--log_dir", log_dir, "logs");
  ASSERT_TRUE(Parse(*app, {"--log_dir", "l", "train.py", "--log_dir=", "-n=1", "--", ""}).ok());
  EXPECT_EQ(log_dir, "l");
  EXPECT_EQ(app->remaining(), (std::vector<std::string>{"train.py", "--log_dir=", "-n=1", "--", ""}));
  EXPECT_THAT(Help(*app), StartsWith("usage: launch [flags] script [args...]\n"));

  auto unknown = NewApp("launch", "Launches.", "script [args...]");
  unknown->prefix_command();
  EXPECT_EQ(Parse(*unknown, {"--bogus", "train.py"}).error(), "unknown flag --bogus (see launch --help)");
}

}  // namespace
}  // namespace fleet::cmdline
