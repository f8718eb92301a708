"""What goes in and comes out: array-likes take the input's dtype, writable results, torch
tensors in and out, __version__, and ImportErrors that name the missing module."""
import os
import re
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import reference as ref
import tensorops

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(HERE)
REPO_ROOT = os.path.dirname(os.path.dirname(PACKAGE_ROOT))

RNG = np.random.default_rng(23)


# Array-likes without a dtype of their own take the input's; arrays keep the strict rule.

def test_list_src_takes_the_input_dtype(client):
    x = RNG.uniform(size=(3, 4)).astype(np.float32)
    index = np.array([[0, 2, 1, 0]])
    result = client.scatter(x, 0, index, [[1, 2, 3, 4]])
    assert result.dtype == np.float32
    expected = ref.scatter(x, 0, index, np.array([[1, 2, 3, 4]], np.float32), "assign")
    np.testing.assert_array_equal(result, expected.astype(np.float32))


def test_python_scalar_and_tuple_sources_take_the_input_dtype(client):
    x = np.arange(12, dtype=np.int16).reshape(3, 4)
    np.testing.assert_array_equal(client.select_scatter(x, (7, 8, 9, 10), 0, 1)[1], [7, 8, 9, 10])
    np.testing.assert_array_equal(client.select_scatter(x, [1.9, -1.9, 3, 4], 0, 0)[0],
                                  [1, -1, 3, 4])  # floats truncate, as torch.tensor's do
    result = client.index_add(x, 0, np.array([2]), [[1, 1, 1, 1]])
    assert result.dtype == np.int16
    np.testing.assert_array_equal(result[2], x[2] + 1)
    result = client.scatter(x, 1, np.array([[3], [3], [3]]), 5)  # a scalar is a value
    np.testing.assert_array_equal(result[:, 3], [5, 5, 5])


@pytest.mark.parametrize("builder, args", [
    ("scatter", lambda x, src: (x, 0, np.zeros((1, 2), np.int64), src)),
    ("index_reduce", lambda x, src: (x, 0, np.array([1]), src, "amax")),
    ("select_scatter", lambda x, src: (x, src[0], 0, 1)),
    ("slice_scatter", lambda x, src: (x, src, 0, 0, 1)),
    ("diagonal_scatter", lambda x, src: (x, src[0])),
    ("scatter_nd", lambda x, src: (x, np.array([[0]]), src)),
    ("masked_scatter", lambda x, src: (x, np.array([[True, False], [False, True]]), src)),
])
def test_every_src_argument_takes_the_input_dtype(builder, args):
    x = np.zeros((2, 2), np.complex64)
    request = getattr(tensorops.requests, builder)(*args(x, [[1, 2]]))
    op = getattr(request, request.WhichOneof("op"))
    assert op.src.dtype == op.input.dtype
    assert np.frombuffer(op.src.data, np.complex64).tolist() == [1, 2]


def test_list_src_of_a_ref_with_a_dtype_takes_it():
    request = tensorops.requests.scatter(tensorops.Ref("t", 1, "float16", (2, 2)), 0,
                                         np.zeros((1, 2), np.int64), [[1, 2]])
    assert request.scatter.src.dtype == tensorops.v1.tensor_pb2.DATA_TYPE_FLOAT16
    assert request.scatter.input.stored.name == "t"


def test_list_src_of_a_bfloat16_input_is_bfloat16(client):
    x = tensorops.bfloat16.from_float32(np.zeros((2, 2), np.float32))
    result = client.scatter(x, 0, np.array([[1, 0]]), [[1.5, -2]])
    assert isinstance(result, tensorops.bfloat16)
    np.testing.assert_array_equal(np.asarray(result), [[0, -2], [1.5, 0]])


def test_arrays_keep_the_strict_dtype_rule(client):
    x = np.ones((2, 3), np.float32)
    with pytest.raises(tensorops.InvalidArgument,
                       match="src.dtype = float64 does not match input.dtype = float32"):
        client.scatter(x, 0, np.zeros((1, 3), np.int64), np.ones((1, 3)))


