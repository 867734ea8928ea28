#include "training/dataset_examples.h"

namespace tfm::training {

std::string Examples::where(size_t i) const {
  return i < lines.size() ? source + ":" + std::to_string(lines[i]) : source;
}

}  // namespace tfm::training
