// service_bench: a closed-loop load generator for the tensorops service against a raw gRPC echo
// service, both served in this process by the same gRPC build through the callback API, and driven
// by the same client code through the generated stubs' callback API (`stub->async()`).
//
// The tensorops call is a SliceScatter whose work is a copy: input is a float32 [rows, 256] tensor
// of the payload's size, src one column ([rows, 1], 1/256 of the payload) written into column 0,
// so the request carries the payload (+0.4%) and the response the payload. The echo call sends the
// payload as one bytes field and gets it back. Every cell keeps `concurrency` calls in flight for
// --seconds_per_cell (or --max_calls_per_cell), after one warm-up call per slot; repetitions
// alternate echo and tensorops so drift on a shared machine hits both, and the tables report the
// median over repetitions (ratios are the median of per-repetition ratios).
//
// --only=unix compares transports instead: the same two calls at concurrency 1 through a Unix
// domain socket (the servers' --unix_socket) and through loopback TCP, on the same servers.
//
//   build/release/bench/service/service_bench            # full tables, about 2-3 minutes
//   build/release/bench/service/service_bench --quick    # smoke run, seconds
//   build/release/bench/service/service_bench --only=unix   # Unix socket vs TCP, about 1 minute
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/latency_stats.h"
#include "bench/service/closed_loop.h"
#include "bench/service/echo_service.h"
#include "grpcpp/grpcpp.h"
#include "server/core/memory_trimmer.h"
#include "server/server.h"
#include "spdlog/spdlog.h"
#include "tensorops/v1/service.grpc.pb.h"

ABSL_FLAG(bool, quick, false,
          "Smoke run: one repetition of 0.2 s per cell, 64 MiB at concurrency 1 only.");
ABSL_FLAG(double, seconds_per_cell, 1.0, "How long each cell keeps its calls in flight.");
ABSL_FLAG(int64_t, max_calls_per_cell, 20000, "Most calls one cell sends (besides warm-up).");
ABSL_FLAG(int, repetitions, 3, "Repetitions of every cell; the tables report medians.");
ABSL_FLAG(std::vector<std::string>, payloads,
          std::vector<std::string>({"1024", "1048576", "67108864"}),
          "Payload sizes in bytes (multiples of 1024).");
ABSL_FLAG(std::vector<std::string>, concurrency, std::vector<std::string>({"1", "16", "64"}),
          "Calls kept in flight.");
ABSL_FLAG(int64_t, max_inflight_bytes, int64_t{1} << 30,
          "Cells whose payload x concurrency exceeds this are skipped: every in-flight byte is "
          "held about five times over (client request, server request, result, both responses).");
ABSL_FLAG(int, batch_delay_us, 200, "max_queue_delay of the batching-on server, microseconds.");
ABSL_FLAG(int64_t, inline_max_bytes, int64_t{64} << 10,
          "The tensorops servers' --inline_max_bytes (0: every call goes through the queue, to "
          "compare).");
ABSL_FLAG(std::string, only, "",
          "'echo' or 'tensorops': drive only that server (for profiling one side; ratios then "
          "read 1.00x and the batching table is skipped); 'batching': only the batching table; "
          "'unix': only the Unix socket against loopback TCP table (--unix_payloads).");
ABSL_FLAG(tensorops::DeviceChoice, device, tensorops::DeviceChoice::kAuto,
          "Where the tensorops servers run calls (tensorops-server's --device): auto, cpu or "
          "cuda; with cuda every call goes to the GPU, however small.");
ABSL_FLAG(std::vector<std::string>, batching_payloads, std::vector<std::string>({"1024"}),
          "Payload sizes in bytes (multiples of 1024) of the batching table, e.g. "
          "1024,16384,65536.");
ABSL_FLAG(std::vector<std::string>, unix_payloads,
          std::vector<std::string>({"1024", "65536", "1048576"}),
          "Payload sizes in bytes (multiples of 1024) of --only=unix's table.");

