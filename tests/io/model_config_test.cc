#include "io/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "io/io_test_util.h"
#include "tfm/error.h"

namespace tfm {
namespace {

using nlohmann::json;
using testing::AllOf;
using testing::ElementsAre;
using testing::HasSubstr;
using testing::IsEmpty;
using testing::ThrowsMessage;

const std::filesystem::path kFixtures = std::filesystem::path(TFM_TEST_DATA_DIR) / "fixtures";

// Qwen/Qwen3-0.6B's published config.json (transformers 4.51 layout).
const json kQwen3_0_6B = json::parse(R"({
  "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 151643, "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu",
  "hidden_size": 1024, "initializer_range": 0.02, "intermediate_size": 3072,
  "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
  "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8,
  "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000, "sliding_window": null,
  "tie_word_embeddings": true, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
  "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})");

// meta-llama/Llama-3.2-1B-Instruct's published config.json (llama3 rope_scaling, eos list).
const json kLlama32_1B = json::parse(R"({
  "architectures": ["LlamaForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
  "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009], "head_dim": 64,
  "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
  "intermediate_size": 8192, "max_position_embeddings": 131072, "mlp_bias": false,
  "model_type": "llama", "num_attention_heads": 32, "num_hidden_layers": 16,
  "num_key_value_heads": 8, "pretraining_tp": 1, "rms_norm_eps": 1e-05,
  "rope_scaling": {"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192, "rope_type": "llama3"},
  "rope_theta": 500000.0, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.45.0.dev0", "use_cache": true, "vocab_size": 128256})");

// Qwen/Qwen2.5-0.5B's published config.json (no head_dim; a sliding_window that is not used).
const json kQwen25_0_5B = json::parse(R"({
  "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643,
  "eos_token_id": 151643, "hidden_act": "silu", "hidden_size": 896, "initializer_range": 0.02,
  "intermediate_size": 4864, "max_position_embeddings": 32768, "max_window_layers": 24,
  "model_type": "qwen2", "num_attention_heads": 14, "num_hidden_layers": 24,
  "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
  "sliding_window": 32768, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
  "transformers_version": "4.40.1", "use_cache": true, "use_mrope": false,
  "use_sliding_window": false, "vocab_size": 151936})");

void expect_same_fields(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.architecture, b.architecture);
  EXPECT_EQ(a.model_type, b.model_type);
  EXPECT_EQ(
      std::tie(a.vocab_size, a.hidden_size, a.intermediate_size, a.num_hidden_layers,
               a.num_attention_heads, a.num_key_value_heads, a.head_dim, a.max_position_embeddings),
      std::tie(b.vocab_size, b.hidden_size, b.intermediate_size, b.num_hidden_layers,
               b.num_attention_heads, b.num_key_value_heads, b.head_dim,
               b.max_position_embeddings));
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rope_scaling, b.rope_scaling);
  EXPECT_EQ(std::tie(a.tie_word_embeddings, a.attention_bias, a.mlp_bias, a.hidden_act),
            std::tie(b.tie_word_embeddings, b.attention_bias, b.mlp_bias, b.hidden_act));
  EXPECT_EQ(std::tie(a.bos_token_id, a.pad_token_id, a.eos_token_ids, a.dtype),
            std::tie(b.bos_token_id, b.pad_token_id, b.eos_token_ids, b.dtype));
  EXPECT_EQ(std::tie(a.use_sliding_window, a.sliding_window, a.max_window_layers),
            std::tie(b.use_sliding_window, b.sliding_window, b.max_window_layers));
}

TEST(ModelConfigTest, Qwen3FixtureInTransformers5Layout) {
  const ModelConfig c = load_model_config(kFixtures / "qwen3" / "config.json");
  EXPECT_EQ(c.architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(std::tie(c.vocab_size, c.hidden_size, c.intermediate_size, c.num_hidden_layers),
            std::make_tuple(1024, 64, 128, 2));
  EXPECT_EQ(std::tie(c.num_attention_heads, c.num_key_value_heads, c.head_dim),
            std::make_tuple(4, 2, 16));
  EXPECT_EQ(c.max_position_embeddings, 256);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling, RopeScaling{});
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_EQ(c.hidden_act, "silu");
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.pad_token_id, 0);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(2));
  EXPECT_EQ(c.dtype, f32);
  EXPECT_FALSE(c.use_sliding_window);
  EXPECT_EQ(c.sliding_window, std::nullopt);
  EXPECT_EQ(c.max_window_layers, 28);
  EXPECT_EQ(nlohmann::json::parse(c.raw)["transformers_version"], "5.17.0");
}

