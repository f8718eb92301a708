// The request builders of client.h: one wire request per op method of Client.
#include <optional>

#include "client/cpp/client.h"
#include "proto/codec.h"

namespace tensorops {
namespace {

// AlongAxis returns a `Request` with the arguments of the ops that index `input` along one axis
// set; the generated messages of those ops all name them input, index and axis.
template <typename Request>
Request AlongAxis(const TensorView& input, int64_t axis, const TensorView& index) {
  Request request;
  wire::EncodeTensor(input, request.mutable_input());
  wire::EncodeTensor(index, request.mutable_index());
  request.set_axis(axis);
  return request;
}

// IntoInput returns a `Request` with the arguments of the ops that write `src` into a part of
// `input` set; their messages all name them input and src.
template <typename Request>
Request IntoInput(const TensorView& input, const TensorView& src) {
  Request request;
  wire::EncodeTensor(input, request.mutable_input());
  wire::EncodeTensor(src, request.mutable_src());
  return request;
}

// EncodeSource sets a Scatter request's source: a tensor goes in src, a scalar in value.
void EncodeSource(const TensorView& src, v1::ScatterRequest* request) {
  wire::EncodeTensor(src, request->mutable_src());
}
void EncodeSource(const Scalar& value, v1::ScatterRequest* request) {
  wire::EncodeScalar(value, request->mutable_value());
}

// ScatterFrom is both MakeScatterRequests: they differ only in the kind of `source`.
template <typename Source>
v1::ScatterRequest ScatterFrom(const TensorView& input, int64_t axis, const TensorView& index,
                               const Source& source, const ScatterOptions& options) {
  v1::ScatterRequest request = AlongAxis<v1::ScatterRequest>(input, axis, index);
  EncodeSource(source, &request);
  request.set_reduce(wire::ReductionToProto(options.reduce));
  request.set_include_self(options.include_self);
  request.set_broadcast(options.broadcast);
  request.set_deterministic(options.deterministic);
  return request;
}

}  // namespace

v1::GatherRequest MakeGatherRequest(const TensorView& input, int64_t axis, const TensorView& index,
                                    const GatherOptions& options) {
  v1::GatherRequest request = AlongAxis<v1::GatherRequest>(input, axis, index);
  request.set_broadcast(options.broadcast);
  return request;
}

v1::ScatterRequest MakeScatterRequest(const TensorView& input, int64_t axis,
                                      const TensorView& index, const TensorView& src,
                                      const ScatterOptions& options) {
  return ScatterFrom(input, axis, index, src, options);
}

v1::ScatterRequest MakeScatterRequest(const TensorView& input, int64_t axis,
                                      const TensorView& index, const Scalar& value,
                                      const ScatterOptions& options) {
  return ScatterFrom(input, axis, index, value, options);
}

v1::IndexSelectRequest MakeIndexSelectRequest(const TensorView& input, int64_t axis,
                                              const TensorView& index) {
  return AlongAxis<v1::IndexSelectRequest>(input, axis, index);
}

v1::IndexReduceRequest MakeIndexReduceRequest(const TensorView& input, int64_t axis,
                                              const TensorView& index, const TensorView& src,
                                              const IndexReduceOptions& options) {
  v1::IndexReduceRequest request = AlongAxis<v1::IndexReduceRequest>(input, axis, index);
  wire::EncodeTensor(src, request.mutable_src());
  request.set_reduce(wire::ReductionToProto(options.reduce));
  request.set_include_self(options.include_self);
  wire::EncodeScalar(options.alpha, request.mutable_alpha());
  return request;
}

v1::SelectScatterRequest MakeSelectScatterRequest(const TensorView& input, const TensorView& src,
                                                  int64_t axis, int64_t index) {
  v1::SelectScatterRequest request = IntoInput<v1::SelectScatterRequest>(input, src);
  request.set_axis(axis);
  request.set_index(index);
  return request;
}

v1::SliceScatterRequest MakeSliceScatterRequest(const TensorView& input, const TensorView& src,
                                                int64_t axis, const SliceOptions& options) {
  v1::SliceScatterRequest request = IntoInput<v1::SliceScatterRequest>(input, src);
  request.set_axis(axis);
  if (options.start.has_value()) request.set_start(*options.start);
  if (options.end.has_value()) request.set_end(*options.end);
  request.set_step(options.step);
  return request;
}

v1::DiagonalScatterRequest MakeDiagonalScatterRequest(const TensorView& input,
                                                      const TensorView& src,
                                                      const DiagonalOptions& options) {
  v1::DiagonalScatterRequest request = IntoInput<v1::DiagonalScatterRequest>(input, src);
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
  request.set_reduce(wire::ReductionToProto(
      options.reduce.value_or(input.has_value() ? Reduction::kAssign : Reduction::kSum)));
  request.set_include_self(options.include_self);
  request.mutable_shape()->Assign(options.shape.begin(), options.shape.end());
  request.set_deterministic(options.deterministic);
  return request;
}

v1::MaskedScatterRequest MakeMaskedScatterRequest(const TensorView& input, const TensorView& mask,
                                                  const TensorView& src) {
  v1::MaskedScatterRequest request = IntoInput<v1::MaskedScatterRequest>(input, src);
  wire::EncodeTensor(mask, request.mutable_mask());
  return request;
}

}  // namespace tensorops
