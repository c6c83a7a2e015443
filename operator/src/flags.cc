#include "fleet/operator/flags.h"

#include <cctype>

#include "fleet/cmdline/cmdline.h"

namespace fleet::op {
namespace {

// Which cluster, which namespace, and how hard to work it.
void AddApiServerOptions(CLI::App& app, OperatorFlags& f) {
  app.add_option("--kubeconfig", f.kubeconfig, "kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube/config)")
      ->type_name("PATH");
  app.add_option("--context", f.context, "kubeconfig context (default: current-context)")->type_name("NAME");
  app.add_option("--namespace", f.controller.ns, "watch one namespace (default: all)")->type_name("NS");
  app.add_option("--workers", f.controller.workers, "jobs reconciled in parallel")
      ->type_name("N")->transform(cmdline::IntegerIn(1, 256))->capture_default_str();
  app.add_option("--create-concurrency", f.controller.create_concurrency, "pod writes in flight, all jobs together")
      ->type_name("N")->transform(cmdline::IntegerIn(1, 1024))->capture_default_str();
  app.add_option("--kube-api-qps", f.qps, "client-side API rate limit (0: none)")
      ->type_name("Q")->transform(cmdline::IntegerIn(0, 100000))->capture_default_str();
  app.add_option("--kube-api-burst", f.burst, "client-side API burst (0: none)")
      ->type_name("B")->transform(cmdline::IntegerIn(0, 100000))->capture_default_str();
}

// The sidecar the pods get.
void AddSidecarOptions(CLI::App& app, OperatorFlags& f) {
  OperatorSettings& settings = f.controller.settings;
  app.add_option_function<std::string>(
         "--sidecar-mode",
         [&f](const std::string& mode) {
           f.sidecar_mode_auto = mode == "auto";
           f.controller.settings.native_sidecar = mode != "init";
         },
         "native sidecar (Kubernetes >= 1.29) or init container; auto asks the API server's version")
      ->check(cmdline::OneOf({"auto", "native", "init"}))->default_str("auto");
  app.add_option("--sidecar-token-audience", settings.sidecar_service_account_token_audience,
                 "audience of the sidecar's projected token (default: the API's)")
      ->type_name("AUD");
  app.add_option("--sidecar-image", settings.sidecar_image,
                 "the sidecar (and runtime fleet's server) image of jobs that set no spec.sidecar.image")
      ->type_name("IMAGE")->check(cmdline::NonEmpty())->capture_default_str();
}

// How jobs are wired, watched and revisited.
void AddJobOptions(CLI::App& app, OperatorFlags& f) {
  OperatorSettings& settings = f.controller.settings;
  app.add_option("--cluster-domain", settings.cluster_domain, "for Service-mode DNS names")
      ->type_name("DOMAIN")->check(cmdline::NonEmpty())->capture_default_str();
  app.add_option_function<std::string>(
         "--host-port-range",
         [&f](const std::string& range) {
           const CLI::Validator port = cmdline::IntegerIn(1, 65535);
           const auto dash = range.find('-');
           std::string first = range.substr(0, dash);
           std::string last = dash == std::string::npos ? "" : range.substr(dash + 1);
           if (dash == std::string::npos || !port(first).empty() || !port(last).empty() ||
               std::stoi(first) > std::stoi(last)) {
             throw CLI::ValidationError("--host-port-range",
                                        "expected FIRST-LAST, ports 1-65535, FIRST <= LAST, got '" + range + "'");
           }
           f.controller.host_port_first = std::stoi(first);
           f.controller.host_port_last = std::stoi(last);
         },
         "HostNetwork jobs' port blocks")
      ->type_name("FIRST-LAST")
      ->default_str(std::to_string(f.controller.host_port_first) + "-" + std::to_string(f.controller.host_port_last));
  app.add_option_function<double>(
         "--progress-interval",
         [&settings](double seconds) {
           settings.progress_interval = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
         },
         "collect training progress from the sidecars and write status.progress at most this often per job (0: off)")
      ->type_name("SECONDS")->check(CLI::Range(0.0, 3600.0))
      ->default_str(std::to_string(settings.progress_interval.count() / 1000));
  app.add_option_function<int>(
         "--resync-period", [&f](int seconds) { f.controller.resync = std::chrono::seconds(seconds); },
         "reconcile every job at least this often")
      ->type_name("SECONDS")->transform(cmdline::IntegerIn(0, 86400))
      ->default_str(std::to_string(f.controller.resync.count()));
}

// One of several replicas, or alone.
void AddLeaderElectionOptions(CLI::App& app, OperatorFlags& f) {
  cmdline::AddSwitch(app, "--leader-elect", f.leader_elect, "run as one of several replicas (--leader-elect=false: alone)");
  app.add_option("--leader-election-id", f.leader_election_id, "the Lease's name")
      ->type_name("NAME")->check(cmdline::NonEmpty())->capture_default_str();
  app.add_option("--leader-election-namespace", f.leader_election_namespace,
                 "the Lease's namespace (default: --namespace or the pod's)")
      ->type_name("NS");
}

// What the operator serves, and its log.
void AddServingOptions(CLI::App& app, OperatorFlags& f) {
  app.add_option("--metrics-bind-address", f.metrics_bind_address, "Prometheus /metrics (0: off)")
      ->type_name("ADDR")->capture_default_str();
  app.add_option("--health-probe-bind-address", f.health_probe_bind_address, "/healthz and /readyz (0: off)")
      ->type_name("ADDR")->capture_default_str();
  app.add_option_function<std::string>(
         "--log-level", [&f](const std::string& level) { ParseLogLevel(level, &f.log_level); },
         "the least severe messages logged")
      ->check(cmdline::OneOf({"debug", "info", "warning", "error"}))->default_str("info");
  app.add_option_function<std::string>(
         "--log-format", [&f](const std::string& format) { ParseLogFormat(format, &f.log_format); },
         "one line of text or a JSON object a message")
      ->check(cmdline::OneOf({"text", "json"}))->default_str("text");
}

// fleet-operator's flags, bound to `f`, in groups.
std::unique_ptr<CLI::App> OperatorApp(OperatorFlags& f) {
  auto app = cmdline::NewApp("fleet-operator",
                             "Runs the FleetJob controller: watches FleetJobs and their pods, creates and wires the "
                             "pods, and drives each job to success or a clear failure.");
  AddApiServerOptions(*app, f);
  AddSidecarOptions(*app, f);
  AddJobOptions(*app, f);
  AddLeaderElectionOptions(*app, f);
  AddServingOptions(*app, f);
  return app;
}

}  // namespace

std::string OperatorUsage() {
  OperatorFlags defaults;
  return cmdline::Help(*OperatorApp(defaults));
}

Result<OperatorFlags> ParseOperatorFlags(const std::vector<std::string>& args) {
  OperatorFlags f;
  auto app = OperatorApp(f);
  auto help = cmdline::Parse(*app, args);
  if (!help) return Error{help.error()};
  f.help = *help != nullptr;
  if (f.leader_election_namespace.empty()) f.leader_election_namespace = f.controller.ns;
  return f;
}

bool SupportsNativeSidecars(const nlohmann::json& version) {
  auto number = [&](const char* key) {
    const std::string text = version.is_object() ? version.value(key, "") : "";
    size_t digits = 0;
    while (digits < text.size() && digits < 4 && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
    return digits == 0 ? -1 : std::stoi(text.substr(0, digits));   // "29+" (managed clusters) -> 29
  };
  const int major = number("major"), minor = number("minor");
  return major > 1 || (major == 1 && minor >= 29);
}

}  // namespace fleet::op
