// A fake in-memory cluster for the planner, so multi-step scenarios read as a story:
//
//   World world(JobBuilder("wd").Ps(1, 4).Obj());
//   world.Step();          // plan against what exists, write the status back, carry the plan out
//   world.StartPods();     // the kubelet: pending pods get an address, run and turn Ready
//   world.Settle();        // step until a plan has nothing left to do
//   world.Edit("wd-worker-1", [](PodBuilder& p) { p.Failed(1); });
//
// Carrying out a plan behaves like the API server: a create of a name that exists (live or
// terminating) answers AlreadyExists and changes nothing; a delete marks the pod terminating (it
// stays, holding its name, until Reap()); a ConfigMap update must carry the current resourceVersion.
// Every pod ever started gets a fresh IP, so a replaced pod always has a new address.
#pragma once

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "builders.h"
#include "fleet/operator/planner.h"
#include "fleet/runtime/env_contract.h"

namespace fleet::op::testing {

class World {
 public:
  // `host_ports`: HostNetwork jobs' block of host ports, as the controller's allocator gave it.
  explicit World(Json job, OperatorSettings settings = {}, HostPortBlock host_ports = {});

  Json job;                  // the FleetJob; each Reconcile() writes the plan's status back
  std::vector<Json> pods;    // the job's pods, whole (as the API server holds them)
  Observed observed;         // the rest; each Reconcile() reads `pods` into observed.pods
  OperatorSettings settings;
  Time now = T0();
  ReconcilePlan plan;        // the latest plan
  std::vector<PlannedEvent> events;   // every event of every plan so far
  bool job_deleted = false;  // a plan deleted the FleetJob (TTL)
  int already_exists = 0;    // creates answered AlreadyExists
  int workload_status_writes = 0;   // Kueue Workload status edits carried out
  std::vector<std::string> nodes = {"192.168.0.1", "192.168.0.2"};  // hostIPs, round robin

  const ReconcilePlan& Reconcile();
  void Apply();
  const ReconcilePlan& Step() {
    Reconcile();
    Apply();
    return plan;
  }
  // Reap, start pods and step, until a plan has no actions (a test failure after `max_steps`).
  const ReconcilePlan& Settle(int max_steps = 12);

  void Reap();               // terminating pods are gone
  void StartPods();          // Pending pods (not terminating) get an address, run, turn Ready
  void Advance(int64_t seconds) { now += std::chrono::seconds(seconds); }

  // Changes the FleetJob's spec (the user edits it): bumps metadata.generation.
  void EditSpec(const std::string& pointer, const Json& value);
  void Edit(const std::string& pod, const std::function<void(PodBuilder&)>& change);
  void Remove(const std::string& pod);   // gone without the operator (kubectl delete --force, node lost)

  bool HasPod(const std::string& name) const;
  const Json& Pod(const std::string& name) const;
  std::vector<std::string> PodNames() const;        // sorted, terminating ones included
  std::vector<std::string> LivePodNames() const;    // sorted, not terminating
  const Json& Status() const { return job["status"]; }

 private:
  Json* FindPod(const std::string& name);
  void ApplyToNames(const Action& a, std::vector<std::string>& names);   // objects observed by name
  void ApplyToWorkload(const Action& action);   // into observed.kueue.workload
  int next_ip_ = 1;
  int next_node_ = 0;
  int resource_version_ = 1;
};

// PlanReconcile, with the job and its status read from the FleetJob object as the controller
// reads them.
ReconcilePlan PlanFor(const Json& job, const Observed& observed, Time now, const OperatorSettings& settings = {});
// HostNetwork: the block of host ports from `base` (what the allocator grants).
inline HostPortBlock HostPortsAt(int base) {
  HostPortBlock block;
  block.base = base;
  return block;
}

// The pods of a one-server, four-worker PS job named wd.
extern const std::vector<std::string> kAllPods;

// A job brought up to phase Running (pods started, lists published) at T0.
World RunningWorld(Json job, OperatorSettings settings = {});

// ---- reading plans and statuses ----

// Sorted names of the plan's actions with this verb and kind.
std::vector<std::string> ActionNames(const ReconcilePlan& plan, Verb verb, ObjectKind kind);
// The one action with this verb, kind and name (nullptr when absent).
const Action* FindAction(const ReconcilePlan& plan, Verb verb, ObjectKind kind, const std::string& name);
// The condition of this type in a FleetJob status, or null.
Json Condition(const Json& status, const std::string& type);
// Everything a plan says, as text: two plans are the same plan when these are equal.
std::string Describe(const ReconcilePlan& plan);

// ---- reading pods as the kubelet does ----

// The env the kubelet gives container `container` of `pod`: values with $(VAR) expanded against the
// entries before them, fieldRefs read from the pod, configMapKeyRefs from `config_map`. A reference
// to a missing ConfigMap or key is an error, as the kubelet refuses to start such a container.
Result<EnvMap> ResolveEnv(const Json& pod, const std::optional<Json>& config_map, size_t container = 0);
// Kubernetes' $(VAR) expansion (env values, command and args): references to variables in
// `defined` are replaced, $$ is a literal $, and an unknown reference stays as written.
std::string ExpandVars(const std::string& value, const EnvMap& defined);

// The container (main or init) with this name, or null.
Json ContainerNamed(const Json& pod, const std::string& name);
// The env entry (core/v1 EnvVar) of a container with this name, or null.
Json EnvEntry(const Json& container, const std::string& name);

}  // namespace fleet::op::testing

namespace fleet::op {
// So that GoogleTest prints events and actions readably in failure messages.
inline void PrintTo(const FleetJobStatus& s, std::ostream* os) { *os << s.ToJson().dump(); }
inline void PrintTo(const PlannedEvent& e, std::ostream* os) { *os << e.type << " " << e.reason << ": " << e.message; }
inline void PrintTo(const Action& a, std::ostream* os) {
  ReconcilePlan plan;
  plan.actions = {a};
  *os << testing::Describe(plan);
}
}  // namespace fleet::op
