package tensorops

import (
	"fmt"

	tensoropsv1 "tensorops/client/go/tensorops/v1"
)

// Reduction says how Scatter-like ops combine a source element with its destination
// (docs/semantics.md, Reductions). The zero value, DefaultReduction, is the op's default: Assign
// for Scatter and ScatterNd, Sum for IndexReduce (index_add, as in the C++ client and the CLI)
// and for ScatterNdZeros (paddle.scatter_nd and tf.scatter_nd, which add duplicates).
// Its values are not the wire's numbers.
type Reduction int32

// The reductions of the wire's tensorops.v1.Reduction, and the op's default.
const (
	DefaultReduction Reduction = iota // The zero value: Assign, or Sum for IndexReduce and ScatterNdZeros.
	Assign                            // The last source in row-major order of the index wins.
	Sum
	Prod
	Mean // Integer dtypes use floor division.
	AMax
	AMin
)

// proto returns the wire's reduction, with DefaultReduction as `byDefault`. A value other than
// the constants above is sent as it is, for the server to reject.
func (r Reduction) proto(byDefault Reduction) tensoropsv1.Reduction {
	if r == DefaultReduction {
		r = byDefault
	}
	if r < Assign || r > AMin {
		return tensoropsv1.Reduction(r)
	}
	return tensoropsv1.Reduction(r - Assign)
}

// Scalar is a single number given in place of a tensor (Scatter's value, IndexReduce's alpha);
// the server converts it to the dtype of the tensor it applies to. The zero Scalar is "absent".
type Scalar struct {
	message *tensoropsv1.Scalar
}

// IntScalar returns an integer Scalar.
func IntScalar(v int64) Scalar {
	return Scalar{&tensoropsv1.Scalar{Value: &tensoropsv1.Scalar_IntValue{IntValue: v}}}
}

// FloatScalar returns a floating Scalar.
func FloatScalar(v float64) Scalar {
	return Scalar{&tensoropsv1.Scalar{Value: &tensoropsv1.Scalar_FloatValue{FloatValue: v}}}
}

// BoolScalar returns a boolean Scalar.
func BoolScalar(v bool) Scalar {
	return Scalar{&tensoropsv1.Scalar{Value: &tensoropsv1.Scalar_BoolValue{BoolValue: v}}}
}

// ComplexScalar returns a complex Scalar.
func ComplexScalar(v complex128) Scalar {
	return Scalar{&tensoropsv1.Scalar{Value: &tensoropsv1.Scalar_ComplexValue{
		ComplexValue: &tensoropsv1.Complex{Real: real(v), Imag: imag(v)}}}}
}

// Proto returns the wire message; nil for the zero Scalar.
func (s Scalar) Proto() *tensoropsv1.Scalar { return s.message }

// Ptr returns a pointer to v, for the optional fields of the options structs:
// ScatterOptions{IncludeSelf: tensorops.Ptr(false)}, SliceScatterOptions{Start: tensorops.Ptr[int64](1)}.
func Ptr[T any](v T) *T { return &v }

// GatherOptions are the optional arguments of Gather.
type GatherOptions struct {
	// Paddle's take_along_axis broadcast: input and index are broadcast against each other on every
	// dimension but the axis.
	Broadcast bool
	// Where the result goes; the zero value returns it.
	Result ResultOptions
}

// ScatterOptions are the optional arguments of Scatter and ScatterValue.
type ScatterOptions struct {
	// DefaultReduction (the zero value) is Assign.
	Reduce Reduction
	// Whether the destination's original value takes part in the reduction; nil means true.
	IncludeSelf *bool
	// Paddle's put_along_axis broadcast.
	Broadcast bool
	// Ask for bitwise reproducible floating Sum/Mean/Prod (the CPU always is).
	Deterministic bool
	// Where the result goes; the zero value returns it. InPlace updates the stored input.
	Result ResultOptions
}

// IndexSelectOptions are the optional arguments of IndexSelect.
type IndexSelectOptions struct {
	// Where the result goes; the zero value returns it.
	Result ResultOptions
}

