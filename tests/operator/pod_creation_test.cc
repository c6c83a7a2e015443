// The first reconcile of a new job: which pods are created and what is in them (names, owner,
// labels, the sidecar gate, least-privilege token, the wiring env and the endpoints volume).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "builders.h"
#include "fleet/base/time.h"
#include "fleet/operator/planner.h"
#include "world.h"

namespace fleet::op::testing {
namespace {

using ::testing::Contains;
using ::testing::IsEmpty;
using ::testing::Not;

const std::vector<std::string> kPsPods = {"wd-server-0", "wd-server-1", "wd-worker-0",
                                          "wd-worker-1", "wd-worker-2", "wd-worker-3"};

std::vector<Json> CreatedPods(const ReconcilePlan& plan) {
  std::vector<Json> pods;
  for (const Action& a : plan.actions) {
    if (a.verb == Verb::kCreate && a.kind == ObjectKind::kPod) pods.push_back(a.Object());
  }
  return pods;
}

// The checks every freshly created pod of job "wd" must pass, whatever the mode.
void ExpectWellFormedPod(const Json& pod, const std::string& role, int index, bool native_sidecar) {
  SCOPED_TRACE(pod["metadata"].value("name", "?"));
  const Json& meta = pod["metadata"];
  EXPECT_EQ(meta["name"], "wd-" + role + "-" + std::to_string(index));
  EXPECT_EQ(meta["namespace"], kNamespace);
  EXPECT_EQ(meta["ownerReferences"],
            Json::array({{{"apiVersion", "fleet.paddlepaddle.org/v1alpha1"}, {"kind", "FleetJob"}, {"name", "wd"},
                          {"uid", kUid}, {"controller", true}, {"blockOwnerDeletion", true}}}));
  EXPECT_EQ(meta["labels"][kJobLabel], "wd");
  EXPECT_EQ(meta["labels"][kRoleLabel], role);
  EXPECT_EQ(meta["labels"][kIndexLabel], std::to_string(index));
  EXPECT_EQ(meta["labels"][kRunLabel], "0");
  EXPECT_EQ(meta["labels"]["app"], "train") << "the template's own labels are kept";

  const Json& spec = pod["spec"];
  EXPECT_EQ(spec["restartPolicy"], "Never");
  EXPECT_EQ(spec["automountServiceAccountToken"], false);

  // The sidecar gate comes first among the init containers.
  ASSERT_TRUE(spec["initContainers"].is_array());
  ASSERT_FALSE(spec["initContainers"].empty());
  const Json& sidecar = spec["initContainers"][0];
  EXPECT_EQ(sidecar["name"], "fleet-sidecar");
  EXPECT_TRUE(sidecar["resources"]["requests"].contains("cpu"));
  EXPECT_TRUE(sidecar["resources"]["requests"].contains("memory"));
  EXPECT_TRUE(sidecar["resources"]["limits"].contains("cpu"));
  EXPECT_TRUE(sidecar["resources"]["limits"].contains("memory"));
  const std::vector<std::string> args = sidecar["args"].get<std::vector<std::string>>();
  EXPECT_THAT(args, Contains("--config-map=wd-endpoints"));
  EXPECT_THAT(args, Contains("--pod=" + meta["name"].get<std::string>()));
  if (native_sidecar) {
    EXPECT_EQ(sidecar["restartPolicy"], "Always");
    EXPECT_TRUE(sidecar["startupProbe"].is_object());
    EXPECT_THAT(args, Not(Contains("--exit-when-ready")));
  } else {
    EXPECT_FALSE(sidecar.contains("restartPolicy"));
    EXPECT_FALSE(sidecar.contains("startupProbe"));
    EXPECT_THAT(args, Contains("--exit-when-ready"));
  }

  // Only the sidecar container mounts the projected API token.
  std::string token_volume;
  for (const Json& v : spec["volumes"]) {
    if (v.contains("projected")) token_volume = v["name"].get<std::string>();
  }
  ASSERT_FALSE(token_volume.empty()) << "no projected token volume";
  auto mounts_token = [&](const Json& c) {
    for (const Json& m : c.value("volumeMounts", Json::array())) {
      if (m["name"] == token_volume) return true;
    }
    return false;
  };
  EXPECT_TRUE(mounts_token(sidecar));
  for (const Json& c : spec["containers"]) EXPECT_FALSE(mounts_token(c)) << c["name"];

  // The main container: POD_IP first, from the downward API; the endpoints file mounted.
  const Json& main = spec["containers"][0];
  EXPECT_EQ(main["name"], "main");
  EXPECT_EQ(main["env"][0], Json({{"name", "POD_IP"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "status.podIP"}}}}}}));
  Json mount;
  for (const Json& m : main["volumeMounts"]) {
    if (m["mountPath"] == kEndpointsMountPath) mount = m;
  }
  ASSERT_FALSE(mount.is_null()) << "the endpoints are not mounted at " << kEndpointsMountPath;
  bool volume_is_the_configmap = false;
  for (const Json& v : spec["volumes"]) {
    if (v["name"] == mount["name"]) volume_is_the_configmap = v["configMap"]["name"] == "wd-endpoints";
  }
  EXPECT_TRUE(volume_is_the_configmap);
}

