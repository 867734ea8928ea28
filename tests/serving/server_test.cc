// The server before its engine is ready: /health answers and says the graphs are compiling (503,
// as TGI and vLLM answer while loading), and completions get OpenAI's 503 error, not a hang.
#include "serving/server.h"

#include <gtest/gtest.h>
#include <httplib.h>

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

}  // namespace
}  // namespace tfm::serving
