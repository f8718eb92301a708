// Backward (docs/semantics.md, Backward): every op's gradient against central finite differences of
// the forward op in float64 (and complex128 for the conjugate-Wirtinger convention), on small
// random calls with duplicate-heavy indices, zeros for PROD and tie-free values for AMAX/AMIN;
// hand-worked cases from the formulas of PyTorch's scatter_reduce_backward (as Paddle's
// put_along_axis design adopts them) where finite differences say nothing (ties, duplicate ASSIGN);
// every floating dtype; and the errors.
#include <algorithm>
#include <cmath>
#include <complex>
#include <cstdint>
#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/gather.h"
#include "kernels/index_ops.h"
#include "kernels/masked_scatter.h"
#include "kernels/nd_ops.h"
#include "kernels/scatter.h"
#include "kernels/view_scatter.h"
#include "tests/gradient_check.h"
#include "tests/reference.h"

namespace tensorops {
namespace {

using ::testing::ElementsAre;
using testing::FillValues;
using ::testing::HasSubstr;
using testing::IndexTensor;
using testing::RandomGrad;
using testing::SeededGen;
using testing::TensorFromComplex;
using testing::TensorFromValues;
using testing::ToDoubles;
using testing::Values;
using testing::reference_internal::ShapeString;
using testing::reference_internal::Unravel;

constexpr uint64_t kBackwardSeedSalt = 0xbac4;

// ---------------------------------------------------------------------------------------------
// A forward call of any op, and its forward and backward.

using BackwardArgs = std::variant<GatherArgs, ScatterArgs, IndexSelectArgs, IndexReduceArgs,
                                  SelectScatterArgs, SliceScatterArgs, DiagonalScatterArgs,
                                  GatherNdArgs, ScatterNdArgs, MaskedScatterArgs>;

absl::StatusOr<Gradients> BackwardOf(const BackwardArgs& args, const TensorView& grad_output) {
  return std::visit([&](const auto& op_args) { return Backward(op_args, grad_output); }, args);
}

absl::StatusOr<Tensor> Forward(const BackwardArgs& args) {
  struct Visitor {
    absl::StatusOr<Tensor> operator()(const GatherArgs& a) const { return Gather(a); }
    absl::StatusOr<Tensor> operator()(const ScatterArgs& a) const { return Scatter(a); }
    absl::StatusOr<Tensor> operator()(const IndexSelectArgs& a) const { return IndexSelect(a); }
    absl::StatusOr<Tensor> operator()(const IndexReduceArgs& a) const { return IndexReduce(a); }
    absl::StatusOr<Tensor> operator()(const SelectScatterArgs& a) const { return SelectScatter(a); }
    absl::StatusOr<Tensor> operator()(const SliceScatterArgs& a) const { return SliceScatter(a); }
    absl::StatusOr<Tensor> operator()(const DiagonalScatterArgs& a) const {
      return DiagonalScatter(a);
    }
    absl::StatusOr<Tensor> operator()(const GatherNdArgs& a) const { return GatherNd(a); }
    absl::StatusOr<Tensor> operator()(const ScatterNdArgs& a) const { return ScatterNd(a); }
    absl::StatusOr<Tensor> operator()(const MaskedScatterArgs& a) const { return MaskedScatter(a); }
  };
  return std::visit(Visitor{}, args);
}

// A forward call whose views point into tensors it owns (moving it keeps them valid). The
// differentiable arguments are `input` and/or `source`, named as Backward names them.
struct Call {
  Tensor input;
  Tensor index;
  Tensor source;
  Tensor mask;
  BackwardArgs args;
  std::vector<std::string> differentiable;
  std::string description;

  Tensor* Argument(const std::string& name) { return name == "input" ? &input : &source; }
};

// ExpectMatchesFiniteDifferences checks the call's Backward against finite differences of its
// forward (tests/gradient_check.h).
void ExpectMatchesFiniteDifferences(Call& call, absl::BitGen& gen) {
  SCOPED_TRACE(call.description);
  std::vector<std::pair<std::string, Tensor*>> differentiable;
  for (const std::string& name : call.differentiable) {
    differentiable.emplace_back(name, call.Argument(name));
  }
  std::visit(
      [&](const auto& args) {
        testing::ExpectGradientsMatchFiniteDifferences(
            args, [](const auto& op_args) { return Forward(op_args); }, differentiable, gen);
      },
      call.args);
}

// ---------------------------------------------------------------------------------------------
// Random calls.

Values ValuesFor(Reduction reduce) {
  if (reduce == Reduction::kProd) return Values::kProduct;
  if (reduce == Reduction::kAmax || reduce == Reduction::kAmin) return Values::kDistinct;
  return Values::kAny;
}

Shape RandomShape(int64_t rank, int64_t low, int64_t high, absl::BitGen& gen) {
  Shape shape(rank);
  for (int64_t& size : shape) size = absl::Uniform<int64_t>(absl::IntervalClosed, gen, low, high);
  return shape;
}

// An index into an axis of `size`: random (duplicate-heavy when the index is long), or, when
// `unique_key` is given, unique for distinct keys below `size`. Either may be negative.
int64_t IndexValue(int64_t size, std::optional<int64_t> unique_key, absl::BitGen& gen) {
  const int64_t value =
      unique_key.has_value() ? *unique_key % size : absl::Uniform<int64_t>(gen, 0, size);
  return absl::Bernoulli(gen, 0.3) ? value - size : value;
}

// A Scatter call: rank 1-3, sizes 2-5, index up to 5 long along the axis (duplicates), src
// sometimes larger than the index. `unique` keeps the index unique along the axis (ASSIGN, where
// only the last writer reaches the result).
Call RandomScatterCall(DataType dtype, Reduction reduce, bool include_self, bool unique,
                       absl::BitGen& gen) {
  const int64_t rank = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 3);
  const int64_t axis = absl::Uniform<int64_t>(gen, 0, rank);
  const Shape input_shape = RandomShape(rank, 2, 5, gen);
  Shape index_shape(rank);
  Shape source_shape(rank);
  for (int64_t d = 0; d < rank; ++d) {
    const int64_t high = d == axis ? (unique ? input_shape[d] : 5) : input_shape[d];
    index_shape[d] = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, high);
    source_shape[d] = index_shape[d] + (absl::Bernoulli(gen, 0.3) ? 1 : 0);
  }
  Call call;
  call.input = Tensor(dtype, input_shape);
  call.source = Tensor(dtype, source_shape);
  FillValues(ValuesFor(reduce), {&call.input, &call.source}, gen);
  std::vector<int64_t> index_values(testing::reference_internal::Count(index_shape));
  for (size_t i = 0; i < index_values.size(); ++i) {
    const Shape c = Unravel(static_cast<int64_t>(i), index_shape);
    std::optional<int64_t> key;
    if (unique) key = c[axis] + std::accumulate(c.begin(), c.end(), int64_t{0}) - c[axis];
    index_values[i] = IndexValue(input_shape[axis], key, gen);
  }
  call.index = IndexTensor(index_shape, index_values,
                           absl::Bernoulli(gen, 0.5) ? DataType::kInt32 : DataType::kInt64);
  call.args = ScatterArgs{.input = call.input.view(),
                          .index = call.index.view(),
                          .source = call.source.view(),
                          .axis = absl::Bernoulli(gen, 0.3) ? axis - rank : axis,
                          .reduce = reduce,
                          .include_self = include_self};
  call.differentiable = {"input", "src"};
  call.description =
      absl::StrCat("scatter ", std::string(ReductionName(reduce)), " include_self ", include_self,
                   " input ", ShapeString(input_shape), " index ", ShapeString(index_shape),
                   " src ", ShapeString(source_shape), " axis ", axis);
  return call;
}

