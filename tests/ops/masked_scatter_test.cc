// MaskedScatter (docs/semantics.md, MaskedScatter) against the independent reference written below
// in this file: randomized over dtype x rank with every broadcasting pattern (mask of lower rank,
// mask or input with size-1 dimensions, both broadcast), source sizes (exact, larger, another shape
// and rank), empty, all-true and all-false masks and strided views; large inputs for the parallel
// count/scan/write path (and its block boundaries); PyTorch's doc examples; and every error, on
// both paths. masked_scatter only copies, so results must match byte for byte. The randomized suite
// runs on the CPU and on CUDA (tests/device_runner.h; skipped where no GPU is usable, and case by
// case where the source is strided, which the GPU kernel does not read); on a GPU also: every dtype
// byte for byte the CPU's, and a too-small source flagged.
#include "kernels/masked_scatter.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/parallel.h"
#include "kernels/tensor.h"
#include "tests/device_runner.h"
#include "tests/gradient_check.h"
#include "tests/reference.h"

// ---------------------------------------------------------------------------------------------
// An independent reference for MaskedScatter (docs/semantics.md, MaskedScatter),
// `torch.masked_scatter(input, mask, source)` out of place.
//
//   absl::StatusOr<Tensor> expected =
//       testing::ReferenceMaskedScatter(x.view(), mask.view(), src.view());
//
// Written from docs/semantics.md and PyTorch's documented semantics alone, sharing no code with
// kernels/ beyond the container types: its own broadcasting of input and mask, no prefix sums, no
// blocks. It visits every result position in row-major order with plain loops, keeps a running
// count of the true positions seen so far, and reads the source's k-th element by unravelling k in
// the source's own shape and going through the source view's strides. Elements move as raw bytes.
// Sizes are kept to a few hundred thousand elements.

namespace tensorops::testing {

namespace masked_scatter_internal {

// BroadcastResultShape is NumPy's broadcast of two shapes, or nullopt when a pair of sizes
// (right-aligned) differs with neither being 1.
inline std::optional<Shape> BroadcastResultShape(const Shape& a, const Shape& b) {
  const size_t rank = a.size() > b.size() ? a.size() : b.size();
  Shape result(rank, 1);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t from_a = d < rank - a.size() ? 1 : a[d - (rank - a.size())];
    const int64_t from_b = d < rank - b.size() ? 1 : b[d - (rank - b.size())];
    if (from_a == from_b || from_b == 1) {
      result[d] = from_a;
    } else if (from_a == 1) {
      result[d] = from_b;
    } else {
      return std::nullopt;
    }
  }
  return result;
}

// MaskAt reads the mask element that position `coordinates` of the result maps onto; any nonzero
// byte is true.
inline bool MaskAt(const TensorView& mask, const Shape& coordinates) {
  const Shape mask_coordinates =
      reference_internal::BroadcastCoordinates(coordinates, mask.shape());
  return reference_internal::LoadElement(DataType::kBool, mask.data(),
                                         reference_internal::OffsetOf(mask, mask_coordinates))
             .integer != 0;
}

}  // namespace masked_scatter_internal

// ReferenceMaskedCount counts the true positions of `mask` broadcast to `shape` (which mask must
// broadcast to).
inline int64_t ReferenceMaskedCount(const TensorView& mask, const Shape& shape) {
  int64_t true_count = 0;
  const int64_t count = reference_internal::Count(shape);
  for (int64_t position = 0; position < count; ++position) {
    true_count +=
        masked_scatter_internal::MaskAt(mask, reference_internal::Unravel(position, shape));
  }
  return true_count;
}

// ReferenceMaskedScatter computes MaskedScatter (docs/semantics.md): input and mask broadcast
// against each other, the k-th true position (row-major in the result) takes source.flat[k], every
// other position input's value. Returns INVALID_ARGUMENT for any input docs/semantics.md rejects
// (message wording is its own).
inline absl::StatusOr<Tensor> ReferenceMaskedScatter(const TensorView& input,
                                                     const TensorView& mask,
                                                     const TensorView& source) {
  using namespace reference_internal;  // NOLINT
  if (mask.dtype() != DataType::kBool) return Invalid("masked_scatter: mask must be bool");
  if (source.dtype() != input.dtype()) {
    return Invalid("masked_scatter: source dtype differs from input dtype");
  }
  const std::optional<Shape> shape =
      masked_scatter_internal::BroadcastResultShape(input.shape(), mask.shape());
  if (!shape.has_value()) {
    return Invalid(absl::StrCat("masked_scatter: cannot broadcast input ",
                                ShapeString(input.shape()), " with mask ",
                                ShapeString(mask.shape())));
  }
  const int64_t true_count = ReferenceMaskedCount(mask, *shape);
  const int64_t source_count = Count(source.shape());
  if (true_count > source_count) {
    return Invalid(absl::StrCat("masked_scatter: ", true_count, " true positions but only ",
                                source_count, " source elements"));
  }

  const DataType dtype = input.dtype();
  const int64_t width = ByteWidth(dtype);
  Tensor result(dtype, *shape);
  const int64_t count = Count(*shape);
  int64_t next_source = 0;
  for (int64_t position = 0; position < count; ++position) {
    const Shape coordinates = Unravel(position, *shape);
    const char* from;
    if (masked_scatter_internal::MaskAt(mask, coordinates)) {
      const Shape source_coordinates = Unravel(next_source++, source.shape());
      from = static_cast<const char*>(source.data()) + OffsetOf(source, source_coordinates) * width;
    } else {
      const Shape input_coordinates = BroadcastCoordinates(coordinates, input.shape());
      from = static_cast<const char*>(input.data()) + OffsetOf(input, input_coordinates) * width;
    }
    std::memcpy(static_cast<char*>(result.data()) + position * width, from,
                static_cast<size_t>(width));
  }
  return result;
}

}  // namespace tensorops::testing

