// A graph specialized for one shape: fused, scheduled, with every intermediate placed in one
// arena by liveness.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/graph.h"

namespace tfm::graph {

// Where each intermediate starts in the arena: a multiple of this many bytes, what vendor matrix
// libraries (cuBLASLt) assume of an operand by default.
inline constexpr size_t kArenaAlignment = 256;

// Where the second result of a paired elementwise step (pair_elementwise_siblings), a norm
// gradient's bf16 copy (fold_narrow_copies) or an attention's rows' statistics
// (save_attention_statistics) starts in the node's buffer, in bytes: after the first, at the
// next multiple of kArenaAlignment.
int64_t second_result_bytes(const Node& node);
// Bytes a node writes: its shape's elements, and its second result where it has one.
size_t output_bytes(const Node& node);

struct Plan {
  Graph graph;
  std::vector<ValueId> schedule;  // nodes to run, in order (inputs and weights excluded)
  std::vector<int64_t> offset;    // per node: byte offset in the arena, -1 when it owns none
  size_t arena_bytes = 0;
};

struct CompileOptions {
  bool fuse = true;
};

// Fusion, scheduling and memory planning; device independent.
Plan plan_graph(Graph graph, const CompileOptions& options = {});

// Effects nothing else depends on: nodes no other node reads, writing into a state input that no
// other node reads either (a gradient added into where it is kept). It takes an effect's input 0
// for the state it writes, as the builder's and fold_accumulations' effects have it; the effects
// the later folds make (a norm gradient's, a view of a chain) are judged by that too, so passes
// that look for free effects run before them. They may run as soon as their
// inputs exist, which frees those inputs early; the plan schedules them so.
std::vector<bool> free_effects(const Graph& graph);

// A bf16 value widened to f32 only for elementwise chains (the MLP gating's gradient from a bf16
// product, ops::linear_backward) is read by them as it is: they widen bf16 inputs as they load
// them, exactly as the cast did, so the cast's pass and its f32 buffer go.
void fold_widening_casts(Graph& graph);
// Merges chains of elementwise nodes whose intermediate has a single consumer into one node.
void fuse_elementwise(Graph& graph);
// A bf16 cast of a norm, RoPE, RoPE-gradient (Llama's q and k), elementwise, norm-gradient,
// loss-gradient or autocast attention (bf16 q) result that nothing else reads (directly or
// through reshapes) becomes that op writing bf16 itself: one pass over the rows instead of two
// (bf16 products' operands under autocast). The result is the same bits: the op rounds its f32
// value once, as the cast did.
void fold_casts(Graph& graph);
// RoPE of a per-head RMSNorm that nothing else reads (Qwen3's q_norm and k_norm) becomes one
// normed RoPE: the heads are normed and rotated in one pass, the normed values never stored.
void fuse_norms_into_rope(Graph& graph);
// A sum of input-gradient products that nothing else reads (the gradient of a value several
// layers' products read: q, k and v's of one normed row) becomes the products adding into one
// buffer in turn (beta = 1): no buffer per product, no pass to add them.
void fold_gradient_sums(Graph& graph);
// A sum of an RMSNorm's input gradient (read by nothing else) and another f32 value (the residual
// stream's gradient in a decoder's backward pass) becomes the gradient adding that value as it
// writes: one pass over the rows instead of two.
void fold_residuals_into_norm_grads(Graph& graph);
// An accumulation of a weight's gradient product (or a norm weight's column sums) that nothing
// else reads becomes that step adding into the accumulator itself (beta = 1): no buffer for the
// gradient, no pass to add it.
// The folded product runs where the accumulation did, so it folds only where nothing can write
// its operands in between: a free effect (run right after its last input) or an accumulation
// with no in-place write into its operands' buffers between it and the product in creation order
// (the rule of every pass here that moves a step later).
void fold_accumulations(Graph& graph);
// An accumulation of a sum of gradients that nothing else reads (a tied embedding's: the output
// layer's products over the loss chunks, and the embedding's own gradient) becomes each term
// adding into the accumulator where it runs, in turn: no buffer for the terms or their sum, no
// pass to add them. The terms are weight-gradient products (or chains of them,
// fold_accumulations) and embedding gradients, each run whole before the next starts. Runs after
// fold_accumulations. The accumulator then takes (acc + t1) + t2 where eager adds acc + (t1 + t2):
// the same bits into a zero accumulator, not always under gradient accumulation.
void fold_summed_accumulations(Graph& graph);
// A norm weight's gradient added into its accumulator as a free effect (fold_accumulations) is
// added by the norm's input-gradient step that reads the same x and dy: one pass over them
// instead of two. Runs after fold_accumulations, whose in-place form it looks for; a step moved
// later after it would have to see that step's write into its last input.
void fold_norm_weight_grads(Graph& graph);
// RoPE's gradient read only by a per-head norm's input gradient that adds its weight's gradient
// (fold_norm_weight_grads: q_norm's and k_norm's in Qwen3's backward pass) runs inside that step,
// which rotates dy back as it loads it: RoPE's f32 output gradient is never stored. Runs after
// fold_norm_weight_grads.
void fuse_rope_grads_into_norm_grads(Graph& graph);
// A bf16 cast of a norm's input gradient that other steps read in f32 as well (the residual
// stream's gradient: the next norm's gradient adds it, the products before the norm read it in
// bf16) is written by the gradient step itself, beside its f32 result in its buffer: the same
// bits, as it rounds its f32 value once as the cast did, without the cast's pass over the rows.
// The cast becomes a view of that copy. Only steps that add their weight's gradient
// (fold_norm_weight_grads) write copies; runs after it.
void fold_narrow_copies(Graph& graph);
// A loss gradient written over its logits (in place), which only the loss read before it, is
// written by the loss step itself as it computes the loss: each row's softmax statistics computed
// once, the logits read once instead of twice. The gradient becomes a view of the logits that
// also reads the loss, so that what reads the gradient runs after the loss step. Not for a
// vocabulary split over ranks (`shard`), whose loss combines the ranks' statistics.
void fold_losses_into_gradients(Graph& graph);
// Two elementwise steps a few nodes apart that read some of the same inputs (the MLP gating's
// two gradients: dy silu(gate) and dy up silu'(gate)) become one step computing both, which
// reads each input once. The first keeps its place and its value, its buffer holding the second's
// result after its own; the second becomes a view of that. It runs where the first did, so it
// pairs only where the second's inputs exist by then and nothing writes them in between. Runs
// last: the passes before it take an elementwise step for one value (a sum, a cast's source).
void pair_elementwise_siblings(Graph& graph);
// An attention gradient also reads its forward attention (the node over the same q, k, v, mask
// and slots), which keeps room after its output for each query row's log-sum-exp
// (Node::saves_row_stats): a backend whose forward step leaves them there takes them and the
// output (delta = dy · out) instead of running the forward products again in the backward pass;
// others ignore both. Runs after fold_casts, so that the extra read does not keep the output from
// being written in bf16; the gradient reads it in whatever dtype it has, as torch's does.
void save_attention_statistics(Graph& graph);

}  // namespace tfm::graph
