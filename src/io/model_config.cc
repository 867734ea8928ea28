#include "io/model_config.h"

#include <fstream>
#include <sstream>

#include "io/json_depth.h"
#include "io/json_fields.h"
#include "io/rope_config.h"
#include "tfm/error.h"

namespace tfm {
namespace {

// The defaults of each transformers config class (transformers 5), for fields a config.json omits.
struct Architecture {
  const char* name;
  const char* model_type;
  int64_t vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads;
  int64_t max_position_embeddings;
  std::optional<int64_t> head_dim = std::nullopt;  // absent: hidden_size / num_attention_heads
  std::optional<int64_t> num_key_value_heads = std::nullopt;  // absent: num_attention_heads
  std::optional<int64_t> bos_token_id = std::nullopt, eos_token_id = std::nullopt;
  double rms_norm_eps = 1e-6;
  double rope_theta = kDefaultRopeTheta;
  bool sliding_window_fields = false;  // use_sliding_window, sliding_window, max_window_layers
  // mistral, mixtral: `sliding_window` alone, on every layer; this when the key is absent.
  bool plain_sliding_window = false;
  std::optional<int64_t> sliding_window = std::nullopt;
  bool has_attention_bias = true;  // the config's attention_bias is read (mistral: never a bias)
  bool qkv_bias = false;           // q/k/v biases hard-wired on (qwen2)
  bool has_mlp_bias = false;
  // Mixture of experts: the field naming the expert count, and that naming an expert's
  // intermediate size (empty: intermediate_size), with the defaults of both.
  const char* experts_field = nullptr;
  const char* expert_size_field = "";
  int64_t num_experts = 0, num_experts_per_tok = 0, moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  bool always_norm_topk_prob = false;  // mixtral
};

constexpr Architecture kArchitectures[] = {
    {.name = "Qwen3ForCausalLM",
     .model_type = "qwen3",
     .vocab_size = 151936,
     .hidden_size = 4096,
     .intermediate_size = 22016,
     .num_hidden_layers = 32,
     .num_attention_heads = 32,
     .max_position_embeddings = 32768,
     .head_dim = 128,
     .sliding_window_fields = true},
    {.name = "LlamaForCausalLM",
     .model_type = "llama",
     .vocab_size = 32000,
     .hidden_size = 4096,
     .intermediate_size = 11008,
     .num_hidden_layers = 32,
     .num_attention_heads = 32,
     .max_position_embeddings = 2048,
     .bos_token_id = 1,
     .eos_token_id = 2,
     .has_mlp_bias = true},
    {.name = "Qwen2ForCausalLM",
     .model_type = "qwen2",
     .vocab_size = 151936,
     .hidden_size = 4096,
     .intermediate_size = 22016,
     .num_hidden_layers = 32,
     .num_attention_heads = 32,
     .max_position_embeddings = 32768,
     .sliding_window_fields = true,
     .qkv_bias = true},
    {.name = "MistralForCausalLM",
     .model_type = "mistral",
     .vocab_size = 32000,
     .hidden_size = 4096,
     .intermediate_size = 14336,
     .num_hidden_layers = 32,
     .num_attention_heads = 32,
     .max_position_embeddings = 4096 * 32,
     .num_key_value_heads = 8,
     .bos_token_id = 1,
     .eos_token_id = 2,
     .plain_sliding_window = true,
     .sliding_window = 4096,
     .has_attention_bias = false},
    {.name = "MixtralForCausalLM",
     .model_type = "mixtral",
     .vocab_size = 32000,
     .hidden_size = 4096,
     .intermediate_size = 14336,
     .num_hidden_layers = 32,
     .num_attention_heads = 32,
     .max_position_embeddings = 4096 * 32,
     .num_key_value_heads = 8,
     .bos_token_id = 1,
     .eos_token_id = 2,
     .rms_norm_eps = 1e-5,
     .rope_theta = 1e6,
     .plain_sliding_window = true,
     .has_attention_bias = false,
     .experts_field = "num_local_experts",
     .num_experts = 8,
     .num_experts_per_tok = 2,
     .always_norm_topk_prob = true},
    {.name = "Qwen3MoeForCausalLM",
     .model_type = "qwen3_moe",
     .vocab_size = 151936,
     .hidden_size = 2048,
     .intermediate_size = 6144,
     .num_hidden_layers = 24,
     .num_attention_heads = 32,
     .max_position_embeddings = 32768,
     .num_key_value_heads = 4,
     .sliding_window_fields = true,
     .experts_field = "num_experts",
     .expert_size_field = "moe_intermediate_size",
     .num_experts = 128,
     .num_experts_per_tok = 8,
     .moe_intermediate_size = 768},
};
constexpr int64_t kSlidingWindow = 4096;
constexpr int64_t kMaxWindowLayers = 28;

std::string supported_list() {
  std::string list;
  for (const Architecture& a : kArchitectures)
    list += (list.empty() ? "" : ", ") + std::string(a.name);
  return list;
}

const Architecture& find_architecture(const JsonFields& fields) {
  const std::optional<std::string> model_type = fields.string("model_type");
  std::optional<std::string> name;
  if (fields.has("architectures")) {
    const nlohmann::json& list = fields.object()["architectures"];
    if (!list.is_array() || list.empty() || !list[0].is_string()) {
      fields.fail("'architectures' must be a non-empty list of names, got " + list.dump());
    }
    name = list[0].get<std::string>();
  }
  for (const Architecture& a : kArchitectures) {
    if (name ? *name != a.name : model_type != a.model_type) continue;
    if (model_type && *model_type != a.model_type) {
      fields.fail("architecture " + std::string(a.name) + " has model_type '" + a.model_type +
                  "', but the config says '" + *model_type + "'");
    }
    return a;
  }
  if (!name && !model_type) fields.fail("has neither 'architectures' nor 'model_type'");
  fields.fail("unsupported architecture '" + name.value_or(*model_type) +
              "' (supported: " + supported_list() + ")");
}

int64_t positive(const JsonFields& fields, const char* key, int64_t fallback) {
  const int64_t value = fields.integer(key).value_or(fallback);
  if (value <= 0)
    fields.fail("'" + std::string(key) + "' must be positive, got " + std::to_string(value));
  return value;
}

std::optional<DType> parse_config_dtype(const JsonFields& fields) {
  const char* key = fields.has("dtype") ? "dtype" : "torch_dtype";
  const std::optional<std::string> text = fields.string(key);
  if (!text) return std::nullopt;
  try {
    return parse_dtype(*text);
  } catch (const Error& e) {
    fields.fail("'" + std::string(key) + "': " + e.what());
  }
}

const char* torch_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return "float32";
    case DType::bf16:
      return "bfloat16";
    case DType::f16:
      return "float16";
    case DType::i32:
      return "int32";
    case DType::i64:
      return "int64";
  }
  return "float32";
}

