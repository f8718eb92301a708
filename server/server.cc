#include "server/server.h"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/algorithm/container.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/descriptor.h"
#include "grpc/grpc.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/health_check_service_interface.h"
#include "grpcpp/resource_quota.h"
#include "grpcpp/support/time.h"
#include "kernels/device.h"
#include "kernels/status_macros.h"
#include "proto/codec.h"
#include "proto/op_list.h"
#include "server/core/journal_replay.h"
#include "server/observability/build_info.h"
#include "server/observability/call_log.h"
#include "server/rpc/credentials.h"
#include "spdlog/spdlog.h"

namespace tensorops {
namespace {

// ListenAddress formats host:port, bracketing IPv6 literals ("[::1]:50051") as gRPC expects.
std::string ListenAddress(const std::string& host, int port) {
  if (absl::StrContains(host, ':') && !absl::StartsWith(host, "[")) {
    return absl::StrFormat("[%s]:%d", host, port);
  }
  return absl::StrFormat("%s:%d", host, port);
}

// DevicesSummary describes the CPU thread count and the GPUs for the start-up line. Without a GPU
// it says so plainly; why there is none (no driver, a driver too old, a CPU-only build) is a
// normal state, not an error, and stays in ServerInfo's gpu_note.
std::string DevicesSummary(const DeviceInventory& inventory, int cpu_threads) {
  if (inventory.cuda_devices.empty()) {
    return absl::StrFormat("cpu (%d threads); no GPU found, serving on the CPU", cpu_threads);
  }
  std::vector<std::string> names;
  for (const CudaDevice& device : inventory.cuda_devices) {
    names.push_back(absl::StrFormat("%d: %s (%.1f GiB, sm_%d%d)", device.ordinal, device.name,
                                    static_cast<double>(device.total_memory_bytes) / (1 << 30),
                                    device.compute_capability_major,
                                    device.compute_capability_minor));
  }
  return absl::StrFormat("cpu (%d threads), cuda: %s", cpu_threads, absl::StrJoin(names, ", "));
}

// BuildServerInfo describes this server for the ServerInfo RPC.
v1::ServerInfoResponse BuildServerInfo(const ServerOptions& options,
                                       const DeviceInventory& inventory, int cpu_threads,
                                       int max_concurrent_calls, bool tls, bool token_auth,
                                       const std::string& placement) {
  v1::ServerInfoResponse info;
  const BuildInfo& build = ThisBuild();
  info.set_version(build.version);
  info.set_git_revision(build.revision);
  info.mutable_build()->set_cuda(inventory.cuda_built);
  info.mutable_build()->set_build_type(build.build_type);
  info.mutable_build()->set_compiler(build.compiler);

  v1::Device* cpu = info.add_devices();
  cpu->set_kind("cpu");
  cpu->set_name("cpu");
  cpu->set_threads(cpu_threads);
  for (const CudaDevice& gpu : inventory.cuda_devices) {
    v1::Device* device = info.add_devices();
    device->set_kind("cuda");
    device->set_ordinal(gpu.ordinal);
    device->set_name(gpu.name);
    device->set_memory_bytes(gpu.total_memory_bytes);
    device->set_compute_capability(
        absl::StrFormat("%d.%d", gpu.compute_capability_major, gpu.compute_capability_minor));
  }
  if (inventory.cuda_devices.empty()) info.set_gpu_note(inventory.note);

  const ServerOptions::Limits& limits = options.limits;
  v1::Limits* info_limits = info.mutable_limits();
  info_limits->set_max_message_bytes(limits.max_message_bytes);
  info_limits->set_max_elements(limits.max_elements);
  info_limits->set_max_rank(limits.max_rank);
  info_limits->set_max_concurrent_calls(max_concurrent_calls);
  info_limits->set_max_queued_calls(options.queue.max_queued_calls);
  info_limits->set_max_stream_in_flight(limits.max_stream_in_flight);
  info_limits->set_max_batch(options.queue.max_batch);
  info_limits->set_max_batch_bytes(options.queue.max_batch_bytes);
  info_limits->set_max_queue_delay_us(absl::ToInt64Microseconds(options.queue.max_queue_delay));
  info_limits->set_inline_max_bytes(options.queue.inline_max_bytes);
  info.set_placement(placement);
  info.set_gpu_streams(options.gpu.streams);
  info.set_gpu_min_bytes(options.gpu.min_bytes);
  info.set_gpu_memory_limit(options.gpu.memory_limit_bytes);

  // The ops of the op table, named like their RPCs.
  ops::ForEachOp([&]<typename Op>(Op) { info.add_ops(std::string(ops::Rpc<Op>())); });
  const google::protobuf::EnumDescriptor* dtypes = v1::DataType_descriptor();
  for (int i = 0; i < dtypes->value_count(); ++i) {
    if (dtypes->value(i)->number() != v1::DATA_TYPE_UNSPECIFIED) {
      info.add_dtypes(static_cast<v1::DataType>(dtypes->value(i)->number()));
    }
  }
  info.set_tls(tls);
  info.set_auth_token_required(token_auth);
  return info;
}

// LoadAuthenticator reads the bearer token that callers must send; null when none is required.
absl::StatusOr<std::unique_ptr<TokenAuthenticator>> LoadAuthenticator(
    const ServerOptions::Security& security) {
  if (security.auth_token_file.empty()) return std::unique_ptr<TokenAuthenticator>();
  return TokenAuthenticator::FromFile(security.auth_token_file);
}

// WarnOfUnreachableNamespaces warns of the recovered tensors no caller can reach: those of a
// namespace that belongs to no tenant of `authenticator` (every namespace but "" without one).
// They stay in the store, and are reachable again once their tenant's token is back in the file.
void WarnOfUnreachableNamespaces(const TensorStore& store,
                                 const TokenAuthenticator* authenticator) {
  std::vector<std::string> reachable = {""};
  if (authenticator != nullptr) reachable = authenticator->Namespaces();
  std::map<std::string, int64_t> unreachable;
  for (const auto& [ns, name] : store.Names()) {
    if (!absl::c_linear_search(reachable, ns)) ++unreachable[ns];
  }
  for (const auto& [ns, count] : unreachable) {
    if (ns.empty()) {
      spdlog::warn(
          "store recovery: {} tensor(s) were stored without --auth_token_file: no call reaches "
          "them while the server runs with it",
          count);
    } else if (authenticator == nullptr) {
      spdlog::warn(
          "store recovery: {} tensor(s) of namespace \"{}\" belong to a tenant of an "
          "--auth_token_file: no call reaches them while the server runs without it",
          count, ns);
    } else if (absl::StartsWith(ns, "token-")) {
      // No tenant name starts with "token-": an earlier server's name for its N-th token, which
      // had no line (or another line of the same tenant came first) when it was renamed.
      spdlog::warn(
          "store recovery: {} tensor(s) of namespace \"{}\", an earlier server's name for the "
          "token on that line of its --auth_token_file, which no line of this one took over: no "
          "call reaches them; `tensorops-cli store-file SNAPSHOT NAME OUT.npy --namespace={}` "
          "reads them from the store's files",
          count, ns, ns);
    } else {
      spdlog::warn(
          "store recovery: {} tensor(s) of namespace \"{}\" belong to no tenant of "
          "--auth_token_file: no call reaches them until a line of the file gives that tenant "
          "(or that token) again",
          count, ns);
    }
  }
}

// DrainOutcome is what became of a server's calls and connections after its GOAWAY (Drain).
struct DrainOutcome {
  // Every call ended within the grace, the last of them at calls_end.
  bool calls_ended = false;
  absl::Time calls_end;
  // Every connection closed on its own (its client answered the GOAWAY, or hung up) before the
  // server would have closed it; the last of them at connections_end.
  bool connections_closed = false;
  absl::Time connections_end;
};

// Drain shuts `server` down: GOAWAY on every connection, a wait (until `deadline`) for every call
// in `calls` to end, then up to `answer_wait` for the connections to close; those still open after
// that are closed, and calls still running at `deadline` are cancelled.
//
// gRPC's Shutdown(deadline) alone waits for the connections as long as for the calls: after a
// GOAWAY a connection closes once its client has answered the GOAWAY's ping, and a client that is
// not reading its connection answers seconds later or never (an idle C++ or Python channel is read
// only by its backup poller, every 5 s), which held shutdown up for as long, or for the whole
// grace. A client that is reading answers within a round trip. gRPC cannot close some connections
// only, but once no call is in flight, closing all of them takes nothing from anyone.
DrainOutcome Drain(grpc::Server& server, const InFlightCalls& calls, absl::Time deadline,
                   absl::Duration answer_wait) {
  // The core call with which gRPC's C++ Shutdown begins (c_server() is marked for internal use; a
  // gRPC that drops it fails to compile here). It sends the GOAWAY, may be made again, and
  // notifies every tag once the calls and the connections are gone.
  grpc_server* const core = server.c_server();
  grpc_completion_queue* const stopped = grpc_completion_queue_create_for_next(nullptr);
  int stopped_tag = 0;
  grpc_server_shutdown_and_notify(core, stopped, &stopped_tag);
  DrainOutcome outcome;
  while (true) {
    outcome.calls_ended = calls.AwaitNone(deadline);
    if (!outcome.calls_ended) break;
    outcome.calls_end = absl::Now();
    const absl::Time answered_by = std::min(deadline, outcome.calls_end + answer_wait);
    const gpr_timespec until =
        grpc::TimePoint<std::chrono::system_clock::time_point>(absl::ToChronoTime(answered_by))
            .raw_time();
    outcome.connections_closed =
        grpc_completion_queue_next(stopped, until, nullptr).type == GRPC_OP_COMPLETE;
    outcome.connections_end = absl::Now();
    // Calls that clients started before they read the GOAWAY are waited for too.
    if (outcome.connections_closed || calls.count() == 0) break;
  }
  if (outcome.calls_ended && !outcome.connections_closed) grpc_server_cancel_all_calls(core);
  // Returns at once now, unless the grace ran out: then it cancels the calls still running.
  server.Shutdown(absl::ToChronoTime(deadline));
  grpc_completion_queue_shutdown(stopped);
  while (grpc_completion_queue_next(stopped, gpr_inf_future(GPR_CLOCK_REALTIME), nullptr).type !=
         GRPC_QUEUE_SHUTDOWN) {
  }
  grpc_completion_queue_destroy(stopped);
  return outcome;
}

}  // namespace

struct Server::Placement {
  DeviceInventory inventory;
  // The GPU executor that calls of at least gpu_min_bytes run on; null runs every call on the CPU.
  DeviceExecutor* executor = nullptr;
  // The CUDA executor behind `executor` when Start created it (null for a test's, or none).
  std::unique_ptr<DeviceExecutor> owned_executor;
  int64_t gpu_min_bytes = 0;
  // How calls are placed, for ServerInfo and the start-up line.
  std::string description = "cpu";
  // Where stored tensors live (--store_device): null for host memory.
  TensorMemory* store_memory = nullptr;
};

Server::Server(const ServerOptions& options, std::unique_ptr<TokenAuthenticator> authenticator)
    : authenticator_(std::move(authenticator)), shutdown_grace_(options.shutdown.grace) {
  if (options.threads > 0) {
    thread_limit_.emplace(oneapi::tbb::global_control::max_allowed_parallelism,
                          static_cast<size_t>(options.threads));
  }
  cpu_threads_ = static_cast<int>(oneapi::tbb::global_control::active_value(
      oneapi::tbb::global_control::max_allowed_parallelism));
}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(const ServerOptions& options) {
  TENSOROPS_RETURN_IF_ERROR(ValidateServerOptions(options));
  // Files are read before anything starts, so that a bad path fails Start with its own message.
  TENSOROPS_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                             BuildServerCredentials(options.security));
  TENSOROPS_ASSIGN_OR_RETURN(std::unique_ptr<TokenAuthenticator> authenticator,
                             LoadAuthenticator(options.security));
  // Before anything slow starts (a GPU, the store's recovery), so that a busy socket fails at once.
  if (!options.unix_socket.empty()) {
    TENSOROPS_RETURN_IF_ERROR(PrepareUnixSocketPath(options.unix_socket));
  }
  TENSOROPS_ASSIGN_OR_RETURN(Placement placement, ChoosePlacement(options));
  TENSOROPS_RETURN_IF_ERROR(ChooseStoreMemory(options, placement));

