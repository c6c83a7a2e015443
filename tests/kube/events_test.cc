// events.h: core/v1 Events written asynchronously to the fake API server; repeats aggregated into
// one Event (count, lastTimestamp); a full queue drops instead of blocking the caller.
#include "fleet/kube/events.h"

#include <chrono>
#include <regex>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "fake_apiserver_fixture.h"

namespace fleet::kube {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using testing::FakeApiServer;

const char kEventsPath[] = "/api/v1/namespaces/default/events";

class EventRecorderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fake_.ok()) << fake_.error();
    auto client = Client::Create(fake_.Config());
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = *client;
    auto pod = client_->Create(
        Resource::Pods(), "default",
        {{"apiVersion", "v1"},
         {"kind", "Pod"},
         {"metadata", {{"name", "worker-0"}}},
         {"spec", {{"containers", Json::array({{{"name", "main"}, {"image", "busybox"}}})}}}});
    ASSERT_TRUE(pod.ok()) << pod.status().ToString();
    pod_ = *pod;
  }
  std::vector<Json> Events() {
    auto list = client_->List(Resource::Events(), "default");
    EXPECT_TRUE(list.ok()) << list.status().ToString();
    std::vector<Json> out;
    if (list.ok()) {
      for (const Json& item : (*list)["items"]) out.push_back(item);
    }
    return out;
  }

  FakeApiServer fake_{{"--kubelet", "manual"}};
  std::shared_ptr<Client> client_;
  Json pod_;
};

TEST_F(EventRecorderTest, RecordedEventDescribesTheObjectReasonMessageAndSource) {
  EventRecorderOptions options;
  options.component = "fleet-operator";
  EventRecorder recorder(client_, options);
  recorder.Record(pod_, "Normal", "Created", "created pod worker-0");
  recorder.Flush();

  const std::vector<Json> events = Events();
  ASSERT_EQ(events.size(), 1u);
  const Json& e = events[0];
  EXPECT_EQ(e["involvedObject"]["kind"], "Pod");
  EXPECT_EQ(e["involvedObject"]["apiVersion"], "v1");
  EXPECT_EQ(e["involvedObject"]["name"], "worker-0");
  EXPECT_EQ(e["involvedObject"]["namespace"], "default");
  EXPECT_EQ(e["involvedObject"]["uid"], pod_["metadata"]["uid"]);
  EXPECT_EQ(e["reason"], "Created");
  EXPECT_EQ(e["message"], "created pod worker-0");
  EXPECT_EQ(e["type"], "Normal");
  EXPECT_EQ(e["source"]["component"], "fleet-operator");
  EXPECT_EQ(e["count"], 1);
  EXPECT_EQ(e["firstTimestamp"], e["lastTimestamp"]);
  EXPECT_TRUE(std::regex_match(e["firstTimestamp"].get<std::string>(),
                               std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)")));
  EXPECT_TRUE(std::regex_match(e["metadata"]["name"].get<std::string>(), std::regex(R"(worker-0\.[0-9a-f]+)")))
      << e["metadata"]["name"];
  EXPECT_EQ(recorder.dropped(), 0);
}

TEST_F(EventRecorderTest, RepeatsWithinTheWindowIncrementOneEventsCount) {
  EventRecorder recorder(client_);
  for (int i = 0; i < 5; ++i) recorder.Record(pod_, "Warning", "BackOff", "restarting failed container");
  recorder.Record(pod_, "Warning", "BackOff", "a different message");
  recorder.Record(pod_, "Normal", "BackOff", "restarting failed container");   // another type
  recorder.Flush();

  const std::vector<Json> events = Events();
  ASSERT_EQ(events.size(), 3u);
  int aggregated = 0;
  for (const Json& e : events) {
    if (e["type"] == "Warning" && e["message"] == "restarting failed container") {
      aggregated++;
      EXPECT_EQ(e["count"], 5);
      EXPECT_GE(e["lastTimestamp"].get<std::string>(), e["firstTimestamp"].get<std::string>());
    } else {
      EXPECT_EQ(e["count"], 1);
    }
  }
  EXPECT_EQ(aggregated, 1);
  EXPECT_EQ(fake_.RequestsMatching("POST", kEventsPath).size(), 3u);
  EXPECT_EQ(fake_.RequestsMatching("PATCH", kEventsPath).size(), 4u);
}

TEST_F(EventRecorderTest, RepeatsOutsideTheWindowStartANewEvent) {
  EventRecorderOptions options;
  options.aggregation_window = std::chrono::minutes(0);
  EventRecorder recorder(client_, options);
  recorder.Record(pod_, "Normal", "Synced", "ok");
  std::this_thread::sleep_for(milliseconds(2));
  recorder.Record(pod_, "Normal", "Synced", "ok");
  recorder.Flush();
  const std::vector<Json> events = Events();
  ASSERT_EQ(events.size(), 2u);
  EXPECT_NE(events[0]["metadata"]["name"], events[1]["metadata"]["name"]);
}

TEST_F(EventRecorderTest, RepeatOfADeletedEventCreatesItAgain) {
  EventRecorder recorder(client_);
  recorder.Record(pod_, "Normal", "Synced", "ok");
  recorder.Flush();
  std::vector<Json> events = Events();
  ASSERT_EQ(events.size(), 1u);
  ASSERT_TRUE(client_->Delete(Resource::Events(), "default", events[0]["metadata"]["name"]).ok());
  recorder.Record(pod_, "Normal", "Synced", "ok");
  recorder.Flush();
  events = Events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["count"], 1);
}

TEST_F(EventRecorderTest, FullQueueDropsAndCountsInsteadOfBlockingTheCaller) {
  fake_.Control("faults", {{"latencyMs", 150}});   // the writer is stuck on its first request
  EventRecorderOptions options;
  options.max_queue = 3;
  EventRecorder recorder(client_, options);
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < 20; ++i) recorder.Record(pod_, "Normal", "Step", "step " + std::to_string(i));
  EXPECT_LT(Clock::now() - start, milliseconds(100)) << "Record() must never wait for the API";
  const int64_t dropped = recorder.dropped();
  EXPECT_GE(dropped, 20 - 3 - 1);   // at most the queue plus the one being written got through
  fake_.Control("faults", {{"reset", true}});
  recorder.Flush();
  EXPECT_EQ(static_cast<int64_t>(Events().size()), 20 - dropped);
}

TEST_F(EventRecorderTest, DestructionWritesWhatIsStillQueued) {
  {
    EventRecorder recorder(client_);
    for (int i = 0; i < 3; ++i) recorder.Record(pod_, "Normal", "Step", "step " + std::to_string(i));
  }
  EXPECT_EQ(Events().size(), 3u);
}

}  // namespace
}  // namespace fleet::kube
