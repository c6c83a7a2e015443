#include "fleet/kube/informer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <random>
#include <string_view>
#include <unordered_set>

#include "fleet/base/heap.h"
#include "fleet/base/json_read.h"
#include "packed_json.h"

namespace fleet::kube {
namespace {

const std::string& ResourceVersionOf(const Json& object) {
  return StringMember(ObjectMember(object, "metadata"), "resourceVersion");
}

std::string KeyOf(const internal::PackedMeta& meta) {
  return meta.ns.empty() ? meta.name : meta.ns + "/" + meta.name;
}

bool ParseEventType(std::string_view type, WatchEventType* out) {
  if (type == "ADDED") {
    *out = WatchEventType::kAdded;
  } else if (type == "MODIFIED") {
    *out = WatchEventType::kModified;
  } else if (type == "DELETED") {
    *out = WatchEventType::kDeleted;
  } else if (type == "BOOKMARK") {
    *out = WatchEventType::kBookmark;
  } else if (type == "ERROR") {
    *out = WatchEventType::kError;
  } else {
    return false;
  }
  return true;
}

std::string Excerpt(std::string_view text) {
  std::string out(text.substr(0, 120));
  std::replace(out.begin(), out.end(), '\n', ' ');
  return text.size() > 120 ? out + "..." : out;
}

// Uniform in [d/2, d] where d = min(cap, base * 2^attempt): spreads reconnecting informers apart.
std::chrono::milliseconds JitteredBackoff(std::chrono::milliseconds base, std::chrono::milliseconds cap,
                                          int attempt) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  const double d = std::min(static_cast<double>(cap.count()),
                            static_cast<double>(base.count()) * std::ldexp(1.0, std::min(attempt, 30)));
  std::uniform_real_distribution<double> jitter(0.5, 1.0);
  return std::chrono::milliseconds(static_cast<int64_t>(d * jitter(rng)));
}

// Events between two ReturnFreedHeap() calls on the watch path. Events leave garbage around the
// long-lived packed objects (the objects materialized for handlers: ~20 KB a pod; much more on the
// DOM path of Apply, or of a Client without its own WatchLines), and glibc keeps the holes this
// leaves in a thread's heap unless asked. A trim walks the whole heap (a few ms in a process with a
// 50 MB heap and many threads' arenas): in the benchmark, a trim every 1,024 events cost ~4 us per
// event, every 8,192 < 0.5 us, and the RSS after 20,000 pod updates differed by < 1 MB.
constexpr int64_t kEventsPerHeapTrim = 8192;

// The cache's copy of a packed object: 1/8 spare (rounded up to 64 bytes), so that most updates
// fit where the object is.
std::string CopyWithSpare(std::string_view packed) {
  std::string copy;
  copy.reserve((packed.size() + packed.size() / 8 + 63) / 64 * 64);
  copy.assign(packed.data(), packed.size());
  return copy;
}

}  // namespace

// ---- ObjectCache ----

std::string ObjectCache::KeyOf(const Json& object) {
  const std::string& ns = StringMember(ObjectMember(object, "metadata"), "namespace");
  const std::string& name = StringMember(ObjectMember(object, "metadata"), "name");
  return ns.empty() ? name : ns + "/" + name;
}

ObjectCache::IndexTerms ObjectCache::TermsOf(const Json& object) {
  IndexTerms terms;
  auto meta = object.find("metadata");
  if (meta == object.end() || !meta->is_object()) return terms;
  terms.ns = StringMember(ObjectMember(object, "metadata"), "namespace");
  auto owners = meta->find("ownerReferences");
  if (owners != meta->end() && owners->is_array()) {
    for (const Json& ref : *owners) {
      auto uid = ref.find("uid");
      if (ref.is_object() && uid != ref.end() && uid->is_string()) {
        terms.owners.push_back(uid->get<std::string>());
      }
    }
  }
  auto labels = meta->find("labels");
  if (labels != meta->end() && labels->is_object()) {
    for (auto it = labels->begin(); it != labels->end(); ++it) {
      if (it.value().is_string()) {
        terms.labels.push_back(it.key() + "=" + it.value().get_ref<const std::string&>());
      }
    }
  }
  return terms;
}

