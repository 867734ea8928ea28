// tests/data/training/dataset/golden.json (made by tools/make_dataset_goldens.py with Hugging Face
// datasets, tokenizers and transformers) and the Qwen3 tokenizer it was made with.
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tfm/tokenizer.h"

namespace tfm::testing_training {

inline std::string dataset_file(const std::string& name) {
  return std::string(TFM_TEST_DATA_DIR) + "/training/dataset/" + name;
}

inline const nlohmann::json& dataset_golden() {
  static const nlohmann::json golden = [] {
    std::ifstream in(dataset_file("golden.json"));
    return nlohmann::json::parse(in);
  }();
  return golden;
}

inline const Tokenizer& qwen3_tokenizer() {
  static const Tokenizer tokenizer =
      AutoTokenizer::from_pretrained(std::string(TFM_DATA_DIR) + "/qwen3-tokenizer");
  return tokenizer;
}

// A JSON list of rows, concatenated: the layout of TokenRows.
inline std::vector<int32_t> flat_rows(const nlohmann::json& rows) {
  std::vector<int32_t> out;
  for (const nlohmann::json& row : rows) {
    for (const nlohmann::json& v : row) out.push_back(v.get<int32_t>());
  }
  return out;
}

}  // namespace tfm::testing_training
