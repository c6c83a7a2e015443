#include "fleet/sidecar/agent.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include "fleet/api/checkpoint.h"
#include "fleet/api/names.h"
#include "fleet/api/sidecar_report.h"
#include "fleet/base/strings.h"
#include "fleet/sidecar/log_tailer.h"
#include "fleet/sidecar/peer_probe.h"
#include "fleet/sidecar/process_watch.h"
#include "fleet/sidecar/trainer_attempts.h"

namespace fleet::sidecar {
namespace {

using Json = nlohmann::json;
using std::chrono::milliseconds;

constexpr size_t kMaxDatagram = 4096;
constexpr size_t kDatagramsPerWake = 1024;
constexpr size_t kMaxReportsPerRequest = 1024;

std::string ErrnoText() { return std::strerror(errno); }

bool IsLoopbackPeer(const std::string& addr) {
  return addr.rfind("127.", 0) == 0 || addr == "::1" || addr.rfind("::ffff:127.", 0) == 0;
}

bool IsLoopbackSockaddr(const sockaddr_storage& s) {
  if (s.ss_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(&s)->sin_addr.s_addr) >> 24) == 127;
  }
  if (s.ss_family == AF_INET6) {
    const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(&s)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&a) || (IN6_IS_ADDR_V4MAPPED(&a) && a.s6_addr[12] == 127);
  }
  return false;
}

// A datagram socket bound to a loopback "HOST:PORT"; -1 and `error` when it cannot be.
int BindUdp(const std::string& address, int* port, std::string* error) {
  const size_t colon = address.rfind(':');
  std::string host = address.substr(0, colon);
  const std::string service = address.substr(colon + 1);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* result = nullptr;
  if (const int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &result); rc != 0) {
    *error = "cannot resolve " + address + ": " + ::gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (const addrinfo* p = result; p; p = p->ai_next) {
    fd = ::socket(p->ai_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) continue;
    if (::bind(fd, p->ai_addr, p->ai_addrlen) == 0) break;
    *error = "cannot bind udp " + address + ": " + ErrnoText();
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(result);
  if (fd < 0) return -1;
  sockaddr_storage bound{};
  socklen_t length = sizeof bound;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &length);
  *port = ntohs(bound.ss_family == AF_INET ? reinterpret_cast<sockaddr_in*>(&bound)->sin_port
                                          : reinterpret_cast<sockaddr_in6*>(&bound)->sin6_port);
  return fd;
}

int BindUnix(const std::string& path, std::string* error) {
  struct stat existing {};
  if (::lstat(path.c_str(), &existing) == 0) {
    if (!S_ISSOCK(existing.st_mode)) {
      *error = "cannot bind " + path + ": it exists and is not a socket";
      return -1;
    }
    ::unlink(path.c_str());  // left by an earlier run of the sidecar
  }
  const int fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    *error = "socket: " + ErrnoText();
    return -1;
  }
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::memcpy(addr.sun_path, path.data(), std::min(path.size(), sizeof addr.sun_path - 1));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    *error = "cannot bind " + path + ": " + ErrnoText();
    ::close(fd);
    return -1;
  }
  // Any process of the pod may report (the trainer runs as another user); the directory (a volume
  // only this pod mounts) is what keeps others out.
  ::chmod(path.c_str(), 0666);
  return fd;
}

const char* SourceName(Agent::Source source) {
  switch (source) {
    case Agent::Source::kLog: return "log";
    case Agent::Source::kHttp: return "http";
    case Agent::Source::kUdp: return "udp";
    case Agent::Source::kUnix: return "unix";
  }
  return "log";
}

std::string JoinRanks(const std::vector<RankProgress>& ranks) {
  std::string out;
  const size_t shown = std::min<size_t>(ranks.size(), 8);
  for (size_t i = 0; i < shown; ++i) out += (i ? ", " : "") + std::to_string(ranks[i].rank);
  if (ranks.size() > shown) out += " and " + std::to_string(ranks.size() - shown) + " more";
  return out;
}