// IndexReduceOptions are the optional arguments of IndexReduce. The zero value is
// torch.index_add (Sum), the C++ client's and the CLI's default; index_copy is Reduce: Assign.
type IndexReduceOptions struct {
	// DefaultReduction (the zero value) is Sum.
	Reduce Reduction
	// nil means true.
	IncludeSelf *bool
	// The factor of src for Sum; the zero Scalar means 1.
	Alpha Scalar
	// Where the result goes; the zero value returns it. InPlace updates the stored input.
	Result ResultOptions
}

// SelectScatterOptions are the optional arguments of SelectScatter.
type SelectScatterOptions struct {
	// Where the result goes; the zero value returns it. InPlace updates the stored input.
	Result ResultOptions
}

// SliceScatterOptions are the optional arguments of SliceScatter; nil fields are absent.
type SliceScatterOptions struct {
	Start *int64 // nil: from the beginning.
	End   *int64 // nil: to the end.
	Step  *int64 // nil means 1; must be > 0.
	// Where the result goes; the zero value returns it. InPlace updates the stored input.
	Result ResultOptions
}

// DiagonalScatterOptions are the optional arguments of DiagonalScatter.
type DiagonalScatterOptions struct {
	Offset int64
	Axis1  *int64 // nil means 0.
	Axis2  *int64 // nil means 1.
	// Where the result goes; the zero value returns it. InPlace updates the stored input.
	Result ResultOptions
}

// GatherNdOptions are the optional arguments of GatherNd (docs/semantics.md, GatherNd).
type GatherNdOptions struct {
	// Empty: the TensorFlow form. Otherwise the k distinct axes of input the index coordinates
	// address.
	Axes []int64
	// TensorFlow form only: the leading dimensions input and index share.
	BatchDims int64
	// Where the result goes; the zero value returns it.
	Result ResultOptions
}

// ScatterNdOptions are the optional arguments of ScatterNd and ScatterNdZeros. The zero value is
// tf.tensor_scatter_nd_update for ScatterNd (scatter_nd_add is Reduce: Sum), and
// paddle.scatter_nd / tf.scatter_nd for ScatterNdZeros, which sum duplicate indices.
type ScatterNdOptions struct {
	Axes      []int64
	BatchDims int64
	// DefaultReduction (the zero value) is Assign for ScatterNd and Sum for ScatterNdZeros; give
	// Assign (the last source in row-major order of the index wins), AMax, ... to choose.
	Reduce Reduction
	// nil means true.
	IncludeSelf *bool
	// Ask for bitwise reproducible floating Sum/Mean/Prod.
	Deterministic bool
	// Where the result goes; the zero value returns it. InPlace updates the stored input.
	Result ResultOptions
}

// MaskedScatterOptions are the optional arguments of MaskedScatter.
type MaskedScatterOptions struct {
	// Where the result goes; the zero value returns it. InPlace updates the stored input.
	Result ResultOptions
}

// Op is one operation's request, for Run, Backward and streams. Build it with the *Op functions,
// which take the same arguments as the Client method of the same name, or wrap a wire request with
// OpFromProto.
type Op struct {
	message *tensoropsv1.OpRequest
}

// OpFromProto wraps a wire request.
func OpFromProto(message *tensoropsv1.OpRequest) Op { return Op{message} }

// Proto returns the wire request.
func (o Op) Proto() *tensoropsv1.OpRequest { return o.message }

// optional returns the only element of opts, or the zero value when there is none. More than one
// is a mistake in the calling code, and panics.
func optional[T any](function string, opts []T) T {
	var zero T
	switch len(opts) {
	case 0:
		return zero
	case 1:
		return opts[0]
	}
	panic(fmt.Sprintf("tensorops: %s takes at most one options struct, got %d", function, len(opts)))
}

// GatherOp is Gather's request: torch.gather(input, axis, index).
func GatherOp(input Tensor, axis int64, index Tensor, opts ...GatherOptions) Op {
	o := optional("Gather", opts)
	return Op{&tensoropsv1.OpRequest{Op: &tensoropsv1.OpRequest_Gather{Gather: &tensoropsv1.GatherRequest{
		Input: input.Proto(), Index: index.Proto(), Axis: axis, Broadcast: o.Broadcast,
		ResultOptions: o.Result.proto()}}}}
}

