// Messages tfm prints on stderr as it works (compilations, device choices). Quiet for tests and
// for programs that print their own.
#pragma once

#include <string>

namespace tfm {

enum class LogLevel { kQuiet, kWarn, kInfo };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_info(const std::string& message);
void log_warn(const std::string& message);

}  // namespace tfm