void ObjectCache::IndexLocked(const std::string& key, const IndexTerms& terms, bool add) {
  auto update = [&](std::map<std::string, std::set<std::string>>& index, const std::string& term) {
    if (add) {
      index[term].insert(key);
      return;
    }
    auto it = index.find(term);
    if (it == index.end()) return;
    it->second.erase(key);
    if (it->second.empty()) index.erase(it);
  };
  if (!terms.ns.empty()) update(by_namespace_, terms.ns);
  for (const std::string& uid : terms.owners) update(by_owner_, uid);
  for (const std::string& label : terms.labels) update(by_label_, label);
}

std::shared_ptr<const Json> ObjectCache::Materialize(const Packed& packed) {
  return std::make_shared<const Json>(internal::UnpackJson(*packed));
}

std::vector<std::shared_ptr<const Json>> ObjectCache::MaterializeAll(const std::vector<Packed>& packed) {
  std::vector<std::shared_ptr<const Json>> out;
  out.reserve(packed.size());
  for (const Packed& p : packed) out.push_back(Materialize(p));
  return out;
}

ObjectCache::Packed ObjectCache::PinLocked(const std::shared_ptr<Buffer>& buffer) {
  // Taken under mu_: a writer (exclusive) sees the count. Released after the reading, with
  // release order, so that a writer that then sees no readers (acquire) writes after the reads.
  buffer->readers.fetch_add(1, std::memory_order_relaxed);
  return Packed(&buffer->bytes,
                [buffer](const std::string*) { buffer->readers.fetch_sub(1, std::memory_order_release); });
}

bool ObjectCache::Store(std::string key, std::string_view packed, std::string* owned,
                        const std::string& resource_version, IndexTerms terms, Packed* replaced) {
  auto fresh = [packed, owned] {
    auto buffer = std::make_shared<Buffer>();
    buffer->bytes = owned != nullptr ? std::move(*owned) : CopyWithSpare(packed);
    return buffer;
  };
  std::unique_lock<std::shared_mutex> lock(mu_);
  auto [it, added] = objects_.try_emplace(std::move(key));
  Entry& entry = it->second;
  if (added) {
    entry.buffer = fresh();
    entry.resource_version = resource_version;
    entry.terms = std::move(terms);
    IndexLocked(it->first, entry.terms, true);
    packed_bytes_ += packed.size();
    return false;
  }
  std::string& bytes = entry.buffer->bytes;
  packed_bytes_ -= bytes.size();
  packed_bytes_ += packed.size();
  // Readers pin under the shared lock, which we exclude: the count can only fall now.
  if (replaced == nullptr && bytes.capacity() >= packed.size() &&
      entry.buffer->readers.load(std::memory_order_acquire) == 0) {
    bytes.assign(packed.data(), packed.size());
  } else {
    if (replaced != nullptr) *replaced = PinLocked(entry.buffer);
    entry.buffer = fresh();
  }
  entry.resource_version.assign(resource_version);   // into the string it has: no allocation
  // Most updates leave labels and owners alone: re-index only when the terms changed (and else
  // keep the stored ones: no allocation either).
  if (!(entry.terms == terms)) {
    IndexLocked(it->first, entry.terms, false);
    entry.terms = std::move(terms);
    IndexLocked(it->first, entry.terms, true);
  }
  return true;
}

bool ObjectCache::Put(const Json& object, std::shared_ptr<const Json>* previous) {
  std::string packed = internal::PackJson(object);
  Packed replaced;
  const bool was_there = Store(KeyOf(object), packed, nullptr, ResourceVersionOf(object), TermsOf(object),
                               previous ? &replaced : nullptr);
  if (previous) *previous = replaced ? Materialize(replaced) : nullptr;
  return was_there;
}

