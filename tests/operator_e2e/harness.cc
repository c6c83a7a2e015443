#include "harness.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <yaml-cpp/yaml.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#ifndef FLEET_SOURCE_DIR_DEFAULT
#define FLEET_SOURCE_DIR_DEFAULT ""
#endif
#ifndef FLEET_OPERATOR_BINARY
#define FLEET_OPERATOR_BINARY "fleet-operator"
#endif

namespace fleet::op::e2e {
namespace {

using Clock = std::chrono::steady_clock;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Json YamlToJson(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      Json out = Json::object();
      for (const auto& kv : node) out[kv.first.as<std::string>()] = YamlToJson(kv.second);
      return out;
    }
    case YAML::NodeType::Sequence: {
      Json out = Json::array();
      for (const auto& item : node) out.push_back(YamlToJson(item));
      return out;
    }
    case YAML::NodeType::Scalar: {
      const std::string s = node.Scalar();
      if (node.Tag() == "!") return s;  // quoted: a string whatever it looks like
      if (s == "true" || s == "True" || s == "TRUE") return true;
      if (s == "false" || s == "False" || s == "FALSE") return false;
      if (s == "null" || s == "~" || s.empty()) return nullptr;
      if (!s.empty() && s.find_first_not_of("-+0123456789") == std::string::npos &&
          s.find_first_of("0123456789") != std::string::npos) {
        try {
          size_t used = 0;
          const long long n = std::stoll(s, &used);  // NOLINT(runtime/int)
          if (used == s.size()) return n;
        } catch (const std::exception&) {
        }
      }
      if (s.find_first_not_of("-+0123456789.eE") == std::string::npos && s.find('.') != std::string::npos) {
        try {
          size_t used = 0;
          const double d = std::stod(s, &used);
          if (used == s.size()) return d;
        } catch (const std::exception&) {
        }
      }
      return s;
    }
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
  }
  return nullptr;
}

}  // namespace

std::string SourceDir() {
  const char* env = std::getenv("FLEET_SOURCE_DIR");
  return env && *env ? env : FLEET_SOURCE_DIR_DEFAULT;
}

std::string OperatorBinary() {
  const char* env = std::getenv("FLEET_OPERATOR_BINARY");   // e.g. to try a patched operator
  return env && *env ? env : FLEET_OPERATOR_BINARY;
}

std::vector<Json> LoadYamlDocuments(const std::string& path) {
  std::vector<Json> out;
  for (const YAML::Node& doc : YAML::LoadAllFromFile(path)) {
    if (doc.IsNull()) continue;
    out.push_back(YamlToJson(doc));
  }
  return out;
}

int RunCommand(const std::string& command, std::string* output) {
  std::FILE* pipe = ::popen((command + " 2>&1").c_str(), "r");
  if (!pipe) return -1;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) {
    if (output) output->append(buf.data(), n);
  }
  const int status = ::pclose(pipe);
  if (status == -1) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// ---- OperatorProcess ----

OperatorProcess::OperatorProcess(std::string name, const std::string& binary, const std::vector<std::string>& args,
                                 std::string log_path)
    : name_(std::move(name)), log_path_(std::move(log_path)) {
  std::vector<std::string> argv_storage = {binary};
  argv_storage.insert(argv_storage.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_storage) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int log_fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  const pid_t parent = ::getpid();
  pid_ = ::fork();
  if (pid_ == 0) {  // child: async-signal-safe calls only
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() != parent) ::_exit(127);
    const int null_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
    if (log_fd >= 0) {
      ::dup2(log_fd, STDOUT_FILENO);
      ::dup2(log_fd, STDERR_FILENO);
    }
    // Signals the test process blocks must not stay blocked in the operator.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  if (log_fd >= 0) ::close(log_fd);
  if (pid_ < 0) ADD_FAILURE() << "fork: " << std::strerror(errno);
}

OperatorProcess::~OperatorProcess() {
  if (pid_ > 0 && !exit_status_) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
}

bool OperatorProcess::Running() {
  if (pid_ <= 0 || exit_status_) return false;
  int status = 0;
  const pid_t got = ::waitpid(pid_, &status, WNOHANG);
  if (got == pid_) {
    exit_status_ = status;
    return false;
  }
  return true;
}

void OperatorProcess::Signal(int sig) {
  expected_exit_ = true;
  if (pid_ > 0 && !exit_status_) ::kill(pid_, sig);
}

std::optional<int> OperatorProcess::WaitExit(Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Running()) {
    if (Clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(Millis(10));
  }
  return exit_status_;
}

std::string OperatorProcess::Log() const { return ReadFile(log_path_); }