// An IndexReduce call: rank 1-3, index 1-D up to 5 long (duplicates unless `unique`); SUM uses
// alpha = 1.5 (index_add's alpha scales the source gradient).
Call RandomIndexReduceCall(DataType dtype, Reduction reduce, bool include_self, bool unique,
                           absl::BitGen& gen) {
  const int64_t rank = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 3);
  const int64_t axis = absl::Uniform<int64_t>(gen, 0, rank);
  const Shape input_shape = RandomShape(rank, 2, 4, gen);
  const int64_t length =
      absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, unique ? input_shape[axis] : 5);
  Shape source_shape = input_shape;
  source_shape[axis] = length;
  Call call;
  call.input = Tensor(dtype, input_shape);
  call.source = Tensor(dtype, source_shape);
  FillValues(ValuesFor(reduce), {&call.input, &call.source}, gen);
  std::vector<int64_t> index_values(length);
  const int64_t shift = absl::Uniform<int64_t>(gen, 0, input_shape[axis]);
  for (int64_t i = 0; i < length; ++i) {
    index_values[i] = IndexValue(input_shape[axis],
                                 unique ? std::optional<int64_t>(i + shift) : std::nullopt, gen);
  }
  call.index = IndexTensor({length}, index_values);
  call.args =
      IndexReduceArgs{.input = call.input.view(),
                      .index = call.index.view(),
                      .source = call.source.view(),
                      .axis = axis,
                      .reduce = reduce,
                      .include_self = include_self,
                      .alpha = reduce == Reduction::kSum ? Scalar(1.5) : Scalar(int64_t{1})};
  call.differentiable = {"input", "src"};
  call.description = absl::StrCat("index_reduce ", std::string(ReductionName(reduce)),
                                  " include_self ", include_self, " input ",
                                  ShapeString(input_shape), " index [", length, "] axis ", axis);
  return call;
}

// A ScatterNd call in one of its forms: 0 = TensorFlow (k leading coordinates), 1 = TensorFlow
// with batch_dims = 1, 2 = axes, 3 = TensorFlow without an input (`shape`).
Call RandomScatterNdCall(DataType dtype, Reduction reduce, bool include_self, bool unique, int form,
                         absl::BitGen& gen) {
  const int64_t rank = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 2, 3);
  const Shape input_shape = RandomShape(rank, 2, 4, gen);
  Call call;
  ScatterNdArgs args;
  Shape index_shape;
  Shape source_shape;
  std::vector<int64_t> index_values;
  if (form == 2) {
    // Axes form: B <= input's shape, one coordinate per listed axis.
    const int64_t k = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 2);
    std::vector<int64_t> axes(rank);
    std::iota(axes.begin(), axes.end(), 0);
    std::shuffle(axes.begin(), axes.end(), gen);
    axes.resize(k);
    const Shape positions = [&] {
      Shape b(rank);
      for (int64_t d = 0; d < rank; ++d) {
        b[d] = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, input_shape[d]);
      }
      return b;
    }();
    index_shape = positions;
    index_shape.push_back(k);
    // The source may be larger than B; only its leading block is read.
    source_shape = positions;
    for (int64_t& size : source_shape) size += absl::Bernoulli(gen, 0.2) ? 1 : 0;
    for (int64_t i = 0; i < testing::reference_internal::Count(positions); ++i) {
      const Shape c = Unravel(i, positions);
      for (int64_t j = 0; j < k; ++j) {
        // Unique: the coordinate is the position's own along that axis (shifted).
        index_values.push_back(
            IndexValue(input_shape[axes[j]],
                       unique ? std::optional<int64_t>(c[axes[j]] + 1) : std::nullopt, gen));
      }
    }
    args.axes = axes;
  } else {
    const int64_t batch_dims = form == 1 ? 1 : 0;
    const int64_t k = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, rank - batch_dims);
    // Unique rows: distinct coordinate tuples, per batch.
    int64_t tuples = 1;
    for (int64_t j = 0; j < k; ++j) tuples *= input_shape[batch_dims + j];
    const int64_t n = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1,
                                             unique ? std::min<int64_t>(tuples, 5) : 5);
    const int64_t batches = batch_dims == 1 ? input_shape[0] : 1;
    for (int64_t b = 0; b < batches; ++b) {
      std::vector<int64_t> order(tuples);
      std::iota(order.begin(), order.end(), 0);
      std::shuffle(order.begin(), order.end(), gen);
      for (int64_t row = 0; row < n; ++row) {
        int64_t tuple = unique ? order[row] : absl::Uniform<int64_t>(gen, 0, tuples);
        std::vector<int64_t> coordinates(k);
        for (int64_t j = k; j-- > 0;) {
          coordinates[j] = tuple % input_shape[batch_dims + j];
          tuple /= input_shape[batch_dims + j];
        }
        for (int64_t j = 0; j < k; ++j) {
          const int64_t size = input_shape[batch_dims + j];
          index_values.push_back(absl::Bernoulli(gen, 0.3) ? coordinates[j] - size
                                                           : coordinates[j]);
        }
      }
    }
    if (batch_dims == 1) index_shape.push_back(input_shape[0]);
    index_shape.push_back(n);
    index_shape.push_back(k);
    source_shape = Shape(index_shape.begin(), index_shape.end() - 1);
    for (int64_t d = batch_dims + k; d < rank; ++d) source_shape.push_back(input_shape[d]);
    args.batch_dims = batch_dims;
  }
  call.input = Tensor(dtype, input_shape);
  call.source = Tensor(dtype, source_shape);
  FillValues(ValuesFor(reduce), {&call.input, &call.source}, gen);
  call.index = IndexTensor(index_shape, index_values);
  if (form == 3) {
    args.shape = input_shape;
    call.differentiable = {"src"};
  } else {
    args.input = call.input.view();
    call.differentiable = {"input", "src"};
  }
  args.index = call.index.view();
  args.source = call.source.view();
  args.reduce = reduce;
  args.include_self = include_self;
  call.args = args;
  call.description =
      absl::StrCat("scatter_nd form ", form, " ", std::string(ReductionName(reduce)),
                   " include_self ", include_self, " input ", ShapeString(input_shape), " index ",
                   ShapeString(index_shape), " src ", ShapeString(source_shape));
  return call;
}

