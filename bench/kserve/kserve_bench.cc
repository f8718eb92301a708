// kserve_bench: the same op through both protocols the server speaks on one port: tensorops.v1's
// Gather (tensorops::v1::TensorOps) against KServe v2's ModelInfer of model "gather"
// (inference::GRPCInferenceService, docs/kserve.md), on the same data, from the same process.
//
// The op is a float32 Gather along axis 1: input [rows, 16], index int64 [rows, 4] (random in
// 0..15), result [rows, 4]. The KServe request carries the same bytes in raw_input_contents
// ("input", "index") and `axis` as an int64 parameter; the result comes back in
// raw_output_contents. Before timing, one call through each protocol must return byte-identical
// results (same dtype, shape and bytes), or the benchmark exits 1.
//
// Two cells per size and protocol, driven by bench/service's closed loop (the generated stubs'
// callback API, a fresh response message per call):
//   - sequential: --sequential_calls calls one after another (concurrency 1; at most
//     --max_seconds_sequential);
//   - closed loop: --concurrency calls kept in flight for --seconds_per_cell.
// Each cell is warmed up first. Repetitions alternate which protocol goes first, the table quotes
// medians over repetitions, and the ratios (kserve / v1) are medians of per-repetition ratios. No
// time is asserted.
//
//   build/release/bench/kserve/kserve_bench            # full run, about 30 s
//   build/release/bench/kserve/kserve_bench --quick    # smoke run, well under a second of calls
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/latency_stats.h"
#include "bench/service/closed_loop.h"
#include "grpcpp/grpcpp.h"
#include "inference/grpc_service.grpc.pb.h"
#include "server/server.h"
#include "spdlog/spdlog.h"
#include "tensorops/v1/service.grpc.pb.h"

ABSL_FLAG(bool, quick, false,
          "Smoke run: one repetition, 20 sequential calls and 0.02 s of closed loop per cell.");
ABSL_FLAG(std::vector<std::string>, rows, std::vector<std::string>({"256", "16384"}),
          "Rows of the [rows, 16] float32 input (256: 16 KiB; 16384: 1 MiB); the index is "
          "[rows, 4].");
ABSL_FLAG(int64_t, sequential_calls, 1000, "Calls of each sequential cell (besides warm-up).");
ABSL_FLAG(double, max_seconds_sequential, 5.0, "Longest a sequential cell runs.");
ABSL_FLAG(int, concurrency, 8, "Calls kept in flight in the closed-loop cells.");
ABSL_FLAG(double, seconds_per_cell, 1.0, "How long each closed-loop cell keeps its calls going.");
ABSL_FLAG(int64_t, max_calls_per_cell, 200000, "Most calls one closed-loop cell sends.");
ABSL_FLAG(int, repetitions, 3, "Repetitions of every cell; the table reports medians.");

