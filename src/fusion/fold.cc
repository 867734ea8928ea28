// Folds: a step takes over the cast, sum, add or accumulation that followed it.
#include <algorithm>
#include <cstddef>
#include <vector>

#include "fusion/passes.h"
#include "fusion/plan.h"
#include "fusion/rewrite.h"
#include "graph/effects.h"
#include "graph/op_args.h"

namespace tfm::fusion {

using namespace graph;  // the IR this layer rewrites
namespace {

// Does the elementwise node add its inputs and nothing else?
bool sums_its_inputs(const Node& n) {
  int loads = 0, adds = 0;
  for (const EwInstr& i : n.program.instrs) {
    loads += i.code == EwCode::kLoad;
    adds += i.code == EwCode::kAdd;
  }
  return n.op == Op::kElementwise && loads + adds == static_cast<int>(n.program.instrs.size()) &&
         loads == static_cast<int>(n.inputs.size()) && adds == loads - 1;
}

}  // namespace

void fold_casts(Graph& graph, const Target& target) {
  const std::vector<int> uses = count_uses(graph, std::vector<bool>(graph.nodes.size(), false));
  const auto only_use = [&](ValueId v) { return uses[static_cast<size_t>(v)] == 1; };
  for (Node& cast : graph.nodes) {
    if (cast.op != Op::kCast || cast.dtype != DType::bf16) continue;
    // The cast may read the producer through reshapes (heads split or merged) that nothing
    // else reads; they become reshapes of the bf16 result.
    std::vector<Node*> reshapes;
    ValueId from = operand(cast);
    while (graph.nodes[static_cast<size_t>(from)].op == Op::kReshape && only_use(from)) {
      reshapes.push_back(&graph.nodes[static_cast<size_t>(from)]);
      from = operand(*reshapes.back());
    }
    Node& producer = graph.nodes[static_cast<size_t>(from)];
    if (!target.writes_bf16(graph, producer) || producer.dtype != DType::f32 || !only_use(from))
      continue;
    // The producer keeps its place in the order (so it reads its inputs when it always did) and
    // writes bf16; the cast becomes a view of that. A loss gradient written over its f32 logits
    // gets a bf16 buffer of its own instead.
    producer.dtype = cast.dtype;
    producer.in_place = false;
    for (Node* reshape : reshapes) reshape->dtype = cast.dtype;
    cast.op = Op::kReshape;
  }
}

void fold_widening_casts(Graph& graph, const Target&) {
  const std::vector<bool> chains_only =
      read_by_elementwise_only(graph, std::vector<bool>(graph.nodes.size(), false));
  for (size_t c = 0; c < graph.nodes.size(); ++c) {
    Node& cast = graph.nodes[c];
    if (cast.op != Op::kCast || cast.dtype != DType::f32 || !chains_only[c] ||
        graph.nodes[static_cast<size_t>(operand(cast))].dtype != DType::bf16) {
      continue;
    }
    const ValueId narrow = operand(cast);
    for (Node& reader : graph.nodes) {
      if (reader.op != Op::kElementwise) continue;
      std::replace(reader.inputs.begin(), reader.inputs.end(), static_cast<ValueId>(c), narrow);
    }
    leave_for_dead(cast);
  }
}

void fold_gradient_sums(Graph& graph, const Target&) {
  const std::vector<int> uses = count_uses(graph, std::vector<bool>(graph.nodes.size(), false));
  for (Node& sum : graph.nodes) {
    if (sum.op != Op::kElementwise || sum.dtype != DType::f32 || sum.inputs.size() < 2 ||
        !sums_its_inputs(sum)) {
      continue;
    }
    const bool products = std::all_of(sum.inputs.begin(), sum.inputs.end(), [&](ValueId v) {
      const Node& p = graph.nodes[static_cast<size_t>(v)];
      return p.op == Op::kLinearGradInput && !p.in_place && p.dtype == DType::f32 &&
             uses[static_cast<size_t>(v)] == 1 && p.shape == sum.shape;
    });
    if (!products) continue;
    // Each product after the first (in creation order) adds into the one before it, whose
    // buffer nothing else reads; the sum becomes a view of the last.
    std::vector<ValueId> chain = sum.inputs;
    std::sort(chain.begin(), chain.end());
    for (size_t i = 1; i < chain.size(); ++i) {
      Node& p = graph.nodes[static_cast<size_t>(chain[i])];
      LinearGradInputArgs args = linear_grad_input_args(p);
      args.sum = chain[i - 1];
      set_args(p, args);
    }
    sum.op = Op::kReshape;
    sum.inputs = {chain.back()};
    sum.program = {};
  }
}

void fold_residuals_into_norm_grads(Graph& graph, const Target&) {
  fold_adds_into_steps(
      graph, [](const Node& n) { return n.op == Op::kRmsNormGradInput && !n.residual; },
      [](Node& grad, ValueId other) {
        RmsNormGradInputArgs args = rms_norm_grad_input_args(grad);
        args.residual = other;
        set_args(grad, args);
      });
}

void fold_accumulations(Graph& graph, const Target&) {
  const std::vector<int> uses = count_uses(graph, std::vector<bool>(graph.nodes.size(), false));
  const std::vector<bool> early = free_effects(graph);
  for (size_t a = 0; a < graph.nodes.size(); ++a) {
    Node& acc = graph.nodes[a];
    if (acc.op != Op::kAccumulate) continue;
    const AccumulateArgs sum = accumulate_args(acc);
    const auto p = static_cast<size_t>(sum.x);
    Node& product = graph.nodes[p];
    const bool sums = product.op == Op::kLinearGradWeight || product.op == Op::kRmsNormGradWeight;
    if (!sums || product.in_place || uses[p] != 1) continue;
    if (!early[a] && written_between(graph, p, a, product.inputs)) continue;
    // The accumulation becomes the product, adding into what the accumulation added into.
    acc.op = product.op;
    acc.eps = product.eps;
    if (product.op == Op::kLinearGradWeight) {
      LinearGradWeightArgs args = linear_grad_weight_args(product);
      args.acc = sum.acc;
      set_args(acc, args);
    } else {
      RmsNormGradWeightArgs args = rms_norm_grad_weight_args(product);
      args.acc = sum.acc;
      set_args(acc, args);
    }
    leave_for_dead(product);
  }
}

void fold_summed_accumulations(Graph& graph, const Target&) {
  const std::vector<int> uses = count_uses(graph, std::vector<bool>(graph.nodes.size(), false));
  const std::vector<bool> early = free_effects(graph);
  const auto node = [&](ValueId v) -> Node& { return graph.nodes[static_cast<size_t>(v)]; };
  const auto read_once = [&](ValueId v) { return uses[static_cast<size_t>(v)] == 1; };
  for (const StateUpdate& update : graph.updates) {
    const ValueId effect = update.value;
    Node& acc = node(effect);
    if (acc.op != Op::kAccumulate || !early[static_cast<size_t>(effect)]) continue;
    const AccumulateArgs added = accumulate_args(acc);
    const ValueId sum = added.x;
    if (!sums_its_inputs(node(sum)) || node(sum).dtype != DType::f32 || !read_once(sum)) continue;
    // Each term: a weight-gradient product, or a chain of them adding into the first
    // (fold_accumulations), or an embedding's gradient; its first step and its last.
    struct Term {
      ValueId first, last;
    };
    std::vector<Term> terms;
    for (const ValueId last : node(sum).inputs) {
      ValueId first = last;
      while (node(first).op == Op::kLinearGradWeight && node(first).in_place &&
             read_once(linear_grad_weight_args(node(first)).acc)) {
        first = linear_grad_weight_args(node(first)).acc;
      }
      const Node& f = node(first);
      const bool adds =
          (f.op == Op::kLinearGradWeight || (f.op == Op::kEmbeddingGrad && !f.shard)) &&
          !f.in_place && f.dtype == DType::f32 && f.shape == acc.shape;
      if (!adds || !read_once(last)) break;
      terms.push_back({first, last});
    }
    if (terms.size() != node(sum).inputs.size()) continue;
    std::sort(terms.begin(), terms.end(),
              [](const Term& a, const Term& b) { return a.first < b.first; });
    bool apart = true;
    for (size_t i = 1; i < terms.size(); ++i) apart = apart && terms[i].first > terms[i - 1].last;
    if (!apart) continue;
    // Each term's first step adds into what the term before it wrote, the first into the
    // accumulator itself, each where it runs: nothing else reads the accumulator (a free
    // effect's), and the terms run one after the other. The accumulation becomes a view of the
    // last term, the effect that orders them.
    ValueId into = added.acc;
    for (const Term& term : terms) {
      Node& first = node(term.first);
      if (first.op == Op::kLinearGradWeight) {
        LinearGradWeightArgs args = linear_grad_weight_args(first);
        args.acc = into;
        set_args(first, args);
      } else {
        EmbeddingGradArgs args = embedding_grad_args(first);
        args.acc = into;
        set_args(first, args);
      }
      into = term.last;
    }
    leave_for_dead(node(sum));
    acc.op = Op::kReshape;
    acc.inputs = {into};
  }
}

void fuse_rope_grads_into_norm_grads(Graph& graph, const Target&) {
  const std::vector<int> uses = count_uses(graph, std::vector<bool>(graph.nodes.size(), false));
  for (size_t g = 0; g < graph.nodes.size(); ++g) {
    Node& grad = graph.nodes[g];
    if (grad.op != Op::kRmsNormGradInput || !grad.adds_weight_grad || grad.rotated) continue;
    RmsNormGradInputArgs args = rms_norm_grad_input_args(grad);
    const auto r = static_cast<size_t>(args.dy);
    const Node& rope = graph.nodes[r];
    if (rope.op != Op::kRopeGrad || uses[r] != 1 || rope.shape != grad.shape ||
        written_between(graph, r, g, rope.inputs)) {
      continue;
    }
    // RoPE's gradient moves to where the norm's gradient runs, rotating dy as it is loaded.
    const RopeGradArgs rotation = rope_grad_args(rope);
    args.dy = rotation.dy;
    args.positions = rotation.positions;
    args.inv_freq = rotation.inv_freq;
    set_args(grad, args);
    grad.scale = rope.scale;
    leave_for_dead(graph.nodes[r]);
  }
}

void fold_norm_weight_grads(Graph& graph, const Target&) {
  const std::vector<bool> early = free_effects(graph);
  for (StateUpdate& update : graph.updates) {
    ValueId& effect = update.value;
    Node& sums = graph.nodes[static_cast<size_t>(effect)];
    if (sums.op != Op::kRmsNormGradWeight || !sums.in_place || !early[static_cast<size_t>(effect)])
      continue;
    const RmsNormGradWeightArgs added = rms_norm_grad_weight_args(sums);
    const auto grad = std::find_if(graph.nodes.begin(), graph.nodes.end(), [&](const Node& n) {
      if (n.op != Op::kRmsNormGradInput || n.adds_weight_grad || n.eps != sums.eps) return false;
      const RmsNormGradInputArgs args = rms_norm_grad_input_args(n);
      return args.x == added.x && args.dy == added.dy;
    });
    if (grad == graph.nodes.end()) continue;
    // Nothing else reads the accumulator (a free effect's), so the sums may be added when the
    // input gradient runs, which reads the same x and dy. The update is now that step's.
    RmsNormGradInputArgs args = rms_norm_grad_input_args(*grad);
    args.weight_grad = added.acc;
    set_args(*grad, args);
    leave_for_dead(sums);
    effect = static_cast<ValueId>(grad - graph.nodes.begin());
  }
}

void fold_losses_into_gradients(Graph& graph, const Target&) {
  const std::vector<int> uses = count_uses(graph, std::vector<bool>(graph.nodes.size(), false));
  for (size_t g = 0; g < graph.nodes.size(); ++g) {
    Node& grad = graph.nodes[g];
    if (grad.op != Op::kCrossEntropyGrad || !grad.in_place || grad.shard) continue;
    const auto [logits, targets, d_loss] = cross_entropy_grad_args(grad);
    if (uses[static_cast<size_t>(logits)] != 2) continue;
    for (auto l = static_cast<size_t>(logits) + 1; l < g; ++l) {
      Node& loss = graph.nodes[l];
      if (loss.op != Op::kCrossEntropy || loss.shard || loss.in_place) continue;
      CrossEntropyArgs args = cross_entropy_args(loss);
      if (args.logits != logits || args.targets != targets) continue;
      // The loss step reads d_loss and the targets where it runs, earlier than the gradient did:
      // d_loss must exist by then (not a value made from the loss, as a mean's gradient is).
      const Op d_loss_op = graph.nodes[static_cast<size_t>(d_loss)].op;
      const bool d_loss_ready =
          static_cast<size_t>(d_loss) < l || d_loss_op == Op::kInput || d_loss_op == Op::kWeight;
      if (!d_loss_ready || written_between(graph, l, g, {d_loss, targets})) break;
      args.d_loss = d_loss;
      set_args(loss, args);
      // The gradient is then the logits' buffer, read only after the loss step has written it.
      grad.op = Op::kView;
      grad.start = 0;
      grad.in_place = false;
      set_args(grad, ViewArgs{logits, {static_cast<ValueId>(l)}});
      break;
    }
  }
}

void fold_narrow_copies(Graph& graph, const Target& target) {
  for (size_t c = 0; c < graph.nodes.size(); ++c) {
    Node& cast = graph.nodes[c];
    if (cast.op != Op::kCast || cast.dtype != DType::bf16) continue;
    const ValueId g = operand(cast);
    Node& grad = graph.nodes[static_cast<size_t>(g)];
    // The copy is written where the gradient runs: nothing may write the gradient's buffer
    // between there and where the cast read it.
    if (grad.op != Op::kRmsNormGradInput || !grad.adds_weight_grad || grad.dtype != DType::f32 ||
        grad.narrow_copy || written_between(graph, static_cast<size_t>(g), c, {g})) {
      continue;
    }
    grad.narrow_copy = true;
    cast.op = Op::kView;
    cast.start =
        second_result_bytes(grad, target.alignment) / static_cast<int64_t>(dtype_size(cast.dtype));
  }
}

}  // namespace tfm::fusion
