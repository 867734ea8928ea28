// A bench's main around its body: what the body throws (a bad path, config or flag) is reported on
// stderr as "NAME: message" with exit status 1, not left to abort the process uncaught.
#pragma once

#include <cstdio>
#include <exception>

namespace tfm::bench {

inline int report_errors(const char* name, int (*body)(int argc, char** argv), int argc,
                         char** argv) {
  try {
    return body(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    return 1;
  }
}

}  // namespace tfm::bench