  std::unique_ptr<Server> server(new Server(options, std::move(authenticator)));
  TENSOROPS_ASSIGN_OR_RETURN(server->metrics_, Metrics::Create(options.metrics));
  TENSOROPS_RETURN_IF_ERROR(server->StartScheduler(options, placement));
  TENSOROPS_RETURN_IF_ERROR(server->OpenStore(options, placement));
  server->BuildService(options, placement);
  TENSOROPS_RETURN_IF_ERROR(server->Bind(options, std::move(credentials)));
  server->StartTrimmer(options);
  server->LogStartUp(options, placement);
  return server;
}

absl::StatusOr<Server::Placement> Server::ChoosePlacement(const ServerOptions& options) {
  Placement placement{.inventory = QueryDevices()};
  if (options.device == DeviceChoice::kCpu) return placement;
  const bool cuda = options.device == DeviceChoice::kCuda;
  placement.executor = options.gpu.executor_for_testing;
  if (placement.executor == nullptr && placement.inventory.cuda_devices.empty()) {
    if (cuda) {
      return absl::FailedPreconditionError(
          absl::StrFormat("--device=cuda, but no GPU is usable: %s (use --device=auto or cpu)",
                          placement.inventory.note));
    }
    return placement;
  }
  if (placement.executor == nullptr) {
    absl::StatusOr<std::unique_ptr<DeviceExecutor>> created =
        CreateCudaExecutor({.device = placement.inventory.cuda_devices.front().ordinal,
                            .streams = options.gpu.streams,
                            .memory_limit_bytes = options.gpu.memory_limit_bytes});
    if (!created.ok()) {
      if (cuda) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "--device=cuda, but the GPU cannot be used: %s", created.status().ToString()));
      }
      spdlog::warn("the GPU cannot be used, every call runs on the CPU: {}",
                   created.status().ToString());
      return placement;
    }
    placement.owned_executor = *std::move(created);
    placement.executor = placement.owned_executor.get();
  }
  // Under kCuda every call with a GPU form goes there, whatever its size.
  placement.gpu_min_bytes = cuda ? 0 : options.gpu.min_bytes;
  placement.description =
      cuda ? absl::StrFormat("%s for every call with a GPU kernel", placement.executor->name())
           : absl::StrFormat("%s for calls of >= %d request bytes, else cpu",
                             placement.executor->name(), placement.gpu_min_bytes);
  return placement;
}

