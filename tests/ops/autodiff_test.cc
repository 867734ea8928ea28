// Every op's backward rule and CPU kernel against central finite differences of its forward op:
// the gradient of L = sum(y * dy) for a random dy, compiled and eager, and through a PJRT plugin
// (the graph as StableHLO) where the tests installed one.
#include "ops/autodiff.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>

#include "backends/cpu/cpu_backend.h"
#include "graph/backend.h"
#include "graph/builder.h"
#include "graph/effects.h"
#include "support/devices.h"
#include "support/random_values.h"
#include "tfm/error.h"

namespace tfm {
namespace {

using graph::Builder;
using graph::ValueId;

using testing::random_tensor;

Tensor ints(std::vector<int32_t> values, const Shape& shape) {
  return Tensor::from_vector(values, shape);
}

// Builds y from parameters (weights the test perturbs) and constants.
struct GradCase {
  std::vector<Tensor> params;
  std::function<ValueId(Builder&, const std::vector<ValueId>&)> forward;
  // The PJRT backend emits the ops too (not the exchange of rows between expert-parallel ranks:
  // a compiler partitions one program instead).
  bool on_pjrt = true;
};

// The forward graph with y as its only output, and the random seed dy.
graph::Graph forward_graph(const GradCase& c, ValueId* y_out) {
  Builder b;
  std::vector<ValueId> ids;
  for (size_t i = 0; i < c.params.size(); ++i)
    ids.push_back(b.weight("p" + std::to_string(i), c.params[i]));
  const ValueId y = c.forward(b, ids);
  b.output(y);
  *y_out = y;
  return b.finish();
}

double weighted_sum(const Tensor& y, const Tensor& dy) {
  const std::vector<float> a = y.to_f32_vector(), b = dy.to_f32_vector();
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) sum += static_cast<double>(a[i]) * b[i];
  return sum;
}

void check_gradients(const GradCase& c, uint32_t seed = 7) {
  graph::Backend& cpu = graph::backend_for(kCpu);
  std::mt19937 rng(seed);
  ValueId y = -1;
  graph::Graph graph = forward_graph(c, &y);
  const Tensor dy = random_tensor(graph.nodes[static_cast<size_t>(y)].shape, rng);
  const auto loss = [&] { return weighted_sum(cpu.run_eager(forward_graph(c, &y), {}).at(0), dy); };

  Builder extend(std::move(graph));
  const ValueId seed_id = extend.weight("dy", dy);
  graph = extend.finish();
  std::vector<ValueId> params;
  for (size_t i = 0; i < c.params.size(); ++i) params.push_back(static_cast<ValueId>(i));
  for (ValueId g : ops::append_backward(graph, y, seed_id, params)) graph.outputs.push_back(g);

  const std::vector<Tensor> eager = cpu.run_eager(graph, {});
  const std::vector<Tensor> compiled = cpu.compile(graph)->run({}).outputs;
  // The same graph as StableHLO through XLA's CPU plugin, where the tests installed it.
  std::vector<Tensor> through_pjrt;
  if (c.on_pjrt && testing::device_present("pjrt")) {
    through_pjrt = graph::backend_for(Device{"pjrt", 0}).compile(graph)->run({}).outputs;
  }
  for (size_t p = 0; p < c.params.size(); ++p) {
    const std::vector<float> g = eager[p + 1].to_f32_vector(), gc = compiled[p + 1].to_f32_vector();
    const std::vector<float> gp =
        through_pjrt.empty() ? std::vector<float>() : through_pjrt[p + 1].to_f32_vector();
    ASSERT_EQ(g.size(), static_cast<size_t>(c.params[p].numel()));
    for (size_t i = 0; i < g.size(); ++i) {
      EXPECT_NEAR(gc[i], g[i], 1e-6 * (1 + std::abs(g[i]))) << "compiled vs eager, param " << p;
    }
    float* data = const_cast<Tensor&>(c.params[p]).data_as<float>();
    const size_t stride = std::max<size_t>(1, g.size() / 24);  // about 24 coordinates each
    for (size_t i = 0; i < g.size(); i += stride) {
      const float saved = data[i], h = 1e-2f;
      data[i] = saved + h;
      const double up = loss();
      data[i] = saved - h;
      const double down = loss();
      data[i] = saved;
      const double numeric = (up - down) / (2.0 * h);
      EXPECT_NEAR(g[i], numeric, 2e-3 + 1e-2 * std::abs(numeric))
          << "param " << p << " element " << i;
      if (!gp.empty()) {
        EXPECT_NEAR(gp[i], numeric, 2e-3 + 1e-2 * std::abs(numeric))
            << "pjrt: param " << p << " element " << i;
      }
    }
  }
}

TEST(Autodiff, LinearWithBiasAndReshape) {
  std::mt19937 rng(1);
  check_gradients(
      {{random_tensor({3, 5}, rng), random_tensor({4, 5}, rng), random_tensor({4}, rng)},
       [](Builder& b, const std::vector<ValueId>& p) {
         return b.reshape(b.linear(b.reshape(p[0], {3, 1, 5}), p[1], p[2]), {2, 6});
       }});
}

// A residual connection after a product (x w^T + bias + r), which the kernel backends' passes
// fold into the product.
TEST(Autodiff, LinearAddingAResidual) {
  std::mt19937 rng(13);
  check_gradients({{random_tensor({3, 5}, rng), random_tensor({4, 5}, rng), random_tensor({4}, rng),
                    random_tensor({3, 4}, rng)},
                   [](Builder& b, const std::vector<ValueId>& p) {
                     return b.add(b.linear(p[0], p[1], p[2]), b.silu(p[3]));
                   }});
}

// A view of part of a value (FSDP's cut of a padded gathered weight): the elements outside it get
// a zero gradient.
TEST(Autodiff, ViewInsideALargerValue) {
  std::mt19937 rng(11);
  check_gradients({{random_tensor({7, 4}, rng), random_tensor({3, 4}, rng)},
                   [](Builder& b, const std::vector<ValueId>& p) {
                     return b.linear(b.view(p[0], 2, {2, 3, 4}), p[1]);
                   }});
}

TEST(Autodiff, EmbeddingWithRepeatedIds) {
  std::mt19937 rng(2);
  const Tensor ids = ints({1, 4, 1, 6, 0, 4}, {2, 3});
  check_gradients({{random_tensor({7, 4}, rng)}, [ids](Builder& b, const std::vector<ValueId>& p) {
                     return b.embedding(p[0], b.weight("ids", ids));
                   }});
}

TEST(Autodiff, RmsNorm) {
  std::mt19937 rng(3);
  check_gradients(
      {{random_tensor({3, 8}, rng), random_tensor({8}, rng)},
       [](Builder& b, const std::vector<ValueId>& p) { return b.rms_norm(p[0], p[1], 1e-6f); }});
}

TEST(Autodiff, RopeWithScaling) {
  std::mt19937 rng(4);
  const Tensor positions = ints({0, 3, 9, 2, 5, 7}, {2, 3});
  const Tensor inv_freq = Tensor::from_vector(std::vector<float>{1.f, 0.3f, 0.05f, 0.01f}, {4});
  check_gradients(
      {{random_tensor({2, 3, 2, 8}, rng)}, [=](Builder& b, const std::vector<ValueId>& p) {
         return b.rope(p[0], b.weight("positions", positions), b.weight("inv_freq", inv_freq),
                       1.3f);
       }});
}

// Causal attention over one sequence of `seq` tokens per row (slots 0..seq-1) with `mask`.
void check_attention_gradients(uint32_t seed, const std::vector<int32_t>& mask_values,
                               const Shape& q_shape, int64_t kv_heads, float scale,
                               int64_t window = 0) {
  std::mt19937 rng(seed);
  const int64_t batch = q_shape[0], seq = q_shape[1];
  std::vector<int32_t> slot_values(static_cast<size_t>(seq));
  for (int64_t i = 0; i < seq; ++i) slot_values[static_cast<size_t>(i)] = static_cast<int32_t>(i);
  const Tensor mask = ints(mask_values, {batch, seq});
  const Tensor slots = ints(slot_values, {seq});
  const Shape kv_shape{batch, seq, kv_heads, q_shape[3]};
  check_gradients(
      {{random_tensor(q_shape, rng), random_tensor(kv_shape, rng), random_tensor(kv_shape, rng)},
       [=](Builder& b, const std::vector<ValueId>& p) {
         return b.attention(p[0], p[1], p[2], b.weight("mask", mask), b.weight("slots", slots),
                            scale, window);
       }});
}

TEST(Autodiff, GroupedAttentionWithPaddingMask) {
  // Row 1 is left-padded by one: its first key is masked, and its first query sees nothing.
  check_attention_gradients(5, {1, 1, 1, 1, 0, 1, 1, 1}, {2, 4, 4, 8}, 2, 0.35f);
}

TEST(Autodiff, AttentionOverManyQueries) {
  std::vector<int32_t> mask(2 * 17, 1);
  mask[17] = mask[18] = 0;
  check_attention_gradients(9, mask, {2, 17, 2, 8}, 1, 0.35f);
}

TEST(Autodiff, CausalAttentionOverTwoQueryBlocks) {
  check_attention_gradients(10, std::vector<int32_t>(70, 1), {1, 70, 2, 4}, 1, 0.5f);
}

TEST(Autodiff, SlidingWindowAttentionOverTwoQueryBlocks) {
  std::vector<int32_t> mask(2 * 70, 1);
  mask[70] = 0;
  check_attention_gradients(11, mask, {2, 70, 2, 4}, 1, 0.5f, 9);
}

// Router logits [rows, experts] whose values lie at least 0.1 apart in each row, so the finite
// differences' steps never change which experts a row picks.
Tensor separated_logits(int64_t rows, int64_t experts, std::mt19937& rng) {
  std::vector<float> values(static_cast<size_t>(rows * experts));
  std::vector<float> row(static_cast<size_t>(experts));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t e = 0; e < experts; ++e)
      row[static_cast<size_t>(e)] = 0.1f * static_cast<float>(e);
    std::shuffle(row.begin(), row.end(), rng);
    std::copy(row.begin(), row.end(), values.begin() + r * experts);
  }
  return Tensor::from_vector(values, {rows, experts});
}

