#include "server/tensorops_v1/tensor_ops_service.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "google/protobuf/descriptor.h"
#include "kernels/status_macros.h"
#include "proto/codec.h"
#include "proto/grpc_status.h"
#include "proto/op_list.h"
#include "server/core/memory_budget.h"
#include "server/core/prepared_op.h"
#include "server/core/stored_operands.h"
#include "server/rpc/parsed_request.h"
#include "server/rpc/quick_unary_call.h"
#include "server/shared_memory/region_handler.h"
#include "server/store/tensor_store.h"
#include "server/tensorops_v1/put_tensor_message.h"
#include "tensorops/v1/store.pb.h"

namespace tensorops {
namespace {

// TensorOpsDescriptor describes the TensorOps service.
const google::protobuf::ServiceDescriptor* TensorOpsDescriptor() {
  static const google::protobuf::ServiceDescriptor* const service =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          v1::TensorOps::service_full_name());
  return service;
}

// MethodIndex is `method`'s index in TensorOps.
int MethodIndex(std::string_view method) {
  return tensorops::MethodIndex(TensorOpsDescriptor(), method);
}

// FullMethodName is `method` of TensorOps as gRPC names it in a call.
std::string FullMethodName(std::string_view method) {
  return tensorops::FullMethodName(TensorOpsDescriptor(), method);
}

// GetTensor's data chunks: kDefaultChunkBytes when the client leaves chunk_bytes 0, and never more
// than kMaxChunkBytes, nor more than fits a message under the server's limit. Larger chunks only
// slowed downloads (1 GiB to the Python client: 16 MiB chunks 0.6x and 64 MiB 0.25-0.4x the speed
// of 4 MiB ones, in two independent measurements): gRPC hands a message over only whole, so the
// client's copy of one chunk stops overlapping the transfer of the next, and most of the client's
// time goes to waiting for the next message.
constexpr int64_t kDefaultChunkBytes = int64_t{4} << 20;
constexpr int64_t kMaxChunkBytes = int64_t{4} << 20;
// Room for a GetTensorResponse's framing around its data (field key and length).
constexpr int64_t kChunkFramingBytes = 64;

// kRegionStagingBytes: the host buffer a stored tensor's bytes pass through between a store in
// device memory and a CUDA shared-memory region (no device-to-device path yet).
constexpr int64_t kRegionStagingBytes = int64_t{64} << 20;

// ToProto describes a stored tensor on the wire.
void ToProto(const TensorStore::Metadata& metadata, v1::TensorInfo* info) {
  info->set_name(metadata.name);
  info->set_dtype(wire::DataTypeToProto(metadata.dtype));
  info->mutable_shape()->Assign(metadata.shape.begin(), metadata.shape.end());
  info->set_bytes(metadata.bytes);
  info->set_version(metadata.version);
  info->set_device(metadata.device);
  info->set_created_unix_nanos(absl::ToUnixNanos(metadata.created));
  info->set_updated_unix_nanos(absl::ToUnixNanos(metadata.updated));
}

// OptionalVersion reads a proto3 `optional int64` version field.
template <typename Message, typename Has, typename Get>
std::optional<int64_t> OptionalVersion(const Message& message, Has has, Get get) {
  if (!(message.*has)()) return std::nullopt;
  return (message.*get)();
}

// PutTensorReactor receives one PutTensor stream: the header begins an upload in the store, each
// chunk is written into it as it arrives (the one copy, from gRPC's buffers into the store's
// bytes: server/tensorops_v1/put_tensor_message.h), and the client's half-close commits it. Any
// error, a cancelled call or a broken stream destroys the upload uncommitted, which leaves nothing
// behind. Deletes itself when gRPC is done with it.
class PutTensorReactor final : public grpc::ServerReadReactor<PutTensorMessage> {
 public:
  PutTensorReactor(const ServingContext& serving, grpc::CallbackServerContext* context,
                   v1::PutTensorResponse* response)
      : serving_(serving),
        context_(context),
        response_(response),
        ns_(StoreNamespace(serving, *context)) {
    // The token first: an unauthenticated caller's bytes are never read.
    if (absl::Status auth = Authenticate(serving_, *context_); !auth.ok()) {
      End(auth);
      return;
    }
    StartRead(&message_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The client half-closed, or the call broke or was cancelled: only the first commits.
      if (context_->IsCancelled()) {
        End(absl::CancelledError("put_tensor: the call was cancelled; nothing was stored"));
      } else {
        End(Commit());
      }
      return;
    }
    request_bytes_ += static_cast<int64_t>(message_.bytes);
    if (absl::Status status = Consume(); !status.ok()) {
      End(status);
      return;
    }
    StartRead(&message_);
  }

