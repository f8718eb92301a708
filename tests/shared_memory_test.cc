// Shared memory (server/shared_memory/, docs/service.md "Shared memory"): the registry and its
// guard against objects that shrink under a mapping, then every op through both protocols with
// each tensor argument and the result in a region, the store through regions, namespaces, bounds
// and limits, through the C++ client against an in-process server.
#include "client/cpp/shared_memory.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/cpp/client.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/reflection.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "proto/op_list.h"
#include "server/server.h"
#include "server/shared_memory/regions.h"
#include "tests/fake_device.h"
#include "tests/op_cases.h"
#include "tests/service_test_util.h"

namespace tensorops {
namespace {

using ::testing::AllOf;
using testing::Cases;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// UniqueKey is a shared-memory object name no other test (or run) uses.
std::string UniqueKey(std::string_view what) {
  static int counter = 0;
  return absl::StrFormat("/tensorops-test-%d-%s-%d", getpid(), what, counter++);
}

v1::SharedMemoryRegion SystemRegion(std::string_view name, const SharedMemoryObject& object,
                                    int64_t offset = 0, int64_t byte_size = -1) {
  v1::SharedMemoryRegion region;
  region.set_name(std::string(name));
  region.mutable_system()->set_key(object.key());
  region.mutable_system()->set_offset(offset);
  region.mutable_system()->set_byte_size(byte_size < 0 ? object.byte_size() - offset : byte_size);
  return region;
}

// Shrink truncates the object `key` to `bytes`, as a misbehaving client would.
void Shrink(const std::string& key, int64_t bytes) {
  const int fd = shm_open(key.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, bytes), 0);
  close(fd);
}

TEST(SharedMemoryRegionsTest, RegistersListsAndUnregistersByNamespace) {
  absl::StatusOr<SharedMemoryObject> object = SharedMemoryObject::Create(UniqueKey("list"), 8192);
  ASSERT_TRUE(object.ok()) << object.status();
  SharedMemoryRegions regions({.max_regions = 4, .max_bytes = 1 << 20});
  ASSERT_TRUE(regions.Register("a", SystemRegion("r1", *object)).ok());
  ASSERT_TRUE(regions.Register("a", SystemRegion("r2", *object, 4096)).ok());
  EXPECT_EQ(regions.Register("a", SystemRegion("r1", *object)).code(),
            absl::StatusCode::kAlreadyExists);
  // The same name in another namespace is another region; neither sees the other's. But not the
  // same object: that would be the other namespace's memory.
  absl::StatusOr<SharedMemoryObject> other = SharedMemoryObject::Create(UniqueKey("list"), 8192);
  ASSERT_TRUE(other.ok()) << other.status();
  const absl::Status taken = regions.Register("b", SystemRegion("r1", *object, 4096));
  EXPECT_EQ(taken.code(), absl::StatusCode::kPermissionDenied) << taken;
  EXPECT_THAT(taken.message(), HasSubstr("is registered by another caller"));
  ASSERT_TRUE(regions.Register("b", SystemRegion("r1", *other)).ok());
  absl::StatusOr<std::vector<v1::SharedMemoryRegion>> listed = regions.List("a", "");
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2u);
  EXPECT_EQ((*listed)[1].system().offset(), 4096);
  EXPECT_EQ((*listed)[1].system().byte_size(), 4096);
  EXPECT_EQ(regions.List("c", "r1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(regions.Find("c", "r1", "gather: input").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(regions.mapped_bytes(), 8192 + 4096 + 8192);
  // Unregistering one kind (as Triton's RPCs do) leaves the other's regions alone.
  EXPECT_EQ(regions.Unregister("a", "r1", RegionKind::kCuda).status().code(),
            absl::StatusCode::kNotFound);
  absl::StatusOr<std::vector<std::string>> no_cuda = regions.Unregister("a", "", RegionKind::kCuda);
  ASSERT_TRUE(no_cuda.ok());
  EXPECT_TRUE(no_cuda->empty());
  EXPECT_EQ(regions.regions(), 3);
  absl::StatusOr<std::vector<std::string>> gone = regions.Unregister("a", "", RegionKind::kSystem);
  ASSERT_TRUE(gone.ok());
  EXPECT_THAT(*gone, ElementsAre("r1", "r2"));
  EXPECT_EQ(regions.Unregister("a", "r1").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(regions.regions(), 1);
  EXPECT_EQ(regions.mapped_bytes(), 8192);
  // Once "a" has let it go, the object is free to register.
  EXPECT_TRUE(regions.Register("b", SystemRegion("r3", *object)).ok());
}

// Registrations that race for a namespace's last places: the limit holds however they interleave
// (each is checked before it maps the object and again when it is added).
TEST(SharedMemoryRegionsTest, RacingRegistrationsStayWithinTheLimit) {
  absl::StatusOr<SharedMemoryObject> object = SharedMemoryObject::Create(UniqueKey("race"), 4096);
  ASSERT_TRUE(object.ok()) << object.status();
  for (int trial = 0; trial < 20; ++trial) {
    SharedMemoryRegions regions({.max_regions = 4, .max_bytes = 1 << 30});
    std::vector<std::thread> threads;
    for (int i = 0; i < 16; ++i) {
      threads.emplace_back(
          [&, i] { (void)regions.Register("a", SystemRegion(absl::StrCat("r", i), *object)); });
    }
    for (std::thread& thread : threads) thread.join();
    ASSERT_EQ(regions.regions(), 4) << "trial " << trial;
    EXPECT_EQ(regions.mapped_bytes(), 4 * 4096);
  }
}

TEST(SharedMemoryRegionsTest, RefusesBadRegionsNamingTheRule) {
  absl::StatusOr<SharedMemoryObject> object = SharedMemoryObject::Create(UniqueKey("bad"), 4096);
  ASSERT_TRUE(object.ok()) << object.status();
  SharedMemoryRegions regions({.max_regions = 2, .max_bytes = 6000});
  absl::Status status = regions.Register("", SystemRegion("r", *object, 0, 4097));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("past the end"));
  v1::SharedMemoryRegion missing = SystemRegion("r", *object);
  missing.mutable_system()->set_key("/tensorops-test-no-such-object");
  EXPECT_EQ(regions.Register("", missing).code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(regions.Register("", SystemRegion("bad name!", *object)).code(),
            absl::StatusCode::kInvalidArgument);
  v1::SharedMemoryRegion neither;
  neither.set_name("n");
  EXPECT_EQ(regions.Register("", neither).code(), absl::StatusCode::kInvalidArgument);
  // Limits name their flags.
  ASSERT_TRUE(regions.Register("", SystemRegion("a", *object)).ok());
  status = regions.Register("", SystemRegion("b", *object));
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("--max_shared_memory_bytes=6000"));
  ASSERT_TRUE(regions.Register("", SystemRegion("b", *object, 0, 100)).ok());
  status = regions.Register("", SystemRegion("c", *object, 0, 100));
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("--max_shared_memory_regions=2"));
  // 0 refuses the first region too.
  SharedMemoryRegions refusing({.max_regions = 0, .max_bytes = 6000});
  status = refusing.Register("", SystemRegion("a", *object));
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(status.message(), HasSubstr("refuses shared memory"));
}

TEST(SharedMemoryRegionsTest, SlicesAreCheckedAgainstTheRegion) {
  absl::StatusOr<SharedMemoryObject> object = SharedMemoryObject::Create(UniqueKey("slice"), 8192);
  ASSERT_TRUE(object.ok()) << object.status();
  SharedMemoryRegions regions({});
  // A region that starts inside a page: its bytes are the object's from the offset on.
  ASSERT_TRUE(regions.Register("", SystemRegion("r", *object, 100, 1000)).ok());
  std::memcpy(object->data() + 100, "abc", 3);
  absl::StatusOr<std::shared_ptr<const MappedRegion>> region = regions.Find("", "r", "test");
  ASSERT_TRUE(region.ok());
  absl::StatusOr<char*> bytes = (*region)->Slice(0, 3, "test");
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(std::string(*bytes, 3), "abc");
  EXPECT_EQ((*region)->Slice(998, 3, "gather: index").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*region)->Slice(-1, 3, "test").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(SharedMemoryRegionsTest, AnObjectShrunkUnderTheMappingFailsItsUseAndNotTheProcess) {
  const std::string key = UniqueKey("shrink");
  absl::StatusOr<SharedMemoryObject> object = SharedMemoryObject::Create(key, 3 * 4096);
  ASSERT_TRUE(object.ok()) << object.status();
  SharedMemoryRegions regions({});
  ASSERT_TRUE(regions.Register("", SystemRegion("r", *object)).ok());
  absl::StatusOr<std::shared_ptr<const MappedRegion>> region = regions.Find("", "r", "test");
  ASSERT_TRUE(region.ok());
  absl::StatusOr<char*> bytes = (*region)->Slice(0, 3 * 4096, "test");
  ASSERT_TRUE(bytes.ok());
  ASSERT_TRUE((*region)->CheckIntact("test").ok());
  // The object shrinks between the check and the access, as a racing client makes it: the
  // server's pages past the end would raise SIGBUS. Touched from another thread, as a kernel's
  // worker would.
  Shrink(key, 4096);
  std::thread reader([&] {
    volatile char* page = *bytes + 2 * 4096;
    page[0] = 1;
    EXPECT_EQ(page[0], 1);  // the zero page that replaced it is writable
  });
  reader.join();
  const absl::Status status = (*region)->CheckIntact("gather: input");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("shrunk"));
  // Growing it back does not make the replaced mapping the client's again. The object has its
  // size then, so the message cannot tell a shrink from a full file system, and names both.
  Shrink(key, 3 * 4096);
  const absl::Status grown = (*region)->CheckIntact("test");
  EXPECT_EQ(grown.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(grown.message(), AllOf(HasSubstr("(SIGBUS)"), HasSubstr("still has its 12288 bytes"),
                                     HasSubstr("out of space"), HasSubstr("shrunk and grown")));
}

// A /dev/shm without room for an object (a container's is 64 MiB unless given more) fails its
// creation with RESOURCE_EXHAUSTED naming the cause, instead of a SIGBUS later in whichever
// process first touches a page without room. Run in a child with a private 1 MiB /dev/shm (a
// mount namespace of its own); skipped where the child may not make one (not root, no
// CAP_SYS_ADMIN).
TEST(SharedMemoryObjectTest, AnObjectDevShmHasNoRoomForFailsAtCreation) {
  // The child's verdict, by exit code.
  enum : int { kPassed = 0, kNoNamespace = 3, kWrongStatus = 4, kCreated = 5 };
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (unshare(CLONE_NEWNS) != 0 ||
        mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") != 0) {
      _exit(kNoNamespace);
    }
    absl::StatusOr<SharedMemoryObject> object =
        SharedMemoryObject::Create(UniqueKey("full"), int64_t{4} << 20);
    if (object.ok()) _exit(kCreated);
    const bool named = object.status().code() == absl::StatusCode::kResourceExhausted &&
                       absl::StrContains(object.status().message(), "/dev/shm has no room");
    _exit(named ? kPassed : kWrongStatus);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << "the child died (signal " << WTERMSIG(status) << ")";
  if (WEXITSTATUS(status) == kNoNamespace) {
    GTEST_SKIP() << "cannot mount a small /dev/shm in a mount namespace here";
  }
  EXPECT_EQ(WEXITSTATUS(status), kPassed)
      << (WEXITSTATUS(status) == kCreated ? "a 4 MiB object was created in a 1 MiB /dev/shm"
                                          : "the error was not RESOURCE_EXHAUSTED naming /dev/shm");
}

TEST(SharedMemoryRegionsTest, AnUnlinkedObjectIsReported) {
  const std::string key = UniqueKey("unlink");
  absl::StatusOr<SharedMemoryObject> object = SharedMemoryObject::Create(key, 4096);
  ASSERT_TRUE(object.ok()) << object.status();
  SharedMemoryRegions regions({});
  ASSERT_TRUE(regions.Register("", SystemRegion("r", *object)).ok());
  ASSERT_EQ(shm_unlink(key.c_str()), 0);
  absl::StatusOr<std::shared_ptr<const MappedRegion>> region = regions.Find("", "r", "test");
  ASSERT_TRUE(region.ok());
  const absl::Status status = (*region)->CheckIntact("test");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("shm_unlink"));
}

TEST(SharedMemoryRegionsTest, UnregisteringARegionInUseUnmapsItWhenTheUseEnds) {
  absl::StatusOr<SharedMemoryObject> object = SharedMemoryObject::Create(UniqueKey("use"), 4096);
  ASSERT_TRUE(object.ok()) << object.status();
  SharedMemoryRegions regions({});
  ASSERT_TRUE(regions.Register("", SystemRegion("r", *object)).ok());
  absl::StatusOr<std::shared_ptr<const MappedRegion>> held = regions.Find("", "r", "test");
  ASSERT_TRUE(held.ok());
  ASSERT_TRUE(regions.Unregister("", "r").ok());
  EXPECT_EQ(regions.Find("", "r", "test").status().code(), absl::StatusCode::kNotFound);
  // The call that holds it still reads and writes it, and its bytes still count.
  object->data()[10] = 42;
  absl::StatusOr<char*> bytes = (*held)->Slice(10, 1, "test");
  ASSERT_TRUE(bytes.ok());
  EXPECT_EQ(**bytes, 42);
  EXPECT_EQ(regions.mapped_bytes(), 4096);
  held->reset();
  EXPECT_EQ(regions.mapped_bytes(), 0);
}

// The service, through both protocols.
class SharedMemoryServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions options;
    options.limits.max_message_bytes = 64 << 20;
    Configure(&options);
    server_ = testing::StartServer(options);
    ASSERT_NE(server_, nullptr);
    absl::StatusOr<std::unique_ptr<Client>> client =
        Client::Create(absl::StrFormat("127.0.0.1:%d", server_->port()));
    ASSERT_TRUE(client.ok());
    client_ = *std::move(client);
    stub_ = testing::Connect(server_->port());
    kserve_ = inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
        absl::StrFormat("127.0.0.1:%d", server_->port()), grpc::InsecureChannelCredentials()));
    absl::StatusOr<SharedMemoryObject> object =
        SharedMemoryObject::Create(UniqueKey("svc"), 1 << 20);
    ASSERT_TRUE(object.ok()) << object.status();
    object_.emplace(*std::move(object));
    ASSERT_TRUE(client_->RegisterSharedMemory("region", object_->key(), object_->byte_size()).ok());
  }

  // Configure lets a fixture change the server's options before it starts.
  virtual void Configure(ServerOptions* /*options*/) {}

  // Place copies `tensor`'s bytes into the region at the next free aligned offset and makes it a
  // reference to them.
  void Place(v1::Tensor* tensor) {
    const int64_t bytes = static_cast<int64_t>(tensor->data().size());
    std::memcpy(object_->data() + next_, tensor->data().data(), bytes);
    tensor->clear_data();
    *tensor->mutable_shared_memory() = SharedMemoryRef("region", next_, bytes);
    next_ += (bytes + 63) / 64 * 64 + 64;
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<v1::TensorOps::Stub> stub_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> kserve_;
  std::optional<SharedMemoryObject> object_;
  int64_t next_ = 0;
};

