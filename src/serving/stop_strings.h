// Stop strings cut from generated text, as OpenAI does: the text ends before the first one, which
// is left out. While streaming, text that may be the start of a stop string is held back until
// the next pieces decide it.
#pragma once

#include <string>
#include <vector>

namespace tfm::serving {

class StopStrings {
 public:
  explicit StopStrings(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Adds newly generated text; returns what may be sent now.
  std::string put(const std::string& text);
  // The sequence ended: whatever was held back.
  std::string finish();
  // A stop string was found: nothing more comes out.
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // generated text not yet sent
  bool stopped_ = false;
};

}  // namespace tfm::serving