  void OnDone() override { delete this; }

 private:
  // Consume takes one message of the stream.
  absl::Status Consume() {
    // gRPC receives more than --max_message_bytes, so that a larger message is refused here,
    // naming the flag (server/rpc/parsed_request.h).
    if (static_cast<int64_t>(message_.bytes) > serving_.limits.max_bytes) {
      return MessageTooLargeError(v1::PutTensorRequest::descriptor()->full_name(), message_.bytes,
                                  serving_.limits.max_bytes,
                                  "send the tensor's data in smaller chunks");
    }
    if (message_.is_data) {
      TENSOROPS_RETURN_IF_ERROR(CheckChunk(static_cast<int64_t>(message_.data_bytes)));
      return message_.ForEachDataPiece([this](std::string_view piece) {
        return upload_->Write(upload_->bytes_received(), piece);
      });
    }
    TENSOROPS_RETURN_IF_ERROR(RequestError(message_.parsed, serving_.limits.max_bytes));
    const v1::PutTensorRequest& request = message_.parsed.message;
    if (!upload_.has_value()) {
      if (request.part_case() != v1::PutTensorRequest::kHeader) return NoHeaderError();
      return Begin(request.header());
    }
    if (request.part_case() != v1::PutTensorRequest::kData) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "put_tensor: tensor \"%s\" already has its header; every later message must be data",
          upload_->name()));
    }
    const std::string& data = request.data();
    TENSOROPS_RETURN_IF_ERROR(CheckChunk(static_cast<int64_t>(data.size())));
    return upload_->Write(upload_->bytes_received(), data);
  }

  // CheckChunk checks that a data chunk of `size` bytes may come now: after the header, and
  // within the tensor's bytes.
  absl::Status CheckChunk(int64_t size) const {
    if (!upload_.has_value()) return NoHeaderError();
    if (from_shared_memory_) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "put_tensor: tensor \"%s\" takes its bytes from the header's shared-memory region; "
          "send no data chunks after such a header",
          upload_->name()));
    }
    if (size > upload_->bytes() - upload_->bytes_received()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "put_tensor: tensor \"%s\" is %d bytes, but the chunks sent hold more (%d so far)",
          upload_->name(), upload_->bytes(), upload_->bytes_received() + size));
    }
    return absl::OkStatus();
  }

  static absl::Status NoHeaderError() {
    return absl::InvalidArgumentError(
        "put_tensor: the first message must be the header (name, dtype, shape); the tensor's "
        "data follows it");
  }

  // Begin checks the header against the server's limits and begins the upload. The message size
  // limit does not apply: the data arrives in chunks of the client's choosing.
  absl::Status Begin(const v1::PutTensorHeader& header) {
    TENSOROPS_ASSIGN_OR_RETURN(DataType dtype,
                               wire::DataTypeFromProto(header.dtype(), "put_tensor", "header"));
    wire::DecodeLimits limits = serving_.limits;
    limits.max_bytes = std::numeric_limits<int64_t>::max();
    const Shape shape(header.shape().begin(), header.shape().end());
    TENSOROPS_RETURN_IF_ERROR(
        wire::CheckShape(dtype, shape, "put_tensor", "header", limits).status());
    TensorStore::UploadOptions options{
        .overwrite = header.overwrite(),
        .expected_version = OptionalVersion(header, &v1::PutTensorHeader::has_expected_version,
                                            &v1::PutTensorHeader::expected_version)};
    TENSOROPS_ASSIGN_OR_RETURN(
        TensorStore::Upload upload,
        serving_.store->BeginUpload(ns_, header.name(), dtype, shape, options));
    upload_.emplace(std::move(upload));
    if (header.has_shared_memory()) {
      // The bytes are in a region: one copy into the store, checked before anything commits.
      from_shared_memory_ = true;
      const std::string_view what = "put_tensor: header.shared_memory";
      TENSOROPS_ASSIGN_OR_RETURN(
          const RegionBytes source,
          FindBytes(serving_.shared_memory, ns_, header.shared_memory(), upload_->bytes(),
                    /*exactly=*/true, what));
      if (source.region->on_device() && upload_->memory().host_accessible()) {
        // A CUDA region into a host store: one copy from the device into the store's bytes.
        TENSOROPS_ASSIGN_OR_RETURN(const absl::Span<char> target,
                                   upload_->MutableChunk(0, upload_->bytes()));
        TENSOROPS_RETURN_IF_ERROR(CopyFromRegion({.region = source.region, .data = source.data},
                                                 target.data(), upload_->bytes()));
      } else if (source.region->on_device()) {
        // A CUDA region into a device store reaches it through the host, a staging chunk at a
        // time.
        std::string staged;
        for (int64_t at = 0; at < upload_->bytes(); at += kRegionStagingBytes) {
          const int64_t bytes = std::min(kRegionStagingBytes, upload_->bytes() - at);
          staged.resize(static_cast<size_t>(bytes));
          TENSOROPS_RETURN_IF_ERROR(CopyFromRegion(
              {.region = source.region, .data = source.data + at}, staged.data(), bytes));
          TENSOROPS_RETURN_IF_ERROR(upload_->Write(at, staged));
        }
      } else {
        TENSOROPS_RETURN_IF_ERROR(upload_->Write(
            0, std::string_view(source.data, static_cast<size_t>(upload_->bytes()))));
      }
      TENSOROPS_RETURN_IF_ERROR(source.region->CheckIntact(what));
    }
    return absl::OkStatus();
  }

  // Commit makes the upload visible and describes it in the response.
  absl::Status Commit() {
    if (!upload_.has_value()) {
      return absl::InvalidArgumentError(
          "put_tensor: the stream ended without a header (name, dtype, shape)");
    }
    TENSOROPS_ASSIGN_OR_RETURN(const int64_t version, upload_->Commit());
    v1::TensorInfo* info = response_->mutable_info();
    if (upload_->stored().has_value()) {
      ToProto(*upload_->stored(), info);
      return absl::OkStatus();
    }
    // A retry whose first attempt stored the value: the name's value if it is still at that
    // version, else what this call would have stored.
    absl::StatusOr<TensorStore::Metadata> metadata = serving_.store->Info(ns_, upload_->name());
    if (metadata.ok() && metadata->version == version) {
      ToProto(*metadata, info);
      return absl::OkStatus();
    }
    const absl::Time now = absl::Now();
    ToProto(TensorStore::Metadata{.name = upload_->name(),
                                  .dtype = upload_->dtype(),
                                  .shape = upload_->shape(),
                                  .bytes = upload_->bytes(),
                                  .version = version,
                                  .device = serving_.store->device(),
                                  .created = now,
                                  .updated = now},
            info);
    return absl::OkStatus();
  }

  // End finishes the call once with `status`; an uncommitted upload goes at once.
  void End(const absl::Status& status) {
    upload_.reset();
    if (!status.ok()) response_->Clear();
    // Counted before Finish: once the client has its answer, the metrics include the call.
    FinishQuickCall(serving_, *context_, "PutTensor", "put_tensor", start_, status, request_bytes_,
                    static_cast<int64_t>(response_->ByteSizeLong()));
    Finish(wire::ToGrpcStatus(status));
  }

  const ServingContext& serving_;
  grpc::CallbackServerContext* const context_;
  v1::PutTensorResponse* const response_;
  const std::string ns_;
  const absl::Time start_ = absl::Now();
  PutTensorMessage message_;
  std::optional<TensorStore::Upload> upload_;
  // The header placed the bytes in shared memory: no data chunks may follow.
  bool from_shared_memory_ = false;
  int64_t request_bytes_ = 0;
};

