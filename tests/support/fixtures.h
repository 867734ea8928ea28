// Paths and reference values of the fixtures made by transformers + PyTorch (tests/data).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tfm/tensor.h"

namespace tfm::testing {

std::string fixture_dir(const std::string& arch);  // "qwen3" -> tests/data/fixtures/qwen3
const nlohmann::json& reference(const std::string& arch);
// A [rows, cols] integer matrix from reference.json as an i64 tensor.
Tensor int_matrix(const nlohmann::json& rows);

}  // namespace tfm::testing
