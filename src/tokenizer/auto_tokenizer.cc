#include <filesystem>

#include "io/hub.h"
#include "tfm/error.h"
#include "tfm/tokenizer.h"

namespace tfm {

Tokenizer AutoTokenizer::from_pretrained(const std::string& id_or_path) {
  namespace fs = std::filesystem;
  fs::path path = resolve_pretrained(id_or_path);
  fs::path folder = path;
  if (fs::is_regular_file(path)) {
    folder = path.parent_path();
  } else {
    path /= "tokenizer.json";
  }
  if (!fs::exists(path)) {
    throw Error("AutoTokenizer::from_pretrained('" + id_or_path + "'): no tokenizer.json in " +
                folder.string() + " (only tokenizer.json based tokenizers are supported)");
  }
  const fs::path config = folder / "tokenizer_config.json";
  return Tokenizer::from_files(path.string(), fs::exists(config) ? config.string() : "");
}

}  // namespace tfm
