#include "serving/server.h"

#include <httplib.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <random>

#include "serving/completion_run.h"
#include "serving/openai_request.h"

namespace tfm::serving {
namespace {

using nlohmann::json;

constexpr auto kPoll = std::chrono::milliseconds(50);

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  char hex[33];
  std::snprintf(hex, sizeof hex, "%016llx%016llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(rng()));
  return prefix + std::string(hex);
}

const char* finish_name(FinishReason r) { return r == FinishReason::kStop ? "stop" : "length"; }

json error_body(const ApiError& e) {
  return {{"error",
           {{"message", e.what()},
            {"type", e.type()},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.status}}}};
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(error_body(e).dump(), "application/json");
}

json usage(const CompletionRun& run) {
  return {{"prompt_tokens", run.prompt_tokens()},
          {"completion_tokens", run.completion_tokens()},
          {"total_tokens", run.prompt_tokens() + run.completion_tokens()}};
}

// The completions API's logprobs layout, from the chat layout's entries.
json completion_logprobs(const json& entries, size_t text_offset) {
  json out = {{"tokens", json::array()},
              {"token_logprobs", json::array()},
              {"top_logprobs", json::array()},
              {"text_offset", json::array()}};
  for (const json& e : entries) {
    out["tokens"].push_back(e["token"]);
    out["token_logprobs"].push_back(e["logprob"]);
    json top = json::object();
    for (const json& t : e["top_logprobs"]) top[t["token"].get<std::string>()] = t["logprob"];
    out["top_logprobs"].push_back(top);
    out["text_offset"].push_back(text_offset);
    text_offset += e["token"].get<std::string>().size();
  }
  return out;
}

// What one request's responses share.
struct Reply {
  bool chat;
  std::string id, model;
  int64_t created;

  json chunk(json choices) const {
    return {{"id", id},
            {"object", chat ? "chat.completion.chunk" : "text_completion"},
            {"created", created},
            {"model", model},
            {"choices", std::move(choices)}};
  }
  json choice_chunk(const ChoiceDelta& d, json delta_or_text, size_t text_offset) const {
    json c = {{"index", d.index}, {"finish_reason", nullptr}};
    if (chat) {
      c["delta"] = std::move(delta_or_text);
      c["logprobs"] = d.logprobs.is_null() ? json(nullptr) : json{{"content", d.logprobs}};
    } else {
      c["text"] = std::move(delta_or_text);
      c["logprobs"] =
          d.logprobs.is_null() ? json(nullptr) : completion_logprobs(d.logprobs, text_offset);
    }
    return c;
  }
};

std::string sse(const json& data) { return "data: " + data.dump() + "\n\n"; }

// A completion's server-sent events until [DONE]; false when the client went away (its sequences
// are cancelled with the run).
bool stream(CompletionRun& run, const Reply& reply, bool include_usage,
            std::vector<size_t>& offsets, int n, httplib::DataSink& sink) {
  const auto send = [&](const json& data) {
    const std::string event = sse(data);
    return sink.write(event.data(), event.size());
  };
  if (reply.chat) {
    for (int i = 0; i < n; ++i) {
      ChoiceDelta first{i, "", nullptr, std::nullopt};
      if (!send(reply.chunk(
              {reply.choice_chunk(first, {{"role", "assistant"}, {"content", ""}}, 0)}))) {
        return false;
      }
    }
  }
  while (!run.done()) {
    if (!sink.is_writable()) return false;
    for (const ChoiceDelta& d : run.next(kPoll)) {
      size_t& offset = offsets[static_cast<size_t>(d.index)];
      if (!d.text.empty() || !d.logprobs.is_null()) {
        const json delta = reply.chat ? json{{"content", d.text}} : json(d.text);
        if (!send(reply.chunk({reply.choice_chunk(d, delta, offset)}))) return false;
        offset += d.text.size();
      }
      if (d.finish) {
        ChoiceDelta last{d.index, "", nullptr, std::nullopt};
        json c = reply.choice_chunk(last, reply.chat ? json::object() : json(""), offset);
        c["finish_reason"] = finish_name(*d.finish);
        if (!send(reply.chunk({c}))) return false;
      }
    }
  }
  if (include_usage) {
    json last = reply.chunk(json::array());
    last["usage"] = usage(run);
    if (!send(last)) return false;
  }
  const std::string done = "data: [DONE]\n\n";
  if (!sink.write(done.data(), done.size())) return false;
  sink.done();
  return true;
}

}  // namespace

