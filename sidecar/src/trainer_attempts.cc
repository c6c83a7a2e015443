#include "fleet/sidecar/trainer_attempts.h"

#include <algorithm>
#include <charconv>

#include <nlohmann/json.hpp>

#include "fleet/sidecar/condition.h"
#include "fleet/sidecar/process_watch.h"

namespace fleet::sidecar {
namespace {

using Json = nlohmann::json;
using api::TrainerReport;
using api::TrainerState;
using std::chrono::milliseconds;

// A whole number that fills `text` (no sign, no spaces); nullopt otherwise.
template <typename T>
std::optional<T> WholeNumber(std::string_view text) {
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || text.front() == '-' || error != std::errc() || end != text.data() + text.size()) {
    return std::nullopt;
  }
  return value;
}

// The value of `name` in a query string ("a=1&b=2"); nullopt when absent.
std::optional<std::string_view> QueryValue(std::string_view query, std::string_view name) {
  while (!query.empty()) {
    const size_t amp = query.find('&');
    const std::string_view item = query.substr(0, amp);
    if (item.size() > name.size() && item.substr(0, name.size()) == name && item[name.size()] == '=') {
      return item.substr(name.size() + 1);
    }
    if (amp == std::string_view::npos) break;
    query.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

httpd::Response JsonAnswer(int status, const Json& body) {
  return httpd::Response{status, "application/json", body.dump() + "\n"};
}

std::string Describe(const TrainerReport& report) {
  return std::string(report.Reason()) + " " + std::to_string(report.run);
}

}  // namespace

Result<TrainerInstance> TrainerInstance::Parse(std::string_view text) {
  // A client may percent-encode the colon.
  std::string plain(text);
  for (const char* encoded : {"%3A", "%3a"}) {
    if (const size_t at = plain.find(encoded); at != std::string::npos) plain.replace(at, 3, ":");
  }
  const size_t colon = plain.find(':');
  const std::string_view view(plain);
  const auto pid = colon == std::string::npos ? std::nullopt : WholeNumber<pid_t>(view.substr(0, colon));
  const auto start = colon == std::string::npos ? std::nullopt : WholeNumber<uint64_t>(view.substr(colon + 1));
  if (!pid || *pid <= 0 || !start) {
    return Error{"instance: expected <pid>:<starttime> of the container's first process, got '" +
                 std::string(text.substr(0, 64)) + "'"};
  }
  return TrainerInstance{*pid, *start};
}

TrainerAttempts::TrainerAttempts(TrainerAttemptsConfig config, Logger log, std::shared_ptr<kube::Client> client)
    : config_(std::move(config)), log_(std::move(log)), client_(std::move(client)) {}

TrainerAttempts::~TrainerAttempts() {
  if (thread_.joinable() && !Stop(std::chrono::seconds(5))) thread_.detach();
}

void TrainerAttempts::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  running_ = true;
  thread_ = std::thread([this] { Loop(); });
}

bool TrainerAttempts::Stop(milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  stopping_ = true;
  WakeLocked();
  if (!cv_.wait_for(lock, timeout, [this] { return !running_; })) return false;
  lock.unlock();
  if (thread_.joinable()) thread_.join();
  return true;
}

void TrainerAttempts::SetRunAnnotations(const RunAnnotations& annotations) {
  std::lock_guard<std::mutex> lock(mu_);
  if (annotations == annotations_) return;
  annotations_ = annotations;
  std::string text = annotations.run ? "the endpoints ConfigMap holds run " + std::to_string(*annotations.run)
                                     : std::string("the endpoints ConfigMap holds no run");
  if (annotations.run && !annotations.OpenRun()) text += " behind the operator's barrier";
  log_(text);
  WakeLocked();
}

// ---- state, under mu_ ----

void TrainerAttempts::WakeLocked() {
  wake_ = true;
  cv_.notify_all();
}

bool TrainerAttempts::AliveLocked(const TrainerInstance& instance) const {
  const std::optional<ProcStat> stat = ReadProcStat(config_.proc, instance.pid);
  return stat && !stat->Ended() && stat->start_time == instance.start_time;
}

int TrainerAttempts::FloorLocked(int expected) const {
  return binding_ ? std::max(expected, binding_->run + 1) : expected;
}

void TrainerAttempts::BindLocked(const TrainerInstance& instance, int run) {
  binding_ = Binding{instance, run};
  refusal_logged_ = false;
  if (waiter_ && waiter_->instance == instance) waiter_.reset();
  log_("trainer instance " + instance.ToString() + " passed the gate into run " + std::to_string(run));
  WakeLocked();
}

std::optional<TrainerAttempts::Desired> TrainerAttempts::DesiredLocked() const {
  const bool bound_alive = binding_ && AliveLocked(binding_->instance);
  const bool waiting = waiter_ && (waiting_requests_ > 0 || AliveLocked(waiter_->instance));
  auto desired = [](TrainerState state, int run, const TrainerInstance& instance, const char* detail) {
    const api::TrainerReport report{state, run};
    return Desired{report, instance, report.Message("instance " + instance.ToString() + " " + detail)};
  };
  if (bound_alive) return desired(TrainerState::kRunning, binding_->run, binding_->instance, "passed the gate");
  if (waiting) {
    return desired(TrainerState::kAtGate, waiter_->floor, waiter_->instance,
                   "waits at the gate for this run or a later one");
  }
  if (binding_) return desired(TrainerState::kExited, binding_->run, binding_->instance, "has ended");
  return std::nullopt;
}

std::string TrainerAttempts::WhyWaitingLocked(int floor) const {
  const std::string wanted = "run " + std::to_string(floor) + " or later";
  if (!annotations_.run) return "waiting for " + wanted + ": the endpoints ConfigMap holds no run";
  const std::string run = std::to_string(*annotations_.run);
  if (!annotations_.OpenRun()) return "waiting for " + wanted + ": the operator holds run " + run + " at its barrier";
  return "waiting for " + wanted + ": the endpoints ConfigMap holds run " + run;
}

// ---- HTTP ----

httpd::Response TrainerAttempts::Gate(const std::string& query) {
  const auto expected_text = QueryValue(query, "run");
  const auto expected = expected_text ? WholeNumber<int>(*expected_text) : std::nullopt;
  if (!expected) {
    return httpd::Response::Text(400, "run: expected the run the trainer was started for, a whole number >= 0\n");
  }
  const auto instance_text = QueryValue(query, "instance");
  if (!instance_text) {
    return httpd::Response::Text(400, "instance: missing (<pid>:<starttime> of the container's first process)\n");
  }
  const auto instance = TrainerInstance::Parse(*instance_text);
  if (!instance) return httpd::Response::Text(400, instance.error() + "\n");

  std::unique_lock<std::mutex> lock(mu_);
  std::optional<int> passed;
  auto pass = [&] {
    if (stopping_) return true;
    if (binding_ && binding_->instance == *instance) {
      passed = binding_->run;   // a second program of the bound instance, or one that passed meanwhile
      return true;
    }
    const std::optional<int> open = annotations_.OpenRun();
    if (!open || *open < FloorLocked(*expected)) return false;
    BindLocked(*instance, *open);
    passed = *open;
    return true;
  };
  if (pass() && passed) return JsonAnswer(200, {{"run", *passed}});
  if (stopping_) return httpd::Response::Text(503, "the sidecar is stopping\n");
  if (waiting_requests_ >= config_.max_waiters) {
    return httpd::Response::Text(429, std::to_string(waiting_requests_) + " requests wait at the gate already\n");
  }
  ++waiting_requests_;
  if (!waiter_ || !(waiter_->instance == *instance)) {
    log_("trainer instance " + instance->ToString() + " waits at the gate for run " +
         std::to_string(FloorLocked(*expected)) + " or later (it was started for run " + std::to_string(*expected) + ")");
  }
  waiter_ = Waiter{*instance, FloorLocked(*expected)};
  WakeLocked();
  cv_.wait_until(lock, Clock::now() + config_.gate_poll, pass);
  --waiting_requests_;
  if (passed) return JsonAnswer(200, {{"run", *passed}});
  if (stopping_) return httpd::Response::Text(503, "the sidecar is stopping\n");
  const int floor = FloorLocked(*expected);
  if (waiter_ && waiter_->instance == *instance) waiter_->floor = floor;
  return JsonAnswer(202, {{"waiting", WhyWaitingLocked(floor)}, {"run", floor}});
}

httpd::Response TrainerAttempts::Live() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!binding_ || !annotations_.run || binding_->run >= *annotations_.run || !AliveLocked(binding_->instance)) {
    return httpd::Response::Text(200, "ok\n");
  }
  const std::string why = "trainer instance " + binding_->instance.ToString() + " runs in run " +
                          std::to_string(binding_->run) + ", older than the endpoints ConfigMap's run " +
                          std::to_string(*annotations_.run) + ": it is to be restarted";
  if (!refusal_logged_) {
    refusal_logged_ = true;
    log_("/trainer-live answers 503: " + why);
  }
  return httpd::Response::Text(503, why + "\n");
}

