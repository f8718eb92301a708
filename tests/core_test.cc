// Tests of the core pieces every op builds on: dtype traits, the float16/bfloat16 conversions,
// shape helpers, scalar conversion and the reduction functors.
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/dtype.h"
#include "kernels/half.h"
#include "kernels/reduction.h"
#include "kernels/scalar.h"
#include "kernels/shape.h"
#include "kernels/tensor.h"
#include "kernels/tensor_memory.h"
#include "tests/reference.h"

namespace tensorops {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;

// ---------------------------------------------------------------------------------------------
// Dtype traits.

TEST(DataTypeTest, NamesAndItemSizes) {
  struct Expected {
    DataType dtype;
    const char* name;
    int64_t item_size;
  };
  const Expected expected[] = {
      {DataType::kBool, "bool", 1},           {DataType::kUInt8, "uint8", 1},
      {DataType::kInt8, "int8", 1},           {DataType::kInt16, "int16", 2},
      {DataType::kInt32, "int32", 4},         {DataType::kInt64, "int64", 8},
      {DataType::kFloat16, "float16", 2},     {DataType::kBFloat16, "bfloat16", 2},
      {DataType::kFloat32, "float32", 4},     {DataType::kFloat64, "float64", 8},
      {DataType::kComplex64, "complex64", 8}, {DataType::kComplex128, "complex128", 16},
  };
  ASSERT_EQ(std::size(kAllDataTypes), std::size(expected));
  for (size_t i = 0; i < std::size(expected); ++i) {
    SCOPED_TRACE(expected[i].name);
    EXPECT_EQ(kAllDataTypes[i], expected[i].dtype);
    EXPECT_EQ(DataTypeName(expected[i].dtype), expected[i].name);
    EXPECT_EQ(ItemSize(expected[i].dtype), expected[i].item_size);
    EXPECT_THAT(DataTypeFromName(expected[i].name), Optional(expected[i].dtype));
  }
}

TEST(DataTypeTest, ItemSizeMatchesStorageType) {
  EXPECT_EQ(ItemSize(DataType::kBool), sizeof(CppType<DataType::kBool>));
  EXPECT_EQ(ItemSize(DataType::kFloat16), sizeof(CppType<DataType::kFloat16>));
  EXPECT_EQ(ItemSize(DataType::kBFloat16), sizeof(CppType<DataType::kBFloat16>));
  EXPECT_EQ(ItemSize(DataType::kComplex64), sizeof(CppType<DataType::kComplex64>));
  EXPECT_EQ(ItemSize(DataType::kComplex128), sizeof(CppType<DataType::kComplex128>));
  static_assert(DataTypeOf<int16_t> == DataType::kInt16);
  static_assert(DataTypeOf<BFloat16> == DataType::kBFloat16);
  static_assert(DataTypeOf<std::complex<float>> == DataType::kComplex64);
}

TEST(DataTypeTest, FromNameRejectsUnknownNames) {
  EXPECT_EQ(DataTypeFromName("float"), std::nullopt);
  EXPECT_EQ(DataTypeFromName("Float32"), std::nullopt);
  EXPECT_EQ(DataTypeFromName(""), std::nullopt);
  EXPECT_EQ(DataTypeFromName("half"), std::nullopt);
}

TEST(DataTypeTest, Categories) {
  for (DataType dtype : kAllDataTypes) {
    SCOPED_TRACE(DataTypeName(dtype));
    const int categories = IsFloating(dtype) + IsComplex(dtype) + IsIntegral(dtype, true);
    EXPECT_EQ(categories, 1);
  }
  EXPECT_TRUE(IsIntegral(DataType::kBool, /*include_bool=*/true));
  EXPECT_FALSE(IsIntegral(DataType::kBool, /*include_bool=*/false));
  EXPECT_TRUE(IsIntegral(DataType::kUInt8, false));
  EXPECT_TRUE(IsFloating(DataType::kBFloat16));
  EXPECT_FALSE(IsFloating(DataType::kComplex64));
  EXPECT_TRUE(IsIndexType(DataType::kInt32));
  EXPECT_TRUE(IsIndexType(DataType::kInt64));
  EXPECT_FALSE(IsIndexType(DataType::kInt16));
  EXPECT_FALSE(IsIndexType(DataType::kUInt8));
}

// ---------------------------------------------------------------------------------------------
// float16 / bfloat16, checked against the test reference's frexp/ldexp conversion.

using testing::reference_internal::DoubleToMiniFloat;
using testing::reference_internal::kBFloatFormat;
using testing::reference_internal::kHalfFormat;
using testing::reference_internal::MiniFloatToDouble;

uint16_t HalfBits(float value) { return Float16(value).bits; }
uint16_t BFloatBits(float value) { return BFloat16(value).bits; }

TEST(HalfTest, EveryBitPatternRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const Float16 half = Float16::FromBits(static_cast<uint16_t>(bits));
    const float value = static_cast<float>(half);
    const double expected = MiniFloatToDouble(static_cast<uint16_t>(bits), kHalfFormat);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(value)) << "bits 0x" << std::hex << bits;
      const uint16_t back = Float16(value).bits;
      ASSERT_EQ(back & 0x7c00, 0x7c00) << "bits 0x" << std::hex << bits;
      ASSERT_NE(back & 0x03ff, 0) << "NaN became infinity: bits 0x" << std::hex << bits;
      continue;
    }
    ASSERT_EQ(static_cast<double>(value), expected) << "bits 0x" << std::hex << bits;
    ASSERT_EQ(std::signbit(value), (bits & 0x8000) != 0) << "bits 0x" << std::hex << bits;
    ASSERT_EQ(Float16(value).bits, bits) << "bits 0x" << std::hex << bits;
  }
}

