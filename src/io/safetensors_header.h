// The safetensors header: an 8-byte little-endian length, then that many bytes of JSON naming each
// tensor's dtype, shape and byte range. Parsing checks everything a reader later trusts (ranges
// inside the file, sizes matching shapes, no overlaps), so a hostile file is an Error, not a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tfm/dtype.h"
#include "tfm/tensor.h"

namespace tfm {

struct TensorInfo {
  std::string name;
  DType dtype;
  Shape shape;
  std::filesystem::path file;
  size_t begin, end;  // byte range in `file`, counted from the start of the file
};

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // sorted by name
  std::map<std::string, std::string> metadata;
  size_t data_begin = 0;  // where the data section starts: 8 + header length
};

// Headers longer than this are refused before being read, as the reference implementation does.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// Parses the header at the start of `bytes`, the first bytes of a file of `file_size` bytes
// (bytes.size() <= file_size; the data section itself need not be in `bytes`). `file` is only used
// in messages and copied into each TensorInfo.
SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> bytes, uint64_t file_size,
                                           const std::filesystem::path& file);

// "F32", "BF16", ... for the dtypes tfm holds.
std::string_view safetensors_dtype_name(DType dtype);

}  // namespace tfm
