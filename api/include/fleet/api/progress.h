// status.progress: a job's training progress as the operator summarizes its sidecars' reports
// (docs/operator.md, "Training progress"), typed for the operator that writes it and fleetctl
// that reads it. The keys are spelt once, in progress.cc, and declared in the CRD's schema.
//
// FromJson never throws: a member of the wrong type reads as unset (an integer member also from a
// whole JSON float such as 60.0, which the API server accepts as an integer, but not from one past
// int64: never wrapped), and keys this version does not know are kept for ToJson (written by a
// newer operator); unknown keys inside a role or a rank are dropped, as the operator writes each
// whole. ToJson(FromJson(x)) == x for what an operator writes.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fleet::api {

using Json = nlohmann::json;
using Time = std::chrono::system_clock::time_point;

// status.progress.roles[<role>]: one training role's ranks (workers, each heter stage).
struct RoleProgress {
  int ranks = 0;                             // expected
  int reporting_ranks = 0;
  int64_t min_step = 0;
  int64_t median_step = 0;
  int64_t max_step = 0;
  std::optional<double> steps_per_second;    // the median rank's
  std::optional<double> loss;                // the lowest rank's that reports one
};

// One rank: status.progress.slowest and each of status.progress.rankDetails.
struct RankProgress {
  std::string role;
  int rank = 0;
  std::string pod;
  // The operator writes both; a reader shows them unknown when absent (not step 0, not on time).
  std::optional<int64_t> step;
  std::optional<int64_t> lag;                // steps behind its role's median
  // rankDetails only (slowest has none of these):
  std::optional<int64_t> idle_seconds;
  std::optional<bool> stalled;
  std::optional<double> steps_per_second;
  std::optional<double> loss;
};

struct Progress {
  std::optional<Time> update_time;           // when the operator wrote it (milliseconds)
  std::optional<int64_t> step;               // the median worker's steps trained (none: not reported yet)
  std::optional<int64_t> total_steps;
  std::optional<double> percent;
  std::optional<int64_t> eta_seconds;
  std::optional<double> steps_per_second;
  std::optional<double> samples_per_second;
  std::optional<double> loss;
  int ranks = 0;
  int reporting_ranks = 0;
  int stalled_ranks = 0;
  std::map<std::string, RoleProgress> roles;
  std::optional<RankProgress> slowest;
  std::vector<RankProgress> rank_details;    // the slowest first
  // The same, written for kubectl's columns.
  std::string step_text;
  std::optional<std::string> speed_text;
  std::optional<std::string> eta_text;
  std::string slowest_text;

  Json unknown_fields = Json::object();      // kept for round trips

  static Progress FromJson(const Json& progress);
  Json ToJson() const;
};

// Equal when they would write the same status.progress.
bool operator==(const Progress& a, const Progress& b);
inline bool operator!=(const Progress& a, const Progress& b) { return !(a == b); }

}  // namespace fleet::api