// The Tensor fields of an op request that carry data, by name.
std::vector<std::string> DataArguments(const google::protobuf::Message& op) {
  std::vector<std::string> names;
  std::vector<const google::protobuf::FieldDescriptor*> fields;
  op.GetReflection()->ListFields(op, &fields);
  for (const google::protobuf::FieldDescriptor* field : fields) {
    if (field->message_type() != v1::Tensor::descriptor()) continue;
    const auto& tensor = static_cast<const v1::Tensor&>(op.GetReflection()->GetMessage(op, field));
    if (!tensor.data().empty()) names.push_back(field->name());
  }
  return names;
}

v1::Tensor* MutableArgument(v1::OpRequest* request, const std::string& name) {
  google::protobuf::Message* op = nullptr;
  ops::VisitOp(
      *request,
      [&]<typename Op>(Op, const typename Op::Request&) { op = ops::Mutable<Op>(request); }, [] {});
  const google::protobuf::FieldDescriptor* field = op->GetDescriptor()->FindFieldByName(name);
  return static_cast<v1::Tensor*>(op->GetReflection()->MutableMessage(op, field));
}

TEST_F(SharedMemoryServiceTest, EveryOpGivesTheSameBytesWithEachArgumentAndTheResultInARegion) {
  std::mt19937 rng(7);
  for (const testing::Case& c : Cases(rng)) {
    const std::string op(ops::NameOfCase(c.v1.op_case()));
    SCOPED_TRACE(op);
    grpc::ClientContext context;
    v1::OpResponse inline_answer;
    ASSERT_TRUE(stub_->Run(&context, c.v1, &inline_answer).ok());
    const google::protobuf::Message* op_message = nullptr;
    ops::VisitOp(
        c.v1, [&]<typename Op>(Op, const typename Op::Request& r) { op_message = &r; }, [] {});
    std::vector<std::string> arguments = DataArguments(*op_message);
    ASSERT_FALSE(arguments.empty());
    // Each argument alone in the region, then all of them with the result there too.
    arguments.push_back("");
    for (const std::string& argument : arguments) {
      SCOPED_TRACE(argument.empty() ? "all, and the result" : argument);
      next_ = 0;
      v1::OpRequest request = c.v1;
      if (!argument.empty()) {
        Place(MutableArgument(&request, argument));
        grpc::ClientContext call;
        v1::OpResponse answer;
        const grpc::Status status = stub_->Run(&call, request, &answer);
        ASSERT_TRUE(status.ok()) << status.error_message();
        EXPECT_EQ(answer.result().data(), inline_answer.result().data());
        EXPECT_THAT(answer.result().shape(),
                    ::testing::ElementsAreArray(inline_answer.result().shape()));
        continue;
      }
      for (const std::string& name : DataArguments(*op_message)) {
        Place(MutableArgument(&request, name));
      }
      const int64_t result_bytes = static_cast<int64_t>(inline_answer.result().data().size());
      const int64_t at = next_;
      std::memset(object_->data() + at, 0x5a, result_bytes + 8);
      absl::StatusOr<ResultShape> written =
          client_->RunInto(request, SharedMemoryRef("region", at, result_bytes + 8));
      ASSERT_TRUE(written.ok()) << written.status();
      EXPECT_EQ(std::string(object_->data() + at, result_bytes), inline_answer.result().data());
      // The bytes after the result are left as they were.
      EXPECT_EQ(object_->data()[at + result_bytes], 0x5a);
      EXPECT_THAT(written->shape, ::testing::ElementsAreArray(inline_answer.result().shape()));
    }
  }
}

