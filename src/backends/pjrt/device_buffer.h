// What a Tensor on a PJRT device holds: a PJRT buffer, one block of it on each device of a
// partitioned program (sharding.h), or, until an executable first takes it, the bytes it will be
// made of. The device's memory interface (allocate, copy, fill_zero) knows
// only bytes, a PJRT buffer is made with its shape and element type: so a buffer is made where
// both are known (prepare_weight, or a run taking the tensor).
//
// A holder's address is the start of a reserved, inaccessible address range as long as its
// bytes, so a view into it (a tensor at a byte offset, as the Trainer's flat parameters make)
// has an address inside that range alone: place_of finds the holder and the offset. A PJRT
// buffer is whole, so an executable takes such a view as a slice of its holder's buffer
// (stablehlo.h's Placement), and the host copies in and out of a range go through the bytes.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backends/pjrt/client.h"
#include "backends/pjrt/sharding.h"
#include "tfm/tensor.h"

namespace tfm::pjrt {

class DeviceBuffer {
 public:
  DeviceBuffer(const Client& client, int device, size_t bytes)
      : client_(&client), device_(device), bytes_(bytes) {}

  const Client& client() const { return *client_; }
  int device() const { return device_; }
  size_t bytes() const { return bytes_; }
  // The PJRT buffer, made as `shape` `dtype` from the waiting bytes if there is none yet; throws,
  // naming `what`, if the buffer there has another shape or dtype.
  PJRT_Buffer* buffer(const Shape& shape, DType dtype, const std::string& what);
  // A run's result (a donated state's update) in place of the buffer.
  void replace(Buffer buffer, Shape shape, DType dtype);
  // Each device's block of the tensor as `sharding` cuts it (device d's at d), made from what is
  // held now where it is held otherwise (the whole buffer then goes).
  std::vector<PJRT_Buffer*> blocks(const Sharding& sharding, DType dtype, const std::string& what);
  // A partitioned run's results in place of the blocks.
  void replace_blocks(std::vector<Buffer> blocks, const Sharding& sharding, DType dtype);

  // Host bytes in and out of [offset, offset + bytes).
  void write(size_t offset, const void* src, size_t bytes);
  void read(size_t offset, void* dst, size_t bytes);
  void zero(size_t offset, size_t bytes);

 private:
  // The bytes on the host, the buffer (or blocks) dropped: before part of them changes.
  void bring_to_host();
  // The device's bytes, downloaded once (and joined from the blocks) until they change.
  const std::vector<std::byte>& downloaded();
  bool on_device() const { return buffer_ != nullptr || !blocks_.empty(); }
  void drop_device_copies();

  const Client* client_;
  int device_;
  size_t bytes_;
  Buffer buffer_;  // null while the bytes wait or lie in blocks
  std::vector<Buffer> blocks_;        // a partitioned program's, device d's at d
  std::optional<Sharding> sharding_;  // how blocks_ cut the tensor
  Shape shape_;    // the buffer's (kept, so no call asks the plugin)
  DType dtype_ = DType::f32;
  std::vector<std::byte> waiting_;  // while buffer_ is null: the bytes (empty: zeros)
  // A copy of the device's bytes, made by the first read of a part of them (saving a model reads
  // its flat parameters weight by weight) and dropped when they change.
  std::vector<std::byte> downloaded_;
};

// A holder of `bytes` on `device`: the storage of a pjrt Tensor, whose address is the holder's.
std::shared_ptr<void> make_device_buffer(const Client& client, int device, size_t bytes);

struct Place {
  DeviceBuffer* holder = nullptr;
  size_t offset = 0;  // bytes into it
};
// Where `data` (a pjrt tensor's data pointer, as the device's memory interface gets it) lies;
// throws, naming `what`, for an address no live holder's range holds.
Place place_of(const void* data, const std::string& what);

// A tensor holding `buffer` (an uploaded weight) on `device`.
Tensor tensor_of(Buffer buffer, const Client& client, int device, const Shape& shape, DType dtype);

}  // namespace tfm::pjrt
