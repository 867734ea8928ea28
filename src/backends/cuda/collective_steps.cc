#include "backends/cuda/collective_steps.h"

#include "backends/cuda/kernels.h"
#include "backends/cuda/nccl_group.h"
#include "tfm/error.h"

namespace tfm::cuda {
namespace {

using graph::Node;
using graph::Op;

size_t count_of(const Shape& shape) { return static_cast<size_t>(shape_numel(shape)); }

}  // namespace

size_t collective_scratch_bytes(const graph::Graph& graph, graph::ValueId id) {
  const Node& n = graph.nodes[static_cast<size_t>(id)];
  // Every rank's copy, gathered before it is rearranged or summed.
  if (n.op == Op::kAllGather || n.op == Op::kSumOverReplicas) {
    const size_t copies = static_cast<size_t>(n.group->size());
    return count_of(node_of(graph, graph::operand(n)).shape) * copies * sizeof(float);
  }
  return 0;
}

std::optional<Step> make_collective_step(const graph::Graph& graph, graph::ValueId id) {
  const Node& n = graph.nodes[static_cast<size_t>(id)];
  switch (n.op) {
    case Op::kAllReduce:
    case Op::kAllGather:
    case Op::kGatherShards:
    case Op::kReduceScatter:
    case Op::kSumOverReplicas:
    case Op::kAllToAll:
      break;
    case Op::kCopyToGroup: {
      const size_t x = slot(graph::operand(n)), out = slot(id);
      return [=](StepContext& c) { c.ptrs[out] = c.ptrs[x]; };
    }
    default:
      return std::nullopt;
  }
  if (n.dtype != DType::f32) {
    throw Error(std::string("[cuda] ") + graph::op_name(n.op) + " runs on f32 values, got " +
                std::string(dtype_name(n.dtype)));
  }
  NcclGroup* group = &nccl_group(*n.group->communicator);
  const size_t x = slot(graph::operand(n)), out = slot(id);
  const Shape& in_shape = node_of(graph, graph::operand(n)).shape;
  const size_t in_count = count_of(in_shape), out_count = count_of(n.shape);
  switch (n.op) {
    case Op::kAllReduce:
      return [=](StepContext& c) {
        group->all_reduce_sum(f32_at(c, x), f32_at(c, out), out_count, c.stream);
      };
    case Op::kGatherShards:
      return [=](StepContext& c) {
        group->all_gather(f32_at(c, x), in_count, f32_at(c, out), c.stream);
      };
    case Op::kReduceScatter:
      return [=](StepContext& c) {
        group->reduce_scatter_sum(f32_at(c, x), out_count, f32_at(c, out), c.stream);
      };
    case Op::kAllToAll: {
      const size_t block = out_count / static_cast<size_t>(n.group->size());
      return
          [=](StepContext& c) { group->all_to_all(f32_at(c, x), block, f32_at(c, out), c.stream); };
    }
    case Op::kAllGather: {
      const int64_t cols = in_shape.back(), rows = shape_numel(in_shape) / cols,
                    ranks = n.group->size();
      return [=](StepContext& c) {
        auto* gathered = static_cast<float*>(c.scratch);
        group->all_gather(f32_at(c, x), in_count, gathered, c.stream);
        interleave_gathered(gathered, rows, cols, ranks, f32_at(c, out), c.stream);
      };
    }
    default: {  // kSumOverReplicas: the block of `start` neighbouring ranks this rank is in
      const int64_t block = n.start, first = n.group->rank() / block * block;
      return [=](StepContext& c) {
        auto* all = static_cast<float*>(c.scratch);
        group->all_gather(f32_at(c, x), in_count, all, c.stream);
        sum_replica_block(all, static_cast<int64_t>(in_count), first, block, f32_at(c, out),
                          c.stream);
      };
    }
  }
}

}  // namespace tfm::cuda
