// stream_fuzzer: RunStream and ModelStreamInfer on a real server in this process, fed a sequence
// of messages the input chooses: request messages built from its bytes, or raw bytes that may not
// parse at all. The stream must end within a deadline (no hang), with a status a client can act
// on, having answered every request read before any malformed one.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "fuzz/fuzz_checks.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "inference/grpc_service.pb.h"
#include "server/server.h"
#include "spdlog/spdlog.h"
#include "tensorops/v1/generic.pb.h"

namespace {

// One server for the whole run (starting one per input would dominate the time).
struct Fixture {
  Fixture() {
    tensorops::ServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    options.threads = 2;
    options.limits.max_elements = tensorops::fuzz::kLimits.max_elements;
    options.limits.max_rank = tensorops::fuzz::kLimits.max_rank;
    options.limits.max_message_bytes = 1 << 20;
    options.limits.max_stream_in_flight = 4;
    absl::StatusOr<std::unique_ptr<tensorops::Server>> started = tensorops::Server::Start(options);
    if (!started.ok()) tensorops::fuzz::Fail("the server did not start:", started.status());
    server = std::move(*started);
    stub = std::make_unique<grpc::GenericStub>(grpc::CreateChannel(
        absl::StrFormat("127.0.0.1:%d", server->port()), grpc::InsecureChannelCredentials()));
  }
  std::unique_ptr<tensorops::Server> server;
  std::unique_ptr<grpc::GenericStub> stub;
};

grpc::ByteBuffer Buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// Wait takes the next event of `queue` and returns whether it succeeded.
bool Wait(grpc::CompletionQueue& queue) {
  void* tag = nullptr;
  bool ok = false;
  if (!queue.Next(&tag, &ok)) tensorops::fuzz::Fail("the completion queue shut down");
  return ok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Fixture* const fixture = new Fixture;
  FuzzedDataProvider input(data, size);
  const bool kserve = input.ConsumeBool();
  grpc::ClientContext context;
  // Generous: a stream of a few small requests takes milliseconds; only a hang reaches it.
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  grpc::CompletionQueue queue;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call =
      fixture->stub->PrepareCall(&context,
                                 kserve ? "/inference.GRPCInferenceService/ModelStreamInfer"
                                        : "/tensorops.v1.TensorOps/RunStream",
                                 &queue);
  call->StartCall(nullptr);
  if (!Wait(queue)) tensorops::fuzz::Fail("the stream did not start");
  int well_formed_before_malformed = 0;
  bool malformed = false;
  bool open = true;
  const int messages = input.ConsumeIntegralInRange<int>(0, 6);
  for (int i = 0; i < messages && open; ++i) {
    // Mostly bytes that parse as the request (a request_id and an op, or a model request), the
    // rest raw.
    const std::string bytes = input.ConsumeRandomLengthString(4096);
    bool parses = false;
    if (kserve) {
      inference::ModelInferRequest request;
      parses = request.ParseFromString(bytes);
    } else {
      tensorops::v1::RunStreamRequest request;
      parses = request.ParseFromString(bytes);
    }
    call->Write(Buffer(bytes), nullptr);
    open = Wait(queue);
    if (!malformed) {
      if (parses) {
        ++well_formed_before_malformed;
      } else {
        malformed = true;
      }
    }
  }
  if (open) {
    call->WritesDone(nullptr);
    Wait(queue);
  }
  int answers = 0;
  for (;;) {
    grpc::ByteBuffer response;
    call->Read(&response, nullptr);
    if (!Wait(queue)) break;
    ++answers;
  }
  grpc::Status status;
  call->Finish(&status, nullptr);
  Wait(queue);
  queue.Shutdown();
  while (true) {
    void* tag = nullptr;
    bool ok = false;
    if (!queue.Next(&tag, &ok)) break;
  }
  switch (status.error_code()) {
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      tensorops::fuzz::Fail("the stream did not end (hang)");
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::UNKNOWN:
      tensorops::fuzz::Fail("the stream ended with an internal error");
    default:
      break;
  }
  // Every request read before a malformed one is answered; the stream ends without the rest.
  if (status.ok() && (malformed || answers != well_formed_before_malformed)) {
    tensorops::fuzz::Fail("an OK stream that did not answer exactly its requests");
  }
  if (malformed && status.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
      answers != well_formed_before_malformed) {
    tensorops::fuzz::Fail("a malformed stream that did not answer the requests before it");
  }
  return 0;
}
