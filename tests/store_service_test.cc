// Tests of the store RPCs (PutTensor, GetTensor, DeleteTensor, ListTensors, TensorInfo) and of
// stored tensors referenced by every op's tensor arguments, against a real Server in-process.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/cpp/client.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/reflection.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/client_unary_call.h"
#include "grpcpp/impl/rpc_method.h"
#include "gtest/gtest.h"
#include "proto/codec.h"
#include "proto/op_list.h"
#include "server/core/stored_operands.h"
#include "server/server.h"
#include "server/tensorops_v1/put_tensor_message.h"
#include "tests/device_runner.h"
#include "tests/earlier_store_files.h"
#include "tests/fake_device.h"
#include "tests/service_test_util.h"
#include "tests/wait_for.h"

namespace tensorops {
namespace {

using ::tensorops::testing::Connect;
using ::tensorops::testing::ExpectStatus;
using ::tensorops::testing::MakeMask;
using ::tensorops::testing::MakeTensor;
using ::tensorops::testing::StartServer;
using ::tensorops::testing::WaitFor;
using ::testing::HasSubstr;

std::unique_ptr<Client> ConnectClient(int port, ClientOptions options = {}) {
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Create(absl::StrFormat("127.0.0.1:%d", port), options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(*client) : nullptr;
}

// Floats returns `n` distinct float32 values.
std::vector<float> Floats(int64_t n) {
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = 0.5f * static_cast<float>(i) - 3.0f;
  return values;
}

std::string Bytes(const Tensor& tensor) {
  return std::string(static_cast<const char*>(tensor.data()), tensor.nbytes());
}

// Where the server under test keeps its stored tensors: every test runs with both.
enum class StorePlacement {
  kHost,
  // --store_device=cuda on a fake GPU (tests/fake_device.h): every stored tensor in memory the CPU
  // cannot touch, every call on it placed on the GPU and, the fake having no kernels, re-run on
  // the CPU from host copies of its operands.
  kFakeDevice,
  // --store_device=cuda on the GPU: the same tests with the stored tensors in its memory and the
  // calls on them run by its kernels. Skipped without a usable GPU.
  kCuda,
};

class StoreServiceTest : public ::testing::TestWithParam<StorePlacement> {
 protected:
  void SetUp() override {
    if (GetParam() == StorePlacement::kCuda) {
      testing::SkipUnlessAvailable(testing::TestDevice::kCuda);
      if (IsSkipped()) return;
    }
    Start(ServerOptions());
  }

  // Elements of the tensor StartWithChunkedDownloadsAndPutSlow puts: 4 MiB of float32.
  static constexpr int64_t kChunkedElements = int64_t{1} << 20;
  // StartWithChunkedDownloadsAndPutSlow restarts the server with --store_download_snapshot_bytes
  // under 4 MiB, so that a download reads the store chunk by chunk (64 KiB chunks in
  // StartSlowDownload, the server copying none of it ahead), and puts "slow", kChunkedElements
  // float32 `values`.
  void StartWithChunkedDownloadsAndPutSlow(std::vector<float>* values) {
    ServerOptions options;
    options.store.download_snapshot_bytes = (int64_t{4} << 20) - 1;
    Start(options);
    *values = Floats(kChunkedElements);
    ASSERT_TRUE(
        client_
            ->PutTensor("slow", TensorView(DataType::kFloat32, {kChunkedElements}, values->data()))
            .ok());
  }

  void Start(ServerOptions options) {
    client_.reset();
    server_.reset();
    if (GetParam() == StorePlacement::kFakeDevice) {
      options.gpu.executor_for_testing = &executor_;
      options.store.device = DeviceChoice::kCuda;
    }
    if (GetParam() == StorePlacement::kCuda) {
      absl::StatusOr<DeviceExecutor*> gpu = testing::SharedCudaExecutor();
      ASSERT_TRUE(gpu.ok()) << gpu.status();
      options.gpu.executor_for_testing = *gpu;
      options.store.device = DeviceChoice::kCuda;
    }
    server_ = StartServer(std::move(options));
    ASSERT_NE(server_, nullptr);
    client_ = ConnectClient(server_->port());
    stub_ = Connect(server_->port());
  }

  // The device ServerInfo and the metrics name for the store.
  static std::string StoreDevice() {
    switch (GetParam()) {
      case StorePlacement::kHost:
        return "cpu";
      case StorePlacement::kFakeDevice:
        return "fakegpu:0";
      case StorePlacement::kCuda:
        return "cuda:0";
    }
    return "";
  }

  testing::FakeDeviceMemory device_memory_;
  testing::StagingFakeExecutor executor_{&device_memory_};
  std::unique_ptr<Server> server_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<v1::TensorOps::Stub> stub_;
};

// chunk_bytes is capped at 4 MiB, past which chunks only slowed downloads down.
TEST_P(StoreServiceTest, DownloadChunksAreAtMostFourMebibytes) {
  constexpr int64_t kElements = int64_t{3} << 20;  // 12 MiB of float32
  const std::vector<float> values = Floats(kElements);
  ASSERT_TRUE(
      client_->PutTensor("big", TensorView(DataType::kFloat32, {kElements}, values.data())).ok());
  for (int64_t chunk_bytes : {int64_t{0}, int64_t{8} << 20, int64_t{64} << 20}) {
    SCOPED_TRACE(absl::StrCat("chunk_bytes ", chunk_bytes));
    grpc::ClientContext context;
    v1::GetTensorRequest request;
    request.set_name("big");
    request.set_chunk_bytes(chunk_bytes);
    std::unique_ptr<grpc::ClientReader<v1::GetTensorResponse>> reader =
        stub_->GetTensor(&context, request);
    v1::GetTensorResponse message;
    ASSERT_TRUE(reader->Read(&message));
    ASSERT_TRUE(message.has_info());
    std::vector<size_t> chunks;
    while (reader->Read(&message)) chunks.push_back(message.data().size());
    ASSERT_TRUE(reader->Finish().ok());
    EXPECT_THAT(chunks, ::testing::ElementsAre(4 << 20, 4 << 20, 4 << 20));
  }
}

TEST_P(StoreServiceTest, PutGetRoundTripsWithChunksOfAnySize) {
  const std::vector<float> values = Floats(1000);  // 4000 bytes
  const TensorView view(DataType::kFloat32, {10, 100}, values.data());
  int64_t version = 0;
  for (int64_t put_chunk :
       {int64_t{1}, int64_t{7}, int64_t{999}, int64_t{4000}, int64_t{1} << 20}) {
    SCOPED_TRACE(absl::StrCat("put chunk ", put_chunk));
    absl::StatusOr<v1::TensorInfo> info =
        client_->PutTensor("w/layer0", view, {.overwrite = true, .chunk_bytes = put_chunk});
    ASSERT_TRUE(info.ok()) << info.status();
    EXPECT_EQ(info->version(), ++version);
    EXPECT_EQ(info->bytes(), 4000);
    EXPECT_EQ(info->dtype(), v1::DATA_TYPE_FLOAT32);
    EXPECT_THAT(info->shape(), ::testing::ElementsAre(10, 100));
    for (int64_t get_chunk : {int64_t{0}, int64_t{1}, int64_t{13}, int64_t{4000}, int64_t{9999}}) {
      SCOPED_TRACE(absl::StrCat("get chunk ", get_chunk));
      absl::StatusOr<Tensor> got = client_->GetTensor("w/layer0", {.chunk_bytes = get_chunk});
      ASSERT_TRUE(got.ok()) << got.status();
      EXPECT_EQ(got->dtype(), DataType::kFloat32);
      EXPECT_EQ(got->shape(), Shape({10, 100}));
      EXPECT_EQ(Bytes(*got),
                std::string(reinterpret_cast<const char*>(values.data()), values.size() * 4));
    }
  }
  // A strided view is stored contiguous.
  const TensorView transposed(DataType::kFloat32, {100, 10}, {1, 100}, values.data());
  ASSERT_TRUE(client_->PutTensor("t", transposed, {.chunk_bytes = 33}).ok());
  absl::StatusOr<Tensor> got = client_->GetTensor("t");
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(Bytes(*got), Bytes(Tensor::FromView(transposed)));
}

TEST_P(StoreServiceTest, UploadIsVisibleOnlyAfterTheClientHalfCloses) {
  grpc::ClientContext context;
  v1::PutTensorResponse response;
  auto writer = stub_->PutTensor(&context, &response);
  v1::PutTensorRequest message;
  message.mutable_header()->set_name("late");
  message.mutable_header()->set_dtype(v1::DATA_TYPE_INT32);
  message.mutable_header()->add_shape(2);
  ASSERT_TRUE(writer->Write(message));
  const int32_t values[2] = {5, 6};
  message.set_data(std::string(reinterpret_cast<const char*>(values), 8));
  ASSERT_TRUE(writer->Write(message));
  // Every byte has arrived (once the server holds the upload's reservation), but the stream is
  // still open: nothing is visible.
  ASSERT_TRUE(WaitFor([&] { return server_->store().used_bytes() == 8; }));
  EXPECT_EQ(client_->TensorInfo("late").status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(writer->WritesDone());
  const grpc::Status status = writer->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.info().version(), 1);
  absl::StatusOr<v1::TensorInfo> info = client_->TensorInfo("late");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->bytes(), 8);
  EXPECT_GT(info->created_unix_nanos(), 0);
}

TEST_P(StoreServiceTest, CancelledOrIncompleteUploadLeavesNothing) {
  {
    grpc::ClientContext context;
    v1::PutTensorResponse response;
    auto writer = stub_->PutTensor(&context, &response);
    v1::PutTensorRequest message;
    message.mutable_header()->set_name("cancelled");
    message.mutable_header()->set_dtype(v1::DATA_TYPE_UINT8);
    message.mutable_header()->add_shape(100);
    ASSERT_TRUE(writer->Write(message));
    message.set_data(std::string(50, 'x'));
    ASSERT_TRUE(writer->Write(message));
    ASSERT_TRUE(WaitFor([&] { return server_->store().used_bytes() == 100; }));
    context.TryCancel();
    EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  EXPECT_TRUE(WaitFor([&] { return server_->store().used_bytes() == 0; }));
  EXPECT_EQ(server_->store().tensor_count(), 0);

  // Half-closed with bytes missing: INVALID_ARGUMENT, nothing stored.
  grpc::ClientContext context;
  v1::PutTensorResponse response;
  auto writer = stub_->PutTensor(&context, &response);
  v1::PutTensorRequest message;
  message.mutable_header()->set_name("short");
  message.mutable_header()->set_dtype(v1::DATA_TYPE_UINT8);
  message.mutable_header()->add_shape(100);
  ASSERT_TRUE(writer->Write(message));
  message.set_data(std::string(50, 'x'));
  ASSERT_TRUE(writer->Write(message));
  writer->WritesDone();
  EXPECT_EQ(writer->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(server_->store().tensor_count(), 0);
  EXPECT_TRUE(WaitFor([&] { return server_->store().used_bytes() == 0; }));

  // Data before any header, and more data than the header declares.
  const std::vector<float> values = Floats(4);
  const TensorView view(DataType::kFloat32, {4}, values.data());
  {
    grpc::ClientContext data_first;
    auto first = stub_->PutTensor(&data_first, &response);
    message.set_data("abc");
    first->Write(message);
    first->WritesDone();
    ExpectStatus(first->Finish(), grpc::StatusCode::INVALID_ARGUMENT,
                 "the first message must be the header");
  }
  grpc::ClientContext too_much;
  auto extra = stub_->PutTensor(&too_much, &response);
  message.mutable_header()->set_name("extra");
  message.mutable_header()->set_dtype(v1::DATA_TYPE_UINT8);
  message.mutable_header()->clear_shape();
  message.mutable_header()->add_shape(2);
  extra->Write(message);
  message.set_data("abc");
  extra->Write(message);
  extra->WritesDone();
  ExpectStatus(extra->Finish(), grpc::StatusCode::INVALID_ARGUMENT, "is 2 bytes");
  EXPECT_EQ(server_->store().tensor_count(), 0);
}

TEST_P(StoreServiceTest, OverwriteAndExpectedVersionRules) {
  const std::vector<float> values = Floats(4);
  const TensorView view(DataType::kFloat32, {4}, values.data());
  ASSERT_EQ(client_->PutTensor("w", view)->version(), 1);
  absl::StatusOr<v1::TensorInfo> again = client_->PutTensor("w", view);
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(again.status().message(), HasSubstr("exists at version 1; pass overwrite"));
  ASSERT_EQ(client_->PutTensor("w", view, {.overwrite = true})->version(), 2);
  absl::StatusOr<v1::TensorInfo> stale = client_->PutTensor("w", view, {.expected_version = 1});
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stale.status().message(), HasSubstr("version 2, not expected_version=1"));
  ASSERT_EQ(client_->PutTensor("w", view, {.expected_version = 2})->version(), 3);
  EXPECT_EQ(client_->PutTensor("new", view, {.expected_version = 1}).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // GetTensor at a version.
  EXPECT_TRUE(client_->GetTensor("w", {.version = 3}).ok());
  absl::StatusOr<Tensor> old = client_->GetTensor("w", {.version = 2});
  EXPECT_EQ(old.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(old.status().message(), HasSubstr("version 3"));
}

TEST_P(StoreServiceTest, DeleteListAndInfo) {
  const std::vector<float> values = Floats(6);
  ASSERT_TRUE(client_->PutTensor("b", TensorView(DataType::kFloat32, {2, 3}, values.data())).ok());
  ASSERT_TRUE(client_->PutTensor("a", TensorView(DataType::kFloat32, {6}, values.data())).ok());
  absl::StatusOr<std::vector<v1::TensorInfo>> list = client_->ListTensors();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].name(), "a");
  EXPECT_EQ((*list)[1].name(), "b");
  EXPECT_EQ((*list)[1].device(), StoreDevice());
  absl::StatusOr<v1::TensorInfo> info = client_->TensorInfo("b");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_THAT(info->shape(), ::testing::ElementsAre(2, 3));
  EXPECT_EQ(info->bytes(), 24);
  EXPECT_EQ(info->version(), 1);

  EXPECT_EQ(client_->DeleteTensor("b", /*expected_version=*/2).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(client_->DeleteTensor("b", /*expected_version=*/1).ok());
  absl::Status missing = client_->DeleteTensor("b");
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(), HasSubstr("\"b\""));
  EXPECT_EQ(client_->TensorInfo("b").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->GetTensor("b").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(client_->ListTensors()->size(), 1u);
  // A bad name is INVALID_ARGUMENT.
  EXPECT_EQ(client_->PutTensor("/abs", TensorView(DataType::kFloat32, {6}, values.data()))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_P(StoreServiceTest, UploadBeyondTheLimitIsResourceExhaustedNamingTheFlag) {
  ServerOptions options;
  options.store.memory_bytes = 1000;
  Start(options);
  const std::vector<float> values = Floats(1000);
  absl::StatusOr<v1::TensorInfo> put =
      client_->PutTensor("big", TensorView(DataType::kFloat32, {1000}, values.data()));
  EXPECT_EQ(put.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(put.status().message(), HasSubstr("--store_memory_bytes"));
  EXPECT_TRUE(
      client_->PutTensor("small", TensorView(DataType::kFloat32, {100}, values.data())).ok());
}

// A PutTensor message over --max_message_bytes (a data chunk or a header) is refused naming the
// flag and the message's size, and the upload leaves nothing; so is any other store RPC's request.
// The raw stub has no send limit of its own (a client's own limit may refuse it before sending).
TEST_P(StoreServiceTest, MessagesOverMaxMessageBytesAreRefusedNamingTheFlag) {
  constexpr int64_t kLimit = 64 << 10;
  ServerOptions options;
  options.limits.max_message_bytes = kLimit;
  Start(options);
  {
    grpc::ClientContext context;
    v1::PutTensorResponse response;
    auto writer = stub_->PutTensor(&context, &response);
    v1::PutTensorRequest message;
    message.mutable_header()->set_name("chunky");
    message.mutable_header()->set_dtype(v1::DATA_TYPE_UINT8);
    message.mutable_header()->add_shape(200 << 10);
    ASSERT_TRUE(writer->Write(message));
    message.set_data(std::string(100 << 10, 'x'));
    const size_t chunk_bytes = message.ByteSizeLong();
    writer->Write(message);
    writer->WritesDone();
    const grpc::Status status = writer->Finish();
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_EQ(status.error_message(),
              absl::StrFormat("request of %d bytes (tensorops.v1.PutTensorRequest) is larger than "
                              "--max_message_bytes=%d: send the tensor's data in smaller chunks",
                              chunk_bytes, kLimit));
  }
  EXPECT_TRUE(WaitFor([&] { return server_->store().used_bytes() == 0; }));
  EXPECT_EQ(server_->store().tensor_count(), 0);

  // A chunk within the limit passes.
  const std::vector<float> values = Floats(1000);
  EXPECT_TRUE(
      client_->PutTensor("small", TensorView(DataType::kFloat32, {1000}, values.data())).ok());

  // Unary (TensorInfo) and server-streaming (GetTensor) store RPCs, with a name past the limit.
  const std::string long_name(kLimit, 'n');
  {
    v1::TensorInfoRequest request;
    request.set_name(long_name);
    v1::TensorInfoResponse response;
    grpc::ClientContext context;
    ExpectStatus(stub_->TensorInfo(&context, request, &response),
                 grpc::StatusCode::RESOURCE_EXHAUSTED,
                 absl::StrFormat("request of %d bytes (tensorops.v1.TensorInfoRequest) is larger "
                                 "than --max_message_bytes=%d",
                                 request.ByteSizeLong(), kLimit));
  }
  {
    v1::GetTensorRequest request;
    request.set_name(long_name);
    grpc::ClientContext context;
    auto reader = stub_->GetTensor(&context, request);
    v1::GetTensorResponse response;
    EXPECT_FALSE(reader->Read(&response));
    ExpectStatus(reader->Finish(), grpc::StatusCode::RESOURCE_EXHAUSTED,
                 absl::StrFormat("request of %d bytes (tensorops.v1.GetTensorRequest) is larger "
                                 "than --max_message_bytes=%d",
                                 request.ByteSizeLong(), kLimit));
  }
}

// The limit holds for whole responses. A result whose bytes are exactly the limit has a message
// a few bytes over it, which gRPC would not send (ending a stream with it); a backward of a stored
// input has a gradient as large as the stored tensor, however small the request. Both are
// refused naming the flag, and a stream goes on after them.
TEST_P(StoreServiceTest, ResponsesOverMaxMessageBytesAreRefusedNamingTheFlagAndStreamsGoOn) {
  constexpr int64_t kLimit = 64 << 10;
  constexpr int64_t kColumns = kLimit / 4 / 4;  // four float32 rows are the limit
  ServerOptions options;
  options.limits.max_message_bytes = kLimit;
  Start(options);
  const std::vector<float> table = Floats(8 * kColumns);
  ASSERT_TRUE(client_
                  ->PutTensor("table", TensorView(DataType::kFloat32, {8, kColumns}, table.data()),
                              {.chunk_bytes = 16 << 10})
                  .ok());
  const auto rows = [](std::vector<int64_t> indices) {
    v1::OpRequest request;
    request.mutable_index_select()->mutable_input()->mutable_stored()->set_name("table");
    *request.mutable_index_select()->mutable_index() =
        MakeTensor<int64_t>({static_cast<int64_t>(indices.size())}, indices);
    return request;
  };
  const v1::OpRequest four_rows = rows({0, 1, 2, 3});
  const v1::OpRequest one_row = rows({5});
  absl::StatusOr<Tensor> refused = client_->Run(four_rows);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_THAT(refused.status().message(),
              AllOf(HasSubstr("index_select: the response would be "),
                    HasSubstr(absl::StrFormat("more than the server's limit of %d "
                                              "(--max_message_bytes)",
                                              kLimit))));
  absl::StatusOr<std::unique_ptr<OpStream>> stream = client_->OpenStream();
  ASSERT_TRUE(stream.ok());
  ASSERT_TRUE((*stream)->Send(1, four_rows));
  ASSERT_TRUE((*stream)->Send(2, one_row));
  (*stream)->CloseSend();
  std::map<uint64_t, absl::Status> outcomes;
  while (std::optional<StreamResult> answer = (*stream)->Receive()) {
    outcomes[answer->request_id] = answer->result.status();
  }
  EXPECT_TRUE((*stream)->Finish().ok());
  ASSERT_EQ(outcomes.size(), 2u);
  EXPECT_EQ(outcomes[1].code(), absl::StatusCode::kResourceExhausted) << outcomes[1];
  EXPECT_THAT(outcomes[1].message(), HasSubstr("(--max_message_bytes)"));
  EXPECT_TRUE(outcomes[2].ok()) << outcomes[2];

  // A returned result that changes the store must leave room for its response's framing, or the
  // change would be made and then reported as failed: it is refused before anything changes.
  const std::vector<float> row = Floats(kLimit / 4 - 512);
  ASSERT_TRUE(client_
                  ->PutTensor("row", TensorView(DataType::kFloat32, {kLimit / 4 - 512}, row.data()),
                              {.chunk_bytes = 16 << 10})
                  .ok());
  v1::OpRequest add_one;
  v1::ScatterRequest* scatter = add_one.mutable_scatter();
  scatter->mutable_input()->mutable_stored()->set_name("row");
  *scatter->mutable_index() = MakeTensor<int64_t>({1}, {0});
  scatter->mutable_value()->set_float_value(1.0);
  scatter->set_reduce(v1::REDUCTION_SUM);
  scatter->mutable_result_options()->set_in_place(true);
  scatter->mutable_result_options()->set_return_data(true);
  absl::StatusOr<StoredResult> returned = client_->RunStored(add_one);
  EXPECT_EQ(returned.status().code(), absl::StatusCode::kResourceExhausted) << returned.status();
  EXPECT_THAT(returned.status().message(),
              HasSubstr("with return_data, a result that changes the store may take the limit "
                        "less 4096 bytes"));
  EXPECT_EQ(server_->store().Info("", "row")->version, 1);
  scatter->mutable_result_options()->set_return_data(false);
  absl::StatusOr<StoredResult> updated = client_->RunStored(add_one);
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ(updated->version, 2);

  // The gradient of the 128 KiB stored table, from a request of a few bytes.
  v1::OpRequest gather;
  gather.mutable_gather()->mutable_input()->mutable_stored()->set_name("table");
  *gather.mutable_gather()->mutable_index() = MakeTensor<int64_t>({1, 1}, {0});
  const std::vector<float> grad_output = {1.f};
  absl::StatusOr<std::map<std::string, Tensor>> gradients =
      client_->Backward(gather, TensorView(DataType::kFloat32, {1, 1}, grad_output.data()));
  EXPECT_EQ(gradients.status().code(), absl::StatusCode::kResourceExhausted) << gradients.status();
  EXPECT_THAT(gradients.status().message(),
              HasSubstr(absl::StrFormat("gather_backward: the gradients would take up to %d bytes",
                                        8 * kColumns * 4)));
}

TEST_P(StoreServiceTest, UploadOverTheRankLimitIsRefused) {
  ServerOptions options;
  options.limits.max_rank = 2;
  Start(options);
  const std::vector<float> values = Floats(8);
  absl::StatusOr<v1::TensorInfo> put =
      client_->PutTensor("r3", TensorView(DataType::kFloat32, {2, 2, 2}, values.data()));
  EXPECT_EQ(put.status().code(), absl::StatusCode::kResourceExhausted) << put.status();
  EXPECT_THAT(put.status().message(), HasSubstr("put_tensor"));
}

// OneRequestOfEachOp is a small valid request of every op, its tensor arguments inline; scatter's
// input is large enough (4800 bytes) that the inline call takes it as its result.
std::vector<v1::OpRequest> OneRequestOfEachOp() {
  std::vector<v1::OpRequest> requests;
  auto add = [&](auto fill) { fill(&requests.emplace_back()); };
  add([](v1::OpRequest* r) {
    auto* op = r->mutable_gather();
    *op->mutable_input() = MakeTensor<float>({2, 3}, Floats(6));
    *op->mutable_index() = MakeTensor<int64_t>({2, 2}, {0, 2, 1, 0});
    op->set_axis(1);
  });
  add([](v1::OpRequest* r) {
    auto* op = r->mutable_scatter();
    *op->mutable_input() = MakeTensor<float>({2, 600}, Floats(1200));
    *op->mutable_index() = MakeTensor<int64_t>({1, 2}, {5, 7});
    *op->mutable_src() = MakeTensor<float>({1, 2}, {100.f, 200.f});
    op->set_axis(1);
  });
  add([](v1::OpRequest* r) {
    auto* op = r->mutable_index_select();
    *op->mutable_input() = MakeTensor<float>({3, 2}, Floats(6));
    *op->mutable_index() = MakeTensor<int64_t>({2}, {2, 0});
  });
  add([](v1::OpRequest* r) {
    auto* op = r->mutable_index_reduce();
    *op->mutable_input() = MakeTensor<float>({3, 2}, Floats(6));
    *op->mutable_index() = MakeTensor<int64_t>({2}, {2, 0});
    *op->mutable_src() = MakeTensor<float>({2, 2}, {1.f, 2.f, 3.f, 4.f});
    op->set_reduce(v1::REDUCTION_SUM);
  });
  add([](v1::OpRequest* r) {
    auto* op = r->mutable_select_scatter();
    *op->mutable_input() = MakeTensor<float>({2, 3}, Floats(6));
    *op->mutable_src() = MakeTensor<float>({3}, {7.f, 8.f, 9.f});
    op->set_index(1);
  });
  add([](v1::OpRequest* r) {
    auto* op = r->mutable_slice_scatter();
    *op->mutable_input() = MakeTensor<float>({4, 2}, Floats(8));
    *op->mutable_src() = MakeTensor<float>({2, 2}, {1.f, 2.f, 3.f, 4.f});
    op->set_start(1);
    op->set_end(3);
  });
  add([](v1::OpRequest* r) {
    auto* op = r->mutable_diagonal_scatter();
    *op->mutable_input() = MakeTensor<float>({3, 3}, Floats(9));
    *op->mutable_src() = MakeTensor<float>({3}, {1.f, 2.f, 3.f});
  });
  add([](v1::OpRequest* r) {
    auto* op = r->mutable_gather_nd();
    *op->mutable_input() = MakeTensor<float>({2, 3}, Floats(6));
    *op->mutable_index() = MakeTensor<int64_t>({2, 2}, {0, 1, 1, 2});
  });
  add([](v1::OpRequest* r) {
    auto* op = r->mutable_scatter_nd();
    *op->mutable_input() = MakeTensor<float>({4}, Floats(4));
    *op->mutable_index() = MakeTensor<int64_t>({2, 1}, {1, 3});
    *op->mutable_src() = MakeTensor<float>({2}, {10.f, 20.f});
  });
  add([](v1::OpRequest* r) {
    auto* op = r->mutable_masked_scatter();
    *op->mutable_input() = MakeTensor<float>({2, 2}, Floats(4));
    *op->mutable_mask() = MakeMask({2, 2}, {1, 0, 0, 1});
    *op->mutable_src() = MakeTensor<float>({4}, {1.f, 2.f, 3.f, 4.f});
  });
  return requests;
}

// TensorFields calls `visit` on every set v1::Tensor field of `message` with its name.
void ForEachTensorArgument(google::protobuf::Message* message,
                           const std::function<void(const std::string&, v1::Tensor*)>& visit) {
  const google::protobuf::Reflection* reflection = message->GetReflection();
  const google::protobuf::Descriptor* descriptor = message->GetDescriptor();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = descriptor->field(i);
    if (field->message_type() != v1::Tensor::descriptor() || field->is_repeated() ||
        !reflection->HasField(*message, field)) {
      continue;
    }
    visit(field->name(), static_cast<v1::Tensor*>(reflection->MutableMessage(message, field)));
  }
}

// OpMessage is the op request inside `request`'s oneof.
google::protobuf::Message* OpMessage(v1::OpRequest* request) {
  const google::protobuf::FieldDescriptor* field =
      request->GetReflection()->GetOneofFieldDescriptor(
          *request, v1::OpRequest::descriptor()->FindOneofByName("op"));
  return request->GetReflection()->MutableMessage(request, field);
}

// Typed runs `request` through its op's own RPC and returns the result's bytes, or the status.
absl::StatusOr<v1::Tensor> Typed(grpc::Channel* channel, const v1::OpRequest& request) {
  return ops::VisitOp(
      request,
      [&]<typename Op>(Op, const typename Op::Request& op_request) -> absl::StatusOr<v1::Tensor> {
        grpc::ClientContext context;
        typename Op::Response response;
        // RpcMethod keeps the pointer: the path must outlive it.
        const std::string path = absl::StrFormat("/tensorops.v1.TensorOps/%s", ops::Rpc<Op>());
        const grpc::internal::RpcMethod method(path.c_str(), grpc::internal::RpcMethod::NORMAL_RPC);
        const grpc::Status status =
            grpc::internal::BlockingUnaryCall(channel, method, &context, op_request, &response);
        if (!status.ok()) {
          return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                              status.error_message());
        }
        return response.result();
      },
      []() -> absl::StatusOr<v1::Tensor> { return absl::InternalError("no op"); });
}

TEST_P(StoreServiceTest, EveryOpGivesTheSameBytesWithItsArgumentsByReference) {
  auto channel = grpc::CreateChannel(absl::StrFormat("127.0.0.1:%d", server_->port()),
                                     grpc::InsecureChannelCredentials());
  int references = 0;
  for (v1::OpRequest request : OneRequestOfEachOp()) {
    const std::string op(ops::NameOfCase(request.op_case()));
    SCOPED_TRACE(op);
    absl::StatusOr<Tensor> inline_result = client_->Run(request);
    ASSERT_TRUE(inline_result.ok()) << inline_result.status();
    absl::StatusOr<v1::Tensor> inline_typed = Typed(channel.get(), request);
    ASSERT_TRUE(inline_typed.ok()) << inline_typed.status();

    // Every tensor argument by reference at once, then each alone.
    std::vector<std::string> arguments;
    v1::OpRequest all = request;
    ForEachTensorArgument(OpMessage(&all), [&](const std::string& argument, v1::Tensor* tensor) {
      arguments.push_back(argument);
      const std::string name = absl::StrCat(op, "/", argument);
      absl::StatusOr<TensorView> view = wire::DecodeTensor(*tensor, op, argument, {});
      ASSERT_TRUE(view.ok()) << view.status();
      absl::StatusOr<v1::TensorInfo> info = client_->PutTensor(name, *view, {.chunk_bytes = 5});
      ASSERT_TRUE(info.ok()) << info.status();
      tensor->Clear();
      tensor->mutable_stored()->set_name(name);
      tensor->mutable_stored()->set_version(info->version());
      ++references;
    });
    std::vector<v1::OpRequest> variants = {all};
    for (const std::string& argument : arguments) {
      v1::OpRequest one = request;
      ForEachTensorArgument(OpMessage(&one), [&](const std::string& name, v1::Tensor* tensor) {
        if (name != argument) return;
        tensor->Clear();
        tensor->mutable_stored()->set_name(absl::StrCat(op, "/", argument));
      });
      variants.push_back(one);
    }
    for (const v1::OpRequest& variant : variants) {
      absl::StatusOr<Tensor> by_reference = client_->Run(variant);
      ASSERT_TRUE(by_reference.ok()) << by_reference.status();
      EXPECT_EQ(Bytes(*by_reference), Bytes(*inline_result));
      EXPECT_EQ(by_reference->shape(), inline_result->shape());
      absl::StatusOr<v1::Tensor> typed = Typed(channel.get(), variant);
      ASSERT_TRUE(typed.ok()) << typed.status();
      EXPECT_EQ(typed->data(), inline_typed->data());
    }
    // The stored inputs are unchanged by the ops that update their input.
    ForEachTensorArgument(
        OpMessage(&request), [&](const std::string& argument, v1::Tensor* tensor) {
          absl::StatusOr<Tensor> stored = client_->GetTensor(absl::StrCat(op, "/", argument));
          ASSERT_TRUE(stored.ok()) << stored.status();
          EXPECT_EQ(Bytes(*stored), tensor->data()) << argument;
        });
  }
  EXPECT_GE(references, 22);
}

TEST_P(StoreServiceTest, MissingAndStaleReferencesNameTheArgument) {
  v1::OpRequest request = OneRequestOfEachOp()[0];  // gather
  v1::GatherRequest* gather = request.mutable_gather();
  gather->mutable_input()->Clear();
  gather->mutable_input()->mutable_stored()->set_name("w");
  absl::StatusOr<Tensor> missing = client_->Run(request);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(),
              HasSubstr("gather: input refers to stored tensor \"w\", which does not exist"));

  const std::vector<float> values = Floats(6);
  ASSERT_TRUE(client_->PutTensor("w", TensorView(DataType::kFloat32, {2, 3}, values.data())).ok());
  ASSERT_TRUE(client_
                  ->PutTensor("w", TensorView(DataType::kFloat32, {2, 3}, values.data()),
                              {.overwrite = true})
                  .ok());
  gather->mutable_input()->mutable_stored()->set_version(1);
  absl::StatusOr<Tensor> stale = client_->Run(request);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stale.status().message(), HasSubstr("gather: input:"));
  EXPECT_THAT(stale.status().message(), HasSubstr("version 2"));
  gather->mutable_input()->mutable_stored()->set_version(2);
  EXPECT_TRUE(client_->Run(request).ok());

  // A reference may say the stored tensor's dtype and shape (a result returned as a reference
  // is passed on as it is), but not another's, and carries no data.
  gather->mutable_input()->set_dtype(v1::DATA_TYPE_FLOAT32);
  gather->mutable_input()->add_shape(2);
  gather->mutable_input()->add_shape(3);
  EXPECT_TRUE(client_->Run(request).ok());
  gather->mutable_input()->set_dtype(v1::DATA_TYPE_INT32);
  absl::StatusOr<Tensor> other_dtype = client_->Run(request);
  EXPECT_EQ(other_dtype.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(other_dtype.status().message(),
              HasSubstr("gather: input refers to stored tensor \"w\" (float32 [2, 3]) but says it "
                        "is int32 [2, 3]"));
  // Only a shape, another one: named as a shape.
  gather->mutable_input()->set_dtype(v1::DATA_TYPE_UNSPECIFIED);
  gather->mutable_input()->clear_shape();
  gather->mutable_input()->add_shape(7);
  absl::StatusOr<Tensor> other_shape = client_->Run(request);
  EXPECT_EQ(other_shape.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(other_shape.status().message(),
              HasSubstr("(float32 [2, 3]) but says it is shape [7]; a reference's dtype"));
  gather->mutable_input()->clear_shape();
  gather->mutable_input()->add_shape(2);
  gather->mutable_input()->add_shape(3);
  gather->mutable_input()->set_dtype(v1::DATA_TYPE_FLOAT32);
  gather->mutable_input()->set_data(std::string(24, '\0'));
  absl::StatusOr<Tensor> both = client_->Run(request);
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(both.status().message(),
              HasSubstr("gather: input refers to stored tensor \"w\" and also carries 24 data "
                        "bytes"));
}

TEST_P(StoreServiceTest, BackwardReadsStoredTensors) {
  v1::OpRequest request = OneRequestOfEachOp()[0];  // gather
  absl::StatusOr<Tensor> result = client_->Run(request);
  ASSERT_TRUE(result.ok());
  absl::StatusOr<std::map<std::string, Tensor>> inline_grads =
      client_->Backward(request, result->view());
  ASSERT_TRUE(inline_grads.ok()) << inline_grads.status();
  absl::StatusOr<TensorView> input =
      wire::DecodeTensor(request.gather().input(), "gather", "input", {});
  ASSERT_TRUE(client_->PutTensor("x", *input).ok());
  request.mutable_gather()->mutable_input()->Clear();
  request.mutable_gather()->mutable_input()->mutable_stored()->set_name("x");
  absl::StatusOr<std::map<std::string, Tensor>> grads = client_->Backward(request, result->view());
  ASSERT_TRUE(grads.ok()) << grads.status();
  ASSERT_EQ(grads->size(), inline_grads->size());
  EXPECT_EQ(Bytes(grads->at("input")), Bytes(inline_grads->at("input")));
}

TEST_P(StoreServiceTest, RunStreamReadsStoredTensors) {
  v1::OpRequest request = OneRequestOfEachOp()[0];  // gather
  absl::StatusOr<Tensor> expected = client_->Run(request);
  ASSERT_TRUE(expected.ok());
  absl::StatusOr<TensorView> input =
      wire::DecodeTensor(request.gather().input(), "gather", "input", {});
  ASSERT_TRUE(client_->PutTensor("x", *input).ok());
  request.mutable_gather()->mutable_input()->Clear();
  request.mutable_gather()->mutable_input()->mutable_stored()->set_name("x");
  absl::StatusOr<std::unique_ptr<OpStream>> stream = client_->OpenStream();
  ASSERT_TRUE(stream.ok());
  ASSERT_TRUE((*stream)->Send(1, request));
  (*stream)->CloseSend();
  std::optional<StreamResult> answer = (*stream)->Receive();
  ASSERT_TRUE(answer.has_value());
  ASSERT_TRUE(answer->result.ok()) << answer->result.status();
  EXPECT_EQ(Bytes(*answer->result), Bytes(*expected));
  EXPECT_TRUE((*stream)->Finish().ok());
}

// Calls waiting for a tensor an update holds are bounded and counted: each holds its request's
// bytes against --max_memory_bytes, the pool takes no more of them than --max_queued_calls (16
// at least: its threads), and a shutdown lets those that arrived before it finish within the
// grace.
TEST_P(StoreServiceTest, CallsWaitingForAHeldTensorAreBoundedCountedAndFinishInAShutdown) {
  if (GetParam() != StorePlacement::kHost) GTEST_SKIP() << "holds the tensor from the CPU";
  ServerOptions options;
  // The released calls then all fit in the scheduler's queue too.
  options.queue.max_queued_calls = 16;
  options.limits.max_memory_bytes = int64_t{256} << 20;
  options.shutdown.grace = absl::Seconds(20);
  Start(options);
  const std::vector<float> values = Floats(64);
  ASSERT_TRUE(client_->PutTensor("x", TensorView(DataType::kFloat32, {64}, values.data())).ok());
  v1::OpRequest request;
  request.mutable_index_select()->mutable_input()->mutable_stored()->set_name("x");
  *request.mutable_index_select()->mutable_index() = MakeTensor<int64_t>({2}, {3, 1});
  absl::StatusOr<Tensor> expected = client_->Run(request);
  ASSERT_TRUE(expected.ok()) << expected.status();

  absl::StatusOr<TensorStore::UpdateHandle> update = server_->store().Update("", "x");
  ASSERT_TRUE(update.ok()) << update.status();
  constexpr int kWaiting = 16;
  std::vector<absl::StatusOr<Tensor>> answers;
  for (int i = 0; i < kWaiting; ++i) answers.emplace_back(absl::UnknownError("no answer"));
  std::vector<std::thread> callers;
  for (int i = 0; i < kWaiting; ++i) {
    callers.emplace_back([&, i] { answers[i] = client_->Run(request); });
  }
  ASSERT_TRUE(WaitFor([&] { return server_->blocking_pool().tasks() == kWaiting; }));
  EXPECT_EQ(server_->memory().calls(), kWaiting);
  EXPECT_GE(server_->memory().call_bytes(),
            kWaiting * static_cast<int64_t>(request.ByteSizeLong()));
  // The pool is full: the next call is refused at once, naming the flag.
  absl::StatusOr<Tensor> refused = client_->Run(request);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_THAT(refused.status().message(),
              HasSubstr("16 calls are waiting for stored tensors that other calls hold, the most "
                        "--max_queued_calls allows"));

  // A shutdown begins; the update commits; the waiting calls, received before it, finish.
  std::thread shutdown([&] { server_->Shutdown(); });
  absl::SleepFor(absl::Milliseconds(100));
  ASSERT_TRUE(update->Commit().ok());
  for (std::thread& caller : callers) caller.join();
  shutdown.join();
  for (int i = 0; i < kWaiting; ++i) {
    ASSERT_TRUE(answers[i].ok()) << i << ": " << answers[i].status();
    EXPECT_EQ(Bytes(*answers[i]), Bytes(*expected)) << i;
  }
}

// A call on a stored tensor is prepared on gRPC's thread only when its tensors are free; one that
// finds the tensor held by an update waits for it on the blocking pool, and reads the value the
// update commits: through Run and through RunStream.
TEST_P(StoreServiceTest, ACallOnATensorAnUpdateHoldsWaitsForTheUpdateAndReadsItsValue) {
  if (GetParam() != StorePlacement::kHost) GTEST_SKIP() << "writes the held tensor from the CPU";
  v1::OpRequest request = OneRequestOfEachOp()[0];  // gather
  absl::StatusOr<TensorView> input =
      wire::DecodeTensor(request.gather().input(), "gather", "input", {});
  ASSERT_TRUE(input.ok()) << input.status();
  ASSERT_TRUE(client_->PutTensor("x", *input).ok());
  // What the gather gives once the update has zeroed the tensor.
  v1::OpRequest zeroed = request;
  std::string& zero_bytes = *zeroed.mutable_gather()->mutable_input()->mutable_data();
  std::fill(zero_bytes.begin(), zero_bytes.end(), '\0');
  absl::StatusOr<Tensor> expected = client_->Run(zeroed);
  ASSERT_TRUE(expected.ok()) << expected.status();
  request.mutable_gather()->mutable_input()->Clear();
  request.mutable_gather()->mutable_input()->mutable_stored()->set_name("x");

  absl::StatusOr<TensorStore::UpdateHandle> update = server_->store().Update("", "x");
  ASSERT_TRUE(update.ok()) << update.status();
  std::atomic<bool> ran = false;
  absl::StatusOr<Tensor> unary = absl::UnknownError("no answer yet");
  std::thread unary_caller([&] {
    unary = client_->Run(request);
    ran = true;
  });
  absl::StatusOr<std::unique_ptr<OpStream>> stream = client_->OpenStream();
  ASSERT_TRUE(stream.ok()) << stream.status();
  ASSERT_TRUE((*stream)->Send(1, request));
  std::atomic<bool> streamed = false;
  std::optional<StreamResult> answer;
  std::thread stream_reader([&] {
    answer = (*stream)->Receive();
    streamed = true;
  });
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(ran.load());
  EXPECT_FALSE(streamed.load());
  const MutableTensorView held = update->view();
  std::memset(held.data(), 0, static_cast<size_t>(held.numel() * ItemSize(held.dtype())));
  ASSERT_TRUE(update->Commit().ok());
  unary_caller.join();
  stream_reader.join();
  ASSERT_TRUE(unary.ok()) << unary.status();
  EXPECT_EQ(Bytes(*unary), Bytes(*expected));
  ASSERT_TRUE(answer.has_value());
  ASSERT_TRUE(answer->result.ok()) << answer->result.status();
  EXPECT_EQ(Bytes(*answer->result), Bytes(*expected));
  (*stream)->CloseSend();
  EXPECT_TRUE((*stream)->Finish().ok());
}

TEST_P(StoreServiceTest, StoreCallsAreCountedInTheMetrics) {
  const std::vector<float> values = Floats(4);
  ASSERT_TRUE(client_->PutTensor("m", TensorView(DataType::kFloat32, {4}, values.data())).ok());
  ASSERT_TRUE(client_->GetTensor("m").ok());
  ASSERT_TRUE(client_->ListTensors().ok());
  EXPECT_EQ(client_->TensorInfo("none").status().code(), absl::StatusCode::kNotFound);
  const std::string scrape = server_->metrics().Scrape();
  EXPECT_THAT(scrape, HasSubstr(R"(code="OK",device="none",op="put_tensor")"));
  EXPECT_THAT(scrape, HasSubstr(R"(code="OK",device="none",op="get_tensor")"));
  EXPECT_THAT(scrape, HasSubstr(R"(code="OK",device="none",op="list_tensors")"));
  EXPECT_THAT(scrape, HasSubstr(R"(code="NOT_FOUND",device="none",op="tensor_info")"));
}

// ResultOptionsOf is the result_options of the op inside `request`.
v1::ResultOptions* ResultOptionsOf(v1::OpRequest* request) {
  google::protobuf::Message* op = OpMessage(request);
  return static_cast<v1::ResultOptions*>(op->GetReflection()->MutableMessage(
      op, op->GetDescriptor()->FindFieldByName("result_options")));
}

// InputOf is the `input` tensor of the op inside `request`.
v1::Tensor* InputOf(v1::OpRequest* request) {
  google::protobuf::Message* op = OpMessage(request);
  return static_cast<v1::Tensor*>(
      op->GetReflection()->MutableMessage(op, op->GetDescriptor()->FindFieldByName("input")));
}

// RawRun sends `request` through Run and returns the response's result as it came: a stored or
// in-place result is a reference, which Client::Run would not decode.
absl::StatusOr<v1::Tensor> RawRun(v1::TensorOps::Stub* stub, const v1::OpRequest& request) {
  grpc::ClientContext context;
  v1::OpResponse response;
  const grpc::Status status = stub->Run(&context, request, &response);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }
  return response.result();
}

// kInPlaceOps are the ops whose result is their input updated.
bool UpdatesItsInput(std::string_view op) {
  return op == "scatter" || op == "index_reduce" || op == "select_scatter" ||
         op == "slice_scatter" || op == "diagonal_scatter" || op == "scatter_nd" ||
         op == "masked_scatter";
}

TEST_P(StoreServiceTest, InPlaceGivesTheOutOfPlaceResultForEveryOpThatUpdatesItsInput) {
  int in_place_ops = 0;
  for (v1::OpRequest request : OneRequestOfEachOp()) {
    const std::string op(ops::NameOfCase(request.op_case()));
    SCOPED_TRACE(op);
    absl::StatusOr<Tensor> expected = client_->Run(request);
    ASSERT_TRUE(expected.ok()) << expected.status();
    const std::string name = absl::StrCat("in_place/", op);
    absl::StatusOr<TensorView> input =
        wire::DecodeTensor(*InputOf(&request), op, "input", wire::DecodeLimits{});
    ASSERT_TRUE(input.ok()) << input.status();
    ASSERT_TRUE(client_->PutTensor(name, *input).ok());
    v1::OpRequest in_place = request;
    InputOf(&in_place)->Clear();
    InputOf(&in_place)->mutable_stored()->set_name(name);
    ResultOptionsOf(&in_place)->set_in_place(true);
    absl::StatusOr<v1::Tensor> answer = RawRun(stub_.get(), in_place);
    if (!UpdatesItsInput(op)) {
      ASSERT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(answer.status().message(),
                  HasSubstr(absl::StrCat(op, ": result_options.in_place = true, but ", op,
                                         " does not update its input")));
      EXPECT_THAT(answer.status().message(),
                  HasSubstr("(in place is for scatter, index_reduce, select_scatter, "
                            "slice_scatter, diagonal_scatter, scatter_nd, masked_scatter)"));
      continue;
    }
    ++in_place_ops;
    ASSERT_TRUE(answer.ok()) << answer.status();
    // A reference to the new version, without the bytes.
    EXPECT_EQ(answer->stored().name(), name);
    EXPECT_EQ(answer->stored().version(), 2);
    EXPECT_TRUE(answer->data().empty());
    EXPECT_EQ(std::vector<int64_t>(answer->shape().begin(), answer->shape().end()),
              std::vector<int64_t>(expected->shape().begin(), expected->shape().end()));
    absl::StatusOr<Tensor> stored = client_->GetTensor(name);
    ASSERT_TRUE(stored.ok()) << stored.status();
    EXPECT_EQ(Bytes(*stored), Bytes(*expected));

    // The answer, a reference, may be passed on as an argument as it is.
    v1::OpRequest reread = request;
    *InputOf(&reread) = *answer;
    absl::StatusOr<Tensor> twice = client_->Run(reread);
    ASSERT_TRUE(twice.ok()) << twice.status();
  }
  EXPECT_EQ(in_place_ops, 7);
}

// An in-place update of a tensor a reader holds waits for the reader (on the blocking pool, not
// gRPC's thread) and then applies once.
TEST_P(StoreServiceTest, AnInPlaceUpdateOfATensorAReaderHoldsWaitsForTheReader) {
  const std::vector<float> zeros(8, 0.0f);
  ASSERT_TRUE(client_->PutTensor("acc", TensorView(DataType::kFloat32, {8}, zeros.data())).ok());
  v1::OpRequest push;
  v1::IndexReduceRequest* reduce = push.mutable_index_reduce();
  reduce->mutable_input()->mutable_stored()->set_name("acc");
  *reduce->mutable_index() = MakeTensor<int64_t>({2}, {1, 5});
  *reduce->mutable_src() = MakeTensor<float>({2}, {2.5f, -1.0f});
  reduce->set_reduce(v1::REDUCTION_SUM);
  reduce->mutable_result_options()->set_in_place(true);

  absl::StatusOr<TensorStore::ReadHandle> read = server_->store().Read("", "acc");
  ASSERT_TRUE(read.ok()) << read.status();
  std::atomic<bool> pushed = false;
  absl::StatusOr<v1::Tensor> updated = absl::UnknownError("no answer yet");
  std::thread pusher([&] {
    updated = RawRun(stub_.get(), push);
    pushed = true;
  });
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(pushed.load());
  { TensorStore::ReadHandle released = *std::move(read); }
  pusher.join();
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ(updated->stored().version(), 2);
  absl::StatusOr<Tensor> value = client_->GetTensor("acc");
  ASSERT_TRUE(value.ok()) << value.status();
  const float* data = static_cast<const float*>(value->data());
  EXPECT_EQ(std::vector<float>(data, data + 8),
            (std::vector<float>{0, 2.5f, 0, 0, 0, -1.0f, 0, 0}));
}

TEST_P(StoreServiceTest, InPlaceReturnsItsBytesWhenAskedAndChecksTheVersion) {
  v1::OpRequest request = OneRequestOfEachOp()[3];  // index_reduce, SUM
  ASSERT_EQ(request.op_case(), v1::OpRequest::kIndexReduce);
  absl::StatusOr<TensorView> input =
      wire::DecodeTensor(request.index_reduce().input(), "index_reduce", "input", {});
  ASSERT_TRUE(input.ok());
  ASSERT_TRUE(client_->PutTensor("acc", *input).ok());
  absl::StatusOr<Tensor> once = client_->Run(request);
  ASSERT_TRUE(once.ok());
  v1::OpRequest in_place = request;
  InputOf(&in_place)->Clear();
  InputOf(&in_place)->mutable_stored()->set_name("acc");
  InputOf(&in_place)->mutable_stored()->set_version(1);
  ResultOptionsOf(&in_place)->set_in_place(true);
  ResultOptionsOf(&in_place)->set_return_data(true);
  absl::StatusOr<v1::Tensor> answer = RawRun(stub_.get(), in_place);
  ASSERT_TRUE(answer.ok()) << answer.status();
  EXPECT_EQ(answer->data(), Bytes(*once));
  EXPECT_EQ(answer->stored().version(), 2);
  // The same request again expects version 1, which is gone.
  absl::StatusOr<v1::Tensor> stale = RawRun(stub_.get(), in_place);
  EXPECT_EQ(stale.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(stale.status().message(), HasSubstr("index_reduce: input:"));
  EXPECT_THAT(stale.status().message(), HasSubstr("version 2"));
}

TEST_P(StoreServiceTest, ARetriedUpdateWithItsIdAppliesOnce) {
  const std::vector<float> zeros(8, 0.0f);
  ASSERT_TRUE(client_->PutTensor("counts", TensorView(DataType::kFloat32, {8}, zeros.data())).ok());
  v1::OpRequest request;
  v1::ScatterRequest* scatter = request.mutable_scatter();
  scatter->mutable_input()->mutable_stored()->set_name("counts");
  *scatter->mutable_index() = MakeTensor<int64_t>({4}, {1, 1, 5, 1});
  *scatter->mutable_src() = MakeTensor<float>({4}, {1.f, 1.f, 1.f, 1.f});
  scatter->set_reduce(v1::REDUCTION_SUM);
  scatter->mutable_result_options()->set_in_place(true);
  scatter->mutable_result_options()->set_update_id("push-0001");
  absl::StatusOr<v1::Tensor> first = RawRun(stub_.get(), request);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->stored().version(), 2);
  // The retry, as a client sends it when the first answer was lost: the same bytes.
  for (int attempt = 0; attempt < 3; ++attempt) {
    absl::StatusOr<v1::Tensor> retry = RawRun(stub_.get(), request);
    ASSERT_TRUE(retry.ok()) << retry.status();
    EXPECT_EQ(retry->stored().name(), "counts");
    EXPECT_EQ(retry->stored().version(), 2);
    EXPECT_EQ(retry->shape_size(), 1);
  }
  absl::StatusOr<Tensor> counts = client_->GetTensor("counts");
  ASSERT_TRUE(counts.ok());
  const float* values = static_cast<const float*>(counts->data());
  EXPECT_EQ(std::vector<float>(values, values + 8), (std::vector<float>{0, 3, 0, 0, 0, 1, 0, 0}));
  absl::StatusOr<v1::TensorInfo> info = client_->TensorInfo("counts");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->version(), 2);
  // With return_data, the retry returns the version's bytes while the tensor is still at it...
  scatter->mutable_result_options()->set_return_data(true);
  absl::StatusOr<v1::Tensor> with_data = RawRun(stub_.get(), request);
  ASSERT_TRUE(with_data.ok()) << with_data.status();
  EXPECT_EQ(with_data->data(), Bytes(*counts));
  // ...and FAILED_PRECONDITION once it has moved on (not ABORTED, which clients retry).
  scatter->mutable_result_options()->set_update_id("push-0002");
  scatter->mutable_result_options()->set_return_data(false);
  ASSERT_TRUE(RawRun(stub_.get(), request).ok());
  scatter->mutable_result_options()->set_update_id("push-0001");
  scatter->mutable_result_options()->set_return_data(true);
  absl::StatusOr<v1::Tensor> gone = RawRun(stub_.get(), request);
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(gone.status().message(), HasSubstr("update \"push-0001\" was already applied"));
}

TEST_P(StoreServiceTest, AFailingInPlaceUpdateChangesNothing) {
  const std::vector<float> values = Floats(8);
  ASSERT_TRUE(client_->PutTensor("t", TensorView(DataType::kFloat32, {8}, values.data())).ok());
  absl::StatusOr<Tensor> before = client_->GetTensor("t");
  ASSERT_TRUE(before.ok());
  // An index out of range after several good ones: the kernel would have written those first.
  v1::OpRequest scatter;
  scatter.mutable_scatter()->mutable_input()->mutable_stored()->set_name("t");
  *scatter.mutable_scatter()->mutable_index() = MakeTensor<int64_t>({4}, {0, 1, 2, 8});
  *scatter.mutable_scatter()->mutable_src() = MakeTensor<float>({4}, {9.f, 9.f, 9.f, 9.f});
  scatter.mutable_scatter()->mutable_result_options()->set_in_place(true);
  absl::StatusOr<v1::Tensor> bad_index = RawRun(stub_.get(), scatter);
  EXPECT_EQ(bad_index.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad_index.status().message(),
              HasSubstr("scatter: index[3] = 8 is out of range for axis 0 of input with size 8"));
  // A mask with more true positions than src has elements, the last ones past src's end.
  v1::OpRequest masked;
  masked.mutable_masked_scatter()->mutable_input()->mutable_stored()->set_name("t");
  *masked.mutable_masked_scatter()->mutable_mask() = MakeMask({8}, {1, 1, 1, 1, 1, 1, 1, 1});
  *masked.mutable_masked_scatter()->mutable_src() = MakeTensor<float>({3}, {9.f, 9.f, 9.f});
  masked.mutable_masked_scatter()->mutable_result_options()->set_in_place(true);
  absl::StatusOr<v1::Tensor> short_src = RawRun(stub_.get(), masked);
  EXPECT_EQ(short_src.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(short_src.status().message(),
              HasSubstr("masked_scatter: src has 3 elements but mask has 8 true positions"));
  absl::StatusOr<Tensor> after = client_->GetTensor("t");
  ASSERT_TRUE(after.ok());
  EXPECT_EQ(Bytes(*after), Bytes(*before));
  absl::StatusOr<v1::TensorInfo> info = client_->TensorInfo("t");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->version(), 1);
}

TEST_P(StoreServiceTest, ResultOptionsAreValidated) {
  const std::vector<float> values = Floats(4);
  ASSERT_TRUE(client_->PutTensor("v", TensorView(DataType::kFloat32, {4}, values.data())).ok());
  struct Case {
    std::function<void(v1::ScatterRequest*)> change;
    absl::StatusCode code;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](v1::ScatterRequest* r) { r->mutable_result_options()->set_in_place(true); },
       absl::StatusCode::kInvalidArgument,
       "scatter: result_options.in_place = true, but input is not a stored tensor"},
      {[](v1::ScatterRequest* r) {
         r->mutable_input()->Clear();
         r->mutable_input()->mutable_stored()->set_name("v");
         r->mutable_result_options()->set_in_place(true);
         r->mutable_result_options()->set_store_as("w");
       },
       absl::StatusCode::kInvalidArgument, "in_place = true and store_as = \"w\" are exclusive"},
      {[](v1::ScatterRequest* r) { r->mutable_result_options()->set_overwrite(true); },
       absl::StatusCode::kInvalidArgument, "result_options.overwrite is set without store_as"},
      {[](v1::ScatterRequest* r) { r->mutable_result_options()->set_update_id("x"); },
       absl::StatusCode::kInvalidArgument,
       "result_options.update_id is set, but the call changes no stored tensor"},
      {[](v1::ScatterRequest* r) {
         r->mutable_result_options()->set_store_as("w");
         r->mutable_result_options()->set_update_id(std::string(129, 'u'));
       },
       absl::StatusCode::kInvalidArgument, "update_id has 129 bytes (at most 128)"},
      {[](v1::ScatterRequest* r) { r->mutable_result_options()->set_store_as("/abs"); },
       absl::StatusCode::kInvalidArgument, "scatter: result_options.store_as: "},
      {[](v1::ScatterRequest* r) {
         r->mutable_input()->Clear();
         r->mutable_input()->mutable_stored()->set_name("v");
         r->mutable_src()->Clear();
         r->mutable_src()->mutable_stored()->set_name("v");
         r->mutable_result_options()->set_in_place(true);
       },
       absl::StatusCode::kInvalidArgument,
       "scatter: input, src all refer to stored tensor \"v\", which this call updates in place"},
      {[](v1::ScatterRequest* r) {
         r->mutable_input()->Clear();
         r->mutable_input()->mutable_stored()->set_name("v");
         r->mutable_input()->mutable_stored()->set_version(1);
         r->mutable_src()->Clear();
         r->mutable_src()->mutable_stored()->set_name("v");
         r->mutable_src()->mutable_stored()->set_version(2);
       },
       absl::StatusCode::kInvalidArgument,
       "input refers to stored tensor \"v\" at version 1, and src at version 2"},
      {[](v1::ScatterRequest* r) {
         r->mutable_input()->Clear();
         r->mutable_input()->mutable_stored()->set_name("v");
         r->mutable_result_options()->set_in_place(true);
         *r->mutable_index() = MakeTensor<int64_t>({2}, {0, 1});
         *r->mutable_src() = MakeTensor<float>({2}, {1.f, 2.f});
         r->set_broadcast(true);
         *r->mutable_index() = MakeTensor<int64_t>({1}, {0});
         *r->mutable_src() = MakeTensor<float>({1}, {1.f});
       },
       absl::StatusCode::kOk, ""},
  };
  for (const Case& c : cases) {
    v1::OpRequest request;
    v1::ScatterRequest* scatter = request.mutable_scatter();
    *scatter->mutable_input() = MakeTensor<float>({4}, Floats(4));
    *scatter->mutable_index() = MakeTensor<int64_t>({2}, {0, 1});
    *scatter->mutable_src() = MakeTensor<float>({2}, {1.f, 2.f});
    c.change(scatter);
    absl::StatusOr<v1::Tensor> answer = RawRun(stub_.get(), request);
    EXPECT_EQ(answer.status().code(), c.code) << c.message << ": " << answer.status();
    if (!c.message.empty()) EXPECT_THAT(answer.status().message(), HasSubstr(c.message));
  }
  // masked_scatter whose mask broadcasts the input to a larger shape cannot run in place.
  v1::OpRequest masked;
  masked.mutable_masked_scatter()->mutable_input()->mutable_stored()->set_name("v");
  *masked.mutable_masked_scatter()->mutable_mask() = MakeMask({2, 4}, {1, 0, 0, 0, 0, 0, 0, 1});
  *masked.mutable_masked_scatter()->mutable_src() = MakeTensor<float>({2}, {1.f, 2.f});
  masked.mutable_masked_scatter()->mutable_result_options()->set_in_place(true);
  absl::StatusOr<v1::Tensor> larger = RawRun(stub_.get(), masked);
  EXPECT_EQ(larger.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(larger.status().message(),
              HasSubstr("masked_scatter: result_options.in_place = true, but the result "
                        "(float32 [2, 4]) is not the shape of input (float32 [4])"));
  // Backward stores nothing.
  v1::BackwardRequest backward;
  *backward.mutable_op() = OneRequestOfEachOp()[0];
  backward.mutable_op()->mutable_gather()->mutable_result_options()->set_store_as("g");
  *backward.mutable_grad_output() = MakeTensor<float>({2, 2}, {1.f, 1.f, 1.f, 1.f});
  grpc::ClientContext context;
  v1::BackwardResponse response;
  ExpectStatus(stub_->Backward(&context, backward, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "op.gather.result_options is set; a backward returns its gradients");
}

TEST_P(StoreServiceTest, StoreAsKeepsTheResultUnderAName) {
  v1::OpRequest request = OneRequestOfEachOp()[0];  // gather
  absl::StatusOr<Tensor> expected = client_->Run(request);
  ASSERT_TRUE(expected.ok());
  ResultOptionsOf(&request)->set_store_as("rows");
  absl::StatusOr<v1::Tensor> stored = RawRun(stub_.get(), request);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_EQ(stored->stored().name(), "rows");
  EXPECT_EQ(stored->stored().version(), 1);
  EXPECT_EQ(stored->dtype(), v1::DATA_TYPE_FLOAT32);
  EXPECT_EQ(std::vector<int64_t>(stored->shape().begin(), stored->shape().end()),
            (std::vector<int64_t>{2, 2}));
  EXPECT_TRUE(stored->data().empty());
  absl::StatusOr<Tensor> value = client_->GetTensor("rows");
  ASSERT_TRUE(value.ok());
  EXPECT_EQ(Bytes(*value), Bytes(*expected));
  // The name exists now: replacing it needs overwrite or its version.
  absl::StatusOr<v1::Tensor> exists = RawRun(stub_.get(), request);
  EXPECT_EQ(exists.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(exists.status().message(),
              HasSubstr("gather: result_options.store_as: tensor \"rows\" exists at version 1"));
  ResultOptionsOf(&request)->set_expected_version(1);
  ResultOptionsOf(&request)->set_return_data(true);
  absl::StatusOr<v1::Tensor> replaced = RawRun(stub_.get(), request);
  ASSERT_TRUE(replaced.ok()) << replaced.status();
  EXPECT_EQ(replaced->stored().version(), 2);
  EXPECT_EQ(replaced->data(), Bytes(*expected));
  // A store_as retried with its update id stores once.
  ResultOptionsOf(&request)->clear_expected_version();
  ResultOptionsOf(&request)->set_return_data(false);
  ResultOptionsOf(&request)->set_store_as("once");
  ResultOptionsOf(&request)->set_update_id("store-once");
  for (int attempt = 0; attempt < 2; ++attempt) {
    absl::StatusOr<v1::Tensor> answer = RawRun(stub_.get(), request);
    ASSERT_TRUE(answer.ok()) << answer.status();
    EXPECT_EQ(answer->stored().version(), 1);
  }
  // Results stored through Run, RunStream and the op's own RPC alike.
  absl::StatusOr<v1::Tensor> typed_store = [&] {
    v1::OpRequest typed = OneRequestOfEachOp()[0];
    ResultOptionsOf(&typed)->set_store_as("typed");
    auto channel = grpc::CreateChannel(absl::StrFormat("127.0.0.1:%d", server_->port()),
                                       grpc::InsecureChannelCredentials());
    return Typed(channel.get(), typed);
  }();
  ASSERT_TRUE(typed_store.ok()) << typed_store.status();
  EXPECT_EQ(typed_store->stored().name(), "typed");
  absl::StatusOr<Tensor> typed_value = client_->GetTensor("typed");
  ASSERT_TRUE(typed_value.ok());
  EXPECT_EQ(Bytes(*typed_value), Bytes(*expected));
}

// The journal's record of an in-place update carries every other stored argument inline: an
// overwrite of the index may be journaled before the update that read the old one, and replay
// must not read the new one. Without other stored arguments the record is the request itself.
TEST(JournalCallTest, CarriesEveryStoredArgumentButTheUpdatedOneInline) {
  TensorStore store(1 << 20);
  const std::vector<float> table = {0.f, 1.f, 2.f, 3.f};
  const std::vector<int64_t> rows = {1, 3};
  ASSERT_TRUE(store.Put("", "t", TensorView(DataType::kFloat32, {4}, table.data())).ok());
  ASSERT_TRUE(store.Put("", "i", TensorView(DataType::kInt64, {2}, rows.data())).ok());
  v1::ScatterRequest request;
  request.mutable_input()->mutable_stored()->set_name("t");
  request.mutable_index()->mutable_stored()->set_name("i");
  *request.mutable_src() = MakeTensor<float>({2}, {5.f, 6.f});
  request.mutable_result_options()->set_in_place(true);
  for (bool index_stored : {true, false}) {
    SCOPED_TRACE(index_stored ? "index stored" : "index inline");
    if (!index_stored) *request.mutable_index() = MakeTensor<int64_t>({2}, rows);
    absl::StatusOr<std::shared_ptr<StoredOperands>> operands = StoredOperands::Acquire(
        "scatter", request, {.store = &store, .ns = ""}, {.tensor = &request.input()});
    ASSERT_TRUE(operands.ok()) << operands.status();
    ASSERT_TRUE((*operands)->MirrorOnHost(/*include_update=*/false).ok());
    absl::StatusOr<std::string> call = (*operands)->JournalCall(v1::OpRequest::kScatter, request);
    ASSERT_TRUE(call.ok()) << call.status();
    v1::OpRequest parsed;
    ASSERT_TRUE(parsed.ParseFromString(*call));
    ASSERT_TRUE(parsed.has_scatter());
    EXPECT_EQ(parsed.scatter().input().stored().name(), "t");
    EXPECT_FALSE(parsed.scatter().index().has_stored());
    EXPECT_EQ(parsed.scatter().index().data(),
              std::string(reinterpret_cast<const char*>(rows.data()), rows.size() * 8));
    EXPECT_EQ(parsed.scatter().index().dtype(), v1::DATA_TYPE_INT64);
    EXPECT_EQ(parsed.scatter().src().data(), request.src().data());
    if (!index_stored) EXPECT_EQ(parsed.scatter().SerializeAsString(), request.SerializeAsString());
  }
}

// StoredState is every stored tensor's name, version and bytes.
std::map<std::string, std::pair<int64_t, std::string>> StoredState(Client& client) {
  std::map<std::string, std::pair<int64_t, std::string>> state;
  absl::StatusOr<std::vector<v1::TensorInfo>> list = client.ListTensors();
  EXPECT_TRUE(list.ok()) << list.status();
  for (const v1::TensorInfo& info : list.value_or(std::vector<v1::TensorInfo>())) {
    absl::StatusOr<Tensor> value = client.GetTensor(info.name());
    EXPECT_TRUE(value.ok()) << value.status();
    if (value.ok()) state[info.name()] = {info.version(), Bytes(*value)};
  }
  return state;
}

// With --store_dir every in-place update is journaled as its call and replayed at recovery on
// the CPU: the recovered bytes must be the ones the calls produced wherever they ran (on a GPU
// a float SUM with duplicate indices runs deterministically for that), also when an operand is
// another stored tensor, overwritten afterwards.
TEST_P(StoreServiceTest, ARecoveredStoreHoldsTheBytesItsInPlaceUpdatesMade) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/store_service_durable_",
                                       static_cast<int>(GetParam()), "_", getpid());
  std::filesystem::remove_all(dir);
  ServerOptions options;
  options.store.dir = dir;
  options.store.sync = StoreSync::kAlways;
  Start(options);
  for (v1::OpRequest request : OneRequestOfEachOp()) {
    const std::string op(ops::NameOfCase(request.op_case()));
    if (!UpdatesItsInput(op)) continue;
    SCOPED_TRACE(op);
    const std::string name = absl::StrCat("durable/", op);
    absl::StatusOr<TensorView> input =
        wire::DecodeTensor(*InputOf(&request), op, "input", wire::DecodeLimits{});
    ASSERT_TRUE(input.ok()) << input.status();
    ASSERT_TRUE(client_->PutTensor(name, *input).ok());
    InputOf(&request)->Clear();
    InputOf(&request)->mutable_stored()->set_name(name);
    ResultOptionsOf(&request)->set_in_place(true);
    for (int i = 0; i < 2; ++i) ASSERT_TRUE(RawRun(stub_.get(), request).ok());
  }
  // A float SUM whose rounding depends on the order of 4096 duplicate-heavy updates.
  constexpr int64_t kRows = 8;
  constexpr int64_t kUpdates = 4096;
  std::vector<float> table(kRows * 16, 0.0f);
  ASSERT_TRUE(
      client_->PutTensor("durable/table", TensorView(DataType::kFloat32, {kRows, 16}, table.data()))
          .ok());
  std::vector<int64_t> rows(kUpdates * 16);
  std::vector<float> updates(kUpdates * 16);
  for (size_t i = 0; i < rows.size(); ++i) {
    rows[i] = static_cast<int64_t>((i * 2654435761u) % kRows);
    updates[i] = 1.0f / static_cast<float>(1 + (i * 40503u) % 977);
  }
  // The index is itself a stored tensor, overwritten after the updates.
  ASSERT_TRUE(
      client_->PutTensor("durable/rows", TensorView(DataType::kInt64, {kUpdates, 16}, rows.data()))
          .ok());
  v1::OpRequest push;
  v1::ScatterRequest* scatter = push.mutable_scatter();
  scatter->mutable_input()->mutable_stored()->set_name("durable/table");
  scatter->mutable_index()->mutable_stored()->set_name("durable/rows");
  *scatter->mutable_src() = MakeTensor<float>({kUpdates, 16}, updates);
  scatter->set_reduce(v1::REDUCTION_SUM);
  scatter->mutable_result_options()->set_in_place(true);
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(RawRun(stub_.get(), push).ok());
  std::reverse(rows.begin(), rows.end());
  ASSERT_TRUE(client_
                  ->PutTensor("durable/rows",
                              TensorView(DataType::kInt64, {kUpdates, 16}, rows.data()),
                              {.overwrite = true})
                  .ok());
  const auto expected = StoredState(*client_);
  ASSERT_EQ(expected.size(), 9u);

  // A copy of the directory as the running server left it: recovering it replays the log, as
  // after a crash (a server that stops writes a snapshot first).
  const std::string copy = dir + "_copy";
  std::filesystem::remove_all(copy);
  std::filesystem::copy(dir, copy);
  options.store.dir = copy;
  Start(options);
  EXPECT_EQ(StoredState(*client_), expected);
  const std::string scrape = server_->metrics().Scrape();
  for (const char* family :
       {"tensorops_store_log_bytes ", "tensorops_store_log_queued_bytes ",
        "tensorops_store_fsyncs_total ", "tensorops_store_fsync_seconds_total ",
        "tensorops_store_recovery_seconds "}) {
    EXPECT_THAT(scrape, HasSubstr(family));
  }
  // And once more from the snapshot the stop writes.
  Start(options);
  EXPECT_EQ(StoredState(*client_), expected);
  absl::StatusOr<v1::ServerInfoResponse> info = client_->ServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->store().sync(), "always");
  EXPECT_GT(info->store().snapshot_unix_nanos(), 0);
  client_.reset();
  server_.reset();
  std::filesystem::remove_all(dir);
  std::filesystem::remove_all(copy);
}

TEST_P(StoreServiceTest, ConcurrentInPlaceSumsLoseNothingAndReadersSeeWholeVersions) {
  // 64 writers each add 1 to every row (IndexReduce SUM over all rows); a reader's value is
  // whole when every element is the same count.
  constexpr int kWriters = 64;
  constexpr int64_t kRows = 256;
  constexpr int64_t kCols = 64;
  const std::vector<float> zeros(kRows * kCols, 0.0f);
  ASSERT_TRUE(
      client_->PutTensor("table", TensorView(DataType::kFloat32, {kRows, kCols}, zeros.data()))
          .ok());
  std::vector<int64_t> rows(kRows);
  for (int64_t i = 0; i < kRows; ++i) rows[i] = i;
  v1::OpRequest push;
  v1::IndexReduceRequest* reduce = push.mutable_index_reduce();
  reduce->mutable_input()->mutable_stored()->set_name("table");
  *reduce->mutable_index() = MakeTensor<int64_t>({kRows}, rows);
  *reduce->mutable_src() =
      MakeTensor<float>({kRows, kCols}, std::vector<float>(kRows * kCols, 1.0f));
  reduce->set_reduce(v1::REDUCTION_SUM);
  reduce->mutable_result_options()->set_in_place(true);

  std::atomic<bool> writing = true;
  std::atomic<int> torn = 0;
  std::atomic<int> reads = 0;
  std::thread reader([&] {
    while (writing.load()) {
      absl::StatusOr<Tensor> value = client_->GetTensor("table");
      if (!value.ok()) continue;
      const float* data = static_cast<const float*>(value->data());
      if (!std::all_of(data, data + kRows * kCols, [&](float x) { return x == data[0]; })) ++torn;
      ++reads;
    }
  });
  std::vector<std::thread> writers;
  std::atomic<int> failures = 0;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      v1::OpRequest mine = push;
      mine.mutable_index_reduce()->mutable_result_options()->set_update_id(
          absl::StrCat("writer-", w));
      if (!RawRun(stub_.get(), mine).ok()) ++failures;
    });
  }
  for (std::thread& writer : writers) writer.join();
  writing = false;
  reader.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(torn.load(), 0) << "of " << reads.load() << " reads";
  absl::StatusOr<Tensor> value = client_->GetTensor("table");
  ASSERT_TRUE(value.ok());
  const float* data = static_cast<const float*>(value->data());
  EXPECT_TRUE(std::all_of(data, data + kRows * kCols, [](float x) { return x == kWriters; }));
  absl::StatusOr<v1::TensorInfo> info = client_->TensorInfo("table");
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->version(), 1 + kWriters);
}

