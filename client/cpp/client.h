// Client: the C++ client of the tensorops service. It sends tensors in the caller's memory and
// returns results as owning `Tensor`s; errors are `absl::Status`es carrying the server's code and
// message.
//
//   absl::StatusOr<std::unique_ptr<Client>> client = Client::Create("127.0.0.1:50051");
//   if (!client.ok()) return client.status();
//   absl::StatusOr<Tensor> out = (*client)->Gather(x.view(), /*axis=*/1, index.view());
//   if (!out.ok()) std::cerr << out.status() << "\n";  // e.g. INVALID_ARGUMENT: gather: index...
//
// One Client may be shared by any number of threads; every call is a blocking unary RPC on one
// gRPC channel. The channel connects lazily, so Create succeeds while the server is down and the
// first call reports UNAVAILABLE.
//
// Against a server with TLS and a bearer token (its --tls_cert, --auth_token_file):
//
//   ClientOptions options;
//   options.tls = ClientOptions::Tls{.root_ca_file = "ca.crt"};
//   options.auth_token = *ReadAuthTokenFile("token");
//   absl::StatusOr<std::unique_ptr<Client>> client = Client::Create("localhost:50051", options);
#ifndef TENSOROPS_CLIENT_CPP_CLIENT_H_
#define TENSOROPS_CLIENT_CPP_CLIENT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/cpp/shared_memory.h"
#include "grpcpp/channel.h"
#include "grpcpp/client_context.h"
#include "kernels/reduction.h"
#include "kernels/scalar.h"
#include "kernels/tensor.h"
#include "tensorops/v1/service.grpc.pb.h"

namespace tensorops {

// ClientOptions configure the channel and the defaults of every call.
struct ClientOptions {
  // TLS settings of the channel. Every field is optional; the files are read once, by
  // Client::Create.
  struct Tls {
    // PEM CA certificate(s) the server's certificate must chain to; empty trusts gRPC's default
    // roots (the system's, or the file in $GRPC_DEFAULT_SSL_ROOTS_FILE_PATH).
    std::string root_ca_file;
    // PEM certificate chain and private key this client presents, for servers that require
    // client certificates (mutual TLS). Both or neither.
    std::string cert_file;
    std::string key_file;
    // The name the server's certificate is checked against instead of the target's host: for
    // targets given as an IP address or through a tunnel, and for test certificates. Empty: the
    // target's host.
    std::string server_name_override;
  };

  // nullopt: a plaintext channel. Set: TLS, as the struct says.
  std::optional<Tls> tls;
  // Bearer token sent as "authorization: Bearer <token>" metadata on every call, for servers
  // started with --auth_token_file; empty sends none. Printable ASCII without spaces (Create
  // rejects anything else with INVALID_ARGUMENT). Over a plaintext channel anyone who can see the
  // traffic can read it. gRPC's CallCredentials are not used because gRPC sends them only over
  // secure channels.
  std::string auth_token;

  // Largest message the channel sends or receives, in bytes: 1 to 2^31 - 1 (gRPC's own limit).
  // Matches the server's default --max_message_bytes; results larger than this fail with
  // RESOURCE_EXHAUSTED. Create rejects values outside the range.
  int64_t max_message_bytes = int64_t{1} << 30;
  // Deadline of a call whose options leave `timeout` unset; InfiniteDuration() means none.
  absl::Duration default_timeout = absl::InfiniteDuration();