// AddOutputInRegion asks for output `name` in `byte_size` bytes of `region` from `offset`, with
// Triton's output parameters.
inference::ModelInferRequest::InferRequestedOutputTensor* AddOutputInRegion(
    const std::string& name, const std::string& region, int64_t offset, int64_t byte_size,
    inference::ModelInferRequest* request) {
  auto* output = request->add_outputs();
  output->set_name(name);
  auto& parameters = *output->mutable_parameters();
  parameters["shared_memory_region"].set_string_param(region);
  parameters["shared_memory_byte_size"].set_int64_param(byte_size);
  parameters["shared_memory_offset"].set_int64_param(offset);
  return output;
}

TEST_F(SharedMemoryServiceTest, KServeInputsAndOutputsInARegionGiveTheInlineBytes) {
  std::mt19937 rng(11);
  for (const testing::Case& c : Cases(rng)) {
    SCOPED_TRACE(c.kserve.model_name());
    grpc::ClientContext context;
    inference::ModelInferResponse inline_answer;
    ASSERT_TRUE(kserve_->ModelInfer(&context, c.kserve, &inline_answer).ok());
    next_ = 0;
    inference::ModelInferRequest request = c.kserve;
    for (int i = 0; i < request.inputs_size(); ++i) {
      const std::string& bytes = request.raw_input_contents(i);
      std::memcpy(object_->data() + next_, bytes.data(), bytes.size());
      auto& parameters = *request.mutable_inputs(i)->mutable_parameters();
      parameters["shared_memory_region"].set_string_param("region");
      parameters["shared_memory_byte_size"].set_int64_param(static_cast<int64_t>(bytes.size()));
      parameters["shared_memory_offset"].set_int64_param(next_);
      next_ += (static_cast<int64_t>(bytes.size()) + 63) / 64 * 64 + 64;
    }
    request.clear_raw_input_contents();
    const std::string& expected = inline_answer.raw_output_contents(0);
    AddOutputInRegion("output", "region", next_, static_cast<int64_t>(expected.size()), &request);
    grpc::ClientContext call;
    inference::ModelInferResponse answer;
    const grpc::Status status = kserve_->ModelInfer(&call, request, &answer);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(answer.raw_output_contents_size(), 0);
    ASSERT_EQ(answer.outputs_size(), 1);
    EXPECT_THAT(answer.outputs(0).shape(),
                ::testing::ElementsAreArray(inline_answer.outputs(0).shape()));
    EXPECT_EQ(std::string(object_->data() + next_, expected.size()), expected);
  }
}

