// Training progress: a sidecar's /status read defensively, the summary in status.progress
// (median step, speed, ETA, the straggler), the planner's bound on how often it is written, and
// the collector's bounded HTTP reads of real servers.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <prometheus/registry.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "builders.h"
#include "fleet/base/time.h"
#include "fleet/httpd/http_server.h"
#include "fleet/operator/metrics.h"
#include "fleet/operator/planner.h"
#include "fleet/operator/progress.h"
#include "fleet/operator/progress_collector.h"

namespace fleet::op {
namespace {

using testing::JobBuilder;

// status.progress as written (null: no summary), to check its keys as the CRD spells them.
Json Summary(const ProgressInput& in) {
  const auto progress = SummarizeProgress(in);
  return progress ? progress->ToJson() : Json();
}
std::optional<Json> LatestJson(const ProgressCollector& collector, const std::string& key, int run) {
  const auto progress = collector.Latest(key, run);
  return progress ? std::optional<Json>(progress->ToJson()) : std::nullopt;
}

RankReport Rank(const std::string& role, int rank, double steps) {
  RankReport r;
  r.role = role;
  r.pod = "j-" + role + "-" + std::to_string(rank);
  r.rank = rank;
  r.steps = steps;
  return r;
}

TEST(SidecarStatusTest, ReadsTheRanksASidecarReports) {
  const std::string body = R"({"ready": true, "stalled": [1], "ranks": [
      {"rank": 0, "step": 120, "steps": 120, "idleSeconds": 0.4, "totalSteps": 1000, "loss": 0.5,
       "samplesPerSecond": 256, "stepSeconds": 0.25},
      {"rank": 1, "step": 7, "steps": 80, "idleSeconds": 700}]})";
  auto ranks = ParseSidecarStatus(body, "worker", "j-worker-0");
  ASSERT_TRUE(ranks.ok()) << ranks.error();
  ASSERT_EQ(ranks->size(), 2u);
  EXPECT_EQ((*ranks)[0].pod, "j-worker-0");
  EXPECT_EQ((*ranks)[0].steps, 120);
  EXPECT_EQ((*ranks)[0].total_steps, 1000);
  EXPECT_EQ((*ranks)[0].loss, 0.5);
  EXPECT_EQ((*ranks)[0].samples_per_second, 256);
  EXPECT_EQ((*ranks)[0].step_seconds, 0.25);
  EXPECT_FALSE((*ranks)[0].stalled);
  EXPECT_EQ((*ranks)[0].steps, 120);
  EXPECT_EQ((*ranks)[1].steps, 80) << "steps trained, not the epoch's batch number";
  // A run resumed from a checkpoint logs "step 5001/10000": with a total, the logged number counts.
  auto resumed = ParseSidecarStatus(R"({"ranks": [{"rank": 0, "step": 5001, "steps": 1, "totalSteps": 10000}]})",
                                    "worker", "p");
  ASSERT_TRUE(resumed.ok()) << resumed.error();
  EXPECT_EQ((*resumed)[0].steps, 5001);
  EXPECT_TRUE((*ranks)[1].stalled);
  EXPECT_FALSE((*ranks)[1].loss.has_value());
}

TEST(SidecarStatusTest, MalformedAnswersAreErrorsNotCrashes) {
  for (const std::string body :
       {"", "not json", "[]", "{}", R"({"ranks": 3})", R"({"ranks": [3]})", R"({"ranks": [{"rank": 0}]})",
        R"({"ranks": [{"rank": "0", "steps": 1}]})", R"({"ranks": [{"rank": -1, "steps": 1}]})",
        R"({"ranks": [{"rank": 1e300, "steps": 1}]})", R"({"ranks": [{"rank": 0, "steps": -5}]})"}) {
    EXPECT_FALSE(ParseSidecarStatus(body, "worker", "p").ok()) << body;
  }
  // Odd optional fields are left out, not trusted.
  auto ranks = ParseSidecarStatus(R"({"stalled": ["x", 0.5], "ranks": [{"rank": 0, "steps": 3,
      "totalSteps": -1, "loss": "low", "idleSeconds": -4}]})", "worker", "p");
  ASSERT_TRUE(ranks.ok()) << ranks.error();
  EXPECT_FALSE((*ranks)[0].total_steps.has_value());
  EXPECT_FALSE((*ranks)[0].loss.has_value());
  EXPECT_EQ((*ranks)[0].idle_seconds, 0);
}

