// fleet-sidecar: flags -> cluster config -> HTTP endpoints -> the gate, then the agent, until a signal
// (or, with --exit-when-ready, until the gate opens). See options.h for the command line, gate.h for
// the gate and agent.h for the agent.
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <prometheus/registry.h>

#include "fleet/base/log.h"
#include "fleet/httpd/http_server.h"
#include "fleet/kube/client.h"
#include "fleet/kube/config.h"
#include "fleet/kube/lite_client.h"
#include "fleet/runtime/env_contract.h"
#include "fleet/sidecar/agent.h"
#include "fleet/sidecar/exposition.h"
#include "fleet/sidecar/gate.h"
#include "fleet/sidecar/options.h"

namespace {

using fleet::Logger;
using fleet::sidecar::GateOptions;

// Ends the process at once: after the gate's threads are done (or wedged in a request that cannot
// be cancelled), nothing is left to flush (log lines are single write(2)s) and the kernel closes the
// listening socket.
[[noreturn]] void ExitNow(int code) {
  std::fflush(nullptr);
  std::_Exit(code);
}

std::string PortNote(const std::string& address, int port) {
  return address.size() > 2 && address.substr(address.size() - 2) == ":0" ? " (port " + std::to_string(port) + ")" : "";
}

int Run(const fleet::sidecar::CommandLine& command_line, const fleet::EnvMap& env) {
  const bool gated = command_line.command == fleet::sidecar::Command::kGate;
  const GateOptions& options = command_line.gate;
  const fleet::sidecar::AgentOptions& agent_options = command_line.agent;
  Logger log("fleet-sidecar[" + options.ns + "/" + options.pod + "]");

  // Signals arrive through a signalfd: blocked here, before any thread exists, so every thread
  // inherits the mask. SIGPIPE: a peer that closes early is an error value, not a death.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  if (pthread_sigmask(SIG_BLOCK, &signals, nullptr) != 0) {
    log("cannot block SIGTERM/SIGINT");
    return 1;
  }
  ::signal(SIGPIPE, SIG_IGN);
  const int signal_fd = ::signalfd(-1, &signals, SFD_CLOEXEC);
  const int open_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (signal_fd < 0 || open_fd < 0) {
    log(std::string("cannot create a signalfd/eventfd: ") + std::strerror(errno));
    return 1;
  }

  // The API: the gate's watch, and the agent's pod condition. The lite client, not Client::Create:
  // the same client without cpprestsdk, which would be a quarter of the RSS of every pod's sidecar.
  std::shared_ptr<fleet::kube::Client> client;
  if (gated || agent_options.pod_condition) {
    auto config = fleet::kube::LoadDefaultConfig(env, options.kubeconfig);
    if (!config.ok()) {
      log("cannot load the cluster config: " + config.status().ToString());
      return 1;
    }
    fleet::kube::ClientOptions client_options;
    client_options.request_timeout = options.api_timeout;
    client_options.max_attempts = 1;   // the gate and the condition writer retry themselves, with backoff
    client_options.user_agent = "fleet-sidecar";
    auto created = fleet::kube::CreateLiteClient(*config, client_options);
    if (!created.ok()) {
      log("cannot create the API client: " + created.status().ToString());
      return 1;
    }
    client = *created;
  }

  auto registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<fleet::sidecar::Gate> gate;
  if (gated) {
    gate = std::make_unique<fleet::sidecar::Gate>(client, fleet::sidecar::GateConfig::FromOptions(options), log,
                                                  registry);
    gate->OnOpen([open_fd] {
      const uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(open_fd, &one, sizeof one);
    });
  }
  // A plain init container (--exit-when-ready) only gates: the agent runs in a native sidecar.
  std::unique_ptr<fleet::sidecar::Agent> agent;
  if (!options.exit_when_ready) {
    agent = std::make_unique<fleet::sidecar::Agent>(
        fleet::sidecar::AgentConfig::FromOptions(options, agent_options, gated), log, registry,
        agent_options.pod_condition ? client : nullptr);
  }

