#include "io/rope_config.h"

#include <algorithm>

#include "io/json_fields.h"

namespace tfm {
namespace {

constexpr const char* kRopeTypes[] = {"default", "linear", "dynamic", "llama3", "yarn", "longrope"};

bool has_original_length(const std::string& type) {
  return type == "llama3" || type == "yarn" || type == "longrope";
}

bool uses_legacy_layout(const nlohmann::json& json) {
  return !json.contains("rope_parameters") &&
         (json.contains("rope_theta") || json.contains("rope_scaling"));
}

}  // namespace

void parse_rope(const nlohmann::json& json, const std::string& where, ModelConfig& config,
                double default_theta) {
  const JsonFields top(json, where);
  const char* key = top.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  const nlohmann::json empty = nlohmann::json::object();
  const nlohmann::json& object = top.has(key) ? json[key] : empty;
  const JsonFields rope(object, where + ": '" + key + "'");
  RopeScaling& s = config.rope_scaling;
  s.rope_type = rope.string("rope_type").value_or(rope.string("type").value_or("default"));
  if (std::find(std::begin(kRopeTypes), std::end(kRopeTypes), s.rope_type) ==
      std::end(kRopeTypes)) {
    rope.fail("unsupported rope_type '" + s.rope_type +
              "' (supported: default, linear, dynamic, llama3, yarn, longrope)");
  }
  config.rope_theta =
      rope.number("rope_theta").value_or(top.number("rope_theta").value_or(default_theta));
  s.factor = rope.number("factor").value_or(1.0);
  s.low_freq_factor = rope.number("low_freq_factor").value_or(1.0);
  s.high_freq_factor = rope.number("high_freq_factor").value_or(4.0);
  s.original_max_position_embeddings =
      rope.integer("original_max_position_embeddings")
          .value_or(has_original_length(s.rope_type) ? config.max_position_embeddings : 0);
  s.beta_fast = rope.number("beta_fast").value_or(32.0);
  s.beta_slow = rope.number("beta_slow").value_or(1.0);
  s.attention_factor = rope.number("attention_factor");
  s.mscale = rope.number("mscale").value_or(0.0);
  s.mscale_all_dim = rope.number("mscale_all_dim").value_or(0.0);
  s.truncate = rope.boolean("truncate").value_or(true);
}

void write_rope(const ModelConfig& config, nlohmann::json& json) {
  const bool legacy = uses_legacy_layout(json);
  const char* key = legacy ? "rope_scaling" : "rope_parameters";
  const RopeScaling& s = config.rope_scaling;
  if (legacy && s.rope_type == "default") {
    json["rope_theta"] = config.rope_theta;
    json["rope_scaling"] = nullptr;
    return;
  }
  nlohmann::json rope =
      json.contains(key) && json[key].is_object() ? json[key] : nlohmann::json::object();
  rope["rope_type"] = s.rope_type;
  if (rope.contains("type")) rope["type"] = s.rope_type;
  if (legacy) {
    json["rope_theta"] = config.rope_theta;
  } else {
    rope["rope_theta"] = config.rope_theta;
  }
  if (s.rope_type != "default") rope["factor"] = s.factor;
  if (has_original_length(s.rope_type)) {
    rope["original_max_position_embeddings"] = s.original_max_position_embeddings;
  }
  if (s.rope_type == "llama3") {
    rope["low_freq_factor"] = s.low_freq_factor;
    rope["high_freq_factor"] = s.high_freq_factor;
  }
  if (s.rope_type == "yarn") {
    rope["beta_fast"] = s.beta_fast;
    rope["beta_slow"] = s.beta_slow;
    rope["mscale"] = s.mscale;
    rope["mscale_all_dim"] = s.mscale_all_dim;
    rope["truncate"] = s.truncate;
  }
  if (s.attention_factor) rope["attention_factor"] = *s.attention_factor;
  json[key] = rope;
}

}  // namespace tfm