namespace tensorops {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAre;
using testing::ExpectSameBytes;
using testing::HasNoDeviceForm;
using ::testing::HasSubstr;
using testing::LaidOutTensor;
using testing::RandomTensor;
using testing::ReferenceMaskedCount;
using testing::ReferenceMaskedScatter;
using testing::SeededGen;
using testing::TensorFromValues;
using testing::TestDevice;
using testing::ToDoubles;
using testing::reference_internal::ShapeString;

constexpr int64_t kParallelThreshold = cpu::kMinParallelElements;

// kMaskedScatterSeedSalt salts every generator this file seeds, keeping its random inputs apart
// from the other suites' (testing::SeededGen).
constexpr uint64_t kMaskedScatterSeedSalt = 0x3a5c;

std::string MessageOf(const absl::StatusOr<Tensor>& result) {
  return std::string(result.status().message());
}

// RandomMask is a contiguous bool tensor whose elements are true with probability
// `true_fraction`.
Tensor RandomMask(const Shape& shape, double true_fraction, absl::BitGen& gen) {
  Tensor mask(DataType::kBool, shape);
  auto* bytes = static_cast<uint8_t*>(mask.data());
  for (int64_t i = 0; i < mask.numel(); ++i) bytes[i] = absl::Bernoulli(gen, true_fraction);
  return mask;
}

// How a test tensor is laid out in memory, to exercise the kernel's materializing paths.
enum class Layout {
  kContiguous,
  // Every other element of a buffer twice as long in the last dimension.
  kStepped,
  // The last two dimensions stored swapped (a transposed view).
  kTransposed,
  // Stride 0 along the first dimension: one row repeated (the values change to that row's).
  kBroadcastFirst,
};

// Relayout copies `values` into a buffer of the given layout (falling back to contiguous where
// the rank does not allow it) and views it at values' shape.
LaidOutTensor Relayout(const Tensor& values, Layout layout) {
  const Shape& shape = values.shape();
  const int64_t rank = values.rank();
  Shape buffer_shape = shape;
  Shape strides;
  if (layout == Layout::kStepped && rank >= 1) {
    buffer_shape.back() *= 2;
    strides = testing::RowMajorStrides(buffer_shape);
    strides.back() = 2;
  } else if (layout == Layout::kTransposed && rank >= 2) {
    std::swap(buffer_shape[rank - 1], buffer_shape[rank - 2]);
    strides = testing::RowMajorStrides(buffer_shape);
    std::swap(strides[rank - 1], strides[rank - 2]);
  } else if (layout == Layout::kBroadcastFirst && rank >= 1) {
    buffer_shape[0] = 1;
    strides = testing::RowMajorStrides(buffer_shape);
    strides[0] = 0;
  } else {
    strides = testing::RowMajorStrides(buffer_shape);
  }
  LaidOutTensor laid_out{Tensor::Zeros(values.dtype(), buffer_shape), {}};
  laid_out.view = TensorView(values.dtype(), shape, strides, laid_out.buffer.data());
  const int64_t width = testing::reference_internal::ByteWidth(values.dtype());
  for (int64_t position = 0; position < values.numel(); ++position) {
    const Shape coordinates = testing::reference_internal::Unravel(position, shape);
    const int64_t offset = testing::reference_internal::OffsetOf(laid_out.view, coordinates);
    std::memcpy(static_cast<char*>(laid_out.buffer.data()) + offset * width,
                static_cast<const char*>(values.data()) + position * width,
                static_cast<size_t>(width));
  }
  return laid_out;
}

Layout RandomLayout(absl::BitGen& gen) {
  return static_cast<Layout>(absl::Uniform<int>(gen, 0, 4));
}

testing::ValueOptions OddValues() {
  testing::ValueOptions values;
  values.nan_fraction = 0.05;
  values.signed_zero_fraction = 0.05;
  return values;
}

Shape RandomShape(absl::BitGen& gen, int64_t rank) {
  const int64_t max_size = rank <= 2 ? 7 : rank == 3 ? 4 : 3;
  Shape shape;
  for (int64_t d = 0; d < rank; ++d) {
    shape.push_back(absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, max_size));
  }
  return shape;
}

// OnesSomewhere returns `shape` with each dimension set to 1 with probability 1/2.
Shape OnesSomewhere(Shape shape, absl::BitGen& gen) {
  for (int64_t& size : shape) {
    if (absl::Bernoulli(gen, 0.5)) size = 1;
  }
  return shape;
}

// DropLeading returns `shape` without a random number of its leading dimensions.
Shape DropLeading(const Shape& shape, absl::BitGen& gen) {
  const size_t drop = absl::Uniform<size_t>(absl::IntervalClosed, gen, 0, shape.size());
  return Shape(shape.begin() + drop, shape.end());
}

// --------------------------------------------------------------------------------------------
// Randomized against the reference.

enum class MaskCase {
  kSameShape,
  kMaskLowerRank,
  kMaskSizeOneDims,
  kInputBroadcastByMask,
  kBothBroadcast,
  kEmpty,
  kAllTrue,
  kAllFalse,
};
constexpr MaskCase kAllMaskCases[] = {
    MaskCase::kSameShape,       MaskCase::kMaskLowerRank,
    MaskCase::kMaskSizeOneDims, MaskCase::kInputBroadcastByMask,
    MaskCase::kBothBroadcast,   MaskCase::kEmpty,
    MaskCase::kAllTrue,         MaskCase::kAllFalse,
};

