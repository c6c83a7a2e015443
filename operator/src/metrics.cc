#include "fleet/operator/metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <array>

#include "fleet/base/log.h"
#include "fleet/operator/api.h"

namespace fleet::op {
namespace {

using prometheus::BuildCounter;
using prometheus::BuildGauge;
using prometheus::BuildHistogram;

double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const prometheus::Histogram::BucketBoundaries buckets = {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                                                                  0.05,   0.1,   0.25,   0.5,   1,    2.5, 5, 10};
  return buckets;
}

}  // namespace

ControllerMetrics::ControllerMetrics(prometheus::Registry& registry)
    : reconciles_(BuildCounter().Name("fleet_operator_reconciles_total")
                      .Help("FleetJob reconciles by result (success, error, requeue)").Register(registry)),
      reconcile_duration_(BuildHistogram().Name("fleet_operator_reconcile_duration_seconds")
                              .Help("Time to reconcile one FleetJob, API calls included").Register(registry)
                              .Add({}, LatencyBuckets())),
      queue_depth_(BuildGauge().Name("fleet_operator_workqueue_depth").Help("FleetJobs waiting to be reconciled")
                       .Register(registry).Add({})),
      queue_latency_(BuildHistogram().Name("fleet_operator_workqueue_queue_duration_seconds")
                         .Help("Time a FleetJob waited in the work queue").Register(registry)
                         .Add({}, LatencyBuckets())),
      queue_retries_(BuildCounter().Name("fleet_operator_workqueue_retries_total")
                         .Help("FleetJobs requeued with backoff after a failed reconcile").Register(registry).Add({})),
      reconcile_exceptions_(BuildCounter().Name("fleet_operator_reconcile_exceptions_total")
                                .Help("Reconciles that threw an exception (contained; the FleetJob is retried with backoff)")
                                .Register(registry).Add({})),
      jobs_(BuildGauge().Name("fleet_operator_jobs").Help("FleetJobs by phase").Register(registry)),
      pods_created_(BuildCounter().Name("fleet_operator_pods_created_total").Help("Pods created").Register(registry).Add({})),
      pods_deleted_(BuildCounter().Name("fleet_operator_pods_deleted_total").Help("Pods deleted").Register(registry).Add({})),
      job_restarts_(BuildCounter().Name("fleet_operator_job_restarts_total")
                        .Help("FleetJob restarts (failures retried, counted against backoffLimit)").Register(registry).Add({})),
      leader_(BuildGauge().Name("fleet_operator_leader").Help("1 while this replica holds the leader lease")
                  .Register(registry).Add({})),
      progress_requests_(BuildCounter().Name("fleet_operator_progress_requests_total")
                             .Help("GET /status requests to trainer pods' sidecars, by result (ok, failed)")
                             .Register(registry)),
      // No job label: a job's forged reports are logged with its name (ProgressCollector), and
      // the operator's metrics stay as many series whatever the number of jobs.
      progress_dropped_ranks_(BuildCounter().Name("fleet_operator_progress_dropped_ranks_total")
                                  .Help("Rank reports in sidecars' /status answers not kept: not the pod's ranks, "
                                        "or past a bound").Register(registry).Add({})),
      progress_collection_(BuildHistogram().Name("fleet_operator_progress_collection_seconds")
                               .Help("Time to collect the training progress of every running job")
                               .Register(registry).Add({}, LatencyBuckets())) {
  for (const char* result : {"success", "error", "requeue"}) reconciles_.Add({{"result", result}});
  for (const char* result : {"ok", "failed"}) progress_requests_.Add({{"result", result}});
  for (JobPhase phase : AllPhases()) {
    if (phase != JobPhase::kNone) phase_gauges_[PhaseName(phase)] = &jobs_.Add({{"phase", PhaseName(phase)}});
  }
}

void ControllerMetrics::Reconciled(const std::string& result, std::chrono::steady_clock::duration took) {
  reconciles_.Add({{"result", result}}).Increment();
  reconcile_duration_.Observe(Seconds(took));
}

kube::WorkQueueMetrics ControllerMetrics::QueueHooks() {
  kube::WorkQueueMetrics hooks;
  hooks.on_depth = [this](size_t depth) { queue_depth_.Set(static_cast<double>(depth)); };
  hooks.on_latency = [this](std::chrono::steady_clock::duration waited) { queue_latency_.Observe(Seconds(waited)); };
  hooks.on_retry = [this] { queue_retries_.Increment(); };
  hooks.on_exception = [this](const std::string& key, const std::string& what) {
    reconcile_exceptions_.Increment();
    Log(LogLevel::kError, "reconcile threw: " + what + " (retried with backoff)", {{"fleetjob", key}});
  };
  return hooks;
}

void ControllerMetrics::PodsCreated(int n) { pods_created_.Increment(n); }
void ControllerMetrics::PodsDeleted(int n) { pods_deleted_.Increment(n); }
void ControllerMetrics::JobRestarted(int n) { job_restarts_.Increment(n); }
void ControllerMetrics::SetLeader(bool leader) { leader_.Set(leader ? 1 : 0); }