TEST(Autodiff, MoeRouteRenormalizedAndNot) {
  for (const bool normed : {true, false}) {
    std::mt19937 rng(12);
    check_gradients({{separated_logits(5, 8, rng)}, [=](Builder& b, const std::vector<ValueId>& p) {
                       return b.moe_route(p[0], 3, normed);
                     }});
  }
}

TEST(Autodiff, MoeExpertsThroughTheirRouting) {
  std::mt19937 rng(13);
  const int64_t rows = 6, hidden = 8, experts = 4, inter = 5;
  std::vector<Tensor> params{random_tensor({rows, hidden}, rng),
                             separated_logits(rows, experts, rng)};
  for (int64_t e = 0; e < experts; ++e) {
    params.push_back(random_tensor({inter, hidden}, rng));
    params.push_back(random_tensor({inter, hidden}, rng));
    params.push_back(random_tensor({hidden, inter}, rng));
  }
  check_gradients(
      {params, [](Builder& b, const std::vector<ValueId>& p) {
         return b.moe_experts(p[0], b.moe_route(p[1], 2, true), {p.begin() + 2, p.end()});
       }});
}

// Rows sent to two expert-parallel ranks' slots and their results summed back (the all-to-all
// between them is the collectives tests'), through the routing's logits too.
TEST(Autodiff, MoeDispatchAndCombine) {
  std::mt19937 rng(15);
  const int64_t rows = 6, hidden = 8, experts = 4, ranks = 2, k = 2;
  const Tensor logits = separated_logits(rows, experts, rng);
  check_gradients({{random_tensor({rows, hidden}, rng)},
                   [=](Builder& b, const std::vector<ValueId>& p) {
                     const ValueId routing = b.moe_route(b.weight("logits", logits), k, true);
                     return b.moe_dispatch(p[0], routing, k, ranks);
                   },
                   false});
  const int64_t slots = ranks * rows * k;
  check_gradients({{random_tensor({slots, hidden}, rng), separated_logits(rows, experts, rng)},
                   [=](Builder& b, const std::vector<ValueId>& p) {
                     return b.moe_combine(p[0], b.moe_route(p[1], k, false), k, ranks);
                   },
                   false});
}

