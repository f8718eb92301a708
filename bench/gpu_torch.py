#!/usr/bin/env python3
"""PyTorch CUDA's times for the cases of gpu_bench, as JSON {"case": milliseconds}.

    python3 bench/gpu_torch.py --log2_elements=26 > torch.json
    gpu_bench --torch_times=torch.json

Same shapes, dtypes and index distributions as gpu_bench.cc (not the same random values), data on
the GPU, CUDA-event timing, median of --iterations after a warm-up. Prints {} and a note on stderr
when PyTorch or a GPU is missing.
"""
import argparse
import json
import sys


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--log2_elements", type=int, default=26)
    parser.add_argument("--iterations", type=int, default=10)
    args = parser.parse_args()
    try:
        import torch
    except ImportError:
        print("gpu_torch: PyTorch is not installed", file=sys.stderr)
        print("{}")
        return
    if not torch.cuda.is_available():
        print("gpu_torch: PyTorch sees no GPU", file=sys.stderr)
        print("{}")
        return

    device = "cuda"
    elements = 1 << args.log2_elements
    cols = 256
    rows = elements // cols

    def values(dtype, shape):
        return (torch.randint(0, 1000, shape, device=device).to(torch.float32) / 100 - 5).to(dtype)

    def indices(shape, bound, distinct=0):
        if distinct:
            return torch.randint(0, distinct, shape, device=device) * (bound // distinct)
        return torch.randint(0, bound, shape, device=device)

    def timed(fn):
        fn()
        torch.cuda.synchronize()
        times = []
        for _ in range(args.iterations):
            start = torch.cuda.Event(enable_timing=True)
            stop = torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
        times.sort()
        return times[len(times) // 2]

    results = {}
    for dtype, name in ((torch.float32, "f32"), (torch.bfloat16, "bf16")):
        # gpu_bench's sized cases: index_select and gather at 2^20 and 2^log2_elements, with int64
        # and int32 indices.
        for log2 in sorted({20, args.log2_elements}):
            sized_rows = (1 << log2) // cols
            x = values(dtype, (sized_rows, cols))
            for index_name, index_dtype in (("i64", torch.int64), ("i32", torch.int32)):
                suffix = f"2^{log2} {index_name} {name}"
                k = indices((sized_rows,), sized_rows).to(index_dtype)
                results[f"index_select axis0 {suffix}"] = timed(
                    lambda: torch.index_select(x, 0, k))
                i = indices((sized_rows, cols), sized_rows).to(index_dtype)
                try:
                    results[f"gather axis0 random {suffix}"] = timed(lambda: torch.gather(x, 0, i))
                except RuntimeError as error:
                    # PyTorch's gather has taken int64 indices only; no time is better than the
                    # time of another call.
                    print(f"gpu_torch: gather with {index_name} indices: {error}", file=sys.stderr)
        x = values(dtype, (rows, cols))
        i = indices((rows, cols), rows)
        results[f"gather axis0 random {name}"] = timed(lambda: torch.gather(x, 0, i))
        j = indices((rows, cols), cols)
        results[f"gather last random {name}"] = timed(lambda: torch.gather(x, 1, j))
        k = indices((rows,), rows)
        results[f"index_select axis0 {name}"] = timed(lambda: torch.index_select(x, 0, k))
        src = values(dtype, (rows, cols))
        for label, reduce, distinct in (("sum random", "sum", 0), ("sum dup1%", "sum", rows // 100),
                                        ("amax dup1%", "amax", rows // 100),
                                        ("mean random", "mean", 0)):
            idx = indices((rows, cols), rows, distinct)
            results[f"scatter axis0 {label} {name}"] = timed(
                lambda: x.scatter_reduce(0, idx, src, reduce, include_self=True))
        # PyTorch's deterministic path for the same duplicate-heavy SUM, where it has one.
        idx = indices((rows, cols), rows, rows // 100)
        torch.use_deterministic_algorithms(True)
        try:
            results[f"scatter axis0 sum dup1% deterministic {name}"] = timed(
                lambda: x.scatter_add(0, idx, src))
        except RuntimeError as error:
            print(f"gpu_torch: no deterministic scatter_add: {error}", file=sys.stderr)
        finally:
            torch.use_deterministic_algorithms(False)
        idx = indices((rows, cols), rows)
        results[f"scatter axis0 assign random {name}"] = timed(lambda: x.scatter(0, idx, src))
        flat = values(dtype, (elements,))
        mask = torch.rand(elements, device=device) < 0.5
        flat_src = values(dtype, (elements,))
        results[f"masked_scatter half {name}"] = timed(lambda: flat.masked_scatter(mask, flat_src))
        row_mask = torch.rand((1, cols), device=device) < 0.5
        results[f"masked_scatter broadcast mask {name}"] = timed(lambda: x.masked_scatter(row_mask, src))
        row = values(dtype, (cols,))
        results[f"select_scatter {name}"] = timed(lambda: torch.select_scatter(x, row, 0, rows // 2))
        half = values(dtype, (rows, cols // 2))
        results[f"slice_scatter step2 {name}"] = timed(
            lambda: torch.slice_scatter(x, half, 1, 0, cols, 2))
        side = 1
        while side * side * 4 <= elements:
            side *= 2
        square = values(dtype, (side, side))
        diagonal = values(dtype, (side,))
        results[f"diagonal_scatter {name}"] = timed(lambda: torch.diagonal_scatter(square, diagonal))
        # ScatterNd's general form as PyTorch writes it: index_put with accumulate (out of place,
        # as ours: the result is a new tensor).
        rows_index = indices((rows,), rows)
        results[f"scatter_nd rows sum random {name}"] = timed(
            lambda: x.index_put((rows_index,), src, accumulate=True))
        dup_rows_index = indices((rows,), rows, rows // 100)
        results[f"scatter_nd rows sum dup1% {name}"] = timed(
            lambda: x.index_put((dup_rows_index,), src, accumulate=True))
        updates = elements // 4
        row_index = indices((updates,), rows)
        col_index = indices((updates,), cols)
        element_src = values(dtype, (updates,))
        results[f"scatter_nd elements sum random {name}"] = timed(
            lambda: x.index_put((row_index, col_index), element_src, accumulate=True))
    print(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
