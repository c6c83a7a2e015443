// FleetJobSpec: a FleetJob's .spec read with its checks (FromJson) and written back (ToJson), in the
// CRD's names. A spec written in full reads and writes back as it was, and the CRD declares every
// key written and nothing the API leaves unread.
#include "fleet/api/job_spec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "crd_schema.h"
#include "fleet/api/log_pattern.h"
#include "fleet/api/names.h"

namespace fleet::api::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A pod template with one container running `command`, asking for `gpus` GPUs (none: 0).
Json PodTemplate(const std::string& image, const Json& command, int gpus = 0) {
  Json container = {{"name", "main"}, {"image", image}, {"command", command}};
  if (gpus > 0) container["resources"] = {{"limits", {{"nvidia.com/gpu", gpus}}}};
  return {{"metadata", {{"labels", {{"team", "search"}}}}}, {"spec", {{"containers", {container}}}}};
}

Json FullRunPolicy() {
  return {{"backoffLimit", 5}, {"activeDeadlineSeconds", 86400}, {"ttlSecondsAfterFinished", 3600},
          {"cleanPodPolicy", "All"}, {"suspend", true}, {"pendingTimeoutSeconds", 900}, {"restartStrategy", "InPlace"},
          {"failureRules", Json::parse(R"([
             {"name": "bad-dataset", "action": "FailJob", "roles": ["worker"],
              "onExitCodes": {"operator": "NotIn", "values": [137, 143]}, "onLogPattern": "corrupt record"},
             {"action": "Ignore", "onReasons": ["PreemptionByScheduler", "Evicted"]}])")}};
}

Json FullSidecar() {
  return {{"image", "registry.local/fleetjob/sidecar:0.1.0"},
          {"resources", {{"requests", {{"cpu", "50m"}, {"memory", "32Mi"}}}}},
          {"metricsPort", 9200},
          {"logFiles", {"/var/log/train/rank0.log"}},
          {"patterns", {R"(iter (?P<step>\d+) .*loss=(?P<loss>[0-9.e+-]+))"}},
          {"stallWindowSeconds", 300},
          {"stallAction", "RestartJob"}};
}

// Collective training under Paddle's launcher, one process per GPU, gang-scheduled by Volcano.
Json CollectiveSpec() {
  return {{"mode", "collective"}, {"runtime", "paddle"}, {"launcher", "PaddleLaunch"}, {"paddleVersion", "2.6"},
          {"network", "Service"}, {"gloo", "Workers"}, {"processesPerPod", 4}, {"port", 6170}, {"totalSteps", 10000},
          {"worker", {{"replicas", 2}, {"restartPolicy", "OnFailure"},
                      {"template", PodTemplate("paddlepaddle/paddle:2.6.1-gpu-cuda12.0-cudnn8.9-trt8.6",
                                               {"python", "-m", "paddle.distributed.launch", "train.py"}, 4)}}},
          {"runPolicy", FullRunPolicy()},
          {"scheduling", {{"gang", "Volcano"}, {"queue", "research"}, {"priorityClassName", "high"},
                          {"networkTopology", {{"mode", "soft"}, {"highestTierAllowed", 2}}}}},
          {"sidecar", FullSidecar()},
          {"checkpoint", {{"beforeStop", true}, {"timeoutSeconds", 120}}},
          {"managedBy", kFleetJobController}};
}

// A parameter-server job with two heter stages, run bare.
Json HeterSpec() {
  const Json script = Json{"python", "train_ps.py"};
  return {{"mode", "ps-heter"}, {"runtime", "paddle"}, {"launcher", "Script"}, {"paddleVersion", "2.5"},
          {"network", "HostNetwork"}, {"gloo", "All"}, {"processesPerPod", 1}, {"port", 20000}, {"totalSteps", 0},
          {"server", {{"replicas", 2}, {"restartPolicy", "ExitCode"}, {"template", PodTemplate("trainer:1", script)}}},
          {"worker", {{"replicas", 4}, {"restartPolicy", "Never"}, {"template", PodTemplate("trainer:1", script)}}},
          {"heter", {{{"name", "dense"}, {"device", "gpu"}, {"replicas", 2}, {"restartPolicy", "OnFailure"},
                      {"template", PodTemplate("trainer:1-gpu", script, 1)}},
                     {{"name", "sparse"}, {"device", "xpu"}, {"replicas", 1}, {"restartPolicy", "Never"},
                      {"template", PodTemplate("trainer:1-xpu", script)}}}},
          {"runPolicy", FullRunPolicy()},
          {"scheduling", {{"gang", "SchedulerPlugins"}, {"priorityClassName", "batch"}}},
          {"sidecar", FullSidecar()},
          {"checkpoint", {{"beforeStop", false}, {"timeoutSeconds", 30}}}};
}

// An elastic collective job under fleetrun, its workers between 2 and 4.
Json ElasticJobSpec() {
  return {{"mode", "collective"}, {"runtime", "paddle"}, {"launcher", "Fleetrun"}, {"paddleVersion", "2.5"},
          {"network", "PodIP"}, {"gloo", "None"}, {"processesPerPod", 2}, {"port", 6170}, {"totalSteps", 500},
          {"worker", {{"replicas", 3}, {"restartPolicy", "Never"},
                      {"template", PodTemplate("trainer:2", {"fleetrun", "train.py"}, 2)}}},
          {"elastic", {{"minReplicas", 2}, {"maxReplicas", 4}, {"etcdEndpoint", "etcd.infra.svc:2379"},
                       {"timeoutSeconds", 300}}},
          {"runPolicy", FullRunPolicy()},
          {"scheduling", {{"gang", "None"}}},
          {"sidecar", FullSidecar()},
          {"checkpoint", {{"beforeStop", true}, {"timeoutSeconds", 30}}}};
}

// Parameter servers served by FleetJob's runtime: the server template names the operator's container.
Json FleetRuntimeSpec() {
  return {{"mode", "ps"}, {"runtime", "fleet"}, {"launcher", "Auto"}, {"network", "PodIP"}, {"gloo", "None"},
          {"processesPerPod", 1}, {"port", 6170}, {"totalSteps", 0},
          {"server", {{"replicas", 1}, {"restartPolicy", "Never"},
                      {"template", {{"spec", {{"containers", {{{"name", "fleet-ps-server"},
                                                               {"args", {"--model_dir=/models"}}}}}}}}}}},
          {"worker", {{"replicas", 2}, {"restartPolicy", "Never"},
                      {"template", PodTemplate("trainer:3", {"python", "train.py"})}}},
          {"runPolicy", FullRunPolicy()},
          {"scheduling", {{"gang", "None"}}},
          {"sidecar", FullSidecar()},
          {"checkpoint", {{"beforeStop", false}, {"timeoutSeconds", 3600}}}};
}

std::vector<Json> FullSpecs() { return {CollectiveSpec(), HeterSpec(), ElasticJobSpec(), FleetRuntimeSpec()}; }

const std::set<std::string> kOpaque = {"template", "resources"};   // Kubernetes' types, kept whole

TEST(FleetJobSpecTest, AFullyWrittenSpecWritesBackAsItWas) {
  for (const Json& spec : FullSpecs()) {
    auto read = FleetJobSpec::FromJson(spec);
    ASSERT_TRUE(read.ok()) << read.error() << "\n" << spec.dump(2);
    EXPECT_EQ(read->ToJson(), spec) << "read from " << spec.dump(2);
  }
}

// Whose job it is is read from the object before, and whatever, the rest of its spec.
TEST(FleetJobSpecTest, AJobManagedElsewhereIsToldApartBeforeItsSpecIsRead) {
  const auto job = [](const Json& spec) { return Json{{"metadata", {{"name", "j"}}}, {"spec", spec}}; };
  EXPECT_FALSE(ManagedElsewhere(job(CollectiveSpec())));
  EXPECT_FALSE(ManagedElsewhere(job(HeterSpec())));   // unset
  EXPECT_FALSE(ManagedElsewhere(Json{{"metadata", {{"name", "j"}}}}));
  EXPECT_EQ(ManagedElsewhere(job({{"managedBy", "kueue.x-k8s.io/multikueue"}})), "kueue.x-k8s.io/multikueue");
  EXPECT_EQ(ManagedElsewhere(job({{"managedBy", 7}})), "7");   // not a name this operator knows either
  auto read = FleetJobSpec::FromJson(CollectiveSpec());
  ASSERT_TRUE(read.ok()) << read.error();
  EXPECT_EQ(read->managed_by, kFleetJobController);
}

// The job's labels are read (a kueue.x-k8s.io/queue-name label queues it in Kueue); values
// that are not strings, which the API server never stores, are skipped rather than failing the job.
TEST(FleetJobSpecTest, ReadsTheJobsLabels) {
  const Json object = {{"metadata", {{"name", "j"}, {"labels", {{"kueue.x-k8s.io/queue-name", "team-a"}, {"odd", 7}}}}},
                       {"spec", CollectiveSpec()}};
  auto job = ParseFleetJob(object);
  ASSERT_TRUE(job.ok()) << job.error();
  EXPECT_EQ(job->labels, (std::map<std::string, std::string>{{"kueue.x-k8s.io/queue-name", "team-a"}}));
  auto unlabelled = ParseFleetJob(Json{{"metadata", {{"name", "j"}}}, {"spec", CollectiveSpec()}});
  ASSERT_TRUE(unlabelled.ok()) << unlabelled.error();
  EXPECT_TRUE(unlabelled->labels.empty());
}

TEST(FleetJobSpecTest, ReadsEveryFieldIntoItsMember) {
  auto heter = FleetJobSpec::FromJson(HeterSpec());
  ASSERT_TRUE(heter.ok()) << heter.error();
  EXPECT_EQ(heter->mode, JobMode::kHeterParameterServer);
  EXPECT_EQ(heter->network, Network::kHostNetwork);
  EXPECT_EQ(heter->gloo, Gloo::kAll);
  ASSERT_EQ(heter->roles.size(), 4u);
  EXPECT_EQ(heter->roles[2].name, "dense");
  EXPECT_EQ(heter->roles[2].stage, 2);
  EXPECT_EQ(heter->roles[2].device, DeviceKind::kGpu);
  EXPECT_EQ(heter->roles[3].restart_policy, RestartPolicy::kNever);
  EXPECT_EQ(heter->run_policy.clean_pod_policy, CleanPodPolicy::kAll);
  EXPECT_EQ(heter->run_policy.ttl_seconds_after_finished, 3600);
  EXPECT_EQ(heter->scheduling.gang, GangScheduler::kSchedulerPlugins);
  EXPECT_EQ(heter->sidecar.stall_window_seconds, 300);
  auto elastic = FleetJobSpec::FromJson(ElasticJobSpec());
  ASSERT_TRUE(elastic.ok()) << elastic.error();
  ASSERT_TRUE(elastic->elastic.has_value());
  EXPECT_EQ(elastic->elastic->etcd_endpoint, "etcd.infra.svc:2379");
  EXPECT_EQ(elastic->roles[0].launcher, Launcher::kFleetrun);
}

// A short spec is written with what reading it resolved (the mode from its roles, the launcher's
// processes per GPU, Paddle's release from its image, defaults), and that reads back the same.
TEST(FleetJobSpecTest, ASpecWrittenWithWhatReadingResolvedReadsBackTheSame) {
  const Json short_spec = {
      {"worker", {{"replicas", 2},
                  {"template", PodTemplate("paddlepaddle/paddle:2.5.2-gpu", {"sh", "-c", "fleetrun train.py"}, 8)}}}};
  auto read = FleetJobSpec::FromJson(short_spec);
  ASSERT_TRUE(read.ok()) << read.error();
  const Json written = read->ToJson();
  EXPECT_EQ(written["mode"], "collective");
  EXPECT_EQ(written["launcher"], "Auto") << "left to each role's command, as it was";
  EXPECT_EQ(written["processesPerPod"], 8) << "fleetrun starts one process per GPU";
  EXPECT_EQ(written["paddleVersion"], "2.5") << "read from Paddle's image";
  EXPECT_EQ(written["runPolicy"]["backoffLimit"], 3);
  EXPECT_FALSE(written["sidecar"].contains("image")) << "unset: the operator's --sidecar-image";
  auto again = FleetJobSpec::FromJson(written);
  ASSERT_TRUE(again.ok()) << again.error();
  EXPECT_EQ(again->ToJson(), written);
  EXPECT_EQ(again->roles[0].launcher, Launcher::kFleetrun);
  EXPECT_TRUE(again->roles[0].launcher_detected);
}

TEST(FleetJobSpecTest, AnInvalidSpecIsAnErrorNamingTheField) {
  Json spec = HeterSpec();
  spec["heter"][1]["device"] = "tpu";
  auto read = FleetJobSpec::FromJson(spec);
  ASSERT_FALSE(read.ok());
  EXPECT_EQ(read.error(), "spec.heter[1].device: must be one of cpu, gpu, xpu, got \"tpu\"");
  EXPECT_EQ(FleetJobSpec::FromJson(Json()).error(), "spec: is required");
  spec = CollectiveSpec();
  spec["sidecar"]["patterns"] = {"worker (?P<worker_index>\\d+)"};
  EXPECT_EQ(FleetJobSpec::FromJson(spec).error(),
            "spec.sidecar.patterns: 'worker (?P<worker_index>\\d+)': the group name 'worker_index' cannot be used");
}

TEST(FleetJobSpecTest, EveryKeyWrittenIsInTheCrdsSchema) {
  const Json schema = CrdSchema("spec");
  ASSERT_TRUE(schema.is_object()) << "no spec schema in crds/fleetjob.yaml (FLEET_SOURCE_DIR)";
  for (const Json& spec : FullSpecs()) {
    std::vector<std::string> undeclared;
    Undeclared(FleetJobSpec::FromJson(spec)->ToJson(), schema, "spec", undeclared, kOpaque);
    EXPECT_THAT(undeclared, IsEmpty());
  }
}

// The reverse: every property the CRD declares is written (and so, by the round trip, read): a
// field added to the CRD and not to the API fails here.
TEST(FleetJobSpecTest, EveryPropertyTheCrdDeclaresIsWritten) {
  const Json schema = CrdSchema("spec");
  ASSERT_TRUE(schema.is_object()) << "no spec schema in crds/fleetjob.yaml (FLEET_SOURCE_DIR)";
  std::set<std::string> written;
  for (const Json& spec : FullSpecs()) written.merge(WrittenPaths(FleetJobSpec::FromJson(spec)->ToJson(), "spec", kOpaque));
  std::vector<std::string> unwritten;
  for (const std::string& path : DeclaredPaths(schema, "spec", kOpaque)) {
    if (!written.count(path)) unwritten.push_back(path);
  }
  EXPECT_THAT(unwritten, IsEmpty());
  EXPECT_TRUE(DeclaredPaths(schema, "spec", kOpaque).count("spec.heter[].device")) << "the walk reaches list items";
}

// The schema's enums list exactly the API's names: spelt once, in the API, and declared as spelt.
template <typename E>
std::vector<std::string> NamesOf(std::vector<std::string> out = {}) {
  for (const auto& [name, value] : Names<E>()) out.emplace_back(name);
  return out;
}

TEST(FleetJobSpecTest, TheCrdsEnumsAreTheApisNames) {
  const Json schema = CrdSchema("spec");
  ASSERT_TRUE(schema.is_object()) << "no spec schema in crds/fleetjob.yaml (FLEET_SOURCE_DIR)";
  const Json& p = schema["properties"];
  const std::vector<std::pair<Json, std::vector<std::string>>> enums = {
      {p["mode"], NamesOf<JobMode>()},
      {p["runtime"], NamesOf<Runtime>()},
      {p["launcher"], NamesOf<Launcher>({"Auto"})},
      {p["network"], NamesOf<Network>()},
      {p["gloo"], NamesOf<Gloo>()},
      {p["server"]["properties"]["restartPolicy"], NamesOf<RestartPolicy>()},
      {p["worker"]["properties"]["restartPolicy"], NamesOf<RestartPolicy>()},
      {p["heter"]["items"]["properties"]["restartPolicy"], NamesOf<RestartPolicy>()},
      {p["heter"]["items"]["properties"]["device"], NamesOf<DeviceKind>()},
      {p["runPolicy"]["properties"]["cleanPodPolicy"], NamesOf<CleanPodPolicy>()},
      {p["scheduling"]["properties"]["gang"], NamesOf<GangScheduler>()},
      {p["runPolicy"]["properties"]["failureRules"]["items"]["properties"]["action"], NamesOf<FailureAction>()},
      {p["sidecar"]["properties"]["stallAction"], NamesOf<StallAction>()}};
  for (const auto& [property, names] : enums) {
    EXPECT_EQ(property.value("enum", Json()), Json(names)) << property.dump();
  }
}

TEST(LogPatternTest, NamedGroupsNameStepFields) {
  auto pattern = CompileLogPattern(R"(iter (?<step>\d+) .*(?P<Loss>[0-9.]+) acc=(?P<acc1>[0-9.]+))");
  ASSERT_TRUE(pattern.ok()) << pattern.error();
  ASSERT_EQ(pattern->groups.size(), 3u);
  EXPECT_EQ(pattern->groups[0].field, StepField::kStep);
  EXPECT_EQ(pattern->groups[1].field, StepField::kLoss) << "names ignore case";
  EXPECT_EQ(pattern->groups[2].field, StepField::kScalar);
  EXPECT_EQ(pattern->submatches, 4);
}

TEST(LogPatternTest, APatternItCannotUseIsAnErrorNamingIt) {
  EXPECT_EQ(CompileLogPattern("loss=([0-9.]+)").error(),
            "'loss=([0-9.]+)': it has no named group; name what it captures, e.g. (?P<loss>[0-9.]+)");
  EXPECT_THAT(CompileLogPattern("(?P<step>[0-9]+").error(), HasSubstr("not a valid regular expression"));
  EXPECT_THAT(CompileLogPattern("(?P<step>\\d+) (?P<step>\\d+)").error(), HasSubstr("'step' is used twice"));
  EXPECT_THAT(CompileLogPattern("(?P<" + std::string(65, 'x') + ">\\d+)").error(), HasSubstr("is too long"));
}

TEST(NameListTest, ListsATablesNamesAsHelpTextsDo) {
  EXPECT_EQ(NameList<RestartPolicy>(), "Never, OnFailure or ExitCode");
  EXPECT_EQ(NameList<Network>({Network::kPodIP, Network::kService}), "HostNetwork");
  EXPECT_EQ(NameList<Runtime>({Runtime::kPaddle}), "fleet");
  const std::string gangs = NameList<GangScheduler>({GangScheduler::kNone});
  EXPECT_EQ(gangs.find("None"), std::string::npos) << gangs;
  EXPECT_EQ(gangs.rfind(" or " + std::string(Names<GangScheduler>().back().first)) + 4 +
                Names<GangScheduler>().back().first.size(),
            gangs.size())
      << gangs;
}

// Volcano's network topology: read with its checks, and only with gang Volcano.
TEST(FleetJobSpecTest, ANetworkTopologyIsVolcanosAndItsFieldsAreChecked) {
  auto read = FleetJobSpec::FromJson(CollectiveSpec());
  ASSERT_TRUE(read.ok()) << read.error();
  ASSERT_TRUE(read->scheduling.network_topology.has_value());
  EXPECT_EQ(read->scheduling.network_topology->mode, "soft");
  EXPECT_EQ(read->scheduling.network_topology->highest_tier_allowed, 2);
  Json spec = CollectiveSpec();
  spec["scheduling"] = {{"gang", "SchedulerPlugins"}, {"networkTopology", {{"mode", "hard"}}}};
  EXPECT_THAT(FleetJobSpec::FromJson(spec).error(),
              HasSubstr("spec.scheduling.networkTopology: network topologies are Volcano's"));
  spec["scheduling"] = {{"gang", "Volcano"}, {"networkTopology", {{"mode", "strict"}}}};
  EXPECT_EQ(FleetJobSpec::FromJson(spec).error(), "spec.scheduling.networkTopology.mode: must be hard or soft, got \"strict\"");
  spec["scheduling"] = {{"gang", "Volcano"}, {"networkTopology", {{"highestTierAllowed", -1}}}};
  EXPECT_THAT(FleetJobSpec::FromJson(spec).error(), HasSubstr("spec.scheduling.networkTopology.highestTierAllowed: must be between 0"));
}

}  // namespace
}  // namespace fleet::api::testing