bool ObjectCache::PutPacked(std::string key, std::string_view packed, std::string* owned,
                            internal::PackedMeta&& meta) {
  return Store(std::move(key), packed, owned, meta.resource_version,
               IndexTerms{std::move(meta.ns), std::move(meta.owner_uids), std::move(meta.labels)}, nullptr);
}

ObjectCache::Packed ObjectCache::PackedOf(const std::string& key) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  auto it = objects_.find(key);
  return it == objects_.end() ? nullptr : PinLocked(it->second.buffer);
}

std::shared_ptr<const Json> ObjectCache::Upsert(const Json& object) {
  std::shared_ptr<const Json> previous;
  Put(object, &previous);
  return previous;
}

bool ObjectCache::Erase(const std::string& key) {
  std::unique_lock<std::shared_mutex> lock(mu_);
  auto it = objects_.find(key);
  if (it == objects_.end()) return false;
  IndexLocked(key, it->second.terms, false);
  packed_bytes_ -= it->second.buffer->bytes.size();
  objects_.erase(it);
  return true;
}

std::shared_ptr<const Json> ObjectCache::Remove(const std::string& key) {
  Packed removed;
  {
    std::unique_lock<std::shared_mutex> lock(mu_);
    auto it = objects_.find(key);
    if (it == objects_.end()) return nullptr;
    removed = PinLocked(it->second.buffer);
    IndexLocked(key, it->second.terms, false);
    packed_bytes_ -= removed->size();
    objects_.erase(it);
  }
  return Materialize(removed);
}

std::shared_ptr<const Json> ObjectCache::Get(const std::string& key) const {
  Packed packed;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    auto it = objects_.find(key);
    if (it == objects_.end()) return nullptr;
    packed = PinLocked(it->second.buffer);
  }
  return Materialize(packed);
}

std::string ObjectCache::ResourceVersion(const std::string& key) const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  auto it = objects_.find(key);
  return it == objects_.end() ? std::string() : it->second.resource_version;
}

std::vector<std::shared_ptr<const Json>> ObjectCache::List() const {
  std::vector<Packed> packed;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    packed.reserve(objects_.size());
    for (const auto& [key, entry] : objects_) packed.push_back(PinLocked(entry.buffer));
  }
  return MaterializeAll(packed);
}

std::vector<ObjectCache::Packed> ObjectCache::CollectLocked(
    const std::map<std::string, std::set<std::string>>& index, const std::string& term) const {
  std::vector<Packed> out;
  auto it = index.find(term);
  if (it == index.end()) return out;
  out.reserve(it->second.size());
  for (const std::string& key : it->second) out.push_back(PinLocked(objects_.at(key).buffer));
  return out;
}

std::vector<std::shared_ptr<const Json>> ObjectCache::ByNamespace(const std::string& ns) const {
  std::vector<Packed> packed;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    packed = CollectLocked(by_namespace_, ns);
  }
  return MaterializeAll(packed);
}

std::vector<std::shared_ptr<const Json>> ObjectCache::ByOwnerUid(const std::string& uid) const {
  std::vector<Packed> packed;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    packed = CollectLocked(by_owner_, uid);
  }
  return MaterializeAll(packed);
}

std::vector<std::shared_ptr<const Json>> ObjectCache::ByLabel(const std::string& key,
                                                              const std::string& value) const {
  std::vector<Packed> packed;
  {
    std::shared_lock<std::shared_mutex> lock(mu_);
    packed = CollectLocked(by_label_, key + "=" + value);
  }
  return MaterializeAll(packed);
}

std::vector<std::string> ObjectCache::Keys() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  std::vector<std::string> out;
  out.reserve(objects_.size());
  for (const auto& [key, entry] : objects_) out.push_back(key);
  return out;
}

