// The op table's wire half: every operation of tensorops.v1 listed once, with its request and
// response messages and its case in OpRequest's oneof. The server, the C++ client and the CLI
// iterate this list instead of naming each op; the server's half (decode, plan, kernels,
// backward) is server/op_table.h.
//
//   ops::ForEachOp([&]<typename Op>(Op) { names.push_back(ops::Name<Op>()); });
//   ops::VisitOp(request, [&]<typename Op>(Op, const typename Op::Request& op) { ... },
//                [&] { /* no op set */ });
//
// Names are read from the proto descriptors, never typed: Name<Op>() is the OpRequest field
// ("gather_nd"), the op's name in errors, metrics and the CLI; Rpc<Op>() is its method of
// tensorops.v1.TensorOps ("GatherNd").
//
// Adding an op: its messages in ops.proto, its field in OpRequest, its RPC in service.proto, one
// line in AllOps below (tests/op_list_test.cc fails until all four agree).
#ifndef TENSOROPS_PROTO_OP_LIST_H_
#define TENSOROPS_PROTO_OP_LIST_H_

#include <string_view>
#include <utility>

#include "google/protobuf/descriptor.h"
#include "tensorops/v1/generic.pb.h"
#include "tensorops/v1/ops.pb.h"

namespace tensorops::ops {

// WireOp is one op's entry: its messages and its case in OpRequest.
template <typename RequestT, typename ResponseT, v1::OpRequest::OpCase kCaseV>
struct WireOp {
  using Request = RequestT;
  using Response = ResponseT;
  static constexpr v1::OpRequest::OpCase kCase = kCaseV;
};

using Gather = WireOp<v1::GatherRequest, v1::GatherResponse, v1::OpRequest::kGather>;
using Scatter = WireOp<v1::ScatterRequest, v1::ScatterResponse, v1::OpRequest::kScatter>;
using IndexSelect =
    WireOp<v1::IndexSelectRequest, v1::IndexSelectResponse, v1::OpRequest::kIndexSelect>;
using IndexReduce =
    WireOp<v1::IndexReduceRequest, v1::IndexReduceResponse, v1::OpRequest::kIndexReduce>;
using SelectScatter =
    WireOp<v1::SelectScatterRequest, v1::SelectScatterResponse, v1::OpRequest::kSelectScatter>;
using SliceScatter =
    WireOp<v1::SliceScatterRequest, v1::SliceScatterResponse, v1::OpRequest::kSliceScatter>;
using DiagonalScatter = WireOp<v1::DiagonalScatterRequest, v1::DiagonalScatterResponse,
                               v1::OpRequest::kDiagonalScatter>;
using GatherNd = WireOp<v1::GatherNdRequest, v1::GatherNdResponse, v1::OpRequest::kGatherNd>;
using ScatterNd = WireOp<v1::ScatterNdRequest, v1::ScatterNdResponse, v1::OpRequest::kScatterNd>;
using MaskedScatter =
    WireOp<v1::MaskedScatterRequest, v1::MaskedScatterResponse, v1::OpRequest::kMaskedScatter>;

template <typename... Ops>
struct OpList {};

// AllOps is every op, in OpRequest's field order.
using AllOps = OpList<Gather, Scatter, IndexSelect, IndexReduce, SelectScatter, SliceScatter,
                      DiagonalScatter, GatherNd, ScatterNd, MaskedScatter>;

// NameOfCase is the OpRequest field of `op_case` ("gather_nd"); "" for OP_NOT_SET.
std::string_view NameOfCase(v1::OpRequest::OpCase op_case);

// RpcOfCase is the TensorOps method that takes `op_case`'s request ("GatherNd"); "" for
// OP_NOT_SET.
std::string_view RpcOfCase(v1::OpRequest::OpCase op_case);

template <typename Op>
std::string_view Name() {
  return NameOfCase(Op::kCase);
}

template <typename Op>
std::string_view Rpc() {
  return RpcOfCase(Op::kCase);
}

namespace internal {
template <typename F, typename... Ops>
constexpr void ForEach(F&& f, OpList<Ops...>) {
  (f(Ops{}), ...);
}
}  // namespace internal

// ForEachOp calls f(Op{}) for each op of AllOps, in order.
template <typename F>
constexpr void ForEachOp(F&& f) {
  internal::ForEach(std::forward<F>(f), AllOps{});
}

namespace internal {
// FieldOfCase is OpRequest's field for `op_case`; null for OP_NOT_SET.
const google::protobuf::FieldDescriptor* FieldOfCase(v1::OpRequest::OpCase op_case);
}  // namespace internal

// Get is `request`'s message for Op; `request` must hold Op (request.op_case() == Op::kCase).
// Read through reflection so that the entry in AllOps is all an op needs; the field is the
// generated Op::Request, so the downcast is exact.
template <typename Op>
const typename Op::Request& Get(const v1::OpRequest& request) {
  static const google::protobuf::FieldDescriptor* const field = internal::FieldOfCase(Op::kCase);
  return static_cast<const typename Op::Request&>(
      v1::OpRequest::GetReflection()->GetMessage(request, field));
}

// Mutable sets `request` to hold Op and returns its message.
template <typename Op>
typename Op::Request* Mutable(v1::OpRequest* request) {
  static const google::protobuf::FieldDescriptor* const field = internal::FieldOfCase(Op::kCase);
  return static_cast<typename Op::Request*>(
      v1::OpRequest::GetReflection()->MutableMessage(request, field));
}

namespace internal {
template <typename F, typename Unset, typename First, typename... Rest>
decltype(auto) VisitCase(v1::OpRequest::OpCase op_case, F&& f, Unset&& unset,
                         OpList<First, Rest...>) {
  if (op_case == First::kCase) return f(First{});
  if constexpr (sizeof...(Rest) == 0) {
    return unset();
  } else {
    return VisitCase(op_case, std::forward<F>(f), std::forward<Unset>(unset), OpList<Rest...>{});
  }
}
}  // namespace internal

// VisitCase returns f(Op{}) for the op of `op_case`, or unset() for OP_NOT_SET (or a case no
// entry has). f and unset must return the same type.
template <typename F, typename Unset>
decltype(auto) VisitCase(v1::OpRequest::OpCase op_case, F&& f, Unset&& unset) {
  return internal::VisitCase(op_case, std::forward<F>(f), std::forward<Unset>(unset), AllOps{});
}

// VisitOp returns f(Op{}, request's Op message) for the op `request` holds, or unset() when it
// holds none. f and unset must return the same type.
template <typename F, typename Unset>
decltype(auto) VisitOp(const v1::OpRequest& request, F&& f, Unset&& unset) {
  return VisitCase(
      request.op_case(),
      [&]<typename Op>(Op op) -> decltype(auto) { return f(op, Get<Op>(request)); },
      std::forward<Unset>(unset));
}

}  // namespace tensorops::ops

#endif  // TENSOROPS_PROTO_OP_LIST_H_
