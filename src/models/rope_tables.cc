// RoPE frequencies for each rope_type that Llama/Qwen configs use, following transformers'
// modeling_rope_utils so the same checkpoints get the same rotations.
#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "models/decoder.h"
#include "tfm/error.h"

namespace tfm::models {
namespace {

std::vector<double> default_inv_freq(double base, int64_t dim) {
  std::vector<double> inv(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    inv[static_cast<size_t>(i)] =
        1.0 / std::pow(base, static_cast<double>(2 * i) / static_cast<double>(dim));
  }
  return inv;
}

int64_t original_context(const ModelConfig& config) {
  const int64_t original = config.rope_scaling.original_max_position_embeddings;
  return original > 0 ? original : config.max_position_embeddings;
}

void apply_llama3(const RopeScaling& s, int64_t old_context, std::vector<double>& inv) {
  const double low_wavelen = static_cast<double>(old_context) / s.low_freq_factor;
  const double high_wavelen = static_cast<double>(old_context) / s.high_freq_factor;
  for (double& f : inv) {
    const double wavelen = 2 * std::numbers::pi / f;
    const double scaled = wavelen > low_wavelen ? f / s.factor : f;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    if (medium) {
      const double smooth = (static_cast<double>(old_context) / wavelen - s.low_freq_factor) /
                            (s.high_freq_factor - s.low_freq_factor);
      f = (1 - smooth) * scaled / s.factor + smooth * scaled;
    } else {
      f = scaled;
    }
  }
}

double yarn_mscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

float apply_yarn(const RopeScaling& s, double base, int64_t dim, int64_t old_context,
                 std::vector<double>& inv) {
  double attention_factor;
  if (s.attention_factor) {
    attention_factor = *s.attention_factor;
  } else if (s.mscale != 0 && s.mscale_all_dim != 0) {
    attention_factor = yarn_mscale(s.factor, s.mscale) / yarn_mscale(s.factor, s.mscale_all_dim);
  } else {
    attention_factor = yarn_mscale(s.factor, 1.0);
  }
  const auto correction_dim = [&](double rotations) {
    return static_cast<double>(dim) *
           std::log(static_cast<double>(old_context) / (rotations * 2 * std::numbers::pi)) /
           (2 * std::log(base));
  };
  double low = correction_dim(s.beta_fast), high = correction_dim(s.beta_slow);
  if (s.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  for (size_t i = 0; i < inv.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation_factor = 1 - ramp;
    const double extrapolation = inv[i], interpolation = inv[i] / s.factor;
    inv[i] = interpolation * (1 - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
  return static_cast<float>(attention_factor);
}

}  // namespace

RopeTables rope_tables(const ModelConfig& config, int64_t seq_len) {
  const RopeScaling& s = config.rope_scaling;
  const int64_t dim = config.head_dim;
  double base = config.rope_theta;
  float attention_scaling = 1.f;
  std::vector<double> inv;
  if (s.rope_type == "default") {
    inv = default_inv_freq(base, dim);
  } else if (s.rope_type == "linear") {
    inv = default_inv_freq(base, dim);
    for (double& f : inv) f /= s.factor;
  } else if (s.rope_type == "dynamic") {
    // Static shapes: the frequencies are those for the longest sequence the graph can hold.
    const int64_t max_pos = original_context(config);
    if (seq_len > max_pos) {
      base *= std::pow(
          s.factor * static_cast<double>(seq_len) / static_cast<double>(max_pos) - (s.factor - 1),
          static_cast<double>(dim) / static_cast<double>(dim - 2));
    }
    inv = default_inv_freq(base, dim);
  } else if (s.rope_type == "llama3") {
    inv = default_inv_freq(base, dim);
    // transformers reads this length as given for llama3 (0 included), where yarn and dynamic
    // fall back to max_position_embeddings.
    apply_llama3(s, s.original_max_position_embeddings, inv);
  } else if (s.rope_type == "yarn") {
    inv = default_inv_freq(base, dim);
    attention_scaling = apply_yarn(s, base, dim, original_context(config), inv);
  } else {
    throw Error("rope_scaling type '" + s.rope_type +
                "' is not supported (default, linear, dynamic, llama3, yarn)");
  }
  RopeTables tables;
  tables.inv_freq = Tensor::empty({dim / 2}, DType::f32);
  std::transform(inv.begin(), inv.end(), tables.inv_freq.data_as<float>(),
                 [](double f) { return static_cast<float>(f); });
  tables.attention_scaling = attention_scaling;
  return tables;
}

}  // namespace tfm::models
