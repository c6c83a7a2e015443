// End to end: the real fleet-operator wires pods against the fake control plane, and every pod's
// env, as the kubelet resolves it, passes the contract library's role-maker and cluster checks.
// Issue 4, section 5: PS 2x4, collective with fleetrun inside, two-stage heter, Service mode,
// HostNetwork port allocation across two jobs.
#include <signal.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "builders.h"
#include "fleet/base/strings.h"
#include "harness.h"

namespace fleet::op::e2e {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using testing::JobBuilder;

constexpr const char* kRunLabel = "fleet.paddlepaddle.org/run";
constexpr const char* kRoleLabel = "fleet.paddlepaddle.org/role";
constexpr const char* kIndexLabel = "fleet.paddlepaddle.org/index";

std::string Ip(const Json& pod) { return pod.value("status", Json::object()).value("podIP", ""); }
std::string HostIp(const Json& pod) { return pod.value("status", Json::object()).value("hostIP", ""); }
int Index(const Json& pod) { return std::stoi(LabelOf(pod, kIndexLabel)); }

std::map<std::string, Json> ByName(const std::vector<Json>& pods) {
  std::map<std::string, Json> out;
  for (const Json& pod : pods) out[NameOf(pod)] = pod;
  return out;
}

std::vector<std::string> Names(const std::vector<Json>& pods) {
  std::vector<std::string> names;
  for (const Json& pod : pods) names.push_back(NameOf(pod));
  std::sort(names.begin(), names.end());
  return names;
}

// "h0:p,h1:p,...": the endpoints of `pods` (in index order) with `host_of` and `port`.
std::string List(const std::map<std::string, Json>& pods, const std::string& prefix, int count,
                 std::string (*host_of)(const Json&), int port) {
  std::string out;
  for (int i = 0; i < count; ++i) {
    out += (i ? "," : "") + host_of(pods.at(prefix + std::to_string(i))) + ":" + std::to_string(port);
  }
  return out;
}

// Resolves a pod's env and reads it as Paddle's role maker `kind` does.
Result<ParsedRole> ParsePodEnv(const Json& pod, const std::optional<Json>& cm, RoleMakerKind kind) {
  auto env = ResolveEnv(pod, cm);
  if (!env) return Error{"the kubelet cannot resolve the env: " + env.error()};
  auto parsed = ParseProcessEnv(*env, kind);
  if (!parsed) return Error{"Paddle's role maker refuses the env: " + parsed.error()};
  return parsed;
}

void ExpectOwnedBy(const Json& object, const Json& job) {
  SCOPED_TRACE(NameOf(object));
  const Json refs = object["metadata"].value("ownerReferences", Json::array());
  ASSERT_EQ(refs.size(), 1u) << object["metadata"].dump();
  EXPECT_EQ(refs[0].value("apiVersion", ""), "fleet.paddlepaddle.org/v1alpha1");
  EXPECT_EQ(refs[0].value("kind", ""), "FleetJob");
  EXPECT_EQ(refs[0].value("name", ""), NameOf(job));
  EXPECT_EQ(refs[0].value("uid", ""), UidOf(job));
  EXPECT_EQ(refs[0].value("controller", false), true);
}

class WiringE2eTest : public OperatorE2eTest {};

// Least privilege: the pod runs as the job's sidecar account without an automounted token; the
// gate is a native sidecar (an init container that keeps running, with a startup probe); the
// endpoint lists are mounted as files.
void ExpectPsPodSpec(const Json& pod) {
  const Json& spec = pod["spec"];
  EXPECT_EQ(spec.value("serviceAccountName", ""), "ps-fleet-sidecar");
  EXPECT_EQ(spec.value("automountServiceAccountToken", true), false);
  EXPECT_EQ(spec.value("restartPolicy", ""), "Never");
  ASSERT_FALSE(spec.value("initContainers", Json::array()).empty());
  const Json& gate = spec["initContainers"][0];
  EXPECT_EQ(gate.value("name", ""), "fleet-sidecar");
  EXPECT_EQ(gate.value("restartPolicy", ""), "Always");
  EXPECT_TRUE(gate.contains("startupProbe"));
  bool mounted = false;
  for (const Json& m : spec["containers"][0].value("volumeMounts", Json::array())) {
    mounted = mounted || m.value("mountPath", "") == "/etc/fleet/endpoints";
  }
  EXPECT_TRUE(mounted) << "the endpoint lists are not mounted as files";
}

// Every pod's env of the PS 2x4 job, resolved with the endpoints ConfigMap, as Paddle's PS role
// maker reads it.
void ExpectPsEnvOfEveryPod(const std::map<std::string, Json>& by_name, const std::optional<Json>& cm) {
  for (const auto& [name, pod] : by_name) {
    SCOPED_TRACE(name);
    auto parsed = ParsePodEnv(pod, cm, RoleMakerKind::kParameterServer);
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    const bool server = LabelOf(pod, kRoleLabel) == "server";
    EXPECT_FALSE(parsed->non_distributed);
    EXPECT_EQ(parsed->role, server ? Role::kServer : Role::kTrainer);
    EXPECT_EQ(parsed->id, Index(pod));
    EXPECT_EQ(parsed->current_endpoint, Ip(pod) + ":6170");
    EXPECT_EQ(parsed->trainers_num, 4);
    EXPECT_EQ(parsed->server_endpoints.size(), 2u);
    EXPECT_EQ(parsed->trainer_endpoints.size(), 4u);
  }
}

// The status of the PS 2x4 job once every pod runs.
void ExpectRunningPsStatus(const Json& status) {
  EXPECT_EQ(status.value("mode", ""), "ps");
  EXPECT_EQ(status.value("restartCount", -1), 0);
  EXPECT_EQ(status.value("observedGeneration", -1), 1);
  EXPECT_EQ(ConditionOf(status, "Running").value("status", ""), "True");
  const Json expect_server = {{"replicas", 2}, {"active", 2}, {"ready", 2}, {"succeeded", 0}, {"failed", 0}};
  const Json expect_worker = {{"replicas", 4}, {"active", 4}, {"ready", 4}, {"succeeded", 0}, {"failed", 0}};
  EXPECT_EQ(status["replicaStatuses"]["server"], expect_server);
  EXPECT_EQ(status["replicaStatuses"]["worker"], expect_worker);
}

// The kubelet is manual here: the test decides when pods run, so it can see that the lists wait
// for the last address.
class ManualKubeletWiringE2eTest : public OperatorE2eTest {
 protected:
  ManualKubeletWiringE2eTest() { fake_args_ = {"--kubelet", "manual"}; }

