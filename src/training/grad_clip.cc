#include "training/grad_clip.h"

#include <cmath>

#include "graph/builder.h"

namespace tfm::training {

graph::Graph squares_graph(const std::vector<ParamSegment>& counted, int64_t total) {
  graph::Builder b;
  const graph::ValueId grads = b.state("grads", {total}, DType::f32);
  graph::ValueId sum = -1;
  for (const ParamSegment& s : counted) {
    const graph::ValueId part = b.sum_squares(b.view(grads, s.offset, {s.numel}));
    sum = sum < 0 ? part : b.add(sum, part);
  }
  b.output(sum);
  return b.finish();
}

GradSquares::GradSquares(std::vector<ParamSegment> counted, int64_t total, Device device,
                         const graph::Partitioning& partitioning) {
  if (!counted.empty()) {
    sum_ = graph::backend_for(device).compile(
        squares_graph(counted, total), {.partitioning = flat_partitioning(partitioning, total)});
  }
}

float GradSquares::operator()(const Tensor& grads) const {
  if (!sum_) return 0.f;
  return sum_->run({grads}).outputs.at(0).to_f32_vector()[0];
}

double grad_norm(std::span<const float> grads) {
  const auto total = static_cast<int64_t>(grads.size());
  const GradSquares squares({{0, total, true}}, total, kCpu);
  return std::sqrt(
      static_cast<double>(squares(Tensor::borrow(grads.data(), {total}, DType::f32, nullptr))));
}

float clip_coefficient(double norm, double max_norm) {
  // torch forms the coefficient from its f32 norm tensor in f32: max_norm / tensor is
  // Tensor.__rdiv__, the reciprocal times max_norm.
  const float coef = 1.0f / (static_cast<float>(norm) + 1e-6f) * static_cast<float>(max_norm);
  // A NaN coefficient fails the comparison and propagates, as torch's clamp-and-multiply does.
  return coef >= 1.0f ? 1.0f : coef;
}

}  // namespace tfm::training
