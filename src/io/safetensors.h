// Reading one .safetensors file by mmap (tensors borrow the mapping: no copy) and writing one the
// way the Python library does.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/mapped_file.h"
#include "io/safetensors_header.h"
#include "tfm/tensor.h"

namespace tfm {

struct SafetensorsFile {
  std::shared_ptr<const MappedFile> mapping;
  SafetensorsHeader header;
};

SafetensorsFile open_safetensors(const std::filesystem::path& file);

// Rows [row_begin, row_end) of axis 0 of the tensor `info` describes in `mapping` (a 0-d tensor has
// no axis 0: pass 0 and 1 for all of it). The tensor borrows the mapping; only where the file
// places the data at an address the dtype cannot be read from is it copied.
Tensor borrow_tensor_rows(const std::shared_ptr<const MappedFile>& mapping, const TensorInfo& info,
                          int64_t row_begin, int64_t row_end);

// Writes `tensors` (names unique) and string `metadata` to `file` byte for byte as the Python
// library does: tensors ordered I64, F32, I32, BF16, F16 then by name (so each starts aligned to
// its element size), header padded with spaces to a multiple of 8 bytes. The file is written under
// a temporary name and renamed, so readers never see a half-written file.
void save_safetensors(const std::filesystem::path& file,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {{"format", "pt"}});

}  // namespace tfm
