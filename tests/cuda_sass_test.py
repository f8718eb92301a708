"""Checks the machine code of the built CUDA kernels, which needs no GPU (issue 38, "Checks that
need no GPU"): no kernel that walks elements divides by a runtime value (above all, none calls the
64-bit integer division routine), and each kernel's registers are reported.

    python3 tests/cuda_sass_test.py --library LIB --tools DIR [--cuda-bin DIR] [--report FILE]

LIB is the built tensorops_kernels archive (empty: built without CUDA, skipped). The cubins are
taken out of it with cuobjdump and disassembled with nvdisasm, found in --cuda-bin or on PATH, or
else installed from PyPI (nvidia-cuda-cuobjdump, nvidia-cuda-nvdisasm: the CUDA toolkit's own
wheels, which this machine's nvcc came from) into DIR once, so that later runs are offline.

nvcc compiles a 64-bit `/` or `%` by a value it cannot see into a test of both operands' high
words, an inline 32-bit division when they are zero, and otherwise a CALL to a subroutine of the
cubin, `$__internal_N_$__cuda_sm20_{div,rem}_{s,u}64`: dozens of instructions and a branch per
division, which is what held ViewScatterKernel and GatherKernel at 81-84% of SM throughput and
6-20% of DRAM bandwidth on an H100. A 32-bit `/` or `%` by a runtime value is inlined instead, as
a float reciprocal and two corrections (about 20 instructions, starting with I2F.U32.RP, which
nothing else emits): flagged too, since the kernels divide by IntDivider (kernels/int_divider.h).
Every kernel checked here is one grid-stride loop over elements (or rows, or updates), so a
division anywhere in it is a division per element: the check is on the whole kernel.

FinalizeKernel, which divides by design, is the check's own control: a disassembly in which it is
not seen to divide means the patterns above no longer match what nvdisasm prints, and fails.

Exits 1 naming every kernel that divides; 77 (ctest: skipped) without CUDA, or when the tools
are missing and PyPI cannot be reached.
"""
import argparse
import collections
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

# The kernels checked: every kernel of ours (namespace tensorops::cuda) that addresses elements,
# and CUB's kernels that call our functors per element (the prefix sum of MaskedScatter reads the
# mask's bytes through MaskCount). Kernels of ours that may divide, with why:
ALLOWED = {
    # MEAN of integers divides each destination's value by its own count (FloorDivide, as the CPU
    # does): a division of data, once per result element, by no divisor known at launch.
    "FinalizeKernel": "MEAN's integer floor division by each destination's count",
}
OUR_NAMESPACE = "tensorops::cuda::"
DIVISION = re.compile(r"CALL\.\S+\s+`?\(?\$__internal_\d+_\$__cuda_sm\d+_(div|rem)_([su]64)")
INLINE_DIVISION = re.compile(r"\bI2F\.U(32|64)\.RP\b")
SECTION = re.compile(r"^\s*\.text\.(\S+):\s*$")
REGISTERS = re.compile(r"Function (\S+):\s*\n\s*REG:(\d+)")


def skip(reason):
    print(f"cuda_sass_test: SKIPPED: {reason}")
    sys.exit(77)


def find_tools(cuda_bin, tools_dir):
    """Returns the paths of cuobjdump and nvdisasm, installing them into tools_dir if needed."""
    installed = tools_dir / "nvidia" / "cu13" / "bin"
    search = os.pathsep.join(str(p) for p in [cuda_bin, installed] if p) + os.pathsep + \
        os.environ.get("PATH", "")
    found = {tool: shutil.which(tool, path=search) for tool in ("cuobjdump", "nvdisasm")}
    if all(found.values()):
        return os.path.abspath(found["cuobjdump"]), os.path.abspath(found["nvdisasm"])
    wheels = {"cuobjdump": "nvidia-cuda-cuobjdump>=13,<14",
              "nvdisasm": "nvidia-cuda-nvdisasm>=13,<14"}
    missing = [wheels[tool] for tool, path in found.items() if not path]
    print(f"cuda_sass_test: installing {', '.join(missing)} into {tools_dir}")
    tools_dir.mkdir(parents=True, exist_ok=True)
    pip = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--retries", "1",
         "--timeout", "20", "--no-deps", "--upgrade", "--target", str(tools_dir)] + missing,
        capture_output=True, text=True)
    found = {tool: shutil.which(tool, path=search) for tool in ("cuobjdump", "nvdisasm")}
    if not all(found.values()):
        print(pip.stdout + pip.stderr)
        skip(f"cuobjdump or nvdisasm is missing and pip could not install {', '.join(missing)} "
             f"(rerun with PyPI reachable)")
    return os.path.abspath(found["cuobjdump"]), os.path.abspath(found["nvdisasm"])


def demangle(names):
    if not names:
        return {}
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                         check=True).stdout.splitlines()
    return dict(zip(names, out))


def index_width(demangled):
    """The bits a kernel numbers positions in (walk.cuh's DispatchPosition): 32, 64, or "-" for a
    kernel that walks no positions of ours."""
    width = re.search(r"(?:IndexWalk<\d+, |NdAddressing<|NdUpdates<|AxisUpdates<\w+, )"
                      r"(?:unsigned (int|long)|std::make_unsigned<(int|long)>::type)>|"
                      r"MaskCount<(int|long)>", demangled)
    if not width:
        return "-"
    return "32" if next(g for g in width.groups() if g) == "int" else "64"


