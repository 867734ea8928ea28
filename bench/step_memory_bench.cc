// Device memory of a training step, known without running it: plans the step's graph for a
// config.json at [batch, seq] (the plan every backend executes) and adds the training state the
// Trainer keeps beside it. Prints JSON: the activation arena (the largest buffer a step
// allocates), the f32 weights, their gradients and AdamW's two moments. Nothing is allocated
// beyond the weights' descriptions.
//   step_memory_bench CONFIG_JSON [--batch 8] [--seq 1024] [--bf16]
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "graph/plan.h"
#include "io/model_config.h"
#include "models/architectures.h"
#include "models/decoder.h"

namespace {

double mib(double bytes) { return bytes / (1 << 20); }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: step_memory_bench CONFIG_JSON [--batch N] [--seq N] [--bf16]\n");
    return 2;
  }
  int64_t batch = 8, seq = 1024;
  tfm::DType autocast = tfm::DType::f32;
  for (int i = 2; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--bf16") {
      autocast = tfm::DType::bf16;
    } else if ((flag == "--batch" || flag == "--seq") && i + 1 < argc) {
      (flag == "--batch" ? batch : seq) = std::atoll(argv[++i]);
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
    const tfm::graph::Plan plan = tfm::graph::plan_graph(tfm::models::build_decoder_training_graph(
        config, features, weights, tfm::models::rope_tables(config, seq), batch, seq, true,
        autocast));
    const double arena = static_cast<double>(plan.arena_bytes);
    std::printf(
        "{\"batch\": %lld, \"seq\": %lld, \"bf16\": %s, \"nodes\": %zu, \"arena_mib\": %.1f, "
        "\"weights_mib\": %.1f, \"grads_mib\": %.1f, \"adamw_mib\": %.1f, \"total_mib\": %.1f}\n",
        static_cast<long long>(batch), static_cast<long long>(seq),
        autocast == tfm::DType::bf16 ? "true" : "false", plan.graph.nodes.size(), mib(arena),
        mib(weight_bytes), mib(weight_bytes), mib(2 * weight_bytes),
        mib(arena + 4 * weight_bytes));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "step_memory_bench: %s\n", e.what());
    return 1;
  }
}
