// Server: a running tensorops gRPC server (the TensorOps service on one listening port, and with
// ServerOptions::unix_socket on a Unix domain socket too), with the standard health service
// (grpc.health.v1.Health) and server reflection (grpc.reflection.v1alpha.ServerReflection) beside
// it.
//
//   absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
//   if (!server.ok()) return Fail(server.status());
//   ... (*server)->port() ...
//   (*server)->Shutdown();  // from any thread; Wait() then returns
//
// Start logs the one start-up summary line (version, address, TLS and auth modes, devices,
// limits); Shutdown logs its steps.
//
// Security (ServerOptions::Security): TLS or mutual TLS on the listening port
// (server/rpc/credentials.h), and a bearer token that every TensorOps call must carry
// (server/rpc/auth.h). Health and reflection stay open to callers without a token: load balancers
// and probes must reach health, and reflection reveals only the schema, which is public anyway.
#ifndef TENSOROPS_SERVER_SERVER_H_
#define TENSOROPS_SERVER_SERVER_H_

#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/grpcpp.h"
#include "oneapi/tbb/global_control.h"
#include "server/config/server_options.h"
#include "server/core/blocking_pool.h"
#include "server/core/in_flight_calls.h"
#include "server/core/memory_budget.h"
#include "server/core/memory_trimmer.h"
#include "server/core/op_call.h"
#include "server/core/scheduler.h"
#include "server/kserve/inference_service.h"
#include "server/rpc/auth.h"
#include "server/rpc/unix_socket.h"
#include "server/shared_memory/regions.h"
#include "server/store/tensor_store.h"
#include "server/tensorops_v1/tensor_ops_service.h"

namespace tensorops {

// Server owns the gRPC server, the service it serves and, when ServerOptions::threads > 0, the
// oneTBB parallelism limit the kernels run under (process-wide while this object lives; with two
// servers in one process the smaller limit wins). Not copyable or movable. The destructor shuts
// down (like Shutdown()) and waits for in-flight calls.
//
// Health: the overall status ("") and "tensorops.v1.TensorOps" are SERVING from the moment Start
// returns until Shutdown begins, and NOT_SERVING from then on; any other service name is NOT_FOUND.
class Server {
 public:
  // kServiceName is the fully qualified name of the TensorOps service, as health checks name it.
  static constexpr char kServiceName[] = "tensorops.v1.TensorOps";

  // Start builds and starts a server for `options`. INVALID_ARGUMENT for options out of range or
  // inconsistent (ValidateServerOptions, naming the flag); FAILED_PRECONDITION for DeviceChoice::
  // kCuda without a usable GPU; UNAVAILABLE when the address cannot be bound (port in use, unknown
  // host), the Unix socket cannot be (a server listens there, a file that is not a socket is there,
  // its directory is missing: PrepareUnixSocketPath, server/rpc/unix_socket.h) or gRPC refuses the
  // TLS certificate and key (a key that does not match the certificate, say); for a security file
  // that cannot be read, its error naming the path (see BuildServerCredentials and
  // TokenAuthenticator::FromFile).
  static absl::StatusOr<std::unique_ptr<Server>> Start(const ServerOptions& options);

  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;
  ~Server();

  // scheduler is the executor every op call runs on (for tests that need to occupy it).
  Scheduler& scheduler() { return *scheduler_; }

  // store holds the tensors PutTensor stored (for tests that look inside).
  TensorStore& store() { return *store_; }

  // metrics counts every call (Scrape() for tests; the endpoint when options.metrics.port >= 0).
  Metrics& metrics() { return *metrics_; }

  // memory holds the bytes of the op calls in flight against --max_memory_bytes (for tests).
  MemoryBudget& memory() { return *memory_; }

  // blocking_pool holds the calls waiting for a stored tensor's lock (for tests).
  BlockingPool& blocking_pool() { return *blocking_pool_; }

  // port returns the port actually bound (the chosen one when options.port was 0).
  int port() const { return port_; }

  // Shutdown drains the server: health turns NOT_SERVING, new calls are refused with UNAVAILABLE,
  // in-flight calls may finish for up to `grace` (options.shutdown.grace without an argument) and
  // are cancelled after that. Thread-safe and idempotent (only the first call's grace counts);
  // returns once the server has stopped. Open health Watch streams count as in-flight calls; open
  // RunStreams end with UNAVAILABLE as soon as they have answered every request they read. New op
  // calls are refused at once; gRPC's GOAWAY (the refusal of everything else) waits until the
  // RunStreams open at the start have ended (see Shutdown's body for why). Once no call is in
  // flight, connections whose clients have not answered the GOAWAY within kGoawayAnswerWait (idle
  // clients, which read their connection seconds later or never) are closed rather than waited for.
  // The Unix socket's file (options.unix_socket) is removed once the server has stopped.
  void Shutdown();
  void Shutdown(absl::Duration grace);

