// End-to-end tests: the real tensorops-server binary on a free loopback port, called through
// tensorops::Client and through the tensorops-cli binary. Results are compared with the in-process
// kernels (the same code the server runs, so exactly), with the independent reference in
// reference.h, and with hand cases from PyTorch's documentation.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <complex>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/cpp/client.h"
#include "client/cpp/npy.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kernels/backward.h"
#include "kernels/device.h"
#include "kernels/gather.h"
#include "kernels/masked_scatter.h"
#include "kernels/nd_ops.h"
#include "kernels/scatter.h"
#include "kernels/status_macros.h"
#include "proto/codec.h"
#include "tensorops/v1/service.grpc.pb.h"
#include "tests/child_process.h"
#include "tests/generic_stream.h"
#include "tests/http_get.h"
#include "tests/reference.h"
#include "tests/wait_for.h"

namespace tensorops {
namespace {

namespace ref = ::tensorops::testing;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr absl::Duration kStartupTimeout = absl::Seconds(10);
constexpr absl::Duration kShutdownTimeout = absl::Seconds(10);
constexpr absl::Duration kCliTimeout = absl::Seconds(60);

using ::tensorops::testing::ChildProcess;
using ::tensorops::testing::DescribeExit;
using ::tensorops::testing::ExitedWith;

// ServerProcess is a tensorops-server child listening on a free loopback port.
struct ServerProcess {
  std::unique_ptr<ChildProcess> process;
  std::string target;
};

// StartServer starts tensorops-server with `extra_flags` after the address and thread flags.
absl::StatusOr<ServerProcess> StartServer(const std::vector<std::string>& extra_flags = {}) {
  std::vector<std::string> argv = {TENSOROPS_SERVER_PATH, "--host=127.0.0.1", "--port=0",
                                   "--threads=2"};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  absl::StatusOr<std::unique_ptr<ChildProcess>> process = ChildProcess::Spawn(argv);
  if (!process.ok()) return process.status();
  // "... listening on 127.0.0.1:41234; devices: ...", possibly inside ANSI colour codes. The
  // greedy host part leaves the last ":digits" to the port.
  static const std::regex kListening(R"(listening on \S*:(\d+))");
  std::optional<std::string> port = (*process)->WaitForMatch(kListening, kStartupTimeout);
  if (!port.has_value()) {
    const int status = (*process)->Terminate(kShutdownTimeout);
    return absl::UnavailableError(absl::StrFormat(
        "tensorops-server did not report 'listening on' within %s (%s); stdout:\n%s\nstderr:\n%s",
        absl::FormatDuration(kStartupTimeout), DescribeExit(status), (*process)->stdout_text(),
        (*process)->stderr_text()));
  }
  return ServerProcess{std::move(*process), absl::StrCat("127.0.0.1:", *port)};
}

// MakeTempDirectory makes a fresh directory under the test's temporary directory.
std::string MakeTempDirectory(const std::string& prefix) {
  std::string pattern =
      (std::filesystem::path(::testing::TempDir()) / (prefix + "XXXXXX")).string();
  EXPECT_NE(mkdtemp(pattern.data()), nullptr) << "mkdtemp: " << std::strerror(errno);
  return pattern;
}

// ---------------------------------------------------------------------------------------------
// Tensors for the hand cases.

Tensor Int64Tensor(const Shape& shape, const std::vector<int64_t>& values) {
  return ref::IndexTensor(shape, values, DataType::kInt64);
}

Tensor Float32Tensor(const Shape& shape, const std::vector<double>& values) {
  return ref::TensorFromValues(DataType::kFloat32, shape, values);
}

Tensor BoolTensor(const Shape& shape, const std::vector<double>& values) {
  return ref::TensorFromValues(DataType::kBool, shape, values);
}

// WithTrailingOne copies `index` with a dimension of size 1 appended: the `idx[..., None]` of
// docs/semantics.md, which turns a Gather/Scatter index into the GatherNd/ScatterNd one of the axes
// form.
Tensor WithTrailingOne(const Tensor& index) {
  Shape shape = index.shape();
  shape.push_back(1);
  return Tensor::FromView(TensorView(index.dtype(), shape, index.data()));
}

// ---------------------------------------------------------------------------------------------
// One server for every test of the suite.

class E2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    startup_status_ = absl::OkStatus();
    absl::StatusOr<ServerProcess> server = StartServer();
    if (!server.ok()) {
      startup_status_ = server.status();
      return;
    }
    server_ = new ServerProcess(std::move(*server));
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(server_->target);
    if (!client.ok()) {
      startup_status_ = client.status();
      return;
    }
    client_ = client->release();
  }

  static void TearDownTestSuite() {
    delete client_;
    client_ = nullptr;
    if (server_ != nullptr) {
      const int status = server_->process->Terminate(kShutdownTimeout);
      EXPECT_TRUE(ExitedWith(status, 0))
          << "tensorops-server after SIGTERM: " << DescribeExit(status) << "; stderr:\n"
          << server_->process->stderr_text();
      delete server_;
      server_ = nullptr;
    }
  }

  void SetUp() override { ASSERT_TRUE(startup_status_.ok()) << startup_status_; }

  Client& client() { return *client_; }
  const std::string& target() { return server_->target; }

 private:
  static inline absl::Status startup_status_;
  static inline ServerProcess* server_ = nullptr;
  static inline Client* client_ = nullptr;
};

// Hand cases, from the examples in PyTorch's documentation of gather, scatter_ and scatter_reduce.

TEST_F(E2eTest, GatherTorchDocExample) {
  // torch.gather(torch.tensor([[1, 2], [3, 4]]), 1, torch.tensor([[0, 0], [1, 0]]))
  const Tensor input = Int64Tensor({2, 2}, {1, 2, 3, 4});
  const Tensor index = Int64Tensor({2, 2}, {0, 0, 1, 0});
  absl::StatusOr<Tensor> result = client().Gather(input.view(), 1, index.view());
  ASSERT_TRUE(result.ok()) << result.status();
  ref::ExpectTensorsNear(*result, Int64Tensor({2, 2}, {1, 1, 4, 3}));
}

TEST_F(E2eTest, ScatterTorchDocExamples) {
  // src = torch.arange(1, 11).reshape((2, 5))
  const Tensor src = Int64Tensor({2, 5}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  const Tensor zeros = Tensor::Zeros(DataType::kInt64, {3, 5});
  {
    // torch.zeros(3, 5, dtype=src.dtype).scatter_(0, torch.tensor([[0, 1, 2, 0]]), src)
    const Tensor index = Int64Tensor({1, 4}, {0, 1, 2, 0});
    absl::StatusOr<Tensor> result = client().Scatter(zeros.view(), 0, index.view(), src.view());
    ASSERT_TRUE(result.ok()) << result.status();
    ref::ExpectTensorsNear(*result,
                           Int64Tensor({3, 5}, {1, 0, 0, 4, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0}));
  }
  {
    // torch.zeros(3, 5, dtype=src.dtype).scatter_(1, torch.tensor([[0, 1, 2], [0, 1, 4]]), src)
    const Tensor index = Int64Tensor({2, 3}, {0, 1, 2, 0, 1, 4});
    absl::StatusOr<Tensor> result = client().Scatter(zeros.view(), 1, index.view(), src.view());
    ASSERT_TRUE(result.ok()) << result.status();
    ref::ExpectTensorsNear(*result,
                           Int64Tensor({3, 5}, {1, 2, 3, 0, 0, 6, 7, 0, 0, 8, 0, 0, 0, 0, 0}));
  }
  {
    // torch.full((2, 4), 2.).scatter_(1, torch.tensor([[2], [3]]), 1.23, reduce='multiply'|'add')
    const Tensor twos = Float32Tensor({2, 4}, std::vector<double>(8, 2.0));
    const Tensor index = Int64Tensor({2, 1}, {2, 3});
    ScatterOptions options;
    options.reduce = Reduction::kProd;
    absl::StatusOr<Tensor> product =
        client().Scatter(twos.view(), 1, index.view(), Scalar(1.23), options);
    ASSERT_TRUE(product.ok()) << product.status();
    ref::ExpectTensorsNear(*product, Float32Tensor({2, 4}, {2, 2, 2.46, 2, 2, 2, 2, 2.46}),
                           ref::ToleranceFor(DataType::kFloat32, Reduction::kProd, 2));
    options.reduce = Reduction::kSum;
    absl::StatusOr<Tensor> sum =
        client().Scatter(twos.view(), 1, index.view(), Scalar(1.23), options);
    ASSERT_TRUE(sum.ok()) << sum.status();
    ref::ExpectTensorsNear(*sum, Float32Tensor({2, 4}, {2, 2, 3.23, 2, 2, 2, 2, 3.23}),
                           ref::ToleranceFor(DataType::kFloat32, Reduction::kSum, 2));
  }
}

TEST_F(E2eTest, ScatterReduceTorchDocExamples) {
  const Tensor src = Float32Tensor({6}, {1, 2, 3, 4, 5, 6});
  const Tensor index = Int64Tensor({6}, {0, 1, 0, 1, 2, 1});
  const Tensor input = Float32Tensor({4}, {1, 2, 3, 4});
  const Tensor input2 = Float32Tensor({4}, {5, 4, 3, 2});
  struct Case {
    const Tensor* input;
    Reduction reduce;
    bool include_self;
    std::vector<double> expected;
  };
  const Case cases[] = {
      {&input, Reduction::kSum, true, {5, 14, 8, 4}},
      {&input, Reduction::kSum, false, {4, 12, 5, 4}},
      {&input2, Reduction::kAmax, true, {5, 6, 5, 2}},
      {&input2, Reduction::kAmax, false, {3, 6, 5, 2}},
  };
  for (const Case& test_case : cases) {
    SCOPED_TRACE(absl::StrFormat("%s include_self=%s", std::string(ReductionName(test_case.reduce)),
                                 test_case.include_self ? "true" : "false"));
    ScatterOptions options;
    options.reduce = test_case.reduce;
    options.include_self = test_case.include_self;
    absl::StatusOr<Tensor> result =
        client().Scatter(test_case.input->view(), 0, index.view(), src.view(), options);
    ASSERT_TRUE(result.ok()) << result.status();
    ref::ExpectTensorsNear(*result, Float32Tensor({4}, test_case.expected));
  }
}

// Random calls for every dtype, compared with the in-process kernel (exactly: the server runs the
// same code, and `deterministic` pins floating reductions) and with the reference.

// The 1-D-index and view-scatter ops, with the examples of PyTorch's documentation.

TEST_F(E2eTest, IndexSelectTorchDocExample) {
  // x = torch.arange(12.).reshape(3, 4); torch.index_select(x, 0/1, torch.tensor([0, 2]))
  const Tensor input = Float32Tensor({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  const Tensor index = Int64Tensor({2}, {0, 2});
  absl::StatusOr<Tensor> rows = client().IndexSelect(input.view(), 0, index.view());
  ASSERT_TRUE(rows.ok()) << rows.status();
  ref::ExpectTensorsNear(*rows, Float32Tensor({2, 4}, {0, 1, 2, 3, 8, 9, 10, 11}));
  absl::StatusOr<Tensor> columns = client().IndexSelect(input.view(), -1, index.view());
  ASSERT_TRUE(columns.ok()) << columns.status();
  ref::ExpectTensorsNear(*columns, Float32Tensor({3, 2}, {0, 2, 4, 6, 8, 10}));
}

TEST_F(E2eTest, IndexReduceTorchDocExamples) {
  const Tensor index = Int64Tensor({3}, {0, 4, 2});
  const Tensor t = Float32Tensor({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  // torch.ones(5, 3).index_add_(0, index, t)
  const Tensor ones = Float32Tensor({5, 3}, std::vector<double>(15, 1.0));
  absl::StatusOr<Tensor> added = client().IndexReduce(ones.view(), 0, index.view(), t.view());
  ASSERT_TRUE(added.ok()) << added.status();
  ref::ExpectTensorsNear(*added,
                         Float32Tensor({5, 3}, {2, 3, 4, 1, 1, 1, 8, 9, 10, 1, 1, 1, 5, 6, 7}));
  // ... with alpha=-1.
  absl::StatusOr<Tensor> subtracted =
      client().IndexReduce(ones.view(), 0, index.view(), t.view(), {.alpha = Scalar(int64_t{-1})});
  ASSERT_TRUE(subtracted.ok()) << subtracted.status();
  ref::ExpectTensorsNear(
      *subtracted, Float32Tensor({5, 3}, {0, -1, -2, 1, 1, 1, -6, -7, -8, 1, 1, 1, -3, -4, -5}));

  // torch.full((5, 3), 2.).index_reduce_(0, [0, 4, 2, 0], t4, 'prod'[, include_self=False])
  const Tensor twos = Float32Tensor({5, 3}, std::vector<double>(15, 2.0));
  const Tensor prod_index = Int64Tensor({4}, {0, 4, 2, 0});
  const Tensor t4 = Float32Tensor({4, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  absl::StatusOr<Tensor> prod = client().IndexReduce(twos.view(), 0, prod_index.view(), t4.view(),
                                                     {.reduce = Reduction::kProd});
  ASSERT_TRUE(prod.ok()) << prod.status();
  ref::ExpectTensorsNear(
      *prod, Float32Tensor({5, 3}, {20, 44, 72, 2, 2, 2, 14, 16, 18, 2, 2, 2, 8, 10, 12}));
  absl::StatusOr<Tensor> prod_without_self =
      client().IndexReduce(twos.view(), 0, prod_index.view(), t4.view(),
                           {.reduce = Reduction::kProd, .include_self = false});
  ASSERT_TRUE(prod_without_self.ok()) << prod_without_self.status();
  ref::ExpectTensorsNear(*prod_without_self,
                         Float32Tensor({5, 3}, {10, 22, 36, 2, 2, 2, 7, 8, 9, 2, 2, 2, 4, 5, 6}));
}

TEST_F(E2eTest, ViewScatterTorchDocExamples) {
  // torch.select_scatter(torch.zeros(2, 2), torch.ones(2), 0, 0)
  const Tensor zeros2 = Tensor::Zeros(DataType::kFloat32, {2, 2});
  const Tensor ones2 = Float32Tensor({2}, {1, 1});
  absl::StatusOr<Tensor> selected = client().SelectScatter(zeros2.view(), ones2.view(), 0, 0);
  ASSERT_TRUE(selected.ok()) << selected.status();
  ref::ExpectTensorsNear(*selected, Float32Tensor({2, 2}, {1, 1, 0, 0}));

  // torch.slice_scatter(torch.zeros(8, 8), torch.ones(8, 2), dim=1, start=2, end=6, step=2)
  const Tensor zeros8 = Tensor::Zeros(DataType::kFloat32, {8, 8});
  const Tensor ones82 = Float32Tensor({8, 2}, std::vector<double>(16, 1.0));
  absl::StatusOr<Tensor> sliced =
      client().SliceScatter(zeros8.view(), ones82.view(), 1, {.start = 2, .end = 6, .step = 2});
  ASSERT_TRUE(sliced.ok()) << sliced.status();
  std::vector<double> expected_slice(64, 0.0);
  for (int row = 0; row < 8; ++row) expected_slice[row * 8 + 2] = expected_slice[row * 8 + 4] = 1;
  ref::ExpectTensorsNear(*sliced, Float32Tensor({8, 8}, expected_slice));

  // torch.diagonal_scatter(torch.zeros(3, 3), torch.ones(2), 1) and offset -1.
  const Tensor zeros3 = Tensor::Zeros(DataType::kFloat32, {3, 3});
  const Tensor ones22 = Float32Tensor({2}, {1, 1});
  absl::StatusOr<Tensor> above =
      client().DiagonalScatter(zeros3.view(), ones22.view(), {.offset = 1});
  ASSERT_TRUE(above.ok()) << above.status();
  ref::ExpectTensorsNear(*above, Float32Tensor({3, 3}, {0, 1, 0, 0, 0, 1, 0, 0, 0}));
  absl::StatusOr<Tensor> below =
      client().DiagonalScatter(zeros3.view(), ones22.view(), {.offset = -1});
  ASSERT_TRUE(below.ok()) << below.status();
  ref::ExpectTensorsNear(*below, Float32Tensor({3, 3}, {0, 0, 0, 1, 0, 0, 0, 1, 0}));
}

TEST_F(E2eTest, IndexAndViewOpErrorsNameTheOpAndTheServerKeepsServing) {
  const Tensor input = Float32Tensor({3, 4}, std::vector<double>(12, 0.0));
  const Tensor index = Int64Tensor({2}, {0, 7});
  absl::StatusOr<Tensor> selected = client().IndexSelect(input.view(), 1, index.view());
  EXPECT_EQ(selected.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(selected.status().message(),
              HasSubstr("index_select: index[1] = 7 is out of range for axis 1"));

  const Tensor row = Float32Tensor({4}, {1, 2, 3, 4});
  absl::StatusOr<Tensor> bad_select = client().SelectScatter(input.view(), row.view(), 0, 3);
  EXPECT_EQ(bad_select.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_select.status().message(), HasSubstr("select_scatter: index = 3"));

  absl::StatusOr<Tensor> bad_step =
      client().SliceScatter(input.view(), input.view(), 0, {.step = 0});
  EXPECT_EQ(bad_step.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_step.status().message(), HasSubstr("slice_scatter: step = 0"));

  absl::StatusOr<Tensor> same_axes =
      client().DiagonalScatter(input.view(), row.view(), {.axis1 = 0, .axis2 = -2});
  EXPECT_EQ(same_axes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(same_axes.status().message(), HasSubstr("diagonal_scatter: axis1 = 0"));

  absl::StatusOr<Tensor> alpha_with_prod =
      client().IndexReduce(input.view(), 0, Int64Tensor({1}, {0}).view(), row.view(),
                           {.reduce = Reduction::kProd, .alpha = Scalar(int64_t{2})});
  EXPECT_EQ(alpha_with_prod.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(alpha_with_prod.status().message(), HasSubstr("index_reduce"));

  absl::StatusOr<Tensor> fine =
      client().IndexSelect(input.view(), 0, Int64Tensor({1}, {-1}).view());
  ASSERT_TRUE(fine.ok()) << fine.status();
  EXPECT_EQ(fine->shape(), (Shape{1, 4}));
}

// GatherNd, ScatterNd and MaskedScatter, with the examples of TensorFlow's, Paddle's and PyTorch's
// documentation.

TEST_F(E2eTest, GatherNdTensorFlowDocExamples) {
  const Tensor matrix = Int64Tensor({2, 2}, {1, 2, 3, 4});
  // tf.gather_nd(params, [[0, 0], [1, 1]]) -> [a, d]
  absl::StatusOr<Tensor> elements =
      client().GatherNd(matrix.view(), Int64Tensor({2, 2}, {0, 0, 1, 1}).view());
  ASSERT_TRUE(elements.ok()) << elements.status();
  ref::ExpectTensorsNear(*elements, Int64Tensor({2}, {1, 4}));
  // tf.gather_nd(params, [[1], [0]]) -> [[c, d], [a, b]]
  absl::StatusOr<Tensor> rows =
      client().GatherNd(matrix.view(), Int64Tensor({2, 1}, {1, 0}).view());
  ASSERT_TRUE(rows.ok()) << rows.status();
  ref::ExpectTensorsNear(*rows, Int64Tensor({2, 2}, {3, 4, 1, 2}));
  // tf.gather_nd(params of [2, 2, 2], [[1], [0]], batch_dims=1) -> [[c0, d0], [a1, b1]]
  const Tensor batched = Float32Tensor({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7});
  absl::StatusOr<Tensor> batch =
      client().GatherNd(batched.view(), Int64Tensor({2, 1}, {1, 0}).view(), {.batch_dims = 1});
  ASSERT_TRUE(batch.ok()) << batch.status();
  ref::ExpectTensorsNear(*batch, Float32Tensor({2, 2}, {2, 3, 4, 5}));
}

TEST_F(E2eTest, ScatterNdTensorFlowAndPaddleDocExamples) {
  const Tensor index = Int64Tensor({4, 1}, {4, 3, 1, 7});
  const Tensor updates = Float32Tensor({4}, {9, 10, 11, 12});
  const Tensor tensor = Float32Tensor({8}, {1, 2, 3, 4, 5, 6, 7, 8});
  // tf.tensor_scatter_nd_update(tensor, indices, updates)
  absl::StatusOr<Tensor> updated = client().ScatterNd(tensor.view(), index.view(), updates.view());
  ASSERT_TRUE(updated.ok()) << updated.status();
  ref::ExpectTensorsNear(*updated, Float32Tensor({8}, {1, 11, 3, 10, 9, 6, 7, 12}));
  // tf.tensor_scatter_nd_add / _sub / _max
  absl::StatusOr<Tensor> added =
      client().ScatterNd(tensor.view(), index.view(), updates.view(), {.reduce = Reduction::kSum});
  ASSERT_TRUE(added.ok()) << added.status();
  ref::ExpectTensorsNear(*added, Float32Tensor({8}, {1, 13, 3, 14, 14, 6, 7, 20}));
  absl::StatusOr<Tensor> subtracted =
      client().ScatterNdSub(tensor.view(), index.view(), updates.view());
  ASSERT_TRUE(subtracted.ok()) << subtracted.status();
  ref::ExpectTensorsNear(*subtracted, Float32Tensor({8}, {1, -9, 3, -6, -4, 6, 7, -4}));
  absl::StatusOr<Tensor> maximum =
      client().ScatterNd(tensor.view(), index.view(), Float32Tensor({4}, {0, 10, 0, 12}).view(),
                         {.reduce = Reduction::kAmax});
  ASSERT_TRUE(maximum.ok()) << maximum.status();
  ref::ExpectTensorsNear(*maximum, Float32Tensor({8}, {1, 2, 3, 10, 5, 6, 7, 12}));

  // paddle.scatter_nd(index=[[1], [3], [1]], updates=[9, 10, 11], shape=[5]): no input, and
  // duplicates add up.
  absl::StatusOr<Tensor> zeros_form = client().ScatterNd(
      std::nullopt, Int64Tensor({3, 1}, {1, 3, 1}).view(), Float32Tensor({3}, {9, 10, 11}).view(),
      {.reduce = Reduction::kSum, .shape = {5}});
  ASSERT_TRUE(zeros_form.ok()) << zeros_form.status();
  ref::ExpectTensorsNear(*zeros_form, Float32Tensor({5}, {0, 20, 0, 10, 0}));
}

TEST_F(E2eTest, NdOpsMatchGatherAndScatterInTheAxesForm) {
  // docs/semantics.md: Gather(x, ax, idx) == GatherNd(x, idx[..., None], axes=[ax]), and Scatter
  // with ASSIGN and unique idx == ScatterNd(x, idx[..., None], src, axes=[ax]).
  absl::BitGen gen;
  for (int trial = 0; trial < 20; ++trial) {
    const Shape input_shape = {absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 4),
                               absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 4),
                               absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 3)};
    const int64_t axis = absl::Uniform<int64_t>(gen, -3, 3);
    const int64_t positive_axis = axis < 0 ? axis + 3 : axis;
    Shape index_shape = input_shape;
    for (int64_t d = 0; d < 3; ++d) {
      index_shape[d] = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, input_shape[d]);
    }
    SCOPED_TRACE(absl::StrFormat("input %s axis %d index %s", ShapeToString(input_shape), axis,
                                 ShapeToString(index_shape)));
    const Tensor input = ref::RandomTensor(DataType::kFloat64, input_shape, gen);
    const Tensor src = ref::RandomTensor(DataType::kFloat64, index_shape, gen);
    const Tensor index =
        ref::RandomIndex(DataType::kInt64, index_shape, positive_axis, input_shape[positive_axis],
                         ref::IndexPattern::kUnique, gen);
    const Tensor nd_index = WithTrailingOne(index);

    absl::StatusOr<Tensor> gathered = client().Gather(input.view(), axis, index.view());
    ASSERT_TRUE(gathered.ok()) << gathered.status();
    absl::StatusOr<Tensor> gathered_nd =
        client().GatherNd(input.view(), nd_index.view(), {.axes = {axis}});
    ASSERT_TRUE(gathered_nd.ok()) << gathered_nd.status();
    ref::ExpectTensorsNear(*gathered_nd, *gathered);

    absl::StatusOr<Tensor> scattered =
        client().Scatter(input.view(), axis, index.view(), src.view());
    ASSERT_TRUE(scattered.ok()) << scattered.status();
    absl::StatusOr<Tensor> scattered_nd =
        client().ScatterNd(input.view(), nd_index.view(), src.view(), {.axes = {axis}});
    ASSERT_TRUE(scattered_nd.ok()) << scattered_nd.status();
    ref::ExpectTensorsNear(*scattered_nd, *scattered);
  }
}

TEST_F(E2eTest, MaskedScatterTorchDocExample) {
  // self = torch.zeros(2, 5, dtype=int64); self.masked_scatter(mask, torch.arange(10).view(2, 5))
  const Tensor zeros = Tensor::Zeros(DataType::kInt64, {2, 5});
  const Tensor mask = BoolTensor({2, 5}, {0, 0, 0, 1, 1, 1, 1, 0, 1, 1});
  const Tensor source = Int64Tensor({2, 5}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  absl::StatusOr<Tensor> result = client().MaskedScatter(zeros.view(), mask.view(), source.view());
  ASSERT_TRUE(result.ok()) << result.status();
  ref::ExpectTensorsNear(*result, Int64Tensor({2, 5}, {0, 0, 0, 0, 1, 2, 3, 0, 4, 5}));
  // A mask of one row, broadcast over both rows of the input.
  absl::StatusOr<Tensor> broadcast =
      client().MaskedScatter(zeros.view(), BoolTensor({5}, {1, 0, 0, 0, 1}).view(), source.view());
  ASSERT_TRUE(broadcast.ok()) << broadcast.status();
  ref::ExpectTensorsNear(*broadcast, Int64Tensor({2, 5}, {0, 0, 0, 0, 1, 2, 0, 0, 0, 3}));
}

TEST_F(E2eTest, NdAndMaskedScatterErrorsNameTheOpAndTheServerKeepsServing) {
  const Tensor input = Float32Tensor({2, 3}, std::vector<double>(6, 0.0));
  absl::StatusOr<Tensor> result =
      client().GatherNd(input.view(), Int64Tensor({1, 2}, {1, 3}).view());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      result.status().message(),
      HasSubstr("gather_nd: index[0, 1] = 3 is out of range for axis 1 of input with size 3"));

  result = client().GatherNd(input.view(), Int64Tensor({2, 3, 1}, {0, 0, 0, 0, 0, 0}).view(),
                             {.axes = {-3}});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("gather_nd: axes[0] = -3 is out of range"));

  const Tensor row_index = Int64Tensor({1, 1}, {-3});
  const Tensor row = Float32Tensor({1, 3}, {1, 2, 3});
  result = client().ScatterNd(input.view(), row_index.view(), row.view());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(),
              HasSubstr("scatter_nd: index[0, 0] = -3 is out of range for axis 0 of input with "
                        "size 2"));

  result = client().ScatterNd(input.view(), Int64Tensor({1, 1}, {0}).view(), row.view(),
                              {.shape = {2, 3}});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(),
              AllOf(HasSubstr("scatter_nd: shape = [2, 3]"), HasSubstr("input")));
  result = client().ScatterNd(std::nullopt, Int64Tensor({1, 1}, {0}).view(), row.view());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("scatter_nd: neither input nor shape"));

  // ScatterNdSub refuses, without a call, what it cannot negate or another reduction.
  const Tensor unsigned_row = ref::TensorFromValues(DataType::kUInt8, {1, 3}, {1, 2, 3});
  const Tensor unsigned_input = Tensor::Zeros(DataType::kUInt8, {2, 3});
  result = client().ScatterNdSub(unsigned_input.view(), Int64Tensor({1, 1}, {0}).view(),
                                 unsigned_row.view());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("scatter_nd_sub: src.dtype = uint8"));
  result = client().ScatterNdSub(input.view(), Int64Tensor({1, 1}, {0}).view(), row.view(),
                                 {.reduce = Reduction::kProd});
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), HasSubstr("scatter_nd_sub: reduce = PROD"));

  result = client().MaskedScatter(input.view(), BoolTensor({3}, {1, 1, 0}).view(),
                                  Float32Tensor({3}, {1, 2, 3}).view());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(),
              HasSubstr("masked_scatter: src has 3 elements but mask has 4 true positions"));

  absl::StatusOr<Tensor> fine =
      client().ScatterNd(input.view(), Int64Tensor({1, 1}, {-1}).view(), row.view());
  ASSERT_TRUE(fine.ok()) << fine.status();
  ref::ExpectTensorsNear(*fine, Float32Tensor({2, 3}, {0, 0, 0, 1, 2, 3}));
}

