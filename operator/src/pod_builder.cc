#include "fleet/operator/pod_builder.h"

#include <algorithm>
#include <optional>

#include "env_loader_source.h"
#include "fleet/api/in_place.h"
#include "fleet/base/json_read.h"

namespace fleet::op {
namespace {

constexpr const char* kSidecarName = "fleet-sidecar";
constexpr const char* kTokenVolume = "fleet-sidecar-token";
constexpr const char* kEndpointsVolume = "fleet-endpoints";
constexpr const char* kEnvLoaderVolume = "fleet-env-loader";
constexpr const char* kLauncherLogVolume = "fleet-launcher-logs";
constexpr const char* kServiceAccountMount = "/var/run/secrets/kubernetes.io/serviceaccount";
constexpr const char* kCheckpointVolume = "fleet-run";
// The grace period beyond the checkpoint's timeout: for the trainer's and the sidecar's SIGTERM.
constexpr int64_t kGraceAfterCheckpoint = 10;
// A trainer of a superseded run, killed by its failed liveness probe: it gets SIGTERM, then SIGKILL
// this long after (the probe's own grace period, not the pod's, which covers a checkpoint).
constexpr int64_t kInPlaceKillGrace = 5;

// Injected containers carry requests and limits: namespaces with a ResourceQuota reject pods
// whose containers have none.
Json SidecarResources(const SidecarSpec& sidecar) {
  if (sidecar.resources.is_object() && !sidecar.resources.empty()) return sidecar.resources;
  return {{"requests", {{"cpu", "10m"}, {"memory", "32Mi"}}}, {"limits", {{"cpu", "200m"}, {"memory", "64Mi"}}}};
}

// The non-root, read-only shape of every container the operator provides.
Json RestrictedSecurityContext() {
  return {{"runAsNonRoot", true}, {"runAsUser", 65532}, {"allowPrivilegeEscalation", false},
          {"readOnlyRootFilesystem", true}, {"capabilities", {{"drop", Json::array({"ALL"})}}},
          // Pod Security "restricted" also requires a seccomp profile of every container.
          {"seccompProfile", {{"type", "RuntimeDefault"}}}};
}

// Pods whose Paddle 2.3+ launcher writes its processes' logs to PADDLE_LOG_DIR (LaunchEnv), an
// emptyDir the sidecar follows: the job's progress with no change to the training code.
bool WritesLauncherLogs(const FleetJob& job, const RoleSpec& role) {
  const Discovery discovery = DiscoveryOf(job.spec, role);
  return role.kind != RoleKind::kServer &&
         (discovery == Discovery::kLaunchMaster || discovery == Discovery::kEtcdLaunch ||
          discovery == Discovery::kPsLaunchLists);
}

std::string LoopbackReportAddress(int port) { return "127.0.0.1:" + std::to_string(port); }

// The job's own sidecar image, else the operator's.
const std::string& SidecarImage(const FleetJob& job, const OperatorSettings& settings) {
  return job.spec.sidecar.image.empty() ? settings.sidecar_image : job.spec.sidecar.image;
}

Json SidecarContainer(const FleetJob& job, const PodSlot& slot, int port, int run, const OperatorSettings& settings,
                      bool own_token) {
  Json c = {
      {"name", kSidecarName},
      {"image", SidecarImage(job, settings)},
      {"args", Json::array({"gate", "--namespace=" + job.ns, "--job=" + job.name, "--pod=" + slot.name,
                            "--role=" + slot.role->name, "--mode=" + std::string(JobModeName(job.spec.mode)),
                            "--run=" + std::to_string(run),
                            "--config-map=" + EndpointsConfigMapName(job.name),
                            "--metrics-port=" + std::to_string(port)})},
      {"env", Json::array({{{"name", "POD_NAME"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.name"}}}}}},
                           {{"name", "POD_IP"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "status.podIP"}}}}}}})},
      {"resources", SidecarResources(job.spec.sidecar)},
      {"securityContext", RestrictedSecurityContext()},
  };
  // The agent: which ranks this pod runs, where the trainer's steps come from, the push API on
  // loopback (the same port number as the pod-IP listener: different addresses; in HostNetwork
  // mode the port is in the job's own block), and stall detection for trainers.
  Json& args = c["args"];
  const SlotRanks ranks = RanksOf(job, slot);
  args.push_back("--rank=" + std::to_string(ranks.first));
  if (ranks.count > 1) args.push_back("--ranks=" + std::to_string(ranks.count));
  args.push_back("--report-udp=" + LoopbackReportAddress(port));
  args.push_back("--report-http=" + LoopbackReportAddress(port));
  const int64_t stall = slot.role->kind == RoleKind::kServer ? 0 : job.spec.sidecar.stall_window_seconds;
  args.push_back("--stall-window=" + std::to_string(stall) + "s");
  for (const std::string& file : job.spec.sidecar.log_files) args.push_back("--log-file=" + file);
  for (const std::string& pattern : job.spec.sidecar.patterns) args.push_back("--pattern=" + pattern);
  if (own_token) {
    c["volumeMounts"].push_back({{"name", kTokenVolume}, {"mountPath", kServiceAccountMount}, {"readOnly", true}});
  }
  if (WritesLauncherLogs(job, *slot.role)) {
    // Paddle's launcher writes each local process's output to workerlog.<local rank> there.
    args.push_back("--log-dir=" + std::string(kLauncherLogDir));
    c["volumeMounts"].push_back({{"name", kLauncherLogVolume}, {"mountPath", kLauncherLogDir}, {"readOnly", true}});
  }
  if (settings.native_sidecar) {
    // A native sidecar (Kubernetes >= 1.29): main containers start once its startup probe passes,
    // and it keeps running beside them (metrics, readiness).
    c["restartPolicy"] = "Always";
    c["ports"] = Json::array({{{"name", "fleet-metrics"}, {"containerPort", port}}});
    c["startupProbe"] = {{"httpGet", {{"path", "/startup"}, {"port", port}}},
                         {"periodSeconds", 1}, {"failureThreshold", 86400}};
    c["readinessProbe"] = {{"httpGet", {{"path", "/readyz"}, {"port", port}}},
                           {"periodSeconds", 5}};
  } else {
    c["args"].push_back("--exit-when-ready");  // a plain init container: gate, then exit 0
  }
  return c;
}

