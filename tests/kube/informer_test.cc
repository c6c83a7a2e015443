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
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "fake_apiserver_fixture.h"
#include "packed_json.h"

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

// The dropped members and the transform (client-go's SetTransform) shape every object before the
// cache and the handlers see it: from the first list, watch ADDED and MODIFIED events, and a relist
// after 410.
TEST_F(InformerTest, TransformAppliesToListWatchAndRelistBeforeCacheAndHandlers) {
  CreatePod(Pod("listed", {{"app", "x"}}));
  InformerOptions options = FastOptions();
  options.drop_members = {"spec"};
  options.transform = [](Json& object) {
    EXPECT_FALSE(object.contains("spec")) << "dropped before the transform";
    object["metadata"]["annotations"]["transformed"] = "yes";
  };
  Informer informer(client_, Resource::Pods(), options);
  std::mutex mu;
  std::map<std::string, std::vector<Json>> delivered;   // by handler: add / modify / delete
  EventHandlers handlers;
  auto record = [&](const char* type) {
    return [&, type](const Json& object) {
      std::lock_guard<std::mutex> lock(mu);
      delivered[type].push_back(object);
    };
  };
  handlers.on_add = record("add");
  handlers.on_modify = record("modify");
  handlers.on_delete = record("delete");
  informer.AddHandlers(handlers);
  const auto count = [&](const char* type) {
    std::lock_guard<std::mutex> lock(mu);
    return delivered[type].size();
  };
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(milliseconds(10000)));

  CreatePod(Pod("added"));                       // watch ADDED
  Annotate("listed", "1");                       // watch MODIFIED
  ASSERT_TRUE(Eventually([&] { return count("add") >= 2 && count("modify") >= 1; }));
  BreakWatches();
  CreatePod(Pod("relisted"));                    // seen by the relist only
  Annotate("added", "while-down");
  DeletePod("listed");
  fake_.Control("faults", {{"compact", true}});
  Heal();
  ASSERT_TRUE(Eventually([&] { return informer.lists() >= 2 && count("add") >= 3 && count("modify") >= 2; }));
  ASSERT_TRUE(Eventually([&] { return CacheState(informer) == ServerState(); }));

  const auto transformed = [](const Json& object) {
    return !object.contains("spec") && object["metadata"]["annotations"].value("transformed", "") == "yes";
  };
  std::lock_guard<std::mutex> lock(mu);
  for (const auto& [type, objects] : delivered) {
    for (const Json& object : objects) EXPECT_TRUE(transformed(object)) << type << ": " << object.dump();
  }
  EXPECT_EQ(delivered["add"].size(), 3u) << "listed, added, relisted";
  EXPECT_EQ(delivered["modify"].size(), 2u);
  EXPECT_EQ(delivered["delete"].size(), 1u);
  EXPECT_EQ(delivered["modify"][0]["metadata"]["annotations"].value("step", ""), "1") << "the rest is kept";
  for (const auto& object : informer.cache().List()) EXPECT_TRUE(transformed(*object)) << object->dump();
  EXPECT_EQ(informer.cache().Size(), 2u);
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

// ---- the lower-level client calls: page by page, line by line ----

// Counts the whole-list calls (List) the informer makes.
class ForwardingClient : public testing::RequiredMethodsClient {
 public:
  using RequiredMethodsClient::RequiredMethodsClient;
  StatusOr<Json> List(const Resource& r, const std::string& ns, const ListOptions& options) override {
    whole_lists++;
    return RequiredMethodsClient::List(r, ns, options);
  }
  std::atomic<int> whole_lists{0};
};

// Forwards ListPages and WatchLines too, recording every page the informer is handed.
class PageRecordingClient : public ForwardingClient {
 public:
  using ForwardingClient::ForwardingClient;
  struct Page {
    int64_t limit = 0;
    size_t items = 0;
    size_t bytes = 0;
  };
  ApiStatus ListPages(const Resource& r, const std::string& ns, const ListOptions& options,
                      const std::function<bool(std::string_view page)>& on_page) override {
    return inner_->ListPages(r, ns, options, [&](std::string_view page) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        pages_.push_back({options.limit, Json::parse(page)["items"].size(), page.size()});
      }
      const bool go_on = on_page(page);
      if (after_page) after_page();
      return go_on;
    });
  }
  ApiStatus WatchLines(const Resource& r, const std::string& ns, const WatchOptions& options,
                       const std::function<bool(std::string_view line)>& on_line, const CancelToken& cancel) override {
    return inner_->WatchLines(r, ns, options, on_line, cancel);
  }
  std::vector<Page> Pages() const {
    std::lock_guard<std::mutex> lock(mu_);
    return pages_;
  }
  std::function<void()> after_page;   // runs after each page was handed over (set before Start)

 private:
  mutable std::mutex mu_;
  std::vector<Page> pages_;
};

