#include "backends/pjrt/device_buffer.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <map>
#include <mutex>

#include "tfm/error.h"

namespace tfm::pjrt {
namespace {

struct Reservation {
  std::unique_ptr<DeviceBuffer> holder;
  size_t length = 0;  // reserved bytes: more than the holder's, so its end address is its own
};

std::mutex live_mutex;
std::map<uintptr_t, Reservation>& live() {
  static std::map<uintptr_t, Reservation> holders;
  return holders;
}

size_t reserved_length(size_t bytes) {
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  return (bytes / page + 1) * page;
}

}  // namespace

PJRT_Buffer* DeviceBuffer::buffer(const Shape& shape, DType dtype, const std::string& what) {
  if (!blocks_.empty()) bring_to_host();  // a partitioned program's blocks, used whole now
  if (buffer_ == nullptr) {
    if (waiting_.empty()) waiting_.resize(bytes_);
    buffer_ = client_->upload(waiting_.data(), dtype, shape, device_);
    shape_ = shape;
    dtype_ = dtype;
    waiting_ = {};
  } else if (shape_ != shape || dtype_ != dtype) {
    throw Error(what + ": the pjrt buffer is " + shape_str(shape_) + " " +
                std::string(dtype_name(dtype_)) + ", the tensor " + shape_str(shape) + " " +
                std::string(dtype_name(dtype)));
  }
  return buffer_.get();
}

std::vector<PJRT_Buffer*> DeviceBuffer::blocks(const Sharding& sharding, DType dtype,
                                               const std::string& what) {
  if (static_cast<size_t>(shape_numel(sharding.shape())) * dtype_size(dtype) != bytes_) {
    throw Error(what + ": a pjrt buffer of " + std::to_string(bytes_) + " bytes taken as " +
                shape_str(sharding.shape()) + " " + std::string(dtype_name(dtype)));
  }
  if (blocks_.empty() || sharding_ != sharding || dtype_ != dtype) {
    bring_to_host();
    if (waiting_.empty()) waiting_.resize(bytes_);
    const Shape block = sharding.block_shape();
    std::vector<std::byte> part(static_cast<size_t>(shape_numel(block)) * dtype_size(dtype));
    for (int d = 0; d < sharding.devices(); ++d) {
      sharding.cut(waiting_.data(), dtype_size(dtype), d, part.data());
      blocks_.push_back(client_->upload(part.data(), dtype, block, d));
    }
    sharding_ = sharding;
    shape_ = sharding.shape();
    dtype_ = dtype;
    waiting_ = {};
  }
  std::vector<PJRT_Buffer*> out;
  for (const Buffer& b : blocks_) out.push_back(b.get());
  return out;
}

void DeviceBuffer::replace(Buffer buffer, Shape shape, DType dtype) {
  drop_device_copies();
  buffer_ = std::move(buffer);
  shape_ = std::move(shape);
  dtype_ = dtype;
}

void DeviceBuffer::replace_blocks(std::vector<Buffer> blocks, const Sharding& sharding,
                                  DType dtype) {
  drop_device_copies();
  blocks_ = std::move(blocks);
  sharding_ = sharding;
  shape_ = sharding.shape();
  dtype_ = dtype;
}

void DeviceBuffer::drop_device_copies() {
  buffer_.reset();
  blocks_.clear();
  sharding_.reset();
  downloaded_ = {};
}

const std::vector<std::byte>& DeviceBuffer::downloaded() {
  if (!downloaded_.empty()) return downloaded_;
  downloaded_.resize(bytes_);
  if (buffer_ != nullptr) {
    client_->download(buffer_.get(), downloaded_.data(), bytes_);
    return downloaded_;
  }
  const size_t block_bytes =
      static_cast<size_t>(shape_numel(sharding_->block_shape())) * dtype_size(dtype_);
  std::vector<std::vector<std::byte>> parts(blocks_.size());
  std::vector<const void*> views;
  for (size_t d = 0; d < blocks_.size(); ++d) {
    parts[d].resize(block_bytes);
    client_->download(blocks_[d].get(), parts[d].data(), block_bytes);
    views.push_back(parts[d].data());
  }
  sharding_->join(views, dtype_size(dtype_), downloaded_.data());
  return downloaded_;
}

void DeviceBuffer::bring_to_host() {
  if (!on_device()) {
    if (waiting_.empty()) waiting_.resize(bytes_);
    return;
  }
  downloaded();
  waiting_ = std::move(downloaded_);
  drop_device_copies();
}

void DeviceBuffer::write(size_t offset, const void* src, size_t bytes) {
  if (offset == 0 && bytes == bytes_) {
    drop_device_copies();
    waiting_.resize(bytes);
  } else {
    bring_to_host();
  }
  std::memcpy(waiting_.data() + offset, src, bytes);
}

void DeviceBuffer::read(size_t offset, void* dst, size_t bytes) {
  if (!on_device()) {
    if (waiting_.empty()) {
      std::memset(dst, 0, bytes);
    } else {
      std::memcpy(dst, waiting_.data() + offset, bytes);
    }
  } else if (buffer_ != nullptr && offset == 0 && bytes == bytes_) {
    client_->download(buffer_.get(), dst, bytes);
  } else {
    std::memcpy(dst, downloaded().data() + offset, bytes);
  }
}

void DeviceBuffer::zero(size_t offset, size_t bytes) {
  if (offset == 0 && bytes == bytes_) {
    drop_device_copies();
    waiting_ = {};  // empty: zeros when the buffer is made
    return;
  }
  bring_to_host();
  std::memset(waiting_.data() + offset, 0, bytes);
}

std::shared_ptr<void> make_device_buffer(const Client& client, int device, size_t bytes) {
  const size_t length = reserved_length(bytes);
  void* start =
      ::mmap(nullptr, length, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (start == MAP_FAILED) {
    throw Error("pjrt: cannot reserve " + std::to_string(length) +
                " bytes of address space for a device buffer: " + std::strerror(errno));
  }
  {
    std::lock_guard<std::mutex> lock(live_mutex);
    live()[reinterpret_cast<uintptr_t>(start)] = {
        std::make_unique<DeviceBuffer>(client, device, bytes), length};
  }
  return std::shared_ptr<void>(start, [length](void* p) {
    {
      std::lock_guard<std::mutex> lock(live_mutex);
      live().erase(reinterpret_cast<uintptr_t>(p));
    }
    ::munmap(p, length);
  });
}

Place place_of(const void* data, const std::string& what) {
  const auto address = reinterpret_cast<uintptr_t>(data);
  std::lock_guard<std::mutex> lock(live_mutex);
  auto it = live().upper_bound(address);
  if (it != live().begin()) {
    --it;
    if (address - it->first < it->second.length) {
      return {it->second.holder.get(), static_cast<size_t>(address - it->first)};
    }
  }
  throw Error(what + ": not the address of a live pjrt buffer");
}

Tensor tensor_of(Buffer buffer, const Client& client, int device, const Shape& shape, DType dtype) {
  const std::shared_ptr<void> storage = make_device_buffer(
      client, device, static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype));
  place_of(storage.get(), "pjrt result").holder->replace(std::move(buffer), shape, dtype);
  return Tensor::borrow(storage.get(), shape, dtype, storage, Device{"pjrt", device});
}

}  // namespace tfm::pjrt
