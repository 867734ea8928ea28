#include "serving/engine.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <optional>
#include <span>

#include "core/device_registry.h"
#include "generation/sampling.h"
#include "models/step_inputs.h"
#include "tfm/log.h"

namespace tfm::serving {
namespace {

constexpr int64_t kShortestPrefill = 8;
constexpr int64_t kCpuChunk = 128;
constexpr int64_t kAcceleratorChunk = 1024;

int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// The model's own log-probabilities of a row (log-softmax of its logits).
std::vector<float> log_softmax(std::span<const float> logits) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double total = 0;
  for (float v : logits) total += std::exp(static_cast<double>(v - max));
  const auto log_total = static_cast<float>(std::log(total));
  std::vector<float> out(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) out[i] = logits[i] - max - log_total;
  return out;
}

std::vector<TokenLogprob> likeliest(const std::vector<float>& logprobs, int count) {
  std::vector<int64_t> ids(logprobs.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>(i);
  const auto n = std::min<size_t>(static_cast<size_t>(count), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(n), ids.end(),
                    [&](int64_t a, int64_t b) {
                      return logprobs[static_cast<size_t>(a)] > logprobs[static_cast<size_t>(b)];
                    });
  std::vector<TokenLogprob> out;
  for (size_t i = 0; i < n; ++i) out.push_back({ids[i], logprobs[static_cast<size_t>(ids[i])]});
  return out;
}

// Penalties OpenAI defines on the tokens generated so far: presence once per id, frequency once
// per time it came.
void apply_openai_penalties(std::span<float> logits, std::span<const int64_t> generated,
                            const SamplingParams& p) {
  if (p.presence_penalty == 0.f && p.frequency_penalty == 0.f) return;
  std::vector<int64_t> ids(generated.begin(), generated.end());
  std::sort(ids.begin(), ids.end());
  for (auto run = ids.begin(); run != ids.end();) {
    const auto end = std::upper_bound(run, ids.end(), *run);
    if (*run >= 0 && static_cast<size_t>(*run) < logits.size()) {
      logits[static_cast<size_t>(*run)] -=
          p.presence_penalty + p.frequency_penalty * static_cast<float>(end - run);
    }
    run = end;
  }
}

bool whole_buffer_states(const Device& device) {
  const DeviceKind* kind = find_device_kind(device.type);
  return kind != nullptr && kind->whole_buffer_states;
}

bool plain_greedy(const SamplingParams& p) {
  return p.greedy() && !p.logprobs && p.repetition_penalty == 1.f && p.presence_penalty == 0.f &&
         p.frequency_penalty == 0.f;
}

}  // namespace

EngineShapes plan_engine_shapes(const EngineOptions& o, bool accelerator, bool whole_cache) {
  if (o.max_num_seqs < 1) throw Error("--max-num-seqs must be at least 1");
  if (o.max_model_len < 2) throw Error("--max-model-len must be at least 2");
  if (o.max_waiting < 1) throw Error("--max-waiting must be at least 1");
  EngineShapes s;
  // No longer than the longest prompt needs.
  int64_t longest = kShortestPrefill;
  while (longest < o.max_model_len) longest *= 2;
  s.chunk = std::min(accelerator ? kAcceleratorChunk : kCpuChunk, longest);
  for (int64_t n = kShortestPrefill; n <= s.chunk; n *= 2) s.prefill_lengths.push_back(n);
  s.window = round_up(o.max_model_len, s.chunk);
  // After entries move back the cursor is within the window; a prompt then reserves at most the
  // window and one slot per chunk (the decode steps run between its chunks).
  s.cache_len = 2 * s.window + s.window / s.chunk;
  for (int64_t b = 1; b < o.max_num_seqs && !whole_cache; b *= 2) s.buckets.push_back(b);
  s.buckets.push_back(o.max_num_seqs);
  return s;
}

Engine::Engine(CausalLMImpl& model, EngineOptions options)
    : model_(model),
      options_(options),
      whole_cache_(whole_buffer_states(model.device())),
      shapes_(plan_engine_shapes(options, model.device().type != "cpu", whole_cache_)),
      rows_(static_cast<size_t>(options.max_num_seqs)) {
  // A row's entries are spread over the shared cache, so a window over cache slots (what the
  // attention op applies) is not one over the row's positions: served only where no sequence
  // outgrows the window, which then hides nothing.
  const std::optional<int64_t> window = model.config().sliding_window;
  if (window && *window < options.max_model_len) {
    throw Error("the model attends within a sliding_window of " + std::to_string(*window) +
                " tokens, which tfm serve cannot apply yet over its shared cache: serve it with "
                "--max-model-len " +
                std::to_string(*window) + " or less (not " + std::to_string(options.max_model_len) +
                ")");
  }
  model.limit_sequence_length(options.max_model_len);

  try {
    cache_ = &model.cache_for(options.max_num_seqs, shapes_.cache_len);
  } catch (const Error& e) {
    throw Error("the KV cache for --max-num-seqs " + std::to_string(options.max_num_seqs) + " x " +
                std::to_string(shapes_.cache_len) + " slots (twice --max-model-len " +
                std::to_string(options.max_model_len) +
                " in whole chunks) cannot be made: " + e.what());
  }
  mask_ = filled_i32({options.max_num_seqs, shapes_.cache_len}, 0);
}

Engine::~Engine() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<std::string> Engine::shapes() const {
  const std::string cache = std::to_string(shapes_.cache_len) + " cache slots";
  std::vector<std::string> out;
  const auto sequences = [](int64_t b) {
    return std::to_string(b) + (b == 1 ? " sequence" : " sequences");
  };
  for (int64_t b : shapes_.buckets) {
    for (int64_t chunk : shapes_.prefill_lengths) {
      out.push_back("prefill: " + sequences(b) + " x " + std::to_string(chunk) + " tokens, " +
                    cache);
    }
  }
  for (int64_t b : shapes_.buckets) {
    for (const char* kind : {"logits", "argmax"}) {
      out.push_back("decode: " + sequences(b) + " x 1 token, " + cache + ", " + kind);
    }
  }
  return out;
}

KvCache Engine::rows_of_cache(int64_t first, int64_t count) {
  KvCache view{count, shapes_.cache_len, {}};
  for (const Tensor& buffer : cache_->buffers)
    view.buffers.push_back(buffer.slice(first, first + count));
  return view;
}

Tensor Engine::step(const StepInputs& inputs, int64_t first_row, bool argmax) {
  KvCache view = rows_of_cache(first_row, inputs.input_ids.dim(0));
  std::vector<const void*> where;
  for (const Tensor& t : view.buffers) where.push_back(t.data());
  Tensor out = model_.step(inputs, view, false, false, argmax);
  for (size_t i = 0; i < where.size(); ++i) {
    TFM_CHECK(view.buffers[i].data() == where[i],
              "the serving engine needs a backend that updates the KV cache in place");
  }
  const GraphCacheStats& stats = model_.graph_stats();
  compiled_ = stats.compiles;
  loaded_ = stats.loads;
  return out;
}

void Engine::warm_up() {
  // Each shape once on rows nothing reads: every row's mask is cleared when a sequence takes it.
  const int64_t len = shapes_.cache_len;
  for (int64_t b : shapes_.buckets) {
    for (int64_t chunk : shapes_.prefill_lengths) {
      StepInputs in{filled_i32({b, chunk}, 0), arange_rows(b, 0, chunk),
                    arange_rows(1, 0, chunk).view({chunk}), filled_i32({b, len}, 1)};
      step(in, 0, false);
    }
  }
  for (int64_t b : shapes_.buckets) {
    for (bool argmax : {false, true}) {
      StepInputs in{filled_i32({b, 1}, 0), filled_i32({b, 1}, 0), filled_i32({1}, 0),
                    filled_i32({b, len}, 1)};
      step(in, 0, argmax);
    }
  }
}

void Engine::start() {
  // The warm-up runs on the thread that runs the sequences after it, so that every step comes
  // from one thread. The cpu backend's OpenMP regions started from a second thread make a second
  // team of threads; libgomp, then managing more threads than there are cores, has its waiting
  // threads sleep rather than spin, and each parallel region pays for waking them (8 ms a token of
  // Qwen3-0.6B on 2 cores, against 40 for the step itself).
  std::promise<void> warmed;
  std::future<void> done = warmed.get_future();
  thread_ = std::thread([this, warmed = std::move(warmed)]() mutable {
    try {
      warm_up();
    } catch (...) {
      warmed.set_exception(std::current_exception());
      return;
    }
    ready_ = true;
    warmed.set_value();
    loop();
  });
  done.get();  // a failed warm-up's error
}

void Engine::submit(std::shared_ptr<Sequence> sequence) {
  const auto prompt = static_cast<int64_t>(sequence->prompt().size());
  const int max_tokens = sequence->params().max_tokens;
  if (prompt == 0) throw Error("the prompt is empty");
  if (max_tokens < 1) throw Error("max_tokens must be at least 1");
  if (prompt + max_tokens > options_.max_model_len) {
    throw Error("this model's maximum context length is " + std::to_string(options_.max_model_len) +
                " tokens. However, you requested " + std::to_string(prompt + max_tokens) +
                " tokens (" + std::to_string(prompt) + " in the messages, " +
                std::to_string(max_tokens) +
                " in the completion). Please reduce the length of the messages or completion.");
  }
  {
    std::lock_guard lock(mutex_);
    if (static_cast<int>(waiting_.size()) >= options_.max_waiting) {
      throw EngineFull("the server is full: " + std::to_string(options_.max_waiting) +
                       " requests are already waiting");
    }
    waiting_.push_back(std::move(sequence));
  }
  wake_.notify_all();
}

EngineCounts Engine::counts() const {
  EngineCounts c;
  {
    std::lock_guard lock(mutex_);
    c.waiting = static_cast<int>(waiting_.size());
  }
  c.running = running_;
  c.graphs_compiled = compiled_;
  c.graphs_loaded = loaded_;
  c.compactions = compactions_;
  c.cancelled = cancelled_;
  return c;
}

void Engine::loop() {
  while (true) {
    {
      std::unique_lock lock(mutex_);
      const auto busy = [&] {
        return std::any_of(rows_.begin(), rows_.end(),
                           [](const Row& r) { return r.phase != Phase::kFree; });
      };
      wake_.wait(lock, [&] { return stopping_ || !waiting_.empty() || busy(); });
      if (stopping_) break;
      admit_waiting();
    }
    try {
      iterate();
    } catch (const std::exception& e) {
      // A step that fails fails every sequence it carried; the server goes on.
      log_warn(std::string("serving step failed: ") + e.what());
      for (size_t r = 0; r < rows_.size(); ++r) {
        if (rows_[r].phase == Phase::kFree) continue;
        rows_[r].sequence->fail(e.what());
        free_row(static_cast<int>(r));
      }
      prefill_queue_.clear();
    }
    update_counts();
  }
  std::lock_guard lock(mutex_);
  for (auto& s : waiting_) s->fail("the server is shutting down");
  for (Row& r : rows_) {
    if (r.sequence) r.sequence->fail("the server is shutting down");
  }
}

void Engine::update_counts() {
  running_ = static_cast<int>(std::count_if(rows_.begin(), rows_.end(),
                                            [](const Row& r) { return r.phase != Phase::kFree; }));
}

void Engine::admit_waiting() {
  for (size_t r = 0; r < rows_.size() && !waiting_.empty(); ++r) {
    if (rows_[r].phase != Phase::kFree) continue;
    Row& row = rows_[r];
    row = Row{};
    row.sequence = std::move(waiting_.front());
    waiting_.pop_front();
    row.phase = Phase::kQueued;
    prefill_queue_.push_back(static_cast<int>(r));
  }
}

void Engine::free_row(int r) {
  Row& row = rows_[static_cast<size_t>(r)];
  row = Row{};
  if (prefilling_ == r) prefilling_ = -1;
  std::erase(prefill_queue_, r);
}

void Engine::drop_cancelled() {
  for (size_t r = 0; r < rows_.size(); ++r) {
    if (rows_[r].phase != Phase::kFree && rows_[r].sequence->cancelled()) {
      free_row(static_cast<int>(r));
      ++cancelled_;
    }
  }
}

void Engine::iterate() {
  drop_cancelled();
  if (prefilling_ < 0 && !prefill_queue_.empty()) {
    if (static_cast<int64_t>(prompt_of(prefill_queue_.front()).size()) <= shapes_.chunk) {
      prefill_together();
    } else {
      start_prefill(prefill_queue_.front());
    }
  }
  if (prefilling_ >= 0) run_prefill_chunk();
  const bool decoding = std::any_of(rows_.begin(), rows_.end(),
                                    [](const Row& r) { return r.phase == Phase::kDecode; });
  if (!decoding) return;
  if (cursor_ == shapes_.cache_len) compact();
  decode_step();
  ++cursor_;
}

const std::vector<int64_t>& Engine::prompt_of(int r) const {
  return rows_[static_cast<size_t>(r)].sequence->prompt();
}

// Its prompt's slots: the `length` before `end` marked, the rest of the row's cache forgotten.
void Engine::begin_sequence(int r, int64_t end) {
  Row& row = rows_[static_cast<size_t>(r)];
  const SamplingParams& p = row.sequence->params();
  const std::vector<int64_t>& prompt = row.sequence->prompt();
  const auto length = static_cast<int64_t>(prompt.size());
  int32_t* mask = mask_.data_as<int32_t>() + r * shapes_.cache_len;
  std::fill_n(mask, shapes_.cache_len, 0);
  std::fill(mask + end - length, mask + end, 1);
  row.history = prompt;
  row.next_position = static_cast<int32_t>(length);
  row.choice.do_sample = !p.greedy();
  row.choice.temperature = p.temperature;
  row.choice.top_k = p.top_k;
  row.choice.top_p = p.top_p;
  row.rng.seed(p.seed.value_or(std::random_device{}()));
}

// One chunk's ids and positions of a prompt left-padded to `padded` tokens (transformers'
// positions for left padding: 1 on padding, then 0, 1, ...), into row `b` of [batch, chunk].
void Engine::fill_chunk(const std::vector<int64_t>& prompt, int64_t padded, int64_t start,
                        int64_t b, Tensor& ids, Tensor& positions) const {
  const int64_t chunk = ids.dim(1), padding = padded - static_cast<int64_t>(prompt.size());
  for (int64_t j = 0; j < chunk; ++j) {
    const int64_t at = start + j;
    ids.data_as<int32_t>()[b * chunk + j] =
        at < padding ? 0 : static_cast<int32_t>(prompt[static_cast<size_t>(at - padding)]);
    positions.data_as<int32_t>()[b * chunk + j] =
        at < padding ? 1 : static_cast<int32_t>(at - padding);
  }
}

void Engine::prefill_together() {
  // Every waiting prompt of one chunk, in one step over the rows from the first of them to the
  // last; the rows between compute what nobody reads and write slots nobody marks.
  std::vector<int> rows;
  for (int r : prefill_queue_) {
    if (static_cast<int64_t>(prompt_of(r).size()) <= shapes_.chunk) rows.push_back(r);
  }
  for (int r : rows) std::erase(prefill_queue_, r);
  size_t longest = 0;
  for (int r : rows) longest = std::max(longest, prompt_of(r).size());
  const int64_t chunk =
      *std::lower_bound(shapes_.prefill_lengths.begin(), shapes_.prefill_lengths.end(),
                        static_cast<int64_t>(longest));
  if (cursor_ + chunk > shapes_.cache_len) compact();
  const auto [low, high] = std::minmax_element(rows.begin(), rows.end());
  const int64_t batch =
      *std::lower_bound(shapes_.buckets.begin(), shapes_.buckets.end(), *high - *low + 1);
  const int64_t first = std::min<int64_t>(*low, options_.max_num_seqs - batch);
  Tensor ids = filled_i32({batch, chunk}, 0), positions = filled_i32({batch, chunk}, 0);
  for (int r : rows) {
    fill_chunk(prompt_of(r), chunk, 0, r - first, ids, positions);
    begin_sequence(r, cursor_ + chunk);
  }
  StepInputs in{ids, positions, arange_rows(1, cursor_, chunk).view({chunk}),
                mask_.slice(first, first + batch)};
  Tensor logits = step(in, first, false);
  cursor_ += chunk;
  const int64_t vocab = model_.config().vocab_size;
  for (int r : rows) {
    rows_[static_cast<size_t>(r)].phase = Phase::kDecode;
    emit(
        r,
        std::span<float>(logits.data_as<float>() + (r - first) * vocab, static_cast<size_t>(vocab)),
        nullptr);
  }
}

void Engine::start_prefill(int r) {
  prefill_queue_.pop_front();
  Row& row = rows_[static_cast<size_t>(r)];
  const auto length = static_cast<int64_t>(prompt_of(r).size());
  const int64_t padded = round_up(length, shapes_.chunk);
  // The prompt's slots, and one a chunk for the decode steps between its chunks.
  if (cursor_ + padded + padded / shapes_.chunk > shapes_.cache_len) compact();
  row.first_slot = cursor_;
  row.padded = padded;
  cursor_ += padded;
  begin_sequence(r, cursor_);
  row.phase = Phase::kPrefill;
  prefilling_ = r;
}

void Engine::run_prefill_chunk() {
  const int r = prefilling_;
  Row& row = rows_[static_cast<size_t>(r)];
  const int64_t chunk = shapes_.chunk, start = row.chunks_done * chunk;
  // Its row alone, or every row where steps take the whole cache.
  const int64_t first = whole_cache_ ? 0 : r, batch = whole_cache_ ? options_.max_num_seqs : 1;
  Tensor ids = filled_i32({batch, chunk}, 0), positions = filled_i32({batch, chunk}, 0);
  fill_chunk(prompt_of(r), row.padded, start, r - first, ids, positions);
  StepInputs in{ids, positions, arange_rows(1, row.first_slot + start, chunk).view({chunk}),
                mask_.slice(first, first + batch)};
  Tensor logits = step(in, first, false);
  if (++row.chunks_done * chunk < row.padded) return;
  prefilling_ = -1;
  row.phase = Phase::kDecode;
  const int64_t vocab = model_.config().vocab_size;
  emit(r,
       std::span<float>(logits.data_as<float>() + (r - first) * vocab, static_cast<size_t>(vocab)),
       nullptr);
}

void Engine::decode_step() {
  int last = 0;
  bool argmax = true;
  for (size_t r = 0; r < rows_.size(); ++r) {
    if (rows_[r].phase != Phase::kDecode) continue;
    last = static_cast<int>(r);
    argmax = argmax && plain_greedy(rows_[r].sequence->params());
  }
  const int64_t batch = *std::lower_bound(shapes_.buckets.begin(), shapes_.buckets.end(), last + 1);
  const int64_t len = shapes_.cache_len;
  Tensor ids = filled_i32({batch, 1}, 0);
  Tensor positions = filled_i32({batch, 1}, 0);
  for (int64_t b = 0; b < batch; ++b) {
    Row& row = rows_[static_cast<size_t>(b)];
    // A row with no sequence yet sees its own slot: no row's attention is over nothing.
    if (row.phase == Phase::kDecode || row.phase == Phase::kFree || row.phase == Phase::kQueued) {
      mask_.data_as<int32_t>()[b * len + cursor_] = 1;
    }
    if (row.phase != Phase::kDecode) continue;
    ids.data_as<int32_t>()[b] = static_cast<int32_t>(row.next_token);
    positions.data_as<int32_t>()[b] = row.next_position++;
  }
  StepInputs in{ids, positions, filled_i32({1}, static_cast<int32_t>(cursor_)),
                mask_.slice(0, batch)};
  Tensor out = step(in, 0, argmax);
  const int64_t vocab = model_.config().vocab_size;
  for (int64_t b = 0; b < batch; ++b) {
    if (rows_[static_cast<size_t>(b)].phase != Phase::kDecode) continue;
    if (argmax) {
      const int64_t id = out.data_as<int32_t>()[b];
      emit(static_cast<int>(b), {}, &id);
    } else {
      emit(static_cast<int>(b),
           std::span<float>(out.data_as<float>() + b * vocab, static_cast<size_t>(vocab)), nullptr);
    }
  }
}

void Engine::emit(int r, std::span<float> logits, const int64_t* argmax) {
  Row& row = rows_[static_cast<size_t>(r)];
  const SamplingParams& p = row.sequence->params();
  TokenEvent event;
  std::vector<float> logprobs;
  if (p.logprobs) logprobs = log_softmax(logits);
  if (argmax != nullptr) {
    event.token = *argmax;
  } else {
    // vLLM's order: the repetition penalty, then OpenAI's, then temperature and the cut-offs.
    generation::apply_repetition_penalty(logits, row.history, p.repetition_penalty);
    apply_openai_penalties(logits, row.generated(), p);
    const generation::TokenChooser chooser{row.choice, p.stop_token_ids, row.rng};
    event.token = chooser.choose(logits, row.history, static_cast<int>(row.generated().size()));
  }
  if (p.logprobs) {
    event.logprob = logprobs[static_cast<size_t>(event.token)];
    event.top = likeliest(logprobs, p.top_logprobs);
  }
  row.history.push_back(event.token);
  row.next_token = event.token;
  const auto& stops = p.stop_token_ids;
  if (std::find(stops.begin(), stops.end(), event.token) != stops.end()) {
    event.finish = FinishReason::kStop;
  } else if (static_cast<int64_t>(row.generated().size()) >= p.max_tokens) {
    event.finish = FinishReason::kLength;
  }
  const bool ends = event.finish.has_value();
  row.sequence->push(std::move(event));
  if (ends) free_row(r);
}

void Engine::compact() {
  TFM_CHECK(prefilling_ < 0, "the KV cache's entries move only between prompts");
  const int64_t len = shapes_.cache_len;
  int64_t longest = 0;
  std::vector<Move> moves;
  for (size_t r = 0; r < rows_.size(); ++r) {
    int32_t* mask = mask_.data_as<int32_t>() + static_cast<int64_t>(r) * len;
    if (rows_[r].phase != Phase::kDecode) {
      std::fill_n(mask, len, 0);
      continue;
    }
    // Each run of marked slots, in order, to the start of the row.
    int64_t kept = 0;
    for (int64_t s = 0; s < cursor_;) {
      if (mask[s] == 0) {
        ++s;
        continue;
      }
      int64_t e = s;
      while (e < cursor_ && mask[e] != 0) ++e;
      if (s != kept) moves.push_back({static_cast<int64_t>(r), s, e, kept});
      kept += e - s;
      s = e;
    }
    std::fill_n(mask, kept, 1);
    std::fill(mask + kept, mask + len, 0);
    longest = std::max(longest, kept);
  }
  move_slots(moves);
  cursor_ = longest;
  ++compactions_;
}

void Engine::move_slots(const std::vector<Move>& moves) {
  if (moves.empty()) return;
  const int64_t len = shapes_.cache_len;
  for (Tensor& buffer : cache_->buffers) {
    // Where steps take whole buffers, the moves are made in a host copy written back.
    Tensor cache = whole_cache_ ? buffer.to(kCpu) : buffer;
    const int64_t width = buffer.numel() / (buffer.dim(0) * len);
    for (const Move& m : moves) {
      const Tensor slots = cache.slice(m.row, m.row + 1).view({len, width});
      // Through a copy: the run may overlap where it goes.
      const Tensor run = slots.slice(m.begin, m.end).clone();
      Tensor target = slots.slice(m.to, m.to + (m.end - m.begin));
      target.copy_from(run);
    }
    if (whole_cache_) buffer.copy_from(cache);
  }
}

}  // namespace tfm::serving