// Writes a checkpoint's outcome into the pod's Checkpoint condition (with no client: nowhere), at
// once and before the request is answered (on a thread the request waits for: Checkpointer): the
// trainer is stopped right after the answer, and the sidecar with it. True only for a saved step,
// which the operator records (status.checkpoint).
Checkpointer::Record RecordCheckpoint(std::shared_ptr<kube::Client> client, const PodIdentity& id,
                                      const ConditionWriterConfig& writer, const Logger& log) {
  if (!client) return nullptr;
  return [client = std::move(client), id, retries = writer.conflict_retries, log](const CheckpointOutcome& outcome) {
    const PodCondition condition{outcome.result == api::kCheckpointSaved, outcome.result, outcome.message};
    const std::string error = WritePodCondition(*client, id.ns, id.pod, api::kCheckpointConditionType, condition, retries);
    log(error.empty() ? "pod condition Checkpoint=" + std::string(condition.status ? "True" : "False") + " (" +
                            outcome.result + ")"
                      : "cannot record the checkpoint in the pod's condition: " + error);
  };
}

}  // namespace

std::string FormatSeconds(double seconds) {
  int64_t s = static_cast<int64_t>(std::max(0.0, std::floor(seconds)));
  const int64_t h = s / 3600, m = (s % 3600) / 60;
  s %= 60;
  std::string out;
  if (h) out += std::to_string(h) + "h";
  if (h || m) out += std::to_string(m) + "m";
  if (!h || s) out += std::to_string(s) + "s";
  return out;
}

struct Agent::Health {
  prometheus::Counter* lines;
  prometheus::Counter* bytes;
  prometheus::Gauge* files;
  prometheus::Counter* rotated;
  prometheus::Counter* truncated;
  prometheus::Counter* read_errors;
  prometheus::Counter* probe_failures;
  prometheus::Counter* reports[4];
  prometheus::Counter* parse_errors[4];
  prometheus::Counter* too_long[4];
  prometheus::Counter* bad_rank[4];
  prometheus::Counter* scalars[4];

  Health(prometheus::Registry& r, const prometheus::Labels& labels) {
    auto counter = [&](const char* name, const char* help) -> prometheus::Family<prometheus::Counter>& {
      return prometheus::BuildCounter().Name(name).Help(help).Labels(labels).Register(r);
    };
    lines = &counter("fleet_sidecar_log_lines_total", "Log lines read from the trainer's logs.").Add({});
    bytes = &counter("fleet_sidecar_log_bytes_total", "Bytes read from the trainer's logs.").Add({});
    files = &prometheus::BuildGauge()
                 .Name("fleet_sidecar_log_files")
                 .Help("Log files being followed.")
                 .Labels(labels)
                 .Register(r)
                 .Add({});
    auto& rotations = counter("fleet_sidecar_log_rotations_total",
                              "Log files found rotated (a new file under the name) or truncated.");
    rotated = &rotations.Add({{"kind", "rotated"}});
    truncated = &rotations.Add({{"kind", "truncated"}});
    read_errors = &counter("fleet_sidecar_log_read_errors_total", "Log files that could not be opened or read.").Add({});
    probe_failures = &counter("fleet_sidecar_peer_probe_failures_total",
                              "Connection attempts to peers that failed, after the gate opened.")
                          .Add({});
    auto& accepted = counter("fleet_sidecar_reports_total",
                             "Step reports taken, by source: log lines and patterns, http, udp, unix.");
    auto& errors = counter("fleet_sidecar_parse_errors_total",
                           "Step lines and pushed reports that could not be read (malformed), by source.");
    auto& dropped = counter("fleet_sidecar_dropped_reports_total",
                            "Lines, reports and scalars left out, by source and reason: too_long (over the "
                            "line or datagram limit), rank (not one of the pod's ranks), scalars (over the "
                            "per-rank limit of custom scalars).");
    for (int s = 0; s < 4; ++s) {
      const std::string source = SourceName(static_cast<Source>(s));
      reports[s] = &accepted.Add({{"source", source}});
      parse_errors[s] = &errors.Add({{"source", source}});
      too_long[s] = &dropped.Add({{"source", source}, {"reason", "too_long"}});
      bad_rank[s] = &dropped.Add({{"source", source}, {"reason", "rank"}});
      scalars[s] = &dropped.Add({{"source", source}, {"reason", "scalars"}});
    }
  }
};

