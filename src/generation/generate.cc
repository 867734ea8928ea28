// generate(): the growing state (ids, attention mask, finished rows) stays on the host; each
// step hands the model only that step's inputs, so the compiled graphs never change shape.
#include "generation/generate.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>

#include "generation/buckets.h"
#include "generation/sampling.h"
#include "io/model_config.h"
#include "models/causal_lm.h"
#include "models/step_inputs.h"
#include "tfm/error.h"

namespace tfm {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// The prompt left-padded to a whole number of prefill chunks, with transformers' positions
// (cumulative count of real tokens minus one; 1 on padding).
struct PaddedPrompt {
  Tensor ids, positions;  // [batch, padded_len] i32
  Tensor mask;            // [batch, cache_len] i32: 1 where a real token sits
  std::vector<int32_t> next_position;
};

PaddedPrompt pad_prompt(const Tensor& ids, const Tensor& mask,
                        const generation::GenerationShapes& shapes, int32_t pad_id) {
  const int64_t batch = ids.dim(0), seq = ids.dim(1), cache_len = shapes.cache_len;
  const int64_t padded_len = shapes.padded_prompt, extra = padded_len - seq;
  PaddedPrompt p;
  p.ids = filled_i32({batch, padded_len}, pad_id);
  p.positions = filled_i32({batch, padded_len}, 1);
  p.mask = filled_i32({batch, cache_len}, 0);
  p.next_position.assign(static_cast<size_t>(batch), 0);
  for (int64_t b = 0; b < batch; ++b) {
    int32_t count = 0;
    for (int64_t j = 0; j < seq; ++j) {
      const int64_t slot = extra + j;
      p.ids.data_as<int32_t>()[b * padded_len + slot] = ids.data_as<int32_t>()[b * seq + j];
      if (mask.data_as<int32_t>()[b * seq + j] == 0) continue;
      p.mask.data_as<int32_t>()[b * cache_len + slot] = 1;
      p.positions.data_as<int32_t>()[b * padded_len + slot] = count++;
    }
    p.next_position[static_cast<size_t>(b)] = count;
  }
  return p;
}

Tensor columns(const Tensor& t, int64_t start, int64_t count) {
  const int64_t rows = t.dim(0), width = t.dim(1);
  Tensor out = Tensor::empty({rows, count}, DType::i32);
  for (int64_t r = 0; r < rows; ++r) {
    std::copy_n(t.data_as<int32_t>() + r * width + start, count,
                out.data_as<int32_t>() + r * count);
  }
  return out;
}

}  // namespace

std::vector<int64_t> generation::stop_ids(const GenerationConfig& gc, const ModelConfig& config) {
  if (!gc.eos_token_id.empty()) return gc.eos_token_id;
  return config.generation_eos_token_ids.value_or(config.eos_token_ids);
}

namespace {

int32_t resolve_pad(const GenerationConfig& gc, const ModelConfig& config,
                    const std::vector<int64_t>& eos) {
  if (gc.pad_token_id) return static_cast<int32_t>(*gc.pad_token_id);
  if (config.pad_token_id) return static_cast<int32_t>(*config.pad_token_id);
  return eos.empty() ? 0 : static_cast<int32_t>(eos[0]);
}

// A setting as Python prints the float transformers holds ("0.0", "-0.5", "nan").
std::string python_float(float value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char text[32];
  const auto end = std::to_chars(text, text + sizeof text, value).ptr;
  std::string out(text, end);
  if (out.find_first_of(".e") == std::string::npos) out += ".0";
  return out;
}

}  // namespace

// A sampling setting is checked only when sampling, each only when it is not off, as the logits
// processors transformers builds are.
void generation::check_config(const GenerationConfig& gc) {
  if (gc.max_new_tokens <= 0) {
    throw Error("`max_new_tokens` must be greater than 0, but is " +
                std::to_string(gc.max_new_tokens) + ".");
  }
  if (gc.min_new_tokens < 0) {
    throw Error("`min_new_tokens` has to be a positive integer, but is " +
                std::to_string(gc.min_new_tokens));
  }
  if (gc.repetition_penalty != 1.f && !(gc.repetition_penalty > 0.f)) {
    throw Error("`penalty` has to be a strictly positive float, but is " +
                python_float(gc.repetition_penalty));
  }
  if (gc.do_sample) {
    if (!(gc.temperature > 0.f)) {
      throw Error("`temperature` (=" + python_float(gc.temperature) +
                  ") has to be a strictly positive float, otherwise your next token scores will be "
                  "invalid." +
                  (gc.temperature == 0.f ? " If you're looking for greedy decoding strategies, set "
                                           "`do_sample=False`."
                                         : ""));
    }
    if (gc.top_k < 0) {
      throw Error("`top_k` has to be a strictly positive integer, but is " +
                  std::to_string(gc.top_k));
    }
    if (gc.top_p < 0.f) {
      throw Error("`top_p` has to be a float > 0 and < 1, but is " + python_float(gc.top_p));
    }
  }
  if (gc.cache_implementation != "static") {
    throw Error("cache_implementation '" + gc.cache_implementation +
                "' is not supported: tfm keeps a static KV cache (\"static\")");
  }
}

