// store_bench: the tensor store's two workloads (issue 24), each against the same work sent inline,
// from the C++ client (tensorops::Client) at concurrency 1.
//
//   1. Embedding lookup: a float32 table of --rows x --cols (default 4 Mi x 64, 1 GiB) is stored
//      once with PutTensor; each call is an IndexSelect of --batch_rows random rows (default 4096)
//      with the table referenced by name. Inline, the call sends a --inline_rows table (default
//      1 Mi rows, 256 MiB: 1 GiB does not fit one message) and gets the rows back.
//   2. Gradient push: IndexReduce SUM of --batch_rows x --cols updates into the stored table in
//      place (result_options.in_place, nothing returned), against the same IndexReduce inline:
//      the 256 MiB table sent, the updated table returned.
//
// From C++ the peer a user would otherwise write is the inline call, so the ratio is stored /
// inline calls/s. The uploads report GB/s (10^9 bytes per second) over loopback: the table
// through Client::PutTensor, and --upload_bytes (default 4 GiB) streamed through the generated
// stub from a 64 MiB pattern buffer, so that the client never holds the whole tensor (the server
// holds it once).
//
// Two floors are measured in the same run: a raw gRPC echo (bench/service's EchoService) of the
// lookup's result bytes, sent both ways, for the latency; and the large upload's bytes over a bare
// loopback TCP socket, for the upload's GB/s.
//
// 3. Shared memory (issue 39), for a client on the server's host: the same lookup with its rows
//    and its result in a registered system shared-memory region (Client::RunInto), and the same
//    push with its rows and updates there, against the stored calls above, which carry them in
//    messages; and a --upload_bytes PutTensor whose bytes are in a region
//    (Client::PutTensorFromSharedMemory) against a memcpy of the same bytes into fresh memory.
//    In a CUDA build, with a GPU and a server of another process (--target), also the lookup
//    with its rows and result in a CUDA region (this process's GPU buffer) against the system
//    region.
//
// The server runs in this process (as in bench/service) unless --target names one; it needs
// --store_memory_bytes above the largest upload (default 6e9). Repetitions alternate stored and
// inline, and the tables report medians over repetitions (ratios are the median of
// per-repetition ratios).
//
//   build/release/bench/store/store_bench            # full run, about 2-4 minutes
//   build/release/bench/store/store_bench --quick    # smoke run, a few seconds
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/latency_stats.h"
#include "bench/service/echo_service.h"
#include "client/cpp/client.h"
#include "client/cpp/shared_memory.h"
#include "grpcpp/grpcpp.h"
#include "server/server.h"
#include "spdlog/spdlog.h"
#include "tensorops/v1/service.grpc.pb.h"

#if defined(TENSOROPS_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

ABSL_FLAG(bool, quick, false,
          "Smoke run: a 64 Ki-row table, a 16 Ki-row inline table, a 64 MiB upload, one "
          "repetition of 0.2 s per cell.");
ABSL_FLAG(std::string, target, "",
          "host:port of a running tensorops-server (started with a large enough "
          "--store_memory_bytes); empty: start one in this process.");
ABSL_FLAG(int64_t, store_memory_bytes, 6000000000, "The in-process server's --store_memory_bytes.");
ABSL_FLAG(int64_t, rows, int64_t{4} << 20, "Rows of the stored table.");
ABSL_FLAG(int64_t, inline_rows, int64_t{1} << 20, "Rows of the table sent inline.");
ABSL_FLAG(int64_t, cols, 64, "Columns (float32) of both tables.");
ABSL_FLAG(int64_t, batch_rows, 4096, "Rows each lookup selects and each push updates.");
ABSL_FLAG(int64_t, upload_bytes, int64_t{4} << 30,
          "Bytes of the large upload (a multiple of 4); 0 skips it.");
ABSL_FLAG(int64_t, chunk_bytes, int64_t{4} << 20, "Bytes per PutTensor data message.");
ABSL_FLAG(int, upload_repetitions, 3, "Repetitions of the large upload.");
ABSL_FLAG(double, seconds_per_cell, 2.0, "How long each cell calls, one call after another.");
ABSL_FLAG(int64_t, max_calls_per_cell, 20000, "Most calls one cell makes (besides warm-up).");
ABSL_FLAG(int, max_attempts, tensorops::ClientOptions{}.max_attempts,
          "The client's ClientOptions::max_attempts (1: gRPC retries off).");
ABSL_FLAG(int, repetitions, 3, "Repetitions of every cell; the tables report medians.");
ABSL_FLAG(bool, shared_memory, true,
          "Also measure the lookup, the push and the large upload through a shared-memory region "
          "(needs the server on this host: the in-process one, or --target on this machine).");

namespace tensorops::store_bench {
namespace {

using ::tensorops::bench::CellResult;
using ::tensorops::bench::Drive;
using ::tensorops::bench::Median;
using ::tensorops::bench::Summarize;
using ::tensorops::bench::Summary;

constexpr char kTableName[] = "bench/store/table";
constexpr char kUploadName[] = "bench/store/upload";
// Index batches cycled through by the calls, each of fresh random rows.
constexpr int kIndexBatches = 64;

// TableValue is the table's element at (row, col): exact in float32, cheap to check.
float TableValue(int64_t row, int64_t col) { return static_cast<float>((row * 7 + col) % 4096); }

Tensor MakeTable(int64_t rows, int64_t cols) {
  Tensor table(DataType::kFloat32, Shape{rows, cols});
  float* values = table.data_as<float>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) values[r * cols + c] = TableValue(r, c);
  }
  return table;
}

