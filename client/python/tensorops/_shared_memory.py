"""Shared memory: POSIX shared-memory objects mapped into this process, whose regions a server on
the same host registers (client.register_shared_memory), so that tensors in them skip the socket.

    with client.shared_memory("batch", 1 << 20) as region:     # created, registered
        x = region.array(np.float32, (256, 64))                 # an ndarray over the region
        x[...] = values
        out = region.array(np.float32, (32, 64), offset=x.nbytes)
        client.index_select(x, 0, ids, out=out)                 # x read, out written in place
    # unregistered, unmapped, unlinked

An ndarray over a region (region.array, or any C-contiguous view of one) passed as an op's tensor
argument is sent as a reference to its bytes (tensor_pb2.SharedMemoryRef) instead of the bytes;
tensorops.InSharedMemory names such bytes explicitly.

The objects are opened with shm_open(3) directly, not through multiprocessing.shared_memory,
whose resource tracker (Python < 3.13) unlinks at exit every object the process opened, even one
it did not create, and warns about each; and whose SharedMemory.close fails while an array still
uses its buffer. Here an object is unlinked by the process that created it only: by unlink(), on
leaving its `with` block, or at the latest when that process exits, without a warning.
"""
import atexit
import dataclasses
import errno
import mmap
import os
import secrets
import threading

# shm_open(3) and shm_unlink(3), as multiprocessing.shared_memory calls them (CPython's own
# module for it, on every POSIX build since 3.8).
import _posixshmem
import numpy as np

from tensorops.v1 import shared_memory_pb2, tensor_pb2


# The dtypes a tensor may have, by the names the client gives them (numpy's, and "bfloat16").
SUPPORTED_DTYPES = ("bool", "uint8", "int8", "int16", "int32", "int64", "float16", "float32",
                    "float64", "complex64", "complex128", "bfloat16")


def dtype_name(dtype, name):
    """The name in SUPPORTED_DTYPES of `dtype` (a name, a numpy dtype or scalar type, or
    ml_dtypes' bfloat16), or ValueError naming the argument `name`, the value and the dtypes
    allowed."""
    if isinstance(dtype, str) and dtype == "bfloat16":
        return dtype  # numpy knows "bfloat16" only once ml_dtypes is imported
    try:
        resolved = np.dtype(dtype)
    except (TypeError, ValueError):
        resolved = None
    # The bytes are little-endian (numpy names ">f4" "float32" too, so look at its byte order).
    if resolved is None or resolved.name not in SUPPORTED_DTYPES or resolved.byteorder == ">":
        raise ValueError(f"{name} = {dtype!r} is not a dtype tensorops supports (expected one "
                         f"of {', '.join(SUPPORTED_DTYPES)}, as a name or a little-endian numpy "
                         "dtype)")
    return resolved.name


@dataclasses.dataclass(frozen=True)
class InSharedMemory:
    """A tensor in a registered shared-memory region, given by where it lies: usable wherever an
    op takes an array, as an op's or get's out=, and as put's array.

    region: the name the region is registered under. offset: where the tensor's first byte is,
    counted from the start of the region (a multiple of the dtype's item size). dtype ("float32",
    "bfloat16", ..., or a numpy dtype such as np.float32, kept as its name; ValueError for
    another) and shape (a tuple, or an int for 1-d): the tensor's; its bytes are C-ordered and
    little-endian, exactly numel(shape) * itemsize of them. Ops called with
    out=InSharedMemory(...) return one with the result's dtype and shape, at the same place.
    """
    region: str
    offset: int
    dtype: str
    shape: tuple

    def __post_init__(self):
        # Callers spell dtypes as numpy does (np.float32, np.dtype("int64"), "float32"); the
        # rest of the client compares names, so keep the name. None: not known yet (run_stream
        # fills in a result's dtype when its response comes).
        if self.dtype is not None:
            object.__setattr__(self, "dtype", dtype_name(self.dtype, "InSharedMemory: dtype"))
        shape = (self.shape,) if isinstance(self.shape, (int, np.integer)) else self.shape
        object.__setattr__(self, "shape", tuple(int(size) for size in shape))

    @property
    def byte_size(self):
        itemsize = 2 if self.dtype == "bfloat16" else np.dtype(self.dtype).itemsize
        return int(np.prod(self.shape, dtype=np.int64)) * itemsize

    def proto(self):
        """The tensor_pb2.SharedMemoryRef of these bytes."""
        return tensor_pb2.SharedMemoryRef(region=self.region, offset=self.offset,
                                          byte_size=self.byte_size)


@dataclasses.dataclass(frozen=True)
class SharedMemoryInfo:
    """A registered region, as client.list_shared_memory describes it.

    kind: "system" (a POSIX shared-memory object: key, and offset, where the region starts in
    it) or "cuda" (a GPU buffer shared through CUDA IPC: device_id). byte_size: the region's size.
    """
    name: str
    kind: str
    byte_size: int
    key: str = None
    offset: int = 0
    device_id: int = None

    @classmethod
    def from_proto(cls, region):
        kind = region.WhichOneof("memory")
        if kind == "system":
            return cls(region.name, kind, region.system.byte_size, key=region.system.key,
                       offset=region.system.offset)
        if kind == "cuda":
            return cls(region.name, kind, region.cuda.byte_size, device_id=region.cuda.device_id)
        return cls(region.name, str(kind), 0)


