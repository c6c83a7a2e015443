#include "fleet/cli/job_spec.h"

#include <gtest/gtest.h>

namespace fleet::cli {
namespace {

SubmitOptions Options(std::vector<std::string> command = {"python3", "-u", "train.py", "--epochs=2"}) {
  SubmitOptions o;
  o.image = "paddle:2.6";
  o.command = std::move(command);
  return o;
}

Json Build(const SubmitOptions& o) {
  auto job = BuildFleetJob(o, "team-a");
  EXPECT_TRUE(job.ok()) << job.error();
  return job.ok() ? *job : Json();
}

std::string ErrorOf(const SubmitOptions& o) {
  auto job = BuildFleetJob(o, "team-a");
  EXPECT_FALSE(job.ok());
  return job.ok() ? "" : job.error();
}

TEST(FleetctlJobSpecTest, WorkersOnlyIsACollectiveJob) {
  SubmitOptions o = Options();
  o.name = "mnist";
  o.worker_num = 4;
  const Json job = Build(o);
  EXPECT_EQ(job, Json::parse(R"({
    "apiVersion": "fleet.paddlepaddle.org/v1alpha1", "kind": "FleetJob",
    "metadata": {"name": "mnist", "namespace": "team-a"},
    "spec": {"mode": "collective",
             "worker": {"replicas": 4, "template": {"spec": {"containers": [
               {"name": "paddle", "image": "paddle:2.6", "command": ["python3", "-u", "train.py", "--epochs=2"]}]}}}}
  })"));
}

TEST(FleetctlJobSpecTest, ServersMakeAParameterServerJobWithTheSameCommandForBothRoles) {
  SubmitOptions o = Options();
  o.name = "ctr";
  o.server_num = 2;
  o.worker_num = 8;
  o.cpu = "4";
  o.memory = "8Gi";
  o.gpus = 1;
  o.env = {{"FLAGS_x", "1"}};
  o.restart_policy = "onfailure";
  o.backoff_limit = 7;
  const Json spec = Build(o)["spec"];
  EXPECT_EQ(spec["mode"], "ps");
  EXPECT_EQ(spec["server"]["replicas"], 2);
  EXPECT_EQ(spec["worker"]["replicas"], 8);
  EXPECT_EQ(spec["server"]["restartPolicy"], "OnFailure");
  EXPECT_EQ(spec["runPolicy"], Json({{"backoffLimit", 7}}));
  const Json server = spec["server"]["template"]["spec"]["containers"][0];
  const Json worker = spec["worker"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(server["command"], worker["command"]);
  EXPECT_EQ(server["env"], Json::parse(R"([{"name": "FLAGS_x", "value": "1"}])"));
  EXPECT_EQ(server["resources"], Json::parse(R"({"requests": {"cpu": "4", "memory": "8Gi"},
                                                 "limits": {"cpu": "4", "memory": "8Gi"}})"));
  // GPUs go to the trainers only; parameter-server pods run one process each.
  EXPECT_EQ(worker["resources"]["limits"]["nvidia.com/gpu"], 1);
  EXPECT_FALSE(server["resources"]["limits"].contains("nvidia.com/gpu"));
  EXPECT_FALSE(spec.contains("processesPerPod"));
}

TEST(FleetctlJobSpecTest, SeveralGpusPerCollectivePodRunFleetrun) {
  SubmitOptions o = Options({"/usr/bin/python3.10", "-u", "-u", "train.py", "--lr", "0.1"});
  o.gpus = 8;
  o.worker_num = 2;
  const Json spec = Build(o)["spec"];
  EXPECT_EQ(spec["processesPerPod"], 8);
  const Json c = spec["worker"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(c["command"], Json({"fleetrun", "train.py", "--lr", "0.1"}));
  EXPECT_EQ(c["resources"]["limits"], Json({{"nvidia.com/gpu", 8}}));
  o.command = {"fleetrun", "--log_dir=/logs", "train.py"};   // already fleetrun: kept
  EXPECT_EQ(Build(o)["spec"]["worker"]["template"]["spec"]["containers"][0]["command"],
            Json({"fleetrun", "--log_dir=/logs", "train.py"}));
  o.gpus = 1;   // one GPU, one process: the command as given
  o.command = {"python", "train.py"};
  EXPECT_EQ(Build(o)["spec"]["worker"]["template"]["spec"]["containers"][0]["command"], Json({"python", "train.py"}));
  o.gpus = 2;
  o.command = {"bash", "run.sh"};
  EXPECT_EQ(ErrorOf(o), "--gpus > 1 runs one process per GPU through fleetrun: give the command as \"-- python "
                        "train.py ARGS\" or \"-- fleetrun train.py ARGS\"");
  o.command = {"python", "-m", "paddle.distributed.launch"};
  EXPECT_NE(ErrorOf(o).find("not python's option \"-m\""), std::string::npos);
}

TEST(FleetctlJobSpecTest, NameIsGeneratedFromTheScript) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"python3", "-u", "/work/Train_ResNet50.py"}, "train-resnet50-"},
      {{"python", "-m", "my_pkg.train"}, "my-pkg-train-"},
      {{"./run.sh"}, "run-"},
      {{"python3", "3d.py"}, "job-3d-"},
      {{"python3", "-u"}, "job-"},
      {{"python3", "a_very_long_script_name_for_training_models.py"}, "a-very-long-script-name-"},
  };
  for (const auto& [command, prefix] : cases) {
    const Json meta = Build(Options(command))["metadata"];
    EXPECT_EQ(meta["generateName"], prefix) << command.back();
    EXPECT_FALSE(meta.contains("name"));
  }
}