TEST_F(InformerTest, ListsPageByPageAndNeverAsksForTheWholeList) {
  for (int i = 0; i < 7; ++i) CreatePod(Pod("p" + std::to_string(i), {{"app", "x"}}));
  auto recording = std::make_shared<PageRecordingClient>(client_);
  Informer informer(recording, Resource::Pods(), FastOptions());   // pages of 2
  Recorder recorder(&informer);
  informer.AddHandlers(recorder.Handlers());
  fake_.ClearRequests();
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(milliseconds(10000)));
  EXPECT_EQ(CacheState(informer), ServerState());
  EXPECT_EQ(recorder.Count(), 7u);
  EXPECT_EQ(recording->whole_lists.load(), 0) << "Client::List returns the whole list at once";
  const std::vector<PageRecordingClient::Page> pages = recording->Pages();
  ASSERT_EQ(pages.size(), 4u) << "7 pods in pages of 2";
  size_t items = 0, total_bytes = 0, largest = 0;
  for (const auto& page : pages) {
    EXPECT_LE(page.items, 2u);
    items += page.items;
    total_bytes += page.bytes;
    largest = std::max(largest, page.bytes);
  }
  EXPECT_EQ(items, 7u);
  EXPECT_LT(largest * 3, total_bytes) << "one page is what the informer holds as text at a time";
  std::vector<Json> gets = fake_.RequestsMatching("GET", kPodsPath);
  size_t continued = 0;
  for (const Json& request : gets) {
    if (request.value("watch", false)) continue;
    if (request.value("query", "").find("continue=") != std::string::npos) continued++;
  }
  EXPECT_EQ(continued, 3u) << "pages 2-4 follow the continue token";
  EXPECT_EQ(informer.cache().ByLabel("app", "x").size(), 7u);
}

TEST_F(InformerTest, AContinueTokenThatExpiresMidListFallsBackToOneUnpagedListWithoutRepeats) {
  for (int i = 0; i < 5; ++i) CreatePod(Pod("p" + std::to_string(i)));
  auto recording = std::make_shared<PageRecordingClient>(client_);
  bool compacted = false;
  recording->after_page = [&] {
    if (!compacted) fake_.Control("faults", {{"compact", true}});   // the next page's token is now too old
    compacted = true;
  };
  Informer informer(recording, Resource::Pods(), FastOptions());
  Recorder recorder(&informer);
  informer.AddHandlers(recorder.Handlers());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(milliseconds(10000)));
  const std::vector<PageRecordingClient::Page> pages = recording->Pages();
  ASSERT_EQ(pages.size(), 2u) << "one page of 2, then (after 410 Gone) one unpaged page of 5";
  EXPECT_EQ(pages[0].limit, 2);
  EXPECT_EQ(pages[1].limit, 0);
  EXPECT_EQ(pages[1].items, 5u);
  EXPECT_EQ(informer.lists(), 1) << "the fallback is part of the same list";
  EXPECT_EQ(CacheState(informer), ServerState());
  const std::vector<Delivery> deliveries = recorder.Deliveries();
  ASSERT_EQ(deliveries.size(), 5u) << "the first attempt's page is not applied twice";
  std::set<std::string> keys;
  for (const Delivery& d : deliveries) {
    EXPECT_EQ(d.type, "add");
    keys.insert(d.key);
  }
  EXPECT_EQ(keys.size(), 5u);
}

