// A whole file mapped into memory, read-only from the file's point of view. Tensors borrow its
// bytes and hold a shared_ptr to it, so the mapping lives exactly as long as something reads it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>

namespace tfm {

class MappedFile {
 public:
  // Throws tfm::Error naming the file and the system's reason when it cannot be opened or mapped.
  static std::shared_ptr<const MappedFile> open(const std::filesystem::path& file);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }
  // Gives back the memory of the whole pages inside [offset, offset + bytes) once a loader has
  // copied them out; the bytes stay readable (a later read faults them in from the file again).
  // Only for ranges nobody wrote through the mapping: a private copy of such a page is discarded.
  void release(size_t offset, size_t bytes) const;

 private:
  MappedFile(std::filesystem::path path, uint8_t* data, size_t size);

  std::filesystem::path path_;
  uint8_t* data_;
  size_t size_;
};

}  // namespace tfm