TEST_P(StoreServiceTest, CallsThatReferenceEachOthersTensorsDoNotDeadlock) {
  // Each call updates one tensor in place and reads the other: taken in opposite orders, the
  // handles would deadlock; the server takes them in name order.
  const std::vector<float> values(64, 1.0f);
  for (const char* name : {"x", "y"}) {
    ASSERT_TRUE(client_->PutTensor(name, TensorView(DataType::kFloat32, {64}, values.data())).ok());
  }
  auto update_reading = [&](std::string target, std::string source) {
    v1::OpRequest request;
    v1::SliceScatterRequest* slice = request.mutable_slice_scatter();
    slice->mutable_input()->mutable_stored()->set_name(target);
    slice->mutable_src()->mutable_stored()->set_name(source);
    slice->mutable_result_options()->set_in_place(true);
    return request;
  };
  const v1::OpRequest x_from_y = update_reading("x", "y");
  const v1::OpRequest y_from_x = update_reading("y", "x");
  std::atomic<int> failures = 0;
  std::vector<std::thread> callers;
  for (int t = 0; t < 8; ++t) {
    callers.emplace_back([&, t] {
      for (int i = 0; i < 25; ++i) {
        if (!RawRun(stub_.get(), t % 2 == 0 ? x_from_y : y_from_x).ok()) ++failures;
      }
    });
  }
  for (std::thread& caller : callers) caller.join();
  EXPECT_EQ(failures.load(), 0);
}

