#!/usr/bin/env python3
"""Generates the tensorops.v1 Python stubs (messages and gRPC stubs) from proto/.

    generate_stubs.py --out DIR [--proto-dir PROTO_DIR] [--generator auto|grpc_tools|protoc]

writes DIR/tensorops/v1/{tensor,ops,generic,server_info,store,shared_memory,service}_pb2.py and
*_pb2_grpc.py (one pair per proto/tensorops/v1/*.proto), and an empty
DIR/tensorops/v1/__init__.py. DIR itself gets no tensorops/__init__.py: the package's
code lives in client/python/tensorops, which adds DIR/tensorops to its path when DIR is on
sys.path (see tensorops/__init__.py).

Two generators, which must match the protobuf runtime the stubs will be imported with:
  grpc_tools  the grpcio-tools package (PyPI); used by `pip install`'s build step.
  protoc      protoc and grpc_python_plugin from PATH (Debian: protobuf-compiler,
              protobuf-compiler-grpc); used by the CMake build and the tests.
`auto` takes grpc_tools when it is importable and recent enough (grpcio-tools >= 1.46, which
bundles protoc >= 3.20; Debian 12's python3-grpc-tools is 1.14 with protoc 3.5, whose output the
protobuf 4.21 runtime rejects), protoc otherwise.
"""
import argparse
import glob
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_PROTO_DIR = os.path.join(HERE, os.pardir, os.pardir, "proto")


def _grpc_tools_usable():
    try:
        import importlib.metadata

        import grpc_tools.protoc  # noqa: F401

        major, minor = (int(x) for x in importlib.metadata.version("grpcio-tools").split(".")[:2])
        return (major, minor) >= (1, 46)
    except Exception:  # not installed, or no metadata
        return False


def generate(out_dir, proto_dir=DEFAULT_PROTO_DIR, generator="auto", protoc=None, plugin=None):
    """Writes the stubs under out_dir/tensorops/v1; returns the generator used.

    protoc and plugin (protoc generator only) default to protoc and grpc_python_plugin on PATH.
    """
    proto_dir = os.path.abspath(proto_dir)
    protos = sorted(glob.glob(os.path.join(proto_dir, "tensorops", "v1", "*.proto")))
    if not protos:
        raise FileNotFoundError(f"no tensorops/v1/*.proto under {proto_dir}")
    package_dir = os.path.join(out_dir, "tensorops", "v1")
    os.makedirs(package_dir, exist_ok=True)
    rel = [os.path.relpath(p, proto_dir) for p in protos]
    if generator == "auto":
        generator = "grpc_tools" if _grpc_tools_usable() else "protoc"
    if generator == "grpc_tools":
        from grpc_tools import protoc

        code = protoc.main(["grpc_tools.protoc", f"-I{proto_dir}", f"--python_out={out_dir}",
                            f"--grpc_python_out={out_dir}", *rel])
        if code != 0:
            raise RuntimeError(f"grpc_tools.protoc failed with exit code {code}")
    elif generator == "protoc":
        protoc_path = protoc or shutil.which("protoc")
        plugin = plugin or shutil.which("grpc_python_plugin")
        if not protoc_path or not plugin:
            raise FileNotFoundError(
                "protoc and grpc_python_plugin must be on PATH (Debian: protobuf-compiler "
                "protobuf-compiler-grpc), or install grpcio-tools >= 1.46")
        subprocess.run([protoc_path, f"-I{proto_dir}", f"--python_out={out_dir}",
                        f"--grpc_python_out={out_dir}",
                        f"--plugin=protoc-gen-grpc_python={plugin}", *rel],
                       check=True)
    else:
        raise ValueError(f"unknown generator {generator!r}")
    open(os.path.join(package_dir, "__init__.py"), "a").close()
    return generator


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--proto-dir", default=DEFAULT_PROTO_DIR)
    parser.add_argument("--generator", default="auto", choices=["auto", "grpc_tools", "protoc"])
    parser.add_argument("--protoc", help="protoc to run (default: protoc on PATH)")
    parser.add_argument("--plugin", help="grpc_python_plugin (default: the one on PATH)")
    args = parser.parse_args()
    generate(args.out, args.proto_dir, args.generator, args.protoc, args.plugin)


if __name__ == "__main__":
    sys.exit(main())