// ---------------------------------------------------------------------------------------------
// Finite differences: the scatter family, every reduction, include_self both ways.

using ReduceParam = std::tuple<Reduction, bool>;

class ScatterFamilyGradientTest : public ::testing::TestWithParam<ReduceParam> {
 protected:
  Reduction reduce() const { return std::get<0>(GetParam()); }
  bool include_self() const { return std::get<1>(GetParam()); }
  // ASSIGN's backward gives every duplicate the gradient (PyTorch), which finite differences
  // cannot see: they run on unique indices; ASSIGN duplicates are checked by hand below.
  bool unique() const { return reduce() == Reduction::kAssign; }
  uint64_t Seed(uint64_t i) const {
    return static_cast<uint64_t>(reduce()) * 1000 + include_self() * 100 + i;
  }
};

TEST_P(ScatterFamilyGradientTest, ScatterMatchesFiniteDifferences) {
  for (uint64_t i = 0; i < 30; ++i) {
    absl::BitGen gen = SeededGen(Seed(i), kBackwardSeedSalt);
    Call call = RandomScatterCall(DataType::kFloat64, reduce(), include_self(), unique(), gen);
    ExpectMatchesFiniteDifferences(call, gen);
  }
}

TEST_P(ScatterFamilyGradientTest, IndexReduceMatchesFiniteDifferences) {
  for (uint64_t i = 0; i < 30; ++i) {
    absl::BitGen gen = SeededGen(Seed(i) + 50, kBackwardSeedSalt);
    Call call = RandomIndexReduceCall(DataType::kFloat64, reduce(), include_self(), unique(), gen);
    ExpectMatchesFiniteDifferences(call, gen);
  }
}

TEST_P(ScatterFamilyGradientTest, ScatterNdMatchesFiniteDifferences) {
  for (uint64_t i = 0; i < 32; ++i) {
    absl::BitGen gen = SeededGen(Seed(i) + 90, kBackwardSeedSalt);
    Call call = RandomScatterNdCall(DataType::kFloat64, reduce(), include_self(), unique(),
                                    static_cast<int>(i % 4), gen);
    ExpectMatchesFiniteDifferences(call, gen);
  }
}

// Complex: PyTorch's conjugate-Wirtinger convention, which the finite differences of the real
// loss Re(sum(conj(grad) * out)) check (AMAX/AMIN are undefined for complex).
TEST_P(ScatterFamilyGradientTest, ComplexScatterMatchesFiniteDifferences) {
  if (reduce() == Reduction::kAmax || reduce() == Reduction::kAmin) {
    // Undefined for complex (docs/semantics.md): the forward's own error.
    absl::BitGen gen = SeededGen(Seed(0) + 20, kBackwardSeedSalt);
    Call call = RandomScatterCall(DataType::kComplex128, reduce(), include_self(), false, gen);
    const Tensor grad = Tensor::Zeros(DataType::kComplex128, call.input.shape());
    EXPECT_EQ(BackwardOf(call.args, grad.view()).status().code(),
              absl::StatusCode::kInvalidArgument);
    return;
  }
  for (uint64_t i = 0; i < 15; ++i) {
    absl::BitGen gen = SeededGen(Seed(i) + 20, kBackwardSeedSalt);
    Call call = RandomScatterCall(DataType::kComplex128, reduce(), include_self(), unique(), gen);
    ExpectMatchesFiniteDifferences(call, gen);
  }
}

INSTANTIATE_TEST_SUITE_P(AllReductions, ScatterFamilyGradientTest,
                         ::testing::Combine(::testing::ValuesIn(testing::kAllReductions),
                                            ::testing::Bool()),
                         [](const ::testing::TestParamInfo<ReduceParam>& info) {
                           return absl::StrCat(
                               std::string(ReductionName(std::get<0>(info.param))),
                               std::get<1>(info.param) ? "_IncludeSelf" : "_ExcludeSelf");
                         });

// ---------------------------------------------------------------------------------------------
// Finite differences: the gather family, the view scatters, MaskedScatter.

TEST(GatherGradientTest, MatchesFiniteDifferences) {
  for (uint64_t i = 0; i < 30; ++i) {
    absl::BitGen gen = SeededGen(i, kBackwardSeedSalt + 1);
    const bool broadcast = i % 3 == 2;
    const int64_t rank = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 3);
    const int64_t axis = absl::Uniform<int64_t>(gen, 0, rank);
    Shape input_shape = RandomShape(rank, 2, 5, gen);
    Shape index_shape(rank);
    for (int64_t d = 0; d < rank; ++d) {
      if (d == axis) {
        index_shape[d] = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 6);
      } else if (broadcast) {
        // One side 1, the other side the size (or both the same).
        const int choice = absl::Uniform(gen, 0, 3);
        index_shape[d] = choice == 0 ? 1 : input_shape[d];
        if (choice == 1) input_shape[d] = 1;
      } else {
        index_shape[d] = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, input_shape[d]);
      }
    }
    Call call;
    call.input = Tensor(DataType::kFloat64, input_shape);
    FillValues(Values::kAny, {&call.input}, gen);
    std::vector<int64_t> index_values(testing::reference_internal::Count(index_shape));
    for (int64_t& v : index_values) v = IndexValue(input_shape[axis], std::nullopt, gen);
    call.index = IndexTensor(index_shape, index_values);
    call.args = GatherArgs{.input = call.input.view(),
                           .index = call.index.view(),
                           .axis = axis,
                           .broadcast = broadcast};
    call.differentiable = {"input"};
    call.description =
        absl::StrCat("gather input ", ShapeString(input_shape), " index ", ShapeString(index_shape),
                     " axis ", axis, " broadcast ", broadcast);
    ExpectMatchesFiniteDifferences(call, gen);
  }
}

// A broadcasting Gather's gradient takes memory of the input's size and time of the result's:
// input [K, 1] against index [1, N] once made two [K, N] tensors (here 2^28 elements each) from a
// request of K + 2N elements.
TEST(GatherGradientTest, ABroadcastIsNotMaterialized) {
  constexpr int64_t kSize = int64_t{1} << 14;
  const Tensor input = Tensor::Zeros(DataType::kFloat32, {kSize, 1});
  std::vector<int64_t> rows(kSize);
  std::iota(rows.begin(), rows.end(), 0);
  std::reverse(rows.begin(), rows.end());
  const Tensor index = IndexTensor({1, kSize}, rows);
  Tensor grad(DataType::kFloat32, {1, kSize});
  for (int64_t n = 0; n < kSize; ++n) grad.data_as<float>()[n] = static_cast<float>(n);
  absl::StatusOr<Gradients> gradients = Backward(
      GatherArgs{.input = input.view(), .index = index.view(), .axis = 0, .broadcast = true},
      grad.view());
  ASSERT_TRUE(gradients.ok()) << gradients.status();
  const Tensor& grad_input = gradients->by_argument.at(0).second;
  ASSERT_EQ(grad_input.shape(), Shape({kSize, 1}));
  // Row k was read by position kSize - 1 - k alone.
  for (int64_t k = 0; k < kSize; ++k) {
    ASSERT_EQ(grad_input.data_as<float>()[k], static_cast<float>(kSize - 1 - k)) << "row " << k;
  }
}

