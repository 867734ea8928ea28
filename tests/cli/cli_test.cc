// The `tfm` binary ($TFM_BIN, set by CTest) against transformers' outputs in the fixtures and the
// tokenizers library's goldens, run as a user would; bad input must fail with a clear message.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "support/fixtures.h"
#include "support/run_binary.h"

namespace tfm {
namespace {

namespace fs = std::filesystem;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr const char* kNoBinary = "TFM_BIN is not set to the tfm binary (run the tests via ctest)";

using testing::Run;

std::optional<Run> run_tfm(const std::vector<std::string>& args) {
  return testing::run_binary("tfm", args);
}

std::string fixture(const std::string& name) { return testing::fixture_dir(name); }

std::string id_list(const nlohmann::json& ids) {
  std::string text;
  for (const auto& id : ids) text += (text.empty() ? "" : ",") + std::to_string(id.get<int64_t>());
  return text;
}

TEST(CliCommandsTest, LogitsAllMatchTransformers) {
  const nlohmann::json& ref = testing::reference("qwen3");
  const auto run = run_tfm({"logits", fixture("qwen3"), "--ids", id_list(ref["input_ids"][0]),
                            "--all", "--device", "cpu"});
  if (!run) GTEST_SKIP() << kNoBinary;
  ASSERT_EQ(run->status, 0) << run->err;
  const nlohmann::json got = nlohmann::json::parse(run->out);
  const nlohmann::json& want = ref["logits"][0];
  ASSERT_EQ(got["logits"].size(), want.size());
  double max_abs = 0;
  for (size_t s = 0; s < want.size(); ++s) {
    ASSERT_EQ(got["logits"][s].size(), want[s].size()) << "position " << s;
    for (size_t v = 0; v < want[s].size(); ++v) {
      max_abs = std::max(max_abs,
                         std::fabs(got["logits"][s][v].get<double>() - want[s][v].get<double>()));
    }
  }
  EXPECT_LT(max_abs, 1e-4) << "largest absolute logit difference";
  // The loss printed is the causal-LM cross-entropy (labels = ids, shifted), computed here in
  // double precision from transformers' own logits.
  double loss = 0;
  const nlohmann::json& ids = ref["input_ids"][0];
  for (size_t s = 0; s + 1 < want.size(); ++s) {
    double max = -1e300, sum = 0;
    for (const auto& v : want[s]) max = std::max(max, v.get<double>());
    for (const auto& v : want[s]) sum += std::exp(v.get<double>() - max);
    loss += std::log(sum) + max - want[s][ids[s + 1].get<size_t>()].get<double>();
  }
  loss /= static_cast<double>(want.size() - 1);
  EXPECT_NEAR(got["loss"].get<double>(), loss, 1e-5 * loss);
}

// Row 0 of the padded batch is a whole prompt, so one unpadded prompt must give transformers'
// greedy continuation of that row.
TEST(CliCommandsTest, GenerateIdsMatchTransformersGreedy) {
  for (const std::string arch : {"qwen3", "llama"}) {
    SCOPED_TRACE(arch);
    const nlohmann::json& ref = testing::reference(arch);
    for (const auto& m : ref["padded_attention_mask"][0]) ASSERT_EQ(m, 1) << "row 0 is padded";
    const nlohmann::json& want = ref["greedy_16"][0];
    // transformers ran with eos_token_id=None; the CLI stops at the config's EOS (2).
    for (const auto& id : want) ASSERT_NE(id, 2) << "the reference row contains EOS";
    const auto run =
        run_tfm({"generate", fixture(arch), "--ids", id_list(ref["padded_input_ids"][0]),
                 "--print-ids", "--max-new-tokens", "16", "--device", "cpu", "--quiet"});
    if (!run) GTEST_SKIP() << kNoBinary;
    ASSERT_EQ(run->status, 0) << run->err;
    EXPECT_EQ(nlohmann::json::parse(run->out), want) << run->out;
  }
}

const nlohmann::json& tokenizer_goldens() {
  static const nlohmann::json goldens = nlohmann::json::parse(
      std::ifstream(fs::path(TFM_TEST_DATA_DIR) / "fixtures" / "qwen3-tokenizer-golden.json"));
  return goldens;
}

const std::string kTokenizer = std::string(TFM_DATA_DIR) + "/qwen3-tokenizer";

// The goldens used add_special_tokens=False; --no-special-tokens asks for the same.
TEST(CliCommandsTest, TokenizePrintsGoldenIds) {
  for (const auto& golden : tokenizer_goldens()) {
    const std::string text = golden["text"];
    SCOPED_TRACE(text);
    const auto run = run_tfm({"tokenize", kTokenizer, text, "--no-special-tokens"});
    if (!run) GTEST_SKIP() << kNoBinary;
    ASSERT_EQ(run->status, 0) << run->err;
    EXPECT_EQ(nlohmann::json::parse(run->out), golden["ids"]);
  }
}

TEST(CliCommandsTest, DecodePrintsGoldenText) {
  for (const auto& golden : tokenizer_goldens()) {
    SCOPED_TRACE(golden["text"].get<std::string>());
    const auto run = run_tfm({"tokenize", kTokenizer, "--decode", id_list(golden["ids"])});
    if (!run) GTEST_SKIP() << kNoBinary;
    ASSERT_EQ(run->status, 0) << run->err;
    // The command ends the text with one newline of its own.
    EXPECT_EQ(run->out, golden["decoded"].get<std::string>() + "\n");
  }
}

TEST(CliCommandsTest, MissingModelFolderIsNamed) {
  const std::string missing = (fs::temp_directory_path() / "tfm-no-such-model-folder").string();
  const auto run = run_tfm({"logits", missing, "--ids", "1,2,3"});
  if (!run) GTEST_SKIP() << kNoBinary;
  EXPECT_NE(run->status, 0);
  EXPECT_THAT(run->err, AllOf(HasSubstr("error"), HasSubstr("tfm-no-such-model-folder")));
  EXPECT_EQ(run->out, "");
}

// The fixture's two rows as a pre-tokenized JSONL, packed into blocks of 12: the first logged
// loss is the loss before any update, transformers' train_loss0.
TEST(CliCommandsTest, TrainLogsTransformersFirstLossAndSavesTheModel) {
  const nlohmann::json& ref = testing::reference("qwen3");
  const fs::path dir = fs::temp_directory_path() / "tfm-cli-train";
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "rows.jsonl")
      << nlohmann::json{{"input_ids", ref["input_ids"][0]}}.dump() << "\n"
      << nlohmann::json{{"input_ids", ref["input_ids"][1]}}.dump() << "\n";
  const auto run = run_tfm({"train",
                            "--model",
                            fixture("qwen3"),
                            "--data",
                            (dir / "rows.jsonl").string(),
                            "--max_length",
                            "12",
                            "--per_device_train_batch_size",
                            "2",
                            "--max_steps",
                            "2",
                            "--logging_steps",
                            "1",
                            "--learning_rate",
                            "1e-2",
                            "--save_steps",
                            "0",
                            "--output_dir",
                            (dir / "out").string(),
                            "--device",
                            "cpu"});
  if (!run) GTEST_SKIP() << kNoBinary;
  ASSERT_EQ(run->status, 0) << run->err;
  std::ifstream logs(dir / "out" / "logs.jsonl");
  std::string first;
  ASSERT_TRUE(std::getline(logs, first));
  const double expected = ref["train_loss0"].get<double>();
  EXPECT_NEAR(nlohmann::json::parse(first)["loss"].get<double>(), expected, 1e-5 * expected);
  EXPECT_TRUE(fs::exists(dir / "out" / "model.safetensors"));
  EXPECT_TRUE(fs::exists(dir / "out" / "config.json"));
  fs::remove_all(dir);
}

TEST(CliCommandsTest, TrainNamesABadDataFile) {
  const auto run = run_tfm(
      {"train", "--model", fixture("qwen3"), "--data", "/nonexistent/x.jsonl", "--device", "cpu"});
  if (!run) GTEST_SKIP() << kNoBinary;
  EXPECT_NE(run->status, 0);
  EXPECT_THAT(run->err, HasSubstr("/nonexistent/x.jsonl"));
}

// A prompt is text or ids: given both, generate says so rather than dropping one; a sampling
// setting transformers refuses stops the command with transformers' message.
TEST(CliCommandsTest, GenerateRefusesAmbiguousOrInvalidSettings) {
  const auto both = run_tfm({"generate", fixture("qwen3"), "Hello", "--ids", "5,6,7"});
  if (!both) GTEST_SKIP() << kNoBinary;
  EXPECT_EQ(both->status, 1) << both->err;
  EXPECT_THAT(both->err, AllOf(HasSubstr("PROMPT or --ids, not both"), HasSubstr("Hello")));
  const auto sampling = run_tfm(
      {"generate", fixture("qwen3"), "--ids", "5,6,7", "--do-sample", "--temperature", "nan"});
  EXPECT_EQ(sampling->status, 1) << sampling->err;
  EXPECT_THAT(sampling->err, HasSubstr("`temperature` (=nan) has to be a strictly positive float"));
}

// Chat messages nested without bound are refused as malformed JSON (a crash once: the error
// serialized them recursively).
TEST(CliCommandsTest, DeeplyNestedChatIsRefused) {
  const std::string nested = std::string(60000, '[') + std::string(60000, ']');
  const auto run = run_tfm({"tokenize", kTokenizer, "--chat", nested});
  if (!run) GTEST_SKIP() << kNoBinary;
  EXPECT_EQ(run->status, 1) << run->err;
  EXPECT_THAT(run->err, AllOf(HasSubstr("--chat"), HasSubstr("nested deeper than 1000 levels")));
  const auto empty = run_tfm({"tokenize", kTokenizer, "--chat", "[]"});
  EXPECT_EQ(empty->status, 1) << empty->err;
  EXPECT_THAT(empty->err, HasSubstr("--chat: expected a JSON array of one or more messages"));
}

// Counts and ids given wrong are named with the rule they break, never a crash or CLI11's
// 300-digit range; a generate without a tokenizer given --ids "" names the ids.
TEST(CliCommandsTest, BadCountsAndIdsAreNamed) {
  const auto tp = run_tfm({"generate", fixture("qwen3"), "--ids", "5,6", "--tp-size", "0"});
  if (!tp) GTEST_SKIP() << kNoBinary;
  EXPECT_NE(tp->status, 0);
  EXPECT_THAT(tp->err, HasSubstr("--tp-size: must be 1 or more, got 0"));
  const auto ids = run_tfm({"generate", fixture("qwen3"), "--ids", ""});
  EXPECT_EQ(ids->status, 1);
  EXPECT_THAT(ids->err, HasSubstr("ids '': expected comma-separated non-negative integers"));
  const auto huge =
      run_tfm({"generate", fixture("qwen3"), "--ids", "5,6", "--max-new-tokens", "2000000000"});
  EXPECT_EQ(huge->status, 1);
  EXPECT_THAT(huge->err,
              AllOf(HasSubstr("max_new_tokens 2000000000"), HasSubstr("more than this machine's")));
}

TEST(CliCommandsTest, TrainRefusesAValidationSplitOutsideZeroToOne) {
  for (const std::string split : {"-0.2", "1"}) {
    const auto run = run_tfm({"train", "--model", fixture("qwen3"), "--data", "/nonexistent.jsonl",
                              "--validation_split", split});
    if (!run) GTEST_SKIP() << kNoBinary;
    EXPECT_NE(run->status, 0);
    EXPECT_THAT(run->err, HasSubstr("--validation_split: must be in [0, 1), got " + split));
  }
}

TEST(CliCommandsTest, UnknownDeviceIsNamed) {
  for (const std::string command : {"logits", "generate"}) {
    SCOPED_TRACE(command);
    const auto run = run_tfm({command, fixture("qwen3"), "--ids", "5,6,7", "--device", "tpu"});
    if (!run) GTEST_SKIP() << kNoBinary;
    EXPECT_NE(run->status, 0);
    EXPECT_THAT(run->err, AllOf(HasSubstr("unknown device"), HasSubstr("tpu")));
  }
}

TEST(CliCommandsTest, CudaWithoutGpuFails) {
  const auto devices = run_tfm({"devices"});
  if (!devices) GTEST_SKIP() << kNoBinary;
  if (devices->out.find("cuda") != std::string::npos) GTEST_SKIP() << "a CUDA device is present";
  const auto run = run_tfm({"logits", fixture("qwen3"), "--ids", "5,6,7", "--device", "cuda"});
  EXPECT_NE(run->status, 0);
  EXPECT_THAT(run->err, AllOf(HasSubstr("cuda"), HasSubstr("no CUDA device")));
  EXPECT_THAT(run->out, Not(HasSubstr("logits")));
}

}  // namespace
}  // namespace tfm
