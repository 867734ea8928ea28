// A tensor: shape, strides, dtype and device over shared storage. Storage is owning (allocated
// here) or borrowed (e.g. a memory-mapped safetensors file kept alive by `keep_alive`), so loading
// a checkpoint whose dtype matches costs no copy.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tfm/device.h"
#include "tfm/dtype.h"

namespace tfm {

using Shape = std::vector<int64_t>;

std::string shape_str(const Shape& shape);  // "[2, 12, 64]"
int64_t shape_numel(const Shape& shape);
[[noreturn]] void throw_size_mismatch(size_t count, const Shape& shape);

class Tensor {
 public:
  Tensor() = default;

  static Tensor empty(Shape shape, DType dtype, Device device = kCpu);
  static Tensor zeros(Shape shape, DType dtype, Device device = kCpu);
  // Wraps memory owned by someone else; `keep_alive` holds that memory for the tensor's lifetime.
  static Tensor borrow(const void* data, Shape shape, DType dtype,
                       std::shared_ptr<const void> keep_alive, Device device = kCpu);
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, Shape shape);

  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int axis) const;  // negative axes count from the end
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  bool is_contiguous() const;
  bool is_borrowed() const { return borrowed_; }

  void* data() { return static_cast<char*>(storage_.get()) + offset_; }
  const void* data() const { return static_cast<const char*>(storage_.get()) + offset_; }
  template <typename T>
  T* data_as();
  template <typename T>
  const T* data_as() const;

  Tensor view(Shape shape) const;                   // same storage, contiguous tensors only
  Tensor slice(int64_t start, int64_t stop) const;  // along axis 0, same storage
  Tensor to(DType dtype) const;         // converted copy (or this tensor if already that dtype)
  Tensor to(Device device) const;       // copy across devices (or this tensor if already there)
  Tensor clone() const;                 // owning contiguous copy
  // Same shape; converts dtype on the CPU, copies the bytes as they are between devices.
  void copy_from(const Tensor& other);
  void fill_zero();
  std::vector<float> to_f32_vector() const;

 private:
  Tensor(std::shared_ptr<void> storage, Shape shape, DType dtype, Device device, bool borrowed);
  void check_dtype(DType expected) const;

  std::shared_ptr<void> storage_;
  size_t offset_ = 0;
  Shape shape_;
  Shape strides_;
  DType dtype_ = DType::f32;
  Device device_ = kCpu;
  bool borrowed_ = false;
};

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::f32;
}
template <>
constexpr DType dtype_of<int32_t>() {
  return DType::i32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::i64;
}

template <typename T>
T* Tensor::data_as() {
  if constexpr (sizeof(T) == 2) {
    check_dtype(dtype_ == DType::f16 ? DType::f16 : DType::bf16);
  } else {
    check_dtype(dtype_of<T>());
  }
  return static_cast<T*>(data());
}

template <typename T>
const T* Tensor::data_as() const {
  return const_cast<Tensor*>(this)->data_as<T>();
}

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, Shape shape) {
  Tensor t = empty(std::move(shape), dtype_of<T>());
  if (static_cast<size_t>(t.numel()) != values.size()) {
    throw_size_mismatch(values.size(), t.shape());
  }
  std::copy(values.begin(), values.end(), t.data_as<T>());
  return t;
}
}  // namespace tfm
