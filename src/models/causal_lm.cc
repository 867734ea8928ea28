#include "models/causal_lm.h"

#include <unistd.h>

#include <fstream>

#include "core/device_registry.h"
#include "graph/backend.h"
#include "io/checkpoint.h"
#include "io/hub.h"
#include "io/safetensors.h"
#include "models/architectures.h"
#include "models/init_weights.h"
#include "models/step_inputs.h"
#include "tfm/error.h"
#include "tfm/log.h"

namespace tfm {
namespace {

graph::CompileOptions with_mesh(graph::CompileOptions options, graph::Mesh mesh) {
  options.mesh = std::move(mesh);
  return options;
}

}  // namespace

CausalLMImpl::CausalLMImpl(ModelConfig config, models::DecoderFeatures features,
                           models::DecoderWeights weights, Device device, DType dtype,
                           std::string name, models::Parallelism tp, DistributedConfig distributed,
                           graph::CompileOptions compile)
    : config_(std::make_unique<ModelConfig>(std::move(config))),
      tp_(models::with_kv_replicas(std::move(tp), *config_)),
      distributed_(distributed),
      local_config_(models::local_config(*config_, tp_)),
      features_(features),
      weights_(std::move(weights)),
      device_(device),
      dtype_(dtype),
      name_(std::move(name)),
      graphs_(name_, device, with_mesh(compile, models::device_mesh(tp_, device))) {
  models::for_each_weight(
      *config_, features_, weights_, [this](const std::string& name, Tensor& t, const Shape& full) {
        weight_bytes_ += t.nbytes();
        const int64_t rows = models::tensor_parallel_rows(name, full, *config_, tp_);
        if (rows % tp_.fsdp_size != 0 && !models::held_whole(name, tp_)) {
          tp_.unpadded_rows[name] = rows;
        }
      });
}

KvCache& CausalLMImpl::cache_for(int64_t batch, int64_t len) {
  if (cache_.batch == batch && cache_.len == len) return cache_;
  if (device_ == kCpu) {
    // Past the machine's memory the allocation may still be granted (overcommit) and fail only
    // as it is filled: refused before.
    const double bytes = 2.0 * static_cast<double>(local_config_.num_hidden_layers) *
                         static_cast<double>(batch) * static_cast<double>(len) *
                         static_cast<double>(local_config_.num_key_value_heads) *
                         static_cast<double>(config_->head_dim * dtype_size(dtype_));
    const double memory = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
                          static_cast<double>(::sysconf(_SC_PAGESIZE));
    if (bytes > memory) {
      throw Error("needs " + std::to_string(static_cast<int64_t>(bytes / (1 << 30))) +
                  " GiB, more than this machine's " +
                  std::to_string(static_cast<int64_t>(memory / (1 << 30))) + " GiB");
    }
  }
  cache_ = {};  // frees the old buffers before the new ones are allocated
  KvCache cache{batch, len, {}};
  const Shape shape{batch, len, local_config_.num_key_value_heads, config_->head_dim};
  for (int64_t i = 0; i < 2 * config_->num_hidden_layers; ++i) {
    cache.buffers.push_back(Tensor::zeros(shape, dtype_, device_));
  }
  cache_ = cache;
  return cache_;
}

graph::Graph CausalLMImpl::build(const graph::Signature& signature) const {
  return models::build_decoder_graph(local_config_, features_, weights_,
                                     models::rope_tables(*config_, signature.cache_len), signature,
                                     dtype_, tp_);
}

void CausalLMImpl::check_ids(const Tensor& ids) const {
  // Without tensor parallelism the embedding kernels check ids against their whole table.
  if (tp_.size == 1) return;
  const int32_t* v = ids.data_as<int32_t>();
  for (int64_t i = 0; i < ids.numel(); ++i) {
    if (v[i] < 0 || v[i] >= config_->vocab_size) {
      throw Error("[embedding] token id " + std::to_string(v[i]) + " outside the vocabulary (" +
                  std::to_string(config_->vocab_size) + " tokens)");
    }
  }
}

Tensor CausalLMImpl::step(const StepInputs& in, KvCache& cache, bool all_logits, bool eager,
                          bool argmax) {
  check_ids(in.input_ids);
  graph::Signature signature{in.input_ids.dim(0), in.input_ids.dim(1), cache.len, all_logits};
  signature.argmax = argmax;
  std::vector<Tensor> inputs{in.input_ids, in.position_ids, in.cache_slots, in.attention_mask};
  inputs.insert(inputs.end(), cache.buffers.begin(), cache.buffers.end());
  if (eager) return graph::backend_for(device_).run_eager(build(signature), inputs).at(0);
  graph::Executable& exe = graphs_.get(signature, [&] { return build(signature); });
  graph::RunResult result = exe.run(inputs);
  cache.buffers = std::move(result.state);  // the caches as the run left them
  return result.outputs.at(0);
}

void CausalLMImpl::limit_sequence_length(int64_t tokens) {
  const std::optional<int64_t> window = local_config_.sliding_window;
  if (window && tokens <= *window) local_config_.sliding_window.reset();
}

double CausalLMImpl::eval_step(const TrainInputs& in, bool eager, DType autocast) {
  std::vector<Tensor> none;
  return run_training_graph(in, none, eager, autocast, false);
}

double CausalLMImpl::train_step_into(const TrainInputs& in, std::vector<Tensor>& grads, bool eager,
                                     DType autocast) {
  return run_training_graph(in, grads, eager, autocast, true);
}

double CausalLMImpl::run_training_graph(const TrainInputs& in, std::vector<Tensor>& grads,
                                        bool eager, DType autocast, bool grads_kept) {
  check_ids(in.input_ids);
  const bool with_grads = !grads.empty();
  const int64_t batch = in.input_ids.dim(0), seq = in.input_ids.dim(1);
  graph::Signature signature{
      batch, seq, seq, true, with_grads ? graph::Pass::kTrain : graph::Pass::kEval, autocast};
  signature.loss_chunk_rows = loss_chunk_rows_;
  const auto build = [&] {
    return models::build_decoder_training_graph(
        local_config_, features_, weights_, models::rope_tables(*config_, seq), batch, seq,
        with_grads, autocast, tp_, loss_chunk_rows_, grads_kept ? grads : std::vector<Tensor>{});
  };
  std::vector<Tensor> inputs{in.input_ids,
                             arange_rows(batch, 0, seq),
                             arange_rows(1, 0, seq).view({seq}),
                             in.attention_mask,
                             in.targets,
                             in.loss_scale};
  inputs.insert(inputs.end(), grads.begin(), grads.end());
  if (eager) return graph::backend_for(device_).run_eager(build(), inputs).at(0).to_f32_vector()[0];
  graph::RunResult result = graphs_.get(signature, build).run(inputs);
  grads = std::move(result.state);  // the gradients as the run left them
  return result.outputs.at(0).to_f32_vector()[0];
}

LossAndGrads CausalLMImpl::train_step(const TrainInputs& in, bool eager, bool with_grads,
                                      DType autocast) {
  std::vector<Tensor> grads;
  if (with_grads) {
    for_each_weight([&](const std::string&, Tensor& weight, const Shape&) {
      grads.push_back(Tensor::zeros(weight.shape(), DType::f32).to(device_));
    });
  }
  LossAndGrads result;
  result.loss_sum = run_training_graph(in, grads, eager, autocast, false);
  for (const Tensor& g : grads) result.grads.push_back(g.to(kCpu));
  return result;
}

void CausalLMImpl::for_each_weight(const models::WeightVisitor& visit) {
  models::for_each_weight(*config_, features_, weights_, visit);
}

namespace {

DType choose_dtype(const LoadOptions& options, const ModelConfig& config, const Checkpoint& ckpt) {
  if (options.dtype) return *options.dtype;
  if (config.dtype) return *config.dtype;
  return ckpt.info("model.embed_tokens.weight").dtype;
}

// The checks and choices shared by loading and fresh initialization.
struct Setup {
  ModelConfig config;
  models::DecoderFeatures features;
  Device device;
};

Setup setup(const std::filesystem::path& config_path, const LoadOptions& options,
            const models::Parallelism& tp) {
  ModelConfig config = load_model_config(config_path);
  models::check_tensor_parallel(config, tp, config_path.string());
  const models::DecoderFeatures features = models::features_for(config, config_path.string(), tp);
  if (config.use_sliding_window) {
    throw Error(config_path.string() + ": use_sliding_window=true is not supported");
  }
  std::string reason;
  const Device device = resolve_device(options.device_map, &reason);
  if (options.device_map == "auto") log_info(reason);
  return {std::move(config), features, device};
}

// The graphs' compile options; on a device whose backend partitions programs, a DistributedConfig
// is the partitioning of this process's graphs (the model loads whole).
graph::CompileOptions compile_options(const LoadOptions& options, const Device& device) {
  graph::CompileOptions compile{.fuse = options.fuse, .mesh = {}, .kernels = options.kernels};
  const DistributedConfig& d = options.distributed;
  if (partitions_programs(device, d)) {
    compile.partitioning = models::partitioning(d.tp_size, d.fsdp_size);
  }
  return compile;
}

void check_dtype(DType dtype, const std::filesystem::path& source) {
  if (dtype != DType::f32 && dtype != DType::bf16) {
    throw Error("dtype " + std::string(dtype_name(dtype)) + " is not supported for " +
                source.string() + " (use f32 or bf16)");
  }
}

}  // namespace

bool partitions_programs(const Device& device, const DistributedConfig& d) {
  if (d.tp_size < 1 || d.fsdp_size < 1 || d.tp_size * d.fsdp_size == 1) return false;
  const DeviceKind* kind = find_device_kind(device.type);
  return kind != nullptr && kind->partitions_programs;
}

std::unique_ptr<CausalLMImpl> load_causal_lm(const std::string& id_or_path,
                                             const LoadOptions& options,
                                             const models::Parallelism& tp) {
  const std::filesystem::path dir = resolve_pretrained(id_or_path);
  Setup s = setup(dir / "config.json", options, tp);
  const Checkpoint checkpoint = Checkpoint::open(dir);
  const DType dtype = choose_dtype(options, s.config, checkpoint);
  check_dtype(dtype, dir);
  graph::Backend& backend = graph::backend_for(s.device);
  models::DecoderWeights weights;
  models::for_each_weight(
      s.config, s.features, weights,
      [&](const std::string& name, Tensor& field, const Shape& shape) {
        const TensorInfo& info = checkpoint.info(name);
        if (info.shape != shape) {
          throw Error(info.file.string() + ": tensor '" + name + "' has shape " +
                      shape_str(info.shape) + " but config.json implies " + shape_str(shape));
        }
        // Under TP a view of this rank's rows (or a copy of its columns):
        // only those pages of the file are read.
        field = backend.prepare_weight(
            models::rank_slice(name, checkpoint.tensor(name), s.config, tp), dtype);
        checkpoint.release(name);
      });
  std::string name = s.config.model_type;
  return std::make_unique<CausalLMImpl>(std::move(s.config), s.features, std::move(weights),
                                        s.device, dtype, std::move(name), tp, options.distributed,
                                        compile_options(options, s.device));
}

std::unique_ptr<CausalLMImpl> init_causal_lm(const std::filesystem::path& config_json,
                                             const LoadOptions& options, uint64_t seed,
                                             const models::Parallelism& tp) {
  Setup s = setup(config_json, options, tp);
  const DType dtype = options.dtype.value_or(s.config.dtype.value_or(DType::f32));
  check_dtype(dtype, config_json);
  graph::Backend& backend = graph::backend_for(s.device);
  models::DecoderWeights weights = models::init_weights(s.config, s.features, seed);
  models::for_each_weight(
      s.config, s.features, weights, [&](const std::string& name, Tensor& field, const Shape&) {
        // Every rank draws the whole model from the same seed, then keeps
        // its slices: the same weights as one process would have.
        field = backend.prepare_weight(models::rank_slice(name, field, s.config, tp), dtype);
      });
  std::string name = s.config.model_type;
  return std::make_unique<CausalLMImpl>(std::move(s.config), s.features, std::move(weights),
                                        s.device, dtype, std::move(name), tp, options.distributed,
                                        compile_options(options, s.device));
}

namespace {

// `host` (f32) from every rank of `group`, one after the other.
Tensor gathered_over(graph::Communicator& group, Tensor& host) {
  Tensor gathered = Tensor::empty({host.numel() * group.size()}, DType::f32);
  group.all_gather(host.data_as<float>(), static_cast<size_t>(host.numel()),
                   gathered.data_as<float>());
  return gathered;
}

}  // namespace

void save_causal_lm(CausalLMImpl& model, const std::filesystem::path& dir, DType dtype) {
  const models::Parallelism& tp = model.parallelism();
  std::vector<std::pair<std::string, Tensor>> tensors;
  // Each rank of the group the experts are split over holds other experts: the gather brings
  // rank r's in place of this one's, each saved under its own name.
  const auto add_each_ranks_expert = [&](const std::string& name, const Tensor& gathered,
                                         const Tensor& mine, int ranks) {
    for (int r = 0; r < ranks; ++r) {
      tensors.emplace_back(models::expert_weight_on_rank(name, r, model.config(), tp),
                           gathered.slice(r * mine.numel(), (r + 1) * mine.numel())
                               .clone()
                               .view(mine.shape())
                               .to(dtype));
    }
  };
  model.for_each_weight([&](const std::string& name, Tensor& t, const Shape&) {
    Tensor host = t.to(kCpu).to(DType::f32);
    if (models::held_whole(name, tp)) {
      add_each_ranks_expert(name, gathered_over(*tp.fsdp_group->communicator, host), host,
                            tp.fsdp_size);
      return;
    }
    if (tp.fsdp_size > 1) {
      host = models::fsdp_unshard(name, gathered_over(*tp.fsdp_group->communicator, host),
                                  host.shape(), tp);
    }
    if (tp.size > 1) {
      // Every rank takes part in the gather; one of them writes.
      const Tensor gathered = gathered_over(*tp.group->communicator, host);
      if (models::is_expert_weight(name)) {
        add_each_ranks_expert(name, gathered, host, tp.size);
        return;
      }
      host = models::tensor_parallel_unshard(name, gathered, host.shape(), model.config(), tp);
    }
    tensors.emplace_back(name, host.to(dtype));
  });
  if (!tp.writes_files) return;
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) throw Error("cannot create '" + dir.string() + "': " + error.message());
  save_safetensors(dir / "model.safetensors", tensors);
  ModelConfig config = model.config();
  config.dtype = dtype;
  const std::filesystem::path config_path = dir / "config.json";
  std::ofstream out(config_path);
  out << to_json(config).dump(2) << "\n";
  if (!out) throw Error("cannot write '" + config_path.string() + "'");
}

}  // namespace tfm
