#include "distributed/tcp_store.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>

#include "tfm/error.h"

namespace tfm::distributed {
namespace {

using Clock = std::chrono::steady_clock;
constexpr char kSet = 'S', kGet = 'G', kAdd = 'A';

std::string system_error(const std::string& what) { return what + ": " + std::strerror(errno); }

// Reads exactly n bytes before `deadline`; false on a closed connection, a timeout or an error.
bool read_exact(int fd, void* data, size_t n, Clock::time_point deadline) {
  auto* p = static_cast<char*>(data);
  while (n > 0) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    const int ready = ::poll(&pfd, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return false;
    const ssize_t got = ::recv(fd, p, n, 0);
    if (got <= 0) return false;
    p += got;
    n -= static_cast<size_t>(got);
  }
  return true;
}

bool write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t sent = ::send(fd, p, n, MSG_NOSIGNAL);
    if (sent < 0 && errno == EINTR) continue;
    if (sent <= 0) return false;
    p += sent;
    n -= static_cast<size_t>(sent);
  }
  return true;
}

bool write_blob(int fd, const char* data, uint32_t n) {
  return write_all(fd, &n, sizeof n) && write_all(fd, data, n);
}

bool read_blob(int fd, std::vector<char>& out, Clock::time_point deadline) {
  uint32_t n = 0;
  if (!read_exact(fd, &n, sizeof n, deadline)) return false;
  out.resize(n);
  return read_exact(fd, out.data(), n, deadline);
}

int connect_to(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return -1;
  int fd = -1;
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd >= 0 && ::connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      ::close(fd);
      fd = -1;
    }
  }
  ::freeaddrinfo(found);
  if (fd >= 0) {
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

}  // namespace

// One thread serving every client; a GET for a key not yet set waits in `pending_` until a SET.
class TcpStore::Server {
 public:
  explicit Server(int port) {
    listener_ = ::socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (listener_ < 0) throw Error(system_error("[store] cannot create a socket"));
    const int one = 1, zero = 0;
    ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    ::setsockopt(listener_, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    sockaddr_in6 address{};
    address.sin6_family = AF_INET6;
    address.sin6_addr = in6addr_any;
    address.sin6_port = htons(static_cast<uint16_t>(port));
    if (::bind(listener_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        ::listen(listener_, 128) != 0) {
      const std::string message =
          system_error("[store] cannot listen on port " + std::to_string(port) + " (MASTER_PORT)");
      ::close(listener_);
      throw Error(message);
    }
    if (::pipe2(wake_, O_CLOEXEC) != 0) throw Error(system_error("[store] cannot create a pipe"));
    thread_ = std::thread([this] { serve(); });
  }

  ~Server() {
    const char byte = 0;
    (void)!::write(wake_[1], &byte, 1);
    thread_.join();
    for (int fd : clients_) ::close(fd);
    ::close(listener_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }

 private:
  void serve() {
    for (;;) {
      std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listener_, POLLIN, 0}};
      for (int fd : clients_) fds.push_back({fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0 && errno != EINTR) return;
      if (fds[0].revents != 0) return;
      if (fds[1].revents & POLLIN) {
        const int fd = ::accept4(listener_, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd >= 0) clients_.push_back(fd);
      }
      for (size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents != 0 && !handle(fds[i].fd)) drop(fds[i].fd);
      }
    }
  }

  // One request; false when the client is gone.
  bool handle(int fd) {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    char op = 0;
    std::vector<char> key, value;
    if (!read_exact(fd, &op, 1, deadline) || !read_blob(fd, key, deadline) ||
        !read_blob(fd, value, deadline)) {
      return false;
    }
    const std::string k(key.begin(), key.end());
    if (op == kSet) {
      table_[k] = value;
      for (auto it = pending_.begin(); it != pending_.end();) {
        if (it->first != k) {
          ++it;
          continue;
        }
        write_blob(it->second, value.data(), static_cast<uint32_t>(value.size()));
        it = pending_.erase(it);
      }
      return write_blob(fd, nullptr, 0);
    }
    if (op == kGet) {
      const auto found = table_.find(k);
      if (found == table_.end()) {
        pending_.emplace_back(k, fd);
        return true;
      }
      return write_blob(fd, found->second.data(), static_cast<uint32_t>(found->second.size()));
    }
    if (op == kAdd && value.size() == sizeof(int64_t)) {
      int64_t delta = 0, current = 0;
      std::memcpy(&delta, value.data(), sizeof delta);
      std::vector<char>& slot = table_[k];
      if (slot.size() == sizeof current) std::memcpy(&current, slot.data(), sizeof current);
      current += delta;
      slot.resize(sizeof current);
      std::memcpy(slot.data(), &current, sizeof current);
      return write_blob(fd, slot.data(), static_cast<uint32_t>(slot.size()));
    }
    return false;
  }

  void drop(int fd) {
    ::close(fd);
    std::erase(clients_, fd);
    std::erase_if(pending_, [fd](const auto& p) { return p.second == fd; });
  }

  int listener_ = -1;
  int wake_[2] = {-1, -1};
  std::thread thread_;
  std::vector<int> clients_;
  std::map<std::string, std::vector<char>> table_;
  std::vector<std::pair<std::string, int>> pending_;
};

TcpStore::TcpStore(const std::string& host, int port, bool serve, std::chrono::milliseconds timeout)
    : where_(host + ":" + std::to_string(port)), timeout_(timeout) {
  if (serve) server_ = std::make_unique<Server>(port);
  const auto deadline = Clock::now() + timeout;
  while ((fd_ = connect_to(host, port)) < 0) {
    if (Clock::now() > deadline) {
      throw Error("[store] no rendezvous store answered at " + where_ + " within " +
                  std::to_string(timeout.count()) + " ms (is rank 0 running? MASTER_ADDR and " +
                  "MASTER_PORT must name rank 0's node)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

TcpStore::~TcpStore() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<char> TcpStore::request(char op, const std::string& key, const std::vector<char>& value,
                                    std::chrono::milliseconds timeout) {
  std::vector<char> reply;
  if (!write_all(fd_, &op, 1) || !write_blob(fd_, key.data(), static_cast<uint32_t>(key.size())) ||
      !write_blob(fd_, value.data(), static_cast<uint32_t>(value.size())) ||
      !read_blob(fd_, reply, Clock::now() + timeout)) {
    throw Error("[store] '" + key + "' from the store at " + where_ + ": no answer within " +
                std::to_string(timeout.count()) + " ms (a rank has not arrived or has died)");
  }
  return reply;
}

void TcpStore::set(const std::string& key, const std::vector<char>& value) {
  request(kSet, key, value, timeout_);
}

std::vector<char> TcpStore::get(const std::string& key) { return request(kGet, key, {}, timeout_); }

void TcpStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void TcpStore::wait(const std::vector<std::string>& keys,
                    const std::chrono::milliseconds& timeout) {
  for (const std::string& key : keys) request(kGet, key, {}, timeout);
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  std::vector<char> value(sizeof delta);
  std::memcpy(value.data(), &delta, sizeof delta);
  const std::vector<char> reply = request(kAdd, key, value, timeout_);
  int64_t result = 0;
  std::memcpy(&result, reply.data(), std::min(reply.size(), sizeof result));
  return result;
}

}  // namespace tfm::distributed
