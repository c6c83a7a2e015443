#include "fleet/sidecar/condition.h"

#include <algorithm>

#include <prometheus/counter.h>
#include <prometheus/registry.h>

#include "fleet/base/time.h"

namespace fleet::sidecar {
namespace {

using Json = nlohmann::json;

std::string Describe(const PodCondition& c) {
  return std::string("TrainingProgress=") + (c.status ? "True" : "False") + " (" + c.reason + "): " + c.message;
}

}  // namespace

std::optional<Json> ConditionPatch(const Json& pod, const PodCondition& condition, const std::string& now) {
  return ConditionPatch(pod, kProgressConditionType, condition, now);
}

std::optional<Json> ConditionPatch(const Json& pod, const std::string& type, const PodCondition& condition,
                                   const std::string& now) {
  Json conditions = Json::array();
  if (pod.is_object() && pod.contains("status") && pod["status"].is_object()) {
    const Json& status = pod["status"];
    if (status.contains("conditions") && status["conditions"].is_array()) conditions = status["conditions"];
  }
  const std::string status = condition.status ? "True" : "False";
  Json ours = {{"type", type}, {"status", status},       {"reason", condition.reason},
               {"message", condition.message},   {"lastTransitionTime", now}, {"lastProbeTime", nullptr}};
  bool found = false;
  for (Json& c : conditions) {
    if (!c.is_object() || c.value("type", "") != type) continue;
    found = true;
    if (c.value("status", "") == status && c.value("reason", "") == condition.reason &&
        c.value("message", "") == condition.message) {
      return std::nullopt;
    }
    if (c.value("status", "") == status && c.contains("lastTransitionTime") && c["lastTransitionTime"].is_string()) {
      ours["lastTransitionTime"] = c["lastTransitionTime"];  // the status did not change
    }
    c = ours;
  }
  if (!found) conditions.push_back(ours);
  Json patch = {{"status", {{"conditions", conditions}}}};
  // The resourceVersion makes the patch conditional: replacing the list whole is only safe on the
  // list as read.
  if (pod.is_object() && pod.contains("metadata") && pod["metadata"].is_object()) {
    const Json& meta = pod["metadata"];
    if (meta.contains("resourceVersion") && meta["resourceVersion"].is_string()) {
      patch["metadata"] = {{"resourceVersion", meta["resourceVersion"]}};
    }
  }
  return patch;
}

ConditionWriter::ConditionWriter(std::shared_ptr<kube::Client> client, ConditionWriterConfig config, Logger log,
                                 std::shared_ptr<prometheus::Registry> registry)
    : client_(std::move(client)), config_(std::move(config)), log_(std::move(log)) {
  auto& family = prometheus::BuildCounter()
                     .Name("fleet_sidecar_condition_writes_total")
                     .Help("Writes of the pod's TrainingProgress condition, by result (ok, error).")
                     .Labels({{"job", config_.job}, {"namespace", config_.ns}, {"role", config_.role},
                              {"pod", config_.pod}})
                     .Register(*registry);
  writes_ok_ = &family.Add({{"result", "ok"}});
  writes_failed_ = &family.Add({{"result", "error"}});
}

ConditionWriter::~ConditionWriter() {
  if (thread_.joinable() && !Stop(std::chrono::seconds(5))) thread_.detach();
}

void ConditionWriter::Desire(const PodCondition& condition) {
  std::lock_guard<std::mutex> lock(mu_);
  if (desired_ && desired_->SameState(condition)) return;  // a new message alone is not written
  desired_ = condition;
  cv_.notify_all();
}

void ConditionWriter::Start() {
  std::lock_guard<std::mutex> lock(mu_);
  running_ = true;
  thread_ = std::thread([this] { Loop(); });
}

bool ConditionWriter::Stop(std::chrono::milliseconds timeout) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
    cv_.notify_all();
  }
  cancel_.Cancel();
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_for(lock, timeout, [this] { return !running_; })) return false;
  }
  if (thread_.joinable()) thread_.join();
  return true;
}

std::optional<PodCondition> ConditionWriter::written() const {
  std::lock_guard<std::mutex> lock(mu_);
  return written_;
}

std::string ConditionWriter::last_error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_error_;
}

std::string WritePodCondition(kube::Client& client, const std::string& ns, const std::string& name,
                              const std::string& type, const PodCondition& condition, int conflict_retries) {
  const kube::Resource pods = kube::Resource::Pods();
  for (int attempt = 0; attempt <= conflict_retries; ++attempt) {
    kube::StatusOr<Json> pod = client.Get(pods, ns, name);
    if (!pod.ok()) return "cannot read pod " + ns + "/" + name + ": " + pod.status().ToString();
    const auto patch = ConditionPatch(*pod, type, condition, FormatRfc3339(std::chrono::system_clock::now()));
    if (!patch) return "";
    kube::StatusOr<Json> patched = client.MergePatch(pods, ns, name, *patch, "status");
    if (patched.ok()) return "";
    if (patched.status().code() != kube::Code::kConflict) {
      return "cannot patch the status of pod " + ns + "/" + name + ": " + patched.status().ToString();
    }
  }
  return "the status of pod " + ns + "/" + name + " kept changing (conflicts)";
}

std::string ConditionWriter::Write(const PodCondition& condition) {
  return WritePodCondition(*client_, config_.ns, config_.pod, kProgressConditionType, condition,
                           config_.conflict_retries);
}

void ConditionWriter::Loop() {
  std::chrono::milliseconds backoff = config_.retry_base;
  Clock::time_point next_write = Clock::now();
  std::string logged_error;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stopping_ || (desired_ && (!written_ || !desired_->SameState(*written_))); });
    if (stopping_) break;
    // At most one write per min_interval (and after a failure, per backoff): the latest state wins.
    if (cv_.wait_until(lock, next_write, [this] { return stopping_; })) break;
    if (written_ && desired_->SameState(*written_)) continue;  // changed back meanwhile
    const PodCondition condition = *desired_;
    lock.unlock();
    const std::string error = Write(condition);
    lock.lock();
    if (stopping_) break;
    if (error.empty()) {
      writes_ok_->Increment();
      written_ = condition;
      last_error_.clear();
      logged_error.clear();
      backoff = config_.retry_base;
      next_write = Clock::now() + config_.min_interval;
      log_("pod condition " + Describe(condition));
      continue;
    }
    writes_failed_->Increment();
    last_error_ = error;
    if (error != logged_error) {
      logged_error = error;
      log_(error + "; retrying with backoff (fleet_sidecar_condition_writes_total{result=\"error\"})");
    }
    next_write = Clock::now() + backoff;
    backoff = std::min(backoff * 2, config_.retry_max);
  }
  running_ = false;
  cv_.notify_all();
}

}  // namespace fleet::sidecar