MoeConfig parse_moe(const JsonFields& f, const Architecture& arch, const ModelConfig& c) {
  MoeConfig m;
  // Qwen3MoeConfig maps num_experts to num_local_experts too (transformers 5 writes that name).
  const char* experts = f.has(arch.experts_field) ? arch.experts_field : "num_local_experts";
  m.num_experts = positive(f, experts, arch.num_experts);
  m.num_experts_per_tok = positive(f, "num_experts_per_tok", arch.num_experts_per_tok);
  if (m.num_experts_per_tok > m.num_experts) {
    f.fail("'num_experts_per_tok' (" + std::to_string(m.num_experts_per_tok) +
           ") is more than the " + std::to_string(m.num_experts) + " experts");
  }
  m.moe_intermediate_size = *arch.expert_size_field != 0
                                ? positive(f, arch.expert_size_field, arch.moe_intermediate_size)
                                : c.intermediate_size;
  m.norm_topk_prob =
      arch.always_norm_topk_prob || f.boolean("norm_topk_prob").value_or(arch.norm_topk_prob);
  m.output_router_logits = f.boolean("output_router_logits").value_or(false);
  m.router_aux_loss_coef = f.number("router_aux_loss_coef").value_or(0.001);
  m.router_jitter_noise = f.number("router_jitter_noise").value_or(0.0);
  if (m.router_jitter_noise < 0) f.fail("'router_jitter_noise' must not be negative");
  m.decoder_sparse_step = positive(f, "decoder_sparse_step", 1);
  if (f.has("mlp_only_layers") && !f.object()["mlp_only_layers"].is_null()) {
    m.mlp_only_layers = f.integers("mlp_only_layers");
  }
  return m;
}

}  // namespace

