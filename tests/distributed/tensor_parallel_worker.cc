// One rank of the tensor-parallel tests (started by tfmrun from tensor_parallel_test.cc): loads a
// fixture split by a DistributedConfig and, in the same process, whole; the split model's logits
// must equal the whole model's within 1e-5 and its greedy ids must equal transformers' (the
// fixture's reference.json). Prints "rank R: ok" or the failure, and exits non-zero on failure.
//   tfm_tensor_parallel_worker FIXTURE_DIR TP_SIZE FSDP_SIZE
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "tfm/log.h"
#include "tfm/model.h"

namespace {

tfm::Tensor int_matrix(const nlohmann::json& rows) {
  std::vector<int64_t> values;
  for (const auto& row : rows)
    for (const auto& v : row) values.push_back(v.get<int64_t>());
  return tfm::Tensor::from_vector(
      values, {static_cast<int64_t>(rows.size()), static_cast<int64_t>(rows[0].size())});
}

float max_abs_diff(const tfm::Tensor& a, const tfm::Tensor& b) {
  const std::vector<float> x = a.to_f32_vector(), y = b.to_f32_vector();
  if (x.size() != y.size()) return INFINITY;
  float worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::fabs(x[i] - y[i]));
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s FIXTURE_DIR TP_SIZE FSDP_SIZE\n", argv[0]);
    return 2;
  }
  const char* rank = std::getenv("RANK");
  try {
    tfm::set_log_level(tfm::LogLevel::kWarn);
    const std::string dir = argv[1];
    std::ifstream file(dir + "/reference.json");
    const nlohmann::json ref = nlohmann::json::parse(file);
    const tfm::DistributedConfig split{std::atoi(argv[2]), std::atoi(argv[3])};
    tfm::CausalLM whole = tfm::AutoModelForCausalLM::from_pretrained(
        dir, {.dtype = tfm::DType::f32, .device_map = "cpu"});
    tfm::CausalLM parts = tfm::AutoModelForCausalLM::from_pretrained(
        dir, {.dtype = tfm::DType::f32, .device_map = "cpu", .distributed = split});

    const tfm::Tensor ids = int_matrix(ref["input_ids"]);
    const tfm::Tensor want = whole.forward(ids);
    const float compiled = max_abs_diff(parts.forward(ids), want);
    const float eager = max_abs_diff(parts.forward(ids, nullptr, true, true), want);

    const tfm::Tensor padded = int_matrix(ref["padded_input_ids"]);
    const tfm::Tensor mask = int_matrix(ref["padded_attention_mask"]);
    tfm::GenerationConfig gc;
    gc.max_new_tokens = 16;
    const std::vector<float> greedy = parts.generate(padded, &mask, gc).to_f32_vector();
    const bool greedy_ok = greedy == int_matrix(ref["greedy_16"]).to_f32_vector();

    std::printf("rank %s: logits max diff %.3g compiled, %.3g eager; greedy %s\n", rank, compiled,
                eager, greedy_ok ? "equal" : "DIFFERENT");
    if (compiled > 1e-5f || eager > 1e-5f || !greedy_ok) return 1;
    std::printf("rank %s: ok\n", rank);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %s error: %s\n", rank ? rank : "?", e.what());
    return 1;
  }
}
