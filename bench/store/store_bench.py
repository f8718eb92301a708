#!/usr/bin/python3
"""store_bench.py: the tensor store's two workloads (issue 24) from the Python client.

Each workload runs three ways at concurrency 1, alternating between repetitions:
  stored  the table (default 4 Mi x 64 float32, 1 GiB) lives on the server, put once; the call
          names it (tensorops.Ref);
  inline  the same call with a 1 Mi-row table (256 MiB: 1 GiB does not fit one message) sent in
          every request (and, for the push, returned);
  torch   the peer a user would otherwise write: PyTorch doing the same op on the 1 GiB table in
          this process (torch.index_select; Tensor.index_add_).
Workloads: embedding lookup (index_select of 4096 random rows) and gradient push (index_add of
4096 x 64 updates, in place on the server with in_place=True). The put of the table reports GB/s.
The tables give medians over repetitions; ratios are medians of per-repetition ratios.

    /usr/bin/python3 bench/store/store_bench.py            # starts build/release's server
    /usr/bin/python3 bench/store/store_bench.py --quick    # smoke run, a few seconds
    /usr/bin/python3 bench/store/store_bench.py --target=127.0.0.1:50051

Debian's python3-torch lives in /usr/bin/python3's dist-packages; without torch the torch column
says so. The generated stubs come from $TENSOROPS_PYTHON_STUBS or build/release/python.
"""
import argparse
import datetime
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO_ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.environ.get("TENSOROPS_PYTHON_STUBS",
                                  os.path.join(REPO_ROOT, "build", "release", "python")))
sys.path.insert(0, os.path.join(REPO_ROOT, "client", "python"))
import tensorops  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

TABLE = "bench/store/py-table"


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="64 Ki-row table, 16 Ki-row inline table, one 0.2 s repetition")
    parser.add_argument("--target", default="", help="host:port of a running server; empty: "
                        "start build/release/server/tensorops-server")
    parser.add_argument("--server", default=os.path.join(REPO_ROOT, "build", "release", "server",
                                                         "tensorops-server"))
    parser.add_argument("--store_memory_bytes", type=int, default=6_000_000_000)
    parser.add_argument("--rows", type=int, default=4 << 20)
    parser.add_argument("--inline_rows", type=int, default=1 << 20)
    parser.add_argument("--cols", type=int, default=64)
    parser.add_argument("--batch_rows", type=int, default=4096)
    parser.add_argument("--chunk_bytes", type=int, default=4 << 20)
    parser.add_argument("--seconds_per_cell", type=float, default=2.0)
    parser.add_argument("--max_calls_per_cell", type=int, default=20000)
    parser.add_argument("--repetitions", type=int, default=3)
    args = parser.parse_args()
    if args.quick:
        args.rows, args.inline_rows = 64 << 10, 16 << 10
        args.seconds_per_cell, args.repetitions = 0.2, 1
    return args


