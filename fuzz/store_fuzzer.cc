// store_fuzzer: a sequence of tensor-store operations chosen by the input, as clients would make
// them: chunked uploads (committed, abandoned, replacing), reads, in-place updates with update
// ids, deletes, and ops whose tensors are references to stored ones, whose results are stored
// under a name or written in place. After every step the store's accounting must hold: its bytes
// never pass the limit, and once no handle is held they are exactly the stored tensors' bytes.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "fuzz/fuzz_checks.h"
#include "kernels/dtype.h"
#include "server/core/prepared_op.h"
#include "server/store/tensor_store.h"
#include "tensorops/v1/generic.pb.h"

namespace {

using tensorops::DataType;
using tensorops::TensorStore;

constexpr int64_t kStoreBytes = 1 << 16;
constexpr const char* kNames[] = {"a", "b", "c/d"};
constexpr const char* kNamespaces[] = {"", "token-1"};
constexpr DataType kDtypes[] = {DataType::kBool,    DataType::kInt32,   DataType::kInt64,
                                DataType::kFloat32, DataType::kFloat64, DataType::kFloat16};

// Elements: bools are 0 or 1 (the store refuses other bytes), anything else random bytes.
std::string Elements(FuzzedDataProvider& input, DataType dtype, int64_t bytes) {
  std::string data = input.ConsumeBytesAsString(static_cast<size_t>(bytes));
  data.resize(static_cast<size_t>(bytes), '\0');
  if (dtype == DataType::kBool) {
    for (char& byte : data) byte = static_cast<char>(byte & 1);
  }
  return data;
}

std::vector<int64_t> SmallShape(FuzzedDataProvider& input) {
  std::vector<int64_t> shape(input.ConsumeIntegralInRange<int>(0, 3));
  for (int64_t& size : shape) size = input.ConsumeIntegralInRange<int64_t>(0, 6);
  return shape;
}

void Upload(FuzzedDataProvider& input, TensorStore& store, const char* ns, const char* name) {
  const DataType dtype = input.PickValueInArray(kDtypes);
  const std::vector<int64_t> shape = SmallShape(input);
  TensorStore::UploadOptions options{.overwrite = input.ConsumeBool()};
  if (input.ConsumeBool()) options.expected_version = input.ConsumeIntegralInRange<int64_t>(0, 4);
  absl::StatusOr<TensorStore::Upload> upload = store.BeginUpload(ns, name, dtype, shape, options);
  if (!upload.ok()) {
    tensorops::fuzz::CheckError(upload.status());
    return;
  }
  const std::string data = Elements(input, dtype, upload->bytes());
  // In chunks of the input's choosing; sometimes abandoned before the end.
  size_t offset = 0;
  while (offset < data.size()) {
    const size_t chunk = input.ConsumeIntegralInRange<size_t>(1, data.size() - offset);
    if (!upload->Write(static_cast<int64_t>(offset), std::string_view(data).substr(offset, chunk))
             .ok()) {
      tensorops::fuzz::Fail("an in-order chunk within the tensor was refused");
    }
    offset += chunk;
    if (input.ConsumeIntegralInRange<int>(0, 15) == 0) return;  // abandoned: nothing remains
  }
  absl::StatusOr<int64_t> version = upload->Commit(input.ConsumeBool() ? "u1" : "");
  if (!version.ok()) tensorops::fuzz::CheckError(version.status());
}

void UpdateInPlace(FuzzedDataProvider& input, TensorStore& store, const char* ns,
                   const char* name) {
  absl::StatusOr<TensorStore::UpdateHandle> update =
      store.Update(ns, name, std::nullopt, input.ConsumeBool() ? "u2" : "");
  if (!update.ok()) {
    tensorops::fuzz::CheckError(update.status());
    return;
  }
  if (update->already_applied().has_value()) return;
  const std::string data = Elements(input, update->dtype(), update->bytes());
  std::memcpy(update->view().data(), data.data(), data.size());
  absl::StatusOr<int64_t> version = update->Commit(input.ConsumeBool() ? "u3" : "");
  if (!version.ok()) tensorops::fuzz::CheckError(version.status());
}

// StoredOp runs a Gather or a Scatter whose input is a stored tensor, its result stored under a
// name or written in place, as the result options say.
void StoredOp(FuzzedDataProvider& input, TensorStore& store, const char* ns, const char* name) {
  tensorops::v1::OpRequest request;
  const bool scatter = input.ConsumeBool();
  tensorops::v1::Tensor* stored_input = scatter ? request.mutable_scatter()->mutable_input()
                                                : request.mutable_gather()->mutable_input();
  stored_input->mutable_stored()->set_name(name);
  tensorops::v1::Tensor* index = scatter ? request.mutable_scatter()->mutable_index()
                                         : request.mutable_gather()->mutable_index();
  index->set_dtype(tensorops::v1::DATA_TYPE_INT64);
  const std::vector<int64_t> index_shape = SmallShape(input);
  index->mutable_shape()->Assign(index_shape.begin(), index_shape.end());
  int64_t count = 1;
  for (const int64_t size : index_shape) count *= size;
  std::vector<int64_t> indices(static_cast<size_t>(count));
  for (int64_t& value : indices) value = input.ConsumeIntegralInRange<int64_t>(-2, 5);
  index->set_data(
      std::string(reinterpret_cast<const char*>(indices.data()), indices.size() * sizeof(int64_t)));
  tensorops::v1::ResultOptions* options = scatter
                                              ? request.mutable_scatter()->mutable_result_options()
                                              : request.mutable_gather()->mutable_result_options();
  if (scatter) {
    request.mutable_scatter()->mutable_value()->set_int_value(1);
    request.mutable_scatter()->set_reduce(tensorops::v1::REDUCTION_SUM);
    options->set_in_place(input.ConsumeBool());
  }
  if (!options->in_place() && input.ConsumeBool()) {
    options->set_store_as(input.PickValueInArray(kNames));
    options->set_overwrite(input.ConsumeBool());
  }
  options->set_return_data(input.ConsumeBool());
  if (input.ConsumeBool()) options->set_update_id(input.ConsumeBool() ? "u1" : "u4");

  tensorops::v1::Tensor result;
  tensorops::fuzz::RunPrepared(
      tensorops::PrepareOp(request, tensorops::fuzz::kLimits, &result, tensorops::InputReuse::kNo,
                           tensorops::StoredTensors{.store = &store, .ns = ns}));
}

// CheckAccounting: with no handle or upload alive, the store holds exactly its tensors' memory.
void CheckAccounting(const TensorStore& store) {
  int64_t stored = 0;
  for (const char* ns : kNamespaces) {
    for (const TensorStore::Metadata& metadata : store.List(ns)) {
      stored += store.FootprintOf(metadata.bytes);
    }
  }
  if (store.used_bytes() != stored || store.used_bytes() > kStoreBytes) {
    tensorops::fuzz::Fail("the store's bytes are not its tensors' bytes");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzedDataProvider input(data, size);
  TensorStore store(kStoreBytes);
  for (int step = 0; step < 24 && input.remaining_bytes() > 0; ++step) {
    const char* ns = input.PickValueInArray(kNamespaces);
    const char* name = input.PickValueInArray(kNames);
    switch (input.ConsumeIntegralInRange<int>(0, 4)) {
      case 0:
        Upload(input, store, ns, name);
        break;
      case 1: {
        absl::StatusOr<TensorStore::ReadHandle> read = store.Read(ns, name);
        if (!read.ok()) {
          tensorops::fuzz::CheckError(read.status());
        } else if (read->view().numel() * tensorops::ItemSize(read->dtype()) != read->bytes()) {
          tensorops::fuzz::Fail("a stored tensor whose bytes are not its shape's");
        }
        break;
      }
      case 2:
        UpdateInPlace(input, store, ns, name);
        break;
      case 3:
        if (const absl::Status deleted = store.Delete(ns, name); !deleted.ok()) {
          tensorops::fuzz::CheckError(deleted);
        }
        break;
      case 4:
        StoredOp(input, store, ns, name);
        break;
    }
    CheckAccounting(store);
  }
  return 0;
}
