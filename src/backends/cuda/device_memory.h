// Device and pinned host memory. Out-of-memory is reported with what was asked and what is free.
#pragma once

#include <cstddef>
#include <memory>

namespace tfm::cuda {

std::shared_ptr<void> device_allocate(int index, size_t bytes);
// Zeroes device memory, ordered with every stream: the device is idle before and after.
void device_fill_zero(void* data, size_t bytes, int index);
// The most bytes device_allocate's allocations held at once, over every device.
size_t device_peak_bytes();
std::shared_ptr<void> pinned_allocate(size_t bytes);
int device_count();

}  // namespace tfm::cuda
