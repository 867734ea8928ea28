#include "training/causal_lm_batch.h"

#include "graph/graph.h"
#include "models/step_inputs.h"
#include "tfm/error.h"

namespace tfm::training {

int64_t count_targets(const Tensor& labels) {
  const Tensor l = ids_as_i32(labels, "labels");
  const int64_t rows = l.dim(0), cols = l.dim(1);
  const auto* p = l.data_as<int32_t>();
  int64_t count = 0;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 1; c < cols; ++c) count += p[r * cols + c] != graph::kIgnoreIndex;
  }
  return count;
}

TrainInputs make_train_inputs(const Tensor& input_ids, const Tensor& attention_mask,
                              const Tensor& labels, int64_t loss_tokens) {
  TrainInputs in;
  in.input_ids = ids_as_i32(input_ids, "input_ids");
  in.attention_mask = ids_as_i32(attention_mask, "attention_mask");
  const Tensor l = ids_as_i32(labels, "labels");
  if (l.shape() != in.input_ids.shape() || in.attention_mask.shape() != in.input_ids.shape()) {
    throw Error("[train] input_ids " + shape_str(in.input_ids.shape()) + ", attention_mask " +
                shape_str(in.attention_mask.shape()) + " and labels " + shape_str(l.shape()) +
                " must have the same [batch, seq] shape");
  }
  if (loss_tokens <= 0) throw Error("[train] the batch has no label to compute a loss on");
  const int64_t rows = l.dim(0), cols = l.dim(1);
  in.targets = filled_i32({rows, cols}, graph::kIgnoreIndex);
  const auto* src = l.data_as<int32_t>();
  auto* dst = in.targets.data_as<int32_t>();
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c + 1 < cols; ++c) dst[r * cols + c] = src[r * cols + c + 1];
  }
  in.loss_scale =
      Tensor::from_vector(std::vector<float>{1.f / static_cast<float>(loss_tokens)}, {1});
  return in;
}

}  // namespace tfm::training