class E2eRandomTest : public E2eTest, public ::testing::WithParamInterface<DataType> {};

// A random shape of rank 1..3 with sizes 1..5.
Shape RandomShape(absl::BitGen& gen) {
  Shape shape(absl::Uniform<int>(absl::IntervalClosed, gen, 1, 3));
  for (int64_t& size : shape) size = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, 5);
  return shape;
}

TEST_P(E2eRandomTest, GatherMatchesKernelAndReference) {
  const DataType dtype = GetParam();
  absl::BitGen gen;
  for (int trial = 0; trial < 12; ++trial) {
    const Shape input_shape = RandomShape(gen);
    const int64_t rank = static_cast<int64_t>(input_shape.size());
    const int64_t axis = absl::Uniform<int64_t>(gen, -rank, rank);
    const int64_t positive_axis = axis < 0 ? axis + rank : axis;
    Shape index_shape = input_shape;
    for (int64_t d = 0; d < rank; ++d) {
      index_shape[d] = d == positive_axis
                           ? absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, 6)
                           : absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, input_shape[d]);
    }
    const DataType index_dtype = trial % 2 == 0 ? DataType::kInt32 : DataType::kInt64;
    SCOPED_TRACE(absl::StrFormat("input %s axis %d index %s %s", ShapeToString(input_shape), axis,
                                 ShapeToString(index_shape), DataTypeName(index_dtype)));
    const Tensor input = ref::RandomTensor(dtype, input_shape, gen);
    const Tensor index =
        ref::RandomIndex(index_dtype, index_shape, positive_axis, input_shape[positive_axis],
                         ref::IndexPattern::kRandom, gen);

    absl::StatusOr<Tensor> result = client().Gather(input.view(), axis, index.view());
    ASSERT_TRUE(result.ok()) << result.status();
    absl::StatusOr<Tensor> kernel =
        Gather(GatherArgs{.input = input.view(), .index = index.view(), .axis = axis});
    ASSERT_TRUE(kernel.ok()) << kernel.status();
    ref::ExpectTensorsNear(*result, *kernel);
    absl::StatusOr<Tensor> expected =
        ref::ReferenceGather(input.view(), axis, index.view(), /*broadcast=*/false);
    ASSERT_TRUE(expected.ok()) << expected.status();
    ref::ExpectTensorsNear(*result, *expected);
  }
}

TEST_P(E2eRandomTest, ScatterMatchesKernelAndReference) {
  const DataType dtype = GetParam();
  absl::BitGen gen;
  for (Reduction reduce : {Reduction::kAssign, Reduction::kSum, Reduction::kProd, Reduction::kMean,
                           Reduction::kAmax, Reduction::kAmin}) {
    if (IsComplex(dtype) && (reduce == Reduction::kAmax || reduce == Reduction::kAmin)) continue;
    if (dtype == DataType::kBool && reduce == Reduction::kMean) continue;
    for (int trial = 0; trial < 6; ++trial) {
      const Shape input_shape = RandomShape(gen);
      const int64_t rank = static_cast<int64_t>(input_shape.size());
      const int64_t axis = absl::Uniform<int64_t>(gen, -rank, rank);
      const int64_t positive_axis = axis < 0 ? axis + rank : axis;
      Shape index_shape = input_shape;
      Shape src_shape = input_shape;
      for (int64_t d = 0; d < rank; ++d) {
        index_shape[d] = d == positive_axis
                             ? absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, 6)
                             : absl::Uniform<int64_t>(absl::IntervalClosed, gen, 1, input_shape[d]);
        src_shape[d] = index_shape[d] + absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, 1);
      }
      const bool include_self = trial % 3 != 2;
      const bool use_value = trial % 3 == 1;
      const DataType index_dtype = trial % 2 == 0 ? DataType::kInt32 : DataType::kInt64;
      SCOPED_TRACE(absl::StrFormat("%s input %s axis %d index %s %s include_self=%s",
                                   std::string(ReductionName(reduce)), ShapeToString(input_shape),
                                   axis, ShapeToString(index_shape), use_value ? "value" : "src",
                                   include_self ? "true" : "false"));
      ref::ValueOptions values;
      values.product_friendly = reduce == Reduction::kProd;
      const Tensor input = ref::RandomTensor(dtype, input_shape, gen, values);
      const Tensor src = ref::RandomTensor(dtype, src_shape, gen, values);
      const Tensor index =
          ref::RandomIndex(index_dtype, index_shape, positive_axis, input_shape[positive_axis],
                           ref::IndexPattern::kDuplicateHeavy, gen);
      // A scalar value of the matching kind, and the same value as a rank-0 tensor of `dtype`.
      const Tensor value_tensor = ref::RandomTensor(dtype, {}, gen, values);
      const std::complex<double> first = ref::ElementAsComplex(value_tensor, 0);
      const Scalar value = IsComplex(dtype)           ? Scalar(first)
                           : dtype == DataType::kBool ? Scalar(first.real() != 0.0)
                           : IsIntegral(dtype, /*include_bool=*/false)
                               ? Scalar(static_cast<int64_t>(first.real()))
                               : Scalar(first.real());

      ScatterOptions options;
      options.reduce = reduce;
      options.include_self = include_self;
      options.deterministic = true;
      absl::StatusOr<Tensor> result =
          use_value ? client().Scatter(input.view(), axis, index.view(), value, options)
                    : client().Scatter(input.view(), axis, index.view(), src.view(), options);
      ASSERT_TRUE(result.ok()) << result.status();

      ScatterArgs args{.input = input.view(),
                       .index = index.view(),
                       .source = src.view(),
                       .axis = axis,
                       .reduce = reduce,
                       .include_self = include_self};
      if (use_value) args.source = value;
      absl::StatusOr<Tensor> kernel = Scatter(args);
      ASSERT_TRUE(kernel.ok()) << kernel.status();
      ref::ExpectTensorsNear(*result, *kernel);

      const TensorView reference_src =
          use_value ? ref::BroadcastScalarView(value_tensor, index_shape) : src.view();
      absl::StatusOr<Tensor> expected = ref::ReferenceScatter(input.view(), axis, index.view(),
                                                              reference_src, reduce, include_self,
                                                              /*broadcast=*/false);
      ASSERT_TRUE(expected.ok()) << expected.status();
      ref::ExpectTensorsNear(*result, *expected,
                             ref::ToleranceFor(dtype, reduce, index_shape[positive_axis] + 1));
    }
  }
}

TEST_P(E2eRandomTest, NdOpsAndMaskedScatterMatchKernel) {
  const DataType dtype = GetParam();
  absl::BitGen gen;
  for (int trial = 0; trial < 6; ++trial) {
    const Shape input_shape = RandomShape(gen);
    const int64_t rank = static_cast<int64_t>(input_shape.size());
    // TensorFlow form: k coordinates after batch_dims, over B = [batch..., n].
    const int64_t batch_dims = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, rank - 1);
    const int64_t k = absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, rank - batch_dims);
    Shape index_shape(input_shape.begin(), input_shape.begin() + batch_dims);
    index_shape.push_back(absl::Uniform<int64_t>(absl::IntervalClosed, gen, 0, 4));
    index_shape.push_back(k);
    std::vector<int64_t> coordinates;
    for (int64_t i = 0; i < NumElements(index_shape); ++i) {
      const int64_t size = input_shape[batch_dims + i % std::max<int64_t>(k, 1)];
      coordinates.push_back(absl::Uniform<int64_t>(gen, -size, size));
    }
    const DataType index_dtype = trial % 2 == 0 ? DataType::kInt32 : DataType::kInt64;
    const Tensor index = ref::IndexTensor(index_shape, coordinates, index_dtype);
    SCOPED_TRACE(absl::StrFormat("input %s index %s batch_dims %d", ShapeToString(input_shape),
                                 ShapeToString(index_shape), batch_dims));
    const Tensor input = ref::RandomTensor(dtype, input_shape, gen);

    const GatherNdArgs gather_args{
        .input = input.view(), .index = index.view(), .batch_dims = batch_dims};
    absl::StatusOr<Tensor> gathered =
        client().GatherNd(input.view(), index.view(), {.batch_dims = batch_dims});
    ASSERT_TRUE(gathered.ok()) << gathered.status();
    absl::StatusOr<Tensor> gathered_here = GatherNd(gather_args);
    ASSERT_TRUE(gathered_here.ok()) << gathered_here.status();
    ref::ExpectTensorsNear(*gathered, *gathered_here);

    // ScatterNd of updates shaped like that gather, with duplicates, every defined reduction.
    const Tensor updates = ref::RandomTensor(dtype, gathered->shape(), gen);
    for (Reduction reduce : {Reduction::kAssign, Reduction::kSum, Reduction::kAmax}) {
      if (!ref::ReductionDefined(dtype, reduce)) continue;
      absl::StatusOr<Tensor> scattered =
          client().ScatterNd(input.view(), index.view(), updates.view(),
                             {.batch_dims = batch_dims, .reduce = reduce, .deterministic = true});
      ASSERT_TRUE(scattered.ok()) << ReductionName(reduce) << ": " << scattered.status();
      absl::StatusOr<Tensor> scattered_here = ScatterNd(ScatterNdArgs{.input = input.view(),
                                                                      .index = index.view(),
                                                                      .source = updates.view(),
                                                                      .batch_dims = batch_dims,
                                                                      .reduce = reduce});
      ASSERT_TRUE(scattered_here.ok()) << scattered_here.status();
      ref::ExpectTensorsNear(*scattered, *scattered_here);
    }

    // MaskedScatter with a random mask over the input, from a src with a spare element.
    const Tensor mask = ref::RandomTensor(DataType::kBool, input_shape, gen);
    const Tensor source = ref::RandomTensor(dtype, {input.numel() + 1}, gen);
    absl::StatusOr<Tensor> masked =
        client().MaskedScatter(input.view(), mask.view(), source.view());
    ASSERT_TRUE(masked.ok()) << masked.status();
    absl::StatusOr<Tensor> masked_here = MaskedScatter(
        MaskedScatterArgs{.input = input.view(), .mask = mask.view(), .source = source.view()});
    ASSERT_TRUE(masked_here.ok()) << masked_here.status();
    ref::ExpectTensorsNear(*masked, *masked_here);
  }
}

