#include "backends/cuda/cuda_status.h"
#include "backends/cuda/moe.h"
#include "backends/cuda/router_loss_kernels.cuh"

namespace tfm::cuda {
namespace {

// Where the loss keeps its rows' softmaxes and choices and the experts' shares in the scratch.
struct RouterScratch {
  RouterStats stats;
  size_t bytes;

  RouterScratch(const RouterLossShape& s, size_t layers, void* base) {
    const size_t rows = layers * static_cast<size_t>(s.rows);
    const size_t softmax = scratch_aligned(sizeof(RowSoftmax) * rows),
                 chosen = scratch_aligned(sizeof(int32_t) * rows * static_cast<size_t>(s.top_k));
    auto* at = static_cast<char*>(base);
    stats.softmax = reinterpret_cast<RowSoftmax*>(at);
    stats.chosen = at == nullptr ? nullptr : reinterpret_cast<int32_t*>(at + softmax);
    stats.shares = at == nullptr ? nullptr : reinterpret_cast<double*>(at + softmax + chosen);
    bytes = softmax + chosen + scratch_aligned(sizeof(double) * (2 * s.experts + 1));
  }
};

RouterLogits router_logits(const std::vector<const float*>& logits, const RouterLossShape& s) {
  RouterLogits in{};
  for (size_t l = 0; l < logits.size(); ++l) in.layer[l] = logits[l];
  in.layers = static_cast<int64_t>(logits.size());
  in.rows = s.rows;
  in.experts = s.experts;
  in.top_k = s.top_k;
  return in;
}

constexpr int kRouterThreads = 256;

unsigned row_blocks(const RouterLogits& in) {
  return static_cast<unsigned>((in.layers * in.rows + kRouterThreads - 1) / kRouterThreads);
}

// Each kept row's softmax and choices, then the experts' shares (and the loss, when given).
void shares(const RouterLogits& in, const int32_t* mask, const RouterStats& stats,
            const float* loss_scale, float coef, float* loss, cudaStream_t stream) {
  if (in.layers * in.rows > 0) {
    router_rows_kernel<<<row_blocks(in), kRouterThreads, 0, stream>>>(in, mask, stats);
    check_launch("router_rows");
  }
  router_shares_kernel<<<1, kRouterThreads, 0, stream>>>(in, mask, stats, loss_scale, coef, loss);
  check_launch("router_shares");
}

}  // namespace

size_t router_loss_scratch_bytes(const RouterLossShape& s, size_t layers) {
  return RouterScratch(s, layers, nullptr).bytes;
}

void router_loss(const std::vector<const float*>& logits, const int32_t* mask,
                 const float* loss_scale, const RouterLossShape& s, void* scratch, float* loss,
                 cudaStream_t stream) {
  const RouterScratch at(s, logits.size(), scratch);
  shares(router_logits(logits, s), mask, at.stats, loss_scale, s.coef, loss, stream);
}

void router_loss_grad(const std::vector<const float*>& logits, const int32_t* mask,
                      const float* loss_scale, const float* d_loss, const RouterLossShape& s,
                      void* scratch, float* d_logits, cudaStream_t stream) {
  const RouterScratch at(s, logits.size(), scratch);
  const RouterLogits in = router_logits(logits, s);
  shares(in, mask, at.stats, loss_scale, s.coef, nullptr, stream);
  if (in.layers * in.rows == 0) return;
  router_loss_grad_kernel<<<row_blocks(in), kRouterThreads, 0, stream>>>(
      in, mask, at.stats, loss_scale, s.coef, d_loss, d_logits);
  check_launch("router_loss_grad");
}

}  // namespace tfm::cuda