// Runtime fleet: the server pod's first container runs fleet-ps-server from the sidecar image
// (which ships it), reading the same Paddle env as any server. It is a container of its own, not
// the sidecar process: tables need memory the agent's small limits must not cover, an init-mode
// sidecar exits after the gate, and OOM kills, restarts and logs stay the server's own. The sidecar
// gates it like any main container. A template container of that name keeps what it sets
// (resources, args such as --model_dir, mounts); the rest is filled in.
void ProvidePsServerContainer(const std::string& image, Json& spec) {
  Json containers = spec.value("containers", Json::array());
  Json server = Json::object();
  for (auto it = containers.begin(); it != containers.end(); ++it) {
    if (it->value("name", "") == kPsServerContainer) {
      server = *it;
      containers.erase(it);
      break;
    }
  }
  server["name"] = kPsServerContainer;
  if (server.value("image", "").empty()) server["image"] = image;
  if (!server.contains("command")) server["command"] = Json::array({"fleet-ps-server"});
  // Requests so quota'd namespaces admit it; a memory limit (no CPU limit: throttling shows up as
  // RPC latency for every trainer). Tables bigger than this set their own in the template.
  if (!server.contains("resources")) {
    server["resources"] = {{"requests", {{"cpu", "1"}, {"memory", "1Gi"}}}, {"limits", {{"memory", "4Gi"}}}};
  }
  if (!server.contains("securityContext")) server["securityContext"] = RestrictedSecurityContext();
  containers.insert(containers.begin(), server);  // first: it gets the PADDLE_PORT container port
  spec["containers"] = containers;
}

// Only the sidecar needs the API, so only it gets a token: a projected, expiring service-account
// token mounted into its container alone (automounting is switched off for the pod).
Json TokenVolume(const OperatorSettings& settings) {
  Json token = {{"path", "token"}, {"expirationSeconds", 3600}};
  if (!settings.sidecar_service_account_token_audience.empty()) {
    token["audience"] = settings.sidecar_service_account_token_audience;
  }
  return {{"name", kTokenVolume},
          {"projected",
           {{"sources",
             Json::array({{{"serviceAccountToken", token}},
                          {{"configMap", {{"name", "kube-root-ca.crt"}, {"items", Json::array({{{"key", "ca.crt"}, {"path", "ca.crt"}}})}}}},
                          {{"downwardAPI",
                            {{"items", Json::array({{{"path", "namespace"},
                                                     {"fieldRef", {{"fieldPath", "metadata.namespace"}}}}})}}}}})}}}};
}

