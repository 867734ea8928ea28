// CUDA kernels, launched on a stream. Activations are f32; large weights and the KV cache are f32
// or bf16 (widened in registers); small weights (norms, biases, RoPE frequencies) are f32. Each
// launcher checks its launch and names itself when the launch fails.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>

#include "graph/elementwise_code.h"
#include "tfm/dtype.h"

namespace tfm::cuda {

// Rows of ids first_id .. first_id + vocab - 1 (a vocabulary shard; 0 for the whole table); other
// ids give zero rows.
void embedding(const void* table, DType table_dtype, int64_t first_id, int64_t vocab,
               int64_t hidden, const int32_t* ids, int64_t count, float* out, cudaStream_t stream);
// out (f32, or bf16 for a product's bf16 operand) = x / rms(x) * w, row by row. x: f32, or a bf16
// product's output (autocast), widened as it is read.
void rms_norm(const void* x, DType x_dtype, const float* w, int64_t rows, int64_t hidden, float eps,
              void* out, DType out_dtype, cudaStream_t stream);
// Each head RMS-normed over its head_dim before RoPE rotates it (graph::fuse_norms_into_rope).
struct HeadNorm {
  const float* weight = nullptr;  // [head_dim]; none: no norm
  float eps = 0.f;
};
// x and out: f32 or bf16, as rms_norm's.
void rope(const void* x, DType x_dtype, const int32_t* positions, const float* inv_freq,
          int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, float attention_scaling,
          void* out, DType out_dtype, cudaStream_t stream, const HeadNorm& norm = {});
void slice_seq(const float* x, int64_t batch, int64_t seq, int64_t inner, int64_t start,
               int64_t length, float* out, cudaStream_t stream);
void cast(const void* x, DType from, void* out, DType to, int64_t count, cudaStream_t stream);
// The KV cache (f32 or bf16) [batch, cache_len, row_elems] with token s of `update` [batch, seq,
// row_elems] written at slot slots[s] (graph::Op::kCacheWrite); slots outside the cache are
// skipped.
void cache_write(void* cache, DType cache_dtype, const float* update, const int32_t* slots,
                 int64_t batch, int64_t cache_len, int64_t seq, int64_t row_elems,
                 cudaStream_t stream);
void add_bias(float* y, const float* bias, int64_t rows, int64_t n, cudaStream_t stream);
// Collectives' data movement around NCCL. gathered holds `ranks` blocks of [rows, cols] one
// after the other; out is [rows, cols x ranks], every rank's columns side by side.
void interleave_gathered(const float* gathered, int64_t rows, int64_t cols, int64_t ranks,
                         float* out, cudaStream_t stream);
// out = the sum of blocks first .. first + block - 1 of `all` (blocks of `count` elements).
void sum_replica_block(const float* all, int64_t count, int64_t first, int64_t block, float* out,
                       cudaStream_t stream);
// out[r] = the index of row r's largest value, the first of equals (as std::max_element).
void argmax_rows(const float* x, int64_t rows, int64_t n, int32_t* out, cudaStream_t stream);

// A fused elementwise chain (graph::ElementwiseProgram) in a form passed by value to a kernel,
// which keeps kMaxEwDepth temporaries per element (fusion::ElementwiseLimits: the CUDA target's).
inline constexpr int kMaxEwDepth = 8;
inline constexpr int kMaxEwInstrs = 32;
inline constexpr int kMaxEwInputs = 12;
struct EwKernelProgram {
  int count = 0;
  uint8_t code[kMaxEwInstrs] = {};
  uint8_t operand[kMaxEwInstrs] = {};
  float scalar[kMaxEwInstrs] = {};
  // f32, or bf16 where bit i of bf16_inputs is set (autocast's products: the loads widen them).
  const void* inputs[kMaxEwInputs] = {};
  uint32_t bf16_inputs = 0;
  // A paired program (graph::pair_elementwise_siblings) writes its second result `second`
  // elements after the first.
  int results = 1;
  int64_t second = 0;
};
// out: f32, or bf16 for a product's bf16 operand (graph::fold_casts).
void elementwise(const EwKernelProgram& program, int64_t count, void* out, DType out_dtype,
                 cudaStream_t stream);

// When the decode products read their weights (overlapped_launch.h): a graph's constants before
// they wait for the kernel before them, so that the loads overlap its end; weights the step itself
// writes (gathered for FSDP, cast under autocast) only after.
enum class WeightReads { kEarly, kAfterWait };

// y[m, n] = sum_k x[m, k] * w[n, k] + bias[n] + residual[m, n] for few rows (decode): one warp
// per output column, bandwidth bound on the weights. bias and residual may be null.
inline constexpr int64_t kGemvMaxRows = 8;
void gemv(const float* x, const void* w, DType w_dtype, const float* bias, const float* residual,
          int64_t m, int64_t n, int64_t k, float* y, WeightReads reads, cudaStream_t stream);
// An RMSNorm the products apply to x's rows on the way in (a decoder layer's input norm): they
// read x / rms(x) * weight, rms over the row's k values. A null weight: x as it is.
struct InputNorm {
  const float* weight = nullptr;
  float eps = 0.f;
};

// q, k and v's products (graph::Op::kQkvLinear) for few rows in one launch: y[i][m, n[i]] =
// norm(x) w[i]^T + bias[i], the three weights of one dtype; the biases all null or all given.
struct QkvProducts {
  const void* w[3];
  const float* bias[3];
  int64_t n[3];
  float* y[3];
};
void qkv_gemv(const float* x, const QkvProducts& products, DType w_dtype, const InputNorm& norm,
              int64_t m, int64_t k, WeightReads reads, cudaStream_t stream);
// y[m, n] = silu(h w_gate^T + bias_gate) * (h w_up^T + bias_up), h = norm(x), for few rows, both
// weights streamed in one pass. Biases may be null.
void gated_gemv(const float* x, const void* w_gate, const void* w_up, DType w_dtype,
                const InputNorm& norm, const float* bias_gate, const float* bias_up, int64_t m,
                int64_t n, int64_t k, float* y, WeightReads reads, cudaStream_t stream);

// The same three products for up to kSkinnyMaxRows rows, on tensor cores: x's rows (f32, normed
// by `norm` on the way as the GEMV does) are rounded to bf16 as cuBLASLt's products read them; the
// weights bf16, k % 32 == 0, every n % 16 == 0 (skinny_shapes_fit), the weights 16-byte aligned.
// A block holds x's 16 rows in shared memory as bf16, which bounds k.
inline constexpr int64_t kSkinnyMaxRows = 16;
inline constexpr int64_t kSkinnyMaxK = 6144;
inline bool skinny_shapes_fit(int64_t k, std::initializer_list<int64_t> columns) {
  bool fit = k % 32 == 0 && k <= kSkinnyMaxK;
  for (int64_t n : columns) fit = fit && n % 16 == 0;
  return fit;
}
void skinny_linear(const float* x, const void* w, const InputNorm& norm, const float* bias,
                   const float* residual, int64_t m, int64_t n, int64_t k, float* y,
                   WeightReads reads, cudaStream_t stream);
void skinny_qkv(const float* x, const QkvProducts& products, const InputNorm& norm, int64_t m,
                int64_t k, WeightReads reads, cudaStream_t stream);
void skinny_gated(const float* x, const void* w_gate, const void* w_up, const InputNorm& norm,
                  const float* bias_gate, const float* bias_up, int64_t m, int64_t n, int64_t k,
                  float* y, WeightReads reads, cudaStream_t stream);

// Attention over the static cache (see graph::Op::kAttention). Prefill over a bf16 cache runs
// flash-style on tensor cores where flash_attention_applies(): q and the probabilities are read
// as bf16, as transformers' bf16 attention does. Otherwise keys are split into chunks that run
// as separate blocks (split-K, so a decode step fills the GPU); the last block of a row to finish
// merges the chunks' softmax statistics. The flash kernel splits the keys the same way when its
// query tiles alone are too few blocks. `scratch` holds attention_scratch_bytes(); `arrivals`
// holds one counter per (batch, query, q head) row, zero before the launch and left zero after.
// A sliding `window` (0: none) hides key j from query i unless slots[i] - j < window; the flash
// kernels have none (attention_path keeps windowed attention off them).
struct AttentionShape {
  int64_t batch, seq, cache_len, q_heads, kv_heads, head_dim;
  int64_t window = 0;
};
// The new tokens' q, k and v as the products leave them, and what prepare_attention (below)
// needs to norm, rotate and store them.
struct AttentionInputs {
  const float *q, *k, *v;
  const int32_t *positions, *slots;
  const float *inv_freq, *q_norm, *k_norm;
};
// A decode step (seq 1) with prepare_attention fused into the attention kernel: the token's q, k
// and v as the products left them. The kernel norms and rotates q and the new key itself, reads
// them for the token's own slot, and one block per KV head writes k and v into the caches.
// `keys_before_wait`: no kernel of the step writes the mask, the slots or the caches (the step's
// inputs, and caches only this kernel writes), so the kernel reads its first keys before it waits
// for the kernel before (overlapped_launch.h).
struct FreshToken {
  AttentionInputs in;
  float eps = 0.f, scaling = 1.f;
  bool keys_before_wait = false;
};
bool flash_attention_applies(const AttentionShape& shape, DType kv_dtype);
size_t attention_scratch_bytes(const AttentionShape& shape, DType kv_dtype);
// `fresh` null: q is ready and the cache holds the new token's k and v.
void attention(const float* q, const void* k, const void* v, DType kv_dtype, const int32_t* mask,
               const int32_t* slots, const AttentionShape& shape, float scale, float* out,
               void* scratch, unsigned* arrivals, const FreshToken* fresh, cudaStream_t stream);
// q f32, or bf16 (training under autocast, where k and v are the sequence's own, cache_len =
// seq); k and v bf16. With `scratch` (flash_attention_scratch_bytes()) and `arrivals` (as
// attention()'s) the keys may be split over blocks; without (null), never.
// With row_lse (never with key splits), each query row's log-sum-exp also goes there, [B, S, Hq]
// f32, for the gradient (SavedForward).
size_t flash_attention_scratch_bytes(const AttentionShape& shape);
void flash_attention(const void* q, DType q_dtype, const void* k, const void* v,
                     const int32_t* mask, const int32_t* slots, const AttentionShape& shape,
                     float scale, void* out, DType out_dtype, float* row_lse, void* scratch,
                     unsigned* arrivals, cudaStream_t stream);
// What a flash_attention forward pass left for its gradient (graph::save_attention_statistics):
// its output and each query row's log-sum-exp. None (out null): the gradient runs the forward
// products again for them.
struct SavedForward {
  const void* out = nullptr;
  DType out_dtype = DType::bf16;
  const float* row_lse = nullptr;
};
// The backward pass of flash_attention with bf16 q and dy (attention's output gradient under
// autocast): grads = bf16 [dq | dk | dv], as torch's. `scratch` holds
// flash_attention_grad_scratch_bytes() (each query row's log-sum-exp and dy · out, each query
// tile's end of keys, and the scores' gradients the dq kernel reads: up to `budget` bytes,
// KernelOptions::saved_score_grad_mib).
size_t flash_attention_grad_scratch_bytes(const AttentionShape& shape, size_t budget);
void flash_attention_grad(const void* q, const void* k, const void* v, const int32_t* mask,
                          const int32_t* slots, const void* dy, const AttentionShape& shape,
                          float scale, const SavedForward& saved, size_t budget, void* grads,
                          void* scratch, cudaStream_t stream);

// graph::Op::kPrepareAttention for shape's batch x seq new tokens: q_out [B, S, Hq, D] gets q
// normed per head (q_norm) and rotated; k is normed (k_norm) and rotated into k_cache, v copied
// into v_cache, at each token's slot (caches [B, cache_len, Hkv, D] of `cache_dtype`). The norms
// are both null (no norm) or both given.
void prepare_attention(const AttentionInputs& in, const AttentionShape& shape, float eps,
                       float attention_scaling, void* k_cache, void* v_cache, DType cache_dtype,
                       float* q_out, cudaStream_t stream);

}  // namespace tfm::cuda