TEST(ModelConfigTest, LlamaFixture) {
  const ModelConfig c = load_model_config(kFixtures / "llama" / "config.json");
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(std::tie(c.vocab_size, c.hidden_size, c.intermediate_size, c.num_hidden_layers),
            std::make_tuple(1000, 96, 160, 3));
  EXPECT_EQ(std::tie(c.num_attention_heads, c.num_key_value_heads, c.head_dim),
            std::make_tuple(6, 3, 16));
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_theta, 1e4);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_FALSE(c.mlp_bias);
}

TEST(ModelConfigTest, Qwen3InTransformers4Layout) {
  const ModelConfig c = parse_model_config(kQwen3_0_6B, "Qwen3-0.6B/config.json");
  EXPECT_EQ(std::tie(c.hidden_size, c.num_hidden_layers, c.num_attention_heads,
                     c.num_key_value_heads, c.head_dim, c.max_position_embeddings),
            std::make_tuple(1024, 28, 16, 8, 128, 40960));
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.rope_type, "default");
  EXPECT_EQ(c.dtype, bf16);
  EXPECT_EQ(c.bos_token_id, 151643);
  EXPECT_EQ(c.pad_token_id, std::nullopt);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(151645));
  EXPECT_TRUE(c.tie_word_embeddings);
}

TEST(ModelConfigTest, Llama32WithLlama3RopeScaling) {
  const ModelConfig c = parse_model_config(kLlama32_1B, "Llama-3.2-1B-Instruct/config.json");
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.rope_type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(128001, 128008, 128009));
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
}

TEST(ModelConfigTest, Qwen2DerivesHeadDimAndHasQkvBias) {
  const ModelConfig c = parse_model_config(kQwen25_0_5B, "Qwen2.5-0.5B/config.json");
  EXPECT_EQ(c.model_type, "qwen2");
  EXPECT_EQ(c.head_dim, 64);  // 896 / 14
  EXPECT_TRUE(c.attention_bias);
  EXPECT_EQ(c.sliding_window,
            std::nullopt);  // transformers drops it unless use_sliding_window
  EXPECT_EQ(c.max_window_layers, 24);
  EXPECT_THAT(c.eos_token_ids, ElementsAre(151643));
}

