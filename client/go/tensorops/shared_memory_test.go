package tensorops_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"tensorops/client/go/tensorops"
	tensoropsv1 "tensorops/client/go/tensorops/v1"
)

// testKey returns a shared-memory key no other test or run uses.
func testKey(what string) string {
	return fmt.Sprintf("/tensorops-go-test-%s-%d-%d", what, os.Getpid(), time.Now().UnixNano())
}

// createRegion creates and registers a region of byteSize bytes, destroyed when the test ends.
func createRegion(t *testing.T, client *tensorops.Client, name string, byteSize int64) *tensorops.SharedMemory {
	t.Helper()
	m, err := client.CreateSharedMemoryRegion(testContext(t), name, byteSize)
	if err != nil {
		t.Fatalf("CreateSharedMemoryRegion(%q, %d): %v", name, byteSize, err)
	}
	t.Cleanup(func() { client.DestroySharedMemoryRegion(context.Background(), m) })
	return m
}

// expectSameTensor fails unless got, a tensor in m's region, holds the dtype, shape and bytes
// of want.
func expectSameTensor(t *testing.T, what string, m *tensorops.SharedMemory, got tensorops.Tensor, want tensorops.Tensor) {
	t.Helper()
	if !got.IsSharedMemory() {
		t.Errorf("%s: got %v, want a tensor in shared memory", what, got)
		return
	}
	read, err := m.Read(got)
	if err != nil {
		t.Errorf("%s: Read(%v): %v", what, got, err)
		return
	}
	if read.DType() != want.DType() || !reflect.DeepEqual(read.Shape(), want.Shape()) || !bytes.Equal(read.Bytes(), want.Bytes()) {
		t.Errorf("%s: the region holds %v %x, inline gave %v %x", what, read, read.Bytes(), want, want.Bytes())
	}
}

// TestSharedMemoryObject: the local half, no server: the object under /dev/shm, its bytes,
// Write and Read, the keys refused, Close.
func TestSharedMemoryObject(t *testing.T) {
	key := testKey("object")
	m, err := tensorops.NewSharedMemory(key, 100)
	if err != nil {
		t.Fatalf("NewSharedMemory(%s): %v", key, err)
	}
	defer m.Close()
	if info, err := os.Stat("/dev/shm" + key); err != nil || info.Size() != 100 || m.Path() != "/dev/shm"+key || m.Key() != key {
		t.Fatalf("the object: %v %v (Path %s, Key %s)", info, err, m.Path(), m.Key())
	}
	if m.Size() != 100 || len(m.Bytes()) != 100 || m.Name() != "" {
		t.Errorf("Size %d, len(Bytes) %d, Name %q", m.Size(), len(m.Bytes()), m.Name())
	}
	_, err = tensorops.NewSharedMemory(key, 100)
	expectStatus(t, "NewSharedMemory of an existing key", err, codes.AlreadyExists, key)

	x := tensorops.FromInt16([]int16{1, -2, 3, -4, 5, -6}, 2, 3)
	ref, err := m.Write(88, x)
	if err != nil {
		t.Fatal(err)
	}
	if shared, ok := ref.SharedMemory(); !ok || shared != (tensorops.SharedMemoryRef{Region: "", Offset: 88, ByteSize: 12}) ||
		ref.String() != `shared memory ""[88:100] int16[2 3]` || ref.HasData() || ref.IsRef() || ref.Bytes() != nil {
		t.Errorf("Write returned %v (%+v, %v)", ref, shared, ok)
	}
	if got := m.Bytes()[88:90]; !bytes.Equal(got, []byte{1, 0}) {
		t.Errorf("the bytes at 88: %x", got)
	}
	back, err := m.Read(ref.Reshape(3, 2))
	expectTensor(t, "Read", back, err, tensorops.Int16, []int64{3, 2}, []int16{1, -2, 3, -4, 5, -6})
	_, err = m.Write(90, x)
	expectStatus(t, "Write past the end", err, codes.InvalidArgument, "[90, 102)", "100 bytes")
	_, err = m.Read(tensorops.InSharedMemory("", 96, tensorops.Int64))
	expectStatus(t, "Read past the end", err, codes.InvalidArgument, "[96, 104)")
	_, err = m.Read(tensorops.InSharedMemory("other", 0, tensorops.Int64))
	expectStatus(t, "Read of another region", err, codes.InvalidArgument, `not a tensor in shared memory region ""`)

	for _, bad := range []string{"", "name", "/", "/a/b", "/..", "/" + strings.Repeat("x", 256)} {
		_, err := tensorops.NewSharedMemory(bad, 8)
		expectStatus(t, "NewSharedMemory("+bad+")", err, codes.InvalidArgument, `a key is "/" and then 1 to 255 bytes`)
	}
	_, err = tensorops.NewSharedMemory(key+"-empty", 0)
	expectStatus(t, "NewSharedMemory of 0 bytes", err, codes.InvalidArgument, "byteSize 0")

	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat("/dev/shm" + key); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the object after Close: %v", err)
	}
	if err := m.Close(); err != nil || m.Bytes() != nil || m.Size() != 0 {
		t.Errorf("a second Close: %v; Bytes %v, Size %d", err, m.Bytes(), m.Size())
	}
	_, err = m.Write(0, x)
	expectStatus(t, "Write after Close", err, codes.FailedPrecondition, "is closed")
}

