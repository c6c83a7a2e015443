// The dashboard and the alert rules against Prometheus itself:
//  - every PromQL expression of docs/grafana/fleetjob-dashboard.json and
//    docs/prometheus/fleetjob-alerts.yaml passes `promtool check rules`, and the alerts' unit tests
//    (docs/prometheus/fleetjob-alerts.test.yaml) pass `promtool test rules`;
//  - a real Prometheus server (loopback, temp dir, 1 s scrapes) scrapes live fleet-sidecar processes
//    that follow the logs of the parameter-server example job run by fleetrun, loads the alert rules
//    (they evaluate without error), and every dashboard query returns data.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fake_apiserver_fixture.h"
#include "sidecar_process.h"

namespace fleet::sidecar::testing {
namespace {

using kube::testing::HttpConnection;
using kube::testing::TempDir;
using Json = nlohmann::json;
using std::chrono::milliseconds;
using std::chrono::seconds;

std::string ReadText(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A dashboard's queries with Grafana's variables filled in: every namespace, job and role; a 10 s
// rate window (the test scrapes every second); the 10 slowest ranks in per-rank panels. Grafana's label_values(metric, label) variable
// queries become `count by (label) (metric)`.
std::vector<std::pair<std::string, std::string>> DashboardQueries(const Json& dashboard) {
  const std::vector<std::pair<std::string, std::string>> variables = {
      {"$__rate_interval", "10s"}, {"$namespace", ".*"}, {"$job", ".*"}, {"$role", ".*"},
      {"$scrape_job", "fleet-sidecar"}, {"$ranks", "10"}};
  auto fill = [&](std::string expr) {
    for (const auto& [name, value] : variables) {
      for (size_t at = expr.find(name); at != std::string::npos; at = expr.find(name, at + value.size())) {
        expr.replace(at, name.size(), value);
      }
    }
    return expr;
  };
  std::vector<std::pair<std::string, std::string>> queries;
  for (const Json& panel : dashboard.at("panels")) {
    for (const Json& target : panel.value("targets", Json::array())) {
      queries.emplace_back(panel.at("title").get<std::string>() + " / " + target.at("refId").get<std::string>(),
                           fill(target.at("expr").get<std::string>()));
    }
  }
  static const std::regex label_values(R"(^label_values\((.*),\s*(\w+)\)$)");
  for (const Json& variable : dashboard.at("templating").at("list")) {
    if (variable.value("type", "") != "query") continue;
    std::smatch m;
    const std::string definition = variable.at("definition").get<std::string>();
    EXPECT_TRUE(std::regex_match(definition, m, label_values)) << definition;
    if (m.empty()) continue;
    queries.emplace_back("variable " + variable.at("name").get<std::string>(),
                         fill("count by (" + m[2].str() + ") (" + m[1].str() + ")"));
  }
  return queries;
}

Json LoadDashboard() {
  return Json::parse(ReadText(SourceDir() + "/docs/grafana/fleetjob-dashboard.json"));
}

TEST(DashboardAndAlertsTest, EveryExpressionPassesPromtool) {
  const std::string promtool = FindTool("promtool");
  if (promtool.empty()) GTEST_SKIP() << "promtool is not installed";
  const std::string alerts = SourceDir() + "/docs/prometheus/fleetjob-alerts.yaml";
  auto check = RunCommand({promtool, "check", "rules", alerts});
  ASSERT_TRUE(check);
  EXPECT_EQ(check->status, 0) << check->output;
  EXPECT_NE(check->output.find("SUCCESS: 6 rules found"), std::string::npos) << check->output;
  auto unit = RunCommand({promtool, "test", "rules", SourceDir() + "/docs/prometheus/fleetjob-alerts.test.yaml"});
  ASSERT_TRUE(unit);
  EXPECT_EQ(unit->status, 0) << unit->output;

  // The dashboard's queries, as recording rules.
  const auto queries = DashboardQueries(LoadDashboard());
  ASSERT_GE(queries.size(), 20u);
  TempDir dir;
  Json rules = Json::array();
  for (size_t i = 0; i < queries.size(); ++i) {
    rules.push_back({{"record", "dashboard_query_" + std::to_string(i)}, {"expr", queries[i].second}});
  }
  const std::string file = dir.Write("dashboard-rules.json", Json{{"groups", {{{"name", "dashboard"}, {"rules", rules}}}}}.dump(2));
  check = RunCommand({promtool, "check", "rules", file});
  ASSERT_TRUE(check);
  EXPECT_EQ(check->status, 0) << check->output;
  EXPECT_NE(check->output.find("SUCCESS: " + std::to_string(queries.size()) + " rules found"), std::string::npos)
      << check->output;
}

// A child process in its own process group, its output in a file; the group is killed at the end.
class Child {
 public:
  Child(const std::vector<std::string>& argv, const std::vector<std::string>& env, const std::string& out) {
    std::vector<std::string> args = argv;
    std::vector<char*> c_args;
    for (std::string& a : args) c_args.push_back(a.data());
    c_args.push_back(nullptr);
    std::vector<std::string> envs = env;
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      for (std::string& e : envs) ::putenv(e.data());
      const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      const int in = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (fd < 0 || in < 0) ::_exit(127);
      ::dup2(in, STDIN_FILENO);
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::execv(c_args[0], c_args.data());
      ::_exit(127);
    }
    if (pid_ > 0) ::setpgid(pid_, pid_);
  }
  ~Child() {
    if (pid_ <= 0) return;
    ::kill(-pid_, SIGTERM);
    const bool ended = Eventually([&] { return ::waitpid(pid_, nullptr, WNOHANG) == pid_; }, seconds(3));
    ::kill(-pid_, SIGKILL);  // whatever of the group is left
    if (!ended) ::waitpid(pid_, nullptr, 0);
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  bool Running() { return pid_ > 0 && ::waitpid(pid_, nullptr, WNOHANG) == 0; }

 private:
  pid_t pid_ = -1;
};

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof addr;
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length);
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string UrlEncode(const std::string& s) {
  static const char* hex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  return out;
}

std::string RegexEscape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::string("\\^$.|?*+()[]{}").find(c) != std::string::npos) out += '\\';
    out += c;
  }
  return out;
}

