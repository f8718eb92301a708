// ServerOptions: everything a tensorops server is configured with. `main` turns flags into this
// struct once; tests build it directly.
//
//   ServerOptions options;
//   options.port = 0;  // any free port
//   options.limits.max_elements = 1 << 20;
//   options.shutdown.grace = absl::Seconds(30);
//   options.security.tls_cert_file = "/etc/tensorops/server.crt";
//   options.security.tls_key_file = "/etc/tensorops/server.key";
//   options.security.auth_token_file = "/etc/tensorops/token";
#ifndef TENSOROPS_SERVER_SERVER_OPTIONS_H_
#define TENSOROPS_SERVER_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>

#include "absl/time/time.h"
#include "kernels/cuda/executor.h"
#include "kernels/shape.h"
#include "server/metrics.h"

namespace tensorops {

// ServerOptions configure Server::Start. Values are not validated here beyond what Start needs to
// refuse (an unbindable address); `main` checks flag ranges and exits with a usage error.
struct ServerOptions {
  // Limits on one call, applied by the codec (per tensor) and to every result; exceeding one gives
  // RESOURCE_EXHAUSTED naming the flag.
  struct Limits {
    // Largest gRPC message accepted and sent, in bytes (both directions); 1..2^31-1 because gRPC
    // takes an int. Default 1 GiB.
    int64_t max_message_bytes = int64_t{1} << 30;
    // Largest element count of any one tensor, request or result. The default (2^32) lets SPEC's
    // counts above 2^31 through; raise max_message_bytes to actually send such tensors.
    int64_t max_elements = int64_t{1} << 32;
    // Largest rank of any one tensor, 0..16 (SPEC's range).
    int max_rank = kMaxRank;
    // Calls executing at once (the executor's worker threads), >= 0; 0 = one per CPU core.
    int max_concurrent_calls = 0;
    // Calls admitted and waiting for a worker, >= 0; a call beyond this is refused with
    // RESOURCE_EXHAUSTED before its result is allocated. Default 1024.
    int max_queued_calls = 1024;
    // Most calls a worker takes from the queue at once, run side by side: >= 1. Default 8.
    int max_batch = 8;
    // Most request bytes in one batch: >= 1; a larger call runs alone. Default 64 MiB.
    int64_t max_batch_bytes = int64_t{64} << 20;
    // How long a worker holding a partial batch waits for more calls: >= 0. Default 0 (take what
    // is queued, never wait).
    absl::Duration max_queue_delay = absl::ZeroDuration();
    // Largest request (bytes) that runs on the gRPC thread that received it, when a worker slot
    // is free and nothing is queued, rather than being handed to a worker: >= 0; 0 = never.
    // Default 64 KiB: below that the hand-off costs more than the op.
    int64_t inline_max_bytes = int64_t{64} << 10;
    // Requests one RunStream may have read and not yet answered, >= 1; the server reads no more
    // of that stream until one is answered. Default 64.
    int max_stream_in_flight = 64;
  };

  // What Server::Shutdown does with calls already in flight.
  struct Shutdown {
    // How long in-flight calls may run after shutdown begins; those still running then are
    // cancelled. >= 0 (0 cancels them at once); Server::Start rejects a negative value with
    // INVALID_ARGUMENT. Default 5 s.
    absl::Duration grace = absl::Seconds(5);
  };

  // Transport security and caller authentication. Every field is a file path; empty means unset.
  // Server::Start reads the files once (a changed file takes effect at the next start) and
  // rejects an inconsistent set with INVALID_ARGUMENT naming the field, and a file it cannot read
  // with an error naming the path.
  struct Security {
    // PEM certificate chain the server presents, leaf first. Set together with tls_key_file; both
    // unset serves plaintext.
    std::string tls_cert_file;
    // PEM private key of tls_cert_file's leaf certificate.
    std::string tls_key_file;
    // PEM CA certificate(s) that client certificates must chain to: mutual TLS, where a client
    // without a certificate signed by one of them cannot connect. Needs tls_cert_file.
    std::string tls_client_ca_file;
    // File holding the bearer token every TensorOps call must send as "authorization: Bearer
    // <token>" metadata (UNAUTHENTICATED otherwise); surrounding whitespace is ignored and an
    // empty token is rejected. Health and reflection stay open. Without TLS the token crosses the
    // network in clear text.
    std::string auth_token_file;
  };

  // Interface to listen on: an IPv4/IPv6 address or a host name. Default loopback only.
  std::string host = "127.0.0.1";
  // TCP port, 0..65535; 0 picks a free port (read it back with Server::port()).
  int port = 50051;
  // Threads the CPU kernels may use (oneTBB's max_allowed_parallelism, process-wide);
  // 0 = all cores.
  int threads = 0;
  Limits limits;
  Shutdown shutdown;
  Security security;
  // Where calls run: "auto" (the GPU for calls of at least gpu.min_bytes when a GPU was found,
  // else the CPU), "cpu", or "cuda" (every call with a GPU kernel on the GPU; Start fails without
  // a usable GPU). Default "auto". Calls the GPU fails re-run on the CPU either way.
  std::string device = "auto";
  // The CUDA executor (used when `device` puts calls on a GPU).
  struct Gpu {
    // Streams of the GPU, i.e. device batches in flight at once: >= 1. Default 4.
    int streams = 4;
    // Under "auto", calls with a smaller request run on the CPU: >= 0. Default 1 MiB.
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
};

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_SERVER_OPTIONS_H_
