// What a Tensor on a PJRT device holds: a PJRT buffer, or, until an executable first takes it,
// the bytes it will be made of. The device's memory interface (allocate, copy, fill_zero) knows
// only bytes, a PJRT buffer is made with its shape and element type: so a buffer is made where
// both are known (prepare_weight, or a run taking the tensor as state).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "backends/pjrt/client.h"
#include "tfm/tensor.h"

namespace tfm::pjrt {

struct DeviceBuffer {
  const Client* client = nullptr;
  int device = 0;
  size_t bytes = 0;
  Buffer buffer;                           // null while the bytes wait
  Shape shape;                             // the buffer's (kept, so no call asks the plugin)
  std::vector<std::byte> bytes_to_upload;  // zeros, or what a host tensor copied here held
};

// A holder for `bytes` on `device`, known to holder_of while it lives.
std::shared_ptr<DeviceBuffer> make_device_buffer(const Client& client, int device, size_t bytes);
// The holder at `data` (a pjrt tensor's data pointer, as the device's memory interface gets it);
// throws, naming `what`, for a pointer into one (a view at a byte offset, such as training's flat
// parameters make): a PJRT buffer is whole, its bytes are not addressable.
DeviceBuffer& holder_of(const void* data, const std::string& what);

// The buffer a PJRT tensor holds, made from its waiting bytes with the tensor's shape and dtype;
// throws, naming `what`, for a tensor of another device or a view into one.
PJRT_Buffer* buffer_of(const Tensor& tensor, const std::string& what);
// A tensor holding `buffer` (a run's result) on `device`.
Tensor tensor_of(Buffer buffer, const Client& client, int device, const Shape& shape, DType dtype);

}  // namespace tfm::pjrt
