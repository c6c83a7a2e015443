#include <malloc.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "wire.h"

namespace fleet::ps {

void TuneAllocatorOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    const char* env = std::getenv("FLEET_PS_MALLOC_TUNING");
    if (env && std::strcmp(env, "0") == 0) return;
    ::mallopt(M_MMAP_THRESHOLD, 32 << 20);   // glibc's largest: chunks up to 32 MiB come from the heap
    ::mallopt(M_TRIM_THRESHOLD, 512 << 20);  // and freed memory is kept for the next message
  });
}

}  // namespace fleet::ps
