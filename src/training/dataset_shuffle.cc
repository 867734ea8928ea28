#include "training/dataset_shuffle.h"

#include <numeric>
#include <utility>

namespace tfm::training {

uint64_t uniform_below(std::mt19937_64& rng, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound: the biased low values
  while (true) {
    const uint64_t r = rng();
    if (r >= threshold) return r % bound;
  }
}

std::vector<int64_t> epoch_permutation(int64_t n, uint64_t seed, int64_t epoch) {
  const auto e = static_cast<uint64_t>(epoch);
  std::seed_seq seq{static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32),
                    static_cast<uint32_t>(e), static_cast<uint32_t>(e >> 32)};
  std::mt19937_64 rng(seq);
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(uniform_below(rng, static_cast<uint64_t>(i) + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

}  // namespace tfm::training
