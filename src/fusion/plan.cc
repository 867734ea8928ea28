#include "fusion/plan.h"

#include <algorithm>
#include <map>

#include "graph/effects.h"

namespace tfm::fusion {

using namespace graph;  // the IR this layer rewrites

std::vector<bool> free_effects(const Graph& graph) {
  std::vector<int> readers(graph.nodes.size(), 0);
  for (const Node& n : graph.nodes) {
    for (ValueId in : n.inputs) ++readers[static_cast<size_t>(in)];
  }
  std::vector<bool> free(graph.nodes.size(), false);
  for (const StateUpdate& u : graph.updates) {
    const Node& n = graph.nodes[static_cast<size_t>(u.value)];
    free[static_cast<size_t>(u.value)] = readers[static_cast<size_t>(u.value)] == 0 &&
                                         !n.inputs.empty() && n.inputs[0] == u.state &&
                                         readers[static_cast<size_t>(u.state)] == 1;
  }
  return free;
}

namespace {

size_t aligned(size_t bytes, size_t alignment) {
  return (bytes + alignment - 1) / alignment * alignment;
}

}  // namespace

int64_t second_result_bytes(const Node& node, size_t alignment) {
  return static_cast<int64_t>(
      aligned(static_cast<size_t>(shape_numel(node.shape)) * dtype_size(node.dtype), alignment));
}

size_t output_bytes(const Node& node, size_t alignment) {
  const auto numel = static_cast<size_t>(shape_numel(node.shape));
  const size_t bytes = numel * dtype_size(node.dtype),
               second = static_cast<size_t>(second_result_bytes(node, alignment));
  if (node.op == Op::kElementwise && node.program.results == 2) return second + bytes;
  if (node.narrow_copy) return second + numel * dtype_size(DType::bf16);
  if (node.saves_row_stats) return second + numel / static_cast<size_t>(node.shape.back()) * 4;
  return bytes;
}

namespace {

size_t aligned_bytes(const Node& n, size_t alignment) {
  return aligned(output_bytes(n, alignment), alignment);
}

// Nodes reachable backwards from the outputs and the state updates, in creation order (which is
// topological), except that an effect nothing depends on runs right after its last input.
std::vector<ValueId> live_schedule(const Graph& graph) {
  std::vector<bool> needed(graph.nodes.size(), false);
  std::vector<ValueId> stack(graph.outputs.begin(), graph.outputs.end());
  for (const StateUpdate& u : graph.updates) stack.push_back(u.value);
  while (!stack.empty()) {
    const ValueId id = stack.back();
    stack.pop_back();
    if (needed[static_cast<size_t>(id)]) continue;
    needed[static_cast<size_t>(id)] = true;
    for (ValueId in : graph.nodes[static_cast<size_t>(id)].inputs) stack.push_back(in);
  }
  const std::vector<bool> early = free_effects(graph);
  // after[i]: the early effects whose last computed input is node i (-1: none is computed).
  std::map<ValueId, std::vector<ValueId>> after;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    if (!early[i]) continue;
    ValueId last = -1;
    for (ValueId in : graph.nodes[i].inputs) {
      const Op op = graph.nodes[static_cast<size_t>(in)].op;
      if (op != Op::kInput && op != Op::kWeight) last = std::max(last, in);
    }
    after[last].push_back(static_cast<ValueId>(i));
  }
  std::vector<ValueId> schedule = after[-1];
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const Op op = graph.nodes[i].op;
    if (!needed[i] || early[i] || op == Op::kInput || op == Op::kWeight) continue;
    schedule.push_back(static_cast<ValueId>(i));
    if (const auto it = after.find(static_cast<ValueId>(i)); it != after.end()) {
      schedule.insert(schedule.end(), it->second.begin(), it->second.end());
    }
  }
  return schedule;
}

// Best-fit placement of buffers into one arena, freeing each at its last use.
class ArenaAllocator {
 public:
  int64_t allocate(size_t bytes) {
    auto best = free_.end();
    for (auto it = free_.begin(); it != free_.end(); ++it) {
      if (it->second >= bytes && (best == free_.end() || it->second < best->second)) best = it;
    }
    if (best == free_.end()) {
      const size_t offset = size_;
      size_ += bytes;
      return static_cast<int64_t>(offset);
    }
    const size_t offset = best->first, block = best->second;
    free_.erase(best);
    if (block > bytes) free_[offset + bytes] = block - bytes;
    return static_cast<int64_t>(offset);
  }