AgentConfig AgentConfig::FromOptions(const GateOptions& gate, const AgentOptions& agent, bool gated) {
  AgentConfig c;
  c.identity = PodIdentity{gate.ns, gate.job, gate.pod, gate.role, agent.rank, agent.ranks};
  c.options = agent;
  c.gated = gated;
  c.in_place = gate.in_place;
  c.server_connect_timeout = gate.server_connect_timeout;
  c.condition.min_interval = agent.condition_min_interval;
  return c;
}

Agent::Agent(AgentConfig config, Logger log, std::shared_ptr<prometheus::Registry> registry,
             std::shared_ptr<kube::Client> client)
    : config_(std::move(config)), log_(std::move(log)), registry_(std::move(registry)) {
  const PodIdentity& id = config_.identity;
  metrics_ = std::make_unique<TrainingMetrics>(id);
  health_ = std::make_unique<Health>(*registry_, prometheus::Labels{{"job", id.job},
                                                                    {"namespace", id.ns},
                                                                    {"role", id.role},
                                                                    {"pod", id.pod}});
  for (const std::string& source : config_.options.patterns) {
    auto pattern = StepPattern::Compile(source);
    if (pattern) patterns_.push_back(std::move(*pattern));  // checked by the flag parser
  }
  LogTailerOptions tail;
  tail.files = config_.options.log_files;
  tail.dir = config_.options.log_dir;
  tail.ranks = config_.identity.ranks;
  tail.max_line_bytes = config_.options.max_line_bytes;
  tailer_ = std::make_unique<LogTailer>(std::move(tail));
  const auto mode = config_.options.main_process == "on"    ? MainProcessMode::kOn
                    : config_.options.main_process == "off" ? MainProcessMode::kOff
                                                            : MainProcessMode::kAuto;
  if (MainProcessWatcher::Enabled(mode, config_.proc)) {
    watcher_ = std::make_unique<MainProcessWatcher>(config_.proc, config_.options.main_process_match, ::getpid());
    main_observed_ = true;
  }
  if (!config_.options.checkpoint_dir.empty()) {
    checkpointer_ = std::make_unique<Checkpointer>(
        CheckpointOptions{config_.options.checkpoint_dir, config_.options.checkpoint_timeout},
        log_, RecordCheckpoint(config_.options.pod_condition ? client : nullptr, id, config_.condition, log_));
  }
  if (client && config_.options.pod_condition) {
    ConditionWriterConfig c = config_.condition;
    c.ns = id.ns;
    c.pod = id.pod;
    c.job = id.job;
    c.role = id.role;
    writer_ = std::make_unique<ConditionWriter>(client, c, log_, registry_);
  }
  if (config_.in_place) {
    TrainerAttemptsConfig t;
    t.ns = id.ns;
    t.pod = id.pod;
    t.proc = config_.proc;
    t.conflict_retries = config_.condition.conflict_retries;
    trainer_ = std::make_unique<TrainerAttempts>(std::move(t), log_, client);
  }
  prober_ = std::make_unique<PeerProber>(config_.server_connect_timeout,
                                         std::max(config_.server_connect_timeout, milliseconds(2000)));
  records_.resize(kBatch);
  line_parsers_.resize(static_cast<size_t>(std::clamp(config_.identity.ranks, 1, TrainingMetrics::kMaxRanks)));
  inputs_.reserve(kBatch);
  if (!config_.gated) gate_open_ = true;
}

Agent::~Agent() {
  if (loop_thread_.joinable() || peer_thread_.joinable()) {
    if (!Stop(std::chrono::seconds(5))) {
      if (loop_thread_.joinable()) loop_thread_.detach();
      if (peer_thread_.joinable()) peer_thread_.detach();
    }
  }
  for (int fd : {wake_fd_, udp_fd_, unix_fd_}) {
    if (fd >= 0) ::close(fd);
  }
  if (unix_fd_ >= 0) ::unlink(config_.options.report_socket.c_str());
}

