// Tests of the gRPC service: a real Server in-process on a free loopback port, called through the
// raw generated stub, so that what is tested is exactly what goes over the wire.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "client/cpp/client.h"
#include "gmock/gmock.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "server/core/prepared_op.h"
#include "server/server.h"
#include "server/tensorops_v1/tensor_ops_service.h"
#include "tensorops/v1/service.grpc.pb.h"
#include "tests/generic_stream.h"
#include "tests/service_test_util.h"

namespace tensorops {
namespace {

using ::tensorops::testing::Connect;
using ::tensorops::testing::ExpectStatus;
using ::tensorops::testing::GenericStream;
using ::tensorops::testing::MakeMask;
using ::tensorops::testing::MakeTensor;
using ::tensorops::testing::StartServer;
using ::tensorops::testing::ToByteBuffer;
using ::tensorops::testing::ToString;
using ::tensorops::testing::Values;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartServer();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(server_->port(), 0);
    stub_ = Connect(server_->port());
  }

  grpc::Status Gather(const v1::GatherRequest& request, v1::GatherResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub_->Gather(&context, request, response);
  }

  grpc::Status Scatter(const v1::ScatterRequest& request, v1::ScatterResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub_->Scatter(&context, request, response);
  }

  grpc::Status GatherNd(const v1::GatherNdRequest& request, v1::GatherNdResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub_->GatherNd(&context, request, response);
  }

  grpc::Status ScatterNd(const v1::ScatterNdRequest& request, v1::ScatterNdResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub_->ScatterNd(&context, request, response);
  }

  grpc::Status MaskedScatter(const v1::MaskedScatterRequest& request,
                             v1::MaskedScatterResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub_->MaskedScatter(&context, request, response);
  }