// Expected values: LlamaConfig(), Qwen3Config(), Qwen2Config() in transformers 5.24.
TEST(ModelConfigTest, AbsentFieldsTakeTheTransformersDefaults) {
  const ModelConfig llama = parse_model_config({{"architectures", {"LlamaForCausalLM"}}}, "l");
  EXPECT_EQ(std::tie(llama.vocab_size, llama.hidden_size, llama.intermediate_size,
                     llama.num_hidden_layers, llama.num_attention_heads, llama.num_key_value_heads,
                     llama.head_dim, llama.max_position_embeddings),
            std::make_tuple(32000, 4096, 11008, 32, 32, 32, 128, 2048));
  EXPECT_EQ(llama.rms_norm_eps, 1e-6);
  EXPECT_EQ(llama.rope_theta, 10000.0);
  EXPECT_EQ(llama.bos_token_id, 1);
  EXPECT_THAT(llama.eos_token_ids, ElementsAre(2));
  EXPECT_EQ(llama.pad_token_id, std::nullopt);
  EXPECT_FALSE(llama.tie_word_embeddings);
  EXPECT_EQ(llama.hidden_act, "silu");
  EXPECT_EQ(llama.dtype, std::nullopt);

  const ModelConfig qwen3 = parse_model_config({{"model_type", "qwen3"}}, "q");
  EXPECT_EQ(qwen3.architecture, "Qwen3ForCausalLM");
  EXPECT_EQ(std::tie(qwen3.vocab_size, qwen3.intermediate_size, qwen3.head_dim,
                     qwen3.max_position_embeddings, qwen3.max_window_layers),
            std::make_tuple(151936, 22016, 128, 32768, 28));
  EXPECT_EQ(qwen3.bos_token_id, std::nullopt);
  EXPECT_THAT(qwen3.eos_token_ids, IsEmpty());
  EXPECT_FALSE(qwen3.attention_bias);

  const ModelConfig qwen2 = parse_model_config(
      {{"architectures", {"Qwen2ForCausalLM"}}, {"hidden_size", 896}, {"num_attention_heads", 14}},
      "q2");
  EXPECT_EQ(qwen2.head_dim, 64);
  EXPECT_EQ(qwen2.num_key_value_heads, 14);
}

TEST(ModelConfigTest, SlidingWindowOnlyWhenUsed) {
  const ModelConfig c =
      parse_model_config({{"model_type", "qwen3"}, {"use_sliding_window", true}}, "q");
  EXPECT_EQ(c.sliding_window, 4096);  // Qwen3Config's default window
}

// mistralai/Mixtral-8x7B-v0.1's published config.json (transformers 4.36).
TEST(ModelConfigTest, PublishedMixtral) {
  const ModelConfig c = parse_model_config(json::parse(R"({
    "architectures": ["MixtralForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 1,
    "eos_token_id": 2, "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral",
    "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "num_local_experts": 8, "output_router_logits": false,
    "rms_norm_eps": 1e-05, "rope_theta": 1e6, "router_aux_loss_coef": 0.02,
    "sliding_window": null, "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.36.0.dev0", "use_cache": true, "vocab_size": 32000})"),
                                           "mixtral");
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.sliding_window, std::nullopt);
  ASSERT_TRUE(c.moe);
  EXPECT_EQ(std::tie(c.moe->num_experts, c.moe->num_experts_per_tok, c.moe->moe_intermediate_size),
            std::make_tuple(8, 2, 14336));
  EXPECT_TRUE(c.moe->norm_topk_prob);  // MixtralTopKRouter always renormalizes
  EXPECT_FALSE(c.moe->output_router_logits);
  EXPECT_EQ(c.moe->router_aux_loss_coef, 0.02);
}

// Qwen/Qwen3-30B-A3B's published config.json (transformers 4.51).
TEST(ModelConfigTest, PublishedQwen3Moe) {
  const ModelConfig c = parse_model_config(json::parse(R"({
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": 151643, "decoder_sparse_step": 1, "eos_token_id": 151645, "head_dim": 128,
    "hidden_act": "silu", "hidden_size": 2048, "initializer_range": 0.02,
    "intermediate_size": 6144, "max_position_embeddings": 40960, "max_window_layers": 48,
    "mlp_only_layers": [], "model_type": "qwen3_moe", "moe_intermediate_size": 768,
    "norm_topk_prob": true, "num_attention_heads": 32, "num_experts": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4,
    "output_router_logits": false, "rms_norm_eps": 1e-06, "rope_scaling": null,
    "rope_theta": 1000000.0, "router_aux_loss_coef": 0.001, "sliding_window": null,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16", "transformers_version": "4.51.0",
    "use_cache": true, "use_sliding_window": false, "vocab_size": 151936})"),
                                           "qwen3-30b-a3b");
  ASSERT_TRUE(c.moe);
  EXPECT_EQ(std::tie(c.moe->num_experts, c.moe->num_experts_per_tok, c.moe->moe_intermediate_size,
                     c.moe->decoder_sparse_step),
            std::make_tuple(128, 8, 768, 1));
  EXPECT_TRUE(c.moe->norm_topk_prob);
  EXPECT_THAT(c.moe->mlp_only_layers, IsEmpty());
  EXPECT_EQ(c.intermediate_size, 6144);
  const ModelConfig back = parse_model_config(to_json(c), "round trip");
  EXPECT_EQ(back.moe, c.moe);
}

