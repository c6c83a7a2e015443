// The optimizers the server applies, on raw float arrays. State is kept as OptimizerStateSlots()
// arrays laid out `stride` floats apart: state[s * stride + i] is slot s of value i. A dense shard
// uses stride = shard length (so any sub-range can be updated on its own); a sparse row uses
// stride = dim.
//
// The update rules are Paddle's kernels:
//   SGD      w -= lr * g
//   Adagrad  acc += g^2;  w -= lr * g / (sqrt(acc) + epsilon)
//   Adam     m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//            w -= lr * sqrt(1 - b2^t) / (1 - b1^t) * m / (sqrt(v) + epsilon * sqrt(1 - b2^t));
//            b1^t *= b1;  b2^t *= b2          (b1^t, b2^t start at b1, b2; kept per value)
#pragma once

#include <cstddef>

#include "fleet/ps/config.h"

namespace fleet::ps {

// Writes the initial state of n values (zeros; Adagrad's initial accumulator; Adam's b1, b2).
void InitOptimizerState(const OptimizerConfig& config, float* state, size_t stride, size_t n);

// One optimizer step on n values.
void ApplyGradient(const OptimizerConfig& config, float* values, float* state, size_t stride,
                   const float* gradient, size_t n);

// values += delta (geo mode's server side).
void AddDelta(float* values, const float* delta, size_t n);

}  // namespace fleet::ps