std::vector<Tensor> MakeIndexBatches(int64_t rows, int64_t batch_rows, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::uniform_int_distribution<int64_t> row(0, rows - 1);
  std::vector<Tensor> batches;
  for (int b = 0; b < kIndexBatches; ++b) {
    Tensor index(DataType::kInt64, Shape{batch_rows});
    for (int64_t i = 0; i < batch_rows; ++i) index.data_as<int64_t>()[i] = row(random);
    batches.push_back(std::move(index));
  }
  return batches;
}

struct RunSettings {
  int repetitions;
  absl::Duration seconds_per_cell;
  int64_t max_calls_per_cell;
};

// Measure warms `call` up (two calls, or 0.3 s) and then runs one timed cell.
CellResult Measure(const std::function<absl::Status(int64_t)>& call, const RunSettings& settings) {
  CellResult warm = Drive(call, std::min(settings.seconds_per_cell, absl::Milliseconds(300)), 2);
  if (!warm.error.empty()) return warm;
  return Drive(call, settings.seconds_per_cell, settings.max_calls_per_cell);
}

// Comparison is one workload's stored and inline cells over the repetitions.
struct Comparison {
  std::string workload;
  std::vector<CellResult> stored, inline_calls;
  std::vector<double> ratios;  // stored / inline calls/s, per repetition.
  std::string error;
};

Comparison Compare(std::string workload, const std::function<absl::Status(int64_t)>& stored,
                   const std::function<absl::Status(int64_t)>& inline_call,
                   const RunSettings& settings) {
  Comparison comparison{.workload = std::move(workload)};
  for (int rep = 0; rep < settings.repetitions && comparison.error.empty(); ++rep) {
    // Alternate which goes first, so that neither always runs on a cooler machine.
    CellResult s, i;
    if (rep % 2 == 0) {
      s = Measure(stored, settings);
      i = Measure(inline_call, settings);
    } else {
      i = Measure(inline_call, settings);
      s = Measure(stored, settings);
    }
    if (!s.error.empty()) comparison.error = "stored: " + s.error;
    if (!i.error.empty()) comparison.error = "inline: " + i.error;
    comparison.stored.push_back(s);
    comparison.inline_calls.push_back(i);
    comparison.ratios.push_back(s.calls_per_s / i.calls_per_s);
  }
  return comparison;
}

std::string SizeName(int64_t bytes) {
  if (bytes >= (int64_t{1} << 30) && bytes % (int64_t{1} << 30) == 0) {
    return absl::StrFormat("%d GiB", bytes >> 30);
  }
  if (bytes >= (1 << 20)) return absl::StrFormat("%d MiB", bytes >> 20);
  return absl::StrFormat("%d KiB", bytes >> 10);
}

std::unique_ptr<Server> StartServer() {
  ServerOptions options;
  options.port = 0;
  options.store.memory_bytes = absl::GetFlag(FLAGS_store_memory_bytes);
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  if (!server.ok()) {
    absl::FPrintF(stderr, "tensorops server: %s\n", server.status().ToString());
    std::exit(1);
  }
  return *std::move(server);
}

// PatternBuffer is 64 MiB of random bytes the uploads send from.
const std::vector<char>& PatternBuffer() {
  static const std::vector<char>* const pattern = [] {
    auto* bytes = new std::vector<char>(int64_t{64} << 20);
    std::mt19937 random(7);
    for (char& b : *bytes) b = static_cast<char>(random());
    return bytes;
  }();
  return *pattern;
}

// TcpLoopbackSeconds sends `total_bytes` from the pattern buffer in `chunk_bytes` writes over one
// loopback TCP connection to a thread that reads and discards them: the transport's floor for an
// upload, without gRPC, HTTP/2 or protobuf. Returns the seconds until the reader has every byte.
absl::StatusOr<double> TcpLoopbackSeconds(int64_t total_bytes, int64_t chunk_bytes) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  if (listener < 0 || bind(listener, reinterpret_cast<sockaddr*>(&address), length) != 0 ||
      listen(listener, 1) != 0 ||
      getsockname(listener, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    return absl::InternalError("loopback listener failed");
  }
  const int sender = socket(AF_INET, SOCK_STREAM, 0);
  if (connect(sender, reinterpret_cast<sockaddr*>(&address), length) != 0) {
    return absl::InternalError("loopback connect failed");
  }
  const int receiver = accept(listener, nullptr, nullptr);
  close(listener);
  const absl::Time start = absl::Now();
  std::thread reader([receiver, total_bytes] {
    std::vector<char> buffer(int64_t{4} << 20);
    for (int64_t received = 0; received < total_bytes;) {
      const ssize_t n = read(receiver, buffer.data(), buffer.size());
      if (n <= 0) break;
      received += n;
    }
  });
  const std::vector<char>& pattern = PatternBuffer();
  const int64_t pattern_bytes = static_cast<int64_t>(pattern.size());
  for (int64_t done = 0; done < total_bytes;) {
    const int64_t offset = done % pattern_bytes;
    const int64_t n = std::min({chunk_bytes, total_bytes - done, pattern_bytes - offset});
    const ssize_t written = write(sender, pattern.data() + offset, n);
    if (written <= 0) break;
    done += written;
  }
  reader.join();
  const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
  close(sender);
  close(receiver);
  return seconds;
}