def kernel_name(demangled):
    """`void ns::(anonymous namespace)::Name<args>(params)` -> `ns::Name`."""
    name = demangled.replace("(anonymous namespace)::", "")
    name = re.sub(r"^void ", "", name)
    return re.split(r"[<(]", name, maxsplit=1)[0]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--library", required=True)
    parser.add_argument("--tools", required=True, type=pathlib.Path)
    parser.add_argument("--cuda-bin", default="")
    parser.add_argument("--report", type=pathlib.Path)
    args = parser.parse_args()
    if not args.library:
        skip("tensorops was built without CUDA (no nvcc, or -DTENSOROPS_ENABLE_CUDA=OFF)")
    if shutil.which("c++filt") is None:
        skip("c++filt (binutils) is missing")
    if not os.path.isfile(args.library):
        print(f"cuda_sass_test: {args.library} is not built")
        return 1
    cuobjdump, nvdisasm = find_tools(args.cuda_bin, args.tools.resolve())

    calls = {}  # mangled kernel -> division routines it calls
    with tempfile.TemporaryDirectory() as scratch:
        subprocess.run([cuobjdump, "-xelf", "all", os.path.abspath(args.library)], cwd=scratch,
                       check=True, capture_output=True)
        cubins = sorted(pathlib.Path(scratch).glob("*.cubin"))
        if not cubins:
            print(f"cuda_sass_test: no cubin in {args.library}")
            return 1
        registers = {}
        for cubin in cubins:
            sass = subprocess.run([nvdisasm, "-c", str(cubin)], check=True, capture_output=True,
                                  text=True).stdout
            kernel = None
            for line in sass.splitlines():
                if section := SECTION.match(line):
                    kernel = section.group(1)
                    # The division routines are sections of their own in some cubins.
                    if kernel.startswith("$"):
                        kernel = None
                    elif kernel not in calls:
                        calls[kernel] = set()
                elif kernel and (division := DIVISION.search(line)):
                    calls[kernel].add(f"{division.group(1)}_{division.group(2)}")
                elif kernel and INLINE_DIVISION.search(line):
                    calls[kernel].add("inline div 32")
            usage = subprocess.run([cuobjdump, "--dump-resource-usage", str(cubin)], check=True,
                                   capture_output=True, text=True).stdout
            registers.update({m.group(1): int(m.group(2)) for m in REGISTERS.finditer(usage)})

    names = demangle(sorted(calls))
    checked = {k: names[k] for k in calls
               if (kernel_name(names[k]).startswith(OUR_NAMESPACE)
                   and kernel_name(names[k]).split("::")[-1] not in ALLOWED)
               or (not kernel_name(names[k]).startswith(OUR_NAMESPACE)
                   and OUR_NAMESPACE in names[k])}
    if not checked:
        print("cuda_sass_test: no tensorops kernel found in the cubins")
        return 1
    controls = [k for k in calls if kernel_name(names[k]) == OUR_NAMESPACE + "FinalizeKernel"]
    if not any(calls[k] for k in controls):
        print(f"cuda_sass_test: none of the {len(controls)} FinalizeKernel instantiations, which "
              "divide, is seen dividing: the patterns no longer match nvdisasm's output")
        return 1

    # Per kernel: its instantiations, their registers, and how many call the routine.
    families = collections.defaultdict(list)
    for mangled, demangled in checked.items():
        short = re.sub(r"^cub::CUB_\w+::detail::", "cub::",
                       kernel_name(demangled).replace(OUR_NAMESPACE, ""))
        if not kernel_name(demangled).startswith(OUR_NAMESPACE):
            short += " (" + ", ".join(sorted(set(re.findall(r"tensorops::cuda::(?:\(anonymous "
                                                            r"namespace\)::)?(\w+)", demangled))))
            short += ")"
        families[(short, index_width(demangled))].append(
            (registers.get(mangled, -1), calls[mangled]))
    # inst: instantiations; the last two columns count those that divide, each way.
    print(f"{'kernel':<56} {'bits':>4} {'inst':>5} {'registers':>10} {'div/rem 64 call':>15} "
          f"{'inline div 32':>13}")
    for short, width in sorted(families):
        entries = families[(short, width)]
        regs = sorted(r for r, _ in entries)
        calling = sum(1 for _, c in entries if c - {"inline div 32"})
        inline = sum(1 for _, c in entries if "inline div 32" in c)
        span = f"{regs[0]}-{regs[-1]}" if regs[0] != regs[-1] else f"{regs[0]}"
        print(f"{short:<56} {width:>4} {len(entries):>5} {span:>10} {calling:>15} {inline:>13}")
    for name, why in ALLOWED.items():
        print(f"not checked: {name} ({why})")
    if args.report:
        with open(args.report, "w") as report:
            for mangled in sorted(checked):
                routines = ",".join(sorted(calls[mangled])) or "-"
                report.write(f"{registers.get(mangled, -1)}\t{index_width(checked[mangled])}\t"
                             f"{routines}\t{checked[mangled]}\n")
        print(f"each instantiation: {args.report}")

    failures = sorted((checked[k], sorted(calls[k])) for k in checked if calls[k])
    if failures:
        print(f"\ncuda_sass_test: FAILED: {len(failures)} of {len(checked)} kernels divide by a "
              "runtime value (the 64-bit routine, or the inline 32-bit sequence):")
        # The table above counts them per kernel; the report lists every one.
        for name, routines in failures[:10]:
            print(f"  {name[:200]}{'...' if len(name) > 200 else ''}: {', '.join(routines)}")
        if len(failures) > 10:
            print(f"  ... and {len(failures) - 10} more")
        return 1
    print(f"\ncuda_sass_test: {len(checked)} kernels, none calls the 64-bit integer division "
          "routine or divides inline in 32 bits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
