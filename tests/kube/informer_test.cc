// informer.h: list + watch into an indexed cache, handlers in order, watch resume without missed or
// repeated events, relist on 410 with the right diff, label selectors, resync, prompt Stop. The
// server is the fake kube-apiserver with its kubelet in manual mode (no pod changes of its own).
#include "fleet/kube/informer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "fake_apiserver_fixture.h"

namespace fleet::kube {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using testing::FakeApiServer;

const char kPodsPath[] = "/api/v1/namespaces/default/pods";

// Waits for `done` (polling); false on timeout.
bool Eventually(const std::function<bool()>& done, milliseconds timeout = milliseconds(10000)) {
  const Clock::time_point deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return done();
}

Json Pod(const std::string& name, const std::map<std::string, std::string>& labels = {},
         const std::string& owner_uid = "") {
  Json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}, {"namespace", "default"}}},
              {"spec", {{"containers", Json::array({{{"name", "main"}, {"image", "busybox"}}})}}}};
  if (!labels.empty()) pod["metadata"]["labels"] = labels;
  if (!owner_uid.empty()) {
    pod["metadata"]["ownerReferences"] = Json::array(
        {{{"apiVersion", "example.com/v1"}, {"kind", "Widget"}, {"name", "owner"}, {"uid", owner_uid}, {"controller", true}}});
  }
  return pod;
}

int64_t Rv(const Json& object) { return std::stoll(object["metadata"]["resourceVersion"].get<std::string>()); }

// One handler call as seen by a test.
struct Delivery {
  std::string type;   // add / update / delete
  std::string key;
  int64_t rv = 0;     // of the new object (add/update) or the last known one (delete)
  int64_t old_rv = 0; // update only
};

// Records every handler call, and whether the cache already reflected it when the handler ran.
class Recorder {
 public:
  explicit Recorder(const Informer* informer) : informer_(informer) {}

  EventHandlers Handlers() {
    EventHandlers h;
    h.on_add = [this](const Json& o) { Push({"add", ObjectCache::KeyOf(o), Rv(o), 0}, o, true); };
    h.on_update = [this](const Json& old_o, const Json& o) {
      Push({"update", ObjectCache::KeyOf(o), Rv(o), Rv(old_o)}, o, true);
    };
    h.on_delete = [this](const Json& o) { Push({"delete", ObjectCache::KeyOf(o), Rv(o), 0}, o, false); };
    return h;
  }
  std::vector<Delivery> Deliveries() const {
    std::lock_guard<std::mutex> lock(mu_);
    return deliveries_;
  }
  size_t Count() const {
    std::lock_guard<std::mutex> lock(mu_);
    return deliveries_.size();
  }
  int cache_mismatches() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cache_mismatches_;
  }

 private:
  void Push(Delivery d, const Json& object, bool present) {
    std::shared_ptr<const Json> cached = informer_->cache().Get(d.key);
    std::lock_guard<std::mutex> lock(mu_);
    const bool consistent = present ? (cached && Rv(*cached) == Rv(object)) : cached == nullptr;
    if (!consistent) cache_mismatches_++;
    deliveries_.push_back(std::move(d));
  }
  const Informer* informer_;
  mutable std::mutex mu_;
  std::vector<Delivery> deliveries_;
  int cache_mismatches_ = 0;
};

class InformerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.ok()) << fake_.error();
    ClientOptions options;
    options.request_timeout = milliseconds(5000);
    options.backoff_base = milliseconds(10);
    auto client = Client::Create(fake_.Config(), options);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = *client;
  }

  InformerOptions FastOptions() const {
    InformerOptions options;
    options.ns = "default";
    options.list_page_size = 2;           // several pages even for a handful of pods
    options.backoff_base = milliseconds(20);
    options.backoff_cap = milliseconds(200);
    return options;
  }

  Json CreatePod(const Json& pod) {
    auto created = client_->Create(Resource::Pods(), "default", pod);
    EXPECT_TRUE(created.ok()) << created.status().ToString();
    return created.ok() ? *created : Json();
  }
  Json Annotate(const std::string& name, const std::string& value) {
    auto patched = client_->MergePatch(Resource::Pods(), "default", name,
                                       {{"metadata", {{"annotations", {{"step", value}}}}}});
    EXPECT_TRUE(patched.ok()) << patched.status().ToString();
    return patched.ok() ? *patched : Json();
  }
  Json Relabel(const std::string& name, const Json& labels) {
    auto patched = client_->MergePatch(Resource::Pods(), "default", name, {{"metadata", {{"labels", labels}}}});
    EXPECT_TRUE(patched.ok()) << patched.status().ToString();
    return patched.ok() ? *patched : Json();
  }
  void DeletePod(const std::string& name) {
    DeleteOptions options;
    options.grace_period_seconds = 0;
    ApiStatus deleted = client_->Delete(Resource::Pods(), "default", name, options);
    EXPECT_TRUE(deleted.ok()) << deleted.ToString();
  }

  // key -> resourceVersion of what the server holds now.
  std::map<std::string, int64_t> ServerState() {
    auto list = client_->List(Resource::Pods(), "default");
    EXPECT_TRUE(list.ok()) << list.status().ToString();
    std::map<std::string, int64_t> state;
    if (list.ok()) {
      for (const Json& item : (*list)["items"]) state[ObjectCache::KeyOf(item)] = Rv(item);
    }
    return state;
  }
  static std::map<std::string, int64_t> CacheState(const Informer& informer) {
    std::map<std::string, int64_t> state;
    for (const auto& object : informer.cache().List()) state[ObjectCache::KeyOf(*object)] = Rv(*object);
    return state;
  }

  // Takes the watch down and keeps it down: the open watch is dropped mid-stream and every
  // reconnection attempt answers 503 until Heal(). Returns once the informer has hit a refusal.
  void BreakWatches() {
    fake_.ClearRequests();
    fake_.Control("faults", {{"failNext", 100000}, {"code", 503}, {"match", std::string("WATCH ") + kPodsPath}});
    fake_.Control("faults", {{"dropWatches", true}});
    ASSERT_TRUE(Eventually([&] {
      for (const Json& r : fake_.Requests()) {
        if (r.value("watch", false) && r.value("code", 0) == 503) return true;
      }
      return false;
    })) << "the informer never tried to reconnect";
  }
  void Heal() { fake_.Control("faults", {{"reset", true}}); }

  FakeApiServer fake_{{"--kubelet", "manual"}};
  std::shared_ptr<Client> client_;
};

TEST_F(InformerTest, InitialPagedListFillsTheCacheAndDeliversAddsBeforeSync) {
  for (int i = 0; i < 5; ++i) CreatePod(Pod("p" + std::to_string(i)));
  Informer informer(client_, Resource::Pods(), FastOptions());
  Recorder recorder(&informer);
  informer.AddHandlers(recorder.Handlers());
  EXPECT_FALSE(informer.HasSynced());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(milliseconds(10000)));
  EXPECT_TRUE(informer.HasSynced());
  EXPECT_EQ(informer.cache().Size(), 5u);
  EXPECT_EQ(CacheState(informer), ServerState());
  const std::vector<Delivery> deliveries = recorder.Deliveries();
  ASSERT_EQ(deliveries.size(), 5u) << "every listed object is delivered as an add before HasSynced";
  for (const Delivery& d : deliveries) EXPECT_EQ(d.type, "add");
  EXPECT_EQ(informer.lists(), 1);
  EXPECT_GE(fake_.RequestsMatching("GET", kPodsPath).size(), 3u) << "5 pods in pages of 2";
  EXPECT_FALSE(informer.LastResourceVersion().empty());
}

TEST_F(InformerTest, AddUpdateDeleteAreDeliveredInOrderAfterTheCacheChanged) {
  Informer informer(client_, Resource::Pods(), FastOptions());
  Recorder recorder(&informer);
  informer.AddHandlers(recorder.Handlers());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(milliseconds(10000)));

  const Json created = CreatePod(Pod("a"));
  const Json updated = Annotate("a", "1");
  DeletePod("a");
  ASSERT_TRUE(Eventually([&] { return recorder.Count() >= 3; }));
  const std::vector<Delivery> d = recorder.Deliveries();
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0].type, "add");
  EXPECT_EQ(d[0].rv, Rv(created));
  EXPECT_EQ(d[1].type, "update");
  EXPECT_EQ(d[1].old_rv, Rv(created));
  EXPECT_EQ(d[1].rv, Rv(updated));
  EXPECT_EQ(d[2].type, "delete");
  for (const Delivery& x : d) EXPECT_EQ(x.key, "default/a");
  EXPECT_EQ(recorder.cache_mismatches(), 0) << "handlers must run after the cache is updated";
  EXPECT_EQ(informer.cache().Size(), 0u);
}