TEST(IndexSelectGradientTest, MatchesFiniteDifferences) {
  for (uint64_t i = 0; i < 20; ++i) {
    absl::BitGen gen = SeededGen(i, kBackwardSeedSalt + 2);
    const int64_t rank = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 3);
    const int64_t axis = absl::Uniform<int64_t>(gen, 0, rank);
    const Shape input_shape = RandomShape(rank, 2, 4, gen);
    const int64_t length = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 6);
    Call call;
    call.input = Tensor(DataType::kFloat64, input_shape);
    FillValues(Values::kAny, {&call.input}, gen);
    std::vector<int64_t> index_values(length);
    for (int64_t& v : index_values) v = IndexValue(input_shape[axis], std::nullopt, gen);
    call.index = IndexTensor({length}, index_values);
    call.args =
        IndexSelectArgs{.input = call.input.view(), .index = call.index.view(), .axis = axis};
    call.differentiable = {"input"};
    call.description = absl::StrCat("index_select input ", ShapeString(input_shape), " index [",
                                    length, "] axis ", axis);
    ExpectMatchesFiniteDifferences(call, gen);
  }
}

TEST(GatherNdGradientTest, MatchesFiniteDifferences) {
  for (uint64_t i = 0; i < 24; ++i) {
    absl::BitGen gen = SeededGen(i, kBackwardSeedSalt + 3);
    // Reuse the ScatterNd call's input and index (duplicates included); only the index matters.
    Call scatter = RandomScatterNdCall(DataType::kFloat64, Reduction::kSum, true, false,
                                       static_cast<int>(i % 3), gen);
    const ScatterNdArgs& nd = std::get<ScatterNdArgs>(scatter.args);
    Call call;
    call.input = std::move(scatter.input);
    call.index = std::move(scatter.index);
    call.args = GatherNdArgs{.input = call.input.view(),
                             .index = call.index.view(),
                             .axes = nd.axes,
                             .batch_dims = nd.batch_dims};
    call.differentiable = {"input"};
    call.description = absl::StrCat("gather_nd from ", scatter.description);
    ExpectMatchesFiniteDifferences(call, gen);
  }
}

TEST(ViewScatterGradientTest, MatchesFiniteDifferences) {
  for (uint64_t i = 0; i < 36; ++i) {
    absl::BitGen gen = SeededGen(i, kBackwardSeedSalt + 4);
    const int op = static_cast<int>(i % 3);
    const int64_t rank = absl::Uniform<int64_t>(absl::IntervalClosed, gen, op == 2 ? 2 : 1, 3);
    const Shape input_shape = RandomShape(rank, 2, 5, gen);
    Call call;
    call.input = Tensor(DataType::kFloat64, input_shape);
    Shape source_shape;
    if (op == 0) {
      const int64_t axis = absl::Uniform<int64_t>(gen, 0, rank);
      const int64_t index = IndexValue(input_shape[axis], std::nullopt, gen);
      source_shape = input_shape;
      source_shape.erase(source_shape.begin() + axis);
      call.source = Tensor(DataType::kFloat64, source_shape);
      call.args = SelectScatterArgs{
          .input = call.input.view(), .src = call.source.view(), .axis = axis, .index = index};
      call.description = absl::StrCat("select_scatter axis ", axis, " index ", index);
    } else if (op == 1) {
      const int64_t axis = absl::Uniform<int64_t>(gen, 0, rank);
      const int64_t size = input_shape[axis];
      const int64_t start = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, size - 1);
      const int64_t end = absl::Uniform<int64_t>(absl::IntervalClosed, gen, start + 1, size);
      const int64_t step = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 3);
      source_shape = input_shape;
      source_shape[axis] = (end - start + step - 1) / step;
      call.source = Tensor(DataType::kFloat64, source_shape);
      call.args = SliceScatterArgs{.input = call.input.view(),
                                   .src = call.source.view(),
                                   .axis = axis,
                                   .start = start,
                                   .end = end,
                                   .step = step};
      call.description = absl::StrCat("slice_scatter axis ", axis, " ", start, ":", end, ":", step);
    } else {
      const int64_t axis1 = absl::Uniform<int64_t>(gen, 0, rank);
      int64_t axis2 = absl::Uniform<int64_t>(gen, 0, rank - 1);
      if (axis2 >= axis1) ++axis2;
      const int64_t offset = absl::Uniform<int64_t>(absl::IntervalClosed, gen, -2, 2);
      const int64_t length = std::max<int64_t>(
          0, offset >= 0 ? std::min(input_shape[axis1], input_shape[axis2] - offset)
                         : std::min(input_shape[axis1] + offset, input_shape[axis2]));
      for (int64_t d = 0; d < rank; ++d) {
        if (d != axis1 && d != axis2) source_shape.push_back(input_shape[d]);
      }
      source_shape.push_back(length);
      call.source = Tensor(DataType::kFloat64, source_shape);
      call.args = DiagonalScatterArgs{.input = call.input.view(),
                                      .src = call.source.view(),
                                      .offset = offset,
                                      .axis1 = axis1,
                                      .axis2 = axis2};
      call.description =
          absl::StrCat("diagonal_scatter offset ", offset, " axes ", axis1, ", ", axis2);
    }
    absl::StrAppend(&call.description, " input ", ShapeString(input_shape), " src ",
                    ShapeString(source_shape));
    FillValues(Values::kAny, {&call.input, &call.source}, gen);
    call.differentiable = {"input", "src"};
    ExpectMatchesFiniteDifferences(call, gen);
  }
}

TEST(ScatterGradientTest, BroadcastAndScalarValueMatchFiniteDifferences) {
  for (uint64_t i = 0; i < 20; ++i) {
    absl::BitGen gen = SeededGen(i, kBackwardSeedSalt + 6);
    const Reduction reduce = i % 2 == 0 ? Reduction::kSum : Reduction::kMean;
    // put_along_axis: input [r, c], index [1, k] broadcast over the rows, src [k] broadcast.
    const int64_t rows = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 3);
    const int64_t cols = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 2, 4);
    const int64_t k = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, cols);
    Call call;
    call.input = Tensor(DataType::kFloat64, {rows, cols});
    const bool scalar = i % 4 >= 2;
    call.source = Tensor(DataType::kFloat64, {k});
    FillValues(Values::kAny, {&call.input, &call.source}, gen);
    std::vector<int64_t> index_values(k);
    for (int64_t& v : index_values) v = IndexValue(cols, std::nullopt, gen);
    call.index = IndexTensor({1, k}, index_values);
    ScatterArgs args{.input = call.input.view(),
                     .index = call.index.view(),
                     .source = call.source.view(),
                     .axis = 1,
                     .reduce = reduce,
                     .include_self = i % 3 != 0,
                     .broadcast = true};
    call.differentiable = {"input", "src"};
    if (scalar) {
      args.source = Scalar(0.75);
      args.broadcast = i % 8 >= 4;
      call.differentiable = {"input"};
    }
    call.args = args;
    call.description = absl::StrCat("scatter broadcast ", args.broadcast, " scalar ", scalar, " ",
                                    std::string(ReductionName(reduce)), " input [", rows, ", ",
                                    cols, "] index [1, ", k, "]");
    ExpectMatchesFiniteDifferences(call, gen);
  }
}