  // The sidecar's identity of job "ps" may read the job's endpoints ConfigMap, read the job's pods
  // and set their status conditions, and nothing else.
  void ExpectPsSidecarRbac() {
    const auto role = api().Get("/apis/rbac.authorization.k8s.io/v1/namespaces/" + ns() + "/roles/ps-fleet-sidecar");
    ASSERT_TRUE(role.has_value());
    const Json job_pods = Json::array({"ps-server-0", "ps-server-1", "ps-worker-0", "ps-worker-1", "ps-worker-2", "ps-worker-3"});
    const Json expect_rules = Json::array({{{"apiGroups", Json::array({""})}, {"resources", Json::array({"configmaps"})},
                                            {"resourceNames", Json::array({"ps-endpoints"})},
                                            {"verbs", Json::array({"get", "list", "watch"})}},
                                           {{"apiGroups", Json::array({""})}, {"resources", Json::array({"pods"})},
                                            {"resourceNames", job_pods}, {"verbs", Json::array({"get"})}},
                                           {{"apiGroups", Json::array({""})}, {"resources", Json::array({"pods/status"})},
                                            {"resourceNames", job_pods}, {"verbs", Json::array({"patch"})}}});
    EXPECT_EQ((*role)["rules"], expect_rules);
    EXPECT_TRUE(api().Get(CorePath(ns(), "serviceaccounts", "ps-fleet-sidecar")).has_value());
    EXPECT_TRUE(api().Get("/apis/rbac.authorization.k8s.io/v1/namespaces/" + ns() + "/rolebindings/ps-fleet-sidecar").has_value());
  }

