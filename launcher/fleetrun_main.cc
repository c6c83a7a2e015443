// fleetrun: composition root. Flags -> Paddle 2.3+'s env over them -> host facts -> plan -> logs ->
// supervised processes; with an HTTP master (--master ip:port) the plan comes after the nodes'
// rendezvous (master.h); for an elastic job (--elastic_server, or --master etcd://), flags -> host
// facts -> logs -> the elastic node (elastic.h), which plans each generation itself.
// Exit status: 0 success; 2 bad flags or environment (nothing was started; for elastic jobs also an
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
  auto env_notes = ApplyLauncherEnv(*options, host.env);
  if (!env_notes) return Fail(kUsageError, env_notes.error());
  for (const std::string& note : *env_notes) std::cerr << "fleetrun: " << note << "\n";
  const char* tmp = std::getenv("TMPDIR");
  std::string gloo_dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/fleetrun-gloo-XXXXXX";
  if (!::mkdtemp(gloo_dir.data())) return Fail(1, "cannot create a gloo directory in " + gloo_dir + ": " + std::strerror(errno));
  host.gloo_dir = gloo_dir;

  auto elastic = ElasticSettingsFrom(*options, host.env);
  if (!elastic) {
    ::rmdir(gloo_dir.c_str());
    return Fail(kUsageError, elastic.error());
  }
  if (*elastic) {
    if (!MakeDirectories(options->log_dir)) {
      ::rmdir(gloo_dir.c_str());
      return Fail(1, "cannot create log directory '" + options->log_dir + "': " + std::strerror(errno));
    }
    std::cout << FormatConfiguration(*options) << std::flush;
    const int status = RunElastic(*options, host, **elastic);
    ::rmdir(gloo_dir.c_str());
    return status;
  }

  // The HTTP master's rendezvous. Its server threads start with the supervised signals blocked, so
  // that those reach only the rendezvous' wait and Supervise.
  ::pthread_sigmask(SIG_BLOCK, &SupervisedSignals(), nullptr);
  std::unique_ptr<HttpRendezvous> rendezvous;
  std::optional<NodeRendezvous> nodes;
  if (HttpMaster(*options)) {
    for (const std::string& name : ClusterInputNames()) host.env.erase(name);   // the nodes come from the master
    auto started = HttpRendezvous::Start(*options, host);
    auto joined = started ? (*started)->Run() : fleet::Result<NodeRendezvous>(fleet::Error{started.error()});
    if (!joined) {
      ::rmdir(gloo_dir.c_str());
      const int signal = started ? (*started)->interrupted_by() : 0;
      return Fail(signal ? 128 + signal : kUsageError, joined.error());
    }
    rendezvous = std::move(*started);
    nodes = std::move(*joined);
  }

  auto plan = PlanLaunch(*options, host, nodes ? &*nodes : nullptr);
  if (!plan) {
    ::rmdir(gloo_dir.c_str());
    return Fail(kUsageError, plan.error());
  }
  if (!MakeDirectories(plan->log_dir)) {
    ::rmdir(gloo_dir.c_str());
    return Fail(1, "cannot create log directory '" + plan->log_dir + "': " + std::strerror(errno));
  }

  std::cout << FormatConfiguration(*options);
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
  supervisor.grace_period_seconds = options->grace_period_seconds;
  supervisor.server_timeout_seconds = options->server_timeout_seconds;
  const int status = Supervise(*plan, host.env, supervisor);
  ::rmdir(gloo_dir.c_str());  // only when empty: a gloo FILE store that used it keeps its files
  return status;
}
