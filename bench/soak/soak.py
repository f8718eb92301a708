#!/usr/bin/python3
"""soak: many clients for minutes against one tensorops-server, every kind of call mixed.

Starts tensorops-server (or drives a running one, --target), then keeps --clients clients (64)
busy for --minutes (10), each on a connection of its own, in a closed loop over a weighted mix:

  valid     every op (small random tensors, dtypes float32/float64/int32/int64) through its own
            RPC, Run, Backward and KServe v2 ModelInfer (the `<op>` and `<op>_backward` models);
            results checked: dtype and shape always, values for the copying ops (gather,
            index_select, gather_nd, the three view scatters, masked_scatter)
  stream    a RunStream of 2-8 requests, some of them bad, half-closed, every answer checked; or
            a ModelStreamInfer of valid requests
  bad       requests the server must refuse with INVALID_ARGUMENT: an index, axis, position or
            step out of range, a dtype mismatch, data of the wrong length, mask bytes other than
            0/1, a reduction the dtype lacks, a scalar that does not fit, an empty OpRequest, a body
            that is not a message, a reference that also carries data, a Backward whose op has
            result_options, an in-place update with an index out of range, bad store names, an
            unknown KServe parameter or datatype; through the own RPC, Run, Backward, KServe and
            inside RunStreams
  cancel    a large call (sides of 128..512, up to a few MiB; a pool made once per process)
            cancelled by the client after 0-4 ms (CANCELLED, or OK when it finished first)
  deadline  the same calls with a deadline of 0.2-5 ms, which expire on the way, in the queue or
            while running (DEADLINE_EXCEEDED, or OK)
  drop      a RunStream or ModelStreamInfer opened, 1-8 requests sent, 0-2 answers read, then
            cancelled without half-closing (CANCELLED); a PutTensor cancelled after its header
            and a chunk (CANCELLED), then TensorInfo of its name (NOT_FOUND: nothing left behind)
  store     PutTensor uploads (chunked, overwrite), GetTensor (of the shared counter in 1 KiB
            chunks while everyone updates it: OK or ABORTED), in-place updates (Scatter SUM of ones
            into one int64 counter shared by every client; index_add/masked_scatter/slice_scatter
            in place on each client's own tensor), store_as results, a stale expected version
            (FAILED_PRECONDITION), a reference to a missing tensor (NOT_FOUND), ServerInfo,
            ListTensors, TensorInfo

Every outcome is counted by kind, method and status code, and classed expected or unexpected by
what the request was (a stream counts once, and each request in it once more: the "calls" below).
Each --interval_s (60 s) it prints the calls by kind and code, calls/s, the p50/p99 latency of the
valid unary calls that finished in the interval, the server's RSS (VmRSS of the child; with
--target, process_resident_memory_bytes from --metrics) and the CPU the server and the client
processes used. At the end: the counter (the sum of the shared counter must equal the
ones added by the in-place calls that returned OK), the server's rejection counters, RSS after the
load, a clean SIGTERM, and the verdict:

  1. no unexpected status codes (nor wrong results, missing stream answers, a crash);
  2. every bad request answered INVALID_ARGUMENT;
  3. RSS at the end of every interval after the first within 10% of the first interval's.

Exit 1 when a target is missed. Usage:

  make soak SOAK_ARGS="--minutes=3"
  /usr/bin/python3 bench/soak/soak.py --minutes=0.5 --clients=8 --interval_s=10
  /usr/bin/python3 bench/soak/soak.py --target=127.0.0.1:50051 --metrics=127.0.0.1:9464
  /usr/bin/python3 bench/soak/soak.py --mix=valid=0,stream=0,bad=0,drop=0,deadline=0,store=0
  /usr/bin/python3 bench/soak/soak.py -- --max_batch=1    # after --: flags for the server

Needs grpcio, protobuf and numpy (Debian's /usr/bin/python3), the Python client (client/python,
found from this file's place) and the generated tensorops.v1 stubs (--stubs, default
build/release/python); the KServe stubs are generated into a temporary directory with protoc and
grpc_python_plugin (Debian: protobuf-compiler, protobuf-compiler-grpc), or left out (--no_kserve).

The clients are threads, spread over --processes worker processes (2): Python runs one thread at
a time per process, so more processes drive more load where there are cores to spare (on 2 cores,
2 processes drove 2100 calls/s against 1200 with 1). The client processes' CPU is printed beside
the server's, to tell a client-bound run apart.
"""

import argparse
import atexit
import collections
import math
import multiprocessing
import os
import queue as queue_module
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
DEFAULT_SERVER = os.path.join(REPO_ROOT, "build", "release", "server", "tensorops-server")
DEFAULT_STUBS = os.path.join(REPO_ROOT, "build", "release", "python")

COUNTER_NAME = "soak/counter"
COUNTER_SIZE = 1024
CALL_TIMEOUT_S = 60.0  # every call that is not meant to expire: a hung call shows up
MAX_EXAMPLES = 8  # unexpected outcomes kept with their message, per process and interval

# The mix: kind -> weight, and each kind's actions (picked uniformly within the kind).
WEIGHTS = {"valid": 44, "stream": 6, "bad": 14, "cancel": 7, "deadline": 7, "drop": 6,
           "store": 16}

# Globals set by _import_modules (in the parent and in each worker process).
grpc = None
tensorops = None
to_tensor = None  # tensorops._tensor.to_tensor
R = None  # tensorops.requests
pb = None  # namespace of the generated modules
ks = None  # inference.grpc_service_pb2 (None without KServe)
ks_grpc = None


class _Modules:
    pass


def _import_modules(stubs, kserve_dir):
    """Puts the client package and the stubs on sys.path and imports them into the globals."""
    global grpc, tensorops, to_tensor, R, pb, ks, ks_grpc
    for path in (kserve_dir, stubs, os.path.join(REPO_ROOT, "client", "python")):
        if path and path not in sys.path:
            sys.path.insert(0, path)  # the last one, the client package, comes first
    import grpc as grpc_module
    import tensorops as tensorops_module
    import tensorops.requests as requests_module
    from tensorops._tensor import to_tensor as to_tensor_function
    from tensorops.v1 import (generic_pb2, ops_pb2, service_pb2_grpc, store_pb2, tensor_pb2,
                              server_info_pb2)
    grpc, tensorops, to_tensor, R = (grpc_module, tensorops_module, to_tensor_function,
                                     requests_module)
    pb = _Modules()
    pb.generic, pb.ops, pb.service_grpc, pb.store, pb.tensor, pb.info = (
        generic_pb2, ops_pb2, service_pb2_grpc, store_pb2, tensor_pb2, server_info_pb2)
    if kserve_dir:
        from inference import grpc_service_pb2, grpc_service_pb2_grpc
        ks, ks_grpc = grpc_service_pb2, grpc_service_pb2_grpc


def generate_kserve_stubs(out_dir):
    """Writes inference/grpc_service_pb2{,_grpc}.py under out_dir with protoc; False if it can't."""
    protoc, plugin = shutil.which("protoc"), shutil.which("grpc_python_plugin")
    if not protoc or not plugin:
        return False
    proto_dir = os.path.join(REPO_ROOT, "proto")
    subprocess.run([protoc, f"-I{proto_dir}", f"--python_out={out_dir}",
                    f"--grpc_python_out={out_dir}", f"--plugin=protoc-gen-grpc_python={plugin}",
                    "inference/grpc_service.proto"], check=True)
    open(os.path.join(out_dir, "inference", "__init__.py"), "a").close()
    return True


# ---------------------------------------------------------------------------------------------
# Requests


def wire_dtype(dtype):
    names = {"float32": "FLOAT32", "float64": "FLOAT64", "int32": "INT32", "int64": "INT64",
             "bool": "BOOL", "uint8": "UINT8"}
    return getattr(pb.tensor, "DATA_TYPE_" + names[np.dtype(dtype).name])


KSERVE_DATATYPES = {"float32": "FP32", "float64": "FP64", "int32": "INT32", "int64": "INT64",
                    "bool": "BOOL", "uint8": "UINT8"}


class Case:
    """A valid op call: its OpRequest, and what its result must be (values None: not checked)."""

    def __init__(self, op, shape, dtype, values=None):
        self.op, self.shape, self.dtype, self.values = op, list(shape), np.dtype(dtype), values

    @property
    def field(self):
        return self.op.WhichOneof("op")

    @property
    def message(self):
        return getattr(self.op, self.field)

    @property
    def rpc(self):
        return R.OPS_BY_FIELD[self.field]

    def check_tensor(self, tensor):
        if tensor.dtype != wire_dtype(self.dtype) or list(tensor.shape) != self.shape:
            return (f"{self.field}: result {pb.tensor.DataType.Name(tensor.dtype)} "
                    f"{list(tensor.shape)}, expected {self.dtype.name} {self.shape}")
        return self.check_bytes(tensor.data)

    def check_bytes(self, data):
        size = int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize
        if len(data) != size:
            return f"{self.field}: result has {len(data)} bytes, expected {size}"
        if self.values is not None and data != np.ascontiguousarray(self.values,
                                                                    self.dtype).tobytes():
            return f"{self.field}: result values differ from the reference"
        return None


