// Feeds arbitrary bytes to the config.json reader as if they were the file. A tfm::Error is the
// expected answer to garbage; anything else (a crash, a sanitizer report, another exception type
// escaping, a stack overflow on deep nesting) is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "io/model_config.h"
#include "tfm/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    tfm::parse_model_config_text({reinterpret_cast<const char*>(data), size}, "fuzz-config.json");
  } catch (const tfm::Error&) {
  }
  return 0;
}
