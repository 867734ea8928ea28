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
  // The buffers, f32 [size] on device(). The weights of the model are views of values(), its
  // compiled graphs read them in place: an optimizer step must leave them in that buffer.
  Tensor& values() { return values_; }
  const Tensor& grads() const { return grads_; }

  void zero_grads();
  // Each weight's block of the gradient buffer, in entries() order: where a training step adds
  // its gradients (CausalLMImpl::train_step_into).
  std::vector<Tensor>& grad_blocks() { return grad_blocks_; }
  // Throws unless the blocks and `values` still lie in the flat buffers (a backend that returned
  // other buffers for them: training on such a backend needs each weight's state of its own).
  void check_in_place(const Tensor& values) const;

 private:
  std::vector<Entry> entries_;
  Tensor values_;  // f32 [size]
  Tensor grads_;   // f32 [size]
  std::vector<Tensor> grad_blocks_;
};

}  // namespace tfm::training
