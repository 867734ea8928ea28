#include "tfm/log.h"

#include <atomic>
#include <iostream>

namespace tfm {
namespace {

std::atomic<LogLevel> g_level{LogLevel::kInfo};

}  // namespace

void set_log_level(LogLevel level) { g_level = level; }
LogLevel log_level() { return g_level; }

void log_info(const std::string& message) {
  if (g_level >= LogLevel::kInfo) std::cerr << "[tfm] " << message << "\n";
}

void log_warn(const std::string& message) {
  if (g_level >= LogLevel::kWarn) std::cerr << "[tfm] warning: " << message << "\n";
}

}  // namespace tfm