TEST_P(E2eRandomTest, ScatterNdSubNegatesOnTheClient) {
  // tf.tensor_scatter_nd_sub([1..8], [[4], [3], [1], [7]], [9, 10, 11, 12]).
  const DataType dtype = GetParam();
  const Tensor tensor = ref::TensorFromValues(dtype, {8}, {1, 2, 3, 4, 5, 6, 7, 8});
  const Tensor index = Int64Tensor({4, 1}, {4, 3, 1, 7});
  const Tensor updates = ref::TensorFromValues(dtype, {4}, {9, 10, 11, 12});
  absl::StatusOr<Tensor> result =
      client().ScatterNdSub(tensor.view(), index.view(), updates.view());
  if (dtype == DataType::kBool || dtype == DataType::kUInt8) {
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
    EXPECT_THAT(result.status().message(), HasSubstr("cannot be negated"));
    return;
  }
  ASSERT_TRUE(result.ok()) << result.status();
  ref::ExpectTensorsNear(*result, ref::TensorFromValues(dtype, {8}, {1, -9, 3, -6, -4, 6, 7, -4}));
}

INSTANTIATE_TEST_SUITE_P(AllDataTypes, E2eRandomTest, ::testing::ValuesIn(kAllDataTypes),
                         [](const ::testing::TestParamInfo<DataType>& info) {
                           return std::string(DataTypeName(info.param));
                         });

TEST_F(E2eTest, BroadcastGather) {
  // Paddle's take_along_axis: input [3, 1] and index [1, 2] broadcast to [3, 2] off the axis.
  const Tensor input = Float32Tensor({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  const Tensor index = Int64Tensor({1, 2}, {3, -4});
  GatherOptions options;
  options.broadcast = true;
  absl::StatusOr<Tensor> result = client().Gather(input.view(), 1, index.view(), options);
  ASSERT_TRUE(result.ok()) << result.status();
  ref::ExpectTensorsNear(*result, Float32Tensor({3, 2}, {3, 0, 7, 4, 11, 8}));
}

TEST_F(E2eTest, LargeTensorsUseTheRaisedMessageLimit) {
  // 16 MiB each way, above gRPC's 4 MiB default: passes only because both ends raise the limit.
  const int64_t rows = 1024, columns = 4096;
  Tensor input(DataType::kFloat32, {rows, columns});
  for (int64_t i = 0; i < input.numel(); ++i) input.data_as<float>()[i] = static_cast<float>(i);
  const Tensor index = Tensor::Zeros(DataType::kInt64, {rows, columns});
  absl::StatusOr<Tensor> result = client().Gather(input.view(), 0, index.view());
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->shape(), (Shape{rows, columns}));
  EXPECT_EQ(result->data_as<float>()[columns * (rows - 1) + 5], 5.0f);
}

// Bad requests: INVALID_ARGUMENT in the form of docs/semantics.md, and the server keeps serving.

TEST_F(E2eTest, BadRequestsAreRejectedAndTheServerKeepsServing) {
  const Tensor input = Int64Tensor({2, 2}, {1, 2, 3, 4});
  const Tensor out_of_range = Int64Tensor({2, 2}, {0, 0, 5, 0});
  absl::StatusOr<Tensor> result = client().Gather(input.view(), 1, out_of_range.view());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(),
              HasSubstr("gather: index[1, 0] = 5 is out of range for axis 1 of input with size 2"));

  const Tensor scatter_index = Int64Tensor({1, 2}, {0, -3});
  const Tensor src = Int64Tensor({1, 2}, {7, 8});
  result = client().Scatter(input.view(), 0, scatter_index.view(), src.view());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      result.status().message(),
      HasSubstr("scatter: index[0, 1] = -3 is out of range for axis 0 of input with size 2"));

  const Tensor float_src = Float32Tensor({1, 2}, {7, 8});
  result = client().Scatter(input.view(), 0, Int64Tensor({1, 2}, {0, 1}).view(), float_src.view());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), AllOf(HasSubstr("scatter"), HasSubstr("float32")));

  const Tensor float_index = Float32Tensor({2, 2}, {0, 0, 0, 0});
  result = client().Gather(input.view(), 1, float_index.view());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), AllOf(HasSubstr("gather"), HasSubstr("index")));

  result = client().Gather(input.view(), 2, Int64Tensor({2, 2}, {0, 0, 0, 0}).view());
  EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(result.status().message(), AllOf(HasSubstr("gather"), HasSubstr("axis = 2")));

  // The same connection still works.
  result = client().Gather(input.view(), 1, Int64Tensor({2, 2}, {0, 0, 1, 0}).view());
  ASSERT_TRUE(result.ok()) << result.status();
  ref::ExpectTensorsNear(*result, Int64Tensor({2, 2}, {1, 1, 4, 3}));
}