std::optional<int> OperatorProcess::ServingPort(const std::string& what) const {
  std::istringstream lines(Log());
  std::string line;
  const std::string marker = "serving " + what + " ";
  while (std::getline(lines, line)) {
    if (line.find(marker) == std::string::npos) continue;
    const size_t at = line.find(" port=");
    if (at == std::string::npos) continue;
    return std::atoi(line.c_str() + at + 6);
  }
  return std::nullopt;
}

std::optional<std::string> OperatorProcess::LogValue(const std::string& marker, const std::string& key) const {
  std::istringstream lines(Log());
  std::string line;
  while (std::getline(lines, line)) {
    if (line.find(marker) == std::string::npos) continue;
    const size_t at = line.find(" " + key + "=");
    if (at == std::string::npos) continue;
    const size_t start = at + key.size() + 2;
    const size_t end = line.find(' ', start);
    return line.substr(start, end == std::string::npos ? std::string::npos : end - start);
  }
  return std::nullopt;
}

// ---- ApiClient ----

ApiClient::Reply ApiClient::Request(const std::string& method, const std::string& path, const Json& body,
                                    const std::string& content_type) {
  Reply reply;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string text;
  if (!body.is_null()) {
    text = body.dump();
    headers.emplace_back("Content-Type", content_type);
  }
  auto response = http_.Send(method, path, text, headers);
  if (!response) {
    ADD_FAILURE() << method << " " << path << ": " << http_.error();
    return reply;
  }
  reply.status = response->status;
  reply.raw = response->body;
  reply.body = Json::parse(response->body, nullptr, false);
  if (reply.body.is_discarded()) reply.body = nullptr;
  return reply;
}

std::optional<Json> ApiClient::Get(const std::string& path) {
  Reply reply = Request("GET", path);
  if (reply.status == 404) return std::nullopt;
  if (reply.status != 200) {
    ADD_FAILURE() << "GET " << path << " -> " << reply.status << ": " << reply.raw;
    return std::nullopt;
  }
  return reply.body;
}

std::vector<Json> ApiClient::List(const std::string& path, const std::string& label_selector) {
  std::string query;
  if (!label_selector.empty()) {
    query = "?labelSelector=";
    for (char c : label_selector) {
      if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') {
        query += c;
      } else {
        char hex[4];
        std::snprintf(hex, sizeof hex, "%%%02X", static_cast<unsigned char>(c));
        query += hex;
      }
    }
  }
  Reply reply = Request("GET", path + query);
  if (reply.status == 404) return {};   // e.g. a resource not served yet
  if (reply.status != 200 || !reply.body.is_object()) {
    ADD_FAILURE() << "LIST " << path << query << " -> " << reply.status << ": " << reply.raw;
    return {};
  }
  std::vector<Json> items;
  for (const Json& item : reply.body.value("items", Json::array())) items.push_back(item);
  return items;
}

std::string JobsPath(const std::string& ns) { return "/apis/fleet.paddlepaddle.org/v1alpha1/namespaces/" + ns + "/fleetjobs"; }
std::string JobPath(const std::string& ns, const std::string& name) { return JobsPath(ns) + "/" + name; }
std::string CorePath(const std::string& ns, const std::string& plural, const std::string& name) {
  return "/api/v1/namespaces/" + ns + "/" + plural + (name.empty() ? "" : "/" + name);
}
std::string PodGroupPath(const std::string& ns, const std::string& name) {
  return "/apis/scheduling.volcano.sh/v1beta1/namespaces/" + ns + "/podgroups" + (name.empty() ? "" : "/" + name);
}
std::string LeasePath(const std::string& ns, const std::string& name) {
  return "/apis/coordination.k8s.io/v1/namespaces/" + ns + "/leases/" + name;
}

// ---- pods ----

std::string NameOf(const Json& object) { return object.value("metadata", Json::object()).value("name", ""); }
std::string UidOf(const Json& object) { return object.value("metadata", Json::object()).value("uid", ""); }
std::string LabelOf(const Json& object, const std::string& key) {
  const Json labels = object.value("metadata", Json::object()).value("labels", Json::object());
  return labels.contains(key) && labels[key].is_string() ? labels[key].get<std::string>() : "";
}
Json ConditionOf(const Json& status, const std::string& type) {
  if (!status.is_object()) return Json::object();
  for (const Json& c : status.value("conditions", Json::array())) {
    if (c.is_object() && c.value("type", "") == type) return c;
  }
  return Json::object();
}
bool IsConditionTrue(const Json& object, const std::string& type) {
  return ConditionOf(object.value("status", Json::object()), type).value("status", "") == "True";
}

