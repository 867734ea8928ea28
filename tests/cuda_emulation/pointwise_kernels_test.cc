// The CUDA row-wise and element-wise kernels, their own source run on the CPU through the
// emulation in shim/ (no GPU needed), launched as pointwise.cu launches them: embedding (whole
// table and a vocabulary shard, f32 and bf16 tables), rms_norm and rope (f32 and bf16 in and out),
// slice_seq, cache_write (f32 and bf16 caches), cast (every f32/bf16 pair), add_bias, argmax (ties,
// -inf and NaN rows, rows longer than the block) and fused elementwise programs (f32 and bf16 out,
// one result or two); against the scalar references in src/ops or the op's closed form.
#include "backends/cuda/pointwise_kernels.cuh"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "cuda_emulation/emulated_values.h"
#include "ops/reference.h"
#include "support/argmax_rows.h"

namespace tfm::cuda {
namespace {

using testing::expect_close;
using testing::random_values;
using testing::to_bf16;
using testing::widened;

// The launchers' grid for one thread per element (or per lane of a row's warp).
dim3 grid_for(int64_t threads) {
  return {static_cast<unsigned>(blocks_for(threads, kThreads)), 1, 1};
}

template <typename T>
std::vector<T> stored(const std::vector<float>& values) {
  if constexpr (std::is_same_v<T, float>) {
    return values;
  } else {
    return to_bf16(values);
  }
}

template <typename T>
constexpr float tolerance() {
  return std::is_same_v<T, float> ? 1e-5f : 8e-3f;
}

template <typename T>
void check_embedding(int64_t first_id, int64_t vocab, int64_t hidden) {
  const std::vector<T> table = stored<T>(random_values(static_cast<size_t>(vocab * hidden), 1));
  // Ids below, inside and above the shard, repeated, first and last row of it.
  const std::vector<int32_t> ids = {
      static_cast<int32_t>(first_id + vocab - 1), static_cast<int32_t>(first_id),
      static_cast<int32_t>(first_id + 2),         static_cast<int32_t>(first_id + vocab),
      static_cast<int32_t>(first_id + 2),         static_cast<int32_t>(first_id + vocab + 7),
      static_cast<int32_t>(first_id - 1),         static_cast<int32_t>(first_id + 1)};
  const int64_t count = static_cast<int64_t>(ids.size());
  std::vector<float> out(static_cast<size_t>(count * hidden), -7.f);
  cuda_emulation::launch(grid_for(count * hidden), kThreads, 0, [&] {
    embedding_kernel<T>(table.data(), first_id, vocab, hidden, ids.data(), count, out.data());
  });
  // The shard's rows through the reference; ids outside it give zero rows.
  const std::vector<float> wide = widened(table);
  std::vector<float> want(out.size(), 0.f);
  for (int64_t i = 0; i < count; ++i) {
    const int32_t row = static_cast<int32_t>(ids[i] - first_id);
    if (row < 0 || row >= vocab) continue;
    ops::reference::embedding(wide.data(), vocab, hidden, &row, 1, want.data() + i * hidden);
  }
  expect_close(out, want, 0.f, "embedding");
}

TEST(PointwiseKernels, Embedding) {
  check_embedding<float>(0, 20, 45);
  check_embedding<__nv_bfloat16>(0, 20, 45);
  check_embedding<float>(5, 6, 71);
  check_embedding<__nv_bfloat16>(40, 9, 33);
}

// X: the input's type (bf16: a product's output under autocast), T: the output's.
template <typename T, typename X = float>
void check_rms_norm(int64_t rows, int hidden) {
  const float eps = 1e-5f;
  const std::vector<X> stored_x =
      stored<X>(random_values(static_cast<size_t>(rows * hidden), 2, -2.f, 2.f));
  const std::vector<float> x = widened(stored_x);
  const std::vector<float> w = random_values(static_cast<size_t>(hidden), 3, 0.5f, 1.5f);
  std::vector<T> out = stored<T>(std::vector<float>(x.size(), -7.f));
  cuda_emulation::launch(grid_for(rows * 32), kThreads, 0, [&] {
    rms_norm_kernel<T>(stored_x.data(), w.data(), rows, hidden, eps, out.data());
  });
  std::vector<float> want(x.size());
  ops::reference::rms_norm(x.data(), w.data(), rows, hidden, eps, want.data());
  expect_close(widened(out), want, tolerance<T>(), "rms_norm");
}

TEST(PointwiseKernels, RmsNorm) {
  check_rms_norm<float>(19, 100);  // 8 rows a block: 3 blocks, the last partly idle
  check_rms_norm<__nv_bfloat16>(19, 100);
  check_rms_norm<float>(3, 7);  // fewer values than lanes
  check_rms_norm<__nv_bfloat16>(9, 256);
  check_rms_norm<float, __nv_bfloat16>(19, 100);
  check_rms_norm<__nv_bfloat16, __nv_bfloat16>(9, 256);
}

// RoPE as rope_kernel applies it, or (`normed`) each head RMS-normed first as normed_rope_kernel
// does: against the reference norm and rotation one after the other.
template <typename T, typename X = float>
void check_rope(int64_t head_dim, bool normed) {
  const int64_t batch = 2, seq = 3, heads = 5, half = head_dim / 2;
  const float scaling = 1.25f, eps = 1e-6f;
  const std::vector<X> stored_x =
      stored<X>(random_values(static_cast<size_t>(batch * seq * heads * head_dim), 4));
  const std::vector<float> x = widened(stored_x);
  const std::vector<float> norm = random_values(static_cast<size_t>(head_dim), 5, 0.5f, 1.5f);
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] = std::pow(10000.f, -2.f * static_cast<float>(i) / head_dim);
  }
  const std::vector<int32_t> positions = {0, 1, 2, 17, 30, 41};
  std::vector<T> out = stored<T>(std::vector<float>(x.size(), -7.f));
  const int64_t tokens = batch * seq;
  const int h = static_cast<int>(half);
  if (normed) {
    cuda_emulation::launch(grid_for(tokens * heads * 32), kThreads, 0, [&] {
      normed_rope_kernel(stored_x.data(), norm.data(), eps, positions.data(), inv_freq.data(),
                         tokens, heads, h, scaling, out.data());
    });
  } else {
    cuda_emulation::launch(grid_for(tokens * heads * half), kThreads, 0, [&] {
      rope_kernel(stored_x.data(), positions.data(), inv_freq.data(), tokens, heads, h, scaling,
                  out.data());
    });
  }
  std::vector<float> normed_x = x, want(x.size());
  if (normed) {
    ops::reference::rms_norm(x.data(), norm.data(), tokens * heads, head_dim, eps, normed_x.data());
  }
  ops::reference::rope(normed_x.data(), positions.data(), inv_freq.data(), batch, seq, heads,
                       head_dim, scaling, want.data());
  expect_close(widened(out), want, tolerance<T>(),
               std::string(normed ? "normed " : "") + "rope, head_dim " + std::to_string(head_dim));
}