  // ExpectStillServing checks a good call succeeds (after a bad one).
  void ExpectStillServing() {
    v1::GatherRequest request;
    *request.mutable_input() = MakeTensor<int64_t>({3}, {10, 20, 30});
    *request.mutable_index() = MakeTensor<int64_t>({2}, {2, 0});
    v1::GatherResponse response;
    const grpc::Status status = Gather(request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_THAT(Values<int64_t>(response.result()), ElementsAre(30, 10));
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<v1::TensorOps::Stub> stub_;
};

// --- Happy paths (PyTorch's documented examples) ------------------------------------------------

TEST_F(ServiceTest, GatherTorchExample) {
  // torch.gather(torch.tensor([[1, 2], [3, 4]]), 1, torch.tensor([[0, 0], [1, 0]]))
  v1::GatherRequest request;
  *request.mutable_input() = MakeTensor<int64_t>({2, 2}, {1, 2, 3, 4});
  *request.mutable_index() = MakeTensor<int64_t>({2, 2}, {0, 0, 1, 0});
  request.set_axis(1);
  v1::GatherResponse response;
  const grpc::Status status = Gather(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(response.result().shape(), ElementsAre(2, 2));
  EXPECT_THAT(Values<int64_t>(response.result()), ElementsAre(1, 1, 4, 3));
}

TEST_F(ServiceTest, GatherFloatWithInt32AndNegativeIndices) {
  v1::GatherRequest request;
  *request.mutable_input() = MakeTensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  *request.mutable_index() = MakeTensor<int32_t>({2, 2}, {-1, 0, 1, -3});
  request.set_axis(-1);
  v1::GatherResponse response;
  const grpc::Status status = Gather(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(response.result().shape(), ElementsAre(2, 2));
  EXPECT_THAT(Values<float>(response.result()), ElementsAre(3, 1, 5, 4));
}

TEST_F(ServiceTest, GatherOfZeroElements) {
  v1::GatherRequest request;
  *request.mutable_input() = MakeTensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  *request.mutable_index() = MakeTensor<int64_t>({2, 0}, {});
  request.set_axis(1);
  v1::GatherResponse response;
  const grpc::Status status = Gather(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(response.result().shape(), ElementsAre(2, 0));
  EXPECT_TRUE(response.result().data().empty());
}

TEST_F(ServiceTest, ScatterAddTorchExample) {
  // torch.zeros(3, 5).scatter_add_(0, torch.tensor([[0, 1, 2, 0, 0]]), torch.ones((2, 5)))
  v1::ScatterRequest request;
  *request.mutable_input() = MakeTensor<float>({3, 5}, std::vector<float>(15, 0.0f));
  *request.mutable_index() = MakeTensor<int64_t>({1, 5}, {0, 1, 2, 0, 0});
  *request.mutable_src() = MakeTensor<float>({2, 5}, std::vector<float>(10, 1.0f));
  request.set_axis(0);
  request.set_reduce(v1::REDUCTION_SUM);
  v1::ScatterResponse response;
  const grpc::Status status = Scatter(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(response.result().shape(), ElementsAre(3, 5));
  EXPECT_THAT(Values<float>(response.result()),
              ElementsAreArray({1, 0, 0, 1, 1, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0}));
}

TEST_F(ServiceTest, ScatterReduceAmaxIncludeSelf) {
  // input2 = torch.tensor([5., 4., 3., 2.]); src = torch.tensor([1., 2., 3., 4., 5., 6.])
  // index = torch.tensor([0, 1, 0, 1, 2, 1])
  // input2.scatter_reduce(0, index, src, reduce="amax")                      -> [5, 6, 5, 2]
  // input2.scatter_reduce(0, index, src, reduce="amax", include_self=False)  -> [3, 6, 5, 2]
  v1::ScatterRequest request;
  *request.mutable_input() = MakeTensor<float>({4}, {5, 4, 3, 2});
  *request.mutable_index() = MakeTensor<int64_t>({6}, {0, 1, 0, 1, 2, 1});
  *request.mutable_src() = MakeTensor<float>({6}, {1, 2, 3, 4, 5, 6});
  request.set_reduce(v1::REDUCTION_AMAX);

  v1::ScatterResponse response;
  grpc::Status status = Scatter(request, &response);  // include_self absent: true.
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(Values<float>(response.result()), ElementsAre(5, 6, 5, 2));

  request.set_include_self(false);
  status = Scatter(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(Values<float>(response.result()), ElementsAre(3, 6, 5, 2));

  request.set_include_self(true);
  status = Scatter(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(Values<float>(response.result()), ElementsAre(5, 6, 5, 2));
}

TEST_F(ServiceTest, ScatterScalarValue) {
  // torch.zeros(2, 4, dtype=torch.int32).scatter_(1, torch.tensor([[2], [3]]), 7)
  v1::ScatterRequest request;
  *request.mutable_input() = MakeTensor<int32_t>({2, 4}, std::vector<int32_t>(8, 0));
  *request.mutable_index() = MakeTensor<int64_t>({2, 1}, {2, 3});
  request.mutable_value()->set_int_value(7);
  request.set_axis(1);
  v1::ScatterResponse response;
  const grpc::Status status = Scatter(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(response.result().shape(), ElementsAre(2, 4));
  EXPECT_THAT(Values<int32_t>(response.result()), ElementsAre(0, 0, 7, 0, 0, 0, 0, 7));
}

// GatherNd, ScatterNd and MaskedScatter: the examples of TensorFlow's, Paddle's and PyTorch's
// documentation, and the identities of docs/semantics.md with Gather and Scatter.

TEST_F(ServiceTest, GatherNdTensorFlowForm) {
  // tf.gather_nd([[1, 2], [3, 4]], [[0, 0], [1, 1]]) -> [1, 4]: whole coordinates, elements.
  v1::GatherNdRequest request;
  *request.mutable_input() = MakeTensor<int64_t>({2, 2}, {1, 2, 3, 4});
  *request.mutable_index() = MakeTensor<int64_t>({2, 2}, {0, 0, 1, 1});
  v1::GatherNdResponse response;
  grpc::Status status = GatherNd(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(response.result().shape(), ElementsAre(2));
  EXPECT_THAT(Values<int64_t>(response.result()), ElementsAre(1, 4));

  // tf.gather_nd([[1, 2], [3, 4]], [[1], [-2]]) -> [[3, 4], [1, 2]]: a prefix, rows.
  *request.mutable_index() = MakeTensor<int32_t>({2, 1}, {1, -2});
  status = GatherNd(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(response.result().shape(), ElementsAre(2, 2));
  EXPECT_THAT(Values<int64_t>(response.result()), ElementsAre(3, 4, 1, 2));

  // tf.gather_nd(arange(8).reshape(2, 2, 2), [[1], [0]], batch_dims=1) -> [[2, 3], [4, 5]].
  *request.mutable_input() = MakeTensor<int64_t>({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  *request.mutable_index() = MakeTensor<int64_t>({2, 1}, {1, 0});
  request.set_batch_dims(1);
  status = GatherNd(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(response.result().shape(), ElementsAre(2, 2));
  EXPECT_THAT(Values<int64_t>(response.result()), ElementsAre(2, 3, 4, 5));
}

TEST_F(ServiceTest, GatherNdAxesForm) {
  // Gather(x, 1, [[0, 0], [1, 0]]) == GatherNd(x, idx[..., None], axes=[1]) -> [[1, 1], [4, 3]].
  v1::GatherNdRequest request;
  *request.mutable_input() = MakeTensor<float>({2, 2}, {1, 2, 3, 4});
  *request.mutable_index() = MakeTensor<int64_t>({2, 2, 1}, {0, 0, 1, 0});
  request.add_axes(1);
  v1::GatherNdResponse response;
  grpc::Status status = GatherNd(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(response.result().shape(), ElementsAre(2, 2));
  EXPECT_THAT(Values<float>(response.result()), ElementsAre(1, 1, 4, 3));

  // Two coordinates per position, axes [-1, 0]: out[i] = x[idx[i, 1], idx[i, 0]].
  *request.mutable_input() = MakeTensor<float>({2, 3}, {1, 2, 3, 4, 5, 6});
  *request.mutable_index() = MakeTensor<int64_t>({2, 1, 2}, {2, 1, -1, 0});
  request.clear_axes();
  request.add_axes(-1);
  request.add_axes(0);
  status = GatherNd(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(response.result().shape(), ElementsAre(2, 1));
  EXPECT_THAT(Values<float>(response.result()), ElementsAre(6, 3));
}

TEST_F(ServiceTest, ScatterNdTensorFlowForm) {
  // tf.tensor_scatter_nd_update(zeros(8), [[4], [3], [1], [7]], [9, 10, 11, 12]).
  v1::ScatterNdRequest request;
  *request.mutable_input() = MakeTensor<int32_t>({8}, std::vector<int32_t>(8, 0));
  *request.mutable_index() = MakeTensor<int64_t>({4, 1}, {4, 3, 1, 7});
  *request.mutable_src() = MakeTensor<int32_t>({4}, {9, 10, 11, 12});
  v1::ScatterNdResponse response;
  grpc::Status status = ScatterNd(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(response.result().shape(), ElementsAre(8));
  EXPECT_THAT(Values<int32_t>(response.result()), ElementsAre(0, 11, 0, 10, 9, 0, 0, 12));

  // tf.tensor_scatter_nd_add([1..8], [[4], [3], [1], [7]], [9, 10, 11, 12]).
  *request.mutable_input() = MakeTensor<int32_t>({8}, {1, 2, 3, 4, 5, 6, 7, 8});
  request.set_reduce(v1::REDUCTION_SUM);
  status = ScatterNd(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(Values<int32_t>(response.result()), ElementsAre(1, 13, 3, 14, 14, 6, 7, 20));

  // Rows: tf.tensor_scatter_nd_max(ones(3, 2), [[2], [0], [2]], [[5, 0], [0, 7], [3, 9]]), and
  // with include_self = false the untouched row 1 keeps its ones.
  *request.mutable_input() = MakeTensor<float>({3, 2}, std::vector<float>(6, 1.0f));
  *request.mutable_index() = MakeTensor<int64_t>({3, 1}, {2, 0, 2});
  *request.mutable_src() = MakeTensor<float>({3, 2}, {5, 0, 0, 7, 3, 9});
  request.set_reduce(v1::REDUCTION_AMAX);
  status = ScatterNd(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(Values<float>(response.result()), ElementsAre(1, 7, 1, 1, 5, 9));
  request.set_include_self(false);
  status = ScatterNd(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(Values<float>(response.result()), ElementsAre(0, 7, 1, 1, 5, 9));
}

TEST_F(ServiceTest, ScatterNdZerosOfShape) {
  // paddle.scatter_nd([[1], [3], [1]], [9, 10, 11], shape=[5]) -> [0, 20, 0, 10, 0].
  v1::ScatterNdRequest request;
  *request.mutable_index() = MakeTensor<int64_t>({3, 1}, {1, 3, 1});
  *request.mutable_src() = MakeTensor<float>({3}, {9, 10, 11});
  request.add_shape(5);
  request.set_reduce(v1::REDUCTION_SUM);
  v1::ScatterNdResponse response;
  const grpc::Status status = ScatterNd(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(response.result().shape(), ElementsAre(5));
  EXPECT_THAT(Values<float>(response.result()), ElementsAre(0, 20, 0, 10, 0));
}

TEST_F(ServiceTest, ScatterNdAxesFormEqualsScatter) {
  // torch.zeros(3, 5).scatter_(0, [[0, 1, 2, 0]], arange(1, 11).reshape(2, 5)), as
  // ScatterNd(x, idx[..., None], src, axes=[0]).
  v1::ScatterNdRequest request;
  *request.mutable_input() = MakeTensor<int64_t>({3, 5}, std::vector<int64_t>(15, 0));
  *request.mutable_index() = MakeTensor<int64_t>({1, 4, 1}, {0, 1, 2, 0});
  *request.mutable_src() = MakeTensor<int64_t>({2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  request.add_axes(0);
  v1::ScatterNdResponse response;
  const grpc::Status status = ScatterNd(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(response.result().shape(), ElementsAre(3, 5));
  EXPECT_THAT(Values<int64_t>(response.result()),
              ElementsAreArray({1, 0, 0, 4, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0}));
}

TEST_F(ServiceTest, MaskedScatterTorchExample) {
  // torch.zeros(2, 5).masked_scatter(mask, arange(10).reshape(2, 5)), PyTorch's example.
  v1::MaskedScatterRequest request;
  *request.mutable_input() = MakeTensor<int64_t>({2, 5}, std::vector<int64_t>(10, 0));
  *request.mutable_mask() = MakeMask({2, 5}, {0, 0, 0, 1, 1, 1, 1, 0, 1, 1});
  *request.mutable_src() = MakeTensor<int64_t>({2, 5}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  v1::MaskedScatterResponse response;
  grpc::Status status = MaskedScatter(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(response.result().shape(), ElementsAre(2, 5));
  EXPECT_THAT(Values<int64_t>(response.result()), ElementsAreArray({0, 0, 0, 0, 1, 2, 3, 0, 4, 5}));

  // Input [1, 3] and mask [2, 1] broadcast to a [2, 3] result; src is read flat.
  *request.mutable_input() = MakeTensor<float>({1, 3}, {7, 8, 9});
  *request.mutable_mask() = MakeMask({2, 1}, {0, 1});
  *request.mutable_src() = MakeTensor<float>({2, 2}, {1, 2, 3, 4});
  status = MaskedScatter(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(response.result().shape(), ElementsAre(2, 3));
  EXPECT_THAT(Values<float>(response.result()), ElementsAre(7, 8, 9, 1, 2, 3));
}

TEST_F(ServiceTest, ConcurrentCallsAllSucceed) {
  std::vector<std::thread> threads;
  std::vector<int> failures(8, 0);
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        v1::GatherRequest request;
        *request.mutable_input() = MakeTensor<int64_t>({4}, {t, t + 1, t + 2, t + 3});
        *request.mutable_index() = MakeTensor<int64_t>({2}, {3, 0});
        v1::GatherResponse response;
        grpc::ClientContext context;
        const grpc::Status status = stub_->Gather(&context, request, &response);
        if (!status.ok() || Values<int64_t>(response.result()) != std::vector<int64_t>{t + 3, t}) {
          ++failures[t];
        }
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_THAT(failures, ::testing::Each(0));
}

// --- Results computed in the request's input bytes (InputReuse) --------------------------------

// 64 x 64 float32 (16 KiB, above the size below which the input is never taken), values that
// show a misplaced or doubled update.
constexpr int64_t kSide = 64;
std::vector<float> Ramp(float scale) {
  std::vector<float> values(kSide * kSide);
  for (size_t i = 0; i < values.size(); ++i) values[i] = scale * static_cast<float>(i % 997);
  return values;
}

// InPlaceRequests: one request of every op that may take its input, with inputs and sources
// large enough to be taken, and the ways they update it (reductions, include_self, windows).
std::vector<v1::OpRequest> InPlaceRequests() {
  std::vector<v1::OpRequest> requests;
  const v1::Tensor input = MakeTensor<float>({kSide, kSide}, Ramp(0.5f));
  const v1::Tensor src = MakeTensor<float>({kSide, kSide}, Ramp(-0.25f));
  std::vector<int64_t> index_values(kSide * kSide);
  for (int64_t i = 0; i < kSide * kSide; ++i) index_values[i] = (i * 7 + i / kSide * 3) % kSide;
  const v1::Tensor index = MakeTensor<int64_t>({kSide, kSide}, index_values);
  for (const v1::Reduction reduce :
       {v1::REDUCTION_ASSIGN, v1::REDUCTION_SUM, v1::REDUCTION_MEAN, v1::REDUCTION_AMAX}) {
    for (const int64_t axis : {0, 1}) {
      v1::ScatterRequest* scatter = requests.emplace_back().mutable_scatter();
      *scatter->mutable_input() = input;
      *scatter->mutable_index() = index;
      *scatter->mutable_src() = src;
      scatter->set_axis(axis);
      scatter->set_reduce(reduce);
      scatter->set_include_self(axis == 0);
    }
  }
  v1::IndexReduceRequest* index_reduce = requests.emplace_back().mutable_index_reduce();
  *index_reduce->mutable_input() = input;
  *index_reduce->mutable_index() = MakeTensor<int64_t>({4}, {3, 60, 3, 0});
  const std::vector<float> ramp = Ramp(1.0f);
  *index_reduce->mutable_src() =
      MakeTensor<float>({kSide, 4}, std::vector<float>(ramp.begin(), ramp.begin() + 4 * kSide));
  index_reduce->set_axis(1);
  index_reduce->set_reduce(v1::REDUCTION_SUM);
  v1::SelectScatterRequest* select = requests.emplace_back().mutable_select_scatter();
  *select->mutable_input() = input;
  *select->mutable_src() = MakeTensor<float>({kSide}, std::vector<float>(kSide, 9.0f));
  select->set_axis(1);
  select->set_index(5);
  v1::SliceScatterRequest* slice = requests.emplace_back().mutable_slice_scatter();
  *slice->mutable_input() = input;
  *slice->mutable_src() = MakeTensor<float>({kSide, 16}, std::vector<float>(kSide * 16, -1.0f));
  slice->set_axis(1);
  slice->set_start(3);
  slice->set_step(4);
  v1::DiagonalScatterRequest* diagonal = requests.emplace_back().mutable_diagonal_scatter();
  *diagonal->mutable_input() = input;
  *diagonal->mutable_src() = MakeTensor<float>({kSide - 2}, std::vector<float>(kSide - 2, 7.0f));
  diagonal->set_offset(2);
  v1::MaskedScatterRequest* masked = requests.emplace_back().mutable_masked_scatter();
  *masked->mutable_input() = input;
  std::vector<uint8_t> mask(kSide * kSide);
  for (size_t i = 0; i < mask.size(); ++i) mask[i] = i % 3 == 0;
  *masked->mutable_mask() = MakeMask({kSide, kSide}, mask);
  *masked->mutable_src() = src;
  return requests;
}

// InputOf is the input tensor of whichever op `request` holds.
const v1::Tensor& InputOf(const v1::OpRequest& request) {
  switch (request.op_case()) {
    case v1::OpRequest::kScatter:
      return request.scatter().input();
    case v1::OpRequest::kIndexReduce:
      return request.index_reduce().input();
    case v1::OpRequest::kSelectScatter:
      return request.select_scatter().input();
    case v1::OpRequest::kSliceScatter:
      return request.slice_scatter().input();
    case v1::OpRequest::kDiagonalScatter:
      return request.diagonal_scatter().input();
    case v1::OpRequest::kMaskedScatter:
      return request.masked_scatter().input();
    default:
      ADD_FAILURE() << "no input in " << request.ShortDebugString().substr(0, 80);
      return request.gather().input();
  }
}

// RunPrepared prepares and runs `request` into `result`.
absl::Status RunPrepared(const v1::OpRequest& request, v1::Tensor* result, InputReuse reuse) {
  absl::StatusOr<PreparedOp> op = PrepareOp(request, wire::DecodeLimits{}, result, reuse);
  if (!op.ok()) return op.status();
  return op->run();
}

TEST(InputReuseTest, TakenInputGivesTheResultOfACopy) {
  for (const v1::OpRequest& request : InPlaceRequests()) {
    SCOPED_TRACE(OpName(request));
    v1::Tensor copied;
    ASSERT_TRUE(RunPrepared(request, &copied, InputReuse::kNo).ok());
    EXPECT_EQ(InputOf(request).data().size(), copied.data().size()) << "the input stays";

    v1::OpRequest taken_from = request;
    const void* input_bytes = InputOf(taken_from).data().data();
    v1::Tensor taken;
    ASSERT_TRUE(RunPrepared(taken_from, &taken, InputReuse::kMayTakeInput).ok());
    EXPECT_EQ(taken.data().data(), input_bytes) << "the result is not the input's memory";
    EXPECT_TRUE(InputOf(taken_from).data().empty());
    EXPECT_EQ(taken.dtype(), copied.dtype());
    EXPECT_THAT(taken.shape(), ElementsAreArray(copied.shape()));
    EXPECT_TRUE(taken.data() == copied.data()) << "in place and copied results differ";
  }
}

TEST(InputReuseTest, SmallBroadcastOrOtherOpsInputsAreNotTaken) {
  std::vector<v1::OpRequest> requests(3);
  // Small: a short string may hold its bytes inline, where the plan's view would lose them.
  *requests[0].mutable_scatter() = InPlaceRequests()[0].scatter();
  *requests[0].mutable_scatter()->mutable_input() = MakeTensor<float>({2, 2}, {1, 2, 3, 4});
  *requests[0].mutable_scatter()->mutable_index() = MakeTensor<int64_t>({1, 1}, {1});
  *requests[0].mutable_scatter()->mutable_src() = MakeTensor<float>({1, 1}, {9});
  // Broadcast: the result is larger than the input.
  v1::MaskedScatterRequest* masked = requests[1].mutable_masked_scatter();
  *masked->mutable_input() = MakeTensor<float>({1, kSide * 4}, std::vector<float>(kSide * 4, 1));
  *masked->mutable_mask() = MakeMask({2, 1}, {0, 1});
  *masked->mutable_src() = MakeTensor<float>({kSide * 4}, std::vector<float>(kSide * 4, 2));
  // Gather reads its input while writing the result.
  v1::GatherRequest* gather = requests[2].mutable_gather();
  *gather->mutable_input() = MakeTensor<float>({kSide, kSide}, Ramp(1.0f));
  *gather->mutable_index() =
      MakeTensor<int64_t>({kSide, kSide}, std::vector<int64_t>(kSide * kSide, 1));
  for (v1::OpRequest& request : requests) {
    SCOPED_TRACE(OpName(request));
    const size_t input_size = request.has_gather() ? request.gather().input().data().size()
                                                   : InputOf(request).data().size();
    v1::Tensor result;
    ASSERT_TRUE(RunPrepared(request, &result, InputReuse::kMayTakeInput).ok());
    EXPECT_EQ((request.has_gather() ? request.gather().input() : InputOf(request)).data().size(),
              input_size);
  }
}

TEST_F(ServiceTest, LargeScatterAndSliceScatterComputeInTheirInputs) {
  // Through the service the inputs are taken (InputReuse::kMayTakeInput); the results must be
  // those of the same requests run on copies.
  for (const v1::OpRequest& request : InPlaceRequests()) {
    SCOPED_TRACE(OpName(request));
    v1::Tensor expected;
    ASSERT_TRUE(RunPrepared(request, &expected, InputReuse::kNo).ok());
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    v1::OpResponse response;
    const grpc::Status status = stub_->Run(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_TRUE(response.result().data() == expected.data());
  }
}

// --- Bad requests: INVALID_ARGUMENT as docs/semantics.md words it; the server keeps serving ----

TEST_F(ServiceTest, OutOfRangeIndex) {
  v1::GatherRequest request;
  *request.mutable_input() = MakeTensor<int64_t>({2, 2}, {1, 2, 3, 4});
  *request.mutable_index() = MakeTensor<int64_t>({2, 2}, {0, 0, 5, 0});
  request.set_axis(1);
  v1::GatherResponse response;
  ExpectStatus(Gather(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "gather: index[1, 0] = 5 is out of range for axis 1 of input with size 2");
  ExpectStillServing();

  v1::ScatterRequest scatter;
  *scatter.mutable_input() = MakeTensor<float>({3}, {0, 0, 0});
  *scatter.mutable_index() = MakeTensor<int64_t>({2}, {1, -4});
  *scatter.mutable_src() = MakeTensor<float>({2}, {1, 2});
  v1::ScatterResponse scatter_response;
  ExpectStatus(Scatter(scatter, &scatter_response), grpc::StatusCode::INVALID_ARGUMENT,
               "scatter: index[1] = -4 is out of range for axis 0 of input with size 3");
  ExpectStillServing();
}

TEST_F(ServiceTest, DtypeMismatch) {
  v1::ScatterRequest request;
  *request.mutable_input() = MakeTensor<float>({3}, {0, 0, 0});
  *request.mutable_index() = MakeTensor<int64_t>({1}, {1});
  *request.mutable_src() = MakeTensor<int32_t>({1}, {1});
  v1::ScatterResponse response;
  ExpectStatus(Scatter(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "scatter: src.dtype = int32 does not match input.dtype = float32");
  ExpectStillServing();
}

TEST_F(ServiceTest, FloatIndexIsRejected) {
  v1::GatherRequest request;
  *request.mutable_input() = MakeTensor<float>({3}, {0, 0, 0});
  *request.mutable_index() = MakeTensor<float>({1}, {1});
  v1::GatherResponse response;
  ExpectStatus(Gather(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "gather: index.dtype = float32 is not an index type");
}

TEST_F(ServiceTest, MissingSource) {
  v1::ScatterRequest request;
  *request.mutable_input() = MakeTensor<float>({3}, {0, 0, 0});
  *request.mutable_index() = MakeTensor<int64_t>({1}, {1});
  v1::ScatterResponse response;
  ExpectStatus(Scatter(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "scatter: one of src or value is required");
  ExpectStillServing();
}

TEST_F(ServiceTest, EmptyScalarValue) {
  v1::ScatterRequest request;
  *request.mutable_input() = MakeTensor<float>({3}, {0, 0, 0});
  *request.mutable_index() = MakeTensor<int64_t>({1}, {1});
  request.mutable_value();  // Set, but holding nothing.
  v1::ScatterResponse response;
  ExpectStatus(Scatter(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "scatter: value has no value set");
}

TEST_F(ServiceTest, BadAxis) {
  v1::GatherRequest request;
  *request.mutable_input() = MakeTensor<int64_t>({2, 2}, {1, 2, 3, 4});
  *request.mutable_index() = MakeTensor<int64_t>({2, 2}, {0, 0, 1, 0});
  request.set_axis(2);
  v1::GatherResponse response;
  ExpectStatus(Gather(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "gather: axis = 2 is out of range");
  ExpectStillServing();
}

TEST_F(ServiceTest, UnknownReduction) {
  v1::ScatterRequest request;
  *request.mutable_input() = MakeTensor<float>({3}, {0, 0, 0});
  *request.mutable_index() = MakeTensor<int64_t>({1}, {1});
  *request.mutable_src() = MakeTensor<float>({1}, {1});
  request.set_reduce(static_cast<v1::Reduction>(17));
  v1::ScatterResponse response;
  ExpectStatus(Scatter(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "scatter: reduce = 17 is not a known reduction");
}

TEST_F(ServiceTest, MalformedWireTensor) {
  v1::GatherRequest request;
  *request.mutable_input() = MakeTensor<int64_t>({2, 2}, {1, 2, 3, 4});
  *request.mutable_index() = MakeTensor<int64_t>({2, 3}, {0, 0, 1, 0});
  v1::GatherResponse response;
  ExpectStatus(Gather(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "gather: index.data has 32 bytes but shape [2, 3] of int64 needs 48");
  request.mutable_input()->set_dtype(v1::DATA_TYPE_UNSPECIFIED);
  ExpectStatus(Gather(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "gather: input.dtype = 0 is not a known dtype");
  ExpectStillServing();
}

TEST_F(ServiceTest, GatherNdErrors) {
  v1::GatherNdRequest request;
  *request.mutable_input() = MakeTensor<int64_t>({2, 2}, {1, 2, 3, 4});
  *request.mutable_index() = MakeTensor<int64_t>({2, 2}, {0, 0, 2, 1});
  v1::GatherNdResponse response;
  ExpectStatus(GatherNd(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "gather_nd: index[1, 0] = 2 is out of range for axis 0 of input with size 2");
  ExpectStillServing();

  *request.mutable_index() = MakeTensor<int64_t>({2, 3, 1}, {0, 0, 0, 0, 0, 0});
  request.add_axes(2);
  ExpectStatus(GatherNd(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "gather_nd: axes[0] = 2 is out of range");
  request.set_axes(0, 1);
  request.add_axes(-1);
  *request.mutable_index() = MakeTensor<int64_t>({1, 1, 2}, {0, 0});
  ExpectStatus(GatherNd(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "gather_nd: axes[1] = -1 repeats axis 1");
  request.clear_axes();
  request.set_batch_dims(5);
  ExpectStatus(GatherNd(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "gather_nd: batch_dims = 5 is out of range");
  ExpectStillServing();
}

TEST_F(ServiceTest, ScatterNdErrors) {
  v1::ScatterNdRequest request;
  *request.mutable_input() = MakeTensor<float>({4}, {0, 0, 0, 0});
  *request.mutable_index() = MakeTensor<int64_t>({2, 1}, {3, -5});
  *request.mutable_src() = MakeTensor<float>({2}, {1, 2});
  v1::ScatterNdResponse response;
  ExpectStatus(ScatterNd(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "scatter_nd: index[1, 0] = -5 is out of range for axis 0 of input with size 4");
  ExpectStillServing();

  *request.mutable_index() = MakeTensor<int64_t>({2, 1}, {3, 0});
  request.add_axes(1);
  ExpectStatus(ScatterNd(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "scatter_nd: axes[0] = 1 is out of range");
  request.clear_axes();

  *request.mutable_src() = MakeTensor<int32_t>({2}, {1, 2});
  ExpectStatus(ScatterNd(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "scatter_nd: src.dtype = int32 does not match input.dtype = float32");
  *request.mutable_src() = MakeTensor<float>({3}, {1, 2, 3});
  ExpectStatus(ScatterNd(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "scatter_nd: src.shape = [3] does not match");
  *request.mutable_src() = MakeTensor<float>({2}, {1, 2});

  // Exactly one of input and shape.
  request.add_shape(4);
  ExpectStatus(ScatterNd(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "scatter_nd: shape = [4] is given together with input");
  request.clear_input();
  request.clear_shape();
  ExpectStatus(ScatterNd(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "scatter_nd: neither input nor shape is given");
  request.add_shape(4);
  request.add_shape(-2);
  ExpectStatus(ScatterNd(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "scatter_nd: shape[1] = -2 is negative");
  request.clear_shape();
  for (int d = 0; d < 3; ++d) request.add_shape(int64_t{1} << 30);
  ExpectStatus(ScatterNd(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "scatter_nd: shape [1073741824, 1073741824, 1073741824] has more elements than fit "
               "in int64");
  request.clear_shape();
  request.add_shape(4);
  request.set_reduce(static_cast<v1::Reduction>(9));
  ExpectStatus(ScatterNd(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "scatter_nd: reduce = 9 is not a known reduction");
  ExpectStillServing();
}

TEST_F(ServiceTest, MaskedScatterErrors) {
  v1::MaskedScatterRequest request;
  *request.mutable_input() = MakeTensor<float>({2, 3}, std::vector<float>(6, 0.0f));
  *request.mutable_mask() = MakeMask({2, 3}, {1, 1, 0, 1, 1, 1});
  *request.mutable_src() = MakeTensor<float>({3}, {1, 2, 3});
  v1::MaskedScatterResponse response;
  ExpectStatus(MaskedScatter(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "masked_scatter: src has 3 elements but mask has 5 true positions");
  ExpectStillServing();

  *request.mutable_mask() = MakeTensor<int64_t>({3}, {1, 0, 1});
  ExpectStatus(MaskedScatter(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "masked_scatter: mask.dtype = int64 must be bool");
  *request.mutable_mask() = MakeMask({2}, {1, 0});
  ExpectStatus(MaskedScatter(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "masked_scatter: cannot broadcast input of shape [2, 3] with mask of shape [2]");
  *request.mutable_mask() = MakeMask({3}, {1, 0, 2});
  ExpectStatus(MaskedScatter(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "masked_scatter: mask.data[2] = 2 is not a valid bool");
  *request.mutable_mask() = MakeMask({3}, {1, 0, 1});
  *request.mutable_src() = MakeTensor<int32_t>({4}, {1, 2, 3, 4});
  ExpectStatus(MaskedScatter(request, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "masked_scatter: src.dtype = int32 does not match input.dtype = float32");
  ExpectStillServing();
}

// --- Limits
// ---------------------------------------------------------------------------------------

// TooLargeMessage is the refusal of a request of `bytes` bytes of `type` over
// --max_message_bytes=`limit` (server/rpc/parsed_request.h).
std::string TooLargeMessage(size_t bytes, std::string_view type, int64_t limit) {
  return absl::StrFormat("request of %d bytes (%s) is larger than --max_message_bytes=%d: ", bytes,
                         type, limit);
}

// gRPC receives more than --max_message_bytes (twice it, at least 4 MiB more), so that the server
// refuses a larger request itself, naming the flag, the request's size and the limit, instead of
// gRPC's "Received message larger than max". The stub sends anything (no client-side limit).
TEST(ServiceLimitsTest, MessageLargerThanMaxMessageBytes) {
  ServerOptions::Limits limits;
  limits.max_message_bytes = 64 << 10;
  std::unique_ptr<Server> server = StartServer(limits);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<v1::TensorOps::Stub> stub = Connect(server->port());

  v1::GatherRequest request;
  *request.mutable_input() = MakeTensor<float>({32 << 10}, std::vector<float>(32 << 10, 1.0f));
  *request.mutable_index() = MakeTensor<int64_t>({1}, {0});
  v1::GatherResponse response;
  {
    grpc::ClientContext context;
    const grpc::Status status = stub->Gather(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_EQ(status.error_message(),
              TooLargeMessage(request.ByteSizeLong(), "tensorops.v1.GatherRequest", 64 << 10) +
                  "send a smaller request; a tensor too large for one message can be uploaded to "
                  "the tensor store with PutTensor, in chunks, and referenced by name");
  }
  // Run (and every other RPC) the same.
  {
    v1::OpRequest run;
    *run.mutable_gather() = request;
    v1::OpResponse run_response;
    grpc::ClientContext context;
    ExpectStatus(stub->Run(&context, run, &run_response), grpc::StatusCode::RESOURCE_EXHAUSTED,
                 TooLargeMessage(run.ByteSizeLong(), "tensorops.v1.OpRequest", 64 << 10));
  }
  // Both count as refused over a limit.
  EXPECT_THAT(server->metrics().Scrape(),
              HasSubstr("tensorops_rejected_total{reason=\"limit\"} 2\n"));
  // Past gRPC's own limit (64 KiB + 4 MiB here), gRPC refuses the request as before.
  {
    v1::GatherRequest huge = request;
    *huge.mutable_input() = MakeTensor<float>({5 << 18}, std::vector<float>(5 << 18, 1.0f));
    grpc::ClientContext context;
    ExpectStatus(stub->Gather(&context, huge, &response), grpc::StatusCode::RESOURCE_EXHAUSTED,
                 absl::StrFormat("Received message larger than max (%d vs. %d)",
                                 huge.ByteSizeLong(), (64 << 10) + (4 << 20)));
  }
  // A request under the limit still works.
  *request.mutable_input() = MakeTensor<float>({4}, {1, 2, 3, 4});
  *request.mutable_index() = MakeTensor<int64_t>({1}, {3});
  grpc::ClientContext context;
  const grpc::Status status = stub->Gather(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(Values<float>(response.result()), ElementsAre(4));
}

// A RunStream request over --max_message_bytes gets its error by its id, and the stream goes on.
TEST(ServiceLimitsTest, RunStreamRequestLargerThanMaxMessageBytes) {
  ServerOptions::Limits limits;
  limits.max_message_bytes = 64 << 10;
  std::unique_ptr<Server> server = StartServer(limits);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<v1::TensorOps::Stub> stub = Connect(server->port());

  grpc::ClientContext context;
  auto stream = stub->RunStream(&context);
  v1::RunStreamRequest large;
  large.set_request_id(7);
  v1::GatherRequest* gather = large.mutable_op()->mutable_gather();
  *gather->mutable_input() = MakeTensor<float>({32 << 10}, std::vector<float>(32 << 10, 1.0f));
  *gather->mutable_index() = MakeTensor<int64_t>({1}, {0});
  ASSERT_TRUE(stream->Write(large));
  v1::RunStreamRequest small;
  small.set_request_id(8);
  *small.mutable_op()->mutable_gather()->mutable_input() = MakeTensor<float>({2}, {1, 2});
  *small.mutable_op()->mutable_gather()->mutable_index() = MakeTensor<int64_t>({1}, {1});
  ASSERT_TRUE(stream->Write(small));
  ASSERT_TRUE(stream->WritesDone());

  // Responses come in completion order: take them by id.
  std::map<uint64_t, v1::RunStreamResponse> responses;
  v1::RunStreamResponse response;
  while (stream->Read(&response)) responses[response.request_id()] = response;
  ASSERT_EQ(responses.size(), 2u);
  EXPECT_EQ(responses[7].error().code(),
            static_cast<int32_t>(grpc::StatusCode::RESOURCE_EXHAUSTED));
  EXPECT_THAT(
      responses[7].error().message(),
      HasSubstr(TooLargeMessage(large.ByteSizeLong(), "tensorops.v1.RunStreamRequest", 64 << 10)));
  EXPECT_THAT(Values<float>(responses[8].result()), ElementsAre(2));
  const grpc::Status status = stream->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
}

TEST(ServiceLimitsTest, TensorsAndResultsOverMaxElements) {
  ServerOptions::Limits limits;
  limits.max_elements = 10;
  std::unique_ptr<Server> server = StartServer(limits);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<v1::TensorOps::Stub> stub = Connect(server->port());

  v1::GatherRequest request;
  *request.mutable_input() = MakeTensor<float>({12}, std::vector<float>(12, 0.0f));
  *request.mutable_index() = MakeTensor<int64_t>({1}, {0});
  v1::GatherResponse response;
  {
    grpc::ClientContext context;
    ExpectStatus(stub->Gather(&context, request, &response), grpc::StatusCode::RESOURCE_EXHAUSTED,
                 "gather: input.shape [12] has 12 elements, more than the server's limit of 10 "
                 "(--max_elements)");
  }
  // take_along_axis broadcast: input [5, 1] and index [1, 3] are each under the limit, the
  // broadcast result [5, 3] is not; it is refused before it is allocated.
  *request.mutable_input() = MakeTensor<float>({5, 1}, {1, 2, 3, 4, 5});
  *request.mutable_index() = MakeTensor<int64_t>({1, 3}, {0, 0, 0});
  request.set_axis(1);
  request.set_broadcast(true);
  grpc::ClientContext context;
  ExpectStatus(stub->Gather(&context, request, &response), grpc::StatusCode::RESOURCE_EXHAUSTED,
               "gather: result.shape [5, 3] has 15 elements");
}

TEST(ServiceLimitsTest, ScatterNdShapeOverMaxElements) {
  ServerOptions::Limits limits;
  limits.max_elements = 10;
  std::unique_ptr<Server> server = StartServer(limits);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<v1::TensorOps::Stub> stub = Connect(server->port());

  // The zeros form's shape is checked like a tensor's before anything is allocated.
  v1::ScatterNdRequest request;
  *request.mutable_index() = MakeTensor<int64_t>({1, 2}, {0, 0});
  *request.mutable_src() = MakeTensor<float>({1}, {1});
  request.add_shape(4);
  request.add_shape(4);
  v1::ScatterNdResponse response;
  {
    grpc::ClientContext context;
    ExpectStatus(stub->ScatterNd(&context, request, &response),
                 grpc::StatusCode::RESOURCE_EXHAUSTED,
                 "scatter_nd: shape [4, 4] has 16 elements, more than the server's limit of 10 "
                 "(--max_elements)");
  }
  request.set_shape(1, 2);
  grpc::ClientContext context;
  const grpc::Status status = stub->ScatterNd(&context, request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_THAT(Values<float>(response.result()), ElementsAre(1, 0, 0, 0, 0, 0, 0, 0));
}

TEST(ServiceLimitsTest, MaskedScatterBroadcastResultOverMaxElements) {
  ServerOptions::Limits limits;
  limits.max_elements = 10;
  std::unique_ptr<Server> server = StartServer(limits);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<v1::TensorOps::Stub> stub = Connect(server->port());
  v1::MaskedScatterRequest request;
  *request.mutable_input() = MakeTensor<float>({1, 4}, {0, 0, 0, 0});
  *request.mutable_mask() = MakeMask({4, 1}, {0, 0, 0, 0});
  *request.mutable_src() = MakeTensor<float>({1}, {1});
  v1::MaskedScatterResponse response;
  grpc::ClientContext context;
  ExpectStatus(stub->MaskedScatter(&context, request, &response),
               grpc::StatusCode::RESOURCE_EXHAUSTED,
               "masked_scatter: result.shape [4, 4] has 16 elements");
}

TEST(ServiceLimitsTest, RankOverMaxRank) {
  ServerOptions::Limits limits;
  limits.max_rank = 1;
  std::unique_ptr<Server> server = StartServer(limits);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<v1::TensorOps::Stub> stub = Connect(server->port());
  v1::GatherRequest request;
  *request.mutable_input() = MakeTensor<float>({1, 1}, {1});
  *request.mutable_index() = MakeTensor<int64_t>({1, 1}, {0});
  v1::GatherResponse response;
  grpc::ClientContext context;
  ExpectStatus(stub->Gather(&context, request, &response), grpc::StatusCode::RESOURCE_EXHAUSTED,
               "--max_rank");
}

// --- Health and reflection
// -----------------------------------------------------------------------------
//
// The health and reflection .proto files are not installed here (and not vendored), so these calls
// go through grpc::GenericStub with hand-encoded requests, and replies are decoded field by field.
// The field numbers, from grpc/health/v1/health.proto and grpc/reflection/v1alpha/reflection.proto:
//   HealthCheckRequest       { string service = 1; }
//   HealthCheckResponse      { ServingStatus status = 1; }  // SERVING 1, NOT_SERVING 2,
//                                                           // SERVICE_UNKNOWN 3
//   ServerReflectionRequest  { string list_services = 7; }
//   ServerReflectionResponse { ListServiceResponse list_services_response = 6; }
//   ListServiceResponse      { repeated ServiceResponse service = 1; }
//   ServiceResponse          { string name = 1; }

constexpr char kHealthCheck[] = "/grpc.health.v1.Health/Check";
constexpr char kHealthWatch[] = "/grpc.health.v1.Health/Watch";
constexpr char kReflectionInfo[] = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";
constexpr int kServing = 1;
constexpr int kNotServing = 2;
constexpr auto kCallTimeout = std::chrono::seconds(30);

// EncodeStringField returns one length-delimited field (wire type 2) holding `value`.
std::string EncodeStringField(int field_number, const std::string& value) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream out(&stream);
    out.WriteTag(static_cast<uint32_t>(field_number) << 3 | 2);
    out.WriteVarint32(static_cast<uint32_t>(value.size()));
    out.WriteString(value);
  }
  return bytes;
}

// WireField is one decoded field: `varint` for wire type 0, `bytes` for wire type 2.
struct WireField {
  int number = 0;
  uint64_t varint = 0;
  std::string bytes;
};

// DecodeFields splits a serialized message into its fields; nullopt when it is malformed or holds
// a wire type other than varint or length-delimited (none of the messages above do).
std::optional<std::vector<WireField>> DecodeFields(const std::string& message) {
  google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(message.data()),
                                            static_cast<int>(message.size()));
  std::vector<WireField> fields;
  while (const uint32_t tag = in.ReadTag()) {
    WireField field;
    field.number = static_cast<int>(tag >> 3);
    if ((tag & 7) == 0) {
      if (!in.ReadVarint64(&field.varint)) return std::nullopt;
    } else if ((tag & 7) == 2) {
      uint32_t length = 0;
      if (!in.ReadVarint32(&length) || !in.ReadString(&field.bytes, static_cast<int>(length))) {
        return std::nullopt;
      }
    } else {
      return std::nullopt;
    }
    fields.push_back(std::move(field));
  }
  if (!in.ConsumedEntireMessage()) return std::nullopt;
  return fields;
}

// ServingStatusOf decodes a HealthCheckResponse; -1 when it is malformed.
int ServingStatusOf(const std::string& response) {
  std::optional<std::vector<WireField>> fields = DecodeFields(response);
  if (!fields.has_value()) return -1;
  int status = 0;  // UNKNOWN, proto3's default when the field is absent.
  for (const WireField& field : *fields) {
    if (field.number == 1) status = static_cast<int>(field.varint);
  }
  return status;
}

std::shared_ptr<grpc::Channel> ChannelTo(int port) {
  return grpc::CreateChannel(absl::StrFormat("127.0.0.1:%d", port),
                             grpc::InsecureChannelCredentials());
}

// HealthReply is the outcome of one health Check: the call's status and, when OK, the serving
// status it reported.
struct HealthReply {
  grpc::Status status;
  int serving_status = 0;
};

// CheckHealth calls Health/Check for `service` (an empty name asks for the whole server).
HealthReply CheckHealth(const std::shared_ptr<grpc::Channel>& channel, const std::string& service) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kCallTimeout);
  const grpc::ByteBuffer request = ToByteBuffer(EncodeStringField(1, service));
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  stub.UnaryCall(&context, kHealthCheck, grpc::StubOptions(), &request, &response,
                 [&done](grpc::Status status) { done.set_value(std::move(status)); });
  HealthReply reply{done.get_future().get()};
  if (reply.status.ok()) reply.serving_status = ServingStatusOf(ToString(response));
  return reply;
}

// ListServices asks the reflection service which services the server offers.
std::vector<std::string> ListServices(const std::shared_ptr<grpc::Channel>& channel) {
  GenericStream stream(channel, kReflectionInfo);
  EXPECT_TRUE(stream.Start());
  EXPECT_TRUE(stream.Write(EncodeStringField(7, "*")));
  EXPECT_TRUE(stream.WritesDone());
  std::vector<std::string> names;
  while (std::optional<std::string> response = stream.Read()) {
    std::optional<std::vector<WireField>> fields = DecodeFields(*response);
    EXPECT_TRUE(fields.has_value());
    if (!fields.has_value()) break;
    for (const WireField& field : *fields) {
      if (field.number != 6) continue;
      std::optional<std::vector<WireField>> services = DecodeFields(field.bytes);
      EXPECT_TRUE(services.has_value());
      if (!services.has_value()) break;
      for (const WireField& service : *services) {
        if (service.number != 1) continue;
        std::optional<std::vector<WireField>> service_fields = DecodeFields(service.bytes);
        EXPECT_TRUE(service_fields.has_value());
        if (!service_fields.has_value()) break;
        for (const WireField& name : *service_fields) {
          if (name.number == 1) names.push_back(name.bytes);
        }
      }
    }
  }
  const grpc::Status status = stream.Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  return names;
}

TEST(HealthTest, ServerAndServiceAreServingAfterStart) {
  std::unique_ptr<Server> server = StartServer();
  ASSERT_NE(server, nullptr);
  std::shared_ptr<grpc::Channel> channel = ChannelTo(server->port());
  for (const std::string service : {"", "tensorops.v1.TensorOps"}) {
    const HealthReply reply = CheckHealth(channel, service);
    ASSERT_TRUE(reply.status.ok()) << "'" << service << "': " << reply.status.error_message();
    EXPECT_EQ(reply.serving_status, kServing) << "'" << service << "'";
  }
}

TEST(HealthTest, UnknownServiceIsNotFound) {
  std::unique_ptr<Server> server = StartServer();
  ASSERT_NE(server, nullptr);
  const HealthReply reply = CheckHealth(ChannelTo(server->port()), "tensorops.v1.NoSuchService");
  EXPECT_EQ(reply.status.error_code(), grpc::StatusCode::NOT_FOUND)
      << reply.status.error_message() << "; serving status " << reply.serving_status;
}

// Watch streams opened before Shutdown are calls in flight, so Shutdown cannot return (its grace
// is a minute) until the test cancels them: NOT_SERVING must arrive while the server drains.
TEST(HealthTest, NotServingAsSoonAsShutdownBegins) {
  std::unique_ptr<Server> server = StartServer();
  ASSERT_NE(server, nullptr);
  std::shared_ptr<grpc::Channel> channel = ChannelTo(server->port());
  std::vector<std::unique_ptr<GenericStream>> watches;
  for (const std::string service : {"", "tensorops.v1.TensorOps"}) {
    auto watch = std::make_unique<GenericStream>(channel, kHealthWatch);
    ASSERT_TRUE(watch->Start());
    ASSERT_TRUE(watch->Write(EncodeStringField(1, service)));
    ASSERT_TRUE(watch->WritesDone());
    std::optional<std::string> first = watch->Read();
    ASSERT_TRUE(first.has_value()) << "'" << service << "'";
    EXPECT_EQ(ServingStatusOf(*first), kServing) << "'" << service << "'";
    watches.push_back(std::move(watch));
  }

  std::atomic<bool> shutdown_returned = false;
  std::thread stopper([&] {
    server->Shutdown(absl::Minutes(1));
    shutdown_returned = true;
  });
  for (std::unique_ptr<GenericStream>& watch : watches) {
    std::optional<std::string> update = watch->Read();
    ASSERT_TRUE(update.has_value());
    EXPECT_EQ(ServingStatusOf(*update), kNotServing);
  }
  EXPECT_FALSE(shutdown_returned);
  for (std::unique_ptr<GenericStream>& watch : watches) {
    watch->Cancel();
    watch->Finish();
  }
  stopper.join();
  // New calls are refused once the server has shut down.
  EXPECT_EQ(CheckHealth(channel, "").status.error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST(ReflectionTest, ListsTheServices) {
  std::unique_ptr<Server> server = StartServer();
  ASSERT_NE(server, nullptr);
  const std::vector<std::string> services = ListServices(ChannelTo(server->port()));
  EXPECT_THAT(services, Contains("tensorops.v1.TensorOps"));
  EXPECT_THAT(services, Contains("grpc.health.v1.Health"));
}

// --- Server lifecycle
// -----------------------------------------------------------------------------

TEST(ServerTest, PortInUseIsAnError) {
  std::unique_ptr<Server> first = StartServer();
  ASSERT_NE(first, nullptr);
  ServerOptions options;
  options.port = first->port();
  absl::StatusOr<std::unique_ptr<Server>> second = Server::Start(options);
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
}

TEST(ServerTest, ShutdownIsIdempotentAndEndsWait) {
  std::unique_ptr<Server> server = StartServer();
  ASSERT_NE(server, nullptr);
  std::thread waiter([&] { server->Wait(); });
  server->Shutdown(absl::Seconds(1));
  server->Shutdown();
  waiter.join();
}

TEST(ServerTest, NegativeShutdownGraceIsRejected) {
  ServerOptions options;
  options.port = 0;
  options.shutdown.grace = absl::Seconds(-1);
  const absl::Status status = Server::Start(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("grace"));
}

TEST(ServerTest, InvalidMessageSizeIsRejected) {
  ServerOptions options;
  options.port = 0;
  options.limits.max_message_bytes = int64_t{1} << 31;
  EXPECT_EQ(Server::Start(options).status().code(), absl::StatusCode::kInvalidArgument);
}

// A service that answers as gRPC does when the server's resource quota resets a stream
// (ENHANCE_YOUR_CALM): no message of the server's, gRPC's words alone.
class ResettingService final : public v1::TensorOps::Service {
 public:
  grpc::Status ServerInfo(grpc::ServerContext*, const v1::ServerInfoRequest*,
                          v1::ServerInfoResponse*) override {
    return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                        "Received RST_STREAM with error code 11");
  }
};

TEST(ClientErrorsTest, AResetUnderTheMemoryLimitNamesTheFlag) {
  ResettingService service;
  int port = 0;
  std::unique_ptr<grpc::Server> server =
      grpc::ServerBuilder()
          .AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port)
          .RegisterService(&service)
          .BuildAndStart();
  ASSERT_NE(server, nullptr);
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Create(absl::StrFormat("127.0.0.1:%d", port));
  ASSERT_TRUE(client.ok());
  const absl::Status status = (*client)->ServerInfo().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  const std::string message(status.message());
  EXPECT_THAT(message, ::testing::HasSubstr("--max_memory_bytes"));
  EXPECT_THAT(message, ::testing::EndsWith("[gRPC: Received RST_STREAM with error code 11]"));
  server->Shutdown();
}

}  // namespace
}  // namespace tensorops
