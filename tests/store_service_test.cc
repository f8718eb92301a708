// Tests of the store RPCs (PutTensor, GetTensor, DeleteTensor, ListTensors, TensorInfo) and of
// stored tensors referenced by every op's tensor arguments, against a real Server in-process.
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
#include "server/server.h"
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

class StoreServiceTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(ServerOptions()); }

  void Start(ServerOptions options) {
    client_.reset();
    server_ = StartServer(std::move(options));
    ASSERT_NE(server_, nullptr);
    client_ = ConnectClient(server_->port());
    stub_ = Connect(server_->port());
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<v1::TensorOps::Stub> stub_;
};

TEST_F(StoreServiceTest, PutGetRoundTripsWithChunksOfAnySize) {
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

TEST_F(StoreServiceTest, UploadIsVisibleOnlyAfterTheClientHalfCloses) {
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

TEST_F(StoreServiceTest, CancelledOrIncompleteUploadLeavesNothing) {
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

TEST_F(StoreServiceTest, OverwriteAndExpectedVersionRules) {
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

TEST_F(StoreServiceTest, DeleteListAndInfo) {
  const std::vector<float> values = Floats(6);
  ASSERT_TRUE(client_->PutTensor("b", TensorView(DataType::kFloat32, {2, 3}, values.data())).ok());
  ASSERT_TRUE(client_->PutTensor("a", TensorView(DataType::kFloat32, {6}, values.data())).ok());
  absl::StatusOr<std::vector<v1::TensorInfo>> list = client_->ListTensors();
  ASSERT_TRUE(list.ok()) << list.status();
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].name(), "a");
  EXPECT_EQ((*list)[1].name(), "b");
  EXPECT_EQ((*list)[1].device(), "cpu");
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

TEST_F(StoreServiceTest, UploadBeyondTheLimitIsResourceExhaustedNamingTheFlag) {
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

TEST_F(StoreServiceTest, UploadOverTheRankLimitIsRefused) {
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

TEST_F(StoreServiceTest, EveryOpGivesTheSameBytesWithItsArgumentsByReference) {
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

TEST_F(StoreServiceTest, MissingAndStaleReferencesNameTheArgument) {
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

  // A reference that also carries a tensor.
  gather->mutable_input()->set_dtype(v1::DATA_TYPE_FLOAT32);
  absl::StatusOr<Tensor> both = client_->Run(request);
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(both.status().message(), HasSubstr("gather: input refers to stored tensor \"w\""));
}

TEST_F(StoreServiceTest, BackwardReadsStoredTensors) {
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

TEST_F(StoreServiceTest, RunStreamReadsStoredTensors) {
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

TEST_F(StoreServiceTest, StoreCallsAreCountedInTheMetrics) {
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

}  // namespace
}  // namespace tensorops
