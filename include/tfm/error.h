// Errors that reach the user. Every message names what was being done (a file, a tensor, an op)
// and what was wrong, so a failure can be acted on without a debugger.
#pragma once

#include <stdexcept>
#include <string>

namespace tfm {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Raised when a device allocation fails; carries what was asked and what was free.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

}  // namespace tfm

// Internal invariant checks that must hold in release builds too: they turn a would-be crash
// into an Error that says where it happened.
#define TFM_CHECK(cond, message)                                            \
  do {                                                                      \
    if (!(cond)) throw ::tfm::Error(std::string(message) + " [" #cond "]"); \
  } while (0)