// GetTensorReactor sends one tensor: its TensorInfo, then its bytes in chunks, every chunk of the
// version the info names. It never holds the tensor's read lock while the client reads: a client
// that stops reading must not hold off every update of the tensor, and a gRPC thread must not
// wait long for the lock (an update waiting for a stalled stream, and that stream waiting for a
// gRPC thread, would wait forever). A tensor of at most --store_download_snapshot_bytes is
// copied whole under the one read lock that opens the download (its bytes held against
// --max_memory_bytes), and the chunks come from the copy: no update can abort it, however long
// the client takes. A larger tensor (or one the memory budget cannot copy) is read chunk by chunk,
// the lock held while each chunk is copied; when it changes before the last chunk, the stream
// ends ABORTED. Each lock is tried on the thread the download is on, and waited for on the
// blocking pool when an update holds it (an update waiting in the queue for a worker may hold it
// long, and a gRPC thread that waited would stall unrelated calls). Deletes itself when gRPC is
// done.
class GetTensorReactor final : public grpc::ServerWriteReactor<v1::GetTensorResponse> {
 public:
  GetTensorReactor(const ServingContext& serving, grpc::CallbackServerContext* context,
                   const Parsed<v1::GetTensorRequest>& request)
      : serving_(serving),
        context_(context),
        request_bytes_(static_cast<int64_t>(request.bytes)),
        ns_(StoreNamespace(serving, *context)) {
    if (const absl::Status status = Authenticate(serving_, *context_); !status.ok()) {
      End(status);
      return;
    }
    const absl::Status opened = Begin(request, FirstTry());
    if (IsStoreBusy(opened)) {
      // gRPC keeps the request until the call is done.
      if (!serving_.blocking_pool->Run(
              [this, &request] { SendOrEnd(Begin(request, LockWait::kWait), /*chunk=*/0); })) {
        End(PoolFullError(serving_));
      }
      return;
    }
    SendOrEnd(opened, /*chunk=*/0);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      End(absl::CancelledError("get_tensor: the client went away before the last chunk"));
      return;
    }
    if (offset_ >= bytes_) {
      End(absl::OkStatus());
      return;
    }
    response_.Clear();
    const int64_t size = std::min(chunk_bytes_, bytes_ - offset_);
    if (snapshot_.has_value()) {
      response_.set_data(snapshot_->data() + offset_, static_cast<size_t>(size));
      SendOrEnd(absl::OkStatus(), size);
      return;
    }
    const absl::Status read = ReadChunk(size, FirstTry());
    if (IsStoreBusy(read)) {
      // Some chunks are out already: the download must not fail now for want of room.
      serving_.blocking_pool->RunAdmitted(
          [this, size] { SendOrEnd(ReadChunk(size, LockWait::kWait), size); });
      return;
    }
    SendOrEnd(read, size);
  }

  void OnDone() override { delete this; }

 private:
  // TakeSnapshot copies the whole tensor out of `read` into snapshot_ when it is small enough
  // and the memory budget admits the copy; otherwise the download goes chunk by chunk.
  absl::Status TakeSnapshot(const TensorStore::ReadHandle& read) {
    if (bytes_ == 0 || bytes_ > serving_.download_snapshot_bytes) return absl::OkStatus();
    if (serving_.memory != nullptr) {
      absl::StatusOr<MemoryBudget::Reservation> held =
          serving_.memory->Reserve("get_tensor", 0, bytes_);
      if (!held.ok()) return absl::OkStatus();
      snapshot_memory_ = *std::move(held);
    }
    std::string& copy = snapshot_.emplace(static_cast<size_t>(bytes_), '\0');
    if (read.memory().host_accessible()) {
      std::memcpy(copy.data(), read.view().data(), copy.size());
      return absl::OkStatus();
    }
    if (absl::Status copied = read.CopyToHost(0, bytes_, copy.data()); !copied.ok()) {
      return absl::UnavailableError(absl::StrFormat(
          "get_tensor: tensor \"%s\": reading its bytes failed: %s",
          absl::CHexEscape(absl::string_view(name_.data(), name_.size())), copied.message()));
    }
    return absl::OkStatus();
  }

  // FirstTry is how a lock is first taken: tried, when there is a pool to wait on instead.
  LockWait FirstTry() const {
    return serving_.blocking_pool == nullptr ? LockWait::kWait : LockWait::kTry;
  }

  // SendOrEnd sends response_, which holds the info or the next `chunk` bytes, or ends the call
  // with `status`.
  void SendOrEnd(const absl::Status& status, int64_t chunk) {
    if (!status.ok()) {
      End(status);
      return;
    }
    offset_ += chunk;
    Send();
  }

  // ReadChunk puts the `size` bytes at offset_ of the tensor into response_, under a read lock
  // taken as `wait` says: ABORTED when the tensor is no longer the value and version the info
  // announced.
  absl::Status ReadChunk(int64_t size, LockWait wait) {
    absl::StatusOr<TensorStore::ReadHandle> read = serving_.store->Read(ns_, name_, version_, wait);
    if (IsStoreBusy(read.status())) return read.status();
    // The same version of the same value: a name deleted and stored again starts at version 1
    // again, with other bytes (and maybe fewer of them).
    if (read.ok() && read->serial() != serial_) {
      read = absl::NotFoundError("it was deleted and stored again");
    }
    if (!read.ok()) {
      return absl::AbortedError(absl::StrFormat(
          "get_tensor: tensor \"%s\" changed after %d of its %d bytes were sent (%s); get it "
          "again",
          absl::CHexEscape(absl::string_view(name_.data(), name_.size())), offset_, bytes_,
          read.status().message()));
    }
    if (read->memory().host_accessible()) {
      response_.set_data(static_cast<const char*>(read->view().data()) + offset_,
                         static_cast<size_t>(size));
      return absl::OkStatus();
    }
    if (absl::Status copied = CopyChunk(*read, size); !copied.ok()) {
      return absl::UnavailableError(absl::StrFormat(
          "get_tensor: tensor \"%s\": reading its bytes failed: %s",
          absl::CHexEscape(absl::string_view(name_.data(), name_.size())), copied.message()));
    }
    return absl::OkStatus();
  }

  // CopyChunk copies the chunk of `size` bytes at offset_ out of device memory into response_.
  absl::Status CopyChunk(const TensorStore::ReadHandle& read, int64_t size) {
    std::string* data = response_.mutable_data();
    data->resize(static_cast<size_t>(size));
    return read.CopyToHost(offset_, size, data->data());
  }

  // Begin reads the tensor, the lock taken as `wait` says (busy: nothing done but the request's
  // checks, so that it may run again), and puts its info in response_.
  absl::Status Begin(const Parsed<v1::GetTensorRequest>& parsed, LockWait wait) {
    TENSOROPS_RETURN_IF_ERROR(RequestError(parsed, serving_.limits.max_bytes));
    const v1::GetTensorRequest& request = parsed.message;
    if (request.chunk_bytes() < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "get_tensor: chunk_bytes = %d is negative (0 takes the server's default, %d)",
          request.chunk_bytes(), kDefaultChunkBytes));
    }
    chunk_bytes_ = request.chunk_bytes() == 0 ? kDefaultChunkBytes : request.chunk_bytes();
    chunk_bytes_ = std::max<int64_t>(1, std::min({chunk_bytes_, kMaxChunkBytes,
                                                  serving_.limits.max_bytes - kChunkFramingBytes}));
    TENSOROPS_ASSIGN_OR_RETURN(
        TensorStore::ReadHandle read,
        serving_.store->Read(ns_, request.name(),
                             OptionalVersion(request, &v1::GetTensorRequest::has_version,
                                             &v1::GetTensorRequest::version),
                             wait));
    name_ = read.name();
    version_ = read.version();
    serial_ = read.serial();
    bytes_ = read.bytes();
    if (request.has_shared_memory()) {
      // The bytes go into the region under this read lock; the stream carries the info alone.
      const std::string_view what = "get_tensor: shared_memory";
      TENSOROPS_ASSIGN_OR_RETURN(const RegionBytes target,
                                 FindBytes(serving_.shared_memory, ns_, request.shared_memory(),
                                           bytes_, /*exactly=*/false, what));
      if (read.memory().host_accessible()) {
        TENSOROPS_RETURN_IF_ERROR(CopyIntoRegion(target, read.view().data(), bytes_));
      } else if (!target.region->on_device()) {
        TENSOROPS_RETURN_IF_ERROR(read.CopyToHost(0, bytes_, target.data));
      } else {
        // From device memory into a CUDA region: through the host, a staging chunk at a time.
        std::string staged;
        for (int64_t at = 0; at < bytes_; at += kRegionStagingBytes) {
          const int64_t bytes = std::min(kRegionStagingBytes, bytes_ - at);
          staged.resize(static_cast<size_t>(bytes));
          TENSOROPS_RETURN_IF_ERROR(read.CopyToHost(at, bytes, staged.data()));
          TENSOROPS_RETURN_IF_ERROR(CopyIntoRegion(
              {.region = target.region, .data = target.data + at}, staged.data(), bytes));
        }
      }
      TENSOROPS_RETURN_IF_ERROR(target.region->CheckIntact(what));
      bytes_ = 0;
    }
    TENSOROPS_RETURN_IF_ERROR(TakeSnapshot(read));
    // The info of the version read; created/updated come from the store's current entry when it
    // is still that version.
    TensorStore::Metadata metadata{.name = read.name(),
                                   .dtype = read.dtype(),
                                   .shape = read.shape(),
                                   .bytes = read.bytes(),
                                   .version = read.version(),
                                   .device = serving_.store->device()};
    absl::StatusOr<TensorStore::Metadata> current = serving_.store->Info(ns_, request.name());
    if (current.ok() && current->version == metadata.version && current->serial == read.serial()) {
      metadata = *std::move(current);
    }
    ToProto(metadata, response_.mutable_info());
    return absl::OkStatus();
  }

  void Send() {
    response_bytes_ += static_cast<int64_t>(response_.ByteSizeLong());
    StartWrite(&response_);
  }

  // End finishes the call once.
  void End(const absl::Status& status) {
    // Counted before Finish: once the client has its answer, the metrics include the call.
    FinishQuickCall(serving_, *context_, "GetTensor", "get_tensor", start_, status, request_bytes_,
                    response_bytes_);
    Finish(wire::ToGrpcStatus(status));
  }

  const ServingContext& serving_;
  grpc::CallbackServerContext* const context_;
  const int64_t request_bytes_;
  const std::string ns_;
  const absl::Time start_ = absl::Now();
  // The whole tensor, copied at Begin (TakeSnapshot), and the budget its bytes hold; empty when
  // the download reads the store chunk by chunk.
  std::optional<std::string> snapshot_;
  MemoryBudget::Reservation snapshot_memory_;
  // The tensor being sent: its name, version, value (serial) and size.
  std::string name_;
  int64_t version_ = 0;
  uint64_t serial_ = 0;
  int64_t bytes_ = 0;
  int64_t chunk_bytes_ = kDefaultChunkBytes;
  // Bytes of the tensor sent so far.
  int64_t offset_ = 0;
  v1::GetTensorResponse response_;
  int64_t response_bytes_ = 0;
};

}  // namespace