TEST(Autodiff, RouterLossOverTwoLayersWithAMaskedRow) {
  std::mt19937 rng(14);
  const Tensor mask = ints({1, 1, 0, 1, 1, 1}, {2, 3});
  const Tensor loss_scale = Tensor::from_vector(std::vector<float>{0.25f}, {1});
  check_gradients({{separated_logits(6, 4, rng), separated_logits(6, 4, rng)},
                   [=](Builder& b, const std::vector<ValueId>& p) {
                     return b.router_loss(b.weight("loss_scale", loss_scale),
                                          b.weight("mask", mask), {p[0], p[1]}, 2, 0.5f);
                   }});
}

TEST(Autodiff, ElementwiseChainWithSharedInput) {
  std::mt19937 rng(6);
  check_gradients({{random_tensor({5, 7}, rng), random_tensor({5, 7}, rng)},
                   [](Builder& b, const std::vector<ValueId>& p) {
                     return b.scale(b.add(b.mul(b.silu(p[0]), p[1]), p[0]), 0.7f);
                   }});
}

TEST(Autodiff, CrossEntropyIgnoresMinus100) {
  std::mt19937 rng(8);
  const Tensor targets = ints({2, graph::kIgnoreIndex, 5, 0, 3, 3}, {2, 3});
  check_gradients(
      {{random_tensor({2, 3, 6}, rng, 2.f)}, [=](Builder& b, const std::vector<ValueId>& p) {
         return b.cross_entropy(p[0], b.weight("targets", targets));
       }});
}

