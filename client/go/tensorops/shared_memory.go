package tensorops

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	tensoropsv1 "tensorops/client/go/tensorops/v1"
)

// Shared memory, for a client on the server's host: tensors that skip the socket
// (proto/tensorops/v1/shared_memory.proto, docs/clients.md, Shared memory).
//
//	shm, err := client.CreateSharedMemoryRegion(ctx, "io", 2<<20) // a new POSIX object, registered as "io"
//	defer client.DestroySharedMemoryRegion(ctx, shm)             // unregisters it, unmaps and removes it
//	ids, err := shm.Write(0, tensorops.FromInt64(rowIDs))        // the bytes, copied in; a reference
//	out, err := client.IndexSelect(ctx, tensorops.Ref("emb"), 0, ids, tensorops.IndexSelectOptions{
//		Result: tensorops.ResultOptions{SharedMemory: shm.Ref(1<<20, 1<<20)}}) // written into the region
//	rows, err := shm.Read(out)                                   // a Tensor with the elements, copied out
//
// A region is registered by name in the caller's namespace (the token's, like stored tensors). A
// tensor argument in a region (InSharedMemory, SharedMemory.Tensor or .Write) names its region,
// offset and bytes, with its dtype and shape; the offset must be a multiple of the dtype's item
// size. Every use is checked on the server: bytes outside the region are InvalidArgument, an
// unknown region NotFound, and an object shrunk or removed under its region FailedPrecondition
// for that call alone.

// SharedMemoryRef names bytes in a registered region: ByteSize bytes from Offset, counted from
// the start of the region as registered. The zero SharedMemoryRef (no Region) is "none".
type SharedMemoryRef struct {
	Region   string
	Offset   int64
	ByteSize int64
}

// proto returns the wire message; nil for the zero SharedMemoryRef.
func (r SharedMemoryRef) proto() *tensoropsv1.SharedMemoryRef {
	if r == (SharedMemoryRef{}) {
		return nil
	}
	return &tensoropsv1.SharedMemoryRef{Region: r.Region, Offset: r.Offset, ByteSize: r.ByteSize}
}

func sharedMemoryRefFromProto(message *tensoropsv1.SharedMemoryRef) SharedMemoryRef {
	return SharedMemoryRef{Region: message.GetRegion(), Offset: message.GetOffset(), ByteSize: message.GetByteSize()}
}

// sharedTensor returns the tensor of the given dtype and shape at ref.Region, ref.Offset, its
// ByteSize set to the tensor's bytes; an error for an undefined dtype or a negative size.
func sharedTensor(ref SharedMemoryRef, dtype DType, shape []int64) (Tensor, error) {
	if dtype.ItemSize() == 0 {
		return Tensor{}, fmt.Errorf("tensorops: a tensor in shared memory region %q needs a dtype, got %v", ref.Region, dtype)
	}
	for _, size := range shape {
		if size < 0 {
			return Tensor{}, fmt.Errorf("tensorops: negative size in shape %v", shape)
		}
	}
	ref.ByteSize = numElements(shape) * int64(dtype.ItemSize())
	return Tensor{dtype: dtype, shape: append([]int64{}, shape...), shared: &ref}, nil
}

// InSharedMemory returns a tensor argument whose elements are in the registered region `region`
// from byte `offset` (a multiple of dtype's item size), numel(shape) * dtype.ItemSize() bytes in
// the wire's layout (row-major, little-endian); no shape is a scalar. Any op takes it wherever it
// takes a Tensor, and Put stores its bytes; it holds no elements itself (HasData is false). It
// panics for an undefined dtype or a negative size, like the From* constructors.
func InSharedMemory(region string, offset int64, dtype DType, shape ...int64) Tensor {
	tensor, err := sharedTensor(SharedMemoryRef{Region: region, Offset: offset}, dtype, shape)
	if err != nil {
		panic(err.Error())
	}
	return tensor
}

// SharedMemory returns where t's elements are and true for a tensor in shared memory, else the
// zero SharedMemoryRef and false.
func (t Tensor) SharedMemory() (SharedMemoryRef, bool) {
	if t.shared == nil {
		return SharedMemoryRef{}, false
	}
	return *t.shared, true
}

// IsSharedMemory reports whether t is a tensor in shared memory.
func (t Tensor) IsSharedMemory() bool { return t.shared != nil }