const char* MaskCaseName(MaskCase mask_case) {
  switch (mask_case) {
    case MaskCase::kSameShape:
      return "same shape";
    case MaskCase::kMaskLowerRank:
      return "mask of lower rank";
    case MaskCase::kMaskSizeOneDims:
      return "mask with size-1 dims";
    case MaskCase::kInputBroadcastByMask:
      return "input broadcast by mask";
    case MaskCase::kBothBroadcast:
      return "both broadcast";
    case MaskCase::kEmpty:
      return "empty";
    case MaskCase::kAllTrue:
      return "all true";
    case MaskCase::kAllFalse:
      return "all false";
  }
  return "?";
}

enum class SourceCase { kExact, kLarger, kOtherShape };
constexpr SourceCase kAllSourceCases[] = {SourceCase::kExact, SourceCase::kLarger,
                                          SourceCase::kOtherShape};

// SourceShape returns a shape holding at least `needed` elements: exactly `needed` as [n] or
// [d, n / d]; a few more as [n + extra]; or a random shape of rank 0..3 grown along its last
// dimension until it is big enough (a scalar when needed <= 1).
Shape SourceShape(SourceCase source_case, int64_t needed, absl::BitGen& gen) {
  switch (source_case) {
    case SourceCase::kExact: {
      const int64_t divisor =
          needed == 0 ? 1 : absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, needed);
      if (needed > 0 && needed % divisor == 0 && absl::Bernoulli(gen, 0.5)) {
        return {divisor, needed / divisor};
      }
      return {needed};
    }
    case SourceCase::kLarger:
      return {needed + absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 5)};
    case SourceCase::kOtherShape: {
      const int64_t rank = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, 3);
      if (rank == 0 && needed <= 1) return {};
      Shape shape;
      for (int64_t d = 0; d < std::max<int64_t>(rank, 1); ++d) {
        shape.push_back(absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 4));
      }
      const int64_t others = testing::reference_internal::Count(shape) / shape.back();
      shape.back() = std::max(shape.back(), (needed + others - 1) / others);
      return shape;
    }
  }
  return {needed};
}

// Shapes of input and mask for one case, around a random shape of rank `rank`.
std::pair<Shape, Shape> CaseShapes(MaskCase mask_case, int64_t rank, absl::BitGen& gen) {
  Shape shape = RandomShape(gen, rank);
  switch (mask_case) {
    case MaskCase::kMaskLowerRank:
      return {shape, DropLeading(shape, gen)};
    case MaskCase::kMaskSizeOneDims:
      return {shape, OnesSomewhere(shape, gen)};
    case MaskCase::kInputBroadcastByMask:
      return {DropLeading(OnesSomewhere(shape, gen), gen), shape};
    case MaskCase::kBothBroadcast:
      return {OnesSomewhere(shape, gen), DropLeading(OnesSomewhere(shape, gen), gen)};
    case MaskCase::kEmpty:
      if (rank == 0) return {shape, Shape{0}};  // A scalar input broadcast to [0].
      shape[absl::Uniform<size_t>(gen, 0, shape.size())] = 0;
      return absl::Bernoulli(gen, 0.5) ? std::pair{shape, OnesSomewhere(shape, gen)}
                                       : std::pair{OnesSomewhere(shape, gen), shape};
    default:
      return {shape, shape};
  }
}

// Over dtype x rank x device: the same cases on the CPU and on CUDA.
class MaskedScatterRandomTest : public testing::DeviceTest<std::tuple<DataType, int64_t>> {};

TEST_P(MaskedScatterRandomTest, MatchesReference) {
  const auto [dtype, rank] = leading_param();
  absl::BitGen gen = SeededGen(static_cast<uint64_t>(dtype) * 10 + static_cast<uint64_t>(rank),
                               kMaskedScatterSeedSalt);
  constexpr double kTrueFractions[] = {0.1, 0.3, 0.5, 0.9};
  for (const MaskCase mask_case : kAllMaskCases) {
    for (const SourceCase source_case : kAllSourceCases) {
      for (int trial = 0; trial < 3; ++trial) {
        const auto [input_shape, mask_shape] = CaseShapes(mask_case, rank, gen);
        double true_fraction = kTrueFractions[absl::Uniform<size_t>(gen, 0, 4)];
        if (mask_case == MaskCase::kAllTrue) true_fraction = 1.0;
        if (mask_case == MaskCase::kAllFalse) true_fraction = 0.0;
        const LaidOutTensor input =
            Relayout(RandomTensor(dtype, input_shape, gen, OddValues()), RandomLayout(gen));
        const LaidOutTensor mask =
            Relayout(RandomMask(mask_shape, true_fraction, gen), RandomLayout(gen));

        const std::optional<Shape> result_shape =
            testing::masked_scatter_internal::BroadcastResultShape(input_shape, mask_shape);
        ASSERT_TRUE(result_shape.has_value());
        const int64_t needed = ReferenceMaskedCount(mask.view, *result_shape);
        if (mask_case == MaskCase::kAllTrue) {
          ASSERT_EQ(needed, testing::reference_internal::Count(*result_shape));
        }
        if (mask_case == MaskCase::kAllFalse) ASSERT_EQ(needed, 0);
        const Shape source_shape = SourceShape(source_case, needed, gen);
        const LaidOutTensor source =
            Relayout(RandomTensor(dtype, source_shape, gen, OddValues()), RandomLayout(gen));

        SCOPED_TRACE(absl::StrCat(MaskCaseName(mask_case), ", trial ", trial, ": input ",
                                  ShapeString(input_shape), " mask ", ShapeString(mask_shape), " (",
                                  needed, " true) src ", ShapeString(source_shape)));
        const absl::StatusOr<Tensor> actual = runner().Run(
            MaskedScatterArgs{.input = input.view, .mask = mask.view, .source = source.view});
        if (HasNoDeviceForm(actual.status())) continue;
        const absl::StatusOr<Tensor> expected =
            ReferenceMaskedScatter(input.view, mask.view, source.view);
        ASSERT_TRUE(expected.ok()) << expected.status();
        ASSERT_TRUE(actual.ok()) << actual.status();
        ExpectSameBytes(*actual, *expected);
      }
    }
  }
}