  // Scale-out across replicas. The target may name several servers: a DNS name with one record
  // per replica (a Kubernetes headless Service, "dns:///tensorops-headless:50051") or a list of
  // addresses ("ipv4:10.0.0.1:50051,10.0.0.2:50051"). The channel carries a default service
  // config (ServiceConfigJson) with these two choices; a config the resolver supplies wins.
  //
  // true: gRPC's round_robin policy, which connects to every address and sends each call to the
  // next ready one; false: pick_first (gRPC's own default), one connection at a time.
  bool round_robin = true;
  // Attempts a call gets when it fails with UNAVAILABLE (a replica shutting down, a connection
  // that broke) or with CANCELLED from the server (gRPC's server cancels the calls it has received
  // but not yet handed to the service when it shuts down), the first included: 1 (no retries) to
  // 5 (gRPC's cap); Create rejects others. A retry is safe for every call but four: ops are free
  // of side effects or, when they store their result or update in place, carry an update id the
  // server applies once (RunStored sets one; gRPC resends the same request). PutTensor and
  // DeleteTensor change the store without one, so they are never retried: a put or delete whose
  // answer was lost could otherwise replace or remove a value another client stored meanwhile.
  // Nor are RegisterSharedMemory and UnregisterSharedMemory, whose retry after a lost answer
  // would fail with ALREADY_EXISTS or NOT_FOUND though the first attempt did what was asked.
  // A call this client cancels, or whose deadline passes, is never retried.
  // gRPC retries only a call that the server has not answered yet and whose request fits in its
  // 256 KiB retry buffer (larger requests fail as they would without retries); streams are
  // retried only before their first response.
  int max_attempts = 5;
};

// ServiceConfigJson returns the gRPC service config Client::Create gives its channel for
// `options`: the load balancing policy and, for every method of tensorops.v1.TensorOps, a retry
// policy for UNAVAILABLE and CANCELLED (see max_attempts) with exponential backoff (50 ms doubling
// to 1 s, jittered by gRPC).
// Python's and Go's clients use the same config. `options.max_attempts` must be in range.
std::string ServiceConfigJson(const ClientOptions& options);

// GatherOptions are the optional arguments of Client::Gather.
struct GatherOptions {
  // Paddle's take_along_axis broadcast: input and index are broadcast against each other on every
  // dimension but the axis (docs/semantics.md).
  bool broadcast = false;
  // The call's deadline, counted from when the call starts (encoding the request included);
  // nullopt uses ClientOptions::default_timeout. A deadline that passes gives DEADLINE_EXCEEDED;
  // one that passes before the request is sent fails without sending it.
  std::optional<absl::Duration> timeout;
};

// ScatterOptions are the optional arguments of Client::Scatter.
struct ScatterOptions {
  // How a source element combines with its destination (docs/semantics.md).
  Reduction reduce = Reduction::kAssign;
  // Whether the destination's original value takes part in the reduction.
  bool include_self = true;
  // Paddle's put_along_axis broadcast (docs/semantics.md).
  bool broadcast = false;
  // Ask for bitwise reproducible floating SUM/MEAN/PROD results.
  bool deterministic = false;
  // As GatherOptions::timeout.
  std::optional<absl::Duration> timeout;
};

// CallOptions are the optional arguments of calls that have no others.
struct CallOptions {
  // As GatherOptions::timeout.
  std::optional<absl::Duration> timeout;
};

// TransferProgress is told, after each data message of PutTensor or GetTensor, how many of the
// tensor's bytes have crossed the wire so far and how many there are in all. It runs on the
// calling thread, between messages, so a slow one slows the transfer; it must not call the Client.
using TransferProgress = std::function<void(int64_t done_bytes, int64_t total_bytes)>;

// PutTensorOptions are the optional arguments of Client::PutTensor.
struct PutTensorOptions {
  // Replace the name's value, if it has one (FAILED_PRECONDITION for an existing name otherwise).
  bool overwrite = false;
  // Replace only this version of the name (it must exist at exactly this version).
  std::optional<int64_t> expected_version;
  // Bytes per data message, >= 1; the tensor's bytes are sent in chunks of this size.
  int64_t chunk_bytes = int64_t{4} << 20;
  std::optional<absl::Duration> timeout;
  // Told of each chunk written to the call; empty: none.
  TransferProgress progress;
};

// GetTensorOptions are the optional arguments of Client::GetTensor.
struct GetTensorOptions {
  // The version the tensor must be at (FAILED_PRECONDITION otherwise).
  std::optional<int64_t> version;
  // Bytes per data message the server sends; 0 takes the server's default.
  int64_t chunk_bytes = 0;
  std::optional<absl::Duration> timeout;
  // Told of each chunk received; empty: none.
  TransferProgress progress;
};

// IndexReduceOptions are the optional arguments of Client::IndexReduce.
struct IndexReduceOptions {
  // SUM is index_add, ASSIGN index_copy, the others index_reduce.
  Reduction reduce = Reduction::kSum;
  bool include_self = true;
  // Scales src under SUM (index_add's alpha); other reductions require 1.
  Scalar alpha = Scalar(int64_t{1});
  // As GatherOptions::timeout.
  std::optional<absl::Duration> timeout;
};

// SliceOptions are the slice of Client::SliceScatter, under Python's rules.
struct SliceOptions {
  // nullopt: from the beginning.
  std::optional<int64_t> start;
  // nullopt: to the end.
  std::optional<int64_t> end;
  // > 0.
  int64_t step = 1;
  // As GatherOptions::timeout.
  std::optional<absl::Duration> timeout;
};

// DiagonalOptions choose the diagonal of Client::DiagonalScatter, as torch.diagonal does.
struct DiagonalOptions {
  // > 0 above the main diagonal, < 0 below.
  int64_t offset = 0;
  int64_t axis1 = 0;
  int64_t axis2 = 1;
  // As GatherOptions::timeout.
  std::optional<absl::Duration> timeout;
};

// GatherNdOptions are the optional arguments of Client::GatherNd (docs/semantics.md).
struct GatherNdOptions {
  // Empty: the TensorFlow / Paddle form (tf.gather_nd). Otherwise one distinct axis of input per
  // coordinate in the index's last dimension, each in [-rank, rank): the compiler form.
  std::vector<int64_t> axes;
  // TensorFlow form only: the leading dimensions input and index share, >= 0.
  int64_t batch_dims = 0;
  // As GatherOptions::timeout.
  std::optional<absl::Duration> timeout;
};

// ScatterNdOptions are the optional arguments of Client::ScatterNd (docs/semantics.md).
struct ScatterNdOptions {
  // As GatherNdOptions::axes.
  std::vector<int64_t> axes;
  // As GatherNdOptions::batch_dims.
  int64_t batch_dims = 0;
  // ASSIGN is tensor_scatter_nd_update, SUM tensor_scatter_nd_add and scatter_nd_add, AMAX and
  // AMIN tensor_scatter_nd_max and _min. Unset: ASSIGN with an input, SUM without one (as
  // paddle.scatter_nd adds up duplicate indices).
  std::optional<Reduction> reduce;
  // Whether the destination's original value takes part in the reduction.
  bool include_self = true;
  // Only without an input (paddle.scatter_nd): the result's shape, rank >= 1; it starts as zeros
  // in src's dtype. Giving it with an input, or neither, is INVALID_ARGUMENT from the server.
  std::vector<int64_t> shape;
  // Ask for bitwise reproducible floating SUM/MEAN/PROD results.
  bool deterministic = false;
  // As GatherOptions::timeout.
  std::optional<absl::Duration> timeout;
};

// Request builders: the wire request each op method of Client sends, for callers that send
// requests themselves (Client::Run, OpStream::Send, Client::Backward). Each copies the tensors'
// elements into the message, so the views need to live only for the call. The options' `timeout`
// is not part of a request and is ignored.
//
//   v1::OpRequest op;
//   *op.mutable_gather() = MakeGatherRequest(x.view(), /*axis=*/1, index.view());
//   absl::StatusOr<std::map<std::string, Tensor>> grads = client->Backward(op, grad.view());
v1::GatherRequest MakeGatherRequest(const TensorView& input, int64_t axis, const TensorView& index,
                                    const GatherOptions& options = {});
v1::ScatterRequest MakeScatterRequest(const TensorView& input, int64_t axis,
                                      const TensorView& index, const TensorView& src,
                                      const ScatterOptions& options = {});
v1::ScatterRequest MakeScatterRequest(const TensorView& input, int64_t axis,
                                      const TensorView& index, const Scalar& value,
                                      const ScatterOptions& options = {});
v1::IndexSelectRequest MakeIndexSelectRequest(const TensorView& input, int64_t axis,
                                              const TensorView& index);
v1::IndexReduceRequest MakeIndexReduceRequest(const TensorView& input, int64_t axis,
                                              const TensorView& index, const TensorView& src,
                                              const IndexReduceOptions& options = {});
v1::SelectScatterRequest MakeSelectScatterRequest(const TensorView& input, const TensorView& src,
                                                  int64_t axis, int64_t index);
v1::SliceScatterRequest MakeSliceScatterRequest(const TensorView& input, const TensorView& src,
                                                int64_t axis, const SliceOptions& options = {});
v1::DiagonalScatterRequest MakeDiagonalScatterRequest(const TensorView& input,
                                                      const TensorView& src,
                                                      const DiagonalOptions& options = {});
v1::GatherNdRequest MakeGatherNdRequest(const TensorView& input, const TensorView& index,
                                        const GatherNdOptions& options = {});
v1::ScatterNdRequest MakeScatterNdRequest(const std::optional<TensorView>& input,
                                          const TensorView& index, const TensorView& src,
                                          const ScatterNdOptions& options = {});
v1::MaskedScatterRequest MakeMaskedScatterRequest(const TensorView& input, const TensorView& mask,
                                                  const TensorView& src);

// StoredArgument returns a tensor argument that references the stored tensor `name` (at exactly
// `version`, when given) instead of carrying bytes: put it in a request built with the Make*Request
// functions above, e.g. `*request.mutable_input() = StoredArgument("table");`.
v1::Tensor StoredArgument(std::string_view name, std::optional<int64_t> version = std::nullopt);

// StoredResult is the answer of a call that stored its result or updated a stored tensor in
// place (Client::RunStored).
struct StoredResult {
  std::string name;
  // The version the call made.
  int64_t version = 0;
  DataType dtype = DataType::kFloat32;
  Shape shape;
  // The result's elements, when the request's result_options.return_data asked for them.
  std::optional<Tensor> data;
  // A reference to the stored result, to pass on as an argument of the next call.
  v1::Tensor argument() const { return StoredArgument(name, version); }
};

// StreamResult is one answer on an OpStream: the request's id and its result or error.
struct StreamResult {
  uint64_t request_id = 0;
  absl::StatusOr<Tensor> result;
};

// OpStream is one open RunStream: send op requests with ids of your choosing and receive one
// StreamResult per request, in completion order. One thread may Send while another Receives;
// neither method may be called from two threads at once. Not copyable. Destroying an open stream
// cancels it.
//
//   absl::StatusOr<std::unique_ptr<OpStream>> stream = client->OpenStream();
//   (*stream)->Send(1, request_a);
//   (*stream)->Send(2, request_b);
//   (*stream)->CloseSend();
//   while (std::optional<StreamResult> answer = (*stream)->Receive()) { ... }
//   absl::Status status = (*stream)->Finish();  // OK, or why the stream ended early
class OpStream {
 public:
  OpStream(const OpStream&) = delete;
  OpStream& operator=(const OpStream&) = delete;
  ~OpStream();

