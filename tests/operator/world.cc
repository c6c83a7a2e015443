#include "world.h"

#include <algorithm>
#include <sstream>
#include <string_view>
#include <unordered_set>

#include <gtest/gtest.h>

#include "fleet/base/time.h"

namespace fleet::op::testing {

World::World(Json job_object, OperatorSettings operator_settings, HostPortBlock host_ports)
    : job(std::move(job_object)), settings(std::move(operator_settings)) {
  observed.host_ports = std::move(host_ports);
}

ReconcilePlan PlanFor(const Json& job, const Observed& observed, Time now, const OperatorSettings& settings) {
  return PlanReconcile(ReadFleetJob(job), FleetJobStatus::FromJson(job.value("status", Json::object())), observed, now,
                       settings);
}

const ReconcilePlan& World::Reconcile() {
  // The pods as the controller reads them, and the wiring the last plan left, as it keeps it.
  observed.pods = PodList();
  for (const Json& pod : pods) observed.pods.push_back(pod);
  plan = PlanFor(job, observed, now, settings);
  observed.wired = plan.wired;
  job["status"] = plan.status.ToJson();
  events.insert(events.end(), plan.events.begin(), plan.events.end());
  return plan;
}

Json* World::FindPod(const std::string& name) {
  for (Json& pod : pods) {
    if (pod["metadata"]["name"] == name) return &pod;
  }
  return nullptr;
}

void World::Apply() {
  // The pods' names, once per plan: a 10,000-pod plan would otherwise search the pods per create.
  std::unordered_set<std::string> pod_names;
  for (const Json& pod : pods) pod_names.insert(pod["metadata"]["name"].get<std::string>());
  for (const Action& a : plan.actions) {
    switch (a.kind) {
      case ObjectKind::kPod:
        if (a.verb == Verb::kCreate) {
          if (!pod_names.insert(a.name).second) {
            ++already_exists;
            break;
          }
          Json pod = a.Object();
          pod["metadata"]["creationTimestamp"] = FormatRfc3339(now);
          pod["metadata"]["uid"] = "pod-uid-" + std::to_string(resource_version_++);
          pod["status"] = {{"phase", "Pending"}};
          pods.push_back(std::move(pod));
        } else if (a.verb == Verb::kDelete) {
          if (Json* pod = FindPod(a.name); pod && !pod->at("metadata").contains("deletionTimestamp")) {
            (*pod)["metadata"]["deletionTimestamp"] = FormatRfc3339(now);
          }
        } else if (a.verb == Verb::kPatch) {
          if (Json* pod = FindPod(a.name)) pod->merge_patch(a.object);
        } else {
          ADD_FAILURE() << "the planner updates pod " << a.name << "; pods are immutable";
        }
        break;
      case ObjectKind::kConfigMap: {
        std::optional<Json>& cm = a.name == EndpointsConfigMapName(job["metadata"]["name"].get<std::string>())
                                      ? observed.endpoints
                                      : observed.env_loader;
        if (a.verb == Verb::kCreate) {
          if (cm) {
            ++already_exists;
            break;
          }
          cm = a.object;
          (*cm)["metadata"]["resourceVersion"] = std::to_string(resource_version_++);
        } else if (a.verb == Verb::kUpdate) {
          if (!cm) {
            ADD_FAILURE() << "update of a ConfigMap that does not exist: " << a.name;
            break;
          }
          EXPECT_EQ(a.object["metadata"].value("resourceVersion", ""), (*cm)["metadata"].value("resourceVersion", "?"))
              << "a ConfigMap update without the current resourceVersion is a conflict";
          cm = a.object;
          (*cm)["metadata"]["resourceVersion"] = std::to_string(resource_version_++);
        } else {
          cm.reset();
        }
        break;
      }
      case ObjectKind::kService:
        if (a.verb == Verb::kDelete) observed.service.reset();
        else observed.service = a.object;
        break;
      case ObjectKind::kPodGroup:
        if (job["spec"].value("scheduling", Json::object()).value("gang", "") == "Kubernetes") {
          ApplyToNames(a, observed.gang_pod_groups);   // one per run
          break;
        }
        if (a.verb == Verb::kDelete) observed.pod_group.reset();
        else if (!observed.pod_group) observed.pod_group = a.object;
        else ++already_exists;
        break;
      case ObjectKind::kServiceAccount:
      case ObjectKind::kRole:
      case ObjectKind::kRoleBinding: {
        std::optional<Json>& slot = a.kind == ObjectKind::kServiceAccount ? observed.service_account
                                    : a.kind == ObjectKind::kRole         ? observed.role
                                                                          : observed.role_binding;
        if (a.verb == Verb::kDelete) slot.reset();
        else if (a.verb == Verb::kUpdate || !slot) slot = a.object;
        else ++already_exists;
        break;
      }
      case ObjectKind::kFleetJob:
        if (a.verb == Verb::kDelete) job_deleted = true;
        break;
      case ObjectKind::kGangWorkload:
        if (a.verb == Verb::kDelete) observed.gang_workload.reset();
        else if (!observed.gang_workload) observed.gang_workload = a.object;
        else ++already_exists;
        break;
      case ObjectKind::kKueueWorkload:
        ApplyToWorkload(a);
        break;
    }
  }
}

void World::ApplyToNames(const Action& a, std::vector<std::string>& names) {
  auto it = std::find(names.begin(), names.end(), a.name);
  if (a.verb == Verb::kDelete) {
    if (it != names.end()) names.erase(it);
  } else if (it == names.end()) {
    names.push_back(a.name);
  } else {
    ++already_exists;
  }
}

// As the API server: a create of an existing Workload answers AlreadyExists; an update must carry
// the current resourceVersion (a spec change bumps the generation); a status write is the edit
// applied to the Workload as it is; a delete of a Workload with finalizers marks it deleted.
void World::ApplyToWorkload(const Action& a) {
  std::optional<Json>& workload = observed.kueue.workload;
  if (a.verb != Verb::kCreate && !workload) {
    ADD_FAILURE() << "a write of Workload " << a.name << ", which does not exist";
    return;
  }
  switch (a.verb) {
    case Verb::kCreate:
      if (workload) {
        ++already_exists;
        return;
      }
      workload = a.object;
      (*workload)["metadata"]["uid"] = "workload-uid-" + std::to_string(resource_version_);
      (*workload)["metadata"]["generation"] = 1;
      break;
    case Verb::kUpdate: {
      EXPECT_EQ(a.object["metadata"].value("resourceVersion", ""), (*workload)["metadata"].value("resourceVersion", "?"))
          << "a Workload update without the current resourceVersion is a conflict";
      const bool new_spec = a.object["spec"] != (*workload)["spec"];
      const int64_t generation = (*workload)["metadata"].value("generation", int64_t{1});
      workload = a.object;
      (*workload)["metadata"]["generation"] = generation + (new_spec ? 1 : 0);
      break;
    }
    case Verb::kUpdateStatus:
      workload = kueue::ApplyStatusEdit(*workload, a.object);
      ++workload_status_writes;
      break;
    case Verb::kPatch:
      ADD_FAILURE() << "the planner patches Workload " << a.name << "; it updates it";
      return;
    case Verb::kDelete:
      if (!(*workload)["metadata"].value("finalizers", Json::array()).empty()) {
        (*workload)["metadata"]["deletionTimestamp"] = FormatRfc3339(now);
      } else {
        workload.reset();
        return;
      }
      break;
  }
  (*workload)["metadata"]["resourceVersion"] = std::to_string(resource_version_++);
}

const ReconcilePlan& World::Settle(int max_steps) {
  for (int i = 0; i < max_steps; ++i) {
    Reap();
    StartPods();
    Step();
    if (plan.actions.empty()) return plan;
  }
  ADD_FAILURE() << "the job did not settle in " << max_steps << " steps; last plan:\n" << Describe(plan);
  return plan;
}

void World::Reap() {
  pods.erase(std::remove_if(pods.begin(), pods.end(),
                            [](const Json& pod) { return pod["metadata"].contains("deletionTimestamp"); }),
             pods.end());
}

void World::StartPods() {
  for (Json& pod : pods) {
    if (pod["metadata"].contains("deletionTimestamp") || pod["status"].value("phase", "") != "Pending") continue;
    const std::string node = nodes[static_cast<size_t>(next_node_++) % nodes.size()];
    const bool host_network = pod["spec"].value("hostNetwork", false);
    const int n = next_ip_++;   // 10.0.0.1, ... 10.0.0.255, 10.0.1.0, ...
    const std::string ip = host_network ? node
                                        : "10." + std::to_string(n >> 16 & 255) + "." + std::to_string(n >> 8 & 255) +
                                              "." + std::to_string(n & 255);
    pod = PodBuilder(pod).HostIp(node).Ip(ip).Phase("Running").Ready().Obj();
  }
}

void World::EditSpec(const std::string& pointer, const Json& value) {
  job[Json::json_pointer(pointer)] = value;
  job["metadata"]["generation"] = job["metadata"].value("generation", 1) + 1;
}

void World::Edit(const std::string& name, const std::function<void(PodBuilder&)>& change) {
  Json* pod = FindPod(name);
  if (!pod) {
    ADD_FAILURE() << "no pod " << name;
    return;
  }
  PodBuilder builder(*pod);
  change(builder);
  *pod = builder.Obj();
}

void World::Remove(const std::string& name) {
  pods.erase(std::remove_if(pods.begin(), pods.end(), [&](const Json& pod) { return pod["metadata"]["name"] == name; }),
             pods.end());
}

bool World::HasPod(const std::string& name) const {
  return std::any_of(pods.begin(), pods.end(),
                     [&](const Json& pod) { return pod["metadata"]["name"] == name; });
}

const Json& World::Pod(const std::string& name) const {
  for (const Json& pod : pods) {
    if (pod["metadata"]["name"] == name) return pod;
  }
  static const Json null_pod;
  ADD_FAILURE() << "no pod " << name;
  return null_pod;
}

std::vector<std::string> World::PodNames() const {
  std::vector<std::string> names;
  for (const Json& pod : pods) names.push_back(pod["metadata"]["name"].get<std::string>());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> World::LivePodNames() const {
  std::vector<std::string> names;
  for (const Json& pod : pods) {
    if (!pod["metadata"].contains("deletionTimestamp")) names.push_back(pod["metadata"]["name"].get<std::string>());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// ---- plans ----

std::vector<std::string> ActionNames(const ReconcilePlan& plan, Verb verb, ObjectKind kind) {
  std::vector<std::string> names;
  for (const Action& a : plan.actions) {
    if (a.verb == verb && a.kind == kind) names.push_back(a.name);
  }
  std::sort(names.begin(), names.end());
  return names;
}

const Action* FindAction(const ReconcilePlan& plan, Verb verb, ObjectKind kind, const std::string& name) {
  for (const Action& a : plan.actions) {
    if (a.verb == verb && a.kind == kind && a.name == name) return &a;
  }
  return nullptr;
}

Json Condition(const Json& status, const std::string& type) {
  for (const Json& c : status.value("conditions", Json::array())) {
    if (c.value("type", "") == type) return c;
  }
  return nullptr;
}

std::string Describe(const ReconcilePlan& plan) {
  static const char* kVerbs[] = {"create", "update", "delete", "update-status"};
  static const char* kKinds[] = {"Pod",  "ConfigMap",   "Service",  "PodGroup", "ServiceAccount",
                                 "Role", "RoleBinding", "FleetJob", "Workload (gang)", "Workload (Kueue)"};
  std::ostringstream out;
  for (const Action& a : plan.actions) {
    out << kVerbs[static_cast<int>(a.verb)] << " " << kKinds[static_cast<int>(a.kind)] << " " << a.name << " ("
        << a.reason << ") " << a.Object().dump() << "\n";
  }
  for (const PlannedEvent& e : plan.events) out << "event " << e.type << " " << e.reason << ": " << e.message << "\n";
  out << "status " << plan.status.ToJson().dump() << "\n";
  out << "requeue " << (plan.requeue_after ? std::to_string(plan.requeue_after->count()) + "s" : "none") << "\n";
  return out.str();
}

// ---- the kubelet's view of a pod ----

std::string ExpandVars(const std::string& value, const EnvMap& defined) {
  std::string out;
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] == '$' && i + 1 < value.size() && value[i + 1] == '$') {
      out += '$';
      ++i;
      continue;
    }
    if (value[i] == '$' && i + 1 < value.size() && value[i + 1] == '(') {
      const size_t end = value.find(')', i + 2);
      if (end != std::string::npos) {
        const std::string name = value.substr(i + 2, end - i - 2);
        auto it = defined.find(name);
        if (it != defined.end()) {
          out += it->second;
          i = end;
          continue;
        }
      }
    }
    out += value[i];
  }
  return out;
}

namespace {

Result<std::string> FieldRef(const Json& pod, const std::string& path) {
  const Json status = pod.value("status", Json::object());
  const Json meta = pod.value("metadata", Json::object());
  if (path == "status.podIP") return status.value("podIP", "");
  if (path == "status.hostIP") return status.value("hostIP", "");
  if (path == "metadata.name") return meta.value("name", "");
  if (path == "metadata.namespace") return meta.value("namespace", "");
  // metadata.labels['KEY'], as the kubelet reads it ("" for a label the pod does not have).
  constexpr std::string_view kLabels = "metadata.labels['";
  if (path.rfind(kLabels, 0) == 0 && path.size() > kLabels.size() + 2 && path.compare(path.size() - 2, 2, "']") == 0) {
    const std::string key = path.substr(kLabels.size(), path.size() - kLabels.size() - 2);
    return meta.value("labels", Json::object()).value(key, "");
  }
  return Error{"unsupported fieldRef " + path};
}

}  // namespace

Result<EnvMap> ResolveEnv(const Json& pod, const std::optional<Json>& config_map, size_t container) {
  const Json& containers = pod.at("spec").at("containers");
  if (!containers.is_array() || containers.size() <= container) return Error{"no container " + std::to_string(container)};
  EnvMap env;
  for (const Json& e : containers[container].value("env", Json::array())) {
    const std::string name = e.at("name").get<std::string>();
    if (e.contains("value")) {
      env[name] = ExpandVars(e["value"].get<std::string>(), env);
      continue;
    }
    const Json& from = e.at("valueFrom");
    if (from.contains("fieldRef")) {
      auto v = FieldRef(pod, from["fieldRef"]["fieldPath"].get<std::string>());
      if (!v) return Error{name + ": " + v.error()};
      env[name] = *v;
    } else if (from.contains("configMapKeyRef")) {
      const Json& ref = from["configMapKeyRef"];
      const std::string cm = ref["name"].get<std::string>();
      const std::string key = ref["key"].get<std::string>();
      if (!config_map || (*config_map)["metadata"]["name"] != cm) return Error{name + ": configmap \"" + cm + "\" not found"};
      const Json& data = (*config_map).value("data", Json::object());
      if (!data.contains(key)) return Error{name + ": couldn't find key " + key + " in ConfigMap " + cm};
      env[name] = data[key].get<std::string>();
    } else {
      return Error{name + ": unsupported valueFrom " + from.dump()};
    }
  }
  return env;
}

Json ContainerNamed(const Json& pod, const std::string& name) {
  for (const char* list : {"initContainers", "containers"}) {
    for (const Json& c : pod.at("spec").value(list, Json::array())) {
      if (c.value("name", "") == name) return c;
    }
  }
  return nullptr;
}

Json EnvEntry(const Json& container, const std::string& name) {
  for (const Json& e : container.value("env", Json::array())) {
    if (e.value("name", "") == name) return e;
  }
  return nullptr;
}

const std::vector<std::string> kAllPods = {"wd-server-0", "wd-worker-0", "wd-worker-1", "wd-worker-2", "wd-worker-3"};

World RunningWorld(Json job, OperatorSettings settings) {
  World world(std::move(job), std::move(settings));
  world.Settle();
  EXPECT_EQ(world.Status().value("phase", ""), "Running") << Describe(world.plan);
  return world;
}

}  // namespace fleet::op::testing
