package tensorops_test

import (
	"context"
	"errors"
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"tensorops/client/go/tensorops"
	tensoropsv1 "tensorops/client/go/tensorops/v1"
)

// callTimeout bounds every call of these tests, so that a hung server fails a test rather than
// hanging it; no test asserts how long anything takes.
const callTimeout = 30 * time.Second

func dial(t *testing.T, s *server, opts ...tensorops.Option) *tensorops.Client {
	t.Helper()
	client, err := tensorops.Dial(s.address, opts...)
	if err != nil {
		t.Fatalf("Dial(%s): %v", s.address, err)
	}
	t.Cleanup(func() { client.Close() })
	return client
}

// startClient starts a server with `flags` and returns a client of it.
func startClient(t *testing.T, flags ...string) *tensorops.Client {
	t.Helper()
	return dial(t, startServer(t, flags...))
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	t.Cleanup(cancel)
	return ctx
}

// expectTensor fails unless got has the dtype and shape and, read with the accessor of that
// dtype, the elements `want` (a slice of the matching Go type).
func expectTensor(t *testing.T, what string, got tensorops.Tensor, err error, dtype tensorops.DType, shape []int64, want interface{}) {
	t.Helper()
	if err != nil {
		t.Errorf("%s: %v", what, err)
		return
	}
	if got.DType() != dtype || !reflect.DeepEqual(got.Shape(), shape) {
		t.Errorf("%s: got a %v tensor, want %v%v", what, got, dtype, shape)
		return
	}
	var elements interface{}
	switch dtype {
	case tensorops.Bool:
		elements = got.Bools()
	case tensorops.Uint8:
		elements = got.Uint8s()
	case tensorops.Int8:
		elements = got.Int8s()
	case tensorops.Int16:
		elements = got.Int16s()
	case tensorops.Int32:
		elements = got.Int32s()
	case tensorops.Int64:
		elements = got.Int64s()
	case tensorops.Float16:
		elements = got.Float16Bits()
	case tensorops.BFloat16:
		elements = got.BFloat16Bits()
	case tensorops.Float32:
		elements = got.Float32s()
	case tensorops.Float64:
		elements = got.Float64s()
	case tensorops.Complex64:
		elements = got.Complex64s()
	case tensorops.Complex128:
		elements = got.Complex128s()
	}
	if !reflect.DeepEqual(elements, want) {
		t.Errorf("%s: got %v, want %v", what, elements, want)
	}
}

// expectStatus fails unless err is a gRPC status error with `code` whose message contains every
// one of `substrings`.
func expectStatus(t *testing.T, what string, err error, code codes.Code, substrings ...string) {
	t.Helper()
	st, ok := status.FromError(err)
	if err == nil || !ok {
		t.Errorf("%s: got error %v, want a status error with code %v", what, err, code)
		return
	}
	if st.Code() != code {
		t.Errorf("%s: got code %v (%q), want %v", what, st.Code(), st.Message(), code)
	}
	for _, substring := range substrings {
		if !strings.Contains(st.Message(), substring) {
			t.Errorf("%s: message %q does not contain %q", what, st.Message(), substring)
		}
	}
}