std::string KueuePath(const std::string& ns, const std::string& plural, const std::string& name) {
  return "/apis/kueue.x-k8s.io/v1beta2/" + (ns.empty() ? "" : "namespaces/" + ns + "/") + plural +
         (name.empty() ? "" : "/" + name);
}

// ---- the fixture ----

void OperatorE2eTest::SetUp() {
  ASSERT_FALSE(dir_.path().empty()) << "cannot make a scratch directory";
  fake_ = std::make_unique<FakeApiServer>(fake_args_);
  ASSERT_TRUE(fake_->ok()) << fake_->error();
  api_ = std::make_unique<ApiClient>(fake_->url());

  // The CRD, as `kubectl apply -f crds/fleetjob.yaml` would send it.
  const std::vector<Json> crds = LoadYamlDocuments(SourceDir() + "/crds/fleetjob.yaml");
  ASSERT_EQ(crds.size(), 1u);
  ApiClient::Reply created = api_->Create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crds[0]);
  ASSERT_EQ(created.status, 201) << created.raw;
  ASSERT_TRUE(Eventually("the FleetJob resource to be served", [&](std::string& state) {
    ApiClient::Reply r = api_->Request("GET", JobsPath(ns_));
    state = std::to_string(r.status);
    return r.status == 200;
  }, Seconds(10)));

  std::ostringstream config;
  config << "apiVersion: v1\nkind: Config\n"
         << "clusters:\n- name: fake\n  cluster:\n    server: " << fake_->url() << "\n"
         << "users:\n- name: test\n  user:\n    token: e2e-token\n"
         << "contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: test\n    namespace: " << ns_ << "\n"
         << "current-context: fake\n";
  kubeconfig_ = dir_.Write("kubeconfig", config.str());
}

void OperatorE2eTest::TearDown() {
  if (HasFailure() || std::getenv("FLEET_E2E_LOGS")) DumpLogs();   // FLEET_E2E_LOGS=1: always
  // SIGKILL: a graceful stop takes the operator seconds (its watches wind down) and is tested
  // where it matters (leader hand-over).
  for (auto& op : operators_) op->Signal(SIGKILL);
  for (auto& op : operators_) op->WaitExit(Seconds(5));
  operators_.clear();
  api_.reset();
  fake_.reset();
}

void OperatorE2eTest::DumpLogs() {
  for (const auto& op : operators_) {
    std::string log = op->Log();
    constexpr size_t kMax = 60000;
    if (log.size() > kMax) log = "[... " + std::to_string(log.size() - kMax) + " bytes cut ...]\n" + log.substr(log.size() - kMax);
    std::cerr << "==== " << op->name() << " (pid " << op->pid() << ") log " << op->log_path() << " ====\n"
              << log << "==== end of " << op->name() << " ====\n";
  }
}

OperatorProcess& OperatorE2eTest::StartOperator(const std::vector<std::string>& extra) {
  const std::string name = "operator-" + std::to_string(operators_.size() + 1);
  std::vector<std::string> args = {"--kubeconfig=" + kubeconfig_, "--metrics-bind-address=127.0.0.1:0",
                                   "--health-probe-bind-address=127.0.0.1:0"};
  args.insert(args.end(), extra.begin(), extra.end());
  operators_.push_back(
      std::make_unique<OperatorProcess>(name, OperatorBinary(), args, dir_.path() + "/" + name + ".log"));
  return *operators_.back();
}

bool OperatorE2eTest::WaitReady(OperatorProcess& op, Millis timeout) {
  return Eventually(op.name() + " to be ready", [&](std::string& state) {
    const auto port = op.ServingPort("health probes");
    if (!port) {
      state = "no probe port logged yet";
      return false;
    }
    HttpConnection probe("http://127.0.0.1:" + std::to_string(*port));
    auto readyz = probe.Send("GET", "/readyz");
    state = "readyz " + (readyz ? std::to_string(readyz->status) + " " + readyz->body : probe.error());
    return readyz && readyz->status == 200;
  }, timeout);
}

bool OperatorE2eTest::Eventually(const std::string& what, const std::function<bool(std::string& state)>& check,
                                 Millis timeout, Millis poll) {
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  std::string state;
  while (true) {
    state.clear();
    if (check(state)) return true;
    for (auto& op : operators_) {
      if (!op->expected_exit() && !op->Running()) {
        const int s = op->exit_status().value_or(0);
        ADD_FAILURE() << "while waiting for " << what << ": " << op->name() << " exited unexpectedly ("
                      << (WIFSIGNALED(s) ? "signal " + std::to_string(WTERMSIG(s)) : "status " + std::to_string(WEXITSTATUS(s)))
                      << ")" << (state.empty() ? "" : "; last seen: " + state);
        return false;
      }
    }
    if (Clock::now() >= deadline) break;
    std::this_thread::sleep_for(poll);
  }
  ADD_FAILURE() << "timed out after " << std::chrono::duration_cast<Millis>(timeout).count() << " ms waiting for "
                << what << (state.empty() ? "" : "; last seen: " + state);
  return false;
}