size_t ObjectCache::Size() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return objects_.size();
}

size_t ObjectCache::PackedBytes() const {
  std::shared_lock<std::shared_mutex> lock(mu_);
  return packed_bytes_;
}

// ---- Informer ----

Informer::Informer(std::shared_ptr<Client> client, Resource resource, InformerOptions options)
    : client_(std::move(client)), resource_(std::move(resource)), options_(std::move(options)) {}

Informer::~Informer() { Stop(); }

void Informer::AddHandlers(EventHandlers handlers) {
  needs_added_ = needs_added_ || static_cast<bool>(handlers.on_add);
  needs_old_ = needs_old_ || static_cast<bool>(handlers.on_update);
  needs_modify_ = needs_modify_ || static_cast<bool>(handlers.on_modify);
  needs_deleted_ = needs_deleted_ || static_cast<bool>(handlers.on_delete);
  handlers_.push_back(std::move(handlers));
}

void Informer::Start() {
  std::lock_guard<std::mutex> lock(state_mu_);
  if (started_ || stopping_) return;
  started_ = true;
  thread_ = std::thread([this] { Run(); });
  if (options_.resync_period.count() > 0) resync_thread_ = std::thread([this] { ResyncLoop(); });
}

void Informer::Stop() {
  {
    std::lock_guard<std::mutex> lock(state_mu_);
    stopping_ = true;
  }
  state_cv_.notify_all();
  cancel_.Cancel();
  if (thread_.joinable()) thread_.join();
  if (resync_thread_.joinable()) resync_thread_.join();
}

bool Informer::Stopping() const {
  std::lock_guard<std::mutex> lock(state_mu_);
  return stopping_;
}

bool Informer::SleepUnlessStopped(std::chrono::milliseconds delay) {
  std::unique_lock<std::mutex> lock(state_mu_);
  return !state_cv_.wait_for(lock, delay, [this] { return stopping_; });
}

bool Informer::HasSynced() const { return synced_; }

bool Informer::WaitForSync(std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> lock(state_mu_);
  return state_cv_.wait_for(lock, timeout, [this] { return synced_.load() || stopping_; }) &&
         synced_;
}

std::string Informer::LastResourceVersion() const {
  std::lock_guard<std::mutex> lock(rv_mu_);
  return last_rv_;
}

void Informer::SetLastResourceVersion(const Json& object) { SetLastResourceVersion(ResourceVersionOf(object)); }

void Informer::SetLastResourceVersion(const std::string& resource_version) {
  if (resource_version.empty()) return;
  std::lock_guard<std::mutex> lock(rv_mu_);
  last_rv_ = resource_version;
}

void Informer::Run() {
  bool need_list = true;
  bool fresh_list = false;             // no watch event since the last list
  int failures = 0;
  auto back_off = [&] {
    return SleepUnlessStopped(JitteredBackoff(options_.backoff_base, options_.backoff_cap, failures++));
  };
  while (!Stopping()) {
    if (need_list) {
      ApiStatus listed = ListAndReplace();
      if (!listed.ok()) {
        if (!back_off()) break;
        continue;
      }
      need_list = false;
      fresh_list = true;
      failures = 0;
    }
    int64_t events = 0;
    ApiStatus watched = WatchFromLast(&events);
    if (events > 0) {
      failures = 0;                      // it worked for a while: start the backoff afresh
      fresh_list = false;
    }
    switch (watched.code()) {
      case Code::kOk:
        failures = 0;
        continue;                        // ended or timed out: resume from the last RV
      case Code::kCancelled:
        return;
      case Code::kGone:
        // Our RV was compacted away: only a list can catch up. Straight away, unless the list we
        // just made is already too old (a server compacting that fast must not be hammered).
        need_list = true;
        if (fresh_list && !back_off()) return;
        continue;
      default:
        if (!back_off()) return;         // reconnect from the last RV after a pause
    }
  }
}