// The sidecar follows the spec's log files where the trainer writes them: the volume a main
// container mounts at the deepest directory holding a log file is mounted in the sidecar too, at
// the same path and read-only. Without it the sidecar could not see the files at all (it is the
// operator's container: a template cannot add mounts to it).
void MountLogFileVolumes(const std::vector<std::string>& files, const Json& containers, Json& sidecar) {
  Json mounts = sidecar.value("volumeMounts", Json::array());
  auto mounted = [&](const std::string& path) {
    for (const Json& m : mounts) {
      if (m.value("mountPath", "") == path) return true;
    }
    return false;
  };
  for (const std::string& file : files) {
    std::optional<Json> best;
    for (const Json& c : containers) {
      for (const Json& m : c.value("volumeMounts", Json::array())) {
        std::string dir = m.value("mountPath", "");
        while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
        const bool holds = dir == "/" || file.rfind(dir + "/", 0) == 0;
        if (!holds || dir == kEndpointsMountPath) continue;
        if (!best || dir.size() > best->value("mountPath", "").size()) {
          best = m;
          (*best)["mountPath"] = dir;
        }
      }
    }
    if (!best || mounted((*best)["mountPath"])) continue;
    (*best)["readOnly"] = true;
    best->erase("mountPropagation");
    mounts.push_back(*best);
  }
  if (!mounts.empty()) sidecar["volumeMounts"] = mounts;
}

// Lists that travel as files: the env loader, mounted from its ConfigMap, runs first in every
// Python process of the container, from PYTHONPATH. A PYTHONPATH the container sets (any of its
// entries, also from a ConfigMap or Secret) goes on after the loader's directory, renamed so that
// PYTHONPATH can name it: the kubelet expands $(VAR) only for variables defined before.
void AddEnvLoader(Json& container) {
  Json& env = container["env"];
  if (!env.is_array()) env = Json::array();
  bool users = false;
  for (Json& e : env) {
    if (e.value("name", "") == "PYTHONPATH") {
      e["name"] = "FLEET_USER_PYTHONPATH";
      users = true;
    }
  }
  const std::string path = std::string(kEnvLoaderMountPath) + (users ? ":$(FLEET_USER_PYTHONPATH)" : "");
  env.push_back({{"name", "PYTHONPATH"}, {"value", path}});
  container["volumeMounts"].push_back({{"name", kEnvLoaderVolume}, {"mountPath", kEnvLoaderMountPath}, {"readOnly", true}});
}

}  // namespace

Json OwnerReference(const FleetJob& job) {
  return {{"apiVersion", kApiVersion}, {"kind", kKind}, {"name", job.name},
          {"uid", job.uid}, {"controller", true}, {"blockOwnerDeletion", true}};
}

