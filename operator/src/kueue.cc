#include "fleet/operator/kueue.h"

#include <openssl/evp.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <set>

#include "fleet/base/hash.h"
#include "fleet/base/json_read.h"
#include "fleet/base/strings.h"
#include "fleet/base/time.h"
#include "fleet/operator/pod_builder.h"
#include "fleet/operator/wiring.h"

namespace fleet::op::kueue {
namespace {

const std::string& Label(const FleetJob& job, const char* key) {
  static const std::string kNone;
  auto it = job.labels.find(key);
  return it == job.labels.end() ? kNone : it->second;
}

const std::string& MetaString(const Json& object, const char* key) {
  return StringMember(ObjectMember(object, "metadata"), key);
}

std::string Sha1Hex(const std::string& text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(text.data(), text.size(), digest, &size, EVP_sha1(), nullptr);
  std::string hex;
  char byte[3];
  for (unsigned int i = 0; i < size; ++i) {
    std::snprintf(byte, sizeof byte, "%02x", digest[i]);
    hex += byte;
  }
  return hex;
}

// The role's pod as the Workload's template: the pod BuildPod makes for the role's first slot,
// less what differs per pod or run (its name, index and run labels, hostname, every container's
// env: Kueue reads none of it, and a big job's lists would make the Workload huge) and the pod's
// own metadata (owner, namespace).
Json PodSetTemplate(Json pod) {
  Json labels = ObjectMember(pod["metadata"], "labels");
  labels.erase(kIndexLabel);
  labels.erase(kRunLabel);
  Json meta = {{"labels", std::move(labels)}};
  if (const Json& annotations = ObjectMember(pod["metadata"], "annotations"); !annotations.empty()) {
    meta["annotations"] = annotations;
  }
  Json spec = std::move(pod["spec"]);
  spec.erase("hostname");
  for (const char* list : {"containers", "initContainers"}) {
    if (!spec.contains(list) || !spec[list].is_array()) continue;
    for (Json& c : spec[list]) c.erase("env");
  }
  return {{"metadata", std::move(meta)}, {"spec", std::move(spec)}};
}

bool IsTrue(const Json* condition) { return condition && StringMember(*condition, "status") == "True"; }

// Merges `add` into `into` (node labels, a pod's nodeSelector), noting where each came from;
// a key wanted with two values is a conflict, said in `conflict`.
void MergeNodeSelector(const Json& add, const std::string& source, PodSetAdmission& p, std::string& conflict) {
  if (!add.is_object()) return;
  for (const auto& [key, value] : add.items()) {
    if (!value.is_string()) continue;
    const std::string& v = value.get_ref<const std::string&>();
    auto [it, inserted] = p.node_selector.emplace(key, v);
    if (!inserted && it->second != v && conflict.empty()) {
      conflict = source + " sets node label " + key + "=" + v + " but " + p.node_selector_source[key] + " sets " +
                 key + "=" + it->second;
    }
    if (inserted) p.node_selector_source[key] = source;
  }
}

void AppendTolerations(const Json& add, Json& tolerations) {
  if (!add.is_array()) return;
  for (const Json& t : add) {
    if (std::find(tolerations.begin(), tolerations.end(), t) == tolerations.end()) tolerations.push_back(t);
  }
}

void MergeStrings(const Json& add, std::map<std::string, std::string>& into) {
  if (!add.is_object()) return;
  for (const auto& [key, value] : add.items()) {
    if (value.is_string()) into[key] = value.get<std::string>();
  }
}

// The pod set of the Workload's spec named `pod_set`, or an empty object.
const Json& PodSetSpec(const Json& workload, const std::string& pod_set) {
  static const Json kNone = Json::object();
  for (const Json& p : ArrayMember(ObjectMember(workload, "spec"), "podSets")) {
    if (StringMember(p, "name") == pod_set) return p;
  }
  return kNone;
}

// The pod set's spec count in the Workload (an assignment without a count admits all of them).
int SpecCount(const Json& workload, const std::string& pod_set) {
  const Json& p = PodSetSpec(workload, pod_set);
  if (p.empty()) return 0;
  return MemberAs(p, "count", AsInt<int>).value_or(1);
}

}  // namespace

std::string QueueName(const FleetJob& job) { return Label(job, kQueueLabel); }

Result<std::optional<int32_t>> MaxExecutionTimeSeconds(const FleetJob& job) {
  const auto it = job.labels.find(kMaxExecTimeLabel);
  if (it == job.labels.end()) return std::optional<int32_t>();
  const std::string field = std::string("metadata.labels[\"") + kMaxExecTimeLabel + "\"]";
  auto seconds = ParseNonNegativeInt(it->second, field);
  if (!seconds.ok() || *seconds == 0) {
    return Error{field + " is " + Quote(it->second) +
                 ": it must be a whole number of seconds over 0 (Kueue's maximumExecutionTimeSeconds)"};
  }
  return std::optional<int32_t>(*seconds);
}

bool DispatchedByMultiKueue(const FleetJob& job) {
  return job.spec.managed_by == kMultiKueueController && !QueueName(job).empty();
}

std::string PrebuiltWorkloadName(const FleetJob& job) {
  if (const std::string& label = Label(job, kPrebuiltWorkloadLabel); !label.empty()) return label;
  auto annotation = job.annotations.find(kPrebuiltWorkloadLabel);
  return annotation == job.annotations.end() ? "" : annotation->second;
}

std::string JobWorkloadName(const FleetJob& job) {
  std::string prebuilt = PrebuiltWorkloadName(job);
  return prebuilt.empty() ? WorkloadName(job.name, job.uid) : prebuilt;
}

std::string WorkloadName(const std::string& job, const std::string& uid) {
  const std::string hash = Sha1Hex(std::string(api::kKind) + "\n" + api::kGroup + "\n" + job + "\n" + uid);
  return "fleetjob-" + job + "-" + hash.substr(0, 5);
}

std::optional<PriorityClassRef> PriorityClassOf(const FleetJob& job) {
  if (const std::string& label = Label(job, kPriorityClassLabel); !label.empty()) {
    return PriorityClassRef{kGroup, "WorkloadPriorityClass", label};
  }
  std::string name = job.spec.scheduling.priority_class_name;
  for (const RoleSpec& role : job.spec.roles) {
    if (!name.empty()) break;
    name = StringMember(ObjectMember(role.template_, "spec"), "priorityClassName");
  }
  if (name.empty()) return std::nullopt;
  return PriorityClassRef{"scheduling.k8s.io", "PriorityClass", name};
}

// ---- building ----

Json WorkloadPodSets(const FleetJob& job, const JobWiring& wiring, const OperatorSettings& settings) {
  Json sets = Json::array();
  for (const RoleSpec& role : job.spec.roles) {
    const auto& slots = wiring.slots();
    auto first = std::find_if(slots.begin(), slots.end(), [&](const PodSlot& s) { return s.role->name == role.name; });
    if (first == slots.end()) continue;
    Json set = {{"name", role.name}, {"count", role.replicas},
                {"template", PodSetTemplate(BuildPod(job, *first, wiring, 0, settings))}};
    if (auto topology = TopologyRequest(role.template_)) set["topologyRequest"] = std::move(*topology);
    // An elastic job runs from its minimum of workers: Kueue may admit fewer (partial admission).
    if (role.kind == RoleKind::kWorker && job.spec.elastic && job.spec.elastic->min_replicas < role.replicas) {
      set["minCount"] = job.spec.elastic->min_replicas;
    }
    sets.push_back(std::move(set));
  }
  return sets;
}

std::optional<Json> TopologyRequest(const Json& pod_template) {
  const Json& annotations = ObjectMember(ObjectMember(pod_template, "metadata"), "annotations");
  const auto value = [&](const char* key) { return MemberAs(annotations, key, AsString); };
  Json request = {{"podIndexLabel", kIndexLabel}};
  if (auto required = value(kRequiredTopologyAnnotation)) {
    request["required"] = *required;
  } else if (auto preferred = value(kPreferredTopologyAnnotation)) {
    request["preferred"] = *preferred;
  } else if (auto unconstrained = value(kUnconstrainedTopologyAnnotation)) {
    // Go's strconv.ParseBool, which Kueue reads it with.
    static const std::set<std::string> kTrue = {"1", "t", "T", "TRUE", "true", "True"};
    request["unconstrained"] = kTrue.count(*unconstrained) > 0;
  }
  auto slice_topology = value(kSliceRequiredTopologyAnnotation);
  const std::string slice_size = value(kSliceSizeAnnotation).value_or("");
  int32_t size = 0;
  const auto parsed = std::from_chars(slice_size.data(), slice_size.data() + slice_size.size(), size);
  if (slice_topology && parsed.ec == std::errc() && parsed.ptr == slice_size.data() + slice_size.size() && size > 0) {
    request["podSetSliceRequiredTopology"] = *slice_topology;
    request["podSetSliceSize"] = size;
  }
  if (auto group = value(kPodSetGroupNameAnnotation); group && (request.contains("required") || request.contains("preferred"))) {
    request["podSetGroupName"] = *group;
  }
  if (request.size() == 1) return std::nullopt;   // the rank label alone: nothing was asked
  return request;
}

std::string PodSetsHash(const Json& pod_sets) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(Fnv1a64(pod_sets.dump())));
  return text;
}

