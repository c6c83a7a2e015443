// Step lines and reports: the Paddle formats of the seed documents and the examples, what is not a
// step, what is malformed; the template parser agrees with the general one; user patterns; the
// push API's text and JSON.
#include "fleet/sidecar/step_parser.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <random>
#include <string>
#include <tuple>
#include <vector>

namespace fleet::sidecar {
namespace {

using Json = nlohmann::json;

// A StepRecord's scalar names are views into the parsed line, so every line parsed here stays alive
// for the whole test program (a deque never moves its elements). Parsing a temporary and reading
// the names afterwards was a heap-use-after-free (ASan).
StepRecord Parse(std::string text, ParseOutcome expected = ParseOutcome::kStep) {
  static std::deque<std::string> lines;
  const std::string& line = lines.emplace_back(std::move(text));
  StepRecord r;
  EXPECT_EQ(ParseStepLine(line, &r), expected) << line;
  return r;
}

double Scalar(const StepRecord& r, const std::string& name) {
  for (size_t i = 0; i < r.scalar_count; ++i) {
    if (r.scalars[i].name == name) return r.scalars[i].value;
  }
  return std::nan("");
}

TEST(StepLineTest, FleetWorkerIndexFormatFromTheSeeds) {
  // 000_f5e7bc87a2e63b2a.txt: "step11" glued, "total time cost =" and "step per second:".
  StepRecord r = Parse("worker_index: 0, step11, train_loss: 7.020836, total time cost = 0.286696, "
                       "step per second: 3.488016, speed: 3.488016");
  EXPECT_TRUE(r.Has(StepRecord::kStep));
  EXPECT_EQ(r.step, 11);
  EXPECT_DOUBLE_EQ(r.loss, 7.020836);
  EXPECT_DOUBLE_EQ(r.total_time, 0.286696);
  EXPECT_DOUBLE_EQ(r.samples_per_second, 3.488016);
  EXPECT_FALSE(r.Has(StepRecord::kEpoch));
  EXPECT_EQ(r.scalar_count, 0u);  // worker_index and step per second are read past

  // The examples' variant (examples/common/fleet_example.py): "step 11".
  r = Parse("worker_index: 1, step 41, train_loss: 0.000112, total time cost = 0.078040, step per second: "
            "525.368, speed: 20509.94");
  EXPECT_EQ(r.step, 41);
  EXPECT_DOUBLE_EQ(r.loss, 0.000112);
  EXPECT_DOUBLE_EQ(r.samples_per_second, 20509.94);

  // 003_620859dbbc322cd8.txt: "step%d cost=%f" and "worker_index: %d, step%d cost = %f".
  r = Parse("step12 cost=0.530000");
  EXPECT_EQ(r.step, 12);
  EXPECT_DOUBLE_EQ(r.loss, 0.53);
  r = Parse("worker_index: 2, step1000 cost = 0.125000");
  EXPECT_EQ(r.step, 1000);
  EXPECT_DOUBLE_EQ(r.loss, 0.125);
  r = Parse("Step: 7, loss: 2.5");
  EXPECT_EQ(r.step, 7);
  r = Parse("2026-01-02 03:04:05 INFO step 9, loss: [0.69314], lr: 0.1");  // a logger's prefix, an array
  EXPECT_EQ(r.step, 9);
  EXPECT_DOUBLE_EQ(r.loss, 0.69314);
  EXPECT_DOUBLE_EQ(Scalar(r, "lr"), 0.1);
}

TEST(StepLineTest, EpochBatchFormatWithScalars) {
  // 001_7564b6c4251e414e.txt (dygraph ResNet).
  StepRecord r = Parse("[Epoch 0, batch 5] loss: 39.06348, acc1: 0.03125, acc5: 0.09375");
  EXPECT_TRUE(r.Has(StepRecord::kEpoch));
  EXPECT_EQ(r.epoch, 0);
  EXPECT_EQ(r.step, 5);
  EXPECT_DOUBLE_EQ(r.loss, 39.06348);
  EXPECT_DOUBLE_EQ(Scalar(r, "acc1"), 0.03125);
  EXPECT_DOUBLE_EQ(Scalar(r, "acc5"), 0.09375);
  r = Parse("    [Epoch 3, batch 120] loss: 4.67622, acc1: 0.00000, acc5: 0.09375");
  EXPECT_EQ(r.epoch, 3);
  EXPECT_EQ(r.step, 120);
  r = Parse("[epoch 1, step 2] val_loss: 0.5, loss: 0.25");
  EXPECT_DOUBLE_EQ(r.loss, 0.25);
  EXPECT_DOUBLE_EQ(Scalar(r, "val_loss"), 0.5);  // not the training loss
}

TEST(StepLineTest, TrainPassFormatCountsOneStepPerLine) {
  // 001_7564b6c4251e414e.txt (static-graph wide&deep, parameter server).
  StepRecord r = Parse("TRAIN ---> pass: 0 loss: 0.69");
  EXPECT_FALSE(r.Has(StepRecord::kStep));
  EXPECT_EQ(r.steps, 1);
  EXPECT_TRUE(r.Has(StepRecord::kEpoch));
  EXPECT_EQ(r.epoch, 0);
  EXPECT_DOUBLE_EQ(r.loss, 0.69);
  r = Parse("TRAIN ---> pass: 2 loss: [0.6931472]");
  EXPECT_EQ(r.epoch, 2);
  EXPECT_NEAR(r.loss, 0.6931472, 1e-12);
}

TEST(StepLineTest, UnitsTimesAndOtherNames) {
  StepRecord r = Parse("step 3, batch_cost: 12ms, ips: 64.5 images/sec, reader_cost: 0.5s");
  EXPECT_DOUBLE_EQ(r.step_time, 0.012);
  EXPECT_DOUBLE_EQ(r.samples_per_second, 64.5);
  EXPECT_DOUBLE_EQ(Scalar(r, "reader_cost"), 0.5);
  r = Parse("global_step: 100, step 100, loss: nan, acc: inf");
  EXPECT_TRUE(std::isnan(r.loss));              // diverged
  EXPECT_TRUE(std::isnan(Scalar(r, "acc")));    // inf is no better
  r = Parse("step 4, loss=1e-3, mode: train, time: 12:00:01, samples: 32");  // a word and a clock
  EXPECT_DOUBLE_EQ(r.loss, 0.001);
  EXPECT_DOUBLE_EQ(r.samples, 32);
}

TEST(StepLineTest, WhatIsNotAStep) {
  for (const char* line : {"", "-----------  Configuration Arguments -----------", "gpus: 0,1,2,3",
                           "INFO 202X-0X-0X 06:09:36,185 launch_utils.py:425] Local start 4 processes.",
                           "server not ready, wait 3 sec to retry...", "worker_index: 0, final train_loss: 0.000101",
                           "step per second is the average", "stepping through the data", "steps: 5, loss: 1",
                           "step 3 of the setup", "worker_index: 0, step 5", "PADDLE_TRAINER_ID 0",
                           "[Epoch 0] done", "pserver_index: 0, listening on 127.0.0.1:6170, shard params[0:9]"}) {
    StepRecord r;
    EXPECT_EQ(ParseStepLine(line, &r), ParseOutcome::kNone) << line;
  }
}

TEST(StepLineTest, MalformedStepLinesAreSaid) {
  for (const char* line : {"step 5, loss: abc", "step 99999999999999999999999, loss: 1",
                           "[Epoch 0, batch 99999999999999999999] loss: 1", "[Epoch 1, batch 2] loss: x",
                           "step 6, step_time: -1", "step 7, batch: 2.5", "TRAIN ---> pass: 1.5 loss: 1",
                           "step 8, samples: -3, loss: 1", "step 9, speed: fast"}) {
    StepRecord r;
    EXPECT_EQ(ParseStepLine(line, &r), ParseOutcome::kMalformed) << line;
  }
}

TEST(StepLineTest, ScalarsAreBounded) {
  std::string line = "step 1";
  for (int i = 0; i < 20; ++i) line += ", m" + std::to_string(i) + ": " + std::to_string(i);
  StepRecord r = Parse(line);
  EXPECT_EQ(r.scalar_count, StepRecord::kMaxScalars);
  EXPECT_EQ(r.scalars_dropped, 20 - StepRecord::kMaxScalars);
}

// The PaddleNLP / PaddleFormers Trainer's log line (rank 0 of paddle.distributed.launch's
// workerlog.0), as its logger prints it: no --pattern needed.
TEST(StepLineTest, PaddleNlpTrainerLine) {
  StepRecord r = Parse(
      "[2024-05-01 10:00:00,123] [    INFO] - loss: 2.12345678, learning_rate: 3e-05, global_step: 120, "
      "current_memory_allocated: 12.3, current_memory_reserved: 14.1, max_memory_allocated: 13.0, "
      "max_memory_reserved: 15.2, interval_runtime: 4.1234, interval_samples_per_second: 31.0422, "
      "interval_steps_per_second: 0.9701, ppl: 8.3, progress_or_epoch: 0.0625");
  EXPECT_EQ(r.step, 120);
  EXPECT_DOUBLE_EQ(r.loss, 2.12345678);
  EXPECT_DOUBLE_EQ(r.samples_per_second, 31.0422);
  ASSERT_TRUE(r.Has(StepRecord::kStepTime));
  EXPECT_DOUBLE_EQ(r.step_time, 1 / 0.9701);
  EXPECT_DOUBLE_EQ(Scalar(r, "learning_rate"), 3e-05);
  EXPECT_DOUBLE_EQ(Scalar(r, "progress_or_epoch"), 0.0625);   // a fraction of an epoch: not the epoch
  EXPECT_FALSE(r.Has(StepRecord::kEpoch));
  EXPECT_DOUBLE_EQ(Scalar(r, "ppl"), 8.3);

  // Other versions: other keys, another order, scientific notation, no logger prefix, colours.
  r = Parse("global_step: 7, interval_steps_per_second: 2.5e+00, loss: 1.5e-01, loss_scale: 32768.0, "
            "interval_tokens_per_second_per_device: 889.04, interval_samples_per_second: 1.2e3");
  EXPECT_EQ(r.step, 7);
  EXPECT_DOUBLE_EQ(r.loss, 0.15);
  EXPECT_DOUBLE_EQ(r.step_time, 0.4);
  EXPECT_DOUBLE_EQ(r.samples_per_second, 1200);
  EXPECT_DOUBLE_EQ(Scalar(r, "loss_scale"), 32768);
  // Older PaddleNLP (2022 logs) names progress_or_epoch "epoch": a fraction, not the epoch field.
  r = Parse("[2022-08-31 14:41:33,021] [    INFO] - loss: 0.63472128, learning_rate: 2.9918654034629207e-05, "
            "global_step: 830, interval_runtime: 10.1666, interval_samples_per_second: 6.295, "
            "interval_steps_per_second: 0.984, epoch: 0.1356");
  EXPECT_EQ(r.step, 830);
  EXPECT_DOUBLE_EQ(Scalar(r, "epoch"), 0.1356);
  EXPECT_FALSE(r.Has(StepRecord::kEpoch));
  EXPECT_DOUBLE_EQ(Scalar(r, "learning_rate"), 2.9918654034629207e-05);
  r = Parse("\x1b[32m[2024-05-01 10:00:00,123] [    INFO]\x1b[0m - loss: 0.5, global_step=9");
  EXPECT_EQ(r.step, 9);
  EXPECT_DOUBLE_EQ(r.loss, 0.5);

  // A diverged loss is NaN; a rate rounded to 0 (a step over 20000 s) says no step time.
  r = Parse("[    INFO] - loss: nan, global_step: 8, interval_steps_per_second: 0.0");
  EXPECT_TRUE(std::isnan(r.loss));
  EXPECT_FALSE(r.Has(StepRecord::kStepTime));
  EXPECT_TRUE(std::isnan(Parse("loss: -inf, global_step: 8").loss));
  // The largest step a double holds exactly is taken; past it, and past int64, it is refused.
  EXPECT_EQ(Parse("loss: 1, global_step: 9007199254740992").step, 9007199254740992);
  for (const char* line : {"loss: 1, global_step: 9223372036854775808", "loss: 1, global_step: 1e400",
                           "loss: 1, global_step: 99999999999999999999999999999999999999", "global_step: -3",
                           "global_step: 2.5", "global_step: nan", "global_step: abc, loss: 1",
                           "global_step: 3, interval_steps_per_second: inf",
                           "global_step: 3, interval_samples_per_second: -1"}) {
    Parse(line, ParseOutcome::kMalformed);
  }
  // Not its step line: another name ending in global_step, the word in prose, the eval summary.
  for (const char* line : {"train/global_step: 3, loss: 1", "resuming from global_step 300",
                           "[    INFO] - eval_loss: 0.3, eval_runtime: 1.2, progress_or_epoch: 0.5"}) {
    Parse(line, ParseOutcome::kNone);
  }

  // The total, printed as training starts: a record of no steps that gives it.
  r = Parse("[2024-05-01 09:59:00,001] [    INFO] -   Total optimization steps = 1,200,000");
  EXPECT_EQ(r.total_steps, 1200000);
  EXPECT_TRUE(r.Has(StepRecord::kSteps));
  EXPECT_EQ(r.steps, 0);
  EXPECT_FALSE(r.Has(StepRecord::kStep));
  EXPECT_EQ(Parse("  Total optimization steps = 50").total_steps, 50);
  for (const char* line : {"  Total optimization steps = ", "  Total optimization steps = ,000",
                           "  Total optimization steps = 9,999,999,999,999,999"}) {
    Parse(line, ParseOutcome::kMalformed);
  }
}

// Numbers: the fast path gives exactly what strtod gives.
TEST(StepLineTest, NumbersAreExact) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> value(0, 100000);
  for (int i = 0; i < 20000; ++i) {
    char text[64];
    const double v = value(rng);
    std::snprintf(text, sizeof text, i % 3 == 0 ? "%.6f" : i % 3 == 1 ? "%.3f" : "%.9g", v);
    StepRecord r = Parse(std::string("step 1, loss: ") + text);
    ASSERT_EQ(r.loss, std::strtod(text, nullptr)) << text;
    StepRecord t;
    std::string error;
    ASSERT_EQ(ParseTextReport(std::string("loss=-") + text, &t, &error), ParseOutcome::kStep) << error;
    ASSERT_EQ(t.loss, -std::strtod(text, nullptr)) << text;
  }
}

bool Same(const StepRecord& a, const StepRecord& b) {
  auto eq = [](double x, double y) { return x == y || (std::isnan(x) && std::isnan(y)); };
  if (a.fields != b.fields || a.step != b.step || a.steps != b.steps || a.epoch != b.epoch ||
      !eq(a.loss, b.loss) || !eq(a.step_time, b.step_time) || !eq(a.samples, b.samples) ||
      !eq(a.samples_per_second, b.samples_per_second) || !eq(a.total_time, b.total_time) ||
      a.scalar_count != b.scalar_count || a.scalars_dropped != b.scalars_dropped) {
    return false;
  }
  for (size_t i = 0; i < a.scalar_count; ++i) {
    if (a.scalars[i].name != b.scalars[i].name || !eq(a.scalars[i].value, b.scalars[i].value)) return false;
  }
  return true;
}

// The template parser must say exactly what the general parser says, line by line, whatever the
// stream mixes: formats, numbers of other shapes, non-step lines, malformed lines.
TEST(StepLineTest, AStepOfATotalGivesTheTotal) {
  StepRecord r = Parse("step 10/1000, loss: 0.5");
  EXPECT_EQ(r.step, 10);
  EXPECT_TRUE(r.Has(StepRecord::kTotalSteps));
  EXPECT_EQ(r.total_steps, 1000);
  EXPECT_DOUBLE_EQ(r.loss, 0.5);
  r = Parse("epoch 1 step: 7/250 loss=0.25 total_steps=900");
  EXPECT_EQ(r.step, 7);
  EXPECT_EQ(r.total_steps, 900) << "the last one said wins";
  StepRecord replayed;
  LineParser learnt;
  ASSERT_EQ(learnt.Parse("epoch 1 step: 6/250 loss=0.25 total_steps=900", &replayed), ParseOutcome::kStep);
  ASSERT_EQ(learnt.Parse("epoch 1 step: 7/250 loss=0.25 total_steps=900", &replayed), ParseOutcome::kStep);
  EXPECT_EQ(replayed.total_steps, 900) << "the template agrees";
  r = Parse("step 12, loss: 0.4");
  EXPECT_FALSE(r.Has(StepRecord::kTotalSteps));
  r = Parse("step 12/abc, loss: 0.4");
  EXPECT_FALSE(r.Has(StepRecord::kTotalSteps));
  EXPECT_EQ(r.step, 12);
  Parse("step 12/99999999999999999999, loss: 0.4", ParseOutcome::kStep);   // a total out of range is no total
  EXPECT_FALSE(Parse("step 12/99999999999999999999, loss: 0.4").Has(StepRecord::kTotalSteps));

  // The template learnt from the first line replays the total of the next.
  LineParser parser;
  StepRecord first, next;
  ASSERT_EQ(parser.Parse("step 1/500, loss: 0.9", &first), ParseOutcome::kStep);
  ASSERT_EQ(parser.Parse("step 2/500, loss: 0.8", &next), ParseOutcome::kStep);
  EXPECT_EQ(next.step, 2);
  EXPECT_EQ(next.total_steps, 500);
  EXPECT_DOUBLE_EQ(next.loss, 0.8);
}

// Issue 25: "step 9223372036854775807/1000" became the rank's step, and its count 9.2e18. Counts
// are bounded as the operator bounds them (2^53), and a step past its own total is no step.
TEST(StepLineTest, AStepPastTheBoundOrItsTotalIsMalformed) {
  EXPECT_EQ(Parse("step 9007199254740992, loss: 1").step, kMaxStepCount);
  EXPECT_EQ(Parse("step 1000/1000, loss: 1").step, 1000);
  for (const char* line : {"step 9223372036854775807/1000, loss: 1", "step 9223372036854775807, loss: 1",
                           "step 9007199254740993, loss: 1", "step 1001/1000, loss: 1",
                           "[Epoch 9007199254740993, batch 1] loss: 1", "[Epoch 0, batch 9007199254740993] loss: 1",
                           "loss: 1, global_step: 5, total_steps: 4"}) {
    Parse(line, ParseOutcome::kMalformed);
  }
  // A total past the bound is no total, as one past int64 is: the step stands.
  EXPECT_FALSE(Parse("step 12/9007199254740993, loss: 0.4").Has(StepRecord::kTotalSteps));

  // The template learnt from a line replays the next one's numbers, and says the same.
  LineParser parser;
  StepRecord r;
  ASSERT_EQ(parser.Parse("step 1/1000, loss: 0.9", &r), ParseOutcome::kStep);
  EXPECT_EQ(parser.Parse("step 2000/1000, loss: 0.8", &r), ParseOutcome::kMalformed);
  EXPECT_EQ(parser.Parse("step 9223372036854775807/1000, loss: 0.8", &r), ParseOutcome::kMalformed);
  EXPECT_EQ(parser.Parse("step 3/1000, loss: 0.7", &r), ParseOutcome::kStep);
  EXPECT_EQ(r.step, 3);

  // A user's pattern and the push API: the same rules.
  auto pattern = StepPattern::Compile(R"(it (?P<step>\d+) of (?P<total_steps>\d+))");
  ASSERT_TRUE(pattern.ok()) << pattern.error();
  EXPECT_EQ(pattern->Match("it 5 of 4", &r), ParseOutcome::kMalformed);
  EXPECT_EQ(pattern->Match("it 4 of 4", &r), ParseOutcome::kStep);
  std::string error;
  EXPECT_EQ(ParseTextReport("step=81 total_steps=80", &r, &error), ParseOutcome::kMalformed);
  EXPECT_EQ(error, "step 81 is past total_steps 80");
  EXPECT_EQ(ParseTextReport("step=9223372036854775807", &r, &error), ParseOutcome::kMalformed);
  const auto records = ParseJsonReport(Json{{"step", 81}, {"total_steps", 80}}, 16);
  ASSERT_FALSE(records.ok());
  EXPECT_EQ(records.error(), "step 81 is past total_steps 80");
}

TEST(ReportTest, APushedReportMayGiveTheTotal) {
  auto records = ParseJsonReport(Json{{"step", 5}, {"total_steps", 80}}, 16);
  ASSERT_TRUE(records.ok()) << records.error();
  EXPECT_EQ((*records)[0].total_steps, 80);
  EXPECT_FALSE(ParseJsonReport(Json{{"step", 5}, {"total_steps", -1}}, 16).ok());
}

TEST(LineParserTest, AgreesWithTheGeneralParserOnMixedStreams) {
  std::mt19937_64 rng(11);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  auto number = [&]() -> std::string {
    char text[64];
    switch (pick(9)) {
      case 0: return std::to_string(pick(100000));
      case 1: return "-" + std::to_string(pick(100));
      case 2: return "1e-" + std::to_string(pick(9));
      case 3: return "nan";
      case 4: return "[0.5]";
      case 5: return std::to_string(pick(10)) + "." + std::to_string(pick(1000)) + "ms";
      case 6: return "12345678901234567";
      default: std::snprintf(text, sizeof text, "%.6f", std::uniform_real_distribution<double>(0, 1e4)(rng)); return text;
    }
  };
  auto count = [&]() { return std::to_string(pick(10) == 0 ? 99999999 : pick(5000)); };
  std::vector<std::string> lines;
  for (int i = 0; i < 30000; ++i) {
    switch (pick(9)) {
      case 0:
      case 1:
      case 2:
        lines.push_back("worker_index: " + std::to_string(pick(2)) + ", step " + count() + ", train_loss: " +
                        number() + ", total time cost = " + number() + ", step per second: " + number() +
                        ", speed: " + number());
        break;
      case 3:
        lines.push_back("[Epoch " + count() + ", batch " + count() + "] loss: " + number() + ", acc1: " + number() +
                        ", acc5: " + number());
        break;
      case 4:
        lines.push_back("TRAIN ---> pass: " + count() + " loss: " + number());
        break;
      case 5:
        lines.push_back("step" + count() + " cost=" + number() + (pick(2) ? ", lr: " + number() : ""));
        break;
      case 6:
        lines.push_back(pick(2) ? "server not ready, wait 3 sec to retry..." : "step 3 of the setup");
        break;
      case 7:
        lines.push_back("[2024-05-01 10:00:0" + std::to_string(pick(2)) + ",123] [    INFO] - loss: " + number() +
                        ", global_step: " + count() + ", interval_samples_per_second: " + number() +
                        ", interval_steps_per_second: " + number() + (pick(2) ? ", progress_or_epoch: " : ", epoch: ") +
                        number());
        break;
      default:
        lines.push_back("step " + count() + ", loss: " + (pick(4) ? number() : std::string("x")) + ", global_step: " +
                        count() + ", batch_cost: " + number());
        break;
    }
  }
  LineParser parser;
  size_t steps = 0;
  for (const std::string& line : lines) {
    StepRecord fast, general;
    const ParseOutcome a = parser.Parse(line, &fast);
    const ParseOutcome b = ParseStepLine(line, &general);
    ASSERT_EQ(a, b) << line;
    if (a == ParseOutcome::kStep) {
      ++steps;
      ASSERT_TRUE(Same(fast, general)) << line;
    }
  }
  EXPECT_GT(steps, lines.size() / 2);
}

TEST(StepPatternTest, NamedGroupsBecomeFields) {
  auto p = StepPattern::Compile(R"(iter (?P<step>\d+) .*loss=(?P<loss>[-0-9.e]+) top1=(?<top1>[0-9.]+))");
  ASSERT_TRUE(p.ok()) << p.error();
  StepRecord r;
  ASSERT_EQ(p->Match("12:00 iter 300 (lr 0.1) loss=0.25 top1=0.75", &r), ParseOutcome::kStep);
  EXPECT_EQ(r.step, 300);
  EXPECT_DOUBLE_EQ(r.loss, 0.25);
  EXPECT_DOUBLE_EQ(Scalar(r, "top1"), 0.75);
  EXPECT_EQ(p->Match("iter 300 no loss here", &r), ParseOutcome::kNone);
  EXPECT_EQ(p->Match("iter 301 loss=. top1=0.5", &r), ParseOutcome::kMalformed);

  // Unnamed, non-capturing and escaped parentheses do not shift the groups.
  p = StepPattern::Compile(R"((?:a|b)(x)\((?P<epoch>\d+)\) [(] (?P<samples_per_second>\d+))");
  ASSERT_TRUE(p.ok()) << p.error();
  ASSERT_EQ(p->Match("ax(3) ( 64", &r), ParseOutcome::kStep);
  EXPECT_EQ(r.epoch, 3);
  EXPECT_DOUBLE_EQ(r.samples_per_second, 64);

  // A quote, \Q...\E, is literal text: a group written in it is none.
  p = StepPattern::Compile(R"(\Q(?P<x>)\E (?P<loss>\d+))");
  ASSERT_TRUE(p.ok()) << p.error();
  ASSERT_EQ(p->Match("(?P<x>) 7", &r), ParseOutcome::kStep);
  EXPECT_DOUBLE_EQ(r.loss, 7);
  EXPECT_EQ(r.scalar_count, 0u);
}

TEST(StepPatternTest, BytesAreCharacters) {
  // As std::regex on char had them: "步" is three bytes to '.', and invalid UTF-8 is just bytes.
  auto p = StepPattern::Compile(R"(^.{3}=(?P<step>\d+) 步 (?P<loss>\S+))");
  ASSERT_TRUE(p.ok()) << p.error();
  StepRecord r;
  ASSERT_EQ(p->Match("步=12 步 0.5", &r), ParseOutcome::kStep);
  EXPECT_EQ(r.step, 12);
  ASSERT_EQ(p->Match("\xff\xfe\xfd=13 步 0.25", &r), ParseOutcome::kStep);
  EXPECT_EQ(r.step, 13);
  EXPECT_DOUBLE_EQ(r.loss, 0.25);
}

TEST(StepPatternTest, PathologicalPatternsOnAMebibyteLineFinishQuickly) {
  // std::regex backtracks on these (time exponential in the line) and recurses once per character
  // (a stack overflow on a long line); RE2 takes time linear in the line.
  const std::string as(1 << 20, 'a');
  const std::string ones(1 << 20, '1');
  for (const auto& [source, line, outcome] : std::vector<std::tuple<std::string, std::string, ParseOutcome>>{
           {"(?P<loss>(a*)*b)", as, ParseOutcome::kNone},
           {"(?P<loss>(a|aa)*c)", as, ParseOutcome::kNone},
           {"^(a|aa)*x(?P<step>\\d+)", as + "x42", ParseOutcome::kStep},
           {"(?P<step>(1|11)*)x", ones, ParseOutcome::kNone},
           {"(?P<step>(1|11)*)x", ones + "x", ParseOutcome::kMalformed}}) {  // a million digits: no count
    auto p = StepPattern::Compile(source);
    ASSERT_TRUE(p.ok()) << p.error();
    StepRecord r;
    const auto started = std::chrono::steady_clock::now();
    EXPECT_EQ(p->Match(line, &r), outcome) << source;
    EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(5)) << source;
    if (outcome == ParseOutcome::kStep) {
      EXPECT_EQ(r.step, 42);
    }
  }
}

