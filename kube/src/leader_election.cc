#include "fleet/kube/leader_election.h"

#include <algorithm>
#include <random>
#include <stdexcept>

#include "fleet/base/json_read.h"
#include "fleet/base/time.h"

namespace fleet::kube {
namespace {

int64_t IntField(const Json& object, const char* field) { return MemberAs(object, field, AsInt64).value_or(0); }

}  // namespace

LeaderElector::LeaderElector(std::shared_ptr<Client> client, LeaderElectionConfig config)
    : client_(std::move(client)), config_(std::move(config)) {
  // client-go's rules; the first is what keeps two leaders apart.
  if (config_.renew_deadline >= config_.lease_duration) {
    throw std::invalid_argument("leader election: renew_deadline must be shorter than lease_duration");
  }
  if (config_.retry_period * 1.2 >= config_.renew_deadline || config_.retry_period.count() <= 0) {
    throw std::invalid_argument("leader election: retry_period * 1.2 must be positive and shorter than renew_deadline");
  }
  if (config_.identity.empty() || config_.lease_name.empty() || config_.lease_namespace.empty()) {
    throw std::invalid_argument("leader election: identity, lease_name and lease_namespace are required");
  }
}

LeaderElector::~LeaderElector() { Stop(); }

void LeaderElector::Start() {
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (thread_.joinable() || stop_) return;
  thread_ = std::thread([this] { Run(); });
}

void LeaderElector::Stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool LeaderElector::IsLeader() const {
  return leader_ && Clock::now().time_since_epoch().count() < leader_until_.load();
}

std::string LeaderElector::CurrentLeader() const {
  std::lock_guard<std::mutex> lock(mu_);
  return observed_leader_;
}

void LeaderElector::SetLeaderUntil(Clock::time_point until) {
  leader_until_ = until.time_since_epoch().count();
}

bool LeaderElector::SleepUnlessStopped(Clock::duration delay) {
  std::unique_lock<std::mutex> lock(stop_mu_);
  return !stop_cv_.wait_for(lock, delay, [this] { return stop_; });
}

void LeaderElector::Run() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_real_distribution<double> jitter(1.0, 1.2);
  for (;;) {
    const Clock::time_point attempt = Clock::now();
    if (TryAcquireOrRenew()) {
      SetLeaderUntil(attempt + config_.renew_deadline);
      leader_ = true;
      if (config_.on_started_leading) config_.on_started_leading();
      const bool stopped = RenewUntilLostOrStopped();
      leader_ = false;
      if (stopped && config_.release_on_cancel) Release();
      if (config_.on_stopped_leading) config_.on_stopped_leading();
      if (stopped) return;
      continue;
    }
    const auto wait = std::chrono::duration_cast<Clock::duration>(config_.retry_period * jitter(rng));
    if (!SleepUnlessStopped(wait)) return;
  }
}

bool LeaderElector::RenewUntilLostOrStopped() {
  for (;;) {
    const Clock::time_point until{Clock::duration(leader_until_.load())};
    const Clock::time_point now = Clock::now();
    if (now >= until) return false;
    // Renew every retry_period; while renewals fail, wake no later than the deadline.
    const Clock::duration wait = std::min<Clock::duration>(config_.retry_period, until - now);
    if (!SleepUnlessStopped(wait)) return true;
    const Clock::time_point attempt = Clock::now();
    if (attempt >= until) return false;
    if (TryAcquireOrRenew()) SetLeaderUntil(std::max(until, attempt + config_.renew_deadline));
  }
}

void LeaderElector::Observe(const Json& spec) {
  std::string record = spec.dump();
  std::string holder = StringMember(spec, "holderIdentity");
  bool new_leader = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (record == observed_record_) return;
    observed_record_ = std::move(record);
    observed_at_ = Clock::now();
    new_leader = holder != observed_leader_;
    observed_leader_ = holder;
  }
  if (new_leader && !holder.empty() && config_.on_new_leader) config_.on_new_leader(holder);
}

bool LeaderElector::TryAcquireOrRenew() {
  const auto now = std::chrono::system_clock::now();
  const int64_t lease_seconds = std::max<int64_t>(1, (config_.lease_duration.count() + 999) / 1000);
  StatusOr<Json> got = client_->Get(Resource::Leases(), config_.lease_namespace, config_.lease_name);
  if (!got.ok()) {
    if (got.status().code() != Code::kNotFound) return false;
    Json lease = {
        {"apiVersion", "coordination.k8s.io/v1"},
        {"kind", "Lease"},
        {"metadata", {{"name", config_.lease_name}, {"namespace", config_.lease_namespace}}},
        {"spec",
         {{"holderIdentity", config_.identity},
          {"leaseDurationSeconds", lease_seconds},
          {"acquireTime", FormatRfc3339(now, TimePrecision::kMicros)},
          {"renewTime", FormatRfc3339(now, TimePrecision::kMicros)},
          {"leaseTransitions", 0}}},
    };
    StatusOr<Json> created = client_->Create(Resource::Leases(), config_.lease_namespace, lease);
    if (!created.ok()) return false;   // AlreadyExists: a rival created it first
    Observe(created->value("spec", Json::object()));
    return true;
  }

  Json lease = std::move(got).value();
  if (!lease.contains("spec") || !lease["spec"].is_object()) lease["spec"] = Json::object();
  const Json& spec = lease["spec"];
  Observe(spec);
  const std::string holder = StringMember(spec, "holderIdentity");
  const bool mine = holder == config_.identity;
  if (!holder.empty() && !mine) {
    // The holder's own lease duration counts when it is longer than ours.
    const auto lease_for = std::max<Clock::duration>(
        config_.lease_duration, std::chrono::seconds(IntField(spec, "leaseDurationSeconds")));
    std::lock_guard<std::mutex> lock(mu_);
    if (Clock::now() < observed_at_ + lease_for) return false;   // not expired by our clock
  }

  Json next = spec;
  next["holderIdentity"] = config_.identity;
  next["leaseDurationSeconds"] = lease_seconds;
  next["renewTime"] = FormatRfc3339(now, TimePrecision::kMicros);
  if (!mine) {
    next["acquireTime"] = FormatRfc3339(now, TimePrecision::kMicros);
    next["leaseTransitions"] = IntField(spec, "leaseTransitions") + 1;
  }
  lease["spec"] = std::move(next);
  // lease.metadata.resourceVersion is what we read: a rival's write in between makes this Conflict.
  StatusOr<Json> updated = client_->Update(Resource::Leases(), config_.lease_namespace, lease);
  if (!updated.ok()) return false;
  Observe(updated->value("spec", Json::object()));
  return true;
}

void LeaderElector::Release() {
  StatusOr<Json> got = client_->Get(Resource::Leases(), config_.lease_namespace, config_.lease_name);
  if (!got.ok()) return;
  Json lease = std::move(got).value();
  if (!lease.contains("spec") || !lease["spec"].is_object()) return;
  Json& spec = lease["spec"];
  if (StringMember(spec, "holderIdentity") != config_.identity) return;
  const std::string now = FormatRfc3339(std::chrono::system_clock::now(), TimePrecision::kMicros);
  spec["holderIdentity"] = "";
  spec["leaseDurationSeconds"] = 1;
  spec["acquireTime"] = now;
  spec["renewTime"] = now;
  StatusOr<Json> updated = client_->Update(Resource::Leases(), config_.lease_namespace, lease);
  if (updated.ok()) Observe(updated->value("spec", Json::object()));
}

}  // namespace fleet::kube