class Generator:
    """Random valid and bad op requests, from one numpy Generator."""

    DTYPES = (np.float32, np.float64, np.int32, np.int64)
    REDUCES = ("assign", "sum", "prod", "mean", "amax", "amin")

    def __init__(self, rng):
        self.rng = rng

    def pick(self, seq):
        return seq[int(self.rng.integers(len(seq)))]

    def dim(self, large):
        return int(self.rng.integers(128, 513)) if large else int(self.rng.integers(1, 17))

    def array(self, shape, dtype):
        if np.dtype(dtype).kind == "f":
            return self.rng.standard_normal(shape).astype(dtype)
        return self.rng.integers(-50, 50, size=shape).astype(dtype)

    def index(self, shape, size):
        """Index values in [-size, size), int32 or int64."""
        dtype = self.pick((np.int32, np.int64))
        return self.rng.integers(-size, size, size=shape).astype(dtype)

    def case(self, large=False, dtype=None, ops=None):
        dtype = dtype or self.pick(self.DTYPES)
        name = self.pick(ops or OP_NAMES)
        return getattr(self, "op_" + name)(large, dtype)

    # One builder per op: a Case with the reference result where it is a copy.

    def along_axis(self, large, dtype):
        """Gather's and Scatter's arguments: x [a, b], an axis (ax >= 0) and an index whose size
        is at most x's on the other axis and anything on the axis."""
        a, b = self.dim(large), self.dim(large)
        x = self.array((a, b), dtype)
        axis = self.pick((0, 1, -1))
        ax = axis % 2
        ishape = [int(self.rng.integers(1, a + 1)), int(self.rng.integers(1, b + 1))]
        ishape[ax] = int(self.rng.integers(1, 2 * x.shape[ax] + 1))
        return x, axis, ax, ishape, self.index(ishape, x.shape[ax])

    def op_gather(self, large, dtype):
        x, axis, ax, ishape, index = self.along_axis(large, dtype)
        xs = x[:, :ishape[1]] if ax == 0 else x[:ishape[0], :]
        expected = np.take_along_axis(xs, index.astype(np.int64) % x.shape[ax], axis=ax)
        return Case(R.gather(x, axis, index), ishape, dtype, expected)

    def op_scatter(self, large, dtype):
        x, axis, _, ishape, index = self.along_axis(large, dtype)
        reduce = self.pick(self.REDUCES)
        include_self = self.pick((None, True, False))
        if self.rng.random() < 0.2:
            value = 2 if np.dtype(dtype).kind == "i" else 1.5
            op = R.scatter(x, axis, index, value=value, reduce=reduce, include_self=include_self)
        else:
            src = self.array([s + int(self.rng.integers(0, 2)) for s in ishape], dtype)
            op = R.scatter(x, axis, index, src, reduce=reduce, include_self=include_self)
        return Case(op, x.shape, dtype)

    def op_index_select(self, large, dtype):
        x = self.array((self.dim(large), self.dim(large)), dtype)
        axis = self.pick((0, 1, -1))
        index = self.index((int(self.rng.integers(1, 17)),), x.shape[axis])
        expected = np.take(x, index.astype(np.int64) % x.shape[axis], axis=axis)
        return Case(R.index_select(x, axis, index), expected.shape, dtype, expected)

    def op_index_reduce(self, large, dtype):
        x = self.array((self.dim(large), self.dim(large)), dtype)
        axis = self.pick((0, 1, -1))
        k = int(self.rng.integers(1, 9))
        index = self.index((k,), x.shape[axis])
        sshape = list(x.shape)
        sshape[axis] = k
        reduce = self.pick(self.REDUCES)
        alpha = None
        if reduce == "sum" and self.rng.random() < 0.5:
            alpha = 2 if np.dtype(dtype).kind == "i" else 0.5
        op = R.index_reduce(x, axis, index, self.array(sshape, dtype), reduce,
                            include_self=self.pick((True, False)), alpha=alpha)
        return Case(op, x.shape, dtype)

    def op_select_scatter(self, large, dtype):
        x = self.array((self.dim(large), self.dim(large)), dtype)
        axis = self.pick((0, 1))
        n = x.shape[axis]
        index = int(self.rng.integers(-n, n))
        src = self.array((x.shape[1 - axis],), dtype)
        expected = x.copy()
        if axis == 0:
            expected[index] = src
        else:
            expected[:, index] = src
        return Case(R.select_scatter(x, src, axis, index), x.shape, dtype, expected)

    def op_slice_scatter(self, large, dtype):
        x = self.array((self.dim(large), self.dim(large)), dtype)
        axis = self.pick((0, 1))
        n = x.shape[axis]

        def bound():
            return None if self.rng.random() < 0.3 else int(self.rng.integers(-n - 2, n + 3))

        start, end, step = bound(), bound(), int(self.rng.integers(1, 4))
        window = slice(start, end, step)
        sshape = list(x.shape)
        sshape[axis] = len(range(*window.indices(n)))
        src = self.array(sshape, dtype)
        expected = x.copy()
        if axis == 0:
            expected[window, :] = src
        else:
            expected[:, window] = src
        return Case(R.slice_scatter(x, src, axis, start, end, step), x.shape, dtype, expected)

    def op_diagonal_scatter(self, large, dtype):
        a, b = self.dim(large), self.dim(large)
        x = self.array((a, b), dtype)
        offset = int(self.rng.integers(-a, b + 1))
        length = np.diagonal(x, offset).shape[0]
        src = self.array((length,), dtype)
        rows = np.arange(length) + max(0, -offset)
        expected = x.copy()
        expected[rows, rows + offset] = src
        return Case(R.diagonal_scatter(x, src, offset), x.shape, dtype, expected)

    def op_gather_nd(self, large, dtype):
        shape = (self.dim(large), self.dim(large), int(self.rng.integers(1, 5)))
        x = self.array(shape, dtype)
        k = int(self.rng.integers(1, 4))
        m = int(self.rng.integers(1, 17))
        index = np.stack([self.index((m,), shape[j]) for j in range(k)], axis=1)
        coords = index.astype(np.int64) % np.array(shape[:k])
        expected = x[tuple(coords.T)]
        return Case(R.gather_nd(x, index), expected.shape, dtype, expected)

    def op_scatter_nd(self, large, dtype):
        a, b = self.dim(large), self.dim(large)
        k = int(self.rng.integers(1, 3))
        m = int(self.rng.integers(1, 17))
        index = np.stack([self.index((m,), (a, b)[j]) for j in range(k)], axis=1)
        src = self.array([m] + [a, b][k:], dtype)
        if self.rng.random() < 0.2:
            return Case(R.scatter_nd(None, index, src, shape=[a, b]), (a, b), dtype)
        x = self.array((a, b), dtype)
        return Case(R.scatter_nd(x, index, src, reduce=self.pick(self.REDUCES)), x.shape, dtype)

    def op_masked_scatter(self, large, dtype):
        a, b = self.dim(large), self.dim(large)
        x = self.array((a, b), dtype)
        mask = self.rng.random((b,) if self.rng.random() < 0.3 else (a, b)) < 0.5
        src = self.array((a * b,), dtype)
        expected = x.copy()
        full = np.broadcast_to(mask, (a, b))
        expected[full] = src[:int(full.sum())]
        return Case(R.masked_scatter(x, mask, src), x.shape, dtype, expected)

    # Bad requests: OpRequests the server must refuse with INVALID_ARGUMENT.

    def bad_op(self):
        """(label, OpRequest) of a request that is INVALID_ARGUMENT whatever carries it."""
        label = self.pick(BAD_OPS)
        return label, getattr(self, "bad_" + label)()

    def bad_index_range(self):
        x = self.array((4, 5), np.float32)
        index = np.zeros((2, 5), np.int64)
        index[1, int(self.rng.integers(5))] = self.pick((4, 9, -5, 1 << 40))
        return R.gather(x, 0, index)

    def bad_dtype_mismatch(self):
        x = self.array((4, 5), np.float32)
        return R.scatter(x, 1, np.zeros((4, 5), np.int64), self.array((4, 5), np.float64))

    def bad_axis(self):
        x = self.array((4, 5), np.int32)
        return R.index_select(x, self.pick((2, -3, 7)), np.zeros(3, np.int64))

    def bad_data_length(self):
        op = R.masked_scatter(self.array((4, 5), np.float32), np.ones((4, 5), bool),
                              self.array((20,), np.float32))
        op.masked_scatter.input.data = op.masked_scatter.input.data[:-1]
        return op

    def bad_mask_byte(self):
        op = R.masked_scatter(self.array((3, 3), np.float32), np.ones((3, 3), bool),
                              self.array((9,), np.float32))
        data = bytearray(op.masked_scatter.mask.data)
        data[4] = 2
        op.masked_scatter.mask.data = bytes(data)
        return op

    def bad_select_index(self):
        x = self.array((4, 5), np.float64)
        return R.select_scatter(x, self.array((5,), np.float64), 0, self.pick((4, -5, 100)))

    def bad_slice_step(self):
        x = self.array((4, 5), np.float32)
        op = R.slice_scatter(x, self.array((4, 5), np.float32), 0)
        op.slice_scatter.step = self.pick((0, -1))
        return op

    def bad_scatter_nd_both(self):
        x = self.array((4, 5), np.float32)
        op = R.scatter_nd(x, np.zeros((2, 1), np.int64), self.array((2, 5), np.float32))
        op.scatter_nd.shape.extend([4, 5])
        return op

    def bad_mean_bool(self):
        x = np.ones((3, 4), bool)
        return R.scatter(x, 0, np.zeros((1, 4), np.int64), np.ones((1, 4), bool), reduce="mean")

    def bad_value_overflow(self):
        x = np.zeros((3, 4), np.uint8)
        return R.scatter(x, 0, np.zeros((1, 4), np.int64), value=self.pick((300, 1 << 20)))

    def bad_index_rank(self):
        x = self.array((4, 5), np.float32)
        return R.gather(x, 0, np.zeros((2,), np.int64))

    def bad_empty(self):
        return pb.generic.OpRequest()