func TestOps(t *testing.T) {
	client := startClient(t)
	ctx := testContext(t)

	t.Run("Gather", func(t *testing.T) {
		// torch.gather(torch.tensor([[1, 2], [3, 4]]), 1, torch.tensor([[0, 0], [1, 0]]))
		input := tensorops.FromFloat32([]float32{1, 2, 3, 4}, 2, 2)
		out, err := client.Gather(ctx, input, 1, tensorops.FromInt64([]int64{0, 0, 1, 0}, 2, 2))
		expectTensor(t, "gather", out, err, tensorops.Float32, []int64{2, 2}, []float32{1, 1, 4, 3})
		out, err = client.Gather(ctx, input, 0, tensorops.FromInt32([]int32{1, 0}, 1, 2))
		expectTensor(t, "gather int32 index axis 0", out, err, tensorops.Float32, []int64{1, 2}, []float32{3, 2})
		// Paddle's take_along_axis broadcast: an index of one row serves both rows.
		out, err = client.Gather(ctx, input, 1, tensorops.FromInt64([]int64{1, 1, 0}, 1, 3),
			tensorops.GatherOptions{Broadcast: true})
		expectTensor(t, "gather broadcast", out, err, tensorops.Float32, []int64{2, 3}, []float32{2, 2, 1, 4, 4, 3})
	})

	t.Run("Scatter", func(t *testing.T) {
		// torch.zeros(3, 5).scatter_(0, torch.tensor([[0, 1, 2, 0]]), torch.arange(1, 11).view(2, 5))
		src := tensorops.FromInt64([]int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 2, 5)
		zeros := tensorops.FromInt64(make([]int64, 15), 3, 5)
		out, err := client.Scatter(ctx, zeros, 0, tensorops.FromInt64([]int64{0, 1, 2, 0}, 1, 4), src)
		expectTensor(t, "scatter", out, err, tensorops.Int64, []int64{3, 5},
			[]int64{1, 0, 0, 4, 0, 0, 2, 0, 0, 0, 0, 0, 3, 0, 0})

		// torch.full((2, 4), 2.).scatter_(1, torch.tensor([[2], [3]]), 1.25)
		twos := tensorops.FromFloat64([]float64{2, 2, 2, 2, 2, 2, 2, 2}, 2, 4)
		out, err = client.ScatterValue(ctx, twos, 1, tensorops.FromInt64([]int64{2, 3}, 2, 1),
			tensorops.FloatScalar(1.25))
		expectTensor(t, "scatter value", out, err, tensorops.Float64, []int64{2, 4},
			[]float64{2, 2, 1.25, 2, 2, 2, 2, 1.25})
		// The same with reduce=multiply.
		out, err = client.ScatterValue(ctx, twos, 1, tensorops.FromInt64([]int64{2, 3}, 2, 1),
			tensorops.FloatScalar(1.25), tensorops.ScatterOptions{Reduce: tensorops.Prod})
		expectTensor(t, "scatter value prod", out, err, tensorops.Float64, []int64{2, 4},
			[]float64{2, 2, 2.5, 2, 2, 2, 2, 2.5})

		// torch.scatter_reduce's documentation example.
		input := tensorops.FromFloat32([]float32{1, 2, 3, 4})
		index := tensorops.FromInt64([]int64{0, 1, 0, 1, 2, 1})
		values := tensorops.FromFloat32([]float32{1, 2, 3, 4, 5, 6})
		out, err = client.Scatter(ctx, input, 0, index, values, tensorops.ScatterOptions{Reduce: tensorops.Sum})
		expectTensor(t, "scatter_reduce sum", out, err, tensorops.Float32, []int64{4}, []float32{5, 14, 8, 4})
		out, err = client.Scatter(ctx, input, 0, index, values,
			tensorops.ScatterOptions{Reduce: tensorops.AMax, IncludeSelf: tensorops.Ptr(false)})
		expectTensor(t, "scatter_reduce amax", out, err, tensorops.Float32, []int64{4}, []float32{3, 6, 5, 4})
		out, err = client.Scatter(ctx, input, 0, index, values,
			tensorops.ScatterOptions{Reduce: tensorops.Mean, Deterministic: true})
		expectTensor(t, "scatter_reduce mean", out, err, tensorops.Float32, []int64{4}, []float32{5.0 / 3, 3.5, 4, 4})
	})

	t.Run("IndexSelect", func(t *testing.T) {
		input := tensorops.FromInt32([]int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 3, 4)
		out, err := client.IndexSelect(ctx, input, 0, tensorops.FromInt64([]int64{0, 2}))
		expectTensor(t, "index_select axis 0", out, err, tensorops.Int32, []int64{2, 4},
			[]int32{0, 1, 2, 3, 8, 9, 10, 11})
		out, err = client.IndexSelect(ctx, input, 1, tensorops.FromInt32([]int32{3, 0, 3}))
		expectTensor(t, "index_select axis 1", out, err, tensorops.Int32, []int64{3, 3},
			[]int32{3, 0, 3, 7, 4, 7, 11, 8, 11})
	})

	t.Run("IndexReduce", func(t *testing.T) {
		// torch.index_add_'s documentation example: ones(5, 3), index [0, 4, 2], t = 1..9 as 3x3.
		ones := tensorops.FromFloat32([]float32{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, 5, 3)
		index := tensorops.FromInt64([]int64{0, 4, 2})
		source := tensorops.FromFloat32([]float32{1, 2, 3, 4, 5, 6, 7, 8, 9}, 3, 3)
		out, err := client.IndexReduce(ctx, ones, 0, index, source, tensorops.IndexReduceOptions{Reduce: tensorops.Sum})
		expectTensor(t, "index_add", out, err, tensorops.Float32, []int64{5, 3},
			[]float32{2, 3, 4, 1, 1, 1, 8, 9, 10, 1, 1, 1, 5, 6, 7})
		out, err = client.IndexReduce(ctx, ones, 0, index, source,
			tensorops.IndexReduceOptions{Reduce: tensorops.Sum, Alpha: tensorops.IntScalar(2)})
		expectTensor(t, "index_add alpha 2", out, err, tensorops.Float32, []int64{5, 3},
			[]float32{3, 5, 7, 1, 1, 1, 15, 17, 19, 1, 1, 1, 9, 11, 13})
		// index_add: the default, as in the C++ client and the CLI.
		out, err = client.IndexReduce(ctx, ones, 0, index, source)
		expectTensor(t, "index_add by default", out, err, tensorops.Float32, []int64{5, 3},
			[]float32{2, 3, 4, 1, 1, 1, 8, 9, 10, 1, 1, 1, 5, 6, 7})
		out, err = client.IndexReduce(ctx, ones, 0, index, source, tensorops.IndexReduceOptions{Alpha: tensorops.IntScalar(2)})
		expectTensor(t, "index_add alpha 2 by default", out, err, tensorops.Float32, []int64{5, 3},
			[]float32{3, 5, 7, 1, 1, 1, 15, 17, 19, 1, 1, 1, 9, 11, 13})
		// index_copy: Assign.
		out, err = client.IndexReduce(ctx, ones, 0, index, source, tensorops.IndexReduceOptions{Reduce: tensorops.Assign})
		expectTensor(t, "index_copy", out, err, tensorops.Float32, []int64{5, 3},
			[]float32{1, 2, 3, 1, 1, 1, 7, 8, 9, 1, 1, 1, 4, 5, 6})
		// torch.index_reduce_'s documentation example: full((5, 3), 2), index [0, 4, 2, 0].
		twos := tensorops.FromFloat32([]float32{2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2}, 5, 3)
		source = tensorops.FromFloat32([]float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 4, 3)
		index = tensorops.FromInt64([]int64{0, 4, 2, 0})
		out, err = client.IndexReduce(ctx, twos, 0, index, source, tensorops.IndexReduceOptions{Reduce: tensorops.Prod})
		expectTensor(t, "index_reduce prod", out, err, tensorops.Float32, []int64{5, 3},
			[]float32{20, 44, 72, 2, 2, 2, 14, 16, 18, 2, 2, 2, 8, 10, 12})
		out, err = client.IndexReduce(ctx, twos, 0, index, source,
			tensorops.IndexReduceOptions{Reduce: tensorops.Prod, IncludeSelf: tensorops.Ptr(false)})
		expectTensor(t, "index_reduce prod without self", out, err, tensorops.Float32, []int64{5, 3},
			[]float32{10, 22, 36, 2, 2, 2, 7, 8, 9, 2, 2, 2, 4, 5, 6})
	})

	t.Run("SelectScatter", func(t *testing.T) {
		// torch.select_scatter(torch.zeros(2, 2), torch.ones(2), 0, 0), and index -1 on axis 1.
		zeros := tensorops.FromFloat32([]float32{0, 0, 0, 0}, 2, 2)
		ones := tensorops.FromFloat32([]float32{1, 1})
		out, err := client.SelectScatter(ctx, zeros, ones, 0, 0)
		expectTensor(t, "select_scatter", out, err, tensorops.Float32, []int64{2, 2}, []float32{1, 1, 0, 0})
		out, err = client.SelectScatter(ctx, zeros, ones, 1, -1)
		expectTensor(t, "select_scatter -1", out, err, tensorops.Float32, []int64{2, 2}, []float32{0, 1, 0, 1})
	})

	t.Run("SliceScatter", func(t *testing.T) {
		// torch.slice_scatter's documentation examples on zeros(8, 8), made 4x4 here.
		zeros := tensorops.FromInt16(make([]int16, 16), 4, 4)
		out, err := client.SliceScatter(ctx, zeros, tensorops.FromInt16([]int16{1, 1, 1, 1}, 1, 4), 0,
			tensorops.SliceScatterOptions{Start: tensorops.Ptr[int64](3)})
		expectTensor(t, "slice_scatter start", out, err, tensorops.Int16, []int64{4, 4},
			[]int16{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1})
		out, err = client.SliceScatter(ctx, zeros, tensorops.FromInt16([]int16{1, 2, 3, 4, 5, 6, 7, 8}, 4, 2), 1,
			tensorops.SliceScatterOptions{Start: tensorops.Ptr[int64](0), End: tensorops.Ptr[int64](4), Step: tensorops.Ptr[int64](2)})
		expectTensor(t, "slice_scatter step", out, err, tensorops.Int16, []int64{4, 4},
			[]int16{1, 0, 2, 0, 3, 0, 4, 0, 5, 0, 6, 0, 7, 0, 8, 0})
	})

	t.Run("DiagonalScatter", func(t *testing.T) {
		zeros := tensorops.FromFloat64(make([]float64, 9), 3, 3)
		out, err := client.DiagonalScatter(ctx, zeros, tensorops.FromFloat64([]float64{1, 2, 3}))
		expectTensor(t, "diagonal_scatter", out, err, tensorops.Float64, []int64{3, 3},
			[]float64{1, 0, 0, 0, 2, 0, 0, 0, 3})
		out, err = client.DiagonalScatter(ctx, zeros, tensorops.FromFloat64([]float64{1, 2}),
			tensorops.DiagonalScatterOptions{Offset: 1})
		expectTensor(t, "diagonal_scatter offset 1", out, err, tensorops.Float64, []int64{3, 3},
			[]float64{0, 1, 0, 0, 0, 2, 0, 0, 0})
		out, err = client.DiagonalScatter(ctx, zeros, tensorops.FromFloat64([]float64{1, 2}),
			tensorops.DiagonalScatterOptions{Offset: 1, Axis1: tensorops.Ptr[int64](1), Axis2: tensorops.Ptr[int64](0)})
		expectTensor(t, "diagonal_scatter axes swapped", out, err, tensorops.Float64, []int64{3, 3},
			[]float64{0, 0, 0, 1, 0, 0, 0, 2, 0})
	})

	t.Run("GatherNd", func(t *testing.T) {
		// tf.gather_nd's documentation examples with numbers for letters.
		params := tensorops.FromInt64([]int64{1, 2, 3, 4}, 2, 2)
		out, err := client.GatherNd(ctx, params, tensorops.FromInt64([]int64{0, 0, 1, 1}, 2, 2))
		expectTensor(t, "gather_nd elements", out, err, tensorops.Int64, []int64{2}, []int64{1, 4})
		out, err = client.GatherNd(ctx, params, tensorops.FromInt64([]int64{1, 0}, 2, 1))
		expectTensor(t, "gather_nd rows", out, err, tensorops.Int64, []int64{2, 2}, []int64{3, 4, 1, 2})
		batched := tensorops.FromInt64([]int64{1, 2, 3, 4, 5, 6, 7, 8}, 2, 2, 2)
		out, err = client.GatherNd(ctx, batched, tensorops.FromInt64([]int64{1, 0}, 2, 1),
			tensorops.GatherNdOptions{BatchDims: 1})
		expectTensor(t, "gather_nd batch_dims 1", out, err, tensorops.Int64, []int64{2, 2}, []int64{3, 4, 5, 6})
		// The axes form with one axis is torch.gather along it.
		input := tensorops.FromInt64([]int64{1, 2, 3, 4, 5, 6}, 2, 3)
		out, err = client.GatherNd(ctx, input, tensorops.FromInt64([]int64{1, 0, 1}, 1, 3, 1),
			tensorops.GatherNdOptions{Axes: []int64{0}})
		expectTensor(t, "gather_nd axes", out, err, tensorops.Int64, []int64{1, 3}, []int64{4, 2, 6})
	})

	t.Run("ScatterNd", func(t *testing.T) {
		// tf.tensor_scatter_nd_update / _add and tf.scatter_nd's documentation examples.
		index := tensorops.FromInt32([]int32{4, 3, 1, 7}, 4, 1)
		updates := tensorops.FromInt64([]int64{9, 10, 11, 12})
		out, err := client.ScatterNd(ctx, tensorops.FromInt64([]int64{1, 1, 1, 1, 1, 1, 1, 1}), index, updates)
		expectTensor(t, "tensor_scatter_nd_update", out, err, tensorops.Int64, []int64{8},
			[]int64{1, 11, 1, 10, 9, 1, 1, 12})
		out, err = client.ScatterNd(ctx, tensorops.FromInt64([]int64{1, 2, 3, 4, 5, 6, 7, 8}), index, updates,
			tensorops.ScatterNdOptions{Reduce: tensorops.Sum})
		expectTensor(t, "tensor_scatter_nd_add", out, err, tensorops.Int64, []int64{8},
			[]int64{1, 13, 3, 14, 14, 6, 7, 20})
		out, err = client.ScatterNdZeros(ctx, []int64{8}, index, updates)
		expectTensor(t, "scatter_nd", out, err, tensorops.Int64, []int64{8}, []int64{0, 11, 0, 10, 9, 0, 0, 12})
		// paddle.scatter_nd sums duplicate indices; Assign keeps the last.
		duplicates, src := tensorops.FromInt64([]int64{0, 0, 2}, 3, 1), tensorops.FromFloat32([]float32{1, 2, 3})
		out, err = client.ScatterNdZeros(ctx, []int64{4}, duplicates, src)
		expectTensor(t, "scatter_nd with duplicates", out, err, tensorops.Float32, []int64{4}, []float32{3, 0, 3, 0})
		out, err = client.ScatterNdZeros(ctx, []int64{4}, duplicates, src, tensorops.ScatterNdOptions{Reduce: tensorops.Assign})
		expectTensor(t, "scatter_nd with duplicates, Assign", out, err, tensorops.Float32, []int64{4}, []float32{2, 0, 3, 0})
		out, err = client.ScatterNd(ctx, tensorops.FromFloat32([]float32{5, 5, 5, 5}), duplicates, src)
		expectTensor(t, "tensor_scatter_nd_update with duplicates", out, err, tensorops.Float32, []int64{4}, []float32{2, 5, 3, 5})
	})

	t.Run("MaskedScatter", func(t *testing.T) {
		// torch.masked_scatter's documentation example, and a mask broadcast over the rows.
		zeros := tensorops.FromInt64(make([]int64, 10), 2, 5)
		source := tensorops.FromInt64([]int64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, 2, 5)
		mask := tensorops.FromBool([]bool{false, false, false, true, true, true, true, false, true, true}, 2, 5)
		out, err := client.MaskedScatter(ctx, zeros, mask, source)
		expectTensor(t, "masked_scatter", out, err, tensorops.Int64, []int64{2, 5}, []int64{0, 0, 0, 0, 1, 2, 3, 0, 4, 5})
		out, err = client.MaskedScatter(ctx, zeros, tensorops.FromBool([]bool{true, false, false, false, true}), source)
		expectTensor(t, "masked_scatter broadcast", out, err, tensorops.Int64, []int64{2, 5}, []int64{0, 0, 0, 0, 1, 2, 0, 0, 0, 3})
	})

	t.Run("Run", func(t *testing.T) {
		out, err := client.Run(ctx, tensorops.GatherOp(tensorops.FromFloat32([]float32{1, 2, 3, 4}, 2, 2), 1,
			tensorops.FromInt64([]int64{0, 0, 1, 0}, 2, 2)))
		expectTensor(t, "run gather", out, err, tensorops.Float32, []int64{2, 2}, []float32{1, 1, 4, 3})
	})
}

// TestEveryDType sends each dtype through IndexSelect (which moves elements without arithmetic),
// so the wire encoding of every constructor and accessor meets the server's.
func TestEveryDType(t *testing.T) {
	client := startClient(t)
	ctx := testContext(t)
	index := tensorops.FromInt64([]int64{2, 0})
	cases := []struct {
		input tensorops.Tensor
		want  interface{}
	}{
		{tensorops.FromBool([]bool{true, false, false}), []bool{false, true}},
		{tensorops.FromUint8([]uint8{1, 2, 255}), []uint8{255, 1}},
		{tensorops.FromInt8([]int8{-1, 2, -128}), []int8{-128, -1}},
		{tensorops.FromInt16([]int16{-300, 2, 32767}), []int16{32767, -300}},
		{tensorops.FromInt32([]int32{-70000, 2, 1 << 30}), []int32{1 << 30, -70000}},
		{tensorops.FromInt64([]int64{-1 << 40, 2, 1 << 62}), []int64{1 << 62, -1 << 40}},
		// float16 1.0 = 0x3c00, -2.0 = 0xc000; bfloat16 1.0 = 0x3f80, -2.0 = 0xc000.
		{tensorops.FromFloat16Bits([]uint16{0x3c00, 0, 0xc000}), []uint16{0xc000, 0x3c00}},
		{tensorops.FromBFloat16Bits([]uint16{0x3f80, 0, 0xc000}), []uint16{0xc000, 0x3f80}},
		{tensorops.FromFloat32([]float32{1.5, 2, -3.25}), []float32{-3.25, 1.5}},
		{tensorops.FromFloat64([]float64{1e300, 2, -1e-300}), []float64{-1e-300, 1e300}},
		{tensorops.FromComplex64([]complex64{1 + 2i, 0, -3.5 - 4i}), []complex64{-3.5 - 4i, 1 + 2i}},
		{tensorops.FromComplex128([]complex128{1e200 + 2i, 0, -3 - 4e-200i}), []complex128{-3 - 4e-200i, 1e200 + 2i}},
	}
	for _, c := range cases {
		out, err := client.IndexSelect(ctx, c.input, 0, index)
		expectTensor(t, "index_select "+c.input.DType().String(), out, err, c.input.DType(), []int64{2}, c.want)
	}
	// A scalar value converted to the input's dtype.
	out, err := client.ScatterValue(ctx, tensorops.FromComplex64([]complex64{0, 0}), 0,
		tensorops.FromInt64([]int64{1}), tensorops.ComplexScalar(1-1i))
	expectTensor(t, "scatter complex value", out, err, tensorops.Complex64, []int64{2}, []complex64{0, 1 - 1i})
	out, err = client.ScatterValue(ctx, tensorops.FromBool([]bool{false, false}), 0,
		tensorops.FromInt64([]int64{0}), tensorops.BoolScalar(true))
	expectTensor(t, "scatter bool value", out, err, tensorops.Bool, []int64{2}, []bool{true, false})
}

func TestBadRequestsGiveInvalidArgument(t *testing.T) {
	client := startClient(t)
	ctx := testContext(t)
	input := tensorops.FromInt64([]int64{1, 2, 3, 4}, 2, 2)

	_, err := client.Gather(ctx, input, 1, tensorops.FromInt64([]int64{0, 0, 5, 0}, 2, 2))
	expectStatus(t, "gather out of range", err, codes.InvalidArgument,
		"gather: index[1, 0] = 5 is out of range for axis 1 of input with size 2")
	_, err = client.Gather(ctx, input, 2, tensorops.FromInt64([]int64{0, 0, 0, 0}, 2, 2))
	expectStatus(t, "gather axis", err, codes.InvalidArgument, "gather", "axis = 2")
	_, err = client.Scatter(ctx, input, 0, tensorops.FromInt64([]int64{0, 1}, 1, 2), tensorops.FromFloat32([]float32{7, 8}, 1, 2))
	expectStatus(t, "scatter dtype", err, codes.InvalidArgument, "scatter", "float32")
	_, err = client.IndexSelect(ctx, input, 1, tensorops.FromInt64([]int64{0, 7}))
	expectStatus(t, "index_select", err, codes.InvalidArgument, "index_select: index[1] = 7 is out of range for axis 1")
	_, err = client.SliceScatter(ctx, input, input, 0, tensorops.SliceScatterOptions{Step: tensorops.Ptr[int64](0)})
	expectStatus(t, "slice_scatter step", err, codes.InvalidArgument, "slice_scatter: step = 0")
	_, err = client.MaskedScatter(ctx, input, tensorops.FromBool([]bool{true, true, true, true}, 2, 2),
		tensorops.FromInt64([]int64{1, 2, 3}))
	expectStatus(t, "masked_scatter", err, codes.InvalidArgument,
		"masked_scatter: src has 3 elements but mask has 4 true positions")
	_, err = client.ScatterNd(ctx, tensorops.Tensor{}, tensorops.FromInt64([]int64{0}, 1, 1), tensorops.FromInt64([]int64{1}))
	expectStatus(t, "scatter_nd without input", err, codes.InvalidArgument, "scatter_nd: neither input nor shape")
	// The server keeps serving.
	out, err := client.Gather(ctx, input, 1, tensorops.FromInt64([]int64{1, 1, 0, 0}, 2, 2))
	expectTensor(t, "gather after errors", out, err, tensorops.Int64, []int64{2, 2}, []int64{2, 2, 3, 3})
}

func TestDeadlineAndCancellation(t *testing.T) {
	client := startClient(t)
	input := tensorops.FromFloat32([]float32{1, 2, 3, 4}, 2, 2)
	index := tensorops.FromInt64([]int64{0, 0, 1, 0}, 2, 2)

	expired, cancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-expired.Done()
	_, err := client.Gather(expired, input, 1, index)
	expectStatus(t, "expired deadline", err, codes.DeadlineExceeded)

	cancelled, cancelNow := context.WithCancel(context.Background())
	cancelNow()
	_, err = client.ScatterNdZeros(cancelled, []int64{2}, tensorops.FromInt64([]int64{0}, 1, 1), tensorops.FromFloat32([]float32{1}))
	expectStatus(t, "cancelled", err, codes.Canceled)
}

func TestRunStream(t *testing.T) {
	client := startClient(t)
	ctx := testContext(t)
	stream, err := client.RunStream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	input := tensorops.FromFloat32([]float32{1, 2, 3, 4}, 2, 2)
	ops := map[uint64]tensorops.Op{
		10: tensorops.GatherOp(input, 1, tensorops.FromInt64([]int64{0, 0, 1, 0}, 2, 2)),
		11: tensorops.IndexSelectOp(input, 0, tensorops.FromInt64([]int64{1})),
		12: tensorops.GatherOp(input, 1, tensorops.FromInt64([]int64{0, 9, 0, 0}, 2, 2)), // Out of range.
		13: tensorops.ScatterValueOp(input, 0, tensorops.FromInt64([]int64{1, 0}, 1, 2), tensorops.FloatScalar(0)),
	}
	go func() {
		for _, id := range []uint64{10, 11, 12, 13} {
			if err := stream.Send(id, ops[id]); err != nil {
				return // Recv reports the stream's status.
			}
		}
		stream.CloseSend()
	}()
	results := map[uint64]tensorops.StreamResult{}
	for {
		result, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("stream failed after %d results: %v", len(results), err)
		}
		if _, seen := results[result.RequestID]; seen {
			t.Errorf("request %d answered twice", result.RequestID)
		}
		results[result.RequestID] = result
	}
	if len(results) != len(ops) {
		t.Fatalf("got %d results, want %d: %v", len(results), len(ops), results)
	}
	expectTensor(t, "stream 10", results[10].Result, results[10].Err, tensorops.Float32, []int64{2, 2}, []float32{1, 1, 4, 3})
	expectTensor(t, "stream 11", results[11].Result, results[11].Err, tensorops.Float32, []int64{1, 2}, []float32{3, 4})
	expectStatus(t, "stream 12", results[12].Err, codes.InvalidArgument, "gather: index[0, 1] = 9 is out of range")
	expectTensor(t, "stream 13", results[13].Result, results[13].Err, tensorops.Float32, []int64{2, 2}, []float32{1, 0, 0, 4})
}