TEST(StepPatternTest, BadPatternsAreRefusedWithAReason) {
  for (const auto& [source, fragment] : std::vector<std::pair<std::string, std::string>>{
           {R"(loss=(\d+))", "no named group"},
           {R"((?P<loss>\d+) (?P<loss>\d+))", "used twice"},
           {R"((?P<loss>\d+)[)", "not a valid regular expression"},
           {R"((?<=x)(?P<loss>\d+))", "not a valid regular expression"},
           {R"((?P<worker_index>\d+))", "cannot be used"},
           {R"((?P<>\d+))", "group name"}}) {
    auto p = StepPattern::Compile(source);
    ASSERT_FALSE(p.ok()) << source;
    EXPECT_NE(p.error().find(fragment), std::string::npos) << p.error();
    EXPECT_NE(p.error().find("--pattern"), std::string::npos) << p.error();
  }
}

TEST(TextReportTest, KeyValueLines) {
  StepRecord r;
  std::string error;
  ASSERT_EQ(ParseTextReport("step=12 loss=0.53 samples=32 acc=0.91 rank=3 step_time=0.25", &r, &error),
            ParseOutcome::kStep)
      << error;
  EXPECT_EQ(r.step, 12);
  EXPECT_DOUBLE_EQ(r.loss, 0.53);
  EXPECT_DOUBLE_EQ(r.samples, 32);
  EXPECT_DOUBLE_EQ(Scalar(r, "acc"), 0.91);
  EXPECT_EQ(r.rank, 3);
  EXPECT_TRUE(r.Has(StepRecord::kRank));
  EXPECT_DOUBLE_EQ(r.step_time, 0.25);
  EXPECT_EQ(ParseTextReport("  \r", &r, &error), ParseOutcome::kNone);
  ASSERT_EQ(ParseTextReport("steps=4\tloss=nan", &r, &error), ParseOutcome::kStep);
  EXPECT_EQ(r.steps, 4);
  EXPECT_TRUE(std::isnan(r.loss));

  for (const auto& [line, fragment] : std::vector<std::pair<std::string, std::string>>{
           {"step", "expected key=value"},
           {"=3", "expected key=value"},
           {"loss=fast", "not a number"},
           {"loss=0.5s", "not a number"},
           {"step=-1", "does not fit"},
           {"step=1.5", "does not fit"},
           {"bad{name}=1", "bad name"},
           {"worker_index=1", "not a report field"}}) {
    error.clear();
    EXPECT_EQ(ParseTextReport(line, &r, &error), ParseOutcome::kMalformed) << line;
    EXPECT_NE(error.find(fragment), std::string::npos) << line << ": " << error;
  }
}