// EchoServer serves bench/service's raw gRPC EchoService on a free loopback port.
class EchoServer {
 public:
  EchoServer() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.SetMaxReceiveMessageSize(1 << 30);
    builder.SetMaxSendMessageSize(1 << 30);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~EchoServer() { server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(1))); }
  int port() const { return port_; }

 private:
  bench::EchoService service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

// UploadStream stores `total_bytes` of pattern bytes (as float32) under `name` over one PutTensor
// stream of the generated stub, each chunk copied from a 64 MiB pattern buffer (as
// Client::PutTensor copies from the caller's tensor), and returns the seconds it took.
absl::StatusOr<double> UploadStream(v1::TensorOps::Stub& stub, const std::string& name,
                                    int64_t total_bytes, int64_t chunk_bytes) {
  const std::vector<char>* const pattern = &PatternBuffer();
  const absl::Time start = absl::Now();
  grpc::ClientContext context;
  v1::PutTensorResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::PutTensorRequest>> writer =
      stub.PutTensor(&context, &response);
  v1::PutTensorRequest request;
  v1::PutTensorHeader* header = request.mutable_header();
  header->set_name(name);
  header->set_dtype(v1::DATA_TYPE_FLOAT32);
  header->add_shape(total_bytes / 4);
  header->set_overwrite(true);
  bool ok = writer->Write(request);
  const int64_t pattern_bytes = static_cast<int64_t>(pattern->size());
  for (int64_t done = 0; ok && done < total_bytes;) {
    const int64_t offset = done % pattern_bytes;
    const int64_t n = std::min({chunk_bytes, total_bytes - done, pattern_bytes - offset});
    request.mutable_data()->assign(pattern->data() + offset, n);
    ok = writer->Write(request);
    done += n;
  }
  writer->WritesDone();
  grpc::Status status = writer->Finish();
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        "PutTensor: " + status.error_message());
  }
  if (response.info().bytes() != total_bytes) {
    return absl::InternalError(absl::StrFormat("PutTensor stored %d bytes, sent %d",
                                               response.info().bytes(), total_bytes));
  }
  return absl::ToDoubleSeconds(absl::Now() - start);
}

[[noreturn]] void Fail(const std::string& what, const absl::Status& status) {
  absl::FPrintF(stderr, "store_bench: %s: %s\n", what, status.ToString());
  std::exit(1);
}