OP_NAMES = ("gather", "scatter", "index_select", "index_reduce", "select_scatter",
            "slice_scatter", "diagonal_scatter", "gather_nd", "scatter_nd", "masked_scatter")
BAD_OPS = ("index_range", "dtype_mismatch", "axis", "data_length", "mask_byte", "select_index",
           "slice_step", "scatter_nd_both", "mean_bool", "value_overflow", "index_rank", "empty")


def kserve_request(op, model_suffix="", grad_output=None):
    """The KServe v2 ModelInferRequest of an OpRequest: tensors as inputs (raw contents), the
    other set fields as parameters, under docs/kserve.md's names."""
    field = op.WhichOneof("op")
    message = getattr(op, field)
    request = ks.ModelInferRequest(model_name=field + model_suffix)

    def add_input(name, tensor):
        dtype = pb.tensor.DataType.Name(tensor.dtype)[len("DATA_TYPE_"):].lower()
        request.inputs.add(name=name, datatype=KSERVE_DATATYPES[dtype], shape=tensor.shape)
        request.raw_input_contents.append(tensor.data)

    for fd, value in message.ListFields():
        if fd.message_type is not None:
            if fd.message_type.name == "Tensor":
                add_input(fd.name, value)
            elif fd.message_type.name == "Scalar":
                which = value.WhichOneof("value")
                parameter = request.parameters[fd.name]
                if which == "bool_value":
                    parameter.bool_param = value.bool_value
                elif which == "int_value":
                    parameter.int64_param = value.int_value
                else:
                    parameter.double_param = value.float_value
            continue  # result_options: not used here
        parameter = request.parameters[fd.name]
        if fd.enum_type is not None:
            parameter.string_param = (
                fd.enum_type.values_by_number[value].name[len("REDUCTION_"):].lower())
        elif fd.label == fd.LABEL_REPEATED:
            parameter.string_param = ",".join(str(v) for v in value)
        elif fd.type == fd.TYPE_BOOL:
            parameter.bool_param = value
        else:
            parameter.int64_param = value
    if grad_output is not None:
        add_input("grad_output", grad_output)
    return request


# ---------------------------------------------------------------------------------------------
# Recording


class Bucket:
    """What one process saw in one interval."""

    def __init__(self):
        self.counts = collections.Counter()  # (kind, method, code) -> calls
        self.unexpected = collections.Counter()  # (kind, method, code) -> calls
        self.examples = []  # (kind, method, code, detail)
        self.latencies = []  # seconds, valid unary calls that returned OK
        self.counter_added = 0  # ones added to the shared counter by in-place calls that were OK
        self.counter_unknown = 0  # in-place adds whose outcome is unknown (unexpected codes)

    def state(self):
        """Builtins only, for the queue to the parent (which may not import this module by the
        name the worker knows it by)."""
        return dict(self.__dict__)

    @classmethod
    def from_state(cls, state):
        bucket = cls()
        bucket.__dict__.update(state)
        return bucket

    def merge(self, other):
        self.counts.update(other.counts)
        self.unexpected.update(other.unexpected)
        room = MAX_EXAMPLES * 4 - len(self.examples)
        self.examples.extend(other.examples[:max(0, room)])
        self.latencies.extend(other.latencies)
        self.counter_added += other.counter_added
        self.counter_unknown += other.counter_unknown


class Recorder:
    def __init__(self, start, interval, intervals):
        self.start, self.interval, self.intervals = start, interval, intervals
        self.lock = threading.Lock()
        self.buckets = collections.defaultdict(Bucket)
        self.sent = -1  # the last interval handed to the parent

    def record(self, kind, method, code, expected, latency=None, detail=None, counter_add=0):
        now = time.monotonic()
        with self.lock:
            i = min(int((now - self.start) / self.interval), self.intervals - 1)
            bucket = self.buckets[max(i, self.sent + 1)]
            key = (kind, method, code)
            bucket.counts[key] += 1
            if code not in expected:
                bucket.unexpected[key] += 1
                if len(bucket.examples) < MAX_EXAMPLES:
                    bucket.examples.append((kind, method, code, (detail or "")[:300]))
                if counter_add:
                    bucket.counter_unknown += counter_add
            elif code == "OK" and counter_add:
                bucket.counter_added += counter_add
            if latency is not None and code == "OK":
                bucket.latencies.append(latency)

    def take(self, i):
        with self.lock:
            self.sent = max(self.sent, i)
            return self.buckets.pop(i, Bucket())


def code_of(error):
    """The name of an RpcError's code (FutureCancelledError: CANCELLED)."""
    if isinstance(error, grpc.FutureCancelledError):
        return "CANCELLED", "cancelled by the client"
    code = error.code() if hasattr(error, "code") else None
    return (code.name if code is not None else "UNKNOWN"), (
        error.details() if hasattr(error, "details") else str(error))


OK = ("OK",)
INVALID = ("INVALID_ARGUMENT",)


# ---------------------------------------------------------------------------------------------
# One client


