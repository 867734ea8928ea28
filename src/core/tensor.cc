#include "tfm/tensor.h"

#include <cstring>

#include "core/device_registry.h"
#include "core/host_memory.h"
#include "tfm/error.h"

namespace tfm {
namespace {

std::shared_ptr<void> allocate(size_t bytes, Device device) {
  if (device.type != "cpu") {
    const DeviceKind* provider = find_device_kind(device.type);
    if (provider == nullptr)
      throw Error("cannot allocate on " + device.str() + ": backend not built");
    return provider->allocate(device.index, bytes);
  }
  return allocate_host(bytes);
}

Shape contiguous_strides(const Shape& shape) {
  Shape strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

}  // namespace

std::string shape_str(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void throw_size_mismatch(size_t count, const Shape& shape) {
  throw Error(std::to_string(count) + " values do not fill a tensor of shape " + shape_str(shape));
}

Tensor::Tensor(std::shared_ptr<void> storage, Shape shape, DType dtype, Device device,
               bool borrowed)
    : storage_(std::move(storage)),
      shape_(std::move(shape)),
      strides_(contiguous_strides(shape_)),
      dtype_(dtype),
      device_(device),
      borrowed_(borrowed) {
  for (int64_t d : shape_) {
    if (d < 0) throw Error("negative dimension in shape " + shape_str(shape_));
  }
}

Tensor Tensor::empty(Shape shape, DType dtype, Device device) {
  const size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  return Tensor(allocate(bytes, device), std::move(shape), dtype, device, false);
}

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  Tensor t = empty(std::move(shape), dtype, kCpu);
  std::memset(t.data(), 0, t.nbytes());
  return device == kCpu ? t : t.to(device);
}

Tensor Tensor::borrow(const void* data, Shape shape, DType dtype,
                      std::shared_ptr<const void> keep_alive, Device device) {
  // Aliasing constructor: shares ownership of keep_alive, points at data.
  std::shared_ptr<void> storage(std::const_pointer_cast<void>(keep_alive), const_cast<void*>(data));
  return Tensor(std::move(storage), std::move(shape), dtype, device, true);
}

int64_t Tensor::dim(int axis) const {
  const int n = ndim();
  const int a = axis < 0 ? axis + n : axis;
  if (a < 0 || a >= n) {
    throw Error("axis " + std::to_string(axis) + " out of range for shape " + shape_str(shape_));
  }
  return shape_[a];
}

bool Tensor::is_contiguous() const { return strides_ == contiguous_strides(shape_); }

void Tensor::check_dtype(DType expected) const {
  if (dtype_ != expected) {
    throw Error("tensor of dtype " + std::string(dtype_name(dtype_)) + " accessed as " +
                std::string(dtype_name(expected)));
  }
}

Tensor Tensor::view(Shape shape) const {
  TFM_CHECK(is_contiguous(), "view of a non-contiguous tensor");
  if (shape_numel(shape) != numel()) {
    throw Error("cannot view shape " + shape_str(shape_) + " as " + shape_str(shape));
  }
  Tensor t = *this;
  t.shape_ = std::move(shape);
  t.strides_ = contiguous_strides(t.shape_);
  return t;
}

Tensor Tensor::slice(int64_t start, int64_t stop) const {
  if (ndim() == 0 || start < 0 || stop > shape_[0] || start > stop) {
    throw Error("slice [" + std::to_string(start) + ", " + std::to_string(stop) +
                ") out of range for shape " + shape_str(shape_));
  }
  Tensor t = *this;
  t.offset_ += static_cast<size_t>(start * strides_[0]) * dtype_size(dtype_);
  t.shape_[0] = stop - start;
  return t;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  TFM_CHECK(device_ == kCpu, "dtype conversion runs on host tensors");
  Tensor out = empty(shape_, dtype);
  out.copy_from(*this);
  return out;
}

Tensor Tensor::to(Device device) const {
  if (device == device_) return *this;
  TFM_CHECK(is_contiguous(), "device copy of a non-contiguous tensor");
  Tensor out = empty(shape_, dtype_, device);
  const bool to_device = device.type != "cpu";
  const Device accelerator = to_device ? device : device_;
  const DeviceKind* provider = find_device_kind(accelerator.type);
  TFM_CHECK(provider != nullptr, "no backend for " + accelerator.str());
  provider->copy(out.data(), data(), nbytes(), accelerator.index, to_device);
  return out;
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape_, dtype_, device_);
  out.copy_from(*this);
  return out;
}

void Tensor::copy_from(const Tensor& other) {
  if (other.shape_ != shape_) {
    throw Error("copy_from: shape " + shape_str(other.shape_) + " into " + shape_str(shape_));
  }
  TFM_CHECK(is_contiguous() && other.is_contiguous(), "copy_from needs contiguous tensors");
  if (device_ == kCpu && other.device_ == kCpu) {
    convert_elements(other.data(), other.dtype_, data(), dtype_, static_cast<size_t>(numel()));
    return;
  }
  TFM_CHECK(dtype_ == other.dtype_, "copy_from between devices keeps the dtype");
  if (device_ != kCpu && other.device_ != kCpu) {
    copy_from(other.to(kCpu));  // rare (setting up training state): through the host
    return;
  }
  const bool to_device = device_ != kCpu;
  const Device accelerator = to_device ? device_ : other.device_;
  const DeviceKind* provider = find_device_kind(accelerator.type);
  TFM_CHECK(provider != nullptr, "no backend for " + accelerator.str());
  provider->copy(data(), other.data(), nbytes(), accelerator.index, to_device);
}

void Tensor::fill_zero() {
  TFM_CHECK(is_contiguous(), "fill_zero needs a contiguous tensor");
  if (device_ == kCpu) {
    std::memset(data(), 0, nbytes());
    return;
  }
  const DeviceKind* provider = find_device_kind(device_.type);
  TFM_CHECK(provider != nullptr, "no backend for " + device_.str());
  provider->fill_zero(data(), nbytes(), device_.index);
}

std::vector<float> Tensor::to_f32_vector() const {
  std::vector<float> values(static_cast<size_t>(numel()));
  const Tensor host = to(kCpu);
  TFM_CHECK(host.is_contiguous(), "to_f32_vector needs a contiguous tensor");
  convert_elements(host.data(), dtype_, values.data(), DType::f32, values.size());
  return values;
}

}  // namespace tfm
