// Plain text files, as the `datasets` "text" loader splits them.
#include "training/dataset_reader.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tfm/error.h"

namespace tfm::training {
namespace {

// Python opens text files with universal newlines: the loader never sees "\r".
std::string universal_newlines(const std::string& bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != '\r') {
      out.push_back(bytes[i]);
    } else {
      out.push_back('\n');
      if (i + 1 < bytes.size() && bytes[i + 1] == '\n') ++i;
    }
  }
  return out;
}

void add(Examples& examples, std::string text, int64_t line) {
  examples.texts.push_back(std::move(text));
  examples.lines.push_back(line);
}

void split_lines(const std::string& text, bool keep_linebreaks, Examples& examples) {
  int64_t line = 1;
  size_t start = 0;
  while (start < text.size()) {
    const size_t newline = text.find('\n', start);
    const size_t end = newline == std::string::npos ? text.size() : newline;
    const size_t stop = keep_linebreaks && newline != std::string::npos ? end + 1 : end;
    add(examples, text.substr(start, stop - start), line++);
    start = newline == std::string::npos ? text.size() : newline + 1;
  }
}

// str.split("\n\n") without the empty pieces, as the loader does.
void split_paragraphs(const std::string& text, Examples& examples) {
  int64_t line = 1;
  size_t start = 0;
  while (true) {
    const size_t blank = text.find("\n\n", start);
    const size_t end = blank == std::string::npos ? text.size() : blank;
    if (end > start) add(examples, text.substr(start, end - start), line);
    if (blank == std::string::npos) break;
    line += static_cast<int64_t>(std::count(text.begin() + start, text.begin() + end, '\n')) + 2;
    start = blank + 2;
  }
}

}  // namespace

namespace detail {

std::string read_whole_file(const std::string& path) {
  if (std::filesystem::is_directory(path)) {
    throw Error("dataset " + path + ": a folder, not a file (give a .txt or .jsonl file)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("dataset " + path + ": cannot open (" + std::strerror(errno) + ")");
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) throw Error("dataset " + path + ": read failed");
  return bytes.str();
}

}  // namespace detail

Examples read_text_file(const std::string& path, const TextFileOptions& options) {
  const std::string text = universal_newlines(detail::read_whole_file(path));
  Examples examples;
  examples.source = path;
  switch (options.sample_by) {
    case SampleBy::kLine:
      split_lines(text, options.keep_linebreaks, examples);
      break;
    case SampleBy::kParagraph:
      split_paragraphs(text, examples);
      break;
    case SampleBy::kDocument:
      if (!text.empty()) add(examples, text, 1);
      break;
  }
  if (examples.size() == 0) throw Error("dataset " + path + ": empty, no examples");
  return examples;
}

Examples read_dataset(const std::string& path, const TextFileOptions& text_options,
                      const JsonlOptions& jsonl_options) {
  if (path.ends_with(".jsonl") || path.ends_with(".json")) return read_jsonl(path, jsonl_options);
  return read_text_file(path, text_options);
}

}  // namespace tfm::training
