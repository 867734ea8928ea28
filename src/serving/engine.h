// Continuous batching on static shapes. The sequences share one KV cache of max_num_seqs rows;
// each decode step runs the first rows that hold sequences (batch buckets 1, 2, 4, ...,
// max_num_seqs), a new sequence's prompt runs in chunks between decode steps on its row alone, and
// a finished sequence's row takes the next one at once. Every shape is known from max_num_seqs and
// max_model_len and compiled before the first request (warm-up), never per request.
//
// The cache's slots are shared by the rows: one cursor is where every row writes its next token,
// and a row's attention mask marks its own entries (a query sees the marked slots up to its own).
// A new prompt takes the slots after the cursor, which then moves past them; the prompts that fit
// one chunk run together, in one step over their rows. When the cursor reaches the end of the
// cache, each row's entries move back to its start, in order (keys are cached after RoPE, so a
// moved entry means what it meant).
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "models/causal_lm.h"
#include "serving/sequence.h"
#include "tfm/error.h"
#include "tfm/generation.h"

namespace tfm::serving {

struct EngineOptions {
  int max_num_seqs = 8;
  int64_t max_model_len = 2048;  // prompt and generated tokens of one sequence
  int max_waiting = 256;         // sequences queued at once, not yet running; more are refused
};

// The queue is full: the server answers 503.
class EngineFull : public Error {
 public:
  using Error::Error;
};

// Read by /metrics from any thread.
struct EngineCounts {
  int running = 0;  // sequences holding a row
  int waiting = 0;  // queued for one
  int graphs_compiled = 0;
  int graphs_loaded = 0;  // from a compiler backend's on-disk cache
  int compactions = 0;    // times the rows' entries moved back to the cache's start
  int cancelled = 0;      // sequences dropped before their end (client gone, stop string)
};

// The cache's geometry and the shapes it implies.
struct EngineShapes {
  int64_t chunk = 0;  // prefill tokens per step of a longer prompt
  // The lengths a prompt of one chunk is padded to (8, 16, ... chunk): the shortest that holds it.
  std::vector<int64_t> prefill_lengths;
  int64_t window = 0;     // max_model_len rounded up to whole chunks
  int64_t cache_len = 0;  // slots: twice the window and a little, so entries move back rarely
  std::vector<int64_t> buckets;  // batch sizes of the steps
};

// `whole_cache`: the device's steps take the whole cache (DeviceKind::whole_buffer_states), so
// every step runs all max_num_seqs rows.
EngineShapes plan_engine_shapes(const EngineOptions& options, bool accelerator, bool whole_cache);

class Engine {
 public:
  Engine(CausalLMImpl& model, EngineOptions options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const EngineOptions& options() const { return options_; }
  // One line a compiled graph, e.g. "decode: 4 sequences x 1 token, 1024 cache slots, argmax".
  std::vector<std::string> shapes() const;
  // Compiles every shape, then runs sequences on a thread of its own until destroyed.
  void start();
  bool ready() const { return ready_; }
  // Queues a sequence. Throws Error when its prompt and max_tokens exceed max_model_len or it is
  // empty, EngineFull when max_waiting are queued.
  void submit(std::shared_ptr<Sequence> sequence);
  EngineCounts counts() const;
  int64_t vocab_size() const { return model_.config().vocab_size; }

 private:
  enum class Phase { kFree, kQueued, kPrefill, kDecode };
  struct Row {
    Phase phase = Phase::kFree;
    std::shared_ptr<Sequence> sequence;
    GenerationConfig choice;  // TokenChooser's part: greedy or temperature, top-k, top-p
    std::mt19937_64 rng;
    std::vector<int64_t> history;  // prompt and generated ids
    int32_t next_position = 0;
    int64_t next_token = 0;  // chosen, not yet in the cache
    // A prompt of several chunks: its length left-padded to whole chunks, and where it goes.
    int64_t padded = 0, chunks_done = 0, first_slot = 0;
    // The ids generated so far: the history past the prompt.
    std::span<const int64_t> generated() const {
      return std::span<const int64_t>(history).subspan(sequence->prompt().size());
    }
  };

  void warm_up();  // every shape once
  void loop();
  void iterate();
  void admit_waiting();  // under mutex_
  void drop_cancelled();
  const std::vector<int64_t>& prompt_of(int row) const;
  void begin_sequence(int row, int64_t end);
  void fill_chunk(const std::vector<int64_t>& prompt, int64_t padded, int64_t start, int64_t b,
                  Tensor& ids, Tensor& positions) const;
  void prefill_together();
  void start_prefill(int row);  // a prompt of several chunks, one chunk per iteration
  void run_prefill_chunk();
  void decode_step();
  void compact();
  struct Move {
    int64_t row, begin, end, to;  // slots [begin, end) of a row to `to`
  };
  void move_slots(const std::vector<Move>& moves);
  // Picks a row's next token from its logits and hands it over; frees the row when it ends.
  void emit(int row, std::span<float> logits, const int64_t* argmax);
  void free_row(int row);
  KvCache rows_of_cache(int64_t first, int64_t count);
  Tensor step(const StepInputs& inputs, int64_t first_row, bool argmax);
  void update_counts();

  CausalLMImpl& model_;
  const EngineOptions options_;
  const bool whole_cache_;
  const EngineShapes shapes_;
  KvCache* cache_ = nullptr;
  Tensor mask_;  // [max_num_seqs, cache_len] i32: each row's entries
  int64_t cursor_ = 0;
  std::vector<Row> rows_;
  std::deque<int> prefill_queue_;
  int prefilling_ = -1;

  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::shared_ptr<Sequence>> waiting_;
  bool stopping_ = false;
  std::atomic<bool> ready_ = false;
  std::atomic<int> running_ = 0, compiled_ = 0, loaded_ = 0, compactions_ = 0, cancelled_ = 0;
  std::thread thread_;
};

}  // namespace tfm::serving