class SoakClient:
    def __init__(self, cid, target, recorder, seed, end, stop):
        self.cid, self.recorder, self.end, self.stop = cid, recorder, end, stop
        self.rng = np.random.default_rng(seed)
        self.gen = Generator(self.rng)
        options = [("grpc.max_send_message_length", 1 << 30),
                   ("grpc.max_receive_message_length", 1 << 30),
                   ("grpc.use_local_subchannel_pool", 1)]  # a connection of its own
        self.channel = grpc.insecure_channel(target, options=options)
        self.v1 = pb.service_grpc.TensorOpsStub(self.channel)
        self.kserve = ks_grpc.GRPCInferenceServiceStub(self.channel) if ks_grpc else None
        self.raw_gather = self.channel.unary_unary("/tensorops.v1.TensorOps/Gather")
        self.prefix = f"soak/c{cid}"
        self.own = f"{self.prefix}/w"  # float32 [64, 16], updated in place
        self.actions = {
            "valid": [self.valid_own, self.valid_own, self.valid_own, self.valid_run,
                      self.valid_backward] + ([self.valid_kserve] if self.kserve else []),
            "stream": [self.stream_run, self.stream_run] + (
                [self.stream_kserve] if self.kserve else []),
            "bad": [self.bad_own, self.bad_run, self.bad_run_stream, self.bad_backward,
                    self.bad_body, self.bad_store_name, self.bad_get_name, self.bad_ref_with_data,
                    self.bad_backward_result_options, self.bad_in_place] + (
                        [self.bad_kserve, self.bad_kserve_parameter, self.bad_kserve_datatype]
                        if self.kserve else []),
            "cancel": [self.cancel],
            "deadline": [self.deadline],
            "drop": [self.drop_run_stream, self.drop_upload] + (
                [self.drop_kserve_stream] if self.kserve else []),
            "store": [self.put, self.put, self.get_own, self.get_counter, self.in_place_counter,
                      self.in_place_counter, self.in_place_own, self.store_as,
                      self.stale_version, self.missing_ref, self.info],
        }
        kinds = [k for k in WEIGHTS if WEIGHTS[k] > 0]
        weights = np.array([WEIGHTS[k] for k in kinds], float)
        self.kinds, self.weights = kinds, weights / weights.sum()

    def close(self):
        self.channel.close()

    def record(self, *args, **kwargs):
        self.recorder.record(*args, **kwargs)

    # Setup: the client's own tensors.

    def setup(self):
        self.upload(self.own, self.gen.array((64, 16), np.float32))
        for j in range(4):
            self.upload(f"{self.prefix}/t{j}", self.gen.array((int(self.rng.integers(1, 512)),),
                                                               np.float64))

    def upload(self, name, array, chunk=4096):
        self.v1.PutTensor(self.put_requests(name, array, chunk), timeout=CALL_TIMEOUT_S)

    def put_requests(self, name, array, chunk, hold=None):
        yield pb.store.PutTensorRequest(header=pb.store.PutTensorHeader(
            name=name, dtype=wire_dtype(array.dtype), shape=array.shape, overwrite=True))
        data = array.tobytes()
        for offset in range(0, len(data), chunk):
            yield pb.store.PutTensorRequest(data=data[offset:offset + chunk])
            if hold is not None:
                hold.wait(10)  # a dropped upload: never half-closed
                return

    def run(self):
        while not self.stop.is_set() and time.monotonic() < self.end:
            kind = self.kinds[int(self.rng.choice(len(self.kinds), p=self.weights))]
            actions = self.actions[kind]
            action = actions[int(self.rng.integers(len(actions)))]
            try:
                action()
            except Exception:  # a bug of this program: counted, so it is seen
                self.record(kind, action.__name__, "CLIENT_ERROR", (),
                            detail=traceback.format_exc())

    # Plumbing.

    def unary(self, kind, method, call, request, expected, check=None, timed=False,
              counter_add=0):
        start = time.perf_counter()
        detail, response = None, None
        try:
            response = call(request, timeout=CALL_TIMEOUT_S)
            code = "OK"
        except grpc.RpcError as error:
            code, detail = code_of(error)
        latency = time.perf_counter() - start
        if code == "OK" and check is not None:
            detail = check(response)
            if detail:
                code = "WRONG_RESULT"
        self.record(kind, method, code, expected, latency=latency if timed else None,
                    detail=detail, counter_add=counter_add)
        return code, response

    # valid

    def valid_own(self):
        case = self.gen.case()
        self.unary("valid", case.rpc, getattr(self.v1, case.rpc), case.message, OK,
                   check=lambda r: case.check_tensor(r.result), timed=True)

    def valid_run(self):
        case = self.gen.case()
        self.unary("valid", "Run", self.v1.Run, case.op, OK,
                   check=lambda r: case.check_tensor(r.result), timed=True)

    def backward_case(self):
        case = self.gen.case(dtype=np.float32)
        grad = to_tensor(self.gen.array(case.shape, np.float32), "grad_output")
        return case, grad

    def valid_backward(self):
        case, grad = self.backward_case()
        request = pb.generic.BackwardRequest(op=case.op, grad_output=grad)

        def check(response):
            keys = set(response.gradients)
            if not keys or not keys <= {"input", "src"}:
                return f"{case.field} backward: gradients {sorted(keys)}"
            return None

        self.unary("valid", "Backward", self.v1.Backward, request, OK, check=check, timed=True)

    def valid_kserve(self):
        if self.rng.random() < 0.25:
            case, grad = self.backward_case()
            request = kserve_request(case.op, "_backward", grad)

            def check(response):
                names = {output.name for output in response.outputs}
                if "grad_input" not in names and "grad_src" not in names:
                    return f"{case.field}_backward: outputs {sorted(names)}"
                return None

            self.unary("valid", "ModelInfer.backward", self.kserve.ModelInfer, request, OK,
                       check=check, timed=True)
            return
        case = self.gen.case()

        def check(response):
            if len(response.outputs) != 1 or len(response.raw_output_contents) != 1:
                return f"{case.field}: {len(response.outputs)} outputs"
            if list(response.outputs[0].shape) != case.shape:
                return f"{case.field}: output shape {list(response.outputs[0].shape)}"
            return case.check_bytes(response.raw_output_contents[0])

        self.unary("valid", "ModelInfer", self.kserve.ModelInfer, kserve_request(case.op), OK,
                   check=check, timed=True)

    # stream

    def half_closed_stream(self, call, requests):
        """(code, detail, responses) of a bidirectional stream sent `requests` and half-closed."""
        try:
            return "OK", None, list(call(iter(requests), timeout=CALL_TIMEOUT_S))
        except grpc.RpcError as error:
            return (*code_of(error), [])

    def stream_run(self, bad_share=0.25, sizes=(2, 9), method="RunStream"):
        """A RunStream of valid and bad requests; each answer is checked by what it answers."""
        n = int(self.rng.integers(*sizes))
        plan = {}
        requests = []
        for i in range(n):
            if self.rng.random() < bad_share:
                label, op = self.gen.bad_op()
                plan[i] = ("bad", label)
            else:
                case = self.gen.case()
                op = case.op
                plan[i] = ("valid", case)
            requests.append(pb.generic.RunStreamRequest(request_id=i, op=op))
        code, detail, responses = self.half_closed_stream(self.v1.RunStream, requests)
        seen = set()
        for response in responses:
            i = response.request_id
            if i not in plan or i in seen:
                code, detail = "WRONG_RESULT", f"RunStream: unexpected response id {i}"
                continue
            seen.add(i)
            what, item = plan[i]
            outcome = response.WhichOneof("outcome")
            if what == "bad":
                got = _code_name(response.error.code) if outcome == "error" else "OK"
                self.record("bad", f"RunStream.{item}", got, INVALID,
                            detail=response.error.message)
            else:
                problem = (item.check_tensor(response.result) if outcome == "result" else
                           f"error {response.error.code}: {response.error.message}")
                self.record("valid", "RunStream.request", "WRONG_RESULT" if problem else "OK",
                            OK, detail=problem)
        if code == "OK" and len(seen) != n:
            code, detail = "MISSING_RESPONSE", f"RunStream: {len(seen)} answers to {n} requests"
        self.record("stream", method, code, OK, detail=detail)

    def stream_kserve(self):
        n = int(self.rng.integers(2, 9))
        cases = {}
        requests = []
        for i in range(n):
            cases[str(i)] = self.gen.case()
            request = kserve_request(cases[str(i)].op)
            request.id = str(i)
            requests.append(request)
        code, detail, responses = self.half_closed_stream(self.kserve.ModelStreamInfer, requests)
        seen = set()
        for response in responses:
            i = response.infer_response.id
            case = cases.get(i)
            if response.error_message or case is None or i in seen:
                problem = response.error_message or f"unexpected response id {i!r}"
            else:
                seen.add(i)
                raw = response.infer_response.raw_output_contents
                problem = case.check_bytes(raw[0]) if len(raw) == 1 else f"{len(raw)} outputs"
            self.record("valid", "ModelStreamInfer.request", "WRONG_RESULT" if problem else "OK",
                        OK, detail=problem)
        if code == "OK" and len(seen) != n:
            code, detail = "MISSING_RESPONSE", f"ModelStreamInfer: {len(seen)} answers to {n}"
        self.record("stream", "ModelStreamInfer", code, OK, detail=detail)

    # bad

    def bad_own(self):
        label, op = self.gen.bad_op()
        if label == "empty":
            return self.unary("bad", "Run.empty", self.v1.Run, op, INVALID)
        field = op.WhichOneof("op")
        rpc = R.OPS_BY_FIELD[field]
        self.unary("bad", f"{rpc}.{label}", getattr(self.v1, rpc), getattr(op, field), INVALID)

    def bad_run(self):
        label, op = self.gen.bad_op()
        self.unary("bad", f"Run.{label}", self.v1.Run, op, INVALID)

    def bad_run_stream(self):
        """A stream of bad requests alone (stream_run mixes them with valid ones)."""
        self.stream_run(bad_share=1.0, sizes=(1, 4), method="RunStream.bad_only")

    def bad_backward(self):
        label, op = self.gen.bad_op()
        grad = to_tensor(self.gen.array((2, 5), np.float32), "grad_output")
        self.unary("bad", f"Backward.{label}", self.v1.Backward,
                   pb.generic.BackwardRequest(op=op, grad_output=grad), INVALID)

    def bad_body(self):
        body = self.pick_bytes()
        self.unary("bad", "Gather.malformed_body", self.raw_gather, body, INVALID)

    def pick_bytes(self):
        return self.gen.pick((b"\xff\xff\xff", b"\x0a\x05\x08", b"\x12\xff\xff\xff\xff\x0f",
                              bytes(self.rng.integers(128, 256, size=16).astype(np.uint8))))

    def bad_store_name(self):
        name = self.gen.pick(("/abs", ".hidden", "has space", "x" * 300, "", "a\\b"))
        array = np.zeros(4, np.float32)
        self.unary("bad", "PutTensor.name", self.v1.PutTensor,
                   self.put_requests(name, array, 16), INVALID)

    def bad_get_name(self):
        name = self.gen.pick(("/abs", "../up", "semi;colon"))

        def call(request, timeout):
            return list(self.v1.GetTensor(request, timeout=timeout))

        self.unary("bad", "GetTensor.name", call, pb.store.GetTensorRequest(name=name), INVALID)

    def bad_ref_with_data(self):
        ref = pb.tensor.Tensor(stored=pb.tensor.TensorRef(name=self.own), data=b"\0" * 4)
        request = pb.ops.GatherRequest(input=ref, index=to_tensor(np.zeros((1, 1), np.int64)))
        self.unary("bad", "Gather.ref_with_data", self.v1.Gather, request, INVALID)

    def bad_backward_result_options(self):
        case, grad = self.backward_case()
        R.with_result_options(case.op, R.result_options(store_as=f"{self.prefix}/never"))
        self.unary("bad", "Backward.result_options", self.v1.Backward,
                   pb.generic.BackwardRequest(op=case.op, grad_output=grad), INVALID)

    def bad_in_place(self):
        """An in-place add to the shared counter with one index out of range: refused before it
        writes anything (the counter's final check sees any partial write)."""
        k = int(self.rng.integers(2, 9))
        index = self.rng.integers(0, COUNTER_SIZE, size=k)
        index[int(self.rng.integers(k))] = self.gen.pick((COUNTER_SIZE, -COUNTER_SIZE - 1))
        op = R.scatter(tensorops.Ref(COUNTER_NAME), 0, index,
                       np.ones(k, np.int64), reduce="sum")
        R.with_result_options(op, R.result_options(in_place=True))
        self.unary("bad", "Scatter.in_place_index_range", self.v1.Scatter, op.scatter, INVALID)

    def bad_kserve(self):
        label, op = self.gen.bad_op()
        if label == "empty":
            label, op = "index_range", self.gen.bad_index_range()
        self.unary("bad", f"ModelInfer.{label}", self.kserve.ModelInfer, kserve_request(op),
                   INVALID)

    def bad_kserve_parameter(self):
        request = kserve_request(self.gen.case(ops=("gather", "index_select")).op)
        request.parameters["bogus"].int64_param = 1
        self.unary("bad", "ModelInfer.unknown_parameter", self.kserve.ModelInfer, request,
                   INVALID)

    def bad_kserve_datatype(self):
        request = kserve_request(self.gen.case(ops=("gather",), dtype=np.float32).op)
        request.inputs[0].datatype = self.gen.pick(("UINT32", "BYTES", "COMPLEX64", "FP8"))
        self.unary("bad", "ModelInfer.datatype", self.kserve.ModelInfer, request, INVALID)

    # cancel and deadline: larger calls, so that they queue

    def large_call(self):
        """(method, callable, request) of a larger valid call through one of the routes, from the
        process's pool of large requests."""
        route = int(self.rng.integers(4 if self.kserve else 3))
        if route == 2:
            return "Backward", self.v1.Backward, self.gen.pick(LARGE_POOL["backward"])
        if route == 3:
            return "ModelInfer", self.kserve.ModelInfer, self.gen.pick(LARGE_POOL["kserve"])
        case = self.gen.pick(LARGE_POOL["ops"])
        if route == 0:
            return case.rpc, getattr(self.v1, case.rpc), case.message
        return "Run", self.v1.Run, case.op

    def cancel_after(self, future, seconds, hold=None):
        """Cancels a call's future after `seconds` (then lets its request iterator end); returns
        (code, detail) of its outcome."""
        time.sleep(seconds)
        future.cancel()
        if hold is not None:
            hold.set()
        try:
            future.result()
            return "OK", None
        except (grpc.RpcError, grpc.FutureCancelledError) as error:
            return code_of(error)

    def cancel(self):
        method, call, request = self.large_call()
        code, detail = self.cancel_after(call.future(request, timeout=CALL_TIMEOUT_S),
                                         float(self.rng.uniform(0, 0.004)))
        self.record("cancel", method, code, ("CANCELLED", "OK"), detail=detail)

    def deadline(self):
        method, call, request = self.large_call()
        try:
            call(request, timeout=float(self.rng.uniform(0.0002, 0.005)))
            code, detail = "OK", None
        except grpc.RpcError as error:
            code, detail = code_of(error)
        self.record("deadline", method, code, ("DEADLINE_EXCEEDED", "OK"), detail=detail)

    # drop: streams opened and abandoned

    def dropped_stream(self, kind, method, call, requests):
        hold = threading.Event()

        def feed():
            yield from requests
            hold.wait(10)  # never half-closed

        stream = call(feed(), timeout=CALL_TIMEOUT_S)
        detail = None
        try:
            for _ in range(min(int(self.rng.integers(0, 3)), len(requests))):
                next(stream)
            if self.rng.random() < 0.5:
                time.sleep(float(self.rng.uniform(0, 0.003)))
            stream.cancel()
            code = stream.code().name
        except StopIteration:
            code, detail = "MISSING_RESPONSE", "the stream ended before it was cancelled"
        except grpc.RpcError as error:
            code, detail = code_of(error)
        finally:
            hold.set()
        self.record(kind, method, code, ("CANCELLED",), detail=detail)

    def drop_run_stream(self):
        requests = [pb.generic.RunStreamRequest(request_id=i, op=self.gen.case().op)
                    for i in range(int(self.rng.integers(1, 9)))]
        self.dropped_stream("drop", "RunStream", self.v1.RunStream, requests)

    def drop_kserve_stream(self):
        requests = [kserve_request(self.gen.case().op) for _ in range(int(self.rng.integers(1, 9)))]
        self.dropped_stream("drop", "ModelStreamInfer", self.kserve.ModelStreamInfer, requests)

    def drop_upload(self):
        name = f"{self.prefix}/dropped"
        hold = threading.Event()
        array = self.gen.array((int(self.rng.integers(2048, 65536)),), np.float32)
        future = self.v1.PutTensor.future(self.put_requests(name, array, 4096, hold),
                                          timeout=CALL_TIMEOUT_S)
        code, detail = self.cancel_after(future, float(self.rng.uniform(0, 0.003)), hold)
        self.record("drop", "PutTensor", code, ("CANCELLED",), detail=detail)
        self.unary("drop", "TensorInfo.after_dropped_upload", self.v1.TensorInfo,
                   pb.store.TensorInfoRequest(name=name), ("NOT_FOUND",))

    # store

    def put(self):
        name = f"{self.prefix}/t{int(self.rng.integers(4))}"
        array = self.gen.array((int(self.rng.integers(1, 8192)),), np.float64)

        def check(response):
            if response.info.bytes != array.nbytes or response.info.name != name:
                return f"PutTensor: info {response.info}"
            return None

        self.unary("store", "PutTensor", self.v1.PutTensor,
                   self.put_requests(name, array, int(self.rng.integers(512, 16385))), OK,
                   check=check)

    def download(self, request, timeout):
        parts = list(self.v1.GetTensor(request, timeout=timeout))
        if not parts or parts[0].WhichOneof("part") != "info":
            return "GetTensor: no info first"
        size = sum(len(part.data) for part in parts[1:])
        if size != parts[0].info.bytes:
            return f"GetTensor: {size} bytes, info says {parts[0].info.bytes}"
        return None

    def get_own(self):
        request = pb.store.GetTensorRequest(name=f"{self.prefix}/t{int(self.rng.integers(4))}",
                                            chunk_bytes=int(self.rng.integers(0, 4096)))
        self.unary("store", "GetTensor", self.download, request, OK, check=lambda problem: problem)

    def get_counter(self):
        request = pb.store.GetTensorRequest(name=COUNTER_NAME, chunk_bytes=1024)
        self.unary("store", "GetTensor.counter_chunked", self.download, request,
                   ("OK", "ABORTED"), check=lambda problem: problem)

    def in_place_counter(self):
        k = int(self.rng.integers(1, 33))
        index = self.rng.integers(-COUNTER_SIZE, COUNTER_SIZE, size=k)
        op = R.scatter(tensorops.Ref(COUNTER_NAME), 0, index,
                       np.ones(k, np.int64), reduce="sum")
        R.with_result_options(op, R.result_options(in_place=True))
        R.with_update_id(op, copy=False)

        def check(response):
            if response.result.stored.name != COUNTER_NAME or response.result.data:
                return f"in-place result {response.result}"
            return None

        self.unary("store", "Scatter.in_place_counter", self.v1.Scatter, op.scatter, OK,
                   check=check, counter_add=k)

    def in_place_own(self):
        ref = tensorops.Ref(self.own)
        which = int(self.rng.integers(3))
        if which == 0:
            k = int(self.rng.integers(1, 9))
            op = R.index_reduce(ref, 0, self.rng.integers(-64, 64, size=k),
                                self.gen.array((k, 16), np.float32), "sum", include_self=None)
            method = "IndexReduce.in_place"
        elif which == 1:
            op = R.masked_scatter(ref, self.rng.random(16) < 0.3,
                                  self.gen.array((1024,), np.float32))
            method = "MaskedScatter.in_place"
        else:
            start = int(self.rng.integers(0, 64))
            rows = len(range(*slice(start, None, 2).indices(64)))
            op = R.slice_scatter(ref, self.gen.array((rows, 16), np.float32), 0, start, None, 2)
            method = "SliceScatter.in_place"
        R.with_result_options(op, R.result_options(in_place=True))
        R.with_update_id(op, copy=False)
        field = op.WhichOneof("op")
        self.unary("store", method, getattr(self.v1, R.OPS_BY_FIELD[field]), getattr(op, field),
                   OK)

    def store_as(self):
        ref = tensorops.Ref(self.own)
        index = self.rng.integers(-64, 64, size=(int(self.rng.integers(1, 65)), 16))
        op = R.gather(ref, 0, index)
        R.with_result_options(op, R.result_options(store_as=f"{self.prefix}/out",
                                                   overwrite=True,
                                                   return_data=bool(self.rng.random() < 0.5)))
        R.with_update_id(op, copy=False)
        self.unary("store", "Gather.store_as", self.v1.Gather, op.gather, OK)

    def stale_version(self):
        ref = tensorops.Ref(self.own, version=1 << 40)
        op = R.index_select(ref, 0, np.zeros(2, np.int64))
        self.unary("store", "IndexSelect.stale_version", self.v1.IndexSelect, op.index_select,
                   ("FAILED_PRECONDITION",))

    def missing_ref(self):
        ref = tensorops.Ref(f"{self.prefix}/missing")
        op = R.gather(ref, 0, np.zeros((1, 1), np.int64))
        self.unary("store", "Gather.missing_ref", self.v1.Gather, op.gather, ("NOT_FOUND",))

    def info(self):
        which = int(self.rng.integers(3))
        if which == 0:
            self.unary("store", "ServerInfo", self.v1.ServerInfo, pb.info.ServerInfoRequest(), OK)
        elif which == 1:
            self.unary("store", "ListTensors", self.v1.ListTensors,
                       pb.store.ListTensorsRequest(), OK)
        else:
            self.unary("store", "TensorInfo", self.v1.TensorInfo,
                       pb.store.TensorInfoRequest(name=self.own), OK)