// TestSharedMemoryTensorMessages: the wire messages of tensors in shared memory, both ways.
func TestSharedMemoryTensorMessages(t *testing.T) {
	x := tensorops.InSharedMemory("in", 16, tensorops.Float32, 2, 3)
	message := x.Proto()
	want := &tensoropsv1.Tensor{Dtype: tensoropsv1.DataType_DATA_TYPE_FLOAT32, Shape: []int64{2, 3},
		SharedMemory: &tensoropsv1.SharedMemoryRef{Region: "in", Offset: 16, ByteSize: 24}}
	if message.String() != want.String() {
		t.Errorf("Proto: %v, want %v", message, want)
	}
	back, err := tensorops.FromProto(message)
	if err != nil || back.String() != x.String() || x.String() != `shared memory "in"[16:40] float32[2 3]` {
		t.Errorf("FromProto: %v %v, want %v", back, err, x)
	}
	if scalar := tensorops.InSharedMemory("in", 8, tensorops.Complex64); scalar.NumElements() != 1 || len(scalar.Shape()) != 0 {
		t.Errorf("no shape: %v, want a scalar", scalar)
	}
	_, err = tensorops.FromProto(&tensoropsv1.Tensor{SharedMemory: want.SharedMemory})
	if err == nil || !strings.Contains(err.Error(), "needs a dtype") {
		t.Errorf("FromProto without a dtype: %v", err)
	}
	func() {
		defer func() {
			if r := recover(); r == nil || !strings.Contains(r.(string), "SharedMemory.Read") {
				t.Errorf("Float32s on a tensor in shared memory: panic %v", r)
			}
		}()
		x.Float32s()
	}()
}