namespace {

// The gang scheduler's and the priority's marks on the pod.
void ApplyScheduling(const Scheduling& scheduling, const std::string& job_name, Json& labels, Json& annotations,
                     Json& spec) {
  switch (scheduling.gang) {
    case GangScheduler::kVolcano:
      spec["schedulerName"] = "volcano";
      annotations["scheduling.k8s.io/group-name"] = PodGroupName(job_name);
      break;
    case GangScheduler::kSchedulerPlugins:
      labels["scheduling.x-k8s.io/pod-group"] = PodGroupName(job_name);
      break;
    case GangScheduler::kKubernetes:   // the pod's field depends on the API version: ApplyKubernetesGang
    case GangScheduler::kNone:
      break;
  }
  if (!scheduling.priority_class_name.empty()) spec["priorityClassName"] = scheduling.priority_class_name;
}

// Kubernetes' own gang: the pod names its run's PodGroup (v1alpha2 on), or the Workload and its
// pod group, with the run as the group's replica key (v1alpha1), so that the pods of an earlier
// run that are still terminating never count towards this run's gang. kube-scheduler holds the
// pods until the gang's minCount of them exist and can be placed together.
void ApplyKubernetesGang(const FleetJob& job, int run, const WorkloadApi& api, Json& spec) {
  if (job.spec.scheduling.gang != GangScheduler::kKubernetes || !api.usable()) return;
  if (api.pod_groups) {
    spec["schedulingGroup"] = {{"podGroupName", GangPodGroupName(job.name, run)}};
  } else {
    spec["workloadRef"] = {{"name", GangWorkloadName(job.name)}, {"podGroup", kGangPodGroupTemplate},
                           {"podGroupReplicaKey", "r" + std::to_string(run)}};
  }
}

// The pod's metadata: the template's, with the job's labels and its owner.
Json PodMetadata(const FleetJob& job, const PodSlot& slot, int run, Json& spec) {
  const RoleSpec& role = *slot.role;
  const Json template_meta = role.template_.value("metadata", Json::object());
  Json labels = template_meta.value("labels", Json::object());
  labels[kJobLabel] = job.name;
  labels[kRoleLabel] = role.name;
  labels[kIndexLabel] = std::to_string(slot.index);
  labels[kRunLabel] = std::to_string(run);
  Json annotations = template_meta.value("annotations", Json::object());
  ApplyScheduling(job.spec.scheduling, job.name, labels, annotations, spec);
  Json meta = {{"name", slot.name}, {"namespace", job.ns}, {"labels", std::move(labels)},
               {"ownerReferences", Json::array({OwnerReference(job)})}};
  if (!annotations.empty()) meta["annotations"] = std::move(annotations);
  return meta;
}

// Service: the pod's stable DNS name. HostNetwork: the node's network, and one pod of the job per
// node where a launcher inside takes the node's address as its identity.
void ApplyNetwork(const FleetJob& job, const PodSlot& slot, Json& spec) {
  if (job.spec.network == Network::kService) {
    spec["hostname"] = slot.name;
    spec["subdomain"] = job.name;
    return;
  }
  if (job.spec.network != Network::kHostNetwork) return;
  spec["hostNetwork"] = true;
  spec["dnsPolicy"] = "ClusterFirstWithHostNet";
  if (DiscoveryOf(job.spec, *slot.role) == Discovery::kProcessEnv) return;
  Json affinity = spec.value("affinity", Json::object());
  Json anti = affinity.value("podAntiAffinity", Json::object());
  Json required = anti.value("requiredDuringSchedulingIgnoredDuringExecution", Json::array());
  required.push_back({{"labelSelector", {{"matchLabels", {{kJobLabel, job.name}}}}},
                      {"topologyKey", "kubernetes.io/hostname"}});
  anti["requiredDuringSchedulingIgnoredDuringExecution"] = required;
  affinity["podAntiAffinity"] = anti;
  spec["affinity"] = affinity;
}

// The wiring env of the slot, with this run's and where to push step reports (the stdlib helper
// in sdk/python reads FLEET_METRICS_ENDPOINT), and the lists that travel as files.
// What besides the wiring a pod's main containers are told (the features the job asks for).
struct MainEnv {
  std::string env_files;                     // JobWiring::EnvFiles: lists that travel as files
  bool in_place = false;                     // RestartsInPlace: the sidecar's gate
  bool checkpoint = false;                   // CheckpointsBeforeStop: where the sidecar asks
  std::optional<int64_t> resume_step;        // the job's last checkpoint before stop
};

Json PodEnvOf(const FleetJob& job, const PodSlot& slot, const JobWiring& wiring, int run, const MainEnv& main) {
  Json env = wiring.PodEnv(slot, EndpointsConfigMapName(job.name));
  for (const auto& [name, value] : RunEnv(job, *slot.role, run)) env.push_back({{"name", name}, {"value", value}});
  // The attempt, from the pod's run label: logs and metrics of each attempt are told apart, and a
  // container restarted in place (its pod relabelled) gets the new one.
  env.push_back({{"name", kRunEnv},
                 {"valueFrom", {{"fieldRef", {{"fieldPath", std::string("metadata.labels['") + kRunLabel + "']"}}}}}});
  const std::string sidecar = LoopbackReportAddress(wiring.SidecarPort(slot));
  env.push_back({{"name", "FLEET_METRICS_ENDPOINT"}, {"value", "udp://" + sidecar}});
  if (!main.env_files.empty()) {
    env.push_back({{"name", "FLEET_ENV_FILES"}, {"value", main.env_files}});
    env.push_back({{"name", "FLEET_ENV_FILES_DIR"}, {"value", kEndpointsMountPath}});
    env.push_back({{"name", "FLEET_ENV_FILES_RUN"}, {"value", std::to_string(run)}});
  }
  if (main.in_place) env.push_back({{"name", api::kGateUrlEnv}, {"value", "http://" + sidecar + api::kGatePath}});
  if (main.checkpoint) env.push_back({{"name", "FLEET_CHECKPOINT_DIR"}, {"value", kCheckpointDir}});
  if (main.resume_step) env.push_back({{"name", "FLEET_CHECKPOINT_STEP"}, {"value", std::to_string(*main.resume_step)}});
  return env;
}

// Every container of the template gets the env (the user's entries last: they win) and the
// endpoint mounts; the first one the Paddle ports.
void WireContainers(const FleetJob& job, const PodSlot& slot, const JobWiring& wiring, Json env, bool env_loader,
                    Json& containers) {
  const int port = wiring.PodPort(slot);
  for (size_t i = 0; i < containers.size(); ++i) {
    Json& c = containers[i];
    Json merged = i + 1 < containers.size() ? env : std::move(env);   // the last container takes it
    if (auto user = c.find("env"); user != c.end() && user->is_array()) {
      for (Json& e : *user) merged.push_back(std::move(e));
    }
    c["env"] = std::move(merged);
    Json& mounts = c["volumeMounts"];
    if (!mounts.is_array()) mounts = Json::array();
    mounts.push_back({{"name", kEndpointsVolume}, {"mountPath", kEndpointsMountPath}, {"readOnly", true}});
    if (env_loader) AddEnvLoader(c);
    if (WritesLauncherLogs(job, *slot.role)) mounts.push_back({{"name", kLauncherLogVolume}, {"mountPath", kLauncherLogDir}});
    if (i != 0) continue;
    Json ports = c.value("ports", Json::array());
    for (int p = 0; p < job.spec.processes_per_pod; ++p) {
      Json entry = {{"name", "paddle-" + std::to_string(p)}, {"containerPort", port + p}, {"protocol", "TCP"}};
      if (job.spec.network == Network::kHostNetwork) entry["hostPort"] = port + p;
      ports.push_back(entry);
    }
    c["ports"] = std::move(ports);
  }
}

// A failure rule with onLogPattern reads a failed container's log tail from its termination
// message: the kubelet writes it there under FallbackToLogsOnError (the last 80 lines, at most
// 2 KiB) when the container exits non-zero and wrote no termination message file. The role's main
// containers that choose no policy get that one.
void FallBackToLogs(const FleetJob& job, const RoleSpec& role, Json& containers) {
  const auto& rules = job.spec.run_policy.failure_rules;
  const bool reads_logs = std::any_of(rules.begin(), rules.end(), [&](const api::FailureRule& rule) {
    return !rule.log_pattern.empty() &&
           (rule.roles.empty() || std::find(rule.roles.begin(), rule.roles.end(), role.name) != rule.roles.end());
  });
  if (!reads_logs) return;
  for (Json& c : containers) {
    if (!c.contains("terminationMessagePolicy")) c["terminationMessagePolicy"] = "FallbackToLogsOnError";
  }
}

// The template's volumes and the job's: the endpoint lists, the launcher's logs, the env loader.
Json PodVolumes(const FleetJob& job, const RoleSpec& role, const Json& spec, bool env_loader) {
  Json volumes = spec.value("volumes", Json::array());
  volumes.push_back({{"name", kEndpointsVolume},
                     {"configMap", {{"name", EndpointsConfigMapName(job.name)}, {"optional", true}}}});
  if (WritesLauncherLogs(job, role)) volumes.push_back({{"name", kLauncherLogVolume}, {"emptyDir", Json::object()}});
  if (env_loader) {
    // Not optional: the kubelet starts no container before the loader is there.
    volumes.push_back({{"name", kEnvLoaderVolume}, {"configMap", {{"name", EnvLoaderConfigMapName(job.name)}}}});
  }
  return volumes;
}

// spec.checkpoint.beforeStop: the sidecar asks the trainer through files in a volume they share;
// each main container's preStop hook (unless it has its own) asks the sidecar, and the kubelet
// waits for it within the grace period, raised to cover the wait.
void ApplyCheckpointBeforeStop(const FleetJob& job, int sidecar_port, Json& spec, Json& sidecar) {
  const CheckpointSpec& checkpoint = job.spec.checkpoint;
  const Json mount = {{"name", kCheckpointVolume}, {"mountPath", kCheckpointMountPath}};
  spec["volumes"].push_back({{"name", kCheckpointVolume}, {"emptyDir", Json::object()}});
  sidecar["args"].push_back("--checkpoint-dir=" + std::string(kCheckpointDir));
  sidecar["args"].push_back("--checkpoint-timeout=" + std::to_string(checkpoint.timeout_seconds) + "s");
  sidecar["volumeMounts"].push_back(mount);
  Json& containers = spec["containers"];
  for (Json& c : containers) {
    c["volumeMounts"].push_back(mount);
    Json& lifecycle = c["lifecycle"];
    if (!lifecycle.is_object()) lifecycle = Json::object();
    if (lifecycle.contains("preStop")) continue;   // the template's own hook: kept, not replaced
    lifecycle["preStop"] = {{"httpGet", {{"path", "/checkpoint?reason=preStop"}, {"port", sidecar_port}}}};
  }
  const int64_t grace = checkpoint.timeout_seconds + kGraceAfterCheckpoint;
  // Kubernetes' default grace period is 30 s.
  if (MemberAs(spec, "terminationGracePeriodSeconds", AsInt64).value_or(30) < grace) {
    spec["terminationGracePeriodSeconds"] = grace;
  }
}

// runPolicy.restartStrategy InPlace: the kubelet restarts a failed trainer container in place; the
// sidecar's liveness answer kills one of a superseded run (the kubelet then restarts it too), and
// the hook the env loader's module runs holds each new instance at the sidecar's gate
// (docs/design/fast-failures.md §5). A container's own liveness probe is kept: such a trainer is
// not killed for a new run, and the restart falls back to recreating the pods.
void ApplyInPlaceRestart(int sidecar_port, Json& spec, Json& sidecar) {
  spec["restartPolicy"] = "OnFailure";
  sidecar["args"].push_back("--in-place");
  for (Json& c : spec["containers"]) {
    if (c.contains("livenessProbe")) continue;
    // A 503 comes at once; a slow answer (a busy node) is no reason to kill a trainer, hence the
    // long timeout (a timeout counts as a failure).
    c["livenessProbe"] = {{"httpGet", {{"path", api::kTrainerLivePath}, {"port", sidecar_port}}},
                          {"periodSeconds", 1}, {"timeoutSeconds", 5}, {"failureThreshold", 2},
                          {"terminationGracePeriodSeconds", kInPlaceKillGrace}};
  }
}

}  // namespace

