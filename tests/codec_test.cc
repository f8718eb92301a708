// Tests of the wire codec (proto/codec.h) and the status mapping (proto/grpc_status.h): every
// malformed wire tensor is rejected with the right code and a message naming the op, argument and
// value; valid tensors of every dtype round-trip without copies on decode.
#include "proto/codec.h"

#include <complex>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "grpcpp/support/status.h"
#include "gtest/gtest.h"
#include "kernels/dtype.h"
#include "kernels/tensor.h"
#include "proto/grpc_status.h"

namespace tensorops::wire {
namespace {

using ::testing::HasSubstr;

// WireTensor builds a wire tensor from raw parts, valid or not.
v1::Tensor WireTensor(int dtype, std::vector<int64_t> shape, std::string data) {
  v1::Tensor tensor;
  tensor.set_dtype(static_cast<v1::DataType>(dtype));
  for (int64_t size : shape) tensor.add_shape(size);
  tensor.set_data(std::move(data));
  return tensor;
}

// RandomTensor returns a tensor of `dtype` whose bytes are random (0/1 for bool, so it is valid).
Tensor RandomTensor(DataType dtype, ShapeSpan shape, absl::BitGen& gen) {
  Tensor tensor(dtype, shape);
  auto* bytes = static_cast<uint8_t*>(tensor.data());
  for (int64_t i = 0; i < tensor.nbytes(); ++i) {
    bytes[i] =
        dtype == DataType::kBool ? absl::Uniform<int>(gen, 0, 2) : absl::Uniform<int>(gen, 0, 256);
  }
  return tensor;
}

void ExpectError(const absl::Status& status, absl::StatusCode code, const std::string& substring) {
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_THAT(std::string(status.message()), HasSubstr(substring));
}

const DecodeLimits kNoLimits;

// --- Round trips -------------------------------------------------------------------------------

class CodecRoundTripTest : public ::testing::TestWithParam<DataType> {};

TEST_P(CodecRoundTripTest, EncodeThenDecodeKeepsDtypeShapeAndBytes) {
  const DataType dtype = GetParam();
  absl::BitGen gen;
  const Tensor tensor = RandomTensor(dtype, Shape{2, 3, 4}, gen);

  v1::Tensor wire;
  EncodeTensor(tensor.view(), &wire);
  EXPECT_EQ(wire.dtype(), DataTypeToProto(dtype));
  EXPECT_THAT(wire.shape(), ::testing::ElementsAre(2, 3, 4));
  ASSERT_EQ(static_cast<int64_t>(wire.data().size()), tensor.nbytes());
  EXPECT_EQ(std::memcmp(wire.data().data(), tensor.data(), tensor.nbytes()), 0);

  absl::StatusOr<TensorView> view = DecodeTensor(wire, "gather", "input", kNoLimits);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->dtype(), dtype);
  EXPECT_EQ(view->shape(), tensor.shape());
  EXPECT_TRUE(view->is_contiguous());
  // Decoding must not copy: the view points into the message's bytes.
  EXPECT_EQ(view->data(), static_cast<const void*>(wire.data().data()));
}

TEST_P(CodecRoundTripTest, RankZeroHoldsOneElement) {
  const DataType dtype = GetParam();
  absl::BitGen gen;
  const Tensor tensor = RandomTensor(dtype, Shape{}, gen);
  v1::Tensor wire;
  EncodeTensor(tensor.view(), &wire);
  EXPECT_EQ(wire.shape_size(), 0);
  EXPECT_EQ(static_cast<int64_t>(wire.data().size()), ItemSize(dtype));

  absl::StatusOr<TensorView> view = DecodeTensor(wire, "gather", "input", kNoLimits);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->rank(), 0);
  EXPECT_EQ(view->numel(), 1);
  EXPECT_EQ(std::memcmp(view->data(), tensor.data(), ItemSize(dtype)), 0);
}

TEST_P(CodecRoundTripTest, ZeroElementsHaveNoBytes) {
  const DataType dtype = GetParam();
  const Tensor tensor(dtype, Shape{3, 0, 2});
  v1::Tensor wire;
  EncodeTensor(tensor.view(), &wire);
  EXPECT_THAT(wire.shape(), ::testing::ElementsAre(3, 0, 2));
  EXPECT_TRUE(wire.data().empty());

  absl::StatusOr<TensorView> view = DecodeTensor(wire, "gather", "input", kNoLimits);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->numel(), 0);
  EXPECT_EQ(view->shape(), (Shape{3, 0, 2}));
}

TEST_P(CodecRoundTripTest, DataTypeMapsBothWays) {
  const DataType dtype = GetParam();
  absl::StatusOr<DataType> back = DataTypeFromProto(DataTypeToProto(dtype), "gather", "input");
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, dtype);
}

