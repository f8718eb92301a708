// The KServe v2 protocol (inference.GRPCInferenceService) at the wire: every op called as a model
// gives the bytes the same call through tensorops.v1's Run gives, attributes travel as
// parameters, typed contents equal raw ones, errors name the input or parameter, streams answer
// each request, statistics read the metrics, and stored tensors are reachable. Needs no PyPI:
// tests/kserve/ runs stock tritonclient against the same server.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_format.h"
#include "client/cpp/client.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/client_unary_call.h"
#include "grpcpp/impl/rpc_method.h"
#include "grpcpp/support/byte_buffer.h"
#include "gtest/gtest.h"
#include "inference/grpc_service.grpc.pb.h"
#include "proto/op_list.h"
#include "server/kserve/models.h"
#include "server/server.h"
#include "tests/op_cases.h"
#include "tests/service_test_util.h"

namespace tensorops {
namespace {

using ::tensorops::testing::AddInput;
using ::tensorops::testing::Case;
using ::tensorops::testing::Cases;
using ::tensorops::testing::Connect;
using ::tensorops::testing::Datatype;
using ::tensorops::testing::MakeMask;
using ::tensorops::testing::MakeTensor;
using ::tensorops::testing::RandomFloats;
using ::tensorops::testing::SetBool;
using ::tensorops::testing::SetInt;
using ::tensorops::testing::SetString;
using ::tensorops::testing::StartServer;
using ::testing::HasSubstr;

using inference::InferParameter;
using inference::ModelInferRequest;
using inference::ModelInferResponse;

std::unique_ptr<inference::GRPCInferenceService::Stub> ConnectInference(int port) {
  return inference::GRPCInferenceService::NewStub(grpc::CreateChannel(
      absl::StrFormat("127.0.0.1:%d", port), grpc::InsecureChannelCredentials()));
}

class KServeTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = StartServer();
    ASSERT_NE(server_, nullptr);
    v1_ = Connect(server_->port());
    kserve_ = ConnectInference(server_->port());
  }

  grpc::Status Infer(const ModelInferRequest& request, ModelInferResponse* response) {
    grpc::ClientContext context;
    return kserve_->ModelInfer(&context, request, response);
  }

  std::unique_ptr<Server> server_;
  std::unique_ptr<v1::TensorOps::Stub> v1_;
  std::unique_ptr<inference::GRPCInferenceService::Stub> kserve_;
};

