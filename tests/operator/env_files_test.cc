// Lists too long for the env travel as files: a 10,000-worker job is wired, not refused, and what
// each pod's Python process sees once the env loader ran — the real loader
// (runtime/python/sitecustomize.py, taken from the ConfigMap the plan makes) in a real Python,
// with the pod's ConfigMaps written where the pod mounts them — passes the contract check.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "builders.h"
#include "fleet/operator/planner.h"
#include "fleet/runtime/env_contract.h"
#include "world.h"

namespace fleet::op::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "fleet-env-files-XXXXXX").string();
    path_ = mkdtemp(pattern.data());
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

World Published(Json job) {
  World world(std::move(job));
  world.Step();
  world.StartPods();
  world.Step();
  return world;
}

struct PythonRun {
  int status = -1;      // the exit status, -1 when it did not exit
  std::string errors;   // what it wrote to stderr
};

// Runs Python with exactly `env`; the env loader runs at its start-up (PYTHONPATH), then the
// program writes its os.environ as JSON to `dir`/environ.json.
PythonRun RunPython(const EnvMap& env, const fs::path& dir) {
  const std::string out = (dir / "environ.json").string(), errors = (dir / "stderr.txt").string();
  std::vector<std::string> entries;
  for (const auto& [k, v] : env) entries.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (std::string& e : entries) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::string program = "import json, os, sys; json.dump(dict(os.environ), open(sys.argv[1], 'w'))";
  std::string python = FLEET_TEST_PYTHON3, dash_c = "-c", out_arg = out;
  char* argv[] = {python.data(), dash_c.data(), program.data(), out_arg.data(), nullptr};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, errors.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  PythonRun run;
  if (posix_spawn(&pid, python.c_str(), &actions, nullptr, argv, envp.data()) == 0) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status)) run.status = WEXITSTATUS(status);
  }
  posix_spawn_file_actions_destroy(&actions);
  std::ifstream in(errors);
  run.errors.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return run;
}

Result<EnvMap> PythonEnviron(const EnvMap& env, const fs::path& dir) {
  const PythonRun run = RunPython(env, dir);
  if (run.status != 0) return Error{"python exited with status " + std::to_string(run.status) + ": " + run.errors};
  std::ifstream in(dir / "environ.json");
  return Json::parse(in).get<EnvMap>();
}

// `value` with every `from` replaced by `to`.
std::string ReplaceAll(std::string value, const std::string& from, const std::string& to) {
  for (size_t at = value.find(from); at != std::string::npos; at = value.find(from, at + to.size())) {
    value.replace(at, from.size(), to);
  }
  return value;
}

// Container 0's env from the kubelet, with the job's ConfigMaps written as files where the pod
// mounts them, under `root` (paths in the env follow).
Result<EnvMap> MountedEnv(const World& world, const Json& pod, const fs::path& root) {
  FLEET_ASSIGN_OR_RETURN(EnvMap env, ResolveEnv(pod, world.observed.endpoints));
  const Json& container = pod["spec"]["containers"][0];
  for (const Json& mount : container.value("volumeMounts", Json::array())) {
    for (const Json& volume : pod["spec"]["volumes"]) {
      if (volume["name"] != mount["name"] || !volume.contains("configMap")) continue;
      const std::string name = volume["configMap"]["name"].get<std::string>();
      const std::optional<Json>& cm = name == EnvLoaderConfigMapName(world.job["metadata"]["name"].get<std::string>())
                                            ? world.observed.env_loader
                                                                           : world.observed.endpoints;
      if (!cm || (*cm)["metadata"]["name"] != name) return Error{"the pod mounts ConfigMap " + name + ", which is missing"};
      const std::string path = mount["mountPath"].get<std::string>();
      fs::create_directories(root.string() + path);
      for (const auto& [key, value] : (*cm)["data"].items()) {
        std::ofstream(root.string() + path + "/" + key) << value.get<std::string>();
      }
      for (auto& [k, v] : env) v = ReplaceAll(v, path, root.string() + path);
    }
  }
  return env;
}

// What container 0 of `pod` sees once the env loader ran.
Result<EnvMap> EnvAfterLoader(const World& world, const Json& pod, const fs::path& root) {
  FLEET_ASSIGN_OR_RETURN(EnvMap env, MountedEnv(world, pod, root));
  return PythonEnviron(env, root);
}