Json OperatorE2eTest::CreateJob(Json job) {
  Json& meta = job["metadata"];
  meta.erase("uid");
  meta.erase("generation");
  meta.erase("resourceVersion");
  meta["namespace"] = ns_;
  job.erase("status");
  ApiClient::Reply reply = api_->Create(JobsPath(ns_), job);
  if (reply.status != 201) {
    ADD_FAILURE() << "creating FleetJob " << meta.value("name", "") << " -> " << reply.status << ": " << reply.raw;
    return nullptr;
  }
  return reply.body;
}

std::optional<Json> OperatorE2eTest::GetJob(const std::string& name) { return api_->Get(JobPath(ns_, name)); }

Json OperatorE2eTest::JobStatus(const std::string& name) {
  auto job = GetJob(name);
  return job ? job->value("status", Json::object()) : Json::object();
}

Json OperatorE2eTest::WaitForJob(const std::string& name, const std::string& what,
                                 const std::function<bool(const Json&)>& pred, Millis timeout) {
  Json found = nullptr;
  const bool ok = Eventually("FleetJob " + name + " " + what, [&](std::string& state) {
    auto job = GetJob(name);
    if (!job) {
      state = "the FleetJob does not exist";
      return false;
    }
    state = "status " + job->value("status", Json::object()).dump();
    if (!pred(*job)) return false;
    found = *job;
    return true;
  }, timeout);
  return ok ? found : Json(nullptr);
}

Json OperatorE2eTest::WaitForPhase(const std::string& name, const std::string& phase, Millis timeout) {
  return WaitForJob(name, "to reach phase " + phase, [&](const Json& job) {
    return job.value("status", Json::object()).value("phase", "") == phase;
  }, timeout);
}

Json OperatorE2eTest::PatchJob(const std::string& name, const Json& patch) {
  ApiClient::Reply reply = api_->MergePatch(JobPath(ns_, name), patch);
  if (reply.status != 200) ADD_FAILURE() << "PATCH FleetJob " << name << " -> " << reply.status << ": " << reply.raw;
  return reply.body;
}

std::vector<Json> OperatorE2eTest::Pods(const std::string& job) {
  return api_->List(CorePath(ns_, "pods"), "fleet.paddlepaddle.org/job-name=" + job);
}

std::vector<Json> OperatorE2eTest::LivePods(const std::string& job) {
  std::vector<Json> live;
  for (Json& pod : Pods(job)) {
    if (!pod["metadata"].contains("deletionTimestamp")) live.push_back(std::move(pod));
  }
  return live;
}

std::optional<Json> OperatorE2eTest::Pod(const std::string& name) { return api_->Get(CorePath(ns_, "pods", name)); }

std::optional<Json> OperatorE2eTest::EndpointsConfigMap(const std::string& job) {
  return api_->Get(CorePath(ns_, "configmaps", job + "-endpoints"));
}

Json OperatorE2eTest::PodAction(const std::string& pod, const Json& action) {
  return fake_->Control("namespaces/" + ns_ + "/pods/" + pod, action);
}

std::vector<Json> OperatorE2eTest::WaitForRunningPods(const std::string& job, size_t count, int run, Millis timeout) {
  std::vector<Json> pods;
  Eventually(std::to_string(count) + " running pods of " + job + " in run " + std::to_string(run), [&](std::string& state) {
    pods = Pods(job);
    size_t good = 0;
    for (const Json& pod : pods) {
      const Json& st = pod.value("status", Json::object());
      if (!pod["metadata"].contains("deletionTimestamp") && st.value("phase", "") == "Running" &&
          !st.value("podIP", "").empty() && LabelOf(pod, "fleet.paddlepaddle.org/run") == std::to_string(run)) {
        ++good;
      }
    }
    state = std::to_string(pods.size()) + " pods, " + std::to_string(good) + " running in run " + std::to_string(run);
    return good == count && pods.size() == count;
  }, timeout);
  return pods;
}

// ---- Kueue ----

