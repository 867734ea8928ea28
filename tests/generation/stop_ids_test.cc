// Which ids end a row: transformers' generate() takes generation_config.json's eos_token_id over
// config.json's. The expected rows are transformers' greedy ids (the fixture's greedy_16), each
// cut after its first id from the list that wins.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "support/fixtures.h"
#include "tfm/error.h"
#include "tfm/log.h"
#include "tfm/model.h"

namespace tfm {
namespace {

namespace fs = std::filesystem;

// The qwen3 fixture with config.json's eos_token_id and, when given, a generation_config.json.
std::string fixture_with_eos(const std::string& name, const nlohmann::json& config_eos,
                             const std::string& generation_config) {
  const fs::path dir = fs::temp_directory_path() / ("tfm_stop_ids_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path src = testing::fixture_dir("qwen3");
  fs::copy_file(src / "model.safetensors", dir / "model.safetensors");
  nlohmann::json config = nlohmann::json::parse(std::ifstream(src / "config.json"));
  config["eos_token_id"] = config_eos;
  std::ofstream(dir / "config.json") << config.dump();
  if (!generation_config.empty())
    std::ofstream(dir / "generation_config.json") << generation_config;
  return dir.string();
}

std::vector<int64_t> prompt(int row) { return testing::fixture_prompt("qwen3", row); }
// The prompt and transformers' greedy continuation of it.
std::vector<int64_t> greedy(int row) {
  std::vector<int64_t> ids = prompt(row);
  for (int64_t id : testing::fixture_greedy("qwen3", row)) ids.push_back(id);
  return ids;
}

std::vector<int64_t> cut_after(std::vector<int64_t> ids, size_t prompt_len, int64_t eos) {
  const auto at = std::find(ids.begin() + static_cast<std::ptrdiff_t>(prompt_len), ids.end(), eos);
  if (at != ids.end()) ids.erase(at + 1, ids.end());
  return ids;
}

GenerationConfig sixteen_tokens() {
  GenerationConfig gc;
  gc.max_new_tokens = 16;
  return gc;
}

TEST(StopIds, GenerationConfigWinsOverConfigJson) {
  set_log_level(LogLevel::kWarn);
  // The second row's first new id ends it by generation_config.json; the first row's first new
  // id is config.json's EOS, which then must not end it.
  const int64_t first_row_eos = greedy(0)[prompt(0).size()];
  const int64_t second_row_eos = greedy(1)[prompt(1).size()];
  const std::string dir = fixture_with_eos(
      "both", first_row_eos,
      "{\"eos_token_id\": [1023, " + std::to_string(second_row_eos) + "], \"do_sample\": false}");
  CausalLM model = AutoModelForCausalLM::from_pretrained(dir, {.dtype = DType::f32});
  const auto rows = model.generate({prompt(0), prompt(1)}, sixteen_tokens());
  EXPECT_EQ(rows[0], greedy(0));
  EXPECT_EQ(rows[1], cut_after(greedy(1), prompt(1).size(), second_row_eos));
}

TEST(StopIds, ConfigJsonWhenGenerationConfigSetsNone) {
  set_log_level(LogLevel::kWarn);
  const int64_t first_row_eos = greedy(0)[prompt(0).size()];
  const std::string dir =
      fixture_with_eos("config_only", first_row_eos, "{\"eos_token_id\": null}");
  CausalLM model = AutoModelForCausalLM::from_pretrained(dir, {.dtype = DType::f32});
  const auto rows = model.generate({prompt(0)}, sixteen_tokens());
  EXPECT_EQ(rows[0], cut_after(greedy(0), prompt(0).size(), first_row_eos));
}

TEST(StopIds, AMalformedGenerationConfigIsNamed) {
  const std::string dir = fixture_with_eos("malformed", nullptr, "{\"eos_token_id\": \"two\"}");
  try {
    AutoModelForCausalLM::from_pretrained(dir, {.dtype = DType::f32});
    FAIL() << "loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("generation_config.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("eos_token_id"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tfm