// ---------------------------------------------------------------------------------------------
// Hand-worked cases: the formulas of PyTorch's scatter_reduce_backward (as Paddle's
// put_along_axis design adopts them), worked out on paper for 1-D calls.

struct HandCase {
  std::vector<double> input;
  std::vector<int64_t> index;
  std::vector<double> source;
  std::vector<double> grad;
};

// Runs Scatter's backward along axis 0 and returns {grad_input, grad_src}.
std::pair<std::vector<double>, std::vector<double>> ScatterGradients(const HandCase& c,
                                                                     Reduction reduce,
                                                                     bool include_self) {
  const Tensor input =
      TensorFromValues(DataType::kFloat64, {static_cast<int64_t>(c.input.size())}, c.input);
  const Tensor index = IndexTensor({static_cast<int64_t>(c.index.size())}, c.index);
  const Tensor source =
      TensorFromValues(DataType::kFloat64, {static_cast<int64_t>(c.source.size())}, c.source);
  const Tensor grad =
      TensorFromValues(DataType::kFloat64, {static_cast<int64_t>(c.grad.size())}, c.grad);
  absl::StatusOr<Gradients> gradients = Backward(ScatterArgs{.input = input.view(),
                                                             .index = index.view(),
                                                             .source = source.view(),
                                                             .reduce = reduce,
                                                             .include_self = include_self},
                                                 grad.view());
  EXPECT_TRUE(gradients.ok()) << gradients.status();
  if (!gradients.ok()) return {};
  return {ToDoubles(*gradients->Find("input")), ToDoubles(*gradients->Find("src"))};
}

// PROD with zeros. result = [2*4*0, 3*0*0, 0*6*7, 5*0.5] = [0, 0, 0, 2.5].
//   x0 = 2: product of the others 4*0 = 0.   x1 = 3: 0*0 = 0.   x2 = 0 (a zero self): 6*7 = 42.
//   x3 = 5: 0.5.   src0 = 4: 2*0 = 0.   src1 = 0, the only zero at its destination: 2*4 = 8.
//   src2, src3 = 0, two zeros at one destination: 0.   src4 = 6: 0*7 = 0; src5: 0*6 = 0.
//   src6 = 0.5: 5.   Times grad = [1, 2, 3, 4].
TEST(ScatterHandWorkedTest, ProdWithOneAndTwoZeros) {
  const HandCase c{.input = {2, 3, 0, 5},
                   .index = {0, 0, 1, 1, 2, 2, 3},
                   .source = {4, 0, 0, 0, 6, 7, 0.5},
                   .grad = {1, 2, 3, 4}};
  auto [grad_input, grad_src] = ScatterGradients(c, Reduction::kProd, true);
  EXPECT_THAT(grad_input, ElementsAre(0, 0, 126, 2));
  EXPECT_THAT(grad_src, ElementsAre(0, 8, 0, 0, 0, 0, 20));
  // Without self: result = [0, 0, 42, 0.5]; every input position is written (gradient 0);
  // src0: 0 -> 0; src1 (single zero): 4 -> 4; src2, src3: 0; src4: 7*3 = 21; src5: 6*3 = 18;
  // src6: 1*4 = 4.
  std::tie(grad_input, grad_src) = ScatterGradients(c, Reduction::kProd, false);
  EXPECT_THAT(grad_input, ElementsAre(0, 0, 0, 0));
  EXPECT_THAT(grad_src, ElementsAre(0, 4, 0, 0, 21, 18, 4));
}

// MEAN: counts include self. With self, counts = [3, 1, 2]; without, [2, 1 (nothing: kept), 1].
TEST(ScatterHandWorkedTest, MeanCountsIncludeSelf) {
  const HandCase c{.input = {1, 2, 3}, .index = {0, 0, 2}, .source = {7, 8, 9}, .grad = {6, 6, 6}};
  auto [grad_input, grad_src] = ScatterGradients(c, Reduction::kMean, true);
  EXPECT_THAT(grad_input, ElementsAre(2, 6, 3));
  EXPECT_THAT(grad_src, ElementsAre(2, 2, 3));
  std::tie(grad_input, grad_src) = ScatterGradients(c, Reduction::kMean, false);
  EXPECT_THAT(grad_input, ElementsAre(0, 6, 0));
  EXPECT_THAT(grad_src, ElementsAre(3, 3, 6));
}

// AMAX ties share equally. result = [5, 7, 2]: destination 0 has x0 = src0 = src1 = 5 (3 ways,
// 6/3 = 2 each); destination 1 has src2 = 7 alone (4); destination 2 has x2 = src3 = 2 (2 ways,
// 3/2 each), src4 = 1 loses. Without self only the sources share: [3, 3, 4, 3, 0].
// (PyTorch's own scatter_reduce_backward counts x even without include_self and would give
// [2, 2, 4, 1.5, 0] there; see backward.h.)
TEST(ScatterHandWorkedTest, AmaxTiesShareEqually) {
  const HandCase c{
      .input = {5, 1, 2}, .index = {0, 0, 1, 2, 2}, .source = {5, 5, 7, 2, 1}, .grad = {6, 4, 3}};
  auto [grad_input, grad_src] = ScatterGradients(c, Reduction::kAmax, true);
  EXPECT_THAT(grad_input, ElementsAre(2, 0, 1.5));
  EXPECT_THAT(grad_src, ElementsAre(2, 2, 4, 1.5, 0));
  std::tie(grad_input, grad_src) = ScatterGradients(c, Reduction::kAmax, false);
  EXPECT_THAT(grad_input, ElementsAre(0, 0, 0));
  EXPECT_THAT(grad_src, ElementsAre(3, 3, 4, 3, 0));
}

// AMIN ties: result = [1, 1]: destination 0 has x0 = src0 = src2 = 1 (grad 9 / 3 = 3 each),
// destination 1 has src1 = src3 = 1 and x1 = 4 loses (grad 2 / 2 = 1 each).
TEST(ScatterHandWorkedTest, AminTiesShareEqually) {
  const HandCase c{.input = {1, 4}, .index = {0, 1, 0, 1}, .source = {1, 1, 1, 1}, .grad = {9, 2}};
  auto [grad_input, grad_src] = ScatterGradients(c, Reduction::kAmin, true);
  EXPECT_THAT(grad_input, ElementsAre(3, 0));
  EXPECT_THAT(grad_src, ElementsAre(3, 1, 3, 1));
}

