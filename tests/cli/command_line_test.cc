#include "fleet/cli/command_line.h"

#include <gtest/gtest.h>

namespace fleet::cli {
namespace {

CommandLine Parse(const std::vector<std::string>& args) {
  auto cl = ParseCommandLine(args);
  EXPECT_TRUE(cl.ok()) << cl.error();
  return cl.ok() ? *cl : CommandLine{};
}

std::string ErrorOf(const std::vector<std::string>& args) {
  auto cl = ParseCommandLine(args);
  EXPECT_FALSE(cl.ok());
  return cl.ok() ? "" : cl.error();
}

TEST(FleetctlCommandLineTest, SubmitTakesFleetrunStyleFlagsAndTheCommandAfterDashes) {
  const auto cl = Parse({"submit", "--server_num=2", "--worker-num", "4", "--gpus=1", "--image", "img", "--cpu=2",
                         "--memory=4Gi", "-e", "A=1", "--env=B=x=y", "--network=Service", "--restart_policy=ExitCode",
                         "--backoff_limit=5", "--gang=volcano", "--queue=q", "--priority_class=high",
                         "--sidecar_image=sc", "--name=job", "--wait", "--timeout=1h30m", "--", "python", "train.py",
                         "--lr", "0.1", "--", "x"});
  EXPECT_EQ(cl.command, Command::kSubmit);
  const SubmitOptions& s = cl.submit;
  EXPECT_EQ(s.server_num, 2);
  EXPECT_EQ(s.worker_num, 4);
  EXPECT_EQ(s.gpus, 1);
  EXPECT_EQ(s.image, "img");
  EXPECT_EQ(s.cpu, "2");
  EXPECT_EQ(s.memory, "4Gi");
  ASSERT_EQ(s.env.size(), 2u);
  EXPECT_EQ(s.env[1], std::make_pair(std::string("B"), std::string("x=y")));
  EXPECT_EQ(s.network, "Service");
  EXPECT_EQ(s.restart_policy, "ExitCode");
  EXPECT_EQ(s.backoff_limit, 5);
  EXPECT_EQ(s.gang, "volcano");
  EXPECT_EQ(s.queue, "q");
  EXPECT_EQ(s.priority_class, "high");
  EXPECT_EQ(s.sidecar_image, "sc");
  EXPECT_EQ(s.name, "job");
  EXPECT_TRUE(s.wait);
  EXPECT_EQ(s.timeout_seconds, 5400);
  EXPECT_EQ(s.command, (std::vector<std::string>{"python", "train.py", "--lr", "0.1", "--", "x"}));
}

// Submit's own flags after "--" stay with the training command, and are named so that submit can
// say where they went; the script's other flags are not.
TEST(FleetctlCommandLineTest, SubmitFlagsAfterTheDashesAreTheCommandsAndNamed) {
  const auto cl = Parse({"submit", "--image=img", "--", "python", "train.py", "--dry-run", "--lr=0.1", "--worker_num=2",
                         "-e", "X=1", "--timeout"});
  EXPECT_FALSE(cl.submit.dry_run);
  EXPECT_EQ(cl.submit.worker_num, 1);
  EXPECT_EQ(cl.submit.command, (std::vector<std::string>{"python", "train.py", "--dry-run", "--lr=0.1", "--worker_num=2",
                                                         "-e", "X=1", "--timeout"}));
  EXPECT_EQ(cl.submit.fleetctl_flags_in_command,
            (std::vector<std::string>{"--dry-run", "--worker_num", "-e", "--timeout"}));
  EXPECT_TRUE(Parse({"submit", "--image=img", "--", "python", "train.py", "--lr", "1"}).submit.fleetctl_flags_in_command.empty());
}

TEST(FleetctlCommandLineTest, GlobalFlagsGoAnywhereInEveryForm) {
  const auto cl = Parse({"--kubeconfig", "/k", "-nteam", "status", "--context=c", "job", "-o", "yaml"});
  EXPECT_EQ(cl.command, Command::kStatus);
  EXPECT_EQ(cl.global.kubeconfig, "/k");
  EXPECT_EQ(cl.global.context, "c");
  EXPECT_EQ(cl.global.ns, "team");
  EXPECT_EQ(cl.global.output, Output::kYaml);
  EXPECT_EQ(cl.names, std::vector<std::string>{"job"});
  EXPECT_EQ(Parse({"-n=a", "list", "-o=json"}).global.output, Output::kJson);
  EXPECT_EQ(Parse({"-n=a", "list"}).global.ns, "a");
}

TEST(FleetctlCommandLineTest, ShortFlagsMeanWhatTheyMeanToTheirCommand) {
  // -f: a file for submit (a value), --follow for logs (no value), as with kubectl.
  EXPECT_EQ(Parse({"submit", "-f", "job.yaml"}).submit.file, "job.yaml");
  const auto logs = Parse({"logs", "-f", "job", "--role=server", "--rank", "3", "-c", "fleet-sidecar", "--tail=10"});
  EXPECT_TRUE(logs.logs.follow);
  EXPECT_EQ(logs.names, std::vector<std::string>{"job"});
  EXPECT_EQ(logs.logs.role, "server");
  EXPECT_EQ(logs.logs.rank, 3);
  EXPECT_EQ(logs.logs.container, "fleet-sidecar");
  EXPECT_EQ(logs.logs.tail, 10);
  const auto list = Parse({"ls", "-A", "-l", "team=a"});
  EXPECT_EQ(list.command, Command::kList);
  EXPECT_TRUE(list.all_namespaces);
  EXPECT_EQ(list.selector, "team=a");
  EXPECT_EQ(Parse({"delete", "a", "b"}).names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(Parse({"status", "a", "--events=3"}).events, 3);
}

TEST(FleetctlCommandLineTest, HelpForEveryCommand) {
  EXPECT_EQ(Parse({"--help"}).help_for, Command::kHelp);
  EXPECT_EQ(Parse({"help"}).help_for, Command::kHelp);
  EXPECT_EQ(Parse({"help", "logs"}).help_for, Command::kLogs);
  EXPECT_EQ(Parse({"submit", "-h"}).help_for, Command::kSubmit);
  EXPECT_EQ(Parse({"status", "--help"}).help_for, Command::kStatus);   // no name needed for help
  for (Command c : {Command::kNone, Command::kSubmit, Command::kList, Command::kStatus, Command::kTop, Command::kLogs,
                    Command::kStop, Command::kResume, Command::kDelete, Command::kVersion}) {
    EXPECT_EQ(Usage(c).rfind("usage: fleetctl", 0), 0u);
  }
  EXPECT_EQ(Parse({"help", "ls"}).help_for, Command::kList);
  for (const char* command : {"submit", "list", "status", "top", "logs", "stop", "resume", "delete", "version", "help"}) {
    EXPECT_NE(Usage().find("\n  " + std::string(command) + " "), std::string::npos) << command << " is not listed";
  }
  EXPECT_NE(Usage(Command::kSubmit).find("--server_num N"), std::string::npos);
}

TEST(FleetctlCommandLineTest, MistakesAreNamed) {
  EXPECT_EQ(ErrorOf({}), "no command given (see fleetctl --help)");
  EXPECT_EQ(ErrorOf({"sumbit"}), "unknown command \"sumbit\" (see fleetctl --help)");
  EXPECT_EQ(ErrorOf({"submit", "--sever_num=1"}), "unknown flag --sever_num for submit (see fleetctl submit --help)");
  EXPECT_EQ(ErrorOf({"list", "--follow"}), "unknown flag --follow for list (see fleetctl list --help)");
  EXPECT_EQ(ErrorOf({"status", "job", "--events"}), "--events needs a value");
  EXPECT_EQ(ErrorOf({"submit", "--gpus=many"}), "--gpus: expected an integer from 0 to 64, got 'many'");
  EXPECT_EQ(ErrorOf({"submit", "--worker_num=0"}), "--worker_num: expected an integer from 1 to 10000, got '0'");
  EXPECT_EQ(ErrorOf({"submit", "--env=NOVALUE"}), "--env: expected NAME=VALUE, got 'NOVALUE'");
  EXPECT_EQ(ErrorOf({"list", "-o", "table"}), "--output: expected json or yaml, got 'table'");
  EXPECT_EQ(ErrorOf({"list", "-Ax"}), "unknown flag -x for list (see fleetctl list --help)");   // -Ax = -A -x
  EXPECT_EQ(ErrorOf({"list", "--", "x"}), "unexpected \"--\": only submit takes a command after it");
  EXPECT_EQ(ErrorOf({"status"}), "status needs the FleetJob's name");
  EXPECT_EQ(ErrorOf({"status", "a", "b"}), "unexpected argument \"b\"");
  EXPECT_EQ(ErrorOf({"list", "extra"}), "unexpected argument \"extra\"");
  EXPECT_EQ(ErrorOf({"list", "-A", "-n", "x"}), "--all-namespaces cannot be combined with --namespace");
  EXPECT_EQ(ErrorOf({"help", "nothing"}), "unknown command \"nothing\" (see fleetctl --help)");
}

TEST(FleetctlCommandLineTest, SubmitNeedsAJobAndConsistentFlags) {
  EXPECT_EQ(ErrorOf({"submit", "--", "python", "t.py"}), "submit needs --image (or -f FILE)");
  EXPECT_EQ(ErrorOf({"submit", "--image=i"}), "submit needs the training command after \"--\", e.g. -- python train.py");
  EXPECT_EQ(ErrorOf({"submit", "-f", "j.yaml", "--image=i"}),
            "--image cannot be combined with -f: the manifest describes the whole job");
  EXPECT_EQ(ErrorOf({"submit", "-f", "j.yaml", "--", "python"}), "a command after \"--\" cannot be combined with -f");
  EXPECT_EQ(ErrorOf({"submit", "-f", "j.yaml", "--timeout=5m"}), "--timeout applies to --wait only");
  EXPECT_EQ(ErrorOf({"submit", "-f", "j.yaml", "--wait", "--dry-run"}), "--wait cannot be combined with --dry-run");
  EXPECT_EQ(ErrorOf({"submit", "-f", "j.yaml", "--until=done"}), "--until applies to --wait only");
  EXPECT_EQ(ErrorOf({"submit", "-f", "j.yaml", "--wait", "--until=never"}),
            "--until: expected running or done, got 'never'");
  const auto ok = Parse({"submit", "-f", "-", "--wait", "--timeout=90"});
  EXPECT_EQ(ok.submit.timeout_seconds, 90);
  EXPECT_FALSE(ok.submit.until_done);
  EXPECT_TRUE(Parse({"submit", "-f", "-", "--wait", "--until=done"}).submit.until_done);
  EXPECT_FALSE(Parse({"submit", "-f", "-", "--wait", "--until", "running"}).submit.until_done);
  for (const char* bad : {"--timeout=0", "--timeout=5d", "--timeout=1h30", "--timeout=", "--timeout=m"}) {
    EXPECT_NE(ErrorOf({"submit", "-f", "j", "--wait", bad}).find("expected a duration"), std::string::npos) << bad;
  }
}

TEST(FleetctlCommandLineTest, TopTakesAJobAnIntervalAndOnce) {
  const auto cl = Parse({"top", "job"});
  EXPECT_EQ(cl.command, Command::kTop);
  EXPECT_EQ(cl.names, std::vector<std::string>{"job"});
  EXPECT_EQ(cl.top.interval_seconds, 2);
  EXPECT_FALSE(cl.top.once);
  const auto once = Parse({"top", "job", "--interval=1m", "--once"});
  EXPECT_EQ(once.top.interval_seconds, 60);
  EXPECT_TRUE(once.top.once);
  EXPECT_EQ(ErrorOf({"top"}), "top needs the FleetJob's name");
  EXPECT_NE(ErrorOf({"top", "job", "--interval=0s"}).find("--interval: expected a duration"), std::string::npos);
  EXPECT_NE(Usage(Command::kTop).find("20 slowest"), std::string::npos);
}

}  // namespace
}  // namespace fleet::cli
