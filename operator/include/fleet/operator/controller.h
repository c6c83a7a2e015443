// Controller: the FleetJob reconcile loop around the pure planner.
//
//   informers (FleetJobs; the jobs' pods, ConfigMaps, Services, ServiceAccounts, Roles,
//   RoleBindings, selected by the job-name label) -> work queue of job keys -> workers:
//   read the job and its children from the caches -> PlanReconcile -> write the status (optimistic
//   concurrency: the plan is committed only if the job has not changed since it was read) ->
//   carry out the actions (pod creates and deletes in parallel, on a pool of writer threads shared
//   by all jobs) -> record events -> requeue.
//   A child's event queues its job after a pause of twice the job's last reconcile (caches,
//   planning and status write; at most 200 ms), so that the events of a burst (a big job's pods
//   coming up) share a plan and a status write.
//
// Caches lag behind the API server. Two guards keep a lagging cache from repeating work:
//  - after a status write, the job is not planned again until the cache has seen that write
//    (a plan from the older status would, e.g., count the same restart twice);
//  - pods this controller created or deleted are not created or deleted again until the cache
//    shows the change (expectations, as in Kubernetes' own controllers), or 30 s have passed.
#pragma once

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "fleet/kube/client.h"
#include "fleet/kube/events.h"
#include "fleet/kube/informer.h"
#include "fleet/kube/workqueue.h"
#include "fleet/operator/planner.h"
#include "fleet/operator/port_allocator.h"
#include "fleet/operator/progress_collector.h"
#include "fleet/operator/task_pool.h"

namespace prometheus {
class Registry;
}

namespace fleet::op {

struct ControllerOptions {
  std::string ns;                     // "" = every namespace
  int workers = 4;                    // jobs reconciled at once
  int create_concurrency = 64;        // pod writes in flight, all jobs together
  OperatorSettings settings;
  // Training progress (status.progress) is collected every settings.progress_interval.
  ProgressCollectorOptions progress;
  int host_port_first = 20000;        // HostNetwork jobs' port blocks come from this range
  int host_port_last = 29999;
  std::chrono::seconds resync{600};   // every job is reconciled at least this often
  std::chrono::seconds expectation_timeout{30};
};

class ControllerMetrics;

// The pod informer's shaping: pods are read only through their ObservedPod (built by the
// informer's handler), so its cache keeps what that reads (ObservedPod::Trim), the spec dropped
// before a pod is unpacked.
void KeepWhatTheOperatorReadsOfPods(kube::InformerOptions& options);

class Controller {
 public:
  // `registry` may be null (no metrics).
  Controller(std::shared_ptr<kube::Client> client, ControllerOptions options,
             std::shared_ptr<prometheus::Registry> registry = nullptr);
  ~Controller();
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // Starts the informers (any replica may: a standby keeps warm caches).
  void StartInformers();
  bool HasSynced() const;
  bool WaitForSync(std::chrono::milliseconds timeout) const;
  // Reconciles until Stop(): re-reserves the HostNetwork port blocks recorded in jobs' statuses,
  // queues every job, runs the workers. Call after the caches have synced (and, with leader
  // election, once leading).
  void Run();
  void Stop();   // stops the workers (after their current job) and the informers

  // One reconcile of "namespace/name", as a worker does it. Exposed for tests and benchmarks.
  kube::ProcessResult Reconcile(const std::string& key);

  size_t QueueDepth() const { return queue_.Len(); }
  // For the fleet_operator_leader gauge: whether this replica leads.
  void SetLeader(bool leader);