  // Send queues one request; false when the stream is broken (Finish then says why).
  bool Send(uint64_t request_id, const v1::OpRequest& request);
  // CloseSend tells the server no more requests follow; it ends the stream once all are answered.
  bool CloseSend();
  // Receive blocks for the next answer; nullopt when the stream has ended.
  std::optional<StreamResult> Receive();
  // Finish returns the stream's final status, after Receive has returned nullopt (it waits for
  // that otherwise, discarding answers): OK, UNAVAILABLE when the server shut down (every request
  // it read was answered), CANCELLED, DEADLINE_EXCEEDED, UNAUTHENTICATED.
  absl::Status Finish();

 private:
  friend class Client;
  OpStream(const ClientOptions& options, std::unique_ptr<grpc::ClientContext> context);

  const ClientOptions& options_;
  std::unique_ptr<grpc::ClientContext> context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::RunStreamRequest, v1::RunStreamResponse>> stream_;
  bool finished_ = false;
};

// Client calls the tensorops.v1.TensorOps service. Thread-safe; not copyable.
class Client {
 public:
  // Create returns a client for `target`: a gRPC target such as "host:port",
  // "dns:///host:port" or "ipv4:host:port,host:port" (several replicas; see
  // ClientOptions::round_robin).
  // Returns INVALID_ARGUMENT for an empty target, options out of range, a TLS cert_file without
  // key_file (or the reverse) and an auth_token gRPC metadata cannot carry; for a TLS file that
  // cannot be read, its error (NOT_FOUND, PERMISSION_DENIED, ...) naming the field and the path.
  // Does not connect: a server that does not speak TLS, or whose certificate is not trusted, shows
  // as UNAVAILABLE on the first call; a missing or wrong token as UNAUTHENTICATED.
  static absl::StatusOr<std::unique_ptr<Client>> Create(std::string target,
                                                        ClientOptions options = {});

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // Gather returns `torch.gather(input, axis, index)` (docs/semantics.md) computed by the
  // server. Returns the server's status on error: INVALID_ARGUMENT naming the argument, value and
  // rule for a bad request, RESOURCE_EXHAUSTED for tensors over the limits, DEADLINE_EXCEEDED when
  // the timeout passes, UNAVAILABLE when the server cannot be reached.
  absl::StatusOr<Tensor> Gather(const TensorView& input, int64_t axis, const TensorView& index,
                                const GatherOptions& options = {});