Server::Server(Engine& engine, const Tokenizer& tokenizer, ServerOptions options,
               std::vector<int64_t> stop_ids)
    : engine_(engine),
      tokenizer_(tokenizer),
      options_(std::move(options)),
      stop_ids_(std::move(stop_ids)),
      http_(std::make_unique<httplib::Server>()) {
  // A thread per connection up to this many: every running and waiting sequence can be streamed.
  const auto threads = static_cast<size_t>(
      std::max(64, engine.options().max_num_seqs + engine.options().max_waiting / 4));
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(options_.max_request_bytes);
  http_->set_read_timeout(options_.timeout_seconds);
  http_->set_write_timeout(options_.timeout_seconds);
  http_->set_keep_alive_max_count(1000);
  // Not the library's SO_REUSEPORT: a second server on a port in use must fail, not share it.
  http_->set_socket_options([this](socket_t sock) {
    const int yes = 1;
    ::setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    listening_socket_ = sock;
  });
  routes();
}

Server::~Server() = default;

int Server::bind() {
  const int port = options_.port == 0 ? http_->bind_to_any_port(options_.host)
                   : http_->bind_to_port(options_.host, options_.port) ? options_.port
                                                                       : -1;
  if (port < 0) {
    throw Error("tfm serve cannot listen on " + options_.host + ":" +
                std::to_string(options_.port) + " (in use, or not an address of this machine)");
  }
  // The library listens with a backlog of 5: clients arriving together past that wait a second
  // for their connection to be retried. Listening again sets the kernel's largest.
  ::listen(listening_socket_, SOMAXCONN);
  return port;
}

void Server::listen() { http_->listen_after_bind(); }
void Server::stop() { http_->stop(); }

void Server::routes() {
  httplib::Server& http = *http_;
  // Errors the library answers itself (unknown routes, oversized bodies) in OpenAI's shape too.
  http.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (!res.body.empty()) return;
    send_error(res, ApiError(res.status, res.status == 404   ? "not found"
                                         : res.status == 413 ? "the request body is too large"
                                                             : "the request cannot be served"));
  });
  http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!options_.api_key || req.path.rfind("/v1/", 0) != 0) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    if (req.get_header_value("Authorization") == "Bearer " + *options_.api_key) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    send_error(res, ApiError(401, "Incorrect API key provided."));
    return httplib::Server::HandlerResponse::Handled;
  });
  http.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool ready = engine_.ready();
    res.status = ready ? 200 : 503;
    res.set_content(json{{"status", ready ? "ok" : "compiling"},
                         {"graphs", engine_.shapes().size()},
                         {"graphs_compiled", engine_.counts().graphs_compiled}}
                        .dump(),
                    "application/json");
  });
  http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics_.text(engine_.counts()), "text/plain; version=0.0.4");
  });
  http.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    const json model = {{"id", options_.served_model_name},
                        {"object", "model"},
                        {"created", unix_time()},
                        {"owned_by", "tfm"},
                        {"max_model_len", engine_.options().max_model_len}};
    res.set_content(json{{"object", "list"}, {"data", json::array({model})}}.dump(),
                    "application/json");
  });
  for (const bool chat : {true, false}) {
    http.Post(chat ? "/v1/chat/completions" : "/v1/completions",
              [this, chat](const httplib::Request& req, httplib::Response& res) {
                try {
                  complete(req.body, chat, res);
                } catch (const ApiError& e) {
                  send_error(res, e);
                } catch (const EngineFull& e) {
                  send_error(res, ApiError(503, e.what()));
                } catch (const Error& e) {
                  send_error(res, ApiError(400, e.what()));
                }
                metrics_.request_done(res.status);
              });
  }
}

