// fleet-ps-server as its own process, started from a Paddle env: a server killed mid-job gives the
// trainer an error naming it; servers exit 0 once every trainer stopped; a bad env exits 2; a busy
// port exits 1; SIGTERM exits 143; --model_dir loads a checkpoint; --sparse_max_rows bounds sparse
// tables.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "../common/test_process.h"
#include "ps_test_util.h"

#ifndef FLEET_PS_SERVER_PATH
#define FLEET_PS_SERVER_PATH "fleet-ps-server"
#endif

namespace fleet::ps {
namespace {

using testing::Clock;
using testing::Connect;
using testing::Options;
using testing::TempDir;

using fleet::test::FreePort;
using fleet::test::ReadFile;

// A child process with its output in a file; killed (SIGKILL) if still running at the end.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env, std::string log)
      : log_(std::move(log)) {
    std::vector<std::string> env_strings;
    for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      std::vector<char*> args, envp;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      for (auto& e : env_strings) envp.push_back(e.data());
      envp.push_back(nullptr);
      ::execve(args[0], args.data(), envp.data());
      ::_exit(127);
    }
  }
  ~Child() {
    if (pid_ > 0 && !exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  void Signal(int sig) { ::kill(pid_, sig); }
  // The exit status (128 + signal for a signal), or -1 if it still runs after `limit`.
  int WaitExit(std::chrono::milliseconds limit) {
    int status = 0;
    const bool done = testing::PollUntil([&] { return ::waitpid(pid_, &status, WNOHANG) == pid_; }, limit);
    if (!done) return -1;
    exited_ = true;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  std::string output() const { return ReadFile(log_); }

 private:
  pid_t pid_ = -1;
  bool exited_ = false;
  std::string log_;
};

// n fleet-ps-server processes of one job.
struct ServerJob {
  TempDir logs;
  std::vector<std::string> endpoints;
  std::vector<std::unique_ptr<Child>> servers;

  ServerJob(int n, int trainers, const std::vector<std::string>& extra_args = {}) {
    std::string list;
    for (int i = 0; i < n; ++i) {
      endpoints.push_back("127.0.0.1:" + std::to_string(FreePort()));
      list += (i ? "," : "") + endpoints.back();
    }
    for (int i = 0; i < n; ++i) servers.push_back(Start(i, list, trainers, extra_args));
  }

  std::unique_ptr<Child> Start(int i, const std::string& list, int trainers, const std::vector<std::string>& extra_args) {
    std::map<std::string, std::string> env = {
        {"TRAINING_ROLE", "PSERVER"},          {"PADDLE_PSERVERS_IP_PORT_LIST", list},
        {"PADDLE_TRAINERS_NUM", std::to_string(trainers)}, {"POD_IP", "127.0.0.1"},
        {"PADDLE_PORT", endpoints[static_cast<size_t>(i)].substr(10)}};
    std::vector<std::string> argv = {FLEET_PS_SERVER_PATH};
    argv.insert(argv.end(), extra_args.begin(), extra_args.end());
    return std::make_unique<Child>(argv, env, logs.path() + "/serverlog." + std::to_string(i));
  }
};

TEST(PsProcessTest, AServerKilledMidJobGivesTheTrainerAnErrorNamingIt) {
  ServerJob job(2, 1);
  auto o = Options(job.endpoints, 0, 1);
  o.rpc_timeout = std::chrono::seconds(10);
  auto client = Connect(o);
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->CreateTable(TableConfig::Dense(0, 1000, OptimizerConfig::Adam(0.01f))).ok());
  ASSERT_TRUE(client->CreateTable(TableConfig::Sparse(1, 8, OptimizerConfig::Sgd(0.1f))).ok());
  std::vector<float> w(1000), g(1000, 0.1f), rows(16);
  const uint64_t keys[2] = {1, 2};
  for (int step = 0; step < 5; ++step) {
    ASSERT_TRUE(client->PullDense(0, w.data(), w.size()).ok());
    ASSERT_TRUE(client->PushDense(0, g.data(), g.size()).ok());
    ASSERT_TRUE(client->PullSparse(1, keys, 2, rows.data()).ok());
  }
  job.servers[1]->Signal(SIGKILL);
  EXPECT_EQ(job.servers[1]->WaitExit(std::chrono::seconds(10)), 128 + SIGKILL);
  const auto start = Clock::now();
  Status pull = client->PullDense(0, w.data(), w.size());
  Status push = client->PushDense(0, g.data(), g.size());
  Status sparse = client->PullSparse(1, keys, 2, rows.data());
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(10));
  for (const Status& s : {pull, push, sparse}) {
    EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
    EXPECT_NE(s.message().find("pserver " + job.endpoints[1] + " (server 1)"), std::string::npos) << s.message();
  }
  // The other server is unharmed; it ends on SIGTERM (its trainer never stopped).
  float first;
  const uint64_t even = 2;
  EXPECT_TRUE(client->PullSparse(1, &even, 1, rows.data()).ok());
  (void)first;
  job.servers[0]->Signal(SIGTERM);
  EXPECT_EQ(job.servers[0]->WaitExit(std::chrono::seconds(10)), 128 + SIGTERM);
}

TEST(PsProcessTest, ServersExitZeroOnceEveryTrainerStopped) {
  ServerJob job(2, 2);
  auto a = Connect(Options(job.endpoints, 0, 2));
  auto b = Connect(Options(job.endpoints, 1, 2));
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->StopWorker().ok());
  EXPECT_EQ(job.servers[0]->WaitExit(std::chrono::milliseconds(100)), -1);  // one trainer is still on
  ASSERT_TRUE(b->StopWorker().ok());
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(job.servers[static_cast<size_t>(i)]->WaitExit(std::chrono::seconds(15)), 0);
    const std::string out = job.servers[static_cast<size_t>(i)]->output();
    EXPECT_NE(out.find("pserver_index: " + std::to_string(i) + ", listening on " + job.endpoints[static_cast<size_t>(i)]),
              std::string::npos) << out;
    EXPECT_NE(out.find("all 2 trainers stopped, exit"), std::string::npos) << out;
  }
}

