// Reading dataset files the way Hugging Face `datasets` does, so a run here and a run of
// transformers' run_clm.py on the same file see the same examples:
// - plain text: the "text" loader, one example per line by default (sample_by="line"), line
//   breaks removed, empty lines kept as empty examples; "\r\n" and "\r" read as "\n" (Python's
//   universal newlines). "paragraph" splits on blank lines ("\n\n") and drops empty pieces;
//   "document" makes the whole file one example.
// - JSONL: one JSON object per line, a string field (default "text") or a pre-tokenized integer
//   array (default "input_ids"). The first record decides which one the file holds; blank lines
//   are skipped.
// Every problem is a tfm::Error naming the file, the line and what was wrong.
#pragma once

#include <cstdint>
#include <string>

#include "training/dataset_examples.h"

namespace tfm::training {

enum class SampleBy { kLine, kParagraph, kDocument };

struct TextFileOptions {
  SampleBy sample_by = SampleBy::kLine;
  bool keep_linebreaks = false;  // line mode only: keep each line's trailing "\n"
};

struct JsonlOptions {
  std::string text_field = "text";
  std::string ids_field = "input_ids";
  // Pre-tokenized ids must lie in [0, vocab_size); 0 checks only that they fit an int32 and are
  // not negative. Pass the model's vocab_size: an id past the embedding would read out of bounds.
  int64_t vocab_size = 0;
};

Examples read_text_file(const std::string& path, const TextFileOptions& options = {});
Examples read_jsonl(const std::string& path, const JsonlOptions& options = {});
// By extension: ".jsonl" or ".json" is JSONL, anything else plain text.
Examples read_dataset(const std::string& path, const TextFileOptions& text_options = {},
                      const JsonlOptions& jsonl_options = {});

namespace detail {
// The file's bytes; an Error naming the file when it cannot be read.
std::string read_whole_file(const std::string& path);
}  // namespace detail

}  // namespace tfm::training
