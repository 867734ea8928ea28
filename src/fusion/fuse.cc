// Fusion: elementwise chains into one step, sibling chains into one step of two results, and
// per-head norms into RoPE (passes.h).
#include <algorithm>
#include <cstddef>
#include <vector>

#include "fusion/passes.h"
#include "fusion/plan.h"
#include "fusion/rewrite.h"
#include "graph/op_args.h"

namespace tfm::fusion {

using namespace graph;  // the IR this layer rewrites
namespace {

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

// Would a chain of `program` over `inputs` distinct inputs pass what the kernel holds?
bool exceeds(const ElementwiseLimits& limits, const ElementwiseProgram& program, int inputs) {
  return program_depth(program) > limits.depth ||
         program.instrs.size() > static_cast<size_t>(limits.instrs) || inputs > limits.inputs;
}

}  // namespace

// Dead producers are turned into inputs-less elementwise nodes that nothing uses; the plan
// schedules only nodes that something uses.
void fuse_elementwise(Graph& graph, const Target& target) {
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
        // by the gated product and by both projections' gradients) is computed again inside each
        // of them: they read its input instead, as many bytes, and it is never written.
        const bool copied = uses[p] > 1 && elementwise_readers[p] && loaded_inputs(producer) == 1 &&
                            producer.dtype == DType::f32;
        if ((uses[p] != 1 && !copied) || written_between(graph, p, i, producer.inputs)) continue;
        Node fused = consumer;
        inline_producer(fused, static_cast<int>(slot), producer);
        if (exceeds(target.elementwise, fused.program, loaded_inputs(fused))) {
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

void pair_elementwise_siblings(Graph& graph, const Target& target) {
  // A sibling further on would hold its result from the first's step that much longer.
  constexpr size_t kReach = 8;
  const std::vector<int> uses = count_uses(graph, std::vector<bool>(graph.nodes.size(), false));
  std::vector<bool> effect(graph.nodes.size(), false);  // state updates keep their own steps
  for (const StateUpdate& u : graph.updates) effect[static_cast<size_t>(u.value)] = true;
  const auto single = [&](size_t i) {
    const Node& n = graph.nodes[i];
    return n.op == Op::kElementwise && !n.inputs.empty() && n.program.results == 1 && !effect[i] &&
           uses[i] > 0;
  };
  for (size_t a = 0; a < graph.nodes.size(); ++a) {
    if (!single(a)) continue;
    for (size_t b = a + 1; b < std::min(graph.nodes.size(), a + 1 + kReach); ++b) {
      if (!single(b)) continue;
      Node& first = graph.nodes[a];
      Node& second = graph.nodes[b];
      const std::vector<ValueId>& reads = second.inputs;
      const auto read_by_first = [&](ValueId v) {
        return std::find(first.inputs.begin(), first.inputs.end(), v) != first.inputs.end();
      };
      const bool ready = std::all_of(reads.begin(), reads.end(), [&](ValueId v) {
        const Op op = graph.nodes[static_cast<size_t>(v)].op;
        return static_cast<size_t>(v) < a || op == Op::kInput || op == Op::kWeight;
      });
      if (first.shape != second.shape || first.dtype != second.dtype || !ready ||
          std::none_of(reads.begin(), reads.end(), read_by_first) ||
          written_between(graph, a, b, reads)) {
        continue;
      }
      Node both = first;
      for (EwInstr instr : second.program.instrs) {
        if (instr.code == EwCode::kLoad) {
          const ValueId v = reads[static_cast<size_t>(instr.operand)];
          const auto at = std::find(both.inputs.begin(), both.inputs.end(), v);
          instr.operand = static_cast<int>(at - both.inputs.begin());
          if (at == both.inputs.end()) both.inputs.push_back(v);
        }
        both.program.instrs.push_back(instr);
      }
      both.program.results = 2;
      both.name += "&" + second.name;
      if (exceeds(target.elementwise, both.program, static_cast<int>(both.inputs.size()))) {
        continue;
      }
      Node view;
      view.op = Op::kView;
      view.inputs = {static_cast<ValueId>(a)};
      view.shape = second.shape;
      view.dtype = second.dtype;
      view.start = second_result_bytes(both, target.alignment) /
                   static_cast<int64_t>(dtype_size(both.dtype));
      view.name = second.name;
      first = std::move(both);
      second = std::move(view);
      break;
    }
  }
}

void fuse_norms_into_rope(Graph& graph, const Target&) {
  const std::vector<int> uses = count_uses(graph, std::vector<bool>(graph.nodes.size(), false));
  for (size_t r = 0; r < graph.nodes.size(); ++r) {
    Node& rope = graph.nodes[r];
    if (rope.op != Op::kRope || rope.normed) continue;
    RopeArgs args = rope_args(rope);
    const auto v = static_cast<size_t>(args.x);
    Node& norm = graph.nodes[v];
    if (norm.op != Op::kRmsNorm || norm.dtype != DType::f32 || uses[v] != 1 ||
        norm.shape != rope.shape || written_between(graph, v, r, norm.inputs)) {
      continue;
    }
    const RmsNormArgs normed = rms_norm_args(norm);
    args.x = normed.x;
    args.norm = normed.w;
    set_args(rope, args);
    rope.eps = norm.eps;
    leave_for_dead(norm);
  }
}

}  // namespace tfm::fusion
