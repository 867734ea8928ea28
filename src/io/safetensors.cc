#include "io/safetensors.h"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "tfm/error.h"

namespace tfm {
namespace {

// Insertion-ordered, so the header lists tensors in data order as the Python library writes it.
using nlohmann::ordered_json;

// The reference implementation orders tensors by dtype (its enum order, descending), then name.
int dtype_rank(DType dtype) {
  switch (dtype) {
    case DType::i64:
      return 0;
    case DType::f32:
      return 1;
    case DType::i32:
      return 2;
    case DType::bf16:
      return 3;
    case DType::f16:
      return 4;
  }
  return 5;
}

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& problem) {
  throw Error("cannot write safetensors file '" + file.string() + "': " + problem);
}

std::string header_bytes(const std::vector<const std::pair<std::string, Tensor>*>& order,
                         const std::map<std::string, std::string>& metadata,
                         const std::filesystem::path& file) {
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto* named : order) {
    const Tensor& t = named->second;
    header[named->first] = {{"dtype", safetensors_dtype_name(t.dtype())},
                            {"shape", t.shape()},
                            {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const ordered_json::exception& e) {
    fail(file, std::string("a name or metadata entry is not valid UTF-8: ") + e.what());
  }
  text.resize((text.size() + 7) / 8 * 8,
              ' ');  // so the data section starts 8-byte aligned
  std::string bytes(8, '\0');
  for (size_t i = 0; i < 8; ++i) bytes[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  return bytes + text;
}

}  // namespace

SafetensorsFile open_safetensors(const std::filesystem::path& file) {
  SafetensorsFile out;
  out.mapping = MappedFile::open(file);
  out.header = parse_safetensors_header({out.mapping->data(), out.mapping->size()},
                                        out.mapping->size(), file);
  return out;
}

Tensor borrow_tensor_rows(const std::shared_ptr<const MappedFile>& mapping, const TensorInfo& info,
                          int64_t row_begin, int64_t row_end) {
  const int64_t rows = info.shape.empty() ? 1 : info.shape[0];
  if (row_begin < 0 || row_begin > row_end || row_end > rows) {
    throw Error("rows [" + std::to_string(row_begin) + ", " + std::to_string(row_end) +
                ") out of range for tensor '" + info.name + "' of shape " + shape_str(info.shape) +
                " in '" + info.file.string() + "'");
  }
  const size_t row_bytes = rows == 0 ? 0 : (info.end - info.begin) / static_cast<size_t>(rows);
  Shape shape = info.shape;
  if (!shape.empty()) shape[0] = row_end - row_begin;
  const uint8_t* data = mapping->data() + info.begin + static_cast<size_t>(row_begin) * row_bytes;
  Tensor t = Tensor::borrow(data, std::move(shape), info.dtype, mapping);
  const bool aligned = reinterpret_cast<uintptr_t>(data) % dtype_size(info.dtype) == 0;
  return aligned ? t : t.clone();
}

void save_safetensors(const std::filesystem::path& file,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::vector<const std::pair<std::string, Tensor>*> order;
  std::set<std::string> names;
  for (const auto& named : tensors) {
    if (!names.insert(named.first).second) fail(file, "tensor '" + named.first + "' given twice");
    if (named.first == "__metadata__") fail(file, "'__metadata__' is reserved, not a tensor name");
    if (!named.second.defined()) fail(file, "tensor '" + named.first + "' is undefined");
    if (!named.second.is_contiguous()) fail(file, "tensor '" + named.first + "' is not contiguous");
    order.push_back(&named);
  }
  std::sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    const int ra = dtype_rank(a->second.dtype()), rb = dtype_rank(b->second.dtype());
    return ra != rb ? ra < rb : a->first < b->first;
  });
  const std::string header = header_bytes(order, metadata, file);
  std::filesystem::path temporary = file;
  temporary += ".tmp." + std::to_string(::getpid());
  try {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    if (!out) fail(file, "cannot create '" + temporary.string() + "'");
    out.write(header.data(), static_cast<std::streamsize>(header.size()));
    for (const auto* named : order) {
      const Tensor t = named->second.to(kCpu);
      out.write(static_cast<const char*>(t.data()), static_cast<std::streamsize>(t.nbytes()));
    }
    out.close();
    if (!out) fail(file, "write to '" + temporary.string() + "' failed (disk full?)");
    std::error_code error;
    std::filesystem::rename(temporary, file, error);
    if (error) fail(file, "rename from '" + temporary.string() + "' failed: " + error.message());
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(temporary, ignored);
    throw;
  }
}

}  // namespace tfm
