// Generation speed of tfm on one checkpoint: first-call compile time, prefill time for given
// prompt lengths, batch-1 decode tokens/s, peak resident memory, and the decode limit set by
// memory bandwidth (the weight bytes a token reads / measured read bandwidth). Prints JSON.
// On an accelerator, --batches adds the decode rate of larger batches (tokens/s over all rows)
// and each batch's first call, which compiles its shapes.
//   generate_bench MODEL_DIR|CONFIG.json [--dtype bf16] [--new-tokens 32] [--prefill 128,1024]
//                  [--device cpu|cuda|pjrt] [--batches 1,16] [--profile 1]
//                  [--pjrt-plugin PATH] [--pjrt-cache DIR]
// A config.json instead of a checkpoint: fresh random weights of that shape (from_config).
// compile_ms_by_shape: what each new shape cost, compiled or loaded from a compiler's cache.
// --profile 1 times each compiled step on a GPU (tfm::KernelOptions::profile).
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "read_bandwidth.h"
#include "report_errors.h"
#include "tfm/device.h"
#include "tfm/log.h"
#include "tfm/model.h"

namespace {

using Clock = std::chrono::steady_clock;

double peak_rss_mib() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<double>(usage.ru_maxrss) / 1024.0;
}

std::vector<int64_t> parse_list(const char* text) {
  std::vector<int64_t> values;
  for (const char* p = text; *p;) {
    char* end;
    values.push_back(std::strtoll(p, &end, 10));
    p = *end ? end + 1 : end;
  }
  return values;
}

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

std::vector<int64_t> prompt_of(int64_t length) {
  std::vector<int64_t> ids(static_cast<size_t>(length));
  std::iota(ids.begin(), ids.end(), 1000);
  return ids;
}

// The weight bytes a decode step reads: every weight once (the tied embedding counts once, as
// lm_head; an untied one gives a row a token, left out), but of a mixture-of-experts layer only
// the experts a token is routed to (num_experts_per_tok of num_experts; the layers as
// transformers' Qwen3MoeDecoderLayer picks them).
double decode_bytes(const tfm::CausalLM& model, const std::string& dtype) {
  const tfm::ModelConfig& c = model.config();
  const double element = dtype == "bf16" ? 2.0 : 4.0;
  double all = static_cast<double>(model.weight_bytes());
  if (!c.tie_word_embeddings) all -= static_cast<double>(c.vocab_size * c.hidden_size) * element;
  if (!c.moe) return all;
  const tfm::MoeConfig& m = *c.moe;
  int64_t layers = 0;
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const bool dense =
        std::find(m.mlp_only_layers.begin(), m.mlp_only_layers.end(), i) != m.mlp_only_layers.end();
    layers += !dense && (i + 1) % m.decoder_sparse_step == 0;
  }
  const double expert_bytes =
      3.0 * static_cast<double>(m.moe_intermediate_size * c.hidden_size) * element;
  return all - static_cast<double>(layers * (m.num_experts - m.num_experts_per_tok)) * expert_bytes;
}

