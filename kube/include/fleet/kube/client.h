// Client: the Kubernetes REST API. Client::Create makes one over cpprestsdk (fleet::kube);
// CreateLiteClient (lite_client.h) the same one over Boost.Beast (fleet::kube_lite). The HTTP
// libraries stay out of this header (they compile slowly).
// Objects are nlohmann::json. Every call is synchronous and thread-safe; connections are reused.
//
// Retries: only transient failures (429 honouring Retry-After, 5xx, connection errors, timeouts)
// are retried, with jittered exponential backoff (a Retry-After over 30 s returns the status to the
// caller instead of sleeping), and only for requests that are safe to repeat:
// reads always; create (a repeat answers AlreadyExists, which the caller treats as success where it
// uses deterministic names; a create by generateName alone is repeated only after a 429, which the
// server sends before doing anything); update/patch/delete (a stale repeat answers
// Conflict/NotFound). Other 4xx answers return at once. A 401 re-reads the token file (when the
// config has one) and repeats the request once if the token changed.
// Namespaces: "" means all namespaces for List/Watch; for the single-object calls it means the
// object's metadata.namespace, else the config's default namespace.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "fleet/kube/config.h"
#include "fleet/kube/status.h"

namespace fleet::kube {

using Json = nlohmann::json;

// A resource type: {"", "v1", "pods"}, {"coordination.k8s.io", "v1", "leases"},
// {"fleet.paddlepaddle.org", "v1alpha1", "fleetjobs"}.
struct Resource {
  std::string group;
  std::string version;
  std::string plural;
  bool namespaced = true;

  static Resource Pods() { return {"", "v1", "pods", true}; }
  static Resource ConfigMaps() { return {"", "v1", "configmaps", true}; }
  static Resource Services() { return {"", "v1", "services", true}; }
  static Resource Events() { return {"", "v1", "events", true}; }
  static Resource Leases() { return {"coordination.k8s.io", "v1", "leases", true}; }
  // "/api/v1" or "/apis/<group>/<version>"
  std::string ApiPrefix() const;
};

struct ClientOptions {
  double qps = 0;                    // client-side rate limit; 0 = off
  int burst = 0;                     // bucket size (defaults to max(1, qps) when qps > 0)
  std::chrono::milliseconds request_timeout{30000};
  size_t max_response_bytes = 64u << 20;   // larger answers are kMalformed, never buffered whole
  int max_attempts = 5;              // for retryable failures, including the first attempt
  std::chrono::milliseconds backoff_base{100};
  std::chrono::milliseconds backoff_cap{5000};
  std::string user_agent = "fleetjob";
};

struct ListOptions {
  std::string label_selector;
  std::string field_selector;
  int64_t limit = 0;                 // page size; List() follows continue tokens itself
  std::string resource_version;      // "" = most recent (quorum read)
};

struct DeleteOptions {
  std::string propagation_policy;    // "", "Background", "Foreground", "Orphan"
  std::optional<int64_t> grace_period_seconds;
  std::string precondition_uid;
};

enum class WatchEventType { kAdded, kModified, kDeleted, kBookmark, kError };

struct WatchEvent {
  WatchEventType type = WatchEventType::kAdded;
  Json object;                       // for kError: the API Status object
};

struct WatchOptions {
  std::string resource_version;      // resume point; "" = from now (with synthetic ADDED events)
  std::string label_selector;
  std::string field_selector;
  bool allow_bookmarks = true;
  int timeout_seconds = 300;         // the server ends the watch after this long
};

// A cancellation flag shared between a caller and a blocking call (Watch, retries' sleeps).
class CancelToken {
 public:
  void Cancel() {
    std::lock_guard<std::mutex> lock(mu_);
    cancelled_ = true;
    cv_.notify_all();
  }
  bool cancelled() const { return cancelled_; }
  // Sleeps for `duration` or until Cancel(), whichever comes first; true when cancelled.
  bool SleepFor(std::chrono::milliseconds duration) const {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, duration, [this] { return cancelled_.load(); });
  }

 private:
  std::atomic<bool> cancelled_{false};
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
};

// cpprestsdk runs all I/O and continuations of the process on one shared thread pool, of 40
// threads unless sized before its first use. Its handlers are short and never block, and every
// request hops between them several times, so more threads mostly add wake-ups: on 2 cores, 40
// threads cost ~2x the client CPU per request of 1 thread. Client::Create sizes the pool to half
// the cores (1 to 8) when nothing has used it yet. Call this before to choose another size; false
// when the pool was already running. (fleet::kube only: the lite client has no I/O threads.)
bool ConfigureIoThreads(size_t threads);

class Client {
 public:
  static StatusOr<std::shared_ptr<Client>> Create(const ClusterConfig& config,
                                                  const ClientOptions& options = {});
  virtual ~Client() = default;

