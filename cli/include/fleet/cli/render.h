// What fleetctl prints: tables and reports for people, documents for -o json|yaml. Pure: the
// current time comes in as `now` (Unix seconds).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "fleet/api/job_status.h"

namespace fleet::cli {

using Json = nlohmann::json;

// Text from the cluster as fleetctl prints it for people: control characters escaped (ESC, BEL, a
// newline: EscapeControl) and at most kMaxPrintedText bytes, cut at a character. A job's message,
// a condition's (a sidecar's, an echoed spec pattern), a pod's name cannot move the cursor, ring
// the bell, forge a line or flood the terminal. Every renderer here prints outside text through it;
// the -o json|yaml documents keep the text as the API has it.
constexpr size_t kMaxPrintedText = 1024;
std::string Printable(std::string_view text);

// RFC 3339 (as the API writes it) -> Unix seconds; -1 when `text` is not one.
int64_t ParseTime(const std::string& text);

// A job's .status, typed (fleet::api): an empty status before the operator has seen the job.
api::FleetJobStatus StatusOf(const Json& job);
// status.phase as written, a phase this fleetctl does not know (a newer operator's) included; ""
// when the job has none yet.
std::string PhaseText(const api::FleetJobStatus& status);

// Columns padded to the widest cell, separated by three spaces; no trailing blanks.
std::string FormatTable(const std::vector<std::vector<std::string>>& rows);

// The role names of a job in pod-name order: server, worker, then the heter stages.
std::vector<std::string> RoleNames(const Json& job);

// `fleetctl list`: NAME MODE PHASE SERVERS WORKERS HETER RESTARTS AGE (NAMESPACE first with -A);
// SERVERS, WORKERS and HETER (every heter stage together) as ready/replicas, counted as
// ProgressLine counts them: ready from status.replicaStatuses, replicas from the spec.
std::string JobsTable(const Json& jobs, bool with_namespace, int64_t now);

// `fleetctl status`: what it shows of one job — name, namespace, phase, mode, network, run,
// restarts, message, times, per-role counts, the training progress, an elastic job's members, the
// conditions, the pods that are not Running/Succeeded (with their phase and why) and the
// `max_events` most recent events (oldest first) — read once from the job, its pods and its events.
// ToJson is the -o json|yaml document; StatusText what people read.
struct StatusDocument {
  struct Role {
    std::string role;
    api::ReplicaStatus counts;
  };
  struct Elastic {                       // spec.elastic, and status.elastic as observed
    int64_t min_replicas = 0;
    int64_t max_replicas = 0;
    int64_t timeout_seconds = 0;
    std::string etcd_endpoint;
    std::vector<std::string> members;
    int64_t rendezvous = 0;
    std::string below_minimum_since;     // RFC 3339; "" when it has enough members
  };
  struct WaitingPod {
    std::string pod;
    std::string phase;
    std::string why;                     // "Unschedulable: ...", "paddle: exit code 137 (OOMKilled)"
  };
  struct Event {
    std::string type;
    std::string reason;
    std::string message;
    int64_t count = 1;
    std::string last_timestamp;
  };

  std::string name;
  std::string ns;
  std::string phase;
  std::string mode;
  std::string network;
  int64_t run = 0;
  int64_t restart_count = 0;
  int64_t ignored_failures = 0;            // restarts a failure rule's Ignore did not count
  std::string message;
  std::string created;
  std::string start_time;
  std::string completion_time;
  std::vector<Role> roles;
  // status.progress and .conditions as the API has them (also what this fleetctl cannot read):
  // printed through their api types, passed on whole in the document.
  Json progress;
  Json conditions = Json::array();
  std::optional<Elastic> elastic;
  std::optional<api::QueueStatus> queue;   // status.queue: a job queued in Kueue
  std::optional<api::CheckpointStatus> checkpoint;   // status.checkpoint: saved before a stop
  std::vector<WaitingPod> pods_not_running;
  std::vector<Event> events;

  static StatusDocument Of(const Json& job, const Json& pods, const Json& events, int max_events);
  static StatusDocument FromJson(const Json& document);   // as ToJson wrote it
  Json ToJson() const;
};
std::string StatusText(const StatusDocument& document, int64_t now);

// One line of `submit --wait` progress: "Starting  server 1/2 ready  worker 0/4 ready".
std::string ProgressLine(const Json& job);

// ---- training progress (status.progress, written by the operator from the sidecars) -------------

// status.progress older than this (3 of the operator's usual 10 s collection intervals) is shown
// with its age: the numbers may no longer be what the job does.
constexpr int64_t kStaleProgressSeconds = 30;

// "[#####...............]": `width` cells, one "#" per whole 1/width of `percent` done.
std::string ProgressBar(double percent, int width = 20);

// The job's training progress in one line, from status.progress:
//   "[####................] 24%  step 1200/5000  3.1 step/s  ETA 21m  loss 0.42"
// (no bar, percent or ETA when the total is unknown: "step 1200  3.1 step/s  loss 0.42"), with
// "  (updated 5m ago)" when it is stale. "" when `progress` is not an object.
std::string ProgressSummary(const Json& progress, int64_t now);

// `submit --wait`'s lines for one job: "NAME: " ProgressLine, and ProgressSummary once the job
// reports progress. On a terminal the line is rewritten in place ("\r", erase to its end) and a
// new line starts when the phase or the ready counts change. Elsewhere a line is written when
// they change, and when only the training progress changed at most every kPlainProgressSeconds.
class WaitProgress {
 public:
  static constexpr int64_t kPlainProgressSeconds = 5;

  WaitProgress(std::string name, bool terminal) : name_(std::move(name)), terminal_(terminal) {}
  // What to write for this state of the job ("" for nothing).
  std::string Update(const Json& job, int64_t now);
  // What ends the output: "\n" when a line is open on a terminal.
  std::string Finish();

 private:
  std::string name_;
  bool terminal_;
  std::string state_;         // the last ProgressLine written
  std::string line_;          // the last whole line written
  int64_t written_at_ = 0;
  bool open_ = false;         // a terminal line without its "\n" yet
};

// `fleetctl top`: a header with the job's phase and progress, then status.progress.rankDetails
// as a table - ROLE RANK POD STEP SPEED LOSS LAG IDLE and "stalled" - the straggler on top
// (lowest step first, a rank without one first of all; then the longest idle). The operator
// keeps the 20 slowest ranks, and top shows kTopRows whatever the status holds: for a bigger
// job a last line says how many of how many are shown.
constexpr size_t kTopRows = 20;
std::string TopText(const Json& job, int64_t now);

}  // namespace fleet::cli