// DownloadSlowly opens a GetTensor of `name` in 64 KiB chunks on a channel whose flow-control
// window stays at HTTP/2's 64 KiB (no BDP probing), so that the server cannot send the whole
// tensor while the client does not read, and reads the info and the first chunk.
struct SlowDownload {
  std::unique_ptr<v1::TensorOps::Stub> stub;
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<v1::GetTensorResponse>> reader;
  std::string data;
};

void StartSlowDownload(int port, const std::string& name, SlowDownload* download) {
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  download->stub = v1::TensorOps::NewStub(grpc::CreateCustomChannel(
      absl::StrFormat("127.0.0.1:%d", port), grpc::InsecureChannelCredentials(), arguments));
  v1::GetTensorRequest request;
  request.set_name(name);
  request.set_chunk_bytes(64 << 10);
  download->reader = download->stub->GetTensor(&download->context, request);
  v1::GetTensorResponse message;
  ASSERT_TRUE(download->reader->Read(&message));
  ASSERT_TRUE(message.has_info());
  EXPECT_EQ(message.info().version(), 1);
  ASSERT_TRUE(download->reader->Read(&message));
  EXPECT_EQ(message.data().size(), 64 << 10);
  download->data += message.data();
}

// An in-place update of the last element of `name` (float32 [elements]) to 42, which makes
// `version`.
void UpdateLastElement(v1::TensorOps::Stub* stub, const std::string& name, int64_t elements,
                       int64_t version) {
  v1::OpRequest update;
  update.mutable_select_scatter()->mutable_input()->mutable_stored()->set_name(name);
  *update.mutable_select_scatter()->mutable_src() = MakeTensor<float>({}, {42.f});
  update.mutable_select_scatter()->set_index(elements - 1);
  update.mutable_select_scatter()->mutable_result_options()->set_in_place(true);
  absl::StatusOr<v1::Tensor> updated = RawRun(stub, update);
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ(updated->stored().version(), version);
}