absl::Status Server::ChooseStoreMemory(const ServerOptions& options, Placement& placement) {
  if (options.store.device == DeviceChoice::kCpu) return absl::OkStatus();
  if (placement.executor != nullptr) placement.store_memory = placement.executor->resident_memory();
  if (placement.store_memory == nullptr && options.store.device == DeviceChoice::kCuda) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "--store_device=cuda, but calls run on no GPU with memory for stored tensors (calls: "
        "%s; --device=%s); use --store_device=cpu or auto",
        placement.description, DeviceChoiceName(options.device)));
  }
  return absl::OkStatus();
}

absl::Status Server::StartScheduler(const ServerOptions& options, Placement& placement) {
  owned_executor_ = std::move(placement.owned_executor);
  Metrics* metrics = metrics_.get();
  DeviceExecutor* executor = placement.executor;
  SchedulerOptions scheduler_options{
      .queue = options.queue,
      .threads = options.threads,
      .on_load_change =
          [metrics](int64_t in_flight, int64_t queued) {
            metrics->SetInFlight(in_flight);
            metrics->SetQueued(queued);
          },
      .on_batch =
          [metrics, executor](std::string_view device, int64_t batch_size) {
            metrics->BatchTaken(device, batch_size);
            // Sampled as each device batch starts: what earlier and concurrent batches hold.
            if (device != "cpu" && executor != nullptr) {
              const DeviceMemory memory = executor->memory();
              metrics->SetDeviceMemory(memory.pinned_allocated, memory.pinned_in_use,
                                       memory.device_in_use);
            }
          },
      .device = executor,
      .gpu_min_bytes = placement.gpu_min_bytes,
      .on_device_fallback =
          [metrics](const absl::Status& device_error) {
            metrics->DeviceFallback();
            spdlog::warn("a call failed on the GPU and re-ran on the CPU: {}",
                         device_error.ToString());
          },
      .on_device_stages =
          [metrics](const DeviceStageTimes& stages) { metrics->DeviceBatchStages(stages); }};
  // One worker per core by default: each kernel also splits itself across the cores, so more
  // workers would only interleave calls, not finish them sooner.
  if (scheduler_options.queue.max_concurrent_calls == 0) {
    scheduler_options.queue.max_concurrent_calls = cpu_threads_;
  }
  TENSOROPS_ASSIGN_OR_RETURN(scheduler_, Scheduler::Create(std::move(scheduler_options)));
  return absl::OkStatus();
}

