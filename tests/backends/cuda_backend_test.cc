// The CUDA backend where a GPU is present (skipped, and said so, where not): out-of-memory
// reports, compiled (CUDA Graph) runs against eager ones, and replays across KV caches. The
// fixtures' logits and greedy ids on CUDA are checked in tests/models and tests/generation.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "support/fixtures.h"
#include "tfm/device.h"
#include "tfm/error.h"
#include "tfm/log.h"
#include "tfm/model.h"

namespace tfm {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::ThrowsMessage;

const Device kCuda{"cuda", 0};

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!is_available("cuda")) GTEST_SKIP() << "no CUDA device present: CUDA tests skipped";
    set_log_level(LogLevel::kWarn);
  }
};

TEST_F(CudaBackendTest, OutOfMemorySaysWhatWasAskedAndWhatIsFree) {
  // 4 PiB: more than any GPU holds.
  EXPECT_THAT([] { Tensor::empty({int64_t{1} << 50}, DType::f32, kCuda); },
              ThrowsMessage<Error>(AllOf(HasSubstr("out of memory on cuda:0"),
                                         HasSubstr("asked for 4194304.00 GiB"),
                                         HasSubstr("free of"))));
  // The device is still usable afterwards.
  const Tensor back = Tensor::from_vector<float>({1.f, 2.f}, {2}).to(kCuda).to(kCpu);
  EXPECT_EQ(back.to_f32_vector(), (std::vector<float>{1.f, 2.f}));
}

TEST_F(CudaBackendTest, CompiledMatchesEagerForEachDtype) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    CausalLM model = AutoModelForCausalLM::from_pretrained(testing::fixture_dir("qwen3"),
                                                           {.dtype = dtype, .device_map = "cuda"});
    const Tensor ids = testing::int_matrix(testing::reference("qwen3")["input_ids"]);
    const std::vector<float> compiled = model.forward(ids, nullptr, true, false).to_f32_vector();
    const std::vector<float> eager = model.forward(ids, nullptr, true, true).to_f32_vector();
    ASSERT_EQ(compiled.size(), eager.size());
    float max_abs = 0;
    for (size_t i = 0; i < compiled.size(); ++i)
      max_abs = std::max(max_abs, std::fabs(compiled[i] - eager[i]));
    // The same kernels in the same order: only a different cuBLASLt split could differ.
    EXPECT_LT(max_abs, 1e-5) << dtype_name(dtype);
  }
}

TEST_F(CudaBackendTest, RepeatedGenerateReplaysTheSameGraphs) {
  CausalLM model = AutoModelForCausalLM::from_pretrained(
      testing::fixture_dir("qwen3"), {.dtype = DType::f32, .device_map = "cuda"});
  GenerationConfig gc;
  gc.max_new_tokens = 8;
  const std::vector<std::vector<int64_t>> prompts{{5, 6, 7, 8}, {9, 10}};
  const auto first = model.generate(prompts, gc);
  const int compiles = model.graph_stats().compiles;
  const auto second = model.generate(prompts, gc);
  EXPECT_EQ(first, second);
  EXPECT_EQ(model.graph_stats().compiles, compiles) << "the second call compiled new graphs";
}

TEST_F(CudaBackendTest, OutOfVocabularyIdIsAnError) {
  CausalLM model = AutoModelForCausalLM::from_pretrained(
      testing::fixture_dir("qwen3"), {.dtype = DType::f32, .device_map = "cuda"});
  const Tensor ids = Tensor::from_vector<int64_t>({1, 2, 5000}, {1, 3});
  EXPECT_THAT([&] { model.forward(ids, nullptr, true, false); },
              ThrowsMessage<Error>(HasSubstr("token id 5000 outside the vocabulary")));
}

}  // namespace
}  // namespace tfm