TensorOpsService::TensorOpsService(const ServingContext& serving,
                                   v1::ServerInfoResponse server_info)
    : serving_(serving), server_info_(std::move(server_info)) {
  // Each op's own RPC. gRPC's request message belongs to the call until it is finished, and
  // nothing reads it after the op has run: the op may take its input bytes as the result.
  ops::ForEachOp([this]<typename Op>(Op) {
    HandleOpCall<typename Op::Request, typename Op::Response>(
        ops::Rpc<Op>(), ops::Name<Op>(),
        [this](const typename Op::Request& request, typename Op::Response* response,
               const StoredTensors& stored) {
          return PrepareOp(Op::kCase, request, serving_.limits, response->mutable_result(),
                           InputReuse::kMayTakeInput, stored);
        });
  });
  HandleOpCall<v1::OpRequest, v1::OpResponse>(
      "Run", "run",
      [this](const v1::OpRequest& request, v1::OpResponse* response, const StoredTensors& stored) {
        return PrepareOp(request, serving_.limits, response->mutable_result(),
                         InputReuse::kMayTakeInput, stored);
      });
  HandleOpCall<v1::BackwardRequest, v1::BackwardResponse>(
      "Backward", "backward",
      [this](const v1::BackwardRequest& request, v1::BackwardResponse* response,
             const StoredTensors& stored) {
        return PrepareBackward(request, serving_.limits, response, stored);
      });
  HandleServerInfo();
  HandleRunStream();
  HandleStoreRpcs();
  HandleSharedMemoryRpcs();
}

