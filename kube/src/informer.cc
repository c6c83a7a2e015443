#include "fleet/kube/informer.h"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <random>
#include <unordered_set>

#include "packed_json.h"

namespace fleet::kube {
namespace {

const std::string& StringAt(const Json& object, const char* section, const char* field) {
  static const std::string kEmpty;
  auto s = object.find(section);
  if (s == object.end() || !s->is_object()) return kEmpty;
  auto f = s->find(field);
  if (f == s->end() || !f->is_string()) return kEmpty;
  return f->get_ref<const std::string&>();
}

const std::string& ResourceVersionOf(const Json& object) {
  return StringAt(object, "metadata", "resourceVersion");
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

// Events between two ReturnFreedHeap() calls on the watch path. Each event parses ~20 KB of
// short-lived nodes around its few long-lived bytes; glibc keeps the holes this leaves in a thread's
// heap (~20 MB after 20,000 pod updates) unless asked. A trim takes ~0.1 ms: < 0.1 us per event.
constexpr int64_t kEventsPerHeapTrim = 1024;

void ReturnFreedHeap() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

}  // namespace

// ---- ObjectCache ----

std::string ObjectCache::KeyOf(const Json& object) {
  const std::string& ns = StringAt(object, "metadata", "namespace");
  const std::string& name = StringAt(object, "metadata", "name");
  return ns.empty() ? name : ns + "/" + name;
}

ObjectCache::IndexTerms ObjectCache::TermsOf(const Json& object) {
  IndexTerms terms;
  auto meta = object.find("metadata");
  if (meta == object.end() || !meta->is_object()) return terms;
  terms.ns = StringAt(object, "metadata", "namespace");
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

bool ObjectCache::Put(const Json& object, std::shared_ptr<const Json>* previous) {
  std::string key = KeyOf(object);
  std::string packed = internal::PackJson(object);
  packed.shrink_to_fit();   // the encoder grew it by doubling: up to half of it would be slack
  Entry entry{std::make_shared<const std::string>(std::move(packed)), ResourceVersionOf(object), TermsOf(object)};
  Packed replaced;
  {
    std::unique_lock<std::shared_mutex> lock(mu_);
    packed_bytes_ += entry.packed->size();
    auto [it, added] = objects_.try_emplace(std::move(key));
    if (added) {
      it->second = std::move(entry);
      IndexLocked(it->first, it->second.terms, true);
    } else {
      replaced = std::move(it->second.packed);
      packed_bytes_ -= replaced->size();
      // Most updates leave labels and owners alone: re-index only when the terms changed.
      if (!(it->second.terms == entry.terms)) {
        IndexLocked(it->first, it->second.terms, false);
        IndexLocked(it->first, entry.terms, true);
      }
      it->second = std::move(entry);
    }
  }
  if (previous) *previous = replaced ? Materialize(replaced) : nullptr;
  return replaced != nullptr;
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
  packed_bytes_ -= it->second.packed->size();
  objects_.erase(it);
  return true;
}

std::shared_ptr<const Json> ObjectCache::Remove(const std::string& key) {
  Packed removed;
  {
    std::unique_lock<std::shared_mutex> lock(mu_);
    auto it = objects_.find(key);
    if (it == objects_.end()) return nullptr;
    removed = std::move(it->second.packed);
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
    packed = it->second.packed;
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
    for (const auto& [key, entry] : objects_) packed.push_back(entry.packed);
  }
  return MaterializeAll(packed);
}

std::vector<ObjectCache::Packed> ObjectCache::CollectLocked(
    const std::map<std::string, std::set<std::string>>& index, const std::string& term) const {
  std::vector<Packed> out;
  auto it = index.find(term);
  if (it == index.end()) return out;
  out.reserve(it->second.size());
  for (const std::string& key : it->second) out.push_back(objects_.at(key).packed);
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
  needs_old_ = needs_old_ || static_cast<bool>(handlers.on_update);
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

void Informer::SetLastResourceVersion(const Json& object) {
  const std::string& rv = ResourceVersionOf(object);
  if (rv.empty()) return;
  std::lock_guard<std::mutex> lock(rv_mu_);
  last_rv_ = rv;
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

ApiStatus Informer::ListAndReplace() {
  ListOptions list_options;
  list_options.label_selector = options_.label_selector;
  list_options.field_selector = options_.field_selector;
  list_options.limit = options_.list_page_size;
  lists_++;
  StatusOr<Json> list = client_->List(resource_, options_.ns, list_options);
  if (!list.ok() && list.status().code() == Code::kGone && list_options.limit > 0) {
    // A continue token expired between pages: fall back to one unpaged list, as client-go does.
    list_options.limit = 0;
    list = client_->List(resource_, options_.ns, list_options);
  }
  if (!list.ok()) return list.status();
  Replace(std::move(list).value());
  // The whole parsed list (~20 KB per pod) was just freed: hand those pages back to the OS rather
  // than keep them as the process's high-water mark.
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

void Informer::Replace(Json list) {
  std::lock_guard<std::mutex> dispatch(dispatch_mu_);
  std::unordered_set<std::string> listed;
  auto items = list.find("items");
  if (items != list.end() && items->is_array()) {
    listed.reserve(items->size());
    for (Json& item : *items) {
      std::string key = ObjectCache::KeyOf(item);
      const std::string& rv = ResourceVersionOf(item);
      if (rv.empty() || cache_.ResourceVersion(key) != rv) {   // unchanged objects are not re-delivered
        std::shared_ptr<const Json> previous;
        if (!cache_.Put(item, needs_old_ ? &previous : nullptr)) {
          DispatchAdd(item);
        } else if (previous) {
          DispatchUpdate(*previous, item);
        }
      }
      listed.insert(std::move(key));
    }
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
  SetLastResourceVersion(list);
}

ApiStatus Informer::WatchFromLast(int64_t* events) {
  WatchOptions watch_options;
  watch_options.resource_version = LastResourceVersion();
  watch_options.label_selector = options_.label_selector;
  watch_options.field_selector = options_.field_selector;
  watch_options.allow_bookmarks = true;
  watch_options.timeout_seconds = options_.watch_timeout_seconds;
  watches_++;
  bool gone = false;
  ApiStatus error_event;
  *events = 0;
  const auto started = std::chrono::steady_clock::now();
  ApiStatus status = client_->Watch(
      resource_, options_.ns, watch_options,
      [&](const WatchEvent& event) {
        if (event.type == WatchEventType::kError) {
          const Json& code = event.object.contains("code") ? event.object["code"] : Json();
          if (code.is_number_integer() && code.get<int>() == 410) {
            gone = true;
          } else {
            error_event = ApiStatus(Code::kUnavailable,
                                    "watch ERROR event: " + event.object.dump().substr(0, 512));
          }
          return false;
        }
        Apply(event);
        ++*events;
        return !cancel_.cancelled();
      },
      cancel_);
  if (gone) return ApiStatus(Code::kGone, "watch: resourceVersion too old");
  if (!error_event.ok()) return error_event;
  if (status.ok() && *events == 0 && std::chrono::steady_clock::now() - started < options_.min_watch_duration) {
    return ApiStatus(Code::kUnavailable, "watch ended at once without events");
  }
  return status;
}

void Informer::Apply(const WatchEvent& event) {
  std::lock_guard<std::mutex> dispatch(dispatch_mu_);
  ApplyLocked(event);
}

void Informer::ApplyLocked(const WatchEvent& event) {
  switch (event.type) {
    case WatchEventType::kAdded:
    case WatchEventType::kModified: {
      // The old object is materialized only when an update handler will look at it.
      std::shared_ptr<const Json> previous;
      if (!cache_.Put(event.object, needs_old_ ? &previous : nullptr)) {
        DispatchAdd(event.object);
      } else if (previous) {
        DispatchUpdate(*previous, event.object);
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
    if (!synced_ || !needs_old_) continue;
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
    if (!h.on_update) continue;
    try {
      h.on_update(old_object, new_object);
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
