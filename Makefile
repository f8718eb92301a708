# The two commands of the README, and a few more for development.
#
#   make run    install the server's and CLI's build dependencies if missing (the `build` profile
#               of scripts/install-deps), build the server and the CLI only, start
#               tensorops-server on 127.0.0.1:50051
#   make test   install dependencies if missing, build, run every test (the sanitize tree builds
#               beside them at the lowest priority); then test-sanitize
#   make test-sanitize  the second tree (clang, ASan + UBSan): the unit, service and end-to-end
#               suites, and every fuzzer for FUZZ_SECONDS each (fuzz/README.md)
#   make fuzz   every fuzzer for FUZZ_LONG_SECONDS each, in the sanitize tree (fuzz/README.md)
#   make image  build the cpu container image with podman (deploy/README.md)
#   make container-test   build, run and stop the cpu image; podman kube play (as root)
#   make bench  build, run the kernel and service benchmarks, print their tables (bench/README.md)
#   make bench-store  build, run the tensor store benchmark (C++ and Python; bench/README.md)
#   make bench-kserve  build, run the KServe v2 vs tensorops.v1 benchmark (bench/README.md)
#   make soak   build, run the soak test (64 clients, 10 minutes; bench/README.md)
#
# BUILD_DIR, BUILD_TYPE, JOBS and CMAKE_ARGS can be overridden: make test CMAKE_ARGS=-DTENSOROPS_ENABLE_CUDA=OFF
BUILD_DIR ?= build/release
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=
SERVER_ARGS ?= --host=127.0.0.1 --port=50051

.PHONY: all deps configure build run test test-sanitize sanitize-build fuzz test-kernels-cpu bench bench-store bench-kserve soak format clean image container-test

all: build

deps:
	@scripts/install-deps

# The tests and benchmarks are named on explicitly: `make run` turns them off in the same tree.
configure: deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	    -DTENSOROPS_BUILD_TESTS=ON -DTENSOROPS_BUILD_BENCH=ON $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD_DIR) -j $(JOBS)

# Only what serving needs: GoogleTest, Google Benchmark, Go, Python and podman are not installed,
# and a new tree is configured without the tests and benchmarks (a later `make test` turns them
# back on). A tree configured already (by `make test`, say) keeps its settings (CMAKE_ARGS still
# apply), so that `make run` builds just the server and CLI in it and never reconfigures away what
# `make test` built: tests/readme_test.py starts its server with `make run` during `make test`.
run:
	@INSTALL_DEPS_PROFILE=build scripts/install-deps
	if [ ! -f $(BUILD_DIR)/CMakeCache.txt ]; then \
	  cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) \
	      -DTENSOROPS_BUILD_TESTS=OFF -DTENSOROPS_BUILD_BENCH=OFF $(CMAKE_ARGS); \
	elif [ -n "$(CMAKE_ARGS)" ]; then \
	  cmake -S . -B $(BUILD_DIR) $(CMAKE_ARGS); \
	fi
	cmake --build $(BUILD_DIR) -j $(JOBS) --target run_targets
	$(BUILD_DIR)/server/tensorops-server $(SERVER_ARGS)

# The release suites leave the cores idle about half the time (they wait on their servers, sockets
# and podman), so the sanitize tree builds beside them at the lowest priority, which takes only
# the time they leave; its output is printed after theirs. A failed build there is reported by
# test-sanitize, which builds again in the foreground; a failed suite stops the build.
test: build
	mkdir -p $(SANITIZE_DIR)
	setsid nice -n 19 $(MAKE) --no-print-directory sanitize-build \
	    > $(SANITIZE_DIR)/build-beside-tests.log 2>&1 & build=$$!; \
	trap 'kill -- -$$build 2>/dev/null' INT TERM; \
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS) || { \
	  kill -- -$$build 2>/dev/null; exit 1; }; \
	wait $$build; cat $(SANITIZE_DIR)/build-beside-tests.log
	$(MAKE) test-sanitize