void TensorOpsService::BeginShutdown() { streams_.CloseAll(); }

template <typename Request, typename Response, typename Prepare>
void TensorOpsService::HandleOpCall(std::string_view method, std::string_view op, Prepare prepare) {
  op_call_methods_.push_back(FullMethodName(method));
  // The handler type is the one gRPC's generated code registers; it is ours to instantiate with
  // Parsed<Request>, so that a malformed body reaches the handler instead of being refused with
  // an empty UNIMPLEMENTED by gRPC.
  MarkMethodCallback(
      MethodIndex(method),
      new grpc::internal::CallbackUnaryHandler<Parsed<Request>, Response>(
          [this, method, op, prepare](grpc::CallbackServerContext* context,
                                      const Parsed<Request>* request, Response* response) {
            // Run and Backward name the op they carry in metrics; a malformed one has none.
            std::string_view op_name = op;
            if constexpr (std::is_same_v<Request, v1::OpRequest>) {
              if (request->ok) op_name = OpName(request->message);
            } else if constexpr (std::is_same_v<Request, v1::BackwardRequest>) {
              if (request->ok) op_name = BackwardOpName(request->message.op());
            }
            // The request, the response and the context live until the call is finished, so
            // the preparation may run later, on the blocking pool.
            return UnaryOpCall::Start(
                serving_, context, method, op_name,
                [this, context, request, response,
                 prepare](LockWait lock_wait) -> absl::StatusOr<PreparedOp> {
                  TENSOROPS_RETURN_IF_ERROR(RequestError(*request, serving_.limits.max_bytes));
                  const std::string ns = StoreNamespace(serving_, *context);
                  return prepare(request->message, response,
                                 StoredTensors{.store = serving_.store,
                                               .ns = ns,
                                               .regions = serving_.shared_memory,
                                               .lock_wait = lock_wait});
                },
                static_cast<int64_t>(request->bytes), response);
          }));
}