ModelConfig parse_model_config(const nlohmann::json& json, const std::string& source) {
  const JsonFields f(json, "config '" + source + "'");
  const Architecture& arch = find_architecture(f);
  ModelConfig c;
  c.architecture = arch.name;
  c.model_type = arch.model_type;
  c.vocab_size = positive(f, "vocab_size", arch.vocab_size);
  c.hidden_size = positive(f, "hidden_size", arch.hidden_size);
  c.intermediate_size = positive(f, "intermediate_size", arch.intermediate_size);
  c.num_hidden_layers = positive(f, "num_hidden_layers", arch.num_hidden_layers);
  c.num_attention_heads = positive(f, "num_attention_heads", arch.num_attention_heads);
  c.num_key_value_heads =
      positive(f, "num_key_value_heads", arch.num_key_value_heads.value_or(c.num_attention_heads));
  if (c.num_attention_heads % c.num_key_value_heads != 0) {
    f.fail("num_attention_heads (" + std::to_string(c.num_attention_heads) +
           ") is not a multiple of num_key_value_heads (" + std::to_string(c.num_key_value_heads) +
           ")");
  }
  c.head_dim =
      positive(f, "head_dim", arch.head_dim.value_or(c.hidden_size / c.num_attention_heads));
  c.max_position_embeddings = positive(f, "max_position_embeddings", arch.max_position_embeddings);
  c.rms_norm_eps = f.number("rms_norm_eps").value_or(arch.rms_norm_eps);
  parse_rope(json, "config '" + source + "'", c, arch.rope_theta);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings").value_or(false);
  c.attention_bias =
      arch.qkv_bias || (arch.has_attention_bias && f.boolean("attention_bias").value_or(false));
  c.mlp_bias = arch.has_mlp_bias && f.boolean("mlp_bias").value_or(false);
  c.hidden_act = f.string("hidden_act").value_or("silu");
  // Read, so honoured or refused: the gated MLPs tfm builds apply SiLU.
  if (c.hidden_act != "silu") {
    f.fail("'hidden_act': activation '" + c.hidden_act +
           "' is not supported (tfm's gated MLPs apply \"silu\")");
  }
  // Llama's bos/eos defaults apply only when the key is absent; an explicit null means none.
  c.bos_token_id = json.contains("bos_token_id") ? f.integer("bos_token_id") : arch.bos_token_id;
  c.pad_token_id = f.integer("pad_token_id");
  c.eos_token_ids = f.integers("eos_token_id");
  if (!json.contains("eos_token_id") && arch.eos_token_id) c.eos_token_ids = {*arch.eos_token_id};
  c.dtype = parse_config_dtype(f);
  if (arch.sliding_window_fields) {
    c.use_sliding_window = f.boolean("use_sliding_window").value_or(false);
    const int64_t window =
        json.contains("sliding_window") ? f.integer("sliding_window").value_or(0) : kSlidingWindow;
    if (c.use_sliding_window && window > 0) c.sliding_window = window;
    c.max_window_layers = f.integer("max_window_layers").value_or(kMaxWindowLayers);
  }
  if (arch.plain_sliding_window) {
    c.sliding_window =
        json.contains("sliding_window") ? f.integer("sliding_window") : arch.sliding_window;
    if (c.sliding_window && *c.sliding_window <= 0) {
      f.fail("'sliding_window' must be positive or null, got " + std::to_string(*c.sliding_window));
    }
  }
  if (arch.experts_field != nullptr) c.moe = parse_moe(f, arch, c);
  c.initializer_range = f.number("initializer_range").value_or(0.02);
  c.raw = json.dump();
  return c;
}

ModelConfig parse_model_config_text(std::string_view text, const std::string& source) {
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(text, json_depth_limit());
  } catch (const nlohmann::json::exception& e) {
    throw Error("config '" + source + "' is not valid JSON: " + e.what());
  }
  return parse_model_config(json, source);
}