TEST_F(E2eTest, TimeoutsGiveDeadlineExceeded) {
  const Tensor input = Int64Tensor({2, 2}, {1, 2, 3, 4});
  const Tensor index = Int64Tensor({2, 2}, {0, 0, 1, 0});
  GatherOptions gather_options;
  gather_options.timeout = absl::Nanoseconds(1);
  EXPECT_EQ(client().Gather(input.view(), 1, index.view(), gather_options).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  ScatterOptions scatter_options;
  scatter_options.timeout = absl::Nanoseconds(1);
  EXPECT_EQ(client()
                .Scatter(input.view(), 1, index.view(), Scalar(int64_t{1}), scatter_options)
                .status()
                .code(),
            absl::StatusCode::kDeadlineExceeded);

  // The client-wide default applies when a call sets none, and a call's own timeout overrides it.
  ClientOptions options;
  options.default_timeout = absl::Nanoseconds(1);
  absl::StatusOr<std::unique_ptr<Client>> impatient = Client::Create(target(), options);
  ASSERT_TRUE(impatient.ok()) << impatient.status();
  EXPECT_EQ((*impatient)->Gather(input.view(), 1, index.view()).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  gather_options.timeout = absl::Seconds(30);
  EXPECT_TRUE((*impatient)->Gather(input.view(), 1, index.view(), gather_options).ok());
}

TEST(ClientTest, CreateValidatesItsArguments) {
  EXPECT_EQ(Client::Create("").status().code(), absl::StatusCode::kInvalidArgument);
  ClientOptions options;
  options.max_message_bytes = int64_t{1} << 31;
  EXPECT_EQ(Client::Create("127.0.0.1:1", options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(ClientTest, UnreachableServerIsUnavailable) {
  // Port 1 on loopback: nothing listens there, so the connection is refused at once.
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create("127.0.0.1:1");
  ASSERT_TRUE(client.ok()) << client.status();
  const Tensor input = Int64Tensor({2}, {1, 2});
  const Tensor index = Int64Tensor({1}, {0});
  GatherOptions options;
  options.timeout = absl::Seconds(30);
  EXPECT_EQ((*client)->Gather(input.view(), 0, index.view(), options).status().code(),
            absl::StatusCode::kUnavailable);
}

// The generic RPCs through the client: Run and a stream give what the op's own method gives.
TEST_F(E2eTest, RunAndOpStreamMatchTheOpsOwnMethod) {
  absl::BitGen gen;
  const Tensor input = ref::RandomTensor(DataType::kFloat32, {4, 5}, gen);
  const Tensor index =
      ref::RandomIndex(DataType::kInt64, {4, 3}, 1, 5, ref::IndexPattern::kDuplicateHeavy, gen);
  absl::StatusOr<Tensor> expected = client().Gather(input.view(), 1, index.view());
  ASSERT_TRUE(expected.ok()) << expected.status();

  v1::OpRequest request;
  wire::EncodeTensor(input.view(), request.mutable_gather()->mutable_input());
  wire::EncodeTensor(index.view(), request.mutable_gather()->mutable_index());
  request.mutable_gather()->set_axis(1);
  absl::StatusOr<Tensor> run = client().Run(request);
  ASSERT_TRUE(run.ok()) << run.status();
  ref::ExpectTensorsNear(*run, *expected);

  v1::OpRequest bad = request;
  bad.mutable_gather()->set_axis(7);
  absl::StatusOr<std::unique_ptr<OpStream>> stream = client().OpenStream({.timeout = kCliTimeout});
  ASSERT_TRUE(stream.ok()) << stream.status();
  constexpr uint64_t kRequests = 20;
  constexpr uint64_t kBadId = 7;
  for (uint64_t id = 0; id < kRequests; ++id) {
    ASSERT_TRUE((*stream)->Send(id, id == kBadId ? bad : request));
  }
  ASSERT_TRUE((*stream)->CloseSend());
  std::vector<int> answers(kRequests, 0);
  while (std::optional<StreamResult> answer = (*stream)->Receive()) {
    ASSERT_LT(answer->request_id, kRequests);
    ++answers[answer->request_id];
    if (answer->request_id == kBadId) {
      EXPECT_EQ(answer->result.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(answer->result.status().message(), HasSubstr("gather: axis"));
    } else {
      ASSERT_TRUE(answer->result.ok()) << answer->result.status();
      ref::ExpectTensorsNear(*answer->result, *expected);
    }
  }
  EXPECT_TRUE((*stream)->Finish().ok());
  for (uint64_t id = 0; id < kRequests; ++id) EXPECT_EQ(answers[id], 1) << "request " << id;
}

// Backward over the wire gives what the kernels' Backward gives (tested there against finite
// differences), for a gather-family and a scatter-family op.
TEST_F(E2eTest, BackwardMatchesTheKernels) {
  absl::BitGen gen;
  const Tensor input = ref::RandomTensor(DataType::kFloat64, {4, 5}, gen);
  const Tensor src = ref::RandomTensor(DataType::kFloat64, {4, 3}, gen);
  const Tensor index =
      ref::RandomIndex(DataType::kInt64, {4, 3}, 1, 5, ref::IndexPattern::kDuplicateHeavy, gen);

  v1::OpRequest gather;
  wire::EncodeTensor(input.view(), gather.mutable_gather()->mutable_input());
  wire::EncodeTensor(index.view(), gather.mutable_gather()->mutable_index());
  gather.mutable_gather()->set_axis(1);
  const Tensor gather_grad = ref::RandomTensor(DataType::kFloat64, {4, 3}, gen);
  absl::StatusOr<std::map<std::string, Tensor>> over_wire =
      client().Backward(gather, gather_grad.view());
  ASSERT_TRUE(over_wire.ok()) << over_wire.status();
  absl::StatusOr<Gradients> local = Backward(
      GatherArgs{.input = input.view(), .index = index.view(), .axis = 1}, gather_grad.view());
  ASSERT_TRUE(local.ok()) << local.status();
  ASSERT_EQ(over_wire->size(), 1u);
  ref::ExpectTensorsNear(over_wire->at("input"), *local->Find("input"));

  v1::OpRequest scatter;
  wire::EncodeTensor(input.view(), scatter.mutable_scatter()->mutable_input());
  wire::EncodeTensor(index.view(), scatter.mutable_scatter()->mutable_index());
  wire::EncodeTensor(src.view(), scatter.mutable_scatter()->mutable_src());
  scatter.mutable_scatter()->set_axis(1);
  scatter.mutable_scatter()->set_reduce(v1::REDUCTION_PROD);
  scatter.mutable_scatter()->set_include_self(false);
  const Tensor scatter_grad = ref::RandomTensor(DataType::kFloat64, {4, 5}, gen);
  over_wire = client().Backward(scatter, scatter_grad.view());
  ASSERT_TRUE(over_wire.ok()) << over_wire.status();
  local = Backward(ScatterArgs{.input = input.view(),
                               .index = index.view(),
                               .source = src.view(),
                               .axis = 1,
                               .reduce = Reduction::kProd,
                               .include_self = false},
                   scatter_grad.view());
  ASSERT_TRUE(local.ok()) << local.status();
  ASSERT_EQ(over_wire->size(), 2u);
  ref::ExpectTensorsNear(over_wire->at("input"), *local->Find("input"));
  ref::ExpectTensorsNear(over_wire->at("src"), *local->Find("src"));
}

TEST_F(E2eTest, BackwardErrorsNameTheProblem) {
  const Tensor input = Int64Tensor({2, 2}, {1, 2, 3, 4});
  const Tensor index = Int64Tensor({2, 2}, {0, 0, 1, 0});
  v1::OpRequest gather;
  wire::EncodeTensor(input.view(), gather.mutable_gather()->mutable_input());
  wire::EncodeTensor(index.view(), gather.mutable_gather()->mutable_index());
  gather.mutable_gather()->set_axis(1);
  absl::StatusOr<std::map<std::string, Tensor>> gradients = client().Backward(gather, input.view());
  EXPECT_EQ(gradients.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(gradients.status().message(), HasSubstr("is not differentiable"));

  gradients = client().Backward(v1::OpRequest(), input.view());
  EXPECT_EQ(gradients.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(gradients.status().message(), HasSubstr("backward: op is not set"));
  // The server keeps serving.
  EXPECT_TRUE(client().Gather(input.view(), 1, index.view()).ok());
}

TEST_F(E2eTest, ServerInfoThroughTheClient) {
  absl::StatusOr<v1::ServerInfoResponse> info = client().ServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->ops_size(), 10);
  EXPECT_EQ(info->dtypes_size(), 12);
  ASSERT_GE(info->devices_size(), 1);
  EXPECT_EQ(info->devices(0).kind(), "cpu");
  EXPECT_EQ(info->devices(0).threads(), 2);  // StartServer passes --threads=2.
  EXPECT_FALSE(info->tls());
  EXPECT_FALSE(info->auth_token_required());
}

// Server reflection through its own client stub, as grpcurl uses it: list the services, then
// rebuild the TensorOps service from the file descriptors the server sends, without our .proto.
TEST_F(E2eTest, ReflectionDescribesTheServiceWithoutTheProtoFiles) {
  namespace reflection = ::grpc::reflection::v1alpha;
  std::unique_ptr<reflection::ServerReflection::Stub> stub = reflection::ServerReflection::NewStub(
      grpc::CreateChannel(target(), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kCliTimeout));
  auto stream = stub->ServerReflectionInfo(&context);

  reflection::ServerReflectionRequest list;
  list.set_list_services("*");
  ASSERT_TRUE(stream->Write(list));
  reflection::ServerReflectionResponse response;
  ASSERT_TRUE(stream->Read(&response));
  std::vector<std::string> services;
  for (const reflection::ServiceResponse& service : response.list_services_response().service()) {
    services.push_back(service.name());
  }
  EXPECT_THAT(services, ::testing::IsSupersetOf(
                            {"tensorops.v1.TensorOps", "inference.GRPCInferenceService",
                             "grpc.health.v1.Health", "grpc.reflection.v1alpha.ServerReflection"}));

  // The file defining the service comes with every file it imports.
  reflection::ServerReflectionRequest file_request;
  file_request.set_file_containing_symbol("tensorops.v1.TensorOps");
  ASSERT_TRUE(stream->Write(file_request));
  ASSERT_TRUE(stream->Read(&response));
  ASSERT_TRUE(response.has_file_descriptor_response()) << response.error_response().error_message();
  std::vector<google::protobuf::FileDescriptorProto> files;
  for (const std::string& bytes : response.file_descriptor_response().file_descriptor_proto()) {
    ASSERT_TRUE(files.emplace_back().ParseFromString(bytes));
  }
  ASSERT_TRUE(stream->WritesDone());
  EXPECT_TRUE(stream->Finish().ok());

  // Build them into a fresh pool, dependencies first, as a generic client would.
  google::protobuf::DescriptorPool pool;
  for (size_t built = 0, round = 0; built < files.size() && round < files.size(); ++round) {
    for (const google::protobuf::FileDescriptorProto& file : files) {
      if (pool.FindFileByName(file.name()) != nullptr) continue;
      const bool ready = absl::c_all_of(file.dependency(), [&](const std::string& dependency) {
        return pool.FindFileByName(dependency) != nullptr;
      });
      if (ready && pool.BuildFile(file) != nullptr) ++built;
    }
  }
  const google::protobuf::ServiceDescriptor* service =
      pool.FindServiceByName("tensorops.v1.TensorOps");
  ASSERT_NE(service, nullptr);
  for (const char* method :
       {"Gather", "Scatter", "GatherNd", "MaskedScatter", "Run", "RunStream", "ServerInfo"}) {
    EXPECT_NE(service->FindMethodByName(method), nullptr) << method;
  }
  const google::protobuf::Descriptor* gather = service->FindMethodByName("Gather")->input_type();
  EXPECT_EQ(gather->full_name(), "tensorops.v1.GatherRequest");
  ASSERT_NE(gather->FindFieldByName("index"), nullptr);
  EXPECT_EQ(gather->FindFieldByName("index")->message_type()->full_name(), "tensorops.v1.Tensor");
  EXPECT_TRUE(service->FindMethodByName("RunStream")->client_streaming());
}

// PutTensor's and GetTensor's progress hook sees every chunk, in order, ending at the total.
TEST_F(E2eTest, StoreTransfersReportTheirProgress) {
  const Tensor value = Float32Tensor({1000}, std::vector<double>(1000, 1.5));
  std::vector<std::pair<int64_t, int64_t>> put_progress;
  PutTensorOptions put_options;
  put_options.chunk_bytes = 1024;
  put_options.progress = [&](int64_t done, int64_t total) {
    put_progress.emplace_back(done, total);
  };
  absl::StatusOr<v1::TensorInfo> info = client().PutTensor("progress", value.view(), put_options);
  ASSERT_TRUE(info.ok()) << info.status();
  const std::vector<std::pair<int64_t, int64_t>> expected_put = {
      {1024, 4000}, {2048, 4000}, {3072, 4000}, {4000, 4000}};
  EXPECT_EQ(put_progress, expected_put);

  std::vector<std::pair<int64_t, int64_t>> get_progress;
  GetTensorOptions get_options;
  get_options.chunk_bytes = 1500;
  get_options.progress = [&](int64_t done, int64_t total) {
    get_progress.emplace_back(done, total);
  };
  absl::StatusOr<Tensor> back = client().GetTensor("progress", get_options);
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_FALSE(get_progress.empty());
  EXPECT_EQ(get_progress.back(), std::make_pair(int64_t{4000}, int64_t{4000}));
  for (size_t i = 1; i < get_progress.size(); ++i) {
    EXPECT_GT(get_progress[i].first, get_progress[i - 1].first);
  }
  ref::ExpectTensorsNear(*back, value);
  EXPECT_TRUE(client().DeleteTensor("progress").ok());
}

// SnapshotStore needs a server with --store_dir.
TEST_F(E2eTest, SnapshotStoreWithoutStoreDirIsFailedPrecondition) {
  absl::StatusOr<v1::SnapshotStoreResponse> snapshot = client().SnapshotStore();
  EXPECT_EQ(snapshot.status().code(), absl::StatusCode::kFailedPrecondition) << snapshot.status();
  EXPECT_THAT(snapshot.status().message(), HasSubstr("--store_dir"));
}

// SnapshotStore writes the whole store into --store_dir and says what it wrote; a later one
// replaces it.
TEST(ServerProcessTest, SnapshotStoreWritesTheStoreToStoreDir) {
  const std::string directory = MakeTempDirectory("e2e_snapshot_");
  const std::string store_dir = (std::filesystem::path(directory) / "store").string();
  absl::StatusOr<ServerProcess> server =
      StartServer({"--store_dir=" + store_dir, "--store_snapshot_interval_s=0"});
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(server->target);
  ASSERT_TRUE(client.ok()) << client.status();
  const Tensor a = Float32Tensor({2, 3}, {0, 1, 2, 3, 4, 5});
  const Tensor b = Int64Tensor({2}, {7, 8});
  ASSERT_TRUE((*client)->PutTensor("a", a.view()).ok());
  ASSERT_TRUE((*client)->PutTensor("b", b.view()).ok());

  const absl::Time before = absl::Now();
  absl::StatusOr<v1::SnapshotStoreResponse> first = (*client)->SnapshotStore();
  ASSERT_TRUE(first.ok()) << first.status();
  const absl::Time after = absl::Now();
  EXPECT_EQ(std::filesystem::path(first->path()).parent_path(), store_dir);
  EXPECT_EQ(std::filesystem::path(first->path()).filename(),
            absl::StrFormat("snapshot-%012d.tosnap", first->generation()));
  EXPECT_GE(first->generation(), 1);
  EXPECT_EQ(first->tensors(), 2);
  std::error_code error;
  EXPECT_EQ(std::filesystem::file_size(first->path(), error), first->bytes()) << error.message();
  // Two tensors' 40 bytes and their records' framing.
  EXPECT_GT(first->bytes(), 40);
  const absl::Time written = absl::FromUnixNanos(first->written_unix_nanos());
  EXPECT_GE(written, before - absl::Seconds(1));
  EXPECT_LE(written, after + absl::Seconds(1));
  EXPECT_GE(first->duration_micros(), 0);
  EXPECT_LE(absl::Microseconds(first->duration_micros()), after - before);

  ASSERT_TRUE((*client)->DeleteTensor("b").ok());
  absl::StatusOr<v1::SnapshotStoreResponse> second = (*client)->SnapshotStore({});
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_GT(second->generation(), first->generation());
  EXPECT_EQ(second->tensors(), 1);
  EXPECT_TRUE(std::filesystem::exists(second->path()));
  // The older snapshot goes once the newer one is complete.
  EXPECT_FALSE(std::filesystem::exists(first->path()));

  client->reset();
  const int status = server->process->Terminate(kShutdownTimeout);
  EXPECT_TRUE(ExitedWith(status, 0)) << DescribeExit(status) << "; stderr:\n"
                                     << server->process->stderr_text();
  std::filesystem::remove_all(directory);
}

TEST(ServerProcessTest, MetricsHostDefaultsToTheServiceHost) {
  // --host=127.0.0.1 (StartServer) and no --metrics_host: the endpoint stays on loopback too.
  absl::StatusOr<ServerProcess> server = StartServer({"--metrics_port=0"});
  ASSERT_TRUE(server.ok()) << server.status();
  static const std::regex kMetricsUrl(R"(metrics: http://([^/]+):\d+/metrics)");
  const std::optional<std::string> host =
      server->process->WaitForMatch(kMetricsUrl, kStartupTimeout);
  ASSERT_TRUE(host.has_value()) << server->process->stderr_text();
  EXPECT_EQ(*host, "127.0.0.1");
}

TEST(ServerProcessTest, MetricsEndpointShowsTheCountersMove) {
  absl::StatusOr<ServerProcess> server =
      StartServer({"--metrics_port=0", "--metrics_host=127.0.0.1"});
  ASSERT_TRUE(server.ok()) << server.status();
  static const std::regex kMetricsUrl(R"(metrics: http://127\.0\.0\.1:(\d+)/metrics)");
  const std::optional<std::string> port =
      server->process->WaitForMatch(kMetricsUrl, kStartupTimeout);
  ASSERT_TRUE(port.has_value()) << server->process->stderr_text();
  const int metrics_port = std::stoi(*port);

  const std::string gathers_ok =
      "tensorops_requests_total{code=\"OK\",device=\"cpu\",op=\"gather\"} ";
  absl::StatusOr<testing::HttpResponse> before = testing::HttpGet(metrics_port, "/metrics");
  ASSERT_TRUE(before.ok()) << before.status();
  EXPECT_EQ(before->status, 200);
  EXPECT_THAT(before->body, Not(HasSubstr(gathers_ok)));

  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(server->target);
  ASSERT_TRUE(client.ok()) << client.status();
  const Tensor input = Int64Tensor({2, 2}, {1, 2, 3, 4});
  const Tensor index = Int64Tensor({2, 2}, {0, 0, 1, 0});
  const Tensor bad_index = Int64Tensor({2, 2}, {0, 0, 9, 0});
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*client)->Gather(input.view(), 1, index.view()).ok());
  EXPECT_FALSE((*client)->Gather(input.view(), 1, bad_index.view()).ok());

  // A call is counted once gRPC is done with it, a moment after the client has its reply.
  std::string body;
  EXPECT_TRUE(::tensorops::testing::WaitFor([&] {
    absl::StatusOr<testing::HttpResponse> after = testing::HttpGet(metrics_port, "/metrics");
    body = after.ok() ? after->body : "";
    return absl::StrContains(body, gathers_ok + "3\n") &&
           absl::StrContains(body,
                             "tensorops_requests_total{code=\"INVALID_ARGUMENT\",device=\"cpu\","
                             "op=\"gather\"} 1\n");
  })) << body;
  EXPECT_THAT(
      body,
      HasSubstr("tensorops_stage_duration_seconds_count{op=\"gather\",stage=\"execute\"} 4\n"));
}

TEST(ServerProcessTest, ExitsWithZeroOnSigterm) {
  absl::StatusOr<ServerProcess> server = StartServer();
  ASSERT_TRUE(server.ok()) << server.status();
  const int status = server->process->Terminate(kShutdownTimeout);
  EXPECT_TRUE(ExitedWith(status, 0)) << DescribeExit(status) << "; stderr:\n"
                                     << server->process->stderr_text();
}

// Graceful shutdown. A call is held in flight on the server by asking for a result far larger
// than HTTP/2's flow-control window and not reading it: the server has run the op and started
// replying (the client sees its initial metadata) but cannot finish sending until the client reads.

using ::tensorops::testing::GenericStream;

constexpr char kGatherMethod[] = "/tensorops.v1.TensorOps/Gather";
// 64 MiB of float64 result per held call: far beyond the flow-control window gRPC grants before the
// client reads.
constexpr int64_t kHeldResultElements = int64_t{8} << 20;
constexpr double kHeldValue = 2.5;

// HeldGatherRequest gathers element 0 of a one-element float64 tensor kHeldResultElements times.
std::string HeldGatherRequest() {
  v1::GatherRequest request;
  request.mutable_input()->set_dtype(v1::DATA_TYPE_FLOAT64);
  request.mutable_input()->add_shape(1);
  request.mutable_input()->set_data(&kHeldValue, sizeof(kHeldValue));
  request.mutable_index()->set_dtype(v1::DATA_TYPE_INT32);
  request.mutable_index()->add_shape(kHeldResultElements);
  request.mutable_index()->set_data(std::string(kHeldResultElements * sizeof(int32_t), '\0'));
  request.set_axis(0);
  std::string bytes;
  EXPECT_TRUE(request.SerializeToString(&bytes));
  return bytes;
}

// HoldCalls starts `count` Gather calls on `channel` with big results and returns once the server
// has started replying to each (see above); none of the results is read yet.
std::vector<std::unique_ptr<GenericStream>> HoldCalls(const std::shared_ptr<grpc::Channel>& channel,
                                                      int count) {
  const std::string request = HeldGatherRequest();
  std::vector<std::unique_ptr<GenericStream>> calls;
  for (int i = 0; i < count; ++i) {
    calls.push_back(std::make_unique<GenericStream>(channel, kGatherMethod));
    GenericStream& call = *calls.back();
    EXPECT_TRUE(call.Start() && call.Write(request) && call.WritesDone()) << "held call " << i;
  }
  for (size_t i = 0; i < calls.size(); ++i) {
    EXPECT_TRUE(calls[i]->ReadInitialMetadata()) << "held call " << i;
  }
  return calls;
}

// ExpectHeldResult reads a held call's result and checks it is complete and right.
void ExpectHeldResult(GenericStream& call, int i) {
  std::optional<std::string> reply = call.Read();
  const grpc::Status status = call.Finish();
  ASSERT_TRUE(status.ok()) << "held call " << i << ": " << status.error_code() << " "
                           << status.error_message();
  ASSERT_TRUE(reply.has_value()) << "held call " << i;
  v1::GatherResponse response;
  ASSERT_TRUE(response.ParseFromString(*reply)) << "held call " << i;
  const std::string& data = response.result().data();
  ASSERT_EQ(data.size(), kHeldResultElements * sizeof(double)) << "held call " << i;
  for (int64_t k = 0; k < kHeldResultElements; k += 4099) {
    double value = 0;
    std::memcpy(&value, data.data() + k * sizeof(double), sizeof(double));
    ASSERT_EQ(value, kHeldValue) << "held call " << i << ", element " << k;
  }
}

// WaitUntilShutdownBegins waits for the server's shutdown log line and for `channel`'s connection
// to leave READY (the server's GOAWAY), after which the server accepts no new calls.
void WaitUntilShutdownBegins(ServerProcess& server, grpc::Channel& channel) {
  static const std::regex kShutdownLine(R"((health is NOT_SERVING))");
  ASSERT_TRUE(server.process->WaitForMatch(kShutdownLine, kShutdownTimeout).has_value())
      << "stderr:\n"
      << server.process->stderr_text();
  const absl::Time deadline = absl::Now() + kShutdownTimeout;
  while (channel.GetState(/*try_to_connect=*/false) == GRPC_CHANNEL_READY) {
    ASSERT_TRUE(channel.WaitForStateChange(GRPC_CHANNEL_READY, absl::ToChronoTime(deadline)))
        << "the connection stayed READY after shutdown began";
  }
}

std::shared_ptr<grpc::Channel> ChannelTo(const std::string& target) {
  // A channel of its own, so that its connection is not shared with other tests' channels.
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxSendMessageSize(-1);
  args.SetMaxReceiveMessageSize(-1);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

TEST(ServerProcessTest, SigtermFinishesCallsInFlightAndRefusesNewOnes) {
  // A grace far longer than the test needs: the held calls must finish because the server waits
  // for them, not because the test is quick. (CallsStillRunningAfterTheGraceAreCancelled shows
  // that they are really in flight.)
  absl::StatusOr<ServerProcess> server = StartServer({"--shutdown_grace_s=60"});
  ASSERT_TRUE(server.ok()) << server.status();
  std::shared_ptr<grpc::Channel> channel = ChannelTo(server->target);
  std::vector<std::unique_ptr<GenericStream>> held = HoldCalls(channel, 4);

  server->process->Signal(SIGTERM);
  WaitUntilShutdownBegins(*server, *channel);

  // New calls, on the draining server's old channel and on a new one, are refused.
  absl::StatusOr<std::unique_ptr<Client>> late_client = Client::Create(server->target);
  ASSERT_TRUE(late_client.ok()) << late_client.status();
  const Tensor input = Int64Tensor({2, 2}, {1, 2, 3, 4});
  const Tensor index = Int64Tensor({2, 2}, {0, 0, 1, 0});
  GatherOptions options;
  options.timeout = kCliTimeout;
  EXPECT_EQ((*late_client)->Gather(input.view(), 1, index.view(), options).status().code(),
            absl::StatusCode::kUnavailable);
  {
    std::unique_ptr<v1::TensorOps::Stub> stub = v1::TensorOps::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kCliTimeout));
    v1::GatherRequest request;
    for (v1::Tensor* tensor : {request.mutable_input(), request.mutable_index()}) {
      tensor->set_dtype(v1::DATA_TYPE_INT64);
      tensor->add_shape(1);
      tensor->set_data(std::string(sizeof(int64_t), '\0'));
    }
    v1::GatherResponse response;
    EXPECT_EQ(stub->Gather(&context, request, &response).error_code(),
              grpc::StatusCode::UNAVAILABLE);
  }

  // The calls in flight when the signal came still complete.
  for (size_t i = 0; i < held.size(); ++i) ExpectHeldResult(*held[i], static_cast<int>(i));

  const int exit_status = server->process->WaitForExit(kShutdownTimeout);
  EXPECT_TRUE(ExitedWith(exit_status, 0)) << DescribeExit(exit_status) << "; stderr:\n"
                                          << server->process->stderr_text();
  EXPECT_THAT(server->process->stdout_text() + server->process->stderr_text(),
              AllOf(HasSubstr("received SIGTERM"), HasSubstr("in-flight calls finished")));
}

TEST(ServerProcessTest, CallsStillRunningAfterTheGraceAreCancelled) {
  absl::StatusOr<ServerProcess> server = StartServer({"--shutdown_grace_s=0"});
  ASSERT_TRUE(server.ok()) << server.status();
  std::shared_ptr<grpc::Channel> channel = ChannelTo(server->target);
  std::vector<std::unique_ptr<GenericStream>> held = HoldCalls(channel, 1);

  // The held call's result is never read, so only the grace's end can stop the server. Tearing
  // down a connection with a cancelled, half-sent 64 MiB reply takes gRPC a few seconds more,
  // hence the longer wait.
  const int exit_status = server->process->Terminate(6 * kShutdownTimeout);
  EXPECT_TRUE(ExitedWith(exit_status, 0)) << DescribeExit(exit_status) << "; stderr:\n"
                                          << server->process->stderr_text();
  EXPECT_THAT(server->process->stdout_text() + server->process->stderr_text(),
              HasSubstr("grace period of 0 ended"));
  // Cut off before its result was sent: what reached the client is no whole reply.
  const std::optional<std::string> reply = held[0]->Read();
  const grpc::Status status = held[0]->Finish();
  EXPECT_FALSE(status.ok()) << "the held call completed; was it ever in flight? reply of "
                            << (reply.has_value() ? reply->size() : 0) << " bytes";
}

// RawHttp2Client is a gRPC client written by hand over a TCP socket: it makes one ServerInfo call
// and then reads nothing more, like a channel in a process that has gone quiet. Unlike a gRPC
// channel, which may read its connection now and then (a C++ or Python channel's backup poller
// runs every 5 s), it never answers the ping of the server's GOAWAY. Every socket operation gives
// up after 10 s.
class RawHttp2Client {
 public:
  ~RawHttp2Client() {
    if (fd_ >= 0) close(fd_);
  }

  // ServerInfo connects to 127.0.0.1:`port` and calls ServerInfo; the response, or why not.
  absl::StatusOr<v1::ServerInfoResponse> ServerInfo(int port) {
    absl::StatusOr<int> connected = testing::ConnectToLoopback(port);
    if (!connected.ok()) return connected.status();
    fd_ = *connected;
    // The preface, empty SETTINGS, then stream 1: HEADERS (HPACK literals without indexing) and
    // a DATA frame holding the empty request, which ends the stream.
    std::string headers;
    for (const auto& [name, value] : std::vector<std::pair<std::string, std::string>>{
             {":method", "POST"},
             {":scheme", "http"},
             {":path", "/tensorops.v1.TensorOps/ServerInfo"},
             {":authority", "localhost"},
             {"content-type", "application/grpc"},
             {"te", "trailers"}}) {
      absl::StrAppend(&headers, std::string(1, '\0'),
                      std::string(1, static_cast<char>(name.size())), name,
                      std::string(1, static_cast<char>(value.size())), value);
    }
    TENSOROPS_RETURN_IF_ERROR(
        Send(absl::StrCat("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", Frame(kSettings, 0, 0, ""),
                          Frame(kHeaders, kEndHeaders, 1, headers),
                          Frame(kData, kEndStream, 1, std::string(5, '\0')))));
    // Frames until stream 1's trailers; the server's SETTINGS and pings are answered meanwhile.
    std::string message;
    while (true) {
      TENSOROPS_ASSIGN_OR_RETURN(const std::string header, Receive(9));
      const size_t length = (static_cast<uint8_t>(header[0]) << 16) |
                            (static_cast<uint8_t>(header[1]) << 8) |
                            static_cast<uint8_t>(header[2]);
      const uint8_t type = header[3];
      const uint8_t flags = header[4];
      const uint32_t stream =
          (static_cast<uint32_t>(static_cast<uint8_t>(header[5]) & 0x7f) << 24) |
          (static_cast<uint8_t>(header[6]) << 16) | (static_cast<uint8_t>(header[7]) << 8) |
          static_cast<uint8_t>(header[8]);
      TENSOROPS_ASSIGN_OR_RETURN(const std::string payload, Receive(length));
      if (type == kSettings && (flags & kAck) == 0) {
        TENSOROPS_RETURN_IF_ERROR(Send(Frame(kSettings, kAck, 0, "")));
      } else if (type == kPing && (flags & kAck) == 0) {
        TENSOROPS_RETURN_IF_ERROR(Send(Frame(kPing, kAck, 0, payload)));
      } else if (type == kData && stream == 1) {
        message += payload;
      } else if (type == kHeaders && stream == 1 && (flags & kEndStream) != 0) {
        break;
      } else if (type == kRstStream || type == kGoaway) {
        return absl::UnavailableError(absl::StrFormat("frame of type %d from the server", type));
      }
    }
    v1::ServerInfoResponse response;
    if (message.size() < 5 || !response.ParseFromString(message.substr(5))) {
      return absl::DataLossError(
          absl::StrFormat("no ServerInfoResponse in %d bytes", message.size()));
    }
    return response;
  }

 private:
  static constexpr uint8_t kData = 0x0, kHeaders = 0x1, kRstStream = 0x3, kSettings = 0x4,
                           kPing = 0x6, kGoaway = 0x7;
  static constexpr uint8_t kEndStream = 0x1, kAck = 0x1, kEndHeaders = 0x4;

  static std::string Frame(uint8_t type, uint8_t flags, uint32_t stream, std::string_view payload) {
    const char header[9] = {static_cast<char>(payload.size() >> 16),
                            static_cast<char>(payload.size() >> 8),
                            static_cast<char>(payload.size()),
                            static_cast<char>(type),
                            static_cast<char>(flags),
                            static_cast<char>(stream >> 24),
                            static_cast<char>(stream >> 16),
                            static_cast<char>(stream >> 8),
                            static_cast<char>(stream)};
    std::string frame(header, sizeof(header));
    frame.append(payload);
    return frame;
  }

  absl::Status Send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return absl::ErrnoToStatus(errno, "send");
      bytes.remove_prefix(static_cast<size_t>(n));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<std::string> Receive(size_t size) {
    std::string bytes(size, '\0');
    for (size_t got = 0; got < size;) {
      const ssize_t n = recv(fd_, bytes.data() + got, size - got, 0);
      if (n == 0) return absl::UnavailableError("the server closed the connection");
      if (n < 0) return absl::ErrnoToStatus(errno, "recv");
      got += static_cast<size_t>(n);
    }
    return bytes;
  }

  int fd_ = -1;
};

// A connection whose client is not reading does not hold shutdown up. After its GOAWAY, gRPC keeps
// a connection until the client answers the GOAWAY's ping, and before the fix the server waited
// for that with no call in flight: the whole grace for a client that never reads, and a few
// seconds for an idle channel (until its backup poller read the connection).
TEST(ServerProcessTest, AnIdleConnectionDoesNotHoldUpShutdown) {
  absl::StatusOr<ServerProcess> server =
      StartServer({"--shutdown_grace_s=10", "--metrics_port=-1"});
  ASSERT_TRUE(server.ok()) << server.status();
  // One call through a channel left open and idle, one through a connection that never reads.
  std::shared_ptr<grpc::Channel> channel = ChannelTo(server->target);
  {
    std::unique_ptr<v1::TensorOps::Stub> stub = v1::TensorOps::NewStub(channel);
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kCliTimeout));
    v1::ServerInfoResponse info;
    const grpc::Status status = stub->ServerInfo(&context, v1::ServerInfoRequest(), &info);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  const std::string::size_type colon = server->target.rfind(':');
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(server->target.substr(colon + 1), &port)) << server->target;
  RawHttp2Client quiet;
  const absl::StatusOr<v1::ServerInfoResponse> info = quiet.ServerInfo(port);
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_FALSE(info->version().empty());
  // gRPC wraps a call up on the server a little after its client has the status; the connections
  // are idle once it has (the soak run signalled seconds after its last call).
  absl::SleepFor(absl::Milliseconds(200));

  const absl::Time signalled = absl::Now();
  server->process->Signal(SIGTERM);
  const int exit_status = server->process->WaitForExit(2 * kShutdownTimeout);
  const absl::Duration shutdown = absl::Now() - signalled;
  const std::string log = server->process->stdout_text() + server->process->stderr_text();
  EXPECT_TRUE(ExitedWith(exit_status, 0)) << DescribeExit(exit_status) << "; log:\n" << log;
  // The log says what happened: a connection closed without its answer, and calls waited for
  // only if there were any when the signal came.
  EXPECT_THAT(log, AllOf(HasSubstr("closed the connections whose clients did not answer the "
                                   "GOAWAY"),
                         Not(HasSubstr("grace period"))));
  std::smatch in_flight;
  ASSERT_TRUE(std::regex_search(log, in_flight, std::regex(R"(calls in flight \((\d+) now\))")))
      << log;
  if (in_flight[1] == "0") {
    EXPECT_THAT(log, AllOf(HasSubstr("no calls were in flight"),
                           Not(HasSubstr("in-flight calls finished"))));
  } else {
    EXPECT_THAT(log, HasSubstr("in-flight calls finished"));
  }
  // Generous: the server waits Server::kGoawayAnswerWait (250 ms) for answers, not the 10 s grace.
  EXPECT_LT(shutdown, absl::Seconds(5)) << log;
}

TEST(ServerProcessTest, BadLimitAndLoggingFlagsAreUsageErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--max_concurrent_calls=-1", "--max_concurrent_calls=-1 is out of range: must be >= 0"},
      {"--max_queued_calls=-5", "--max_queued_calls=-5 is out of range: must be >= 0"},
      {"--max_stream_in_flight=0", "--max_stream_in_flight=0 is out of range"},
      {"--metrics_port=70000", "--metrics_port=70000 is out of range"},
      {"--log_level=loud", "--log_level=loud is not a level"},
      {"--max_batch=0", "--max_batch=0 is out of range"},
      {"--max_batch_bytes=0", "--max_batch_bytes=0 is out of range"},
      {"--max_queue_delay_us=-1", "--max_queue_delay_us=-1 is out of range: must be >= 0"},
      {"--inline_max_bytes=-1", "--inline_max_bytes=-1 is out of range: must be >= 0"},
      {"--max_memory_bytes=-1", "--max_memory_bytes=-1 is out of range: must be >= 0"},
      {"--memory_trim_idle_ms=-1", "--memory_trim_idle_ms=-1 is out of range: must be >= 0"},
  };
  for (const auto& [flag, message] : cases) {
    absl::StatusOr<std::unique_ptr<ChildProcess>> process =
        ChildProcess::Spawn({TENSOROPS_SERVER_PATH, "--port=0", flag});
    ASSERT_TRUE(process.ok()) << process.status();
    const int exit_status = (*process)->WaitForExit(kShutdownTimeout);
    EXPECT_TRUE(ExitedWith(exit_status, 2)) << flag << ": " << DescribeExit(exit_status);
    EXPECT_THAT((*process)->stderr_text(), HasSubstr(message)) << flag;
  }
}

// Every level name the help lists starts the server, the short forms included.
TEST(ServerProcessTest, EveryListedLogLevelIsAccepted) {
  std::vector<std::unique_ptr<ChildProcess>> servers;
  for (const char* level :
       {"trace", "debug", "info", "warn", "warning", "err", "error", "critical", "off"}) {
    absl::StatusOr<std::unique_ptr<ChildProcess>> process = ChildProcess::Spawn(
        {TENSOROPS_SERVER_PATH, "--port=0", absl::StrCat("--log_level=", level)});
    ASSERT_TRUE(process.ok()) << process.status();
    servers.push_back(*std::move(process));
  }
  // A rejected level exits 2 at once; an accepted one serves until stopped, then exits 0.
  absl::SleepFor(absl::Seconds(1));
  for (std::unique_ptr<ChildProcess>& server : servers) {
    const int exit_status = server->Terminate(kShutdownTimeout);
    EXPECT_TRUE(ExitedWith(exit_status, 0))
        << DescribeExit(exit_status) << ": " << server->stderr_text();
  }
}

// Without a usable GPU, --device=cuda fails at start-up naming the flag and why; auto serves on
// the CPU. (On a GPU machine both would use the GPU: placement_test covers that.)
TEST(ServerProcessTest, DeviceCudaFailsAtStartUpAndAutoServesOnTheCpu) {
  if (!QueryDevices().cuda_devices.empty()) GTEST_SKIP() << "a GPU is usable here";
  absl::StatusOr<std::unique_ptr<ChildProcess>> process =
      ChildProcess::Spawn({TENSOROPS_SERVER_PATH, "--port=0", "--device=cuda"});
  ASSERT_TRUE(process.ok()) << process.status();
  const int exit_status = (*process)->WaitForExit(kShutdownTimeout);
  EXPECT_TRUE(ExitedWith(exit_status, 1)) << DescribeExit(exit_status);
  EXPECT_THAT((*process)->stderr_text() + (*process)->stdout_text(),
              HasSubstr("--device=cuda, but"));

  absl::StatusOr<ServerProcess> server = StartServer({"--device=auto"});
  ASSERT_TRUE(server.ok()) << server.status();
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(server->target);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<v1::ServerInfoResponse> info = (*client)->ServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->placement(), "cpu");
}