absl::Status Server::OpenStore(const ServerOptions& options, const Placement& placement) {
  store_ = std::make_unique<TensorStore>(options.store.memory_bytes, placement.store_memory);
  if (options.store.dir.empty()) return absl::OkStatus();
  TENSOROPS_ASSIGN_OR_RETURN(
      durable_,
      DurableStore::Open(
          {.dir = options.store.dir,
           .sync = options.store.sync,
           .sync_interval = options.store.sync_interval,
           .snapshot_interval = options.store.snapshot_interval,
           .recovery = options.store.recovery,
           .renamed_namespaces = authenticator_ == nullptr
                                     ? std::nullopt
                                     : std::make_optional(authenticator_->LegacyNamespaces())},
          store_.get(),
          [store = store_.get()](std::string_view ns, std::string_view name, int64_t from_version,
                                 std::string_view call) {
            return ReplayJournaledUpdate(*store, ns, name, from_version, call);
          }));
  const RecoveryReport& recovery = durable_->recovery();
  for (const std::string& warning : recovery.warnings) spdlog::warn("store recovery: {}", warning);
  spdlog::info(
      "store recovery: {} tensors ({} bytes) in {} from {}: snapshot {}, {} log(s), {} records "
      "replayed, {} skipped (already in the snapshot, or cancelled), {} failed, {} torn last "
      "record(s) dropped",
      recovery.tensors, recovery.tensor_bytes, absl::FormatDuration(recovery.duration),
      options.store.dir, recovery.snapshot.empty() ? "none" : recovery.snapshot,
      recovery.logs.size(), recovery.records, recovery.skipped, recovery.failed,
      recovery.torn_records);
  WarnOfUnreachableNamespaces(*store_, authenticator_.get());
  if (recovery.renamed_records > 0) {
    // Written at once, so that the store's files hold only the names of now, whatever later
    // happens to the token file's order.
    TENSOROPS_ASSIGN_OR_RETURN(const SnapshotReport snapshot, durable_->Snapshot());
    spdlog::info(
        "store recovery: {} records of namespaces token-N (servers before tenants were named) "
        "were read into the namespace of the N-th token of --auth_token_file; snapshot {} holds "
        "them under those names",
        recovery.renamed_records, snapshot.path);
  }
  return absl::OkStatus();
}