// Under --store_download_snapshot_bytes (256 MiB by default) a download streams a copy taken
// when it opened: an update meanwhile goes ahead (no lock is held while the client reads), and
// the download still completes, with every byte of the version it announced (the checkers' 64
// MiB download under continuous updates completed 0 times of 13 before).
TEST_P(StoreServiceTest, ADownloadOfACopiedTensorCompletesWhileUpdatesGoAhead) {
  constexpr int64_t kElements = int64_t{1} << 20;
  const std::vector<float> values = Floats(kElements);
  ASSERT_TRUE(
      client_->PutTensor("slow", TensorView(DataType::kFloat32, {kElements}, values.data())).ok());
  SlowDownload download;
  ASSERT_NO_FATAL_FAILURE(StartSlowDownload(server_->port(), "slow", &download));
  ASSERT_NO_FATAL_FAILURE(UpdateLastElement(stub_.get(), "slow", kElements, 2));
  ASSERT_NO_FATAL_FAILURE(UpdateLastElement(stub_.get(), "slow", kElements, 3));
  v1::GetTensorResponse message;
  while (download.reader->Read(&message)) download.data += message.data();
  ASSERT_TRUE(download.reader->Finish().ok());
  ASSERT_EQ(download.data.size(), values.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(download.data.data(), values.data(), download.data.size()), 0)
      << "the download is version 1, whole";
}

