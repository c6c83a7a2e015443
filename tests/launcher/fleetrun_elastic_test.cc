// Elastic fleetrun end to end: a real etcd (Debian's etcd-server) started on loopback on free ports
// with its data in a temp dir, and several fleetrun processes, one per node, each with --host on
// its own 127.0.0.x. Their trainer (elastic.sh) dumps its env once per generation and then runs
// until the test touches `finish`. Every dump of every generation is read back with the
// contract parser. Skipped, with the reason, when no etcd binary is installed.
//
// Bound: after a node is lost, the others run trainers with the new env within its lease's TTL
// (PADDLE_ELASTIC_TTL=2 here) plus kRestartSlack; after a node joins, within kRestartSlack.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include "e2e_util.h"
#include "fleet/base/strings.h"
#include "fleet/launcher/etcd.h"
#include "fleet/runtime/env_contract.h"

namespace fleet {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

constexpr int kTtlSeconds = 2;
constexpr double kRestartSlack = 3.0;   // poll (0.25 s) + stop (SIGTERM) + start, with room for a loaded machine
constexpr int kPort = 6170;

constexpr char kTrainerSh[] = R"SH(#!/bin/sh
f="$FLEET_TEST_DIR/env/$PADDLE_CURRENT_ENDPOINT.$$"
env -0 > "$f.tmp" && mv "$f.tmp" "$f"
while [ ! -e "$FLEET_TEST_DIR/finish" ]; do sleep 0.05; done
)SH";

// elastic.sh, but it fails as soon as a trainer of its generation is gone, as a collective fails
// when a peer's connection drops: each trainer leaves its pid under the generation's endpoints.
constexpr char kCollectiveTrainerSh[] = R"SH(#!/bin/sh
f="$FLEET_TEST_DIR/env/$PADDLE_CURRENT_ENDPOINT.$$"
env -0 > "$f.tmp" && mv "$f.tmp" "$f"
peers="$FLEET_TEST_DIR/peers/$PADDLE_TRAINER_ENDPOINTS"
mkdir -p "$peers" && echo $$ > "$peers.$$" && mv "$peers.$$" "$peers/$PADDLE_CURRENT_ENDPOINT"
while [ ! -e "$FLEET_TEST_DIR/finish" ]; do
  for p in "$peers"/*; do
    kill -0 "$(cat "$p")" 2>/dev/null || [ -e "$FLEET_TEST_DIR/finish" ] || { echo "peer ${p##*/} is gone"; exit 1; }
  done
  sleep 0.05
done
)SH";

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  ::close(fd);
  return port;
}

