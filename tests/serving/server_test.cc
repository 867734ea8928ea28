// The server before its engine is ready: /health answers and says the graphs are compiling (503,
// as TGI and vLLM answer while loading), and completions get OpenAI's 503 error, not a hang.
#include "serving/server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "api/causal_lm_access.h"
#include "support/fixtures.h"
#include "tfm/log.h"
#include "tfm/model.h"

namespace tfm::serving {
namespace {

// The qwen3 fixture's engine (not started) and a tokenizer.
class ServerTest : public ::testing::Test {
 protected:
  ServerTest()
      : model_(AutoModelForCausalLM::from_pretrained(testing::fixture_dir("qwen3"),
                                                     {.dtype = DType::f32, .device_map = "cpu"})),
        tokenizer_(AutoTokenizer::from_pretrained(std::string(TFM_DATA_DIR) + "/qwen3-tokenizer")),
        engine_(CausalLMAccess::impl(model_), {.max_num_seqs = 1, .max_model_len = 64}) {}
  static void SetUpTestSuite() { set_log_level(LogLevel::kWarn); }

  CausalLM model_;
  Tokenizer tokenizer_;
  Engine engine_;
};

TEST_F(ServerTest, AnswersWhileCompiling) {
  Engine& engine = engine_;
  const Tokenizer& tokenizer = tokenizer_;
  Server server(engine, tokenizer, {.port = 0, .served_model_name = "m"}, {});
  const int port = server.bind();
  std::thread listening([&] { server.listen(); });
  httplib::Client client("127.0.0.1", port);
  const auto health = client.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 503);
  EXPECT_EQ(nlohmann::json::parse(health->body)["status"], "compiling");
  const auto completion =
      client.Post("/v1/completions", R"({"prompt": [1, 2], "max_tokens": 2})", "application/json");
  ASSERT_TRUE(completion);
  EXPECT_EQ(completion->status, 503);
  EXPECT_EQ(nlohmann::json::parse(completion->body)["error"]["code"], 503);
  engine.start();
  EXPECT_EQ(client.Get("/health")->status, 200);
  const auto ready =
      client.Post("/v1/completions", R"({"prompt": [1, 2], "max_tokens": 2})", "application/json");
  ASSERT_TRUE(ready);
  EXPECT_EQ(ready->status, 200) << ready->body;
  server.stop();
  listening.join();
}

TEST_F(ServerTest, ABusyPortIsNamed) {
  Engine& engine = engine_;
  const Tokenizer& tokenizer = tokenizer_;
  Server first(engine, tokenizer, {.port = 0}, {});
  const int port = first.bind();
  Server second(engine, tokenizer, {.port = port}, {});
  try {
    second.bind();
    FAIL() << "bound a port in use";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(port)), std::string::npos)
        << e.what();
  }
}

// Qwen3's chat template with and without thinking: the prompt's token count is transformers' (the
// tokenizer's chat goldens, apply_chat_template tokenized), through a model of Qwen3's vocabulary.
TEST(ServerChat, EnableThinkingReachesTheTemplate) {
  set_log_level(LogLevel::kWarn);
  const std::filesystem::path config =
      std::filesystem::temp_directory_path() / "tfm_server_chat_config.json";
  std::ofstream(config) << R"({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
      "vocab_size": 151936, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
      "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 8,
      "max_position_embeddings": 64, "eos_token_id": 151645, "tie_word_embeddings": true})";
  CausalLM model = AutoModelForCausalLM::from_config(config.string(), {.device_map = "cpu"});
  const Tokenizer tokenizer =
      AutoTokenizer::from_pretrained(std::string(TFM_DATA_DIR) + "/qwen3-tokenizer");
  Engine engine(CausalLMAccess::impl(model), {.max_num_seqs = 1, .max_model_len = 64});
  engine.start();
  Server server(engine, tokenizer, {.port = 0}, {});
  const int port = server.bind();
  std::thread listening([&] { server.listen(); });
  httplib::Client client("127.0.0.1", port);
  std::map<bool, int64_t> want;  // transformers' ids for each enable_thinking
  std::ifstream golden(std::string(TFM_TEST_DATA_DIR) + "/tokenizers/qwen3/chat-golden.json");
  for (const nlohmann::json& c : nlohmann::json::parse(golden)) {
    if (c["add_generation_prompt"] && c["messages"].size() == 1 &&
        c["messages"][0]["content"] == "What is 2+2?") {
      want[c["enable_thinking"].get<bool>()] = static_cast<int64_t>(c["ids"].size());
    }
  }
  ASSERT_EQ(want.size(), 2u);
  for (const bool thinking : {true, false}) {
    const nlohmann::json body = {{"messages", {{{"role", "user"}, {"content", "What is 2+2?"}}}},
                                 {"max_tokens", 1},
                                 {"chat_template_kwargs", {{"enable_thinking", thinking}}}};
    const auto res = client.Post("/v1/chat/completions", body.dump(), "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    EXPECT_EQ(nlohmann::json::parse(res->body)["usage"]["prompt_tokens"], want[thinking])
        << "enable_thinking " << thinking;
  }
  server.stop();
  listening.join();
}

}  // namespace
}  // namespace tfm::serving
