// The names the operator gives and reads on Kubernetes objects: the API's labels, annotations and
// the pod condition fleet-sidecar sets (fleet/api/names.h), and the names of a job's children (all derived from the job's name,
// so that the controller finds them in its caches without a lookup).
#pragma once

#include <string>

#include "fleet/api/names.h"

namespace fleet::op {

// The API's names on the children, labels, annotations and the sidecar's pod condition: shared
// with fleet-sidecar and fleetctl.
using api::kHostsAnnotation;
using api::kIndexLabel;
using api::kJobLabel;
using api::kProgressConditionType;
using api::kCheckpointConditionType;
using api::kReplicasAnnotation;
using api::kRoleLabel;
using api::kRunAnnotation;
using api::kRunLabel;
using api::kRunEnv;
// Where pods mount the endpoints ConfigMap (one file per key).
inline constexpr const char* kEndpointsMountPath = "/etc/fleet/endpoints";
// Lists too long for the env travel as those files (JobWiring::EnvFiles). The endpoints ConfigMap
// then also says which run its lists are of, under this key, for the env loader to wait for.
inline constexpr const char* kEnvFilesRunKey = "fleet-run";
// The env loader (runtime/python/sitecustomize.py) is mounted from its own ConfigMap, made before
// the pods, under this directory, which the containers' PYTHONPATH starts with.
inline constexpr const char* kEnvLoaderMountPath = "/etc/fleet/python";
inline constexpr const char* kEnvLoaderKey = "sitecustomize.py";

// The job's children (pods are named by the wiring: PodName).
inline std::string EndpointsConfigMapName(const std::string& job) { return job + "-endpoints"; }
inline std::string EnvLoaderConfigMapName(const std::string& job) { return job + "-env-loader"; }
inline std::string HeadlessServiceName(const std::string& job) { return job; }   // Service mode
inline std::string PodGroupName(const std::string& job) { return job; }          // gang scheduling
// spec.scheduling.gang Kubernetes: the job's scheduling.k8s.io Workload, its one pod group
// (template) and, from v1alpha2 on, a PodGroup per run (a PodGroup's policy is immutable; a run's
// minimum may differ from the last one's).
inline std::string GangWorkloadName(const std::string& job) { return job; }
inline constexpr const char* kGangPodGroupTemplate = "job";
inline std::string GangPodGroupName(const std::string& job, int run) { return job + "-r" + std::to_string(run); }
// The sidecar's ServiceAccount, and the Role and RoleBinding that give it its rights.
inline std::string SidecarServiceAccountName(const std::string& job) { return job + "-fleet-sidecar"; }

}  // namespace fleet::op