// TestSharedMemoryOpsEqualInline: every op with all of its tensor arguments and its result in a
// region gives the bytes it gives inline, through its own RPC, Run and RunStream.
func TestSharedMemoryOpsEqualInline(t *testing.T) {
	client := startClient(t)
	ctx := testContext(t)
	m := createRegion(t, client, "go/shm/ops", 4096)

	input := tensorops.FromFloat32([]float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 3, 4)
	index := tensorops.FromInt64([]int64{3, 0, 1, 1, 2, 2}, 3, 2)
	src := tensorops.FromFloat32([]float32{-1, -2, -3, -4, -5, -6}, 3, 2)
	rows := tensorops.FromInt64([]int64{2, 0})
	rowSrc := tensorops.FromFloat32([]float32{10, 20, 30, 40, 50, 60, 70, 80}, 2, 4)
	points := tensorops.FromInt64([]int64{0, 1, 2, 3}, 2, 2)
	pointSrc := tensorops.FromFloat32([]float32{-7, -8})
	mask := tensorops.FromBool([]bool{true, false, false, true, false, true, true, false, false, false, false, true}, 3, 4)
	bytesIn := tensorops.FromInt8([]int8{1, -2, 3, -4, 5, -6}, 2, 3)
	byteIndex := tensorops.FromInt32([]int32{2, 0}, 2, 1)

	// arg is what a call does with each tensor argument: inline, it passes it; in shared memory,
	// it writes it after the previous one (16-byte aligned) and passes the reference.
	type arg = func(tensorops.Tensor) tensorops.Tensor
	calls := []struct {
		name string
		call func(a arg, r tensorops.ResultOptions) (tensorops.Tensor, error)
	}{
		{"Gather", func(a arg, r tensorops.ResultOptions) (tensorops.Tensor, error) {
			return client.Gather(ctx, a(input), 1, a(index), tensorops.GatherOptions{Result: r})
		}},
		{"Gather int8", func(a arg, r tensorops.ResultOptions) (tensorops.Tensor, error) {
			return client.Gather(ctx, a(bytesIn), 1, a(byteIndex), tensorops.GatherOptions{Result: r})
		}},
		{"Scatter", func(a arg, r tensorops.ResultOptions) (tensorops.Tensor, error) {
			return client.Scatter(ctx, a(input), 1, a(index), a(src), tensorops.ScatterOptions{Reduce: tensorops.Sum, Result: r})
		}},
		{"ScatterValue", func(a arg, r tensorops.ResultOptions) (tensorops.Tensor, error) {
			return client.ScatterValue(ctx, a(input), 1, a(index), tensorops.FloatScalar(9), tensorops.ScatterOptions{Result: r})
		}},
		{"IndexSelect", func(a arg, r tensorops.ResultOptions) (tensorops.Tensor, error) {
			return client.IndexSelect(ctx, a(input), 0, a(rows), tensorops.IndexSelectOptions{Result: r})
		}},
		{"IndexReduce", func(a arg, r tensorops.ResultOptions) (tensorops.Tensor, error) {
			return client.IndexReduce(ctx, a(input), 0, a(rows), a(rowSrc), tensorops.IndexReduceOptions{Result: r})
		}},
		{"SelectScatter", func(a arg, r tensorops.ResultOptions) (tensorops.Tensor, error) {
			return client.SelectScatter(ctx, a(input), a(tensorops.FromFloat32([]float32{0, -1, -2, -3})), 0, 1,
				tensorops.SelectScatterOptions{Result: r})
		}},
		{"SliceScatter", func(a arg, r tensorops.ResultOptions) (tensorops.Tensor, error) {
			return client.SliceScatter(ctx, a(input), a(src), 1,
				tensorops.SliceScatterOptions{Start: tensorops.Ptr[int64](1), End: tensorops.Ptr[int64](3), Result: r})
		}},
		{"DiagonalScatter", func(a arg, r tensorops.ResultOptions) (tensorops.Tensor, error) {
			return client.DiagonalScatter(ctx, a(input), a(tensorops.FromFloat32([]float32{0, 0, 0})),
				tensorops.DiagonalScatterOptions{Result: r})
		}},
		{"GatherNd", func(a arg, r tensorops.ResultOptions) (tensorops.Tensor, error) {
			return client.GatherNd(ctx, a(input), a(points), tensorops.GatherNdOptions{Result: r})
		}},
		{"ScatterNd", func(a arg, r tensorops.ResultOptions) (tensorops.Tensor, error) {
			return client.ScatterNd(ctx, a(input), a(points), a(pointSrc), tensorops.ScatterNdOptions{Reduce: tensorops.Sum, Result: r})
		}},
		{"ScatterNdZeros", func(a arg, r tensorops.ResultOptions) (tensorops.Tensor, error) {
			return client.ScatterNdZeros(ctx, []int64{3, 4}, a(points), a(pointSrc), tensorops.ScatterNdOptions{Result: r})
		}},
		{"MaskedScatter", func(a arg, r tensorops.ResultOptions) (tensorops.Tensor, error) {
			return client.MaskedScatter(ctx, a(input), a(mask), a(input), tensorops.MaskedScatterOptions{Result: r})
		}},
		{"Run", func(a arg, r tensorops.ResultOptions) (tensorops.Tensor, error) {
			return client.Run(ctx, tensorops.GatherOp(a(input), 1, a(index), tensorops.GatherOptions{Result: r}))
		}},
		{"RunStream", func(a arg, r tensorops.ResultOptions) (tensorops.Tensor, error) {
			stream, err := client.RunStream(ctx)
			if err != nil {
				return tensorops.Tensor{}, err
			}
			if err := stream.Send(7, tensorops.IndexSelectOp(a(input), 1, a(rows), tensorops.IndexSelectOptions{Result: r})); err != nil {
				return tensorops.Tensor{}, err
			}
			stream.CloseSend()
			out, err := stream.Recv()
			if err != nil {
				return tensorops.Tensor{}, err
			}
			return out.Result, out.Err
		}},
	}
	const resultOffset, resultBytes = 2048, 2048
	for _, c := range calls {
		want, err := c.call(func(x tensorops.Tensor) tensorops.Tensor { return x }, tensorops.ResultOptions{})
		if err != nil {
			t.Fatalf("%s inline: %v", c.name, err)
		}
		next := int64(0)
		place := func(x tensorops.Tensor) tensorops.Tensor {
			ref, err := m.Write(next, x)
			if err != nil {
				t.Fatalf("%s: Write(%d, %v): %v", c.name, next, x, err)
			}
			next += (int64(len(x.Bytes())) + 15) / 16 * 16
			return ref
		}
		got, err := c.call(place, tensorops.ResultOptions{SharedMemory: m.Ref(resultOffset, resultBytes)})
		if err != nil {
			t.Errorf("%s in shared memory: %v", c.name, err)
			continue
		}
		if shared, _ := got.SharedMemory(); shared != (tensorops.SharedMemoryRef{Region: "go/shm/ops", Offset: resultOffset, ByteSize: int64(len(want.Bytes()))}) {
			t.Errorf("%s in shared memory returned %v, want the result's %d bytes at %d", c.name, got, len(want.Bytes()), resultOffset)
		}
		expectSameTensor(t, c.name, m, got, want)
	}

	// A result in a region is an argument of the next call as it is.
	first, err := client.IndexSelect(ctx, input, 0, rows, tensorops.IndexSelectOptions{
		Result: tensorops.ResultOptions{SharedMemory: m.Ref(0, 1024)}})
	if err != nil {
		t.Fatal(err)
	}
	second, err := client.Gather(ctx, first, 1, tensorops.FromInt64([]int64{3, 3}, 2, 1))
	expectTensor(t, "Gather of a result in shared memory", second, err, tensorops.Float32, []int64{2, 1}, []float32{12, 4})
}