  // kGoawayAnswerWait: how long Shutdown lets clients answer the GOAWAY's ping once no call is in
  // flight. A client that is reading (one whose call just ended) answers within a round trip and
  // its connection then closes cleanly (measured on loopback: within 1 ms; 115 ms at the slowest
  // with both cores of the machine kept busy); one that has not answered by then is not reading,
  // and loses nothing when its connection is closed.
  static constexpr absl::Duration kGoawayAnswerWait = absl::Milliseconds(250);

  // Wait blocks until Shutdown (from another thread) has completed.
  void Wait();

 private:
  // Placement is where calls run, as Start chose it (server.cc).
  struct Placement;

  Server(const ServerOptions& options, std::unique_ptr<TokenAuthenticator> authenticator);

  // The steps of Start, in order, after validation and reading the security files.
  // ChoosePlacement finds the GPUs and creates the GPU executor `options.device` asks for.
  static absl::StatusOr<Placement> ChoosePlacement(const ServerOptions& options);
  // ChooseStoreMemory sets the placement's store memory as options.store.device asks:
  // FAILED_PRECONDITION for cuda without a GPU executor that has one.
  static absl::Status ChooseStoreMemory(const ServerOptions& options, Placement& placement);
  // StartScheduler starts scheduler_ on the CPU and the placement's GPU executor (taking it when
  // Start created it), reporting to metrics_.
  absl::Status StartScheduler(const ServerOptions& options, Placement& placement);
  // OpenStore creates store_ and, with options.store.dir, recovers it from its files and keeps
  // it durable from then on (durable_).
  absl::Status OpenStore(const ServerOptions& options, const Placement& placement);
  // BuildService builds serving_ and service_ (with what ServerInfo answers).
  void BuildService(const ServerOptions& options, const Placement& placement);
  // Bind builds and starts grpc_server_ on options' address, and sets port_.
  absl::Status Bind(const ServerOptions& options,
                    std::shared_ptr<grpc::ServerCredentials> credentials);
  // StartTrimmer starts trimmer_ (memory_trimmer.h) unless options turn it off.
  void StartTrimmer(const ServerOptions& options);
  // LogStartUp writes the start-up line (and a warning for a token on a plaintext port).
  void LogStartUp(const ServerOptions& options, const Placement& placement) const;

  // Declared before the service, which uses it (null when no token is required).
  std::unique_ptr<TokenAuthenticator> authenticator_;
  std::optional<oneapi::tbb::global_control> thread_limit_;
  // The CPU threads the kernels may use under thread_limit_ (and any other limit in the process).
  int cpu_threads_ = 0;
  // Declared in the order they depend on each other: the gRPC server calls into the service until
  // destroyed, the service's calls run on the scheduler, and both count into the metrics.
  std::unique_ptr<Metrics> metrics_;
  // Every call of grpc_server_ (the op calls count themselves through serving_, the others are
  // counted by an interceptor), so declared before both.
  InFlightCalls in_flight_calls_;
  // The CUDA executor when calls run on a GPU (null otherwise, or when a test supplied one).
  std::unique_ptr<DeviceExecutor> owned_executor_;
  std::unique_ptr<Scheduler> scheduler_;
  // Before the service, whose calls read it; handles outliving it keep what they hold alive.
  std::unique_ptr<TensorStore> store_;
  // The store's snapshots and log (--store_dir; null without): after the store, which it
  // journals, so that it goes first.
  std::unique_ptr<DurableStore> durable_;
  // The shared-memory regions clients registered; calls hold the regions they use.
  std::unique_ptr<SharedMemoryRegions> shared_memory_;
  // The bytes of op calls in flight, with the store's, against --max_memory_bytes.
  std::unique_ptr<MemoryBudget> memory_;
  // Prepares the calls that wait for a stored tensor's lock; its tasks submit to the scheduler.
  std::unique_ptr<BlockingPool> blocking_pool_;
  ServingContext serving_;
  std::unique_ptr<TensorOpsService> service_;
  // KServe's v2 protocol on the same port (server/kserve/).
  std::unique_ptr<kserve::InferenceService> inference_service_;
  std::unique_ptr<grpc::Server> grpc_server_;
  // Gives the heap's free memory back after bursts (null with options.memory_trim.idle_after 0);
  // it samples the scheduler, memory_ and the store, so it is declared after them and stopped
  // first.
  std::unique_ptr<MemoryTrimmer> trimmer_;
  int port_ = 0;
  // The socket file bound for options.unix_socket, removed by Shutdown (nullopt without one).
  std::optional<UnixSocketFile> unix_socket_;
  absl::Duration shutdown_grace_;

  absl::Mutex shutdown_mu_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
};

}  // namespace tensorops

#endif  // TENSOROPS_SERVER_SERVER_H_