TEST(PsProcessTest, ABadEnvExitsTwoWithPaddlesMessage) {
  TempDir dir;
  Child child({FLEET_PS_SERVER_PATH}, {{"TRAINING_ROLE", "PSERVER"}, {"PADDLE_PSERVERS_IP_PORT_LIST", "127.0.0.1:1"}},
              dir.path() + "/log");
  EXPECT_EQ(child.WaitExit(std::chrono::seconds(10)), 2);
  EXPECT_NE(child.output().find("Can not find PADDLE_TRAINERS_NUM, please check your environment."), std::string::npos)
      << child.output();
  Child trainer({FLEET_PS_SERVER_PATH},
                {{"TRAINING_ROLE", "TRAINER"}, {"PADDLE_PSERVERS_IP_PORT_LIST", "127.0.0.1:1"}, {"PADDLE_TRAINERS_NUM", "1"},
                 {"PADDLE_TRAINER_ID", "0"}, {"POD_IP", "127.0.0.1"}, {"PADDLE_PORT", "2"}},
                dir.path() + "/log2");
  EXPECT_EQ(trainer.WaitExit(std::chrono::seconds(10)), 2);
  EXPECT_NE(trainer.output().find("TRAINING_ROLE must be PSERVER"), std::string::npos) << trainer.output();
  Child flag({FLEET_PS_SERVER_PATH, "--bogus"}, {}, dir.path() + "/log3");
  EXPECT_EQ(flag.WaitExit(std::chrono::seconds(10)), 2);
  // Plain decimal digits only: strtoull would read " -1" as 2^64-1.
  for (const std::string bad : {"many", " -1", "-1", "+5", "0"}) {
    ServerJob rows(1, 1, {"--sparse_max_rows", bad});
    EXPECT_EQ(rows.servers[0]->WaitExit(std::chrono::seconds(10)), 2) << "'" << bad << "'";
    EXPECT_NE(rows.servers[0]->output().find("FLEET_PS_SPARSE_MAX_ROWS must be a positive number of rows, got '" + bad + "'"),
              std::string::npos) << rows.servers[0]->output();
  }
}