func TestBackward(t *testing.T) {
	client := startClient(t)
	ctx := testContext(t)
	// d/d input of gather(input, 1, index) . grad: the grad scattered back with sum.
	op := tensorops.GatherOp(tensorops.FromFloat64([]float64{1, 2, 3, 4}, 2, 2), 1,
		tensorops.FromInt64([]int64{0, 0, 1, 0}, 2, 2))
	gradients, err := client.Backward(ctx, op, tensorops.FromFloat64([]float64{1, 10, 100, 1000}, 2, 2))
	if err != nil {
		t.Fatal(err)
	}
	if len(gradients) != 1 {
		t.Errorf("got gradients %v, want only input's", gradients)
	}
	expectTensor(t, "gradient of input", gradients["input"], nil, tensorops.Float64, []int64{2, 2},
		[]float64{11, 0, 1000, 100})

	_, err = client.Backward(ctx, op, tensorops.FromFloat64([]float64{1, 2, 3}))
	expectStatus(t, "backward with a wrong grad_output", err, codes.InvalidArgument)

	// Scatter (assign) has two: the overwritten positions get no gradient from input, and src
	// gets the gradient of the positions it wrote.
	scatter := tensorops.ScatterOp(tensorops.FromFloat32([]float32{5, 6, 7, 8}), 0,
		tensorops.FromInt64([]int64{1, 3}), tensorops.FromFloat32([]float32{9, 9}))
	gradients, err = client.Backward(ctx, scatter, tensorops.FromFloat32([]float32{1, 2, 3, 4}))
	if err != nil {
		t.Fatal(err)
	}
	if len(gradients) != 2 {
		t.Errorf("got gradients %v, want input's and src's", gradients)
	}
	expectTensor(t, "scatter: gradient of input", gradients["input"], nil, tensorops.Float32, []int64{4}, []float32{1, 0, 3, 0})
	expectTensor(t, "scatter: gradient of src", gradients["src"], nil, tensorops.Float32, []int64{2}, []float32{2, 4})
}