TEST(ServerProcessTest, NegativeShutdownGraceIsAUsageError) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> process =
      ChildProcess::Spawn({TENSOROPS_SERVER_PATH, "--port=0", "--shutdown_grace_s=-1"});
  ASSERT_TRUE(process.ok()) << process.status();
  const int exit_status = (*process)->WaitForExit(kShutdownTimeout);
  EXPECT_TRUE(ExitedWith(exit_status, 2)) << DescribeExit(exit_status);
  EXPECT_THAT((*process)->stderr_text(),
              HasSubstr("--shutdown_grace_s=-1 is out of range: must be >= 0"));
}

// RunServerBinary runs tensorops-server with `args` to its exit.
struct BinaryRun {
  int status = 0;
  std::string stdout_text;
  std::string stderr_text;
};
BinaryRun RunServerBinary(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {TENSOROPS_SERVER_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<std::unique_ptr<ChildProcess>> process = ChildProcess::Spawn(argv);
  EXPECT_TRUE(process.ok()) << process.status();
  if (!process.ok()) return BinaryRun{-1, "", ""};
  const int status = (*process)->WaitForExit(kShutdownTimeout);
  return BinaryRun{status, (*process)->stdout_text(), (*process)->stderr_text()};
}

// Every flag of server/main.cc, which --help must list.
constexpr const char* kServerFlags[] = {"host",
                                        "port",
                                        "unix_socket",
                                        "shutdown_grace_s",
                                        "max_message_bytes",
                                        "max_elements",
                                        "max_rank",
                                        "max_concurrent_calls",
                                        "max_queued_calls",
                                        "max_stream_in_flight",
                                        "threads",
                                        "max_memory_bytes",
                                        "memory_trim_idle_ms",
                                        "max_batch",
                                        "max_batch_bytes",
                                        "max_queue_delay_us",
                                        "inline_max_bytes",
                                        "device",
                                        "streams",
                                        "gpu_min_bytes",
                                        "gpu_memory_limit",
                                        "tls_cert",
                                        "tls_key",
                                        "tls_client_ca",
                                        "auth_token_file",
                                        "metrics_port",
                                        "metrics_host",
                                        "log_level",
                                        "store_memory_bytes"};

TEST(ServerProcessTest, HelpExitsZeroListingTheFlagsInGroups) {
  const BinaryRun run = RunServerBinary({"--help"});
  EXPECT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  const std::string& help = run.stdout_text;
  size_t previous = 0;
  for (const char* group :
       {"\nNetwork:\n", "\nLimits:\n", "\nMemory:\n", "\nBatching:\n", "\nGPU:\n",
        "\nTLS and authentication:\n", "\nMetrics:\n", "\nLogging:\n", "\nStore:\n"}) {
    const size_t at = help.find(group);
    EXPECT_NE(at, std::string::npos) << group << " in:\n" << help;
    EXPECT_GT(at, previous) << group << " out of order";
    previous = at;
  }
  for (const char* flag : kServerFlags) {
    EXPECT_THAT(help, HasSubstr(absl::StrCat("\n  --", flag))) << flag;
  }
  EXPECT_THAT(help, AllOf(HasSubstr("--flagfile=FILE"), HasSubstr("--version"),
                          HasSubstr("\n  --metrics_port=-1\n"), HasSubstr("\n  --port=50051\n")));
  // Nothing about where it was built.
  EXPECT_THAT(help, AllOf(Not(HasSubstr("main.cc")), Not(HasSubstr("Flags from"))));
}

TEST(ServerProcessTest, VersionPrintsTheVersionRevisionAndBuildType) {
  const BinaryRun run = RunServerBinary({"--version"});
  EXPECT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status);
  static const std::regex kVersion(
      R"(tensorops-server \d+\.\d+\.\d+ \(revision ([0-9a-f]{12}|unknown), \w+ build, .+\)\n)");
  EXPECT_TRUE(std::regex_match(run.stdout_text, kVersion)) << run.stdout_text;
  EXPECT_THAT(run.stdout_text, Not(HasSubstr("NDEBUG")));
}

TEST(ServerProcessTest, UnknownFlagsStrayArgumentsAndUnparsableValuesExitWithTwo) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--port=0", "--no_such_flag=1"}, "unknown flag '--no_such_flag=1' (see --help)"},
      {{"--port=0", "serve"},
       "unexpected argument 'serve': tensorops-server takes flags only (--name=value)"},
      {{"--port=abc"}, "--port=abc does not parse"},
      {{"--port"}, "flag --port needs a value"},
      {{"--flagfile=/nonexistent/tensorops.flags"},
       "--flagfile=/nonexistent/tensorops.flags cannot be read"},
  };
  for (const auto& [args, message] : cases) {
    const BinaryRun run = RunServerBinary(args);
    EXPECT_TRUE(ExitedWith(run.status, 2))
        << absl::StrJoin(args, " ") << ": " << DescribeExit(run.status);
    // One line, naming the argument.
    EXPECT_THAT(run.stderr_text, ::testing::StartsWith("tensorops-server: " + message))
        << absl::StrJoin(args, " ");
    EXPECT_EQ(absl::c_count(run.stderr_text, '\n'), 1) << run.stderr_text;
  }
}

// A port another socket listens on: one line saying so, without gRPC's core error.
TEST(ServerProcessTest, APortInUseIsOneClearLine) {
  const int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(listener, 0) << std::strerror(errno);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  ASSERT_EQ(listen(listener, 1), 0);
  socklen_t length = sizeof(address);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length), 0);
  const int port = ntohs(address.sin_port);

  const BinaryRun run =
      RunServerBinary({"--host=127.0.0.1", absl::StrCat("--port=", port), "--threads=1"});
  close(listener);
  EXPECT_TRUE(ExitedWith(run.status, 1)) << DescribeExit(run.status);
  const std::string output = run.stdout_text + run.stderr_text;
  EXPECT_THAT(output, HasSubstr(absl::StrFormat(
                          "cannot listen on 127.0.0.1:%d: the port is in use (choose another "
                          "--port, or --port=0 for any free one)",
                          port)));
  EXPECT_EQ(absl::c_count(output, '\n'), 1) << output;
  EXPECT_THAT(output, Not(HasSubstr("chttp2")));
}

// A --host that is no address and resolves to none: one line naming it, without gRPC's core
// error before it.
TEST(ServerProcessTest, AHostThatDoesNotResolveIsOneClearLine) {
  const BinaryRun run = RunServerBinary({"--host=256.1.1.1", "--port=0", "--threads=1"});
  EXPECT_TRUE(ExitedWith(run.status, 1)) << DescribeExit(run.status);
  const std::string output = run.stdout_text + run.stderr_text;
  EXPECT_THAT(output, HasSubstr("cannot listen on 256.1.1.1:0: --host=256.1.1.1 is not an address "
                                "or a name this machine resolves ("));
  EXPECT_EQ(absl::c_count(output, '\n'), 1) << output;
  EXPECT_THAT(output, Not(HasSubstr("chttp2")));
}

// --unix_socket: the server listens on the socket beside its TCP port; the C++ client and the CLI
// reach it through "unix:PATH" targets; the file goes at shutdown.
TEST(ServerProcessTest, TheUnixSocketServesTheClientAndTheCli) {
  const std::string directory = MakeTempDirectory("e2e_unix_");
  const std::string path = directory + "/tensorops.sock";
  absl::StatusOr<ServerProcess> server = StartServer({"--unix_socket=" + path});
  ASSERT_TRUE(server.ok()) << server.status();
  static const std::regex kAlsoOn(R"(; also on (unix:\S+) \(socket file mode 0[0-7]+\); tls: off)");
  const std::optional<std::string> also_on =
      server->process->WaitForMatch(kAlsoOn, kStartupTimeout);
  EXPECT_EQ(also_on, "unix:" + path) << server->process->stdout_text();

  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create("unix:" + path);
  ASSERT_TRUE(client.ok()) << client.status();
  const Tensor x = Float32Tensor({2, 2}, {1, 2, 3, 4});
  const Tensor index = Int64Tensor({2, 2}, {0, 0, 1, 0});
  absl::StatusOr<Tensor> gathered = (*client)->Gather(x.view(), 1, index.view());
  ASSERT_TRUE(gathered.ok()) << gathered.status();
  ref::ExpectTensorsNear(*gathered, Float32Tensor({2, 2}, {1, 1, 4, 3}));

  const std::string x_path = directory + "/x.npy";
  const std::string index_path = directory + "/i.npy";
  ASSERT_TRUE(WriteNpy(x_path, x.view()).ok());
  ASSERT_TRUE(WriteNpy(index_path, index.view()).ok());
  for (const std::string& target : {"unix:" + path, "unix://" + path}) {
    absl::StatusOr<std::unique_ptr<ChildProcess>> cli =
        ChildProcess::Spawn({TENSOROPS_CLI_PATH, "--target=" + target, "gather",
                             "--input=" + x_path, "--index=" + index_path, "--axis=1"});
    ASSERT_TRUE(cli.ok()) << cli.status();
    const int status = (*cli)->WaitForExit(kCliTimeout);
    EXPECT_TRUE(ExitedWith(status, 0)) << target << ": " << DescribeExit(status) << "\n"
                                       << (*cli)->stderr_text();
    EXPECT_THAT((*cli)->stdout_text(), HasSubstr("[[1., 1.],")) << target;
  }
  for (const std::string target : {"unix:", "unix-abstract:"}) {
    absl::StatusOr<std::unique_ptr<ChildProcess>> cli =
        ChildProcess::Spawn({TENSOROPS_CLI_PATH, "--target=" + target, "health"});
    ASSERT_TRUE(cli.ok()) << cli.status();
    const int status = (*cli)->WaitForExit(kCliTimeout);
    EXPECT_TRUE(ExitedWith(status, 2)) << target << ": " << DescribeExit(status);
    EXPECT_THAT((*cli)->stderr_text(), HasSubstr("names no socket (expected unix:PATH")) << target;
  }

  client->reset();
  const int status = server->process->Terminate(kShutdownTimeout);
  EXPECT_TRUE(ExitedWith(status, 0)) << DescribeExit(status) << "; stderr:\n"
                                     << server->process->stderr_text();
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::symlink_status(path)));
  std::filesystem::remove_all(directory);
}

// A --unix_socket path too long for a socket is a usage error; a file that is not a socket stops
// the start with one line, as a busy port does.
TEST(ServerProcessTest, UnixSocketMistakesAreOneClearLine) {
  const std::string long_path = "/tmp/" + std::string(110, 'x');
  BinaryRun run = RunServerBinary({"--port=0", "--unix_socket=" + long_path});
  EXPECT_TRUE(ExitedWith(run.status, 2)) << DescribeExit(run.status);
  EXPECT_THAT(run.stderr_text, HasSubstr("--unix_socket=" + long_path +
                                         " is too long: 115 bytes, and a Unix "
                                         "socket's path holds at most 107"));

  const std::string directory = MakeTempDirectory("e2e_unix_file_");
  const std::string file = directory + "/not-a-socket";
  std::ofstream(file) << "x";
  run = RunServerBinary({"--host=127.0.0.1", "--port=0", "--threads=1", "--unix_socket=" + file});
  EXPECT_TRUE(ExitedWith(run.status, 1)) << DescribeExit(run.status);
  const std::string output = run.stdout_text + run.stderr_text;
  EXPECT_THAT(output, HasSubstr(absl::StrCat("cannot listen on unix:", file, ": ", file,
                                             " exists and is a regular file, not a socket")));
  EXPECT_EQ(absl::c_count(output, '\n'), 1) << output;
  EXPECT_TRUE(std::filesystem::is_regular_file(file));
  std::filesystem::remove_all(directory);
}

