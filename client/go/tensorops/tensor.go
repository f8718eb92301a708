package tensorops

import (
	"encoding/binary"
	"fmt"
	"math"

	tensoropsv1 "tensorops/client/go/tensorops/v1"
)

// DType is the element type of a Tensor; its values are those of the wire's tensorops.v1.DataType.
type DType int32

// The dtypes of the wire (tensor.proto). Float16 and BFloat16 travel as raw 16-bit patterns.
const (
	Invalid    = DType(tensoropsv1.DataType_DATA_TYPE_UNSPECIFIED)
	Bool       = DType(tensoropsv1.DataType_DATA_TYPE_BOOL)
	Uint8      = DType(tensoropsv1.DataType_DATA_TYPE_UINT8)
	Int8       = DType(tensoropsv1.DataType_DATA_TYPE_INT8)
	Int16      = DType(tensoropsv1.DataType_DATA_TYPE_INT16)
	Int32      = DType(tensoropsv1.DataType_DATA_TYPE_INT32)
	Int64      = DType(tensoropsv1.DataType_DATA_TYPE_INT64)
	Float16    = DType(tensoropsv1.DataType_DATA_TYPE_FLOAT16)
	BFloat16   = DType(tensoropsv1.DataType_DATA_TYPE_BFLOAT16)
	Float32    = DType(tensoropsv1.DataType_DATA_TYPE_FLOAT32)
	Float64    = DType(tensoropsv1.DataType_DATA_TYPE_FLOAT64)
	Complex64  = DType(tensoropsv1.DataType_DATA_TYPE_COMPLEX64)
	Complex128 = DType(tensoropsv1.DataType_DATA_TYPE_COMPLEX128)
)

var dtypeNames = map[DType]string{
	Bool: "bool", Uint8: "uint8", Int8: "int8", Int16: "int16", Int32: "int32", Int64: "int64",
	Float16: "float16", BFloat16: "bfloat16", Float32: "float32", Float64: "float64",
	Complex64: "complex64", Complex128: "complex128",
}

// String returns the dtype's lower-case name ("float32"), or "DType(N)" for a value the wire does
// not define.
func (d DType) String() string {
	if name, ok := dtypeNames[d]; ok {
		return name
	}
	return fmt.Sprintf("DType(%d)", int32(d))
}

// ItemSize returns the bytes one element takes on the wire; 0 for an undefined dtype.
func (d DType) ItemSize() int {
	switch d {
	case Bool, Uint8, Int8:
		return 1
	case Int16, Float16, BFloat16:
		return 2
	case Int32, Float32:
		return 4
	case Int64, Float64, Complex64:
		return 8
	case Complex128:
		return 16
	}
	return 0
}

// Tensor is a dense tensor in the wire's layout: row-major, little-endian. Build one with the
// From* constructors; read one with the accessor of its dtype. A Tensor is an immutable value:
// constructors copy their input and accessors return fresh slices. The zero Tensor has dtype
// Invalid and stands for "absent" where an op allows that (ScatterNdZeros has no input).
//
// A Tensor may instead be a reference to a tensor kept in the server's store (Ref, Client.Put,
// and results stored with ResultOptions): ops then read the stored value by name, and no bytes
// cross the wire. A reference knows its dtype and shape when the server told them; it holds
// elements only when a stored result was asked for with ReturnData (HasData).
//
// Or a Tensor may name bytes in a shared-memory region the caller registered (InSharedMemory,
// results written with ResultOptions.SharedMemory, Get with GetOptions.SharedMemory): it has its
// dtype and shape but never its elements, which the server reads or writes in the region.
type Tensor struct {
	dtype DType
	shape []int64
	data  []byte
	// Non-nil for a reference to a stored tensor.
	stored *storedRef
	// Non-nil for a tensor in a shared-memory region.
	shared *SharedMemoryRef
}

// storedRef names a stored tensor, at a version or at whatever version is current.
type storedRef struct {
	name     string
	version  int64
	pinned   bool // Whether version is set: ops require the tensor at exactly that version.
	withData bool // Whether the Tensor's data holds the elements (ReturnData).
}

// Ref returns a reference to the stored tensor `name`, at whatever version is current when an
// op runs. Its dtype is Invalid and its shape unknown: Client.Info tells them.
func Ref(name string) Tensor { return Tensor{stored: &storedRef{name: name}} }

