"""Starts one real tensorops-server per session and connects both of its protocols' clients.

The same port serves `tensorops.v1` and KServe v2 (`inference.GRPCInferenceService`): the tests
call an op through stock `tritonclient.grpc` and the same op through the repository's own Python
client (client/python, package `tensorops`), and compare. The server is started by
client/python/tests/conftest.py's ServerProcess: on 127.0.0.1, port 0, its port read from its log.

Environment:
  TENSOROPS_SERVER_PATH   the server binary (default: build/release/server/tensorops-server)
  TENSOROPS_PYTHON_STUBS  a directory holding the generated tensorops/v1 stubs (CMake's
                          build/release/python); unset: generated into a temporary directory
                          with client/python/generate_stubs.py.
"""
import importlib.util
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
PYTHON_CLIENT_TESTS = os.path.join(REPO_ROOT, "client", "python", "tests")

# The Python client's conftest, loaded under a name of its own (this file is `conftest` too): it
# puts the tensorops package and its stubs on sys.path and defines ServerProcess, the server
# child both suites start.
_spec = importlib.util.spec_from_file_location("python_client_conftest",
                                               os.path.join(PYTHON_CLIENT_TESTS, "conftest.py"))
_python_client_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_python_client_conftest)
ServerProcess = _python_client_conftest.ServerProcess
# The Python client's loop references (reference.py), an independent check of both protocols.
sys.path.insert(0, PYTHON_CLIENT_TESTS)

import tensorops  # noqa: E402
import tritonclient.grpc as grpcclient  # noqa: E402


# The same session fixture as the Python client's suite: one server; a crash or an unclean
# shutdown after the calls fails the session, with the server's log.
server = _python_client_conftest.server


@pytest.fixture(scope="session")
def triton(server):
    """Stock tritonclient's gRPC client, as a Triton user would make it."""
    client = grpcclient.InferenceServerClient(server.address)
    yield client
    client.close()


@pytest.fixture(scope="session")
def v1(server):
    """The tensorops.v1 client on the same port: what each v2 call is compared with."""
    with tensorops.Client(server.address, timeout=60) as client:
        yield client
