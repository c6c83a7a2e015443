#include "fleet/sidecar/gate.h"

#include "fleet/base/json_read.h"
#include "fleet/base/strings.h"
#include "fleet/sidecar/exposition.h"

#include <algorithm>
#include <random>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

namespace fleet::sidecar {
namespace {

using Json = nlohmann::json;
using std::chrono::milliseconds;

constexpr size_t kServersShown = 5;   // a message lists at most this many pending servers

// Jittered ("equal jitter": uniform in [d/2, d]) exponential backoff.
class Backoff {
 public:
  Backoff(milliseconds base, milliseconds cap) : base_(base), cap_(std::max(base, cap)) {}
  milliseconds Next() {
    const double exp = static_cast<double>(base_.count()) * static_cast<double>(uint64_t{1} << std::min(attempt_, 20));
    const double capped = std::min(static_cast<double>(cap_.count()), exp);
    ++attempt_;
    std::uniform_real_distribution<double> jitter(0.5, 1.0);
    return milliseconds(std::max<int64_t>(1, static_cast<int64_t>(capped * jitter(rng_))));
  }
  void Reset() { attempt_ = 0; }

 private:
  milliseconds base_;
  milliseconds cap_;
  int attempt_ = 0;
  std::mt19937_64 rng_{std::random_device{}()};
};

double Seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

}  // namespace

struct Gate::Metrics {
  prometheus::Gauge* gate_open;
  prometheus::Gauge* gate_wait_seconds;
  prometheus::Gauge* peer_wait_seconds;
  prometheus::Gauge* servers;
  prometheus::Gauge* servers_reached;
  prometheus::Counter* watch_restarts;
  prometheus::Counter* api_errors;
  prometheus::Counter* server_probe_failures;

  Metrics(prometheus::Registry& registry, const prometheus::Labels& labels) {
    auto gauge = [&](const char* name, const char* help) {
      return &prometheus::BuildGauge().Name(name).Help(help).Labels(labels).Register(registry).Add({});
    };
    auto counter = [&](const char* name, const char* help) {
      return &prometheus::BuildCounter().Name(name).Help(help).Labels(labels).Register(registry).Add({});
    };
    gate_open = gauge("fleet_sidecar_gate_open", "1 once the startup gate is open, else 0.");
    gate_wait_seconds = gauge("fleet_sidecar_gate_wait_seconds",
                              "Seconds from the sidecar's start until the gate opened (so far, while it is closed).");
    peer_wait_seconds = gauge("fleet_sidecar_peer_wait_seconds",
                              "Seconds spent waiting for the parameter servers to accept connections, once the "
                              "endpoint lists were published.");
    servers = gauge("fleet_sidecar_servers", "Servers this pod waits for (0 for servers and collective workers).");
    servers_reached = gauge("fleet_sidecar_servers_reached", "Servers that have accepted a connection.");
    watch_restarts = counter("fleet_sidecar_watch_restarts_total",
                             "Watches of the endpoints ConfigMap that ended and were started again.");
    api_errors = counter("fleet_sidecar_api_errors_total", "Failed lists and watches of the endpoints ConfigMap.");
    server_probe_failures = counter("fleet_sidecar_server_probe_failures_total",
                                    "Connection attempts to servers that failed (refused, timed out, unresolved).");
  }
};

GateConfig GateConfig::FromOptions(const GateOptions& o) {
  GateConfig c;
  c.target = GateTarget{o.ns, o.config_map, o.role, o.run, o.mode};
  c.job = o.job;
  c.pod = o.pod;
  c.server_connect_timeout = o.server_connect_timeout;
  c.server_retry_max = o.server_retry_max;
  c.server_retry_base = std::min(c.server_retry_base, c.server_retry_max);
  c.watch_timeout = o.watch_timeout;
  c.api_backoff_max = o.api_retry_max;
  c.api_timeout = o.api_timeout;
  c.api_backoff_base = std::min(c.api_backoff_base, c.api_backoff_max);
  c.keep_watching = o.in_place;
  return c;
}

Gate::Gate(std::shared_ptr<kube::Client> client, GateConfig config, Logger log,
           std::shared_ptr<prometheus::Registry> registry)
    : client_(std::move(client)),
      config_(std::move(config)),
      log_(std::move(log)),
      registry_(registry ? std::move(registry) : std::make_shared<prometheus::Registry>()),
      prober_(config_.server_connect_timeout, std::max(config_.server_connect_timeout, milliseconds(2000))),
      started_(Clock::now()) {
  metrics_ = std::make_unique<Metrics>(*registry_, prometheus::Labels{{"job", config_.job},
                                                                      {"namespace", config_.target.ns},
                                                                      {"role", config_.target.role},
                                                                      {"pod", config_.pod}});
}

Gate::~Gate() {
  if (watch_thread_.joinable() || probe_thread_.joinable()) {
    if (!Stop(std::chrono::seconds(5))) {
      // Only reachable when the owner ignored Stop()'s answer; the process is about to end.
      if (watch_thread_.joinable()) watch_thread_.detach();
      if (probe_thread_.joinable()) probe_thread_.detach();
    }
  }
}

void Gate::OnOpen(std::function<void()> callback) {
  std::lock_guard<std::mutex> lock(mu_);
  on_open_ = std::move(callback);
}

void Gate::OnRunAnnotations(std::function<void(const RunAnnotations&)> callback) {
  std::lock_guard<std::mutex> lock(mu_);
  on_run_annotations_ = std::move(callback);
}

void Gate::Start() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    log_("waiting for the endpoints ConfigMap " + config_.target.ns + "/" + config_.target.config_map + " of run " +
         std::to_string(config_.target.run) + " (job " + config_.job + ", role " + config_.target.role + ")");
    running_ = 2;
  }
  watch_thread_ = std::thread([this] { RunThread("watch", &Gate::WatchLoop); });
  probe_thread_ = std::thread([this] { RunThread("probe", &Gate::ProbeLoop); });
}

