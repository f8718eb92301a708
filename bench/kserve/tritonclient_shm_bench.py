"""Embedding lookup from Python through stock tritonclient, with and without shared memory.

The store benchmark's lookup (bench/store/store_bench.cc) as a Python program would write it
against Triton: a float32 table of --rows x --cols stored once on the server (tensorops'
Python client, PutTensor), then IndexSelect calls of --batch_rows random rows through
tritonclient.grpc's infer() on the model "index_select", the table named with the request
parameter "stored_inputs". Two ways, alternating, in one run:

  shared memory: the rows and the result in system regions made with
                 tritonclient.utils.shared_memory and registered with
                 register_system_shared_memory; the result read with get_contents_as_numpy.
  messages:      the rows in raw_input_contents, the result in raw_output_contents (as_numpy).

Prints the median p50/p99 latency and calls/s over --repetitions, their ratio, and the target
(shared memory p50 at most 0.5 ms). Needs a server on this host:

  kserve-venv/bin/python bench/kserve/tritonclient_shm_bench.py --server build/release/server/tensorops-server

with PYTHONPATH holding client/python and TENSOROPS_PYTHON_STUBS the generated stubs (the ctest
`tritonclient_shm_bench_quick` sets both).
"""
import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

import numpy as np
import tritonclient.grpc as triton
import tritonclient.utils.shared_memory as shm


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def drive(call, seconds, max_calls):
    """Calls `call` one call after another for `seconds` (after two warm-up calls); returns the
    latencies in ms."""
    call(0)
    call(1)
    latencies = []
    end = time.perf_counter() + seconds
    i = 0
    while time.perf_counter() < end and i < max_calls:
        start = time.perf_counter()
        call(i)
        latencies.append((time.perf_counter() - start) * 1e3)
        i += 1
    return latencies


def summary(latencies):
    ordered = sorted(latencies)
    p50 = ordered[len(ordered) // 2]
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return p50, p99, len(latencies) / (sum(latencies) / 1e3)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--server", required=True, help="path of tensorops-server")
    parser.add_argument("--rows", type=int, default=4 << 20)
    parser.add_argument("--cols", type=int, default=64)
    parser.add_argument("--batch_rows", type=int, default=4096)
    parser.add_argument("--seconds_per_cell", type=float, default=2.0)
    parser.add_argument("--max_calls_per_cell", type=int, default=20000)
    parser.add_argument("--repetitions", type=int, default=3)
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: a 64 Ki-row table, one repetition of 0.2 s per cell")
    args = parser.parse_args()
    if args.quick:
        args.rows, args.repetitions, args.seconds_per_cell = 64 << 10, 1, 0.2

    import tensorops  # the repository's Python client, for PutTensor

    port = free_port()
    table_bytes = args.rows * args.cols * 4
    server = subprocess.Popen(
        [args.server, f"--port={port}", f"--store_memory_bytes={table_bytes + (64 << 20)}",
         "--log_level=warn"])
    regions = []
    try:
        target = f"127.0.0.1:{port}"
        client = tensorops.Client(target)
        deadline = time.time() + 30
        while True:
            try:
                client.server_info(timeout=1)
                break
            except Exception:
                if time.time() > deadline or server.poll() is not None:
                    raise
                time.sleep(0.05)
        table = (np.arange(args.rows * args.cols, dtype=np.float32) % 1000).reshape(
            args.rows, args.cols)
        client.put("table", table)
        triton_client = triton.InferenceServerClient(target)
        rng = np.random.default_rng(7)
        batches = [rng.integers(0, args.rows, args.batch_rows, dtype=np.int64)
                   for _ in range(16)]
        rows_bytes = args.batch_rows * args.cols * 4
        index_bytes = args.batch_rows * 8

        # Shared memory: one region for the rows, one for the result, as Triton's examples do.
        prefix = f"/tensorops-bench-{os.getpid()}"
        in_handle = shm.create_shared_memory_region("bench_rows", prefix + "-rows", index_bytes)
        out_handle = shm.create_shared_memory_region("bench_out", prefix + "-out", rows_bytes)
        regions = [in_handle, out_handle]
        triton_client.unregister_system_shared_memory()
        triton_client.register_system_shared_memory("bench_rows", prefix + "-rows", index_bytes)
        triton_client.register_system_shared_memory("bench_out", prefix + "-out", rows_bytes)
        parameters = {"axis": 0, "stored_inputs": "input=table"}
        shm_input = triton.InferInput("index", [args.batch_rows], "INT64")
        shm_input.set_shared_memory("bench_rows", index_bytes)
        shm_output = triton.InferRequestedOutput("output")
        shm_output.set_shared_memory("bench_out", rows_bytes)

        def shm_lookup(i):
            shm.set_shared_memory_region(in_handle, [batches[i % len(batches)]])
            result = triton_client.infer("index_select", [shm_input], outputs=[shm_output],
                                         parameters=parameters)
            output = result.get_output("output")
            return shm.get_contents_as_numpy(out_handle, np.float32, output.shape)

        def message_lookup(i):
            index = triton.InferInput("index", [args.batch_rows], "INT64")
            index.set_data_from_numpy(batches[i % len(batches)])
            result = triton_client.infer("index_select", [index], parameters=parameters)
            return result.as_numpy("output")

        expected = table[batches[3]]
        if not (np.array_equal(shm_lookup(3), expected)
                and np.array_equal(message_lookup(3), expected)):
            sys.exit("tritonclient_shm_bench: a lookup returned other rows than the table's")

        shm_cells, message_cells, ratios = [], [], []
        for rep in range(args.repetitions):
            order = [(shm_lookup, shm_cells), (message_lookup, message_cells)]
            if rep % 2:
                order.reverse()
            results = {}
            for call, cells in order:
                latencies = drive(call, args.seconds_per_cell, args.max_calls_per_cell)
                cells.append(summary(latencies))
                results[id(cells)] = cells[-1]
            ratios.append(results[id(shm_cells)][2] / results[id(message_cells)][2])

        def median(cells, k):
            return statistics.median(c[k] for c in cells)

        date = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        print(f"\n## KServe from Python (stock tritonclient), embedding lookup, {date}\n")
        print(f"{args.batch_rows} random rows of a stored {args.rows} x {args.cols} float32 table "
              f"per call (model index_select, stored_inputs), concurrency 1. Median of "
              f"{args.repetitions} repetition(s), {args.seconds_per_cell} s per cell; ratio = "
              f"shared memory / messages calls/s\n")
        print("| way | p50 ms | p99 ms | calls/s |\n|---|---|---|---|")
        for name, cells in (("shared memory (tritonclient.utils.shared_memory)", shm_cells),
                            ("messages (raw contents, as_numpy)", message_cells)):
            print(f"| {name} | {median(cells, 0):.3f} | {median(cells, 1):.3f} | "
                  f"{median(cells, 2):.0f} |")
        p50 = median(shm_cells, 0)
        print(f"\nratio: {statistics.median(ratios):.2f}x; shared memory p50 {p50:.3f} ms, "
              f"target <= 0.5 ms: {'met' if p50 <= 0.5 else 'NOT met'}"
              f"{' (--quick: sizes too small to judge)' if args.quick else ''}")
        triton_client.unregister_system_shared_memory()
    finally:
        for handle in regions:
            shm.destroy_shared_memory_region(handle)
        server.terminate()
        server.wait(timeout=30)


if __name__ == "__main__":
    main()
