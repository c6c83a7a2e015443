// BuildPod: a FleetJob pod from its role's template — deterministic name, labels, owner
// reference, the wiring env and endpoints volume, networking per spec.network, gang-scheduler
// hooks, and the fleet-sidecar gate that holds the main containers until the endpoint lists exist.
#pragma once

#include <cstdint>
#include <optional>

#include "fleet/operator/names.h"
#include "fleet/operator/settings.h"
#include "fleet/operator/wiring.h"

namespace fleet::op {

// `resume_step`: the step of the job's last checkpoint before stop (status.checkpoint), told to
// the pod's containers as FLEET_CHECKPOINT_STEP.
Json BuildPod(const FleetJob& job, const PodSlot& slot, const JobWiring& wiring, int run,
              const OperatorSettings& settings, std::optional<int64_t> resume_step = std::nullopt);

// Where the trainer finds a checkpoint request (FLEET_CHECKPOINT_DIR) in pods of a job with
// spec.checkpoint.beforeStop: in an emptyDir mounted at kCheckpointMountPath in the sidecar and
// in the main containers.
inline constexpr const char* kCheckpointMountPath = "/run/fleet";
inline constexpr const char* kCheckpointDir = "/run/fleet/checkpoint";
// Whether the job's pods checkpoint before they stop: spec.checkpoint.beforeStop, where the
// sidecar keeps running beside the trainer to be asked (a native sidecar).
bool CheckpointsBeforeStop(const FleetJob& job, const OperatorSettings& settings);
// Whether a whole-job restart of the job restarts its trainers inside its pods:
// spec.runPolicy.restartStrategy InPlace, where the sidecar runs beside the trainer (a native one).
bool RestartsInPlace(const FleetJob& job, const OperatorSettings& settings);

// The env loader's ConfigMap (EnvLoaderConfigMapName): runtime/python/sitecustomize.py as key
// kEnvLoaderKey, for the pods of jobs whose lists travel as files (JobWiring::EnvFiles).
Json BuildEnvLoaderConfigMap(const FleetJob& job);

// The job's headless Service (Service mode): pod DNS names <pod>.<job>.<ns>.svc.<domain>.
Json BuildService(const FleetJob& job);

// The gang's PodGroup (Volcano scheduling.volcano.sh/v1beta1 or scheduler-plugins
// scheduling.x-k8s.io/v1alpha1) with minMember GangMinimum.
Json BuildPodGroup(const FleetJob& job);

// The pods a gang needs before any is placed: every pod (an elastic job: its minimum of workers
// and every other pod).
int GangMinimum(const FleetJobSpec& spec);

// spec.scheduling.gang Kubernetes, on a cluster serving `api` (usable): the job's Workload, with
// one pod group (v1alpha1) or pod group template (v1alpha2 on) kGangPodGroupTemplate of
// gang.minCount GangMinimum, controlled by the FleetJob; and from v1alpha2 on the run's PodGroup
// (GangPodGroupName), with the template's policy copied, as a PodGroup's creator must.
Json BuildGangWorkload(const FleetJob& job, const WorkloadApi& api);
Json BuildGangPodGroup(const FleetJob& job, int run, const WorkloadApi& api);
// The gang.minCount a Workload holds, in either shape (0 when it has none).
int64_t GangWorkloadMinCount(const Json& workload);

// The sidecar's least-privilege identity, for pods whose template brings no serviceAccountName:
// a ServiceAccount, a Role that may only get/list/watch the job's endpoints ConfigMap, and the
// RoleBinding between them (all named SidecarServiceAccountName).
bool NeedsSidecarAccount(const FleetJob& job);
Json BuildSidecarServiceAccount(const FleetJob& job);
Json BuildSidecarRole(const FleetJob& job);
Json BuildSidecarRoleBinding(const FleetJob& job);

// The controller reference every child carries.
Json OwnerReference(const FleetJob& job);

}  // namespace fleet::op