void Gate::RunThread(const char* name, void (Gate::*body)()) {
  try {
    (this->*body)();
  } catch (const std::exception& e) {
    std::lock_guard<std::mutex> lock(mu_);
    fatal_ = std::string("the ") + name + " thread stopped: " + e.what();
    log_(fatal_);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    fatal_ = std::string("the ") + name + " thread stopped on an unknown exception";
    log_(fatal_);
  }
  std::lock_guard<std::mutex> lock(mu_);
  --running_;
  cv_.notify_all();
}

bool Gate::Stop(milliseconds timeout) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  cancel_.Cancel();
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [this] { return running_ == 0; })) return false;
  }
  if (watch_thread_.joinable()) watch_thread_.join();
  if (probe_thread_.joinable()) probe_thread_.join();
  return true;
}

bool Gate::open() const {
  std::lock_guard<std::mutex> lock(mu_);
  return open_;
}

std::string Gate::Message() const {
  std::lock_guard<std::mutex> lock(mu_);
  return DescribeLocked().second;
}

std::string Gate::HealthProblem() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fatal_;
}

// ---- state ----

void Gate::Apply(const Json* config_map) { Observe(config_map, false); }

void Gate::Observe(const Json* config_map, bool api_answered) {
  ConfigMapVerdict verdict = EvaluateConfigMap(config_map, config_.target);
  const RunAnnotations annotations = ReadRunAnnotations(config_map);
  std::lock_guard<std::mutex> lock(mu_);
  if (on_run_annotations_ && run_annotations_ != annotations) {
    run_annotations_ = annotations;
    on_run_annotations_(annotations);
  }
  if (api_answered) {
    api_error_.clear();
    api_error_code_ = kube::Code::kOk;
    if (!listed_) failing_ = false;  // the state line that follows says it
  }
  listed_ = true;
  if (open_) return;  // latched: later changes (a new run replacing this pod) are not its business
  if (verdict != verdict_) {
    verdict_ = std::move(verdict);
    ++verdict_generation_;
    server_errors_.clear();
  }
  ChangedLocked();
}

std::vector<Endpoint> Gate::PendingLocked() const {
  std::vector<Endpoint> pending;
  if (verdict_.state != ConfigMapState::kReady) return pending;
  for (const Endpoint& e : verdict_.servers) {
    if (!reached_.count(e.ToString())) pending.push_back(e);
  }
  return pending;
}

