// Malformed tokenizer.json files and invalid input fail with errors that name the file and the
// problem.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tfm/error.h"
#include "tfm/tokenizer.h"

namespace tfm {
namespace {

namespace fs = std::filesystem;

const std::string kGpt2 = std::string(TFM_TEST_DATA_DIR) + "/tokenizers/gpt2-style/tokenizer.json";

nlohmann::json gpt2_spec() {
  std::ifstream in(kGpt2);
  return nlohmann::json::parse(in);
}

// Writes `text` as a tokenizer.json in a fresh folder and returns the error message of loading it.
std::string load_error(const std::string& text) {
  const fs::path dir =
      fs::temp_directory_path() / ("tfm_tok_" + std::to_string(std::hash<std::string>{}(text)));
  fs::create_directories(dir);
  const fs::path path = dir / "tokenizer.json";
  std::ofstream(path) << text;
  try {
    Tokenizer::from_files(path.string());
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_THAT(message, testing::HasSubstr(path.string()));
    return message;
  }
  ADD_FAILURE() << "loading did not fail";
  return "";
}

TEST(TokenizerErrors, MissingModel) {
  auto spec = gpt2_spec();
  spec.erase("model");
  EXPECT_THAT(load_error(spec.dump()), testing::HasSubstr("no \"model\""));
}

TEST(TokenizerErrors, UnknownModelType) {
  auto spec = gpt2_spec();
  spec["model"]["type"] = "WordPiece";
  EXPECT_THAT(load_error(spec.dump()),
              testing::HasSubstr("model type 'WordPiece' is not supported (supported: BPE)"));
}

TEST(TokenizerErrors, UnknownComponentType) {
  auto spec = gpt2_spec();
  spec["pre_tokenizer"] = {{"type", "Frobnicate"}};
  EXPECT_THAT(load_error(spec.dump()), testing::HasSubstr("pre_tokenizer type 'Frobnicate'"));
}

// Fields of the wrong type or out of range, as the tokenizers library refuses them (a fuzzer found
// the first: nlohmann's own exception escaped, naming neither file nor field).
TEST(TokenizerErrors, FieldsOfTheWrongTypeAreNamed) {
  auto spec = gpt2_spec();
  spec["normalizer"] = {{"type", "Strip"}, {"strip_left", "yes"}};
  EXPECT_THAT(load_error(spec.dump()),
              testing::HasSubstr("\"strip_left\" must be true or false, got \"yes\""));
  spec = gpt2_spec();
  spec["decoder"] = {{"type", "Strip"}, {"content", " "}, {"start", 1.5}, {"stop", 0}};
  EXPECT_THAT(load_error(spec.dump()), testing::HasSubstr("\"start\" must be an integer, got 1.5"));
  spec = gpt2_spec();
  spec["model"]["byte_fallback"] = 1;
  EXPECT_THAT(load_error(spec.dump()),
              testing::HasSubstr("\"byte_fallback\" must be true or false"));
  spec = gpt2_spec();
  spec["added_tokens"] = {{{"id", int64_t{1} << 40}, {"content", "<x>"}}};
  EXPECT_THAT(
      load_error(spec.dump()),
      testing::HasSubstr("added_tokens id must be a token id (an integer from 0 to 2^31 - 1), "
                         "got 1099511627776"));
  spec = gpt2_spec();
  spec["model"]["vocab"]["zz-new"] = int64_t{1} << 33;
  EXPECT_THAT(load_error(spec.dump()),
              testing::HasSubstr("model.vocab['zz-new'] is not an integer id below 2^24"));
  spec = gpt2_spec();
  spec["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", "false"}};
  EXPECT_THAT(load_error(spec.dump()),
              testing::HasSubstr("\"add_prefix_space\" must be true or false"));
}

TEST(TokenizerErrors, MergeOfUnknownToken) {
  auto spec = gpt2_spec();
  spec["model"]["merges"].push_back({"zzzq", "qqqz"});
  EXPECT_THAT(load_error(spec.dump()), testing::HasSubstr("missing from model.vocab: 'zzzq'"));
}

TEST(TokenizerErrors, MalformedMerge) {
  auto spec = gpt2_spec();
  spec["model"]["merges"] = {"a b c"};
  EXPECT_THAT(load_error(spec.dump()), testing::HasSubstr("model.merges[0]"));
}

TEST(TokenizerErrors, InvalidJson) {
  EXPECT_THAT(load_error("{\"model\": "), testing::HasSubstr("invalid JSON"));
}

// A section nested past the bound (io/json_depth.h), and a file nested far past it: refused as
// malformed JSON, naming the file, never a crash.
TEST(TokenizerErrors, DeepNesting) {
  const std::string text = gpt2_spec().dump();
  const auto with_normalizer = [&](int levels) {
    return text.substr(0, text.size() - 1) + R"(, "normalizer": )" + std::string(levels, '[') +
           std::string(levels, ']') + "}";
  };
  EXPECT_THAT(load_error(with_normalizer(1010)),
              testing::AllOf(testing::HasSubstr("tokenizer.json"),
                             testing::HasSubstr("nested deeper than 1000 levels")));
  EXPECT_THAT(load_error(with_normalizer(100000)), testing::HasSubstr("tokenizer.json"));
}

TEST(TokenizerErrors, BadRegex) {
  auto spec = gpt2_spec();
  spec["pre_tokenizer"] = {
      {"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  EXPECT_THAT(load_error(spec.dump()), testing::HasSubstr("does not compile"));
}

TEST(TokenizerErrors, MissingFile) {
  EXPECT_THROW(AutoTokenizer::from_pretrained("/nonexistent/folder/for/tfm"), Error);
}

TEST(TokenizerErrors, InvalidUtf8Input) {
  const Tokenizer tokenizer = Tokenizer::from_files(kGpt2);
  try {
    tokenizer.encode("ok \xC3\x28 bad");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), testing::HasSubstr("not valid UTF-8 at byte 3"));
  }
}

}  // namespace
}  // namespace tfm