// mistralai/Mistral-7B-v0.1's published config.json (transformers 4.34).
TEST(ModelConfigTest, PublishedMistral) {
  const ModelConfig c = parse_model_config(json::parse(R"({
    "architectures": ["MistralForCausalLM"], "bos_token_id": 1, "eos_token_id": 2,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mistral",
    "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8,
    "rms_norm_eps": 1e-05, "rope_theta": 10000.0, "sliding_window": 4096,
    "tie_word_embeddings": false, "torch_dtype": "bfloat16",
    "transformers_version": "4.34.0.dev0", "use_cache": true, "vocab_size": 32000})"),
                                           "mistral");
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_FALSE(c.moe);
  EXPECT_EQ(parse_model_config(to_json(c), "round trip").sliding_window, 4096);
}

// The values transformers 5.25's MixtralConfig(), Qwen3MoeConfig() and MistralConfig() hold.
TEST(ModelConfigTest, MixtureOfExpertsDefaults) {
  const ModelConfig mixtral = parse_model_config({{"model_type", "mixtral"}}, "m");
  EXPECT_EQ(std::tie(mixtral.num_key_value_heads, mixtral.max_position_embeddings),
            std::make_tuple(8, 131072));
  EXPECT_EQ(mixtral.rms_norm_eps, 1e-5);
  EXPECT_EQ(mixtral.rope_theta, 1e6);
  EXPECT_EQ(mixtral.sliding_window, std::nullopt);
  EXPECT_EQ(std::tie(mixtral.moe->num_experts, mixtral.moe->num_experts_per_tok,
                     mixtral.moe->moe_intermediate_size),
            std::make_tuple(8, 2, 14336));
  EXPECT_EQ(mixtral.moe->router_aux_loss_coef, 0.001);

  const ModelConfig qwen = parse_model_config({{"model_type", "qwen3_moe"}}, "q");
  EXPECT_EQ(std::tie(qwen.num_key_value_heads, qwen.head_dim, qwen.moe->num_experts,
                     qwen.moe->num_experts_per_tok, qwen.moe->moe_intermediate_size),
            std::make_tuple(4, 64, 128, 8, 768));
  EXPECT_FALSE(qwen.moe->norm_topk_prob);
  EXPECT_EQ(qwen.rope_theta, 10000.0);
  // transformers 5 writes Qwen3MoeConfig's num_experts as num_local_experts.
  EXPECT_EQ(parse_model_config({{"model_type", "qwen3_moe"}, {"num_local_experts", 16}}, "q")
                .moe->num_experts,
            16);

  const ModelConfig mistral = parse_model_config({{"model_type", "mistral"}}, "m");
  EXPECT_EQ(mistral.sliding_window, 4096);
  EXPECT_EQ(mistral.num_key_value_heads, 8);
  EXPECT_EQ(mistral.rms_norm_eps, 1e-6);
}

TEST(ModelConfigTest, YarnInTransformers5Layout) {
  const ModelConfig c =
      parse_model_config(json::parse(
                             R"({"model_type": "qwen3", "rope_parameters": {"rope_type": "yarn",
          "factor": 4.0, "original_max_position_embeddings": 32768, "rope_theta": 1000000.0}})"),
                         "q");
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.rope_type, "yarn");
  EXPECT_EQ(c.rope_scaling.factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 32768);
  EXPECT_EQ(c.rope_scaling.beta_fast, 32.0);
  EXPECT_EQ(c.rope_scaling.beta_slow, 1.0);
  EXPECT_EQ(c.rope_scaling.attention_factor, std::nullopt);
  EXPECT_TRUE(c.rope_scaling.truncate);
}