// A backward model's gradient asked for in a region is copied there; the region is found when the
// call is prepared, so a name that is not registered fails the call before it runs.
TEST_F(SharedMemoryServiceTest, KServeGradientsInARegionGiveTheInlineBytes) {
  std::mt19937 rng(13);
  inference::ModelInferRequest request = Cases(rng)[1].kserve;
  ASSERT_EQ(request.model_name(), "scatter");
  request.set_model_name("scatter_backward");
  testing::AddInput("grad_output",
                    testing::MakeTensor<float>({4, 6}, testing::RandomFloats(rng, 24)), &request);
  grpc::ClientContext context;
  inference::ModelInferResponse inline_answer;
  ASSERT_TRUE(kserve_->ModelInfer(&context, request, &inline_answer).ok());
  ASSERT_EQ(inline_answer.outputs(1).name(), "grad_src");
  const std::string& expected = inline_answer.raw_output_contents(1);

  auto* output = AddOutputInRegion("grad_src", "region", 4096,
                                   static_cast<int64_t>(expected.size()), &request);
  std::memset(object_->data() + 4096, 0x5a, expected.size());
  grpc::ClientContext call;
  inference::ModelInferResponse answer;
  const grpc::Status status = kserve_->ModelInfer(&call, request, &answer);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(answer.raw_output_contents_size(), 0);
  ASSERT_EQ(answer.outputs_size(), 1);
  EXPECT_EQ(answer.outputs(0).name(), "grad_src");
  EXPECT_EQ(std::string(object_->data() + 4096, expected.size()), expected);

  (*output->mutable_parameters())["shared_memory_region"].set_string_param("nowhere");
  grpc::ClientContext missing_call;
  testing::ExpectStatus(kserve_->ModelInfer(&missing_call, request, &answer),
                        grpc::StatusCode::NOT_FOUND,
                        "scatter_backward: output \"grad_src\" names shared-memory region "
                        "\"nowhere\", which is not registered");
}

TEST_F(SharedMemoryServiceTest, KServeRegistersListsAndUnregistersAsTritonDoes) {
  absl::StatusOr<SharedMemoryObject> object = SharedMemoryObject::Create(UniqueKey("kserve"), 4096);
  ASSERT_TRUE(object.ok());
  inference::SystemSharedMemoryRegisterRequest request;
  request.set_name("triton");
  request.set_key(object->key());
  request.set_byte_size(4096);
  {
    grpc::ClientContext context;
    inference::SystemSharedMemoryRegisterResponse response;
    ASSERT_TRUE(kserve_->SystemSharedMemoryRegister(&context, request, &response).ok());
  }
  {
    grpc::ClientContext context;
    inference::SystemSharedMemoryStatusResponse response;
    ASSERT_TRUE(kserve_
                    ->SystemSharedMemoryStatus(
                        &context, inference::SystemSharedMemoryStatusRequest(), &response)
                    .ok());
    ASSERT_EQ(response.regions().size(), 2u);  // "region" of SetUp too
    EXPECT_EQ(response.regions().at("triton").key(), object->key());
    EXPECT_EQ(response.regions().at("triton").byte_size(), 4096u);
  }
  {
    // CudaSharedMemoryUnregister leaves a system region of the name alone, as Triton does.
    grpc::ClientContext context;
    inference::CudaSharedMemoryUnregisterRequest cuda;
    cuda.set_name("triton");
    inference::CudaSharedMemoryUnregisterResponse response;
    EXPECT_TRUE(kserve_->CudaSharedMemoryUnregister(&context, cuda, &response).ok());
    absl::StatusOr<std::vector<v1::SharedMemoryRegion>> still = client_->ListSharedMemory();
    ASSERT_TRUE(still.ok());
    EXPECT_EQ(still->size(), 2u);
  }
  {
    // Triton forgets a name it does not know without an error.
    grpc::ClientContext context;
    inference::SystemSharedMemoryUnregisterRequest unknown;
    unknown.set_name("never-registered");
    inference::SystemSharedMemoryUnregisterResponse response;
    EXPECT_TRUE(kserve_->SystemSharedMemoryUnregister(&context, unknown, &response).ok());
  }
  {
    grpc::ClientContext context;
    inference::SystemSharedMemoryUnregisterResponse response;
    ASSERT_TRUE(kserve_
                    ->SystemSharedMemoryUnregister(
                        &context, inference::SystemSharedMemoryUnregisterRequest(), &response)
                    .ok());
  }
  absl::StatusOr<std::vector<v1::SharedMemoryRegion>> left = client_->ListSharedMemory();
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty());
  {
    grpc::ClientContext context;
    inference::CudaSharedMemoryRegisterRequest cuda;
    cuda.set_name("gpu");
    cuda.set_raw_handle(std::string(64, '\0'));
    cuda.set_byte_size(4096);
    inference::CudaSharedMemoryRegisterResponse response;
    const grpc::Status status = kserve_->CudaSharedMemoryRegister(&context, cuda, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(status.error_message(), HasSubstr("CUDA shared memory"));
  }
  {
    grpc::ClientContext context;
    inference::ServerMetadataResponse response;
    ASSERT_TRUE(
        kserve_->ServerMetadata(&context, inference::ServerMetadataRequest(), &response).ok());
    EXPECT_THAT(response.extensions(), ::testing::Contains("system_shared_memory"));
    // Not on a server without a GPU, which cannot open a CUDA region.
    EXPECT_THAT(response.extensions(), ::testing::Not(::testing::Contains("cuda_shared_memory")));
  }
}

// Where the store keeps its tensors in the store tests: in host memory, or on the fake GPU
// (tests/fake_device.h: memory the CPU cannot touch, so every region copy goes through the
// store's device copies). Both with --store_dir, so that a test can recover the store.
enum class StorePlacement { kHost, kFakeDevice };

class SharedMemoryStoreTest : public SharedMemoryServiceTest,
                              public ::testing::WithParamInterface<StorePlacement> {
 protected:
  void Configure(ServerOptions* options) override {
    store_dir_ = absl::StrCat(::testing::TempDir(), "/shared_memory_store_",
                              static_cast<int>(GetParam()), "_", getpid());
    std::filesystem::remove_all(store_dir_);
    options->store.dir = store_dir_;
    options->store.sync = StoreSync::kAlways;
    if (GetParam() == StorePlacement::kFakeDevice) {
      options->gpu.executor_for_testing = &executor_;
      options->store.device = DeviceChoice::kCuda;
    }
    options_ = *options;
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    std::filesystem::remove_all(store_dir_);
  }

  // Recovered starts a second server on a copy of the store's directory as the running server
  // left it, as a crash would (a server that stops writes a snapshot first): its store is
  // rebuilt from the log.
  std::unique_ptr<Server> Recovered() {
    const std::string copy = store_dir_ + "_copy";
    std::filesystem::remove_all(copy);
    std::filesystem::copy(store_dir_, copy);
    ServerOptions options = options_;
    options.store.dir = copy;
    std::unique_ptr<Server> server = testing::StartServer(options);
    std::filesystem::remove_all(copy);
    return server;
  }

  std::string store_dir_;
  ServerOptions options_;
  testing::FakeDeviceMemory device_memory_;
  testing::StagingFakeExecutor executor_{&device_memory_};
};