  // Scatter returns `input` with `src` scattered into it along `axis` at `index`, combined by
  // options.reduce (docs/semantics.md). `input` itself is not modified. Errors as Gather.
  absl::StatusOr<Tensor> Scatter(const TensorView& input, int64_t axis, const TensorView& index,
                                 const TensorView& src, const ScatterOptions& options = {});

  // Scatter with a scalar `value` broadcast to the index's shape, converted to input's dtype by
  // the server (a value that does not fit is INVALID_ARGUMENT). Errors as Gather.
  absl::StatusOr<Tensor> Scatter(const TensorView& input, int64_t axis, const TensorView& index,
                                 const Scalar& value, const ScatterOptions& options = {});

  // IndexSelect returns `torch.index_select(input, axis, index)` (docs/semantics.md). Errors as
  // Gather.
  absl::StatusOr<Tensor> IndexSelect(const TensorView& input, int64_t axis, const TensorView& index,
                                     const CallOptions& options = {});

  // IndexReduce returns `input` with the slices of `src` along `axis` combined into the slices
  // `index` names: index_add (SUM, alpha), index_copy (ASSIGN) or index_reduce
  // (docs/semantics.md). Errors as Gather.
  absl::StatusOr<Tensor> IndexReduce(const TensorView& input, int64_t axis, const TensorView& index,
                                     const TensorView& src, const IndexReduceOptions& options = {});

