// End to end, runtime fleet: `examples/k8s/ps-fleet-runtime.yaml` as the operator turns it into
// pods, and those pods' containers run on this machine as the kubelet would run them: each
// container's command with the env the kubelet resolves (fieldRefs from the pod, the endpoint lists
// from the job's ConfigMap). The fake gives pods 127.x addresses, so every server binds its own
// POD_IP:PADDLE_PORT. The servers are the real fleet-ps-server, the trainers the example's Python
// script on the fleet_runtime module; their exits are reported back as the pods' outcomes, and the
// job must train (final loss under the example test's threshold) and end Succeeded.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "../common/test_process.h"
#include "harness.h"

namespace fleet::op::e2e {
namespace {

constexpr const char* kImageExamples = "/opt/fleetjob/examples";   // where the tools image has them

// What the kubelet would exec for a container, mapped onto this checkout: fleet-ps-server (on the
// sidecar image's PATH) is the built binary, the tools image's examples are the repository's.
std::vector<std::string> LocalArgv(const Json& container) {
  std::vector<std::string> argv;
  for (const Json& word : container.value("command", Json::array())) argv.push_back(word.get<std::string>());
  for (const Json& word : container.value("args", Json::array())) argv.push_back(word.get<std::string>());
  for (std::string& word : argv) {
    if (word == "fleet-ps-server") word = FLEET_PS_SERVER_BINARY;
    if (word.rfind(kImageExamples, 0) == 0) word = SourceDir() + "/examples" + word.substr(std::strlen(kImageExamples));
  }
  return argv;
}

class RuntimeFleetE2eTest : public OperatorE2eTest {};

TEST_F(RuntimeFleetE2eTest, ExampleJobTrainsOnFleetPsServersAndSucceeds) {
  std::vector<Json> docs = LoadYamlDocuments(SourceDir() + "/examples/k8s/ps-fleet-runtime.yaml");
  ASSERT_EQ(docs.size(), 1u);
  Json job = docs[0];
  const std::string name = job["metadata"]["name"];
  job["spec"]["port"] = fleet::test::FreePort();   // nothing else on this machine listens there
  fake().Control("config", {{"podNetwork", "loopback"}});
  ASSERT_TRUE(WaitReady(StartOperator()));
  CreateJob(job);

  const std::vector<Json> pods = WaitForRunningPods(name, 4, 0);
  ASSERT_EQ(pods.size(), 4u);
  std::optional<Json> lists;
  ASSERT_TRUE(Eventually("the endpoint lists", [&](std::string&) { return (lists = EndpointsConfigMap(name)).has_value(); }));

  struct Running {
    std::string pod;
    pid_t pid;
    std::filesystem::path log;
  };
  std::vector<Running> running;
  for (const Json& pod : pods) {
    const std::string pod_name = NameOf(pod);
    const Json& containers = pod["spec"]["containers"];
    ASSERT_EQ(containers.size(), 1u) << pod_name;
    auto env = ResolveEnv(pod, lists, 0);
    ASSERT_TRUE(env.ok()) << pod_name << ": " << env.error();
    std::vector<std::pair<std::string, std::string>> vars(env->begin(), env->end());
    vars.emplace_back("PYTHONPATH", FLEET_PYTHON_MODULE_DIR);   // the tools image's PYTHONPATH
    if (LabelOf(pod, "fleet.paddlepaddle.org/role") == "server") {
      EXPECT_EQ(containers[0]["name"], "fleet-ps-server") << pod_name;
    }
    const std::filesystem::path log = std::filesystem::path(dir().path()) / (pod_name + ".log");
    running.push_back({pod_name, fleet::test::Spawn(LocalArgv(containers[0]), vars, dir().path(), log), log});
  }

  std::map<std::string, std::string> outputs;
  for (const Running& r : running) {
    const int code = fleet::test::WaitChild(r.pid, 120, nullptr);
    outputs[r.pod] = fleet::test::ReadFile(r.log);
    EXPECT_EQ(code, 0) << r.pod << " exited " << code << ":\n" << outputs[r.pod];
    PodAction(r.pod, code == 0 ? Json{{"action", "succeed"}} : Json{{"action", "fail"}, {"exitCode", code}});
  }
  for (int worker = 0; worker < 2; ++worker) {
    const std::string& out = outputs[name + "-worker-" + std::to_string(worker)];
    const double loss = fleet::test::FinalLoss(out, worker);
    EXPECT_GE(loss, 0) << "no final loss:\n" << out;
    EXPECT_LT(loss, 0.25) << out;   // chance is ln 2 = 0.69; the example's own test uses 0.25
  }
  EXPECT_THAT(outputs[name + "-server-0"], ::testing::HasSubstr("all 2 trainers stopped"));
  const Json done = WaitForPhase(name, "Succeeded");
  EXPECT_EQ(done["status"].value("runtime", ""), "fleet");
}

}  // namespace
}  // namespace fleet::op::e2e
