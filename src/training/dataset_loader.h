// Batches of fixed-length rows for training, as a Hugging Face Trainer's train dataloader gives
// them: per_device_train_batch_size rows at a time, reshuffled every epoch (seeded), the short
// last batch kept or dropped (dataloader_drop_last). Keeping it changes the batch shape once per
// epoch, which costs a second compiled graph; drop_last keeps one.
// The position (epoch, batches returned in it) is part of a checkpoint: restoring it makes a
// resumed run see exactly the batches an uninterrupted run would have, because an epoch's order
// depends only on the seed and the epoch number.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "tfm/tensor.h"
#include "training/dataset_rows.h"

namespace tfm::training {

struct DataLoaderOptions {
  int64_t batch_size = 8;  // per_device_train_batch_size (transformers' default)
  bool shuffle = true;     // false for evaluation: rows in file order
  uint64_t seed = 42;      // TrainingArguments.seed's default
  bool drop_last = false;
};

struct Batch {
  Tensor input_ids;       // [B, max_length] i32
  Tensor attention_mask;  // [B, max_length] i32, 0 on padding
  Tensor labels;          // [B, max_length] i32, kIgnoreIndex on padding; unshifted
  int64_t epoch = 0;
  int64_t index = 0;  // batch number within the epoch
};

struct DataLoaderState {
  int64_t epoch = 0;
  int64_t batch_index = 0;  // batches of `epoch` already returned
  // The position means the same batches only with the same data and settings; restore() checks.
  int64_t num_rows = 0;
  int64_t batch_size = 0;
  uint64_t seed = 0;
  bool shuffle = true;
  bool drop_last = false;

  nlohmann::json to_json() const;
  static DataLoaderState from_json(const nlohmann::json& json);
};

class DataLoader {
 public:
  DataLoader(TokenRows rows, const DataLoaderOptions& options);

  const TokenRows& rows() const { return rows_; }
  // ceil(num_rows / batch_size), or floor with drop_last.
  int64_t batches_per_epoch() const;
  // The batch at the current position; then moves on, into the next epoch after the last batch.
  Batch next();
  // Any batch of any epoch, without moving.
  Batch batch_at(int64_t epoch, int64_t index) const;
  // Rows of `epoch` in the order batches take them.
  std::vector<int64_t> epoch_order(int64_t epoch) const;

  DataLoaderState state() const;
  // Throws when `state` was saved with other rows, batch size, seed, shuffle or drop_last.
  void restore(const DataLoaderState& state);

 private:
  Batch gather(const std::vector<int64_t>& order, int64_t epoch, int64_t index) const;

  TokenRows rows_;
  DataLoaderOptions options_;
  int64_t epoch_ = 0;
  int64_t batch_index_ = 0;
  std::vector<int64_t> order_;  // epoch_order(order_epoch_), kept for next()
  int64_t order_epoch_ = -1;
};

}  // namespace tfm::training