Status Agent::Start() {
  std::string error;
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) return Error{"eventfd: " + ErrnoText()};
  if (!config_.options.report_udp.empty()) {
    udp_fd_ = BindUdp(config_.options.report_udp, &udp_port_, &error);
    if (udp_fd_ < 0) return Error{"--report-udp: " + error};
  }
  if (!config_.options.report_socket.empty()) {
    unix_fd_ = BindUnix(config_.options.report_socket, &error);
    if (unix_fd_ < 0) return Error{"--report-socket: " + error};
  }
  std::string sources;
  if (!config_.options.log_dir.empty()) sources += " the logs in " + config_.options.log_dir + ",";
  for (const std::string& f : config_.options.log_files) sources += " " + f + ",";
  if (udp_fd_ >= 0) {
    sources += " reports on udp://" + config_.options.report_udp + " (udp port " + std::to_string(udp_port_) + "),";
  }
  if (unix_fd_ >= 0) sources += " reports on " + config_.options.report_socket + ",";
  if (!sources.empty()) sources.pop_back();
  const PodIdentity& id = config_.identity;
  const std::string ranks = id.ranks == 1 ? "rank " + std::to_string(id.first_rank)
                                          : "ranks " + std::to_string(id.first_rank) + "-" +
                                                std::to_string(id.first_rank + id.ranks - 1);
  log_("agent for " + ranks + ": reading" + (sources.empty() ? std::string(" pushed reports only") : sources) +
       "; main process " + (main_observed_ ? "observed" : "not observed") + "; stall window " +
       (config_.options.stall_window.count() ? FormatSeconds(static_cast<double>(config_.options.stall_window.count()) / 1000)
                                            : std::string("off")));
  std::lock_guard<std::mutex> lock(mu_);
  started_ = true;
  running_threads_ = 1;
  loop_thread_ = std::thread([this] { Loop(); });
  if (writer_) writer_->Start();
  if (trainer_) trainer_->Start();
  return OkStatus();
}

void Agent::GateOpened(std::vector<Endpoint> servers, double peer_wait_seconds) {
  metrics_->AddPeerWait(peer_wait_seconds);
  metrics_->SetPeers(servers.size(), servers.size());
  std::lock_guard<std::mutex> lock(mu_);
  if (gate_open_ && config_.gated) return;
  gate_open_ = true;
  servers_ = std::move(servers);
  if (!servers_.empty() && started_ && !stopping_) {
    ++running_threads_;
    peer_thread_ = std::thread([this] { PeerLoop(); });
  }
  const uint64_t one = 1;
  if (wake_fd_ >= 0) [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);  // tick now
}

bool Agent::Stop(milliseconds timeout) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  cancel_.Cancel();
  if (wake_fd_ >= 0) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof one);
  }
  bool ok = true;
  if (writer_ && !writer_->Stop(timeout)) ok = false;
  if (trainer_ && !trainer_->Stop(timeout)) ok = false;
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [this] { return running_threads_ == 0; })) return false;
  }
  if (loop_thread_.joinable()) loop_thread_.join();
  if (peer_thread_.joinable()) peer_thread_.join();
  return ok;
}

// ---- ingest ----

void Agent::ApplyBatch(Source source, bool timed) {
  if (inputs_.empty()) return;
  const ApplyStats stats = metrics_->Apply(inputs_.data(), inputs_.size(), timed);
  const int s = static_cast<int>(source);
  if (stats.applied) health_->reports[s]->Increment(static_cast<double>(stats.applied));
  if (stats.dropped_rank) health_->bad_rank[s]->Increment(static_cast<double>(stats.dropped_rank));
  if (stats.dropped_scalars) health_->scalars[s]->Increment(static_cast<double>(stats.dropped_scalars));
  inputs_.clear();
}

void Agent::OnLogLines(int rank_offset, const std::vector<std::string_view>& lines, bool live) {
  const int rank = config_.identity.first_rank + rank_offset;
  size_t malformed = 0;
  for (std::string_view line : lines) {
    StepRecord& record = records_[inputs_.size()];
    ParseOutcome outcome = ParseOutcome::kNone;
    for (const StepPattern& pattern : patterns_) {
      outcome = pattern.Match(line, &record);
      if (outcome != ParseOutcome::kNone) break;
    }
    if (outcome == ParseOutcome::kNone) {
      // One LineParser per rank's file (a file of another rank offset is parsed the general way,
      // and its steps are dropped as not this pod's).
      outcome = rank_offset < config_.identity.ranks
                    ? line_parsers_[static_cast<size_t>(rank_offset)].Parse(line, &record)
                    : ParseStepLine(line, &record);
    }
    if (outcome == ParseOutcome::kMalformed) {
      ++malformed;
      continue;
    }
    if (outcome != ParseOutcome::kStep) continue;
    inputs_.push_back({rank, &record});
    if (inputs_.size() == kBatch) ApplyBatch(Source::kLog, live);
  }
  ApplyBatch(Source::kLog, live);
  if (malformed) health_->parse_errors[static_cast<int>(Source::kLog)]->Increment(static_cast<double>(malformed));
}

