#include "models/init_weights.h"

#include <random>

namespace tfm::models {

DecoderWeights init_weights(const ModelConfig& config, const DecoderFeatures& features,
                            uint64_t seed) {
  const double stddev = config.initializer_range;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.f, static_cast<float>(stddev));
  DecoderWeights weights;
  for_each_weight(config, features, weights,
                  [&](const std::string& name, Tensor& field, const Shape& shape) {
                    field = Tensor::zeros(shape, DType::f32);
                    auto* p = field.data_as<float>();
                    const int64_t n = field.numel();
                    if (shape.size() == 2) {
                      for (int64_t i = 0; i < n; ++i) p[i] = normal(rng);
                    } else if (name.find("bias") == std::string::npos) {
                      for (int64_t i = 0; i < n; ++i) p[i] = 1.f;  // a norm's scale
                    }
                  });
  return weights;
}

}  // namespace tfm::models
