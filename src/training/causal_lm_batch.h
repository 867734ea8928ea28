// From a batch as transformers' data collators produce it (input_ids, attention_mask, labels with
// -100 where no loss is taken) to the inputs of a compiled training step.
#pragma once

#include "models/causal_lm.h"

namespace tfm::training {

// Number of positions that contribute a loss: labels after the first column other than -100.
int64_t count_targets(const Tensor& labels);

// Shifts the labels left by one (row r predicts token r + 1, as the causal-LM loss does) and sets
// the loss scale to 1 / `loss_tokens`: the targets of this batch, or of every micro-batch of an
// accumulation window so that the window's gradients add up to those of the mean loss.
TrainInputs make_train_inputs(const Tensor& input_ids, const Tensor& attention_mask,
                              const Tensor& labels, int64_t loss_tokens);

}  // namespace tfm::training