#if defined(TENSOROPS_HAVE_CUDA)
// CudaRegionRun measures the lookup with its rows and its result in a CUDA region, a GPU buffer of
// this process shared with the server by its IPC handle, against `shm_lookup`, the same lookup in
// a system region, and adds its verdict. It needs a GPU here and a server of another process on
// this host (--target): the process that made a handle cannot open it. With the table in the
// server's GPU memory (--store_device=cuda) nothing of the call crosses to a host.
void CudaRegionRun(Client& client, const RunSettings& settings,
                   const std::vector<Tensor>& stored_index,
                   const std::function<absl::Status(int64_t)>& shm_lookup, int64_t batch_rows,
                   int64_t cols, const std::string& date, std::vector<std::string>* verdicts) {
  int devices = 0;
  if (absl::GetFlag(FLAGS_target).empty() || cudaGetDeviceCount(&devices) != cudaSuccess ||
      devices == 0) {
    cudaGetLastError();
    verdicts->push_back(
        "- CUDA region lookup: not measured (it needs a GPU here and a server of another "
        "process, --target)");
    return;
  }
  const int64_t index_bytes = batch_rows * 8, rows_bytes = batch_rows * cols * 4;
  const int64_t result_at = (kIndexBatches * index_bytes + 255) / 256 * 256;
  char* buffer = nullptr;
  cudaIpcMemHandle_t handle;
  if (cudaMalloc(&buffer, result_at + rows_bytes) != cudaSuccess ||
      cudaIpcGetMemHandle(&handle, buffer) != cudaSuccess) {
    Fail("a CUDA buffer for the region",
         absl::InternalError(cudaGetErrorString(cudaGetLastError())));
  }
  for (int b = 0; b < kIndexBatches; ++b) {
    cudaMemcpy(buffer + b * index_bytes, stored_index[b].data(), index_bytes,
               cudaMemcpyHostToDevice);
  }
  (void)client.UnregisterSharedMemory("bench-gpu");
  absl::Status registered = client.RegisterCudaSharedMemory(
      "bench-gpu", std::string_view(reinterpret_cast<const char*>(&handle), sizeof(handle)), 0,
      result_at + rows_bytes);
  if (!registered.ok()) {
    verdicts->push_back(absl::StrFormat("- CUDA region lookup: failed: %s", registered.ToString()));
    cudaFree(buffer);
    return;
  }
  auto cuda_lookup = [&](int64_t i) -> absl::Status {
    v1::OpRequest request;
    v1::IndexSelectRequest* select = request.mutable_index_select();
    *select->mutable_input() = StoredArgument(kTableName);
    *select->mutable_index() = SharedMemoryArgument("bench-gpu", (i % kIndexBatches) * index_bytes,
                                                    DataType::kInt64, {batch_rows});
    return client.RunInto(std::move(request), SharedMemoryRef("bench-gpu", result_at, rows_bytes))
        .status();
  };
  // The rows in the GPU buffer are the table's.
  if (absl::Status looked = cuda_lookup(0); !looked.ok())
    Fail("lookup into the CUDA region", looked);
  {
    const Tensor no_rows(DataType::kFloat32, Shape{0, cols});
    v1::OpRequest request;
    *request.mutable_index_select() =
        MakeIndexSelectRequest(no_rows.view(), 0, stored_index[0].view());
    *request.mutable_index_select()->mutable_input() = StoredArgument(kTableName);
    absl::StatusOr<Tensor> inline_rows = client.Run(request);
    if (!inline_rows.ok()) Fail("IndexSelect of the stored table", inline_rows.status());
    std::string in_buffer(static_cast<size_t>(rows_bytes), '\0');
    cudaMemcpy(in_buffer.data(), buffer + result_at, rows_bytes, cudaMemcpyDeviceToHost);
    if (std::memcmp(inline_rows->data(), in_buffer.data(), rows_bytes) != 0) {
      Fail("lookup into the CUDA region", absl::InternalError("the buffer's rows differ"));
    }
  }
  const Comparison c = Compare("embedding lookup (IndexSelect)", cuda_lookup, shm_lookup, settings);
  absl::PrintF(
      "\n## Store: CUDA region vs system region, C++ client, concurrency 1, %s\n\n"
      "CUDA: the rows and the lookup's result in this process's GPU buffer, registered by its IPC "
      "handle; system: the same in a system shared-memory region. Median of %d repetition(s); "
      "ratio = CUDA / system calls/s\n\n"
      "| workload | CUDA p50 ms | CUDA p99 ms | CUDA calls/s | system p50 ms | system p99 ms | "
      "system calls/s | ratio |\n|---|---|---|---|---|---|---|---|\n",
      date, settings.repetitions);
  if (!c.error.empty()) {
    absl::PrintF("| %s | failed: %s |||||||\n", c.workload, c.error);
    verdicts->push_back("- CUDA region lookup: failed");
  } else {
    const Summary g = Summarize(c.stored), h = Summarize(c.inline_calls);
    absl::PrintF("| %s | %.3f | %.3f | %.0f | %.3f | %.3f | %.0f | %.2fx |\n", c.workload, g.p50_ms,
                 g.p99_ms, g.calls_per_s, h.p50_ms, h.p99_ms, h.calls_per_s, Median(c.ratios));
    verdicts->push_back(
        absl::StrFormat("- CUDA region lookup: p50 %.3f ms (system region %.3f ms), no target",
                        g.p50_ms, h.p50_ms));
  }
  (void)client.UnregisterSharedMemory("bench-gpu");
  cudaFree(buffer);
}
#endif  // TENSOROPS_HAVE_CUDA