ProgressCollector::Collected ControllerMetrics::ProgressHook() {
  return [this](const ProgressCollector::Stats& collection, double seconds) {
    progress_requests_.Add({{"result", "ok"}}).Increment(static_cast<double>(collection.requests - collection.failures));
    progress_requests_.Add({{"result", "failed"}}).Increment(static_cast<double>(collection.failures));
    progress_dropped_ranks_.Increment(static_cast<double>(collection.dropped_ranks));
    progress_collection_.Observe(seconds);
  };
}

void ControllerMetrics::SetJobPhases(const std::map<std::string, int>& jobs_by_phase) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [phase, gauge] : phase_gauges_) {
    auto it = jobs_by_phase.find(phase);
    gauge->Set(it == jobs_by_phase.end() ? 0 : it->second);
  }
  for (const auto& [phase, count] : jobs_by_phase) {
    if (phase_gauges_.count(phase) || phase.empty()) continue;
    phase_gauges_[phase] = &jobs_.Add({{"phase", phase}});
    phase_gauges_[phase]->Set(count);
  }
}

namespace {

class InstrumentedClient final : public kube::Client {
 public:
  InstrumentedClient(std::shared_ptr<kube::Client> inner, prometheus::Registry& registry)
      : inner_(std::move(inner)),
        family_(BuildCounter().Name("fleet_operator_api_requests_total")
                    .Help("Kubernetes API calls by verb and outcome").Register(registry)) {}

  kube::StatusOr<kube::Json> Get(const kube::Resource& r, const std::string& ns, const std::string& name) override {
    return Count("get", inner_->Get(r, ns, name));
  }
  kube::StatusOr<kube::Json> List(const kube::Resource& r, const std::string& ns, const kube::ListOptions& o) override {
    return Count("list", inner_->List(r, ns, o));
  }
  kube::StatusOr<kube::Json> Create(const kube::Resource& r, const std::string& ns, const kube::Json& object) override {
    return Count("create", inner_->Create(r, ns, object));
  }
  kube::ApiStatus CreateDiscardingReply(const kube::Resource& r, const std::string& ns, const kube::Json& object) override {
    kube::ApiStatus status = inner_->CreateDiscardingReply(r, ns, object);
    Add("create", status);
    return status;
  }
  kube::StatusOr<kube::Json> Update(const kube::Resource& r, const std::string& ns, const kube::Json& object) override {
    return Count("update", inner_->Update(r, ns, object));
  }
  kube::StatusOr<kube::Json> UpdateStatus(const kube::Resource& r, const std::string& ns, const kube::Json& object) override {
    return Count("update", inner_->UpdateStatus(r, ns, object));
  }
  kube::StatusOr<kube::Json> MergePatch(const kube::Resource& r, const std::string& ns, const std::string& name,
                                        const kube::Json& patch, const std::string& subresource) override {
    return Count("patch", inner_->MergePatch(r, ns, name, patch, subresource));
  }
  kube::ApiStatus Delete(const kube::Resource& r, const std::string& ns, const std::string& name,
                         const kube::DeleteOptions& options) override {
    kube::ApiStatus status = inner_->Delete(r, ns, name, options);
    Add("delete", status);
    return status;
  }
  kube::ApiStatus Watch(const kube::Resource& r, const std::string& ns, const kube::WatchOptions& options,
                        const std::function<bool(const kube::WatchEvent&)>& on_event,
                        const kube::CancelToken& cancel) override {
    kube::ApiStatus status = inner_->Watch(r, ns, options, on_event, cancel);
    Add("watch", status);
    return status;
  }
  // The raw paths: the informers use them (a decorator that did not forward them would fall back
  // to the parsed calls, and to their memory and CPU).
  kube::ApiStatus ListPages(const kube::Resource& r, const std::string& ns, const kube::ListOptions& options,
                            const std::function<bool(std::string_view page)>& on_page) override {
    kube::ApiStatus status = inner_->ListPages(r, ns, options, on_page);
    Add("list", status);
    return status;
  }
  kube::ApiStatus WatchLines(const kube::Resource& r, const std::string& ns, const kube::WatchOptions& options,
                             const std::function<bool(std::string_view line)>& on_line,
                             const kube::CancelToken& cancel) override {
    kube::ApiStatus status = inner_->WatchLines(r, ns, options, on_line, cancel);
    Add("watch", status);
    return status;
  }
  kube::StatusOr<kube::Json> GetPath(const std::string& path) override { return Count("get", inner_->GetPath(path)); }
  kube::StatusOr<std::string> GetLog(const std::string& ns, const std::string& pod, const std::string& container,
                                     int64_t tail_lines) override {
    return Count("get", inner_->GetLog(ns, pod, container, tail_lines));
  }

 private:
  template <typename T>
  T Count(const char* verb, T result) {
    Add(verb, result.status());
    return result;
  }
  void Add(const char* verb, const kube::ApiStatus& status) {
    family_.Add({{"verb", verb}, {"code", kube::CodeName(status.code())}}).Increment();
  }

  std::shared_ptr<kube::Client> inner_;
  prometheus::Family<prometheus::Counter>& family_;
};

}  // namespace

std::shared_ptr<kube::Client> InstrumentClient(std::shared_ptr<kube::Client> inner, prometheus::Registry& registry) {
  return std::make_shared<InstrumentedClient>(std::move(inner), registry);
}

}  // namespace fleet::op