void Gate::ChangedLocked() {
  if (!open_ && verdict_.state == ConfigMapState::kReady) {
    if (PendingLocked().empty()) {
      OpenLocked();
    } else if (peers_since_ == Clock::time_point()) {
      peers_since_ = Clock::now();
    }
  }
  auto [key, message] = DescribeLocked();
  if (key != logged_key_ && key.rfind("servers-untried:", 0) != 0) {
    logged_key_ = key;
    log_(message);
  }
  RefreshGaugesLocked();
  cv_.notify_all();
}

void Gate::OpenLocked() {
  open_ = true;
  opened_at_ = Clock::now();
  // The watch and any probe round end: nothing depends on them any more (but the trainer's gate,
  // with keep_watching).
  if (!config_.keep_watching) cancel_.Cancel();
  if (on_open_) on_open_();
}

std::pair<std::string, std::string> Gate::DescribeLocked() const {
  const GateTarget& t = config_.target;
  const std::string run = std::to_string(t.run);
  const std::string what = "the endpoints ConfigMap " + t.ns + "/" + t.config_map + " of run " + run;
  if (open_) {
    std::string message = "gate open: the endpoint lists of run " + run + " are published";
    if (verdict_.servers.size() == 1) {
      message += " and the server accepts connections";
    } else if (!verdict_.servers.empty()) {
      message += " and all " + std::to_string(verdict_.servers.size()) + " servers accept connections";
    }
    return {"open", message};
  }
  if (!listed_) {
    if (api_error_.empty()) return {"listing", "waiting for " + what + ": reading it from the API server"};
    return {std::string("api-error:") + kube::CodeName(api_error_code_),
            "waiting for " + what + ": cannot read it from the API server: " + api_error_ + " (retrying)"};
  }
  std::string key, message;
  switch (verdict_.state) {
    case ConfigMapState::kAbsent:
    case ConfigMapState::kOtherRun:
      key = std::string(ConfigMapStateName(verdict_.state)) + ":" + verdict_.detail;
      message = "waiting for " + what + " (" + verdict_.detail + ")";
      break;
    case ConfigMapState::kMalformed:
      key = "malformed:" + verdict_.detail;
      message = "waiting for " + what + " to be fixed: it is malformed: " + verdict_.detail;
      break;
    case ConfigMapState::kReady: {
      const std::vector<Endpoint> pending = PendingLocked();
      std::vector<std::string> names, shown;
      for (const Endpoint& e : pending) {
        names.push_back(e.ToString());
        if (shown.size() == kServersShown) continue;
        auto error = server_errors_.find(e.ToString());
        shown.push_back(e.ToString() + (error == server_errors_.end() ? std::string(" (not tried yet)")
                                                                     : " (" + error->second + ")"));
      }
      // Logged once the first round has said why (the line would only say "not tried yet").
      const bool tried = std::any_of(pending.begin(), pending.end(),
                                     [&](const Endpoint& e) { return server_errors_.count(e.ToString()); });
      key = (tried ? "servers:" : "servers-untried:") + JoinStrings(names, ",");
      if (pending.size() == 1) {
        message = "waiting for server " + shown.front();
      } else {
        message = "waiting for " + std::to_string(pending.size()) + " of " + std::to_string(verdict_.servers.size()) +
                  " servers: " + JoinStrings(shown, ", ");
        if (pending.size() > shown.size()) message += ", and " + std::to_string(pending.size() - shown.size()) + " more";
      }
      message += " to accept connections (from " + verdict_.server_key + ")";
      break;
    }
  }
  if (!api_error_.empty()) message += "; the API watch is failing: " + api_error_ + " (retrying)";
  return {key, message};
}

