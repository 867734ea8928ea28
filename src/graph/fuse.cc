#include <algorithm>
#include <cstddef>
#include <vector>

#include "graph/plan.h"

namespace tfm::graph {
namespace {

// Does the node read its input `slot`? An elementwise node whose producer was inlined keeps the
// slot (until the inputs are compacted) but no longer loads it.
bool reads_slot(const Node& node, size_t slot) {
  if (node.op != Op::kElementwise) return true;
  return std::any_of(node.program.instrs.begin(), node.program.instrs.end(), [&](const EwInstr& i) {
    return i.code == EwCode::kLoad && static_cast<size_t>(i.operand) == slot;
  });
}

std::vector<int> count_uses(const Graph& graph, const std::vector<bool>& dead) {
  std::vector<int> uses(graph.nodes.size(), 0);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (dead[i]) continue;
    const Node& node = graph.nodes[i];
    for (size_t slot = 0; slot < node.inputs.size(); ++slot) {
      if (reads_slot(node, slot)) ++uses[static_cast<size_t>(node.inputs[slot])];
    }
  }
  for (ValueId out : graph.outputs) ++uses[static_cast<size_t>(out)];
  for (ValueId effect : graph.effects) ++uses[static_cast<size_t>(effect)];
  return uses;
}

// Rewrites `consumer` so that its load of input `slot` runs `producer`'s program instead.
void inline_producer(Node& consumer, int slot, const Node& producer) {
  const int base = static_cast<int>(consumer.inputs.size());
  consumer.inputs.insert(consumer.inputs.end(), producer.inputs.begin(), producer.inputs.end());
  ElementwiseProgram merged;
  for (const EwInstr& instr : consumer.program.instrs) {
    if (instr.code == EwCode::kLoad && instr.operand == slot) {
      for (EwInstr inner : producer.program.instrs) {
        if (inner.code == EwCode::kLoad) inner.operand += base;
        merged.instrs.push_back(inner);
      }
    } else {
      merged.instrs.push_back(instr);
    }
  }
  consumer.program = std::move(merged);
  consumer.name += "+" + producer.name;
}

// The ops whose kernels write bf16 as readily as f32.
bool writes_bf16(Op op) {
  return op == Op::kRmsNorm || op == Op::kElementwise || op == Op::kRope ||
         op == Op::kCrossEntropyGrad || op == Op::kRmsNormGradInput;
}

// The buffer a value lives in: its own, or (through views and in-place steps) an earlier one's.
ValueId storage_of(const Graph& graph, ValueId v) {
  while (aliases_input(graph.nodes[static_cast<size_t>(v)])) {
    v = graph.nodes[static_cast<size_t>(v)].inputs[0];
  }
  return v;
}

// Does a node created after `from` and before `to` write in place into the buffer of one of
// `reads`? A step reading them may move from `from` to `to` only where none does.
bool written_between(const Graph& graph, size_t from, size_t to,
                     const std::vector<ValueId>& reads) {
  std::vector<ValueId> owners;
  for (ValueId v : reads) owners.push_back(storage_of(graph, v));
  const auto read = [&](ValueId v) {
    return std::find(owners.begin(), owners.end(), storage_of(graph, v)) != owners.end();
  };
  for (size_t i = from + 1; i < to; ++i) {
    const Node& n = graph.nodes[i];
    if ((n.op == Op::kAccumulate || (aliases_input(n) && n.in_place)) && read(n.inputs[0])) {
      return true;
    }
    if (n.op == Op::kPrepareAttention && (read(n.inputs[6]) || read(n.inputs[7]))) return true;
  }
  return false;
}

// How many distinct values a fused chain loads.
int loaded_inputs(const Node& n) {
  std::vector<ValueId> loaded;
  for (const EwInstr& i : n.program.instrs) {
    const ValueId v = n.inputs[static_cast<size_t>(i.operand)];
    if (i.code == EwCode::kLoad && std::find(loaded.begin(), loaded.end(), v) == loaded.end()) {
      loaded.push_back(v);
    }
  }
  return static_cast<int>(loaded.size());
}

// Is every use of each value by an elementwise node (not an output, an effect or another op)?
std::vector<bool> read_by_elementwise_only(const Graph& graph, const std::vector<bool>& dead) {
  std::vector<bool> only(graph.nodes.size(), true);
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (dead[i] || graph.nodes[i].op == Op::kElementwise) continue;
    for (ValueId in : graph.nodes[i].inputs) only[static_cast<size_t>(in)] = false;
  }
  for (ValueId out : graph.outputs) only[static_cast<size_t>(out)] = false;
  for (ValueId effect : graph.effects) only[static_cast<size_t>(effect)] = false;
  return only;
}

}  // namespace