Json BuildWorkload(const FleetJob& job, Json pod_sets, std::optional<int32_t> priority, bool suspended) {
  Json annotations = {{kPodSetsHashAnnotation, PodSetsHash(pod_sets)}};
  for (const auto& [key, value] : job.annotations) {
    if (key.rfind(kProvReqAnnotationPrefix, 0) == 0) annotations[key] = value;
  }
  if (suspended) annotations[kSuspendedAnnotation] = "true";
  Json spec = {{"queueName", QueueName(job)}, {"podSets", std::move(pod_sets)}, {"active", !suspended}};
  if (const auto max_seconds = MaxExecutionTimeSeconds(job); max_seconds.ok() && *max_seconds) {
    spec["maximumExecutionTimeSeconds"] = **max_seconds;
  }
  if (const auto ref = PriorityClassOf(job); ref && priority) {
    spec["priorityClassRef"] = {{"group", ref->group}, {"kind", ref->kind}, {"name", ref->name}};
    spec["priority"] = *priority;
  }
  return {{"apiVersion", kApiVersion},
          {"kind", "Workload"},
          {"metadata", {{"name", WorkloadName(job.name, job.uid)},
                        {"namespace", job.ns},
                        {"labels", {{kJobUidLabel, job.uid}, {kJobLabel, job.name}}},
                        {"annotations", std::move(annotations)},
                        {"finalizers", Json::array({kResourceInUseFinalizer})},
                        {"ownerReferences", Json::array({OwnerReference(job)})}}},
          {"spec", std::move(spec)}};
}

