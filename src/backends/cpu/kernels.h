// CPU kernels, one family per file. Activations are f32; large weights are f32 or bf16 (widened
// to f32 in registers); small weights (norms, biases, RoPE frequencies) are f32.
#pragma once

#include <cstdint>
#include <vector>

#include "fusion/target.h"
#include "graph/graph.h"
#include "ops/adamw.h"
#include "tfm/dtype.h"

namespace tfm::cpu {

// Below this many elements an op runs on one thread: waking the others costs more than it saves,
// and a decode step is hundreds of such small ops.
inline constexpr int64_t kParallelMinElements = 1 << 15;
// The fused elementwise chains the interpreter (elementwise.cc) runs: its stack holds `depth`
// values per element.
inline constexpr fusion::ElementwiseLimits kElementwiseLimits{
    .depth = 8, .instrs = 32, .inputs = 12};
// Where the planner starts each buffer: a multiple of a cache line, and of the 64-byte vectors.
inline constexpr size_t kArenaAlignment = 256;

void embedding(const void* table, DType table_dtype, int64_t vocab, int64_t hidden,
               const int32_t* ids, int64_t count, float* out);
// `table` holds ids [first_id, first_id + rows) of a vocabulary split across ranks; other ids
// give zero rows (the all_reduce that follows adds the owning rank's row).
void embedding_shard(const void* table, DType table_dtype, int64_t rows, int64_t hidden,
                     int64_t first_id, const int32_t* ids, int64_t count, float* out);
// out = the sum of `count` floats from ranks [first, first + ranks) of `gathered` (rank-major).
void sum_replica_block(const float* gathered, size_t count, int64_t first, int64_t ranks,
                       float* out);
// out [rows, group x n]: `gathered` holds each rank's [rows, n] one after the other.
void interleave_gathered(const float* gathered, int64_t rows, int64_t n, int ranks, float* out);
// out[m, n] = sum_k x[m, k] * w[n, k] + bias[n]; bias may be null.
void linear(const float* x, const void* w, DType w_dtype, const float* bias, int64_t m, int64_t n,
            int64_t k, float* out);
// One of several products of the same x (q, k and v's; gate and up's): out = x . w^T + bias.
struct SharedXProduct {
  const void* w;
  int64_t n;
  const float* bias;
  float* out;
};
// linear() of one x with each of `count` products (weights of one dtype); one row of x by bf16
// weights takes them all in one pass of the threads.
void linear_shared_x(const float* x, const SharedXProduct* products, int64_t count, DType w_dtype,
                     int64_t m, int64_t k);
// Products of up to this many rows of x take tfm's GEMV (memory bound); beyond, oneDNN's blocking
// wins.
inline constexpr int64_t kGemvRows = 8;
// How products of bf16 weights with many rows of x compute (linear.cc): as bf16 dot products
// (oneDNN's bf16 matmul, x rounded to bf16), with the weights widened for oneDNN's f32 sgemm, or,
// at any number of rows, on tfm's kernel widening them in registers for AVX-512's FMAs.
enum class BigProducts { kBf16, kWidened, kWidenedInRegisters };
// The path this CPU takes (cpu_isa.h): kWidenedInRegisters where cpu_isa().widened_products, else
// kBf16 where oneDNN has native bf16 dot products here.
BigProducts big_products_path();
// Products of up to this many rows of bf16 weights stay exact in x on every path: more take native
// bf16 dot products where the path and the CPU have them (cpu_isa().dot_product_rows; 63 ms
// against 80 for Qwen3-0.6B's products at 8 rows on an AMD EPYC with AVX512_BF16 when the kernel
// was first written; 4 rows: as fast either way).
inline constexpr int64_t kExactGemvRows = 4;
// Whether products of `m` rows along `path` read x rounded to bf16 (as torch's bf16 activations).
bool reads_rounded_activations(int64_t m, BigProducts path);
// linear() for bf16 weights along a given path (the tests run every path the CPU can).
void linear_bf16_weights(const float* x, const uint16_t* w, int64_t m, int64_t n, int64_t k,
                         float* out, BigProducts path);
// Whether linear_bf16_rows takes products of `m` rows of bf16 x and bf16 weights here.
bool bf16_rows_path(int64_t m);
// linear() of x already in bf16 (autocast's activations) on the kBf16 path: read as it is, where
// linear() would take it widened and round it back (the same products).
void linear_bf16_rows(const uint16_t* x, const uint16_t* w, const float* bias, int64_t m, int64_t n,
                      int64_t k, float* out);
// The same without bias, its output rounded to bf16 (autocast's products).
void linear_bf16_rows_rounded(const uint16_t* x, const uint16_t* w, int64_t m, int64_t n, int64_t k,
                              uint16_t* out);
void rms_norm(const float* x, const float* w, int64_t rows, int64_t hidden, float eps, float* out);
// out may be x (each pair is read before it is written): prepare_attention rotates in place.
void rope(const float* x, const int32_t* positions, const float* inv_freq, int64_t batch,
          int64_t seq, int64_t heads, int64_t head_dim, float attention_scaling, float* out);
// The KV cache holds f32 or bf16 (the model's dtype, as transformers' static cache does).
void cache_write(void* cache, DType cache_dtype, const float* update, const int32_t* slots,
                 int64_t batch, int64_t cache_len, int64_t seq, int64_t row_elems);
void attention(const float* q, const void* k, const void* v, DType kv_dtype, const int32_t* mask,
               const int32_t* slots, int64_t batch, int64_t seq, int64_t cache_len, int64_t q_heads,
               int64_t kv_heads, int64_t head_dim, float scale, float* out, int64_t window = 0);
// The optimizer's arithmetic (graph::Op::kAdamW, kSumSquares).
void adamw_update(const ops::AdamWScalars& s, float decay, float* p, const float* g, float* m,
                  float* v, int64_t n);
double sum_squares(const float* x, int64_t n);
// acc[i] += x[i]
void add_into(float* acc, const float* x, int64_t count);
// An operand of float values: f32, or narrower floats (autocast's bf16) that the kernel widens a
// row or block at a time as it reads them.
struct Floats {
  const void* data;
  DType dtype;
};
// A fused elementwise chain over `inputs`, each block widened as it is loaded. `out` and `second`
// (where a paired program's second result goes: graph::pair_elementwise_siblings) take out_dtype
// values, each block rounded as it is stored, so a chain over bf16 values makes no widened or
// narrowed copy of them.
void elementwise(const graph::ElementwiseProgram& program, const Floats* inputs, int64_t count,
                 void* out, DType out_dtype, void* second = nullptr);
// A vocabulary split over a group of ranks: this rank holds ids [first_id, first_id + vocab), of
// which those from vocab_size on (the whole vocabulary's size, for the loss) are padding.
struct VocabShard {
  int64_t first_id = 0;
  int64_t vocab_size = 0;
  graph::Communicator* group = nullptr;
};

// Training: the cross-entropy sum over rows whose target is not graph::kIgnoreIndex, and the
// backward kernels of each forward op (see graph::Op for their meaning). With a `shard`, the
// logits are this rank's columns; the softmax statistics and the loss are combined over the group.
// The logits are f32, or bf16 (autocast's output layer), rows of `vocab`.
struct Logits {
  const void* data;
  DType dtype;
  int64_t vocab;