  std::vector<fleet::httpd::Route> routes;
  if (gate) {
    if (agent) {
      // The gate asks the agent only once it is open (the agent may not have heard yet).
      routes = gate->Routes([a = agent.get()] { return a->NotReady(/*gate_open=*/true); },
                            [a = agent.get()](std::string* out) { a->metrics().AppendExposition(out); });
    } else {
      routes = gate->Routes();
    }
  } else {
    routes = {{"/startup", {}, [](const fleet::httpd::Request&) {
                 return fleet::httpd::Response::Text(200, "no startup gate: fleet-sidecar agent\n");
               }},
              fleet::httpd::HealthRoute("/readyz", [a = agent.get()] { return a->NotReady(); }),
              fleet::httpd::HealthRoute("/healthz", [] { return std::string(); }),
              fleet::sidecar::ExpositionRoute(
                  registry, [a = agent.get()](std::string* out) { a->metrics().AppendExposition(out); })};
  }
  if (agent) routes.push_back(agent->StatusRoute());
  auto server = fleet::httpd::HttpServer::Start(options.listen, std::move(routes));
  if (!server.ok()) {
    log(server.error());
    return 1;
  }
  log("serving /startup, /readyz, /healthz, /metrics" + std::string(agent ? " and /status" : "") + " on " +
      options.listen + PortNote(options.listen, (*server)->port()));

  std::unique_ptr<fleet::httpd::HttpServer> report_server;
  if (agent) {
    if (auto started = agent->Start(); !started) {
      log(started.error());
      return 1;
    }
    if (!agent_options.report_http.empty()) {
      // Loopback pushes from the trainer's ranks: a few workers, so that one stalled client (one
      // worker for the 2 s request timeout) does not hold the others' reports (http_server.h).
      fleet::httpd::HttpServerOptions report_options;
      report_options.threads = 4;
      report_options.max_body_bytes = 64 * 1024;
      auto reports = fleet::httpd::HttpServer::Start(agent_options.report_http, {agent->ReportRoute()}, report_options);
      if (!reports.ok()) {
        log("--report-http: " + reports.error());
        return 1;
      }
      report_server = std::move(*reports);
      log("taking step reports on http://" + agent_options.report_http + "/v1/report" +
          (PortNote(agent_options.report_http, report_server->port()).empty()
               ? std::string()
               : " (report port " + std::to_string(report_server->port()) + ")"));
    }
  }
  if (gate) gate->Start();

  while (true) {
    pollfd fds[2] = {{signal_fd, POLLIN, 0}, {open_fd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      log(std::string("poll: ") + std::strerror(errno));
      break;
    }
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info{};
      if (::read(signal_fd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        log(std::string("received ") + (info.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM") + "; stopping");
      }
      break;
    }
    if (fds[1].revents & POLLIN) {
      uint64_t count = 0;
      [[maybe_unused]] ssize_t n = ::read(open_fd, &count, sizeof count);
      if (options.exit_when_ready) {
        log("exiting: the gate is open (--exit-when-ready)");
        break;
      }
      if (agent) agent->GateOpened(gate->Servers(), gate->PeerWaitSeconds());
    }
  }

  // The threads end within ~50 ms unless one is inside an API request (bounded by --api-timeout).
  if (gate && !gate->Stop(std::chrono::milliseconds(1500))) {
    log("a request to the API server is still running; exiting without waiting for it");
  }
  if (agent && !agent->Stop(std::chrono::milliseconds(1500))) {
    log("a request to the API server is still running; exiting without waiting for it");
  }
  // The HTTP servers are not torn down: their destructors would only wait (up to 2 s, CivetWeb's
  // poll quantum) for probe answers nobody needs any more, delaying the pod's start or its termination.
  ExitNow(0);
}

}  // namespace

int main(int argc, char** argv) {
  // Not dumpable, before anything secret is read: the operator shares the pod's process namespace,
  // so a trainer running as the sidecar's UID (65532) could otherwise open /proc/<our pid>/root
  // (the sidecar's filesystem: its service account token) and /proc/<our pid>/environ and mem. A
  // non-dumpable process's /proc files are root's, and only CAP_SYS_PTRACE reaches them. It also
  // means no core dumps (docs/sidecar.md, "What the operator passes").
  if (::prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0) {
    std::fprintf(stderr, "fleet-sidecar: cannot make the process non-dumpable: %s\n", std::strerror(errno));
    return 1;
  }
  // One malloc arena for all threads. glibc gives each thread that allocates an arena of its own,
  // which keeps its freed memory: the sidecar's threads allocate little and seldom at the same
  // time, so theirs would only add ~0.3 MiB of RSS (docs/sidecar.md, "footprint").
  mallopt(M_ARENA_MAX, 1);
  const std::vector<std::string> args(argv + 1, argv + argc);
  const fleet::EnvMap env = fleet::CurrentProcessEnv();
  auto command_line = fleet::sidecar::ParseCommandLine(args, env);
  if (!command_line) {
    std::fprintf(stderr, "fleet-sidecar: %s\n", command_line.error().c_str());
    return 2;
  }
  if (command_line->command == fleet::sidecar::Command::kHelp) {
    std::fputs(fleet::sidecar::Usage().c_str(), stdout);
    return 0;
  }
  return Run(*command_line, env);
}