class _Mapping(mmap.mmap):
    """The mapping of a region's object: every array of the region is over its buffer (numpy
    keeps it at the end of the array's chain of bases), so that an array leads back to its
    region, and the mapping lasts as long as the last array over it."""
    region = None


# The objects this process created and has not unlinked: unlinked when it exits (by the process
# that created them only, not by a forked child).
_created_lock = threading.Lock()
_created = {}  # key -> pid of the creator


@atexit.register
def _unlink_created():
    with _created_lock:
        keys = [key for key, pid in _created.items() if pid == os.getpid()]
        _created.clear()
    for key in keys:
        try:
            _posixshmem.shm_unlink(key)
        except OSError:
            pass  # removed by someone else already


class SharedMemoryRegion:
    """A POSIX shared-memory object mapped into this process, and the region of it that a server
    on this host registers under `name`: `byte_size` bytes from `offset` of the object.

    SharedMemoryRegion(name, byte_size) creates a new object of that size, named `key` (default:
    a fresh "/tensorops-<pid>-<random>"; FileExistsError if the key exists), filled with zeros;
    create=False maps an existing one instead, which must hold at least offset + byte_size bytes.
    Register it with client.register_shared_memory(region), or let client.shared_memory(name,
    byte_size) create and register one for a `with` block.

    region.array(dtype, shape, offset=0) gives writable ndarrays over it; passed to an op (or put,
    or as out=) they travel as references to the region. close() unmaps it once no array uses it
    any more; unlink() removes the object's name (the creator's job: `with region:` and the
    client's shared_memory() do both, and an object this process created is unlinked when it exits
    at the latest). A region may be used from many threads; the bytes are the caller's to
    synchronise (a call reads its arguments and writes its result while it runs).
    """

    def __init__(self, name, byte_size, *, key=None, offset=0, create=True):
        if not isinstance(name, str) or not name:
            raise ValueError(f"SharedMemoryRegion: name = {name!r} is not a non-empty str")
        if not isinstance(byte_size, int) or byte_size < 1:
            raise ValueError(f"SharedMemoryRegion: byte_size = {byte_size!r} is out of range "
                             "(expected an int >= 1)")
        if not isinstance(offset, int) or offset < 0:
            raise ValueError(f"SharedMemoryRegion: offset = {offset!r} is out of range (expected "
                             "an int >= 0)")
        if key is None:
            if not create:
                raise ValueError("SharedMemoryRegion: create=False needs the key of the object")
            key = f"/tensorops-{os.getpid()}-{secrets.token_hex(8)}"
        self.name = name
        self.key = key
        self.offset = offset
        self.byte_size = byte_size
        self.created = create
        size = offset + byte_size
        flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
        fd = _posixshmem.shm_open(key, flags, mode=0o600)
        try:
            if create:
                with _created_lock:
                    _created[key] = os.getpid()
                os.ftruncate(fd, size)
                # Reserve the pages now: on a /dev/shm too small for them (a container's is 64 MiB
                # unless given more) this raises ENOSPC, where a sparse object would kill the
                # first process to touch a page without room with SIGBUS.
                try:
                    os.posix_fallocate(fd, 0, size)
                except OSError as error:
                    if error.errno != errno.ENOSPC:
                        raise
                    raise OSError(errno.ENOSPC, f"SharedMemoryRegion: /dev/shm has no room for "
                                  f"{size} bytes of {key!r} (a container's /dev/shm is 64 MiB "
                                  f"unless given more, e.g. --shm-size=1g)") from None
            else:
                object_size = os.fstat(fd).st_size
                if object_size < size:
                    raise ValueError(f"SharedMemoryRegion: the object {key!r} holds {object_size} "
                                     f"bytes, fewer than offset + byte_size = {size}")
            self._mapping = _Mapping(fd, size)
        except BaseException:
            if create:
                self.unlink()
            raise
        finally:
            os.close(fd)
        self._mapping.region = self
        self._mapping_address = _address(np.frombuffer(self._mapping, np.uint8, count=0))

    def __repr__(self):
        return (f"tensorops.SharedMemoryRegion(name={self.name!r}, key={self.key!r}, "
                f"offset={self.offset}, byte_size={self.byte_size})")

    @property
    def closed(self):
        return self._mapping is None

    def array(self, dtype, shape, offset=0):
        """A writable ndarray of `dtype` and `shape` (C order) over the region's bytes from
        `offset` (counted from the region's start; a multiple of the item size). ValueError when
        it does not fit in the region."""
        if self._mapping is None:
            raise ValueError(f"shared-memory region {self.name!r} is closed")
        dtype = np.dtype(dtype)
        shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
        count = int(np.prod(shape, dtype=np.int64))
        if not isinstance(offset, (int, np.integer)) or offset < 0 or offset % dtype.itemsize:
            raise ValueError(f"shared-memory region {self.name!r}: offset = {offset!r} is not a "
                             f"multiple of the item size of {dtype} ({dtype.itemsize}) >= 0")
        if count < 0 or offset + count * dtype.itemsize > self.byte_size:
            raise ValueError(f"shared-memory region {self.name!r}: {dtype} {shape} from offset "
                             f"{offset} needs {offset + count * dtype.itemsize} bytes, and the "
                             f"region has {self.byte_size}")
        return np.frombuffer(self._mapping, dtype, count, self.offset + int(offset)).reshape(shape)

    def ref(self, array):
        """The tensorops.InSharedMemory of `array`, an ndarray over this region (ValueError when
        it is not one, or is not C-contiguous)."""
        if locate(array)[0] is not self:
            raise ValueError(f"array is not over the shared-memory region {self.name!r}")
        return shared_memory_of(array, "array")

    def close(self):
        """Unmaps the region once no array uses it any more (at once when none does); arrays
        already made stay valid, as arrays of their own: from then on they are sent as their
        bytes, never as references to the region, whose name may by then be another region's
        (out= of one raises ValueError). region.array and region.ref raise from then on."""
        mapping, self._mapping = self._mapping, None
        if mapping is None:
            return
        try:
            mapping.close()
        except BufferError:
            pass  # arrays still use it: unmapped when the last of them goes

    def unlink(self):
        """Removes the object's name (shm_unlink): no one can open it from then on, and its
        memory is freed once nothing maps it. Ignores an object already removed."""
        with _created_lock:
            _created.pop(self.key, None)
        try:
            _posixshmem.shm_unlink(self.key)
        except FileNotFoundError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        """Closes the region, and unlinks its object if this region created it."""
        self.close()
        if self.created:
            self.unlink()

    def system_proto(self):
        """The shared_memory_pb2.SharedMemoryRegion that registers this region."""
        return shared_memory_pb2.SharedMemoryRegion(
            name=self.name, system=shared_memory_pb2.SystemSharedMemory(
                key=self.key, offset=self.offset, byte_size=self.byte_size))


