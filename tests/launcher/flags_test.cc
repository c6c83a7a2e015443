// ParseFlags: both flag forms, the script boundary, strict errors (contract section 7, issue 2 section 3).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ostream>
#include <string>
#include <vector>

#include "fleet/launcher/flags.h"
#include "must_parse.h"
#include "fleet/launcher/report.h"

namespace fleet::launcher {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

TEST(FleetrunFlags, DefaultsWithOnlyAScript) {
  const LaunchOptions o = MustParse({"train.py"});
  EXPECT_EQ(o.training_script, "train.py");
  EXPECT_THAT(o.training_script_args, IsEmpty());
  EXPECT_EQ(o.ips, "127.0.0.1");
  EXPECT_EQ(o.log_dir, "log");
  EXPECT_DOUBLE_EQ(o.grace_period_seconds, 5.0);
  EXPECT_DOUBLE_EQ(o.server_timeout_seconds, 300.0);
  EXPECT_FALSE(o.gpus);
  EXPECT_FALSE(o.nproc_per_node);
  EXPECT_FALSE(o.start_port);
  EXPECT_FALSE(o.server_num);
  EXPECT_FALSE(o.worker_num);
  EXPECT_FALSE(o.servers);
  EXPECT_FALSE(o.workers);
  EXPECT_FALSE(o.heter_workers);
  EXPECT_FALSE(o.heter_worker_num);
  EXPECT_FALSE(o.heter_devices);
  EXPECT_FALSE(o.http_port);
  EXPECT_FALSE(o.host);
  EXPECT_FALSE(o.run_mode);
  EXPECT_FALSE(o.help);
  EXPECT_FALSE(o.version);
}

void ExpectAllFlagsSet(const LaunchOptions& o) {
  EXPECT_EQ(o.gpus, "0,1");
  EXPECT_EQ(o.ips, "10.0.0.1,10.0.0.2");
  EXPECT_EQ(o.host, "10.0.0.2");
  EXPECT_EQ(o.nproc_per_node, 2);
  EXPECT_EQ(o.start_port, 7000);
  EXPECT_EQ(o.server_num, 2);
  EXPECT_EQ(o.worker_num, 3);
  EXPECT_EQ(o.servers, "a:1,b:2");
  EXPECT_EQ(o.workers, "c,d");
  EXPECT_EQ(o.heter_workers, "e:1;f:2");
  EXPECT_EQ(o.heter_worker_num, "1;1");
  EXPECT_EQ(o.heter_devices, "gpu;cpu");
  EXPECT_EQ(o.http_port, 6999);
  EXPECT_EQ(o.run_mode, "ps-heter");
  EXPECT_EQ(o.log_dir, "out/logs");
  EXPECT_DOUBLE_EQ(o.grace_period_seconds, 0.5);
  EXPECT_DOUBLE_EQ(o.server_timeout_seconds, 30);
  EXPECT_EQ(o.training_script, "train.py");
  EXPECT_THAT(o.training_script_args, ElementsAre("x"));
}

TEST(FleetrunFlags, EqualsForm) {
  ExpectAllFlagsSet(MustParse({"--gpus=0,1", "--ips=10.0.0.1,10.0.0.2", "--host=10.0.0.2",
                               "--nproc_per_node=2", "--start_port=7000", "--server_num=2",
                               "--worker_num=3", "--servers=a:1,b:2", "--workers=c,d",
                               "--heter_workers=e:1;f:2", "--heter_worker_num=1;1",
                               "--heter_devices=gpu;cpu", "--http_port=6999", "--run_mode=ps-heter",
                               "--log_dir=out/logs", "--grace_period=0.5", "--server_timeout=30", "train.py", "x"}));
}

TEST(FleetrunFlags, SpaceForm) {
  ExpectAllFlagsSet(MustParse({"--gpus", "0,1", "--ips", "10.0.0.1,10.0.0.2", "--host", "10.0.0.2",
                               "--nproc_per_node", "2", "--start_port", "7000", "--server_num", "2",
                               "--worker_num", "3", "--servers", "a:1,b:2", "--workers", "c,d",
                               "--heter_workers", "e:1;f:2", "--heter_worker_num", "1;1",
                               "--heter_devices", "gpu;cpu", "--http_port", "6999", "--run_mode",
                               "ps-heter", "--log_dir", "out/logs", "--grace_period", "0.5", "--server_timeout", "30", "train.py",
                               "x"}));
}

TEST(FleetrunFlags, ValueMayContainEqualsSign) {
  const LaunchOptions o = MustParse({"--log_dir=a=b", "train.py"});
  EXPECT_EQ(o.log_dir, "a=b");
}

TEST(FleetrunFlags, ElasticFlagsAreKeptAsGiven) {
  const LaunchOptions o = MustParse({"--elastic_server=127.0.0.1:2379", "--job_id", "j1", "--np=2:4", "train.py"});
  EXPECT_EQ(o.elastic_server, "127.0.0.1:2379");
  EXPECT_EQ(o.job_id, "j1");
  EXPECT_EQ(o.np, "2:4");
}

TEST(FleetrunFlags, SelectedGpusIsPaddlesOlderSpellingOfGpus) {
  EXPECT_EQ(MustParse({"--selected_gpus=2,3", "train.py"}).gpus, "2,3");
}

TEST(FleetrunFlags, ScriptArgumentsAreKeptVerbatimEvenWhenTheyLookLikeFlags) {
  const LaunchOptions o =
      MustParse({"--nproc_per_node=2", "train.py", "--lr", "0.1", "--gpus=9", "--elastic_server=x",
                 "--bogus", "-x", "--", "", "a b", "--help", "--version"});
  EXPECT_EQ(o.training_script, "train.py");
  EXPECT_THAT(o.training_script_args,
              ElementsAre("--lr", "0.1", "--gpus=9", "--elastic_server=x", "--bogus", "-x", "--", "",
                          "a b", "--help", "--version"));
  EXPECT_EQ(o.nproc_per_node, 2);
  EXPECT_FALSE(o.gpus) << "--gpus after the script belongs to the script";
  EXPECT_FALSE(o.help);
  EXPECT_FALSE(o.version);
}

TEST(FleetrunFlags, DoubleDashEndsTheFlags) {
  const LaunchOptions o = MustParse({"--log_dir", "l", "--", "--odd-script.py", "--x", "y"});
  EXPECT_EQ(o.log_dir, "l");
  EXPECT_EQ(o.training_script, "--odd-script.py");
  EXPECT_THAT(o.training_script_args, ElementsAre("--x", "y"));

  const LaunchOptions plain = MustParse({"--", "train.py"});
  EXPECT_EQ(plain.training_script, "train.py");
  EXPECT_THAT(plain.training_script_args, IsEmpty());
}

TEST(FleetrunFlags, HelpAndVersion) {
  EXPECT_TRUE(MustParse({"--help"}).help);
  EXPECT_TRUE(MustParse({"-h"}).help);
  EXPECT_TRUE(MustParse({"--nproc_per_node=2", "--help"}).help);
  EXPECT_TRUE(MustParse({"--version"}).version);
  EXPECT_THAT(UsageText(), HasSubstr("usage: fleetrun"));
}

TEST(FleetrunFlags, ConfigurationTableListsTheFlagsAndScriptArgs) {
  const LaunchOptions o = MustParse({"--nproc_per_node=3", "train.py", "a", "--b"});
  const std::string table = FormatConfiguration(o);
  EXPECT_THAT(table, StartsWith("-----------  Configuration Arguments -----------\n"));
  EXPECT_THAT(table, HasSubstr("\nnproc_per_node: 3\n"));
  EXPECT_THAT(table, HasSubstr("\ntraining_script: train.py\n"));
  EXPECT_THAT(table, HasSubstr("\ntraining_script_args: ['a', '--b']\n"));
  EXPECT_THAT(table, HasSubstr("\ngpus: None\n"));
}

struct BadFlags {
  std::string name;
  std::vector<std::string> args;
  std::vector<std::string> message_parts;  // each must appear in the error
};

void PrintTo(const BadFlags& c, std::ostream* os) { *os << c.name; }

class FleetrunFlagsError : public ::testing::TestWithParam<BadFlags> {};

TEST_P(FleetrunFlagsError, IsRefusedWithAMessageNamingTheProblem) {
  const BadFlags& c = GetParam();
  auto parsed = ParseFlags(c.args);
  ASSERT_FALSE(parsed.ok()) << "accepted; script='" << parsed->training_script << "'";
  EXPECT_FALSE(parsed.error().empty());
  EXPECT_EQ(parsed.error().find('\n'), std::string::npos) << "must be one line: " << parsed.error();
  for (const std::string& part : c.message_parts) EXPECT_THAT(parsed.error(), HasSubstr(part));
}

INSTANTIATE_TEST_SUITE_P(
    Cases, FleetrunFlagsError,
    ::testing::Values(
        BadFlags{"unknown_flag_equals", {"--bogus=1", "train.py"}, {"unknown flag --bogus"}},
        BadFlags{"unknown_flag_space", {"--bogus", "1", "train.py"}, {"unknown flag --bogus"}},
        BadFlags{"single_dash_flag", {"-x", "train.py"}, {"unknown flag -x"}},
        BadFlags{"missing_value_at_end", {"--gpus"}, {"--gpus needs a value"}},
        BadFlags{"missing_value_log_dir", {"--nproc_per_node=2", "--log_dir"}, {"--log_dir needs a value"}},
        BadFlags{"no_arguments", {}, {"no training script"}},
        BadFlags{"flags_but_no_script", {"--nproc_per_node=2"}, {"no training script"}},
        BadFlags{"double_dash_but_no_script", {"--"}, {"no training script"}},
        BadFlags{"nproc_zero", {"--nproc_per_node=0", "train.py"}, {"--nproc_per_node", "at least 1"}},
        BadFlags{"nproc_not_a_number", {"--nproc_per_node=two", "train.py"}, {"--nproc_per_node", "'two'"}},
        BadFlags{"nproc_negative", {"--nproc_per_node=-1", "train.py"}, {"--nproc_per_node", "'-1'"}},
        BadFlags{"server_num_zero", {"--server_num=0", "train.py"}, {"--server_num", "at least 1"}},
        BadFlags{"worker_num_not_a_number", {"--worker_num", "x", "train.py"}, {"--worker_num", "'x'"}},
        BadFlags{"start_port_out_of_range", {"--start_port=70000", "train.py"}, {"--start_port", "70000", "from 1 to 65535"}},
        BadFlags{"start_port_zero", {"--start_port=0", "train.py"}, {"--start_port", "from 1 to 65535"}},
        BadFlags{"http_port_not_a_number", {"--http_port=http", "train.py"}, {"--http_port", "expected an integer", "'http'"}},
        BadFlags{"empty_log_dir", {"--log_dir=", "train.py"}, {"--log_dir: must not be empty"}},
        BadFlags{"negative_grace_period", {"--grace_period=-1", "train.py"}, {"--grace_period", "'-1'"}},
        BadFlags{"text_grace_period", {"--grace_period=soon", "train.py"}, {"--grace_period", "'soon'"}},
        BadFlags{"negative_server_timeout", {"--server_timeout=-5", "train.py"}, {"--server_timeout", "[0, 86400]", "'-5'"}},
        BadFlags{"nan_server_timeout", {"--server_timeout=nan", "train.py"}, {"--server_timeout", "'nan'"}},
        BadFlags{"unsupported_elastic_scale", {"--scale=1", "train.py"}, {"--scale", "not supported by fleetrun"}},
        BadFlags{"unsupported_elastic_level", {"--elastic_level", "2", "train.py"}, {"--elastic_level", "not supported"}},
        BadFlags{"unsupported_elastic_pre_hook", {"--elastic_pre_hook=x", "train.py"}, {"--elastic_pre_hook", "not supported"}}),
    [](const ::testing::TestParamInfo<BadFlags>& param_info) { return param_info.param.name; });

}  // namespace
}  // namespace fleet::launcher