def _code_name(number):
    """The name of a gRPC code number (RunStream's error.code)."""
    for code in grpc.StatusCode:
        if code.value[0] == number:
            return code.name
    return f"CODE_{number}"


# ---------------------------------------------------------------------------------------------
# Worker processes

# Large requests (sides of 128..512: up to a few MiB), made once per process and shared by its
# clients, so that the cancelled and expiring calls cost the server much and the client little.
LARGE_POOL = {}


def fill_large_pool(rng, size=16):
    gen = Generator(rng)
    LARGE_POOL["ops"] = [gen.case(large=True) for _ in range(2 * size)]
    LARGE_POOL["backward"] = []
    for _ in range(size):
        case = gen.case(large=True, dtype=np.float32)
        grad = to_tensor(gen.array(case.shape, np.float32), "grad_output")
        LARGE_POOL["backward"].append(pb.generic.BackwardRequest(op=case.op, grad_output=grad))
    LARGE_POOL["kserve"] = ([kserve_request(gen.case(large=True).op) for _ in range(size)]
                            if ks is not None else [])


def worker_main(wid, client_ids, args, kserve_dir, out, go, start_value, stop):
    """Runs `client_ids`' clients as threads; sends ('ready'), then ('interval', wid, i, Bucket)
    per interval and ('done', wid)."""
    try:
        _import_modules(args.stubs, kserve_dir)
        WEIGHTS.update(args.weights)  # a spawned process starts from the module's defaults
        fill_large_pool(np.random.default_rng(args.seed * 7919 + wid))
        clients = []
        for cid in client_ids:
            clients.append(SoakClient(cid, args.target_address, None, args.seed * 1000 + cid,
                                      0, stop))
        for client in clients:
            client.setup()
        out.put(("ready", wid, None, None))
        go.wait()
        start = start_value.value
        interval, intervals = args.interval_s, args.intervals
        end = start + args.seconds
        recorder = Recorder(start, interval, intervals)
        for client in clients:
            client.recorder, client.end = recorder, end
        threads = [threading.Thread(target=client.run, daemon=True) for client in clients]
        for thread in threads:
            thread.start()
        for i in range(intervals - 1):
            boundary = start + (i + 1) * interval + 0.25
            while time.monotonic() < boundary and any(t.is_alive() for t in threads):
                time.sleep(min(0.25, max(0.0, boundary - time.monotonic())))
            out.put(("interval", wid, i, recorder.take(i).state()))
        for thread in threads:
            thread.join()
        out.put(("interval", wid, intervals - 1, recorder.take(intervals - 1).state()))
        for client in clients:
            client.close()
        out.put(("done", wid, None, None))
    except BaseException:
        out.put(("error", wid, None, traceback.format_exc()))