// RefAt returns a reference to the stored tensor `name` that ops accept only while it is at
// `version` (FailedPrecondition naming the current version otherwise).
func RefAt(name string, version int64) Tensor {
	return Tensor{stored: &storedRef{name: name, version: version, pinned: true}}
}

// IsRef reports whether t references a stored tensor.
func (t Tensor) IsRef() bool { return t.stored != nil }

// StoredName returns the name of the stored tensor t references; "" when t is not a reference.
func (t Tensor) StoredName() string {
	if t.stored == nil {
		return ""
	}
	return t.stored.name
}

// StoredVersion returns the version a reference requires and true, or 0 and false for a
// reference at whatever version is current and for a Tensor that is not a reference.
func (t Tensor) StoredVersion() (int64, bool) {
	if t.stored == nil || !t.stored.pinned {
		return 0, false
	}
	return t.stored.version, true
}

// Latest returns the reference t without its version: ops use whatever version is current. It
// returns t unchanged when t is not a reference.
func (t Tensor) Latest() Tensor {
	if t.stored == nil {
		return t
	}
	return Tensor{dtype: t.dtype, shape: t.shape, stored: &storedRef{name: t.stored.name}}
}

// HasData reports whether t holds its elements: every Tensor but references and tensors in
// shared memory, and references returned with ReturnData.
func (t Tensor) HasData() bool { return t.shared == nil && (t.stored == nil || t.stored.withData) }

// DType returns the element type.
func (t Tensor) DType() DType { return t.dtype }

// Shape returns a copy of the shape; empty for a scalar (rank 0).
func (t Tensor) Shape() []int64 { return append([]int64{}, t.shape...) }

// NumElements returns the product of the shape (1 for a scalar).
func (t Tensor) NumElements() int64 { return numElements(t.shape) }

// Bytes returns a copy of the raw little-endian element bytes; nil for a reference without data
// and for a tensor in shared memory (SharedMemory.Read reads those).
func (t Tensor) Bytes() []byte {
	if !t.HasData() {
		return nil
	}
	return append([]byte{}, t.data...)
}

// IsZero reports whether t is the zero Tensor (no dtype), which ops treat as an absent argument.
func (t Tensor) IsZero() bool {
	return t.dtype == Invalid && t.shape == nil && t.data == nil && t.stored == nil && t.shared == nil
}

// String describes the tensor's dtype and shape, not its elements: "float32[2 3]"; a reference
// adds its name and version: `stored "table"@3 float32[2 3]` ("@latest": no version); a tensor in
// shared memory its region and byte range: `shared memory "in"[64:88] float32[2 3]`.
func (t Tensor) String() string {
	if t.shared != nil {
		return fmt.Sprintf("shared memory %q[%d:%d] %v%v", t.shared.Region, t.shared.Offset,
			t.shared.Offset+t.shared.ByteSize, t.dtype, t.shape)
	}
	if t.stored == nil {
		return fmt.Sprintf("%v%v", t.dtype, t.shape)
	}
	version := "latest"
	if t.stored.pinned {
		version = fmt.Sprint(t.stored.version)
	}
	return fmt.Sprintf("stored %q@%s %v%v", t.stored.name, version, t.dtype, t.shape)
}

// Reshape returns a tensor with the same elements and dtype and the given shape (none: a scalar).
// It panics if the shape's product differs from the number of elements or a size is negative,
// or if t is a reference. A tensor in shared memory is reshaped in place: the same bytes of the
// same region.
func (t Tensor) Reshape(shape ...int64) Tensor {
	if t.stored != nil {
		panic(fmt.Sprintf("tensorops: Reshape of %v: a reference has no elements to reshape", t))
	}
	checkShape("Reshape", shape, t.NumElements())
	return Tensor{dtype: t.dtype, shape: append([]int64{}, shape...), data: t.data, shared: t.shared}
}

// NewTensor returns a tensor of the given dtype and shape holding the raw little-endian bytes
// `data` (copied). It returns an error if the dtype is undefined, a size is negative, or len(data)
// is not numel(shape) * dtype.ItemSize().
func NewTensor(dtype DType, shape []int64, data []byte) (Tensor, error) {
	if dtype.ItemSize() == 0 {
		return Tensor{}, fmt.Errorf("tensorops: undefined dtype %v", dtype)
	}
	for _, size := range shape {
		if size < 0 {
			return Tensor{}, fmt.Errorf("tensorops: negative size in shape %v", shape)
		}
	}
	if want := numElements(shape) * int64(dtype.ItemSize()); int64(len(data)) != want {
		return Tensor{}, fmt.Errorf("tensorops: %v%v needs %d bytes of data, got %d", dtype, shape,
			want, len(data))
	}
	return Tensor{dtype: dtype, shape: append([]int64{}, shape...), data: append([]byte{}, data...)}, nil
}