  // Row r as f32: where it lies, or widened into `wide`.
  const float* row(int64_t r, std::vector<float>& wide) const;
  float at(int64_t r, int64_t column) const;
};
void cross_entropy(const Logits& logits, const int32_t* targets, int64_t rows, float* loss_sum,
                   const VocabShard* shard = nullptr);
// d_logits: the logits themselves (in their dtype), or f32 or bf16 (graph::fold_casts) of its own.
void cross_entropy_grad(const Logits& logits, const int32_t* targets, const float* d_loss,
                        int64_t rows, void* d_logits, DType out_dtype,
                        const VocabShard* shard = nullptr);
// Both, each row's statistics computed once: the loss, then the gradient written over the logits
// (graph::fold_losses_into_gradients).
void cross_entropy_and_grad(void* logits, DType dtype, int64_t vocab, const int32_t* targets,
                            const float* d_loss, int64_t rows, float* loss_sum,
                            const VocabShard* shard = nullptr);
void reduce_rows(const float* x, int64_t rows, int64_t n, float* out);
void argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* out);
void cast(const void* x, DType from, void* out, DType to, size_t count);
// With a `shard`, ids outside it give no gradient here. `accumulate`: the rows add into d_table's
// values instead of zeros (graph::fold_summed_accumulations).
void embedding_grad(const float* dy, const int32_t* ids, int64_t count, int64_t vocab,
                    int64_t hidden, float* d_table, const VocabShard* shard = nullptr,
                    bool accumulate = false);