std::optional<Json> UpdatedWorkloadSpec(const Json& workload, const Json& desired) {
  Json updated = workload;
  Json& spec = updated["spec"];
  for (const char* key : {"podSets", "queueName", "priority", "priorityClassRef", "maximumExecutionTimeSeconds"}) {
    if (desired["spec"].contains(key)) spec[key] = desired["spec"][key];
    else spec.erase(key);
  }
  // The pod sets by their hash: Kueue's defaulting (count, minCount, pod fields) never reads as a change.
  const auto hash = [](const Json& object) -> const std::string& {
    return StringMember(ObjectMember(ObjectMember(object, "metadata"), "annotations"), kPodSetsHashAnnotation);
  };
  if (hash(workload) == hash(desired)) spec["podSets"] = workload["spec"]["podSets"];
  updated["metadata"]["annotations"][kPodSetsHashAnnotation] = hash(desired);
  if (updated == workload) return std::nullopt;
  return updated;
}

bool PodCountsChanged(const Json& workload, const FleetJob& job) {
  const Json& sets = ArrayMember(ObjectMember(workload, "spec"), "podSets");
  if (sets.size() != job.spec.roles.size()) return true;
  for (size_t i = 0; i < sets.size(); ++i) {
    const RoleSpec& role = job.spec.roles[i];
    if (StringMember(sets[i], "name") != role.name || MemberAs(sets[i], "count", AsInt<int>) != role.replicas) return true;
  }
  return false;
}

