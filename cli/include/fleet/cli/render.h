// What fleetctl prints: tables and reports for people, documents for -o json|yaml. Pure: the
// current time comes in as `now` (Unix seconds).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fleet::cli {

using Json = nlohmann::json;

// kubectl's ages: 45s, 3m20s, 17m, 5h12m, 2d3h, 400d.
std::string FormatAge(int64_t seconds);
// RFC 3339 (as the API writes it) -> Unix seconds; -1 when `text` is not one.
int64_t ParseTime(const std::string& text);

// Columns padded to the widest cell, separated by three spaces; no trailing blanks.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows);

// The role names of a job in pod-name order: server, worker, then the heter stages.
std::vector<std::string> RoleNames(const Json& job);

// `fleetctl list`: NAME MODE PHASE SERVERS WORKERS RESTARTS AGE (NAMESPACE first with -A);
// SERVERS and WORKERS as ready/replicas.
std::string JobsTable(const Json& jobs, bool with_namespace, int64_t now);

// `fleetctl status -o json|yaml`: the job's name, namespace, phase, mode, network, run, restarts,
// message, times, per-role counts, conditions, the pods that are not Running/Succeeded (with
// their phase and why), and the `max_events` most recent events (oldest first).
Json StatusDocument(const Json& job, const Json& pods, const Json& events, int max_events);
// The same for people.
std::string StatusText(const Json& status_document, int64_t now);

// One line of `submit --wait` progress: "Starting  server 1/2 ready  worker 0/4 ready".
std::string ProgressLine(const Json& job);

}  // namespace fleet::cli
