// tfm serve's HTTP side: OpenAI's /v1/chat/completions, /v1/completions and /v1/models, with
// /health and /metrics, on cpp-httplib (keep-alive, bounded request size, timeouts).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "serving/engine.h"
#include "serving/metrics.h"
#include "serving/openai_request.h"
#include "tfm/tokenizer.h"

namespace httplib {
class Server;
struct Response;
}  // namespace httplib

namespace tfm::serving {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;
  std::optional<std::string> api_key =
      std::nullopt;  // required as "Authorization: Bearer KEY" on /v1/
  std::string served_model_name = "model";
  size_t max_request_bytes = 8 << 20;
  int timeout_seconds = 60;  // reading a request, writing a response
};

class Server {
 public:
  // `stop_ids`: the ids that end a sequence (generation_config.json's EOS, else config.json's).
  Server(Engine& engine, const Tokenizer& tokenizer, ServerOptions options,
         std::vector<int64_t> stop_ids);
  ~Server();

  // Binds host:port (throws Error naming them when it cannot); port 0 takes a free one.
  int bind();
  // Serves until stop(), from any thread.
  void listen();
  void stop();

 private:
  void routes();
  // A completion request's answer, whole or as server-sent events.
  void complete(const std::string& body, bool chat, httplib::Response& res);
  std::vector<std::vector<int64_t>> prompt_ids(const CompletionRequest& request) const;

  Engine& engine_;
  const Tokenizer& tokenizer_;
  ServerOptions options_;
  std::vector<int64_t> stop_ids_;
  Metrics metrics_;
  std::unique_ptr<httplib::Server> http_;
  int listening_socket_ = -1;
};

}  // namespace tfm::serving