// Without a GPU the start-up line says so plainly; why there is none stays in ServerInfo.
TEST(ServerProcessTest, WithoutAGpuTheStartUpLineSaysItServesOnTheCpu) {
  if (!QueryDevices().cuda_devices.empty()) GTEST_SKIP() << "a GPU is usable here";
  absl::StatusOr<ServerProcess> server = StartServer();
  ASSERT_TRUE(server.ok()) << server.status();
  static const std::regex kDevices(R"(devices: ([^;]*; [^;]*);)");
  const std::optional<std::string> devices =
      server->process->WaitForMatch(kDevices, kStartupTimeout);
  ASSERT_TRUE(devices.has_value()) << server->process->stderr_text();
  EXPECT_EQ(*devices, "cpu (2 threads); no GPU found, serving on the CPU");
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(server->target);
  ASSERT_TRUE(client.ok()) << client.status();
  absl::StatusOr<v1::ServerInfoResponse> info = (*client)->ServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_NE(info->gpu_note(), "");
  // A machine without the NVIDIA driver is told so, not that its driver is too old.
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver != nullptr) {
    dlclose(driver);
  } else if (QueryDevices().cuda_built) {
    EXPECT_THAT(info->gpu_note(), HasSubstr("no NVIDIA driver found"));
  }
}

// --device parses into its choices as every flag parses: a typo is a usage error listing the
// choices.
TEST(ServerProcessTest, ATypoInDeviceFailsListingTheChoices) {
  absl::StatusOr<std::unique_ptr<ChildProcess>> process =
      ChildProcess::Spawn({TENSOROPS_SERVER_PATH, "--port=0", "--device=gpu"});
  ASSERT_TRUE(process.ok()) << process.status();
  const int exit_status = (*process)->WaitForExit(kShutdownTimeout);
  EXPECT_TRUE(ExitedWith(exit_status, 2)) << DescribeExit(exit_status);
  EXPECT_THAT((*process)->stderr_text(),
              HasSubstr("Illegal value 'gpu' specified for flag 'device'; must be one of auto, "
                        "cpu, cuda"));
}

// Through the tensorops-cli binary.

class CliTest : public E2eTest {
 protected:
  void SetUp() override {
    E2eTest::SetUp();
    std::string pattern = (std::filesystem::path(::testing::TempDir()) / "e2e_cli_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr) << "mkdtemp: " << std::strerror(errno);
    directory_ = pattern;
  }
  void TearDown() override {
    if (!directory_.empty()) std::filesystem::remove_all(directory_);
  }

  // Writes `tensor` to `name` in the test's directory and returns the path.
  std::string Write(const std::string& name, const Tensor& tensor) {
    const std::string path = (std::filesystem::path(directory_) / name).string();
    EXPECT_TRUE(WriteNpy(path, tensor.view()).ok());
    return path;
  }
  std::string PathOf(const std::string& name) {
    return (std::filesystem::path(directory_) / name).string();
  }

  struct CliResult {
    int status = 0;
    std::string stdout_text;
    std::string stderr_text;
  };

  // Runs tensorops-cli with `args` against the suite's server.
  CliResult RunCli(std::vector<std::string> args) { return RunCliAt(target(), std::move(args)); }

  // Runs tensorops-cli with `args` against the server at `server_target`.
  CliResult RunCliAt(const std::string& server_target, std::vector<std::string> args) {
    args.insert(args.begin(), {TENSOROPS_CLI_PATH, absl::StrCat("--target=", server_target)});
    absl::StatusOr<std::unique_ptr<ChildProcess>> process = ChildProcess::Spawn(args);
    EXPECT_TRUE(process.ok()) << process.status();
    if (!process.ok()) return CliResult{-1, "", ""};
    const int status = (*process)->WaitForExit(kCliTimeout);
    return CliResult{status, (*process)->stdout_text(), (*process)->stderr_text()};
  }

  std::string directory_;
};

TEST_F(CliTest, GatherWritesTheResult) {
  absl::BitGen gen;
  const Tensor input = ref::RandomTensor(DataType::kFloat32, {4, 5}, gen);
  const Tensor index =
      ref::RandomIndex(DataType::kInt32, {4, 3}, 1, 5, ref::IndexPattern::kRandom, gen);
  const CliResult run =
      RunCli({"gather", "--input=" + Write("x.npy", input), "--index=" + Write("i.npy", index),
              "--axis=1", "--output=" + PathOf("out.npy")});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  // What was written is said, not shown.
  EXPECT_EQ(run.stdout_text, "wrote " + PathOf("out.npy") + ": shape=(4, 3) dtype=float32\n");
  absl::StatusOr<Tensor> output = ReadNpy(PathOf("out.npy"));
  ASSERT_TRUE(output.ok()) << output.status();
  absl::StatusOr<Tensor> expected =
      ref::ReferenceGather(input.view(), 1, index.view(), /*broadcast=*/false);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ref::ExpectTensorsNear(*output, *expected);
}

TEST_F(CliTest, ScatterAddWritesTheResult) {
  absl::BitGen gen;
  const Tensor input = ref::RandomTensor(DataType::kFloat64, {3, 4}, gen);
  const Tensor src = ref::RandomTensor(DataType::kFloat64, {5, 4}, gen);
  const Tensor index =
      ref::RandomIndex(DataType::kInt64, {5, 4}, 0, 3, ref::IndexPattern::kDuplicateHeavy, gen);
  const CliResult run = RunCli({"scatter", "--input=" + Write("x.npy", input),
                                "--index=" + Write("i.npy", index), "--src=" + Write("s.npy", src),
                                "--axis=0", "--reduce=add", "--output=" + PathOf("out.npy")});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  absl::StatusOr<Tensor> output = ReadNpy(PathOf("out.npy"));
  ASSERT_TRUE(output.ok()) << output.status();
  absl::StatusOr<Tensor> expected = ref::ReferenceScatter(input.view(), 0, index.view(), src.view(),
                                                          Reduction::kSum, /*include_self=*/true,
                                                          /*broadcast=*/false);
  ASSERT_TRUE(expected.ok()) << expected.status();
  ref::ExpectTensorsNear(*output, *expected,
                         ref::ToleranceFor(DataType::kFloat64, Reduction::kSum, 6));
}

TEST_F(CliTest, ScatterValuePrintsTheResult) {
  // torch.full((2, 4), 2).scatter_(1, torch.tensor([[2], [3]]), 5, reduce='add'), printed.
  const Tensor input = Int64Tensor({2, 4}, {2, 2, 2, 2, 2, 2, 2, 2});
  const Tensor index = Int64Tensor({2, 1}, {2, 3});
  const CliResult run =
      RunCli({"scatter", "--input=" + Write("x.npy", input), "--index=" + Write("i.npy", index),
              "--value=5", "--axis=1", "--reduce=add"});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  EXPECT_EQ(run.stdout_text, "shape=(2, 4) dtype=int64\n[[2, 2, 7, 2],\n [2, 2, 2, 7]]\n");
}

TEST_F(CliTest, IndexReduceDefaultsToSumAndTakesAlpha) {
  // torch.ones(5, 3).index_add_(0, torch.tensor([0, 4, 2]), t, alpha=2), printed.
  const Tensor ones = Float32Tensor({5, 3}, std::vector<double>(15, 1.0));
  const Tensor index = Int64Tensor({3}, {0, 4, 2});
  const Tensor t = Float32Tensor({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  const CliResult run = RunCli({"index_reduce", "--input=" + Write("x.npy", ones),
                                "--index=" + Write("i.npy", index), "--src=" + Write("t.npy", t),
                                "--axis=0", "--alpha=2", "--output=" + PathOf("o.npy")});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  absl::StatusOr<Tensor> output = ReadNpy(PathOf("o.npy"));
  ASSERT_TRUE(output.ok()) << output.status();
  ref::ExpectTensorsNear(*output,
                         Float32Tensor({5, 3}, {3, 5, 7, 1, 1, 1, 15, 17, 19, 1, 1, 1, 9, 11, 13}));
}

TEST_F(CliTest, IndexSelectAndViewScattersPrintTheirResults) {
  const Tensor input = Int64Tensor({3, 3}, {0, 0, 0, 0, 0, 0, 0, 0, 0});
  const std::string x = Write("x.npy", input);
  struct Case {
    std::vector<std::string> args;
    std::string printed;
  };
  const std::vector<Case> cases = {
      {{"index_select", "--input=" + Write("a.npy", Int64Tensor({3}, {7, 8, 9})),
        "--index=" + Write("i.npy", Int64Tensor({2}, {2, -3})), "--axis=0"},
       "shape=(2,) dtype=int64\n[9, 7]\n"},
      {{"select_scatter", "--input=" + x, "--src=" + Write("r.npy", Int64Tensor({3}, {1, 2, 3})),
        "--axis=1", "--select_index=-1"},
       "shape=(3, 3) dtype=int64\n[[0, 0, 1],\n [0, 0, 2],\n [0, 0, 3]]\n"},
      {{"slice_scatter", "--input=" + x,
        "--src=" + Write("s.npy", Int64Tensor({2, 3}, {1, 1, 1, 2, 2, 2})), "--axis=0", "--start=0",
        "--step=2"},
       "shape=(3, 3) dtype=int64\n[[1, 1, 1],\n [0, 0, 0],\n [2, 2, 2]]\n"},
      {{"diagonal_scatter", "--input=" + x, "--src=" + Write("d.npy", Int64Tensor({3}, {4, 5, 6}))},
       "shape=(3, 3) dtype=int64\n[[4, 0, 0],\n [0, 5, 0],\n [0, 0, 6]]\n"},
  };
  for (const Case& test_case : cases) {
    const CliResult run = RunCli(test_case.args);
    ASSERT_TRUE(ExitedWith(run.status, 0))
        << absl::StrJoin(test_case.args, " ") << ": " << DescribeExit(run.status) << "\n"
        << run.stderr_text;
    EXPECT_EQ(run.stdout_text, test_case.printed) << absl::StrJoin(test_case.args, " ");
  }
}

TEST_F(CliTest, NdOpsAndMaskedScatterPrintTheirResults) {
  const std::string matrix = Write("m.npy", Int64Tensor({2, 2}, {1, 2, 3, 4}));
  const std::string rows = Write("rows.npy", Int64Tensor({2, 1}, {1, 0}));
  const std::string tensor = Write("t.npy", Int64Tensor({8}, {1, 2, 3, 4, 5, 6, 7, 8}));
  const std::string tf_index = Write("tf.npy", Int64Tensor({4, 1}, {4, 3, 1, 7}));
  const std::string updates = Write("u.npy", Int64Tensor({4}, {9, 10, 11, 12}));
  struct Case {
    std::vector<std::string> args;
    std::string printed;
  };
  const std::vector<Case> cases = {
      {{"gather_nd", "--input=" + matrix, "--index=" + rows},
       "shape=(2, 2) dtype=int64\n[[3, 4],\n [1, 2]]\n"},
      {{"gather_nd", "--input=" + matrix,
        "--index=" + Write("g.npy", Int64Tensor({2, 2, 1}, {0, 0, 1, 0})), "--axes=1"},
       "shape=(2, 2) dtype=int64\n[[1, 1],\n [4, 3]]\n"},
      {{"gather_nd", "--input=" + Write("b.npy", Int64Tensor({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7})),
        "--index=" + rows, "--batch_dims=1"},
       "shape=(2, 2) dtype=int64\n[[2, 3],\n [4, 5]]\n"},
      {{"scatter_nd", "--input=" + tensor, "--index=" + tf_index, "--src=" + updates,
        "--reduce=max"},
       "shape=(8,) dtype=int64\n[1, 11, 3, 10, 9, 6, 7, 12]\n"},
      {{"scatter_nd", "--input=" + tensor, "--index=" + tf_index, "--src=" + updates,
        "--reduce=max", "--include_self=false"},
       "shape=(8,) dtype=int64\n[1, 11, 3, 10, 9, 6, 7, 12]\n"},
      {{"scatter_nd", "--shape=5", "--index=" + Write("p.npy", Int64Tensor({3, 1}, {1, 3, 1})),
        "--src=" + Write("pu.npy", Int64Tensor({3}, {9, 10, 11})), "--reduce=add"},
       "shape=(5,) dtype=int64\n[0, 20, 0, 10, 0]\n"},
      // Without --reduce, a --shape scatter_nd adds duplicates up, as paddle.scatter_nd does.
      {{"scatter_nd", "--shape=5", "--index=" + Write("p.npy", Int64Tensor({3, 1}, {1, 3, 1})),
        "--src=" + Write("pu.npy", Int64Tensor({3}, {9, 10, 11}))},
       "shape=(5,) dtype=int64\n[0, 20, 0, 10, 0]\n"},
      {{"scatter_nd", "--shape=5", "--index=" + Write("p.npy", Int64Tensor({3, 1}, {1, 3, 1})),
        "--src=" + Write("pu.npy", Int64Tensor({3}, {9, 10, 11})), "--reduce=assign"},
       "shape=(5,) dtype=int64\n[0, 11, 0, 10, 0]\n"},
      {{"scatter_nd", "--input=" + Write("z.npy", Tensor::Zeros(DataType::kInt64, {2, 3})),
        "--index=" + Write("a.npy", Int64Tensor({1, 2, 1}, {2, -3})),
        "--src=" + Write("as.npy", Int64Tensor({1, 2}, {7, 8})), "--axes=-1", "--deterministic"},
       "shape=(2, 3) dtype=int64\n[[8, 0, 7],\n [0, 0, 0]]\n"},
      {{"masked_scatter", "--input=" + Write("mz.npy", Tensor::Zeros(DataType::kInt64, {2, 5})),
        "--mask=" + Write("mask.npy", BoolTensor({2, 5}, {0, 0, 0, 1, 1, 1, 1, 0, 1, 1})),
        "--src=" + Write("ms.npy", Int64Tensor({2, 5}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9}))},
       "shape=(2, 5) dtype=int64\n[[0, 0, 0, 0, 1],\n [2, 3, 0, 4, 5]]\n"},
  };
  for (const Case& test_case : cases) {
    const CliResult run = RunCli(test_case.args);
    ASSERT_TRUE(ExitedWith(run.status, 0))
        << absl::StrJoin(test_case.args, " ") << ": " << DescribeExit(run.status) << "\n"
        << run.stderr_text;
    EXPECT_EQ(run.stdout_text, test_case.printed) << absl::StrJoin(test_case.args, " ");
  }
}

TEST_F(CliTest, ScatterNdOfShapeWritesTheResult) {
  // paddle.scatter_nd([[0, 1], [1, 2], [0, 1]], [1.5, 2, 3], shape=[2, 3]) into a .npy file.
  const CliResult run = RunCli(
      {"scatter_nd", "--shape=2,3",
       "--index=" + Write("i.npy", Int64Tensor({3, 2}, {0, 1, 1, 2, 0, 1})),
       "--src=" + Write("s.npy", ref::TensorFromValues(DataType::kFloat64, {3}, {1.5, 2, 3})),
       "--reduce=sum", "--output=" + PathOf("out.npy")});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  absl::StatusOr<Tensor> output = ReadNpy(PathOf("out.npy"));
  ASSERT_TRUE(output.ok()) << output.status();
  ref::ExpectTensorsNear(*output,
                         ref::TensorFromValues(DataType::kFloat64, {2, 3}, {0, 4.5, 0, 0, 0, 2}));
}

TEST_F(CliTest, MaskedScatterTooSmallSourceExitsWithOne) {
  const CliResult run =
      RunCli({"masked_scatter", "--input=" + Write("x.npy", Float32Tensor({3}, {0, 0, 0})),
              "--mask=" + Write("m.npy", BoolTensor({3}, {1, 1, 1})),
              "--src=" + Write("s.npy", Float32Tensor({2}, {1, 2}))});
  EXPECT_TRUE(ExitedWith(run.status, 1)) << DescribeExit(run.status);
  EXPECT_THAT(run.stderr_text,
              HasSubstr("error: INVALID_ARGUMENT: masked_scatter: src has 2 elements but mask has "
                        "3 true positions"));
}

TEST_F(CliTest, OutOfRangeIndexExitsWithOne) {
  const Tensor input = Int64Tensor({2, 2}, {1, 2, 3, 4});
  const Tensor index = Int64Tensor({2, 2}, {0, 0, 5, 0});
  const CliResult run = RunCli({"gather", "--input=" + Write("x.npy", input),
                                "--index=" + Write("i.npy", index), "--axis=1"});
  EXPECT_TRUE(ExitedWith(run.status, 1)) << DescribeExit(run.status);
  EXPECT_THAT(run.stderr_text,
              AllOf(HasSubstr("error: INVALID_ARGUMENT: "), HasSubstr("is out of range")));
}

TEST_F(CliTest, UsageErrorsExitWithTwo) {
  const std::string input = Write("x.npy", Int64Tensor({2}, {1, 2}));
  const std::vector<std::vector<std::string>> bad_command_lines = {
      {},
      {"transpose", "--input=" + input, "--index=" + input, "--axis=0"},
      {"gather", "--input=" + input, "--axis=0"},
      {"gather", "--input=" + input, "--index=" + input, "--axis=0", "--src=" + input},
      {"scatter", "--input=" + input, "--index=" + input, "--axis=0"},
      {"scatter", "--input=" + input, "--index=" + input, "--axis=0", "--value=1",
       "--reduce=median"},
      {"scatter", "--input=" + input, "--index=" + input, "--axis=0", "--value=abc"},
      {"gather", "--input=" + input, "--index=" + input, "--axis=one"},
      {"gather", "--no_such_flag=1"},
      {"index_reduce", "--input=" + input, "--index=" + input, "--axis=0"},
      {"select_scatter", "--input=" + input, "--src=" + input, "--axis=0"},
      {"diagonal_scatter", "--input=" + input, "--src=" + input, "--index=" + input},
      {"slice_scatter", "--input=" + input, "--src=" + input, "--axis=0", "--reduce=sum"},
      {"gather_nd", "--input=" + input},
      {"gather_nd", "--input=" + input, "--index=" + input, "--axes=0,x"},
      {"gather_nd", "--input=" + input, "--index=" + input, "--mask=" + input},
      {"gather", "--input=" + input, "--index=" + input, "--axis=0", "--batch_dims=1"},
      {"scatter_nd", "--index=" + input, "--src=" + input},
      {"scatter_nd", "--input=" + input, "--shape=2", "--index=" + input, "--src=" + input},
      {"scatter_nd", "--shape=2,-", "--index=" + input, "--src=" + input},
      {"scatter_nd", "--input=" + input, "--index=" + input},
      {"scatter", "--input=" + input, "--index=" + input, "--axis=0", "--value=1", "--shape=2"},
      {"masked_scatter", "--input=" + input, "--src=" + input},
      {"masked_scatter", "--input=" + input, "--mask=" + input, "--src=" + input, "--axes=0"},
  };
  for (const std::vector<std::string>& args : bad_command_lines) {
    const CliResult run = RunCli(args);
    EXPECT_TRUE(ExitedWith(run.status, 2))
        << absl::StrJoin(args, " ") << ": " << DescribeExit(run.status);
    EXPECT_THAT(run.stderr_text, AllOf(HasSubstr("error: "), HasSubstr("usage:")))
        << absl::StrJoin(args, " ");
  }
}

TEST_F(CliTest, GradOutputComputesTheBackward) {
  absl::BitGen gen;
  const Tensor input = ref::RandomTensor(DataType::kFloat64, {3, 4}, gen);
  const Tensor src = ref::RandomTensor(DataType::kFloat64, {5, 4}, gen);
  const Tensor index =
      ref::RandomIndex(DataType::kInt64, {5, 4}, 0, 3, ref::IndexPattern::kDuplicateHeavy, gen);
  const Tensor grad = ref::RandomTensor(DataType::kFloat64, {3, 4}, gen);
  const CliResult run =
      RunCli({"scatter", "--input=" + Write("x.npy", input), "--index=" + Write("i.npy", index),
              "--src=" + Write("s.npy", src), "--axis=0", "--reduce=mean",
              "--grad_output=" + Write("g.npy", grad), "--output=" + PathOf("grad.npy")});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  absl::StatusOr<Gradients> expected = Backward(ScatterArgs{.input = input.view(),
                                                            .index = index.view(),
                                                            .source = src.view(),
                                                            .axis = 0,
                                                            .reduce = Reduction::kMean},
                                                grad.view());
  ASSERT_TRUE(expected.ok()) << expected.status();
  for (const char* argument : {"input", "src"}) {
    absl::StatusOr<Tensor> written = ReadNpy(PathOf(absl::StrCat("grad.", argument, ".npy")));
    ASSERT_TRUE(written.ok()) << written.status();
    ref::ExpectTensorsNear(*written, *expected->Find(argument));
  }

  // Without --output both gradients are printed; an integer op has none and fails with exit 1.
  const CliResult printed =
      RunCli({"scatter", "--input=" + PathOf("x.npy"), "--index=" + PathOf("i.npy"),
              "--src=" + PathOf("s.npy"), "--axis=0", "--grad_output=" + PathOf("g.npy")});
  ASSERT_TRUE(ExitedWith(printed.status, 0)) << printed.stderr_text;
  EXPECT_THAT(printed.stdout_text,
              AllOf(HasSubstr("gradient of input:"), HasSubstr("gradient of src:")));
  const CliResult integer =
      RunCli({"gather", "--input=" + Write("xi.npy", Int64Tensor({2}, {1, 2})),
              "--index=" + Write("ii.npy", Int64Tensor({1}, {0})), "--axis=0",
              "--grad_output=" + Write("gi.npy", Int64Tensor({1}, {1}))});
  EXPECT_TRUE(ExitedWith(integer.status, 1)) << DescribeExit(integer.status);
  EXPECT_THAT(integer.stderr_text, HasSubstr("not differentiable"));
}

TEST_F(CliTest, InfoPrintsServerInfoAsJson) {
  const CliResult run = RunCli({"info"});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  EXPECT_THAT(run.stdout_text,
              AllOf(HasSubstr("\"version\""), HasSubstr("\"MaskedScatter\""),
                    HasSubstr("\"maxQueuedCalls\": 1024"), HasSubstr("\"DATA_TYPE_COMPLEX128\""),
                    HasSubstr("\"inlineMaxBytes\": \"65536\""), HasSubstr("\"store\": {")));
  // Still one JSON object, now with the RPCs other than the ops (from reflection).
  google::protobuf::Struct json;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(run.stdout_text, &json).ok())
      << run.stdout_text;
  ASSERT_TRUE(json.fields().contains("rpcs")) << run.stdout_text;
  std::vector<std::string> rpcs;
  for (const google::protobuf::Value& rpc : json.fields().at("rpcs").list_value().values()) {
    rpcs.push_back(rpc.string_value());
  }
  EXPECT_THAT(rpcs,
              ::testing::IsSupersetOf({"Run", "RunStream", "Backward", "ServerInfo", "PutTensor",
                                       "GetTensor", "ListTensors", "TensorInfo", "DeleteTensor"}));
  EXPECT_THAT(rpcs, Not(::testing::Contains("Gather")));
  const CliResult misuse = RunCli({"info", "--axis=1"});
  EXPECT_TRUE(ExitedWith(misuse.status, 2)) << DescribeExit(misuse.status);
  EXPECT_THAT(misuse.stderr_text, HasSubstr("flag --axis does not apply to info"));
}

TEST_F(CliTest, HealthListAndDescribeThroughTheStandardServices) {
  CliResult run = RunCli({"health"});
  EXPECT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  EXPECT_EQ(run.stdout_text, "SERVING\n");
  run = RunCli({"health", "tensorops.v1.TensorOps"});
  EXPECT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  EXPECT_EQ(run.stdout_text, "SERVING\n");
  // KServe's service on the same port (docs/kserve.md) is SERVING too.
  run = RunCli({"health", "inference.GRPCInferenceService"});
  EXPECT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  EXPECT_EQ(run.stdout_text, "SERVING\n");
  run = RunCli({"health", "no.such.Service"});
  EXPECT_TRUE(ExitedWith(run.status, 1)) << DescribeExit(run.status);
  EXPECT_EQ(run.stderr_text,
            "error: NOT_FOUND: the health service knows no service 'no.such.Service' (list shows "
            "the services)\n");

  run = RunCli({"list"});
  EXPECT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  EXPECT_EQ(run.stdout_text,
            "grpc.health.v1.Health\ngrpc.reflection.v1alpha.ServerReflection\n"
            "inference.GRPCInferenceService\ntensorops.v1.TensorOps\n");
  run = RunCli({"list", "tensorops.v1.TensorOps"});
  EXPECT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  EXPECT_THAT(run.stdout_text, AllOf(::testing::StartsWith("tensorops.v1.TensorOps.Gather\n"),
                                     HasSubstr("\ntensorops.v1.TensorOps.RunStream\n"),
                                     HasSubstr("\ntensorops.v1.TensorOps.PutTensor\n")));
  run = RunCli({"list", "tensorops.v1.GatherRequest"});
  EXPECT_TRUE(ExitedWith(run.status, 1)) << DescribeExit(run.status);
  EXPECT_THAT(run.stderr_text, HasSubstr("'tensorops.v1.GatherRequest' is not a service"));

  run = RunCli({"describe", "tensorops.v1.GatherRequest"});
  EXPECT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  EXPECT_THAT(
      run.stdout_text,
      AllOf(::testing::StartsWith("tensorops.v1.GatherRequest is a message:\n"
                                  "message GatherRequest {\n"),
            HasSubstr("  .tensorops.v1.Tensor index = 2;\n"), HasSubstr("  int64 axis = 3;\n")));
  run = RunCli({"describe", "tensorops.v1.TensorOps.RunStream"});
  EXPECT_TRUE(ExitedWith(run.status, 0)) << run.stderr_text;
  EXPECT_EQ(run.stdout_text,
            "tensorops.v1.TensorOps.RunStream is a method:\n"
            "rpc RunStream(stream .tensorops.v1.RunStreamRequest) returns (stream "
            ".tensorops.v1.RunStreamResponse);\n");
  run = RunCli({"describe", "tensorops.v1.TensorOps"});
  EXPECT_TRUE(ExitedWith(run.status, 0)) << run.stderr_text;
  EXPECT_THAT(run.stdout_text, AllOf(HasSubstr("service TensorOps {\n"),
                                     HasSubstr("rpc MaskedScatter(.tensorops.v1.")));
  run = RunCli({"describe", "tensorops.v1.DataType"});
  EXPECT_TRUE(ExitedWith(run.status, 0)) << run.stderr_text;
  EXPECT_THAT(run.stdout_text, AllOf(HasSubstr("is an enum:\nenum DataType {\n"),
                                     HasSubstr("DATA_TYPE_FLOAT32 = 9;")));
  run = RunCli({"describe", "tensorops.v1.NoSuchThing"});
  EXPECT_TRUE(ExitedWith(run.status, 1)) << DescribeExit(run.status);
  EXPECT_THAT(run.stderr_text, HasSubstr("error: NOT_FOUND: "));
  EXPECT_THAT(run.stderr_text, HasSubstr("'tensorops.v1.NoSuchThing'"));
}

// A usage error shows the error, that command's synopsis and where the rest is: a few lines, not
// the whole help.
TEST_F(CliTest, AUsageErrorShowsTheCommandsSynopsisNotTheWholeHelp) {
  const std::string input = Write("x.npy", Int64Tensor({2}, {1, 2}));
  CliResult run = RunCli({"gather", "--input=" + input, "--axis=0"});
  EXPECT_TRUE(ExitedWith(run.status, 2)) << DescribeExit(run.status);
  EXPECT_EQ(run.stderr_text,
            "error: gather needs --index\n\n"
            "usage: tensorops-cli [--target=HOST:PORT] [FLAGS] gather --input=X.npy --index=I.npy "
            "--axis=N [--broadcast]\n"
            "    [--output=OUT.npy] [--bfloat16] [--grad_output=G.npy]\n"
            "see tensorops-cli --help for every command and flag\n");
  EXPECT_EQ(run.stdout_text, "");

  run = RunCli({"put", "only_a_name"});
  EXPECT_TRUE(ExitedWith(run.status, 2)) << DescribeExit(run.status);
  EXPECT_EQ(run.stderr_text,
            "error: put takes NAME FILE.npy [--overwrite | --expected_version=N] [--bfloat16], "
            "got 1 argument: only_a_name\n\n"
            "usage: tensorops-cli [--target=HOST:PORT] [FLAGS] put NAME FILE.npy [--overwrite | "
            "--expected_version=N] [--bfloat16]\n"
            "    store the file's tensor under NAME, for ops to use as @NAME\n"
            "see tensorops-cli --help for every command and flag\n");

  // Without a known command, the commands are listed instead.
  run = RunCli({"transpose"});
  EXPECT_TRUE(ExitedWith(run.status, 2)) << DescribeExit(run.status);
  EXPECT_THAT(run.stderr_text,
              AllOf(HasSubstr("error: unknown command 'transpose'"),
                    HasSubstr("\ncommands: gather, scatter,"), HasSubstr(", describe, put, get,"),
                    HasSubstr("see tensorops-cli --help"), Not(HasSubstr("Flags:"))));

  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"gather", "stray", "--input=" + input},
           {"health", "a", "b"},
           {"describe"},
           {"ls", "--overwrite"},
           {"rm", ""},
           {"gather", "--input=@", "--index=" + input, "--axis=0"},
           {"gather", "--input=" + input, "--index=" + input, "--axis=0", "--grad_output=@g"}}) {
    run = RunCli(args);
    EXPECT_TRUE(ExitedWith(run.status, 2))
        << absl::StrJoin(args, " ") << ": " << DescribeExit(run.status);
    EXPECT_THAT(run.stderr_text, AllOf(HasSubstr("error: "), HasSubstr("usage: tensorops-cli"),
                                       Not(HasSubstr("Flags:"))))
        << absl::StrJoin(args, " ");
  }
}

