#include "fleet/kube/events.h"

#include <cstdio>

#include "fleet/base/json_read.h"
#include "fleet/base/time.h"

namespace fleet::kube {
namespace {

// Past this many remembered events, ones outside the window are forgotten (client-go keeps an LRU
// of 4096).
constexpr size_t kMaxSeen = 4096;

const std::string& MetaField(const Json& object, const char* field) {
  return StringMember(ObjectMember(object, "metadata"), field);
}

}  // namespace

EventRecorder::EventRecorder(std::shared_ptr<Client> client, EventRecorderOptions options)
    : client_(std::move(client)), options_(std::move(options)), thread_([this] { Run(); }) {}

EventRecorder::~EventRecorder() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void EventRecorder::Record(const Json& involved, const std::string& type, const std::string& reason,
                           const std::string& message) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stop_ || queue_.size() >= options_.max_queue) {
      ++dropped_;
      return;
    }
    queue_.push_back(Pending{involved, type, reason, message, std::chrono::system_clock::now()});
  }
  cv_.notify_one();
}

void EventRecorder::Flush() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [this] { return queue_.empty() && !writing_; });
}

int64_t EventRecorder::dropped() const {
  std::lock_guard<std::mutex> lock(mu_);
  return dropped_;
}

void EventRecorder::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;   // stopping, and everything queued has been written
    Pending pending = std::move(queue_.front());
    queue_.pop_front();
    writing_ = true;
    lock.unlock();
    Write(pending);
    lock.lock();
    writing_ = false;
    if (queue_.empty()) idle_cv_.notify_all();
  }
}

std::string EventRecorder::UniqueName(const std::string& object_name) {
  // client-go: "<name>.<unix nanos in hex>"; strictly increasing so two events never collide.
  auto nanos = static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                         std::chrono::system_clock::now().time_since_epoch())
                                         .count());
  if (nanos <= last_suffix_) nanos = last_suffix_ + 1;
  last_suffix_ = nanos;
  char suffix[24];
  std::snprintf(suffix, sizeof suffix, "%llx", static_cast<unsigned long long>(nanos));
  return (object_name.empty() ? std::string("event") : object_name) + "." + suffix;
}

void EventRecorder::Write(const Pending& pending) {
  const std::string ns = MetaField(pending.involved, "namespace").empty()
                             ? std::string("default")
                             : MetaField(pending.involved, "namespace");
  std::string object_id = MetaField(pending.involved, "uid");
  if (object_id.empty()) {
    object_id = StringMember(pending.involved, "kind") + "/" + ns + "/" + MetaField(pending.involved, "name");
  }
  const std::string key = object_id + "\x1f" + pending.type + "\x1f" + pending.reason + "\x1f" + pending.message;

  auto seen = seen_.find(key);
  if (seen != seen_.end() && pending.at - seen->second.last <= options_.aggregation_window) {
    Seen& s = seen->second;
    const Json patch = {{"count", s.count + 1}, {"lastTimestamp", FormatRfc3339(pending.at)}};
    StatusOr<Json> patched = client_->MergePatch(Resource::Events(), ns, s.event_name, patch);
    if (patched.ok()) {
      s.count += 1;
      s.last = pending.at;
      return;
    }
    if (patched.status().code() != Code::kNotFound) return;   // the client already retried
    seen_.erase(seen);   // the Event expired or was deleted: start a new one
  }

  Json involved_object = {
      {"kind", StringMember(pending.involved, "kind")},
      {"apiVersion", StringMember(pending.involved, "apiVersion")},
      {"name", MetaField(pending.involved, "name")},
      {"namespace", MetaField(pending.involved, "namespace")},
      {"uid", MetaField(pending.involved, "uid")},
  };
  const std::string rv = MetaField(pending.involved, "resourceVersion");
  if (!rv.empty()) involved_object["resourceVersion"] = rv;
  Json event = {
      {"apiVersion", "v1"},
      {"kind", "Event"},
      {"metadata", {{"name", ""}, {"namespace", ns}}},
      {"involvedObject", std::move(involved_object)},
      {"reason", pending.reason},
      {"message", pending.message},
      {"type", pending.type},
      {"source", {{"component", options_.component}}},
      {"reportingComponent", options_.component},
      {"firstTimestamp", FormatRfc3339(pending.at)},
      {"lastTimestamp", FormatRfc3339(pending.at)},
      {"count", 1},
  };
  for (int attempt = 0; attempt < 2; ++attempt) {
    const std::string name = UniqueName(MetaField(pending.involved, "name"));
    event["metadata"]["name"] = name;
    StatusOr<Json> created = client_->Create(Resource::Events(), ns, event);
    if (created.ok()) {
      if (seen_.size() >= kMaxSeen) Prune(pending.at);
      seen_[key] = Seen{name, 1, pending.at, pending.at};
      return;
    }
    if (created.status().code() != Code::kAlreadyExists) return;
  }
}

void EventRecorder::Prune(std::chrono::system_clock::time_point now) {
  for (auto it = seen_.begin(); it != seen_.end();) {
    it = now - it->second.last > options_.aggregation_window ? seen_.erase(it) : std::next(it);
  }
  while (seen_.size() >= kMaxSeen) {
    auto oldest = seen_.begin();
    for (auto it = seen_.begin(); it != seen_.end(); ++it) {
      if (it->second.last < oldest->second.last) oldest = it;
    }
    seen_.erase(oldest);
  }
}

}  // namespace fleet::kube