  // SelectScatter returns `torch.select_scatter(input, src, axis, index)` (docs/semantics.md).
  // Errors as Gather.
  absl::StatusOr<Tensor> SelectScatter(const TensorView& input, const TensorView& src, int64_t axis,
                                       int64_t index, const CallOptions& options = {});

  // SliceScatter returns `torch.slice_scatter(input, src, axis, start, end, step)`
  // (docs/semantics.md). Errors as Gather.
  absl::StatusOr<Tensor> SliceScatter(const TensorView& input, const TensorView& src, int64_t axis,
                                      const SliceOptions& options = {});

  // DiagonalScatter returns `torch.diagonal_scatter(input, src, offset, axis1, axis2)`
  // (docs/semantics.md). Errors as Gather.
  absl::StatusOr<Tensor> DiagonalScatter(const TensorView& input, const TensorView& src,
                                         const DiagonalOptions& options = {});

  // GatherNd returns `tf.gather_nd(input, index, batch_dims)` or, with options.axes, the
  // compiler form `gather_nd(input, index, dims=axes)` (docs/semantics.md). Errors as Gather.
  absl::StatusOr<Tensor> GatherNd(const TensorView& input, const TensorView& index,
                                  const GatherNdOptions& options = {});

  // ScatterNd returns `input` with `src` scattered into it at the coordinates in `index`, combined
  // by options.reduce (docs/semantics.md): tf.tensor_scatter_nd_update/add/min/max,
  // paddle.scatter_nd_add. Without an input it is paddle.scatter_nd: zeros of options.shape.
  // Errors as Gather.
  absl::StatusOr<Tensor> ScatterNd(const std::optional<TensorView>& input, const TensorView& index,
                                   const TensorView& src, const ScatterNdOptions& options = {});

