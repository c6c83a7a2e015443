// The operator's Prometheus metrics (prometheus-cpp), all prefixed fleet_operator_:
//   reconciles_total{result}           success | error | requeue (cache behind, conflict)
//   reconcile_exceptions_total         reconciles that threw (contained by kube::RunWorkers)
//   reconcile_duration_seconds         histogram
//   workqueue_depth, workqueue_queue_duration_seconds, workqueue_retries_total
//   api_requests_total{verb,code}      every API call (after the client's own retries)
//   jobs{phase}                        FleetJobs by status.phase
//   pods_created_total, pods_deleted_total, job_restarts_total
//   leader                             1 while this replica leads
//   progress_requests_total{result}    GET /status to sidecars: ok | failed
//   progress_dropped_ranks_total       rank reports not kept: not the pod's ranks, or past a bound
//   progress_collection_seconds        histogram
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "fleet/kube/client.h"
#include "fleet/kube/workqueue.h"
#include "fleet/operator/progress_collector.h"

namespace prometheus {
class Registry;
class Counter;
class Gauge;
class Histogram;
template <typename T>
class Family;
}  // namespace prometheus

namespace fleet::op {

class ControllerMetrics {
 public:
  explicit ControllerMetrics(prometheus::Registry& registry);

  void Reconciled(const std::string& result, std::chrono::steady_clock::duration took);
  // The work queue's hooks; on_exception also logs the exception with its FleetJob (the kube
  // library logs nothing).
  kube::WorkQueueMetrics QueueHooks();
  void PodsCreated(int n);
  void PodsDeleted(int n);
  void JobRestarted(int n);
  // The phase of every job this replica knows about.
  void SetJobPhases(const std::map<std::string, int>& jobs_by_phase);
  void SetLeader(bool leader);
  // The progress collector's hook: each collection's requests, failures, dropped ranks and time.
  ProgressCollector::Collected ProgressHook();

 private:
  prometheus::Family<prometheus::Counter>& reconciles_;
  prometheus::Histogram& reconcile_duration_;
  prometheus::Gauge& queue_depth_;
  prometheus::Histogram& queue_latency_;
  prometheus::Counter& queue_retries_;
  prometheus::Counter& reconcile_exceptions_;
  prometheus::Family<prometheus::Gauge>& jobs_;
  prometheus::Counter& pods_created_;
  prometheus::Counter& pods_deleted_;
  prometheus::Counter& job_restarts_;
  prometheus::Gauge& leader_;
  prometheus::Family<prometheus::Counter>& progress_requests_;
  prometheus::Counter& progress_dropped_ranks_;
  prometheus::Histogram& progress_collection_;
  std::mutex mu_;
  std::map<std::string, prometheus::Gauge*> phase_gauges_;
};

// A Client that counts every call in fleet_operator_api_requests_total{verb,code} and forwards
// it to `inner`. code is the outcome's name: OK, NotFound, AlreadyExists, Conflict, ...
std::shared_ptr<kube::Client> InstrumentClient(std::shared_ptr<kube::Client> inner, prometheus::Registry& registry);

}  // namespace fleet::op