func scatterRequest(input Tensor, axis int64, index Tensor, o ScatterOptions) *tensoropsv1.ScatterRequest {
	return &tensoropsv1.ScatterRequest{
		Input: input.Proto(), Index: index.Proto(), Axis: axis,
		Reduce: o.Reduce.proto(Assign), IncludeSelf: o.IncludeSelf,
		Broadcast: o.Broadcast, Deterministic: o.Deterministic, ResultOptions: o.Result.proto(),
	}
}

// ScatterOp is Scatter's request: torch.scatter / scatter_reduce(input, axis, index, src).
func ScatterOp(input Tensor, axis int64, index Tensor, src Tensor, opts ...ScatterOptions) Op {
	request := scatterRequest(input, axis, index, optional("Scatter", opts))
	request.Source = &tensoropsv1.ScatterRequest_Src{Src: src.Proto()}
	return Op{&tensoropsv1.OpRequest{Op: &tensoropsv1.OpRequest_Scatter{Scatter: request}}}
}

// ScatterValueOp is ScatterValue's request: torch.scatter(input, axis, index, value).
func ScatterValueOp(input Tensor, axis int64, index Tensor, value Scalar, opts ...ScatterOptions) Op {
	request := scatterRequest(input, axis, index, optional("ScatterValue", opts))
	request.Source = &tensoropsv1.ScatterRequest_Value{Value: value.Proto()}
	return Op{&tensoropsv1.OpRequest{Op: &tensoropsv1.OpRequest_Scatter{Scatter: request}}}
}

// IndexSelectOp is IndexSelect's request: torch.index_select(input, axis, index).
func IndexSelectOp(input Tensor, axis int64, index Tensor, opts ...IndexSelectOptions) Op {
	o := optional("IndexSelect", opts)
	return Op{&tensoropsv1.OpRequest{Op: &tensoropsv1.OpRequest_IndexSelect{IndexSelect: &tensoropsv1.IndexSelectRequest{
		Input: input.Proto(), Index: index.Proto(), Axis: axis, ResultOptions: o.Result.proto()}}}}
}

// IndexReduceOp is IndexReduce's request: torch.index_add (the default) / index_copy /
// index_reduce(input, axis, index, src).
func IndexReduceOp(input Tensor, axis int64, index Tensor, src Tensor, opts ...IndexReduceOptions) Op {
	o := optional("IndexReduce", opts)
	return Op{&tensoropsv1.OpRequest{Op: &tensoropsv1.OpRequest_IndexReduce{IndexReduce: &tensoropsv1.IndexReduceRequest{
		Input: input.Proto(), Index: index.Proto(), Src: src.Proto(), Axis: axis,
		Reduce: o.Reduce.proto(Sum), IncludeSelf: o.IncludeSelf, Alpha: o.Alpha.Proto(),
		ResultOptions: o.Result.proto()}}}}
}

// SelectScatterOp is SelectScatter's request: torch.select_scatter(input, src, axis, index).
func SelectScatterOp(input Tensor, src Tensor, axis int64, index int64, opts ...SelectScatterOptions) Op {
	o := optional("SelectScatter", opts)
	return Op{&tensoropsv1.OpRequest{Op: &tensoropsv1.OpRequest_SelectScatter{SelectScatter: &tensoropsv1.SelectScatterRequest{
		Input: input.Proto(), Src: src.Proto(), Axis: axis, Index: index, ResultOptions: o.Result.proto()}}}}
}

// SliceScatterOp is SliceScatter's request: torch.slice_scatter(input, src, axis, start, end,
// step).
func SliceScatterOp(input Tensor, src Tensor, axis int64, opts ...SliceScatterOptions) Op {
	o := optional("SliceScatter", opts)
	return Op{&tensoropsv1.OpRequest{Op: &tensoropsv1.OpRequest_SliceScatter{SliceScatter: &tensoropsv1.SliceScatterRequest{
		Input: input.Proto(), Src: src.Proto(), Axis: axis, Start: o.Start, End: o.End, Step: o.Step,
		ResultOptions: o.Result.proto()}}}}
}

