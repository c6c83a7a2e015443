// PlanReconcile: the operator's decisions as a pure function
//   (FleetJob, observed children, now, settings) -> actions + status + events + requeue.
// No I/O, no clock, no logging: the controller around it reads the cache, calls this, and carries
// the actions out. Level-based: the same inputs always give the same plan, and carrying out a plan
// twice is harmless (creates of deterministic names answer AlreadyExists; deletes NotFound).
#pragma once

#include <chrono>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "fleet/operator/api.h"

namespace fleet::op {

using Time = std::chrono::system_clock::time_point;

// Labels on every child: which job, role, index and run (the job's restart count when the pod was
// made: pods of an older run belong to a run that was restarted and are removed).
inline constexpr const char* kJobLabel = "fleet.paddlepaddle.org/job-name";
inline constexpr const char* kRoleLabel = "fleet.paddlepaddle.org/role";
inline constexpr const char* kIndexLabel = "fleet.paddlepaddle.org/index";
inline constexpr const char* kRunLabel = "fleet.paddlepaddle.org/run";
// The sidecar's Role says which replicas its pod names are of (ReplicaSignature).
inline constexpr const char* kReplicasAnnotation = "fleet.paddlepaddle.org/replicas";
// The endpoints ConfigMap says which run and which hosts its lists were computed for.
inline constexpr const char* kRunAnnotation = "fleet.paddlepaddle.org/run";
inline constexpr const char* kHostsAnnotation = "fleet.paddlepaddle.org/hosts-digest";
// The condition fleet-sidecar sets on its own pod: True while training progresses (or before the
// first step), False with reason Stalled when no step came within its stall window.
inline constexpr const char* kProgressConditionType = "fleet.paddlepaddle.org/TrainingProgress";
// Where pods mount the endpoints ConfigMap (one file per key).
inline constexpr const char* kEndpointsMountPath = "/etc/fleet/endpoints";

enum class ObjectKind { kPod, kConfigMap, kService, kPodGroup, kServiceAccount, kRole, kRoleBinding, kFleetJob };
enum class Verb { kCreate, kUpdate, kDelete };

struct Action {
  Verb verb = Verb::kCreate;
  ObjectKind kind = ObjectKind::kPod;
  std::string name;
  Json object;          // for create/update
  std::string reason;   // why (for logs and tests)
};

struct PlannedEvent {
  std::string type;     // Normal | Warning
  std::string reason;
  std::string message;
};

// A job's pods as observed: shared, immutable snapshots, so that a plan reads a 1,000-pod job
// without copying it. Iterates as `const Json&`.
class PodList {
 public:
  using Item = std::shared_ptr<const Json>;
  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = Json;
    using difference_type = std::ptrdiff_t;
    using pointer = const Json*;
    using reference = const Json&;
    explicit const_iterator(std::vector<Item>::const_iterator it) : it_(it) {}
    const Json& operator*() const { return **it_; }
    const Json* operator->() const { return it_->get(); }
    const_iterator& operator++() { ++it_; return *this; }
    bool operator==(const const_iterator& o) const { return it_ == o.it_; }
    bool operator!=(const const_iterator& o) const { return it_ != o.it_; }
   private:
    std::vector<Item>::const_iterator it_;
  };

  PodList() = default;
  PodList(std::initializer_list<Json> pods) {
    for (const Json& pod : pods) push_back(pod);
  }
  void push_back(Json pod) { items_.push_back(std::make_shared<Json>(std::move(pod))); }
  void push_back(Item pod) { items_.push_back(std::move(pod)); }
  void reserve(size_t n) { items_.reserve(n); }
  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  const_iterator begin() const { return const_iterator(items_.begin()); }
  const_iterator end() const { return const_iterator(items_.end()); }
  std::vector<Item>& items() { return items_; }
  const std::vector<Item>& items() const { return items_; }

 private:
  std::vector<Item> items_;
};

struct Observed {
  PodList pods;                        // pods labelled with the job's name
  std::optional<Json> endpoints;       // the job's endpoints ConfigMap
  std::optional<Json> service;         // Service mode: the job's headless Service
  std::optional<Json> pod_group;       // gang scheduling: the job's PodGroup
  // The sidecar's identity: a per-job ServiceAccount allowed to read the job's endpoints
  // ConfigMap and nothing else (for pods whose template names no serviceAccountName).
  std::optional<Json> service_account;
  std::optional<Json> role;
  std::optional<Json> role_binding;
};

struct OperatorSettings {
  bool native_sidecar = true;          // Kubernetes >= 1.29: the sidecar is an init container
                                       // with restartPolicy Always and a startup probe
  std::string cluster_domain = "cluster.local";
  std::string sidecar_service_account_token_audience;   // "" = the API server's default
  std::string sidecar_image = kDefaultSidecarImage;      // unless the job sets spec.sidecar.image
  int host_port_base = 0;              // HostNetwork: the start of the job's port block
                                       // (HostPortAllocator); recorded in status.hostPortBase
  // HostNetwork: why the allocator has no block for the job ("" = it has one), and whether it
  // never will (the job needs more ports than the operator's whole range).
  std::string host_ports_unavailable;
  bool host_ports_never = false;
};

struct ReconcilePlan {
  std::vector<Action> actions;
  Json status;                         // the FleetJob's .status as it should be
  std::vector<PlannedEvent> events;
  std::optional<std::chrono::seconds> requeue_after;
};

ReconcilePlan PlanReconcile(const Json& job_object, const Observed& observed, Time now,
                            const OperatorSettings& settings);

// The fields of a pod the planner reads (metadata name, namespace, uid, labels, timestamps;
// status phase, reason, addresses, conditions, container states). Planning with these gives the
// same plan as with the whole pod; the controller keeps pods in this form, ~10x smaller.
Json PodForPlanning(const Json& pod);

// `status` with the job marked Failed for `reason` (a Failed condition, phase, completionTime):
// for failures found while carrying a plan out, e.g. the API server refusing a pod as invalid.
Json FailedStatus(Json status, const std::string& reason, const std::string& message, Time now);

// Names of the job's children.
std::string EndpointsConfigMapName(const std::string& job);

}  // namespace fleet::op
