// The kernel backends' rewrites of a graph of basic ops into the steps their kernels run: each
// pass looks for a pattern and replaces it with a fused op or a folded form (a flag or an extra
// input on an op: graph/op_args.h names them). A backend lists the ones it runs, in order
// (pipeline.h). Each leaves the graph computing the same values; ops::decompose undoes the fused
// ops, which is what the fused kernels are tested against.
#pragma once

#include "fusion/target.h"
#include "graph/graph.h"

namespace tfm::fusion {

// Products and attention (inference graphs: graphs that compute no gradients, whose values no
// backward pass keeps; the fused ops have no backward rule).
// q, k and v's products of one row (three linears reading the same x and nothing else reading it,
// of one weight dtype, f32 out, no residual) become one kQkvLinear: the three blocks one after the
// other in one value, read through views. It goes right after the last of the three, so every
// reader of the products must come after that (the models make the three products, then use
// them).
void fuse_qkv_products(graph::Graph& graph, const Target& target);
// silu(x w_gate^T + b_gate) * (x w_up^T + b_up), the products read by the gating alone, becomes one
// kGatedLinear.
void fuse_gated_products(graph::Graph& graph, const Target& target);
// An RMSNorm read only by fused products (f32, no autocast) is applied by them as they read x: the
// normed rows are never stored.
void fuse_input_norms_into_products(graph::Graph& graph, const Target& target);
// A sum of an f32 product (read by the sum alone) and another f32 value of its shape (a residual
// connection) becomes the product adding that value as it writes. In training graphs too.
void fuse_residuals_into_products(graph::Graph& graph, const Target& target);
// RoPE of a per-head RMSNorm that nothing else reads (Qwen3's q_norm and k_norm) becomes one
// normed RoPE: the heads are normed and rotated in one pass, the normed values never stored.
void fuse_norms_into_rope(graph::Graph& graph, const Target& target);
// What attention reads of a step's new tokens, in one kPrepareAttention: q and k (normed or not)
// rotated by RoPE, k and v written into the caches at the attention's slots, the rotated k read by
// its cache write alone. It takes q's RoPE's place (and value); the cache writes become views of
// the caches read after it, and attention reads those.
void fuse_prepare_attention(graph::Graph& graph, const Target& target);

// Elementwise chains.
// Merges chains of elementwise nodes whose intermediate has a single consumer into one node, up
// to the target's ElementwiseLimits.
void fuse_elementwise(graph::Graph& graph, const Target& target);

// Folds (training graphs mostly): a step takes over the cast, sum, add or accumulation after it.
// A bf16 value widened to f32 only for elementwise chains (the MLP gating's gradient from a bf16
// product, ops::linear_backward) is read by them as it is: they widen bf16 inputs as they load
// them, exactly as the cast did, so the cast's pass and its f32 buffer go.
void fold_widening_casts(graph::Graph& graph, const Target& target);
// A bf16 cast of a norm, RoPE, RoPE-gradient (Llama's q and k), elementwise, norm-gradient,
// loss-gradient or autocast attention (bf16 q) result that nothing else reads (directly or
// through reshapes) becomes that op writing bf16 itself: one pass over the rows instead of two
// (bf16 products' operands under autocast). The result is the same bits: the op rounds its f32
// value once, as the cast did.
void fold_casts(graph::Graph& graph, const Target& target);
// A sum of input-gradient products that nothing else reads (the gradient of a value several
// layers' products read: q, k and v's of one normed row) becomes the products adding into one
// buffer in turn (beta = 1): no buffer per product, no pass to add them.
void fold_gradient_sums(graph::Graph& graph, const Target& target);
// A sum of an RMSNorm's input gradient (read by nothing else) and another f32 value (the residual
// stream's gradient in a decoder's backward pass) becomes the gradient adding that value as it
// writes: one pass over the rows instead of two.
void fold_residuals_into_norm_grads(graph::Graph& graph, const Target& target);
// An accumulation of a weight's gradient product (or a norm weight's column sums) that nothing
// else reads becomes that step adding into the accumulator itself (beta = 1): no buffer for the
// gradient, no pass to add it.
// The folded product runs where the accumulation did, so it folds only where nothing can write
// its operands in between: a free effect (run right after its last input) or an accumulation
// with no in-place write into its operands' buffers between it and the product in creation order
// (the rule of every pass here that moves a step later).
void fold_accumulations(graph::Graph& graph, const Target& target);
// An accumulation of a sum of gradients that nothing else reads (a tied embedding's: the output
// layer's products over the loss chunks, and the embedding's own gradient) becomes each term
// adding into the accumulator where it runs, in turn: no buffer for the terms or their sum, no
// pass to add them. The terms are weight-gradient products (or chains of them,
// fold_accumulations) and embedding gradients, each run whole before the next starts. Runs after
// fold_accumulations. The accumulator then takes (acc + t1) + t2 where eager adds acc + (t1 + t2):
// the same bits into a zero accumulator, not always under gradient accumulation.
void fold_summed_accumulations(graph::Graph& graph, const Target& target);
// A norm weight's gradient added into its accumulator as a free effect (fold_accumulations) is
// added by the norm's input-gradient step that reads the same x and dy: one pass over them
// instead of two. Runs after fold_accumulations, whose in-place form it looks for; a step moved
// later after it would have to see that step's write into its last input.
void fold_norm_weight_grads(graph::Graph& graph, const Target& target);
// RoPE's gradient read only by a per-head norm's input gradient that adds its weight's gradient
// (fold_norm_weight_grads: q_norm's and k_norm's in Qwen3's backward pass) runs inside that step,
// which rotates dy back as it loads it: RoPE's f32 output gradient is never stored. Runs after
// fold_norm_weight_grads.
void fuse_rope_grads_into_norm_grads(graph::Graph& graph, const Target& target);
// A bf16 cast of a norm's input gradient that other steps read in f32 as well (the residual
// stream's gradient: the next norm's gradient adds it, the products before the norm read it in
// bf16) is written by the gradient step itself, beside its f32 result in its buffer: the same
// bits, as it rounds its f32 value once as the cast did, without the cast's pass over the rows.
// The cast becomes a view of that copy. Only steps that add their weight's gradient
// (fold_norm_weight_grads) write copies; runs after it.
void fold_narrow_copies(graph::Graph& graph, const Target& target);
// A loss gradient written over its logits (in place), which only the loss read before it, is
// written by the loss step itself as it computes the loss: each row's softmax statistics computed
// once, the logits read once instead of twice. The gradient becomes a view of the logits that
// also reads the loss, so that what reads the gradient runs after the loss step. Not for a
// vocabulary split over ranks (`shard`), whose loss combines the ranks' statistics.
void fold_losses_into_gradients(graph::Graph& graph, const Target& target);
// Two elementwise steps a few nodes apart that read some of the same inputs (the MLP gating's
// two gradients: dy silu(gate) and dy up silu'(gate)) become one step computing both, which
// reads each input once. The first keeps its place and its value, its buffer holding the second's
// result after its own; the second becomes a view of that. It runs where the first did, so it
// pairs only where the second's inputs exist by then and nothing writes them in between. Runs
// last: the passes before it take an elementwise step for one value (a sum, a cast's source).
void pair_elementwise_siblings(graph::Graph& graph, const Target& target);
// An attention gradient also reads its forward attention (the node over the same q, k, v, mask
// and slots), which keeps room after its output for each query row's log-sum-exp
// (Node::saves_row_stats): a backend whose forward step leaves them there takes them and the
// output (delta = dy · out) instead of running the forward products again in the backward pass;
// others ignore both. Runs after fold_casts, so that the extra read does not keep the output from
// being written in bf16; the gradient reads it in whatever dtype it has, as torch's does.
void save_attention_statistics(graph::Graph& graph, const Target& target);

}  // namespace tfm::fusion