std::optional<Json> AdoptedWorkload(const Json& workload, const FleetJob& job) {
  Json adopted = workload;
  Json& meta = adopted["metadata"];
  Json& owners = meta["ownerReferences"];
  if (!owners.is_array()) owners = Json::array();
  const bool owned = std::any_of(owners.begin(), owners.end(), [&](const Json& o) {
    return StringMember(o, "uid") == job.uid && MemberAs(o, "controller", AsBool).value_or(false);
  });
  if (!owned) owners.push_back(OwnerReference(job));
  // The manager's labels come with MultiKueue's copy (its job-uid is the manager's job's).
  meta["labels"][kJobUidLabel] = job.uid;
  meta["labels"][kJobLabel] = job.name;
  Json& finalizers = meta["finalizers"];
  if (!finalizers.is_array()) finalizers = Json::array();
  if (std::find(finalizers.begin(), finalizers.end(), kResourceInUseFinalizer) == finalizers.end()) {
    finalizers.push_back(kResourceInUseFinalizer);
  }
  if (adopted == workload) return std::nullopt;
  return adopted;
}

namespace {
bool Active(const Json& workload) { return MemberAs(ObjectMember(workload, "spec"), "active", AsBool).value_or(true); }
bool SuspendedByUs(const Json& workload) {
  return ObjectMember(ObjectMember(workload, "metadata"), "annotations").contains(kSuspendedAnnotation);
}
}  // namespace

std::optional<Json> ActiveForSuspend(const Json& workload, bool suspended) {
  Json updated = workload;
  if (suspended && Active(workload)) {
    updated["spec"]["active"] = false;
    updated["metadata"]["annotations"][kSuspendedAnnotation] = "true";
  } else if (!suspended && !Active(workload) && SuspendedByUs(workload)) {
    updated["spec"]["active"] = true;
    updated["metadata"]["annotations"].erase(kSuspendedAnnotation);
  } else {
    return std::nullopt;
  }
  return updated;
}

bool DeactivatedElsewhere(const Json& workload) { return !Active(workload) && !SuspendedByUs(workload); }

// ---- reading ----

const Json* WorkloadCondition(const Json& workload, const std::string& type) {
  for (const Json& c : ArrayMember(ObjectMember(workload, "status"), "conditions")) {
    if (StringMember(c, "type") == type) return &c;
  }
  return nullptr;
}

WorkloadState ReadWorkloadState(const Json& workload) {
  WorkloadState s;
  const Json* reserved = WorkloadCondition(workload, "QuotaReserved");
  s.quota_reserved = IsTrue(reserved);
  if (reserved && !s.quota_reserved) s.pending = StringMember(*reserved, "message");
  s.admitted = IsTrue(WorkloadCondition(workload, "Admitted"));
  if (const Json* evicted = WorkloadCondition(workload, "Evicted"); IsTrue(evicted)) {
    s.evicted = true;
    s.evicted_reason = StringMember(*evicted, "reason");
    s.evicted_message = StringMember(*evicted, "message");
  }
  if (const Json* preempted = WorkloadCondition(workload, "Preempted"); IsTrue(preempted)) {
    s.preempted_message = StringMember(*preempted, "message");
  }
  if (const Json* finished = WorkloadCondition(workload, "Finished"); IsTrue(finished)) {
    s.finished = true;
    s.finished_message = StringMember(*finished, "message");
  }
  const Json& meta = ObjectMember(workload, "metadata");
  s.deleting = meta.contains("deletionTimestamp");
  const Json& finalizers = ArrayMember(meta, "finalizers");
  s.has_finalizer = std::find(finalizers.begin(), finalizers.end(), kResourceInUseFinalizer) != finalizers.end();
  s.cluster_queue = StringMember(ObjectMember(ObjectMember(workload, "status"), "admission"), "clusterQueue");
  s.generation = MemberAs(meta, "generation", AsInt<int64_t>).value_or(0);
  return s;
}

std::string PreemptorJobUid(const std::string& message) {
  static const std::string kKey = "JobUID: ";
  const size_t at = message.find(kKey);
  if (at == std::string::npos) return "";
  const size_t from = at + kKey.size();
  const size_t end = message.find_first_of(",) ", from);
  return message.substr(from, end == std::string::npos ? std::string::npos : end - from);
}

std::vector<std::string> AdmittedFlavors(const Json& workload) {
  std::set<std::string> names;
  const Json& admission = ObjectMember(ObjectMember(workload, "status"), "admission");
  for (const Json& a : ArrayMember(admission, "podSetAssignments")) {
    for (const auto& [resource, flavor] : ObjectMember(a, "flavors").items()) {
      if (flavor.is_string()) names.insert(flavor.get<std::string>());
    }
  }
  return {names.begin(), names.end()};
}

