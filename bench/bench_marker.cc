// The process the launcher benchmark starts: records when it began running (CLOCK_MONOTONIC, ns)
// in $BENCH_MARK_DIR/<pid>, then waits for $BENCH_MARK_DIR/release so that the launcher is measured
// while it holds all of its children.
#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

int main() {
  timespec now{};
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  const char* dir = std::getenv("BENCH_MARK_DIR");
  if (!dir) return 2;
  const long long ns = static_cast<long long>(now.tv_sec) * 1000000000LL + now.tv_nsec;
  const std::string tmp = std::string(dir) + "/." + std::to_string(::getpid());
  const std::string path = std::string(dir) + "/" + std::to_string(::getpid());
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) return 3;
  std::fprintf(f, "%lld\n", ns);
  std::fclose(f);
  std::rename(tmp.c_str(), path.c_str());  // the driver only ever sees complete files
  const std::string release = std::string(dir) + "/release";
  while (::access(release.c_str(), F_OK) != 0) ::usleep(2000);
  return 0;
}
