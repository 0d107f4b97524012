# FlashServe — the README's commands. Each target runs the project's own setup first, so a clean
# clone on a fresh Debian 12 machine needs nothing else.
#
#   make run     set up, build, start what exists of the stack with the bundled tiny model
#   make test    set up, build, run every test through ctest (GPU tests skip without a device)
#
# Other targets: build, static (binaries for the GPU machine), fuzz, bench, clean.

BUILD_DIR   ?= build
STATIC_DIR  ?= build-static
FUZZ_DIR    ?= build-fuzz
BUILD_TYPE  ?= RelWithDebInfo
JOBS        ?= $(shell nproc)
CMAKE_ARGS  ?=
FUZZ_SECONDS ?= 180

.PHONY: all setup configure build test run static fuzz bench clean

all: build

setup:
	@scripts/setup.sh

configure: setup
	@scripts/configure.sh $(BUILD_DIR) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_ARGS)

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

test: build
	@cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) --timeout 900

run: build
	@scripts/run.sh $(BUILD_DIR)

# Binaries that depend only on libc (and the GPU machine's own libcuda/libcublas/libnccl).
static: setup
	@scripts/configure.sh $(STATIC_DIR) -DCMAKE_BUILD_TYPE=Release -DFLASHSERVE_STATIC=ON $(CMAKE_ARGS)
	@cmake --build $(STATIC_DIR) -j $(JOBS) --target gpu_tests

fuzz: setup
	@CC=clang CXX=clang++ scripts/configure.sh $(FUZZ_DIR) -DFLASHSERVE_FUZZ=ON -DFLASHSERVE_CUDA=OFF
	@cmake --build $(FUZZ_DIR) -j $(JOBS) --target fuzzers
	@scripts/fuzz.sh $(FUZZ_DIR) $(FUZZ_SECONDS)

bench: build
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target benches

clean:
	rm -rf $(BUILD_DIR) $(STATIC_DIR) $(FUZZ_DIR)
