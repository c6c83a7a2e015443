// What the operator benchmarks share: the FleetJob CRD and a job object for the fake API server,
// a kubeconfig for the real fleet-operator binary, starting and stopping it; and what proc.h reads
// of a process.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
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

inline void StopOperator(pid_t pid) {
  ::kill(pid, SIGTERM);
  int status = 0;
  ::waitpid(pid, &status, 0);
}

}  // namespace fleet::bench