TEST_P(StoreServiceTest, ADownloadHoldsNoLockWhileTheClientReadsAndAbortsWhenTheTensorChanges) {
  std::vector<float> values;
  ASSERT_NO_FATAL_FAILURE(StartWithChunkedDownloadsAndPutSlow(&values));
  SlowDownload download;
  ASSERT_NO_FATAL_FAILURE(StartSlowDownload(server_->port(), "slow", &download));
  // The download is open and the client is not reading: an update goes ahead all the same.
  ASSERT_NO_FATAL_FAILURE(UpdateLastElement(stub_.get(), "slow", kChunkedElements, 2));
  // The rest of the download would mix two versions: it ends ABORTED instead.
  v1::GetTensorResponse message;
  while (download.reader->Read(&message)) {
  }
  ExpectStatus(download.reader->Finish(), grpc::StatusCode::ABORTED,
               "get_tensor: tensor \"slow\" changed after");
}

// A name deleted and stored again starts again at version 1: the download, which checks the
// version before each chunk, must see that it is another value (once read past the new, smaller
// value's end, and crashed the server).
TEST_P(StoreServiceTest, ADownloadAbortsWhenItsTensorIsDeletedAndStoredAgain) {
  std::vector<float> values;
  ASSERT_NO_FATAL_FAILURE(StartWithChunkedDownloadsAndPutSlow(&values));
  SlowDownload download;
  ASSERT_NO_FATAL_FAILURE(StartSlowDownload(server_->port(), "slow", &download));
  ASSERT_TRUE(client_->DeleteTensor("slow").ok());
  const std::vector<float> small = Floats(4);
  absl::StatusOr<v1::TensorInfo> again =
      client_->PutTensor("slow", TensorView(DataType::kFloat32, {4}, small.data()));
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(again->version(), 1);
  v1::GetTensorResponse message;
  while (download.reader->Read(&message)) download.data += message.data();
  ExpectStatus(download.reader->Finish(), grpc::StatusCode::ABORTED,
               "get_tensor: tensor \"slow\" changed after");
  EXPECT_LT(download.data.size(), values.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(download.data.data(), values.data(), download.data.size()), 0)
      << "every byte sent is the first value's";
}

