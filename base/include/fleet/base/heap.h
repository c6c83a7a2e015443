// Hands memory that malloc holds free back to the system.
#pragma once

#if defined(__GLIBC__)
#include <malloc.h>
#endif

// Under a sanitizer the process allocates through the sanitizer's allocator and glibc's arenas are
// never set up: malloc_trim then walks arenas that are not there, and two threads doing so at once
// crash (seen: a SEGV in glibc's mtrim in an AddressSanitizer build of the operator). There is
// nothing of glibc's to return in such a build.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define FLEET_SANITIZER_ALLOCATOR 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
#define FLEET_SANITIZER_ALLOCATOR 1
#endif
#endif

namespace fleet {

// glibc keeps the holes freed objects leave in a thread's heap unless asked; this asks. It walks the
// whole heap (milliseconds in a big process), so callers do it after bursts, not per object.
inline void ReturnFreedHeap() {
#if defined(__GLIBC__) && !defined(FLEET_SANITIZER_ALLOCATOR)
  malloc_trim(0);
#endif
}

}  // namespace fleet