TEST(FleetctlJobSpecTest, SchedulingNetworkAndSidecar) {
  SubmitOptions o = Options();
  o.gang = "scheduler-plugins";
  o.priority_class = "high";
  o.network = "hostnetwork";
  o.sidecar_image = "registry/sidecar:1";
  const Json spec = Build(o)["spec"];
  EXPECT_EQ(spec["scheduling"], Json({{"gang", "SchedulerPlugins"}, {"priorityClassName", "high"}}));
  EXPECT_EQ(spec["network"], "HostNetwork");
  EXPECT_EQ(spec["sidecar"], Json({{"image", "registry/sidecar:1"}}));
  o.gang = "Volcano";
  o.queue = "research";
  EXPECT_EQ(Build(o)["spec"]["scheduling"]["queue"], "research");
}

TEST(FleetctlJobSpecTest, RuntimeFleetServersGetNoTemplate) {
  SubmitOptions o = Options();
  o.server_num = 2;
  o.worker_num = 3;
  o.runtime = "Fleet";
  o.restart_policy = "OnFailure";
  const Json spec = Build(o)["spec"];
  EXPECT_EQ(spec["runtime"], "fleet");
  EXPECT_EQ(spec["server"], Json({{"replicas", 2}, {"restartPolicy", "OnFailure"}}))
      << "the operator provides the servers' container";
  EXPECT_EQ(spec["worker"]["template"]["spec"]["containers"][0]["image"], o.image);
  o.runtime = "paddle";
  EXPECT_TRUE(Build(o)["spec"]["server"].contains("template"));
  o.runtime = "fleet";
  o.server_num = 0;
  EXPECT_EQ(ErrorOf(o), "--runtime=fleet serves parameter servers: it needs --server_num > 0");
  o.runtime = "tensorflow";
  EXPECT_EQ(ErrorOf(o), "--runtime=tensorflow: expected one of paddle, fleet");
}

TEST(FleetctlJobSpecTest, BadValuesAreNamed) {
  SubmitOptions o = Options();
  o.name = "Bad_Name";
  EXPECT_EQ(ErrorOf(o), "--name=Bad_Name: must be a DNS label (lower case letters, digits and '-', at most 63)");
  o = Options();
  o.network = "overlay";
  EXPECT_EQ(ErrorOf(o), "--network=overlay: expected one of PodIP, Service, HostNetwork");
  o = Options();
  o.restart_policy = "Always";
  EXPECT_EQ(ErrorOf(o), "--restart_policy=Always: expected one of Never, OnFailure, ExitCode");
  o = Options();
  o.gang = "kueue";
  EXPECT_EQ(ErrorOf(o), "--gang=kueue: expected one of None, Volcano, SchedulerPlugins, Kubernetes");
  o = Options();
  o.queue = "q";
  EXPECT_EQ(ErrorOf(o), "--queue needs --gang=Volcano");
  o = Options();
  o.image = "";
  EXPECT_EQ(ErrorOf(o), "--image is required");
}

TEST(FleetctlJobSpecTest, ManifestsGoToTheirNamespaceAsWithKubectl) {
  const Json job = Json::parse(R"({"apiVersion": "fleet.paddlepaddle.org/v1alpha1", "kind": "FleetJob",
                                   "metadata": {"name": "j"}, "spec": {}})");
  EXPECT_EQ((*PrepareManifest({job}, "ctx-ns", false))["metadata"]["namespace"], "ctx-ns");
  Json own = job;
  own["metadata"]["namespace"] = "team-b";
  EXPECT_EQ((*PrepareManifest({own}, "ctx-ns", false))["metadata"]["namespace"], "team-b");
  EXPECT_EQ((*PrepareManifest({own}, "team-b", true))["metadata"]["namespace"], "team-b");
  EXPECT_EQ(PrepareManifest({own}, "team-c", true).error(),
            "the FleetJob's namespace \"team-b\" does not match the namespace \"team-c\" of -n (drop one of them)");
  EXPECT_EQ(PrepareManifest({job, job}, "n", false).error(),
            "expected one FleetJob in the manifest, found 2 documents");
  EXPECT_EQ(PrepareManifest({}, "n", false).error(), "expected one FleetJob in the manifest, found 0 documents");
  Json pod = job;
  pod["kind"] = "Pod";
  EXPECT_EQ(PrepareManifest({pod}, "n", false).error(), "the manifest is not a FleetJob (kind: Pod)");
  Json old = job;
  old["apiVersion"] = "fleet.paddlepaddle.org/v1";
  EXPECT_EQ(PrepareManifest({old}, "n", false).error(),
            "apiVersion fleet.paddlepaddle.org/v1: fleetctl submits fleet.paddlepaddle.org/v1alpha1");
  Json nameless = job;
  nameless["metadata"].erase("name");
  EXPECT_EQ(PrepareManifest({nameless}, "n", false).error(), "the FleetJob has no metadata.name");
}

}  // namespace
}  // namespace fleet::cli