void Gate::RefreshGaugesLocked() {
  const Clock::time_point until = open_ ? opened_at_ : Clock::now();
  metrics_->gate_open->Set(open_ ? 1 : 0);
  metrics_->gate_wait_seconds->Set(Seconds(until - started_));
  metrics_->peer_wait_seconds->Set(peers_since_ == Clock::time_point() ? 0.0 : Seconds(until - peers_since_));
  size_t reached = 0;
  for (const Endpoint& e : verdict_.servers) reached += reached_.count(e.ToString());
  metrics_->servers->Set(static_cast<double>(verdict_.servers.size()));
  metrics_->servers_reached->Set(static_cast<double>(reached));
}

void Gate::WatchWorked() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!failing_) return;
  failing_ = false;
  log_("the watch of the endpoints ConfigMap works again");
}

void Gate::ApiFailed(const std::string& what, const kube::ApiStatus& status, milliseconds retry_in) {
  metrics_->api_errors->Increment();
  std::lock_guard<std::mutex> lock(mu_);
  const std::string kind = what + "/" + kube::CodeName(status.code());
  const bool news = !failing_ || failure_logged_ != kind;
  failing_ = true;
  failure_logged_ = kind;
  api_error_ = what + ": " + status.ToString();
  api_error_code_ = status.code();
  if (news && listed_) {  // before the first read, the state line below says it
    log_("cannot " + api_error_ + "; retrying in " + std::to_string(retry_in.count()) +
         " ms (and with backoff after further failures, counted in fleet_sidecar_api_errors_total)");
  }
  ChangedLocked();
}

// ---- threads ----

void Gate::WatchLoop() {
  Backoff backoff(config_.api_backoff_base, config_.api_backoff_max);
  std::string resource_version;
  bool relist = true;
  auto fail = [&](const std::string& what, const kube::ApiStatus& status) {
    const milliseconds delay = backoff.Next();
    ApiFailed(what, status, delay);
    relist = true;
    cancel_.SleepFor(delay);
  };

  while (!cancel_.cancelled()) {
    if (relist) {
      kube::StatusOr<std::string> listed = ListConfigMap();
      if (cancel_.cancelled()) return;
      if (!listed.ok()) {
        fail("list the endpoints ConfigMap", listed.status());
        continue;
      }
      resource_version = *listed;
      relist = false;
    }

    int64_t events = 0;
    const Clock::time_point started = Clock::now();
    kube::ApiStatus status = WatchConfigMap(&resource_version, &events);
    if (cancel_.cancelled() || status.code() == kube::Code::kCancelled) return;
    metrics_->watch_restarts->Increment();
    // Only a watch that worked ends a run of failures: a list that works while every watch fails
    // must not bring the retries back to full speed. It worked when it delivered something, when
    // the server ended it cleanly after a while, or when it failed after running for longer than
    // an unanswered request could have.
    const auto lasted = Clock::now() - started;
    const bool worked = events > 0 || (status.ok() && lasted >= config_.min_watch_duration) ||
                        lasted > config_.api_timeout + milliseconds(500);
    if (worked) {
      backoff.Reset();
      WatchWorked();
    }
    if (status.code() == kube::Code::kGone) {
      // Our resourceVersion is older than the server's history: read the current state again
      // (at once, unless that is all the server has said since the last list).
      relist = true;
      if (!worked) cancel_.SleepFor(backoff.Next());
    } else if (!status.ok()) {
      fail("watch the endpoints ConfigMap", status);
    } else if (!worked) {
      fail("watch the endpoints ConfigMap",
           kube::ApiStatus(kube::Code::kUnavailable, "the watch ended at once, without any event"));
    }
    // Else the server's timeout: resume from the last resourceVersion.
  }
}

kube::StatusOr<std::string> Gate::ListConfigMap() {
  const std::string& name = config_.target.config_map;
  kube::ListOptions options;
  options.field_selector = "metadata.name=" + name;
  kube::StatusOr<Json> list = client_->List(kube::Resource::ConfigMaps(), config_.target.ns, options);
  if (!list.ok()) return list.status();
  if (cancel_.cancelled()) return kube::ApiStatus(kube::Code::kCancelled, "stopping");
  const Json* found = nullptr;
  auto items = list->find("items");
  if (items != list->end() && items->is_array()) {
    for (const Json& item : *items) {
      if (StringMember(ObjectMember(item, "metadata"), "name") == name) found = &item;
    }
  }
  Observe(found, /*api_answered=*/true);
  return StringMember(ObjectMember(*list, "metadata"), "resourceVersion");
}