std::string DtypeRankName(const ::testing::TestParamInfo<std::tuple<DataType, int64_t>>& info) {
  return absl::StrCat(std::string(DataTypeName(std::get<0>(info.param))), "_rank",
                      std::get<1>(info.param));
}

TENSOROPS_INSTANTIATE_ON_EVERY_DEVICE(MaskedScatterRandomTest,
                                      ::testing::Combine(::testing::ValuesIn(kAllDataTypes),
                                                         ::testing::Range<int64_t>(0, 6)),
                                      DtypeRankName);

// --------------------------------------------------------------------------------------------
// Large inputs: the parallel count, scan and write passes. One dtype per element size.

class MaskedScatterLargeTest : public ::testing::TestWithParam<DataType> {
 protected:
  // Check runs the op and the reference on views of the given tensors.
  static void Check(const TensorView& input, const TensorView& mask, const TensorView& source) {
    const absl::StatusOr<Tensor> expected = ReferenceMaskedScatter(input, mask, source);
    ASSERT_TRUE(expected.ok()) << expected.status();
    ASSERT_GE(expected->numel(), kParallelThreshold);
    const absl::StatusOr<Tensor> actual =
        MaskedScatter({.input = input, .mask = mask, .source = source});
    ASSERT_TRUE(actual.ok()) << actual.status();
    ExpectSameBytes(*actual, *expected);
  }

  DataType dtype() const { return GetParam(); }
};

TEST_P(MaskedScatterLargeTest, SameShapeRandomMask) {
  absl::BitGen gen = SeededGen(static_cast<uint64_t>(dtype()) + 100, kMaskedScatterSeedSalt);
  const Shape shape = {60, 5000};
  const Tensor input = RandomTensor(dtype(), shape, gen);
  const Tensor mask = RandomMask(shape, 0.3, gen);
  const int64_t needed = ReferenceMaskedCount(mask.view(), shape);
  const Tensor source = RandomTensor(dtype(), {needed + 7}, gen);
  Check(input.view(), mask.view(), source.view());
}

// The service hands the kernel the input's own memory as the result (InputReuse): the fused
// write pass then reads each element where it writes it.
TEST_P(MaskedScatterLargeTest, InPlaceResultIsTheInput) {
  absl::BitGen gen = SeededGen(static_cast<uint64_t>(dtype()) + 150, kMaskedScatterSeedSalt);
  const Shape shape = {60, 5000};
  Tensor input = RandomTensor(dtype(), shape, gen);
  const Tensor mask = RandomMask(shape, 0.5, gen);
  const Tensor source = RandomTensor(dtype(), {ReferenceMaskedCount(mask.view(), shape)}, gen);
  const absl::StatusOr<Tensor> expected =
      ReferenceMaskedScatter(input.view(), mask.view(), source.view());
  ASSERT_TRUE(expected.ok()) << expected.status();
  absl::StatusOr<MaskedScatterPlan> plan =
      PlanMaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()});
  ASSERT_TRUE(plan.ok()) << plan.status();
  ASSERT_TRUE(cpu::MaskedScatter(*plan, input.mutable_view()).ok());
  ExpectSameBytes(input, *expected);
}

TEST_P(MaskedScatterLargeTest, BroadcastMaskRowAndColumn) {
  absl::BitGen gen = SeededGen(static_cast<uint64_t>(dtype()) + 200, kMaskedScatterSeedSalt);
  const Tensor input = RandomTensor(dtype(), {60, 5000}, gen);
  const Tensor row_mask = RandomMask({5000}, 0.3, gen);
  const Tensor column_mask = RandomMask({60, 1}, 0.5, gen);
  const Tensor source = RandomTensor(dtype(), {60, 5000}, gen);
  Check(input.view(), row_mask.view(), source.view());
  Check(input.view(), column_mask.view(), source.view());
}

TEST_P(MaskedScatterLargeTest, InputBroadcastByMaskWithStridedSource) {
  absl::BitGen gen = SeededGen(static_cast<uint64_t>(dtype()) + 300, kMaskedScatterSeedSalt);
  const Tensor input = RandomTensor(dtype(), {1, 4000}, gen);
  const Tensor mask = RandomMask({80, 4000}, 0.3, gen);
  const int64_t needed = ReferenceMaskedCount(mask.view(), {80, 4000});
  const LaidOutTensor source =
      Relayout(RandomTensor(dtype(), {2, (needed + 1) / 2}, gen), Layout::kTransposed);
  Check(input.view(), mask.view(), source.view);
  const LaidOutTensor stepped_source =
      Relayout(RandomTensor(dtype(), {needed}, gen), Layout::kStepped);
  Check(input.view(), mask.view(), stepped_source.view);
}

