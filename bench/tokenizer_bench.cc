// Tokenizer speed: load time of a tokenizer.json and single-threaded encode throughput, as JSON.
//   tokenizer_bench --tokenizer data/qwen3-tokenizer --text a.txt [--text b.txt] [--repeat 5]
// bench/tokenizer_bench.sh runs it next to Hugging Face tokenizers on the same files.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "tfm/tokenizer.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// Lines with their newline, the unit a data pipeline usually encodes.
std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> lines;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = std::min(text.find('\n', pos), text.size() - 1) + 1;
    lines.push_back(text.substr(pos, end - pos));
    pos = end;
  }
  return lines;
}

// Best-of-`repeat` seconds of `encode`, after one warm-up call (which fills the word cache, as
// the anchor's does); `tokens` gets the count it produced.
template <typename Encode>
double best_seconds(int repeat, size_t& tokens, Encode encode) {
  tokens = encode();
  double best = 1e9;
  for (int r = 0; r < repeat; ++r) {
    const auto start = std::chrono::steady_clock::now();
    tokens = encode();
    best = std::min(best, seconds_since(start));
  }
  return best;
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::string tokenizer_path = "data/qwen3-tokenizer";
  std::vector<std::string> texts;
  int repeat = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--tokenizer") tokenizer_path = argv[i + 1];
    if (flag == "--text") texts.push_back(argv[i + 1]);
    if (flag == "--repeat") repeat = std::atoi(argv[i + 1]);
  }
  // The best of several loads: the first one also pays for reading the file from disk.
  double load_s = 1e9;
  for (int i = 0; i < 3; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const tfm::Tokenizer loaded = tfm::AutoTokenizer::from_pretrained(tokenizer_path);
    load_s = std::min(load_s, seconds_since(start));
  }
  const tfm::Tokenizer tokenizer = tfm::AutoTokenizer::from_pretrained(tokenizer_path);
  nlohmann::json result = {
      {"impl", "tfm"}, {"load_ms", load_s * 1e3}, {"files", nlohmann::json::array()}};
  for (const auto& path : texts) {
    const std::string text = read(path);
    const std::vector<std::string> lines = split_lines(text);
    size_t whole_tokens = 0, line_tokens = 0;
    const double whole =
        best_seconds(repeat, whole_tokens, [&] { return tokenizer.encode(text, false).size(); });
    const double by_line = best_seconds(repeat, line_tokens, [&] {
      size_t n = 0;
      for (const auto& line : lines) n += tokenizer.encode(line, false).size();
      return n;
    });
    const double mb = static_cast<double>(text.size()) / 1e6;
    result["files"].push_back({{"path", path},
                               {"bytes", text.size()},
                               {"tokens", whole_tokens},
                               {"mb_per_s", mb / whole},
                               {"line_tokens", line_tokens},
                               {"lines_mb_per_s", mb / by_line}});
  }
  std::cout << result.dump(1) << "\n";
  return 0;
}