TEST_F(InformerTest, WatchResumesAfterADroppedConnectionWithNoMissedAndNoRepeatedEvents) {
  for (int i = 0; i < 5; ++i) CreatePod(Pod("p" + std::to_string(i)));
  Informer informer(client_, Resource::Pods(), FastOptions());
  Recorder recorder(&informer);
  informer.AddHandlers(recorder.Handlers());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(milliseconds(10000)));
  const size_t initial = recorder.Count();
  ASSERT_EQ(initial, 5u);

  std::vector<std::pair<std::string, std::string>> expected;   // (type, key) in server order
  auto expect = [&](const char* type, const std::string& name) { expected.emplace_back(type, "default/" + name); };

  Annotate("p0", "live");         expect("update", "p0");
  CreatePod(Pod("p5"));           expect("add", "p5");
  ASSERT_TRUE(Eventually([&] { return recorder.Count() == initial + expected.size(); }));

  for (int round = 0; round < 2; ++round) {
    BreakWatches();
    const std::string r = std::to_string(round);
    // Changes made while nobody is watching: the resumed watch must replay exactly these.
    Annotate("p1", "down-a" + r);   expect("update", "p1");
    Annotate("p1", "down-b" + r);   expect("update", "p1");
    CreatePod(Pod("t" + r));        expect("add", "t" + r);
    DeletePod("t" + r);             expect("delete", "t" + r);
    if (round == 0) {
      DeletePod("p2");              expect("delete", "p2");
      CreatePod(Pod("p6"));         expect("add", "p6");
      DeletePod("p5");              expect("delete", "p5");
    }
    Heal();
    Annotate("p3", "after" + r);    expect("update", "p3");
    ASSERT_TRUE(Eventually([&] { return recorder.Count() >= initial + expected.size(); }))
        << "round " << round << ": " << recorder.Count() - initial << " of " << expected.size();
  }
  std::this_thread::sleep_for(milliseconds(200));   // room for a (wrong) duplicate to show up

  const std::vector<Delivery> all = recorder.Deliveries();
  const std::vector<Delivery> live(all.begin() + static_cast<std::ptrdiff_t>(initial), all.end());
  ASSERT_EQ(live.size(), expected.size());
  std::set<int64_t> rvs;
  int64_t previous_rv = 0;
  for (size_t i = 0; i < live.size(); ++i) {
    EXPECT_EQ(live[i].type, expected[i].first) << "event " << i;
    EXPECT_EQ(live[i].key, expected[i].second) << "event " << i;
    EXPECT_TRUE(rvs.insert(live[i].rv).second) << "resourceVersion " << live[i].rv << " delivered twice";
    EXPECT_GT(live[i].rv, previous_rv) << "event " << i << " out of order";
    previous_rv = live[i].rv;
  }
  // Replaying the handler calls over the initial list gives the server's final state.
  std::map<std::string, int64_t> replayed;
  for (const Delivery& d : all) {
    if (d.type == "delete") {
      replayed.erase(d.key);
    } else {
      replayed[d.key] = d.rv;
    }
  }
  const std::map<std::string, int64_t> server = ServerState();
  EXPECT_EQ(replayed, server);
  EXPECT_EQ(CacheState(informer), server);
  EXPECT_EQ(informer.lists(), 1) << "a resumable watch must not relist";
  EXPECT_GE(informer.watches(), 3);
  EXPECT_EQ(recorder.cache_mismatches(), 0);
}