// Dead producers are turned into inputs-less elementwise nodes that nothing uses; plan_graph
// schedules only nodes that something uses.
void fuse_elementwise(Graph& graph) {
  std::vector<bool> dead(graph.nodes.size(), false);
  bool changed = true;
  while (changed) {
    changed = false;
    const std::vector<int> uses = count_uses(graph, dead);
    const std::vector<bool> elementwise_readers = read_by_elementwise_only(graph, dead);
    for (size_t i = 0; i < graph.nodes.size() && !changed; ++i) {
      Node& consumer = graph.nodes[i];
      if (dead[i] || consumer.op != Op::kElementwise) continue;
      for (size_t slot = 0; slot < consumer.inputs.size(); ++slot) {
        const auto p = static_cast<size_t>(consumer.inputs[slot]);
        const Node& producer = graph.nodes[p];
        if (dead[p] || producer.op != Op::kElementwise || !reads_slot(consumer, slot)) continue;
        // A function of one f32 value that only elementwise chains read (SiLU of the gate, read
        // by the backward pass's recomputed product and the up projection's gradient) is
        // computed again inside each of them: they read its input instead, as many bytes, and
        // it is never written.
        const bool copied = uses[p] > 1 && elementwise_readers[p] && producer.inputs.size() == 1 &&
                            producer.dtype == DType::f32;
        if ((uses[p] != 1 && !copied) || written_between(graph, p, i, producer.inputs)) continue;
        Node fused = consumer;
        inline_producer(fused, static_cast<int>(slot), producer);
        if (program_depth(fused.program) > kMaxElementwiseDepth ||
            fused.program.instrs.size() > static_cast<size_t>(kMaxElementwiseInstrs) ||
            loaded_inputs(fused) > kMaxElementwiseInputs) {
          continue;
        }
        consumer = std::move(fused);
        dead[p] = uses[p] == 1;
        changed = true;
        break;
      }
    }
  }
  // The inlined loads left unused operands behind; compact each fused node's inputs.
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    Node& n = graph.nodes[i];
    if (dead[i]) {
      n.inputs.clear();
      continue;
    }
    if (n.op != Op::kElementwise) continue;
    std::vector<ValueId> compact;
    std::vector<int> remap(n.inputs.size(), -1);
    for (EwInstr& instr : n.program.instrs) {
      if (instr.code != EwCode::kLoad) continue;
      auto& slot = remap[static_cast<size_t>(instr.operand)];
      if (slot < 0) {
        slot = static_cast<int>(compact.size());
        compact.push_back(n.inputs[static_cast<size_t>(instr.operand)]);
      }
      instr.operand = slot;
    }
    n.inputs = std::move(compact);
  }
}

void fold_casts(Graph& graph) {
  const std::vector<int> uses = count_uses(graph, std::vector<bool>(graph.nodes.size(), false));
  const auto only_use = [&](ValueId v) { return uses[static_cast<size_t>(v)] == 1; };
  for (Node& cast : graph.nodes) {
    if (cast.op != Op::kCast || cast.dtype != DType::bf16) continue;
    // The cast may read the producer through reshapes (heads split or merged) that nothing
    // else reads; they become reshapes of the bf16 result.
    std::vector<Node*> reshapes;
    ValueId from = cast.inputs[0];
    while (graph.nodes[static_cast<size_t>(from)].op == Op::kReshape && only_use(from)) {
      reshapes.push_back(&graph.nodes[static_cast<size_t>(from)]);
      from = reshapes.back()->inputs[0];
    }
    Node& producer = graph.nodes[static_cast<size_t>(from)];
    if (!writes_bf16(producer.op) || producer.dtype != DType::f32 || !only_use(from)) continue;
    // The producer keeps its place in the order (so it reads its inputs when it always did) and
    // writes bf16; the cast becomes a view of that. A loss gradient written over its f32 logits
    // gets a bf16 buffer of its own instead.
    producer.dtype = cast.dtype;
    producer.in_place = false;
    for (Node* reshape : reshapes) reshape->dtype = cast.dtype;
    cast.op = Op::kReshape;
  }
}

