// Paths and reference values of the fixtures made by transformers + PyTorch (tests/data).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tfm/tensor.h"

namespace tfm::testing {

std::string fixture_dir(const std::string& arch);  // "qwen3" -> tests/data/fixtures/qwen3
const nlohmann::json& reference(const std::string& arch);
// The fixture's name as a test name may hold it ('-' becomes '_').
std::string test_name(std::string arch);
// A copy of the fixture `arch` in `dir` with its vocabulary cut to the first `vocab_size` ids
// (the embedding's and lm_head's first rows): a vocabulary tensor parallelism need not divide.
void write_fixture_with_vocabulary(const std::string& arch, int64_t vocab_size,
                                   const std::string& dir);
// Row `row` of the fixture's left-padded batch without its padding, and transformers' 16 greedy
// ids after it (greedy_16).
std::vector<int64_t> fixture_prompt(const std::string& arch, int row);
std::vector<int64_t> fixture_greedy(const std::string& arch, int row);
// A [rows, cols] integer matrix from reference.json as an i64 tensor.
Tensor int_matrix(const nlohmann::json& rows);

// The training batch behind the fixtures' train_loss0, grad_norms and adamw losses: input_ids
// with labels = input_ids and no padding.
struct FixtureBatch {
  Tensor input_ids, attention_mask;
  int64_t targets = 0;  // positions that carry a loss
  double mean_loss(double loss_sum) const { return loss_sum / static_cast<double>(targets); }
};
FixtureBatch fixture_batch(const std::string& arch);

// How a model runs its graphs in a test: compiled with the backend's fusions, eagerly (op by op),
// or compiled with every fusion off (LoadOptions::fuse: the basic ops the model builds).
enum class Mode { kCompiled, kEager, kUnfused };
const char* mode_name(Mode mode);  // "compiled", "eager", "unfused"

}  // namespace tfm::testing
