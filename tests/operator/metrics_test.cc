// ControllerMetrics: the work queue's exceptions reach fleet_operator_reconcile_exceptions_total.
#include "fleet/operator/metrics.h"

#include <prometheus/registry.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include <gtest/gtest.h>

namespace fleet::op {
namespace {

double CounterValue(prometheus::Registry& registry, const std::string& name) {
  for (const prometheus::MetricFamily& family : registry.Collect()) {
    if (family.name == name && family.metric.size() == 1) return family.metric[0].counter.value;
  }
  ADD_FAILURE() << name << " is not a counter without labels";
  return -1;
}

TEST(ControllerMetricsTest, ReconcilesThatThrowAreCounted) {
  prometheus::Registry registry;
  ControllerMetrics metrics(registry);
  kube::WorkQueue queue(kube::WorkQueueOptions{std::chrono::milliseconds(1)}, metrics.QueueHooks());
  int attempts = 0;
  std::thread worker([&] {
    kube::RunWorkers(queue, 1, [&](const std::string&) -> kube::ProcessResult {
      if (++attempts == 1) throw std::runtime_error("boom");
      queue.ShutDown();
      return {};
    });
  });
  queue.Add("ns/a");
  worker.join();
  EXPECT_EQ(attempts, 2);
  EXPECT_EQ(CounterValue(registry, "fleet_operator_reconcile_exceptions_total"), 1);
  EXPECT_EQ(CounterValue(registry, "fleet_operator_workqueue_retries_total"), 1);
}

}  // namespace
}  // namespace fleet::op