TEST_F(InformerTest, RelistAfter410DeliversTheDiffIncludingDeletesMissedWhileDisconnected) {
  const Json owner_uid_pod = CreatePod(Pod("a", {{"app", "x"}}));
  CreatePod(Pod("b", {{"app", "x"}}));
  CreatePod(Pod("c"));
  CreatePod(Pod("d"));
  Informer informer(client_, Resource::Pods(), FastOptions());
  Recorder recorder(&informer);
  std::vector<Json> deleted_objects;
  std::mutex mu;
  EventHandlers capture;
  capture.on_delete = [&](const Json& last) {
    std::lock_guard<std::mutex> lock(mu);
    deleted_objects.push_back(last);
  };
  informer.AddHandlers(recorder.Handlers());
  informer.AddHandlers(capture);
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(milliseconds(10000)));
  const size_t initial = recorder.Count();

  BreakWatches();
  const Json a = Annotate("a", "while-down");
  DeletePod("b");
  const Json e = CreatePod(Pod("e"));
  CreatePod(Pod("f"));   // born and gone while disconnected: never seen, never delivered
  DeletePod("f");
  fake_.Control("faults", {{"compact", true}});   // the informer's resourceVersion is now too old
  Heal();

  ASSERT_TRUE(Eventually([&] { return informer.lists() >= 2 && recorder.Count() >= initial + 3; }));
  std::this_thread::sleep_for(milliseconds(200));
  const std::vector<Delivery> all = recorder.Deliveries();
  std::vector<Delivery> diff(all.begin() + static_cast<std::ptrdiff_t>(initial), all.end());
  std::sort(diff.begin(), diff.end(), [](const Delivery& x, const Delivery& y) { return x.key < y.key; });
  ASSERT_EQ(diff.size(), 3u) << "unchanged c and d are not re-delivered; f was never seen";
  EXPECT_EQ(diff[0].type, "update");
  EXPECT_EQ(diff[0].key, "default/a");
  EXPECT_EQ(diff[0].rv, Rv(a));
  EXPECT_EQ(diff[0].old_rv, Rv(owner_uid_pod));
  EXPECT_EQ(diff[1].type, "delete");
  EXPECT_EQ(diff[1].key, "default/b");
  EXPECT_EQ(diff[2].type, "add");
  EXPECT_EQ(diff[2].key, "default/e");
  EXPECT_EQ(diff[2].rv, Rv(e));
  {
    std::lock_guard<std::mutex> lock(mu);
    ASSERT_EQ(deleted_objects.size(), 1u);
    EXPECT_EQ(deleted_objects[0]["metadata"]["labels"]["app"], "x") << "delete carries the last known object";
  }
  EXPECT_EQ(CacheState(informer), ServerState());
  EXPECT_TRUE(informer.cache().ByLabel("app", "x").size() == 1u) << "indexes follow the relist";

  // And it keeps watching from the new list's resourceVersion.
  const Json c = Annotate("c", "after-relist");
  ASSERT_TRUE(Eventually([&] {
    auto cached = informer.cache().Get("default/c");
    return cached && Rv(*cached) == Rv(c);
  }));
  EXPECT_EQ(recorder.cache_mismatches(), 0);
}

TEST_F(InformerTest, LabelSelectorInformerSeesOnlyMatchingObjects) {
  CreatePod(Pod("web-1", {{"app", "web"}}));
  CreatePod(Pod("db-1", {{"app", "db"}}));
  InformerOptions options = FastOptions();
  options.label_selector = "app=web";
  Informer informer(client_, Resource::Pods(), options);
  Recorder recorder(&informer);
  informer.AddHandlers(recorder.Handlers());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(milliseconds(10000)));
  EXPECT_EQ(informer.cache().Keys(), std::vector<std::string>{"default/web-1"});

  CreatePod(Pod("db-2", {{"app", "db"}}));
  CreatePod(Pod("web-2", {{"app", "web"}}));
  ASSERT_TRUE(Eventually([&] { return informer.cache().Size() == 2u; }));
  std::this_thread::sleep_for(milliseconds(100));
  std::vector<std::string> keys = informer.cache().Keys();
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"default/web-1", "default/web-2"}));
  for (const Delivery& d : recorder.Deliveries()) EXPECT_EQ(d.key.rfind("default/web-", 0), 0u) << d.key;
}