// Each number of a report that the summary converts or combines, past its range: a trainer line
// "step 9223372036854775807/1000" gave status.progress.step = INT64_MIN (UB converting to int64).
TEST(SidecarStatusTest, NumbersOutOfRangeAreLeftOutAndCannotOverflowTheSummary) {
  auto ranks = ParseSidecarStatus(R"({"ranks": [
      {"rank": 0, "step": 9223372036854775807, "steps": 5, "totalSteps": 1000, "idleSeconds": 1e300,
       "stepSeconds": 1e-320, "samplesPerSecond": -7},
      {"rank": 1, "step": 3, "steps": 3, "totalSteps": 1e300, "stepSeconds": -2, "samplesPerSecond": 1e300}]})",
                                  "worker", "p");
  ASSERT_TRUE(ranks.ok()) << ranks.error();
  EXPECT_EQ((*ranks)[0].steps, 5) << "the logged step is out of range: the sidecar's count stands";
  EXPECT_EQ((*ranks)[0].idle_seconds, 0);
  EXPECT_FALSE((*ranks)[0].step_seconds.has_value()) << "a step shorter than a microsecond";
  EXPECT_FALSE((*ranks)[0].samples_per_second.has_value());
  EXPECT_FALSE((*ranks)[1].total_steps.has_value());
  EXPECT_FALSE((*ranks)[1].step_seconds.has_value());
  EXPECT_FALSE((*ranks)[1].samples_per_second.has_value());
  EXPECT_FALSE(ParseSidecarStatus(R"({"ranks": [{"rank": 0, "steps": 1e19}]})", "worker", "p").ok())
      << "a count past 2^53 is no count";

  ProgressInput in;
  in.ranks = *ranks;
  const Json p = Summary(in);
  EXPECT_EQ(p["step"], 3);
  EXPECT_EQ(p["roles"]["worker"]["maxStep"], 5);
  EXPECT_EQ(p["totalSteps"], 1000);
  EXPECT_GE(p["percent"].get<double>(), 0);
  EXPECT_LE(p["percent"].get<double>(), 100);
  EXPECT_FALSE(p.contains("samplesPerSecond"));
  for (const Json& d : p["rankDetails"]) EXPECT_GE(d["idleSeconds"].get<int64_t>(), 0);
}

TEST(ProgressSummaryTest, SpeedsAndTheTimeLeftStayInRange) {
  ProgressInput in;
  in.total_steps = int64_t{1} << 50;   // spec.totalSteps' maximum
  in.ranks = {Rank("worker", 0, 2), Rank("worker", 1, 1)};
  in.ranks[0].step_seconds = 1e-6;
  in.ranks[1].step_seconds = 100;
  const std::vector<RankReport> before = {Rank("worker", 0, 0)};
  in.previous = &before;
  in.seconds_since_previous = 1e-300;   // two collections a denormal apart
  const Json p = Summary(in);
  ASSERT_TRUE(p["stepsPerSecond"].is_number()) << p.dump();
  EXPECT_LE(p["stepsPerSecond"].get<double>(), kMaxStepsPerSecond);
  for (const Json& d : p["rankDetails"]) EXPECT_LE(d["stepsPerSecond"].get<double>(), kMaxStepsPerSecond) << d.dump();
  ASSERT_TRUE(p["etaSeconds"].is_number_integer()) << p.dump();
  EXPECT_GT(p["etaSeconds"].get<int64_t>(), 0);
  EXPECT_LE(p["etaSeconds"].get<int64_t>(), static_cast<int64_t>(kMaxProgressSeconds));
}

// A denormal loss made NaN (null in the status), never equal to itself: a status write at every
// interval for a loss that did not change.
TEST(ProgressSummaryTest, ALossIsTheSameSummaryWhateverItsMagnitude) {
  for (double loss : {4.9e-324, 1e-310, 2.2e-308, 1e-5, 0.123456, 1.7e308, -3.0}) {
    ProgressInput in;
    in.ranks = {Rank("worker", 0, 10)};
    in.ranks[0].loss = loss;
    const Json p = Summary(in);
    EXPECT_EQ(p, Summary(in)) << loss;
    EXPECT_TRUE(p["loss"].is_number()) << loss << ": " << p["loss"];
  }
}

