// ServerOptions: everything a tensorops server is configured with. `main` turns flags into this
// struct once; tests build it directly.
//
//   ServerOptions options;
//   options.port = 0;  // any free port
//   options.limits.max_elements = 1 << 20;
//   options.queue.max_batch = 16;
//   options.device = DeviceChoice::kCpu;
//   options.shutdown.grace = absl::Seconds(30);
//   options.security.tls_cert_file = "/etc/tensorops/server.crt";
//   options.security.tls_key_file = "/etc/tensorops/server.key";
//   options.security.auth_token_file = "/etc/tensorops/token";
#ifndef TENSOROPS_SERVER_CONFIG_SERVER_OPTIONS_H_
#define TENSOROPS_SERVER_CONFIG_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kernels/cuda/executor.h"
#include "kernels/shape.h"
#include "server/core/scheduler.h"
#include "server/observability/metrics.h"
#include "server/store/durable_store.h"

namespace tensorops {

// DeviceChoice is where calls run (--device): see ServerOptions::device.
enum class DeviceChoice { kAuto, kCpu, kCuda };

// DeviceChoiceName is the choice as --device spells it: "auto", "cpu" or "cuda".
std::string_view DeviceChoiceName(DeviceChoice choice);

// The Abseil flag hooks, so that --device parses into a DeviceChoice; any other text fails the
// parse with an error listing the choices (Abseil prints it and exits at start-up).
bool AbslParseFlag(absl::string_view text, DeviceChoice* choice, std::string* error);
std::string AbslUnparseFlag(DeviceChoice choice);

// ByteCount is the value of a byte-count flag (--max_message_bytes, --store_memory_bytes, ...): an
// integer, or one with a suffix as Kubernetes writes quantities, K, M, G, T (powers of 1000) or
// Ki, Mi, Gi, Ti (powers of 1024): "2G", "512Mi". Anything else, or a count past 2^63 - 1, fails
// the parse with an error that says the form.
struct ByteCount {
  int64_t bytes = 0;
};
bool AbslParseFlag(absl::string_view text, ByteCount* count, std::string* error);
std::string AbslUnparseFlag(ByteCount count);

// The flag hooks of --store_sync (always, interval, none) and --store_recover (strict, discard).
bool AbslParseFlag(absl::string_view text, StoreSync* sync, std::string* error);
std::string AbslUnparseFlag(StoreSync sync);
bool AbslParseFlag(absl::string_view text, StoreRecovery* recovery, std::string* error);
std::string AbslUnparseFlag(StoreRecovery recovery);

// ServerOptions configure Server::Start, which rejects values out of range (ValidateServerOptions)
// before it starts anything.
struct ServerOptions {
  // Limits on one call, applied by the codec (per tensor) and to every result; exceeding one gives
  // RESOURCE_EXHAUSTED naming the flag.
  struct Limits {
    // Largest gRPC message accepted and sent, in bytes (both directions); 1..2^31-1 because gRPC
    // takes an int. Default 1 GiB.
    int64_t max_message_bytes = int64_t{1} << 30;
    // Largest element count of any one tensor, request or result. The default (2^32) lets the
    // counts above 2^31 that docs/semantics.md allows through; raise max_message_bytes to actually
    // send such tensors.
    int64_t max_elements = int64_t{1} << 32;
    // Largest rank of any one tensor, 0..16 (the range docs/semantics.md allows).
    int max_rank = kMaxRank;
    // Requests one RunStream may have read and not yet answered, >= 1; the server reads no more
    // of that stream until one is answered. Default 64.
    int max_stream_in_flight = 64;
    // Most bytes that op calls admitted and not yet done (their requests and planned results)
    // and the tensor store hold together, >= 0; a call that would take the total past it is
    // refused with RESOURCE_EXHAUSTED naming --max_memory_bytes (server/core/memory_budget.h).
    // 0 (default) = no limit.
    int64_t max_memory_bytes = 0;
  };

  // What Server::Shutdown does with calls already in flight.
  struct Shutdown {
    // How long in-flight calls may run after shutdown begins; those still running then are
    // cancelled. >= 0 (0 cancels them at once). Default 5 s.
    absl::Duration grace = absl::Seconds(5);
  };

