// Tests of the generic RPCs: Run and RunStream for every op, and ServerInfo. A real Server runs
// in-process on a free loopback port and is called through the generated stub.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kernels/device.h"
#include "server/server.h"
#include "tensorops/v1/service.grpc.pb.h"
#include "tests/blocking_work.h"
#include "tests/service_test_util.h"

namespace tensorops {
namespace {

using ::tensorops::testing::BlockingWork;
using ::tensorops::testing::Connect;
using ::tensorops::testing::MakeMask;
using ::tensorops::testing::MakeTensor;
using ::tensorops::testing::StartServer;
using ::tensorops::testing::Values;
using ::tensorops::testing::WaitFor;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAreArray;

constexpr auto kCallTimeout = std::chrono::seconds(30);

// OpCase is one request of every op with its expected int64 result (and shape).
struct OpCase {
  std::string name;
  v1::OpRequest request;
  std::vector<int64_t> expected_shape;
  std::vector<int64_t> expected;
};

std::vector<OpCase> EveryOp() {
  std::vector<OpCase> cases;
  {
    OpCase c{.name = "gather", .expected_shape = {2, 2}, .expected = {1, 1, 4, 3}};
    v1::GatherRequest* r = c.request.mutable_gather();
    *r->mutable_input() = MakeTensor<int64_t>({2, 2}, {1, 2, 3, 4});
    *r->mutable_index() = MakeTensor<int64_t>({2, 2}, {0, 0, 1, 0});
    r->set_axis(1);
    cases.push_back(c);
  }
  {
    OpCase c{.name = "scatter", .expected_shape = {2, 2}, .expected = {6, 5, 0, 0}};
    v1::ScatterRequest* r = c.request.mutable_scatter();
    *r->mutable_input() = MakeTensor<int64_t>({2, 2}, {0, 0, 0, 0});
    *r->mutable_index() = MakeTensor<int64_t>({1, 2}, {1, 0});
    *r->mutable_src() = MakeTensor<int64_t>({1, 2}, {5, 6});
    r->set_axis(1);
    r->set_reduce(v1::REDUCTION_SUM);
    cases.push_back(c);
  }
  {
    OpCase c{.name = "index_select", .expected_shape = {2, 2}, .expected = {3, 4, 1, 2}};
    v1::IndexSelectRequest* r = c.request.mutable_index_select();
    *r->mutable_input() = MakeTensor<int64_t>({2, 2}, {1, 2, 3, 4});
    *r->mutable_index() = MakeTensor<int32_t>({2}, {1, 0});
    cases.push_back(c);
  }
  {
    OpCase c{.name = "index_reduce", .expected_shape = {2, 2}, .expected = {5, 7, 1, 1}};
    v1::IndexReduceRequest* r = c.request.mutable_index_reduce();
    *r->mutable_input() = MakeTensor<int64_t>({2, 2}, {1, 1, 1, 1});
    *r->mutable_index() = MakeTensor<int64_t>({2}, {0, 0});
    *r->mutable_src() = MakeTensor<int64_t>({2, 2}, {1, 2, 3, 4});
    r->set_reduce(v1::REDUCTION_SUM);
    cases.push_back(c);
  }
  {
    OpCase c{.name = "select_scatter", .expected_shape = {2, 2}, .expected = {0, 0, 7, 8}};
    v1::SelectScatterRequest* r = c.request.mutable_select_scatter();
    *r->mutable_input() = MakeTensor<int64_t>({2, 2}, {0, 0, 0, 0});
    *r->mutable_src() = MakeTensor<int64_t>({2}, {7, 8});
    r->set_index(-1);
    cases.push_back(c);
  }
  {
    OpCase c{.name = "slice_scatter", .expected_shape = {4}, .expected = {1, 0, 2, 0}};
    v1::SliceScatterRequest* r = c.request.mutable_slice_scatter();
    *r->mutable_input() = MakeTensor<int64_t>({4}, {0, 0, 0, 0});
    *r->mutable_src() = MakeTensor<int64_t>({2}, {1, 2});
    r->set_step(2);
    cases.push_back(c);
  }
  {
    OpCase c{.name = "diagonal_scatter", .expected_shape = {2, 2}, .expected = {1, 0, 0, 2}};
    v1::DiagonalScatterRequest* r = c.request.mutable_diagonal_scatter();
    *r->mutable_input() = MakeTensor<int64_t>({2, 2}, {0, 0, 0, 0});
    *r->mutable_src() = MakeTensor<int64_t>({2}, {1, 2});
    cases.push_back(c);
  }
  {
    OpCase c{.name = "gather_nd", .expected_shape = {1}, .expected = {3}};
    v1::GatherNdRequest* r = c.request.mutable_gather_nd();
    *r->mutable_input() = MakeTensor<int64_t>({2, 2}, {1, 2, 3, 4});
    *r->mutable_index() = MakeTensor<int64_t>({1, 2}, {1, 0});
    cases.push_back(c);
  }
  {
    OpCase c{.name = "scatter_nd", .expected_shape = {4}, .expected = {0, 9, 0, 10}};
    v1::ScatterNdRequest* r = c.request.mutable_scatter_nd();
    r->add_shape(4);
    *r->mutable_index() = MakeTensor<int64_t>({2, 1}, {1, 3});
    *r->mutable_src() = MakeTensor<int64_t>({2}, {9, 10});
    r->set_reduce(v1::REDUCTION_SUM);
    cases.push_back(c);
  }
  {
    OpCase c{.name = "masked_scatter", .expected_shape = {3}, .expected = {7, 2, 8}};
    v1::MaskedScatterRequest* r = c.request.mutable_masked_scatter();
    *r->mutable_input() = MakeTensor<int64_t>({3}, {1, 2, 3});
    *r->mutable_mask() = MakeMask({3}, {1, 0, 1});
    *r->mutable_src() = MakeTensor<int64_t>({3}, {7, 8, 9});
    cases.push_back(c);
  }
  return cases;
}

void ExpectResult(const v1::Tensor& result, const OpCase& op) {
  EXPECT_THAT(result.shape(), ElementsAreArray(op.expected_shape)) << op.name;
  EXPECT_THAT(Values<int64_t>(result), ElementsAreArray(op.expected)) << op.name;
}

// A gather whose index is out of range, and the message every path must give for it.
v1::OpRequest BadGather() {
  v1::OpRequest request;
  *request.mutable_gather()->mutable_input() = MakeTensor<int64_t>({2}, {1, 2});
  *request.mutable_gather()->mutable_index() = MakeTensor<int64_t>({1}, {9});
  return request;
}
constexpr char kBadGatherMessage[] =
    "gather: index[0] = 9 is out of range for axis 0 of input with size 2";

class GenericRpcTest : public ::testing::Test {
 protected:
  void SetUp() override { Start({}); }