// One sidecar per "pod", as the operator would run them: it follows its process's log (`log` in
// `log_dir`), and watches fleetrun (the pod's main process) by its command line.
std::unique_ptr<SidecarProcess> StartSidecar(const TempDir& dir, const std::string& log_dir, const std::string& role,
                                             int rank, const std::string& log) {
  return std::make_unique<SidecarProcess>(
      std::vector<std::string>{"agent", "--namespace=default", "--job=ps-example", "--role=" + role,
                               "--pod=ps-example-" + role + "-" + std::to_string(rank), "--rank=" + std::to_string(rank),
                               "--metrics-port=9", "--listen=127.0.0.1:0", "--log-file=" + log_dir + "/" + log,
                               "--main-process=on", "--main-process-match=" + RegexEscape("--log_dir=" + log_dir),
                               "--log-poll-interval=100ms"},
      dir.path());
}

// Prometheus' configuration: 1 s scrapes of `targets` ("'host:port', ..."), the alert rules loaded.
std::string WritePrometheusConfig(const TempDir& dir, const std::string& targets) {
  return dir.Write(
      "prometheus.yml", "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                        "rule_files:\n  - '" + SourceDir() + "/docs/prometheus/fleetjob-alerts.yaml'\n"
                        "scrape_configs:\n  - job_name: fleet-sidecar\n    honor_labels: true\n"
                        "    static_configs:\n      - targets: [" + targets + "]\n");
}

// Prometheus' HTTP API: an answer's JSON, or null when there is none.
class PrometheusApi {
 public:
  explicit PrometheusApi(int port) : api_("http://127.0.0.1:" + std::to_string(port)) {}
  Json Get(const std::string& path) {
    auto r = api_.Send("GET", path);
    if (!r || r->status != 200) return Json();
    return Json::parse(r->body, nullptr, false);
  }
  Json Query(const std::string& expr) { return Get("/api/v1/query?query=" + UrlEncode(expr)); }

 private:
  HttpConnection api_;
};

// Every target up (no sleeping: the first scrape can take a few seconds); `last` is the last answer.
bool EveryTargetUp(PrometheusApi& api, size_t targets, std::string& last) {
  return Eventually(
      [&] {
        const Json targets_json = api.Get("/api/v1/targets");
        if (!targets_json.is_object()) return false;
        last = targets_json.dump();
        const Json& active = targets_json["data"]["activeTargets"];
        if (active.size() != targets) return false;
        for (const Json& t : active) {
          if (t.value("health", "") != "up") return false;
        }
        return true;
      },
      seconds(20));
}

// Every dashboard query returns data (rates need two scrapes with steps between them).
void ExpectEveryQueryHasData(PrometheusApi& api, const std::vector<std::pair<std::string, std::string>>& queries) {
  std::map<std::string, std::string> empty;
  Eventually(
      [&] {
        empty.clear();
        for (const auto& [name, query] : queries) {
          const Json answer = api.Query(query);
          if (!answer.is_object() || answer.value("status", "") != "success") {
            empty[name] = query + " -> " + answer.dump();
          } else if (answer["data"]["result"].empty()) {
            empty[name] = query + " -> no data";
          }
        }
        return empty.empty();
      },
      seconds(20));
  for (const auto& [name, why] : empty) ADD_FAILURE() << name << ": " << why;
}