  // ScatterNdSub is tf.tensor_scatter_nd_sub: ScatterNd with SUM of `src` negated here, on the
  // client (sub = add of negated updates). options.reduce must be left at its default or
  // be SUM. Floating, complex and signed integer dtypes; signed integers wrap as in TensorFlow
  // (negating the minimum gives itself). BOOL and UINT8 src, or another reduce, give
  // INVALID_ARGUMENT without a call; otherwise errors as Gather.
  absl::StatusOr<Tensor> ScatterNdSub(const std::optional<TensorView>& input,
                                      const TensorView& index, const TensorView& src,
                                      const ScatterNdOptions& options = {});

  // MaskedScatter returns `torch.masked_scatter(input, mask, src)` (docs/semantics.md): the
  // k-th true position of `mask` (BOOL, broadcast with input) takes src's k-th element. Errors as
  // Gather; a src with fewer elements than the mask has true positions is INVALID_ARGUMENT.
  absl::StatusOr<Tensor> MaskedScatter(const TensorView& input, const TensorView& mask,
                                       const TensorView& src, const CallOptions& options = {});

  // Run runs any op given as a wire request (the generic RPC): the same result and errors as that
  // op's own method. For generic callers that build requests themselves. A request whose
  // result_options store the result or update in place goes through RunStored instead
  // (INVALID_ARGUMENT here, without a call).
  absl::StatusOr<Tensor> Run(const v1::OpRequest& request, const CallOptions& options = {});

  // RunStored runs `request`, whose op stores its result (result_options.store_as) or updates the
  // stored tensor its input references in place (result_options.in_place), and returns what the
  // server stored. When result_options.update_id is empty it sets a fresh random one, which
  // gRPC's automatic retries resend, so the change is applied once however often the call is
  // tried. INVALID_ARGUMENT, without a call, when the request changes no stored tensor; otherwise
  // errors as Gather, plus the store's: FAILED_PRECONDITION for a name that exists without
  // overwrite, or a version that is not the expected one.
  absl::StatusOr<StoredResult> RunStored(v1::OpRequest request, const CallOptions& options = {});

  // OpenStream opens a RunStream; options.timeout bounds the whole stream. Errors as Gather
  // (reported by the stream's Finish when the server refuses it).
  absl::StatusOr<std::unique_ptr<OpStream>> OpenStream(const CallOptions& options = {});

  // Backward returns the gradients of the op in `forward` (as sent to Run) for `grad_output`, the
  // gradient of its result: one per differentiable input, by argument name ("input", "src"), as
  // PyTorch autograd gives them (docs/semantics.md, Backward). INVALID_ARGUMENT for a dtype that is
  // not floating or complex and for a grad_output whose shape or dtype is not the result's;
  // otherwise errors as Gather.
  absl::StatusOr<std::map<std::string, Tensor>> Backward(const v1::OpRequest& forward,
                                                         const TensorView& grad_output,
                                                         const CallOptions& options = {});

  // ServerInfo returns what the server is: version, build, devices, limits, ops, dtypes.
  absl::StatusOr<v1::ServerInfoResponse> ServerInfo(const CallOptions& options = {});