// TestSharedMemoryPutAndGet: Put takes a tensor's bytes from a region and Get writes them into
// one, each stream carrying no data.
func TestSharedMemoryPutAndGet(t *testing.T) {
	client := startClient(t)
	ctx := testContext(t)
	m := createRegion(t, client, "go/shm/store", 1024)
	values := make([]float64, 60)
	for i := range values {
		values[i] = float64(i)*1.5 - 20
	}
	x := tensorops.FromFloat64(values, 6, 10)
	in, err := m.Write(8, x)
	if err != nil {
		t.Fatal(err)
	}
	var progress [][2]int64
	stored, err := client.Put(ctx, "go/shm/x", in, tensorops.PutOptions{
		Progress: func(done, total int64) { progress = append(progress, [2]int64{done, total}) }})
	if err != nil {
		t.Fatalf("Put from shared memory: %v", err)
	}
	defer client.Delete(ctx, "go/shm/x")
	if stored.String() != `stored "go/shm/x"@1 float64[6 10]` || !reflect.DeepEqual(progress, [][2]int64{{480, 480}}) {
		t.Errorf("Put from shared memory returned %v, progress %v", stored, progress)
	}
	got, err := client.Get(ctx, "go/shm/x")
	expectTensor(t, "Get of what Put took from shared memory", got, err, tensorops.Float64, []int64{6, 10}, values)

	out, err := client.Get(ctx, "go/shm/x", tensorops.GetOptions{SharedMemory: m.Ref(512, 512)})
	if err != nil {
		t.Fatalf("Get into shared memory: %v", err)
	}
	if out.String() != `shared memory "go/shm/store"[512:992] float64[6 10]` {
		t.Errorf("Get into shared memory returned %v", out)
	}
	expectSameTensor(t, "Get into shared memory", m, out, x)

	_, err = client.Get(ctx, "go/shm/x", tensorops.GetOptions{SharedMemory: m.Ref(512, 479)})
	expectStatus(t, "Get into too few bytes", err, codes.InvalidArgument)
	_, err = client.Get(ctx, "go/shm/x", tensorops.GetOptions{SharedMemory: m.Ref(600, 480)})
	expectStatus(t, "Get past the region's end", err, codes.InvalidArgument)
	_, err = client.Put(ctx, "go/shm/y", m.Tensor(600, tensorops.Float64, 6, 10))
	expectStatus(t, "Put from past the region's end", err, codes.InvalidArgument)
	_, err = client.Put(ctx, "go/shm/y", tensorops.InSharedMemory("go/shm/none", 0, tensorops.Float64, 2))
	expectStatus(t, "Put from an unknown region", err, codes.NotFound, "go/shm/none")
}