TEST_P(SharedMemoryStoreTest, TheStoreTakesAndGivesItsBytesThroughARegion) {
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.5f;
  std::memcpy(object_->data(), values.data(), 4000);
  absl::StatusOr<v1::TensorInfo> put = client_->PutTensorFromSharedMemory(
      "table", DataType::kFloat32, {10, 100}, SharedMemoryRef("region", 0, 4000));
  ASSERT_TRUE(put.ok()) << put.status();
  EXPECT_EQ(put->version(), 1);
  absl::StatusOr<Tensor> stored = client_->GetTensor("table");
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(std::memcmp(stored->data(), values.data(), 4000), 0);
  absl::StatusOr<v1::TensorInfo> got =
      client_->GetTensorIntoSharedMemory("table", SharedMemoryRef("region", 8192, 4096));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(got->bytes(), 4000);
  EXPECT_EQ(std::memcmp(object_->data() + 8192, values.data(), 4000), 0);
  // Exactly the tensor's bytes for a put; at least them for a get.
  absl::StatusOr<v1::TensorInfo> short_put = client_->PutTensorFromSharedMemory(
      "other", DataType::kFloat32, {10, 100}, SharedMemoryRef("region", 0, 3996));
  EXPECT_EQ(short_put.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(short_put.status().message(), HasSubstr("byte_size"));
  EXPECT_EQ(client_->GetTensorIntoSharedMemory("table", SharedMemoryRef("region", 0, 100))
                .status()
                .code(),
            absl::StatusCode::kInvalidArgument);
  // A lookup from the stored table with the rows and the result in the region.
  const std::vector<int64_t> rows = {3, 1, 3};
  std::memcpy(object_->data() + 16384, rows.data(), 24);
  v1::OpRequest lookup;
  v1::IndexSelectRequest* select = lookup.mutable_index_select();
  *select->mutable_input() = StoredArgument("table");
  *select->mutable_index() = SharedMemoryArgument("region", 16384, DataType::kInt64, {3});
  absl::StatusOr<ResultShape> written =
      client_->RunInto(lookup, SharedMemoryRef("region", 20480, 1200));
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_THAT(written->shape, ElementsAre(3, 100));
  EXPECT_EQ(std::memcmp(object_->data() + 20480, values.data() + 300, 400), 0);
  EXPECT_EQ(std::memcmp(object_->data() + 20480 + 400, values.data() + 100, 400), 0);
}

// InPlaceSumFromTheRegion is a scatter SUM into stored "acc" in place of `n` float32 values at
// offset 64 of "region", at the int64 rows at its offset 0.
v1::OpRequest InPlaceSumFromTheRegion(int64_t n) {
  v1::OpRequest push;
  v1::ScatterRequest* scatter = push.mutable_scatter();
  *scatter->mutable_input() = StoredArgument("acc");
  *scatter->mutable_index() = SharedMemoryArgument("region", 0, DataType::kInt64, {n});
  *scatter->mutable_src() = SharedMemoryArgument("region", 64, DataType::kFloat32, {n});
  scatter->set_reduce(v1::REDUCTION_SUM);
  scatter->mutable_result_options()->set_in_place(true);
  return push;
}

TEST_P(SharedMemoryStoreTest, AnInPlaceUpdateReadsItsRegionArgumentsOnce) {
  std::vector<float> zeros(8, 0.0f);
  ASSERT_TRUE(client_->PutTensor("acc", TensorView(DataType::kFloat32, {8}, zeros.data())).ok());
  const std::vector<int64_t> index = {1, 1, 5};
  const std::vector<float> src = {1.0f, 2.0f, 4.0f};
  std::memcpy(object_->data(), index.data(), 24);
  std::memcpy(object_->data() + 64, src.data(), 12);
  const v1::OpRequest push = InPlaceSumFromTheRegion(3);
  ASSERT_TRUE(client_->RunStored(push).ok());
  absl::StatusOr<Tensor> acc = client_->GetTensor("acc");
  ASSERT_TRUE(acc.ok());
  const float* values = static_cast<const float*>(acc->data());
  EXPECT_EQ(values[1], 3.0f);
  EXPECT_EQ(values[5], 4.0f);
}

// The durable store's log records an in-place update's region arguments inline (the region may
// change or go away after the call): recovery replays the update to the same bytes, with the
// region changed and the new server knowing no region at all.
TEST_P(SharedMemoryStoreTest, AnInPlaceUpdateFromRegionsIsReplayedAtRecovery) {
  const std::vector<float> start = {0.5f, 0, 0, 0, 0, 0, 0, 0};
  ASSERT_TRUE(client_->PutTensor("acc", TensorView(DataType::kFloat32, {8}, start.data())).ok());
  const std::vector<int64_t> index = {1, 1, 5, 0};
  const std::vector<float> src = {1.0f, 2.0f, 4.0f, 0.25f};
  std::memcpy(object_->data(), index.data(), 32);
  std::memcpy(object_->data() + 64, src.data(), 16);
  const v1::OpRequest push = InPlaceSumFromTheRegion(4);
  ASSERT_TRUE(client_->RunStored(push).ok());
  // A second push from other bytes at the same place in the region.
  const std::vector<float> src2 = {10.0f, 20.0f, 40.0f, 80.0f};
  std::memcpy(object_->data() + 64, src2.data(), 16);
  ASSERT_TRUE(client_->RunStored(push).ok());
  absl::StatusOr<Tensor> acc = client_->GetTensor("acc");
  ASSERT_TRUE(acc.ok()) << acc.status();
  const std::vector<float> expected = {80.75f, 33.0f, 0, 0, 0, 44.0f, 0, 0};
  ASSERT_EQ(std::memcmp(acc->data(), expected.data(), 32), 0);
  // What a replay reading the region now would see: none of the pushes' bytes.
  std::memset(object_->data(), 0x7f, 128);

  std::unique_ptr<Server> recovered = Recovered();
  ASSERT_NE(recovered, nullptr);
  absl::StatusOr<std::unique_ptr<Client>> connected =
      Client::Create(absl::StrFormat("127.0.0.1:%d", recovered->port()));
  ASSERT_TRUE(connected.ok()) << connected.status();
  Client* client = connected->get();
  absl::StatusOr<Tensor> replayed = client->GetTensor("acc");
  ASSERT_TRUE(replayed.ok()) << replayed.status();
  EXPECT_EQ(std::memcmp(replayed->data(), expected.data(), 32), 0);
  absl::StatusOr<v1::TensorInfo> info = client->TensorInfo("acc");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->version(), 3);
  absl::StatusOr<std::vector<v1::SharedMemoryRegion>> regions = client->ListSharedMemory();
  ASSERT_TRUE(regions.ok()) << regions.status();
  EXPECT_TRUE(regions->empty());
}

INSTANTIATE_TEST_SUITE_P(Placements, SharedMemoryStoreTest,
                         ::testing::Values(StorePlacement::kHost, StorePlacement::kFakeDevice),
                         [](const ::testing::TestParamInfo<StorePlacement>& info) {
                           return info.param == StorePlacement::kHost ? "Host" : "FakeDevice";
                         });

// CUDA regions, on the fake GPU (tests/fake_device.h): a client's GPU buffer, opened by its IPC
// handle in the executor's device memory. The fake executor checks what a real one would read in
// place (resident inputs and results must be device memory, and nothing of a resident input is
// staged) and then fails every call, so the server's CPU fallback computes through host copies
// of the region: both paths run on every call.
class CudaRegionTest : public SharedMemoryServiceTest {
 protected:
  static constexpr int64_t kBufferBytes = 1 << 20;

  void Configure(ServerOptions* options) override {
    options->gpu.executor_for_testing = &executor_;
    options->device = DeviceChoice::kCuda;
    buffer_ = static_cast<char*>(device_memory_.Allocate(kBufferBytes));
  }
  void TearDown() override {
    client_.reset();
    server_.reset();
    device_memory_.Free(buffer_, kBufferBytes);
  }

  // Handle is the IPC handle of the "client's" GPU buffer.
  std::string Handle() const { return testing::FakeDeviceMemory::IpcHandle(buffer_, kBufferBytes); }