// Does node `a` compute what node `b` does: the same op over the same inputs, or over inputs that
// compute what b's do?
bool same_value(const graph::Graph& g, ValueId a, ValueId b) {
  if (a == b) return true;
  const graph::Node &x = g.nodes[static_cast<size_t>(a)], &y = g.nodes[static_cast<size_t>(b)];
  if (x.op != y.op || x.name != y.name || x.shape != y.shape ||
      x.inputs.size() != y.inputs.size() || x.program.instrs.size() != y.program.instrs.size()) {
    return false;
  }
  for (size_t i = 0; i < x.program.instrs.size(); ++i) {
    if (x.program.instrs[i].code != y.program.instrs[i].code) return false;
  }
  for (size_t i = 0; i < x.inputs.size(); ++i) {
    if (!same_value(g, x.inputs[i], y.inputs[i])) return false;
  }
  return true;
}

// How many nodes besides `v` compute what `v` does: its recomputations.
int copies_of(const graph::Graph& g, ValueId v) {
  int copies = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    copies += static_cast<ValueId>(i) != v && same_value(g, static_cast<ValueId>(i), v);
  }
  return copies;
}

// What the training graph keeps and what it makes again: an elementwise value that only the
// backward pass's elementwise chains read is computed again there (inside them, once fused:
// no pass over memory) instead of kept; a norm, an elementwise value a product reads, a weight
// passed through one and a product are kept. The gradient of logits read by the loss alone is
// written over them. Gradients as finite differences say.
TEST(Autodiff, RecomputesWhatOnlyElementwiseChainsReadAndWritesTheLossGradientOverTheLogits) {
  std::mt19937 rng(12);
  const Tensor targets = ints({2, graph::kIgnoreIndex, 5, 0, 3, 3}, {2, 3});
  ValueId norm = -1, gate = -1, gated = -1, scaled = -1, logits = -1;
  const GradCase c{
      {random_tensor({2, 3, 8}, rng), random_tensor({8}, rng), random_tensor({6, 8}, rng)},
      [&](Builder& b, const std::vector<ValueId>& p) {
        norm = b.rms_norm(p[0], p[1], 1e-6f);
        gate = b.silu(norm);
        gated = b.mul(gate, norm);
        scaled = b.scale(p[2], 2.f);
        logits = b.linear(gated, scaled);
        return b.cross_entropy(logits, b.weight("targets", targets));
      }};
  check_gradients(c);

  ValueId y = -1;
  graph::Graph g = forward_graph(c, &y);
  Builder extend(std::move(g));
  const ValueId seed = extend.weight("dy", Tensor::from_vector(std::vector<float>{1.f}, {1}));
  g = extend.finish();
  ops::append_backward(g, y, seed, {0, 1, 2});
  EXPECT_EQ(copies_of(g, gate), 1) << "SiLU, read by the product rule's elementwise chain alone";
  EXPECT_EQ(copies_of(g, norm), 0);
  EXPECT_EQ(copies_of(g, gated), 0) << "read by the weight gradient's product";
  EXPECT_EQ(copies_of(g, scaled), 0) << "read by the input gradient's product";
  EXPECT_EQ(copies_of(g, logits), 0);
  const graph::Node* loss_grad = nullptr;
  for (const graph::Node& n : g.nodes) {
    if (n.op == graph::Op::kCrossEntropyGrad) loss_grad = &n;
  }
  ASSERT_NE(loss_grad, nullptr);
  EXPECT_TRUE(loss_grad->in_place);
  EXPECT_TRUE(graph::aliases_input(*loss_grad));
}