TEST_P(MaskedScatterLargeTest, AllTrueAndAllFalse) {
  absl::BitGen gen = SeededGen(static_cast<uint64_t>(dtype()) + 400, kMaskedScatterSeedSalt);
  const Shape shape = {3, 100003};  // Not a multiple of any block size.
  const Tensor input = RandomTensor(dtype(), shape, gen);
  const Tensor source = RandomTensor(dtype(), {100003, 3}, gen);
  Check(input.view(), RandomMask(shape, 1.0, gen).view(), source.view());
  const Tensor empty_source = RandomTensor(dtype(), {0}, gen);
  Check(input.view(), RandomMask(shape, 0.0, gen).view(), empty_source.view());
}

// Sizes around the block of the count and write passes (one block, a block and one element,
// several), with the true positions only in the last few elements (every block but the last
// counts zero) or only in the first few.
TEST_P(MaskedScatterLargeTest, TrueRunsAtTheEnds) {
  absl::BitGen gen = SeededGen(static_cast<uint64_t>(dtype()) + 500, kMaskedScatterSeedSalt);
  for (const int64_t count :
       {kParallelThreshold, kParallelThreshold + 1, 3 * kParallelThreshold + 5}) {
    SCOPED_TRACE(absl::StrCat("count ", count));
    const Tensor input = RandomTensor(dtype(), {count}, gen);
    const Tensor source = RandomTensor(dtype(), {100}, gen);
    for (const bool at_end : {true, false}) {
      Tensor mask = Tensor::Zeros(DataType::kBool, {count});
      auto* bytes = static_cast<uint8_t*>(mask.data());
      for (int64_t i = 0; i < 100; ++i) bytes[at_end ? count - 1 - i : i] = 1;
      Check(input.view(), mask.view(), source.view());
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryItemSize, MaskedScatterLargeTest,
                         ::testing::Values(DataType::kBool, DataType::kFloat16, DataType::kFloat32,
                                           DataType::kInt64, DataType::kComplex128),
                         testing::DataTypeParamName);

// --------------------------------------------------------------------------------------------
// PyTorch's documentation and hand-checked cases.

std::vector<double> Arange(int64_t count) {
  std::vector<double> values;
  for (int64_t i = 0; i < count; ++i) values.push_back(static_cast<double>(i));
  return values;
}

const std::vector<double> kDocMask = {0, 0, 0, 1, 1, 1, 1, 0, 1, 1};

TEST(MaskedScatterDocTest, InputBroadcastByMask) {
  // torch.tensor([0, 0, 0, 0, 0]).masked_scatter(mask, torch.arange(10).view(2, 5))
  const Tensor input = TensorFromValues(DataType::kInt64, {5}, {0, 0, 0, 0, 0});
  const Tensor mask = TensorFromValues(DataType::kBool, {2, 5}, kDocMask);
  const Tensor source = TensorFromValues(DataType::kInt64, {2, 5}, Arange(10));
  const absl::StatusOr<Tensor> result =
      MaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->shape(), (Shape{2, 5}));
  EXPECT_EQ(ToDoubles(*result), (std::vector<double>{0, 0, 0, 0, 1, 2, 3, 0, 4, 5}));
}

TEST(MaskedScatterDocTest, SameShape) {
  const Tensor input = Tensor::Zeros(DataType::kFloat32, {2, 5});
  const Tensor mask = TensorFromValues(DataType::kBool, {2, 5}, kDocMask);
  const Tensor source = TensorFromValues(DataType::kFloat32, {2, 5}, Arange(10));
  const absl::StatusOr<Tensor> result =
      MaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->shape(), (Shape{2, 5}));
  EXPECT_EQ(ToDoubles(*result), (std::vector<double>{0, 0, 0, 0, 1, 2, 3, 0, 4, 5}));
}

TEST(MaskedScatterDocTest, MaskBroadcastOverRows) {
  const Tensor input = TensorFromValues(DataType::kInt32, {2, 5}, std::vector<double>(10, -1));
  const Tensor mask = TensorFromValues(DataType::kBool, {5}, {1, 0, 1, 0, 0});
  const Tensor source = TensorFromValues(DataType::kInt32, {10}, Arange(10));
  const absl::StatusOr<Tensor> result =
      MaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->shape(), (Shape{2, 5}));
  EXPECT_EQ(ToDoubles(*result), (std::vector<double>{0, -1, 1, -1, -1, 2, -1, 3, -1, -1}));
}

TEST(MaskedScatterDocTest, RankZero) {
  const Tensor input = TensorFromValues(DataType::kFloat64, {}, {7});
  const Tensor source = TensorFromValues(DataType::kFloat64, {1, 2}, {9, 8});
  for (const bool take : {true, false}) {
    const Tensor mask = TensorFromValues(DataType::kBool, {}, {take ? 1.0 : 0.0});
    const absl::StatusOr<Tensor> result =
        MaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()});
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->shape(), Shape{});
    EXPECT_EQ(ToDoubles(*result), std::vector<double>{take ? 9.0 : 7.0});
  }
}

