#include "cli/id_list.h"

#include <charconv>

#include "tfm/error.h"

namespace tfm::cli {

std::vector<int64_t> parse_id_list(const std::string& text) {
  std::vector<int64_t> ids;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    int64_t id = 0;
    const char* first = text.data() + pos;
    const char* last = text.data() + comma;
    auto [end, ec] = std::from_chars(first, last, id);
    if (ec != std::errc() || end != last || id < 0) {
      throw Error("ids '" + text + "': expected comma-separated non-negative integers");
    }
    ids.push_back(id);
    pos = comma + 1;
  }
  return ids;
}

std::string json_id_list(const std::vector<int64_t>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

}  // namespace tfm::cli