std::optional<int> AdmittedCount(const Json& workload, const std::string& pod_set) {
  const WorkloadState state = ReadWorkloadState(workload);
  if (!state.admitted || state.evicted) return std::nullopt;
  const Json& admission = ObjectMember(ObjectMember(workload, "status"), "admission");
  for (const Json& a : ArrayMember(admission, "podSetAssignments")) {
    if (StringMember(a, "name") != pod_set) continue;
    return MemberAs(a, "count", AsInt<int>).value_or(SpecCount(workload, pod_set));
  }
  return std::nullopt;
}

Admission ReadAdmission(const Json& workload, const std::map<std::string, Json>& flavors) {
  Admission out;
  out.workload = MetaString(workload, "name");
  const Json& status = ObjectMember(workload, "status");
  const Json& admission = ObjectMember(status, "admission");
  out.cluster_queue = StringMember(admission, "clusterQueue");
  for (const Json& a : ArrayMember(admission, "podSetAssignments")) {
    PodSetAdmission p;
    p.name = StringMember(a, "name");
    p.count = MemberAs(a, "count", AsInt<int>).value_or(SpecCount(workload, p.name));
    MergeStrings(ObjectMember(a, "flavors"), p.flavors);
    std::set<std::string> seen;
    for (const auto& [resource, name] : p.flavors) {
      if (!seen.insert(name).second) continue;
      auto flavor = flavors.find(name);
      if (flavor == flavors.end()) {
        if (std::find(out.missing_flavors.begin(), out.missing_flavors.end(), name) == out.missing_flavors.end()) {
          out.missing_flavors.push_back(name);
        }
        continue;
      }
      const Json& spec = ObjectMember(flavor->second, "spec");
      MergeNodeSelector(ObjectMember(spec, "nodeLabels"), "ResourceFlavor " + name, p, out.conflict);
      AppendTolerations(ArrayMember(spec, "tolerations"), p.tolerations);
    }
    for (const Json& check : ArrayMember(status, "admissionChecks")) {
      for (const Json& update : ArrayMember(check, "podSetUpdates")) {
        if (StringMember(update, "name") != p.name) continue;
        MergeNodeSelector(ObjectMember(update, "nodeSelector"), "admission check " + StringMember(check, "name"), p,
                          out.conflict);
        AppendTolerations(ArrayMember(update, "tolerations"), p.tolerations);
        MergeStrings(ObjectMember(update, "labels"), p.labels);
        MergeStrings(ObjectMember(update, "annotations"), p.annotations);
      }
    }
    if (a.contains("topologyAssignment")) {
      p.topology_gated = true;
      // Implicit TAS (the flavor names a Topology, the pod set asked none): Kueue's FromAssignment
      // marks the pods unconstrained, which its ungater needs to find them.
      const Json& request = ObjectMember(PodSetSpec(workload, p.name), "topologyRequest");
      if (!request.contains("required") && !request.contains("preferred") && !request.contains("unconstrained")) {
        p.annotations[kUnconstrainedTopologyAnnotation] = "true";
      }
    }
    p.labels[kPodSetLabel] = p.name;
    // Kueue's AssignQueueLabelsForPods (Beta, on by default).
    p.labels[kLocalQueueLabel] = StringMember(ObjectMember(workload, "spec"), "queueName");
    p.labels[kClusterQueueLabel] = out.cluster_queue;
    p.annotations[kWorkloadAnnotation] = out.workload;
    out.pod_sets[p.name] = std::move(p);
  }
  return out;
}