void TensorOpsService::HandleServerInfo() {
  MarkMethodCallback(
      MethodIndex("ServerInfo"),
      NewQuickUnaryHandler<v1::ServerInfoRequest, v1::ServerInfoResponse>(
          serving_, "ServerInfo", "server_info",
          [this](grpc::CallbackServerContext&, const v1::ServerInfoRequest&,
                 v1::ServerInfoResponse* response) {
            *response = server_info_;
            // The store's figures change with every call; the rest was fixed at
            // start-up.
            v1::StoreInfo* store = response->mutable_store();
            store->set_memory_bytes(serving_.store->limit_bytes());
            store->set_used_bytes(serving_.store->used_bytes());
            store->set_tensors(serving_.store->tensor_count());
            store->set_device(serving_.store->device());
            if (const DurableStore* durable = serving_.durable) {
              const DurableStoreStats stats = durable->stats();
              store->set_sync(std::string(StoreSyncName(durable->options().sync)));
              if (stats.snapshot_time != absl::InfinitePast()) {
                store->set_snapshot_unix_nanos(absl::ToUnixNanos(stats.snapshot_time));
              }
              store->set_log_bytes(stats.log_bytes);
            }
            return absl::OkStatus();
          }));
}

void TensorOpsService::HandleRunStream() {
  op_call_methods_.push_back(FullMethodName("RunStream"));
  MarkMethodCallback(
      MethodIndex("RunStream"),
      new grpc::internal::CallbackBidiHandler<Parsed<v1::RunStreamRequest>, v1::RunStreamResponse>(
          [this](grpc::CallbackServerContext* context) {
            return new RunStreamReactor(serving_, context, &streams_);
          }));
}

