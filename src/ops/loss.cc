#include <cmath>

#include "ops/backward.h"
#include "ops/reference.h"
#include "tfm/error.h"

namespace tfm::ops::reference {

double cross_entropy(const float* logits, const int32_t* targets, int64_t rows, int64_t vocab) {
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (targets[r] == graph::kIgnoreIndex) continue;
    TFM_CHECK(targets[r] >= 0 && targets[r] < vocab, "[cross_entropy] target out of range");
    const float* row = logits + r * vocab;
    double max_logit = -INFINITY, sum = 0;
    for (int64_t v = 0; v < vocab; ++v) max_logit = std::max(max_logit, double{row[v]});
    for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - max_logit);
    total += std::log(sum) + max_logit - row[targets[r]];
  }
  return total;
}

}  // namespace tfm::ops::reference

namespace tfm::ops {

InputGrads cross_entropy_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy) {
  const graph::ValueId d_logits = b.cross_entropy_grad(n.inputs[0], n.inputs[1], dy);
  return {n.shard ? b.as_vocab_shard(d_logits, n) : d_logits, -1};
}

}  // namespace tfm::ops
