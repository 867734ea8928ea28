# The two entry points of the README: `make run` (the main job) and `make test`.
JOBS ?= $(shell nproc)
BUILD ?= build
DEMO_MODEL ?= models/shakespeare
DEMO_ARGS ?= "ROMEO:" --max-new-tokens 200 --do-sample --temperature 0.8 --top-k 50 --seed 1
# The demo model as tfm trained it (make demo-model retrains it, ~15 min on 2 cores).
DEMO_TRAIN_ARGS = --model demo/qwen3-shakespeare.json --tokenizer demo/tokenizer \
	--data data/tinyshakespeare/input.txt --sample_by document --validation_split 0.1 \
	--max_length 256 --per_device_train_batch_size 16 --learning_rate 2e-3 --weight_decay 0.1 \
	--lr_scheduler_type cosine --warmup_steps 50 --num_train_epochs 5 --max_grad_norm 1.0 \
	--logging_steps 25 --eval_steps 100 --save_steps 0 --seed 42 --init_seed 0 \
	--overwrite_output_dir --output_dir models/shakespeare

.PHONY: setup test-env build run test test-asan test-races fuzz bench clean demo-model

setup:
	@tools/setup.sh

# What only the tests need (the PJRT CPU plugin), in a git-ignored venv.
test-env:
	@tools/test_env.sh

build: setup
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release >/dev/null
	@cmake --build $(BUILD) -j$(JOBS)

run: build
	$(BUILD)/tfm generate $(DEMO_MODEL) $(DEMO_ARGS) --device auto

demo-model: build
	rm -rf models/shakespeare
	$(BUILD)/tfm train $(DEMO_TRAIN_ARGS)

test: test-env build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# Unit tests under AddressSanitizer + UBSan (a second CI stage).
test-asan: setup test-env
	@cmake -S . -B build-asan -DCMAKE_BUILD_TYPE=Debug -DTFM_SANITIZE=ON -DTFM_BENCH=OFF >/dev/null
	@cmake --build build-asan -j$(JOBS)
	cd build-asan && ASAN_OPTIONS=detect_leaks=1 LSAN_OPTIONS=suppressions=$(CURDIR)/tools/lsan_suppressions.txt \
		ctest --output-on-failure -j$(JOBS)

# The CUDA kernels' emulation (tests/cuda_emulation: a block's threads are real threads) under
# ThreadSanitizer: a kernel whose threads touch the same memory with no barrier between fails.
# One OpenMP thread for the CPU references, which libgomp's uninstrumented threads would make
# report races that are not there. Four attention shapes, each the slower twin of one that stays
# (same kernel, same barriers, more rows), are left to the other stages: under ThreadSanitizer they
# are the stage's slowest and reach no barrier the stage does not already run.
RACES_SKIP := *b1_seq2_len300_h4x2_d128*:*b1_seq200_len230_h2x1_d128*:*b1_seq1_len600_d128*:*b2_seq1_len1100_d128_pad500*
test-races: setup
	@cmake -S . -B build-races -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTFM_RACES=ON -DTFM_BENCH=OFF >/dev/null
	@cmake --build build-races -j$(JOBS) --target tfm_cuda_emulation_tests
	cd build-races && OMP_NUM_THREADS=1 TSAN_OPTIONS=halt_on_error=1 \
		./tests/tfm_cuda_emulation_tests --gtest_filter='-$(RACES_SKIP)'

fuzz: setup
	tools/fuzz.sh 60

clean:
	rm -rf build build-asan build-races build-fuzz