  // PlaceOnGpu copies `tensor`'s bytes into the GPU buffer at the next free aligned offset and
  // makes it a reference to them in region "gpu".
  void PlaceOnGpu(v1::Tensor* tensor) {
    const int64_t bytes = static_cast<int64_t>(tensor->data().size());
    ASSERT_TRUE(device_memory_.CopyFromHost(buffer_ + next_, tensor->data().data(), bytes).ok());
    tensor->clear_data();
    *tensor->mutable_shared_memory() = SharedMemoryRef("gpu", next_, bytes);
    next_ += (bytes + 63) / 64 * 64 + 64;
  }
  std::string GpuBytes(int64_t offset, int64_t bytes) const {
    std::string host(static_cast<size_t>(bytes), '\0');
    EXPECT_TRUE(device_memory_.CopyToHost(host.data(), buffer_ + offset, bytes).ok());
    return host;
  }

  testing::FakeDeviceMemory device_memory_;
  testing::StagingFakeExecutor executor_{&device_memory_};
  char* buffer_ = nullptr;
};

TEST_F(CudaRegionTest, EveryOpReadsItsArgumentsAndWritesItsResultInTheGpuBuffer) {
  ASSERT_TRUE(client_->RegisterCudaSharedMemory("gpu", Handle(), 0, kBufferBytes).ok());
  EXPECT_EQ(device_memory_.ipc_open(), 1);
  absl::StatusOr<std::vector<v1::SharedMemoryRegion>> listed = client_->ListSharedMemory();
  ASSERT_TRUE(listed.ok());
  ASSERT_EQ(listed->size(), 2);
  EXPECT_EQ((*listed)[0].name(), "gpu");
  EXPECT_EQ((*listed)[0].cuda().byte_size(), kBufferBytes);
  std::mt19937 rng(13);
  int64_t resident_calls = 0;
  for (const testing::Case& c : Cases(rng)) {
    const std::string op(ops::NameOfCase(c.v1.op_case()));
    SCOPED_TRACE(op);
    grpc::ClientContext context;
    v1::OpResponse inline_answer;
    ASSERT_TRUE(stub_->Run(&context, c.v1, &inline_answer).ok());
    executor_.TakeSeen();
    const google::protobuf::Message* op_message = nullptr;
    ops::VisitOp(
        c.v1, [&]<typename Op>(Op, const typename Op::Request& r) { op_message = &r; }, [] {});
    next_ = 0;
    v1::OpRequest request = c.v1;
    for (const std::string& name : DataArguments(*op_message)) {
      PlaceOnGpu(MutableArgument(&request, name));
    }
    const int64_t result_bytes = static_cast<int64_t>(inline_answer.result().data().size());
    const std::string marks(static_cast<size_t>(result_bytes + 8), '\x5a');
    ASSERT_TRUE(device_memory_.CopyFromHost(buffer_ + next_, marks.data(), result_bytes + 8).ok());
    absl::StatusOr<ResultShape> written =
        client_->RunInto(request, SharedMemoryRef("gpu", next_, result_bytes + 8));
    ASSERT_TRUE(written.ok()) << written.status();
    EXPECT_EQ(GpuBytes(next_, result_bytes), inline_answer.result().data());
    EXPECT_EQ(GpuBytes(next_ + result_bytes, 1), "\x5a");
    EXPECT_THAT(written->shape, ::testing::ElementsAreArray(inline_answer.result().shape()));
    // What the device saw: the buffer's bytes where they are; from the host at most a scalar
    // argument (scatter's value), never a tensor's bytes.
    for (const testing::StagingFakeExecutor::Seen& seen : executor_.TakeSeen()) {
      EXPECT_LE(seen.staged_bytes, 16);
      EXPECT_TRUE(seen.all_resident_in_memory);
      EXPECT_TRUE(seen.resident_result);
      resident_calls += seen.resident_bytes > 0 ? 1 : 0;
    }
  }
  EXPECT_GT(resident_calls, 10);
  ASSERT_TRUE(client_->UnregisterSharedMemory("gpu").ok());
  EXPECT_EQ(device_memory_.ipc_open(), 0);
}

TEST_F(CudaRegionTest, ARegionIsRefusedForABadHandleOrABufferSmallerThanItsSize) {
  absl::Status status =
      client_->RegisterCudaSharedMemory("gpu", std::string(64, '\1'), 0, kBufferBytes);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("region \"gpu\": cannot open its CUDA IPC handle"));
  status = client_->RegisterCudaSharedMemory("gpu", Handle(), 0, kBufferBytes + 1);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("fewer than byte_size"));
  status = client_->RegisterCudaSharedMemory("gpu", Handle(), 0, 0);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("byte_size >= 1"));
  EXPECT_EQ(device_memory_.ipc_open(), 0);
  // A slice past the region's end is refused when used.
  ASSERT_TRUE(client_->RegisterCudaSharedMemory("gpu", Handle(), 0, 4096).ok());
  v1::OpRequest request;
  v1::GatherRequest* gather = request.mutable_gather();
  *gather->mutable_input() = SharedMemoryArgument("gpu", 4000, DataType::kFloat32, {100});
  *gather->mutable_index() = SharedMemoryArgument("gpu", 0, DataType::kInt64, {10});
  grpc::ClientContext context;
  v1::OpResponse answer;
  const grpc::Status outside = stub_->Run(&context, request, &answer);
  EXPECT_EQ(outside.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(outside.error_message(), HasSubstr("outside CUDA shared-memory region \"gpu\""));
}