TEST(KServeModelsTest, EveryOpIsAModelAndEveryFieldAnInputOrAParameter) {
  int ops = 0;
  ops::ForEachOp([&]<typename Op>(Op) {
    ++ops;
    const std::string name(ops::Name<Op>());
    SCOPED_TRACE(name);
    absl::StatusOr<const kserve::Model*> model = kserve::FindModel(name, "");
    ASSERT_TRUE(model.ok()) << model.status();
    absl::StatusOr<const kserve::Model*> backward = kserve::FindModel(name + "_backward", "1");
    ASSERT_TRUE(backward.ok()) << backward.status();
    const google::protobuf::Descriptor* request = Op::Request::descriptor();
    for (int i = 0; i < request->field_count(); ++i) {
      const google::protobuf::FieldDescriptor* field = request->field(i);
      if (field->name() == "result_options") continue;
      const bool input = (*model)->FindInput(field->name()) != nullptr;
      const bool parameter = (*model)->FindParameter(field->name()) != nullptr;
      EXPECT_NE(input, parameter) << field->name() << " must be exactly one of the two";
    }
    // The result options travel as parameters of forward models only.
    EXPECT_NE((*model)->FindParameter("store_as"), nullptr);
    EXPECT_EQ((*backward)->FindParameter("store_as"), nullptr);
    EXPECT_NE((*backward)->FindInput("grad_output"), nullptr);
    EXPECT_THAT((*backward)->outputs, ::testing::Contains("grad_input"));
  });
  EXPECT_EQ(static_cast<int>(kserve::AllModels().size()), 2 * ops);
  EXPECT_EQ(kserve::FindModel("gather", "2").status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(kserve::FindModel("Gather", "").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(KServeTest, EveryOpAsAModelGivesTheBytesOfTheSameCallThroughRun) {
  std::mt19937 rng(20261125);
  for (int round = 0; round < 5; ++round) {
    for (const Case& c : Cases(rng)) {
      SCOPED_TRACE(c.kserve.model_name());
      grpc::ClientContext context;
      v1::OpResponse expected;
      ASSERT_TRUE(v1_->Run(&context, c.v1, &expected).ok());
      ModelInferResponse response;
      const grpc::Status status = Infer(c.kserve, &response);
      ASSERT_TRUE(status.ok()) << status.error_message();
      EXPECT_EQ(response.model_name(), c.kserve.model_name());
      EXPECT_EQ(response.model_version(), "1");
      ASSERT_EQ(response.outputs_size(), 1);
      EXPECT_EQ(response.outputs(0).name(), "output");
      EXPECT_EQ(response.outputs(0).datatype(), Datatype(expected.result().dtype()));
      EXPECT_THAT(response.outputs(0).shape(),
                  ::testing::ElementsAreArray(expected.result().shape()));
      ASSERT_EQ(response.raw_output_contents_size(), 1);
      EXPECT_EQ(response.raw_output_contents(0), expected.result().data());
    }
  }
}

TEST_F(KServeTest, BackwardModelGivesTheGradientsOfBackward) {
  std::mt19937 rng(7);
  const Case scatter = Cases(rng)[1];
  const v1::Tensor grad = MakeTensor<float>({4, 6}, RandomFloats(rng, 24));
  v1::BackwardRequest request;
  *request.mutable_op() = scatter.v1;
  *request.mutable_grad_output() = grad;
  v1::BackwardResponse expected;
  grpc::ClientContext context;
  ASSERT_TRUE(v1_->Backward(&context, request, &expected).ok());

  ModelInferRequest infer = scatter.kserve;
  infer.set_model_name("scatter_backward");
  AddInput("grad_output", grad, &infer);
  ModelInferResponse response;
  const grpc::Status status = Infer(infer, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.outputs_size(), 2);
  EXPECT_EQ(response.outputs(0).name(), "grad_input");
  EXPECT_EQ(response.raw_output_contents(0), expected.gradients().at("input").data());
  EXPECT_EQ(response.outputs(1).name(), "grad_src");
  EXPECT_EQ(response.raw_output_contents(1), expected.gradients().at("src").data());

  // Outputs asked for by name: only those come back.
  infer.add_outputs()->set_name("grad_src");
  response.Clear();
  ASSERT_TRUE(Infer(infer, &response).ok());
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).name(), "grad_src");
  EXPECT_EQ(response.raw_output_contents(0), expected.gradients().at("src").data());

  // Both, in the order asked for (not the model's), and each once.
  infer.add_outputs()->set_name("grad_input");
  response.Clear();
  ASSERT_TRUE(Infer(infer, &response).ok());
  ASSERT_EQ(response.outputs_size(), 2);
  EXPECT_EQ(response.outputs(0).name(), "grad_src");
  EXPECT_EQ(response.raw_output_contents(0), expected.gradients().at("src").data());
  EXPECT_EQ(response.outputs(1).name(), "grad_input");
  EXPECT_EQ(response.raw_output_contents(1), expected.gradients().at("input").data());
  infer.add_outputs()->set_name("grad_src");
  const grpc::Status twice = Infer(infer, &response);
  EXPECT_EQ(twice.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(twice.error_message(), HasSubstr("output \"grad_src\" is requested twice"));

  // src given as the scalar value has no gradient: left out of the implied outputs, refused when
  // asked for by name (the client may be waiting for it in a region).
  ModelInferRequest by_value = scatter.kserve;
  by_value.set_model_name("scatter_backward");
  ASSERT_EQ(by_value.inputs(by_value.inputs_size() - 1).name(), "src");
  by_value.mutable_inputs()->RemoveLast();
  by_value.mutable_raw_input_contents()->RemoveLast();
  SetInt("value", 5, &by_value);
  AddInput("grad_output", grad, &by_value);
  response.Clear();
  const grpc::Status implied = Infer(by_value, &response);
  ASSERT_TRUE(implied.ok()) << implied.error_message();
  ASSERT_EQ(response.outputs_size(), 1);
  EXPECT_EQ(response.outputs(0).name(), "grad_input");
  by_value.add_outputs()->set_name("grad_src");
  const grpc::Status missing = Infer(by_value, &response);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << missing.error_message();
  EXPECT_THAT(missing.error_message(),
              HasSubstr("scatter_backward: output \"grad_src\" was requested, but this call has "
                        "no such gradient"));
}

TEST_F(KServeTest, TypedContentsAreTheSameTensorsAsRawOnes) {
  std::mt19937 rng(3);
  const Case gather = Cases(rng)[0];
  ModelInferResponse raw_response;
  ASSERT_TRUE(Infer(gather.kserve, &raw_response).ok());

  ModelInferRequest typed = gather.kserve;
  typed.clear_raw_input_contents();
  const std::string& input_bytes = gather.v1.gather().input().data();
  const std::string& index_bytes = gather.v1.gather().index().data();
  for (size_t i = 0; i < input_bytes.size() / sizeof(float); ++i) {
    float value;
    std::memcpy(&value, input_bytes.data() + i * sizeof(float), sizeof(float));
    typed.mutable_inputs(0)->mutable_contents()->add_fp32_contents(value);
  }
  for (size_t i = 0; i < index_bytes.size() / sizeof(int64_t); ++i) {
    int64_t value;
    std::memcpy(&value, index_bytes.data() + i * sizeof(int64_t), sizeof(int64_t));
    typed.mutable_inputs(1)->mutable_contents()->add_int64_contents(value);
  }
  ModelInferResponse typed_response;
  const grpc::Status status = Infer(typed, &typed_response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(typed_response.raw_output_contents(0), raw_response.raw_output_contents(0));

  // One element too few: the message counts both.
  typed.mutable_inputs(0)->mutable_contents()->mutable_fp32_contents()->RemoveLast();
  ModelInferResponse response;
  const grpc::Status short_status = Infer(typed, &response);
  EXPECT_EQ(short_status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(short_status.error_message(),
              HasSubstr("input \"input\" has 23 elements in contents.fp32_contents, but its shape "
                        "[4, 6] holds 24"));
}

TEST_F(KServeTest, BadRequestsNameTheInputOrParameterAndTheRule) {
  std::mt19937 rng(5);
  const ModelInferRequest gather = Cases(rng)[0].kserve;
  struct BadCase {
    std::string what;
    std::function<void(ModelInferRequest*)> change;
    grpc::StatusCode code;
    std::string message;
  };
  const std::vector<BadCase> bad = {
      {"unknown model", [](ModelInferRequest* r) { r->set_model_name("gathr"); },
       grpc::StatusCode::NOT_FOUND, "no model is named \"gathr\""},
      {"unknown version", [](ModelInferRequest* r) { r->set_model_version("2"); },
       grpc::StatusCode::NOT_FOUND, "model \"gather\" has no version \"2\""},
      {"unknown parameter", [](ModelInferRequest* r) { SetInt("axs", 1, r); },
       grpc::StatusCode::INVALID_ARGUMENT,
       "gather: \"axs\" is not a parameter of this model (parameters: axis, broadcast"},
      {"parameter of the wrong kind", [](ModelInferRequest* r) { SetString("axis", "1", r); },
       grpc::StatusCode::INVALID_ARGUMENT,
       "gather: parameter \"axis\" is a string; expected an int64"},
      {"input sent as a parameter", [](ModelInferRequest* r) { SetInt("index", 1, r); },
       grpc::StatusCode::INVALID_ARGUMENT, "it is an input, sent as a tensor"},
      {"unknown input", [](ModelInferRequest* r) { r->mutable_inputs(1)->set_name("indices"); },
       grpc::StatusCode::INVALID_ARGUMENT,
       "gather: \"indices\" is not an input of this model (inputs: input, index)"},
      {"missing input",
       [](ModelInferRequest* r) {
         r->mutable_inputs()->RemoveLast();
         r->mutable_raw_input_contents()->RemoveLast();
       },
       grpc::StatusCode::INVALID_ARGUMENT, "gather: input \"index\" is missing"},
      {"raw contents of a third input",
       [](ModelInferRequest* r) { r->add_raw_input_contents("xyz"); },
       grpc::StatusCode::INVALID_ARGUMENT, "raw_input_contents has 3 entries, but 2 inputs"},
      {"complex datatype",
       [](ModelInferRequest* r) { r->mutable_inputs(0)->set_datatype("COMPLEX64"); },
       grpc::StatusCode::INVALID_ARGUMENT, "call tensorops.v1"},
      {"UINT32 datatype",
       [](ModelInferRequest* r) { r->mutable_inputs(0)->set_datatype("UINT32"); },
       grpc::StatusCode::INVALID_ARGUMENT, "(datatypes: BOOL, UINT8, INT8"},
      {"sequence", [](ModelInferRequest* r) { SetInt("sequence_id", 3, r); },
       grpc::StatusCode::INVALID_ARGUMENT, "tensorops' models are stateless"},
      {"unknown output", [](ModelInferRequest* r) { r->add_outputs()->set_name("result"); },
       grpc::StatusCode::INVALID_ARGUMENT, "\"result\" is not an output of this model"},
      // The op's own checks, with tensorops.v1's messages.
      {"axis out of range", [](ModelInferRequest* r) { SetInt("axis", 2, r); },
       grpc::StatusCode::INVALID_ARGUMENT, "gather: axis = 2 is out of range"},
      {"bytes that do not match the shape",
       [](ModelInferRequest* r) { r->mutable_raw_input_contents(0)->pop_back(); },
       grpc::StatusCode::INVALID_ARGUMENT, "gather: input"},
  };
  for (const BadCase& c : bad) {
    SCOPED_TRACE(c.what);
    ModelInferRequest request = gather;
    c.change(&request);
    ModelInferResponse response;
    const grpc::Status status = Infer(request, &response);
    EXPECT_EQ(status.error_code(), c.code) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.message));
  }
  // Triton's scheduling hints are accepted and ignored.
  ModelInferRequest hinted = gather;
  (*hinted.mutable_parameters())["priority"].set_uint64_param(1);
  SetInt("timeout", 1000, &hinted);
  ModelInferResponse response;
  EXPECT_TRUE(Infer(hinted, &response).ok());
}

// AnswersById half-closes `stream`, reads every answer by its request's id and checks that the
// stream ends OK.
std::map<std::string, inference::ModelStreamInferResponse> AnswersById(
    grpc::ClientReaderWriter<ModelInferRequest, inference::ModelStreamInferResponse>& stream) {
  EXPECT_TRUE(stream.WritesDone());
  std::map<std::string, inference::ModelStreamInferResponse> answers;
  inference::ModelStreamInferResponse response;
  while (stream.Read(&response)) answers[response.infer_response().id()] = response;
  const grpc::Status status = stream.Finish();
  EXPECT_TRUE(status.ok()) << status.error_message();
  return answers;
}

TEST_F(KServeTest, StreamAnswersEveryRequestWithItsIdAndGoesOnAfterAnError) {
  std::mt19937 rng(11);
  const std::vector<Case> cases = Cases(rng);
  grpc::ClientContext context;
  auto stream = kserve_->ModelStreamInfer(&context);
  for (size_t i = 0; i < cases.size(); ++i) {
    ModelInferRequest request = cases[i].kserve;
    request.set_id(absl::StrFormat("r%d", i));
    ASSERT_TRUE(stream->Write(request));
  }
  ModelInferRequest bad = cases[0].kserve;
  bad.set_id("bad");
  SetInt("axis", 9, &bad);
  ASSERT_TRUE(stream->Write(bad));
  std::map<std::string, inference::ModelStreamInferResponse> answers = AnswersById(*stream);
  ASSERT_EQ(answers.size(), cases.size() + 1);
  for (size_t i = 0; i < cases.size(); ++i) {
    const inference::ModelStreamInferResponse& answer = answers[absl::StrFormat("r%d", i)];
    SCOPED_TRACE(cases[i].kserve.model_name());
    EXPECT_EQ(answer.error_message(), "");
    grpc::ClientContext run_context;
    v1::OpResponse expected;
    ASSERT_TRUE(v1_->Run(&run_context, cases[i].v1, &expected).ok());
    ASSERT_EQ(answer.infer_response().raw_output_contents_size(), 1);
    EXPECT_EQ(answer.infer_response().raw_output_contents(0), expected.result().data());
  }
  EXPECT_THAT(answers["bad"].error_message(), HasSubstr("gather: axis = 9 is out of range"));
}

TEST_F(KServeTest, HealthMetadataConfigAndStatistics) {
  grpc::ClientContext live_context;
  inference::ServerLiveResponse live;
  ASSERT_TRUE(kserve_->ServerLive(&live_context, {}, &live).ok());
  EXPECT_TRUE(live.live());
  grpc::ClientContext ready_context;
  inference::ServerReadyResponse ready;
  ASSERT_TRUE(kserve_->ServerReady(&ready_context, {}, &ready).ok());
  EXPECT_TRUE(ready.ready());

  grpc::ClientContext metadata_context;
  inference::ModelMetadataRequest metadata_request;
  metadata_request.set_name("masked_scatter");
  inference::ModelMetadataResponse metadata;
  ASSERT_TRUE(kserve_->ModelMetadata(&metadata_context, metadata_request, &metadata).ok());
  ASSERT_EQ(metadata.inputs_size(), 3);
  EXPECT_EQ(metadata.inputs(1).name(), "mask");
  EXPECT_EQ(metadata.inputs(1).datatype(), "BOOL");
  EXPECT_THAT(metadata.inputs(1).shape(), ::testing::ElementsAre(-1));

  grpc::ClientContext config_context;
  inference::ModelConfigRequest config_request;
  config_request.set_name("scatter");
  inference::ModelConfigResponse config;
  ASSERT_TRUE(kserve_->ModelConfig(&config_context, config_request, &config).ok());
  EXPECT_EQ(config.config().max_batch_size(), 0);
  EXPECT_TRUE(config.config().input(2).optional());  // src: `value` may stand in for it
  EXPECT_THAT(config.config().parameters().at("reduce").string_value(),
              HasSubstr("assign, sum, prod, mean, amax, amin"));

  // Two good calls and one bad of gather; the statistics count them as /metrics does.
  std::mt19937 rng(13);
  ModelInferRequest gather = Cases(rng)[0].kserve;
  ModelInferResponse response;
  ASSERT_TRUE(Infer(gather, &response).ok());
  ASSERT_TRUE(Infer(gather, &response).ok());
  SetInt("axis", 7, &gather);
  ASSERT_FALSE(Infer(gather, &response).ok());
  grpc::ClientContext statistics_context;
  inference::ModelStatisticsRequest statistics_request;
  statistics_request.set_name("gather");
  inference::ModelStatisticsResponse statistics;
  ASSERT_TRUE(kserve_->ModelStatistics(&statistics_context, statistics_request, &statistics).ok());
  ASSERT_EQ(statistics.model_stats_size(), 1);
  const inference::ModelStatistics& gather_stats = statistics.model_stats(0);
  EXPECT_EQ(gather_stats.inference_count(), 2u);
  EXPECT_EQ(gather_stats.inference_stats().success().count(), 2u);
  EXPECT_EQ(gather_stats.inference_stats().fail().count(), 1u);
  EXPECT_GT(gather_stats.inference_stats().success().ns(), 0u);
  // The stages count the successes only, as Triton's do; the failure is in `fail`.
  for (const inference::StatisticDuration* stage :
       {&gather_stats.inference_stats().queue(), &gather_stats.inference_stats().compute_input(),
        &gather_stats.inference_stats().compute_infer(),
        &gather_stats.inference_stats().compute_output()}) {
    EXPECT_EQ(stage->count(), 2u);
  }
  EXPECT_GT(gather_stats.last_inference(), 0u);
  EXPECT_THAT(server_->metrics().Scrape(),
              HasSubstr("tensorops_requests_total{code=\"OK\",device=\"cpu\",op=\"gather\"} 2"));

  // No name: every model.
  grpc::ClientContext all_context;
  inference::ModelStatisticsResponse all;
  ASSERT_TRUE(kserve_->ModelStatistics(&all_context, {}, &all).ok());
  EXPECT_EQ(static_cast<size_t>(all.model_stats_size()), kserve::AllModels().size());
}

TEST_F(KServeTest, StoredTensorsAsInputsAndResults) {
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Create(absl::StrFormat("127.0.0.1:%d", server_->port()));
  ASSERT_TRUE(client.ok()) << client.status();
  std::mt19937 rng(17);
  const Case gather = Cases(rng)[0];
  const std::string& bytes = gather.v1.gather().input().data();
  const TensorView input(DataType::kFloat32, Shape{4, 6}, bytes.data());
  ASSERT_TRUE((*client)->PutTensor("weights", input).ok());

  // The input named by the stored tensor, no contents; the result stored under a name.
  ModelInferRequest request;
  request.set_model_name("gather");
  ModelInferRequest::InferInputTensor* stored = request.add_inputs();
  stored->set_name("input");
  (*stored->mutable_parameters())["stored"].set_string_param("weights");
  AddInput("index", gather.v1.gather().index(), &request);
  SetInt("axis", 1, &request);
  SetString("store_as", "picked", &request);
  SetBool("return_data", true, &request);
  ModelInferResponse response;
  const grpc::Status status = Infer(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  grpc::ClientContext context;
  v1::OpResponse expected;
  ASSERT_TRUE(v1_->Run(&context, gather.v1, &expected).ok());
  EXPECT_EQ(response.raw_output_contents(0), expected.result().data());
  EXPECT_EQ(response.outputs(0).parameters().at("stored").string_param(), "picked");
  absl::StatusOr<Tensor> picked = (*client)->GetTensor("picked");
  ASSERT_TRUE(picked.ok()) << picked.status();
  EXPECT_EQ(std::string(static_cast<const char*>(picked->data()), picked->nbytes()),
            expected.result().data());

  // A name nobody stored: the store's NOT_FOUND, naming the argument.
  (*request.mutable_inputs(0)->mutable_parameters())["stored"].set_string_param("nobody");
  const grpc::Status missing = Infer(request, &response);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::NOT_FOUND) << missing.error_message();
  EXPECT_THAT(missing.error_message(), HasSubstr("nobody"));
}

// A result stored without return_data comes back as shape [0] with no bytes, which a client reads
// as an empty array, and the stored shape in the parameter "stored_shape": a scalar's too, whose
// shape [] with no bytes no client could read.
TEST_F(KServeTest, AStoredResultWithoutItsBytesSaysShapeZeroAndTheStoredShape) {
  const auto gather_stored = [&](const std::vector<int64_t>& shape, const std::string& name) {
    v1::Tensor input;
    input.set_dtype(v1::DATA_TYPE_FLOAT32);
    input.mutable_shape()->Assign(shape.begin(), shape.end());
    int64_t elements = 1;
    for (const int64_t size : shape) elements *= size;
    const std::vector<float> values(static_cast<size_t>(elements), 2.5f);
    input.set_data(
        std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(float)));
    v1::Tensor index;
    index.set_dtype(v1::DATA_TYPE_INT64);
    index.mutable_shape()->Assign(shape.begin(), shape.end());
    index.set_data(std::string(static_cast<size_t>(elements) * sizeof(int64_t), '\0'));
    ModelInferRequest request;
    request.set_model_name("gather");
    AddInput("input", input, &request);
    AddInput("index", index, &request);
    SetInt("axis", 0, &request);
    SetString("store_as", name, &request);
    ModelInferResponse response;
    const grpc::Status status = Infer(request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  };
  const ModelInferResponse matrix = gather_stored({3, 2}, "kept-matrix");
  ASSERT_EQ(matrix.outputs_size(), 1);
  EXPECT_EQ(matrix.outputs(0).datatype(), "FP32");
  EXPECT_THAT(matrix.outputs(0).shape(), ::testing::ElementsAre(0));
  EXPECT_EQ(matrix.outputs(0).parameters().at("stored_shape").string_param(), "3,2");
  EXPECT_EQ(matrix.raw_output_contents(0), "");

  const ModelInferResponse scalar = gather_stored({}, "kept-scalar");
  ASSERT_EQ(scalar.outputs_size(), 1);
  EXPECT_EQ(scalar.outputs(0).datatype(), "FP32");
  EXPECT_THAT(scalar.outputs(0).shape(), ::testing::ElementsAre(0));
  EXPECT_EQ(scalar.outputs(0).parameters().at("stored_shape").string_param(), "");
  EXPECT_EQ(scalar.raw_output_contents(0), "");
}

// A call whose stored input an update holds waits for the update (on the blocking pool, not
// gRPC's thread) and reads the value it commits. Its preparation runs twice (a first try finds
// the tensor busy), but the request's raw contents are translated once: a second translation
// would find them taken. Through ModelInfer and ModelStreamInfer.
TEST_F(KServeTest, AStoredInputAnUpdateHoldsIsReadOnceTheUpdateCommits) {
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Create(absl::StrFormat("127.0.0.1:%d", server_->port()));
  ASSERT_TRUE(client.ok()) << client.status();
  std::mt19937 rng(23);
  const Case gather = Cases(rng)[0];
  const std::string& bytes = gather.v1.gather().input().data();
  ASSERT_TRUE((*client)
                  ->PutTensor("weights", TensorView(DataType::kFloat32, Shape{4, 6}, bytes.data()))
                  .ok());
  // What the gather gives once the update has zeroed the tensor.
  v1::OpRequest zeroed = gather.v1;
  std::string& zero_bytes = *zeroed.mutable_gather()->mutable_input()->mutable_data();
  std::fill(zero_bytes.begin(), zero_bytes.end(), '\0');
  grpc::ClientContext zeroed_context;
  v1::OpResponse expected;
  ASSERT_TRUE(v1_->Run(&zeroed_context, zeroed, &expected).ok());

  ModelInferRequest request;
  request.set_model_name("gather");
  request.set_id("held");
  ModelInferRequest::InferInputTensor* stored = request.add_inputs();
  stored->set_name("input");
  (*stored->mutable_parameters())["stored"].set_string_param("weights");
  AddInput("index", gather.v1.gather().index(), &request);
  SetInt("axis", 1, &request);

  absl::StatusOr<TensorStore::UpdateHandle> update = server_->store().Update("", "weights");
  ASSERT_TRUE(update.ok()) << update.status();
  std::atomic<bool> answered = false;
  ModelInferResponse response;
  grpc::Status status;
  std::thread caller([&] {
    status = Infer(request, &response);
    answered = true;
  });
  grpc::ClientContext stream_context;
  auto stream = kserve_->ModelStreamInfer(&stream_context);
  ASSERT_TRUE(stream->Write(request));
  std::atomic<bool> streamed = false;
  std::map<std::string, inference::ModelStreamInferResponse> answers;
  std::thread stream_reader([&] {
    answers = AnswersById(*stream);
    streamed = true;
  });
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_FALSE(answered.load());
  EXPECT_FALSE(streamed.load());
  const MutableTensorView held = update->view();
  std::memset(held.data(), 0, static_cast<size_t>(held.numel() * ItemSize(held.dtype())));
  ASSERT_TRUE(update->Commit().ok());
  caller.join();
  stream_reader.join();
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(response.raw_output_contents_size(), 1);
  EXPECT_EQ(response.raw_output_contents(0), expected.result().data());
  ASSERT_EQ(answers.size(), 1u);
  EXPECT_EQ(answers["held"].error_message(), "");
  ASSERT_EQ(answers["held"].infer_response().raw_output_contents_size(), 1);
  EXPECT_EQ(answers["held"].infer_response().raw_output_contents(0), expected.result().data());
}

// An input that references a stored tensor while the store is off (--store_memory_bytes=0) is
// refused as an upload is then (RESOURCE_EXHAUSTED, "the tensor store is off"), not NOT_FOUND:
// the name could never have been stored. tensorops.v1's Run shares the reference code.
TEST(KServeStoreOffTest, StoredInputWhileTheStoreIsOffSaysTheStoreIsOff) {
  ServerOptions options;
  options.store.memory_bytes = 0;
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  std::mt19937 rng(19);
  const Case gather = Cases(rng)[0];
  ModelInferRequest request;
  request.set_model_name("gather");
  ModelInferRequest::InferInputTensor* stored = request.add_inputs();
  stored->set_name("input");
  (*stored->mutable_parameters())["stored"].set_string_param("weights");
  AddInput("index", gather.v1.gather().index(), &request);
  SetInt("axis", 1, &request);
  ModelInferResponse response;
  grpc::ClientContext context;
  const grpc::Status status =
      ConnectInference(server->port())->ModelInfer(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_THAT(status.error_message(),
              HasSubstr("gather: input refers to stored tensor \"weights\", but the tensor store "
                        "is off (--store_memory_bytes=0); start the server with "
                        "--store_memory_bytes greater than 0"));

  v1::OpRequest run = gather.v1;
  run.mutable_gather()->mutable_input()->Clear();
  run.mutable_gather()->mutable_input()->mutable_stored()->set_name("weights");
  v1::OpResponse run_response;
  grpc::ClientContext run_context;
  const grpc::Status run_status = Connect(server->port())->Run(&run_context, run, &run_response);
  EXPECT_EQ(run_status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << run_status.error_message();
  EXPECT_THAT(run_status.error_message(), HasSubstr("the tensor store is off"));
}

// TwoElementGather is a gather of element `index` of [1, 2] with request id `id` (an index past 1
// is out of range).
ModelInferRequest TwoElementGather(const std::string& id, int64_t index) {
  ModelInferRequest request;
  request.set_model_name("gather");
  request.set_id(id);
  AddInput("input", MakeTensor<float>({2}, {1, 2}), &request);
  AddInput("index", MakeTensor<int64_t>({1}, {index}), &request);
  SetInt("axis", 0, &request);
  return request;
}

// A ModelInfer request over --max_message_bytes is refused naming the flag and its size; on a
// ModelStreamInfer it gets that error by its id and the stream goes on.
TEST(KServeLimitsTest, RequestsOverMaxMessageBytesAreRefusedNamingTheFlag) {
  constexpr int64_t kLimit = 64 << 10;
  ServerOptions options;
  options.limits.max_message_bytes = kLimit;
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<inference::GRPCInferenceService::Stub> kserve = ConnectInference(server->port());

  ModelInferRequest large;
  large.set_model_name("gather");
  large.set_id("large");
  AddInput("input", MakeTensor<float>({32 << 10}, std::vector<float>(32 << 10, 1.0f)), &large);
  AddInput("index", MakeTensor<int64_t>({1}, {0}), &large);
  SetInt("axis", 0, &large);
  const std::string refusal = absl::StrFormat(
      "request of %d bytes (inference.ModelInferRequest) is larger than --max_message_bytes=%d",
      large.ByteSizeLong(), kLimit);
  {
    ModelInferResponse response;
    grpc::ClientContext context;
    const grpc::Status status = kserve->ModelInfer(&context, large, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_THAT(status.error_message(), HasSubstr(refusal));
  }

  grpc::ClientContext context;
  auto stream = kserve->ModelStreamInfer(&context);
  ASSERT_TRUE(stream->Write(large));
  ASSERT_TRUE(stream->Write(TwoElementGather("small", 1)));
  std::map<std::string, inference::ModelStreamInferResponse> answers = AnswersById(*stream);
  ASSERT_EQ(answers.size(), 2u);
  EXPECT_THAT(answers["large"].error_message(), HasSubstr(refusal));
  EXPECT_EQ(answers["small"].error_message(), "");
  ASSERT_EQ(answers["small"].infer_response().raw_output_contents_size(), 1);
  const float two = 2;
  EXPECT_EQ(answers["small"].infer_response().raw_output_contents(0),
            std::string(reinterpret_cast<const char*>(&two), sizeof(two)));
}

// A stream's error response echoes at most 4096 bytes of the request's id: one that echoed an id
// of nearly the limit's size would be over the limit, which gRPC refuses to send, ending the
// whole stream. The next request is still answered.
TEST(KServeLimitsTest, AnErrorResponseFitsWhateverTheRequestsIdAndTheStreamGoesOn) {
  constexpr int64_t kLimit = 64 << 10;
  ServerOptions options;
  options.limits.max_message_bytes = kLimit;
  std::unique_ptr<Server> server = StartServer(options);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<inference::GRPCInferenceService::Stub> kserve = ConnectInference(server->port());
  grpc::ClientContext context;
  auto stream = kserve->ModelStreamInfer(&context);
  const ModelInferRequest bad = TwoElementGather(std::string(kLimit - 200, 'i'), 7);
  ASSERT_LE(static_cast<int64_t>(bad.ByteSizeLong()), kLimit);
  ASSERT_TRUE(stream->Write(bad));
  ASSERT_TRUE(stream->Write(TwoElementGather("good", 1)));
  std::map<std::string, inference::ModelStreamInferResponse> answers = AnswersById(*stream);
  ASSERT_EQ(answers.size(), 2u);
  const std::string cut(4096, 'i');
  ASSERT_TRUE(answers.contains(cut));
  EXPECT_THAT(answers[cut].error_message(),
              AllOf(HasSubstr("out of range"),
                    HasSubstr(absl::StrFormat("(the request's id, %d bytes, is cut to its "
                                              "first 4096 bytes in this response)",
                                              kLimit - 200))));
  EXPECT_EQ(answers["good"].error_message(), "");
}

TEST_F(KServeTest, ScatterGivenBothSrcAndValueIsRefusedNamingBoth) {
  std::mt19937 rng(23);
  ModelInferRequest scatter = Cases(rng)[1].kserve;
  ASSERT_EQ(scatter.model_name(), "scatter");
  ASSERT_NE(kserve::FindModel("scatter", "").value()->FindInput("src"), nullptr);
  SetInt("value", 5, &scatter);
  ModelInferResponse response;
  const grpc::Status status = Infer(scatter, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(),
              HasSubstr("scatter: input \"src\" and parameter \"value\" are alternatives"));

  // Either one alone runs.
  ModelInferRequest value_only = scatter;
  value_only.mutable_inputs()->RemoveLast();
  value_only.mutable_raw_input_contents()->RemoveLast();
  const grpc::Status value_status = Infer(value_only, &response);
  EXPECT_TRUE(value_status.ok()) << value_status.error_message();
  scatter.mutable_parameters()->erase("value");
  const grpc::Status src_status = Infer(scatter, &response);
  EXPECT_TRUE(src_status.ok()) << src_status.error_message();
}

// A stored input's datatype and shape are each checked when given, the shape without the
// datatype too.
TEST_F(KServeTest, StoredInputsDatatypeAndShapeAreCheckedEachOnItsOwn) {
  absl::StatusOr<std::unique_ptr<Client>> client =
      Client::Create(absl::StrFormat("127.0.0.1:%d", server_->port()));
  ASSERT_TRUE(client.ok()) << client.status();
  const std::vector<float> values = {1, 2, 3, 4, 5, 6};
  ASSERT_TRUE(
      (*client)->PutTensor("w", TensorView(DataType::kFloat32, {3, 2}, values.data())).ok());
  const auto request = [](const std::string& datatype, std::vector<int64_t> shape) {
    ModelInferRequest r;
    r.set_model_name("gather");
    ModelInferRequest::InferInputTensor* stored = r.add_inputs();
    stored->set_name("input");
    stored->set_datatype(datatype);
    stored->mutable_shape()->Assign(shape.begin(), shape.end());
    (*stored->mutable_parameters())["stored"].set_string_param("w");
    AddInput("index", MakeTensor<int64_t>({3, 1}, {1, 0, 1}), &r);
    SetInt("axis", 1, &r);
    return r;
  };
  ModelInferResponse response;
  const grpc::Status shape_only = Infer(request("", {7}), &response);
  EXPECT_EQ(shape_only.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << shape_only.error_message();
  EXPECT_THAT(shape_only.error_message(), HasSubstr("gather: input refers to stored tensor \"w\""));
  EXPECT_THAT(shape_only.error_message(), HasSubstr("[3, 2]"));
  EXPECT_THAT(shape_only.error_message(), HasSubstr("[7]"));

  const grpc::Status datatype_only = Infer(request("FP64", {}), &response);
  EXPECT_EQ(datatype_only.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << datatype_only.error_message();
  EXPECT_THAT(datatype_only.error_message(), HasSubstr("gather: input refers to stored tensor"));

  const grpc::Status both_wrong_shape = Infer(request("FP32", {2, 3}), &response);
  EXPECT_EQ(both_wrong_shape.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
      << both_wrong_shape.error_message();

  // Matching ones, or none, run on the stored tensor.
  for (const ModelInferRequest& good :
       {request("", {3, 2}), request("FP32", {}), request("FP32", {3, 2}), request("", {})}) {
    const grpc::Status status = Infer(good, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_THAT(response.outputs(0).shape(), ::testing::ElementsAre(3, 1));
  }
}

// Shared-memory parameters (Triton's set_shared_memory) that are incomplete, of the wrong kind or
// name no region are refused naming the tensor, the parameter and the rule
// (tests/shared_memory_test.cc has the ones that work).
TEST_F(KServeTest, BadSharedMemoryParametersAreRefusedNamingTheRule) {
  std::mt19937 rng(29);
  const ModelInferRequest gather = Cases(rng)[0].kserve;
  struct BadCase {
    std::string what;
    std::function<void(ModelInferRequest*)> change;
    grpc::StatusCode code;
    std::string message;
  };
  const auto output_parameter = [](ModelInferRequest* r, const std::string& name) {
    ModelInferRequest::InferRequestedOutputTensor* output =
        r->outputs_size() > 0 ? r->mutable_outputs(0) : r->add_outputs();
    output->set_name("output");
    return &(*output->mutable_parameters())[name];
  };
  const auto input_parameter = [](ModelInferRequest* r, const std::string& name) {
    return &(*r->mutable_inputs(0)->mutable_parameters())[name];
  };
  const std::vector<BadCase> bad = {
      {"output region not registered",
       [&](ModelInferRequest* r) {
         output_parameter(r, "shared_memory_region")->set_string_param("out0");
         output_parameter(r, "shared_memory_byte_size")->set_int64_param(48);
       },
       grpc::StatusCode::NOT_FOUND,
       "gather: result_options.shared_memory names shared-memory region \"out0\", which is not "
       "registered"},
      {"output size alone",
       [&](ModelInferRequest* r) {
         output_parameter(r, "shared_memory_byte_size")->set_int64_param(48);
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       "output \"output\" has parameter \"shared_memory_byte_size\" but no "
       "\"shared_memory_region\""},
      {"output offset alone",
       [&](ModelInferRequest* r) {
         output_parameter(r, "shared_memory_offset")->set_int64_param(8);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "has parameter \"shared_memory_offset\" but no"},
      {"input region without its size",
       [&](ModelInferRequest* r) {
         input_parameter(r, "shared_memory_region")->set_string_param("in0");
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       "gather: input \"input\" names shared-memory region \"in0\" but has no "
       "\"shared_memory_byte_size\""},
      {"input region of the wrong kind",
       [&](ModelInferRequest* r) {
         input_parameter(r, "shared_memory_region")->set_int64_param(3);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "it takes a string, the region's name"},
      {"input region not registered",
       [&](ModelInferRequest* r) {
         input_parameter(r, "shared_memory_region")->set_string_param("in0");
         input_parameter(r, "shared_memory_byte_size")->set_int64_param(96);
         // Its bytes are in the region, not in raw_input_contents.
         r->mutable_raw_input_contents()->erase(r->mutable_raw_input_contents()->begin());
       },
       grpc::StatusCode::NOT_FOUND,
       "gather: input names shared-memory region \"in0\", which is not registered"},
      {"another output parameter",
       [&](ModelInferRequest* r) { output_parameter(r, "classification")->set_int64_param(2); },
       grpc::StatusCode::INVALID_ARGUMENT,
       "gather: output \"output\" has parameter \"classification\" (int64); an output takes only "
       "the shared-memory parameters"},
      // result_options.shared_memory is a message: outputs ask for it, it is no parameter.
      {"a request parameter named after result_options.shared_memory",
       [&](ModelInferRequest* r) {
         (*r->mutable_parameters())["shared_memory"].set_string_param("out0");
       },
       grpc::StatusCode::INVALID_ARGUMENT,
       "gather: \"shared_memory\" is not a parameter of this model"},
  };
  for (const BadCase& c : bad) {
    SCOPED_TRACE(c.what);
    ModelInferRequest request = gather;
    c.change(&request);
    ModelInferResponse response;
    const grpc::Status status = Infer(request, &response);
    EXPECT_EQ(status.error_code(), c.code) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(c.message));
  }
}

// RawCall calls `method` of inference.GRPCInferenceService with `request`'s bytes: the methods
// grpc_service.proto does not declare have no stub.
grpc::Status RawCall(int port, const std::string& method, const std::string& request,
                     std::string* response) {
  std::shared_ptr<grpc::Channel> channel = grpc::CreateChannel(
      absl::StrFormat("127.0.0.1:%d", port), grpc::InsecureChannelCredentials());
  const std::string path = "/inference.GRPCInferenceService/" + method;
  grpc::Slice request_slice(request);
  grpc::ByteBuffer request_buffer(&request_slice, 1);
  grpc::ByteBuffer response_buffer;
  grpc::ClientContext context;
  const grpc::Status status = grpc::internal::BlockingUnaryCall(
      channel.get(), grpc::internal::RpcMethod(path.c_str(), grpc::internal::RpcMethod::NORMAL_RPC),
      &context, request_buffer, &response_buffer);
  response->clear();
  std::vector<grpc::Slice> slices;
  if (status.ok() && response_buffer.Dump(&slices).ok()) {
    for (const grpc::Slice& slice : slices) {
      response->append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    }
  }
  return status;
}

TEST_F(KServeTest, RepositoryIndexListsEveryModelReady) {
  std::vector<std::string> expected;
  for (const kserve::Model& model : kserve::AllModels()) expected.push_back(model.name);
  ASSERT_THAT(expected, ::testing::Contains("gather_backward"));
  // Every model, then only the ready ones: the same, all being ready.
  for (const bool ready : {false, true}) {
    grpc::ClientContext context;
    inference::RepositoryIndexRequest request;
    request.set_ready(ready);
    inference::RepositoryIndexResponse index;
    const grpc::Status status = kserve_->RepositoryIndex(&context, request, &index);
    ASSERT_TRUE(status.ok()) << status.error_message();
    std::vector<std::string> names;
    for (const inference::RepositoryIndexResponse::ModelIndex& model : index.models()) {
      names.push_back(model.name());
      EXPECT_EQ(model.version(), "1") << model.name();
      EXPECT_EQ(model.state(), "READY") << model.name();
    }
    EXPECT_EQ(names, expected);
  }
  // One repository, unnamed: a name is refused, naming it.
  grpc::ClientContext context;
  inference::RepositoryIndexRequest named;
  named.set_repository_name("main");
  inference::RepositoryIndexResponse index;
  const grpc::Status status = kserve_->RepositoryIndex(&context, named, &index);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("repository_name = \"main\""));
}

TEST_F(KServeTest, ServerMetadataListsTheExtensionsServedParametersIncluded) {
  grpc::ClientContext context;
  inference::ServerMetadataResponse metadata;
  ASSERT_TRUE(kserve_->ServerMetadata(&context, {}, &metadata).ok());
  EXPECT_EQ(metadata.name(), "tensorops");
  EXPECT_THAT(metadata.extensions(),
              ::testing::UnorderedElementsAre("model_configuration", "parameters", "statistics",
                                              "system_shared_memory"));
}

// The methods of Triton's service tensorops does not serve answer UNIMPLEMENTED saying what is
// missing and what to use instead, never gRPC's bare UNIMPLEMENTED.
TEST_F(KServeTest, UnservedMethodsSayWhatIsNotImplementedAndWhatToUseInstead) {
  const std::vector<std::pair<std::string, std::string>> methods = {
      {"RepositoryModelLoad", "always loaded"},
      {"RepositoryModelUnload", "cannot be unloaded"},
      {"TraceSetting", "ModelStatistics"},
      {"LogSettings", "--log_level"},
  };
  for (const auto& [method, instead] : methods) {
    SCOPED_TRACE(method);
    std::string bytes;
    const grpc::Status status = RawCall(server_->port(), method, "", &bytes);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << status.error_message();
    EXPECT_THAT(status.error_message(), HasSubstr(method + " is not implemented: "));
    EXPECT_THAT(status.error_message(), HasSubstr(instead));
  }
  // A method Triton does not have either stays gRPC's own answer.
  std::string bytes;
  EXPECT_EQ(RawCall(server_->port(), "NoSuchMethod", "", &bytes).error_code(),
            grpc::StatusCode::UNIMPLEMENTED);
}

}  // namespace
}  // namespace tensorops