  // The tensor store (store.proto). An op's tensor argument references a stored tensor through
  // StoredArgument in a request built with the Make*Request functions (Run, RunStored).
  //
  // PutTensor stores `value` under `name` (its bytes streamed in options.chunk_bytes chunks) and
  // returns the stored tensor's info, at its new version. FAILED_PRECONDITION for an existing name
  // without overwrite or a matching expected_version; RESOURCE_EXHAUSTED naming
  // --store_memory_bytes when the store has no room.
  absl::StatusOr<v1::TensorInfo> PutTensor(std::string_view name, const TensorView& value,
                                           const PutTensorOptions& options = {});
  // GetTensor returns the stored tensor's value (of one version, whatever happens meanwhile);
  // NOT_FOUND naming the name when there is none.
  absl::StatusOr<Tensor> GetTensor(std::string_view name, const GetTensorOptions& options = {});
  // DeleteTensor removes the name (only at `expected_version`, when given).
  absl::Status DeleteTensor(std::string_view name,
                            std::optional<int64_t> expected_version = std::nullopt,
                            const CallOptions& options = {});
  // ListTensors describes every stored tensor the caller can see, sorted by name.
  absl::StatusOr<std::vector<v1::TensorInfo>> ListTensors(const CallOptions& options = {});
  // TensorInfo describes one stored tensor.
  absl::StatusOr<v1::TensorInfo> TensorInfo(std::string_view name, const CallOptions& options = {});
  // SnapshotStore has the server write a snapshot of its whole tensor store (every namespace) to
  // its --store_dir now and returns once the file is on disk: its path, generation, tensors and
  // size, when it was written and how long writing took. FAILED_PRECONDITION from a server
  // started without --store_dir (its store is in memory only); the server's error, naming the
  // file, when the snapshot cannot be written.
  absl::StatusOr<v1::SnapshotStoreResponse> SnapshotStore(const CallOptions& options = {});

  // Shared memory (shared_memory.h), for a client on the server's host. RegisterSharedMemory
  // maps `byte_size` bytes from `offset` of the POSIX shared-memory object `key` into the server
  // as region `name` (in the caller's token namespace): ALREADY_EXISTS for a name in use,
  // NOT_FOUND for an object that does not exist, PERMISSION_DENIED for one the server may not
  // open or another token has registered, RESOURCE_EXHAUSTED past the server's
  // --max_shared_memory_regions or --max_shared_memory_bytes.
  absl::Status RegisterSharedMemory(std::string_view name, std::string_view key, int64_t byte_size,
                                    int64_t offset = 0, const CallOptions& options = {});
  // RegisterCudaSharedMemory shares `byte_size` bytes of a GPU buffer with the server as region
  // `name`: `raw_handle` is the 64 bytes of the buffer's cudaIpcMemHandle_t (cudaIpcGetMemHandle
  // in this process, which must keep the buffer allocated while the region is registered),
  // `device_id` the GPU it is on. The server's kernels then read arguments from it and write
  // results into it in place. FAILED_PRECONDITION from a server whose calls run on no GPU;
  // INVALID_ARGUMENT for a handle the server's GPU cannot open or a buffer smaller than
  // `byte_size`; otherwise errors as RegisterSharedMemory's.
  absl::Status RegisterCudaSharedMemory(std::string_view name, std::string_view raw_handle,
                                        int64_t device_id, int64_t byte_size,
                                        const CallOptions& options = {});
  // UnregisterSharedMemory forgets the region `name` (every region of the caller's when empty)
  // and returns the names forgotten; the server unmaps a region once the calls using it are done.
  absl::StatusOr<std::vector<std::string>> UnregisterSharedMemory(std::string_view name = "",
                                                                  const CallOptions& options = {});
  // ListSharedMemory describes the caller's regions, sorted by name.
  absl::StatusOr<std::vector<v1::SharedMemoryRegion>> ListSharedMemory(
      const CallOptions& options = {});
  // RunInto runs `request` with its result written into the region bytes `result`
  // (result_options.shared_memory; at least the result's bytes) and returns the result's dtype
  // and shape. FAILED_PRECONDITION when the region's object shrank or was removed under the call;
  // otherwise errors as Run.
  absl::StatusOr<ResultShape> RunInto(v1::OpRequest request, const v1::SharedMemoryRef& result,
                                      const CallOptions& options = {});
  // PutTensorFromSharedMemory stores the tensor of `dtype` and `shape` whose bytes are at
  // `source` (exactly its bytes) under `name`: one copy on the server, no bytes on the wire.
  // Errors as PutTensor's, and the region's.
  absl::StatusOr<v1::TensorInfo> PutTensorFromSharedMemory(std::string_view name, DataType dtype,
                                                           ShapeSpan shape,
                                                           const v1::SharedMemoryRef& source,
                                                           const PutTensorOptions& options = {});
  // GetTensorIntoSharedMemory writes the stored tensor's bytes into `target` (at least its
  // bytes) and returns its info. Errors as GetTensor's, and the region's.
  absl::StatusOr<v1::TensorInfo> GetTensorIntoSharedMemory(std::string_view name,
                                                           const v1::SharedMemoryRef& target,
                                                           const GetTensorOptions& options = {});

