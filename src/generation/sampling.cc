#include "generation/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tfm/error.h"

namespace tfm::generation {
namespace {

constexpr float kMasked = -INFINITY;

}  // namespace

void apply_repetition_penalty(std::span<float> logits, std::span<const int64_t> history,
                              float penalty) {
  if (penalty == 1.f) return;
  std::vector<int64_t> seen(history.begin(), history.end());
  std::sort(seen.begin(), seen.end());
  seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
  for (int64_t id : seen) {
    if (id < 0 || static_cast<size_t>(id) >= logits.size()) continue;
    float& score = logits[static_cast<size_t>(id)];
    score = score < 0 ? score * penalty : score / penalty;
  }
}

void apply_top_k(std::span<float> logits, int top_k) {
  if (top_k <= 0 || static_cast<size_t>(top_k) >= logits.size()) return;
  std::vector<float> sorted(logits.begin(), logits.end());
  std::nth_element(sorted.begin(), sorted.begin() + (top_k - 1), sorted.end(), std::greater<>());
  const float kth = sorted[static_cast<size_t>(top_k - 1)];
  for (float& v : logits) {
    if (v < kth) v = kMasked;
  }
}

// Keeps the smallest set of most likely tokens whose probability reaches top_p (at least one).
void apply_top_p(std::span<float> logits, float top_p) {
  if (!(top_p < 1.f)) return;  // off, as transformers leaves it for 1 and above (and NaN)
  std::vector<size_t> order(logits.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  const float max = logits[order[0]];
  double total = 0;
  for (float v : logits) total += std::exp(static_cast<double>(v - max));
  double cumulative = 0;
  size_t keep = 0;
  while (keep < order.size()) {
    cumulative += std::exp(static_cast<double>(logits[order[keep]] - max)) / total;
    ++keep;
    if (cumulative >= top_p) break;
  }
  for (size_t i = keep; i < order.size(); ++i) logits[order[i]] = kMasked;
}

int64_t argmax(std::span<const float> logits) {
  return std::max_element(logits.begin(), logits.end()) - logits.begin();
}

int64_t sample(std::span<const float> logits, std::mt19937_64& rng) {
  const float max = *std::max_element(logits.begin(), logits.end());
  std::vector<double> weights(logits.size());
  for (size_t i = 0; i < logits.size(); ++i)
    weights[i] = std::exp(static_cast<double>(logits[i] - max));
  std::discrete_distribution<int64_t> pick(weights.begin(), weights.end());
  return pick(rng);
}

int64_t TokenChooser::choose(std::span<float> logits, std::span<const int64_t> history,
                             int new_tokens) const {
  apply_repetition_penalty(logits, history, config.repetition_penalty);
  if (new_tokens < config.min_new_tokens) {
    for (int64_t id : eos_ids) {
      if (id >= 0 && static_cast<size_t>(id) < logits.size())
        logits[static_cast<size_t>(id)] = kMasked;
    }
  }
  if (!config.do_sample) return argmax(logits);
  for (float& v : logits) v /= config.temperature;
  apply_top_k(logits, config.top_k);
  apply_top_p(logits, config.top_p);
  return sample(logits, rng);
}

}  // namespace tfm::generation