// TestSharedMemoryRegions: register, list and unregister, and the errors of each.
func TestSharedMemoryRegions(t *testing.T) {
	client := startClient(t)
	ctx := testContext(t)
	b := createRegion(t, client, "go/shm/b", 256)
	a := createRegion(t, client, "go/shm/a", 128)
	regions, err := client.ListSharedMemory(ctx)
	want := []tensorops.SharedMemoryRegion{{Name: "go/shm/a", Key: a.Key(), ByteSize: 128}, {Name: "go/shm/b", Key: b.Key(), ByteSize: 256}}
	if err != nil || !reflect.DeepEqual(regions, want) {
		t.Errorf("ListSharedMemory: %+v %v, want %+v", regions, err, want)
	}
	regions, err = client.ListSharedMemory(ctx, tensorops.ListSharedMemoryOptions{Name: "go/shm/b"})
	if err != nil || !reflect.DeepEqual(regions, want[1:]) {
		t.Errorf("ListSharedMemory of go/shm/b: %+v %v", regions, err)
	}
	_, err = client.ListSharedMemory(ctx, tensorops.ListSharedMemoryOptions{Name: "go/shm/none"})
	expectStatus(t, "ListSharedMemory of an unknown region", err, codes.NotFound, "go/shm/none")

	// Part of an object, from an offset.
	part := tensorops.SharedMemoryRegion{Name: "go/shm/part", Key: b.Key(), Offset: 64, ByteSize: 64}
	if err := client.RegisterSharedMemory(ctx, part); err != nil {
		t.Fatalf("RegisterSharedMemory(%+v): %v", part, err)
	}
	if _, err := b.Write(64, tensorops.FromInt32([]int32{5, 6, 7, 8})); err != nil {
		t.Fatal(err)
	}
	got, err := client.IndexSelect(ctx, tensorops.InSharedMemory("go/shm/part", 0, tensorops.Int32, 4), 0, tensorops.FromInt64([]int64{3, 0}))
	expectTensor(t, "an argument at offset 0 of a region at offset 64", got, err, tensorops.Int32, []int64{2}, []int32{8, 5})

	err = client.RegisterSharedMemory(ctx, tensorops.SharedMemoryRegion{Name: "go/shm/a", Key: b.Key(), ByteSize: 8})
	expectStatus(t, "RegisterSharedMemory of a name in use", err, codes.AlreadyExists, "go/shm/a")
	err = client.RegisterSharedMemory(ctx, tensorops.SharedMemoryRegion{Name: "go/shm/c", Key: b.Key(), Offset: 200, ByteSize: 57})
	expectStatus(t, "RegisterSharedMemory past the object's end", err, codes.InvalidArgument)
	err = client.RegisterSharedMemory(ctx, tensorops.SharedMemoryRegion{Name: "go/shm/c", Key: testKey("missing"), ByteSize: 8})
	expectStatus(t, "RegisterSharedMemory of no object", err, codes.NotFound)
	err = client.RegisterSharedMemory(ctx, tensorops.SharedMemoryRegion{Name: "go/shm/bad name", Key: b.Key(), ByteSize: 8})
	expectStatus(t, "RegisterSharedMemory of a bad name", err, codes.InvalidArgument)

	names, err := client.UnregisterSharedMemory(ctx, "go/shm/part")
	if err != nil || !reflect.DeepEqual(names, []string{"go/shm/part"}) {
		t.Errorf("UnregisterSharedMemory(go/shm/part): %v %v", names, err)
	}
	_, err = client.UnregisterSharedMemory(ctx, "go/shm/part")
	expectStatus(t, "UnregisterSharedMemory of an unregistered region", err, codes.NotFound, "go/shm/part")
	_, err = client.IndexSelect(ctx, tensorops.InSharedMemory("go/shm/part", 0, tensorops.Int32, 4), 0, tensorops.FromInt64([]int64{0}))
	expectStatus(t, "an argument in an unregistered region", err, codes.NotFound, "go/shm/part")
	names, err = client.UnregisterSharedMemory(ctx, "")
	if err != nil || !reflect.DeepEqual(names, []string{"go/shm/a", "go/shm/b"}) {
		t.Errorf("UnregisterSharedMemory(\"\"): %v %v, want both", names, err)
	}
	if regions, err := client.ListSharedMemory(ctx); err != nil || len(regions) != 0 {
		t.Errorf("ListSharedMemory after unregistering every region: %+v %v", regions, err)
	}
	// The objects stay the client's: destroying them now unregisters nothing.
	expectStatus(t, "DestroySharedMemoryRegion of an unregistered region", client.DestroySharedMemoryRegion(ctx, a), codes.NotFound)
	if _, err := os.Stat(a.Path()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the object after DestroySharedMemoryRegion: %v", err)
	}
}

