// The wire codec: protobuf tensors <-> kernels' TensorView, shared by the server and the C++
// client. It lives beside the .proto files because both ends of the wire use it.
//
//   absl::StatusOr<TensorView> input = wire::DecodeTensor(request.input(), "gather", "input",
//   limits); MutableTensorView out = wire::AllocateTensor(DataType::kFloat32, shape,
//   response.mutable_result());
//
// Decoding never copies: the view points into the message's bytes, so the message must outlive
// the view and stay unmodified.
#ifndef TENSOROPS_PROTO_CODEC_H_
#define TENSOROPS_PROTO_CODEC_H_

#include <cstdint>
#include <limits>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/dtype.h"
#include "kernels/reduction.h"
#include "kernels/scalar.h"
#include "kernels/shape.h"
#include "kernels/tensor.h"
#include "tensorops/v1/ops.pb.h"
#include "tensorops/v1/tensor.pb.h"

namespace tensorops::wire {

// DecodeLimits bound what a decoded tensor may hold; exceeding one gives RESOURCE_EXHAUSTED.
struct DecodeLimits {
  // Largest rank accepted; at most kMaxRank (16).
  int max_rank = kMaxRank;
  // Largest element count of one tensor.
  int64_t max_elements = std::numeric_limits<int64_t>::max();
  // Largest byte size of one tensor.
  int64_t max_bytes = std::numeric_limits<int64_t>::max();
};

// DataTypeFromProto maps a wire dtype to the kernels' one; INVALID_ARGUMENT "<op>: <arg>.dtype =
// <n> is not a known dtype" for DATA_TYPE_UNSPECIFIED and unknown numbers.
absl::StatusOr<DataType> DataTypeFromProto(int proto_dtype, std::string_view op,
                                           std::string_view arg);
// DataTypeToProto maps the kernels' dtype to the wire's.
v1::DataType DataTypeToProto(DataType dtype);

// DecodeTensor validates `tensor` and returns a contiguous view of its bytes. Checks, in order:
// dtype known; rank <= limits.max_rank; every size >= 0; element count and byte size fit int64
// (INVALID_ARGUMENT) and the limits (RESOURCE_EXHAUSTED); data length == numel * itemsize; for
// BOOL, every byte is 0 or 1. Every message names `op` and `arg`.
absl::StatusOr<TensorView> DecodeTensor(const v1::Tensor& tensor, std::string_view op,
                                        std::string_view arg, const DecodeLimits& limits);

// CheckShape runs DecodeTensor's shape checks (rank, sizes, int64 overflow, limits) on a shape of
// `dtype` and returns its element count. The server also applies it to a planned result before
// allocating it, since a broadcast can make a result much larger than the request.
absl::StatusOr<int64_t> CheckShape(DataType dtype, ShapeSpan shape, std::string_view op,
                                   std::string_view arg, const DecodeLimits& limits);

// CheckShapeField is CheckShape for a shape a request sends as a field of its own rather than as a
// tensor's (ScatterNdRequest.shape, the shape of a result to start from zeros); its messages name
// `field` itself: "scatter_nd: shape[1] = -2 is negative (sizes must be >= 0)".
absl::StatusOr<int64_t> CheckShapeField(DataType dtype, ShapeSpan shape, std::string_view op,
                                        std::string_view field, const DecodeLimits& limits);

// AllocateTensor sets `tensor`'s dtype and shape, sizes its data for them, and returns a view to
// write the elements into. The shape must be valid (the kernels' plan produced it).
MutableTensorView AllocateTensor(DataType dtype, ShapeSpan shape, v1::Tensor* tensor);

// EncodeTensor copies the elements of `view`, in row-major order, into `tensor`.
void EncodeTensor(const TensorView& view, v1::Tensor* tensor);

// DecodeScalar converts a wire scalar; INVALID_ARGUMENT naming `op` and `arg` when none of its
// fields is set.
absl::StatusOr<Scalar> DecodeScalar(const v1::Scalar& scalar, std::string_view op,
                                    std::string_view arg);
// EncodeScalar is the inverse of DecodeScalar.
void EncodeScalar(const Scalar& scalar, v1::Scalar* out);

// ReductionFromProto maps a wire reduction; INVALID_ARGUMENT naming `op` for unknown numbers.
absl::StatusOr<Reduction> ReductionFromProto(int proto_reduction, std::string_view op);
// ReductionToProto is the inverse of ReductionFromProto.
v1::Reduction ReductionToProto(Reduction reduction);

}  // namespace tensorops::wire

#endif  // TENSOROPS_PROTO_CODEC_H_