Json ConfigMapRef(const std::string& key) {
  return {{"configMapKeyRef", {{"name", "wd-endpoints"}, {"key", key}}}};
}

// Regression (fixed): throws map::at for the second server; see JobWiringTest.SecondServerGetsTheGlooEndpointFromTheConfigMap.
// Pod Security "restricted", as the API server checks it of one container: the containers the
// operator injects must pass on their own, whatever the user's template sets for the pod.
void ExpectRestricted(const Json& container) {
  SCOPED_TRACE(container.value("name", "?"));
  const Json sc = container.value("securityContext", Json::object());
  EXPECT_EQ(sc.value("runAsNonRoot", false), true);
  EXPECT_EQ(sc.value("privileged", false), false);
  EXPECT_EQ(sc.value("allowPrivilegeEscalation", true), false);
  const Json caps = sc.value("capabilities", Json::object());
  EXPECT_THAT(caps.value("drop", Json::array()), Contains("ALL"));
  for (const Json& add : caps.value("add", Json::array())) EXPECT_EQ(add, "NET_BIND_SERVICE");
  const std::string seccomp = sc.value("seccompProfile", Json::object()).value("type", "");
  EXPECT_TRUE(seccomp == "RuntimeDefault" || seccomp == "Localhost") << "seccompProfile.type '" << seccomp << "'";
}

TEST(PodCreationTest, InjectedContainersPassPodSecurityRestricted) {
  const ReconcilePlan plan = PlanFor(
      JobBuilder("wd").Ps(1, 1).Set("/spec/runtime", "fleet").Erase("/spec/server/template").Obj(), Observed{},
      T0(), OperatorSettings{});
  const std::vector<Json> pods = CreatedPods(plan);
  ASSERT_EQ(pods.size(), 2u);
  for (const Json& pod : pods) {
    SCOPED_TRACE(pod["metadata"].value("name", "?"));
    ExpectRestricted(pod["spec"]["initContainers"][0]);   // fleet-sidecar
  }
  const Json& server = pods[0]["spec"]["containers"][0];
  ASSERT_EQ(server["name"], "fleet-ps-server");
  ExpectRestricted(server);
}

TEST(PodCreationTest, NewPsJobCreatesItsSixPodsAndNothingElse) {
  const ReconcilePlan plan = PlanFor(JobBuilder("wd").Ps(2, 4).Obj(), Observed{}, T0(), OperatorSettings{});

  EXPECT_EQ(ActionNames(plan, Verb::kCreate, ObjectKind::kPod), kPsPods);
  // ... and the sidecar's ServiceAccount, Role and RoleBinding.
  EXPECT_EQ(plan.actions.size(), kPsPods.size() + 3) << Describe(plan);
  EXPECT_THAT(ActionNames(plan, Verb::kCreate, ObjectKind::kConfigMap), IsEmpty());
  EXPECT_EQ(plan.status.ToJson().value("phase", ""), "Pending");
  EXPECT_EQ(plan.status.ToJson().value("startTime", ""), FormatRfc3339(T0()));
  EXPECT_EQ(plan.status.ToJson().value("restartCount", -1), 0);
  EXPECT_EQ(plan.status.ToJson().value("mode", ""), "ps");
  EXPECT_EQ(plan.status.ToJson().value("observedGeneration", 0), 1);
}

