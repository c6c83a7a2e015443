#include "builders.h"

#include <stdexcept>
#include <utility>

#include "fleet/base/time.h"

namespace fleet::op::testing {

Time T0() {
  static const Time t0 = *ParseRfc3339("2024-05-01T12:00:00Z");
  return t0;
}

Time At(int64_t seconds_after_t0) { return T0() + std::chrono::seconds(seconds_after_t0); }

Json PodTemplate(int gpus) {
  Json container = {{"name", "main"},
                    {"image", kImage},
                    {"command", Json::array({"python", "-u", "train.py"})}};
  if (gpus > 0) container["resources"] = {{"limits", {{"nvidia.com/gpu", gpus}}}};
  return {{"metadata", {{"labels", {{"app", "train"}}}}}, {"spec", {{"containers", Json::array({container})}}}};
}

JobBuilder::JobBuilder(std::string name) {
  obj_ = {{"apiVersion", std::string(kGroup) + "/" + kVersion},
          {"kind", kKind},
          {"metadata", {{"name", std::move(name)}, {"namespace", kNamespace}, {"uid", kUid}, {"generation", 1}}},
          {"spec", Json::object()}};
}

JobBuilder& JobBuilder::Label(const std::string& key, const std::string& value) {
  obj_["metadata"]["labels"][key] = value;
  return *this;
}

JobBuilder& JobBuilder::Annotation(const std::string& key, const std::string& value) {
  obj_["metadata"]["annotations"][key] = value;
  return *this;
}

JobBuilder& JobBuilder::Namespace(const std::string& ns) {
  obj_["metadata"]["namespace"] = ns;
  return *this;
}

JobBuilder& JobBuilder::Ps(int servers, int workers) {
  obj_["spec"]["server"] = {{"replicas", servers}, {"template", PodTemplate()}};
  obj_["spec"]["worker"] = {{"replicas", workers}, {"template", PodTemplate()}};
  return *this;
}

JobBuilder& JobBuilder::Collective(int workers, int gpus_per_pod) {
  obj_["spec"]["worker"] = {{"replicas", workers}, {"template", PodTemplate(gpus_per_pod)}};
  return *this;
}

JobBuilder& JobBuilder::Heter(const HeterStage& stage) {
  Json& heter = obj_["spec"]["heter"];
  if (!heter.is_array()) heter = Json::array();
  heter.push_back({{"name", stage.name.empty() ? stage.device : stage.name},
                   {"device", stage.device},
                   {"replicas", stage.replicas},
                   {"template", PodTemplate()}});
  return *this;
}

JobBuilder& JobBuilder::Servers(int replicas) {
  obj_["spec"]["server"]["replicas"] = replicas;
  return *this;
}

JobBuilder& JobBuilder::Workers(int replicas) {
  obj_["spec"]["worker"]["replicas"] = replicas;
  return *this;
}

JobBuilder& JobBuilder::Mode(const std::string& mode) {
  obj_["spec"]["mode"] = mode;
  return *this;
}

JobBuilder& JobBuilder::Network(const std::string& network) {
  obj_["spec"]["network"] = network;
  return *this;
}

JobBuilder& JobBuilder::Gloo(const std::string& gloo) {
  obj_["spec"]["gloo"] = gloo;
  return *this;
}

JobBuilder& JobBuilder::ProcessesPerPod(int n) {
  obj_["spec"]["processesPerPod"] = n;
  return *this;
}

JobBuilder& JobBuilder::Port(int port) {
  obj_["spec"]["port"] = port;
  return *this;
}

JobBuilder& JobBuilder::Elastic(int min, int max, int64_t timeout_seconds) {
  obj_["spec"]["elastic"] = {{"minReplicas", min}, {"maxReplicas", max}, {"etcdEndpoint", kEtcdEndpoint},
                             {"timeoutSeconds", timeout_seconds}};
  return *this;
}

Json& JobBuilder::RoleObject(const std::string& role) {
  if (role == "server" || role == "worker") return obj_["spec"][role];
  for (Json& stage : obj_["spec"]["heter"]) {
    if (stage.value("name", "") == role) return stage;
  }
  throw std::invalid_argument("JobBuilder: no role named " + role);
}

JobBuilder& JobBuilder::RestartPolicy(const std::string& role, const std::string& policy) {
  RoleObject(role)["restartPolicy"] = policy;
  return *this;
}

JobBuilder& JobBuilder::BackoffLimit(int limit) {
  obj_["spec"]["runPolicy"]["backoffLimit"] = limit;
  return *this;
}

JobBuilder& JobBuilder::ActiveDeadlineSeconds(int64_t seconds) {
  obj_["spec"]["runPolicy"]["activeDeadlineSeconds"] = seconds;
  return *this;
}

JobBuilder& JobBuilder::TtlSecondsAfterFinished(int64_t seconds) {
  obj_["spec"]["runPolicy"]["ttlSecondsAfterFinished"] = seconds;
  return *this;
}

JobBuilder& JobBuilder::CleanPodPolicy(const std::string& policy) {
  obj_["spec"]["runPolicy"]["cleanPodPolicy"] = policy;
  return *this;
}

JobBuilder& JobBuilder::PendingTimeoutSeconds(int64_t seconds) {
  obj_["spec"]["runPolicy"]["pendingTimeoutSeconds"] = seconds;
  return *this;
}

JobBuilder& JobBuilder::Suspend(bool suspend) {
  obj_["spec"]["runPolicy"]["suspend"] = suspend;
  return *this;
}

JobBuilder& JobBuilder::Gang(const std::string& scheduler, const std::string& queue) {
  obj_["spec"]["scheduling"]["gang"] = scheduler;
  if (!queue.empty()) obj_["spec"]["scheduling"]["queue"] = queue;
  return *this;
}

JobBuilder& JobBuilder::PriorityClass(const std::string& name) {
  obj_["spec"]["scheduling"]["priorityClassName"] = name;
  return *this;
}

JobBuilder& JobBuilder::SidecarMetricsPort(int port) {
  obj_["spec"]["sidecar"]["metricsPort"] = port;
  return *this;
}

JobBuilder& JobBuilder::Status(const Json& status) {
  obj_["status"] = status;
  return *this;
}

JobBuilder& JobBuilder::Deleting(Time when) {
  obj_["metadata"]["deletionTimestamp"] = FormatRfc3339(when);
  return *this;
}

JobBuilder& JobBuilder::Set(const std::string& pointer, const Json& value) {
  obj_[Json::json_pointer(pointer)] = value;
  return *this;
}

JobBuilder& JobBuilder::Erase(const std::string& pointer) {
  const Json::json_pointer ptr(pointer);
  obj_.at(ptr.parent_pointer()).erase(ptr.back());
  return *this;
}

// ---- pods ----

PodBuilder PodFor(const Json& job, const std::string& role, int index) {
  const std::string job_name = job["metadata"]["name"].get<std::string>();
  Json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", job_name + "-" + role + "-" + std::to_string(index)},
        {"namespace", job["metadata"].value("namespace", "default")},
        {"uid", "pod-" + role + "-" + std::to_string(index)},
        {"labels", {{kJobLabel, job_name}, {kRoleLabel, role}, {kIndexLabel, std::to_string(index)}, {kRunLabel, "0"}}},
        {"creationTimestamp", FormatRfc3339(T0())}}},
      {"spec", {{"containers", Json::array({{{"name", "main"}, {"image", kImage}}})}}},
      {"status", {{"phase", "Pending"}}}};
  return PodBuilder(std::move(pod));
}

