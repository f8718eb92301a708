package tensorops

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	tensoropsv1 "tensorops/client/go/tensorops/v1"
)

// DefaultChunkBytes is the data bytes one PutTensor message carries unless PutOptions.ChunkBytes
// says otherwise: 4 MiB, the server's default chunk for GetTensor.
const DefaultChunkBytes = 4 << 20

// ResultOptions say where an op's result goes: the Result field of every op's options struct.
// The zero value returns the result as usual. A result stored (StoreAs) or written in place
// (InPlace) comes back as a reference to the stored tensor at its new version (Tensor.IsRef),
// with its dtype and shape, and with its elements only when ReturnData is set. A result written
// into shared memory (SharedMemory) comes back as a tensor in shared memory
// (Tensor.IsSharedMemory), with its dtype and shape.
type ResultOptions struct {
	// Store the result under this name, in the caller's namespace.
	StoreAs string
	// StoreAs only: replace the name's value if it has one (FailedPrecondition otherwise).
	Overwrite bool
	// StoreAs only: the name must be at exactly this version (FailedPrecondition otherwise).
	ExpectedVersion *int64
	// Update the stored tensor that the op's input references (Ref, RefAt), in place, as torch's
	// scatter_ or index_add_ do. A pinned input (RefAt) is the version the update must start
	// from. Not together with StoreAs.
	InPlace bool
	// Return the result's elements too.
	ReturnData bool
	// The id that makes a retried StoreAs or InPlace call apply once: the server answers a call
	// whose id it remembers with what the first one did. Leave it empty and the client picks a
	// fresh one for every call, which the automatic retries of that call resend. Set it to
	// retry a call yourself (after Unavailable, or from another process); never give one id to
	// two different updates.
	UpdateID string
	// Write the result into a registered shared-memory region instead of the response: from
	// Offset, ByteSize at least the result's bytes (InvalidArgument otherwise); the bytes after
	// the result are left as they were. Not together with StoreAs, InPlace or ReturnData.
	SharedMemory SharedMemoryRef
}

func (o ResultOptions) proto() *tensoropsv1.ResultOptions {
	if o == (ResultOptions{}) {
		return nil
	}
	return &tensoropsv1.ResultOptions{
		StoreAs: o.StoreAs, Overwrite: o.Overwrite, ExpectedVersion: o.ExpectedVersion,
		InPlace: o.InPlace, ReturnData: o.ReturnData, UpdateId: o.UpdateID,
		SharedMemory: o.SharedMemory.proto(),
	}
}

// newUpdateID returns 32 random hex digits.
func newUpdateID() string {
	var id [16]byte
	if _, err := rand.Read(id[:]); err != nil {
		panic("tensorops: crypto/rand: " + err.Error())
	}
	return hex.EncodeToString(id[:])
}

// resultOptions returns the ResultOptions of op's request, nil when it has none; every op's
// request carries them in its field result_options.
func (o Op) resultOptions() *tensoropsv1.ResultOptions {
	message := o.message.ProtoReflect()
	field := message.WhichOneof(message.Descriptor().Oneofs().ByName("op"))
	if field == nil {
		return nil
	}
	request := message.Get(field).Message()
	options := request.Descriptor().Fields().ByName("result_options")
	if options == nil || !request.Has(options) {
		return nil
	}
	return request.Get(options).Message().Interface().(*tensoropsv1.ResultOptions)
}

// withUpdateID returns op with an update id if it changes the store (StoreAs or InPlace) and
// has none. owned: the request was built for this call alone and may be changed; otherwise a
// copy (inline tensors included) gets the id, so that the caller's Op, sent again, is a new
// update and not a retry of this one.
func withUpdateID(op Op, owned bool) Op {
	options := op.resultOptions()
	if options == nil || options.GetUpdateId() != "" || (options.GetStoreAs() == "" && !options.GetInPlace()) {
		return op
	}
	if !owned {
		op = Op{proto.Clone(op.message).(*tensoropsv1.OpRequest)}
		options = op.resultOptions()
	}
	options.UpdateId = newUpdateID()
	return op
}

