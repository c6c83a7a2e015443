// The FleetJob API's names on Kubernetes objects: one spelling for the operator that writes them
// and for fleet-sidecar and fleetctl that read them (docs/reference.md).
#pragma once

namespace fleet::api {

// The custom resource: fleetjobs.fleet.paddlepaddle.org/v1alpha1.
inline constexpr const char* kGroup = "fleet.paddlepaddle.org";
inline constexpr const char* kVersion = "v1alpha1";
inline constexpr const char* kApiVersion = "fleet.paddlepaddle.org/v1alpha1";
inline constexpr const char* kKind = "FleetJob";
inline constexpr const char* kFleetJobResource = "fleetjobs";
// spec.managedBy of the jobs this operator runs (as when it is unset). A FleetJob managed by another
// controller (MultiKueue's "kueue.x-k8s.io/multikueue", which runs it on a worker cluster and mirrors
// its status back) is left alone: no pods, no status, no events.
inline constexpr const char* kFleetJobController = "fleet.paddlepaddle.org/fleetjob-controller";

// Labels on every child: which job, role, index and run (the job's run when the pod was made:
// pods of an older run belong to a run that was restarted and are removed).
inline constexpr const char* kJobLabel = "fleet.paddlepaddle.org/job-name";
inline constexpr const char* kRoleLabel = "fleet.paddlepaddle.org/role";
inline constexpr const char* kIndexLabel = "fleet.paddlepaddle.org/index";
inline constexpr const char* kRunLabel = "fleet.paddlepaddle.org/run";
// Every main container's env: the pod's run (from its run label, by the downward API).
inline constexpr const char* kRunEnv = "FLEET_RUN";
// The sidecar's Role says which replicas its pod names are of (the operator's ReplicaSignature).
inline constexpr const char* kReplicasAnnotation = "fleet.paddlepaddle.org/replicas";
// The endpoints ConfigMap says which run and which hosts its lists were computed for; the
// sidecar's gate opens only on the lists of its own run.
inline constexpr const char* kRunAnnotation = "fleet.paddlepaddle.org/run";
inline constexpr const char* kHostsAnnotation = "fleet.paddlepaddle.org/hosts-digest";
// The condition fleet-sidecar sets on its own pod: True while training progresses (or before the
// first step), False with reason Stalled when no step came within its stall window.
inline constexpr const char* kProgressConditionType = "fleet.paddlepaddle.org/TrainingProgress";
// The condition fleet-sidecar sets on its own pod when asked to checkpoint before the pod stops
// (spec.checkpoint.beforeStop: the trainer's preStop hook): True with reason Saved and a message
// that begins "step N" (CheckpointMessage in checkpoint.h), else False with reason TimedOut or Invalid.
inline constexpr const char* kCheckpointConditionType = "fleet.paddlepaddle.org/Checkpoint";

}  // namespace fleet::api