TEST(PointwiseKernels, Rope) {
  for (const bool normed : {false, true}) {  // normed: q_norm / k_norm (fuse_norms_into_rope)
    for (const int64_t head_dim : {26, 128}) {
      check_rope<float>(head_dim, normed);
      check_rope<__nv_bfloat16>(head_dim, normed);         // a product's bf16 operand (fold_casts)
      check_rope<float, __nv_bfloat16>(head_dim, normed);  // q or k's bf16 product (autocast)
      check_rope<__nv_bfloat16, __nv_bfloat16>(head_dim, normed);
    }
  }
}

template <typename T>
void check_cache_write() {
  const int64_t batch = 2, cache_len = 9, seq = 3, row_elems = 37;
  const std::vector<int32_t> slots{6, 2, 7};
  const std::vector<float> before =
      random_values(static_cast<size_t>(batch * cache_len * row_elems), 11);
  const std::vector<float> update = random_values(static_cast<size_t>(batch * seq * row_elems), 12);
  std::vector<T> cache = stored<T>(before);
  const int64_t total = batch * seq * row_elems;
  cuda_emulation::launch(grid_for(total), kThreads, 0, [&] {
    cache_write_kernel(cache.data(), update.data(), slots.data(), seq, cache_len, row_elems, total);
  });
  std::vector<float> want = widened(stored<T>(before));
  ops::reference::cache_write(want.data(), widened(stored<T>(update)).data(), slots.data(), batch,
                              cache_len, seq, row_elems);
  expect_close(widened(cache), want, 0.f, "cache_write");
}