  // Five of six pods run: the operator has seen them (it counts them ready) but publishes nothing.
  void ExpectNothingPublishedWhileAPodHasNoAddress() {
    for (const std::string name : {"ps-server-0", "ps-server-1", "ps-worker-0", "ps-worker-1", "ps-worker-2"}) {
      PodAction(name, {{"action", "run"}});
    }
    ASSERT_FALSE(WaitForJob("ps", "to count 5 ready pods", [](const Json& j) {
      const Json r = j.value("status", Json::object()).value("replicaStatuses", Json::object());
      return r.is_object() && r.value("server", Json::object()).value("ready", 0) == 2 &&
             r.value("worker", Json::object()).value("ready", 0) == 3;
    }).is_null());
    EXPECT_FALSE(EndpointsConfigMap("ps").has_value()) << "lists published before every pod had an address";
    EXPECT_EQ(JobStatus("ps").value("phase", ""), "Pending");
  }
};

TEST_F(ManualKubeletWiringE2eTest, ParameterServerTwoServersFourWorkers) {
  StartOperator();
  const Json job = CreateJob(JobBuilder("ps").Ps(2, 4).Obj());
  ASSERT_FALSE(job.is_null());

  std::vector<Json> pods;
  ASSERT_TRUE(Eventually("6 pods", [&](std::string& state) {
    pods = Pods("ps");
    state = std::to_string(pods.size()) + " pods";
    return pods.size() == 6;
  }));
  EXPECT_THAT(Names(pods), ElementsAre("ps-server-0", "ps-server-1", "ps-worker-0", "ps-worker-1", "ps-worker-2",
                                       "ps-worker-3"));
  for (const Json& pod : pods) {
    SCOPED_TRACE(NameOf(pod));
    ExpectOwnedBy(pod, job);
    EXPECT_EQ(LabelOf(pod, kRunLabel), "0");
    EXPECT_EQ(NameOf(pod), "ps-" + LabelOf(pod, kRoleLabel) + "-" + LabelOf(pod, kIndexLabel));
    ASSERT_NO_FATAL_FAILURE(ExpectPsPodSpec(pod));
  }
  ASSERT_NO_FATAL_FAILURE(ExpectPsSidecarRbac());
  ASSERT_NO_FATAL_FAILURE(ExpectNothingPublishedWhileAPodHasNoAddress());

  PodAction("ps-worker-3", {{"action", "run"}});
  const Json running = WaitForPhase("ps", "Running");
  ASSERT_FALSE(running.is_null());

  const auto by_name = ByName(Pods("ps"));
  ASSERT_EQ(by_name.size(), 6u);
  const auto cm = EndpointsConfigMap("ps");
  ASSERT_TRUE(cm.has_value());
  ExpectOwnedBy(*cm, job);
  EXPECT_EQ((*cm)["metadata"]["annotations"].value("fleet.paddlepaddle.org/run", ""), "0");
  EXPECT_EQ((*cm)["data"].value("PADDLE_PSERVERS_IP_PORT_LIST", ""), List(by_name, "ps-server-", 2, Ip, 6170));
  EXPECT_EQ((*cm)["data"].value("PADDLE_TRAINER_ENDPOINTS", ""), List(by_name, "ps-worker-", 4, Ip, 6170));
  ASSERT_NO_FATAL_FAILURE(ExpectPsEnvOfEveryPod(by_name, cm));
  ExpectRunningPsStatus(running["status"]);
}

// Collective pods running fleetrun inside (processesPerPod 4, 4 GPUs each): each pod gets the
// node-level cluster env of the contract, which fleetrun turns into 4 processes.
TEST_F(WiringE2eTest, CollectiveFleetrunInsideGetsTheClusterEnv) {
  StartOperator();
  ASSERT_FALSE(CreateJob(JobBuilder("fr").Collective(2, 4).ProcessesPerPod(4).Obj()).is_null());
  ASSERT_FALSE(WaitForPhase("fr", "Running").is_null());

  const auto by_name = ByName(Pods("fr"));
  ASSERT_EQ(by_name.size(), 2u);
  const auto cm = EndpointsConfigMap("fr");
  ASSERT_TRUE(cm.has_value());
  const std::vector<std::string> nodes = {Ip(by_name.at("fr-worker-0")), Ip(by_name.at("fr-worker-1"))};
  for (const auto& [name, pod] : by_name) {
    SCOPED_TRACE(name);
    // The main container exposes one port per process.
    std::vector<int> ports;
    for (const Json& p : pod["spec"]["containers"][0].value("ports", Json::array())) ports.push_back(p.value("containerPort", 0));
    EXPECT_THAT(ports, ElementsAre(6170, 6171, 6172, 6173));

    auto env = ResolveEnv(pod, cm);
    ASSERT_TRUE(env.ok()) << env.error();
    auto cluster = DetectClusterEnv(*env);
    ASSERT_TRUE(cluster.has_value()) << "fleetrun would not see a managed cluster";
    ASSERT_TRUE(cluster->ok()) << cluster->error();
    const ClusterEnv& c = cluster->value();
    EXPECT_EQ(c.nodes, nodes);
    EXPECT_EQ(c.pod_ip, Ip(pod));
    EXPECT_EQ(c.node_rank, Index(pod));
    EXPECT_EQ(c.ports_per_node, 4);
    ASSERT_EQ(c.node_endpoints.size(), 2u);
    for (size_t n = 0; n < 2; ++n) {
      ASSERT_EQ(c.node_endpoints[n].size(), 4u);
      for (size_t i = 0; i < 4; ++i) {
        EXPECT_EQ(c.node_endpoints[n][i].ToString(), nodes[n] + ":" + std::to_string(6170 + i));
      }
    }
  }
}

// One process per GPU pod: the env is read by the collective role maker (fleet.init(is_collective=True)).
TEST_F(WiringE2eTest, CollectiveOneProcessPerPodPassesTheCollectiveRoleMaker) {
  StartOperator();
  ASSERT_FALSE(CreateJob(JobBuilder("col").Collective(3, 1).Obj()).is_null());
  ASSERT_FALSE(WaitForPhase("col", "Running").is_null());
  const auto by_name = ByName(Pods("col"));
  ASSERT_EQ(by_name.size(), 3u);
  const auto cm = EndpointsConfigMap("col");
  ASSERT_TRUE(cm.has_value());
  const std::string trainers = List(by_name, "col-worker-", 3, Ip, 6170);
  EXPECT_EQ((*cm)["data"].value("PADDLE_TRAINER_ENDPOINTS", ""), trainers);
  for (const auto& [name, pod] : by_name) {
    SCOPED_TRACE(name);
    auto parsed = ParsePodEnv(pod, cm, RoleMakerKind::kCollective);
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    EXPECT_FALSE(parsed->non_distributed);
    EXPECT_EQ(parsed->role, Role::kTrainer);
    EXPECT_EQ(parsed->id, Index(pod));
    EXPECT_EQ(parsed->trainers_num, 3);
    EXPECT_EQ(parsed->current_endpoint, Ip(pod) + ":6170");
    EXPECT_EQ(parsed->selected_devices, std::vector<int>{0});
  }
}

// Two-stage heter PS: 2 servers, 2 CPU trainers (stage 1), 2 GPU heter workers (stage 2).
TEST_F(WiringE2eTest, TwoStageHeter) {
  StartOperator();
  ASSERT_FALSE(CreateJob(JobBuilder("ht")
                             .Ps(2, 2)
                             .Heter({"gpu", 2, "gpu"})
                             .Set("/spec/heter/0/template/spec/containers/0/resources",
                                  {{"limits", {{"nvidia.com/gpu", 1}}}})
                             .Obj())
                   .is_null());
  const Json running = WaitForPhase("ht", "Running");
  ASSERT_FALSE(running.is_null());
  EXPECT_EQ(running["status"].value("mode", ""), "ps-heter");
  EXPECT_EQ(running["status"].value("heterReady", -1), 2);

  const auto by_name = ByName(Pods("ht"));
  ASSERT_THAT(Names(Pods("ht")), ElementsAre("ht-gpu-0", "ht-gpu-1", "ht-server-0", "ht-server-1", "ht-worker-0",
                                             "ht-worker-1"));
  const auto cm = EndpointsConfigMap("ht");
  ASSERT_TRUE(cm.has_value());
  const std::string heter = List(by_name, "ht-gpu-", 2, Ip, 6170);
  const std::string trainers = List(by_name, "ht-worker-", 2, Ip, 6170);
  for (const auto& [name, pod] : by_name) {
    SCOPED_TRACE(name);
    auto parsed = ParsePodEnv(pod, cm, RoleMakerKind::kParameterServer);
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    EXPECT_FALSE(parsed->non_distributed);
    EXPECT_EQ(parsed->current_endpoint, Ip(pod) + ":6170");
    EXPECT_EQ(parsed->server_endpoints.size(), 2u);
    EXPECT_EQ(parsed->heter_endpoints, SplitString(heter, ','));
    const std::string role = LabelOf(pod, kRoleLabel);
    if (role == "server") {
      EXPECT_EQ(parsed->role, Role::kServer);
      EXPECT_EQ(parsed->id, Index(pod));
    } else if (role == "worker") {
      EXPECT_EQ(parsed->role, Role::kTrainer);
      EXPECT_EQ(parsed->id, Index(pod));
      EXPECT_EQ(parsed->stage_id, 1);
      EXPECT_EQ(parsed->stage_num, 2);
      EXPECT_EQ(parsed->next_stage_endpoints, SplitString(heter, ','));
    } else {
      EXPECT_EQ(role, "gpu");
      EXPECT_EQ(parsed->role, Role::kHeterTrainer);
      EXPECT_EQ(parsed->stage_id, 2);
      EXPECT_EQ(parsed->stage_num, 2);
      EXPECT_EQ(parsed->heter_device_type, "gpu");
      EXPECT_EQ(parsed->previous_stage_endpoints, SplitString(trainers, ','));
    }
  }
}

// Service mode: a headless Service gives stable DNS names; one failed pod (retryable) is replaced
// alone, the others keep running (same uid) and the lists do not change.
TEST_F(WiringE2eTest, ServiceModeReplacesOnlyTheFailedPod) {
  StartOperator();
  const Json job = CreateJob(JobBuilder("svc").Ps(1, 3).Network("Service").RestartPolicy("worker", "OnFailure").Obj());
  ASSERT_FALSE(job.is_null());
  ASSERT_FALSE(WaitForPhase("svc", "Running").is_null());

  const auto service = api().Get(CorePath(ns(), "services", "svc"));
  ASSERT_TRUE(service.has_value()) << "no headless Service";
  EXPECT_EQ((*service)["spec"].value("clusterIP", ""), "None");
  EXPECT_EQ((*service)["spec"]["selector"].value("fleet.paddlepaddle.org/job-name", ""), "svc");
  ExpectOwnedBy(*service, job);

  auto dns = [](const std::string& pod) { return pod + ".svc.default.svc.cluster.local"; };
  const auto before = ByName(Pods("svc"));
  ASSERT_EQ(before.size(), 4u);
  const auto cm = EndpointsConfigMap("svc");
  ASSERT_TRUE(cm.has_value());
  EXPECT_EQ((*cm)["data"].value("PADDLE_TRAINER_ENDPOINTS", ""),
            dns("svc-worker-0") + ":6170," + dns("svc-worker-1") + ":6170," + dns("svc-worker-2") + ":6170");
  EXPECT_EQ((*cm)["data"].value("PADDLE_PSERVERS_IP_PORT_LIST", ""), dns("svc-server-0") + ":6170");
  for (const auto& [name, pod] : before) {
    SCOPED_TRACE(name);
    EXPECT_EQ(pod["spec"].value("hostname", ""), name);
    EXPECT_EQ(pod["spec"].value("subdomain", ""), "svc");
    auto parsed = ParsePodEnv(pod, cm, RoleMakerKind::kParameterServer);
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    EXPECT_EQ(parsed->current_endpoint, dns(name) + ":6170");
    EXPECT_EQ(parsed->id, Index(pod));
  }

  PodAction("svc-worker-1", {{"action", "fail"}, {"exitCode", 1}});
  ASSERT_FALSE(WaitForJob("svc", "to replace svc-worker-1 and run again", [&](const Json& j) {
    const Json& st = j.value("status", Json::object());
    if (st.value("restartCount", 0) != 1 || st.value("phase", "") != "Running") return false;
    auto pod = Pod("svc-worker-1");
    return pod && UidOf(*pod) != UidOf(before.at("svc-worker-1")) &&
           pod->value("status", Json::object()).value("phase", "") == "Running";
  }).is_null());

  const auto after = ByName(Pods("svc"));
  ASSERT_EQ(after.size(), 4u);
  for (const auto& [name, pod] : after) {
    if (name == "svc-worker-1") {
      EXPECT_NE(UidOf(pod), UidOf(before.at(name)));
    } else {
      EXPECT_EQ(UidOf(pod), UidOf(before.at(name))) << name << " was replaced too";
    }
  }
  const auto cm_after = EndpointsConfigMap("svc");
  ASSERT_TRUE(cm_after.has_value());
  EXPECT_EQ((*cm_after)["data"], (*cm)["data"]);
  auto parsed = ParsePodEnv(after.at("svc-worker-1"), cm_after, RoleMakerKind::kParameterServer);
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  EXPECT_EQ(parsed->current_endpoint, dns("svc-worker-1") + ":6170");
}

// HostNetwork: two jobs on the same 4 nodes get disjoint port blocks; every pod listens on its
// own host ports and the lists use the nodes' addresses.
TEST_F(WiringE2eTest, HostNetworkPortsOfTwoJobsNeverOverlap) {
  StartOperator();
  ASSERT_FALSE(CreateJob(JobBuilder("hna").Ps(1, 3).Network("HostNetwork").Obj()).is_null());
  ASSERT_FALSE(CreateJob(JobBuilder("hnb").Ps(2, 2).Network("HostNetwork").Obj()).is_null());
  const Json a = WaitForPhase("hna", "Running");
  const Json b = WaitForPhase("hnb", "Running");
  ASSERT_FALSE(a.is_null());
  ASSERT_FALSE(b.is_null());
  ASSERT_TRUE(a["status"].contains("hostPortBase"));
  ASSERT_TRUE(b["status"].contains("hostPortBase"));
  EXPECT_NE(a["status"]["hostPortBase"], b["status"]["hostPortBase"]);

  std::map<int, std::string> owner;   // host port -> "job/pod/container"
  for (const std::string job : {"hna", "hnb"}) {
    const auto by_name = ByName(Pods(job));
    ASSERT_EQ(by_name.size(), 4u);
    const auto cm = EndpointsConfigMap(job);
    ASSERT_TRUE(cm.has_value());
    for (const auto& [name, pod] : by_name) {
      SCOPED_TRACE(name);
      EXPECT_EQ(pod["spec"].value("hostNetwork", false), true);
      std::set<int> own;
      for (const char* list : {"initContainers", "containers"}) {
        for (const Json& c : pod["spec"].value(list, Json::array())) {
          for (const Json& p : c.value("ports", Json::array())) {
            // On the host network a container port is a host port.
            const int port = p.value("hostPort", p.value("containerPort", 0));
            own.insert(port);
            auto [it, inserted] = owner.emplace(port, name + "/" + c.value("name", ""));
            EXPECT_TRUE(inserted) << "host port " << port << " of " << name << " is also " << it->second;
          }
        }
      }
      auto env = ResolveEnv(pod, cm);
      ASSERT_TRUE(env.ok()) << env.error();
      auto parsed = ParseProcessEnv(*env, RoleMakerKind::kParameterServer);
      ASSERT_TRUE(parsed.ok()) << parsed.error();
      const std::string port = env->count("PADDLE_PORT") ? env->at("PADDLE_PORT") : "";
      EXPECT_EQ(parsed->current_endpoint, HostIp(pod) + ":" + port);
      EXPECT_TRUE(own.count(std::atoi(port.c_str()))) << "PADDLE_PORT " << port << " is not a port of the pod";
      // The gloo HTTP store's port (on server 0) is part of the job's block as well.
      if (env->count("PADDLE_GLOO_HTTP_ENDPOINT") && name == job + "-server-0") {
        const std::string gloo = env->at("PADDLE_GLOO_HTTP_ENDPOINT");
        const int gloo_port = std::atoi(gloo.substr(gloo.rfind(':') + 1).c_str());
        auto [it, inserted] = owner.emplace(gloo_port, name + "/gloo-http");
        EXPECT_TRUE(inserted) << "gloo port " << gloo_port << " of " << job << " is also " << it->second;
      }
    }
    // The lists name the nodes' addresses.
    EXPECT_EQ((*cm)["data"].value("PADDLE_PSERVERS_IP_PORT_LIST", "").find("10."), std::string::npos)
        << (*cm)["data"].dump();
  }
}

// A HostNetwork job needing more host ports than the operator's whole range can never run.
//
// Regression (fixed): a HostNetwork job needing more ports than the whole --host-port-range got
// no status at all; now it fails, saying why (reason HostPortRangeTooSmall).
TEST_F(WiringE2eTest, HostNetworkJobLargerThanThePortRangeFails) {
  StartOperator({"--host-port-range=20000-20010"});
  ASSERT_FALSE(CreateJob(JobBuilder("never").Ps(2, 4).Network("HostNetwork").Obj()).is_null());
  const Json failed = WaitForPhase("never", "Failed", Seconds(5));
  ASSERT_FALSE(failed.is_null());
  EXPECT_THAT(ConditionOf(failed["status"], "Failed").value("message", ""), ::testing::HasSubstr("host port"));
  EXPECT_TRUE(Pods("never").empty());
}

// A HostNetwork job waiting for host ports (the range is taken by another job) says so.
//
// Regression (fixed): a HostNetwork job waiting for host ports had no phase or condition; now it is
// Pending with a WaitingForHostPorts condition and a Warning event.
TEST_F(WiringE2eTest, HostNetworkJobWaitingForPortsSaysSo) {
  StartOperator({"--host-port-range=20000-20010"});
  ASSERT_FALSE(CreateJob(JobBuilder("first").Ps(1, 2).Network("HostNetwork").Obj()).is_null());   // 7 ports
  ASSERT_FALSE(WaitForPhase("first", "Running").is_null());
  ASSERT_FALSE(CreateJob(JobBuilder("second").Ps(1, 1).Network("HostNetwork").Obj()).is_null());  // 5 more: no room
  ASSERT_TRUE(Eventually("a WaitingForHostPorts event for the second job", [&](std::string&) {
    for (const Json& e : api().List(CorePath(ns(), "events"))) {
      if (e.value("involvedObject", Json::object()).value("name", "") == "second" && e.value("reason", "") == "WaitingForHostPorts") {
        return true;
      }
    }
    return false;
  }, Seconds(5)));
  const Json waiting = WaitForJob("second", "to say it waits for host ports", [](const Json& j) {
    const Json& st = j.value("status", Json::object());
    return st.value("phase", "") == "Pending" && st.dump().find("host port") != std::string::npos;
  }, Seconds(5));
  EXPECT_FALSE(waiting.is_null());
  EXPECT_TRUE(Pods("second").empty());
}

// A job waiting for host ports starts as soon as the job holding them is deleted, not on its next
// 30 s requeue: the release wakes the jobs that waited (issue 14).
TEST_F(WiringE2eTest, HostNetworkJobWaitingForPortsStartsWhenTheBlockingJobIsDeleted) {
  StartOperator({"--host-port-range=20000-20010"});
  ASSERT_FALSE(CreateJob(JobBuilder("first").Ps(1, 2).Network("HostNetwork").Obj()).is_null());   // 7 ports
  ASSERT_FALSE(WaitForPhase("first", "Running").is_null());
  ASSERT_FALSE(CreateJob(JobBuilder("second").Ps(1, 1).Network("HostNetwork").Obj()).is_null());  // 5 more: no room
  ASSERT_FALSE(WaitForJob("second", "to wait for host ports", [](const Json& j) {
    return j.value("status", Json::object()).dump().find("WaitingForHostPorts") != std::string::npos;
  }, Seconds(5)).is_null());
  ASSERT_EQ(api().Delete(JobPath(ns(), "first")).status, 200);
  EXPECT_FALSE(WaitForPhase("second", "Running", Seconds(5)).is_null())
      << "the second job did not start within 5 s of the deletion";
}

// HostNetwork port blocks are recorded in the jobs' statuses: an operator started afresh keeps
// them, and a job created after the restart gets another block.
TEST_F(WiringE2eTest, HostPortBlocksSurviveAnOperatorRestart) {
  OperatorProcess& first = StartOperator();
  ASSERT_FALSE(CreateJob(JobBuilder("hn1").Ps(1, 2).Network("HostNetwork").Obj()).is_null());
  const Json a = WaitForPhase("hn1", "Running");
  ASSERT_FALSE(a.is_null());
  first.Signal(SIGKILL);
  ASSERT_TRUE(first.WaitExit(Seconds(5)).has_value());

  ASSERT_TRUE(WaitReady(StartOperator()));
  ASSERT_FALSE(CreateJob(JobBuilder("hn2").Ps(1, 2).Network("HostNetwork").Obj()).is_null());
  const Json b = WaitForPhase("hn2", "Running");
  ASSERT_FALSE(b.is_null());
  const int base_a = a["status"].value("hostPortBase", 0);
  const int base_b = b["status"].value("hostPortBase", 0);
  EXPECT_NE(base_a, base_b);
  EXPECT_EQ(JobStatus("hn1").value("hostPortBase", 0), base_a) << "the first job's block moved";
  // Blocks of 3 pods x 2 ports + the gloo port = 7 ports: they must not overlap.
  EXPECT_TRUE(base_b >= base_a + 7 || base_a >= base_b + 7) << base_a << " vs " << base_b;
  EXPECT_EQ(JobStatus("hn1").value("restartCount", -1), 0);
}

// --sidecar-mode=init (Kubernetes < 1.29): the gate is a plain init container that exits once
// the lists exist.
TEST_F(WiringE2eTest, SidecarModeInitUsesAPlainInitContainer) {
  StartOperator({"--sidecar-mode=init"});
  ASSERT_FALSE(CreateJob(JobBuilder("init").Collective(2).Obj()).is_null());
  ASSERT_FALSE(WaitForPhase("init", "Running").is_null());
  for (const Json& pod : Pods("init")) {
    SCOPED_TRACE(NameOf(pod));
    const Json& gate = pod["spec"]["initContainers"][0];
    EXPECT_EQ(gate.value("name", ""), "fleet-sidecar");
    EXPECT_FALSE(gate.contains("restartPolicy"));
    EXPECT_FALSE(gate.contains("startupProbe"));
    EXPECT_THAT(gate.value("args", Json::array()).dump(), ::testing::HasSubstr("--exit-when-ready"));
  }
}

// --sidecar-mode=auto (the default) asks the API server's version: a Kubernetes 1.28 gets plain
// init containers, without any flag.
class OldKubernetesE2eTest : public OperatorE2eTest {
 protected:
  OldKubernetesE2eTest() { fake_args_ = {"--server-version", "v1.28.4"}; }
};

TEST_F(OldKubernetesE2eTest, SidecarModeAutoUsesPlainInitContainersBefore129) {
  StartOperator();
  ASSERT_FALSE(CreateJob(JobBuilder("old").Collective(2).Obj()).is_null());
  ASSERT_FALSE(WaitForPhase("old", "Running").is_null());
  for (const Json& pod : Pods("old")) {
    SCOPED_TRACE(NameOf(pod));
    const Json& gate = pod["spec"]["initContainers"][0];
    EXPECT_FALSE(gate.contains("restartPolicy"));
    EXPECT_THAT(gate.value("args", Json::array()).dump(), ::testing::HasSubstr("--exit-when-ready"));
  }
}

TEST_F(WiringE2eTest, SidecarModeAutoUsesNativeSidecarsFrom129) {
  StartOperator();   // the fake reports v1.32
  ASSERT_FALSE(CreateJob(JobBuilder("new").Collective(2).Obj()).is_null());
  ASSERT_FALSE(WaitForPhase("new", "Running").is_null());
  for (const Json& pod : Pods("new")) {
    EXPECT_EQ(pod["spec"]["initContainers"][0].value("restartPolicy", ""), "Always") << NameOf(pod);
  }
}

// Every job shape under every network mode: each pod's env passes the contract (the role maker for
// one process per pod, the cluster env for fleetrun pods).
class NetworkMatrixE2eTest : public OperatorE2eTest, public ::testing::WithParamInterface<std::string> {};

TEST_P(NetworkMatrixE2eTest, EveryShapePassesTheContract) {
  const std::string network = GetParam();
  StartOperator();
  using H = JobBuilder::HeterStage;
  const std::vector<Json> jobs = {
      JobBuilder("ps").Ps(2, 3).Network(network).Obj(),
      JobBuilder("gloo").Ps(2, 2).Gloo("All").Network(network).Obj(),
      JobBuilder("heter").Ps(1, 2).Heter(H("gpu", 2, "g")).Heter(H("cpu", 1, "c")).Network(network).Obj(),
      JobBuilder("gpu").Collective(2, 2).Gloo("Workers").Network(network).Obj(),
      JobBuilder("fleetrun").Collective(2, 2).ProcessesPerPod(2).Network(network).Obj(),
  };
  for (const Json& job : jobs) ASSERT_FALSE(CreateJob(job).is_null());
  for (const Json& job : jobs) {
    const std::string name = NameOf(job);
    SCOPED_TRACE(name);
    ASSERT_FALSE(WaitForPhase(name, "Running").is_null());
    auto parsed_job = ParseFleetJob(*GetJob(name));
    ASSERT_TRUE(parsed_job.ok()) << parsed_job.error();
    const auto cm = EndpointsConfigMap(name);
    ASSERT_TRUE(cm.has_value());
    const auto pods = Pods(name);
    ASSERT_EQ(pods.size(), static_cast<size_t>(parsed_job->spec.TotalPods()));
    std::set<std::string> endpoints;
    for (const Json& pod : pods) {
      SCOPED_TRACE(NameOf(pod));
      auto env = ResolveEnv(pod, cm);
      ASSERT_TRUE(env.ok()) << env.error();
      const std::string host = network == "Service" ? NameOf(pod) + "." + name + ".default.svc.cluster.local"
                               : network == "HostNetwork" ? HostIp(pod) : Ip(pod);
      if (parsed_job->spec.processes_per_pod > 1) {
        auto cluster = DetectClusterEnv(*env);
        ASSERT_TRUE(cluster.has_value()) << "no cluster env";
        ASSERT_TRUE(cluster->ok()) << cluster->error();
        EXPECT_EQ(cluster->value().pod_ip, host);
        EXPECT_EQ(cluster->value().node_rank, Index(pod));
        for (const Endpoint& e : cluster->value().node_endpoints.at(static_cast<size_t>(Index(pod)))) {
          EXPECT_TRUE(endpoints.insert(e.ToString()).second) << e.ToString() << " is used twice";
        }
        continue;
      }
      const RoleMakerKind kind =
          parsed_job->spec.mode == JobMode::kCollective ? RoleMakerKind::kCollective : RoleMakerKind::kParameterServer;
      auto role = ParseProcessEnv(*env, kind);
      ASSERT_TRUE(role.ok()) << role.error();
      EXPECT_FALSE(role->non_distributed);
      EXPECT_EQ(role->current_endpoint.substr(0, role->current_endpoint.rfind(':')), host);
      EXPECT_TRUE(endpoints.insert(role->current_endpoint).second) << role->current_endpoint << " is used twice";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Networks, NetworkMatrixE2eTest,
                         ::testing::Values(std::string("PodIP"), std::string("Service"), std::string("HostNetwork")),
                         [](const ::testing::TestParamInfo<std::string>& param) { return param.param; });

}  // namespace
}  // namespace fleet::op::e2e
