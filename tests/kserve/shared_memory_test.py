"""Triton's system shared-memory extension through stock tritonclient: regions made with
`tritonclient.utils.shared_memory`, registered with register_system_shared_memory, inputs and
outputs placed in them with InferInput.set_shared_memory and InferRequestedOutput.set_shared_memory,
as Triton's own simple_grpc_shm_client example does; each result read back from its region is
tensorops.v1's (the repository's Python client on the same server) and numpy's."""
import contextlib
import dataclasses
import os
import uuid

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import np_to_triton_dtype, triton_to_np_dtype

from tritonclient_test import (CASES, DTYPES, assert_close, assert_same, ints, raises, rand,
                               v1_result)

# Every input of a case in one region, every output in another, each tensor at a multiple of
# this (any multiple of the largest item size would do).
ALIGNMENT = 64
REGION_BYTES = 1 << 16


def unique(prefix):
    return f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:8]}"


@dataclasses.dataclass
class Region:
    name: str     # as registered
    key: str      # the POSIX object's
    handle: object  # tritonclient.utils.shared_memory's


@contextlib.contextmanager
def registered_region(triton, byte_size):
    """A system shared-memory Region made and registered as tritonclient users do; unregistered
    and destroyed afterwards."""
    region = Region(unique("region"), "/" + unique("tensorops_test"), None)
    region.handle = shm.create_shared_memory_region(region.name, region.key, byte_size)
    try:
        triton.register_system_shared_memory(region.name, region.key, byte_size)
        try:
            yield region
        finally:
            triton.unregister_system_shared_memory(region.name)
    finally:
        shm.destroy_shared_memory_region(region.handle)