TEST(PointwiseKernels, CacheWrite) {
  check_cache_write<float>();
  check_cache_write<__nv_bfloat16>();
}

TEST(PointwiseKernels, SliceSeq) {
  const int64_t batch = 3, seq = 11, inner = 37, start = 4, length = 5;
  const std::vector<float> x = random_values(static_cast<size_t>(batch * seq * inner), 5);
  const int64_t total = batch * length * inner;
  std::vector<float> out(static_cast<size_t>(total), -7.f);
  cuda_emulation::launch(grid_for(total), kThreads, 0, [&] {
    slice_seq_kernel(x.data(), seq, inner, start, length, total, out.data());
  });
  std::vector<float> want;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t s = start; s < start + length; ++s) {
      const float* row = x.data() + (b * seq + s) * inner;
      want.insert(want.end(), row, row + inner);
    }
  }
  expect_close(out, want, 0.f, "slice_seq");
}

template <typename From, typename To>
void check_cast(int64_t count) {
  const std::vector<float> values = random_values(static_cast<size_t>(count), 6, -3.f, 3.f);
  const std::vector<From> x = stored<From>(values);
  // A value read as f32 is kept to bf16's precision, or exactly.
  const float tol = std::is_same_v<To, float> || std::is_same_v<From, To> ? 0.f : 4e-3f;
  std::vector<To> out = stored<To>(std::vector<float>(x.size(), -7.f));
  cuda_emulation::launch(grid_for(count), kThreads, 0,
                         [&] { cast_kernel<From, To>(x.data(), out.data(), count); });
  expect_close(widened(out), widened(x), tol, "cast");
  // Four elements a thread (count a multiple of 4; std::vector's storage is 16-byte aligned).
  out = stored<To>(std::vector<float>(x.size(), -7.f));
  cuda_emulation::launch(grid_for(count / 4), kThreads, 0,
                         [&] { cast_kernel<From, To, 4>(x.data(), out.data(), count); });
  expect_close(widened(out), widened(x), tol, "cast, four a thread");
}

TEST(PointwiseKernels, Cast) {
  check_cast<float, __nv_bfloat16>(700);
  check_cast<__nv_bfloat16, float>(700);
  check_cast<__nv_bfloat16, __nv_bfloat16>(700);
  check_cast<float, float>(700);
  // Values bf16 holds exactly come back unchanged; one halfway between two bf16 values rounds to
  // the even one.
  const std::vector<float> exact = {1.f, -0.5f, 3.140625f, 0.f, 65280.f, 1.f + 1.f / 256};
  std::vector<__nv_bfloat16> out(exact.size());
  cuda_emulation::launch(grid_for(static_cast<int64_t>(exact.size())), kThreads, 0, [&] {
    cast_kernel<float, __nv_bfloat16>(exact.data(), out.data(), static_cast<int64_t>(exact.size()));
  });
  expect_close(widened(out), {1.f, -0.5f, 3.140625f, 0.f, 65280.f, 1.f}, 0.f, "exact cast");
}

TEST(PointwiseKernels, AddBias) {
  const int64_t rows = 9, n = 61;
  const std::vector<float> y0 = random_values(static_cast<size_t>(rows * n), 7);
  const std::vector<float> bias = random_values(static_cast<size_t>(n), 8);
  std::vector<float> y = y0;
  cuda_emulation::launch(grid_for(rows * n), kThreads, 0,
                         [&] { add_bias_kernel(y.data(), bias.data(), n, rows * n); });
  std::vector<float> want(y0.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = y0[i] + bias[i % n];
  expect_close(y, want, 0.f, "add_bias");
}

void check_argmax(const std::vector<float>& x, int64_t rows, int64_t n) {
  std::vector<int32_t> out(static_cast<size_t>(rows), -7);
  cuda_emulation::launch({static_cast<unsigned>(rows), 1, 1}, kArgmaxThreads, 0,
                         [&] { argmax_kernel(x.data(), n, out.data()); });
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x.data() + r * n;
    EXPECT_EQ(out[r], std::max_element(row, row + n) - row) << "row " << r << " of " << n;
  }
}

TEST(PointwiseKernels, Argmax) {
  // Rows of 2500 start on 16-byte boundaries; of 2501 and 37, at every offset.
  for (const int64_t n : {int64_t{2500}, int64_t{2501}, int64_t{37}}) {
    check_argmax(testing::argmax_edge_rows(n), testing::kArgmaxRows, n);
  }
}

