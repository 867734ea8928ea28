// The dynamic shared memory a kernel may ask for at launch.
#pragma once

#include <cstddef>

namespace tfm::cuda {

// Raises `kernel`'s dynamic shared memory limit on the current device to `bytes`, past the 48 KB
// a kernel may have unasked, and never lowers it: a graph captured with a larger launch of the
// same kernel may replay after a smaller one. `name` is the kernel's, for errors.
void allow_shared_memory(const void* kernel, size_t bytes, const char* name);

}  // namespace tfm::cuda