TEST_F(InformerTest, WorksThroughAClientWithoutItsOwnListPagesAndWatchLines) {
  CreatePod(Pod("a", {{"app", "x"}}));
  CreatePod(Pod("b"));
  CreatePod(Pod("c"));
  auto forwarding = std::make_shared<ForwardingClient>(client_);
  Informer informer(forwarding, Resource::Pods(), FastOptions());
  Recorder recorder(&informer);
  informer.AddHandlers(recorder.Handlers());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(milliseconds(10000)));
  EXPECT_EQ(CacheState(informer), ServerState());
  EXPECT_EQ(forwarding->whole_lists.load(), 1) << "the default ListPages hands over List()'s answer";

  const Json updated = Annotate("a", "1");
  DeletePod("b");
  CreatePod(Pod("d"));
  ASSERT_TRUE(Eventually([&] { return recorder.Count() >= 6; }));
  const std::vector<Delivery> d = recorder.Deliveries();
  ASSERT_EQ(d.size(), 6u);
  EXPECT_EQ(d[3].type, "update");
  EXPECT_EQ(d[3].rv, Rv(updated));
  EXPECT_EQ(d[4].type, "delete");
  EXPECT_EQ(d[4].key, "default/b");
  EXPECT_EQ(d[5].type, "add");
  EXPECT_EQ(d[5].key, "default/d");
  EXPECT_EQ(CacheState(informer), ServerState());
  EXPECT_EQ(recorder.cache_mismatches(), 0);

  // A 410 ends the default WatchLines with its status (no ERROR line): the informer relists.
  BreakWatches();
  DeletePod("c");
  fake_.Control("faults", {{"compact", true}});
  Heal();
  ASSERT_TRUE(Eventually([&] { return informer.lists() >= 2 && informer.cache().Size() == 2u; }));
  EXPECT_EQ(CacheState(informer), ServerState());
}

// ---- ApplyLine: the watch path's decoding, without a server ----

// Every handler call with the objects it was given.
struct FullRecorder {
  std::vector<std::pair<std::string, Json>> calls;   // ("add" | "update-old" | "update-new" | "delete", object)
  EventHandlers Handlers() {
    EventHandlers h;
    h.on_add = [this](const Json& o) { calls.emplace_back("add", o); };
    h.on_update = [this](const Json& old_o, const Json& o) {
      calls.emplace_back("update-old", old_o);
      calls.emplace_back("update-new", o);
    };
    h.on_delete = [this](const Json& o) { calls.emplace_back("delete", o); };
    return h;
  }
};

std::shared_ptr<Client> UnusedClient() {
  ClusterConfig config;
  config.server = "http://127.0.0.1:1";   // never called: the informers below are not started
  return Client::Create(config).value();
}

std::vector<std::string> OddStream() {
  Json a = Json::parse(u8R"({"apiVersion":"v1","kind":"Pod","metadata":{"name":"żółw-1","namespace":"default",
      "resourceVersion":"10","labels":{"app":"web","tier":"front ✓"},
      "ownerReferences":[{"uid":"owner-1","controller":true},"not-an-object",{"uid":5}],
      "annotations":{"escaped":"line\nbreak \"quoted\" \u00e9 \ud834\udd1e","big":"18446744073709551616"}},
      "spec":{"priority":0,"offset":-3,"ratio":0.25,"huge":18446744073709551615,"past":18446744073709551616,
              "negative":-9223372036854775808,"nested":[[1,[2,[3,{"x":[]}]]],{}],"z":1,"a":2,"z":3}})");
  std::vector<std::string> lines;
  auto line = [&](const char* type, const Json& object) {
    lines.push_back(std::string(R"({"type":")") + type + R"(","object":)" + object.dump(1) + "}");
  };
  line("ADDED", a);
  Json b = a;
  b["metadata"]["name"] = "b";
  b["metadata"]["resourceVersion"] = "11";
  b["metadata"]["ownerReferences"] = Json::array({{{"uid", "owner-2"}}});
  line("ADDED", b);
  a["metadata"]["resourceVersion"] = "12";
  a["status"] = {{"phase", "Running"}, {"podIP", "10.0.0.1"}};
  line("MODIFIED", a);   // same labels and owners
  a["metadata"]["resourceVersion"] = "13";
  a["metadata"]["labels"] = {{"app", "db"}};
  a["spec"]["nested"] = Json::array();
  line("MODIFIED", a);   // relabelled, smaller
  a["metadata"]["resourceVersion"] = "14";
  a["metadata"]["annotations"]["grown"] = std::string(5000, 'g');
  line("MODIFIED", a);   // past the stored buffer's spare room
  line("BOOKMARK", {{"kind", "Pod"}, {"apiVersion", "v1"}, {"metadata", {{"resourceVersion", "15"}}}});
  b["metadata"]["resourceVersion"] = "16";
  line("DELETED", b);
  return lines;
}

