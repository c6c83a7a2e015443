// Names, sizes and the half-precision conversions of fleet::collective::types.
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

#include <gloo/types.h>
#include <gtest/gtest.h>

#include "fleet/collective/communicator.h"
#include "fleet/collective/types.h"

namespace fleet::collective {
namespace {

TEST(TypesTest, NamesParseBack) {
  for (DataType t : {DataType::kFloat32, DataType::kFloat64, DataType::kInt64, DataType::kFloat16, DataType::kBFloat16}) {
    auto parsed = ParseDataType(DataTypeName(t));
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    EXPECT_EQ(*parsed, t);
  }
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin, ReduceOp::kAvg}) {
    auto parsed = ParseReduceOp(ReduceOpName(op));
    ASSERT_TRUE(parsed.ok()) << parsed.error();
    EXPECT_EQ(*parsed, op);
  }
  EXPECT_EQ(DataTypeSize(DataType::kFloat32), 4u);
  EXPECT_EQ(DataTypeSize(DataType::kFloat64), 8u);
  EXPECT_EQ(DataTypeSize(DataType::kInt64), 8u);
  EXPECT_EQ(DataTypeSize(DataType::kFloat16), 2u);
  EXPECT_EQ(DataTypeSize(DataType::kBFloat16), 2u);
  EXPECT_EQ(BackendName(Backend::kGloo), "gloo");
  EXPECT_EQ(BackendName(Backend::kNccl), "nccl");
}

TEST(TypesTest, UnknownNamesSayWhatIsAccepted) {
  EXPECT_EQ(ParseDataType("int32").error(), "unknown data type 'int32' (expected float32, float64, int64, float16 or bfloat16)");
  EXPECT_EQ(ParseReduceOp("prod").error(), "unknown reduce op 'prod' (expected sum, max, min or avg)");
  EXPECT_EQ(ParseBackendChoice("mpi").error(), "unknown backend 'mpi' (expected auto, gloo or nccl)");
}

TEST(TypesTest, EveryFloat16RoundTripsThroughFloat) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const Float16 h{static_cast<uint16_t>(bits)};
    const float f = ToFloat(h);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(ToFloat(ToFloat16(f)))) << bits;
      continue;
    }
    ASSERT_EQ(ToFloat16(f).bits, h.bits) << "bits " << bits << " value " << f;
    ASSERT_EQ(f, gloo::cpu_half2float(gloo::float16(f))) << bits;  // agrees with gloo's own
  }
}

TEST(TypesTest, Float16RoundingAgreesWithGloo) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any;
  for (int i = 0; i < 200000; ++i) {
    uint32_t bits = any(rng);
    float f;
    std::memcpy(&f, &bits, sizeof f);
    if (std::isnan(f)) continue;
    gloo::float16 theirs = gloo::cpu_float2half_rn(f);
    ASSERT_EQ(ToFloat16(f).bits, theirs.x) << "float bits " << std::hex << bits;
  }
  EXPECT_EQ(ToFloat16(65504.f).bits, 0x7bff);
  EXPECT_EQ(ToFloat16(65520.f).bits, 0x7c00);  // halfway to the next power rounds to infinity
  EXPECT_EQ(ToFloat16(1.0f + 1.0f / 2048).bits, 0x3c00);  // tie, to even
  EXPECT_EQ(ToFloat16(std::ldexp(1.0f, -24)).bits, 0x0001);  // smallest subnormal
  EXPECT_EQ(ToFloat16(std::ldexp(1.0f, -25)).bits, 0x0000);  // halfway to it: to even (zero)
}

TEST(TypesTest, BFloat16RoundsToNearestEven) {
  EXPECT_EQ(ToBFloat16(1.0f).bits, 0x3f80);
  EXPECT_EQ(ToFloat(BFloat16{0x3f80}), 1.0f);
  EXPECT_EQ(ToBFloat16(1.0f + 1.0f / 256).bits, 0x3f80);           // tie, to even
  EXPECT_EQ(ToBFloat16(1.0f + 3.0f / 256).bits, 0x3f82);           // tie, to even (up)
  EXPECT_EQ(ToBFloat16(1.0f + 1.0f / 128 + 1.0f / 1024).bits, 0x3f81);
  EXPECT_EQ(ToBFloat16(-2.5f).bits, 0xc020);
  EXPECT_TRUE(std::isnan(ToFloat(ToBFloat16(std::numeric_limits<float>::quiet_NaN()))));
  EXPECT_TRUE(std::isinf(ToFloat(ToBFloat16(std::numeric_limits<float>::max()))));  // rounds up
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const float f = ToFloat(BFloat16{static_cast<uint16_t>(bits)});
    if (!std::isnan(f)) {
      ASSERT_EQ(ToBFloat16(f).bits, bits);
    }
  }
}

}  // namespace
}  // namespace fleet::collective
