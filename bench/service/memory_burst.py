#!/usr/bin/python3
"""memory_burst: a server's resident memory before, during and after a burst of large calls.

Starts tensorops-server (or measures one already running, --pid), reads its VmRSS from
/proc/PID/status when fresh, then keeps --concurrency SliceScatter calls of --payload_mib MiB in
flight for --seconds (a float32 [rows, 256] input, one column written: the request and the
response each carry the payload), and reads VmRSS right after the burst and again after each of
--idle_seconds. Prints one line per sample and a summary line:

  /usr/bin/python3 bench/service/memory_burst.py --server=build/release/server/tensorops-server
  /usr/bin/python3 bench/service/memory_burst.py --server=... -- --max_memory_bytes=268435456

Arguments after `--` go to the server. Needs grpcio and the generated stubs
(PYTHONPATH=build/release/python).
"""

import argparse
import os
import socket
import subprocess
import sys
import threading
import time

import grpc

from tensorops.v1 import ops_pb2, tensor_pb2


def rss_bytes(pid):
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no VmRSS for pid {pid}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request_bytes(payload_bytes):
    rows = payload_bytes // (256 * 4)
    request = ops_pb2.SliceScatterRequest(
        input=tensor_pb2.Tensor(dtype=tensor_pb2.DATA_TYPE_FLOAT32, shape=[rows, 256],
                                data=bytes(rows * 256 * 4)),
        src=tensor_pb2.Tensor(dtype=tensor_pb2.DATA_TYPE_FLOAT32, shape=[rows, 1],
                              data=bytes(rows * 4)),
        axis=1, start=0, end=1)
    return request.SerializeToString()


def burst(target, body, concurrency, seconds):
    """Keeps `concurrency` calls in flight for `seconds`; returns (ok calls, failures by code)."""
    options = [("grpc.max_send_message_length", 1 << 30),
               ("grpc.max_receive_message_length", 1 << 30)]
    channel = grpc.insecure_channel(target, options=options)
    grpc.channel_ready_future(channel).result(timeout=10)
    # Bytes in, bytes out: no (de)serialization on the client's side.
    call = channel.unary_unary("/tensorops.v1.TensorOps/SliceScatter")
    stop = time.monotonic() + seconds
    lock = threading.Lock()
    counts = {"ok": 0}

    def loop():
        while time.monotonic() < stop:
            try:
                call(body, timeout=60)
                key = "ok"
            except grpc.RpcError as error:
                key = error.code().name
            with lock:
                counts[key] = counts.get(key, 0) + 1

    threads = [threading.Thread(target=loop) for _ in range(concurrency)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    channel.close()
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", help="tensorops-server binary to start")
    parser.add_argument("--pid", type=int, help="measure this running server instead")
    parser.add_argument("--target", help="its address, with --pid")
    parser.add_argument("--payload_mib", type=int, default=16)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--idle_seconds", type=int, default=10)
    parser.add_argument("server_args", nargs="*")
    args = parser.parse_args()

    process = None
    if args.pid:
        pid, target = args.pid, args.target
    else:
        port = free_port()
        process = subprocess.Popen([args.server, "--host=127.0.0.1", f"--port={port}",
                                    *args.server_args])
        pid, target = process.pid, f"127.0.0.1:{port}"
        time.sleep(1.0)
    try:
        fresh = rss_bytes(pid)
        print(f"fresh: {fresh / 2**20:.1f} MiB", flush=True)
        body = request_bytes(args.payload_mib << 20)
        peak = [fresh]
        done = threading.Event()

        def sample():
            while not done.wait(0.1):
                peak[0] = max(peak[0], rss_bytes(pid))

        sampler = threading.Thread(target=sample)
        sampler.start()
        start = time.monotonic()
        counts = burst(target, body, args.concurrency, args.seconds)
        elapsed = time.monotonic() - start
        done.set()
        sampler.join()
        after = rss_bytes(pid)
        print(f"burst: {args.concurrency} x {args.payload_mib} MiB for {elapsed:.1f} s: {counts}; "
              f"peak {peak[0] / 2**20:.1f} MiB, at the end {after / 2**20:.1f} MiB", flush=True)
        samples = {}
        idle_start = time.monotonic()
        for second in range(1, args.idle_seconds + 1):
            time.sleep(max(0.0, idle_start + second - time.monotonic()))
            samples[second] = rss_bytes(pid)
            print(f"+{second} s idle: {samples[second] / 2**20:.1f} MiB", flush=True)
        last = samples.get(args.idle_seconds, after)
        print(f"summary: fresh {fresh / 2**20:.1f} MiB, peak {peak[0] / 2**20:.1f} MiB, "
              f"+1 s {samples.get(1, after) / 2**20:.1f} MiB, +{args.idle_seconds} s "
              f"{last / 2**20:.1f} MiB ({last / fresh:.2f}x fresh)")
    finally:
        if process is not None:
            process.terminate()
            process.wait(timeout=30)


if __name__ == "__main__":
    sys.exit(main())