// resultIn returns the result an op wrote into the region `ref` names (ResultOptions.SharedMemory):
// the response describes it with its dtype and shape only.
func resultIn(message *tensoropsv1.Tensor, ref *tensoropsv1.SharedMemoryRef) (Tensor, error) {
	if message.GetSharedMemory() != nil {
		return result(message)
	}
	if message == nil || message.GetStored() != nil || len(message.GetData()) != 0 {
		return Tensor{}, status.Errorf(codes.Internal,
			"tensorops: malformed result: the result written into shared memory region %q came back as %v", ref.GetRegion(), message)
	}
	tensor, err := sharedTensor(sharedMemoryRefFromProto(ref), DType(message.GetDtype()), message.GetShape())
	if err != nil {
		return Tensor{}, status.Errorf(codes.Internal, "tensorops: malformed result: %v", err)
	}
	return tensor, nil
}

// CUDAMemory is a GPU buffer shared through CUDA IPC: its cudaIpcMemHandle_t's 64 bytes and the
// device it is on, as the client's CUDA runtime numbers it. This package cannot make one (it
// has no cgo); it registers a handle made elsewhere and lists those other clients registered.
type CUDAMemory struct {
	RawHandle []byte
	DeviceID  int64
}

// SharedMemoryRegion describes a registered region: RegisterSharedMemory's argument and what
// ListSharedMemory returns.
type SharedMemoryRegion struct {
	// 1 to 256 bytes of [A-Za-z0-9._/-], unique in the caller's namespace.
	Name string
	// System shared memory: the POSIX shared-memory object's key, as shm_open(3) takes it
	// ("/name": the file /dev/shm/name on Linux), and where the region starts in it.
	Key    string
	Offset int64
	// The region's bytes.
	ByteSize int64
	// Non-nil for a CUDA region, which has no Key or Offset.
	CUDA *CUDAMemory
}

func (r SharedMemoryRegion) proto() *tensoropsv1.SharedMemoryRegion {
	message := &tensoropsv1.SharedMemoryRegion{Name: r.Name}
	if r.CUDA != nil {
		message.Memory = &tensoropsv1.SharedMemoryRegion_Cuda{Cuda: &tensoropsv1.CudaSharedMemory{
			RawHandle: r.CUDA.RawHandle, DeviceId: r.CUDA.DeviceID, ByteSize: r.ByteSize}}
	} else {
		message.Memory = &tensoropsv1.SharedMemoryRegion_System{System: &tensoropsv1.SystemSharedMemory{
			Key: r.Key, Offset: r.Offset, ByteSize: r.ByteSize}}
	}
	return message
}

func regionFromProto(message *tensoropsv1.SharedMemoryRegion) SharedMemoryRegion {
	region := SharedMemoryRegion{Name: message.GetName()}
	if cuda := message.GetCuda(); cuda != nil {
		region.ByteSize = cuda.GetByteSize()
		region.CUDA = &CUDAMemory{RawHandle: cuda.GetRawHandle(), DeviceID: cuda.GetDeviceId()}
	} else {
		system := message.GetSystem()
		region.Key, region.Offset, region.ByteSize = system.GetKey(), system.GetOffset(), system.GetByteSize()
	}
	return region
}

// RegisterSharedMemory has the server map a region of memory this client shares with it, under
// region.Name in the caller's namespace: InvalidArgument for a bad name, offset or size (a
// region past the object's end), AlreadyExists for a name in use, NotFound for an object that
// does not exist, ResourceExhausted past the server's --max_shared_memory_regions or
// --max_shared_memory_bytes. The server must run on this host (it opens the object by its key).
func (c *Client) RegisterSharedMemory(ctx context.Context, region SharedMemoryRegion) error {
	_, err := c.stub.RegisterSharedMemory(ctx, &tensoropsv1.RegisterSharedMemoryRequest{Region: region.proto()}, c.callOpts...)
	return err
}

// UnregisterSharedMemory forgets the region `name`, or every region of the caller's namespace
// when name is "", and returns the names it unregistered, sorted (NotFound for a name that is
// not registered). No call can use them from then on; the server unmaps each once the calls
// already using it are done. The objects themselves stay: they are the caller's.
func (c *Client) UnregisterSharedMemory(ctx context.Context, name string) ([]string, error) {
	response, err := c.stub.UnregisterSharedMemory(ctx, &tensoropsv1.UnregisterSharedMemoryRequest{Name: name}, c.callOpts...)
	if err != nil {
		return nil, err
	}
	return response.GetNames(), nil
}

