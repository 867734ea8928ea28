// The model's trainable weights moved into one flat f32 buffer (the master weights), with a flat
// gradient buffer of the same layout: AdamW is one loop, clipping one norm, and a shard is a range.
// Both live on the model's device, where the training step writes the gradients.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "models/causal_lm.h"
#include "training/adamw.h"

namespace tfm::training {

// The transformers Trainer's rule: no weight decay for biases and normalization weights.
bool decays(const std::string& name);

class FlatParameters {
 public:
  struct Entry {
    std::string name;
    Shape shape;
    int64_t offset = 0;
    bool decay = true;
  };

  // Rebinds every weight of `model` to a view of the flat buffer. The model must hold f32
  // weights and must not have compiled a graph yet (executables keep weight addresses).
  explicit FlatParameters(CausalLMImpl& model);

  const std::vector<Entry>& entries() const { return entries_; }
  // `decay_all`: every parameter decays, as torch.optim.AdamW(model.parameters()) does.
  std::vector<ParamSegment> segments(bool decay_all = false) const;
  int64_t size() const { return values_.numel(); }
  Device device() const { return values_.device(); }
  // The buffers as spans: on device(), so only that device's backend may read them.
  std::span<float> values() { return {values_.data_as<float>(), static_cast<size_t>(size())}; }
  std::span<float> grads() { return {grads_.data_as<float>(), static_cast<size_t>(size())}; }

  void zero_grads();
  // Each weight's block of the gradient buffer, in entries() order: where a training step adds
  // its gradients (CausalLMImpl::train_step_into).
  const std::vector<Tensor>& grad_blocks() const { return grad_blocks_; }

 private:
  std::vector<Entry> entries_;
  Tensor values_;  // f32 [size]
  Tensor grads_;   // f32 [size]
  std::vector<Tensor> grad_blocks_;
};

}  // namespace tfm::training
