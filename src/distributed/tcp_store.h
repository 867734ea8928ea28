// The rendezvous store of a distributed job, as torch's TCPStore: rank 0 serves a key-value table
// at MASTER_ADDR:MASTER_PORT and every rank (rank 0 too) is a client. Ranks publish their
// addresses in it and wait for each other's; every wait has a deadline, so a peer that never comes
// gives an error naming the keys it did not publish, never a hang.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace tfm::distributed {

class TcpStore : public gloo::rendezvous::Store {
 public:
  // `serve`: run the server (rank 0). Clients retry connecting until `timeout`.
  TcpStore(const std::string& host, int port, bool serve, std::chrono::milliseconds timeout);
  ~TcpStore() override;
  TcpStore(const TcpStore&) = delete;
  TcpStore& operator=(const TcpStore&) = delete;

  void set(const std::string& key, const std::vector<char>& value) override;
  // Waits up to the store's timeout for `key` to be set.
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;
  // Adds `delta` to the integer at `key` (0 when unset) and returns the new value.
  int64_t add(const std::string& key, int64_t delta);

 private:
  class Server;
  std::vector<char> request(char op, const std::string& key, const std::vector<char>& value,
                            std::chrono::milliseconds timeout);

  std::unique_ptr<Server> server_;
  int fd_ = -1;
  std::string where_;  // "host:port", for messages
  std::chrono::milliseconds timeout_;
};

}  // namespace tfm::distributed
