// Request bodies checked as OpenAI's API checks them: each bad field is a 400 naming it; the
// defaults are OpenAI's (temperature 1, top_p 1, n 1).
#include "serving/openai_request.h"

#include <gtest/gtest.h>

namespace tfm::serving {
namespace {

void expect_bad(const std::string& body, bool chat, const std::string& param) {
  try {
    parse_completion_request(body, chat);
    ADD_FAILURE() << "accepted " << body;
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_EQ(e.param, param) << body << ": " << e.what();
  }
}

TEST(OpenAiRequest, DefaultsAreOpenAis) {
  const CompletionRequest r =
      parse_completion_request(R"({"messages": [{"role": "user", "content": "hi"}]})", true);
  EXPECT_EQ(r.messages.size(), 1u);
  EXPECT_EQ(r.messages[0].content, "hi");
  EXPECT_EQ(r.n, 1);
  EXPECT_FALSE(r.stream);
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.sampling.temperature, 1.0f);
  EXPECT_EQ(r.sampling.top_p, 1.0f);
  EXPECT_FALSE(r.sampling.greedy());
}

TEST(OpenAiRequest, ReadsEveryField) {
  const CompletionRequest r = parse_completion_request(
      R"({"model": "m", "prompt": ["Once"], "max_tokens": 7, "n": 3, "stream": true,
          "stream_options": {"include_usage": true}, "stop": ["a", "b"], "temperature": 0,
          "top_p": 0.5, "top_k": -1, "seed": 4, "presence_penalty": 1.5,
          "frequency_penalty": -0.5, "repetition_penalty": 1.2, "logprobs": 2,
          "ignore_eos": true})",
      false);
  EXPECT_EQ(r.model, "m");
  ASSERT_EQ(r.prompts.size(), 1u);
  EXPECT_EQ(r.prompts[0].text, "Once");
  EXPECT_EQ(r.max_tokens, 7);
  EXPECT_EQ(r.n, 3);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "b"}));
  EXPECT_TRUE(r.sampling.greedy());
  EXPECT_EQ(r.sampling.top_k, 0);
  EXPECT_EQ(r.sampling.seed, 4u);
  EXPECT_EQ(r.sampling.presence_penalty, 1.5f);
  EXPECT_EQ(r.sampling.frequency_penalty, -0.5f);
  EXPECT_EQ(r.sampling.repetition_penalty, 1.2f);
  EXPECT_TRUE(r.sampling.logprobs);
  EXPECT_EQ(r.sampling.top_logprobs, 2);
  EXPECT_TRUE(r.ignore_eos);
}

TEST(OpenAiRequest, ChatTemplateKwargsTakeEnableThinking) {
  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  EXPECT_TRUE(parse_completion_request("{" + user + "}", true).enable_thinking);
  EXPECT_FALSE(parse_completion_request(
                   "{" + user + R"(, "chat_template_kwargs": {"enable_thinking": false}})", true)
                   .enable_thinking);
  expect_bad("{" + user + R"(, "chat_template_kwargs": {"tools": []}})", true,
             "chat_template_kwargs");
  expect_bad("{" + user + R"(, "chat_template_kwargs": {"enable_thinking": 0}})", true,
             "enable_thinking");
}

TEST(OpenAiRequest, TokenIdsAsThePrompt) {
  EXPECT_EQ(parse_completion_request(R"({"prompt": [5, 6]})", false).prompts.at(0).ids,
            (std::vector<int64_t>{5, 6}));
}

TEST(OpenAiRequest, SeveralPromptsInOpenAisForms) {
  const CompletionRequest texts = parse_completion_request(R"({"prompt": ["a", "bc"]})", false);
  ASSERT_EQ(texts.prompts.size(), 2u);
  EXPECT_EQ(texts.prompts[1].text, "bc");
  const CompletionRequest ids = parse_completion_request(R"({"prompt": [[1], [2, 3]]})", false);
  ASSERT_EQ(ids.prompts.size(), 2u);
  EXPECT_EQ(ids.prompts[1].ids, (std::vector<int64_t>{2, 3}));
  expect_bad(R"({"prompt": ["a", 3]})", false, "prompt");
  expect_bad(R"({"prompt": ["a", ""]})", false, "prompt");
  expect_bad(R"({"prompt": ["a", "b", "c"], "n": 50})", false, "prompt");
}

TEST(OpenAiRequest, MaxCompletionTokensIsMaxTokens) {
  EXPECT_EQ(
      parse_completion_request(
          R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 9})", true)
          .max_tokens,
      9);
}

TEST(OpenAiRequest, BadFieldsAreNamed) {
  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  expect_bad("{" + user + R"(, "temperature": "hot"})", true, "temperature");
  expect_bad("{" + user + R"(, "temperature": 2.5})", true, "temperature");
  expect_bad("{" + user + R"(, "top_p": 0})", true, "top_p");
  expect_bad("{" + user + R"(, "n": 0})", true, "n");
  expect_bad("{" + user + R"(, "max_tokens": 0})", true, "max_tokens");
  expect_bad("{" + user + R"(, "max_tokens": 1.5})", true, "max_tokens");
  expect_bad("{" + user + R"(, "stop": ["a", "b", "c", "d", "e"]})", true, "stop");
  expect_bad("{" + user + R"(, "stop": 3})", true, "stop");
  expect_bad("{" + user + R"(, "presence_penalty": 3})", true, "presence_penalty");
  expect_bad("{" + user + R"(, "stream_options": {"include_usage": true}})", true,
             "stream_options");
  expect_bad("{" + user + R"(, "top_logprobs": 2})", true, "top_logprobs");
  expect_bad("{" + user + R"(, "logprobs": true, "top_logprobs": 21})", true, "top_logprobs");
  expect_bad("{" + user + R"(, "model": 3})", true, "model");
  expect_bad(R"({"messages": []})", true, "messages");
  expect_bad(R"({"messages": "hi"})", true, "messages");
  expect_bad(R"({})", true, "messages");
  expect_bad(R"({"messages": [{"role": "king", "content": "x"}]})", true, "messages[0].role");
  expect_bad(R"({"messages": [{"role": "user", "content": 5}]})", true, "messages[0].content");
  expect_bad(R"({"prompt": ""})", false, "prompt");
  expect_bad(R"({"prompt": [-1]})", false, "prompt");
  expect_bad(R"({"prompt": "x", "logprobs": 6})", false, "logprobs");
}

TEST(OpenAiRequest, MalformedJsonIsABadRequest) {
  for (const char* body : {"{", "[1, 2]", "", "null"}) {
    try {
      parse_completion_request(body, true);
      ADD_FAILURE() << "accepted " << body;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
    }
  }
}

}  // namespace
}  // namespace tfm::serving