// Under autocast a weight's bf16 copy, read by the forward product and by the backward pass's
// product for the input gradient, is made once and kept, as the norm's output is.
TEST(Autodiff, KeepsTheBf16CopiesOfWeightsForTheBackwardPass) {
  std::mt19937 rng(13);
  Builder b;
  b.autocast(DType::bf16);
  const ValueId x = b.weight("x", random_tensor({1, 3, 8}, rng));  // not a matrix: not cast
  const ValueId norm = b.weight("norm", random_tensor({8}, rng));
  const ValueId w_copy = b.weight("w", random_tensor({6, 8}, rng));
  const ValueId w = b.node(w_copy).inputs[0];  // the weight itself, which autodiff differentiates
  ASSERT_EQ(b.node(w).op, graph::Op::kWeight);
  const ValueId logits = b.linear(b.rms_norm(x, norm, 1e-6f), w_copy);
  const ValueId y = b.cross_entropy(logits, b.weight("targets", ints({1, 5, 0}, {1, 3})));
  b.output(y);
  const ValueId seed = b.weight("dy", Tensor::from_vector(std::vector<float>{1.f}, {1}));
  graph::Graph g = b.finish();
  ops::append_backward(g, y, seed, {x, norm, w});
  int weight_copies = 0, norms = 0;
  for (const graph::Node& n : g.nodes) {
    weight_copies += n.op == graph::Op::kCast && n.inputs[0] == w;
    norms += n.op == graph::Op::kRmsNorm;
  }
  EXPECT_EQ(weight_copies, 1);
  EXPECT_EQ(norms, 1);
}

// Under autocast the gradient of the MLP's gating (the input of its down product) comes back in
// bf16, as torch's does, and the gating's backward reads it so (graph::fold_widening_casts: no
// f32 copy is made); the input gradients of gate and up stay f32 for the norm's backward.
TEST(Autodiff, TheGatingsGradientComesBackInBf16) {
  std::mt19937 rng(14);
  Builder b;
  b.autocast(DType::bf16);
  const ValueId x = b.weight("x", random_tensor({1, 3, 8}, rng));
  const ValueId norm = b.weight("norm", random_tensor({8}, rng));
  const ValueId h = b.rms_norm(x, norm, 1e-6f);
  const ValueId gate = b.autocast_linear(h, b.weight("gate", random_tensor({12, 8}, rng)));
  const ValueId up = b.autocast_linear(h, b.weight("up", random_tensor({12, 8}, rng)));
  const ValueId down = b.weight("down", random_tensor({6, 12}, rng));
  const ValueId logits = b.linear(b.mul(b.silu(gate), up), down);
  const ValueId y = b.cross_entropy(logits, b.weight("targets", ints({1, 5, 0}, {1, 3})));
  b.output(y);
  const ValueId seed = b.weight("dy", Tensor::from_vector(std::vector<float>{1.f}, {1}));
  graph::Graph g = b.finish();
  g.outputs.push_back(ops::append_backward(g, y, seed, {x})[0]);
  std::vector<DType> input_grads;  // by the weight's rows: 6 for down, 12 for gate and up
  for (const graph::Node& n : g.nodes) {
    if (n.op == graph::Op::kLinearGradInput) input_grads.push_back(n.dtype);
  }
  EXPECT_EQ(input_grads, (std::vector<DType>{DType::bf16, DType::f32, DType::f32}));

  const fusion::Plan plan = cpu::cpu_plan(g);
  for (graph::ValueId id : plan.schedule) {
    const graph::Node& n = plan.graph.nodes[static_cast<size_t>(id)];
    EXPECT_FALSE(n.op == graph::Op::kCast && n.dtype == DType::f32) << plan.graph.describe(id);
  }
}

