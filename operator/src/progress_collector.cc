#include "fleet/operator/progress_collector.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <limits>
#include <memory>
#include <set>
#include <utility>

namespace fleet::op {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;

// One GET /status, start to finish, on the collector's io_context; `done` runs once.
class StatusFetch : public std::enable_shared_from_this<StatusFetch> {
 public:
  StatusFetch(asio::io_context& io, const ProgressJob::Pod& pod, const ProgressCollectorOptions& options,
              std::chrono::steady_clock::time_point deadline, std::function<void(std::optional<std::string>)> done)
      : stream_(io), pod_(pod), options_(options), deadline_(deadline), done_(std::move(done)) {
    parser_.body_limit(options.max_body);
  }

  void Start() {
    boost::system::error_code ec;
    const auto address = asio::ip::make_address(pod_.ip, ec);
    if (ec || pod_.port <= 0 || pod_.port > 65535) return Finish(std::nullopt);
    request_ = {http::verb::get, "/status", 11};
    request_.set(http::field::host, pod_.ip + ":" + std::to_string(pod_.port));
    request_.set(http::field::user_agent, "fleet-operator");
    request_.keep_alive(false);
    // The whole exchange, not each step; and never past the collection's deadline.
    stream_.expires_at(std::min(std::chrono::steady_clock::now() + options_.timeout, deadline_));
    stream_.async_connect(asio::ip::tcp::endpoint(address, static_cast<uint16_t>(pod_.port)),
                          [self = shared_from_this()](beast::error_code error) { self->Connected(error); });
  }

 private:
  void Connected(beast::error_code ec) {
    if (ec) return Finish(std::nullopt);
    http::async_write(stream_, request_, [self = shared_from_this()](beast::error_code error, size_t) {
      if (error) return self->Finish(std::nullopt);
      http::async_read_header(self->stream_, self->buffer_, self->parser_,
                              [self](beast::error_code read_error, size_t) { self->ReadHeader(read_error); });
    });
  }

  // The parser's body limit alone has let a declared length over it through (Boost 1.74): a
  // declared length is checked here, before any of the body is read.
  // The error first: content_length() asserts a header was read (a peer that reset the connection
  // aborted the operator where assertions are on).
  void ReadHeader(beast::error_code ec) {
    if (ec || parser_.get().result() != http::status::ok) return Finish(std::nullopt);
    const auto length = parser_.content_length();
    if (length && *length > options_.max_body) return Finish(std::nullopt);
    http::async_read(stream_, buffer_, parser_,
                     [self = shared_from_this()](beast::error_code error, size_t) { self->Read(error); });
  }

  void Read(beast::error_code ec) {
    if (ec || parser_.get().body().size() > options_.max_body) return Finish(std::nullopt);
    Finish(std::move(parser_.get().body()));
  }

  void Finish(std::optional<std::string> body) {
    beast::error_code ignored;
    stream_.socket().close(ignored);
    if (done_) std::exchange(done_, nullptr)(std::move(body));
  }

  beast::tcp_stream stream_;
  const ProgressJob::Pod pod_;
  const ProgressCollectorOptions options_;
  const std::chrono::steady_clock::time_point deadline_;
  std::function<void(std::optional<std::string>)> done_;
  http::request<http::empty_body> request_;
  beast::flat_buffer buffer_{8192};
  http::response_parser<http::string_body> parser_;
};

using RankKey = std::pair<std::string, int>;

// The ranks a pod may report, and how many: those it runs when they are known, else its role's.
struct RankBound {
  int64_t first = 0;
  int64_t end = 0;      // one past the last
  size_t most = 0;
};

RankBound BoundOf(const ProgressJob& job, const ProgressJob::Pod& pod) {
  RankBound bound{0, std::numeric_limits<int64_t>::max(), static_cast<size_t>(kMaxRanksPerPod)};
  if (auto role = job.expected_ranks.find(pod.role); role != job.expected_ranks.end()) bound.end = role->second;
  if (pod.first_rank >= 0) {
    const int ranks = std::clamp(pod.ranks, 1, kMaxRanksPerPod);
    bound.first = pod.first_rank;
    bound.end = std::min<int64_t>(bound.end, int64_t{pod.first_rank} + ranks);
    bound.most = static_cast<size_t>(ranks);
  }
  return bound;
}

// The ranks a job may keep in all: its ranks, as the spec counts them.
size_t JobRoom(const ProgressJob& job) {
  size_t ranks = 0;
  for (const auto& [role, n] : job.expected_ranks) ranks += static_cast<size_t>(std::max(0, n));
  return job.expected_ranks.empty() ? job.pods.size() * static_cast<size_t>(kMaxRanksPerPod) : ranks;
}

}  // namespace

