#include "backends/pjrt/device_buffer.h"

#include <mutex>
#include <unordered_set>

#include "tfm/error.h"

namespace tfm::pjrt {
namespace {

std::mutex live_mutex;
std::unordered_set<const void*>& live_holders() {
  static std::unordered_set<const void*> live;
  return live;
}

}  // namespace

std::shared_ptr<DeviceBuffer> make_device_buffer(const Client& client, int device, size_t bytes) {
  auto* holder = new DeviceBuffer;
  holder->client = &client;
  holder->device = device;
  holder->bytes = bytes;
  {
    std::lock_guard<std::mutex> lock(live_mutex);
    live_holders().insert(holder);
  }
  return std::shared_ptr<DeviceBuffer>(holder, [](DeviceBuffer* h) {
    {
      std::lock_guard<std::mutex> lock(live_mutex);
      live_holders().erase(h);
    }
    delete h;
  });
}

DeviceBuffer& holder_of(const void* data, const std::string& what) {
  std::lock_guard<std::mutex> lock(live_mutex);
  if (live_holders().count(data) == 0) {
    throw Error(what +
                ": not the start of a pjrt buffer (a view into one at a byte offset, as "
                "the Trainer's flat parameters make: on pjrt, training steps run but the Trainer "
                "does not yet)");
  }
  return *static_cast<DeviceBuffer*>(const_cast<void*>(data));
}

PJRT_Buffer* buffer_of(const Tensor& tensor, const std::string& what) {
  if (tensor.device().type != "pjrt") {
    throw Error(what + ": expected a tensor on a pjrt device, got one on " + tensor.device().str());
  }
  DeviceBuffer* holder = &holder_of(tensor.data(), what);
  if (holder->bytes != tensor.nbytes()) {
    throw Error(what + ": a view into a pjrt tensor (" + shape_str(tensor.shape()) +
                ") cannot be passed to a PJRT executable");
  }
  if (holder->buffer == nullptr) {
    std::vector<std::byte> bytes = std::move(holder->bytes_to_upload);
    if (bytes.empty()) bytes.resize(holder->bytes);
    holder->buffer =
        holder->client->upload(bytes.data(), tensor.dtype(), tensor.shape(), holder->device);
    holder->shape = tensor.shape();
  } else if (holder->shape != tensor.shape()) {
    throw Error(what + ": the pjrt buffer has shape " + shape_str(holder->shape) + ", the tensor " +
                shape_str(tensor.shape()));
  }
  return holder->buffer.get();
}

Tensor tensor_of(Buffer buffer, const Client& client, int device, const Shape& shape, DType dtype) {
  std::shared_ptr<DeviceBuffer> holder = make_device_buffer(
      client, device, static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype));
  holder->buffer = std::move(buffer);
  holder->shape = shape;
  return Tensor::borrow(holder.get(), shape, dtype, holder, Device{"pjrt", device});
}

}  // namespace tfm::pjrt
