#include "fleet/operator/controller.h"

#include <prometheus/registry.h>

#include <algorithm>

#include "fleet/base/escape.h"
#include "fleet/base/json_read.h"
#include "fleet/base/log.h"
#include "fleet/operator/metrics.h"
#include "fleet/operator/pod_builder.h"
#include "fleet/operator/wiring.h"

namespace fleet::op {
namespace {

using kube::ApiStatus;
using kube::Code;
using Clock = std::chrono::steady_clock;

// A child's event waits this many times the job's last reconcile (reading the caches, planning
// and the status write, not the creates) for the events that follow it (a job's pods change in
// bursts: thousands of events while a big job comes up), so that a job is reconciled at most
// about once per (1 + factor) such times: reconciling once per event would keep a core and the
// API server busy with plans that find little new to do, and a status write each. Small jobs
// reconcile in a few milliseconds: their events wait that long.
constexpr int kChildBatchFactor = 2;
constexpr Clock::duration kMaxChildBatch = std::chrono::milliseconds(200);

const std::string& MetaString(const Json& object, const char* key) {
  return StringMember(ObjectMember(object, "metadata"), key);
}
const std::string& JobLabelOf(const Json& object) {
  return StringMember(ObjectMember(ObjectMember(object, "metadata"), "labels"), kJobLabel);
}
std::string KeyOf(const std::string& ns, const std::string& name) { return ns + "/" + name; }
FleetJobStatus StatusOf(const Json& job) {
  const Json* status = Member(job, "status");
  return status ? FleetJobStatus::FromJson(*status) : FleetJobStatus{};
}

const char* KindName(ObjectKind kind) {
  switch (kind) {
    case ObjectKind::kPod: return "Pod";
    case ObjectKind::kConfigMap: return "ConfigMap";
    case ObjectKind::kService: return "Service";
    case ObjectKind::kPodGroup: return "PodGroup";
    case ObjectKind::kServiceAccount: return "ServiceAccount";
    case ObjectKind::kRole: return "Role";
    case ObjectKind::kRoleBinding: return "RoleBinding";
    case ObjectKind::kFleetJob: return "FleetJob";
    case ObjectKind::kGangWorkload: return "Workload";
    case ObjectKind::kKueueWorkload: return "Workload";
  }
  return "?";
}

const char* VerbName(Verb verb) {
  switch (verb) {
    case Verb::kCreate: return "create";
    case Verb::kUpdate: return "update";
    case Verb::kDelete: return "delete";
    case Verb::kUpdateStatus: return "update-status";
    case Verb::kPatch: return "patch";
  }
  return "?";
}

// Kueue's cluster-scoped objects the operator reads (by name, cached: LookUp).
const kube::Resource kResourceFlavors{kueue::kGroup, kueue::kVersion, "resourceflavors", false};
const kube::Resource kWorkloadPriorityClasses{kueue::kGroup, kueue::kVersion, "workloadpriorityclasses", false};
const kube::Resource kPriorityClasses{"scheduling.k8s.io", "v1", "priorityclasses", false};
constexpr auto kLookupTtl = std::chrono::seconds(60);

// Whether the cluster serves Kueue's Workloads (kueue.x-k8s.io/v1beta2): the Workload informer
// runs only then, and queued jobs fail without it.
bool ServesKueueWorkloads(kube::Client& client) {
  const auto resources = ServedResources(client, "/apis/" + std::string(kueue::kApiVersion));
  return resources && resources->count("workloads") > 0;
}

// The gang's PodGroups: Volcano's, scheduler-plugins', or scheduling.k8s.io's in the version the
// cluster serves (gang Kubernetes, which also has the job's Workload).
kube::Resource PodGroupResource(GangScheduler gang, const WorkloadApi& api) {
  switch (gang) {
    case GangScheduler::kVolcano: return {"scheduling.volcano.sh", "v1beta1", "podgroups", true};
    case GangScheduler::kKubernetes: return {"scheduling.k8s.io", api.version, "podgroups", true};
    case GangScheduler::kSchedulerPlugins:
    case GangScheduler::kNone: break;
  }
  return {"scheduling.x-k8s.io", "v1alpha1", "podgroups", true};
}
kube::Resource GangWorkloadResource(const WorkloadApi& api) { return {"scheduling.k8s.io", api.version, "workloads", true}; }

void Log(LogLevel level, const std::string& key, const std::string& message) {
  fleet::Log(level, message, {{"fleetjob", key}});
}

}  // namespace

kube::Resource FleetJobResource() { return {kGroup, kVersion, kFleetJobResource, true}; }

kube::Resource ResourceOf(ObjectKind kind) {
  switch (kind) {
    case ObjectKind::kPod: return kube::Resource::Pods();
    case ObjectKind::kConfigMap: return kube::Resource::ConfigMaps();
    case ObjectKind::kService: return kube::Resource::Services();
    case ObjectKind::kServiceAccount: return {"", "v1", "serviceaccounts", true};
    case ObjectKind::kRole: return {"rbac.authorization.k8s.io", "v1", "roles", true};
    case ObjectKind::kRoleBinding: return {"rbac.authorization.k8s.io", "v1", "rolebindings", true};
    case ObjectKind::kPodGroup: return PodGroupResource(GangScheduler::kVolcano, {});
    // A job's gang objects are written in the version the cluster serves (ExecuteOne).
    case ObjectKind::kGangWorkload: return {"scheduling.k8s.io", "v1alpha2", "workloads", true};
    case ObjectKind::kFleetJob: return FleetJobResource();
    case ObjectKind::kKueueWorkload: return {kueue::kGroup, kueue::kVersion, "workloads", true};
  }
  return FleetJobResource();
}

Controller::Controller(std::shared_ptr<kube::Client> client, ControllerOptions options,
                       std::shared_ptr<prometheus::Registry> registry)
    : client_(std::move(client)),
      options_(std::move(options)),
      metrics_(registry ? std::make_unique<ControllerMetrics>(*registry) : nullptr),
      queue_(kube::WorkQueueOptions{}, metrics_ ? metrics_->QueueHooks() : kube::WorkQueueMetrics{}),
      recorder_(client_),
      ports_(options_.host_port_first, options_.host_port_last),
      writers_(options_.create_concurrency) {
  kube::InformerOptions job_options;
  job_options.ns = options_.ns;
  job_options.resync_period = options_.resync;
  jobs_ = std::make_unique<kube::Informer>(client_, FleetJobResource(), job_options);
  kube::EventHandlers job_handlers;
  job_handlers.on_add = [this](const Json& o) { Enqueue(o); };
  job_handlers.on_modify = [this](const Json& o) { Enqueue(o); };
  job_handlers.on_delete = [this](const Json& o) { Enqueue(o); };
  jobs_->AddHandlers(std::move(job_handlers));
  if (options_.settings.progress_interval.count() > 0) {
    ProgressCollectorOptions progress = options_.progress;
    progress.interval = options_.settings.progress_interval;
    progress_ = std::make_unique<ProgressCollector>(
        progress, [this] { return ProgressTargets(); }, [this](const std::string& key) { queue_.Add(key); },
        metrics_ ? metrics_->ProgressHook() : ProgressCollector::Collected());
  }

  // Children are selected by the job-name label: the informers never see unrelated objects.
  kube::InformerOptions child_options;
  child_options.ns = options_.ns;
  child_options.label_selector = kJobLabel;
  // Kueue's Workloads only where the cluster serves them (discovered once, at start).
  kueue_served_ = ServesKueueWorkloads(*client_);
  std::vector<ObjectKind> kinds = {ObjectKind::kPod,            ObjectKind::kConfigMap, ObjectKind::kService,
                                   ObjectKind::kServiceAccount, ObjectKind::kRole,      ObjectKind::kRoleBinding};
  if (kueue_served_) kinds.push_back(ObjectKind::kKueueWorkload);
  for (ObjectKind kind : kinds) {
    kube::InformerOptions informer_options = child_options;
    if (kind == ObjectKind::kPod) KeepWhatTheOperatorReadsOfPods(informer_options);
    auto informer = std::make_unique<kube::Informer>(client_, ResourceOf(kind), informer_options);
    kube::EventHandlers handlers;
    handlers.on_add = [this, kind](const Json& o) { ObserveChild(kind, o, false); };
    handlers.on_modify = [this, kind](const Json& o) { ObserveChild(kind, o, false); };
    handlers.on_delete = [this, kind](const Json& o) { ObserveChild(kind, o, true); };
    informer->AddHandlers(std::move(handlers));
    children_[kind] = std::move(informer);
  }
}

void KeepWhatTheOperatorReadsOfPods(kube::InformerOptions& options) {
  options.drop_members = {"spec"};   // most of a pod (its env of configMapKeyRefs), dropped packed
  options.transform = [](Json& pod) { pod = ObservedPod::Trim(pod); };
}

Controller::~Controller() { Stop(); }

void Controller::StartInformers() {
  jobs_->Start();
  for (auto& [kind, informer] : children_) informer->Start();
}

bool Controller::HasSynced() const {
  if (!jobs_->HasSynced()) return false;
  for (const auto& [kind, informer] : children_) {
    if (!informer->HasSynced()) return false;
  }
  return true;
}

bool Controller::WaitForSync(std::chrono::milliseconds timeout) const {
  const auto deadline = Clock::now() + timeout;
  if (!jobs_->WaitForSync(timeout)) return false;
  for (const auto& [kind, informer] : children_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (!informer->WaitForSync(std::max(left, std::chrono::milliseconds(0)))) return false;
  }
  return true;
}

void Controller::Run() {
  ReserveRecordedPortBlocks();
  for (const auto& job : jobs_->cache().List()) Enqueue(*job);
  if (progress_) progress_->Start();
  kube::RunWorkers(queue_, options_.workers, [this](const std::string& key) { return Reconcile(key); });
  if (progress_) progress_->Stop();
}

void Controller::Stop() {
  if (stopping_.exchange(true)) return;
  if (progress_) progress_->Stop();
  queue_.ShutDownNow();
  jobs_->Stop();
  for (auto& [kind, informer] : children_) informer->Stop();
  writers_.Stop();   // after the writes already handed over: their reconciles are waiting for them
}

void Controller::SetLeader(bool leader) {
  if (metrics_) metrics_->SetLeader(leader);
}

void Controller::Enqueue(const Json& object) {
  const std::string key = KeyOf(MetaString(object, "namespace"), MetaString(object, "name"));
  Clock::duration batch{};
  {
    // The echo of this controller's own status write: nothing new but what the write said. It
    // waits, as a child's event does, for the job's next events to share a plan (else every
    // status write of a bring-up would be followed at once by another plan and write).
    std::lock_guard<std::mutex> lock(mu_);
    const Reconciled* reconciled = FindReconciledLocked(key);
    if (reconciled && reconciled->written && reconciled->written->written_version == MetaString(object, "resourceVersion")) {
      batch = ChildBatch(reconciled);
    }
  }
  queue_.AddAfter(key, batch);
}

Controller::Reconciled* Controller::FindReconciledLocked(const std::string& key) {
  auto it = records_.find(key);
  return it != records_.end() && it->second.reconciled ? &*it->second.reconciled : nullptr;
}

Controller::Reconciled& Controller::ReconciledLocked(const std::string& key) {
  auto it = records_.find(key);
  if (it == records_.end()) {
    std::lock_guard<std::mutex> pods_lock(pods_mu_);   // adding a record
    it = records_.try_emplace(key).first;
  }
  if (!it->second.reconciled) it->second.reconciled.emplace();
  return *it->second.reconciled;
}

Clock::duration Controller::ChildBatch(const Reconciled* job) {
  return job ? std::min(kChildBatchFactor * job->took, kMaxChildBatch) : Clock::duration{};
}

std::string Controller::ExpectationKey(ObjectKind kind, const std::string& name) {
  return std::string(KindName(kind)) + "/" + name;
}

std::string Controller::ExpectationKey(const Action& action) {
  return ExpectationKey(action.kind, action.name) + "/" + VerbName(action.verb);
}

void Controller::ObserveChild(ObjectKind kind, const Json& child, bool deleted) {
  Clock::duration batch{};   // how long this event waits for others of the job (see kChildBatchFactor)
  const std::string job = JobLabelOf(child);
  if (job.empty()) return;
  const std::string key = KeyOf(MetaString(child, "namespace"), job);
  const std::string name = MetaString(child, "name");
  // The pod first, then the epoch: a plan that reads the epoch before the pods (ObserveChildren)
  // sees every pod event the epoch counts.
  if (kind == ObjectKind::kPod) StorePod(key, name, deleted ? nullptr : std::make_shared<const ObservedPod>(ObservedPod::Read(child)));
  {
    // The caches now show this change (they are updated before handlers run): writes of this
    // child are done as far as plans from now on can tell.
    std::lock_guard<std::mutex> lock(mu_);
    ++epoch_;
    auto record = records_.find(key);
    Reconciled* reconciled = record != records_.end() && record->second.reconciled ? &*record->second.reconciled : nullptr;
    if (reconciled) {
      const std::string prefix = ExpectationKey(kind, name) + "/";
      auto& expectations = reconciled->expectations;
      for (auto e = expectations.lower_bound(prefix); e != expectations.end() && e->first.rfind(prefix, 0) == 0; ++e) {
        if (e->second.seen_at == 0) e->second.seen_at = epoch_;
      }
    } else if (record != records_.end() && deleted && kind == ObjectKind::kPod) {
      std::lock_guard<std::mutex> pods_lock(pods_mu_);   // a deleted job's last pod gone: nothing left
      if (record->second.pods.empty()) records_.erase(record);
    }
    batch = ChildBatch(reconciled);
  }
  queue_.AddAfter(key, batch);
}

void Controller::StorePod(const std::string& key, const std::string& name, std::shared_ptr<const ObservedPod> pod) {
  {
    std::lock_guard<std::mutex> lock(pods_mu_);
    auto record = records_.find(key);
    if (record != records_.end()) {
      if (pod) {
        record->second.pods[name] = std::move(pod);
      } else {
        record->second.pods.erase(name);
      }
      return;
    }
    if (!pod) return;
  }
  std::scoped_lock lock(mu_, pods_mu_);   // adding a record
  records_[key].pods[name] = std::move(pod);
}

Observed Controller::ObserveChildren(const std::string& ns, const std::string& job_name, uint64_t* epoch) const {
  {
    // Read first: an event that lands while the caches are read is newer than the epoch.
    std::lock_guard<std::mutex> lock(mu_);
    *epoch = epoch_;
  }
  Observed observed;
  {
    std::lock_guard<std::mutex> lock(pods_mu_);
    auto record = records_.find(KeyOf(ns, job_name));
    if (record != records_.end()) {
      observed.pods.reserve(record->second.pods.size());
      for (const auto& [name, pod] : record->second.pods) observed.pods.push_back(pod);
    }
  }
  auto find = [&](ObjectKind kind, const std::string& name) -> std::optional<Json> {
    auto object = children_.at(kind)->cache().Get(KeyOf(ns, name));
    if (!object || JobLabelOf(*object) != job_name) return std::nullopt;
    return *object;
  };
  observed.endpoints = find(ObjectKind::kConfigMap, EndpointsConfigMapName(job_name));
  observed.env_loader = find(ObjectKind::kConfigMap, EnvLoaderConfigMapName(job_name));
  observed.service = find(ObjectKind::kService, HeadlessServiceName(job_name));
  const std::string account = SidecarServiceAccountName(job_name);
  observed.service_account = find(ObjectKind::kServiceAccount, account);
  observed.role = find(ObjectKind::kRole, account);
  observed.role_binding = find(ObjectKind::kRoleBinding, account);
  return observed;
}

std::vector<ProgressJob> Controller::ProgressTargets() const {
  std::vector<ProgressJob> targets;
  for (const auto& object : jobs_->cache().List()) {
    if (ManagedElsewhere(*object)) continue;   // its pods (and status) are another cluster's
    const FleetJobStatus status = StatusOf(*object);
    if (status.phase != JobPhase::kRunning) continue;
    auto job = ParseFleetJob(*object);
    if (!job.ok()) continue;
    ProgressJob target;
    target.key = KeyOf(job->ns, job->name);
    target.run = status.run;
    target.total_steps = job->spec.total_steps;
    for (const RoleSpec& role : job->spec.roles) {
      if (role.kind == RoleKind::kServer) continue;
      const int per_pod = job->spec.mode == JobMode::kCollective ? job->spec.processes_per_pod : 1;
      target.expected_ranks[role.name] = role.replicas * per_pod;
    }
    const std::string run = std::to_string(status.run);
    std::lock_guard<std::mutex> lock(pods_mu_);
    auto record = records_.find(target.key);
    if (record == records_.end()) continue;
    const auto& pods = record->second.pods;
    for (const PodSlot& slot : PodSlots(*job)) {
      if (slot.role->kind == RoleKind::kServer) continue;
      auto pod = pods.find(slot.name);
      if (pod == pods.end()) continue;
      const ObservedPod& p = *pod->second;
      if (p.pod_ip.empty() || p.phase != PodPhase::kRunning || p.run != run) continue;
      ProgressJob::Pod target_pod{slot.name, slot.role->name, p.pod_ip, SidecarPort(*job, slot, status.host_port_base.value_or(0))};
      const SlotRanks ranks = RanksOf(*job, slot);
      target_pod.first_rank = ranks.first;
      target_pod.ranks = ranks.count;
      target.pods.push_back(std::move(target_pod));
    }
    if (!target.pods.empty()) targets.push_back(std::move(target));
  }
  return targets;
}

// PodGroups are read on demand (gang-scheduled jobs only; the CRDs may not even be installed).
std::optional<Json> Controller::GetPodGroup(const FleetJob& job, const std::string& name) {
  auto got = client_->Get(PodGroupResource(job.spec.scheduling.gang, options_.settings.workload_api), job.ns, name);
  if (!got.ok()) return std::nullopt;
  return std::move(got).value();
}

// Read, not watched (as PodGroups are): a Kubernetes-gang job's Workload and its PodGroups, once
// per reconcile. Nothing where the cluster does not serve the API (the plan fails the job).
void Controller::ObserveKubernetesGang(const FleetJob& job, Observed& observed) {
  const WorkloadApi& api = options_.settings.workload_api;
  if (!api.usable()) return;
  auto workload = client_->Get(GangWorkloadResource(api), job.ns, GangWorkloadName(job.name));
  if (workload.ok()) observed.gang_workload = std::move(workload).value();
  if (!api.pod_groups) return;
  kube::ListOptions options;
  options.label_selector = std::string(kJobLabel) + "=" + job.name;
  auto pod_groups = client_->List(PodGroupResource(GangScheduler::kKubernetes, api), job.ns, options);
  if (!pod_groups.ok()) return;
  for (const Json& pod_group : ArrayMember(*pod_groups, "items")) {
    if (!Member(ObjectMember(pod_group, "metadata"), "deletionTimestamp")) {
      observed.gang_pod_groups.push_back(MetaString(pod_group, "name"));
    }
  }
}

bool Controller::CacheIsBehind(const std::string& key, const Json& job) {
  std::lock_guard<std::mutex> lock(mu_);
  Reconciled* reconciled = FindReconciledLocked(key);
  if (!reconciled || !reconciled->written) return false;
  std::optional<Written>& written = reconciled->written;
  if (MetaString(job, "resourceVersion") == written->read_version && Clock::now() - written->at < options_.expectation_timeout) {
    return true;
  }
  written.reset();
  return false;
}

namespace {
// Writes of children whose caches show them are expected until they do. Status edits need not be:
// each reads the latest object and writes only what it changes.
bool Tracked(const std::map<ObjectKind, std::unique_ptr<kube::Informer>>& children, const Action& action) {
  return children.count(action.kind) && action.verb != Verb::kUpdateStatus;
}
}  // namespace

bool Controller::Expected(const std::string& key, const Action& action, uint64_t epoch) {
  if (!Tracked(children_, action)) return false;   // PodGroups and the job itself: no cache
  std::lock_guard<std::mutex> lock(mu_);
  Reconciled* reconciled = FindReconciledLocked(key);
  if (!reconciled) return false;
  auto& expectations = reconciled->expectations;
  auto e = expectations.find(ExpectationKey(action));
  if (e == expectations.end()) return false;
  const bool plan_knew = e->second.seen_at != 0 && e->second.seen_at <= epoch;
  if (plan_knew || Clock::now() >= e->second.deadline) {
    expectations.erase(e);
    return false;
  }
  return true;
}

void Controller::Expect(const std::string& key, const Action& action, bool expect) {
  if (!Tracked(children_, action)) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (expect) {
    ReconciledLocked(key).expectations[ExpectationKey(action)] = {Clock::now() + options_.expectation_timeout, 0};
  } else if (Reconciled* reconciled = FindReconciledLocked(key)) {
    reconciled->expectations.erase(ExpectationKey(action));
  }
}

void Controller::Forget(const std::string& key) {
  // Jobs waiting for host ports would otherwise notice the freed block only on their 30 s requeue.
  for (const std::string& waiting : ports_.Release(key)) queue_.Add(waiting);
  std::lock_guard<std::mutex> lock(mu_);
  auto record = records_.find(key);
  if (record == records_.end()) return;
  record->second.reconciled.reset();
  // Its pods stay until their deletions are observed (ObserveChild): a job of the same name
  // created meanwhile must see them, as its plans would through the cache.
  std::lock_guard<std::mutex> pods_lock(pods_mu_);
  if (record->second.pods.empty()) records_.erase(record);
}

void Controller::ReserveRecordedPortBlocks() {
  for (const auto& object : jobs_->cache().List()) {
    if (ManagedElsewhere(*object)) continue;   // its status is another cluster's, mirrored
    const std::optional<int> recorded = StatusOf(*object).host_port_base;
    if (!recorded) continue;
    auto job = ParseFleetJob(*object);
    if (!job || job->spec.network != Network::kHostNetwork) continue;
    const std::string key = KeyOf(job->ns, job->name);
    auto block = ports_.Allocate(key, HostPortRangeSize(*job), recorded);
    if (!block) Log(LogLevel::kWarning, key, "cannot keep its recorded host ports: " + block.error());
  }
}

HostPortBlock Controller::AllocateHostPorts(const std::string& key, const FleetJob& job, const FleetJobStatus& status) {
  HostPortBlock ports;
  const int size = HostPortRangeSize(job);
  auto block = ports_.Allocate(key, size, status.host_port_base);
  if (block) {
    ports.base = *block;
    return ports;
  }
  const int range = options_.host_port_last - options_.host_port_first + 1;
  ports.never = size > range;
  ports.refused = ports.never
      ? "the job needs " + std::to_string(size) + " host ports (HostNetwork: its pods' Paddle and sidecar ports), "
        "more than the operator's whole --host-port-range of " + std::to_string(range) +
        ": use fewer pods or processes per pod, another network mode, or widen the range"
      : block.error();
  return ports;
}

ApiStatus Controller::WriteStatus(const std::string& key, const Json& job, const FleetJobStatus& status) {
  Json updated = job;
  updated["status"] = status.ToJson();
  auto written = client_->UpdateStatus(FleetJobResource(), MetaString(job, "namespace"), updated);
  if (!written.ok()) return written.status();
  // A write the server found to change nothing (e.g. what differed was pruned) keeps the
  // resourceVersion and sends no watch event: waiting for the cache to see it would wait in vain.
  const std::string read_version = MetaString(job, "resourceVersion");
  if (MetaString(*written, "resourceVersion") == read_version) return ApiStatus();
  std::lock_guard<std::mutex> lock(mu_);
  ReconciledLocked(key).written = Written{read_version, MetaString(*written, "resourceVersion"), Clock::now()};
  return ApiStatus();
}

ApiStatus Controller::ExecuteOne(const FleetJobObject& job, const Action& action) {
  // Only a valid job's plan has PodGroups: an invalid one's only deletes pods and the job.
  const WorkloadApi& api = options_.settings.workload_api;
  const kube::Resource resource = action.kind == ObjectKind::kPodGroup && job.job
                                      ? PodGroupResource(job.job->spec.scheduling.gang, api)
                                  : action.kind == ObjectKind::kGangWorkload ? GangWorkloadResource(api)
                                                                             : ResourceOf(action.kind);
  switch (action.verb) {
    case Verb::kCreate: {
      // A pod is rendered here. Nothing reads the object the server answers with.
      ApiStatus created = client_->CreateDiscardingReply(resource, job.ns, action.Object());
      // Deterministic names: AlreadyExists means an earlier attempt (or another replica) made it.
      return created.code() == Code::kAlreadyExists ? ApiStatus() : created;
    }
    case Verb::kUpdate: {
      auto updated = client_->Update(resource, job.ns, action.Object());
      return updated.ok() ? ApiStatus() : updated.status();
    }
    case Verb::kDelete: {
      kube::DeleteOptions options;
      options.propagation_policy = "Background";
      ApiStatus status = client_->Delete(resource, job.ns, action.name, options);
      return status.code() == Code::kNotFound ? ApiStatus() : status;
    }
    case Verb::kUpdateStatus: return EditStatus(resource, job.ns, action.name, action.object);
    case Verb::kPatch: {
      auto patched = client_->MergePatch(resource, job.ns, action.name, action.object);
      // A pod deleted meanwhile: the next plan sees it gone.
      return patched.ok() || patched.status().code() == Code::kNotFound ? ApiStatus() : patched.status();
    }
  }
  return ApiStatus();
}

// A status edit (kueue::StatusEdit) applied to the latest object: GET, edit, PUT with its
// resourceVersion, again on a conflict (Kueue writes the same status).
ApiStatus Controller::EditStatus(const kube::Resource& resource, const std::string& ns, const std::string& name,
                                 const Json& edit) {
  ApiStatus last;
  for (int attempt = 0; attempt < 5; ++attempt) {
    auto latest = client_->Get(resource, ns, name);
    if (!latest.ok()) return latest.status().code() == Code::kNotFound ? ApiStatus() : latest.status();
    const Json edited = kueue::ApplyStatusEdit(*latest, edit);
    if (edited == *latest) return ApiStatus();
    auto written = client_->UpdateStatus(resource, ns, edited);
    if (written.ok()) return ApiStatus();
    last = written.status();
    if (last.code() != Code::kConflict) return last;
  }
  return last;
}

// ---- Kueue: what a queued job's plan needs from the cluster ----

std::optional<Json> Controller::LookUp(const kube::Resource& resource, const std::string& name) {
  const std::string key = resource.plural + "/" + name;
  {
    std::lock_guard<std::mutex> lock(lookups_mu_);
    auto cached = lookups_.find(key);
    if (cached != lookups_.end() && Clock::now() - cached->second.at < kLookupTtl) return cached->second.object;
  }
  auto got = client_->Get(resource, "", name);
  std::lock_guard<std::mutex> lock(lookups_mu_);
  Lookup& entry = lookups_[key];
  if (got.ok()) {
    entry = {std::move(got).value(), Clock::now()};
  } else if (got.status().code() == Code::kNotFound) {
    entry = {std::nullopt, Clock::now()};
  }
  // Any other failure keeps what was read before (a flavor read once stays readable).
  return entry.object;
}

void Controller::ObserveKueue(const FleetJobObject& object, const std::string& uid, Observed& observed) {
  kueue::KueueObserved& k = observed.kueue;
  k.served = kueue_served_;
  if (!k.served) return;
  // Also for a job whose spec turned invalid: its Workload must still finish.
  const std::string workload_name = object.job ? kueue::JobWorkloadName(*object.job) : kueue::WorkloadName(object.name, uid);
  if (auto workload = children_.at(ObjectKind::kKueueWorkload)->cache().Get(KeyOf(object.ns, workload_name))) {
    k.workload = *workload;
  }
  if (!object.job || kueue::QueueName(*object.job).empty()) return;
  const FleetJob& job = *object.job;
  if (const auto ref = kueue::PriorityClassOf(job)) {
    const auto found = LookUp(ref->kind == "PriorityClass" ? kPriorityClasses : kWorkloadPriorityClasses, ref->name);
    if (found) k.priority = MemberAs(*found, "value", AsInt<int32_t>);
  }
  if (!k.workload) return;
  for (const std::string& name : kueue::AdmittedFlavors(*k.workload)) {
    if (auto flavor = LookUp(kResourceFlavors, name)) k.flavors[name] = std::move(*flavor);
  }
  const kueue::WorkloadState state = kueue::ReadWorkloadState(*k.workload);
  // The preemptor is named by the event of the eviction, planned while the quota is still held.
  if (!state.evicted || !state.quota_reserved) return;
  const std::string preemptor = kueue::PreemptorJobUid(state.preempted_message.empty() ? state.evicted_message
                                                                                        : state.preempted_message);
  if (preemptor.empty()) return;
  for (const auto& other : jobs_->cache().List()) {
    if (MetaString(*other, "uid") == preemptor) k.preemptor = KeyOf(MetaString(*other, "namespace"), MetaString(*other, "name"));
  }
}

// Workloads of this job name that no FleetJob owns any more (the job was deleted, or deleted and
// made again): Kueue rescues only Workloads without owners, so the operator removes its finalizer
// (garbage collection then deletes them).
void Controller::ReleaseOrphanedWorkloads(const std::string& ns, const std::string& job_name, const std::string& uid) {
  auto informer = children_.find(ObjectKind::kKueueWorkload);
  if (informer == children_.end()) return;
  for (const auto& workload : informer->second->cache().ByLabel(kJobLabel, job_name)) {
    if (MetaString(*workload, "namespace") != ns) continue;
    if (StringMember(ObjectMember(ObjectMember(*workload, "metadata"), "labels"), kueue::kJobUidLabel) == uid) continue;
    const kueue::WorkloadState state = kueue::ReadWorkloadState(*workload);
    if (!state.has_finalizer) continue;
    auto updated = client_->Update(ResourceOf(ObjectKind::kKueueWorkload), ns, kueue::WithoutFinalizer(*workload));
    if (!updated.ok() && updated.status().code() != Code::kNotFound) {
      Log(LogLevel::kWarning, KeyOf(ns, job_name), "cannot remove the finalizer of Workload " + MetaString(*workload, "name") +
                                                       ": " + updated.status().ToString());
    }
  }
}

// The expectation is in place before the request: the watch may deliver the change before the
// response arrives, and its event must find (and clear) it.
ApiStatus Controller::Write(const std::string& key, const FleetJobObject& job, const Action& action) {
  Expect(key, action, true);
  ApiStatus status = ExecuteOne(job, action);
  if (!status.ok()) Expect(key, action, false);
  return status;
}

ApiStatus Controller::Execute(const std::string& key, const FleetJobObject& job, const ReconcilePlan& plan, uint64_t epoch) {
  // Everything but pods first, in plan order (the PodGroup before any pod, the ConfigMap update
  // of a run before its pods); then the pod writes, in parallel.
  std::vector<const Action*> pods;
  ApiStatus first_error;
  for (const Action& action : plan.actions) {
    if (Expected(key, action, epoch)) continue;   // done already; the plan's caches did not show it
    if (action.kind == ObjectKind::kPod) {
      pods.push_back(&action);
      continue;
    }
    ApiStatus status = Write(key, job, action);
    if (!status.ok()) {
      Log(LogLevel::kError, key, std::string("cannot ") + VerbName(action.verb) + " " + KindName(action.kind) + " " +
                                     action.name + ": " + status.ToString());
      if (first_error.ok()) first_error = status;
    }
  }
  if (pods.empty()) return first_error;

  std::string rejected;   // a pod the API server refused as invalid: the template is wrong
  const ApiStatus pod_error = WritePods(key, job, pods, &rejected);
  if (!rejected.empty()) {
    // Retrying cannot help: the job fails, saying what to fix; the next reconcile removes the
    // pods that were made (cleanPodPolicy).
    auto latest = client_->Get(FleetJobResource(), job.ns, job.name);
    if (latest.ok()) {
      const std::string message = rejected + " (fix the pod template in the FleetJob spec)";
      FleetJobStatus failed = StatusOf(*latest);
      failed.MarkFailed("PodRejected", message, std::chrono::system_clock::now());
      ApiStatus written = WriteStatus(key, *latest, failed);
      if (written.ok()) {
        recorder_.Record(*latest, "Warning", "PodRejected", message);
        return ApiStatus();
      }
    }
  }
  return first_error.ok() ? pod_error : first_error;
}

ApiStatus Controller::WritePods(const std::string& key, const FleetJobObject& job, const std::vector<const Action*>& pods,
                                std::string* rejected) {
  std::atomic<int> created{0}, deleted{0};   // patched pods are neither
  std::mutex error_mu;
  ApiStatus pod_error;
  const bool sent = writers_.RunEach(pods.size(), [&](size_t i) {
    const Action& action = *pods[i];
    ApiStatus status = Write(key, job, action);
    if (status.ok()) {
      if (action.verb == Verb::kCreate) ++created;
      if (action.verb == Verb::kDelete) ++deleted;
      return;
    }
    std::lock_guard<std::mutex> lock(error_mu);
    if (pod_error.ok()) pod_error = status;
    if (rejected->empty() && action.verb == Verb::kCreate &&
        (status.code() == Code::kInvalid || status.code() == Code::kBadRequest)) {
      *rejected = "the API server refused pod " + action.name + ": " + status.message();
    }
  });
  if (!sent) return ApiStatus(Code::kCancelled, "the operator is stopping: " + std::to_string(pods.size()) + " pod writes not sent");
  if (metrics_) {
    metrics_->PodsCreated(created);
    metrics_->PodsDeleted(deleted);
  }
  return pod_error;
}

kube::ProcessResult Controller::Reconcile(const std::string& key) {
  const auto started = Clock::now();
  auto finish = [&](const char* result, kube::ProcessResult r) {
    if (metrics_) metrics_->Reconciled(result, Clock::now() - started);
    return r;
  };
  const auto job_object = jobs_->cache().Get(key);
  if (!job_object) {   // deleted: its children go by garbage collection (owner references)
    const auto slash = key.find('/');
    ReleaseOrphanedWorkloads(key.substr(0, slash), key.substr(slash + 1), "");
    Forget(key);
    return finish("success", {});
  }
  if (CacheIsBehind(key, *job_object)) return finish("requeue", {true, std::chrono::milliseconds(1000)});
  // The job and its status are read once; the plan, its status write and its actions use these.
  const FleetJobObject job = ReadFleetJob(*job_object);
  const FleetJobStatus status = StatusOf(*job_object);
  // Another controller's job (spec.managedBy): nothing of it is this operator's to write. But for
  // a queued job that MultiKueue dispatches (it runs the job on a worker cluster and mirrors its
  // status here), the operator plays the queue's part: the plan holds only its Workload, and
  // neither the status nor events are written (PlanReconcile, QueueForWorkerCluster).
  const bool dispatched = job.job && kueue::DispatchedByMultiKueue(*job.job);
  if (const auto manager = ManagedElsewhere(*job_object); manager && !dispatched) {
    Forget(key);
    Log(LogLevel::kDebug, key, "managed by " + EscapeControl(*manager) + ": left alone");
    return finish("skipped", {});
  }
  uint64_t epoch = 0;
  Observed observed = ObserveChildren(job.ns, job.name, &epoch);
  if (job.job && !dispatched && job.job->spec.network == Network::kHostNetwork) observed.host_ports = AllocateHostPorts(key, *job.job, status);
  if (job.job && job.job->spec.scheduling.gang == GangScheduler::kKubernetes) {
    ObserveKubernetesGang(*job.job, observed);
  } else if (job.job && job.job->spec.scheduling.gang != GangScheduler::kNone) {
    observed.pod_group = GetPodGroup(*job.job, PodGroupName(job.name));
  }
  ObserveKueue(job, MetaString(*job_object, "uid"), observed);
  if (job.job) {
    // A queued job without its Workload yet may have been made again under the same name: the
    // Workload of the job before it is no longer anyone's.
    if (!kueue::QueueName(*job.job).empty() && !observed.kueue.workload) ReleaseOrphanedWorkloads(job.ns, job.name, job.job->uid);
  }
  if (progress_) observed.progress = progress_->Latest(key, status.run);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (const Reconciled* reconciled = FindReconciledLocked(key)) observed.wired = reconciled->wired;
  }

