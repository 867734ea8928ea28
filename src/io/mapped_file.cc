#include "io/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "tfm/error.h"

namespace tfm {
namespace {

[[noreturn]] void fail(const std::filesystem::path& file, const char* action) {
  throw Error("cannot " + std::string(action) + " '" + file.string() +
              "': " + std::strerror(errno));
}

}  // namespace

std::shared_ptr<const MappedFile> MappedFile::open(const std::filesystem::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(file, "open");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fail(file, "stat");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error("cannot map '" + file.string() + "': not a regular file");
  }
  const auto size = static_cast<size_t>(st.st_size);
  void* data = nullptr;
  if (size > 0) {
    // A private writable mapping: a caller that writes into a borrowed tensor gets its own copy of
    // the page instead of a segfault, and the file on disk never changes. NORESERVE because those
    // copies are the exception, so the whole file need not count against swap.
    data = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_NORESERVE, fd, 0);
    if (data == MAP_FAILED) {
      ::close(fd);
      fail(file, "map");
    }
  }
  ::close(fd);  // the mapping keeps its own reference to the file
  return std::shared_ptr<const MappedFile>(new MappedFile(file, static_cast<uint8_t*>(data), size));
}

MappedFile::MappedFile(std::filesystem::path path, uint8_t* data, size_t size)
    : path_(std::move(path)), data_(data), size_(size) {}

void MappedFile::release(size_t offset, size_t bytes) const {
  const auto page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  const size_t end = std::min(offset + bytes, size_);
  const size_t first = (offset + page - 1) / page * page, last = end / page * page;
  // Advice only: if the kernel declines, the pages stay resident and nothing else changes.
  if (first < last) ::madvise(data_ + first, last - first, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

}  // namespace tfm
