// A CPU emulation of the CUDA features the kernels in src/backends/cuda/*.cuh use, found first on
// the include path of tests/cuda_emulation, so the kernels' own source runs in tests without a
// GPU: each block's threads are real threads (barriers for __syncthreads and __syncwarp, warp
// shuffles through shared tables), a launch's blocks run one after another, and a block's
// __shared__ arrays are shared by its threads. It checks indexing, masking and the algorithms;
// it does not emulate memory ordering between blocks running at once, or timing.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __grid_constant__
#define __align__(bytes)
#define __shared__ static
#define TFM_DYNAMIC_SHARED_MEMORY(name) \
  unsigned char* name = ::tfm::cuda_emulation::dynamic_shared_memory()

using cudaStream_t = void*;

struct uint3 {
  unsigned x = 0, y = 0, z = 0;
};
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};
// Aligned as CUDA's, so that UBSan (the sanitizer build) reports a vector load or store from an
// address a GPU would fault on.
struct alignas(8) float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(16) uint4 {
  unsigned x, y, z, w;
};

inline thread_local uint3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;

namespace tfm::cuda_emulation {

constexpr int kWarpSize = 32;

// A barrier whose waiters sleep until the last arrives. std::barrier's waiters poll its phase,
// and under ThreadSanitizer each poll merges the poller's whole vector clock (one entry per thread
// the process has had): that polling was most of the race stage's time.
class Barrier {
 public:
  explicit Barrier(unsigned count) : count_(count) {}

  void arrive_and_wait() {
    std::unique_lock lock(mutex_);
    const uint64_t phase = phase_;
    if (++arrived_ == count_) {
      arrived_ = 0;
      ++phase_;
      lock.unlock();
      all_arrived_.notify_all();
      return;
    }
    all_arrived_.wait(lock, [&] { return phase_ != phase; });
  }

 private:
  const unsigned count_;
  unsigned arrived_ = 0;
  uint64_t phase_ = 0;
  std::mutex mutex_;
  std::condition_variable all_arrived_;
};

// What the threads of the running launch share. The dynamic shared memory is exactly as large as
// the launch asked (rounded to its 128-byte alignment), so AddressSanitizer sees an overrun, and
// holds NaN bytes at the start of every block, so a read before a write shows.
struct Launch {
  Barrier block;
  std::vector<std::unique_ptr<Barrier>> warps;
  size_t shared_bytes;
  std::unique_ptr<unsigned char, decltype(&std::free)> shared;

  Launch(unsigned threads, size_t bytes)
      : block(threads),
        shared_bytes((bytes + 127) / 128 * 128),
        shared(static_cast<unsigned char*>(
                   std::aligned_alloc(128, std::max<size_t>(shared_bytes, 128))),
               &std::free) {
    for (unsigned w = 0; w < threads / kWarpSize; ++w) {
      warps.push_back(std::make_unique<Barrier>(kWarpSize));
    }
  }