namespace {

// The KV cache of `batch` x `cache_len` slots; a cache that cannot be made is said naming the
// prompt and max_new_tokens it was sized for.
KvCache& kv_cache(CausalLMImpl& model, int64_t batch, int64_t cache_len, int64_t seq,
                  int max_new_tokens) {
  try {
    return model.cache_for(batch, cache_len);
  } catch (const Error& e) {
    throw Error("the KV cache for " + std::to_string(batch) + " x " + std::to_string(cache_len) +
                " slots (a prompt of " + std::to_string(seq) + " tokens and max_new_tokens " +
                std::to_string(max_new_tokens) + ") cannot be made: " + e.what());
  }
}

}  // namespace

namespace generation {

Tensor generate(CausalLMImpl& model, const Tensor& input_ids, const Tensor* attention_mask,
                const GenerationConfig& gc, GenerationStats* stats) {
  check_config(gc);
  const Tensor ids = ids_as_i32(input_ids, "input_ids");
  const int64_t batch = ids.dim(0), seq = ids.dim(1);
  const Tensor mask =
      attention_mask ? ids_as_i32(*attention_mask, "attention_mask") : filled_i32({batch, seq}, 1);
  if (mask.shape() != ids.shape()) throw Error("attention_mask does not match input_ids");
  const std::vector<int64_t> eos = generation::stop_ids(gc, model.config());
  const int32_t pad = resolve_pad(gc, model.config(), eos);
  const GraphCacheStats graphs_before = model.graph_stats();

  const generation::GenerationShapes shapes =
      generation::plan_shapes(seq, gc.max_new_tokens, model.device().type != "cpu");
  const int64_t chunk = shapes.chunk, padded_len = shapes.padded_prompt,
                cache_len = shapes.cache_len;
  KvCache& cache = kv_cache(model, batch, cache_len, seq, gc.max_new_tokens);
  // Padding is masked out, so any valid id will do as its input; 0 always exists.
  PaddedPrompt prompt = pad_prompt(ids, mask, shapes, 0);

  std::vector<std::vector<int64_t>> history(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t j = 0; j < seq; ++j) {
      if (mask.data_as<int32_t>()[b * seq + j])
        history[static_cast<size_t>(b)].push_back(ids.data_as<int32_t>()[b * seq + j]);
    }
  }

  // Plain greedy decoding needs only each row's argmax: the graph picks it on the device and
  // the whole logits never travel back.
  const bool argmax_on_device =
      !gc.do_sample && gc.repetition_penalty == 1.f && gc.min_new_tokens == 0;
  const auto start = Clock::now();
  Tensor logits;  // or, with argmax_on_device, the chosen ids
  if (gc.max_new_tokens > 0) {
    for (int64_t c = 0; c < padded_len; c += chunk) {
      StepInputs in{columns(prompt.ids, c, chunk), columns(prompt.positions, c, chunk),
                    arange_rows(1, c, chunk).view({chunk}), prompt.mask};
      logits = model.step(in, cache, false, gc.disable_compile, argmax_on_device);
    }
  }
  const double prefill_ms = ms_since(start);