namespace tensorops::bench {
namespace {

// EchoServer serves EchoService on a free loopback port with tensorops' message limits, and on the
// Unix socket at `unix_socket` too when it is not empty.
class EchoServer {
 public:
  explicit EchoServer(const std::string& unix_socket = "") {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    if (!unix_socket.empty()) {
      builder.AddListeningPort("unix:" + unix_socket, grpc::InsecureServerCredentials());
    }
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.SetMaxReceiveMessageSize(1 << 30);
    builder.SetMaxSendMessageSize(1 << 30);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~EchoServer() { server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1))); }
  int port() const { return port_; }

 private:
  EchoService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

std::unique_ptr<Server> StartTensorOps(int max_batch, absl::Duration max_queue_delay,
                                       tensorops::DeviceChoice device = absl::GetFlag(FLAGS_device),
                                       const std::string& unix_socket = "") {
  ServerOptions options;
  options.port = 0;
  options.unix_socket = unix_socket;
  options.queue.max_batch = max_batch;
  options.queue.max_queue_delay = max_queue_delay;
  options.queue.inline_max_bytes = absl::GetFlag(FLAGS_inline_max_bytes);
  options.device = device;
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  if (!server.ok()) {
    absl::FPrintF(stderr, "tensorops server: %s\n", server.status().ToString());
    std::exit(1);
  }
  return *std::move(server);
}

// The two workloads of one payload size, sharing nothing but the size.
struct Workload {
  tensorops::v1::SliceScatterRequest slice_scatter;
  tensorops::bench::v1::EchoMessage echo;
};

Workload MakeWorkload(int64_t payload_bytes) {
  constexpr int64_t kCols = 256;
  const int64_t rows = payload_bytes / (kCols * 4);
  Workload w;
  tensorops::v1::Tensor* input = w.slice_scatter.mutable_input();
  input->set_dtype(tensorops::v1::DATA_TYPE_FLOAT32);
  input->add_shape(rows);
  input->add_shape(kCols);
  input->mutable_data()->assign(payload_bytes, '\x3f');
  tensorops::v1::Tensor* src = w.slice_scatter.mutable_src();
  src->set_dtype(tensorops::v1::DATA_TYPE_FLOAT32);
  src->add_shape(rows);
  src->add_shape(1);
  src->mutable_data()->assign(rows * 4, '\x40');
  w.slice_scatter.set_axis(1);
  w.slice_scatter.set_start(0);
  w.slice_scatter.set_end(1);
  w.echo.mutable_data()->assign(payload_bytes, '\x3f');
  return w;
}

SlotFactory TensorOpsSlots(tensorops::v1::TensorOps::Stub* stub,
                           const tensorops::v1::SliceScatterRequest* request) {
  return [stub, request] {
    return std::make_unique<UnarySlot<tensorops::v1::SliceScatterResponse>>(
        [stub, request](grpc::ClientContext* context, tensorops::v1::SliceScatterResponse* response,
                        Slot::Done done) {
          stub->async()->SliceScatter(context, request, response, std::move(done));
        },
        [](const tensorops::v1::SliceScatterResponse& r) {
          return static_cast<int64_t>(r.result().data().size());
        });
  };
}

SlotFactory EchoSlots(tensorops::bench::v1::Echo::Stub* stub,
                      const tensorops::bench::v1::EchoMessage* request) {
  return [stub, request] {
    return std::make_unique<UnarySlot<tensorops::bench::v1::EchoMessage>>(
        [stub, request](grpc::ClientContext* context, tensorops::bench::v1::EchoMessage* response,
                        Slot::Done done) {
          stub->async()->Echo(context, request, response, std::move(done));
        },
        [](const tensorops::bench::v1::EchoMessage& r) {
          return static_cast<int64_t>(r.data().size());
        });
  };
}

std::string SizeName(int64_t bytes) {
  if (bytes >= (1 << 20)) return absl::StrFormat("%d MiB", bytes >> 20);
  return absl::StrFormat("%d KiB", bytes >> 10);
}

double MBps(int64_t payload_bytes, double calls_per_s) { return payload_bytes * calls_per_s / 1e6; }

// RunTransportTable measures tensorops against the raw gRPC echo at every payload and
// concurrency (`only`: one side alone), adding the targets' verdicts to `verdicts`.
void RunTransportTable(const RunSettings& settings, const std::string& only, int64_t max_inflight,
                       std::vector<std::string>* verdicts) {
  std::vector<int64_t> payloads;
  for (const std::string& p : absl::GetFlag(FLAGS_payloads)) payloads.push_back(std::stoll(p));
  std::vector<int> concurrencies;
  for (const std::string& c : absl::GetFlag(FLAGS_concurrency)) {
    concurrencies.push_back(std::stoi(c));
  }

  EchoServer echo_server;
  std::unique_ptr<Server> tensorops_server = StartTensorOps(8, absl::ZeroDuration());
  auto echo_stub = tensorops::bench::v1::Echo::NewStub(Connect(echo_server.port()));
  auto tensorops_stub = tensorops::v1::TensorOps::NewStub(Connect(tensorops_server->port()));

  absl::PrintF(
      "\n## Service: tensorops SliceScatter (a copy) vs raw gRPC echo, same process, %s\n\n"
      "median of %d repetition(s), %.1f s per cell; ratio = tensorops / echo "
      "(p50: lower is better, 1.0 = no overhead; throughput: higher is better, 1.0 = transport "
      "speed)\n\n",
      absl::FormatTime("%Y-%m-%d", absl::Now(), absl::UTCTimeZone()), settings.repetitions,
      absl::ToDoubleSeconds(settings.seconds_per_cell));
  absl::PrintF(
      "| payload | conc | echo p50 ms | ours p50 ms | p50 ratio | echo p99 ms | ours p99 ms | "
      "echo calls/s | ours calls/s | echo MB/s | ours MB/s | throughput ratio |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  for (int64_t payload : payloads) {
    Workload workload = MakeWorkload(payload);
    for (int concurrency : concurrencies) {
      if (payload * concurrency > max_inflight) {
        absl::PrintF("| %s | %d | skipped: %s in flight > --max_inflight_bytes |||||||||\n",
                     SizeName(payload), concurrency, SizeName(payload * concurrency));
        continue;
      }
      std::vector<CellResult> echo_reps, ours_reps;
      std::vector<double> p50_ratios, throughput_ratios;
      std::string error;
      for (int rep = 0; rep < settings.repetitions && error.empty(); ++rep) {
        // Alternate which server goes first, so that neither always runs on a cooler machine.
        CellResult echo, ours;
        auto measure_echo = [&] {
          echo =
              Measure(EchoSlots(echo_stub.get(), &workload.echo), concurrency, payload, settings);
        };
        auto measure_ours = [&] {
          ours = Measure(TensorOpsSlots(tensorops_stub.get(), &workload.slice_scatter), concurrency,
                         payload, settings);
        };
        if (only == "echo") {
          measure_echo();
          ours = echo;
        } else if (only == "tensorops") {
          measure_ours();
          echo = ours;
        } else if (rep % 2 == 0) {
          measure_echo();
          measure_ours();
        } else {
          measure_ours();
          measure_echo();
        }
        error = !echo.error.empty() ? "echo: " + echo.error
                                    : (!ours.error.empty() ? "tensorops: " + ours.error : "");
        echo_reps.push_back(echo);
        ours_reps.push_back(ours);
        p50_ratios.push_back(ours.p50_ms / echo.p50_ms);
        throughput_ratios.push_back(ours.calls_per_s / echo.calls_per_s);
      }
      if (!error.empty()) {
        absl::PrintF("| %s | %d | failed: %s |||||||||\n", SizeName(payload), concurrency, error);
        continue;
      }
      const Summary e = Summarize(echo_reps), o = Summarize(ours_reps);
      const double p50_ratio = Median(p50_ratios), throughput_ratio = Median(throughput_ratios);
      absl::PrintF(
          "| %s | %d | %.3f | %.3f | %.2fx | %.3f | %.3f | %.0f | %.0f | %.1f | %.1f | %.2fx |\n",
          SizeName(payload), concurrency, e.p50_ms, o.p50_ms, p50_ratio, e.p99_ms, o.p99_ms,
          e.calls_per_s, o.calls_per_s, MBps(payload, e.calls_per_s), MBps(payload, o.calls_per_s),
          throughput_ratio);
      std::fflush(stdout);
      if (payload == 1024 && concurrency == 1) {
        verdicts->push_back(
            absl::StrFormat("- 1 KiB, concurrency 1: p50 ratio %.2fx, target <= 1.25x: %s",
                            p50_ratio, p50_ratio <= 1.25 ? "met" : "NOT met"));
      }
      if (payload == (int64_t{64} << 20)) {
        verdicts->push_back(absl::StrFormat(
            "- 64 MiB, concurrency %d: throughput ratio %.2fx, target >= 0.8x: %s", concurrency,
            throughput_ratio, throughput_ratio >= 0.8 ? "met" : "NOT met"));
      }
    }
  }
}

// RunBatchingTable measures small calls at concurrency 64 on servers of their own, for each
// --batching_payloads size: batching off (max_batch=1), the default (max_batch=8, no wait), the
// default with --batch_delay_us of waiting for a batch to fill, and max_batch=64 (every client's
// call in one batch). On a GPU (--device=cuda) batching is what DESIGN promises pays off: the
// verdict asks for 3x the calls/s of batching off. There a last row runs the same calls on the
// CPU (--device=cpu, default batching), a copy that costs the CPU little: what the server does
// besides the kernel caps any GPU configuration at about that row's calls/s.
void RunBatchingTable(const RunSettings& settings, std::vector<std::string>* verdicts) {
  constexpr int kConcurrency = 64;
  const int delay_us = absl::GetFlag(FLAGS_batch_delay_us);
  const tensorops::DeviceChoice device = absl::GetFlag(FLAGS_device);
  struct Config {
    std::string name;
    int max_batch;
    absl::Duration delay;
    tensorops::DeviceChoice device;
  };
  std::vector<Config> configs = {{"off: max_batch=1", 1, absl::ZeroDuration(), device},
                                 {"default: max_batch=8", 8, absl::ZeroDuration(), device},
                                 {absl::StrFormat("max_batch=8, max_queue_delay=%dus", delay_us), 8,
                                  absl::Microseconds(delay_us), device},
                                 {"max_batch=64", 64, absl::ZeroDuration(), device}};
  const bool on_gpu = device == tensorops::DeviceChoice::kCuda;
  if (on_gpu) {
    configs.push_back({"the CPU: --device=cpu, max_batch=8", 8, absl::ZeroDuration(),
                       tensorops::DeviceChoice::kCpu});
  }
  absl::PrintF(
      "\n## Service: batching, SliceScatter at concurrency %d, --device=%s\n\n"
      "median of %d repetition(s); ratio = config / off (calls/s: higher is better)\n\n"
      "| payload | server | p50 ms | p99 ms | calls/s | MB/s | calls/s ratio |\n"
      "|---|---|---|---|---|---|---|\n",
      kConcurrency, tensorops::DeviceChoiceName(device), settings.repetitions);
  std::fflush(stdout);
  for (const std::string& size : absl::GetFlag(FLAGS_batching_payloads)) {
    const int64_t payload = std::stoll(size);
    Workload workload = MakeWorkload(payload);
    std::vector<std::unique_ptr<Server>> servers;
    std::vector<std::unique_ptr<tensorops::v1::TensorOps::Stub>> stubs;
    for (const Config& config : configs) {
      servers.push_back(StartTensorOps(config.max_batch, config.delay, config.device));
      stubs.push_back(tensorops::v1::TensorOps::NewStub(Connect(servers.back()->port())));
    }
    // reps[c]: config c's repetitions; ratios[c]: its calls/s over off's, per repetition.
    std::vector<std::vector<CellResult>> reps(configs.size());
    std::vector<std::vector<double>> ratios(configs.size());
    std::string error;
    for (int rep = 0; rep < settings.repetitions && error.empty(); ++rep) {
      // Configs in turn, starting from another one each repetition.
      std::vector<CellResult> cells(configs.size());
      for (size_t k = 0; k < configs.size(); ++k) {
        const size_t c = (k + rep) % configs.size();
        cells[c] = Measure(TensorOpsSlots(stubs[c].get(), &workload.slice_scatter), kConcurrency,
                           payload, settings);
        if (!cells[c].error.empty()) error = configs[c].name + ": " + cells[c].error;
      }
      for (size_t c = 0; c < configs.size(); ++c) {
        reps[c].push_back(cells[c]);
        ratios[c].push_back(cells[c].calls_per_s / cells[0].calls_per_s);
      }
    }
    if (!error.empty()) {
      absl::PrintF("| %s | failed: %s ||||||\n", SizeName(payload), error);
      continue;
    }
    double best_ratio = 0;
    double cpu_ratio = 0;
    for (size_t c = 0; c < configs.size(); ++c) {
      const Summary summary = Summarize(reps[c]);
      const double ratio = Median(ratios[c]);
      if (configs[c].device != device) {
        cpu_ratio = ratio;
      } else if (c > 0) {
        best_ratio = std::max(best_ratio, ratio);
      }
      absl::PrintF("| %s | %s | %.3f | %.3f | %.0f | %.1f | %.2fx |\n", SizeName(payload),
                   configs[c].name, summary.p50_ms, summary.p99_ms, summary.calls_per_s,
                   MBps(payload, summary.calls_per_s), ratio);
    }
    std::fflush(stdout);
    if (on_gpu) {
      verdicts->push_back(
          absl::StrFormat("- batching on the GPU, %s at concurrency %d: best calls/s ratio %.2fx, "
                          "target >= 3x: %s (the same calls on the CPU: %.2fx)",
                          SizeName(payload), kConcurrency, best_ratio,
                          best_ratio >= 3 ? "met" : "NOT met", cpu_ratio));
    }
  }
}

// RunUnixSocketTable measures the echo and the tensorops call at concurrency 1 through a Unix
// domain socket and through loopback TCP, on the same two servers (each listening on both), for
// each --unix_payloads size. Every repetition measures the four cells, the transports in
// alternating order; ratios are unix / tcp, the median of per-repetition ratios.
void RunUnixSocketTable(const RunSettings& settings) {
  std::string directory =
      (std::filesystem::temp_directory_path() / "service_bench_XXXXXX").string();
  if (mkdtemp(directory.data()) == nullptr) {
    absl::FPrintF(stderr, "mkdtemp %s failed\n", directory);
    std::exit(1);
  }
  const std::string echo_socket = directory + "/echo.sock";
  const std::string tensorops_socket = directory + "/tensorops.sock";
  EchoServer echo_server(echo_socket);
  std::unique_ptr<Server> tensorops_server =
      StartTensorOps(8, absl::ZeroDuration(), absl::GetFlag(FLAGS_device), tensorops_socket);
  auto echo_tcp = tensorops::bench::v1::Echo::NewStub(Connect(echo_server.port()));
  auto echo_unix = tensorops::bench::v1::Echo::NewStub(ConnectTo("unix:" + echo_socket));
  auto ours_tcp = tensorops::v1::TensorOps::NewStub(Connect(tensorops_server->port()));
  auto ours_unix = tensorops::v1::TensorOps::NewStub(ConnectTo("unix:" + tensorops_socket));

  absl::PrintF(
      "\n## Service: Unix domain socket vs loopback TCP, concurrency 1, %s\n\n"
      "median of %d repetition(s), %.1f s per cell; ratio = unix / tcp (p50: lower is better; "
      "calls/s: higher is better)\n\n"
      "| payload | call | tcp p50 ms | unix p50 ms | p50 ratio | tcp p99 ms | unix p99 ms | "
      "tcp calls/s | unix calls/s | calls/s ratio |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n",
      absl::FormatTime("%Y-%m-%d", absl::Now(), absl::UTCTimeZone()), settings.repetitions,
      absl::ToDoubleSeconds(settings.seconds_per_cell));
  std::fflush(stdout);
  for (const std::string& size : absl::GetFlag(FLAGS_unix_payloads)) {
    const int64_t payload = std::stoll(size);
    Workload workload = MakeWorkload(payload);
    struct Call {
      std::string name;
      SlotFactory tcp, unix_socket;
    };
    const Call calls[] = {
        {"echo", EchoSlots(echo_tcp.get(), &workload.echo),
         EchoSlots(echo_unix.get(), &workload.echo)},
        {"tensorops SliceScatter", TensorOpsSlots(ours_tcp.get(), &workload.slice_scatter),
         TensorOpsSlots(ours_unix.get(), &workload.slice_scatter)}};
    for (const Call& call : calls) {
      std::vector<CellResult> tcp_reps, unix_reps;
      std::vector<double> p50_ratios, throughput_ratios;
      std::string error;
      for (int rep = 0; rep < settings.repetitions && error.empty(); ++rep) {
        CellResult tcp, unix_socket;
        auto measure_tcp = [&] { tcp = Measure(call.tcp, 1, payload, settings); };
        auto measure_unix = [&] { unix_socket = Measure(call.unix_socket, 1, payload, settings); };
        if (rep % 2 == 0) {
          measure_tcp();
          measure_unix();
        } else {
          measure_unix();
          measure_tcp();
        }
        error = !tcp.error.empty()
                    ? "tcp: " + tcp.error
                    : (!unix_socket.error.empty() ? "unix: " + unix_socket.error : "");
        tcp_reps.push_back(tcp);
        unix_reps.push_back(unix_socket);
        p50_ratios.push_back(unix_socket.p50_ms / tcp.p50_ms);
        throughput_ratios.push_back(unix_socket.calls_per_s / tcp.calls_per_s);
      }
      if (!error.empty()) {
        absl::PrintF("| %s | %s | failed: %s |||||||\n", SizeName(payload), call.name, error);
        continue;
      }
      const Summary t = Summarize(tcp_reps), u = Summarize(unix_reps);
      absl::PrintF("| %s | %s | %.3f | %.3f | %.2fx | %.3f | %.3f | %.0f | %.0f | %.2fx |\n",
                   SizeName(payload), call.name, t.p50_ms, u.p50_ms, Median(p50_ratios), t.p99_ms,
                   u.p99_ms, t.calls_per_s, u.calls_per_s, Median(throughput_ratios));
      std::fflush(stdout);
    }
  }
  tensorops_server.reset();
  std::filesystem::remove_all(directory);
}

int Run() {
  const bool quick = absl::GetFlag(FLAGS_quick);
  const std::string only = absl::GetFlag(FLAGS_only);
  if (!only.empty() && only != "echo" && only != "tensorops" && only != "batching" &&
      only != "unix") {
    absl::FPrintF(stderr, "--only=%s: expected echo, tensorops, batching or unix\n", only);
    return 2;
  }
  RunSettings settings{
      .repetitions = quick ? 1 : absl::GetFlag(FLAGS_repetitions),
      .seconds_per_cell = absl::Seconds(quick ? 0.2 : absl::GetFlag(FLAGS_seconds_per_cell)),
      .max_calls_per_cell = absl::GetFlag(FLAGS_max_calls_per_cell)};
  const int64_t max_inflight = quick ? int64_t{64} << 20 : absl::GetFlag(FLAGS_max_inflight_bytes);
  if (only == "unix") {
    RunUnixSocketTable(settings);
    return 0;
  }
  std::vector<std::string> verdicts;
  if (only != "batching") RunTransportTable(settings, only, max_inflight, &verdicts);
  if (only == "echo" || only == "tensorops") return 0;
  RunBatchingTable(settings, &verdicts);
  absl::PrintF("\n### Service targets\n\n%s\n", absl::StrJoin(verdicts, "\n"));
  return 0;
}

}  // namespace
}  // namespace tensorops::bench

int main(int argc, char** argv) {
  // As tensorops-server's main does, so that the servers here allocate and lock as that binary's
  // do.
  tensorops::LimitMallocArenas();
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  absl::ParseCommandLine(argc, argv);
  // The servers' start-up and shutdown lines would interleave with the tables.
  spdlog::set_level(spdlog::level::warn);
  return tensorops::bench::Run();
}