TEST(HalfTest, RoundsToNearestEvenAtBoundaries) {
  EXPECT_EQ(HalfBits(65504.0f), 0x7bff);   // Largest finite.
  EXPECT_EQ(HalfBits(65519.99f), 0x7bff);  // Below the overflow tie.
  EXPECT_EQ(HalfBits(65520.0f), 0x7c00);   // Ties away to infinity.
  EXPECT_EQ(HalfBits(-65520.0f), 0xfc00);
  EXPECT_EQ(HalfBits(1e10f), 0x7c00);
  EXPECT_EQ(HalfBits(std::ldexp(1.0f, -14)), 0x0400);   // Smallest normal.
  EXPECT_EQ(HalfBits(std::ldexp(1.0f, -24)), 0x0001);   // Smallest subnormal.
  EXPECT_EQ(HalfBits(std::ldexp(1.0f, -25)), 0x0000);   // Tie to even: 0.
  EXPECT_EQ(HalfBits(-std::ldexp(1.0f, -25)), 0x8000);  // Keeps its sign.
  EXPECT_EQ(HalfBits(std::nextafter(std::ldexp(1.0f, -25), 1.0f)), 0x0001);
  EXPECT_EQ(HalfBits(3 * std::ldexp(1.0f, -25)), 0x0002);  // 1.5 ulp ties to even 2.
  EXPECT_EQ(HalfBits(std::ldexp(1.0f, -26)), 0x0000);
  EXPECT_EQ(HalfBits(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // Tie to even: 1.0.
  EXPECT_EQ(HalfBits(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // Tie to even: 1 + 2^-9.
  EXPECT_EQ(HalfBits(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)), 0x3c01);
  EXPECT_EQ(HalfBits(2047.0f * std::ldexp(1.0f, -24) / 2), 0x0400);  // Subnormal rounds up.
  EXPECT_EQ(HalfBits(0.0f), 0x0000);
  EXPECT_EQ(HalfBits(-0.0f), 0x8000);
  EXPECT_EQ(HalfBits(std::numeric_limits<float>::infinity()), 0x7c00);
  EXPECT_EQ(HalfBits(-std::numeric_limits<float>::infinity()), 0xfc00);
  const uint16_t nan = HalfBits(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7c00, 0x7c00);
  EXPECT_NE(nan & 0x03ff, 0);
  // A NaN whose payload lives only in the low float bits must not become infinity.
  const uint16_t low_payload_nan = HalfBits(std::bit_cast<float>(0x7f800001u));
  EXPECT_EQ(low_payload_nan & 0x7c00, 0x7c00);
  EXPECT_NE(low_payload_nan & 0x03ff, 0);
}

// Float -> half over a spread of float bit patterns (every 4099th), against the reference.
TEST(HalfTest, FloatToHalfMatchesReferenceRounding) {
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 4099) {
    const float value = std::bit_cast<float>(static_cast<uint32_t>(bits));
    if (std::isnan(value)) continue;
    ASSERT_EQ(HalfBits(value), DoubleToMiniFloat(value, kHalfFormat))
        << "float bits 0x" << std::hex << bits << " value " << value;
  }
}

TEST(BFloat16Test, EveryBitPatternRoundTrips) {
  for (uint32_t bits = 0; bits <= 0xffff; ++bits) {
    const BFloat16 bfloat = BFloat16::FromBits(static_cast<uint16_t>(bits));
    const float value = static_cast<float>(bfloat);
    const double expected = MiniFloatToDouble(static_cast<uint16_t>(bits), kBFloatFormat);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(value)) << "bits 0x" << std::hex << bits;
      const uint16_t back = BFloat16(value).bits;
      ASSERT_EQ(back & 0x7f80, 0x7f80) << "bits 0x" << std::hex << bits;
      ASSERT_NE(back & 0x007f, 0) << "NaN became infinity: bits 0x" << std::hex << bits;
      continue;
    }
    ASSERT_EQ(static_cast<double>(value), expected) << "bits 0x" << std::hex << bits;
    ASSERT_EQ(BFloat16(value).bits, bits) << "bits 0x" << std::hex << bits;
  }
}