TEST_F(InformerTest, IndexesFindObjectsByNamespaceOwnerAndLabelAndFollowChanges) {
  CreatePod(Pod("a", {{"app", "web"}, {"tier", "front"}}, "owner-1"));
  CreatePod(Pod("b", {{"app", "web"}}, "owner-1"));
  CreatePod(Pod("c", {{"app", "db"}}, "owner-2"));
  InformerOptions options = FastOptions();
  options.ns = "";   // all namespaces
  Informer informer(client_, Resource::Pods(), options);
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(milliseconds(10000)));
  const ObjectCache& cache = informer.cache();
  EXPECT_EQ(cache.ByNamespace("default").size(), 3u);
  EXPECT_EQ(cache.ByNamespace("other").size(), 0u);
  EXPECT_EQ(cache.ByOwnerUid("owner-1").size(), 2u);
  EXPECT_EQ(cache.ByOwnerUid("owner-2").size(), 1u);
  EXPECT_EQ(cache.ByLabel("app", "web").size(), 2u);
  EXPECT_EQ(cache.ByLabel("tier", "front").size(), 1u);

  const Json relabelled = Relabel("a", {{"app", "db"}, {"tier", nullptr}});
  ASSERT_TRUE(Eventually([&] {
    auto cached = cache.Get("default/a");
    return cached && Rv(*cached) == Rv(relabelled);
  }));
  EXPECT_EQ(cache.ByLabel("app", "web").size(), 1u);
  EXPECT_EQ(cache.ByLabel("app", "db").size(), 2u);
  EXPECT_EQ(cache.ByLabel("tier", "front").size(), 0u);
  DeletePod("c");
  ASSERT_TRUE(Eventually([&] { return cache.Size() == 2u; }));
  EXPECT_EQ(cache.ByOwnerUid("owner-2").size(), 0u);
  EXPECT_EQ(cache.ByLabel("app", "db").size(), 1u);
}

TEST_F(InformerTest, ResyncRedeliversEveryCachedObjectAsAnUpdate) {
  CreatePod(Pod("a"));
  CreatePod(Pod("b"));
  InformerOptions options = FastOptions();
  options.resync_period = std::chrono::seconds(1);
  Informer informer(client_, Resource::Pods(), options);
  Recorder recorder(&informer);
  informer.AddHandlers(recorder.Handlers());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(milliseconds(10000)));
  ASSERT_TRUE(Eventually([&] { return recorder.Count() >= 4; }, milliseconds(5000)));
  std::vector<Delivery> d = recorder.Deliveries();
  std::set<std::string> resynced;
  for (size_t i = 2; i < 4; ++i) {
    EXPECT_EQ(d[i].type, "update");
    EXPECT_EQ(d[i].rv, d[i].old_rv) << "a resync update carries the same object twice";
    resynced.insert(d[i].key);
  }
  EXPECT_EQ(resynced, (std::set<std::string>{"default/a", "default/b"}));
}

TEST_F(InformerTest, StopCancelsAnOpenWatchPromptly) {
  InformerOptions options = FastOptions();
  options.watch_timeout_seconds = 300;
  Informer informer(client_, Resource::Pods(), options);
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(milliseconds(10000)));
  ASSERT_TRUE(Eventually([&] { return informer.watches() >= 1; }));
  std::this_thread::sleep_for(milliseconds(100));   // the watch is now blocked waiting for events
  const Clock::time_point start = Clock::now();
  informer.Stop();
  EXPECT_LT(Clock::now() - start, milliseconds(1000));
}

TEST_F(InformerTest, UnreachableServerNeverSyncsAndStillStopsPromptly) {
  ClusterConfig config;
  config.server = "http://127.0.0.1:1";   // nothing listens on port 1
  ClientOptions client_options;
  client_options.max_attempts = 1;
  client_options.request_timeout = milliseconds(500);
  auto client = Client::Create(config, client_options);
  ASSERT_TRUE(client.ok());
  Informer informer(*client, Resource::Pods(), FastOptions());
  informer.Start();
  EXPECT_FALSE(informer.WaitForSync(milliseconds(300)));
  EXPECT_FALSE(informer.HasSynced());
  const Clock::time_point start = Clock::now();
  informer.Stop();
  EXPECT_LT(Clock::now() - start, milliseconds(1500));
  EXPECT_GE(informer.lists(), 2) << "failed lists are retried with backoff";
}

// ---- ObjectCache on its own ----

TEST(ObjectCacheTest, UpsertReturnsThePreviousObjectAndRemoveUnindexes) {
  ObjectCache cache;
  Json a = Pod("a", {{"app", "web"}}, "u1");
  a["metadata"]["resourceVersion"] = "1";
  EXPECT_EQ(cache.Upsert(a), nullptr);
  Json a2 = a;
  a2["metadata"]["resourceVersion"] = "2";
  std::shared_ptr<const Json> previous = cache.Upsert(a2);
  ASSERT_NE(previous, nullptr);
  EXPECT_EQ((*previous)["metadata"]["resourceVersion"], "1");
  EXPECT_EQ((*cache.Get("default/a"))["metadata"]["resourceVersion"], "2");
  EXPECT_EQ(cache.ByLabel("app", "web").size(), 1u);
  EXPECT_NE(cache.Remove("default/a"), nullptr);
  EXPECT_EQ(cache.Remove("default/a"), nullptr);
  EXPECT_EQ(cache.Size(), 0u);
  EXPECT_TRUE(cache.ByLabel("app", "web").empty());
  EXPECT_TRUE(cache.ByOwnerUid("u1").empty());
  EXPECT_TRUE(cache.ByNamespace("default").empty());
}

