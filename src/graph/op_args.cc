#include "graph/op_args.h"

#include <utility>

#include "tfm/error.h"

namespace tfm::graph {
namespace {

void expect(const Node& n, Op op) {
  if (n.op != op) {
    throw Error(std::string("[graph] a ") + op_name(n.op) + " node read as " + op_name(op));
  }
}

void expect_inputs(const Node& n, size_t count) {
  if (n.inputs.size() != count) {
    throw Error(std::string("[graph] ") + op_name(n.op) + " '" + n.name + "' has " +
                std::to_string(n.inputs.size()) + " inputs, its flags say " +
                std::to_string(count));
  }
}

// Reads a node's inputs in order: required ones, then optional ones present when a flag says so.
class Reader {
 public:
  explicit Reader(const Node& n) : n_(n) {}
  ValueId next() {
    if (at_ >= n_.inputs.size()) expect_inputs(n_, at_ + 1);
    return n_.inputs[at_++];
  }
  ValueId next_if(bool present) { return present ? next() : -1; }
  size_t left() const { return n_.inputs.size() - at_; }
  void done() const { expect_inputs(n_, at_); }

 private:
  const Node& n_;
  size_t at_ = 0;
};

// Appends the optional inputs that are given.
void push_given(std::vector<ValueId>& inputs, std::initializer_list<ValueId> optional) {
  for (ValueId v : optional) {
    if (v >= 0) inputs.push_back(v);
  }
}

// An op of `N` inputs, always the same, in its view's order.
template <typename Args, size_t N>
Args fixed_args(const Node& n, Op op) {
  expect(n, op);
  expect_inputs(n, N);
  return [&]<size_t... I>(std::index_sequence<I...>) { return Args{n.inputs[I]...}; }
  (std::make_index_sequence<N>());
}

// A backward op whose in-place form (Node::in_place) adds into its input 0 (`acc`), then reads two
// operands.
template <typename Args>
Args adding_args(const Node& n, Op op, ValueId Args::*acc, ValueId Args::*first,
                 ValueId Args::*second) {
  expect(n, op);
  Reader r(n);
  Args a;
  a.*acc = r.next_if(n.in_place);
  a.*first = r.next();
  a.*second = r.next();
  r.done();
  return a;
}

void set_adding(Node& n, ValueId acc, std::initializer_list<ValueId> operands) {
  n.inputs.clear();
  push_given(n.inputs, {acc});
  n.inputs.insert(n.inputs.end(), operands);
  n.in_place = acc >= 0;
}

}  // namespace

EmbeddingArgs embedding_args(const Node& n) {
  return fixed_args<EmbeddingArgs, 2>(n, Op::kEmbedding);
}

LinearArgs linear_args(const Node& n) {
  expect(n, Op::kLinear);
  Reader r(n);
  LinearArgs a{r.next(), r.next()};
  a.bias = r.next_if(r.left() > (n.residual ? 1u : 0u));
  a.residual = r.next_if(n.residual);
  r.done();
  return a;
}

GatedLinearArgs gated_linear_args(const Node& n) {
  expect(n, Op::kGatedLinear);
  Reader r(n);
  GatedLinearArgs a{r.next(), r.next(), r.next()};
  if (r.left() > (n.normed ? 1u : 0u)) {
    a.bias_gate = r.next();
    a.bias_up = r.next();
  }
  a.norm = r.next_if(n.normed);
  r.done();
  return a;
}

QkvLinearArgs qkv_linear_args(const Node& n) {
  expect(n, Op::kQkvLinear);
  Reader r(n);
  QkvLinearArgs a{r.next(), {r.next(), r.next(), r.next()}};
  if (r.left() > (n.normed ? 1u : 0u)) a.bias = {r.next(), r.next(), r.next()};
  a.norm = r.next_if(n.normed);
  r.done();
  return a;
}

RmsNormArgs rms_norm_args(const Node& n) { return fixed_args<RmsNormArgs, 2>(n, Op::kRmsNorm); }

RopeArgs rope_args(const Node& n) {
  expect(n, Op::kRope);
  Reader r(n);
  RopeArgs a{r.next(), r.next(), r.next()};
  a.norm = r.next_if(n.normed);
  r.done();
  return a;
}

PrepareAttentionArgs prepare_attention_args(const Node& n) {
  expect(n, Op::kPrepareAttention);
  Reader r(n);
  PrepareAttentionArgs a{r.next(), r.next(), r.next(), r.next(),
                         r.next(), r.next(), r.next(), r.next()};
  if (r.left() > 0) {
    a.q_norm = r.next();
    a.k_norm = r.next();
  }
  r.done();
  return a;
}

CacheWriteArgs cache_write_args(const Node& n) {
  return fixed_args<CacheWriteArgs, 3>(n, Op::kCacheWrite);
}

AccumulateArgs accumulate_args(const Node& n) {
  return fixed_args<AccumulateArgs, 2>(n, Op::kAccumulate);
}

AttentionArgs attention_args(const Node& n) {
  return fixed_args<AttentionArgs, 5>(n, Op::kAttention);
}

ViewArgs view_args(const Node& n) {
  expect(n, Op::kView);
  Reader r(n);
  ViewArgs a{r.next()};
  while (r.left() > 0) a.after.push_back(r.next());
  return a;
}

CrossEntropyArgs cross_entropy_args(const Node& n) {
  expect(n, Op::kCrossEntropy);
  Reader r(n);
  CrossEntropyArgs a{r.next(), r.next()};
  a.d_loss = r.next_if(n.in_place);
  r.done();
  return a;
}

EmbeddingGradArgs embedding_grad_args(const Node& n) {
  return adding_args(n, Op::kEmbeddingGrad, &EmbeddingGradArgs::acc, &EmbeddingGradArgs::dy,
                     &EmbeddingGradArgs::ids);
}

LinearGradInputArgs linear_grad_input_args(const Node& n) {
  return adding_args(n, Op::kLinearGradInput, &LinearGradInputArgs::sum, &LinearGradInputArgs::dy,
                     &LinearGradInputArgs::w);
}

LinearGradWeightArgs linear_grad_weight_args(const Node& n) {
  return adding_args(n, Op::kLinearGradWeight, &LinearGradWeightArgs::acc,
                     &LinearGradWeightArgs::dy, &LinearGradWeightArgs::x);
}

RmsNormGradInputArgs rms_norm_grad_input_args(const Node& n) {
  expect(n, Op::kRmsNormGradInput);
  Reader r(n);
  RmsNormGradInputArgs a{r.next(), r.next(), r.next()};
  a.residual = r.next_if(n.residual);
  a.positions = r.next_if(n.rotated);
  a.inv_freq = r.next_if(n.rotated);
  a.weight_grad = r.next_if(n.adds_weight_grad);
  r.done();
  return a;
}

RmsNormGradWeightArgs rms_norm_grad_weight_args(const Node& n) {
  return adding_args(n, Op::kRmsNormGradWeight, &RmsNormGradWeightArgs::acc,
                     &RmsNormGradWeightArgs::x, &RmsNormGradWeightArgs::dy);
}

RopeGradArgs rope_grad_args(const Node& n) { return fixed_args<RopeGradArgs, 3>(n, Op::kRopeGrad); }

AttentionGradArgs attention_grad_args(const Node& n) {
  expect(n, Op::kAttentionGrad);
  Reader r(n);
  AttentionGradArgs a{r.next(), r.next(), r.next(), r.next(), r.next(), r.next()};
  a.forward = r.next_if(r.left() > 0);
  r.done();
  return a;
}

CrossEntropyGradArgs cross_entropy_grad_args(const Node& n) {
  return fixed_args<CrossEntropyGradArgs, 3>(n, Op::kCrossEntropyGrad);
}

AdamWArgs adamw_args(const Node& n) { return fixed_args<AdamWArgs, 5>(n, Op::kAdamW); }

ValueId operand(const Node& n) {
  if (n.inputs.empty()) {
    throw Error(std::string("[graph] ") + op_name(n.op) + " '" + n.name + "' has no input");
  }
  return n.inputs[0];
}

void set_args(Node& n, const LinearArgs& a) {
  n.inputs = {a.x, a.w};
  push_given(n.inputs, {a.bias, a.residual});
  n.residual = a.residual >= 0;
}

void set_args(Node& n, const GatedLinearArgs& a) {
  if ((a.bias_gate >= 0) != (a.bias_up >= 0)) {
    throw Error("[gated_linear] give both biases or neither");
  }
  n.inputs = {a.x, a.w_gate, a.w_up};
  push_given(n.inputs, {a.bias_gate, a.bias_up, a.norm});
  n.normed = a.norm >= 0;
}

void set_args(Node& n, const QkvLinearArgs& a) {
  const bool biases = a.bias[0] >= 0;
  for (ValueId b : a.bias) {
    if ((b >= 0) != biases) throw Error("[qkv_linear] give all three biases or none");
  }
  n.inputs = {a.x, a.w[0], a.w[1], a.w[2]};
  push_given(n.inputs, {a.bias[0], a.bias[1], a.bias[2], a.norm});
  n.normed = a.norm >= 0;
}

void set_args(Node& n, const RopeArgs& a) {
  n.inputs = {a.x, a.positions, a.inv_freq};
  push_given(n.inputs, {a.norm});
  n.normed = a.norm >= 0;
}

void set_args(Node& n, const PrepareAttentionArgs& a) {
  if ((a.q_norm >= 0) != (a.k_norm >= 0)) {
    throw Error("[prepare_attention] give both q and k norms or neither");
  }
  n.inputs = {a.q, a.k, a.v, a.positions, a.inv_freq, a.slots, a.k_cache, a.v_cache};
  push_given(n.inputs, {a.q_norm, a.k_norm});
}

void set_args(Node& n, const ViewArgs& a) {
  n.inputs = {a.x};
  n.inputs.insert(n.inputs.end(), a.after.begin(), a.after.end());
}

void set_args(Node& n, const CrossEntropyArgs& a) {
  n.inputs = {a.logits, a.targets};
  push_given(n.inputs, {a.d_loss});
  n.in_place = a.d_loss >= 0;
}

void set_args(Node& n, const EmbeddingGradArgs& a) { set_adding(n, a.acc, {a.dy, a.ids}); }

void set_args(Node& n, const LinearGradInputArgs& a) { set_adding(n, a.sum, {a.dy, a.w}); }

void set_args(Node& n, const LinearGradWeightArgs& a) { set_adding(n, a.acc, {a.dy, a.x}); }

void set_args(Node& n, const RmsNormGradInputArgs& a) {
  if ((a.positions >= 0) != (a.inv_freq >= 0)) {
    throw Error("[rms_norm_grad_input] give RoPE's positions and frequencies both or neither");
  }
  n.inputs = {a.x, a.w, a.dy};
  push_given(n.inputs, {a.residual, a.positions, a.inv_freq, a.weight_grad});
  n.residual = a.residual >= 0;
  n.rotated = a.positions >= 0;
  n.adds_weight_grad = a.weight_grad >= 0;
}

void set_args(Node& n, const RmsNormGradWeightArgs& a) { set_adding(n, a.acc, {a.x, a.dy}); }

void set_args(Node& n, const AttentionGradArgs& a) {
  n.inputs = {a.q, a.k, a.v, a.mask, a.slots, a.dy};
  push_given(n.inputs, {a.forward});
}

AttentionArgs attention_operands(const AttentionGradArgs& a) {
  return {a.q, a.k, a.v, a.mask, a.slots};
}

std::vector<ValueId> product_weights(const Node& n) {
  switch (n.op) {
    case Op::kLinear:
      return {linear_args(n).w};
    case Op::kGatedLinear: {
      const GatedLinearArgs a = gated_linear_args(n);
      return {a.w_gate, a.w_up};
    }
    case Op::kQkvLinear: {
      const QkvLinearArgs a = qkv_linear_args(n);
      return {a.w.begin(), a.w.end()};
    }
    default:
      throw Error(std::string("[graph] ") + op_name(n.op) + " is not a product");
  }
}

}  // namespace tfm::graph