def test_values_the_input_dtype_cannot_hold_are_rejected():
    x = np.zeros(4, np.uint8)
    with pytest.raises(ValueError, match=re.escape(
            "src: 300 does not fit input.dtype = uint8 (expected 0 <= value <= 255)")):
        tensorops.requests.scatter(x, 0, np.array([0, 1]), [1, 300])
    with pytest.raises(ValueError, match=re.escape(
            "source = [1j] has complex values, which input.dtype = float32 cannot hold")):
        tensorops.requests.index_add(np.zeros(2, np.float32), 0, np.array([0]), [1j])
    with pytest.raises(TypeError, match="src = \\['a'\\] is not numeric"):
        tensorops.requests.slice_scatter(np.zeros(2, np.float32), ["a"])


INT64_RANGE = "-9223372036854775808 <= value <= 9223372036854775807"


@pytest.mark.parametrize("dtype, src, message", [
    (np.int64, 2**63, f"src: 9223372036854775808 does not fit input.dtype = int64 (expected "
                      f"{INT64_RANGE})"),
    (np.int64, [1, 2**64], f"src: 18446744073709551616 does not fit input.dtype = int64 "
                           f"(expected {INT64_RANGE})"),
    (np.int64, -2**63 - 1, f"src: -9223372036854775809 does not fit input.dtype = int64 "
                           f"(expected {INT64_RANGE})"),
    (np.uint8, [7, -1], "src: -1 does not fit input.dtype = uint8 (expected 0 <= value <= "
                        "255)"),
    (np.uint8, 300.0, "src: 300.0 does not fit input.dtype = uint8 (expected a finite number "
                      "whose integer part is 0 <= value <= 255)"),
    (np.int64, float("nan"), "src: nan does not fit input.dtype = int64 (expected a finite "
                             f"number whose integer part is {INT64_RANGE})"),
    (np.int32, [1.5, -float("inf")], "src: -inf does not fit input.dtype = int32"),
    (np.int64, 2.0**63, "src: 9.223372036854776e+18 does not fit input.dtype = int64"),
    (np.int8, [1.5, 2**64], "src: 18446744073709551616 does not fit input.dtype = int8 "
                            "(expected -128 <= value <= 127)"),
])
def test_python_numbers_out_of_the_dtypes_range_are_value_errors(dtype, src, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        tensorops.requests.slice_scatter(np.zeros(2, dtype), src)


@pytest.mark.parametrize("dtype, src, expected", [
    (np.int64, [-2**63, 2**63 - 1], [-2**63, 2**63 - 1]),
    (np.int8, [127.9, -128.9], [127, -128]),      # floats truncate toward zero
    (np.uint8, [-0.9, 255.5], [0, 255]),
    (np.float32, [2**64, -1], [2.0**64, -1]),       # beyond int64: numpy's objects
    (np.complex128, [2**64, 1j], [2.0**64, 1j]),
])
def test_python_numbers_in_the_dtypes_range_convert(dtype, src, expected):
    request = tensorops.requests.slice_scatter(np.zeros(2, dtype), src)
    assert np.frombuffer(request.slice_scatter.src.data, dtype).tolist() == expected


def test_python_numbers_for_a_bfloat16_input(client):
    assert tensorops.bfloat16.from_float32(1.5).shape == ()
    assert tensorops.bfloat16.from_float32(np.float32(float("nan"))).bits == 0x7FC0
    x = tensorops.bfloat16.from_float32(np.zeros(3, np.float32))
    np.testing.assert_array_equal(np.asarray(client.select_scatter(x, 2.5, 0, 1)), [0, 2.5, 0])


def test_bfloat16_bits_of_any_byte_order():
    big = tensorops.bfloat16(np.array([0x3FC0, 0xC000], ">u2"))
    assert big.bits.dtype == np.uint16 and big.bits.tolist() == [0x3FC0, 0xC000]
    np.testing.assert_array_equal(big.to_float32(), [1.5, -2])
    with pytest.raises(TypeError, match=re.escape(
            "bfloat16: bits.dtype = int16 is not uint16 (bits are the raw bfloat16 bits, of any "
            "byte order)")):
        tensorops.bfloat16(np.zeros(2, np.int16))


def test_scalar_and_integer_arguments_name_themselves():
    x, index = np.zeros(4, np.int64), np.array([0])
    for call, message in [
            (lambda: tensorops.requests.scatter(x, 0, index, value=2**64),
             f"scatter: value = 18446744073709551616 is out of range (expected an int, "
             f"{INT64_RANGE}: an int64)"),
            (lambda: tensorops.requests.index_add(x, 0, index, [1], alpha=2**64),
             "index_reduce: alpha = 18446744073709551616 is out of range"),
            (lambda: tensorops.requests.slice_scatter(x, [1], step=2**63),
             "slice_scatter: step = 9223372036854775808 is out of range"),
            (lambda: tensorops.requests.gather_nd(x, index, axes=[0, -2**63 - 1]),
             "gather_nd: axes[1] = -9223372036854775809 is out of range"),
    ]:
        with pytest.raises(ValueError, match=re.escape(message)):
            call()
    for call, message in [
            (lambda: tensorops.requests.select_scatter(x, 1, 0, 1.0),
             f"select_scatter: index = 1.0 is not an integer (expected an int, {INT64_RANGE})"),
            (lambda: tensorops.requests.scatter(x, 0, index, value=np.array([5.0])),
             "scatter: value = array([5.]) is not a scalar (expected a bool, int, float or "
             "complex number, or a 0-d array of one)"),
    ]:
        with pytest.raises(TypeError, match=re.escape(message)):
            call()
    # numpy integers and 0-d arrays are numbers too.
    request = tensorops.requests.select_scatter(x, 1, np.int32(0), np.int64(2))
    assert request.select_scatter.index == 2
    request = tensorops.requests.scatter(x, 0, index, value=np.array(5.0))
    assert request.scatter.value.float_value == 5


# Writable results.

def test_results_are_read_only_by_default_and_writable_with_copy(client, server):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    index = np.array([[2, 0], [1, 1]])
    view = client.gather(x, 1, index)
    assert not view.flags.writeable
    copied = client.gather(x, 1, index, copy=True)
    assert copied.flags.writeable and copied.flags.owndata
    copied[0, 0] = -1  # ours to change
    np.testing.assert_array_equal(view, ref.gather(x, 1, index))
    with tensorops.Client(server.address, timeout=60, copy=True) as writable_client:
        assert writable_client.gather(x, 1, index).flags.writeable
        assert not writable_client.gather(x, 1, index, copy=False).flags.writeable
        result = writable_client.run("index_select", x, 0, np.array([1]))
        assert result.flags.writeable
        gradients = writable_client.backward("gather", np.ones((2, 2), np.float32), x, 1, index)
        assert gradients["input"].flags.writeable


# torch tensors in, torch tensors out.

def _torch():
    # scripts/install-deps installs it (python3-torch); elsewhere these tests skip, saying why.
    return pytest.importorskip("torch", reason="torch is not installed (Debian: python3-torch)")


def test_torch_in_torch_out(client):
    torch = _torch()
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    index = torch.tensor([[0, 3], [1, 1], [2, 0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # torch warns about non-writable arrays
        result = client.gather(x, 1, index)
        assert isinstance(result, torch.Tensor)
        assert result.dtype == torch.float32
        assert torch.equal(result, torch.gather(x, 1, index))
        result += 1  # writable
    # One torch argument is enough: a numpy input with a torch index gives torch out.
    mixed = client.index_select(x.numpy(), 0, torch.tensor([2]))
    assert isinstance(mixed, torch.Tensor) and torch.equal(mixed, x[2:3])
    assert isinstance(client.index_select(x.numpy(), 0, np.array([2])), np.ndarray)


def test_torch_requires_grad_is_detached(client):
    torch = _torch()
    x = torch.rand(3, 4, requires_grad=True)
    src = torch.rand(2, 4, requires_grad=True)
    index = torch.tensor([[0, 1, 2, 0], [2, 2, 1, 0]])
    result = client.scatter_add(x, 0, index, src)
    assert not result.requires_grad
    assert torch.allclose(result, torch.scatter_add(x, 0, index, src).detach())


def test_torch_bfloat16_and_non_contiguous(client):
    torch = _torch()
    x = torch.rand(4, 6).to(torch.bfloat16)
    index = torch.tensor([[5, 0], [1, 1], [2, 3], [4, 4]])
    result = client.gather(x, 1, index)
    assert result.dtype == torch.bfloat16
    assert torch.equal(result, torch.gather(x, 1, index))
    transposed = torch.rand(5, 3).t()  # not contiguous
    assert torch.equal(client.gather(transposed, 1, index[:3] % 5),
                       torch.gather(transposed, 1, index[:3] % 5))


def test_torch_gradients_and_put(client):
    torch = _torch()
    x = torch.rand(3, 4, requires_grad=True)
    index = torch.tensor([[0, 1], [3, 3], [2, 1]])
    grad_output = torch.ones(3, 2)
    gradients = client.backward("gather", grad_output, x, 1, index)
    torch.gather(x, 1, index).backward(grad_output)
    assert isinstance(gradients["input"], torch.Tensor)
    assert torch.equal(gradients["input"], x.grad)
    stored = client.put("torch/x", x, overwrite=True)
    assert stored.dtype == "float32" and stored.shape == (3, 4)
    np.testing.assert_array_equal(client.get(stored), x.detach().numpy())
    client.delete(stored)


# The package.

def test_version_is_the_project_version():
    with open(os.path.join(REPO_ROOT, "CMakeLists.txt")) as f:
        project_version = re.search(r"project\(tensorops VERSION (\S+)", f.read()).group(1)
    assert tensorops.__version__ == project_version
    with open(os.path.join(PACKAGE_ROOT, "pyproject.toml")) as f:
        assert 'version = {attr = "tensorops._version.__version__"}' in f.read()


def _import_with(blocked, extra_path):
    """Runs `import tensorops` in a child whose import of the module `blocked` fails (None:
    none), with the source tree and extra_path on sys.path; returns its stderr."""
    program = textwrap.dedent(f"""
        import importlib.abc, sys
        blocked = {blocked!r}

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if blocked and (name == blocked or name.startswith(blocked + ".")):
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
                return None

        sys.meta_path.insert(0, Block())
        sys.path[:0] = {[PACKAGE_ROOT, *extra_path]!r}
        import tensorops
    """)
    child = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                           env={**os.environ, "PYTHONPATH": ""})
    assert child.returncode != 0, "import tensorops succeeded"
    return child.stderr.strip().splitlines()[-1]


@pytest.mark.skipif(bool(os.environ.get("TENSOROPS_TEST_INSTALLED")),
                    reason="imports the source tree")
@pytest.mark.parametrize("blocked, distribution", [
    ("grpc", "grpcio"), ("google.protobuf", "protobuf"), ("numpy", "numpy")])
def test_import_error_names_the_missing_module(blocked, distribution):
    stubs = os.path.dirname(os.path.dirname(os.path.dirname(tensorops.v1.tensor_pb2.__file__)))
    message = _import_with(blocked, [stubs])
    assert message.startswith(f"ImportError: tensorops needs the module {blocked}, which did "
                              f"not import: install {distribution} ")
    assert "stubs" not in message


@pytest.mark.skipif(bool(os.environ.get("TENSOROPS_TEST_INSTALLED")),
                    reason="imports the source tree")
def test_import_error_for_missing_stubs_says_so():
    message = _import_with(None, [])
    assert message.startswith("ImportError: tensorops: the generated stubs (tensorops.v1) are "
                              "missing")
