#include "fleet/operator/progress_collector.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <memory>
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
              std::function<void(std::optional<std::string>)> done)
      : stream_(io), pod_(pod), options_(options), done_(std::move(done)) {
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
    stream_.expires_after(options_.timeout);   // the whole exchange, not each step
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
  void ReadHeader(beast::error_code ec) {
    const auto length = parser_.content_length();
    if (ec || parser_.get().result() != http::status::ok || (length && *length > options_.max_body)) {
      return Finish(std::nullopt);
    }
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
  std::function<void(std::optional<std::string>)> done_;
  http::request<http::empty_body> request_;
  beast::flat_buffer buffer_{8192};
  http::response_parser<http::string_body> parser_;
};

}  // namespace

std::vector<std::optional<std::string>> FetchSidecarStatuses(const std::vector<ProgressJob::Pod>& pods,
                                                             const ProgressCollectorOptions& options) {
  std::vector<std::optional<std::string>> bodies(pods.size());
  asio::io_context io(1);
  size_t next = 0;
  // Each fetch, when done, starts the next one: at most `concurrency` are in flight.
  std::function<void()> start_next = [&] {
    if (next >= pods.size()) return;
    const size_t i = next++;
    std::make_shared<StatusFetch>(io, pods[i], options, [&, i](std::optional<std::string> body) {
      bodies[i] = std::move(body);
      start_next();
    })->Start();
  };
  for (int k = 0; k < std::max(1, options.concurrency); ++k) start_next();
  io.run();
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

void ProgressCollector::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    lock.unlock();
    CollectOnce();
    lock.lock();
    cv_.wait_for(lock, options_.interval, [this] { return stopping_; });
  }
}

void ProgressCollector::CollectOnce() {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<ProgressJob> jobs = targets_();
  std::vector<ProgressJob::Pod> pods;
  for (const ProgressJob& job : jobs) pods.insert(pods.end(), job.pods.begin(), job.pods.end());
  const auto bodies = FetchSidecarStatuses(pods, options_);
  const auto now = std::chrono::steady_clock::now();

  std::vector<std::string> changed;
  size_t failures = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::map<std::string, JobState> next;
    size_t i = 0;
    for (const ProgressJob& job : jobs) {
      JobState state;
      state.run = job.run;
      state.at = now;
      for (const ProgressJob::Pod& pod : job.pods) {
        const std::optional<std::string>& body = bodies[i++];
        ++stats_.requests;
        auto ranks = body ? ParseSidecarStatus(*body, pod.role, pod.name) : Result<std::vector<RankReport>>(Error{""});
        if (!ranks.ok()) {
          ++stats_.failures;
          ++failures;
          continue;
        }
        state.ranks.insert(state.ranks.end(), ranks->begin(), ranks->end());
      }
      ProgressInput input{state.ranks, nullptr, 0, job.expected_ranks, job.total_steps};
      auto before = jobs_.find(job.key);
      if (before != jobs_.end() && before->second.run == job.run) {
        input.previous = &before->second.ranks;
        input.seconds_since_previous = std::chrono::duration<double>(now - before->second.at).count();
      }
      state.summary = SummarizeProgress(input);
      if (state.summary.is_null() && before != jobs_.end() && before->second.run == job.run) {
        state = before->second;   // no sidecar answered this time: keep what was known
      } else if (before == jobs_.end() || before->second.summary != state.summary) {
        changed.push_back(job.key);
      }
      next[job.key] = std::move(state);
    }
    jobs_ = std::move(next);   // jobs no longer running are forgotten
  }
  if (collected_) collected_(pods.size(), failures, std::chrono::duration<double>(now - start).count());
  for (const std::string& key : changed) changed_(key);
}

std::optional<Json> ProgressCollector::Latest(const std::string& key, int run) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = jobs_.find(key);
  if (it == jobs_.end() || it->second.run != run || it->second.summary.is_null()) return std::nullopt;
  return it->second.summary;
}

ProgressCollector::Stats ProgressCollector::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

}  // namespace fleet::op
