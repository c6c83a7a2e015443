#include <absl/synchronization/mutex.h>
#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "wire.h"

namespace fleet::ps {

void TuneProcessOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Debian builds Abseil without NDEBUG, which leaves absl::Mutex's debug-only deadlock detection
    // on: every lock gRPC takes updates a global lock-order graph (8% of the CPU of a small dense
    // push + pull). gRPC's own release builds have it off.
    absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
    const char* env = std::getenv("FLEET_PS_MALLOC_TUNING");
    if (env && std::strcmp(env, "0") == 0) return;
    ::mallopt(M_MMAP_THRESHOLD, 32 << 20);   // glibc's largest: chunks up to 32 MiB come from the heap
    ::mallopt(M_TRIM_THRESHOLD, 512 << 20);  // and freed memory is kept for the next message
  });
}

}  // namespace fleet::ps
