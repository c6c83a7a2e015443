// Gate: the startup gate of one FleetJob pod. It opens, once and for good, when the job's endpoints
// ConfigMap of this pod's run is published and (for parameter-server trainers) every server in it
// accepts a TCP connection. Until then /startup and /readyz answer 503 with what it waits for.
//
// Two threads:
//   watch: List + Watch of the one ConfigMap (fieldSelector metadata.name=<name>), the only API
//     access. A watch that times out is resumed from the last resourceVersion; one that fails (or
//     ends at once, empty) is followed, after a jittered exponential backoff, by a fresh list; 410
//     Gone lists again at once.
//   probe: while the ConfigMap is ready and servers are pending, probes them (PeerProber) in rounds
//     with a capped exponential backoff; a server that accepted once counts as reached.
// Both end when the gate opens: nothing after that depends on the API, so an open gate holds no
// watch on the API server for the rest of the job. With keep_watching (--in-place) the watch goes
// on: an in-place restart moves the ConfigMap to the next run under this pod, and the agent's
// trainer gate follows its run and barrier annotations (OnRunAnnotations).
//
// Every change of what the gate waits for is logged as one line; /startup says the same.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "fleet/base/log.h"
#include "fleet/httpd/http_server.h"
#include "fleet/kube/client.h"
#include "fleet/sidecar/options.h"
#include "fleet/sidecar/peer_probe.h"
#include "fleet/sidecar/verdict.h"

namespace prometheus {
class Registry;
class Gauge;
class Counter;
}  // namespace prometheus

namespace fleet::sidecar {

struct GateConfig {
  GateTarget target;                 // namespace, ConfigMap, role, run, mode
  std::string job;
  std::string pod;
  std::chrono::milliseconds server_connect_timeout{1000};
  std::chrono::milliseconds server_retry_base{100};
  std::chrono::milliseconds server_retry_max{2000};
  std::chrono::seconds watch_timeout{300};
  std::chrono::milliseconds api_backoff_base{250};
  std::chrono::milliseconds api_backoff_max{10000};
  // A watch that ends without any event sooner than this counts as a failure (backoff, relist).
  std::chrono::milliseconds min_watch_duration{1000};
  // The client's request timeout: a watch that failed after running longer than this had been
  // established (waiting for its answer would have timed out), so it counts as having worked.
  std::chrono::milliseconds api_timeout{10000};
  bool keep_watching = false;        // --in-place: the watch outlives the opening

  static GateConfig FromOptions(const GateOptions& options);
};

class Gate {
 public:
  // `registry` gets the fleet_sidecar_* metrics (a fresh one when null), labelled with the job,
  // namespace, role and pod.
  Gate(std::shared_ptr<kube::Client> client, GateConfig config, Logger log,
       std::shared_ptr<prometheus::Registry> registry = nullptr);
  ~Gate();
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  // Called once when the gate opens, on a gate thread with the gate's lock held: it must only
  // signal (write an eventfd, notify). Set it before Start().
  void OnOpen(std::function<void()> callback);
  // Called with the ConfigMap's run and barrier annotations whenever they change (from a gate
  // thread, or Apply's caller, with the gate's lock held: it must not call the gate). Set it
  // before Start().
  void OnRunAnnotations(std::function<void(const RunAnnotations&)> callback);
  void Start();
  // Stops both threads. True when they ended within `timeout` (and were joined); false when one is
  // still blocked in a request (API requests cannot be cancelled): the caller should then end the
  // process without destroying the gate.
  bool Stop(std::chrono::milliseconds timeout);

  bool open() const;
  std::string Message() const;       // what /startup says
  std::string HealthProblem() const; // "" while the gate's threads work
  // Once open: the servers it waited for (empty for servers and collective trainers), and how long
  // it waited for them to accept connections.
  std::vector<Endpoint> Servers() const;
  double PeerWaitSeconds() const;
  // /startup, /readyz, /healthz and /metrics. The gate must outlive the server that uses them.
  // `ready`, when given, is asked once the gate is open: "" for ready, else why not (the agent's
  // readiness); /readyz is 200 only when the gate is open and it says "".
  // `more_metrics`, when given, appends more families to /metrics (the agent's).
  std::vector<httpd::Route> Routes(std::function<std::string()> ready = nullptr,
                                   std::function<void(std::string*)> more_metrics = nullptr);
  const std::shared_ptr<prometheus::Registry>& registry() const { return registry_; }

  // Applies a ConfigMap (nullptr: it does not exist) as the watch does: a seam for tests.
  void Apply(const nlohmann::json* config_map);

 private:
  using Clock = std::chrono::steady_clock;
  struct Metrics;

  void WatchLoop();
  // One list of the ConfigMap, applied; its resourceVersion (where the watch starts).
  kube::StatusOr<std::string> ListConfigMap();
  // One watch from *resource_version, applying each change and moving *resource_version on;
  // counts the events it delivers in *events. Ends as the server or the cancel token ends it.
  kube::ApiStatus WatchConfigMap(std::string* resource_version, int64_t* events);
  void ProbeLoop();
  void RunThread(const char* name, void (Gate::*body)());
  void ApiFailed(const std::string& what, const kube::ApiStatus& status, std::chrono::milliseconds retry_in);
  void WatchWorked();
  // Takes a ConfigMap (from a list when `api_answered`: that clears an API error).
  void Observe(const nlohmann::json* config_map, bool api_answered);
  // Under mu_:
  void ChangedLocked();              // open if nothing is pending, log, metrics, wake the prober
  void OpenLocked();
  std::vector<Endpoint> PendingLocked() const;
  std::pair<std::string, std::string> DescribeLocked() const;   // {state key, message}
  void RefreshGaugesLocked();

  std::shared_ptr<kube::Client> client_;
  const GateConfig config_;
  const Logger log_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<Metrics> metrics_;
  PeerProber prober_;
  kube::CancelToken cancel_;         // fired by Stop() and when the gate opens

  mutable std::mutex mu_;
  std::condition_variable cv_;       // state changes (the prober waits on it), thread exits
  std::function<void()> on_open_;
  std::function<void(const RunAnnotations&)> on_run_annotations_;
  std::optional<RunAnnotations> run_annotations_;   // as last told
  bool listed_ = false;              // the ConfigMap has been read at least once
  std::string api_error_;            // the current list/watch failure, "" once a list works again
  kube::Code api_error_code_ = kube::Code::kOk;
  // A run of failures, ended only by a watch that worked; its first failure (and any of another
  // kind) is logged, not every retry.
  bool failing_ = false;
  std::string failure_logged_;       // "<what>/<code>" of the last failure logged
  ConfigMapVerdict verdict_;
  uint64_t verdict_generation_ = 0;  // bumped on every change of verdict_
  std::set<std::string> reached_;    // servers that accepted a connection ("host:port")
  std::map<std::string, std::string> server_errors_;   // pending server -> why the last probe failed
  bool open_ = false;
  bool stopping_ = false;
  std::string fatal_;                // a gate thread died of an unexpected exception
  std::string logged_key_;
  Clock::time_point started_;
  Clock::time_point opened_at_;
  Clock::time_point peers_since_;    // when servers first were all that was missing (epoch: never)
  int running_ = 0;                  // gate threads not yet finished
  std::thread watch_thread_;
  std::thread probe_thread_;
};

}  // namespace fleet::sidecar
