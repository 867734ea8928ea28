#include "support/fixtures.h"

#include <fstream>
#include <map>

namespace tfm::testing {

std::string fixture_dir(const std::string& arch) {
  return std::string(TFM_TEST_DATA_DIR) + "/fixtures/" + arch;
}

const nlohmann::json& reference(const std::string& arch) {
  static std::map<std::string, nlohmann::json> cache;
  auto it = cache.find(arch);
  if (it == cache.end()) {
    std::ifstream in(fixture_dir(arch) + "/reference.json");
    it = cache.emplace(arch, nlohmann::json::parse(in)).first;
  }
  return it->second;
}

Tensor int_matrix(const nlohmann::json& rows) {
  const auto r = static_cast<int64_t>(rows.size()), c = static_cast<int64_t>(rows[0].size());
  std::vector<int64_t> values;
  for (const auto& row : rows) {
    for (const auto& v : row) values.push_back(v.get<int64_t>());
  }
  return Tensor::from_vector(values, {r, c});
}

FixtureBatch fixture_batch(const std::string& arch) {
  FixtureBatch batch;
  batch.input_ids = int_matrix(reference(arch)["input_ids"]);
  const auto count = static_cast<size_t>(batch.input_ids.numel());
  batch.attention_mask =
      Tensor::from_vector(std::vector<int64_t>(count, 1), batch.input_ids.shape());
  const int64_t cols = batch.input_ids.dim(1);
  batch.targets = batch.input_ids.dim(0) * (cols - 1);
  return batch;
}

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::kCompiled:
      return "compiled";
    case Mode::kEager:
      return "eager";
    case Mode::kUnfused:
      return "unfused";
  }
  return "?";
}

}  // namespace tfm::testing
