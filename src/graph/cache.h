// Compiled graphs keyed by the shape they were built for. A new shape costs a compilation; the
// cache counts them, logs each one, and warns when a model keeps compiling new shapes.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>

#include "graph/backend.h"
#include "tfm/device.h"
#include "tfm/graph_stats.h"

namespace tfm::graph {

// What a graph computes: logits from a KV-cached step, or the loss of whole rows, with or
// without the gradients.
enum class Pass : uint8_t { kInfer, kTrain, kEval };

// Everything a graph's shapes depend on.
struct Signature {
  int64_t batch = 1;
  int64_t seq = 1;
  int64_t cache_len = 1;
  bool all_logits = false;
  Pass pass = Pass::kInfer;
  DType autocast = DType::f32;  // training: the dtype matrix products compute in
  bool argmax = false;          // the output is each row's greedy token id instead of its logits
  int64_t loss_chunk_rows = 0;  // training: token rows per chunk of the loss (0: automatic)

  std::string str() const;  // "batch=1 seq=64 cache=256 last-logits"
  auto operator<=>(const Signature&) const = default;
};

class GraphCache {
 public:
  GraphCache(std::string owner, Device device, CompileOptions options = {})
      : owner_(std::move(owner)), device_(device), options_(options) {}

  // The executable for `signature`, compiling `build()`'s graph on first use.
  Executable& get(const Signature& signature, const std::function<Graph()>& build);

  const GraphCacheStats& stats() const { return stats_; }
  const CompileOptions& options() const { return options_; }
  void set_warn_after(int compiles) { warn_after_ = compiles; }

 private:
  std::string owner_;
  Device device_;
  CompileOptions options_;
  // The Signature fields that differ between the graphs made ("seq took 9 values").
  std::string varying_dimensions() const;
  std::map<Signature, std::unique_ptr<Executable>> executables_;
  GraphCacheStats stats_;
  int warn_after_ = 8;
};

}  // namespace tfm::graph
