// TokenBucket: qps tokens per second, up to `burst` banked. Used by the client (API request rate)
// and the work queue (overall retry rate). Thread-safe. qps <= 0 means unlimited.
#pragma once

#include <chrono>
#include <mutex>

namespace fleet::kube {

class TokenBucket {
 public:
  using Clock = std::chrono::steady_clock;
  TokenBucket(double qps, int burst);
  // Takes one token, returning how long the caller must wait before acting (zero when a token
  // was available). Reservations queue up: N callers at once get increasing delays.
  Clock::duration Reserve();
  // Reserve() and sleep for the delay.
  void Wait();

 private:
  std::mutex mu_;
  double qps_;
  double burst_;
  double tokens_;
  Clock::time_point last_;
};

}  // namespace fleet::kube
