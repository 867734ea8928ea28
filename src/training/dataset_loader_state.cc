// The loader position as JSON, for the checkpoint's trainer state.
#include <nlohmann/json.hpp>

#include "tfm/error.h"
#include "training/dataset_loader.h"

namespace tfm::training {

nlohmann::json DataLoaderState::to_json() const {
  return {{"epoch", epoch},        {"batch_index", batch_index},
          {"num_rows", num_rows},  {"batch_size", batch_size},
          {"seed", seed},          {"shuffle", shuffle},
          {"drop_last", drop_last}};
}

DataLoaderState DataLoaderState::from_json(const nlohmann::json& json) {
  const auto field = [&](const char* key) -> const nlohmann::json& {
    if (!json.is_object() || !json.contains(key)) {
      throw Error(std::string("data loader state: no \"") + key + "\" in " + json.dump());
    }
    return json.at(key);
  };
  const auto integer = [&](const char* key) -> const nlohmann::json& {
    const nlohmann::json& v = field(key);
    if (!v.is_number_integer()) {
      throw Error(std::string("data loader state: \"") + key + "\" must be an integer, got " +
                  v.dump());
    }
    return v;
  };
  const auto boolean = [&](const char* key) {
    const nlohmann::json& v = field(key);
    if (!v.is_boolean()) {
      throw Error(std::string("data loader state: \"") + key + "\" must be true or false, got " +
                  v.dump());
    }
    return v.get<bool>();
  };
  DataLoaderState s;
  s.epoch = integer("epoch").get<int64_t>();
  s.batch_index = integer("batch_index").get<int64_t>();
  s.num_rows = integer("num_rows").get<int64_t>();
  s.batch_size = integer("batch_size").get<int64_t>();
  s.seed = integer("seed").get<uint64_t>();
  s.shuffle = boolean("shuffle");
  s.drop_last = boolean("drop_last");
  return s;
}

}  // namespace tfm::training