# ---------------------------------------------------------------------------------------------
# The parent: the server, sampling, reports, verdict


def read_proc_status(pid, field="VmRSS:"):
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith(field):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def cpu_seconds(pid):
    """utime + stime of a process, in seconds (None when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


class ServerChild:
    _LISTENING = re.compile(r"listening on \S*:(\d+)")
    _METRICS = re.compile(r"metrics: (http://\S+/metrics)")

    def __init__(self, path, flags, log_path):
        if not os.access(path, os.X_OK):
            raise SystemExit(f"soak: no server binary at {path} (build tensorops-server, or give "
                             "--server or --target)")
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.process = subprocess.Popen(
            [path, "--host=127.0.0.1", "--port=0", "--metrics_port=0", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        self.port = self.metrics_url = None
        self.lines = 0
        started = threading.Event()

        def read():
            for line in self.process.stdout:
                self.log.write(line)
                self.log.flush()
                self.lines += 1
                match = self._LISTENING.search(line)
                if match and self.port is None:
                    self.port = int(match.group(1))
                    metrics = self._METRICS.search(line)
                    self.metrics_url = metrics.group(1) if metrics else None
                    started.set()
            started.set()

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        if not started.wait(30) or self.port is None:
            self.process.kill()
            raise SystemExit(f"soak: the server did not start; its log is {log_path}")

    @property
    def pid(self):
        return self.process.pid

    def alive(self):
        return self.process.poll() is None

    def stop(self, grace=30):
        """SIGTERM, then the exit status (None if it had to be killed)."""
        if self.alive():
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                self.reader.join(5)
                return None
        self.reader.join(5)
        return self.process.returncode


def scrape(url):
    """{(name, labels): value} of a Prometheus text page; {} when it cannot be read."""
    if not url:
        return {}
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return {}
    values = {}
    for line in text.splitlines():
        if not line.startswith("tensorops_") and not line.startswith("process_"):
            continue
        try:
            key, value = line.rsplit(" ", 1)
            values[key] = float(value)
        except ValueError:
            pass
    return values


def reason_label(reason):
    return f'reason="{reason}"'


def metric_sum(values, prefix, label=None):
    """Sum of the series named `prefix` (with `label`, e.g. 'reason="memory"', in its labels)."""
    total = 0.0
    for key, value in values.items():
        name = key.split("{", 1)[0]
        if name == prefix and (label is None or label in key):
            total += value
    return total


class Sampler:
    """Samples the server's RSS and CPU and the client processes' CPU once a second."""

    def __init__(self, server_pid, worker_pids):
        self.server_pid, self.worker_pids = server_pid, worker_pids
        self.samples = []  # (monotonic, rss, server cpu s, client cpu s)
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)

    def sample(self):
        now = time.monotonic()
        rss = read_proc_status(self.server_pid) if self.server_pid else None
        server_cpu = cpu_seconds(self.server_pid) if self.server_pid else None
        client_cpu = sum(cpu_seconds(pid) or 0.0 for pid in self.worker_pids)
        with self.lock:
            self.samples.append((now, rss, server_cpu, client_cpu))
        return self.samples[-1]

    def loop(self):
        while not self.done.wait(1.0):
            self.sample()

    def between(self, t0, t1):
        with self.lock:
            return [s for s in self.samples if t0 <= s[0] <= t1]


def mib(value):
    return "-" if value is None else f"{value / 2**20:.1f} MiB"


def percentile(sorted_values, q):
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))  # nearest rank
    return sorted_values[rank - 1]


def ms(value):
    return "-" if value is None else f"{value * 1e3:.2f} ms"


def format_codes(counts):
    """'kind  CODE n, CODE n' lines from a Counter over (kind, method, code)."""
    by_kind = collections.defaultdict(collections.Counter)
    for (kind, _, code), n in counts.items():
        by_kind[kind][code] += n
    lines = []
    for kind in list(WEIGHTS) + sorted(set(by_kind) - set(WEIGHTS)):
        if kind in by_kind:
            codes = ", ".join(f"{code} {n}" for code, n in by_kind[kind].most_common())
            lines.append(f"    {kind:<9} {codes}")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n", 2)[2])
    parser.add_argument("--server", default=DEFAULT_SERVER, help="tensorops-server to start")
    parser.add_argument("--target", help="HOST:PORT of a running server instead")
    parser.add_argument("--metrics", help="with --target: HOST:PORT of its metrics endpoint (the "
                        "RSS is then its process_resident_memory_bytes; without it, no RSS)")
    parser.add_argument("--clients", type=int, default=64)
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--interval_s", type=float, default=0,
                        help="report interval (0: 60 s, or a third of a run under 3 minutes)")
    parser.add_argument("--processes", type=int, default=2, help="client processes")
    parser.add_argument("--stubs", default=DEFAULT_STUBS,
                        help="directory holding the generated tensorops/v1 stubs")
    parser.add_argument("--no_kserve", action="store_true", help="leave KServe v2 calls out")
    parser.add_argument("--rss_tolerance", type=float, default=0.10)
    parser.add_argument("--mix", default="", help="weights to change, e.g. 'drop=0,bad=30' "
                        f"(default {','.join(f'{k}={w}' for k, w in WEIGHTS.items())})")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--server_log", help="where the server's log goes (default: a temporary "
                        "file, printed)")
    parser.add_argument("server_args", nargs="*", help="after --: flags for the server")
    args = parser.parse_args()
    for item in filter(None, args.mix.split(",")):
        kind, _, weight = item.partition("=")
        if kind not in WEIGHTS or not weight.isdigit():
            parser.error(f"--mix: {item!r} is not KIND=WEIGHT, KIND one of {', '.join(WEIGHTS)}")
        WEIGHTS[kind] = int(weight)
    if not any(WEIGHTS.values()):
        parser.error("--mix: every weight is 0")
    args.weights = dict(WEIGHTS)
    if args.target and args.server_args:
        parser.error("server flags (after --) need a server of our own, not --target")
    args.seconds = args.minutes * 60
    if args.interval_s <= 0:
        args.interval_s = 60.0 if args.seconds >= 180 else max(1.0, args.seconds / 3)
    args.intervals = max(1, math.ceil(args.seconds / args.interval_s - 1e-9))
    args.processes = max(1, min(args.processes, args.clients))

    work_dir = tempfile.mkdtemp(prefix="tensorops-soak-")
    kserve_dir = None
    if not args.no_kserve:
        kserve_dir = os.path.join(work_dir, "kserve")
        os.makedirs(kserve_dir)
        if not generate_kserve_stubs(kserve_dir):
            print("soak: protoc or grpc_python_plugin not found: KServe calls left out")
            kserve_dir = None
    _import_modules(args.stubs, kserve_dir)

    server = None
    if args.target:
        args.target_address = args.target
        metrics_url = f"http://{args.metrics}/metrics" if args.metrics else None
    else:
        log_path = args.server_log or os.path.join(work_dir, "server.log")
        server = ServerChild(args.server, args.server_args, log_path)
        atexit.register(lambda: server.alive() and server.process.kill())  # on any early exit
        args.target_address = f"127.0.0.1:{server.port}"
        metrics_url = server.metrics_url
    print(f"soak: {args.clients} clients in {args.processes} process(es) for {args.minutes:g} "
          f"min against {args.target_address}"
          + (f" (pid {server.pid}, log {server.log_path})" if server else "")
          + f"; reports every {args.interval_s:g} s; KServe {'on' if kserve_dir else 'off'}",
          flush=True)

    # The shared counter, before any client starts.
    channel = grpc.insecure_channel(args.target_address)
    v1 = pb.service_grpc.TensorOpsStub(channel)
    zeros = np.zeros(COUNTER_SIZE, np.int64)
    v1.PutTensor(iter([
        pb.store.PutTensorRequest(header=pb.store.PutTensorHeader(
            name=COUNTER_NAME, dtype=pb.tensor.DATA_TYPE_INT64, shape=[COUNTER_SIZE],
            overwrite=True)),
        pb.store.PutTensorRequest(data=zeros.tobytes())]), timeout=CALL_TIMEOUT_S)
    server_info = v1.ServerInfo(pb.info.ServerInfoRequest(), timeout=CALL_TIMEOUT_S)
    print(f"server: {server_info.version} ({server_info.git_revision}), "
          f"{', '.join(f'{d.kind}:{d.threads} threads' for d in server_info.devices)}; "
          f"max_concurrent_calls={server_info.limits.max_concurrent_calls}, "
          f"max_queued_calls={server_info.limits.max_queued_calls}", flush=True)

    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    go, stop = context.Event(), context.Event()
    start_value = context.Value("d", 0.0)
    workers = []
    for wid in range(args.processes):
        ids = list(range(wid, args.clients, args.processes))
        process = context.Process(target=worker_main,
                                  args=(wid, ids, args, kserve_dir, out, go, start_value, stop),
                                  daemon=True)
        process.start()
        workers.append(process)

    def receive(timeout):
        message = out.get(timeout=timeout)
        if message[0] == "error":
            stop.set()
            raise SystemExit(f"soak: client process {message[1]} failed:\n{message[3]}")
        return message

    ready = 0
    while ready < len(workers):
        if receive(120)[0] == "ready":
            ready += 1

    sampler = Sampler(server.pid if server else None, [w.pid for w in workers])
    baseline_metrics = scrape(metrics_url)
    fresh_rss = read_proc_status(server.pid) if server else None
    start = time.monotonic() + 0.1
    start_value.value = start
    sampler.sample()
    sampler.thread.start()
    go.set()

    totals = Bucket()
    rows = []  # per interval, for the summary table
    pending = collections.defaultdict(dict)  # interval -> {wid: Bucket}
    done = 0
    finished = set()
    next_interval = 0
    previous_metrics = baseline_metrics
    crashed_at = None
    while done < len(workers):
        try:
            kind, wid, i, payload = receive(5)
        except queue_module.Empty:
            kind = None
            lost = [w for n, w in enumerate(workers) if not w.is_alive() and n not in finished]
            if lost:
                stop.set()
                raise SystemExit(f"soak: a client process exited with status {lost[0].exitcode}")
        if server and not server.alive() and crashed_at is None:
            crashed_at = time.monotonic() - start
            print(f"!! the server exited with status {server.process.returncode} at "
                  f"{crashed_at:.0f} s; stopping the clients", flush=True)
            stop.set()
        if kind == "done":
            done += 1
            finished.add(wid)
        elif kind == "interval":
            pending[i][wid] = Bucket.from_state(payload)
        while len(pending.get(next_interval, {})) == len(workers):
            i = next_interval
            bucket = Bucket()
            for part in pending.pop(i).values():
                bucket.merge(part)
            totals.merge(bucket)
            t0 = start + i * args.interval_s
            t1 = min(start + (i + 1) * args.interval_s, start + args.seconds)
            sampler.sample()
            # From the last sample before the interval to the last one near its end: the last
            # interval is reported once every client has finished its call, by when the server
            # may have trimmed its heap.
            samples = sampler.between(t0 - 1.01, t1 + 0.5)
            first, sample = samples[0], samples[-1]
            elapsed = max(1e-9, sample[0] - first[0])
            server_cpu = (None if sample[2] is None or first[2] is None
                          else (sample[2] - first[2]) / elapsed)
            client_cpu = (sample[3] - first[3]) / elapsed
            rss_values = [s[1] for s in samples if s[1] is not None]
            metrics = scrape(metrics_url)
            if sample[1] is None and metrics:
                sample = (sample[0], metric_sum(metrics, "process_resident_memory_bytes") or None,
                          sample[2], sample[3])
            latencies = sorted(bucket.latencies)
            calls = sum(bucket.counts.values())
            seconds = min(args.interval_s, args.seconds - i * args.interval_s)
            row = {
                "interval": i, "from": i * args.interval_s, "to": i * args.interval_s + seconds,
                "calls": calls, "rate": calls / seconds, "valid": len(latencies),
                "p50": percentile(latencies, 50), "p99": percentile(latencies, 99),
                "rss": sample[1],
                "rss_peak": max(rss_values + [sample[1]]) if sample[1] is not None else None,
                "server_cpu": server_cpu, "client_cpu": client_cpu,
                "unexpected": sum(bucket.unexpected.values()),
            }
            rows.append(row)
            label = "minute" if args.interval_s == 60 else "interval"
            print(f"[{label} {i + 1}/{args.intervals}, {row['from']:g}-{row['to']:g} s] "
                  f"{calls} calls ({row['rate']:.0f}/s); valid unary p50 {ms(row['p50'])}, "
                  f"p99 {ms(row['p99'])} ({row['valid']} calls); server RSS {mib(row['rss'])} "
                  f"(peak {mib(row['rss_peak'])}), CPU "
                  + ("-" if server_cpu is None else f"{server_cpu * 100:.0f}%")
                  + f"; clients' CPU {client_cpu * 100:.0f}%", flush=True)
            for line in format_codes(bucket.counts):
                print(line)
            if metrics:
                def delta(name, label=None):
                    return int(metric_sum(metrics, name, label)
                               - metric_sum(previous_metrics, name, label))
                reasons = ", ".join(
                    f"{reason} +{delta('tensorops_rejected_total', reason_label(reason))}"
                    for reason in ("deadline_exceeded", "cancelled", "queue_full", "memory",
                                   "limit"))
                print(f"    server:   rejected {reasons}; queued "
                      f"{int(metric_sum(metrics, 'tensorops_calls_queued'))}, streams open "
                      f"{int(metric_sum(metrics, 'tensorops_streams_open'))}, store "
                      f"{mib(metric_sum(metrics, 'tensorops_store_bytes'))} in "
                      f"{int(metric_sum(metrics, 'tensorops_store_tensors'))} tensors")
                previous_metrics = metrics
            if bucket.unexpected:
                print("    UNEXPECTED: " + ", ".join(
                    f"{kind}/{method} {code} {n}"
                    for (kind, method, code), n in bucket.unexpected.most_common()))
                for kind_, method, code, detail in bucket.examples[:4]:
                    last = detail.splitlines()[-1] if detail else ""
                    print(f"      e.g. {kind_}/{method} {code}: {last}")
            sys.stdout.flush()
            next_interval += 1
    for process in workers:
        process.join(30)
    sampler.done.set()
    end_time = time.monotonic()

    # After the load.
    print("\n== after the load")
    problems = []
    final_metrics = scrape(metrics_url)
    counter_sum = None
    if server is None or server.alive():
        try:
            parts = list(v1.GetTensor(pb.store.GetTensorRequest(name=COUNTER_NAME),
                                      timeout=CALL_TIMEOUT_S))
            data = b"".join(part.data for part in parts[1:])
            counter_sum = int(np.frombuffer(data, np.int64).sum())
            tensors = v1.ListTensors(pb.store.ListTensorsRequest(), timeout=CALL_TIMEOUT_S)
            print(f"store: {len(tensors.tensors)} tensors, "
                  f"{sum(t.bytes for t in tensors.tensors)} bytes; counter version "
                  f"{parts[0].info.version}")
        except grpc.RpcError as error:
            problems.append(f"the final checks' calls failed: {code_of(error)}")
    if counter_sum is not None:
        expected = totals.counter_added
        note = (f" (+ up to {totals.counter_unknown} from in-place calls with unexpected codes)"
                if totals.counter_unknown else "")
        print(f"shared counter: sum {counter_sum}, ones added by in-place calls that returned OK "
              f"{expected}{note}")
        if not expected <= counter_sum <= expected + totals.counter_unknown:
            problems.append(f"the shared counter sums to {counter_sum}, expected {expected}")
    if final_metrics:
        reasons = {key.split('reason="')[1].split('"')[0]: int(value)
                   for key, value in final_metrics.items()
                   if key.startswith("tensorops_rejected_total{")}
        base = {key.split('reason="')[1].split('"')[0]: int(value)
                for key, value in baseline_metrics.items()
                if key.startswith("tensorops_rejected_total{")}
        print("server rejections during the run: " + ", ".join(
            f"{reason} {count - base.get(reason, 0)}" for reason, count in sorted(reasons.items())))
    rss_after = {}
    if server is not None and server.alive():
        for wait in (1, 3):
            time.sleep(max(0.0, end_time + wait - time.monotonic()))
            rss_after[wait] = read_proc_status(server.pid)
        print(f"server RSS: fresh {mib(fresh_rss)}, +1 s after the load {mib(rss_after[1])}, "
              f"+3 s {mib(rss_after[3])}")
    exit_status = None
    if server is not None:
        was_alive = server.alive()
        exit_status = server.stop()
        if not was_alive:
            problems.append(f"the server exited during the run (status "
                            f"{server.process.returncode}, at {crashed_at or 0:.0f} s); log "
                            f"{server.log_path}")
        elif exit_status != 0:
            problems.append(f"the server's exit status at SIGTERM was {exit_status}")
        print(f"server stopped with SIGTERM: exit status {exit_status}; log {server.log_path} "
              f"({server.lines} lines)")
    channel.close()

    # Totals.
    print("\n== totals by kind, method and code")
    by_method = collections.defaultdict(collections.Counter)
    for (kind, method, code), n in totals.counts.items():
        by_method[(kind, method)][code] += n
    for (kind, method), codes in sorted(by_method.items()):
        mark = "  !!" if any((kind, method, c) in totals.unexpected for c in codes) else ""
        print(f"  {kind:<9} {method:<36} " + ", ".join(
            f"{c} {n}" for c, n in codes.most_common()) + mark)
    total_calls = sum(totals.counts.values())
    duration = (end_time - start)
    print(f"  all: {total_calls} calls in {duration:.0f} s ({total_calls / duration:.0f}/s)")

    print("\n== per interval (markdown)")
    print("| interval | calls/s | valid p50 | valid p99 | server RSS | RSS peak | server CPU | "
          "clients' CPU | unexpected |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['from']:g}-{row['to']:g} s | {row['rate']:.0f} | {ms(row['p50'])} | "
              f"{ms(row['p99'])} | {mib(row['rss'])} | {mib(row['rss_peak'])} | "
              + ("-" if row["server_cpu"] is None else f"{row['server_cpu'] * 100:.0f}%")
              + f" | {row['client_cpu'] * 100:.0f}% | {row['unexpected']} |")

    # Verdict.
    print("\n== verdict")
    unexpected = sum(totals.unexpected.values())
    bad_total = sum(n for (kind, _, _), n in totals.counts.items() if kind == "bad")
    bad_other = sum(n for (kind, _, code), n in totals.counts.items()
                    if kind == "bad" and code != "INVALID_ARGUMENT")
    verdict = []
    detail = "; ".join(problems)
    verdict.append((unexpected == 0 and not problems,
                    f"no unexpected status codes: {unexpected} unexpected of {total_calls}"
                    + (f"; {detail}" if detail else "")))
    verdict.append((None if bad_total == 0 else bad_other == 0,
                    f"every bad request answered INVALID_ARGUMENT: {bad_total - bad_other} of "
                    f"{bad_total}"))
    rss_rows = [row for row in rows if row["rss"] is not None]
    if not rss_rows:
        verdict.append((None, "RSS flat after the first interval: not measured (--target "
                        "without --metrics)"))
    elif len(rss_rows) < 2:
        verdict.append((None, "RSS flat after the first interval: only one interval"))
    else:
        base = rss_rows[0]["rss"]
        worst = max(rss_rows[1:], key=lambda row: abs(row["rss"] - base))
        change = worst["rss"] / base - 1
        verdict.append((abs(change) <= args.rss_tolerance,
                        f"RSS flat after the first interval (within {args.rss_tolerance:.0%}): "
                        f"{mib(base)} at the end of the first, "
                        + ", ".join(mib(row["rss"]) for row in rss_rows[1:])
                        + f" after (largest change {change:+.1%})"))
    for ok, text in verdict:
        print(f"  {'PASS' if ok else 'n/a ' if ok is None else 'FAIL'}  {text}")
    if totals.examples:
        print("\nunexpected outcomes, first ones:")
        for kind, method, code, text in totals.examples[:16]:
            print(f"  {kind}/{method} {code}: {text}")
    shutil.rmtree(os.path.join(work_dir, "kserve"), ignore_errors=True)
    return 1 if any(ok is False for ok, _ in verdict) else 0


if __name__ == "__main__":
    sys.exit(main())
