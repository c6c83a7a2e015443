// The FleetJob API (fleet.paddlepaddle.org/v1alpha1) as the operator sees it: the API's types
// (fleet::api: the spec with its checks, the status), and what the operator derives from a spec
// to decide when a job needs a new run.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fleet/api/job_spec.h"
#include "fleet/api/job_status.h"
#include "fleet/api/names.h"
#include "fleet/base/result.h"
#include "fleet/operator/launcher.h"
#include "fleet/runtime/topology.h"

namespace fleet::op {

using Json = nlohmann::json;

// The job's status is the API's (fleet/api/job_status.h): the operator writes it, fleetctl reads it.
using api::AllConditionTypes;
using api::AllPhases;
using api::BoundMessage;
using api::Condition;
using api::ConditionStatus;
using api::ConditionType;
using api::ConditionTypeName;
using api::CheckpointStatus;
using api::ElasticStatus;
using api::InPlaceRestartStatus;
using api::QueueStatus;
using api::FleetJobStatus;
using api::IsFinished;
using api::JobPhase;
using api::kMaxMessageBytes;
using api::ParseConditionType;
using api::ParsePhase;
using api::PhaseName;
using api::ReplicaStatus;
using api::Time;
using api::WholeSeconds;

using api::kApiVersion;
using api::kFleetJobResource;
using api::kGroup;
using api::kKind;
using api::kVersion;

// The spec is the API's (fleet/api/job_spec.h): fleetctl writes it, the operator reads it.
using api::CheckpointSpec;
using api::CleanPodPolicy;
using api::ElasticSpec;
using api::FleetJob;
using api::FleetJobObject;
using api::kFleetJobController;
using api::ManagedElsewhere;
using api::FleetJobSpec;
using api::GangScheduler;
using api::Gloo;
using api::kPsServerContainer;
using api::Network;
using api::NetworkName;
using api::ParseFleetJob;
using api::ParseRunPolicy;
using api::ReadFleetJob;
using api::RestartPolicy;
using api::RoleKind;
using api::RoleKindName;
using api::RoleSpec;
using api::RunPolicy;
using api::Runtime;
using api::RuntimeName;
using api::Scheduling;
using api::SidecarSpec;

// The sidecar image of this release: the operator's --sidecar-image default.
inline constexpr const char* kDefaultSidecarImage = "fleetjob/sidecar:0.1.0";

// "server=2,worker=4,gpu=2": the replicas of every role, in spec order.
std::string ReplicaSignature(const FleetJobSpec& spec);
// What a run's pods are wired for: a change starts a new run. ReplicaSignature, or for an elastic
// job its range and etcd ("worker=2:4,etcd=etcd:2379"): its pods read no peer lists, so replicas
// may change within the run, but every node of a run must agree on np and etcd.
std::string RunSignature(const FleetJobSpec& spec);

}  // namespace fleet::op
