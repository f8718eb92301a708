// tensorops-server: serves tensorops.v1.TensorOps until SIGINT or SIGTERM.
//
// Exit status: 0 after a clean shutdown (and for --help, --version), 1 when the server cannot
// start, 2 for a bad command line.
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "server/config/command_line.h"
#include "server/config/server_options.h"
#include "server/core/memory_trimmer.h"
#include "server/observability/build_info.h"
#include "server/server.h"
#include "spdlog/cfg/env.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, host, "127.0.0.1",
          "Address to listen on (IPv4, IPv6 or host name); 0.0.0.0 or :: for all interfaces.");
ABSL_FLAG(int, port, 50051, "TCP port to listen on, 0..65535; 0 picks a free port.");
ABSL_FLAG(std::string, unix_socket, "",
          "Path of a Unix domain socket to listen on as well (at most 107 bytes), for clients on "
          "this host (target unix:PATH), with the same TLS and token settings; empty = none. A "
          "stale socket file there is replaced; a server listening there, or a file that is not a "
          "socket, stops the start. The file's mode follows the umask (connecting takes write "
          "permission on it); it is removed at shutdown.");
ABSL_FLAG(int, threads, 0, "CPU threads the kernels may use; 0 = all cores.");
ABSL_FLAG(tensorops::ByteCount, max_message_bytes, tensorops::ByteCount{int64_t{1} << 30},
          "Largest gRPC message received or sent, in bytes (1..2147483647); a larger request "
          "gets RESOURCE_EXHAUSTED naming this flag (up to gRPC's own receive limit: twice this, "
          "at least this plus 4 MiB).");
ABSL_FLAG(int64_t, max_elements, int64_t{1} << 32,
          "Largest element count of any one tensor in a request or result (>= 1).");
ABSL_FLAG(int, max_rank, 16, "Largest rank of any one tensor (0..16).");
ABSL_FLAG(int, max_concurrent_calls, 0,
          "Calls executing at once (>= 0; 0 = one per CPU thread the kernels may use).");
ABSL_FLAG(int, max_queued_calls, 1024,
          "Calls admitted and waiting to execute (>= 0); more get RESOURCE_EXHAUSTED. As many "
          "(at least 16) may wait for a stored tensor's lock before that.");
ABSL_FLAG(tensorops::ByteCount, max_memory_bytes, tensorops::ByteCount{0},
          "Most bytes that calls in flight (their requests and results) and the tensor store hold "
          "together (>= 0; 0 = no limit); a call that would take the total past it gets "
          "RESOURCE_EXHAUSTED. When set, gRPC's buffers of requests still arriving are held to a "
          "quota of at most twice this (this plus the smaller of this and gRPC's receive "
          "limit).");
ABSL_FLAG(int64_t, memory_trim_idle_ms, 1000,
          "Milliseconds the server must be idle after calls before it gives freed heap memory "
          "back to the system (>= 0; 0 = never).");
ABSL_FLAG(int, max_stream_in_flight, 64,
          "Requests one RunStream may have read and not yet answered (>= 1).");
ABSL_FLAG(int, max_batch, 8,
          "Most calls a worker takes from the queue at once and runs side by side (>= 1).");
ABSL_FLAG(tensorops::ByteCount, max_batch_bytes, tensorops::ByteCount{int64_t{64} << 20},
          "Most request bytes in one batch (>= 1); a larger call runs alone.");
ABSL_FLAG(int64_t, max_queue_delay_us, 0,
          "Microseconds a worker holding a partial batch waits for more calls (>= 0; 0 = never "
          "wait).");
ABSL_FLAG(tensorops::ByteCount, inline_max_bytes, tensorops::ByteCount{int64_t{64} << 10},
          "Largest request (bytes) run on the gRPC thread that received it when a worker is free "
          "and nothing is queued, instead of being handed to a worker (>= 0; 0 = never).");
ABSL_FLAG(tensorops::DeviceChoice, device, tensorops::DeviceChoice::kAuto,
          "Where calls run: auto (a usable GPU for calls of at least --gpu_min_bytes, else the "
          "CPU), cpu, or cuda (every call with a GPU kernel on the GPU; fail at start-up without "
          "one). A call the GPU fails re-runs on the CPU. Calls on tensors stored in host memory "
          "run on the CPU (see --store_device).");