// SharedMemoryRun measures the lookup and the push with their rows, updates and result in a
// shared-memory region against the stored calls (`stored_lookup`, `stored_push`), and a
// PutTensor of `upload_bytes` from a region against a memcpy of them; it prints its tables and
// adds its verdicts.
void SharedMemoryRun(Client& client, const RunSettings& settings,
                     const std::vector<Tensor>& stored_index,
                     const std::function<absl::Status(int64_t)>& stored_lookup,
                     const std::function<absl::Status(int64_t)>& stored_push, int64_t rows,
                     int64_t cols, int64_t batch_rows, int64_t upload_bytes, int upload_repetitions,
                     const std::string& date, std::vector<std::string>* verdicts) {
  // The region: every index batch, then the updates, then the lookup's result.
  const int64_t index_bytes = batch_rows * 8, rows_bytes = batch_rows * cols * 4;
  const int64_t updates_at = kIndexBatches * index_bytes, result_at = updates_at + rows_bytes;
  const std::string key = absl::StrFormat("/tensorops-store-bench-%d", getpid());
  absl::StatusOr<SharedMemoryObject> memory =
      SharedMemoryObject::Create(key, result_at + rows_bytes);
  if (!memory.ok()) Fail("SharedMemoryObject::Create", memory.status());
  for (int b = 0; b < kIndexBatches; ++b) {
    std::memcpy(memory->data() + b * index_bytes, stored_index[b].data(), index_bytes);
  }
  std::fill_n(reinterpret_cast<float*>(memory->data() + updates_at), batch_rows * cols, 0.5f);
  (void)client.UnregisterSharedMemory("bench");
  absl::Status registered =
      client.RegisterSharedMemory("bench", memory->key(), memory->byte_size());
  if (!registered.ok()) Fail("RegisterSharedMemory", registered);
  const v1::SharedMemoryRef result = SharedMemoryRef("bench", result_at, rows_bytes);
  const Tensor no_rows(DataType::kFloat32, Shape{0, cols});
  auto index_in_region = [&](int64_t i) {
    return SharedMemoryArgument("bench", (i % kIndexBatches) * index_bytes, DataType::kInt64,
                                {batch_rows});
  };
  auto shm_lookup = [&](int64_t i) -> absl::Status {
    v1::OpRequest request;
    v1::IndexSelectRequest* select = request.mutable_index_select();
    *select->mutable_input() = StoredArgument(kTableName);
    *select->mutable_index() = index_in_region(i);
    return client.RunInto(std::move(request), result).status();
  };
  auto shm_push = [&](int64_t i) -> absl::Status {
    v1::OpRequest request;
    v1::IndexReduceRequest* reduce = request.mutable_index_reduce();
    *reduce->mutable_input() = StoredArgument(kTableName);
    *reduce->mutable_index() = index_in_region(i);
    *reduce->mutable_src() =
        SharedMemoryArgument("bench", updates_at, DataType::kFloat32, {batch_rows, cols});
    reduce->set_reduce(v1::REDUCTION_SUM);
    reduce->mutable_result_options()->set_in_place(true);
    return client.RunStored(std::move(request)).status();
  };
  // The lookup's answer in the region is the table's rows (the pushes so far added 0.5s).
  if (absl::Status looked = shm_lookup(0); !looked.ok()) Fail("lookup into the region", looked);
  {
    v1::OpRequest request;
    *request.mutable_index_select() =
        MakeIndexSelectRequest(no_rows.view(), 0, stored_index[0].view());
    *request.mutable_index_select()->mutable_input() = StoredArgument(kTableName);
    absl::StatusOr<Tensor> inline_rows = client.Run(request);
    if (!inline_rows.ok()) Fail("IndexSelect of the stored table", inline_rows.status());
    if (std::memcmp(inline_rows->data(), memory->data() + result_at, rows_bytes) != 0) {
      Fail("lookup into the region", absl::InternalError("the region's rows differ"));
    }
  }
  std::vector<Comparison> comparisons;
  comparisons.push_back(
      Compare("embedding lookup (IndexSelect)", shm_lookup, stored_lookup, settings));
  comparisons.push_back(
      Compare("gradient push (IndexReduce SUM)", shm_push, stored_push, settings));
  absl::PrintF(
      "\n## Store: shared memory vs messages, C++ client, concurrency 1, %s\n\n"
      "shared memory: the rows (and the push's updates) in a registered system region, the "
      "lookup's result written there (RunInto); messages: the stored calls above, the same work "
      "with those bytes in the request and the response. The %d x %d float32 table is stored. "
      "Median of %d repetition(s); ratio = shared memory / messages calls/s\n\n",
      date, rows, cols, settings.repetitions);
  absl::PrintF(
      "| workload | shm p50 ms | shm p99 ms | shm calls/s | messages p50 ms | messages p99 ms | "
      "messages calls/s | ratio |\n|---|---|---|---|---|---|---|---|\n");
  for (const Comparison& c : comparisons) {
    if (!c.error.empty()) {
      absl::PrintF("| %s | failed: %s |||||||\n", c.workload, c.error);
      verdicts->push_back(absl::StrFormat("- shared memory %s: failed", c.workload));
      continue;
    }
    const Summary s = Summarize(c.stored), m = Summarize(c.inline_calls);
    absl::PrintF("| %s | %.3f | %.3f | %.0f | %.3f | %.3f | %.0f | %.2fx |\n", c.workload, s.p50_ms,
                 s.p99_ms, s.calls_per_s, m.p50_ms, m.p99_ms, m.calls_per_s, Median(c.ratios));
    verdicts->push_back(absl::StrFormat("- shared memory %s: p50 %.3f ms, target <= 0.25 ms: %s",
                                        c.workload, s.p50_ms,
                                        s.p50_ms <= 0.25 ? "met" : "NOT met"));
  }
#if defined(TENSOROPS_HAVE_CUDA)
  CudaRegionRun(client, settings, stored_index, shm_lookup, batch_rows, cols, date, verdicts);
#endif
  (void)client.UnregisterSharedMemory("bench");
  memory = absl::UnavailableError("released");  // unmapped and removed before the upload's

  if (upload_bytes <= 0) return;
  // The large upload from a region, against a memcpy of the same bytes into fresh memory (the
  // store's allocation is fresh too, its pages first touched by the copy).
  absl::StatusOr<SharedMemoryObject> upload =
      SharedMemoryObject::Create(key + "-upload", upload_bytes);
  if (absl::IsResourceExhausted(upload.status())) {
    // A small /dev/shm (a container's): the upload's figure is missing, the rest stands.
    absl::PrintF("\nThe %s upload from a shared-memory region is not measured: %s\n",
                 SizeName(upload_bytes), upload.status().message());
    verdicts->push_back(
        absl::StrFormat("- %s PutTensor from shared memory: not measured (no room in /dev/shm)",
                        SizeName(upload_bytes)));
    return;
  }
  if (!upload.ok()) Fail("SharedMemoryObject::Create", upload.status());
  const std::vector<char>& pattern = PatternBuffer();
  for (int64_t at = 0; at < upload_bytes; at += static_cast<int64_t>(pattern.size())) {
    std::memcpy(upload->data() + at, pattern.data(),
                std::min<int64_t>(pattern.size(), upload_bytes - at));
  }
  absl::Status registered_upload =
      client.RegisterSharedMemory("bench-upload", upload->key(), upload_bytes);
  if (!registered_upload.ok()) Fail("RegisterSharedMemory", registered_upload);
  std::vector<double> put_seconds, copy_seconds;
  for (int rep = 0; rep < upload_repetitions; ++rep) {
    {
      const absl::Time start = absl::Now();
      std::unique_ptr<char[]> copy(new char[upload_bytes]);
      std::memcpy(copy.get(), upload->data(), upload_bytes);
      copy_seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    }
    const absl::Time start = absl::Now();
    absl::StatusOr<v1::TensorInfo> put =
        client.PutTensorFromSharedMemory(kUploadName, DataType::kUInt8, {upload_bytes},
                                         SharedMemoryRef("bench-upload", 0, upload_bytes));
    if (!put.ok()) Fail("PutTensorFromSharedMemory", put.status());
    put_seconds.push_back(absl::ToDoubleSeconds(absl::Now() - start));
    absl::Status deleted = client.DeleteTensor(kUploadName);
    if (!deleted.ok()) Fail("DeleteTensor", deleted);
  }
  (void)client.UnregisterSharedMemory("bench-upload");
  const double put_median = Median(put_seconds), copy_median = Median(copy_seconds);
  absl::PrintF(
      "\n| upload | bytes | seconds (median) | GB/s (median) | runs |\n|---|---|---|---|---|\n");
  absl::PrintF("| %s PutTensor from a shared-memory region | %d | %.3f | %.2f | %d |\n",
               SizeName(upload_bytes), upload_bytes, put_median, upload_bytes / put_median / 1e9,
               upload_repetitions);
  absl::PrintF("| %s memcpy into fresh memory (the floor) | %d | %.3f | %.2f | %d |\n",
               SizeName(upload_bytes), upload_bytes, copy_median, upload_bytes / copy_median / 1e9,
               upload_repetitions);
  verdicts->push_back(absl::StrFormat(
      "- %s PutTensor from shared memory: %.2fx a memcpy's time, target <= 1.5x: %s",
      SizeName(upload_bytes), put_median / copy_median,
      put_median <= 1.5 * copy_median ? "met" : "NOT met"));
  std::fflush(stdout);
}