TEST(JsonReportTest, ObjectsArraysAndErrors) {
  const Json one = Json::parse(R"({"step": 5, "loss": 0.5, "samples": 64, "scalars": {"acc": 0.25}, "lr": 0.1})");
  auto records = ParseJsonReport(one);
  ASSERT_TRUE(records.ok()) << records.error();
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ((*records)[0].step, 5);
  EXPECT_DOUBLE_EQ(Scalar((*records)[0], "acc"), 0.25);
  EXPECT_DOUBLE_EQ(Scalar((*records)[0], "lr"), 0.1);

  const Json many = Json::parse(R"([{"rank": 1, "step": 1}, {"rank": 2, "steps": 3}])");
  records = ParseJsonReport(many);
  ASSERT_TRUE(records.ok()) << records.error();
  ASSERT_EQ(records->size(), 2u);
  EXPECT_EQ((*records)[1].rank, 2);
  EXPECT_EQ((*records)[1].steps, 3);

  for (const auto& [text, fragment] : std::vector<std::pair<std::string, std::string>>{
           {R"({"loss": "low"})", "loss is not a number"},
           {R"({"scalars": [1]})", "scalars must be an object"},
           {R"({"scalars": {"a b": 1}})", "bad scalar name"},
           {R"({"step": -2})", "does not fit"},
           {R"([1])", "report 0: a report must be a JSON object"},
           {R"("step")", "a report must be a JSON object"}}) {
    auto r = ParseJsonReport(Json::parse(text));
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.error().find(fragment), std::string::npos) << r.error();
  }
  EXPECT_FALSE(ParseJsonReport(Json::parse("[{}, {}, {}]"), 2).ok());
}

}  // namespace
}  // namespace fleet::sidecar