ABSL_FLAG(int, streams, 4, "CUDA streams, i.e. batches on the GPU at once (>= 1).");
ABSL_FLAG(tensorops::ByteCount, gpu_min_bytes, tensorops::ByteCount{int64_t{1} << 20},
          "Under --device=auto, calls with a smaller request run on the CPU, where they cost less "
          "than a round trip to the GPU (>= 0).");
ABSL_FLAG(tensorops::ByteCount, gpu_memory_limit, tensorops::ByteCount{0},
          "Most GPU memory in bytes that batches hold at once (>= 0; 0 = no limit but the "
          "device's); a batch that would exceed it runs on the CPU.");
ABSL_FLAG(int64_t, max_shared_memory_regions, 64,
          "Shared-memory regions one caller (token) may have registered at once; 0 refuses "
          "shared memory.");
ABSL_FLAG(tensorops::ByteCount, max_shared_memory_bytes, tensorops::ByteCount{0},
          "Bytes of shared-memory regions mapped at once, over all callers (a region counts until "
          "the last call using it is done); 0 = --max_memory_bytes, or no limit without it. Not "
          "above --max_memory_bytes.");
ABSL_FLAG(tensorops::ByteCount, store_memory_bytes, tensorops::ByteCount{int64_t{1} << 30},
          "Most bytes the tensor store (PutTensor, results stored by any op, referenced by any "
          "op) holds in all (>= 0; 0 turns the store off).");
ABSL_FLAG(tensorops::DeviceChoice, store_device, tensorops::DeviceChoice::kCpu,
          "Where stored tensors live, and so where calls on them run: cpu (host memory), cuda "
          "(the GPU's memory, so that ops on them copy nothing across PCIe but their small "
          "inputs; fail at start-up unless calls run on a GPU), or auto (cuda when calls run on a "
          "GPU, else cpu).");
ABSL_FLAG(tensorops::ByteCount, store_download_snapshot_bytes,
          tensorops::ByteCount{int64_t{256} << 20},
          "GetTensor copies a stored tensor of at most this many bytes whole, at one version, "
          "and streams the copy (counted against --max_memory_bytes), so that in-place updates "
          "never abort the download; a larger one streams chunk by chunk and ends ABORTED if the "
          "tensor changes first (>= 0; 0 = never copy).");
ABSL_FLAG(std::string, store_dir, "",
          "Directory where the tensor store keeps its snapshots and log, so that stored tensors "
          "survive a restart or a crash (created if missing; one server per directory). Empty = "
          "in memory only: every stored tensor is lost when the server stops.");
ABSL_FLAG(tensorops::StoreSync, store_sync, tensorops::StoreSync::kInterval,
          "When the store's log is fsynced (with --store_dir): always (before a change is "
          "acknowledged), interval (every --store_sync_interval_ms) or none (when the OS writes "
          "it). With always no crash loses an acknowledged change; with interval and none, "
          "in-place updates are acknowledged once queued for the log's writer, so a crash of the "
          "server loses at most those still queued, and a crash of the machine at most the "
          "interval (interval) or what the OS had not written (none).");
ABSL_FLAG(int64_t, store_sync_interval_ms, 100,
          "With --store_sync=interval, the longest an acknowledged change waits for its fsync, in "
          "milliseconds (> 0).");
ABSL_FLAG(int64_t, store_snapshot_interval_s, 600,
          "With --store_dir, how often a snapshot of every stored tensor compacts the log, in "
          "seconds, when anything changed (>= 0; 0 = only on request, tensorops-cli snapshot, "
          "and at shutdown).");
ABSL_FLAG(tensorops::StoreRecovery, store_recover, tensorops::StoreRecovery::kStrict,
          "What start-up does with a damaged file in --store_dir: strict (refuse to start, "
          "naming the file and offset) or discard (move the store's files to a damaged-<time> "
          "folder there and start empty). A torn last record, from a crash while it was "
          "written, is never damage: it was never acknowledged, and is dropped.");
ABSL_FLAG(int, metrics_port, -1,
          "Port of the Prometheus endpoint (GET /metrics); -1 = none, 0 = any free port.");
ABSL_FLAG(std::string, metrics_host, "",
          "Interface of the Prometheus endpoint (an IPv4 address or host name); empty = --host, so "
          "that the metrics are no more exposed than the service.");
ABSL_FLAG(std::string, log_level, "info",
          "Least severe log level written: trace, debug (a line per call), info, warn, error, "
          "critical or off.");