TEST_P(CodecRoundTripTest, AllocateWritesLandInTheMessage) {
  const DataType dtype = GetParam();
  v1::Tensor wire;
  const Shape shape = {4, 5};
  const MutableTensorView out = AllocateTensor(dtype, shape, &wire);
  EXPECT_EQ(wire.dtype(), DataTypeToProto(dtype));
  EXPECT_THAT(wire.shape(), ::testing::ElementsAre(4, 5));
  ASSERT_EQ(static_cast<int64_t>(wire.data().size()), 20 * ItemSize(dtype));
  EXPECT_EQ(out.data(), static_cast<const void*>(wire.data().data()));
  EXPECT_EQ(out.shape(), shape);

  // A byte pattern valid for every dtype (bool included): 1 in the first byte of each element.
  auto* bytes = static_cast<uint8_t*>(out.data());
  for (int64_t i = 0; i < 20; ++i) bytes[i * ItemSize(dtype)] = 1;
  absl::StatusOr<TensorView> view = DecodeTensor(wire, "gather", "result", kNoLimits);
  ASSERT_TRUE(view.ok()) << view.status();
  for (int64_t i = 0; i < 20; ++i) {
    EXPECT_EQ(static_cast<const uint8_t*>(view->data())[i * ItemSize(dtype)], 1) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(AllDataTypes, CodecRoundTripTest, ::testing::ValuesIn(kAllDataTypes),
                         [](const ::testing::TestParamInfo<DataType>& info) {
                           return std::string(DataTypeName(info.param));
                         });

TEST(CodecTest, EncodeOfAStridedViewWritesRowMajor) {
  // [[0, 1, 2], [3, 4, 5]] viewed transposed is [[0, 3], [1, 4], [2, 5]].
  const std::vector<int32_t> values = {0, 1, 2, 3, 4, 5};
  const TensorView transposed(DataType::kInt32, Shape{3, 2}, Shape{1, 3}, values.data());
  v1::Tensor wire;
  EncodeTensor(transposed, &wire);
  std::vector<int32_t> row_major(6);
  ASSERT_EQ(wire.data().size(), 6 * sizeof(int32_t));
  std::memcpy(row_major.data(), wire.data().data(), wire.data().size());
  EXPECT_THAT(row_major, ::testing::ElementsAre(0, 3, 1, 4, 2, 5));
}

TEST(CodecTest, MaximumRankIsAccepted) {
  const std::vector<int64_t> shape(16, 1);
  absl::StatusOr<TensorView> view = DecodeTensor(
      WireTensor(v1::DATA_TYPE_INT8, shape, std::string(1, '\x07')), "gather", "input", kNoLimits);
  ASSERT_TRUE(view.ok()) << view.status();
  EXPECT_EQ(view->rank(), 16);
}

// --- Malformed tensors -------------------------------------------------------------------------

TEST(CodecErrorTest, UnspecifiedDtype) {
  ExpectError(DecodeTensor(WireTensor(0, {1}, "x"), "gather", "input", kNoLimits).status(),
              absl::StatusCode::kInvalidArgument, "gather: input.dtype = 0 is not a known dtype");
}

TEST(CodecErrorTest, UnknownDtype) {
  ExpectError(DecodeTensor(WireTensor(99, {1}, "x"), "scatter", "src", kNoLimits).status(),
              absl::StatusCode::kInvalidArgument, "scatter: src.dtype = 99 is not a known dtype");
  ExpectError(DecodeTensor(WireTensor(-1, {1}, "x"), "scatter", "src", kNoLimits).status(),
              absl::StatusCode::kInvalidArgument, "scatter: src.dtype = -1 is not a known dtype");
}

TEST(CodecErrorTest, NegativeSize) {
  ExpectError(
      DecodeTensor(WireTensor(v1::DATA_TYPE_FLOAT32, {3, -2}, ""), "scatter", "input", kNoLimits)
          .status(),
      absl::StatusCode::kInvalidArgument, "scatter: input.shape[1] = -2 is negative");
}

TEST(CodecErrorTest, RankAboveSixteen) {
  const std::vector<int64_t> shape(17, 1);
  ExpectError(DecodeTensor(WireTensor(v1::DATA_TYPE_INT8, shape, "x"), "gather", "input", kNoLimits)
                  .status(),
              absl::StatusCode::kInvalidArgument, "gather: input has rank 17 > 16");
}

TEST(CodecErrorTest, RankAboveConfiguredLimit) {
  DecodeLimits limits;
  limits.max_rank = 2;
  ExpectError(
      DecodeTensor(WireTensor(v1::DATA_TYPE_INT8, {1, 1, 1}, "x"), "gather", "index", limits)
          .status(),
      absl::StatusCode::kResourceExhausted, "gather: index has rank 3 > 2");
  ExpectError(
      DecodeTensor(WireTensor(v1::DATA_TYPE_INT8, {1, 1, 1}, "x"), "gather", "index", limits)
          .status(),
      absl::StatusCode::kResourceExhausted, "--max_rank");
}

TEST(CodecErrorTest, ElementCountOverflowsInt64) {
  const int64_t big = int64_t{1} << 40;
  ExpectError(
      DecodeTensor(WireTensor(v1::DATA_TYPE_UINT8, {big, big}, ""), "gather", "input", kNoLimits)
          .status(),
      absl::StatusCode::kInvalidArgument,
      "gather: input.shape [1099511627776, 1099511627776] has more elements than fit in int64");
}

TEST(CodecErrorTest, OverflowingSizesAreRejectedEvenBesideAZero) {
  // No elements, but row-major strides of 2^80 would overflow the kernels' 64-bit offsets.
  const int64_t big = int64_t{1} << 40;
  ExpectError(
      DecodeTensor(WireTensor(v1::DATA_TYPE_UINT8, {0, big, big}, ""), "gather", "input", kNoLimits)
          .status(),
      absl::StatusCode::kInvalidArgument, "more elements than fit in int64");
}

TEST(CodecErrorTest, ByteSizeOverflowsInt64) {
  // 2^62 elements fit in int64; 2^62 * 8 bytes do not.
  const int64_t size = int64_t{1} << 31;
  ExpectError(
      DecodeTensor(WireTensor(v1::DATA_TYPE_FLOAT64, {size, size}, ""), "scatter", "src", kNoLimits)
          .status(),
      absl::StatusCode::kInvalidArgument,
      "scatter: src.shape [2147483648, 2147483648] of float64 has more bytes than fit in "
      "int64");
}

TEST(CodecErrorTest, DataTooShort) {
  ExpectError(DecodeTensor(WireTensor(v1::DATA_TYPE_INT64, {2, 3}, std::string(12, '\0')), "gather",
                           "index", kNoLimits)
                  .status(),
              absl::StatusCode::kInvalidArgument,
              "gather: index.data has 12 bytes but shape [2, 3] of int64 needs 48");
}

TEST(CodecErrorTest, DataTooLong) {
  ExpectError(DecodeTensor(WireTensor(v1::DATA_TYPE_FLOAT32, {}, std::string(5, '\0')), "scatter",
                           "input", kNoLimits)
                  .status(),
              absl::StatusCode::kInvalidArgument,
              "scatter: input.data has 5 bytes but shape [] of float32 needs 4");
}

TEST(CodecErrorTest, BoolByteNotZeroOrOne) {
  std::string data = {0, 1, 1, 0, 1, 2, 1};
  ExpectError(DecodeTensor(WireTensor(v1::DATA_TYPE_BOOL, {7}, data), "gather", "input", kNoLimits)
                  .status(),
              absl::StatusCode::kInvalidArgument,
              "gather: input.data[5] = 2 is not a valid bool (0 or 1)");
  data[5] = '\xff';
  ExpectError(DecodeTensor(WireTensor(v1::DATA_TYPE_BOOL, {7}, data), "gather", "input", kNoLimits)
                  .status(),
              absl::StatusCode::kInvalidArgument, "input.data[5] = 255 is not a valid bool");
}

TEST(CodecErrorTest, ElementLimit) {
  DecodeLimits limits;
  limits.max_elements = 10;
  ExpectError(DecodeTensor(WireTensor(v1::DATA_TYPE_INT8, {3, 4}, std::string(12, '\0')), "scatter",
                           "index", limits)
                  .status(),
              absl::StatusCode::kResourceExhausted,
              "scatter: index.shape [3, 4] has 12 elements, more than the server's limit of 10 "
              "(--max_elements)");
  // The limit itself is allowed.
  EXPECT_TRUE(DecodeTensor(WireTensor(v1::DATA_TYPE_INT8, {2, 5}, std::string(10, '\0')), "scatter",
                           "index", limits)
                  .ok());
}

TEST(CodecErrorTest, ByteLimit) {
  DecodeLimits limits;
  limits.max_bytes = 16;
  ExpectError(DecodeTensor(WireTensor(v1::DATA_TYPE_FLOAT64, {3}, std::string(24, '\0')), "gather",
                           "input", limits)
                  .status(),
              absl::StatusCode::kResourceExhausted, "has 24 bytes, more than the server's limit");
}

TEST(CodecErrorTest, LimitsAreCheckedBeforeTheData) {
  // A huge declared shape with no data is refused for its size, not its data length, so a client
  // learns the real problem and nothing is ever allocated for it.
  DecodeLimits limits;
  limits.max_elements = 1000;
  ExpectError(DecodeTensor(WireTensor(v1::DATA_TYPE_FLOAT32, {1 << 20, 1 << 20}, ""), "gather",
                           "input", limits)
                  .status(),
              absl::StatusCode::kResourceExhausted, "--max_elements");
}

TEST(CodecErrorTest, CheckShapeAppliesTheSameRules) {
  DecodeLimits limits;
  limits.max_elements = 100;
  absl::StatusOr<int64_t> numel =
      CheckShape(DataType::kFloat32, Shape{4, 25}, "gather", "result", limits);
  ASSERT_TRUE(numel.ok()) << numel.status();
  EXPECT_EQ(*numel, 100);
  ExpectError(CheckShape(DataType::kFloat32, Shape{4, 26}, "gather", "result", limits).status(),
              absl::StatusCode::kResourceExhausted, "gather: result.shape [4, 26] has 104");
}

// --- Scalars, reductions, statuses -------------------------------------------------------------

TEST(ScalarCodecTest, RoundTripsEveryKind) {
  const Scalar scalars[] = {Scalar(true),        Scalar(false),
                            Scalar(int64_t{-7}), Scalar(std::numeric_limits<int64_t>::min()),
                            Scalar(2.5),         Scalar(std::complex<double>(1.5, -2.0))};
  for (const Scalar& scalar : scalars) {
    v1::Scalar wire;
    EncodeScalar(scalar, &wire);
    absl::StatusOr<Scalar> back = DecodeScalar(wire, "scatter", "value");
    ASSERT_TRUE(back.ok()) << back.status();
    EXPECT_EQ(back->value(), scalar.value()) << scalar.ToString();
  }
}

TEST(ScalarCodecTest, WireKindsMapToScalarKinds) {
  v1::Scalar wire;
  wire.set_int_value(3);
  EXPECT_TRUE(std::holds_alternative<int64_t>(DecodeScalar(wire, "scatter", "value")->value()));
  wire.set_float_value(3.0);
  EXPECT_TRUE(std::holds_alternative<double>(DecodeScalar(wire, "scatter", "value")->value()));
  wire.set_bool_value(true);
  EXPECT_TRUE(std::holds_alternative<bool>(DecodeScalar(wire, "scatter", "value")->value()));
}

TEST(ScalarCodecTest, EmptyScalarIsRejected) {
  ExpectError(DecodeScalar(v1::Scalar(), "scatter", "value").status(),
              absl::StatusCode::kInvalidArgument, "scatter: value has no value set");
}

TEST(ReductionCodecTest, MapsBothWays) {
  const std::pair<v1::Reduction, Reduction> pairs[] = {
      {v1::REDUCTION_ASSIGN, Reduction::kAssign}, {v1::REDUCTION_SUM, Reduction::kSum},
      {v1::REDUCTION_PROD, Reduction::kProd},     {v1::REDUCTION_MEAN, Reduction::kMean},
      {v1::REDUCTION_AMAX, Reduction::kAmax},     {v1::REDUCTION_AMIN, Reduction::kAmin},
  };
  for (const auto& [wire, reduction] : pairs) {
    absl::StatusOr<Reduction> decoded = ReductionFromProto(wire, "scatter");
    ASSERT_TRUE(decoded.ok()) << decoded.status();
    EXPECT_EQ(*decoded, reduction);
    EXPECT_EQ(ReductionToProto(reduction), wire);
  }
}

TEST(ReductionCodecTest, UnknownReductionIsRejected) {
  ExpectError(ReductionFromProto(42, "scatter").status(), absl::StatusCode::kInvalidArgument,
              "scatter: reduce = 42 is not a known reduction");
}

TEST(GrpcStatusTest, CodeAndMessageSurviveBothWays) {
  for (int code = 0; code <= 16; ++code) {
    const absl::Status status(static_cast<absl::StatusCode>(code),
                              code == 0 ? "" : absl::StrCat("message ", code));
    const grpc::Status grpc_status = ToGrpcStatus(status);
    EXPECT_EQ(static_cast<int>(grpc_status.error_code()), code);
    EXPECT_EQ(grpc_status.error_message(), std::string(status.message()));
    EXPECT_EQ(FromGrpcStatus(grpc_status), status);
  }
  EXPECT_EQ(ToGrpcStatus(absl::InvalidArgumentError("x")).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(FromGrpcStatus(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "y")),
            absl::ResourceExhaustedError("y"));
}

}  // namespace
}  // namespace tensorops::wire