void Server::BuildService(const ServerOptions& options, const Placement& placement) {
  const ServerOptions::Limits& limits = options.limits;
  // Its threads mostly wait (for a lock), so they cost no CPU; enough of them that calls on
  // different tensors seldom queue behind each other's waits.
  // As many calls may wait there as may wait in the scheduler's queue (--max_queued_calls).
  constexpr int kBlockingPoolThreads = 16;
  blocking_pool_ = std::make_unique<BlockingPool>(
      kBlockingPoolThreads,
      std::max<int64_t>(kBlockingPoolThreads, options.queue.max_queued_calls));
  shared_memory_ = std::make_unique<SharedMemoryRegions>(
      SharedMemoryRegions::Limits{
          .max_regions = options.shared_memory.max_regions,
          .max_bytes = options.shared_memory.max_bytes > 0 ? options.shared_memory.max_bytes
                       : limits.max_memory_bytes > 0       ? limits.max_memory_bytes
                                                           : std::numeric_limits<int64_t>::max()},
      // CUDA regions open in the memory of the GPU calls run on.
      placement.executor != nullptr ? placement.executor->resident_memory() : nullptr);
  memory_ = std::make_unique<MemoryBudget>(limits.max_memory_bytes,
                                           [store = store_.get()] { return store->used_bytes(); });
  metrics_->WatchStore([store = store_.get(), durable = durable_.get()] {
    return StoreFigures{
        .tensors = store->tensor_count(),
        .used_bytes = store->used_bytes(),
        .limit_bytes = store->limit_bytes(),
        .device = store->device(),
        .durable = durable != nullptr ? std::optional(durable->stats()) : std::nullopt};
  });
  metrics_->WatchCallBytes([memory = memory_.get()] { return memory->call_bytes(); });
  serving_ = ServingContext{.limits = wire::DecodeLimits{.max_rank = limits.max_rank,
                                                         .max_elements = limits.max_elements,
                                                         .max_bytes = limits.max_message_bytes},
                            .scheduler = scheduler_.get(),
                            .metrics = metrics_.get(),
                            .authenticator = authenticator_.get(),
                            .max_stream_in_flight = limits.max_stream_in_flight,
                            .store = store_.get(),
                            .durable = durable_.get(),
                            .shared_memory = shared_memory_.get(),
                            .download_snapshot_bytes = options.store.download_snapshot_bytes,
                            .blocking_pool = blocking_pool_.get(),
                            .memory = memory_.get(),
                            .calls = &in_flight_calls_};
  service_ = std::make_unique<TensorOpsService>(
      serving_, BuildServerInfo(options, placement.inventory, cpu_threads_,
                                scheduler_->options().queue.max_concurrent_calls,
                                TlsModeName(options.security) != "off", authenticator_ != nullptr,
                                placement.description));
  inference_service_ = std::make_unique<kserve::InferenceService>(serving_);
}

