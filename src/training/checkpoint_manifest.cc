#include "training/checkpoint_manifest.h"

#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "io/json_depth.h"
#include "tfm/error.h"

namespace tfm::training {
namespace fs = std::filesystem;

uint64_t file_checksum(const fs::path& file) {
  constexpr uint64_t kPrime = 0x100000001b3ull;
  uint64_t hash = 0xcbf29ce484222325ull;
  std::ifstream in(file, std::ios::binary);
  if (!in) throw Error("cannot read '" + file.string() + "'");
  std::vector<char> buffer(size_t{1} << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    const auto got = static_cast<size_t>(in.gcount());
    size_t at = 0;
    for (; at + 8 <= got; at += 8) {
      uint64_t word = 0;
      std::memcpy(&word, buffer.data() + at, 8);
      hash = (hash ^ word) * kPrime;
    }
    for (; at < got; ++at) hash = (hash ^ static_cast<unsigned char>(buffer[at])) * kPrime;
  }
  return hash;
}

void write_manifest(const fs::path& dir) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name == kManifestFile) continue;
    files[name] = {{"bytes", entry.file_size()},
                   {"checksum", std::to_string(file_checksum(entry.path()))}};
  }
  const fs::path file = dir / kManifestFile;
  const fs::path aside = dir / (std::string(kManifestFile) + ".partial");
  {
    std::ofstream out(aside);
    out << nlohmann::json{{"files", files}}.dump(2) << "\n";
    out.flush();
    if (!out) throw Error("cannot write '" + aside.string() + "'");
  }
  fs::rename(aside, file);
}

std::optional<std::string> incomplete(const fs::path& dir) {
  std::ifstream in(dir / kManifestFile);
  if (!in) return "it has no " + std::string(kManifestFile) + " (a save that did not finish)";
  nlohmann::json manifest;
  try {
    manifest = nlohmann::json::parse(in, json_depth_limit());
  } catch (const nlohmann::json::exception& e) {
    return std::string(kManifestFile) + " is not valid JSON (" + e.what() + ")";
  }
  if (!manifest.contains("files") || !manifest["files"].is_object() || manifest["files"].empty()) {
    return std::string(kManifestFile) + " lists no files";
  }
  for (const auto& [name, expected] : manifest["files"].items()) {
    const fs::path file = dir / name;
    std::error_code error;
    const uintmax_t bytes = fs::file_size(file, error);
    if (error) return "'" + name + "' is missing";
    if (!expected.contains("bytes") || !expected.contains("checksum") ||
        expected["bytes"] != bytes) {
      return "'" + name + "' has " + std::to_string(bytes) + " bytes, not the " +
             (expected.contains("bytes") ? expected["bytes"].dump() : "?") + " saved";
    }
    if (expected["checksum"] != std::to_string(file_checksum(file))) {
      return "'" + name + "' does not match its checksum";
    }
  }
  return std::nullopt;
}

}  // namespace tfm::training
