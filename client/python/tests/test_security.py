"""Bearer tokens and TLS against servers started with those flags."""
import asyncio
import os
import subprocess

import grpc
import numpy as np
import pytest

import tensorops
from conftest import ServerProcess, start_token_server

X = np.array([[1, 2], [3, 4]], np.float32)
INDEX = np.array([[1, 0]])
# A token no error message may show any part of (the example: a file read with its newline).
SECRET = "OcXX-s3cret-t0k3n"


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certificates(tmp_path_factory):
    d = tmp_path_factory.mktemp("certs")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    openssl("req", "-x509", *ec, "-days", "2", "-subj", "/CN=test-ca", "-keyout", "ca.key",
            "-out", "ca.crt", cwd=d)
    openssl("req", *ec, "-subj", "/CN=localhost", "-keyout", "server.key", "-out", "server.csr",
            cwd=d)
    (d / "server.ext").write_text("subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "server.ext", "-out", "server.crt", cwd=d)
    openssl("req", *ec, "-subj", "/CN=test-client", "-keyout", "client.key", "-out", "client.csr",
            cwd=d)
    (d / "client.ext").write_text("extendedKeyUsage=clientAuth\n")
    openssl("x509", "-req", "-in", "client.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "2", "-extfile", "client.ext", "-out", "client.crt", cwd=d)
    return d


def test_token(tmp_path):
    server = start_token_server(tmp_path, "s3cret-token")
    try:
        with tensorops.Client(server.address, timeout=30) as anonymous:
            with pytest.raises(tensorops.Unauthenticated, match="missing authorization"):
                anonymous.gather(X, 1, INDEX)
        with tensorops.Client(server.address, timeout=30, token="wrong") as wrong:
            with pytest.raises(tensorops.Unauthenticated, match="wrong bearer token"):
                wrong.gather(X, 1, INDEX)
        with tensorops.Client(server.address, timeout=30, token="s3cret-token") as good:
            np.testing.assert_array_equal(good.gather(X, 1, INDEX), [[2, 1]])
            assert good.server_info().auth_token_required
        with tensorops.Client(server.address, timeout=30) as anonymous:
            requests = [(1, tensorops.requests.gather(X, 1, INDEX))]
            with pytest.raises(tensorops.Unauthenticated):  # the stream itself fails
                list(anonymous.run_stream(requests))
    finally:
        server.stop()


@pytest.fixture(scope="module")
def token_server(tmp_path_factory):
    """A server started with --auth_token_file, its file written as `echo TOKEN > file` does."""
    token_file = tmp_path_factory.mktemp("auth") / "token"
    token_file.write_text(SECRET + "\n")
    os.chmod(token_file, 0o600)
    server = ServerProcess(f"--auth_token_file={token_file}")
    yield server
    server.stop()


def assert_secret_not_in(error):
    """Fails if the exception's text, or its cause's, shows the token or a part of it."""
    for text in (str(error), repr(error), str(error.__cause__), str(error.__context__)):
        for part in ("OcXX", "s3cret", "t0k3n", "\\n"):
            assert part not in text, text


@pytest.mark.parametrize("token", [SECRET + "\n", f"  {SECRET}\r\n", f"\t{SECRET} ",
                                   (SECRET + "\n").encode()],
                         ids=["newline", "spaces-crlf", "tab-space", "bytes"])
def test_token_whitespace_is_stripped(token_server, token):
    with tensorops.Client(token_server.address, timeout=30, token=token) as client:
        np.testing.assert_array_equal(client.gather(X, 1, INDEX), [[2, 1]])


def test_token_file(token_server, tmp_path):
    path = tmp_path / "my-token"
    path.write_text(SECRET + "\n")  # echo OcXX... > my-token
    for token_file in (path, str(path)):
        with tensorops.Client(token_server.address, timeout=30, token_file=token_file) as client:
            np.testing.assert_array_equal(client.gather(X, 1, INDEX), [[2, 1]])
            assert client.server_info().auth_token_required


def test_aio_client_token_file(token_server, tmp_path):
    path = tmp_path / "my-token"
    path.write_bytes(b"\n" + SECRET.encode() + b"\n\n")

    async def main():
        async with tensorops.aio.Client(token_server.address, timeout=30,
                                        token_file=path) as client:
            return await client.gather(X, 1, INDEX)

    np.testing.assert_array_equal(asyncio.run(main()), [[2, 1]])


@pytest.mark.parametrize("token", [f"Bearer {SECRET}", f"{SECRET}\n{SECRET}", f"{SECRET}\x00",
                                   f"{SECRET}\u00e9", f"{SECRET}\x7f", "\x80" + SECRET],
                         ids=["space", "inner-newline", "nul", "e-acute", "del", "0x80"])
def test_bad_token_is_refused_without_showing_it(token):
    with pytest.raises(ValueError) as info:
        tensorops.Client("127.0.0.1:1", token=token)
    message = str(info.value)
    assert message.startswith("token is not a valid bearer token")
    assert "visible ASCII characters (0x21 to 0x7E)" in message
    assert "has a character outside that range" in message
    assert_secret_not_in(info.value)


@pytest.mark.parametrize("token", ["", " ", "\n", b"", b"\r\n"],
                         ids=["empty", "space", "newline", "empty-bytes", "crlf-bytes"])
def test_empty_token_is_refused(token):
    with pytest.raises(ValueError, match="token is not a valid bearer token.*is empty"):
        tensorops.Client("127.0.0.1:1", token=token)


def test_bad_token_file_is_refused_without_showing_it(tmp_path):
    path = tmp_path / "token"
    for contents in (f"{SECRET} {SECRET}\n".encode(), SECRET.encode() + b"\xff\xfe\n",
                     b"\xe9" + SECRET.encode(), f"# a comment\n{SECRET}\n".encode()):
        path.write_bytes(contents)
        with pytest.raises(ValueError) as info:
            tensorops.Client("127.0.0.1:1", token_file=path)
        assert str(path) in str(info.value)
        assert "has a character outside that range" in str(info.value)
        assert_secret_not_in(info.value)
    path.write_bytes(b" \n\n")
    with pytest.raises(ValueError, match="is empty"):
        tensorops.Client("127.0.0.1:1", token_file=path)


def test_unreadable_token_file_names_the_path(tmp_path):
    missing = tmp_path / "no-such-token"
    with pytest.raises(FileNotFoundError) as info:
        tensorops.Client("127.0.0.1:1", token_file=missing)
    assert f"token_file: cannot read {str(missing)!r}" in str(info.value)
    with pytest.raises(IsADirectoryError, match="token_file: cannot read"):
        tensorops.Client("127.0.0.1:1", token_file=tmp_path)


def test_token_and_token_file_together_are_refused(tmp_path):
    path = tmp_path / "token"
    path.write_text(SECRET)
    with pytest.raises(ValueError, match="give token= or token_file=, not both") as info:
        tensorops.Client("127.0.0.1:1", token=SECRET, token_file=path)
    assert_secret_not_in(info.value)


def test_wrong_token_does_not_show_it(token_server, tmp_path):
    path = tmp_path / "wrong"
    path.write_text("OcXX-wrong-s3cret-t0k3n\n")
    for options in ({"token": "OcXX-wrong-s3cret-t0k3n\n"}, {"token_file": path}):
        with tensorops.Client(token_server.address, timeout=30, **options) as client:
            with pytest.raises(tensorops.Unauthenticated, match="wrong bearer token") as info:
                client.gather(X, 1, INDEX)
            assert_secret_not_in(info.value)
            with pytest.raises(tensorops.Unauthenticated) as info:
                list(client.run_stream([tensorops.requests.gather(X, 1, INDEX)]))
            assert_secret_not_in(info.value)


def test_tls(certificates):
    d = certificates
    server = ServerProcess(f"--tls_cert={d / 'server.crt'}", f"--tls_key={d / 'server.key'}")
    try:
        # The certificate names localhost; the target is the IP address, so name it.
        tls = tensorops.TLS(root_ca=d / "ca.crt", server_name="localhost")
        with tensorops.Client(server.address, timeout=30, tls=tls) as secure:
            np.testing.assert_array_equal(secure.gather(X, 1, INDEX), [[2, 1]])
            assert secure.server_info().tls
        with tensorops.Client(server.address, timeout=5) as plaintext:
            with pytest.raises(tensorops.Unavailable) as info:
                plaintext.gather(X, 1, INDEX)
        assert info.value.code == grpc.StatusCode.UNAVAILABLE
        assert info.value.message.startswith(
            f"no tensorops server answers at {server.address} (is it running?)")
        assert "if the server uses TLS (--tls_cert), pass tls=tensorops.TLS" in info.value.message
    finally:
        server.stop()


def test_tls_over_the_unix_socket(certificates, tmp_path):
    # --unix_socket serves the TCP port's credentials; gRPC checks the certificate against
    # "localhost" for unix: targets, which the test certificate names, so no server_name is needed.
    d = certificates
    path = str(tmp_path / "tls.sock")
    if len(path) > 107:
        pytest.skip(f"the temporary directory's path is too long for a socket: {path}")
    server = ServerProcess(f"--tls_cert={d / 'server.crt'}", f"--tls_key={d / 'server.key'}",
                           f"--unix_socket={path}")
    try:
        with tensorops.Client(f"unix:{path}", timeout=30,
                              tls=tensorops.TLS(root_ca=d / "ca.crt")) as secure:
            np.testing.assert_array_equal(secure.gather(X, 1, INDEX), [[2, 1]])
            assert secure.server_info().tls
        with tensorops.Client(f"unix:{path}", timeout=5) as plaintext:
            with pytest.raises(tensorops.Unavailable):
                plaintext.gather(X, 1, INDEX)
    finally:
        server.stop()


def test_tls_client_against_a_plaintext_server(server, certificates):
    tls = tensorops.TLS(root_ca=certificates / "ca.crt", server_name="localhost")
    with tensorops.Client(server.address, timeout=5, tls=tls) as secure:
        with pytest.raises(tensorops.Unavailable) as info:
            secure.server_info()
    assert info.value.message.startswith(
        f"no tensorops server answers at {server.address} (is it running?)")
    assert "may not use TLS" in info.value.message


def test_mutual_tls(certificates):
    d = certificates
    server = ServerProcess(f"--tls_cert={d / 'server.crt'}", f"--tls_key={d / 'server.key'}",
                           f"--tls_client_ca={d / 'ca.crt'}")
    try:
        # PEM bytes work as well as paths.
        tls = tensorops.TLS(root_ca=(d / "ca.crt").read_bytes(), cert=d / "client.crt",
                            key=str(d / "client.key"), server_name="localhost")
        with tensorops.Client(server.address, timeout=30, tls=tls) as secure:
            np.testing.assert_array_equal(secure.gather(X, 1, INDEX), [[2, 1]])
        no_certificate = tensorops.TLS(root_ca=d / "ca.crt", server_name="localhost")
        with tensorops.Client(server.address, timeout=5, tls=no_certificate) as anonymous:
            with pytest.raises(tensorops.Unavailable) as info:
                anonymous.gather(X, 1, INDEX)
        assert info.value.message.startswith(
            f"no tensorops server answers at {server.address} (is it running?)")
        assert "requires client certificates (--tls_client_ca)" in info.value.message
        assert "TLS(cert=..., key=...)" in info.value.message
    finally:
        server.stop()