  std::mt19937_64 rng(gc.seed.value_or(std::random_device{}()));
  const generation::TokenChooser chooser{gc, eos, rng};
  std::vector<std::vector<int64_t>> generated(static_cast<size_t>(batch));
  std::vector<bool> finished(static_cast<size_t>(batch), false);
  const int64_t vocab = model.config().vocab_size;
  for (int t = 0; t < gc.max_new_tokens; ++t) {
    Tensor step_ids = Tensor::empty({batch, 1}, DType::i32);
    for (int64_t b = 0; b < batch; ++b) {
      const auto row = static_cast<size_t>(b);
      const auto choose = [&] {
        if (argmax_on_device) return static_cast<int64_t>(logits.data_as<int32_t>()[b]);
        std::span<float> row_logits(logits.data_as<float>() + b * vocab,
                                    static_cast<size_t>(vocab));
        return chooser.choose(row_logits, history[row], t);
      };
      const int64_t token = finished[row] ? pad : choose();
      generated[row].push_back(token);
      step_ids.data_as<int32_t>()[b] = finished[row] ? 0 : static_cast<int32_t>(token);
      if (finished[row]) continue;
      history[row].push_back(token);
      if (gc.streamer) gc.streamer(static_cast<int>(b), token);
      finished[row] = std::find(eos.begin(), eos.end(), token) != eos.end();
    }
    const bool all_done = std::all_of(finished.begin(), finished.end(), [](bool f) { return f; });
    if (all_done || t + 1 == gc.max_new_tokens) break;
    const int64_t slot = padded_len + t;
    Tensor positions = Tensor::empty({batch, 1}, DType::i32);
    for (int64_t b = 0; b < batch; ++b) {
      prompt.mask.data_as<int32_t>()[b * cache_len + slot] = 1;
      positions.data_as<int32_t>()[b] = prompt.next_position[static_cast<size_t>(b)]++;
    }
    StepInputs in{step_ids, positions, filled_i32({1}, static_cast<int32_t>(slot)), prompt.mask};
    logits = model.step(in, cache, false, gc.disable_compile, argmax_on_device);
  }

  const int64_t new_tokens = generated.empty() ? 0 : static_cast<int64_t>(generated[0].size());
  Tensor out = Tensor::empty({batch, seq + new_tokens}, DType::i64);
  for (int64_t b = 0; b < batch; ++b) {
    int64_t* row = out.data_as<int64_t>() + b * (seq + new_tokens);
    for (int64_t j = 0; j < seq; ++j) row[j] = ids.data_as<int32_t>()[b * seq + j];
    std::copy(generated[static_cast<size_t>(b)].begin(), generated[static_cast<size_t>(b)].end(),
              row + seq);
  }
  if (stats) {
    stats->prompt_tokens = static_cast<int>(seq);
    stats->new_tokens = static_cast<int>(new_tokens);
    stats->prefill_ms = prefill_ms;
    stats->decode_ms = ms_since(start) - prefill_ms;
    stats->graphs_compiled = model.graph_stats().compiles - graphs_before.compiles;
    stats->graphs_loaded = model.graph_stats().loads - graphs_before.loads;
  }
  return out;
}

std::vector<std::vector<int64_t>> generate(CausalLMImpl& model,
                                           const std::vector<std::vector<int64_t>>& prompts,
                                           const GenerationConfig& gc, GenerationStats* stats) {
  if (prompts.empty()) throw Error("generate: no prompts given");
  size_t longest = 0;
  for (const auto& p : prompts) {
    if (p.empty()) throw Error("generate: an empty prompt (give at least one token)");
    longest = std::max(longest, p.size());
  }
  const auto batch = static_cast<int64_t>(prompts.size()), seq = static_cast<int64_t>(longest);
  Tensor ids = Tensor::zeros({batch, seq}, DType::i64);
  Tensor mask = Tensor::zeros({batch, seq}, DType::i64);
  for (int64_t b = 0; b < batch; ++b) {
    const auto& p = prompts[static_cast<size_t>(b)];
    const int64_t offset = seq - static_cast<int64_t>(p.size());  // left padding
    for (size_t j = 0; j < p.size(); ++j) {
      ids.data_as<int64_t>()[b * seq + offset + static_cast<int64_t>(j)] = p[j];
      mask.data_as<int64_t>()[b * seq + offset + static_cast<int64_t>(j)] = 1;
    }
  }
  const Tensor out = generate(model, ids, &mask, gc, stats);
  const std::vector<int64_t> eos = generation::stop_ids(gc, model.config());
  std::vector<std::vector<int64_t>> rows;
  const int64_t width = out.dim(1);
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t* row = out.data_as<int64_t>() + b * width;
    const auto& p = prompts[static_cast<size_t>(b)];
    std::vector<int64_t> r(p.begin(), p.end());
    for (int64_t j = seq; j < width; ++j) {
      r.push_back(row[j]);
      if (std::find(eos.begin(), eos.end(), row[j]) != eos.end()) break;
    }
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace generation
}  // namespace tfm