ABSL_FLAG(int, shutdown_grace_s, 5,
          "Seconds that calls in flight at SIGTERM/SIGINT may take to finish before they are "
          "cancelled (>= 0).");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM certificate chain to serve TLS with (needs --tls_key); empty serves plaintext.");
ABSL_FLAG(std::string, tls_key, "", "PEM private key of --tls_cert.");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM CA certificate(s) that clients' certificates must chain to: mutual TLS, clients "
          "without such a certificate cannot connect (needs --tls_cert).");
ABSL_FLAG(std::string, auth_token_file, "",
          "File of bearer tokens, one per line as TOKEN or TENANT: TOKEN ('#' starts a "
          "comment): every TensorOps call must send one as 'authorization: Bearer <token>' "
          "metadata (UNAUTHENTICATED otherwise), and each tenant's stored tensors and regions "
          "are its own (a named tenant may have several tokens). Health and reflection stay "
          "open.");

namespace {

// MetricsHostFor is the metrics endpoint's interface when --metrics_host is not given: where the
// service listens, so that a server kept on loopback does not publish its metrics on every
// interface. The endpoint's HTTP server (Debian's civetweb) has no IPv6, so an IPv6 --host maps
// to its IPv4 counterpart: "::" (every interface) to 0.0.0.0, anything else to loopback.
std::string MetricsHostFor(const std::string& service_host) {
  if (service_host.find(':') == std::string::npos) return service_host;
  return service_host == "::" || service_host == "[::]" ? "0.0.0.0" : "127.0.0.1";
}

// FlagsToOptions copies the flags into ServerOptions, unchecked: ValidateServerOptions owns the
// ranges.
tensorops::ServerOptions FlagsToOptions() {
  tensorops::ServerOptions options;
  options.host = absl::GetFlag(FLAGS_host);
  options.port = absl::GetFlag(FLAGS_port);
  options.unix_socket = absl::GetFlag(FLAGS_unix_socket);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.limits.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes).bytes;
  options.limits.max_elements = absl::GetFlag(FLAGS_max_elements);
  options.limits.max_rank = absl::GetFlag(FLAGS_max_rank);
  options.limits.max_stream_in_flight = absl::GetFlag(FLAGS_max_stream_in_flight);
  options.limits.max_memory_bytes = absl::GetFlag(FLAGS_max_memory_bytes).bytes;
  options.memory_trim.idle_after = absl::Milliseconds(absl::GetFlag(FLAGS_memory_trim_idle_ms));
  options.queue.max_concurrent_calls = absl::GetFlag(FLAGS_max_concurrent_calls);
  options.queue.max_queued_calls = absl::GetFlag(FLAGS_max_queued_calls);
  options.queue.max_batch = absl::GetFlag(FLAGS_max_batch);
  options.queue.max_batch_bytes = absl::GetFlag(FLAGS_max_batch_bytes).bytes;
  options.queue.max_queue_delay = absl::Microseconds(absl::GetFlag(FLAGS_max_queue_delay_us));
  options.queue.inline_max_bytes = absl::GetFlag(FLAGS_inline_max_bytes).bytes;
  options.device = absl::GetFlag(FLAGS_device);
  options.gpu.streams = absl::GetFlag(FLAGS_streams);
  options.gpu.min_bytes = absl::GetFlag(FLAGS_gpu_min_bytes).bytes;
  options.gpu.memory_limit_bytes = absl::GetFlag(FLAGS_gpu_memory_limit).bytes;
  options.shared_memory.max_regions = absl::GetFlag(FLAGS_max_shared_memory_regions);
  options.shared_memory.max_bytes = absl::GetFlag(FLAGS_max_shared_memory_bytes).bytes;
  options.store.memory_bytes = absl::GetFlag(FLAGS_store_memory_bytes).bytes;
  options.store.device = absl::GetFlag(FLAGS_store_device);
  options.store.download_snapshot_bytes = absl::GetFlag(FLAGS_store_download_snapshot_bytes).bytes;
  options.store.dir = absl::GetFlag(FLAGS_store_dir);
  options.store.sync = absl::GetFlag(FLAGS_store_sync);
  options.store.sync_interval = absl::Milliseconds(absl::GetFlag(FLAGS_store_sync_interval_ms));
  options.store.snapshot_interval = absl::Seconds(absl::GetFlag(FLAGS_store_snapshot_interval_s));
  options.store.recovery = absl::GetFlag(FLAGS_store_recover);
  options.metrics.port = absl::GetFlag(FLAGS_metrics_port);
  const std::string metrics_host = absl::GetFlag(FLAGS_metrics_host);
  options.metrics.host = metrics_host.empty() ? MetricsHostFor(options.host) : metrics_host;
  options.shutdown.grace = absl::Seconds(absl::GetFlag(FLAGS_shutdown_grace_s));
  options.security.tls_cert_file = absl::GetFlag(FLAGS_tls_cert);
  options.security.tls_key_file = absl::GetFlag(FLAGS_tls_key);
  options.security.tls_client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  options.security.auth_token_file = absl::GetFlag(FLAGS_auth_token_file);
  return options;
}