bool CheckpointsBeforeStop(const FleetJob& job, const OperatorSettings& settings) {
  return job.spec.checkpoint.before_stop && settings.native_sidecar;
}

bool RestartsInPlace(const FleetJob& job, const OperatorSettings& settings) {
  return job.spec.run_policy.restart_strategy == api::RestartStrategy::kInPlace && settings.native_sidecar;
}

Json BuildPod(const FleetJob& job, const PodSlot& slot, const JobWiring& wiring, int run,
              const OperatorSettings& settings, std::optional<int64_t> resume_step) {
  const RoleSpec& role = *slot.role;
  Json spec = role.template_.value("spec", Json::object());
  Json pod = {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", PodMetadata(job, slot, run, spec)}};
  ApplyKubernetesGang(job, run, settings.workload_api, spec);
  spec["restartPolicy"] = "Never";  // the operator restarts, per the role's restartPolicy (InPlace: below)
  ApplyNetwork(job, slot, spec);
  // The sidecar sees the trainer's processes (is the main process alive?).
  spec["shareProcessNamespace"] = true;
  if (job.spec.runtime == Runtime::kFleet && role.kind == RoleKind::kServer) ProvidePsServerContainer(SidecarImage(job, settings), spec);

  const MainEnv main{wiring.EnvFiles(slot), RestartsInPlace(job, settings), CheckpointsBeforeStop(job, settings),
                     resume_step};
  // The env loader's module also holds the gate of trainers restarted in place.
  const bool env_loader = !main.env_files.empty() || main.in_place;
  WireContainers(job, slot, wiring, PodEnvOf(job, slot, wiring, run, main), env_loader, spec["containers"]);
  FallBackToLogs(job, role, spec["containers"]);
  Json volumes = PodVolumes(job, role, spec, env_loader);
  // Least privilege: unless the template brings its own service account, the pod runs as the
  // job's sidecar account without an automounted token, and only the sidecar container gets one.
  const bool own_token = !spec.contains("serviceAccountName");
  if (own_token) {
    spec["serviceAccountName"] = SidecarServiceAccountName(job.name);
    spec["automountServiceAccountToken"] = false;
    volumes.push_back(TokenVolume(settings));
  }
  spec["volumes"] = std::move(volumes);
  Json init = spec.value("initContainers", Json::array());
  Json sidecar = SidecarContainer(job, slot, wiring.SidecarPort(slot), run, settings, own_token);
  MountLogFileVolumes(job.spec.sidecar.log_files, spec["containers"], sidecar);
  if (main.checkpoint) ApplyCheckpointBeforeStop(job, wiring.SidecarPort(slot), spec, sidecar);
  if (main.in_place) ApplyInPlaceRestart(wiring.SidecarPort(slot), spec, sidecar);
  init.insert(init.begin(), std::move(sidecar));
  spec["initContainers"] = std::move(init);
  pod["spec"] = std::move(spec);
  return pod;
}

bool NeedsSidecarAccount(const FleetJob& job) {
  for (const RoleSpec& role : job.spec.roles) {
    if (!role.template_.value("spec", Json::object()).contains("serviceAccountName")) return true;
  }
  return false;
}

namespace {
Json ChildMeta(const FleetJob& job, const std::string& name) {
  return {{"name", name}, {"namespace", job.ns}, {"labels", {{kJobLabel, job.name}}},
          {"ownerReferences", Json::array({OwnerReference(job)})}};
}
}  // namespace

Json BuildSidecarServiceAccount(const FleetJob& job) {
  return {{"apiVersion", "v1"}, {"kind", "ServiceAccount"}, {"metadata", ChildMeta(job, SidecarServiceAccountName(job.name))},
          {"automountServiceAccountToken", false}};
}

Json BuildSidecarRole(const FleetJob& job) {
  // resourceNames also limits list and watch, when they select the object by metadata.name (as
  // the sidecar does). Its own pod: read it, and set its training-progress condition.
  Json pods = Json::array();
  for (const PodSlot& slot : PodSlots(job)) pods.push_back(slot.name);
  Json meta = ChildMeta(job, SidecarServiceAccountName(job.name));
  meta["annotations"] = {{kReplicasAnnotation, ReplicaSignature(job.spec)}};
  return {{"apiVersion", "rbac.authorization.k8s.io/v1"}, {"kind", "Role"},
          {"metadata", std::move(meta)},
          {"rules", Json::array({{{"apiGroups", Json::array({""})}, {"resources", Json::array({"configmaps"})},
                                  {"resourceNames", Json::array({EndpointsConfigMapName(job.name)})},
                                  {"verbs", Json::array({"get", "list", "watch"})}},
                                 {{"apiGroups", Json::array({""})}, {"resources", Json::array({"pods"})},
                                  {"resourceNames", pods}, {"verbs", Json::array({"get"})}},
                                 {{"apiGroups", Json::array({""})}, {"resources", Json::array({"pods/status"})},
                                  {"resourceNames", pods}, {"verbs", Json::array({"patch"})}}})}};
}

Json BuildSidecarRoleBinding(const FleetJob& job) {
  const std::string name = SidecarServiceAccountName(job.name);
  return {{"apiVersion", "rbac.authorization.k8s.io/v1"}, {"kind", "RoleBinding"}, {"metadata", ChildMeta(job, name)},
          {"roleRef", {{"apiGroup", "rbac.authorization.k8s.io"}, {"kind", "Role"}, {"name", name}}},
          {"subjects", Json::array({{{"kind", "ServiceAccount"}, {"name", name}, {"namespace", job.ns}}})}};
}

Json BuildEnvLoaderConfigMap(const FleetJob& job) {
  return {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"metadata", ChildMeta(job, EnvLoaderConfigMapName(job.name))},
          {"data", {{kEnvLoaderKey, kEnvLoaderSource}}}};
}

