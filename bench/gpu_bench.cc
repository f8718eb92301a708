// GPU kernel benchmark (issue: CUDA kernels for every operation): each op on large inputs
// (2^26 elements by default, float32 and bfloat16, random and duplicate-heavy indices, the
// deterministic SUM), its inputs
// already on the device, timed with CUDA events: our kernels' median time, the bandwidth they
// achieve against a device-to-device copy of the same bytes measured in the same run, and, given
// PyTorch CUDA's times for the same cases (bench/gpu_torch.py writes them), the ratio; and what
// one call enqueues: its kernel launches (CUB's included), memsets and copies, counted from a CUDA
// graph captured from the call's stream, so that nothing our code does not count is left out.
//
//   gpu_bench [--log2_elements=26] [--iterations=10] [--torch_times=torch.json]
//
// Only the kernels are timed (no PCIe copies), as PyTorch's are: both read device-resident data.
// Needs a GPU; prints why and exits 0 without one.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/device.h"
#include "kernels/device_call.h"
#include "kernels/index_ops.h"
#include "kernels/masked_scatter.h"
#include "kernels/nd_ops.h"
#include "kernels/view_scatter.h"

namespace tensorops {
namespace {

#define CHECK_CUDA(call)                                                  \
  do {                                                                    \
    const cudaError_t error = (call);                                     \
    if (error != cudaSuccess) {                                           \
      std::fprintf(stderr, "%s: %s\n", #call, cudaGetErrorString(error)); \
      std::exit(1);                                                       \
    }                                                                     \
  } while (0)

// A fast deterministic generator: the data's distribution matters here, not its quality.
class Lcg {
 public:
  explicit Lcg(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
    return state_ >> 17;
  }

 private:
  uint64_t state_;
};

Tensor Values(DataType dtype, const Shape& shape, uint64_t seed) {
  Tensor tensor(dtype, shape);
  Lcg lcg(seed);
  for (int64_t i = 0; i < tensor.numel(); ++i) {
    const float value = static_cast<float>(lcg.Next() % 1000) / 100.0f - 5.0f;
    if (dtype == DataType::kFloat32) {
      tensor.mutable_view().data_as<float>()[i] = value;
    } else {
      tensor.mutable_view().data_as<BFloat16>()[i] = BFloat16(value);
    }
  }
  return tensor;
}

// Indices in [0, bound), or drawn from only `distinct` values when > 0 (duplicate-heavy): int64,
// or `dtype` int32 with the same values.
Tensor Indices(const Shape& shape, int64_t bound, uint64_t seed, int64_t distinct = 0,
               DataType dtype = DataType::kInt64) {
  Tensor tensor(dtype, shape);
  Lcg lcg(seed);
  const int64_t spread = distinct > 0 ? std::min(distinct, bound) : bound;
  for (int64_t i = 0; i < tensor.numel(); ++i) {
    const int64_t pick = static_cast<int64_t>(lcg.Next() % static_cast<uint64_t>(spread));
    const int64_t value = distinct > 0 ? pick * (bound / spread) : pick;
    if (dtype == DataType::kInt32) {
      tensor.mutable_view().data_as<int32_t>()[i] = static_cast<int32_t>(value);
    } else {
      tensor.mutable_view().data_as<int64_t>()[i] = value;
    }
  }
  return tensor;
}

double Median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

// Measured is what a case reports besides its time: the bytes it reads and writes once (its
// inputs and its result) and what one call enqueues (DeviceRun::Launches).
struct Measured {
  int64_t bytes = 0;
  std::string launches = "-";
};

// DeviceRun holds one call's buffers on the device and times its kernels.
class DeviceRun {
 public:
  explicit DeviceRun(const DeviceCall& call) : call_(call) {
    for (const InputSpan& span : call.inputs()) {
      void* copy = nullptr;
      CHECK_CUDA(cudaMalloc(&copy, span.bytes));
      CHECK_CUDA(cudaMemcpy(copy, span.data, span.bytes, cudaMemcpyHostToDevice));
      inputs_.push_back(copy);
      bytes_ += span.bytes;
    }
    // Whole 32-bit words, as the executor gives (DeviceBuffers::result).
    CHECK_CUDA(cudaMalloc(&result_, std::max<int64_t>((call.result_bytes() + 3) / 4 * 4, 4)));
    absl::StatusOr<int64_t> workspace_bytes = call.WorkspaceBytes();
    if (!workspace_bytes.ok()) {
      std::fprintf(stderr, "%s\n", workspace_bytes.status().ToString().c_str());
      std::exit(1);
    }
    workspace_bytes_ = *workspace_bytes;
    CHECK_CUDA(cudaMalloc(&workspace_, std::max<int64_t>(workspace_bytes_, 1)));
    CHECK_CUDA(cudaMalloc(&flag_, sizeof(int32_t)));
    CHECK_CUDA(cudaMemset(flag_, 0, sizeof(int32_t)));
    bytes_ += call.result_bytes();
  }
  ~DeviceRun() {
    for (void* copy : inputs_) cudaFree(copy);
    cudaFree(result_);
    cudaFree(workspace_);
    cudaFree(flag_);
  }

  // Milliseconds of one Enqueue (median over `iterations`, after a warm-up).
  double TimeMs(int iterations, cudaStream_t stream) {
    return TimeEach(iterations, stream, [&] {
      const absl::Status status = call_.Enqueue(buffers(), stream);
      if (!status.ok()) {
        std::fprintf(stderr, "%s\n", status.ToString().c_str());
        std::exit(1);
      }
    });
  }

  // Launches: what one Enqueue puts on the stream, captured into a CUDA graph (nothing runs) and
  // counted by node: "3" kernels, "2 +1 memset +1 copy"; "?" where the call cannot be captured.
  std::string Launches(cudaStream_t stream) {
    CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed));
    const absl::Status status = call_.Enqueue(buffers(), stream);
    cudaGraph_t graph = nullptr;
    const cudaError_t captured = cudaStreamEndCapture(stream, &graph);
    if (!status.ok() || captured != cudaSuccess || graph == nullptr) {
      cudaGetLastError();
      return "?";
    }
    size_t count = 0;
    CHECK_CUDA(cudaGraphGetNodes(graph, nullptr, &count));
    std::vector<cudaGraphNode_t> nodes(count);
    CHECK_CUDA(cudaGraphGetNodes(graph, nodes.data(), &count));
    int kernels = 0, memsets = 0, copies = 0, others = 0;
    for (cudaGraphNode_t node : nodes) {
      cudaGraphNodeType type;
      CHECK_CUDA(cudaGraphNodeGetType(node, &type));
      if (type == cudaGraphNodeTypeKernel) {
        ++kernels;
      } else if (type == cudaGraphNodeTypeMemset) {
        ++memsets;
      } else if (type == cudaGraphNodeTypeMemcpy) {
        ++copies;
      } else {
        ++others;
      }
    }
    cudaGraphDestroy(graph);
    std::string text = std::to_string(kernels);
    if (memsets > 0) text += " +" + std::to_string(memsets) + " memset";
    if (copies > 0) text += " +" + std::to_string(copies) + " copy";
    if (others > 0) text += " +" + std::to_string(others) + " other";
    return text;
  }