// The straggler panels name the slowest rank (one series per job and role, with its rank).
void CheckStragglerPanels(PrometheusApi& api, const std::vector<std::pair<std::string, std::string>>& queries) {
  for (const auto& [name, query] : queries) {
    if (name != "Slowest rank vs median / A" && name != "Slowest / median / A") continue;
    const Json answer = api.Query(query);
    ASSERT_TRUE(answer.is_object()) << name;
    for (const Json& series : answer["data"]["result"]) {
      EXPECT_TRUE(series["metric"].contains("rank")) << name << ": " << series.dump();
    }
    EXPECT_EQ(answer["data"]["result"].size(), 1u) << name << " (the trainers): " << answer.dump();
  }
}

// What the job did, as Prometheus sees it: both trainers step, the loss is there, fleetrun runs.
void CheckJobMetrics(PrometheusApi& api) {
  const Json steps = api.Query("sum by (rank) (fleet_training_steps_total{job=\"ps-example\"})");
  ASSERT_TRUE(steps.is_object());
  EXPECT_EQ(steps["data"]["result"].size(), 2u) << steps.dump();
  for (const Json& r : steps["data"]["result"]) EXPECT_GT(std::stod(r["value"][1].get<std::string>()), 10) << r.dump();
  const Json main_up = api.Query("min(fleet_training_main_process_up)");
  ASSERT_TRUE(main_up.is_object());
  ASSERT_EQ(main_up["data"]["result"].size(), 1u) << main_up.dump();
  EXPECT_EQ(main_up["data"]["result"][0]["value"][1], "1");
}

// The alert rules are loaded and evaluate without errors (none fires on a healthy job).
void CheckAlertRules(PrometheusApi& api) {
  const Json rules = api.Get("/api/v1/rules");
  ASSERT_TRUE(rules.is_object());
  size_t evaluated = 0;
  for (const Json& group : rules["data"]["groups"]) {
    for (const Json& rule : group["rules"]) {
      EXPECT_EQ(rule.value("health", ""), "ok") << rule.dump();
      EXPECT_NE(rule.value("state", ""), "firing") << rule.dump();
      ++evaluated;
    }
  }
  EXPECT_EQ(evaluated, 6u) << rules.dump();
}

TEST(PrometheusE2eTest, ScrapesSidecarsOfARealJobAndEveryDashboardQueryHasData) {
  const std::string prometheus = FindTool("prometheus");
  if (prometheus.empty()) GTEST_SKIP() << "prometheus is not installed";
  if (::access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3";
  const char* fleetrun_env = std::getenv("FLEETRUN");
  const std::string fleetrun = fleetrun_env && *fleetrun_env ? fleetrun_env : FLEETRUN_BUILT_PATH;
  TempDir dir;
  const std::string log_dir = dir.path() + "/log";

  // The parameter-server example: 2 servers, 2 trainers, running until the test ends.
  Child job({fleetrun, "--server_num=2", "--worker_num=2", "--log_dir=" + log_dir, SourceDir() + "/examples/ps/train.py"},
            {"FLEET_EXAMPLE_STEPS=100000000", "FLEET_EXAMPLE_LOG_EVERY=10", "FLEET_EXAMPLE_RETRY_SECONDS=0.2",
             "PATH=/usr/bin:/bin"},
            dir.path() + "/fleetrun.out");
  std::vector<std::unique_ptr<SidecarProcess>> sidecars;
  sidecars.push_back(StartSidecar(dir, log_dir, "worker", 0, "workerlog.0"));
  sidecars.push_back(StartSidecar(dir, log_dir, "worker", 1, "workerlog.1"));
  sidecars.push_back(StartSidecar(dir, log_dir, "server", 0, "serverlog.0"));
  std::string targets;
  for (auto& s : sidecars) {
    const int port = s->WaitForPort();
    ASSERT_GT(port, 0) << s->Stderr();
    targets += std::string(targets.empty() ? "" : ", ") + "'127.0.0.1:" + std::to_string(port) + "'";
  }

  const int web_port = FreePort();
  const std::string config = WritePrometheusConfig(dir, targets);
  Child server({prometheus, "--config.file=" + config, "--storage.tsdb.path=" + dir.path() + "/tsdb",
                "--web.listen-address=127.0.0.1:" + std::to_string(web_port), "--log.level=warn"},
               {}, dir.path() + "/prometheus.out");
  PrometheusApi api(web_port);
  std::string last;
  ASSERT_TRUE(EveryTargetUp(api, sidecars.size(), last)) << last << "\n" << ReadText(dir.path() + "/prometheus.out");
  ASSERT_TRUE(job.Running()) << ReadText(dir.path() + "/fleetrun.out");

  const auto queries = DashboardQueries(LoadDashboard());
  ExpectEveryQueryHasData(api, queries);
  ASSERT_NO_FATAL_FAILURE(CheckStragglerPanels(api, queries));
  ASSERT_NO_FATAL_FAILURE(CheckJobMetrics(api));
  ASSERT_NO_FATAL_FAILURE(CheckAlertRules(api));
  for (auto& s : sidecars) EXPECT_TRUE(s->Running()) << s->Stderr();
}

}  // namespace
}  // namespace fleet::sidecar::testing