TEST(ProgressSummaryTest, NothingReportedIsNoProgress) {
  EXPECT_TRUE(Summary({}).is_null());
}

TEST(ProgressSummaryTest, TheJobsStepIsTheMedianRanksAndTheStragglerIsNamed) {
  ProgressInput in;
  in.ranks = {Rank("worker", 0, 100), Rank("worker", 1, 102), Rank("worker", 2, 40), Rank("worker", 3, 101)};
  in.ranks[0].loss = 0.70000123456;
  in.ranks[3].loss = 0.9;
  in.expected_ranks = {{"worker", 4}};
  const Json p = Summary(in);
  EXPECT_EQ(p["step"], 100) << "the lower median of 40, 100, 101, 102";
  EXPECT_EQ(p["stepText"], "100");
  EXPECT_EQ(p["ranks"], 4);
  EXPECT_EQ(p["reportingRanks"], 4);
  EXPECT_EQ(p["loss"], 0.7) << "rank 0's loss, to 4 significant digits";
  EXPECT_EQ(p["roles"]["worker"]["minStep"], 40);
  EXPECT_EQ(p["roles"]["worker"]["maxStep"], 102);
  EXPECT_EQ(p["slowest"]["rank"], 2);
  EXPECT_EQ(p["slowest"]["pod"], "j-worker-2");
  EXPECT_EQ(p["slowest"]["lag"], 60);
  EXPECT_EQ(p["slowestText"], "worker-2 (-60)");
  ASSERT_EQ(p["rankDetails"].size(), 4u);
  EXPECT_EQ(p["rankDetails"][0]["rank"], 2) << "the straggler first";
  EXPECT_FALSE(p.contains("etaSeconds")) << "no total, no ETA";
  EXPECT_FALSE(p.contains("stepsPerSecond")) << "no speed from one collection without step times";
}

TEST(ProgressSummaryTest, SpeedComesFromTwoCollectionsAndGivesTheEtaOfAKnownTotal) {
  std::vector<RankReport> before = {Rank("worker", 0, 100), Rank("worker", 1, 100)};
  ProgressInput in;
  in.ranks = {Rank("worker", 0, 150), Rank("worker", 1, 150)};
  in.previous = &before;
  in.seconds_since_previous = 10;   // 5 steps/s
  in.total_steps = 1150;            // spec.totalSteps: 1000 to go at 5/s
  const Json p = Summary(in);
  EXPECT_EQ(p["stepsPerSecond"], 5);
  EXPECT_EQ(p["speedText"], "5.00 step/s");
  EXPECT_EQ(p["totalSteps"], 1150);
  EXPECT_EQ(p["etaSeconds"], 200);
  EXPECT_EQ(p["etaText"], "3m20s");
  EXPECT_EQ(p["stepText"], "150/1150 (13%)");
  EXPECT_NEAR(p["percent"].get<double>(), 13.0, 0.05);
}

TEST(ProgressSummaryTest, ALoggedTotalIsUsedWhenTheSpecHasNone) {
  ProgressInput in;
  in.ranks = {Rank("worker", 0, 250)};
  in.ranks[0].total_steps = 1000;
  in.ranks[0].step_seconds = 0.5;   // no earlier collection: the latest step's duration
  const Json p = Summary(in);
  EXPECT_EQ(p["totalSteps"], 1000);
  EXPECT_EQ(p["stepsPerSecond"], 2);
  EXPECT_EQ(p["etaSeconds"], 375);
  EXPECT_EQ(p["percent"], 25);
}

TEST(ProgressSummaryTest, HeterStagesAreSummarizedApartFromTheWorkers) {
  ProgressInput in;
  in.ranks = {Rank("worker", 0, 10), Rank("worker", 1, 12), Rank("gpu", 0, 500), Rank("gpu", 1, 400),
              Rank("gpu", 2, 510)};
  in.expected_ranks = {{"worker", 2}, {"gpu", 4}};
  const Json p = Summary(in);
  EXPECT_EQ(p["step"], 10) << "the workers' (lower) median, not the heter stage's";
  EXPECT_EQ(p["roles"]["gpu"]["ranks"], 4);
  EXPECT_EQ(p["roles"]["gpu"]["reportingRanks"], 3);
  EXPECT_EQ(p["roles"]["gpu"]["medianStep"], 500);
  EXPECT_EQ(p["ranks"], 6);
  EXPECT_EQ(p["slowest"]["role"], "gpu") << "100 steps behind its own stage";
  EXPECT_EQ(p["slowest"]["lag"], 100);
}

