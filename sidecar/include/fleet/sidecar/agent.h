// Agent: what fleet-sidecar does for the rest of the pod's life once the gate is open (or at once,
// for `fleet-sidecar agent`): it turns the trainer's step logs and pushed step reports into
// fleet_training_* metrics, judges readiness, detects stalls and writes the pod's TrainingProgress
// condition.
//
// Threads:
//   agent: one poll(2) loop over the push API's datagram sockets (UDP on loopback, a Unix socket)
//     and a timer: every --log-poll-interval it reads new log lines (LogTailer); every second it
//     checks the main process (MainProcessWatcher), evaluates stalls and updates the condition.
//   peers: for parameter-server trainers, after the gate, a TCP probe of every server each
//     --peer-check-interval.
//   condition: the ConditionWriter (API requests), when a client is given.
//   trainer: with --in-place, TrainerAttempts' thread (trainer_attempts.h): the trainer's instances
//     and the pod's Trainer condition.
//   The HTTP push API (POST /v1/report) runs on the caller's HttpServer (ReportRoute()), and so
//   does GET /checkpoint (CheckpointRoute(), with --checkpoint-dir): the request's own thread waits
//   for the trainer and writes the pod's Checkpoint condition. With --in-place, so do the trainers'
//   gate (GateRoute(), on the loopback server) and liveness probe (TrainerLiveRoute()).
//
// Ready (NotReady() == "") = the gate is open, every peer accepted a connection in the latest
// check, the main process runs (when it can be observed), and no rank is stalled: a rank that has
// reported steps but none for longer than --stall-window (while the main process runs).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "fleet/base/log.h"
#include "fleet/httpd/http_server.h"
#include "fleet/kube/client.h"
#include "fleet/runtime/endpoint.h"
#include "fleet/sidecar/checkpoint.h"
#include "fleet/sidecar/condition.h"
#include "fleet/sidecar/options.h"
#include "fleet/sidecar/step_parser.h"
#include "fleet/sidecar/training_metrics.h"
#include "fleet/sidecar/verdict.h"

namespace prometheus {
class Registry;
}

namespace fleet::sidecar {

class LogTailer;
class MainProcessWatcher;
class PeerProber;
class TrainerAttempts;

struct AgentConfig {
  PodIdentity identity;
  AgentOptions options;
  bool gated = true;                                      // false: no gate to wait for (`agent`)
  bool in_place = false;                                  // --in-place: TrainerAttempts
  std::chrono::milliseconds server_connect_timeout{1000};
  std::chrono::milliseconds tick{1000};                   // process checks, stall evaluation
  std::string proc = "/proc";
  ConditionWriterConfig condition;                        // ns/pod/job/role filled from identity

  static AgentConfig FromOptions(const GateOptions& gate, const AgentOptions& agent, bool gated);
};

class Agent {
 public:
  enum class Source { kLog, kHttp, kUdp, kUnix };

  // `client` may be null: no pod conditions. The TrainingProgress condition is written only with
  // --pod-condition, the Trainer condition with --in-place.
  Agent(AgentConfig config, Logger log, std::shared_ptr<prometheus::Registry> registry,
        std::shared_ptr<kube::Client> client);
  ~Agent();
  Agent(const Agent&) = delete;
  Agent& operator=(const Agent&) = delete;

  // Binds the push API's datagram sockets and starts the threads; an error names the socket.
  Status Start();
  // The gate opened: readiness, the condition and peer checks begin. `servers`: the peers this pod's
  // trainer depends on (the gate's); `peer_wait_seconds`: how long the gate waited for them.
  void GateOpened(std::vector<Endpoint> servers, double peer_wait_seconds);
  // True when every thread ended within `timeout`.
  bool Stop(std::chrono::milliseconds timeout);

  // "" when ready, else why not. `gate_open`: the caller knows the gate is open, which the agent
  // hears a moment later (the main loop tells it): /readyz asks the gate first and passes it.
  std::string NotReady(bool gate_open = false) const;
  httpd::Route ReportRoute();                // POST /v1/report (JSON, or text protocol lines)
  httpd::Route StatusRoute();                // GET /status: the agent's state as JSON
  // GET /checkpoint (checkpoint.h); nullopt without --checkpoint-dir.
  std::optional<httpd::Route> CheckpointRoute();
  // With --in-place (else nullopt / nothing): GET /gate and GET /trainer-live (trainer_attempts.h),
  // and the endpoints ConfigMap's run annotations as the gate's watch sees them change.
  std::optional<httpd::Route> GateRoute();
  std::optional<httpd::Route> TrainerLiveRoute();
  void RunAnnotationsChanged(const RunAnnotations& annotations);
  int udp_port() const { return udp_port_; }   // the bound UDP port (0: none)
  TrainingMetrics& metrics() { return *metrics_; }

  // The text protocol as the datagram sockets apply it (a test seam).
  void IngestText(std::string_view datagram, Source source);

 private:
  struct Health;
  using Clock = std::chrono::steady_clock;
  static constexpr size_t kBatch = 64;

  void Loop();
  void PeerLoop();
  void Tick(Clock::time_point now);
  void OnLogLines(int rank_offset, const std::vector<std::string_view>& lines, bool live);
  void DrainDatagrams(int fd, Source source);
  void ApplyBatch(Source source, bool timed);
  httpd::Response ApplyReports(const std::vector<StepRecord>& records);
  PodCondition ConditionLocked(const std::vector<RankProgress>& progress) const;
  std::string NotReadyLocked(bool gate_open = false) const;
  std::string RankName(int rank) const;

  AgentConfig config_;
  const Logger log_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<TrainingMetrics> metrics_;
  std::unique_ptr<Health> health_;
  std::vector<StepPattern> patterns_;
  std::unique_ptr<LogTailer> tailer_;
  std::unique_ptr<MainProcessWatcher> watcher_;
  std::unique_ptr<ConditionWriter> writer_;
  std::unique_ptr<Checkpointer> checkpointer_;
  std::unique_ptr<PeerProber> prober_;
  std::unique_ptr<TrainerAttempts> trainer_;
  kube::CancelToken cancel_;

  // Owned by the agent thread: the batch being parsed.
  std::vector<StepRecord> records_;
  std::vector<TrainingMetrics::Input> inputs_;
  std::vector<LineParser> line_parsers_;       // per log rank offset (each file keeps its own format)

  int wake_fd_ = -1;
  int udp_fd_ = -1;
  int unix_fd_ = -1;
  int udp_port_ = 0;
  uint64_t tail_lines_seen_ = 0, tail_bytes_seen_ = 0, tail_long_seen_ = 0, tail_trunc_seen_ = 0,
           tail_rot_seen_ = 0;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;
  bool stopping_ = false;
  bool gate_open_ = false;
  std::vector<Endpoint> servers_;
  std::vector<std::string> unreachable_;       // peers that failed the latest check
  bool peers_checked_ = false;
  bool main_observed_ = false;                 // main process detection is on
  bool main_running_ = false;
  pid_t main_pid_ = 0;
  std::string main_command_;
  std::vector<RankProgress> stalled_;
  std::vector<RankProgress> progress_;
  std::string stall_logged_;
  int running_threads_ = 0;
  std::thread loop_thread_;
  std::thread peer_thread_;
};

// "45s", "10m5s", "1h2m3s"
std::string FormatSeconds(double seconds);

}  // namespace fleet::sidecar