TEST_P(StoreServiceTest, ServerInfoAndMetricsReportTheStoresFigures) {
  absl::StatusOr<v1::ServerInfoResponse> empty = client_->ServerInfo();
  EXPECT_EQ(empty->store().sync(), "");  // in memory only
  ASSERT_TRUE(empty.ok());
  EXPECT_EQ(empty->store().memory_bytes(), ServerOptions().store.memory_bytes);
  EXPECT_EQ(empty->store().tensors(), 0);
  EXPECT_EQ(empty->store().used_bytes(), 0);
  EXPECT_EQ(empty->store().device(), StoreDevice());
  const std::vector<float> values = Floats(1000);
  ASSERT_TRUE(client_->PutTensor("a", TensorView(DataType::kFloat32, {1000}, values.data())).ok());
  ASSERT_TRUE(client_->PutTensor("b", TensorView(DataType::kFloat32, {10}, values.data())).ok());
  absl::StatusOr<v1::ServerInfoResponse> two = client_->ServerInfo();
  ASSERT_TRUE(two.ok());
  EXPECT_EQ(two->store().tensors(), 2);
  EXPECT_EQ(two->store().used_bytes(), 4040);
  const std::string scrape = server_->metrics().Scrape();
  EXPECT_THAT(scrape, HasSubstr(absl::StrFormat("tensorops_store_tensors{device=\"%s\"} 2",
                                                StoreDevice())));
  EXPECT_THAT(scrape, HasSubstr(absl::StrFormat("tensorops_store_bytes{device=\"%s\"} 4040",
                                                StoreDevice())));
  EXPECT_THAT(scrape, HasSubstr(absl::StrCat("tensorops_store_limit_bytes ",
                                             ServerOptions().store.memory_bytes)));
}

TEST_P(StoreServiceTest, TheCppClientRunsStoredCallsWithAnUpdateId) {
  const std::vector<float> zeros(4, 0.0f);
  ASSERT_TRUE(client_->PutTensor("acc", TensorView(DataType::kFloat32, {4}, zeros.data())).ok());
  const std::vector<int64_t> index = {0, 0, 3};
  const std::vector<float> ones = {1.f, 1.f, 1.f};
  v1::OpRequest request;
  *request.mutable_index_reduce() = MakeIndexReduceRequest(
      TensorView(DataType::kFloat32, {4}, zeros.data()), 0,
      TensorView(DataType::kInt64, {3}, index.data()),
      TensorView(DataType::kFloat32, {3}, ones.data()), {.reduce = Reduction::kSum});
  *request.mutable_index_reduce()->mutable_input() = StoredArgument("acc");
  request.mutable_index_reduce()->mutable_result_options()->set_in_place(true);

  // Run refuses it: its answer is a stored tensor.
  EXPECT_EQ(client_->Run(request).status().code(), absl::StatusCode::kInvalidArgument);
  // Without an id, each call gets its own: two calls, two updates.
  for (int64_t version : {2, 3}) {
    absl::StatusOr<StoredResult> stored = client_->RunStored(request);
    ASSERT_TRUE(stored.ok()) << stored.status();
    EXPECT_EQ(stored->name, "acc");
    EXPECT_EQ(stored->version, version);
    EXPECT_EQ(stored->dtype, DataType::kFloat32);
    EXPECT_EQ(stored->shape, (Shape{4}));
    EXPECT_FALSE(stored->data.has_value());
  }
  // The same id twice (what gRPC's retries send): one update.
  request.mutable_index_reduce()->mutable_result_options()->set_update_id("client-retry");
  request.mutable_index_reduce()->mutable_result_options()->set_return_data(true);
  for (int attempt = 0; attempt < 2; ++attempt) {
    absl::StatusOr<StoredResult> stored = client_->RunStored(request);
    ASSERT_TRUE(stored.ok()) << stored.status();
    EXPECT_EQ(stored->version, 4);
    ASSERT_TRUE(stored->data.has_value());
    const float* values = static_cast<const float*>(stored->data->data());
    EXPECT_EQ(std::vector<float>(values, values + 4), (std::vector<float>{6.f, 0.f, 0.f, 3.f}));
  }
  // The answer's argument() feeds the next call.
  absl::StatusOr<StoredResult> last = client_->RunStored(request);
  ASSERT_TRUE(last.ok());
  v1::OpRequest gather;
  *gather.mutable_index_select() =
      MakeIndexSelectRequest(TensorView(DataType::kFloat32, {4}, zeros.data()), 0,
                             TensorView(DataType::kInt64, {1}, index.data() + 2));
  *gather.mutable_index_select()->mutable_input() = last->argument();
  absl::StatusOr<Tensor> row = client_->Run(gather);
  ASSERT_TRUE(row.ok()) << row.status();
  EXPECT_EQ(*static_cast<const float*>(row->data()), 3.f);
  // A request that stores nothing is not RunStored's.
  v1::OpRequest plain = request;
  plain.mutable_index_reduce()->clear_result_options();
  EXPECT_EQ(client_->RunStored(plain).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_P(StoreServiceTest, AShutdownWithAnUploadOpenStoresNothing) {
  grpc::ClientContext context;
  v1::PutTensorResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::PutTensorRequest>> writer =
      stub_->PutTensor(&context, &response);
  v1::PutTensorRequest header;
  header.mutable_header()->set_name("half");
  header.mutable_header()->set_dtype(v1::DATA_TYPE_FLOAT32);
  header.mutable_header()->add_shape(1024);
  ASSERT_TRUE(writer->Write(header));
  v1::PutTensorRequest chunk;
  chunk.set_data(std::string(1000, '\0'));
  ASSERT_TRUE(writer->Write(chunk));
  // The header has reserved the tensor's bytes: the upload is open on the server.
  ASSERT_TRUE(WaitFor([&] { return server_->store().used_bytes() == 4096; }));
  server_->Shutdown(absl::Milliseconds(200));
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(server_->store().tensor_count(), 0);
  EXPECT_EQ(server_->store().used_bytes(), 0);
}

TEST_P(StoreServiceTest, AStreamWhoseClientDoesNotReadHoldsNoStoredTensor) {
  // A 4 MiB table; each stream request gathers all of it, to a client whose flow-control window
  // stays at 64 KiB (no BDP probing) and which reads nothing: the responses cannot all be sent.
  constexpr int64_t kRows = 1024;
  constexpr int64_t kCols = 1024;
  const std::vector<float> values(kRows * kCols, 1.0f);
  ASSERT_TRUE(
      client_->PutTensor("held", TensorView(DataType::kFloat32, {kRows, kCols}, values.data()))
          .ok());
  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  std::unique_ptr<v1::TensorOps::Stub> slow_stub = v1::TensorOps::NewStub(
      grpc::CreateCustomChannel(absl::StrFormat("127.0.0.1:%d", server_->port()),
                                grpc::InsecureChannelCredentials(), arguments));
  grpc::ClientContext stream_context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::RunStreamRequest, v1::RunStreamResponse>> stream =
      slow_stub->RunStream(&stream_context);
  std::vector<int64_t> all_rows(kRows);
  for (int64_t i = 0; i < kRows; ++i) all_rows[i] = i;
  for (uint64_t id = 1; id <= 4; ++id) {
    v1::RunStreamRequest request;
    request.set_request_id(id);
    v1::IndexSelectRequest* select = request.mutable_op()->mutable_index_select();
    select->mutable_input()->mutable_stored()->set_name("held");
    *select->mutable_index() = MakeTensor<int64_t>({kRows}, all_rows);
    ASSERT_TRUE(stream->Write(request));
  }
  // Give the server time to run them all; their answers wait for the client.
  absl::SleepFor(absl::Milliseconds(300));
  // An update of the table goes ahead all the same.
  v1::OpRequest update;
  update.mutable_select_scatter()->mutable_input()->mutable_stored()->set_name("held");
  *update.mutable_select_scatter()->mutable_src() =
      MakeTensor<float>({kCols}, std::vector<float>(kCols, 2.0f));
  update.mutable_select_scatter()->mutable_result_options()->set_in_place(true);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  v1::OpResponse response;
  const grpc::Status updated = stub_->Run(&context, update, &response);
  EXPECT_TRUE(updated.ok()) << updated.error_message();
  stream_context.TryCancel();
}

// ---- The sweep: every op, every tensor argument by reference, in every mode and route ----

// SweepTensor is a tensor of `dtype` (float32 or int32 values, int32 or int64 indices, bool
// masks) holding `values` (floats as halves of them).
v1::Tensor SweepTensor(v1::DataType dtype, const std::vector<int64_t>& shape,
                       const std::vector<int64_t>& values) {
  v1::Tensor tensor;
  tensor.set_dtype(dtype);
  tensor.mutable_shape()->Assign(shape.begin(), shape.end());
  std::string* data = tensor.mutable_data();
  auto append = [&](const auto value) {
    data->append(reinterpret_cast<const char*>(&value), sizeof(value));
  };
  for (const int64_t value : values) {
    switch (dtype) {
      case v1::DATA_TYPE_FLOAT32:
        append(0.5f * static_cast<float>(value));
        break;
      case v1::DATA_TYPE_INT32:
        append(static_cast<int32_t>(value));
        break;
      case v1::DATA_TYPE_INT64:
        append(value);
        break;
      case v1::DATA_TYPE_BOOL:
        append(static_cast<uint8_t>(value != 0));
        break;
      default:
        ADD_FAILURE() << "SweepTensor: no dtype " << v1::DataType_Name(dtype);
    }
  }
  return tensor;
}

int64_t Count(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (const int64_t size : shape) count *= size;
  return count;
}

// SweepRequests is one call of every op and of the forms whose planning differs (a scalar value,
// alpha, the axes and zeros forms of the Nd ops, a broadcast mask), with `value_dtype` values and
// `index_dtype` indices full of duplicates.
std::vector<v1::OpRequest> SweepRequests(v1::DataType value_dtype, v1::DataType index_dtype) {
  auto values = [&](std::vector<int64_t> shape, int64_t seed) {
    std::vector<int64_t> pattern(Count(shape));
    for (size_t i = 0; i < pattern.size(); ++i)
      pattern[i] = (static_cast<int64_t>(i) * 7 + seed) % 23 - 11;
    return SweepTensor(value_dtype, shape, pattern);
  };
  // Index values in [0, bound), each repeated.
  auto indices = [&](std::vector<int64_t> shape, int64_t bound, int64_t seed) {
    std::vector<int64_t> pattern(Count(shape));
    for (size_t i = 0; i < pattern.size(); ++i) {
      pattern[i] = (static_cast<int64_t>(i) * 3 + seed) % std::max<int64_t>(1, bound - 1);
    }
    return SweepTensor(index_dtype, shape, pattern);
  };
  auto scalar = [&](int64_t value) {
    v1::Scalar scalar;
    if (value_dtype == v1::DATA_TYPE_FLOAT32) {
      scalar.set_float_value(static_cast<double>(value));
    } else {
      scalar.set_int_value(value);
    }
    return scalar;
  };
  std::vector<v1::OpRequest> requests;
  {
    auto* op = requests.emplace_back().mutable_gather();
    *op->mutable_input() = values({3, 5}, 1);
    *op->mutable_index() = indices({3, 4}, 5, 2);
    op->set_axis(1);
  }
  {
    // Large enough (4800 bytes) that the inline call takes its input as the result.
    auto* op = requests.emplace_back().mutable_scatter();
    *op->mutable_input() = values({4, 300}, 2);
    *op->mutable_index() = indices({3, 8}, 4, 1);
    *op->mutable_src() = values({3, 8}, 3);
    op->set_reduce(v1::REDUCTION_SUM);
    op->set_include_self(false);
  }
  {
    auto* op = requests.emplace_back().mutable_scatter();
    *op->mutable_input() = values({4, 6}, 4);
    *op->mutable_index() = indices({2, 6}, 6, 3);
    *op->mutable_value() = scalar(4);
    op->set_axis(1);
    op->set_reduce(v1::REDUCTION_AMAX);
  }
  {
    // ASSIGN with duplicates: the last index wins.
    auto* op = requests.emplace_back().mutable_scatter();
    *op->mutable_input() = values({5, 4}, 5);
    *op->mutable_index() = indices({6, 4}, 5, 4);
    *op->mutable_src() = values({6, 4}, 6);
  }
  {
    auto* op = requests.emplace_back().mutable_index_select();
    *op->mutable_input() = values({5, 3}, 7);
    *op->mutable_index() = indices({7}, 5, 1);
  }
  {
    // index_add with alpha: planning scales src on the host.
    auto* op = requests.emplace_back().mutable_index_reduce();
    *op->mutable_input() = values({4, 3}, 8);
    *op->mutable_index() = indices({6}, 4, 2);
    *op->mutable_src() = values({6, 3}, 9);
    op->set_reduce(v1::REDUCTION_SUM);
    *op->mutable_alpha() = scalar(2);
  }
  {
    auto* op = requests.emplace_back().mutable_index_reduce();
    *op->mutable_input() = values({3, 4}, 10);
    *op->mutable_index() = indices({5}, 4, 1);
    *op->mutable_src() = values({3, 5}, 11);
    op->set_axis(1);
    op->set_reduce(v1::REDUCTION_AMAX);
    op->set_include_self(false);
  }
  {
    auto* op = requests.emplace_back().mutable_select_scatter();
    *op->mutable_input() = values({3, 4}, 12);
    *op->mutable_src() = values({4}, 13);
    op->set_index(-1);
  }
  {
    auto* op = requests.emplace_back().mutable_slice_scatter();
    *op->mutable_input() = values({6, 3}, 14);
    *op->mutable_src() = values({3, 3}, 15);
    op->set_step(2);
  }
  {
    auto* op = requests.emplace_back().mutable_diagonal_scatter();
    *op->mutable_input() = values({3, 4}, 16);
    *op->mutable_src() = values({3}, 17);
    op->set_offset(1);
  }
  {
    auto* op = requests.emplace_back().mutable_gather_nd();
    *op->mutable_input() = values({3, 4}, 18);
    *op->mutable_index() = indices({5, 2}, 3, 1);
  }
  {
    auto* op = requests.emplace_back().mutable_gather_nd();
    *op->mutable_input() = values({3, 5}, 19);
    *op->mutable_index() = indices({3, 4, 1}, 5, 2);
    op->add_axes(1);
  }
  {
    auto* op = requests.emplace_back().mutable_scatter_nd();
    *op->mutable_input() = values({5, 3}, 20);
    *op->mutable_index() = indices({6, 1}, 5, 3);
    *op->mutable_src() = values({6, 3}, 21);
    op->set_reduce(v1::REDUCTION_SUM);
  }
  {
    auto* op = requests.emplace_back().mutable_scatter_nd();
    *op->mutable_input() = values({4, 6}, 22);
    *op->mutable_index() = indices({3, 8, 1}, 6, 1);
    *op->mutable_src() = values({3, 8}, 23);
    op->add_axes(1);
    op->set_reduce(v1::REDUCTION_SUM);
  }
  {
    // The zeros form: no input.
    auto* op = requests.emplace_back().mutable_scatter_nd();
    *op->mutable_index() = indices({6, 1}, 5, 2);
    *op->mutable_src() = values({6, 3}, 24);
    op->add_shape(5);
    op->add_shape(3);
    op->set_reduce(v1::REDUCTION_SUM);
  }
  {
    auto* op = requests.emplace_back().mutable_masked_scatter();
    *op->mutable_input() = values({3, 4}, 25);
    *op->mutable_mask() =
        SweepTensor(v1::DATA_TYPE_BOOL, {3, 4}, {1, 0, 0, 1, 1, 1, 0, 1, 0, 0, 1, 1});
    *op->mutable_src() = values({12}, 26);
  }
  {
    auto* op = requests.emplace_back().mutable_masked_scatter();
    *op->mutable_input() = values({3, 4}, 27);
    *op->mutable_mask() = SweepTensor(v1::DATA_TYPE_BOOL, {4}, {0, 1, 1, 0});
    *op->mutable_src() = values({7}, 28);
  }
  return requests;
}

// Route is how a sweep call reaches the server.
enum class Route { kRun, kTyped, kStream };

// ResultMode is what a sweep call asks for its result.
enum class ResultMode { kPlain, kStoreAs, kInPlace };

std::string RouteName(Route route) {
  switch (route) {
    case Route::kRun:
      return "Run";
    case Route::kTyped:
      return "the op's RPC";
    case Route::kStream:
      return "RunStream";
  }
  return "";
}

// StreamRun sends `request` as the one message of a RunStream and returns its result as it came.
absl::StatusOr<v1::Tensor> StreamRun(v1::TensorOps::Stub* stub, const v1::OpRequest& request) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  auto stream = stub->RunStream(&context);
  v1::RunStreamRequest message;
  message.set_request_id(7);
  *message.mutable_op() = request;
  if (!stream->Write(message)) return absl::UnavailableError("RunStream: the write failed");
  stream->WritesDone();
  v1::RunStreamResponse response;
  const bool read = stream->Read(&response);
  const grpc::Status status = stream->Finish();
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  }
  if (!read) return absl::UnavailableError("RunStream: no response");
  if (response.has_error()) {
    return absl::Status(static_cast<absl::StatusCode>(response.error().code()),
                        response.error().message());
  }
  return response.result();
}