// ListSharedMemoryOptions are the optional arguments of ListSharedMemory.
type ListSharedMemoryOptions struct {
	// Only this region (NotFound when it is not registered); "": every one.
	Name string
}

// ListSharedMemory returns the caller's registered regions, sorted by name.
func (c *Client) ListSharedMemory(ctx context.Context, opts ...ListSharedMemoryOptions) ([]SharedMemoryRegion, error) {
	o := optional("ListSharedMemory", opts)
	response, err := c.stub.ListSharedMemory(ctx, &tensoropsv1.ListSharedMemoryRequest{Name: o.Name}, c.callOpts...)
	if err != nil {
		return nil, err
	}
	regions := make([]SharedMemoryRegion, 0, len(response.GetRegions()))
	for _, region := range response.GetRegions() {
		regions = append(regions, regionFromProto(region))
	}
	return regions, nil
}

// SharedMemory is a POSIX shared-memory object this process created (NewSharedMemory) and maps,
// read and written through Bytes, Write and Read. Client.CreateSharedMemoryRegion creates one
// and registers all of it as a region (Name); Client.DestroySharedMemoryRegion undoes both.
//
// The server reads and writes the same bytes while a call that names them runs: do not change
// an argument's bytes, nor read a result's, until the call has returned. Shrinking or removing
// the object while it is registered fails the server's calls that use it (FailedPrecondition),
// and this process's own reads of the lost bytes (a SIGBUS): leave its size to Close.
type SharedMemory struct {
	key  string
	path string
	// The region it is registered as by CreateSharedMemoryRegion; "" otherwise.
	name string

	// Held for reading while the mapping is used (Write and Read copy under it), for writing
	// by Close, which unmaps it.
	mu   sync.RWMutex
	data []byte // The mapping; nil once closed.
}

// sharedMemoryKeyRule is what NewSharedMemory accepts as a key.
const sharedMemoryKeyRule = `a key is "/" and then 1 to 255 bytes with no "/" or NUL, not "." or ".."`

// checkSharedMemoryKey returns InvalidArgument unless key follows sharedMemoryKeyRule.
func checkSharedMemoryKey(key string) error {
	name := strings.TrimPrefix(key, "/")
	if !strings.HasPrefix(key, "/") || name == "" || len(name) > 255 || strings.ContainsAny(name, "/\x00") ||
		name == "." || name == ".." {
		return status.Errorf(codes.InvalidArgument, "tensorops: shared memory key %q: %s", key, sharedMemoryKeyRule)
	}
	return nil
}

// Key returns the object's key ("/name"), as RegisterSharedMemory takes it.
func (m *SharedMemory) Key() string { return m.key }

// Path returns the object's file: /dev/shm/name.
func (m *SharedMemory) Path() string { return m.path }

// Name returns the region the object is registered as by CreateSharedMemoryRegion; "" for an
// object from NewSharedMemory.
func (m *SharedMemory) Name() string { return m.name }

// Size returns the object's bytes; 0 once closed.
func (m *SharedMemory) Size() int64 {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return int64(len(m.data))
}

// Bytes returns the mapped bytes themselves, not a copy: writes to them are the server's to read.
// nil once closed; the slice must not be used after Close (the memory is unmapped).
func (m *SharedMemory) Bytes() []byte {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.data
}

// Ref returns byteSize bytes from offset of the region Name: a ResultOptions.SharedMemory or a
// GetOptions.SharedMemory.
func (m *SharedMemory) Ref(offset, byteSize int64) SharedMemoryRef {
	return SharedMemoryRef{Region: m.name, Offset: offset, ByteSize: byteSize}
}

// Tensor is InSharedMemory(m.Name(), offset, dtype, shape...): a tensor argument whose elements
// are already in the region.
func (m *SharedMemory) Tensor(offset int64, dtype DType, shape ...int64) Tensor {
	return InSharedMemory(m.name, offset, dtype, shape...)
}