TEST(InformerApplyLineTest, GivesHandlersAndTheCacheWhatApplyGivesForTheParsedEvent) {
  Informer by_line(UnusedClient(), Resource::Pods());
  Informer by_dom(UnusedClient(), Resource::Pods());
  FullRecorder line_calls, dom_calls;
  by_line.AddHandlers(line_calls.Handlers());
  by_dom.AddHandlers(dom_calls.Handlers());
  const std::vector<std::string> lines = OddStream();
  for (size_t i = 0; i < lines.size(); ++i) {
    ApiStatus applied = by_line.ApplyLine(lines[i]);
    ASSERT_TRUE(applied.ok()) << applied.ToString();
    Json parsed = Json::parse(lines[i]);
    WatchEvent event;
    const std::string type = parsed["type"];
    event.type = type == "ADDED" ? WatchEventType::kAdded : type == "MODIFIED" ? WatchEventType::kModified
                 : type == "DELETED" ? WatchEventType::kDeleted : WatchEventType::kBookmark;
    event.object = parsed["object"];
    by_dom.Apply(event);

    ASSERT_EQ(line_calls.calls.size(), dom_calls.calls.size()) << "after line " << i;
    EXPECT_EQ(by_line.LastResourceVersion(), by_dom.LastResourceVersion());
    EXPECT_EQ(by_line.cache().Keys().size(), by_dom.cache().Keys().size());
    for (const std::string& key : by_dom.cache().Keys()) {
      ASSERT_NE(by_line.cache().Get(key), nullptr) << key;
      EXPECT_EQ(by_line.cache().Get(key)->dump(), by_dom.cache().Get(key)->dump()) << key;
      EXPECT_EQ(by_line.cache().ResourceVersion(key), by_dom.cache().ResourceVersion(key));
    }
    EXPECT_EQ(by_line.cache().PackedBytes(), by_dom.cache().PackedBytes());
    for (const auto& [label, value] : std::vector<std::pair<std::string, std::string>>{
             {"app", "web"}, {"app", "db"}, {"tier", "front \u2713"}}) {
      EXPECT_EQ(by_line.cache().ByLabel(label, value).size(), by_dom.cache().ByLabel(label, value).size());
    }
    for (const char* owner : {"owner-1", "owner-2"}) {
      EXPECT_EQ(by_line.cache().ByOwnerUid(owner).size(), by_dom.cache().ByOwnerUid(owner).size());
    }
    EXPECT_EQ(by_line.cache().ByNamespace("default").size(), by_dom.cache().ByNamespace("default").size());
  }
  ASSERT_EQ(line_calls.calls.size(), 9u) << "2 adds, 3 updates (old and new object each), 1 delete";
  for (size_t i = 0; i < line_calls.calls.size(); ++i) {
    EXPECT_EQ(line_calls.calls[i].first, dom_calls.calls[i].first);
    EXPECT_EQ(line_calls.calls[i].second, dom_calls.calls[i].second) << "call " << i;
    EXPECT_EQ(line_calls.calls[i].second.dump(), dom_calls.calls[i].second.dump()) << "call " << i;
  }
  EXPECT_EQ(by_line.LastResourceVersion(), "16");
  EXPECT_EQ(by_line.cache().ByLabel("app", "db").size(), 1u);
  EXPECT_EQ(by_line.cache().ByOwnerUid("owner-1").size(), 1u);
  EXPECT_EQ(by_line.cache().ByOwnerUid("owner-2").size(), 0u) << "b was deleted";
  EXPECT_TRUE((*by_line.cache().Get(u8"default/żółw-1"))["spec"]["past"].is_number_float());
}

TEST(InformerApplyLineTest, OnlyTheHandlersThereAreGetObjects) {
  Informer informer(UnusedClient(), Resource::Pods());
  std::vector<Json> deleted;
  EventHandlers only_delete;
  only_delete.on_delete = [&](const Json& o) { deleted.push_back(o); };
  informer.AddHandlers(only_delete);
  for (const std::string& line : OddStream()) ASSERT_TRUE(informer.ApplyLine(line).ok());
  ASSERT_EQ(deleted.size(), 1u);
  EXPECT_EQ(deleted[0], Json::parse(OddStream().back())["object"]) << "the DELETED event's object";
  EXPECT_EQ(informer.cache().Size(), 1u);
}