void Agent::IngestText(std::string_view datagram, Source source) {
  const int s = static_cast<int>(source);
  size_t begin = 0;
  while (begin < datagram.size()) {
    size_t end = datagram.find('\n', begin);
    if (end == std::string_view::npos) end = datagram.size();
    const std::string_view line = datagram.substr(begin, end - begin);
    begin = end + 1;
    StepRecord& record = records_[inputs_.size()];
    std::string error;
    const ParseOutcome outcome = ParseTextReport(line, &record, &error);
    if (outcome == ParseOutcome::kMalformed) {
      health_->parse_errors[s]->Increment();
      continue;
    }
    if (outcome != ParseOutcome::kStep) continue;
    const int rank = record.Has(StepRecord::kRank) ? static_cast<int>(record.rank) : config_.identity.first_rank;
    inputs_.push_back({rank, &record});
    if (inputs_.size() == kBatch) ApplyBatch(source, true);
  }
  ApplyBatch(source, true);
}

void Agent::DrainDatagrams(int fd, Source source) {
  char buffer[kMaxDatagram + 1];
  for (size_t i = 0; i < kDatagramsPerWake; ++i) {
    sockaddr_storage from{};
    socklen_t from_length = sizeof from;
    const ssize_t n = ::recvfrom(fd, buffer, sizeof buffer, MSG_DONTWAIT | MSG_TRUNC,
                                 reinterpret_cast<sockaddr*>(&from), &from_length);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;  // EAGAIN: drained
    }
    if (static_cast<size_t>(n) > kMaxDatagram) {
      health_->too_long[static_cast<int>(source)]->Increment();
      continue;
    }
    if (source == Source::kUdp && !IsLoopbackSockaddr(from)) continue;  // bound to loopback: cannot happen
    IngestText(std::string_view(buffer, static_cast<size_t>(n)), source);
  }
}

// ---- the agent thread ----

void Agent::Loop() {
  auto next_poll = Clock::now();
  auto next_tick = Clock::now();
  try {
    while (true) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) break;
      }
      const auto now = Clock::now();
      const auto next = std::min(next_poll, next_tick);
      const int timeout = next <= now ? 0
                                      : static_cast<int>(std::chrono::duration_cast<milliseconds>(next - now).count()) + 1;
      pollfd fds[3] = {{wake_fd_, POLLIN, 0}, {udp_fd_, POLLIN, 0}, {unix_fd_, POLLIN, 0}};
      const int n = ::poll(fds, 3, timeout);
      if (n < 0 && errno != EINTR) {
        log_("poll: " + ErrnoText());
        break;
      }
      bool tick_now = false;
      if (n > 0 && (fds[0].revents & POLLIN)) {
        uint64_t count = 0;
        [[maybe_unused]] ssize_t r = ::read(wake_fd_, &count, sizeof count);
        tick_now = true;
      }
      if (n > 0 && (fds[1].revents & POLLIN)) DrainDatagrams(udp_fd_, Source::kUdp);
      if (n > 0 && (fds[2].revents & POLLIN)) DrainDatagrams(unix_fd_, Source::kUnix);
      const auto after = Clock::now();
      if (after >= next_poll) {
        const bool more = tailer_->Poll(
            [this](int offset, const std::vector<std::string_view>& lines, bool live) { OnLogLines(offset, lines, live); });
        const TailStats& t = tailer_->stats();
        auto add = [](prometheus::Counter* c, uint64_t now_value, uint64_t* seen) {
          if (now_value > *seen) c->Increment(static_cast<double>(now_value - *seen));
          *seen = now_value;
        };
        add(health_->lines, t.lines, &tail_lines_seen_);
        add(health_->bytes, t.bytes, &tail_bytes_seen_);
        add(health_->too_long[0], t.long_lines, &tail_long_seen_);
        add(health_->truncated, t.truncations, &tail_trunc_seen_);
        add(health_->rotated, t.rotations, &tail_rot_seen_);
        health_->files->Set(static_cast<double>(tailer_->files_open()));
        next_poll = more ? after : after + config_.options.log_poll_interval;
      }
      if (after >= next_tick || tick_now) {
        Tick(after);
        next_tick = after + config_.tick;
      }
    }
  } catch (const std::exception& e) {
    log_(std::string("the agent thread stopped: ") + e.what());
  }
  std::lock_guard<std::mutex> lock(mu_);
  --running_threads_;
  cv_.notify_all();
}

