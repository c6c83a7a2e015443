// The pod status condition through which the operator sees a pod's training progress:
//
//   {"type": "fleet.paddlepaddle.org/TrainingProgress", "status": "True" | "False",
//    "reason": "AwaitingFirstStep" | "Progressing" | "Stalled",
//    "message": "rank 3 (pod j-worker-3) has reported no step for 10m5s (last step 1200; stall window 10m)",
//    "lastTransitionTime": "2026-11-21T04:40:00Z", "lastProbeTime": null}
//
// ConditionWriter writes it to the sidecar's own pod (pods/<pod>/status) when its status or reason
// changes — never for a message alone — at most once per min_interval, retrying failures with a
// capped backoff. A JSON merge patch replaces a list whole, so it reads the pod, replaces (or adds)
// only its own condition in status.conditions, and patches with the pod's resourceVersion: a
// concurrent status write (the kubelet's) makes it a Conflict, and it reads again. RBAC: get on
// pods and patch on pods/status (both may be limited to the job's pod names).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "fleet/api/names.h"
#include "fleet/base/log.h"
#include "fleet/kube/client.h"

namespace prometheus {
class Registry;
class Counter;
}  // namespace prometheus

namespace fleet::sidecar {

using api::kProgressConditionType;

struct PodCondition {
  bool status = true;
  std::string reason;
  std::string message;
  bool SameState(const PodCondition& o) const { return status == o.status && reason == o.reason; }
};

// The merge patch that sets `condition` on `pod` (as read from the API), or nullopt when the pod
// already carries it with the same status, reason and message. `now`: RFC 3339, seconds.
std::optional<nlohmann::json> ConditionPatch(const nlohmann::json& pod, const PodCondition& condition,
                                             const std::string& now);
// The same for a condition of another `type` (the Checkpoint condition, checkpoint.h).
std::optional<nlohmann::json> ConditionPatch(const nlohmann::json& pod, const std::string& type,
                                             const PodCondition& condition, const std::string& now);
// One write of a `type` condition to pod `ns`/`name` (reads, patches, and reads again after a
// Conflict, up to `conflict_retries` times); "" on success, else why not.
std::string WritePodCondition(kube::Client& client, const std::string& ns, const std::string& name,
                              const std::string& type, const PodCondition& condition, int conflict_retries);

struct ConditionWriterConfig {
  std::string ns;
  std::string pod;
  std::string job;
  std::string role;
  std::chrono::milliseconds min_interval{5000};
  std::chrono::milliseconds retry_base{1000};
  std::chrono::milliseconds retry_max{60000};
  int conflict_retries = 5;
};

class ConditionWriter {
 public:
  ConditionWriter(std::shared_ptr<kube::Client> client, ConditionWriterConfig config, Logger log,
                  std::shared_ptr<prometheus::Registry> registry);
  ~ConditionWriter();
  ConditionWriter(const ConditionWriter&) = delete;
  ConditionWriter& operator=(const ConditionWriter&) = delete;

  // The condition as it should be now; written when its state differs from the last one written.
  void Desire(const PodCondition& condition);
  void Start();
  // True when the thread ended within `timeout` (false: it is inside an API request).
  bool Stop(std::chrono::milliseconds timeout);

  std::optional<PodCondition> written() const;   // the last condition written
  std::string last_error() const;

 private:
  using Clock = std::chrono::steady_clock;
  void Loop();
  // One write (with reads and conflict retries); "" on success, else why not.
  std::string Write(const PodCondition& condition);

  std::shared_ptr<kube::Client> client_;
  const ConditionWriterConfig config_;
  const Logger log_;
  prometheus::Counter* writes_ok_;
  prometheus::Counter* writes_failed_;
  kube::CancelToken cancel_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::optional<PodCondition> desired_;
  std::optional<PodCondition> written_;
  std::string last_error_;
  bool stopping_ = false;
  bool running_ = false;
  std::thread thread_;
};

}  // namespace fleet::sidecar
