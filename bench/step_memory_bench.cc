// Device memory of a training step, known without running it: plans the step's graph for a
// config.json at [batch, seq] (the plan every backend executes) and adds the training state the
// Trainer keeps beside it. Prints JSON: the activation arena (the largest buffer a step
// allocates), the f32 weights, their gradients and AdamW's two moments. Nothing is allocated
// beyond the weights' descriptions. With --traffic, also a line per kind of step the plan runs
// (op and output dtype): how many, the bytes they read and write (each input and output whole),
// and the products' floating-point operations: what the plan asks of memory, device independent.
// --loss-chunk-rows N plans the output layer and loss over N token rows at a time (0, the default:
// the Trainer's automatic chunks).
//   step_memory_bench CONFIG_JSON [--batch 8] [--seq 1024] [--bf16] [--traffic]
//                     [--loss-chunk-rows N]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "backends/cpu/cpu_backend.h"
#include "graph/effects.h"
#include "graph/op_args.h"
#include "io/model_config.h"
#include "models/architectures.h"
#include "models/decoder.h"

namespace {

double mib(double bytes) { return bytes / (1 << 20); }

double numel(const tfm::graph::Node& n) { return static_cast<double>(tfm::shape_numel(n.shape)); }

double bytes_of(const tfm::graph::Node& n) { return numel(n) * tfm::dtype_size(n.dtype); }

// Multiply-adds x 2 of a matrix product step; 0 for the others.
double product_flops(const tfm::graph::Graph& g, const tfm::graph::Node& n) {
  using tfm::graph::Op;
  const auto node = [&](tfm::graph::ValueId v) -> const tfm::graph::Node& {
    return g.nodes[static_cast<size_t>(v)];
  };
  switch (n.op) {
    case Op::kLinear:  // out [..., N] from w [N, K]
      return 2 * numel(n) * static_cast<double>(node(tfm::graph::linear_args(n).w).shape[1]);
    case Op::kLinearGradInput:  // out [..., K] from w [N, K]
      return 2 * numel(n) *
             static_cast<double>(node(tfm::graph::linear_grad_input_args(n).w).shape[0]);
    case Op::kLinearGradWeight: {  // out [N, K] over the rows of x [..., K]
      const tfm::graph::Node& x = node(tfm::graph::linear_grad_weight_args(n).x);
      return 2 * numel(n) * numel(x) / static_cast<double>(x.shape.back());
    }
    default:
      return 0;
  }
}

void print_traffic(const tfm::fusion::Plan& plan) {
  using tfm::graph::Op;
  struct Kind {
    int steps = 0;
    double bytes = 0, flops = 0;
  };
  std::map<std::string, Kind> kinds;
  Kind all;
  for (tfm::graph::ValueId id : plan.schedule) {
    const tfm::graph::Node& n = plan.graph.nodes[static_cast<size_t>(id)];
    // Views of a buffer move nothing.
    if (n.op == Op::kReshape || n.op == Op::kView || n.op == Op::kCopyToGroup) continue;
    Kind step;
    step.steps = 1;
    step.bytes = static_cast<double>(tfm::fusion::output_bytes(n, plan.alignment));
    for (tfm::graph::ValueId in : n.inputs) {
      step.bytes += bytes_of(plan.graph.nodes[static_cast<size_t>(in)]);
    }
    // A norm gradient that adds its weight's gradient into an accumulator writes that too, a
    // loss its gradient over the logits, a cache write its rows.
    for (size_t written : tfm::graph::written_inputs(n)) {
      if (n.op == Op::kRmsNormGradInput || n.op == Op::kCrossEntropy) {
        step.bytes += bytes_of(plan.graph.nodes[static_cast<size_t>(n.inputs[written])]);
      }
    }
    step.flops = product_flops(plan.graph, n);
    for (Kind* k : {&kinds[std::string(tfm::graph::op_name(n.op)) + " " +
                           std::string(tfm::dtype_name(n.dtype))],
                    &all}) {
      k->steps += step.steps;
      k->bytes += step.bytes;
      k->flops += step.flops;
    }
  }
  for (const auto& [name, k] : kinds) {
    std::printf("{\"op\": \"%s\", \"steps\": %d, \"gb\": %.2f, \"product_gflop\": %.0f}\n",
                name.c_str(), k.steps, k.bytes / 1e9, k.flops / 1e9);
  }
  std::printf("{\"op\": \"all\", \"steps\": %d, \"gb\": %.2f, \"product_gflop\": %.0f}\n",
              all.steps, all.bytes / 1e9, all.flops / 1e9);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: step_memory_bench CONFIG_JSON [--batch N] [--seq N] [--bf16] "
                 "[--traffic] [--loss-chunk-rows N]\n");
    return 2;
  }
  int64_t batch = 8, seq = 1024, loss_chunk_rows = 0;
  tfm::DType autocast = tfm::DType::f32;
  bool traffic = false;
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--bf16") {
      autocast = tfm::DType::bf16;
    } else if (flag == "--traffic") {
      traffic = true;
    } else if ((flag == "--batch" || flag == "--seq") && i + 1 < argc) {
      (flag == "--batch" ? batch : seq) = std::atoll(argv[++i]);
    } else if (flag == "--loss-chunk-rows" && i + 1 < argc) {
      loss_chunk_rows = std::atoll(argv[++i]);
    } else {
      std::fprintf(stderr, "unknown argument '%s'\n", argv[i]);
      return 2;
    }
  }
  try {
    const tfm::ModelConfig config = tfm::load_model_config(argv[1]);
    const tfm::models::DecoderFeatures features = tfm::models::features_for(config, argv[1]);
    tfm::models::DecoderWeights weights;
    double weight_bytes = 0;
    tfm::models::for_each_weight(
        config, features, weights,
        [&](const std::string&, tfm::Tensor& t, const tfm::Shape& shape) {
          t = tfm::Tensor::empty(shape, tfm::DType::f32);  // never written: only its shape counts
          weight_bytes += static_cast<double>(t.nbytes());
        });
    const tfm::fusion::Plan plan = tfm::cpu::cpu_plan(tfm::models::build_decoder_training_graph(
        config, features, weights, tfm::models::rope_tables(config, seq), batch, seq, true,
        autocast, {}, loss_chunk_rows));
    const double arena = static_cast<double>(plan.arena_bytes);
    std::printf(
        "{\"batch\": %lld, \"seq\": %lld, \"bf16\": %s, \"nodes\": %zu, \"arena_mib\": %.1f, "
        "\"weights_mib\": %.1f, \"grads_mib\": %.1f, \"adamw_mib\": %.1f, \"total_mib\": %.1f}\n",
        static_cast<long long>(batch), static_cast<long long>(seq),
        autocast == tfm::DType::bf16 ? "true" : "false", plan.graph.nodes.size(), mib(arena),
        mib(weight_bytes), mib(weight_bytes), mib(2 * weight_bytes), mib(arena + 4 * weight_bytes));
    if (traffic) print_traffic(plan);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "step_memory_bench: %s\n", e.what());
    return 1;
  }
}
