#include "serving/completion_run.h"

namespace tfm::serving {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

json bytes_of(const std::string& text) {
  json out = json::array();
  for (unsigned char c : text) out.push_back(static_cast<int>(c));
  return out;
}

}  // namespace

CompletionRun::CompletionRun(Engine& engine, const Tokenizer& tokenizer, Metrics& metrics,
                             const CompletionRequest& request,
                             const std::vector<std::vector<int64_t>>& prompts,
                             SamplingParams params)
    : tokenizer_(tokenizer), metrics_(metrics), start_(Clock::now()) {
  int64_t processed = 0;
  for (const std::vector<int64_t>& prompt : prompts) {
    prompt_tokens_ += prompt.size();
    for (int i = 0; i < request.n; ++i) {
      SamplingParams p = params;
      // Choices from one seed differ, each reproducible.
      if (p.seed) p.seed = *p.seed + choices_.size();
      Choice c;
      c.sequence = std::make_shared<Sequence>(prompt, std::move(p));
      c.decoder = std::make_unique<StreamingDecoder>(tokenizer, /*skip_special_tokens=*/true);
      c.stops = std::make_unique<StopStrings>(request.stop);
      c.last = start_;
      choices_.push_back(std::move(c));
      processed += static_cast<int64_t>(prompt.size());
    }
  }
  try {
    for (Choice& c : choices_) engine.submit(c.sequence);
  } catch (...) {
    for (Choice& c : choices_) c.sequence->cancel();
    throw;
  }
  metrics_.prompt_tokens(processed);
}

CompletionRun::~CompletionRun() {
  for (Choice& c : choices_) c.sequence->cancel();
}

bool CompletionRun::done() const {
  return std::all_of(choices_.begin(), choices_.end(),
                     [](const Choice& c) { return c.finish.has_value(); });
}

int CompletionRun::completion_tokens() const {
  int total = 0;
  for (const Choice& c : choices_) total += c.tokens;
  return total;
}

std::vector<ChoiceDelta> CompletionRun::next(std::chrono::milliseconds timeout) {
  std::vector<ChoiceDelta> out;
  // Whatever has arrived, then a wait on the first unfinished choice if nothing had.
  for (int pass = 0; pass < 2 && out.empty(); ++pass) {
    for (size_t i = 0; i < choices_.size(); ++i) {
      Choice& c = choices_[i];
      if (c.finish) continue;
      const auto wait = pass == 0 ? std::chrono::milliseconds(0) : timeout;
      std::vector<TokenEvent> events = c.sequence->take(wait);
      if (const auto error = c.sequence->error(); error && events.empty()) {
        throw ApiError(500, "generation failed: " + *error);
      }
      if (auto delta = advance(static_cast<int>(i), std::move(events))) {
        out.push_back(std::move(*delta));
      }
      if (pass == 1) break;
    }
  }
  return out;
}

std::optional<ChoiceDelta> CompletionRun::advance(int index, std::vector<TokenEvent> events) {
  if (events.empty()) return std::nullopt;
  Choice& c = choices_[static_cast<size_t>(index)];
  ChoiceDelta d;
  d.index = index;
  const bool logprobs = c.sequence->params().logprobs;
  if (logprobs) d.logprobs = json::array();
  for (const TokenEvent& e : events) {
    const auto now = Clock::now();
    if (c.tokens == 0) {
      metrics_.first_token(seconds(now - start_));
    } else {
      metrics_.inter_token(seconds(now - c.last));
    }
    c.last = now;
    ++c.tokens;
    metrics_.generation_token();
    d.text += c.stops->put(c.decoder->put(static_cast<int32_t>(e.token)));
    if (logprobs && !c.stops->stopped()) d.logprobs.push_back(logprob_entry(e));
    if (e.finish) {
      d.text += c.stops->put(c.decoder->flush());
      d.text += c.stops->finish();
      d.finish = c.stops->stopped() ? FinishReason::kStop : *e.finish;
    } else if (c.stops->stopped()) {
      d.finish = FinishReason::kStop;
    }
    if (d.finish) {
      c.finish = d.finish;
      c.sequence->cancel();  // a stop string: the engine frees the row at its next step
      break;
    }
  }
  return d;
}

json CompletionRun::logprob_entry(const TokenEvent& e) const {
  const auto text = [&](int64_t id) {
    return tokenizer_.decode(std::vector<int32_t>{static_cast<int32_t>(id)}, true);
  };
  json top = json::array();
  for (const TokenLogprob& t : e.top) {
    const std::string token = text(t.token);
    top.push_back({{"token", token}, {"logprob", t.logprob}, {"bytes", bytes_of(token)}});
  }
  const std::string token = text(e.token);
  return {
      {"token", token}, {"logprob", e.logprob}, {"bytes", bytes_of(token)}, {"top_logprobs", top}};
}

}  // namespace tfm::serving