int Run() {
  const bool quick = absl::GetFlag(FLAGS_quick);
  const RunSettings settings{
      .repetitions = quick ? 1 : absl::GetFlag(FLAGS_repetitions),
      .seconds_per_cell = absl::Seconds(quick ? 0.2 : absl::GetFlag(FLAGS_seconds_per_cell)),
      .max_calls_per_cell = absl::GetFlag(FLAGS_max_calls_per_cell)};
  const int64_t rows = quick ? int64_t{64} << 10 : absl::GetFlag(FLAGS_rows);
  const int64_t inline_rows = quick ? int64_t{16} << 10 : absl::GetFlag(FLAGS_inline_rows);
  const int64_t cols = absl::GetFlag(FLAGS_cols);
  const int64_t batch_rows = absl::GetFlag(FLAGS_batch_rows);
  const int64_t upload_bytes = quick ? int64_t{64} << 20 : absl::GetFlag(FLAGS_upload_bytes);
  const int upload_repetitions = quick ? 1 : absl::GetFlag(FLAGS_upload_repetitions);
  const int64_t chunk_bytes = absl::GetFlag(FLAGS_chunk_bytes);
  const int64_t table_bytes = rows * cols * 4, inline_table_bytes = inline_rows * cols * 4;

  std::unique_ptr<Server> server;
  std::string target = absl::GetFlag(FLAGS_target);
  if (target.empty()) {
    server = StartServer();
    target = absl::StrFormat("127.0.0.1:%d", server->port());
  }
  ClientOptions client_options;
  client_options.default_timeout = absl::Minutes(5);
  client_options.max_attempts = absl::GetFlag(FLAGS_max_attempts);
  absl::StatusOr<std::unique_ptr<Client>> created = Client::Create(target, client_options);
  if (!created.ok()) Fail("Client::Create", created.status());
  Client& client = **created;
  // A stub of its own for the streamed upload, on the client's channel.
  std::unique_ptr<v1::TensorOps::Stub> stub = v1::TensorOps::NewStub(client.channel());
  // Leftovers of an interrupted run against an external server; NOT_FOUND is expected.
  (void)client.DeleteTensor(kTableName);
  (void)client.DeleteTensor(kUploadName);

  const std::string date = absl::FormatTime("%Y-%m-%d %H:%M UTC", absl::Now(), absl::UTCTimeZone());
  absl::PrintF("\n## Store: uploads over loopback, C++ client, %s\n\n", date);
  absl::PrintF("GB/s = 10^9 bytes per second, from the first byte sent to the stored answer\n\n");
  absl::PrintF("| upload | bytes | chunk | seconds (median) | GB/s (median) | runs |\n");
  absl::PrintF("|---|---|---|---|---|---|\n");
  std::fflush(stdout);

  // The large upload first, while the store is empty, and gone before the table arrives;
  // alternating with the same bytes over a bare loopback TCP connection, the transport's floor.
  double upload_gbps = 0, tcp_gbps = 0;
  if (upload_bytes > 0) {
    std::vector<double> seconds, tcp_seconds;
    for (int rep = 0; rep < upload_repetitions; ++rep) {
      absl::StatusOr<double> tcp = TcpLoopbackSeconds(upload_bytes, chunk_bytes);
      if (!tcp.ok()) Fail("loopback TCP", tcp.status());
      tcp_seconds.push_back(*tcp);
      absl::StatusOr<double> s = UploadStream(*stub, kUploadName, upload_bytes, chunk_bytes);
      if (!s.ok()) Fail(absl::StrFormat("%s upload", SizeName(upload_bytes)), s.status());
      seconds.push_back(*s);
      absl::Status deleted = client.DeleteTensor(kUploadName);
      if (!deleted.ok()) Fail("DeleteTensor", deleted);
    }
    upload_gbps = upload_bytes / Median(seconds) / 1e9;
    tcp_gbps = upload_bytes / Median(tcp_seconds) / 1e9;
    absl::PrintF(
        "| %s PutTensor stream (generated stub, 64 MiB pattern buffer) | %d | %s | %.2f | "
        "%.2f | %d |\n",
        SizeName(upload_bytes), upload_bytes, SizeName(chunk_bytes), Median(seconds), upload_gbps,
        upload_repetitions);
    absl::PrintF(
        "| %s over a bare loopback TCP socket (no gRPC; the floor) | %d | %s | %.2f | "
        "%.2f | %d |\n",
        SizeName(upload_bytes), upload_bytes, SizeName(chunk_bytes), Median(tcp_seconds), tcp_gbps,
        upload_repetitions);
    std::fflush(stdout);
  }

  // The table: built here, uploaded once through Client::PutTensor, then freed on this side.
  {
    Tensor table = MakeTable(rows, cols);
    PutTensorOptions put_options;
    put_options.chunk_bytes = chunk_bytes;
    const absl::Time start = absl::Now();
    absl::StatusOr<v1::TensorInfo> info = client.PutTensor(kTableName, table.view(), put_options);
    const double seconds = absl::ToDoubleSeconds(absl::Now() - start);
    if (!info.ok()) Fail("PutTensor of the table", info.status());
    absl::PrintF("| %d x %d float32 table (Client::PutTensor) | %d | %s | %.2f | %.2f | 1 |\n",
                 rows, cols, table_bytes, SizeName(chunk_bytes), seconds,
                 table_bytes / seconds / 1e9);
    std::fflush(stdout);
  }

  const std::vector<Tensor> stored_index = MakeIndexBatches(rows, batch_rows, 1);
  const std::vector<Tensor> inline_index = MakeIndexBatches(inline_rows, batch_rows, 2);
  const Tensor inline_table = MakeTable(inline_rows, cols);
  Tensor updates(DataType::kFloat32, Shape{batch_rows, cols});
  std::fill_n(updates.data_as<float>(), batch_rows * cols, 0.5f);
  const Tensor no_rows(DataType::kFloat32, Shape{0, cols});  // Stands in for the stored input.

  // Check the stored table answers with the rows it was given, before any push changes them.
  {
    v1::OpRequest request;
    *request.mutable_index_select() =
        MakeIndexSelectRequest(no_rows.view(), 0, stored_index[0].view());
    *request.mutable_index_select()->mutable_input() = StoredArgument(kTableName);
    absl::StatusOr<Tensor> selected = client.Run(request);
    if (!selected.ok()) Fail("IndexSelect of the stored table", selected.status());
    for (int64_t i = 0; i < batch_rows; ++i) {
      const int64_t row = stored_index[0].data_as<int64_t>()[i];
      for (int64_t c = 0; c < cols; ++c) {
        if (selected->data_as<float>()[i * cols + c] != TableValue(row, c)) {
          Fail("IndexSelect of the stored table",
               absl::InternalError(absl::StrFormat("row %d col %d differs", row, c)));
        }
      }
    }
  }

  auto stored_lookup = [&](int64_t i) -> absl::Status {
    v1::OpRequest request;
    *request.mutable_index_select() =
        MakeIndexSelectRequest(no_rows.view(), 0, stored_index[i % kIndexBatches].view());
    *request.mutable_index_select()->mutable_input() = StoredArgument(kTableName);
    absl::StatusOr<Tensor> selected = client.Run(request);
    return selected.status();
  };
  auto inline_lookup = [&](int64_t i) -> absl::Status {
    return client.IndexSelect(inline_table.view(), 0, inline_index[i % kIndexBatches].view())
        .status();
  };
  auto stored_push = [&](int64_t i) -> absl::Status {
    v1::OpRequest request;
    *request.mutable_index_reduce() =
        MakeIndexReduceRequest(no_rows.view(), 0, stored_index[i % kIndexBatches].view(),
                               updates.view(), IndexReduceOptions{.reduce = Reduction::kSum});
    *request.mutable_index_reduce()->mutable_input() = StoredArgument(kTableName);
    request.mutable_index_reduce()->mutable_result_options()->set_in_place(true);
    return client.RunStored(std::move(request)).status();
  };
  auto inline_push = [&](int64_t i) -> absl::Status {
    return client
        .IndexReduce(inline_table.view(), 0, inline_index[i % kIndexBatches].view(), updates.view(),
                     IndexReduceOptions{.reduce = Reduction::kSum})
        .status();
  };

  // The transport's floor at this size: a raw gRPC echo of the lookup's result bytes (sent both
  // ways, so an upper bound on the bytes a lookup moves), same process, same gRPC build.
  EchoServer echo_server;
  std::unique_ptr<bench::v1::Echo::Stub> echo_stub = bench::v1::Echo::NewStub(grpc::CreateChannel(
      absl::StrFormat("127.0.0.1:%d", echo_server.port()), grpc::InsecureChannelCredentials()));
  bench::v1::EchoMessage echo_request;
  echo_request.mutable_data()->assign(batch_rows * cols * 4, '\x3f');
  auto echo = [&](int64_t) -> absl::Status {
    grpc::ClientContext context;
    bench::v1::EchoMessage response;
    grpc::Status status = echo_stub->Echo(&context, echo_request, &response);
    return status.ok() ? absl::OkStatus() : absl::UnavailableError(status.error_message());
  };
  std::vector<CellResult> echo_reps;
  for (int rep = 0; rep < settings.repetitions; ++rep) echo_reps.push_back(Measure(echo, settings));

  std::vector<Comparison> comparisons;
  comparisons.push_back(
      Compare("embedding lookup (IndexSelect)", stored_lookup, inline_lookup, settings));
  comparisons.push_back(
      Compare("gradient push (IndexReduce SUM)", stored_push, inline_push, settings));

  absl::PrintF(
      "\n## Store: stored vs inline, C++ client, concurrency 1, %s\n\n"
      "stored: the %d x %d float32 table (%s) referenced by name; inline: a %d x %d table (%s) "
      "sent in every request (and, for the push, returned). %d random rows per call. Median of %d "
      "repetition(s), %.1f s per cell; ratio = stored / inline calls/s (higher is better)\n\n",
      date, rows, cols, SizeName(table_bytes), inline_rows, cols, SizeName(inline_table_bytes),
      batch_rows, settings.repetitions, absl::ToDoubleSeconds(settings.seconds_per_cell));
  absl::PrintF(
      "| workload | stored p50 ms | stored p99 ms | stored calls/s | inline p50 ms | inline p99 ms "
      "| inline calls/s | ratio stored/inline |\n|---|---|---|---|---|---|---|---|\n");
  std::vector<std::string> verdicts;
  const Summary echo_summary = Summarize(echo_reps);
  for (const Comparison& c : comparisons) {
    if (!c.error.empty()) {
      absl::PrintF("| %s | failed: %s |||||||\n", c.workload, c.error);
      verdicts.push_back(absl::StrFormat("- %s: failed", c.workload));
      continue;
    }
    const Summary s = Summarize(c.stored), i = Summarize(c.inline_calls);
    const double ratio = Median(c.ratios);
    absl::PrintF("| %s | %.3f | %.3f | %.0f | %.1f | %.1f | %.2f | %.0fx |\n", c.workload, s.p50_ms,
                 s.p99_ms, s.calls_per_s, i.p50_ms, i.p99_ms, i.calls_per_s, ratio);
    verdicts.push_back(absl::StrFormat("- %s: %.0fx inline calls/s, target >= 100x: %s", c.workload,
                                       ratio, ratio >= 100 ? "met" : "NOT met"));
    verdicts.push_back(absl::StrFormat("- %s: stored p50 %.3f ms, target < 1 ms: %s", c.workload,
                                       s.p50_ms, s.p50_ms < 1 ? "met" : "NOT met"));
  }
  absl::PrintF(
      "| floor: raw gRPC echo of %s (the lookup's result, sent both ways) | %.3f | %.3f | %.0f "
      "||||\n",
      SizeName(echo_request.data().size()), echo_summary.p50_ms, echo_summary.p99_ms,
      echo_summary.calls_per_s);
  if (upload_bytes > 0) {
    verdicts.push_back(absl::StrFormat(
        "- %s upload: %.2f GB/s (bare TCP: %.2f GB/s), target >= 1 GB/s (4 GiB): %s",
        SizeName(upload_bytes), upload_gbps, tcp_gbps, upload_gbps >= 1 ? "met" : "NOT met"));
  }
  if (absl::GetFlag(FLAGS_shared_memory)) {
    SharedMemoryRun(client, settings, stored_index, stored_lookup, stored_push, rows, cols,
                    batch_rows, upload_bytes, upload_repetitions, date, &verdicts);
  }
  absl::PrintF("\n### Store targets%s\n\n%s\n", quick ? " (--quick: sizes too small to judge)" : "",
               absl::StrJoin(verdicts, "\n"));
  std::fflush(stdout);

  (void)client.DeleteTensor(kTableName);
  return 0;
}

}  // namespace
}  // namespace tensorops::store_bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // The server's start-up and shutdown lines would interleave with the tables.
  spdlog::set_level(spdlog::level::warn);
  return tensorops::store_bench::Run();
}
