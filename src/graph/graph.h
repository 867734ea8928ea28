// The IR: a graph of typed nodes with static shapes. Every node has one output, named by the
// node's index (a ValueId). Ops map one-to-one onto StableHLO-style ops so a PJRT backend can
// print them later.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/elementwise_code.h"
#include "graph/mesh.h"
#include "tfm/tensor.h"

namespace tfm::graph {

using ValueId = int;

enum class Op : uint8_t {
  kInput,        // given per run: ids, positions, masks; or a state buffer (KV cache)
  kWeight,       // a constant tensor bound when the graph is built
  kEmbedding,    // (table [V, H], ids [B, S] i32) -> [B, S, H]; a vocabulary shard (`shard`)
                 //   holds rows [start, start + V): other ids read as zero rows
  kLinear,       // (x [..., K], w [N, K], bias [N]?, residual [..., N]?) -> [..., N]:
                 //   x @ w^T + bias + residual (a residual connection added as it is written)
  kGatedLinear,  // (x [..., K], w_gate [N, K], w_up [N, K], bias_gate [N]?, bias_up [N]?,
                 //   norm [K] when `normed`) -> silu(h @ w_gate^T + bias_gate) * (h @ w_up^T +
                 //   bias_up) [..., N] with h = rms_norm(x, norm, eps) or x: a gated MLP's first
                 //   half in one pass over x (inference graphs; no backward rule)
  kQkvLinear,    // (x [..., K], w_q [Nq, K], w_k [Nk, K], w_v [Nv, K], then the three biases or
                 //   none, then norm [K] when `normed`) -> [R*Nq + R*Nk + R*Nv] for R rows of x:
                 //   the three products of h (as kGatedLinear's), each [R, N] block whole after
                 //   the other (read through views), in one pass (inference graphs; no backward)
  kRmsNorm,      // (x [..., H], w [H]) -> x / rms(x) * w, over the last axis
  kRope,         // (x [B, S, H, D], positions [B, S] i32, inv_freq [D/2], norm [D] when
                 //   `normed`) -> rotate-half RoPE of x, or of each head RMS-normed (`eps`)
  // (q [B,S,Hq,D], k [B,S,Hkv,D], v [B,S,Hkv,D], positions [B,S] i32, inv_freq [D/2], slots [S]
  // i32, k_cache [B,L,Hkv,D], v_cache, then q_norm [D] and k_norm [D] or neither) -> q as
  // attention reads it: q and k each RMS-normed per head (`eps`) when the norms are given and
  // rotated by RoPE (`scale`: attention_scaling); k and v written into the caches at `slots` in
  // place, where attention then reads them (inference graphs; no backward rule)
  kPrepareAttention,
  kCacheWrite,    // (cache [B, L, H, D] state, update [B, S, H, D], slots [S] i32) -> the cache
                  //   with update's token s written at slot slots[s] of every row, in place
  kAccumulate,    // (acc, x) -> acc + x written into acc: a state input (gradients summed over
                  //   micro-batches where they live: a Graph::updates value), or a computed value
                  //   nothing reads after
  kAttention,     // (q [B,S,Hq,D], k [B,L,Hkv,D], v [B,L,Hkv,D], mask [B,L] i32, slots [S] i32)
                  //   -> [B, S, Hq, D]; key j is seen by query i iff j <= slots[i] and mask[b, j]
                  //   (and, with a `window`, slots[i] - j < window: sliding-window attention)
  kSliceSeq,      // (x [B, S, ...]) -> [B, length, ...] starting at `start` along axis 1
  kReshape,       // same data, new shape (an alias of its input)
  kElementwise,   // a chain of elementwise ops over same-shaped inputs (see ElementwiseProgram)
  kView,          // (x, after...) -> `shape` elements of x's buffer starting at element `start` (an
                  //   alias); the inputs after x only order the view after the steps that wrote
                  //   x's values (a loss written with its gradient, a state updated in place)
  kPad,           // (x) -> `shape` holding x's elements from element `start`, zeros elsewhere
                  //   (the gradient of a view)
  kConcatRows,    // (a [Ra, ...], b [Rb, ...], ...) -> [Ra + Rb + ..., ...]: the inputs stacked
  kReduceRows,    // (x [..., N]) -> [N]: the sum over every leading axis
  kCrossEntropy,  // (logits [..., V], targets [...] i32) -> [1]: the sum over targets other than
                  //   kIgnoreIndex of -log softmax(logits)[target]; with `shard`, the logits are
                  //   columns [start, start + V) of a vocabulary split over `group` (those
                  //   from `vocab_size` on padding, left out); with
                  //   in_place, (logits, targets, d_loss [1]) -> the loss, and kCrossEntropyGrad's
                  //   gradient written over the logits (graph::fold_losses_into_gradients)
  kCast,          // (x) -> the same values in the node's dtype (rounded to nearest even)
  kArgmax,        // (x [..., N]) -> [...] i32: the index of the largest value (the first of
                  //   equals), so greedy decoding returns token ids instead of whole logits
  kAllReduce,     // (x) -> the sum of x over the node's `group` of processes
  kAllGather,     // (x [..., N]) -> [..., N x group size]: every rank's x side by side along the
                  //   last axis, in rank order
  kCopyToGroup,   // (x) -> x (an alias) whose gradient is summed over `group`: where a value every
                  //   rank holds feeds a layer split across the ranks (Megatron-LM's "f")
  kGatherShards,  // (x [R, ...]) -> [R x group size, ...]: every rank's rows stacked in rank order
                  //   (FSDP's gathering of a parameter sharded by rows)
  kReduceScatter,    // (x [R x group size, ...]) -> [R, ...]: this rank's rows of the sum
                     //   over `group`
  kSumOverReplicas,  // (x) -> the sum of x over this rank's block of `start` neighbouring ranks of
                     //   `group` (the ranks that hold one replicated KV head)
  kAllToAll,         // (x [R x group size, ...]) -> the same shape: block r of this rank's rows
                     //   sent to rank r, block r of the result received from rank r