// Every op, with every tensor argument given by reference (all at once and each alone), with
// int32 and int64 indices, a float and an integer dtype, its result returned, stored under a name
// and (for the ops that update their input) written in place, through Run, the op's own RPC and
// RunStream: the same bytes as the call inline. With the store in (fake) device memory this is
// every path by which planning or a CPU run could read a stored operand on the host.
TEST_P(StoreServiceTest, EveryOpEveryArgumentByReferenceInEveryModeAndRouteMatchesInline) {
  auto channel = grpc::CreateChannel(absl::StrFormat("127.0.0.1:%d", server_->port()),
                                     grpc::InsecureChannelCredentials());
  auto call = [&](Route route, const v1::OpRequest& request) -> absl::StatusOr<v1::Tensor> {
    switch (route) {
      case Route::kRun:
        return RawRun(stub_.get(), request);
      case Route::kTyped:
        return Typed(channel.get(), request);
      case Route::kStream:
        return StreamRun(stub_.get(), request);
    }
    return absl::InternalError("no route");
  };
  auto stored_bytes = [&](const std::string& name) -> std::string {
    absl::StatusOr<Tensor> stored = client_->GetTensor(name);
    EXPECT_TRUE(stored.ok()) << stored.status();
    return stored.ok() ? Bytes(*stored) : std::string();
  };
  int64_t compared = 0;
  for (const v1::DataType value_dtype : {v1::DATA_TYPE_FLOAT32, v1::DATA_TYPE_INT32}) {
    for (const v1::DataType index_dtype : {v1::DATA_TYPE_INT32, v1::DATA_TYPE_INT64}) {
      for (const v1::OpRequest& request : SweepRequests(value_dtype, index_dtype)) {
        const std::string op(ops::NameOfCase(request.op_case()));
        SCOPED_TRACE(absl::StrCat(op, " ", v1::DataType_Name(value_dtype), " index ",
                                  v1::DataType_Name(index_dtype), ": ",
                                  request.ShortDebugString().substr(0, 200)));
        absl::StatusOr<v1::Tensor> expected = RawRun(stub_.get(), request);
        ASSERT_TRUE(expected.ok()) << expected.status();

        // Every argument stored under its own name; the variants reference all, then each alone.
        std::vector<std::string> arguments;
        v1::OpRequest original = request;
        ForEachTensorArgument(
            OpMessage(&original), [&](const std::string& argument, v1::Tensor* tensor) {
              arguments.push_back(argument);
              absl::StatusOr<TensorView> view = wire::DecodeTensor(*tensor, op, argument, {});
              ASSERT_TRUE(view.ok()) << view.status();
              ASSERT_TRUE(
                  client_->PutTensor(absl::StrCat("sweep/", argument), *view, {.overwrite = true})
                      .ok());
            });
        auto by_reference = [&](const std::vector<std::string>& names) {
          v1::OpRequest variant = request;
          ForEachTensorArgument(
              OpMessage(&variant), [&](const std::string& argument, v1::Tensor* tensor) {
                if (std::find(names.begin(), names.end(), argument) == names.end()) return;
                tensor->Clear();
                tensor->mutable_stored()->set_name(absl::StrCat("sweep/", argument));
              });
          return variant;
        };
        std::vector<std::vector<std::string>> variants = {arguments};
        if (arguments.size() > 1) {
          for (const std::string& argument : arguments) variants.push_back({argument});
        }
        const bool has_input =
            std::find(arguments.begin(), arguments.end(), "input") != arguments.end();
        for (const std::vector<std::string>& names : variants) {
          const bool input_stored = std::find(names.begin(), names.end(), "input") != names.end();
          for (const ResultMode mode :
               {ResultMode::kPlain, ResultMode::kStoreAs, ResultMode::kInPlace}) {
            if (mode == ResultMode::kInPlace &&
                (!UpdatesItsInput(op) || !has_input || !input_stored)) {
              continue;
            }
            for (const Route route : {Route::kRun, Route::kTyped, Route::kStream}) {
              SCOPED_TRACE(absl::StrCat("by reference: ", absl::StrJoin(names, ", "), "; mode ",
                                        static_cast<int>(mode), "; ", RouteName(route)));
              v1::OpRequest variant = by_reference(names);
              v1::ResultOptions* options = ResultOptionsOf(&variant);
              if (mode == ResultMode::kStoreAs) {
                options->set_store_as("sweep/out");
                options->set_overwrite(true);
              }
              if (mode == ResultMode::kInPlace) options->set_in_place(true);
              absl::StatusOr<v1::Tensor> result = call(route, variant);
              ASSERT_TRUE(result.ok()) << result.status();
              EXPECT_EQ(result->dtype(), expected->dtype());
              EXPECT_THAT(result->shape(), ::testing::ElementsAreArray(expected->shape()));
              switch (mode) {
                case ResultMode::kPlain:
                  EXPECT_EQ(result->data(), expected->data());
                  break;
                case ResultMode::kStoreAs:
                  EXPECT_EQ(result->stored().name(), "sweep/out");
                  EXPECT_EQ(stored_bytes("sweep/out"), expected->data());
                  break;
                case ResultMode::kInPlace: {
                  EXPECT_EQ(result->stored().name(), "sweep/input");
                  EXPECT_EQ(stored_bytes("sweep/input"), expected->data());
                  // The next call reads the original input again.
                  absl::StatusOr<TensorView> input =
                      wire::DecodeTensor(*InputOf(&original), op, "input", {});
                  ASSERT_TRUE(input.ok());
                  ASSERT_TRUE(client_->PutTensor("sweep/input", *input, {.overwrite = true}).ok());
                  break;
                }
              }
              ++compared;
            }
          }
        }
        // No call changed a stored argument but by updating it in place.
        ForEachTensorArgument(
            OpMessage(&original), [&](const std::string& argument, v1::Tensor* tensor) {
              EXPECT_EQ(stored_bytes(absl::StrCat("sweep/", argument)), tensor->data()) << argument;
            });
        for (const std::string& argument : arguments) {
          ASSERT_TRUE(client_->DeleteTensor(absl::StrCat("sweep/", argument)).ok());
        }
      }
    }
  }
  // 17 requests x 4 dtype pairs, each in 2-4 variants, 2-3 modes and 3 routes.
  EXPECT_GT(compared, 1500);
}

INSTANTIATE_TEST_SUITE_P(Placements, StoreServiceTest,
                         ::testing::Values(StorePlacement::kHost, StorePlacement::kFakeDevice,
                                           StorePlacement::kCuda),
                         [](const ::testing::TestParamInfo<StorePlacement>& info) {
                           switch (info.param) {
                             case StorePlacement::kHost:
                               return "Host";
                             case StorePlacement::kFakeDevice:
                               return "FakeDevice";
                             case StorePlacement::kCuda:
                               return "Cuda";
                           }
                           return "";
                         });

// With the store in (fake) device memory, an op on stored tensors sends the GPU only its small
// inline inputs: the stored ones are read where they are, and a result written in place or
// stored stays there. (The fake then fails each call, which the CPU re-runs from host copies:
// the results are checked against the same calls inline.)
TEST(DeviceStoreTest, OpsOnStoredTensorsCopyOnlyTheirSmallInputsToTheGpu) {
  testing::FakeDeviceMemory memory;
  testing::StagingFakeExecutor executor(&memory);
  ServerOptions options;
  options.gpu.executor_for_testing = &executor;
  options.store.device = DeviceChoice::kAuto;  // a GPU is there: its memory
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<Client> client = ConnectClient(server->port());
  std::unique_ptr<v1::TensorOps::Stub> stub = Connect(server->port());

  constexpr int64_t kRows = 256;
  constexpr int64_t kColumns = 64;
  const std::vector<float> table = Floats(kRows * kColumns);
  const TensorView table_view(DataType::kFloat32, {kRows, kColumns}, table.data());
  absl::StatusOr<v1::TensorInfo> put = client->PutTensor("table", table_view);
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->device(), "fakegpu:0");
  EXPECT_EQ(memory.copied_in(), kRows * kColumns * 4);
  executor.TakeSeen();

  // A lookup: 16 rows of the table. The request is far below --gpu_min_bytes, but its table is
  // on the GPU, so the call goes there.
  std::vector<int64_t> rows(16);
  for (int64_t i = 0; i < 16; ++i) rows[i] = (i * 37) % kRows;
  v1::OpRequest lookup;
  *lookup.mutable_index_select() =
      MakeIndexSelectRequest(table_view, 0, TensorView(DataType::kInt64, {16}, rows.data()));
  absl::StatusOr<Tensor> inline_lookup = client->Run(lookup);
  ASSERT_TRUE(inline_lookup.ok()) << inline_lookup.status();
  executor.TakeSeen();  // the inline call: every byte staged
  lookup.mutable_index_select()->mutable_input()->Clear();
  lookup.mutable_index_select()->mutable_input()->mutable_stored()->set_name("table");
  absl::StatusOr<Tensor> by_reference = client->Run(lookup);
  ASSERT_TRUE(by_reference.ok()) << by_reference.status();
  EXPECT_EQ(Bytes(*by_reference), Bytes(*inline_lookup));
  std::vector<testing::StagingFakeExecutor::Seen> seen = executor.TakeSeen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].resident_bytes, kRows * kColumns * 4);
  EXPECT_EQ(seen[0].staged_bytes, 16 * 8);  // the index alone
  EXPECT_FALSE(seen[0].resident_result);
  EXPECT_TRUE(seen[0].all_resident_in_memory);

  // A gradient push in place: the table stays on the GPU, the index and rows go there.
  std::vector<float> gradient(16 * kColumns);
  for (size_t i = 0; i < gradient.size(); ++i) gradient[i] = static_cast<float>(i % 7) - 3.0f;
  v1::OpRequest push;
  *push.mutable_index_reduce() =
      MakeIndexReduceRequest(table_view, 0, TensorView(DataType::kInt64, {16}, rows.data()),
                             TensorView(DataType::kFloat32, {16, kColumns}, gradient.data()));
  absl::StatusOr<Tensor> expected = client->Run(push);
  ASSERT_TRUE(expected.ok()) << expected.status();
  executor.TakeSeen();
  push.mutable_index_reduce()->mutable_input()->Clear();
  push.mutable_index_reduce()->mutable_input()->mutable_stored()->set_name("table");
  push.mutable_index_reduce()->mutable_result_options()->set_in_place(true);
  absl::StatusOr<v1::Tensor> pushed = RawRun(stub.get(), push);
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  EXPECT_EQ(pushed->stored().version(), put->version() + 1);
  seen = executor.TakeSeen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0].resident_bytes, kRows * kColumns * 4);
  EXPECT_EQ(seen[0].staged_bytes, 16 * 8 + 16 * kColumns * 4);  // index and rows
  EXPECT_TRUE(seen[0].resident_result);
  EXPECT_TRUE(seen[0].all_resident_in_memory);
  absl::StatusOr<Tensor> updated = client->GetTensor("table");
  ASSERT_TRUE(updated.ok()) << updated.status();
  EXPECT_EQ(Bytes(*updated), Bytes(*expected));

  // A result stored under a name is written on the GPU too.
  v1::OpRequest keep = lookup;
  keep.mutable_index_select()->mutable_result_options()->set_store_as("rows");
  absl::StatusOr<v1::Tensor> kept = RawRun(stub.get(), keep);
  ASSERT_TRUE(kept.ok()) << kept.status();
  seen = executor.TakeSeen();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_TRUE(seen[0].resident_result);
  EXPECT_TRUE(seen[0].all_resident_in_memory);
  absl::StatusOr<Tensor> stored_rows = client->GetTensor("rows");
  ASSERT_TRUE(stored_rows.ok()) << stored_rows.status();
  lookup.mutable_index_select()->mutable_input()->mutable_stored()->set_name("table");
  absl::StatusOr<Tensor> fresh_lookup = client->Run(lookup);
  ASSERT_TRUE(fresh_lookup.ok()) << fresh_lookup.status();
  EXPECT_EQ(Bytes(*stored_rows), Bytes(*fresh_lookup));

  // A GPU that fails after it began writing an in-place result: the call fails with DATA_LOSS
  // (which no client retries) instead of running again on the CPU, which would apply the update
  // twice; nothing is committed.
  executor.TouchResidentResults();
  absl::StatusOr<v1::Tensor> lost = RawRun(stub.get(), push);
  EXPECT_EQ(lost.status().code(), absl::StatusCode::kDataLoss) << lost.status();
  EXPECT_THAT(lost.status().message(), HasSubstr("may now be partly updated"));
  absl::StatusOr<v1::TensorInfo> info = client->TensorInfo("table");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->version(), pushed->stored().version());
  absl::StatusOr<Tensor> unchanged = client->GetTensor("table");
  ASSERT_TRUE(unchanged.ok()) << unchanged.status();
  EXPECT_EQ(Bytes(*unchanged), Bytes(*updated));  // the fake wrote nothing

  // A stored result is a new upload that no one sees before the call commits it: a GPU that
  // fails while writing it has the CPU run the call again, which stores the right bytes, or
  // finds a bad index and answers INVALID_ARGUMENT (as on a host store) storing nothing.
  v1::OpRequest keep_again = keep;
  keep_again.mutable_index_select()->mutable_result_options()->set_store_as("rows_again");
  absl::StatusOr<v1::Tensor> kept_again = RawRun(stub.get(), keep_again);
  ASSERT_TRUE(kept_again.ok()) << kept_again.status();
  absl::StatusOr<Tensor> stored_again = client->GetTensor("rows_again");
  ASSERT_TRUE(stored_again.ok()) << stored_again.status();
  EXPECT_EQ(Bytes(*stored_again), Bytes(*fresh_lookup));
  v1::OpRequest bad_keep = keep;
  bad_keep.mutable_index_select()->mutable_result_options()->set_store_as("bad_rows");
  *bad_keep.mutable_index_select()->mutable_index() = MakeTensor<int64_t>({2}, {3, kRows + 5});
  absl::StatusOr<v1::Tensor> refused = RawRun(stub.get(), bad_keep);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("index_select"));
  EXPECT_EQ(client->TensorInfo("bad_rows").status().code(), absl::StatusCode::kNotFound);

  // Every device batch's stage times reach the metrics.
  const std::string scrape = server->metrics().Scrape();
  for (const char* stage : {"staging", "copy_in", "kernels", "copy_out"}) {
    EXPECT_THAT(scrape, HasSubstr(absl::StrFormat(
                            "tensorops_device_stage_duration_seconds_count{stage=\"%s\"}", stage)))
        << stage;
  }
}