Json BuildService(const FleetJob& job) {
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata", ChildMeta(job, HeadlessServiceName(job.name))},
          {"spec", {{"clusterIP", "None"},
                    {"publishNotReadyAddresses", true},  // peers must resolve before they are Ready
                    {"selector", {{kJobLabel, job.name}}}}}};
}

int GangMinimum(const FleetJobSpec& spec) {
  const RoleSpec* workers = spec.Find(RoleKind::kWorker);
  // An elastic job runs from its minimum of workers on.
  return spec.elastic && workers ? spec.TotalPods() - workers->replicas + spec.elastic->min_replicas : spec.TotalPods();
}

Json BuildPodGroup(const FleetJob& job) {
  const bool volcano = job.spec.scheduling.gang == GangScheduler::kVolcano;
  Json spec = {{"minMember", GangMinimum(job.spec)}};
  if (volcano && !job.spec.scheduling.queue.empty()) spec["queue"] = job.spec.scheduling.queue;
  if (!job.spec.scheduling.priority_class_name.empty()) spec["priorityClassName"] = job.spec.scheduling.priority_class_name;
  if (const auto& topology = job.spec.scheduling.network_topology; volcano && topology) {
    spec["networkTopology"] = {{"mode", topology->mode}};
    if (topology->highest_tier_allowed) spec["networkTopology"]["highestTierAllowed"] = *topology->highest_tier_allowed;
  }
  return {{"apiVersion", volcano ? "scheduling.volcano.sh/v1beta1" : "scheduling.x-k8s.io/v1alpha1"},
          {"kind", "PodGroup"},
          {"metadata", ChildMeta(job, PodGroupName(job.name))},
          {"spec", spec}};
}