TEST(ModelConfigTest, LegacyTypeKeyAndDefaultOriginalLength) {
  const ModelConfig linear = parse_model_config(
      json::parse(R"({"model_type": "llama", "rope_scaling": {"type": "linear", "factor": 2.0}})"),
      "l");
  EXPECT_EQ(linear.rope_scaling.rope_type, "linear");
  EXPECT_EQ(linear.rope_scaling.factor, 2.0);
  const ModelConfig llama3 =
      parse_model_config(json::parse(R"({"model_type": "llama", "max_position_embeddings": 4096,
                      "rope_scaling": {"rope_type": "llama3", "factor": 8.0}})"),
                         "l");
  EXPECT_EQ(llama3.rope_scaling.original_max_position_embeddings, 4096);
}

TEST(ModelConfigTest, ToJsonRoundTripsInTheSameLayout) {
  for (const json& raw : {kQwen3_0_6B, kLlama32_1B, kQwen25_0_5B}) {
    const ModelConfig c = parse_model_config(raw, "raw");
    const json written = to_json(c);
    expect_same_fields(parse_model_config(written, "written"), c);
    EXPECT_TRUE(written.contains("torch_dtype"));
    EXPECT_FALSE(written.contains("dtype"));
    EXPECT_TRUE(written.contains("rope_theta"));
    EXPECT_FALSE(written.contains("rope_parameters"));
    EXPECT_EQ(written["use_cache"], true);  // fields tfm does not type are kept
  }
  const ModelConfig fixture = load_model_config(kFixtures / "qwen3" / "config.json");
  const json written = to_json(fixture);
  expect_same_fields(parse_model_config(written, "written"), fixture);
  EXPECT_EQ(written["rope_parameters"], nlohmann::json::parse(fixture.raw)["rope_parameters"]);
  EXPECT_EQ(written["dtype"], "float32");
  ModelConfig changed = fixture;
  changed.rope_theta = 5e5;
  changed.eos_token_ids = {2, 3};
  EXPECT_EQ(to_json(changed)["rope_parameters"]["rope_theta"], 5e5);
  EXPECT_EQ(to_json(changed)["eos_token_id"], json::array({2, 3}));
}

void expect_config_error(const json& config, const std::string& problem) {
  EXPECT_THAT([&] { parse_model_config(config, "/models/x/config.json"); },
              ThrowsMessage<Error>(AllOf(HasSubstr("/models/x/config.json"), HasSubstr(problem))))
      << config.dump();
}

