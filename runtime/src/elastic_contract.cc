#include "fleet/runtime/elastic_contract.h"

#include <vector>

#include "fleet/base/strings.h"

namespace fleet {

Result<NpRange> ParseNpRange(std::string_view text) {
  const std::vector<std::string> parts = SplitString(TrimWhitespace(text), ':');
  if (parts.size() > 2) return Error{"must be N or MIN:MAX"};
  NpRange np;
  auto min = ParseNonNegativeInt(parts[0], "N");
  if (!min) return Error{"must be N or MIN:MAX, in whole numbers"};
  np.min = np.max = *min;
  if (parts.size() == 2) {
    auto max = ParseNonNegativeInt(parts[1], "MAX");
    if (!max) return Error{"must be N or MIN:MAX, in whole numbers"};
    np.max = *max;
  }
  if (np.min < 1) return Error{"a job needs at least 1 node"};
  if (np.max < np.min) return Error{"MAX is below MIN"};
  return np;
}

std::string FormatNpRange(const NpRange& np) { return std::to_string(np.min) + ":" + std::to_string(np.max); }

std::string FormatNpShort(const NpRange& np) { return np.fixed() ? std::to_string(np.min) : FormatNpRange(np); }

Status CheckElasticJobId(std::string_view job_id) {
  if (job_id.empty()) return Error{"must not be empty"};
  if (job_id.find('/') != std::string_view::npos) return Error{Quote(job_id) + " must not contain '/'"};
  return OkStatus();
}

}  // namespace fleet
