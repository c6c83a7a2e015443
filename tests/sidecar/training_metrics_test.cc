// TrainingMetrics: how records become steps, step times, gauges and restarts; bounds; the
// exposition passes `promtool check metrics`.
#include "fleet/sidecar/training_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "sidecar_process.h"

namespace fleet::sidecar {
namespace {

using testing::MetricValue;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

class TrainingMetricsTest : public ::testing::Test {
 protected:
  TrainingMetricsTest() : metrics_(PodIdentity{"team-a", "mnist", "mnist-worker-1", "worker", 4, 2}) {}

  std::string Page() {
    std::string page;
    metrics_.AppendExposition(&page);
    return page;
  }
  double Value(const std::string& name, int rank) {
    const std::string page = Page();
    const std::string prefix = name + "{";
    const std::string rank_label = "rank=\"" + std::to_string(rank) + "\"";
    size_t at = 0;
    while ((at = page.find(prefix, at)) != std::string::npos) {
      const size_t end = page.find('\n', at);
      const std::string line = page.substr(at, end - at);
      at = end;
      if (line.find(rank_label) == std::string::npos) continue;
      return std::stod(line.substr(line.rfind(' ') + 1));
    }
    return std::nan("");
  }
  ApplyStats Apply(int rank, const std::string& text, bool timed = false, Clock::time_point now = Clock::now()) {
    StepRecord r;
    std::string error;
    EXPECT_EQ(ParseTextReport(text, &r, &error), ParseOutcome::kStep) << error;
    TrainingMetrics::Input input{rank, &r};
    return metrics_.Apply(&input, 1, timed, now);
  }

