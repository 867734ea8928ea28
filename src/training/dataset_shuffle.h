// The row order of one epoch, reproducible anywhere: std::shuffle and
// std::uniform_int_distribution are implementation-defined, so the order is spelled out here.
// std::mt19937_64 is seeded through std::seed_seq{seed low, seed high, epoch low, epoch high}
// (32-bit words; both algorithms are fixed by the C++ standard), then Fisher-Yates swaps i with
// j = uniform in [0, i] for i = n-1 .. 1, each j drawn by rejection (r >= 2^64 mod (i+1), then
// r mod (i+1)). tools/make_dataset_goldens.py reimplements this in Python for the test.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace tfm::training {

// A uniform integer in [0, bound), unbiased.
uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound);
std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace tfm::training
