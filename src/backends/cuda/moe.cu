#include "backends/cuda/cuda_status.h"
#include "backends/cuda/float_types.cuh"
#include "backends/cuda/moe.h"
#include "backends/cuda/moe_kernels.cuh"

namespace tfm::cuda {
namespace {

size_t aligned(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Where moe_experts keeps its pairs and its products' results in the scratch.
struct ExpertsScratch {
  ExpertPairs pairs;
  float* act;   // [pairs, inter]
  float* down;  // [pairs, hidden]
  size_t bytes;

  ExpertsScratch(const MoeExpertsShape& s, void* base) {
    auto* at = static_cast<char*>(base);
    size_t used = 0;
    const auto take = [&](size_t bytes) {
      char* p = at == nullptr ? nullptr : at + used;
      used += aligned(bytes);
      return p;
    };
    const auto pairs_count = static_cast<size_t>(s.pairs);
    pairs.offset = reinterpret_cast<int32_t*>(take(sizeof(int32_t) * (s.held + 1)));
    pairs.row = reinterpret_cast<int32_t*>(take(sizeof(int32_t) * pairs_count));
    pairs.pair_of = reinterpret_cast<int32_t*>(take(sizeof(int32_t) * s.rows * s.held));
    act = reinterpret_cast<float*>(take(sizeof(float) * pairs_count * s.inter));
    down = reinterpret_cast<float*>(take(sizeof(float) * pairs_count * s.hidden));
    bytes = used;
  }
};

unsigned blocks(int64_t count, int64_t per_block) {
  return static_cast<unsigned>((count + per_block - 1) / per_block);
}

// The products of experts [begin, end) of the held ones, at most kExpertsPerLaunch.
template <typename W>
void launch_products(const float* x, const MoeExpertWeights& w, const MoeExpertsShape& s,
                     const ExpertsScratch& at, int64_t begin, int64_t end, cudaStream_t stream) {
  ExpertWeightTable<W> gate{}, up{}, down{};
  for (int64_t e = begin; e < end; ++e) {
    const auto i = static_cast<size_t>(e);
    gate.w[e - begin] = static_cast<const W*>(w.gate[i]);
    up.w[e - begin] = static_cast<const W*>(w.up[i]);
    down.w[e - begin] = static_cast<const W*>(w.down[i]);
  }
  const auto experts = static_cast<unsigned>(end - begin);
  moe_gate_up_kernel<W><<<dim3{blocks(s.inter, kMoeWarps), experts, 1}, kMoeThreads, 0, stream>>>(
      x, s.hidden, s.inter, gate, up, begin, at.pairs.offset, at.pairs.row, at.act);
  check_launch("moe_gate_up");
  moe_down_kernel<W><<<dim3{blocks(s.hidden, kMoeWarps), experts, 1}, kMoeThreads, 0, stream>>>(
      at.act, s.inter, s.hidden, down, begin, at.pairs.offset, at.down);
  check_launch("moe_down");
}

}  // namespace

void moe_route(const float* logits, int64_t rows, int64_t experts, int64_t top_k, bool normed,
               float* routing, cudaStream_t stream) {
  if (rows == 0) return;  // a grid of no blocks fails to launch
  moe_route_kernel<<<blocks(rows, kMoeThreads), kMoeThreads, 0, stream>>>(logits, rows, experts,
                                                                          top_k, normed, routing);
  check_launch("moe_route");
}

size_t moe_experts_scratch_bytes(const MoeExpertsShape& s) {
  return ExpertsScratch(s, nullptr).bytes;
}

void moe_experts(const float* x, const float* routing, const MoeExpertWeights& w,
                 const MoeExpertsShape& s, void* scratch, float* out, cudaStream_t stream) {
  if (s.rows == 0) return;
  const ExpertsScratch at(s, scratch);
  moe_expert_pairs_kernel<<<1, kMoeThreads, 0, stream>>>(routing, s.rows, s.experts, s.first,
                                                         s.held, at.pairs);
  check_launch("moe_expert_pairs");
  with_float_type(w.dtype, "moe_experts", [&](auto weight_type) {
    using W = typename decltype(weight_type)::type;
    for (int64_t begin = 0; begin < s.held; begin += kExpertsPerLaunch) {
      launch_products<W>(x, w, s, at, begin, std::min(s.held, begin + kExpertsPerLaunch), stream);
    }
  });
  moe_combine_pairs_kernel<<<blocks(s.rows * s.hidden, kMoeThreads), kMoeThreads, 0, stream>>>(
      at.down, routing, s.rows, s.hidden, s.experts, s.first, s.held, at.pairs.pair_of, out);
  check_launch("moe_combine_pairs");
}

}  // namespace tfm::cuda