// FromProto returns the tensor a wire message holds, with NewTensor's checks. A message with
// `stored` set gives a reference, with the dtype and shape the message has, and its elements
// when the message carries them (a result asked for with ReturnData, or one of no elements). A
// message with `shared_memory` set gives a tensor in shared memory (InSharedMemory's checks).
func FromProto(message *tensoropsv1.Tensor) (Tensor, error) {
	if message == nil {
		return Tensor{}, fmt.Errorf("tensorops: missing tensor")
	}
	if shared := message.GetSharedMemory(); shared != nil {
		if len(message.GetData()) != 0 || message.GetStored() != nil {
			return Tensor{}, fmt.Errorf("tensorops: a tensor in shared memory region %q with data or a stored reference too", shared.GetRegion())
		}
		return sharedTensor(sharedMemoryRefFromProto(shared), DType(message.GetDtype()), message.GetShape())
	}
	stored := message.GetStored()
	if stored == nil {
		return NewTensor(DType(message.GetDtype()), message.GetShape(), message.GetData())
	}
	if stored.GetName() == "" {
		return Tensor{}, fmt.Errorf("tensorops: a reference without a name")
	}
	ref := &storedRef{name: stored.GetName(), version: stored.GetVersion(), pinned: stored.Version != nil}
	dtype := DType(message.GetDtype())
	if dtype.ItemSize() == 0 || (len(message.GetData()) == 0 && numElements(message.GetShape()) != 0) {
		if len(message.GetData()) != 0 {
			return Tensor{}, fmt.Errorf("tensorops: a reference to %q with data but no dtype", ref.name)
		}
		return Tensor{dtype: dtype, shape: append([]int64{}, message.GetShape()...), stored: ref}, nil
	}
	tensor, err := NewTensor(dtype, message.GetShape(), message.GetData())
	if err != nil {
		return Tensor{}, err
	}
	ref.withData = true
	tensor.stored = ref
	return tensor, nil
}

// Proto returns the wire message of t; nil for the zero Tensor. The message shares t's bytes:
// do not modify its Data. A reference's message names the stored tensor (and the version it
// requires) and carries neither dtype, shape nor data; a tensor in shared memory's names the
// region and the bytes, with the dtype and shape.
func (t Tensor) Proto() *tensoropsv1.Tensor {
	if t.IsZero() {
		return nil
	}
	if t.shared != nil {
		return &tensoropsv1.Tensor{
			Dtype: tensoropsv1.DataType(t.dtype), Shape: append([]int64{}, t.shape...),
			SharedMemory: t.shared.proto(),
		}
	}
	if t.stored != nil {
		ref := &tensoropsv1.TensorRef{Name: t.stored.name}
		if t.stored.pinned {
			ref.Version = Ptr(t.stored.version)
		}
		return &tensoropsv1.Tensor{Stored: ref}
	}
	return &tensoropsv1.Tensor{
		Dtype: tensoropsv1.DataType(t.dtype),
		Shape: append([]int64{}, t.shape...),
		Data:  t.data,
	}
}

func numElements(shape []int64) int64 {
	count := int64(1)
	for _, size := range shape {
		count *= size
	}
	return count
}

// checkShape panics unless shape has no negative size and holds exactly `count` elements. No
// shape at all means a 1-D tensor of every element and is handled by the callers.
func checkShape(function string, shape []int64, count int64) {
	for _, size := range shape {
		if size < 0 {
			panic(fmt.Sprintf("tensorops: %s: negative size in shape %v", function, shape))
		}
	}
	if numElements(shape) != count {
		panic(fmt.Sprintf("tensorops: %s: shape %v holds %d elements, data has %d", function, shape,
			numElements(shape), count))
	}
}