httpd::Route TrainerAttempts::GateRoute() {
  return {api::kGatePath, {"GET"}, [this](const httpd::Request& request) { return Gate(request.query); }};
}

httpd::Route TrainerAttempts::LiveRoute() {
  return {api::kTrainerLivePath, {}, [this](const httpd::Request&) { return Live(); }};
}

std::optional<api::SidecarReport::Trainer> TrainerAttempts::Report() const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::optional<Desired> d = DesiredLocked();
  if (!d) return std::nullopt;
  return api::SidecarReport::Trainer{d->report, d->instance.ToString(), d->message, write_error_};
}

int TrainerAttempts::waiting_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return waiting_requests_;
}

// ---- the thread: checks and condition writes ----

void TrainerAttempts::Loop() {
  milliseconds backoff = config_.retry_base;
  Clock::time_point retry_at;        // after a failed write: not before this
  std::string logged_error;
  std::unique_lock<std::mutex> lock(mu_);
  while (!stopping_) {
    wake_ = false;
    const std::optional<Desired> desired = DesiredLocked();
    const bool due = desired && client_ && !(written_ && *written_ == *desired);
    if (due && Clock::now() >= retry_at) {
      lock.unlock();
      const PodCondition condition{desired->report.state == TrainerState::kRunning, desired->report.Reason(),
                                   desired->message};
      const std::string error = WritePodCondition(*client_, config_.ns, config_.pod, api::kTrainerConditionType,
                                                  condition, config_.conflict_retries);
      lock.lock();
      if (error.empty()) {
        written_ = desired;
        write_error_.clear();
        logged_error.clear();
        backoff = config_.retry_base;
        log_("pod condition Trainer: " + Describe(desired->report) + " (" + desired->message + ")");
      } else {
        write_error_ = error;
        if (error != logged_error) log_(error + "; retrying with backoff");
        logged_error = error;
        retry_at = Clock::now() + backoff;
        backoff = std::min(backoff * 2, config_.retry_max);
      }
      continue;   // the state may have changed during the write
    }
    auto until = Clock::now() + config_.check_interval;
    if (due) until = std::min(until, retry_at);
    cv_.wait_until(lock, until, [this] { return stopping_ || wake_; });
  }
  running_ = false;
  cv_.notify_all();
}

}  // namespace fleet::sidecar
