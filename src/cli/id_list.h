// "1,2,3" <-> ids, for commands that take or print token ids.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tfm::cli {

std::vector<int64_t> parse_id_list(const std::string& text);  // throws tfm::Error on bad input
std::string json_id_list(const std::vector<int64_t>& ids);    // "[1, 2, 3]"

}  // namespace tfm::cli