  void poison_shared() { std::memset(shared.get(), 0xff, shared_bytes); }
};

inline Launch*& running() {
  static Launch* launch = nullptr;
  return launch;
}

inline unsigned char* dynamic_shared_memory() { return running()->shared.get(); }

// The thread's place in its block, x first as on a GPU; its warp is that place / 32.
inline unsigned linear_thread() {
  return threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
}

// Asynchronous copies into shared memory (cp.async, see src/backends/cuda/async_copy.cuh), which
// a GPU may land any time from their issue to the wait for them: in every other block of a launch
// a thread's copies wait in its queue, grouped by commit_copies, until wait_copies<n> does all but
// its n newest groups, so a kernel that reads a tile before waiting for it reads the poison (or
// the tile before) here too; in the others they land as they are issued, so one that copies over a
// tile other threads may still read (no barrier between) races with them.
struct AsyncCopy {
  void* dst;
  const void* src;
  size_t bytes;
  bool present;  // false: zeros, src not read
};
struct AsyncCopies {
  std::vector<AsyncCopy> copies;
  std::vector<size_t> group_ends;  // committed groups, each as the end of its copies
};
inline thread_local AsyncCopies async_copies;
inline thread_local bool copies_land_at_issue = false;

inline void land(const AsyncCopy& c) {
  if (c.present) {
    std::memcpy(c.dst, c.src, c.bytes);
  } else {
    std::memset(c.dst, 0, c.bytes);
  }
}

// Aborts unless [p, p + bytes) lies in the launch's dynamic shared memory, aligned to its size
// (what cp.async and ldmatrix ask).
inline void check_shared(const void* p, size_t bytes, const char* what) {
  const auto* begin = running()->shared.get();
  const auto* at = static_cast<const unsigned char*>(p);
  if (at < begin || at + bytes > begin + running()->shared_bytes ||
      reinterpret_cast<uintptr_t>(p) % bytes != 0) {
    std::fprintf(stderr, "%s: %zu bytes at %p, not aligned shared memory\n", what, bytes, p);
    std::abort();
  }
}

// Runs kernel() as a grid of blocks of block.x * block.y * block.z threads (a multiple of 32), one
// block at a time, in a shuffled (but fixed) order, as a GPU gives no order: blocks that count
// their arrivals to find the last one must not depend on it. A thread that returns waits for its
// block's end; so a kernel whose threads return before a __syncthreads that others still reach
// would hang here (the emulated kernels return after their last one).
template <typename Kernel>
void launch(dim3 grid, dim3 block, size_t shared_bytes, Kernel kernel) {
  const unsigned threads = block.x * block.y * block.z;
  gridDim = grid;
  blockDim = block;
  std::vector<uint3> order;
  for (unsigned z = 0; z < grid.z; ++z) {
    for (unsigned y = 0; y < grid.y; ++y) {
      for (unsigned x = 0; x < grid.x; ++x) order.push_back({x, y, z});
    }
  }
  std::shuffle(order.begin(), order.end(), std::mt19937(2026));
  Launch state(threads, shared_bytes);
  running() = &state;
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      threadIdx = {t % block.x, t / block.x % block.y, t / (block.x * block.y)};
      for (size_t o = 0; o < order.size(); ++o) {
        if (t == 0) state.poison_shared();
        state.block.arrive_and_wait();
        blockIdx = order[o];
        copies_land_at_issue = o % 2 == 1;
        kernel();
        if (!async_copies.copies.empty()) {
          std::fprintf(stderr, "a block ended with asynchronous copies not waited for\n");
          std::abort();
        }
        async_copies.group_ends.clear();
        state.block.arrive_and_wait();
      }
    });
  }
  for (std::thread& t : pool) t.join();
  running() = nullptr;
}

template <typename Kernel>
void launch(dim3 grid, unsigned threads, size_t shared_bytes, Kernel kernel) {
  launch(grid, dim3{threads, 1, 1}, shared_bytes, kernel);
}

// A warp's lanes exchange values through two tables a value type and warp, taken in turn: a lane
// writes a table again only after the barrier of the exchange between, which every lane reaches
// after its read of that table, so one barrier an exchange suffices.
template <typename T>
T exchange(T value, int source_lane) {
  static T tables[2][32][kWarpSize];
  thread_local unsigned turn = 0;
  const unsigned warp = linear_thread() / kWarpSize, lane = linear_thread() % kWarpSize;
  auto& table = tables[turn][warp];
  turn ^= 1;
  table[lane] = value;
  running()->warps[warp]->arrive_and_wait();
  // A GPU reads lane source_lane % 32; a kernel asking for another lane has a bug worth seeing.
  if (source_lane < 0 || source_lane >= kWarpSize) {
    std::fprintf(stderr, "shuffle from lane %d of a 32-lane warp\n", source_lane);
    std::abort();
  }
  return table[source_lane];
}

}  // namespace tfm::cuda_emulation