  TrainingMetrics metrics_;
};

TEST_F(TrainingMetricsTest, StepNumbersCountTheStepsBetweenThem) {
  Apply(4, "step=1 loss=2.5");
  EXPECT_EQ(Value("fleet_training_steps_total", 4), 1);   // the first report counts one
  Apply(4, "step=11 loss=1.5");
  EXPECT_EQ(Value("fleet_training_steps_total", 4), 11);  // a log line every 10 steps
  Apply(4, "step=11 loss=1.25");
  EXPECT_EQ(Value("fleet_training_steps_total", 4), 11);  // the same step again: no step
  EXPECT_EQ(Value("fleet_training_step", 4), 11);
  EXPECT_EQ(Value("fleet_training_loss", 4), 1.25);
  EXPECT_GT(Value("fleet_training_last_step_timestamp_seconds", 4), 1.7e9);
  EXPECT_EQ(Value("fleet_training_restarts_total", 4), 0);

  Apply(4, "step=3");  // back: the trainer started over
  EXPECT_EQ(Value("fleet_training_steps_total", 4), 12);
  EXPECT_EQ(Value("fleet_training_restarts_total", 4), 1);
  Apply(4, "epoch=0 step=5");
  EXPECT_EQ(Value("fleet_training_steps_total", 4), 14);

  Apply(4, "epoch=1 step=2");  // a new epoch counts its batch number
  EXPECT_EQ(Value("fleet_training_steps_total", 4), 16);
  EXPECT_EQ(Value("fleet_training_epoch", 4), 1);
  Apply(4, "epoch=1 step=7");
  EXPECT_EQ(Value("fleet_training_steps_total", 4), 21);
  Apply(4, "loss=0.5");  // no number: one step
  Apply(4, "steps=10");
  EXPECT_EQ(Value("fleet_training_steps_total", 4), 32);
  EXPECT_EQ(Value("fleet_training_restarts_total", 4), 1);

  // A new main process: counted once; the next number is a new start, not another restart.
  metrics_.CountRestart();
  Apply(4, "step=1");
  EXPECT_EQ(Value("fleet_training_restarts_total", 4), 2);
  EXPECT_EQ(Value("fleet_training_steps_total", 4), 33);
}

// A rank's count stops at the bound every count has (the operator refuses an answer past it).
TEST_F(TrainingMetricsTest, ARanksCountStopsAtTheBound) {
  Apply(4, "steps=9007199254740992");
  Apply(4, "steps=9007199254740992");
  Apply(4, "steps=1");
  EXPECT_EQ(Value("fleet_training_steps_total", 4), static_cast<double>(kMaxStepCount));
  ASSERT_EQ(metrics_.Progress().size(), 1u);
  EXPECT_EQ(metrics_.Progress()[0].steps, static_cast<double>(kMaxStepCount));
}

TEST_F(TrainingMetricsTest, StepTimesFromReportsLogTotalsAndTheClock) {
  Apply(4, "step=1 step_time=0.02");
  Apply(4, "step=3 step_time=0.03");
  EXPECT_EQ(Value("fleet_training_step_duration_seconds_count", 4), 3);
  EXPECT_NEAR(Value("fleet_training_step_duration_seconds_sum", 4), 0.02 + 2 * 0.03, 1e-12);

  // Paddle's "total time cost" (seconds since the start): the difference over the steps between.
  StepRecord a, b;
  ASSERT_EQ(ParseStepLine("worker_index: 1, step 1, train_loss: 1.0, total time cost = 0.5, speed: 100", &a),
            ParseOutcome::kStep);
  ASSERT_EQ(ParseStepLine("worker_index: 1, step 11, train_loss: 0.9, total time cost = 1.5, speed: 120", &b),
            ParseOutcome::kStep);
  TrainingMetrics::Input inputs[] = {{5, &a}, {5, &b}};
  metrics_.Apply(inputs, 2, /*timed=*/false);
  EXPECT_EQ(Value("fleet_training_step_duration_seconds_count", 5), 10);
  EXPECT_NEAR(Value("fleet_training_step_duration_seconds_sum", 5), 1.0, 1e-12);
  EXPECT_EQ(Value("fleet_training_samples_per_second", 5), 120);

  // Live reports without times: the clock between two of them, over the steps between.
  const auto t0 = Clock::now();
  Apply(4, "step=10", /*timed=*/true, t0);
  Apply(4, "step=12 samples=64", /*timed=*/true, t0 + milliseconds(500));
  // Step 10 follows an untimed report: its 7 steps have no time; steps 11-12 took 0.25 s each.
  EXPECT_EQ(Value("fleet_training_step_duration_seconds_count", 4), 3 + 2);
  EXPECT_NEAR(Value("fleet_training_step_duration_seconds_sum", 4), 0.08 + 0.5, 1e-9);
  EXPECT_NEAR(Value("fleet_training_samples_per_second", 4), 64 / 0.5, 1e-9);
}

TEST_F(TrainingMetricsTest, RanksScalarsAndTheirBounds) {
  EXPECT_EQ(Apply(3, "step=1").dropped_rank, 1u);   // the pod has ranks 4 and 5
  EXPECT_EQ(Apply(6, "step=1").dropped_rank, 1u);
  EXPECT_EQ(Apply(5, "step=1 acc=0.5").applied, 1u);
  EXPECT_EQ(Value("fleet_training_steps_total", 5), 1);
  EXPECT_TRUE(std::isnan(Value("fleet_training_steps_total", 3)));
  std::string many = "step=2";
  for (size_t i = 0; i < TrainingMetrics::kMaxScalarsPerRank + 3; ++i) many += " s" + std::to_string(i) + "=1";
  StepRecord r;
  std::string error;
  ASSERT_EQ(ParseTextReport(many, &r, &error), ParseOutcome::kStep);  // 16 per record, the rest dropped there
  size_t dropped = 0;
  for (int round = 0; round < 3; ++round) {
    std::string line = "step=" + std::to_string(3 + round);
    for (int i = 0; i < 14; ++i) line += " r" + std::to_string(round) + "_" + std::to_string(i) + "=1";
    dropped += Apply(5, line).dropped_scalars;
  }
  EXPECT_EQ(dropped, 1u + 3 * 14 - TrainingMetrics::kMaxScalarsPerRank);  // acc + 42 names, 32 kept
}

TEST_F(TrainingMetricsTest, ProgressSaysHowLongEachRankHasBeenIdle) {
  EXPECT_TRUE(metrics_.Progress().empty());
  const auto t0 = Clock::now();
  Apply(4, "step=7", false, t0);
  Apply(5, "loss=1", false, t0 + milliseconds(300));
  Apply(5, "loss=2", false, t0 + milliseconds(400));
  const auto progress = metrics_.Progress(t0 + milliseconds(1000));
  ASSERT_EQ(progress.size(), 2u);
  EXPECT_EQ(progress[0].rank, 4);
  EXPECT_EQ(progress[0].step, 7);
  EXPECT_NEAR(progress[0].idle_seconds, 1.0, 1e-9);
  EXPECT_NEAR(progress[1].idle_seconds, 0.6, 1e-9);
}

TEST_F(TrainingMetricsTest, TheExpositionPassesPromtool) {
  Apply(4, "step=1 loss=nan step_time=0.1 samples=32 acc1=0.5 epoch=2");
  Apply(5, "step=3 loss=0.25 samples_per_second=100");
  metrics_.SetMainProcessUp(true);
  metrics_.SetPeers(2, 1);
  metrics_.AddPeerWait(1.5);
  const std::string page = Page();
  EXPECT_EQ(MetricValue(page, "fleet_training_main_process_up"), 1);
  EXPECT_EQ(MetricValue(page, "fleet_training_peers_ready"), 1);
  EXPECT_EQ(MetricValue(page, "fleet_training_peer_wait_seconds_total"), 1.5);
  EXPECT_NE(page.find("fleet_training_scalar{job=\"mnist\",namespace=\"team-a\",pod=\"mnist-worker-1\",role=\"worker\","
                      "rank=\"4\",name=\"acc1\"} 0.5"),
            std::string::npos)
      << page;
  const auto check = testing::PromtoolCheckMetrics(page);
  if (!check) GTEST_SKIP() << "promtool is not installed";
  EXPECT_EQ(check->status, 0) << check->output << "\n" << page;
  EXPECT_EQ(check->output, "") << page;   // no lint warnings either
  metrics_.SetMainProcessUp(std::nullopt);
  EXPECT_TRUE(std::isnan(MetricValue(Page(), "fleet_training_main_process_up")));
}

}  // namespace
}  // namespace fleet::sidecar
