#include "core/host_memory.h"

#include <sys/mman.h>

#include <cstdlib>
#include <string>

#include "tfm/error.h"

namespace tfm {
namespace {

size_t round_up(size_t bytes, size_t unit) { return (bytes + unit - 1) / unit * unit; }

}  // namespace

std::shared_ptr<void> allocate_host(size_t bytes) {
  const bool huge = bytes >= kHugePageBytes;
  const size_t alignment = huge ? kHugePageBytes : kCacheLine;
  // Whole huge pages: the last one is not left on 4 KiB pages.
  const size_t rounded = bytes == 0 ? kCacheLine : round_up(bytes, alignment);
  void* p = std::aligned_alloc(alignment, rounded);
  if (p == nullptr) {
    throw OutOfMemoryError("out of host memory: could not allocate " + std::to_string(bytes) +
                           " bytes");
  }
  // Advice only: where the kernel has no huge pages to give (THP off, memory fragmented), the
  // block stays on 4 KiB pages and is as correct.
  if (huge) ::madvise(p, rounded, MADV_HUGEPAGE);
  return std::shared_ptr<void>(p, std::free);
}

}  // namespace tfm