absl::Status Server::Bind(const ServerOptions& options,
                          std::shared_ptr<grpc::ServerCredentials> credentials) {
  // Both are process-wide switches read by every ServerBuilder built afterwards; setting them again
  // is harmless.
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  const std::string address = ListenAddress(options.host, options.port);
  int selected_port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, credentials, &selected_port);
  // --unix_socket: the same services and credentials on a Unix domain socket too (Start has
  // checked the path); gRPC reports a bound Unix socket as port 1.
  int unix_socket_bound = 0;
  if (!options.unix_socket.empty()) {
    builder.AddListeningPort(UnixSocketTarget(options.unix_socket), credentials,
                             &unix_socket_bound);
  }
  // gRPC enables SO_REUSEPORT by default, which would let a second server share a busy port
  // silently; a port conflict must be an error instead.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // ValidateServerOptions keeps the sizes within gRPC's int. gRPC receives more than
  // --max_message_bytes, so that the handlers refuse a larger request naming the flag
  // (GrpcMaxReceiveMessageBytes, RequestError in parsed_request.h).
  builder.SetMaxReceiveMessageSize(static_cast<int>(GrpcMaxReceiveMessageBytes(options.limits)));
  builder.SetMaxSendMessageSize(static_cast<int>(options.limits.max_message_bytes));
  // Under --max_memory_bytes gRPC's own buffers are bounded too (GrpcMemoryQuotaBytes): without a
  // quota gRPC sees no memory pressure and reads 4 MiB or more ahead per stream, bytes that the
  // budget never sees when a call is abandoned while its request arrives. The builder keeps its
  // own reference to the quota.
  if (const int64_t quota_bytes = GrpcMemoryQuotaBytes(options.limits); quota_bytes > 0) {
    grpc::ResourceQuota quota("tensorops-server");
    builder.SetResourceQuota(
        quota.Resize(static_cast<size_t>(std::min<uint64_t>(quota_bytes, SIZE_MAX))));
  }
  builder.RegisterService(service_.get());
  builder.RegisterService(inference_service_.get());
  // The op calls count themselves; an interceptor counts the calls of every other method.
  std::vector<std::string> op_call_methods = service_->op_call_methods();
  op_call_methods.insert(op_call_methods.end(), inference_service_->op_call_methods().begin(),
                         inference_service_->op_call_methods().end());
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(in_flight_calls_.NewInterceptorFactory(op_call_methods));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  grpc_server_ = builder.BuildAndStart();
  // The ports are bound in order: a TCP port bound and no server means the Unix socket failed.
  if (grpc_server_ == nullptr && selected_port != 0 && !options.unix_socket.empty()) {
    return absl::UnavailableError(absl::StrFormat("cannot listen on %s (see gRPC's log)",
                                                  UnixSocketTarget(options.unix_socket)));
  }
  if (grpc_server_ == nullptr || selected_port == 0) {
    return absl::UnavailableError(
        absl::StrFormat("cannot listen on %s (port in use, or host not a local address%s)", address,
                        TlsModeName(options.security) == "off"
                            ? ""
                            : ", or gRPC rejected the TLS certificate and key: see its log"));
  }
  port_ = selected_port;
  if (unix_socket_bound != 0) unix_socket_ = IdentifyUnixSocket(options.unix_socket);
  // The default health service starts with "" SERVING and knows no other service.
  grpc_server_->GetHealthCheckService()->SetServingStatus(kServiceName, true);
  grpc_server_->GetHealthCheckService()->SetServingStatus(
      inference::GRPCInferenceService::service_full_name(), true);
  return absl::OkStatus();
}