// TestSharedMemoryBoundsAndUnknownRegions: every use is checked against its region.
func TestSharedMemoryBoundsAndUnknownRegions(t *testing.T) {
	client := startClient(t)
	ctx := testContext(t)
	m := createRegion(t, client, "go/shm/bounds", 64)
	index := tensorops.FromInt64([]int64{0})
	gather := func(input tensorops.Tensor, r tensorops.ResultOptions) error {
		_, err := client.IndexSelect(ctx, input, 0, index, tensorops.IndexSelectOptions{Result: r})
		return err
	}
	expectStatus(t, "an argument past the region's end", gather(m.Tensor(48, tensorops.Float32, 5), tensorops.ResultOptions{}),
		codes.InvalidArgument, "go/shm/bounds", "outside")
	expectStatus(t, "an argument at a negative offset", gather(m.Tensor(-4, tensorops.Float32, 1), tensorops.ResultOptions{}),
		codes.InvalidArgument)
	expectStatus(t, "an argument at an unaligned offset", gather(m.Tensor(2, tensorops.Float32, 1), tensorops.ResultOptions{}),
		codes.InvalidArgument)
	// The client always sends a tensor's own bytes as byte_size: send a message that does not.
	message := m.Tensor(0, tensorops.Float32, 2).Proto()
	message.SharedMemory.ByteSize = 4
	_, err := client.Stub().IndexSelect(ctx, &tensoropsv1.IndexSelectRequest{Input: message, Index: index.Proto()}, client.CallOptions()...)
	expectStatus(t, "an argument whose byte_size is not its tensor's bytes", err, codes.InvalidArgument)

	input := tensorops.FromFloat32([]float32{1, 2, 3, 4})
	expectStatus(t, "a result past the region's end", gather(input, tensorops.ResultOptions{SharedMemory: m.Ref(62, 4)}),
		codes.InvalidArgument)
	expectStatus(t, "a result in fewer bytes than it has", gather(input, tensorops.ResultOptions{SharedMemory: m.Ref(0, 3)}),
		codes.InvalidArgument)
	expectStatus(t, "a result in shared memory and stored", gather(input, tensorops.ResultOptions{SharedMemory: m.Ref(0, 64), StoreAs: "go/shm/r"}),
		codes.InvalidArgument)

	expectStatus(t, "an argument in an unknown region", gather(tensorops.InSharedMemory("go/shm/none", 0, tensorops.Float32, 1), tensorops.ResultOptions{}),
		codes.NotFound, "go/shm/none")
	expectStatus(t, "a result in an unknown region",
		gather(input, tensorops.ResultOptions{SharedMemory: tensorops.SharedMemoryRef{Region: "go/shm/none", ByteSize: 4}}),
		codes.NotFound, "go/shm/none")
	_, err = client.Get(ctx, "go/shm/none", tensorops.GetOptions{SharedMemory: m.Ref(0, 64)})
	expectStatus(t, "Get of an unknown tensor into a region", err, codes.NotFound)
}

