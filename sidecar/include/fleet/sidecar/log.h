// One line per event to stderr: "2025-01-02T03:04:05.678Z fleet-sidecar[<ns>/<pod>] message".
// Lines are written with one write(2) each, so threads never interleave within a line.
#pragma once

#include <functional>
#include <memory>
#include <string>

namespace fleet::sidecar {

class Logger {
 public:
  using Sink = std::function<void(const std::string& line)>;   // gets the line with its newline
  // `context` goes into every line's prefix; without a sink, lines go to stderr.
  explicit Logger(std::string context = "", Sink sink = nullptr);
  void operator()(const std::string& message) const;

 private:
  std::string prefix_;
  Sink sink_;
};

}  // namespace fleet::sidecar
