"""tensorops: a Python client for the tensorops gRPC service (scatter/gather tensor ops).

    import numpy as np, tensorops
    with tensorops.Client("127.0.0.1:50051", timeout=10) as client:
        x = np.array([[1, 2], [3, 4]], np.float32)
        client.gather(x, 1, np.array([[0, 0], [1, 0]]))          # torch.gather(x, 1, index)
        client.scatter_reduce(x, 0, np.array([[1, 0]]), np.ones((1, 2), np.float32), "amax")

Arrays go in and come out as numpy.ndarray (results are read-only views over the response's
bytes unless copy=True); torch tensors in give torch tensors out; bfloat16 travels as
tensorops.bfloat16 (raw uint16 bits). Tensors kept on the server (client.put, client.ref) are
tensorops.Ref, usable wherever an array is; so are arrays in shared memory with a server on the
same host (client.shared_memory, tensorops.SharedMemoryRegion), whose bytes never cross the
socket, and results can be written there (out=). Failed calls raise a tensorops.Error subclass
carrying the gRPC code and the server's message. tensorops.aio.Client is the asyncio variant;
tensorops.requests builds OpRequests for run_stream and backward.
"""
import importlib
import pkgutil

from tensorops._version import __version__

# The generated stubs (tensorops.v1.*_pb2) live in this package when it is installed with pip,
# and in a separate directory on sys.path (e.g. build/release/python/tensorops/v1) when it is used
# from the source tree: extend_path adds every sys.path entry's tensorops/ to this package.
__path__ = pkgutil.extend_path(__path__, __name__)

# The modules tensorops needs, and the distribution that provides each (pip's name; Debian's
# package in parentheses), so that a missing one is named as such.
_REQUIREMENTS = (("numpy", "numpy (Debian: python3-numpy)"),
                 ("google.protobuf", "protobuf (Debian: python3-protobuf)"),
                 ("grpc", "grpcio (Debian: python3-grpcio)"))
for _module, _distribution in _REQUIREMENTS:
    try:
        importlib.import_module(_module)
    except ImportError as e:
        raise ImportError(f"tensorops needs the module {_module}, which did not import: install "
                          f"{_distribution} ({e})", name=_module) from e

try:
    from tensorops.v1 import tensor_pb2 as _tensor_pb2  # noqa: F401
except ImportError as e:
    if not (e.name or "").startswith("tensorops"):
        raise
    raise ImportError(
        "tensorops: the generated stubs (tensorops.v1) are missing. Install the package with "
        "`pip install client/python`, or run client/python/generate_stubs.py --out DIR and put "
        f"DIR on sys.path ({e})", name=e.name) from e

from tensorops._errors import (Aborted, AlreadyExists, Cancelled, DataLoss, DeadlineExceeded,
                               Error, FailedPrecondition, Internal, InvalidArgument, NotFound,
                               OutOfRange, PermissionDenied, ResourceExhausted, Unauthenticated,
                               Unavailable, Unimplemented, Unknown)
from tensorops._tensor import REDUCTIONS, Ref, bfloat16
from tensorops._shared_memory import InSharedMemory, SharedMemoryInfo, SharedMemoryRegion
from tensorops._store import Snapshot, TensorInfo
from tensorops._client import TLS, Client, service_config
from tensorops import aio, requests

__all__ = [
    "Client", "InSharedMemory", "Ref", "SharedMemoryInfo", "SharedMemoryRegion", "Snapshot", "TLS",
    "TensorInfo", "__version__", "aio", "bfloat16", "requests",
    "service_config", "REDUCTIONS", "Error",
    "Aborted", "AlreadyExists",
    "Cancelled", "DataLoss", "DeadlineExceeded", "FailedPrecondition", "Internal",
    "InvalidArgument", "NotFound", "OutOfRange", "PermissionDenied", "ResourceExhausted",
    "Unauthenticated", "Unavailable", "Unimplemented", "Unknown"
]
