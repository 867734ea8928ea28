// tokenizer.json -> Pipeline.
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "io/json_depth.h"
#include "tokenizer/json_spec.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/tokenizer_json.h"

namespace tfm::tokenizer {
namespace {

std::string read_file(const std::string& path, const std::string& what) {
  std::unique_ptr<FILE, decltype(&fclose)> file(std::fopen(path.c_str(), "rb"), &fclose);
  if (!file) throw Error(what + " at " + path + ": cannot open file");
  std::string text;
  char buffer[1 << 16];
  for (size_t n; (n = std::fread(buffer, 1, sizeof(buffer), file.get())) > 0;) {
    text.append(buffer, n);
  }
  return text;
}

nlohmann::json parse_json(const std::string& path, const std::string& what) {
  try {
    return nlohmann::json::parse(read_file(path, what), json_depth_limit());
  } catch (const nlohmann::json::exception& e) {
    throw Error(what + " at " + path + ": invalid JSON: " + e.what());
  }
}

AddedToken parse_added_token(const nlohmann::json& spec, const std::string& where) {
  if (!spec.is_object() || !spec.contains("id") || !spec["id"].is_number_integer()) {
    throw Error(where + ": added_tokens entry without an integer id: " + spec.dump());
  }
  AddedToken token;
  token.id = token_id(spec["id"], "added_tokens id", where);
  token.content = string_field(spec, "content", where);
  token.single_word = flag_field(spec, "single_word", false, where);
  token.lstrip = flag_field(spec, "lstrip", false, where);
  token.rstrip = flag_field(spec, "rstrip", false, where);
  token.normalized = flag_field(spec, "normalized", true, where);
  token.special = flag_field(spec, "special", false, where);
  return token;
}

void load_added_tokens(const nlohmann::json& root, Pipeline& p) {
  if (!root.contains("added_tokens") || root["added_tokens"].is_null()) return;
  std::vector<AddedToken> raw, normalized;
  for (const auto& spec : root["added_tokens"]) {
    AddedToken token = parse_added_token(spec, p.source);
    p.added_by_content[token.content] = token.id;
    p.added_by_id[token.id] = token;
    if (token.normalized && p.normalizer) p.normalizer->normalize(token.content);
    (token.normalized ? normalized : raw).push_back(std::move(token));
  }
  p.raw_tokens = AddedTokenMatcher(std::move(raw));
  p.normalized_tokens = AddedTokenMatcher(std::move(normalized));
}

}  // namespace

std::unique_ptr<Pipeline> load_pipeline(const std::string& tokenizer_json_path,
                                        const std::string& tokenizer_config_json_path) {
  auto p = std::make_unique<Pipeline>();
  p->source = "tokenizer.json at " + tokenizer_json_path;
  TokenizerJson file = read_tokenizer_json(tokenizer_json_path, p->source);
  const nlohmann::json& root = file.root;
  if (!root.contains("model")) throw Error(p->source + ": has no \"model\" section");
  const nlohmann::json null;
  const auto section = [&](const char* key) -> const nlohmann::json& {
    return root.contains(key) ? root[key] : null;
  };
  // The components check the fields they read (json_spec.h); a JSON access none checked still
  // ends as an Error naming the file, never as the JSON library's exception.
  try {
    p->normalizer = make_normalizer(section("normalizer"), p->source);
    PreTokenizerSpec pre = make_pre_tokenizer(section("pre_tokenizer"), p->source);
    p->pre_tokenizer = std::move(pre.pre_tokenizer);
    p->model =
        make_model(root["model"], std::move(file.vocab), file.merges, pre.byte_level, p->source);
    p->post_processor = make_post_processor(section("post_processor"), p->source);
    p->decoder = make_decoder(section("decoder"), p->source);
    load_added_tokens(root, *p);
  } catch (const nlohmann::json::exception& e) {
    throw Error(p->source + ": " + e.what());
  }
  if (!tokenizer_config_json_path.empty()) {
    p->config = load_tokenizer_config(tokenizer_config_json_path);
  }
  return p;
}

TokenizerConfig load_tokenizer_config(const std::string& path) {
  const nlohmann::json root = parse_json(path, "tokenizer_config.json");
  const std::string where = "tokenizer_config.json at " + path;
  if (!root.is_object()) throw Error(where + ": the top level is not a JSON object");
  TokenizerConfig config;
  if (root.contains("chat_template")) {
    const auto& chat = root["chat_template"];
    if (chat.is_string()) {
      config.chat_template = chat.get<std::string>();
    } else if (chat.is_array()) {  // named templates: transformers uses "default"
      for (const auto& named : chat) {
        if (text_field(named, "name", "", where) == "default") {
          config.chat_template = string_field(named, "template", where);
        }
      }
    }
  }
  // Special tokens are written as strings or as {"content": ...} added-token objects.
  const auto token = [&](const char* key) -> std::optional<std::string> {
    if (!root.contains(key)) return std::nullopt;
    const auto& value = root[key];
    if (value.is_string()) return value.get<std::string>();
    if (value.is_object() && value.contains("content"))
      return string_field(value, "content", where);
    return std::nullopt;
  };
  config.bos_token = token("bos_token");
  config.eos_token = token("eos_token");
  config.pad_token = token("pad_token");
  config.unk_token = token("unk_token");
  return config;
}

}  // namespace tfm::tokenizer
