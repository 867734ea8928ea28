#include <algorithm>
#include <cmath>

#include "graph/effects.h"
#include "graph/op_args.h"
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

namespace {

// Are the logits read by the loss alone? Then their gradient may be written over them: logits are
// the largest value of a training step (tokens x vocabulary), and this halves what they take.
bool only_the_loss_reads(const graph::Graph& graph, graph::ValueId logits) {
  const graph::Node& n = graph.nodes[static_cast<size_t>(logits)];
  if (graph::aliases_input(n) || n.op == graph::Op::kInput || n.op == graph::Op::kWeight) {
    return false;
  }
  if (std::find(graph.outputs.begin(), graph.outputs.end(), logits) != graph.outputs.end()) {
    return false;
  }
  int readers = 0;
  for (const graph::Node& node : graph.nodes) {
    readers += static_cast<int>(std::count(node.inputs.begin(), node.inputs.end(), logits));
  }
  return readers <= 1;
}

}  // namespace

InputGrads cross_entropy_backward(graph::Builder& b, const graph::Node& n, graph::ValueId dy) {
  const graph::CrossEntropyArgs a = graph::cross_entropy_args(n);
  const graph::ValueId d_logits =
      b.cross_entropy_grad(a.logits, a.targets, dy, only_the_loss_reads(b.graph(), a.logits));
  return {n.shard ? b.as_vocab_shard(d_logits, n) : d_logits, -1};
}

}  // namespace tfm::ops