TEST(MaskedScatterDocTest, EmptyTensors) {
  const Tensor source = TensorFromValues(DataType::kFloat32, {0}, {});
  {
    const Tensor input = TensorFromValues(DataType::kFloat32, {0, 3}, {});
    const Tensor mask = TensorFromValues(DataType::kBool, {3}, {1, 1, 1});
    const absl::StatusOr<Tensor> result =
        MaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()});
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->shape(), (Shape{0, 3}));
  }
  {  // [2, 1] with [0] broadcasts to [2, 0].
    const Tensor input = TensorFromValues(DataType::kFloat32, {2, 1}, {1, 2});
    const Tensor mask = TensorFromValues(DataType::kBool, {0}, {});
    const absl::StatusOr<Tensor> result =
        MaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()});
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->shape(), (Shape{2, 0}));
  }
  {  // No true position needs no source element.
    const Tensor input = TensorFromValues(DataType::kFloat32, {3}, {1, 2, 3});
    const Tensor mask = TensorFromValues(DataType::kBool, {3}, {0, 0, 0});
    const absl::StatusOr<Tensor> result =
        MaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()});
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(ToDoubles(*result), (std::vector<double>{1, 2, 3}));
  }
}

TEST(MaskedScatterDocTest, BoolValues) {
  const Tensor input = TensorFromValues(DataType::kBool, {4}, {1, 1, 0, 0});
  const Tensor mask = TensorFromValues(DataType::kBool, {4}, {1, 0, 1, 0});
  const Tensor source = TensorFromValues(DataType::kBool, {2}, {0, 1});
  const absl::StatusOr<Tensor> result =
      MaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(ToDoubles(*result), (std::vector<double>{0, 1, 1, 0}));
}

// A bool byte other than 0 and 1 (possible in a request's raw bytes) counts as true, as in
// NumPy's and PyTorch's conversions to bool.
TEST(MaskedScatterDocTest, AnyNonzeroMaskByteIsTrue) {
  const Tensor input = TensorFromValues(DataType::kInt16, {3}, {5, 5, 5});
  Tensor mask = Tensor::Zeros(DataType::kBool, {3});
  static_cast<uint8_t*>(mask.data())[0] = 2;
  static_cast<uint8_t*>(mask.data())[2] = 0xff;
  const Tensor source = TensorFromValues(DataType::kInt16, {2}, {1, 2});
  const absl::StatusOr<Tensor> result =
      MaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()});
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(ToDoubles(*result), (std::vector<double>{1, 5, 2}));
}

TEST(MaskedScatterPlanTest, ViewsInputAndMaskAtTheResultShape) {
  const Tensor input = TensorFromValues(DataType::kFloat32, {3, 1}, {1, 2, 3});
  const Tensor mask = TensorFromValues(DataType::kBool, {4}, {1, 0, 1, 0});
  const Tensor source = TensorFromValues(DataType::kFloat32, {6}, Arange(6));
  const absl::StatusOr<MaskedScatterPlan> plan =
      PlanMaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()});
  ASSERT_TRUE(plan.ok()) << plan.status();
  EXPECT_EQ(plan->result_dtype, DataType::kFloat32);
  EXPECT_EQ(plan->result_shape, (Shape{3, 4}));
  EXPECT_EQ(plan->input.shape(), (Shape{3, 4}));
  EXPECT_EQ(plan->input.strides(), (Shape{1, 0}));
  EXPECT_EQ(plan->mask.shape(), (Shape{3, 4}));
  EXPECT_EQ(plan->mask.strides(), (Shape{0, 1}));
  EXPECT_EQ(plan->source.shape(), (Shape{6}));

  Tensor result(plan->result_dtype, plan->result_shape);
  ASSERT_TRUE(cpu::MaskedScatter(*plan, result.mutable_view()).ok());
  EXPECT_EQ(ToDoubles(result), (std::vector<double>{0, 1, 1, 1, 2, 2, 3, 2, 4, 3, 5, 3}));
}

// --------------------------------------------------------------------------------------------
// Errors.

// ---------------------------------------------------------------------------------------------
// Backward (kernels/backward.h).

// Finite differences (tests/gradient_check.h) with every broadcasting layout: input [rows, cols],
// or [cols] / [1, cols] broadcast against a mask of [rows, cols], or the mask broadcast against
// the input; sources longer than the true count too.
TEST(MaskedScatterGradientTest, MatchesFiniteDifferences) {
  for (uint64_t i = 0; i < 20; ++i) {
    absl::BitGen gen = SeededGen(i + 1000, kMaskedScatterSeedSalt);
    const int64_t rows = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 4);
    const int64_t cols = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 4);
    const int layout = static_cast<int>(i % 4);
    const Shape input_shape = layout == 1   ? Shape{cols}
                              : layout == 2 ? Shape{1, cols}
                                            : Shape{rows, cols};
    const Shape mask_shape = layout == 3 ? Shape{cols} : Shape{rows, cols};
    std::vector<double> mask_values(testing::reference_internal::Count(mask_shape));
    int64_t per_mask = 0;
    for (double& m : mask_values) {
      m = absl::Bernoulli(gen, 0.5);
      per_mask += m != 0;
    }
    const int64_t true_count = layout == 3 ? per_mask * rows : per_mask;
    const Tensor mask = TensorFromValues(DataType::kBool, mask_shape, mask_values);
    Tensor input(DataType::kFloat64, input_shape);
    Tensor source(DataType::kFloat64, {true_count + absl::Uniform<int64_t>(gen, 0, 3)});
    testing::FillValues(testing::Values::kAny, {&input, &source}, gen);
    SCOPED_TRACE(
        absl::StrCat("input ", ShapeString(input_shape), " mask ", ShapeString(mask_shape)));
    testing::ExpectGradientsMatchFiniteDifferences(
        MaskedScatterArgs{.input = input.view(), .mask = mask.view(), .source = source.view()},
        [](const MaskedScatterArgs& args) { return MaskedScatter(args); },
        {{"input", &input}, {"src", &source}}, gen);
  }
}

