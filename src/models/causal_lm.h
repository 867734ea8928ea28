// The model behind tfm::CausalLM: config, weights prepared for the device, KV caches and the
// graph cache. generate() (src/generation) drives it one forward step at a time.
#pragma once

#include <filesystem>
#include <memory>
#include <vector>

#include "graph/cache.h"
#include "models/decoder.h"
#include "tfm/graph_stats.h"
#include "tfm/load_options.h"

namespace tfm {

// One static KV cache: per layer a key and a value buffer [batch, len, kv_heads, head_dim] in the
// model's dtype, allocated once on the model's device and written in place by every step.
struct KvCache {
  int64_t batch = 0;
  int64_t len = 0;
  std::vector<Tensor> buffers;  // k0, v0, k1, v1, ...
};

// The host-side inputs of one forward step (all i32).
struct StepInputs {
  Tensor input_ids;       // [batch, seq]
  Tensor position_ids;    // [batch, seq]
  Tensor cache_slots;     // [seq]
  Tensor attention_mask;  // [batch, cache len]
};

// The host-side inputs of one training step (i32 [batch, seq] each, loss_scale f32 [1]).
struct TrainInputs {
  Tensor input_ids;
  Tensor attention_mask;
  Tensor targets;     // labels shifted left by one: row r's target is the token after r
  Tensor loss_scale;  // the gradient of the summed loss, e.g. 1 / number of targets
};

struct LossAndGrads {
  double loss_sum = 0;        // cross-entropy summed over the targets
  std::vector<Tensor> grads;  // one per weight, in models::for_each_weight order, on the host
};

class CausalLMImpl {
 public:
  // Under tensor parallelism `weights` are this rank's shards (models::tensor_parallel_shard).
  CausalLMImpl(ModelConfig config, models::DecoderFeatures features, models::DecoderWeights weights,
               Device device, DType dtype, std::string name, models::Parallelism tp = {},
               DistributedConfig distributed = {}, graph::CompileOptions compile = {});

  const ModelConfig& config() const { return *config_; }
  Device device() const { return device_; }
  DType dtype() const { return dtype_; }
  const std::string& name() const { return name_; }

  // The KV cache for `batch` rows of `len` slots. The last one is kept and handed out again for
  // the same shape, as transformers' StaticCache is: no new allocation, and compiled graphs that
  // captured its addresses (CUDA Graphs) replay as they are. Its old rows are never read: a
  // step sees only the slots its attention mask marks, which this call's steps write first. A
  // cache larger than the machine's memory is refused (tfm::Error saying both sizes).
  KvCache& cache_for(int64_t batch, int64_t len);
  // Logits f32 [batch, seq or 1, vocab] on the host; with `argmax`, the greedy token ids i32
  // [batch, seq or 1] instead (chosen on the device: no logits to copy back).
  Tensor step(const StepInputs& inputs, KvCache& cache, bool all_logits, bool eager,
              bool argmax = false);

  // Forward, loss and backward as one compiled graph per [batch, seq] (or run eagerly): adds the
  // step's gradients into `grads` (one f32 tensor per weight in for_each_weight order, of this
  // rank's shard, on the model's device; they become the buffers the run returns, Executable::run)
  // and returns the summed loss. The gradients never leave the device. `autocast` bf16 computes
  // the matrix products in bf16 (TrainingArguments.bf16). `grads` are the same buffers on every
  // call (the Trainer's flat gradient blocks): the compiled step is laid out by where they lie.
  double train_step_into(const TrainInputs& inputs, std::vector<Tensor>& grads, bool eager,
                         DType autocast = DType::f32);
  // The summed loss alone, for evaluation.
  double eval_step(const TrainInputs& inputs, bool eager, DType autocast = DType::f32);
  // The same from zero gradients, returned on the host.
  LossAndGrads train_step(const TrainInputs& inputs, bool eager, bool with_grads = true,
                          DType autocast = DType::f32);
  // The weights in for_each_weight order: what an optimizer updates in place.
  void for_each_weight(const models::WeightVisitor& visit);
  // Token rows the training step's output layer and loss take at a time (0, the default: the
  // fewest even chunks whose logits stay within models::kLossChunkBytes). The result is the same
  // either way.
  void set_loss_chunk_rows(int64_t rows) { loss_chunk_rows_ = rows; }
  // This model's sequences never pass `tokens` tokens, whatever the KV cache's length (the serving
  // engine's rows share a longer cache, their entries spread over it): a sliding window that long
  // or longer hides nothing, and the graphs built from here on leave it out.
  void limit_sequence_length(int64_t tokens);

  const GraphCacheStats& graph_stats() const { return graphs_.stats(); }
  const models::Parallelism& parallelism() const { return tp_; }
  const DistributedConfig& distributed() const { return distributed_; }
  // How the graphs are partitioned over the devices (none: one device or one process per rank).
  const graph::Partitioning& partitioning() const { return graphs_.options().partitioning; }
  size_t weight_bytes() const { return weight_bytes_; }

 private:
  graph::Graph build(const graph::Signature& signature) const;
  // train_step_into's work; `grads_kept`: the graph is built bound to `grads`
  // (models::build_decoder_training_graph's grad_buffers), which every later run must be given.
  double run_training_graph(const TrainInputs& inputs, std::vector<Tensor>& grads, bool eager,
                            DType autocast, bool grads_kept);
  // Under tensor parallelism each rank's embedding holds only its share of the vocabulary and
  // reads other ids as zero rows, so an id outside the whole vocabulary is caught here.
  void check_ids(const Tensor& ids) const;

  std::unique_ptr<ModelConfig> config_;
  models::Parallelism tp_;
  DistributedConfig distributed_;
  ModelConfig local_config_;  // this rank's share of the heads (the whole config without TP)
  models::DecoderFeatures features_;
  models::DecoderWeights weights_;
  Device device_;
  DType dtype_;
  std::string name_;
  size_t weight_bytes_ = 0;
  int64_t loss_chunk_rows_ = 0;
  graph::GraphCache graphs_;
  KvCache cache_;
};

// Does `device`'s backend run `distributed` (more than one rank) as one program of this process
// partitioned over its devices (a compiler backend), rather than as a process per rank?
bool partitions_programs(const Device& device, const DistributedConfig& distributed);
// Loads weights named by the one weight listing, checking each shape, prepared for `device`.
std::unique_ptr<CausalLMImpl> load_causal_lm(const std::string& id_or_path,
                                             const LoadOptions& options,
                                             const models::Parallelism& tp = {});
// A model with fresh weights (models::init_weights) for the architecture in `config_json`.
std::unique_ptr<CausalLMImpl> init_causal_lm(const std::filesystem::path& config_json,
                                             const LoadOptions& options, uint64_t seed,
                                             const models::Parallelism& tp = {});
// config.json and model.safetensors (weights in `dtype`, a tied lm_head left out) that
// transformers' from_pretrained loads.
void save_causal_lm(CausalLMImpl& model, const std::filesystem::path& dir, DType dtype);

}  // namespace tfm