// put, ls, stat, get and rm work the store; an op takes a stored tensor as @NAME.
TEST_F(CliTest, StoreCommandsAndStoredInputs) {
  const Tensor input = Int64Tensor({2, 2}, {1, 2, 3, 4});
  const Tensor index = Int64Tensor({2, 2}, {0, 0, 1, 0});
  CliResult run = RunCli({"put", "cli_input", Write("x.npy", input)});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  EXPECT_EQ(run.stdout_text, "stored cli_input: shape=(2, 2) dtype=int64, version 1, 32 bytes\n");
  // Small tensors print no progress.
  EXPECT_EQ(run.stderr_text, "");
  run = RunCli({"put", "cli_input", PathOf("x.npy")});
  EXPECT_TRUE(ExitedWith(run.status, 1)) << DescribeExit(run.status);
  EXPECT_THAT(run.stderr_text, HasSubstr("error: FAILED_PRECONDITION: "));
  run = RunCli({"put", "cli_input", PathOf("x.npy"), "--overwrite"});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  EXPECT_THAT(run.stdout_text, HasSubstr("version 2"));
  ASSERT_TRUE(ExitedWith(RunCli({"put", "cli_index", Write("i.npy", index)}).status, 0));

  run = RunCli({"ls"});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  EXPECT_THAT(run.stdout_text,
              AllOf(HasSubstr("cli_index  shape=(2, 2) dtype=int64  32 bytes  version 1\n"),
                    HasSubstr("cli_input  shape=(2, 2) dtype=int64  32 bytes  version 2\n")));
  run = RunCli({"stat", "cli_input"});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  v1::TensorInfo info;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(run.stdout_text, &info).ok())
      << run.stdout_text;
  EXPECT_EQ(info.name(), "cli_input");
  EXPECT_EQ(info.dtype(), v1::DATA_TYPE_INT64);
  EXPECT_EQ(info.version(), 2);
  EXPECT_EQ(info.bytes(), 32);

  run = RunCli({"get", "cli_input", PathOf("got.npy")});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  EXPECT_EQ(run.stdout_text, "wrote " + PathOf("got.npy") + ": shape=(2, 2) dtype=int64\n");
  absl::StatusOr<Tensor> got = ReadNpy(PathOf("got.npy"));
  ASSERT_TRUE(got.ok()) << got.status();
  ref::ExpectTensorsNear(*got, input);

  // torch.gather([[1, 2], [3, 4]], 1, [[0, 0], [1, 0]]) from stored tensors, from a mix, and from
  // files: the same.
  const std::string expected = "shape=(2, 2) dtype=int64\n[[1, 1],\n [4, 3]]\n";
  for (const auto& [input_flag, index_flag] :
       std::vector<std::pair<std::string, std::string>>{{"@cli_input", "@cli_index"},
                                                        {"@cli_input", PathOf("i.npy")},
                                                        {PathOf("x.npy"), "@cli_index"},
                                                        {PathOf("x.npy"), PathOf("i.npy")}}) {
    run = RunCli({"gather", "--input=" + input_flag, "--index=" + index_flag, "--axis=1"});
    EXPECT_TRUE(ExitedWith(run.status, 0))
        << input_flag << " " << index_flag << ": " << run.stderr_text;
    EXPECT_EQ(run.stdout_text, expected) << input_flag << " " << index_flag;
  }
  // scatter's --src as well: torch.zeros(2, 2).scatter_(1, index, input).
  ASSERT_TRUE(ExitedWith(
      RunCli({"put", "cli_zeros", Write("z.npy", Int64Tensor({2, 2}, {0, 0, 0, 0}))}).status, 0));
  run = RunCli(
      {"scatter", "--input=@cli_zeros", "--index=@cli_index", "--src=@cli_input", "--axis=1"});
  EXPECT_TRUE(ExitedWith(run.status, 0)) << run.stderr_text;
  EXPECT_EQ(run.stdout_text, "shape=(2, 2) dtype=int64\n[[2, 0],\n [4, 3]]\n");

  // The result kept in the store (--output=@NAME), then an in-place update of it (--in_place).
  run = RunCli(
      {"gather", "--input=@cli_input", "--index=@cli_index", "--axis=1", "--output=@cli_rows"});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << run.stderr_text;
  EXPECT_EQ(run.stdout_text, "stored cli_rows: shape=(2, 2) dtype=int64, version 1\n");
  run = RunCli(
      {"gather", "--input=@cli_input", "--index=@cli_index", "--axis=1", "--output=@cli_rows"});
  EXPECT_TRUE(ExitedWith(run.status, 1));
  EXPECT_THAT(run.stderr_text, HasSubstr("exists at version 1; pass overwrite"));
  run = RunCli({"gather", "--input=@cli_input", "--index=@cli_index", "--axis=1",
                "--output=@cli_rows", "--overwrite"});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << run.stderr_text;
  EXPECT_THAT(run.stdout_text, HasSubstr("version 2"));
  // torch.tensor([[1, 1], [4, 3]]).scatter_add_(1, index, input) = [[4, 1], [8, 6]]
  run = RunCli({"scatter", "--input=@cli_rows", "--index=@cli_index", "--src=@cli_input",
                "--axis=1", "--reduce=sum", "--in_place"});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << run.stderr_text;
  EXPECT_EQ(run.stdout_text, "stored cli_rows: shape=(2, 2) dtype=int64, version 3\n");
  ASSERT_TRUE(ExitedWith(RunCli({"get", "cli_rows", PathOf("rows.npy")}).status, 0));
  absl::StatusOr<Tensor> rows = ReadNpy(PathOf("rows.npy"));
  ASSERT_TRUE(rows.ok()) << rows.status();
  ref::ExpectTensorsNear(*rows, Int64Tensor({2, 2}, {4, 1, 8, 6}));
  run = RunCli({"scatter", "--input=" + PathOf("x.npy"), "--index=@cli_index", "--src=@cli_input",
                "--axis=1", "--in_place"});
  EXPECT_TRUE(ExitedWith(run.status, 2));
  EXPECT_THAT(run.stderr_text, HasSubstr("--in_place updates a stored tensor: --input = '"));
  ASSERT_TRUE(ExitedWith(RunCli({"rm", "cli_rows"}).status, 0));

  for (const char* name : {"cli_input", "cli_index", "cli_zeros"}) {
    run = RunCli({"rm", name});
    EXPECT_TRUE(ExitedWith(run.status, 0)) << run.stderr_text;
    EXPECT_EQ(run.stdout_text, absl::StrCat("deleted ", name, "\n"));
  }
  run = RunCli({"stat", "cli_input"});
  EXPECT_TRUE(ExitedWith(run.status, 1)) << DescribeExit(run.status);
  EXPECT_THAT(run.stderr_text, HasSubstr("error: NOT_FOUND: "));
  run = RunCli({"gather", "--input=@cli_input", "--index=" + PathOf("i.npy"), "--axis=1"});
  EXPECT_TRUE(ExitedWith(run.status, 1)) << DescribeExit(run.status);
  EXPECT_THAT(run.stderr_text, AllOf(HasSubstr("error: NOT_FOUND: "), HasSubstr("cli_input")));
  run = RunCli({"ls"});
  EXPECT_THAT(run.stdout_text, Not(HasSubstr("cli_")));
}

// Uploads and downloads of 16 MiB or more report their progress on stderr, to 100%.
TEST_F(CliTest, LargeTransfersReportTheirProgress) {
  Tensor large(DataType::kFloat32, {5, 1 << 20});
  std::fill_n(large.data_as<float>(), large.numel(), 0.5f);
  CliResult run = RunCli({"put", "cli_large", Write("large.npy", large)});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  EXPECT_THAT(run.stderr_text, AllOf(::testing::StartsWith("put cli_large: "),
                                     HasSubstr("put cli_large: 20.0 of 20.0 MiB (100%)\n")));
  run = RunCli({"get", "cli_large", PathOf("large_back.npy")});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  EXPECT_THAT(run.stderr_text, HasSubstr("get cli_large: 20.0 of 20.0 MiB (100%)\n"));
  absl::StatusOr<Tensor> back = ReadNpy(PathOf("large_back.npy"));
  ASSERT_TRUE(back.ok()) << back.status();
  ref::ExpectSameBytes(*back, large);
  EXPECT_TRUE(ExitedWith(RunCli({"rm", "cli_large"}).status, 0));
}

