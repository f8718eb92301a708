"""The README's commands, run as printed: every fenced block of README.md is run by a test, this
one or the one RUNNERS names for it, so that a block added to the README with no test fails here.

  readme_test.py REPO BUILD_DIR     # ctest readme_examples (tests/CMakeLists.txt)

This test starts its server with the README's `make run` (in this build's tree, on a free port),
runs the quick start's shell commands (the CLI against it: the address is the one thing changed,
added as --target) and the Python example (its address
replaced), and checks what each prints against the values the README states. Python: Debian's
/usr/bin/python3 with NumPy, as the README says. Exits 0 when every block is accounted for and
runs as printed."""
import contextlib
import io
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time

import numpy as np

REPO, BUILD = (os.path.abspath(path) for path in sys.argv[1:3])
README = os.path.join(REPO, "README.md")
DEFAULT_ADDRESS = "127.0.0.1:50051"

# The blocks other tests run, by their first line, with the file that runs each (which says so
# with a line "README.md block: FIRST LINE").
RUNNERS = {
    "cmake --install build/release --prefix ~/.local": "tests/install/run-install-test",
    "find_package(tensorops REQUIRED)": "tests/install/run-install-test",
    '#include "client/cpp/client.h"': "tests/install/run-install-test",
    "ctx := context.Background()": "client/go/run-tests",
    "import numpy as np": "tests/kserve/tritonclient_test.py",
}
# The block of the two commands: `make run` starts the server every other block here calls (in
# this build's tree, on a free port); `make test` is what .ci/run runs, so every CI run runs it.
MAKE_BLOCK = "make run"


def blocks():
    """(line, language, text) of every fenced block of the README."""
    with open(README, encoding="utf-8") as f:
        lines = f.read().split("\n")
    found, start, language = [], None, ""
    for number, line in enumerate(lines, 1):
        if line.startswith("```"):
            if start is None:
                start, language = number, line[3:].strip()
            else:
                found.append((start, language, "\n".join(lines[start:number - 1])))
                start = None
    assert start is None, f"README.md: the block at line {start} is not closed"
    return found


def start_server(work):
    """The README's `make run`, in this build's tree, serving on a free loopback port: it checks
    the server's dependencies, finds the server and CLI built, and starts the server. Its own
    process group, so that stopping it stops the server make started."""
    log = open(os.path.join(work, "server.log"), "w+", encoding="utf-8")
    server = subprocess.Popen(
        ["make", "--no-print-directory", "-C", REPO, "run", f"BUILD_DIR={BUILD}",
         "SERVER_ARGS=--host=127.0.0.1 --port=0"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 90
    while time.time() < deadline:
        log.seek(0)
        text = log.read()
        match = re.search(r"listening on ([^;\s]+);", text)
        if match:
            return server, match.group(1)
        assert server.poll() is None, f"make run exited before the server listened:\n{text}"
        time.sleep(0.05)
    raise AssertionError("make run: the server printed no 'listening on' line")


def stop_server(server):
    os.killpg(server.pid, signal.SIGTERM)
    server.wait(30)


def run_quick_start(text, address, work):
    """The shell block: each command in `work`, the CLI's path under this build and the server's
    address added. The gather prints the values the README states; out.npy holds the sum."""
    outputs = []
    for line in text.strip().split("\n"):
        argv = shlex.split(line)
        if argv[0].startswith("build/release/"):
            argv[0] = os.path.join(BUILD, argv[0][len("build/release/"):])
            argv.append(f"--target={address}")
        done = subprocess.run(argv, cwd=work, capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, (line, done.stdout, done.stderr)
        outputs.append(done.stdout)
    gathered = outputs[1]
    assert "[[1., 1.],\n [4., 3.]]" in gathered, gathered
    x = np.load(os.path.join(work, "x.npy"))
    i = np.load(os.path.join(work, "i.npy"))
    expected = x.copy()
    np.add.at(expected, (np.arange(2)[:, None].repeat(2, 1), i), 9)
    np.testing.assert_array_equal(np.load(os.path.join(work, "out.npy")), expected)
    return gathered


def run_python_example(text, address):
    """The Python block in this process, its address replaced: it prints what its comment says."""
    assert DEFAULT_ADDRESS in text, text
    printed = re.search(r"print\(.*\)\s*#\s*(.*)", text).group(1)
    # The generated stubs, then the package (its tensorops/__init__.py first).
    sys.path.insert(0, os.environ.get("TENSOROPS_PYTHON_STUBS", os.path.join(BUILD, "python")))
    sys.path.insert(0, os.path.join(REPO, "client", "python"))
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        exec(compile(text.replace(DEFAULT_ADDRESS, address), README, "exec"), {})
    assert stdout.getvalue().split() == printed.split(), (stdout.getvalue(), printed)
    return stdout.getvalue()


def main():
    unaccounted = []
    found = blocks()
    with tempfile.TemporaryDirectory(prefix="tensorops-readme-") as work:
        server, address = start_server(work)
        try:
            for line, language, text in found:
                first = text.strip().split("\n")[0]
                if language == "sh" and first.startswith("/usr/bin/python3 -c"):
                    printed = run_quick_start(text, address, work)
                    print(f"README.md:{line}: quick start ran:\n{printed}")
                elif language == "python" and first.startswith("import numpy as np, tensorops"):
                    print(f"README.md:{line}: Python example printed "
                          f"{run_python_example(text, address)!r}")
                elif first.split("#")[0].split() == MAKE_BLOCK.split():
                    print(f"README.md:{line}: `make run` started the server above; `make test` "
                          "is .ci/run's command")
                else:
                    runner = next((path for prefix, path in RUNNERS.items()
                                   if first.startswith(prefix)), None)
                    if runner is None:
                        unaccounted.append(f"README.md:{line} ({language}): {first}")
                        continue
                    prefix = next(p for p in RUNNERS if first.startswith(p))
                    with open(os.path.join(REPO, runner), encoding="utf-8") as f:
                        assert f"README.md block: {prefix}" in f.read(), (
                            f"{runner} does not say it runs README.md's block {prefix!r}")
                    print(f"README.md:{line}: run by {runner}")
        finally:
            stop_server(server)
    assert not unaccounted, "README blocks that no test runs:\n" + "\n".join(unaccounted)
    print(f"readme_test: {len(found)} README blocks accounted for")


if __name__ == "__main__":
    main()
