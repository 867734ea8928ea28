#include "graph/cache.h"

#include <chrono>
#include <cstdio>
#include <set>

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

std::string GraphCache::varying_dimensions() const {
  std::map<std::string, std::set<int64_t>> values;
  for (const auto& [s, exe] : executables_) {
    values["batch"].insert(s.batch);
    values["seq"].insert(s.seq);
    values["cache"].insert(s.cache_len);
    values["all_logits"].insert(s.all_logits);
    values["argmax"].insert(s.argmax);
    values["pass"].insert(static_cast<int64_t>(s.pass));
    values["autocast"].insert(static_cast<int64_t>(s.autocast));
    values["loss_chunk_rows"].insert(s.loss_chunk_rows);
  }
  std::string text;
  for (const auto& [name, seen] : values) {
    if (seen.size() < 2) continue;
    text += (text.empty() ? "" : ", ") + name + " took " + std::to_string(seen.size()) + " values";
  }
  return text;
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
  const bool loaded = exe->from_compile_cache();
  ++(loaded ? stats_.loads : stats_.compiles);
  stats_.compile_ms += ms;
  stats_.arena_bytes = std::max(stats_.arena_bytes, arena);
  std::string where = device_.str();
  if (options_.partitioning.devices() > 1) {
    where += " partitioned over";
    for (const MeshAxis& a : options_.partitioning.axes) {
      where += " " + a.name + "=" + std::to_string(a.size);
    }
  }
  char line[320];
  std::snprintf(line, sizeof line, "%s %s graph [%s] on %s in %.1f ms, arena %.2f MiB",
                loaded ? "loaded (compile cache hit)" : "compiled", owner_.c_str(),
                signature.str().c_str(), where.c_str(), ms, static_cast<double>(arena) / (1 << 20));
  log_info(line);
  Executable& made = *executables_.emplace(signature, std::move(exe)).first->second;
  if (executables_.size() == static_cast<size_t>(warn_after_) + 1) {
    log_warn(owner_ + " has made " + std::to_string(executables_.size()) +
             " graphs: input shapes keep changing (" + varying_dimensions() +
             "; pad prompts to fewer lengths, or set a fixed max length)");
  }
  return made;
}

}  // namespace tfm::graph
