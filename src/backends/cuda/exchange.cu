#include "backends/cuda/cuda_status.h"
#include "backends/cuda/exchange_kernels.cuh"
#include "backends/cuda/moe.h"

namespace tfm::cuda {
namespace {

// The slots' tables in the scratch.
struct ExchangeScratch {
  ExchangeSlots slots;
  size_t bytes;

  ExchangeScratch(const ExchangeShape& s, void* base) {
    const size_t pairs = scratch_aligned(sizeof(int32_t) * static_cast<size_t>(s.rows * s.experts)),
                 per_slot =
                     scratch_aligned(sizeof(int32_t) * static_cast<size_t>(s.ranks * s.per_rank));
    auto* at = static_cast<char*>(base);
    slots.slot_of = reinterpret_cast<int32_t*>(at);
    slots.slot_row = at == nullptr ? nullptr : reinterpret_cast<int32_t*>(at + pairs);
    slots.slot_expert = at == nullptr ? nullptr : reinterpret_cast<int32_t*>(at + pairs + per_slot);
    bytes = pairs + 2 * per_slot;
  }
};

}  // namespace

size_t exchange_scratch_bytes(const ExchangeShape& s) { return ExchangeScratch(s, nullptr).bytes; }

void moe_exchange(ExchangeOp op, const float* first, const float* routing, const float* dy,
                  const ExchangeShape& s, void* scratch, float* out, cudaStream_t stream) {
  const ExchangeScratch at(s, scratch);
  const int64_t slot_count = s.ranks * s.per_rank, held = s.experts / s.ranks;
  const auto elements = [&](int64_t count) { return blocks_for(count, kExchangeThreads); };
  moe_exchange_slots_kernel<<<1, kExchangeThreads, 0, stream>>>(routing, s.rows, s.experts, s.ranks,
                                                                s.per_rank, at.slots);
  check_launch("moe_exchange_slots");
  switch (op) {
    case ExchangeOp::kDispatch:
    case ExchangeOp::kSlots: {
      const int64_t width = op == ExchangeOp::kSlots ? held : s.hidden;
      if (slot_count * width == 0) return;
      moe_dispatch_kernel<<<elements(slot_count * width), kExchangeThreads, 0, stream>>>(
          first, slot_count, width, op == ExchangeOp::kSlots ? held : 0, at.slots, out);
      check_launch("moe_dispatch");
      return;
    }
    case ExchangeOp::kCombine:
    case ExchangeOp::kDispatchGrad:
      if (s.rows * s.hidden == 0) return;
      moe_combine_pairs_kernel<<<elements(s.rows * s.hidden), kExchangeThreads, 0, stream>>>(
          op == ExchangeOp::kCombine ? first : dy, op == ExchangeOp::kCombine ? routing : nullptr,
          s.rows, s.hidden, s.experts, 0, s.experts, at.slots.slot_of, out);
      check_launch("moe_combine_pairs");
      return;
    case ExchangeOp::kCombineGrad: {
      float* d_routing = out + slot_count * s.hidden;
      if (s.rows * s.experts > 0) {
        TFM_CUDA(cudaMemsetAsync(d_routing, 0, sizeof(float) * s.rows * s.experts, stream));
      }
      if (slot_count * s.hidden == 0) return;
      moe_combine_grad_slots_kernel<<<elements(slot_count * s.hidden), kExchangeThreads, 0,
                                      stream>>>(routing, dy, slot_count, s.experts, s.hidden,
                                                at.slots, out);
      check_launch("moe_combine_grad_slots");
      moe_combine_grad_routing_kernel<<<blocks_for(slot_count, kExchangeThreads / 32),
                                        kExchangeThreads, 0, stream>>>(
          first, dy, slot_count, s.experts, s.hidden, at.slots, d_routing);
      check_launch("moe_combine_grad_routing");
      return;
    }
  }
}

}  // namespace tfm::cuda
