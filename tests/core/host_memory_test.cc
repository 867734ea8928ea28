#include "core/host_memory.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "tfm/error.h"

namespace tfm {
namespace {

uintptr_t address(const std::shared_ptr<void>& block) {
  return reinterpret_cast<uintptr_t>(block.get());
}

// The kernel's THPeligible for the mapping that holds `p` (/proc/self/smaps): 1 where the mapping
// may take transparent huge pages. -1 where the mapping is not listed.
int thp_eligible(uintptr_t p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t start = 0, end = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> start >> dash >> end && dash == '-' &&
        line.find(':') > line.find(' ')) {
      inside = start <= p && p < end;
    } else if (inside && line.rfind("THPeligible:", 0) == 0) {
      return std::stoi(line.substr(std::strlen("THPeligible:")));
    }
  }
  return -1;
}

bool thp_mode_is(const char* mode) {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(f, modes);
  return modes.find(std::string("[") + mode + "]") != std::string::npos;
}

TEST(HostMemory, SmallBlocksAreCacheLineAligned) {
  for (const size_t bytes : {size_t{0}, size_t{1}, size_t{100}, kHugePageBytes - 1}) {
    const auto block = allocate_host(bytes);
    ASSERT_NE(block, nullptr) << bytes;
    EXPECT_EQ(address(block) % 64, 0u) << bytes;
  }
}

TEST(HostMemory, LargeBlocksAreAskedOfTheKernelAsHugePages) {
  const size_t bytes = 3 * kHugePageBytes + 12345;
  const auto block = allocate_host(bytes);
  EXPECT_EQ(address(block) % kHugePageBytes, 0u);
  std::memset(block.get(), 1, bytes);  // every byte is ours to write
  if (thp_mode_is("never")) GTEST_SKIP() << "transparent huge pages are off on this machine";
  EXPECT_EQ(thp_eligible(address(block)), 1);
}

TEST(HostMemory, MoreThanTheHostHasIsAClearError) {
#ifdef __SANITIZE_ADDRESS__
  GTEST_SKIP() << "ASan's allocator stops the process on sizes this large before malloc returns";
#endif
  try {
    allocate_host(size_t{1} << 62);
    FAIL() << "allocated 4 EiB";
  } catch (const OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what()).find("out of host memory"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tfm
