// LeaderElector: leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection:
// try to acquire every retry_period; the holder renews every retry_period and must succeed within
// renew_deadline or it gives up leadership (on_stopped_leading) — losing the lease stops the work;
// another candidate takes an expired lease (lease_duration past its renewTime) with an
// optimistic-concurrency update, so two candidates can never both succeed. Release on shutdown
// empties holderIdentity so a successor need not wait for expiry.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "fleet/kube/client.h"

namespace fleet::kube {

struct LeaderElectionConfig {
  std::string lease_namespace;
  std::string lease_name;
  std::string identity;                          // unique per candidate, e.g. pod name + uid
  std::chrono::milliseconds lease_duration{15000};
  std::chrono::milliseconds renew_deadline{10000};
  std::chrono::milliseconds retry_period{2000};
  bool release_on_cancel = true;
  std::function<void()> on_started_leading;      // called on the elector's thread
  std::function<void()> on_stopped_leading;
  std::function<void(const std::string& leader)> on_new_leader;
};

class LeaderElector {
 public:
  LeaderElector(std::shared_ptr<Client> client, LeaderElectionConfig config);
  ~LeaderElector();
  void Start();                     // campaigns on its own thread until Stop()
  void Stop();                      // stops campaigning; releases the lease if held
  bool IsLeader() const { return leader_; }
  std::string CurrentLeader() const;

 private:
  void Run();
  bool TryAcquireOrRenew();
  void Release();

  std::shared_ptr<Client> client_;
  LeaderElectionConfig config_;
  std::atomic<bool> leader_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
  mutable std::mutex mu_;
  std::string observed_leader_;
  std::string observed_rv_;
  std::chrono::steady_clock::time_point observed_at_;
  std::string observed_record_;     // holder + renewTime as last seen, to detect progress
};

}  // namespace fleet::kube
