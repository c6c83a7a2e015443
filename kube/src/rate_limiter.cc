// TokenBucket: tokens may go negative; the debt is the queue of callers already promised a slot,
// so the N-th concurrent caller waits N/qps rather than everyone racing for the next token.
#include "fleet/kube/rate_limiter.h"

#include <algorithm>
#include <thread>

namespace fleet::kube {

TokenBucket::TokenBucket(double qps, int burst)
    : qps_(qps),
      burst_(std::max(1.0, static_cast<double>(burst))),
      tokens_(burst_),
      last_(Clock::now()) {}

TokenBucket::Clock::duration TokenBucket::Reserve() {
  if (qps_ <= 0) return Clock::duration::zero();
  std::lock_guard<std::mutex> lock(mu_);
  const Clock::time_point now = Clock::now();
  const double elapsed = std::chrono::duration<double>(now - last_).count();
  tokens_ = std::min(burst_, tokens_ + elapsed * qps_);
  last_ = now;
  tokens_ -= 1;
  if (tokens_ >= 0) return Clock::duration::zero();
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(-tokens_ / qps_));
}

void TokenBucket::Wait() {
  const Clock::duration delay = Reserve();
  if (delay > Clock::duration::zero()) std::this_thread::sleep_for(delay);
}

}  // namespace fleet::kube