TEST(PsProcessTest, SparseMaxRowsLimitsTheTablesThatDeclareNone) {
  ServerJob job(1, 1, {"--sparse_max_rows=3"});
  auto client = Connect(Options(job.endpoints, 0, 1));
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->CreateTable(TableConfig::Sparse(0, 4, OptimizerConfig::Sgd(0.1f))).ok());
  ASSERT_TRUE(client->CreateTable(TableConfig::Sparse(1, 4, OptimizerConfig::Sgd(0.1f), Mode::kAsync, 0, 0, 4)).ok());
  const uint64_t keys[4] = {1, 2, 3, 4};
  std::vector<float> rows(16);
  Status s = client->PullSparse(0, keys, 4, rows.data());
  EXPECT_EQ(s.code(), Code::kResourceExhausted);
  EXPECT_NE(s.message().find("limit is 3 rows per server (the servers' default, --sparse_max_rows"), std::string::npos)
      << s.message();
  EXPECT_TRUE(client->PullSparse(0, keys, 3, rows.data()).ok());
  EXPECT_TRUE(client->PullSparse(1, keys, 4, rows.data()).ok());  // its own declaration: 4
  ASSERT_TRUE(client->StopWorker().ok());
  EXPECT_EQ(job.servers[0]->WaitExit(std::chrono::seconds(15)), 0);
}

TEST(PsProcessTest, ABusyPortExitsOne) {
  ServerJob job(1, 1);
  ASSERT_NE(Connect(Options(job.endpoints, 0, 1)), nullptr);  // the first one listens
  auto second = job.Start(0, job.endpoints[0], 1, {});
  EXPECT_EQ(second->WaitExit(std::chrono::seconds(10)), 1);
  EXPECT_NE(second->output().find("cannot listen on " + job.endpoints[0]), std::string::npos) << second->output();
}

TEST(PsProcessTest, SigtermShutsTheServerDown) {
  ServerJob job(1, 1);
  auto client = Connect(Options(job.endpoints, 0, 1));
  ASSERT_NE(client, nullptr);
  job.servers[0]->Signal(SIGTERM);
  EXPECT_EQ(job.servers[0]->WaitExit(std::chrono::seconds(10)), 128 + SIGTERM);
}

TEST(PsProcessTest, AServerStartedWithAModelDirectoryServesIt) {
  TempDir model;
  const TableConfig dense = TableConfig::Dense(0, 6, OptimizerConfig::Sgd(1.0f));
  std::vector<float> saved(6);
  {
    testing::Cluster c = testing::StartCluster(2, 1, "", [&](ServerOptions& o) { o.save_root = model.path(); });
    auto client = Connect(Options(c.endpoints, 0, 1));
    ASSERT_TRUE(client->CreateTable(dense).ok());
    const std::vector<float> init = {1, 2, 3, 4, 5, 6};
    ASSERT_TRUE(client->InitDense(0, init.data(), 6).ok());
    ASSERT_TRUE(client->PushDense(0, init.data(), 6).ok());
    ASSERT_TRUE(client->PullDense(0, saved.data(), 6).ok());
    ASSERT_TRUE(client->Save(model.path()).ok());
  }
  ServerJob job(2, 1, {"--model_dir", model.path()});
  auto client = Connect(Options(job.endpoints, 0, 1));
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(client->CreateTable(dense).ok());
  std::vector<float> out(6);
  ASSERT_TRUE(client->PullDense(0, out.data(), 6).ok());
  EXPECT_EQ(out, saved);
  // Saves go under the model directory (no --save_root): a relative name lands there, a path
  // outside is refused.
  ASSERT_TRUE(client->Save("next").ok());
  EXPECT_TRUE(std::filesystem::exists(model.path() + "/next/table_0.shard_1_of_2"));
  const Status outside = client->Save(model.path() + "-elsewhere");
  EXPECT_EQ(outside.code(), Code::kPermissionDenied) << outside.ToString();
  EXPECT_FALSE(std::filesystem::exists(model.path() + "-elsewhere"));
  ASSERT_TRUE(client->StopWorker().ok());
  for (auto& s : job.servers) EXPECT_EQ(s->WaitExit(std::chrono::seconds(15)), 0);
  EXPECT_NE(job.servers[0]->output().find("loaded from " + model.path()), std::string::npos);
  // A directory that does not exist stops the server at once.
  ServerJob missing(1, 1, {"--model_dir=" + model.path() + "/nope"});
  EXPECT_EQ(missing.servers[0]->WaitExit(std::chrono::seconds(10)), 1);
  EXPECT_NE(missing.servers[0]->output().find("does not exist"), std::string::npos);
}

}  // namespace
}  // namespace fleet::ps