TEST(ProgressSummaryTest, AThousandRanksKeepTheTwentySlowest) {
  ProgressInput in;
  for (int r = 0; r < 1000; ++r) in.ranks.push_back(Rank("worker", r, 5000 - (r % 97 == 0 ? 300 : 0) + r % 3));
  in.ranks[777].stalled = true;
  in.ranks[777].steps = 10;
  const Json p = Summary(in);
  ASSERT_EQ(p["rankDetails"].size(), kProgressRankDetails);
  EXPECT_EQ(p["rankDetails"][0]["rank"], 777);
  EXPECT_EQ(p["rankDetails"][0]["stalled"], true);
  EXPECT_EQ(p["stalledRanks"], 1);
  for (size_t i = 1; i < kProgressRankDetails; ++i) {
    EXPECT_GE(p["rankDetails"][i - 1]["lag"].get<int64_t>(), p["rankDetails"][i]["lag"].get<int64_t>());
  }
  EXPECT_LT(p.dump().size(), 8u * 1024) << "status.progress stays small at any scale";
}

// ---- the planner: status.progress at most once per interval ----

class ProgressPlanTest : public ::testing::Test {
 protected:
  Json job_ = JobBuilder("j").Collective(2).Obj();
  Time now_ = std::chrono::system_clock::now();
  OperatorSettings settings_;

  ReconcilePlan Plan(const FleetJobStatus& status, const std::optional<Json>& progress) {
    Observed observed;
    if (progress) observed.progress = Progress::FromJson(*progress);
    return PlanReconcile(ReadFleetJob(job_), status, observed, now_, settings_);
  }
  FleetJobStatus Written(const Json& progress, Time at) {
    FleetJobStatus status;
    status.progress = Progress::FromJson(progress);
    status.progress->update_time = at;
    return status;
  }
};

TEST_F(ProgressPlanTest, TheFirstSummaryIsWrittenWithItsTime) {
  const ReconcilePlan plan = Plan({}, Json{{"step", 10}});
  ASSERT_TRUE(plan.status.progress.has_value());
  EXPECT_EQ(plan.status.progress->ToJson()["step"], 10);
  EXPECT_EQ(plan.status.progress->ToJson()["updateTime"], FormatRfc3339(now_, TimePrecision::kMillis));
}

TEST_F(ProgressPlanTest, ANewerSummaryWaitsForTheIntervalAndIsRequeuedForIt) {
  settings_.progress_interval = std::chrono::seconds(10);
  const FleetJobStatus status = Written(Json{{"step", 10}}, now_ - std::chrono::seconds(4));
  const ReconcilePlan early = Plan(status, Json{{"step", 30}});
  EXPECT_EQ(early.status.progress->ToJson()["step"], 10) << "written 4 s ago: not again yet";
  ASSERT_TRUE(early.requeue_after.has_value());
  EXPECT_EQ(*early.requeue_after, std::chrono::seconds(6));

  const ReconcilePlan due = Plan(Written(Json{{"step", 10}}, now_ - std::chrono::seconds(12)), Json{{"step", 30}});
  EXPECT_EQ(due.status.progress->ToJson()["step"], 30);
}

TEST_F(ProgressPlanTest, AnUnchangedSummaryIsNotRewritten) {
  const FleetJobStatus status = Written(Json{{"step", 10}}, now_ - std::chrono::hours(1));
  const ReconcilePlan plan = Plan(status, Json{{"step", 10}});
  EXPECT_EQ(plan.status.progress, status.progress) << "no write for the time alone";
}

TEST_F(ProgressPlanTest, WithoutASummaryTheLastOneStays) {
  const FleetJobStatus status = Written(Json{{"step", 10}}, now_ - std::chrono::hours(1));
  EXPECT_EQ(Plan(status, std::nullopt).status.progress, status.progress);
}

// ---- the collector's HTTP reads ----

ProgressJob::Pod LoopbackPod(int port) { return {"p", "worker", "127.0.0.1", port}; }