// The first and last pods of each role, and one in between, after the loader ran.
void ExpectSamplesPassTheContract(const World& world, RoleMakerKind kind) {
  TempDir dir;
  int checked = 0;
  for (const Json& pod : world.pods) {
    const std::string name = pod["metadata"]["name"].get<std::string>();
    const std::string role = pod["metadata"]["labels"][kRoleLabel].get<std::string>();
    const int index = std::stoi(pod["metadata"]["labels"][kIndexLabel].get<std::string>());
    const int replicas = world.job["spec"][role]["replicas"].get<int>();
    if (index != 0 && index != replicas / 2 && index != replicas - 1) continue;
    SCOPED_TRACE(name);
    auto env = EnvAfterLoader(world, pod, dir.path() / name);
    ASSERT_TRUE(env.ok()) << env.error();
    auto parsed = ParseProcessEnv(*env, kind);
    ASSERT_TRUE(parsed.ok()) << "Paddle's role maker refuses the env: " << parsed.error();
    EXPECT_EQ(parsed->role, role == "server" ? Role::kServer : Role::kTrainer);
    EXPECT_EQ(parsed->id, index);
    EXPECT_EQ(parsed->current_endpoint, pod["status"]["podIP"].get<std::string>() + ":6170");
    EXPECT_EQ(parsed->trainer_endpoints.size(), 10000u);
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

void ExpectListsTravelAsFiles(const World& world, const std::string& var) {
  EXPECT_NE(world.Status().value("phase", ""), "Failed") << world.Status().dump();
  EXPECT_EQ(world.PodNames().size(), static_cast<size_t>(world.job["spec"]["worker"]["replicas"].get<int>() +
                                                         world.job["spec"].value("server", Json::object()).value("replicas", 0)));
  const Json condition = Condition(world.Status(), "EnvFromFiles");
  EXPECT_EQ(condition.value("status", ""), "True");
  EXPECT_THAT(condition.value("message", ""), HasSubstr(var));
  bool evented = false;
  for (const PlannedEvent& e : world.events) evented = evented || (e.reason == "EnvFromFiles" && e.message.find(var) != std::string::npos);
  EXPECT_TRUE(evented);
  ASSERT_TRUE(world.observed.env_loader.has_value());
  EXPECT_THAT((*world.observed.env_loader)["data"][kEnvLoaderKey].get<std::string>(), HasSubstr("def load_env_files"));
  const Json& worker = world.Pod("big-worker-9999")["spec"]["containers"][0];
  EXPECT_TRUE(EnvEntry(worker, var).is_null()) << "a list this long cannot be in the env";
  EXPECT_EQ(EnvEntry(worker, "FLEET_ENV_FILES")["value"], var + "=" + var);
  EXPECT_EQ(EnvEntry(worker, "PYTHONPATH")["value"], kEnvLoaderMountPath);
}

// The API refuses an object whose annotations (keys and values) exceed 256 KiB.
constexpr size_t kAnnotationLimit = 256 * 1024;
size_t AnnotationBytes(const Json& object) {
  const Json& metadata = object.at("metadata");
  size_t bytes = 0;
  if (!metadata.contains("annotations")) return bytes;
  for (const auto& [key, value] : metadata.at("annotations").items()) bytes += key.size() + value.get<std::string>().size();
  return bytes;
}

TEST(EnvFilesTest, TenThousandWorkerPsJobRunsWithItsListsAsFiles) {
  World world = Published(JobBuilder("big").Ps(3, 10000).Obj());
  ExpectListsTravelAsFiles(world, "PADDLE_TRAINER_ENDPOINTS");
  ASSERT_TRUE(world.observed.endpoints.has_value());
  EXPECT_EQ((*world.observed.endpoints)["data"][kEnvFilesRunKey], "0");
  // The short list still travels by env.
  EXPECT_TRUE(EnvEntry(world.Pod("big-worker-0")["spec"]["containers"][0], "PADDLE_PSERVERS_IP_PORT_LIST")
                  .contains("valueFrom"));
  ExpectSamplesPassTheContract(world, RoleMakerKind::kParameterServer);
}

TEST(EnvFilesTest, TenThousandWorkerCollectiveJobRunsWithItsListsAsFiles) {
  World world = Published(JobBuilder("big").Collective(10000).Obj());
  ExpectListsTravelAsFiles(world, "PADDLE_TRAINER_ENDPOINTS");
  // PodIP: the hosts annotation holds the 10,000 addresses (compared slot by slot), and fits.
  ASSERT_TRUE(world.observed.endpoints.has_value());
  EXPECT_LE(AnnotationBytes(*world.observed.endpoints), kAnnotationLimit);
  ExpectSamplesPassTheContract(world, RoleMakerKind::kCollective);
}

// 10,000 Service names (~40 bytes each) would not fit in the endpoints ConfigMap's hosts
// annotation; a digest does, and the published lists stay up to date without rewrites.
TEST(EnvFilesTest, TenThousandServiceNamesFitTheApisAnnotationLimit) {
  World world = Published(JobBuilder("big").Collective(10000).Network("Service").Obj());
  ExpectListsTravelAsFiles(world, "PADDLE_TRAINER_ENDPOINTS");
  ASSERT_TRUE(world.observed.endpoints.has_value());
  EXPECT_LE(AnnotationBytes(*world.observed.endpoints), 1024u);
  const std::string list = (*world.observed.endpoints)["data"]["PADDLE_TRAINER_ENDPOINTS"].get<std::string>();
  EXPECT_NE(list.find("big-worker-9999.big.ns.svc.cluster.local:"), std::string::npos) << "the last worker is listed";
  for (const Action& a : world.Step().actions) {
    EXPECT_NE(a.kind, ObjectKind::kConfigMap) << "the lists were published; nothing to rewrite";
  }
}

// A Service-mode job whose names are long: its list travels as a file with 700 workers.
Json LongNamesJob() {
  return JobBuilder(std::string(40, 'j')).Namespace(std::string(63, 'n')).Collective(700).Network("Service").Obj();
}

// Without the loader a pod's env is not Paddle's: the contract checks above depend on it.
TEST(EnvFilesTest, WithoutTheLoaderThePodLacksItsList) {
  World world = Published(LongNamesJob());
  const Json& pod = world.Pod(std::string(40, 'j') + "-worker-1");
  ASSERT_FALSE(EnvEntry(pod["spec"]["containers"][0], "FLEET_ENV_FILES").is_null());
  auto env = ResolveEnv(pod, world.observed.endpoints);
  ASSERT_TRUE(env.ok()) << env.error();
  EXPECT_EQ(env->count("PADDLE_TRAINER_ENDPOINTS"), 0u);
  auto parsed = ParseProcessEnv(*env, RoleMakerKind::kCollective);
  EXPECT_TRUE(!parsed.ok() || parsed->trainer_endpoints.size() != 700u);
}

// The loader fails closed: whatever it cannot load ends the process with status 1 and a message
// naming it, before the script runs (which without its peer lists would train with wrong ranks).
class EnvLoaderFailsClosedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto env = MountedEnv(world_, world_.Pod(std::string(40, 'j') + "-worker-1"), dir_.path());
    ASSERT_TRUE(env.ok()) << env.error();
    env_ = *env;
    ASSERT_TRUE(PythonEnviron(env_, dir_.path()).ok()) << "the pod as planned loads its lists";
    fs::remove(dir_.path() / "environ.json");
  }
  // Runs the pod's Python and expects it to end with status 1, never running the script.
  std::string ExpectFailsClosed() {
    const PythonRun run = RunPython(env_, dir_.path());
    EXPECT_EQ(run.status, 1) << run.errors;
    EXPECT_FALSE(fs::exists(dir_.path() / "environ.json")) << "the script ran without its lists";
    return run.errors;
  }

  World world_ = Published(LongNamesJob());
  TempDir dir_;
  EnvMap env_;
};