def _address(array):
    return array.__array_interface__["data"][0]


def _mapping_of(array):
    """The _Mapping an ndarray's memory belongs to, or None."""
    if not isinstance(array, np.ndarray):
        return None
    owner = array
    while isinstance(owner, np.ndarray):
        owner = owner.base
    if isinstance(owner, memoryview):
        owner = owner.obj
    return owner if isinstance(owner, _Mapping) and owner.region is not None else None


def locate(array):
    """(region, offset from the region's start) of an ndarray whose memory is a region's (made
    by SharedMemoryRegion.array, or a view of one), or (None, None)."""
    mapping = _mapping_of(array)
    if mapping is None:
        return None, None
    region = mapping.region
    return region, _address(array) - region._mapping_address - region.offset


def in_shared_memory(array, dtype=None):
    """The tensorops.InSharedMemory of an ndarray over a region when its bytes are a tensor's
    as the server reads them (C-contiguous, little-endian, aligned, within the region, which is
    not closed), else None. dtype: the name to give its dtype ("bfloat16" for a
    tensorops.bfloat16's bits)."""
    region, offset = locate(array)
    # A closed region's name is no longer this memory's: it may have been unregistered and
    # registered again for another object, so the array's bytes must travel themselves.
    if (region is None or region.closed or not array.flags.c_contiguous
            or array.dtype.byteorder == ">"
            or offset < 0 or offset % array.dtype.itemsize
            or offset + array.nbytes > region.byte_size):
        return None
    return InSharedMemory(region.name, offset, dtype or array.dtype.name, array.shape)


def shared_memory_of(value, name, dtype=None):
    """The tensorops.InSharedMemory of `value` (one, or an ndarray over a region), or
    ValueError naming the argument `name` and why the server cannot use its bytes in place."""
    if isinstance(value, InSharedMemory):
        return value
    placed = in_shared_memory(value, dtype)
    if placed is not None:
        return placed
    region, _ = locate(value)
    if region is None:
        raise ValueError(f"{name} must be an ndarray over a shared-memory region "
                         "(tensorops.SharedMemoryRegion.array) or a tensorops.InSharedMemory, "
                         f"not {type(value).__name__}")
    if region.closed:
        # The server would write into whatever is registered under the name now.
        raise ValueError(f"{name} is over the shared-memory region {region.name!r}, which is "
                         "closed (its `with` block has ended, or close() was called): an "
                         "array over it is this process's memory alone from then on, and the "
                         "server can no longer write into it")
    raise ValueError(f"{name} is over the shared-memory region {region.name!r}, but not as a "
                     "tensor the server can use in place: it must be C-contiguous and "
                     "little-endian, at an offset that is a multiple of its item size")


def view_over(array, dtype, shape):
    """An ndarray of `dtype` and `shape` over the bytes of `array` (over a region) from its
    first byte."""
    mapping = _mapping_of(array)
    start = _address(array) - mapping.region._mapping_address
    count = int(np.prod(shape, dtype=np.int64))
    return np.frombuffer(mapping, dtype, count, start).reshape(shape)
