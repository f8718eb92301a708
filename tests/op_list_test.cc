// The op table's wire half (proto/op_list.h) against the proto descriptors: every alternative of
// OpRequest has one entry, in order, and every entry has its RPC; the names are the descriptors'.
#include "proto/op_list.h"

#include <set>
#include <string>
#include <vector>

#include "google/protobuf/descriptor.h"
#include "gtest/gtest.h"
#include "tensorops/v1/service.grpc.pb.h"

namespace tensorops {
namespace {

const google::protobuf::ServiceDescriptor& Service() {
  return *google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
      v1::TensorOps::service_full_name());
}

TEST(OpListTest, EveryOpRequestAlternativeHasOneEntryInOrder) {
  const google::protobuf::OneofDescriptor* oneof = v1::OpRequest::descriptor()->oneof_decl(0);
  std::vector<int> listed;
  ops::ForEachOp([&]<typename Op>(Op) { listed.push_back(Op::kCase); });
  ASSERT_EQ(static_cast<int>(listed.size()), oneof->field_count());
  for (int i = 0; i < oneof->field_count(); ++i) {
    EXPECT_EQ(listed[i], oneof->field(i)->number()) << oneof->field(i)->name();
  }
}

TEST(OpListTest, EntriesMatchTheirFieldAndRpc) {
  std::set<std::string> names;
  ops::ForEachOp([&]<typename Op>(Op) {
    const google::protobuf::FieldDescriptor* field =
        v1::OpRequest::descriptor()->FindFieldByNumber(Op::kCase);
    ASSERT_NE(field, nullptr);
    SCOPED_TRACE(field->name());
    EXPECT_EQ(field->message_type(), Op::Request::descriptor());
    EXPECT_EQ(ops::Name<Op>(), field->name());
    names.insert(std::string(ops::Name<Op>()));

    const google::protobuf::MethodDescriptor* method =
        Service().FindMethodByName(std::string(ops::Rpc<Op>()));
    ASSERT_NE(method, nullptr) << "no RPC takes " << Op::Request::descriptor()->full_name();
    EXPECT_EQ(method->input_type(), Op::Request::descriptor());
    EXPECT_EQ(method->output_type(), Op::Response::descriptor());
    EXPECT_FALSE(method->client_streaming() || method->server_streaming());
  });
  EXPECT_EQ(names.size(), 10u);
  EXPECT_EQ(ops::Name<ops::GatherNd>(), "gather_nd");
  EXPECT_EQ(ops::Rpc<ops::GatherNd>(), "GatherNd");
  EXPECT_EQ(ops::NameOfCase(v1::OpRequest::OP_NOT_SET), "");
  EXPECT_EQ(ops::RpcOfCase(v1::OpRequest::OP_NOT_SET), "");
}

TEST(OpListTest, EveryTypedRpcIsAnOp) {
  // The service's methods other than the generic, the store and the shared-memory ones are
  // exactly the ops' RPCs.
  std::set<std::string> rpcs;
  ops::ForEachOp([&]<typename Op>(Op) { rpcs.insert(std::string(ops::Rpc<Op>())); });
  const std::set<std::string> generic = {"Run",
                                         "RunStream",
                                         "Backward",
                                         "ServerInfo",
                                         "PutTensor",
                                         "GetTensor",
                                         "DeleteTensor",
                                         "ListTensors",
                                         "TensorInfo",
                                         "SnapshotStore",
                                         "RegisterSharedMemory",
                                         "UnregisterSharedMemory",
                                         "ListSharedMemory"};
  for (int i = 0; i < Service().method_count(); ++i) {
    const std::string& name = Service().method(i)->name();
    EXPECT_TRUE(rpcs.contains(name) || generic.contains(name)) << name;
  }
  EXPECT_EQ(static_cast<int>(rpcs.size() + generic.size()), Service().method_count());
}

// The server reads every request's `input` and `result_options` (server/core/prepared_op.cc); a new
// op's request must have both, at the same numbers for result_options.
TEST(OpListTest, EveryRequestHasAnInputAndResultOptionsAtFifteen) {
  ops::ForEachOp([&]<typename Op>(Op) {
    const google::protobuf::Descriptor* request = Op::Request::descriptor();
    SCOPED_TRACE(request->name());
    const google::protobuf::FieldDescriptor* options = request->FindFieldByName("result_options");
    ASSERT_NE(options, nullptr);
    EXPECT_EQ(options->number(), 15);
    EXPECT_EQ(options->message_type(), v1::ResultOptions::descriptor());
    const google::protobuf::FieldDescriptor* input = request->FindFieldByName("input");
    ASSERT_NE(input, nullptr);
    EXPECT_EQ(input->message_type(), v1::Tensor::descriptor());
  });
}

TEST(OpListTest, MutableGetAndVisitRoundTrip) {
  ops::ForEachOp([&]<typename Op>(Op) {
    v1::OpRequest request;
    ops::Mutable<Op>(&request)->mutable_input()->add_shape(7);
    ASSERT_EQ(request.op_case(), Op::kCase);
    EXPECT_EQ(ops::Get<Op>(request).input().shape(0), 7);
    const std::string_view visited = ops::VisitOp(
        request,
        [&]<typename Visited>(Visited, const typename Visited::Request& message) {
          EXPECT_EQ(&message, &ops::Get<Visited>(request));
          return ops::Name<Visited>();
        },
        [] { return std::string_view("none"); });
    EXPECT_EQ(visited, ops::Name<Op>());
  });
  EXPECT_EQ(ops::VisitOp(
                v1::OpRequest(), []<typename Op>(Op, const auto&) { return 1; }, [] { return 0; }),
            0);
}

}  // namespace
}  // namespace tensorops
