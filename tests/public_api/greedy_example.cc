// A program written against the public headers alone (include/tfm, no src/ on its include path):
// it loads a fixture and checks transformers' greedy ids, as a user of the installed API would.
//   greedy_example FIXTURE_DIR
#include <tfm/model.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

namespace {

tfm::Tensor matrix(const nlohmann::json& rows) {
  std::vector<int64_t> values;
  for (const auto& row : rows) {
    for (const auto& v : row) values.push_back(v.get<int64_t>());
  }
  return tfm::Tensor::from_vector(values, {static_cast<int64_t>(rows.size()),
                                           static_cast<int64_t>(rows[0].size())});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: greedy_example FIXTURE_DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::ifstream in(dir + "/reference.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  tfm::CausalLM model = tfm::AutoModelForCausalLM::from_pretrained(
      dir, {.dtype = tfm::DType::f32, .device_map = "cpu"});
  const tfm::Tensor mask = matrix(ref["padded_attention_mask"]);
  tfm::GenerationConfig config;
  config.max_new_tokens = 16;
  const tfm::Tensor out = model.generate(matrix(ref["padded_input_ids"]), &mask, config);
  const tfm::Tensor want = matrix(ref["greedy_16"]);
  if (out.shape() != want.shape()) {
    std::fprintf(stderr, "generated %s, transformers %s\n", tfm::shape_str(out.shape()).c_str(),
                 tfm::shape_str(want.shape()).c_str());
    return 1;
  }
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (out.data_as<int64_t>()[i] != want.data_as<int64_t>()[i]) {
      std::fprintf(stderr, "ids differ from transformers' at flat index %lld\n",
                   static_cast<long long>(i));
      return 1;
    }
  }
  std::printf("greedy ids of %s match transformers\n", dir.c_str());
  return 0;
}