// A sidecar stand-in: GET /status answers `body()`. (A short request timeout: CivetWeb's stop
// waits that long for its idle threads.)
std::unique_ptr<httpd::HttpServer> StatusServer(std::function<std::string()> body) {
  httpd::HttpServerOptions options;
  options.request_timeout_ms = 100;
  auto server = httpd::HttpServer::Start(
      "127.0.0.1:0", {{"/status", {}, [body](const httpd::Request&) { return httpd::Response{200, "application/json", body()}; }}},
      options);
  EXPECT_TRUE(server.ok()) << server.error();
  return server.ok() ? std::move(*server) : nullptr;
}

TEST(FetchSidecarStatusesTest, ReadsEveryPodsAnswerInOrder) {
  std::vector<std::unique_ptr<httpd::HttpServer>> servers;
  std::vector<ProgressJob::Pod> pods;
  for (int i = 0; i < 5; ++i) {
    servers.push_back(StatusServer([i] { return "{\"n\": " + std::to_string(i) + "}"; }));
    ASSERT_TRUE(servers.back());
    pods.push_back(LoopbackPod(servers.back()->port()));
  }
  ProgressCollectorOptions options;
  options.concurrency = 2;
  const auto bodies = FetchSidecarStatuses(pods, options);
  ASSERT_EQ(bodies.size(), 5u);
  for (int i = 0; i < 5; ++i) {
    ASSERT_TRUE(bodies[i].has_value()) << i;
    EXPECT_EQ(*bodies[i], "{\"n\": " + std::to_string(i) + "}");
  }
  // Stopping a server takes CivetWeb about 2 s: stop them together.
  std::vector<std::thread> stops;
  for (auto& server : servers) stops.emplace_back([s = std::move(server)]() mutable { s.reset(); });
  for (std::thread& t : stops) t.join();
}