// TensorInfo describes a stored tensor.
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int64
	// numel(Shape) * DType.ItemSize().
	Bytes int64
	// 1 when the name was created, one more for every change.
	Version int64
	// Where the server keeps it: "cpu".
	Device string
	// When the name was first stored, and when its value last changed.
	Created, Updated time.Time
}

func infoFromProto(info *tensoropsv1.TensorInfo) TensorInfo {
	return TensorInfo{
		Name: info.GetName(), DType: DType(info.GetDtype()), Shape: append([]int64{}, info.GetShape()...),
		Bytes: info.GetBytes(), Version: info.GetVersion(), Device: info.GetDevice(),
		Created: time.Unix(0, info.GetCreatedUnixNanos()), Updated: time.Unix(0, info.GetUpdatedUnixNanos()),
	}
}

// Ref returns a reference to the tensor at this version, with its dtype and shape.
func (i TensorInfo) Ref() Tensor {
	tensor := RefAt(i.Name, i.Version)
	tensor.dtype, tensor.shape = i.DType, append([]int64{}, i.Shape...)
	return tensor
}

// Progress is told how many of a transfer's bytes are done after each chunk.
type Progress func(bytesDone, bytesTotal int64)

// PutOptions are the optional arguments of Put.
type PutOptions struct {
	// Replace the name's value if it has one (FailedPrecondition for an existing name otherwise,
	// unless ExpectedVersion matches).
	Overwrite bool
	// The name must exist at exactly this version.
	ExpectedVersion *int64
	// Data bytes per message, 1 to the client's max message bytes less 1 KiB (else
	// InvalidArgument); 0 means DefaultChunkBytes.
	ChunkBytes int
	// Called after each chunk has been sent (and once with 0, 0 for an empty tensor; once with
	// the tensor's bytes for a tensor in shared memory, when the server has them).
	Progress Progress
}

// chunkBytes returns the chunk size to use for `requested` bytes (0: the default), or
// InvalidArgument naming the limit.
func (c *Client) chunkBytes(requested int, fallback int) (int, error) {
	limit := c.maxMessageBytes - 1024
	if requested == 0 {
		requested = fallback
		if requested > limit {
			requested = limit
		}
	}
	if requested < 1 || requested > limit {
		return 0, status.Errorf(codes.InvalidArgument,
			"tensorops: ChunkBytes = %d is out of range (expected 1 <= ChunkBytes <= %d: the max message bytes less 1 KiB)",
			requested, limit)
	}
	return requested, nil
}

