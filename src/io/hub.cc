#include "io/hub.h"

#include <cstdlib>
#include <fstream>
#include <optional>
#include <vector>

#include "tfm/error.h"

namespace tfm {
namespace {

namespace fs = std::filesystem;

std::optional<std::string> env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

struct HubCache {
  fs::path folder;
  const char* from;  // which setting chose it, for messages
};

// The same precedence as huggingface_hub.
HubCache hub_cache() {
  if (auto cache = env("HF_HUB_CACHE")) return {*cache, "$HF_HUB_CACHE"};
  if (auto home = env("HF_HOME")) return {fs::path(*home) / "hub", "$HF_HOME/hub"};
  if (auto xdg = env("XDG_CACHE_HOME")) {
    return {fs::path(*xdg) / "huggingface" / "hub", "$XDG_CACHE_HOME/huggingface/hub"};
  }
  return {fs::path(env("HOME").value_or("")) / ".cache" / "huggingface" / "hub",
          "~/.cache/huggingface/hub"};
}

std::string read_ref(const fs::path& ref) {
  std::ifstream in(ref);
  std::string hash;
  in >> hash;
  return hash;
}

// refs/main names the snapshot `hf download` fetched last; without it (a cache copied by hand) the
// most recently written snapshot is the best guess.
std::optional<fs::path> find_snapshot(const fs::path& repo) {
  const fs::path snapshots = repo / "snapshots";
  const std::string hash = read_ref(repo / "refs" / "main");
  if (!hash.empty() && fs::is_directory(snapshots / hash)) return snapshots / hash;
  std::error_code error;
  std::optional<fs::path> newest;
  fs::file_time_type newest_time;
  for (const auto& entry : fs::directory_iterator(snapshots, error)) {
    if (!entry.is_directory()) continue;
    const fs::file_time_type time = entry.last_write_time();
    if (!newest || time > newest_time) {
      newest = entry.path();
      newest_time = time;
    }
  }
  return newest;
}

bool looks_like_repo_id(const std::string& text) {
  const size_t slash = text.find('/');
  return slash != std::string::npos && slash > 0 && slash + 1 < text.size() &&
         text.find('/', slash + 1) == std::string::npos && text.find("..") == std::string::npos;
}

}  // namespace

fs::path resolve_pretrained(const std::string& id_or_path) {
  if (fs::exists(id_or_path)) return id_or_path;
  const std::string how =
      "Download it with `hf download " + id_or_path + "` (or `huggingface-cli download " +
      id_or_path + "`), or pass the path of a local folder holding config.json and *.safetensors";
  if (!looks_like_repo_id(id_or_path)) {
    throw Error("'" + id_or_path + "' is neither an existing file or folder nor a Hub id like " +
                "Org/Name. Looked at: " + fs::absolute(id_or_path).string());
  }
  const HubCache cache = hub_cache();
  std::string folder = "models--" + id_or_path;
  folder.replace(folder.find('/'), 1, "--");
  const fs::path repo = cache.folder / folder;
  if (auto snapshot = find_snapshot(repo)) return *snapshot;
  throw Error(
      "model '" + id_or_path + "' not found. Looked at: " + fs::absolute(id_or_path).string() +
      " (no such local path); " + (repo / "snapshots").string() + " (Hugging Face cache, from " +
      cache.from + "). tfm does not download. " + how + ".");
}

}  // namespace tfm
