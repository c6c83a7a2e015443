// TrainerAttempts: fleet-sidecar's half of the in-place restart (--in-place; api/in_place.h,
// docs/design/fast-failures.md §5, docs/sidecar.md "In-place restart"). The kubelet restarts the
// pod's main container in place; each start of it is a trainer *instance*, named "<pid>:<starttime>"
// after the container's first process (the env hook finds it: its parent pid is 0 in the pod's
// shared PID namespace). An instance passes the gate inside the trainer (the hook's GET /gate) into
// the run then open and is *bound* to it; one binding per pod, the latest.
//
//   open run     the endpoints ConfigMap's run annotation, unless its barrier holds it
//                (RunAnnotations::OpenRun; the gate's watch says when they change).
//   GET /gate?run=E&instance=P:S  (the loopback listener; a long poll)
//                the bound instance: 200 {"run": bound run} at once (a second Python program of
//                the same container start). Else the floor is max(E, bound run + 1) (E without a
//                binding): once the open run is >= floor, the instance is bound to it and gets 200
//                {"run": N}; after gate_poll without, 202 {"waiting": why, "run": floor} (it asks
//                again). 400 for a malformed query, 429 when max_waiters requests wait already.
//   GET /trainer-live  (the pod IP listener: the main containers' liveness probe)
//                503 while the bound instance is alive and its run is older than the ConfigMap's
//                run annotation (barrier or not): the kubelet restarts it; else 200.
//   Trainer condition (api::kTrainerConditionType, status True only for Running):
//                Running(bound run) while the bound instance is alive; else AtGate(floor) while
//                an instance waits at the gate (from its first request until it passes or is seen
//                dead); else Exited(bound run) once the bound instance is seen dead. Running wins
//                over a waiter: a container start never overlaps the previous one, so a second
//                instance beside a live bound one is a process exec'd into the container, not a
//                restart, and must not read as the end of the run.
//
// Alive: <proc>/<pid>/stat exists with the same start time and is not a zombie.
//
// Thread: one of its own (Start/Stop) checks the instances every check_interval and writes the
// condition whenever what it says changes, the latest state only, retrying failed writes with a
// capped backoff. The HTTP servers' threads only wait and notify: no API request runs on them.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "fleet/api/in_place.h"
#include "fleet/api/sidecar_report.h"
#include "fleet/base/log.h"
#include "fleet/base/result.h"
#include "fleet/httpd/http_server.h"
#include "fleet/kube/client.h"
#include "fleet/sidecar/verdict.h"

namespace fleet::sidecar {

// One start of the main container: its first process.
struct TrainerInstance {
  pid_t pid = 0;
  uint64_t start_time = 0;     // field 22 of /proc/<pid>/stat

  std::string ToString() const { return std::to_string(pid) + ":" + std::to_string(start_time); }
  // "P:S" (P a pid > 0, S a start time); an error naming the parameter otherwise.
  static Result<TrainerInstance> Parse(std::string_view text);
  friend bool operator==(const TrainerInstance& a, const TrainerInstance& b) {
    return a.pid == b.pid && a.start_time == b.start_time;
  }
};

struct TrainerAttemptsConfig {
  std::string ns;                                   // the pod whose Trainer condition it writes
  std::string pod;
  std::string proc = "/proc";
  std::chrono::milliseconds gate_poll{10000};       // a waiting GET /gate answers 202 after this
  std::chrono::milliseconds check_interval{500};    // how often the instances are checked
  int max_waiters = 4;
  std::chrono::milliseconds retry_base{500};        // a failed condition write is retried after this,
  std::chrono::milliseconds retry_max{10000};       // doubling up to this
  int conflict_retries = 5;
};

class TrainerAttempts {
 public:
  // `client` may be null: no condition is written (the report still says it).
  TrainerAttempts(TrainerAttemptsConfig config, Logger log, std::shared_ptr<kube::Client> client);
  ~TrainerAttempts();
  TrainerAttempts(const TrainerAttempts&) = delete;
  TrainerAttempts& operator=(const TrainerAttempts&) = delete;

  void Start();
  // Ends the thread and answers waiting requests 503. True when the thread ended within `timeout`
  // (false: it is inside an API request).
  bool Stop(std::chrono::milliseconds timeout);

  // The endpoints ConfigMap's annotations, as they change.
  void SetRunAnnotations(const RunAnnotations& annotations);

  // GET /gate with `query`: blocks up to gate_poll.
  httpd::Response Gate(const std::string& query);
  // GET /trainer-live.
  httpd::Response Live();
  httpd::Route GateRoute();
  httpd::Route LiveRoute();

  // The trainer as the condition says it now (nullopt before any instance asked the gate), with the
  // condition's last failed write.
  std::optional<api::SidecarReport::Trainer> Report() const;
  int waiting_requests() const;      // GET /gate requests waiting now

 private:
  using Clock = std::chrono::steady_clock;
  struct Binding {
    TrainerInstance instance;
    int run = 0;
  };
  struct Waiter {
    TrainerInstance instance;
    int floor = 0;
  };
  // The condition's content: `report` about `instance`.
  struct Desired {
    api::TrainerReport report;
    TrainerInstance instance;
    std::string message;
    bool operator==(const Desired& o) const {
      return report.state == o.report.state && report.run == o.report.run && message == o.message;
    }
  };

  void Loop();
  // Under mu_:
  bool AliveLocked(const TrainerInstance& instance) const;
  int FloorLocked(int expected) const;
  std::optional<Desired> DesiredLocked() const;
  std::string WhyWaitingLocked(int floor) const;
  void BindLocked(const TrainerInstance& instance, int run);
  void WakeLocked();

  const TrainerAttemptsConfig config_;
  const Logger log_;
  std::shared_ptr<kube::Client> client_;

  mutable std::mutex mu_;
  std::condition_variable cv_;       // any change: gate waiters and the thread wait on it
  RunAnnotations annotations_;
  std::optional<Binding> binding_;
  std::optional<Waiter> waiter_;     // the latest instance to wait at the gate, until it passes or dies
  int waiting_requests_ = 0;
  bool wake_ = false;                // the thread has a change to look at
  bool stopping_ = false;
  bool running_ = false;
  bool refusal_logged_ = false;      // /trainer-live's 503 for this binding has been logged
  std::optional<Desired> written_;
  std::string write_error_;
  std::thread thread_;
};

}  // namespace fleet::sidecar