// Regression (fixed): throws map::at for the second server; see JobWiringTest.SecondServerGetsTheGlooEndpointFromTheConfigMap.
TEST(PodCreationTest, PsPodsAreWellFormed) {
  const ReconcilePlan plan = PlanFor(JobBuilder("wd").Ps(2, 4).Obj(), Observed{}, T0(), OperatorSettings{});
  const std::vector<Json> pods = CreatedPods(plan);
  ASSERT_EQ(pods.size(), 6u);
  for (int i = 0; i < 2; ++i) ExpectWellFormedPod(pods[static_cast<size_t>(i)], "server", i, true);
  for (int i = 0; i < 4; ++i) ExpectWellFormedPod(pods[static_cast<size_t>(i + 2)], "worker", i, true);
}

// Regression (fixed): throws map::at for the second server; see JobWiringTest.SecondServerGetsTheGlooEndpointFromTheConfigMap.
TEST(PodCreationTest, PsPodsCarryTheirOwnAddressInlineAndTheListsFromTheConfigMap) {
  const ReconcilePlan plan = PlanFor(JobBuilder("wd").Ps(2, 4).Obj(), Observed{}, T0(), OperatorSettings{});
  const std::vector<Json> pods = CreatedPods(plan);
  ASSERT_EQ(pods.size(), 6u);

  const Json& worker = pods[3]["spec"]["containers"][0];   // wd-worker-1
  EXPECT_EQ(EnvEntry(worker, "TRAINING_ROLE")["value"], "TRAINER");
  EXPECT_EQ(EnvEntry(worker, "PADDLE_TRAINER_ID")["value"], "1");
  EXPECT_EQ(EnvEntry(worker, "PADDLE_PORT")["value"], "6170");
  EXPECT_EQ(EnvEntry(worker, "PADDLE_CURRENT_IP")["value"], "$(POD_IP)");
  EXPECT_EQ(EnvEntry(worker, "PADDLE_TRAINERS_NUM")["value"], "4");
  EXPECT_EQ(EnvEntry(worker, "PADDLE_PSERVERS_IP_PORT_LIST")["valueFrom"], ConfigMapRef("PADDLE_PSERVERS_IP_PORT_LIST"));
  EXPECT_EQ(EnvEntry(worker, "PADDLE_TRAINER_ENDPOINTS")["valueFrom"], ConfigMapRef("PADDLE_TRAINER_ENDPOINTS"));

  const Json& server = pods[1]["spec"]["containers"][0];   // wd-server-1
  EXPECT_EQ(EnvEntry(server, "TRAINING_ROLE")["value"], "PSERVER");
  EXPECT_EQ(EnvEntry(server, "PADDLE_CURRENT_IP")["value"], "$(POD_IP)");
  EXPECT_TRUE(EnvEntry(server, "PADDLE_TRAINER_ID").is_null());
  EXPECT_EQ(EnvEntry(server, "PADDLE_PSERVERS_IP_PORT_LIST")["valueFrom"], ConfigMapRef("PADDLE_PSERVERS_IP_PORT_LIST"));
}

// Regression (fixed): throws map::at for the second server; see JobWiringTest.SecondServerGetsTheGlooEndpointFromTheConfigMap.
TEST(PodCreationTest, PlainInitContainerSidecarOnOlderClusters) {
  OperatorSettings settings;
  settings.native_sidecar = false;
  const ReconcilePlan plan = PlanFor(JobBuilder("wd").Ps(2, 4).Obj(), Observed{}, T0(), settings);
  const std::vector<Json> pods = CreatedPods(plan);
  ASSERT_EQ(pods.size(), 6u);
  ExpectWellFormedPod(pods[0], "server", 0, /*native_sidecar=*/false);
  ExpectWellFormedPod(pods[5], "worker", 3, /*native_sidecar=*/false);
}

