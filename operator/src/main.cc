// fleet-operator: the FleetJob controller binary. Flags in fleet/operator/flags.h (--help).
//
// Start-up: flags -> cluster config -> API client (instrumented) -> /healthz, /readyz, /metrics
// -> informers -> (leader election) -> workers. /readyz turns 200 once the caches have synced, so
// a standby replica is Ready too and takes over with warm caches. Losing the lease exits 1 (the
// pod restarts and campaigns again) rather than risk two leaders acting at once.
// SIGTERM/SIGINT: stop taking jobs, let running reconciles finish, release the lease, exit 0.
#include <signal.h>
#include <unistd.h>

#include <prometheus/registry.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>
#include <thread>

#include "fleet/base/log.h"
#include "fleet/httpd/http_server.h"
#include "fleet/kube/client.h"
#include "fleet/kube/config.h"
#include "fleet/kube/leader_election.h"
#include "fleet/operator/controller.h"
#include "fleet/operator/flags.h"
#include "fleet/operator/metrics.h"
#include "fleet/operator/workload_api.h"
#include "fleet/runtime/env_contract.h"

namespace {

using fleet::Log;
using fleet::LogLevel;

std::string Identity() {
  char host[256] = {0};
  ::gethostname(host, sizeof host - 1);
  std::random_device rd;
  char suffix[16];
  std::snprintf(suffix, sizeof suffix, "%08x", rd());
  return std::string(host) + "_" + suffix;
}

// The namespace the operator's pod runs in (for the Lease when no --namespace is given).
std::string PodNamespace() {
  std::FILE* f = std::fopen("/var/run/secrets/kubernetes.io/serviceaccount/namespace", "r");
  if (!f) return "default";
  char buf[256] = {0};
  const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  std::fclose(f);
  std::string ns(buf, n);
  while (!ns.empty() && (ns.back() == '\n' || ns.back() == ' ')) ns.pop_back();
  return ns.empty() ? "default" : ns;
}

std::unique_ptr<fleet::httpd::HttpServer> Serve(const std::string& what, const std::string& address,
                                                std::vector<fleet::httpd::Route> routes,
                                                fleet::httpd::HttpServerOptions options = {}) {
  if (address == "0" || address.empty()) return nullptr;
  auto server = fleet::httpd::HttpServer::Start(address, std::move(routes), options);
  if (!server) {
    Log(LogLevel::kError, what + ": " + server.error());
    std::exit(1);
  }
  Log(LogLevel::kInfo, "serving " + what, {{"address", address}, {"port", std::to_string((*server)->port())}});
  return std::move(server.value());
}

// The API client from the kubeconfig (or the pod's service account); nullptr after saying why.
std::shared_ptr<fleet::kube::Client> ConnectToApiServer(const fleet::op::OperatorFlags& flags) {
  auto config = fleet::kube::LoadDefaultConfig(fleet::CurrentProcessEnv(), flags.kubeconfig, flags.context);
  if (!config.ok()) {
    std::fprintf(stderr, "fleet-operator: %s\n", config.status().message().c_str());
    return nullptr;
  }
  fleet::kube::ClientOptions client_options;
  client_options.qps = flags.qps;
  client_options.burst = flags.burst;
  client_options.request_timeout = std::chrono::seconds(5);   // well below the lease's renew deadline
  client_options.user_agent = "fleet-operator";
  auto client = fleet::kube::Client::Create(*config, client_options);
  if (!client.ok()) {
    std::fprintf(stderr, "fleet-operator: %s\n", client.status().message().c_str());
    return nullptr;
  }
  return *client;
}

// Native sidecars (Kubernetes >= 1.29) keep running beside the trainer; older clusters would
// reject or mis-run an init container with restartPolicy Always, so they get a plain one.
void DetectSidecarMode(fleet::kube::Client& api, fleet::op::OperatorSettings& settings) {
  auto version = api.GetPath("/version");
  if (!version.ok()) {
    Log(LogLevel::kWarning, "cannot read the API server's version; assuming native sidecars (set --sidecar-mode)",
        {{"error", version.status().ToString()}});
    return;
  }
  settings.native_sidecar = fleet::op::SupportsNativeSidecars(*version);
  Log(LogLevel::kInfo, std::string("sidecar mode ") + (settings.native_sidecar ? "native" : "init"),
      {{"kubernetes", version->value("gitVersion", "?")}});
}

// spec.scheduling.gang Kubernetes: which scheduling.k8s.io Workload API the cluster serves, read
// once (discovery answers are small; a cluster that turns the alpha API on restarts its servers,
// and the operator with them).
void DetectWorkloadApi(fleet::kube::Client& api, fleet::op::OperatorSettings& settings) {
  settings.workload_api = fleet::op::DiscoverWorkloadApi(api);
  const fleet::op::WorkloadApi& found = settings.workload_api;
  Log(LogLevel::kInfo, "Kubernetes gang scheduling: " + (found.usable() ? found.ApiVersion() : std::string("not served")),
      {{"served", found.served}});
}

// The reconcile workers: started once, by the leader, when the informers have synced.
class Workers {
 public:
  explicit Workers(fleet::op::Controller& controller) : controller_(controller) {}

