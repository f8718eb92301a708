package tensorops_test

import (
	"reflect"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"tensorops/client/go/tensorops"
	tensoropsv1 "tensorops/client/go/tensorops/v1"
)

func TestTensorLayout(t *testing.T) {
	// Little-endian bytes, row-major, the shape given or 1-D.
	tensor := tensorops.FromInt32([]int32{1, -2}, 2, 1)
	if got, want := tensor.Bytes(), []byte{1, 0, 0, 0, 0xfe, 0xff, 0xff, 0xff}; !reflect.DeepEqual(got, want) {
		t.Errorf("bytes = %v, want %v", got, want)
	}
	if got := tensor.Shape(); !reflect.DeepEqual(got, []int64{2, 1}) {
		t.Errorf("shape = %v", got)
	}
	if got := tensorops.FromFloat64([]float64{1, 2, 3}).Shape(); !reflect.DeepEqual(got, []int64{3}) {
		t.Errorf("default shape = %v, want [3]", got)
	}
	scalar := tensorops.FromFloat32([]float32{2.5}).Reshape()
	if len(scalar.Shape()) != 0 || scalar.NumElements() != 1 || scalar.Float32s()[0] != 2.5 {
		t.Errorf("scalar = %v %v", scalar, scalar.Float32s())
	}
	complexTensor := tensorops.FromComplex64([]complex64{1 - 2i})
	if got, want := complexTensor.Bytes(), []byte{0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0}; !reflect.DeepEqual(got, want) {
		t.Errorf("complex64 bytes = %v, want %v", got, want)
	}
	if tensor.String() != "int32[2 1]" {
		t.Errorf("String() = %q", tensor.String())
	}
	if !(tensorops.Tensor{}).IsZero() || tensor.IsZero() || (tensorops.Tensor{}).Proto() != nil {
		t.Error("only the zero Tensor is zero, and it has no wire message")
	}
}

func TestTensorRoundTripsThroughProto(t *testing.T) {
	for _, tensor := range []tensorops.Tensor{
		tensorops.FromBool([]bool{true, false}), tensorops.FromUint8([]uint8{7}, 1, 1),
		tensorops.FromInt8([]int8{-7}), tensorops.FromInt16([]int16{-7}), tensorops.FromInt64([]int64{-7}),
		tensorops.FromFloat16Bits([]uint16{0x3c00}), tensorops.FromBFloat16Bits([]uint16{0x3f80}),
		tensorops.FromComplex128([]complex128{1i}), tensorops.FromInt64(nil, 0, 3),
	} {
		back, err := tensorops.FromProto(tensor.Proto())
		if err != nil || !reflect.DeepEqual(back, tensor) {
			t.Errorf("%v: round trip gave %v, %v", tensor, back, err)
		}
	}
}

func TestNewTensorChecks(t *testing.T) {
	if _, err := tensorops.NewTensor(tensorops.Float32, []int64{2}, make([]byte, 7)); err == nil ||
		!strings.Contains(err.Error(), "needs 8 bytes") {
		t.Errorf("short data: %v", err)
	}
	if _, err := tensorops.NewTensor(tensorops.Invalid, nil, nil); err == nil {
		t.Error("undefined dtype accepted")
	}
	if _, err := tensorops.NewTensor(tensorops.Int8, []int64{-1}, nil); err == nil {
		t.Error("negative size accepted")
	}
}

func expectPanic(t *testing.T, what, substring string, f func()) {
	t.Helper()
	defer func() {
		recovered := recover()
		message, _ := recovered.(string)
		if !strings.Contains(message, substring) {
			t.Errorf("%s: panicked with %v, want a message containing %q", what, recovered, substring)
		}
	}()
	f()
}

func TestMistakesPanic(t *testing.T) {
	expectPanic(t, "shape mismatch", "FromFloat32: shape [2 2] holds 4 elements, data has 3", func() {
		tensorops.FromFloat32([]float32{1, 2, 3}, 2, 2)
	})
	expectPanic(t, "wrong accessor", "Int64s on a float32 tensor", func() {
		tensorops.FromFloat32([]float32{1}).Int64s()
	})
	expectPanic(t, "two options structs", "Gather takes at most one options struct", func() {
		tensorops.GatherOp(tensorops.Tensor{}, 0, tensorops.Tensor{}, tensorops.GatherOptions{}, tensorops.GatherOptions{})
	})
}

func TestOptionsAreChecked(t *testing.T) {
	for _, option := range []tensorops.Option{
		tensorops.WithBearerToken("two words"), tensorops.WithBearerToken(""),
		tensorops.WithMaxMessageBytes(0), tensorops.WithTLSFiles(tensorops.TLSFiles{CertFile: "only-a-cert.pem"}),
		tensorops.WithTLSFiles(tensorops.TLSFiles{RootCAFile: "/nonexistent/ca.pem"}),
	} {
		if _, err := tensorops.Dial("127.0.0.1:1", option); err == nil {
			t.Error("Dial accepted an invalid option")
		} else {
			expectStatus(t, "invalid option", err, codes.InvalidArgument)
		}
	}
}