// TestSharedMemoryNamespaces: a region is its token's alone.
func TestSharedMemoryNamespaces(t *testing.T) {
	s := startServer(t, "--auth_token_file="+writeToken(t, "token-one\ntoken-two\n"))
	ctx := testContext(t)
	one, two := dial(t, s, tensorops.WithBearerToken("token-one")), dial(t, s, tensorops.WithBearerToken("token-two"))
	m := createRegion(t, one, "go/shm/mine", 64)
	x, err := m.Write(0, tensorops.FromInt64([]int64{4, 5}))
	if err != nil {
		t.Fatal(err)
	}
	got, err := one.IndexSelect(ctx, x, 0, tensorops.FromInt64([]int64{1}))
	expectTensor(t, "the owner's call", got, err, tensorops.Int64, []int64{1}, []int64{5})
	_, err = two.IndexSelect(ctx, x, 0, tensorops.FromInt64([]int64{1}))
	expectStatus(t, "another token's call", err, codes.NotFound, "go/shm/mine")
	if regions, err := two.ListSharedMemory(ctx); err != nil || len(regions) != 0 {
		t.Errorf("another token's ListSharedMemory: %+v %v", regions, err)
	}
	_, err = two.UnregisterSharedMemory(ctx, "go/shm/mine")
	expectStatus(t, "another token's UnregisterSharedMemory", err, codes.NotFound)
}

