#include "graph/graph.h"

#include <algorithm>

namespace tfm::graph {

const char* op_name(Op op) {
  switch (op) {
    case Op::kInput:
      return "input";
    case Op::kWeight:
      return "weight";
    case Op::kEmbedding:
      return "embedding";
    case Op::kLinear:
      return "linear";
    case Op::kRmsNorm:
      return "rms_norm";
    case Op::kRope:
      return "rope";
    case Op::kCacheWrite:
      return "cache_write";
    case Op::kAttention:
      return "attention";
    case Op::kSliceSeq:
      return "slice_seq";
    case Op::kReshape:
      return "reshape";
    case Op::kElementwise:
      return "elementwise";
  }
  return "?";
}

ValueId Graph::add(Node node) {
  nodes.push_back(std::move(node));
  return static_cast<ValueId>(nodes.size() - 1);
}

std::vector<ValueId> Graph::inputs() const {
  std::vector<ValueId> ids;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (nodes[i].op == Op::kInput) ids.push_back(static_cast<ValueId>(i));
  }
  return ids;
}

std::string Graph::describe(ValueId id) const {
  const Node& n = nodes[static_cast<size_t>(id)];
  return std::string(op_name(n.op)) + (n.name.empty() ? "" : " '" + n.name + "'") + " " +
         shape_str(n.shape) + " " + std::string(dtype_name(n.dtype));
}

int program_depth(const ElementwiseProgram& program) {
  int depth = 0, deepest = 0;
  for (const EwInstr& instr : program.instrs) {
    if (instr.code == EwCode::kLoad) deepest = std::max(deepest, ++depth);
    if (instr.code == EwCode::kAdd || instr.code == EwCode::kMul) --depth;
  }
  return deepest;
}

bool aliases_input(const Node& node) {
  return node.op == Op::kReshape || node.op == Op::kCacheWrite;
}

}  // namespace tfm::graph