def aligned(offset):
    return -(-offset // ALIGNMENT) * ALIGNMENT


def shm_inputs(region, arrays):
    """InferInputs of {name: ndarray}, each array copied into the Region at its own offset."""
    inputs, offset = [], 0
    for name, array in arrays.items():
        shm.set_shared_memory_region(region.handle, [np.ascontiguousarray(array)], offset=offset)
        infer_input = grpcclient.InferInput(name, list(array.shape),
                                            np_to_triton_dtype(array.dtype))
        infer_input.set_shared_memory(region.name, array.nbytes, offset=offset)
        inputs.append(infer_input)
        offset = aligned(offset + array.nbytes)
    return inputs


def read_output(result, region, name, offset=0):
    """The output `name` of an InferResult, read from the Region at `offset` (a copy, so that no
    view keeps the mapping exported when it is destroyed)."""
    output = result.get_output(name)
    assert output is not None, f"no output {name} in the response"
    return shm.get_contents_as_numpy(region.handle, DTYPES[output.datatype], list(output.shape),
                                     offset=offset).copy()


def assert_no_output_bytes(result):
    """An output written into a region comes back described, its bytes not in the response."""
    assert not any(result.get_response().raw_output_contents), \
        "an output in shared memory has bytes in the response too"


def test_simple_grpc_shm_client_example(triton, v1):
    """Triton's simple_grpc_shm_client, on the gather model: both inputs in one region, the
    output in another."""
    triton.unregister_system_shared_memory()
    triton.unregister_cuda_shared_memory()

    input_data = rand((4, 16), "FP32")
    index_data = ints((4, 8), 0, 16)
    input_byte_size = input_data.nbytes
    output_byte_size = 4 * 8 * 4

    output_name, output_key = unique("output_data"), "/" + unique("output_simple")
    shm_op_handle = shm.create_shared_memory_region(output_name, output_key, output_byte_size)
    triton.register_system_shared_memory(output_name, output_key, output_byte_size)

    input_name, input_key = unique("input_data"), "/" + unique("input_simple")
    shm_ip_handle = shm.create_shared_memory_region(input_name, input_key,
                                                    input_byte_size + index_data.nbytes)
    shm.set_shared_memory_region(shm_ip_handle, [input_data])
    shm.set_shared_memory_region(shm_ip_handle, [index_data], offset=input_byte_size)
    triton.register_system_shared_memory(input_name, input_key,
                                         input_byte_size + index_data.nbytes)

    inputs = [grpcclient.InferInput("input", [4, 16], "FP32"),
              grpcclient.InferInput("index", [4, 8], "INT64")]
    inputs[0].set_shared_memory(input_name, input_byte_size)
    inputs[1].set_shared_memory(input_name, index_data.nbytes, offset=input_byte_size)
    outputs = [grpcclient.InferRequestedOutput("output")]
    outputs[0].set_shared_memory(output_name, output_byte_size)

    results = triton.infer(model_name="gather", inputs=inputs, outputs=outputs,
                           parameters={"axis": 1})
    assert_no_output_bytes(results)
    output = results.get_output("output")
    assert (output.datatype, list(output.shape)) == ("FP32", [4, 8])
    output_data = shm.get_contents_as_numpy(shm_op_handle, triton_to_np_dtype(output.datatype),
                                            output.shape).copy()
    np.testing.assert_array_equal(output_data, np.take_along_axis(input_data, index_data, 1))
    assert_same(output_data, v1.gather(input_data, 1, index_data), "gather through shm")

    status = triton.get_system_shared_memory_status()
    regions = {region.name: region for region in status.regions.values()}
    assert (regions[input_name].key, regions[input_name].offset,
            regions[input_name].byte_size) == (input_key, 0, input_byte_size + index_data.nbytes)
    assert (regions[output_name].key, regions[output_name].byte_size) == (output_key,
                                                                         output_byte_size)
    triton.unregister_system_shared_memory()
    assert len(triton.get_system_shared_memory_status().regions) == 0
    assert len(shm.mapped_shared_memory_regions()) >= 2
    shm.destroy_shared_memory_region(shm_ip_handle)
    shm.destroy_shared_memory_region(shm_op_handle)
    assert input_key not in shm.mapped_shared_memory_regions()


@pytest.fixture(scope="module")
def regions(triton):
    """(input Region, output Region) for the whole module."""
    with registered_region(triton, REGION_BYTES) as inputs, \
            registered_region(triton, REGION_BYTES) as outputs:
        yield inputs, outputs


@pytest.mark.parametrize("case", CASES, ids=lambda case: case.id)
def test_every_case_with_inputs_and_output_in_shared_memory(triton, v1, regions, case):
    input_region, output_region = regions
    want = v1_result(v1, case)
    output = grpcclient.InferRequestedOutput("output")
    output.set_shared_memory(output_region.name, want.nbytes, offset=ALIGNMENT)
    result = triton.infer(case.model, shm_inputs(input_region, case.inputs),
                          outputs=[output], parameters=case.parameters, request_id=case.id)
    assert_no_output_bytes(result)
    got = read_output(result, output_region, "output", offset=ALIGNMENT)
    assert_same(got, want, case.id)
    if case.reference is not None:
        assert_close(got, case.reference(), f"{case.id} (reference)")


def test_inputs_in_shared_memory_output_in_the_response(triton, v1, regions):
    input_region, _ = regions
    x, index, src = rand((4, 3), "FP64"), ints((5, 3), 0, 4), rand((5, 3), "FP64")
    inputs = shm_inputs(input_region, {"input": x, "index": index, "src": src})
    result = triton.infer("scatter", inputs, parameters={"axis": 0, "reduce": "sum"})
    assert_same(result.as_numpy("output"), v1.scatter(x, 0, index, src, reduce="sum"),
                "scatter, inputs in shm")


def test_output_in_shared_memory_inputs_in_the_request(triton, v1, regions):
    _, output_region = regions
    x, index = rand((5, 4), "INT32"), ints((3,), 0, 5)
    inputs = [grpcclient.InferInput("input", [5, 4], "INT32"),
              grpcclient.InferInput("index", [3], "INT64")]
    inputs[0].set_data_from_numpy(x)
    inputs[1].set_data_from_numpy(index)
    output = grpcclient.InferRequestedOutput("output")
    output.set_shared_memory(output_region.name, 3 * 4 * 4)
    result = triton.infer("index_select", inputs, outputs=[output], parameters={"axis": 0})
    assert_no_output_bytes(result)
    assert_same(read_output(result, output_region, "output"), v1.index_select(x, 0, index),
                "index_select, output in shm")


def test_two_outputs_in_one_region(triton, v1, regions):
    """As the example's OUTPUT0 and OUTPUT1: a backward model's two gradients, one region."""
    input_region, output_region = regions
    x, index = rand((4, 3), "FP32"), ints((5, 3), 0, 4)
    src, g = rand((5, 3), "FP32"), rand((4, 3), "FP32")
    want = v1.backward("scatter_reduce", g, x, 0, index, src, "sum", include_self=False)
    outputs = [grpcclient.InferRequestedOutput("grad_input"),
               grpcclient.InferRequestedOutput("grad_src")]
    outputs[0].set_shared_memory(output_region.name, x.nbytes)
    outputs[1].set_shared_memory(output_region.name, src.nbytes, offset=aligned(x.nbytes))
    result = triton.infer("scatter_backward",
                          shm_inputs(input_region,
                                     {"input": x, "index": index, "src": src, "grad_output": g}),
                          outputs=outputs,
                          parameters={"axis": 0, "reduce": "sum", "include_self": False})
    assert_no_output_bytes(result)
    assert_same(read_output(result, output_region, "grad_input"), want["input"], "grad_input")
    assert_same(read_output(result, output_region, "grad_src", offset=aligned(x.nbytes)),
                want["src"], "grad_src")


def test_status_of_one_region_and_unregistering_it(triton):
    with registered_region(triton, 4096) as region:
        status = triton.get_system_shared_memory_status(region.name)
        (listed,) = status.regions.values()
        assert (listed.name, listed.key, listed.offset, listed.byte_size) == \
            (region.name, region.key, 0, 4096)
        status = triton.get_system_shared_memory_status(as_json=True)
        assert region.name in {listed["name"] for listed in status["regions"].values()}
    assert region.name not in {listed.name for listed in
                               triton.get_system_shared_memory_status().regions.values()}


def test_errors(triton, regions):
    input_region, _ = regions
    x, index = rand((3, 4), "FP32"), ints((3, 2), 0, 4)

    def gather_inputs(name, offset=0, byte_size=None):
        inputs = shm_inputs(input_region, {"input": x, "index": index})
        inputs[0].set_shared_memory(name, x.nbytes if byte_size is None else byte_size,
                                    offset=offset)
        return inputs

    with raises("INVALID_ARGUMENT"):  # past the region's end
        triton.infer("gather", gather_inputs(input_region.name, offset=REGION_BYTES - 16),
                     parameters={"axis": 1})
    with raises("INVALID_ARGUMENT"):  # byte_size is not the tensor's
        triton.infer("gather", gather_inputs(input_region.name, byte_size=x.nbytes - 4),
                     parameters={"axis": 1})
    missing = unique("missing")
    with raises(None, missing):
        triton.infer("gather", gather_inputs(missing), parameters={"axis": 1})
    with raises(None):  # registering an object that does not exist
        triton.register_system_shared_memory(missing, "/" + unique("no_such_object"), 64)
