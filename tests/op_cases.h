// Op cases shared by the KServe tests and the fuzzers' seed corpora (fuzz/write_seeds.cc): one
// random call of every op (and a few forms: scatter with a scalar value, gather_nd's axes form,
// scatter_nd's zeros form), each as a tensorops.v1 OpRequest and as the KServe v2 ModelInferRequest
// that docs/kserve.md says is the same call.
#ifndef TENSOROPS_TESTS_OP_CASES_H_
#define TENSOROPS_TESTS_OP_CASES_H_

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "inference/grpc_service.pb.h"
#include "tensorops/v1/generic.pb.h"
#include "tests/service_test_util.h"

namespace tensorops::testing {

// The v2 datatype of the few wire dtypes these cases use.
inline std::string Datatype(v1::DataType dtype) {
  switch (dtype) {
    case v1::DATA_TYPE_BOOL:
      return "BOOL";
    case v1::DATA_TYPE_INT32:
      return "INT32";
    case v1::DATA_TYPE_INT64:
      return "INT64";
    case v1::DATA_TYPE_FLOAT32:
      return "FP32";
    default:
      return "";  // a case of another dtype: the server refuses the empty datatype
  }
}

// AddInput appends `tensor` as input `name`, its bytes in raw_input_contents.
inline void AddInput(const std::string& name, const v1::Tensor& tensor,
                     inference::ModelInferRequest* request) {
  inference::ModelInferRequest::InferInputTensor* input = request->add_inputs();
  input->set_name(name);
  input->set_datatype(Datatype(tensor.dtype()));
  input->mutable_shape()->Assign(tensor.shape().begin(), tensor.shape().end());
  request->add_raw_input_contents(tensor.data());
}

inline void SetInt(const std::string& name, int64_t value, inference::ModelInferRequest* request) {
  (*request->mutable_parameters())[name].set_int64_param(value);
}
inline void SetString(const std::string& name, const std::string& value,
                      inference::ModelInferRequest* request) {
  (*request->mutable_parameters())[name].set_string_param(value);
}
inline void SetBool(const std::string& name, bool value, inference::ModelInferRequest* request) {
  (*request->mutable_parameters())[name].set_bool_param(value);
}

inline std::vector<float> RandomFloats(std::mt19937& rng, int64_t n) {
  std::uniform_int_distribution<int> value(-50, 50);
  std::vector<float> values(n);
  for (float& v : values) v = static_cast<float>(value(rng)) * 0.25f;
  return values;
}

// Indices in [0, bound), many repeated.
inline std::vector<int64_t> RandomIndices(std::mt19937& rng, int64_t n, int64_t bound) {
  std::uniform_int_distribution<int64_t> index(0, bound - 1);
  std::vector<int64_t> values(n);
  for (int64_t& v : values) v = index(rng) % std::max<int64_t>(1, bound / 2);
  return values;
}

// Case is one op called both ways: the v1 request and the same call as a model.
struct Case {
  v1::OpRequest v1;
  inference::ModelInferRequest kserve;
};

// Cases builds one random call of every op, each as a v1 OpRequest and as the model request that
// docs/kserve.md says is the same call.
inline std::vector<Case> Cases(std::mt19937& rng) {
  std::vector<Case> cases;
  const v1::Tensor input = MakeTensor<float>({4, 6}, RandomFloats(rng, 24));
  const v1::Tensor index = MakeTensor<int64_t>({4, 3}, RandomIndices(rng, 12, 6));
  const v1::Tensor src = MakeTensor<float>({4, 3}, RandomFloats(rng, 12));
  {
    Case c;
    v1::GatherRequest* r = c.v1.mutable_gather();
    *r->mutable_input() = input;
    *r->mutable_index() = index;
    r->set_axis(1);
    c.kserve.set_model_name("gather");
    AddInput("input", input, &c.kserve);
    AddInput("index", index, &c.kserve);
    SetInt("axis", 1, &c.kserve);
    cases.push_back(c);
  }
  {
    Case c;
    v1::ScatterRequest* r = c.v1.mutable_scatter();
    *r->mutable_input() = input;
    *r->mutable_index() = index;
    *r->mutable_src() = src;
    r->set_axis(1);
    r->set_reduce(v1::REDUCTION_SUM);
    r->set_include_self(false);
    c.kserve.set_model_name("scatter");
    AddInput("input", input, &c.kserve);
    AddInput("index", index, &c.kserve);
    AddInput("src", src, &c.kserve);
    SetInt("axis", 1, &c.kserve);
    SetString("reduce", "sum", &c.kserve);
    SetBool("include_self", false, &c.kserve);
    cases.push_back(c);
  }
  {
    // Scatter with a scalar value instead of src: a double parameter.
    Case c;
    v1::ScatterRequest* r = c.v1.mutable_scatter();
    *r->mutable_input() = input;
    *r->mutable_index() = index;
    r->mutable_value()->set_float_value(2.5);
    r->set_axis(1);
    c.kserve.set_model_name("scatter");
    AddInput("input", input, &c.kserve);
    AddInput("index", index, &c.kserve);
    SetInt("axis", 1, &c.kserve);
    (*c.kserve.mutable_parameters())["value"].set_double_param(2.5);
    cases.push_back(c);
  }
  const v1::Tensor rows = MakeTensor<int32_t>({5}, {3, 0, 3, 1, 3});
  {
    Case c;
    v1::IndexSelectRequest* r = c.v1.mutable_index_select();
    *r->mutable_input() = input;
    *r->mutable_index() = rows;
    c.kserve.set_model_name("index_select");
    AddInput("input", input, &c.kserve);
    AddInput("index", rows, &c.kserve);
    cases.push_back(c);
  }
  {
    Case c;
    const v1::Tensor row_src = MakeTensor<float>({5, 6}, RandomFloats(rng, 30));
    v1::IndexReduceRequest* r = c.v1.mutable_index_reduce();
    *r->mutable_input() = input;
    *r->mutable_index() = rows;
    *r->mutable_src() = row_src;
    r->set_reduce(v1::REDUCTION_AMAX);
    c.kserve.set_model_name("index_reduce");
    AddInput("input", input, &c.kserve);
    AddInput("index", rows, &c.kserve);
    AddInput("src", row_src, &c.kserve);
    SetString("reduce", "amax", &c.kserve);
    cases.push_back(c);
  }
  {
    Case c;
    const v1::Tensor row = MakeTensor<float>({6}, RandomFloats(rng, 6));
    v1::SelectScatterRequest* r = c.v1.mutable_select_scatter();
    *r->mutable_input() = input;
    *r->mutable_src() = row;
    r->set_axis(0);
    r->set_index(-1);
    c.kserve.set_model_name("select_scatter");
    AddInput("input", input, &c.kserve);
    AddInput("src", row, &c.kserve);
    SetInt("index", -1, &c.kserve);
    cases.push_back(c);
  }
  {
    Case c;
    const v1::Tensor columns = MakeTensor<float>({4, 3}, RandomFloats(rng, 12));
    v1::SliceScatterRequest* r = c.v1.mutable_slice_scatter();
    *r->mutable_input() = input;
    *r->mutable_src() = columns;
    r->set_axis(1);
    r->set_start(0);
    r->set_step(2);
    c.kserve.set_model_name("slice_scatter");
    AddInput("input", input, &c.kserve);
    AddInput("src", columns, &c.kserve);
    SetInt("axis", 1, &c.kserve);
    SetInt("start", 0, &c.kserve);
    SetInt("step", 2, &c.kserve);
    cases.push_back(c);
  }
  {
    Case c;
    const v1::Tensor diagonal = MakeTensor<float>({4}, RandomFloats(rng, 4));
    v1::DiagonalScatterRequest* r = c.v1.mutable_diagonal_scatter();
    *r->mutable_input() = input;
    *r->mutable_src() = diagonal;
    r->set_offset(1);
    c.kserve.set_model_name("diagonal_scatter");
    AddInput("input", input, &c.kserve);
    AddInput("src", diagonal, &c.kserve);
    SetInt("offset", 1, &c.kserve);
    cases.push_back(c);
  }
  const v1::Tensor points = MakeTensor<int64_t>({3, 2}, {1, 2, 3, 5, 1, 2});
  {
    Case c;
    v1::GatherNdRequest* r = c.v1.mutable_gather_nd();
    *r->mutable_input() = input;
    *r->mutable_index() = points;
    c.kserve.set_model_name("gather_nd");
    AddInput("input", input, &c.kserve);
    AddInput("index", points, &c.kserve);
    cases.push_back(c);
  }
  {
    // The axes form, the list as a string.
    Case c;
    v1::GatherNdRequest* r = c.v1.mutable_gather_nd();
    *r->mutable_input() = input;
    *r->mutable_index() = points;
    r->add_axes(1);
    r->add_axes(0);
    // idx.rank == input.rank + 1; each last-axis pair is (column, row).
    const v1::Tensor swapped = MakeTensor<int64_t>({2, 3, 2}, {5, 3, 0, 0, 2, 1, 1, 2, 4, 0, 3, 3});
    *r->mutable_index() = swapped;
    c.kserve.set_model_name("gather_nd");
    AddInput("input", input, &c.kserve);
    AddInput("index", swapped, &c.kserve);
    SetString("axes", "[1, 0]", &c.kserve);
    cases.push_back(c);
  }
  {
    // The zeros form: no input, a shape parameter.
    Case c;
    const v1::Tensor updates = MakeTensor<float>({3}, RandomFloats(rng, 3));
    v1::ScatterNdRequest* r = c.v1.mutable_scatter_nd();
    *r->mutable_index() = points;
    *r->mutable_src() = updates;
    r->add_shape(4);
    r->add_shape(6);
    r->set_reduce(v1::REDUCTION_SUM);
    c.kserve.set_model_name("scatter_nd");
    AddInput("index", points, &c.kserve);
    AddInput("src", updates, &c.kserve);
    SetString("shape", "4,6", &c.kserve);
    SetString("reduce", "SUM", &c.kserve);
    cases.push_back(c);
  }
  {
    Case c;
    std::vector<uint8_t> mask_values(24);
    for (size_t i = 0; i < mask_values.size(); ++i) mask_values[i] = (i * 7) % 3 == 0;
    const v1::Tensor mask = MakeMask({4, 6}, mask_values);
    const v1::Tensor values = MakeTensor<float>({24}, RandomFloats(rng, 24));
    v1::MaskedScatterRequest* r = c.v1.mutable_masked_scatter();
    *r->mutable_input() = input;
    *r->mutable_mask() = mask;
    *r->mutable_src() = values;
    c.kserve.set_model_name("masked_scatter");
    AddInput("input", input, &c.kserve);
    AddInput("mask", mask, &c.kserve);
    AddInput("src", values, &c.kserve);
    cases.push_back(c);
  }
  return cases;
}

}  // namespace tensorops::testing

#endif  // TENSOROPS_TESTS_OP_CASES_H_
