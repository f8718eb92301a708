#include "server/tensorops_v1/run_stream.h"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"

namespace tensorops {

void StreamRegistry::CloseAll() {
  std::vector<StreamBase*> streams;
  {
    absl::MutexLock lock(&mu_);
    closed_ = true;
    closing_ = streams_;
    for (StreamBase* stream : streams_) {
      stream->Ref();
      streams.push_back(stream);
    }
  }
  // Outside the registry's lock: a stream that ends here removes itself from the registry.
  for (StreamBase* stream : streams) {
    stream->CloseForShutdown();
    stream->Unref();
  }
}

bool StreamRegistry::Add(StreamBase* stream) {
  absl::MutexLock lock(&mu_);
  streams_.insert(stream);
  return closed_;
}

void StreamRegistry::Remove(StreamBase* stream) {
  absl::MutexLock lock(&mu_);
  streams_.erase(stream);
  closing_.erase(stream);
}

bool StreamRegistry::AwaitClosed(absl::Time deadline) {
  absl::MutexLock lock(&mu_);
  return mu_.AwaitWithDeadline(
      absl::Condition(
          +[](std::set<StreamBase*>* closing) { return closing->empty(); }, &closing_),
      deadline);
}

RunStreamProtocol::Call::Call(v1::RunStreamRequest message) : message_(std::move(message)) {
  response_.set_request_id(message_.request_id());
}

std::string_view RunStreamProtocol::Call::op_name() const { return OpName(message_.op()); }

std::string RunStreamProtocol::Call::LogName() const {
  return absl::StrFormat("RunStream request %d", message_.request_id());
}

absl::StatusOr<PreparedOp> RunStreamProtocol::Call::Prepare(const ServingContext& serving,
                                                            const StoredTensors& stored) {
  return PrepareOp(message_.op(), serving.limits, response_.mutable_result(), InputReuse::kNo,
                   stored);
}

void RunStreamProtocol::Call::SetError(const absl::Status& status) {
  response_.clear_result();
  response_.mutable_error()->set_code(static_cast<int32_t>(status.code()));
  response_.mutable_error()->set_message(std::string(status.message()));
}

}  // namespace tensorops