  void Start() {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || thread_.joinable()) return;   // once; never after Stop
    thread_ = std::thread([this] { Run(); });
  }
  void Stop() {
    stopping_ = true;
    controller_.Stop();
    std::lock_guard<std::mutex> lock(mu_);
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    // WaitForSync returns false at once once the informers are stopped: shutting down (or losing
    // the lease) before the caches ever synced must end this loop, not spin in it.
    for (int waited = 1; !controller_.WaitForSync(std::chrono::seconds(1)); ++waited) {
      if (stopping_) return;
      // Once at first, then every 30 s: an unreachable API server is a state, not a log stream.
      if (waited == 1 || waited % 30 == 0) {
        Log(LogLevel::kInfo, "waiting for the informers to sync", {{"waited", std::to_string(waited) + "s"}});
      }
    }
    if (stopping_) return;
    Log(LogLevel::kInfo, "caches synced; reconciling");
    controller_.Run();
  }

  fleet::op::Controller& controller_;
  std::mutex mu_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
};

// Campaigns for the lease: the workers start on winning it; losing it raises SIGUSR1, which
// main takes as the end (no two replicas may act at once).
std::unique_ptr<fleet::kube::LeaderElector> Campaign(const fleet::op::OperatorFlags& flags,
                                                     std::shared_ptr<fleet::kube::Client> api,
                                                     fleet::op::Controller& controller, Workers& workers,
                                                     std::atomic<bool>& leading) {
  fleet::kube::LeaderElectionConfig le;
  le.lease_namespace = flags.leader_election_namespace.empty() ? PodNamespace() : flags.leader_election_namespace;
  le.lease_name = flags.leader_election_id;
  le.identity = Identity();
  // The identity by value: `le` is moved into the elector and gone when the callback runs
  // (gcc's ASan: stack-use-after-scope; the log showed an empty identity).
  le.on_started_leading = [&, self = le.identity] {
    Log(LogLevel::kInfo, "became the leader", {{"identity", self}});
    leading = true;
    controller.SetLeader(true);
    workers.Start();
  };
  le.on_stopped_leading = [&] {
    controller.SetLeader(false);
    if (leading.exchange(false)) ::kill(::getpid(), SIGUSR1);
  };
  le.on_new_leader = [](const std::string& leader) { Log(LogLevel::kInfo, "leader is " + leader); };
  const std::string identity = le.identity;
  auto elector = std::make_unique<fleet::kube::LeaderElector>(std::move(api), std::move(le));
  Log(LogLevel::kInfo, "campaigning for leadership",
      {{"lease", flags.leader_election_namespace + "/" + flags.leader_election_id}, {"identity", identity}});
  elector->Start();
  return elector;
}

}  // namespace

int main(int argc, char** argv) {
  auto flags = fleet::op::ParseOperatorFlags(std::vector<std::string>(argv + 1, argv + argc));
  if (!flags) {
    std::fprintf(stderr, "fleet-operator: %s\n", flags.error().c_str());
    return 2;
  }
  if (flags->help) {
    std::fputs(fleet::op::OperatorUsage().c_str(), stdout);
    return 0;
  }
  fleet::ConfigureLog(flags->log_level, flags->log_format);

  // Signals are taken synchronously by the main thread; every other thread has them blocked.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGUSR1);   // internal: leadership lost
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto client = ConnectToApiServer(*flags);
  if (!client) return 2;
  auto registry = std::make_shared<prometheus::Registry>();
  auto api = fleet::op::InstrumentClient(client, *registry);
  if (flags->sidecar_mode_auto) DetectSidecarMode(*api, flags->controller.settings);
  DetectWorkloadApi(*api, flags->controller.settings);
  fleet::op::Controller controller(api, flags->controller, registry);

  std::atomic<bool> leading{!flags->leader_elect};
  auto metrics_server = Serve("metrics", flags->metrics_bind_address, {fleet::httpd::MetricsRoute(registry)});
  // The kubelet restarts an operator whose /healthz times out: its probes get workers to spare
  // beside idle or stalled connections (http_server.h).
  fleet::httpd::HttpServerOptions probe_options;
  probe_options.threads = 32;
  auto probe_server = Serve("health probes", flags->health_probe_bind_address,
                            {fleet::httpd::HealthRoute("/healthz", [] { return std::string(); }),
                             fleet::httpd::HealthRoute("/readyz", [&controller] {
                               return controller.HasSynced() ? std::string() : std::string("informers have not synced yet");
                             })},
                            probe_options);

  controller.StartInformers();
  Workers workers(controller);
  std::unique_ptr<fleet::kube::LeaderElector> elector;
  if (flags->leader_elect) {
    elector = Campaign(*flags, api, controller, workers, leading);
  } else {
    controller.SetLeader(true);
    workers.Start();
  }

  int signal = 0;
  sigwait(&signals, &signal);
  const bool lost = signal == SIGUSR1;
  Log(lost ? LogLevel::kError : LogLevel::kInfo,
      lost ? "lost the leader lease; exiting so that no two replicas act at once" : "shutting down");
  workers.Stop();
  if (elector) elector->Stop();   // releases the lease so a standby takes over at once
  // The HTTP servers are not torn down: CivetWeb's shutdown waits up to 2 s per server for
  // nothing anybody needs any more (log lines are single writes; nothing else is buffered).
  std::fflush(nullptr);
  std::_Exit(lost ? 1 : 0);
}
