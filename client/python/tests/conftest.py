"""Starts one real tensorops-server per session on a free loopback port, and imports tensorops.

Environment:
  TENSOROPS_SERVER_PATH    the server binary (default: build/release/server/tensorops-server)
  TENSOROPS_PYTHON_STUBS   a directory holding the generated tensorops/v1 stubs (CMake's
                           build/release/python); unset: generated into a temporary directory
                           with generate_stubs.py.
  TENSOROPS_TEST_INSTALLED set (to anything): test the tensorops that is installed (pip install
                           client/python) instead of this source tree.
"""
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(HERE)
REPO_ROOT = os.path.dirname(os.path.dirname(PACKAGE_ROOT))

if not os.environ.get("TENSOROPS_TEST_INSTALLED"):
    _stubs = os.environ.get("TENSOROPS_PYTHON_STUBS")
    if not _stubs:
        sys.path.insert(0, PACKAGE_ROOT)
        import generate_stubs

        _stubs = tempfile.mkdtemp(prefix="tensorops-stubs-")
        generate_stubs.generate(_stubs)
    sys.path.insert(0, _stubs)
    sys.path.insert(0, PACKAGE_ROOT)  # before the stubs: tensorops/__init__.py comes from here

import tensorops  # noqa: E402

SERVER_PATH = os.environ.get("TENSOROPS_SERVER_PATH",
                             os.path.join(REPO_ROOT, "build", "release", "server",
                                          "tensorops-server"))
_LISTENING = re.compile(r"listening on \S*:(\d+)")


class ServerProcess:
    """A tensorops-server child on 127.0.0.1 and a free port; `address` is "127.0.0.1:PORT"."""

    def __init__(self, *flags, start_timeout=30):
        if not os.access(SERVER_PATH, os.X_OK):
            raise FileNotFoundError(f"no server binary at {SERVER_PATH}; build tensorops-server "
                                    "or set TENSOROPS_SERVER_PATH")
        self.process = subprocess.Popen(
            [SERVER_PATH, "--host=127.0.0.1", "--port=0", "--threads=2", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        self.log = []
        self.port = None
        started = threading.Event()

        def read():  # Drains the log until the server exits, so that it never blocks on a pipe.
            for line in self.process.stdout:
                self.log.append(line)
                match = _LISTENING.search(line)
                if match and self.port is None:
                    self.port = int(match.group(1))
                    started.set()
            started.set()

        threading.Thread(target=read, daemon=True).start()
        if not started.wait(start_timeout) or self.port is None:
            self.stop()
            raise RuntimeError("tensorops-server did not report 'listening on':\n" +
                               "".join(self.log))
        self.address = f"127.0.0.1:{self.port}"

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_token_server(directory, *tokens):
    """A ServerProcess started with --auth_token_file: a file in `directory` (a pathlib.Path)
    holding `tokens`, one a line, each a tenant of its own."""
    token_file = directory / "tokens"
    token_file.write_text("".join(f"{token}\n" for token in tokens))
    os.chmod(token_file, 0o600)
    return ServerProcess(f"--auth_token_file={token_file}")


@pytest.fixture(scope="session")
def server():
    process = ServerProcess()
    yield process
    process.stop()
    assert process.process.returncode == 0, "".join(process.log)


@pytest.fixture(scope="session")
def client(server):
    with tensorops.Client(server.address, timeout=60) as c:
        yield c
