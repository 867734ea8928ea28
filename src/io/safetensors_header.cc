#include "io/safetensors_header.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <set>

#include "io/json_depth.h"
#include "tfm/error.h"

namespace tfm {
namespace {

using nlohmann::json;

constexpr std::string_view kMetadataKey = "__metadata__";

struct DTypeName {
  std::string_view name;
  DType dtype;
};
constexpr DTypeName kSupported[] = {
    {"F32", DType::f32}, {"BF16", DType::bf16}, {"F16", DType::f16},
    {"I32", DType::i32}, {"I64", DType::i64},
};
// Valid safetensors dtypes that tfm does not compute with, told apart from typos in messages.
constexpr std::string_view kUnsupported[] = {"F64",     "I8",  "U8",      "I16",     "U16",
                                             "U32",     "U64", "BOOL",    "F8_E4M3", "F8_E5M2",
                                             "F8_E8M0", "F4",  "F6_E2M3", "F6_E3M2", "C64"};

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& problem) {
  throw Error("safetensors file '" + file.string() + "': " + problem);
}

DType parse_entry_dtype(const json& value, const std::string& name,
                        const std::filesystem::path& file) {
  if (!value.is_string()) fail(file, "tensor '" + name + "': 'dtype' is not a string");
  const auto& text = value.get_ref<const std::string&>();
  for (const DTypeName& d : kSupported) {
    if (d.name == text) return d.dtype;
  }
  const bool known =
      std::find(std::begin(kUnsupported), std::end(kUnsupported), text) != std::end(kUnsupported);
  fail(file, std::string(known ? "unsupported" : "unknown") + " dtype '" + text + "' for tensor '" +
                 name + "' (tfm reads F32, BF16, F16, I32, I64)");
}

// Non-negative integers that fit in int64, so later size arithmetic cannot go negative.
std::vector<uint64_t> parse_unsigned_list(const json& value, const std::string& what,
                                          const std::string& name,
                                          const std::filesystem::path& file) {
  if (!value.is_array()) fail(file, "tensor '" + name + "': '" + what + "' is not a list");
  std::vector<uint64_t> out;
  for (const json& v : value) {
    if (!v.is_number_unsigned() || v.get<uint64_t>() > uint64_t{INT64_MAX}) {
      fail(file, "tensor '" + name + "': '" + what + "' holds " + v.dump() +
                     ", not a non-negative integer");
    }
    out.push_back(v.get<uint64_t>());
  }
  return out;
}

TensorInfo parse_entry(const std::string& name, const json& entry, size_t data_begin,
                       uint64_t data_size, const std::filesystem::path& file) {
  if (!entry.is_object()) fail(file, "tensor '" + name + "' is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"}) {
    if (!entry.contains(key)) fail(file, "tensor '" + name + "' has no '" + key + "'");
  }
  TensorInfo info{name, parse_entry_dtype(entry["dtype"], name, file), {}, file, 0, 0};
  unsigned __int128 bytes = dtype_size(info.dtype);
  for (uint64_t d : parse_unsigned_list(entry["shape"], "shape", name, file)) {
    info.shape.push_back(static_cast<int64_t>(d));
    bytes = std::min<unsigned __int128>(bytes * d, uint64_t{UINT64_MAX});  // saturate, no wrap
  }
  const auto offsets = parse_unsigned_list(entry["data_offsets"], "data_offsets", name, file);
  if (offsets.size() != 2) fail(file, "tensor '" + name + "': 'data_offsets' must hold 2 numbers");
  const std::string range =
      "data_offsets [" + std::to_string(offsets[0]) + ", " + std::to_string(offsets[1]) + "]";
  if (offsets[0] > offsets[1] || offsets[1] > data_size) {
    fail(file, "tensor '" + name + "': " + range + " out of range (the data section holds " +
                   std::to_string(data_size) + " bytes)");
  }
  if (bytes != offsets[1] - offsets[0]) {
    fail(file, "tensor '" + name + "': shape " + shape_str(info.shape) + " of " +
                   entry["dtype"].get<std::string>() + " does not match " + range + " (" +
                   std::to_string(offsets[1] - offsets[0]) + " bytes)");
  }
  info.begin = data_begin + offsets[0];
  info.end = data_begin + offsets[1];
  return info;
}

