// The call core (server/core/op_call.h) as clients meet it: a unary call and the same call sent as
// a RunStream request end the same way and count the same in the metrics, including a call
// cancelled while it waits for a worker; and every RPC answers a body that is not its request
// message with INVALID_ARGUMENT naming the message type (server/rpc/parsed_request.h).
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "proto/op_list.h"
#include "server/server.h"
#include "tests/blocking_work.h"
#include "tests/service_test_util.h"
#include "tests/wait_for.h"

namespace tensorops {
namespace {

using ::tensorops::testing::Connect;
using ::tensorops::testing::MakeTensor;
using ::tensorops::testing::WaitFor;
using ::testing::HasSubstr;

// Counters are the samples of the call counters in a scrape, by their full line key (name and
// labels): the numbers both paths must move alike.
using Counters = std::map<std::string, double>;

Counters CallCounters(Metrics& metrics) {
  Counters counters;
  for (absl::string_view line : absl::StrSplit(metrics.Scrape(), '\n', absl::SkipEmpty())) {
    if (!absl::StartsWith(line, "tensorops_requests_total") &&
        !absl::StartsWith(line, "tensorops_rejected_total")) {
      continue;
    }
    const size_t space = line.rfind(' ');
    double value = 0;
    EXPECT_TRUE(absl::SimpleAtod(line.substr(space + 1), &value)) << line;
    counters[std::string(line.substr(0, space))] = value;
  }
  return counters;
}

// Delta is what moved from `before` to `after` (counters only grow).
Counters Delta(const Counters& before, const Counters& after) {
  Counters delta;
  for (const auto& [key, value] : after) {
    const auto it = before.find(key);
    const double moved = value - (it == before.end() ? 0 : it->second);
    if (moved != 0) delta[key] = moved;
  }
  return delta;
}

std::unique_ptr<Server> StartServer(int64_t max_elements) {
  ServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.threads = 2;
  options.queue.max_concurrent_calls = 1;
  options.limits.max_elements = max_elements;
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

v1::OpRequest Gather(std::vector<int64_t> index, int64_t axis = 0, int64_t numel = 4) {
  v1::OpRequest request;
  v1::GatherRequest* gather = ops::Mutable<ops::Gather>(&request);
  *gather->mutable_input() = MakeTensor<float>({numel}, std::vector<float>(numel, 1.5f));
  *gather->mutable_index() = MakeTensor<int64_t>({static_cast<int64_t>(index.size())}, index);
  gather->set_axis(axis);
  return request;
}

// Outcome is how a call ended, as its client sees it.
struct Outcome {
  int code = 0;
  std::string message;
  std::string result;
  bool operator==(const Outcome&) const = default;
};

std::ostream& operator<<(std::ostream& os, const Outcome& outcome) {
  return os << outcome.code << " '" << outcome.message << "' (" << outcome.result.size()
            << " result bytes)";
}

// The calls both paths get: a success, a planning error, a kernel error found while running, a
// tensor over the server's limits, and a request with no op.
std::vector<v1::OpRequest> Calls() {
  return {Gather({3, 0, 1}), Gather({0}, /*axis=*/2), Gather({0, 4}), Gather({0}, 0, 2000),
          v1::OpRequest()};
}

TEST(CallCoreTest, UnaryAndStreamEndAlikeAndCountAlike) {
  std::unique_ptr<Server> server = StartServer(/*max_elements=*/1000);
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->port());
  const std::vector<v1::OpRequest> calls = Calls();

  const Counters start = CallCounters(server->metrics());
  std::vector<Outcome> unary;
  for (const v1::OpRequest& call : calls) {
    grpc::ClientContext context;
    v1::OpResponse response;
    const grpc::Status status = stub->Run(&context, call, &response);
    unary.push_back({status.error_code(), status.error_message(), response.result().data()});
  }
  Counters after_unary;
  // Calls are counted when gRPC is done with them, just after the client has its answer.
  ASSERT_TRUE(WaitFor([&] {
    after_unary = CallCounters(server->metrics());
    double total = 0;
    for (const auto& [key, value] : Delta(start, after_unary)) {
      if (absl::StartsWith(key, "tensorops_requests_total")) total += value;
    }
    return total == static_cast<double>(calls.size());
  }));

  std::vector<Outcome> streamed(calls.size());
  {
    grpc::ClientContext context;
    auto stream = stub->RunStream(&context);
    for (size_t i = 0; i < calls.size(); ++i) {
      v1::RunStreamRequest request;
      request.set_request_id(i);
      *request.mutable_op() = calls[i];
      ASSERT_TRUE(stream->Write(request));
    }
    stream->WritesDone();
    v1::RunStreamResponse response;
    while (stream->Read(&response)) {
      streamed[response.request_id()] = {response.error().code(), response.error().message(),
                                         response.result().data()};
    }
    ASSERT_TRUE(stream->Finish().ok());
  }
  Counters after_stream;
  const Counters unary_delta = Delta(start, after_unary);
  ASSERT_TRUE(WaitFor([&] {
    after_stream = CallCounters(server->metrics());
    return Delta(after_unary, after_stream) == unary_delta;
  })) << "the stream's calls counted differently";

  EXPECT_EQ(streamed, unary);
  EXPECT_EQ(unary[0].code, grpc::StatusCode::OK);
  EXPECT_EQ(unary[1].code, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(unary[2].code, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(unary[3].code, grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(unary[4].code, grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(unary_delta.at(R"(tensorops_rejected_total{reason="limit"})"), 1);
}

TEST(CallCoreTest, CancelledWhileQueuedEndsAlikeOnBothPaths) {
  std::unique_ptr<Server> server = StartServer(/*max_elements=*/1000);
  ASSERT_NE(server, nullptr);
  auto stub = Connect(server->port());
  // The only worker is busy, so each call waits in the queue until its client cancels it.
  testing::BlockingWork busy;
  ASSERT_TRUE(server->scheduler().Enqueue(&busy).ok());
  busy.WaitUntilStarted();
  const auto queued = [&] {
    return absl::StrContains(server->metrics().Scrape(), "\ntensorops_calls_queued 1\n");
  };

  const Counters start = CallCounters(server->metrics());
  grpc::Status unary_status;
  {
    grpc::ClientContext context;
    std::thread call([&] {
      v1::OpResponse response;
      unary_status = stub->Run(&context, Gather({1}), &response);
    });
    ASSERT_TRUE(WaitFor(queued));
    context.TryCancel();
    call.join();
  }
  Counters after_unary;
  ASSERT_TRUE(WaitFor([&] {
    after_unary = CallCounters(server->metrics());
    return Delta(start, after_unary).size() == 2;  // the call's code and the rejection
  }));

  grpc::Status stream_status;
  {
    grpc::ClientContext context;
    auto stream = stub->RunStream(&context);
    v1::RunStreamRequest request;
    *request.mutable_op() = Gather({1});
    ASSERT_TRUE(stream->Write(request));
    ASSERT_TRUE(WaitFor(queued));
    context.TryCancel();
    stream_status = stream->Finish();
  }
  const Counters unary_delta = Delta(start, after_unary);
  Counters after_stream;
  EXPECT_TRUE(WaitFor([&] {
    after_stream = CallCounters(server->metrics());
    return Delta(after_unary, after_stream) == unary_delta;
  })) << "the stream's request counted differently";
  busy.Release();

  EXPECT_EQ(unary_status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(stream_status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_EQ(unary_delta.at(R"(tensorops_rejected_total{reason="cancelled"})"), 1);
  EXPECT_EQ(
      unary_delta.at(R"(tensorops_requests_total{code="CANCELLED",device="none",op="gather"})"), 1);
}

// Three bytes that are no protobuf message: a field key with an unfinished varint.
constexpr char kGarbage[] = "\xff\xff\xff";

grpc::ByteBuffer GarbageBuffer() {
  grpc::Slice slice(kGarbage, sizeof(kGarbage) - 1);
  return grpc::ByteBuffer(&slice, 1);
}

// Every method whose client sends one message (unary and server-streaming: GetTensor's garbage
// request ends the stream before any response), of both services the server speaks.
TEST(MalformedRequestTest, EveryUnaryRpcAnswersInvalidArgumentNamingTheMessage) {
  std::unique_ptr<Server> server = StartServer(/*max_elements=*/1000);
  ASSERT_NE(server, nullptr);
  grpc::GenericStub stub(grpc::CreateChannel(absl::StrFormat("127.0.0.1:%d", server->port()),
                                             grpc::InsecureChannelCredentials()));
  // Each service with its number of methods whose client streams (RunStream and PutTensor;
  // ModelStreamInfer).
  const std::pair<std::string, int> services[] = {
      {v1::TensorOps::service_full_name(), 2},
      {inference::GRPCInferenceService::service_full_name(), 1}};
  for (const auto& [name, client_streaming] : services) {
    const google::protobuf::ServiceDescriptor* service =
        google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(name);
    ASSERT_NE(service, nullptr) << name;
    int unary = 0;
    for (int i = 0; i < service->method_count(); ++i) {
      const google::protobuf::MethodDescriptor* method = service->method(i);
      if (method->client_streaming()) continue;
      ++unary;
      SCOPED_TRACE(method->full_name());
      grpc::ClientContext context;
      const grpc::ByteBuffer request = GarbageBuffer();
      grpc::ByteBuffer response;
      absl::Notification done;
      grpc::Status status;
      stub.UnaryCall(&context, absl::StrFormat("/%s/%s", service->full_name(), method->name()),
                     grpc::StubOptions(), &request, &response, [&](grpc::Status s) {
                       status = std::move(s);
                       done.Notify();
                     });
      done.WaitForNotification();
      EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
      EXPECT_THAT(
          status.error_message(),
          HasSubstr("(3 bytes) is not a valid " + method->input_type()->full_name() + " message"));
    }
    EXPECT_EQ(unary, service->method_count() - client_streaming) << name;
  }
}

// RawCall is a streaming call of `method` through gRPC's generic stub, so that a test can send
// bytes that are no valid message; Step waits for the operation tagged `tag`.
class RawCall {
 public:
  RawCall(int port, const std::string& method)
      : stub_(grpc::CreateChannel(absl::StrFormat("127.0.0.1:%d", port),
                                  grpc::InsecureChannelCredentials())),
        call_(stub_.PrepareCall(&context_, method, &queue_)) {
    call_->StartCall(Tag(1));
    Step(1);
  }
  ~RawCall() {
    queue_.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (queue_.Next(&tag, &ok)) {
    }
  }

  grpc::GenericClientAsyncReaderWriter& operator*() { return *call_; }
  grpc::GenericClientAsyncReaderWriter* operator->() { return call_.get(); }
  static void* Tag(intptr_t n) { return reinterpret_cast<void*>(n); }
  // Step waits for the operation tagged `n` and returns whether it succeeded.
  bool Step(intptr_t n) {
    void* tag = nullptr;
    bool ok = false;
    EXPECT_TRUE(queue_.Next(&tag, &ok));
    EXPECT_EQ(tag, Tag(n));
    return ok;
  }

 private:
  grpc::GenericStub stub_;
  grpc::CompletionQueue queue_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
};

TEST(MalformedRequestTest, PutTensorEndsInvalidArgumentNamingTheMessage) {
  std::unique_ptr<Server> server = StartServer(/*max_elements=*/1000);
  ASSERT_NE(server, nullptr);
  RawCall call(server->port(), "/tensorops.v1.TensorOps/PutTensor");
  call->WriteLast(GarbageBuffer(), grpc::WriteOptions(), RawCall::Tag(2));
  call.Step(2);
  grpc::ByteBuffer response;
  call->Read(&response, RawCall::Tag(3));
  call.Step(3);
  grpc::Status status;
  call->Finish(&status, RawCall::Tag(4));
  call.Step(4);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(),
              HasSubstr("(3 bytes) is not a valid tensorops.v1.PutTensorRequest message"));
  EXPECT_EQ(server->store().tensor_count(), 0);
}

// A unary call whose request never arrives (its client cancelled it while sending, or closed its
// side without sending) reaches the handler with no message: it is counted CANCELLED, not as a bad
// request nobody sent (found by the soak run, where cancelled uploads were counted
// INVALID_ARGUMENT).
TEST(MalformedRequestTest, AUnaryCallWhoseRequestNeverArrivedIsCancelled) {
  std::unique_ptr<Server> server = StartServer(/*max_elements=*/1000);
  ASSERT_NE(server, nullptr);
  const Counters start = CallCounters(server->metrics());
  RawCall call(server->port(), "/tensorops.v1.TensorOps/Gather");
  call->WritesDone(RawCall::Tag(2));
  call.Step(2);
  grpc::Status status;
  call->Finish(&status, RawCall::Tag(3));
  call.Step(3);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED) << status.error_message();
  EXPECT_THAT(status.error_message(),
              HasSubstr("no tensorops.v1.GatherRequest message arrived: the client cancelled"));
  Counters delta;
  ASSERT_TRUE(WaitFor([&] {
    delta = Delta(start, CallCounters(server->metrics()));
    return !delta.empty();
  }));
  ASSERT_EQ(delta.size(), 1u);
  EXPECT_THAT(delta.begin()->first, HasSubstr("code=\"CANCELLED\""));
}

TEST(MalformedRequestTest, RunStreamEndsInvalidArgumentAfterAnsweringWhatItRead) {
  std::unique_ptr<Server> server = StartServer(/*max_elements=*/1000);
  ASSERT_NE(server, nullptr);
  RawCall call(server->port(), "/tensorops.v1.TensorOps/RunStream");
  // A good request first: it is answered before the stream ends.
  v1::RunStreamRequest good;
  good.set_request_id(7);
  *good.mutable_op() = Gather({2});
  grpc::ByteBuffer good_bytes;
  bool own = false;
  ASSERT_TRUE(
      grpc::SerializationTraits<v1::RunStreamRequest>::Serialize(good, &good_bytes, &own).ok());
  call->Write(good_bytes, RawCall::Tag(2));
  call.Step(2);
  grpc::ByteBuffer answer;
  call->Read(&answer, RawCall::Tag(3));
  ASSERT_TRUE(call.Step(3));
  v1::RunStreamResponse response;
  ASSERT_TRUE(
      grpc::SerializationTraits<v1::RunStreamResponse>::Deserialize(&answer, &response).ok());
  EXPECT_EQ(response.request_id(), 7u);
  EXPECT_TRUE(response.has_result());

  call->Write(GarbageBuffer(), RawCall::Tag(4));
  call.Step(4);
  grpc::Status status;
  call->Finish(&status, RawCall::Tag(5));
  call.Step(5);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(),
              HasSubstr("(3 bytes) is not a valid tensorops.v1.RunStreamRequest message"));
}

}  // namespace
}  // namespace tensorops
