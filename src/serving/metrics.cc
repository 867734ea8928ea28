#include "serving/metrics.h"

#include <sstream>

namespace tfm::serving {
namespace {

void metric(std::ostringstream& out, const char* name, const char* type, const char* help,
            const std::string& samples) {
  out << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n" << samples;
}

std::string sample(const std::string& name, double value) {
  std::ostringstream out;
  out << name << " " << value << "\n";
  return out.str();
}

// A metric of one sample, named as the metric.
void single(std::ostringstream& out, const char* name, const char* type, const char* help,
            double value) {
  metric(out, name, type, help, sample(name, value));
}

}  // namespace

void Metrics::request_done(int status) {
  std::lock_guard lock(mutex_);
  (status < 400 ? requests_ok_ : requests_failed_) += 1;
}

void Metrics::prompt_tokens(int64_t count) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ += count;
}

void Metrics::generation_token() {
  std::lock_guard lock(mutex_);
  ++generation_tokens_;
}

void Metrics::first_token(double seconds) {
  std::lock_guard lock(mutex_);
  first_token_sum_ += seconds;
  ++first_token_count_;
}

void Metrics::inter_token(double seconds) {
  std::lock_guard lock(mutex_);
  inter_token_sum_ += seconds;
  ++inter_token_count_;
}

std::string Metrics::text(const EngineCounts& engine) const {
  std::lock_guard lock(mutex_);
  std::ostringstream out;
  metric(out, "tfm_requests_total", "counter", "Completion requests answered, by outcome.",
         "tfm_requests_total{outcome=\"success\"} " + std::to_string(requests_ok_) +
             "\ntfm_requests_total{outcome=\"error\"} " + std::to_string(requests_failed_) + "\n");
  single(out, "tfm_prompt_tokens_total", "counter", "Prompt tokens processed.",
         static_cast<double>(prompt_tokens_));
  single(out, "tfm_generation_tokens_total", "counter", "Tokens generated.",
         static_cast<double>(generation_tokens_));
  metric(
      out, "tfm_time_to_first_token_seconds", "summary",
      "From a sequence's arrival to its first token.",
      sample("tfm_time_to_first_token_seconds_sum", first_token_sum_) +
          sample("tfm_time_to_first_token_seconds_count", static_cast<double>(first_token_count_)));
  metric(
      out, "tfm_inter_token_latency_seconds", "summary", "Between a sequence's tokens.",
      sample("tfm_inter_token_latency_seconds_sum", inter_token_sum_) +
          sample("tfm_inter_token_latency_seconds_count", static_cast<double>(inter_token_count_)));
  single(out, "tfm_num_requests_running", "gauge", "Sequences holding a KV cache row.",
         engine.running);
  single(out, "tfm_num_requests_waiting", "gauge", "Sequences waiting for a row.", engine.waiting);
  single(out, "tfm_sequences_cancelled_total", "counter",
         "Sequences dropped before their end: the client went away or a stop string ended them.",
         engine.cancelled);
  single(out, "tfm_cache_compactions_total", "counter",
         "Times the sequences' KV cache entries moved back to the cache's start.",
         engine.compactions);
  single(out, "tfm_graphs_compiled_total", "counter", "Graphs compiled (at warm-up only).",
         engine.graphs_compiled);
  single(out, "tfm_graph_cache_hits_total", "counter",
         "Graphs loaded from the compiler's on-disk cache instead of compiled.",
         engine.graphs_loaded);
  return out.str();
}

}  // namespace tfm::serving