// The same checks on a job whose wiring does not depend on the server count.
TEST(PodCreationTest, CollectivePodsAreWellFormed) {
  const ReconcilePlan plan =
      PlanFor(JobBuilder("wd").Collective(4, 8).Obj(), Observed{}, T0(), OperatorSettings{});

  EXPECT_EQ(ActionNames(plan, Verb::kCreate, ObjectKind::kPod),
            (std::vector<std::string>{"wd-worker-0", "wd-worker-1", "wd-worker-2", "wd-worker-3"}));
  EXPECT_EQ(plan.actions.size(), 4u + 3u) << "the pods and the sidecar's account, role and binding";
  EXPECT_EQ(plan.status.ToJson().value("phase", ""), "Pending");
  EXPECT_EQ(plan.status.ToJson().value("mode", ""), "collective");
  const std::vector<Json> pods = CreatedPods(plan);
  ASSERT_EQ(pods.size(), 4u);
  for (int i = 0; i < 4; ++i) ExpectWellFormedPod(pods[static_cast<size_t>(i)], "worker", i, true);

  const Json& main = pods[2]["spec"]["containers"][0];
  EXPECT_EQ(EnvEntry(main, "PADDLE_CURRENT_ENDPOINT")["value"], "$(POD_IP):6170");
  EXPECT_EQ(EnvEntry(main, "PADDLE_TRAINER_ID")["value"], "2");
  EXPECT_EQ(EnvEntry(main, "FLAGS_selected_gpus")["value"], "0,1,2,3,4,5,6,7");
  EXPECT_EQ(EnvEntry(main, "PADDLE_TRAINER_ENDPOINTS")["valueFrom"], ConfigMapRef("PADDLE_TRAINER_ENDPOINTS"));
  EXPECT_EQ(main["resources"]["limits"]["nvidia.com/gpu"], 8) << "the template's resources are kept";
  EXPECT_EQ(main["ports"], Json::array({{{"name", "paddle-0"}, {"containerPort", 6170}, {"protocol", "TCP"}}}));
}

TEST(PodCreationTest, UserEnvComesAfterTheWiringSoTheUserWins) {
  const Json job = JobBuilder("wd")
                       .Collective(2)
                       .Set("/spec/worker/template/spec/containers/0/env",
                            Json::array({{{"name", "GLOG_v"}, {"value", "3"}}}))
                       .Obj();
  const std::vector<Json> pods = CreatedPods(PlanFor(job, Observed{}, T0(), OperatorSettings{}));
  ASSERT_EQ(pods.size(), 2u);
  const Json& env = pods[0]["spec"]["containers"][0]["env"];
  EXPECT_EQ(env[0]["name"], "POD_IP");
  EXPECT_EQ(env.back(), Json({{"name", "GLOG_v"}, {"value", "3"}}));
}

TEST(PodCreationTest, TemplateWithItsOwnServiceAccountKeepsItsToken) {
  const Json job = JobBuilder("wd").Collective(1).Set("/spec/worker/template/spec/serviceAccountName", "trainer").Obj();
  const std::vector<Json> pods = CreatedPods(PlanFor(job, Observed{}, T0(), OperatorSettings{}));
  ASSERT_EQ(pods.size(), 1u);
  EXPECT_FALSE(pods[0]["spec"].contains("automountServiceAccountToken"));
  EXPECT_EQ(pods[0]["spec"]["serviceAccountName"], "trainer");
}

TEST(PodCreationTest, PriorityClassGoesToEveryPod) {
  const std::vector<Json> pods =
      CreatedPods(PlanFor(JobBuilder("wd").Collective(2).PriorityClass("high").Obj(), Observed{}, T0(), {}));
  ASSERT_EQ(pods.size(), 2u);
  for (const Json& pod : pods) EXPECT_EQ(pod["spec"]["priorityClassName"], "high");
}

TEST(PodCreationTest, ServiceModeCreatesTheHeadlessServiceAndNamesPodsOnIt) {
  const ReconcilePlan plan =
      PlanFor(JobBuilder("wd").Collective(2).Network("Service").Obj(), Observed{}, T0(), OperatorSettings{});

  const Action* service = FindAction(plan, Verb::kCreate, ObjectKind::kService, "wd");
  ASSERT_NE(service, nullptr) << Describe(plan);
  EXPECT_EQ(service->object["spec"]["clusterIP"], "None");
  EXPECT_EQ(service->object["spec"]["selector"], Json({{kJobLabel, "wd"}}));
  EXPECT_EQ(service->object["metadata"]["ownerReferences"][0]["uid"], kUid);
  const std::vector<Json> pods = CreatedPods(plan);
  ASSERT_EQ(pods.size(), 2u);
  EXPECT_EQ(pods[1]["spec"]["hostname"], "wd-worker-1");
  EXPECT_EQ(pods[1]["spec"]["subdomain"], "wd");
  EXPECT_EQ(EnvEntry(pods[1]["spec"]["containers"][0], "POD_IP"),
            Json({{"name", "POD_IP"}, {"value", "wd-worker-1.wd.ns.svc.cluster.local"}}));
}