// Each program by the one-element kernel over 777 elements and the four-element one over 776
// (float4 loads: the inputs start 16-byte aligned).
TEST(PointwiseKernels, Elementwise) {
  using graph::EwCode;
  const int64_t count = 777;
  std::vector<std::vector<float>> inputs;
  for (uint64_t i = 0; i < 4; ++i) {
    inputs.push_back(random_values(static_cast<size_t>(count), 10 + i, -4.f, 4.f));
  }
  const float* const ptrs[4] = {inputs[0].data(), inputs[1].data(), inputs[2].data(),
                                inputs[3].data()};
  // silu'(x0) * x1 * silu(x2) + 0.5 * x3, and x3 + x0 * (x1 + x2): every instruction, a stack of 3.
  const std::vector<graph::ElementwiseProgram> programs = {
      {{{EwCode::kLoad, 0},
        {EwCode::kLoad, 1},
        {EwCode::kSiluGrad},
        {EwCode::kLoad, 2},
        {EwCode::kSilu},
        {EwCode::kMul},
        {EwCode::kLoad, 3},
        {EwCode::kScale, 0, 0.5f},
        {EwCode::kAdd}}},
      {{{EwCode::kLoad, 3},
        {EwCode::kLoad, 0},
        {EwCode::kLoad, 1},
        {EwCode::kLoad, 2},
        {EwCode::kAdd},
        {EwCode::kMul},
        {EwCode::kAdd}}},
      {{{EwCode::kLoad, 2}}},
  };
  for (const graph::ElementwiseProgram& program : programs) {
    EwKernelProgram kp;
    kp.count = static_cast<int>(program.instrs.size());
    for (int p = 0; p < kp.count; ++p) {
      kp.code[p] = static_cast<uint8_t>(program.instrs[p].code);
      kp.operand[p] = static_cast<uint8_t>(program.instrs[p].operand);
      kp.scalar[p] = program.instrs[p].scalar;
    }
    for (int i = 0; i < 4; ++i) kp.inputs[i] = ptrs[i];
    std::vector<float> want(static_cast<size_t>(count));
    ops::reference::elementwise(program, ptrs, count, want.data());
    std::vector<float> out(want.size(), -7.f);
    cuda_emulation::launch(grid_for(count), kThreads, 0,
                           [&] { elementwise_kernel<1>(kp, count, out.data()); });
    expect_close(out, want, 1e-5f, "one element a thread");
    const int64_t vectors = count / 4 * 4;
    const std::vector<float> want4(want.begin(), want.begin() + vectors);
    std::vector<float> out4(static_cast<size_t>(vectors), -7.f);
    cuda_emulation::launch(grid_for(vectors / 4), kThreads, 0,
                           [&] { elementwise_kernel<4>(kp, vectors, out4.data()); });
    expect_close(out4, want4, 1e-5f, "four elements a thread");
    // bf16 out, a product's operand (graph::fold_casts).
    std::vector<__nv_bfloat16> out16 = to_bf16(std::vector<float>(want.size(), -7.f));
    cuda_emulation::launch(grid_for(count), kThreads, 0,
                           [&] { elementwise_kernel<1>(kp, count, out16.data()); });
    expect_close(widened(out16), want, tolerance<__nv_bfloat16>(), "bf16, one element a thread");
    std::vector<__nv_bfloat16> out16_4 = to_bf16(std::vector<float>(want4.size(), -7.f));
    cuda_emulation::launch(grid_for(vectors / 4), kThreads, 0,
                           [&] { elementwise_kernel<4>(kp, vectors, out16_4.data()); });
    expect_close(widened(out16_4), want4, tolerance<__nv_bfloat16>(),
                 "bf16, four elements a thread");

    // Inputs 1 and 2 in bf16 (autocast's products), loaded widened: the reference reads the
    // same values in f32.
    const std::vector<__nv_bfloat16> narrow1 = to_bf16(inputs[1]), narrow2 = to_bf16(inputs[2]);
    const std::vector<float> wide1 = widened(narrow1), wide2 = widened(narrow2);
    const float* const mixed[4] = {inputs[0].data(), wide1.data(), wide2.data(), inputs[3].data()};
    std::vector<float> want_mixed(want.size());
    ops::reference::elementwise(program, mixed, count, want_mixed.data());
    EwKernelProgram kp_mixed = kp;
    kp_mixed.inputs[1] = narrow1.data();
    kp_mixed.inputs[2] = narrow2.data();
    kp_mixed.bf16_inputs = 0b0110;
    std::vector<float> out_mixed(want.size(), -7.f);
    cuda_emulation::launch(grid_for(count), kThreads, 0,
                           [&] { elementwise_kernel<1>(kp_mixed, count, out_mixed.data()); });
    expect_close(out_mixed, want_mixed, 1e-5f, "bf16 inputs, one element a thread");
    std::vector<float> out_mixed4(static_cast<size_t>(vectors), -7.f);
    cuda_emulation::launch(grid_for(vectors / 4), kThreads, 0,
                           [&] { elementwise_kernel<4>(kp_mixed, vectors, out_mixed4.data()); });
    expect_close(out_mixed4, std::vector<float>(want_mixed.begin(), want_mixed.begin() + vectors),
                 1e-5f, "bf16 inputs, four elements a thread");
  }
}