kube::ApiStatus Gate::WatchConfigMap(std::string* resource_version, int64_t* events) {
  const std::string& name = config_.target.config_map;
  kube::WatchOptions options;
  options.resource_version = *resource_version;
  options.field_selector = "metadata.name=" + name;
  options.allow_bookmarks = true;
  options.timeout_seconds = static_cast<int>(config_.watch_timeout.count());
  return client_->Watch(
      kube::Resource::ConfigMaps(), config_.target.ns, options,
      [&](const kube::WatchEvent& event) {
        ++*events;
        const std::string rv = StringMember(ObjectMember(event.object, "metadata"), "resourceVersion");
        if (!rv.empty()) *resource_version = rv;
        if (event.type == kube::WatchEventType::kBookmark) return true;
        if (StringMember(ObjectMember(event.object, "metadata"), "name") != name) return true;  // not ours (selector ignored)
        Apply(event.type == kube::WatchEventType::kDeleted ? nullptr : &event.object);
        return !cancel_.cancelled();
      },
      cancel_);
}

void Gate::ProbeLoop() {
  uint64_t generation = 0;
  milliseconds delay = config_.server_retry_base;
  while (true) {
    std::vector<Endpoint> pending;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || open_ || !PendingLocked().empty(); });
      if (stopping_ || open_) return;
      pending = PendingLocked();
      if (generation != verdict_generation_) {
        generation = verdict_generation_;
        delay = config_.server_retry_base;
      }
    }
    const std::vector<ProbeOutcome> outcomes = prober_.ProbeAll(pending, cancel_);
    if (cancel_.cancelled()) return;
    {
      std::unique_lock<std::mutex> lock(mu_);
      for (size_t i = 0; i < pending.size(); ++i) {
        const std::string endpoint = pending[i].ToString();
        if (outcomes[i].reached) {
          if (reached_.insert(endpoint).second) {
            server_errors_.erase(endpoint);
            log_("server " + endpoint + " accepts connections");
          }
        } else {
          metrics_->server_probe_failures->Increment();
          server_errors_[endpoint] = outcomes[i].error;
        }
      }
      ChangedLocked();
      if (open_) return;
      // The next round after `delay`, or at once when the ConfigMap changes.
      const uint64_t seen = verdict_generation_;
      cv_.wait_for(lock, delay, [&] { return stopping_ || open_ || verdict_generation_ != seen; });
    }
    delay = std::min(delay * 2, config_.server_retry_max);
  }
}

// ---- HTTP ----

std::vector<Endpoint> Gate::Servers() const {
  std::lock_guard<std::mutex> lock(mu_);
  return verdict_.state == ConfigMapState::kReady ? verdict_.servers : std::vector<Endpoint>();
}

double Gate::PeerWaitSeconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (peers_since_ == Clock::time_point()) return 0.0;
  return Seconds((open_ ? opened_at_ : Clock::now()) - peers_since_);
}

std::vector<httpd::Route> Gate::Routes(std::function<std::string()> ready,
                                       std::function<void(std::string*)> more_metrics) {
  httpd::Route startup{"/startup", {}, [this](const httpd::Request&) {
                         std::lock_guard<std::mutex> lock(mu_);
                         return httpd::Response::Text(open_ ? 200 : 503, DescribeLocked().second + "\n");
                       }};
  httpd::Route metrics = ExpositionRoute(registry_, std::move(more_metrics));
  metrics.handler = [this, serialize = metrics.handler](const httpd::Request& request) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      RefreshGaugesLocked();  // the wait times run on while the gate is closed
    }
    return serialize(request);
  };
  return {std::move(startup),
          httpd::HealthRoute("/readyz", [this, ready = std::move(ready)] {
            {
              std::lock_guard<std::mutex> lock(mu_);
              if (!open_) return DescribeLocked().second;
            }
            return ready ? ready() : std::string();
          }),
          httpd::HealthRoute("/healthz", [this] { return HealthProblem(); }),
          std::move(metrics)};
}

}  // namespace fleet::sidecar