// build is the body of every From* constructor: the shape (1-D when none is given), checked
// against n elements, and the bytes `put` writes for each element at offset i * itemsize.
func build(function string, dtype DType, n int, shape []int64, put func(out []byte, i int)) Tensor {
	if len(shape) == 0 {
		shape = []int64{int64(n)}
	}
	checkShape(function, shape, int64(n))
	itemsize := dtype.ItemSize()
	data := make([]byte, n*itemsize)
	for i := 0; i < n; i++ {
		put(data[i*itemsize:], i)
	}
	return Tensor{dtype: dtype, shape: append([]int64{}, shape...), data: data}
}

// The From* constructors copy `data` into a tensor of the given shape; with no shape the tensor
// is 1-D with len(data) elements (use Reshape() for a scalar). They panic if the shape's product
// differs from len(data) or a size is negative, like a slice index out of range: both are
// mistakes in the calling code, not conditions to handle.

// FromBool returns a BOOL tensor.
func FromBool(data []bool, shape ...int64) Tensor {
	return build("FromBool", Bool, len(data), shape, func(out []byte, i int) {
		if data[i] {
			out[0] = 1
		}
	})
}

// FromUint8 returns a UINT8 tensor.
func FromUint8(data []uint8, shape ...int64) Tensor {
	return build("FromUint8", Uint8, len(data), shape, func(out []byte, i int) { out[0] = data[i] })
}

// FromInt8 returns an INT8 tensor.
func FromInt8(data []int8, shape ...int64) Tensor {
	return build("FromInt8", Int8, len(data), shape, func(out []byte, i int) { out[0] = byte(data[i]) })
}

// FromInt16 returns an INT16 tensor.
func FromInt16(data []int16, shape ...int64) Tensor {
	return build("FromInt16", Int16, len(data), shape, func(out []byte, i int) {
		binary.LittleEndian.PutUint16(out, uint16(data[i]))
	})
}

// FromInt32 returns an INT32 tensor.
func FromInt32(data []int32, shape ...int64) Tensor {
	return build("FromInt32", Int32, len(data), shape, func(out []byte, i int) {
		binary.LittleEndian.PutUint32(out, uint32(data[i]))
	})
}

// FromInt64 returns an INT64 tensor.
func FromInt64(data []int64, shape ...int64) Tensor {
	return build("FromInt64", Int64, len(data), shape, func(out []byte, i int) {
		binary.LittleEndian.PutUint64(out, uint64(data[i]))
	})
}

// FromFloat16Bits returns a FLOAT16 tensor of IEEE 754 binary16 bit patterns.
func FromFloat16Bits(data []uint16, shape ...int64) Tensor {
	return build("FromFloat16Bits", Float16, len(data), shape, func(out []byte, i int) {
		binary.LittleEndian.PutUint16(out, data[i])
	})
}

// FromBFloat16Bits returns a BFLOAT16 tensor of bfloat16 bit patterns (the top 16 bits of a
// float32).
func FromBFloat16Bits(data []uint16, shape ...int64) Tensor {
	return build("FromBFloat16Bits", BFloat16, len(data), shape, func(out []byte, i int) {
		binary.LittleEndian.PutUint16(out, data[i])
	})
}

// FromFloat32 returns a FLOAT32 tensor.
func FromFloat32(data []float32, shape ...int64) Tensor {
	return build("FromFloat32", Float32, len(data), shape, func(out []byte, i int) {
		binary.LittleEndian.PutUint32(out, math.Float32bits(data[i]))
	})
}

// FromFloat64 returns a FLOAT64 tensor.
func FromFloat64(data []float64, shape ...int64) Tensor {
	return build("FromFloat64", Float64, len(data), shape, func(out []byte, i int) {
		binary.LittleEndian.PutUint64(out, math.Float64bits(data[i]))
	})
}

// FromComplex64 returns a COMPLEX64 tensor.
func FromComplex64(data []complex64, shape ...int64) Tensor {
	return build("FromComplex64", Complex64, len(data), shape, func(out []byte, i int) {
		binary.LittleEndian.PutUint32(out, math.Float32bits(real(data[i])))
		binary.LittleEndian.PutUint32(out[4:], math.Float32bits(imag(data[i])))
	})
}

// FromComplex128 returns a COMPLEX128 tensor.
func FromComplex128(data []complex128, shape ...int64) Tensor {
	return build("FromComplex128", Complex128, len(data), shape, func(out []byte, i int) {
		binary.LittleEndian.PutUint64(out, math.Float64bits(real(data[i])))
		binary.LittleEndian.PutUint64(out[8:], math.Float64bits(imag(data[i])))
	})
}