TEST_F(EnvLoaderFailsClosedTest, AFileThatIsNotUtf8) {
  const std::string entry = env_.at("FLEET_ENV_FILES");
  const std::string file = env_.at("FLEET_ENV_FILES_DIR") + "/" + entry.substr(entry.find('=') + 1);
  std::ofstream(file, std::ios::trunc) << "10.0.0.1:6170,\xff\xfe";
  const std::string errors = ExpectFailsClosed();
  EXPECT_THAT(errors, HasSubstr("PADDLE_TRAINER_ENDPOINTS"));
  EXPECT_THAT(errors, HasSubstr("not UTF-8"));
  EXPECT_THAT(errors, Not(HasSubstr("Traceback")));
}

TEST_F(EnvLoaderFailsClosedTest, MalformedEntries) {
  const std::string planned = env_.at("FLEET_ENV_FILES");
  for (const std::string entry : {"PADDLE_PSERVERS_IP_PORT_LIST", "PADDLE_PSERVERS_IP_PORT_LIST=", "=list", ""}) {
    SCOPED_TRACE(entry);
    env_["FLEET_ENV_FILES"] = planned + "," + entry;
    EXPECT_THAT(ExpectFailsClosed(), HasSubstr("FLEET_ENV_FILES: entry '" + entry + "' is not VAR=FILE"));
  }
}

TEST_F(EnvLoaderFailsClosedTest, NoDirectoryOrRun) {
  for (const std::string name : {"FLEET_ENV_FILES_DIR", "FLEET_ENV_FILES_RUN"}) {
    SCOPED_TRACE(name);
    EnvMap env = env_;
    env_.erase(name);
    EXPECT_THAT(ExpectFailsClosed(), HasSubstr(name + " is not"));
    env_ = env;
  }
}

