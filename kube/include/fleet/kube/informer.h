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
// Decoding: the informer reads the server's JSON through Client::ListPages and Client::WatchLines
// and parses it straight into the cache's packed form (no JSON DOM: ~8 us for a running pod where
// nlohmann::json::parse takes ~45 us), reading the key, resourceVersion and index terms from the
// packed bytes. Handlers get parsed objects, materialized from the packed form only for the
// handlers that are there: an add's object only when some handler has on_add, an update's old and
// new object only when some handler has on_update, a delete's only when some handler has on_delete.
// Memory: the cache holds objects packed (see ObjectCache). A (re)list packs each page as it
// arrives and drops its text, so a list costs one page of text plus the packed objects (which
// become the cache, after the transform when there is one); the new objects replace the cached ones only when the whole list is in (a
// failed list changes nothing), so a relist briefly holds two packed copies. Freed heap is handed
// back to the OS (malloc_trim on glibc) after a list and every 8,192 watch events.
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
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "fleet/kube/client.h"

namespace fleet::kube {

namespace internal {
struct PackedMeta;
}  // namespace internal

// new_object / object are the event's (or the list item's) object; old_object is the cached
// version it replaces; last_known is the DELETED event's object, or after a relist the last cached
// version of an object that vanished while the watch was down.
struct EventHandlers {
  std::function<void(const Json& object)> on_add;
  std::function<void(const Json& old_object, const Json& new_object)> on_update;
  std::function<void(const Json& last_known)> on_delete;
  // An update handler that needs only the new version: when no handler has on_update, the
  // replaced version is never unpacked (a third of the cost of an event).
  std::function<void(const Json& new_object)> on_modify;
};

// Thread-safe object cache keyed by "namespace/name" (or "name" for cluster-scoped objects),
// indexed by namespace, owner uid (controller or any owner reference) and label.
//
// Objects are stored packed (MessagePack: a running pod's ~20 KB as parsed JSON becomes ~3 KB),
// so 10,000 pods fit in ~40 MB. Reads materialize a fresh object each time (~20 us for a pod):
// take what you need from one read instead of reading the same object in a loop. The returned
// objects are the caller's; they never change under it.
// An update is written over the stored bytes when they have room (each buffer gets 1/8 spare)
// and no reader is materializing them, so a stream of updates does not leave a trail of freed
// holes between long-lived objects (the heap fragmentation that no malloc_trim can return).
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
  friend class Informer;
  // What an object is indexed under: its namespace, owner uids, "key=value" labels.
  struct IndexTerms {
    std::string ns;
    std::vector<std::string> owners;
    std::vector<std::string> labels;
    bool operator==(const IndexTerms& o) const { return ns == o.ns && owners == o.owners && labels == o.labels; }
  };
  // An object's packed bytes. Readers pin them (under mu_) and read them after unlocking; a
  // writer writes over them in place only while no reader has them pinned.
  struct Buffer {
    std::string bytes;
    std::atomic<int> readers{0};
  };
  struct Entry {
    std::shared_ptr<Buffer> buffer;
    std::string resource_version;
    IndexTerms terms;
  };
  // A pinned view of an entry's bytes: keeps them alive and unwritten until released.
  using Packed = std::shared_ptr<const std::string>;
  static Packed PinLocked(const std::shared_ptr<Buffer>& buffer);   // under mu_, either mode
  // For the informer: stores an object already packed under `key`, indexed by `meta` (read from
  // it): copied, or *owned (which holds the same bytes) moved in when a new buffer is needed.
  // True when an object was replaced.
  bool PutPacked(std::string key, std::string_view packed, std::string* owned, internal::PackedMeta&& meta);
  Packed PackedOf(const std::string& key) const;   // nullptr when absent
  // Stores `packed` under `key`: in place when `replaced` is null and the stored buffer can take
  // it, else in a new buffer (*owned moved in when given; *replaced, when given, gets the old
  // one). True when an object was replaced.
  bool Store(std::string key, std::string_view packed, std::string* owned, const std::string& resource_version,
             IndexTerms terms, Packed* replaced);
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
  // Applied to every object of a list (first or re-list) and of a watch's ADDED, MODIFIED and
  // DELETED events before it is cached and handed to handlers, as client-go's
  // SharedIndexInformer.SetTransform: an informer whose readers need a few fields keeps only those
  // (a pod's spec is most of its bytes). It must keep metadata.name, namespace, resourceVersion,
  // labels and ownerReferences (the cache's key and indexes). Costs one more unpack and pack of
  // each object (a pod: ~20 us); a watch event's handlers take the transform's result as it is.
  std::function<void(Json& object)> transform;
  // Top-level members dropped from every object (the same objects) before the transform, from the
  // packed bytes, without unpacking them (a pod's "spec"): what the transform then unpacks is
  // only the rest. With no transform, dropping them is the whole shaping.
  std::vector<std::string> drop_members;
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

  // Applies one watch stream line ({"type": ..., "object": {...}}) exactly as the watch loop does:
  // decoded straight into the packed form, then cache, handlers, last resourceVersion. kMalformed
  // (and nothing changes) for a line that is not a watch event; an ERROR event changes nothing and
  // comes back as its status (410: kGone). A seam for replaying recorded streams in benchmarks and
  // tests; on a started informer it is serialized with the watch, but the order between the two is
  // then the caller's problem.
  ApiStatus ApplyLine(std::string_view line);
  // The same for an event already parsed (its object is packed from the DOM). The watch loop no
  // longer takes this path (a Client without its own WatchLines hands it re-serialized lines);
  // the benchmark uses it as the baseline.
  void Apply(const WatchEvent& event);

 private:
  void Run();
  void ResyncLoop();
  struct ListedObject;                             // an object of a list, packed as its page arrived
  ApiStatus ListAndReplace();
  // Replaces the cache with a full list, delivering the difference; records the list's RV.
  void Replace(std::vector<ListedObject> objects, const std::string& resource_version);
  ApiStatus WatchFromLast(int64_t* events);   // counts the events it applied
  void ApplyLocked(const WatchEvent& event);
  // `object`, when given, is `packed` already unpacked (the transform's result): the handlers take
  // it instead of unpacking the bytes again.
  void ApplyPackedLocked(WatchEventType type, std::string_view packed, internal::PackedMeta&& meta,
                         Json* object = nullptr);
  // Stores a packed object (*owned, when given, holds the same bytes and may be moved into the
  // cache) and dispatches the add or update to the handlers that want objects.
  void UpsertLocked(std::string_view packed, std::string* owned, internal::PackedMeta&& meta, Json* object = nullptr);
  bool Shapes() const { return options_.transform || !options_.drop_members.empty(); }
  // A packed object as the cache keeps it: options_.drop_members dropped, then options_.transform
  // applied; *transformed, when given and there is a transform, gets its result unpacked.
  std::string Shaped(std::string_view packed, Json* transformed = nullptr) const;
  void SetLastResourceVersion(const Json& object);
  void SetLastResourceVersion(const std::string& resource_version);
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
  bool needs_added_ = false;                       // some handler has on_add
  bool needs_old_ = false;                         // some handler has on_update
  bool needs_modify_ = false;                      // some handler has on_modify
  bool needs_deleted_ = false;                     // some handler has on_delete
  int64_t events_since_trim_ = 0;                  // under dispatch_mu_
  std::string line_packed_;                        // under dispatch_mu_: ApplyLine's packed object
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
