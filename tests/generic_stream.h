// Test helpers for untyped gRPC calls: byte buffers from and to strings, and GenericStream, one
// streaming call driven through a CompletionQueue one operation at a time (GenericStub has no
// synchronous streaming form). The tests use them where no generated stub exists (health,
// reflection) or where they must hold a call at a chosen step.
#ifndef TENSOROPS_TESTS_GENERIC_STREAM_H_
#define TENSOROPS_TESTS_GENERIC_STREAM_H_

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"

namespace tensorops::testing {

// ToByteBuffer wraps serialized bytes for a generic call.
inline grpc::ByteBuffer ToByteBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// ToString joins a generic call's reply into one string.
inline std::string ToString(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& slice : slices) {
    bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
  }
  return bytes;
}

// GenericStream is one untyped call to `method`. Every step waits at most kStepTimeout and then
// cancels the call (and fails the test); the whole call has a deadline of twice that. The
// destructor cancels a call that has not finished.
class GenericStream {
 public:
  static constexpr std::chrono::seconds kStepTimeout{30};

  GenericStream(const std::shared_ptr<grpc::Channel>& channel, const std::string& method)
      : stub_(channel) {
    context_.set_deadline(std::chrono::system_clock::now() + 2 * kStepTimeout);
    call_ = stub_.PrepareCall(&context_, method, &cq_);
  }

  GenericStream(const GenericStream&) = delete;
  GenericStream& operator=(const GenericStream&) = delete;

  ~GenericStream() {
    if (!finished_) {
      context_.TryCancel();
      Finish();
    }
    cq_.Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (cq_.Next(&tag, &ok)) {
    }
  }

  bool Start() {
    call_->StartCall(this);
    return Await();
  }
  bool Write(const std::string& message) {
    outgoing_ = ToByteBuffer(message);
    call_->Write(outgoing_, this);
    return Await();
  }
  bool WritesDone() {
    call_->WritesDone(this);
    return Await();
  }
  // ReadInitialMetadata waits for the server's response headers.
  bool ReadInitialMetadata() {
    call_->ReadInitialMetadata(this);
    return Await();
  }
  // Read returns the next message; nullopt at the end of the stream.
  std::optional<std::string> Read() {
    grpc::ByteBuffer incoming;
    call_->Read(&incoming, this);
    if (!Await()) return std::nullopt;
    return ToString(incoming);
  }
  void Cancel() { context_.TryCancel(); }
  grpc::Status Finish() {
    grpc::Status status;
    call_->Finish(&status, this);
    Await();
    finished_ = true;
    return status;
  }

 private:
  // Await waits for the one pending operation and returns whether it succeeded.
  bool Await() {
    void* tag = nullptr;
    bool ok = false;
    if (cq_.AsyncNext(&tag, &ok, std::chrono::system_clock::now() + kStepTimeout) !=
        grpc::CompletionQueue::GOT_EVENT) {
      ADD_FAILURE() << "a streaming call's operation took longer than the test allows";
      context_.TryCancel();
      cq_.Next(&tag, &ok);
      return false;
    }
    return ok;
  }

  grpc::GenericStub stub_;
  grpc::ClientContext context_;
  grpc::CompletionQueue cq_;
  std::unique_ptr<grpc::GenericClientAsyncReaderWriter> call_;
  grpc::ByteBuffer outgoing_;
  bool finished_ = false;
};

}  // namespace tensorops::testing

#endif  // TENSOROPS_TESTS_GENERIC_STREAM_H_