void fuse_norms_into_rope(Graph& graph) {
  const std::vector<int> uses = count_uses(graph, std::vector<bool>(graph.nodes.size(), false));
  for (size_t r = 0; r < graph.nodes.size(); ++r) {
    Node& rope = graph.nodes[r];
    if (rope.op != Op::kRope || rope.normed) continue;
    const auto v = static_cast<size_t>(rope.inputs[0]);
    Node& norm = graph.nodes[v];
    if (norm.op != Op::kRmsNorm || norm.dtype != DType::f32 || uses[v] != 1 ||
        norm.shape != rope.shape || written_between(graph, v, r, norm.inputs)) {
      continue;
    }
    rope.inputs[0] = norm.inputs[0];
    rope.inputs.push_back(norm.inputs[1]);
    rope.normed = true;
    rope.eps = norm.eps;
    // Left for dead, as fuse_elementwise leaves its producers.
    const Shape shape = norm.shape;
    norm = Node{};
    norm.op = Op::kElementwise;
    norm.shape = shape;
  }
}

void fold_gradient_sums(Graph& graph) {
  const std::vector<int> uses = count_uses(graph, std::vector<bool>(graph.nodes.size(), false));
  const auto sums_its_inputs = [](const Node& n) {
    int loads = 0, adds = 0;
    for (const EwInstr& i : n.program.instrs) {
      loads += i.code == EwCode::kLoad;
      adds += i.code == EwCode::kAdd;
    }
    return loads + adds == static_cast<int>(n.program.instrs.size()) &&
           loads == static_cast<int>(n.inputs.size()) && adds == loads - 1;
  };
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
      p.inputs.insert(p.inputs.begin(), chain[i - 1]);
      p.in_place = true;
    }
    sum.op = Op::kReshape;
    sum.inputs = {chain.back()};
    sum.program = {};
  }
}

void fold_residuals_into_norm_grads(Graph& graph) {
  const std::vector<int> uses = count_uses(graph, std::vector<bool>(graph.nodes.size(), false));
  const auto is_load = [](const EwInstr& i) { return i.code == EwCode::kLoad; };
  for (size_t a = 0; a < graph.nodes.size(); ++a) {
    Node& add = graph.nodes[a];
    const auto& code = add.program.instrs;
    if (add.op != Op::kElementwise || add.dtype != DType::f32 || add.inputs.size() != 2 ||
        code.size() != 3 || !is_load(code[0]) || !is_load(code[1]) ||
        code[2].code != EwCode::kAdd) {
      continue;
    }
    for (size_t slot = 0; slot < 2; ++slot) {
      const auto g = static_cast<size_t>(add.inputs[slot]);
      const ValueId other = add.inputs[1 - slot];
      Node& grad = graph.nodes[g];
      if (grad.op != Op::kRmsNormGradInput || grad.residual || grad.dtype != DType::f32 ||
          uses[g] != 1 || grad.shape != add.shape ||
          graph.nodes[static_cast<size_t>(other)].dtype != DType::f32 ||
          written_between(graph, g, a, grad.inputs)) {
        continue;
      }
      // The gradient moves to where the add ran, adding the other operand as it writes; its own
      // node is left for dead.
      Node fused = grad;
      fused.inputs.push_back(other);
      fused.residual = true;
      add = std::move(fused);
      const Shape shape = grad.shape;
      grad = Node{};
      grad.op = Op::kElementwise;
      grad.shape = shape;
      break;
    }
  }
}

void fold_accumulations(Graph& graph) {
  const std::vector<int> uses = count_uses(graph, std::vector<bool>(graph.nodes.size(), false));
  const std::vector<bool> early = free_effects(graph);
  for (size_t a = 0; a < graph.nodes.size(); ++a) {
    Node& acc = graph.nodes[a];
    if (acc.op != Op::kAccumulate) continue;
    const auto p = static_cast<size_t>(acc.inputs[1]);
    Node& product = graph.nodes[p];
    const bool sums = product.op == Op::kLinearGradWeight || product.op == Op::kRmsNormGradWeight;
    if (!sums || product.in_place || uses[p] != 1) continue;
    if (!early[a] && written_between(graph, p, a, product.inputs)) continue;
    // The accumulation becomes the product, adding into what the accumulation added into; the
    // product's own node is left for dead, as fuse_elementwise leaves its producers.
    acc.op = product.op;
    acc.eps = product.eps;
    acc.in_place = true;
    acc.inputs = {acc.inputs[0], product.inputs[0], product.inputs[1]};
    product = Node{};
    product.op = Op::kElementwise;
    product.shape = acc.shape;
  }
}

}  // namespace tfm::graph
