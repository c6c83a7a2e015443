#include "fleet/ps/optimizer.h"

#include <cmath>

namespace fleet::ps {

void InitOptimizerState(const OptimizerConfig& config, float* state, size_t stride, size_t n) {
  switch (config.kind) {
    case OptimizerKind::kSgd:
      return;
    case OptimizerKind::kAdagrad:
      for (size_t i = 0; i < n; ++i) state[i] = config.initial_accumulator;
      return;
    case OptimizerKind::kAdam:
      for (size_t i = 0; i < n; ++i) {
        state[i] = 0.0f;                       // first moment
        state[stride + i] = 0.0f;              // second moment
        state[2 * stride + i] = config.beta1;  // beta1^t
        state[3 * stride + i] = config.beta2;  // beta2^t
      }
      return;
  }
}

// The pointers never alias (values, state and the gradient are separate arrays); saying so lets the
// compiler vectorize the loops.
void ApplyGradient(const OptimizerConfig& config, float* __restrict values, float* __restrict state, size_t stride,
                   const float* __restrict gradient, size_t n) {
  const float lr = config.learning_rate;
  switch (config.kind) {
    case OptimizerKind::kSgd:
      for (size_t i = 0; i < n; ++i) values[i] -= lr * gradient[i];
      return;
    case OptimizerKind::kAdagrad: {
      const float eps = config.epsilon;
      for (size_t i = 0; i < n; ++i) {
        const float g = gradient[i];
        state[i] += g * g;
        values[i] -= lr * g / (std::sqrt(state[i]) + eps);
      }
      return;
    }
    case OptimizerKind::kAdam: {
      const float b1 = config.beta1;
      const float b2 = config.beta2;
      const float eps = config.epsilon;
      float* __restrict m = state;
      float* __restrict v = state + stride;
      float* __restrict b1pow = state + 2 * stride;
      float* __restrict b2pow = state + 3 * stride;
      for (size_t i = 0; i < n; ++i) {
        const float g = gradient[i];
        m[i] = b1 * m[i] + (1.0f - b1) * g;
        v[i] = b2 * v[i] + (1.0f - b2) * g * g;
        const float correction = std::sqrt(1.0f - b2pow[i]);
        const float lr_t = lr * correction / (1.0f - b1pow[i]);
        values[i] -= lr_t * (m[i] / (std::sqrt(v[i]) + eps * correction));
        b1pow[i] *= b1;
        b2pow[i] *= b2;
      }
      return;
    }
  }
}

void AddDelta(float* __restrict values, const float* __restrict delta, size_t n) {
  for (size_t i = 0; i < n; ++i) values[i] += delta[i];
}

}  // namespace fleet::ps
