"""Calls through a server's Unix domain socket (--unix_socket): "unix:PATH" targets."""
import asyncio
import os
import stat

import numpy as np
import pytest

import tensorops
import tensorops.aio
from conftest import ServerProcess

X = np.array([[1, 2], [3, 4]], np.float32)
INDEX = np.array([[0, 0], [1, 0]])
EXPECTED = np.array([[1, 1], [4, 3]], np.float32)


@pytest.fixture
def socket_path(tmp_path):
    path = str(tmp_path / "tensorops.sock")
    if len(path) > 107:  # a sockaddr_un's limit; pytest's base directory can be deep
        pytest.skip(f"the temporary directory's path is too long for a socket: {path}")
    return path


def test_calls_through_the_unix_socket(socket_path):
    server = ServerProcess(f"--unix_socket={socket_path}")
    try:
        assert stat.S_ISSOCK(os.lstat(socket_path).st_mode)
        assert any(f"also on unix:{socket_path}" in line for line in server.log), server.log
        for n, target in enumerate((f"unix:{socket_path}", f"unix://{socket_path}",
                                    server.address)):
            with tensorops.Client(target, timeout=30) as client:
                np.testing.assert_array_equal(client.gather(X, 1, INDEX), EXPECTED)
                client.put(f"w{n}", X)
                np.testing.assert_array_equal(client.get(f"w{n}"), X)

        async def main():
            async with tensorops.aio.Client(f"unix:{socket_path}", timeout=30) as client:
                return await client.gather(X, 1, INDEX)

        np.testing.assert_array_equal(asyncio.run(main()), EXPECTED)
    finally:
        server.stop()
    assert server.process.returncode == 0, "".join(server.log)
    # The server removes its socket file when it stops.
    assert not os.path.lexists(socket_path)


def test_no_server_at_the_socket_is_unavailable(socket_path):
    target = f"unix:{socket_path}"
    with tensorops.Client(target, timeout=10) as client:
        with pytest.raises(tensorops.Unavailable) as info:
            client.server_info()
    assert info.value.message.startswith(
        f"no tensorops server answers at {target} (is it running?)"), info.value.message
