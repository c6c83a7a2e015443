// Pods that start Paddle with a launcher: which launcher a role runs (read from its command, or
// spec.launcher), what its pods are given to find their peers, and the combinations refused at
// admission. The env is read as the kubelet resolves it (ResolveEnv), after the lists are published.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "builders.h"
#include "fleet/operator/launcher.h"
#include "fleet/operator/planner.h"
#include "world.h"

namespace fleet::op::testing {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

Json Template(Json command, int gpus = 0, const std::string& image = kImage) {
  Json t = PodTemplate(gpus);
  t["spec"]["containers"][0]["command"] = std::move(command);
  t["spec"]["containers"][0]["image"] = image;
  return t;
}

const Json kPaddleLaunch = Json::array({"python", "-m", "paddle.distributed.launch", "train.py"});

// A collective job of `workers` pods whose worker template runs `command`.
JobBuilder LaunchJob(int workers, Json command = kPaddleLaunch, int gpus = 0) {
  JobBuilder b("wd");
  b.Collective(workers).Set("/spec/worker/template", Template(std::move(command), gpus));
  return b;
}

World Published(Json job, HostPortBlock ports = {}) {
  World world(std::move(job), {}, std::move(ports));
  world.Step();
  world.StartPods();
  world.Step();
  return world;
}

EnvMap EnvOf(const World& world, const std::string& pod) {
  auto env = ResolveEnv(world.Pod(pod), world.observed.endpoints);
  EXPECT_TRUE(env.ok()) << (env.ok() ? "" : env.error());
  return env.ok() ? *env : EnvMap{};
}

std::vector<std::string> SidecarArgs(const Json& pod) {
  return pod["spec"]["initContainers"][0]["args"].get<std::vector<std::string>>();
}

// ---- which launcher ----

std::optional<Launcher> Detect(Json command) { return DetectLauncher(Template(std::move(command))); }

TEST(DetectLauncherTest, ReadsEachLauncherFromTheCommand) {
  EXPECT_EQ(Detect(kPaddleLaunch), Launcher::kPaddleLaunch);
  EXPECT_EQ(Detect({"python3", "-mpaddle.distributed.launch", "--nproc_per_node=2", "t.py"}), Launcher::kPaddleLaunch);
  EXPECT_EQ(Detect({"python", "-m", "paddle.distributed.fleet.launch", "t.py"}), Launcher::kFleetrun);
  EXPECT_EQ(Detect({"/usr/local/bin/fleetrun", "--gpus=0,1", "t.py"}), Launcher::kFleetrun);
  EXPECT_EQ(Detect({"paddleformers-cli", "train", "config.yaml"}), Launcher::kPaddleFormers);
  EXPECT_EQ(Detect({"python", "-u", "train.py"}), std::nullopt);
  EXPECT_EQ(Detect({"python", "fleetrun_helper.py"}), std::nullopt);
}

TEST(DetectLauncherTest, ReadsInsideShellScriptsAndArgs) {
  EXPECT_EQ(Detect({"sh", "-c", "pip install -r req.txt && python -m paddle.distributed.launch --devices 0,1 train.py"}),
            Launcher::kPaddleLaunch);
  Json t = Template({"bash", "-c"});
  t["spec"]["containers"][0]["args"] = {"cd /work;exec fleetrun train.py"};
  EXPECT_EQ(DetectLauncher(t), Launcher::kFleetrun);
}

TEST(DetectLauncherTest, ReadsPaddleReleasesFromPaddlesOwnImages) {
  auto version = [](const std::string& image) { return ImagePaddleVersion(Template(kPaddleLaunch, 0, image)); };
  ASSERT_TRUE(version("paddlepaddle/paddle:2.5.2-gpu-cuda11.7-cudnn8.4-trt8.4"));
  EXPECT_EQ(version("paddlepaddle/paddle:2.5.2-gpu-cuda11.7-cudnn8.4-trt8.4")->ToString(), "2.5");
  EXPECT_EQ(version("ccr.example.com/paddlepaddle/paddle:3.0.0b2")->ToString(), "3.0");
  EXPECT_FALSE(version("paddlepaddle/paddle:latest-gpu"));
  EXPECT_FALSE(version("example.com/myorg/paddle:1.2"));
  EXPECT_FALSE(version("paddlepaddle/paddlenlp:2.6"));
}

TEST(PaddleEtcdMasterTest, UpperCasesAFirstLetterPaddleWouldStrip) {
  EXPECT_EQ(PaddleEtcdMaster("etcd-0.etcd:2379"), "etcd://Etcd-0.etcd:2379");
  EXPECT_EQ(PaddleEtcdMaster("dns.infra:2379"), "etcd://Dns.infra:2379");
  EXPECT_EQ(PaddleEtcdMaster("fleet-etcd.infra:2379"), "etcd://fleet-etcd.infra:2379");
  EXPECT_EQ(PaddleEtcdMaster("10.0.0.5:2379"), "etcd://10.0.0.5:2379");
}

// ---- admission ----

TEST(LauncherSpecTest, ALauncherStartsOneProcessPerGpu) {
  auto job = ParseFleetJob(LaunchJob(2, kPaddleLaunch, 4).Obj());
  ASSERT_TRUE(job.ok()) << job.error();
  EXPECT_EQ(job->spec.processes_per_pod, 4);
  EXPECT_EQ(job->spec.Find(RoleKind::kWorker)->launcher, Launcher::kPaddleLaunch);
  EXPECT_TRUE(job->spec.Find(RoleKind::kWorker)->launcher_detected);
  // A bare script keeps one process with every GPU, as before.
  auto bare = ParseFleetJob(JobBuilder("wd").Collective(2, 4).Obj());
  ASSERT_TRUE(bare.ok());
  EXPECT_EQ(bare->spec.processes_per_pod, 1);
}

TEST(LauncherSpecTest, SpecLauncherOverridesTheCommand) {
  auto job = ParseFleetJob(JobBuilder("wd").Collective(2, 1).Set("/spec/launcher", "PaddleFormers").Obj());
  ASSERT_TRUE(job.ok()) << job.error();
  EXPECT_EQ(job->spec.Find(RoleKind::kWorker)->launcher, Launcher::kPaddleFormers);
  EXPECT_FALSE(job->spec.Find(RoleKind::kWorker)->launcher_detected);
  auto script = ParseFleetJob(LaunchJob(2).Set("/spec/launcher", "Script").Obj());
  ASSERT_TRUE(script.ok());
  EXPECT_EQ(script->spec.Find(RoleKind::kWorker)->launcher, Launcher::kScript);
}

TEST(LauncherSpecTest, BeforePaddle23TheLaunchModuleIsTheLegacyLauncher) {
  auto job = ParseFleetJob(LaunchJob(2).Set("/spec/paddleVersion", "2.2.2").Obj());
  ASSERT_TRUE(job.ok()) << job.error();
  EXPECT_EQ(job->spec.Find(RoleKind::kWorker)->launcher, Launcher::kFleetrun);
}

TEST(LauncherSpecTest, RefusesWhatCannotWork) {
  auto error = [](const Json& obj) {
    auto job = ParseFleetJob(obj);
    return job.ok() ? std::string("accepted") : job.error();
  };
  // Paddle 2.3 fails on PADDLE_RANK, and without a rank its ranks are random.
  EXPECT_THAT(error(LaunchJob(2).Set("/spec/paddleVersion", "2.3").Obj()),
              HasSubstr("spec.worker.template.spec.containers: Paddle 2.3's launcher"));
  EXPECT_EQ(error(LaunchJob(2, {"python", "-m", "paddle.distributed.launch", "--rank=$(FLEET_NODE_RANK)", "t.py"})
                      .Set("/spec/paddleVersion", "2.3")
                      .Obj()),
            "accepted");
  EXPECT_THAT(error(LaunchJob(2).Set("/spec/paddleVersion", "two").Obj()), HasSubstr("spec.paddleVersion: must be"));
  EXPECT_THAT(error(LaunchJob(2, kPaddleLaunch, 2).Set("/spec/processesPerPod", 4).Obj()),
              HasSubstr("spec.processesPerPod: 4 processes, but spec.worker.template asks for 2 GPUs"));
  EXPECT_THAT(error(LaunchJob(2, {"fleetrun", "t.py"}, 4).Set("/spec/processesPerPod", 2).Obj()),
              HasSubstr("fleetrun starts one process per visible GPU"));
  EXPECT_EQ(error(LaunchJob(2, {"fleetrun", "--gpus=0,1", "t.py"}, 4).Set("/spec/processesPerPod", 2).Obj()),
            "accepted");
  // PS under Paddle's launcher: each pod takes the list entries its address prefixes.
  Json ps = JobBuilder("wd").Ps(1, 2).Set("/spec/launcher", "PaddleLaunch").Obj();
  EXPECT_THAT(error(ps), HasSubstr("spec.network: python -m paddle.distributed.launch in PS mode"));
  ps["spec"]["network"] = "Service";
  EXPECT_EQ(error(ps), "accepted");
  EXPECT_THAT(error(JobBuilder("wd").Ps(1, 2).Set("/spec/launcher", "PaddleFormers").Obj()),
              HasSubstr("runs collective training only"));
  EXPECT_THAT(error(LaunchJob(2, {"paddleformers-cli", "train", "sft.yaml"}).Obj()),
              HasSubstr("that flag swallows --master"));
}

// ---- what the pods are given ----

TEST(LaunchMasterTest, PodZeroServesTheMasterAtItsOwnAddressAndRanksAreIndexes) {
  World world = Published(LaunchJob(3).Obj());
  const std::string master_ip = world.Pod("wd-worker-0")["status"]["podIP"];
  for (int i = 0; i < 3; ++i) {
    const std::string pod = "wd-worker-" + std::to_string(i);
    SCOPED_TRACE(pod);
    EnvMap env = EnvOf(world, pod);
    EXPECT_EQ(env["PADDLE_MASTER"], master_ip + ":6170");
    EXPECT_EQ(env["PADDLE_NNODES"], "3");
    EXPECT_EQ(env["PADDLE_RANK"], std::to_string(i));
    EXPECT_EQ(env["FLEET_NODE_RANK"], std::to_string(i));
    EXPECT_EQ(env["PADDLE_NPROC_PER_NODE"], "1");
    EXPECT_EQ(env["PADDLE_JOB_ID"], "wd-0-" + std::string(kUid));
    EXPECT_EQ(env["PADDLE_LOG_DIR"], kLauncherLogDir);
    EXPECT_EQ(env["POD_IP"] == master_ip, i == 0) << "only pod 0 sees the master as its own address";
    // Lists would override the master and the node count in Paddle's launcher.
    for (const char* hijack : {"PADDLE_TRAINER_ENDPOINTS", "DISTRIBUTED_TRAINER_ENDPOINTS", "PADDLE_TRAINER_ID",
                               "PADDLE_TRAINERS_NUM", "FLAGS_START_PORT", "PADDLE_ELASTIC_JOB_ID"}) {
      EXPECT_EQ(env.count(hijack), 0u) << hijack;
    }
  }
}

TEST(LaunchMasterTest, ServiceModeNamesPodZeroAsItNamesItself) {
  World world = Published(LaunchJob(2).Network("Service").Obj());
  const std::string name = "wd-worker-0.wd.ns.svc.cluster.local";
  EXPECT_EQ(EnvOf(world, "wd-worker-0")["POD_IP"], name);
  EXPECT_EQ(EnvOf(world, "wd-worker-0")["PADDLE_MASTER"], name + ":6170");
  EXPECT_EQ(EnvOf(world, "wd-worker-1")["PADDLE_MASTER"], name + ":6170");
}

TEST(LaunchMasterTest, HostNetworkUsesPodZerosNodeAndPort) {
  World world = Published(LaunchJob(2).Network("HostNetwork").Obj(), HostPortsAt(31000));
  const std::string host = world.Pod("wd-worker-0")["status"]["hostIP"];
  EXPECT_EQ(EnvOf(world, "wd-worker-0")["POD_IP"], host);
  EXPECT_EQ(EnvOf(world, "wd-worker-1")["PADDLE_MASTER"], host + ":31000");
  // One pod per node: the launcher's node identity is the node's address.
  EXPECT_TRUE(world.Pod("wd-worker-1")["spec"]["affinity"].contains("podAntiAffinity"));
}

TEST(LaunchMasterTest, ANewRunHasANewJobId) {
  World world = Published(LaunchJob(2).RestartPolicy("worker", "OnFailure").Obj());
  world.Edit("wd-worker-1", [](PodBuilder& p) { p.Failed(1); });
  world.Settle();
  EXPECT_EQ(world.Status()["run"], 1);
  EXPECT_EQ(EnvOf(world, "wd-worker-0")["PADDLE_JOB_ID"], "wd-1-" + std::string(kUid));
}

TEST(LaunchMasterTest, Paddle23GetsItsRankOnlyWhereItsCommandLineReadsIt) {
  World world = Published(LaunchJob(2, {"python", "-m", "paddle.distributed.launch", "--rank", "$(FLEET_NODE_RANK)", "t.py"})
                              .Set("/spec/paddleVersion", "2.3")
                              .Obj());
  EnvMap env = EnvOf(world, "wd-worker-1");
  EXPECT_EQ(env.count("PADDLE_RANK"), 0u);
  EXPECT_EQ(env["FLEET_NODE_RANK"], "1");
}

TEST(LaunchMasterTest, PaddleFormersGetsTorchStyleNames) {
  World world = Published(LaunchJob(2, {"paddleformers-cli", "train", "cfg.yaml"}, 8).Obj());
  const std::string master_ip = world.Pod("wd-worker-0")["status"]["podIP"];
  EnvMap env = EnvOf(world, "wd-worker-1");
  EXPECT_EQ(env["MASTER_ADDR"], master_ip);
  EXPECT_EQ(env["MASTER_PORT"], "6170");
  EXPECT_EQ(env["NNODES"], "2");
  EXPECT_EQ(env["PADDLE_RANK"], "1");
  EXPECT_EQ(env["PADDLE_NPROC_PER_NODE"], "8");
}

TEST(LaunchMasterTest, TheSidecarFollowsTheLaunchersLogs) {
  World world = Published(LaunchJob(2, kPaddleLaunch, 2).Obj());
  const Json& pod = world.Pod("wd-worker-1");
  const std::vector<std::string> args = SidecarArgs(pod);
  EXPECT_THAT(args, Contains("--rank=2"));
  EXPECT_THAT(args, Contains("--ranks=2"));
  EXPECT_THAT(args, Contains("--log-dir=/var/log/fleet/paddle"));
  bool main_mounts = false;
  for (const Json& m : pod["spec"]["containers"][0]["volumeMounts"]) main_mounts |= m["mountPath"] == kLauncherLogDir;
  EXPECT_TRUE(main_mounts);
  // A bare script's pods have no launcher logs to follow.
  World bare = Published(JobBuilder("wd").Collective(2).Obj());
  EXPECT_THAT(SidecarArgs(bare.Pod("wd-worker-0")), Not(Contains("--log-dir=/var/log/fleet/paddle")));
}

TEST(LaunchEtcdTest, ElasticJobsMeetAtAnEtcdMasterOverARange) {
  World world = Published(LaunchJob(2).Elastic(2, 4, 120).Obj());
  EnvMap env = EnvOf(world, "wd-worker-1");
  EXPECT_EQ(env["PADDLE_MASTER"], "etcd://Etcd.infra.svc:2379");
  EXPECT_EQ(env["PADDLE_NNODES"], "2:4");
  EXPECT_EQ(env["PADDLE_ELASTIC_TIMEOUT"], "120");
  EXPECT_EQ(env["PADDLE_JOB_ID"], "wd-0-" + std::string(kUid));
  EXPECT_EQ(env.count("PADDLE_RANK"), 0u) << "members come and go: Paddle ranks them";
  EXPECT_EQ(env.count("PADDLE_ELASTIC_SERVER"), 0u) << "the legacy elastic variables select the legacy launcher on 2.3";
}

TEST(LaunchEtcdTest, FleetrunKeepsTheLegacyElasticEnv) {
  World world = Published(LaunchJob(2, {"fleetrun", "train.py"}).Elastic(2, 4).Obj());
  EnvMap env = EnvOf(world, "wd-worker-1");
  EXPECT_EQ(env["PADDLE_ELASTIC_SERVER"], kEtcdEndpoint);
  EXPECT_EQ(env["PADDLE_ELASTIC_NP"], "2:4");
  EXPECT_EQ(env.count("PADDLE_MASTER"), 0u);
}

TEST(LegacyLauncherTest, FleetrunGetsNodeListsForEveryGpuWithoutProcessesPerPod) {
  World world = Published(LaunchJob(2, {"fleetrun", "train.py"}, 2).Obj());
  EnvMap env = EnvOf(world, "wd-worker-1");
  EXPECT_EQ(env["TRAINER_PORTS_NUM"], "2");
  EXPECT_EQ(env["PADDLE_TRAINER_ID"], "1");
  EXPECT_EQ(env["PADDLE_TRAINERS_NUM"], "2");
  auto cluster = DetectClusterEnv(env);
  ASSERT_TRUE(cluster.has_value());
  ASSERT_TRUE(cluster->ok()) << cluster->error();
  EXPECT_EQ((*cluster)->node_rank, 1);
}

TEST(PsLaunchTest, PaddlesLauncherInPsModeGetsTheListsAsItsFlagsEnv) {
  World world = Published(JobBuilder("wd").Ps(1, 2).Network("Service").Set("/spec/launcher", "PaddleLaunch").Obj());
  EnvMap env = EnvOf(world, "wd-worker-1");
  EXPECT_EQ(env["PADDLE_RUN_MODE"], "ps");
  EXPECT_EQ(env["PADDLE_SERVERS_ENDPOINTS"], "wd-server-0.wd.ns.svc.cluster.local:6170");
  EXPECT_EQ(env["PADDLE_TRAINERS_ENDPOINTS"],
            "wd-worker-0.wd.ns.svc.cluster.local:6170,wd-worker-1.wd.ns.svc.cluster.local:6170");
  EXPECT_EQ(env["POD_IP"], "wd-worker-1.wd.ns.svc.cluster.local");
  EXPECT_EQ(env.count("TRAINING_ROLE"), 0u);
}

TEST(LauncherStatusTest, SaysOnceWhichLauncherAndWhatItIsGiven) {
  World world = Published(LaunchJob(2).Obj());
  world.Settle();
  EXPECT_EQ(world.Status()["launcher"], "worker=PaddleLaunch");
  int said = 0;
  for (const PlannedEvent& e : world.events) {
    if (e.reason != "Launcher") continue;
    ++said;
    EXPECT_THAT(e.message, HasSubstr("worker pods run python -m paddle.distributed.launch (read from its command)"));
    EXPECT_THAT(e.message, HasSubstr("a master on pod 0"));
  }
  EXPECT_EQ(said, 1);
}

std::vector<std::string> Caveats(const Json& obj) {
  auto job = ParseFleetJob(obj);
  EXPECT_TRUE(job.ok()) << job.error();
  return job.ok() ? LauncherCaveats(job->spec) : std::vector<std::string>{};
}

TEST(LauncherStatusTest, WarnsWhatMayNotWorkAsExpected) {
  // Paddle's fleetrun takes PS mode from its flags, never from TRAINING_ROLE.
  JobBuilder ps("wd");
  ps.Ps(1, 2).Set("/spec/worker/template", Template({"fleetrun", "train.py"}));
  ASSERT_EQ(Caveats(ps.Obj()).size(), 1u);
  EXPECT_THAT(Caveats(ps.Obj())[0], HasSubstr("worker (fleetrun): Paddle's fleetrun takes PS mode from --run_mode ps"));
  ps.Set("/spec/worker/template", Template({"fleetrun", "--server_num=1", "train.py"}));
  EXPECT_TRUE(Caveats(ps.Obj()).empty());
  // Paddle 2.0's fleetrun runs a CPU build as PS.
  EXPECT_THAT(Caveats(LaunchJob(2, {"fleetrun", "t.py"}).Set("/spec/paddleVersion", "2.0").Obj()),
              Contains(HasSubstr("runs a CPU build as a parameter-server job unless given --ips")));
  EXPECT_TRUE(Caveats(LaunchJob(2, {"fleetrun", "t.py"}, 1).Set("/spec/paddleVersion", "2.0").Obj()).empty());
  // Paddle's launcher with no known version: the env is 2.4+'s.
  Json unknown = LaunchJob(2).Obj();
  unknown["spec"]["worker"]["template"]["spec"]["containers"][0]["image"] = "example.com/train:1";
  EXPECT_THAT(Caveats(unknown), Contains(HasSubstr("the Paddle version is unknown")));
  EXPECT_TRUE(Caveats(LaunchJob(2).Obj()).empty()) << "paddlepaddle/paddle:2.5.2 says the version";
}

TEST(LauncherStatusTest, ABareScriptIsRecordedWithoutAnEvent) {
  World world = Published(JobBuilder("wd").Collective(2).Obj());
  EXPECT_EQ(world.Status()["launcher"], "worker=Script");
  for (const PlannedEvent& e : world.events) EXPECT_NE(e.reason, "Launcher");
}

}  // namespace
}  // namespace fleet::op::testing
