// The values torch.optim.AdamW, clip_grad_norm_ and transformers.get_scheduler computed
// (tests/data/training/optimizer-goldens.json, made by tools/make_optimizer_goldens.py).
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

namespace tfm::testing_training {

inline const nlohmann::json& optimizer_goldens() {
  static const nlohmann::json goldens = [] {
    const std::filesystem::path file =
        std::filesystem::path(TFM_TEST_DATA_DIR) / "training" / "optimizer-goldens.json";
    std::ifstream in(file);
    return nlohmann::json::parse(in);
  }();
  return goldens;
}

inline std::vector<float> floats(const nlohmann::json& values) {
  return values.get<std::vector<float>>();
}

}  // namespace tfm::testing_training
