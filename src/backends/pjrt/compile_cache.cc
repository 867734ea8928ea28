#include "backends/pjrt/compile_cache.h"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "tfm/log.h"

namespace tfm::pjrt {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[] = "tfm pjrt compile cache 1\n";

uint64_t fnv1a(const std::string& bytes, uint64_t hash = 0xcbf29ce484222325ull) {
  for (const char c : bytes) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

std::string hex(uint64_t value) {
  char text[17];
  std::snprintf(text, sizeof text, "%016llx", static_cast<unsigned long long>(value));
  return text;
}

void put_u64(std::string& out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

// Reads a little-endian u64 at `at`, advancing it; false past the end.
bool get_u64(const std::string& in, size_t& at, uint64_t& value) {
  if (in.size() < at + 8) return false;
  value = 0;
  for (int i = 0; i < 8; ++i) value |= uint64_t{static_cast<unsigned char>(in[at + i])} << (8 * i);
  at += 8;
  return true;
}

// Layout: magic, key size, key, payload size, payload, checksum of key and payload.
std::string entry_bytes(const std::string& key, const std::string& payload) {
  std::string out(kMagic);
  put_u64(out, key.size());
  out += key;
  put_u64(out, payload.size());
  out += payload;
  put_u64(out, fnv1a(payload, fnv1a(key)));
  return out;
}

// The payload of a whole entry of `key`; otherwise nullopt, with why in `damage` ("" for an
// entry that is whole but another key's).
std::optional<std::string> parse_entry(const std::string& in, const std::string& key,
                                       std::string& damage) {
  const size_t magic = sizeof kMagic - 1;
  if (in.compare(0, magic, kMagic) != 0) {
    damage = "not a tfm compile cache entry";
    return std::nullopt;
  }
  size_t at = magic;
  uint64_t key_size = 0, payload_size = 0, checksum = 0;
  if (!get_u64(in, at, key_size) || in.size() < at + key_size) {
    damage = "truncated";
    return std::nullopt;
  }
  const std::string stored_key = in.substr(at, key_size);
  at += key_size;
  if (!get_u64(in, at, payload_size) || in.size() < at + payload_size) {
    damage = "truncated";
    return std::nullopt;
  }
  std::string payload = in.substr(at, payload_size);
  at += payload_size;
  if (!get_u64(in, at, checksum) || at != in.size()) {
    damage = at > in.size() ? "truncated" : "has trailing bytes";
    return std::nullopt;
  }
  if (checksum != fnv1a(payload, fnv1a(stored_key))) {
    damage = "its checksum does not match";
    return std::nullopt;
  }
  damage.clear();
  if (stored_key != key) return std::nullopt;
  return payload;
}

}  // namespace

fs::path CompileCache::entry_path(const std::string& key) const {
  // Two FNV-1a hashes of the key; the entry holds the key itself, so a collision is a miss.
  return dir_ / (hex(fnv1a(key)) + hex(fnv1a(key, 0x84222325cbf29ce4ull)) + ".pjrt");
}

std::optional<std::string> CompileCache::find(const std::string& key) const {
  const fs::path file = entry_path(key);
  std::ifstream in(file, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream bytes;
  bytes << in.rdbuf();
  std::string damage;
  std::optional<std::string> payload = parse_entry(bytes.str(), key, damage);
  if (!damage.empty()) {
    log_warn("compile cache entry " + file.string() + " is damaged (" + damage +
             "): removed, compiling again");
    std::error_code ignored;
    fs::remove(file, ignored);
  }
  return payload;
}

void CompileCache::store(const std::string& key, const std::string& payload) const {
  const fs::path file = entry_path(key);
  fs::path temporary = file;
  temporary += ".tmp." + std::to_string(::getpid());
  std::error_code error;
  fs::create_directories(dir_, error);
  if (!error) {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    const std::string bytes = entry_bytes(key, payload);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (out)
      fs::rename(temporary, file, error);
    else
      error = std::make_error_code(std::errc::io_error);
  }
  if (error) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    log_warn("compile cache " + dir_.string() + " cannot be written (" + error.message() +
             "): the next run compiles again");
  }
}

void CompileCache::remove(const std::string& key) const {
  std::error_code ignored;
  fs::remove(entry_path(key), ignored);
}

fs::path default_compile_cache_dir() {
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return fs::path(xdg) / "tfm" / "pjrt";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return fs::path(home) / ".cache" / "tfm" / "pjrt";
  }
  return {};
}

}  // namespace tfm::pjrt