namespace tensorops::bench {
namespace {

constexpr int64_t kCols = 16;
constexpr int64_t kIndexCols = 4;
constexpr int64_t kAxis = 1;

// Workload is one size's request in both protocols, built from the same bytes.
struct Workload {
  int64_t rows = 0;
  tensorops::v1::GatherRequest v1;
  inference::ModelInferRequest kserve;
  int64_t result_bytes = 0;
};

Workload MakeWorkload(int64_t rows, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::vector<float> input(rows * kCols);
  std::uniform_real_distribution<float> value(-1000, 1000);
  for (float& v : input) v = value(random);
  std::vector<int64_t> index(rows * kIndexCols);
  std::uniform_int_distribution<int64_t> column(0, kCols - 1);
  for (int64_t& i : index) i = column(random);
  const std::string input_bytes(reinterpret_cast<const char*>(input.data()),
                                input.size() * sizeof(float));
  const std::string index_bytes(reinterpret_cast<const char*>(index.data()),
                                index.size() * sizeof(int64_t));

  Workload w;
  w.rows = rows;
  w.result_bytes = rows * kIndexCols * static_cast<int64_t>(sizeof(float));

  tensorops::v1::Tensor* v1_input = w.v1.mutable_input();
  v1_input->set_dtype(tensorops::v1::DATA_TYPE_FLOAT32);
  v1_input->add_shape(rows);
  v1_input->add_shape(kCols);
  v1_input->set_data(input_bytes);
  tensorops::v1::Tensor* v1_index = w.v1.mutable_index();
  v1_index->set_dtype(tensorops::v1::DATA_TYPE_INT64);
  v1_index->add_shape(rows);
  v1_index->add_shape(kIndexCols);
  v1_index->set_data(index_bytes);
  w.v1.set_axis(kAxis);

  w.kserve.set_model_name("gather");
  inference::ModelInferRequest::InferInputTensor* k_input = w.kserve.add_inputs();
  k_input->set_name("input");
  k_input->set_datatype("FP32");
  k_input->add_shape(rows);
  k_input->add_shape(kCols);
  inference::ModelInferRequest::InferInputTensor* k_index = w.kserve.add_inputs();
  k_index->set_name("index");
  k_index->set_datatype("INT64");
  k_index->add_shape(rows);
  k_index->add_shape(kIndexCols);
  w.kserve.add_raw_input_contents(input_bytes);
  w.kserve.add_raw_input_contents(index_bytes);
  (*w.kserve.mutable_parameters())["axis"].set_int64_param(kAxis);
  return w;
}

// Verify calls each protocol once and checks that both return the same tensor: v1's result and
// KServe's one output "output", FP32, of the same shape and bytes. Returns what differs, or "".
std::string Verify(tensorops::v1::TensorOps::Stub* v1_stub,
                   inference::GRPCInferenceService::Stub* kserve_stub, const Workload& w) {
  tensorops::v1::GatherResponse v1_response;
  {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    grpc::Status status = v1_stub->Gather(&context, w.v1, &v1_response);
    if (!status.ok()) {
      return absl::StrFormat("tensorops.v1 Gather failed: %d: %s", status.error_code(),
                             status.error_message());
    }
  }
  inference::ModelInferResponse kserve_response;
  {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
    grpc::Status status = kserve_stub->ModelInfer(&context, w.kserve, &kserve_response);
    if (!status.ok()) {
      return absl::StrFormat("KServe ModelInfer(gather) failed: %d: %s", status.error_code(),
                             status.error_message());
    }
  }
  const tensorops::v1::Tensor& expected = v1_response.result();
  const std::vector<int64_t> expected_shape(expected.shape().begin(), expected.shape().end());
  if (expected.dtype() != tensorops::v1::DATA_TYPE_FLOAT32 ||
      expected_shape != std::vector<int64_t>({w.rows, kIndexCols}) ||
      static_cast<int64_t>(expected.data().size()) != w.result_bytes) {
    return absl::StrFormat("tensorops.v1 Gather returned dtype %d, shape [%s], %d bytes",
                           expected.dtype(), absl::StrJoin(expected_shape, ", "),
                           expected.data().size());
  }
  if (kserve_response.outputs_size() != 1 || kserve_response.raw_output_contents_size() != 1) {
    return absl::StrFormat("KServe returned %d outputs and %d raw_output_contents, expected 1 each",
                           kserve_response.outputs_size(),
                           kserve_response.raw_output_contents_size());
  }
  const inference::ModelInferResponse::InferOutputTensor& output = kserve_response.outputs(0);
  const std::vector<int64_t> shape(output.shape().begin(), output.shape().end());
  if (output.name() != "output" || output.datatype() != "FP32" || shape != expected_shape) {
    return absl::StrFormat(
        "KServe output is \"%s\" %s [%s], expected \"output\" FP32 [%s] (model_name \"%s\")",
        output.name(), output.datatype(), absl::StrJoin(shape, ", "),
        absl::StrJoin(expected_shape, ", "), kserve_response.model_name());
  }
  const std::string& raw = kserve_response.raw_output_contents(0);
  if (raw != expected.data()) {
    int64_t first = 0;
    while (first < static_cast<int64_t>(std::min(raw.size(), expected.data().size())) &&
           raw[first] == expected.data()[first]) {
      ++first;
    }
    return absl::StrFormat(
        "results differ: KServe raw output of %d bytes, tensorops.v1 result of %d bytes, first "
        "difference at byte %d",
        raw.size(), expected.data().size(), first);
  }
  return "";
}

SlotFactory V1Slots(tensorops::v1::TensorOps::Stub* stub,
                    const tensorops::v1::GatherRequest* request) {
  return [stub, request] {
    return std::make_unique<UnarySlot<tensorops::v1::GatherResponse>>(
        [stub, request](grpc::ClientContext* context, tensorops::v1::GatherResponse* response,
                        Slot::Done done) {
          stub->async()->Gather(context, request, response, std::move(done));
        },
        [](const tensorops::v1::GatherResponse& r) {
          return static_cast<int64_t>(r.result().data().size());
        });
  };
}

SlotFactory KServeSlots(inference::GRPCInferenceService::Stub* stub,
                        const inference::ModelInferRequest* request) {
  return [stub, request] {
    return std::make_unique<UnarySlot<inference::ModelInferResponse>>(
        [stub, request](grpc::ClientContext* context, inference::ModelInferResponse* response,
                        Slot::Done done) {
          stub->async()->ModelInfer(context, request, response, std::move(done));
        },
        [](const inference::ModelInferResponse& r) {
          return r.raw_output_contents_size() == 1
                     ? static_cast<int64_t>(r.raw_output_contents(0).size())
                     : int64_t{-1};
        });
  };
}

std::unique_ptr<Server> StartServer() {
  ServerOptions options;
  options.port = 0;
  absl::StatusOr<std::unique_ptr<Server>> server = Server::Start(options);
  if (!server.ok()) {
    absl::FPrintF(stderr, "tensorops server: %s\n", server.status().ToString());
    std::exit(1);
  }
  return *std::move(server);
}

std::string SizeName(int64_t bytes) {
  if (bytes >= (1 << 20)) return absl::StrFormat("%d MiB", bytes >> 20);
  return absl::StrFormat("%d KiB", bytes >> 10);
}

// Mode is one way of driving the calls: sequential (N calls at concurrency 1) or a closed loop.
struct Mode {
  std::string name;
  int concurrency;
  RunSettings settings;
};

int Run() {
  const bool quick = absl::GetFlag(FLAGS_quick);
  const int repetitions = quick ? 1 : absl::GetFlag(FLAGS_repetitions);
  const int concurrency = absl::GetFlag(FLAGS_concurrency);
  const int64_t sequential_calls = quick ? 20 : absl::GetFlag(FLAGS_sequential_calls);
  const std::vector<Mode> modes = {
      {.name = absl::StrFormat("%d sequential", sequential_calls),
       .concurrency = 1,
       .settings = {.repetitions = repetitions,
                    .seconds_per_cell = absl::Seconds(absl::GetFlag(FLAGS_max_seconds_sequential)),
                    .max_calls_per_cell = sequential_calls}},
      {.name = absl::StrFormat("conc %d, %.2g s", concurrency,
                               quick ? 0.02 : absl::GetFlag(FLAGS_seconds_per_cell)),
       .concurrency = concurrency,
       .settings = {.repetitions = repetitions,
                    .seconds_per_cell =
                        absl::Seconds(quick ? 0.02 : absl::GetFlag(FLAGS_seconds_per_cell)),
                    .max_calls_per_cell = absl::GetFlag(FLAGS_max_calls_per_cell)}},
  };
  std::vector<int64_t> row_counts;
  for (const std::string& r : absl::GetFlag(FLAGS_rows)) row_counts.push_back(std::stoll(r));

  std::unique_ptr<Server> server = StartServer();
  // One channel (connection) per protocol, as two separate clients would have.
  auto v1_stub = tensorops::v1::TensorOps::NewStub(Connect(server->port()));
  auto kserve_stub = inference::GRPCInferenceService::NewStub(Connect(server->port()));

  std::vector<Workload> workloads;
  for (int64_t rows : row_counts) {
    workloads.push_back(MakeWorkload(rows, /*seed=*/rows));
    const std::string mismatch = Verify(v1_stub.get(), kserve_stub.get(), workloads.back());
    if (!mismatch.empty()) {
      absl::FPrintF(stderr, "kserve_bench: Gather of %d rows: %s\n", rows, mismatch);
      return 1;
    }
  }

  absl::PrintF(
      "\n## KServe v2 ModelInfer vs tensorops.v1 Gather, same server, same process, %s\n\n"
      "Gather float32 along axis 1: input [rows, %d], index int64 [rows, %d], result [rows, %d]; "
      "results checked byte-identical. Median of %d repetition(s); ratio = kserve / v1 (p50: "
      "lower is better; calls/s: higher is better; 1.00x = no difference)\n\n",
      absl::FormatTime("%Y-%m-%d", absl::Now(), absl::UTCTimeZone()), kCols, kIndexCols, kIndexCols,
      repetitions);
  absl::PrintF(
      "| input (index) | calls | protocol | p50 ms | p99 ms | calls/s | p50 ratio | calls/s ratio "
      "|\n|---|---|---|---|---|---|---|---|\n");
  std::fflush(stdout);
  int failures = 0;
  for (const Workload& w : workloads) {
    const std::string size = absl::StrFormat("%s [%d, %d] (%s)", SizeName(w.rows * kCols * 4),
                                             w.rows, kCols, SizeName(w.rows * kIndexCols * 8));
    for (const Mode& mode : modes) {
      std::vector<CellResult> v1_reps, kserve_reps;
      std::vector<double> p50_ratios, throughput_ratios;
      std::string error;
      for (int rep = 0; rep < repetitions && error.empty(); ++rep) {
        CellResult v1, kserve;
        auto measure_v1 = [&] {
          v1 = Measure(V1Slots(v1_stub.get(), &w.v1), mode.concurrency, w.result_bytes,
                       mode.settings);
        };
        auto measure_kserve = [&] {
          kserve = Measure(KServeSlots(kserve_stub.get(), &w.kserve), mode.concurrency,
                           w.result_bytes, mode.settings);
        };
        // Alternate which protocol goes first, so that neither always runs on a cooler machine.
        if (rep % 2 == 0) {
          measure_v1();
          measure_kserve();
        } else {
          measure_kserve();
          measure_v1();
        }
        error = !v1.error.empty()
                    ? "tensorops.v1: " + v1.error
                    : (!kserve.error.empty() ? "kserve: " + kserve.error : std::string());
        v1_reps.push_back(v1);
        kserve_reps.push_back(kserve);
        p50_ratios.push_back(kserve.p50_ms / v1.p50_ms);
        throughput_ratios.push_back(kserve.calls_per_s / v1.calls_per_s);
      }
      if (!error.empty()) {
        absl::PrintF("| %s | %s | failed: %s ||||||\n", size, mode.name, error);
        ++failures;
        continue;
      }
      const Summary v1 = Summarize(v1_reps), kserve = Summarize(kserve_reps);
      absl::PrintF("| %s | %s | tensorops.v1 | %.3f | %.3f | %.0f | | |\n", size, mode.name,
                   v1.p50_ms, v1.p99_ms, v1.calls_per_s);
      absl::PrintF("| %s | %s | kserve v2 | %.3f | %.3f | %.0f | %.2fx | %.2fx |\n", size,
                   mode.name, kserve.p50_ms, kserve.p99_ms, kserve.calls_per_s, Median(p50_ratios),
                   Median(throughput_ratios));
      std::fflush(stdout);
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace tensorops::bench

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  // The server's start-up and shutdown lines would interleave with the table.
  spdlog::set_level(spdlog::level::warn);
  return tensorops::bench::Run();
}