  // Backward ops: what autodiff (graph/autodiff) emits; each names the forward op it inverts.
  kEmbeddingGrad,     // (dy [B, S, H], ids [B, S] i32) -> d table [V, H] (rows of a `shard`);
                      //   with in_place, (acc, dy, ids) -> acc + d table written into acc
                      //   (graph::fold_summed_accumulations)
  kLinearGradInput,   // (dy [..., N], w [N, K]) -> dx [..., K] = dy @ w; with in_place,
                      //   (sum, dy, w) -> sum + dy @ w written into sum (graph::fold_gradient_sums)
  kLinearGradWeight,  // (dy [..., N], x [..., K]) -> dw [N, K] = dy^T @ x over all rows; with
                      //   in_place, (acc, dy, x) -> acc + dy^T @ x written into acc (a folded
                      //   kAccumulate: graph::fold_accumulations)
  kRmsNormGradInput,  // (x [..., H], w [H], dy [..., H], residual [..., H] when `residual`,
                      //   positions [B, S] i32 and inv_freq [H/2] when `rotated`, acc [H] when
                      //   `adds_weight_grad`) -> dx (+ residual:
                      //   graph::fold_residuals_into_norm_grads); with `adds_weight_grad`, w's
                      //   gradient is also added into acc (graph::fold_norm_weight_grads); with
                      //   `rotated`, x [B, S, heads, H] and dy is RoPE's output gradient, rotated
                      //   back (`scale`: attention_scaling) as it is read
                      //   (graph::fuse_rope_grads_into_norm_grads)
  kRmsNormGradWeight,  // (x [..., H], dy [..., H]) -> dw [H]; with in_place, (acc, x, dy) -> acc +
                       //   dw written into acc (a folded kAccumulate: graph::fold_accumulations)
  kRopeGrad,           // (dy, positions, inv_freq) -> dx: the rotation by minus the angle
  kAttentionGrad,      // (q, k, v, mask, slots, dy[, the forward attention]) -> [dq | dk | dv]
                       // flat, split by kView
  kCrossEntropyGrad,   // (logits, targets, d loss [1]) -> d logits (of a `shard` as above)