struct Informer::ListedObject {
  std::string packed;
  internal::PackedMeta meta;
};

ApiStatus Informer::ListAndReplace() {
  ListOptions list_options;
  list_options.label_selector = options_.label_selector;
  list_options.field_selector = options_.field_selector;
  list_options.limit = options_.list_page_size;
  lists_++;
  std::vector<ListedObject> objects;
  std::string list_rv;
  ApiStatus page_status;
  // Each page is packed as it arrives, item by item, and its text dropped.
  auto on_page = [&](std::string_view body) {
    internal::ListBodyInfo info;
    std::string error;
    const bool parsed = internal::PackListBody(
        body,
        [&](std::string_view item) {
          std::string transformed;
          if (Shapes()) {
            transformed = Shaped(item);
            item = transformed;
          }
          // With the cache's spare already: a new object's buffer moves into the cache as it is.
          ListedObject object{CopyWithSpare(item), internal::ReadPackedMeta(item)};
          objects.push_back(std::move(object));
        },
        &info, &error);
    if (!parsed) {
      page_status = ApiStatus(Code::kMalformed, "list " + resource_.plural + ": " + error + " (" + Excerpt(body) + ")");
      return false;
    }
    list_rv = std::move(info.resource_version);
    return true;
  };
  auto list = [&] {
    objects.clear();
    list_rv.clear();
    page_status = ApiStatus();
    ApiStatus status = client_->ListPages(resource_, options_.ns, list_options, on_page);
    return status.ok() ? page_status : status;
  };
  ApiStatus listed = list();
  if (listed.code() == Code::kGone && list_options.limit > 0) {
    // A continue token expired between pages: fall back to one unpaged list, as client-go does.
    list_options.limit = 0;
    listed = list();
  }
  if (!listed.ok()) return listed;
  Replace(std::move(objects), list_rv);
  // The pages' text and whatever handlers materialized were just freed: hand those pages back to
  // the OS rather than keep them as the process's high-water mark.
  ReturnFreedHeap();
  if (!synced_) {
    {
      std::lock_guard<std::mutex> lock(state_mu_);
      synced_ = true;
    }
    state_cv_.notify_all();
  }
  return ApiStatus();
}

void Informer::Replace(std::vector<ListedObject> objects, const std::string& resource_version) {
  std::lock_guard<std::mutex> dispatch(dispatch_mu_);
  std::unordered_set<std::string> listed;
  listed.reserve(objects.size());
  for (ListedObject& object : objects) {
    std::string key = KeyOf(object.meta);
    const std::string& rv = object.meta.resource_version;
    if (rv.empty() || cache_.ResourceVersion(key) != rv) {   // unchanged objects are not re-delivered
      UpsertLocked(object.packed, &object.packed, std::move(object.meta));
    }
    listed.insert(std::move(key));
    object = ListedObject();   // frees what the cache did not take as it goes
  }
  // Objects the list no longer has were deleted while we were not watching.
  for (const std::string& key : cache_.Keys()) {
    if (listed.count(key) != 0) continue;
    if (!needs_deleted_) {
      cache_.Erase(key);
    } else if (std::shared_ptr<const Json> gone = cache_.Remove(key)) {
      DispatchDelete(*gone);
    }
  }
  SetLastResourceVersion(resource_version);
}