// One job's collection under way: what its pods reported so far, and how many are still to answer.
struct ProgressCollector::PendingJob {
  JobState state;
  size_t left = 0;
  size_t room = 0;          // ranks the job may still keep
  size_t dropped = 0;       // reports not kept
  std::set<RankKey> seen;   // no rank twice, whichever pod claims it

  // Keeps what `pod` reported of its own ranks, within the bounds; counts the rest as dropped.
  void Keep(const ProgressJob& job, const ProgressJob::Pod& pod, std::vector<RankReport> reports) {
    const RankBound bound = BoundOf(job, pod);
    size_t kept = 0;
    for (RankReport& r : reports) {
      if (r.rank < bound.first || r.rank >= bound.end || kept == bound.most || room == 0 ||
          !seen.insert({r.role, r.rank}).second) {
        ++dropped;
        continue;
      }
      state.ranks.push_back(std::move(r));
      ++kept;
      --room;
    }
  }
};

void FetchSidecarStatuses(const std::vector<ProgressJob::Pod>& pods, const ProgressCollectorOptions& options,
                          std::chrono::steady_clock::time_point deadline,
                          const std::function<void(size_t index, std::optional<std::string> body)>& on_body) {
  asio::io_context io(1);
  size_t next = 0;
  // Each fetch, when done, starts the next one: at most `concurrency` are in flight.
  std::function<void()> start_next = [&] {
    if (next >= pods.size() || std::chrono::steady_clock::now() >= deadline) return;
    const size_t i = next++;
    std::make_shared<StatusFetch>(io, pods[i], options, deadline, [&, i](std::optional<std::string> body) {
      on_body(i, std::move(body));
      start_next();
    })->Start();
  };
  for (int k = 0; k < std::max(1, options.concurrency); ++k) start_next();
  io.run();
}

std::vector<std::optional<std::string>> FetchSidecarStatuses(const std::vector<ProgressJob::Pod>& pods,
                                                             const ProgressCollectorOptions& options) {
  std::vector<std::optional<std::string>> bodies(pods.size());
  FetchSidecarStatuses(pods, options, std::chrono::steady_clock::time_point::max(),
                       [&](size_t i, std::optional<std::string> body) { bodies[i] = std::move(body); });
  return bodies;
}

ProgressCollector::ProgressCollector(ProgressCollectorOptions options, Targets targets, Changed changed,
                                     Collected collected)
    : options_(options), targets_(std::move(targets)), changed_(std::move(changed)), collected_(std::move(collected)) {}

ProgressCollector::~ProgressCollector() { Stop(); }

void ProgressCollector::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  if (thread_.joinable()) return;
  stopping_ = false;
  thread_ = std::thread([this] { Loop(); });
}

void ProgressCollector::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

// A collection every interval, start to start: one that took long does not push the next back.
void ProgressCollector::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    const auto next = std::chrono::steady_clock::now() + options_.interval;
    lock.unlock();
    CollectOnce();
    lock.lock();
    cv_.wait_until(lock, next, [this] { return stopping_; });
  }
}

// (job, pod) in the order to ask them: the jobs in turn, a pod at a time; within a job the pods
// not asked last time, then those that answered, then those that did not.
std::vector<std::pair<size_t, size_t>> ProgressCollector::FetchOrder(const std::vector<ProgressJob>& jobs) const {
  std::vector<std::vector<std::pair<JobState::Asked, size_t>>> queues(jobs.size());
  size_t longest = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    auto known = jobs_.find(jobs[j].key);
    for (size_t p = 0; p < jobs[j].pods.size(); ++p) {
      JobState::Asked asked = JobState::Asked::kAnswered;
      if (known != jobs_.end() && known->second.run == jobs[j].run) {
        if (auto it = known->second.pods.find(jobs[j].pods[p].name); it != known->second.pods.end()) asked = it->second;
      }
      queues[j].push_back({asked, p});
    }
    std::stable_sort(queues[j].begin(), queues[j].end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    longest = std::max(longest, queues[j].size());
  }
  std::vector<std::pair<size_t, size_t>> order;
  for (size_t k = 0; k < longest; ++k) {
    for (size_t j = 0; j < jobs.size(); ++j) {
      if (k < queues[j].size()) order.push_back({j, queues[j][k].second});
    }
  }
  return order;
}

