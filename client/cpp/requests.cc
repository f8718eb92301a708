// The request builders of client.h: one wire request per op method of Client.
#include <optional>

#include "client/cpp/client.h"
#include "proto/codec.h"

namespace tensorops {
namespace {

// FillScatter sets every field of a Scatter request but its source.
void FillScatter(const TensorView& input, int64_t axis, const TensorView& index,
                 const ScatterOptions& options, v1::ScatterRequest* request) {
  wire::EncodeTensor(input, request->mutable_input());
  wire::EncodeTensor(index, request->mutable_index());
  request->set_axis(axis);
  request->set_reduce(wire::ReductionToProto(options.reduce));
  request->set_include_self(options.include_self);
  request->set_broadcast(options.broadcast);
  request->set_deterministic(options.deterministic);
}

}  // namespace

v1::GatherRequest MakeGatherRequest(const TensorView& input, int64_t axis, const TensorView& index,
                                    const GatherOptions& options) {
  v1::GatherRequest request;
  wire::EncodeTensor(input, request.mutable_input());
  wire::EncodeTensor(index, request.mutable_index());
  request.set_axis(axis);
  request.set_broadcast(options.broadcast);
  return request;
}

v1::ScatterRequest MakeScatterRequest(const TensorView& input, int64_t axis,
                                      const TensorView& index, const TensorView& src,
                                      const ScatterOptions& options) {
  v1::ScatterRequest request;
  FillScatter(input, axis, index, options, &request);
  wire::EncodeTensor(src, request.mutable_src());
  return request;
}

v1::ScatterRequest MakeScatterRequest(const TensorView& input, int64_t axis,
                                      const TensorView& index, const Scalar& value,
                                      const ScatterOptions& options) {
  v1::ScatterRequest request;
  FillScatter(input, axis, index, options, &request);
  wire::EncodeScalar(value, request.mutable_value());
  return request;
}

v1::IndexSelectRequest MakeIndexSelectRequest(const TensorView& input, int64_t axis,
                                              const TensorView& index) {
  v1::IndexSelectRequest request;
  wire::EncodeTensor(input, request.mutable_input());
  wire::EncodeTensor(index, request.mutable_index());
  request.set_axis(axis);
  return request;
}

v1::IndexReduceRequest MakeIndexReduceRequest(const TensorView& input, int64_t axis,
                                              const TensorView& index, const TensorView& src,
                                              const IndexReduceOptions& options) {
  v1::IndexReduceRequest request;
  wire::EncodeTensor(input, request.mutable_input());
  wire::EncodeTensor(index, request.mutable_index());
  wire::EncodeTensor(src, request.mutable_src());
  request.set_axis(axis);
  request.set_reduce(wire::ReductionToProto(options.reduce));
  request.set_include_self(options.include_self);
  wire::EncodeScalar(options.alpha, request.mutable_alpha());
  return request;
}

v1::SelectScatterRequest MakeSelectScatterRequest(const TensorView& input, const TensorView& src,
                                                  int64_t axis, int64_t index) {
  v1::SelectScatterRequest request;
  wire::EncodeTensor(input, request.mutable_input());
  wire::EncodeTensor(src, request.mutable_src());
  request.set_axis(axis);
  request.set_index(index);
  return request;
}

v1::SliceScatterRequest MakeSliceScatterRequest(const TensorView& input, const TensorView& src,
                                                int64_t axis, const SliceOptions& options) {
  v1::SliceScatterRequest request;
  wire::EncodeTensor(input, request.mutable_input());
  wire::EncodeTensor(src, request.mutable_src());
  request.set_axis(axis);
  if (options.start.has_value()) request.set_start(*options.start);
  if (options.end.has_value()) request.set_end(*options.end);
  request.set_step(options.step);
  return request;
}

v1::DiagonalScatterRequest MakeDiagonalScatterRequest(const TensorView& input,
                                                      const TensorView& src,
                                                      const DiagonalOptions& options) {
  v1::DiagonalScatterRequest request;
  wire::EncodeTensor(input, request.mutable_input());
  wire::EncodeTensor(src, request.mutable_src());
  request.set_offset(options.offset);
  request.set_axis1(options.axis1);
  request.set_axis2(options.axis2);
  return request;
}

v1::GatherNdRequest MakeGatherNdRequest(const TensorView& input, const TensorView& index,
                                        const GatherNdOptions& options) {
  v1::GatherNdRequest request;
  wire::EncodeTensor(input, request.mutable_input());
  wire::EncodeTensor(index, request.mutable_index());
  request.mutable_axes()->Assign(options.axes.begin(), options.axes.end());
  request.set_batch_dims(options.batch_dims);
  return request;
}

v1::ScatterNdRequest MakeScatterNdRequest(const std::optional<TensorView>& input,
                                          const TensorView& index, const TensorView& src,
                                          const ScatterNdOptions& options) {
  v1::ScatterNdRequest request;
  if (input.has_value()) wire::EncodeTensor(*input, request.mutable_input());
  wire::EncodeTensor(index, request.mutable_index());
  wire::EncodeTensor(src, request.mutable_src());
  request.mutable_axes()->Assign(options.axes.begin(), options.axes.end());
  request.set_batch_dims(options.batch_dims);
  request.set_reduce(wire::ReductionToProto(options.reduce));
  request.set_include_self(options.include_self);
  request.mutable_shape()->Assign(options.shape.begin(), options.shape.end());
  request.set_deterministic(options.deterministic);
  return request;
}

v1::MaskedScatterRequest MakeMaskedScatterRequest(const TensorView& input, const TensorView& mask,
                                                  const TensorView& src) {
  v1::MaskedScatterRequest request;
  wire::EncodeTensor(input, request.mutable_input());
  wire::EncodeTensor(mask, request.mutable_mask());
  wire::EncodeTensor(src, request.mutable_src());
  return request;
}

}  // namespace tensorops