// masked_scatter: torch.zeros(2, 2).masked_scatter(mask=[[1, 0], [0, 1]], src=[a, b, c])
// backward with grad [[1, 2], [3, 4]]: grad_input = [[0, 2], [3, 0]], grad_src = [1, 4, 0].
TEST(MaskedScatterGradientTest, SelectsAndPads) {
  const Tensor input = TensorFromValues(DataType::kFloat64, {2, 2}, {0, 0, 0, 0});
  const Tensor mask = TensorFromValues(DataType::kBool, {2, 2}, {1, 0, 0, 1});
  const Tensor source = TensorFromValues(DataType::kFloat64, {3}, {7, 8, 9});
  const Tensor grad = TensorFromValues(DataType::kFloat64, {2, 2}, {1, 2, 3, 4});
  absl::StatusOr<Gradients> gradients = Backward(
      MaskedScatterArgs{.input = input.view(), .mask = mask.view(), .source = source.view()},
      grad.view());
  ASSERT_TRUE(gradients.ok()) << gradients.status();
  EXPECT_THAT(ToDoubles(*gradients->Find("input")), ElementsAre(0, 2, 3, 0));
  EXPECT_THAT(ToDoubles(*gradients->Find("src")), ElementsAre(1, 4, 0));
}

TEST(MaskedScatterErrorTest, MaskNotBool) {
  const Tensor input = Tensor::Zeros(DataType::kFloat32, {2, 3});
  const Tensor source = Tensor::Zeros(DataType::kFloat32, {6});
  for (const DataType mask_dtype : {DataType::kInt64, DataType::kUInt8, DataType::kFloat32}) {
    const Tensor mask = Tensor::Zeros(mask_dtype, {2, 3});
    const absl::StatusOr<Tensor> result =
        MaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()});
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(MessageOf(result),
              absl::StrCat("masked_scatter: mask.dtype = ", std::string(DataTypeName(mask_dtype)),
                           " must be bool"));
  }
}

TEST(MaskedScatterErrorTest, DtypeMismatch) {
  const Tensor input = Tensor::Zeros(DataType::kFloat32, {2, 3});
  const Tensor mask = Tensor::Zeros(DataType::kBool, {2, 3});
  const Tensor source = Tensor::Zeros(DataType::kFloat64, {6});
  const absl::StatusOr<Tensor> result =
      MaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()});
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(MessageOf(result),
            "masked_scatter: src.dtype = float64 does not match input.dtype = float32 (no implicit "
            "casts)");
}

TEST(MaskedScatterErrorTest, NotBroadcastable) {
  const struct {
    Shape input;
    Shape mask;
  } kCases[] = {{{2, 3}, {4}}, {{3}, {2, 2}}, {{2, 3, 4}, {3, 1, 4}}, {{0}, {2}}};
  for (const auto& shapes : kCases) {
    const Tensor input = Tensor::Zeros(DataType::kInt8, shapes.input);
    const Tensor mask = Tensor::Zeros(DataType::kBool, shapes.mask);
    const Tensor source = Tensor::Zeros(DataType::kInt8, {100});
    const absl::StatusOr<Tensor> result =
        MaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()});
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(MessageOf(result),
                AllOf(HasSubstr("masked_scatter: cannot broadcast"),
                      HasSubstr(absl::StrCat("input of shape ", ShapeString(shapes.input))),
                      HasSubstr(absl::StrCat("mask of shape ", ShapeString(shapes.mask)))));
    EXPECT_FALSE(ReferenceMaskedScatter(input.view(), mask.view(), source.view()).ok());
  }
}

std::string TooSmallMessage(int64_t source_count, int64_t true_count) {
  return absl::StrCat("masked_scatter: src has ", source_count, " elements but mask has ",
                      true_count,
                      " true positions (src must have at least one element per true position)");
}

TEST(MaskedScatterErrorTest, SourceTooSmall) {
  {
    const Tensor input = Tensor::Zeros(DataType::kFloat32, {2, 5});
    const Tensor mask = TensorFromValues(DataType::kBool, {2, 5}, {0, 1, 0, 1, 1, 0, 0, 1, 1, 0});
    const Tensor source = TensorFromValues(DataType::kFloat32, {3}, {1, 2, 3});
    const absl::StatusOr<Tensor> result =
        MaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()});
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(MessageOf(result),
              "masked_scatter: src has 3 elements but mask has 5 true positions (src must have at "
              "least one element per true position)");
  }
  {  // The count is over the broadcast mask: 2 true entries repeated over 3 rows.
    const Tensor input = Tensor::Zeros(DataType::kComplex128, {3, 5});
    const Tensor mask = TensorFromValues(DataType::kBool, {5}, {1, 0, 0, 0, 1});
    const Tensor source = Tensor::Zeros(DataType::kComplex128, {5});
    const absl::StatusOr<Tensor> result =
        MaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()});
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(MessageOf(result), TooSmallMessage(5, 6));
  }
  {  // A rank-0 true mask and an empty source.
    const Tensor input = Tensor::Zeros(DataType::kUInt8, {});
    const Tensor mask = TensorFromValues(DataType::kBool, {}, {1});
    const Tensor source = Tensor::Zeros(DataType::kUInt8, {0, 4});
    const absl::StatusOr<Tensor> result =
        MaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()});
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(MessageOf(result), TooSmallMessage(0, 1));
  }
}