void linear_grad_input(const float* dy, const void* w, DType w_dtype, int64_t m, int64_t n,
                       int64_t k, float* dx, bool accumulate = false);
void linear_grad_weight(const float* dy, const float* x, int64_t m, int64_t n, int64_t k, float* dw,
                        bool accumulate = false);
// The same two products of bf16 operands (dy and w; dy and x) as bf16 dot products accumulated in
// f32, for a CPU whose big_products_path() is kBf16.
void linear_grad_input_bf16(const uint16_t* dy, const uint16_t* w, int64_t m, int64_t n, int64_t k,
                            float* dx, bool accumulate);
void linear_grad_weight_bf16(const uint16_t* dy, const uint16_t* x, int64_t m, int64_t n, int64_t k,
                             float* dw, bool accumulate);
void rms_norm_grad_input(const float* x, const float* w, const float* dy, int64_t rows,
                         int64_t hidden, float eps, float* dx);
void rms_norm_grad_weight(const float* x, const float* dy, int64_t rows, int64_t hidden, float eps,
                          float* dw, bool accumulate = false);
// RoPE's rotation of one token's heads: by the angle (direction 1, rope) or by minus it
// (direction -1, rope_grad), the same arithmetic wherever a kernel rotates a row.
struct TokenRotation {
  static constexpr int64_t kMaxHalf = 512;
  // Refuses a head_dim over 2 x kMaxHalf, before any parallel region sets a table.
  static void check(int64_t head_dim);
  void set(int32_t position, const float* inv_freq, int64_t head_dim, float attention_scaling,
           float direction);
  void apply(const float* in, float* out) const;  // one head's row of head_dim
  int64_t half = 0;
  float cos[kMaxHalf], sin[kMaxHalf];
};
// dy as RoPE's output gradient, rotated back before the norm's backward reads it
// (graph::fuse_rope_grads_into_norm_grads): rows of [batch, seq, heads, hidden].
struct RopeGradRows {
  const int32_t* positions;  // [batch, seq]
  const float* inv_freq;     // [hidden / 2]
  int64_t batch, seq, heads;
  float attention_scaling;
};
// Both of the above in one pass over x and dy (graph::fold_norm_weight_grads): dx (+ residual,
// or null) in f32 or bf16, and the weight's gradient added into dw_acc, the same bits as the two
// (and, with `rope`, as rope_grad before them). `bf16_copy`, where not null, gets dx rounded to
// bf16 too (graph::fold_narrow_copies).
void rms_norm_grads(Floats x, const float* w, Floats dy, const float* residual, int64_t rows,
                    int64_t hidden, float eps, void* dx, DType dx_dtype, float* dw_acc,
                    const RopeGradRows* rope = nullptr, uint16_t* bf16_copy = nullptr);
void rope_grad(const float* dy, const int32_t* positions, const float* inv_freq, int64_t batch,
               int64_t seq, int64_t heads, int64_t head_dim, float attention_scaling, float* dx);
// Writes [dq | dk | dv] to `out`.
void attention_grad(const float* q, const float* k, const float* v, const int32_t* mask,
                    const int32_t* slots, const float* dy, int64_t batch, int64_t seq, int64_t len,
                    int64_t q_heads, int64_t kv_heads, int64_t head_dim, float scale, float* out,
                    int64_t window = 0);
// Copies x[:, start:start+length, ...] where each sequence position holds `inner` elements.
void slice_seq(const float* x, int64_t batch, int64_t seq, int64_t inner, int64_t start,
               int64_t length, float* out);

}  // namespace tfm::cpu
