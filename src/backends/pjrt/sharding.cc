#include "backends/pjrt/sharding.h"

#include <algorithm>
#include <cstring>

#include "graph/graph.h"
#include "tfm/error.h"

namespace tfm::pjrt {
namespace {

int64_t mesh_size(const std::vector<graph::MeshAxis>& mesh) {
  int64_t size = 1;
  for (const graph::MeshAxis& a : mesh) size *= a.size;
  return size;
}

// Device `device`'s coordinate along each mesh axis (the device index is their row-major index).
std::vector<int64_t> mesh_coordinates(const std::vector<graph::MeshAxis>& mesh, int64_t device) {
  std::vector<int64_t> coords(mesh.size());
  for (size_t i = mesh.size(); i-- > 0;) {
    coords[i] = device % mesh[i].size;
    device /= mesh[i].size;
  }
  return coords;
}

size_t axis_index(const std::vector<graph::MeshAxis>& mesh, const std::string& name) {
  for (size_t i = 0; i < mesh.size(); ++i) {
    if (mesh[i].name == name) return i;
  }
  throw Error("partitioning: no mesh axis '" + name + "'");
}

}  // namespace

Sharding::Sharding(const Shape& shape, const std::vector<graph::MeshAxis>& mesh)
    : Sharding(shape, mesh, {}) {}

Sharding::Sharding(const Shape& shape, const std::vector<graph::MeshAxis>& mesh,
                   const std::vector<std::vector<std::string>>& split)
    : shape_(shape), tiles_(shape.size(), 1) {
  TFM_CHECK(split.size() <= shape.size(), "partitioning: more split axes than the value has");
  // The mesh axes each value axis is cut over, where their sizes divide it.
  std::vector<std::vector<size_t>> cut_by(shape.size());
  std::vector<bool> used(mesh.size(), false);
  for (size_t a = 0; a < split.size(); ++a) {
    std::vector<size_t> axes;
    int64_t blocks = 1;
    for (const std::string& name : split[a]) {
      axes.push_back(axis_index(mesh, name));
      blocks *= mesh[axes.back()].size;
    }
    if (blocks == 1 || shape[a] % blocks != 0) continue;
    for (size_t m : axes) {
      TFM_CHECK(!used[m], "partitioning: mesh axis '" + mesh[m].name + "' splits two axes");
      used[m] = true;
    }
    cut_by[a] = std::move(axes);
    tiles_[a] = blocks;
  }
  const int64_t devices = mesh_size(mesh);
  for (int64_t d = 0; d < devices; ++d) {
    const std::vector<int64_t> coords = mesh_coordinates(mesh, d);
    std::vector<int64_t> block(shape.size(), 0);
    for (size_t a = 0; a < shape.size(); ++a) {
      for (size_t m : cut_by[a]) block[a] = block[a] * mesh[m].size + coords[m];
    }
    int64_t replica = 0;
    for (size_t m = 0; m < mesh.size(); ++m) {
      if (!used[m]) replica = replica * mesh[m].size + coords[m];
    }
    blocks_.push_back(std::move(block));
    replica_of_.push_back(replica);
  }
  replicas_ = devices;
  for (int64_t t : tiles_) replicas_ /= t;
}

Shape Sharding::block_shape() const {
  Shape block = shape_;
  for (size_t a = 0; a < block.size(); ++a) block[a] /= tiles_[a];
  return block;
}

bool Sharding::replicated() const {
  return std::all_of(tiles_.begin(), tiles_.end(), [](int64_t t) { return t == 1; });
}

std::string Sharding::text() const {
  if (replicated()) return "{replicated}";
  // The tile array [tiles..., replicas] lists its devices in row-major order.
  std::vector<int64_t> dims = tiles_;
  if (replicas_ > 1) dims.push_back(replicas_);
  std::vector<int64_t> order(blocks_.size());
  for (size_t d = 0; d < blocks_.size(); ++d) {
    int64_t position = 0;
    for (size_t a = 0; a < tiles_.size(); ++a) position = position * tiles_[a] + blocks_[d][a];
    order[static_cast<size_t>(position * replicas_ + replica_of_[d])] = static_cast<int64_t>(d);
  }
  std::string text = "{devices=[";
  for (size_t i = 0; i < dims.size(); ++i) text += (i ? "," : "") + std::to_string(dims[i]);
  text += "]";
  for (size_t i = 0; i < order.size(); ++i) text += (i ? "," : "") + std::to_string(order[i]);
  if (replicas_ > 1) text += " last_tile_dim_replicate";
  return text + "}";
}

void Sharding::copy_block(const std::vector<int64_t>& block, void* whole, void* part,
                          size_t element_bytes, bool to_block) const {
  const Shape inner = block_shape();
  const size_t rank = shape_.size();
  if (rank == 0) {
    std::memcpy(to_block ? part : whole, to_block ? whole : part, element_bytes);
    return;
  }
  // Row by row along the last axis: each is contiguous in both.
  const size_t row_bytes = static_cast<size_t>(inner[rank - 1]) * element_bytes;
  const int64_t rows = shape_numel(inner) / inner[rank - 1];
  std::vector<int64_t> at(rank, 0);  // the row's index within the block (last axis 0)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t offset = 0;  // the row's first element in the whole
    for (size_t a = 0; a < rank; ++a) offset = offset * shape_[a] + block[a] * inner[a] + at[a];
    char* w = static_cast<char*>(whole) + static_cast<size_t>(offset) * element_bytes;
    char* p = static_cast<char*>(part) + static_cast<size_t>(r) * row_bytes;
    std::memcpy(to_block ? p : w, to_block ? w : p, row_bytes);
    for (size_t a = rank - 1; a-- > 0;) {
      if (++at[a] < inner[a]) break;
      at[a] = 0;
    }
  }
}

void Sharding::cut(const void* whole, size_t element_bytes, int device, void* out) const {
  copy_block(blocks_.at(static_cast<size_t>(device)), const_cast<void*>(whole), out, element_bytes,
             true);
}

void Sharding::join(const std::vector<const void*>& blocks, size_t element_bytes,
                    void* whole) const {
  TFM_CHECK(blocks.size() == blocks_.size(), "partitioning: a block for each device");
  for (size_t d = 0; d < blocks.size(); ++d) {
    if (replica_of_[d] != 0) continue;
    copy_block(blocks_[d], whole, const_cast<void*>(blocks[d]), element_bytes, false);
  }
}

std::map<graph::ValueId, Sharding> argument_shardings(const graph::Graph& graph,
                                                      const graph::Partitioning& partitioning,
                                                      const Placements& placements) {
  const std::vector<std::string> every_axis = partitioning.every_axis();
  std::map<graph::ValueId, Sharding> out;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const graph::Node& n = graph.nodes[i];
    if (n.op != graph::Op::kInput && n.op != graph::Op::kWeight) continue;
    const auto id = static_cast<graph::ValueId>(i);
    auto placed = placements.find(id);
    out.emplace(id, placed == placements.end()
                        ? Sharding(n.shape, partitioning.axes, partitioning.split(n))
                        : Sharding({placed->second.size}, partitioning.axes, {every_axis}));
  }
  return out;
}

Partitions partitions_of(const std::map<graph::ValueId, Sharding>& shardings, int devices) {
  Partitions partitions{devices, {}};
  for (const auto& [id, sharding] : shardings) {
    if (!sharding.replicated()) partitions.arguments[id] = sharding.text();
  }
  return partitions;
}

}  // namespace tfm::pjrt
