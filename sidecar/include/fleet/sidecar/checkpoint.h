// Checkpoint before stop (spec.checkpoint.beforeStop; docs/sidecar.md, "Checkpoint before stop").
// The kubelet runs the trainer container's preStop hook, GET /checkpoint on the sidecar, before it
// sends the trainer SIGTERM. The sidecar asks the trainer through files in a directory both mount:
//
//   <dir>/request  written by the sidecar (atomically: a rename), JSON
//                  {"reason": "preStop", "deadline": "2026-11-29T01:00:30Z", "timeoutSeconds": 30}
//   <dir>/done     written by the trainer once its checkpoint is saved: the step, one integer
//
// and waits for `done` until the timeout, then answers 200 whatever happened (a failed preStop
// hook only delays the kill). The outcome goes to a callback (the agent writes it into the pod's
// Checkpoint condition, before the answer) and into GET /status. A request while one is pending
// joins it; a malformed done file (not an integer, too large, over 64 bytes) ends the wait at once
// as Invalid, and none is a timeout: never a crash.
//
// The route listens where the kubelet reaches it, the pod's address, so anyone on the pod network
// may call it too. What a caller can do is bounded: at most kMaxJoiners requests wait beside the
// pending one (each holds one of the server's workers; more are refused with 429, so probes and
// scrapes keep theirs), and a request within the timeout after an answer gets that answer again
// without asking the trainer (one stop is one checkpoint, however many hooks or callers ask).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

#include "fleet/base/log.h"
#include "fleet/httpd/http_server.h"

namespace fleet::sidecar {

struct CheckpointOptions {
  std::string dir;                                  // --checkpoint-dir ("" = no /checkpoint)
  std::chrono::milliseconds timeout{30000};         // --checkpoint-timeout
  std::chrono::milliseconds poll_interval{100};     // how often `done` is looked for
};

struct CheckpointOutcome {
  std::string result;                // api::kCheckpointSaved, kCheckpointTimedOut or kCheckpointInvalid
  std::optional<int64_t> step;       // Saved
  std::string message;               // Saved: api::CheckpointMessage; else what happened
};

class Checkpointer {
 public:
  // Requests that may wait for a pending one: a pod's main containers each run the hook.
  static constexpr int kMaxJoiners = 8;
  using Record = std::function<void(const CheckpointOutcome&)>;
  // `record` is called once per answered request, before its HTTP answer, on a thread of its own
  // with a full stack (httpd::RunOnOwnThread): it may make API requests.
  Checkpointer(CheckpointOptions options, Logger log, Record record);

  // Asks the trainer for a checkpoint and waits for its answer or the timeout; a call while a
  // request is pending waits for that one's outcome, one soon after an answer gets it again, and
  // one past kMaxJoiners gets nullopt at once (the route's 429).
  std::optional<CheckpointOutcome> Request(const std::string& reason);
  // The last outcome (nullopt before the first).
  std::optional<CheckpointOutcome> last() const;
  // How many requests wait for the pending one.
  int joiners() const;
  // GET /checkpoint[?reason=TOKEN]: Request, answered 200 with the outcome as JSON.
  httpd::Route Route();

 private:
  CheckpointOutcome Ask(const std::string& reason);
  void RecordOutcome(const CheckpointOutcome& outcome);
  CheckpointOutcome Wait(std::chrono::steady_clock::time_point started);

  const CheckpointOptions options_;
  const Logger log_;
  const Record record_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool pending_ = false;
  int joiners_ = 0;                  // requests waiting for the pending one
  uint64_t answered_ = 0;            // requests answered so far
  std::chrono::steady_clock::time_point answered_at_;
  std::optional<CheckpointOutcome> last_;
};

}  // namespace fleet::sidecar
