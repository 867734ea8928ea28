#include "serving/sequence.h"

namespace tfm::serving {

void Sequence::push(TokenEvent event) {
  {
    std::lock_guard lock(mutex_);
    events_.push_back(std::move(event));
  }
  ready_.notify_all();
}

void Sequence::fail(std::string message) {
  {
    std::lock_guard lock(mutex_);
    error_ = std::move(message);
  }
  ready_.notify_all();
}

std::vector<TokenEvent> Sequence::take(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  ready_.wait_for(lock, timeout, [&] { return !events_.empty() || error_.has_value(); });
  std::vector<TokenEvent> out(std::make_move_iterator(events_.begin()),
                              std::make_move_iterator(events_.end()));
  events_.clear();
  return out;
}

std::optional<std::string> Sequence::error() const {
  std::lock_guard lock(mutex_);
  return error_;
}

}  // namespace tfm::serving