  // Bytes the call reads and writes once: its inputs and its result.
  int64_t bytes() const { return bytes_; }

  DeviceBuffers buffers() const {
    return DeviceBuffers{.inputs = inputs_,
                         .result = result_,
                         .workspace = workspace_,
                         .workspace_bytes = workspace_bytes_,
                         .error_flag = static_cast<int32_t*>(flag_)};
  }

  static double TimeEach(int iterations, cudaStream_t stream, const std::function<void()>& body) {
    cudaEvent_t start, stop;
    CHECK_CUDA(cudaEventCreate(&start));
    CHECK_CUDA(cudaEventCreate(&stop));
    body();  // warm-up
    CHECK_CUDA(cudaStreamSynchronize(stream));
    std::vector<double> times;
    for (int i = 0; i < iterations; ++i) {
      CHECK_CUDA(cudaEventRecord(start, stream));
      body();
      CHECK_CUDA(cudaEventRecord(stop, stream));
      CHECK_CUDA(cudaEventSynchronize(stop));
      float ms = 0;
      CHECK_CUDA(cudaEventElapsedTime(&ms, start, stop));
      times.push_back(ms);
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return Median(times);
  }

 private:
  const DeviceCall& call_;
  std::vector<void*> inputs_;
  void* result_ = nullptr;
  void* workspace_ = nullptr;
  int64_t workspace_bytes_ = 0;
  void* flag_ = nullptr;
  int64_t bytes_ = 0;
};

// CopyMs times a device-to-device copy of `bytes` / 2 (it reads and writes, `bytes` in all).
double CopyMs(int64_t bytes, int iterations, cudaStream_t stream) {
  const int64_t half = bytes / 2;
  void* from = nullptr;
  void* to = nullptr;
  CHECK_CUDA(cudaMalloc(&from, half));
  CHECK_CUDA(cudaMalloc(&to, half));
  CHECK_CUDA(cudaMemset(from, 1, half));
  const double ms = DeviceRun::TimeEach(iterations, stream, [&] {
    CHECK_CUDA(cudaMemcpyAsync(to, from, half, cudaMemcpyDeviceToDevice, stream));
  });
  cudaFree(from);
  cudaFree(to);
  return ms;
}

std::map<std::string, double> ReadTorchTimes(const std::string& path) {
  std::map<std::string, double> times;
  if (path.empty()) return times;
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  // The file is a flat JSON object of "case": milliseconds, as bench/gpu_torch.py writes it.
  const std::regex entry("\"([^\"]+)\"\\s*:\\s*([0-9.eE+-]+)");
  const std::string content = text.str();
  for (std::sregex_iterator it(content.begin(), content.end(), entry), end; it != end; ++it) {
    times[(*it)[1]] = std::stod((*it)[2]);
  }
  return times;
}

struct Case {
  std::string name;
  std::function<double(int iterations, cudaStream_t stream, Measured* measured)> run;
};

template <typename Plan>
double RunPlan(const absl::StatusOr<Plan>& plan, int iterations, cudaStream_t stream,
               Measured* measured) {
  if (!plan.ok()) {
    std::fprintf(stderr, "%s\n", plan.status().ToString().c_str());
    std::exit(1);
  }
  std::unique_ptr<DeviceCall> call = MakeDeviceCall(*plan);
  if (call == nullptr) {
    std::fprintf(stderr, "no GPU form\n");
    std::exit(1);
  }
  DeviceRun run(*call);
  measured->bytes = run.bytes();
  measured->launches = run.Launches(stream);
  return run.TimeMs(iterations, stream);
}

// `log2_elements` sizes every case; IndexSelect and Gather also run at 2^20 (issue 38).
std::vector<Case> Cases(int log2_elements) {
  const int64_t elements = int64_t{1} << log2_elements;
  const int64_t cols = 256;
  const int64_t rows = elements / cols;
  std::vector<Case> cases;
  for (DataType dtype : {DataType::kFloat32, DataType::kBFloat16}) {
    const std::string type = dtype == DataType::kFloat32 ? "f32" : "bf16";
    // Row copies (IndexSelect) and element gathers at two sizes, with either index dtype: a
    // small call shows what launches cost, a large one what memory does.
    for (const int log2 : std::set<int>{20, log2_elements}) {
      const int64_t sized_rows = (int64_t{1} << log2) / cols;
      for (const DataType index_dtype : {DataType::kInt64, DataType::kInt32}) {
        const std::string suffix = "2^" + std::to_string(log2) + " " +
                                   (index_dtype == DataType::kInt64 ? "i64 " : "i32 ") + type;
        cases.push_back({"index_select axis0 " + suffix, [=](int it, cudaStream_t s, Measured* b) {
                           Tensor x = Values(dtype, {sized_rows, cols}, 27);
                           Tensor i = Indices({sized_rows}, sized_rows, 28, 0, index_dtype);
                           return RunPlan(
                               PlanIndexSelect({.input = x.view(), .index = i.view(), .axis = 0}),
                               it, s, b);
                         }});
        cases.push_back({"gather axis0 random " + suffix, [=](int it, cudaStream_t s, Measured* b) {
                           Tensor x = Values(dtype, {sized_rows, cols}, 29);
                           Tensor i = Indices({sized_rows, cols}, sized_rows, 30, 0, index_dtype);
                           return RunPlan(
                               PlanGather({.input = x.view(), .index = i.view(), .axis = 0}), it, s,
                               b);
                         }});
      }
    }
    cases.push_back({"gather axis0 random " + type, [=](int it, cudaStream_t s, Measured* b) {
                       Tensor x = Values(dtype, {rows, cols}, 1);
                       Tensor i = Indices({rows, cols}, rows, 2);
                       return RunPlan(PlanGather({.input = x.view(), .index = i.view(), .axis = 0}),
                                      it, s, b);
                     }});
    cases.push_back({"gather last random " + type, [=](int it, cudaStream_t s, Measured* b) {
                       Tensor x = Values(dtype, {rows, cols}, 1);
                       Tensor i = Indices({rows, cols}, cols, 3);
                       return RunPlan(PlanGather({.input = x.view(), .index = i.view(), .axis = 1}),
                                      it, s, b);
                     }});
    cases.push_back({"index_select axis0 " + type, [=](int it, cudaStream_t s, Measured* b) {
                       Tensor x = Values(dtype, {rows, cols}, 1);
                       Tensor i = Indices({rows}, rows, 4);
                       return RunPlan(
                           PlanIndexSelect({.input = x.view(), .index = i.view(), .axis = 0}), it,
                           s, b);
                     }});
    for (const auto& [label, reduce, distinct] :
         {std::tuple{"sum random", Reduction::kSum, int64_t{0}},
          std::tuple{"sum dup1%", Reduction::kSum, rows / 100},
          std::tuple{"amax dup1%", Reduction::kAmax, rows / 100},
          std::tuple{"mean random", Reduction::kMean, int64_t{0}},
          std::tuple{"assign random", Reduction::kAssign, int64_t{0}}}) {
      cases.push_back(
          {std::string("scatter axis0 ") + label + " " + type,
           [=, reduce = reduce, distinct = distinct](int it, cudaStream_t s, Measured* b) {
             Tensor x = Values(dtype, {rows, cols}, 5);
             Tensor i = Indices({rows, cols}, rows, 6, distinct);
             Tensor src = Values(dtype, {rows, cols}, 7);
             return RunPlan(PlanScatter({.input = x.view(),
                                         .index = i.view(),
                                         .source = src.view(),
                                         .axis = 0,
                                         .reduce = reduce}),
                            it, s, b);
           }});
    }
    cases.push_back(
        {"scatter axis0 sum dup1% deterministic " + type, [=](int it, cudaStream_t s, Measured* b) {
           Tensor x = Values(dtype, {rows, cols}, 5);
           Tensor i = Indices({rows, cols}, rows, 6, rows / 100);
           Tensor src = Values(dtype, {rows, cols}, 7);
           absl::StatusOr<ScatterPlan> plan = PlanScatter({.input = x.view(),
                                                           .index = i.view(),
                                                           .source = src.view(),
                                                           .axis = 0,
                                                           .reduce = Reduction::kSum});
           if (plan.ok()) plan->deterministic = true;
           return RunPlan(plan, it, s, b);
         }});
    cases.push_back(
        {"masked_scatter half " + type, [=](int it, cudaStream_t s, Measured* b) {
           Tensor x = Values(dtype, {elements}, 8);
           Tensor mask(DataType::kBool, {elements});
           Lcg lcg(9);
           for (int64_t k = 0; k < elements; ++k) {
             mask.mutable_view().data_as<bool>()[k] = lcg.Next() % 2 == 0;
           }
           Tensor src = Values(dtype, {elements}, 10);
           return RunPlan(
               PlanMaskedScatter({.input = x.view(), .mask = mask.view(), .source = src.view()}),
               it, s, b);
         }});
    cases.push_back(
        {"masked_scatter broadcast mask " + type, [=](int it, cudaStream_t s, Measured* b) {
           Tensor x = Values(dtype, {rows, cols}, 24);
           Tensor mask(DataType::kBool, {1, cols});
           Lcg lcg(25);
           for (int64_t k = 0; k < cols; ++k) {
             mask.mutable_view().data_as<bool>()[k] = lcg.Next() % 2 == 0;
           }
           Tensor src = Values(dtype, {rows, cols}, 26);
           return RunPlan(
               PlanMaskedScatter({.input = x.view(), .mask = mask.view(), .source = src.view()}),
               it, s, b);
         }});
    cases.push_back(
        {"select_scatter " + type, [=](int it, cudaStream_t s, Measured* b) {
           Tensor x = Values(dtype, {rows, cols}, 11);
           Tensor src = Values(dtype, {cols}, 12);
           return RunPlan(PlanSelectScatter(
                              {.input = x.view(), .src = src.view(), .axis = 0, .index = rows / 2}),
                          it, s, b);
         }});
    cases.push_back({"slice_scatter step2 " + type, [=](int it, cudaStream_t s, Measured* b) {
                       Tensor x = Values(dtype, {rows, cols}, 13);
                       Tensor src = Values(dtype, {rows, cols / 2}, 14);
                       return RunPlan(PlanSliceScatter({.input = x.view(),
                                                        .src = src.view(),
                                                        .axis = 1,
                                                        .start = 0,
                                                        .end = cols,
                                                        .step = 2}),
                                      it, s, b);
                     }});
    cases.push_back({"diagonal_scatter " + type, [=](int it, cudaStream_t s, Measured* b) {
                       int64_t side = 1;
                       while (side * side * 4 <= elements) side *= 2;
                       Tensor x = Values(dtype, {side, side}, 15);
                       Tensor src = Values(dtype, {side}, 16);
                       return RunPlan(PlanDiagonalScatter({.input = x.view(), .src = src.view()}),
                                      it, s, b);
                     }});
    // ScatterNd's general (TensorFlow) form: whole rows addressed by one coordinate (an embedding
    // push; PyTorch: index_put with accumulate), and single elements addressed by two, 2^24 of
    // them (the index is two int64 per update).
    // The row pushes: random rows, and rows drawn from 1% of the table (each hit about 100
    // times: each destination row's updates are one chain of adds on the row reduction's path).
    for (const auto& [label, distinct] :
         {std::pair{"random", int64_t{0}}, std::pair{"dup1%", rows / 100}}) {
      cases.push_back({std::string("scatter_nd rows sum ") + label + " " + type,
                       [=](int it, cudaStream_t s, Measured* b) {
                         Tensor x = Values(dtype, {rows, cols}, 17);
                         Tensor i = Indices({rows, 1}, rows, 18, distinct);
                         Tensor src = Values(dtype, {rows, cols}, 19);
                         return RunPlan(PlanScatterNd({.input = x.view(),
                                                       .index = i.view(),
                                                       .source = src.view(),
                                                       .reduce = Reduction::kSum}),
                                        it, s, b);
                       }});
    }
    cases.push_back(
        {"scatter_nd elements sum random " + type, [=](int it, cudaStream_t s, Measured* b) {
           const int64_t updates = elements / 4;
           Tensor x = Values(dtype, {rows, cols}, 20);
           Tensor i(DataType::kInt64, {updates, 2});
           const Tensor row = Indices({updates}, rows, 21);
           const Tensor col = Indices({updates}, cols, 22);
           for (int64_t k = 0; k < updates; ++k) {
             i.mutable_view().data_as<int64_t>()[2 * k] = row.view().data_as<int64_t>()[k];
             i.mutable_view().data_as<int64_t>()[2 * k + 1] = col.view().data_as<int64_t>()[k];
           }
           Tensor src = Values(dtype, {updates}, 23);
           return RunPlan(PlanScatterNd({.input = x.view(),
                                         .index = i.view(),
                                         .source = src.view(),
                                         .reduce = Reduction::kSum}),
                          it, s, b);
         }});
  }
  return cases;
}

int Main(int argc, char** argv) {
  int log2_elements = 26;
  int iterations = 10;
  std::string torch_path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind("--log2_elements=", 0) == 0) log2_elements = std::stoi(arg.substr(16));
    if (arg.rfind("--iterations=", 0) == 0) iterations = std::stoi(arg.substr(13));
    if (arg.rfind("--torch_times=", 0) == 0) torch_path = arg.substr(14);
  }
  const DeviceInventory inventory = QueryDevices();
  if (inventory.cuda_devices.empty()) {
    std::printf("gpu_bench: no GPU (%s); nothing to measure\n", inventory.note.c_str());
    return 0;
  }
  const std::map<std::string, double> torch = ReadTorchTimes(torch_path);
  cudaStream_t stream;
  CHECK_CUDA(cudaStreamCreate(&stream));
  std::printf("# %s, 2^%d elements, median of %d\n\n", inventory.cuda_devices[0].name.c_str(),
              log2_elements, iterations);
  std::printf("| case | ours ms | GB/s | of copy | launches | PyTorch ms | vs PyTorch |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  for (const Case& c : Cases(log2_elements)) {
    Measured measured;
    const double ours = c.run(iterations, stream, &measured);
    const double copy = CopyMs(measured.bytes, iterations, stream);
    const double gbps = static_cast<double>(measured.bytes) / (ours * 1e6);
    const auto it = torch.find(c.name);
    std::printf(
        "| %s | %.3f | %.0f | %.2f | %s | %s | %s |\n", c.name.c_str(), ours, gbps, copy / ours,
        measured.launches.c_str(),
        it == torch.end() ? "-" : std::to_string(it->second).substr(0, 6).c_str(),
        it == torch.end() ? "-" : (std::to_string(it->second / ours).substr(0, 4) + "x").c_str());
    std::fflush(stdout);
  }
  cudaStreamDestroy(stream);
  return 0;
}

}  // namespace
}  // namespace tensorops

int main(int argc, char** argv) { return tensorops::Main(argc, argv); }
