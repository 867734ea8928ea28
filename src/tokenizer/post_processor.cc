#include <nlohmann/json.hpp>

#include "tokenizer/json_spec.h"
#include "tokenizer/pipeline.h"

namespace tfm::tokenizer {
namespace {

void add_template(const nlohmann::json& spec, const std::string& where, PostProcessor& out) {
  const auto& single = array_field(spec, "single", where);
  const nlohmann::json specials =
      spec.contains("special_tokens") ? spec["special_tokens"] : nlohmann::json::object();
  bool after_sequence = false;
  for (const auto& piece : single) {
    if (piece.contains("Sequence")) {
      after_sequence = true;
      continue;
    }
    if (!piece.contains("SpecialToken")) {
      throw Error(where + ": post_processor template piece " + piece.dump() +
                  " is neither Sequence nor SpecialToken");
    }
    const std::string name = string_field(piece["SpecialToken"], "id", where);
    if (!specials.contains(name) || !specials[name].contains("ids")) {
      throw Error(where + ": post_processor special token '" + name +
                  "' is missing from special_tokens");
    }
    auto& side = after_sequence ? out.suffix : out.prefix;
    for (const auto& id : array_field(specials[name], "ids", where)) {
      side.push_back(token_id(id, "post_processor special token '" + name + "' id", where));
    }
  }
}

void add_pair_tokens(const nlohmann::json& spec, const std::string& where, PostProcessor& out) {
  for (const char* key : {"cls", "sep"}) {
    if (!spec.contains(key) || !spec[key].is_array() || spec[key].size() != 2) {
      throw Error(where + ": post_processor needs \"" + key + "\": [token, id]");
    }
  }
  out.prefix.push_back(token_id(spec["cls"][1], "post_processor cls id", where));
  out.suffix.push_back(token_id(spec["sep"][1], "post_processor sep id", where));
}

void add_steps(const nlohmann::json& spec, const std::string& where, PostProcessor& out) {
  if (spec.is_null()) return;
  const std::string type = type_of(spec, "post_processor", where);
  if (type == "TemplateProcessing") {
    add_template(spec, where, out);
  } else if (type == "BertProcessing" || type == "RobertaProcessing") {
    add_pair_tokens(spec, where, out);
  } else if (type == "Sequence") {
    for (const auto& step : array_field(spec, "processors", where)) add_steps(step, where, out);
  } else if (type != "ByteLevel") {  // ByteLevel only adjusts offsets, which tfm does not track
    throw unsupported(where, "post_processor", type,
                      "TemplateProcessing, BertProcessing, RobertaProcessing, ByteLevel, Sequence");
  }
}

}  // namespace

PostProcessor make_post_processor(const nlohmann::json& spec, const std::string& where) {
  PostProcessor out;
  add_steps(spec, where, out);
  return out;
}

}  // namespace tfm::tokenizer