// TestSharedMemoryShrunkObject: an object shrunk or removed under its registered region fails
// the calls that use it with FailedPrecondition, and the server goes on serving (and exits
// cleanly when the test stops it).
func TestSharedMemoryShrunkObject(t *testing.T) {
	client := startClient(t)
	ctx := testContext(t)
	input := tensorops.FromFloat32([]float32{1, 2, 3, 4})
	index := tensorops.FromInt64([]int64{3, 0})
	stillServing := func(what string) {
		t.Helper()
		got, err := client.IndexSelect(ctx, input, 0, index)
		expectTensor(t, what+": an inline call", got, err, tensorops.Float32, []int64{2}, []float32{4, 1})
	}
	if _, err := client.Put(ctx, "go/shm/stored", input); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		damage func(m *tensorops.SharedMemory) error
		// What the server's message says happened.
		says string
	}{
		{"truncated to 0", func(m *tensorops.SharedMemory) error { return os.Truncate(m.Path(), 0) }, "shrunk"},
		{"truncated to 16 of 4096", func(m *tensorops.SharedMemory) error { return os.Truncate(m.Path(), 16) }, "shrunk"},
		{"unlinked", func(m *tensorops.SharedMemory) error { return os.Remove(m.Path()) }, "removed"},
	} {
		// The calls read or write the bytes at 1024 and on, which a client that shrinks the object
		// to under 1024 bytes must not touch itself either (its own reads would raise SIGBUS).
		m := createRegion(t, client, "go/shm/shrunk", 4096)
		x, err := m.Write(1024, input)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := client.IndexSelect(ctx, x, 0, index); err != nil {
			t.Fatalf("%s: before: %v %v", c.name, got, err)
		}
		if err := c.damage(m); err != nil {
			t.Fatal(err)
		}
		_, err = client.IndexSelect(ctx, x, 0, index)
		expectStatus(t, c.name+": an argument in the region", err, codes.FailedPrecondition, "go/shm/shrunk", c.says)
		_, err = client.IndexSelect(ctx, input, 0, index, tensorops.IndexSelectOptions{
			Result: tensorops.ResultOptions{SharedMemory: m.Ref(2048, 8)}})
		expectStatus(t, c.name+": a result into the region", err, codes.FailedPrecondition, "go/shm/shrunk", c.says)
		_, err = client.Put(ctx, "go/shm/from-shrunk", x)
		expectStatus(t, c.name+": Put from the region", err, codes.FailedPrecondition, "go/shm/shrunk", c.says)
		_, err = client.Get(ctx, "go/shm/stored", tensorops.GetOptions{SharedMemory: m.Ref(2048, 16)})
		expectStatus(t, c.name+": Get into the region", err, codes.FailedPrecondition, "go/shm/shrunk", c.says)
		stillServing(c.name)
		if err := client.DestroySharedMemoryRegion(ctx, m); err != nil {
			t.Errorf("%s: DestroySharedMemoryRegion: %v", c.name, err)
		}
	}
	if info, err := client.ServerInfo(ctx); err != nil {
		t.Errorf("ServerInfo after the damaged regions: %v %v", info, err)
	}
}

// TestSharedMemoryCUDARegionNeedsAGPUServer: the test server runs on the CPU, so a CUDA region
// is refused naming the rule (the GPU suites register real CUDA buffers).
func TestSharedMemoryCUDARegionNeedsAGPUServer(t *testing.T) {
	client := startClient(t)
	ctx := testContext(t)
	region := tensorops.SharedMemoryRegion{Name: "go/shm/gpu", ByteSize: 4096,
		CUDA: &tensorops.CUDAMemory{RawHandle: make([]byte, 64), DeviceID: 0}}
	err := client.RegisterSharedMemory(ctx, region)
	expectStatus(t, "RegisterSharedMemory of a CUDA region on a CPU server", err, codes.FailedPrecondition, "runs no calls on a GPU")
}

// TestCloseDuringReadsAndWrites: Close while other goroutines Read and Write waits for the
// copies in progress, so that none touches the memory once unmapped (a fault that would kill the
// process): each Read or Write copies all its bytes or fails with FailedPrecondition.
func TestCloseDuringReadsAndWrites(t *testing.T) {
	const size = 8 << 20
	source := tensorops.FromUint8(bytes.Repeat([]uint8{7}, size))
	for round := 0; round < 20; round++ {
		m, err := tensorops.NewSharedMemory(testKey("close"), size)
		if err != nil {
			t.Fatal(err)
		}
		whole := m.Tensor(0, tensorops.Uint8, size)
		var (
			copying sync.WaitGroup // Until each goroutine has copied once.
			done    sync.WaitGroup
			errs    = make(chan error, 4)
		)
		for g := 0; g < 4; g++ {
			copying.Add(1)
			done.Add(1)
			go func(reader bool) {
				defer done.Done()
				for copied := false; ; copied = true {
					var err error
					if reader {
						_, err = m.Read(whole)
					} else {
						_, err = m.Write(0, source)
					}
					if !copied {
						copying.Done()
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}(g%2 == 0)
		}
		copying.Wait()
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		done.Wait()
		close(errs)
		for err := range errs {
			expectStatus(t, "Read or Write during Close", err, codes.FailedPrecondition, "is closed")
		}
	}
}
