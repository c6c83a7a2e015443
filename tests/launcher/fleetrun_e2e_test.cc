// End-to-end: the built fleetrun ($FLEETRUN) started from a fresh temp dir on tiny shell/python jobs
// and on the example jobs ($FLEET_SOURCE_DIR/examples). Every run has a deadline (a hang fails, it
// does not block), and every process a job starts records its pid so that "nothing outlives the job"
// is checked process by process.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "e2e_util.h"
#include "fleet/runtime/env_contract.h"

extern char** environ;

namespace fleet {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

// Variables of the host's own job environment that would change what fleetrun plans.
bool Scrubbed(const std::string& name) {
  static const std::set<std::string> exact = {
      "POD_IP", "TRAINING_ROLE", "TRAINER_PORTS_NUM", "DISTRIBUTED_TRAINER_ENDPOINTS", "CUDA_VISIBLE_DEVICES",
      "XPU_VISIBLE_DEVICES", "PYTHONUNBUFFERED", "http_proxy", "https_proxy"};
  return exact.count(name) || name.rfind("PADDLE_", 0) == 0 || name.rfind("FLAGS_", 0) == 0 ||
         name.rfind("FLEET_EXAMPLE_", 0) == 0;
}

struct Outcome {
  int code = -1;          // exit status, or 128+signal
  bool timed_out = false;
  double seconds = 0;     // from start to exit
  std::string out;
  std::string err;
};

// The job script most tests run. Behaviour by env:
//  STAY=1             background `sleep 1000` (pid recorded as grand.<id>) and wait for it
//  SETSID_CHILD=1     also a `setsid sleep 1000` that leaves the process group (orphan.<id>)
//  LINGER=1           left behind when the script exits 0: a background `sleep 1000` (linger.<id>)
//                     and a `sh -c` (lingersh.<id>) with its own background sleep (nested.<id>)
//  FAIL_RANK/FAIL_CODE  that rank waits until every rank is ready, then exits FAIL_CODE (KILL: SIGKILLs itself)
//  IGNORE_TERM_RANK   that rank (and its sleep) ignore SIGTERM
//  GLOO_FILE=1        leaves a file in the gloo dir ($PADDLE_GLOO_FS_PATH), as a gloo FILE store does
// It always records worker.<id> (its pid), env/worker.<id> (env -0) and finally ready.<id>.
constexpr char kWorkerSh[] = R"SH(#!/bin/sh
d="$FLEET_TEST_DIR"
id="${PADDLE_TRAINER_ID:-x}"
record() { echo "$2" > "$d/pids/$1.tmp" && mv "$d/pids/$1.tmp" "$d/pids/$1"; }
[ "$id" = "$IGNORE_TERM_RANK" ] && trap '' TERM
env -0 > "$d/env/worker.$id.tmp" && mv "$d/env/worker.$id.tmp" "$d/env/worker.$id"
echo "worker $id says hello, args:$*"
echo "worker $id to stderr" >&2
record "worker.$id" $$
[ -n "$GLOO_FILE" ] && touch "$PADDLE_GLOO_FS_PATH/store.$id"
if [ -n "$STAY" ]; then
  sleep 1000 &
  record "grand.$id" $!
fi
if [ -n "$SETSID_CHILD" ]; then
  setsid sleep 1000 &
  record "orphan.$id" $!
fi
if [ -n "$LINGER" ]; then
  sleep 1000 &
  record "linger.$id" $!
  sh -c 'sleep 1000 & echo $! > "$0.tmp" && mv "$0.tmp" "$0"; wait' "$d/pids/nested.$id" &
  record "lingersh.$id" $!
  n=0
  while [ ! -s "$d/pids/nested.$id" ] && [ "$n" -lt 250 ]; do sleep 0.02; n=$((n + 1)); done
fi
record "ready.$id" $$
all_ready() {
  i=0
  while [ "$i" -lt "$PADDLE_TRAINERS_NUM" ]; do
    [ -s "$d/pids/ready.$i" ] || return 1
    i=$((i + 1))
  done
}
if [ "$id" = "$FAIL_RANK" ]; then
  n=0
  while ! all_ready && [ "$n" -lt 250 ]; do sleep 0.02; n=$((n + 1)); done
  echo "worker $id fails with $FAIL_CODE"
  [ "$FAIL_CODE" = "KILL" ] && kill -KILL $$
  exit "$FAIL_CODE"
fi
[ -n "$STAY$SETSID_CHILD" ] && wait
exit 0
)SH";

// PS job: servers stay (with a grandchild) until stopped, or exit SERVER_EXIT once every trainer is
// up; trainers wait for every server to be up, then exit 0, or FAIL_CODE for trainer FAIL_RANK (the
// others then stay, with a grandchild).
constexpr char kPsSh[] = R"SH(#!/bin/sh
d="$FLEET_TEST_DIR"
record() { echo "$2" > "$d/pids/$1.tmp" && mv "$d/pids/$1.tmp" "$d/pids/$1"; }
count() { ls "$d/pids" | grep -c "^$1\.[0-9]*\$"; }
case "$TRAINING_ROLE" in
PSERVER)
  env -0 > "$d/env/server.$PADDLE_PORT"
  echo "server on $POD_IP:$PADDLE_PORT"
  record "server.$PADDLE_PORT" $$
  if [ -n "$SERVER_EXIT" ]; then
    n=0
    while [ "$(count trainer)" -lt "$PADDLE_TRAINERS_NUM" ] && [ "$n" -lt 250 ]; do sleep 0.02; n=$((n + 1)); done
    exit "$SERVER_EXIT"
  fi
  sleep 1000 &
  record "sgrand.$PADDLE_PORT" $!
  wait
  ;;
TRAINER)
  env -0 > "$d/env/trainer.$PADDLE_TRAINER_ID"
  echo "trainer $PADDLE_TRAINER_ID of $PADDLE_TRAINERS_NUM"
  record "trainer.$PADDLE_TRAINER_ID" $$
  n=0
  while [ "$(count sgrand)" -lt "$EXPECT_SERVERS" ] && [ "$n" -lt 250 ]; do sleep 0.02; n=$((n + 1)); done
  if [ "$PADDLE_TRAINER_ID" = "$FAIL_RANK" ]; then
    n=0
    while [ "$(count tgrand)" -lt "$((PADDLE_TRAINERS_NUM - 1))" ] && [ "$n" -lt 250 ]; do sleep 0.02; n=$((n + 1)); done
    exit "$FAIL_CODE"
  fi
  if [ -n "$FAIL_RANK" ]; then
    sleep 1000 &
    record "tgrand.$PADDLE_TRAINER_ID" $!
    wait
  fi
  exit 0
  ;;
*)
  echo "unexpected TRAINING_ROLE '$TRAINING_ROLE'"
  exit 9
  ;;
esac
)SH";

constexpr char kJobPy[] = R"SH(import os, sys
# -u: stdout is write-through (PYTHONUNBUFFERED is scrubbed from the env by the test).
print("py unbuffered=%s argv=%r script=%s own_group=%s trainer=%s" % (
    sys.stdout.write_through and "-u" in getattr(sys, "orig_argv", ["-u"]), sys.argv[1:], os.path.basename(sys.argv[0]),
    os.getpgrp() == os.getpid(), os.environ.get("PADDLE_TRAINER_ID")))
)SH";

constexpr char kKindSh[] = R"SH(#!/bin/sh
pgid=$(cut -d' ' -f5 /proc/$$/stat)
if [ "$pgid" = "$$" ]; then own=True; else own=False; fi
echo "sh script=$0 own_group=$own args=$*"
)SH";

class FleetrunE2EBase : public ::testing::Test {
 protected:
  void SetUp() override {
    // $FLEETRUN / $FLEET_SOURCE_DIR (set by ctest), else the paths of this build.
    const char* bin = std::getenv("FLEETRUN");
    fleetrun_ = bin && *bin ? bin : FLEETRUN_BUILT_PATH;
    ASSERT_EQ(::access(fleetrun_.c_str(), X_OK), 0) << fleetrun_ << " is not executable";
    const char* src = std::getenv("FLEET_SOURCE_DIR");
    source_dir_ = src && *src ? src : FLEET_BUILT_SOURCE_DIR;
    std::string pattern = (fs::temp_directory_path() / "fleetrun-e2e-XXXXXX").string();
    ASSERT_NE(::mkdtemp(pattern.data()), nullptr) << std::strerror(errno);
    root_ = pattern;
    work_ = root_ / "work";
    fs::create_directories(work_);
    fs::create_directories(root_ / "pids");
    fs::create_directories(root_ / "env");
    WriteFile(work_ / "worker.sh", kWorkerSh, 0755);
    WriteFile(work_ / "ps.sh", kPsSh, 0755);
    WriteFile(work_ / "marker.sh", "#!/bin/sh\ntouch \"$FLEET_TEST_DIR/marker\"\n", 0755);
  }