func TestServerInfo(t *testing.T) {
	client := startClient(t, "--max_stream_in_flight=7")
	info, err := client.ServerInfo(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if info.GetVersion() == "" {
		t.Error("empty version")
	}
	wantOps := []string{"Gather", "Scatter", "IndexSelect", "IndexReduce", "SelectScatter", "SliceScatter",
		"DiagonalScatter", "GatherNd", "ScatterNd", "MaskedScatter"}
	for _, op := range wantOps {
		found := false
		for _, served := range info.GetOps() {
			found = found || served == op
		}
		if !found {
			t.Errorf("ops %v lack %s", info.GetOps(), op)
		}
	}
	if len(info.GetDtypes()) != 12 {
		t.Errorf("dtypes = %v, want all 12", info.GetDtypes())
	}
	if got := info.GetLimits().GetMaxStreamInFlight(); got != 7 {
		t.Errorf("max_stream_in_flight = %d, want 7", got)
	}
	if len(info.GetDevices()) == 0 || info.GetDevices()[0].GetKind() != "cpu" {
		t.Errorf("devices = %v, want the CPU first", info.GetDevices())
	}
	if info.GetTls() || info.GetAuthTokenRequired() {
		t.Errorf("tls = %v, auth_token_required = %v on a plain server", info.GetTls(), info.GetAuthTokenRequired())
	}
}

// freeAddress returns "127.0.0.1:PORT" for a port nothing listens on: one the kernel picked for a
// listener that is closed again.
func freeAddress(t *testing.T) string {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	address := listener.Addr().String()
	listener.Close()
	return address
}

func TestNoServerAnswers(t *testing.T) {
	address := freeAddress(t)
	client, err := tensorops.Dial(address)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	ctx := testContext(t)
	input := tensorops.FromInt64([]int64{1, 2})
	want := "no tensorops server answers at " + address + " (is it running?) [gRPC: "

	_, err = client.ServerInfo(ctx)
	expectStatus(t, "ServerInfo", err, codes.Unavailable, want)
	if !strings.HasPrefix(status.Convert(err).Message(), want) {
		t.Errorf("ServerInfo: message %q does not start with %q", status.Convert(err).Message(), want)
	}
	_, err = client.Gather(ctx, input, 0, input)
	expectStatus(t, "Gather", err, codes.Unavailable, want)
	_, err = client.Put(ctx, "x", input)
	expectStatus(t, "Put", err, codes.Unavailable, want)
	_, err = client.Get(ctx, "x")
	expectStatus(t, "Get", err, codes.Unavailable, want)
	stream, err := client.RunStream(ctx)
	if err == nil {
		_, err = stream.Recv()
	}
	expectStatus(t, "RunStream", err, codes.Unavailable, want)
	_, err = client.Stub().ListTensors(ctx, &tensoropsv1.ListTensorsRequest{}, client.CallOptions()...)
	expectStatus(t, "the stub's ListTensors", err, codes.Unavailable, want)

	// A target of several replicas is named as given.
	list := "ipv4:" + address + "," + freeAddress(t)
	listClient, err := tensorops.Dial(list)
	if err != nil {
		t.Fatal(err)
	}
	defer listClient.Close()
	_, err = listClient.ServerInfo(ctx)
	expectStatus(t, "two replicas", err, codes.Unavailable, "no tensorops server answers at "+list+" (is it running?)")
}

func TestNewClientUsesTheCallersConnection(t *testing.T) {
	s := startServer(t)
	conn, err := grpc.Dial(s.address, grpc.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := tensorops.NewClient(conn, tensorops.WithTLS(nil)); status.Code(err) != codes.InvalidArgument {
		t.Errorf("NewClient with WithTLS: %v, want InvalidArgument", err)
	}
	client, err := tensorops.NewClient(conn)
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	if _, err := client.ServerInfo(ctx); err != nil {
		t.Fatal(err)
	}
	// Close leaves the caller's connection open.
	client.Close()
	if _, err := tensoropsv1.NewTensorOpsClient(conn).ServerInfo(ctx, &tensoropsv1.ServerInfoRequest{}); err != nil {
		t.Errorf("the connection after Close: %v", err)
	}
}