PodBuilder& PodBuilder::Run(int run) {
  pod_["metadata"]["labels"][kRunLabel] = std::to_string(run);
  return *this;
}

PodBuilder& PodBuilder::Phase(const std::string& phase) {
  pod_["status"]["phase"] = phase;
  if (phase != "Running") Ready(false);
  return *this;
}

PodBuilder& PodBuilder::Ip(const std::string& ip) {
  pod_["status"]["podIP"] = ip;
  pod_["status"]["podIPs"] = Json::array({{{"ip", ip}}});
  return *this;
}

PodBuilder& PodBuilder::HostIp(const std::string& ip) {
  pod_["status"]["hostIP"] = ip;
  return *this;
}

namespace {

void SetPodCondition(Json& pod, const Json& condition) {
  Json& conditions = pod["status"]["conditions"];
  if (!conditions.is_array()) conditions = Json::array();
  for (Json& c : conditions) {
    if (c["type"] == condition["type"]) {
      c = condition;
      return;
    }
  }
  conditions.push_back(condition);
}

}  // namespace

PodBuilder& PodBuilder::Ready(bool ready) {
  SetPodCondition(pod_, {{"type", "Ready"}, {"status", ready ? "True" : "False"}});
  return *this;
}

PodBuilder& PodBuilder::Progress(bool progressing, const std::string& message) {
  SetPodCondition(pod_, {{"type", kProgressConditionType}, {"status", progressing ? "True" : "False"},
                         {"reason", progressing ? "Progressing" : "Stalled"}, {"message", message}});
  return *this;
}

