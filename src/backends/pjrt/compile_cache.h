// Compiled executables kept on disk between runs, so a second run of the same shapes compiles
// nothing. An entry is keyed by everything the executable depends on (the client's identity: the
// plugin, its versions and devices; the compile options; the module's text), which it stores
// whole and compares, with a checksum over it and the payload: a corrupt or foreign entry is a
// miss (removed, and said), never run. Entries are written aside and renamed into place.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace tfm::pjrt {

class CompileCache {
 public:
  explicit CompileCache(std::filesystem::path dir) : dir_(std::move(dir)) {}

  // The payload stored under `key`; nullopt when there is none, or the entry is damaged or
  // another key's.
  std::optional<std::string> find(const std::string& key) const;
  // Stores `payload` under `key`; a cache that cannot be written is said, not an error.
  void store(const std::string& key, const std::string& payload) const;
  // Drops the entry of `key` (a payload the plugin could not load).
  void remove(const std::string& key) const;

  std::filesystem::path entry_path(const std::string& key) const;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

// ~/.cache/tfm/pjrt ($XDG_CACHE_HOME/tfm/pjrt where that is set); "" when neither is known.
std::filesystem::path default_compile_cache_dir();

}  // namespace tfm::pjrt
