#include "training/flat_parameters.h"

#include <regex>

#include "tfm/error.h"

namespace tfm::training {

bool decays(const std::string& name) {
  // transformers' get_decay_parameter_names: names with "bias", "layernorm", "rmsnorm", a "norm"
  // module, or a module ending in "_norm" are exempt.
  static const std::regex exempt(R"(bias|layernorm|rmsnorm|(^|\.)norm($|\.)|_norm($|\.))",
                                 std::regex::icase);
  return !std::regex_search(name, exempt);
}

FlatParameters::FlatParameters(CausalLMImpl& model) {
  if (model.graph_stats().compiles > 0) {
    throw Error("[train] weights must be flattened before the model compiles a graph");
  }
  int64_t total = 0;
  model.for_each_weight([&](const std::string& name, Tensor& t, const Shape&) {
    if (t.dtype() != DType::f32) {
      throw Error("[train] weight '" + name + "' is " + std::string(dtype_name(t.dtype())) +
                  ": training keeps f32 master weights (load with dtype f32)");
    }
    entries_.push_back({name, t.shape(), total, decays(name)});
    total += t.numel();
  });
  values_ = Tensor::empty({total}, DType::f32, model.device());
  grads_ = Tensor::zeros({total}, DType::f32, model.device());
  size_t i = 0;
  model.for_each_weight([&](const std::string&, Tensor& t, const Shape&) {
    const Entry& e = entries_[i++];
    Tensor view = values_.slice(e.offset, e.offset + t.numel()).view(e.shape);
    view.copy_from(t);
    t = view;
    grad_blocks_.push_back(grads_.slice(e.offset, e.offset + t.numel()).view(e.shape));
  });
}

std::vector<ParamSegment> FlatParameters::segments(bool decay_all) const {
  std::vector<ParamSegment> out;
  for (const Entry& e : entries_) {
    out.push_back({e.offset, shape_numel(e.shape), decay_all || e.decay});
  }
  return out;
}

void FlatParameters::zero_grads() { grads_.fill_zero(); }

void FlatParameters::check_in_place(const Tensor& values) const {
  bool in_place = values.data() == values_.data();
  for (size_t i = 0; i < grad_blocks_.size(); ++i) {
    in_place = in_place && grad_blocks_[i].data() ==
                               static_cast<const char*>(grads_.data()) +
                                   static_cast<size_t>(entries_[i].offset) * sizeof(float);
  }
  if (!in_place) {
    throw Error(
        "[train] the backend returned new buffers for the flat parameters or gradients: "
        "training with flat buffers needs a backend that updates them in place");
  }
}

}  // namespace tfm::training