void Agent::Tick(Clock::time_point now) {
  std::optional<MainProcessObservation> main;
  if (watcher_) {
    main = watcher_->Check();
    if (main->restarted) metrics_->CountRestart();
    metrics_->SetMainProcessUp(main->running);
  }
  std::vector<RankProgress> progress = metrics_->Progress(now);
  std::vector<RankProgress> stalled;
  const double window = static_cast<double>(config_.options.stall_window.count()) / 1000.0;
  const bool main_gone = main && !main->running;
  if (window > 0 && !main_gone) {
    for (const RankProgress& p : progress) {
      if (p.idle_seconds > window) stalled.push_back(p);
    }
  }
  std::optional<PodCondition> condition;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (main) {
      if (main->running != main_running_ || main->pid != main_pid_) {
        if (main->running) {
          log_(std::string(main->restarted ? "a new main process runs: " : "the main process runs: ") + "pid " +
               std::to_string(main->pid) + " (" + main->command + ")");
        } else if (main_pid_ != 0) {
          log_("the main process (pid " + std::to_string(main_pid_) + ") has ended");
        }
      }
      main_running_ = main->running;
      main_pid_ = main->pid;
      main_command_ = main->command;
    }
    std::string key;
    for (const RankProgress& p : stalled) key += std::to_string(p.rank) + ",";
    if (key != stall_logged_) {
      if (stalled.empty()) {
        log_("training progresses again: no rank is stalled");
      } else {
        log_(std::string(stalled.size() == 1 ? "rank " : "ranks ") + JoinRanks(stalled) + " stalled: no step for " +
             FormatSeconds(stalled.front().idle_seconds) + " (stall window " + FormatSeconds(window) + ")");
      }
      stall_logged_ = key;
    }
    stalled_ = std::move(stalled);
    progress_ = progress;
    if (gate_open_ && writer_) condition = ConditionLocked(progress);
  }
  if (condition) writer_->Desire(*condition);
}

std::string Agent::RankName(int rank) const {
  return "rank " + std::to_string(rank) + " (pod " + config_.identity.pod + ")";
}

PodCondition Agent::ConditionLocked(const std::vector<RankProgress>& progress) const {
  PodCondition c;
  const double window = static_cast<double>(config_.options.stall_window.count()) / 1000.0;
  const PodIdentity& id = config_.identity;
  if (!stalled_.empty()) {
    const auto longest = *std::max_element(stalled_.begin(), stalled_.end(), [](const auto& a, const auto& b) {
      return a.idle_seconds < b.idle_seconds;
    });
    c.status = false;
    c.reason = "Stalled";
    if (stalled_.size() == 1) {
      c.message = RankName(longest.rank) + " has reported no step for " + FormatSeconds(longest.idle_seconds) +
                  " (last step " + std::to_string(longest.step) + "; stall window " + FormatSeconds(window) + ")";
    } else {
      c.message = "ranks " + JoinRanks(stalled_) + " (pod " + id.pod + ") have reported no step for up to " +
                  FormatSeconds(longest.idle_seconds) + " (stall window " + FormatSeconds(window) + ")";
    }
    return c;
  }
  c.status = true;
  const std::string ranks = id.ranks == 1 ? "rank " + std::to_string(id.first_rank)
                                          : "ranks " + std::to_string(id.first_rank) + "-" +
                                                std::to_string(id.first_rank + id.ranks - 1);
  if (progress.empty()) {
    c.reason = "AwaitingFirstStep";
    c.message = "no training step reported yet by " + ranks + " (pod " + id.pod + ")";
  } else {
    c.reason = "Progressing";
    c.message = ranks + " (pod " + id.pod + ") report training steps";
  }
  return c;
}

// ---- peers ----

