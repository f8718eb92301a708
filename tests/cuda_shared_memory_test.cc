// CUDA shared memory end to end on a real GPU (skipped, with the reason, where none is usable):
// this process is the client. It allocates a GPU buffer, shares it by its IPC handle with a
// tensorops-server it starts with --device=cuda (a handle cannot be opened by the process that
// made it, so the server must be another process), and checks that every op reads its arguments
// from the buffer and writes its result into it with the bytes of the same call sent inline,
// through tensorops.v1 and through KServe as tritonclient sends it; then the refusals: a handle
// that is no handle, a byte_size past the buffer, and the handle of a process that has exited.
//
// The server binary is TENSOROPS_SERVER_PATH from the environment when set (a GPU bundle), else
// the one this build made.
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/cpp/client.h"
#include "client/cpp/shared_memory.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "proto/op_list.h"
#include "tests/child_process.h"
#include "tests/op_cases.h"

#if defined(TENSOROPS_HAVE_CUDA)
#include <cuda_runtime.h>
#endif

namespace tensorops {
namespace {

using ::testing::HasSubstr;

// An exporter child prints its buffer's handle after this and then exits, freeing the buffer.
constexpr char kExportedHandle[] = "exported-handle=";
constexpr char kExportEnv[] = "TENSOROPS_TEST_EXPORT_HANDLE";

#if defined(TENSOROPS_HAVE_CUDA)

constexpr int64_t kBufferBytes = 1 << 20;

std::string ServerPath() {
  const char* from_environment = std::getenv("TENSOROPS_SERVER_PATH");
  return from_environment != nullptr ? from_environment : TENSOROPS_SERVER_PATH;
}

std::string HandleOf(void* buffer) {
  cudaIpcMemHandle_t handle;
  if (cudaIpcGetMemHandle(&handle, buffer) != cudaSuccess) return "";
  return std::string(reinterpret_cast<const char*>(&handle), sizeof(handle));
}

// The Tensor fields of an op request that carry data, by name.
std::vector<const google::protobuf::FieldDescriptor*> DataFields(
    const google::protobuf::Message& op) {
  std::vector<const google::protobuf::FieldDescriptor*> fields, data;
  op.GetReflection()->ListFields(op, &fields);
  for (const google::protobuf::FieldDescriptor* field : fields) {
    if (field->message_type() != v1::Tensor::descriptor()) continue;
    const auto& tensor = static_cast<const v1::Tensor&>(op.GetReflection()->GetMessage(op, field));
    if (!tensor.data().empty()) data.push_back(field);
  }
  return data;
}

class CudaSharedMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    int devices = 0;
    if (const cudaError_t error = cudaGetDeviceCount(&devices);
        error != cudaSuccess || devices == 0) {
      GTEST_SKIP() << "no GPU is usable: "
                   << (error != cudaSuccess ? cudaGetErrorString(error) : "no device");
    }
    absl::StatusOr<std::unique_ptr<testing::ChildProcess>> server = testing::ChildProcess::Spawn(
        {ServerPath(), "--host=127.0.0.1", "--port=0", "--threads=2", "--device=cuda"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    static const std::regex kListening(R"(listening on \S*:(\d+))");
    const std::optional<std::string> port = server_->WaitForMatch(kListening, absl::Seconds(60));
    ASSERT_TRUE(port.has_value()) << server_->stderr_text();
    target_ = absl::StrCat("127.0.0.1:", *port);
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(target_);
    ASSERT_TRUE(client.ok()) << client.status();
    client_ = *std::move(client);
    ASSERT_EQ(cudaMalloc(&buffer_, kBufferBytes), cudaSuccess);
  }
  void TearDown() override {
    client_.reset();
    if (server_ != nullptr) server_->Terminate(absl::Seconds(10));
    if (buffer_ != nullptr) cudaFree(buffer_);
  }

  std::string GpuBytes(int64_t offset, int64_t bytes) const {
    std::string host(static_cast<size_t>(bytes), '\0');
    EXPECT_EQ(cudaMemcpy(host.data(), buffer_ + offset, bytes, cudaMemcpyDeviceToHost),
              cudaSuccess);
    return host;
  }

  std::unique_ptr<testing::ChildProcess> server_;
  std::string target_;
  std::unique_ptr<Client> client_;
  char* buffer_ = nullptr;
};

TEST_F(CudaSharedMemoryTest, EveryOpReadsAndWritesTheClientsGpuBufferInPlace) {
  ASSERT_TRUE(client_->RegisterCudaSharedMemory("gpu", HandleOf(buffer_), 0, kBufferBytes).ok());
  std::mt19937 rng(17);
  for (const testing::Case& c : testing::Cases(rng)) {
    SCOPED_TRACE(std::string(ops::NameOfCase(c.v1.op_case())));
    absl::StatusOr<Tensor> inline_answer = client_->Run(c.v1);
    ASSERT_TRUE(inline_answer.ok()) << inline_answer.status();
    v1::OpRequest request = c.v1;
    google::protobuf::Message* op = nullptr;
    ops::VisitOp(
        request,
        [&]<typename Op>(Op, const typename Op::Request&) { op = ops::Mutable<Op>(&request); },
        [] {});
    int64_t next = 0;
    for (const google::protobuf::FieldDescriptor* field : DataFields(*op)) {
      auto* tensor = static_cast<v1::Tensor*>(op->GetReflection()->MutableMessage(op, field));
      const int64_t bytes = static_cast<int64_t>(tensor->data().size());
      ASSERT_EQ(cudaMemcpy(buffer_ + next, tensor->data().data(), bytes, cudaMemcpyHostToDevice),
                cudaSuccess);
      tensor->clear_data();
      *tensor->mutable_shared_memory() = SharedMemoryRef("gpu", next, bytes);
      next += (bytes + 255) / 256 * 256;
    }
    const int64_t result_bytes = inline_answer->nbytes();
    absl::StatusOr<ResultShape> written =
        client_->RunInto(request, SharedMemoryRef("gpu", next, result_bytes));
    ASSERT_TRUE(written.ok()) << written.status();
    EXPECT_EQ(GpuBytes(next, result_bytes),
              std::string(static_cast<const char*>(inline_answer->data()), result_bytes));
  }
  ASSERT_TRUE(client_->UnregisterSharedMemory("gpu").ok());
}

TEST_F(CudaSharedMemoryTest, KServeReadsAndWritesTheBufferAsTritonClientsSendIt) {
  // What tritonclient's cuda_shared_memory helpers send: CudaSharedMemoryRegister with the raw
  // handle, then inputs and the output named by region parameters.
  auto kserve = inference::GRPCInferenceService::NewStub(
      grpc::CreateChannel(target_, grpc::InsecureChannelCredentials()));
  {
    grpc::ClientContext context;
    inference::CudaSharedMemoryRegisterRequest request;
    request.set_name("triton-gpu");
    request.set_raw_handle(HandleOf(buffer_));
    request.set_device_id(0);
    request.set_byte_size(kBufferBytes);
    inference::CudaSharedMemoryRegisterResponse response;
    const grpc::Status status = kserve->CudaSharedMemoryRegister(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  std::mt19937 rng(19);
  for (const testing::Case& c : testing::Cases(rng)) {
    SCOPED_TRACE(c.kserve.model_name());
    grpc::ClientContext inline_context;
    inference::ModelInferResponse inline_answer;
    ASSERT_TRUE(kserve->ModelInfer(&inline_context, c.kserve, &inline_answer).ok());
    inference::ModelInferRequest request = c.kserve;
    int64_t next = 0;
    for (int i = 0; i < request.inputs_size(); ++i) {
      const std::string& bytes = request.raw_input_contents(i);
      ASSERT_EQ(cudaMemcpy(buffer_ + next, bytes.data(), bytes.size(), cudaMemcpyHostToDevice),
                cudaSuccess);
      auto& parameters = *request.mutable_inputs(i)->mutable_parameters();
      parameters["shared_memory_region"].set_string_param("triton-gpu");
      parameters["shared_memory_byte_size"].set_int64_param(static_cast<int64_t>(bytes.size()));
      parameters["shared_memory_offset"].set_int64_param(next);
      next += (static_cast<int64_t>(bytes.size()) + 255) / 256 * 256;
    }
    request.clear_raw_input_contents();
    const std::string& expected = inline_answer.raw_output_contents(0);
    auto* output = request.add_outputs();
    output->set_name("output");
    auto& parameters = *output->mutable_parameters();
    parameters["shared_memory_region"].set_string_param("triton-gpu");
    parameters["shared_memory_byte_size"].set_int64_param(static_cast<int64_t>(expected.size()));
    parameters["shared_memory_offset"].set_int64_param(next);
    grpc::ClientContext context;
    inference::ModelInferResponse answer;
    const grpc::Status status = kserve->ModelInfer(&context, request, &answer);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(answer.raw_output_contents_size(), 0);
    EXPECT_EQ(GpuBytes(next, static_cast<int64_t>(expected.size())), expected);
  }
}

TEST_F(CudaSharedMemoryTest, BadHandlesAndSizesAreRefusedNamingTheRegion) {
  absl::Status status = client_->RegisterCudaSharedMemory("gpu", std::string(64, '\0'), 0, 4096);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("region \"gpu\": cannot open its CUDA IPC handle"));
  status = client_->RegisterCudaSharedMemory("gpu", HandleOf(buffer_), 0, kBufferBytes * 64);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("fewer than the region's byte_size"));
  // The handle of a buffer whose process has exited.
  setenv(kExportEnv, "1", 1);
  absl::StatusOr<std::unique_ptr<testing::ChildProcess>> exporter =
      testing::ChildProcess::Spawn({"/proc/self/exe", "--gtest_filter=CudaHandleExporter.*"});
  unsetenv(kExportEnv);
  ASSERT_TRUE(exporter.ok());
  static const std::regex kHandle(absl::StrCat(kExportedHandle, "([0-9a-f]+)"));
  const std::optional<std::string> hex = (*exporter)->WaitForMatch(kHandle, absl::Seconds(60));
  ASSERT_TRUE(hex.has_value()) << (*exporter)->stdout_text();
  (*exporter)->WaitForExit(absl::Seconds(30));
  status = client_->RegisterCudaSharedMemory("gone", absl::HexStringToBytes(*hex), 0, 4096);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  // The server goes on.
  EXPECT_TRUE(client_->RegisterCudaSharedMemory("gpu", HandleOf(buffer_), 0, kBufferBytes).ok());
}

// Run by the test above in a child process (kExportEnv set): shares a buffer, prints its handle
// and exits, which frees it. Passes trivially in a plain run of the suite.
TEST(CudaHandleExporter, PrintsAHandleAndExits) {
  if (std::getenv(kExportEnv) == nullptr) GTEST_SKIP() << "run by the refusal test only";
  void* buffer = nullptr;
  ASSERT_EQ(cudaMalloc(&buffer, 4096), cudaSuccess);
  const std::string handle = HandleOf(buffer);
  ASSERT_FALSE(handle.empty());
  std::printf("%s%s\n", kExportedHandle, absl::BytesToHexString(handle).c_str());
  std::fflush(stdout);
}

#else

TEST(CudaSharedMemoryTest, NeedsCuda) { GTEST_SKIP() << "this build has no CUDA"; }

#endif  // TENSOROPS_HAVE_CUDA

}  // namespace
}  // namespace tensorops
