// Paddle 2.3+'s launcher command line and env: the flags, the env over them (ApplyLauncherEnv),
// malformed values named by their flag or variable, and --master etcd:// onto the elastic settings.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fleet/launcher/elastic.h"
#include "fleet/launcher/flags.h"
#include "must_parse.h"

namespace fleet::launcher {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

// Parses `args` and applies `env`; the notes go to *notes.
Result<LaunchOptions> Launch(const std::vector<std::string>& args, const EnvMap& env,
                             std::vector<std::string>* notes = nullptr) {
  FLEET_ASSIGN_OR_RETURN(auto options, ParseFlags(args));
  FLEET_ASSIGN_OR_RETURN(auto said, ApplyLauncherEnv(options, env));
  if (notes) *notes = said;
  return options;
}

TEST(FleetrunLaunchFlags, NewLauncherFlagsAreParsed) {
  const LaunchOptions o =
      MustParse({"--master", "10.0.0.1:8090", "--nnodes=2", "--rank", "1", "--devices=0,1", "--job_id=j7",
                 "--run_mode", "collective", "--log_level=debug", "--max_restart=3", "--elastic_timeout=30",
                 "--log_dir", "out", "--rendezvous_timeout=9", "train.py"});
  EXPECT_EQ(o.master, "10.0.0.1:8090");
  EXPECT_EQ(o.nnodes, "2");
  EXPECT_EQ(o.rank, 1);
  EXPECT_EQ(o.gpus, "0,1") << "--devices is --gpus";
  EXPECT_EQ(o.job_id, "j7");
  EXPECT_EQ(o.run_mode, "collective");
  EXPECT_EQ(o.log_level, "debug");
  EXPECT_EQ(o.max_restart, 3);
  EXPECT_EQ(o.elastic_timeout, 30);
  EXPECT_EQ(o.log_dir, "out");
  EXPECT_DOUBLE_EQ(o.rendezvous_timeout_seconds, 9);
}

TEST(FleetrunLaunchFlags, PaddlesNewPsFlagsAreTheLegacyOnes) {
  const LaunchOptions o = MustParse({"--run_mode=ps", "--server_num=2", "--trainer_num=3", "train.py"});
  EXPECT_EQ(o.worker_num, 3);
  EXPECT_EQ(MustParse({"--servers=a:1", "--trainers=b:2,c:3", "train.py"}).workers, "b:2,c:3");
}

TEST(FleetrunLaunchFlags, MalformedNewFlagsNameTheFlag) {
  struct Case {
    std::vector<std::string> args;
    std::string part;
  };
  for (const Case& c : std::vector<Case>{
           {{"--nnodes=2:x", "t.py"}, "--nnodes: \"2:x\" is not N or MIN:MAX"},
           {{"--nnodes=0", "t.py"}, "--nnodes: \"0\" is not N or MIN:MAX (a job needs at least 1 node)"},
           {{"--nnodes=4:2", "t.py"}, "MAX is below MIN"},
           {{"--master=10.0.0.1", "t.py"}, "--master: \"10.0.0.1\" is not ip:port or etcd://host:port"},
           {{"--master=etcd://", "t.py"}, "--master: \"etcd://\" is not ip:port"},
           {{"--rank=x", "t.py"}, "--rank"},
           {{"--rank=-2", "t.py"}, "--rank"},
           {{"--log_level=LOUD", "t.py"}, "--log_level: \"LOUD\" is not a log level"},
           {{"--max_restart=-1", "t.py"}, "--max_restart"},
       }) {
    auto parsed = ParseFlags(c.args);
    ASSERT_FALSE(parsed.ok()) << c.args.front();
    EXPECT_THAT(parsed.error(), HasSubstr(c.part));
    EXPECT_EQ(parsed.error().find('\n'), std::string::npos) << parsed.error();
  }
}

TEST(FleetrunLaunchEnv, EnvWinsOverTheFlagAndSaysSo) {
  std::vector<std::string> notes;
  auto o = Launch({"--master=10.0.0.1:1", "--nnodes=3", "--rank=0", "--job_id=a", "train.py"},
                  {{"PADDLE_MASTER", "10.0.0.9:7000"}, {"PADDLE_NNODES", "2"}, {"PADDLE_RANK", "1"}, {"PADDLE_JOB_ID", "b"}},
                  &notes);
  ASSERT_TRUE(o.ok()) << o.error();
  EXPECT_EQ(o->master, "10.0.0.9:7000");
  EXPECT_EQ(o->nnodes, "2");
  EXPECT_EQ(o->rank, 1);
  EXPECT_EQ(o->job_id, "b");
  EXPECT_THAT(notes, Contains("env PADDLE_RANK=1 overrides --rank (the env wins, as in Paddle's launcher)"));
  EXPECT_THAT(notes, Contains(StartsWith("env PADDLE_MASTER=10.0.0.9:7000 overrides --master")));
}

TEST(FleetrunLaunchEnv, EveryMappedVariableSetsItsOption) {
  std::vector<std::string> notes;
  auto o = Launch({"train.py"},
                  {{"POD_IP", "10.1.2.3"}, {"PADDLE_MASTER", "10.1.2.3:8090"}, {"PADDLE_NNODES", "4"}, {"PADDLE_RANK", "2"},
                   {"PADDLE_JOB_ID", "run-5"}, {"PADDLE_NPROC_PER_NODE", "8"}, {"PADDLE_DEVICES", "0,1"},
                   {"PADDLE_RUN_MODE", "collective"}, {"PADDLE_LOG_DIR", "/var/log/job"}, {"PADDLE_LOG_LEVEL", "WARNING"},
                   {"PADDLE_MAX_RESTART", "5"}, {"PADDLE_ELASTIC_TIMEOUT", "45"}},
                  &notes);
  ASSERT_TRUE(o.ok()) << o.error();
  EXPECT_EQ(o->host, "10.1.2.3");
  EXPECT_EQ(o->master, "10.1.2.3:8090");
  EXPECT_EQ(o->nnodes, "4");
  EXPECT_EQ(o->rank, 2);
  EXPECT_EQ(o->job_id, "run-5");
  EXPECT_EQ(o->nproc_per_node, 8);
  EXPECT_EQ(o->gpus, "0,1");
  EXPECT_EQ(o->run_mode, "collective");
  EXPECT_EQ(o->log_dir, "/var/log/job");
  EXPECT_EQ(o->log_level, "WARNING");
  EXPECT_EQ(o->max_restart, 5);
  EXPECT_EQ(o->elastic_timeout, 45);
  EXPECT_THAT(notes, Contains("env PADDLE_NPROC_PER_NODE=8 sets --nproc_per_node"));
  EXPECT_EQ(notes.size(), 12u);
}

TEST(FleetrunLaunchEnv, EmptyValuesAreUnsetAndRankMinusOneIsNoRank) {
  auto o = Launch({"--rank=1", "train.py"}, {{"PADDLE_MASTER", ""}, {"PADDLE_RANK", "-1"}, {"PADDLE_NNODES", " "}});
  ASSERT_TRUE(o.ok()) << o.error();
  EXPECT_FALSE(o->master);
  EXPECT_FALSE(o->rank);
  EXPECT_FALSE(o->nnodes);
}

TEST(FleetrunLaunchEnv, MalformedValuesGiveOneLineNamingTheVariable) {
  struct Case {
    EnvMap env;
    std::string message;   // the whole error starts with it
  };
  for (const Case& c : std::vector<Case>{
           {{{"PADDLE_NNODES", "2:x"}}, "PADDLE_NNODES: \"2:x\" is not N or MIN:MAX"},
           {{{"PADDLE_NNODES", "1:2:3"}}, "PADDLE_NNODES: \"1:2:3\" is not N or MIN:MAX"},
           {{{"PADDLE_RANK", "one"}}, "PADDLE_RANK: \"one\" is not a whole number of at least -1"},
           {{{"PADDLE_NPROC_PER_NODE", "0"}}, "PADDLE_NPROC_PER_NODE: \"0\" is not a whole number of at least 1"},
           {{{"PADDLE_MAX_RESTART", "-3"}}, "PADDLE_MAX_RESTART: \"-3\""},
           {{{"PADDLE_MASTER", "etcd://:2379"}}, "PADDLE_MASTER: \"etcd://:2379\" is not ip:port or etcd://host:port"},
           {{{"PADDLE_MASTER", "http://10.0.0.1:80"}}, "PADDLE_MASTER: \"http://10.0.0.1:80\" is not ip:port"},
           {{{"PADDLE_ELASTIC_TIMEOUT", "soon"}}, "PADDLE_ELASTIC_TIMEOUT: \"soon\" is not a positive number of seconds"},
           {{{"PADDLE_LOG_LEVEL", "x"}}, "PADDLE_LOG_LEVEL: \"x\" is not a log level"},
           {{{"PADDLE_RUN_MODE", "rpc"}}, "PADDLE_RUN_MODE: \"rpc\""},
       }) {
    auto o = Launch({"train.py"}, c.env);
    ASSERT_FALSE(o.ok()) << c.message;
    EXPECT_THAT(o.error(), StartsWith(c.message));
    EXPECT_EQ(o.error().find('\n'), std::string::npos) << o.error();
  }
}

TEST(FleetrunLaunchEnv, EtcdMasterIsTheElasticModeWithItsPrefixRemovedAsAPrefix) {
  // Paddle's strip("etcd://") would leave "-0:2379" of this host.
  auto o = Launch({"--master=etcd://etcd-0:2379", "--nnodes=2:4", "--job_id=j", "train.py"},
                  {{"PADDLE_ELASTIC_TIMEOUT", "45"}});
  ASSERT_TRUE(o.ok()) << o.error();
  EXPECT_EQ(o->elastic_server, "etcd-0:2379");
  EXPECT_EQ(o->np, "2:4");
  EXPECT_FALSE(o->master);
  EXPECT_FALSE(HttpMaster(*o));
  auto elastic = ElasticSettingsFrom(*o, {{"POD_IP", "10.0.0.5"}});
  ASSERT_TRUE(elastic.ok()) << elastic.error();
  ASSERT_TRUE(elastic->has_value());
  EXPECT_EQ((*elastic)->server, "etcd-0:2379");
  EXPECT_EQ((*elastic)->job_id, "j");
  EXPECT_EQ((*elastic)->np.min, 2);
  EXPECT_EQ((*elastic)->np.max, 4);
  EXPECT_DOUBLE_EQ((*elastic)->timeout_seconds, 45) << "--elastic_timeout / PADDLE_ELASTIC_TIMEOUT";
}

TEST(FleetrunLaunchEnv, EtcdMasterFromEnvTakesTheJobIdFromEnvOrDefault) {
  std::vector<std::string> notes;
  auto o = Launch({"train.py"}, {{"PADDLE_MASTER", "etcd://10.0.0.2:2379"}, {"PADDLE_NNODES", "3"}}, &notes);
  ASSERT_TRUE(o.ok()) << o.error();
  EXPECT_EQ(o->job_id, "default");
  EXPECT_EQ(o->np, "3");
  EXPECT_THAT(notes, Contains(HasSubstr("the job is \"default\" in etcd")));
  auto with_id = Launch({"train.py"}, {{"PADDLE_MASTER", "etcd://10.0.0.2:2379"}, {"PADDLE_JOB_ID", "run-9"}});
  ASSERT_TRUE(with_id.ok()) << with_id.error();
  EXPECT_EQ(with_id->job_id, "run-9");
  EXPECT_EQ(with_id->np, "1") << "Paddle's default --nnodes";
}

TEST(FleetrunLaunchEnv, AJobIdAloneNamesAJobThatIsNotElastic) {
  auto o = Launch({"train.py"}, {{"PADDLE_MASTER", "10.0.0.1:8090"}, {"PADDLE_NNODES", "2"}, {"PADDLE_JOB_ID", "run-3"}});
  ASSERT_TRUE(o.ok()) << o.error();
  EXPECT_EQ(HttpMaster(*o), "10.0.0.1:8090");
  auto elastic = ElasticSettingsFrom(*o, {});
  ASSERT_TRUE(elastic.ok()) << elastic.error();
  EXPECT_FALSE(elastic->has_value());
}

TEST(FleetrunLaunchEnv, ConflictsAreErrors) {
  auto both = Launch({"--master=etcd://10.0.0.2:2379", "--elastic_server=10.0.0.3:2379", "--np=2", "train.py"}, {});
  ASSERT_FALSE(both.ok());
  EXPECT_THAT(both.error(), HasSubstr("drop --elastic_server/--np"));
  auto elastic_http = Launch({"--master=10.0.0.1:8090", "--nnodes=2:4", "train.py"}, {});
  ASSERT_FALSE(elastic_http.ok());
  EXPECT_THAT(elastic_http.error(), HasSubstr("--nnodes: \"2:4\": MIN:MAX (elastic) needs --master etcd://"));
  auto no_master = Launch({"--nnodes=2", "train.py"}, {});
  ASSERT_FALSE(no_master.ok());
  EXPECT_THAT(no_master.error(), HasSubstr("--nnodes 2 needs --master"));
  auto ips = Launch({"--master=10.0.0.1:8090", "--ips=10.0.0.1,10.0.0.2", "train.py"}, {});
  ASSERT_FALSE(ips.ok());
  EXPECT_THAT(ips.error(), HasSubstr("--master and --ips"));
}

TEST(FleetrunLaunchEnv, NnodesFromATrainersOwnEnvWithoutMasterIsIgnored) {
  std::vector<std::string> notes;
  auto o = Launch({"train.py"}, {{"PADDLE_NNODES", "4"}}, &notes);
  ASSERT_TRUE(o.ok()) << o.error();
  EXPECT_FALSE(o->nnodes);
  EXPECT_THAT(notes, Contains(HasSubstr("ignored without PADDLE_MASTER")));
}

TEST(FleetrunLaunchEnv, LegacyLaunchesAreUnchanged) {
  auto o = Launch({"--ips=10.0.0.1,10.0.0.2", "--gpus=0", "train.py"}, {{"PATH", "/bin"}});
  ASSERT_TRUE(o.ok()) << o.error();
  EXPECT_EQ(o->ips, "10.0.0.1,10.0.0.2");
  EXPECT_FALSE(o->master);
  EXPECT_FALSE(HttpMaster(*o));
  std::vector<std::string> notes;
  ASSERT_TRUE(Launch({"train.py"}, {}, &notes).ok());
  EXPECT_THAT(notes, IsEmpty());
}

}  // namespace
}  // namespace fleet::launcher