std::string OperatorE2eTest::KueueCrdsDir() {
  const char* env = std::getenv("FLEET_KUEUE_CRDS");
  std::vector<std::string> candidates = {env && *env ? env : "", SourceDir() + "/../shared/kueue/crds",
                                         "/work/shared/kueue/crds"};
  for (const std::string& dir : candidates) {
    if (!dir.empty() && std::ifstream(dir + "/kueue.x-k8s.io_workloads.yaml").good()) return dir;
  }
  return "";
}

bool OperatorE2eTest::EnableKueue() {
  const std::string crds = KueueCrdsDir();
  if (crds.empty()) return false;
  const Json config = fake_->Control("config", {{"kueue", {{"crds", crds}}}});
  return config.is_object() && config.value("kueue", false);
}

void OperatorE2eTest::SettleKueue() {
  const Json state = fake_->Control("kueue", Json::object(), "GET");
  if (!state.is_object() || !state.value("settled", false)) ADD_FAILURE() << "the Kueue stand-in did not settle: " << state;
}

namespace {

void CreateOrFail(ApiClient& api, const std::string& path, const Json& object) {
  ApiClient::Reply reply = api.Create(path, object);
  if (reply.status != 201) ADD_FAILURE() << "POST " << path << " " << NameOf(object) << " -> " << reply.status << ": " << reply.raw;
}

}  // namespace

void OperatorE2eTest::CreateResourceFlavor(const std::string& name, const Json& node_labels, const Json& tolerations,
                                           const Json& node_taints) {
  Json spec = {{"nodeLabels", node_labels}};
  if (!tolerations.empty()) spec["tolerations"] = tolerations;
  if (!node_taints.empty()) spec["nodeTaints"] = node_taints;
  CreateOrFail(*api_, KueuePath("", "resourceflavors"), {{"metadata", {{"name", name}}}, {"spec", spec}});
}

void OperatorE2eTest::CreateClusterQueue(const std::string& name, const std::vector<std::string>& covered,
                                         const std::vector<FlavorQuotas>& flavors, bool preempt_lower_priority) {
  Json flavor_list = Json::array();
  for (const FlavorQuotas& f : flavors) {
    Json resources = Json::array();
    for (const auto& [resource, quota] : f.nominal) resources.push_back({{"name", resource}, {"nominalQuota", quota}});
    flavor_list.push_back({{"name", f.flavor}, {"resources", resources}});
  }
  Json spec = {{"resourceGroups", Json::array({{{"coveredResources", covered}, {"flavors", flavor_list}}})}};
  if (preempt_lower_priority) spec["preemption"] = {{"withinClusterQueue", "LowerPriority"}};
  CreateOrFail(*api_, KueuePath("", "clusterqueues"), {{"metadata", {{"name", name}}}, {"spec", spec}});
}

void OperatorE2eTest::CreateWorkloadPriorityClass(const std::string& name, int value) {
  CreateOrFail(*api_, KueuePath("", "workloadpriorityclasses"), {{"metadata", {{"name", name}}}, {"value", value}});
}

void OperatorE2eTest::CreateLocalQueue(const std::string& name, const std::string& cluster_queue) {
  CreateOrFail(*api_, KueuePath(ns_, "localqueues"),
               {{"metadata", {{"name", name}}}, {"spec", {{"clusterQueue", cluster_queue}}}});
}

std::vector<Json> OperatorE2eTest::Workloads(const std::string& job) {
  return api_->List(KueuePath(ns_, "workloads"), "fleet.paddlepaddle.org/job-name=" + job);
}

std::optional<Json> OperatorE2eTest::JobWorkload(const std::string& job) {
  for (Json& wl : Workloads(job)) {
    if (!wl["metadata"].contains("deletionTimestamp") && !IsConditionTrue(wl, "Finished")) return std::move(wl);
  }
  return std::nullopt;
}

Json OperatorE2eTest::WaitForWorkload(const std::string& job, const std::string& what,
                                      const std::function<bool(const Json&)>& pred, Millis timeout) {
  Json found = nullptr;
  const bool ok = Eventually("the Workload of " + job + " " + what, [&](std::string& state) {
    SettleKueue();
    const std::optional<Json> wl = JobWorkload(job);
    if (!wl) {
      state = "no live Workload";
      return false;
    }
    state = NameOf(*wl) + " status " + wl->value("status", Json::object()).dump();
    if (!pred(*wl)) return false;
    found = *wl;
    return true;
  }, timeout);
  return ok ? found : Json(nullptr);
}

Json OperatorE2eTest::EvictWorkload(const std::string& workload, const std::string& reason, const std::string& message) {
  Json body = {{"action", "evict"}, {"namespace", ns_}, {"name", workload}, {"reason", reason}};
  if (!message.empty()) body["message"] = message;
  return fake_->Control("kueue", body);
}

}  // namespace fleet::op::e2e