namespace {
Json GangPolicy(const FleetJob& job) { return {{"gang", {{"minCount", GangMinimum(job.spec)}}}}; }
}  // namespace

Json BuildGangWorkload(const FleetJob& job, const WorkloadApi& api) {
  Json spec = {{"controllerRef", {{"apiGroup", kGroup}, {"kind", kKind}, {"name", job.name}}}};
  if (api.pod_groups) {
    spec["podGroupTemplates"] = Json::array({{{"name", kGangPodGroupTemplate}, {"schedulingPolicy", GangPolicy(job)}}});
  } else {
    spec["podGroups"] = Json::array({{{"name", kGangPodGroupTemplate}, {"policy", GangPolicy(job)}}});
  }
  return {{"apiVersion", api.ApiVersion()},
          {"kind", "Workload"},
          {"metadata", ChildMeta(job, GangWorkloadName(job.name))},
          {"spec", std::move(spec)}};
}

Json BuildGangPodGroup(const FleetJob& job, int run, const WorkloadApi& api) {
  return {{"apiVersion", api.ApiVersion()},
          {"kind", "PodGroup"},
          {"metadata", ChildMeta(job, GangPodGroupName(job.name, run))},
          {"spec", {{"podGroupTemplateRef", {{"workload", {{"workloadName", GangWorkloadName(job.name)},
                                                           {"podGroupTemplateName", kGangPodGroupTemplate}}}}},
                    {"schedulingPolicy", GangPolicy(job)}}}};
}

int64_t GangWorkloadMinCount(const Json& workload) {
  const Json& spec = ObjectMember(workload, "spec");
  for (const auto& [groups, policy] : {std::pair{"podGroupTemplates", "schedulingPolicy"}, std::pair{"podGroups", "policy"}}) {
    for (const Json& group : ArrayMember(spec, groups)) {
      if (StringMember(group, "name") != kGangPodGroupTemplate) continue;
      const std::optional<int64_t> count = AsInt64(MemberOrNull(ObjectMember(ObjectMember(group, policy), "gang"), "minCount"));
      return count.value_or(0);
    }
  }
  return 0;
}

}  // namespace fleet::op