  const ReconcilePlan plan = PlanReconcile(job, status, observed, std::chrono::system_clock::now(), options_.settings);
  {
    std::lock_guard<std::mutex> lock(mu_);
    ReconciledLocked(key).wired = plan.wired;
  }
  const bool status_changed = !dispatched && plan.status != status;
  if (status_changed) {
    ApiStatus written = WriteStatus(key, *job_object, plan.status);
    if (written.code() == Code::kConflict || written.code() == Code::kNotFound) {
      // The job changed (or went) since the cache read it: plan again from the newer version.
      return finish("requeue", {true, std::chrono::milliseconds(100)});
    }
    if (!written.ok()) {
      Log(LogLevel::kError, key, "cannot write the status: " + written.ToString());
      return finish("error", {false, {}});
    }
    const int restarts = plan.status.restart_count - status.restart_count;
    if (metrics_ && restarts > 0) metrics_->JobRestarted(restarts);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    ReconciledLocked(key).took = Clock::now() - started;
  }
  // Events come with the transitions that cause them, which always change the status: a plan
  // from a cache still behind our own writes repeats a transition's events, but not its status.
  for (const PlannedEvent& e : status_changed ? plan.events : std::vector<PlannedEvent>{}) {
    recorder_.Record(*job_object, e.type, e.reason, e.message);
    Log(e.type == "Warning" ? LogLevel::kWarning : LogLevel::kInfo, key, e.reason + ": " + e.message);
  }
  const ApiStatus executed = Execute(key, job, plan, epoch);
  if (metrics_) {
    std::map<std::string, int> by_phase;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ReconciledLocked(key).phase = PhaseName(plan.status.phase);
      for (const auto& [k, record] : records_) {
        if (record.reconciled && !record.reconciled->phase.empty()) ++by_phase[record.reconciled->phase];
      }
    }
    metrics_->SetJobPhases(by_phase);
  }
  if (!executed.ok()) return finish("error", {false, {}});
  kube::ProcessResult result;
  if (plan.requeue_after) result.requeue_after = std::chrono::duration_cast<std::chrono::milliseconds>(*plan.requeue_after);
  return finish("success", result);
}

}  // namespace fleet::op