// Put stores t under `name` and returns a reference to it at its new version (RefAt, with its
// dtype and shape). The bytes go in chunks over one PutTensor stream, so any size fits; the
// tensor becomes visible when the upload completes, all at once. Put is never retried
// automatically (it carries no update id, and a retry could replace a value another client
// stored in between): on Unavailable, call it again. t must hold its elements (not a reference:
// InvalidArgument), or be a tensor in shared memory (InSharedMemory, SharedMemory.Write): then
// the server copies its bytes from the region and the stream carries the header alone.
func (c *Client) Put(ctx context.Context, name string, t Tensor, opts ...PutOptions) (Tensor, error) {
	o := optional("Put", opts)
	header := &tensoropsv1.PutTensorHeader{
		Name: name, Dtype: tensoropsv1.DataType(t.dtype), Shape: t.shape,
		Overwrite: o.Overwrite, ExpectedVersion: o.ExpectedVersion,
	}
	chunk := 0
	if t.shared != nil {
		header.SharedMemory = t.shared.proto()
	} else {
		if !t.HasData() || t.IsZero() {
			return Tensor{}, status.Errorf(codes.InvalidArgument, "tensorops: Put %q: %v holds no elements to store", name, t)
		}
		var err error
		if chunk, err = c.chunkBytes(o.ChunkBytes, DefaultChunkBytes); err != nil {
			return Tensor{}, err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := c.stub.PutTensor(ctx, c.callOpts...)
	if err != nil {
		return Tensor{}, err
	}
	if err := stream.Send(&tensoropsv1.PutTensorRequest{Part: &tensoropsv1.PutTensorRequest_Header{Header: header}}); err != nil {
		return Tensor{}, putError(stream)
	}
	// A tensor in shared memory has no data here: the stream is its header alone.
	total := int64(len(t.data))
	for done := 0; done < len(t.data); {
		end := done + chunk
		if end > len(t.data) {
			end = len(t.data)
		}
		if err := stream.Send(&tensoropsv1.PutTensorRequest{Part: &tensoropsv1.PutTensorRequest_Data{Data: t.data[done:end]}}); err != nil {
			return Tensor{}, putError(stream)
		}
		done = end
		if o.Progress != nil {
			o.Progress(int64(done), total)
		}
	}
	if total == 0 && t.shared == nil && o.Progress != nil {
		o.Progress(0, 0)
	}
	response, err := stream.CloseAndRecv()
	if err != nil {
		return Tensor{}, err
	}
	if t.shared != nil && o.Progress != nil {
		o.Progress(t.shared.ByteSize, t.shared.ByteSize)
	}
	return infoFromProto(response.GetInfo()).Ref(), nil
}

// putError returns the status that ended a PutTensor stream whose Send failed (io.EOF: the
// server answered early, with an error).
func putError(stream tensoropsv1.TensorOps_PutTensorClient) error {
	_, err := stream.CloseAndRecv()
	if err == nil {
		return status.Error(codes.Internal, "tensorops: the server ended the upload early without an error")
	}
	return err
}

// GetOptions are the optional arguments of Get.
type GetOptions struct {
	// The version the tensor must be at (FailedPrecondition otherwise); nil: the current one.
	Version *int64
	// The most data bytes per message; 0: the server's default (4 MiB).
	ChunkBytes int
	// Called after each chunk has arrived (and once with 0, 0 for an empty tensor; once with the
	// tensor's bytes when they were written into SharedMemory).
	Progress Progress
	// Write the tensor's bytes into this registered shared-memory region instead of sending
	// them: from Offset, ByteSize at least the tensor's bytes (InvalidArgument otherwise).
	SharedMemory SharedMemoryRef
}

// Get returns the stored tensor `name`, all of one version, received in chunks. With
// GetOptions.SharedMemory the server writes the bytes into the region instead, and Get returns
// the tensor in shared memory that names them (its dtype and shape, no elements:
// SharedMemory.Read reads them). A Client from Dial retries it, as a unary call, while no
// message of the tensor has arrived.
func (c *Client) Get(ctx context.Context, name string, opts ...GetOptions) (Tensor, error) {
	o := optional("Get", opts)
	if o.ChunkBytes != 0 {
		if _, err := c.chunkBytes(o.ChunkBytes, 0); err != nil {
			return Tensor{}, err
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	request := &tensoropsv1.GetTensorRequest{
		Name: name, Version: o.Version, ChunkBytes: int64(o.ChunkBytes), SharedMemory: o.SharedMemory.proto()}
	// A read: retried as the unary calls are (retrier), until its first message has arrived.
	var (
		stream tensoropsv1.TensorOps_GetTensorClient
		first  *tensoropsv1.GetTensorResponse
		err    error
	)
	for attempt := 1; ; attempt++ {
		stream, err = c.stub.GetTensor(ctx, request, c.callOpts...)
		if err == nil {
			first, err = stream.Recv()
		}
		if err == nil || !c.retry.again(ctx, attempt, err) {
			break
		}
	}
	if err != nil {
		return Tensor{}, err
	}
	info := first.GetInfo()
	if info == nil {
		return Tensor{}, status.Errorf(codes.Internal, "tensorops: Get %q: the first message holds no TensorInfo", name)
	}
	// Into shared memory, the stream carries no data after the TensorInfo.
	shared := o.SharedMemory != (SharedMemoryRef{})
	streamed := info.GetBytes()
	if shared {
		streamed = 0
	}
	data := make([]byte, 0, streamed)
	for {
		response, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Tensor{}, err
		}
		if int64(len(data)+len(response.GetData())) > streamed {
			return Tensor{}, status.Errorf(codes.Internal, "tensorops: Get %q: the server sent more than the %d bytes it was to send", name, streamed)
		}
		data = append(data, response.GetData()...)
		if o.Progress != nil {
			o.Progress(int64(len(data)), info.GetBytes())
		}
	}
	if o.Progress != nil && (info.GetBytes() == 0 || shared) {
		o.Progress(info.GetBytes(), info.GetBytes())
	}
	var tensor Tensor
	if shared {
		tensor, err = sharedTensor(SharedMemoryRef{Region: o.SharedMemory.Region, Offset: o.SharedMemory.Offset}, DType(info.GetDtype()), info.GetShape())
	} else {
		tensor, err = NewTensor(DType(info.GetDtype()), info.GetShape(), data)
	}
	if err != nil {
		return Tensor{}, status.Errorf(codes.Internal, "tensorops: Get %q: %v", name, err)
	}
	return tensor, nil
}

// List returns every stored tensor of the caller's namespace, by name.
func (c *Client) List(ctx context.Context) ([]TensorInfo, error) {
	response, err := c.stub.ListTensors(ctx, &tensoropsv1.ListTensorsRequest{}, c.callOpts...)
	if err != nil {
		return nil, err
	}
	infos := make([]TensorInfo, 0, len(response.GetTensors()))
	for _, info := range response.GetTensors() {
		infos = append(infos, infoFromProto(info))
	}
	return infos, nil
}

// Info describes the stored tensor `name` (NotFound if there is none).
func (c *Client) Info(ctx context.Context, name string) (TensorInfo, error) {
	response, err := c.stub.TensorInfo(ctx, &tensoropsv1.TensorInfoRequest{Name: name}, c.callOpts...)
	if err != nil {
		return TensorInfo{}, err
	}
	return infoFromProto(response.GetInfo()), nil
}

// DeleteOptions are the optional arguments of Delete.
type DeleteOptions struct {
	// Delete only if the tensor is at exactly this version (FailedPrecondition otherwise).
	ExpectedVersion *int64
}

// Delete deletes the stored tensor `name` (NotFound if there is none). Like Put, it is never
// retried automatically.
func (c *Client) Delete(ctx context.Context, name string, opts ...DeleteOptions) error {
	o := optional("Delete", opts)
	_, err := c.stub.DeleteTensor(ctx, &tensoropsv1.DeleteTensorRequest{Name: name, ExpectedVersion: o.ExpectedVersion}, c.callOpts...)
	return err
}

// Snapshot describes the snapshot of the server's whole store that SnapshotStore wrote.
type Snapshot struct {
	// The file in the server's --store_dir, on the server's machine, e.g.
	// "/data/snapshot-000000000007.tosnap".
	Path string
	// Later snapshots have higher generations.
	Generation int64
	// The tensors it holds, of every namespace.
	Tensors int64
	// The file's size.
	Bytes int64
	// When the file was complete.
	Written time.Time
	// How long writing it took.
	Duration time.Duration
}

// SnapshotStore has the server write a snapshot of its whole store (every namespace) to its
// --store_dir now, and returns once the file is on disk. FailedPrecondition from a server
// started without --store_dir (its store is in memory only).
func (c *Client) SnapshotStore(ctx context.Context) (Snapshot, error) {
	response, err := c.stub.SnapshotStore(ctx, &tensoropsv1.SnapshotStoreRequest{}, c.callOpts...)
	if err != nil {
		return Snapshot{}, err
	}
	return Snapshot{
		Path: response.GetPath(), Generation: response.GetGeneration(), Tensors: response.GetTensors(),
		Bytes: response.GetBytes(), Written: time.Unix(0, response.GetWrittenUnixNanos()),
		Duration: time.Duration(response.GetDurationMicros()) * time.Microsecond,
	}, nil
}
