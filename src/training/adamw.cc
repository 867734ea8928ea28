#include "training/adamw.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "graph/backend.h"
#include "tfm/error.h"

namespace tfm::training {
namespace {

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

}  // namespace

AdamW::AdamW(std::vector<ParamSegment> segments, int64_t total, AdamWOptions options,
             Device device)
    : segments_(std::move(segments)), total_(total), options_(options), device_(device) {
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
    if (!runs_.empty() && runs_.back().offset + runs_.back().numel == s.offset &&
        runs_.back().decay == s.decay) {
      runs_.back().numel += s.numel;
    } else {
      runs_.push_back(s);
    }
    covered = s.offset + s.numel;
  }
  exp_avg_ = Tensor::zeros({total_}, DType::f32, device_);
  exp_avg_sq_ = Tensor::zeros({total_}, DType::f32, device_);
}

void AdamW::step(std::span<float> params, std::span<const float> grads, double lr,
                 float grad_scale) {
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
  const ops::AdamWScalars scalars = {
      .decay = static_cast<float>(1 - lr * o.weight_decay),
      .lerp_coeff = small_weight ? avg_weight : avg_weight - 1.0f,
      .small_weight = small_weight,
      .beta2 = static_cast<float>(o.beta2),
      .sq_weight = static_cast<float>(1 - o.beta2),
      .bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2)),
      .eps = static_cast<float>(o.eps),
      .neg_step_size = static_cast<float>(-(lr / bias_correction1)),
      .grad_scale = grad_scale,
  };
  graph::Backend& backend = graph::backend_for(device_);
  auto* m = exp_avg_.data_as<float>();
  auto* v = exp_avg_sq_.data_as<float>();
  for (const ParamSegment& r : runs_) {
    // Multiplying by exactly 1 leaves a value unchanged: no-decay runs share the update.
    backend.adamw_update(scalars, r.decay ? scalars.decay : 1.0f, params.data() + r.offset,
                         grads.data() + r.offset, m + r.offset, v + r.offset, r.numel);
  }
}

}  // namespace tfm::training