  void Start(ServerOptions options) {
    server_ = StartServer(options);
    ASSERT_NE(server_, nullptr);
    stub_ = Connect(server_->port());
  }

  grpc::Status Run(const v1::OpRequest& request, v1::OpResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kCallTimeout);
    return stub_->Run(&context, request, response);
  }

  // StartWithTheOnlyWorkerBusy restarts the server with one worker and occupies it with `blocker`,
  // so that calls stay queued until the test releases it.
  void StartWithTheOnlyWorkerBusy(BlockingWork& blocker) {
    ServerOptions options;
    options.queue.max_concurrent_calls = 1;
    Start(options);
    ASSERT_TRUE(server_->scheduler().Enqueue(&blocker).ok());
    blocker.WaitUntilStarted();
  }

  // OpenStreamWithQueuedRequests opens a RunStream, sends the first `count` of `ops` and waits
  // until all of them wait in the scheduler's queue (the test keeps the worker busy).
  std::unique_ptr<grpc::ClientReaderWriter<v1::RunStreamRequest, v1::RunStreamResponse>>
  OpenStreamWithQueuedRequests(grpc::ClientContext& context, const std::vector<OpCase>& ops,
                               int count) {
    context.set_deadline(std::chrono::system_clock::now() + kCallTimeout);
    auto stream = stub_->RunStream(&context);
    for (int i = 0; i < count; ++i) {
      v1::RunStreamRequest request;
      request.set_request_id(i);
      *request.mutable_op() = ops[i].request;
      if (!stream->Write(request)) return nullptr;
    }
    if (!WaitFor([&] { return server_->scheduler().QueuedCount() == count; })) return nullptr;
    return stream;
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<v1::TensorOps::Stub> stub_;
};

TEST_F(GenericRpcTest, RunServesEveryOp) {
  for (const OpCase& op : EveryOp()) {
    v1::OpResponse response;
    const grpc::Status status = Run(op.request, &response);
    ASSERT_TRUE(status.ok()) << op.name << ": " << status.error_message();
    ExpectResult(response.result(), op);
  }
  // Each call is counted under its op, ran on the CPU, with every stage timed. A call is counted
  // when gRPC is done with it, which may be just after the client has its reply.
  for (const OpCase& op : EveryOp()) {
    std::vector<std::string> lines = {"tensorops_requests_total{code=\"OK\",device=\"cpu\",op=\"" +
                                      op.name + "\"} 1\n"};
    for (const char* stage : {"decode", "queue", "execute", "encode"}) {
      lines.push_back("tensorops_stage_duration_seconds_count{op=\"" + op.name + "\",stage=\"" +
                      stage + "\"} 1\n");
    }
    for (const std::string& line : lines) {
      EXPECT_TRUE(WaitFor([&] { return absl::StrContains(server_->metrics().Scrape(), line); }))
          << "no " << line;
    }
  }
}

TEST_F(GenericRpcTest, RunGivesTheOpsOwnErrors) {
  v1::OpResponse response;
  grpc::Status status = Run(BadGather(), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr(kBadGatherMessage));

  // The same message as the Gather RPC's.
  grpc::ClientContext context;
  v1::GatherResponse gather_response;
  const grpc::Status gather_status =
      stub_->Gather(&context, BadGather().gather(), &gather_response);
  EXPECT_EQ(gather_status.error_message(), status.error_message());

  status = Run(v1::OpRequest(), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("run: op is not set"));
}

TEST_F(GenericRpcTest, RunStreamAnswersEveryRequestOnceWithItsId) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kCallTimeout);
  std::unique_ptr<grpc::ClientReaderWriter<v1::RunStreamRequest, v1::RunStreamResponse>> stream =
      stub_->RunStream(&context);
  const std::vector<OpCase> ops = EveryOp();
  constexpr int kRounds = 20;
  constexpr uint64_t kBadId = 1000;
  // Requests 0..199 cycle through every op; the bad request is sent in the middle.
  std::map<uint64_t, const OpCase*> expected;
  for (int i = 0; i < kRounds * static_cast<int>(ops.size()); ++i) {
    v1::RunStreamRequest request;
    request.set_request_id(i);
    *request.mutable_op() = ops[i % ops.size()].request;
    ASSERT_TRUE(stream->Write(request));
    expected[i] = &ops[i % ops.size()];
    if (i == 57) {
      v1::RunStreamRequest bad;
      bad.set_request_id(kBadId);
      *bad.mutable_op() = BadGather();
      ASSERT_TRUE(stream->Write(bad));
    }
  }
  ASSERT_TRUE(stream->WritesDone());