TEST(BFloat16Test, RoundsToNearestEvenAtBoundaries) {
  EXPECT_EQ(BFloatBits(1.0f), 0x3f80);
  EXPECT_EQ(BFloatBits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);      // Tie to even: 1.0.
  EXPECT_EQ(BFloatBits(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);  // Tie to even upward.
  EXPECT_EQ(BFloatBits(std::nextafter(1.0f + std::ldexp(1.0f, -8), 2.0f)), 0x3f81);
  EXPECT_EQ(BFloatBits(std::bit_cast<float>(0x7f7f0000u)), 0x7f7f);  // Largest finite.
  EXPECT_EQ(BFloatBits(std::numeric_limits<float>::max()), 0x7f80);  // Rounds up to infinity.
  EXPECT_EQ(BFloatBits(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(BFloatBits(std::numeric_limits<float>::denorm_min()), 0x0000);  // Far below 2^-133.
  EXPECT_EQ(BFloatBits(std::bit_cast<float>(0x00010000u)), 0x0001);         // Subnormal kept.
  EXPECT_EQ(BFloatBits(-0.0f), 0x8000);
  EXPECT_EQ(BFloatBits(std::numeric_limits<float>::infinity()), 0x7f80);
  const uint16_t low_payload_nan = BFloatBits(std::bit_cast<float>(0x7f800001u));
  EXPECT_EQ(low_payload_nan & 0x7f80, 0x7f80);
  EXPECT_NE(low_payload_nan & 0x007f, 0) << "NaN became infinity";
  const uint16_t negative_nan = BFloatBits(std::bit_cast<float>(0xffc00000u));
  EXPECT_EQ(negative_nan & 0xff80, 0xff80);
  EXPECT_NE(negative_nan & 0x007f, 0);
}

TEST(BFloat16Test, FloatToBFloat16MatchesReferenceRounding) {
  for (uint64_t bits = 0; bits <= 0xffffffffu; bits += 4099) {
    const float value = std::bit_cast<float>(static_cast<uint32_t>(bits));
    if (std::isnan(value)) continue;
    ASSERT_EQ(BFloatBits(value), DoubleToMiniFloat(value, kBFloatFormat))
        << "float bits 0x" << std::hex << bits << " value " << value;
  }
}

// ---------------------------------------------------------------------------------------------
// Shapes.

TEST(ShapeTest, NumElements) {
  EXPECT_EQ(NumElements({}), 1);
  EXPECT_EQ(NumElements({0}), 0);
  EXPECT_EQ(NumElements({2, 3, 4}), 24);
  EXPECT_EQ(NumElements({5, 0, 7}), 0);
  // Sizes whose product overflows before a zero (fuzz/npy_fuzzer's finding; the sanitize tree's
  // UBSan fails on the overflow itself).
  EXPECT_EQ(NumElements({int64_t{1} << 40, int64_t{1} << 40, 0}), 0);
}

TEST(ShapeTest, CheckedNumElements) {
  EXPECT_THAT(CheckedNumElements({}, "x"), absl::StatusOr<int64_t>(1));
  EXPECT_EQ(*CheckedNumElements({2, 3}, "x"), 6);
  EXPECT_EQ(*CheckedNumElements({int64_t{1} << 31, 4}, "x"), int64_t{1} << 33);
  EXPECT_EQ(*CheckedNumElements({std::numeric_limits<int64_t>::max(), 1}, "x"),
            std::numeric_limits<int64_t>::max());

  const absl::StatusOr<int64_t> overflow =
      CheckedNumElements({int64_t{1} << 32, int64_t{1} << 32}, "scatter: input");
  ASSERT_FALSE(overflow.ok());
  EXPECT_EQ(overflow.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(overflow.status().message(), HasSubstr("scatter: input"));
  EXPECT_THAT(overflow.status().message(), HasSubstr("[4294967296, 4294967296]"));
  EXPECT_THAT(overflow.status().message(), HasSubstr("int64"));

  EXPECT_FALSE(CheckedNumElements({int64_t{1} << 62, 2}, "x").ok());
  EXPECT_FALSE(CheckedNumElements({3, int64_t{1} << 62}, "x").ok());
  // An overflowing product that a later zero makes empty is fine.
  EXPECT_EQ(*CheckedNumElements({int64_t{1} << 40, int64_t{1} << 40, 0}, "x"), 0);

  const absl::StatusOr<int64_t> negative = CheckedNumElements({2, -3}, "gather: index");
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(negative.status().message(), HasSubstr("gather: index"));
  EXPECT_THAT(negative.status().message(), HasSubstr("shape[1] = -3"));
  EXPECT_THAT(negative.status().message(), HasSubstr("negative"));
  EXPECT_FALSE(CheckedNumElements({0, -1}, "x").ok());
}

TEST(ShapeTest, ContiguousStrides) {
  EXPECT_EQ(ContiguousStrides({}), Shape{});
  EXPECT_EQ(ContiguousStrides({5}), Shape({1}));
  EXPECT_EQ(ContiguousStrides({2, 3, 4}), Shape({12, 4, 1}));
  EXPECT_EQ(ContiguousStrides({2, 0, 4}), Shape({0, 4, 1}));
  EXPECT_EQ(ContiguousStrides({1, 1}), Shape({1, 1}));
  // An empty tensor whose other sizes overflow together: no element is addressed, so the strides
  // past the overflow are 0 instead of the overflow's undefined value.
  EXPECT_EQ(ContiguousStrides({0, int64_t{1} << 40, int64_t{1} << 40}),
            Shape({0, int64_t{1} << 40, 1}));
}

TEST(ShapeTest, ShapeToString) {
  EXPECT_EQ(ShapeToString({}), "[]");
  EXPECT_EQ(ShapeToString({7}), "[7]");
  EXPECT_EQ(ShapeToString({2, 3}), "[2, 3]");
}

TEST(ShapeTest, BroadcastShapes) {
  EXPECT_EQ(*BroadcastShapes("op", "a", {3, 1}, "b", {1, 4}), Shape({3, 4}));
  EXPECT_EQ(*BroadcastShapes("op", "a", {}, "b", {2, 3}), Shape({2, 3}));
  EXPECT_EQ(*BroadcastShapes("op", "a", {5, 1, 3}, "b", {4, 1}), Shape({5, 4, 3}));
  EXPECT_EQ(*BroadcastShapes("op", "a", {0, 1}, "b", {1, 5}), Shape({0, 5}));
  EXPECT_EQ(*BroadcastShapes("op", "a", {1}, "b", {0}), Shape({0}));
  EXPECT_EQ(*BroadcastShapes("op", "a", {}, "b", {}), Shape{});

  const absl::StatusOr<Shape> error =
      BroadcastShapes("masked_scatter", "mask", {2, 3}, "input", {4, 3});
  ASSERT_FALSE(error.ok());
  EXPECT_EQ(error.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(error.status().message(), HasSubstr("masked_scatter: cannot broadcast"));
  EXPECT_THAT(error.status().message(), HasSubstr("mask of shape [2, 3]"));
  EXPECT_THAT(error.status().message(), HasSubstr("input of shape [4, 3]"));
  EXPECT_FALSE(BroadcastShapes("op", "a", {2}, "b", {0}).ok());
}

TEST(ShapeTest, CanBroadcastTo) {
  EXPECT_TRUE(CanBroadcastTo({}, {}));
  EXPECT_TRUE(CanBroadcastTo({}, {2, 3}));
  EXPECT_TRUE(CanBroadcastTo({1, 3}, {2, 3}));
  EXPECT_TRUE(CanBroadcastTo({3}, {2, 3}));
  EXPECT_TRUE(CanBroadcastTo({1}, {0}));
  EXPECT_FALSE(CanBroadcastTo({2, 3}, {3}));
  EXPECT_FALSE(CanBroadcastTo({2}, {2, 3}));
  EXPECT_FALSE(CanBroadcastTo({0}, {1}));
  EXPECT_FALSE(CanBroadcastTo({2, 3}, {1, 3}));
}

TEST(ShapeTest, BroadcastStrides) {
  EXPECT_EQ(BroadcastStrides({3, 1}, {1, 1}, {2, 3, 4}), Shape({0, 1, 0}));
  EXPECT_EQ(BroadcastStrides({2, 3}, {3, 1}, {2, 3}), Shape({3, 1}));
  EXPECT_EQ(BroadcastStrides({}, {}, {4}), Shape({0}));
  EXPECT_EQ(BroadcastStrides({1, 1}, {1, 1}, {1, 1}), Shape({1, 1}));
  EXPECT_EQ(BroadcastStrides({4}, {2}, {3, 4}), Shape({0, 2}));
}

TEST(ShapeTest, NormalizeAxis) {
  EXPECT_EQ(*NormalizeAxis("op", "axis", 0, 3), 0);
  EXPECT_EQ(*NormalizeAxis("op", "axis", 2, 3), 2);
  EXPECT_EQ(*NormalizeAxis("op", "axis", -1, 3), 2);
  EXPECT_EQ(*NormalizeAxis("op", "axis", -3, 3), 0);
  // Rank 0 behaves like rank 1.
  EXPECT_EQ(*NormalizeAxis("op", "axis", 0, 0), 0);
  EXPECT_EQ(*NormalizeAxis("op", "axis", -1, 0), 0);
  EXPECT_FALSE(NormalizeAxis("op", "axis", 1, 0).ok());
  EXPECT_FALSE(NormalizeAxis("op", "axis", -2, 0).ok());
  EXPECT_FALSE(NormalizeAxis("op", "axis", -4, 3).ok());

  const absl::StatusOr<int64_t> error = NormalizeAxis("gather", "axis", 3, 3);
  ASSERT_FALSE(error.ok());
  EXPECT_EQ(error.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(error.status().message(),
            "gather: axis = 3 is out of range for a tensor of rank 3 (expected -3 <= axis < 3)");
  const absl::StatusOr<int64_t> scalar_error = NormalizeAxis("scatter", "axis1", -2, 0);
  ASSERT_FALSE(scalar_error.ok());
  EXPECT_EQ(
      scalar_error.status().message(),
      "scatter: axis1 = -2 is out of range for a tensor of rank 0 (expected -1 <= axis1 < 1)");
}

TEST(ShapeTest, IndexHelpers) {
  EXPECT_EQ(WrapIndex(-1, 5), 4);
  EXPECT_EQ(WrapIndex(-5, 5), 0);
  EXPECT_EQ(WrapIndex(3, 5), 3);
  EXPECT_TRUE(InRange(-5, 5));
  EXPECT_TRUE(InRange(4, 5));
  EXPECT_FALSE(InRange(5, 5));
  EXPECT_FALSE(InRange(-6, 5));
  EXPECT_FALSE(InRange(0, 0));
  EXPECT_EQ(UnravelIndex(0, {}), Shape{});
  EXPECT_EQ(UnravelIndex(23, {2, 3, 4}), Shape({1, 2, 3}));
  EXPECT_EQ(UnravelIndex(5, {2, 3}), Shape({1, 2}));
}

// ---------------------------------------------------------------------------------------------
// Scalars.

template <typename T>
T ScalarValue(const Scalar& scalar, DataType dtype) {
  absl::StatusOr<Tensor> tensor = ScalarToTensor(scalar, dtype, "scatter", "value");
  EXPECT_TRUE(tensor.ok()) << tensor.status();
  if (!tensor.ok()) return T{};
  EXPECT_EQ(tensor->rank(), 0);
  EXPECT_EQ(tensor->dtype(), dtype);
  return *tensor->data_as<T>();
}

void ExpectScalarRejected(const Scalar& scalar, DataType dtype) {
  absl::StatusOr<Tensor> tensor = ScalarToTensor(scalar, dtype, "scatter", "value");
  ASSERT_FALSE(tensor.ok()) << scalar.ToString() << " -> " << DataTypeName(dtype);
  EXPECT_EQ(tensor.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tensor.status().message(), HasSubstr("scatter: value = "));
  EXPECT_THAT(tensor.status().message(), HasSubstr(DataTypeName(dtype)));
}

TEST(ScalarTest, FloatsTruncateTowardZeroIntoIntegers) {
  EXPECT_EQ(ScalarValue<int32_t>(Scalar(2.7), DataType::kInt32), 2);
  EXPECT_EQ(ScalarValue<int32_t>(Scalar(-2.7), DataType::kInt32), -2);
  EXPECT_EQ(ScalarValue<int8_t>(Scalar(-128.9), DataType::kInt8), -128);
  EXPECT_EQ(ScalarValue<uint8_t>(Scalar(255.5), DataType::kUInt8), 255);
  EXPECT_EQ(ScalarValue<int64_t>(Scalar(-0.5), DataType::kInt64), 0);
  EXPECT_EQ(ScalarValue<int64_t>(Scalar(9223372036854774784.0), DataType::kInt64),
            int64_t{9223372036854774784});
}

TEST(ScalarTest, IntegersConvertExactly) {
  EXPECT_EQ(ScalarValue<int64_t>(Scalar(std::numeric_limits<int64_t>::min()), DataType::kInt64),
            std::numeric_limits<int64_t>::min());
  EXPECT_EQ(ScalarValue<int8_t>(Scalar(int64_t{127}), DataType::kInt8), 127);
  EXPECT_EQ(ScalarValue<int16_t>(Scalar(int64_t{-32768}), DataType::kInt16), -32768);
  EXPECT_EQ(ScalarValue<double>(Scalar(int64_t{-3}), DataType::kFloat64), -3.0);
  EXPECT_EQ(ScalarValue<float>(Scalar(true), DataType::kFloat32), 1.0f);
  EXPECT_EQ(ScalarValue<int32_t>(Scalar(false), DataType::kInt32), 0);
  EXPECT_EQ(ScalarValue<Float16>(Scalar(int64_t{3}), DataType::kFloat16).bits, 0x4200);
  EXPECT_EQ(ScalarValue<BFloat16>(Scalar(-2.0), DataType::kBFloat16).bits, 0xc000);
  EXPECT_EQ(ScalarValue<std::complex<float>>(Scalar(1.5), DataType::kComplex64),
            std::complex<float>(1.5f, 0.0f));
  EXPECT_EQ(
      ScalarValue<std::complex<double>>(Scalar(std::complex<double>(1, -2)), DataType::kComplex128),
      std::complex<double>(1, -2));
}

TEST(ScalarTest, AnythingNonzeroIsTrueForBool) {
  EXPECT_TRUE(ScalarValue<bool>(Scalar(int64_t{5}), DataType::kBool));
  EXPECT_TRUE(ScalarValue<bool>(Scalar(int64_t{-1}), DataType::kBool));
  EXPECT_FALSE(ScalarValue<bool>(Scalar(int64_t{0}), DataType::kBool));
  EXPECT_TRUE(ScalarValue<bool>(Scalar(0.5), DataType::kBool));
  EXPECT_FALSE(ScalarValue<bool>(Scalar(0.0), DataType::kBool));
  EXPECT_TRUE(ScalarValue<bool>(Scalar(true), DataType::kBool));
}

TEST(ScalarTest, OutOfRangeIsRejected) {
  ExpectScalarRejected(Scalar(int64_t{300}), DataType::kUInt8);
  ExpectScalarRejected(Scalar(300.0), DataType::kUInt8);
  ExpectScalarRejected(Scalar(int64_t{128}), DataType::kInt8);
  ExpectScalarRejected(Scalar(int64_t{-129}), DataType::kInt8);
  ExpectScalarRejected(Scalar(int64_t{1} << 31), DataType::kInt32);
  ExpectScalarRejected(Scalar(std::ldexp(1.0, 63)), DataType::kInt64);
  ExpectScalarRejected(Scalar(-std::ldexp(1.0, 64)), DataType::kInt64);
  ExpectScalarRejected(Scalar(std::numeric_limits<double>::quiet_NaN()), DataType::kInt32);
  ExpectScalarRejected(Scalar(std::numeric_limits<double>::infinity()), DataType::kInt64);
  ExpectScalarRejected(Scalar(std::complex<double>(1, 2)), DataType::kFloat32);
}

// c10's `overflows` lets negative values down to -max into unsigned types, wrapping (so -1 is 255
// in uint8, as `torch.zeros(1, dtype=torch.uint8).fill_(-1)` gives).
TEST(ScalarTest, NegativeValuesWrapIntoUnsignedDownToMinusMax) {
  EXPECT_EQ(ScalarValue<uint8_t>(Scalar(int64_t{-1}), DataType::kUInt8), 255);
  EXPECT_EQ(ScalarValue<uint8_t>(Scalar(int64_t{-255}), DataType::kUInt8), 1);
  EXPECT_EQ(ScalarValue<uint8_t>(Scalar(-1.5), DataType::kUInt8), 255);
  ExpectScalarRejected(Scalar(int64_t{-256}), DataType::kUInt8);
  ExpectScalarRejected(Scalar(-256.0), DataType::kUInt8);
  EXPECT_EQ(ScalarValue<int64_t>(Scalar(std::numeric_limits<int64_t>::max()), DataType::kInt64),
            std::numeric_limits<int64_t>::max());
}

TEST(ScalarTest, ErrorMessageNamesOpArgumentValueAndDtype) {
  const absl::StatusOr<Tensor> tensor =
      ScalarToTensor(Scalar(int64_t{300}), DataType::kUInt8, "index_reduce", "alpha");
  ASSERT_FALSE(tensor.ok());
  EXPECT_THAT(tensor.status().message(), HasSubstr("index_reduce: alpha = 300"));
  EXPECT_THAT(tensor.status().message(), HasSubstr("uint8"));
}

// PyTorch's Scalar conversion (c10::checked_convert) rejects a finite value beyond the target
// floating type's range ("value cannot be converted to type at::Half without overflow"), while
// infinities and NaN pass through.
TEST(ScalarTest, FiniteValueBeyondFloatingRangeIsRejected) {
  ExpectScalarRejected(Scalar(1e6), DataType::kFloat16);
  ExpectScalarRejected(Scalar(int64_t{100000}), DataType::kFloat16);
  ExpectScalarRejected(Scalar(1e300), DataType::kFloat32);
  ExpectScalarRejected(Scalar(1e300), DataType::kBFloat16);
  EXPECT_EQ(ScalarValue<Float16>(Scalar(65504.0), DataType::kFloat16).bits, 0x7bff);
  EXPECT_EQ(
      ScalarValue<Float16>(Scalar(std::numeric_limits<double>::infinity()), DataType::kFloat16)
          .bits,
      0x7c00);
  EXPECT_TRUE(std::isnan(
      ScalarValue<float>(Scalar(std::numeric_limits<double>::quiet_NaN()), DataType::kFloat32)));
}

// ---------------------------------------------------------------------------------------------
// Reductions.

TEST(ReductionTest, ParseReductionAcceptsNamesAndAliases) {
  EXPECT_THAT(ParseReduction("assign"), Optional(Reduction::kAssign));
  EXPECT_THAT(ParseReduction("update"), Optional(Reduction::kAssign));
  EXPECT_THAT(ParseReduction("SUM"), Optional(Reduction::kSum));
  EXPECT_THAT(ParseReduction("add"), Optional(Reduction::kSum));
  EXPECT_THAT(ParseReduction("prod"), Optional(Reduction::kProd));
  EXPECT_THAT(ParseReduction("mul"), Optional(Reduction::kProd));
  EXPECT_THAT(ParseReduction("Multiply"), Optional(Reduction::kProd));
  EXPECT_THAT(ParseReduction("mean"), Optional(Reduction::kMean));
  EXPECT_THAT(ParseReduction("amax"), Optional(Reduction::kAmax));
  EXPECT_THAT(ParseReduction("max"), Optional(Reduction::kAmax));
  EXPECT_THAT(ParseReduction("AMIN"), Optional(Reduction::kAmin));
  EXPECT_THAT(ParseReduction("min"), Optional(Reduction::kAmin));
  EXPECT_EQ(ParseReduction(""), std::nullopt);
  EXPECT_EQ(ParseReduction("average"), std::nullopt);
  EXPECT_EQ(ParseReduction("sum "), std::nullopt);
}

TEST(ReductionTest, NamesRoundTrip) {
  for (Reduction reduction : {Reduction::kAssign, Reduction::kSum, Reduction::kProd,
                              Reduction::kMean, Reduction::kAmax, Reduction::kAmin}) {
    EXPECT_THAT(ParseReduction(ReductionName(reduction)), Optional(reduction));
  }
  EXPECT_EQ(ReductionName(Reduction::kSum), "SUM");
  EXPECT_EQ(ReductionName(Reduction::kAmin), "AMIN");
}

TEST(ReductionTest, FloorDivide) {
  EXPECT_EQ(FloorDivide<int64_t>(-7, 2), -4);  // Mean of -3 and -4.
  EXPECT_EQ(FloorDivide<int64_t>(7, 2), 3);
  EXPECT_EQ(FloorDivide<int64_t>(-8, 2), -4);
  EXPECT_EQ(FloorDivide<int64_t>(-1, 3), -1);
  EXPECT_EQ(FloorDivide<int64_t>(0, 3), 0);
  EXPECT_EQ(FloorDivide<int8_t>(-128, 3), -43);
  EXPECT_EQ(FloorDivide<int32_t>(-7, 1), -7);
  EXPECT_EQ(FloorDivide<uint8_t>(250, 3), 83);
  EXPECT_EQ(FloorDivide<int64_t>(std::numeric_limits<int64_t>::min(), 2),
            std::numeric_limits<int64_t>::min() / 2);
}

// The host's FloorDivide divides in double where that is exact (|dividend| < 2^53); checked against
// the integer definition around zero, at the 2^53 boundary on both sides, and on random operands
// of every magnitude.
TEST(ReductionTest, FloorDivideMatchesIntegerFloorEverywhere) {
  const auto floor_divide = [](int64_t a, int64_t n) {
    const int64_t q = a / n;
    return (a % n != 0 && a < 0) ? q - 1 : q;
  };
  int64_t checked = 0;
  const auto expect = [&](int64_t a, int64_t n) {
    ASSERT_EQ(FloorDivide<int64_t>(a, n), floor_divide(a, n)) << a << " / " << n;
    ++checked;
  };
  for (int64_t a = -1000; a <= 1000; ++a) {
    for (int64_t n = 1; n <= 100; ++n) expect(a, n);
  }
  constexpr int64_t kBoundary = int64_t{1} << 53;
  for (int64_t near : {kBoundary, -kBoundary, std::numeric_limits<int64_t>::max(),
                       std::numeric_limits<int64_t>::min()}) {
    for (int64_t delta = -3; delta <= 3; ++delta) {
      // Across 2^53 and -2^53; up to the type's ends.
      const int64_t a = near == std::numeric_limits<int64_t>::max()   ? near - 3 + delta
                        : near == std::numeric_limits<int64_t>::min() ? near + 3 + delta
                                                                      : near + delta;
      for (int64_t n :
           {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{7}, int64_t{1000003}, kBoundary - 1,
            kBoundary, kBoundary + 1, std::numeric_limits<int64_t>::max()}) {
        expect(a, n);
      }
    }
  }
  std::mt19937_64 rng(7);
  for (int k = 0; k < 200000; ++k) {
    const int64_t a = static_cast<int64_t>(rng()) >> (rng() % 64);
    const int64_t n = std::max<int64_t>(1, static_cast<int64_t>(rng() >> 1) >> (rng() % 63));
    expect(a, n);
  }
  EXPECT_EQ(checked, 2001 * 100 + 4 * 7 * 9 + 200000);
  EXPECT_EQ(FloorDivide<int8_t>(-127, 2), -64);
  EXPECT_EQ(FloorDivide<uint8_t>(255, 2), 127);
}

TEST(ReductionTest, IdentityValues) {
  EXPECT_EQ((Identity<SumOp, float>()), 0.0f);
  EXPECT_EQ((Identity<SumOp, int8_t>()), 0);
  EXPECT_EQ((Identity<SumOp, bool>()), false);
  EXPECT_EQ((Identity<ProdOp, int32_t>()), 1);
  EXPECT_EQ((Identity<ProdOp, double>()), 1.0);
  EXPECT_EQ((Identity<ProdOp, bool>()), true);
  EXPECT_EQ((Identity<ProdOp, Float16>().bits), 0x3c00);
  EXPECT_EQ((Identity<ProdOp, BFloat16>().bits), 0x3f80);
  EXPECT_EQ((Identity<ProdOp, std::complex<float>>()), std::complex<float>(1, 0));
  EXPECT_EQ((Identity<MaxOp, float>()), -std::numeric_limits<float>::infinity());
  EXPECT_EQ((Identity<MinOp, double>()), std::numeric_limits<double>::infinity());
  EXPECT_EQ((Identity<MaxOp, int8_t>()), -128);
  EXPECT_EQ((Identity<MinOp, int8_t>()), 127);
  EXPECT_EQ((Identity<MaxOp, uint8_t>()), 0);
  EXPECT_EQ((Identity<MinOp, uint8_t>()), 255);
  EXPECT_EQ((Identity<MaxOp, int64_t>()), std::numeric_limits<int64_t>::min());
  EXPECT_EQ((Identity<MaxOp, bool>()), false);
  EXPECT_EQ((Identity<MinOp, bool>()), true);
  EXPECT_EQ((Identity<MaxOp, Float16>().bits), 0xfc00);
  EXPECT_EQ((Identity<MinOp, Float16>().bits), 0x7c00);
  EXPECT_EQ((Identity<MaxOp, BFloat16>().bits), 0xff80);
  EXPECT_EQ((Identity<MinOp, BFloat16>().bits), 0x7f80);
}

template <typename Op, typename T>
T Apply(T dest, T value) {
  Op{}(dest, value);
  return dest;
}

TEST(ReductionTest, MaxAndMinPropagateNanFromEitherSide) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(Apply<MaxOp>(nan, 1.0f)));
  EXPECT_TRUE(std::isnan(Apply<MaxOp>(1.0f, nan)));
  EXPECT_TRUE(std::isnan(Apply<MinOp>(nan, 1.0f)));
  EXPECT_TRUE(std::isnan(Apply<MinOp>(1.0f, nan)));
  EXPECT_TRUE(std::isnan(Apply<MaxOp>(-std::numeric_limits<double>::infinity(),
                                      std::numeric_limits<double>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(static_cast<float>(Apply<MaxOp>(Float16(nan), Float16(3.0f)))));
  EXPECT_TRUE(std::isnan(static_cast<float>(Apply<MaxOp>(Float16(3.0f), Float16(nan)))));
  EXPECT_TRUE(std::isnan(static_cast<float>(Apply<MinOp>(BFloat16(nan), BFloat16(3.0f)))));
  EXPECT_TRUE(std::isnan(static_cast<float>(Apply<MinOp>(BFloat16(3.0f), BFloat16(nan)))));
  EXPECT_EQ(Apply<MaxOp>(2.0f, 3.0f), 3.0f);
  EXPECT_EQ(Apply<MaxOp>(3.0f, 2.0f), 3.0f);
  EXPECT_EQ(Apply<MinOp>(2.0f, 3.0f), 2.0f);
  EXPECT_EQ(static_cast<float>(Apply<MaxOp>(Float16(-1.5f), Float16(0.5f))), 0.5f);
  EXPECT_EQ((Apply<MaxOp, int8_t>(-3, -4)), -3);
  EXPECT_EQ((Apply<MinOp, uint8_t>(200, 3)), 3);
}

TEST(ReductionTest, BoolReductionsAreLogical) {
  EXPECT_TRUE(Apply<SumOp>(false, true));
  EXPECT_TRUE(Apply<SumOp>(true, true));
  EXPECT_FALSE(Apply<SumOp>(false, false));
  EXPECT_FALSE(Apply<ProdOp>(true, false));
  EXPECT_TRUE(Apply<ProdOp>(true, true));
  EXPECT_TRUE(Apply<MaxOp>(false, true));
  EXPECT_FALSE(Apply<MinOp>(true, false));
  EXPECT_TRUE(Apply<MinOp>(true, true));
}

TEST(ReductionTest, SumAndProdWrapForSmallIntegers) {
  EXPECT_EQ((Apply<SumOp, int8_t>(127, 1)), -128);
  EXPECT_EQ((Apply<SumOp, uint8_t>(255, 2)), 1);
  EXPECT_EQ((Apply<ProdOp, int8_t>(64, 4)), 0);
  EXPECT_EQ((Apply<ProdOp, int16_t>(-3, 5)), -15);
  EXPECT_EQ(Apply<SumOp>(std::complex<double>(1, 2), std::complex<double>(3, -1)),
            std::complex<double>(4, 1));
  EXPECT_EQ(Apply<ProdOp>(std::complex<double>(0, 1), std::complex<double>(0, 1)),
            std::complex<double>(-1, 0));
}

TEST(ReductionTest, DispatchReductionPicksTheFunctor) {
  auto name_of = [](Reduction reduction) {
    return DispatchReduction(reduction, []<typename Op>(Op) -> std::string {
      if constexpr (std::is_same_v<Op, AssignOp>) return "assign";
      if constexpr (std::is_same_v<Op, SumOp>) return "sum";
      if constexpr (std::is_same_v<Op, ProdOp>) return "prod";
      if constexpr (std::is_same_v<Op, MaxOp>) return "max";
      if constexpr (std::is_same_v<Op, MinOp>) return "min";
      return "?";
    });
  };
  EXPECT_EQ(name_of(Reduction::kAssign), "assign");
  EXPECT_EQ(name_of(Reduction::kSum), "sum");
  EXPECT_EQ(name_of(Reduction::kMean), "sum");
  EXPECT_EQ(name_of(Reduction::kProd), "prod");
  EXPECT_EQ(name_of(Reduction::kAmax), "max");
  EXPECT_EQ(name_of(Reduction::kAmin), "min");
}

// ---------------------------------------------------------------------------------------------
// Tensors (the container the reference shares).

TEST(TensorTest, ZerosAndViews) {
  Tensor zeros = Tensor::Zeros(DataType::kFloat32, {2, 3});
  EXPECT_EQ(zeros.numel(), 6);
  EXPECT_EQ(zeros.nbytes(), 24);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(zeros.data_as<float>()[i], 0.0f);
  const TensorView view = zeros.view();
  EXPECT_EQ(view.strides(), Shape({3, 1}));
  EXPECT_TRUE(view.is_contiguous());
  const TensorView transposed(DataType::kFloat32, {3, 2}, {1, 3}, zeros.data());
  EXPECT_FALSE(transposed.is_contiguous());
  Tensor empty(DataType::kInt64, {0, 4});
  EXPECT_EQ(empty.numel(), 0);
  EXPECT_NE(empty.data(), nullptr);
  Tensor scalar(DataType::kInt8, {});
  EXPECT_EQ(scalar.numel(), 1);
}

TEST(TensorTest, FromViewCopiesStridedAndBroadcastViews) {
  Tensor source = testing::TensorFromValues(DataType::kInt32, {2, 3}, {1, 2, 3, 4, 5, 6});
  const TensorView transposed(DataType::kInt32, {3, 2}, {1, 3}, source.data());
  Tensor copy = Tensor::FromView(transposed);
  EXPECT_EQ(testing::ToDoubles(copy), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  const TensorView broadcast(DataType::kInt32, {2, 3}, {0, 1}, source.data());
  EXPECT_EQ(testing::ToDoubles(Tensor::FromView(broadcast)),
            (std::vector<double>{1, 2, 3, 1, 2, 3}));
  EXPECT_EQ(testing::ToDoubles(source.Clone()), (std::vector<double>{1, 2, 3, 4, 5, 6}));
}

// A view of device memory keeps saying so through every view derived from it, and every host
// path that would read or write its elements throws DeviceMemoryOnHost (which the server turns
// into the call's INTERNAL error) instead of touching the memory. The address is one no process
// maps: a read through it would crash the test.
TEST(MemorySpaceTest, HostPathsRefuseViewsOfDeviceMemory) {
  const void* device_address = reinterpret_cast<const void*>(uintptr_t{1} << 62);
  const TensorView device =
      TensorView(DataType::kFloat32, {2, 3}, device_address).InSpace(MemorySpace::kDevice);
  EXPECT_TRUE(device.on_device());
  EXPECT_TRUE(device.Relaid(Shape{3, 2}, Shape{1, 3}).on_device());
  EXPECT_TRUE(device.Relaid(DataType::kInt32, Shape{6}, Shape{1}).on_device());
  EXPECT_EQ(device.device_data_as<float>(), device_address);  // a launch's pointer, unchecked
  EXPECT_THROW(device.data_as<float>(), DeviceMemoryOnHost);
  EXPECT_THROW(Tensor::FromView(device), DeviceMemoryOnHost);
  Tensor host(DataType::kFloat32, {2, 3});
  EXPECT_THROW(CopyElements(device, host.mutable_view()), DeviceMemoryOnHost);
  const MutableTensorView device_out =
      MutableTensorView(DataType::kFloat32, {2, 3}, const_cast<void*>(device_address))
          .InSpace(MemorySpace::kDevice);
  EXPECT_THROW(CopyElements(host.view(), device_out), DeviceMemoryOnHost);
  EXPECT_THROW(device_out.data_as<float>(), DeviceMemoryOnHost);
  EXPECT_TRUE(static_cast<TensorView>(device_out).on_device());
  try {
    Tensor::FromView(device);
    ADD_FAILURE() << "FromView read device memory";
  } catch (const DeviceMemoryOnHost& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("Tensor::FromView: the tensor is in device memory"));
  }

  // Planning that needs an operand's elements refuses device memory with a status the server
  // recognizes (it then copies the operands to the host and plans again).
  const absl::Status refused = RequireHostBytes("index_reduce", "src", device);
  EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.message(), ::testing::HasSubstr("index_reduce: src is in device memory"));
  EXPECT_TRUE(NeedsHostBytes(refused));
  EXPECT_FALSE(NeedsHostBytes(absl::FailedPreconditionError("index_reduce: other")));
  EXPECT_TRUE(RequireHostBytes("index_reduce", "src", host.view()).ok());
  // Host views are unchanged by it all.
  EXPECT_FALSE(host.view().on_device());
  EXPECT_FALSE(host.view().Relaid(Shape{6}, Shape{1}).on_device());
}

}  // namespace
}  // namespace tensorops
