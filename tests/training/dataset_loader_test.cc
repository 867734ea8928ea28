// Batches: epoch order against the Python transcription of the shuffle, counts in closed form,
// every row once per epoch, and resuming from a saved position.
#include "training/dataset_loader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <vector>

#include "tfm/error.h"
#include "training/dataset_goldens.h"
#include "training/dataset_shuffle.h"

namespace tfm::training {
namespace {

using testing::HasSubstr;
using testing::ThrowsMessage;
using testing_training::dataset_golden;

// Row r holds r * 100 + column, so a batch shows which rows it took. Labels and mask differ
// from the ids to catch a mix-up.
TokenRows numbered_rows(int64_t n, int64_t len = 4) {
  TokenRows rows;
  rows.max_length = len;
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t c = 0; c < len; ++c) {
      rows.input_ids.push_back(static_cast<int32_t>(r * 100 + c));
      rows.attention_mask.push_back(c + 1 < len ? 1 : 0);
      rows.labels.push_back(c + 1 < len ? static_cast<int32_t>(r * 100 + c) : kIgnoreIndex);
    }
  }
  return rows;
}

// The row numbers a batch took.
std::vector<int64_t> row_numbers(const Batch& batch) {
  const int64_t len = batch.input_ids.dim(1);
  const int32_t* ids = batch.input_ids.data_as<int32_t>();
  std::vector<int64_t> out;
  for (int64_t r = 0; r < batch.input_ids.dim(0); ++r) out.push_back(ids[r * len] / 100);
  return out;
}

TEST(DatasetShuffle, Mt19937_64IsTheStandardsEngine) {
  std::mt19937_64 rng;  // [rand.predef]: the 10000th value of a default-constructed engine
  rng.discard(9999);
  EXPECT_EQ(rng(), 9981545732273789042ull);
}

TEST(DatasetShuffle, EpochOrderMatchesPythonTranscription) {
  for (const nlohmann::json& entry : dataset_golden()["permutations"]) {
    EXPECT_EQ(
        epoch_permutation(entry["n"], entry["seed"].get<uint64_t>(), entry["epoch"].get<int64_t>()),
        entry["order"].get<std::vector<int64_t>>())
        << entry["n"] << " " << entry["seed"] << " " << entry["epoch"];
  }
}

TEST(DataLoader, BatchesPerEpochClosedForm) {
  for (int64_t n = 1; n <= 20; ++n) {
    for (int64_t b = 1; b <= 7; ++b) {
      DataLoader keep(numbered_rows(n), {.batch_size = b});
      EXPECT_EQ(keep.batches_per_epoch(), (n + b - 1) / b) << n << " " << b;
      if (n >= b) {
        DataLoader drop(numbered_rows(n), {.batch_size = b, .drop_last = true});
        EXPECT_EQ(drop.batches_per_epoch(), n / b) << n << " " << b;
      } else {
        EXPECT_THAT([&] { DataLoader(numbered_rows(n), {.batch_size = b, .drop_last = true}); },
                    ThrowsMessage<Error>(HasSubstr("leaves no batch")));
      }
    }
  }
}

TEST(DataLoader, EveryRowOncePerEpochShortLastBatch) {
  const int64_t n = 11, b = 4;
  DataLoader loader(numbered_rows(n), {.batch_size = b, .seed = 7});
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    std::multiset<int64_t> seen;
    std::vector<int64_t> order;
    for (int64_t i = 0; i < loader.batches_per_epoch(); ++i) {
      const Batch batch = loader.next();
      EXPECT_EQ(batch.epoch, epoch);
      EXPECT_EQ(batch.index, i);
      EXPECT_EQ(batch.input_ids.shape(), (Shape{i + 1 < 3 ? b : n % b, 4}));
      EXPECT_EQ(batch.input_ids.dtype(), DType::i32);
      EXPECT_EQ(batch.attention_mask.shape(), batch.input_ids.shape());
      EXPECT_EQ(batch.labels.shape(), batch.input_ids.shape());
      for (int64_t r : row_numbers(batch)) {
        seen.insert(r);
        order.push_back(r);
      }
    }
    EXPECT_EQ(order, loader.epoch_order(epoch));
    EXPECT_EQ(order, epoch_permutation(n, 7, epoch));
    EXPECT_EQ(seen.size(), size_t(n));
    EXPECT_EQ(std::set<int64_t>(seen.begin(), seen.end()).size(), size_t(n));
  }
}

TEST(DataLoader, BatchTensorsCopyTheirRows) {
  DataLoader loader(numbered_rows(5, 3), {.batch_size = 2, .shuffle = false});
  const Batch batch = loader.batch_at(0, 1);  // rows 2 and 3
  EXPECT_EQ(std::vector<int32_t>(batch.input_ids.data_as<int32_t>(),
                                 batch.input_ids.data_as<int32_t>() + 6),
            (std::vector<int32_t>{200, 201, 202, 300, 301, 302}));
  EXPECT_EQ(std::vector<int32_t>(batch.attention_mask.data_as<int32_t>(),
                                 batch.attention_mask.data_as<int32_t>() + 6),
            (std::vector<int32_t>{1, 1, 0, 1, 1, 0}));
  EXPECT_EQ(
      std::vector<int32_t>(batch.labels.data_as<int32_t>(), batch.labels.data_as<int32_t>() + 6),
      (std::vector<int32_t>{200, 201, -100, 300, 301, -100}));
}