// Under autocast the gradient of attention's output (the rows of its output product) comes back
// in bf16 too, and attention's backward reads it as it is and writes q's, k's and v's in bf16, as
// torch's scaled_dot_product_attention does: the only widening casts are of those three for the
// f32 leaves here; the CPU's compiled step equal to its eager one.
TEST(Autodiff, AttentionsOutputGradientComesBackInBf16) {
  std::mt19937 rng(15);
  Builder b;
  b.autocast(DType::bf16);
  const ValueId q = b.weight("q", random_tensor({1, 3, 2, 4}, rng));
  const ValueId k = b.weight("k", random_tensor({1, 3, 1, 4}, rng));
  const ValueId v = b.weight("v", random_tensor({1, 3, 1, 4}, rng));
  const ValueId a = b.attention(q, k, v, b.weight("mask", ints({1, 1, 1}, {1, 3})),
                                b.weight("slots", ints({0, 1, 2}, {3})), 0.5f);
  const ValueId residual = b.weight("residual", random_tensor({1, 3, 6}, rng));
  const ValueId o =
      b.add(b.linear(b.reshape(a, {1, 3, 8}), b.weight("o", random_tensor({6, 8}, rng))), residual);
  const ValueId y = b.cross_entropy(o, b.weight("targets", ints({1, 5, 0}, {1, 3})));
  b.output(y);
  const ValueId seed = b.weight("dy", Tensor::from_vector(std::vector<float>{1.f}, {1}));
  graph::Graph g = b.finish();
  for (const ValueId grad : ops::append_backward(g, y, seed, {q, k, v})) g.outputs.push_back(grad);
  int bf16_dy = 0, widened = 0;
  for (const graph::Node& n : g.nodes) {
    if (n.op == graph::Op::kLinearGradInput) {
      EXPECT_EQ(n.dtype, DType::bf16);
    }
    if (n.op == graph::Op::kAttentionGrad) {
      bf16_dy += g.nodes[static_cast<size_t>(n.inputs[5])].dtype == DType::bf16;
      EXPECT_EQ(n.dtype, DType::bf16);
    }
    if (n.op == graph::Op::kCast && n.dtype == DType::f32) {
      ++widened;
      EXPECT_EQ(g.nodes[static_cast<size_t>(n.inputs[0])].op, graph::Op::kView);
    }
  }
  EXPECT_EQ(bf16_dy, 1);
  EXPECT_EQ(widened, 3) << "q's, k's and v's gradients, for their f32 leaves";

  graph::Backend& cpu = graph::backend_for(kCpu);
  const std::vector<Tensor> compiled = cpu.compile(g)->run({}).outputs;
  const std::vector<Tensor> eager = cpu.run_eager(g, {});
  for (size_t i = 0; i < eager.size(); ++i) {
    EXPECT_EQ(compiled[i].to_f32_vector(), eager[i].to_f32_vector()) << "output " << i;
  }
}

TEST(Autodiff, RejectsValuesThatDoNotReachTheOutput) {
  Builder b;
  const ValueId x = b.weight("x", Tensor::zeros({2, 2}, DType::f32));
  const ValueId unused = b.weight("unused", Tensor::zeros({2, 2}, DType::f32));
  const ValueId y = b.silu(x);
  const ValueId dy = b.weight("dy", Tensor::zeros({2, 2}, DType::f32));
  graph::Graph g = b.finish();
  EXPECT_THROW(ops::append_backward(g, y, dy, {unused}), Error);
}

TEST(Autodiff, RejectsAttentionOverACache) {
  Builder b;
  const ValueId q = b.weight("q", Tensor::zeros({1, 1, 2, 4}, DType::f32));
  const ValueId cache = b.state("cache", {1, 4, 2, 4}, DType::f32);
  const ValueId slots = b.input("slots", {1}, DType::i32);
  const ValueId mask = b.input("mask", {1, 4}, DType::i32);
  const ValueId y = b.attention(q, cache, cache, mask, slots, 0.5f);
  const ValueId dy = b.weight("dy", Tensor::zeros({1, 1, 2, 4}, DType::f32));
  graph::Graph g = b.finish();
  EXPECT_THROW(ops::append_backward(g, y, dy, {q}), Error);
}

}  // namespace
}  // namespace tfm