PodBuilder& PodBuilder::Trainer(api::TrainerState state, int run, std::optional<Time> since) {
  const api::TrainerReport report{state, run};
  Json condition = {{"type", api::kTrainerConditionType}, {"status", state == api::TrainerState::kRunning ? "True" : "False"},
                    {"reason", report.Reason()}, {"message", report.Message("as the sidecar says")}};
  if (since) condition["lastTransitionTime"] = FormatRfc3339(*since);
  SetPodCondition(pod_, condition);
  return *this;
}

PodBuilder& PodBuilder::RestartedAfter(int code) {
  Json& statuses = pod_["status"]["containerStatuses"];
  const int restarts = statuses.is_array() && !statuses.empty() ? statuses[0].value("restartCount", 0) : 0;
  statuses = Json::array(
      {{{"name", "main"},
        {"ready", true},
        {"restartCount", restarts + 1},
        {"state", {{"running", {{"startedAt", FormatRfc3339(T0())}}}}},
        {"lastState", {{"terminated", {{"exitCode", code}, {"reason", code == 0 ? "Completed" : "Error"}}}}}}});
  return *this;
}

PodBuilder& PodBuilder::ExitCode(int code) {
  pod_["status"]["containerStatuses"] = Json::array(
      {{{"name", "main"},
        {"ready", false},
        {"restartCount", 0},
        {"state", {{"terminated", {{"exitCode", code}, {"reason", code == 0 ? "Completed" : "Error"}}}}}}});
  return *this;
}

PodBuilder& PodBuilder::FinishedAt(Time when) {
  for (Json& c : pod_["status"]["containerStatuses"]) c["state"]["terminated"]["finishedAt"] = FormatRfc3339(when);
  return *this;
}

PodBuilder& PodBuilder::Evicted() {
  Phase("Failed");
  pod_["status"]["reason"] = "Evicted";
  pod_["status"]["message"] = "The node was low on resource: memory.";
  return *this;
}

PodBuilder& PodBuilder::Terminating(Time since) {
  pod_["metadata"]["deletionTimestamp"] = FormatRfc3339(since);
  return *this;
}

PodBuilder& PodBuilder::Created(Time when) {
  pod_["metadata"]["creationTimestamp"] = FormatRfc3339(when);
  return *this;
}

PodBuilder& PodBuilder::Unschedulable(const std::string& message) {
  Phase("Pending");
  SetPodCondition(pod_, {{"type", "PodScheduled"}, {"status", "False"}, {"reason", "Unschedulable"},
                         {"message", message}});
  return *this;
}

// ---- the endpoints ConfigMap ----

ConfigMapBuilder::ConfigMapBuilder(const Json& job) {
  const std::string job_name = job["metadata"]["name"].get<std::string>();
  cm_ = {{"apiVersion", "v1"},
         {"kind", "ConfigMap"},
         {"metadata",
          {{"name", EndpointsConfigMapName(job_name)},
           {"namespace", job["metadata"].value("namespace", "default")},
           {"resourceVersion", "1"},
           {"labels", {{kJobLabel, job_name}}},
           {"annotations", {{kRunAnnotation, "0"}, {kHostsAnnotation, ""}}}}},
         {"data", Json::object()}};
}

ConfigMapBuilder& ConfigMapBuilder::Run(int run) {
  cm_["metadata"]["annotations"][kRunAnnotation] = std::to_string(run);
  return *this;
}

ConfigMapBuilder& ConfigMapBuilder::HostsDigest(const std::string& digest) {
  cm_["metadata"]["annotations"][kHostsAnnotation] = digest;
  return *this;
}

ConfigMapBuilder& ConfigMapBuilder::Data(const std::map<std::string, std::string>& data) {
  cm_["data"] = data;
  return *this;
}

ConfigMapBuilder& ConfigMapBuilder::ResourceVersion(const std::string& version) {
  cm_["metadata"]["resourceVersion"] = version;
  return *this;
}

}  // namespace fleet::op::testing
