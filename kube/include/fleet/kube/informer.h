// Informer: keeps a local cache of one resource type in sync with the API server, the way
// client-go's reflector + indexer do:
//   list (paged; resourceVersion from the list) -> watch from there with bookmarks -> on a watch
//   that ends or times out, watch again from the last resourceVersion seen (events are neither
//   missed nor repeated) -> on 410 Gone, list again and deliver the difference as add/update/delete
//   (updates only for objects whose resourceVersion changed, deletes for objects that vanished) ->
//   on connection errors (or a watch that ends at once, empty), re-watch from the last
//   resourceVersion after a jittered exponential backoff.
// Handlers run in event order, after the cache is updated, never two at once: watch events on the
// informer's thread, resync on its resync thread (serialized with the watch). They must not block
// for long (enqueue a key). Resync re-delivers every cached object as an update (old == new).
// Exceptions thrown by handlers are contained (and counted in handler_errors()).
// Memory: the cache holds objects packed (see ObjectCache). Client::List returns the whole list
// parsed (~20 KB per running pod) before it is packed, so the process peaks at roughly that during
// a (re)list; the pages are handed back to the OS (malloc_trim on glibc) right after, and every
// few thousand watch events (parse garbage leaves holes around the long-lived packed objects).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
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

// new_object / object are the event's (or the list item's) object; old_object is the cached
// version it replaces; last_known is the DELETED event's object, or after a relist the last cached
// version of an object that vanished while the watch was down.
struct EventHandlers {
  std::function<void(const Json& object)> on_add;
  std::function<void(const Json& old_object, const Json& new_object)> on_update;
  std::function<void(const Json& last_known)> on_delete;
};

// Thread-safe object cache keyed by "namespace/name" (or "name" for cluster-scoped objects),
// indexed by namespace, owner uid (controller or any owner reference) and label.
//
// Objects are stored packed (MessagePack: a running pod's ~20 KB as parsed JSON becomes ~3 KB),
// so 10,000 pods fit in ~40 MB. Reads materialize a fresh object each time (~20 us for a pod):
// take what you need from one read instead of reading the same object in a loop. The returned
// objects are the caller's; they never change under it.
class ObjectCache {
 public:
  static std::string KeyOf(const Json& object);
  // Stores `object`. Returns the object it replaced, nullptr when it was added.
  std::shared_ptr<const Json> Upsert(const Json& object);
  // Stores `object` without materializing the one it replaces unless `previous` is given.
  // Returns true when an object was replaced.
  bool Put(const Json& object, std::shared_ptr<const Json>* previous = nullptr);
  // Removes the object; returns it (nullptr when absent).
  std::shared_ptr<const Json> Remove(const std::string& key);
  bool Erase(const std::string& key);              // Remove() without materializing; false if absent
  std::shared_ptr<const Json> Get(const std::string& key) const;
  // The stored object's metadata.resourceVersion, "" when absent; no materialization.
  std::string ResourceVersion(const std::string& key) const;
  std::vector<std::shared_ptr<const Json>> List() const;
  std::vector<std::shared_ptr<const Json>> ByNamespace(const std::string& ns) const;
  std::vector<std::shared_ptr<const Json>> ByOwnerUid(const std::string& uid) const;
  std::vector<std::shared_ptr<const Json>> ByLabel(const std::string& key, const std::string& value) const;
  std::vector<std::string> Keys() const;
  size_t Size() const;
  size_t PackedBytes() const;                      // bytes of packed objects held

 private:
  // What an object is indexed under: its namespace, owner uids, "key=value" labels.
  struct IndexTerms {
    std::string ns;
    std::vector<std::string> owners;
    std::vector<std::string> labels;
    bool operator==(const IndexTerms& o) const { return ns == o.ns && owners == o.owners && labels == o.labels; }
  };
  struct Entry {
    std::shared_ptr<const std::string> packed;     // shared so readers copy it out cheaply
    std::string resource_version;
    IndexTerms terms;
  };
  using Packed = std::shared_ptr<const std::string>;
  static IndexTerms TermsOf(const Json& object);
  static std::shared_ptr<const Json> Materialize(const Packed& packed);
  static std::vector<std::shared_ptr<const Json>> MaterializeAll(const std::vector<Packed>& packed);
  void IndexLocked(const std::string& key, const IndexTerms& terms, bool add);
  std::vector<Packed> CollectLocked(const std::map<std::string, std::set<std::string>>& index,
                                    const std::string& term) const;

  mutable std::shared_mutex mu_;
  std::unordered_map<std::string, Entry> objects_;
  size_t packed_bytes_ = 0;
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
  // A watch that ends without any event sooner than this counts as a failure (backoff), so a
  // server that closes watches at once is not hammered.
  std::chrono::milliseconds min_watch_duration{1000};
};

class Informer {
 public:
  Informer(std::shared_ptr<Client> client, Resource resource, InformerOptions options = {});
  ~Informer();
  void AddHandlers(EventHandlers handlers);        // before Start()
  void Start();                                    // runs on its own thread (once)
  void Stop();                                     // cancels the watch and joins; final
  bool HasSynced() const;                          // the first list has been applied
  bool WaitForSync(std::chrono::milliseconds timeout) const;
  const ObjectCache& cache() const { return cache_; }
  std::string LastResourceVersion() const;
  // Counters for tests and metrics.
  int64_t lists() const { return lists_; }
  int64_t watches() const { return watches_; }
  int64_t handler_errors() const { return handler_errors_; }

  // Applies one watch event exactly as the watch loop does (cache, handlers, last resourceVersion).
  // A seam for replaying recorded streams in benchmarks and tests; on a started informer it is
  // serialized with the watch, but the order between the two is then the caller's problem.
  void Apply(const WatchEvent& event);

 private:
  void Run();
  void ResyncLoop();
  ApiStatus ListAndReplace();
  // Replaces the cache with a full list, delivering the difference; records the list's RV.
  void Replace(Json list);
  ApiStatus WatchFromLast(int64_t* events);   // counts the events it applied
  void ApplyLocked(const WatchEvent& event);
  void SetLastResourceVersion(const Json& object);
  // Sleeps unless Stop() comes first; false when stopping.
  bool SleepUnlessStopped(std::chrono::milliseconds delay);
  bool Stopping() const;
  void DispatchAdd(const Json& object);
  void DispatchUpdate(const Json& old_object, const Json& new_object);
  void DispatchDelete(const Json& last_known);

  std::shared_ptr<Client> client_;
  Resource resource_;
  InformerOptions options_;
  ObjectCache cache_;
  std::vector<EventHandlers> handlers_;
  bool needs_old_ = false;                         // some handler has on_update
  bool needs_deleted_ = false;                     // some handler has on_delete
  int64_t events_since_trim_ = 0;                  // under dispatch_mu_
  CancelToken cancel_;
  std::thread thread_;
  std::thread resync_thread_;
  std::mutex dispatch_mu_;                         // one cache change + its handlers at a time
  mutable std::mutex state_mu_;                    // guards started_, stopping_
  mutable std::condition_variable state_cv_;       // Stop() and HasSynced() transitions
  bool started_ = false;
  bool stopping_ = false;
  std::atomic<bool> synced_{false};
  std::atomic<int64_t> lists_{0};
  std::atomic<int64_t> watches_{0};
  std::atomic<int64_t> handler_errors_{0};
  mutable std::mutex rv_mu_;
  std::string last_rv_;
};

}  // namespace fleet::kube