TEST_F(CudaRegionTest, TheStoreAndKServeUseTheGpuBuffer) {
  ASSERT_TRUE(client_->RegisterCudaSharedMemory("gpu", Handle(), 0, kBufferBytes).ok());
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i) * 0.25f;
  ASSERT_TRUE(device_memory_.CopyFromHost(buffer_, values.data(), 4000).ok());
  absl::StatusOr<v1::TensorInfo> put = client_->PutTensorFromSharedMemory(
      "table", DataType::kFloat32, {10, 100}, SharedMemoryRef("gpu", 0, 4000));
  ASSERT_TRUE(put.ok()) << put.status();
  absl::StatusOr<Tensor> stored = client_->GetTensor("table");
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(std::memcmp(stored->data(), values.data(), 4000), 0);
  absl::StatusOr<v1::TensorInfo> got =
      client_->GetTensorIntoSharedMemory("table", SharedMemoryRef("gpu", 8192, 4096));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(GpuBytes(8192, 4000), std::string(reinterpret_cast<const char*>(values.data()), 4000));
  // A lookup with its rows and its result in the GPU buffer.
  const std::vector<int64_t> rows = {3, 1, 3};
  ASSERT_TRUE(device_memory_.CopyFromHost(buffer_ + 16384, rows.data(), 24).ok());
  executor_.TakeSeen();
  v1::OpRequest lookup;
  v1::IndexSelectRequest* select = lookup.mutable_index_select();
  *select->mutable_input() = StoredArgument("table");
  *select->mutable_index() = SharedMemoryArgument("gpu", 16384, DataType::kInt64, {3});
  absl::StatusOr<ResultShape> written =
      client_->RunInto(lookup, SharedMemoryRef("gpu", 20480, 1200));
  ASSERT_TRUE(written.ok()) << written.status();
  const char* table = reinterpret_cast<const char*>(values.data());
  EXPECT_EQ(GpuBytes(20480, 1200), std::string(table + 1200, 400) + std::string(table + 400, 400) +
                                       std::string(table + 1200, 400));
  // The table is in the store's host memory: the lookup ran on the CPU, which copied the rows out
  // of the GPU buffer, instead of the GPU copying the whole table in.
  EXPECT_THAT(executor_.TakeSeen(), ::testing::IsEmpty());
  // The same lookup through KServe, as tritonclient's cuda_shared_memory helpers send it.
  {
    grpc::ClientContext context;
    inference::ServerMetadataResponse response;
    ASSERT_TRUE(
        kserve_->ServerMetadata(&context, inference::ServerMetadataRequest(), &response).ok());
    EXPECT_THAT(response.extensions(), ::testing::Contains("cuda_shared_memory"));
  }
  {
    grpc::ClientContext context;
    inference::CudaSharedMemoryStatusRequest request;
    inference::CudaSharedMemoryStatusResponse response;
    ASSERT_TRUE(kserve_->CudaSharedMemoryStatus(&context, request, &response).ok());
    ASSERT_TRUE(response.regions().contains("gpu"));
    EXPECT_EQ(response.regions().at("gpu").byte_size(), static_cast<uint64_t>(kBufferBytes));
  }
  inference::ModelInferRequest infer;
  infer.set_model_name("index_select");
  auto add_input = [&](const std::string& name, const std::string& datatype,
                       std::vector<int64_t> shape, int64_t offset, int64_t bytes) {
    auto* input = infer.add_inputs();
    input->set_name(name);
    input->set_datatype(datatype);
    for (int64_t d : shape) input->add_shape(d);
    auto& parameters = *input->mutable_parameters();
    parameters["shared_memory_region"].set_string_param("gpu");
    parameters["shared_memory_byte_size"].set_int64_param(bytes);
    parameters["shared_memory_offset"].set_int64_param(offset);
  };
  add_input("input", "FP32", {10, 100}, 0, 4000);
  add_input("index", "INT64", {3}, 16384, 24);
  auto* output = infer.add_outputs();
  output->set_name("output");
  (*output->mutable_parameters())["shared_memory_region"].set_string_param("gpu");
  (*output->mutable_parameters())["shared_memory_byte_size"].set_int64_param(1200);
  (*output->mutable_parameters())["shared_memory_offset"].set_int64_param(32768);
  grpc::ClientContext context;
  inference::ModelInferResponse answer;
  const grpc::Status status = kserve_->ModelInfer(&context, infer, &answer);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(answer.raw_output_contents_size(), 0);
  EXPECT_EQ(GpuBytes(32768, 1200), GpuBytes(20480, 1200));
  // Unregistering through KServe closes the handle.
  grpc::ClientContext unregister_context;
  inference::CudaSharedMemoryUnregisterRequest unregister;
  unregister.set_name("gpu");
  inference::CudaSharedMemoryUnregisterResponse unregistered;
  ASSERT_TRUE(
      kserve_->CudaSharedMemoryUnregister(&unregister_context, unregister, &unregistered).ok());
  EXPECT_EQ(device_memory_.ipc_open(), 0);
}

// ScatterSum is a scatter SUM of `src` into `input` at `index`.
v1::OpRequest ScatterSum(v1::Tensor input, v1::Tensor index, v1::Tensor src) {
  v1::OpRequest request;
  v1::ScatterRequest* scatter = request.mutable_scatter();
  *scatter->mutable_input() = std::move(input);
  *scatter->mutable_index() = std::move(index);
  *scatter->mutable_src() = std::move(src);
  scatter->set_reduce(v1::REDUCTION_SUM);
  return request;
}

TEST_F(CudaRegionTest, AnInPlaceUpdateTakesItsArgumentsFromTheGpuBuffer) {
  ASSERT_TRUE(client_->RegisterCudaSharedMemory("gpu", Handle(), 0, kBufferBytes).ok());
  Tensor zeros(DataType::kFloat32, std::vector<int64_t>{4});
  std::memset(zeros.data(), 0, zeros.nbytes());
  ASSERT_TRUE(client_->PutTensor("acc", zeros.view()).ok());
  const std::vector<int64_t> rows = {1, 3, 1};
  const std::vector<float> values = {1.5f, 2.0f, 0.25f};
  ASSERT_TRUE(device_memory_.CopyFromHost(buffer_, rows.data(), 24).ok());
  ASSERT_TRUE(device_memory_.CopyFromHost(buffer_ + 64, values.data(), 12).ok());
  v1::OpRequest push =
      ScatterSum(StoredArgument("acc"), SharedMemoryArgument("gpu", 0, DataType::kInt64, {3}),
                 SharedMemoryArgument("gpu", 64, DataType::kFloat32, {3}));
  push.mutable_scatter()->mutable_result_options()->set_in_place(true);
  const auto pushed = client_->RunStored(push);
  ASSERT_TRUE(pushed.ok()) << pushed.status();
  absl::StatusOr<Tensor> acc = client_->GetTensor("acc");
  ASSERT_TRUE(acc.ok());
  const float* sums = static_cast<const float*>(acc->data());
  EXPECT_EQ(sums[0], 0.0f);
  EXPECT_EQ(sums[1], 1.75f);
  EXPECT_EQ(sums[2], 0.0f);
  EXPECT_EQ(sums[3], 2.0f);
}

TEST_F(CudaRegionTest, ArgumentsThatOverlapInTheGpuBufferAreReadWhereTheyAre) {
  ASSERT_TRUE(client_->RegisterCudaSharedMemory("gpu", Handle(), 0, kBufferBytes).ok());
  // input is floats [0, 32) of the buffer, src [24, 40): the call reads [0, 40) as one span,
  // which lies in neither argument alone.
  std::vector<float> floats(10);
  for (size_t i = 0; i < floats.size(); ++i) floats[i] = static_cast<float>(i) + 0.5f;
  const std::vector<int64_t> rows = {7, 0, 7};
  ASSERT_TRUE(device_memory_.CopyFromHost(buffer_, floats.data(), 40).ok());
  ASSERT_TRUE(device_memory_.CopyFromHost(buffer_ + 256, rows.data(), 24).ok());
  const v1::OpRequest in_region =
      ScatterSum(SharedMemoryArgument("gpu", 0, DataType::kFloat32, {8}),
                 SharedMemoryArgument("gpu", 256, DataType::kInt64, {3}),
                 SharedMemoryArgument("gpu", 24, DataType::kFloat32, {3}));
  absl::StatusOr<Tensor> answer = client_->Run(in_region);
  ASSERT_TRUE(answer.ok()) << answer.status();
  const std::vector<float> expected = {0.5f + 7.5f, 1.5f, 2.5f, 3.5f,
                                       4.5f,        5.5f, 6.5f, 7.5f + 6.5f + 8.5f};
  ASSERT_EQ(answer->nbytes(), 32);
  EXPECT_EQ(std::memcmp(answer->data(), expected.data(), 32), 0);
  for (const testing::StagingFakeExecutor::Seen& seen : executor_.TakeSeen()) {
    EXPECT_EQ(seen.staged_bytes, 0);
    EXPECT_TRUE(seen.all_resident_in_memory);
  }
}

