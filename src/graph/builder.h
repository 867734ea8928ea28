// What models call to describe a computation. Each call checks shapes (src/ops/shapes) and adds
// one node; nothing runs until a backend compiles the graph.
#pragma once

#include <string>

#include "graph/graph.h"

namespace tfm::graph {

class Builder {
 public:
  ValueId input(std::string name, Shape shape, DType dtype);
  ValueId state(std::string name, Shape shape, DType dtype);  // e.g. a KV cache buffer
  ValueId weight(std::string name, Tensor tensor);

  ValueId embedding(ValueId table, ValueId ids);
  ValueId linear(ValueId x, ValueId w, ValueId bias = -1);
  ValueId rms_norm(ValueId x, ValueId w, float eps);
  ValueId rope(ValueId x, ValueId positions, ValueId inv_freq, float attention_scaling);
  ValueId cache_write(ValueId cache, ValueId update, ValueId slots);
  ValueId attention(ValueId q, ValueId k, ValueId v, ValueId mask, ValueId slots, float scale);
  ValueId slice_seq(ValueId x, int64_t start, int64_t length);
  ValueId reshape(ValueId x, Shape shape);
  ValueId add(ValueId a, ValueId b);
  ValueId mul(ValueId a, ValueId b);
  ValueId silu(ValueId x);

  const Shape& shape(ValueId id) const { return graph_.nodes[static_cast<size_t>(id)].shape; }
  void output(ValueId id) { graph_.outputs.push_back(id); }
  Graph finish() { return std::move(graph_); }

 private:
  ValueId add_node(Op op, std::vector<ValueId> inputs, Shape shape, std::string name = {});
  ValueId elementwise(const char* name, std::vector<ValueId> inputs, ElementwiseProgram program);
  const Node& node(ValueId id) const;

  Graph graph_;
};

}  // namespace tfm::graph
