// Informer: keeps a local cache of one resource type in sync with the API server, the way
// client-go's reflector + indexer do:
//   list (resourceVersion from the list) -> watch from there with bookmarks -> on a watch that
//   ends or times out, watch again from the last resourceVersion seen (events are neither missed
//   nor repeated) -> on 410 Gone, list again and deliver the difference as add/update/delete ->
//   on connection errors, retry with jittered backoff.
// Handlers run on the informer's thread, in event order, after the cache is updated; they must
// not block for long (enqueue a key). Resync re-delivers every cached object as an update.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "fleet/kube/client.h"

namespace fleet::kube {

struct EventHandlers {
  std::function<void(const Json& object)> on_add;
  std::function<void(const Json& old_object, const Json& new_object)> on_update;
  std::function<void(const Json& last_known)> on_delete;
};

// Thread-safe object cache keyed by "namespace/name" (or "name" for cluster-scoped objects),
// indexed by namespace, owner uid (controller or any owner reference) and label.
class ObjectCache {
 public:
  static std::string KeyOf(const Json& object);
  // Returns the previous object when replaced.
  std::shared_ptr<const Json> Upsert(const Json& object);
  std::shared_ptr<const Json> Remove(const std::string& key);
  std::shared_ptr<const Json> Get(const std::string& key) const;
  std::vector<std::shared_ptr<const Json>> List() const;
  std::vector<std::shared_ptr<const Json>> ByNamespace(const std::string& ns) const;
  std::vector<std::shared_ptr<const Json>> ByOwnerUid(const std::string& uid) const;
  std::vector<std::shared_ptr<const Json>> ByLabel(const std::string& key, const std::string& value) const;
  std::vector<std::string> Keys() const;
  size_t Size() const;

 private:
  void IndexLocked(const std::string& key, const Json& object, bool add);
  mutable std::shared_mutex mu_;
  std::unordered_map<std::string, std::shared_ptr<const Json>> objects_;
  std::map<std::string, std::set<std::string>> by_namespace_;
  std::map<std::string, std::set<std::string>> by_owner_;
  std::map<std::string, std::set<std::string>> by_label_;   // "key=value" -> keys
};

struct InformerOptions {
  std::string ns;                                  // "" = all namespaces
  std::string label_selector;
  std::string field_selector;
  int64_t list_page_size = 500;
  std::chrono::seconds resync_period{0};           // 0 = no resync
  int watch_timeout_seconds = 300;
  std::chrono::milliseconds backoff_base{200};
  std::chrono::milliseconds backoff_cap{30000};
};

class Informer {
 public:
  Informer(std::shared_ptr<Client> client, Resource resource, InformerOptions options = {});
  ~Informer();
  void AddHandlers(EventHandlers handlers);        // before Start()
  void Start();                                    // runs on its own thread
  void Stop();                                     // cancels the watch and joins
  bool HasSynced() const;                          // the first list has been applied
  bool WaitForSync(std::chrono::milliseconds timeout) const;
  const ObjectCache& cache() const { return cache_; }
  std::string LastResourceVersion() const;
  // Counters for tests and metrics.
  int64_t lists() const { return lists_; }
  int64_t watches() const { return watches_; }

 private:
  void Run();
  ApiStatus ListAndReplace();
  ApiStatus WatchFromLast();
  void Apply(const WatchEvent& event);

  std::shared_ptr<Client> client_;
  Resource resource_;
  InformerOptions options_;
  ObjectCache cache_;
  std::vector<EventHandlers> handlers_;
  CancelToken cancel_;
  std::thread thread_;
  std::atomic<bool> synced_{false};
  std::atomic<int64_t> lists_{0};
  std::atomic<int64_t> watches_{0};
  mutable std::mutex rv_mu_;
  std::string last_rv_;
};

}  // namespace fleet::kube
