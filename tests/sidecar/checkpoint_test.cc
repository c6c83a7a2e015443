// Checkpoint before stop, in-process: the request file the trainer sees, its done file read
// (a step, nothing within the timeout, a malformed one), a second request joining a pending one,
// and the step's spelling in the pod condition that the operator reads back.
#include "fleet/sidecar/checkpoint.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <atomic>
#include <cstdio>
#include <fstream>
#include <future>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "fake_apiserver_fixture.h"
#include "fleet/api/checkpoint.h"
#include "fleet/base/time.h"
#include "sidecar_process.h"
#include "../httpd/thread_stack.h"

namespace fleet::sidecar {
namespace {

using Json = nlohmann::json;
using kube::testing::TempDir;
using std::chrono::milliseconds;
using testing::Eventually;

bool Exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The trainer's side: once the request appears, writes `done` as given (through a rename).
std::thread Trainer(const std::string& dir, std::string done) {
  return std::thread([dir, done] {
    if (!Eventually([&] { return Exists(dir + "/request"); })) return;
    { std::ofstream(dir + "/done.tmp") << done; }
    std::rename((dir + "/done.tmp").c_str(), (dir + "/done").c_str());
  });
}

class CheckpointerTest : public ::testing::Test {
 protected:
  Checkpointer Make(milliseconds timeout) {
    return Checkpointer({dir_, timeout, milliseconds(10)}, Logger("test", [this](const std::string& line) {
                          std::lock_guard<std::mutex> lock(mu_);
                          log_ += line + "\n";
                        }),
                        [this](const CheckpointOutcome& outcome) {
                          std::lock_guard<std::mutex> lock(mu_);
                          recorded_.push_back(outcome);
                        });
  }
  TempDir temp_;
  const std::string dir_ = temp_.path() + "/checkpoint";   // made by the first request
  std::mutex mu_;
  std::string log_;
  std::vector<CheckpointOutcome> recorded_;
};

TEST_F(CheckpointerTest, TheTrainerSeesTheRequestAndItsStepIsRecorded) {
  Checkpointer checkpointer = Make(std::chrono::seconds(30));
  std::thread trainer([&] {
    ASSERT_TRUE(Eventually([&] { return Exists(dir_ + "/request"); }));
    const Json request = Json::parse(Read(dir_ + "/request"));
    EXPECT_EQ(request["reason"], "preStop");
    EXPECT_EQ(request["timeoutSeconds"], 30);
    const auto deadline = ParseRfc3339(request["deadline"].get<std::string>());
    ASSERT_TRUE(deadline);
    EXPECT_GT(*deadline, std::chrono::system_clock::now());
    EXPECT_FALSE(Exists(dir_ + "/request.tmp"));   // written through a rename
    { std::ofstream(dir_ + "/done.tmp") << "1200\n"; }
    std::rename((dir_ + "/done.tmp").c_str(), (dir_ + "/done").c_str());
  });
  const CheckpointOutcome outcome = checkpointer.Request("preStop").value();
  trainer.join();
  EXPECT_EQ(outcome.result, api::kCheckpointSaved);
  EXPECT_EQ(outcome.step, 1200);
  EXPECT_EQ(api::CheckpointStepOf(outcome.message), 1200) << outcome.message;
  ASSERT_EQ(recorded_.size(), 1u);
  EXPECT_EQ(recorded_[0].step, 1200);
  ASSERT_TRUE(checkpointer.last());
  EXPECT_EQ(checkpointer.last()->step, 1200);
  EXPECT_FALSE(Exists(dir_ + "/request"));   // answered
  // The trainer (another user) may write there.
  struct stat st {};
  ASSERT_EQ(::stat(dir_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0777u);
}

TEST_F(CheckpointerTest, NoDoneFileWithinTheTimeoutIsTimedOut) {
  Checkpointer checkpointer = Make(milliseconds(200));
  const CheckpointOutcome outcome = checkpointer.Request("request").value();
  EXPECT_EQ(outcome.result, api::kCheckpointTimedOut);
  EXPECT_FALSE(outcome.step);
  EXPECT_NE(outcome.message.find("no " + dir_ + "/done within 0s"), std::string::npos) << outcome.message;
  EXPECT_NE(log_.find("checkpoint TimedOut"), std::string::npos) << log_;
  ASSERT_EQ(recorded_.size(), 1u);
}

TEST_F(CheckpointerTest, AnEarlierRequestsDoneFileIsNotThisOnesAnswer) {
  ASSERT_EQ(::mkdir(dir_.c_str(), 0777), 0);
  { std::ofstream(dir_ + "/done") << "5"; }
  Checkpointer checkpointer = Make(milliseconds(200));
  EXPECT_EQ(checkpointer.Request("request").value().result, api::kCheckpointTimedOut);
}

TEST_F(CheckpointerTest, AMalformedDoneFileIsInvalidNeverACrash) {
  for (const std::string& done : std::vector<std::string>{"twelve", "-5", "1.5", "12 13", "99999999999999999999", "9007199254740993",
                                 std::string(100, '7'), std::string("12\0", 3)}) {
    SCOPED_TRACE(Json(done).dump(-1, ' ', false, Json::error_handler_t::replace));
    Checkpointer checkpointer = Make(std::chrono::seconds(30));
    std::thread trainer = Trainer(dir_, done);
    const CheckpointOutcome outcome = checkpointer.Request("request").value();
    trainer.join();
    EXPECT_EQ(outcome.result, api::kCheckpointInvalid);
    EXPECT_FALSE(outcome.step);
    EXPECT_NE(outcome.message.find("not a step"), std::string::npos) << outcome.message;
  }
  // The largest step a JSON number holds, with white space around it: a step.
  Checkpointer checkpointer = Make(std::chrono::seconds(30));
  std::thread trainer = Trainer(dir_, " 9007199254740992\n");
  EXPECT_EQ(checkpointer.Request("request").value().step, api::kMaxCheckpointStep);
  trainer.join();
}

TEST_F(CheckpointerTest, ASecondRequestWhileOneIsPendingJoinsIt) {
  Checkpointer checkpointer = Make(std::chrono::seconds(30));
  auto first = std::async(std::launch::async, [&] { return checkpointer.Request("preStop"); });
  ASSERT_TRUE(Eventually([&] { return Exists(dir_ + "/request"); }));
  auto second = std::async(std::launch::async, [&] { return checkpointer.Request("preStop"); });
  // The second waits (nothing to observe but time: the answer decides) until the trainer answers.
  std::thread trainer = Trainer(dir_, "77");
  EXPECT_EQ(first.get().value().step, 77);
  EXPECT_EQ(second.get().value().step, 77);
  trainer.join();
  EXPECT_EQ(recorded_.size(), 1u);   // one request, one condition write
}

// One stop is one checkpoint: a request soon after an answer (another container's hook, a retry,
// anyone on the pod network) gets that answer again and the trainer is not asked twice.
TEST_F(CheckpointerTest, ARequestSoonAfterAnAnswerGetsItAgain) {
  Checkpointer checkpointer = Make(std::chrono::seconds(30));
  std::thread trainer = Trainer(dir_, "300");
  EXPECT_EQ(checkpointer.Request("preStop").value().step, 300);
  trainer.join();
  EXPECT_EQ(checkpointer.Request("preStop").value().step, 300);
  EXPECT_FALSE(Exists(dir_ + "/request")) << "the trainer was asked again";
  EXPECT_EQ(recorded_.size(), 1u);
}

// Each waiting request holds one of the HTTP server's workers: past kMaxJoiners they are refused
// at once, so the kubelet's probes and Prometheus keep theirs.
TEST_F(CheckpointerTest, RequestsBeyondTheJoinersAreRefusedAtOnce) {
  Checkpointer checkpointer = Make(std::chrono::seconds(30));
  httpd::Route route = checkpointer.Route();
  std::vector<std::future<httpd::Response>> waiting;
  waiting.push_back(std::async(std::launch::async, [&] { return route.handler({"GET", "/checkpoint", "", "10.0.0.1", ""}); }));
  ASSERT_TRUE(Eventually([&] { return Exists(dir_ + "/request"); }));
  for (int i = 0; i < Checkpointer::kMaxJoiners; ++i) {
    waiting.push_back(std::async(std::launch::async, [&] { return route.handler({"GET", "/checkpoint", "", "10.0.0.2", ""}); }));
  }
  ASSERT_TRUE(Eventually([&] { return checkpointer.joiners() == Checkpointer::kMaxJoiners; }));
  EXPECT_EQ(route.handler({"GET", "/checkpoint", "", "10.0.0.3", ""}).status, 429);
  std::thread trainer = Trainer(dir_, "8");
  for (auto& answer : waiting) EXPECT_EQ(Json::parse(answer.get().body)["step"], 8);
  trainer.join();
}

TEST_F(CheckpointerTest, TheRouteAnswers200WithTheOutcome) {
  Checkpointer checkpointer = Make(milliseconds(100));
  httpd::Route route = checkpointer.Route();
  EXPECT_EQ(route.path, "/checkpoint");
  const httpd::Response timed_out = route.handler({"GET", "/checkpoint", "reason=eviction", "10.0.0.1", ""});
  EXPECT_EQ(timed_out.status, 200);   // a failed preStop hook would only delay the kill
  EXPECT_EQ(Json::parse(timed_out.body)["result"], "TimedOut");
  EXPECT_NE(log_.find("(eviction)"), std::string::npos) << log_;
  // A reason that is not a word is not taken (asked once the last answer is older than the timeout).
  std::this_thread::sleep_for(milliseconds(150));
  route.handler({"GET", "/checkpoint", "reason=a%20b&x", "10.0.0.1", ""});
  EXPECT_NE(log_.find("(request)"), std::string::npos) << log_;
}

// The record (the agent's: the pod condition, an API request) runs with a full stack, not on the
// HTTP server's worker that took the request: Debian's CivetWeb gives those 100 KiB, which the API
// client's frames overran under ASan, writing over the next worker's memory (http_server.h).
TEST_F(CheckpointerTest, TheRecordRunsWithAFullStackNotOnTheServersWorker) {
  std::atomic<size_t> record_stack{0}, worker_stack{0};
  Checkpointer checkpointer({dir_, std::chrono::seconds(30), milliseconds(10)}, Logger("test"),
                            [&](const CheckpointOutcome&) { record_stack = httpd::testing::ThreadStackSize(); });
  httpd::Route stack = {"/stack", {}, [&](const httpd::Request&) {
                          worker_stack = httpd::testing::ThreadStackSize();
                          return httpd::Response::Text(200, "");
                        }};
  auto server = httpd::HttpServer::Start("127.0.0.1:0", {checkpointer.Route(), stack});
  ASSERT_TRUE(server.ok()) << server.error();
  kube::testing::HttpConnection http("http://127.0.0.1:" + std::to_string((*server)->port()));
  ASSERT_TRUE(http.Send("GET", "/stack"));
  EXPECT_LT(worker_stack.load(), size_t{1} << 20) << "the server's workers no longer have small stacks";
  std::thread trainer = Trainer(dir_, "5");
  auto answer = http.Send("GET", "/checkpoint");
  trainer.join();
  ASSERT_TRUE(answer);
  EXPECT_EQ(Json::parse(answer->body)["step"], 5);
  EXPECT_GE(record_stack.load(), size_t{1} << 20);
}

TEST(CheckpointMessageTest, TheOperatorReadsBackTheStepTheSidecarWrote) {
  EXPECT_EQ(api::CheckpointStepOf(api::CheckpointMessage(42, " in 3s")), 42);
  EXPECT_EQ(api::CheckpointStepOf(api::CheckpointMessage(0, "")), 0);
  EXPECT_FALSE(api::CheckpointStepOf("step x saved"));
  EXPECT_FALSE(api::CheckpointStepOf("step 12x saved"));
  EXPECT_FALSE(api::CheckpointStepOf("step -1 saved"));
  EXPECT_FALSE(api::CheckpointStepOf("the trainer wrote step 5"));
  EXPECT_FALSE(api::CheckpointStepOf("step 9007199254740993 saved"));
}

}  // namespace
}  // namespace fleet::sidecar