TEST(PodCreationTest, HostNetworkJobsRecordTheirPortBlockInStatus) {
  Observed observed;
  observed.host_ports = HostPortsAt(31000);
  const ReconcilePlan plan = PlanFor(JobBuilder("wd").Ps(1, 2).Network("HostNetwork").Obj(), observed, T0());
  EXPECT_EQ(plan.status.ToJson()["hostPortBase"], 31000);
  const ReconcilePlan pod_ip = PlanFor(JobBuilder("wd").Ps(1, 2).Obj(), observed, T0());
  EXPECT_FALSE(pod_ip.status.ToJson().contains("hostPortBase"));
}

TEST(PodCreationTest, HostNetworkPodsTakeTheirPortsFromTheAllocatedRange) {
  Observed observed;
  observed.host_ports = HostPortsAt(31000);
  const std::vector<Json> pods = CreatedPods(PlanFor(JobBuilder("wd").Ps(1, 2).Network("HostNetwork").Obj(), observed, T0()));
  ASSERT_EQ(pods.size(), 3u);
  for (size_t i = 0; i < pods.size(); ++i) {
    const Json& spec = pods[i]["spec"];
    EXPECT_EQ(spec["hostNetwork"], true);
    EXPECT_EQ(spec["dnsPolicy"], "ClusterFirstWithHostNet");
    const int port = 31000 + 2 * static_cast<int>(i);  // per pod: its Paddle port, then the sidecar's
    EXPECT_EQ(spec["containers"][0]["ports"],
              Json::array({{{"name", "paddle-0"}, {"containerPort", port}, {"protocol", "TCP"}, {"hostPort", port}}}));
    EXPECT_EQ(EnvEntry(spec["containers"][0], "PADDLE_PORT")["value"], std::to_string(port));
    EXPECT_EQ(EnvEntry(spec["containers"][0], "POD_IP")["valueFrom"]["fieldRef"]["fieldPath"], "status.hostIP");
  }
}

// Regression (fixed): pod_builder.cc SidecarContainer declares the sidecar's metrics port (default 9102) as a
// containerPort, with startup/readiness probes on it, also for hostNetwork pods. On the host network
// a containerPort is a hostPort (the API server defaults hostPort = containerPort), so every pod of
// every HostNetwork FleetJob claims host port 9102: the scheduler never puts two of them on one node,
// and the sidecars would fight for the port. Only the Paddle ports come from the job's allocated
// range (observed.host_ports). Expected: no host port is claimed by two pods of a job.
TEST(PodCreationTest, HostNetworkPodsNeverClaimTheSameHostPort) {
  Observed observed;
  observed.host_ports = HostPortsAt(31000);
  const std::vector<Json> pods = CreatedPods(PlanFor(JobBuilder("wd").Ps(1, 3).Network("HostNetwork").Obj(), observed, T0()));
  ASSERT_EQ(pods.size(), 4u);
  std::map<int, std::string> claimed;   // host port -> pod
  for (const Json& pod : pods) {
    const std::string name = pod["metadata"]["name"].get<std::string>();
    for (const char* list : {"initContainers", "containers"}) {
      for (const Json& c : pod["spec"].value(list, Json::array())) {
        for (const Json& p : c.value("ports", Json::array())) {
          const int host_port = p.value("hostPort", p.value("containerPort", 0));
          auto [it, fresh] = claimed.emplace(host_port, name);
          EXPECT_TRUE(fresh) << "host port " << host_port << " is claimed by " << it->second << " and " << name
                             << " (container " << c["name"] << ")";
        }
      }
    }
  }
}

TEST(PodCreationTest, ProcessesPerPodOpensOnePortPerProcess) {
  const std::vector<Json> pods =
      CreatedPods(PlanFor(JobBuilder("wd").Collective(2).ProcessesPerPod(4).Obj(), Observed{}, T0(), {}));
  ASSERT_EQ(pods.size(), 2u);
  const Json& ports = pods[0]["spec"]["containers"][0]["ports"];
  ASSERT_EQ(ports.size(), 4u);
  for (int p = 0; p < 4; ++p) EXPECT_EQ(ports[static_cast<size_t>(p)]["containerPort"], 6170 + p);
  EXPECT_EQ(EnvEntry(pods[1]["spec"]["containers"][0], "TRAINER_PORTS_NUM")["value"], "4");
  EXPECT_EQ(EnvEntry(pods[1]["spec"]["containers"][0], "PADDLE_TRAINER_ID")["value"], "1");
}