inline void __syncthreads() { tfm::cuda_emulation::running()->block.arrive_and_wait(); }
inline void __syncwarp(unsigned = 0xffffffffu) {
  tfm::cuda_emulation::running()
      ->warps[tfm::cuda_emulation::linear_thread() / 32]
      ->arrive_and_wait();
}
template <typename T>
T __shfl_xor_sync(unsigned, T value, int lane_mask) {
  const auto lane = static_cast<int>(tfm::cuda_emulation::linear_thread() % 32);
  return tfm::cuda_emulation::exchange(value, lane ^ lane_mask);
}
template <typename T>
T __shfl_sync(unsigned, T value, int source_lane) {
  return tfm::cuda_emulation::exchange(value, source_lane);
}
// A vote of the block's threads: a parity per call alternates between two tallies, so the one a
// call counts in was reset (by thread 0) before the call before it returned.
inline int __syncthreads_or(int predicate) {
  static std::atomic<int> tallies[2];
  thread_local int parity = 0;
  auto* launch = tfm::cuda_emulation::running();
  if (predicate != 0) tallies[parity].fetch_or(1);
  launch->block.arrive_and_wait();
  const int any = tallies[parity].load();
  launch->block.arrive_and_wait();
  if (tfm::cuda_emulation::linear_thread() == 0) tallies[parity].store(0);
  parity ^= 1;
  return any;
}
inline unsigned __ballot_sync(unsigned, int predicate) {
  unsigned bits = 0;
  const unsigned mine = predicate != 0 ? 1u << tfm::cuda_emulation::linear_thread() % 32 : 0u;
  for (int lane = 0; lane < 32; ++lane) bits |= tfm::cuda_emulation::exchange(mine, lane);
  return bits;
}
inline int __ffs(unsigned bits) { return bits == 0 ? 0 : __builtin_ctz(bits) + 1; }

// cp.async (src/backends/cuda/async_copy.cuh leaves these to the emulation).
#define TFM_EMULATED_ASYNC_COPY
template <int kBytes>
void copy_async(void* shared_dst, const void* src, bool present) {
  tfm::cuda_emulation::check_shared(shared_dst, kBytes, "cp.async");
  if (present && reinterpret_cast<uintptr_t>(src) % kBytes != 0) {
    std::fprintf(stderr, "cp.async: source %p not aligned to %d bytes\n", src, kBytes);
    std::abort();
  }
  const tfm::cuda_emulation::AsyncCopy copy{shared_dst, src, kBytes, present};
  if (tfm::cuda_emulation::copies_land_at_issue) {
    tfm::cuda_emulation::land(copy);
  } else {
    tfm::cuda_emulation::async_copies.copies.push_back(copy);
  }
}
inline void commit_copies() {
  auto& queue = tfm::cuda_emulation::async_copies;
  queue.group_ends.push_back(queue.copies.size());
}
template <int kPending>
void wait_copies() {
  auto& queue = tfm::cuda_emulation::async_copies;
  const size_t groups = queue.group_ends.size();
  if (groups <= static_cast<size_t>(kPending)) return;
  const size_t done = queue.group_ends[groups - kPending - 1];
  for (size_t i = 0; i < done; ++i) tfm::cuda_emulation::land(queue.copies[i]);
  queue.copies.erase(queue.copies.begin(), queue.copies.begin() + static_cast<ptrdiff_t>(done));
  queue.group_ends.erase(queue.group_ends.begin(),
                         queue.group_ends.begin() + static_cast<ptrdiff_t>(groups - kPending));
  for (size_t& end : queue.group_ends) end -= done;
}

inline unsigned atomicAdd(unsigned* address, unsigned value) {
  return std::atomic_ref<unsigned>(*address).fetch_add(value);
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
template <typename T>
T __ldg(const T* p) {
  return *p;
}
template <typename T>
T __ldcs(const T* p) {
  return *p;
}
template <typename A, typename B>
auto min(A a, B b) {
  return b < a ? b : a;
}
template <typename A, typename B>
auto max(A a, B b) {
  return a < b ? b : a;
}

// CUDA's isnan and isinf are global functions in device code; <cmath> puts them in std only.
using std::isinf;
using std::isnan;
