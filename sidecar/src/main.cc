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
#include "fleet/base/result.h"
#include "fleet/base/strings.h"
#include "fleet/httpd/http_server.h"
#include "fleet/kube/client.h"
#include "fleet/kube/config.h"
#include "fleet/kube/lite_client.h"
#include "fleet/runtime/env_contract.h"
#include "fleet/sidecar/agent.h"
#include "fleet/sidecar/exposition.h"
#include "fleet/sidecar/gate.h"
#include "fleet/sidecar/options.h"
#include "fleet/sidecar/trainer_attempts.h"

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

// What the main thread waits for: a stop signal, and the gate opening.
struct Wakeups {
  int signal_fd = -1;   // SIGTERM and SIGINT
  int open_fd = -1;     // an eventfd the gate's OnOpen callback writes to
};

// Signals arrive through a signalfd: blocked here, before any thread exists, so every thread
// inherits the mask. SIGPIPE: a peer that closes early is an error value, not a death.
fleet::Result<Wakeups> OpenWakeups() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  if (pthread_sigmask(SIG_BLOCK, &signals, nullptr) != 0) return fleet::Error{"cannot block SIGTERM/SIGINT"};
  ::signal(SIGPIPE, SIG_IGN);
  Wakeups wakeups;
  wakeups.signal_fd = ::signalfd(-1, &signals, SFD_CLOEXEC);
  wakeups.open_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wakeups.signal_fd < 0 || wakeups.open_fd < 0) {
    return fleet::Error{std::string("cannot create a signalfd/eventfd: ") + std::strerror(errno)};
  }
  return wakeups;
}

// The API: the gate's watch, and the agent's pod condition. The lite client, not Client::Create:
// the same client without cpprestsdk, which would be a quarter of the RSS of every pod's sidecar.
fleet::Result<std::shared_ptr<fleet::kube::Client>> ConnectToApi(const fleet::EnvMap& env, const GateOptions& options) {
  auto config = fleet::kube::LoadDefaultConfig(env, options.kubeconfig);
  if (!config.ok()) return fleet::Error{"cannot load the cluster config: " + config.status().ToString()};
  fleet::kube::ClientOptions client_options;
  client_options.request_timeout = options.api_timeout;
  client_options.max_attempts = 1;   // the gate and the condition writer retry themselves, with backoff
  client_options.user_agent = "fleet-sidecar";
  auto created = fleet::kube::CreateLiteClient(*config, client_options);
  if (!created.ok()) return fleet::Error{"cannot create the API client: " + created.status().ToString()};
  return *created;
}

// The HTTP endpoints: the gate's when there is one, else the agent's own; and the agent's /status.
std::vector<fleet::httpd::Route> Routes(fleet::sidecar::Gate* gate, fleet::sidecar::Agent* agent,
                                        const std::shared_ptr<prometheus::Registry>& registry) {
  std::vector<fleet::httpd::Route> routes;
  if (gate) {
    if (agent) {
      // The gate asks the agent only once it is open (the agent may not have heard yet).
      routes = gate->Routes([agent] { return agent->NotReady(/*gate_open=*/true); },
                            [agent](std::string* out) { agent->metrics().AppendExposition(out); });
    } else {
      routes = gate->Routes();
    }
  } else {
    routes = {{"/startup", {}, [](const fleet::httpd::Request&) {
                 return fleet::httpd::Response::Text(200, "no startup gate: fleet-sidecar agent\n");
               }},
              fleet::httpd::HealthRoute("/readyz", [agent] { return agent->NotReady(); }),
              fleet::httpd::HealthRoute("/healthz", [] { return std::string(); }),
              fleet::sidecar::ExpositionRoute(
                  registry, [agent](std::string* out) { agent->metrics().AppendExposition(out); })};
  }
  if (agent) routes.push_back(agent->StatusRoute());
  if (auto checkpoint = agent ? agent->CheckpointRoute() : std::nullopt) routes.push_back(std::move(*checkpoint));
  if (auto live = agent ? agent->TrainerLiveRoute() : std::nullopt) routes.push_back(std::move(*live));
  return routes;
}

// Starts the agent and, with --report-http, the HTTP server that takes its pushed step reports
// and, with --in-place, the trainers' gate (null without).
fleet::Result<std::unique_ptr<fleet::httpd::HttpServer>> StartAgent(
    fleet::sidecar::Agent& agent, const fleet::sidecar::AgentOptions& agent_options, const Logger& log) {
  if (auto started = agent.Start(); !started) return fleet::Error{started.error()};
  if (agent_options.report_http.empty()) return std::unique_ptr<fleet::httpd::HttpServer>();
  // Loopback pushes from the trainer's ranks: a few workers, so that one stalled client (one
  // worker for the 2 s request timeout) does not hold the others' reports (http_server.h); and as
  // many again for the trainers' gate, whose long polls hold a worker each (at most that many wait).
  fleet::httpd::HttpServerOptions report_options;
  report_options.threads = 4;
  report_options.max_body_bytes = 64 * 1024;
  std::vector<fleet::httpd::Route> routes = {agent.ReportRoute()};
  std::string gate_note;
  if (auto gate = agent.GateRoute()) {
    routes.push_back(std::move(*gate));
    report_options.threads += fleet::sidecar::TrainerAttemptsConfig().max_waiters;
    gate_note = " and the trainers' gate on " + std::string(fleet::api::kGatePath);
  }
  auto reports = fleet::httpd::HttpServer::Start(agent_options.report_http, std::move(routes), report_options);
  if (!reports.ok()) return fleet::Error{"--report-http: " + reports.error()};
  const int port = (*reports)->port();
  log("taking step reports on http://" + agent_options.report_http + "/v1/report" + gate_note +
      (PortNote(agent_options.report_http, port).empty() ? std::string()
                                                         : " (report port " + std::to_string(port) + ")"));
  return std::move(*reports);
}