void ProgressCollector::CollectOnce() {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<ProgressJob> jobs = targets_();
  std::vector<PendingJob> pending(jobs.size());
  for (size_t j = 0; j < jobs.size(); ++j) {
    pending[j].state.run = jobs[j].run;
    pending[j].left = jobs[j].pods.size();
    pending[j].room = JobRoom(jobs[j]);
    for (const ProgressJob::Pod& pod : jobs[j].pods) pending[j].state.pods[pod.name] = JobState::Asked::kNot;
  }
  const std::vector<std::pair<size_t, size_t>> order = FetchOrder(jobs);
  std::vector<ProgressJob::Pod> pods;
  for (const auto& [j, p] : order) pods.push_back(jobs[j].pods[p]);

  // Each answer is parsed as it arrives (only `concurrency` bodies are held at once), and a job is
  // summarized as soon as its last pod has answered.
  Stats collection;
  const auto deadline = start + std::max<std::chrono::steady_clock::duration>(options_.interval, options_.timeout);
  FetchSidecarStatuses(pods, options_, deadline, [&](size_t i, std::optional<std::string> body) {
    const ProgressJob& job = jobs[order[i].first];
    const ProgressJob::Pod& pod = pods[i];
    PendingJob& p = pending[order[i].first];
    ++collection.requests;
    auto ranks = body ? ParseSidecarStatus(*body, pod.role, pod.name) : Result<std::vector<RankReport>>(Error{""});
    p.state.pods[pod.name] = ranks.ok() ? JobState::Asked::kAnswered : JobState::Asked::kSilent;
    if (ranks.ok()) {
      p.Keep(job, pod, std::move(ranks).value());
    } else {
      ++collection.failures;
    }
    if (--p.left == 0) Finish(job, p);
  });
  for (size_t j = 0; j < jobs.size(); ++j) {
    if (pending[j].left > 0) Finish(jobs[j], pending[j]);   // pods not asked for lack of time
    collection.dropped_ranks += pending[j].dropped;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.requests += collection.requests;
    stats_.failures += collection.failures;
    stats_.dropped_ranks += collection.dropped_ranks;
    // Jobs no longer running are forgotten.
    for (auto it = jobs_.begin(); it != jobs_.end();) {
      const bool running = std::any_of(jobs.begin(), jobs.end(), [&](const ProgressJob& job) { return job.key == it->first; });
      it = running ? std::next(it) : jobs_.erase(it);
    }
  }
  if (collected_) {
    collected_(collection, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
}

void ProgressCollector::Finish(const ProgressJob& job, PendingJob& pending) {
  JobState& state = pending.state;
  state.at = std::chrono::steady_clock::now();
  // Only this thread writes jobs_: reading it needs no lock.
  auto before = jobs_.find(job.key);
  const bool same_run = before != jobs_.end() && before->second.run == job.run;
  ProgressInput input{state.ranks, nullptr, 0, job.expected_ranks, job.total_steps};
  if (same_run) {
    input.previous = &before->second.ranks;
    input.seconds_since_previous = std::chrono::duration<double>(state.at - before->second.at).count();
  }
  state.summary = SummarizeProgress(input);
  state.dropping = pending.dropped > 0;
  if (state.dropping && !(same_run && before->second.dropping)) {
    options_.log.Log(LogLevel::kWarning, "progress: the job's sidecars report ranks that are not theirs, or too many; "
                     "those reports are dropped (logged once while it lasts)",
                     {{"fleetjob", job.key}, {"dropped", std::to_string(pending.dropped)},
                      {"kept", std::to_string(state.ranks.size())}});
  }
  bool changed = false;
  if (!state.summary && same_run) {
    // No sidecar answered this time: keep what was known.
    state.ranks = before->second.ranks;
    state.at = before->second.at;
    state.summary = before->second.summary;
  } else {
    changed = before == jobs_.end() || before->second.summary != state.summary;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    jobs_[job.key] = std::move(state);
  }
  pending.left = 0;
  if (changed) changed_(job.key);
}
std::optional<Progress> ProgressCollector::Latest(const std::string& key, int run) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(key);
  if (it == jobs_.end() || it->second.run != run) return std::nullopt;
  return it->second.summary;
}

ProgressCollector::Stats ProgressCollector::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace fleet::op