  void release(size_t offset, size_t bytes) {
    auto [it, inserted] = free_.emplace(offset, bytes);
    auto next = std::next(it);
    if (next != free_.end() && it->first + it->second == next->first) {
      it->second += next->second;
      free_.erase(next);
    }
    if (it != free_.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second == it->first) {
        prev->second += it->second;
        free_.erase(it);
      }
    }
  }

  size_t size() const { return size_; }

 private:
  std::map<size_t, size_t> free_;  // offset -> bytes
  size_t size_ = 0;
};

// A buffer to place: its bytes and the steps it is alive for, first to last inclusive.
struct Lifetime {
  ValueId id;
  size_t bytes, first, last;
};

// Offsets for `buffers` as they are allocated and freed in schedule order, each into the
// best-fitting free block. Returns the arena size.
size_t place_in_order(const std::vector<Lifetime>& buffers, size_t steps,
                      std::vector<int64_t>& offset) {
  std::vector<std::vector<const Lifetime*>> made(steps), freed(steps);
  for (const Lifetime& b : buffers) {
    made[b.first].push_back(&b);
    if (b.last < steps) freed[b.last].push_back(&b);
  }
  ArenaAllocator arena;
  for (size_t step = 0; step < steps; ++step) {
    for (const Lifetime* b : made[step])
      offset[static_cast<size_t>(b->id)] = arena.allocate(b->bytes);
    // Buffers whose last reader ran at this step are free for the nodes after it.
    for (const Lifetime* b : freed[step]) {
      arena.release(static_cast<size_t>(offset[static_cast<size_t>(b->id)]), b->bytes);
    }
  }
  return arena.size();
}

// Offsets for `buffers` placed largest first, each at the lowest offset where it overlaps no
// placed buffer alive at the same time: knowing every lifetime up front, this packs the large
// buffers that decide the arena's size better than allocating in order. Returns the arena size.
size_t place_largest_first(std::vector<Lifetime> buffers, std::vector<int64_t>& offset) {
  std::sort(buffers.begin(), buffers.end(), [](const Lifetime& a, const Lifetime& b) {
    return a.bytes != b.bytes ? a.bytes > b.bytes : a.first < b.first;
  });
  std::vector<std::pair<size_t, const Lifetime*>> placed;  // offset, buffer
  size_t size = 0;
  for (const Lifetime& b : buffers) {
    std::vector<std::pair<size_t, size_t>> taken;  // [begin, end) of overlapping buffers
    for (const auto& [at, other] : placed) {
      if (other->first <= b.last && b.first <= other->last)
        taken.emplace_back(at, at + other->bytes);
    }
    std::sort(taken.begin(), taken.end());
    size_t at = 0;
    for (const auto& [begin, end] : taken) {
      if (at + b.bytes <= begin) break;
      at = std::max(at, end);
    }
    offset[static_cast<size_t>(b.id)] = static_cast<int64_t>(at);
    placed.emplace_back(at, &b);
    size = std::max(size, at + b.bytes);
  }
  return size;
}

}  // namespace

Plan plan_memory(Graph graph, size_t alignment) {
  Plan plan;
  plan.schedule = live_schedule(graph);
  const size_t n = graph.nodes.size();
  plan.offset.assign(n, -1);

  std::vector<size_t> last_use(n, 0);
  for (size_t step = 0; step < plan.schedule.size(); ++step) {
    for (ValueId in : graph.nodes[static_cast<size_t>(plan.schedule[step])].inputs) {
      last_use[static_cast<size_t>(storage_of(graph, in))] = step;
    }
  }
  for (ValueId out : graph.outputs)
    last_use[static_cast<size_t>(storage_of(graph, out))] = SIZE_MAX;

  std::vector<Lifetime> buffers;
  for (size_t step = 0; step < plan.schedule.size(); ++step) {
    const ValueId id = plan.schedule[step];
    const Node& node = graph.nodes[static_cast<size_t>(id)];
    if (aliases_input(node)) continue;
    // An output is alive to the end; an unread value only during its own step.
    const size_t last = last_use[static_cast<size_t>(id)];
    buffers.push_back({id, aligned_bytes(node, alignment), step,
                       last == SIZE_MAX ? plan.schedule.size() : std::max(last, step)});
  }
  // Both placements, keeping the smaller arena.
  std::vector<int64_t> in_order(n, -1), largest_first(n, -1);
  const size_t in_order_bytes = place_in_order(buffers, plan.schedule.size(), in_order);
  const size_t largest_first_bytes = place_largest_first(buffers, largest_first);
  const bool first_wins = largest_first_bytes < in_order_bytes;
  plan.offset = first_wins ? largest_first : in_order;
  plan.arena_bytes = first_wins ? largest_first_bytes : in_order_bytes;
  plan.alignment = alignment;
  plan.graph = std::move(graph);
  return plan;
}

}  // namespace tfm::fusion
