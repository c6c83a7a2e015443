// The server's optimizers against values computed by hand (double precision, in the comments),
// compared at float precision.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "fleet/ps/optimizer.h"

namespace fleet::ps {
namespace {

struct Param {
  OptimizerConfig config;
  std::vector<float> values;
  std::vector<float> state;
  explicit Param(OptimizerConfig c, std::vector<float> v) : config(c), values(std::move(v)) {
    state.resize(values.size() * static_cast<size_t>(OptimizerStateSlots(c.kind)));
    InitOptimizerState(config, state.data(), values.size(), values.size());
  }
  void Step(std::vector<float> g) {
    ApplyGradient(config, values.data(), state.data(), values.size(), g.data(), g.size());
  }
};

TEST(PsOptimizerTest, SgdStepsAgainstTheGradient) {
  Param p(OptimizerConfig::Sgd(0.1f), {1.0f, -2.0f});
  p.Step({0.5f, -1.0f});
  EXPECT_FLOAT_EQ(p.values[0], 0.95f);   // 1 - 0.1 * 0.5
  EXPECT_FLOAT_EQ(p.values[1], -1.9f);   // -2 + 0.1 * 1
}

TEST(PsOptimizerTest, AdagradDividesByTheRootOfTheSquaredGradientSum) {
  Param p(OptimizerConfig::Adagrad(0.1f, 1e-6f, 0.0f), {1.0f});
  p.Step({2.0f});
  // acc = 4; w = 1 - 0.1 * 2 / (2 + 1e-6) = 0.90000005
  EXPECT_FLOAT_EQ(p.state[0], 4.0f);
  EXPECT_NEAR(p.values[0], 0.90000005, 1e-6);
  p.Step({1.0f});
  // acc = 5; w = 0.90000005 - 0.1 / (sqrt(5) + 1e-6) = 0.85527871
  EXPECT_FLOAT_EQ(p.state[0], 5.0f);
  EXPECT_NEAR(p.values[0], 0.85527871, 1e-6);
}

TEST(PsOptimizerTest, AdagradStartsFromTheInitialAccumulator) {
  Param p(OptimizerConfig::Adagrad(1.0f, 1e-6f, 0.1f), {0.0f});
  p.Step({0.3f});
  // acc = 0.1 + 0.09 = 0.19; w = -0.3 / (sqrt(0.19) + 1e-6) = -0.68824562
  EXPECT_NEAR(p.state[0], 0.19, 1e-7);
  EXPECT_NEAR(p.values[0], -0.68824562, 1e-6);
}

TEST(PsOptimizerTest, AdamMatchesPaddlesKernel) {
  Param p(OptimizerConfig::Adam(0.1f, 0.9f, 0.999f, 1e-8f), {1.0f, 2.0f});
  p.Step({0.5f, -0.25f});
  // Step 1: m = 0.05, v = 0.00025, lr_t = 0.1 * sqrt(0.001) / 0.1 = 0.031622777;
  // w0 = 1 - 0.031622777 * 0.05 / (0.015811388 + 1e-8 * 0.031622777) = 0.9 (Adam's first step is lr)
  EXPECT_NEAR(p.values[0], 0.9, 1e-6);
  EXPECT_NEAR(p.values[1], 2.1, 1e-6);           // the same step, upwards
  EXPECT_NEAR(p.state[0], 0.05, 1e-7);           // m
  EXPECT_NEAR(p.state[2], 0.00025, 1e-8);        // v
  EXPECT_NEAR(p.state[4], 0.81, 1e-7);           // beta1^2 after the step
  EXPECT_NEAR(p.state[6], 0.998001, 1e-7);       // beta2^2
  p.Step({1.0f, 0.0f});
  // Step 2 (value 0): m = 0.145, v = 0.00124975, lr_t = 0.1 * sqrt(0.001999) / 0.19 = 0.023531691;
  // w0 = 0.9 - 0.023531691 * 0.145 / (sqrt(0.00124975) + 1e-8 * 0.0447) = 0.80348180
  EXPECT_NEAR(p.values[0], 0.80348180, 2e-6);
  // Value 1 with g = 0: m = -0.0225, v = 0.0000624375; w1 = 2.1 + 0.023531691 * 0.0225 / 0.0079017 = 2.16700582
  EXPECT_NEAR(p.values[1], 2.16700582, 2e-6);
}

TEST(PsOptimizerTest, StateIsStridedSoARangeCanBeUpdatedAlone) {
  // Four values with Adagrad state; update only values 2..3 through pointers into the middle.
  OptimizerConfig c = OptimizerConfig::Adagrad(0.5f, 1e-6f, 0.0f);
  std::vector<float> values(4, 1.0f), state(4, 0.0f);
  InitOptimizerState(c, state.data(), 4, 4);
  const float g[2] = {1.0f, 1.0f};
  ApplyGradient(c, values.data() + 2, state.data() + 2, 4, g, 2);
  EXPECT_FLOAT_EQ(values[0], 1.0f);
  EXPECT_FLOAT_EQ(state[1], 0.0f);
  EXPECT_NEAR(values[2], 0.5, 1e-6);
  EXPECT_FLOAT_EQ(state[3], 1.0f);
}

TEST(PsOptimizerTest, AddDeltaAdds) {
  std::vector<float> v = {1.0f, 2.0f};
  const float d[2] = {0.5f, -1.0f};
  AddDelta(v.data(), d, 2);
  EXPECT_FLOAT_EQ(v[0], 1.5f);
  EXPECT_FLOAT_EQ(v[1], 1.0f);
}

}  // namespace
}  // namespace fleet::ps
