// What the operator benchmarks share: the FleetJob CRD and a job object for the fake API server,
// a kubeconfig for the real fleet-operator binary, starting and stopping it; and what proc.h reads
// of a process.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fake_apiserver_fixture.h"
#include "fleet/kube/client.h"
#include "harness.h"
#include "proc.h"

namespace fleet::bench {

using kube::Json;

// A FleetJob of `workers` (and `servers`: a parameter-server job) with a plain container.
inline Json FleetJobObject(const std::string& ns, const std::string& name, int servers, int workers) {
  const Json container = {{"name", "paddle"}, {"image", "paddlepaddle/paddle:2.5.0"},
                          {"command", {"python", "-u", "train.py"}},
                          {"resources", {{"requests", {{"cpu", "1"}, {"memory", "1Gi"}}}, {"limits", {{"cpu", "2"}, {"memory", "2Gi"}}}}}};
  const Json tmpl = {{"spec", {{"containers", Json::array({container})}}}};
  Json spec = {{"mode", servers > 0 ? "ps" : "collective"}, {"worker", {{"replicas", workers}, {"template", tmpl}}}};
  if (servers > 0) spec["server"] = {{"replicas", servers}, {"template", tmpl}};
  return {{"apiVersion", "fleet.paddlepaddle.org/v1alpha1"}, {"kind", "FleetJob"},
          {"metadata", {{"name", name}, {"namespace", ns}}}, {"spec", spec}};
}

inline void CreateCrd(kube::Client& client) {
  const Json crd = op::e2e::LoadYamlDocuments(op::e2e::SourceDir() + "/crds/fleetjob.yaml").at(0);
  auto created = client.Create({"apiextensions.k8s.io", "v1", "customresourcedefinitions", false}, "", crd);
  if (!created.ok()) {
    std::fprintf(stderr, "cannot create the CRD: %s\n", created.status().ToString().c_str());
    std::exit(1);
  }
}

inline std::string WriteKubeconfig(const kube::testing::TempDir& dir, const std::string& url) {
  return dir.Write("kubeconfig", "apiVersion: v1\nkind: Config\nclusters: [{name: f, cluster: {server: \"" + url +
                                     "\"}}]\nusers: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: "
                                     "{cluster: f, user: u, namespace: default}}]\ncurrent-context: c\n");
}

// The real fleet-operator binary with `args`, its stderr in `log`.
inline pid_t SpawnOperator(const std::string& log, const std::vector<std::string>& args) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::freopen(log.c_str(), "w", stderr);
    std::vector<std::string> argv = {"fleet-operator"};
    argv.insert(argv.end(), args.begin(), args.end());
    std::vector<char*> raw;
    for (std::string& a : argv) raw.push_back(a.data());
    raw.push_back(nullptr);
    ::execv(op::e2e::OperatorBinary().c_str(), raw.data());
    _exit(127);
  }
  return pid;
}

using Clock = std::chrono::steady_clock;
using Mark = std::function<bool(const Json&)>;

inline double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Positional argument `i` as an int, else `fallback`.
inline int Arg(int argc, char** argv, int i, int fallback) { return argc > i ? std::atoi(argv[i]) : fallback; }

// The first moment each mark held, from one watch of `resource` in `ns` (restarted if the server
// ends it). A mark sees every event's object, in order, from the watch thread only: it may count.
class Marks {
 public:
  Marks(std::shared_ptr<kube::Client> client, const kube::Resource& resource, const std::string& ns, std::vector<Mark> marks)
      : client_(std::move(client)), marks_(std::move(marks)), at_(marks_.size()) {
    thread_ = std::thread([this, resource, ns] {
      fleet::kube::WatchOptions options;
      options.timeout_seconds = 600;
      while (!cancel_.cancelled() && Remaining() > 0) {
        const auto status = client_->Watch(resource, ns, options, [this](const fleet::kube::WatchEvent& e) {
          if (e.type == fleet::kube::WatchEventType::kDeleted) return true;
          const auto now = Clock::now();
          std::lock_guard<std::mutex> lock(mu_);
          for (size_t i = 0; i < marks_.size(); ++i) {
            if (!at_[i] && marks_[i](e.object)) at_[i] = now;
          }
          return RemainingLocked() > 0;
        }, cancel_);
        if (!status.ok()) std::this_thread::sleep_for(std::chrono::milliseconds(10));   // before watching again
      }
    });
  }
  ~Marks() {
    cancel_.Cancel();
    thread_.join();
  }
  // When mark `i` held; exits when it has not within 5 minutes of `since`.
  Clock::time_point At(size_t i, Clock::time_point since, const char* what) {
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (at_[i]) return *at_[i];
      }
      if (Clock::now() - since > std::chrono::minutes(5)) {
        std::fprintf(stderr, "%s: not within 5 minutes\n", what);
        std::exit(1);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

 private:
  size_t Remaining() {
    std::lock_guard<std::mutex> lock(mu_);
    return RemainingLocked();
  }
  size_t RemainingLocked() const {
    return static_cast<size_t>(std::count(at_.begin(), at_.end(), std::nullopt));
  }

  std::shared_ptr<kube::Client> client_;
  std::vector<Mark> marks_;
  std::mutex mu_;
  std::vector<std::optional<Clock::time_point>> at_;
  fleet::kube::CancelToken cancel_;
  std::thread thread_;
};

inline void CreateOrExit(kube::Client& client, const kube::Resource& resource, const std::string& ns, const Json& object) {
  auto created = client.Create(resource, ns, object);
  if (!created.ok()) {
    std::fprintf(stderr, "cannot create %s %s: %s\n", resource.plural.c_str(), object["metadata"].value("name", "").c_str(),
                 created.status().ToString().c_str());
    std::exit(1);
  }
}

// Lets the watches of a job's milestones open before the job is created: a watch that opened later
// would date what it finds by its opening, not by the event.
inline void LetWatchesStart() { std::this_thread::sleep_for(std::chrono::milliseconds(300)); }

inline double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0 : values[values.size() / 2];
}

// The real fleet-operator binary (default flags, all namespaces, plus `args`) against `fake`, once
// its caches are synced; exits when it does not start.
inline std::unique_ptr<op::e2e::OperatorProcess> StartOperator(kube::testing::FakeApiServer& fake,
                                                              const kube::testing::TempDir& dir,
                                                              const std::vector<std::string>& args) {
  std::vector<std::string> all = {"--kubeconfig=" + WriteKubeconfig(dir, fake.url()), "--metrics-bind-address=0",
                                  "--health-probe-bind-address=0"};
  all.insert(all.end(), args.begin(), args.end());
  auto op = std::make_unique<op::e2e::OperatorProcess>("fleet-operator", op::e2e::OperatorBinary(), all,
                                                       dir.path() + "/operator.log");
  for (int i = 0; op->Log().find("caches synced") == std::string::npos; ++i) {
    if (i > 3000 || !op->Running()) {
      std::fprintf(stderr, "fleet-operator did not sync its caches:\n%s\n", op->Log().c_str());
      std::exit(1);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return op;
}

inline void StopOperator(pid_t pid) {
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

}  // namespace fleet::bench