// Exit status for a bad command line; 1 is for a server that cannot start.
constexpr int kExitUsage = 2;

// The help's head; the flags follow, in kFlagGroups' groups.
constexpr char kUsage[] =
    R"(usage: tensorops-server [--flag=value ...] [--flagfile=FILE]

Serves tensorops scatter/gather operations (tensorops.v1.TensorOps, with gRPC health checking and
server reflection) until SIGINT or SIGTERM. Byte counts (the *_bytes flags, --gpu_memory_limit)
take a suffix: K, M, G, T (powers of 1000) or Ki, Mi, Gi, Ti (powers of 1024), e.g. 512Mi.

  --flagfile=FILE
      Read more flags from FILE, one per line; blank lines and lines starting with '#' are
      skipped (e.g. deploy/tensorops.flags). Several files: --flagfile=A,B.
  --help
      Print this help and exit.
  --version
      Print the version, git revision and build type, and exit.

Exit status: 0 after a clean shutdown, 1 when the server cannot start (a port in use, a file that
cannot be read, --device=cuda without a GPU), 2 for a bad command line.
)";

// kFlagGroups: every flag of this file, in the groups of the help. A flag left out of every group
// is unknown to ParseCommandLine.
const std::vector<tensorops::FlagGroup> kFlagGroups = {
    {"Network", {"host", "port", "unix_socket", "shutdown_grace_s"}},
    {"Limits",
     {"max_message_bytes", "max_elements", "max_rank", "max_concurrent_calls", "max_queued_calls",
      "max_stream_in_flight", "threads"}},
    {"Memory", {"max_memory_bytes", "memory_trim_idle_ms"}},
    {"Batching", {"max_batch", "max_batch_bytes", "max_queue_delay_us", "inline_max_bytes"}},
    {"GPU", {"device", "streams", "gpu_min_bytes", "gpu_memory_limit"}},
    {"TLS and authentication", {"tls_cert", "tls_key", "tls_client_ca", "auth_token_file"}},
    {"Shared memory", {"max_shared_memory_regions", "max_shared_memory_bytes"}},
    {"Metrics", {"metrics_port", "metrics_host"}},
    {"Logging", {"log_level"}},
    {"Store",
     {"store_memory_bytes", "store_device", "store_download_snapshot_bytes", "store_dir",
      "store_sync", "store_sync_interval_ms", "store_snapshot_interval_s", "store_recover"}},
};

// ListenProbe is what ProbeListenAddress found of host:port before gRPC binds it.
struct ListenProbe {
  // getaddrinfo's error for a host that does not resolve; empty when it resolves.
  std::string unresolved;
  // Another socket already listens there.
  bool in_use = false;
};

// ProbeListenAddress resolves host:port and binds a socket of our own to each address first, with
// SO_REUSEADDR, as gRPC binds. gRPC's own failure for a host that does not resolve or a port in
// use is a line of several hundred characters of core error on stderr before ours; probing first
// keeps these common mistakes to one clear line. A listener that appears between the probe and
// gRPC's bind still gets gRPC's error. Port 0 is only resolved.
ListenProbe ProbeListenAddress(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  // gRPC takes IPv6 literals with or without brackets; getaddrinfo only without.
  absl::string_view bare_host = host;
  if (absl::ConsumePrefix(&bare_host, "[")) absl::ConsumeSuffix(&bare_host, "]");
  addrinfo* addresses = nullptr;
  ListenProbe probe;
  if (const int error = getaddrinfo(std::string(bare_host).c_str(), std::to_string(port).c_str(),
                                    &hints, &addresses);
      error != 0) {
    probe.unresolved = gai_strerror(error);
    return probe;
  }
  for (const addrinfo* address = addresses; address != nullptr && port != 0 && !probe.in_use;
       address = address->ai_next) {
    const int fd =
        socket(address->ai_family, address->ai_socktype | SOCK_CLOEXEC, address->ai_protocol);
    if (fd < 0) continue;
    const int reuse = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &reuse, sizeof(reuse));
    probe.in_use = bind(fd, address->ai_addr, address->ai_addrlen) != 0 && errno == EADDRINUSE;
    close(fd);
  }
  freeaddrinfo(addresses);
  return probe;
}

}  // namespace