  // channel returns the channel this client calls over, for other services of the same server
  // (grpc.health.v1.Health, server reflection) with the same TLS settings. Calls made on it carry
  // no bearer token and no default deadline: those are set per call by this class.
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }

 private:
  Client(std::string target, std::shared_ptr<grpc::Channel> channel, ClientOptions options);

  // RegisterRegion asks the server to map `region` (RegisterSharedMemory).
  absl::Status RegisterRegion(v1::SharedMemoryRegion region, const CallOptions& options);

  // PrepareContext readies `context` for one call of `op` that must finish by `deadline`: sets
  // the deadline and adds the bearer token's metadata. DEADLINE_EXCEEDED when the deadline has
  // already passed (encoding the request took longer than the timeout): gRPC alone does not
  // guarantee that, since over a warm loopback connection a call whose deadline is already past
  // can still come back OK. Every RPC's context must go through here.
  absl::Status PrepareContext(absl::Time deadline, std::string_view op,
                              grpc::ClientContext* context) const;

  // Deadline returns when a call starting now with `timeout` (nullopt: the default) must finish.
  absl::Time Deadline(const std::optional<absl::Duration>& timeout) const;

  // CallRpc makes one call through `send(context, response)`, with the context prepared by
  // PrepareContext for `op`, and returns the response, or the call's status.
  template <typename Response, typename Send>
  absl::StatusOr<Response> CallRpc(std::string_view op, absl::Time deadline, Send send) const;

  // CallOp sends `request` over the RPC of `Op` (an entry of ops::AllOps, proto/op_list.h) and
  // returns the response's result as an owning tensor, or the call's status; errors name the op
  // as ops::Name<Op>() does. Every typed op method goes through here.
  template <typename Op>
  absl::StatusOr<Tensor> CallOp(const typename Op::Request& request, absl::Time deadline) const;

  // What Create dialed, for the errors of calls that reach no server.
  std::string target_;
  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::TensorOps::Stub> stub_;
};

// ReadAuthTokenFile returns the bearer token in the file at `path`, without the whitespace around
// it (a trailing newline, say), for ClientOptions::auth_token. Keeping the token in a file keeps
// it out of command lines and `ps`. The file's error (NOT_FOUND, PERMISSION_DENIED, ...) naming
// the path when it cannot be read; INVALID_ARGUMENT naming the path when it holds no token or one
// that gRPC metadata cannot carry (see ClientOptions::auth_token). The messages never contain the
// token.
absl::StatusOr<std::string> ReadAuthTokenFile(const std::string& path);

}  // namespace tensorops

#endif  // TENSOROPS_CLIENT_CPP_CLIENT_H_