TEST(ObjectCacheTest, StoredObjectsComeBackExactlyAsTheyWentIn) {
  Json many_keys = Json::object();
  for (int i = 0; i < 40; ++i) many_keys["key-" + std::to_string(i)] = i;
  Json many_items = Json::array();
  for (int i = 0; i < 20; ++i) many_items.push_back(std::to_string(i));
  const Json odd = {
      {"metadata", {{"name", "odd"}, {"namespace", "ns"}, {"resourceVersion", "7"}}},
      {"numbers",
       {{"neg", -1},
        {"neg_big", -40000},
        {"int64_min", std::numeric_limits<int64_t>::min()},
        {"signed_positive", int64_t{70000}},
        {"u8", 200u},
        {"u16", 60000u},
        {"u32", 4000000000u},
        {"u64_max", std::numeric_limits<uint64_t>::max()},
        {"float", 3.25},
        {"tiny", -1e-300}}},
      {"strings",
       {{"empty", ""},
        {"fix_max", std::string(31, 'a')},
        {"str8", std::string(200, 'b')},
        {"str16", std::string(70000, 'c')},
        {"utf8", "\u017c\u00f3\u0142\u0107 \u2713"},
        {"nul", std::string("a\0b", 3)},
        {std::string(40, 'k'), "a long key"}}},
      {"arrays", Json::array({nullptr, true, false, Json::array(), Json::object(), Json::array({1, 2, 3})})},
      {"many_keys", many_keys},
      {"many_items", many_items},
  };
  ObjectCache cache;
  cache.Upsert(odd);
  std::shared_ptr<const Json> back = cache.Get("ns/odd");
  ASSERT_NE(back, nullptr);
  EXPECT_EQ(*back, odd);
  EXPECT_EQ(back->dump(), odd.dump());
  EXPECT_TRUE((*back)["numbers"]["signed_positive"].is_number_integer());
  EXPECT_TRUE((*back)["numbers"]["u8"].is_number_unsigned());
  EXPECT_EQ(cache.ResourceVersion("ns/odd"), "7");
  EXPECT_EQ(cache.ResourceVersion("ns/missing"), "");
  EXPECT_GT(cache.PackedBytes(), 70000u);
  // Text parsed the way the client parses it round-trips too (non-negative numbers unsigned).
  const Json parsed = Json::parse(R"({"metadata":{"name":"p","namespace":"ns"},"spec":{"priority":0,"x":-3,"y":1.5}})");
  cache.Upsert(parsed);
  EXPECT_EQ(cache.Get("ns/p")->dump(), parsed.dump());
  EXPECT_TRUE((*cache.Get("ns/p"))["spec"]["priority"].is_number_unsigned());
}

TEST(ObjectCacheTest, ClusterScopedObjectsAreKeyedByNameAlone) {
  EXPECT_EQ(ObjectCache::KeyOf({{"metadata", {{"name", "node-1"}}}}), "node-1");
  EXPECT_EQ(ObjectCache::KeyOf({{"metadata", {{"name", "p"}, {"namespace", "ns"}}}}), "ns/p");
}

TEST(ObjectCacheTest, ReadersSeeWholeObjectsWhileAWriterReplacesThem) {
  ObjectCache cache;
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0};
  std::thread writer([&] {
    for (int i = 0; i < 20000; ++i) {
      Json pod = Pod("p" + std::to_string(i % 50), {{"gen", std::to_string(i)}});
      pod["metadata"]["resourceVersion"] = std::to_string(i);
      cache.Upsert(std::move(pod));
      if (i % 7 == 0) cache.Remove("default/p" + std::to_string((i / 7) % 50));
    }
    stop = true;
  });
  std::thread reader([&] {
    while (!stop) {
      for (const auto& object : cache.ByNamespace("default")) {
        if ((*object)["metadata"]["labels"]["gen"] != (*object)["metadata"]["resourceVersion"]) torn++;
      }
    }
  });
  writer.join();
  reader.join();
  EXPECT_EQ(torn.load(), 0);
}

}  // namespace
}  // namespace fleet::kube
