# The two entry points of the README: `make run` (the main job) and `make test`.
JOBS ?= $(shell nproc)
BUILD ?= build
DEMO_MODEL ?= tests/data/fixtures/qwen3
DEMO_ARGS ?= --ids 3,17,42,99,512 --max-new-tokens 24 --print-ids

.PHONY: setup build run test test-asan fuzz bench clean

setup:
	@tools/setup.sh

build: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

run: build
	$(BUILD)/tfm generate $(DEMO_MODEL) $(DEMO_ARGS) --device auto

test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# Unit tests under AddressSanitizer + UBSan (a second CI stage).
test-asan: setup
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DTFM_SANITIZE=ON -DTFM_BENCH=OFF >/dev/null
	@cmake --build build-asan -j$(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 ctest --output-on-failure -j$(JOBS)

fuzz: setup
	tools/fuzz.sh 60

clean:
	rm -rf build build-asan build-fuzz