  // Transport security and caller authentication. Every field is a file path; empty means unset.
  // Server::Start rejects an inconsistent set with INVALID_ARGUMENT naming the flags and fields
  // (ValidateServerOptions), reads the files once (a changed file takes effect at the next start)
  // and fails on a file it cannot read with an error naming the path.
  struct Security {
    // PEM certificate chain the server presents, leaf first. Set together with tls_key_file; both
    // unset serves plaintext.
    std::string tls_cert_file;
    // PEM private key of tls_cert_file's leaf certificate.
    std::string tls_key_file;
    // PEM CA certificate(s) that client certificates must chain to: mutual TLS, where a client
    // without a certificate signed by one of them cannot connect. Needs tls_cert_file.
    std::string tls_client_ca_file;
    // File of bearer tokens, one per line, every TensorOps call must send one of as
    // "authorization: Bearer <token>" metadata (UNAUTHENTICATED otherwise); whitespace around a
    // token, blank lines and '#' lines are ignored, and a file without a token is rejected. Each
    // token is a tenant whose stored tensors no other token sees. Health and reflection stay
    // open. Without TLS the tokens cross the network in clear text.
    std::string auth_token_file;
  };

  // Interface to listen on: an IPv4/IPv6 address or a host name. Default loopback only.
  std::string host = "127.0.0.1";
  // TCP port, 0..65535; 0 picks a free port (read it back with Server::port()).
  int port = 50051;
  // Path of a Unix domain socket to listen on as well, with the same services and credentials,
  // for clients on this host (gRPC target "unix:PATH"); empty (the default) = none. At most
  // kMaxUnixSocketPathBytes (107) bytes. Start fails when a server listens there already or
  // something other than a socket is there, replaces a stale socket file (nothing listening), and
  // Shutdown removes the file. The file's mode follows the process's umask, and a client needs
  // write permission on it to connect.
  std::string unix_socket;
  // Threads the CPU kernels may use (oneTBB's max_allowed_parallelism, process-wide);
  // 0 = all cores.
  int threads = 0;
  Limits limits;
  // The executor's queue and batching (server/core/scheduler.h has each field's meaning), with the
  // server's defaults: max_concurrent_calls 0 = one worker per CPU thread of `threads`; a worker
  // takes up to 8 calls at once; a request of up to 64 KiB runs on the gRPC thread that received
  // it when a worker is free and nothing is queued, since below that the hand-off costs more than
  // the op. A call beyond max_queued_calls is refused with RESOURCE_EXHAUSTED before its result
  // is allocated. Assign fields one by one: a braced `{.max_batch = 2}` would reset the rest to
  // the Scheduler's defaults, not these.
  QueueOptions queue = {
      .max_concurrent_calls = 0, .max_batch = 8, .inline_max_bytes = int64_t{64} << 10};
  Shutdown shutdown;
  Security security;
  // Where calls run: kAuto (the GPU for calls of at least gpu.min_bytes when a GPU was found,
  // else the CPU), kCpu, or kCuda (every call with a GPU kernel on the GPU; Start fails without
  // a usable GPU). Calls the GPU fails re-run on the CPU either way.
  DeviceChoice device = DeviceChoice::kAuto;
  // The CUDA executor (used when `device` puts calls on a GPU).
  struct Gpu {
    // Streams of the GPU, i.e. device batches in flight at once: >= 1. Default 4.
    int streams = 4;
    // Under kAuto, calls with a smaller request run on the CPU: >= 0. Default 1 MiB.
    int64_t min_bytes = int64_t{1} << 20;
    // Most device memory batches hold at once, >= 0; 0 (default) = no limit but the device's.
    int64_t memory_limit_bytes = 0;
    // Tests only: an executor to use as if a GPU had been found (not owned; must outlive the
    // server).
    DeviceExecutor* executor_for_testing = nullptr;
  };
  Gpu gpu;
  // The Prometheus endpoint; port -1 (the default) serves none, but calls are still counted.
  MetricsOptions metrics;
  // The tensor store (server/store/tensor_store.h): named tensors kept in memory by PutTensor and
  // referenced by any op.
  // Shared-memory regions clients on this host register (RegisterSharedMemory, Triton's
  // SystemSharedMemoryRegister): server/shared_memory/regions.h.
  struct SharedMemory {
    // Regions one caller (token namespace) may have registered at once, >= 0 (0: shared memory
    // is refused). Default 64.
    int64_t max_regions = 64;
    // Bytes mapped for all regions together, >= 0; 0 (the default) takes --max_memory_bytes, or
    // no limit without it. Not above --max_memory_bytes when that is set.
    int64_t max_bytes = 0;
  };
  SharedMemory shared_memory;