// ASSIGN with duplicates: PyTorch's `scatter` backward gathers the gradient for every source
// element (grad_src = grad.gather(0, index)), the losers included; the written positions of the
// input get 0. torch.zeros(3).scatter(0, tensor([1, 1, 2]), src) backward with grad [1, 2, 3]:
// grad_input = [1, 0, 0], grad_src = [2, 2, 3].
TEST(ScatterHandWorkedTest, AssignDuplicatesAllGetTheGradient) {
  const HandCase c{.input = {0, 0, 0}, .index = {1, 1, 2}, .source = {5, 6, 7}, .grad = {1, 2, 3}};
  auto [grad_input, grad_src] = ScatterGradients(c, Reduction::kAssign, true);
  EXPECT_THAT(grad_input, ElementsAre(1, 0, 0));
  EXPECT_THAT(grad_src, ElementsAre(2, 2, 3));
  // SUM: grad_input = grad (with self) or 0 where written; grad_src = grad.gather.
  std::tie(grad_input, grad_src) = ScatterGradients(c, Reduction::kSum, true);
  EXPECT_THAT(grad_input, ElementsAre(1, 2, 3));
  EXPECT_THAT(grad_src, ElementsAre(2, 2, 3));
  std::tie(grad_input, grad_src) = ScatterGradients(c, Reduction::kSum, false);
  EXPECT_THAT(grad_input, ElementsAre(1, 0, 0));
}

// index_add with alpha: torch.index_add(x, 0, tensor([0, 0]), src, alpha=2) backward with grad
// [3, 5]: grad_input = [3, 5], grad_src = 2 * [3, 3]. index_copy (ASSIGN) zeroes written rows.
TEST(IndexReduceHandWorkedTest, AlphaScalesTheSourceGradient) {
  const Tensor input = TensorFromValues(DataType::kFloat64, {2}, {1, 1});
  const Tensor index = IndexTensor({2}, {0, 0});
  const Tensor source = TensorFromValues(DataType::kFloat64, {2}, {1, 1});
  const Tensor grad = TensorFromValues(DataType::kFloat64, {2}, {3, 5});
  IndexReduceArgs args{.input = input.view(),
                       .index = index.view(),
                       .source = source.view(),
                       .reduce = Reduction::kSum,
                       .alpha = Scalar(2.0)};
  absl::StatusOr<Gradients> gradients = Backward(args, grad.view());
  ASSERT_TRUE(gradients.ok()) << gradients.status();
  EXPECT_THAT(ToDoubles(*gradients->Find("input")), ElementsAre(3, 5));
  EXPECT_THAT(ToDoubles(*gradients->Find("src")), ElementsAre(6, 6));
  args.reduce = Reduction::kAssign;
  args.alpha = Scalar(int64_t{1});
  gradients = Backward(args, grad.view());
  ASSERT_TRUE(gradients.ok()) << gradients.status();
  EXPECT_THAT(ToDoubles(*gradients->Find("input")), ElementsAre(0, 5));
  EXPECT_THAT(ToDoubles(*gradients->Find("src")), ElementsAre(3, 3));
}

// Complex PROD: out = x * s for one destination; d out/dx = s, so grad_x = grad * conj(s) and
// grad_s = grad * conj(x) (PyTorch's rule for products). x = 1+2i, s = 3-1i, grad = 1:
// grad_x = 3+1i, grad_s = 1-2i.
TEST(ScatterHandWorkedTest, ComplexProdConjugates) {
  const Tensor input = TensorFromComplex(DataType::kComplex128, {1}, {{1, 2}});
  const Tensor index = IndexTensor({1}, {0});
  const Tensor source = TensorFromComplex(DataType::kComplex128, {1}, {{3, -1}});
  const Tensor grad = TensorFromComplex(DataType::kComplex128, {1}, {{1, 0}});
  absl::StatusOr<Gradients> gradients = Backward(ScatterArgs{.input = input.view(),
                                                             .index = index.view(),
                                                             .source = source.view(),
                                                             .reduce = Reduction::kProd},
                                                 grad.view());
  ASSERT_TRUE(gradients.ok()) << gradients.status();
  EXPECT_LT(std::abs(gradients->Find("input")->data_as<std::complex<double>>()[0] -
                     std::complex<double>(3, 1)),
            1e-12);
  EXPECT_LT(std::abs(gradients->Find("src")->data_as<std::complex<double>>()[0] -
                     std::complex<double>(1, -2)),
            1e-12);
}

// Rank-0 calls (walked as shape [1], as PyTorch does) and an empty index (the result is the
// input): torch.tensor(2.).scatter_reduce(0, tensor(0), tensor(3.), 'prod') = 6, so grad 5 gives
// grad_input = 5 * 3 and grad_src = 5 * 2; gather of a scalar passes the gradient through.
TEST(BackwardEdgeTest, RankZeroAndEmptyIndex) {
  const Tensor input = TensorFromValues(DataType::kFloat64, {}, {2});
  const Tensor index = IndexTensor({}, {0});
  const Tensor source = TensorFromValues(DataType::kFloat64, {}, {3});
  const Tensor grad = TensorFromValues(DataType::kFloat64, {}, {5});
  absl::StatusOr<Gradients> gradients = Backward(ScatterArgs{.input = input.view(),
                                                             .index = index.view(),
                                                             .source = source.view(),
                                                             .reduce = Reduction::kProd},
                                                 grad.view());
  ASSERT_TRUE(gradients.ok()) << gradients.status();
  EXPECT_EQ(gradients->Find("input")->rank(), 0);
  EXPECT_EQ(gradients->Find("src")->rank(), 0);
  EXPECT_THAT(ToDoubles(*gradients->Find("input")), ElementsAre(15));
  EXPECT_THAT(ToDoubles(*gradients->Find("src")), ElementsAre(10));

  gradients = Backward(GatherArgs{.input = input.view(), .index = index.view()}, grad.view());
  ASSERT_TRUE(gradients.ok()) << gradients.status();
  EXPECT_THAT(ToDoubles(*gradients->Find("input")), ElementsAre(5));

  // index_select with a rank-0 index on [3]: one row.
  const Tensor row = TensorFromValues(DataType::kFloat64, {3}, {1, 2, 3});
  const Tensor one_index = IndexTensor({}, {1});
  absl::StatusOr<Tensor> selected =
      IndexSelect(IndexSelectArgs{.input = row.view(), .index = one_index.view()});
  ASSERT_TRUE(selected.ok()) << selected.status();
  const Tensor selected_grad = TensorFromValues(DataType::kFloat64, selected->shape(), {4});
  gradients = Backward(IndexSelectArgs{.input = row.view(), .index = one_index.view()},
                       selected_grad.view());
  ASSERT_TRUE(gradients.ok()) << gradients.status();
  EXPECT_THAT(ToDoubles(*gradients->Find("input")), ElementsAre(0, 4, 0));

  // An empty index writes nothing: grad_input = grad, grad_src = 0.
  const Tensor no_index = IndexTensor({0}, {});
  const Tensor two = TensorFromValues(DataType::kFloat64, {2}, {7, 8});
  const Tensor row_grad = TensorFromValues(DataType::kFloat64, {3}, {1, 2, 3});
  for (Reduction reduce : {Reduction::kAssign, Reduction::kProd, Reduction::kAmax}) {
    gradients = Backward(ScatterArgs{.input = row.view(),
                                     .index = no_index.view(),
                                     .source = two.view(),
                                     .reduce = reduce,
                                     .include_self = false},
                         row_grad.view());
    ASSERT_TRUE(gradients.ok()) << gradients.status();
    EXPECT_THAT(ToDoubles(*gradients->Find("input")), ElementsAre(1, 2, 3));
    EXPECT_THAT(ToDoubles(*gradients->Find("src")), ElementsAre(0, 0));
  }
}