void TensorOpsService::HandleStoreRpcs() {
  MarkMethodCallback(
      MethodIndex("PutTensor"),
      new grpc::internal::CallbackClientStreamingHandler<PutTensorMessage, v1::PutTensorResponse>(
          [this](grpc::CallbackServerContext* context, v1::PutTensorResponse* response) {
            return new PutTensorReactor(serving_, context, response);
          }));
  MarkMethodCallback(
      MethodIndex("GetTensor"),
      new grpc::internal::CallbackServerStreamingHandler<Parsed<v1::GetTensorRequest>,
                                                         v1::GetTensorResponse>(
          [this](grpc::CallbackServerContext* context,
                 const Parsed<v1::GetTensorRequest>* request) {
            return new GetTensorReactor(serving_, context, *request);
          }));
  HandleStoreCall<v1::DeleteTensorRequest, v1::DeleteTensorResponse>(
      "DeleteTensor", "delete_tensor",
      [](TensorStore& store, std::string_view ns, const v1::DeleteTensorRequest& request,
         v1::DeleteTensorResponse*) {
        return store.Delete(ns, request.name(),
                            OptionalVersion(request, &v1::DeleteTensorRequest::has_expected_version,
                                            &v1::DeleteTensorRequest::expected_version));
      });
  HandleStoreCall<v1::ListTensorsRequest, v1::ListTensorsResponse>(
      "ListTensors", "list_tensors",
      [](TensorStore& store, std::string_view ns, const v1::ListTensorsRequest&,
         v1::ListTensorsResponse* response) {
        for (const TensorStore::Metadata& metadata : store.List(ns)) {
          ToProto(metadata, response->add_tensors());
        }
        return absl::OkStatus();
      });
  MarkMethodCallback(
      MethodIndex("SnapshotStore"),
      NewQuickUnaryHandler<v1::SnapshotStoreRequest, v1::SnapshotStoreResponse>(
          serving_, "SnapshotStore", "snapshot_store",
          [this](grpc::CallbackServerContext&, const v1::SnapshotStoreRequest&,
                 v1::SnapshotStoreResponse* response) -> absl::Status {
            if (serving_.durable == nullptr) {
              return absl::FailedPreconditionError(
                  "SnapshotStore: this server keeps its tensor store in memory only; start it "
                  "with --store_dir=DIR to keep the store on disk");
            }
            absl::StatusOr<SnapshotReport> report = serving_.durable->Snapshot();
            if (!report.ok()) {
              return absl::Status(report.status().code(),
                                  absl::StrFormat("SnapshotStore: %s", report.status().message()));
            }
            response->set_path(report->path);
            response->set_generation(report->generation);
            response->set_tensors(report->tensors);
            response->set_bytes(report->bytes);
            response->set_written_unix_nanos(absl::ToUnixNanos(report->written));
            response->set_duration_micros(absl::ToInt64Microseconds(report->duration));
            return absl::OkStatus();
          }));
  HandleStoreCall<v1::TensorInfoRequest, v1::TensorInfoResponse>(
      "TensorInfo", "tensor_info",
      [](TensorStore& store, std::string_view ns, const v1::TensorInfoRequest& request,
         v1::TensorInfoResponse* response) -> absl::Status {
        TENSOROPS_ASSIGN_OR_RETURN(TensorStore::Metadata metadata, store.Info(ns, request.name()));
        ToProto(metadata, response->mutable_info());
        return absl::OkStatus();
      });
}