int main(int argc, char** argv) {
  // Before any thread exists (memory_trimmer.h says why).
  tensorops::LimitMallocArenas();
  // Debian builds Abseil without NDEBUG, which leaves absl::Mutex's deadlock detection on: every
  // lock then records its order in one process-wide graph under one global lock, about 2% of the
  // CPU of 1 KiB calls and a point all of them contend on (bench/README.md). The tests keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  const std::vector<std::string> args(argv + 1, argv + argc);
  const absl::StatusOr<tensorops::ParsedCommandLine> command_line =
      tensorops::ParseCommandLine(args, kFlagGroups);
  if (!command_line.ok()) {
    std::fprintf(stderr, "tensorops-server: %s\n",
                 std::string(command_line.status().message()).c_str());
    return kExitUsage;
  }
  if (command_line->help) {
    std::cout << kUsage << tensorops::FlagsHelp(kFlagGroups);
    return 0;
  }
  if (command_line->version) {
    const tensorops::BuildInfo& build = tensorops::ThisBuild();
    // CMake leaves the build type empty unless CMAKE_BUILD_TYPE is set.
    const std::string build_type = build.build_type.empty()
                                       ? std::string("no CMAKE_BUILD_TYPE")
                                       : absl::StrCat(build.build_type, " build");
    std::cout << absl::StrFormat("tensorops-server %s (revision %s, %s, %s)\n", build.version,
                                 build.revision, build_type, build.compiler);
    return 0;
  }

  // A bad value is a usage error (exit 2), told apart from a server that cannot start (exit 1).
  const tensorops::ServerOptions options = FlagsToOptions();
  if (const absl::Status valid = tensorops::ValidateServerOptions(options); !valid.ok()) {
    std::fprintf(stderr, "tensorops-server: %s\n", std::string(valid.message()).c_str());
    return kExitUsage;
  }
  const std::string log_level = absl::GetFlag(FLAGS_log_level);
  // spdlog's from_str maps every unknown name to "off", so the names are checked here: spdlog's
  // own, and the short forms the help lists and from_str also takes.
  constexpr std::string_view kLevelNames[] = {"trace", "debug", "info",     "warn", "warning",
                                              "err",   "error", "critical", "off"};
  const spdlog::level::level_enum level = spdlog::level::from_str(log_level);
  if (std::find(std::begin(kLevelNames), std::end(kLevelNames), log_level) ==
      std::end(kLevelNames)) {
    std::fprintf(stderr,
                 "tensorops-server: --log_level=%s is not a level (expected trace, debug, info, "
                 "warn, error, critical or off)\n",
                 log_level.c_str());
    return kExitUsage;
  }
  spdlog::set_level(level);
  // SPDLOG_LEVEL, when set, overrides the flag (e.g. SPDLOG_LEVEL=debug for per-call lines).
  spdlog::cfg::load_env_levels();

  // Block the stop signals before any thread exists, so every thread (gRPC's, oneTBB's) inherits
  // the mask and only sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  const ListenProbe probe = ProbeListenAddress(options.host, options.port);
  if (!probe.unresolved.empty()) {
    spdlog::error(
        "tensorops-server: UNAVAILABLE: cannot listen on {}:{}: --host={} is not an address or a "
        "name this machine resolves ({})",
        options.host, options.port, options.host, probe.unresolved);
    return 1;
  }
  if (probe.in_use) {
    spdlog::error(
        "tensorops-server: UNAVAILABLE: cannot listen on {}:{}: the port is in use (choose another "
        "--port, or --port=0 for any free one)",
        options.host, options.port);
    return 1;
  }
  absl::StatusOr<std::unique_ptr<tensorops::Server>> server = tensorops::Server::Start(options);
  if (!server.ok()) {
    spdlog::error("tensorops-server: {}", server.status().ToString());
    return 1;
  }

  int signal = 0;
  sigwait(&stop_signals, &signal);
  spdlog::info("received {}, shutting down", signal == SIGINT ? "SIGINT" : "SIGTERM");
  (*server)->Shutdown();
  (*server)->Wait();
  spdlog::info("tensorops-server stopped");
  return 0;
}