// withSpan calls use with the mapped bytes [offset, offset+n), holding the lock for reading so
// that Close cannot unmap them meanwhile; FailedPrecondition once closed, InvalidArgument naming
// the bytes and the size when they are not all mapped.
func (m *SharedMemory) withSpan(what string, offset, n int64, use func([]byte)) error {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.data == nil {
		return status.Errorf(codes.FailedPrecondition, "tensorops: %s: shared memory %s is closed", what, m.key)
	}
	if offset < 0 || n < 0 || offset > int64(len(m.data)) || n > int64(len(m.data))-offset {
		return status.Errorf(codes.InvalidArgument,
			"tensorops: %s: bytes [%d, %d) are outside shared memory %s of %d bytes", what, offset, offset+n, m.key, len(m.data))
	}
	use(m.data[offset : offset+n])
	return nil
}

// Write copies t's elements into the object from byte offset and returns the tensor argument
// that names them there (m.Tensor(offset, t.DType(), t.Shape()...)). InvalidArgument when t
// holds no elements or they do not fit.
func (m *SharedMemory) Write(offset int64, t Tensor) (Tensor, error) {
	if !t.HasData() || t.IsZero() {
		return Tensor{}, status.Errorf(codes.InvalidArgument, "tensorops: Write of %v: it holds no elements", t)
	}
	err := m.withSpan(fmt.Sprintf("Write of %v", t), offset, int64(len(t.data)), func(out []byte) { copy(out, t.data) })
	if err != nil {
		return Tensor{}, err
	}
	return m.Tensor(offset, t.dtype, t.shape...), nil
}

// Read returns a copy of the elements of t, a tensor in m's region (an op's result written there,
// Get's into it, or an argument), as a Tensor that holds them. InvalidArgument for a tensor in
// another region or not in shared memory, or bytes past the object's end.
func (m *SharedMemory) Read(t Tensor) (Tensor, error) {
	if t.shared == nil || t.shared.Region != m.name {
		return Tensor{}, status.Errorf(codes.InvalidArgument, "tensorops: Read of %v: not a tensor in shared memory region %q", t, m.name)
	}
	var (
		out     Tensor
		invalid error
	)
	err := m.withSpan(fmt.Sprintf("Read of %v", t), t.shared.Offset, t.NumElements()*int64(t.dtype.ItemSize()),
		func(data []byte) { out, invalid = NewTensor(t.dtype, t.shape, data) }) // NewTensor copies data.
	if err != nil {
		return Tensor{}, err
	}
	return out, invalid
}

// Close unmaps the object and removes it (its key is free again; a server that still maps it
// keeps its bytes until it unmaps them), once the Writes and Reads in progress in other
// goroutines have copied their bytes. Bytes, Write and Read fail after it; a second Close
// does nothing. It does not unregister the region: DestroySharedMemoryRegion does both.
func (m *SharedMemory) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.data == nil {
		return nil
	}
	data := m.data
	m.data = nil
	return unmapAndRemove(data, m.path)
}

// CreateSharedMemoryRegion creates a shared-memory object of byteSize bytes under a fresh key
// ("/tensorops-go-" and 16 random hex digits), maps it, and registers all of it as the region
// `name`: the errors of NewSharedMemory and RegisterSharedMemory (the object is removed again
// when registering fails). Release it with DestroySharedMemoryRegion.
func (c *Client) CreateSharedMemoryRegion(ctx context.Context, name string, byteSize int64) (*SharedMemory, error) {
	m, err := NewSharedMemory("/tensorops-go-"+newUpdateID()[:16], byteSize)
	if err != nil {
		return nil, err
	}
	region := SharedMemoryRegion{Name: name, Key: m.key, ByteSize: byteSize}
	if err := c.RegisterSharedMemory(ctx, region); err != nil {
		m.Close()
		return nil, err
	}
	m.name = name
	return m, nil
}

// DestroySharedMemoryRegion unregisters m's region (when CreateSharedMemoryRegion registered it)
// and closes m (unmaps and removes the object), even when unregistering fails; it returns the
// first error.
func (c *Client) DestroySharedMemoryRegion(ctx context.Context, m *SharedMemory) error {
	var unregisterErr error
	if m.name != "" {
		_, unregisterErr = c.UnregisterSharedMemory(ctx, m.name)
	}
	closeErr := m.Close()
	if unregisterErr != nil {
		return unregisterErr
	}
	return closeErr
}
