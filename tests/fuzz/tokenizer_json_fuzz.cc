// Feeds arbitrary bytes to the tokenizer.json loader as if they were the file, and a tokenizer
// that loads encodes and decodes a fixed text (its normalizer, pre-tokenizer, model, post-processor
// and decoder all run). A tfm::Error is the expected answer to garbage; anything else (a crash, a
// sanitizer report, another exception type escaping, a hang) is a finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <fstream>
#include <string>

#include "tfm/error.h"
#include "tfm/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // The loader reads a file: each input is written to this process's own.
  static const std::string path = "/tmp/tfm-fuzz-tokenizer-" + std::to_string(::getpid()) + ".json";
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      .write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  try {
    const tfm::Tokenizer tokenizer = tfm::Tokenizer::from_files(path);
    const auto ids = tokenizer.encode("Hello, world! 12 caf\xc3\xa9 <|endoftext|>  \n\tx");
    tokenizer.decode(ids, false);
    tokenizer.decode(ids, true);
  } catch (const tfm::Error&) {
  }
  return 0;
}