// A paired program (graph::pair_elementwise_siblings): two chains one after the other, each
// result written to its place in the output, the second `second` elements after the first (a
// multiple of four); against each chain alone by the reference. One and four elements a thread,
// f32 and bf16 out.
template <typename T>
void check_paired_elementwise(int64_t count, int W) {
  using graph::EwCode;
  std::vector<std::vector<float>> inputs;
  for (uint64_t i = 0; i < 3; ++i) {
    inputs.push_back(random_values(static_cast<size_t>(count), 20 + i, -4.f, 4.f));
  }
  const float* const ptrs[3] = {inputs[0].data(), inputs[1].data(), inputs[2].data()};
  // dy silu(gate) and silu'(gate) (dy up): the MLP gating's two gradients (dy, gate, up).
  const graph::ElementwiseProgram d_up{
      {{EwCode::kLoad, 0}, {EwCode::kLoad, 1}, {EwCode::kSilu}, {EwCode::kMul}}};
  const graph::ElementwiseProgram d_gate{{{EwCode::kLoad, 1},
                                          {EwCode::kLoad, 0},
                                          {EwCode::kLoad, 2},
                                          {EwCode::kMul},
                                          {EwCode::kSiluGrad}}};
  std::vector<float> want_up(static_cast<size_t>(count)), want_gate(want_up.size());
  ops::reference::elementwise(d_up, ptrs, count, want_up.data());
  ops::reference::elementwise(d_gate, ptrs, count, want_gate.data());
  EwKernelProgram kp;
  for (const graph::ElementwiseProgram* program : {&d_up, &d_gate}) {
    for (const graph::EwInstr& instr : program->instrs) {
      kp.code[kp.count] = static_cast<uint8_t>(instr.code);
      kp.operand[kp.count++] = static_cast<uint8_t>(instr.operand);
    }
  }
  for (int i = 0; i < 3; ++i) kp.inputs[i] = ptrs[i];
  kp.results = 2;
  kp.second = (count + 63) / 64 * 64;
  std::vector<T> out = stored<T>(std::vector<float>(static_cast<size_t>(kp.second + count), -7.f));
  cuda_emulation::launch(grid_for(count / W), kThreads, 0, [&] {
    if (W == 4) {
      elementwise_kernel<4>(kp, count, out.data());
    } else {
      elementwise_kernel<1>(kp, count, out.data());
    }
  });
  const std::vector<float> got = widened(out);
  const std::string how = std::to_string(W) + " a thread";
  expect_close(std::vector<float>(got.begin(), got.begin() + count), want_up, tolerance<T>(),
               "first result, " + how);
  expect_close(std::vector<float>(got.begin() + kp.second, got.end()), want_gate, tolerance<T>(),
               "second result, " + how);
  for (int64_t i = count; i < kp.second; ++i) {
    ASSERT_EQ(got[static_cast<size_t>(i)], -7.f) << "between the results, at " << i;
  }
}

TEST(PointwiseKernels, PairedElementwise) {
  check_paired_elementwise<float>(300, 1);
  check_paired_elementwise<float>(300, 4);
  check_paired_elementwise<__nv_bfloat16>(300, 1);
  check_paired_elementwise<__nv_bfloat16>(300, 4);
}

}  // namespace
}  // namespace tfm::cuda