void Agent::PeerLoop() {
  std::vector<Endpoint> servers;
  {
    std::lock_guard<std::mutex> lock(mu_);
    servers = servers_;
  }
  bool waiting = false;
  Clock::time_point accounted;
  try {
    while (!cancel_.cancelled()) {
      const std::vector<ProbeOutcome> outcomes = prober_->ProbeAll(servers, cancel_);
      if (cancel_.cancelled()) break;
      std::vector<std::string> unreachable;
      for (size_t i = 0; i < servers.size(); ++i) {
        if (outcomes[i].reached) continue;
        health_->probe_failures->Increment();
        unreachable.push_back(servers[i].ToString() + " (" + outcomes[i].error + ")");
      }
      metrics_->SetPeers(servers.size(), servers.size() - unreachable.size());
      const auto now = Clock::now();
      if (!unreachable.empty()) {
        if (waiting) metrics_->AddPeerWait(std::chrono::duration<double>(now - accounted).count());
        accounted = now;
      } else if (waiting) {
        metrics_->AddPeerWait(std::chrono::duration<double>(now - accounted).count());
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (unreachable.empty() != unreachable_.empty() || (!unreachable.empty() && !waiting)) {
          log_(unreachable.empty() ? std::string("every peer accepts connections again")
                                   : "peers unreachable: " + JoinStrings(unreachable, ", "));
        }
        unreachable_ = unreachable;
        peers_checked_ = true;
      }
      waiting = !unreachable.empty();
      if (cancel_.SleepFor(config_.options.peer_check_interval)) break;
    }
  } catch (const std::exception& e) {
    log_(std::string("the peer check thread stopped: ") + e.what());
  }
  std::lock_guard<std::mutex> lock(mu_);
  --running_threads_;
  cv_.notify_all();
}

// ---- readiness and HTTP ----

std::string Agent::NotReadyLocked(bool gate_open) const {
  std::vector<std::string> why;
  if (!gate_open_ && !gate_open) why.push_back("the startup gate is not open");
  if (!unreachable_.empty()) why.push_back("peers unreachable: " + JoinStrings(unreachable_, ", "));
  if (main_observed_ && !main_running_) why.push_back("the main process is not running");
  if (!stalled_.empty()) {
    const double window = static_cast<double>(config_.options.stall_window.count()) / 1000.0;
    why.push_back(std::string(stalled_.size() == 1 ? "rank " : "ranks ") + JoinRanks(stalled_) +
                  " stalled: no step for " + FormatSeconds(stalled_.front().idle_seconds) + " (stall window " +
                  FormatSeconds(window) + ")");
  }
  return JoinStrings(why, "; ");
}

std::string Agent::NotReady(bool gate_open) const {
  std::lock_guard<std::mutex> lock(mu_);
  return NotReadyLocked(gate_open);
}

httpd::Response Agent::ApplyReports(const std::vector<StepRecord>& records) {
  const int s = static_cast<int>(Source::kHttp);
  std::vector<TrainingMetrics::Input> inputs;
  inputs.reserve(records.size());
  for (const StepRecord& r : records) {
    inputs.push_back({r.Has(StepRecord::kRank) ? static_cast<int>(r.rank) : config_.identity.first_rank, &r});
  }
  const ApplyStats stats = metrics_->Apply(inputs.data(), inputs.size(), true);
  if (stats.applied) health_->reports[s]->Increment(static_cast<double>(stats.applied));
  if (stats.dropped_rank) health_->bad_rank[s]->Increment(static_cast<double>(stats.dropped_rank));
  if (stats.dropped_scalars) health_->scalars[s]->Increment(static_cast<double>(stats.dropped_scalars));
  if (stats.applied == 0 && stats.dropped_rank > 0) {
    const PodIdentity& id = config_.identity;
    return httpd::Response::Text(422, "rank out of range: this pod has ranks " + std::to_string(id.first_rank) +
                                          "-" + std::to_string(id.first_rank + id.ranks - 1) + "\n");
  }
  return httpd::Response{200, "application/json",
                         Json{{"accepted", stats.applied}, {"dropped", stats.dropped_rank}}.dump() + "\n"};
}