TEST(ModelConfigTest, UnknownArchitectureListsTheSupportedOnes) {
  expect_config_error({{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"}},
                      "unsupported architecture 'GPT2LMHeadModel' (supported: "
                      "Qwen3ForCausalLM, LlamaForCausalLM, Qwen2ForCausalLM, MistralForCausalLM, "
                      "MixtralForCausalLM, Qwen3MoeForCausalLM)");
  expect_config_error({{"model_type", "gemma"}}, "unsupported architecture 'gemma'");
  expect_config_error({{"architectures", {"Qwen3ForCausalLM"}}, {"model_type", "llama"}},
                      "has model_type 'qwen3', but the config says 'llama'");
}

TEST(ModelConfigTest, MissingOrWrongTypedFields) {
  expect_config_error(json::object(), "has neither 'architectures' nor 'model_type'");
  expect_config_error(json::array(), "is not a JSON object");
  expect_config_error({{"architectures", json::array()}},
                      "'architectures' must be a non-empty list");
  expect_config_error({{"model_type", "qwen3"}, {"hidden_size", "64"}},
                      "'hidden_size' must be an integer, got \"64\"");
  expect_config_error({{"model_type", "qwen3"}, {"rms_norm_eps", "small"}},
                      "'rms_norm_eps' must be a number");
  expect_config_error({{"model_type", "qwen3"}, {"tie_word_embeddings", 1}},
                      "'tie_word_embeddings' must be true or false");
  expect_config_error({{"model_type", "qwen3"}, {"eos_token_id", "2"}},
                      "'eos_token_id' must be an integer or a list of integers");
  expect_config_error({{"model_type", "qwen3"}, {"num_hidden_layers", 0}},
                      "'num_hidden_layers' must be positive");
  expect_config_error(
      {{"model_type", "qwen3"}, {"num_attention_heads", 6}, {"num_key_value_heads", 4}},
      "num_attention_heads (6) is not a multiple of num_key_value_heads (4)");
  expect_config_error({{"model_type", "qwen3"}, {"torch_dtype", "float64"}},
                      "'torch_dtype': unsupported dtype 'float64'");
  expect_config_error({{"model_type", "qwen3"}, {"rope_scaling", {{"rope_type", "bogus"}}}},
                      "'rope_scaling': unsupported rope_type 'bogus'");
  expect_config_error({{"model_type", "qwen3"}, {"rope_parameters", 3}},
                      "'rope_parameters': is not a JSON object");
  expect_config_error({{"model_type", "qwen3"}, {"rope_parameters", {{"factor", "2"}}}},
                      "'factor' must be a number");
  // A field read is honoured or refused: SiLU is the only activation the MLPs apply.
  expect_config_error({{"model_type", "llama"}, {"hidden_act", "gelu"}},
                      "'hidden_act': activation 'gelu' is not supported");
  expect_config_error({{"model_type", "qwen3"}, {"hidden_act", "no_such_act"}},
                      "'hidden_act': activation 'no_such_act' is not supported");
}

TEST(ModelConfigTest, LoadNamesTheFile) {
  testing_io::TempDir dir;
  testing_io::write_file(dir / "config.json", "{\"model_type\": ");
  EXPECT_THAT([&] { load_model_config(dir / "config.json"); },
              ThrowsMessage<Error>(AllOf(HasSubstr((dir / "config.json").string()),
                                         HasSubstr("is not valid JSON"))));
  EXPECT_THAT([&] { load_model_config(dir / "absent.json"); },
              ThrowsMessage<Error>(HasSubstr("absent.json' cannot be opened")));
}

// JSON nested without bound (here in a field tfm does not read) is refused as malformed, naming the
// file and the bound, before anything walks it; nesting within the bound loads.
TEST(ModelConfigTest, DeepNestingIsRefused) {
  testing_io::TempDir dir;
  const auto config_with = [](int levels) {
    return R"({"model_type": "qwen3", "extra": )" + std::string(levels, '[') +
           std::string(levels, ']') + "}";
  };
  testing_io::write_file(dir / "config.json", config_with(100000));
  EXPECT_THAT([&] { load_model_config(dir / "config.json"); },
              ThrowsMessage<Error>(AllOf(HasSubstr((dir / "config.json").string()),
                                         HasSubstr("nested deeper than 1000 levels"))));
  testing_io::write_file(dir / "config.json", config_with(50));
  EXPECT_EQ(load_model_config(dir / "config.json").model_type, "qwen3");
}

TEST(ModelConfigTest, MixtureOfExpertsFieldsRefusedWhereTheyCannotHold) {
  expect_config_error({{"model_type", "mixtral"}, {"num_experts_per_tok", 9}},
                      "'num_experts_per_tok' (9) is more than the 8 experts");
  expect_config_error({{"model_type", "qwen3_moe"}, {"num_experts", 0}},
                      "'num_experts' must be positive");
  expect_config_error({{"model_type", "mixtral"}, {"router_jitter_noise", -1}},
                      "'router_jitter_noise' must not be negative");
  expect_config_error({{"model_type", "mistral"}, {"sliding_window", 0}},
                      "'sliding_window' must be positive or null");
}

}  // namespace
}  // namespace tfm
