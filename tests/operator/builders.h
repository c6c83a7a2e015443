// Fluent builders for the planner tests, in the style of Kubeflow trainer's wrappers:
//   JobBuilder("wd").Ps(2, 4).Network("Service").RestartPolicy("worker", "OnFailure").Obj()
//   PodFor(job, "worker", 1).Phase("Failed").ExitCode(137).Obj()
//   EndpointsConfigMapFor(job).Run(0).HostsDigest("stale").Obj()
// Every builder produces plain JSON objects, shaped as the API server would return them, so the
// planner sees exactly what the controller would hand it.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>

#include "fleet/operator/api.h"
#include "fleet/operator/planner.h"

namespace fleet::op::testing {

// The tests' clock: every "now" is a fixed instant plus an offset, so timestamps are exact.
Time T0();
Time At(int64_t seconds_after_t0);

inline constexpr const char* kNamespace = "ns";
inline constexpr const char* kUid = "uid-1234";
inline constexpr const char* kEtcdEndpoint = "etcd.infra.svc:2379";
inline constexpr const char* kImage = "paddlepaddle/paddle:2.5.2";

// A pod template with one container "main" running train.py; `gpus` > 0 adds
// resources.limits["nvidia.com/gpu"].
Json PodTemplate(int gpus = 0);

// A FleetJob object (fleet.paddlepaddle.org/v1alpha1) in namespace "ns" with a uid and generation 1.
class JobBuilder {
 public:
  // A heter stage: {device, replicas}; the stage's name defaults to its device.
  struct HeterStage {
    HeterStage(std::string device_kind, int count, std::string stage_name = "")
        : device(std::move(device_kind)), replicas(count), name(std::move(stage_name)) {}
    std::string device;
    int replicas = 1;
    std::string name;
  };

  explicit JobBuilder(std::string name = "wd");

  JobBuilder& Namespace(const std::string& ns);
  JobBuilder& Label(const std::string& key, const std::string& value);   // metadata.labels
  JobBuilder& Annotation(const std::string& key, const std::string& value);   // metadata.annotations
  JobBuilder& Ps(int servers, int workers);                 // spec.server + spec.worker
  JobBuilder& Collective(int workers, int gpus_per_pod = 0);  // spec.worker only
  JobBuilder& Heter(const HeterStage& stage);               // appends to spec.heter
  JobBuilder& Servers(int replicas);
  JobBuilder& Workers(int replicas);
  JobBuilder& Mode(const std::string& mode);
  JobBuilder& Network(const std::string& network);
  JobBuilder& Gloo(const std::string& gloo);
  JobBuilder& ProcessesPerPod(int n);
  JobBuilder& Port(int port);
  // spec.elastic: workers between min and max, rendezvous in etcd at kEtcdEndpoint.
  JobBuilder& Elastic(int min, int max, int64_t timeout_seconds = 600);
  // role: "server", "worker" or a heter stage's name.
  JobBuilder& RestartPolicy(const std::string& role, const std::string& policy);
  JobBuilder& BackoffLimit(int limit);
  JobBuilder& ActiveDeadlineSeconds(int64_t seconds);
  JobBuilder& TtlSecondsAfterFinished(int64_t seconds);
  JobBuilder& CleanPodPolicy(const std::string& policy);
  JobBuilder& PendingTimeoutSeconds(int64_t seconds);
  JobBuilder& Suspend(bool suspend);
  JobBuilder& Gang(const std::string& scheduler, const std::string& queue = "");
  JobBuilder& PriorityClass(const std::string& name);
  JobBuilder& SidecarMetricsPort(int port);
  JobBuilder& Status(const Json& status);
  JobBuilder& Deleting(Time when);                          // metadata.deletionTimestamp
  // Raw edits by JSON pointer ("/spec/worker/replicas"), for the shapes the typed setters refuse to make.
  JobBuilder& Set(const std::string& pointer, const Json& value);
  JobBuilder& Erase(const std::string& pointer);

  Json Obj() const { return obj_; }

 private:
  Json& RoleObject(const std::string& role);

  Json obj_;
};

// An observed pod. PodFor(job, role, index) is the pod the operator makes for that slot, as the API
// server returns it right after creation (Pending, no IP, run 0, created at T0); the setters then
// move it through its life.
class PodBuilder {
 public:
  explicit PodBuilder(Json pod) : pod_(std::move(pod)) {}

  PodBuilder& Run(int run);                    // the run label
  PodBuilder& Phase(const std::string& phase);
  PodBuilder& Ip(const std::string& ip);       // status.podIP
  PodBuilder& HostIp(const std::string& ip);   // status.hostIP
  PodBuilder& Ready(bool ready = true);        // the Ready condition
  PodBuilder& ExitCode(int code);              // the main container terminated with `code`
  PodBuilder& Failed(int code) { return Phase("Failed").ExitCode(code); }
  PodBuilder& FinishedAt(Time when);           // its terminated main container's finishedAt (after ExitCode)
  PodBuilder& Succeeded() { return Phase("Succeeded").ExitCode(0); }
  PodBuilder& Evicted();                       // phase Failed, reason Evicted (no exit code)
  PodBuilder& Terminating(Time since);         // metadata.deletionTimestamp
  PodBuilder& Created(Time when);              // metadata.creationTimestamp
  PodBuilder& Unschedulable(const std::string& message);  // PodScheduled False, reason Unschedulable
  // The sidecar's training-progress condition: True (Progressing), or False reason Stalled.
  PodBuilder& Progress(bool progressing, const std::string& message = "");
  // In place (InPlace jobs): the sidecar's Trainer condition; the main container restarted by the
  // kubelet after it ended with `code` (running again, the end in lastState).
  PodBuilder& Trainer(api::TrainerState state, int run, std::optional<Time> since = std::nullopt);
  PodBuilder& RestartedAfter(int code);

  Json Obj() const { return pod_; }

 private:
  Json pod_;
};

PodBuilder PodFor(const Json& job, const std::string& role, int index);

// The job's endpoints ConfigMap as the operator publishes it (<job>-endpoints, owned by the job).
class ConfigMapBuilder {
 public:
  explicit ConfigMapBuilder(const Json& job);

  ConfigMapBuilder& Run(int run);
  ConfigMapBuilder& HostsDigest(const std::string& digest);
  ConfigMapBuilder& Data(const std::map<std::string, std::string>& data);
  ConfigMapBuilder& ResourceVersion(const std::string& version);

  Json Obj() const { return cm_; }

 private:
  Json cm_;
};

inline ConfigMapBuilder EndpointsConfigMapFor(const Json& job) { return ConfigMapBuilder(job); }

}  // namespace fleet::op::testing