# The sanitize tree (CMakePresets.json: clang, ASan + UBSan, libFuzzer's coverage outside the
# suites; the kernels and their suites at -O1, the rest at -O0; CONTRIBUTING.md says why) builds
# only what it runs: the suites below (the kernels' own suites, the wire codec, the service over
# both protocols, the store, the scheduler, end to end through the sanitized server and CLI) and the
# fuzzers (fuzz/). A sanitizer report fails the suite that caused it; a fuzzer's finding fails its
# test.
SANITIZE_DIR ?= build/sanitize
# Every op's suite (tests/ops/), then the rest.
OP_SUITES := $(sort $(basename $(notdir $(wildcard tests/ops/*_test.cc))))
SANITIZE_SUITES ?= core_test $(OP_SUITES) backward_test int_divider_test index_walk_test \
    codec_test op_list_test npy_test \
    tensor_store_test durable_store_test \
    scheduler_test service_test generic_rpc_test call_core_test store_service_test kserve_test \
    call_log_test e2e_test shared_memory_test
FUZZERS = op_fuzzer backward_fuzzer kserve_fuzzer codec_fuzzer npy_fuzzer store_fuzzer \
    stream_fuzzer
FUZZ_SECONDS ?= 20
empty :=
space := $(empty) $(empty)
sanitize-build:
	cmake --preset sanitize -DTENSOROPS_FUZZ_SECONDS=$(FUZZ_SECONDS) > /dev/null
	cmake --build $(SANITIZE_DIR) -j $(JOBS) --target tensorops-server tensorops-cli \
	    $(SANITIZE_SUITES) $(FUZZERS)

test-sanitize: deps
	$(MAKE) --no-print-directory sanitize-build
	ctest --test-dir $(SANITIZE_DIR) --output-on-failure -j $(JOBS) \
	    -L '^($(subst $(space),|,$(strip $(SANITIZE_SUITES) $(empty)))|fuzz)$$'

# Every fuzzer for FUZZ_LONG_SECONDS (default 10 minutes) each, one after another, in the sanitize
# tree; the corpora grow in build/sanitize/fuzz/<fuzzer>.run/corpus. Figures: fuzz/README.md.
FUZZ_LONG_SECONDS ?= 600
fuzz: deps
	cmake --preset sanitize > /dev/null
	cmake --build $(SANITIZE_DIR) -j $(JOBS) --target $(FUZZERS)
	for fuzzer in $(FUZZERS); do \
	  fuzz/run-fuzzer $(SANITIZE_DIR)/fuzz/$$fuzzer fuzz/corpus/$$fuzzer \
	      $(SANITIZE_DIR)/fuzz/$$fuzzer.run $(FUZZ_LONG_SECONDS) || exit 1; \
	done

# With ccache installed, the build is lent its cache (deploy/image/build), so that what `make` has
# compiled already is not compiled again in the image.
HOST_CCACHE_DIR = $(shell command -v ccache >/dev/null && ccache --get-config cache_dir)
image:
	$(if $(HOST_CCACHE_DIR),mkdir -p $(HOST_CCACHE_DIR))
	podman build --format docker --target cpu --build-arg BUILD_JOBS=$(JOBS) \
	    $(if $(HOST_CCACHE_DIR),--volume $(HOST_CCACHE_DIR):/ccache) -t tensorops:cpu .

container-test: configure
	cmake --build $(BUILD_DIR) -j $(JOBS) --target tensorops-cli
	deploy/container-test $(BUILD_DIR)/container-test $(BUILD_DIR)/client/cpp/tensorops-cli

# The kernel table (with ATen ratios when libtorch-dev is installed), then the service table. Pass
# flags through KERNELS_BENCH_ARGS (e.g. --benchmark_filter=Gather) and SERVICE_BENCH_ARGS
# (e.g. --quick).
KERNELS_BENCH_ARGS ?= --benchmark_min_time=0.1
SERVICE_BENCH_ARGS ?=
bench: build
	$(BUILD_DIR)/bench/kernels_bench --benchmark_out=$(BUILD_DIR)/bench/kernels.json \
	    --benchmark_out_format=json $(KERNELS_BENCH_ARGS)
	bench/kernels_table.py < $(BUILD_DIR)/bench/kernels.json
	$(BUILD_DIR)/bench/service/service_bench $(SERVICE_BENCH_ARGS)

# The tensor store's workloads (issue 24), stored vs inline, from C++ and from Python (against
# PyTorch in-process; Debian's python3-torch is in /usr/bin/python3's path). About 3-4 minutes;
# STORE_BENCH_ARGS=--quick for a smoke run (passed to both).
STORE_BENCH_ARGS ?=
STORE_BENCH_PYTHON ?= /usr/bin/python3
bench-store: build
	$(BUILD_DIR)/bench/store/store_bench $(STORE_BENCH_ARGS)
	TENSOROPS_PYTHON_STUBS=$(BUILD_DIR)/python $(STORE_BENCH_PYTHON) bench/store/store_bench.py \
	    --server=$(BUILD_DIR)/server/tensorops-server $(STORE_BENCH_ARGS)

# The same Gather through KServe v2 (ModelInfer) and tensorops.v1, one in-process server (docs/
# kserve.md). About 30 s; KSERVE_BENCH_ARGS=--quick for a smoke run.
KSERVE_BENCH_ARGS ?=
bench-kserve: build
	$(BUILD_DIR)/bench/kserve/kserve_bench $(KSERVE_BENCH_ARGS)

# The soak run (bench/soak/soak.py, not in make test): a server of its own, 64 clients for 10
# minutes mixing every op, bad requests, cancellations, expiring deadlines, dropped streams and
# store updates; prints calls by code, p50/p99 and the server's RSS each minute and a verdict (exit
# 1 when a target is missed). SOAK_ARGS="--minutes=3 --clients=32"; after "--", server flags.
SOAK_ARGS ?=
SOAK_PYTHON ?= /usr/bin/python3
soak: build
	$(SOAK_PYTHON) bench/soak/soak.py --server=$(BUILD_DIR)/server/tensorops-server \
	    --stubs=$(BUILD_DIR)/python $(SOAK_ARGS)

format:
	find kernels proto server client/cpp tests bench \( -name '*.h' -o -name '*.cc' -o -name '*.cu' -o -name '*.proto' \) -print0 | xargs -0 clang-format -i
	gofmt -w client/go/tensorops/*.go

clean:
	rm -rf build