Status ApplyAdmission(const Admission& admission, const std::string& pod_set, Json& pod) {
  auto found = admission.pod_sets.find(pod_set);
  if (found == admission.pod_sets.end()) return OkStatus();
  const PodSetAdmission& p = found->second;
  Json& spec = pod["spec"];
  Json& selector = spec["nodeSelector"];
  if (!selector.is_object()) selector = Json::object();
  for (const auto& [key, value] : p.node_selector) {
    const std::string& own = StringMember(selector, key.c_str());
    if (selector.contains(key) && own != value) {
      return Error{"the " + pod_set + " template's nodeSelector has " + key + "=" + own + ", but Kueue admitted the " +
                   pod_set + " pods where " + p.node_selector_source.at(key) + " sets " + key + "=" + value +
                   ": remove the template's " + key + ", or queue the job where the flavors fit it"};
    }
    selector[key] = value;
  }
  if (selector.empty()) spec.erase("nodeSelector");
  if (!p.tolerations.empty()) {
    Json& tolerations = spec["tolerations"];
    if (!tolerations.is_array()) tolerations = Json::array();
    AppendTolerations(p.tolerations, tolerations);
  }
  if (p.topology_gated) {
    Json& gates = spec["schedulingGates"];
    if (!gates.is_array()) gates = Json::array();
    const Json gate = {{"name", kTopologyGate}};
    if (std::find(gates.begin(), gates.end(), gate) == gates.end()) gates.push_back(gate);
  }
  Json& meta = pod["metadata"];
  for (const auto& [key, value] : p.labels) meta["labels"][key] = value;
  for (const auto& [key, value] : p.annotations) meta["annotations"][key] = value;
  return OkStatus();
}

// ---- editing ----

Json WorkloadConditionJson(const std::string& type, bool status, const std::string& reason, const std::string& message,
                           Time now, int64_t generation) {
  return {{"type", type}, {"status", status ? "True" : "False"}, {"reason", reason}, {"message", BoundMessage(message)},
          {"lastTransitionTime", FormatRfc3339(WholeSeconds(now))}, {"observedGeneration", generation}};
}

Json StatusEdit(std::vector<Json> conditions, bool remove_admission, const std::map<std::string, std::string>& required) {
  Json edit = {{"conditions", std::move(conditions)}, {"removeAdmission", remove_admission}};
  if (!required.empty()) edit["requires"] = required;
  return edit;
}

Json ApplyStatusEdit(Json workload, const Json& edit) {
  for (const auto& [type, value] : ObjectMember(edit, "requires").items()) {
    const Json* have = WorkloadCondition(workload, type);
    if (!value.is_string() || StringMember(have ? *have : Json::object(), "status") != value.get<std::string>()) return workload;
  }
  Json& status = workload["status"];
  if (!status.is_object()) status = Json::object();
  Json& conditions = status["conditions"];
  if (!conditions.is_array()) conditions = Json::array();
  for (const Json& want : ArrayMember(edit, "conditions")) {
    auto have = std::find_if(conditions.begin(), conditions.end(),
                             [&](const Json& c) { return StringMember(c, "type") == StringMember(want, "type"); });
    if (have == conditions.end()) {
      conditions.push_back(want);
      continue;
    }
    Json merged = want;
    if (StringMember(*have, "status") == StringMember(want, "status") && have->contains("lastTransitionTime")) {
      merged["lastTransitionTime"] = (*have)["lastTransitionTime"];
    }
    *have = std::move(merged);
  }
  if (MemberAs(edit, "removeAdmission", AsBool).value_or(false)) status.erase("admission");
  return workload;
}

Json QuotaReleaseEdit(const WorkloadState& state, Time now) {
  const std::string reason = state.evicted_reason.empty() ? "Evicted" : state.evicted_reason;
  // Kueue requeues a preempted workload, or one whose nodes failed, at once; others wait (backoff).
  const bool requeued = reason == "Preempted" || reason == "NodeFailures";
  return StatusEdit({WorkloadConditionJson("Requeued", requeued, reason, state.evicted_message, now, state.generation),
                     WorkloadConditionJson("QuotaReserved", false, "PendingEvaluation", state.evicted_message, now,
                                           state.generation),
                     WorkloadConditionJson("Admitted", false, "NoReservation", "The workload has no reservation", now,
                                           state.generation)},
                    true, {{"Evicted", "True"}, {"QuotaReserved", "True"}});
}

Json WithoutFinalizer(Json workload) {
  Json& finalizers = workload["metadata"]["finalizers"];
  if (!finalizers.is_array()) return workload;
  finalizers.erase(std::remove(finalizers.begin(), finalizers.end(), kResourceInUseFinalizer), finalizers.end());
  return workload;
}

}  // namespace fleet::op::kueue