namespace {

std::string read_text(const std::filesystem::path& path, const char* what) {
  std::ifstream in(path);
  if (!in) throw Error(std::string(what) + " '" + path.string() + "' cannot be opened");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// generation_config.json's eos_token_id, where the file sets it (null or absent: config.json's).
std::optional<std::vector<int64_t>> generation_eos(const std::filesystem::path& path) {
  if (!std::filesystem::exists(path)) return std::nullopt;
  const std::string where = "generation config '" + path.string() + "'";
  nlohmann::json json;
  try {
    json = nlohmann::json::parse(read_text(path, "generation config"), json_depth_limit());
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + " is not valid JSON: " + e.what());
  }
  if (!json.is_object()) throw Error(where + " is not a JSON object");
  const JsonFields f(json, where);
  if (!f.has("eos_token_id")) return std::nullopt;
  return f.integers("eos_token_id");
}

}  // namespace

ModelConfig load_model_config(const std::filesystem::path& config_json) {
  ModelConfig config =
      parse_model_config_text(read_text(config_json, "config"), config_json.string());
  config.generation_eos_token_ids =
      generation_eos(config_json.parent_path() / "generation_config.json");
  return config;
}

nlohmann::json to_json(const ModelConfig& c) {
  nlohmann::json j = c.raw.empty() ? nlohmann::json::object() : nlohmann::json::parse(c.raw);
  const nlohmann::json names = {{"architectures", {c.architecture}}};
  const Architecture& arch = find_architecture(JsonFields(names, "config"));
  j["architectures"] = {c.architecture};
  j["model_type"] = c.model_type;
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_dim;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  write_rope(c, j);
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  if (!arch.qkv_bias && arch.has_attention_bias) j["attention_bias"] = c.attention_bias;
  if (arch.has_mlp_bias) j["mlp_bias"] = c.mlp_bias;
  j["hidden_act"] = c.hidden_act;
  j["bos_token_id"] = c.bos_token_id ? nlohmann::json(*c.bos_token_id) : nlohmann::json(nullptr);
  j["pad_token_id"] = c.pad_token_id ? nlohmann::json(*c.pad_token_id) : nlohmann::json(nullptr);
  j["eos_token_id"] = c.eos_token_ids.size() == 1 ? nlohmann::json(c.eos_token_ids[0])
                      : c.eos_token_ids.empty()   ? nlohmann::json(nullptr)
                                                  : nlohmann::json(c.eos_token_ids);
  if (c.dtype)
    j[j.contains("torch_dtype") && !j.contains("dtype") ? "torch_dtype" : "dtype"] =
        torch_dtype_name(*c.dtype);
  if (arch.sliding_window_fields) {
    j["use_sliding_window"] = c.use_sliding_window;
    j["sliding_window"] =
        c.sliding_window ? nlohmann::json(*c.sliding_window) : nlohmann::json(nullptr);
    j["max_window_layers"] = c.max_window_layers;
  }
  if (arch.plain_sliding_window) {
    j["sliding_window"] =
        c.sliding_window ? nlohmann::json(*c.sliding_window) : nlohmann::json(nullptr);
  }
  if (c.moe) {
    const MoeConfig& m = *c.moe;
    j[j.contains("num_local_experts") ? "num_local_experts" : arch.experts_field] = m.num_experts;
    j["num_experts_per_tok"] = m.num_experts_per_tok;
    if (*arch.expert_size_field != 0) j[arch.expert_size_field] = m.moe_intermediate_size;
    if (!arch.always_norm_topk_prob) j["norm_topk_prob"] = m.norm_topk_prob;
    j["output_router_logits"] = m.output_router_logits;
    j["router_aux_loss_coef"] = m.router_aux_loss_coef;
    if (arch.always_norm_topk_prob) {
      j["router_jitter_noise"] = m.router_jitter_noise;
    } else {
      j["decoder_sparse_step"] = m.decoder_sparse_step;
      j["mlp_only_layers"] = m.mlp_only_layers;
    }
  }
  return j;
}

}  // namespace tfm
