// The calling thread's stack size: what a handler's work has (httpd::RunOnOwnThread).
#pragma once

#include <pthread.h>

#include <cstddef>

namespace fleet::httpd::testing {

inline size_t ThreadStackSize() {
  pthread_attr_t attr;
  size_t size = 0;
  if (pthread_getattr_np(pthread_self(), &attr) != 0) return 0;
  pthread_attr_getstacksize(&attr, &size);
  pthread_attr_destroy(&attr);
  return size;
}

}  // namespace fleet::httpd::testing
