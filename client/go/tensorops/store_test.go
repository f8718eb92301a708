package tensorops_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"tensorops/client/go/tensorops"
	tensoropsv1 "tensorops/client/go/tensorops/v1"
)

func TestPutGetRoundTripInChunks(t *testing.T) {
	client := startClient(t)
	ctx := testContext(t)
	values := make([]float64, 64*33) // 16,896 bytes: 17 chunks of 1000
	for i := range values {
		values[i] = float64(i)*0.5 - 7
	}
	cases := []struct {
		name   string
		tensor tensorops.Tensor
	}{
		{"float64", tensorops.FromFloat64(values, 64, 33)},
		{"bool", tensorops.FromBool([]bool{true, false, true}, 3, 1)},
		{"scalar", tensorops.FromInt16([]int16{-3}).Reshape()},
		{"empty", tensorops.FromInt32(nil, 0, 4)},
	}
	for _, c := range cases {
		var putProgress, getProgress [][2]int64
		stored, err := client.Put(ctx, "go/put/"+c.name, c.tensor, tensorops.PutOptions{
			ChunkBytes: 1000,
			Progress:   func(done, total int64) { putProgress = append(putProgress, [2]int64{done, total}) },
		})
		if err != nil {
			t.Fatalf("%s: Put: %v", c.name, err)
		}
		defer client.Delete(ctx, "go/put/"+c.name)
		if version, pinned := stored.StoredVersion(); stored.StoredName() != "go/put/"+c.name || !pinned || version != 1 ||
			stored.DType() != c.tensor.DType() || !reflect.DeepEqual(stored.Shape(), c.tensor.Shape()) || stored.HasData() && c.tensor.NumElements() > 0 {
			t.Errorf("%s: Put returned %v, want a reference at version 1 of %v", c.name, stored, c.tensor)
		}
		total := int64(len(c.tensor.Bytes()))
		var want [][2]int64
		for done := int64(0); done < total; {
			done += 1000
			if done > total {
				done = total
			}
			want = append(want, [2]int64{done, total})
		}
		if total == 0 {
			want = [][2]int64{{0, 0}}
		}
		if !reflect.DeepEqual(putProgress, want) {
			t.Errorf("%s: Put progress %v, want %v", c.name, putProgress, want)
		}
		got, err := client.Get(ctx, "go/put/"+c.name, tensorops.GetOptions{
			ChunkBytes: 777,
			Progress:   func(done, total int64) { getProgress = append(getProgress, [2]int64{done, total}) },
		})
		if err != nil {
			t.Fatalf("%s: Get: %v", c.name, err)
		}
		if got.DType() != c.tensor.DType() || !reflect.DeepEqual(got.Shape(), c.tensor.Shape()) || !bytes.Equal(got.Bytes(), c.tensor.Bytes()) {
			t.Errorf("%s: Get returned %v %x, want %v %x", c.name, got, got.Bytes(), c.tensor, c.tensor.Bytes())
		}
		if wantChunks := (total + 776) / 777; len(getProgress) != int(wantChunks) && !(total == 0 && len(getProgress) == 1) {
			t.Errorf("%s: Get progress %v, want %d chunks", c.name, getProgress, wantChunks)
		}
		if last := getProgress[len(getProgress)-1]; last != [2]int64{total, total} {
			t.Errorf("%s: Get's last progress %v, want %d of %d", c.name, last, total, total)
		}
	}
	_, err := client.Put(ctx, "go/put/x", tensorops.FromInt8([]int8{1}), tensorops.PutOptions{ChunkBytes: -1})
	expectStatus(t, "Put with ChunkBytes -1", err, codes.InvalidArgument, "ChunkBytes = -1 is out of range", "1 <= ChunkBytes <= 1073740800")
	_, err = client.Put(ctx, "go/put/x", tensorops.Ref("go/put/float64"))
	expectStatus(t, "Put of a reference", err, codes.InvalidArgument, `stored "go/put/float64"@latest`, "holds no elements")
}