  // The optimizer's step, a graph like the training step (training/adamw.h).
  kAdamW,  // (param [n], grad [n], exp_avg [n], exp_avg_sq [n], scalars [kAdamWScalars] f32, the
           //   step's ops::AdamWScalars) -> param after one step of torch.optim.AdamW's arithmetic
           //   (ops/adamw.h), written over param; exp_avg and exp_avg_sq are written in place too.
           //   With `decays`, the weight decays.
  kSumSquares,  // (x [n] f32) -> [1] f32: the sum of x^2, accumulated in double over fixed chunks
                //   added in order (the same bits for any thread count), rounded once

  // Mixture-of-experts layers (ops/moe.h has the arithmetic).
  kMoeRoute,    // (router logits [T, E] f32) -> routing weights [T, E] f32: softmax over the
                //   experts, the `top_k` largest kept (the first of equals), renormalized to sum
                //   to 1 when `normed`, zeros elsewhere (transformers' TopKRouter, densely)
  kMoeExperts,  // (x [T, H], routing [T, E], then per expert e held: w_gate [I, H], w_up
                //   [I, H], w_down [H, I]) -> [T, H]: the sum over the experts held (routing
                //   columns `start` on: expert parallelism) a row is routed to (routing != 0)
                //   of routing * down(silu(gate(x)) * up(x)), each expert's products over only
                //   its rows, experts added in order
  kRouterLoss,  // (loss_scale [1], mask [B, S] i32, then each MoE layer's router logits [T, E]
                //   with T = B x S) -> [1]: `scale` x Switch Transformer's load-balancing loss
                //   (transformers' load_balancing_loss_func over the rows the mask keeps, `top_k`
                //   experts a row) / loss_scale, so it adds to a loss summed over targets
  // Experts split over `expert_ranks` ranks with their own batches (expert parallelism by
  // exchange): each (row, chosen expert) pair takes the next slot of the block of the rank holding
  // the expert, rows in order, a row's experts in order; a block has C = T x min(top_k, E /
  // expert_ranks) slots, so no pair is ever dropped.
  kMoeDispatch,      // (x [T, H], routing [T, E]) -> [expert_ranks x C, H]: each slot's row of x,
                     //   zeros in the slots no pair took
  kMoeSlots,         // (routing [T, E]) -> [expert_ranks x C, E / expert_ranks]: each slot's expert
                     //   as a one-hot routing row over its rank's experts (zeros: an empty slot)
  kMoeCombine,       // (y [expert_ranks x C, H], routing [T, E]) -> [T, H]: the sum over a row's
                     //   slots of routing x the slot's row of y
  kMoeRouteGrad,     // (router logits, d routing) -> d router logits
  kMoeExpertsGrad,   // (kMoeExperts' inputs, dy [T, H]) -> [dx | d routing | per expert d w_gate,
                     //   d w_up, d w_down] flat, split by kView (d routing only where routed)
  kRouterLossGrad,   // (kRouterLoss' inputs, d loss [1]) -> every layer's d router logits flat
  kMoeDispatchGrad,  // (x, routing, dy) -> dx [T, H]: each row the sum of its slots' dy
  kMoeCombineGrad,   // (y, routing, dy [T, H]) -> [dy | d routing] flat, split by kView
};

// Targets equal to this contribute no loss, as PyTorch's CrossEntropyLoss(ignore_index=-100).
inline constexpr int32_t kIgnoreIndex = -100;
// The floats kAdamW's scalars input holds: ops::AdamWScalars packed (ops/adamw.h).
inline constexpr int64_t kAdamWScalars = 9;

const char* op_name(Op op);
// Is the op one of the backward ops autodiff emits?
bool is_backward(Op op);

// A fused elementwise chain, run as a stack program over blocks of elements. Unfused graphs hold
// one-instruction programs; fusion merges producer programs into their consumer.
struct EwInstr {
  EwCode code;
  int operand = 0;     // kLoad: input index
  float scalar = 0.f;  // kScale
};
struct ElementwiseProgram {
  std::vector<EwInstr> instrs;
  // Values the program leaves on the stack, bottom first, each a result: 2 for a step computing
  // two siblings' values (graph::pair_elementwise_siblings), the second written after the first
  // in the node's buffer (graph::second_result_bytes).
  int results = 1;
};
int program_depth(const ElementwiseProgram& program);

struct Node {
  Op op = Op::kInput;
  std::vector<ValueId> inputs;
  Shape shape;
  DType dtype = DType::f32;
  std::string name;       // inputs and weights: their name; others: for logs
  Tensor constant;        // kWeight; a state kInput: the buffer its runs will be given, if known
                          // when built (a compiler backend lays its arguments out by where it
                          // lies: the Trainer's gradients are views into one flat buffer)
  bool is_state = false;  // kInput: a caller-owned buffer the graph reads and writes in place
  float eps = 0.f;        // kRmsNorm and its gradients, kPrepareAttention, normed products
                          // and RoPE
  float scale = 1.f;      // kAttention(Grad): softmax scale; kRope(Grad), kPrepareAttention:
                          // attention_scaling
  int64_t start = 0;      // kSliceSeq: position; kView: element offset; kEmbedding: first id;
                          // kMoeExperts(Grad): the first expert's routing column
  bool in_place = false;  // kCrossEntropyGrad: written over input 0, read by nothing after;
                          // kCrossEntropy: writes its gradient over input 0 too;
                          // kLinearGradWeight, kLinearGradInput, kRmsNormGradWeight,
                          // kEmbeddingGrad: added into input 0
  bool residual = false;  // kLinear, kRmsNormGradInput: the input after its operands is the
                          // residual added to the result
  bool adds_weight_grad = false;  // kRmsNormGradInput: its last input is the accumulator of the
                                  // norm weight's gradient, added into as a side effect
  bool rotated = false;           // kRmsNormGradInput: dy enters rotated back by RoPE
  bool narrow_copy = false;       // kRmsNormGradInput: also writes its result in bf16 after it
                                  //   in its buffer (graph::fold_narrow_copies)
  bool saves_row_stats = false;   // kAttention: room after its output in its buffer for each
                                  //   query row's log-sum-exp, f32 [B, S, Hq], which a backend
                                  //   may leave for the gradient that reads the output
                                  //   (graph::save_attention_statistics)
  bool normed = false;            // kQkvLinear, kGatedLinear, kRope: x enters RMS-normed (`eps`)
                                  // with the last input as the norm's weight
  bool shard = false;             // kEmbedding, kCrossEntropy and their gradients: one rank's slice
                                  // of the vocabulary, starting at id `start`
  int64_t vocab_size = 0;         // kCrossEntropy(Grad) of a shard: the whole vocabulary, whose
                                  // size the ranks need not divide: columns of ids past it are
                                  // padding, out of the softmax
  bool decays = false;            // kAdamW: weight decay applies
  int64_t window = 0;             // kAttention(Grad): the sliding window (0: none)
  int64_t top_k = 0;              // kMoeRoute(Grad), kRouterLoss(Grad), kMoeDispatch, kMoeSlots,
                                  // kMoeCombine (and gradients): experts chosen a row
  int64_t expert_ranks = 0;       // kMoeDispatch, kMoeSlots, kMoeCombine (and gradients): the
                                  // ranks the experts are split over
  std::shared_ptr<const CollectiveGroup> group;  // collectives, and the ranks a vocabulary is
                                                 // split over
  ElementwiseProgram program;                    // kElementwise
};

// After a run, state input `state` holds `value`: a value that lives in the state's buffer
// (written in place: storage_of(value) == state), the executable's aliased output (the donated
// buffer of a compiler backend).
struct StateUpdate {
  ValueId state, value;
  bool operator==(const StateUpdate&) const = default;
};

struct Graph {
  std::vector<Node> nodes;
  std::vector<ValueId> outputs;      // copied out to the host after a run
  std::vector<StateUpdate> updates;  // state written by the run, in the order they were made

  ValueId add(Node node);
  std::vector<ValueId> inputs() const;     // kInput nodes in creation order
  std::string describe(ValueId id) const;  // "attention 'layers.0.attn' [1, 64, 16, 128] f32"
};

}  // namespace tfm::graph
