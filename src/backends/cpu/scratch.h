// Scratch buffers of floats that start uninitialized: std::vector<float>'s resize zeroes what it
// adds, a pass over memory that every buffer here overwrites whole before it is read (widened
// operands, blocks of results).
#pragma once

#include <memory>
#include <new>
#include <utility>
#include <vector>

namespace tfm::cpu {

template <typename T>
struct UninitializedAllocator : std::allocator<T> {
  template <typename U>
  struct rebind {
    using other = UninitializedAllocator<U>;
  };
  UninitializedAllocator() = default;
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

}  // namespace tfm::cpu