void Server::StartTrimmer(const ServerOptions& options) {
  if (options.memory_trim.idle_after <= absl::ZeroDuration()) return;
  trimmer_ = std::make_unique<MemoryTrimmer>(MemoryTrimmerOptions{
      .idle_after = options.memory_trim.idle_after,
      // A quarter of the idle period, at most 250 ms: the trim comes at most that late, and a
      // sample (a few locks) 4 times a second costs nothing.
      .poll = std::min(options.memory_trim.idle_after / 4, absl::Milliseconds(250)),
      .sample = [this] {
        return IdleTrimPolicy::Sample{
            .busy = memory_->calls() + scheduler_->InFlightCount() + scheduler_->QueuedCount(),
            .calls_admitted = memory_->reservations(),
            .store_bytes = store_->used_bytes()};
      }});
}

void Server::LogStartUp(const ServerOptions& options, const Placement& placement) const {
  const std::string_view tls_mode = TlsModeName(options.security);
  const bool token_auth = authenticator_ != nullptr;
  const ServerOptions::Limits& limits = options.limits;
  const QueueOptions& queue = scheduler_->options().queue;
  spdlog::info(
      "tensorops-server {} (rev {}) listening on {}; {}tls: {}, auth: {}; devices: {}; placement: "
      "{}; limits: max_message_bytes={}, max_elements={}, max_rank={}, "
      "max_concurrent_calls={}, max_queued_calls={}, max_stream_in_flight={}; batching: "
      "max_batch={}, max_batch_bytes={}, max_queue_delay={}, inline_max_bytes={}; memory: {}; "
      "store: {}; metrics: {}",
      ThisBuild().version, ThisBuild().revision, ListenAddress(options.host, port_),
      unix_socket_.has_value()
          ? absl::StrFormat("also on %s (socket file mode %04o); ",
                            UnixSocketTarget(unix_socket_->path), unix_socket_->mode)
          : std::string(),
      tls_mode, token_auth ? "token" : "off", DevicesSummary(placement.inventory, cpu_threads_),
      placement.description, limits.max_message_bytes, limits.max_elements, limits.max_rank,
      queue.max_concurrent_calls, queue.max_queued_calls, limits.max_stream_in_flight,
      queue.max_batch, queue.max_batch_bytes, absl::FormatDuration(queue.max_queue_delay),
      queue.inline_max_bytes,
      absl::StrFormat(
          "max_memory_bytes=%s, heap trim %s, malloc arenas: %s",
          limits.max_memory_bytes > 0
              ? absl::StrCat(limits.max_memory_bytes, " (gRPC's buffers: a resource quota of ",
                             GrpcMemoryQuotaBytes(limits), ")")
              : std::string("0 (no limit)"),
          trimmer_ != nullptr
              ? absl::StrCat("after ", absl::FormatDuration(options.memory_trim.idle_after),
                             " idle")
              : std::string("off (--memory_trim_idle_ms=0)"),
          MallocArenas()),
      options.store.memory_bytes > 0
          ? absl::StrFormat(
                "store_memory_bytes=%d, device=%s, %s", options.store.memory_bytes,
                store_->device(),
                options.store.dir.empty()
                    ? std::string("in memory only (no --store_dir: stored tensors are lost when "
                                  "the server stops)")
                    : absl::StrFormat(
                          "durable in %s (sync=%s%s, snapshot every %s)", options.store.dir,
                          StoreSyncName(options.store.sync),
                          options.store.sync == StoreSync::kInterval
                              ? absl::StrCat(" every ",
                                             absl::FormatDuration(options.store.sync_interval))
                              : "",
                          options.store.snapshot_interval > absl::ZeroDuration()
                              ? absl::FormatDuration(options.store.snapshot_interval)
                              : std::string("never (on request and at shutdown)")))
          : std::string("off (--store_memory_bytes=0)"),
      metrics_->port() >= 0 ? absl::StrFormat("http://%s/metrics",
                                              ListenAddress(options.metrics.host, metrics_->port()))
                            : std::string("no endpoint (--metrics_port=-1)"));
  if (token_auth && tls_mode == "off") {
    spdlog::warn(
        "the bearer token is checked on a plaintext port: anyone who can see the traffic can read "
        "it (use --tls_cert/--tls_key, or TLS in front of this server)");
  }
}

