#include "serving/stop_strings.h"

#include <algorithm>

namespace tfm::serving {

std::string StopStrings::put(const std::string& text) {
  if (stopped_) return "";
  pending_ += text;
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) first = std::min(first, pending_.find(stop));
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = pending_.substr(0, first);
    pending_.clear();
    return out;
  }
  // The longest end of the pending text that begins some stop string stays.
  size_t keep = 0;
  for (const std::string& stop : stops_) {
    for (size_t n = std::min(stop.size() - 1, pending_.size()); n > keep; --n) {
      if (pending_.compare(pending_.size() - n, n, stop, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  std::string out = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string StopStrings::finish() {
  std::string out = stopped_ ? "" : pending_;
  pending_.clear();
  return out;
}

}  // namespace tfm::serving
