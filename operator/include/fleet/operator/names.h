// The names the operator gives and reads on Kubernetes objects: labels, annotations, the pod
// condition fleet-sidecar sets, and the names of a job's children (all derived from the job's name,
// so that the controller finds them in its caches without a lookup).
#pragma once

#include <string>

namespace fleet::op {

// Labels on every child: which job, role, index and run (the job's run when the pod was made:
// pods of an older run belong to a run that was restarted and are removed).
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

// The job's children (pods are named by the wiring: PodName).
inline std::string EndpointsConfigMapName(const std::string& job) { return job + "-endpoints"; }
inline std::string HeadlessServiceName(const std::string& job) { return job; }   // Service mode
inline std::string PodGroupName(const std::string& job) { return job; }          // gang scheduling
// The sidecar's ServiceAccount, and the Role and RoleBinding that give it its rights.
inline std::string SidecarServiceAccountName(const std::string& job) { return job + "-fleet-sidecar"; }

}  // namespace fleet::op
