#include "graph/cache.h"

#include <chrono>
#include <cstdio>

#include "tfm/log.h"

namespace tfm::graph {

std::string Signature::str() const {
  if (pass != Pass::kInfer) {
    return "batch=" + std::to_string(batch) + " seq=" + std::to_string(seq) +
           (pass == Pass::kTrain ? " train" : " eval") +
           (autocast != DType::f32 ? " autocast=" + std::string(dtype_name(autocast)) : "") +
           (loss_chunk_rows > 0 ? " loss-chunk=" + std::to_string(loss_chunk_rows) : "");
  }
  return "batch=" + std::to_string(batch) + " seq=" + std::to_string(seq) +
         " cache=" + std::to_string(cache_len) + (all_logits ? " all-logits" : " last-logits") +
         (argmax ? " argmax" : "");
}

Executable& GraphCache::get(const Signature& signature, const std::function<Graph()>& build) {
  auto it = executables_.find(signature);
  if (it != executables_.end()) {
    ++stats_.hits;
    return *it->second;
  }
  const auto start = std::chrono::steady_clock::now();
  Graph graph = build();
  if (!options_.mesh.devices.empty()) check_mesh(graph, options_.mesh);
  std::unique_ptr<Executable> exe = backend_for(device_).compile(std::move(graph), options_);
  const size_t arena = exe->arena_bytes();
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  ++stats_.compiles;
  stats_.compile_ms += ms;
  stats_.arena_bytes = std::max(stats_.arena_bytes, arena);
  char line[256];
  std::snprintf(line, sizeof line, "compiled %s graph [%s] on %s in %.1f ms, arena %.2f MiB",
                owner_.c_str(), signature.str().c_str(), device_.str().c_str(), ms,
                static_cast<double>(arena) / (1 << 20));
  log_info(line);
  if (stats_.compiles == warn_after_ + 1) {
    log_warn(owner_ + " has compiled " + std::to_string(stats_.compiles) +
             " graphs: input shapes keep changing (pad prompts to fewer lengths, or set a fixed "
             "max length)");
  }
  return *executables_.emplace(signature, std::move(exe)).first->second;
}

}  // namespace tfm::graph