// The first hour's rough edges: --version, one command's help, a target without a port, local
// file problems as usage errors without a server's status code, and the store's versions
// (--expected_version, get --version, @NAME@VERSION) that the server's own errors ask for.
TEST_F(CliTest, VersionHelpTargetFilesAndStoreVersions) {
  CliResult run = RunCli({"--version"});
  EXPECT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status);
  EXPECT_THAT(run.stdout_text, ::testing::StartsWith("tensorops-cli "));
  EXPECT_THAT(run.stdout_text, HasSubstr("(revision "));

  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"gather", "--help"}, {"help", "gather"}}) {
    run = RunCli(args);
    EXPECT_TRUE(ExitedWith(run.status, 0)) << absl::StrJoin(args, " ");
    EXPECT_THAT(run.stdout_text,
                AllOf(::testing::StartsWith(
                          "usage: tensorops-cli [--target=HOST:PORT] [FLAGS] gather --input="),
                      HasSubstr("\n  --axis\n"), HasSubstr("\n  --target\n"),
                      Not(HasSubstr("--mask")), Not(HasSubstr("\n  --shape\n"))))
        << absl::StrJoin(args, " ");
  }
  run = RunCli({"help", "get"});
  EXPECT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status);
  EXPECT_THAT(run.stdout_text, AllOf(HasSubstr("get NAME OUT.npy [--version=N]"),
                                     HasSubstr("--version\n"), Not(HasSubstr("--axis"))));
  run = RunCli({"help", "transpose"});
  EXPECT_TRUE(ExitedWith(run.status, 2)) << DescribeExit(run.status);

  run = RunCli({"--target=127.0.0.1", "health"});
  EXPECT_TRUE(ExitedWith(run.status, 2)) << DescribeExit(run.status);
  EXPECT_THAT(run.stderr_text, HasSubstr("--target = '127.0.0.1' has no port"));

  const std::string index = Write("i.npy", Int64Tensor({1}, {0}));
  run = RunCli({"gather", "--input=" + PathOf("missing.npy"), "--index=" + index, "--axis=0"});
  EXPECT_TRUE(ExitedWith(run.status, 2)) << DescribeExit(run.status);
  EXPECT_THAT(run.stderr_text, AllOf(::testing::StartsWith("error: "), HasSubstr("missing.npy"),
                                     Not(HasSubstr("NOT_FOUND"))));
  const std::string bfloat16 =
      Write("b.npy", Tensor::FromView(TensorView(DataType::kBFloat16, {1}, "\x80\x3f")));
  run = RunCli({"put", "cli_b", bfloat16});
  EXPECT_TRUE(ExitedWith(run.status, 2)) << DescribeExit(run.status);
  EXPECT_THAT(run.stderr_text, AllOf(HasSubstr("(--bfloat16)"), Not(HasSubstr("NpyReadOptions"))));

  const std::string x = Write("x.npy", Int64Tensor({2}, {5, 6}));
  ASSERT_TRUE(ExitedWith(RunCli({"put", "cli_v", x}).status, 0));
  run = RunCli({"put", "cli_v", x, "--expected_version=1"});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << run.stderr_text;
  EXPECT_THAT(run.stdout_text, HasSubstr("version 2"));
  run = RunCli({"put", "cli_v", x, "--expected_version=1"});
  EXPECT_TRUE(ExitedWith(run.status, 1)) << DescribeExit(run.status);
  EXPECT_THAT(run.stderr_text, HasSubstr("FAILED_PRECONDITION"));
  EXPECT_TRUE(ExitedWith(RunCli({"get", "cli_v", PathOf("v1.npy"), "--version=1"}).status, 1));
  ASSERT_TRUE(ExitedWith(RunCli({"get", "cli_v", PathOf("v2.npy"), "--version=2"}).status, 0));
  run = RunCli({"gather", "--input=@cli_v@2", "--index=" + index, "--axis=0"});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << run.stderr_text;
  EXPECT_THAT(run.stdout_text, HasSubstr("[5]"));
  run = RunCli({"gather", "--input=@cli_v@1", "--index=" + index, "--axis=0"});
  EXPECT_TRUE(ExitedWith(run.status, 1)) << DescribeExit(run.status);
  run = RunCli({"gather", "--input=@cli_v@x", "--index=" + index, "--axis=0"});
  EXPECT_TRUE(ExitedWith(run.status, 2)) << DescribeExit(run.status);
  EXPECT_THAT(run.stderr_text, HasSubstr("@NAME@VERSION"));
  EXPECT_TRUE(ExitedWith(RunCli({"rm", "cli_v", "--expected_version=1"}).status, 1));
  EXPECT_TRUE(ExitedWith(RunCli({"rm", "cli_v", "--expected_version=2"}).status, 0));
}

// Mistakes on the command line are exit 2 with a message naming the flag, before any call: a
// port gRPC would dial modulo 65536 or as 0 or 443, --output beside --in_place (which writes no
// file), an unreadable TLS file, --alpha's value, an empty --shape, and get's --version without
// its number (which printed the CLI's version and downloaded nothing).
TEST_F(CliTest, CommandLineMistakesExitWithTwoNamingTheFlag) {
  const std::string x = Write("x.npy", Int64Tensor({2}, {5, 6}));
  const std::string bfloat16 =
      Write("b.npy", Tensor::FromView(TensorView(DataType::kBFloat16, {1}, "\x80\x3f")));
  ASSERT_TRUE(ExitedWith(RunCli({"put", "cli_mistakes", x}).status, 0));
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--target=127.0.0.1:111630", "health"}, "port '111630' is not a number from 1 to 65535"},
      {{"--target=127.0.0.1:abc", "health"}, "port 'abc' is not a number from 1 to 65535"},
      {{"--target=::1", "health"}, "an IPv6 address takes brackets before its port"},
      {{"--target=dns:///localhost", "health"}, "has no port"},
      {{"--target=ipv4:127.0.0.1", "health"}, "has no port"},
      {{"scatter", "--input=@cli_mistakes", "--index=" + x, "--axis=0", "--value=1", "--in_place",
        "--output=" + PathOf("res.npy")},
       "--in_place writes the result into --input's stored tensor: --output = "},
      {{"--tls_ca=" + PathOf("no_such_ca.pem"), "ls"}, "--tls_ca: cannot open "},
      {{"index_reduce", "--input=" + x, "--index=" + x, "--src=" + x, "--axis=0", "--alpha=abc"},
       "--alpha = 'abc' is not true, false"},
      {{"gather", "--input=" + bfloat16, "--index=" + x, "--axis=0"}, "(--bfloat16)"},
      {{"get", "cli_mistakes", PathOf("got.npy"), "--version"}, "flag --version needs a value"},
      {{"scatter_nd", "--shape=", "--index=" + x, "--src=" + x}, "--shape is empty"},
  };
  for (const auto& [args, message] : cases) {
    const CliResult run = RunCli(args);
    EXPECT_TRUE(ExitedWith(run.status, 2))
        << absl::StrJoin(args, " ") << ": " << DescribeExit(run.status) << "\n"
        << run.stderr_text;
    EXPECT_THAT(run.stderr_text, AllOf(::testing::StartsWith("error: "), HasSubstr(message),
                                       Not(HasSubstr("_FOUND:"))))
        << absl::StrJoin(args, " ");
  }
  EXPECT_FALSE(std::filesystem::exists(PathOf("res.npy")));
  EXPECT_FALSE(std::filesystem::exists(PathOf("got.npy")));
}

// Printed floats read back as the same value, as NumPy prints them, not rounded to 6 digits.
TEST_F(CliTest, PrintedFloatsReadBackExactly) {
  const std::string wide = Write(
      "wide.npy",
      ref::TensorFromValues(DataType::kFloat64, {5}, {1234567, 1.0000001, 0.1, 123456789, 1e-05}));
  // Built from floats: ref::TensorFromValues would also truncate 3.4e38 into an int64.
  const std::vector<float> narrow_values = {1.0000001f, 0.1f, 3.4e38f};
  const std::string narrow = Write(
      "narrow.npy", Tensor::FromView(TensorView(DataType::kFloat32, {3}, narrow_values.data())));
  const std::string rows = Write("rows.npy", Int64Tensor({5}, {0, 1, 2, 3, 4}));
  CliResult run = RunCli({"index_select", "--input=" + wide, "--index=" + rows, "--axis=0"});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << run.stderr_text;
  EXPECT_EQ(run.stdout_text,
            "shape=(5,) dtype=float64\n[1234567., 1.0000001, 0.1, 123456789., 1e-05]\n");
  run = RunCli({"index_select", "--input=" + narrow,
                "--index=" + Write("three.npy", Int64Tensor({3}, {0, 1, 2})), "--axis=0"});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << run.stderr_text;
  EXPECT_EQ(run.stdout_text, "shape=(3,) dtype=float32\n[1.0000001, 0.1, 3.4e+38]\n");
}

TEST_F(CliTest, SnapshotWithoutStoreDirExitsWithOne) {
  const CliResult run = RunCli({"snapshot"});
  EXPECT_TRUE(ExitedWith(run.status, 1)) << DescribeExit(run.status);
  EXPECT_THAT(run.stderr_text,
              AllOf(HasSubstr("error: FAILED_PRECONDITION: "), HasSubstr("--store_dir")));
  EXPECT_EQ(run.stdout_text, "");
}

// snapshot on a server with --store_dir; store-file lists its snapshot and log and writes a
// tensor from them, with no server.
TEST_F(CliTest, SnapshotAndStoreFiles) {
  const std::string store_dir = PathOf("store");
  absl::StatusOr<ServerProcess> server = StartServer(
      {"--store_dir=" + store_dir, "--store_sync=always", "--store_snapshot_interval_s=0"});
  ASSERT_TRUE(server.ok()) << server.status();
  const Tensor x = Float32Tensor({2, 3}, {0, 1, 2, 3, 4, 5});
  const std::string x_path = Write("x.npy", x);
  const std::string i_path = Write("i.npy", Int64Tensor({2}, {0, 1}));
  ASSERT_TRUE(ExitedWith(RunCliAt(server->target, {"put", "a", x_path}).status, 0));
  ASSERT_TRUE(ExitedWith(RunCliAt(server->target, {"put", "idx", i_path}).status, 0));

  CliResult run = RunCliAt(server->target, {"snapshot"});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  static const std::regex kWrote(
      R"(wrote snapshot (\S+): generation (\d+), 2 tensors, (\d+) bytes, in \S+\n)");
  std::smatch wrote;
  ASSERT_TRUE(std::regex_match(run.stdout_text, wrote, kWrote)) << run.stdout_text;
  const std::string snapshot = wrote[1];
  const int64_t generation = std::stoll(wrote[2]);
  EXPECT_EQ(std::filesystem::path(snapshot).parent_path(), store_dir);
  std::error_code error;
  EXPECT_EQ(std::filesystem::file_size(snapshot, error), std::stoull(wrote[3])) << error.message();
  // A copy for after the server is stopped: its last snapshot replaces this one.
  const std::string kept = PathOf("kept.tosnap");
  std::filesystem::copy_file(snapshot, kept);

  // Changes after the snapshot go to the log of its generation: a value, an update, a delete.
  ASSERT_TRUE(ExitedWith(RunCliAt(server->target, {"put", "a", x_path, "--overwrite"}).status, 0));
  run = RunCliAt(server->target, {"index_reduce", "--input=@a", "--index=" + i_path,
                                  "--src=" + x_path, "--axis=0", "--in_place"});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << run.stderr_text;
  ASSERT_TRUE(ExitedWith(RunCliAt(server->target, {"rm", "idx"}).status, 0));
  const std::string log =
      (std::filesystem::path(store_dir) / absl::StrFormat("log-%012d.tolog", generation)).string();

  run = RunCli({"store-file", snapshot});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  EXPECT_THAT(run.stdout_text,
              AllOf(::testing::StartsWith(absl::StrFormat(
                        "snapshot %s: generation %d, format 1, created ", snapshot, generation)),
                    HasSubstr("\nNAMESPACE  NAME  DTYPE    SHAPE   VERSION  BYTES\n"),
                    HasSubstr("\n-          a     float32  (2, 3)  1        24\n"),
                    HasSubstr("\n-          idx   int64    (2,)    1        16\n"),
                    HasSubstr("\nend: 2 tensors, 40 bytes\n")))
      << run.stdout_text;
  EXPECT_EQ(run.stderr_text, "");
  run = RunCli({"store-file", log});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  EXPECT_THAT(
      run.stdout_text,
      AllOf(::testing::StartsWith(absl::StrFormat("log %s: generation %d", log, generation)),
            ::testing::ContainsRegex("\nOFFSET +KIND +NAMESPACE +NAME +DTYPE +SHAPE "
                                     "+VERSION +BYTES +NOTE\n"),
            ::testing::ContainsRegex("\n[0-9]+ +stored +- +a +float32 +\\(2, 3\\) +2 +24\n"),
            ::testing::ContainsRegex("\n[0-9]+ +updated +- +a +- +- +3 +- +in place by "
                                     "index_reduce, from version 2\n"),
            ::testing::ContainsRegex("\n[0-9]+ +deleted +- +idx +- +- +- +-\n"),
            HasSubstr("\n3 records: 1 stored, 1 deleted, 1 updated, 0 cancelled\n")))
      << run.stdout_text;

  // A tensor from the snapshot, and the last value a log records whole (noting the update).
  run = RunCli({"store-file", snapshot, "a", PathOf("a1.npy")});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  EXPECT_EQ(run.stdout_text,
            "wrote " + PathOf("a1.npy") + ": shape=(2, 3) dtype=float32, a at version 1\n");
  absl::StatusOr<Tensor> got = ReadNpy(PathOf("a1.npy"));
  ASSERT_TRUE(got.ok()) << got.status();
  ref::ExpectTensorsNear(*got, x);
  run = RunCli({"store-file", log, "a", PathOf("a2.npy")});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  EXPECT_THAT(run.stdout_text, HasSubstr("a at version 2\n"));
  EXPECT_THAT(run.stderr_text, HasSubstr("\"a\" was updated in place at offset "));

  // SIGTERM: the server writes a last snapshot on its way out, with the update applied.
  const int status = server->process->Terminate(kShutdownTimeout);
  ASSERT_TRUE(ExitedWith(status, 0)) << DescribeExit(status) << "\n"
                                     << server->process->stderr_text();
  std::string last;
  for (const auto& entry : std::filesystem::directory_iterator(store_dir)) {
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, "snapshot-") && absl::EndsWith(name, ".tosnap")) {
      last = std::max(last, entry.path().string());
    }
  }
  ASSERT_NE(last, "");
  EXPECT_NE(last, snapshot);
  run = RunCli({"store-file", last, "a", PathOf("a3.npy")});
  ASSERT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status) << "\n" << run.stderr_text;
  EXPECT_THAT(run.stdout_text, HasSubstr("a at version 3\n"));
  got = ReadNpy(PathOf("a3.npy"));
  ASSERT_TRUE(got.ok()) << got.status();
  // index_add_ of x's rows into themselves: 2x.
  ref::ExpectTensorsNear(*got, Float32Tensor({2, 3}, {0, 2, 4, 6, 8, 10}));
  run = RunCli({"store-file", last, "idx", PathOf("idx.npy")});
  EXPECT_TRUE(ExitedWith(run.status, 1)) << DescribeExit(run.status);
  EXPECT_THAT(run.stderr_text, AllOf(HasSubstr("error: NOT_FOUND: "), HasSubstr("\"idx\"")));
  run = RunCli({"store-file", kept, "a", PathOf("a4.npy"), "--namespace=token-1"});
  EXPECT_TRUE(ExitedWith(run.status, 1)) << DescribeExit(run.status);
  EXPECT_THAT(run.stderr_text, HasSubstr("without a namespace: leave out --namespace"));

  // A damaged file (a byte changed in a record with whole records after it): exit 1 with the
  // reader's message, after what could be read.
  const std::string damaged = PathOf("damaged.tosnap");
  std::filesystem::copy_file(kept, damaged);
  {
    std::fstream file(damaged, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(-60, std::ios::end);
    const char byte = static_cast<char>(file.get());
    file.seekp(-60, std::ios::end);
    file.put(static_cast<char>(byte ^ 0x55));
  }
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"store-file", damaged}, {"store-file", damaged, "a", PathOf("a5.npy")}}) {
    run = RunCli(args);
    EXPECT_TRUE(ExitedWith(run.status, 1)) << absl::StrJoin(args, " ");
    EXPECT_THAT(run.stderr_text, AllOf(::testing::StartsWith("error: DATA_LOSS: " + damaged +
                                                             " is damaged at offset "),
                                       Not(HasSubstr("usage:"))))
        << absl::StrJoin(args, " ");
  }

  // Files that cannot be read, or are no store files, are local problems: exit 2, no status code.
  for (const std::string& path : {PathOf("missing.tosnap"), x_path, store_dir}) {
    run = RunCli({"store-file", path});
    EXPECT_TRUE(ExitedWith(run.status, 2)) << path << ": " << DescribeExit(run.status);
    EXPECT_THAT(run.stderr_text, AllOf(::testing::StartsWith("error: "), HasSubstr(path),
                                       Not(HasSubstr("NOT_FOUND")), Not(HasSubstr("usage:"))))
        << path;
  }
  EXPECT_THAT(RunCli({"store-file", x_path}).stderr_text,
              HasSubstr("is not a tensorops store file"));
  // Bad command lines.
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"store-file"},
                                             {"store-file", kept, "a"},
                                             {"store-file", kept, "--namespace=token-1"},
                                             {"store-file", kept, "a", PathOf("a.npy"), "--axis=1"},
                                             {"snapshot", "now"}}) {
    run = RunCli(args);
    EXPECT_TRUE(ExitedWith(run.status, 2)) << absl::StrJoin(args, " ");
    EXPECT_THAT(run.stderr_text, AllOf(HasSubstr("error: "), HasSubstr("usage: tensorops-cli ")))
        << absl::StrJoin(args, " ");
  }
  run = RunCli({"help", "store-file"});
  EXPECT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status);
  EXPECT_THAT(run.stdout_text,
              AllOf(::testing::StartsWith(
                        "usage: tensorops-cli store-file FILE [NAME OUT.npy [--namespace=NS]]\n"),
                    HasSubstr("needs no server"), HasSubstr("\n  --namespace\n"),
                    Not(HasSubstr("--target"))));
  run = RunCli({"snapshot", "--help"});
  EXPECT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status);
  EXPECT_THAT(run.stdout_text, AllOf(HasSubstr("snapshot"), HasSubstr("\n  --target\n")));
}

TEST_F(CliTest, HelpListsCommandsAndFlags) {
  const CliResult run = RunCli({"--help"});
  EXPECT_TRUE(ExitedWith(run.status, 0)) << DescribeExit(run.status);
  EXPECT_THAT(
      run.stdout_text,
      AllOf(HasSubstr("gather"), HasSubstr("scatter"), HasSubstr("index_select"),
            HasSubstr("index_reduce"), HasSubstr("select_scatter"), HasSubstr("slice_scatter"),
            HasSubstr("diagonal_scatter"), HasSubstr("gather_nd"), HasSubstr("scatter_nd"),
            HasSubstr("masked_scatter"), HasSubstr("--reduce"), HasSubstr("--timeout"),
            HasSubstr("--select_index"), HasSubstr("--axes"), HasSubstr("--batch_dims"),
            HasSubstr("--shape"), HasSubstr("--mask"), HasSubstr("health"), HasSubstr("describe"),
            HasSubstr("put"), HasSubstr("--overwrite"), HasSubstr("@NAME"), HasSubstr("snapshot"),
            HasSubstr("store-file"), HasSubstr("--namespace")));
}

}  // namespace
}  // namespace tensorops