func TestReferencesGiveTheSameBytesAsInline(t *testing.T) {
	client := startClient(t)
	ctx := testContext(t)
	input := tensorops.FromFloat32([]float32{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, 3, 4)
	index := tensorops.FromInt64([]int64{3, 0, 1, 1, 2, 2}, 3, 2)
	src := tensorops.FromFloat32([]float32{-1, -2, -3, -4, -5, -6}, 3, 2)
	inputRef, err := client.Put(ctx, "go/ref/input", input)
	if err != nil {
		t.Fatal(err)
	}
	indexRef, _ := client.Put(ctx, "go/ref/index", index)
	srcRef, _ := client.Put(ctx, "go/ref/src", src)
	for _, name := range []string{"input", "index", "src"} {
		defer client.Delete(ctx, "go/ref/"+name)
	}
	sum := tensorops.ScatterOptions{Reduce: tensorops.Sum}
	calls := []struct {
		name             string
		inline, resolved func() (tensorops.Tensor, error)
	}{
		{"Gather", func() (tensorops.Tensor, error) { return client.Gather(ctx, input, 1, index) },
			func() (tensorops.Tensor, error) { return client.Gather(ctx, inputRef, 1, indexRef) }},
		{"Scatter", func() (tensorops.Tensor, error) { return client.Scatter(ctx, input, 1, index, src, sum) },
			func() (tensorops.Tensor, error) {
				return client.Scatter(ctx, tensorops.Ref("go/ref/input"), 1, indexRef, srcRef, sum)
			}},
		{"IndexSelect", func() (tensorops.Tensor, error) {
			return client.IndexSelect(ctx, input, 0, tensorops.FromInt64([]int64{2, 0}))
		}, func() (tensorops.Tensor, error) {
			return client.IndexSelect(ctx, inputRef.Latest(), 0, tensorops.FromInt64([]int64{2, 0}))
		}},
		{"Run", func() (tensorops.Tensor, error) { return client.Run(ctx, tensorops.GatherOp(input, 1, index)) },
			func() (tensorops.Tensor, error) { return client.Run(ctx, tensorops.GatherOp(inputRef, 1, indexRef)) }},
	}
	for _, c := range calls {
		want, err := c.inline()
		if err != nil {
			t.Fatalf("%s inline: %v", c.name, err)
		}
		got, err := c.resolved()
		if err != nil {
			t.Fatalf("%s by reference: %v", c.name, err)
		}
		if got.DType() != want.DType() || !reflect.DeepEqual(got.Shape(), want.Shape()) || !bytes.Equal(got.Bytes(), want.Bytes()) {
			t.Errorf("%s by reference: %v %x, inline: %v %x", c.name, got, got.Bytes(), want, want.Bytes())
		}
	}
}

func TestListInfoDeleteAndVersions(t *testing.T) {
	client := startClient(t)
	ctx := testContext(t)
	a, err := client.Put(ctx, "go/a", tensorops.FromInt64([]int64{1, 2, 3, 4, 5, 6}, 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Put(ctx, "go/b", tensorops.FromFloat32([]float32{1, 2})); err != nil {
		t.Fatal(err)
	}
	infos, err := client.List(ctx)
	if err != nil || len(infos) != 2 || infos[0].Name != "go/a" || infos[1].Name != "go/b" {
		t.Fatalf("List: %v %v, want go/a and go/b", infos, err)
	}
	info, err := client.Info(ctx, "go/a")
	if err != nil {
		t.Fatal(err)
	}
	if info.DType != tensorops.Int64 || !reflect.DeepEqual(info.Shape, []int64{2, 3}) || info.Bytes != 48 || info.Version != 1 ||
		info.Device != "cpu" || info.Created.IsZero() || info.Updated.Before(info.Created) {
		t.Errorf("Info: %+v", info)
	}
	if info.Ref().String() != a.String() || a.String() != `stored "go/a"@1 int64[2 3]` {
		t.Errorf("Info().Ref() = %v, Put returned %v", info.Ref(), a)
	}

	_, err = client.Put(ctx, "go/a", tensorops.FromInt64([]int64{0}))
	expectStatus(t, "Put of an existing name", err, codes.FailedPrecondition)
	a2, err := client.Put(ctx, "go/a", tensorops.FromFloat64([]float64{0, 0}), tensorops.PutOptions{Overwrite: true})
	if version, _ := a2.StoredVersion(); err != nil || version != 2 {
		t.Errorf("Put with Overwrite: %v %v, want version 2", a2, err)
	}
	a3, err := client.Put(ctx, "go/a", tensorops.FromFloat64([]float64{0, 0, 0}), tensorops.PutOptions{ExpectedVersion: tensorops.Ptr[int64](2)})
	if version, _ := a3.StoredVersion(); err != nil || version != 3 {
		t.Errorf("Put with ExpectedVersion 2: %v %v, want version 3", a3, err)
	}
	_, err = client.Put(ctx, "go/a", tensorops.FromInt64([]int64{0}), tensorops.PutOptions{ExpectedVersion: tensorops.Ptr[int64](2)})
	expectStatus(t, "Put with a stale ExpectedVersion", err, codes.FailedPrecondition)
	_, err = client.Get(ctx, "go/a", tensorops.GetOptions{Version: tensorops.Ptr[int64](1)})
	expectStatus(t, "Get of version 1", err, codes.FailedPrecondition)
	_, err = client.IndexSelect(ctx, a, 0, tensorops.FromInt64([]int64{0})) // a pins version 1
	expectStatus(t, "an op on a stale RefAt", err, codes.FailedPrecondition)
	got, err := client.IndexSelect(ctx, a.Latest(), 0, tensorops.FromInt64([]int64{0}))
	expectTensor(t, "an op on Latest()", got, err, tensorops.Float64, []int64{1}, []float64{0})

	err = client.Delete(ctx, "go/a", tensorops.DeleteOptions{ExpectedVersion: tensorops.Ptr[int64](1)})
	expectStatus(t, "Delete with a stale ExpectedVersion", err, codes.FailedPrecondition)
	for _, name := range []string{"go/a", "go/b"} {
		if err := client.Delete(ctx, name); err != nil {
			t.Errorf("Delete(%s): %v", name, err)
		}
	}
	_, err = client.Info(ctx, "go/a")
	expectStatus(t, "Info after Delete", err, codes.NotFound)
	_, err = client.Get(ctx, "go/b")
	expectStatus(t, "Get after Delete", err, codes.NotFound)
	expectStatus(t, "Delete after Delete", client.Delete(ctx, "go/b"), codes.NotFound)
	if infos, err := client.List(ctx); err != nil || len(infos) != 0 {
		t.Errorf("List after Delete: %v %v", infos, err)
	}
}

func TestStoreAsAndInPlace(t *testing.T) {
	client := startClient(t)
	ctx := testContext(t)
	input := tensorops.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 2, 3)
	index := tensorops.FromInt64([]int64{2, 0}, 2, 1)
	stored, err := client.Gather(ctx, input, 1, index, tensorops.GatherOptions{Result: tensorops.ResultOptions{StoreAs: "go/out"}})
	if err != nil {
		t.Fatal(err)
	}
	if stored.String() != `stored "go/out"@1 float32[2 1]` || stored.HasData() {
		t.Errorf("Gather with StoreAs returned %v (HasData %v)", stored, stored.HasData())
	}
	got, err := client.Get(ctx, "go/out")
	expectTensor(t, "the stored result", got, err, tensorops.Float32, []int64{2, 1}, []float32{3, 4})

	table, err := client.Put(ctx, "go/table", tensorops.FromInt64([]int64{0, 0, 0, 0, 0, 0}, 2, 3))
	if err != nil {
		t.Fatal(err)
	}
	sumInPlace := tensorops.ScatterOptions{Reduce: tensorops.Sum, Result: tensorops.ResultOptions{InPlace: true}}
	update := tensorops.FromInt64([]int64{5, 6, 7}, 1, 3)
	rows := tensorops.FromInt64([]int64{0, 1, 0}, 1, 3)
	updated, err := client.Scatter(ctx, table, 0, rows, update, sumInPlace)
	if err != nil {
		t.Fatal(err)
	}
	if updated.String() != `stored "go/table"@2 int64[2 3]` {
		t.Errorf("an in-place Scatter returned %v, want version 2", updated)
	}
	got, err = client.Get(ctx, "go/table")
	expectTensor(t, "the table after one update", got, err, tensorops.Int64, []int64{2, 3}, []int64{5, 0, 7, 0, 6, 0})
	// Chained from the reference it returned, with the elements back.
	sumInPlace.Result.ReturnData = true
	again, err := client.Scatter(ctx, updated, 0, rows, update, sumInPlace)
	expectTensor(t, "a second update with ReturnData", again, err, tensorops.Int64, []int64{2, 3}, []int64{10, 0, 14, 0, 12, 0})
	if version, _ := again.StoredVersion(); version != 3 {
		t.Errorf("the second update made version %d, want 3", version)
	}
	_, err = client.Scatter(ctx, updated, 0, rows, update, sumInPlace) // pinned at 2, the table is at 3
	expectStatus(t, "an in-place update from a stale version", err, codes.FailedPrecondition)
}

// TestRepeatedInPlaceRequestAppliesOnce sends what a retry sends, the same request with the same
// update id, twice through the stub.
func TestRepeatedInPlaceRequestAppliesOnce(t *testing.T) {
	client := startClient(t)
	ctx := testContext(t)
	if _, err := client.Put(ctx, "go/once", tensorops.FromInt64([]int64{0, 0, 0})); err != nil {
		t.Fatal(err)
	}
	op := tensorops.ScatterOp(tensorops.Ref("go/once"), 0, tensorops.FromInt64([]int64{0, 2}), tensorops.FromInt64([]int64{5, 7}),
		tensorops.ScatterOptions{Reduce: tensorops.Sum, Result: tensorops.ResultOptions{InPlace: true, UpdateID: "go-update-1"}})
	for attempt := 1; attempt <= 2; attempt++ {
		response, err := client.Stub().Scatter(ctx, op.Proto().GetScatter(), client.CallOptions()...)
		if err != nil {
			t.Fatalf("attempt %d: %v", attempt, err)
		}
		if version := response.GetResult().GetStored().GetVersion(); version != 2 {
			t.Errorf("attempt %d answered version %d, want 2", attempt, version)
		}
	}
	got, err := client.Get(ctx, "go/once")
	expectTensor(t, "after the same update twice", got, err, tensorops.Int64, []int64{3}, []int64{5, 0, 7})
	// Run gives each call of one Op without an id a fresh id: two updates.
	op = tensorops.ScatterOp(tensorops.Ref("go/once"), 0, tensorops.FromInt64([]int64{1}), tensorops.FromInt64([]int64{1}),
		tensorops.ScatterOptions{Reduce: tensorops.Sum, Result: tensorops.ResultOptions{InPlace: true}})
	for i := 0; i < 2; i++ {
		if _, err := client.Run(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	got, err = client.Get(ctx, "go/once")
	expectTensor(t, "after two Runs of one Op", got, err, tensorops.Int64, []int64{3}, []int64{5, 2, 7})
}

// flakyServer fails the first attempt of every call with Unavailable and records what each
// attempt carried: the update id of ops, the name of puts, gets and deletes. ListTensors fails
// every attempt.
type flakyServer struct {
	tensoropsv1.UnimplementedTensorOpsServer
	mu       sync.Mutex
	attempts map[string][]string
}

func (f *flakyServer) attempt(rpc, what string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts[rpc] = append(f.attempts[rpc], what)
	if len(f.attempts[rpc])%2 == 1 {
		return status.Error(codes.Unavailable, "the first attempt fails")
	}
	return nil
}

func (f *flakyServer) Scatter(_ context.Context, request *tensoropsv1.ScatterRequest) (*tensoropsv1.ScatterResponse, error) {
	if err := f.attempt("Scatter", request.GetResultOptions().GetUpdateId()); err != nil {
		return nil, err
	}
	return &tensoropsv1.ScatterResponse{Result: &tensoropsv1.Tensor{
		Dtype: tensoropsv1.DataType_DATA_TYPE_FLOAT32, Shape: []int64{2},
		Stored: &tensoropsv1.TensorRef{Name: request.GetInput().GetStored().GetName(), Version: tensorops.Ptr[int64](7)}}}, nil
}

func (f *flakyServer) PutTensor(stream tensoropsv1.TensorOps_PutTensorServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	for {
		if _, err := stream.Recv(); err == io.EOF {
			break
		} else if err != nil {
			return err
		}
	}
	if err := f.attempt("PutTensor", first.GetHeader().GetName()); err != nil {
		return err
	}
	return stream.SendAndClose(&tensoropsv1.PutTensorResponse{Info: &tensoropsv1.TensorInfo{Name: first.GetHeader().GetName()}})
}

func (f *flakyServer) DeleteTensor(_ context.Context, request *tensoropsv1.DeleteTensorRequest) (*tensoropsv1.DeleteTensorResponse, error) {
	if err := f.attempt("DeleteTensor", request.GetName()); err != nil {
		return nil, err
	}
	return &tensoropsv1.DeleteTensorResponse{}, nil
}

func (f *flakyServer) GetTensor(request *tensoropsv1.GetTensorRequest, stream tensoropsv1.TensorOps_GetTensorServer) error {
	if err := f.attempt("GetTensor", request.GetName()); err != nil {
		return err
	}
	info := &tensoropsv1.TensorInfo{Name: request.GetName(), Dtype: tensoropsv1.DataType_DATA_TYPE_INT8, Shape: []int64{2}, Bytes: 2, Version: 1}
	if err := stream.Send(&tensoropsv1.GetTensorResponse{Part: &tensoropsv1.GetTensorResponse_Info{Info: info}}); err != nil {
		return err
	}
	return stream.Send(&tensoropsv1.GetTensorResponse{Part: &tensoropsv1.GetTensorResponse_Data{Data: []byte{1, 2}}})
}

func (f *flakyServer) ListTensors(context.Context, *tensoropsv1.ListTensorsRequest) (*tensoropsv1.ListTensorsResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts["ListTensors"] = append(f.attempts["ListTensors"], "")
	return nil, status.Error(codes.Unavailable, "every attempt fails")
}

// startFlaky returns a Client (Dial with opts) of a new flakyServer. The retries are the
// Client's own: no GRPC_GO_RETRY=on needed (gRPC-Go 1.33 needs it for a service config's).
func startFlaky(t *testing.T, opts ...tensorops.Option) (*tensorops.Client, *flakyServer) {
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fake := &flakyServer{attempts: map[string][]string{}}
	server := grpc.NewServer()
	tensoropsv1.RegisterTensorOpsServer(server, fake)
	go server.Serve(listener)
	t.Cleanup(server.Stop)
	client, err := tensorops.Dial(listener.Addr().String(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	return client, fake
}

// TestReadsAreRetried: Get (a stream) and unary reads get their attempts, 5 by default or as
// WithLoadBalancing says, whatever GRPC_GO_RETRY holds.
func TestReadsAreRetried(t *testing.T) {
	client, fake := startFlaky(t)
	ctx := testContext(t)
	got, err := client.Get(ctx, "t")
	expectTensor(t, "Get after a failed attempt", got, err, tensorops.Int8, []int64{2}, []int8{1, 2})
	_, err = client.List(ctx)
	expectStatus(t, "List", err, codes.Unavailable, "every attempt fails")
	if want := []string{"t", "t"}; !reflect.DeepEqual(fake.attempts["GetTensor"], want) || len(fake.attempts["ListTensors"]) != tensorops.MaxAttemptsCap {
		t.Errorf("attempts %v, want GetTensor %v and ListTensors %d times", fake.attempts, want, tensorops.MaxAttemptsCap)
	}

	client, fake = startFlaky(t, tensorops.WithLoadBalancing(true, 2))
	_, err = client.List(ctx)
	expectStatus(t, "List with 2 attempts", err, codes.Unavailable, "every attempt fails")
	client, once := startFlaky(t, tensorops.WithLoadBalancing(false, 1))
	_, err = client.Get(ctx, "t")
	expectStatus(t, "Get with 1 attempt", err, codes.Unavailable, "the first attempt fails")
	if len(fake.attempts["ListTensors"]) != 2 || len(once.attempts["GetTensor"]) != 1 {
		t.Errorf("attempts %v with 2, %v with 1; want as many", fake.attempts, once.attempts)
	}
}

func TestRetriedInPlaceCallsReuseTheirUpdateID(t *testing.T) {
	client, fake := startFlaky(t)
	ctx := testContext(t)
	index := tensorops.FromInt64([]int64{0})
	src := tensorops.FromFloat32([]float32{1})
	inPlace := tensorops.ScatterOptions{Result: tensorops.ResultOptions{InPlace: true}}
	for i := 0; i < 2; i++ {
		result, err := client.Scatter(ctx, tensorops.Ref("table"), 0, index, src, inPlace)
		if err != nil || result.String() != `stored "table"@7 float32[2]` {
			t.Fatalf("call %d: %v %v", i, result, err)
		}
	}
	inPlace.Result.UpdateID = "mine"
	if _, err := client.Scatter(ctx, tensorops.Ref("table"), 0, index, src, inPlace); err != nil {
		t.Fatal(err)
	}
	ids := fake.attempts["Scatter"]
	if len(ids) != 6 || len(ids[0]) != 32 || ids[1] != ids[0] || ids[3] != ids[2] || ids[2] == ids[0] || ids[4] != "mine" || ids[5] != "mine" {
		t.Errorf("update ids of the attempts: %q; want one fresh id per call, the same on its retry", ids)
	}
}

func TestPutAndDeleteAreNotRetried(t *testing.T) {
	client, fake := startFlaky(t)
	ctx := testContext(t)
	_, err := client.Put(ctx, "t", tensorops.FromInt8([]int8{1, 2}))
	expectStatus(t, "Put", err, codes.Unavailable)
	expectStatus(t, "Delete", client.Delete(ctx, "t"), codes.Unavailable)
	want := map[string][]string{"PutTensor": {"t"}, "DeleteTensor": {"t"}}
	if !reflect.DeepEqual(fake.attempts, want) {
		t.Errorf("attempts %v, want one each: %v", fake.attempts, want)
	}
}

func TestSnapshotStoreNeedsAStoreDir(t *testing.T) {
	client := startClient(t)
	_, err := client.SnapshotStore(testContext(t))
	expectStatus(t, "SnapshotStore without --store_dir", err, codes.FailedPrecondition, "--store_dir")
}

func TestSnapshotStoreWritesTheWholeStore(t *testing.T) {
	storeDir := filepath.Join(t.TempDir(), "store")
	client := startClient(t, "--store_dir="+storeDir, "--store_snapshot_interval_s=0")
	ctx := testContext(t)
	if _, err := client.Put(ctx, "a", tensorops.FromFloat32([]float32{0, 1, 2, 3, 4, 5}, 2, 3)); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Put(ctx, "b", tensorops.FromInt64([]int64{7, 8}, 2)); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	first, err := client.SnapshotStore(ctx)
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(first.Path) != storeDir || filepath.Base(first.Path) != fmt.Sprintf("snapshot-%012d.tosnap", first.Generation) {
		t.Errorf("SnapshotStore wrote %q (generation %d), want snapshot-<generation>.tosnap in %s", first.Path, first.Generation, storeDir)
	}
	// 40 bytes of tensors, and their records' framing.
	if file, err := os.Stat(first.Path); err != nil || file.Size() != first.Bytes || first.Bytes <= 40 || first.Tensors != 2 {
		t.Errorf("SnapshotStore: %+v; the file: %v %v", first, file, err)
	}
	if first.Written.Before(before.Add(-time.Second)) || first.Written.After(after.Add(time.Second)) ||
		first.Duration < 0 || first.Duration > after.Sub(before) {
		t.Errorf("SnapshotStore between %v and %v: written %v in %v", before, after, first.Written, first.Duration)
	}
	if err := client.Delete(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	second, err := client.SnapshotStore(ctx)
	if err != nil || second.Generation <= first.Generation || second.Tensors != 1 {
		t.Errorf("second SnapshotStore: %+v %v, want a later generation than %d with 1 tensor", second, err, first.Generation)
	}
	if _, err := os.Stat(first.Path); !os.IsNotExist(err) {
		t.Errorf("the first snapshot %s is still there after the second: %v", first.Path, err)
	}
}
