#!/usr/bin/env python3
"""Turns kernels_bench's JSON (--benchmark_format=json) into the markdown tables of bench/README.md.

Reads the JSON files named on the command line (stdin without any; a later file's case replaces
an earlier one's, or with --median every number of a case is the median over the files that have
it), prints one table per benchmark family and a summary against the issue's targets, with the
ratios to ATen by group (family and size, axis, reduction, dtype). With
repetitions, the median aggregate of each case is used.

  build/release/bench/kernels_bench --benchmark_format=json | bench/kernels_table.py
  bench/kernels_table.py all.json copy_bound_rerun.json
  bench/kernels_table.py --median run1.json run2.json run3.json   # a loaded machine: several runs
"""
import json
import statistics
import sys


MEDIAN_FIELDS = ("real_time", "items_per_second", "bytes_per_second", "vs_aten", "of_memcpy")


def groups(cases):
    """Yields (group name, cases) for the summary by group: family and size, axis, reduction, dtype."""
    def family(b):
        return b["run_name"].split("/")[0].removeprefix("BM_")

    def size(b):
        return next((w for w in ("4KiB", "1MiB") if w in b["label"].split()), "64 MiB")

    named = {}
    for b in cases:
        words = b["label"].split()
        named.setdefault(f"{family(b)} {size(b)}", []).append(b)
        if family(b) in ("Gather", "Scatter"):
            axis = "axis0" if "axis0" in words else "last"
            named.setdefault(f"Gather+Scatter {axis}", []).append(b)
        if family(b) == "Scatter":
            named.setdefault(f"Scatter {words[-1]}", []).append(b)
            named.setdefault(f"Scatter {words[0]}", []).append(b)
    yield "all cases", cases
    yield from named.items()


def main():
    args = sys.argv[1:]
    median_of_files = "--median" in args
    paths = [a for a in args if a != "--median"]
    reports = [json.load(open(path)) for path in paths] or [json.load(sys.stdin)]
    context = reports[0]["context"]
    rows = {}
    runs = {}
    for report in reports:
        picked = {}
        for b in report["benchmarks"]:
            if b.get("run_type") == "aggregate" and b.get("aggregate_name") != "median":
                continue
            picked[b["run_name"]] = b  # The median aggregate, when present, comes last and wins.
        for name, b in picked.items():
            rows[name] = b
            runs.setdefault(name, []).append(b)
    if median_of_files:
        # Each run's ratios were taken back to back; the median over runs drops the runs that a
        # burst of load from another process skewed.
        for name, bs in runs.items():
            merged = dict(bs[0])
            for field in MEDIAN_FIELDS:
                values = [b[field] for b in bs if field in b]
                if values:
                    merged[field] = statistics.median(values)
            rows[name] = merged
    families = {}
    for b in rows.values():
        families.setdefault(b["run_name"].split("/")[0], []).append(b)

    runs_note = f", median of {len(reports)} runs" if median_of_files and len(reports) > 1 else ""
    print(f"\n## Kernels ({context.get('date', '')}, {context.get('num_cpus')} CPUs, "
          f"{context.get('aten', 'no ATen')}, large = {int(context.get('large_bytes', 0)) >> 20} MiB"
          f"{runs_note})\n")
    print("vs ATen = ATen's time / ours (> 1: we are faster); of memcpy = memcpy's time for the "
          "same bytes / ours (1.0 = copy bandwidth).\n")
    for family, cases in families.items():
        print(f"\n### {family.removeprefix('BM_')}\n")
        print("| case | ours µs | Mitems/s | GB/s | vs ATen | of memcpy |")
        print("|---|---|---|---|---|---|")
        for b in cases:
            scale = {"ns": 1e-3, "us": 1, "ms": 1e3, "s": 1e6}[b["time_unit"]]
            aten = b.get("vs_aten")
            print(f"| {b.get('label', b['run_name'])} | {b['real_time'] * scale:.1f} "
                  f"| {b.get('items_per_second', 0) / 1e6:.1f} "
                  f"| {b.get('bytes_per_second', 0) / 1e9:.2f} "
                  f"| {'' if aten is None else f'{aten:.2f}x'} | {b['of_memcpy']:.2f} |")

    print("\n### Kernel targets\n")
    all_cases = [b for b in rows.values()]
    with_aten = [b for b in all_cases if "vs_aten" in b]
    if with_aten:
        ratios = [b["vs_aten"] for b in with_aten]
        below = [b for b in with_aten if b["vs_aten"] < 1.0]
        median = statistics.median(ratios)
        print(f"- median vs ATen over {len(ratios)} cases: {median:.2f}x (target >= 1.5x: "
              f"{'met' if median >= 1.5 else 'NOT met'}); cases below 1.0x: {len(below)} "
              f"(target 0: {'met' if not below else 'NOT met'})")
        for name, pick in [
            ("Scatter AMAX", lambda b: b["run_name"].startswith("BM_Scatter") and b["label"].endswith(" AMAX")),
            ("Scatter AMIN", lambda b: b["run_name"].startswith("BM_Scatter") and b["label"].endswith(" AMIN")),
            ("Scatter MEAN", lambda b: b["run_name"].startswith("BM_Scatter") and b["label"].endswith(" MEAN")),
            ("MaskedScatter", lambda b: b["run_name"].startswith("BM_MaskedScatter")),
        ]:
            chosen = [b["vs_aten"] for b in with_aten if pick(b)]
            if chosen:
                m = statistics.median(chosen)
                print(f"- {name}: median {m:.2f}x, min {min(chosen):.2f}x over {len(chosen)} cases "
                      f"(target >= 2x: {'met' if m >= 2 else 'NOT met'})")
        worst = sorted(with_aten, key=lambda b: b["vs_aten"])[:10]
        print("- slowest against ATen: " + "; ".join(
            f"{b['run_name'].split('/')[0].removeprefix('BM_')} {b['label']} {b['vs_aten']:.2f}x" for b in worst))
        print("\n| group | median vs ATen | min | below 1.0x |\n|---|---|---|---|")
        for name, chosen in groups(with_aten):
            r = [b["vs_aten"] for b in chosen]
            print(f"| {name} | {statistics.median(r):.2f}x | {min(r):.2f}x "
                  f"| {sum(1 for x in r if x < 1.0)} of {len(r)} |")
        print()
    else:
        print("- vs ATen: not measured (built without libtorch)")
    copy_bound = [b for b in all_cases if b["run_name"].startswith("BM_CopyBound") and b["label"].endswith("large")]
    gather_rows = copy_bound
    for b in gather_rows:
        print(f"- {b['label']}: {b['of_memcpy']:.2f} of memcpy (target >= 0.70: "
              f"{'met' if b['of_memcpy'] >= 0.7 else 'NOT met'})")


if __name__ == "__main__":
    main()
