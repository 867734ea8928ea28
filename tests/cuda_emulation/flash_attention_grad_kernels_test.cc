// The CUDA flash-style attention of training under bf16 autocast (q, k and v bf16, keys = the
// sequence's own), its own source run on the CPU through the emulation in shim/: the forward
// pass against the scalar reference in src/ops, and the backward pass (row statistics, then dk
// and dv per key tile, then dq per query tile) against the CPU backend's attention_grad, which
// tests/graph checks against finite differences; the statistics either by a pass of their own or
// from what the forward pass saved, and dq either by the products run again or from the scores'
// gradients the dk/dv kernel saved. dy and the gradients are bf16, as attention's
// are under autocast. The kernels round the probabilities and the scores' gradient to bf16 for
// their products, so the tolerance is bf16's. Cases cover grouped KV heads, several query and key
// tiles, a sequence that is not a multiple of the tile, and a left-padded row whose first queries
// see no key (their dq, and the padded keys' dk and dv, are zero) and whose padded slots hold
// non-finite keys and values.
#include "backends/cuda/flash_attention_grad_kernels.cuh"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "backends/cpu/kernels.h"
#include "cuda_emulation/emulated_values.h"
#include "ops/reference.h"

namespace tfm::cuda {
namespace {

using testing::expect_close;
using testing::random_values;
using testing::to_bf16;
using testing::widened;

struct Case {
  int64_t batch, seq, q_heads, kv_heads, head_dim, padding;
};

std::string describe(const Case& c) {
  return "b" + std::to_string(c.batch) + "_seq" + std::to_string(c.seq) + "_h" +
         std::to_string(c.q_heads) + "x" + std::to_string(c.kv_heads) + "_d" +
         std::to_string(c.head_dim) + "_pad" + std::to_string(c.padding);
}

void PrintTo(const Case& c, std::ostream* os) { *os << describe(c); }

template <int D>
void check(const Case& c) {
  const AttentionShape s{c.batch, c.seq, c.seq, c.q_heads, c.kv_heads, D};
  const float scale = 1.f / std::sqrt(static_cast<float>(D));
  const int64_t q_count = c.batch * c.seq * c.q_heads * D,
                kv_count = c.batch * c.seq * c.kv_heads * D;
  const std::vector<__nv_bfloat16> q = to_bf16(random_values(static_cast<size_t>(q_count), 41));
  const std::vector<__nv_bfloat16> k =
      to_bf16(random_values(static_cast<size_t>(kv_count), 42, -2.f, 2.f));
  const std::vector<__nv_bfloat16> v = to_bf16(random_values(static_cast<size_t>(kv_count), 43));
  // dy in bf16, as attention's output gradient is under autocast.
  const std::vector<__nv_bfloat16> dy = to_bf16(random_values(static_cast<size_t>(q_count), 44));
  std::vector<int32_t> slots(static_cast<size_t>(c.seq)),
      mask(static_cast<size_t>(c.batch * c.seq), 1);
  for (int64_t i = 0; i < c.seq; ++i) slots[i] = static_cast<int32_t>(i);
  for (int64_t j = 0; j < c.padding; ++j) mask[(c.batch - 1) * c.seq + j] = 0;
  const std::vector<float> qf = widened(q), kf = widened(k), vf = widened(v), dyf = widened(dy);
  // Non-finite keys and values in the padded slots: the reference never reads them, and no
  // gradient may either.
  std::vector<__nv_bfloat16> k_stored = k, v_stored = v;
  for (int64_t j = 0; j < c.padding; ++j) {
    for (int64_t e = 0; e < c.kv_heads * D; ++e) {
      const size_t at = static_cast<size_t>(((c.batch - 1) * c.seq + j) * c.kv_heads * D + e);
      k_stored[at] = __float2bfloat16_rn(std::numeric_limits<float>::infinity());
      v_stored[at] = __float2bfloat16_rn(std::numeric_limits<float>::quiet_NaN());
    }
  }

  std::vector<float> want_out(static_cast<size_t>(q_count));
  ops::reference::attention(qf.data(), kf.data(), vf.data(), mask.data(), slots.data(), c.batch,
                            c.seq, c.seq, c.q_heads, c.kv_heads, D, scale, want_out.data());
  std::vector<float> want_grads(static_cast<size_t>(q_count + 2 * kv_count));
  cpu::attention_grad(qf.data(), kf.data(), vf.data(), mask.data(), slots.data(), dyf.data(),
                      c.batch, c.seq, c.seq, c.q_heads, c.kv_heads, D, scale, want_grads.data());

  const dim3 query_tiles{static_cast<unsigned>(query_tile_count(s)),
                         static_cast<unsigned>(c.q_heads), static_cast<unsigned>(c.batch)};
  const dim3 forward_tiles{static_cast<unsigned>(forward_query_tile_count(s)),
                           static_cast<unsigned>(c.q_heads), static_cast<unsigned>(c.batch)};
  const dim3 key_tiles{static_cast<unsigned>((c.seq + kTileKeys - 1) / kTileKeys),
                       static_cast<unsigned>(c.kv_heads), static_cast<unsigned>(c.batch)};
  // The forward pass, in bf16 as under autocast, leaving its rows' log-sum-exp (for the
  // gradient that takes them instead of a statistics pass).
  std::vector<__nv_bfloat16> out = to_bf16(std::vector<float>(static_cast<size_t>(q_count), -7.f));
  std::vector<float> row_lse(static_cast<size_t>(c.batch * c.seq * c.q_heads), -7.f);
  cuda_emulation::launch(forward_tiles, kThreads, ForwardLayout<D>::total, [&] {
    flash_attention_kernel<D, __nv_bfloat16, false, __nv_bfloat16>(
        q.data(), k_stored.data(), v_stored.data(), mask.data(), slots.data(), s, scale, out.data(),
        {.row_lse = row_lse.data()}, {});
  });
  expect_close(widened(out), want_out, 1e-2f, "forward");

  // The rows' statistics (lse, delta) and the query tiles' key ends: by the statistics pass (the
  // forward products again), or from the forward pass's output and log-sum-exp.
  std::vector<float> stats(static_cast<size_t>(2 * c.batch * c.seq * c.q_heads), -7.f);
  std::vector<int32_t> tile_key_ends(query_tiles.x, -7);
  std::vector<float> saved_stats = stats;
  std::vector<int32_t> saved_key_ends = tile_key_ends;
  cuda_emulation::launch(forward_tiles, kThreads, ForwardLayout<D>::total, [&] {
    flash_attention_kernel<D, __nv_bfloat16, true>(
        q.data(), k_stored.data(), v_stored.data(), mask.data(), slots.data(), s, scale,
        static_cast<float*>(nullptr), {dy.data(), stats.data(), tile_key_ends.data()}, {});
  });
  cuda_emulation::launch(query_tiles, kWarps * 32, 0, [&] {
    flash_attention_delta_kernel<D, __nv_bfloat16>(dy.data(), out.data(), row_lse.data(),
                                                   slots.data(), s, saved_stats.data(),
                                                   saved_key_ends.data());
  });
  // The same log-sum-exp bits (one online softmax), the same key ends; delta within bf16's
  // tolerance (from the bf16 output, as torch's flash backward takes it).
  for (size_t row = 0; row < row_lse.size(); ++row) {
    ASSERT_EQ(saved_stats[2 * row], stats[2 * row]) << "lse of row " << row;
  }
  EXPECT_EQ(saved_key_ends, tile_key_ends);
  const auto every_other = [](const std::vector<float>& all, size_t first) {
    std::vector<float> some;
    for (size_t i = first; i < all.size(); i += 2) some.push_back(all[i]);
    return some;
  };
  expect_close(every_other(saved_stats, 1), every_other(stats, 1), 1e-2f, "delta");

  // dq from the products run again, or from the scores' gradients the dk/dv kernel saved: for
  // the whole batch at once, or (where the scratch holds fewer rows) a batch row a launch.
  enum class Dq { kProducts, kSavedAllRows, kSavedRowByRow };
  for (const auto& [saved, dq_from] :
       {std::pair{false, Dq::kProducts}, std::pair{true, Dq::kProducts},
        std::pair{true, Dq::kSavedAllRows}, std::pair{false, Dq::kSavedRowByRow}}) {
    const std::string path = std::string(saved ? "saved forward" : "statistics pass") +
                             (dq_from == Dq::kProducts       ? ", dq by products"
                              : dq_from == Dq::kSavedAllRows ? ", dq from saved dS"
                                                             : ", dq from saved dS row by row");
    const float* row_stats = saved ? saved_stats.data() : stats.data();
    const int32_t* key_ends = saved ? saved_key_ends.data() : tile_key_ends.data();
    // The gradients in bf16, as torch's of autocast's attention.
    std::vector<__nv_bfloat16> narrow_grads = to_bf16(std::vector<float>(want_grads.size(), -7.f));
    __nv_bfloat16* dq = narrow_grads.data();
    __nv_bfloat16* dk = dq + q_count;
    __nv_bfloat16* dv = dk + kv_count;
    const int64_t rows = dq_from == Dq::kSavedRowByRow ? 1 : c.batch;
    // Poison where no tile was saved: the dq kernel must read only the tiles it was left.
    std::vector<__nv_bfloat16> score_grads(
        static_cast<size_t>(rows * score_grad_tiles_per_row(s)) * kScoreGradTileBytes / 2,
        __float2bfloat16_rn(std::numeric_limits<float>::quiet_NaN()));
    for (int64_t first = 0; first < c.batch; first += rows) {
      dim3 row_key_tiles = key_tiles, row_query_tiles = query_tiles;
      row_key_tiles.z = row_query_tiles.z = static_cast<unsigned>(rows);
      cuda_emulation::launch(row_key_tiles, kWarps * 32, StageLayout<D>::total, [&] {
        flash_attention_dkdv_kernel<D>(q.data(), k_stored.data(), v_stored.data(), mask.data(),
                                       slots.data(), dy.data(), row_stats, key_ends, s, scale,
                                       first, dk, dv,
                                       dq_from == Dq::kProducts ? nullptr : score_grads.data());
      });
      if (dq_from == Dq::kProducts) continue;
      cuda_emulation::launch(row_query_tiles, kWarps * 32, StageLayout<D>::total, [&] {
        flash_attention_dq_from_ds_kernel<D>(k_stored.data(), mask.data(), key_ends,
                                             score_grads.data(), s, first, dq);
      });
    }
    if (dq_from == Dq::kProducts) {
      cuda_emulation::launch(query_tiles, kWarps * 32, StageLayout<D>::total, [&] {
        flash_attention_dq_kernel<D>(q.data(), k_stored.data(), v_stored.data(), mask.data(),
                                     slots.data(), dy.data(), row_stats, key_ends, s, scale, dq);
      });
    }
    const std::vector<float> grads = widened(narrow_grads);
    const auto part = [](const std::vector<float>& all, int64_t first, int64_t count) {
      return std::vector<float>(all.begin() + first, all.begin() + first + count);
    };
    expect_close(part(grads, 0, q_count), part(want_grads, 0, q_count), 1e-2f, path + ": dq");
    expect_close(part(grads, q_count, kv_count), part(want_grads, q_count, kv_count), 1e-2f,
                 path + ": dk");
    expect_close(part(grads, q_count + kv_count, kv_count),
                 part(want_grads, q_count + kv_count, kv_count), 1e-2f, path + ": dv");
  }
}

// The dk/dv blocks find the next query tile whose queries see their keys 32 tiles a load: over
// more than 32 tiles whose key ends rise and fall (slots in no order), against a scan.
TEST(FirstTileSeeing, FindsTheNextTileThatSeesTheKeys) {
  std::vector<int32_t> ends(70);
  for (size_t i = 0; i < ends.size(); ++i) ends[i] = static_cast<int32_t>(i * 37 % 101);
  for (const int64_t key0 : {0, 50, 64, 99, 100}) {
    for (const int64_t from : {0, 1, 31, 32, 33, 68, 69, 70}) {
      int64_t want = -1;
      for (int64_t t = from; t < 70 && want < 0; ++t) want = ends[t] > key0 ? t : -1;
      std::vector<int64_t> got(32, -7);
      cuda_emulation::launch(dim3{1, 1, 1}, 32, 0, [&] {
        got[threadIdx.x] = first_tile_seeing(ends.data(), 70, from, key0);
      });
      EXPECT_EQ(got, std::vector<int64_t>(32, want))
          << "keys from " << key0 << ", tiles from " << from;
    }
  }
}

class FlashAttentionGradKernelTest : public ::testing::TestWithParam<Case> {};

TEST_P(FlashAttentionGradKernelTest, MatchesCpuBackend) {
  const Case& c = GetParam();
  const bool ran = dispatch_head_dim(c.head_dim, [&](auto d) { check<decltype(d)::value>(c); });
  EXPECT_TRUE(ran) << "no flash kernel for head_dim " << c.head_dim;
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashAttentionGradKernelTest,
                         ::testing::Values(Case{2, 70, 4, 2, 16, 5}, Case{1, 130, 2, 1, 64, 0},
                                           Case{2, 40, 2, 2, 128, 3},
                                           // A last query tile whose one query sees the first
                                           // key of the last key tile.
                                           Case{1, 65, 2, 1, 16, 0},
                                           // Two query and key tiles at head_dim 128.
                                           Case{1, 80, 2, 1, 128, 0},
                                           // Four query heads a KV head; a whole key tile
                                           // masked and a query tile that sees no key.
                                           Case{2, 100, 4, 1, 32, 70}),
                         [](const auto& info) { return describe(info.param); });

}  // namespace
}  // namespace tfm::cuda