  virtual StatusOr<Json> Get(const Resource& r, const std::string& ns, const std::string& name) = 0;
  // All pages; the returned list's metadata.resourceVersion is the one to watch from.
  virtual StatusOr<Json> List(const Resource& r, const std::string& ns, const ListOptions& options = {}) = 0;
  virtual StatusOr<Json> Create(const Resource& r, const std::string& ns, const Json& object) = 0;
  // Create for callers that only need to know whether the object was made: the server's answer
  // (the object as created) is not decoded. Errors as Create. The operator's pod creates use it:
  // decoding each created pod was ~9% of its CPU in a 10,000-pod bring-up. The default calls
  // Create; a decorator should forward it.
  virtual ApiStatus CreateDiscardingReply(const Resource& r, const std::string& ns, const Json& object);
  virtual StatusOr<Json> Update(const Resource& r, const std::string& ns, const Json& object) = 0;
  virtual StatusOr<Json> UpdateStatus(const Resource& r, const std::string& ns, const Json& object) = 0;
  // RFC 7386 JSON merge patch; subresource "" or "status".
  virtual StatusOr<Json> MergePatch(const Resource& r, const std::string& ns, const std::string& name,
                                    const Json& patch, const std::string& subresource = "") = 0;
  virtual ApiStatus Delete(const Resource& r, const std::string& ns, const std::string& name,
                           const DeleteOptions& options = {}) = 0;
  // Streams events to `on_event` until the server ends the watch (OK), the handler returns false
  // (OK), `cancel` fires (kCancelled, within ~20 ms, also while connecting) or the connection fails
  // (kUnavailable). ERROR events are not delivered: they end the watch with their status (code 410
  // is kGone). A stream that is not JSON lines, or a line over max_response_bytes, is kMalformed.
  // Not retried (the caller re-lists or re-watches); a 401 re-reads the token file as above.
  virtual ApiStatus Watch(const Resource& r, const std::string& ns, const WatchOptions& options,
                          const std::function<bool(const WatchEvent&)>& on_event,
                          const CancelToken& cancel) = 0;
  // GET of a path outside the resource API that answers JSON: "/version", "/apis". The default
  // (for decorators and fakes) answers kBadRequest.
  virtual StatusOr<Json> GetPath(const std::string& path);
  virtual StatusOr<std::string> GetLog(const std::string& ns, const std::string& pod,
                                       const std::string& container = "", int64_t tail_lines = -1) = 0;
  // Follows a container's log (follow=true): its last `tail_lines` lines (-1: all) and then what it
  // writes, handed to `on_text` as it arrives, until the container ends (the server ends the
  // stream: OK), on_text returns false (OK), `cancel` fires (kCancelled) or the connection fails
  // (kUnavailable). since_seconds > 0 starts at lines written that recently. The default (for
  // decorators and fakes) hands over one GetLog.
  virtual ApiStatus FollowLog(const std::string& ns, const std::string& pod, const std::string& container,
                              int64_t tail_lines, int64_t since_seconds,
                              const std::function<bool(std::string_view text)>& on_text, const CancelToken& cancel);

  // Lower-level List and Watch for callers that decode the JSON themselves (the Informer parses it
  // straight into its cache's packed form, without building a JSON DOM). The defaults here are
  // built on List and Watch, so every Client has them; they re-serialize what those parsed, which
  // costs more than List/Watch alone: a decorator should forward these two to the client it wraps.
  //
  // ListPages: the list one page at a time, each as the server sent it (the JSON text of a List
  // object, with its metadata.resourceVersion and items), following continue tokens as List does
  // (options.limit is the page size; 0 = one page); `on_page` returns false to stop (OK). Errors
  // as List: an expired continue token is kGone; a page that is not a JSON object or whose items
  // are not an array, or a repeated continue token, is kMalformed. The view is valid during the
  // call only. The default hands over List()'s whole answer as one page.
  virtual ApiStatus ListPages(const Resource& r, const std::string& ns, const ListOptions& options,
                              const std::function<bool(std::string_view page)>& on_page);
  // WatchLines: Watch, but each event comes as its line of the stream ({"type":..., "object":...}),
  // undecoded; blank lines are skipped. The lines are not checked: ERROR events come as lines too
  // (the caller decides what they mean; the watch goes on while it returns true), and so does
  // text that is not JSON. A line over max_response_bytes is kMalformed. The view is valid during
  // the call only. The default re-serializes Watch()'s events, and so ends with an ERROR event's
  // status (410: kGone) as Watch does: callers handle both.
  virtual ApiStatus WatchLines(const Resource& r, const std::string& ns, const WatchOptions& options,
                               const std::function<bool(std::string_view line)>& on_line,
                               const CancelToken& cancel);
};

}  // namespace fleet::kube