  void TearDown() override {
    for (pid_t pid : running_) {  // a fleetrun that outlived its test's deadline
      ::kill(pid, SIGKILL);
      ::waitpid(pid, nullptr, 0);
    }
    if (root_.empty()) return;  // SetUp failed before creating anything
    KillLeftovers();
    if (HasFailure()) {
      std::cerr << "kept " << root_ << " for inspection\n";
    } else {
      std::error_code ignored;
      fs::remove_all(root_, ignored);
    }
  }

  // pids the job recorded, by file name (worker.0, grand.1, ...).
  std::map<std::string, pid_t> RecordedPids() const {
    std::map<std::string, pid_t> pids;
    for (const auto& entry : fs::directory_iterator(root_ / "pids")) {
      const std::string name = entry.path().filename().string();
      if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) continue;
      const std::string text = ReadFile(entry.path());
      if (!text.empty()) pids[name] = static_cast<pid_t>(std::atol(text.c_str()));
    }
    return pids;
  }

  // Only processes of this test: a `sleep 1000` or something running a script from our temp dir.
  bool Ours(pid_t pid) const {
    std::string cmdline = ReadFile("/proc/" + std::to_string(pid) + "/cmdline");
    for (char& c : cmdline) c = c == '\0' ? ' ' : c;
    return cmdline.rfind("sleep 1000", 0) == 0 || cmdline.rfind("sh -c sleep 1000", 0) == 0 ||
           cmdline.find(root_.string()) != std::string::npos ||
           cmdline.find("worker.sh") != std::string::npos || cmdline.find("ps.sh") != std::string::npos;
  }

  void KillLeftovers() {
    if (!fs::exists(root_ / "pids")) return;
    for (const auto& [name, pid] : RecordedPids()) {
      if (pid > 1 && IsAlive(pid) && Ours(pid)) ::kill(pid, SIGKILL);
    }
  }

  // Every recorded process must be gone within `seconds` (SIGKILL is asynchronous: a few ms).
  void ExpectAllRecordedDead(const std::vector<std::string>& prefixes, size_t at_least, double seconds = 1.0) {
    std::map<std::string, pid_t> pids;
    for (const auto& [name, pid] : RecordedPids()) {
      for (const std::string& prefix : prefixes) {
        if (name.rfind(prefix + ".", 0) == 0) pids[name] = pid;
      }
    }
    EXPECT_GE(pids.size(), at_least) << "the job did not record the processes this test needs";
    WaitUntil([&] {
      for (const auto& [name, pid] : pids) {
        if (IsAlive(pid)) return false;
      }
      return true;
    }, seconds);
    for (const auto& [name, pid] : pids) EXPECT_FALSE(IsAlive(pid)) << name << " (pid " << pid << ") is still alive";
  }

  bool WaitForFiles(const std::vector<std::string>& names, double seconds) {
    return WaitUntil([&] {
      for (const std::string& name : names) {
        if (!fs::exists(root_ / "pids" / name)) return false;
      }
      return true;
    }, seconds);
  }

  EnvMap FleetrunEnv(const EnvMap& extra) const {
    EnvMap env;
    for (char** entry = environ; entry && *entry; ++entry) {
      const std::string kv(*entry);
      const size_t eq = kv.find('=');
      if (eq == std::string::npos || Scrubbed(kv.substr(0, eq))) continue;
      env[kv.substr(0, eq)] = kv.substr(eq + 1);
    }
    if (!env.count("PATH")) env["PATH"] = "/usr/local/bin:/usr/bin:/bin";
    env["CUDA_VISIBLE_DEVICES"] = "";  // CPU jobs, whatever this machine has
    env["FLEET_TEST_DIR"] = root_.string();
    for (const auto& [name, value] : extra) env[name] = value;
    return env;
  }

  // Starts fleetrun with `args` in work/, stdout/stderr to files. SIGINT ignored when asked (as a
  // non-interactive shell starts background jobs).
  pid_t Start(const std::vector<std::string>& args, const EnvMap& extra = {}, bool ignore_sigint = false) {
    ++runs_;
    out_path_ = root_ / ("fleetrun.out." + std::to_string(runs_));
    err_path_ = root_ / ("fleetrun.err." + std::to_string(runs_));
    std::vector<std::string> argv_strings = {fleetrun_};
    argv_strings.insert(argv_strings.end(), args.begin(), args.end());
    std::vector<std::string> env_strings;
    for (const auto& [name, value] : FleetrunEnv(extra)) env_strings.push_back(name + "=" + value);
    std::vector<char*> argv, envp;
    for (std::string& s : argv_strings) argv.push_back(s.data());
    argv.push_back(nullptr);
    for (std::string& s : env_strings) envp.push_back(s.data());
    envp.push_back(nullptr);
    const std::string cwd = work_.string(), out = out_path_.string(), err = err_path_.string();

    started_ = Clock::now();
    const pid_t pid = ::fork();
    if (pid == 0) {
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      for (int sig = 1; sig < NSIG; ++sig) {
        if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
      }
      if (ignore_sigint) ::signal(SIGINT, SIG_IGN);
      if (::chdir(cwd.c_str()) != 0) ::_exit(126);
      const int in_fd = ::open("/dev/null", O_RDONLY);
      const int out_fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      const int err_fd = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (in_fd < 0 || out_fd < 0 || err_fd < 0) ::_exit(126);
      ::dup2(in_fd, 0);
      ::dup2(out_fd, 1);
      ::dup2(err_fd, 2);
      ::execve(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
    EXPECT_GT(pid, 0) << "fork: " << std::strerror(errno);
    if (pid > 0) running_.insert(pid);
    return pid;
  }

  Outcome Finish(pid_t pid, double timeout_seconds) {
    Outcome o;
    int status = 0;
    while (true) {
      const pid_t r = ::waitpid(pid, &status, WNOHANG);
      if (r == pid) break;
      if (r < 0) {
        ADD_FAILURE() << "waitpid: " << std::strerror(errno);
        return o;
      }
      if (SecondsSince(started_) > timeout_seconds) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
        o.timed_out = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    running_.erase(pid);
    o.seconds = SecondsSince(started_);
    o.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    o.out = ReadFile(out_path_);
    o.err = ReadFile(err_path_);
    EXPECT_FALSE(o.timed_out) << "fleetrun did not finish within " << timeout_seconds << " s; stdout:\n"
                              << o.out << "\nstderr:\n" << o.err;
    return o;
  }

  Outcome Run(const std::vector<std::string>& args, const EnvMap& extra = {}, double timeout_seconds = 15) {
    return Finish(Start(args, extra), timeout_seconds);
  }

  std::string Log(const std::string& name, const std::string& dir = "log") const {
    return ReadFile(work_ / dir / name);
  }

  std::string fleetrun_;
  std::string source_dir_;
  fs::path root_;
  fs::path work_;
  fs::path out_path_;
  fs::path err_path_;
  int runs_ = 0;
  Clock::time_point started_;
  std::set<pid_t> running_;
};

std::string Describe(const Outcome& o) {
  return "exit " + std::to_string(o.code) + " after " + std::to_string(o.seconds) + " s\n--- stdout:\n" + o.out +
         "--- stderr:\n" + o.err;
}

// ---------------------------------------------------------------------------------------------
// Bad input: exit 2, one "fleetrun: error:" line naming the problem, nothing started or created.

struct BadInput {
  std::string name;
  std::vector<std::string> args;
  EnvMap env;
  std::string message_part;
};

void PrintTo(const BadInput& c, std::ostream* os) { *os << c.name; }

class FleetrunE2EBadInput : public FleetrunE2EBase, public ::testing::WithParamInterface<BadInput> {};

TEST_P(FleetrunE2EBadInput, ExitsTwoWithOneLineAndStartsNothing) {
  const BadInput& c = GetParam();
  const Outcome o = Run(c.args, c.env);
  EXPECT_EQ(o.code, 2) << Describe(o);
  EXPECT_THAT(o.err, StartsWith("fleetrun: error: "));
  EXPECT_EQ(std::count(o.err.begin(), o.err.end(), '\n'), 1) << "exactly one line: " << o.err;
  EXPECT_EQ(o.err.back(), '\n');
  EXPECT_THAT(o.err, HasSubstr(c.message_part));
  EXPECT_EQ(o.out, "") << "nothing printed before the error";
  EXPECT_FALSE(fs::exists(root_ / "marker")) << "the training script ran";
  EXPECT_FALSE(fs::exists(work_ / "log")) << "the log dir was created";
  EXPECT_LT(o.seconds, 5);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, FleetrunE2EBadInput,
    ::testing::Values(
        BadInput{"unknown_flag", {"--bogus=1", "./marker.sh"}, {}, "unknown flag --bogus"},
        BadInput{"missing_flag_value", {"--nproc_per_node=2", "--log_dir"}, {}, "--log_dir needs a value"},
        BadInput{"no_script", {"--nproc_per_node=2"}, {}, "no training script"},
        BadInput{"endpoint_without_port", {"--servers=127.0.0.1", "--worker_num=1", "./marker.sh"}, {},
                 "'127.0.0.1' has no port"},
        BadInput{"port_70000", {"--servers=127.0.0.1:70000", "--worker_num=1", "./marker.sh"}, {},
                 "port 70000, out of range 1-65535"},
        BadInput{"start_port_70000", {"--start_port=70000", "./marker.sh"}, {}, "--start_port: expected an integer from 1 to 65535, got '70000'"},
        BadInput{"duplicate_endpoints", {"--servers=127.0.0.1:6001,127.0.0.1:6001", "--worker_num=1", "./marker.sh"}, {},
                 "'127.0.0.1:6001' appears twice"},
        BadInput{"duplicate_endpoints_across_roles", {"--servers=127.0.0.1:6001", "--workers=127.0.0.1:6001", "./marker.sh"},
                 {}, "'127.0.0.1:6001' is used by two processes"},
        BadInput{"gpus_not_in_cuda_visible_devices", {"--gpus=3", "./marker.sh"}, {{"CUDA_VISIBLE_DEVICES", "0,1"}},
                 "GPU 3 is not in CUDA_VISIBLE_DEVICES=0,1"},
        BadInput{"nproc_does_not_divide_gpus", {"--nproc_per_node=2", "./marker.sh"}, {{"CUDA_VISIBLE_DEVICES", "0,1,2"}},
                 "does not divide the 3 GPUs"},
        BadInput{"missing_py_script", {"missing.py"}, {}, "'missing.py' does not exist"},
        BadInput{"missing_program", {"./missing.sh"}, {}, "'./missing.sh' does not exist or is not executable"},
        BadInput{"elastic_flag_alone", {"--np=2", "./marker.sh"}, {},
                 "elastic training needs --elastic_server, --job_id and --np"},
        BadInput{"elastic_np_max_below_min", {"--elastic_server=127.0.0.1:2379", "--job_id=j", "--np=3:2", "--host=127.0.0.2",
                                              "./marker.sh"}, {}, "--np/PADDLE_ELASTIC_NP '3:2': MAX is below MIN"},
        BadInput{"elastic_env_np_not_a_number", {"--host=127.0.0.2", "./marker.sh"},
                 {{"PADDLE_ELASTIC_SERVER", "127.0.0.1:2379"}, {"PADDLE_ELASTIC_JOB_ID", "j"}, {"PADDLE_ELASTIC_NP", "two"}},
                 "--np/PADDLE_ELASTIC_NP 'two': must be N or MIN:MAX"},
        BadInput{"collective_with_servers", {"--run_mode=collective", "--servers=127.0.0.1:6001", "./marker.sh"}, {},
                 "--run_mode=collective"},
        // Names under .invalid (RFC 6761) are never this machine's address or name.
        BadInput{"this_host_not_in_ips", {"--ips=node-a.invalid,node-b.invalid", "./marker.sh"}, {}, "is not in --ips"},
        BadInput{"malformed_paddle_nnodes", {"./marker.sh"}, {{"PADDLE_NNODES", "2:x"}},
                 "fleetrun: error: PADDLE_NNODES: \"2:x\" is not N or MIN:MAX"},
        BadInput{"malformed_paddle_rank", {"./marker.sh"}, {{"PADDLE_MASTER", "127.0.0.1:1"}, {"PADDLE_RANK", "first"}},
                 "PADDLE_RANK: \"first\" is not a whole number"},
        BadInput{"rank_not_below_nnodes", {"--master=127.0.0.1:1", "--nnodes=2", "--rank=2", "./marker.sh"}, {},
                 "--rank/PADDLE_RANK 2 is not below --nnodes/PADDLE_NNODES 2"},
        BadInput{"nnodes_without_master", {"--nnodes=2", "./marker.sh"}, {}, "--nnodes 2 needs --master"},
        // Before the node registers, not after the master's rendezvous timeout.
        BadInput{"master_with_a_missing_script", {"--master=127.0.0.1:1", "--nnodes=2", "./missing.sh"}, {},
                 "training program './missing.sh' does not exist"},
        BadInput{"master_with_a_ps_job", {"--master=127.0.0.1:1", "--nnodes=2", "--server_num=1", "--trainer_num=1", "./marker.sh"},
                 {}, "--master ip:port runs collective jobs"}),
    [](const ::testing::TestParamInfo<BadInput>& param_info) { return param_info.param.name; });

// ---------------------------------------------------------------------------------------------
// Success and what the user sees.

using FleetrunE2E = FleetrunE2EBase;

TEST_F(FleetrunE2E, NonExecutableProgramIsBadInput) {
  WriteFile(work_ / "noexec.sh", "#!/bin/sh\ntouch \"$FLEET_TEST_DIR/marker\"\n", 0644);
  const Outcome o = Run({"./noexec.sh"});
  EXPECT_EQ(o.code, 2) << Describe(o);
  EXPECT_EQ(o.err, "fleetrun: error: training program './noexec.sh' does not exist or is not executable\n");
  EXPECT_FALSE(fs::exists(root_ / "marker"));
  EXPECT_FALSE(fs::exists(work_ / "log"));
}

TEST_F(FleetrunE2E, ThreeWorkersSucceedWithLogsEndpointsAndWorkerZeroOnTheTerminal) {
  const Outcome o = Run({"--nproc_per_node=3", "./worker.sh", "a", "--b", "c d"},
                        {{"http_proxy", "http://proxy.invalid:3128"}, {"FLEET_TEST_INHERITED", "yes"}});
  ASSERT_EQ(o.code, 0) << Describe(o);
  EXPECT_EQ(o.err, "") << "fleetrun has nothing to say on success";
  EXPECT_LT(o.seconds, 5);

  // Terminal: the banners, then worker 0's stdout and stderr; never another worker's output.
  EXPECT_THAT(o.out, HasSubstr("Configuration Arguments"));
  EXPECT_THAT(o.out, HasSubstr("Distributed Envs"));
  EXPECT_THAT(o.out, HasSubstr("nproc_per_node: 3"));
  EXPECT_THAT(o.out, HasSubstr("worker 0 says hello, args:a --b c d\n"));
  EXPECT_THAT(o.out, HasSubstr("worker 0 to stderr\n"));
  EXPECT_THAT(o.out, Not(HasSubstr("worker 1 ")));
  EXPECT_THAT(o.out, Not(HasSubstr("worker 2 ")));
  EXPECT_LT(o.out.find("Distributed Envs"), o.out.find("worker 0 says hello")) << "banner first";

  // Logs: one per worker by local index, each with that worker's stdout and stderr.
  std::set<std::string> files;
  for (const auto& entry : fs::directory_iterator(work_ / "log")) files.insert(entry.path().filename().string());
  EXPECT_EQ(files, (std::set<std::string>{"endpoints.log", "workerlog.0", "workerlog.1", "workerlog.2"}));
  for (int id = 0; id < 3; ++id) {
    const std::string log = Log("workerlog." + std::to_string(id));
    EXPECT_THAT(log, HasSubstr("worker " + std::to_string(id) + " says hello, args:a --b c d\n")) << "workerlog." << id;
    EXPECT_THAT(log, HasSubstr("worker " + std::to_string(id) + " to stderr\n")) << "workerlog." << id;
  }
  EXPECT_THAT(Log("workerlog.1"), Not(HasSubstr("worker 0 ")));

  // Each worker's real env passes Paddle's collective reader with its own rank.
  std::vector<std::string> endpoints;
  for (int id = 0; id < 3; ++id) {
    SCOPED_TRACE("worker " + std::to_string(id));
    const EnvMap env = ReadEnvDump(root_ / "env" / ("worker." + std::to_string(id)));
    ASSERT_FALSE(env.empty());
    auto parsed = ParseProcessEnv(env, RoleMakerKind::kCollective);
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    EXPECT_EQ(parsed->id, id);
    EXPECT_EQ(parsed->trainers_num, 3);
    ASSERT_EQ(parsed->trainer_endpoints.size(), 3u);
    EXPECT_EQ(parsed->current_endpoint, parsed->trainer_endpoints[static_cast<size_t>(id)]);
    if (id == 0) endpoints = parsed->trainer_endpoints;
    EXPECT_EQ(parsed->trainer_endpoints, endpoints);
    EXPECT_EQ(env.count("http_proxy"), 0u) << "Paddle's launcher drops http_proxy";
    EXPECT_EQ(env.count("FLEET_TEST_INHERITED") ? env.at("FLEET_TEST_INHERITED") : "", "yes");
    EXPECT_EQ(env.count("PADDLE_GLOO_FS_PATH"), 1u);
    if (env.count("PADDLE_GLOO_FS_PATH")) {
      EXPECT_FALSE(fs::exists(env.at("PADDLE_GLOO_FS_PATH"))) << "fleetrun's empty gloo dir is removed at exit";
    }
  }
  EXPECT_EQ(std::set<std::string>(endpoints.begin(), endpoints.end()).size(), 3u);
  std::string want_endpoints_log = "PADDLE_TRAINER_ENDPOINTS: \n";
  for (const std::string& e : endpoints) want_endpoints_log += e + "\n";
  EXPECT_EQ(Log("endpoints.log"), want_endpoints_log);
}

TEST_F(FleetrunE2E, FixedStartPortFromEnvAndFlag) {
  std::mt19937 random(std::random_device{}());
  const int base = 20000 + static_cast<int>(random() % 30000);
  Outcome o = Run({"--nproc_per_node=2", "./worker.sh"}, {{"FLAGS_START_PORT", std::to_string(base)}});
  ASSERT_EQ(o.code, 0) << Describe(o);
  EXPECT_EQ(Log("endpoints.log"), "PADDLE_TRAINER_ENDPOINTS: \n127.0.0.1:" + std::to_string(base) + "\n127.0.0.1:" +
                                      std::to_string(base + 1) + "\n");
  o = Run({"--nproc_per_node=2", "--start_port=" + std::to_string(base + 10), "--log_dir=log2", "./worker.sh"},
          {{"FLAGS_START_PORT", std::to_string(base)}});
  ASSERT_EQ(o.code, 0) << Describe(o);
  EXPECT_EQ(Log("endpoints.log", "log2"), "PADDLE_TRAINER_ENDPOINTS: \n127.0.0.1:" + std::to_string(base + 10) +
                                              "\n127.0.0.1:" + std::to_string(base + 11) + "\n");
}

TEST_F(FleetrunE2E, PythonScriptRunsUnderPython3Unbuffered) {
  WriteFile(work_ / "job.py", kJobPy, 0644);  // no exec bit, no shebang: only python3 can run it
  const Outcome o = Run({"--log_dir=deep/er/logs", "job.py", "x", "--y"});
  ASSERT_EQ(o.code, 0) << Describe(o);
  EXPECT_THAT(o.out, HasSubstr("py unbuffered=True argv=['x', '--y'] script=job.py own_group=True trainer=0\n"));
  EXPECT_THAT(Log("workerlog.0", "deep/er/logs"), HasSubstr("py unbuffered=True"));
  EXPECT_TRUE(fs::exists(work_ / "deep/er/logs/endpoints.log"));
}

TEST_F(FleetrunE2E, OtherScriptsAreExecutedDirectly) {
  WriteFile(work_ / "kind.sh", kKindSh, 0755);
  Outcome o = Run({"--nproc_per_node=2", "./kind.sh", "-q"});
  ASSERT_EQ(o.code, 0) << Describe(o);
  EXPECT_THAT(o.out, HasSubstr("sh script=./kind.sh own_group=True args=-q\n"));
  EXPECT_THAT(Log("workerlog.1"), HasSubstr("sh script=./kind.sh own_group=True args=-q\n"));

  // A command on PATH, with arguments that look like flags.
  o = Run({"--log_dir=log2", "sh", "-c", "echo via-path $PADDLE_TRAINER_ID of $PADDLE_TRAINERS_NUM"});
  ASSERT_EQ(o.code, 0) << Describe(o);
  EXPECT_THAT(o.out, HasSubstr("via-path 0 of 1\n"));
}

TEST_F(FleetrunE2E, ProgramThatCannotBeExecutedFailsTheJob) {
  WriteFile(work_ / "badinterp.sh", "#!/nonexistent/interpreter\n", 0755);
  const Outcome o = Run({"./badinterp.sh"});
  EXPECT_EQ(o.code, 127) << Describe(o);
  EXPECT_THAT(o.err, HasSubstr("trainer rank 0 exited with code 127"));
  EXPECT_THAT(Log("workerlog.0"), HasSubstr("cannot execute ./badinterp.sh: No such file or directory"));
}

// ---------------------------------------------------------------------------------------------
// Failures and stopping: no process outlives the job.

TEST_F(FleetrunE2E, FailingRankStopsEveryLocalProcessAndItsStatusIsFleetrunsStatus) {
  const Outcome o = Run({"--nproc_per_node=3", "./worker.sh"}, {{"STAY", "1"}, {"FAIL_RANK", "1"}, {"FAIL_CODE", "3"}});
  EXPECT_EQ(o.code, 3) << Describe(o);
  // Others sleep 1000 s and die on SIGTERM: well within the default 5 s grace period.
  EXPECT_LT(o.seconds, 3) << Describe(o);
  EXPECT_THAT(o.err, HasSubstr("trainer rank 1 exited with code 3"));
  EXPECT_THAT(o.err, HasSubstr("log/workerlog.1"));
  EXPECT_THAT(Log("workerlog.1"), HasSubstr("worker 1 fails with 3"));
  ExpectAllRecordedDead({"worker", "grand"}, 6);
}

TEST_F(FleetrunE2E, RankKilledBySignalGives128PlusSignal) {
  const Outcome o = Run({"--nproc_per_node=2", "./worker.sh"}, {{"STAY", "1"}, {"FAIL_RANK", "1"}, {"FAIL_CODE", "KILL"}});
  EXPECT_EQ(o.code, 128 + SIGKILL) << Describe(o);
  EXPECT_LT(o.seconds, 3) << Describe(o);
  EXPECT_THAT(o.err, HasSubstr("trainer rank 1 was killed by signal 9"));
  EXPECT_THAT(o.err, HasSubstr("log/workerlog.1"));
  ExpectAllRecordedDead({"worker", "grand"}, 4);
}

TEST_F(FleetrunE2E, BackgroundProcessesLeftBySuccessfulWorkersAreKilled) {
  const Outcome o = Run({"--nproc_per_node=2", "./worker.sh"}, {{"LINGER", "1"}});
  EXPECT_EQ(o.code, 0) << Describe(o);
  EXPECT_LT(o.seconds, 3) << Describe(o);
  ExpectAllRecordedDead({"worker", "linger", "lingersh", "nested"}, 8);
}

TEST_F(FleetrunE2E, ChildIgnoringSigtermIsKilledAfterTheGracePeriod) {
  const Outcome o = Run({"--nproc_per_node=2", "--grace_period=1", "./worker.sh"},
                        {{"STAY", "1"}, {"FAIL_RANK", "1"}, {"FAIL_CODE", "3"}, {"IGNORE_TERM_RANK", "0"}});
  EXPECT_EQ(o.code, 3) << Describe(o);
  EXPECT_GE(o.seconds, 1.0) << "rank 0 ignores SIGTERM: only SIGKILL after the 1 s grace period ends it";
  EXPECT_LT(o.seconds, 4.0) << Describe(o);
  ExpectAllRecordedDead({"worker", "grand"}, 4);
}

TEST_F(FleetrunE2E, PsServersAreStoppedWhenTrainersFinish) {
  const Outcome o = Run({"--server_num=2", "--worker_num=2", "./ps.sh"}, {{"EXPECT_SERVERS", "2"}});
  EXPECT_EQ(o.code, 0) << Describe(o);
  EXPECT_LT(o.seconds, 3) << Describe(o);
  EXPECT_THAT(o.err, HasSubstr("all local trainers finished"));
  EXPECT_THAT(o.out, HasSubstr("trainer 0 of 2\n"));
  EXPECT_THAT(o.out, Not(HasSubstr("trainer 1 of 2")));
  EXPECT_THAT(o.out, Not(HasSubstr("server on")));
  for (const char* log : {"serverlog.0", "serverlog.1", "workerlog.0", "workerlog.1"}) {
    EXPECT_TRUE(fs::exists(work_ / "log" / log)) << log;
  }
  EXPECT_THAT(Log("serverlog.0"), HasSubstr("server on 127.0.0.1:"));
  EXPECT_THAT(Log("workerlog.1"), HasSubstr("trainer 1 of 2\n"));
  ExpectAllRecordedDead({"server", "sgrand", "trainer"}, 6);

  // The servers' and trainers' real env passes Paddle's PS reader.
  std::set<int> server_ids, trainer_ids;
  for (const auto& entry : fs::directory_iterator(root_ / "env")) {
    const std::string name = entry.path().filename().string();
    SCOPED_TRACE(name);
    auto parsed = ParseProcessEnv(ReadEnvDump(entry.path()), RoleMakerKind::kParameterServer);
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    EXPECT_EQ(parsed->trainers_num, 2);
    EXPECT_EQ(parsed->server_endpoints.size(), 2u);
    if (name.rfind("server.", 0) == 0) {
      EXPECT_EQ(parsed->role, Role::kServer);
      server_ids.insert(parsed->id);
    } else {
      EXPECT_EQ(parsed->role, Role::kTrainer);
      trainer_ids.insert(parsed->id);
    }
  }
  EXPECT_EQ(server_ids, (std::set<int>{0, 1}));
  EXPECT_EQ(trainer_ids, (std::set<int>{0, 1}));
  const std::string endpoints = Log("endpoints.log");
  EXPECT_THAT(endpoints, StartsWith("PADDLE_TRAINER_ENDPOINTS: \n"));
  EXPECT_THAT(endpoints, HasSubstr("PADDLE_PSERVERS_IP_PORT_LIST: \n"));
  EXPECT_EQ(Lines(endpoints).size(), 6u) << endpoints;
}

TEST_F(FleetrunE2E, PsTrainerFailureIsFleetrunsStatus) {
  const Outcome o = Run({"--server_num=2", "--worker_num=2", "./ps.sh"},
                        {{"EXPECT_SERVERS", "2"}, {"FAIL_RANK", "1"}, {"FAIL_CODE", "5"}});
  EXPECT_EQ(o.code, 5) << Describe(o);
  EXPECT_LT(o.seconds, 3) << Describe(o);
  EXPECT_THAT(o.err, HasSubstr("trainer rank 1 exited with code 5"));
  EXPECT_THAT(o.err, HasSubstr("log/workerlog.1"));
  ExpectAllRecordedDead({"server", "sgrand", "trainer", "tgrand"}, 7);
}

TEST_F(FleetrunE2E, PsServerFailureStopsTheJob) {
  const Outcome o = Run({"--server_num=1", "--worker_num=2", "./ps.sh"},
                        {{"EXPECT_SERVERS", "99"}, {"SERVER_EXIT", "7"}});
  EXPECT_EQ(o.code, 7) << Describe(o);
  EXPECT_LT(o.seconds, 3) << Describe(o);
  EXPECT_THAT(o.err, HasSubstr("server rank 0 exited with code 7"));
  EXPECT_THAT(o.err, HasSubstr("log/serverlog.0"));
  ExpectAllRecordedDead({"server", "trainer"}, 3);
}

// A PS job whose processes never listen: servers and trainers just wait (Paddle's trainers wait for
// their servers without limit). LISTEN=1: servers listen on their port (python3), trainers exit 0
// after 6 s, past the test's --server_timeout=5, by when fleetrun has seen the servers listen (it
// checks every second). (Python's start-up on a loaded machine took over 2 s: a shorter timeout made
// the test fail for the machine's load, not for fleetrun.)
constexpr char kQuietPsSh[] = R"SH(#!/bin/sh
if [ "$TRAINING_ROLE" = PSERVER ] && [ -n "$LISTEN" ]; then
  exec python3 -c 'import socket, sys, time
s = socket.socket()
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(8)
time.sleep(1000)' "$PADDLE_PORT"
fi
[ "$TRAINING_ROLE" = TRAINER ] && [ -n "$LISTEN" ] && exec sleep 6
exec sleep 1000
)SH";

// Issue 14: a parameter server that never listens held fleetrun until the trainers' own connect
// timeouts (600 s for fleet_runtime's, none for Paddle's). --server_timeout bounds the wait.
TEST_F(FleetrunE2E, PsServerThatNeverListensStopsTheJobAfterTheServerTimeout) {
  WriteFile(work_ / "quiet.sh", kQuietPsSh, 0755);
  const Outcome o = Run({"--server_num=2", "--worker_num=1", "--server_timeout=1", "./quiet.sh"});
  EXPECT_EQ(o.code, 124) << Describe(o);
  EXPECT_LT(o.seconds, 4) << Describe(o);
  EXPECT_THAT(o.err, HasSubstr("ABORT: parameter servers 127.0.0.1:"));
  EXPECT_THAT(o.err, HasSubstr("(log log/serverlog.0)"));
  EXPECT_THAT(o.err, HasSubstr("(log log/serverlog.1)"));
  EXPECT_THAT(o.err, HasSubstr("did not accept connections within 1 s (--server_timeout)"));
}

TEST_F(FleetrunE2E, PsServersThatListenAreNotStoppedByTheServerTimeout) {
  if (::access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3";
  WriteFile(work_ / "quiet.sh", kQuietPsSh, 0755);
  const Outcome o = Run({"--server_num=2", "--worker_num=1", "--server_timeout=5", "./quiet.sh"}, {{"LISTEN", "1"}});
  EXPECT_EQ(o.code, 0) << Describe(o);
  EXPECT_THAT(o.err, Not(HasSubstr("did not accept")));
}

// Issue 14: a full disk under the log dir lost the logs silently and the job exited 0. It still
// exits 0 (the training did succeed), but fleetrun says so when it notices and again as it exits.
TEST_F(FleetrunE2E, AFullLogDiskIsReportedWhenNoticedAndAtExit) {
  const fs::path full = work_ / "full";
  fs::create_directories(full);
  if (::mount("tmpfs", full.c_str(), "tmpfs", 0, "size=64k") != 0) {
    GTEST_SKIP() << "cannot mount a 64 KiB tmpfs (root only): " << std::strerror(errno);
  }
  struct Unmount {
    fs::path path;
    ~Unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount{full};
  // 300 KB each: worker 0's through fleetrun (its log and the terminal), worker 1's straight to its log.
  // Worker 1's own writes fail: it ignores that, as a training script that prints would not care.
  WriteFile(work_ / "spew.sh",
            "#!/bin/sh\n{ head -c 300000 /dev/zero | tr '\\0' x; echo; echo done $PADDLE_TRAINER_ID; } 2>/dev/null\nexit 0\n",
            0755);
  const Outcome o = Run({"--nproc_per_node=2", "--log_dir=full", "./spew.sh"});
  EXPECT_EQ(o.code, 0) << Describe(o);
  EXPECT_THAT(o.out, HasSubstr("done 0\n"));   // the terminal still has worker 0's output
  auto count = [&](const std::string& what) {
    size_t n = 0;
    for (size_t at = o.err.find(what); at != std::string::npos; at = o.err.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("output is being lost from their logs in full."), 1u) << o.err;
  EXPECT_EQ(count("WARNING: the logs in full are incomplete: "), 1u) << o.err;
  EXPECT_TRUE(count("No space left on device") + count("is full") >= 1) << o.err;
}

TEST_F(FleetrunE2E, SecondSignalSkipsTheGracePeriod) {
  // The only rank (and its sleep) ignore SIGTERM; the default grace period is 5 s.
  const pid_t pid = Start({"--nproc_per_node=1", "./worker.sh"}, {{"STAY", "1"}, {"IGNORE_TERM_RANK", "0"}});
  ASSERT_TRUE(WaitForFiles({"ready.0"}, 5)) << "the job did not start";
  const auto signalled = Clock::now();
  ASSERT_EQ(::kill(pid, SIGTERM), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(IsAlive(pid)) << "fleetrun should still be in its grace period";
  ASSERT_EQ(::kill(pid, SIGINT), 0);
  const Outcome o = Finish(pid, 10);
  EXPECT_EQ(o.code, 143) << "the first signal decides the status; " << Describe(o);
  EXPECT_LT(SecondsSince(signalled), 2.5) << Describe(o);
  ExpectAllRecordedDead({"worker", "grand"}, 2);
}

struct SignalCase {
  std::string name;
  int signal;
  int code;
  std::string message;
  bool sigint_ignored_at_start;
};

void PrintTo(const SignalCase& c, std::ostream* os) { *os << c.name; }

class FleetrunE2ESignal : public FleetrunE2EBase, public ::testing::WithParamInterface<SignalCase> {};

TEST_P(FleetrunE2ESignal, StopsEveryProcessAndExits128PlusSignal) {
  const SignalCase& c = GetParam();
  const pid_t pid = Start({"--nproc_per_node=2", "./worker.sh"}, {{"STAY", "1"}, {"SETSID_CHILD", "1"}},
                          c.sigint_ignored_at_start);
  ASSERT_TRUE(WaitForFiles({"ready.0", "ready.1"}, 5)) << "the job did not start";
  const auto signalled = Clock::now();
  ASSERT_EQ(::kill(pid, c.signal), 0);
  const Outcome o = Finish(pid, 10);
  EXPECT_EQ(o.code, c.code) << Describe(o);
  EXPECT_LT(SecondsSince(signalled), 3) << Describe(o);
  EXPECT_THAT(o.err, HasSubstr(c.message));
  // worker.N and grand.N are in the workers' groups; orphan.N left its group with setsid.
  ExpectAllRecordedDead({"worker", "grand", "orphan"}, 6);
}

INSTANTIATE_TEST_SUITE_P(Cases, FleetrunE2ESignal,
                         ::testing::Values(SignalCase{"sigterm", SIGTERM, 143, "received SIGTERM", false},
                                           SignalCase{"sigint", SIGINT, 130, "received SIGINT", false},
                                           SignalCase{"sighup", SIGHUP, 129, "received SIGHUP", false},
                                           // `fleetrun ... &` in a script starts it with SIGINT ignored.
                                           SignalCase{"sigint_when_started_ignoring_it", SIGINT, 130, "received SIGINT", true}),
                         [](const ::testing::TestParamInfo<SignalCase>& param_info) { return param_info.param.name; });

// The gloo dir is the run's own: it goes, with what the trainers left in it, however fleetrun ends.
TEST_P(FleetrunE2ESignal, TheGlooDirIsRemoved) {
  const SignalCase& c = GetParam();
  const fs::path tmp = root_ / "tmp";
  fs::create_directories(tmp);
  const pid_t pid = Start({"--nproc_per_node=2", "./worker.sh"},
                          {{"STAY", "1"}, {"GLOO_FILE", "1"}, {"TMPDIR", tmp.string()}}, c.sigint_ignored_at_start);
  ASSERT_TRUE(WaitForFiles({"ready.0", "ready.1"}, 5)) << "the job did not start";
  ASSERT_FALSE(fs::is_empty(tmp)) << "no gloo dir in " << tmp;
  ASSERT_EQ(::kill(pid, c.signal), 0);
  const Outcome o = Finish(pid, 10);
  EXPECT_EQ(o.code, c.code) << Describe(o);
  EXPECT_TRUE(fs::is_empty(tmp)) << "left in " << tmp << ": " << fs::directory_iterator(tmp)->path();
}

TEST_F(FleetrunE2E, TheGlooDirIsRemovedWhenTheJobEnds) {
  const fs::path tmp = root_ / "tmp";
  fs::create_directories(tmp);
  for (const EnvMap& job : {EnvMap{}, EnvMap{{"FAIL_RANK", "1"}, {"FAIL_CODE", "3"}}}) {
    EnvMap env = job;
    env["GLOO_FILE"] = "1";
    env["TMPDIR"] = tmp.string();
    const Outcome o = Run({"--nproc_per_node=2", "./worker.sh"}, env);
    EXPECT_EQ(o.code, job.empty() ? 0 : 3) << Describe(o);
    EXPECT_TRUE(fs::is_empty(tmp)) << Describe(o);
  }
}

// ---------------------------------------------------------------------------------------------
// Lists that travel as files (FLEET_ENV_FILES, docs/env-contract.md): a PaddleCloud-style pod,
// node 0 of 127.0.0.1 and 10.9.0.2, whose node lists come as files of its endpoints ConfigMap.

class FleetrunE2EEnvFiles : public FleetrunE2EBase {
 protected:
  void SetUp() override {
    FleetrunE2EBase::SetUp();
    files_ = root_ / "endpoints";
    fs::create_directories(files_);
    WriteFiles("7");
  }
  // The files as the operator's run `run` publishes them (fleet-run last, as the kubelet swaps
  // them all at once).
  void WriteFiles(const std::string& run) {
    WriteFile(files_ / "PADDLE_TRAINERS", "127.0.0.1,10.9.0.2", 0644);
    WriteFile(files_ / "DISTRIBUTED_TRAINER_ENDPOINTS", "127.0.0.1:36170,127.0.0.1:36171,10.9.0.2:36170,10.9.0.2:36171",
              0644);
    WriteFile(files_ / "fleet-run", run, 0644);
  }
  EnvMap PodEnv() const {
    return {{"FLEET_ENV_FILES",
             "PADDLE_TRAINERS=PADDLE_TRAINERS,DISTRIBUTED_TRAINER_ENDPOINTS=DISTRIBUTED_TRAINER_ENDPOINTS"},
            {"FLEET_ENV_FILES_DIR", files_.string()}, {"FLEET_ENV_FILES_RUN", "7"},
            {"POD_IP", "127.0.0.1"}, {"PADDLE_TRAINER_ID", "0"}, {"TRAINER_PORTS_NUM", "2"},
            {"PADDLE_TRAINERS_NUM", "2"}, {"PADDLE_PORT", "36170"}};
  }
  // Both local workers ran as ranks 0 and 1 of the two nodes' four.
  void ExpectTheJobOfBothNodes(const Outcome& o) {
    ASSERT_EQ(o.code, 0) << Describe(o);
    for (int id = 0; id < 2; ++id) {
      SCOPED_TRACE("worker " + std::to_string(id));
      const EnvMap env = ReadEnvDump(root_ / "env" / ("worker." + std::to_string(id)));
      auto parsed = ParseProcessEnv(env, RoleMakerKind::kCollective);
      ASSERT_TRUE(parsed.ok()) << parsed.error();
      EXPECT_EQ(parsed->id, id);
      EXPECT_EQ(parsed->trainers_num, 4);
      EXPECT_THAT(parsed->trainer_endpoints, ::testing::ElementsAre("127.0.0.1:36170", "127.0.0.1:36171",
                                                                     "10.9.0.2:36170", "10.9.0.2:36171"));
      // Not passed on (an exec could not carry a list that long); a Python worker loads them again.
      EXPECT_EQ(env.count("DISTRIBUTED_TRAINER_ENDPOINTS"), 0u);
      EXPECT_EQ(env.count("FLEET_ENV_FILES") ? env.at("FLEET_ENV_FILES") : "", PodEnv().at("FLEET_ENV_FILES"));
    }
  }

  fs::path files_;   // the mounted endpoints ConfigMap
};

TEST_F(FleetrunE2EEnvFiles, ListsThatTravelAsFilesAreRead) {
  ExpectTheJobOfBothNodes(Run({"--nproc_per_node=2", "./worker.sh"}, PodEnv()));
}

// The kubelet refreshes a mounted ConfigMap a while after the operator wrote it: fleetrun waits
// for its run's files, saying so.
TEST_F(FleetrunE2EEnvFiles, FleetrunWaitsForItsRunsFiles) {
  WriteFiles("6");
  const pid_t pid = Start({"--nproc_per_node=2", "./worker.sh"}, PodEnv());
  ASSERT_TRUE(WaitUntil([&] { return ReadFile(err_path_).find("waiting for") != std::string::npos; }, 10));
  EXPECT_FALSE(fs::exists(root_ / "pids" / "worker.0")) << "nothing starts before the files are the run's";
  WriteFiles("7");
  const Outcome o = Finish(pid, 15);
  EXPECT_THAT(o.err, HasSubstr("fleetrun: waiting for PADDLE_TRAINERS, DISTRIBUTED_TRAINER_ENDPOINTS of run 7 in " +
                               files_.string()));
  ExpectTheJobOfBothNodes(o);
}

TEST_F(FleetrunE2EEnvFiles, MalformedInputExitsTwoNamingItAndStartsNothing) {
  const std::string not_utf8 = "127.0.0.1,\xff";
  struct Case {
    std::string fleet_env_files;
    std::string message;
  };
  for (const Case& c : {Case{"PADDLE_TRAINERS", "FLEET_ENV_FILES: entry 'PADDLE_TRAINERS' is not VAR=FILE"},
                        Case{"PADDLE_TRAINERS=PADDLE_TRAINERS,=x", "FLEET_ENV_FILES: entry '=x' is not VAR=FILE"},
                        Case{"PADDLE_TRAINERS=", "FLEET_ENV_FILES: entry 'PADDLE_TRAINERS=' is not VAR=FILE"},
                        Case{"PADDLE_TRAINERS=not-utf8", "PADDLE_TRAINERS: file " + (files_ / "not-utf8").string() +
                                                             " is not UTF-8 text"}}) {
    SCOPED_TRACE(c.fleet_env_files);
    WriteFile(files_ / "not-utf8", not_utf8, 0644);
    EnvMap env = PodEnv();
    env["FLEET_ENV_FILES"] = c.fleet_env_files;
    const Outcome o = Run({"./worker.sh"}, env);
    EXPECT_EQ(o.code, 2) << Describe(o);
    EXPECT_EQ(o.err, "fleetrun: error: " + c.message + "\n");
    EXPECT_FALSE(fs::exists(root_ / "pids" / "worker.0"));
  }
  EnvMap env = PodEnv();
  env.erase("FLEET_ENV_FILES_RUN");
  const Outcome o = Run({"./worker.sh"}, env);
  EXPECT_EQ(o.code, 2) << Describe(o);
  EXPECT_THAT(o.err, HasSubstr("FLEET_ENV_FILES is set but FLEET_ENV_FILES_RUN is not"));
}

TEST_F(FleetrunE2E, SigkillToFleetrunKillsItsDirectChildren) {
  const pid_t pid = Start({"--nproc_per_node=2", "./worker.sh"}, {{"STAY", "1"}});
  ASSERT_TRUE(WaitForFiles({"ready.0", "ready.1"}, 5)) << "the job did not start";
  ASSERT_EQ(::kill(pid, SIGKILL), 0);
  const Outcome o = Finish(pid, 5);
  EXPECT_EQ(o.code, 128 + SIGKILL);
  // PR_SET_PDEATHSIG covers fleetrun's own children; their `sleep` children (grand.N) are not
  // covered by it and are killed by TearDown.
  ExpectAllRecordedDead({"worker"}, 2, 2.0);
  // A SIGKILLed fleetrun cannot remove its (empty) gloo dir: this test does, to leave /tmp clean.
  const EnvMap env = ReadEnvDump(root_ / "env" / "worker.0");
  if (env.count("PADDLE_GLOO_FS_PATH") && env.at("PADDLE_GLOO_FS_PATH").rfind("/tmp/fleetrun-gloo-", 0) == 0) {
    ::rmdir(env.at("PADDLE_GLOO_FS_PATH").c_str());
  }
}

// ---------------------------------------------------------------------------------------------
// The example jobs (examples/README.md).

double FinalLoss(const std::string& output, int worker) {
  const std::regex pattern("worker_index: " + std::to_string(worker) + ", final train_loss: ([0-9.eE+-]+)");
  std::smatch match;
  if (!std::regex_search(output, match, pattern)) return -1;
  return std::stod(match[1].str());
}

TEST_F(FleetrunE2E, ParameterServerExampleTrains) {
  const Outcome o = Run({"--server_num=2", "--worker_num=2", source_dir_ + "/examples/ps/train.py"},
                        {{"FLEET_EXAMPLE_RETRY_SECONDS", "0.2"}}, 30);
  ASSERT_EQ(o.code, 0) << Describe(o);
  EXPECT_LT(o.seconds, 10);
  const double loss = FinalLoss(o.out, 0);
  EXPECT_GE(loss, 0) << "no final train_loss from worker 0:\n" << o.out;
  EXPECT_LT(loss, 0.01);
  EXPECT_THAT(o.out, Not(HasSubstr("worker_index: 1,")));
  const double loss1 = FinalLoss(Log("workerlog.1"), 1);
  EXPECT_GE(loss1, 0) << Log("workerlog.1");
  EXPECT_LT(loss1, 0.01);
}

TEST_F(FleetrunE2E, CollectiveExampleTrains) {
  const Outcome o = Run({"--nproc_per_node=2", source_dir_ + "/examples/collective/train.py"},
                        {{"FLEET_EXAMPLE_RETRY_SECONDS", "0.2"}}, 30);
  ASSERT_EQ(o.code, 0) << Describe(o);
  EXPECT_LT(o.seconds, 10);
  const double loss = FinalLoss(o.out, 0);
  EXPECT_GE(loss, 0) << "no final train_loss from worker 0:\n" << o.out;
  EXPECT_LT(loss, 0.01);
  EXPECT_EQ(FinalLoss(Log("workerlog.1"), 1), loss) << "data parallel: both ranks hold the same weights";
}

// ---------------------------------------------------------------------------------------------
// Paddle 2.3+'s command line: nodes on 127.0.0.1 and 127.0.0.2 meet at an HTTP master, elected by
// its own address (--host), with the env a FleetJob pod gets (PADDLE_MASTER, PADDLE_NNODES, ...).

class FleetrunE2EMaster : public FleetrunE2EBase {
 protected:
  struct Node {
    pid_t pid = -1;
    fs::path out, err;
  };

  // A node of two trainers, its logs in log.<host>; `rank` < 0: no PADDLE_RANK.
  Node StartNode(const std::string& host, int rank, const EnvMap& extra = {}) {
    EnvMap env = {{"PADDLE_MASTER", master_}, {"PADDLE_NNODES", "2"}, {"PADDLE_JOB_ID", "e2e-1"}};
    if (rank >= 0) env["PADDLE_RANK"] = std::to_string(rank);
    for (const auto& [name, value] : extra) env[name] = value;
    const pid_t pid = Start({"--host", host, "--nproc_per_node=2", "--log_dir=log." + host, "./worker.sh"}, env);
    return Node{pid, out_path_, err_path_};
  }

  Outcome FinishNode(const Node& node) {
    out_path_ = node.out;
    err_path_ = node.err;
    return Finish(node.pid, 30);
  }

  bool Says(const Node& node, const std::string& text) {
    return WaitUntil([&] { return ReadFile(node.err).find(text) != std::string::npos; }, 20);
  }

  // Trainer `id`'s env, which must pass Paddle's collective reader as that rank of 4.
  EnvMap Trainer(int id) {
    const EnvMap env = ReadEnvDump(root_ / "env" / ("worker." + std::to_string(id)));
    auto parsed = ParseProcessEnv(env, RoleMakerKind::kCollective);
    EXPECT_TRUE(parsed.ok()) << "trainer " << id << ": " << (parsed.ok() ? "" : parsed.error());
    if (parsed.ok()) {
      EXPECT_EQ(parsed->id, id);
      EXPECT_EQ(parsed->trainers_num, 4);
    }
    return env;
  }

  // The trainers of node rank 0 on `first`, of node rank 1 on `second`; one PADDLE_MASTER, node 0's.
  void ExpectNodesInOrder(const std::string& first, const std::string& second) {
    const std::string hosts[] = {first, first, second, second};
    const EnvMap zero = Trainer(0);
    ASSERT_TRUE(zero.count("PADDLE_MASTER") && zero.count("PADDLE_TRAINER_ENDPOINTS"));
    EXPECT_THAT(zero.at("PADDLE_MASTER"), StartsWith(first + ":"));
    for (int id = 0; id < 4; ++id) {
      SCOPED_TRACE("trainer " + std::to_string(id));
      EnvMap env = Trainer(id);
      EXPECT_THAT(env["PADDLE_CURRENT_ENDPOINT"], StartsWith(hosts[id] + ":"));
      EXPECT_EQ(env["PADDLE_MASTER"], zero.at("PADDLE_MASTER"));
      EXPECT_EQ(env["PADDLE_TRAINER_ENDPOINTS"], zero.at("PADDLE_TRAINER_ENDPOINTS"));
      EXPECT_EQ(env["PADDLE_GLOBAL_RANK"], std::to_string(id));
      EXPECT_EQ(env["PADDLE_LOCAL_RANK"], std::to_string(id % 2));
      EXPECT_EQ(env["PADDLE_RANK_IN_NODE"], std::to_string(id % 2));
      EXPECT_EQ(env["PADDLE_GLOBAL_SIZE"], "4");
      EXPECT_EQ(env["PADDLE_LOCAL_SIZE"], "2");
      EXPECT_EQ(env["PADDLE_NNODES"], "2");
      EXPECT_EQ(env["PADDLE_DISTRI_BACKEND"], "gloo") << "no devices";
      EXPECT_EQ(env.count("PADDLE_TRAINERS"), 0u) << "a platform's node list is not inherited";
      EXPECT_THAT(Log("workerlog." + std::to_string(id % 2), "log." + hosts[id]), HasSubstr("worker " + std::to_string(id) + " says hello"));
    }
  }

  std::string master_ = "127.0.0.1:" + std::to_string(FreeLoopbackPort());
};

TEST_F(FleetrunE2EMaster, GivenRanksDecideTheOrderWhateverTheStartOrder) {
  // The master's node starts first but is rank 1; a stale platform node list must not matter.
  const Node master = StartNode("127.0.0.1", 1, {{"PADDLE_TRAINERS", "10.9.0.1,10.9.0.2"}});
  ASSERT_TRUE(Says(master, "serving the rendezvous of job 'e2e-1' at " + master_)) << ReadFile(master.err);
  const Node other = StartNode("127.0.0.2", 0);
  const Outcome b = FinishNode(other);
  const Outcome a = FinishNode(master);
  ASSERT_EQ(a.code, 0) << Describe(a);
  ASSERT_EQ(b.code, 0) << Describe(b);
  EXPECT_THAT(a.err, HasSubstr("env PADDLE_RANK=1 sets --rank"));
  EXPECT_THAT(b.err, Not(HasSubstr("serving the rendezvous"))) << "127.0.0.2 is not the master's address";
  ExpectNodesInOrder("127.0.0.2", "127.0.0.1");
}

TEST_F(FleetrunE2EMaster, ANodeStartedBeforeTheMasterJoinsAndTheMastersNodeIsFirst) {
  const Node other = StartNode("127.0.0.2", -1);
  ASSERT_TRUE(Says(other, "waiting for the master " + master_)) << ReadFile(other.err);
  const Node master = StartNode("127.0.0.1", -1);
  const Outcome a = FinishNode(master);
  const Outcome b = FinishNode(other);
  ASSERT_EQ(a.code, 0) << Describe(a);
  ASSERT_EQ(b.code, 0) << Describe(b);
  ExpectNodesInOrder("127.0.0.1", "127.0.0.2");
}

TEST_F(FleetrunE2EMaster, TwoNodesWithOneRankBothStopNamingEachOther) {
  const Node master = StartNode("127.0.0.1", 0);
  ASSERT_TRUE(Says(master, "serving the rendezvous")) << ReadFile(master.err);
  const Node other = StartNode("127.0.0.2", 0);
  for (const Outcome& o : {FinishNode(other), FinishNode(master)}) {
    EXPECT_EQ(o.code, 2) << Describe(o);
    EXPECT_THAT(o.err, HasSubstr("fleetrun: error: nodes 127.0.0.1 and 127.0.0.2 both have rank 0"));
  }
  EXPECT_FALSE(fs::exists(root_ / "env" / "worker.0")) << "no trainer started";
}

TEST_F(FleetrunE2EMaster, AFailedTrainerFailsItsNodeAndTheOtherNodeStillExits) {
  const Node master = StartNode("127.0.0.1", -1, {{"FAIL_RANK", "3"}, {"FAIL_CODE", "7"}});
  ASSERT_TRUE(Says(master, "serving the rendezvous")) << ReadFile(master.err);
  const Node other = StartNode("127.0.0.2", -1, {{"FAIL_RANK", "3"}, {"FAIL_CODE", "7"}});
  const Outcome b = FinishNode(other);
  const Outcome a = FinishNode(master);
  EXPECT_EQ(b.code, 7) << Describe(b);
  EXPECT_THAT(b.err, HasSubstr("trainer rank 3 exited with code 7"));
  EXPECT_EQ(a.code, 0) << "the master's node ends with its own trainers: " << Describe(a);
}

TEST_F(FleetrunE2EMaster, NoMasterEndsTheWaitAfterTheRendezvousTimeoutSayingWhy) {
  const pid_t pid = Start({"--host=127.0.0.2", "--rendezvous_timeout=0.5", "./marker.sh"},
                          {{"PADDLE_MASTER", master_}, {"PADDLE_NNODES", "2"}});
  const Outcome o = Finish(pid, 20);
  EXPECT_EQ(o.code, 2) << Describe(o);
  EXPECT_THAT(o.err, HasSubstr("did not all register at the master " + master_ + " within 0.5 s (--rendezvous_timeout)"));
  EXPECT_THAT(o.err, HasSubstr("does not answer"));
  EXPECT_FALSE(fs::exists(root_ / "marker"));
}

TEST_F(FleetrunE2EMaster, ASignalEndsTheWaitForTheMaster) {
  const Node alone = StartNode("127.0.0.2", -1);
  ASSERT_TRUE(Says(alone, "waiting for the master")) << ReadFile(alone.err);
  ::kill(alone.pid, SIGTERM);
  const Outcome o = FinishNode(alone);
  EXPECT_EQ(o.code, 128 + SIGTERM) << Describe(o);
  EXPECT_THAT(o.err, HasSubstr("received SIGTERM while waiting for the job's nodes"));
}

bool AcceptsConnections(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return ok;
}

// Something else on the master's port: a server that answers every registration with `body`.
constexpr char kFakeMasterPy[] = R"PY(import http.server, sys
body = sys.argv[2].encode()
class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
)PY";

TEST_F(FleetrunE2EMaster, AnAnswerThatIsNotTheJobsIsAnErrorNotACrash) {
  if (::access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3";
  WriteFile(root_ / "fake_master.py", kFakeMasterPy, 0644);
  const std::string port = master_.substr(master_.find(':') + 1);
  const std::string answers[] = {
      R"({"nodes": [{"host": "127.0.0.7", "rank": -1, "ports": [7000, 7001], "master_port": 9000},
                    {"host": "127.0.0.8", "rank": -1, "ports": [7000, 7001], "master_port": 9000}], "seen": "x"})",
      R"({"nodes": "all of them", "seen": 2})", R"([1, 2])", "not json"};
  for (const std::string& answer : answers) {
    SCOPED_TRACE(answer);
    struct Fake {   // killed however the case ends
      pid_t pid = ::fork();
      ~Fake() {
        if (pid > 0 && ::kill(pid, SIGKILL) == 0) ::waitpid(pid, nullptr, 0);
      }
    } fake;
    if (fake.pid == 0) {
      const int null_fd = ::open("/dev/null", O_WRONLY);
      ::dup2(null_fd, 1);
      ::dup2(null_fd, 2);
      ::execl("/usr/bin/python3", "python3", (root_ / "fake_master.py").c_str(), port.c_str(), answer.c_str(), nullptr);
      ::_exit(127);
    }
    ASSERT_TRUE(WaitUntil([&] { return AcceptsConnections(std::stoi(port)); }, 20)) << "the fake master never listened";
    const pid_t pid = Start({"--host=127.0.0.2", "--nproc_per_node=2", "--rendezvous_timeout=1", "./marker.sh"},
                            {{"PADDLE_MASTER", master_}, {"PADDLE_NNODES", "2"}});
    const Outcome o = Finish(pid, 20);
    EXPECT_EQ(o.code, 2) << Describe(o);
    EXPECT_THAT(o.err, HasSubstr(answer.front() == '{' && answer.find("127.0.0.7") != std::string::npos
                                     ? "answered a job without this node (127.0.0.2)"
                                     : "did not all register at the master"));
    EXPECT_FALSE(fs::exists(root_ / "marker"));
  }
}

}  // namespace
}  // namespace fleet
