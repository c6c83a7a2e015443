// Element types, reduction operators and backends of fleet::collective, with their names (the
// strings the Python binding and error messages use) and the half-precision conversions C++ callers
// need without CUDA headers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fleet/base/result.h"

namespace fleet::collective {

enum class DataType { kFloat32, kFloat64, kInt64, kFloat16, kBFloat16 };
enum class ReduceOp { kSum, kMax, kMin, kAvg };
enum class Backend { kGloo, kNccl };

// "float32", "float64", "int64", "float16", "bfloat16".
std::string_view DataTypeName(DataType type);
Result<DataType> ParseDataType(std::string_view text);
size_t DataTypeSize(DataType type);

// "sum", "max", "min", "avg".
std::string_view ReduceOpName(ReduceOp op);
Result<ReduceOp> ParseReduceOp(std::string_view text);

// "gloo", "nccl".
std::string_view BackendName(Backend backend);

// IEEE half and bfloat16 values as their 16 bits. Conversions from float round to nearest even and
// keep NaN a NaN.
struct Float16 {
  uint16_t bits = 0;
};
struct BFloat16 {
  uint16_t bits = 0;
};
float ToFloat(Float16 value);
float ToFloat(BFloat16 value);
Float16 ToFloat16(float value);
BFloat16 ToBFloat16(float value);

// The DataType of a C++ element type, for the typed conveniences of Communicator.
template <typename T>
struct DataTypeOf;
template <>
struct DataTypeOf<float> {
  static constexpr DataType value = DataType::kFloat32;
};
template <>
struct DataTypeOf<double> {
  static constexpr DataType value = DataType::kFloat64;
};
template <>
struct DataTypeOf<int64_t> {
  static constexpr DataType value = DataType::kInt64;
};
template <>
struct DataTypeOf<Float16> {
  static constexpr DataType value = DataType::kFloat16;
};
template <>
struct DataTypeOf<BFloat16> {
  static constexpr DataType value = DataType::kBFloat16;
};

}  // namespace fleet::collective