// DiagonalScatterOp is DiagonalScatter's request: torch.diagonal_scatter(input, src, offset,
// axis1, axis2).
func DiagonalScatterOp(input Tensor, src Tensor, opts ...DiagonalScatterOptions) Op {
	o := optional("DiagonalScatter", opts)
	return Op{&tensoropsv1.OpRequest{Op: &tensoropsv1.OpRequest_DiagonalScatter{DiagonalScatter: &tensoropsv1.DiagonalScatterRequest{
		Input: input.Proto(), Src: src.Proto(), Offset: o.Offset, Axis1: o.Axis1, Axis2: o.Axis2,
		ResultOptions: o.Result.proto()}}}}
}

// GatherNdOp is GatherNd's request: tf.gather_nd(input, index, batch_dims), or the axes form.
func GatherNdOp(input Tensor, index Tensor, opts ...GatherNdOptions) Op {
	o := optional("GatherNd", opts)
	return Op{&tensoropsv1.OpRequest{Op: &tensoropsv1.OpRequest_GatherNd{GatherNd: &tensoropsv1.GatherNdRequest{
		Input: input.Proto(), Index: index.Proto(), Axes: o.Axes, BatchDims: o.BatchDims,
		ResultOptions: o.Result.proto()}}}}
}

// scatterNdRequest returns a ScatterNd request without its input or shape, its reduction
// o.Reduce, or byDefault for DefaultReduction.
func scatterNdRequest(index Tensor, src Tensor, o ScatterNdOptions, byDefault Reduction) *tensoropsv1.ScatterNdRequest {
	return &tensoropsv1.ScatterNdRequest{
		Index: index.Proto(), Src: src.Proto(), Axes: o.Axes, BatchDims: o.BatchDims,
		Reduce: o.Reduce.proto(byDefault), IncludeSelf: o.IncludeSelf, Deterministic: o.Deterministic,
		ResultOptions: o.Result.proto(),
	}
}

// ScatterNdOp is ScatterNd's request: tf.tensor_scatter_nd_update / add / min / max(input, index,
// src), or the axes form.
func ScatterNdOp(input Tensor, index Tensor, src Tensor, opts ...ScatterNdOptions) Op {
	request := scatterNdRequest(index, src, optional("ScatterNd", opts), Assign)
	request.Input = input.Proto()
	return Op{&tensoropsv1.OpRequest{Op: &tensoropsv1.OpRequest_ScatterNd{ScatterNd: request}}}
}

// ScatterNdZerosOp is ScatterNdZeros's request: paddle.scatter_nd(index, src, shape) (and
// tf.scatter_nd), adding src into zeros of `shape` in src's dtype, duplicate indices summed; a
// Reduce other than DefaultReduction combines them so instead (Assign: the last one wins).
func ScatterNdZerosOp(shape []int64, index Tensor, src Tensor, opts ...ScatterNdOptions) Op {
	request := scatterNdRequest(index, src, optional("ScatterNdZeros", opts), Sum)
	request.Shape = append([]int64{}, shape...)
	return Op{&tensoropsv1.OpRequest{Op: &tensoropsv1.OpRequest_ScatterNd{ScatterNd: request}}}
}

// MaskedScatterOp is MaskedScatter's request: torch.masked_scatter(input, mask, src).
func MaskedScatterOp(input Tensor, mask Tensor, src Tensor, opts ...MaskedScatterOptions) Op {
	o := optional("MaskedScatter", opts)
	return Op{&tensoropsv1.OpRequest{Op: &tensoropsv1.OpRequest_MaskedScatter{MaskedScatter: &tensoropsv1.MaskedScatterRequest{
		Input: input.Proto(), Mask: mask.Proto(), Src: src.Proto(), ResultOptions: o.Result.proto()}}}}
}
