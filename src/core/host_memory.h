// Host memory for tensors. Large blocks (weights, arenas, KV caches) are aligned to 2 MiB and
// asked of the kernel as transparent huge pages (Debian's default THP mode serves only regions
// that ask, madvise): a stream over 4 KiB pages takes a TLB miss every page, and the decode step's
// products, which stream every weight once, read at 21-23 GB/s on them against 31-33 GB/s on huge
// pages (AMD EPYC with AVX-512, 2 cores, bench/RESULTS.md).
#pragma once

#include <cstddef>
#include <memory>

namespace tfm {

// `bytes` of uninitialized host memory, 64-byte aligned (one cache line for AVX-512 loads), on
// huge pages from kHugePageBytes. Throws OutOfMemoryError when the host has none left.
std::shared_ptr<void> allocate_host(size_t bytes);

inline constexpr size_t kHugePageBytes = size_t{2} << 20;
inline constexpr size_t kCacheLine = 64;

}  // namespace tfm