void TensorOpsService::HandleSharedMemoryRpcs() {
  MarkMethodCallback(
      MethodIndex("RegisterSharedMemory"),
      NewRegionHandler<v1::RegisterSharedMemoryRequest, v1::RegisterSharedMemoryResponse>(
          serving_, "RegisterSharedMemory", "register_shared_memory",
          [](SharedMemoryRegions& regions, std::string_view ns,
             const v1::RegisterSharedMemoryRequest& request, v1::RegisterSharedMemoryResponse*) {
            return regions.Register(ns, request.region());
          }));
  MarkMethodCallback(
      MethodIndex("UnregisterSharedMemory"),
      NewRegionHandler<v1::UnregisterSharedMemoryRequest, v1::UnregisterSharedMemoryResponse>(
          serving_, "UnregisterSharedMemory", "unregister_shared_memory",
          [](SharedMemoryRegions& regions, std::string_view ns,
             const v1::UnregisterSharedMemoryRequest& request,
             v1::UnregisterSharedMemoryResponse* response) -> absl::Status {
            TENSOROPS_ASSIGN_OR_RETURN(std::vector<std::string> names,
                                       regions.Unregister(ns, request.name()));
            for (std::string& name : names) response->add_names(std::move(name));
            return absl::OkStatus();
          }));
  MarkMethodCallback(MethodIndex("ListSharedMemory"),
                     NewRegionHandler<v1::ListSharedMemoryRequest, v1::ListSharedMemoryResponse>(
                         serving_, "ListSharedMemory", "list_shared_memory",
                         [](SharedMemoryRegions& regions, std::string_view ns,
                            const v1::ListSharedMemoryRequest& request,
                            v1::ListSharedMemoryResponse* response) -> absl::Status {
                           TENSOROPS_ASSIGN_OR_RETURN(std::vector<v1::SharedMemoryRegion> listed,
                                                      regions.List(ns, request.name()));
                           for (v1::SharedMemoryRegion& region : listed) {
                             *response->add_regions() = std::move(region);
                           }
                           return absl::OkStatus();
                         }));
}

template <typename Request, typename Response, typename Handle>
void TensorOpsService::HandleStoreCall(std::string_view method, std::string_view op,
                                       Handle handle) {
  MarkMethodCallback(MethodIndex(method),
                     NewQuickUnaryHandler<Request, Response>(
                         serving_, method, op,
                         [this, handle](grpc::CallbackServerContext& context,
                                        const Request& request, Response* response) {
                           return handle(*serving_.store, StoreNamespace(serving_, context),
                                         request, response);
                         }));
}

}  // namespace tensorops
