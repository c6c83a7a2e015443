// LeaderElector: leader election on a coordination.k8s.io/v1 Lease, as client-go's leaderelection:
// try to acquire every retry_period (jittered up to +20%); the holder renews every retry_period and
// must succeed within renew_deadline or it gives up leadership (on_stopped_leading) — losing the
// lease stops the work; the elector then campaigns again. Another candidate takes the lease only
// when the record it observes has not changed for lease_duration, timed by ITS OWN monotonic clock
// since it last saw a change (never by trusting the remote renewTime), with an optimistic-concurrency
// update (resourceVersion), so two candidates can never both succeed. Release on shutdown empties
// holderIdentity so a successor need not wait for expiry.
//
// Never two leaders: IsLeader() turns false renew_deadline after the start of the last successful
// acquire/renew request, even while a request hangs; a rival's clock for that record starts no
// earlier than that start, and it waits lease_duration (> renew_deadline) before taking over.
// The Client should use a request timeout well below renew_deadline.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
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
  // Callbacks run on the elector's thread and must return quickly (start/stop work elsewhere).
  std::function<void()> on_started_leading;
  std::function<void()> on_stopped_leading;      // lost the lease, or Stop() while leading
  std::function<void(const std::string& leader)> on_new_leader;   // observed holder changed
};

class LeaderElector {
 public:
  // Throws std::invalid_argument unless lease_duration > renew_deadline > 1.2 * retry_period > 0
  // and identity, lease_name and lease_namespace are set (a programming error, as in client-go).
  LeaderElector(std::shared_ptr<Client> client, LeaderElectionConfig config);
  ~LeaderElector();
  void Start();                     // campaigns on its own thread until Stop()
  void Stop();                      // stops campaigning; releases the lease if held (and configured)
  bool IsLeader() const;
  std::string CurrentLeader() const;  // the holder last observed ("" when none)

 private:
  using Clock = std::chrono::steady_clock;
  void Run();
  // Leads until the lease is lost (false) or Stop() (true).
  bool RenewUntilLostOrStopped();
  bool TryAcquireOrRenew();
  void Release();
  // Records the lease spec as seen; restarts the expiry clock when it differs from the last one.
  void Observe(const Json& spec);
  bool SleepUnlessStopped(Clock::duration delay);
  void SetLeaderUntil(Clock::time_point until);

  std::shared_ptr<Client> client_;
  LeaderElectionConfig config_;
  std::atomic<bool> leader_{false};
  std::atomic<Clock::rep> leader_until_{0};       // IsLeader() is false from this instant on
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
  mutable std::mutex mu_;
  std::string observed_leader_;
  Clock::time_point observed_at_;
  std::string observed_record_;     // the whole spec as last seen, to detect progress
};

}  // namespace fleet::kube