// A PYTHONPATH the template sets (here from a ConfigMap) follows the loader's directory.
TEST(EnvFilesTest, TheTemplatesPythonPathFollowsTheLoaders) {
  const Json user_path = {{"name", "PYTHONPATH"}, {"valueFrom", {{"configMapKeyRef", {{"name", "paths"}, {"key", "app"}}}}}};
  Json job = LongNamesJob();
  job["spec"]["worker"]["template"]["spec"]["containers"][0]["env"] = Json::array({user_path});
  World world = Published(std::move(job));
  const Json& container = world.Pod(std::string(40, 'j') + "-worker-3")["spec"]["containers"][0];
  Json renamed = user_path;
  renamed["name"] = "FLEET_USER_PYTHONPATH";
  const Json& env = container["env"];
  EXPECT_THAT(std::vector<Json>(env.begin(), env.end()), ::testing::Contains(renamed));
  EXPECT_EQ(env.back(), Json({{"name", "PYTHONPATH"}, {"value", std::string(kEnvLoaderMountPath) + ":$(FLEET_USER_PYTHONPATH)"}}));
}

// Small lists: plain env vars from the ConfigMap, no loader, nothing new in the pods or the lists.
TEST(EnvFilesTest, SmallListsTravelByEnvAsBefore) {
  World world = Published(JobBuilder("big").Ps(2, 4).Obj());
  EXPECT_FALSE(world.observed.env_loader.has_value());
  EXPECT_TRUE(Condition(world.Status(), "EnvFromFiles").is_null());
  ASSERT_TRUE(world.observed.endpoints.has_value());
  EXPECT_FALSE((*world.observed.endpoints)["data"].contains(kEnvFilesRunKey));
  for (const Json& pod : world.pods) {
    const Json& container = pod["spec"]["containers"][0];
    EXPECT_TRUE(EnvEntry(container, "FLEET_ENV_FILES").is_null());
    EXPECT_TRUE(EnvEntry(container, "PYTHONPATH").is_null());
    EXPECT_TRUE(EnvEntry(container, "PADDLE_TRAINER_ENDPOINTS").contains("valueFrom"));
    for (const Json& volume : pod["spec"]["volumes"]) EXPECT_NE(volume["name"], "fleet-env-loader");
  }
}

// A value the whole job shares is published once, not copied into every pod: PADDLE_WORLD_DEVICE_IDS
// has an entry per process (inline, 10 KiB in each of 10,000 pods, sent with each of their updates
// to every watcher), so a pod would grow with its job. What the pods then see is checked by the
// contract tests above, at 10,000.
TEST(EnvFilesTest, PodsDoNotGrowWithTheirJob) {
  auto first_worker = [](int workers) {
    World world(JobBuilder("big").Collective(workers).Obj());
    world.Step();
    return world.Pod("big-worker-1");
  };
  const Json small = first_worker(8), large = first_worker(1000), larger = first_worker(3000);
  EXPECT_TRUE(EnvEntry(small["spec"]["containers"][0], "PADDLE_WORLD_DEVICE_IDS").contains("value")) << "a short value stays inline";
  EXPECT_TRUE(EnvEntry(large["spec"]["containers"][0], "PADDLE_WORLD_DEVICE_IDS").contains("valueFrom"));
  EXPECT_LE(larger.dump().size(), large.dump().size() + 8) << "only the numbers' digits may grow";
}

// Pods whose entry point is not Python cannot load files: such a job is still refused.
TEST(EnvFilesTest, FleetrunPodsWithListsTooLongForTheEnvAreRefused) {
  const ReconcilePlan plan = PlanFor(JobBuilder("big").Collective(7000).ProcessesPerPod(2).Obj(), Observed{}, T0());
  EXPECT_EQ(plan.status.ToJson().value("phase", ""), "Failed");
  const Json failed = Condition(plan.status.ToJson(), "Failed");
  EXPECT_EQ(failed.value("reason", ""), "InvalidSpec");
  EXPECT_THAT(failed.value("message", ""), HasSubstr("fleetrun"));
  EXPECT_THAT(ActionNames(plan, Verb::kCreate, ObjectKind::kPod), IsEmpty());
}

TEST(EnvFilesTest, RuntimeFleetServersWithListsTooLongForTheEnvAreRefused) {
  const ReconcilePlan plan = PlanFor(JobBuilder("big").Ps(2, 10000).Set("/spec/runtime", "fleet").Obj(), Observed{}, T0());
  const Json failed = Condition(plan.status.ToJson(), "Failed");
  EXPECT_EQ(failed.value("reason", ""), "InvalidSpec");
  EXPECT_THAT(failed.value("message", ""), HasSubstr("fleet-ps-server"));
  EXPECT_THAT(failed.value("message", ""), Not(HasSubstr("1 MiB")));
}

}  // namespace
}  // namespace fleet::op::testing
