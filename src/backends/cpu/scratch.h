// Scratch buffers that start uninitialized and on a cache line. std::vector's resize zeroes what
// it adds, a pass over memory that every buffer here overwrites whole before it is read (widened
// operands, blocks of results). malloc puts large blocks 16 bytes past a page: a 64-byte row read
// from there spans two cache lines, which made AMX's tile loads 3x slower (and splits every
// AVX-512 load).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <utility>
#include <vector>

#include "core/host_memory.h"

namespace tfm::cpu {

template <typename T>
struct UninitializedAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
  T* allocate(size_t n) {
    return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{kCacheLine}));
  }
  void deallocate(T* p, size_t n) noexcept {
    ::operator delete (p, n * sizeof(T), std::align_val_t{kCacheLine});
  }
  template <typename U>
  UninitializedAllocator(const UninitializedAllocator<U>&) noexcept {}
  template <typename U>
  void construct(U* p) noexcept {
    ::new (static_cast<void*>(p)) U;  // default-initialized: no value for a float
  }
  template <typename U, typename... Args>
  void construct(U* p, Args&&... args) {
    ::new (static_cast<void*>(p)) U(std::forward<Args>(args)...);
  }
};

using Scratch = std::vector<float, UninitializedAllocator<float>>;
using Bf16Scratch = std::vector<uint16_t, UninitializedAllocator<uint16_t>>;

}  // namespace tfm::cpu
