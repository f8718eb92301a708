// The CUDA kernels' walk (kernels/cuda/index_walk.h) run on the host, where no GPU is needed:
// IndexWalk's offsets in 32 and in 64 bits against a plain unravelling of every position over the
// unmerged shape, and Fits32's limits at 2^31 exactly.
#include "kernels/cuda/index_walk.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

#include "absl/random/random.h"
#include "gtest/gtest.h"

namespace tensorops::cuda {
namespace {

// ReferenceOffsets: operand k's offset at row-major `position` of `shape`, by / and % over every
// dimension, size-1 ones included, and nothing merged.
std::array<int64_t, 2> ReferenceOffsets(const Shape& shape, const std::array<Shape, 2>& strides,
                                        int64_t position) {
  std::array<int64_t, 2> offsets = {0, 0};
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    const int64_t coordinate = position % shape[d];
    position /= shape[d];
    for (int k = 0; k < 2; ++k) offsets[k] += coordinate * strides[k][d];
  }
  return offsets;
}

template <typename Position>
void ExpectWalkMatches(const Shape& shape, const std::array<Shape, 2>& strides) {
  const Walk<2> walk = MakeWalk<2>(shape, {strides[0], strides[1]});
  const IndexWalk<2, Position> index_walk(walk);
  const int64_t count = NumElements(shape);
  if constexpr (sizeof(Position) == 4) ASSERT_TRUE(Fits32(walk, count));
  for (int64_t position = 0; position < count; ++position) {
    typename IndexWalk<2, Position>::Offset at[2];
    index_walk.Offsets(static_cast<Position>(position), at);
    const std::array<int64_t, 2> expected = ReferenceOffsets(shape, strides, position);
    ASSERT_EQ(at[0], expected[0]) << "operand 0 at position " << position << " of rank "
                                  << shape.size() << " (walk rank " << walk.rank << ")";
    ASSERT_EQ(at[1], expected[1]) << "operand 1 at position " << position;
  }
}

// Random shapes with size-1 dimensions (dropped by MakeWalk), operands that are contiguous (merged
// into fewer dimensions), transposed, broadcast (stride 0), sliced with steps, or reversed.
TEST(IndexWalkTest, OffsetsMatchTheReferenceInBothWidths) {
  absl::BitGen random(std::seed_seq{38});
  for (int trial = 0; trial < 400; ++trial) {
    const int rank = absl::Uniform<int>(absl::IntervalClosed, random, 0, 6);
    Shape shape(rank);
    for (int64_t& size : shape) size = absl::Uniform<int64_t>(absl::IntervalClosed, random, 1, 6);
    std::array<Shape, 2> strides;
    for (Shape& operand : strides) {
      operand = ContiguousStrides(shape);
      switch (absl::Uniform<int>(random, 0, 4)) {
        case 0:  // contiguous
          break;
        case 1:  // transposed: strides reversed
          std::reverse(operand.begin(), operand.end());
          break;
        case 2:  // broadcast along random dimensions, stepped along the others
          for (int64_t& stride : operand) {
            stride = absl::Bernoulli(random, 0.4) ? 0 : stride * 3;
          }
          break;
        default:  // arbitrary, negative included
          for (int64_t& stride : operand) {
            stride = absl::Uniform<int64_t>(absl::IntervalClosed, random, -50, 50);
          }
      }
    }
    ExpectWalkMatches<uint32_t>(shape, strides);
    ExpectWalkMatches<uint64_t>(shape, strides);
    if (HasFatalFailure()) return;
  }
}

// The 64-bit walk at positions past 2^32, where the 32-bit one would wrap.
TEST(IndexWalkTest, SixtyFourBitOffsetsPastTwoToTheThirtyTwo) {
  const Shape shape = {3, int64_t{1} << 20, 4099};
  const std::array<Shape, 2> strides = {ContiguousStrides(shape), Shape{1, 3, 3 << 20}};
  const Walk<2> walk = MakeWalk<2>(shape, {strides[0], strides[1]});
  ASSERT_FALSE(Fits32(walk, NumElements(shape)));
  const IndexWalk<2, uint64_t> index_walk(walk);
  const int64_t count = NumElements(shape);
  for (int64_t position : {int64_t{0}, int64_t{4098}, int64_t{1} << 32, (int64_t{1} << 32) + 12345,
                           count / 2, count - 4099, count - 1}) {
    int64_t at[2];
    index_walk.Offsets(static_cast<uint64_t>(position), at);
    const std::array<int64_t, 2> expected = ReferenceOffsets(shape, strides, position);
    EXPECT_EQ(at[0], expected[0]) << position;
    EXPECT_EQ(at[1], expected[1]) << position;
  }
}

TEST(IndexWalkTest, Fits32StopsAtTwoToTheThirtyOne) {
  constexpr int64_t kLimit = (int64_t{1} << 31) - 1;
  // One dimension of kLimit + 1 positions, offsets 0..kLimit: the last offset fits, the count
  // does not.
  const Shape all = {kLimit + 1};
  EXPECT_FALSE(Fits32(MakeWalk<1>(all, {Shape{1}}), kLimit + 1));
  const Shape fitting = {kLimit};
  EXPECT_TRUE(Fits32(MakeWalk<1>(fitting, {Shape{1}}), kLimit));
  // Few positions, but an operand that reaches past 2^31 - 1 (a broadcast source would not).
  const Shape two = {2};
  EXPECT_TRUE(Fits32(MakeWalk<1>(two, {Shape{kLimit}}), 2));
  EXPECT_FALSE(Fits32(MakeWalk<1>(two, {Shape{kLimit + 1}}), 2));
  EXPECT_FALSE(Fits32(MakeWalk<1>(two, {Shape{-(kLimit + 1)}}), 2));
  EXPECT_TRUE(Fits32(MakeWalk<1>(two, {Shape{0}}), 2));
  // What a kernel adds beyond the walk counts too.
  EXPECT_TRUE(Fits32(MakeWalk<1>(two, {Shape{kLimit - 10}}), 2, {10}));
  EXPECT_FALSE(Fits32(MakeWalk<1>(two, {Shape{kLimit - 10}}), 2, {11}));
}

TEST(IndexWalkTest, DispatchPositionPicksTheWidth) {
  const auto width = []<typename P>(TypeTag<P>) { return sizeof(P); };
  EXPECT_EQ(DispatchPosition(true, width), 4u);
  EXPECT_EQ(DispatchPosition(false, width), 8u);
  {
    const ScopedWideIndexingForTesting wide;
    EXPECT_EQ(DispatchPosition(true, width), 8u);
  }
  EXPECT_EQ(DispatchPosition(true, width), 4u);
}

}  // namespace
}  // namespace tensorops::cuda