// On the parallel path the count is complete before anything is written: the error names the
// full count, and the result buffer is left as it was.
TEST(MaskedScatterErrorTest, SourceTooSmallOnTheParallelPath) {
  absl::BitGen gen = SeededGen(900, kMaskedScatterSeedSalt);
  const Shape shape = {60, 5000};
  const Tensor input = RandomTensor(DataType::kFloat32, shape, gen);
  const Tensor mask = RandomMask(shape, 0.3, gen);
  const int64_t true_count = ReferenceMaskedCount(mask.view(), shape);
  for (const bool strided_source : {false, true}) {
    const LaidOutTensor source = Relayout(RandomTensor(DataType::kFloat32, {true_count - 1}, gen),
                                          strided_source ? Layout::kStepped : Layout::kContiguous);
    const absl::StatusOr<MaskedScatterPlan> plan =
        PlanMaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view});
    ASSERT_TRUE(plan.ok()) << plan.status();
    Tensor result = Tensor::Zeros(DataType::kFloat32, shape);
    std::memset(result.data(), 0xab, static_cast<size_t>(result.nbytes()));
    const absl::Status status = cpu::MaskedScatter(*plan, result.mutable_view());
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(std::string(status.message()), TooSmallMessage(true_count - 1, true_count));
    const auto* bytes = static_cast<const uint8_t*>(result.data());
    int64_t changed = 0;
    for (int64_t i = 0; i < result.nbytes(); ++i) changed += bytes[i] != 0xab;
    EXPECT_EQ(changed, 0);
  }
  {  // Broadcast mask, through the convenience function.
    const Tensor row_mask = RandomMask({5000}, 0.5, gen);
    const int64_t broadcast_count = ReferenceMaskedCount(row_mask.view(), shape);
    const Tensor source = RandomTensor(DataType::kFloat32, {broadcast_count / 2}, gen);
    const absl::StatusOr<Tensor> result =
        MaskedScatter({.input = input.view(), .mask = row_mask.view(), .source = source.view()});
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(MessageOf(result), TooSmallMessage(broadcast_count / 2, broadcast_count));
  }
}

TEST(MaskedScatterErrorTest, ResultNotMatchingThePlan) {
  const Tensor input = Tensor::Zeros(DataType::kFloat32, {2, 3});
  const Tensor mask = Tensor::Zeros(DataType::kBool, {3});
  const Tensor source = Tensor::Zeros(DataType::kFloat32, {1});
  const absl::StatusOr<MaskedScatterPlan> plan =
      PlanMaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()});
  ASSERT_TRUE(plan.ok()) << plan.status();
  Tensor wrong_shape(DataType::kFloat32, {3, 2});
  EXPECT_EQ(cpu::MaskedScatter(*plan, wrong_shape.mutable_view()).code(),
            absl::StatusCode::kInternal);
  Tensor wrong_dtype(DataType::kFloat64, {2, 3});
  EXPECT_EQ(cpu::MaskedScatter(*plan, wrong_dtype.mutable_view()).code(),
            absl::StatusCode::kInternal);
}

// --------------------------------------------------------------------------------------------
// On a GPU: byte for byte the CPU's, and the source's size checked (skipped where no GPU is
// usable).

class MaskedScatterCudaTest : public testing::CudaTest {};

// A mask broadcast along 300 rows of every dtype, a source with a few elements to spare; then the
// same mask with one source element too few, which the device must flag (the runner then returns
// the CPU kernel's error naming the sizes, where an unflagged call would have returned a result).
TEST_F(MaskedScatterCudaTest, MatchesTheCpuAndFlagsATooSmallSource) {
  absl::BitGen gen = SeededGen(71, kMaskedScatterSeedSalt);
  for (DataType dtype : kAllDataTypes) {
    SCOPED_TRACE(DataTypeName(dtype));
    const Tensor input = testing::SmallIntegerValues(gen, dtype, {300, 70});
    const Tensor mask = RandomMask({1, 70}, 0.4, gen);
    const int64_t true_count = ReferenceMaskedCount(mask.view(), {300, 70});
    const Tensor source = testing::SmallIntegerValues(gen, dtype, {true_count + 5});
    const absl::StatusOr<MaskedScatterPlan> plan =
        PlanMaskedScatter({.input = input.view(), .mask = mask.view(), .source = source.view()});
    ASSERT_TRUE(plan.ok()) << plan.status();
    const absl::StatusOr<Tensor> cpu = testing::RunOn(TestDevice::kCpu, *plan);
    ASSERT_TRUE(cpu.ok()) << cpu.status();
    const absl::StatusOr<Tensor> gpu = testing::RunOn(TestDevice::kCuda, *plan);
    ASSERT_TRUE(gpu.ok()) << gpu.status();
    ExpectSameBytes(*gpu, *cpu);

    if (true_count == 0) continue;
    const TensorView short_source(dtype, {true_count - 1}, source.data());
    const absl::StatusOr<MaskedScatterPlan> too_small =
        PlanMaskedScatter({.input = input.view(), .mask = mask.view(), .source = short_source});
    ASSERT_TRUE(too_small.ok()) << too_small.status();
    const absl::StatusOr<Tensor> flagged = testing::RunOn(TestDevice::kCuda, *too_small);
    EXPECT_EQ(flagged.status().code(), absl::StatusCode::kInvalidArgument) << flagged.status();
    EXPECT_THAT(flagged.status().message(),
                HasSubstr(absl::StrCat("masked_scatter: src has ", true_count - 1, " elements")));
  }
}

}  // namespace
}  // namespace tensorops
