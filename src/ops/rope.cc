#include <cmath>

#include "graph/op_args.h"
#include "ops/backward.h"
#include "ops/reference.h"
#include "tfm/error.h"

namespace tfm::ops::reference {

// Hugging Face's rotate-half convention: the head is split into halves (x1, x2) and rotated as
// (x1 cos - x2 sin, x2 cos + x1 sin), with angle position * inv_freq[i] for both halves.
void rope(const float* x, const int32_t* positions, const float* inv_freq, int64_t batch,
          int64_t seq, int64_t heads, int64_t head_dim, float attention_scaling, float* out) {
  const int64_t half = head_dim / 2;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = 0; s < seq; ++s) {
      const double position = positions[b * seq + s];
      for (int64_t h = 0; h < heads; ++h) {
        const float* in = x + ((b * seq + s) * heads + h) * head_dim;
        float* o = out + ((b * seq + s) * heads + h) * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const double angle = position * static_cast<double>(inv_freq[i]);
          const double c = std::cos(angle) * attention_scaling;
          const double sn = std::sin(angle) * attention_scaling;
          o[i] = static_cast<float>(in[i] * c - in[i + half] * sn);
          o[i + half] = static_cast<float>(in[i + half] * c + in[i] * sn);
        }
      }
    }
  }
}

}  // namespace tfm::ops::reference

namespace tfm::ops {

// RoPE is a rotation per pair of elements: its transpose rotates by minus the same angle.
InputGrads rope_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy) {
  const graph::RopeArgs a = graph::rope_args(n);
  if (a.norm >= 0) throw Error("[autodiff] RoPE with its norm folded in has no backward rule");
  return {b.rope_grad(dy, a.positions, a.inv_freq, n.scale), -1, -1};
}

}  // namespace tfm::ops