TEST(PodCreationTest, EveryContainerOfTheTemplateGetsTheWiring) {
  const Json job = JobBuilder("wd")
                       .Collective(1)
                       .Set("/spec/worker/template/spec/containers/1", {{"name", "profiler"}, {"image", "busybox"}})
                       .Obj();
  const std::vector<Json> pods = CreatedPods(PlanFor(job, Observed{}, T0(), {}));
  ASSERT_EQ(pods.size(), 1u);
  const Json& profiler = pods[0]["spec"]["containers"][1];
  EXPECT_EQ(profiler["env"], pods[0]["spec"]["containers"][0]["env"]);
  EXPECT_FALSE(profiler.contains("ports")) << "Paddle ports belong to the first container";
}

}  // namespace
}  // namespace fleet::op::testing

namespace fleet::op::testing {
namespace {

// The sidecar's API identity: a per-job account whose Role reads the endpoints ConfigMap and
// nothing else; pods run as it, with the token in the sidecar container only.
TEST(PodCreationTest, SidecarGetsAPerJobAccountLimitedToTheEndpointsAndItsPods) {
  const ReconcilePlan plan = PlanFor(JobBuilder("wd").Ps(1, 2).Obj(), Observed{}, T0(), OperatorSettings{});
  const Action* account = FindAction(plan, Verb::kCreate, ObjectKind::kServiceAccount, "wd-fleet-sidecar");
  const Action* role = FindAction(plan, Verb::kCreate, ObjectKind::kRole, "wd-fleet-sidecar");
  const Action* binding = FindAction(plan, Verb::kCreate, ObjectKind::kRoleBinding, "wd-fleet-sidecar");
  ASSERT_NE(account, nullptr) << Describe(plan);
  ASSERT_NE(role, nullptr);
  ASSERT_NE(binding, nullptr);
  EXPECT_EQ(account->object["automountServiceAccountToken"], false);
  // The endpoints ConfigMap (read), and the job's own pods: read one, set its progress condition.
  EXPECT_EQ(role->object["rules"],
            Json::parse(R"([{"apiGroups":[""],"resources":["configmaps"],"resourceNames":["wd-endpoints"],
                             "verbs":["get","list","watch"]},
                            {"apiGroups":[""],"resources":["pods"],"resourceNames":["wd-server-0","wd-worker-0","wd-worker-1"],
                             "verbs":["get"]},
                            {"apiGroups":[""],"resources":["pods/status"],"resourceNames":["wd-server-0","wd-worker-0","wd-worker-1"],
                             "verbs":["patch"]}])"));
  EXPECT_EQ(binding->object["roleRef"]["name"], "wd-fleet-sidecar");
  EXPECT_EQ(binding->object["subjects"][0]["name"], "wd-fleet-sidecar");
  EXPECT_EQ(binding->object["subjects"][0]["namespace"], kNamespace);
  for (const Action* a : {account, role, binding}) {
    EXPECT_EQ(a->object["metadata"]["ownerReferences"][0]["uid"], kUid) << a->name;
  }
  for (const Action& a : plan.actions) {
    if (a.kind == ObjectKind::kPod) {
      EXPECT_EQ(a.Object()["spec"]["serviceAccountName"], "wd-fleet-sidecar");
    }
  }
  // Once they exist they are not created again.
  Observed observed;
  observed.service_account = account->object;
  observed.role = role->object;
  observed.role_binding = binding->object;
  const ReconcilePlan again = PlanFor(JobBuilder("wd").Ps(1, 2).Obj(), observed, T0(), OperatorSettings{});
  EXPECT_EQ(FindAction(again, Verb::kCreate, ObjectKind::kServiceAccount, "wd-fleet-sidecar"), nullptr);
  EXPECT_EQ(FindAction(again, Verb::kCreate, ObjectKind::kRole, "wd-fleet-sidecar"), nullptr);
}

TEST(PodCreationTest, TemplatesWithTheirOwnServiceAccountGetNoSidecarAccount) {
  Json job = JobBuilder("wd").Ps(1, 2).Set("/spec/server/template/spec/serviceAccountName", "trainer")
                 .Set("/spec/worker/template/spec/serviceAccountName", "trainer").Obj();
  const ReconcilePlan plan = PlanFor(job, Observed{}, T0(), OperatorSettings{});
  EXPECT_THAT(ActionNames(plan, Verb::kCreate, ObjectKind::kServiceAccount), IsEmpty());
  EXPECT_THAT(ActionNames(plan, Verb::kCreate, ObjectKind::kRole), IsEmpty());
  for (const Action& a : plan.actions) {
    if (a.kind != ObjectKind::kPod) continue;
    EXPECT_EQ(a.Object()["spec"]["serviceAccountName"], "trainer");
    EXPECT_FALSE(a.Object()["spec"].contains("automountServiceAccountToken")) << "the user's account keeps its token";
  }
}

// A pattern the sidecar would refuse (RE2 has no lookaround) fails the job with the reason,
// instead of every pod's sidecar exiting 2 at start.
TEST(PodCreationTest, PatternsTheSidecarWouldRefuseAreRefused) {
  const Json job = JobBuilder("wd").Ps(1, 2).Set("/spec/sidecar", {{"patterns", {"loss=(?P<loss>[0-9.]+)(?=,)"}}}).Obj();
  const ReconcilePlan plan = PlanFor(job, Observed{}, T0(), OperatorSettings{});
  EXPECT_EQ(plan.status.ToJson().value("phase", ""), "Failed");
  EXPECT_EQ(Condition(plan.status.ToJson(), "Failed").value("reason", ""), "InvalidSpec");
  EXPECT_THAT(plan.status.ToJson().value("message", ""),
              ::testing::HasSubstr("spec.sidecar.patterns: 'loss=(?P<loss>[0-9.]+)(?=,)': not a valid regular expression"));
  EXPECT_TRUE(plan.actions.empty()) << Describe(plan);
}

}  // namespace
}  // namespace fleet::op::testing

