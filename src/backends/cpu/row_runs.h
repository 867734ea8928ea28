// Rows [0, n) of a product split into one run per thread, each run read front to back: one
// sequential stream per thread, as the memory's prefetchers want. A thread done with its own run
// takes rows off the end of a run not yet done, kStolenRows at a time, so that a thread slowed by
// the other core's traffic does not leave the rest waiting at the barrier.
#pragma once

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>

namespace tfm::cpu {

// Rows the owner of a run, or a thread taking from its end, claims at a time.
inline constexpr int64_t kStolenRows = 16;

// [front, back) of a run not yet claimed, packed in one word so that its owner and a thief
// claim rows with one compare-and-swap each. On a cache line of its own.
struct alignas(64) RowRun {
  std::atomic<uint64_t> span;

  static uint64_t pack(int64_t front, int64_t back) {
    return static_cast<uint64_t>(front) << 32 | static_cast<uint32_t>(back);
  }
  // Claims up to kStolenRows from the front (from_front) or the back; false once none are left.
  bool claim(bool from_front, int64_t& first, int64_t& end) {
    uint64_t now = span.load(std::memory_order_relaxed);
    for (;;) {
      const auto front = static_cast<int64_t>(now >> 32);
      const auto back = static_cast<int64_t>(now & 0xffffffffu);
      if (front >= back) return false;
      first = from_front ? front : std::max(front, back - kStolenRows);
      end = from_front ? std::min(back, front + kStolenRows) : back;
      const uint64_t left = from_front ? pack(end, back) : pack(front, first);
      if (span.compare_exchange_weak(now, left, std::memory_order_relaxed)) return true;
    }
  }
};

// `runs` RowRuns kept from call to call by the calling thread, where a decode step's 113 products
// each allocated and freed their own (the time before the parallel region, that allocation
// included, measured 0.9-1.3 us a product, with the allocator's lines cold after the weights'
// stream).
inline RowRun* row_runs(int runs) {
  thread_local std::unique_ptr<RowRun[]> kept;
  thread_local int capacity = 0;
  if (capacity < runs) {
    kept.reset(new RowRun[static_cast<size_t>(runs)]);
    capacity = runs;
  }
  return kept.get();
}

// row(r) for each r in [0, n) on the OpenMP threads, in runs as above. n must fit in 32 bits.
template <typename Row>
void rows_in_runs(int64_t n, Row&& row) {
  const int runs = omp_get_max_threads();
  RowRun* run = row_runs(runs);
  for (int t = 0; t < runs; ++t) run[t].span = RowRun::pack(n * t / runs, n * (t + 1) / runs);
#pragma omp parallel
  {
    const int own = omp_get_thread_num();
    int64_t first = 0, end = 0;
    // Its own run from the front, then the others' from their ends, nearest first.
    for (int i = 0; i < runs; ++i) {
      RowRun& r = run[(own + i) % runs];
      while (r.claim(i == 0, first, end)) {
        for (int64_t q = first; q < end; ++q) row(q);
      }
    }
  }
}

}  // namespace tfm::cpu