TEST(FetchSidecarStatusesTest, RefusedOversizedAndSilentPeersFailWithinTheTimeout) {
  auto big = StatusServer([] { return std::string(1 << 20, 'x'); });
  ASSERT_TRUE(big);
  // A peer that accepts connections and never answers.
  const int silent = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(silent, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(silent, 8), 0);
  socklen_t len = sizeof addr;
  ::getsockname(silent, reinterpret_cast<sockaddr*>(&addr), &len);
  const int silent_port = ntohs(addr.sin_port);
  // A port nothing listens on.
  const int closed = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in closed_addr{};
  closed_addr.sin_family = AF_INET;
  closed_addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(closed, reinterpret_cast<sockaddr*>(&closed_addr), sizeof closed_addr);
  len = sizeof closed_addr;
  ::getsockname(closed, reinterpret_cast<sockaddr*>(&closed_addr), &len);
  const int closed_port = ntohs(closed_addr.sin_port);
  ::close(closed);

  ProgressCollectorOptions options;
  options.timeout = std::chrono::milliseconds(300);
  const auto start = std::chrono::steady_clock::now();
  const auto bodies = FetchSidecarStatuses(
      {LoopbackPod(big->port()), LoopbackPod(silent_port), LoopbackPod(closed_port), {"p", "worker", "not-an-ip", 1}},
      options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ::close(silent);
  ASSERT_EQ(bodies.size(), 4u);
  for (size_t i = 0; i < bodies.size(); ++i) EXPECT_FALSE(bodies[i].has_value()) << i << ": " << bodies[i]->size();
  EXPECT_LT(seconds, 3) << "the silent peer is cut off at the timeout";
}

TEST(ProgressCollectorTest, TellsWhichJobsChangedAndKeepsOneSummaryPerRun) {
  int steps = 10;
  auto server = StatusServer([&steps] { return R"({"ranks": [{"rank": 0, "steps": )" + std::to_string(steps) + "}]}"; });
  ASSERT_TRUE(server);
  const int port = server->port();
  std::vector<std::string> changed;
  ProgressCollector collector({}, [&] {
    return std::vector<ProgressJob>{{"ns/j", 2, {{"worker", 1}}, 0, {LoopbackPod(port)}}};
  }, [&](const std::string& key) { changed.push_back(key); });
  collector.CollectOnce();
  EXPECT_THAT(changed, ::testing::ElementsAre("ns/j"));
  ASSERT_TRUE(LatestJson(collector, "ns/j", 2).has_value());
  EXPECT_EQ((*LatestJson(collector, "ns/j", 2))["step"], 10);
  EXPECT_FALSE(LatestJson(collector, "ns/j", 1).has_value()) << "another run's pods";
  EXPECT_FALSE(LatestJson(collector, "ns/other", 2).has_value());
  collector.CollectOnce();
  EXPECT_EQ(changed.size(), 2u) << "a speed appeared (0 steps/s)";
  collector.CollectOnce();
  EXPECT_EQ(changed.size(), 2u) << "nothing new: no change";
  steps = 20;
  collector.CollectOnce();
  EXPECT_EQ(changed.size(), 3u);
  EXPECT_EQ(collector.stats().requests, 4u);
  EXPECT_EQ(collector.stats().failures, 0u);
}

// The job's author chooses the sidecar image: its /status may claim ranks that are not its pod's.
// A job keeps only each pod's own ranks, whatever the answers claim (200 pods x 10,159 forged
// ranks took the operator from 19 MB to 1.16 GiB).
std::string ForgedRanks(int count, const std::function<int(int rank)>& steps) {
  Json ranks = Json::array();
  for (int r = 0; r < count; ++r) ranks.push_back({{"rank", r}, {"steps", steps(r)}});
  return Json{{"ranks", ranks}}.dump();
}

// 2 pods of 2 ranks each (ranks 0-1, 2-3), both served by the sidecar at `port`.
ProgressJob TwoPodsOfTwoRanks(int port) {
  ProgressJob job{"ns/j", 1, {{"worker", 4}}, 0, {}};
  for (int pod = 0; pod < 2; ++pod) {
    ProgressJob::Pod p = LoopbackPod(port);
    p.name = "j-worker-" + std::to_string(pod);
    p.first_rank = 2 * pod;
    p.ranks = 2;
    job.pods.push_back(p);
  }
  return job;
}

TEST(ProgressCollectorTest, APodKeepsOnlyTheRanksItRuns) {
  const std::string body = ForgedRanks(1000, [](int rank) { return 100 + rank; });
  auto server = StatusServer([&body] { return body; });
  ASSERT_TRUE(server);
  std::vector<std::string> logged;
  ProgressCollectorOptions options;
  options.log = Logger("", [&](const std::string& line) { logged.push_back(line); });
  const ProgressJob job = TwoPodsOfTwoRanks(server->port());
  ProgressCollector collector(options, [&] { return std::vector<ProgressJob>{job}; }, [](const std::string&) {});
  collector.CollectOnce();
  collector.CollectOnce();
  const auto p = LatestJson(collector, "ns/j", 1);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ((*p)["reportingRanks"], 4);
  EXPECT_EQ((*p)["ranks"], 4);
  EXPECT_EQ((*p)["roles"]["worker"]["maxStep"], 103) << "ranks 0-3 only";
  EXPECT_EQ((*p)["rankDetails"].size(), 4u);
  for (const Json& d : (*p)["rankDetails"]) {
    EXPECT_EQ(d["pod"], d["rank"].get<int>() < 2 ? "j-worker-0" : "j-worker-1") << d.dump();
  }
  EXPECT_EQ(collector.stats().dropped_ranks, 2u * 2 * 998);
  ASSERT_EQ(logged.size(), 1u) << "one line while it lasts, not one per report or collection";
  EXPECT_THAT(logged[0], ::testing::HasSubstr("fleetjob=ns/j dropped=1996 kept=4"));
}

// The operator's metrics count the dropped reports, as the controller hooks them to the collector.
TEST(ProgressCollectorTest, DroppedRanksAreCountedInTheOperatorsMetrics) {
  const std::string body = ForgedRanks(10, [](int) { return 1; });
  auto server = StatusServer([&body] { return body; });
  ASSERT_TRUE(server);
  prometheus::Registry registry;
  ControllerMetrics metrics(registry);
  ProgressCollectorOptions options;
  options.log = Logger("", [](const std::string&) {});
  const ProgressJob job = TwoPodsOfTwoRanks(server->port());
  ProgressCollector collector(options, [&] { return std::vector<ProgressJob>{job}; }, [](const std::string&) {},
                              metrics.ProgressHook());
  const auto dropped = [&registry] {
    for (const prometheus::MetricFamily& family : registry.Collect()) {
      if (family.name == "fleet_operator_progress_dropped_ranks_total") return family.metric.at(0).counter.value;
    }
    return -1.0;
  };
  collector.CollectOnce();
  EXPECT_EQ(dropped(), 2 * 8) << "each pod keeps 2 of the 10 ranks it claims";
  collector.CollectOnce();
  EXPECT_EQ(dropped(), 2 * 2 * 8);
}

// Without knowing a pod's ranks, its role's ranks still bound what the job keeps, and no rank is
// kept twice.
TEST(ProgressCollectorTest, AJobKeepsNoMoreRanksThanItHasWhateverItsPodsClaim) {
  const std::string body = ForgedRanks(10159, [](int) { return 1; });   // just under 256 KiB
  ASSERT_LT(body.size(), ProgressCollectorOptions{}.max_body);
  auto server = StatusServer([&body] { return body; });
  ASSERT_TRUE(server);
  ProgressCollectorOptions options;
  options.timeout = std::chrono::seconds(60);
  options.log = Logger("", [](const std::string&) {});
  ProgressJob job{"ns/j", 1, {{"worker", 20}}, 0, {}};
  for (int pod = 0; pod < 20; ++pod) {
    ProgressJob::Pod p = LoopbackPod(server->port());
    p.name = "j-worker-" + std::to_string(pod);
    job.pods.push_back(p);
  }
  ProgressCollector collector(options, [&] { return std::vector<ProgressJob>{job}; }, [](const std::string&) {});
  collector.CollectOnce();
  const auto p = LatestJson(collector, "ns/j", 1);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ((*p)["reportingRanks"], 20);
  EXPECT_EQ((*p)["ranks"], 20);
  EXPECT_EQ((*p)["roles"]["worker"]["maxStep"], 1);
  EXPECT_EQ(collector.stats().dropped_ranks, (collector.stats().requests - collector.stats().failures) * 10159 - 20);
}

// A peer that accepts connections and never answers, until it is closed (which resets them).
class SilentPeer {
 public:
  SilentPeer() : fd_(::socket(AF_INET, SOCK_STREAM, 0)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    EXPECT_EQ(::listen(fd_, 64), 0);
    socklen_t len = sizeof addr;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~SilentPeer() { Close(); }
  void Close() {
    if (fd_ >= 0) ::close(std::exchange(fd_, -1));
  }
  int port() const { return port_; }

 private:
  int fd_;
  int port_ = 0;
};

// One job's hung pods (listed first, more of them than requests in flight) do not hold back another
// job's progress: it is asked in turn and summarized as soon as its own pod has answered.
TEST(ProgressCollectorTest, OneJobsHungPodsDoNotDelayAnotherJobsProgress) {
  auto server = StatusServer([] { return std::string(R"({"ranks": [{"rank": 0, "steps": 7}]})"); });
  ASSERT_TRUE(server);
  SilentPeer silent;
  ProgressJob hung{"ns/hung", 1, {{"worker", 8}}, 0, {}};
  for (int pod = 0; pod < 8; ++pod) {
    ProgressJob::Pod p = LoopbackPod(silent.port());
    p.name = "hung-worker-" + std::to_string(pod);
    hung.pods.push_back(p);
  }
  const ProgressJob healthy{"ns/healthy", 1, {{"worker", 1}}, 0, {LoopbackPod(server->port())}};
  ProgressCollectorOptions options;
  options.concurrency = 2;
  options.timeout = std::chrono::minutes(5);   // only closing the peer ends the hung requests
  std::promise<void> healthy_changed;
  ProgressCollector collector(options, [&] { return std::vector<ProgressJob>{hung, healthy}; },
                              [&](const std::string& key) {
                                if (key == "ns/healthy") healthy_changed.set_value();
                              });
  std::thread collection([&] { collector.CollectOnce(); });
  const auto ready = healthy_changed.get_future().wait_for(std::chrono::seconds(60));
  silent.Close();
  collection.join();
  ASSERT_EQ(ready, std::future_status::ready) << "the healthy job waited for the hung one";
  EXPECT_EQ((*LatestJson(collector, "ns/healthy", 1))["step"], 7);
}

}  // namespace
}  // namespace fleet::op
