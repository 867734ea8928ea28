// Holding out a validation set. Both splits keep order and take the validation part from the end,
// contiguous: neighbouring lines of a text are near-copies, so a random split would leak training
// text into validation. The train part is the first floor(n * (1 - validation_fraction)) units,
// which for tinyshakespeare and 0.1 is nanoGPT's `data[:int(n*0.9)]` split of its characters.
// (transformers' run_clm takes validation_split_percentage from the start of the file instead.)
#pragma once

#include "training/dataset_examples.h"

namespace tfm::training {

struct DatasetSplit {
  Examples train;
  Examples validation;
};

// Splits by examples (lines, paragraphs or JSONL records).
DatasetSplit split_examples(const Examples& examples, double validation_fraction);
// Splits one text example (sample_by = document) by Unicode characters, before tokenizing, so
// the two parts share no token.
DatasetSplit split_document(const Examples& document, double validation_fraction);

}  // namespace tfm::training
