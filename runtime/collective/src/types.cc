#include "fleet/collective/types.h"

#include <cstring>
#include <string>

namespace fleet::collective {
namespace {

uint32_t FloatBits(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

float BitsFloat(uint32_t bits) {
  float value = 0;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

}  // namespace

std::string_view DataTypeName(DataType type) {
  switch (type) {
    case DataType::kFloat32: return "float32";
    case DataType::kFloat64: return "float64";
    case DataType::kInt64: return "int64";
    case DataType::kFloat16: return "float16";
    case DataType::kBFloat16: return "bfloat16";
  }
  return "unknown";
}

Result<DataType> ParseDataType(std::string_view text) {
  for (DataType type : {DataType::kFloat32, DataType::kFloat64, DataType::kInt64, DataType::kFloat16,
                        DataType::kBFloat16}) {
    if (text == DataTypeName(type)) return type;
  }
  return Error{"unknown data type '" + std::string(text) +
               "' (expected float32, float64, int64, float16 or bfloat16)"};
}

size_t DataTypeSize(DataType type) {
  switch (type) {
    case DataType::kFloat32: return 4;
    case DataType::kFloat64: return 8;
    case DataType::kInt64: return 8;
    case DataType::kFloat16: return 2;
    case DataType::kBFloat16: return 2;
  }
  return 0;
}

std::string_view ReduceOpName(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum: return "sum";
    case ReduceOp::kMax: return "max";
    case ReduceOp::kMin: return "min";
    case ReduceOp::kAvg: return "avg";
  }
  return "unknown";
}

Result<ReduceOp> ParseReduceOp(std::string_view text) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg}) {
    if (text == ReduceOpName(op)) return op;
  }
  return Error{"unknown reduce op '" + std::string(text) + "' (expected sum, max, min or avg)"};
}

std::string_view BackendName(Backend backend) {
  return backend == Backend::kNccl ? "nccl" : "gloo";
}

float ToFloat(BFloat16 value) { return BitsFloat(static_cast<uint32_t>(value.bits) << 16); }

BFloat16 ToBFloat16(float value) {
  const uint32_t bits = FloatBits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {  // NaN: keep the sign, force a quiet NaN
    return BFloat16{static_cast<uint16_t>((bits >> 16) | 0x0040u)};
  }
  const uint32_t rounding = 0x7fffu + ((bits >> 16) & 1u);  // round to nearest, ties to even
  return BFloat16{static_cast<uint16_t>((bits + rounding) >> 16)};
}

float ToFloat(Float16 value) {
  const uint32_t sign = static_cast<uint32_t>(value.bits & 0x8000u) << 16;
  const uint32_t exponent = (value.bits >> 10) & 0x1fu;
  uint32_t mantissa = value.bits & 0x3ffu;
  if (exponent == 0x1f) return BitsFloat(sign | 0x7f800000u | (mantissa << 13));  // inf / NaN
  if (exponent == 0) {
    if (mantissa == 0) return BitsFloat(sign);  // +-0
    // Subnormal: mantissa * 2^-24, exact in float.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  return BitsFloat(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

Float16 ToFloat16(float value) {
  const uint32_t bits = FloatBits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return Float16{static_cast<uint16_t>(sign | 0x7e00u)};  // NaN
  if (magnitude >= 0x477ff000u) return Float16{static_cast<uint16_t>(sign | 0x7c00u)};  // overflow -> inf
  if (magnitude < 0x38800000u) {
    // Result is subnormal or zero: value / 2^-24 rounded to nearest even. Values below 2^-25
    // round to zero.
    if (magnitude < 0x33000000u) return Float16{sign};
    const uint32_t exponent = magnitude >> 23;        // 102 .. 112
    const uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exponent;           // 14 .. 24
    uint32_t half = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (remainder > halfway || (remainder == halfway && (half & 1u))) ++half;
    return Float16{static_cast<uint16_t>(sign | half)};
  }
  // Normal: rebias the exponent and round the mantissa from 23 to 10 bits (a carry into the
  // exponent is the right answer, including the step to infinity).
  uint32_t half = ((magnitude >> 13) - (112u << 10));
  const uint32_t remainder = magnitude & 0x1fffu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (half & 1u))) ++half;
  return Float16{static_cast<uint16_t>(sign | half)};
}

}  // namespace fleet::collective
