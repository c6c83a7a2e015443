#include "fleet/sidecar/log.h"

#include "fleet/serving/log.h"

#include <unistd.h>

#include <cerrno>

namespace fleet::sidecar {

Logger::Logger(std::string context, Sink sink)
    : prefix_(context.empty() ? " fleet-sidecar: " : " fleet-sidecar[" + context + "]: "), sink_(std::move(sink)) {}

void Logger::operator()(const std::string& message) const {
  std::string line = serving::LogTimestamp() + prefix_ + message + "\n";
  if (sink_) {
    sink_(line);
    return;
  }
  const char* p = line.data();
  size_t left = line.size();
  while (left > 0) {
    const ssize_t n = ::write(STDERR_FILENO, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

}  // namespace fleet::sidecar
