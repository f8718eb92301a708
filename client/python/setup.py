"""Builds the tensorops package, generating tensorops.v1 from the repository's proto/ first.

The stubs are never committed: build_py writes them into the build tree with
generate_stubs.generate (grpcio-tools when usable, else protoc + grpc_python_plugin). The protos
come from TENSOROPS_PROTO_DIR, an sdist's proto/ (copied in by sdist), or ../../proto (the
repository this directory sits in).
"""
import os
import sys

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generate_stubs  # noqa: E402



def proto_dir():
    """TENSOROPS_PROTO_DIR, else the sdist's own copy (proto/), else the repository's proto/."""
    if os.environ.get("TENSOROPS_PROTO_DIR"):
        return os.environ["TENSOROPS_PROTO_DIR"]
    bundled = os.path.join(HERE, "proto")
    if os.path.isdir(bundled):
        return bundled
    return os.path.join(HERE, os.pardir, os.pardir, "proto")


def protobuf_requirement():
    """protobuf >= the version the stubs are generated for (the build's own protobuf)."""
    try:
        import google.protobuf

        major, minor = google.protobuf.__version__.split(".")[:2]
        return f"protobuf>={major}.{minor}"
    except ImportError:  # protoc from PATH only: its gencode needs runtime >= 3.20
        return "protobuf>=3.20"


def grpcio_requirement():
    """grpcio >= the grpcio-tools that generates the stubs, when it does: the *_pb2_grpc.py of
    grpcio-tools 1.63 and later refuse to import with an older grpcio (Debian 12's is 1.51)."""
    if generate_stubs._grpc_tools_usable():
        import importlib.metadata

        return f"grpcio>={importlib.metadata.version('grpcio-tools')}"
    return "grpcio>=1.46"


class BuildPyWithStubs(build_py):
    def run(self):
        super().run()
        used = generate_stubs.generate(self.build_lib, proto_dir())
        print(f"tensorops: generated tensorops.v1 with {used} into {self.build_lib}")

    def find_package_modules(self, package, package_dir):
        # tensorops.v1 has no sources in this directory: build_py must not look for them.
        if package == "tensorops.v1":
            return []
        return super().find_package_modules(package, package_dir)


class SdistWithProtos(sdist):
    """An sdist builds away from the repository: it carries the .proto files in proto/."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        source = os.path.join(proto_dir(), "tensorops", "v1")
        target = os.path.join(base_dir, "proto", "tensorops", "v1")
        os.makedirs(target, exist_ok=True)
        for name in sorted(os.listdir(source)):
            if name.endswith(".proto"):
                self.copy_file(os.path.join(source, name), os.path.join(target, name))


setup(cmdclass={"build_py": BuildPyWithStubs, "sdist": SdistWithProtos},
      install_requires=[grpcio_requirement(), "numpy>=1.21", protobuf_requirement()])
