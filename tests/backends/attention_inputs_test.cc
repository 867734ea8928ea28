// The start of a decoder layer as the models build it in basic ops (the input norm, q, k and v's
// products, the per-head norms, RoPE, the cache writes, attention), on each backend (CUDA skipped,
// and said so, where absent): compiled, where the backend's passes fuse it into qkv_linear (of the
// RMS-normed rows, with an input norm) and prepare_attention, and eager, op by op; against the
// scalar references in src/ops: the three products, the normed and rotated q, the k and v rows in
// the caches and attention over them.
#include <gtest/gtest.h>

#include <array>
#include <cmath>

#include "backends/cpu/cpu_backend.h"
#include "backends/cpu/kernels.h"
#include "graph/backend.h"
#include "graph/builder.h"
#include "ops/reference.h"
#include "support/random_values.h"
#include "tfm/device.h"

namespace tfm {
namespace {

using graph::ValueId;

using testing::random_values;
using testing::rounded;

using testing::expect_close;

struct Case {
  std::string device;
  // batch x seq rows: up to 8 take the GEMV on CUDA, up to 16 with bf16 weights the tensor-core
  // tiles, more cuBLASLt.
  int64_t batch, seq, hidden;
  DType weights, cache;
  bool norms;       // q_norm and k_norm
  bool input_norm;  // the layer's input norm applied by qkv_linear
  bool biases = true;
};

std::string describe(const Case& c) {
  return c.device + "_rows" + std::to_string(c.batch * c.seq) + "_k" + std::to_string(c.hidden) +
         "_" + std::string(dtype_name(c.weights)) + "_cache_" + std::string(dtype_name(c.cache)) +
         (c.norms ? "_norms" : "") + (c.input_norm ? "_input_norm" : "") +
         (c.biases ? "" : "_no_bias");
}

void PrintTo(const Case& c, std::ostream* os) { *os << describe(c); }

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return describe(info.param); }

class AttentionInputsTest : public ::testing::TestWithParam<Case> {};

TEST_P(AttentionInputsTest, MatchReference) {
  const Case& c = GetParam();
  if (!is_available(c.device)) GTEST_SKIP() << "no " << c.device << " device present: skipped";
  const Device device = c.device == "cuda" ? Device{"cuda", 0} : kCpu;
  const int64_t b = c.batch, s = c.seq, k = c.hidden, hq = 4, hkv = 2, d = 8, len = 8;
  const int64_t rows = b * s, nq = hq * d, nkv = hkv * d;
  const float eps = 1e-6f, scaling = 1.25f;

  const std::vector<float> x = random_values(static_cast<size_t>(rows * k), 1);
  std::vector<std::vector<float>> w, bias;
  const int64_t cols[3] = {nq, nkv, nkv};
  for (uint64_t i = 0; i < 3; ++i) {
    w.push_back(rounded(random_values(static_cast<size_t>(cols[i] * k), 2 + i), c.weights));
    bias.push_back(random_values(static_cast<size_t>(cols[i]), 5 + i));
  }
  const std::vector<float> input_norm = random_values(static_cast<size_t>(k), 10, 0.5f, 1.5f);
  const std::vector<float> q_norm = random_values(d, 8, 0.5f, 1.5f);
  const std::vector<float> k_norm = random_values(d, 9, 0.5f, 1.5f);
  std::vector<float> inv_freq(d / 2);
  for (int64_t i = 0; i < d / 2; ++i) inv_freq[i] = std::pow(10000.f, -2.f * i / d);
  std::vector<int32_t> positions(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) positions[i] = static_cast<int32_t>(3 + i % s + 7 * (i / s));
  std::vector<int32_t> slots(static_cast<size_t>(s));
  for (int64_t i = 0; i < s; ++i) slots[i] = static_cast<int32_t>(len - s + i);

  std::vector<int32_t> mask(static_cast<size_t>(b * len), 1);
  mask[1] = 0;  // row 0 does not see slot 1

  graph::Builder g;
  const ValueId xv = g.input("x", {b, s, k}, DType::f32);
  const ValueId pos = g.input("positions", {b, s}, DType::i32);
  const ValueId slot = g.input("slots", {s}, DType::i32);
  const ValueId mask_in = g.input("mask", {b, len}, DType::i32);
  const ValueId k_cache = g.state("k_cache", {b, len, hkv, d}, c.cache);
  const ValueId v_cache = g.state("v_cache", {b, len, hkv, d}, c.cache);
  const auto matrix = [&](size_t i) {
    return Tensor::from_vector<float>(w[i], {cols[i], k}).to(c.weights);
  };
  const auto vector = [&](const std::vector<float>& v) {
    return Tensor::from_vector<float>(v, {static_cast<int64_t>(v.size())});
  };
  std::array<ValueId, 3> biases{-1, -1, -1};
  if (c.biases) {
    biases = {g.weight("bq", vector(bias[0])), g.weight("bk", vector(bias[1])),
              g.weight("bv", vector(bias[2]))};
  }
  const ValueId rows_in =
      c.input_norm ? g.rms_norm(xv, g.weight("input_norm", vector(input_norm)), eps) : xv;
  const std::array<ValueId, 3> weights{g.weight("wq", matrix(0)), g.weight("wk", matrix(1)),
                                       g.weight("wv", matrix(2))};
  std::array<ValueId, 3> product_ids{};
  for (size_t i = 0; i < 3; ++i) product_ids[i] = g.linear(rows_in, weights[i], biases[i]);
  ValueId q = g.reshape(product_ids[0], {b, s, hq, d});
  ValueId kv = g.reshape(product_ids[1], {b, s, hkv, d});
  const ValueId vv = g.reshape(product_ids[2], {b, s, hkv, d});
  if (c.norms) {
    q = g.rms_norm(q, g.weight("q_norm", vector(q_norm)), eps);
    kv = g.rms_norm(kv, g.weight("k_norm", vector(k_norm)), eps);
  }
  const ValueId inv_freq_w = g.weight("inv_freq", vector(inv_freq));
  q = g.rope(q, pos, inv_freq_w, scaling);
  kv = g.rope(kv, pos, inv_freq_w, scaling);
  const float attention_scale = 0.3f;
  g.output(q);
  for (const ValueId p : product_ids) g.output(p);
  g.output(g.attention(q, g.cache_write(k_cache, kv, slot), g.cache_write(v_cache, vv, slot),
                       mask_in, slot, attention_scale));
  const graph::Graph graph = g.finish();
  if (c.device == "cpu") {
    const fusion::Plan plan = cpu::cpu_plan(graph);
    int fused = 0;
    for (const ValueId id : plan.schedule) {
      const graph::Op op = plan.graph.nodes[static_cast<size_t>(id)].op;
      fused += op == graph::Op::kQkvLinear || op == graph::Op::kPrepareAttention;
    }
    EXPECT_EQ(fused, 2) << "the CPU's passes fuse the products and what attention reads";
  }

  // The references: the three products, then q and k normed per head and rotated, and the new
  // k and v rows at the slots of otherwise zero caches.
  // Bf16 products of more than 8 rows read the activations rounded to bf16 too: cuBLASLt's, and
  // the CPU's where it has native bf16 dot products (from 5 rows where it has AVX512_BF16).
  const bool rounds = c.device == "cuda"
                          ? rows > 8
                          : cpu::reads_rounded_activations(rows, cpu::big_products_path());
  const bool bf16_product = rounds && c.weights == DType::bf16;
  std::vector<float> h = x;
  if (c.input_norm) ops::reference::rms_norm(x.data(), input_norm.data(), rows, k, eps, h.data());
  const std::vector<float> x_read = bf16_product ? rounded(h, DType::bf16) : h;
  std::vector<std::vector<float>> products(3);
  for (size_t i = 0; i < 3; ++i) {
    products[i].resize(static_cast<size_t>(rows * cols[i]));
    ops::reference::linear(x_read.data(), w[i].data(), c.biases ? bias[i].data() : nullptr, rows,
                           cols[i], k, products[i].data());
  }
  const auto prepared = [&](const std::vector<float>& values, const std::vector<float>& norm,
                            int64_t heads) {
    std::vector<float> normed = values, out(values.size());
    if (c.norms) {
      ops::reference::rms_norm(values.data(), norm.data(), rows * heads, d, eps, normed.data());
    }
    ops::reference::rope(normed.data(), positions.data(), inv_freq.data(), b, s, heads, d, scaling,
                         out.data());
    return out;
  };
  const std::vector<float> want_q = prepared(products[0], q_norm, hq);
  const auto cached = [&](const std::vector<float>& update) {
    std::vector<float> cache(static_cast<size_t>(b * len * nkv), 0.f);
    ops::reference::cache_write(cache.data(), update.data(), slots.data(), b, len, s, nkv);
    return rounded(cache, c.cache);
  };
  const std::vector<float> want_k = cached(prepared(products[1], k_norm, hkv));
  const std::vector<float> want_v = cached(products[2]);
  std::vector<float> want_attention(static_cast<size_t>(rows * nq));
  ops::reference::attention(want_q.data(), want_k.data(), want_v.data(), mask.data(), slots.data(),
                            b, s, len, hq, hkv, d, attention_scale, want_attention.data());

  graph::Backend& backend = graph::backend_for(device);
  const auto executable = backend.compile(graph);
  for (const bool eager : {false, true}) {
    const std::string mode = eager ? "eager " : "compiled ";
    const Tensor k_buffer = Tensor::zeros({b, len, hkv, d}, c.cache).to(device);
    const Tensor v_buffer = Tensor::zeros({b, len, hkv, d}, c.cache).to(device);
    const std::vector<Tensor> inputs{Tensor::from_vector<float>(x, {b, s, k}),
                                     Tensor::from_vector<int32_t>(positions, {b, s}),
                                     Tensor::from_vector<int32_t>(slots, {s}),
                                     Tensor::from_vector<int32_t>(mask, {b, len}),
                                     k_buffer,
                                     v_buffer};
    const std::vector<Tensor> out =
        eager ? backend.run_eager(graph, inputs) : executable->run(inputs).outputs;
    ASSERT_EQ(out.size(), 5u);
    // A bf16 cache rounds each value to 8 bits of mantissa.
    const float cache_tol = c.cache == DType::bf16 ? 8e-3f : 2e-5f;
    for (size_t i = 0; i < 3; ++i) {
      expect_close(out[1 + i].to_f32_vector(), products[i], 2e-5f,
                   mode + "product " + std::to_string(i));
    }
    expect_close(out[0].to_f32_vector(), want_q, 2e-5f, mode + "q");
    expect_close(out[4].to_f32_vector(), want_attention, cache_tol, mode + "attention");
    expect_close(k_buffer.to(kCpu).to_f32_vector(), want_k, cache_tol, mode + "k cache");
    expect_close(v_buffer.to(kCpu).to_f32_vector(), want_v, cache_tol, mode + "v cache");
  }
}

std::vector<Case> cases() {
  std::vector<Case> all;
  for (const std::string device : {"cpu", "cuda"}) {
    all.push_back({device, 2, 3, 16, DType::f32, DType::f32, true, false});
    all.push_back({device, 2, 3, 16, DType::bf16, DType::bf16, false, true});
    all.push_back({device, 1, 1, 12, DType::bf16, DType::f32, true, true});  // k % 8 != 0
    all.push_back({device, 3, 3, 16, DType::bf16, DType::bf16, true, true});
    all.push_back({device, 3, 3, 16, DType::f32, DType::f32, false, false});
    all.push_back({device, 1, 2, 16, DType::bf16, DType::bf16, true, true, false});
    all.push_back({device, 3, 4, 16, DType::bf16, DType::bf16, true, true, false});
  }
  return all;
}

INSTANTIATE_TEST_SUITE_P(Devices, AttentionInputsTest, ::testing::ValuesIn(cases()), case_name);

}  // namespace
}  // namespace tfm