 private:
  struct Written {
    std::string read_version;     // the job's resourceVersion the last status write was based on
    std::string written_version;  // the resourceVersion it made
    std::chrono::steady_clock::time_point at;
  };
  // A write of a child, expected until a plan made from caches that show its effect (seen_at: the
  // observation epoch of the first event about the child after the write).
  struct Expectation {
    std::chrono::steady_clock::time_point deadline;
    uint64_t seen_at = 0;   // 0 = not seen yet
  };
  // What reconciles keep about a job; forgotten when the job is deleted.
  struct Reconciled {
    // A constructor of its own rather than member initializers: clang cannot use a nested class's
    // default member initializers until the enclosing class is complete, and JobRecord's
    // std::optional<Reconciled> asks whether it is default-constructible before then.
    Reconciled() : took(std::chrono::steady_clock::duration::zero()) {}
    std::optional<Written> written;                   // the last status write, until the cache shows it
    std::map<std::string, Expectation> expectations;  // "Kind/name/verb" -> a write of a child
    std::string phase;                                // for metrics; "" until its actions are done
    // How long its last reconcile took until its status was written: its children's events are
    // batched for a multiple of it.
    std::chrono::steady_clock::duration took;
    std::shared_ptr<const WiredJob> wired;            // its last plan's wiring, for the next plan to reuse
  };
  // One job, by key. A record that holds nothing is removed: an absent one reads as empty.
  struct JobRecord {
    std::optional<Reconciled> reconciled;   // under mu_
    // Pod name -> the pod as the planner reads it, kept up to date by the pod informer's handlers
    // (a reconcile reads them without unpacking the cached pods). Under pods_mu_. The pods outlive
    // a deleted job's `reconciled`: they go when the pod informer says so.
    std::map<std::string, std::shared_ptr<const ObservedPod>> pods;
  };
  void Enqueue(const Json& object);         // a FleetJob
  // Under mu_: what reconciles keep about the job, or null; the same, added if there is none.
  Reconciled* FindReconciledLocked(const std::string& key);
  Reconciled& ReconciledLocked(const std::string& key);
  // How long a child's event (or the echo of a status write) waits for the job's next events.
  static std::chrono::steady_clock::duration ChildBatch(const Reconciled* job);
  // A child changed: update the job's pods, clear expectations for it, queue its job (by label).
  void ObserveChild(ObjectKind kind, const Json& child, bool deleted);
  void StorePod(const std::string& key, const std::string& name, std::shared_ptr<const ObservedPod> pod);  // null: deleted
  static std::string ExpectationKey(ObjectKind kind, const std::string& name);   // "Kind/name"
  static std::string ExpectationKey(const Action& action);                      // "Kind/name/verb"
  // The job's children from the caches, and the observation epoch they reflect.
  Observed ObserveChildren(const std::string& ns, const std::string& job_name, uint64_t* epoch) const;
  std::optional<Json> GetPodGroup(const FleetJob& job, const std::string& name);
  void ObserveKubernetesGang(const FleetJob& job, Observed& observed);
  // Kueue (kueue.h): the job's Workload, the flavors its admission names, its priority, its preemptor.
  void ObserveKueue(const FleetJobObject& object, const std::string& uid, Observed& observed);
  // A cluster-scoped object by name, cached for a minute (ResourceFlavors, priority classes);
  // nullopt when not found (or never read).
  std::optional<Json> LookUp(const kube::Resource& resource, const std::string& name);
  void ReleaseOrphanedWorkloads(const std::string& ns, const std::string& job_name, const std::string& uid);
  kube::ApiStatus EditStatus(const kube::Resource& resource, const std::string& ns, const std::string& name,
                             const Json& edit);
  // HostNetwork: the job's block of host ports, or why it has none (said in its status).
  HostPortBlock AllocateHostPorts(const std::string& key, const FleetJob& job, const FleetJobStatus& status);
  bool CacheIsBehind(const std::string& key, const Json& job);
  kube::ApiStatus WriteStatus(const std::string& key, const Json& job, const FleetJobStatus& status);
  // Carries out the plan's actions; returns the first failure (the others still run).
  kube::ApiStatus Execute(const std::string& key, const FleetJobObject& job, const ReconcilePlan& plan, uint64_t epoch);
  // The pod writes, on writers_ (none once stopped: Cancelled); returns the first failure, and in
  // `rejected` why the API server refused a pod as invalid, if it did.
  kube::ApiStatus WritePods(const std::string& key, const FleetJobObject& job, const std::vector<const Action*>& pods,
                            std::string* rejected);
  kube::ApiStatus Write(const std::string& key, const FleetJobObject& job, const Action& action);  // with expectations
  kube::ApiStatus ExecuteOne(const FleetJobObject& job, const Action& action);
  // Whether `action` was done already and a plan from the caches as of `epoch` could not know.
  bool Expected(const std::string& key, const Action& action, uint64_t epoch);
  void Expect(const std::string& key, const Action& action, bool expect);
  void ReserveRecordedPortBlocks();
  void Forget(const std::string& key);
  // The trainer pods of running jobs whose sidecars report training progress.
  std::vector<ProgressJob> ProgressTargets() const;

  std::shared_ptr<kube::Client> client_;
  ControllerOptions options_;
  std::unique_ptr<ControllerMetrics> metrics_;
  kube::WorkQueue queue_;
  kube::EventRecorder recorder_;
  HostPortAllocator ports_;
  std::unique_ptr<kube::Informer> jobs_;
  std::map<ObjectKind, std::unique_ptr<kube::Informer>> children_;
  // Two locks, so that the pod informer's handler (every pod event of a 10,000-pod job) and the
  // plans that read a job's pods do not wait for the status bookkeeping, nor it for them. A
  // record's `reconciled` is guarded by mu_, its `pods` by pods_mu_; records are added and removed
  // with both held (mu_ first), so either one alone may look a record up.
  mutable std::mutex mu_;
  mutable std::mutex pods_mu_;
  std::map<std::string, JobRecord> records_;   // job key -> what the controller keeps about the job
  uint64_t epoch_ = 0;      // child events observed so far (under mu_)
  std::unique_ptr<ProgressCollector> progress_;   // null: progress is not collected
  bool kueue_served_ = false;   // the cluster serves kueue.x-k8s.io/v1beta2 Workloads (discovered at start)
  struct Lookup {
    std::optional<Json> object;
    std::chrono::steady_clock::time_point at;
  };
  std::mutex lookups_mu_;
  std::map<std::string, Lookup> lookups_;   // "<plural>/<name>" -> LookUp's answer
  std::atomic<bool> stopping_{false};
  // Every job's pod writes: at most options_.create_concurrency in flight. Declared last: its
  // threads, which call into the members above, are stopped first.
  TaskPool writers_;
};

// The resource each child kind lives at.
kube::Resource ResourceOf(ObjectKind kind);
// The FleetJob resource.
kube::Resource FleetJobResource();

}  // namespace fleet::op
