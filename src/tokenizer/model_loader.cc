// The model section of tokenizer.json -> BpeModel (vocab and merges read by tokenizer_json.cc).
#include <nlohmann/json.hpp>

#include "tokenizer/json_spec.h"
#include "tokenizer/pipeline.h"

namespace tfm::tokenizer {

std::unique_ptr<BpeModel> make_model(
    const nlohmann::json& spec, Vocab vocab,
    const std::vector<std::pair<std::string_view, std::string_view>>& merges, bool byte_level,
    const std::string& where) {
  if (!spec.is_object()) throw Error(where + ": has no \"model\" object");
  const std::string type = text_field(spec, "type", "BPE", where);
  if (type != "BPE") throw unsupported(where, "model", type, "BPE");
  if (!spec.contains("vocab")) {
    throw Error(where + ": model.vocab is missing or not an object of token -> id");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (spec.contains(key) && spec[key].is_string() && !spec[key].get<std::string>().empty()) {
      throw Error(where + ": model." + key + " is not supported (only empty)");
    }
  }
  if (spec.contains("dropout") && !spec["dropout"].is_null()) {
    throw Error(where + ": model.dropout is not supported (tfm encodes deterministically)");
  }

  BpeOptions options;
  options.byte_level = byte_level;
  options.byte_fallback = flag_field(spec, "byte_fallback", false, where);
  options.fuse_unk = flag_field(spec, "fuse_unk", false, where);
  options.ignore_merges = flag_field(spec, "ignore_merges", false, where);
  if (spec.contains("unk_token") && spec["unk_token"].is_string()) {
    options.unk_token = spec["unk_token"].get<std::string>();
  }
  return std::make_unique<BpeModel>(std::move(vocab), merges, std::move(options), where);
}

}  // namespace tfm::tokenizer