  struct Store {
    // Most bytes the stored tensors (and uploads in flight) hold in all, >= 0; an upload beyond
    // it gets RESOURCE_EXHAUSTED naming --store_memory_bytes. 0 turns the store off. Default
    // 1 GiB: on by default, modest next to a server's memory; raise it for resident weights.
    int64_t memory_bytes = int64_t{1} << 30;
    // Where the stored tensors live (--store_device): kCpu, host memory (the default); kCuda,
    // the GPU executor's memory (Start fails when calls run on no GPU); kAuto, the GPU's when
    // calls run on one, else the host's.
    DeviceChoice device = DeviceChoice::kCpu;
    // GetTensor copies a tensor of at most this many bytes whole, at one version, under one short
    // read lock, and streams the copy (held against --max_memory_bytes meanwhile): in-place
    // updates never abort such a download. A larger one streams chunk by chunk and ends ABORTED
    // when the tensor changes first. >= 0; 0 = never copy.
    int64_t download_snapshot_bytes = int64_t{256} << 20;
    // Durability (server/store/durable_store.h). `dir` (--store_dir) is where the store keeps its
    // snapshots and log; "" (the default) keeps it in memory only, lost at every restart.
    std::string dir;
    // When the log is fsynced (--store_sync): kInterval by default, every `sync_interval`
    // (--store_sync_interval_ms, > 0).
    StoreSync sync = StoreSync::kInterval;
    absl::Duration sync_interval = absl::Milliseconds(100);
    // How often a snapshot compacts the log (--store_snapshot_interval_s, >= 0; 0 = only on
    // request and at shutdown), when something changed.
    absl::Duration snapshot_interval = absl::Minutes(10);
    // What start-up does with a damaged store file (--store_recover).
    StoreRecovery recovery = StoreRecovery::kStrict;
  };
  Store store;
  // Giving freed heap memory back to the system after a burst (server/core/memory_trimmer.h).
  struct MemoryTrim {
    // How long the server must be idle after calls before it trims the heap, >= 0; 0 = never.
    // Default 1 s.
    absl::Duration idle_after = absl::Seconds(1);
  };
  MemoryTrim memory_trim;
};

// GrpcMaxReceiveMessageBytes is gRPC's own receive limit, which Server::Start sets above
// max_message_bytes so that a request over the flag reaches the handlers, which refuse it with
// RESOURCE_EXHAUSTED naming the flag, the request's size and the limit (RequestError in
// server/rpc/parsed_request.h) instead of gRPC's "Received message larger than max (N vs. M)":
// twice max_message_bytes, and at least max_message_bytes + 4 MiB (gRPC's default receive limit),
// at most INT_MAX (gRPC takes an int). A request over it still gets gRPC's message. The margin is
// bounded by the flag (or 4 MiB) and, under --max_memory_bytes, by the resource quota: a refused
// request is read whole and parsed before it is refused, as gRPC (1.51) read it whole before its
// own check too.
int64_t GrpcMaxReceiveMessageBytes(const ServerOptions::Limits& limits);

// GrpcMemoryQuotaBytes is the size of the gRPC resource quota that Server::Start sets under
// --max_memory_bytes, or 0 (no quota) without that limit: the limit plus the smaller of the limit
// and gRPC's receive limit (GrpcMaxReceiveMessageBytes), i.e. at most twice the limit, saturating
// at INT64_MAX. The quota bounds what gRPC holds itself, chiefly the bytes of requests still
// arriving, which the budget has not seen: as they take a larger share of it, gRPC advertises
// smaller receive windows, so that clients send more slowly, and past it gRPC resets streams of
// its choosing with RESOURCE_EXHAUSTED (the client reads "Received RST_STREAM with error code
// 11", which names no flag). The second term lets any request the limit could admit arrive whole
// while gRPC holds up to the limit besides; a request over the limit reaches the budget (which
// names --max_memory_bytes) when gRPC holds little else and it is at most about the quota's size
// less what gRPC holds, and is otherwise reset (measured with gRPC 1.51: a request of up to half
// the quota always arrived whole, one of 0.7-0.98 of it sometimes did not, right after another
// as large).
int64_t GrpcMemoryQuotaBytes(const ServerOptions::Limits& limits);

// ValidateServerOptions checks every range and combination Start needs, in one place for both
// the flags (`main` exits 2 on an error) and direct users (Start returns it): INVALID_ARGUMENT for
// the first value out of range, naming the flag that sets it, the value and the rule, e.g.
// "--max_batch=0 is out of range: must be >= 1". It reads no files and binds nothing: a missing
// certificate or a busy port fail later, in Start.
absl::Status ValidateServerOptions(const ServerOptions& options);

// ValidateSchedulerOptions is the same check for a Scheduler of its own (Scheduler::Create), with
// the same wording; there max_concurrent_calls must be >= 1.
absl::Status ValidateSchedulerOptions(const SchedulerOptions& options);

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_CONFIG_SERVER_OPTIONS_H_