TEST(DataLoader, DropLastDropsTheShortBatchOfTheShuffledOrder) {
  DataLoader loader(numbered_rows(10), {.batch_size = 3, .drop_last = true});
  ASSERT_EQ(loader.batches_per_epoch(), 3);
  std::vector<int64_t> taken;
  for (int i = 0; i < 3; ++i) {
    const Batch batch = loader.next();
    EXPECT_EQ(batch.input_ids.dim(0), 3);
    for (int64_t r : row_numbers(batch)) taken.push_back(r);
  }
  const std::vector<int64_t> order = epoch_permutation(10, 42, 0);
  EXPECT_EQ(taken, std::vector<int64_t>(order.begin(), order.begin() + 9));
  EXPECT_EQ(loader.state().epoch, 1);
  EXPECT_EQ(loader.state().batch_index, 0);
}

TEST(DataLoader, SameSeedSameBatchesOtherSeedOrEpochOtherOrder) {
  DataLoader a(numbered_rows(50), {.batch_size = 8, .seed = 123});
  DataLoader b(numbered_rows(50), {.batch_size = 8, .seed = 123});
  DataLoader c(numbered_rows(50), {.batch_size = 8, .seed = 124});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(row_numbers(a.next()), row_numbers(b.next()));
  EXPECT_NE(a.epoch_order(0), c.epoch_order(0));
  EXPECT_NE(a.epoch_order(0), a.epoch_order(1));
}

TEST(DataLoader, UnshuffledIsFileOrder) {
  DataLoader loader(numbered_rows(5), {.batch_size = 2, .shuffle = false});
  EXPECT_EQ(row_numbers(loader.next()), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(row_numbers(loader.next()), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(row_numbers(loader.next()), (std::vector<int64_t>{4}));
  EXPECT_EQ(row_numbers(loader.next()), (std::vector<int64_t>{0, 1}));
}

// A run stopped after k batches and resumed from its saved position sees the batches the
// uninterrupted run saw, across epoch boundaries.
TEST(DataLoader, ResumeFromSavedPositionGivesTheSameBatches) {
  const DataLoaderOptions options{.batch_size = 4, .seed = 99, .drop_last = true};
  for (int stop_after : {0, 1, 3, 4, 5, 9}) {
    DataLoader uninterrupted(numbered_rows(17), options);  // 4 batches per epoch
    DataLoader first_run(numbered_rows(17), options);
    for (int i = 0; i < stop_after; ++i) {
      uninterrupted.next();
      first_run.next();
    }
    const std::string saved = first_run.state().to_json().dump();
    DataLoader resumed(numbered_rows(17), options);
    resumed.restore(DataLoaderState::from_json(nlohmann::json::parse(saved)));
    for (int i = 0; i < 10; ++i) {
      const Batch want = uninterrupted.next();
      const Batch got = resumed.next();
      EXPECT_EQ(got.epoch, want.epoch);
      EXPECT_EQ(got.index, want.index);
      EXPECT_EQ(row_numbers(got), row_numbers(want)) << stop_after << " " << i;
    }
  }
}

TEST(DataLoader, RestoreRefusesOtherDataOrSettings) {
  DataLoader loader(numbered_rows(17), {.batch_size = 4, .seed = 1});
  loader.next();
  const DataLoaderState state = loader.state();
  EXPECT_THAT([&] { DataLoader(numbered_rows(18), {.batch_size = 4, .seed = 1}).restore(state); },
              ThrowsMessage<Error>(HasSubstr("num_rows 17, this run has 18")));
  EXPECT_THAT([&] { DataLoader(numbered_rows(17), {.batch_size = 2, .seed = 1}).restore(state); },
              ThrowsMessage<Error>(HasSubstr("batch_size")));
  EXPECT_THAT([&] { DataLoader(numbered_rows(17), {.batch_size = 4, .seed = 2}).restore(state); },
              ThrowsMessage<Error>(HasSubstr("seed")));
  DataLoaderState past_end = state;
  past_end.batch_index = 5;
  EXPECT_THAT([&] { loader.restore(past_end); }, ThrowsMessage<Error>(HasSubstr("batch 5 of 5")));
  EXPECT_THAT(
      [] {
        DataLoaderState::from_json(nlohmann::json{{"epoch", 0}});
      },
      ThrowsMessage<Error>(HasSubstr("no \"batch_index\"")));
  EXPECT_THAT(
      [&] {
        nlohmann::json json = state.to_json();
        json["epoch"] = "one";
        DataLoaderState::from_json(json);
      },
      ThrowsMessage<Error>(HasSubstr("\"epoch\" must be an integer")));
}

TEST(DataLoader, RejectsBadSettings) {
  EXPECT_THAT([] { DataLoader(numbered_rows(3), {.batch_size = 0}); },
              ThrowsMessage<Error>(HasSubstr("batch_size must be positive")));
  EXPECT_THAT([] { DataLoader(TokenRows{}, {}); }, ThrowsMessage<Error>(HasSubstr("no rows")));
  DataLoader loader(numbered_rows(3), {.batch_size = 2});
  EXPECT_THAT([&] { loader.batch_at(0, 2); }, ThrowsMessage<Error>(HasSubstr("no batch 2")));
}

}  // namespace
}  // namespace tfm::training
