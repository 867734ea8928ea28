// How a value of a partitioned program lies over its devices: XLA's tiled sharding. The devices
// form a mesh of named axes (graph::Partitioning); each axis of the value is cut into equal blocks
// over the mesh axes it is split over, and devices that differ only in the other mesh axes hold
// the same block (replicas).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backends/pjrt/stablehlo.h"
#include "graph/mesh.h"
#include "tfm/tensor.h"

namespace tfm::pjrt {

class Sharding {
 public:
  // Whole on every device of `mesh`.
  Sharding(const Shape& shape, const std::vector<graph::MeshAxis>& mesh);
  // `split[a]`: the mesh axes value axis `a` is cut over, major first (missing trailing entries:
  // none). An axis those mesh axes' sizes do not divide stays whole.
  Sharding(const Shape& shape, const std::vector<graph::MeshAxis>& mesh,
           const std::vector<std::vector<std::string>>& split);

  int devices() const { return static_cast<int>(blocks_.size()); }
  const Shape& shape() const { return shape_; }
  Shape block_shape() const;
  bool replicated() const;
  // The mhlo.sharding attribute: "{replicated}", "{devices=[2,2]0,2,1,3}", or with a last tile
  // axis of replicas, "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}".
  std::string text() const;

  // Device `device`'s block of `whole` (row-major elements of `element_bytes` each) into `out`.
  void cut(const void* whole, size_t element_bytes, int device, void* out) const;
  // `whole` from each device's block (blocks[d] is device d's; one copy of each block is read).
  void join(const std::vector<const void*>& blocks, size_t element_bytes, void* whole) const;

  bool operator==(const Sharding&) const = default;

 private:
  // Copies between a block and the whole, `to_block` saying which way.
  void copy_block(const std::vector<int64_t>& block, void* whole, void* part, size_t element_bytes,
                  bool to_block) const;

  Shape shape_;
  std::vector<int64_t> tiles_;              // blocks along each axis of the value
  int64_t replicas_ = 1;                    // devices holding each block
  std::vector<std::vector<int64_t>> blocks_;  // per device: its block's index along each axis
  std::vector<int64_t> replica_of_;         // per device: which of its block's replicas it is
};

// How `partitioning` splits each graph input and weight of `graph`; a node placed in a larger
// buffer (the Trainer's flat parameters and gradients) gets that buffer's, split in equal runs
// over every device where they divide it, as each FSDP rank holds its block of the parameters.
std::map<graph::ValueId, Sharding> argument_shardings(const graph::Graph& graph,
                                                      const graph::Partitioning& partitioning,
                                                      const Placements& placements = {});
// The module's partitions: the shardings of the values that are not whole on every device.
Partitions partitions_of(const std::map<graph::ValueId, Sharding>& shardings, int devices);

}  // namespace tfm::pjrt