namespace fleet::op::testing {
namespace {

std::vector<std::string> SidecarArgs(const ReconcilePlan& plan, const std::string& pod) {
  const Action* a = FindAction(plan, Verb::kCreate, ObjectKind::kPod, pod);
  if (!a) return {};
  return a->Object()["spec"]["initContainers"][0]["args"].get<std::vector<std::string>>();
}

// The agent half of the sidecar: ranks, the push API on loopback, stall detection for trainers
// only, the spec's log files and patterns; the pod shares its process namespace.
TEST(PodCreationTest, SidecarAgentIsToldRanksSourcesAndStallWindow) {
  const Json job = JobBuilder("wd").Ps(1, 2).Set("/spec/sidecar", {{"logFiles", {"/var/log/train/out.log"}},
                                                                    {"patterns", {"it (?P<step>\\d+)"}},
                                                                    {"stallWindowSeconds", 120}}).Obj();
  const ReconcilePlan plan = PlanFor(job, Observed{}, T0(), OperatorSettings{});
  const auto worker = SidecarArgs(plan, "wd-worker-1");
  EXPECT_THAT(worker, Contains("--rank=1"));
  EXPECT_THAT(worker, Contains("--stall-window=120s"));
  EXPECT_THAT(worker, Contains("--report-udp=127.0.0.1:9102"));
  EXPECT_THAT(worker, Contains("--report-http=127.0.0.1:9102"));
  EXPECT_THAT(worker, Contains("--log-file=/var/log/train/out.log"));
  EXPECT_THAT(worker, Contains("--pattern=it (?P<step>\\d+)"));
  EXPECT_THAT(SidecarArgs(plan, "wd-server-0"), Contains("--stall-window=0s")) << "servers log no steps";
  const Action* pod = FindAction(plan, Verb::kCreate, ObjectKind::kPod, "wd-worker-1");
  ASSERT_NE(pod, nullptr);
  const Json rendered = pod->Object();
  EXPECT_EQ(rendered["spec"]["shareProcessNamespace"], true);
  EXPECT_EQ(EnvEntry(rendered["spec"]["containers"][0], "FLEET_METRICS_ENDPOINT")["value"], "udp://127.0.0.1:9102");
}

TEST(PodCreationTest, EveryMainContainerIsToldItsRunByTheRunLabel) {
  Json job = JobBuilder("wd").Ps(1, 2).Obj();
  job["spec"]["worker"]["template"]["spec"]["containers"].push_back(
      {{"name", "helper"}, {"image", "busybox"}});
  const ReconcilePlan plan = PlanFor(job, Observed{}, T0(), OperatorSettings{});
  const Action* pod = FindAction(plan, Verb::kCreate, ObjectKind::kPod, "wd-worker-1");
  ASSERT_NE(pod, nullptr);
  const Json rendered = pod->Object();
  ASSERT_EQ(rendered["spec"]["containers"].size(), 2u);
  for (const Json& container : rendered["spec"]["containers"]) {
    EXPECT_EQ(EnvEntry(container, "FLEET_RUN")["valueFrom"]["fieldRef"]["fieldPath"],
              "metadata.labels['fleet.paddlepaddle.org/run']") << container["name"];
  }
  EXPECT_EQ(rendered["metadata"]["labels"][kRunLabel], "0");
}

TEST(PodCreationTest, CollectivePodsRunningFleetrunCoverTheirRanks) {
  const ReconcilePlan plan =
      PlanFor(JobBuilder("wd").Collective(2, 4).ProcessesPerPod(4).Obj(), Observed{}, T0(), OperatorSettings{});
  EXPECT_THAT(SidecarArgs(plan, "wd-worker-1"), Contains("--rank=4"));
  EXPECT_THAT(SidecarArgs(plan, "wd-worker-1"), Contains("--ranks=4"));
}

// The log files are in a volume the trainer mounts; the sidecar (the operator's container, which
// a template cannot change) gets the same volume at the same path, read-only. Found by the real
// containers: before, the sidecar never saw the files and no step metric appeared.
TEST(PodCreationTest, TheSidecarMountsTheVolumesHoldingTheLogFiles) {
  const Json job = JobBuilder("wd").Ps(1, 1)
                       .Set("/spec/sidecar", {{"logFiles", {"/var/log/train/out.log", "/data/other/x.log", "/nowhere/y.log"}}})
                       .Set("/spec/worker/template/spec/volumes",
                            Json::array({{{"name", "logs"}, {"emptyDir", Json::object()}},
                                         {{"name", "data"}, {"emptyDir", Json::object()}},
                                         {{"name", "other"}, {"emptyDir", Json::object()}}}))
                       .Set("/spec/worker/template/spec/containers/0/volumeMounts",
                            Json::array({{{"name", "logs"}, {"mountPath", "/var/log/train/"}},
                                         {{"name", "data"}, {"mountPath", "/data"}},
                                         {{"name", "other"}, {"mountPath", "/data/other"}, {"subPath", "o"}}}))
                       .Obj();
  const ReconcilePlan plan = PlanFor(job, Observed{}, T0(), OperatorSettings{});
  const Action* pod = FindAction(plan, Verb::kCreate, ObjectKind::kPod, "wd-worker-0");
  ASSERT_NE(pod, nullptr) << plan.status.ToJson().dump();
  const Json rendered = pod->Object();
  const Json& mounts = rendered["spec"]["initContainers"][0]["volumeMounts"];
  EXPECT_THAT(mounts, Contains(Json{{"name", "logs"}, {"mountPath", "/var/log/train"}, {"readOnly", true}}));
  EXPECT_THAT(mounts, Contains(Json{{"name", "other"}, {"mountPath", "/data/other"}, {"subPath", "o"}, {"readOnly", true}}))
      << "the deepest directory's volume";
  for (const Json& m : mounts) EXPECT_NE(m["name"], "data") << mounts.dump();
}

TEST(PodCreationTest, RelativeLogFilesAreRefused) {
  const Json job = JobBuilder("wd").Ps(1, 2).Set("/spec/sidecar", {{"logFiles", {"train.log"}}}).Obj();
  const ReconcilePlan plan = PlanFor(job, Observed{}, T0(), OperatorSettings{});
  EXPECT_EQ(plan.status.ToJson().value("phase", ""), "Failed");
  EXPECT_THAT(plan.status.ToJson().value("message", ""), ::testing::HasSubstr("spec.sidecar.logFiles"));
}

}  // namespace
}  // namespace fleet::op::testing