func TestReductionsOnTheWire(t *testing.T) {
	input, index := tensorops.FromFloat32([]float32{1}), tensorops.FromInt64([]int64{0})
	indexReduce := func(o ...tensorops.IndexReduceOptions) tensoropsv1.Reduction {
		return tensorops.IndexReduceOp(input, 0, index, input, o...).Proto().GetIndexReduce().GetReduce()
	}
	scatter := func(o ...tensorops.ScatterOptions) tensoropsv1.Reduction {
		return tensorops.ScatterOp(input, 0, index, input, o...).Proto().GetScatter().GetReduce()
	}
	scatterNd := func(o ...tensorops.ScatterNdOptions) tensoropsv1.Reduction {
		return tensorops.ScatterNdOp(input, index, input, o...).Proto().GetScatterNd().GetReduce()
	}
	for _, c := range []struct {
		what      string
		got, want tensoropsv1.Reduction
	}{
		// IndexReduce defaults to Sum (index_add) as the C++ client and the CLI do; the others to
		// Assign, the wire's default.
		{"IndexReduce without options", indexReduce(), tensoropsv1.Reduction_REDUCTION_SUM},
		{"IndexReduce zero options", indexReduce(tensorops.IndexReduceOptions{}), tensoropsv1.Reduction_REDUCTION_SUM},
		{"IndexReduce Assign", indexReduce(tensorops.IndexReduceOptions{Reduce: tensorops.Assign}), tensoropsv1.Reduction_REDUCTION_ASSIGN},
		{"IndexReduce AMin", indexReduce(tensorops.IndexReduceOptions{Reduce: tensorops.AMin}), tensoropsv1.Reduction_REDUCTION_AMIN},
		{"Scatter without options", scatter(), tensoropsv1.Reduction_REDUCTION_ASSIGN},
		{"Scatter Assign", scatter(tensorops.ScatterOptions{Reduce: tensorops.Assign}), tensoropsv1.Reduction_REDUCTION_ASSIGN},
		{"Scatter Sum", scatter(tensorops.ScatterOptions{Reduce: tensorops.Sum}), tensoropsv1.Reduction_REDUCTION_SUM},
		{"Scatter Prod", scatter(tensorops.ScatterOptions{Reduce: tensorops.Prod}), tensoropsv1.Reduction_REDUCTION_PROD},
		{"Scatter Mean", scatter(tensorops.ScatterOptions{Reduce: tensorops.Mean}), tensoropsv1.Reduction_REDUCTION_MEAN},
		{"Scatter AMax", scatter(tensorops.ScatterOptions{Reduce: tensorops.AMax}), tensoropsv1.Reduction_REDUCTION_AMAX},
		{"ScatterNd without options", scatterNd(), tensoropsv1.Reduction_REDUCTION_ASSIGN},
		{"ScatterNd Sum", scatterNd(tensorops.ScatterNdOptions{Reduce: tensorops.Sum}), tensoropsv1.Reduction_REDUCTION_SUM},
	} {
		if c.got != c.want {
			t.Errorf("%s: %v on the wire, want %v", c.what, c.got, c.want)
		}
	}
}

func TestReferences(t *testing.T) {
	latest := tensorops.Ref("emb")
	if message := latest.Proto(); message.GetStored().GetName() != "emb" || message.GetStored().Version != nil ||
		message.GetData() != nil || message.GetDtype() != 0 || len(message.GetShape()) != 0 {
		t.Errorf("Ref(emb).Proto() = %v, want only the name", message)
	}
	pinned := tensorops.RefAt("emb", 3)
	if message := pinned.Proto(); message.GetStored().GetVersion() != 3 || message.GetStored().Version == nil {
		t.Errorf("RefAt(emb, 3).Proto() = %v", message)
	}
	if version, ok := pinned.StoredVersion(); !ok || version != 3 || pinned.StoredName() != "emb" || !pinned.IsRef() {
		t.Errorf("RefAt(emb, 3): name %q, version %d %v", pinned.StoredName(), version, ok)
	}
	if _, ok := pinned.Latest().StoredVersion(); ok || pinned.Latest().String() != `stored "emb"@latest DType(0)[]` {
		t.Errorf("Latest() = %v", pinned.Latest())
	}
	if latest.IsZero() || latest.HasData() || latest.Bytes() != nil || tensorops.FromInt8([]int8{1}).IsRef() {
		t.Error("a reference is not zero, has no data; a tensor is not a reference")
	}
	expectPanic(t, "accessor of a reference", `Float32s on stored "emb"@3`, func() { pinned.Float32s() })
	expectPanic(t, "Reshape of a reference", "a reference has no elements to reshape", func() { latest.Reshape(1) })

	// A stored result: a reference with its dtype and shape, and its elements when they came.
	withData := tensorops.FromInt32([]int32{7, 8}, 2).Proto()
	withData.Stored = &tensoropsv1.TensorRef{Name: "out", Version: tensorops.Ptr[int64](2)}
	result, err := tensorops.FromProto(withData)
	if err != nil || result.String() != `stored "out"@2 int32[2]` || !result.HasData() || !reflect.DeepEqual(result.Int32s(), []int32{7, 8}) {
		t.Errorf("a result with data: %v %v", result, err)
	}
	if result.Proto().GetData() != nil || result.Proto().GetStored().GetName() != "out" {
		t.Error("a result passed on as an argument is sent as its reference")
	}
	withData.Data = nil
	result, err = tensorops.FromProto(withData)
	if err != nil || result.HasData() || result.String() != `stored "out"@2 int32[2]` {
		t.Errorf("a result without data: %v %v", result, err)
	}
	withData.Stored.Name = ""
	if _, err := tensorops.FromProto(withData); err == nil || !strings.Contains(err.Error(), "without a name") {
		t.Errorf("a reference without a name: %v", err)
	}
}