// fork/exec with its own env, cwd and output files; -1 on failure.
pid_t Spawn(const std::vector<std::string>& args, const EnvMap& env, const fs::path& cwd, const fs::path& output) {
  std::vector<std::string> arg_strings = args, env_strings;
  for (const auto& [name, value] : env) env_strings.push_back(name + "=" + value);
  std::vector<char*> argv, envp;
  for (std::string& s : arg_strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  const std::string dir = cwd.string(), out = output.string();
  const pid_t pid = ::fork();
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    const int in_fd = ::open("/dev/null", O_RDONLY);
    const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (::chdir(dir.c_str()) != 0 || in_fd < 0 || out_fd < 0) ::_exit(126);
    ::dup2(in_fd, 0);
    ::dup2(out_fd, 1);
    ::dup2(out_fd, 2);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

// Exit status (128+signal for a signal) within `seconds`, else -1 (and the process is killed).
int WaitForExit(pid_t pid, double seconds) {
  const auto start = Clock::now();
  int status = 0;
  while (::waitpid(pid, &status, WNOHANG) == 0) {
    if (SecondsSince(start) > seconds) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::string Host(int node) { return "127.0.0." + std::to_string(node); }

class FleetrunElastic : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* candidate : {"/usr/bin/etcd", "/usr/local/bin/etcd"}) {
      if (::access(candidate, X_OK) == 0) etcd_binary_ = candidate;
    }
    if (etcd_binary_.empty()) GTEST_SKIP() << "no etcd binary (Debian: apt-get install etcd-server; scripts/setup.sh does)";
    const char* bin = std::getenv("FLEETRUN");
    fleetrun_ = bin && *bin ? bin : FLEETRUN_BUILT_PATH;
    std::string pattern = (fs::temp_directory_path() / "fleetrun-elastic-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
    root_ = pattern;
    fs::create_directories(root_ / "env");
    WriteFile(root_ / "elastic.sh", kTrainerSh, 0755);
    WriteFile(root_ / "collective.sh", kCollectiveTrainerSh, 0755);

    client_port_ = FreePort();
    const int peer_port = FreePort();
    server_ = "127.0.0.1:" + std::to_string(client_port_);
    const std::string client_url = "http://" + server_, peer_url = "http://127.0.0.1:" + std::to_string(peer_port);
    etcd_pid_ = Spawn({etcd_binary_, "--name=test", "--data-dir=" + (root_ / "etcd-data").string(),
                       "--listen-client-urls=" + client_url, "--advertise-client-urls=" + client_url,
                       "--listen-peer-urls=" + peer_url, "--initial-advertise-peer-urls=" + peer_url,
                       "--initial-cluster=test=" + peer_url},
                      {{"PATH", "/usr/bin:/bin"}}, root_, root_ / "etcd.log");
    ASSERT_GT(etcd_pid_, 0);
    auto client = launcher::EtcdClient::Create(server_, std::chrono::milliseconds(1000));
    ASSERT_TRUE(client.ok()) << client.error();
    etcd_ = std::move(*client);
    ASSERT_TRUE(WaitUntil([&] { return etcd_->GetPrefix("/").ok(); }, 10)) << ReadFile(root_ / "etcd.log");
  }

  void TearDown() override {
    for (auto& [node, pid] : nodes_) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (etcd_pid_ > 0) {
      ::kill(etcd_pid_, SIGKILL);
      ::waitpid(etcd_pid_, nullptr, 0);
    }
    if (root_.empty()) return;
    if (HasFailure()) {
      for (const auto& entry : fs::directory_iterator(root_)) {
        if (entry.path().filename().string().rfind("node", 0) == 0) {
          std::cerr << "--- " << entry.path().filename().string() << "/out:\n" << ReadFile(entry.path() / "out");
        }
      }
      std::cerr << "kept " << root_ << " for inspection\n";
    } else {
      std::error_code ignored;
      fs::remove_all(root_, ignored);
    }
  }

  size_t Registered(const std::string& job) {
    auto kvs = etcd_->GetPrefix("/paddle/" + job + "/nodes/");
    return kvs.ok() ? kvs->size() : 0;
  }

  // Starts fleetrun for node 127.0.0.<node> and waits until it has registered, so that nodes take
  // their ranks in the order they are started.
  void StartNode(int node, const std::string& job, const std::string& np, const EnvMap& extra = {}) {
    const size_t before = Registered(job);
    const fs::path dir = root_ / ("node" + std::to_string(node));
    fs::create_directories(dir);
    EnvMap env = {{"PATH", "/usr/local/bin:/usr/bin:/bin"}, {"FLEET_TEST_DIR", root_.string()},
                  {"CUDA_VISIBLE_DEVICES", ""}, {"PADDLE_ELASTIC_TTL", std::to_string(kTtlSeconds)}};
    for (const auto& [name, value] : extra) env[name] = value;
    const pid_t pid = Spawn({fleetrun_, "--elastic_server=" + server_, "--job_id=" + job, "--np=" + np,
                             "--host=" + Host(node), "--start_port=" + std::to_string(kPort), "--grace_period=1",
                             (root_ / trainer_).string()},
                            env, dir, dir / "out");
    ASSERT_GT(pid, 0);
    nodes_[node] = pid;
    ASSERT_TRUE(WaitUntil([&] { return Registered(job) > before; }, 5)) << ReadFile(dir / "out");
  }

  std::string Output(int node) { return ReadFile(root_ / ("node" + std::to_string(node)) / "out"); }

  // Every env dump so far, by file name, each checked with the contract parser.
  std::map<std::string, ParsedRole> Dumps() {
    std::map<std::string, ParsedRole> dumps;
    for (const auto& entry : fs::directory_iterator(root_ / "env")) {
      const std::string name = entry.path().filename().string();
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) continue;
      auto parsed = ParseProcessEnv(ReadEnvDump(entry.path()), RoleMakerKind::kCollective);
      EXPECT_TRUE(parsed.ok()) << name << ": " << parsed.error();
      if (parsed.ok()) dumps.emplace(name, *parsed);
    }
    return dumps;
  }

  // Waits until every node of `ranked` (in rank order) has a trainer, started after `seen`, whose
  // env is that of this membership; returns the seconds it took, or -1.
  double WaitForGeneration(const std::vector<int>& ranked, const std::set<std::string>& seen, double seconds) {
    std::vector<std::string> endpoints;
    for (int node : ranked) endpoints.push_back(Host(node) + ":" + std::to_string(kPort));
    const auto start = Clock::now();
    const bool done = WaitUntil([&] {
      std::set<std::string> running;
      for (const auto& [name, role] : Dumps()) {
        if (!seen.count(name) && role.trainer_endpoints == endpoints) running.insert(role.current_endpoint);
      }
      return running.size() == endpoints.size();
    }, seconds);
    return done ? SecondsSince(start) : -1;
  }

  std::set<std::string> DumpNames() {
    std::set<std::string> names;
    for (const auto& [name, role] : Dumps()) names.insert(name);
    return names;
  }

  // Every trainer of every generation had a consistent env: its own endpoint at its rank.
  void ExpectEveryDumpConsistent() {
    const auto dumps = Dumps();
    EXPECT_FALSE(dumps.empty());
    for (const auto& [name, role] : dumps) {
      SCOPED_TRACE(name);
      ASSERT_GE(role.id, 0);
      ASSERT_LT(static_cast<size_t>(role.id), role.trainer_endpoints.size());
      EXPECT_EQ(role.trainer_endpoints[static_cast<size_t>(role.id)], role.current_endpoint);
      EXPECT_EQ(role.trainers_num, static_cast<int>(role.trainer_endpoints.size()));
      EXPECT_EQ(name.rfind(role.current_endpoint + ".", 0), 0u) << "the dump is the trainer's own";
    }
  }

  // Lets the trainers finish: every node exits 0, and the job leaves nothing in etcd.
  void FinishAndExpectCleanEtcd(const std::string& job) {
    WriteFile(root_ / "finish", "", 0644);
    for (auto it = nodes_.begin(); it != nodes_.end(); it = nodes_.erase(it)) {
      EXPECT_EQ(WaitForExit(it->second, 10), 0) << "node " << it->first << ":\n" << Output(it->first);
    }
    auto left = etcd_->GetPrefix("/paddle/" + job);
    ASSERT_TRUE(left.ok()) << left.error();
    for (const auto& kv : *left) ADD_FAILURE() << "left in etcd: " << kv.key << " = " << kv.value;
  }

  void KillNode(int node, int sig) {
    ::kill(nodes_.at(node), sig);
    ::waitpid(nodes_.at(node), nullptr, 0);
    nodes_.erase(node);
  }

  std::string etcd_binary_;
  std::string fleetrun_;
  fs::path root_;
  int client_port_ = 0;
  std::string server_;
  pid_t etcd_pid_ = -1;
  std::unique_ptr<launcher::EtcdClient> etcd_;
  std::map<int, pid_t> nodes_;
  std::string trainer_ = "elastic.sh";   // the script StartNode's fleetrun runs
};

TEST_F(FleetrunElastic, ScalesInWhenANodeDiesAndOutWhenOneJoins) {
  for (int node : {2, 3, 4}) StartNode(node, "scale", "2:4");
  EXPECT_GE(WaitForGeneration({2, 3, 4}, {}, 10), 0) << "the three nodes never ran together";

  // A node's fleetrun is SIGKILLed (its trainers die with it): only its lease can tell the others.
  std::set<std::string> seen = DumpNames();
  KillNode(3, SIGKILL);
  const double lost = WaitForGeneration({2, 4}, seen, kTtlSeconds + kRestartSlack);
  EXPECT_GE(lost, 0) << "the survivors did not restart as {2, 4} within TTL + " << kRestartSlack << " s";
  std::cerr << "[ measured ] node lost -> trainers running with the new env: " << lost << " s (TTL " << kTtlSeconds
            << " s)\n";

  seen = DumpNames();
  StartNode(5, "scale", "2:4");
  const double joined = WaitForGeneration({2, 4, 5}, seen, kRestartSlack);
  EXPECT_GE(joined, 0) << "the job did not scale out to {2, 4, 5}";
  std::cerr << "[ measured ] node joined -> trainers running with the new env: " << joined << " s\n";

  ExpectEveryDumpConsistent();
  FinishAndExpectCleanEtcd("scale");
}

// A node stopped by a signal (a pod deleted or evicted, a scale-in) and a node joining: the other
// nodes' trainers fail at once when their peer's trainer goes, before their fleetrun's next look at
// etcd. That is a change of nodes, not a failure: they rendezvous again and keep running.
TEST_F(FleetrunElastic, TrainersFailingAsAPeerLeavesOrJoinsAreRestartedNotFailed) {
  trainer_ = "collective.sh";
  for (int node : {2, 3, 4}) StartNode(node, "peers", "2:4");
  EXPECT_GE(WaitForGeneration({2, 3, 4}, {}, 10), 0) << "the three nodes never ran together";

  std::set<std::string> seen = DumpNames();
  KillNode(3, SIGTERM);
  EXPECT_GE(WaitForGeneration({2, 4}, seen, kRestartSlack), 0) << "the survivors did not restart as {2, 4}";
  seen = DumpNames();
  StartNode(5, "peers", "2:4");
  EXPECT_GE(WaitForGeneration({2, 4, 5}, seen, kRestartSlack), 0) << "the job did not scale out to {2, 4, 5}";
  for (int node : {2, 4}) {
    EXPECT_EQ(::waitpid(nodes_.at(node), nullptr, WNOHANG), 0) << "node " << node << " exited:\n" << Output(node);
    EXPECT_THAT(Output(node), Not(HasSubstr("ABORT")));
  }
  ExpectEveryDumpConsistent();
  FinishAndExpectCleanEtcd("peers");
}

TEST_F(FleetrunElastic, FixedNpWaitsForAReplacementAndResumes) {
  for (int node : {2, 3, 4}) StartNode(node, "fixed", "3");
  EXPECT_GE(WaitForGeneration({2, 3, 4}, {}, 10), 0);

  std::set<std::string> seen = DumpNames();
  KillNode(4, SIGKILL);
  // With two of three nodes, nothing runs: the survivors stop their trainers and wait.
  EXPECT_TRUE(WaitUntil([&] {
    return Output(2).find("waiting for nodes") != std::string::npos &&
           Output(3).find("waiting for nodes") != std::string::npos;
  }, kTtlSeconds + kRestartSlack)) << Output(2);
  EXPECT_EQ(DumpNames(), seen) << "no generation may start below np";

  StartNode(5, "fixed", "3");
  EXPECT_GE(WaitForGeneration({2, 3, 5}, seen, kRestartSlack), 0) << "the job did not resume with the replacement";
  ExpectEveryDumpConsistent();
  FinishAndExpectCleanEtcd("fixed");
}

TEST_F(FleetrunElastic, BelowTheMinimumForTheTimeoutFailsAndCleansUp) {
  StartNode(2, "starved", "2:3", {{"PADDLE_ELASTIC_TIMEOUT", "1"}});
  const int status = WaitForExit(nodes_.at(2), 5);
  nodes_.erase(2);
  EXPECT_EQ(status, 124) << Output(2);
  EXPECT_THAT(Output(2), HasSubstr("had fewer than 2 nodes (np=2:3)"));
  EXPECT_THAT(Output(2), HasSubstr("PADDLE_ELASTIC_TIMEOUT"));
  EXPECT_TRUE(DumpNames().empty());
  auto left = etcd_->GetPrefix("/paddle/starved");
  ASSERT_TRUE(left.ok()) << left.error();
  EXPECT_TRUE(left->empty());
}

TEST_F(FleetrunElastic, DuplicateHostIsRefusedAfterOneTtl) {
  StartNode(2, "dup", "1:2");
  const fs::path dir = root_ / "node-dup";
  fs::create_directories(dir);
  const pid_t second = Spawn({fleetrun_, "--elastic_server=" + server_, "--job_id=dup", "--np=1:2", "--host=127.0.0.2",
                              (root_ / "elastic.sh").string()},
                             {{"PATH", "/usr/bin:/bin"}, {"PADDLE_ELASTIC_TTL", std::to_string(kTtlSeconds)}}, dir,
                             dir / "out");
  EXPECT_EQ(WaitForExit(second, kTtlSeconds + 5), 2) << ReadFile(dir / "out");
  EXPECT_THAT(ReadFile(dir / "out"), HasSubstr("duplicate host: 127.0.0.2 is already registered in job 'dup'"));
  FinishAndExpectCleanEtcd("dup");
}

TEST_F(FleetrunElastic, UnreachableEtcdIsAClearError) {
  const int closed_port = FreePort();
  const fs::path dir = root_ / "node-unreachable";
  fs::create_directories(dir);
  const auto start = Clock::now();
  const pid_t pid = Spawn({fleetrun_, "--elastic_server=127.0.0.1:" + std::to_string(closed_port), "--job_id=j",
                           "--np=2", "--host=127.0.0.2", (root_ / "elastic.sh").string()},
                          {{"PATH", "/usr/bin:/bin"}}, dir, dir / "out");
  EXPECT_EQ(WaitForExit(pid, 10), 2) << ReadFile(dir / "out");
  EXPECT_LT(SecondsSince(start), 5);
  EXPECT_THAT(ReadFile(dir / "out"),
              HasSubstr("fleetrun: error: cannot reach etcd at 127.0.0.1:" + std::to_string(closed_port)));
}

}  // namespace
}  // namespace fleet