TEST(InformerApplyLineTest, MalformedLinesAndErrorEventsChangeNothing) {
  Informer informer(UnusedClient(), Resource::Pods());
  FullRecorder calls;
  informer.AddHandlers(calls.Handlers());
  ASSERT_TRUE(informer.ApplyLine(OddStream()[0]).ok());
  const std::string rv = informer.LastResourceVersion();
  auto code = [&](const std::string& line) { return informer.ApplyLine(line).code(); };
  EXPECT_EQ(code("not json"), Code::kMalformed);
  EXPECT_EQ(code(R"({"type":"ADDED","object":{"metadata":{"name":"x"}})"), Code::kMalformed) << "truncated";
  EXPECT_EQ(code(R"({"type":"ADDED","object":[1]})"), Code::kMalformed);
  EXPECT_EQ(code(R"({"type":"RENAMED","object":{"metadata":{"name":"x"}}})"), Code::kMalformed);
  EXPECT_EQ(code(R"({"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired","message":"too old"}})"),
            Code::kGone);
  EXPECT_EQ(code(R"({"type":"ERROR","object":{"kind":"Status","code":500,"message":"boom"}})"), Code::kUnavailable);
  EXPECT_EQ(code(R"({"type":"ERROR","object":{"kind":"Status"}})"), Code::kMalformed);
  EXPECT_EQ(calls.calls.size(), 1u);
  EXPECT_EQ(informer.cache().Size(), 1u);
  EXPECT_EQ(informer.LastResourceVersion(), rv);
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

TEST(ObjectCacheTest, UpdatesInPlaceAndOutOfPlaceKeepTheBytesCountRight) {
  ObjectCache cache;
  Json pod = Pod("a", {{"app", "web"}});
  for (size_t size : {10u, 20u, 5u, 4000u, 3900u, 50u, 0u}) {
    pod["metadata"]["annotations"]["pad"] = std::string(size, 'x');
    pod["metadata"]["resourceVersion"] = std::to_string(size);
    cache.Put(pod);
    EXPECT_EQ(*cache.Get("default/a"), pod) << size;
    EXPECT_EQ(cache.PackedBytes(), internal::PackJson(pod).size()) << size;
    EXPECT_EQ(cache.ResourceVersion("default/a"), std::to_string(size));
  }
  EXPECT_EQ(cache.ByLabel("app", "web").size(), 1u);
}

TEST(ObjectCacheTest, ReadersSeeWholeObjectsWhileUpdatesAreWrittenInPlace) {
  // Put without `previous` writes over the stored bytes when no reader holds them.
  ObjectCache cache;
  std::atomic<bool> stop{false};
  std::atomic<int> torn{0};
  std::atomic<int64_t> reads{0};
  std::thread writer([&] {
    // At least 20,000 writes, and on until the readers have read during them (on a loaded machine
    // the readers may not be scheduled before 20,000 writes are done).
    for (int i = 0; i < 20000 || reads.load() < 1000; ++i) {
      Json pod = Pod("p" + std::to_string(i % 20), {{"gen", std::to_string(i)}});
      pod["metadata"]["resourceVersion"] = std::to_string(i);
      pod["metadata"]["annotations"]["pad"] = std::string(static_cast<size_t>(i % 97), 'x');   // grows and shrinks
      cache.Put(pod);
    }
    stop = true;
  });
  std::vector<std::thread> readers;
  for (int r = 0; r < 2; ++r) {
    readers.emplace_back([&] {
      while (!stop) {
        for (const auto& object : cache.ByNamespace("default")) {
          const Json& meta = (*object)["metadata"];
          const int gen = std::stoi(meta["labels"]["gen"].get<std::string>());
          if (meta["labels"]["gen"] != meta["resourceVersion"] ||
              meta["annotations"]["pad"].get<std::string>().size() != static_cast<size_t>(gen % 97)) {
            torn++;
          }
          reads++;
        }
      }
    });
  }
  writer.join();
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_GT(reads.load(), 0);
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

namespace fleet::kube {
namespace {

// on_modify: updates with the new version only, over the watch and on resync.
TEST_F(InformerTest, ModifyHandlersGetTheNewVersionOfUpdatesAndResyncs) {
  InformerOptions options = FastOptions();
  options.resync_period = std::chrono::seconds(1);
  Informer informer(client_, Resource::Pods(), options);
  std::mutex mu;
  std::vector<int64_t> modified;   // resourceVersions delivered
  EventHandlers handlers;
  handlers.on_modify = [&](const Json& object) {
    std::lock_guard<std::mutex> lock(mu);
    modified.push_back(Rv(object));
  };
  informer.AddHandlers(std::move(handlers));
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(milliseconds(10000)));
  CreatePod(Pod("m"));
  const Json updated = Annotate("m", "1");
  auto count_of = [&](int64_t rv) {
    std::lock_guard<std::mutex> lock(mu);
    return std::count(modified.begin(), modified.end(), rv);
  };
  // The update, then at least one resync of the same version.
  ASSERT_TRUE(Eventually([&] { return count_of(Rv(updated)) >= 2; }));
  EXPECT_EQ(informer.handler_errors(), 0);
}

}  // namespace
}  // namespace fleet::kube