httpd::Route Agent::ReportRoute() {
  return {"/v1/report", {"POST"}, [this](const httpd::Request& request) {
            if (!IsLoopbackPeer(request.remote_addr)) {
              return httpd::Response::Text(403, "reports are taken from this pod (loopback) only\n");
            }
            const int s = static_cast<int>(Source::kHttp);
            const size_t first = request.body.find_first_not_of(" \t\r\n");
            if (first == std::string::npos) return httpd::Response::Text(400, "the body is empty\n");
            if (request.body[first] != '{' && request.body[first] != '[') {
              // Text protocol lines, as over UDP.
              std::vector<StepRecord> records;
              size_t begin = 0;
              while (begin < request.body.size()) {
                size_t end = request.body.find('\n', begin);
                if (end == std::string::npos) end = request.body.size();
                const std::string_view line(request.body.data() + begin, end - begin);
                begin = end + 1;
                StepRecord record;
                std::string error;
                const ParseOutcome outcome = ParseTextReport(line, &record, &error);
                if (outcome == ParseOutcome::kMalformed) {
                  health_->parse_errors[s]->Increment();
                  return httpd::Response::Text(400, "line " + std::to_string(records.size() + 1) + ": " + error + "\n");
                }
                if (outcome != ParseOutcome::kStep) continue;
                if (records.size() == kMaxReportsPerRequest) {
                  health_->parse_errors[s]->Increment();
                  return httpd::Response::Text(400, "at most " + std::to_string(kMaxReportsPerRequest) +
                                                        " reports per request\n");
                }
                records.push_back(record);
              }
              return ApplyReports(records);
            }
            Json body = Json::parse(request.body, nullptr, /*allow_exceptions=*/false);
            if (body.is_discarded()) {
              health_->parse_errors[s]->Increment();
              return httpd::Response::Text(400, "the body is not JSON\n");
            }
            auto records = ParseJsonReport(body, kMaxReportsPerRequest);
            if (!records) {
              health_->parse_errors[s]->Increment();
              return httpd::Response::Text(400, records.error() + "\n");
            }
            return ApplyReports(*records);
          }};
}

namespace {

// One rank in GET /status, as the operator's progress collector reads it (docs/sidecar.md).
api::SidecarReport::Rank ReportedRank(const RankProgress& p) {
  return {p.rank, p.step, p.steps, p.idle_seconds, p.epoch, p.total_steps, p.loss, p.samples_per_second, p.step_seconds};
}

}  // namespace

httpd::Route Agent::StatusRoute() {
  return {"/status", {}, [this](const httpd::Request&) {
            api::SidecarReport report;
            {
              std::lock_guard<std::mutex> lock(mu_);
              report.not_ready = NotReadyLocked();
              report.ready = report.not_ready.empty();
              report.gate_open = gate_open_;
              if (main_observed_) report.main_process = {main_running_, main_pid_, main_command_};
              for (const RankProgress& p : progress_) report.ranks.push_back(ReportedRank(p));
              for (const RankProgress& p : stalled_) report.stalled.push_back(p.rank);
              report.peers = {static_cast<int>(servers_.size()), unreachable_};
            }
            if (checkpointer_) {
              if (auto last = checkpointer_->last()) report.checkpoint = {last->result, last->step, last->message};
            }
            if (writer_) {
              if (auto written = writer_->written()) {
                report.condition = {written->status, written->reason, written->message};
              }
              report.condition_error = writer_->last_error();
            }
            if (trainer_) report.trainer = trainer_->Report();
            // A trainer's command line is any bytes: what is not UTF-8 is replaced, never thrown
            // about (which answered 500 for the pod's life).
            return httpd::Response{200, "application/json",
                                   report.ToJson().dump(2, ' ', false, Json::error_handler_t::replace) + "\n"};
          }};
}

std::optional<httpd::Route> Agent::CheckpointRoute() {
  if (!checkpointer_) return std::nullopt;
  return checkpointer_->Route();
}

std::optional<httpd::Route> Agent::GateRoute() {
  if (!trainer_) return std::nullopt;
  return trainer_->GateRoute();
}

std::optional<httpd::Route> Agent::TrainerLiveRoute() {
  if (!trainer_) return std::nullopt;
  return trainer_->LiveRoute();
}

void Agent::RunAnnotationsChanged(const RunAnnotations& annotations) {
  if (trainer_) trainer_->SetRunAnnotations(annotations);
}

}  // namespace fleet::sidecar
