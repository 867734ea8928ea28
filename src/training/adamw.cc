#include "training/adamw.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "graph/builder.h"
#include "ops/adamw.h"
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

graph::Graph update_graph(const std::vector<ParamSegment>& runs, int64_t total) {
  graph::Builder b;
  const Shape flat{total};
  const graph::ValueId params = b.state("params", flat, DType::f32);
  const graph::ValueId grads = b.state("grads", flat, DType::f32);
  const graph::ValueId exp_avg = b.state("exp_avg", flat, DType::f32);
  const graph::ValueId exp_avg_sq = b.state("exp_avg_sq", flat, DType::f32);
  const graph::ValueId scalars = b.input("scalars", {graph::kAdamWScalars}, DType::f32);
  std::vector<graph::ValueId> steps;
  for (const ParamSegment& r : runs) {
    const auto part = [&](graph::ValueId buffer) { return b.view(buffer, r.offset, {r.numel}); };
    steps.push_back(
        b.adamw(part(params), part(grads), part(exp_avg), part(exp_avg_sq), scalars, r.decay));
  }
  for (const graph::ValueId written : {params, exp_avg, exp_avg_sq}) b.updated(written, steps);
  return b.finish();
}

graph::Partitioning flat_partitioning(const graph::Partitioning& step, int64_t total) {
  graph::Partitioning flat;
  if (step.devices() == 1) return flat;
  flat.axes = step.axes;
  flat.split = [every_axis = step.every_axis(),
                total](const graph::Node& n) -> std::vector<std::vector<std::string>> {
    if (n.shape == Shape{total}) return {every_axis};
    return {};
  };
  return flat;
}

AdamW::AdamW(std::vector<ParamSegment> segments, int64_t total, AdamWOptions options, Device device,
             const graph::Partitioning& partitioning)
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
  update_ = graph::backend_for(device_).compile(
      update_graph(runs_, total_), {.partitioning = flat_partitioning(partitioning, total_)});
}

void AdamW::step(Tensor& params, const Tensor& grads, double lr, float grad_scale) {
  const Shape flat{total_};
  if (params.shape() != flat || grads.shape() != flat || params.dtype() != DType::f32 ||
      grads.dtype() != DType::f32) {
    fail("step given parameters " + shape_str(params.shape()) + " and gradients " +
         shape_str(grads.shape()) + ", expected f32 " + shape_str(flat));
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
  Tensor packed = Tensor::empty({graph::kAdamWScalars}, DType::f32);
  ops::pack(scalars, packed.data_as<float>());
  graph::RunResult result = update_->run({params, grads, exp_avg_, exp_avg_sq_, packed});
  params = result.state.at(0);
  exp_avg_ = result.state.at(2);
  exp_avg_sq_ = result.state.at(3);
}

void AdamW::step(std::span<float> params, std::span<const float> grads, double lr,
                 float grad_scale) {
  if (device_ != kCpu) fail("host buffers given to an optimizer on " + device_.str());
  if (static_cast<int64_t>(params.size()) != total_ ||
      static_cast<int64_t>(grads.size()) != total_) {
    fail("step given " + std::to_string(params.size()) + " parameters and " +
         std::to_string(grads.size()) + " gradients, expected " + std::to_string(total_));
  }
  Tensor p = Tensor::borrow(params.data(), {total_}, DType::f32, nullptr);
  const Tensor g = Tensor::borrow(grads.data(), {total_}, DType::f32, nullptr);
  step(p, g, lr, grad_scale);
}

}  // namespace tfm::training