class ServerProcess:
    """A tensorops-server child on 127.0.0.1 and a free port."""

    def __init__(self, path, *flags):
        self.process = subprocess.Popen(
            [path, "--host=127.0.0.1", "--port=0", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace")
        self.log, self.port = [], None
        started = threading.Event()

        def read():  # Drains the log so that the server never blocks on a full pipe.
            for line in self.process.stdout:
                self.log.append(line)
                match = re.search(r"listening on \S*:(\d+)", line)
                if match and self.port is None:
                    self.port = int(match.group(1))
                    started.set()
            started.set()

        threading.Thread(target=read, daemon=True).start()
        if not started.wait(30) or self.port is None:
            self.stop()
            raise RuntimeError("tensorops-server did not start:\n" + "".join(self.log))
        self.address = f"127.0.0.1:{self.port}"

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def make_table(rows, cols):
    """Element (r, c) is (7r + c) % 4096, as store_bench.cc's table; one array, no temporaries
    of the table's size."""
    table = np.empty((rows, cols), np.float32)
    np.add(((np.arange(rows, dtype=np.int64) * 7) % 4096).astype(np.float32)[:, None],
           np.arange(cols, dtype=np.float32)[None, :], out=table)
    np.fmod(table, 4096, out=table)
    return table


def drive(call, seconds, max_calls):
    """Calls call(i) one after another for `seconds` (or max_calls); p50/p99 ms and calls/s."""
    latencies = []
    start = now = time.perf_counter()
    while now - start < seconds and len(latencies) < max_calls:
        sent = now
        call(len(latencies))
        now = time.perf_counter()
        latencies.append((now - sent) * 1e3)
    latencies.sort()
    rank = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]  # noqa: E731
    return {"p50": rank(0.5), "p99": rank(0.99), "cps": len(latencies) / (now - start),
            "calls": len(latencies)}


def measure(call, args):
    drive(call, min(args.seconds_per_cell, 0.3), 2)  # Warm-up.
    return drive(call, args.seconds_per_cell, args.max_calls_per_cell)


def compare(forms, args):
    """forms: {name: call}. Runs each form once per repetition, rotating which goes first."""
    names = list(forms)
    cells = {name: [] for name in names}
    for rep in range(args.repetitions):
        for name in names[rep % len(names):] + names[:rep % len(names)]:
            cells[name].append(measure(forms[name], args))
    return cells


def median_of(cells, key):
    return statistics.median(cell[key] for cell in cells)


def main():
    args = parse_args()
    server = None
    if not args.target:
        server = ServerProcess(args.server, f"--store_memory_bytes={args.store_memory_bytes}")
        args.target = server.address
    try:
        run(args)
    finally:
        if server is not None:
            server.stop()


def run(args):
    rows, cols, batch = args.rows, args.cols, args.batch_rows
    rng = np.random.default_rng(1)
    client = tensorops.Client(args.target, timeout=300)
    try:
        client.delete(TABLE)
    except tensorops.NotFound:
        pass
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")

    table = make_table(rows, cols)
    start = time.perf_counter()
    ref = client.put(TABLE, table, chunk_bytes=args.chunk_bytes)
    put_seconds = time.perf_counter() - start
    ref = ref.latest()  # Whatever version is current when each call runs.
    print(f"\n## Store: Python client, {date}\n")
    print(f"put of the {rows} x {cols} float32 table ({table.nbytes >> 20} MiB) in "
          f"{args.chunk_bytes >> 20} MiB chunks: {put_seconds:.2f} s, "
          f"{table.nbytes / put_seconds / 1e9:.2f} GB/s (one run)\n")
    sys.stdout.flush()

    stored_index = [rng.integers(0, rows, batch, dtype=np.int64) for _ in range(64)]
    inline_index = [rng.integers(0, args.inline_rows, batch, dtype=np.int64) for _ in range(64)]
    updates = np.full((batch, cols), 0.5, np.float32)
    inline_table = make_table(args.inline_rows, cols)

    selected = client.index_select(ref, 0, stored_index[0])
    if not np.array_equal(selected, table[stored_index[0]]):
        raise SystemExit("store_bench.py: index_select of the stored table differs from the table")

    lookups = {
        "stored": lambda i: client.index_select(ref, 0, stored_index[i % 64]),
        "inline": lambda i: client.index_select(inline_table, 0, inline_index[i % 64]),
    }
    pushes = {
        "stored": lambda i: client.index_add(ref, 0, stored_index[i % 64], updates,
                                             in_place=True),
        "inline": lambda i: client.index_add(inline_table, 0, inline_index[i % 64], updates),
    }
    if torch is not None:
        torch.set_num_threads(os.cpu_count())  # Every core, as the server has.
        table_t = torch.from_numpy(table)  # The same 1 GiB, no copy.
        index_t = [torch.from_numpy(index) for index in stored_index]
        updates_t = torch.from_numpy(updates)
        lookups["torch"] = lambda i: torch.index_select(table_t, 0, index_t[i % 64])
        pushes["torch"] = lambda i: table_t.index_add_(0, index_t[i % 64], updates_t)

    results = [("embedding lookup (index_select)", compare(lookups, args)),
               ("gradient push (index_add)", compare(pushes, args))]

    print(f"### Stored vs inline vs PyTorch in-process, concurrency 1\n")
    print(f"stored: the {rows} x {cols} float32 table ({table.nbytes >> 20} MiB) by name; inline: "
          f"a {args.inline_rows} x {cols} table ({inline_table.nbytes >> 20} MiB) in every "
          f"request; torch: PyTorch {torch.__version__ if torch else '(not installed)'} on the "
          f"{table.nbytes >> 20} MiB table in this process, {torch.get_num_threads() if torch else 0}"
          f" threads. {batch} random rows per call. Median of {args.repetitions} repetition(s), "
          f"{args.seconds_per_cell:.1f} s per cell\n")
    print("| workload | form | p50 ms | p99 ms | calls/s | stored / this (calls/s) |")
    print("|---|---|---|---|---|---|")
    verdicts = []
    for workload, cells in results:
        stored_cps = [cell["cps"] for cell in cells["stored"]]
        for form, form_cells in cells.items():
            ratio = statistics.median(s / c["cps"] for s, c in zip(stored_cps, form_cells))
            print(f"| {workload} | {form} | {median_of(form_cells, 'p50'):.3f} | "
                  f"{median_of(form_cells, 'p99'):.3f} | {median_of(form_cells, 'cps'):.1f} | "
                  f"{'' if form == 'stored' else f'{ratio:.2f}x'} |")
            if form == "inline":
                verdicts.append(f"- {workload}: stored {ratio:.0f}x inline calls/s, target "
                                f">= 100x: {'met' if ratio >= 100 else 'NOT met'}")
    print(f"\n### Python targets{' (--quick: sizes too small to judge)' if args.quick else ''}\n")
    print("\n".join(verdicts))
    client.delete(TABLE)
    client.close()


if __name__ == "__main__":
    main()
