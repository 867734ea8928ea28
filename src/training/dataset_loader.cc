#include "training/dataset_loader.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "tfm/error.h"
#include "training/dataset_shuffle.h"

namespace tfm::training {

DataLoader::DataLoader(TokenRows rows, const DataLoaderOptions& options)
    : rows_(std::move(rows)), options_(options) {
  if (options_.batch_size <= 0) {
    throw Error("DataLoader: batch_size must be positive, got " +
                std::to_string(options_.batch_size));
  }
  if (rows_.num_rows() == 0) throw Error("DataLoader: the dataset has no rows");
  if (batches_per_epoch() == 0) {
    throw Error("DataLoader: drop_last with " + std::to_string(rows_.num_rows()) +
                " rows and batch_size " + std::to_string(options_.batch_size) + " leaves no batch");
  }
}

int64_t DataLoader::batches_per_epoch() const {
  const int64_t n = rows_.num_rows();
  const int64_t b = options_.batch_size;
  return options_.drop_last ? n / b : (n + b - 1) / b;
}

std::vector<int64_t> DataLoader::epoch_order(int64_t epoch) const {
  if (options_.shuffle) return epoch_permutation(rows_.num_rows(), options_.seed, epoch);
  std::vector<int64_t> order(static_cast<size_t>(rows_.num_rows()));
  std::iota(order.begin(), order.end(), int64_t{0});
  return order;
}

Batch DataLoader::gather(const std::vector<int64_t>& order, int64_t epoch, int64_t index) const {
  if (epoch < 0 || index < 0 || index >= batches_per_epoch()) {
    throw Error("DataLoader: no batch " + std::to_string(index) + " in epoch " +
                std::to_string(epoch) + " (" + std::to_string(batches_per_epoch()) +
                " batches per epoch)");
  }
  const int64_t first = index * options_.batch_size;
  const int64_t count = std::min(options_.batch_size, rows_.num_rows() - first);
  const int64_t len = rows_.max_length;
  Batch batch;
  batch.epoch = epoch;
  batch.index = index;
  batch.input_ids = Tensor::empty({count, len}, DType::i32);
  batch.attention_mask = Tensor::empty({count, len}, DType::i32);
  batch.labels = Tensor::empty({count, len}, DType::i32);
  const auto copy = [&](const std::vector<int32_t>& from, Tensor& to) {
    int32_t* out = to.data_as<int32_t>();
    for (int64_t r = 0; r < count; ++r) {
      std::memcpy(out + r * len, from.data() + order[first + r] * len, len * sizeof(int32_t));
    }
  };
  copy(rows_.input_ids, batch.input_ids);
  copy(rows_.attention_mask, batch.attention_mask);
  copy(rows_.labels, batch.labels);
  return batch;
}

Batch DataLoader::batch_at(int64_t epoch, int64_t index) const {
  return gather(epoch_order(epoch), epoch, index);
}

Batch DataLoader::next() {
  if (order_epoch_ != epoch_) {
    order_ = epoch_order(epoch_);
    order_epoch_ = epoch_;
  }
  Batch batch = gather(order_, epoch_, batch_index_);
  if (++batch_index_ == batches_per_epoch()) {
    ++epoch_;
    batch_index_ = 0;
  }
  return batch;
}

DataLoaderState DataLoader::state() const {
  return {epoch_,        batch_index_,     rows_.num_rows(),  options_.batch_size,
          options_.seed, options_.shuffle, options_.drop_last};
}

void DataLoader::restore(const DataLoaderState& state) {
  const auto differs = [](const char* what, auto saved, auto now) {
    if (saved != now) {
      throw Error(std::string("DataLoader: cannot resume: saved with ") + what + " " +
                  std::to_string(saved) + ", this run has " + std::to_string(now));
    }
  };
  differs("num_rows", state.num_rows, rows_.num_rows());
  differs("batch_size", state.batch_size, options_.batch_size);
  differs("seed", state.seed, options_.seed);
  differs("shuffle", state.shuffle, options_.shuffle);
  differs("drop_last", state.drop_last, options_.drop_last);
  if (state.epoch < 0 || state.batch_index < 0 || state.batch_index >= batches_per_epoch()) {
    throw Error("DataLoader: cannot resume at epoch " + std::to_string(state.epoch) + " batch " +
                std::to_string(state.batch_index) + " of " + std::to_string(batches_per_epoch()));
  }
  epoch_ = state.epoch;
  batch_index_ = state.batch_index;
}

}  // namespace tfm::training
