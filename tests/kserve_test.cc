// The KServe v2 protocol (inference.GRPCInferenceService) at the wire: every op called as a model
// gives the bytes the same call through tensorops.v1's Run gives, attributes travel as
// parameters, typed contents equal raw ones, errors name the input or parameter, streams answer
// each request, statistics read the metrics, and stored tensors are reachable. Needs no PyPI:
// tests/kserve/ runs stock tritonclient against the same server.
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "client/cpp/client.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/grpcpp.h"
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
  ASSERT_TRUE(stream->WritesDone());
  std::map<std::string, inference::ModelStreamInferResponse> answers;
  inference::ModelStreamInferResponse response;
  while (stream->Read(&response)) answers[response.infer_response().id()] = response;
  const grpc::Status status = stream->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
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
  EXPECT_EQ(gather_stats.inference_stats().compute_infer().count(), 2u);
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

}  // namespace
}  // namespace tensorops