ApiStatus Informer::WatchFromLast(int64_t* events) {
  WatchOptions watch_options;
  watch_options.resource_version = LastResourceVersion();
  watch_options.label_selector = options_.label_selector;
  watch_options.field_selector = options_.field_selector;
  watch_options.allow_bookmarks = true;
  watch_options.timeout_seconds = options_.watch_timeout_seconds;
  watches_++;
  ApiStatus line_status;   // a malformed line or an ERROR event, which end the watch
  *events = 0;
  const auto started = std::chrono::steady_clock::now();
  ApiStatus status = client_->WatchLines(
      resource_, options_.ns, watch_options,
      [&](std::string_view line) {
        ApiStatus applied = ApplyLine(line);
        if (!applied.ok()) {
          line_status = std::move(applied);
          return false;
        }
        ++*events;
        return !cancel_.cancelled();
      },
      cancel_);
  if (line_status.code() == Code::kGone) return ApiStatus(Code::kGone, "watch: resourceVersion too old");
  if (!line_status.ok()) return line_status;
  if (status.ok() && *events == 0 && std::chrono::steady_clock::now() - started < options_.min_watch_duration) {
    return ApiStatus(Code::kUnavailable, "watch ended at once without events");
  }
  return status;
}

ApiStatus Informer::ApplyLine(std::string_view line) {
  std::lock_guard<std::mutex> dispatch(dispatch_mu_);
  // The object is packed into a scratch string that keeps its capacity from event to event; the
  // cache copies it (over the stored object's bytes when they have room).
  std::string type_name, error;
  if (!internal::PackWatchLine(line, &type_name, &line_packed_, &error)) {
    return ApiStatus(Code::kMalformed, "watch event: " + error + ": " + Excerpt(line));
  }
  WatchEventType type = WatchEventType::kError;
  if (!ParseEventType(type_name, &type)) {
    return ApiStatus(Code::kMalformed, "watch event of unknown type \"" + type_name + "\"");
  }
  if (type == WatchEventType::kError) {
    const std::string body =
        internal::UnpackJson(line_packed_).dump(-1, ' ', false, Json::error_handler_t::replace);
    ApiStatus error_status = StatusFromResponse(0, body);
    return error_status.ok() ? ApiStatus(Code::kMalformed, "watch ERROR event without an error code: " + Excerpt(body))
                             : error_status;
  }
  Json transformed;   // the transform's result: the handlers take it as it is
  Json* object = nullptr;
  if (Shapes() && type != WatchEventType::kBookmark) {
    line_packed_ = Shaped(line_packed_, &transformed);
    if (options_.transform) object = &transformed;
  }
  ApplyPackedLocked(type, line_packed_, internal::ReadPackedMeta(line_packed_), object);
  if (line_packed_.capacity() > (1u << 20)) std::string().swap(line_packed_);   // after a huge object
  return ApiStatus();
}

void Informer::UpsertLocked(std::string_view packed, std::string* owned, internal::PackedMeta&& meta, Json* object) {
  std::string key = KeyOf(meta);
  // Objects are materialized only for the handlers that will look at them, before the cache
  // stores the new one (over the old one's bytes, when they have room). Writers are serialized
  // by dispatch_mu_: the object looked up here is the one replaced.
  bool deliver = false, update = false;
  Json old_object, new_object;
  if (needs_old_ || needs_modify_ || needs_added_) {
    ObjectCache::Packed current = cache_.PackedOf(key);
    update = current != nullptr;
    deliver = update ? needs_old_ || needs_modify_ : needs_added_;
    if (deliver && update && needs_old_) old_object = internal::UnpackJson(*current);
  }   // (our reference to the stored bytes is gone: the cache may write over them)
  if (deliver) new_object = object ? std::move(*object) : internal::UnpackJson(packed);
  cache_.PutPacked(std::move(key), packed, owned, std::move(meta));
  if (!deliver) return;
  if (update) {
    DispatchUpdate(old_object, new_object);
  } else {
    DispatchAdd(new_object);
  }
}

