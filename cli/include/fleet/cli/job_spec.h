// The FleetJob that `fleetctl submit` creates: from PaddleCloud-style flags, or a manifest checked
// and placed in the namespace. Pure (no I/O): tests/cli/job_spec_test.cc covers every rule.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "fleet/api/names.h"
#include "fleet/base/result.h"
#include "fleet/cli/command_line.h"

namespace fleet::cli {

using Json = nlohmann::json;

inline constexpr const char* kFleetJobApiVersion = api::kApiVersion;

// A FleetJob in namespace `ns` from the submit flags:
//   --server_num > 0: mode ps, `server_num` servers and `worker_num` workers running COMMAND;
//   else mode collective with `worker_num` pods. --gpus G puts nvidia.com/gpu: G on worker pods;
//   in a collective job G > 1 sets processesPerPod = G, and the pods run fleetrun, which starts one
//   process per GPU ("python [-u] train.py ARGS" becomes "fleetrun train.py ARGS").
// No --name: metadata.generateName from the script's file name ("train.py" -> "train-").
Result<Json> BuildFleetJob(const SubmitOptions& options, const std::string& ns);

// A manifest's one FleetJob (kind and apiVersion checked) and its namespace, as kubectl does: the
// object's own metadata.namespace unless -n was given (`ns_given`), where a different one is an
// error; else `ns` (the context's).
Result<Json> PrepareManifest(std::vector<Json> documents, const std::string& ns, bool ns_given);

}  // namespace fleet::cli
