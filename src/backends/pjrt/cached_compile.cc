#include "backends/pjrt/cached_compile.h"

#include "tfm/error.h"
#include "tfm/log.h"

namespace tfm::pjrt {

Compiled compile_cached(const Client& client, const CompileCache* cache, const std::string& mlir,
                        const std::string& compile_options) {
  if (cache == nullptr) return {client.compile(mlir, compile_options), false};
  // Options are bytes: hex keeps the key text.
  std::string options_hex;
  for (const char c : compile_options) {
    static const char kDigits[] = "0123456789abcdef";
    options_hex += kDigits[static_cast<unsigned char>(c) >> 4];
    options_hex += kDigits[static_cast<unsigned char>(c) & 15];
  }
  const std::string key = client.identity() + "compile options " + options_hex + "\n" + mlir;
  if (std::optional<std::string> payload = cache->find(key)) {
    try {
      return {client.deserialize(*payload), true};
    } catch (const Error& e) {
      log_warn("compile cache entry " + cache->entry_path(key).string() + " does not load (" +
               e.what() + "): removed, compiling again");
      cache->remove(key);
    }
  }
  Compiled compiled{client.compile(mlir, compile_options), false};
  try {
    cache->store(key, client.serialize(compiled.executable.get()));
  } catch (const Error& e) {
    log_warn(std::string("a compiled executable could not be kept in the compile cache (") +
             e.what() + ")");
  }
  return compiled;
}

}  // namespace tfm::pjrt