// Strided views (every other element of a buffer) for input, src and grad_output give the same
// gradients as contiguous ones.
TEST(BackwardEdgeTest, StridedViewsMatchContiguous) {
  absl::BitGen gen = SeededGen(7, kBackwardSeedSalt + 7);
  for (Reduction reduce : {Reduction::kSum, Reduction::kProd, Reduction::kAmax}) {
    SCOPED_TRACE(std::string(ReductionName(reduce)));
    Call call = RandomScatterCall(DataType::kFloat64, reduce, true, false, gen);
    absl::StatusOr<Tensor> result = Forward(call.args);
    ASSERT_TRUE(result.ok()) << result.status();
    const Tensor grad = RandomGrad(DataType::kFloat64, result->shape(), gen);
    absl::StatusOr<Gradients> contiguous = BackwardOf(call.args, grad.view());
    const testing::LaidOutTensor input = testing::SteppedCopy(call.input);
    const testing::LaidOutTensor source = testing::SteppedCopy(call.source);
    const testing::LaidOutTensor strided_grad = testing::SteppedCopy(grad);
    ScatterArgs args = std::get<ScatterArgs>(call.args);
    args.input = input.view;
    args.source = source.view;
    absl::StatusOr<Gradients> strided = Backward(args, strided_grad.view);
    ASSERT_TRUE(contiguous.ok()) << contiguous.status();
    ASSERT_TRUE(strided.ok()) << strided.status();
    for (const char* name : {"input", "src"}) {
      EXPECT_EQ(ToDoubles(*strided->Find(name)), ToDoubles(*contiguous->Find(name))) << name;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Every floating dtype: the same call as float64, within the dtype's rounding.

class BackwardDtypeTest : public ::testing::TestWithParam<DataType> {};

TEST_P(BackwardDtypeTest, MatchesFloat64) {
  const DataType dtype = GetParam();
  const double tolerance = dtype == DataType::kFloat16                                    ? 4e-3
                           : dtype == DataType::kBFloat16                                 ? 2e-2
                           : dtype == DataType::kFloat32 || dtype == DataType::kComplex64 ? 1e-6
                                                                                          : 1e-12;
  // Values exact in every dtype; duplicates, a zero source for PROD.
  const std::vector<double> input_values = {1.5, -2, 0.25, 4};
  const std::vector<double> source_values = {0.5, 0, 3, -1.25, 2};
  const std::vector<int64_t> index_values = {0, 0, 2, 3, 3};
  const std::vector<double> grad_values = {1, -0.5, 2, 0.75};
  for (Reduction reduce : {Reduction::kAssign, Reduction::kSum, Reduction::kMean, Reduction::kProd,
                           Reduction::kAmax, Reduction::kAmin}) {
    if (IsComplex(dtype) && (reduce == Reduction::kAmax || reduce == Reduction::kAmin)) continue;
    SCOPED_TRACE(std::string(ReductionName(reduce)));
    auto run = [&](DataType t) {
      const Tensor input = TensorFromValues(t, {4}, input_values);
      const Tensor index = IndexTensor({5}, index_values);
      const Tensor source = TensorFromValues(t, {5}, source_values);
      const Tensor grad = TensorFromValues(t, {4}, grad_values);
      return Backward(ScatterArgs{.input = input.view(),
                                  .index = index.view(),
                                  .source = source.view(),
                                  .reduce = reduce},
                      grad.view());
    };
    absl::StatusOr<Gradients> actual = run(dtype);
    absl::StatusOr<Gradients> expected = run(DataType::kFloat64);
    ASSERT_TRUE(actual.ok()) << actual.status();
    ASSERT_TRUE(expected.ok()) << expected.status();
    for (const char* name : {"input", "src"}) {
      ASSERT_EQ(actual->Find(name)->dtype(), dtype);
      const std::vector<double> got = ToDoubles(*actual->Find(name));
      const std::vector<double> want = ToDoubles(*expected->Find(name));
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_NEAR(got[i], want[i], tolerance * std::max(1.0, std::abs(want[i])))
            << name << "[" << i << "]";
      }
    }
  }
}

// One small call per op (duplicates, broadcasting, windows) with values exact in every dtype;
// returns each gradient's values.
std::vector<std::pair<std::string, std::vector<double>>> OneCallPerOp(int op, DataType dtype) {
  Call call;
  call.input = TensorFromValues(dtype, {2, 3}, {0.5, -1, 2, 1.5, 0.25, -2});
  call.source = TensorFromValues(dtype, {2, 3}, {1, 2, -0.5, 0.75, -1.5, 3});
  switch (op) {
    case 0:  // gather with broadcast: input [1, 3] against index [2, 2].
      call.input = TensorFromValues(dtype, {1, 3}, {0.5, -1, 2});
      call.index = IndexTensor({2, 2}, {0, 2, 2, 2});
      call.args = GatherArgs{
          .input = call.input.view(), .index = call.index.view(), .axis = 1, .broadcast = true};
      break;
    case 1:
      call.index = IndexTensor({3}, {1, 0, 1});
      call.args = IndexSelectArgs{.input = call.input.view(), .index = call.index.view()};
      break;
    case 2:
      call.index = IndexTensor({3, 1}, {1, 0, 1});
      call.args = GatherNdArgs{.input = call.input.view(), .index = call.index.view()};
      break;
    case 3:
      call.index = IndexTensor({2}, {1, 1});
      call.args = IndexReduceArgs{.input = call.input.view(),
                                  .index = call.index.view(),
                                  .source = call.source.view(),
                                  .reduce = Reduction::kMean};
      break;
    case 4:
      call.index = IndexTensor({2, 1}, {0, 0});
      call.args = ScatterNdArgs{.input = call.input.view(),
                                .index = call.index.view(),
                                .source = call.source.view(),
                                .reduce = Reduction::kProd};
      break;
    case 5:
      call.source = TensorFromValues(dtype, {2}, {1, 2});
      call.args = SelectScatterArgs{
          .input = call.input.view(), .src = call.source.view(), .axis = 1, .index = -1};
      break;
    case 6:
      call.source = TensorFromValues(dtype, {2, 2}, {1, 2, 3, 4});
      call.args = SliceScatterArgs{
          .input = call.input.view(), .src = call.source.view(), .axis = 1, .step = 2};
      break;
    case 7:
      call.source = TensorFromValues(dtype, {2}, {1, 2});
      call.args =
          DiagonalScatterArgs{.input = call.input.view(), .src = call.source.view(), .offset = 1};
      break;
    default:  // masked_scatter: input [3] broadcast against a mask [2, 3].
      call.input = TensorFromValues(dtype, {3}, {0.5, -1, 2});
      call.mask = TensorFromValues(DataType::kBool, {2, 3}, {1, 0, 1, 0, 1, 1});
      call.args = MaskedScatterArgs{
          .input = call.input.view(), .mask = call.mask.view(), .source = call.source.view()};
      break;
  }
  absl::StatusOr<Tensor> result = Forward(call.args);
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return {};
  std::vector<double> grad_values(result->numel());
  for (size_t i = 0; i < grad_values.size(); ++i)
    grad_values[i] = (static_cast<int>(i % 5) - 2) * 0.75;
  const Tensor grad = TensorFromValues(dtype, result->shape(), grad_values);
  absl::StatusOr<Gradients> gradients = BackwardOf(call.args, grad.view());
  EXPECT_TRUE(gradients.ok()) << gradients.status();
  if (!gradients.ok()) return {};
  std::vector<std::pair<std::string, std::vector<double>>> values;
  for (const auto& [name, gradient] : gradients->by_argument) {
    EXPECT_EQ(gradient.dtype(), dtype) << name;
    values.emplace_back(name, ToDoubles(gradient));
  }
  return values;
}

TEST_P(BackwardDtypeTest, EveryOpMatchesFloat64) {
  const DataType dtype = GetParam();
  const double tolerance =
      dtype == DataType::kFloat16 || dtype == DataType::kBFloat16 ? 1e-2 : 1e-6;
  for (int op = 0; op < 9; ++op) {
    SCOPED_TRACE(absl::StrCat("op ", op));
    const auto actual = OneCallPerOp(op, dtype);
    const auto expected = OneCallPerOp(op, DataType::kFloat64);
    ASSERT_EQ(actual.size(), expected.size());
    for (size_t a = 0; a < actual.size(); ++a) {
      EXPECT_EQ(actual[a].first, expected[a].first);
      ASSERT_EQ(actual[a].second.size(), expected[a].second.size());
      for (size_t i = 0; i < actual[a].second.size(); ++i) {
        EXPECT_NEAR(actual[a].second[i], expected[a].second[i],
                    tolerance * std::max(1.0, std::abs(expected[a].second[i])))
            << actual[a].first << "[" << i << "]";
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(FloatingDtypes, BackwardDtypeTest,
                         ::testing::Values(DataType::kFloat16, DataType::kBFloat16,
                                           DataType::kFloat32, DataType::kFloat64,
                                           DataType::kComplex64, DataType::kComplex128),
                         testing::DataTypeParamName);

// ---------------------------------------------------------------------------------------------
// Errors.

TEST(BackwardErrorTest, RejectsNonDifferentiableDtypes) {
  const Tensor input = TensorFromValues(DataType::kInt64, {3}, {1, 2, 3});
  const Tensor index = IndexTensor({2}, {0, 2});
  const Tensor source = TensorFromValues(DataType::kInt64, {2}, {4, 5});
  const Tensor grad = TensorFromValues(DataType::kInt64, {3}, {1, 1, 1});
  absl::StatusOr<Gradients> gradients =
      Backward(ScatterArgs{.input = input.view(), .index = index.view(), .source = source.view()},
               grad.view());
  EXPECT_EQ(gradients.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gradients.status().message(),
            "scatter backward: input.dtype = int64 is not differentiable (expected a floating or "
            "complex dtype)");

  const Tensor gathered = TensorFromValues(DataType::kInt64, {2}, {1, 1});
  gradients = Backward(GatherArgs{.input = input.view(), .index = index.view()}, gathered.view());
  EXPECT_THAT(gradients.status().message(),
              HasSubstr("gather backward: input.dtype = int64 is not differentiable"));

  const Tensor flags = TensorFromValues(DataType::kBool, {3}, {1, 0, 1});
  const Tensor mask = TensorFromValues(DataType::kBool, {3}, {1, 0, 0});
  gradients = Backward(
      MaskedScatterArgs{.input = flags.view(), .mask = mask.view(), .source = flags.view()},
      flags.view());
  EXPECT_THAT(gradients.status().message(),
              HasSubstr("masked_scatter backward: input.dtype = bool is not differentiable"));

  const Tensor coordinates = IndexTensor({2, 1}, {0, 2});
  gradients =
      Backward(ScatterNdArgs{.shape = {3}, .index = coordinates.view(), .source = source.view()},
               grad.view());
  EXPECT_THAT(gradients.status().message(),
              HasSubstr("scatter_nd backward: src.dtype = int64 is not differentiable"));
}

TEST(BackwardErrorTest, RejectsMismatchedGradOutput) {
  const Tensor input = TensorFromValues(DataType::kFloat32, {2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor index = IndexTensor({2, 2}, {0, 1, 2, 0});
  const Tensor wrong_shape = TensorFromValues(DataType::kFloat32, {2, 3}, {1, 1, 1, 1, 1, 1});
  absl::StatusOr<Gradients> gradients = Backward(
      GatherArgs{.input = input.view(), .index = index.view(), .axis = 1}, wrong_shape.view());
  EXPECT_EQ(gradients.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(gradients.status().message(),
            "gather backward: grad_output.shape = [2, 3] does not match the result's shape [2, "
            "2]");
  const Tensor wrong_dtype = TensorFromValues(DataType::kFloat64, {2, 2}, {1, 1, 1, 1});
  gradients = Backward(GatherArgs{.input = input.view(), .index = index.view(), .axis = 1},
                       wrong_dtype.view());
  EXPECT_EQ(gradients.status().message(),
            "gather backward: grad_output.dtype = float64 does not match the result's dtype "
            "float32");
}

TEST(BackwardErrorTest, ReportsTheForwardOpsErrors) {
  const Tensor input = TensorFromValues(DataType::kFloat32, {3}, {1, 2, 3});
  const Tensor index = IndexTensor({1}, {7});
  const Tensor grad = TensorFromValues(DataType::kFloat32, {1}, {1});
  absl::StatusOr<Gradients> gradients =
      Backward(GatherArgs{.input = input.view(), .index = index.view()}, grad.view());
  EXPECT_EQ(gradients.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(gradients.status().message(), HasSubstr("= 7 is out of range"));
}

}  // namespace
}  // namespace tensorops