// Until SIGTERM/SIGINT, or (--exit-when-ready) until the gate opens; else the agent hears when
// it opens.
void WaitForStop(const Wakeups& wakeups, fleet::sidecar::Gate* gate, fleet::sidecar::Agent* agent,
                 bool exit_when_ready, const Logger& log) {
  while (true) {
    pollfd fds[2] = {{wakeups.signal_fd, POLLIN, 0}, {wakeups.open_fd, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      log(std::string("poll: ") + std::strerror(errno));
      return;
    }
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info{};
      if (::read(wakeups.signal_fd, &info, sizeof info) == static_cast<ssize_t>(sizeof info)) {
        log(std::string("received ") + (info.ssi_signo == SIGINT ? "SIGINT" : "SIGTERM") + "; stopping");
      }
      return;
    }
    if (fds[1].revents & POLLIN) {
      uint64_t count = 0;
      [[maybe_unused]] ssize_t n = ::read(wakeups.open_fd, &count, sizeof count);
      if (exit_when_ready) {
        log("exiting: the gate is open (--exit-when-ready)");
        return;
      }
      if (agent) agent->GateOpened(gate->Servers(), gate->PeerWaitSeconds());
    }
  }
}

// The threads end within ~50 ms unless one is inside an API request (bounded by --api-timeout),
// which is not waited for.
void StopThreads(fleet::sidecar::Gate* gate, fleet::sidecar::Agent* agent, const Logger& log) {
  if (gate && !gate->Stop(std::chrono::milliseconds(1500))) {
    log("a request to the API server is still running; exiting without waiting for it");
  }
  if (agent && !agent->Stop(std::chrono::milliseconds(1500))) {
    log("a request to the API server is still running; exiting without waiting for it");
  }
}

int Run(const fleet::sidecar::CommandLine& command_line, const fleet::EnvMap& env) {
  const bool gated = command_line.command == fleet::sidecar::Command::kGate;
  const GateOptions& options = command_line.gate;
  const fleet::sidecar::AgentOptions& agent_options = command_line.agent;
  Logger log("fleet-sidecar[" + options.ns + "/" + options.pod + "]");

  auto wakeups = OpenWakeups();
  if (!wakeups) {
    log(wakeups.error());
    return 1;
  }
  std::shared_ptr<fleet::kube::Client> client;
  const bool conditions = agent_options.pod_condition || options.in_place;
  if (gated || conditions) {
    auto connected = ConnectToApi(env, options);
    if (!connected) {
      log(connected.error());
      return 1;
    }
    client = *connected;
  }

  auto registry = std::make_shared<prometheus::Registry>();
  std::unique_ptr<fleet::sidecar::Gate> gate;
  if (gated) {
    gate = std::make_unique<fleet::sidecar::Gate>(client, fleet::sidecar::GateConfig::FromOptions(options), log,
                                                  registry);
    gate->OnOpen([open_fd = wakeups->open_fd] {
      const uint64_t one = 1;
      [[maybe_unused]] ssize_t n = ::write(open_fd, &one, sizeof one);
    });
  }
  // A plain init container (--exit-when-ready) only gates: the agent runs in a native sidecar.
  std::unique_ptr<fleet::sidecar::Agent> agent;
  if (!options.exit_when_ready) {
    agent = std::make_unique<fleet::sidecar::Agent>(
        fleet::sidecar::AgentConfig::FromOptions(options, agent_options, gated), log, registry,
        conditions ? client : nullptr);
  }
  if (gate && agent) {
    // The watch's thread, with the gate's lock held: the agent only takes its own lock and notifies.
    gate->OnRunAnnotations([agent = agent.get()](const fleet::sidecar::RunAnnotations& annotations) {
      agent->RunAnnotationsChanged(annotations);
    });
  }

  auto server = fleet::httpd::HttpServer::Start(options.listen, Routes(gate.get(), agent.get(), registry));
  if (!server.ok()) {
    log(server.error());
    return 1;
  }
  std::vector<std::string> paths = {"/startup", "/readyz", "/healthz", "/metrics"};
  if (agent) paths.push_back("/status");
  if (agent && !agent_options.checkpoint_dir.empty()) paths.push_back("/checkpoint");
  if (agent && options.in_place) paths.push_back(fleet::api::kTrainerLivePath);
  const std::string last = paths.back();
  paths.pop_back();
  log("serving " + fleet::JoinStrings(paths, ", ") + " and " + last + " on " + options.listen +
      PortNote(options.listen, (*server)->port()));
  std::unique_ptr<fleet::httpd::HttpServer> report_server;
  if (agent) {
    auto started = StartAgent(*agent, agent_options, log);
    if (!started) {
      log(started.error());
      return 1;
    }
    report_server = std::move(*started);
  }
  if (gate) gate->Start();
  WaitForStop(*wakeups, gate.get(), agent.get(), options.exit_when_ready, log);
  StopThreads(gate.get(), agent.get(), log);
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
