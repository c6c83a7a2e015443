#include "fleet/operator/flags.h"

#include <cctype>
#include <functional>
#include <map>

#include "fleet/base/strings.h"
#include "fleet/runtime/endpoint.h"

namespace fleet::op {
namespace {

Result<int> IntIn(const std::string& flag, const std::string& value, int lo, int hi) {
  auto n = ParseNonNegativeInt(value, flag);
  if (!n || *n < lo || *n > hi) {
    return Error{"--" + flag + "=" + value + ": expected an integer from " + std::to_string(lo) + " to " + std::to_string(hi)};
  }
  return *n;
}

Result<bool> Bool(const std::string& flag, const std::string& value) {
  if (value == "true" || value == "1") return true;
  if (value == "false" || value == "0") return false;
  return Error{"--" + flag + "=" + value + ": expected true or false"};
}

}  // namespace

std::string OperatorUsage() {
  return R"(usage: fleet-operator [flags]

Runs the FleetJob controller: watches FleetJobs and their pods, creates and wires the pods, and
drives each job to success or a clear failure.

  --kubeconfig=PATH                  kubeconfig (default: $KUBECONFIG, in-cluster, ~/.kube/config)
  --context=NAME                     kubeconfig context (default: current-context)
  --namespace=NS                     watch one namespace (default: all)
  --workers=N                        jobs reconciled in parallel (default 4)
  --create-concurrency=N             pod writes in flight per job (default 64)
  --kube-api-qps=Q, --kube-api-burst=B   client-side API rate limit (default 500, 1000; 0 = none)
  --sidecar-mode=auto|native|init    native sidecar (Kubernetes >= 1.29) or init container; auto
                                     (default) asks the API server's version
  --sidecar-token-audience=AUD       audience of the sidecar's projected token (default: the API's)
  --sidecar-image=IMAGE              the sidecar (and runtime fleet's server) image of jobs that set
                                     no spec.sidecar.image (default fleetjob/sidecar:<version>)
  --cluster-domain=DOMAIN            for Service-mode DNS names (default cluster.local)
  --host-port-range=FIRST-LAST       HostNetwork jobs' port blocks (default 20000-29999)
  --resync-period=SECONDS            reconcile every job at least this often (default 600)
  --leader-elect[=true|false]        run as one of several replicas (default false)
  --leader-election-id=NAME          the Lease's name (default fleet-operator)
  --leader-election-namespace=NS     the Lease's namespace (default: --namespace or the pod's)
  --metrics-bind-address=ADDR        Prometheus /metrics (default :8080; 0 = off)
  --health-probe-bind-address=ADDR   /healthz and /readyz (default :8081; 0 = off)
  --log-level=debug|info|warning|error   (default info)
  --log-format=text|json             (default text)
  --help
)";
}

Result<OperatorFlags> ParseOperatorFlags(const std::vector<std::string>& args) {
  OperatorFlags f;
  using Setter = std::function<Status(const std::string&)>;
  auto to_status = [](auto result, auto assign) -> Status {
    if (!result) return Error{result.error()};
    assign(*result);
    return OkStatus();
  };
  const std::map<std::string, Setter> setters = {
      {"kubeconfig", [&](const std::string& v) { f.kubeconfig = v; return OkStatus(); }},
      {"context", [&](const std::string& v) { f.context = v; return OkStatus(); }},
      {"namespace", [&](const std::string& v) { f.controller.ns = v; return OkStatus(); }},
      {"workers", [&](const std::string& v) { return to_status(IntIn("workers", v, 1, 256), [&](int n) { f.controller.workers = n; }); }},
      {"create-concurrency", [&](const std::string& v) {
         return to_status(IntIn("create-concurrency", v, 1, 1024), [&](int n) { f.controller.create_concurrency = n; }); }},
      {"kube-api-qps", [&](const std::string& v) { return to_status(IntIn("kube-api-qps", v, 0, 100000), [&](int n) { f.qps = n; }); }},
      {"kube-api-burst", [&](const std::string& v) { return to_status(IntIn("kube-api-burst", v, 0, 100000), [&](int n) { f.burst = n; }); }},
      {"sidecar-mode", [&](const std::string& v) -> Status {
         if (v != "auto" && v != "native" && v != "init") return Error{"--sidecar-mode=" + v + ": expected auto, native or init"};
         f.sidecar_mode_auto = v == "auto";
         f.controller.settings.native_sidecar = v != "init";
         return OkStatus(); }},
      {"sidecar-token-audience", [&](const std::string& v) { f.controller.settings.sidecar_service_account_token_audience = v; return OkStatus(); }},
      {"sidecar-image", [&](const std::string& v) -> Status {
         if (v.empty()) return Error{"--sidecar-image: must not be empty"};
         f.controller.settings.sidecar_image = v;
         return OkStatus(); }},
      {"cluster-domain", [&](const std::string& v) -> Status {
         if (v.empty()) return Error{"--cluster-domain: must not be empty"};
         f.controller.settings.cluster_domain = v;
         return OkStatus(); }},
      {"host-port-range", [&](const std::string& v) -> Status {
         const auto dash = v.find('-');
         auto first = dash == std::string::npos ? Result<int>(Error{""}) : IntIn("host-port-range", v.substr(0, dash), 1, 65535);
         auto last = dash == std::string::npos ? Result<int>(Error{""}) : IntIn("host-port-range", v.substr(dash + 1), 1, 65535);
         if (!first || !last || *first > *last) return Error{"--host-port-range=" + v + ": expected FIRST-LAST, ports 1-65535, FIRST <= LAST"};
         f.controller.host_port_first = *first;
         f.controller.host_port_last = *last;
         return OkStatus(); }},
      {"resync-period", [&](const std::string& v) {
         return to_status(IntIn("resync-period", v, 0, 86400), [&](int n) { f.controller.resync = std::chrono::seconds(n); }); }},
      {"leader-elect", [&](const std::string& v) { return to_status(Bool("leader-elect", v), [&](bool b) { f.leader_elect = b; }); }},
      {"leader-election-id", [&](const std::string& v) -> Status {
         if (v.empty()) return Error{"--leader-election-id: must not be empty"};
         f.leader_election_id = v;
         return OkStatus(); }},
      {"leader-election-namespace", [&](const std::string& v) { f.leader_election_namespace = v; return OkStatus(); }},
      {"metrics-bind-address", [&](const std::string& v) { f.metrics_bind_address = v; return OkStatus(); }},
      {"health-probe-bind-address", [&](const std::string& v) { f.health_probe_bind_address = v; return OkStatus(); }},
      {"log-level", [&](const std::string& v) -> Status {
         if (!ParseLogLevel(v, &f.log_level)) return Error{"--log-level=" + v + ": expected debug, info, warning or error"};
         return OkStatus(); }},
      {"log-format", [&](const std::string& v) -> Status {
         if (!ParseLogFormat(v, &f.log_format)) return Error{"--log-format=" + v + ": expected text or json"};
         return OkStatus(); }},
  };
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--help" || arg == "-h") {
      f.help = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) return Error{"unexpected argument \"" + arg + "\" (flags are --name=value; see --help)"};
    std::string name = arg.substr(2), value;
    const auto eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    auto it = setters.find(name);
    if (it == setters.end()) return Error{"unknown flag --" + name + " (see --help)"};
    if (!inline_value) {
      if (name == "leader-elect") {
        value = "true";   // a bare boolean flag
      } else if (i + 1 < args.size()) {
        value = args[++i];
      } else {
        return Error{"--" + name + " needs a value"};
      }
    }
    Status status = it->second(value);
    if (!status) return Error{status.error()};
  }
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
