"""Bearer tokens and TLS against servers started with those flags."""
import os
import subprocess

import numpy as np
import pytest

import tensorops
from conftest import ServerProcess

X = np.array([[1, 2], [3, 4]], np.float32)
INDEX = np.array([[1, 0]])


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
    token_file = tmp_path / "token"
    token_file.write_text("s3cret-token")
    os.chmod(token_file, 0o600)
    server = ServerProcess(f"--auth_token_file={token_file}")
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
            with pytest.raises(tensorops.Unavailable):
                plaintext.gather(X, 1, INDEX)
    finally:
        server.stop()


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
            with pytest.raises(tensorops.Unavailable):
                anonymous.gather(X, 1, INDEX)
    finally:
        server.stop()
