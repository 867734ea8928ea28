#include "backends/cpu/collective_steps.h"

#include <cstring>
#include <memory>

#include "backends/cpu/kernels.h"
#include "graph/op_args.h"
#include "tfm/error.h"

namespace tfm::cpu {

std::function<void()> make_collective_step(const graph::Graph& graph, graph::ValueId id,
                                           std::vector<void*>& ptrs) {
  const graph::Node& n = graph.nodes[static_cast<size_t>(id)];
  const graph::ValueId x = graph::operand(n);
  const Shape& in = graph.nodes[static_cast<size_t>(x)].shape;
  const auto in_count = static_cast<size_t>(shape_numel(in));
  const auto out_count = static_cast<size_t>(shape_numel(n.shape));
  // Buffers by id, looked up when the step runs; the group lives as long as the graph.
  const auto f = [&ptrs](graph::ValueId v) {
    return static_cast<float*>(ptrs[static_cast<size_t>(v)]);
  };
  graph::Communicator* group = n.group->communicator.get();
  switch (n.op) {
    case graph::Op::kAllReduce:
      return [=] {
        std::memcpy(f(id), f(x), out_count * sizeof(float));
        group->all_reduce_sum(f(id), out_count);
      };
    case graph::Op::kAllGather: {
      const int64_t cols = in.back(), rows = shape_numel(in) / cols;
      return [=] {
        std::vector<float> gathered(in_count * static_cast<size_t>(group->size()));
        group->all_gather(f(x), in_count, gathered.data());
        interleave_gathered(gathered.data(), rows, cols, group->size(), f(id));
      };
    }
    case graph::Op::kGatherShards:
      // A weight FSDP shards: the f32 master weights (bf16 ones are gathered nowhere).
      if (n.dtype != DType::f32) {
        throw Error("[gather_shards] needs f32 operands on cpu, got " +
                    std::string(dtype_name(n.dtype)) + " for '" + n.name + "'");
      }
      return [=] { group->all_gather(f(x), in_count, f(id)); };
    case graph::Op::kSumOverReplicas: {
      // The block of `start` neighbouring ranks this rank is in.
      const int64_t block = n.start;
      return [=] {
        std::vector<float> all(out_count * static_cast<size_t>(group->size()));
        group->all_gather(f(x), out_count, all.data());
        sum_replica_block(all.data(), out_count, group->rank() / block * block, block, f(id));
      };
    }
    case graph::Op::kReduceScatter:
      return [=] { group->reduce_scatter_sum(f(x), out_count, f(id)); };
    default:  // kAllToAll: a block of the rows for each rank
      return
          [=] { group->all_to_all(f(x), out_count / static_cast<size_t>(group->size()), f(id)); };
  }
}

}  // namespace tfm::cpu
