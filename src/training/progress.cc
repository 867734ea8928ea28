#include "training/progress.h"

#include <unistd.h>

#include <cstdio>
#include <string>

namespace tfm::training {
namespace {

std::string clock_text(double seconds) {
  const auto s = static_cast<int64_t>(seconds);
  char text[32];
  if (s >= 3600) {
    std::snprintf(text, sizeof text, "%ld:%02ld:%02ld", static_cast<long>(s / 3600),
                  static_cast<long>(s / 60 % 60), static_cast<long>(s % 60));
  } else {
    std::snprintf(text, sizeof text, "%02ld:%02ld", static_cast<long>(s / 60),
                  static_cast<long>(s % 60));
  }
  return text;
}

}  // namespace

ProgressBar::ProgressBar(int64_t first_step, int64_t total_steps, bool enabled)
    : first_step_(first_step), total_(total_steps), enabled_(enabled && ::isatty(2) != 0) {}

void ProgressBar::update(int64_t step, double loss, double tokens_per_s) {
  if (!enabled_) return;
  constexpr int kWidth = 30;
  const double done = total_ > 0 ? static_cast<double>(step) / static_cast<double>(total_) : 1.0;
  const auto filled = static_cast<int>(done * kWidth);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const int64_t steps_run = step - first_step_;
  const double left =
      steps_run > 0 ? elapsed / static_cast<double>(steps_run) * static_cast<double>(total_ - step)
                    : 0.0;
  std::fprintf(stderr, "\r%3d%% [%s%s] %ld/%ld loss %.4f | %.0f tok/s | %s<%s ",
               static_cast<int>(done * 100), std::string(static_cast<size_t>(filled), '#').c_str(),
               std::string(static_cast<size_t>(kWidth - filled), '.').c_str(),
               static_cast<long>(step), static_cast<long>(total_), loss, tokens_per_s,
               clock_text(elapsed).c_str(), clock_text(left).c_str());
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (drawn_) std::fputc('\n', stderr);
  drawn_ = false;
}

}  // namespace tfm::training