std::map<std::string, std::string> parse_metadata(const json& value,
                                                  const std::filesystem::path& file) {
  if (!value.is_object()) fail(file, "'__metadata__' is not a JSON object");
  std::map<std::string, std::string> metadata;
  for (const auto& [key, v] : value.items()) {
    if (!v.is_string()) fail(file, "'__metadata__' value of '" + key + "' is not a string");
    metadata[key] = v.get<std::string>();
  }
  return metadata;
}

// nlohmann keeps the last of duplicate keys silently; two tensors with one name is a broken file.
json parse_json_rejecting_duplicates(std::string_view text, const std::filesystem::path& file) {
  std::set<std::string> seen;
  const json::parser_callback_t bounded = json_depth_limit();
  auto check = [&](int depth, json::parse_event_t event, json& parsed) {
    bounded(depth, event, parsed);
    if (event == json::parse_event_t::key && depth == 1 &&
        !seen.insert(parsed.get<std::string>()).second) {
      fail(file, "the header names '" + parsed.get<std::string>() + "' twice");
    }
    return true;
  };
  try {
    return json::parse(text, check);
  } catch (const json::exception& e) {
    fail(file, std::string("header is not valid JSON: ") + e.what());
  }
}

void check_no_overlap(std::vector<const TensorInfo*> by_offset, const std::filesystem::path& file) {
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->begin < b->begin; });
  const TensorInfo* previous = nullptr;
  for (const TensorInfo* info : by_offset) {
    if (info->begin == info->end) continue;  // empty tensors occupy no bytes
    if (previous != nullptr && previous->end > info->begin) {
      fail(file, "tensors '" + previous->name + "' and '" + info->name + "' overlap");
    }
    previous = info;
  }
}

}  // namespace

SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> bytes, uint64_t file_size,
                                           const std::filesystem::path& file) {
  if (file_size < 8 || bytes.size() < 8) {
    fail(file, "truncated: " + std::to_string(file_size) +
                   " bytes, too short for the 8-byte header length");
  }
  uint64_t length = 0;
  for (int i = 7; i >= 0; --i) length = (length << 8) | bytes[static_cast<size_t>(i)];
  if (length > kMaxSafetensorsHeaderBytes) {
    fail(file, "header length " + std::to_string(length) + " exceeds the limit of " +
                   std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
  }
  if (length > file_size - 8) {
    fail(file, "header length " + std::to_string(length) + " runs past the end of the file (" +
                   std::to_string(file_size) + " bytes): truncated?");
  }
  if (bytes.size() < 8 + length) fail(file, "truncated inside the header");
  SafetensorsHeader header;
  header.data_begin = 8 + length;
  const json root = parse_json_rejecting_duplicates(
      std::string_view(reinterpret_cast<const char*>(bytes.data()) + 8, length), file);
  if (!root.is_object()) fail(file, "header is not a JSON object");
  for (const auto& [name, entry] : root.items()) {
    if (name == kMetadataKey) {
      header.metadata = parse_metadata(entry, file);
    } else {
      header.tensors.push_back(
          parse_entry(name, entry, header.data_begin, file_size - header.data_begin, file));
    }
  }
  std::vector<const TensorInfo*> by_offset;
  for (const TensorInfo& info : header.tensors) by_offset.push_back(&info);
  check_no_overlap(std::move(by_offset), file);
  // json objects iterate in key order, so the tensors are already sorted by name.
  return header;
}

std::string_view safetensors_dtype_name(DType dtype) {
  for (const DTypeName& d : kSupported) {
    if (d.dtype == dtype) return d.name;
  }
  throw Error("no safetensors name for dtype " + std::string(dtype_name(dtype)));
}

}  // namespace tfm
