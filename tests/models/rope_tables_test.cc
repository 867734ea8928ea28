// RoPE frequencies of the scaling types the fixtures do not cover, against transformers'
// closed forms (modeling_rope_utils): linear divides by the factor; dynamic NTK raises the base.
#include <gtest/gtest.h>

#include <cmath>

#include "models/decoder.h"
#include "tfm/error.h"

namespace tfm {
namespace {

ModelConfig rope_config(const std::string& type) {
  ModelConfig c;
  c.head_dim = 16;
  c.rope_theta = 10000.0;
  c.max_position_embeddings = 64;
  c.rope_scaling.rope_type = type;
  c.rope_scaling.factor = 4.0;
  return c;
}

double default_freq(double base, int i, int dim) { return 1.0 / std::pow(base, 2.0 * i / dim); }

TEST(RopeTables, LinearDividesByFactor) {
  const models::RopeTables t = models::rope_tables(rope_config("linear"), 256);
  for (int i = 0; i < 8; ++i) {
    EXPECT_FLOAT_EQ(t.inv_freq.data_as<float>()[i], default_freq(10000.0, i, 16) / 4.0);
  }
  EXPECT_EQ(t.attention_scaling, 1.f);
}

TEST(RopeTables, DynamicRaisesBaseOnlyBeyondTrainedLength) {
  const ModelConfig c = rope_config("dynamic");
  const models::RopeTables short_seq = models::rope_tables(c, 64);
  const models::RopeTables long_seq = models::rope_tables(c, 256);
  // base * ((factor * seq / max_pos) - (factor - 1)) ** (dim / (dim - 2))
  const double base = 10000.0 * std::pow(4.0 * 256 / 64 - 3.0, 16.0 / 14.0);
  for (int i = 0; i < 8; ++i) {
    EXPECT_FLOAT_EQ(short_seq.inv_freq.data_as<float>()[i], default_freq(10000.0, i, 16));
    EXPECT_FLOAT_EQ(long_seq.inv_freq.data_as<float>()[i], default_freq(base, i, 16));
  }
}

// _compute_llama3_parameters takes original_max_position_embeddings as given: at 0 both
// wavelength bounds are 0, every wavelength is past the low-frequency one, and every frequency is
// divided by the factor (transformers 5.25 runs such a config).
TEST(RopeTables, Llama3TakesAZeroOriginalLengthAsGiven) {
  ModelConfig c = rope_config("llama3");
  c.rope_scaling.low_freq_factor = 1.0;
  c.rope_scaling.high_freq_factor = 4.0;
  c.rope_scaling.original_max_position_embeddings = 0;
  const models::RopeTables t = models::rope_tables(c, 64);
  for (int i = 0; i < 8; ++i) {
    EXPECT_FLOAT_EQ(t.inv_freq.data_as<float>()[i], default_freq(10000.0, i, 16) / 4.0) << i;
  }
}

TEST(RopeTables, UnknownTypeIsAnError) {
  EXPECT_THROW(models::rope_tables(rope_config("longrope"), 64), Error);
}

}  // namespace
}  // namespace tfm