  std::map<uint64_t, int> answers;
  v1::RunStreamResponse response;
  while (stream->Read(&response)) {
    ++answers[response.request_id()];
    if (response.request_id() == kBadId) {
      ASSERT_TRUE(response.has_error());
      EXPECT_EQ(response.error().code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
      EXPECT_THAT(response.error().message(), HasSubstr(kBadGatherMessage));
      continue;
    }
    auto it = expected.find(response.request_id());
    ASSERT_NE(it, expected.end()) << "unexpected id " << response.request_id();
    ASSERT_TRUE(response.has_result()) << it->second->name << ": " << response.error().message();
    ExpectResult(response.result(), *it->second);
  }
  const grpc::Status status = stream->Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(answers.size(), expected.size() + 1);
  for (const auto& [id, count] : answers) EXPECT_EQ(count, 1) << "id " << id;
}

TEST_F(GenericRpcTest, RunStreamWithOneRequestInFlightStillAnswersAll) {
  Start({.limits = {.max_stream_in_flight = 1}});
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kCallTimeout);
  auto stream = stub_->RunStream(&context);
  const std::vector<OpCase> ops = EveryOp();
  // The writer runs beside the reader, as a pipelining client would.
  std::thread writer([&] {
    for (size_t i = 0; i < ops.size(); ++i) {
      v1::RunStreamRequest request;
      request.set_request_id(i);
      *request.mutable_op() = ops[i].request;
      EXPECT_TRUE(stream->Write(request));
    }
    EXPECT_TRUE(stream->WritesDone());
  });
  std::vector<uint64_t> ids;
  v1::RunStreamResponse response;
  while (stream->Read(&response)) {
    ids.push_back(response.request_id());
    ASSERT_TRUE(response.has_result()) << response.error().message();
    ExpectResult(response.result(), ops[response.request_id()]);
  }
  writer.join();
  EXPECT_TRUE(stream->Finish().ok());
  // With one request in flight, responses come in request order.
  std::vector<uint64_t> in_order(ops.size());
  for (size_t i = 0; i < in_order.size(); ++i) in_order[i] = i;
  EXPECT_THAT(ids, ElementsAreArray(in_order));
}