TEST(DeviceStoreTest, StoreDeviceCudaWithoutAGpuFailsAtStartUpAndAutoFallsBackToTheHost) {
  ServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.device = DeviceChoice::kCpu;
  options.store.device = DeviceChoice::kCuda;
  absl::StatusOr<std::unique_ptr<Server>> refused = Server::Start(options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("--store_device=cuda"));
  EXPECT_THAT(refused.status().message(), HasSubstr("--device=cpu"));

  options.store.device = DeviceChoice::kAuto;
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<Client> client = ConnectClient(server->port());
  absl::StatusOr<v1::ServerInfoResponse> info = client->ServerInfo();
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->store().device(), "cpu");
}

// A data message is recognised by its first bytes however gRPC's slices cut them, and its bytes
// are read from the slices in order; anything else is parsed as a whole.
TEST(PutTensorMessageTest, DataMessagesStayInTheirSlicesAndTheRestIsParsed) {
  std::string payload(300, '\0');
  for (size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<char>(i * 7);
  v1::PutTensorRequest data;
  data.set_data(payload);
  const std::string wire = data.SerializeAsString();  // 0x12, a 2-byte varint, 300 bytes
  for (const size_t cut : {size_t{1}, size_t{2}, size_t{3}, size_t{50}, wire.size()}) {
    SCOPED_TRACE(absl::StrCat("slices of ", cut, " bytes"));
    std::vector<grpc::Slice> slices;
    for (size_t at = 0; at < wire.size(); at += cut) {
      slices.emplace_back(wire.data() + at, std::min(cut, wire.size() - at));
    }
    grpc::ByteBuffer buffer(slices.data(), slices.size());
    PutTensorMessage message;
    ASSERT_TRUE(grpc::SerializationTraits<PutTensorMessage>::Deserialize(&buffer, &message).ok());
    ASSERT_TRUE(message.is_data);
    EXPECT_EQ(message.bytes, wire.size());
    EXPECT_EQ(message.data_bytes, payload.size());
    std::string read;
    ASSERT_TRUE(message
                    .ForEachDataPiece([&](std::string_view piece) {
                      read.append(piece);
                      return absl::OkStatus();
                    })
                    .ok());
    EXPECT_EQ(read, payload);
  }
  // A header, and a data message with a second field after it, are parsed.
  v1::PutTensorRequest header;
  header.mutable_header()->set_name("w");
  std::string twice = wire + wire;  // two data fields: valid protobuf, the last one wins
  for (const std::string& bytes : {header.SerializeAsString(), twice}) {
    grpc::Slice slice(bytes.data(), bytes.size());
    grpc::ByteBuffer buffer(&slice, 1);
    PutTensorMessage message;
    ASSERT_TRUE(grpc::SerializationTraits<PutTensorMessage>::Deserialize(&buffer, &message).ok());
    EXPECT_FALSE(message.is_data);
    EXPECT_TRUE(message.parsed.ok);
  }
  size_t header_bytes = 0;
  EXPECT_EQ(DataFieldLength(std::string_view("\x12\x05", 2), 7, &header_bytes), 5);
  EXPECT_EQ(header_bytes, 2u);
  EXPECT_EQ(DataFieldLength(std::string_view("\x12\x05", 2), 8, &header_bytes), -1);  // more after
  EXPECT_EQ(DataFieldLength(std::string_view("\x12\x85", 2), 7, &header_bytes), -1);  // cut varint
  EXPECT_EQ(DataFieldLength(std::string_view("\x0a\x05", 2), 7, &header_bytes), -1);  // a header
  EXPECT_EQ(DataFieldLength(std::string_view("\x12\xff\xff\xff\xff\xff\xff\xff\xff\xff\x7f", 11),
                            12, &header_bytes),
            -1);  // a length past 64 bits
}

TEST(StoreAuthTest, UnauthenticatedStoreCallsAreRefused) {
  const std::string token_file = ::testing::TempDir() + "/store_service_test_token";
  {
    std::FILE* file = std::fopen(token_file.c_str(), "w");
    ASSERT_NE(file, nullptr);
    std::fputs("store-token\n", file);
    std::fclose(file);
  }
  ServerOptions options;
  options.security.auth_token_file = token_file;
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<Client> anonymous = ConnectClient(server->port());
  std::unique_ptr<Client> client = ConnectClient(server->port(), {.auth_token = "store-token"});
  const std::vector<float> values = Floats(4);
  const TensorView view(DataType::kFloat32, {4}, values.data());
  EXPECT_EQ(anonymous->PutTensor("w", view).status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(server->store().tensor_count(), 0);
  ASSERT_TRUE(client->PutTensor("w", view).ok());
  EXPECT_EQ(anonymous->GetTensor("w").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(anonymous->TensorInfo("w").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(anonymous->ListTensors().status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(anonymous->DeleteTensor("w").code(), absl::StatusCode::kUnauthenticated);
  EXPECT_TRUE(client->GetTensor("w").ok());
  EXPECT_TRUE(client->DeleteTensor("w").ok());
}

TEST(StoreAuthTest, EachTokenIsATenantThatSeesOnlyItsOwnTensors) {
  const std::string token_file = ::testing::TempDir() + "/store_service_test_tokens";
  {
    std::FILE* file = std::fopen(token_file.c_str(), "w");
    ASSERT_NE(file, nullptr);
    std::fputs("# one line per tenant\nalice-token\nbob-token\n", file);
    std::fclose(file);
  }
  ServerOptions options;
  options.security.auth_token_file = token_file;
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<Client> alice = ConnectClient(server->port(), {.auth_token = "alice-token"});
  std::unique_ptr<Client> bob = ConnectClient(server->port(), {.auth_token = "bob-token"});
  const std::vector<float> values = Floats(4);
  const TensorView view(DataType::kFloat32, {4}, values.data());
  ASSERT_TRUE(alice->PutTensor("w", view).ok());

  // Bob can neither read, list, describe, delete nor use Alice's "w".
  EXPECT_EQ(bob->GetTensor("w").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(bob->TensorInfo("w").status().code(), absl::StatusCode::kNotFound);
  absl::StatusOr<std::vector<v1::TensorInfo>> bobs = bob->ListTensors();
  ASSERT_TRUE(bobs.ok());
  EXPECT_TRUE(bobs->empty());
  EXPECT_EQ(bob->DeleteTensor("w").code(), absl::StatusCode::kNotFound);
  v1::OpRequest read;
  read.mutable_index_select()->mutable_input()->mutable_stored()->set_name("w");
  *read.mutable_index_select()->mutable_index() = MakeTensor<int64_t>({1}, {0});
  EXPECT_EQ(bob->Run(read).status().code(), absl::StatusCode::kNotFound);
  v1::OpRequest update;
  update.mutable_scatter()->mutable_input()->mutable_stored()->set_name("w");
  *update.mutable_scatter()->mutable_index() = MakeTensor<int64_t>({1}, {0});
  *update.mutable_scatter()->mutable_src() = MakeTensor<float>({1}, {100.f});
  update.mutable_scatter()->mutable_result_options()->set_in_place(true);
  update.mutable_scatter()->mutable_result_options()->set_update_id("same-id");
  EXPECT_EQ(bob->RunStored(update).status().code(), absl::StatusCode::kNotFound);

  // Bob's own "w" is another tensor; update ids are per tenant too.
  ASSERT_TRUE(bob->PutTensor("w", TensorView(DataType::kFloat32, {1}, values.data())).ok());
  absl::StatusOr<StoredResult> alices_update = alice->RunStored(update);
  ASSERT_TRUE(alices_update.ok()) << alices_update.status();
  EXPECT_EQ(alices_update->version, 2);
  absl::StatusOr<StoredResult> bobs_update = bob->RunStored(update);
  ASSERT_TRUE(bobs_update.ok()) << bobs_update.status();
  EXPECT_EQ(bobs_update->version, 2);
  EXPECT_EQ(bobs_update->shape, (Shape{1}));
  absl::StatusOr<Tensor> alices = alice->GetTensor("w");
  ASSERT_TRUE(alices.ok());
  EXPECT_EQ(alices->shape(), (Shape{4}));
  EXPECT_EQ(static_cast<const float*>(alices->data())[0], 100.f);
  EXPECT_EQ(static_cast<const float*>(alices->data())[1], values[1]);
  EXPECT_EQ(server->store().tensor_count(), 2);
}

// WriteTokenFile replaces `path`'s contents with `contents`.
void WriteTokenFile(const std::string& path, const std::string& contents) {
  std::FILE* file = std::fopen(path.c_str(), "w");
  ASSERT_NE(file, nullptr);
  std::fputs(contents.c_str(), file);
  std::fclose(file);
}

// The first float of tensor `name` as `token`'s tenant sees it, or the error's code.
absl::StatusOr<float> FirstFloatOf(int port, const std::string& token, const std::string& name) {
  std::unique_ptr<Client> client = ConnectClient(port, {.auth_token = token});
  absl::StatusOr<Tensor> got = client->GetTensor(name);
  if (!got.ok()) return got.status();
  return static_cast<const float*>(got->data())[0];
}

// A tenant keeps its stored tensors when the token file changes around it: lines reordered, a
// line added before it, another tenant's token rotated. A removed token's tensors stay theirs.
TEST(StoreAuthTest, TenantsKeepTheirTensorsWhenTheTokenFileChanges) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/store_auth_durable_", getpid());
  const std::string token_file = dir + "_tokens";
  std::filesystem::remove_all(dir);
  WriteTokenFile(token_file, "alice-token\nbob-token\ncarol: carol-old\n");
  ServerOptions options;
  options.security.auth_token_file = token_file;
  options.store.dir = dir;
  options.store.sync = StoreSync::kAlways;
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  const std::map<std::string, float> firsts = {
      {"alice-token", 1.f}, {"bob-token", 2.f}, {"carol-old", 3.f}};
  for (const auto& [token, first] : firsts) {
    std::unique_ptr<Client> client = ConnectClient(server->port(), {.auth_token = token});
    const std::vector<float> values = {first, 0.f};
    ASSERT_TRUE(client->PutTensor("w", TensorView(DataType::kFloat32, {2}, values.data())).ok());
  }
  server.reset();

  WriteTokenFile(token_file,
                 "# reordered, one added, carol's rotated\nnew-token\nbob-token\n"
                 "carol: carol-new\nalice-token\n");
  server = StartServer(options);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(FirstFloatOf(server->port(), "alice-token", "w").value_or(-1), 1.f);
  EXPECT_EQ(FirstFloatOf(server->port(), "bob-token", "w").value_or(-1), 2.f);
  EXPECT_EQ(FirstFloatOf(server->port(), "carol-new", "w").value_or(-1), 3.f);
  EXPECT_EQ(FirstFloatOf(server->port(), "new-token", "w").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(FirstFloatOf(server->port(), "carol-old", "w").status().code(),
            absl::StatusCode::kUnauthenticated);
  server.reset();

  // Alice's line removed: her tensor is nobody's (kept, unreachable); bob's is still his.
  WriteTokenFile(token_file, "bob-token\nnew-token\n");
  server = StartServer(options);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(FirstFloatOf(server->port(), "bob-token", "w").value_or(-1), 2.f);
  EXPECT_EQ(FirstFloatOf(server->port(), "new-token", "w").status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(server->store().tensor_count(), 3);
  server.reset();
  std::filesystem::remove_all(dir);
  std::filesystem::remove(token_file);
}

// A store directory of a server from before tenants were named holds namespaces "token-N". The
// first start reads them into the namespace of the N-th token and snapshots at once, so that a
// later change of the file's order moves nothing.
TEST(StoreAuthTest, AStoreOfTokenNNamespacesIsRecoveredUnderTheTokensOwnNamespaces) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "/store_auth_legacy_", getpid());
  const std::string token_file = dir + "_tokens";
  std::filesystem::remove_all(dir);
  {
    TensorStore store(1 << 20);
    absl::StatusOr<std::unique_ptr<DurableStore>> durable =
        DurableStore::Open({.dir = dir, .sync = StoreSync::kAlways}, &store, nullptr);
    ASSERT_TRUE(durable.ok()) << durable.status();
    for (const auto& [ns, first] : std::vector<std::pair<std::string, float>>{
             {"token-1", 1.f}, {"token-2", 2.f}, {"token-7", 7.f}}) {
      const std::vector<float> values = {first, 0.f};
      absl::StatusOr<TensorStore::Upload> upload =
          store.BeginUpload(ns, "w", DataType::kFloat32, {2});
      ASSERT_TRUE(upload.ok()) << upload.status();
      ASSERT_TRUE(
          upload->Write(0, std::string_view(reinterpret_cast<const char*>(values.data()), 8)).ok());
      ASSERT_TRUE(upload->Commit().ok());
    }
  }
  ASSERT_TRUE(testing::RewriteAsEarlierServers(dir).ok());
  // First a start without the token file, whose stop writes a snapshot: it cannot rename, and
  // leaves the renaming to the next server that has the file.
  ServerOptions options;
  options.store.dir = dir;
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  {
    std::unique_ptr<Client> client = ConnectClient(server->port());
    const std::vector<float> values = {5.f};
    ASSERT_TRUE(
        client->PutTensor("plain", TensorView(DataType::kFloat32, {1}, values.data())).ok());
  }
  server.reset();
  WriteTokenFile(token_file, "alice-token\nbob: bob-token\n");
  options.security.auth_token_file = token_file;
  server = StartServer(options);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(FirstFloatOf(server->port(), "alice-token", "w").value_or(-1), 1.f);
  EXPECT_EQ(FirstFloatOf(server->port(), "bob-token", "w").value_or(-1), 2.f);
  std::vector<std::string> namespaces;
  for (const auto& [ns, name] : server->store().Names()) namespaces.push_back(ns);
  // token-7 had no line: its tensor stays under its old name, which no token reaches.
  EXPECT_THAT(namespaces, ::testing::UnorderedElementsAre(::testing::StartsWith("token:"), "bob",
                                                          "token-7", ""));
  server.reset();

  // Reordered: the snapshot of the first start holds the new names, so nothing moves.
  WriteTokenFile(token_file, "bob: bob-token\nalice-token\n");
  server = StartServer(options);
  ASSERT_NE(server, nullptr);
  EXPECT_EQ(FirstFloatOf(server->port(), "alice-token", "w").value_or(-1), 1.f);
  EXPECT_EQ(FirstFloatOf(server->port(), "bob-token", "w").value_or(-1), 2.f);
  server.reset();
  std::filesystem::remove_all(dir);
  std::filesystem::remove(token_file);
}

}  // namespace
}  // namespace tensorops
