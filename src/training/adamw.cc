#include "training/adamw.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "tfm/error.h"

namespace tfm::training {
namespace {

// Large enough to amortize scheduling, small enough that a model's few big matrices still spread
// over every core.
constexpr int64_t kChunkElements = int64_t{1} << 14;

[[noreturn]] void fail(const std::string& problem) { throw Error("AdamW: " + problem); }

void check_options(const AdamWOptions& o) {
  // The ranges torch.optim.AdamW accepts.
  if (!(o.lr >= 0)) fail("invalid learning rate " + std::to_string(o.lr));
  if (!(o.eps >= 0)) fail("invalid eps " + std::to_string(o.eps));
  if (!(o.beta1 >= 0 && o.beta1 < 1)) fail("invalid beta1 " + std::to_string(o.beta1));
  if (!(o.beta2 >= 0 && o.beta2 < 1)) fail("invalid beta2 " + std::to_string(o.beta2));
  if (!(o.weight_decay >= 0)) fail("invalid weight_decay " + std::to_string(o.weight_decay));
}

std::string segment_str(const ParamSegment& s) {
  return "{offset " + std::to_string(s.offset) + ", numel " + std::to_string(s.numel) + "}";
}

// The per-step scalars, formed in double and rounded to f32 once, as torch does with Python
// floats applied to f32 tensors.
struct StepScalars {
  float decay;                                      // 1 - lr * weight_decay
  float lerp_coeff;                                 // see update()
  bool small_weight;                                // |1 - beta1| < 0.5
  float beta2, sq_weight;                           // beta2, 1 - beta2
  float bias_correction2_sqrt, eps, neg_step_size;  // step size: lr / bias_correction1
};

// The elementwise work in f32, in torch's op order and with the fused multiply-adds of its
// vectorized CPU kernels: lerp_ is fma(w, g - m, m) for |w| < 0.5, else fma(w - 1, g - m, g),
// keeping precision on the side w is close to; addcmul_ is fma(c * g, g, v * beta2). The only
// difference left is sqrt: ours is correctly rounded, torch's vectorized one up to ~0.75 ulp off.
void update(const StepScalars& s, float decay, float* p, const float* g, float* m, float* v,
            int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float param = p[i] * decay;
    m[i] = std::fma(s.lerp_coeff, g[i] - m[i], s.small_weight ? m[i] : g[i]);
    v[i] = std::fma(s.sq_weight * g[i], g[i], v[i] * s.beta2);
    const float denom = std::sqrt(v[i]) / s.bias_correction2_sqrt + s.eps;
    p[i] = param + s.neg_step_size * m[i] / denom;
  }
}

}  // namespace

AdamW::AdamW(std::vector<ParamSegment> segments, int64_t total, AdamWOptions options)
    : segments_(std::move(segments)), total_(total), options_(options) {
  check_options(options_);
  if (total_ < 0) fail("negative parameter count " + std::to_string(total_));
  std::vector<ParamSegment> sorted = segments_;
  std::sort(sorted.begin(), sorted.end(),
            [](const ParamSegment& a, const ParamSegment& b) { return a.offset < b.offset; });
  int64_t covered = 0;  // end of the previous segment
  for (const ParamSegment& s : sorted) {
    if (s.offset < 0 || s.numel < 0 || s.offset > total_ - s.numel) {
      fail("segment " + segment_str(s) + " is outside the " + std::to_string(total_) +
           " parameters");
    }
    if (s.offset < covered) fail("segment " + segment_str(s) + " overlaps the one before it");
    covered = s.offset + s.numel;
    for (int64_t begin = s.offset; begin < covered; begin += kChunkElements) {
      chunks_.push_back({begin, std::min(begin + kChunkElements, covered), s.decay});
    }
  }
  exp_avg_.assign(static_cast<size_t>(total_), 0.0f);
  exp_avg_sq_.assign(static_cast<size_t>(total_), 0.0f);
}

void AdamW::step(std::span<float> params, std::span<const float> grads, double lr) {
  if (static_cast<int64_t>(params.size()) != total_ ||
      static_cast<int64_t>(grads.size()) != total_) {
    fail("step given " + std::to_string(params.size()) + " parameters and " +
         std::to_string(grads.size()) + " gradients, expected " + std::to_string(total_));
  }
  if (!(lr >= 0)) fail("invalid learning rate " + std::to_string(lr));
  ++steps_;
  const AdamWOptions& o = options_;
  const double step = static_cast<double>(steps_);
  const double bias_correction1 = 1 - std::pow(o.beta1, step);
  const double bias_correction2 = 1 - std::pow(o.beta2, step);
  const float avg_weight = static_cast<float>(1 - o.beta1);
  const bool small_weight = std::abs(avg_weight) < 0.5f;
  const StepScalars scalars = {
      .decay = static_cast<float>(1 - lr * o.weight_decay),
      .lerp_coeff = small_weight ? avg_weight : avg_weight - 1.0f,
      .small_weight = small_weight,
      .beta2 = static_cast<float>(o.beta2),
      .sq_weight = static_cast<float>(1 - o.beta2),
      .bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2)),
      .eps = static_cast<float>(o.eps),
      .neg_step_size = static_cast<float>(-(lr / bias_correction1)),
  };
  float* p = params.data();
  const float* g = grads.data();
  float* m = exp_avg_.data();
  float* v = exp_avg_sq_.data();
  const int64_t num_chunks = static_cast<int64_t>(chunks_.size());
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < num_chunks; ++c) {
    const Chunk k = chunks_[static_cast<size_t>(c)];
    // Multiplying by exactly 1 leaves a value unchanged, so no-decay chunks share the loop.
    update(scalars, k.decay ? scalars.decay : 1.0f, p + k.begin, g + k.begin, m + k.begin,
           v + k.begin, k.end - k.begin);
  }
}

}  // namespace tfm::training
