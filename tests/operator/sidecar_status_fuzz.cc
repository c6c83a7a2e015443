// libFuzzer target: the operator's reading of a sidecar's GET /status answer (ParseSidecarStatus)
// and the summary made of it (SummarizeProgress), on any bytes - the answer is untrusted (the job's
// author chooses the sidecar image: docs/security.md, "The progress path"). Built by clang with
// -DFLEET_FUZZ=ON (tests/operator/CMakeLists.txt); with -DFLEET_SANITIZE=address,undefined it also
// stops at undefined behaviour. Beyond not crashing, it checks what the summary promises: steps
// and speeds are never negative, the percent is within 0..100, no number is NaN (null).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "fleet/operator/progress.h"

namespace {

using fleet::op::Json;

void Check(bool ok) {
  if (!ok) std::abort();
}

void CheckNoNull(const Json& j) {
  Check(!j.is_null());
  if (j.is_structured()) {
    for (const Json& v : j) CheckNoNull(v);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  auto ranks = fleet::op::ParseSidecarStatus(body, "worker", "j-worker-0");
  if (!ranks.ok() || ranks->empty()) return 0;
  // The same answer as the previous collection's, with the speeds it gives.
  const std::vector<fleet::op::RankReport> previous(ranks->begin(), ranks->end() - 1);
  fleet::op::ProgressInput in;
  in.ranks = *ranks;
  in.previous = &previous;
  in.seconds_since_previous = 1e-3;
  in.total_steps = size % 2 ? 0 : int64_t{1} << 50;
  const auto summary = fleet::op::SummarizeProgress(in);
  Check(summary.has_value());
  const Json p = summary->ToJson();
  CheckNoNull(p);
  Check(p["step"].get<int64_t>() >= 0);
  if (p.contains("percent")) Check(p["percent"].get<double>() >= 0 && p["percent"].get<double>() <= 100);
  if (p.contains("stepsPerSecond")) Check(p["stepsPerSecond"].get<double>() >= 0);
  if (p.contains("etaSeconds")) Check(p["etaSeconds"].get<int64_t>() >= 0);
  for (const Json& d : p["rankDetails"]) Check(d["step"].get<int64_t>() >= 0 && d["lag"].get<int64_t>() >= 0);
  return 0;
}