void Informer::ApplyPackedLocked(WatchEventType type, std::string_view packed, internal::PackedMeta&& meta,
                                 Json* object) {
  const std::string rv = meta.resource_version;
  switch (type) {
    case WatchEventType::kAdded:
    case WatchEventType::kModified:
      UpsertLocked(packed, nullptr, std::move(meta), object);
      break;
    case WatchEventType::kDeleted: {
      Json last_known;
      if (needs_deleted_) last_known = object ? std::move(*object) : internal::UnpackJson(packed);
      cache_.Erase(KeyOf(meta));
      if (needs_deleted_) DispatchDelete(last_known);
      break;
    }
    case WatchEventType::kBookmark:
    case WatchEventType::kError:
      break;
  }
  SetLastResourceVersion(rv);
  if (++events_since_trim_ >= kEventsPerHeapTrim) {
    events_since_trim_ = 0;
    ReturnFreedHeap();
  }
}

void Informer::Apply(const WatchEvent& event) {
  std::lock_guard<std::mutex> dispatch(dispatch_mu_);
  if (!Shapes() || event.type == WatchEventType::kBookmark || event.type == WatchEventType::kError) {
    ApplyLocked(event);
    return;
  }
  WatchEvent shaped = event;
  if (shaped.object.is_object()) {
    for (const std::string& member : options_.drop_members) shaped.object.erase(member);
  }
  if (options_.transform) options_.transform(shaped.object);
  ApplyLocked(shaped);
}

std::string Informer::Shaped(std::string_view packed, Json* transformed) const {
  std::string kept = options_.drop_members.empty() ? std::string(packed)
                                                   : internal::WithoutMembers(packed, options_.drop_members);
  if (!options_.transform) return kept;
  Json object = internal::UnpackJson(kept);
  options_.transform(object);
  std::string packed_object = internal::PackJson(object);
  if (transformed) *transformed = std::move(object);
  return packed_object;
}

void Informer::ApplyLocked(const WatchEvent& event) {
  switch (event.type) {
    case WatchEventType::kAdded:
    case WatchEventType::kModified: {
      // The old object is materialized only when an update handler will look at it.
      std::shared_ptr<const Json> previous;
      if (!cache_.Put(event.object, needs_old_ ? &previous : nullptr)) {
        DispatchAdd(event.object);
      } else if (needs_old_ || needs_modify_) {
        DispatchUpdate(previous ? *previous : Json(), event.object);
      }
      break;
    }
    case WatchEventType::kDeleted:
      cache_.Erase(ObjectCache::KeyOf(event.object));
      DispatchDelete(event.object);
      break;
    case WatchEventType::kBookmark:
    case WatchEventType::kError:
      break;
  }
  if (event.type != WatchEventType::kError) SetLastResourceVersion(event.object);
  if (++events_since_trim_ >= kEventsPerHeapTrim) {
    events_since_trim_ = 0;
    ReturnFreedHeap();
  }
}

void Informer::ResyncLoop() {
  while (SleepUnlessStopped(options_.resync_period)) {
    if (!synced_ || !(needs_old_ || needs_modify_)) continue;
    std::lock_guard<std::mutex> dispatch(dispatch_mu_);
    // One object at a time: materializing the whole cache at once would cost its parsed size.
    for (const std::string& key : cache_.Keys()) {
      if (std::shared_ptr<const Json> object = cache_.Get(key)) DispatchUpdate(*object, *object);
    }
  }
}

void Informer::DispatchAdd(const Json& object) {
  for (const EventHandlers& h : handlers_) {
    if (!h.on_add) continue;
    try {
      h.on_add(object);
    } catch (...) {
      handler_errors_++;
    }
  }
}

void Informer::DispatchUpdate(const Json& old_object, const Json& new_object) {
  for (const EventHandlers& h : handlers_) {
    try {
      if (h.on_update) h.on_update(old_object, new_object);
      if (h.on_modify) h.on_modify(new_object);
    } catch (...) {
      handler_errors_++;
    }
  }
}

void Informer::DispatchDelete(const Json& last_known) {
  for (const EventHandlers& h : handlers_) {
    if (!h.on_delete) continue;
    try {
      h.on_delete(last_known);
    } catch (...) {
      handler_errors_++;
    }
  }
}

}  // namespace fleet::kube
