// What makes a checkpoint folder complete: its manifest, written last, lists every file the save
// wrote with its size and checksum. A folder whose manifest is missing, or whose files are not
// all there and whole, is not a checkpoint (a save interrupted, a disk that filled up): resuming
// refuses it, naming what is wrong.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace tfm::training {

inline constexpr const char* kManifestFile = "checkpoint_manifest.json";

// Lists the files now in `dir` (written aside, then renamed into place).
void write_manifest(const std::filesystem::path& dir);
// Why `dir` is not a complete checkpoint, or nullopt when it is.
std::optional<std::string> incomplete(const std::filesystem::path& dir);

// FNV-1a over a file's bytes taken 8 at a time (little-endian words, then the tail bytes).
uint64_t file_checksum(const std::filesystem::path& file);

}  // namespace tfm::training