TEST_F(GenericRpcTest, CancellingAStreamDropsItsQueuedRequests) {
  BlockingWork blocker;
  StartWithTheOnlyWorkerBusy(blocker);
  grpc::ClientContext context;
  const std::vector<OpCase> ops = EveryOp();
  auto stream = OpenStreamWithQueuedRequests(context, ops, 3);
  ASSERT_NE(stream, nullptr);
  context.TryCancel();
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::CANCELLED);
  // The server took them out of the queue without running them: the only worker is still busy.
  EXPECT_TRUE(WaitFor([&] { return server_->scheduler().QueuedCount() == 0; }));
  EXPECT_EQ(server_->scheduler().InFlightCount(), 1);
  blocker.Release();
}

TEST_F(GenericRpcTest, ShutdownAnswersWhatAStreamSentThenEndsIt) {
  BlockingWork blocker;
  StartWithTheOnlyWorkerBusy(blocker);
  grpc::ClientContext context;
  const std::vector<OpCase> ops = EveryOp();
  auto stream = OpenStreamWithQueuedRequests(context, ops, 2);
  ASSERT_NE(stream, nullptr);

  // A long grace: the stream must end because it was answered, not because the grace ran out.
  std::thread shutdown([&] { server_->Shutdown(absl::Seconds(60)); });
  // Once a new stream is ended at once, shutdown has begun: open streams are closing. (Before
  // that, the probe, which sends nothing, just waits out its short deadline.)
  std::unique_ptr<v1::TensorOps::Stub> late = Connect(server_->port());
  ASSERT_TRUE(WaitFor([&] {
    grpc::ClientContext probe_context;
    probe_context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(100));
    auto probe = late->RunStream(&probe_context);
    v1::RunStreamResponse unused;
    while (probe->Read(&unused)) {
    }
    return probe->Finish().error_code() == grpc::StatusCode::UNAVAILABLE;
  }));
  // While the stream drains, new op calls are refused; they would run after it otherwise.
  {
    grpc::ClientContext late_context;
    late_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    v1::OpResponse response;
    const grpc::Status refused = late->Run(&late_context, ops[0].request, &response);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAVAILABLE);
    EXPECT_THAT(refused.error_message(), HasSubstr("takes no new calls"));
  }
  blocker.Release();

  std::vector<uint64_t> ids;
  v1::RunStreamResponse response;
  while (stream->Read(&response)) {
    ASSERT_TRUE(response.has_result()) << response.error().message();
    ExpectResult(response.result(), ops[response.request_id()]);
    ids.push_back(response.request_id());
  }
  const grpc::Status status = stream->Finish();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_THAT(status.error_message(), HasSubstr("shutting down"));
  EXPECT_THAT(ids, UnorderedElementsAreArray({0u, 1u}));
  shutdown.join();
}

// MakeDifferentiable converts every `input` and `src` tensor of the op in `request` from the cases'
// int64 to float64, in place, and returns them by field name.
std::map<std::string, v1::Tensor*> MakeDifferentiable(v1::OpRequest& request) {
  std::map<std::string, v1::Tensor*> tensors;
  const google::protobuf::Reflection* reflection = request.GetReflection();
  const google::protobuf::FieldDescriptor* op_field =
      reflection->GetOneofFieldDescriptor(request, v1::OpRequest::descriptor()->oneof_decl(0));
  google::protobuf::Message* op = reflection->MutableMessage(&request, op_field);
  for (const char* name : {"input", "src"}) {
    const google::protobuf::FieldDescriptor* field = op->GetDescriptor()->FindFieldByName(name);
    if (field == nullptr || !op->GetReflection()->HasField(*op, field)) continue;
    auto* tensor = static_cast<v1::Tensor*>(op->GetReflection()->MutableMessage(op, field));
    std::vector<double> values;
    for (int64_t value : Values<int64_t>(*tensor)) values.push_back(static_cast<double>(value));
    tensor->set_dtype(v1::DATA_TYPE_FLOAT64);
    tensor->set_data(
        std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(double)));
    tensors[name] = tensor;
  }
  return tensors;
}

double ValueAt(const v1::Tensor& tensor, size_t k) {
  double value;
  std::memcpy(&value, tensor.data().data() + k * sizeof(double), sizeof(double));
  return value;
}

void SetValueAt(v1::Tensor& tensor, size_t k, double value) {
  std::memcpy(tensor.mutable_data()->data() + k * sizeof(double), &value, sizeof(double));
}