// elements checks that t has the accessor's dtype and its elements and returns their count; it
// panics otherwise, like a failed type assertion.
func (t Tensor) elements(accessor string, want DType) int {
	if t.shared != nil {
		panic(fmt.Sprintf("tensorops: %s on %v: its elements are in the region (SharedMemory.Read)", accessor, t))
	}
	if !t.HasData() {
		panic(fmt.Sprintf("tensorops: %s on %v, a reference without its elements: Client.Get them", accessor, t))
	}
	if t.dtype != want {
		panic(fmt.Sprintf("tensorops: %s on a %v tensor", accessor, t.dtype))
	}
	return len(t.data) / want.ItemSize()
}

// The accessors return a new slice of the elements in row-major order. Each panics if the tensor
// has another dtype; check DType() first when it is not known.

// Bools returns the elements of a BOOL tensor (any non-zero byte is true).
func (t Tensor) Bools() []bool {
	out := make([]bool, t.elements("Bools", Bool))
	for i := range out {
		out[i] = t.data[i] != 0
	}
	return out
}

// Uint8s returns the elements of a UINT8 tensor.
func (t Tensor) Uint8s() []uint8 {
	out := make([]uint8, t.elements("Uint8s", Uint8))
	copy(out, t.data)
	return out
}

// Int8s returns the elements of an INT8 tensor.
func (t Tensor) Int8s() []int8 {
	out := make([]int8, t.elements("Int8s", Int8))
	for i := range out {
		out[i] = int8(t.data[i])
	}
	return out
}

// Int16s returns the elements of an INT16 tensor.
func (t Tensor) Int16s() []int16 {
	out := make([]int16, t.elements("Int16s", Int16))
	for i := range out {
		out[i] = int16(binary.LittleEndian.Uint16(t.data[2*i:]))
	}
	return out
}

// Int32s returns the elements of an INT32 tensor.
func (t Tensor) Int32s() []int32 {
	out := make([]int32, t.elements("Int32s", Int32))
	for i := range out {
		out[i] = int32(binary.LittleEndian.Uint32(t.data[4*i:]))
	}
	return out
}

// Int64s returns the elements of an INT64 tensor.
func (t Tensor) Int64s() []int64 {
	out := make([]int64, t.elements("Int64s", Int64))
	for i := range out {
		out[i] = int64(binary.LittleEndian.Uint64(t.data[8*i:]))
	}
	return out
}

// Float16Bits returns the bit patterns of a FLOAT16 tensor.
func (t Tensor) Float16Bits() []uint16 { return t.uint16s("Float16Bits", Float16) }

// BFloat16Bits returns the bit patterns of a BFLOAT16 tensor.
func (t Tensor) BFloat16Bits() []uint16 { return t.uint16s("BFloat16Bits", BFloat16) }

func (t Tensor) uint16s(accessor string, dtype DType) []uint16 {
	out := make([]uint16, t.elements(accessor, dtype))
	for i := range out {
		out[i] = binary.LittleEndian.Uint16(t.data[2*i:])
	}
	return out
}

// Float32s returns the elements of a FLOAT32 tensor.
func (t Tensor) Float32s() []float32 {
	out := make([]float32, t.elements("Float32s", Float32))
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(t.data[4*i:]))
	}
	return out
}

// Float64s returns the elements of a FLOAT64 tensor.
func (t Tensor) Float64s() []float64 {
	out := make([]float64, t.elements("Float64s", Float64))
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(t.data[8*i:]))
	}
	return out
}

// Complex64s returns the elements of a COMPLEX64 tensor.
func (t Tensor) Complex64s() []complex64 {
	out := make([]complex64, t.elements("Complex64s", Complex64))
	for i := range out {
		out[i] = complex(math.Float32frombits(binary.LittleEndian.Uint32(t.data[8*i:])),
			math.Float32frombits(binary.LittleEndian.Uint32(t.data[8*i+4:])))
	}
	return out
}

// Complex128s returns the elements of a COMPLEX128 tensor.
func (t Tensor) Complex128s() []complex128 {
	out := make([]complex128, t.elements("Complex128s", Complex128))
	for i := range out {
		out[i] = complex(math.Float64frombits(binary.LittleEndian.Uint64(t.data[16*i:])),
			math.Float64frombits(binary.LittleEndian.Uint64(t.data[16*i+8:])))
	}
	return out
}