TEST_F(SharedMemoryServiceTest, BadReferencesAreRefusedNamingTheArgumentAndTheRule) {
  v1::OpRequest request;
  v1::GatherRequest* gather = request.mutable_gather();
  *gather->mutable_input() = SharedMemoryArgument("region", 0, DataType::kFloat32, {4, 4});
  *gather->mutable_index() = SharedMemoryArgument("region", 64, DataType::kInt64, {4, 4});
  std::memset(object_->data(), 0, 256);
  const auto run = [&](const v1::OpRequest& r) {
    grpc::ClientContext context;
    v1::OpResponse response;
    return stub_->Run(&context, r, &response);
  };
  ASSERT_TRUE(run(request).ok());
  v1::OpRequest outside = request;
  outside.mutable_gather()->mutable_input()->mutable_shared_memory()->set_offset((1 << 20) - 32);
  testing::ExpectStatus(run(outside), grpc::StatusCode::INVALID_ARGUMENT,
                        "gather: input: offset 1048544 + byte_size 64 is outside");
  v1::OpRequest wrong_size = request;
  wrong_size.mutable_gather()->mutable_index()->mutable_shared_memory()->set_byte_size(100);
  testing::ExpectStatus(run(wrong_size), grpc::StatusCode::INVALID_ARGUMENT,
                        "gather: index is int64 [4, 4], 128 bytes, but its shared_memory.byte_size "
                        "is 100");
  v1::OpRequest unaligned = request;
  unaligned.mutable_gather()->mutable_index()->mutable_shared_memory()->set_offset(4);
  testing::ExpectStatus(run(unaligned), grpc::StatusCode::INVALID_ARGUMENT,
                        "not a multiple of its item size");
  v1::OpRequest unknown = request;
  unknown.mutable_gather()->mutable_input()->mutable_shared_memory()->set_region("nope");
  testing::ExpectStatus(run(unknown), grpc::StatusCode::NOT_FOUND,
                        "gather: input names shared-memory region \"nope\", which is not "
                        "registered");
  v1::OpRequest no_dtype = request;
  no_dtype.mutable_gather()->mutable_input()->clear_dtype();
  testing::ExpectStatus(run(no_dtype), grpc::StatusCode::INVALID_ARGUMENT, "has no dtype");
  v1::OpRequest small_result = request;
  *small_result.mutable_gather()->mutable_result_options()->mutable_shared_memory() =
      SharedMemoryRef("region", 4096, 8);
  testing::ExpectStatus(run(small_result), grpc::StatusCode::INVALID_ARGUMENT,
                        "smaller than the result");
  v1::OpRequest both = small_result;
  both.mutable_gather()->mutable_result_options()->set_return_data(true);
  testing::ExpectStatus(run(both), grpc::StatusCode::INVALID_ARGUMENT, "are exclusive");

  // A result over an argument's bytes: in the argument's region, and through a second region of
  // the same object (another name, another mapping, the same memory). Right after the argument's
  // bytes is apart, and runs.
  v1::OpRequest overlapping = request;
  *overlapping.mutable_gather()->mutable_result_options()->mutable_shared_memory() =
      SharedMemoryRef("region", 32, 64);
  testing::ExpectStatus(run(overlapping), grpc::StatusCode::INVALID_ARGUMENT,
                        "gather: result_options.shared_memory: the result's bytes [32, 96) of "
                        "region \"region\" share memory with input, bytes [0, 64) of region "
                        "\"region\"");
  ASSERT_TRUE(
      client_->RegisterSharedMemory("alias", object_->key(), 4096, /*offset=*/4096 * 2).ok());
  v1::OpRequest aliased = request;
  aliased.mutable_gather()->mutable_index()->mutable_shared_memory()->set_offset(8192 + 256);
  *aliased.mutable_gather()->mutable_result_options()->mutable_shared_memory() =
      SharedMemoryRef("alias", 256, 64);
  testing::ExpectStatus(run(aliased), grpc::StatusCode::INVALID_ARGUMENT,
                        "share memory with index");
  v1::OpRequest apart = request;
  *apart.mutable_gather()->mutable_result_options()->mutable_shared_memory() =
      SharedMemoryRef("region", 192, 64);
  EXPECT_TRUE(run(apart).ok());
}

TEST_F(SharedMemoryServiceTest, AShrunkObjectFailsTheCallAndTheServerGoesOn) {
  v1::OpRequest request;
  v1::GatherRequest* gather = request.mutable_gather();
  std::memset(object_->data(), 0, 4096);
  *gather->mutable_input() = SharedMemoryArgument("region", 512 << 10, DataType::kFloat32, {4, 4});
  *gather->mutable_index() = SharedMemoryArgument("region", 0, DataType::kInt64, {4, 4});
  Shrink(object_->key(), 4096);
  grpc::ClientContext context;
  v1::OpResponse response;
  testing::ExpectStatus(stub_->Run(&context, request, &response),
                        grpc::StatusCode::FAILED_PRECONDITION, "was shrunk by its owner");
  // The server serves the next call.
  absl::StatusOr<std::vector<v1::SharedMemoryRegion>> listed = client_->ListSharedMemory();
  ASSERT_TRUE(listed.ok());
  EXPECT_EQ(listed->size(), 1u);
}

TEST(SharedMemoryNamespaceTest, AnotherTokenCannotSeeOrUseARegion) {
  const std::string token_file = ::testing::TempDir() + "/shared_memory_test_tokens";
  {
    std::FILE* file = std::fopen(token_file.c_str(), "w");
    ASSERT_NE(file, nullptr);
    std::fputs("alice-token\nbob-token\n", file);
    std::fclose(file);
  }
  ServerOptions options;
  options.security.auth_token_file = token_file;
  std::unique_ptr<Server> server = testing::StartServer(options);
  ASSERT_NE(server, nullptr);
  const std::string target = absl::StrFormat("127.0.0.1:%d", server->port());
  absl::StatusOr<std::unique_ptr<Client>> alice =
      Client::Create(target, {.auth_token = "alice-token"});
  absl::StatusOr<std::unique_ptr<Client>> bob = Client::Create(target, {.auth_token = "bob-token"});
  ASSERT_TRUE(alice.ok() && bob.ok());
  absl::StatusOr<SharedMemoryObject> object = SharedMemoryObject::Create(UniqueKey("ns"), 4096);
  ASSERT_TRUE(object.ok());
  ASSERT_TRUE((*alice)->RegisterSharedMemory("mine", object->key(), 4096).ok());
  absl::StatusOr<std::vector<v1::SharedMemoryRegion>> seen = (*bob)->ListSharedMemory();
  ASSERT_TRUE(seen.ok());
  EXPECT_TRUE(seen->empty());
  v1::OpRequest request;
  *request.mutable_gather()->mutable_input() =
      SharedMemoryArgument("mine", 0, DataType::kFloat32, {2});
  *request.mutable_gather()->mutable_index() =
      SharedMemoryArgument("mine", 64, DataType::kInt64, {2});
  EXPECT_EQ((*bob)->Run(request).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE((*alice)->Run(request).ok());
  EXPECT_EQ((*bob)->UnregisterSharedMemory("mine").status().code(), absl::StatusCode::kNotFound);
  // Nor can another token reach the memory by registering the same object under a name of its
  // own: the key names an object of the host's, not of the caller's namespace.
  const absl::Status stolen = (*bob)->RegisterSharedMemory("stolen", object->key(), 4096);
  EXPECT_EQ(stolen.code(), absl::StatusCode::kPermissionDenied) << stolen;
  EXPECT_THAT(stolen.message(), HasSubstr("is registered by another caller"));
}

TEST(SharedMemoryLimitsTest, TheFlagsAreValidatedAtStartUp) {
  ServerOptions options;
  options.limits.max_memory_bytes = 1 << 20;
  options.shared_memory.max_bytes = 2 << 20;
  const absl::Status status = ValidateServerOptions(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("--max_shared_memory_bytes=2097152 is above"));
  options.shared_memory.max_bytes = 0;
  options.shared_memory.max_regions = -1;
  EXPECT_THAT(ValidateServerOptions(options).message(), HasSubstr("--max_shared_memory_regions"));
}

}  // namespace
}  // namespace tensorops