// Every op's Backward over the wire against central finite differences computed over the wire:
// the gradient of L = sum(op(input, src) * grad_output) with respect to each element.
TEST_F(GenericRpcTest, BackwardOfEveryOpMatchesFiniteDifferencesOverTheWire) {
  for (OpCase op : EveryOp()) {
    std::map<std::string, v1::Tensor*> tensors = MakeDifferentiable(op.request);
    ASSERT_FALSE(tensors.empty()) << op.name;
    v1::Tensor grad_output;
    grad_output.set_dtype(v1::DATA_TYPE_FLOAT64);
    for (int64_t size : op.expected_shape) grad_output.add_shape(size);
    std::vector<double> weights;
    for (size_t k = 0; k < op.expected.size(); ++k) weights.push_back(0.5 + 0.25 * k);
    grad_output.set_data(std::string(reinterpret_cast<const char*>(weights.data()),
                                     weights.size() * sizeof(double)));

    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + kCallTimeout);
    v1::BackwardRequest request;
    *request.mutable_op() = op.request;
    *request.mutable_grad_output() = grad_output;
    v1::BackwardResponse response;
    const grpc::Status status = stub_->Backward(&context, request, &response);
    ASSERT_TRUE(status.ok()) << op.name << ": " << status.error_message();
    ASSERT_EQ(response.gradients_size(), static_cast<int>(tensors.size())) << op.name;

    auto loss = [&]() {
      v1::OpResponse result;
      EXPECT_TRUE(Run(op.request, &result).ok()) << op.name;
      double total = 0;
      for (size_t k = 0; k < weights.size(); ++k) total += weights[k] * ValueAt(result.result(), k);
      return total;
    };
    constexpr double kStep = 1e-3;  // The ops are piecewise linear in their data: exact.
    for (auto& [name, tensor] : tensors) {
      const v1::Tensor& gradient = response.gradients().at(name);
      ASSERT_EQ(gradient.data().size(), tensor->data().size()) << op.name << " " << name;
      for (size_t k = 0; k < tensor->data().size() / sizeof(double); ++k) {
        const double original = ValueAt(*tensor, k);
        SetValueAt(*tensor, k, original + kStep);
        const double up = loss();
        SetValueAt(*tensor, k, original - kStep);
        const double down = loss();
        SetValueAt(*tensor, k, original);
        EXPECT_NEAR(ValueAt(gradient, k), (up - down) / (2 * kStep), 1e-9)
            << op.name << ": d/d " << name << "[" << k << "]";
      }
    }
  }
}

TEST_F(GenericRpcTest, ServerInfoDescribesTheServer) {
  ServerOptions options;
  options.limits = {
      .max_message_bytes = 1 << 20, .max_elements = 1000, .max_rank = 5, .max_stream_in_flight = 9};
  options.queue.max_concurrent_calls = 3;
  options.queue.max_queued_calls = 7;
  Start(options);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + kCallTimeout);
  v1::ServerInfoResponse info;
  ASSERT_TRUE(stub_->ServerInfo(&context, v1::ServerInfoRequest(), &info).ok());

  EXPECT_FALSE(info.version().empty());
  EXPECT_FALSE(info.git_revision().empty());
  EXPECT_FALSE(info.build().compiler().empty());
  const DeviceInventory inventory = QueryDevices();
  EXPECT_EQ(info.build().cuda(), inventory.cuda_built);
  ASSERT_GE(info.devices_size(), 1);
  EXPECT_EQ(info.devices(0).kind(), "cpu");
  EXPECT_EQ(info.devices(0).threads(), 2);  // StartServer's options.threads
  EXPECT_EQ(info.devices_size(), 1 + static_cast<int>(inventory.cuda_devices.size()));
  if (inventory.cuda_devices.empty()) EXPECT_FALSE(info.gpu_note().empty());

  EXPECT_EQ(info.limits().max_message_bytes(), 1 << 20);
  EXPECT_EQ(info.limits().max_elements(), 1000);
  EXPECT_EQ(info.limits().max_rank(), 5);
  EXPECT_EQ(info.limits().max_concurrent_calls(), 3);
  EXPECT_EQ(info.limits().max_queued_calls(), 7);
  EXPECT_EQ(info.limits().max_stream_in_flight(), 9);
  EXPECT_EQ(info.limits().inline_max_bytes(), options.queue.inline_max_bytes);

  EXPECT_THAT(info.ops(),
              UnorderedElementsAreArray({"Gather", "Scatter", "IndexSelect", "IndexReduce",
                                         "SelectScatter", "SliceScatter", "DiagonalScatter",
                                         "GatherNd", "ScatterNd", "MaskedScatter"}));
  EXPECT_EQ(info.dtypes_size(), 12);
  EXPECT_EQ(info.dtypes(0), v1::DATA_TYPE_BOOL);
  EXPECT_EQ(info.dtypes(11), v1::DATA_TYPE_COMPLEX128);
}

}  // namespace
}  // namespace tensorops
