#include "training/lr_schedule.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <numbers>
#include <string>
#include <utility>

#include "tfm/error.h"

namespace tfm::training {
namespace {

// get_scheduler's default for "cosine": half a wave, from 1 down to 0.
constexpr double kCosineCycles = 0.5;

}  // namespace

LrSchedule::LrSchedule(std::string_view name, int64_t num_warmup_steps, int64_t num_training_steps)
    : warmup_(num_warmup_steps), total_(num_training_steps) {
  static constexpr std::array<std::pair<std::string_view, Kind>, 4> kKinds = {{
      {"constant", Kind::kConstant},
      {"constant_with_warmup", Kind::kConstantWithWarmup},
      {"linear", Kind::kLinear},
      {"cosine", Kind::kCosine},
  }};
  const auto it = std::find_if(kKinds.begin(), kKinds.end(),
                               [&](const auto& kind) { return kind.first == name; });
  if (it == kKinds.end()) {
    std::string accepted;
    for (const auto& kind : kKinds)
      accepted += (accepted.empty() ? "" : ", ") + std::string(kind.first);
    throw Error("unknown learning-rate schedule '" + std::string(name) +
                "' (accepted: " + accepted + ")");
  }
  kind_ = it->second;
  if (warmup_ < 0 || total_ < 0) {
    throw Error("learning-rate schedule '" + std::string(name) + "': negative step count (" +
                std::to_string(warmup_) + " warmup, " + std::to_string(total_) + " training)");
  }
}

std::string_view LrSchedule::name() const {
  switch (kind_) {
    case Kind::kConstant:
      return "constant";
    case Kind::kConstantWithWarmup:
      return "constant_with_warmup";
    case Kind::kLinear:
      return "linear";
    case Kind::kCosine:
      return "cosine";
  }
  return "";
}

// The arithmetic follows transformers' lambdas operation for operation, so the values are the
// same doubles.
double LrSchedule::multiplier(int64_t step) const {
  if (kind_ == Kind::kConstant) return 1.0;
  if (step < warmup_) {
    return static_cast<double>(step) / static_cast<double>(std::max<int64_t>(1, warmup_));
  }
  const double decay_steps = static_cast<double>(std::max<int64_t>(1, total_ - warmup_));
  switch (kind_) {
    case Kind::kConstant:
    case Kind::kConstantWithWarmup:
      return 1.0;
    case Kind::kLinear:
      return std::max(0.0, static_cast<double>(total_ - step) / decay_steps);
    case Kind::kCosine: {
      // Past num_training_steps the wave rises again, as transformers' does.
      const double progress = static_cast<double>(step - warmup_) / decay_steps;
      return std::max(0.0,
                      0.5 * (1.0 + std::cos(std::numbers::pi * kCosineCycles * 2.0 * progress)));
    }
  }
  return 1.0;
}

}  // namespace tfm::training