Server::~Server() {
  Shutdown();
  if (grpc_server_ != nullptr) grpc_server_->Wait();
  // The store and the memory budget go before the metrics that read them.
  if (metrics_ != nullptr) {
    metrics_->WatchStore(nullptr);
    metrics_->WatchCallBytes(nullptr);
  }
}

void Server::Shutdown() { Shutdown(shutdown_grace_); }

void Server::Shutdown(absl::Duration grace) {
  absl::MutexLock lock(&shutdown_mu_);
  if (shut_down_ || grpc_server_ == nullptr) return;
  shut_down_ = true;
  // NOT_SERVING before the drain, so that health watchers (load balancers) learn of it while the
  // connection is still up. The health service's own Shutdown turns every service NOT_SERVING and
  // ignores later updates.
  if (grpc::HealthCheckServiceInterface* health = grpc_server_->GetHealthCheckService()) {
    health->Shutdown();
  }
  const int64_t calls_at_start = in_flight_calls_.count();
  spdlog::info(
      "shutdown: health is NOT_SERVING; refusing new calls, letting the calls in flight ({} now) "
      "finish for up to {}",
      calls_at_start, absl::FormatDuration(grace));
  const absl::Time start = absl::Now();
  const absl::Time deadline = start + grace;
  // New op calls are refused from now on. Streams stop reading; they end once what they read is
  // answered, within the grace.
  scheduler_->Close();
  service_->BeginShutdown();
  inference_service_->BeginShutdown();
  // gRPC's Shutdown sends GOAWAY, and from then on closes a connection the moment its last call
  // ends, without reading what the client still sends: a client whose frames (a window update,
  // the reset of its half of a stream) arrive after the close gets a connection reset, and can
  // lose the stream's last responses and status ("Broken pipe" in 1.4% of runs under load). So
  // the streams end first; their clients' last frames are then read before the GOAWAY's ping is
  // answered, and the connection closes cleanly.
  service_->AwaitStreamsEnded(deadline);
  inference_service_->AwaitStreamsEnded(deadline);
  const DrainOutcome drained = Drain(*grpc_server_, in_flight_calls_, deadline, kGoawayAnswerWait);
  // Nothing listens on the socket any more.
  if (unix_socket_.has_value()) RemoveUnixSocket(*unix_socket_);
  // Every call has ended by now (gRPC cancelled those the grace cut off, which takes them out of
  // the queue); what a worker still runs finishes before Stop returns.
  scheduler_->Stop();
  if (trimmer_ != nullptr) trimmer_->Stop();
  // No change can arrive any more: a last snapshot makes the next start-up a plain load.
  if (durable_ != nullptr) {
    absl::StatusOr<std::optional<SnapshotReport>> closed = durable_->Close();
    if (!closed.ok()) {
      spdlog::error("shutdown: the store's last snapshot failed (its log keeps every change): {}",
                    closed.status().ToString());
    } else if (closed->has_value()) {
      spdlog::info("shutdown: store snapshot {} written: {} tensors, {} bytes, in {}",
                   (*closed)->path, (*closed)->tensors, (*closed)->bytes,
                   absl::FormatDuration((*closed)->duration));
    }
  }
  // The failed calls held back from the log are summed up before the last line.
  CallLog::Global().Flush(absl::Now());
  const absl::Time end = absl::Now();
  if (!drained.calls_ended) {
    spdlog::warn(
        "shutdown: grace period of {} ended; calls still running were cancelled; server stopped "
        "after {}",
        absl::FormatDuration(grace), absl::FormatDuration(end - start));
    return;
  }
  spdlog::info(
      "shutdown: {}; {}; server stopped after {}",
      calls_at_start == 0 ? std::string("no calls were in flight")
                          : absl::StrFormat("in-flight calls finished after %s",
                                            absl::FormatDuration(drained.calls_end - start)),
      drained.connections_closed
          ? absl::StrFormat("every connection closed %s later",
                            absl::FormatDuration(drained.connections_end - drained.calls_end))
          : absl::StrFormat("closed the connections whose clients did not answer the GOAWAY "
                            "within %s (idle clients)",
                            absl::FormatDuration(kGoawayAnswerWait)),
      absl::FormatDuration(end - start));
}

void Server::Wait() {
  if (grpc_server_ != nullptr) grpc_server_->Wait();
}

}  // namespace tensorops
