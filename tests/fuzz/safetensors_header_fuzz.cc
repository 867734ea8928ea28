// Feeds arbitrary bytes to the safetensors header parser as if they were a whole file. A tfm::Error
// is the expected answer to garbage; anything else (a crash, a sanitizer report, another exception
// type escaping) is a finding.
#include <cstddef>
#include <cstdint>

#include "io/safetensors_header.h"
#include "tfm/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tfm::parse_safetensors_header({data, size}, size, "fuzz-input.safetensors");
  } catch (const tfm::Error&) {
  }
  return 0;
}