int bench_main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: %s MODEL_DIR [--dtype bf16] [--new-tokens N] [--prefill 128,1024]\n",
                 argv[0]);
    return 2;
  }
  std::string dtype = "bf16", device = "cpu", pjrt_plugin, pjrt_cache;
  int new_tokens = 32;
  std::vector<int64_t> prefill_lengths{128, 1024}, batches;
  tfm::KernelOptions kernels;
  const std::map<std::string, std::function<void(const char*)>> flags{
      {"--dtype", [&](const char* v) { dtype = v; }},
      {"--new-tokens", [&](const char* v) { new_tokens = std::stoi(v); }},
      {"--prefill", [&](const char* v) { prefill_lengths = parse_list(v); }},
      {"--device", [&](const char* v) { device = v; }},
      {"--batches", [&](const char* v) { batches = parse_list(v); }},
      {"--profile", [&](const char* v) { kernels.profile = std::strcmp(v, "0") != 0; }},
      {"--pjrt-plugin", [&](const char* v) { pjrt_plugin = v; }},
      {"--pjrt-cache", [&](const char* v) { pjrt_cache = v; }}};
  for (int i = 2; i < argc; i += 2) {
    const auto flag = flags.find(argv[i]);
    if (flag == flags.end() || i + 1 == argc) {
      throw std::invalid_argument(std::string("unknown flag or flag without a value: ") + argv[i]);
    }
    flag->second(argv[i + 1]);
  }
  if (!pjrt_plugin.empty()) {
    tfm::use_device_plugin("pjrt", pjrt_plugin, {.compile_cache = pjrt_cache});
  }
  tfm::set_log_level(tfm::LogLevel::kWarn);
  nlohmann::json out;
  out["device"] = device;
  // The host's read bandwidth bounds CPU decode; a GPU's is measured by its own tools.
  if (device == "cpu") out["bandwidth_gbs"] = tfm::bench::read_bandwidth_gbs();
  auto load_start = Clock::now();
  const tfm::LoadOptions load{
      .dtype = tfm::parse_dtype(dtype), .device_map = device, .kernels = kernels};
  const std::string source = argv[1];
  tfm::CausalLM model = source.size() > 5 && source.substr(source.size() - 5) == ".json"
                            ? tfm::AutoModelForCausalLM::from_config(source, load, 1)
                            : tfm::AutoModelForCausalLM::from_pretrained(source, load);
  out["load_s"] = std::chrono::duration<double>(Clock::now() - load_start).count();
  out["weight_bytes"] = model.weight_bytes();
  out["dtype"] = dtype;

  tfm::GenerationConfig gc;
  gc.eos_token_id = {-1};  // never stop early: every run makes exactly new_tokens tokens
  gc.max_new_tokens = new_tokens;
  tfm::GenerationStats first;
  const auto first_start = Clock::now();
  model.generate({prompt_of(16)}, gc, &first);
  out["first_call_ms"] = ms_since(first_start);
  out["first_call_compile_ms"] = model.graph_stats().compile_ms;
  out["first_call_graphs"] = model.graph_stats().compiles;
  out["first_call_graphs_loaded"] = model.graph_stats().loads;
  out["compile_ms_by_shape"]["prefill 16 + decode"] = model.graph_stats().compile_ms;
  tfm::GenerationStats warm;
  model.generate({prompt_of(16)}, gc, &warm);
  const double decode_tps = (warm.new_tokens - 1) / (warm.decode_ms / 1e3);
  out["decode_tokens_per_s"] = decode_tps;
  if (out.contains("bandwidth_gbs")) {
    const double bytes = decode_bytes(model, dtype);
    out["decode_weight_bytes"] = bytes;
    const double bound = out["bandwidth_gbs"].get<double>() * 1e9 / bytes;
    out["decode_bandwidth_bound_tokens_per_s"] = bound;
    out["decode_fraction_of_bound"] = decode_tps / bound;
  }
  out["peak_rss_mib_after_decode"] = peak_rss_mib();
  out["rss_over_weights_after_decode"] =
      peak_rss_mib() * 1024 * 1024 / static_cast<double>(model.weight_bytes());

  for (int64_t batch : batches) {
    const std::vector<std::vector<int64_t>> prompts(static_cast<size_t>(batch), prompt_of(16));
    const auto start = Clock::now();
    model.generate(prompts, gc);
    out["batches"][std::to_string(batch)]["first_call_ms"] = ms_since(start);
    tfm::GenerationStats s;
    model.generate(prompts, gc, &s);
    out["batches"][std::to_string(batch)]["decode_tokens_per_s"] =
        static_cast<double>(batch * (s.new_tokens - 1)) / (s.decode_ms / 1e3);
  }

  gc.max_new_tokens = 1;
  for (int64_t length : prefill_lengths) {
    const double compiled_before = model.graph_stats().compile_ms;
    model.generate({prompt_of(length)}, gc);  // compile this shape first
    out["compile_ms_by_shape"]["prefill " + std::to_string(length)] =
        model.graph_stats().compile_ms - compiled_before;
    tfm::GenerationStats s;
    model.generate({prompt_of(length)}, gc, &s);
    out["prefill_ms"][std::to_string(length)] = s.prefill_ms;
  }
  out["peak_rss_mib"] = peak_rss_mib();
  out["graph_compiles"] = model.graph_stats().compiles;
  out["graph_loads"] = model.graph_stats().loads;
  out["compile_ms_total"] = model.graph_stats().compile_ms;
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return tfm::bench::report_errors("generate_bench", bench_main, argc, argv);
}