std::vector<std::vector<int64_t>> Server::prompt_ids(const CompletionRequest& r) const {
  std::vector<std::vector<int64_t>> prompts;
  const auto encoded = [&](const std::string& text, bool special) {
    const std::vector<int32_t> ids = tokenizer_.encode(text, special);
    return std::vector<int64_t>(ids.begin(), ids.end());
  };
  if (r.chat) {
    std::string text;
    try {
      text = tokenizer_.apply_chat_template(r.messages, /*add_generation_prompt=*/true,
                                            r.enable_thinking);
    } catch (const Error& e) {
      throw ApiError(400, std::string("the chat template cannot be applied: ") + e.what(),
                     "messages");
    }
    prompts.push_back(encoded(text, /*special=*/false));
  }
  for (const CompletionRequest::Prompt& p : r.prompts) {
    prompts.push_back(p.ids.empty() ? encoded(p.text, /*special=*/true) : p.ids);
  }
  const int64_t vocab = engine_.vocab_size();
  for (const std::vector<int64_t>& ids : prompts) {
    for (int64_t id : ids) {
      if (id >= vocab) {
        throw ApiError(400,
                       "token id " + std::to_string(id) + " is outside the vocabulary (" +
                           std::to_string(vocab) + " ids)",
                       "prompt");
      }
    }
    if (ids.empty()) throw ApiError(400, "the prompt is empty", r.chat ? "messages" : "prompt");
  }
  return prompts;
}

void Server::complete(const std::string& body, bool chat, httplib::Response& res) {
  const CompletionRequest r = parse_completion_request(body, chat);
  if (r.model && *r.model != options_.served_model_name) {
    throw ApiError(404, "The model `" + *r.model + "` does not exist.", "model");
  }
  if (!engine_.ready()) throw ApiError(503, "the model's graphs are still compiling");
  const std::vector<std::vector<int64_t>> prompts = prompt_ids(r);
  SamplingParams params = r.sampling;
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  // Unset, max_tokens is what the longest prompt leaves.
  const int64_t room = engine_.options().max_model_len - static_cast<int64_t>(longest);
  params.max_tokens = r.max_tokens.value_or(static_cast<int>(std::max<int64_t>(room, 0)));
  if (!r.ignore_eos) params.stop_token_ids = stop_ids_;
  auto run =
      std::make_shared<CompletionRun>(engine_, tokenizer_, metrics_, r, prompts, std::move(params));
  const auto choices = static_cast<size_t>(run->choices());
  const Reply reply{chat, random_id(chat ? "chatcmpl-" : "cmpl-"), options_.served_model_name,
                    unix_time()};
  if (!r.stream) {
    std::vector<std::string> texts(choices);
    std::vector<json> logprobs(choices, json(nullptr));
    std::vector<const char*> finish(choices, "length");
    while (!run->done()) {
      for (ChoiceDelta& d : run->next(kPoll)) {
        const auto i = static_cast<size_t>(d.index);
        texts[i] += d.text;
        if (!d.logprobs.is_null()) {
          if (logprobs[i].is_null()) logprobs[i] = json::array();
          for (json& e : d.logprobs) logprobs[i].push_back(std::move(e));
        }
        if (d.finish) finish[i] = finish_name(*d.finish);
      }
    }
    json choices = json::array();
    for (size_t i = 0; i < texts.size(); ++i) {
      json c = {{"index", i}, {"finish_reason", finish[i]}};
      if (chat) {
        c["message"] = {{"role", "assistant"}, {"content", texts[i]}};
        c["logprobs"] = logprobs[i].is_null() ? json(nullptr) : json{{"content", logprobs[i]}};
      } else {
        c["text"] = texts[i];
        c["logprobs"] = logprobs[i].is_null() ? json(nullptr) : completion_logprobs(logprobs[i], 0);
      }
      choices.push_back(std::move(c));
    }
    json out = reply.chunk(std::move(choices));
    out["object"] = chat ? "chat.completion" : "text_completion";
    out["usage"] = usage(*run);
    res.set_content(out.dump(), "application/json");
    return;
  }
  const bool include_usage = r.include_usage;
  auto offsets = std::make_shared<std::vector<size_t>>(choices, 0);
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [run, reply, include_usage, offsets, n = run->choices()](size_t, httplib::DataSink& sink) {
        try {
          return stream(*run, reply, include_usage, *offsets, n, sink);
        } catch (const std::exception& e) {
          // Mid-stream the status is sent: the error goes as an event, as vLLM sends it.
          const ApiError* api = dynamic_cast<const ApiError*>(&e);
          const std::string event =
              sse(error_body(api ? *api : ApiError(500, e.what()))) + "data: [DONE]\n\n";
          sink.write(event.data(), event.size());
          sink.done();
          return true;
        }
      });
}

}  // namespace tfm::serving
