// fleetrun: composition root. Flags -> host facts (with the lists that travel as files,
// env_files.h) -> Paddle 2.3+'s env over the flags -> the gloo dir -> plan -> logs ->
// supervised processes; with an HTTP master (--master ip:port) the plan comes after the nodes'
// rendezvous (master.h); for an elastic job (--elastic_server, or --master etcd://), flags -> host
// facts -> logs -> the elastic node (elastic.h), which plans each generation itself.
// Exit status: 0 success; 2 bad flags or environment (nothing was started; also lists that travel as
// files which are malformed or did not come within 10 minutes; for elastic jobs also an
// unreachable etcd or a duplicate host; with an HTTP master also a failed rendezvous); a failed
// process's own status (128+signal when it died by
// a signal); 128+signal when fleetrun itself was signalled; 124 when parameter servers did not
// accept connections within --server_timeout, or an elastic job stayed below its minimum for
// PADDLE_ELASTIC_TIMEOUT.
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>

#include "fleet/base/strings.h"
#include "fleet/launcher/elastic.h"
#include "fleet/launcher/flags.h"
#include "fleet/launcher/host.h"
#include "fleet/launcher/master.h"
#include "fleet/launcher/plan.h"
#include "fleet/launcher/report.h"
#include "fleet/launcher/supervisor.h"
#include "fleet/runtime/env_files.h"

namespace {

constexpr int kUsageError = 2;

int Fail(int code, const std::string& message) {
  std::cerr << "fleetrun: error: " << message << std::endl;
  return code;
}

bool MakeDirectories(const std::string& path) {
  std::string prefix;
  for (const std::string& part : fleet::SplitString(path, '/')) {
    prefix += part;
    if (!prefix.empty() && ::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) return false;
    prefix += '/';
  }
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Everything after the gloo dir exists: the elastic node, or the HTTP master's rendezvous, the plan
// and the supervised processes. Returns fleetrun's exit status.
int Launch(const fleet::launcher::LaunchOptions& options, fleet::launcher::HostFacts& host) {
  using namespace fleet::launcher;
  auto elastic = ElasticSettingsFrom(options, host.env);
  if (!elastic) return Fail(kUsageError, elastic.error());
  if (*elastic) {
    if (!MakeDirectories(options.log_dir)) {
      return Fail(1, "cannot create log directory '" + options.log_dir + "': " + std::strerror(errno));
    }
    std::cout << FormatConfiguration(options) << std::flush;
    return RunElastic(options, host, **elastic);
  }

  // The HTTP master's rendezvous. Its server threads start with the supervised signals blocked (as
  // main left them), so that those reach only the rendezvous' wait and Supervise.
  std::unique_ptr<HttpRendezvous> rendezvous;
  std::optional<NodeRendezvous> nodes;
  if (HttpMaster(options)) {
    for (const std::string& name : ClusterInputNames()) host.env.erase(name);   // the nodes come from the master
    auto started = HttpRendezvous::Start(options, host);
    auto joined = started ? (*started)->Run() : fleet::Result<NodeRendezvous>(fleet::Error{started.error()});
    if (!joined) {
      const int signal = started ? (*started)->interrupted_by() : 0;
      return Fail(signal ? 128 + signal : kUsageError, joined.error());
    }
    rendezvous = std::move(*started);
    nodes = std::move(*joined);
  }

  auto plan = PlanLaunch(options, host, nodes ? &*nodes : nullptr);
  if (!plan) return Fail(kUsageError, plan.error());
  if (!MakeDirectories(plan->log_dir)) {
    return Fail(1, "cannot create log directory '" + plan->log_dir + "': " + std::strerror(errno));
  }

  std::cout << FormatConfiguration(options);
  for (const std::string& note : plan->notes) std::cout << "NOTE: " << note << "\n";
  std::cout << FormatPlan(*plan);
  if (!plan->direct_start) {
    std::ofstream(plan->log_dir + "/endpoints.log") << plan->endpoints_log;
    std::cout << "details about PADDLE_TRAINER_ENDPOINTS can be found in " << plan->log_dir
              << "/endpoints.log; logs of local processes are in " << plan->log_dir
              << "/workerlog.*, serverlog.* and heterlog.*\n";
  }
  std::cout << std::flush;

  SupervisorOptions supervisor;
  supervisor.grace_period_seconds = options.grace_period_seconds;
  supervisor.server_timeout_seconds = options.server_timeout_seconds;
  return Supervise(*plan, host.env, supervisor);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fleet::launcher;
  auto options = ParseFlags(std::vector<std::string>(argv + 1, argv + argc));
  if (!options) return Fail(kUsageError, options.error());
  if (options->help) {
    std::cout << UsageText();
    return 0;
  }
  if (options->version) {
    std::cout << "fleetrun 0.1.0 (NCCL/CUDA build support: " << (FLEET_HAVE_NCCL ? "yes" : "no") << ")\n";
    return 0;
  }

  HostFacts host = ReadHostFacts();
  // Lists too long for the env travel as files (env_files.h): loaded before anything reads the env.
  // A signal during the wait ends fleetrun by its default action: nothing to clean up yet.
  fleet::EnvFilesWait wait;
  wait.report = [](const std::string& line) { std::cerr << "fleetrun: " << line << std::endl; };
  auto from_files = fleet::ReadEnvFiles(host.env, wait);
  if (!from_files) return Fail(kUsageError, from_files.error());
  for (auto& [name, value] : *from_files) host.env[name] = std::move(value);
  auto env_notes = ApplyLauncherEnv(*options, host.env);
  if (!env_notes) return Fail(kUsageError, env_notes.error());
  for (const std::string& note : *env_notes) std::cerr << "fleetrun: " << note << "\n";

  // From before the gloo dir exists to the exit, the stop signals reach only the waits that handle
  // them (the rendezvous', the elastic node's, Supervise's), never a default action: fleetrun
  // always gets to remove the dir, however the run ends.
  ::pthread_sigmask(SIG_BLOCK, &SupervisedSignals(), nullptr);
  auto gloo_dir = MakeGlooDir(host.env);
  if (!gloo_dir) return Fail(1, gloo_dir.error());
  host.gloo_dir = *gloo_dir;
  const int status = Launch(*options, host);
  RemoveGlooDir(host.gloo_dir);
  return status;
}
